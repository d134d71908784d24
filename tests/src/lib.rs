//! Helpers for vetto's end-to-end tests: a throwaway HOME and project with dummy secrets,
//! staged where an unprivileged user can reach them, and the real `vetto` binary run as
//! root or as `nobody` (via `setpriv`).

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// Who runs vetto.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// The test runner's own identity (root in CI).
    Root,
    /// uid/gid 65534 via setpriv when the runner is root; the runner itself otherwise.
    Rootless,
}

/// The unprivileged identity used for rootless runs.
pub const NOBODY: u32 = 65534;

/// Are we root?
pub fn is_root() -> bool {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// The freshly built `vetto` binary (target/<profile>/vetto next to the test's deps dir).
pub fn vetto_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("VETTO_BIN") {
        return PathBuf::from(p);
    }
    let exe = std::env::current_exe().expect("current_exe");
    let dir = exe.parent().and_then(|d| d.parent()).expect("target dir");
    let bin = dir.join("vetto");
    assert!(
        bin.exists(),
        "{} not built: run `cargo build --workspace` first",
        bin.display()
    );
    bin
}

/// A staged world: `root/bin/vetto`, `root/home` (HOME with `.ssh`, `.gitconfig`),
/// `root/proj` (a git project with `.env`), `root/outside`, `root/run` (XDG_RUNTIME_DIR).
pub struct Fixture {
    /// Who runs.
    pub mode: Mode,
    /// The temp root (removed on drop).
    pub root: PathBuf,
    /// HOME.
    pub home: PathBuf,
    /// The project.
    pub proj: PathBuf,
    /// The staged binary.
    pub bin: PathBuf,
    /// The uid vetto runs as.
    pub uid: u32,
    _tmp: tempfile::TempDir,
}

fn sh(cmd: &str) {
    let st = Command::new("sh").arg("-c").arg(cmd).status().expect("sh");
    assert!(st.success(), "setup command failed: {cmd}");
}

impl Fixture {
    /// Stage a new world for `mode`.
    pub fn new(mode: Mode) -> Self {
        let tmp = tempfile::Builder::new()
            .prefix("vetto-it.")
            .tempdir_in("/tmp")
            .expect("tmp");
        let root = tmp.path().to_path_buf();
        std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        let home = root.join("home");
        let proj = root.join("proj");
        for d in [
            home.join(".ssh"),
            proj.clone(),
            root.join("bin"),
            root.join("outside"),
            root.join("run"),
        ] {
            std::fs::create_dir_all(&d).expect("mkdir");
        }
        std::fs::write(
            home.join(".ssh/id_ed25519"),
            "-----BEGIN OPENSSH PRIVATE KEY----- dummy\n",
        )
        .expect("w");
        std::fs::write(home.join(".gitconfig"), "[user]\n\tname = Sandbox Tester\n\temail = tester@example.invalid\n[init]\n\tdefaultBranch = main\n").expect("w");
        std::fs::write(proj.join(".env"), "API_KEY=dummy-secret-value\n").expect("w");
        std::fs::write(proj.join("README"), "hello\n").expect("w");
        let bin = root.join("bin/vetto");
        std::fs::copy(vetto_bin(), &bin).expect("copy vetto");
        std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        sh(&format!(
            "cd '{}' && git init -q . && HOME='{}' git add README && HOME='{}' git commit -qm init",
            proj.display(),
            home.display(),
            home.display()
        ));
        std::fs::set_permissions(root.join("run"), std::fs::Permissions::from_mode(0o700))
            .expect("chmod");
        let uid = match mode {
            Mode::Rootless if is_root() => {
                sh(&format!(
                    "chown -R {NOBODY}:{NOBODY} '{}/home' '{}/proj' '{}/outside' '{}/run'",
                    root.display(),
                    root.display(),
                    root.display(),
                    root.display()
                ));
                NOBODY
            }
            // SAFETY: geteuid cannot fail.
            _ => unsafe { libc::geteuid() },
        };
        Fixture {
            mode,
            home,
            proj,
            bin,
            uid,
            root,
            _tmp: tmp,
        }
    }

    /// Should this variant run here? (The root variant needs a root runner.)
    pub fn applicable(mode: Mode) -> bool {
        if mode == Mode::Root && !is_root() {
            eprintln!("skipped: the root variant needs a root test runner");
            return false;
        }
        true
    }

    /// The environment vetto is started with.
    pub fn base_env(&self) -> Vec<(String, String)> {
        vec![
            ("HOME".into(), self.home.display().to_string()),
            ("PATH".into(), "/usr/local/bin:/usr/bin:/bin".into()),
            (
                "XDG_RUNTIME_DIR".into(),
                self.root.join("run").display().to_string(),
            ),
            (
                "XDG_CONFIG_HOME".into(),
                self.home.join(".config").display().to_string(),
            ),
            ("LANG".into(), "C.UTF-8".into()),
            ("GH_TOKEN".into(), "ghp_dummy_token_value".into()),
            ("OPENAI_API_KEY".into(), "sk-dummy".into()),
            ("AWS_SECRET_ACCESS_KEY".into(), "aws-dummy".into()),
        ]
    }

    /// A command that runs `argv` as this fixture's identity, in the project, with `env`.
    pub fn command(&self, argv: &[&str], env: &[(String, String)]) -> Command {
        let mut c;
        if self.mode == Mode::Rootless && is_root() {
            c = Command::new("setpriv");
            c.args([
                format!("--reuid={NOBODY}"),
                format!("--regid={NOBODY}"),
                "--clear-groups".into(),
                "--inh-caps=-all".into(),
                "env".into(),
                "-i".into(),
            ]);
            for (k, v) in env {
                c.arg(format!("{k}={v}"));
            }
            c.args(argv);
        } else {
            c = Command::new(argv[0]);
            c.args(&argv[1..]);
            c.env_clear();
            c.envs(env.iter().map(|(k, v)| (k.clone(), v.clone())));
        }
        c.current_dir(&self.proj);
        c
    }

    /// `vetto run [flags] -- sh -c SCRIPT`, waited for.
    pub fn run_sh(&self, flags: &[&str], script: &str) -> Output {
        self.run_argv(flags, &["/bin/sh", "-c", script])
    }

    /// `vetto run [flags] -- ARGV...`, waited for, stdin closed.
    pub fn run_argv(&self, flags: &[&str], argv: &[&str]) -> Output {
        self.run_env(flags, argv, &[])
    }

    /// Like `run_argv`, with extra or replaced environment variables for vetto.
    pub fn run_env(&self, flags: &[&str], argv: &[&str], extra: &[(&str, &str)]) -> Output {
        let mut env = self.base_env();
        for (k, v) in extra {
            env.retain(|(ek, _)| ek != k);
            env.push((k.to_string(), v.to_string()));
        }
        let bin = self.bin.display().to_string();
        let mut full: Vec<&str> = vec![&bin, "run"];
        full.extend_from_slice(flags);
        full.push("--");
        full.extend_from_slice(argv);
        self.command(&full, &env)
            .stdin(Stdio::null())
            .output()
            .expect("run vetto")
    }

    /// `vetto ARGS...` (not run), waited for.
    pub fn vetto(&self, args: &[&str]) -> Output {
        let bin = self.bin.display().to_string();
        let mut full: Vec<&str> = vec![&bin];
        full.extend_from_slice(args);
        self.command(&full, &self.base_env())
            .stdin(Stdio::null())
            .output()
            .expect("run vetto")
    }

    /// Session directories left in the runtime dir.
    pub fn leftover_sessions(&self) -> Vec<PathBuf> {
        std::fs::read_dir(self.root.join("run/vetto/sessions"))
            .map(|rd| rd.flatten().map(|e| e.path()).collect())
            .unwrap_or_default()
    }

    /// Make a path owned by the fixture's user (for files a test adds).
    pub fn own(&self, p: &Path) {
        if self.uid != 0 {
            sh(&format!(
                "chown -R {}:{} '{}'",
                self.uid,
                self.uid,
                p.display()
            ));
        }
    }
}

/// stdout as text.
pub fn out(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// stderr as text.
pub fn err(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Host pids whose command line contains `needle`.
pub fn pids_with(needle: &str) -> Vec<u32> {
    let mut v = vec![];
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if let Ok(cmd) = std::fs::read(e.path().join("cmdline")) {
            let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
            if cmd.contains(needle) {
                v.push(pid);
            }
        }
    }
    v
}

/// Wait up to `secs` for `f` to hold.
pub fn eventually(secs: u64, mut f: impl FnMut() -> bool) -> bool {
    let end = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    while std::time::Instant::now() < end {
        if f() {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    f()
}

/// Generate a root and a rootless test from one body.
#[macro_export]
macro_rules! both {
    ($name:ident, |$f:ident| $body:block) => {
        mod $name {
            #[allow(unused_imports)]
            use super::*;
            fn body($f: &$crate::Fixture) $body
            #[test]
            fn root() {
                if $crate::Fixture::applicable($crate::Mode::Root) {
                    body(&$crate::Fixture::new($crate::Mode::Root));
                }
            }
            #[test]
            fn rootless() {
                body(&$crate::Fixture::new($crate::Mode::Rootless));
            }
        }
    };
}
