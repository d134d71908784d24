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
        host_sealed: vec![],
        git_metadata: vec![],
        git_absent: vec![],
        review: None,
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
            dev: 0,
            ino: 0,
        },
        SecretMatch {
            path: f.home.join(".ssh"),
            kind: MaskKind::Dir,
            pattern: "~/.ssh".into(),
            via: None,
            source: src.clone(),
            dev: 0,
            ino: 0,
        },
        SecretMatch {
            path: f.home.join(".ssh/id_ed25519"),
            kind: MaskKind::File,
            pattern: ".env".into(),
            via: Some(f.project.join("api/.env")),
            source: src.clone(),
            dev: 0,
            ino: 0,
        },
        SecretMatch {
            path: f.project.join(".env"),
            kind: MaskKind::File,
            pattern: ".env".into(),
            via: None,
            source: src.clone(),
            dev: 0,
            ino: 0,
        },
        SecretMatch {
            path: "/etc/shadow".into(),
            kind: MaskKind::File,
            pattern: "/etc/shadow".into(),
            via: None,
            source: src.clone(),
            dev: 0,
            ino: 0,
        },
        SecretMatch {
            path: "/srv/elsewhere/.env".into(),
            kind: MaskKind::File,
            pattern: ".env".into(),
            via: None,
            source: src,
            dev: 0,
            ino: 0,
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
    // config.json as written; it parses as libcontainer parses it.
    let spec = t.oci().expect("config.json parses into oci_spec's types");
    // Capability sets sorted, so that the file does not follow the list's order.
    let mut v = t.spec.clone();
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
    let env = spec
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
    let mounts = spec.mounts().clone().unwrap_or_default();
    // Masks are made by the init through descriptors, not by config.json.
    assert!(
        mounts
            .iter()
            .all(|m| m.source().as_deref() != Some(Path::new("/dev/null"))),
        "no path-based mask in config.json"
    );
    let init = |p: &str| {
        t.plan
            .mounts
            .iter()
            .filter(|m| m.path == Path::new(p))
            .count()
    };
    assert_eq!(
        init(&format!("{ROOT}/home/dev/proj/.env")),
        1,
        ".env masked once"
    );
    assert_eq!(init("/etc/shadow"), 1, "/etc/shadow masked");
    assert_eq!(
        init(&format!("{ROOT}/home/dev/.cargo/credentials.toml")),
        1,
        "masked inside the read-only ~/.cargo bind"
    );
    // HOME is an empty tmpfs: ~/.ssh is not there to mask.
    assert_eq!(init(&format!("{ROOT}/home/dev/.ssh")), 0);
    assert_eq!(init("/srv/elsewhere/.env"), 0, "not visible: not masked");
    // The init's mounts: parents before children.
    let depths: Vec<usize> = t
        .plan
        .mounts
        .iter()
        .map(|m| m.path.components().count())
        .collect();
    assert!(depths.windows(2).all(|w| w[0] <= w[1]), "{depths:?}");
    let pos = |p: &str| {
        mounts
            .iter()
            .position(|m| m.destination() == Path::new(p))
            .expect(p)
    };
    assert!(pos(&format!("{ROOT}/home/dev")) < pos(&format!("{ROOT}/home/dev/proj")));
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
    let b = t.plan.network.broker.clone().expect("broker");
    assert_eq!(b.allow, vec!["crates.io".to_string()]);
    assert_eq!(b.resolver.as_deref(), Some("127.0.0.1:5353"));
    let env = t
        .oci()
        .expect("oci")
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
        .oci()
        .expect("oci")
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

/// A real HOME and project on disk (the facts point at them).
fn disk_facts(t: &Path) -> HostFacts {
    let mut f = facts();
    f.home = t.join("home");
    f.project = t.join("home/proj");
    f.cwd = f.project.clone();
    f.home_dotfiles = vec![f.home.join(".cargo")];
    f.host_private = vec![f.home.join(".config/vetto")];
    std::fs::create_dir_all(&f.project).expect("mk");
    f
}

fn scan_for(policy: &Policy, f: &HostFacts) -> Vec<vetto_bundle::secrets::SecretMatch> {
    vetto_bundle::secrets::scan(&policy.secret_patterns(), &f.home, &f.project).expect("scan")
}

#[test]
fn masks_follow_a_symlinked_toolchain_home() {
    let t = tempfile::tempdir().expect("tmp");
    let t = t.path().canonicalize().expect("c");
    let f = disk_facts(&t);
    std::fs::create_dir_all(t.join("data/cargo")).expect("mk");
    std::fs::write(t.join("data/cargo/credentials.toml"), "token").expect("w");
    std::os::unix::fs::symlink(t.join("data/cargo"), f.home.join(".cargo")).expect("ln");
    let policy = default_with("");
    let found = scan_for(&policy, &f);
    let tr = translate(&policy, &f, &found, "x").expect("translate");
    // Bound at the link, from its target; masked at the link's path, on the target's inode.
    let m = tr
        .plan
        .mounts
        .iter()
        .find(|m| m.path == f.home.join(".cargo/credentials.toml"))
        .expect("mask at the bind's destination");
    let meta = std::fs::metadata(t.join("data/cargo/credentials.toml")).expect("meta");
    use std::os::unix::fs::MetadataExt;
    assert_eq!((m.dev, m.ino), (meta.dev(), meta.ino()));
    let spec = &tr.spec;
    assert!(spec["mounts"]
        .as_array()
        .expect("m")
        .iter()
        .any(
            |m| m["destination"] == serde_json::json!(f.home.join(".cargo"))
                && m["source"] == serde_json::json!(t.join("data/cargo"))
        ));
}

#[test]
fn git_metadata_policy_files_and_vetto_config_are_read_only() {
    use vetto_bundle::plan::InitMountKind;
    let t = tempfile::tempdir().expect("tmp");
    let t = t.path().canonicalize().expect("c");
    let mut f = disk_facts(&t);
    // The project is HOME's subdirectory; a write root covers another repository whose
    // metadata is a gitlink into a separate git directory, and holds a policy file.
    std::fs::create_dir_all(f.project.join(".git/hooks")).expect("mk");
    std::fs::create_dir_all(t.join("w/repo")).expect("mk");
    std::fs::create_dir_all(t.join("w/gitdirs/repo")).expect("mk");
    std::fs::write(
        t.join("w/repo/.git"),
        format!("gitdir: {}\n", t.join("w/gitdirs/repo").display()),
    )
    .expect("w");
    std::fs::write(t.join("w/policy.toml"), "").expect("w");
    f.git_metadata = [f.project.join(".git"), t.join("w/repo/.git")]
        .iter()
        .flat_map(|g| vetto_bundle::gitmeta::metadata_paths(g))
        .collect();
    let mut policy = default_with(&format!(
        "[filesystem]\nwrite = [\"{}\"]\n",
        t.join("w").display()
    ));
    policy.files.push(t.join("w/policy.toml"));
    let tr = translate(&policy, &f, &[], "x").expect("translate");
    let ro = |p: &Path| {
        tr.plan
            .mounts
            .iter()
            .any(|m| m.path == p && m.kind == InitMountKind::ReadOnly)
    };
    assert!(ro(&f.project.join(".git")), "{:?}", tr.plan.mounts);
    assert!(ro(&t.join("w/repo/.git")));
    assert!(ro(&t.join("w/gitdirs/repo")));
    assert!(ro(&t.join("w/policy.toml")));
    // Nothing beneath a read-only .git is protected again.
    assert!(!tr
        .plan
        .mounts
        .iter()
        .any(|m| m.path.starts_with(f.project.join(".git")) && m.path != f.project.join(".git")));
    // Pinned: the directories between a write root and what it protects.
    assert!(tr
        .plan
        .mounts
        .iter()
        .any(|m| m.path == t.join("w/gitdirs") && m.kind == InitMountKind::Pin));
    // Absent protected paths are watched for creation.
    assert!(tr.handoff_watch.contains(&f.project.join(".mcp.json")));
}
