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
        output_of(self.run_command(flags, argv, &env).stdin(Stdio::null()))
    }

    /// The command `vetto run [flags] -- ARGV...` as this fixture's identity, not started
    /// (for tests that signal, feed or watch it while it runs).
    pub fn run_command(&self, flags: &[&str], argv: &[&str], env: &[(String, String)]) -> Command {
        let bin = self.bin.display().to_string();
        let mut full: Vec<&str> = vec![&bin, "run"];
        full.extend_from_slice(flags);
        full.push("--");
        full.extend_from_slice(argv);
        self.command(&full, env)
    }

    /// `vetto ARGS...` (not run), waited for.
    pub fn vetto(&self, args: &[&str]) -> Output {
        let bin = self.bin.display().to_string();
        let mut full: Vec<&str> = vec![&bin];
        full.extend_from_slice(args);
        output_of(self.command(&full, &self.base_env()).stdin(Stdio::null()))
    }

    /// Session directories left in the runtime dir.
    /// The session directories left once the sessions that ended have finished their
    /// teardown: a supervisor removes its own just after vetto's exit status is delivered
    /// (`shim/src/front.rs`), so what is left is read again, for up to 5 s, while there is
    /// any.
    pub fn settled_sessions(&self) -> Vec<PathBuf> {
        eventually(5, || self.leftover_sessions().is_empty());
        self.leftover_sessions()
    }

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

/// Run `c` and wait for it. The fixture's staged binary was just written: a fork in another
/// test thread while it was open for writing holds that descriptor until its exec, and
/// executing the binary meanwhile fails with `ETXTBSY`; that is retried.
pub fn output_of(c: &mut Command) -> Output {
    spawn_retrying(c.stdout(Stdio::piped()).stderr(Stdio::piped()))
        .wait_with_output()
        .expect("run vetto")
}

/// `c.spawn()`, retrying `ETXTBSY` (see [`output_of`]).
pub fn spawn_retrying(c: &mut Command) -> std::process::Child {
    let mut tries = 0;
    loop {
        match c.spawn() {
            Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) && tries < 50 => {
                tries += 1;
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            r => return r.expect("run vetto"),
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

/// The children of `pid` (from `/proc/*/stat`), with their `comm` and state (`R`, `S`, `Z`...).
pub fn children_of(pid: u32) -> Vec<(u32, String, String)> {
    let mut v = vec![];
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(child) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        // pid (comm) state ppid ...
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        let mut rest = stat[close + 1..].split_whitespace();
        let state = rest.next().unwrap_or_default().to_string();
        if rest.next().and_then(|p| p.parse::<u32>().ok()) == Some(pid) {
            v.push((child, stat[open + 1..close].to_string(), state));
        }
    }
    v
}

/// The supervisor of the `vetto run` whose pid (the front's, `shim/src/front.rs`) is
/// `front`: its one child named `vetto` (`None` if there is none, or more than one).
pub fn supervisor_of(front: u32) -> Option<u32> {
    let v: Vec<u32> = children_of(front)
        .into_iter()
        .filter(|(_, comm, _)| comm == "vetto")
        .map(|(p, _, _)| p)
        .collect();
    match v[..] {
        [one] => Some(one),
        _ => None,
    }
}

/// Is a `sleep TAG` running (the sandboxed command itself, not a supervisor or a clone of one
/// whose command line merely contains the script)?
pub fn sleeping(tag: &str) -> bool {
    !sleepers(tag).is_empty()
}

/// The pids of the `sleep TAG` processes (exactly that command line).
pub fn sleepers(tag: &str) -> Vec<u32> {
    let want = format!("sleep\0{tag}\0");
    pids_with(tag)
        .into_iter()
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c == want.as_bytes())
        })
        .collect()
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

/// A stub DNS server on 127.0.0.1 for tests: answers A/AAAA queries from a map that the
/// test can change at any time, and records every name it was asked about.
pub struct StubDns {
    /// Where it listens.
    pub addr: std::net::SocketAddr,
    /// name → addresses.
    pub records:
        std::sync::Arc<std::sync::Mutex<std::collections::HashMap<String, Vec<std::net::IpAddr>>>>,
    /// Every queried name, in order.
    pub queries: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl StubDns {
    /// Start the server thread.
    pub fn start() -> Self {
        let sock = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind dns");
        let addr = sock.local_addr().expect("addr");
        let records = std::sync::Arc::new(std::sync::Mutex::new(std::collections::HashMap::new()));
        let queries = std::sync::Arc::new(std::sync::Mutex::new(vec![]));
        let (r, q) = (records.clone(), queries.clone());
        std::thread::spawn(move || {
            let mut buf = [0u8; 512];
            while let Ok((n, from)) = sock.recv_from(&mut buf) {
                if let Some(resp) = dns_answer(&buf[..n], &r, &q) {
                    let _ = sock.send_to(&resp, from);
                }
            }
        });
        StubDns {
            addr,
            records,
            queries,
        }
    }

    /// Point `name` at `addrs`.
    pub fn set(&self, name: &str, addrs: &[&str]) {
        let v = addrs.iter().map(|a| a.parse().expect("ip")).collect();
        self.records
            .lock()
            .expect("lock")
            .insert(name.to_string(), v);
    }

    /// Names asked so far.
    pub fn asked(&self) -> Vec<String> {
        self.queries.lock().expect("lock").clone()
    }
}

type Records = std::sync::Mutex<std::collections::HashMap<String, Vec<std::net::IpAddr>>>;

fn dns_answer(q: &[u8], records: &Records, log: &std::sync::Mutex<Vec<String>>) -> Option<Vec<u8>> {
    if q.len() < 12 {
        return None;
    }
    let mut i = 12;
    let mut labels = vec![];
    loop {
        let len = *q.get(i)? as usize;
        i += 1;
        if len == 0 {
            break;
        }
        labels.push(String::from_utf8_lossy(q.get(i..i + len)?).to_ascii_lowercase());
        i += len;
    }
    let qtype = u16::from_be_bytes([*q.get(i)?, *q.get(i + 1)?]);
    let question_end = i + 4;
    let name = labels.join(".");
    log.lock().ok()?.push(name.clone());
    let addrs: Vec<std::net::IpAddr> = records.lock().ok()?.get(&name).cloned().unwrap_or_default();
    let answers: Vec<std::net::IpAddr> = addrs
        .into_iter()
        .filter(|a| {
            matches!(
                (a, qtype),
                (std::net::IpAddr::V4(_), 1) | (std::net::IpAddr::V6(_), 28)
            )
        })
        .collect();
    let mut r = q.get(..question_end)?.to_vec();
    r[2] = 0x81; // response, recursion desired
    r[3] = 0x80; // recursion available, NOERROR
    r[6..8].copy_from_slice(&(answers.len() as u16).to_be_bytes());
    r[8..12].copy_from_slice(&[0, 0, 0, 0]);
    for a in answers {
        r.extend_from_slice(&[0xc0, 12]); // pointer to the question name
        r.extend_from_slice(&qtype.to_be_bytes());
        r.extend_from_slice(&[0, 1, 0, 0, 0, 5]); // class IN, ttl 5
        match a {
            std::net::IpAddr::V4(v) => {
                r.extend_from_slice(&4u16.to_be_bytes());
                r.extend_from_slice(&v.octets());
            }
            std::net::IpAddr::V6(v) => {
                r.extend_from_slice(&16u16.to_be_bytes());
                r.extend_from_slice(&v.octets());
            }
        }
    }
    Some(r)
}

/// A tiny HTTP server: answers every request with `hello` and counts connections.
pub fn http_server(
    bind: &str,
) -> (
    std::net::SocketAddr,
    std::sync::Arc<std::sync::atomic::AtomicUsize>,
) {
    use std::io::{Read, Write};
    let l = std::net::TcpListener::bind(bind).expect("bind http");
    let addr = l.local_addr().expect("addr");
    let hits = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let h = hits.clone();
    std::thread::spawn(move || {
        for mut c in l.incoming().flatten() {
            h.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let mut buf = [0u8; 4096];
            let _ = c.read(&mut buf);
            let _ = c.write_all(
                b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello",
            );
        }
    });
    (addr, hits)
}

/// A byte echo server (echoes as data arrives; closes after the client's EOF).
pub fn echo_server(bind: &str) -> std::net::SocketAddr {
    let l = std::net::TcpListener::bind(bind).expect("bind echo");
    let addr = l.local_addr().expect("addr");
    std::thread::spawn(move || {
        for c in l.incoming().flatten() {
            std::thread::spawn(move || {
                let mut w = c.try_clone().expect("clone");
                let mut r = c;
                let _ = std::io::copy(&mut r, &mut w);
                let _ = w.shutdown(std::net::Shutdown::Write);
            });
        }
    });
    addr
}
