//! seccomp user notification for `connect()`: how FS-ONLY's sandbox reaches the broker
//! without a network namespace.
//!
//! The sandbox's process installs [`connect_filter`] with a listener
//! ([`install_with_listener`]) and hands the listener to the supervisor ([`send_listener`]).
//! From then on every `connect()` of the sandbox stops in the kernel until the supervisor
//! answers it ([`Listener::recv`], [`Listener::respond`]). The supervisor never lets the
//! call continue (`SECCOMP_USER_NOTIF_FLAG_CONTINUE` would re-read the address from the
//! sandbox's memory after the check); it takes a duplicate of the socket
//! ([`Notification::take_fd`]), connects it itself, and returns the result. If the
//! supervisor is gone, the listener is closed and every `connect()` fails (`ENOSYS`).

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use thiserror::Error;

use crate::bpf::{
    ret_errno, Asm, Target, AUDIT_ARCH, DATA_ARCH, DATA_NR, JEQ_K, JGE_K, LD_W_ABS, RET_ALLOW,
    RET_K, X32_SYSCALL_BIT,
};

/// What failed.
#[derive(Debug, Error)]
pub enum NotifyError {
    /// The filter could not be assembled (a jump too long: cannot happen for this program).
    #[error("the connect() notification filter could not be assembled")]
    Assemble,
    /// The kernel refused the filter or the listener.
    #[error("installing the connect() notification filter: {0}")]
    Install(#[source] io::Error),
    /// Handing the listener to the supervisor failed.
    #[error("handing the connect() listener to the supervisor: {0}")]
    Send(#[source] nix::Error),
    /// A notification call failed.
    #[error("{what}: {source}")]
    Io {
        /// The call.
        what: &'static str,
        /// Why.
        #[source]
        source: io::Error,
    },
}

const RET_USER_NOTIF: u32 = 0x7fc0_0000;
/// `PIDFD_THREAD` (`O_EXCL`): a pidfd for one thread, not only a thread-group leader.
const PIDFD_THREAD: libc::c_uint = libc::O_EXCL as libc::c_uint;

/// The filter: a native `connect()` goes to the listener; a call of another ABI (i386,
/// x32) whose number could be `connect` there is refused (`EPERM`) outright; everything else
/// is this filter's to allow (the deny-list, a separate filter, still applies).
pub fn connect_filter() -> Result<Vec<seccompiler::sock_filter>, NotifyError> {
    let mut a = Asm::default();
    let native = a.label();
    let allow = a.label();
    a.stmt(LD_W_ABS, DATA_ARCH);
    a.jump(JEQ_K, AUDIT_ARCH, Target::Label(native), Target::Next);
    a.stmt(RET_K, ret_errno(libc::EPERM as u32));
    a.place(native);
    a.stmt(LD_W_ABS, DATA_NR);
    #[cfg(target_arch = "x86_64")]
    {
        let below = a.label();
        a.jump(JGE_K, X32_SYSCALL_BIT, Target::Next, Target::Label(below));
        a.stmt(RET_K, ret_errno(libc::EPERM as u32));
        a.place(below);
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (JGE_K, X32_SYSCALL_BIT);
    a.jump(
        JEQ_K,
        libc::SYS_connect as u32,
        Target::Next,
        Target::Label(allow),
    );
    a.stmt(RET_K, RET_USER_NOTIF);
    a.place(allow);
    a.stmt(RET_K, RET_ALLOW);
    a.finish().ok_or(NotifyError::Assemble)
}

#[repr(C)]
struct SockFprog {
    len: libc::c_ushort,
    filter: *const seccompiler::sock_filter,
}

/// Installs `program` (no_new_privs must be set) and returns its listener.
pub fn install_with_listener(program: &[seccompiler::sock_filter]) -> Result<OwnedFd, NotifyError> {
    let len = libc::c_ushort::try_from(program.len()).map_err(|_| {
        NotifyError::Install(io::Error::new(io::ErrorKind::InvalidInput, "too long"))
    })?;
    let prog = SockFprog {
        len,
        filter: program.as_ptr(),
    };
    // SAFETY: seccomp(2) reads the program through `prog`, which points at `program`, alive
    // for the call; it returns a new descriptor or -1.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_SET_MODE_FILTER,
            libc::SECCOMP_FILTER_FLAG_NEW_LISTENER,
            &prog as *const SockFprog,
        )
    };
    if fd < 0 {
        return Err(NotifyError::Install(io::Error::last_os_error()));
    }
    // SAFETY: a fresh descriptor, ours alone.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// Sends `listener` over the unix socket `sock` (SCM_RIGHTS).
pub fn send_listener(sock: RawFd, listener: &OwnedFd) -> Result<(), NotifyError> {
    crate::listen::send_fds(sock, &[listener.as_raw_fd()], b"L").map_err(NotifyError::Send)
}

/// The supervisor's end: a listener received from the sandbox.
pub struct Listener(OwnedFd);

/// One stopped `connect()`.
#[derive(Debug, Clone, Copy)]
pub struct Notification {
    /// The kernel's id of this call.
    pub id: u64,
    /// The calling thread (in the supervisor's PID namespace).
    pub pid: u32,
    /// The descriptor argument.
    pub fd: i32,
    /// Where the address is in the caller's memory.
    pub addr: u64,
    /// The address's length.
    pub addrlen: u32,
}

impl Listener {
    /// Takes over a received listener descriptor.
    pub fn new(fd: OwnedFd) -> Self {
        Listener(fd)
    }

    /// The descriptor, to poll.
    pub fn as_raw_fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }

    /// Waits for the next notification. `Ok(None)`: the call it was for is gone already
    /// (the caller was interrupted); try again.
    pub fn recv(&self) -> Result<Option<Notification>, NotifyError> {
        // SAFETY: seccomp_notif is plain data; the kernel requires it zeroed.
        let mut n: libc::seccomp_notif = unsafe { std::mem::zeroed() };
        // SAFETY: the ioctl writes one seccomp_notif into `n`.
        let r = unsafe {
            libc::ioctl(
                self.0.as_raw_fd(),
                libc::SECCOMP_IOCTL_NOTIF_RECV,
                &mut n as *mut libc::seccomp_notif,
            )
        };
        if r != 0 {
            let e = io::Error::last_os_error();
            return match e.raw_os_error() {
                Some(libc::ENOENT) | Some(libc::EINTR) => Ok(None),
                _ => Err(NotifyError::Io {
                    what: "SECCOMP_IOCTL_NOTIF_RECV",
                    source: e,
                }),
            };
        }
        Ok(Some(Notification {
            id: n.id,
            pid: n.pid,
            fd: n.data.args[0] as i32,
            addr: n.data.args[1],
            addrlen: n.data.args[2] as u32,
        }))
    }

    /// Whether the call `id` is still waiting (so its pid still names the caller).
    pub fn valid(&self, id: u64) -> bool {
        // SAFETY: the ioctl reads one u64.
        unsafe {
            libc::ioctl(
                self.0.as_raw_fd(),
                libc::SECCOMP_IOCTL_NOTIF_ID_VALID,
                &id as *const u64,
            ) == 0
        }
    }

    /// Ends the call `id`: it returns 0 (`errno` 0) or -1 with `errno`.
    pub fn respond(&self, id: u64, errno: i32) {
        let resp = libc::seccomp_notif_resp {
            id,
            val: 0,
            error: -errno,
            flags: 0,
        };
        // SAFETY: the ioctl reads one seccomp_notif_resp. A failure means the call is gone
        // (the caller was interrupted or died): nothing to do.
        unsafe {
            libc::ioctl(
                self.0.as_raw_fd(),
                libc::SECCOMP_IOCTL_NOTIF_SEND,
                &resp as *const libc::seccomp_notif_resp,
            )
        };
    }
}

impl Notification {
    /// Reads the address the caller passed (at most 128 bytes, `sockaddr_storage`).
    pub fn read_addr(&self) -> Result<Vec<u8>, NotifyError> {
        let len = (self.addrlen as usize).min(128);
        let mut buf = vec![0u8; len];
        if len == 0 {
            return Ok(buf);
        }
        let local = libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: len,
        };
        let remote = libc::iovec {
            iov_base: self.addr as *mut libc::c_void,
            iov_len: len,
        };
        // SAFETY: process_vm_readv writes at most `len` bytes into `buf`; the remote iovec
        // names the caller's memory, which the kernel checks.
        let n =
            unsafe { libc::process_vm_readv(self.pid as libc::pid_t, &local, 1, &remote, 1, 0) };
        if n < 0 {
            return Err(NotifyError::Io {
                what: "reading connect()'s address (process_vm_readv)",
                source: io::Error::last_os_error(),
            });
        }
        buf.truncate(n as usize);
        Ok(buf)
    }

    /// A duplicate of the caller's descriptor (`pidfd_getfd`), close-on-exec. The caller is
    /// a thread (any thread may `connect()`), so its pidfd is a thread pidfd
    /// (`PIDFD_THREAD`, Linux 6.9; FS-ONLY needs 6.10 for Landlock ABI 6), and the descriptor
    /// is taken from that thread's own table.
    pub fn take_fd(&self) -> Result<OwnedFd, NotifyError> {
        let pidfd = crate::process::pidfd_open(self.pid as libc::pid_t, PIDFD_THREAD).map_err(
            |source| NotifyError::Io {
                what: "pidfd_open",
                source,
            },
        )?;
        // SAFETY: pidfd_getfd with integers; a new descriptor (O_CLOEXEC) or -1.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_getfd, pidfd.as_raw_fd(), self.fd, 0) };
        if fd < 0 {
            return Err(NotifyError::Io {
                what: "pidfd_getfd",
                source: io::Error::last_os_error(),
            });
        }
        // SAFETY: a fresh descriptor, ours alone.
        Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::in_child;

    /// Fork a process that connects a TCP socket to 127.0.0.1:9 and exits with the errno
    /// (0 on success).
    fn connector() -> libc::pid_t {
        // SAFETY: the grandchild only makes raw syscalls and _exits.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            // SAFETY: raw socket calls on values we own; the grandchild then _exits.
            unsafe {
                let s = libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0);
                let mut sa: libc::sockaddr_in = std::mem::zeroed();
                sa.sin_family = libc::AF_INET as libc::sa_family_t;
                sa.sin_port = 9u16.to_be();
                sa.sin_addr.s_addr = u32::from(std::net::Ipv4Addr::LOCALHOST).to_be();
                let r = libc::connect(
                    s,
                    (&sa as *const libc::sockaddr_in).cast(),
                    std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
                );
                let e = if r == 0 { 0 } else { *libc::__errno_location() };
                libc::_exit(e)
            }
        }
        pid
    }

    fn exit_code(pid: libc::pid_t) -> i32 {
        let mut st = 0;
        // SAFETY: waiting for our own child.
        unsafe { libc::waitpid(pid, &mut st, 0) };
        libc::WEXITSTATUS(st)
    }

    #[test]
    fn connect_stops_for_the_listener_and_fails_without_one() {
        in_child(|| {
            crate::process::set_no_new_privs().map_err(|e| e.to_string())?;
            let prog = connect_filter().map_err(|e| e.to_string())?;
            let l = Listener::new(install_with_listener(&prog).map_err(|e| e.to_string())?);
            let pid = connector();
            let n = loop {
                if let Some(n) = l.recv().map_err(|e| e.to_string())? {
                    break n;
                }
            };
            if n.pid as libc::pid_t != pid {
                return Err(format!("notification from {} not {pid}", n.pid));
            }
            let raw = n.read_addr().map_err(|e| e.to_string())?;
            if raw.len() != 16 || raw[2..4] != 9u16.to_be_bytes() || raw[4..8] != [127, 0, 0, 1] {
                return Err(format!("address read: {raw:?}"));
            }
            let fd = n.take_fd().map_err(|e| e.to_string())?;
            let mut dom: libc::c_int = 0;
            let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
            // SAFETY: getsockopt into an int we own.
            unsafe {
                libc::getsockopt(
                    fd.as_raw_fd(),
                    libc::SOL_SOCKET,
                    libc::SO_DOMAIN,
                    (&mut dom as *mut libc::c_int).cast(),
                    &mut len,
                )
            };
            if dom != libc::AF_INET {
                return Err(format!("the duplicate is not the caller's socket ({dom})"));
            }
            if !l.valid(n.id) {
                return Err("the call is not waiting".into());
            }
            l.respond(n.id, libc::ECONNREFUSED);
            let code = exit_code(pid);
            if code != libc::ECONNREFUSED {
                return Err(format!("the caller saw errno {code}, not the answer"));
            }
            // No supervisor: every connect() fails, none goes through.
            drop(l);
            let code = exit_code(connector());
            if code != libc::ENOSYS {
                return Err(format!("without a listener connect() gave errno {code}"));
            }
            Ok(())
        });
    }
}
