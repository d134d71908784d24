//! A bundle's `config.json`, as `vetto-shim create` reads it: the bytes are written to a
//! bundle directory and handed to `create`'s first half ([`vetto::oci::fuzzing::prepare`]:
//! read and parse, the typed OCI model, choose the policy, harden, resources, hooks,
//! seccomp compilation, the shadow bundle).
//!
//! Each input runs twice: with `--vetto-policy default` (every bundle hardened) and without
//! (the annotation `dev.vetto.policy` decides, none means a plain runtime). The host
//! configuration is a private one with auditing off, so nothing is recorded anywhere; the
//! state root and the bundle are private directories under the temporary directory.
//!
//! Invariants: an error, never a panic; an accepted bundle's shadow `config.json` is one the
//! typed OCI model reads back (libcontainer would load it).

#![no_main]

use std::path::PathBuf;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;

struct Dirs {
    bundle: PathBuf,
    root: PathBuf,
}

fn dirs() -> &'static Dirs {
    static DIRS: OnceLock<Dirs> = OnceLock::new();
    DIRS.get_or_init(|| {
        let base = std::env::temp_dir().join(format!("vetto-fuzz-oci-{}", std::process::id()));
        let bundle = base.join("bundle");
        let root = base.join("state");
        let home = base.join("home");
        for d in [&bundle.join("rootfs"), &root, &home] {
            std::fs::create_dir_all(d).expect("creating the fuzz directories");
        }
        let conf = base.join("shim.toml");
        std::fs::write(&conf, "[audit]\nenabled = false\n").expect("writing shim.toml");
        // Set once, before any thread of ours reads the environment.
        std::env::set_var("VETTO_SHIM_CONFIG", &conf);
        std::env::set_var("HOME", &home);
        Dirs {
            bundle: bundle.canonicalize().expect("bundle"),
            root: root.canonicalize().expect("root"),
        }
    })
}

fuzz_target!(|data: &[u8]| {
    let d = dirs();
    std::fs::write(d.bundle.join("config.json"), data).expect("writing config.json");
    for policy in [Some("default"), None] {
        let shadow = d.root.join(".vetto").join("fuzz");
        let _ = std::fs::remove_dir_all(&shadow);
        let r = vetto::oci::fuzzing::prepare("fuzz", &d.bundle, &d.root, policy, None, false);
        if std::env::var_os("VETTO_FUZZ_DEBUG").is_some() {
            eprintln!("policy {policy:?}: {r:?}");
        }
        if let Ok(dir) = r {
            let text = std::fs::read(dir.join("config.json")).expect("the shadow config.json");
            let typed: Result<oci_spec::runtime::Spec, _> = serde_json::from_slice(&text);
            assert!(
                typed.is_ok(),
                "the shadow bundle does not load: {:?}\n{}",
                typed.err(),
                String::from_utf8_lossy(&text)
            );
        }
        let _ = std::fs::remove_dir_all(&shadow);
    }
});
