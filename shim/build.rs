//! Code layout of the release binaries (issue 18).
//!
//! A page of the binary's code that a process runs for the first time is a page fault, and on
//! the machines vetto is measured on a fault costs 2-3 µs. `vetto run` is a chain of processes
//! that each fault in the code they run: the front and the supervisor, the audit writer, and
//! libcontainer's intermediate and init processes (clones, whose file-backed code mappings a
//! fork does not copy). With the functions a session runs scattered over the 7 MB of code,
//! each of them touched ~35-150 of its 64 KiB fault-around windows. `layout/vetto.order`
//! lists those functions, the init's first (see `scripts/layout.sh`, which makes it from a
//! profile of real sessions); the linker places them first and together, in that order.
//!
//! The names in the list are the exact (hashed) symbol names of one toolchain and
//! `Cargo.lock`: after a dependency or compiler change a name that no longer exists is
//! skipped (silently, `--no-warn-symbol-ordering`), so a stale list costs speed, never
//! correctness; `make bench` says how much of it still matches, and `make layout` makes it
//! anew. Nothing about the code changes: the same functions, placed elsewhere.
//!
//! Only for release builds of x86_64 Linux (GNU) with a toolchain that links with its own
//! lld (Rust 1.90 and later): the option is lld's. `VETTO_CODE_LAYOUT=off` leaves it out
//! (a linker other than lld configured by hand).

use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-env-changed=VETTO_CODE_LAYOUT");
    let order = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_default())
        .join("layout")
        .join("vetto.order");
    println!("cargo:rerun-if-changed={}", order.display());
    let var = |k: &str| std::env::var(k).unwrap_or_default();
    let wanted = var("VETTO_CODE_LAYOUT") != "off"
        && var("PROFILE") == "release"
        && var("CARGO_CFG_TARGET_ARCH") == "x86_64"
        && var("CARGO_CFG_TARGET_OS") == "linux"
        && var("CARGO_CFG_TARGET_ENV") == "gnu"
        && rustc_links_with_lld()
        && order.is_file();
    if wanted {
        println!(
            "cargo:rustc-link-arg-bins=-Wl,--symbol-ordering-file={}",
            order.display()
        );
        println!("cargo:rustc-link-arg-bins=-Wl,--no-warn-symbol-ordering");
    }
}

/// The compiler is Rust 1.90 or later, whose x86_64 Linux (GNU) target links with its own lld.
fn rustc_links_with_lld() -> bool {
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let Ok(out) = std::process::Command::new(rustc).arg("-vV").output() else {
        return false;
    };
    let text = String::from_utf8_lossy(&out.stdout);
    let Some(version) = text
        .lines()
        .find_map(|l| l.strip_prefix("release: "))
        .map(str::trim)
    else {
        return false;
    };
    let mut parts = version
        .split(['.', '-'])
        .map(|p| p.parse::<u32>().unwrap_or(0));
    let (major, minor) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    (major, minor) >= (1, 90)
}
