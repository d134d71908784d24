//! The FULL tier's user, network and IPC namespaces, made ahead of time on the other CPU.
//!
//! Without it, a session makes them one after the other on its critical path: the supervisor
//! its own user namespace (U1, 0 → the caller), then libcontainer's
//! intermediate process the sandbox's (U2, 0 → 0 of U1) with a round trip to the supervisor
//! for its maps, then the container's init the network namespace (`copy_net_ns`: ~0.35 ms
//! here, most of it registering `lo` and its sysctls) and the IPC namespace. None of that
//! depends on the policy. So the supervisor clones a helper first thing, while it builds the
//! policy, and the helper makes the same namespaces, with the same maps, in the same nesting
//! (and first tries, in a mount namespace of its own, what the supervisor does in U1: with
//! `--tier auto` its outcome is the tier probe's verdict, `tier.rs`):
//!
//! ```text
//!   host user ns ── U1 (0 → caller; setgroups deny) ── U2 (0 → 0 of U1) ── net, IPC
//! ```
//!
//! and leaves their descriptors in the supervisor's descriptor table (it shares it). The
//! supervisor then joins U1 (`setns`, instead of making it: [`Namespaces::enter_outer`]),
//! and libcontainer joins U2, the network and the IPC namespace by path
//! (`/proc/self/fd/N`, the supervisor's descriptors, inherited by its clones) instead of
//! unsharing them. The mount, PID, UTS and cgroup namespaces are still libcontainer's, made
//! where they were. What the sandbox ends up in is what it was before: the same maps, the
//! same owners (the network and IPC namespaces are owned by U2, so the sandbox's root holds
//! `CAP_NET_ADMIN` over its own network namespace until the capability drop, as before), a
//! network namespace with only `lo` (which the init brings up, as before).
//!
//! Checked, not trusted: before anything joins them, the supervisor asks the kernel what
//! each descriptor is (`NS_GET_NSTYPE`), that U2's parent is U1 and U1's parent is its own
//! user namespace (`NS_GET_PARENT`), and that the network and IPC namespaces are U2's
//! (`NS_GET_USERNS`) and are not its own. The init checks again, after joining, that its
//! network namespace is the one checked here (`Hardening::netns`), so a descriptor number
//! that meant something else by the time libcontainer opened it fails the start instead of
//! running the sandbox in another network namespace.
//!
//! The helper is cloned like the tier probe (`tier.rs`): `CLONE_VM` on a stack of its own,
//! calling the kernel only through rustix (no `errno`, no allocation), with `CLONE_FILES` so
//! that what it opens is the supervisor's. It ends as soon as it has reported, and is reaped
//! before the supervisor joins U1 (the kernel refuses `setns` into a user namespace while
//! another process shares the caller's memory). If it fails, FULL fails closed with the
//! step and the error: the command does not run.

use std::ffi::CStr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::MetadataExt;

use vetto_hooks::process::ChildStack;

/// `ioctl_ns(2)` requests.
const NS_GET_USERNS: libc::c_ulong = 0xb701;
const NS_GET_PARENT: libc::c_ulong = 0xb702;
const NS_GET_NSTYPE: libc::c_ulong = 0xb703;

/// The helper's stack: its calls need a few hundred bytes.
const STACK_SIZE: usize = 64 * 1024;

/// What the helper did, step by step (its report names the step that failed).
const STEPS: &[&str] = &[
    "unshare(user namespace) for the supervisor",
    "writing /proc/self/setgroups",
    "writing the supervisor namespace's uid_map",
    "writing the supervisor namespace's gid_map",
    "opening the supervisor's user namespace",
    "using a capability in the new user namespace (a mount namespace, / made private)",
    "unshare(user namespace) for the sandbox",
    "writing the sandbox namespace's uid_map",
    "writing the sandbox namespace's gid_map",
    "unshare(network, IPC namespaces)",
    "opening the sandbox's user namespace",
    "opening the sandbox's network namespace",
    "opening the sandbox's IPC namespace",
];

/// Why the namespaces could not be made or are not what they must be.
#[derive(Debug, thiserror::Error)]
pub enum NsStageError {
    #[error("namespaces: {step} failed: {source}")]
    Step {
        step: &'static str,
        source: std::io::Error,
    },
    #[error("namespaces: the helper that makes them ended without a report")]
    NoReport,
    #[error("namespaces: {0}")]
    Check(String),
}

impl NsStageError {
    /// As the tier choice reads a probe's failure (`tier::select`): a refusal (EPERM from
    /// the kernel, a filter or a security module) may fall back to FS-ONLY; anything else
    /// (no report, a check that failed) is EIO, which does not.
    pub fn as_no_full(&self) -> crate::tier::NoFull {
        match self {
            NsStageError::Step { step, source } => crate::tier::NoFull {
                step,
                errno: source.raw_os_error().unwrap_or(libc::EIO),
            },
            NsStageError::NoReport => crate::tier::NoFull {
                step: "the namespace helper (it ended without a report)",
                errno: libc::EIO,
            },
            NsStageError::Check(_) => crate::tier::NoFull {
                step: "checking the namespaces made for the sandbox",
                errno: libc::EIO,
            },
        }
    }
}

/// The map lines the helper writes, made before it is cloned (it allocates nothing).
struct Maps {
    outer_uid: Vec<u8>,
    outer_gid: Vec<u8>,
}

/// The step of a report that never came.
const NO_REPORT: u8 = u8::MAX;

/// Where the helper reports: its step (0: all done), the errno of a failed one, and the four
/// descriptors it opened (-1 where it did not get that far).
#[repr(C)]
#[derive(Clone, Copy)]
struct Report {
    step: u8,
    errno: u8,
    fds: [i32; 4],
}

/// Everything the helper reads: lives in the supervisor until the helper is reaped.
struct Args {
    report: RawFd,
    maps: Maps,
}

/// The helper, running; [`Stage::collect`] takes its namespaces.
pub struct Stage {
    pid: libc::pid_t,
    read: OwnedFd,
    /// Mapped until the helper has exited (never unmapped under a running helper).
    stack: Option<ChildStack>,
    /// Read by the helper until it has exited (leaked, never freed, under a running one).
    args: Option<Box<Args>>,
}

/// The namespaces, checked: the supervisor's user namespace (U1) and the sandbox's user,
/// network and IPC namespaces, as descriptors of the supervisor (close-on-exec).
#[derive(Debug)]
pub struct Namespaces {
    outer: OwnedFd,
    user: OwnedFd,
    net: OwnedFd,
    ipc: OwnedFd,
    /// The network namespace's identity (nsfs device and inode), for the init's check.
    net_id: (u64, u64),
}

fn io_step(step: usize, errno: i32) -> NsStageError {
    NsStageError::Step {
        step: STEPS.get(step.wrapping_sub(1)).copied().unwrap_or("helper"),
        source: std::io::Error::from_raw_os_error(errno),
    }
}

impl Stage {
    /// Clone the helper, which makes the namespaces for a caller of `uid`:`gid`.
    pub fn spawn(uid: u32, gid: u32) -> Result<Stage, NsStageError> {
        let setup = |what: &'static str| NsStageError::Step {
            step: what,
            source: std::io::Error::last_os_error(),
        };
        let mut fds = [-1; 2];
        // SAFETY: pipe2 fills the two-element array.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Err(setup("pipe"));
        }
        // SAFETY: two fresh descriptors, ours alone.
        let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        // SAFETY: setting O_NONBLOCK on our own descriptor.
        unsafe { libc::fcntl(read.as_raw_fd(), libc::F_SETFL, libc::O_NONBLOCK) };
        let stack = ChildStack::new(STACK_SIZE).map_err(|source| NsStageError::Step {
            step: "mmap",
            source,
        })?;
        let args = Box::new(Args {
            report: write.as_raw_fd(),
            maps: Maps {
                outer_uid: format!("0 {uid} 1\n").into_bytes(),
                outer_gid: format!("0 {gid} 1\n").into_bytes(),
            },
        });
        let arg: *const Args = &*args;
        let cpus = crate::cpus::Cpus::now();
        // SAFETY: the child runs `helper_entry` on `stack`, which is kept mapped until the
        // child has been reaped (`collect`, or `Drop`, which leaks it if the wait fails). It
        // shares this process's memory (CLONE_VM) but reads only `args`, boxed and left
        // untouched until it is reaped, and writes only its stack and std's CPU-feature cache
        // (atomics, filled the same by whoever comes first); it allocates nothing, touches no
        // thread-local, and calls the kernel through rustix (no errno). CLONE_FILES: what it opens is ours, and
        // it closes only the map files it opened itself. Without CLONE_FS or CLONE_SIGHAND
        // it may unshare a user namespace, and SIGCHLD tells us of its exit as a fork's
        // would.
        let pid = unsafe {
            libc::clone(
                helper_entry,
                stack.top(),
                libc::CLONE_VM | libc::CLONE_FILES | libc::SIGCHLD,
                arg as *mut libc::c_void,
            )
        };
        if pid < 0 {
            return Err(setup("clone"));
        }
        // Off the supervisor's CPU, as the audit writer is (cpus.rs): the supervisor goes on
        // building the policy while the helper works.
        if let Some(c) = cpus {
            c.keep_off(pid);
        }
        // Our copy of the write end: the helper holds its own (the shared table's) until it
        // exits; closing it here would close the helper's too, so it is closed once the
        // helper has been reaped (with `args`).
        std::mem::forget(write);
        Ok(Stage {
            pid,
            read,
            stack: Some(stack),
            args: Some(args),
        })
    }

    /// Wait for the helper's report, reap it, and check what it made.
    pub fn collect(mut self) -> Result<Namespaces, NsStageError> {
        let waiting = std::time::Instant::now();
        let r = self.finish();
        tracing::info!(
            waited_ms = format!("{:.2}", waiting.elapsed().as_secs_f64() * 1e3),
            "namespaces made ahead"
        );
        // Every descriptor it reported is ours now (closed on any return below but success).
        let owned: Vec<Option<OwnedFd>> = r
            .fds
            .iter()
            // SAFETY: the helper opened these in our (shared) table and has exited; nothing
            // else here knows their numbers, and `finish` hands them out once.
            .map(|&fd| (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd) }))
            .collect();
        match r.step {
            0 => {}
            NO_REPORT => return Err(NsStageError::NoReport),
            step => return Err(io_step(usize::from(step), i32::from(r.errno))),
        }
        let mut it = owned.into_iter();
        let mut next = || it.next().flatten().ok_or(NsStageError::NoReport);
        let (outer, user, net, ipc) = (next()?, next()?, next()?, next()?);
        let net_id = check(&outer, &user, &net, &ipc)?;
        Ok(Namespaces {
            outer,
            user,
            net,
            ipc,
            net_id,
        })
    }

    /// The helper's report (step [`NO_REPORT`] if it ended without one), once it has been
    /// reaped; afterwards, a report of nothing.
    fn finish(&mut self) -> Report {
        let mut r = Report {
            step: NO_REPORT,
            errno: 0,
            fds: [-1; 4],
        };
        if self.pid <= 0 {
            return r;
        }
        let mut buf = [0u8; std::mem::size_of::<Report>()];
        let mut got = 0;
        // The report is one write (under PIPE_BUF, so whole) just before the helper's exit;
        // a helper that ended without one (killed) is seen through its pidfd, as the pipe's
        // write end stays open in the table it shared with us.
        let pidfd = vetto_hooks::process::pidfd_open(self.pid, 0).ok();
        let mut exited = false;
        while got < buf.len() {
            let mut p = [
                libc::pollfd {
                    fd: self.read.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                },
                libc::pollfd {
                    fd: pidfd.as_ref().map_or(-1, |f| f.as_raw_fd()),
                    events: libc::POLLIN,
                    revents: 0,
                },
            ];
            if !exited {
                // SAFETY: two valid pollfds (a negative fd is ignored), no timeout.
                let n = unsafe { libc::poll(p.as_mut_ptr(), 2, -1) };
                if n < 0 {
                    if std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                        continue;
                    }
                    break;
                }
                exited = p[1].revents != 0;
            }
            // SAFETY: reading into the rest of a local buffer from our (non-blocking) pipe.
            let n = unsafe {
                libc::read(
                    self.read.as_raw_fd(),
                    buf[got..].as_mut_ptr().cast(),
                    buf.len() - got,
                )
            };
            if n > 0 {
                got += n as usize;
                continue;
            }
            if exited || n == 0 {
                break;
            }
        }
        // Reaped before anything else: its descriptors are ours to keep or close only once
        // it no longer runs, and `setns` into U1 needs our memory unshared.
        self.reap();
        if got == buf.len() {
            // SAFETY: `Report` is plain integers, `repr(C)`; `buf` is exactly its size, and
            // read_unaligned has no alignment requirement.
            r = unsafe { std::ptr::read_unaligned(buf.as_ptr().cast()) };
        }
        r
    }

    fn reap(&mut self) {
        if self.pid <= 0 {
            return;
        }
        let mut status = 0;
        loop {
            // SAFETY: waiting for our own child.
            let r = unsafe { libc::waitpid(self.pid, &mut status, libc::__WALL) };
            if r == self.pid {
                self.pid = -1;
                // It has exited: its copy of the report's write end is gone with it; ours
                // (the same descriptor, in the table it shared) is closed now.
                if let Some(a) = &self.args {
                    // SAFETY: the write end we forgot in `spawn`, still open, ours alone.
                    drop(unsafe { OwnedFd::from_raw_fd(a.report) });
                }
                return;
            }
            if r < 0 && std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
                return;
            }
        }
    }
}

impl Drop for Stage {
    fn drop(&mut self) {
        // Not collected (the tier was not FULL, or set-up failed first): the helper is done
        // or nearly; its report is read so that what it opened in our table is closed.
        for fd in self.finish().fds {
            if fd >= 0 {
                // SAFETY: a descriptor the helper opened in our table and reported; nothing
                // else here knows it.
                drop(unsafe { OwnedFd::from_raw_fd(fd) });
            }
        }
        if self.pid > 0 {
            // Not reaped (the wait failed): it may still run on its stack and read its
            // arguments, which are left as they are.
            std::mem::forget(self.stack.take());
            std::mem::forget(self.args.take());
        }
    }
}

fn ns_id(fd: &OwnedFd) -> Result<(u64, u64), NsStageError> {
    // SAFETY: an all-zero stat is valid for the kernel to fill.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat of a descriptor we own into a local struct.
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
        return Err(NsStageError::Check(format!(
            "fstat of a namespace: {}",
            std::io::Error::last_os_error()
        )));
    }
    Ok((st.st_dev, st.st_ino))
}

fn ioctl_fd(fd: &OwnedFd, req: libc::c_ulong) -> Result<OwnedFd, NsStageError> {
    // SAFETY: an ioctl_ns(2) request that takes no argument and returns a new descriptor.
    let r = unsafe { libc::ioctl(fd.as_raw_fd(), req) };
    if r < 0 {
        return Err(NsStageError::Check(format!(
            "ioctl {req:#x} on a namespace: {}",
            std::io::Error::last_os_error()
        )));
    }
    // SAFETY: a new descriptor the kernel just returned, ours alone.
    Ok(unsafe { OwnedFd::from_raw_fd(r) })
}

/// The checks of the module doc; the network namespace's identity, for the init's check.
fn check(
    outer: &OwnedFd,
    user: &OwnedFd,
    net: &OwnedFd,
    ipc: &OwnedFd,
) -> Result<(u64, u64), NsStageError> {
    let kind = |fd: &OwnedFd, want: libc::c_int, what: &str| {
        // SAFETY: NS_GET_NSTYPE takes no argument and returns the type.
        let t = unsafe { libc::ioctl(fd.as_raw_fd(), NS_GET_NSTYPE) };
        match t == want {
            true => Ok(()),
            false => Err(NsStageError::Check(format!(
                "the {what} descriptor is not one (type {t:#x})"
            ))),
        }
    };
    kind(outer, libc::CLONE_NEWUSER, "supervisor's user namespace")?;
    kind(user, libc::CLONE_NEWUSER, "sandbox's user namespace")?;
    kind(net, libc::CLONE_NEWNET, "network namespace")?;
    kind(ipc, libc::CLONE_NEWIPC, "IPC namespace")?;
    let own = |p: &CStr| -> Result<(u64, u64), NsStageError> {
        let m = std::fs::metadata(p.to_str().unwrap_or_default())
            .map_err(|e| NsStageError::Check(format!("{}: {e}", p.to_string_lossy())))?;
        Ok((m.dev(), m.ino()))
    };
    let same = |a: (u64, u64), b: (u64, u64), what: &str| match a == b {
        true => Ok(()),
        false => Err(NsStageError::Check(what.to_string())),
    };
    let (outer_id, user_id, net_id) = (ns_id(outer)?, ns_id(user)?, ns_id(net)?);
    same(
        ns_id(&ioctl_fd(user, NS_GET_PARENT)?)?,
        outer_id,
        "the sandbox's user namespace is not a child of the supervisor's",
    )?;
    same(
        ns_id(&ioctl_fd(outer, NS_GET_PARENT)?)?,
        own(c"/proc/self/ns/user")?,
        "the supervisor's new user namespace is not a child of its own",
    )?;
    for (fd, id, what, mine) in [
        (net, net_id, "network", c"/proc/self/ns/net"),
        (ipc, ns_id(ipc)?, "IPC", c"/proc/self/ns/ipc"),
    ] {
        same(
            ns_id(&ioctl_fd(fd, NS_GET_USERNS)?)?,
            user_id,
            &format!("the {what} namespace is not owned by the sandbox's user namespace"),
        )?;
        if id == own(mine)? {
            return Err(NsStageError::Check(format!(
                "the {what} namespace is the supervisor's own"
            )));
        }
    }
    Ok(net_id)
}

impl Namespaces {
    /// Join U1 (the supervisor's user namespace); the caller then makes its mount namespace.
    /// The process must have one thread and share its memory with no other (the helper is
    /// reaped by then).
    pub fn enter_outer(&self) -> Result<(), NsStageError> {
        // SAFETY: setns with a descriptor we own and a flag; single-threaded here.
        if unsafe { libc::setns(self.outer.as_raw_fd(), libc::CLONE_NEWUSER) } != 0 {
            return Err(NsStageError::Step {
                step: "setns(the supervisor's user namespace)",
                source: std::io::Error::last_os_error(),
            });
        }
        Ok(())
    }

    /// The paths libcontainer joins the sandbox's user, network and IPC namespaces by: this
    /// process's descriptors, which its clones inherit.
    pub fn paths(&self) -> [(&'static str, String); 3] {
        let p = |fd: &OwnedFd| format!("/proc/self/fd/{}", fd.as_raw_fd());
        [
            ("user", p(&self.user)),
            ("network", p(&self.net)),
            ("ipc", p(&self.ipc)),
        ]
    }

    /// The network namespace's (nsfs device, inode).
    pub fn net_id(&self) -> (u64, u64) {
        self.net_id
    }
}

/// `clone`'s entry point for the helper: its argument is the `Args`.
extern "C" fn helper_entry(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the boxed `Args` that `Stage::spawn` passed, which stays alive and
    // unchanged until this child has been reaped.
    let args = unsafe { &*(arg as *const Args) };
    helper(args)
}

/// The helper's whole life: the namespaces, then one report on the pipe; its exit status is
/// the failed step (0: none).
fn helper(args: &Args) -> libc::c_int {
    // std's CPU-feature cache (a static of atomics, which its first query fills with `cpuid`)
    // filled here, on the other CPU: the supervisor and the container's init, forked from it
    // later, find it filled. A `cpuid` exits to the hypervisor on a VM (~9 µs each here), and
    // the init otherwise ran these on the critical path. No allocation, no system call. (A
    // feature the build already assumes, SSE2, is answered at compile time and fills nothing.)
    #[cfg(target_arch = "x86_64")]
    let _ = std::arch::is_x86_feature_detected!("avx2");
    let mut r = Report {
        step: 0,
        errno: 0,
        fds: [-1; 4],
    };
    if let Err((step, e)) = make(args, &mut r.fds) {
        r.step = step;
        r.errno = e.raw_os_error().clamp(0, 255) as u8;
    }
    // SAFETY: `report` is the pipe's write end, open in the shared table until we exit.
    let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(args.report) };
    // SAFETY: `Report` is plain integers; viewing it as bytes for the write.
    let bytes = unsafe {
        std::slice::from_raw_parts(
            (&r as *const Report).cast::<u8>(),
            std::mem::size_of::<Report>(),
        )
    };
    let _ = rustix::io::write(fd, bytes);
    libc::c_int::from(r.step)
}

fn make(args: &Args, fds: &mut [i32; 4]) -> Result<(), (u8, rustix::io::Errno)> {
    use rustix::fs::{Mode, OFlags};
    use rustix::thread::UnshareFlags;
    let write_file = |path: &CStr, data: &[u8], step: u8| {
        let fd = rustix::fs::open(path, OFlags::WRONLY | OFlags::CLOEXEC, Mode::empty())
            .map_err(|e| (step, e))?;
        rustix::io::write(&fd, data).map_err(|e| (step, e))?;
        Ok(())
    };
    let open_ns = |path: &CStr, step: u8| {
        rustix::fs::open(path, OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty())
            .map(|fd| {
                // Ours (the supervisor's) from here: it closes it.
                let raw = fd.as_raw_fd();
                std::mem::forget(fd);
                raw
            })
            .map_err(|e| (step, e))
    };
    // SAFETY: this child has its own filesystem context (no CLONE_FS) and thread group, so
    // what a new user namespace implies is its own; it shares memory and descriptors, which
    // unshare(CLONE_NEWUSER) does not touch.
    unsafe { rustix::thread::unshare_unsafe(UnshareFlags::NEWUSER) }.map_err(|e| (1, e))?;
    write_file(c"/proc/self/setgroups", b"deny", 2)?;
    write_file(c"/proc/self/uid_map", &args.maps.outer_uid, 3)?;
    write_file(c"/proc/self/gid_map", &args.maps.outer_gid, 4)?;
    fds[0] = open_ns(c"/proc/self/ns/user", 5)?;
    // What the supervisor does in U1 (`userns.rs`), tried here first, as the tier probe
    // does (`tier.rs`): where a filter or a security module refuses mounts in a new user
    // namespace (inside another sandbox), this is where it shows, and FULL is not chosen.
    // SAFETY: a mount namespace for this child alone (it has its own filesystem context).
    unsafe { rustix::thread::unshare_unsafe(UnshareFlags::NEWNS) }.map_err(|e| (6, e))?;
    let private =
        rustix::mount::MountPropagationFlags::REC | rustix::mount::MountPropagationFlags::PRIVATE;
    rustix::mount::mount_change(c"/", private).map_err(|e| (6, e))?;
    // SAFETY: as above.
    unsafe { rustix::thread::unshare_unsafe(UnshareFlags::NEWUSER) }.map_err(|e| (7, e))?;
    // setgroups is "deny" here already (inherited from U1), as a gid_map of one's own needs.
    write_file(c"/proc/self/uid_map", b"0 0 1\n", 8)?;
    write_file(c"/proc/self/gid_map", b"0 0 1\n", 9)?;
    // SAFETY: new network and IPC namespaces for this child alone.
    unsafe { rustix::thread::unshare_unsafe(UnshareFlags::NEWNET | UnshareFlags::NEWIPC) }
        .map_err(|e| (10, e))?;
    fds[1] = open_ns(c"/proc/self/ns/user", 11)?;
    fds[2] = open_ns(c"/proc/self/ns/net", 12)?;
    fds[3] = open_ns(c"/proc/self/ns/ipc", 13)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The helper makes U1 → U2 → net/IPC, the checks pass, and the network namespace is a
    /// new one with only `lo` (run in a fork: joining namespaces changes the test process).
    #[test]
    fn the_helper_makes_checked_namespaces() {
        // SAFETY: getuid/getgid have no preconditions.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        let ns = Stage::spawn(uid, gid)
            .and_then(Stage::collect)
            .expect("namespaces");
        let own = std::fs::metadata("/proc/self/ns/net").expect("own netns");
        assert_ne!(ns.net_id(), (own.dev(), own.ino()));
        for (_, p) in ns.paths() {
            assert!(std::fs::metadata(&p).is_ok(), "{p}");
        }
    }

    #[test]
    fn a_failed_step_is_named() {
        let e = io_step(10, libc::EPERM);
        let s = e.to_string();
        assert!(s.contains("unshare(network, IPC namespaces)"), "{s}");
        assert!(s.contains("Operation not permitted"), "{s}");
    }
}
