//! Many `vetto run` at once, as a CI runner or a parallel agent harness starts them: every
//! session must succeed, none may remove or touch another live session's state, crashed
//! sessions' leftovers are swept exactly once, and nothing is left behind.

use std::path::Path;
use std::process::{Child, Stdio};

use vetto_integration::{both, err, eventually, out, pids_with, sleeping, Fixture, Mode};

/// How many sessions start at once.
const SESSIONS: usize = 50;

/// A `sleep` argument of about one second that no other test (or other run of this test)
/// uses, so `pids_with` finds exactly this test's processes: the supervisors (whose command
/// line holds the script), the sandboxed shells and their sleeps.
fn sleep_tag(f: &Fixture, test: u32) -> String {
    format!(
        "1.00{:05}{}{}",
        std::process::id() % 100_000,
        test,
        u8::from(f.mode == Mode::Rootless)
    )
}

fn spawn(f: &Fixture, script: &str) -> Child {
    f.run_command(&[], &["/bin/sh", "-c", script], &f.base_env())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn vetto")
}

/// Start `SESSIONS` sessions of `sleep TAG; echo ok` all at once, then wait for all of them;
/// asserts every one exited 0 and printed `ok`.
fn run_all_at_once(f: &Fixture, tag: &str) {
    let script = format!("sleep {tag}; echo ok");
    let children: Vec<Child> = (0..SESSIONS).map(|_| spawn(f, &script)).collect();
    let mut failures = vec![];
    for (i, c) in children.into_iter().enumerate() {
        let o = c.wait_with_output().expect("wait vetto");
        if !o.status.success() || out(&o) != "ok\n" {
            failures.push(format!(
                "session {i}: {:?}, stdout {:?}, stderr {:?}",
                o.status,
                out(&o),
                err(&o)
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {SESSIONS} concurrent sessions failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// Nothing of this test's sessions is left: no session directory, no lock file, no process.
fn assert_nothing_left(f: &Fixture, tag: &str) {
    assert!(
        f.settled_sessions().is_empty(),
        "left behind: {:?}",
        f.leftover_sessions()
    );
    assert!(
        eventually(5, || pids_with(tag).is_empty()),
        "processes left behind: {:?}",
        pids_with(tag)
    );
}

both!(fifty_sessions_at_once_all_succeed_and_leave_nothing, |f| {
    let tag = sleep_tag(f, 1);
    run_all_at_once(f, &tag);
    assert_nothing_left(f, &tag);
});

/// Plant what crashed sessions leave: a directory whose lock file nobody holds, a lock file
/// whose directory was never made, and a lock-less directory from before lock files (its
/// supervisor file names a dead process).
fn plant_crashed_sessions(f: &Fixture, sessions: &Path) -> Vec<std::path::PathBuf> {
    let mut planted = vec![];
    for i in 0..3 {
        let dir = sessions.join(format!("vetto-999990-dead0000000{i}"));
        std::fs::create_dir_all(dir.join("bundle/rootfs")).expect("mk");
        std::fs::write(dir.join("supervisor"), "999990 1\n").expect("w");
        let lock = sessions.join(format!("vetto-999990-dead0000000{i}.lock"));
        std::fs::write(&lock, "").expect("w");
        planted.extend([dir, lock]);
    }
    let lock_only = sessions.join("vetto-999991-dead00000000.lock");
    std::fs::write(&lock_only, "").expect("w");
    planted.push(lock_only);
    let legacy = sessions.join("vetto-999992-dead00000000");
    std::fs::create_dir_all(legacy.join("bundle/rootfs")).expect("mk");
    std::fs::write(legacy.join("supervisor"), "999992 1\n").expect("w");
    planted.push(legacy);
    f.own(sessions);
    planted
}

both!(
    concurrent_starts_sweep_crashed_sessions_and_spare_live_ones,
    |f| {
        // A long session that is live the whole time the others start and sweep.
        let tag_long = sleep_tag(f, 2);
        // It ends only when the test says so (however long the 50 starts take on a loaded
        // machine; at most a minute, should the test fail first), so "live" is true when the
        // test checks it.
        let release = f.proj.join(format!(".release-{tag_long}"));
        let long_script = format!(
            "sleep {tag_long}; for i in $(seq 600); do [ -e .release-{tag_long} ] && break; sleep 0.1; done; echo ok"
        );
        let long = spawn(f, &long_script);
        assert!(
            eventually(10, || sleeping(&tag_long)),
            "the long session never started"
        );
        let live = f.leftover_sessions();
        assert_eq!(
            live.len(),
            2,
            "the long session's directory and lock: {live:?}"
        );
        // Then the leftovers of crashed sessions, for the next starts to sweep.
        let planted = plant_crashed_sessions(f, &f.root.join("run/vetto/sessions"));

        let tag = sleep_tag(f, 3);
        run_all_at_once(f, &tag);
        for p in &planted {
            assert!(!p.exists(), "{} was not swept", p.display());
        }
        for p in &live {
            assert!(p.exists(), "{} of a live session was removed", p.display());
        }
        std::fs::write(&release, "").expect("release the long session");
        let o = long.wait_with_output().expect("wait vetto");
        assert!(
            o.status.success() && out(&o) == "ok\n",
            "{:?} {}",
            o.status,
            err(&o)
        );
        assert_nothing_left(f, &tag);
        assert_nothing_left(f, &tag_long);
    }
);

both!(
    a_killed_supervisor_leaves_state_that_the_next_start_sweeps,
    |f| {
        let tag = sleep_tag(f, 4);
        let script = format!("sleep {tag}; sleep 60");
        let mut child = spawn(f, &script);
        assert!(eventually(10, || sleeping(&tag)), "sandbox never started");
        // SAFETY: signalling our own child (setpriv execs env which execs vetto: same pid).
        unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
        let _ = child.wait();
        assert!(
            eventually(5, || pids_with(&tag).is_empty()),
            "sandbox survived its supervisor"
        );
        assert!(
            !f.leftover_sessions().is_empty(),
            "a SIGKILLed supervisor cannot clean up; the next start must"
        );
        let o = f.run_sh(&[], "true");
        assert!(o.status.success(), "{}", err(&o));
        assert_nothing_left(f, &tag);
    }
);

both!(the_sandboxed_command_cannot_reach_its_session_lock, |f| {
    // The lock marks the session live; a command that could unlock it (or unlink it) would
    // let another start sweep the running session. It has no descriptor for it, cannot
    // borrow PID 1's (which holds the inherited one), and cannot see the runtime directory.
    let sessions = f.root.join("run/vetto/sessions");
    let script = format!(
        "n=0; for l in /proc/self/fd/* /proc/1/fd/*; do \
           case \"$(readlink \"$l\" 2>/dev/null)\" in *.lock) n=$((n+1));; esac; done; \
         echo links=$n; \
         o=0; for l in /proc/1/fd/*; do if (exec 9<\"$l\") 2>/dev/null; then o=$((o+1)); fi; done; \
         echo opened=$o; \
         ls '{}' >/dev/null 2>&1 && echo sessions=visible || echo sessions=hidden",
        sessions.display()
    );
    let o = f.run_sh(&[], &script);
    assert!(o.status.success(), "{}", err(&o));
    assert_eq!(
        out(&o),
        "links=0\nopened=0\nsessions=hidden\n",
        "{}",
        err(&o)
    );
    assert!(
        f.settled_sessions().is_empty(),
        "{:?}",
        f.leftover_sessions()
    );
});
