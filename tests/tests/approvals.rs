//! Approvals end to end: a sandboxed curl asks for a destination the policy does not list,
//! an operator answers from outside (`vetto approvals`), the answer is recorded, persistent
//! grants survive every process, unattended runs park, and the sandbox can never answer its
//! own prompt. Real clients, a stub DNS and test servers on the host's loopback (127.0.0.2,
//! admitted by a test `allow_cidrs`); nothing here sends traffic anywhere but loopback.

use std::io::{BufRead, BufReader};
use std::process::{Child, Output, Stdio};
use std::sync::atomic::Ordering;
use std::sync::mpsc::{channel, Receiver};
use std::time::{Duration, Instant};

use vetto_integration::{both, err, http_server, out, Fixture, StubDns};

const NAME: &str = "new.test.vetto";

fn policy(f: &Fixture, dns: &StubDns, extra: &str) -> String {
    let p = f.root.join("outside/approvals.toml");
    std::fs::write(
        &p,
        format!(
            "[network]\nmode = \"allowlist\"\nallow_cidrs = [\"127.0.0.2/32\"]\nresolver = \"{}\"\n{extra}",
            dns.addr
        ),
    )
    .expect("w");
    f.own(&p);
    p.display().to_string()
}

/// `vetto approvals follow`, read line by line.
struct Follow {
    child: Child,
    lines: Receiver<String>,
}

impl Follow {
    fn start(f: &Fixture) -> Self {
        let bin = f.bin.display().to_string();
        let mut child = f
            .command(&[&bin, "approvals", "follow"], &f.base_env())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("follow");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for l in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(l).is_err() {
                    break;
                }
            }
        });
        Follow { child, lines }
    }

    /// The first line starting with `prefix` within `secs`.
    fn wait(&self, prefix: &str, secs: u64) -> String {
        let end = Instant::now() + Duration::from_secs(secs);
        while let Some(left) = end.checked_duration_since(Instant::now()) {
            match self.lines.recv_timeout(left) {
                Ok(l) if l.starts_with(prefix) => return l,
                Ok(_) => {}
                Err(_) => break,
            }
        }
        panic!("`vetto approvals follow` printed no line starting with {prefix:?} in {secs}s");
    }
}

impl Drop for Follow {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A `vetto run` in the background, stopped (SIGTERM: vetto ends the sandbox) if the test
/// fails before it ends.
struct Run(Option<Child>);

impl Drop for Run {
    fn drop(&mut self) {
        if let Some(c) = &mut self.0 {
            // SAFETY: kill with a pid we spawned and have not reaped, and a signal number.
            unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
            let _ = c.wait();
        }
    }
}

/// `vetto run` started in the background; its script waits for `go` in the project first
/// (and the session ends after two minutes whatever happens).
fn start_run(f: &Fixture, flags: &[&str], script: &str) -> Run {
    let script = format!("until [ -e go ]; do sleep 0.1; done; {script}");
    let mut all = vec!["--wall-clock", "120s"];
    all.extend_from_slice(flags);
    Run(Some(
        f.run_command(&all, &["/bin/sh", "-c", &script], &f.base_env())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("vetto run"),
    ))
}

fn go(f: &Fixture) {
    let p = f.proj.join("go");
    std::fs::write(&p, "").expect("w");
    f.own(&p);
}

fn finish(mut r: Run) -> Output {
    r.0.take()
        .expect("running")
        .wait_with_output()
        .expect("wait")
}

fn curl(port: u16) -> String {
    format!("curl -sS -p -o /dev/null -w '%{{http_connect}}\\n' http://{NAME}:{port}/ 2>/dev/null")
}

/// `curl -v` through the proxy, printing the status and vetto's refusal header.
fn curl_verbose(port: u16) -> String {
    format!("curl -sS -p -v -o /dev/null http://{NAME}:{port}/ 2>&1 | grep -E '^< (HTTP|X-Vetto-Deny)' | tr -d '\\r'; echo done")
}

/// `pending ID SESSION DEST` → ID.
fn pending_id(line: &str) -> String {
    line.split_whitespace().nth(1).expect("id").to_string()
}

fn query(f: &Fixture, kind: &str) -> Vec<serde_json::Value> {
    let o = f.vetto(&["audit", "query", "--kind", kind, "--json"]);
    assert!(o.status.success(), "{}", err(&o));
    out(&o)
        .lines()
        .map(|l| serde_json::from_str(l).expect("json"))
        .collect()
}

both!(ask_waits_for_an_answer_from_outside, |f| {
    let dns = StubDns::start();
    let (srv, hits) = http_server("127.0.0.2:0");
    let port = srv.port();
    dns.set(NAME, &["127.0.0.2"]);
    let p = policy(f, &dns, "");
    let follow = Follow::start(f);
    // Two connections to the same destination wait on one approval; then a denial.
    let run = start_run(
        f,
        &["--policy", &p],
        &format!(
            "({c}) > a & ({c}) > b & wait; cat a b; {v}",
            c = curl(port),
            v = curl_verbose(port)
        ),
    );
    follow.wait("attached", 20);
    go(f);
    let line = follow.wait("pending", 20);
    assert!(line.ends_with(&format!("{NAME}:{port}")), "{line}");
    let id = pending_id(&line);
    // Both connections wait (the waiting count reaches 2) before the grant.
    let both_waiting = vetto_integration::eventually(10, || {
        let o = f.vetto(&["approvals", "--json"]);
        let v: serde_json::Value = serde_json::from_str(&out(&o)).unwrap_or_default();
        v["sessions"][0]["pending"][0]["waiting"] == 2
    });
    assert!(both_waiting, "two connections did not wait on one approval");
    assert_eq!(
        hits.load(Ordering::SeqCst),
        0,
        "nothing passed before the answer"
    );
    let o = f.vetto(&["approvals", "grant", &id]);
    assert!(o.status.success(), "{}", err(&o));
    assert!(out(&o).contains("granted"), "{}", out(&o));
    // Once: the third connection asks again; deny it.
    let line = follow.wait("pending", 20);
    let id2 = pending_id(&line);
    assert_ne!(id, id2);
    let o = f.vetto(&["approvals", "deny", &id2]);
    assert!(o.status.success(), "{}", err(&o));
    let o = finish(run);
    assert_eq!(
        out(&o),
        "200\n200\n< HTTP/1.1 403 Forbidden\n< X-Vetto-Deny: approval-denied\ndone\n",
        "{}",
        err(&o)
    );
    assert_eq!(hits.load(Ordering::SeqCst), 2);
    // Recorded, with who answered.
    let uid = f.uid;
    let granted = query(f, "approval_granted");
    let g = granted.last().expect("granted event");
    assert_eq!(g["id"], id.as_str());
    assert_eq!(g["scope"], "once");
    assert_eq!(g["waiting"], 2);
    let by = g["answered_by"].as_str().unwrap_or_default();
    assert!(
        by.starts_with(&format!("uid {uid} (vetto approvals")),
        "{by}"
    );
    assert_eq!(query(f, "approval_requested").len(), 2);
    assert_eq!(query(f, "approval_denied").len(), 1);
    let conns = query(f, "connection");
    let through: Vec<_> = conns.iter().filter(|c| c["decision"] == "allow").collect();
    assert_eq!(through.len(), 2);
    for c in through {
        let basis = c["basis"].as_str().unwrap_or_default();
        assert!(
            basis.starts_with(&format!("grant --once by uid {uid}")),
            "{basis}"
        );
    }
});

both!(timeout_denies_records_and_parks, |f| {
    let dns = StubDns::start();
    let (srv, hits) = http_server("127.0.0.2:0");
    dns.set(NAME, &["127.0.0.2"]);
    let p = policy(f, &dns, "[approvals]\ntimeout = \"2s\"\n");
    let follow = Follow::start(f);
    let run = start_run(f, &["--policy", &p], &curl_verbose(srv.port()));
    follow.wait("attached", 20);
    go(f);
    let id = pending_id(&follow.wait("pending", 20));
    let o = finish(run);
    assert_eq!(
        out(&o),
        "< HTTP/1.1 403 Forbidden\n< X-Vetto-Deny: approval-timeout\ndone\n",
        "{}",
        err(&o)
    );
    assert_eq!(hits.load(Ordering::SeqCst), 0);
    let t = query(f, "approval_timeout");
    assert_eq!(t.last().expect("timeout event")["id"], id.as_str());
    // Parked: the operator can still let the next run through.
    let o = f.vetto(&["approvals"]);
    assert!(out(&o).contains(&id), "{}", out(&o));
});

both!(always_persists_across_restarts_and_revoke_removes_it, |f| {
    let dns = StubDns::start();
    let (srv, hits) = http_server("127.0.0.2:0");
    let port = srv.port();
    dns.set(NAME, &["127.0.0.2"]);
    let p = policy(f, &dns, "");
    {
        let follow = Follow::start(f);
        let run = start_run(f, &["--policy", &p], &curl(port));
        follow.wait("attached", 20);
        go(f);
        let id = pending_id(&follow.wait("pending", 20));
        let o = f.vetto(&["approvals", "grant", &id, "--always"]);
        assert!(o.status.success(), "{}", err(&o));
        assert_eq!(out(&finish(run)), "200\n");
    }
    // Every process is gone; a new session (nobody attached, unattended) is let through
    // without asking.
    let o = f.run_sh(&["--policy", &p, "--unattended"], &curl(port));
    assert_eq!(out(&o), "200\n", "{}", err(&o));
    assert_eq!(hits.load(Ordering::SeqCst), 2);
    // Listed with where it came from, in `approvals list --all` and in `policy explain`.
    let o = f.vetto(&["approvals", "list", "--all"]);
    let listing = out(&o);
    let rule_line = listing
        .lines()
        .find(|l| l.contains(&format!("{NAME}:{port}")) && l.contains("grant"))
        .unwrap_or_else(|| panic!("no rule listed: {listing}"));
    let rule = rule_line
        .split_whitespace()
        .next()
        .expect("rule id")
        .to_string();
    let o = f.vetto(&["policy", "explain", "--policy", &p]);
    assert!(
        out(&o).contains(&format!("{NAME}:{port}")) && out(&o).contains("grant --always"),
        "{}",
        out(&o)
    );
    // Revoked: the next unattended run is refused (and parked) again.
    let o = f.vetto(&["approvals", "revoke", &rule]);
    assert!(o.status.success(), "{}", err(&o));
    let o = f.run_sh(&["--policy", &p, "--unattended"], &curl(port));
    assert_eq!(out(&o), "403\n", "{}", err(&o));
    assert_eq!(hits.load(Ordering::SeqCst), 2);
    assert_eq!(query(f, "approval_revoked").len(), 1);
});

both!(
    unattended_parks_and_a_later_grant_lets_the_next_run_through,
    |f| {
        let dns = StubDns::start();
        let (srv, hits) = http_server("127.0.0.2:0");
        let port = srv.port();
        dns.set(NAME, &["127.0.0.2"]);
        let p = policy(f, &dns, "");
        // No terminal, nobody attached: parked at once (no wait), as with --unattended and the
        // ci profile's approvals.mode = "deny".
        for flags in [
            vec!["--policy", p.as_str()],
            vec!["--policy", p.as_str(), "--unattended"],
            vec!["--policy", p.as_str(), "--profile", "ci"],
        ] {
            let t = Instant::now();
            let o = f.run_sh(&flags, &curl_verbose(port));
            assert!(
                out(&o).contains("< X-Vetto-Deny: approval-parked\n"),
                "{flags:?}: {}{}",
                out(&o),
                err(&o)
            );
            assert!(t.elapsed() < Duration::from_secs(30));
        }
        assert_eq!(hits.load(Ordering::SeqCst), 0);
        let parked = query(f, "approval_parked");
        assert_eq!(parked.len(), 3);
        let id = parked[0]["id"].as_str().expect("id").to_string();
        // One parked request, asked three times.
        assert!(parked.iter().all(|e| e["id"] == id.as_str()));
        let o = f.vetto(&["approvals"]);
        assert!(
            out(&o).contains(&id) && out(&o).contains("3 time(s)"),
            "{}",
            out(&o)
        );
        // Only --always applies to a parked request.
        let o = f.vetto(&["approvals", "grant", &id]);
        assert!(
            !o.status.success() && err(&o).contains("Only --always"),
            "{}",
            err(&o)
        );
        let o = f.vetto(&["approvals", "grant", &id, "--always"]);
        assert!(o.status.success(), "{}", err(&o));
        let o = f.run_sh(&["--policy", &p, "--unattended"], &curl(port));
        assert_eq!(out(&o), "200\n", "{}", err(&o));
        assert_eq!(hits.load(Ordering::SeqCst), 1);
        let g = query(f, "approval_granted");
        assert_eq!(g.last().expect("granted")["scope"], "always");
    }
);

both!(the_sandbox_cannot_answer_its_own_prompt, |f| {
    let dns = StubDns::start();
    let (srv, hits) = http_server("127.0.0.2:0");
    let port = srv.port();
    dns.set(NAME, &["127.0.0.2"]);
    let p = policy(f, &dns, "[approvals]\ntimeout = \"60s\"\n");
    let bin_dir = f.bin.parent().expect("bin dir").display().to_string();
    let follow = Follow::start(f);
    let home = f.home.display().to_string();
    let script = format!(
        "({c}) > result & \
         until [ -e id ]; do sleep 0.05; done; id=$(cat id); \
         cat {home}/.local/state/vetto/audit/approvals.db >/dev/null 2>&1 && echo 'store readable' || echo 'store unreadable'; \
         echo \"cli: $({bin}/vetto approvals grant \"$id\" --always 2>&1 | head -c 300)\"; \
         for s in \"$XDG_RUNTIME_DIR\"/vetto/sessions/*/control.sock /tmp/vetto-*/sessions/*/control.sock /dev/shm/vetto-*/sessions/*/control.sock; do [ -S \"$s\" ] && echo \"socket visible: $s\"; done; \
         python3 ctl.py \"$id\" 2>&1 | tail -n 1; \
         touch asked; wait; echo \"curl: $(cat result)\"",
        c = curl(port),
        bin = bin_dir,
    );
    let run = start_run(f, &["--policy", &p, "--allow-read", &bin_dir], &script);
    follow.wait("attached", 20);
    go(f);
    let line = follow.wait("pending", 20);
    let id = pending_id(&line);
    let session = line.split_whitespace().nth(2).expect("session").to_string();
    // A copy of the real control socket in the project (a hard link: the same socket).
    let sock = f
        .root
        .join(format!("run/vetto/sessions/{session}/control.sock"));
    std::fs::hard_link(&sock, f.proj.join("ctl.sock")).expect("link the control socket");
    let py = f.proj.join("ctl.py");
    std::fs::write(
        &py,
        "import json, socket, sys\n\
         s = socket.socket(socket.AF_UNIX)\n\
         s.connect('ctl.sock')\n\
         req = {'op': 'answer', 'id': sys.argv[1], 'verdict': 'grant', 'scope': 'always', 'pattern': None, 'via': 'x'}\n\
         try:\n    s.sendall((json.dumps(req) + '\\n').encode())\n\
         except OSError:\n    pass\n\
         print('copy:', s.makefile().readline().strip())\n",
    )
    .expect("w");
    f.own(&py);
    let idf = f.proj.join("id");
    std::fs::write(&idf, &id).expect("w");
    f.own(&idf);
    // The sandbox has made its three attempts when `asked` appears; the request still waits.
    assert!(vetto_integration::eventually(30, || f
        .proj
        .join("asked")
        .exists()));
    let o = f.vetto(&["approvals", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&out(&o)).expect("json");
    assert_eq!(v["sessions"][0]["pending"][0]["id"], id.as_str(), "{v}");
    assert_eq!(v["rules"], serde_json::json!([]));
    let o = f.vetto(&["approvals", "deny", &id]);
    assert!(o.status.success(), "{}", err(&o));
    let o = finish(run);
    let text = out(&o);
    assert!(
        text.contains("cli: ") && !text.contains("granted"),
        "{text}"
    );
    assert!(!text.contains("socket visible"), "{text}");
    assert!(text.contains("store unreadable"), "{text}");
    assert!(
        text.contains("copy: {\"ok\":false") && text.contains("namespace"),
        "{text}"
    );
    assert!(text.contains("curl: 403"), "{text}\n{}", err(&o));
    assert_eq!(hits.load(Ordering::SeqCst), 0);
    assert!(RuleCount::of(f) == 0, "the sandbox made a persistent rule");
    // The refused attempt is in the audit trail.
    let refusals = query(f, "refusal");
    assert!(
        refusals.iter().any(|r| r["subject"] == "approvals control"),
        "{refusals:?}"
    );
});

struct RuleCount;
impl RuleCount {
    fn of(f: &Fixture) -> usize {
        let o = f.vetto(&["approvals", "--json", "--all"]);
        let v: serde_json::Value = serde_json::from_str(&out(&o)).expect("json");
        v["rules"].as_array().map_or(0, Vec::len)
    }
}

both!(a_granted_name_with_a_private_answer_is_still_refused, |f| {
    let dns = StubDns::start();
    let (srv, hits) = http_server("127.0.0.2:0");
    let port = srv.port();
    // 127.0.0.1 is loopback, outside the test's allow_cidrs (127.0.0.2/32).
    dns.set(NAME, &["127.0.0.2"]);
    let p = policy(f, &dns, "");
    // The whole refusal, as the sandbox sees it.
    let raw = format!(
        "exec 3<>/dev/tcp/127.0.0.1/3128; printf 'CONNECT {NAME}:{port} HTTP/1.1\\r\\nHost: {NAME}:{port}\\r\\n\\r\\n' >&3; cat <&3"
    );
    let o = f.run_argv(&["--policy", &p], &["/bin/bash", "-c", &raw]);
    let parked = query(f, "approval_parked");
    let id = parked[0]["id"].as_str().expect("id").to_string();
    // The sandbox is told why, never the id (an authorisation's handle it could replay to the
    // operator on the terminal they share).
    assert!(
        out(&o).contains("X-Vetto-Deny: approval-parked\r\n"),
        "{}",
        out(&o)
    );
    assert!(out(&o).contains("kept for the operator"), "{}", out(&o));
    assert!(!out(&o).contains(&id), "{}", out(&o));
    let o = f.vetto(&["approvals", "grant", &id, "--always"]);
    assert!(o.status.success(), "{}", err(&o));
    dns.set(NAME, &["127.0.0.1"]);
    let o = f.run_sh(&["--policy", &p], &curl_verbose(port));
    assert!(
        out(&o).contains("< X-Vetto-Deny: non-public-answer"),
        "{}{}",
        out(&o),
        err(&o)
    );
    assert_eq!(hits.load(Ordering::SeqCst), 0);
});

both!(explicit_policy_deny_beats_allow_and_grants, |f| {
    let dns = StubDns::start();
    let (srv, hits) = http_server("127.0.0.2:0");
    let port = srv.port();
    dns.set(NAME, &["127.0.0.2"]);
    let p = policy(
        f,
        &dns,
        &format!("allow = [\"{NAME}:{port}\"]\ndeny = [\"*.test.vetto\"]\n"),
    );
    let o = f.run_sh(&["--policy", &p], &curl_verbose(port));
    assert!(
        out(&o).contains("< X-Vetto-Deny: policy-deny"),
        "{}{}",
        out(&o),
        err(&o)
    );
    assert_eq!(hits.load(Ordering::SeqCst), 0);
    assert!(
        query(f, "approval_parked").is_empty(),
        "a policy deny never asks"
    );
});

// The approvals store sits beside the audit store: masked even for a project that holds it
// (HOME), audited or not, and every directory above it pinned as a mount point, so the sandbox
// can neither read nor write a grant, nor move the directory aside and plant one of its own
// for the next session.
both!(the_store_is_masked_from_a_project_around_it, |f| {
    let dns = StubDns::start();
    let p = policy(f, &dns, "");
    let home = f.home.display().to_string();
    let o = f.run_sh(
        &["--no-audit", "--policy", &p, "--project", &home],
        &format!(
            "curl -s -p -o /dev/null http://{NAME}:1/ 2>/dev/null; \
             d={home}/.local/state/vetto/audit; ls \"$d\" >/dev/null 2>&1 && echo listed; \
             cat \"$d/approvals.db\" >/dev/null 2>&1 && echo read; \
             (echo x >> \"$d/approvals.db\") 2>/dev/null && echo wrote; \
             mv \"$d\" {home}/.local/state/vetto/moved 2>/dev/null && echo moved; \
             for a in {home}/.local/state/vetto {home}/.local/state {home}/.local; do \
               mv \"$a\" \"$a.aside\" 2>/dev/null && echo \"moved $a\"; \
               rm -rf \"$a\" 2>/dev/null; [ -d \"$a\" ] || echo \"removed $a\"; \
             done; \
             mkdir -p /tmp/fake/vetto/audit && mv -T /tmp/fake/vetto {home}/.local/state/vetto 2>/dev/null && echo replaced; \
             echo done"
        ),
    );
    assert_eq!(out(&o), "done\n", "{}", err(&o));
    // The curl went through the broker, which had opened the store (and parked the name).
    assert!(
        f.home
            .join(".local/state/vetto/audit/approvals.db")
            .exists(),
        "the broker opened the store"
    );
});

// Reading or answering never creates a store: a store vetto did not make for a session is not
// one to trust, and an empty one answers nothing. A store named with --store must exist.
both!(the_approvals_cli_creates_no_store, |f| {
    let state = f.home.join(".local/state/vetto");
    let o = f.vetto(&["approvals", "list", "--all"]);
    assert!(o.status.success(), "{}", err(&o));
    assert!(out(&o).contains("no pending requests"), "{}", out(&o));
    let o = f.vetto(&["approvals", "grant", "0123abcd", "--always"]);
    assert!(!o.status.success());
    assert!(
        err(&o).contains("no pending or parked request 0123abcd"),
        "{}",
        err(&o)
    );
    let o = f.vetto(&["approvals", "revoke", "0123abcd"]);
    assert!(!o.status.success());
    assert!(
        err(&o).contains("no persistent rule or session answer 0123abcd"),
        "{}",
        err(&o)
    );
    assert!(
        !state.join("audit/approvals.db").exists(),
        "a store was created"
    );
    let missing = f.root.join("outside/none.db");
    let m = missing.display().to_string();
    let o = f.vetto(&["approvals", "--store", &m]);
    assert!(!o.status.success());
    assert!(err(&o).contains("no approvals store at"), "{}", err(&o));
    assert!(!missing.exists());
});
