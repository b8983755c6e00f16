#!/usr/bin/env bash
# Builds the release `garuda` as it is shipped and benchmarked, and prints its absolute path
# (the last line of its output; cargo's own messages go to stderr).
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
#
# Both with fat link-time optimisation into one code unit (unless the caller sets
# CARGO_PROFILE_RELEASE_LTO or CARGO_PROFILE_RELEASE_CODEGEN_UNITS): a smaller binary (text
# 15.4 -> 12.0 MB) with fewer pages to relocate at each start; paired, `garuda sandbox` 0.1-0.2
# ms faster per run (docs/benchmarks.md, "Fat LTO for the shipped binary"), for about a
# minute and a half more of linking per build.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_PROFILE_RELEASE_LTO="${CARGO_PROFILE_RELEASE_LTO:-fat}"
export CARGO_PROFILE_RELEASE_CODEGEN_UNITS="${CARGO_PROFILE_RELEASE_CODEGEN_UNITS:-1}"

# The binary's path as cargo reports it (wherever the target folder is: CARGO_TARGET_DIR,
# CARGO_BUILD_TARGET_DIR or a config's build.target-dir), absolute.
built_path() {
  sed -n 's/.*"executable":"\([^"]*\/garuda\)".*/\1/p' | tail -1
}

host=$(rustc -vV | sed -n 's/^host: //p')
case "$host" in
  *-linux-gnu)
    command -v readelf >/dev/null || { echo "build-release: readelf (binutils) is needed to check the binary" >&2; exit 1; }
    bin=$(RUSTFLAGS="${RUSTFLAGS:-} -C target-feature=+crt-static" \
      cargo build --release -p garuda --bin garuda --target "$host" \
        --message-format=json-render-diagnostics "$@" | built_path)
    [ -n "$bin" ] || { echo "build-release: cargo named no garuda binary" >&2; exit 1; }
    # Refuse a binary that is not what is shipped rather than hand out a slower or weaker one
    # under its name: CARGO_ENCODED_RUSTFLAGS, when set, replaces RUSTFLAGS (a dynamic
    # loader would be named), and a relocation model in the caller's flags could make it
    # load at a fixed address (type EXEC instead of DYN).
    headers=$(readelf -hlW "$bin")
    if grep -q 'Requesting program interpreter' <<<"$headers"; then
      echo "build-release: $bin is dynamically linked (is CARGO_ENCODED_RUSTFLAGS set?)" >&2
      exit 1
    fi
    if ! grep -Eq 'Type:[[:space:]]+DYN' <<<"$headers" || ! grep -q 'GNU_RELRO' <<<"$headers"; then
      echo "build-release: $bin is not position-independent with RELRO" >&2
      exit 1
    fi
    ;;
  *)
    bin=$(cargo build --release -p garuda --bin garuda \
      --message-format=json-render-diagnostics "$@" | built_path)
    [ -n "$bin" ] || { echo "build-release: cargo named no garuda binary" >&2; exit 1; }
    ;;
esac
echo "$bin"
