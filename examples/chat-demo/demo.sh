#!/bin/sh
# The chat against a scripted model (no API key, no network): the model reads README.md,
# edits it (asked: y), runs a staged command (its change asked: a), and finishes.
#   sh examples/chat-demo/demo.sh line   the line-mode transcript (garuda < input)
#   sh examples/chat-demo/demo.sh tmux   the terminal UI in tmux, its screen captured
# Needs the release binaries: cargo build --release -p garuda -p garuda-modelserver
set -eu
mode=${1:-line}
here=$(cd "$(dirname "$0")" && pwd)
bin=${GARUDA_TARGET:-$here/../../target/release}
work=$(mktemp -d /var/tmp/garuda-chat-demo.XXXXXX)
trap 'kill "$server" 2>/dev/null || true; rm -rf "$work"' EXIT
mkdir -p "$work/home/.garuda" "$work/project"
cd "$work/project"
git init -q
printf 'hello\nworld\n' > README.md
"$bin/garuda-modelserver" "$here/model.json" > "$work/url" 2> "$work/server.log" &
server=$!
while [ ! -s "$work/url" ]; do sleep 0.05; done
export HOME="$work/home" ANTHROPIC_API_KEY=sk-demo ANTHROPIC_BASE_URL="$(cat "$work/url")"
unset GARUDA_HOME GARUDA_MODEL
case $mode in
line)
    printf 'fix the greeting in README.md\ny\na\n/audit verify\n' | "$bin/garuda" --staged
    ;;
tmux)
    tmux -L garuda-demo new-session -d -x 100 -y 32 \
        "env HOME='$HOME' ANTHROPIC_API_KEY=sk-demo ANTHROPIC_BASE_URL='$ANTHROPIC_BASE_URL' '$bin/garuda' --staged"
    sleep 1.5
    tmux -L garuda-demo send-keys 'fix the greeting in README.md' Enter
    sleep 2.5
    tmux -L garuda-demo send-keys y
    sleep 2.5
    tmux -L garuda-demo capture-pane -p
    tmux -L garuda-demo send-keys a
    sleep 2.5
    tmux -L garuda-demo capture-pane -p
    tmux -L garuda-demo send-keys C-c C-c
    sleep 0.5
    tmux -L garuda-demo kill-server 2>/dev/null || true
    ;;
*)
    echo "usage: demo.sh line|tmux" >&2
    exit 2
    ;;
esac
