//! A pseudo-terminal for interactive sessions: the command gets the slave as its
//! controlling terminal, the supervisor relays between the caller's terminal (in raw mode)
//! and the master, and copies window-size changes across.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use anyhow::{bail, Result};

/// The master and slave ends.
pub struct Pty {
    /// Kept by the supervisor.
    pub master: OwnedFd,
    /// Given to the sandbox as stdio.
    pub slave: OwnedFd,
}

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

impl Pty {
    /// Open a pty sized like `like`.
    pub fn open(like: RawFd) -> Result<Self> {
        let (mut m, mut s) = (-1, -1);
        // SAFETY: openpty writes two descriptors into our ints; name, termios, winsize null.
        let r = unsafe {
            libc::openpty(
                &mut m,
                &mut s,
                std::ptr::null_mut(),
                std::ptr::null(),
                std::ptr::null(),
            )
        };
        if r != 0 {
            bail!("terminal: openpty: {}", std::io::Error::last_os_error());
        }
        // SAFETY: openpty succeeded: both descriptors are open and ours alone.
        let (master, slave) = unsafe { (OwnedFd::from_raw_fd(m), OwnedFd::from_raw_fd(s)) };
        // SAFETY: setting FD_CLOEXEC on our master.
        unsafe { libc::fcntl(master.as_raw_fd(), libc::F_SETFD, libc::FD_CLOEXEC) };
        copy_winsize(like, slave.as_raw_fd());
        Ok(Pty { master, slave })
    }
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
