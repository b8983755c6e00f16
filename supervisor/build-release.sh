#!/usr/bin/env bash
# Builds the release `garuda` as it is shipped and benchmarked, and prints its absolute path
# (last line).
#
#     supervisor/build-release.sh [more `cargo build` arguments]
#
# On Linux with glibc the binary is a static position-independent executable (static-pie):
# glibc, libm and the unwinder are linked in, no dynamic loader runs at its start, and it still
# loads at a random address (ASLR). Each `garuda sandbox` starts a new process, and the dynamic
# loader's work (mapping libc, libm and libgcc_s, resolving their symbols, libgcc's CPU probe)
# was about 0.7 ms of every run on the benchmark machine (docs/benchmarks.md, "A static
# release binary"). What it costs: the glibc inside is the build machine's, so a glibc security
# update needs a rebuild; name lookups (`getaddrinfo`, `getpwuid_r`) through an NSS module other
# than glibc's own `files` and `dns` load that module from the system's glibc, which works when
# it is the glibc the binary was built with (docs/threat-model.md).
#
# `cargo build --release` alone still builds the dynamically linked binary in target/release:
# a crate-wide `crt-static` flag would also apply to the workspace's procedural macros, which
# cannot be built so; `--target` keeps it to the binary's own build.
# Elsewhere (macOS) this is `cargo build --release -p garuda`.
set -euo pipefail
cd "$(dirname "$0")/.."

host=$(rustc -vV | sed -n 's/^host: //p')
target_dir=${CARGO_TARGET_DIR:-target}
# The path printed is absolute: a benchmark or test reading it runs from another folder.
case "$target_dir" in /*) ;; *) target_dir="$(pwd)/$target_dir" ;; esac
case "$host" in
  *-linux-gnu)
    RUSTFLAGS="${RUSTFLAGS:-} -C target-feature=+crt-static" \
      cargo build --release -p garuda --target "$host" "$@"
    bin="$target_dir/$host/release/garuda"
    # CARGO_ENCODED_RUSTFLAGS, when set, replaces RUSTFLAGS: refuse a binary that still names
    # a dynamic loader rather than hand out a slower one under the shipped name.
    if readelf -lW "$bin" | grep -q 'Requesting program interpreter'; then
      echo "build-release: $bin is dynamically linked (is CARGO_ENCODED_RUSTFLAGS set?)" >&2
      exit 1
    fi
    ;;
  *)
    cargo build --release -p garuda "$@"
    bin="$target_dir/release/garuda"
    ;;
esac
echo "$bin"
