//! The FS-ONLY ruleset ([`vetto_bundle::fsonly::view`] walked by
//! [`vetto_hooks::fsview::build`]) on a real tree: the rules go around every secret and
//! protected path, nothing private to FULL is granted from the host, a masked directory's
//! names stay hidden, a secret renamed during the build fails it, and the safety budget is an
//! error, not a broad fallback.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use vetto_bundle::fsonly::{self, MAX_RULES};
use vetto_bundle::host::{HostFacts, SystemDir};
use vetto_bundle::plan::{FsAccess, InitMountKind};
use vetto_bundle::policy::PolicyFile;
use vetto_bundle::profiles;
use vetto_bundle::resolve::{merge, Layer, Source};
use vetto_bundle::secrets;
use vetto_bundle::translate::{translate, Translation};
use vetto_hooks::fsview::{build, FsViewError};

struct World {
    _tmp: tempfile::TempDir,
    home: PathBuf,
    proj: PathBuf,
}

fn world() -> World {
    let tmp = tempfile::tempdir().expect("tmp");
    let root = tmp.path().canonicalize().expect("canonical");
    let home = root.join("home");
    let proj = home.join("proj");
    for d in [
        proj.join("src/deep"),
        proj.join(".git/hooks"),
        proj.join("config"),
        home.join(".ssh"),
        home.join(".cargo/registry"),
    ] {
        std::fs::create_dir_all(d).expect("mkdir");
    }
    for (p, text) in [
        (proj.join(".env"), "SECRET=1\n"),
        (proj.join("config/.env.local"), "SECRET=2\n"),
        (proj.join("README"), "hi\n"),
        (proj.join("src/deep/lib.rs"), "\n"),
        (proj.join(".git/config"), "[core]\n"),
        (proj.join(".git/HEAD"), "ref: refs/heads/main\n"),
        (home.join(".gitconfig"), "[user]\n"),
        (home.join(".ssh/id_ed25519"), "key\n"),
        (home.join(".cargo/credentials.toml"), "token\n"),
        (home.join(".cargo/config.toml"), "\n"),
    ] {
        std::fs::write(p, text).expect("write");
    }
    std::os::unix::fs::symlink("/etc", proj.join("src/etc-link")).expect("symlink");
    World {
        _tmp: tmp,
        home,
        proj,
    }
}

fn facts(w: &World) -> HostFacts {
    HostFacts {
        uid: 1000,
        gid: 1000,
        user: "dev".into(),
        home: w.home.clone(),
        project: w.proj.clone(),
        cwd: w.proj.clone(),
        env: BTreeMap::from([("PATH".to_string(), "/usr/bin:/bin".to_string())]),
        landlock_abi: Some(7),
        system_dirs: vec![SystemDir {
            path: "/usr".into(),
            symlink: None,
        }],
        home_dotfiles: vec![w.home.join(".gitconfig"), w.home.join(".cargo")],
        host_private: vec![],
        host_sealed: vec![],
        git_metadata: vec![],
        git_absent: vec![],
        review: None,
    }
}

fn translated(w: &World, extra: &str) -> Translation {
    let f = facts(w);
    let layers = [
        Layer {
            file: profiles::load("default").expect("profile"),
            source: Source::Builtin("profile \"default\"".into()),
        },
        Layer {
            file: PolicyFile::parse(extra, "test").expect("parse"),
            source: Source::Builtin("test".into()),
        },
    ];
    let policy = merge("default", &layers).expect("merge");
    let found = secrets::scan(&policy.secret_patterns(), &f.home, &f.project).expect("secret scan");
    translate(&policy, &f, &found, "fsonly-test").expect("translate")
}

struct Granted(Vec<(PathBuf, FsAccess)>);

fn access_at(plan: &Granted, p: &Path) -> Option<FsAccess> {
    plan.0.iter().find(|(path, _)| path == p).map(|(_, a)| *a)
}

fn granted(t: &Translation, private: &[PathBuf]) -> Result<Granted, FsViewError> {
    let view = fsonly::view(t, private, &[], &[]);
    assert_eq!(view.min_abi, fsonly::MIN_ABI);
    build(&view).map(|b| Granted(b.granted))
}

#[test]
fn the_view_goes_around_every_mask_and_protection() {
    let w = world();
    let t = translated(&w, "[filesystem]\nproject = \"write\"\n");
    let tmpdir = PathBuf::from("/tmp/vetto-fs-test-private");
    std::fs::create_dir_all(&tmpdir).expect("mkdir");
    let plan = granted(&t, std::slice::from_ref(&tmpdir)).expect("view");

    // Every mask: no rule on it or above it but ListDir (Landlock rights add up down a tree).
    // Every read-only protection: nothing that could write it.
    let masks: Vec<&PathBuf> = t
        .plan
        .mounts
        .iter()
        .filter(|m| matches!(m.kind, InitMountKind::MaskFile | InitMountKind::MaskDir))
        .map(|m| &m.path)
        .collect();
    assert!(masks.contains(&&w.proj.join(".env")), "{masks:?}");
    assert!(
        masks.contains(&&w.proj.join("config/.env.local")),
        "{masks:?}"
    );
    for m in &masks {
        for (path, access) in plan.0.iter().filter(|(p, _)| m.starts_with(p)) {
            assert_eq!(
                *access,
                FsAccess::ListDir,
                "{} grants {m:?}",
                path.display()
            );
        }
    }
    let protected: Vec<&PathBuf> = t
        .plan
        .mounts
        .iter()
        .filter(|m| m.kind == InitMountKind::ReadOnly)
        .map(|m| &m.path)
        .collect();
    assert!(
        protected
            .iter()
            .any(|p| w.proj.join(".git/config").starts_with(p)),
        "{protected:?}"
    );
    for p in &protected {
        for (path, access) in plan.0.iter().filter(|(q, _)| p.starts_with(q)) {
            assert!(
                matches!(access, FsAccess::ListDir | FsAccess::ReadExec),
                "{} grants {:?} over {p:?}",
                path.display(),
                access
            );
        }
    }
    // Around them: the rest of the project keeps its access.
    assert_eq!(access_at(&plan, &w.proj), Some(FsAccess::ListDir));
    assert_eq!(
        access_at(&plan, &w.proj.join("src")),
        Some(FsAccess::ReadWrite)
    );
    assert_eq!(
        access_at(&plan, &w.proj.join("README")),
        Some(FsAccess::ReadWrite)
    );
    assert_eq!(
        access_at(&plan, &w.proj.join(".git")),
        Some(FsAccess::ReadExec)
    );
    assert_eq!(access_at(&plan, &w.proj.join(".env")), None);
    // HOME's dotfiles, around the masked credentials; HOME itself is not granted.
    assert_eq!(access_at(&plan, &w.home), None);
    assert_eq!(
        access_at(&plan, &w.home.join(".gitconfig")),
        Some(FsAccess::ReadExec)
    );
    assert_eq!(
        access_at(&plan, &w.home.join(".cargo")),
        Some(FsAccess::ListDir)
    );
    assert_eq!(
        access_at(&plan, &w.home.join(".cargo/config.toml")),
        Some(FsAccess::ReadExec)
    );
    assert_eq!(
        access_at(&plan, &w.home.join(".cargo/credentials.toml")),
        None
    );
    assert!(plan
        .0
        .iter()
        .all(|(p, _)| !p.starts_with(w.home.join(".ssh"))));
    // What FULL makes private is not granted from the host; the session's own TMPDIR is.
    for p in ["/tmp", "/dev/shm", "/dev/pts"] {
        assert_eq!(access_at(&plan, Path::new(p)), None, "{p}");
    }
    assert_eq!(access_at(&plan, &tmpdir), Some(FsAccess::ReadWrite));
    assert_eq!(
        access_at(&plan, Path::new("/proc")),
        Some(FsAccess::ReadExec)
    );
    assert_eq!(
        access_at(&plan, Path::new("/usr")),
        Some(FsAccess::ReadExec)
    );
    assert_eq!(
        access_at(&plan, Path::new("/dev/null")),
        Some(FsAccess::Device)
    );
    // A symlink met on the way is not followed (its target is granted only by its own rule).
    assert_eq!(access_at(&plan, &w.proj.join("src/etc-link")), None);
}

#[test]
fn the_seccomp_plan_refuses_sockets_and_user_namespaces() {
    let w = world();
    let t = translated(&w, "");
    let s = fsonly::seccomp(&t.plan.seccomp, false);
    assert!(s.deny.iter().any(|d| d == "socket"));
    assert!(s.deny_args.iter().all(|a| a.syscall != "socket"));
    for sc in ["socketpair", "unshare", "clone"] {
        assert!(s.deny_args.iter().any(|a| a.syscall == sc), "{sc}");
    }
    assert!(s.deny_errno.iter().any(|e| e.syscall == "clone3"));
    // FULL's own list is all still there.
    for d in &t.plan.seccomp.deny {
        assert!(s.deny.contains(d), "{d}");
    }
}

#[test]
fn a_tree_too_large_to_go_around_is_an_error_not_a_fallback() {
    let w = world();
    let many = w.proj.join("many");
    std::fs::create_dir(&many).expect("mkdir");
    std::fs::write(many.join(".env"), "S=1\n").expect("w");
    for i in 0..MAX_RULES {
        std::fs::write(many.join(format!("f{i}")), "").expect("w");
    }
    let t = translated(&w, "");
    match granted(&t, &[]) {
        Err(e @ FsViewError::Budget { .. }) => {
            let msg = e.to_string();
            assert!(msg.contains("safety budget"), "{msg}");
            assert!(msg.contains(&w.proj.display().to_string()), "{msg}");
        }
        Err(other) => panic!("expected the budget error, got {other}"),
        Ok(g) => panic!("expected the budget error, got {} rules", g.0.len()),
    }
}

#[test]
fn a_masked_directory_keeps_its_names_hidden() {
    let w = world();
    std::fs::create_dir_all(w.proj.join("keys")).expect("mkdir");
    std::fs::write(w.proj.join("keys/prod.pem"), "k").expect("w");
    let t = translated(&w, "[secrets]\ndirs = [\"keys\"]\n");
    let plan = granted(&t, &[]).expect("view");
    // No listing right on the directories above it (it would reach into it); their other
    // entries keep theirs.
    assert_eq!(access_at(&plan, &w.proj), None);
    assert_eq!(access_at(&plan, &w.proj.join("keys")), None);
    assert_eq!(
        access_at(&plan, &w.proj.join("README")),
        Some(FsAccess::ReadWrite)
    );
}

#[test]
fn a_secret_renamed_away_before_the_build_fails_it_closed() {
    // The scan found config/.env.local; before the ruleset is built, its directory is swapped
    // with a secret-free one (as a racing process outside could): the build must refuse, not
    // hand the secret's directory the sibling's rule.
    let w = world();
    std::fs::create_dir_all(w.proj.join("clean")).expect("mkdir");
    std::fs::write(w.proj.join("clean/x"), "x").expect("w");
    let t = translated(&w, "[filesystem]\nproject = \"write\"\n");
    std::fs::rename(w.proj.join("config"), w.proj.join("tmp-swap")).expect("mv");
    std::fs::rename(w.proj.join("clean"), w.proj.join("config")).expect("mv");
    std::fs::rename(w.proj.join("tmp-swap"), w.proj.join("clean")).expect("mv");
    match granted(&t, &[]) {
        Err(e @ FsViewError::Changed { .. }) => {
            assert!(e.to_string().contains(".env.local"), "{e}");
        }
        Err(other) => panic!("expected a refusal for the moved secret, got {other}"),
        Ok(g) => panic!("the build went on: {:?}", g.0),
    }
}

#[test]
fn a_root_replaced_by_a_symlink_before_the_build_fails_it_closed() {
    // `~/.cargo` is a granted root (a dotfile); between the view and the build it becomes a
    // link to `~/.ssh`, which would otherwise be granted through it.
    let w = world();
    let t = translated(&w, "");
    let view = fsonly::view(&t, &[], &[], &[]);
    std::fs::rename(w.home.join(".cargo"), w.home.join(".cargo-old")).expect("mv");
    std::os::unix::fs::symlink(".ssh", w.home.join(".cargo")).expect("ln");
    match build(&view) {
        Err(FsViewError::Changed { path }) => assert_eq!(path, w.home.join(".cargo")),
        Err(e) => panic!("another error: {e}"),
        Ok(b) => panic!("built: {:?}", b.granted),
    }
}

#[test]
fn the_broker_plan_allows_tcp_sockets_only_and_no_listening() {
    let w = world();
    let t = translated(&w, "");
    let s = fsonly::seccomp(&t.plan.seccomp, true);
    assert!(
        !s.deny.iter().any(|d| d == "socket"),
        "socket() stays for TCP"
    );
    for d in ["bind", "listen"] {
        assert!(s.deny.iter().any(|x| x == d), "{d} not refused");
    }
    let socket_rules = s.deny_args.iter().filter(|a| a.syscall == "socket").count();
    // family, 15 types other than SOCK_STREAM, protocol.
    assert_eq!(socket_rules, 17);
    for sys in ["sendto", "sendmsg", "sendmmsg"] {
        assert!(
            s.deny_args.iter().any(|a| a.syscall == sys),
            "{sys}: MSG_FASTOPEN not refused"
        );
    }
    // The filter compiles.
    vetto_hooks::seccomp::compile(&s).expect("compile");
}
