//! Interactive sessions: libcontainer opens a pty inside the sandbox and sends its master over
//! the console socket; the supervisor relays between the caller's terminal (in raw mode) and
//! that master, and copies window-size changes across.

use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixListener;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};

/// Is this descriptor a terminal?
pub fn is_tty(fd: RawFd) -> bool {
    // SAFETY: isatty only inspects the descriptor.
    unsafe { libc::isatty(fd) == 1 }
}

/// Copy the window size from one terminal to another.
pub fn copy_winsize(from: RawFd, to: RawFd) {
    // SAFETY: winsize is plain data filled by the ioctl.
    let mut ws: libc::winsize = unsafe { std::mem::zeroed() };
    // SAFETY: TIOCGWINSZ/TIOCSWINSZ read/write one winsize we own.
    unsafe {
        if libc::ioctl(from, libc::TIOCGWINSZ, &mut ws) == 0 {
            libc::ioctl(to, libc::TIOCSWINSZ, &ws);
        }
    }
}

/// Receive the pty master that libcontainer's init sends over the console socket (it opens
/// the pty inside the container's own devpts, so `tty` and `/dev/pts/N` make sense inside).
pub fn recv_master(listener: &UnixListener, timeout: Duration) -> Result<OwnedFd> {
    listener.set_nonblocking(true)?;
    let deadline = Instant::now() + timeout;
    let stream = loop {
        match listener.accept() {
            Ok((s, _)) => break s,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(1));
            }
            Err(e) => bail!("terminal: no console from the sandbox: {e}"),
        }
    };
    stream.set_nonblocking(false)?;
    stream.set_read_timeout(Some(timeout))?;
    let fds = crate::fdpass::recv_fds(stream.as_raw_fd())
        .map_err(|e| anyhow::anyhow!("terminal: receiving the pty master: {e}"))?;
    if let Some(master) = fds.into_iter().next() {
        return Ok(master);
    }
    bail!("terminal: the sandbox sent no pty master")
}

/// Puts a terminal in raw mode and restores it on drop.
pub struct RawMode {
    fd: RawFd,
    saved: libc::termios,
}

impl RawMode {
    /// Enter raw mode on `fd`.
    pub fn enter(fd: RawFd) -> Option<Self> {
        // SAFETY: termios is plain data filled by tcgetattr.
        let mut t: libc::termios = unsafe { std::mem::zeroed() };
        // SAFETY: valid pointer to our termios.
        if unsafe { libc::tcgetattr(fd, &mut t) } != 0 {
            return None;
        }
        let saved = t;
        // SAFETY: cfmakeraw edits our copy; tcsetattr reads it.
        unsafe {
            libc::cfmakeraw(&mut t);
            libc::tcsetattr(fd, libc::TCSANOW, &t);
        }
        Some(RawMode { fd, saved })
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        // SAFETY: restoring the termios saved from the same descriptor.
        unsafe { libc::tcsetattr(self.fd, libc::TCSANOW, &self.saved) };
    }
}
