//! `vetto run` end to end: each test runs the real binary, as root and as `nobody`, against a
//! throwaway HOME and project with dummy secrets, and asserts what the sandboxed process
//! really could and could not do.

use std::io::Read;
use std::net::TcpListener;
use std::os::unix::fs::MetadataExt;
use std::time::Duration;

use vetto_integration::{both, err, eventually, out, pids_with, sleeping, Fixture, Mode};

both!(env_file_reads_empty, |f| {
    let o = f.run_sh(&[], "cat .env; echo \"rc=$?\"; wc -c < .env");
    assert_eq!(out(&o), "rc=0\n0\n", "stderr: {}", err(&o));
    assert!(o.status.success());
    // The host file is untouched.
    let host = std::fs::read_to_string(f.proj.join(".env")).expect("read");
    assert!(host.contains("dummy-secret-value"));
});

both!(a_dev_null_stdout_and_stderr_stay_writable, |f| {
    // `vetto run -- make >/dev/null 2>&1`: libcontainer swaps a caller's /dev/null for the
    // container's, read-only, and every write failed with EBADF. Both tiers.
    // (In FS-ONLY the project's top holds .env, so only its subdirectories take new files.)
    let dir = f.proj.join("out");
    std::fs::create_dir_all(&dir).expect("mkdir");
    f.own(&dir);
    for tier in ["full", "fs-only"] {
        let _ = std::fs::remove_file(dir.join("w.txt"));
        let script = "echo out; a=$?; echo err >&2; b=$?; printf '%s %s\\n' $a $b > out/w.txt; \
                      date && cat /dev/null";
        let o = f
            .run_command(
                &["--tier", tier, "--quiet"],
                &["/bin/sh", "-c", script],
                &f.base_env(),
            )
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .expect("run vetto");
        let w = std::fs::read_to_string(dir.join("w.txt")).unwrap_or_default();
        if !o.success() || w != "0 0\n" {
            // Once more with stderr kept, to say why.
            let again = f.run_sh(&["--tier", tier, "--quiet"], script);
            panic!(
                "{tier}: {o:?}, the writes' exit statuses {w:?}; with stderr kept: {}",
                err(&again)
            );
        }
    }
});

both!(symlinked_env_masks_its_target, |f| {
    // .env.local -> ~/.ssh/id_ed25519 ; a second link from an unmasked name must be masked too
    std::os::unix::fs::symlink(f.home.join(".ssh/id_ed25519"), f.proj.join(".env.local"))
        .expect("ln");
    std::os::unix::fs::symlink(f.home.join(".ssh/id_ed25519"), f.proj.join("innocent"))
        .expect("ln");
    let o = f.run_sh(&[], "cat .env.local innocent 2>&1; echo done");
    let s = out(&o);
    assert!(!s.contains("PRIVATE KEY"), "{s}");
    assert!(s.ends_with("done\n"), "{s}");
});

both!(ssh_dir_is_empty_and_unwritable, |f| {
    let o = f.run_sh(&[], "ls -A ~/.ssh 2>/dev/null | wc -l; cat ~/.ssh/id_ed25519 2>/dev/null | wc -c; touch ~/.ssh/new 2>/dev/null && echo WROTE || echo denied");
    assert_eq!(out(&o), "0\n0\ndenied\n", "stderr: {}", err(&o));
    assert!(!f.home.join(".ssh/new").exists());
});

both!(writes_outside_the_project_fail, |f| {
    let outside = f.root.join("outside");
    let script = format!(
        "touch /etc/vetto-x 2>&1; touch /usr/vetto-x 2>&1; touch '{}/x' 2>&1; touch ~/../outside/y 2>&1; echo end",
        outside.display()
    );
    let o = f.run_sh(&[], &script);
    let s = out(&o);
    assert!(
        s.matches("Read-only file system").count() + s.matches("Permission denied").count() >= 2,
        "{s}"
    );
    assert!(s.ends_with("end\n"), "{s}");
    assert!(!std::path::Path::new("/etc/vetto-x").exists());
    assert!(!std::path::Path::new("/usr/vetto-x").exists());
    assert_eq!(
        std::fs::read_dir(&outside).expect("ls").count(),
        0,
        "nothing written outside"
    );
});

both!(
    writes_inside_the_project_work_and_belong_to_the_caller,
    |f| {
        let o = f.run_sh(
            &[],
            "echo made-inside > new.txt && mkdir -p sub && echo x > sub/y && id -u",
        );
        assert!(o.status.success(), "{}", err(&o));
        assert_eq!(out(&o).trim(), f.uid.to_string(), "the caller's uid inside");
        assert_eq!(
            std::fs::read_to_string(f.proj.join("new.txt")).expect("r"),
            "made-inside\n"
        );
        let m = std::fs::metadata(f.proj.join("sub/y")).expect("meta");
        assert_eq!(m.uid(), f.uid, "owned by the caller on the host");
    }
);

both!(protected_paths_stay_read_only, |f| {
    let o = f.run_sh(&[], "echo evil > .git/hooks/pre-commit; echo '[core]' >> .git/config; mv .git .git-moved; rm -rf .git/hooks; echo end");
    assert!(out(&o).ends_with("end\n"));
    assert!(
        !f.proj.join(".git/hooks/pre-commit").exists(),
        "hook written: {}",
        err(&o)
    );
    assert!(f.proj.join(".git/config").exists());
    assert!(!f.proj.join(".git-moved").exists(), ".git renamed away");
    let cfg = std::fs::read_to_string(f.proj.join(".git/config")).expect("r");
    assert!(!cfg.ends_with("[core]\n"), "config appended");
});

both!(write_no_delete_blocks_rm_but_allows_edits, |f| {
    std::fs::create_dir_all(f.proj.join("target")).expect("mk");
    std::fs::write(f.proj.join("target/old"), "x").expect("w");
    f.own(&f.proj.join("target"));
    let o = f.run_sh(
        &["--project-access", "write-no-delete"],
        "echo a > f.txt && echo b >> f.txt && echo edited; rm README 2>/dev/null || echo rm-denied; mv f.txt g.txt 2>/dev/null || echo mv-denied; rm target/old && echo scratch-rm-ok",
    );
    assert_eq!(
        out(&o),
        "edited\nrm-denied\nmv-denied\nscratch-rm-ok\n",
        "stderr: {}",
        err(&o)
    );
    assert!(f.proj.join("README").exists());
    assert_eq!(
        std::fs::read_to_string(f.proj.join("f.txt")).expect("r"),
        "a\nb\n"
    );
    assert!(!f.proj.join("target/old").exists());
});

both!(proc_shows_only_the_sandbox, |f| {
    let o = f.run_sh(
        &[],
        "ls /proc | grep -c '^[0-9]'; cat /proc/1/cmdline | tr '\\0' ' '",
    );
    let s = out(&o);
    let n: usize = s
        .lines()
        .next()
        .and_then(|l| l.trim().parse().ok())
        .expect("count");
    assert!(n <= 5, "{n} processes visible: {s}");
    // The host's own processes (this test, pid 1 of the host) are not there.
    let me = std::process::id();
    let o = f.run_sh(
        &[],
        &format!("test -e /proc/{me}/status && echo visible || echo hidden"),
    );
    if me > 10 {
        assert_eq!(out(&o), "hidden\n");
    }
});

both!(network_is_loopback_only, |f| {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    l.set_nonblocking(true).expect("nb");
    let port = l.local_addr().expect("addr").port();
    let script = format!(
        "cat /sys/class/net/lo/flags; ls /sys/class/net; (exec 3<>/dev/tcp/127.0.0.1/{port}) 2>/dev/null && echo CONNECTED || echo refused"
    );
    let o = f.run_argv(&[], &["/bin/bash", "-c", &script]);
    let s = out(&o);
    let lines: Vec<&str> = s.lines().collect();
    assert_eq!(
        lines
            .first()
            .map(|l| u32::from_str_radix(l.trim_start_matches("0x"), 16).unwrap_or(0) & 1),
        Some(1),
        "lo is up: {s}"
    );
    assert_eq!(lines.get(1), Some(&"lo"), "only lo: {s}");
    assert_eq!(lines.last(), Some(&"refused"), "{s} {}", err(&o));
    assert!(l.accept().is_err(), "the host listener saw a connection");
});

both!(secrets_in_environment_do_not_pass, |f| {
    let o = f.run_sh(&[], "echo \"gh=${GH_TOKEN:-} openai=${OPENAI_API_KEY:-} aws=${AWS_SECRET_ACCESS_KEY:-} home=$HOME sandbox=$VETTO_SANDBOX\"");
    assert_eq!(
        out(&o),
        format!("gh= openai= aws= home={} sandbox=1\n", f.home.display())
    );
    let o = f.run_sh(
        &["--pass-env", "OPENAI_API_KEY"],
        "echo \"openai=$OPENAI_API_KEY\"",
    );
    assert_eq!(out(&o), "openai=sk-dummy\n");
});

#[cfg(target_arch = "x86_64")]
const SYSCALL_PROBE: &str = r#"
import ctypes, os, errno, fcntl, struct
libc = ctypes.CDLL(None, use_errno=True)
def res(r):
    return "ok" if r >= 0 else errno.errorcode.get(ctypes.get_errno(), str(ctypes.get_errno()))
out = {}
out["ptrace"] = res(libc.syscall(101, 16, 1, 0, 0))           # PTRACE_ATTACH to pid 1
out["bpf"] = res(libc.syscall(321, 0, 0, 0))
out["io_uring_setup"] = res(libc.syscall(425, 1, ctypes.create_string_buffer(120)))
out["mount"] = res(libc.mount(b"tmpfs", b"/tmp", b"tmpfs", 0, None))
out["umount_mask"] = res(libc.umount2(os.path.abspath(".env").encode(), 2))
out["unshare"] = res(libc.unshare(0x10000000 | 0x00020000))  # CLONE_NEWUSER|CLONE_NEWNS
out["umount_after_unshare"] = res(libc.umount2(os.path.abspath(".env").encode(), 2))
fd = os.open("/dev/tty", os.O_RDWR) if os.path.exists("/dev/tty") and os.isatty(0) else 0
out["tiocsti"] = res(libc.ioctl(fd, 0x5412, ctypes.c_char_p(b"x")))
out["x32_getpid"] = res(libc.syscall(0x40000000 | 39))
out["keyctl"] = res(libc.syscall(250, 0, 0, 0, 0, 0))
out["userfaultfd"] = res(libc.syscall(323, 0))
print(" ".join(f"{k}={v}" for k, v in out.items()))
"#;

#[cfg(target_arch = "x86_64")]
both!(dangerous_syscalls_get_eperm, |f| {
    let o = f.run_argv(&[], &["/usr/bin/python3", "-c", SYSCALL_PROBE]);
    let s = out(&o);
    for k in [
        "ptrace",
        "bpf",
        "io_uring_setup",
        "mount",
        "umount_mask",
        "umount_after_unshare",
        "tiocsti",
        "x32_getpid",
        "keyctl",
        "userfaultfd",
    ] {
        assert!(
            s.contains(&format!("{k}=EPERM")),
            "{k} not EPERM: {s} {}",
            err(&o)
        );
    }
    // And the mask is still in place afterwards.
    let o = f.run_sh(&[], "wc -c < .env");
    assert_eq!(out(&o), "0\n");
});

both!(only_stdio_descriptors_are_open, |f| {
    let o = f.run_argv(
        &[],
        &[
            "/usr/bin/python3",
            "-c",
            "import os; print(sorted(int(x) for x in os.listdir('/proc/self/fd')))",
        ],
    );
    // listdir holds one descriptor of its own while it reads the directory.
    let s = out(&o);
    let fds: Vec<u32> = s
        .trim()
        .trim_matches(['[', ']'])
        .split(", ")
        .filter_map(|x| x.parse().ok())
        .collect();
    assert_eq!(&fds[..3], &[0, 1, 2], "{s}");
    assert!(fds.len() <= 4, "extra descriptors leaked in: {s}");
});

both!(no_capabilities_and_no_new_privs, |f| {
    let o = f.run_sh(&[], "grep -E '^(CapEff|CapBnd|CapPrm|NoNewPrivs|Seccomp):' /proc/self/status | tr -s '\\t ' ' '");
    let s = out(&o);
    assert!(s.contains("CapPrm: 0000000000000000"), "{s}");
    assert!(s.contains("CapEff: 0000000000000000"), "{s}");
    assert!(s.contains("CapBnd: 0000000000000000"), "{s}");
    assert!(s.contains("NoNewPrivs: 1"), "{s}");
    assert!(s.contains("Seccomp: 2"), "{s}");
});

both!(orphans_die_with_the_session, |f| {
    let tag = format!(
        "{}",
        7000 + (std::process::id() % 1000) + if f.mode == Mode::Root { 0 } else { 1000 }
    );
    let script = format!("setsid nohup sleep {tag}1 >/dev/null 2>&1 & (sleep {tag}2 </dev/null >/dev/null 2>&1 &) ; sleep 0.2; exit 0");
    let o = f.run_sh(&[], &script);
    assert!(o.status.success(), "{}", err(&o));
    assert!(
        eventually(5, || pids_with(&format!("sleep {tag}1")).is_empty()
            && pids_with(&format!("sleep {tag}2")).is_empty()),
        "orphans survived"
    );
});

both!(supervisor_sigkill_kills_the_sandbox, |f| {
    let tag = format!(
        "{}",
        5000 + (std::process::id() % 1000) + if f.mode == Mode::Root { 0 } else { 1000 }
    );
    let script = format!("sleep {tag}3");
    let mut child = f
        .run_command(&[], &["/bin/sh", "-c", &script], &f.base_env())
        .stdin(std::process::Stdio::null())
        .spawn()
        .expect("spawn");
    // The sandboxed `sleep` itself (the supervisor's command line holds the script too):
    // the supervisor is killed once the sandbox runs.
    assert!(
        eventually(10, || sleeping(&format!("{tag}3"))),
        "sandbox never started"
    );
    // The supervisor is vetto itself (setpriv execs env which execs vetto: same pid).
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
    let _ = child.wait();
    assert!(
        eventually(5, || pids_with(&format!("sleep {tag}3")).is_empty()),
        "sandbox survived its supervisor"
    );
});

// PID 1 starts the command as `posix_spawn` would (a `CLONE_VM | CLONE_VFORK` child, issue
// 18) and finds it as `execvpe` does: through PATH, past an entry that does not exist and a
// file it may not run (EACCES is remembered while the search goes on), a file without a
// `#!` line run by `/bin/sh` with its arguments; 126 with the reason when only files it may
// not run were found, 127 when nothing was; the command starts with every signal at its
// default and none blocked (PID 1's own are blocked into its signalfd).
both!(the_command_is_found_and_started_as_execvpe_would, |f| {
    let (a, b) = (f.proj.join("bin-a"), f.proj.join("bin-b"));
    for d in [&a, &b] {
        std::fs::create_dir_all(d).expect("mkdir");
    }
    let write = |p: &std::path::Path, text: &str, mode: u32| {
        std::fs::write(p, text).expect("write");
        std::fs::set_permissions(p, std::os::unix::fs::PermissionsExt::from_mode(mode))
            .expect("chmod");
    };
    write(&a.join("tool"), "echo wrong tool\n", 0o644);
    write(&b.join("tool"), "echo found \"$1\" \"$2\"\n", 0o755);
    write(&a.join("only"), "echo never\n", 0o644);
    f.own(&a);
    f.own(&b);
    let path = format!(
        "{}/none:{}:{}:/usr/bin:/bin",
        f.proj.display(),
        a.display(),
        b.display()
    );
    let env = [("PATH", path.as_str())];
    let o = f.run_env(&["-q"], &["tool", "x y", "z"], &env);
    assert_eq!(out(&o), "found x y z\n", "stderr: {}", err(&o));
    assert!(o.status.success());
    let o = f.run_env(&["-q"], &["only"], &env);
    assert_eq!(o.status.code(), Some(126), "stderr: {}", err(&o));
    assert!(
        err(&o).contains("cannot execute only: Permission denied"),
        "{}",
        err(&o)
    );
    let o = f.run_env(&["-q"], &["missing-tool"], &env);
    assert_eq!(o.status.code(), Some(127), "stderr: {}", err(&o));
    assert!(
        err(&o).contains("cannot execute missing-tool: No such file"),
        "{}",
        err(&o)
    );
    let o = f.run_sh(&["-q"], "grep -E '^Sig(Blk|Ign):' /proc/self/status");
    assert_eq!(
        out(&o),
        "SigBlk:\t0000000000000000\nSigIgn:\t0000000000000000\n",
        "stderr: {}",
        err(&o)
    );
});

// The supervisor makes /dev's tmpfs, a new devpts instance and /dev/shm itself (issue 18,
// shim/src/rootfs.rs): inside they are what libcontainer made before. A pty opened through
// /dev/ptmx is the instance's first (no host pty is visible there), /dev/shm takes files,
// and the mounts carry their options.
both!(dev_is_a_private_tmpfs_with_its_own_devpts, |f| {
    let script = "ls /dev/pts; echo x > /dev/shm/f && cat /dev/shm/f; \
                  python3 -c 'import os; m, s = os.openpty(); print(os.ttyname(s))'; \
                  awk '$5 ~ /^[/]dev([/]pts|[/]shm)?$/ {print $5, $6, $8, $9}' /proc/self/mountinfo";
    let o = f.run_sh(&["-q"], script);
    assert!(o.status.success(), "stderr: {}", err(&o));
    assert_eq!(
        out(&o),
        "ptmx\nx\n/dev/pts/0\n/dev rw,nosuid tmpfs tmpfs\n\
         /dev/pts rw,nosuid,noexec,relatime devpts devpts\n\
         /dev/shm rw,nosuid,nodev,noexec,relatime tmpfs tmpfs\n",
        "stderr: {}",
        err(&o)
    );
});

both!(exit_codes_and_signals_propagate, |f| {
    assert_eq!(f.run_sh(&[], "exit 7").status.code(), Some(7));
    assert_eq!(f.run_sh(&[], "kill -TERM $$").status.code(), Some(143));
    assert_eq!(
        f.run_argv(&[], &["/nonexistent/cmd"]).status.code(),
        Some(127)
    );
    // A signal sent to vetto reaches the command.
    let mut child = f
        .run_command(
            &[],
            &[
                "/bin/bash",
                "-c",
                "trap 'exit 42' TERM; echo ready; sleep 100 & wait",
            ],
            &f.base_env(),
        )
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut buf = [0u8; 6];
    child
        .stdout
        .as_mut()
        .expect("stdout")
        .read_exact(&mut buf)
        .expect("ready");
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let st = child.wait().expect("wait");
    assert_eq!(st.code(), Some(42));
});

both!(bad_policy_refuses_to_run_and_leaves_nothing, |f| {
    let p = f.root.join("outside/bad.toml");
    std::fs::write(&p, "[environment]\npass_thru = [\"GH_TOKEN\"]\n").expect("w");
    f.own(&p);
    let marker = f.proj.join("ran");
    let o = f.run_sh(&["--policy", p.to_str().expect("utf8")], "touch ran");
    assert_eq!(o.status.code(), Some(2));
    let e = err(&o);
    assert!(
        e.contains("line 2, column 1: unknown field `pass_thru`"),
        "{e}"
    );
    assert!(!marker.exists());
    assert!(
        f.settled_sessions().is_empty(),
        "{:?}",
        f.leftover_sessions()
    );
    let o = f.run_sh(&["--project", "/nonexistent/dir"], "true");
    assert_eq!(o.status.code(), Some(2));
    assert!(err(&o).contains("/nonexistent/dir"), "{}", err(&o));
});

both!(sessions_are_cleaned_up, |f| {
    let o = f.run_sh(&[], "true");
    assert!(o.status.success(), "{}", err(&o));
    assert!(
        f.settled_sessions().is_empty(),
        "{:?}",
        f.leftover_sessions()
    );
});

// The binds and tmpfs mounts the supervisor makes before libcontainer runs (rootfs.rs's
// `Premade`) carry the flags the bundle asks for: system directories read-only, nosuid,
// nodev; the project writable but nosuid, nodev; HOME and /tmp private tmpfs, nosuid, nodev,
// HOME mode 700. Read from the sandbox's own mount table; the writes really land or fail.
both!(the_supervisors_mounts_carry_the_bundles_flags, |f| {
    let o = f.run_sh(
        &[],
        "awk '{print $5, $6}' /proc/self/mountinfo; stat -c 'home %a' ~; \
         touch /usr/vetto-x 2>/dev/null || echo usr-refused; \
         touch ./written && echo proj-written; touch ~/h && echo home-written",
    );
    assert!(o.status.success(), "{}", err(&o));
    let text = out(&o);
    let flags = |dest: &str| -> Vec<String> {
        let line = text
            .lines()
            .find(|l| l.split(' ').next() == Some(dest))
            .unwrap_or_else(|| panic!("no mount at {dest}: {text}"));
        line.split(' ')
            .nth(1)
            .unwrap_or("")
            .split(',')
            .map(str::to_string)
            .collect()
    };
    let has = |dest: &str, want: &[&str]| {
        let got = flags(dest);
        for w in want {
            assert!(got.iter().any(|g| g == w), "{dest}: {got:?} lacks {w}");
        }
    };
    has("/usr", &["ro", "nosuid", "nodev"]);
    has("/etc", &["ro", "nosuid", "nodev"]);
    let proj = f.proj.to_string_lossy().to_string();
    has(&proj, &["rw", "nosuid", "nodev"]);
    has("/tmp", &["rw", "nosuid", "nodev"]);
    let home = f.home.to_string_lossy().to_string();
    has(&home, &["rw", "nosuid", "nodev"]);
    assert!(text.contains("home 700"), "{text}");
    assert!(text.contains("usr-refused"), "{text}");
    assert!(
        text.contains("proj-written") && f.proj.join("written").exists(),
        "{text}"
    );
    assert!(
        text.contains("home-written") && !f.home.join("h").exists(),
        "{text}"
    );
    assert!(
        f.settled_sessions().is_empty(),
        "{:?}",
        f.leftover_sessions()
    );
});

both!(wall_clock_kills_the_sandbox, |f| {
    let start = std::time::Instant::now();
    let o = f.run_sh(&["--wall-clock", "1s"], "sleep 30");
    assert_eq!(o.status.code(), Some(124), "{}", err(&o));
    assert!(
        err(&o).contains("wall-clock limit of 1 s reached"),
        "{}",
        err(&o)
    );
    assert!(start.elapsed() < Duration::from_secs(20));
});

both!(init_binary_cannot_be_rewritten, |f| {
    let before = std::fs::read(&f.bin).expect("read");
    let o = f.run_sh(&[], "echo pwned > /proc/1/exe 2>/dev/null && echo WROTE; cat /proc/1/environ >/dev/null 2>&1 && echo READ-ENVIRON; echo end");
    assert_eq!(out(&o), "end\n", "{}", err(&o));
    assert_eq!(std::fs::read(&f.bin).expect("read"), before);
});

// PID 1 reports the command's exit code on a pipe once the rest of the sandbox is reaped, and
// the supervisor ends the session on it (the trust-handoff walk, the audit end). A command
// that could write that pipe would end the session early, with a status of its choosing,
// while it went on running. It tries every route to PID 1's descriptors: /proc/1/fd and
// pidfd_getfd. vetto's status must stay the command's own (3), not the forged 77.
both!(the_command_cannot_forge_pid_1s_exit_report, |f| {
    let script = r#"
import ctypes, os, struct
forged = struct.pack("i", 77)
wrote = []
try:
    fds = os.listdir("/proc/1/fd")
except OSError as e:
    print("listdir", e.errno, flush=True)
    fds = [str(n) for n in range(64)]
for n in fds:
    try:
        fd = os.open("/proc/1/fd/" + n, os.O_WRONLY | os.O_NONBLOCK)
        os.write(fd, forged)
        wrote.append("proc:" + n)
    except OSError:
        pass
libc = ctypes.CDLL(None, use_errno=True)
try:
    pidfd = os.pidfd_open(1)
except OSError as e:
    print("pidfd_open", e.errno)
    pidfd = -1
if pidfd >= 0:
    for n in range(64):
        fd = libc.syscall(438, pidfd, n, 0)
        if fd >= 0:
            try:
                os.write(fd, forged)
                wrote.append("getfd:" + str(n))
            except OSError:
                pass
print("wrote", wrote, flush=True)
os._exit(3)
"#;
    let o = f.run_argv(&[], &["python3", "-c", script]);
    assert!(out(&o).contains("wrote []"), "{}{}", out(&o), err(&o));
    assert_eq!(o.status.code(), Some(3), "{}{}", out(&o), err(&o));
});

// The project's own repository is read-only inside (tests/tests/holes.rs); a repository the
// session creates is the sandbox's to commit in, with the identity from ~/.gitconfig.
both!(git_works_with_identity_from_gitconfig, |f| {
    let o = f.run_sh(&[], "git status --short && git init -q scratch && cd scratch && echo x > f && git add f && git commit -qm 'from the sandbox' && git log -1 --format='%an <%ae>'");
    assert!(o.status.success(), "{}", err(&o));
    assert!(
        out(&o).ends_with("Sandbox Tester <tester@example.invalid>\n"),
        "{}",
        out(&o)
    );
});

both!(python_venv_and_node_work, |f| {
    let o = f.run_sh(
        &[],
        "/usr/bin/python3 -m venv --without-pip .venv && .venv/bin/python -c 'print(6*7)'",
    );
    assert_eq!(out(&o), "42\n", "{}", err(&o));
    if std::path::Path::new("/usr/bin/node").exists() {
        let o = f.run_argv(
            &[],
            &[
                "/usr/bin/node",
                "-e",
                "console.log(require('fs').readFileSync('.env','utf8').length)",
            ],
        );
        assert_eq!(out(&o), "0\n", "{}", err(&o));
    }
});

fn tmux(f: &Fixture, args: &[&str]) -> String {
    let sock = f.root.join("run/tmux.sock").display().to_string();
    let mut argv: Vec<&str> = vec!["tmux", "-S", &sock];
    argv.extend_from_slice(args);
    let mut env = f.base_env();
    env.push(("TERM".into(), "xterm-256color".into()));
    // nobody's login shell is nologin: tmux would run the pane command with it.
    env.push(("SHELL".into(), "/bin/sh".into()));
    let o = f.command(&argv, &env).output().expect("tmux");
    out(&o)
}

both!(interactive_terminal_and_resize, |f| {
    if std::process::Command::new("tmux")
        .arg("-V")
        .output()
        .is_err()
    {
        panic!("tmux is not installed (scripts/deps.sh installs it)");
    }
    let bin = f.bin.display().to_string();
    let cmd = format!("{bin} run -- /bin/bash --norc --noprofile -i");
    tmux(f, &["new-session", "-d", "-x", "101", "-y", "33", &cmd]);
    let screen_has =
        |needle: &str| eventually(10, || tmux(f, &["capture-pane", "-p"]).contains(needle));
    tmux(
        f,
        &[
            "send-keys",
            "echo tty=$(tty | cut -c1-8) uid=$(id -u)",
            "Enter",
        ],
    );
    assert!(
        screen_has("tty=/dev/pts"),
        "{}",
        tmux(f, &["capture-pane", "-p"])
    );
    tmux(f, &["send-keys", "stty size", "Enter"]);
    assert!(screen_has("33 101"), "{}", tmux(f, &["capture-pane", "-p"]));
    tmux(f, &["resize-window", "-x", "120", "-y", "40"]);
    tmux(f, &["send-keys", "clear; stty size", "Enter"]);
    assert!(
        screen_has("40 120"),
        "resize not propagated: {}",
        tmux(f, &["capture-pane", "-p"])
    );
    // Job control works: a foreground job is interrupted by ^C, the shell survives.
    tmux(f, &["send-keys", "clear; sleep 100", "Enter"]);
    std::thread::sleep(Duration::from_millis(300));
    tmux(f, &["send-keys", "C-c", ""]);
    tmux(f, &["send-keys", "echo still-$((6*7))", "Enter"]);
    assert!(
        screen_has("still-42"),
        "{}",
        tmux(f, &["capture-pane", "-p"])
    );
    tmux(f, &["send-keys", "exit", "Enter"]);
    assert!(
        eventually(10, || tmux(f, &["list-sessions"]).is_empty()),
        "session did not end"
    );
    let _ = tmux(f, &["kill-server"]);
});

/// Root variant only: the toolchain lives in root's HOME (/root is 0700, so `nobody` cannot
/// read it); the rootless path is covered by the other workloads.
#[test]
fn cargo_build_offline_in_the_sandbox() {
    let cargo_home = std::path::Path::new("/root/.cargo");
    if !vetto_integration::is_root() || !cargo_home.join("bin/cargo").exists() {
        eprintln!("skipped: needs root and a rustup toolchain in /root");
        return;
    }
    let f = Fixture::new(Mode::Root);
    let krate = f.proj.join("hello");
    std::fs::create_dir_all(krate.join("src")).expect("mk");
    std::fs::write(
        krate.join("Cargo.toml"),
        "[package]\nname = \"hello\"\nversion = \"0.1.0\"\nedition = \"2021\"\n",
    )
    .expect("w");
    std::fs::write(
        krate.join("src/main.rs"),
        "fn main() { println!(\"built in vetto\"); }\n",
    )
    .expect("w");
    let o = f.run_env(
        &[
            "--allow-read",
            "/root/.cargo",
            "--allow-read",
            "/root/.rustup",
        ],
        &[
            "/bin/sh",
            "-c",
            "cd hello && cargo build --offline -q && ./target/debug/hello",
        ],
        &[
            ("CARGO_HOME", "/root/.cargo"),
            ("RUSTUP_HOME", "/root/.rustup"),
            ("PATH", "/root/.cargo/bin:/usr/local/bin:/usr/bin:/bin"),
        ],
    );
    assert_eq!(out(&o), "built in vetto\n", "{}", err(&o));
    assert!(krate.join("target/debug/hello").exists());
}

both!(stale_sessions_are_swept_on_the_next_start, |f| {
    assert!(f.run_sh(&[], "true").status.success());
    // A session whose supervisor died (pid 1 never was one; start time 0 cannot match).
    let stale = f.root.join("run/vetto/sessions/vetto-999999-deadbeef0000");
    std::fs::create_dir_all(stale.join("bundle/rootfs")).expect("mk");
    std::fs::write(stale.join("supervisor"), "999999 1\n").expect("w");
    f.own(&stale);
    let o = f.run_sh(&[], "true");
    assert!(o.status.success(), "{}", err(&o));
    assert!(!stale.exists(), "stale session not swept");
});

both!(project_inside_home_is_visible_and_home_stays_private, |f| {
    let app = f.home.join("code/app");
    std::fs::create_dir_all(&app).expect("mk");
    std::fs::write(app.join(".env"), "TOKEN=dummy\n").expect("w");
    std::fs::write(f.home.join("notes.txt"), "private host file\n").expect("w");
    f.own(&f.home);
    let p = app.display().to_string();
    let script = "echo hi > made.txt && cat made.txt; wc -c < .env; cat ~/notes.txt 2>/dev/null || echo no-notes; \
                  mkdir -p ~/.cache/x && rm -r ~/.cache/x && echo cache-ok; rm made.txt 2>/dev/null || echo rm-denied";
    let o = f.run_sh(
        &["--project", &p, "--project-access", "write-no-delete"],
        &format!("cd '{p}' && {{ {script}; }}"),
    );
    assert_eq!(
        out(&o),
        "hi\n0\nno-notes\ncache-ok\nrm-denied\n",
        "{}",
        err(&o)
    );
    assert!(app.join("made.txt").exists());
});

both!(stdin_pipes_through_and_sigpipe_is_default, |f| {
    use std::io::Write;
    let mut child = f
        .run_command(
            &[],
            &["/bin/sh", "-c", "read x; echo got:$x; yes | head -1"],
            &f.base_env(),
        )
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(b"from-the-host\n")
        .expect("w");
    let o = child.wait_with_output().expect("wait");
    assert_eq!(out(&o), "got:from-the-host\ny\n");
    assert!(!err(&o).contains("Broken pipe"), "{}", err(&o));
    assert!(o.status.success());
});

/// The pipe inode (`pipe:[N]`) of `pid`'s descriptors other than 0, 1 and 2.
fn pipes_of(pid: u32) -> Vec<String> {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_str()
                .is_some_and(|n| !["0", "1", "2"].contains(&n))
        })
        .filter_map(|e| std::fs::read_link(e.path()).ok())
        .map(|l| l.to_string_lossy().into_owned())
        .filter(|l| l.starts_with("pipe:["))
        .collect()
}

/// Every process holding a descriptor to `target` (`pipe:[N]`).
fn holders_of(target: &str) -> Vec<u32> {
    let mut v = vec![];
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let held = std::fs::read_dir(e.path().join("fd"))
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|fd| std::fs::read_link(fd.path()).ok())
            .any(|l| l.to_string_lossy() == target);
        if held {
            v.push(pid);
        }
    }
    v
}

// vetto's own pid is the front (shim/src/front.rs): it exits with the status the supervisor
// writes on a pipe. Only the supervisor may hold that pipe's write end: a sandbox process
// holding it could make vetto exit 0 for a failed command. While a session runs, in both
// tiers, the pipe is held by the front and the supervisor, and by no process of the sandbox
// (PID 1, the command); and the status the front exits with is the command's.
both!(vettos_exit_status_pipe_is_held_by_vetto_alone, |f| {
    let base = 5311 + 10 * u32::from(f.mode != Mode::Root);
    for (n, tier) in [(0, "full"), (1, "fs-only")] {
        let tag = (base + n).to_string();
        let child = f
            .run_command(
                &["--tier", tier],
                &["/bin/sh", "-c", &format!("sleep {tag}; exit 9")],
                &f.base_env(),
            )
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn");
        let ran = eventually(10, || sleeping(&tag));
        let front = child.id();
        let sup = vetto_integration::supervisor_of(front);
        // Of the front's pipes, not one it inherited from this test (cargo's jobserver).
        let holders: Vec<(String, Vec<u32>)> = pipes_of(front)
            .into_iter()
            .map(|p| (holders_of(&p), p))
            .filter(|(h, _)| !h.contains(&std::process::id()))
            .map(|(h, p)| (p, h))
            .collect();
        let sandbox = vetto_integration::sleepers(&tag);
        // Ended before anything is asserted: the command is killed, vetto says so.
        for p in &sandbox {
            // SAFETY: killing the sandboxed sleep this test started.
            unsafe { libc::kill(*p as i32, libc::SIGKILL) };
        }
        let o = child.wait_with_output().expect("wait");
        assert!(ran, "{tier}: the command never ran: {}", err(&o));
        let sup = sup.unwrap_or_else(|| panic!("{tier}: no supervisor under {front}"));
        assert_eq!(
            holders.len(),
            1,
            "{tier}: the front's own pipes: {holders:?}"
        );
        let mut want = vec![front, sup];
        want.sort_unstable();
        let mut got = holders[0].1.clone();
        got.sort_unstable();
        assert_eq!(got, want, "{tier}: {} is held by {got:?}", holders[0].0);
        assert!(!sandbox.is_empty(), "{tier}: no sandboxed sleep found");
        // The shell's sleep was killed: sh went on to `exit 9`.
        assert_eq!(o.status.code(), Some(9), "{tier}: {}", err(&o));
    }
});

// The supervisor killed (not vetto's own pid): vetto ends the same way, by the same signal,
// and the sandbox goes with it.
both!(a_killed_supervisor_ends_vetto_by_the_same_signal, |f| {
    use std::os::unix::process::ExitStatusExt;
    let tag = (5331 + u32::from(f.mode != Mode::Root)).to_string();
    let mut child = f
        .run_command(&[], &["sleep", &tag], &f.base_env())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn");
    let ran = eventually(10, || sleeping(&tag));
    let sup = vetto_integration::supervisor_of(child.id());
    if let Some(s) = sup {
        // SAFETY: killing the supervisor of the vetto this test started.
        unsafe { libc::kill(s as i32, libc::SIGKILL) };
    } else {
        // SAFETY: as above, vetto itself, so that nothing is left running.
        unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
    }
    let st = child.wait().expect("wait");
    assert!(ran, "the command never ran");
    assert!(sup.is_some(), "no supervisor found");
    assert_eq!(st.signal(), Some(libc::SIGKILL), "{st:?}");
    assert!(
        eventually(5, || !sleeping(&tag)),
        "the sandbox outlived its supervisor"
    );
});

// A caller that ignores SIGCHLD (a disposition exec keeps): vetto still ends with its own
// status, the command's or a set-up failure's. (With SIGCHLD ignored the kernel reaps
// children unseen: the front could not read the supervisor's status, and said 125.)
both!(a_caller_ignoring_sigchld_still_gets_vettos_status, |f| {
    use std::os::unix::process::CommandExt;
    let cases: [(&[&str], &str, i32); 2] = [
        (&[], "exit 7", 7),
        (&["--project", "/nonexistent/dir"], "true", 2),
    ];
    for (args, script, want) in cases {
        let mut c = f.run_command(args, &["/bin/sh", "-c", script], &f.base_env());
        // SAFETY: only signal() (async-signal-safe) runs between fork and exec.
        unsafe {
            c.pre_exec(|| {
                libc::signal(libc::SIGCHLD, libc::SIG_IGN);
                Ok(())
            });
        }
        let o = vetto_integration::output_of(c.stdin(std::process::Stdio::null()));
        assert_eq!(o.status.code(), Some(want), "{script}: {}", err(&o));
    }
});
