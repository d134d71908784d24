//! The sandbox's PID 1: apply the plan, then fork the command and stay behind to reap,
//! forward signals, and kill every descendant when the command ends.
//!
//! Order matters and is fixed here: masks and protections mounted through descriptors (needs
//! CAP_SYS_ADMIN of the sandbox's user namespace) → `lo` up (needs CAP_NET_ADMIN) → identity switch (needs
//! CAP_SETFCAP) → no_new_privs → Landlock → capabilities dropped →
//! non-dumpable → PDEATHSIG re-armed and the supervisor checked → signals blocked → seccomp
//! last (so nothing earlier is refused by it) → fork. Both PID 1 and the command run under
//! the same Landlock domain and seccomp filter.

use std::convert::Infallible;
use std::ffi::CString;
use std::io::Write;
use std::os::fd::{AsRawFd, RawFd};

use vetto_bundle::plan::Plan;

use crate::{identity, landlock, listen, mounts, netlo, process, seccomp};

/// A control that could not be established: the command does not run.
#[derive(Debug, thiserror::Error)]
pub enum InitError {
    /// A secret mask or a protection could not be placed.
    #[error("masks and protected paths: {0}")]
    Mount(#[from] mounts::MountError),
    /// Bringing `lo` up failed.
    #[error("network: cannot bring lo up: {0}")]
    Loopback(#[from] netlo::NetError),
    /// The identity switch failed.
    #[error("{0}")]
    Identity(#[from] identity::IdentityError),
    /// Landlock could not be applied.
    #[error("landlock: {0}")]
    Landlock(#[from] landlock::LandlockError),
    /// Seccomp could not be applied.
    #[error("seccomp: {0}")]
    Seccomp(#[from] seccomp::SeccompError),
    /// Capabilities remain.
    #[error("capabilities: {0}")]
    Caps(String),
    /// A process-level step failed.
    #[error("{step}: {source}")]
    Os {
        /// What.
        step: &'static str,
        /// Why.
        source: std::io::Error,
    },
    /// The broker's listeners could not be created or handed over.
    #[error("network: {0}")]
    Listen(#[from] listen::ListenError),
    /// The plan asks for listeners but there is no channel to hand them over.
    #[error("network: no channel to hand the listening sockets to the broker")]
    NoListenerChannel,
    /// The supervisor is gone: nothing must run unsupervised.
    #[error("the vetto supervisor exited during setup")]
    SupervisorGone,
    /// A bad argument (NUL byte).
    #[error("argument contains a NUL byte: {0:?}")]
    Nul(String),
}

fn os(step: &'static str) -> impl FnOnce(std::io::Error) -> InitError {
    move |source| InitError::Os { step, source }
}

/// What PID 1 needs besides the plan.
#[derive(Debug, Clone)]
pub struct InitConfig {
    /// The command.
    pub args: Vec<String>,
    /// Its environment, `K=V`.
    pub env: Vec<String>,
    /// stdio is a pseudo-terminal: make it the command's controlling terminal.
    pub tty: bool,
    /// A pidfd of the supervisor, to close the PDEATHSIG race.
    pub supervisor_pidfd: Option<RawFd>,
    /// Where a setup or exec error is written for the supervisor to report.
    pub error_fd: Option<RawFd>,
    /// Where the broker's listening sockets are sent.
    pub listener_fd: Option<RawFd>,
}

/// Arm PDEATHSIG(SIGKILL) and make sure the supervisor is still alive (a pidfd polls readable
/// once its process has exited).
pub fn arm_parent_death(pidfd: Option<RawFd>) -> Result<(), InitError> {
    // SAFETY: integer-only prctl.
    if unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) } != 0 {
        return Err(os("PR_SET_PDEATHSIG")(std::io::Error::last_os_error()));
    }
    if let Some(fd) = pidfd {
        let mut p = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd, zero timeout.
        let r = unsafe { libc::poll(&mut p, 1, 0) };
        if r > 0 && p.revents & (libc::POLLIN | libc::POLLHUP) != 0 {
            return Err(InitError::SupervisorGone);
        }
    }
    Ok(())
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

/// Apply the plan, fork the command, and act as PID 1 until it exits. Returns only on a setup
/// error, before anything of the user's ran.
pub fn run(plan: &Plan, cfg: &InitConfig) -> Result<Infallible, InitError> {
    let argv = cstrings(&cfg.args)?;
    let envp = cstrings(&cfg.env)?;
    let Some(file) = argv.first().cloned() else {
        return Err(InitError::Nul("empty command".into()));
    };

    // Compiled first: a bad deny-list fails before anything changes.
    let filter = seccomp::compile(&plan.seccomp)?;
    mounts::apply(&plan.mounts)?;
    if plan.loopback_up {
        netlo::loopback_up()?;
    }
    if !plan.network.listeners.is_empty() {
        let sock = cfg.listener_fd.ok_or(InitError::NoListenerChannel)?;
        listen::open_and_send(
            &plan.network.listeners,
            !plan.network.publish.is_empty(),
            sock,
        )?;
    }
    identity::switch_to(plan.identity.uid, plan.identity.gid)?;
    process::set_no_new_privs().map_err(|e| InitError::Caps(e.to_string()))?;
    landlock::apply(&plan.landlock)?;
    process::drop_all_capabilities().map_err(|e| InitError::Caps(e.to_string()))?;
    // Non-dumpable: the sandbox cannot open /proc/1/{mem,exe,environ} of its init.
    // SAFETY: integer-only prctl.
    unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) };
    let (eff, bnd) = process::read_caps().map_err(|e| InitError::Caps(e.to_string()))?;
    if eff != 0 || bnd != 0 {
        return Err(InitError::Caps(format!(
            "still held: CapEff={eff:x} CapBnd={bnd:x}"
        )));
    }
    arm_parent_death(cfg.supervisor_pidfd)?;

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
    seccomp::install(&filter)?;

    // SAFETY: the init is single-threaded; the child only execs or _exits.
    let child = unsafe { libc::fork() };
    if child < 0 {
        return Err(os("fork")(std::io::Error::last_os_error()));
    }
    if child == 0 {
        exec_child(&file, &argv, &envp, cfg);
    }
    if let Some(fd) = cfg.error_fd {
        // SAFETY: closing our copy of the error pipe; the child keeps its own until exec.
        unsafe { libc::close(fd) };
    }
    reap_loop(sfd.as_raw_fd(), child)
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

fn exec_child(file: &CString, argv: &[CString], envp: &[CString], cfg: &InitConfig) -> ! {
    let _ = process::reset_signal_dispositions();
    // SAFETY: setsid has no memory arguments. The command leads its own session and process
    // group, so signals can be forwarded to the whole group.
    unsafe { libc::setsid() };
    if cfg.tty {
        // SAFETY: ioctl on fd 0 (the pty slave) with an integer argument.
        unsafe {
            libc::ioctl(0, libc::TIOCSCTTY, 0);
            libc::tcsetpgrp(0, libc::getpid());
        }
    }
    let mut argv_p: Vec<*const libc::c_char> = argv.iter().map(|a| a.as_ptr()).collect();
    argv_p.push(std::ptr::null());
    let mut envp_p: Vec<*const libc::c_char> = envp.iter().map(|a| a.as_ptr()).collect();
    envp_p.push(std::ptr::null());
    // SAFETY: NUL-terminated arrays of pointers to CStrings that outlive the call.
    unsafe { libc::execvpe(file.as_ptr(), argv_p.as_ptr(), envp_p.as_ptr()) };
    let err = std::io::Error::last_os_error();
    let code = if err.raw_os_error() == Some(libc::ENOENT) {
        127
    } else {
        126
    };
    report(
        cfg.error_fd,
        &format!("cannot execute {}: {err}", file.to_string_lossy()),
    );
    // SAFETY: leave the forked child without running the parent's destructors.
    unsafe { libc::_exit(code) }
}

/// The shell convention for a wait status: the exit code, or 128 + the signal that killed it.
pub fn exit_status(status: libc::c_int) -> i32 {
    if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else if libc::WIFSIGNALED(status) {
        128 + libc::WTERMSIG(status)
    } else {
        1
    }
}

fn reap_loop(sfd: RawFd, child: libc::pid_t) -> ! {
    let mut exit: Option<i32> = None;
    loop {
        // SAFETY: signalfd_siginfo is plain data; read fills it or fails.
        let mut info: libc::signalfd_siginfo = unsafe { std::mem::zeroed() };
        let want = std::mem::size_of::<libc::signalfd_siginfo>();
        // SAFETY: reading into a buffer of exactly `want` bytes that we own.
        let n = unsafe { libc::read(sfd, (&mut info as *mut libc::signalfd_siginfo).cast(), want) };
        if n as usize == want {
            let sig = info.ssi_signo as libc::c_int;
            if sig != libc::SIGCHLD {
                // SAFETY: kill with integers; ESRCH (group gone) falls back to the pid.
                unsafe {
                    if libc::kill(-child, sig) != 0 {
                        libc::kill(child, sig);
                    }
                }
            }
        }
        loop {
            let mut status = 0;
            // SAFETY: status is a valid out pointer.
            let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
            if pid <= 0 {
                break;
            }
            if pid == child {
                exit = Some(exit_status(status));
            }
        }
        if let Some(code) = exit {
            // The command is done: every other process of the sandbox dies with it.
            // SAFETY: kill(-1) from PID 1 signals every other process of the namespace.
            unsafe { libc::kill(-1, libc::SIGKILL) };
            loop {
                let mut status = 0;
                // SAFETY: status is a valid out pointer.
                if unsafe { libc::waitpid(-1, &mut status, 0) } <= 0 {
                    break;
                }
            }
            // SAFETY: exit without unwinding or destructors in the cloned init.
            unsafe { libc::_exit(code) }
        }
    }
}
