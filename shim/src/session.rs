//! The private runtime directory and one session's files in it.
//!
//! `$XDG_RUNTIME_DIR/vetto/` when that is the caller's own, else `/dev/shm/vetto-<uid>/` when
//! `/dev/shm` is a tmpfs, else `$TMPDIR/vetto-<uid>/` (created 0700, refused if it is a
//! symlink or somebody else's). Each session gets
//! `sessions/<id>/{bundle,state}` and `sessions/<id>.lock`.
//!
//! # Liveness: one lock per session, held for its whole life
//!
//! Many sessions start at once (a CI runner, a parallel agent harness), and every start sweeps
//! what crashed sessions left behind. A session is live exactly while its supervisor holds an
//! exclusive `flock` on `sessions/<id>.lock`; nothing else (no pid file, no timing) decides it.
//! The lock belongs to the open file description, so the kernel releases it when the last
//! descriptor goes, however the supervisor ends (SIGKILL included).
//!
//! Creating a session (`create`):
//! 1. create `<id>.lock` with `O_CREAT|O_EXCL|O_CLOEXEC`, mode 0600 (a fresh random id;
//!    `EEXIST` → try another id);
//! 2. `flock(LOCK_EX|LOCK_NB)` on it;
//! 3. check the path still names the inode we locked (`fstat` == `lstat`).
//!
//! Between 1 and 2 the file exists unlocked, and a sweeper may take it for a crashed
//! session's leftover. Then either the sweeper still holds the lock (2 fails with
//! `EWOULDBLOCK`) or it has already unlinked the file (3 fails): the creator gives this id
//! up, without touching the file (it is the sweeper's), and starts again with a new id. Only
//! after 3 succeeds — from then on no sweeper can take the lock — is `sessions/<id>/` made
//! and written. So a session directory never exists without its lock file already held by
//! its owner, from the moment the directory exists until it is gone.
//!
//! Ending a session (`Session`'s drop): remove `<id>/`, then unlink `<id>.lock`, then close
//! the lock descriptor, so the lock is released last. If the directory cannot be removed, the
//! lock file stays; the lock is released when the process exits and the next start sweeps
//! both.
//!
//! Sweeping (`sweep_stale`), for every `<id>` or `<id>.lock` in `sessions/`:
//! - open `<id>.lock` (`O_RDONLY|O_NOFOLLOW|O_CLOEXEC`, a regular file only) and take the
//!   same lock, non-blocking. Refused: the session is live, and is left alone (the sweeper's
//!   only contact with it is that attempt). Granted: check the path still names the locked
//!   inode (else another sweeper or the owner's drop has finished with it), then, still
//!   holding the lock, remove `<id>/` and unlink `<id>.lock`, in the owner's order;
//! - no `<id>.lock`: the directory cannot belong to a session of this protocol (its lock file
//!   exists before the directory and goes only after it), so it is a crashed session from
//!   a vetto without lock files, or the remains of a failed removal. It is left alone while
//!   its `supervisor` file names a live process (an older vetto still running), or while it
//!   has none and is younger than [`LEGACY_GRACE`] (an older vetto between its `mkdir` and
//!   its write). Otherwise the sweeper adopts it: creates `<id>.lock` exclusively and locks
//!   it as in `create` (so exactly one sweeper removes it), then removes both.
//!
//! Nothing is followed: the lock file is opened `O_NOFOLLOW` or created `O_EXCL`, and
//! [`remove_tree`] removes a symlink rather than what it points to; every path is a direct
//! child of the private `sessions/` directory whose name came from listing it.
//!
//! The `supervisor` file (pid and start time) is still written for older vettos' sweepers
//! and for people looking at the directory; liveness does not depend on it.
//!
//! The lock descriptor is `O_CLOEXEC`. libcontainer's clones of the supervisor inherit it
//! (it only marks descriptors close-on-exec), and the sandbox's PID 1, which does not exec,
//! holds it, sharing the supervisor's lock, until it has forked the command (then it closes
//! every descriptor it no longer needs): harmless, since that PID 1 keeps the session alive
//! anyway. The command is exec'd, which closes it; PID 1 is non-dumpable and `pidfd_getfd`
//! and `ptrace` are denied, so the command cannot reach PID 1's copy either, and so cannot
//! unlock the session.

use std::fs;
use std::io::Write;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context, Result};

/// How long a lock-less session directory without a `supervisor` file is left alone (see the
/// module documentation).
pub const LEGACY_GRACE: Duration = Duration::from_secs(60);

/// How many fresh ids `create` tries before it gives up.
const CREATE_ATTEMPTS: usize = 64;

/// One session's directory and the lock that marks it live; both removed on drop, the lock
/// released last.
pub struct Session {
    /// Its id (also the container id).
    pub id: String,
    /// `sessions/<id>`.
    pub dir: PathBuf,
    /// `sessions/<id>.lock`.
    lock_path: PathBuf,
    /// Holds the exclusive lock on `lock_path` until the session is dropped. Declared last:
    /// it is closed after `drop` has removed the directory and the lock file.
    _lock: fs::File,
}

impl Session {
    /// The OCI bundle directory.
    pub fn bundle(&self) -> PathBuf {
        self.dir.join("bundle")
    }
    /// libcontainer's state root.
    pub fn state(&self) -> PathBuf {
        self.dir.join("state")
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        if let Err(e) = remove_tree(&self.dir) {
            tracing::warn!(dir = %self.dir.display(), "cannot remove session directory: {e}");
            if e.kind() != std::io::ErrorKind::NotFound {
                // Keep the lock file: the next start sweeps both once this process is gone.
                return;
            }
        }
        if let Err(e) = fs::remove_file(&self.lock_path) {
            tracing::warn!(lock = %self.lock_path.display(), "cannot remove session lock: {e}");
        }
    }
}

/// Remove `path` and everything under it, as `fs::remove_dir_all` does: a symlink is removed,
/// never followed; a directory is opened `O_NOFOLLOW` and its entries are removed through that
/// descriptor; an entry that vanished meanwhile is not an error (only `path` itself missing
/// is: `NotFound`). But an empty directory costs one `rmdir` here, where `remove_dir_all`
/// opens, inspects, lists and closes it first (eight system calls): a session's bundle holds
/// a dozen empty mount points, and this runs on every session's exit path (issue 18).
pub(crate) fn remove_tree(path: &Path) -> std::io::Result<()> {
    remove_at(None, path)
}

/// [`remove_tree`] for `name` in the directory `dir` (`None`: `name` is a path).
fn remove_at<P: ?Sized + nix::NixPath>(dir: Option<RawFd>, name: &P) -> std::io::Result<()> {
    use nix::dir::{Dir, Type};
    use nix::errno::Errno;
    use nix::fcntl::OFlag;
    use nix::unistd::{unlinkat, UnlinkatFlags};
    match unlinkat(dir, name, UnlinkatFlags::RemoveDir) {
        Ok(()) => return Ok(()),
        Err(Errno::ENOTEMPTY | Errno::EEXIST) => {}
        // A file or a symlink: itself.
        Err(Errno::ENOTDIR) => return Ok(unlinkat(dir, name, UnlinkatFlags::NoRemoveDir)?),
        Err(e) => return Err(e.into()),
    }
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let mut d = match Dir::openat(dir, name, flags, nix::sys::stat::Mode::empty()) {
        Ok(d) => d,
        // Replaced by a file or symlink since the rmdir: that entry itself.
        Err(Errno::ENOTDIR | Errno::ELOOP) => {
            return Ok(unlinkat(dir, name, UnlinkatFlags::NoRemoveDir)?)
        }
        Err(e) => return Err(e.into()),
    };
    let fd = d.as_raw_fd();
    let mut subdirs = vec![];
    for e in d.iter() {
        let e = e?;
        let n = e.file_name();
        if n == c"." || n == c".." {
            continue;
        }
        if e.file_type() == Some(Type::Directory) {
            subdirs.push(n.to_owned());
            continue;
        }
        match unlinkat(Some(fd), n, UnlinkatFlags::NoRemoveDir) {
            Ok(()) | Err(Errno::ENOENT) => {}
            // The listing did not say it was one.
            Err(Errno::EISDIR) => subdirs.push(n.to_owned()),
            Err(e) => return Err(e.into()),
        }
    }
    for n in &subdirs {
        match remove_at(Some(fd), n.as_c_str()) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            r => r?,
        }
    }
    drop(d);
    Ok(unlinkat(dir, name, UnlinkatFlags::RemoveDir)?)
}

/// Make `p` (a directory only this uid may use) or check the one that is there. Idempotent:
/// two first starts racing to make it both succeed.
fn private_dir(p: &Path, uid: u32) -> Result<()> {
    match fs::DirBuilder::new().mode(0o700).create(p) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => {
            return Err(e).with_context(|| format!("creating runtime directory {}", p.display()))
        }
    }
    let m = fs::symlink_metadata(p).with_context(|| format!("checking {}", p.display()))?;
    if m.file_type().is_symlink() || !m.is_dir() {
        bail!("runtime directory {} is not a plain directory", p.display());
    }
    if m.uid() != uid || m.mode() & 0o077 != 0 {
        bail!(
            "runtime directory {} must be owned by uid {uid} with mode 0700 (found uid {} mode {:o})",
            p.display(),
            m.uid(),
            m.mode() & 0o7777
        );
    }
    Ok(())
}

/// The runtime root for this user.
pub fn runtime_root(uid: u32) -> Result<PathBuf> {
    if let Some(x) = std::env::var_os("XDG_RUNTIME_DIR").map(PathBuf::from) {
        if x.is_absolute()
            && fs::metadata(&x)
                .map(|m| m.uid() == uid && m.is_dir())
                .unwrap_or(false)
        {
            let root = x.join("vetto");
            private_dir(&root, uid)?;
            return Ok(root);
        }
    }
    // No runtime directory (no systemd login session): /dev/shm when it is a tmpfs, as
    // XDG_RUNTIME_DIR would be. A session creates a few dozen files and directories and
    // removes them at its end; on a disk file system that churn costs milliseconds per start
    // (ext4 inode allocation), on tmpfs microseconds. Else the temporary directory.
    // /dev/shm is world-writable: a name another user took there is passed over (with a
    // warning) for the temporary directory, which may be private to the user.
    if is_tmpfs(Path::new("/dev/shm")) {
        let root = PathBuf::from(format!("/dev/shm/vetto-{uid}"));
        match private_dir(&root, uid) {
            Ok(()) => return Ok(root),
            Err(e) => eprintln!("vetto: not using {}: {e:#}", root.display()),
        }
    }
    let root = std::env::temp_dir().join(format!("vetto-{uid}"));
    private_dir(&root, uid)?;
    Ok(root)
}

/// The project walk's listing cache for `project` (see `vetto_bundle::listing`). It decides
/// what is masked, so it lives where no sandbox can reach: in vetto's audit directory
/// (`~/.local/state/vetto/audit/listings`), which every sandbox has masked and no writable
/// root may hold (`policy_cmd::audit_mask`). None when that directory does not exist (audit
/// never set up), cannot be made private, or lies inside or around the project.
pub fn listing_cache(uid: u32, project: &Path) -> vetto_bundle::listing::ListingCache {
    use vetto_bundle::listing::ListingCache;
    let Some(audit) = vetto_broker::audit::user_dir().and_then(|d| d.canonicalize().ok()) else {
        return ListingCache::none();
    };
    if audit.starts_with(project) || project.starts_with(&audit) {
        return ListingCache::none();
    }
    let dir = audit.join("listings");
    if private_dir(&dir, uid).is_err() {
        return ListingCache::none();
    }
    // One file per project: those not used for a week go.
    if let Ok(rd) = fs::read_dir(&dir) {
        let week = std::time::Duration::from_secs(7 * 24 * 3600);
        for e in rd.flatten() {
            let stale = e
                .metadata()
                .and_then(|m| m.modified())
                .is_ok_and(|t| t.elapsed().is_ok_and(|age| age > week));
            if stale {
                let _ = fs::remove_file(e.path());
            }
        }
    }
    ListingCache::open(&dir, project)
}

/// Is `p` a directory on a tmpfs?
fn is_tmpfs(p: &Path) -> bool {
    nix::sys::statfs::statfs(p).is_ok_and(|s| s.filesystem_type() == nix::sys::statfs::TMPFS_MAGIC)
        && fs::metadata(p).is_ok_and(|m| m.is_dir())
}

/// Whether process `pid` exists and has not exited. A zombie has: a supervisor killed after
/// its front (`front.rs`) is reparented to the host's init, which may take seconds to reap it,
/// and until then `/proc/PID` is there, though nothing of it runs or can use what it left.
pub fn running(pid: u32) -> bool {
    stat_fields(pid).is_some_and(|f| !(f.starts_with('Z') || f.starts_with('X')))
}

/// Start time of a process in clock ticks since boot (field 22 of /proc/PID/stat).
pub fn start_time(pid: u32) -> Option<u64> {
    stat_fields(pid)?.split_whitespace().nth(19)?.parse().ok()
}

/// The fields of `/proc/PID/stat` after the process's name, from its state (field 3) on. The
/// name may hold any byte, `)` and invalid UTF-8 included (it is the program's file name, or
/// what the process set): the fields start after its last `)`, and are ASCII.
fn stat_fields(pid: u32) -> Option<String> {
    use std::io::Read;
    // One read: procfs gives the whole line at once to a buffer that holds it (at most 52
    // numbers of up to 20 digits and a 16-byte name, ~1,200 bytes); `read_to_string` grows
    // its buffer from 32 bytes, a read each time.
    let mut f = fs::File::open(format!("/proc/{pid}/stat")).ok()?;
    let mut b = [0u8; 2048];
    let n = f.read(&mut b).ok()?;
    let stat = b.get(..n)?;
    let close = stat.iter().rposition(|&c| c == b')')?;
    let after = std::str::from_utf8(stat.get(close + 1..)?).ok()?;
    Some(after.trim_start().to_string())
}

/// `flock(LOCK_EX|LOCK_NB)`: `Ok(false)` when somebody else holds it.
fn try_lock(f: &fs::File) -> std::io::Result<bool> {
    loop {
        // SAFETY: flock on a descriptor we own; no memory is passed.
        if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
            return Ok(true);
        }
        let e = std::io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::EWOULDBLOCK) => return Ok(false),
            _ => return Err(e),
        }
    }
}

/// Does `path` (not followed) still name the file open as `f`?
fn still_named(f: &fs::File, path: &Path) -> std::io::Result<bool> {
    let open = f.metadata()?;
    match fs::symlink_metadata(path) {
        Ok(m) => Ok(m.dev() == open.dev() && m.ino() == open.ino()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e),
    }
}

/// Create `lock` exclusively and lock it (steps 1–3 of the protocol). `Ok(None)`: the name
/// is taken, or a sweeper took the file between its creation and our lock; try another.
/// `between` runs between creation and locking (tests put a sweeper there).
fn claim(lock: &Path, between: &mut dyn FnMut()) -> Result<Option<fs::File>> {
    let f = match fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_CLOEXEC)
        .open(lock)
    {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => return Ok(None),
        Err(e) => return Err(e).with_context(|| format!("creating {}", lock.display())),
    };
    between();
    if !try_lock(&f).with_context(|| format!("locking {}", lock.display()))? {
        return Ok(None);
    }
    if !still_named(&f, lock).with_context(|| format!("checking {}", lock.display()))? {
        return Ok(None);
    }
    Ok(Some(f))
}

/// Remove sessions that are not live (their supervisor crashed or was SIGKILLed), never a
/// live one; see the module documentation for the protocol. Returns the ids of those removed
/// (for the audit trail: a session whose end was never recorded is ended as `lost`).
pub fn sweep_stale(root: &Path) -> Vec<String> {
    let mut swept = vec![];
    let sessions = root.join("sessions");
    let Ok(rd) = fs::read_dir(&sessions) else {
        return swept;
    };
    let mut ids = std::collections::BTreeSet::new();
    for e in rd.flatten() {
        let Ok(name) = e.file_name().into_string() else {
            continue;
        };
        let id = name.strip_suffix(".lock").unwrap_or(&name);
        if id.starts_with("vetto-") && !id.contains('/') {
            ids.insert(id.to_string());
        }
    }
    for id in ids {
        match sweep_one(&sessions, &id) {
            Ok(true) => swept.push(id),
            Ok(false) => {}
            Err(err) => tracing::warn!(id, "cannot sweep stale session: {err:#}"),
        }
    }
    swept
}

/// Sweep session `id` if it is stale: whether it was.
fn sweep_one(sessions: &Path, id: &str) -> Result<bool> {
    let dir = sessions.join(id);
    let lock_path = sessions.join(format!("{id}.lock"));
    let lock = match fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(&lock_path)
    {
        Ok(f) => {
            if !f.metadata()?.is_file() {
                bail!("{} is not a regular file", lock_path.display());
            }
            if !try_lock(&f).context("locking")? || !still_named(&f, &lock_path)? {
                // Live, or somebody else has just finished with it.
                return Ok(false);
            }
            f
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if !orphan_is_stale(&dir)? {
                return Ok(false);
            }
            match claim(&lock_path, &mut || {})? {
                Some(f) => f,
                None => return Ok(false),
            }
        }
        Err(e) => return Err(e).with_context(|| format!("opening {}", lock_path.display())),
    };
    tracing::info!(dir = %dir.display(), "sweeping stale session");
    match remove_tree(&dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).with_context(|| format!("removing {}", dir.display())),
    }
    fs::remove_file(&lock_path).with_context(|| format!("removing {}", lock_path.display()))?;
    drop(lock);
    Ok(true)
}

/// A session directory without a lock file: may it be removed? (See the module docs.)
fn orphan_is_stale(dir: &Path) -> Result<bool> {
    let m = match fs::symlink_metadata(dir) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(e).with_context(|| format!("checking {}", dir.display())),
    };
    if !m.is_dir() {
        // Not a session; a symlink is never followed, so leave whatever this is alone.
        return Ok(false);
    }
    match fs::read_to_string(dir.join("supervisor")) {
        Ok(s) => {
            let supervisor = s.trim().split_once(' ').and_then(|(pid, start)| {
                Some((pid.parse::<u32>().ok()?, start.parse::<u64>().ok()?))
            });
            Ok(supervisor.is_none_or(|(pid, start)| start_time(pid) != Some(start)))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let age = m
                .modified()
                .ok()
                .and_then(|t| t.elapsed().ok())
                .unwrap_or_default();
            Ok(age >= LEGACY_GRACE)
        }
        Err(e) => Err(e).with_context(|| format!("reading {}/supervisor", dir.display())),
    }
}

/// A fresh session id: `vetto-<pid>-<12 random hex digits>`.
pub fn new_id() -> String {
    let mut rnd = [0u8; 6];
    // SAFETY: getrandom writes at most rnd.len() bytes into our buffer.
    let n = unsafe { libc::getrandom(rnd.as_mut_ptr().cast(), rnd.len(), 0) };
    if n != rnd.len() as isize {
        // No entropy source: the clock still makes ids distinct; `create` retries on a clash.
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos();
        rnd.copy_from_slice(&t.to_le_bytes()[..6]);
    }
    format!(
        "vetto-{}-{}",
        std::process::id(),
        rnd.iter().map(|b| format!("{b:02x}")).collect::<String>()
    )
}

/// Create a new session: its lock, taken first, then its directory.
pub fn create(root: &Path) -> Result<Session> {
    create_with(root, &mut || {})
}

fn create_with(root: &Path, between: &mut dyn FnMut()) -> Result<Session> {
    let uid = fs::symlink_metadata(root)
        .with_context(|| format!("checking {}", root.display()))?
        .uid();
    let sessions = root.join("sessions");
    private_dir(&sessions, uid).context("creating the sessions directory")?;
    for _ in 0..CREATE_ATTEMPTS {
        let id = new_id();
        let lock_path = sessions.join(format!("{id}.lock"));
        let Some(lock) = claim(&lock_path, between)? else {
            continue;
        };
        let dir = sessions.join(&id);
        if let Err(e) = fs::DirBuilder::new().mode(0o700).create(&dir) {
            // Our lock is held, so nobody else unlinks the lock file: it is ours to remove.
            let _ = fs::remove_file(&lock_path);
            if e.kind() == std::io::ErrorKind::AlreadyExists {
                // A lock-less leftover with this very id; the sweeper deals with it.
                continue;
            }
            return Err(e).with_context(|| format!("creating {}", dir.display()));
        }
        let s = Session {
            id,
            dir,
            lock_path,
            _lock: lock,
        };
        let pid = std::process::id();
        let mut f = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(s.dir.join("supervisor"))
            .context("writing the supervisor file")?;
        // One write: what reads it never sees half a line.
        f.write_all(format!("{pid} {}\n", start_time(pid).unwrap_or(0)).as_bytes())
            .context("writing the supervisor file")?;
        fs::DirBuilder::new()
            .mode(0o700)
            .create(s.bundle())
            .context("creating the bundle directory")?;
        fs::DirBuilder::new()
            .mode(0o700)
            .create(s.state())
            .context("creating the state directory")?;
        return Ok(s);
    }
    bail!("creating a session: no free session id after {CREATE_ATTEMPTS} attempts")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    #[test]
    fn remove_tree_removes_everything_under_it_and_follows_no_symlink() {
        let t = root();
        let outside = t.path().join("outside");
        fs::create_dir_all(outside.join("kept")).expect("mkdir");
        fs::write(outside.join("kept/file"), b"x").expect("write");
        let tree = t.path().join("tree");
        for d in ["a/b/c", "a/empty", "mount/point", "d"] {
            fs::create_dir_all(tree.join(d)).expect("mkdir");
        }
        fs::write(tree.join("a/b/c/f"), b"f").expect("write");
        fs::write(tree.join("top"), b"t").expect("write");
        std::os::unix::fs::symlink(&outside, tree.join("d/link-to-dir")).expect("symlink");
        std::os::unix::fs::symlink(outside.join("kept/file"), tree.join("link-to-file"))
            .expect("symlink");
        std::os::unix::fs::symlink("/nonexistent", tree.join("dangling")).expect("symlink");
        let fifo = std::ffi::CString::new(tree.join("a/fifo").as_os_str().as_encoded_bytes())
            .expect("path");
        // SAFETY: mkfifo on a NUL-terminated path we own.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        remove_tree(&tree).expect("remove_tree");
        assert!(fs::symlink_metadata(&tree).is_err(), "the tree is gone");
        assert_eq!(fs::read(outside.join("kept/file")).expect("kept"), b"x");

        // A symlink named as the tree is removed itself; what it points to stays.
        let link = t.path().join("link");
        std::os::unix::fs::symlink(&outside, &link).expect("symlink");
        remove_tree(&link).expect("remove_tree on a symlink");
        assert!(fs::symlink_metadata(&link).is_err());
        assert!(outside.join("kept/file").exists());
        // Nothing there: NotFound, which both callers tolerate.
        let e = remove_tree(&tree).expect_err("nothing to remove");
        assert_eq!(e.kind(), std::io::ErrorKind::NotFound);
    }

    fn root() -> tempfile::TempDir {
        let t = tempfile::tempdir().expect("tempdir");
        fs::set_permissions(
            t.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o700),
        )
        .expect("chmod");
        t
    }

    fn entries(root: &Path) -> Vec<String> {
        let mut v: Vec<String> = fs::read_dir(root.join("sessions"))
            .map(|rd| {
                rd.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        v.sort();
        v
    }

    fn locked_elsewhere(p: &Path) -> bool {
        let f = fs::File::open(p).expect("open lock");
        !try_lock(&f).expect("flock")
    }

    #[test]
    fn a_live_session_is_locked_kept_by_the_sweep_and_removed_on_drop() {
        let t = root();
        let s = create(t.path()).expect("create");
        let lock = t.path().join(format!("sessions/{}.lock", s.id));
        assert!(s.bundle().is_dir() && s.state().is_dir());
        // flock belongs to the open file description: another open of it conflicts.
        assert!(locked_elsewhere(&lock));
        assert_eq!(
            sweep_stale(t.path()),
            Vec::<String>::new(),
            "a live one swept"
        );
        assert!(s.bundle().is_dir() && s.state().is_dir() && lock.is_file());
        assert_eq!(
            entries(t.path()),
            vec![s.id.clone(), format!("{}.lock", s.id)]
        );
        drop(s);
        assert!(entries(t.path()).is_empty(), "{:?}", entries(t.path()));
    }

    #[test]
    fn dead_sessions_are_swept_whatever_state_they_died_in() {
        let t = root();
        let sessions = t.path().join("sessions");
        fs::create_dir(&sessions).expect("mk");
        // Died after making its directory (lock file left, nobody holds it).
        fs::create_dir_all(sessions.join("vetto-1-aa/bundle/rootfs")).expect("mk");
        fs::write(sessions.join("vetto-1-aa.lock"), "").expect("w");
        // Died between its lock file and its directory.
        fs::write(sessions.join("vetto-2-bb.lock"), "").expect("w");
        // A lock-less directory whose supervisor is dead (from a vetto before lock files).
        fs::create_dir_all(sessions.join("vetto-3-cc/state")).expect("mk");
        fs::write(sessions.join("vetto-3-cc/supervisor"), "999999 1\n").expect("w");
        // Each swept one is named (its audit record, if it has no end, is ended as lost).
        assert_eq!(
            sweep_stale(t.path()),
            ["vetto-1-aa", "vetto-2-bb", "vetto-3-cc"]
        );
        assert!(entries(t.path()).is_empty(), "{:?}", entries(t.path()));
    }

    #[test]
    fn lockless_directories_of_a_live_or_starting_older_vetto_are_kept() {
        let t = root();
        let sessions = t.path().join("sessions");
        fs::create_dir(&sessions).expect("mk");
        let pid = std::process::id();
        fs::create_dir(sessions.join("vetto-4-dd")).expect("mk");
        let start = start_time(pid).expect("start time");
        fs::write(
            sessions.join("vetto-4-dd/supervisor"),
            format!("{pid} {start}\n"),
        )
        .expect("w");
        // Just made, supervisor file not written yet.
        fs::create_dir(sessions.join("vetto-5-ee")).expect("mk");
        // Not a session at all.
        fs::create_dir(sessions.join("other")).expect("mk");
        std::os::unix::fs::symlink("/", sessions.join("vetto-6-ff")).expect("ln");
        assert_eq!(sweep_stale(t.path()), Vec::<String>::new());
        assert_eq!(
            entries(t.path()),
            vec!["other", "vetto-4-dd", "vetto-5-ee", "vetto-6-ff"]
        );
    }

    #[test]
    fn a_process_whose_name_is_not_utf8_and_holds_a_parenthesis_is_read() {
        use std::os::unix::ffi::OsStrExt;
        let t = root();
        // A process's name is its program's file name: `sleep` under another one.
        let name = std::ffi::OsStr::from_bytes(b"x) 1 2 \xff");
        let prog = t.path().join(name);
        std::os::unix::fs::symlink("/bin/sleep", &prog).expect("ln");
        let mut child = std::process::Command::new(&prog)
            .arg("10")
            .spawn()
            .expect("spawn");
        let started = start_time(child.id());
        let live = running(child.id());
        let _ = child.kill();
        let _ = child.wait();
        let ours = start_time(std::process::id()).expect("ours");
        assert!(
            started.is_some_and(|s| s >= ours),
            "{started:?} (this process: {ours})"
        );
        assert!(live, "a live process with such a name read as gone");
    }

    #[test]
    fn a_symlinked_lock_file_is_not_followed() {
        let t = root();
        let sessions = t.path().join("sessions");
        fs::create_dir(&sessions).expect("mk");
        let target = t.path().join("target");
        fs::write(&target, "keep").expect("w");
        std::os::unix::fs::symlink(&target, sessions.join("vetto-7-aa.lock")).expect("ln");
        sweep_stale(t.path());
        assert_eq!(fs::read_to_string(&target).expect("r"), "keep");
        assert_eq!(entries(t.path()), vec!["vetto-7-aa.lock"]);
    }

    #[test]
    fn a_sweep_between_lock_creation_and_locking_costs_the_id_not_the_session() {
        let t = root();
        // A sweep runs right after the creator made its lock file, before it locked it: the
        // sweeper takes the unlocked file for a leftover and removes it. The creator must
        // notice and start again with a fresh id, and its session must be whole.
        let mut swept = 0;
        let mut lost = vec![];
        let s = create_with(t.path(), &mut || {
            if swept == 0 {
                lost = entries(t.path());
                sweep_stale(t.path());
                assert!(entries(t.path()).is_empty(), "swept {lost:?}");
            }
            swept += 1;
        })
        .expect("create");
        assert_eq!(swept, 2, "the first id must be given up");
        assert_eq!(lost.len(), 1);
        assert_ne!(lost[0], format!("{}.lock", s.id));
        assert!(s.bundle().is_dir() && s.state().is_dir());
        drop(s);
        assert!(entries(t.path()).is_empty());
    }

    #[test]
    fn a_sweeper_holding_the_new_lock_file_costs_the_id_not_the_session() {
        let t = root();
        // A sweeper has the creator's fresh lock file open and locked (it is between its
        // flock and its unlink): the creator's flock fails and it starts again.
        let mut held: Vec<fs::File> = vec![];
        let mut calls = 0;
        let s = create_with(t.path(), &mut || {
            calls += 1;
            if held.is_empty() {
                let name = entries(t.path()).pop().expect("the new lock file");
                let f = fs::File::open(t.path().join("sessions").join(name)).expect("open");
                assert!(try_lock(&f).expect("flock"));
                held.push(f);
            }
        })
        .expect("create");
        assert_eq!(calls, 2);
        assert!(s.bundle().is_dir());
        // The creator left the held file alone: it is the sweeper's to remove.
        assert_eq!(entries(t.path()).len(), 3, "{:?}", entries(t.path()));
        drop(held);
        sweep_stale(t.path());
        assert_eq!(
            entries(t.path()),
            vec![s.id.clone(), format!("{}.lock", s.id)]
        );
    }

    #[test]
    fn sweepers_racing_creators_never_remove_a_live_session() {
        let t = Arc::new(root());
        let stop = Arc::new(AtomicBool::new(false));
        let sweepers: Vec<_> = (0..3)
            .map(|_| {
                let (t, stop) = (t.clone(), stop.clone());
                std::thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        sweep_stale(t.path());
                    }
                })
            })
            .collect();
        let creators: Vec<_> = (0..4)
            .map(|_| {
                let t = t.clone();
                std::thread::spawn(move || -> Result<()> {
                    for i in 0..200 {
                        let s = create(t.path())?;
                        let cfg = s.bundle().join("config.json");
                        fs::write(&cfg, format!("{i}")).context("write into the bundle")?;
                        std::thread::yield_now();
                        fs::create_dir(s.bundle().join("rootfs")).context("mkdir rootfs")?;
                        if fs::read_to_string(&cfg).context("read back")? != format!("{i}") {
                            bail!("config.json changed under us");
                        }
                        drop(s);
                    }
                    Ok(())
                })
            })
            .collect();
        for c in creators {
            c.join()
                .expect("creator thread")
                .expect("a live session lost its state");
        }
        stop.store(true, Ordering::Relaxed);
        for s in sweepers {
            s.join().expect("sweeper thread");
        }
        assert!(entries(t.path()).is_empty(), "{:?}", entries(t.path()));
    }

    #[test]
    fn two_first_starts_both_make_the_sessions_directory() {
        let t = Arc::new(root());
        let barrier = Arc::new(std::sync::Barrier::new(8));
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let (t, b) = (t.clone(), barrier.clone());
                std::thread::spawn(move || {
                    b.wait();
                    create(t.path()).map(drop)
                })
            })
            .collect();
        for th in threads {
            th.join().expect("thread").expect("create");
        }
    }
}
