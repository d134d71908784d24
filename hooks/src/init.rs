//! `vetto run`'s PID 1: [`apply`](crate::apply::apply) the plan's [`Hardening`] (the one
//! order, shared with `vetto-shim`), then fork the command and stay behind to reap, forward
//! signals, and kill every descendant when the command ends.
//!
//! [`hardening`] says what a [`Plan`] asks of each step (masks, `lo` up, listeners, identity,
//! no_new_privs, Landlock, all capabilities dropped, PDEATHSIG, the deny-list). After it is
//! applied, PID 1 hands the terminal over, blocks the signals it forwards into a signalfd and
//! forks. Both PID 1 and the command run under the same Landlock domain and seccomp filter.

use std::convert::Infallible;
use std::ffi::CString;
use std::io::Write;
use std::os::fd::{AsRawFd, RawFd};

use vetto_bundle::plan::Plan;

use nix::sys::signal::{kill, killpg, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag};
use nix::unistd::Pid;

use crate::apply::{self, Capabilities, Filter, HardenError, Hardening, Listeners, Network};
use crate::{process, seccomp};

/// A control that could not be established: the command does not run.
#[derive(Debug, thiserror::Error)]
pub enum InitError {
    /// A hardening step failed.
    #[error(transparent)]
    Harden(#[from] HardenError),
    /// The deny-list could not be compiled.
    #[error("seccomp: {0}")]
    Seccomp(#[from] seccomp::SeccompError),
    /// A process-level step failed.
    #[error("{step}: {source}")]
    Os {
        /// What.
        step: &'static str,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The plan asks for listeners but there is no channel to hand them over.
    #[error("network: no channel to hand the listening sockets to the broker")]
    NoListenerChannel,
    /// A bad argument (NUL byte).
    #[error("argument contains a NUL byte: {0:?}")]
    Nul(String),
    /// PID 1 could not close what it does not need; the command was killed.
    #[error("PID 1 closing the descriptors it does not need (the command was killed): {0}")]
    Close(#[source] process::ProcessError),
}

fn os(step: &'static str) -> impl FnOnce(std::io::Error) -> InitError {
    move |source| InitError::Os { step, source }
}

/// What PID 1 needs besides the hardening.
#[derive(Debug, Clone)]
pub struct InitConfig {
    /// The command.
    pub args: Vec<String>,
    /// Its environment, `K=V`.
    pub env: Vec<String>,
    /// stdio is a pseudo-terminal: make it the command's controlling terminal.
    pub tty: bool,
    /// Where a setup or exec error is written for the supervisor to report.
    pub error_fd: Option<RawFd>,
    /// Where PID 1 writes the command's exit code (4 bytes, native endian) once every other
    /// process of the sandbox is dead and reaped, just before it exits itself: the supervisor
    /// can then end the session while the kernel tears PID 1 and its namespaces down. Close on
    /// exec, and PID 1 is not dumpable ([`apply::apply`] makes it so and checks it), so the
    /// command can reach it neither by inheritance nor through `/proc/1/fd` or `pidfd_getfd`
    /// (both need CAP_SYS_PTRACE over PID 1's memory's user namespace, the host's: PID 1 was
    /// cloned, not exec'd). A forged early status would start the session's end, the
    /// trust-handoff walk included, while the sandbox still ran.
    pub status_fd: Option<RawFd>,
}

/// What `plan` asks of each step of [`apply::apply`], with the deny-list compiled (call it
/// before the container is cloned: a bad deny-list then fails before anything is created).
/// `listener_fd` is the init's end of the channel the broker's listeners are sent over;
/// `supervisor_pidfd` closes the PDEATHSIG race.
pub fn hardening(
    plan: &Plan,
    listener_fd: Option<RawFd>,
    supervisor_pidfd: Option<RawFd>,
) -> Result<Hardening, InitError> {
    let listeners = match plan.network.listeners.is_empty() {
        true => None,
        false => Some(Listeners {
            listeners: plan.network.listeners.clone(),
            publish: !plan.network.publish.is_empty(),
            channel: listener_fd.ok_or(InitError::NoListenerChannel)?,
        }),
    };
    Ok(Hardening {
        binds: vec![],
        mounts: plan.mounts.clone(),
        netns: None,
        network: match plan.loopback_up {
            true => Network::LoopbackUp,
            false => Network::Untouched,
        },
        listeners,
        identity: Some((plan.identity.uid, plan.identity.gid)),
        no_new_privs: true,
        landlock: Some(plan.landlock.clone()),
        capabilities: Capabilities::DropAll,
        parent_death: Some(supervisor_pidfd),
        filters: vec![Filter::DenyList(seccomp::compile(&plan.seccomp)?)],
    })
}

/// Write an error for the supervisor (best effort: the exit status says it failed anyway).
pub fn report(fd: Option<RawFd>, msg: &str) {
    if let Some(fd) = fd {
        // SAFETY: writing a byte buffer we own to a descriptor; errors are ignored.
        unsafe { libc::write(fd, msg.as_ptr().cast(), msg.len()) };
    } else {
        let _ = writeln!(std::io::stderr(), "vetto: {msg}");
    }
}

fn cstrings(v: &[String]) -> Result<Vec<CString>, InitError> {
    v.iter()
        .map(|s| CString::new(s.as_bytes()).map_err(|_| InitError::Nul(s.clone())))
        .collect()
}

/// Apply the hardening, fork the command, and act as PID 1 until it exits. Returns only on a
/// setup error: before anything of the user's ran, or with the command killed as it started
/// ([`InitError::Close`]).
pub fn run(h: &Hardening, cfg: &InitConfig) -> Result<Infallible, InitError> {
    let argv = cstrings(&cfg.args)?;
    let envp = cstrings(&cfg.env)?;
    let Some(file) = argv.first().cloned() else {
        return Err(InitError::Nul("empty command".into()));
    };
    apply::apply(h)?;

    if cfg.tty {
        // libcontainer made the pty PID 1's controlling terminal; hand it over so the command
        // can take it in its own session. TIOCNOTTY sends SIGHUP to PID 1's group; SIGHUP may
        // be blocked (inherited mask), so it stays pending: setting SIG_IGN afterwards
        // discards it, before PID 1 would forward it to the command.
        // SAFETY: changing one signal disposition and an ioctl without memory arguments.
        unsafe {
            libc::signal(libc::SIGHUP, libc::SIG_IGN);
            libc::ioctl(0, libc::TIOCNOTTY);
            libc::signal(libc::SIGHUP, libc::SIG_IGN);
            libc::signal(libc::SIGHUP, libc::SIG_DFL);
        }
    }
    // Block the signals PID 1 handles; it reads them from a signalfd.
    let handled: Vec<libc::c_int> = FORWARDED.iter().copied().chain([libc::SIGCHLD]).collect();
    let sfd = process::block_into_signalfd(&handled, libc::SFD_CLOEXEC).map_err(os("signalfd"))?;

    let child = spawn_command(&file, &argv, &envp, cfg)?;
    if let Some(fd) = cfg.error_fd {
        // SAFETY: closing our copy of the error pipe; the child has exec'd (or exited).
        unsafe { libc::close(fd) };
    }
    // The early status is only for a PID 1 the sandbox cannot reach into (see `status_fd`);
    // otherwise the supervisor learns the end from PID 1's exit, as without one.
    // SAFETY: an integer-only prctl.
    let sealed = unsafe { libc::prctl(libc::PR_GET_DUMPABLE, 0, 0, 0, 0) } == 0;
    let status_fd = cfg.status_fd.filter(|_| sealed);
    // From here PID 1 needs its signalfd and the status pipe only. What else the set-up left
    // open (the session lock, the cgroup's and libcontainer's descriptors, a handle on the
    // rootfs' detached mount) is closed now, while the command starts, rather than at the
    // end: the last reference to a detached mount costs an RCU grace period to drop, which
    // PID 1's exit would otherwise add to the session's end. It is not only a matter of
    // time: among them is the write end of vetto's own exit-status pipe (the front's,
    // `shim/src/front.rs`), which a sandbox able to reach into an unsealed PID 1 could write
    // a status to. So if the kernel refuses, the command is killed and the session fails.
    let mut keep = vec![0, 1, 2, sfd.as_raw_fd()];
    keep.extend(status_fd);
    if let Err(e) = process::close_all_but(&keep) {
        // SAFETY: killing and reaping the child this process just forked.
        unsafe {
            libc::kill(child, libc::SIGKILL);
            libc::waitpid(child, std::ptr::null_mut(), 0);
        }
        return Err(InitError::Close(e));
    }
    // Likewise PID 1's mappings of the vetto image's code that the set-up ran (megabytes, of
    // which the loop below faults back in the few pages it runs): unmapping them was most of
    // PID 1's exit (best effort as above).
    let _ = process::drop_code_mappings();
    reap_loop(sfd.as_raw_fd(), child, status_fd)
}

/// Signals PID 1 forwards to the command's process group.
pub const FORWARDED: &[libc::c_int] = &[
    libc::SIGINT,
    libc::SIGTERM,
    libc::SIGHUP,
    libc::SIGQUIT,
    libc::SIGUSR1,
    libc::SIGUSR2,
    libc::SIGWINCH,
    libc::SIGCONT,
];

/// The command's child, started as `posix_spawn` starts one: a clone that shares PID 1's
/// memory (`CLONE_VM`) while PID 1 waits (`CLONE_VFORK`) until it has exec'd the command or
/// exited. A fork would copy PID 1's page tables, the child would fault in copies of the pages
/// it touches before its exec, and the exec would tear the copy down again: on the machines
/// vetto is measured on a page costs 2-3 µs, and all of it lay between the sandbox's set-up
/// and the command's first instruction (issue 18).
///
/// The child runs [`command_child`] on a stack of its own, with every signal blocked until
/// it has put every disposition back to the default (a handler of PID 1's would otherwise run
/// on memory PID 1 owns). What it needs is made before the clone: it allocates nothing. The
/// command is found as `execvpe` finds it (the same PATH search, `EACCES` remembered while
/// the search goes on, a file without a `#!` line run by `/bin/sh`); when it cannot be run,
/// PID 1 reports why, and the child's exit status (127 not found, 126 not runnable) is the
/// command's. Returns the child's pid.
fn spawn_command(
    file: &CString,
    argv: &[CString],
    envp: &[CString],
    cfg: &InitConfig,
) -> Result<libc::pid_t, InitError> {
    let mut argv_p: Vec<*const libc::c_char> = argv.iter().map(|a| a.as_ptr()).collect();
    argv_p.push(std::ptr::null());
    let mut envp_p: Vec<*const libc::c_char> = envp.iter().map(|a| a.as_ptr()).collect();
    envp_p.push(std::ptr::null());
    let candidates = command_candidates(file, std::env::var_os("PATH").as_deref());
    // `/bin/sh <candidate> <args...>` for a file the kernel cannot run (ENOEXEC); the
    // child writes the candidate into slot 1.
    let mut sh_argv: Vec<*const libc::c_char> = vec![c"/bin/sh".as_ptr(), std::ptr::null()];
    sh_argv.extend(argv.iter().skip(1).map(|a| a.as_ptr()));
    sh_argv.push(std::ptr::null());
    let mut job = CommandChild {
        candidates: candidates.iter().map(|c| c.as_ptr()).collect(),
        argv: argv_p.as_ptr(),
        envp: envp_p.as_ptr(),
        sh_argv: sh_argv.as_mut_ptr(),
        tty: cfg.tty,
        errno: 0,
    };
    let stack = process::ChildStack::new(CHILD_STACK).map_err(os("the command's stack"))?;
    let blocked = process::block_all_signals().map_err(os("blocking signals"))?;
    // SAFETY: the child runs `command_child` on `stack` (mapped until after the clone returns,
    // which with CLONE_VFORK is after the child has exec'd or exited, when nothing runs on it
    // any more). It shares this process's memory while this process is suspended, and uses
    // only `job` (alive on this frame until then), its stack and the program's code; it
    // allocates nothing. Without CLONE_FILES and CLONE_SIGHAND it has its own descriptor table
    // and dispositions; SIGCHLD reports its exit, as a fork's would.
    let child = unsafe {
        libc::clone(
            command_child_entry,
            stack.top(),
            libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
            (&mut job as *mut CommandChild).cast(),
        )
    };
    let clone_error = std::io::Error::last_os_error();
    blocked.restore();
    if child < 0 {
        return Err(os("starting the command")(clone_error));
    }
    drop(stack);
    if job.errno != 0 {
        report(
            cfg.error_fd,
            &format!(
                "cannot execute {}: {}",
                file.to_string_lossy(),
                std::io::Error::from_raw_os_error(job.errno)
            ),
        );
    }
    Ok(child)
}

/// The command child's stack: its calls need a few hundred bytes.
const CHILD_STACK: usize = 64 * 1024;

/// What the command's child reads (prepared by [`spawn_command`]) and writes (`errno`, the
/// reason no candidate could be exec'd).
struct CommandChild {
    candidates: Vec<*const libc::c_char>,
    argv: *const *const libc::c_char,
    envp: *const *const libc::c_char,
    sh_argv: *mut *const libc::c_char,
    tty: bool,
    errno: libc::c_int,
}

/// The paths `execvpe` would try for `file`: itself if it holds a `/`, else `dir/file` for
/// each entry of `path` (an empty entry is the working directory; no PATH: `/bin:/usr/bin`,
/// glibc's default).
fn command_candidates(file: &CString, path: Option<&std::ffi::OsStr>) -> Vec<CString> {
    use std::os::unix::ffi::OsStrExt;
    let name = file.as_bytes();
    if name.is_empty() || name.contains(&b'/') {
        return vec![file.clone()];
    }
    let path = path.map_or(&b"/bin:/usr/bin"[..], |p| p.as_bytes());
    path.split(|b| *b == b':')
        .filter_map(|dir| {
            let mut p = dir.to_vec();
            if !p.is_empty() {
                p.push(b'/');
            }
            p.extend_from_slice(name);
            CString::new(p).ok()
        })
        .collect()
}

/// `clone`'s entry point for the command child: its argument is the [`CommandChild`].
extern "C" fn command_child_entry(job: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `spawn_command` passes a live `CommandChild`, which it does not touch while
    // this child runs (it is suspended until the exec or the exit).
    command_child(unsafe { &mut *job.cast::<CommandChild>() })
}

/// The command child's life until its exec: the default disposition for every signal and an
/// empty mask, its own session (signals are forwarded to its process group), the terminal
/// as its controlling one, then the exec; if none succeeds, the reason in `job.errno` and an
/// exit status. Only system calls: no allocation, no lock (PID 1's memory is shared).
fn command_child(job: &mut CommandChild) -> libc::c_int {
    let _ = process::reset_signal_dispositions();
    // SAFETY: setsid has no memory arguments. The command leads its own session and process
    // group, so signals can be forwarded to the whole group.
    unsafe { libc::setsid() };
    if job.tty {
        // SAFETY: ioctl on fd 0 (the pty slave) with an integer argument.
        unsafe {
            libc::ioctl(0, libc::TIOCSCTTY, 0);
            libc::tcsetpgrp(0, libc::getpid());
        }
    }
    let errno = || {
        std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::ENOENT)
    };
    let mut eacces = false;
    let mut last = libc::ENOENT;
    let mut searched = true;
    for &candidate in &job.candidates {
        // SAFETY: NUL-terminated strings and NULL-terminated arrays of them, alive in
        // `spawn_command`'s frame until this child has exec'd or exited.
        unsafe { libc::execve(candidate, job.argv, job.envp) };
        let e = errno();
        if e == libc::ENOEXEC {
            // SAFETY: slot 1 of `sh_argv` is reserved for the candidate; the arrays are as
            // above.
            unsafe {
                *job.sh_argv.add(1) = candidate;
                libc::execve(c"/bin/sh".as_ptr(), job.sh_argv.cast_const(), job.envp);
            }
            last = errno();
            searched = false;
            break;
        }
        last = e;
        match e {
            libc::EACCES => eacces = true,
            // Not here: the search goes on.
            libc::ENOENT | libc::ENOTDIR | libc::ESTALE | libc::ENODEV | libc::ETIMEDOUT => {}
            _ => {
                searched = false;
                break;
            }
        }
    }
    // As execvpe: a search that found only files it may not run fails with EACCES.
    if searched && eacces {
        last = libc::EACCES;
    }
    job.errno = last;
    let code = if last == libc::ENOENT { 127 } else { 126 };
    // SAFETY: leave without running anything of PID 1's (destructors, atexit handlers).
    unsafe { libc::_exit(code) }
}

fn reap_loop(sfd: RawFd, child: libc::pid_t, status_fd: Option<RawFd>) -> ! {
    let child = Pid::from_raw(child);
    let mut exit: Option<i32> = None;
    loop {
        // SAFETY: signalfd_siginfo is plain data; read fills it or fails.
        let mut info: libc::signalfd_siginfo = unsafe { std::mem::zeroed() };
        let want = std::mem::size_of::<libc::signalfd_siginfo>();
        // SAFETY: reading into a buffer of exactly `want` bytes that we own.
        let n = unsafe { libc::read(sfd, (&mut info as *mut libc::signalfd_siginfo).cast(), want) };
        if n as usize == want {
            if let Ok(sig) = Signal::try_from(info.ssi_signo as libc::c_int) {
                if sig != Signal::SIGCHLD && killpg(child, sig).is_err() {
                    // The group is gone: the pid alone.
                    let _ = kill(child, sig);
                }
            }
        }
        // Reap everything that has ended; note the command's own status.
        while let Ok(st) = waitpid(
            None::<Pid>,
            Some(WaitPidFlag::WNOHANG | WaitPidFlag::__WALL),
        ) {
            match st.pid() {
                None => break,
                Some(pid) if pid == child => exit = process::exit_code(st).or(exit),
                Some(_) => {}
            }
        }
        if let Some(code) = exit {
            // The command is done: every other process of the sandbox dies with it (from
            // PID 1, kill(-1) signals every other process of the namespace).
            let _ = kill(Pid::from_raw(-1), Signal::SIGKILL);
            // __WALL: also children whose exit signal is not SIGCHLD, so that ECHILD means
            // none at all is left.
            while let Ok(_) | Err(nix::Error::EINTR) =
                waitpid(None::<Pid>, Some(WaitPidFlag::__WALL))
            {}
            // ECHILD: nothing of the sandbox is left (every orphan of the namespace is PID
            // 1's child). Say so before the kernel's teardown of PID 1 and its namespaces.
            if let Some(fd) = status_fd {
                // PID 1's stdin, stdout and stderr are the command's: a reader of its output
                // waits for every copy to close, and this one would stay until PID 1 is
                // killed, after vetto's status is delivered. PID 1 writes nothing more.
                // SAFETY: closing this process's own standard descriptors, unused from here.
                unsafe {
                    for n in 0..3 {
                        libc::close(n);
                    }
                }
                let bytes = code.to_ne_bytes();
                // SAFETY: writing 4 bytes we own; a short or failed write leaves the
                // supervisor on its SIGCHLD path, which waits for the exit itself.
                let n = unsafe { libc::write(fd, bytes.as_ptr().cast(), bytes.len()) };
                if n == 4 {
                    // Reported: the supervisor kills PID 1 once vetto's own exit status is
                    // delivered (or PID 1 dies with it, PDEATHSIG). Its exit (its address
                    // space, its namespaces' teardown: most of a millisecond of kernel work)
                    // then no longer competes for the CPUs with the session's end. Nothing
                    // of the sandbox is left to run meanwhile; every signal is blocked (read
                    // from the signalfd, which nothing reads any more), so pause() returns
                    // only to a SIGKILL, which ends it.
                    loop {
                        // SAFETY: pause has no arguments.
                        unsafe { libc::pause() };
                    }
                }
            }
            // SAFETY: exit without unwinding or destructors in the cloned init.
            unsafe { libc::_exit(code) }
        }
    }
}
