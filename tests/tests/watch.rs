//! `vetto watch` end to end, in a real terminal (a detached tmux session): it attaches to a
//! running session, so an unlisted name is held for an answer instead of parked; it shows the
//! pending request, and one key (`o`) grants it once. The sandboxed curl and the test server
//! talk over loopback only (127.0.0.2, allowed through the test's `allow_cidrs`).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::Ordering;

use vetto_integration::{
    both, err, eventually, http_server, is_root, out, Fixture, Mode, StubDns, NOBODY,
};

/// A tmux server of the test's own (its socket in a temp dir), killed when dropped.
struct Tmux {
    socket: PathBuf,
    _dir: tempfile::TempDir,
}

impl Tmux {
    fn new() -> Self {
        let dir = tempfile::Builder::new()
            .prefix("vetto-tmux.")
            .tempdir_in("/tmp")
            .expect("tmp");
        Tmux {
            socket: dir.path().join("sock"),
            _dir: dir,
        }
    }

    fn cmd(&self, args: &[&str]) -> Output {
        Command::new("tmux")
            .env_remove("TMUX")
            .arg("-f")
            .arg("/dev/null")
            .arg("-S")
            .arg(&self.socket)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("tmux")
    }

    /// What the pane shows now ("" once it is gone).
    fn pane(&self) -> String {
        out(&self.cmd(&["capture-pane", "-p", "-t", "watch"]))
    }

    /// Whether the session still runs.
    fn alive(&self) -> bool {
        self.cmd(&["has-session", "-t", "watch"]).status.success()
    }

    /// Wait up to `secs` for the pane to show every one of `want`.
    fn wait_for(&self, secs: u64, want: &[&str], why: &str, extra: impl Fn() -> String) -> String {
        let mut last = String::new();
        let ok = eventually(secs, || {
            last = self.pane();
            want.iter().all(|w| last.contains(w))
        });
        assert!(
            ok,
            "{why}: the pane never showed {want:?}; it shows:\n{last}\n{}",
            extra()
        );
        last
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.cmd(&["kill-server"]);
    }
}

/// A background `vetto run`, killed if the test ends before it does.
struct Running(Option<Child>);

impl Running {
    fn wait(&mut self) -> Output {
        self.0
            .take()
            .expect("running")
            .wait_with_output()
            .expect("wait")
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// `s` quoted for sh.
fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// The shell command that runs `vetto watch` as the fixture's identity with its environment
/// (as [`Fixture::command`] does), its stderr and exit status going to files.
fn watch_command(f: &Fixture, stderr: &Path, rc: &Path) -> String {
    let mut argv: Vec<String> = vec![];
    if f.mode == Mode::Rootless && is_root() {
        argv.extend([
            "setpriv".into(),
            format!("--reuid={NOBODY}"),
            format!("--regid={NOBODY}"),
            "--clear-groups".into(),
            "--inh-caps=-all".into(),
        ]);
    }
    argv.extend(["env".into(), "-i".into()]);
    let mut env = f.base_env();
    env.push(("TERM".into(), "screen".into()));
    argv.extend(env.iter().map(|(k, v)| format!("{k}={v}")));
    argv.extend([f.bin.display().to_string(), "watch".into()]);
    let line: Vec<String> = argv.iter().map(|a| quote(a)).collect();
    format!(
        "{} 2>{}; echo $? >{}",
        line.join(" "),
        quote(&stderr.display().to_string()),
        quote(&rc.display().to_string())
    )
}

both!(watch_shows_a_pending_request_and_grants_it_once, |f| {
    let dns = StubDns::start();
    let (srv, hits) = http_server("127.0.0.2:0");
    let port = srv.port();
    dns.set("new.test.vetto", &["127.0.0.2"]);
    let policy = f.root.join("outside/net.toml");
    std::fs::write(
        &policy,
        format!(
            "[network]\nmode = \"allowlist\"\nallow = []\nallow_cidrs = [\"127.0.0.2/32\"]\nresolver = \"{}\"\n\n[approvals]\ntimeout = \"60s\"\n",
            dns.addr
        ),
    )
    .expect("w");
    f.own(&policy);
    let dest = format!("new.test.vetto:{port}");

    // The view, in a terminal of 200×50.
    let tmux = Tmux::new();
    let stderr = f.root.join("watch.err");
    let rc = f.root.join("watch.rc");
    let started = tmux.cmd(&[
        "new-session",
        "-d",
        "-s",
        "watch",
        "-x",
        "200",
        "-y",
        "50",
        "-c",
        &f.proj.display().to_string(),
        &watch_command(f, &stderr, &rc),
    ]);
    assert!(started.status.success(), "tmux: {}", err(&started));
    let watch_err = || {
        format!(
            "watch stderr: {}",
            std::fs::read_to_string(&stderr).unwrap_or_default()
        )
    };
    tmux.wait_for(
        20,
        &[
            "vetto watch",
            "Sessions: 0",
            "no running sessions",
            "no audit store yet",
        ],
        "the empty view",
        watch_err,
    );

    // A session that waits for `go` before it asks for the unlisted name.
    let script = format!(
        "until [ -e go ]; do sleep 0.05; done; curl -sS -p -o /dev/null -w '%{{http_connect}}\\n' http://{dest}/"
    );
    let mut run = Running(Some(
        f.run_command(
            &["--policy", &policy.display().to_string()],
            &["/bin/sh", "-c", &script],
            &f.base_env(),
        )
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("vetto run"),
    ));
    let project = format!("project {}", f.proj.display());
    tmux.wait_for(
        30,
        &["Sessions: 1", &project],
        "the session attached",
        watch_err,
    );

    let go = f.proj.join("go");
    std::fs::write(&go, "").expect("w");
    f.own(&go);
    tmux.wait_for(
        30,
        &["Pending approvals: 1", &dest],
        "the pending request",
        watch_err,
    );

    // `o`: grant the selected (the only) request once.
    let sent = tmux.cmd(&["send-keys", "-t", "watch", "o"]);
    assert!(sent.status.success(), "tmux send-keys: {}", err(&sent));
    let o = run.wait();
    assert_eq!(out(&o), "200\n", "{}", err(&o));
    assert_eq!(
        hits.load(Ordering::SeqCst),
        1,
        "exactly the granted request reached the server"
    );
    let pane = tmux.wait_for(
        20,
        &[
            &format!("granted {dest} once"),
            "approval_granted",
            "grant --once by uid",
        ],
        "the answer and its records",
        watch_err,
    );
    assert!(pane.contains("vetto watch"), "{pane}");

    // `q` ends the view (and with it the tmux session), cleanly.
    let sent = tmux.cmd(&["send-keys", "-t", "watch", "q"]);
    assert!(sent.status.success(), "tmux send-keys: {}", err(&sent));
    assert!(
        eventually(10, || !tmux.alive()),
        "q did not end vetto watch; the pane shows:\n{}",
        tmux.pane()
    );
    assert_eq!(
        std::fs::read_to_string(&rc).unwrap_or_default().trim(),
        "0",
        "{}",
        watch_err()
    );
});
