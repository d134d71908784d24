//! The FS-ONLY tier (issue 16): `vetto run --tier fs-only`, as root and as `nobody`, with the
//! FULL tier's expectations rerun where they still hold, and the tier selection checked under
//! a seccomp filter that refuses user namespaces (and Landlock), as on a host that has them
//! disabled. Expected outcomes per case are in docs/security-tests.md ("FS-ONLY").

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::process::Stdio;

use vetto_integration::{both, err, eventually, out, pids_with, sleeping, supervisor_of, Fixture};

const FS: &[&str] = &["--tier", "fs-only"];

both!(the_tier_is_named_and_recorded, |f| {
    let o = f.run_sh(FS, "echo ran");
    assert_eq!(out(&o), "ran\n", "{}", err(&o));
    assert!(
        err(&o).starts_with("vetto: tier FS-ONLY, landlock ABI "),
        "{}",
        err(&o)
    );
    let o = f.run_sh(&["--tier", "fs-only", "--quiet"], "echo ran");
    assert_eq!(err(&o), "", "--quiet prints nothing");
    let o = f.vetto(&["audit", "query", "--json", "--kind", "session_start"]);
    let text = out(&o);
    assert!(text.contains("\"tier\":\"FS-ONLY\""), "{text} {}", err(&o));
});

both!(secrets_are_unreadable_by_every_path, |f| {
    std::fs::create_dir_all(f.proj.join("deploy")).expect("mkdir");
    std::fs::write(f.proj.join("deploy/.env.production"), "PROD=1\n").expect("w");
    f.own(&f.proj.join("deploy"));
    let o = f.run_sh(
        FS,
        "cat README; for p in .env deploy/.env.production ~/.ssh/id_ed25519 /proc/self/root$PWD/.env \
         /proc/self/cwd/.env; do cat \"$p\" >/dev/null 2>&1 && echo \"READ $p\"; done; \
         ln .env leak 2>/dev/null && echo LINKED; ln -s .env src-link 2>/dev/null; \
         cat src-link >/dev/null 2>&1 && echo READ-VIA-SYMLINK; \
         cp .env $TMPDIR/x 2>/dev/null && echo COPIED; \
         grep -l dummy-secret-value /proc/*/environ 2>/dev/null; echo done",
    );
    assert_eq!(out(&o), "hello\ndone\n", "{}", err(&o));
});

both!(writes_stay_in_the_project_and_protected_paths_hold, |f| {
    std::fs::create_dir_all(f.proj.join("src")).expect("mkdir");
    std::fs::write(f.proj.join("src/lib.rs"), "old\n").expect("w");
    f.own(&f.proj.join("src"));
    let outside = f.root.join("outside");
    let script = format!(
        "echo new > src/lib.rs && echo edited; echo x > src/new.rs && echo created; \
         rm src/new.rs && echo removed; echo more >> README && echo appended; \
         echo x > {o}/planted 2>/dev/null && echo OUTSIDE; \
         echo x > ~/planted 2>/dev/null && echo HOME; \
         echo x > /tmp/planted-$$ 2>/dev/null && echo TMP; \
         echo '[core]' >> .git/config 2>/dev/null && echo CONFIG; \
         echo x > .git/hooks/pre-commit 2>/dev/null && echo HOOK; \
         mv .git .git-old 2>/dev/null && echo MOVED; \
         echo x > $TMPDIR/t && echo tmpdir",
        o = outside.display()
    );
    let o = f.run_sh(FS, &script);
    assert_eq!(
        out(&o),
        "edited\ncreated\nremoved\nappended\ntmpdir\n",
        "{}",
        err(&o)
    );
    assert_eq!(
        std::fs::read_to_string(f.proj.join("src/lib.rs")).expect("r"),
        "new\n"
    );
    assert!(!outside.join("planted").exists());
    assert!(!f.home.join("planted").exists());
    assert!(!f.proj.join(".git/hooks/pre-commit").exists());
    assert!(f.proj.join(".git/HEAD").exists());
    // The session's TMPDIR is gone afterwards (removed by the supervisor just after the
    // status is delivered: read again while there is one).
    let left = || -> Vec<_> {
        std::fs::read_dir("/tmp")
            .expect("ls /tmp")
            .flatten()
            .filter(|e| {
                e.file_name()
                    .to_string_lossy()
                    .starts_with(&format!("vetto-fs-{}.", f.uid))
            })
            .filter(|e| {
                std::fs::read_dir(e.path())
                    .is_ok_and(|mut d| d.any(|x| x.is_ok_and(|x| x.file_name() == "t")))
            })
            .map(|e| e.path())
            .collect()
    };
    eventually(5, || left().is_empty());
    assert!(left().is_empty(), "{:?}", left());
});

both!(
    the_status_comes_before_the_teardown_and_the_teardown_leaves_nothing,
    |f| {
        // The supervisor delivers the status to the front once the sandbox is over, then
        // removes the session's private TMPDIR and the nested policy's directory. Each run
        // names both (they exist while it runs); afterwards neither is left, whatever the
        // command's status, and no process of the session is.
        let tag = format!("vetto-fs-teardown-{}", std::process::id());
        for (script, code) in [
            ("true", 0),
            ("exit 3", 3),
            ("kill -TERM $$", 128 + 15),
            ("exec /nonexistent-command-of-this-test", 127),
        ] {
            let o = f.run_sh(
                FS,
                &format!(
                    "echo \"$TMPDIR\"; echo \"$VETTO_PARENT_POLICY\"; \
                     test -f \"$VETTO_PARENT_POLICY\" || echo NO-POLICY; \
                     echo {tag} >/dev/null; {script}"
                ),
            );
            assert_eq!(o.status.code(), Some(code), "{script}: {}", err(&o));
            let text = out(&o);
            let lines: Vec<&str> = text.lines().collect();
            assert_eq!(lines.len(), 2, "{script}: {text} {}", err(&o));
            let (tmp, policy) = (
                std::path::PathBuf::from(lines[0]),
                std::path::PathBuf::from(lines[1]),
            );
            assert!(
                tmp.starts_with("/tmp") && policy.ends_with("parent-policy.json"),
                "{script}: {text}"
            );
            let dirs = [tmp, policy.parent().expect("a directory").to_path_buf()];
            eventually(5, || dirs.iter().all(|d| !d.exists()));
            for d in &dirs {
                assert!(!d.exists(), "{script}: {} left behind", d.display());
            }
        }
        assert!(
            eventually(5, || pids_with(&tag).is_empty()),
            "processes left behind: {:?}",
            pids_with(&tag)
        );
        assert!(
            f.settled_sessions().is_empty(),
            "{:?}",
            f.leftover_sessions()
        );
    }
);

both!(the_network_is_off_and_no_host_socket_is_reachable, |f| {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = l.local_addr().expect("addr").port();
    l.set_nonblocking(true).expect("nonblocking");
    let sock = f.root.join("run/host.sock");
    let ul = std::os::unix::net::UnixListener::bind(&sock).expect("bind unix");
    ul.set_nonblocking(true).expect("nonblocking");
    std::process::Command::new("chmod")
        .args(["777", &sock.display().to_string()])
        .status()
        .expect("chmod");
    let script = format!(
        "import socket\n\
         def t(n, f):\n\
         \x20   try:\n\
         \x20       f(); print(n, 'allowed')\n\
         \x20   except OSError as e:\n\
         \x20       print(n, e.errno)\n\
         t('tcp', lambda: socket.create_connection(('127.0.0.1', {port}), 2))\n\
         t('tcp6', lambda: socket.socket(socket.AF_INET6))\n\
         t('udp', lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'x', ('127.0.0.1', 53)))\n\
         t('unix', lambda: socket.socket(socket.AF_UNIX).connect('{sock}'))\n\
         t('abstract', lambda: socket.socket(socket.AF_UNIX).connect('\\0vetto-test'))\n\
         t('vsock', lambda: socket.socket(40, socket.SOCK_STREAM))\n\
         t('dgram-pair', lambda: socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM))\n\
         a, b = socket.socketpair(); a.send(b'ok'); print('pair', b.recv(2).decode())\n",
        sock = sock.display()
    );
    let o = f.run_argv(FS, &["python3", "-c", &script]);
    assert_eq!(
        out(&o),
        "tcp 1\ntcp6 1\nudp 1\nunix 1\nabstract 1\nvsock 1\ndgram-pair 1\npair ok\n",
        "{}",
        err(&o)
    );
    assert!(l.accept().is_err(), "the loopback listener was reached");
    assert!(ul.accept().is_err(), "the host's unix socket was reached");
});

both!(process_and_kernel_attacks_are_refused, |f| {
    let mut host = std::process::Command::new("sleep")
        .arg("300")
        .spawn()
        .expect("host sleep");
    let hp = host.id();
    let script = format!(
        "import ctypes, os, signal\n\
         libc = ctypes.CDLL(None, use_errno=True)\n\
         def sc(n, *a):\n\
         \x20   r = libc.syscall(n, *a); return 0 if r >= 0 else ctypes.get_errno()\n\
         print('ptrace', 0 if libc.ptrace(16, {hp}, 0, 0) == 0 else ctypes.get_errno())\n\
         print('bpf', sc(321, 0, 0, 0))\n\
         print('io_uring', sc(425, 1, 0))\n\
         print('userfaultfd', sc(323, 0))\n\
         print('perf', sc(298, 0, 0, -1, -1, 0))\n\
         print('unshare_user', 0 if libc.unshare(0x10000000) == 0 else ctypes.get_errno())\n\
         print('mount', 0 if libc.mount(b'none', b'/tmp', b'tmpfs', 0, None) == 0 else ctypes.get_errno())\n\
         try:\n\
         \x20   os.kill({hp}, signal.SIGKILL); print('kill allowed')\n\
         except OSError as e:\n\
         \x20   print('kill', e.errno)\n\
         try:\n\
         \x20   open('/proc/{hp}/environ', 'rb').read(); print('environ read')\n\
         except OSError as e:\n\
         \x20   print('environ', e.errno)\n\
         import resource\n\
         def err(f):\n\
         \x20   try:\n\
         \x20       f(); return 0\n\
         \x20   except OSError as e:\n\
         \x20       return e.errno\n\
         print('prlimit', err(lambda: resource.prlimit({hp}, resource.RLIMIT_CPU, (1, 1))))\n\
         print('setpriority', err(lambda: os.setpriority(os.PRIO_PROCESS, {hp}, 19)))\n\
         print('affinity', err(lambda: os.sched_setaffinity({hp}, {{0}})))\n\
         print('shmget', 0 if libc.shmget(0, 4096, 0o1600) >= 0 else ctypes.get_errno())\n\
         print('own', err(lambda: resource.prlimit(0, resource.RLIMIT_NOFILE)), err(lambda: os.setpriority(os.PRIO_PROCESS, 0, max(1, os.getpriority(os.PRIO_PROCESS, 0)))), err(lambda: os.sched_setaffinity(0, os.sched_getaffinity(0))))\n\
         print('nnp', [l for l in open('/proc/self/status') if l.startswith(('NoNewPrivs', 'Seccomp:', 'CapEff'))])\n"
    );
    let o = f.run_argv(FS, &["python3", "-c", &script]);
    let text = out(&o);
    // The host process is the test's (root) or another user's (nobody): ptrace EPERM by
    // seccomp either way; kill EPERM (Landlock scope, or another user's process).
    // prlimit, setpriority and affinity on another process by pid (a plain uid check, not
    // covered by Landlock's signal scope) are refused; on itself they work. SysV IPC is the
    // host's here: refused.
    let want = "ptrace 1\nbpf 1\nio_uring 1\nuserfaultfd 1\nperf 1\nunshare_user 1\nmount 1\nkill 1\nenviron 13\nprlimit 1\nsetpriority 1\naffinity 1\nshmget 1\nown 0 0 0\n";
    assert!(text.starts_with(want), "{text}\n{}", err(&o));
    assert!(text.contains("'NoNewPrivs:\\t1\\n'"), "{text}");
    assert!(text.contains("'Seccomp:\\t2\\n'"), "{text}");
    assert!(text.contains("'CapEff:\\t0000000000000000\\n'"), "{text}");
    assert!(
        host.try_wait().expect("wait").is_none(),
        "the host process was killed"
    );
    let _ = host.kill();
    let _ = host.wait();
});

/// A numeric `sleep` argument unique to this test run, mode and case (tagged sleepers).
fn tag(f: &Fixture, case: u32) -> String {
    let mode = if f.uid == 0 { 0 } else { 1 };
    format!("{}{mode}{case}", 60000 + std::process::id() % 10000)
}

both!(
    a_process_that_leaves_the_group_is_still_killed_at_the_end,
    |f| {
        let (t1, t2) = (tag(f, 1), tag(f, 2));
        let o = f.run_sh(
            FS,
            &format!(
                "setsid sh -c 'trap \"\" TERM HUP; sleep {t1}' </dev/null >/dev/null 2>&1 & \
             (nohup sleep {t2} </dev/null >/dev/null 2>&1 &) ; sleep 0.3; \
             pgrep -x sleep >/dev/null && echo started"
            ),
        );
        assert_eq!(out(&o), "started\n", "{}", err(&o));
        assert!(
            eventually(5, || !sleeping(&t1) && !sleeping(&t2)),
            "left running: {:?} {:?}",
            pids_with(&t1),
            pids_with(&t2)
        );
    }
);

both!(the_supervisor_killed_takes_every_process_with_it, |f| {
    // The sandbox's own reaper gets a PDEATHSIG even when the supervisor is SIGKILLed, and
    // kills every descendant, those that left the group included.
    let t = tag(f, 3);
    let script = format!(
        "setsid sh -c 'sleep {t}' </dev/null >/dev/null 2>&1 & sleep 0.2; echo up; sleep 60"
    );
    let env = f.base_env();
    let mut child = f
        .run_command(FS, &["/bin/sh", "-c", &script], &env)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn");
    let mut buf = [0u8; 3];
    child
        .stdout
        .as_mut()
        .expect("stdout")
        .read_exact(&mut buf)
        .expect("up");
    assert!(sleeping(&t), "the sleeper did not start");
    // The supervisor's private directories, listed while it lives (a live supervisor's are
    // never swept): once it is killed, any session may sweep them, this test's next one or
    // another test's running meanwhile, so they are not looked for between the two.
    let left = |pid: u32| -> Vec<String> {
        std::fs::read_dir("/tmp")
            .expect("ls /tmp")
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with(&format!("vetto-fs-{}.{pid}.", f.uid)))
            .collect()
    };
    // Named after the supervisor's pid: vetto's own is the front's.
    let sup = supervisor_of(child.id()).expect("the supervisor");
    assert!(
        !left(sup).is_empty(),
        "no private directory to sweep: the test proves nothing"
    );
    // SAFETY: signalling the process we spawned (setpriv and env exec vetto: same pid).
    unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
    let _ = child.wait();
    assert!(
        eventually(5, || !sleeping(&t)),
        "left running: {:?}",
        pids_with(&t)
    );
    // The killed supervisor could not remove its private directories; the next session does.
    let o = f.run_sh(FS, "true");
    assert!(o.status.success(), "{}", err(&o));
    assert_eq!(left(sup), Vec::<String>::new());
});

both!(
    with_its_reaper_and_the_supervisor_killed_a_survivor_is_still_confined,
    |f| {
        // The documented residual of this tier: the agent can kill the sandbox's reaper (same
        // Landlock domain); the supervisor then ends the session at once, but if it is SIGKILLed
        // before it could (held stopped here to make that window), a descendant outlives the
        // session. It stays under Landlock and seccomp: it cannot read the secret or write
        // outside the project.
        let t = tag(f, 4);
        // In a directory of its own: nothing can be created directly in the project root, which
        // holds the secret and .git (see the threat model).
        std::fs::create_dir_all(f.proj.join("out")).expect("mkdir");
        f.own(&f.proj.join("out"));
        let report = f.proj.join("out/survivor.txt");
        let outside = f.root.join("outside/survivor");
        let script = format!(
        "setsid sh -c 'sleep 1; (cat .env || echo denied) > out/survivor.txt 2>&1; \
         echo x > {o} 2>/dev/null; exec sleep {t}' </dev/null >/dev/null 2>&1 & \
         echo ready; while [ ! -e out/go ]; do sleep 0.05; done; kill -KILL $PPID; echo up; sleep 60",
        o = outside.display()
    );
        let env = f.base_env();
        let mut child = f
            .run_command(FS, &["/bin/sh", "-c", &script], &env)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn");
        let mut buf = [0u8; 6];
        child
            .stdout
            .as_mut()
            .expect("stdout")
            .read_exact(&mut buf)
            .expect("ready");
        // The supervisor itself is held (vetto's own pid is the front's).
        let sup = supervisor_of(child.id()).expect("the supervisor");
        // SAFETY: signalling the supervisor of the process we spawned.
        unsafe { libc::kill(sup as i32, libc::SIGSTOP) };
        std::fs::write(f.proj.join("out/go"), "").expect("go");
        let mut buf = [0u8; 3];
        child
            .stdout
            .as_mut()
            .expect("stdout")
            .read_exact(&mut buf)
            .expect("up");
        // SAFETY: as above.
        unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
        let _ = child.wait();
        assert!(
            eventually(10, || std::fs::read_to_string(&report)
                .is_ok_and(|s| !s.is_empty())),
            "the survivor did not report"
        );
        let seen = std::fs::read_to_string(&report).expect("report");
        assert!(seen.contains("Permission denied"), "{seen}");
        assert!(!seen.contains("dummy-secret-value"), "{seen}");
        assert!(
            eventually(5, || sleeping(&t)),
            "no survivor: the residual did not happen"
        );
        assert!(!outside.exists());
        for pid in pids_with(&t) {
            // SAFETY: cleaning up the survivor this test made.
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
        }
    }
);

/// A seccomp filter for the process that starts vetto, as on a host without user namespaces
/// (and, with `landlock`, without Landlock): `unshare` and `clone` with `CLONE_NEWUSER` get
/// EPERM, `clone3` ENOSYS (callers fall back to `clone`), `landlock_create_ruleset` ENOSYS.
fn host_without(landlock: bool) -> Vec<libc::sock_filter> {
    const LD_W_ABS: u16 = 0x20;
    const JEQ_K: u16 = 0x15;
    const AND_K: u16 = 0x54;
    const RET_K: u16 = 0x06;
    const ALLOW: u32 = 0x7fff_0000;
    const ERRNO: u32 = 0x0005_0000;
    let st = |code, k| libc::sock_filter {
        code,
        jt: 0,
        jf: 0,
        k,
    };
    let jeq = |k, jt, jf| libc::sock_filter {
        code: JEQ_K,
        jt,
        jf,
        k,
    };
    let landlock_nr = if landlock { 444 } else { u32::MAX };
    vec![
        st(LD_W_ABS, 4),                        // 0: arch
        jeq(0xc000_003e, 0, 8),                 // 1: x86_64, else allow (10)
        st(LD_W_ABS, 0),                        // 2: nr
        jeq(272, 7, 0),                         // 3: unshare → EPERM (11)
        jeq(435, 7, 0),                         // 4: clone3 → ENOSYS (12)
        jeq(landlock_nr, 6, 0),                 // 5: landlock_create_ruleset → ENOSYS
        jeq(56, 0, 3),                          // 6: clone, else allow (10)
        st(LD_W_ABS, 16),                       // 7: flags (low word)
        st(AND_K, 0x1000_0000),                 // 8
        jeq(0x1000_0000, 1, 0),                 // 9: CLONE_NEWUSER → EPERM
        st(RET_K, ALLOW),                       // 10
        st(RET_K, ERRNO | libc::EPERM as u32),  // 11
        st(RET_K, ERRNO | libc::ENOSYS as u32), // 12
    ]
}

fn run_without(f: &Fixture, landlock: bool, flags: &[&str], script: &str) -> std::process::Output {
    let env = f.base_env();
    let c = f.run_command(flags, &["/bin/sh", "-c", script], &env);
    under_filter(c, landlock)
}

/// `vetto ARGS...` under [`host_without`].
fn vetto_without(f: &Fixture, landlock: bool, args: &[&str]) -> std::process::Output {
    let bin = f.bin.display().to_string();
    let mut argv = vec![bin.as_str()];
    argv.extend_from_slice(args);
    under_filter(f.command(&argv, &f.base_env()), landlock)
}

fn under_filter(mut c: std::process::Command, landlock: bool) -> std::process::Output {
    let filter = host_without(landlock);
    // SAFETY: between fork and exec only two prctl calls; the filter is moved into the
    // closure, so it lives as long as the call that reads it.
    unsafe {
        c.pre_exec(move || {
            let prog = libc::sock_fprog {
                len: filter.len() as u16,
                filter: filter.as_ptr() as *mut libc::sock_filter,
            };
            if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0
                || libc::prctl(
                    libc::PR_SET_SECCOMP,
                    libc::SECCOMP_MODE_FILTER,
                    &prog as *const libc::sock_fprog,
                ) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    c.stdin(Stdio::null()).output().expect("run vetto")
}

both!(auto_picks_fs_only_where_user_namespaces_are_refused, |f| {
    let o = run_without(f, false, &[], "cat .env 2>/dev/null || echo masked");
    assert_eq!(out(&o), "masked\n", "{}", err(&o));
    assert!(
        err(&o).starts_with("vetto: tier FS-ONLY, landlock ABI "),
        "{}",
        err(&o)
    );
    // A policy that requires FULL refuses, naming the tier and the fix.
    let pol = f.root.join("require-full.toml");
    std::fs::write(&pol, "[sandbox]\nrequire = \"full\"\n").expect("w");
    f.own(&pol);
    let p = pol.display().to_string();
    let o = run_without(f, false, &["--policy", &p], "touch ran");
    assert_ne!(o.status.code(), Some(0), "{}", err(&o));
    assert!(
        err(&o).contains("tier FULL cannot be established"),
        "{}",
        err(&o)
    );
    assert!(err(&o).contains("sandbox.require"), "{}", err(&o));
    assert!(!f.proj.join("ran").exists(), "the command ran");
    // --tier full refuses too, before anything runs.
    let o = run_without(f, false, &["--tier", "full"], "touch ran");
    assert_ne!(o.status.code(), Some(0), "{}", err(&o));
    assert!(!f.proj.join("ran").exists(), "the command ran");
});

both!(without_landlock_nothing_runs, |f| {
    for flags in [&[][..], &["--tier", "fs-only"][..], &["--tier", "full"][..]] {
        let o = run_without(f, true, flags, "touch ran");
        assert_ne!(o.status.code(), Some(0), "{flags:?}: {}", err(&o));
        assert!(
            err(&o).contains("Landlock is not available"),
            "{flags:?}: {}",
            err(&o)
        );
        assert!(!f.proj.join("ran").exists(), "{flags:?}: the command ran");
    }
});

both!(
    doctor_reports_fs_only_with_the_fix_and_a_passing_self_test,
    |f| {
        let o = vetto_without(f, false, &["doctor", "--json"]);
        let v: serde_json::Value =
            serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", err(&o)));
        assert_eq!(v["tier"], "FS-ONLY", "{v}");
        let reason = v["reason"].as_str().unwrap_or_default();
        assert!(reason.contains("to enable it"), "{reason}");
        let st = v["selftest"].as_array().expect("self-test ran");
        assert!(st.len() >= 8 && st.iter().all(|p| p["ok"] == true), "{v}");
        assert!(o.status.success());
        // Without Landlock either: no tier, non-zero.
        let o = vetto_without(f, true, &["doctor", "--json"]);
        let v: serde_json::Value =
            serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", err(&o)));
        assert_eq!(v["tier"], "none", "{v}");
        assert!(
            v["reason"]
                .as_str()
                .unwrap_or_default()
                .contains("Landlock"),
            "{v}"
        );
        assert!(!o.status.success());
    }
);

// --- nested sandboxes ------------------------------------------------------------------------

/// Put the vetto binary in the project, where a sandbox can run it.
fn vetto_inside(f: &Fixture) -> String {
    let dir = f.proj.join("tools");
    std::fs::create_dir_all(&dir).expect("mkdir");
    std::fs::copy(&f.bin, dir.join("vetto")).expect("copy vetto");
    f.own(&dir);
    "./tools/vetto".into()
}

both!(a_nested_run_is_fs_only_under_the_parents_controls, |f| {
    let v = vetto_inside(f);
    let o = f.run_sh(
        &["-q"],
        &format!(
            "{v} run -- sh -c 'cat .env; echo inner-ran' 2>/tmp/inner.err; echo inner-rc=$?; \
             head -1 /tmp/inner.err"
        ),
    );
    let text = out(&o);
    assert!(
        text.starts_with("inner-ran\ninner-rc=0\n"),
        "{text} {}",
        err(&o)
    );
    assert!(
        text.contains("vetto: tier FS-ONLY, landlock ABI"),
        "{text} {}",
        err(&o)
    );
    assert!(!text.contains("dummy-secret-value"), "{text}");
});

// The same with the parent itself FS-ONLY: its Landlock rules leave vetto's runtime directory
// alone, so the nested vetto cannot write there and must manage with its TMPDIR. (Its audit
// store cannot be the user's either, which the parent masks: it is given one in TMPDIR.)
both!(a_nested_run_inside_an_fs_only_parent_runs, |f| {
    let v = vetto_inside(f);
    let o = f.run_sh(
        &["-q", "--tier", "fs-only"],
        &format!(
            "XDG_STATE_HOME=\"$TMPDIR/state\" {v} run -- sh -c 'cat .env; echo inner-ran' 2>\"$TMPDIR/inner.err\"; echo inner-rc=$?; \
             cat \"$TMPDIR/inner.err\""
        ),
    );
    let text = out(&o);
    assert!(
        text.starts_with("inner-ran\ninner-rc=0\n"),
        "{text} {}",
        err(&o)
    );
    assert!(!text.contains("dummy-secret-value"), "{text}");
});

both!(
    a_nested_policy_asking_for_more_than_its_parent_is_refused,
    |f| {
        let v = vetto_inside(f);
        let o = f.run_sh(
            &["-q"],
            &format!(
                "{v} run -q --net allow:example.com -- touch net-ran; echo rc=$?; \
             printf '[secrets]\\nextend = false\\n' > /tmp/unmask.toml; \
             {v} run -q --policy /tmp/unmask.toml -- touch unmask-ran; echo rc=$?"
            ),
        );
        let (text, e) = (out(&o), err(&o));
        assert_eq!(text, "rc=2\nrc=2\n", "{text} {e}");
        assert!(e.contains("ceiling"), "{e}");
        assert!(
            e.contains("raises network.mode from off to allowlist"),
            "{e}"
        );
        assert!(e.contains("adds network.allow \"example.com\""), "{e}");
        assert!(e.contains("removes secrets.files"), "{e}");
        assert!(!f.proj.join("net-ran").exists() && !f.proj.join("unmask-ran").exists());
    }
);

both!(
    a_forced_nested_attempt_still_cannot_read_what_the_parent_masked,
    |f| {
        // The agent forges its parent's policy (no secrets listed) so that the ceiling check lets
        // an unmasking nested policy through: the kernel still keeps the parent's view.
        let v = vetto_inside(f);
        let o = f.run_sh(
            &["-q"],
            &format!(
                "python3 -c 'import json; p = json.load(open(\"/.vetto/parent-policy.json\")); \
             p[\"secret_files\"] = p[\"secret_dirs\"] = p[\"secret_globs\"] = []; \
             json.dump(p, open(\"/tmp/forged.json\", \"w\"))' && \
             printf '[secrets]\\nextend = false\\n' > /tmp/unmask.toml && \
             VETTO_PARENT_POLICY=/tmp/forged.json {v} run -q --policy /tmp/unmask.toml -- \
             sh -c 'cat .env ~/.ssh/id_ed25519 2>&1; echo forced-ran'"
            ),
        );
        let text = out(&o);
        assert!(text.contains("forced-ran"), "{text} {}", err(&o));
        assert!(!text.contains("dummy-secret-value"), "{text}");
        assert!(!text.contains("PRIVATE KEY"), "{text}");
    }
);

both!(a_nested_policy_can_narrow_further, |f| {
    let v = vetto_inside(f);
    std::fs::create_dir_all(f.proj.join("sub")).expect("mkdir");
    std::fs::write(f.proj.join("sub/keep"), "k\n").expect("w");
    f.own(&f.proj.join("sub"));
    let o = f.run_sh(
        &["-q"],
        &format!(
            "printf '[filesystem]\\nprotected = [\"sub\"]\\n' > /tmp/narrow.toml; \
             {v} run -q --policy /tmp/narrow.toml -- sh -c 'echo x > sub/a 2>/dev/null && echo INNER-WROTE; \
             echo x >> sub/keep 2>/dev/null && echo INNER-APPENDED; echo inner-done'; \
             echo y > sub/b && echo parent-wrote"
        ),
    );
    assert_eq!(out(&o), "inner-done\nparent-wrote\n", "{}", err(&o));
    assert!(!f.proj.join("sub/a").exists());
    assert_eq!(
        std::fs::read_to_string(f.proj.join("sub/keep")).expect("r"),
        "k\n"
    );
});

// --- the broker in FS-ONLY -----------------------------------------------------------------
// Every server here is on the host's loopback; 127.0.0.2 is admitted by the test policies'
// `allow_cidrs` only (the broker refuses loopback answers otherwise).

fn net_policy(f: &Fixture, body: &str) -> String {
    let p = f.root.join("outside/fsnet.toml");
    std::fs::write(&p, body).expect("w");
    f.own(&p);
    p.display().to_string()
}

both!(
    the_broker_serves_the_sandbox_through_its_advertised_ports,
    |f| {
        let dns = vetto_integration::StubDns::start();
        let (srv, hits) = vetto_integration::http_server("127.0.0.2:0");
        let port = srv.port();
        dns.set("api.test.vetto", &["127.0.0.2"]);
        let echo = vetto_integration::echo_server("127.0.0.1:0");
        let p = net_policy(
        f,
        &format!(
            "[network]\nmode = \"allowlist\"\nallow = [\"api.test.vetto:{port}\"]\nallow_cidrs = [\"127.0.0.2/32\"]\nresolver = \"{}\"\nhost_ports = [{}]\n[approvals]\nmode = \"deny\"\n",
            dns.addr,
            echo.port()
        ),
    );
        let script = format!(
        "curl -sS -p http://api.test.vetto:{port}/; echo; \
         curl -sS --socks5-hostname 127.0.0.1:1080 http://api.test.vetto:{port}/; echo; \
         curl -sS -g -x 'http://[::1]:3128' -p http://api.test.vetto:{port}/; echo; \
         curl -sS -p -o /dev/null -w '%{{http_connect}}\\n' http://other.test.vetto:{port}/ 2>/dev/null; \
         (exec 3<>/dev/tcp/127.0.0.2/{port}) 2>/dev/null && echo BYPASS || echo no-bypass; \
         exec 3<>/dev/tcp/127.0.0.1/{e}; echo ping-through >&3; read -r line <&3; echo \"$line\"",
        e = echo.port()
    );
        let o = f.run_argv(
            &["--tier", "fs-only", "--policy", &p],
            &["/bin/bash", "-c", &script],
        );
        assert_eq!(
            out(&o),
            "hello\nhello\nhello\n403\nno-bypass\nping-through\n",
            "{}",
            err(&o)
        );
        assert!(err(&o).starts_with("vetto: tier FS-ONLY"), "{}", err(&o));
        assert_eq!(
            hits.load(std::sync::atomic::Ordering::SeqCst),
            3,
            "exactly the three allowed requests reached the server"
        );
        assert!(
            dns.asked().iter().all(|n| n == "api.test.vetto"),
            "a denied name was resolved: {:?}",
            dns.asked()
        );
        // The broker recorded each connection in the session's audit trail.
        let o = f.vetto(&["audit", "query", "--json", "--kind", "connection"]);
        let text = out(&o);
        assert_eq!(text.lines().count(), 5, "{text} {}", err(&o));
        assert!(text.contains("other.test.vetto"), "{text}");
        // Nothing left: no session directory, no broker.
        assert!(
            f.settled_sessions().is_empty(),
            "{:?}",
            f.leftover_sessions()
        );
    }
);

both!(
    with_the_broker_no_socket_reaches_the_host_but_through_it,
    |f| {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = l.local_addr().expect("addr").port();
        l.set_nonblocking(true).expect("nonblocking");
        let l6 = std::net::TcpListener::bind("[::1]:0").expect("bind v6");
        let port6 = l6.local_addr().expect("addr").port();
        l6.set_nonblocking(true).expect("nonblocking");
        let u = std::net::UdpSocket::bind("127.0.0.1:0").expect("udp");
        let uport = u.local_addr().expect("addr").port();
        u.set_nonblocking(true).expect("nonblocking");
        let p = net_policy(
            f,
            "[network]\nmode = \"allowlist\"\nallow = [\"api.test.vetto\"]\n",
        );
        let script = format!(
        "import socket, errno\n\
         def t(n, f):\n\
         \x20   try:\n\
         \x20       r = f(); print(n, 'allowed' if r is None else r)\n\
         \x20   except OSError as e:\n\
         \x20       print(n, errno.errorcode.get(e.errno, e.errno))\n\
         t('tcp-host-port', lambda: socket.create_connection(('127.0.0.1', {port}), 2) and None)\n\
         t('tcp6-host-port', lambda: socket.create_connection(('::1', {port6}), 2) and None)\n\
         t('udp', lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'x', ('127.0.0.1', {uport})) and None)\n\
         t('raw', lambda: socket.socket(socket.AF_INET, socket.SOCK_RAW, 6))\n\
         t('mptcp', lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM, 262))\n\
         t('sctp', lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM, 132))\n\
         t('unix', lambda: socket.socket(socket.AF_UNIX))\n\
         t('netlink', lambda: socket.socket(16, socket.SOCK_RAW, 0))\n\
         t('bind', lambda: socket.socket().bind(('127.0.0.1', 0)))\n\
         t('listen', lambda: socket.socket().listen(1))\n\
         t('fastopen', lambda: socket.socket().sendto(b'GET / HTTP/1.0\\r\\n\\r\\n', 0x20000000, ('127.0.0.1', {port})) and None)\n\
         v6 = socket.socket(socket.AF_INET6); v6.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)\n\
         t('v6only-proxy', lambda: v6.connect(('::1', 3128)))\n\
         s = socket.create_connection(('127.0.0.1', 3128), 2); print('proxy', 'connected')\n\
         t('again', lambda: s.connect(('127.0.0.1', 3128)))\n\
         import threading, ctypes\n\
         box = []\n\
         th = threading.Thread(target=lambda: box.append(socket.create_connection(('127.0.0.1', 3128), 2).getpeername()[0]))\n\
         th.start(); th.join(); print('thread', 'connected' if box == ['127.0.0.1'] else box)\n\
         libc = ctypes.CDLL(None, use_errno=True)\n\
         nr = {{'x86_64': 317, 'aarch64': 277}}[__import__('platform').machine()]\n\
         r = libc.syscall(nr, 1, 8, None); print('seccomp-listener', errno.errorcode.get(ctypes.get_errno()) if r != 0 else r)\n\
         real = s.getpeername()[1]\n\
         t('tcp-broker-real-port', lambda: socket.create_connection(('127.0.0.1', real), 2) and None)\n"
    );
        let o = f.run_argv(
            &["--tier", "fs-only", "-q", "--policy", &p],
            &["python3", "-c", &script],
        );
        assert_eq!(
            out(&o),
            "tcp-host-port ECONNREFUSED\ntcp6-host-port ECONNREFUSED\n\
         udp EPERM\nraw EPERM\nmptcp EPERM\nsctp EPERM\nunix EPERM\nnetlink EPERM\nbind EPERM\n\
         listen EPERM\nfastopen EPERM\nv6only-proxy ENETUNREACH\nproxy connected\nagain EISCONN\n\
         thread connected\nseccomp-listener EPERM\ntcp-broker-real-port ECONNREFUSED\n",
            "{}",
            err(&o)
        );
        assert!(
            l.accept().is_err(),
            "the host's loopback listener was reached"
        );
        assert!(l6.accept().is_err(), "the host's ::1 listener was reached");
        let mut b = [0u8; 8];
        assert!(u.recv(&mut b).is_err(), "a datagram reached the host");
    }
);

both!(the_brokers_host_listener_serves_only_the_sandbox, |f| {
    let (srv, hits) = vetto_integration::http_server("127.0.0.2:0");
    let port = srv.port();
    let p = net_policy(
        f,
        &format!("[network]\nmode = \"allowlist\"\nallow_cidrs = [\"127.0.0.2/32:{port}\"]\n[approvals]\nmode = \"deny\"\n"),
    );
    // The sandbox learns the broker's real host port (its peer) and leaves it in a file (in
    // a directory of its own: FS-ONLY's project root, above .git, takes no new file).
    std::fs::create_dir_all(f.proj.join("scratch")).expect("mkdir");
    f.own(&f.proj.join("scratch"));
    let script = format!(
        "import socket, time\n\
         s = socket.create_connection(('127.0.0.1', 3128), 2)\n\
         open('scratch/broker-port.tmp', 'w').write(str(s.getpeername()[1]))\n\
         import os; os.rename('scratch/broker-port.tmp', 'scratch/broker-port')\n\
         s.sendall(b'CONNECT 127.0.0.2:{port} HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n')\n\
         print(s.recv(12).decode())\n\
         time.sleep(4)\n"
    );
    let env = f.base_env();
    let child = f
        .run_command(
            &["--tier", "fs-only", "-q", "--policy", &p],
            &["python3", "-c", &script],
            &env,
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let file = f.proj.join("scratch/broker-port");
    let mut broker = None;
    for _ in 0..100 {
        if let Ok(s) = std::fs::read_to_string(&file) {
            broker = s.trim().parse::<u16>().ok();
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let broker = broker.expect("the sandbox never reached the broker");
    // A host process (any local user) connecting to that listener gets nothing.
    let mut c = std::net::TcpStream::connect(("127.0.0.1", broker)).expect("connect");
    c.set_read_timeout(Some(std::time::Duration::from_secs(5)))
        .expect("timeout");
    use std::io::Write;
    c.write_all(format!("CONNECT 127.0.0.2:{port} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes())
        .expect("write");
    let mut buf = vec![];
    let got = c.read_to_end(&mut buf);
    assert!(
        buf.is_empty(),
        "an unannounced host connection was answered: {got:?} {:?}",
        String::from_utf8_lossy(&buf)
    );
    let o = child.wait_with_output().expect("wait");
    assert_eq!(out(&o), "HTTP/1.1 200\n", "{}", err(&o));
    // The sandbox's own tunnel is the one connection the server may see (counted at the
    // end: it can reach the server after the port file appears, so no count taken before the
    // host's attempt would be stable).
    assert_eq!(
        hits.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "the host connection was relayed"
    );
    let o = f.vetto(&["audit", "query", "--json", "--kind", "connection"]);
    assert_eq!(
        out(&o).lines().count(),
        1,
        "only the sandbox's connection is recorded: {}",
        out(&o)
    );
});

both!(what_fs_only_cannot_carry_is_refused_at_the_start, |f| {
    for (body, flags) in [
        (
            "[network]\nmode = \"allowlist\"\npublish = [18080]\n",
            &[][..],
        ),
        (
            "[network]\nmode = \"allowlist\"\nallow = [\"github.com:22\"]\n",
            &["--git-ssh"][..],
        ),
    ] {
        let p = net_policy(f, body);
        let mut fl = vec!["--tier", "fs-only", "--policy", &p];
        fl.extend_from_slice(flags);
        let o = f.run_sh(&fl, "echo ran");
        assert_eq!(out(&o), "", "{}", err(&o));
        assert!(!o.status.success());
        assert!(
            err(&o).contains("FS-ONLY tier cannot publish a port or carry --git-ssh"),
            "{}",
            err(&o)
        );
    }
    assert!(
        f.settled_sessions().is_empty(),
        "{:?}",
        f.leftover_sessions()
    );
});

both!(
    a_nested_sandbox_with_the_broker_is_refused_inside_one,
    |f| {
        let p = net_policy(
            f,
            "[network]\nmode = \"allowlist\"\nallow = [\"api.test.vetto\"]\n",
        );
        let inner = vetto_inside(f);
        // Within the parent's ceiling (the same name), so what stops it is the nesting.
        let o = f.run_sh(
            &["--tier", "fs-only", "-q", "--policy", &p],
            &format!("{inner} run -q --net allow:api.test.vetto -- echo INNER-RAN; echo rc=$?"),
        );
        let s = out(&o);
        assert!(!s.contains("INNER-RAN"), "{s}");
        assert!(s.ends_with("rc=2\n"), "{s} {}", err(&o));
        assert!(
            err(&o).contains("a nested sandbox runs with the network off"),
            "{}",
            err(&o)
        );
    }
);
