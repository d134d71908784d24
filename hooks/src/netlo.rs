//! Bring the loopback interface up in the sandbox's fresh network namespace, over rtnetlink.

use std::ffi::CStr;
use std::io;

use netlink_packet_core::{
    NetlinkHeader, NetlinkMessage, NetlinkPayload, NLM_F_ACK, NLM_F_REQUEST,
};
use netlink_packet_route::link::{LinkFlags, LinkMessage};
use netlink_packet_route::RouteNetlinkMessage;
use netlink_sys::{protocols::NETLINK_ROUTE, Socket, SocketAddr};
use thiserror::Error;

/// The loopback interface's name.
pub const LOOPBACK: &CStr = c"lo";

/// Sequence number of our single request.
const SEQ: u32 = 1;

/// Loopback failures.
#[derive(Debug, Error)]
pub enum NetError {
    /// There is no `lo` in this network namespace.
    #[error("no loopback interface `lo` in this network namespace")]
    NoLoopback,
    /// A socket operation failed.
    #[error("{call}: {source}")]
    Io {
        /// Which call.
        call: &'static str,
        /// The OS error.
        source: io::Error,
    },
    /// The kernel refused the change (e.g. EPERM without CAP_NET_ADMIN).
    #[error("RTM_SETLINK on lo refused: {0}")]
    Refused(io::Error),
    /// The kernel's answer could not be parsed.
    #[error("unexpected rtnetlink answer: {0}")]
    Protocol(String),
    /// The kernel acknowledged, but `lo` is still down.
    #[error("lo is still down after the kernel acknowledged RTM_SETLINK")]
    StillDown,
}

fn io_err(call: &'static str) -> impl FnOnce(io::Error) -> NetError {
    move |source| NetError::Io { call, source }
}

/// Sets `IFF_UP` on `lo` (RTM_SETLINK with an ACK), then checks the flag with `SIOCGIFFLAGS`.
/// Needs `CAP_NET_ADMIN` over the current network namespace.
pub fn loopback_up() -> Result<(), NetError> {
    // SAFETY: LOOPBACK is a NUL-terminated string.
    let index = unsafe { libc::if_nametoindex(LOOPBACK.as_ptr()) };
    if index == 0 {
        return Err(NetError::NoLoopback);
    }

    let mut link = LinkMessage::default();
    link.header.index = index;
    link.header.flags = LinkFlags::Up;
    link.header.change_mask = LinkFlags::Up;
    let mut header = NetlinkHeader::default();
    header.flags = NLM_F_REQUEST | NLM_F_ACK;
    header.sequence_number = SEQ;
    let mut request = NetlinkMessage::new(
        header,
        NetlinkPayload::from(RouteNetlinkMessage::SetLink(link)),
    );
    request.finalize();
    let mut buf = vec![0u8; request.buffer_len()];
    request.serialize(&mut buf);

    let mut socket = Socket::new(NETLINK_ROUTE).map_err(io_err("socket(NETLINK_ROUTE)"))?;
    socket.bind_auto().map_err(io_err("bind"))?;
    socket
        .connect(&SocketAddr::new(0, 0))
        .map_err(io_err("connect"))?;
    socket.send(&buf, 0).map_err(io_err("send"))?;
    wait_for_ack(&socket)?;

    match link_is_up(LOOPBACK)? {
        true => Ok(()),
        false => Err(NetError::StillDown),
    }
}

/// Reads until the NLMSG_ERROR answering our request: code 0 is the ACK.
fn wait_for_ack(socket: &Socket) -> Result<(), NetError> {
    loop {
        let (data, _) = socket.recv_from_full().map_err(io_err("recv"))?;
        let mut rest = data.as_slice();
        while !rest.is_empty() {
            let msg = NetlinkMessage::<RouteNetlinkMessage>::deserialize(rest)
                .map_err(|e| NetError::Protocol(e.to_string()))?;
            let len = usize::try_from(msg.header.length).unwrap_or(usize::MAX);
            if len == 0 || len > rest.len() {
                return Err(NetError::Protocol(format!("bad message length {len}")));
            }
            // Messages are padded to 4 bytes (the last one may not be).
            let advance = (len.saturating_add(3) & !3).min(rest.len());
            rest = rest.get(advance..).unwrap_or_default();
            if msg.header.sequence_number != SEQ {
                continue;
            }
            match msg.payload {
                NetlinkPayload::Error(e) => {
                    return match e.code {
                        None => Ok(()),
                        Some(_) => Err(NetError::Refused(e.to_io())),
                    };
                }
                NetlinkPayload::Noop => {}
                other => {
                    return Err(NetError::Protocol(format!(
                        "expected an ACK, got {other:?}"
                    )));
                }
            }
        }
    }
}

/// Whether `IFF_UP` is set on the named interface of the current network namespace
/// (`SIOCGIFFLAGS`; `/sys/class/net` may show another namespace).
pub fn link_is_up(name: &CStr) -> Result<bool, NetError> {
    // SAFETY: an all-zero ifreq is valid (empty name, zero union).
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    let bytes = name.to_bytes();
    if bytes.len() >= req.ifr_name.len() {
        return Err(NetError::NoLoopback);
    }
    for (dst, &src) in req.ifr_name.iter_mut().zip(bytes) {
        *dst = src as libc::c_char;
    }
    // SAFETY: plain socket creation.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(NetError::Io {
            call: "socket(AF_INET)",
            source: io::Error::last_os_error(),
        });
    }
    // SAFETY: `fd` is open and `req` is a valid ifreq with a NUL-terminated name.
    let rc = unsafe { libc::ioctl(fd, libc::SIOCGIFFLAGS, &mut req) };
    let err = io::Error::last_os_error();
    // SAFETY: `fd` was opened above and is closed exactly once.
    unsafe { libc::close(fd) };
    if rc != 0 {
        return Err(match err.raw_os_error() {
            Some(libc::ENODEV) => NetError::NoLoopback,
            _ => NetError::Io {
                call: "ioctl(SIOCGIFFLAGS)",
                source: err,
            },
        });
    }
    // SAFETY: SIOCGIFFLAGS filled the `ifru_flags` member of the union.
    let flags = unsafe { req.ifr_ifru.ifru_flags };
    Ok(i32::from(flags) & libc::IFF_UP != 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{enter_user_and_net_ns, in_child};

    #[test]
    fn brings_lo_up_in_a_new_netns() {
        in_child(|| {
            enter_user_and_net_ns()?;
            if link_is_up(LOOPBACK).map_err(|e| e.to_string())? {
                return Err("lo already up in a fresh netns".into());
            }
            loopback_up().map_err(|e| e.to_string())?;
            if !link_is_up(LOOPBACK).map_err(|e| e.to_string())? {
                return Err("lo still down".into());
            }
            // Idempotent.
            loopback_up().map_err(|e| e.to_string())?;
            // And usable: bind and connect on 127.0.0.1.
            let listener = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
            let addr = listener.local_addr().map_err(|e| e.to_string())?;
            std::net::TcpStream::connect(addr).map_err(|e| format!("connect: {e}"))?;
            Ok(())
        });
    }

    #[test]
    fn refused_without_net_admin() {
        in_child(|| {
            enter_user_and_net_ns()?;
            // Enter another user namespace: it does not own the network namespace.
            // SAFETY: unshare takes only flags; the child is single-threaded.
            if unsafe { libc::unshare(libc::CLONE_NEWUSER) } != 0 {
                return Err(format!("unshare: {}", std::io::Error::last_os_error()));
            }
            match loopback_up() {
                Err(NetError::Refused(e)) if e.raw_os_error() == Some(libc::EPERM) => Ok(()),
                other => Err(format!("expected EPERM, got {other:?}")),
            }
        });
    }

    #[test]
    fn unknown_interface() {
        assert!(matches!(
            link_is_up(c"vetto-none0"),
            Err(NetError::NoLoopback)
        ));
    }
}

/// Names of every network interface of the current network namespace (`if_nameindex(3)`,
/// which asks the kernel over netlink: `/sys/class/net` may show another namespace).
pub fn interface_names() -> Result<Vec<String>, NetError> {
    // SAFETY: if_nameindex allocates an array terminated by a zero entry, or returns NULL.
    let list = unsafe { libc::if_nameindex() };
    if list.is_null() {
        return Err(NetError::Io {
            call: "if_nameindex",
            source: io::Error::last_os_error(),
        });
    }
    let mut names = vec![];
    let mut p = list;
    // SAFETY: walking the array up to its terminating zero entry; each name is a valid C
    // string owned by the array, which is freed once, after the walk.
    unsafe {
        while (*p).if_index != 0 && !(*p).if_name.is_null() {
            names.push(CStr::from_ptr((*p).if_name).to_string_lossy().into_owned());
            p = p.add(1);
        }
        libc::if_freenameindex(list);
    }
    Ok(names)
}

#[cfg(test)]
mod interface_tests {
    use super::*;
    use crate::testutil::{enter_user_and_net_ns, in_child};

    #[test]
    fn a_fresh_network_namespace_has_only_lo() {
        in_child(|| {
            enter_user_and_net_ns()?;
            let names = interface_names().map_err(|e| e.to_string())?;
            if names == ["lo"] {
                Ok(())
            } else {
                Err(format!("interfaces: {names:?}"))
            }
        });
    }
}
