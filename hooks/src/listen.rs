//! The broker's listening sockets, created inside the sandbox's network namespace and handed
//! out over a unix socket (SCM_RIGHTS): the host-side broker accepts sandbox connections on
//! them directly, so no byte is copied through the supervisor, and the sandbox keeps no route
//! to anything but its own loopback.

use std::io::IoSlice;
use std::net::{Ipv4Addr, TcpListener};
use std::os::fd::{AsRawFd, RawFd};

use nix::sys::socket::{sendmsg, ControlMessage, MsgFlags, UnixAddr};
use vetto_bundle::plan::Listener;

/// Errors creating or handing over the listeners.
#[derive(Debug, thiserror::Error)]
pub enum ListenError {
    /// bind/listen failed.
    #[error("cannot listen on 127.0.0.1:{port} inside the sandbox: {source}")]
    Bind {
        /// The port.
        port: u16,
        /// Why.
        source: std::io::Error,
    },
    /// The network namespace could not be opened.
    #[error("cannot open the sandbox's network namespace: {0}")]
    Netns(std::io::Error),
    /// Handing the sockets to the supervisor failed.
    #[error("cannot hand the listening sockets to the broker: {0}")]
    Send(nix::Error),
}

/// Bind every listener on the sandbox's 127.0.0.1 and send them, in plan order, over `sock`;
/// with `with_netns`, the sandbox's network namespace follows as the last descriptor (the
/// broker dials published ports from inside it). The init keeps no copy.
pub fn open_and_send(
    listeners: &[Listener],
    with_netns: bool,
    sock: RawFd,
) -> Result<(), ListenError> {
    let mut open = vec![];
    for l in listeners {
        let t = TcpListener::bind((Ipv4Addr::LOCALHOST, l.port)).map_err(|source| {
            ListenError::Bind {
                port: l.port,
                source,
            }
        })?;
        open.push(t);
    }
    let mut fds: Vec<RawFd> = open.iter().map(|t| t.as_raw_fd()).collect();
    let netns = match with_netns {
        true => Some(std::fs::File::open("/proc/self/ns/net").map_err(ListenError::Netns)?),
        false => None,
    };
    fds.extend(netns.as_ref().map(|f| f.as_raw_fd()));
    send_fds(sock, &fds, b"vetto-listeners").map_err(ListenError::Send)
}

/// Send `fds` over the unix socket `sock` (SCM_RIGHTS), with `payload` as the message body.
pub(crate) fn send_fds(sock: RawFd, fds: &[RawFd], payload: &[u8]) -> nix::Result<()> {
    let iov = [IoSlice::new(payload)];
    let cmsg = [ControlMessage::ScmRights(fds)];
    sendmsg::<UnixAddr>(sock, &iov, &cmsg, MsgFlags::empty(), None).map(drop)
}
