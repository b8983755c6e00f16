//! Builds `init/garuda_init.rs`, the sandboxes' small start-up program, with the same `rustc`
//! and for the same target as the supervisor, and leaves it at `$OUT_DIR/garuda-init` for
//! `sys::INIT_PROGRAM` to embed. It uses neither the standard library nor libc and is linked
//! as a static position-independent executable that relocates itself (see its header).
//!
//! It also packs the `garuda` binary's relative relocations (`-z pack-relative-relocs`, on
//! Linux with glibc).
//!
//! Only Linux on x86-64 and AArch64 has it (the executors that run it are Linux's); elsewhere
//! the cfg `garuda_init` is unset and asking for the program is a setup error.

use std::env;
use std::path::PathBuf;
use std::process::Command;

fn main() {
    println!("cargo::rustc-check-cfg=cfg(garuda_init)");
    println!("cargo::rerun-if-changed=init/garuda_init.rs");
    println!("cargo::rerun-if-changed=build.rs");
    let os = env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    let arch = env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_default();
    // The `garuda` binary's relative relocations packed as a bitmap (DT_RELR: GNU ld 2.38,
    // glibc 2.36 or later): about 26,400 of them were 638 KB that the dynamic loader read from
    // the file at every start, before any of Garuda's code ran; packed they are 8 KB
    // (docs/benchmarks.md, "Relative relocations packed"). Here rather than in a cargo config,
    // so that the option goes wherever the package is built. The start-up program below is
    // linked with `nopack-relative-relocs`: its own relocator reads RELA.
    // `GARUDA_NO_PACKED_RELOCS=1` leaves them as they were: for a linker older than GNU ld
    // 2.38 (which ignores the option with a warning) or a binary that must load on a glibc
    // older than 2.36 (which refuses it: "GLIBC_ABI_DT_RELR not found").
    println!("cargo::rerun-if-env-changed=GARUDA_NO_PACKED_RELOCS");
    let packed = env::var_os("GARUDA_NO_PACKED_RELOCS").is_none_or(|v| v.is_empty() || v == "0");
    if packed && os == "linux" && env::var("CARGO_CFG_TARGET_ENV").is_ok_and(|e| e == "gnu") {
        println!("cargo::rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
    }
    if os != "linux" || !matches!(arch.as_str(), "x86_64" | "aarch64") {
        return;
    }
    let (Some(out_dir), Some(rustc), Some(target)) = (
        env::var_os("OUT_DIR"),
        env::var_os("RUSTC"),
        env::var_os("TARGET"),
    ) else {
        panic!("cargo did not set OUT_DIR, RUSTC and TARGET for the build script");
    };
    let out = PathBuf::from(out_dir).join("garuda-init");
    // Not the crate's RUSTFLAGS: a sanitizer or coverage flag (cargo fuzz) would pull in a
    // runtime this program cannot have.
    let status = Command::new(rustc)
        .args([
            "--edition",
            "2024",
            "--crate-type",
            "bin",
            "--crate-name",
            "garuda_init",
        ])
        .arg("--target")
        .arg(&target)
        .args([
            "-C",
            "opt-level=s",
            "-C",
            "panic=abort",
            "-C",
            "relocation-model=pie",
            "-C",
            "target-feature=+crt-static",
            "-C",
            "link-arg=-nostartfiles",
            "-C",
            "link-arg=-nostdlib",
            // Plain RELA relocations, the only kind the program applies to itself.
            "-C",
            "link-arg=-Wl,-z,nopack-relative-relocs",
            "-C",
            "debuginfo=0",
            "-C",
            "strip=symbols",
            "-D",
            "warnings",
            "init/garuda_init.rs",
            "-o",
        ])
        .arg(&out)
        .status();
    match status {
        Ok(s) if s.success() => println!("cargo::rustc-cfg=garuda_init"),
        Ok(s) => panic!("building init/garuda_init.rs failed ({s})"),
        Err(e) => panic!("running rustc for init/garuda_init.rs: {e}"),
    }
}
