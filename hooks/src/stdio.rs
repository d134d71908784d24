//! The command's standard descriptors, when the caller gave it `/dev/null`.
//!
//! libcontainer (0.7) replaces every standard descriptor that is the host's `/dev/null` by
//! the container's `/dev/null`, as runc does, but opens that one read-only: a command run as
//! `vetto run -- make >/dev/null` (or with its output closed, which Rust's runtime turns into
//! `/dev/null`) then fails its first write with EBADF. [`reopen_dev_null`] gives such a
//! descriptor back read-write, as runc's `reOpenDevNull` does. It touches nothing else: a
//! descriptor that is a file, pipe, socket or terminal stays what the caller passed.

use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::OpenOptionsExt;

use crate::mounts::{fstat, is_null_device};

/// Why a standard descriptor could not be made usable: the command does not run.
#[derive(Debug, thiserror::Error)]
pub enum StdioError {
    /// fstat or fcntl on a standard descriptor failed.
    #[error("standard descriptor {fd}: {step}: {source}")]
    Query {
        /// 0, 1 or 2.
        fd: RawFd,
        /// fstat or F_GETFL.
        step: &'static str,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The container's `/dev/null` could not be opened.
    #[error("open /dev/null read-write: {0}")]
    Open(#[source] std::io::Error),
    /// What was opened as `/dev/null` is not the null device.
    #[error(
        "/dev/null in the container is not the null device (mode {mode:o}, device {major}:{minor})"
    )]
    NotNull {
        /// st_mode.
        mode: u32,
        /// Major number.
        major: u32,
        /// Minor number.
        minor: u32,
    },
    /// dup3 over the standard descriptor failed.
    #[error("standard descriptor {fd}: dup3: {source}")]
    Dup {
        /// 0, 1 or 2.
        fd: RawFd,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// Every standard descriptor that is the null device opened other than read-write is
/// replaced by `/dev/null` opened read-write (the null device is checked by its numbers).
/// Returns the descriptors replaced.
pub fn reopen_dev_null() -> Result<Vec<RawFd>, StdioError> {
    let mut replace = vec![];
    for fd in 0..=2 {
        let st = match fstat(fd) {
            Ok(st) => st,
            // A closed descriptor stays closed: nothing the caller did not give.
            Err(e) if e.raw_os_error() == Some(libc::EBADF) => continue,
            Err(source) => {
                return Err(StdioError::Query {
                    fd,
                    step: "fstat",
                    source,
                })
            }
        };
        if !is_null_device(&st) {
            continue;
        }
        // SAFETY: F_GETFL only queries the descriptor's flags.
        let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
        if flags == -1 {
            return Err(StdioError::Query {
                fd,
                step: "F_GETFL",
                source: std::io::Error::last_os_error(),
            });
        }
        if flags & libc::O_ACCMODE != libc::O_RDWR {
            replace.push(fd);
        }
    }
    if replace.is_empty() {
        return Ok(replace);
    }
    // Never through a link, and never becoming a controlling terminal.
    let null = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NOCTTY)
        .open("/dev/null")
        .map_err(StdioError::Open)?;
    let st = fstat(null.as_raw_fd()).map_err(StdioError::Open)?;
    if !is_null_device(&st) {
        return Err(StdioError::NotNull {
            mode: st.st_mode,
            major: libc::major(st.st_rdev),
            minor: libc::minor(st.st_rdev),
        });
    }
    for &fd in &replace {
        // SAFETY: dup3 onto a standard descriptor number; without O_CLOEXEC so the command
        // inherits it. `null` stays owned by the File and is closed when it drops.
        if unsafe { libc::dup3(null.as_raw_fd(), fd, 0) } == -1 {
            return Err(StdioError::Dup {
                fd,
                source: std::io::Error::last_os_error(),
            });
        }
    }
    Ok(replace)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::in_child;

    fn accmode(fd: RawFd) -> i32 {
        // SAFETY: F_GETFL only queries.
        unsafe { libc::fcntl(fd, libc::F_GETFL) & libc::O_ACCMODE }
    }

    #[test]
    fn a_read_only_null_stdout_becomes_writable_and_nothing_else_changes() {
        in_child(|| {
            let ro = std::fs::File::open("/dev/null").map_err(|e| e.to_string())?;
            let (r, w) = nix::unistd::pipe().map_err(|e| e.to_string())?;
            // stdin: a pipe's read end (must stay); stdout: /dev/null read-only (as
            // libcontainer leaves it); stderr: /dev/null write-only (must become read-write).
            let wo = std::fs::OpenOptions::new()
                .write(true)
                .open("/dev/null")
                .map_err(|e| e.to_string())?;
            for (from, to) in [(r.as_raw_fd(), 0), (ro.as_raw_fd(), 1), (wo.as_raw_fd(), 2)] {
                // SAFETY: dup2 onto the child's own standard descriptors.
                if unsafe { libc::dup2(from, to) } == -1 {
                    return Err("dup2".into());
                }
            }
            let pipe_ino = fstat(0).map_err(|e| e.to_string())?.st_ino;
            let done = reopen_dev_null().map_err(|e| e.to_string())?;
            if done != vec![1, 2] {
                return Err(format!("replaced {done:?}"));
            }
            if accmode(1) != libc::O_RDWR || accmode(2) != libc::O_RDWR {
                return Err("still not read-write".into());
            }
            // SAFETY: writing a byte we own to fd 1.
            if unsafe { libc::write(1, b"x".as_ptr().cast(), 1) } != 1 {
                return Err(format!("write: {}", std::io::Error::last_os_error()));
            }
            if fstat(0).map_err(|e| e.to_string())?.st_ino != pipe_ino {
                return Err("stdin was replaced".into());
            }
            drop(w);
            // Again: nothing left to do.
            match reopen_dev_null().map_err(|e| e.to_string())?.is_empty() {
                true => Ok(()),
                false => Err("replaced twice".into()),
            }
        });
    }
}
