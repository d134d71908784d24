//! Receiving descriptors over a unix socket (SCM_RIGHTS): the pty master from libcontainer's
//! console socket, the broker's listeners from the sandbox's init.

use std::io::IoSliceMut;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};

use nix::sys::socket::{recvmsg, ControlMessageOwned, MsgFlags, UnixAddr};

/// Receive one message from `sock` and every descriptor it carries (at most 16), close-on-exec.
pub fn recv_fds(sock: RawFd) -> nix::Result<Vec<OwnedFd>> {
    let mut buf = [0u8; 64];
    let mut iov = [IoSliceMut::new(&mut buf)];
    let mut cmsg = nix::cmsg_space!([RawFd; 16]);
    let msg = recvmsg::<UnixAddr>(sock, &mut iov, Some(&mut cmsg), MsgFlags::MSG_CMSG_CLOEXEC)?;
    let mut out = vec![];
    for c in msg.cmsgs()? {
        if let ControlMessageOwned::ScmRights(fds) = c {
            for fd in fds {
                // SAFETY: SCM_RIGHTS gave us fresh descriptors that nothing else owns.
                out.push(unsafe { OwnedFd::from_raw_fd(fd) });
            }
        }
    }
    Ok(out)
}
