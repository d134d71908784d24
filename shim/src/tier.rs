//! Which Linux tier `vetto run` can establish here (FULL or FS-ONLY), found by trying, not by
//! reading settings: a probe child creates the namespaces FULL needs and uses a capability in
//! them, which is what fails under a `max_user_namespaces` of 0, a seccomp filter that refuses
//! `unshare`, or Ubuntu's `apparmor_restrict_unprivileged_userns` (there `unshare` succeeds but
//! the new namespace carries no capabilities).

use std::fmt;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use vetto_bundle::fsonly;
use vetto_bundle::policy::Tier;
use vetto_hooks::process::ChildStack;

/// `--tier`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum TierChoice {
    /// FULL where a probe sandbox can be created, else FS-ONLY where its controls work, else
    /// refuse.
    Auto,
    /// FULL or nothing.
    Full,
    /// FS-ONLY even where FULL would work.
    FsOnly,
}

/// Why FULL cannot be set up here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NoFull {
    /// The step that failed.
    pub step: &'static str,
    /// Its errno.
    pub errno: i32,
}

impl fmt::Display for NoFull {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} failed: {}",
            self.step,
            std::io::Error::from_raw_os_error(self.errno)
        )
    }
}

impl NoFull {
    /// How to make FULL possible, as far as this host tells.
    pub fn fix(&self) -> String {
        let read = |p: &str| {
            std::fs::read_to_string(p)
                .ok()
                .map(|s| s.trim().to_string())
        };
        let mut hints = vec![];
        if read("/proc/sys/kernel/apparmor_restrict_unprivileged_userns").as_deref() == Some("1") {
            hints.push("AppArmor restricts unprivileged user namespaces here (kernel.apparmor_restrict_unprivileged_userns=1): install vetto's AppArmor profile (`make install` or the Debian package put it in /etc/apparmor.d/vetto; load it with `apparmor_parser -r /etc/apparmor.d/vetto`)".to_string());
        }
        if read("/proc/sys/user/max_user_namespaces").as_deref() == Some("0") {
            hints.push("user namespaces are disabled (user.max_user_namespaces=0): `sysctl -w user.max_user_namespaces=15000`".to_string());
        }
        if read("/proc/sys/kernel/unprivileged_userns_clone").as_deref() == Some("0") {
            hints.push("unprivileged user namespaces are disabled (kernel.unprivileged_userns_clone=0): `sysctl -w kernel.unprivileged_userns_clone=1`".to_string());
        }
        if hints.is_empty() {
            hints.push("user namespaces are refused here (a container or a seccomp filter around vetto may forbid them): run vetto where it may create them, or allow `unshare(CLONE_NEWUSER)`".to_string());
        }
        hints.join("; ")
    }
}

const STEPS: &[&str] = &[
    "unshare(user, mount, PID, IPC, UTS namespaces)",
    "using a capability in the new user namespace (making / private)",
];

/// Try to create FULL's namespaces in a child and use a capability there.
pub fn probe_full() -> Result<(), NoFull> {
    Probe::spawn().verdict()
}

/// The probe child (`vetto doctor`; `vetto run` asks the helper that makes FULL's namespaces
/// instead, `nsstage.rs`, whose steps are the same and more). The child reports success on a
/// pipe before it exits: its exit (tearing its namespaces down) takes longer than the probe
/// itself and is not waited for then. It is reaped when the `Probe` is dropped, through a pidfd (a pid some
/// other wait reaped and the kernel reused is never waited for).
///
/// The child shares the supervisor's memory (`CLONE_VM`) instead of being a fork: a fork
/// copied the supervisor's page tables and made every page the supervisor wrote while the
/// child lived a copy-on-write fault, ~0.15 ms of the session's start. The child is not a
/// thread (it has its own thread group, descriptor table and signal state, so the
/// supervisor stays single-threaded for libcontainer and `unshare(CLONE_NEWUSER)`), and it
/// runs on a stack of its own, making only system calls that return their error instead of
/// storing it in `errno` (which it would share with the supervisor's thread): see
/// [`probe_child`].
pub struct Probe {
    pid: libc::pid_t,
    pidfd: Option<OwnedFd>,
    report: Option<OwnedFd>,
    failed: Option<NoFull>,
    /// The child's stack: unmapped once the child is reaped, never before.
    stack: Option<ChildStack>,
}

/// The probe child's usable stack: its calls need a few hundred bytes; the pages are only
/// touched as used.
const STACK_SIZE: usize = 64 * 1024;

/// Clone the probe child, reporting on `report` (a pipe's write end): its pid and the stack
/// it runs on, which must stay mapped until it has exited.
fn clone_probe(report: RawFd) -> Result<(libc::pid_t, ChildStack), NoFull> {
    let errno = || std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
    let Ok(stack) = ChildStack::new(STACK_SIZE) else {
        return Err(NoFull {
            step: "mmap",
            errno: errno(),
        });
    };
    // SAFETY: the child runs `probe_entry` on `stack`, which the caller keeps mapped until the
    // child has exited. It shares this process's memory but uses none of it besides its
    // stack, its argument (the descriptor's number, by value) and the program's code and
    // constants; it allocates nothing and touches no thread-local (errno included: see
    // `probe_child`). Without CLONE_FILES and CLONE_SIGHAND it has its own copies of the
    // descriptor table and signal dispositions; SIGCHLD tells this process of its exit, as a
    // fork's would.
    let pid = unsafe {
        libc::clone(
            probe_entry,
            stack.top(),
            libc::CLONE_VM | libc::SIGCHLD,
            report as usize as *mut libc::c_void,
        )
    };
    if pid < 0 {
        return Err(NoFull {
            step: "clone",
            errno: errno(),
        });
    }
    Ok((pid, stack))
}

impl Probe {
    /// Fork the probe child.
    pub fn spawn() -> Probe {
        let errno = || std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
        let failed = |no| Probe {
            pid: -1,
            pidfd: None,
            report: None,
            failed: Some(no),
            stack: None,
        };
        let mut fds = [-1; 2];
        // SAFETY: pipe2 fills the two-element array.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return failed(NoFull {
                step: "pipe",
                errno: errno(),
            });
        }
        // SAFETY: two fresh descriptors, ours alone.
        let (r, w) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        let (pid, stack) = match clone_probe(w.as_raw_fd()) {
            Ok(c) => c,
            Err(no) => return failed(no),
        };
        drop(w);
        Probe {
            pid,
            // Our own unreaped child: its pid cannot have been reused.
            pidfd: vetto_hooks::process::pidfd_open(pid, 0).ok(),
            report: Some(r),
            failed: None,
            stack: Some(stack),
        }
    }

    /// The verdict: the child's report, or on none its exit status's failed step and errno.
    pub fn verdict(&mut self) -> Result<(), NoFull> {
        if let Some(f) = &self.failed {
            return Err(f.clone());
        }
        let Some(r) = self.report.take() else {
            return Ok(());
        };
        let mut b = [0u8; 1];
        let n = loop {
            // SAFETY: reading one byte into a local buffer from a descriptor we own.
            let n = unsafe { libc::read(r.as_raw_fd(), b.as_mut_ptr().cast(), 1) };
            if n >= 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
                break n;
            }
        };
        // One byte: 1 when FULL's namespaces work, else the failed step and errno (as the
        // exit status says them: `step * 64 + errno`).
        if n == 1 && b[0] == 1 {
            return Ok(());
        }
        if n == 1 {
            let no = decode(i32::from(b[0]));
            self.failed = Some(no.clone());
            return Err(no);
        }
        if self.pid <= 0 {
            // No child to ask (reaped already) and no verdict: not a reason to run weaker,
            // nor to run at all.
            let no = NoFull {
                step: "the probe (it ended without a verdict)",
                errno: libc::EIO,
            };
            self.failed = Some(no.clone());
            return Err(no);
        }
        let status = self.reap().unwrap_or(0);
        let code = match libc::WIFEXITED(status) {
            true => libc::WEXITSTATUS(status),
            false => 0,
        };
        let no = decode(code);
        self.failed = Some(no.clone());
        Err(no)
    }

    /// Wait for the child's exit; its status.
    fn reap(&mut self) -> Option<i32> {
        if self.pid <= 0 {
            return None;
        }
        let pid = self.pid;
        let mut status = 0;
        loop {
            let r = match &self.pidfd {
                Some(fd) => {
                    // SAFETY: an all-zero siginfo is valid for the kernel to fill.
                    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
                    // SAFETY: waitid on our pidfd (P_PIDFD = 3), with a local siginfo.
                    let r = unsafe {
                        libc::waitid(3, fd.as_raw_fd() as libc::id_t, &mut info, libc::WEXITED)
                    };
                    if r == 0 {
                        // SAFETY: filled by a successful waitid for an exited child.
                        let (code, si_code) = unsafe { (info.si_status(), info.si_code) };
                        status = match si_code {
                            libc::CLD_EXITED => (code & 0xff) << 8,
                            _ => code & 0x7f,
                        };
                    }
                    r
                }
                // SAFETY: waiting for the child we forked (no pidfd: kernels before 5.3).
                None => unsafe { libc::waitpid(pid, &mut status, 0) }.min(0),
            };
            if r == 0 {
                // Reaped: forgotten, so nothing waits for it (or a reuse of its pid) again.
                self.pid = -1;
                return Some(status);
            }
            if std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
                return None;
            }
        }
    }
}

impl Drop for Probe {
    fn drop(&mut self) {
        let _ = self.reap();
        if self.pid > 0 {
            // Not reaped (the wait failed): the child may still run on its stack, which is
            // left mapped rather than handed back for reuse under it.
            std::mem::forget(self.stack.take());
        }
    }
}

/// The failed step and errno of a probe's code (`step * 64 + errno`).
fn decode(code: i32) -> NoFull {
    let step = (code / 64) as usize;
    NoFull {
        step: STEPS.get(step.wrapping_sub(1)).copied().unwrap_or("probe"),
        errno: code % 64,
    }
}

/// `clone`'s entry point for the probe child: its argument is the report descriptor's number.
extern "C" fn probe_entry(report: *mut libc::c_void) -> libc::c_int {
    probe_child(report as usize as RawFd)
}

/// The probe child's whole life: one byte on `report`, 1 when FULL's namespaces work, else
/// the failed step and errno (`step * 64 + errno`, errno at most 63), which is also its exit
/// status.
///
/// It shares its parent's memory (the supervisor's, or the front's), so it calls the kernel
/// through rustix, whose Linux backend returns each call's error instead of storing it in
/// `errno`, a thread-local this child would share with its parent's thread (libc's wrappers
/// would write it there while the parent may be reading its own). It allocates nothing and cannot panic; `clone`
/// makes its return value the exit status.
fn probe_child(report: RawFd) -> libc::c_int {
    let code = probe_namespaces();
    // SAFETY: `report` is the pipe's write end, open in this child's descriptor table (a
    // copy of its parent's, taken at the clone) until the child exits.
    let report = unsafe { std::os::fd::BorrowedFd::borrow_raw(report) };
    // The verdict on the pipe (for a parent that cannot reap this child: the supervisor when
    // the front runs the probe), and as the exit status.
    let byte = match code {
        0 => 1,
        c => c as u8,
    };
    let _ = rustix::io::write(report, &[byte]);
    code
}

/// FULL's namespaces and a capability used in them: 0, or the failed step and errno as
/// `step * 64 + errno` (errno at most 63).
fn probe_namespaces() -> libc::c_int {
    use rustix::mount::MountPropagationFlags;
    use rustix::thread::UnshareFlags;
    let fail = |step: libc::c_int, e: rustix::io::Errno| step * 64 + e.raw_os_error().min(63);
    // Not the network namespace: making and tearing one down costs more than the rest
    // together (~0.6 ms here), and what refuses user namespaces refuses them all; a host
    // that refuses only that one fails FULL's setup later, with its error (no fallback).
    let flags = UnshareFlags::NEWUSER
        | UnshareFlags::NEWNS
        | UnshareFlags::NEWPID
        | UnshareFlags::NEWIPC
        | UnshareFlags::NEWUTS;
    // SAFETY: what these flags unshare besides the namespaces (the filesystem context that
    // CLONE_NEWUSER and CLONE_NEWNS imply) is this child's own copy already: it was cloned
    // without CLONE_FS, CLONE_FILES or CLONE_SIGHAND.
    if let Err(e) = unsafe { rustix::thread::unshare_unsafe(flags) } {
        return fail(1, e);
    }
    // Changes propagation in the child's own mount namespace.
    let private = MountPropagationFlags::REC | MountPropagationFlags::PRIVATE;
    if let Err(e) = rustix::mount::mount_change(c"/", private) {
        return fail(2, e);
    }
    0
}

/// Why FS-ONLY cannot be set up here, if it cannot.
pub fn fs_only_missing(landlock_abi: Option<u32>) -> Option<String> {
    match landlock_abi {
        None => Some("Landlock is not available on this kernel (it must be built in and listed in the `lsm=` boot parameter)".into()),
        Some(a) if a < fsonly::MIN_ABI => Some(format!(
            "Landlock ABI {a} is older than the {} FS-ONLY needs to scope signals and abstract UNIX sockets to the sandbox (Linux 6.12 or later)",
            fsonly::MIN_ABI
        )),
        Some(_) => None,
    }
}

/// Whether the probe's failure says the host refuses user namespaces (a setting, a filter,
/// a security module), as opposed to running out of them or of memory for a moment.
fn refused_by_policy(no: &NoFull) -> bool {
    match no.errno {
        libc::EPERM | libc::EACCES | libc::EINVAL | libc::ENOSYS => true,
        // `user.max_user_namespaces=0` answers ENOSPC too: a setting, not a quota.
        libc::ENOSPC => std::fs::read_to_string("/proc/sys/user/max_user_namespaces")
            .is_ok_and(|v| v.trim() == "0"),
        _ => false,
    }
}

/// The tier to run in, or why none will do.
pub fn select(
    choice: TierChoice,
    require: Tier,
    landlock_abi: Option<u32>,
    probe: Option<Result<(), NoFull>>,
) -> Result<Tier, String> {
    let fs_only = || match fs_only_missing(landlock_abi) {
        None => Ok(Tier::FsOnly),
        Some(why) => Err(format!(
            "tier FS-ONLY cannot be established: {why}; the command does not run"
        )),
    };
    let full = || -> Result<Tier, String> {
        if landlock_abi.is_none() {
            return Err("tier FULL cannot be established: Landlock is not available on this kernel; the command does not run (see `vetto doctor`)".into());
        }
        Ok(Tier::Full)
    };
    match choice {
        TierChoice::Full => full(),
        TierChoice::FsOnly if require == Tier::Full => Err(
            "--tier fs-only: the policy requires the FULL tier (sandbox.require = \"full\"); the command does not run".into(),
        ),
        TierChoice::FsOnly => fs_only(),
        TierChoice::Auto => match probe.unwrap_or_else(probe_full) {
            Ok(()) => full(),
            // Out of user namespaces (the quota, not a setting) or of memory: a transient
            // failure is not a reason to run weaker.
            Err(no) if !refused_by_policy(&no) => Err(format!(
                "tier FULL could not be set up just now ({no}), and this is not a host where user namespaces are disabled, so vetto does not fall back to FS-ONLY; the command does not run (try again, or choose --tier fs-only)"
            )),
            Err(no) if require == Tier::Full => Err(format!(
                "tier FULL cannot be established ({no}) and the policy requires it (sandbox.require = \"full\"); the command does not run. To enable it: {}",
                no.fix()
            )),
            Err(no) => fs_only().map_err(|e| {
                format!(
                    "{e}; nor can tier FULL ({no}). To enable FULL: {}",
                    no.fix()
                )
            }),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_probe_succeeds_where_namespaces_work() {
        // This machine runs FULL (the end-to-end tests depend on it).
        probe_full().expect("FULL's namespaces can be created here");
    }

    #[test]
    fn only_a_refusal_falls_back_not_a_transient_failure() {
        let no = |errno| NoFull { step: "x", errno };
        assert!(refused_by_policy(&no(libc::EPERM)));
        assert!(refused_by_policy(&no(libc::EACCES)));
        assert!(!refused_by_policy(&no(libc::ENOMEM)));
        assert!(!refused_by_policy(&no(libc::EAGAIN)));
        // ENOSPC is the quota here (this machine allows user namespaces), not a setting.
        let setting = std::fs::read_to_string("/proc/sys/user/max_user_namespaces")
            .is_ok_and(|v| v.trim() == "0");
        assert_eq!(refused_by_policy(&no(libc::ENOSPC)), setting);
    }

    #[test]
    fn a_policy_that_requires_full_refuses_a_forced_fs_only() {
        let e = select(TierChoice::FsOnly, Tier::Full, Some(7), None).expect_err("refused");
        assert!(e.contains("sandbox.require"), "{e}");
    }

    #[test]
    fn fs_only_needs_landlock_with_scopes() {
        assert!(select(TierChoice::FsOnly, Tier::FsOnly, None, None)
            .expect_err("no landlock")
            .contains("Landlock is not available"));
        assert!(select(TierChoice::FsOnly, Tier::FsOnly, Some(5), None)
            .expect_err("abi 5")
            .contains("ABI 5"));
        assert_eq!(
            select(TierChoice::FsOnly, Tier::FsOnly, Some(6), None),
            Ok(Tier::FsOnly)
        );
    }
}
