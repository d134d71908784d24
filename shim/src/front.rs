//! `vetto run`'s front: the process the caller started (the pid a shell or a harness waits
//! for) forks the supervisor at once, then only relays: the command's exit status, as soon as
//! the supervisor has it, and the signals sent to it.
//!
//! Why: the time from the command's exit to vetto's exit was the supervisor's own teardown
//! (PID 1's reaping and its namespaces' end, the session directory's removal, the
//! supervisor's exit with its private mount namespace: ~1.5 ms of a ~2.5 ms exit). None of it
//! is something the caller needs to wait for. With the front, the supervisor writes the status
//! once the session is over (every process of the sandbox reaped, the session's record ended,
//! everything printed) and the front exits with it; the supervisor finishes the teardown on
//! its own. A supervisor killed during it leaves what the next run sweeps (`session.rs`).
//!
//! The protocol:
//! - **The status.** One byte on a pipe, written by [`deliver`] after the supervisor has
//!   pointed its stdin, stdout and stderr at `/dev/null` (a caller reading the command's
//!   output sees it end then, not after the teardown). Both tiers deliver it. Without it (a
//!   set-up failure, a killed supervisor) the front waits for the supervisor's exit and ends
//!   the same way: the same code, or the same signal.
//! - **Signals.** SIGINT, SIGTERM, SIGHUP and SIGQUIT sent to the front with `kill` are
//!   relayed with `sigqueue`, the original sender's pid as the value. The terminal's own
//!   (`SI_KERNEL`: Ctrl-C, a hang-up) reach the supervisor directly, in the same process
//!   group, and are not relayed. A signal sent to the whole group reaches both: the supervisor
//!   passes it to the sandbox once ([`fresh`]). Job control (SIGTSTP, SIGCONT) keeps its
//!   default action: the two stop and continue together.
//! - **Dying together.** The supervisor dies with the front (`PR_SET_PDEATHSIG` SIGKILL): a
//!   SIGKILLed vetto takes its session with it, as before there was a front. That is disarmed
//!   just before the status is written.
//!
//! Who can write the status: only the supervisor. The pipe's write end is close-on-exec, so
//! the command's exec closes it; the processes cloned from the supervisor before that close it
//! with everything they do not need (PID 1 in `vetto_hooks::init`, FS-ONLY's sandbox process
//! before its exec), and nothing else is forked with it. The front holds only the read end.
//!
//! If the fork (or the front's pipe or signalfd) fails, vetto runs in one process, as it did
//! before the front.

use std::io::Write;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use nix::sys::signal::{SigSet, Signal};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The signals the front relays to the supervisor (the supervisor's own set, less SIGWINCH
/// and SIGCHLD, which are its own).
const RELAYED: &[libc::c_int] = &[libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT];

/// The write end of the status pipe, and a pidfd of the front (if the kernel gives one), in
/// the supervisor (taken by [`deliver`]).
static STATUS: Mutex<Option<(OwnedFd, Option<OwnedFd>)>> = Mutex::new(None);
/// The front's pid, in the supervisor (0: there is no front).
static FRONT: AtomicI32 = AtomicI32::new(0);

/// Fork the supervisor, and become the front: returns in the supervisor only (or in the
/// only process, if the fork failed). Call it first thing, while the process has one thread.
pub fn split() {
    // A caller that ignores SIGCHLD would have the kernel reap the supervisor unseen (and
    // the supervisor its own children): its default action, which is to do nothing, is put
    // back first, for both.
    // SAFETY: setting one signal's disposition while the process has one thread.
    unsafe { libc::signal(libc::SIGCHLD, libc::SIG_DFL) };
    let Ok(old) = SigSet::thread_get_mask() else {
        return;
    };
    let restore = || {
        let _ = old.thread_set_mask();
    };
    // Blocked, and the front's signalfd made, before the fork, so no signal finds the front
    // without it; the supervisor restores the mask at once (what was pending stays pending
    // for it) and closes its copy.
    let handled: Vec<libc::c_int> = RELAYED.iter().copied().chain([libc::SIGCHLD]).collect();
    let sfd = match vetto_hooks::process::block_into_signalfd(
        &handled,
        libc::SFD_CLOEXEC | libc::SFD_NONBLOCK,
    ) {
        Ok(fd) => fd,
        Err(_) => return restore(),
    };
    let mut fds = [-1; 2];
    // SAFETY: pipe2 fills the two-element array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return restore();
    }
    // SAFETY: two fresh descriptors, ours alone.
    let (r, w) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    // SAFETY: getpid has no preconditions.
    let front = unsafe { libc::getpid() };
    // SAFETY: the process has one thread (main's first step), so the child inherits no lock
    // another thread held; both sides go on with Rust code of their own.
    match unsafe { libc::fork() } {
        -1 => restore(),
        0 => {
            restore();
            drop(r);
            drop(sfd);
            // SAFETY: integer-only prctl and getppid: die with the front; a front already
            // gone (before the prctl took) leaves nobody to run for.
            unsafe {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
                if libc::getppid() != front {
                    libc::_exit(128 + libc::SIGKILL);
                }
            }
            FRONT.store(front, Ordering::Relaxed);
            // The front's pid: our parent, checked alive above.
            let pidfd = vetto_hooks::process::pidfd_open(front, 0).ok();
            if let Ok(mut s) = STATUS.lock() {
                *s = Some((w, pidfd));
            }
        }
        child => {
            drop(w);
            relay(child, r, sfd)
        }
    }
}

/// The front's life: wait for the status (or the supervisor's end), relaying signals.
fn relay(child: libc::pid_t, status: OwnedFd, sfd: OwnedFd) -> ! {
    loop {
        let mut fds = [
            libc::pollfd {
                fd: status.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: sfd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        // SAFETY: polling our own array.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), 2, -1) };
        if n < 0 {
            continue;
        }
        if fds[0].revents != 0 {
            let mut b = [0u8; 1];
            // SAFETY: reading at most one byte into our buffer.
            match unsafe { libc::read(status.as_raw_fd(), b.as_mut_ptr().cast(), 1) } {
                // SAFETY: leaving with the status; the front has nothing to tear down.
                1 => unsafe { libc::_exit(i32::from(b[0])) },
                0 => break,
                _ if std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) => {}
                _ => break,
            }
        }
        if fds[1].revents != 0 {
            drain_signals(child, sfd.as_raw_fd());
        }
    }
    // No status: the supervisor's own end tells.
    let mut st = 0;
    loop {
        // SAFETY: waiting for our own child.
        let r = unsafe { libc::waitpid(child, &mut st, 0) };
        if r == child {
            end_as(st);
        }
        if std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            // SAFETY: leaving; nothing to tear down.
            unsafe { libc::_exit(125) };
        }
    }
}

/// Read what the signalfd holds: relay what was sent to the front, and end as the supervisor
/// did if it has exited.
fn drain_signals(child: libc::pid_t, sfd: RawFd) {
    loop {
        // SAFETY: signalfd_siginfo is plain data.
        let mut info: libc::signalfd_siginfo = unsafe { std::mem::zeroed() };
        let want = std::mem::size_of::<libc::signalfd_siginfo>();
        // SAFETY: reading one siginfo into our struct (the signalfd is non-blocking).
        let r = unsafe { libc::read(sfd, (&mut info as *mut libc::signalfd_siginfo).cast(), want) };
        if r as usize != want {
            return;
        }
        let sig = info.ssi_signo as libc::c_int;
        if sig == libc::SIGCHLD {
            let mut st = 0;
            // SAFETY: polling our own child's state.
            if unsafe { libc::waitpid(child, &mut st, libc::WNOHANG) } == child {
                end_as(st);
            }
        } else if info.ssi_code != libc::SI_KERNEL {
            // The sender's pid goes with it, for the supervisor to tell a signal sent to the
            // whole group (which it got too) from one sent to the front alone.
            let value = libc::sigval {
                sival_ptr: info.ssi_pid as usize as *mut libc::c_void,
            };
            // SAFETY: a signal to our own child.
            unsafe { libc::sigqueue(child, sig, value) };
        }
    }
}

/// Leave as the supervisor did: its exit code, or its signal.
fn end_as(st: libc::c_int) -> ! {
    if libc::WIFSIGNALED(st) {
        let sig = libc::WTERMSIG(st);
        if let Ok(s) = Signal::try_from(sig) {
            let _ = SigSet::from(s).thread_unblock();
        }
        // SAFETY: integer-only calls on this process: no core of the front (the supervisor's
        // was its own), the signal's default action (unblocked above), raised.
        unsafe {
            let none = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            libc::setrlimit(libc::RLIMIT_CORE, &none);
            libc::signal(sig, libc::SIG_DFL);
            libc::kill(libc::getpid(), sig);
            libc::_exit(128 + sig);
        }
    }
    // SAFETY: leaving with the supervisor's code; nothing to tear down.
    unsafe { libc::_exit(libc::WEXITSTATUS(st)) }
}

/// In the supervisor: hand the command's exit code to the front, which exits with it. Its
/// stdin, stdout and stderr are pointed at `/dev/null` first (flushed), so whatever the
/// supervisor still does is not waited for by a reader of its output, and it must have
/// printed everything it has to say. Returns false if there is no front (or it is gone).
pub fn deliver(code: u8) -> bool {
    let Some((fd, pidfd)) = STATUS.lock().ok().and_then(|mut s| s.take()) else {
        return false;
    };
    let _ = std::io::stdout().flush();
    let _ = std::io::stderr().flush();
    // Best effort: a descriptor left as it was still holds the caller's pipe open, nothing
    // more.
    let _ = vetto_hooks::process::null_over(&[0, 1, 2]);
    // SAFETY: an integer-only prctl: the death signal disarmed (the front is about to exit,
    // on purpose).
    unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, 0, 0, 0, 0) };
    // SAFETY: writing one byte from our buffer to our own pipe.
    let n = unsafe { libc::write(fd.as_raw_fd(), [code].as_ptr().cast(), 1) };
    if n != 1 {
        return false;
    }
    // The teardown that follows (PID 1's end with its namespaces, the session directory) is
    // kernel work that held up the front's own exit when it ran at once, on two CPUs: it
    // waits until the front has exited (its pidfd polls readable), for up to 50 ms.
    if let Some(p) = pidfd {
        let mut pfd = libc::pollfd {
            fd: p.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: polling one pollfd we own.
        unsafe { libc::poll(&mut pfd, 1, FRONT_EXIT_WAIT_MS) };
    }
    true
}

/// How long [`deliver`] waits for the front to exit before the supervisor's teardown goes on.
const FRONT_EXIT_WAIT_MS: libc::c_int = 50;

/// How long a signal is remembered for [`fresh`].
const SAME_SIGNAL: Duration = Duration::from_millis(200);

/// Signals recently passed to the sandbox: (signal, original sender, when).
static RECENT: Mutex<Vec<(u32, u32, Instant)>> = Mutex::new(Vec::new());

/// In the supervisor: whether a signal it read should be passed to the sandbox. A signal sent
/// to vetto's whole process group reaches the supervisor twice, directly and relayed by the
/// front: the second copy (the same signal from the same sender within 200 ms) is not
/// passed on, so the command sees one Ctrl-C-like event, not two.
pub fn fresh(info: &libc::signalfd_siginfo) -> bool {
    let front = FRONT.load(Ordering::Relaxed);
    if front == 0 || info.ssi_code == libc::SI_KERNEL {
        return true;
    }
    let relayed = info.ssi_pid as i32 == front && info.ssi_code == libc::SI_QUEUE;
    let sender = match relayed {
        true => info.ssi_ptr as u32,
        false => info.ssi_pid,
    };
    remember(info.ssi_signo, sender, Instant::now())
}

/// Record (signal, sender) at `now`; false if it was seen within [`SAME_SIGNAL`].
fn remember(sig: u32, sender: u32, now: Instant) -> bool {
    let Ok(mut recent) = RECENT.lock() else {
        return true;
    };
    recent.retain(|(_, _, at)| now.saturating_duration_since(*at) < SAME_SIGNAL);
    if recent.iter().any(|(s, p, _)| *s == sig && *p == sender) {
        return false;
    }
    recent.push((sig, sender, now));
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_copy_of_a_signal_is_dropped_within_the_window_only() {
        let t = Instant::now();
        assert!(remember(15, 4242, t));
        assert!(!remember(15, 4242, t + Duration::from_millis(5)));
        // Another sender, or another signal: passed on.
        assert!(remember(15, 4243, t + Duration::from_millis(6)));
        assert!(remember(2, 4242, t + Duration::from_millis(7)));
        // Later than the window: a new event.
        assert!(remember(
            15,
            4242,
            t + SAME_SIGNAL + Duration::from_millis(10)
        ));
    }
}
