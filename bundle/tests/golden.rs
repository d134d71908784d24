//! Golden tests: the exact `config.json` and init plan each built-in profile produces for a
//! fixed, synthetic host. Regenerate with `UPDATE_GOLDEN=1 cargo test -p vetto-bundle --test golden`
//! and review the diff: every change here is a change of what the sandbox enforces.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use vetto_bundle::host::{HostFacts, SystemDir};
use vetto_bundle::policy::PolicyFile;
use vetto_bundle::profiles;
use vetto_bundle::resolve::{merge, Layer, Policy, Source};
use vetto_bundle::secrets::{MaskKind, SecretMatch};
use vetto_bundle::translate::translate;

const ROOT: &str = "/nonexistent-vetto-golden";

fn facts() -> HostFacts {
    let home = PathBuf::from(format!("{ROOT}/home/dev"));
    let project = home.join("proj");
    let env: BTreeMap<String, String> = [
        ("PATH", "/usr/local/bin:/usr/bin:/bin"),
        ("TERM", "xterm-256color"),
        ("LANG", "C.UTF-8"),
        ("LC_ALL", "C.UTF-8"),
        ("EDITOR", "vi"),
        ("CARGO_HOME", "/nonexistent-vetto-golden/home/dev/.cargo"),
        ("GH_TOKEN", "ghp_secret"),
        ("OPENAI_API_KEY", "sk-secret"),
        ("AWS_SECRET_ACCESS_KEY", "aws-secret"),
        ("SSH_AUTH_SOCK", "/run/user/1000/ssh"),
        ("HOME", "/ignored"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    HostFacts {
        uid: 1000,
        gid: 1000,
        user: "dev".into(),
        home: home.clone(),
        project: project.clone(),
        cwd: project.clone(),
        env,
        landlock_abi: Some(7),
        system_dirs: vec![
            SystemDir {
                path: "/usr".into(),
                symlink: None,
            },
            SystemDir {
                path: "/bin".into(),
                symlink: Some("usr/bin".into()),
            },
            SystemDir {
                path: "/lib".into(),
                symlink: Some("usr/lib".into()),
            },
            SystemDir {
                path: "/etc".into(),
                symlink: None,
            },
        ],
        home_dotfiles: vec![home.join(".gitconfig"), home.join(".cargo")],
        host_private: vec![home.join(".config/vetto")],
    }
}

fn secrets(f: &HostFacts) -> Vec<SecretMatch> {
    let src = Source::Builtin("secret list".into());
    vec![
        SecretMatch {
            path: f.home.join(".cargo/credentials.toml"),
            kind: MaskKind::File,
            pattern: "~/.cargo/credentials.toml".into(),
            via: None,
            source: src.clone(),
        },
        SecretMatch {
            path: f.home.join(".ssh"),
            kind: MaskKind::Dir,
            pattern: "~/.ssh".into(),
            via: None,
            source: src.clone(),
        },
        SecretMatch {
            path: f.home.join(".ssh/id_ed25519"),
            kind: MaskKind::File,
            pattern: ".env".into(),
            via: Some(f.project.join("api/.env")),
            source: src.clone(),
        },
        SecretMatch {
            path: f.project.join(".env"),
            kind: MaskKind::File,
            pattern: ".env".into(),
            via: None,
            source: src.clone(),
        },
        SecretMatch {
            path: "/etc/shadow".into(),
            kind: MaskKind::File,
            pattern: "/etc/shadow".into(),
            via: None,
            source: src.clone(),
        },
        SecretMatch {
            path: "/srv/elsewhere/.env".into(),
            kind: MaskKind::File,
            pattern: ".env".into(),
            via: None,
            source: src,
        },
    ]
}

fn check(name: &str, actual: &str) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(name);
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, actual).expect("write golden");
        return;
    }
    let expected = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e}; run with UPDATE_GOLDEN=1", path.display()));
    if expected != actual {
        let (e, a): (Vec<_>, Vec<_>) = (expected.lines().collect(), actual.lines().collect());
        let first = e
            .iter()
            .zip(&a)
            .position(|(x, y)| x != y)
            .unwrap_or(e.len().min(a.len()));
        panic!(
            "{name} differs from the golden file at line {}:\n  golden: {:?}\n  actual: {:?}\n(UPDATE_GOLDEN=1 to accept after review)",
            first + 1,
            e.get(first),
            a.get(first)
        );
    }
}

fn golden(profile: &str) {
    let f = facts();
    let base = Layer {
        file: profiles::load(profile).expect("profile"),
        source: Source::Builtin(format!("profile \"{profile}\"")),
    };
    let policy = merge(profile, &[base]).expect("merge");
    let t = translate(&policy, &f, &secrets(&f), "golden").expect("translate");
    // oci-spec keeps capability sets in a HashSet: sort them so the file is stable.
    let mut v = serde_json::to_value(&t.spec).expect("json");
    if let Some(caps) = v
        .pointer_mut("/process/capabilities")
        .and_then(|c| c.as_object_mut())
    {
        for set in caps.values_mut() {
            if let Some(a) = set.as_array_mut() {
                a.sort_by(|x, y| x.as_str().cmp(&y.as_str()));
            }
        }
    }
    let config = serde_json::to_string_pretty(&v).expect("json") + "\n";
    let plan = serde_json::to_string_pretty(&t.plan).expect("json") + "\n";
    check(&format!("{profile}.config.json"), &config);
    check(&format!("{profile}.plan.json"), &plan);

    // Whatever the golden file says, these must hold.
    let env = t
        .spec
        .process()
        .as_ref()
        .and_then(|p| p.env().clone())
        .unwrap_or_default();
    assert!(
        env.iter().all(|e| !e.starts_with("GH_TOKEN=")
            && !e.starts_with("OPENAI_API_KEY=")
            && !e.starts_with("AWS_")
            && !e.starts_with("SSH_AUTH_SOCK=")),
        "{env:?}"
    );
    assert!(env.contains(&format!("HOME={ROOT}/home/dev")), "{env:?}");
    let mounts = t.spec.mounts().clone().unwrap_or_default();
    let dest = |p: &str| {
        mounts
            .iter()
            .filter(|m| m.destination() == Path::new(p))
            .count()
    };
    assert_eq!(
        dest(&format!("{ROOT}/home/dev/proj/.env")),
        1,
        ".env masked once"
    );
    assert_eq!(dest("/etc/shadow"), 1, "/etc/shadow masked");
    assert_eq!(dest(&format!("{ROOT}/home/dev/.ssh")), 1, "~/.ssh masked");
    assert_eq!(
        dest(&format!("{ROOT}/home/dev/.ssh/id_ed25519")),
        0,
        "inside a masked dir: no second mask"
    );
    assert_eq!(dest("/srv/elsewhere/.env"), 0, "not visible: not masked");
    // Parents are mounted before children.
    let pos = |p: &str| {
        mounts
            .iter()
            .position(|m| m.destination() == Path::new(p))
            .expect(p)
    };
    assert!(pos(&format!("{ROOT}/home/dev")) < pos(&format!("{ROOT}/home/dev/proj")));
    assert!(pos(&format!("{ROOT}/home/dev/proj")) < pos(&format!("{ROOT}/home/dev/proj/.env")));
    assert!(
        pos(&format!("{ROOT}/home/dev/.cargo"))
            < pos(&format!("{ROOT}/home/dev/.cargo/credentials.toml"))
    );
}

#[test]
fn golden_default() {
    golden("default");
}

#[test]
fn golden_read_only() {
    golden("read-only");
}

#[test]
fn golden_ci() {
    golden("ci");
}

/// The default profile with one more layer (TOML text) on top.
fn default_with(text: &str) -> Policy {
    let base = Layer {
        file: profiles::load("default").expect("p"),
        source: Source::Builtin("p".into()),
    };
    let l = Layer {
        file: PolicyFile::parse(text, "t").expect("parse"),
        source: Source::Flag("t".into()),
    };
    merge("default", &[base, l]).expect("merge")
}

#[test]
fn network_allowlist_makes_listeners_and_proxy_env() {
    let f = facts();
    let text = "[network]\nmode = \"allowlist\"\nallow = [\"crates.io\"]\nhost_ports = [5432]\nresolver = \"127.0.0.1:5353\"\n";
    let t = translate(&default_with(text), &f, &[], "x").expect("translate");
    let ports: Vec<u16> = t.plan.network.listeners.iter().map(|l| l.port).collect();
    assert_eq!(ports, vec![3128, 1080, 5432]);
    let b = t.plan.network.broker.expect("broker");
    assert_eq!(b.allow, vec!["crates.io".to_string()]);
    assert_eq!(b.resolver.as_deref(), Some("127.0.0.1:5353"));
    let env = t
        .spec
        .process()
        .as_ref()
        .and_then(|p| p.env().clone())
        .unwrap_or_default();
    for v in [
        "HTTPS_PROXY=http://127.0.0.1:3128",
        "https_proxy=http://127.0.0.1:3128",
        "ALL_PROXY=socks5h://127.0.0.1:1080",
        "NO_PROXY=localhost,127.0.0.1",
    ] {
        assert!(env.iter().any(|e| e == v), "{v} missing: {env:?}");
    }
    // Off: no listeners, no proxy variables.
    let t = translate(&default_with(""), &f, &[], "x").expect("t");
    assert!(t.plan.network.listeners.is_empty() && t.plan.network.broker.is_none());
    let env = t
        .spec
        .process()
        .as_ref()
        .and_then(|p| p.env().clone())
        .unwrap_or_default();
    assert!(!env.iter().any(|e| e.contains("PROXY")), "{env:?}");
}

#[test]
fn publish_needs_the_broker_and_a_free_port() {
    let f = facts();
    let mk = default_with;
    let t = translate(
        &mk("[network]\nmode = \"allowlist\"\npublish = [3000]\n"),
        &f,
        &[],
        "x",
    )
    .expect("t");
    assert_eq!(t.plan.network.publish, vec![3000]);
    let t = translate(&mk("[network]\npublish = [3000]\n"), &f, &[], "x").expect("t");
    assert!(
        t.plan.network.publish.is_empty(),
        "network off: nothing published"
    );
    assert!(t
        .explain
        .iter()
        .any(|e| e.item == "publish" && e.detail.starts_with("IGNORED")));
    let e = translate(
        &mk("[network]\nmode = \"allowlist\"\npublish = [3128]\n"),
        &f,
        &[],
        "x",
    )
    .expect_err("refused");
    assert!(e.to_string().contains("the broker's own"), "{e}");
}

#[test]
fn write_root_over_vetto_config_is_refused() {
    let t = tempfile::tempdir().expect("tmp");
    let mut f = facts();
    f.host_private = vec![t.path().join("cfg/vetto")];
    let text = format!("[filesystem]\nwrite = [\"{}\"]\n", t.path().display());
    let e = translate(&default_with(&text), &f, &[], "x").expect_err("refused");
    assert!(
        e.to_string().contains("which vetto's own trust relies on"),
        "{e}"
    );
}

#[test]
fn run_dir_roots_are_refused() {
    let f = facts();
    let e = translate(
        &default_with("[filesystem]\nread = [\"/run\"]\n"),
        &f,
        &[],
        "x",
    )
    .expect_err("refused");
    assert!(
        e.to_string().contains("cannot be opened to the sandbox"),
        "{e}"
    );
}
