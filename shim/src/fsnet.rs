//! FS-ONLY's network with the broker, supervisor side.
//!
//! Without a network namespace, the sandbox's sockets are the host's. What keeps them off the
//! network, in layers:
//! 1. seccomp ([`vetto_bundle::fsonly::seccomp`] with the broker): TCP sockets only (no UDP,
//!    raw, netlink or UNIX sockets), no `bind`, no `listen`, no `MSG_FASTOPEN`;
//! 2. Landlock: TCP bind and connect handled with no rule allowing either, so the kernel
//!    refuses both to the sandbox's own calls whatever seccomp lets through;
//! 3. every `connect()` stops in the kernel for this supervisor (seccomp user notification,
//!    [`vetto_hooks::notify`]). The supervisor reads the address; one of the broker's
//!    advertised loopback ports gets the socket connected — by the supervisor, on a duplicate
//!    of it (`pidfd_getfd`), to the broker's real listener on the host's loopback, whatever
//!    the sandbox's memory says after the check; any other loopback port gets
//!    `ECONNREFUSED` and any other address `ENETUNREACH`, as FULL's empty network namespace
//!    answers. The call never continues in the kernel with the sandbox's own arguments.
//!
//! The broker's listeners are on the host's loopback, so other local processes could connect
//! to them too: before connecting, the supervisor binds the socket to a loopback port and
//! announces that port to the broker ([`vetto_broker::peers`]), which serves nothing else.

use std::net::SocketAddr;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use vetto_bundle::plan::Listener as Planned;
use vetto_hooks::notify::{Listener, Notification};

/// Connections being answered at once; more get `EAGAIN`.
const MAX_IN_FLIGHT: usize = 64;

/// What the supervisor prepares before the fork.
pub struct Prepared {
    /// (sandbox port, the broker's host listener address), one per planned listener.
    pub routes: Vec<(u16, SocketAddr)>,
    /// The broker's listening sockets, in plan order.
    pub listeners: Vec<OwnedFd>,
    /// The broker's end of the announcement pipe (taken when the broker starts).
    pub peers_r: Option<OwnedFd>,
    /// The supervisor's end.
    pub peers_w: OwnedFd,
    /// The supervisor's end of the channel the sandbox sends its seccomp listener on.
    pub chan: OwnedFd,
    /// The sandbox's end.
    pub chan_child: OwnedFd,
}

/// Bind the broker's listeners on the host's loopback (ephemeral ports) and make the pipes.
pub fn prepare(planned: &[Planned]) -> Result<Prepared> {
    let mut routes = vec![];
    let mut listeners = vec![];
    for p in planned {
        let l = std::net::TcpListener::bind(("127.0.0.1", 0))
            .context("network (FS-ONLY): the broker's listener on the host's 127.0.0.1")?;
        routes.push((p.port, l.local_addr()?));
        listeners.push(OwnedFd::from(l));
    }
    let (peers_r, peers_w) = crate::run::pipe()?;
    let (chan, chan_child) = crate::sidecar::channel()?;
    Ok(Prepared {
        routes,
        listeners,
        peers_r: Some(peers_r),
        peers_w,
        chan,
        chan_child,
    })
}

/// Receive the sandbox's seccomp listener (sent before the command runs).
pub fn receive(chan: &OwnedFd) -> Result<Listener> {
    let mut fds = crate::sidecar::receive(chan, 1, std::time::Duration::from_secs(10))?;
    match fds.pop() {
        Some(fd) => Ok(Listener::new(fd)),
        None => bail!("network (FS-ONLY): no connect() listener from the sandbox"),
    }
}

/// Answer the sandbox's `connect()` calls until none can come any more (a thread).
pub fn serve(listener: Listener, routes: Vec<(u16, SocketAddr)>, peers_w: OwnedFd) {
    let shared = Arc::new((listener, routes, peers_w, AtomicUsize::new(0)));
    std::thread::spawn(move || loop {
        let mut p = libc::pollfd {
            fd: shared.0.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        let n = unsafe { libc::poll(&mut p, 1, -1) };
        if n < 0 {
            if std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return;
        }
        if p.revents & libc::POLLIN == 0 {
            // POLLHUP: no process of the sandbox is left.
            return;
        }
        let n = match shared.0.recv() {
            Ok(Some(n)) => n,
            Ok(None) => continue,
            Err(e) => {
                tracing::warn!("FS-ONLY network: {e}");
                return;
            }
        };
        if shared.3.fetch_add(1, Ordering::SeqCst) >= MAX_IN_FLIGHT {
            shared.3.fetch_sub(1, Ordering::SeqCst);
            shared.0.respond(n.id, libc::EAGAIN);
            continue;
        }
        let s = Arc::clone(&shared);
        let spawned = std::thread::Builder::new().spawn(move || {
            if let Some(errno) = answer(&s.0, &n, &s.1, &s.2) {
                s.0.respond(n.id, errno);
            }
            s.3.fetch_sub(1, Ordering::SeqCst);
        });
        if spawned.is_err() {
            shared.3.fetch_sub(1, Ordering::SeqCst);
            shared.0.respond(n.id, libc::EAGAIN);
        }
    });
}

/// Where a `connect()` address leads.
#[derive(Debug, PartialEq, Eq)]
pub enum Dest {
    /// The broker listener standing for this sandbox port.
    Broker(SocketAddr),
    /// `AF_UNSPEC`: dissolve the association.
    Disconnect,
    /// Refused with this errno.
    Refuse(i32),
}

/// Judges the raw address a sandbox passed to `connect()`.
pub fn judge(raw: &[u8], routes: &[(u16, SocketAddr)]) -> Dest {
    if raw.len() < 2 {
        return Dest::Refuse(libc::EINVAL);
    }
    let family = i32::from(u16::from_ne_bytes([raw[0], raw[1]]));
    let (ip, port): (std::net::IpAddr, u16) = match family {
        libc::AF_UNSPEC => return Dest::Disconnect,
        libc::AF_INET if raw.len() >= 16 => (
            std::net::Ipv4Addr::new(raw[4], raw[5], raw[6], raw[7]).into(),
            u16::from_be_bytes([raw[2], raw[3]]),
        ),
        libc::AF_INET6 if raw.len() >= 24 => {
            let mut a = [0u8; 16];
            a.copy_from_slice(&raw[8..24]);
            let v6 = std::net::Ipv6Addr::from(a);
            let ip = match v6.to_ipv4_mapped() {
                Some(v4) => v4.into(),
                None => v6.into(),
            };
            (ip, u16::from_be_bytes([raw[2], raw[3]]))
        }
        libc::AF_INET | libc::AF_INET6 => return Dest::Refuse(libc::EINVAL),
        _ => return Dest::Refuse(libc::EAFNOSUPPORT),
    };
    if !ip.is_loopback() {
        return Dest::Refuse(libc::ENETUNREACH);
    }
    match routes.iter().find(|(p, _)| *p == port) {
        Some((_, host)) => Dest::Broker(*host),
        None => Dest::Refuse(libc::ECONNREFUSED),
    }
}

fn errno_of(e: &std::io::Error) -> i32 {
    e.raw_os_error().unwrap_or(libc::EIO)
}

fn sockopt(fd: RawFd, opt: libc::c_int) -> std::io::Result<libc::c_int> {
    let mut v: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `v`.
    let r = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            opt,
            (&mut v as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(v)
}

/// A loopback sockaddr of `family` (v4-mapped for IPv6) with `port`.
fn loopback(family: libc::c_int, port: u16) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: sockaddr_storage is plain data; all zeros is a valid value.
    let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    if family == libc::AF_INET6 {
        // SAFETY: sockaddr_storage is large enough and aligned for sockaddr_in6.
        let sa =
            unsafe { &mut *(&mut ss as *mut libc::sockaddr_storage).cast::<libc::sockaddr_in6>() };
        sa.sin6_family = libc::AF_INET6 as libc::sa_family_t;
        sa.sin6_port = port.to_be();
        sa.sin6_addr.s6_addr = std::net::Ipv4Addr::LOCALHOST.to_ipv6_mapped().octets();
        (
            ss,
            std::mem::size_of::<libc::sockaddr_in6>() as libc::socklen_t,
        )
    } else {
        // SAFETY: sockaddr_storage is large enough and aligned for sockaddr_in.
        let sa =
            unsafe { &mut *(&mut ss as *mut libc::sockaddr_storage).cast::<libc::sockaddr_in>() };
        sa.sin_family = libc::AF_INET as libc::sa_family_t;
        sa.sin_port = port.to_be();
        sa.sin_addr.s_addr = u32::from(std::net::Ipv4Addr::LOCALHOST).to_be();
        (
            ss,
            std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
        )
    }
}

/// The answer to one `connect()` (an errno, 0 for success), or `None` if the call is gone.
fn answer(
    l: &Listener,
    n: &Notification,
    routes: &[(u16, SocketAddr)],
    peers_w: &OwnedFd,
) -> Option<i32> {
    let raw = match n.read_addr() {
        Ok(raw) => raw,
        Err(_) => {
            return Some(if l.valid(n.id) {
                libc::EFAULT
            } else {
                return None;
            })
        }
    };
    // The pid named the caller while the call was valid: checked after every use of it.
    if !l.valid(n.id) {
        return None;
    }
    let dest = judge(&raw, routes);
    let sock = match n.take_fd() {
        Ok(s) => s,
        Err(vetto_hooks::notify::NotifyError::Io { source, .. }) => {
            return l.valid(n.id).then(|| errno_of(&source));
        }
        Err(_) => return Some(libc::EACCES),
    };
    if !l.valid(n.id) {
        return None;
    }
    let fd = sock.as_raw_fd();
    let domain = match sockopt(fd, libc::SO_DOMAIN) {
        Ok(d) => d,
        Err(e) => return Some(errno_of(&e)),
    };
    let tcp = matches!(domain, libc::AF_INET | libc::AF_INET6)
        && sockopt(fd, libc::SO_TYPE).ok() == Some(libc::SOCK_STREAM)
        && sockopt(fd, libc::SO_PROTOCOL).ok() == Some(libc::IPPROTO_TCP);
    if !tcp {
        // The seccomp filter makes no other socket that connect() could take an address to.
        return Some(libc::EINVAL);
    }
    let target = match dest {
        Dest::Refuse(e) => return Some(e),
        Dest::Disconnect => {
            // SAFETY: sockaddr is plain data; AF_UNSPEC is 0.
            let mut sa: libc::sockaddr = unsafe { std::mem::zeroed() };
            sa.sa_family = libc::AF_UNSPEC as libc::sa_family_t;
            return Some(connect_errno(
                fd,
                &sa,
                std::mem::size_of::<libc::sockaddr>() as libc::socklen_t,
            ));
        }
        Dest::Broker(host) => host,
    };
    // SAFETY: sockaddr_storage is plain data.
    let mut peer: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let mut plen = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    // SAFETY: getpeername writes at most `plen` bytes into `peer`.
    if unsafe {
        libc::getpeername(
            fd,
            (&mut peer as *mut libc::sockaddr_storage).cast(),
            &mut plen,
        )
    } == 0
    {
        return Some(libc::EISCONN);
    }
    // A loopback port of our choosing, announced to the broker before the connection exists.
    let (local, llen) = loopback(domain, 0);
    let (to, tlen) = loopback(domain, target.port());
    // SAFETY: bind reads `llen` bytes of `local`, which we own.
    if unsafe { libc::bind(fd, (&local as *const libc::sockaddr_storage).cast(), llen) } != 0 {
        let e = std::io::Error::last_os_error();
        return Some(match e.raw_os_error() {
            // Bound already: by an earlier call of ours for this socket (interrupted, or a
            // second connect() of a non-blocking socket still connecting), which announced
            // it then. None is made again (it would admit a second connection from that port,
            // perhaps another process's later): the kernel answers for the state the socket
            // is in (EALREADY, EISCONN; a new attempt is not announced, so the broker closes
            // it).
            Some(libc::EINVAL) => {
                connect_errno(fd, (&to as *const libc::sockaddr_storage).cast(), tlen)
            }
            // IPV6_V6ONLY: no v4-mapped loopback, as no route to it.
            Some(libc::EAFNOSUPPORT) => libc::ENETUNREACH,
            _ => errno_of(&e),
        });
    }
    // SAFETY: sockaddr_storage is plain data.
    let mut me: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let mut mlen = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    // SAFETY: getsockname writes at most `mlen` bytes into `me`.
    if unsafe {
        libc::getsockname(
            fd,
            (&mut me as *mut libc::sockaddr_storage).cast(),
            &mut mlen,
        )
    } != 0
    {
        return Some(errno_of(&std::io::Error::last_os_error()));
    }
    // Both sockaddr_in and sockaddr_in6 keep the port at bytes 2..4, big endian.
    // SAFETY: reading the first 4 bytes of a sockaddr_storage we own.
    let head = unsafe {
        std::slice::from_raw_parts((&me as *const libc::sockaddr_storage).cast::<u8>(), 4)
    };
    let port = [head[2], head[3]];
    if port == [0, 0] {
        // Not bound after all (an IPv6-only socket refuses the v4-mapped loopback).
        return Some(libc::ENETUNREACH);
    }
    // SAFETY: writing 2 bytes we own to our pipe (atomic: less than PIPE_BUF).
    if unsafe { libc::write(peers_w.as_raw_fd(), port.as_ptr().cast(), 2) } != 2 {
        // The broker is gone: nothing to connect to.
        return Some(libc::ECONNREFUSED);
    }
    Some(connect_errno(
        fd,
        (&to as *const libc::sockaddr_storage).cast(),
        tlen,
    ))
}

/// `connect(fd, addr, len)` as the answer to the sandbox's call: 0, or the errno.
fn connect_errno(fd: RawFd, addr: *const libc::sockaddr, len: libc::socklen_t) -> i32 {
    // SAFETY: the callers pass a sockaddr of theirs that is at least `len` bytes, alive for
    // the call; connect only reads it.
    if unsafe { libc::connect(fd, addr, len) } == 0 {
        0
    } else {
        errno_of(&std::io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v4(a: [u8; 4], port: u16) -> Vec<u8> {
        let mut v = vec![0u8; 16];
        v[..2].copy_from_slice(&(libc::AF_INET as u16).to_ne_bytes());
        v[2..4].copy_from_slice(&port.to_be_bytes());
        v[4..8].copy_from_slice(&a);
        v
    }

    fn v6(a: std::net::Ipv6Addr, port: u16) -> Vec<u8> {
        let mut v = vec![0u8; 28];
        v[..2].copy_from_slice(&(libc::AF_INET6 as u16).to_ne_bytes());
        v[2..4].copy_from_slice(&port.to_be_bytes());
        v[8..24].copy_from_slice(&a.octets());
        v
    }

    #[test]
    fn only_an_advertised_loopback_port_reaches_the_broker() {
        let host: SocketAddr = "127.0.0.1:45678".parse().expect("test value");
        let routes = [(3128u16, host)];
        assert_eq!(
            judge(&v4([127, 0, 0, 1], 3128), &routes),
            Dest::Broker(host)
        );
        assert_eq!(
            judge(&v6(std::net::Ipv6Addr::LOCALHOST, 3128), &routes),
            Dest::Broker(host)
        );
        assert_eq!(
            judge(
                &v6(std::net::Ipv4Addr::LOCALHOST.to_ipv6_mapped(), 3128),
                &routes
            ),
            Dest::Broker(host)
        );
        assert_eq!(
            judge(&v4([127, 0, 0, 1], 22), &routes),
            Dest::Refuse(libc::ECONNREFUSED)
        );
        // The broker's real port is not a way around it.
        assert_eq!(
            judge(&v4([127, 0, 0, 1], 45678), &routes),
            Dest::Refuse(libc::ECONNREFUSED)
        );
        assert_eq!(
            judge(&v4([192, 0, 2, 1], 3128), &routes),
            Dest::Refuse(libc::ENETUNREACH)
        );
        assert_eq!(
            judge(
                &v6("2001:db8::1".parse().expect("test value"), 3128),
                &routes
            ),
            Dest::Refuse(libc::ENETUNREACH)
        );
        assert_eq!(
            judge(&v4([127, 0, 0, 1], 3128)[..8], &routes),
            Dest::Refuse(libc::EINVAL)
        );
        assert_eq!(judge(&[1, 0, 0], &routes), Dest::Refuse(libc::EAFNOSUPPORT));
        assert_eq!(judge(&[0, 0], &routes), Dest::Disconnect);
        assert_eq!(judge(&[], &routes), Dest::Refuse(libc::EINVAL));
    }
}
