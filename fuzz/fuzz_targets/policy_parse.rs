//! A policy file's text, as `vetto` reads it.
//!
//! 1. `vetto policy check FILE`: [`PolicyFile::parse`] (after the UTF-8 check
//!    `PolicyFile::load` makes), the file merged over its profile ([`resolve::merge`]), and
//!    the broker's own check of the `[network]` keys ([`vetto::netcheck::validate_network`]).
//! 2. `vetto run --policy FILE`: the file written inside a project and resolved with
//!    [`resolve::resolve`] (the same function the CLI calls: reading, parsing, layering, and
//!    the trust rule, which compares the policy with and without this untrusted file), then
//!    validated the same way.
//!
//! Invariants: nothing panics; a parsed file serialises back to TOML that parses to the same
//! file; an untrusted file in the project never widens the policy it is resolved into.

#![no_main]

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use vetto_bundle::policy::PolicyFile;
use vetto_bundle::profiles;
use vetto_bundle::resolve::{self, Inputs, Layer, Source, Sourced, TrustContext};
use vetto_bundle::trust::TrustStore;

/// A project directory of our own with the policy file inside it.
fn project() -> &'static (PathBuf, PathBuf) {
    static DIR: OnceLock<(PathBuf, PathBuf)> = OnceLock::new();
    DIR.get_or_init(|| {
        let base = std::env::temp_dir().join(format!("vetto-fuzz-policy-{}", std::process::id()));
        let project = base.join("project");
        std::fs::create_dir_all(&project).expect("creating the fuzz project");
        let project = project.canonicalize().expect("canonical project");
        let file = project.join("vetto.toml");
        (project, file)
    })
}

fn vals(v: &[Sourced<String>]) -> Vec<&String> {
    v.iter().map(|s| &s.value).collect()
}

fn check_file(pf: &PolicyFile, origin: &Path) {
    // `vetto policy check FILE`.
    let profile = pf.profile.clone().unwrap_or_else(|| "default".into());
    let Ok(base) = profiles::load(&profile) else {
        return;
    };
    let layers = [
        Layer {
            file: base,
            source: Source::Builtin("profile".into()),
        },
        Layer {
            file: pf.clone(),
            source: Source::PolicyFile(origin.to_path_buf()),
        },
    ];
    if let Ok(merged) = resolve::merge(&profile, &layers) {
        let _ = vetto::netcheck::validate_network(&merged);
        if let Ok(before) = resolve::merge(&profile, &layers[..1]) {
            let _ = resolve::widenings(&before, &merged);
        }
    }
}

fuzz_target!(|data: &[u8]| {
    // `PolicyFile::load` reads with `read_to_string`: anything but UTF-8 is refused there.
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let (project, file) = project();
    let parsed = PolicyFile::parse(text, "fuzz.toml");
    if let Ok(pf) = &parsed {
        // The file model round-trips: what `vetto policy` prints back is what was read.
        if let Ok(again) = toml::to_string(pf) {
            let back = PolicyFile::parse(&again, "round-trip")
                .unwrap_or_else(|e| panic!("re-serialised policy does not parse: {e}\n{again}"));
            assert_eq!(&back, pf, "policy changed in a TOML round trip:\n{again}");
        }
        check_file(pf, file);
    }

    // `vetto run --policy FILE` with FILE inside the project, untrusted.
    std::fs::write(file, data).expect("writing the policy file");
    let store = TrustStore::empty(PathBuf::new());
    let ctx = TrustContext {
        project,
        home: project,
        store: &store,
    };
    let with = Inputs {
        policy_file: Some(file.clone()),
        ..Inputs::default()
    };
    let resolved = resolve::resolve(&with, &ctx);
    if parsed.is_err() {
        assert!(
            resolved.is_err(),
            "the CLI path accepted what the parser refuses"
        );
    }
    if let Ok(policy) = resolved {
        let _ = vetto::netcheck::validate_network(&policy);
        // The trust rule: an untrusted file in the project may only narrow the policy
        // resolved without it (the built-in default profile).
        let Ok(base) = resolve::resolve(&Inputs::default(), &ctx) else {
            panic!("the default profile does not resolve");
        };
        let w = resolve::widenings(&base, &policy);
        assert!(w.is_empty(), "untrusted project policy file widened: {w:?}");
        // The same, checked here on the keys that open the sandbox, without `widenings`.
        let subset = |key: &str, after: Vec<&String>, before: Vec<&String>| {
            for a in after {
                assert!(before.contains(&a), "untrusted file adds {key} {a:?}");
            }
        };
        assert!(
            policy.network.value <= base.network.value,
            "network mode widened"
        );
        assert!(
            policy.project.value <= base.project.value,
            "project access widened"
        );
        subset("network.allow", vals(&policy.allow), vals(&base.allow));
        subset(
            "network.allow_cidrs",
            vals(&policy.allow_cidrs),
            vals(&base.allow_cidrs),
        );
        subset(
            "network.host_ports",
            vals(&policy.host_ports),
            vals(&base.host_ports),
        );
        subset("filesystem.write", vals(&policy.write), vals(&base.write));
        subset("filesystem.read", vals(&policy.read), vals(&base.read));
        subset(
            "environment.pass_through",
            vals(&policy.pass_through),
            vals(&base.pass_through),
        );
        subset(
            "secrets.files (removed)",
            vals(&base.secret_files),
            vals(&policy.secret_files),
        );
        subset(
            "secrets.dirs (removed)",
            vals(&base.secret_dirs),
            vals(&policy.secret_dirs),
        );
        subset(
            "network.deny (removed)",
            vals(&base.deny),
            vals(&policy.deny),
        );
    }
});
