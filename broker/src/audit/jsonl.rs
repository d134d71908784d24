//! The JSONL exporter: one JSON object per stored record (the event, its `prev` and `hash`),
//! to a file or to stdout.
//!
//! The file is opened outside the sandbox, by the supervisor, its broker, or the shim, never
//! by the sandboxed process: without following a symlink in its last component, as a regular
//! file only (a FIFO, a device or a directory there is refused: a FIFO would block the writer,
//! a device would be written to), for appending, created 0600 if absent. Each write holds an
//! exclusive `flock` on it, so the lines of concurrent sessions never interleave.

use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::store::Stored;
use super::AuditError;

/// Where JSONL goes.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum JsonlTarget {
    /// Standard output.
    Stdout,
    /// A file (appended to).
    File(PathBuf),
}

impl JsonlTarget {
    /// `-` is stdout; anything else a path.
    pub fn parse(s: &str) -> Self {
        match s {
            "-" => JsonlTarget::Stdout,
            p => JsonlTarget::File(PathBuf::from(p)),
        }
    }
}

/// An open JSONL sink.
pub struct Jsonl {
    out: std::fs::File,
    lock: bool,
}

fn refuse(path: &Path, why: &str) -> AuditError {
    AuditError::Jsonl {
        path: path.to_path_buf(),
        why: why.to_string(),
        source: None,
    }
}

impl Jsonl {
    /// Open `target` for appending (see the module's rules).
    pub fn open(target: &JsonlTarget) -> Result<Self, AuditError> {
        let path = match target {
            JsonlTarget::Stdout => {
                let out = std::io::stdout()
                    .as_raw_fd()
                    .try_into_file()
                    .map_err(|source| AuditError::Jsonl {
                        path: PathBuf::from("-"),
                        why: "duplicating stdout".into(),
                        source: Some(source),
                    })?;
                return Ok(Jsonl { out, lock: false });
            }
            JsonlTarget::File(p) => p,
        };
        if !path.is_absolute() {
            return Err(refuse(path, "must be an absolute path"));
        }
        // Refuse before opening what is not a regular file: opening a FIFO for writing
        // blocks until a reader comes.
        match std::fs::symlink_metadata(path) {
            Ok(m) if m.file_type().is_symlink() => {
                return Err(refuse(
                    path,
                    "is a symbolic link (refused: it could point anywhere)",
                ))
            }
            Ok(m) if m.file_type().is_fifo() => {
                return Err(refuse(
                    path,
                    "is a FIFO (refused: only a regular file is written)",
                ))
            }
            Ok(m) if !m.is_file() => return Err(refuse(path, "is not a regular file")),
            _ => {}
        }
        let out = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .mode(0o600)
            // O_NONBLOCK: should a FIFO replace the file between the check and the open, the
            // open does not block (and the fstat below refuses it).
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK | libc::O_NOCTTY)
            .open(path)
            .map_err(|source| AuditError::Jsonl {
                path: path.to_path_buf(),
                why: match source.raw_os_error() {
                    Some(libc::ELOOP) => "is a symbolic link (refused)".into(),
                    _ => "cannot be opened for appending".into(),
                },
                source: Some(source),
            })?;
        let m = out.metadata().map_err(|source| AuditError::Jsonl {
            path: path.to_path_buf(),
            why: "stat".into(),
            source: Some(source),
        })?;
        if !m.is_file() {
            return Err(refuse(path, "is not a regular file"));
        }
        Ok(Jsonl { out, lock: true })
    }

    /// Append one line per record.
    pub fn write(&mut self, records: &[Stored]) -> Result<(), AuditError> {
        if records.is_empty() {
            return Ok(());
        }
        let mut buf = Vec::with_capacity(records.len() * 512);
        for r in records {
            serde_json::to_writer(&mut buf, &r.to_json()).map_err(AuditError::Json)?;
            buf.push(b'\n');
        }
        let fd = self.out.as_raw_fd();
        // SAFETY: flock on our own descriptor.
        if self.lock && unsafe { libc::flock(fd, libc::LOCK_EX) } != 0 {
            return Err(AuditError::Jsonl {
                path: PathBuf::from(format!("/proc/self/fd/{fd}")),
                why: "locking".into(),
                source: Some(std::io::Error::last_os_error()),
            });
        }
        let r = self.out.write_all(&buf);
        if self.lock {
            // SAFETY: unlocking our own descriptor.
            unsafe { libc::flock(fd, libc::LOCK_UN) };
        }
        r.map_err(|source| AuditError::Jsonl {
            path: PathBuf::from("(jsonl)"),
            why: "writing".into(),
            source: Some(source),
        })
    }
}

trait IntoFile {
    fn try_into_file(self) -> std::io::Result<std::fs::File>;
}

impl IntoFile for std::os::fd::RawFd {
    fn try_into_file(self) -> std::io::Result<std::fs::File> {
        // SAFETY: borrowing a descriptor that is open for the process's life (stdout), only to
        // duplicate it.
        let b = unsafe { std::os::fd::BorrowedFd::borrow_raw(self) };
        Ok(std::fs::File::from(b.try_clone_to_owned()?))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // Tests: a panic is the failure report.
mod tests {
    use super::*;

    #[test]
    fn symlink_fifo_directory_and_relative_paths_are_refused() {
        let d = crate::private_tempdir();
        let real = d.path().join("real.jsonl");
        std::fs::write(&real, "").unwrap();
        let link = d.path().join("link.jsonl");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let fifo = d.path().join("fifo.jsonl");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        for (p, why) in [
            (link, "symbolic link"),
            (fifo, "FIFO"),
            (d.path().to_path_buf(), "not a regular file"),
            (PathBuf::from("rel.jsonl"), "absolute"),
        ] {
            let e = Jsonl::open(&JsonlTarget::File(p.clone())).err().unwrap();
            assert!(e.to_string().contains(why), "{}: {e}", p.display());
        }
        Jsonl::open(&JsonlTarget::File(real)).unwrap();
        // Created 0600 when absent.
        let new = d.path().join("new.jsonl");
        Jsonl::open(&JsonlTarget::File(new.clone())).unwrap();
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(new).unwrap().permissions().mode() & 0o777,
            0o600
        );
    }
}
