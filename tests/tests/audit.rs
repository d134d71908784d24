//! The audit trail of `vetto run`, through the real binary: what a session records, one valid
//! chain under concurrency, `vetto audit verify` finding tampering, exporters that refuse a
//! symlink or a FIFO, and a store, key and exporter the sandbox cannot reach.

use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use vetto_integration::{
    both, echo_server, err, eventually, out, pids_with, sleeping, spawn_retrying, supervisor_of,
    Fixture,
};

/// The fixture's audit store directory (HOME/.local/state/vetto/audit).
fn audit_dir(f: &Fixture) -> PathBuf {
    f.home.join(".local/state/vetto/audit")
}

/// `vetto audit query --json [args]`, one event per line.
fn events(f: &Fixture, args: &[&str]) -> Vec<Value> {
    let mut full = vec!["audit", "query", "--json"];
    full.extend_from_slice(args);
    let o = f.vetto(&full);
    assert!(o.status.success(), "audit query: {}", err(&o));
    out(&o)
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON event per line"))
        .collect()
}

fn verify(f: &Fixture) -> (bool, String) {
    let o = f.vetto(&["audit", "verify"]);
    (o.status.success(), format!("{}{}", out(&o), err(&o)))
}

fn policy(f: &Fixture, name: &str, body: &str) -> String {
    let p = f.root.join("outside").join(name);
    std::fs::write(&p, body).expect("w");
    f.own(&p);
    p.display().to_string()
}

both!(a_session_records_start_and_end_with_what_ran, |f| {
    let o = f.run_sh(&[], "exit 3");
    assert_eq!(o.status.code(), Some(3), "{}", err(&o));
    let ev = events(f, &[]);
    let kinds: Vec<&str> = ev
        .iter()
        .map(|e| e["kind"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(kinds, ["session_start", "session_end"], "{ev:?}");
    let (start, end) = (&ev[0], &ev[1]);
    assert_eq!(start["session"], end["session"]);
    assert_eq!(
        (start["session_seq"].as_u64(), end["session_seq"].as_u64()),
        (Some(1), Some(2))
    );
    assert_eq!(
        start["argv"],
        serde_json::json!(["/bin/sh", "-c", "exit 3"])
    );
    assert_eq!(start["uid"].as_u64(), Some(u64::from(f.uid)));
    assert_eq!(start["engine"]["kind"], "run");
    assert_eq!(start["tier"], "FULL");
    assert!(
        start["landlock_abi"].as_u64().is_some_and(|a| a >= 1),
        "{start}"
    );
    assert_eq!(start["policy_digest"].as_str().map(str::len), Some(64));
    assert_eq!(start["profile"], "default");
    assert!(start["project"]
        .as_str()
        .is_some_and(|p| p.ends_with("/proj")));
    assert_eq!(end["reason"], "exit");
    assert_eq!(end["status"].as_i64(), Some(3));
    assert!(start["time"]
        .as_str()
        .is_some_and(|t| t.ends_with('Z') && t.len() == 24));
    assert_eq!(end["prev"], start["hash"], "the chain links the two");
    let (ok, text) = verify(f);
    assert!(ok, "{text}");
    // The store and its key are the caller's, and private.
    use std::os::unix::fs::MetadataExt;
    for name in ["audit.db", "audit.key", "audit.db.head"] {
        let m = std::fs::metadata(audit_dir(f).join(name)).expect(name);
        assert_eq!((m.uid(), m.mode() & 0o077), (f.uid, 0), "{name}");
    }
});

both!(twenty_concurrent_sessions_keep_one_valid_chain, |f| {
    let children: Vec<Child> = (0..20)
        .map(|i| {
            f.run_command(&[], &["/bin/sh", "-c", &format!("echo {i}")], &f.base_env())
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawn")
        })
        .collect();
    for c in children {
        let o = c.wait_with_output().expect("wait");
        assert!(o.status.success(), "{}", err(&o));
    }
    let (ok, text) = verify(f);
    assert!(ok, "{text}");
    assert!(text.contains("40 records in 20 sessions"), "{text}");
    let o = f.vetto(&["audit", "sessions", "--json"]);
    let sessions: Vec<Value> = out(&o)
        .lines()
        .map(|l| serde_json::from_str(l).expect("json"))
        .collect();
    assert_eq!(sessions.len(), 20);
    for s in &sessions {
        assert_eq!(s["events"].as_u64(), Some(2), "{s}");
        assert_eq!(s["start"]["kind"], "session_start", "{s}");
        assert_eq!(s["end"]["reason"], "exit", "{s}");
    }
    // Chain positions are 1..40 with no gap, each session's own numbering 1, 2.
    let ev = events(f, &[]);
    let seqs: Vec<u64> = ev.iter().filter_map(|e| e["seq"].as_u64()).collect();
    assert_eq!(seqs, (1..=40).collect::<Vec<_>>());
});

both!(the_store_key_and_exporter_are_unreachable_inside, |f| {
    // One session first, so the store, key and head exist.
    assert!(f.run_sh(&[], "true").status.success());
    let dir = audit_dir(f);
    let state = f.home.join(".local/state");
    let collector = echo_server("127.0.0.1:0");
    let script = format!(
        r#"d='{d}'
ls -A "$d" 2>&1 | sed 's/^/LIST:/'
for n in audit.db audit.key audit.db.head audit.db.lock audit.pub; do
  if head -c1 "$d/$n" >/dev/null 2>&1; then echo "READ:$n"; fi
  if : >>"$d/$n" 2>/dev/null; then echo "WROTE:$n"; fi
done
if (exec 3<>/dev/tcp/127.0.0.1/{port}) 2>/dev/null; then echo CONNECTED; fi
for p in /proc/[0-9]*; do ls -l "$p/fd" 2>/dev/null; done | grep -c audit | sed 's/^/FDS:/'
echo done"#,
        d = dir.display(),
        port = collector.port()
    );
    // Even when the policy opens the state directory, the store's directory is masked.
    let st = state.display().to_string();
    let o = f.run_argv(&["--allow-read", &st], &["/bin/bash", "-c", &script]);
    let text = out(&o);
    assert!(text.ends_with("done\n"), "{text}{}", err(&o));
    assert!(!text.contains("READ:"), "{text}");
    assert!(!text.contains("WROTE:"), "{text}");
    assert!(!text.contains("CONNECTED"), "{text}");
    assert!(text.contains("FDS:0"), "{text}");
    assert!(
        !text.lines().any(|l| l.starts_with("LIST:audit")),
        "the store's files are listed inside: {text}"
    );
    let (ok, text) = verify(f);
    assert!(ok, "{text}");
    // A writable root that holds the store would let the sandbox rename an ancestor and carry
    // the store away: refused, and the command does not run.
    let local = f.home.join(".local").display().to_string();
    let o = f.run_sh(&["--allow-write", &local], "touch ran");
    assert!(!o.status.success());
    assert!(err(&o).contains("vetto's audit store"), "{}", err(&o));
    assert!(!f.proj.join("ran").exists());
});

both!(a_denied_connection_is_recorded_and_summarised, |f| {
    let echo = echo_server("127.0.0.1:0");
    let p = policy(
        f,
        "net.toml",
        &format!(
            "[network]\nmode = \"allowlist\"\nallow = [\"allowed.test.vetto\"]\nhost_ports = [{}]\n",
            echo.port()
        ),
    );
    let report = f.root.join("outside/report.json");
    let rep = report.display().to_string();
    let script = format!(
        "exec 3<>/dev/tcp/127.0.0.1/{}; echo ping >&3; read -r l <&3; echo \"$l\"; exec 3>&-; curl -s -m 5 https://denied.test.vetto/ >/dev/null; echo after",
        echo.port()
    );
    f.own(&f.root.join("outside"));
    let o = f.run_argv(
        &["--policy", &p, "--summary", "--report", &rep],
        &["/bin/bash", "-c", &script],
    );
    assert_eq!(out(&o), "ping\nafter\n", "{}", err(&o));
    let e = err(&o);
    assert!(
        e.contains("denied:") && e.contains("denied.test.vetto:443  (approval-parked ×1)"),
        "{e}"
    );
    let conns = events(f, &["--kind", "connection"]);
    assert_eq!(conns.len(), 2, "{conns:?}");
    let denied = conns
        .iter()
        .find(|c| c["decision"] == "deny")
        .expect("a denied connection");
    assert_eq!(denied["destination"], "denied.test.vetto:443");
    // Not listed, nobody to answer (no terminal, nothing attached): refused and parked.
    assert_eq!(denied["reason"], "approval-parked");
    assert!(denied["dialled"].is_null());
    let allowed = conns
        .iter()
        .find(|c| c["decision"] == "allow")
        .expect("the host-port connection");
    assert_eq!(allowed["dialled"], format!("127.0.0.1:{}", echo.port()));
    assert_eq!(allowed["bytes_up"].as_u64(), Some(5));
    assert_eq!(allowed["bytes_down"].as_u64(), Some(5));
    // Connections come between the session's start and end.
    let all = events(f, &[]);
    assert_eq!(
        all.first().map(|e| e["kind"].clone()),
        Some("session_start".into())
    );
    assert_eq!(
        all.last().map(|e| e["kind"].clone()),
        Some("session_end".into())
    );
    let r: Value = serde_json::from_slice(&std::fs::read(&report).expect("report")).expect("json");
    assert_eq!(r["end"]["reason"], "exit");
    let d = r["destinations"].as_array().expect("destinations");
    assert!(
        d.iter()
            .any(|x| x["destination"] == "denied.test.vetto:443" && x["denied"] == 1),
        "{r}"
    );
});

both!(the_wall_clock_limit_is_recorded, |f| {
    let o = f.run_argv(&["--wall-clock", "1s"], &["/bin/sleep", "30"]);
    assert_eq!(o.status.code(), Some(124), "{}", err(&o));
    let ev = events(f, &[]);
    let limit = ev
        .iter()
        .find(|e| e["kind"] == "limit")
        .expect("a limit event");
    assert_eq!(limit["limit"], "wall_clock");
    let end = ev.last().expect("end");
    assert_eq!(end["reason"], "wall_clock");
    assert_eq!(end["status"].as_i64(), Some(124));
});

/// The session's audit writers (a forked process named `vetto-audit`) whose parent is `ppid`,
/// and whether each is a zombie.
fn writers_of(ppid: u32) -> Vec<(u32, bool)> {
    vetto_integration::children_of(ppid)
        .into_iter()
        .filter(|(_, comm, _)| comm == "vetto-audit")
        .map(|(pid, _, state)| (pid, state == "Z"))
        .collect()
}

// The writer is in its own process group and ignores the terminal's signals: Ctrl-C (SIGINT
// to the whole foreground group) and a group SIGTERM reach the supervisor, which forwards them
// to the sandbox, and the session's end is still recorded, in both tiers. Without that, the signal killed
// the writer with the command, and the end went unrecorded.
both!(
    a_signal_to_the_whole_process_group_still_records_the_end,
    |f| {
        // The root and rootless variants run at once: each has its own tags.
        let base = 4711 + 10 * u32::from(f.uid != 0);
        for (tier, sig, n) in [
            ("full", libc::SIGINT, 0),
            ("full", libc::SIGTERM, 1),
            ("fs-only", libc::SIGINT, 2),
            ("fs-only", libc::SIGTERM, 3),
        ] {
            let tag = &(base + n).to_string();
            let mut c = f.run_command(&["--tier", tier], &["sleep", tag], &f.base_env());
            {
                use std::os::unix::process::CommandExt;
                c.process_group(0);
            }
            let child = spawn_retrying(
                c.stdin(Stdio::null())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped()),
            );
            assert!(eventually(10, || sleeping(tag)), "the command never ran");
            // The writer is the supervisor's child; vetto's own pid is the front's.
            let sup = supervisor_of(child.id()).expect("the supervisor");
            let writers = writers_of(sup);
            assert_eq!(
                writers.len(),
                1,
                "one audit writer per session ({tier}, vetto {}): {writers:?} {}",
                child.id(),
                String::from_utf8_lossy(
                    &std::process::Command::new("ps")
                        .args(["-eo", "pid,ppid,pgid,stat,comm,args"])
                        .output()
                        .map(|o| o.stdout)
                        .unwrap_or_default()
                )
            );
            // SAFETY: a signal to the process group the test just made (its leader is vetto).
            unsafe { libc::kill(-(child.id() as i32), sig) };
            let o = child.wait_with_output().expect("wait");
            assert_eq!(o.status.code(), Some(128 + sig), "{}", err(&o));
            let ev = events(f, &[]);
            let end = ev
                .iter()
                .rev()
                .find(|e| e["kind"] == "session_end")
                .expect("a session_end");
            assert_eq!(end["signal"].as_i64(), Some(i64::from(sig)), "{end}");
            assert_eq!(end["status"].as_i64(), Some(i64::from(128 + sig)), "{end}");
            // Reaped by the supervisor (not merely dead): nothing of the session is left. It
            // answered before vetto's status was delivered, and is reaped just after
            // (`shim/src/front.rs`).
            let (writer, _) = writers[0];
            assert!(
                eventually(5, || std::fs::read_to_string(format!(
                    "/proc/{writer}/comm"
                ))
                .map_or(true, |c| c.trim() != "vetto-audit")),
                "the writer {writer} is still there"
            );
        }
        let (ok, text) = verify(f);
        assert!(ok, "{text}");
    }
);

/// The CPUs a process may run on (`Cpus_allowed_list` of `/proc/PID/status`: `0-3,6`).
fn cpus_allowed(pid: u32) -> Vec<u32> {
    let list = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| {
            l.strip_prefix("Cpus_allowed_list:")
                .map(|v| v.trim().to_string())
        })
        .unwrap_or_default();
    let mut cpus = vec![];
    for part in list.split(',').filter(|p| !p.is_empty()) {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        if let (Ok(a), Ok(b)) = (a.parse::<u32>(), b.parse::<u32>()) {
            cpus.extend(a..=b);
        }
    }
    cpus
}

// The writer runs off the CPU the supervisor forked it on (shim/src/cpus.rs): while the
// command runs, its CPUs are the supervisor's but one, in both tiers. A supervisor allowed a
// single CPU keeps nothing off it, and its session is recorded as any other.
both!(the_writer_runs_off_the_cpu_it_was_forked_on, |f| {
    let base = 4751 + 10 * u32::from(f.uid != 0);
    for (n, tier) in [(0, "full"), (1, "fs-only")] {
        let tag = &(base + n).to_string();
        let child = spawn_retrying(
            f.run_command(&["--tier", tier], &["sleep", tag], &f.base_env())
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::piped()),
        );
        let ran = eventually(10, || sleeping(tag));
        let sup = supervisor_of(child.id()).unwrap_or(0);
        let writers = writers_of(sup);
        let supervisor = cpus_allowed(sup);
        let writer = writers.first().map(|w| cpus_allowed(w.0));
        // Ended before anything is asserted: a failure leaves no session running.
        // SAFETY: a signal to the vetto this test started.
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        let o = child.wait_with_output().expect("wait");
        assert!(ran, "{tier}: the command never ran: {}", err(&o));
        assert_eq!(writers.len(), 1, "{tier}: {writers:?}");
        assert!(!supervisor.is_empty(), "{tier}: no Cpus_allowed_list");
        let writer = writer.unwrap_or_default();
        match supervisor.len() {
            1 => assert_eq!(writer, supervisor, "{tier}: one CPU, nothing kept off"),
            n => {
                assert_eq!(writer.len(), n - 1, "{tier}: {writer:?} of {supervisor:?}");
                assert!(
                    writer.iter().all(|c| supervisor.contains(c)),
                    "{tier}: {writer:?} of {supervisor:?}"
                );
            }
        }
        assert_eq!(o.status.code(), Some(143), "{tier}: {}", err(&o));
    }
    // SAFETY: an all-zero cpu_set_t is a valid (empty) set; CPU 0 is below CPU_SETSIZE.
    let one = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        let mut mine: libc::cpu_set_t = std::mem::zeroed();
        libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut mine);
        let first = (0..libc::CPU_SETSIZE as usize)
            .find(|&c| libc::CPU_ISSET(c, &mine))
            .unwrap_or(0);
        libc::CPU_SET(first, &mut set);
        set
    };
    let before = events(f, &[]).len();
    let mut c = f.run_command(&[], &["/bin/true"], &f.base_env());
    {
        use std::os::unix::process::CommandExt;
        // SAFETY: only sched_setaffinity (async-signal-safe) runs between fork and exec.
        unsafe {
            c.pre_exec(move || {
                match libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &one) {
                    0 => Ok(()),
                    _ => Err(std::io::Error::last_os_error()),
                }
            });
        }
    }
    let o = vetto_integration::output_of(c.stdin(Stdio::null()));
    assert!(o.status.success(), "one CPU: {}", err(&o));
    let ev = events(f, &[]);
    assert_eq!(ev.len(), before + 2, "one CPU: start and end recorded");
    assert_eq!(
        ev.last().map(|e| e["kind"].clone()),
        Some("session_end".into())
    );
});

/// `sleep TAG` in a session, once it runs: the supervisor and its audit writer's pid.
fn sleeping_session(f: &Fixture, tag: &str) -> (Child, u32) {
    let child = spawn_retrying(
        f.run_command(&[], &["sleep", tag], &f.base_env())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
    );
    assert!(eventually(10, || sleeping(tag)), "the command never ran");
    let sup = supervisor_of(child.id()).expect("the supervisor");
    let writers = writers_of(sup);
    assert_eq!(writers.len(), 1, "{writers:?}");
    (child, writers[0].0)
}

// A supervisor killed outright leaves no session open in the store and no process behind
// holding it: its writer sees the connection close, records the end as `lost` (saying the
// supervisor ended before it recorded the end), and exits.
both!(a_killed_supervisor_leaves_no_audit_writer, |f| {
    // The root and rootless variants run at once: each has its own tag.
    let tag = &(4731 + u32::from(f.uid != 0)).to_string();
    let (child, writer) = sleeping_session(f, tag);
    // SAFETY: SIGKILL to the child this test started.
    unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
    let mut child = child;
    let _ = child.wait();
    // Gone, or a zombie waiting for the host's init to reap it: not running.
    let dead = || {
        std::fs::read_to_string(format!("/proc/{writer}/stat")).map_or(true, |s| {
            s.rsplit_once(") ")
                .is_some_and(|(_, t)| t.starts_with("Z ") || t.starts_with("X "))
        })
    };
    assert!(eventually(5, dead), "the writer outlived its supervisor");
    assert!(
        eventually(5, || !sleeping(tag)),
        "the sandbox outlived its supervisor"
    );
    let ev = events(f, &[]);
    let start = ev
        .iter()
        .rfind(|e| e["kind"] == "session_start" && e["argv"][1] == tag.as_str())
        .unwrap_or_else(|| panic!("no session_start for sleep {tag}: {ev:?}"));
    let ends: Vec<&Value> = ev
        .iter()
        .filter(|e| e["kind"] == "session_end" && e["session"] == start["session"])
        .collect();
    assert_eq!(ends.len(), 1, "{ev:?}");
    assert_eq!(ends[0]["reason"], "lost", "{}", ends[0]);
    assert_eq!(ends[0]["status"], Value::Null, "{}", ends[0]);
    let control = ends[0]["control"].as_str().unwrap_or_default();
    assert!(
        control.contains("supervisor ended, or closed the session, before it recorded"),
        "{control}"
    );
    let (ok, text) = verify(f);
    assert!(ok, "{text}");
});

// The supervisor and its writer killed together (a killed process tree, a stopped machine):
// nothing ends the record then. The next session sweeps the dead one's directory, and its
// writer ends that record as `lost`, naming itself.
both!(a_session_killed_with_its_writer_is_ended_by_the_next, |f| {
    let tag = &(4741 + u32::from(f.uid != 0)).to_string();
    let (child, writer) = sleeping_session(f, tag);
    // SAFETY: SIGKILL to the writer, then the supervisor, that this test started.
    unsafe {
        libc::kill(writer as i32, libc::SIGKILL);
        libc::kill(child.id() as i32, libc::SIGKILL);
    }
    let mut child = child;
    let _ = child.wait();
    assert!(
        eventually(5, || !sleeping(tag)),
        "the sandbox outlived its supervisor"
    );
    let dead = events(f, &[])
        .into_iter()
        .rfind(|e| e["kind"] == "session_start" && e["argv"][1] == tag.as_str())
        .and_then(|e| e["session"].as_str().map(str::to_string))
        .expect("the killed session's start");
    let ends =
        |f: &Fixture| -> Vec<Value> { events(f, &["--session", &dead, "--kind", "session_end"]) };
    assert!(ends(f).is_empty(), "ended by whom? {:?}", ends(f));
    // The next session sweeps it and ends it, before its own end.
    let o = f.run_sh(&[], "true");
    assert!(o.status.success(), "{}", err(&o));
    let ended = ends(f);
    assert_eq!(ended.len(), 1, "{ended:?}");
    let next = events(f, &["--kind", "session_start"])
        .last()
        .and_then(|e| e["session"].as_str().map(str::to_string))
        .expect("the next session");
    assert_ne!(next, dead);
    assert_eq!(ended[0]["reason"], "lost", "{}", ended[0]);
    assert_eq!(ended[0]["status"], Value::Null, "{}", ended[0]);
    let control = ended[0]["control"].as_str().unwrap_or_default();
    assert!(
        control.contains("both ended before they recorded")
            && control.contains(&format!("found by session {next}")),
        "{control}"
    );
    // Once only: a later session finds nothing more to end.
    assert!(f.run_sh(&[], "true").status.success());
    assert_eq!(ends(f).len(), 1);
    let (ok, text) = verify(f);
    assert!(ok, "{text}");
});

both!(a_rejected_policy_leaves_a_refusal, |f| {
    let p = policy(f, "bad.toml", "[filesystem]\nprojcet = \"write\"\n");
    let o = f.run_sh(&["--policy", &p], "touch ran");
    assert!(!o.status.success());
    assert!(!f.proj.join("ran").exists());
    let ev = events(f, &["--kind", "refusal"]);
    assert_eq!(ev.len(), 1, "{ev:?}");
    assert_eq!(ev[0]["subject"], "policy");
    let reason = ev[0]["reasons"][0].as_str().unwrap_or("");
    assert!(reason.contains("projcet"), "{reason}");
    assert!(err(&o).contains("projcet"));
});

both!(jsonl_export_and_its_refusals, |f| {
    let outside = f.root.join("outside");
    f.own(&outside);
    let file = outside.join("audit.jsonl");
    let o = f.run_sh(&["--audit-jsonl", &file.display().to_string()], "echo hi");
    assert_eq!(out(&o), "hi\n", "{}", err(&o));
    let lines: Vec<Value> = std::fs::read_to_string(&file)
        .expect("jsonl")
        .lines()
        .map(|l| serde_json::from_str(l).expect("json"))
        .collect();
    assert_eq!(
        lines,
        events(f, &[]),
        "the JSONL lines are the store's records"
    );
    // A symlink (even to a regular file) and a FIFO are refused, and the command does not run.
    let link = outside.join("link.jsonl");
    std::os::unix::fs::symlink(&file, &link).expect("symlink");
    let fifo = outside.join("fifo.jsonl");
    let st = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .expect("mkfifo");
    assert!(st.success());
    f.own(&outside);
    let inside = f.proj.join("audit.jsonl");
    for (p, why) in [
        (&link, "symbolic link"),
        (&fifo, "FIFO"),
        (&inside, "which the sandbox can write"),
    ] {
        let started = Instant::now();
        let o = f.run_sh(&["--audit-jsonl", &p.display().to_string()], "touch ran");
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "it blocked on {}",
            p.display()
        );
        assert!(!o.status.success(), "{}", p.display());
        assert!(err(&o).contains(why), "{}: {}", p.display(), err(&o));
        assert!(
            !f.proj.join("ran").exists(),
            "the command ran despite {}",
            p.display()
        );
    }
    // Stdout is shared with the sandboxed command (it could forge lines), and a file the
    // sandbox can read would show it every session's commands: both refused.
    let readable = outside.display().to_string();
    let file_s = file.display().to_string();
    for (flags, why) in [
        (vec!["--audit-jsonl", "-"], "could forge lines"),
        (
            vec![
                "--allow-read",
                readable.as_str(),
                "--audit-jsonl",
                file_s.as_str(),
            ],
            "which the sandbox can read",
        ),
    ] {
        let o = f.run_sh(&flags, "touch ran");
        assert!(!o.status.success(), "{flags:?}");
        assert!(err(&o).contains(why), "{flags:?}: {}", err(&o));
        assert!(
            !f.proj.join("ran").exists(),
            "the command ran despite {flags:?}"
        );
    }
});

/// Run SQL on the fixture's store (as root, the test's identity: the file stays the user's).
fn tamper(f: &Fixture, sql: &str) {
    let db = audit_dir(f).join("audit.db");
    let st = std::process::Command::new("python3")
        .args(["-c", "import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); c.executescript(sys.argv[2]); c.commit()"])
        .arg(&db)
        .arg(sql)
        .status()
        .expect("python3");
    assert!(st.success(), "tampering failed: {sql}");
}

fn copy_store(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for n in ["audit.db", "audit.db-wal", "audit.db-shm", "audit.db.head"] {
        if from.join(n).exists() {
            std::fs::copy(from.join(n), to.join(n)).expect("copy");
        }
    }
}

both!(
    verify_finds_tampering_and_a_broken_store_stops_new_sessions,
    |f| {
        for _ in 0..3 {
            assert!(f.run_sh(&[], "true").status.success());
        }
        let dir = audit_dir(f);
        let clean = f.root.join("clean");
        // The files are copied with no writer left: the last session's may still be folding
        // the WAL for a moment after vetto's exit (it, and every process of these sessions,
        // carries the staged binary's path in its command line).
        let bin = f.bin.display().to_string();
        assert!(
            eventually(5, || pids_with(&bin).is_empty()),
            "{:?}",
            pids_with(&bin)
        );
        copy_store(&dir, &clean);
        let (ok, text) = verify(f);
        assert!(ok, "{text}");
        let restore = || {
            for n in ["audit.db-wal", "audit.db-shm"] {
                let _ = std::fs::remove_file(dir.join(n));
            }
            copy_store(&clean, &dir);
            f.own(&dir);
        };
        let cases: [(&str, &str, &str); 3] = [
            (
                "UPDATE records SET body = replace(body, '\"exit\"', '\"killed\"') WHERE seq = 4",
                "BROKEN at record 4",
                "edited",
            ),
            (
                "DELETE FROM records WHERE seq = 3",
                "BROKEN at record 3",
                "missing",
            ),
            (
                "DELETE FROM records WHERE seq = 6; DELETE FROM checkpoints WHERE seq = 6",
                "BROKEN at record 6",
                "cut off",
            ),
        ];
        for (sql, at, why) in cases {
            restore();
            tamper(f, sql);
            let (ok, text) = verify(f);
            assert!(!ok, "{sql}: {text}");
            assert!(text.contains(at) && text.contains(why), "{sql}: {text}");
        }
        // The tail is cut: a new session refuses to write into the store, so it does not run.
        let o = f.run_sh(&[], "touch ran");
        assert!(!o.status.success());
        assert!(err(&o).contains("audit store is broken"), "{}", err(&o));
        assert!(!f.proj.join("ran").exists());
        restore();
        let (ok, text) = verify(f);
        assert!(ok, "{text}");
    }
);

both!(
    the_session_writer_folds_the_wal_into_the_store_after_its_answer,
    |f| {
        // The writer defers SQLite's checkpoint (the WAL folded into the database: two syncs and
        // a copy, every few sessions) until it has answered session_end, so nobody waits for it;
        // it must still happen. In WAL mode only a checkpoint writes the database file, and no
        // other connection writes this store (no broker, no shim), so the file grows only if the
        // writers do it.
        let db = audit_dir(f).join("audit.db");
        let size = || std::fs::metadata(&db).map(|m| m.len()).unwrap_or(0);
        assert!(f.run_sh(&[], "true").status.success());
        let first = size();
        for _ in 0..30 {
            let o = f.run_sh(&[], "true");
            assert!(o.status.success(), "{}", err(&o));
        }
        // The last writer may still be at it after vetto's exit.
        eventually(5, || size() > first);
        assert!(
        size() > first,
        "30 sessions and the database file did not grow ({first} bytes): the WAL was never folded"
    );
        let (ok, text) = verify(f);
        assert!(ok, "{text}");
        let o = f.vetto(&["audit", "query", "--json", "--kind", "session_end"]);
        assert_eq!(out(&o).lines().count(), 31, "{}", err(&o));
        // And cut back: every session's writer opens the store first, alone, and reads the
        // whole WAL to rebuild its index; folded but not cut, the WAL grew by every session
        // (~8 pages each) and so did every start-up. 31 sessions (and the query's own opens)
        // leave at most what commits add past the fold's trigger of 64 pages.
        let wal = audit_dir(f).join("audit.db-wal");
        let frames = || {
            std::fs::metadata(&wal)
                .map(|m| m.len())
                .unwrap_or(0)
                .saturating_sub(32)
                / (4096 + 24)
        };
        assert!(
            eventually(5, || frames() <= 128),
            "31 sessions left {} frames in the WAL",
            frames()
        );
    }
);
