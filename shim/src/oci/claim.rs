//! One container, one cgroup, across concurrent creates. `prepare` refuses a cgroup that
//! already holds processes; two creates of the same cgroup at the same moment (the same id
//! under two `--root` directories, one `cgroupsPath` given twice) could both find it empty
//! before either's init joins it. A create therefore holds a claim on its cgroup, an
//! exclusive `flock` on a file named after the cgroup's path, from that check until
//! libcontainer has put the init in the cgroup: the second create waits, then finds the
//! first's init there and is refused.
//!
//! The claims live in one directory per host user, whatever the state root: root's is
//! `/run/vetto-shim.claims`; another user's (who can only use cgroups delegated to it) is in
//! vetto's private runtime directory. A claim's file is removed when it is released, while
//! still locked; a create that locked a file which is no longer the one at the path (the
//! holder removed it meanwhile) tries again.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::OciError;

/// A held claim on a cgroup: released (its file removed, then unlocked) on drop.
#[derive(Debug)]
pub struct Claim {
    /// Holds the lock (see `Drop`).
    file: File,
    path: PathBuf,
}

impl Drop for Claim {
    fn drop(&mut self) {
        // Removed while locked: a waiter that then locks this file finds it gone and retries.
        let _ = std::fs::remove_file(&self.path);
        // Unlocked here, not by closing: the container's init was forked while the claim was
        // held and shares this open file (until its exec closes it, O_CLOEXEC); a flock
        // belongs to the open file, so only an explicit unlock releases it for both.
        // SAFETY: flock on a descriptor this claim owns; no memory is involved.
        unsafe { libc::flock(self.file.as_raw_fd(), libc::LOCK_UN) };
    }
}

/// The directory of this user's claims, made private (0700, the user's own) if missing.
pub fn dir() -> Result<PathBuf, OciError> {
    let uid = nix::unistd::geteuid().as_raw();
    if uid == 0 && !super::rootless() {
        let d = PathBuf::from("/run/vetto-shim.claims");
        private(&d, uid)?;
        return Ok(d);
    }
    let root = crate::session::runtime_root(uid).map_err(|e| {
        OciError::Config(format!("cgroup claim: no private runtime directory: {e:#}"))
    })?;
    let d = root.join("cgroup-claims");
    private(&d, uid)?;
    Ok(d)
}

fn private(d: &Path, uid: u32) -> Result<(), OciError> {
    use std::os::unix::fs::DirBuilderExt;
    let io = |source| OciError::Io {
        what: "making the cgroup claims directory",
        path: d.to_path_buf(),
        source,
    };
    match std::fs::DirBuilder::new().mode(0o700).create(d) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(io(e)),
    }
    let m = std::fs::symlink_metadata(d).map_err(io)?;
    if !m.is_dir() || m.uid() != uid || m.mode() & 0o077 != 0 {
        return Err(OciError::Config(format!(
            "cgroup claims directory {}: must be a directory owned by uid {uid} with mode 0700 \
             (found uid {} mode {:o})",
            d.display(),
            m.uid(),
            m.mode() & 0o7777
        )));
    }
    Ok(())
}

/// The claim file's name for cgroup `path`: its components (`cgroup_components`, as its
/// directories are found) joined by `%2F`, `%` itself escaped; a name too long for a file
/// name is replaced by its SHA-256 (`sha256-<hex>`, which no escaped name can be).
fn file_name(path: &str) -> String {
    use sha2::{Digest, Sha256};
    let name = super::prepare::cgroup_components(path)
        .map(|c| c.replace('%', "%25"))
        .collect::<Vec<_>>()
        .join("%2F");
    match name.len() > 200 {
        true => format!("sha256-{}", crate::audit::hex(&Sha256::digest(&name))),
        false => name,
    }
}

/// How long a create waits for another create's claim on the same cgroup. A create takes
/// milliseconds; one that holds a claim longer is stuck (or was killed after forking the
/// init, which keeps the lock until it is started or killed), and this create, which would
/// be refused once the other's init is in the cgroup anyway, fails instead of waiting.
pub const WAIT: Duration = Duration::from_secs(30);

/// Waits (up to `wait`) for, and takes, the claim on cgroup `path` in claims directory `dir`.
pub fn take(dir: &Path, path: &str, wait: Duration) -> Result<Claim, OciError> {
    let name = file_name(path);
    if name.is_empty() {
        return Err(OciError::Config(format!(
            "linux.cgroupsPath {path:?}: the root cgroup, which is every process's: name a \
             cgroup of the container's own"
        )));
    }
    let at = dir.join(name);
    let io = |source| OciError::Io {
        what: "claiming the container's cgroup",
        path: at.clone(),
        source,
    };
    let until = Instant::now() + wait;
    loop {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&at)
            .map_err(io)?;
        // SAFETY: flock on a descriptor this function owns; no memory is involved.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            let e = std::io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EWOULDBLOCK) if Instant::now() < until => {
                    std::thread::sleep(Duration::from_millis(5));
                    continue;
                }
                Some(libc::EWOULDBLOCK) => {
                    return Err(OciError::Config(format!(
                        "linux.cgroupsPath {path:?}: another create of this cgroup has held it \
                         for {} s (stuck, or killed after it made its container's init): \
                         delete that container, or give this one its own id or cgroupsPath",
                        wait.as_secs()
                    )))
                }
                Some(libc::EINTR) => continue,
                _ => return Err(io(e)),
            }
        }
        let held = file.metadata().map_err(io)?;
        match std::fs::symlink_metadata(&at) {
            Ok(now) if now.dev() == held.dev() && now.ino() == held.ino() => {
                return Ok(Claim { file, path: at })
            }
            // The holder released it (removed the file) while this create waited.
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::sync::mpsc;

    #[test]
    fn one_cgroup_has_one_name_however_spelled() {
        assert_eq!(file_name("/vetto-shim/a"), "vetto-shim%2Fa");
        assert_eq!(file_name("vetto-shim/./a/"), "vetto-shim%2Fa");
        assert_eq!(file_name("//a%2Fb"), "a%252Fb");
        assert_ne!(file_name("/a%2Fb"), file_name("/a/b"));
        assert_eq!(file_name("/"), "");
        // Too long for a file name: its digest, the same however spelled.
        let long = format!("/k/{}", "p".repeat(300));
        let hashed = file_name(&long);
        assert!(
            hashed.starts_with("sha256-") && hashed.len() == 7 + 64,
            "{hashed}"
        );
        assert_eq!(file_name(&format!("k//./{}", "p".repeat(300))), hashed);
        assert_ne!(file_name(&format!("/k/{}", "p".repeat(301))), hashed);
    }

    /// A second claim on the same cgroup waits until the first is released, and then holds
    /// a file of its own; another cgroup's claim does not wait.
    #[test]
    fn a_claim_waits_for_the_holder() {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().to_path_buf();
        for root_cgroup in ["/", "./", "//."] {
            let e = take(&dir, root_cgroup, WAIT).unwrap_err().to_string();
            assert!(e.contains("the root cgroup"), "{e}");
        }
        let first = take(&dir, "/vetto-shim/a", WAIT).unwrap();
        let other = take(&dir, "/vetto-shim/b", WAIT).unwrap();
        let (tx, rx) = mpsc::channel();
        let d = dir.clone();
        let waiter = std::thread::spawn(move || {
            let c = take(&d, "vetto-shim/a", WAIT).unwrap();
            tx.send(()).unwrap();
            c
        });
        assert!(
            rx.recv_timeout(Duration::from_millis(300)).is_err(),
            "the second claim did not wait"
        );
        // One that will not wait as long is refused, saying why.
        let e = take(&dir, "/vetto-shim/a", Duration::from_millis(50))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("another create of this cgroup has held it"),
            "{e}"
        );
        drop(first);
        rx.recv_timeout(Duration::from_secs(10))
            .expect("the second claim was not granted once the first was released");
        let second = waiter.join().unwrap();
        assert!(second.path.exists());
        // A forked child shares the open file, and with it the lock: released on drop all
        // the same (the container's init is forked while its create holds the claim).
        let shared = second.file.try_clone().unwrap();
        drop(second);
        drop(take(&dir, "/vetto-shim/a", Duration::from_secs(2)).unwrap());
        drop(shared);
        drop(other);
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0, "claims left");
    }
}
