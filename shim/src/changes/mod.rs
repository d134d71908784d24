//! Review mode's change sets: the upper layer of the project's overlay, kept in the user's state
//! directory (`$XDG_STATE_HOME/vetto/changes/ID/`, 0700) outside anything the sandbox can reach,
//! with what `vetto changes` needs to list, diff, apply and discard it.
//!
//! A change set's directory holds `meta.json` (the project it was made from, when its first
//! session started, the project's protected paths), `upper/` and `work/` (overlayfs' layers) and
//! `lock` (held, `flock`, by a session running on the set and by every `vetto changes` command
//! that reads or changes it, so none sees a half-written layer).
//!
//! The upper layer is the sandbox's writing and is read as hostile: see [`scan`] for what is
//! refused and [`apply`] for how the project is changed.

pub mod apply;
pub mod diff;
pub mod fsat;
pub mod scan;
pub mod session;

use std::collections::BTreeMap;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// Everything that can go wrong with a change set.
#[derive(Debug, thiserror::Error)]
pub enum ChangesError {
    /// Neither XDG_STATE_HOME nor HOME names a directory.
    #[error("changes: no state directory for change sets (set HOME or XDG_STATE_HOME)")]
    NoStateDir,
    /// A malformed id.
    #[error("changes: {0:?} is not a change set id (lower-case letters, digits and '-', 1 to 64)")]
    BadId(String),
    /// No set with that id.
    #[error("changes: there is no change set {0} (`vetto changes list` shows them)")]
    NotFound(String),
    /// Another process holds the set.
    #[error("changes: change set {0} is in use (a session runs on it, or another `vetto changes` command)")]
    Busy(String),
    /// A file system operation failed.
    #[error("changes: {what} {}: {source}", path.display())]
    Io {
        /// What was being done.
        what: &'static str,
        /// On what.
        path: PathBuf,
        /// Why it failed.
        #[source]
        source: io::Error,
    },
    /// `meta.json` is unreadable or malformed.
    #[error("changes: {}: {msg}", path.display())]
    Meta {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        msg: String,
    },
    /// The set's directory is not the private directory vetto made.
    #[error("changes: {} is not private to you ({why}); vetto will not use it", path.display())]
    NotPrivate {
        /// The directory.
        path: PathBuf,
        /// Owner or mode.
        why: String,
    },
    /// The project is gone or is another directory now.
    #[error("changes: the project {} is not the directory change set {id} was made from ({why})", path.display())]
    ProjectMoved {
        /// The set.
        id: String,
        /// The project path.
        path: PathBuf,
        /// What differs.
        why: String,
    },
    /// A path argument names nothing in the set, or is not a relative path in the project.
    #[error("changes: {0}")]
    BadPath(String),
    /// Review mode cannot be set up here.
    #[error("review mode: {0}")]
    Review(String),
    /// The set's last session ran before the system restarted, with its writes left unsynced
    /// (see [`ChangeSet::unsynced_before_restart`]).
    #[error("changes: change set {0} was last used before the system restarted, and its session's writes were left to the kernel to flush (review mode's overlay is mounted 'volatile'): after a crash or power loss, files in it may be incomplete. It is not resumed, and `apply` needs --accept-unsynced; `vetto changes diff {0}` shows what it holds, `vetto changes discard {0}` drops it")]
    UnsyncedBeforeRestart(String),
}

fn io_err<'a>(what: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> ChangesError + 'a {
    move |source| ChangesError::Io {
        what,
        path: path.to_path_buf(),
        source,
    }
}

/// One session that ran on the set.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Span {
    /// Start, milliseconds since the epoch.
    pub started_ms: i64,
    /// End, milliseconds since the epoch (absent while it runs, or if it was killed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_ms: Option<i64>,
}

/// `meta.json`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Meta {
    /// Format version (1).
    pub version: u32,
    /// The set's id.
    pub id: String,
    /// The project directory (absolute, canonical at creation).
    pub project: PathBuf,
    /// The project directory's device and inode at creation: a different directory at the same
    /// path later is refused.
    pub project_dev: u64,
    /// See `project_dev`.
    pub project_ino: u64,
    /// When the first session started (nanoseconds since the epoch, taken before the sandbox
    /// existed): a project entry whose ctime is this or later was changed while the set was
    /// open, and `apply` refuses it without `--force`.
    pub started_ns: i64,
    /// The project-relative protected paths (trust-handoff files) of the policy at creation.
    pub protected: Vec<String>,
    /// The sessions that ran on the set.
    pub sessions: Vec<Span>,
    /// Paths applied already, with the ctime the apply left on the project's entry: that
    /// change is vetto's own and does not count as the user's.
    #[serde(default)]
    pub accepted: BTreeMap<String, i64>,
    /// The project's directories when the first session started (relative path -> inode): a
    /// directory moved in since (its inode differs) is the user's, and `apply` does not write
    /// into it without `--force` (a file moved with its directory keeps its own ctime).
    #[serde(default)]
    pub dirs: BTreeMap<String, u64>,
    /// The boot (`/proc/sys/kernel/random/boot_id`) in which the last session ran. The overlay
    /// is mounted `volatile` (its writes are not synced when the session ends): a set whose
    /// last session ran in an earlier boot may have lost writes in a crash, see
    /// [`ChangeSet::unsynced_before_restart`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boot_id: Option<String>,
}

/// Every directory below `root` (relative path -> inode), not through a symlink and not
/// into another file system; at most `limit` of them (`None` beyond: too large to record).
pub fn record_dirs(root: &fsat::Dir, limit: usize) -> Option<BTreeMap<String, u64>> {
    let mut out = BTreeMap::new();
    // Paths, not descriptors, wait on the stack: a wide tree must not hold one open each.
    let mut stack: Vec<String> = vec![String::new()];
    while let Some(rel) = stack.pop() {
        let Ok(d) = root.open_beneath(Path::new(&rel)) else {
            continue;
        };
        for n in d.subdirs().ok()? {
            let Some(name) = n.to_str() else { continue };
            let Ok(Some(st)) = d.stat(&n) else { continue };
            let r = if rel.is_empty() {
                name.to_string()
            } else {
                format!("{rel}/{name}")
            };
            out.insert(r.clone(), st.ino);
            if out.len() > limit {
                return None;
            }
            stack.push(r);
        }
    }
    Some(out)
}

/// An open, locked change set.
#[derive(Debug)]
pub struct ChangeSet {
    /// Its directory.
    pub dir: PathBuf,
    /// Its metadata.
    pub meta: Meta,
    _lock: std::fs::File,
}

/// Is `id` a well-formed change set id?
pub fn valid_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 64
        && id
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !id.starts_with('-')
}

/// `state_dir()/changes`: where change sets live (not made here).
pub fn dir() -> Option<PathBuf> {
    vetto_broker::audit::state_dir().map(|d| d.join("changes"))
}

/// [`dir`], created 0700 if absent and checked to be the caller's and private.
pub fn base_dir() -> Result<PathBuf, ChangesError> {
    let d = dir().ok_or(ChangesError::NoStateDir)?;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&d)
        .map_err(io_err("create", &d))?;
    private(&d)?;
    Ok(d)
}

fn private(d: &Path) -> Result<(), ChangesError> {
    let m = std::fs::symlink_metadata(d).map_err(io_err("inspect", d))?;
    let why = if !m.is_dir() {
        Some("not a directory".to_string())
    } else if m.uid() != nix::unistd::geteuid().as_raw() {
        Some(format!("owned by uid {}", m.uid()))
    } else if m.mode() & 0o077 != 0 {
        Some(format!("mode {:o}", m.mode() & 0o7777))
    } else {
        None
    };
    match why {
        Some(why) => Err(ChangesError::NotPrivate {
            path: d.to_path_buf(),
            why,
        }),
        None => Ok(()),
    }
}

fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

fn new_id() -> String {
    let t = chrono::Local::now().format("%Y%m%d-%H%M%S");
    let mut b = [0u8; 3];
    let _ = getrandom_fill(&mut b);
    format!("{t}-{:02x}{:02x}{:02x}", b[0], b[1], b[2])
}

fn getrandom_fill(b: &mut [u8]) -> io::Result<()> {
    // SAFETY: getrandom writes at most `b.len()` bytes into `b`, which we own.
    let n = unsafe { libc::getrandom(b.as_mut_ptr().cast::<libc::c_void>(), b.len(), 0) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

fn lock(dir: &Path, id: &str) -> Result<std::fs::File, ChangesError> {
    let p = dir.join("lock");
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&p)
        .map_err(io_err("open", &p))?;
    // SAFETY: flock on a descriptor we own; no memory is involved.
    if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        let e = io::Error::last_os_error();
        return Err(match e.raw_os_error() {
            Some(libc::EWOULDBLOCK) => ChangesError::Busy(id.to_string()),
            _ => ChangesError::Io {
                what: "lock",
                path: p,
                source: e,
            },
        });
    }
    Ok(f)
}

impl ChangeSet {
    /// Make a new, empty change set for `project` (canonical, absolute) with the policy's
    /// project-relative `protected` paths, and `first`, the session it is made for, recorded
    /// in the one `meta.json` written. The upper layer's root gets the project root's
    /// permission bits (the overlay's root shows them).
    pub fn create(
        project: &Path,
        protected: Vec<String>,
        first: Span,
    ) -> Result<Self, ChangesError> {
        let base = base_dir()?;
        let pm = std::fs::metadata(project).map_err(io_err("inspect", project))?;
        let id = new_id();
        let dir = base.join(&id);
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&dir)
            .map_err(io_err("create", &dir))?;
        let made = (|| {
            let lk = lock(&dir, &id)?;
            for (sub, mode) in [("upper", pm.mode() & 0o1777), ("work", 0o700)] {
                let p = dir.join(sub);
                std::fs::DirBuilder::new()
                    .mode(0o700)
                    .create(&p)
                    .map_err(io_err("create", &p))?;
                std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode))
                    .map_err(io_err("chmod", &p))?;
            }
            let meta = Meta {
                version: 1,
                id: id.clone(),
                project: project.to_path_buf(),
                project_dev: pm.dev(),
                project_ino: pm.ino(),
                started_ns: now_ns(),
                protected,
                sessions: vec![first],
                accepted: BTreeMap::new(),
                dirs: BTreeMap::new(),
                boot_id: boot_id(),
            };
            let cs = Self {
                dir: dir.clone(),
                meta,
                _lock: lk,
            };
            cs.save()?;
            Ok(cs)
        })();
        if made.is_err() {
            let _ = std::fs::remove_dir_all(&dir);
        }
        made
    }

    /// Open and lock the set `id`.
    pub fn open(id: &str) -> Result<Self, ChangesError> {
        if !valid_id(id) {
            return Err(ChangesError::BadId(id.to_string()));
        }
        let dir = base_dir()?.join(id);
        match std::fs::symlink_metadata(&dir) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(ChangesError::NotFound(id.to_string()))
            }
            Err(e) => return Err(io_err("inspect", &dir)(e)),
            Ok(_) => private(&dir)?,
        }
        let lk = lock(&dir, id)?;
        let meta = read_meta(&dir)?;
        if meta.id != id {
            return Err(ChangesError::Meta {
                path: dir.join("meta.json"),
                msg: format!("names set {:?}", meta.id),
            });
        }
        Ok(Self {
            dir,
            meta,
            _lock: lk,
        })
    }

    /// The upper layer.
    pub fn upper(&self) -> PathBuf {
        self.dir.join("upper")
    }

    /// overlayfs' work directory.
    pub fn work(&self) -> PathBuf {
        self.dir.join("work")
    }

    /// Write `meta.json` (a new file renamed over the old one).
    pub fn save(&self) -> Result<(), ChangesError> {
        let p = self.dir.join("meta.json");
        let tmp = self.dir.join("meta.json.tmp");
        let body = serde_json::to_vec_pretty(&self.meta).map_err(|e| ChangesError::Meta {
            path: p.clone(),
            msg: e.to_string(),
        })?;
        let _ = std::fs::remove_file(&tmp);
        {
            use std::io::Write;
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .custom_flags(libc::O_NOFOLLOW)
                .open(&tmp)
                .map_err(io_err("write", &tmp))?;
            f.write_all(&body).map_err(io_err("write", &tmp))?;
        }
        std::fs::rename(&tmp, &p).map_err(io_err("write", &p))
    }

    /// The project directory, opened and checked to be the one the set was made from.
    pub fn project_dir(&self) -> Result<fsat::Dir, ChangesError> {
        let p = &self.meta.project;
        let moved = |why: String| ChangesError::ProjectMoved {
            id: self.meta.id.clone(),
            path: p.clone(),
            why,
        };
        let d = fsat::Dir::open(p).map_err(|e| moved(e.to_string()))?;
        let st = d.stat_self().map_err(|e| moved(e.to_string()))?;
        if (st.dev, st.ino) != (self.meta.project_dev, self.meta.project_ino) {
            return Err(moved("another directory is there now".into()));
        }
        Ok(d)
    }

    /// The upper layer, opened.
    pub fn upper_dir(&self) -> Result<fsat::Dir, ChangesError> {
        let p = self.upper();
        fsat::Dir::open(&p).map_err(io_err("open", &p))
    }

    /// Scan the upper layer against the project.
    pub fn scan(&self) -> Result<Vec<scan::Entry>, ChangesError> {
        let upper = self.upper_dir()?;
        let project = self.project_dir()?;
        scan::scan(&upper, &project, &self.meta.protected)
    }

    /// overlayfs' own directory in [`Self::work`]: see [`overlay_work`].
    fn overlay_work(&self) -> PathBuf {
        overlay_work(&self.dir)
    }

    /// Did the set's last session run in an earlier boot, without its writes synced? See
    /// [`unsynced_before_restart`].
    pub fn unsynced_before_restart(&self) -> bool {
        unsynced_before_restart(&self.dir, &self.meta)
    }

    /// Flush the upper layer's file system and report a write-back error: the overlay is
    /// mounted `volatile`, so nothing else ever reports one, and a page the kernel could not
    /// write back is lost once evicted (the set would then read back stale data or zeros).
    pub fn sync_upper(&self) -> Result<(), ChangesError> {
        let upper = self.upper();
        let d = std::fs::File::open(&upper).map_err(io_err("open", &upper))?;
        // SAFETY: syncfs on a descriptor we own; no memory is involved.
        if unsafe { libc::syncfs(d.as_raw_fd()) } != 0 {
            return Err(ChangesError::Io {
                what: "flush (syncfs) the file system of",
                path: upper,
                source: io::Error::last_os_error(),
            });
        }
        Ok(())
    }

    /// Before a session mounts the overlay again: overlayfs refuses a work directory that still
    /// holds the last `volatile` mount's marker, so its directory is removed (the overlay makes
    /// it again). The set's writes are flushed first (a crash after the marker is gone must not
    /// find them lost), and a set not known to be whole is refused.
    pub fn clear_overlay_work(&self) -> Result<(), ChangesError> {
        if self.unsynced_before_restart() {
            return Err(ChangesError::UnsyncedBeforeRestart(self.meta.id.clone()));
        }
        let ww = self.overlay_work();
        match std::fs::symlink_metadata(&ww) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(io_err("inspect", &ww)(e)),
            Ok(_) => {}
        }
        self.sync_upper()?;
        let work = self.work();
        let parent = fsat::Dir::open(&work).map_err(io_err("open", &work))?;
        parent
            .remove_all(std::ffi::OsStr::new("work"))
            .map_err(io_err("remove", &ww))
    }

    /// Discard the set, the removal left for later: its directory is renamed out of the
    /// listing at once (one rename), and [`Trash::remove`] removes it.
    pub fn discard_later(self) -> Result<Trash, ChangesError> {
        // The set lives in the base directory, checked when it was made or opened.
        let base = match self.dir.parent() {
            Some(p) => p.to_path_buf(),
            None => base_dir()?,
        };
        let name = trash_name(&self.meta.id);
        let to = base.join(&name);
        std::fs::rename(&self.dir, &to).map_err(io_err("remove", &self.dir))?;
        Ok(Trash {
            base,
            name,
            _lock: self._lock,
        })
    }

    /// Remove the set: its layers, metadata and lock.
    pub fn discard(self) -> Result<(), ChangesError> {
        // overlayfs leaves `work/work` with mode 000; its owner may still open it after a chmod.
        let ww = self.overlay_work();
        let _ = std::fs::set_permissions(&ww, std::fs::Permissions::from_mode(0o700));
        let parent = fsat::Dir::open(&base_dir()?).map_err(io_err("open", &self.dir))?;
        let name = std::ffi::OsString::from(&self.meta.id);
        parent
            .remove_all(&name)
            .map_err(io_err("remove", &self.dir))
    }
}

/// A discarded set's directory taken out of the listing, `.trash-<id>` beside the sets (no id
/// starts with a dot, so nothing lists or opens it), still locked: removed by
/// [`Trash::remove`] once nobody waits (after vetto's status is delivered), or by the next
/// review session's [`sweep_trash`] when its owner was killed first.
#[derive(Debug)]
pub struct Trash {
    base: PathBuf,
    name: std::ffi::OsString,
    _lock: std::fs::File,
}

/// The trash name of the set `id`.
fn trash_name(id: &str) -> std::ffi::OsString {
    format!(".trash-{id}").into()
}

impl Trash {
    /// Remove it: everything but the lock, then the lock, then the directory (so a directory
    /// without its lock file is empty, or on its way to be: see [`sweep_trash`]).
    pub fn remove(self) -> Result<(), ChangesError> {
        let path = self.base.join(&self.name);
        remove_trash(&self.base, &self.name).map_err(io_err("remove", &path))
    }
}

fn remove_trash(base: &Path, name: &std::ffi::OsStr) -> io::Result<()> {
    let parent = fsat::Dir::open(base)?;
    let d = match parent.child(name) {
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return Ok(()),
        r => r?,
    };
    let lock = std::ffi::OsStr::new("lock");
    for n in d.names()? {
        if n != lock {
            d.remove_all(&n)?;
        }
    }
    d.remove_all(lock)?;
    parent.remove_all(name)
}

/// Remove what [`Trash`] left when its owner was killed before [`Trash::remove`]: every
/// `.trash-*` whose lock can be taken (its owner is gone), and every one without a lock file
/// that is empty. One still locked is its owner's, being removed. Failures are left for the
/// next sweep.
pub fn sweep_trash(base: &Path) {
    let Ok(rd) = std::fs::read_dir(base) else {
        return;
    };
    for e in rd.flatten() {
        let name = e.file_name();
        if !name.as_encoded_bytes().starts_with(b".trash-") {
            continue;
        }
        let dir = base.join(&name);
        let lock = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(dir.join("lock"));
        match lock {
            Ok(f) => {
                // SAFETY: flock on a descriptor we own; no memory is involved.
                if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
                    let _ = remove_trash(base, &name);
                }
            }
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
                let _ = std::fs::remove_dir(&dir);
            }
            Err(_) => {}
        }
    }
}

/// Did the last session of the set in `dir` (with `meta`) run in an earlier boot, without its
/// writes synced? The overlay is mounted `volatile`, so a session's end does not wait for its
/// writes to reach the disk, and overlayfs leaves `work/work/incompat/volatile` behind as the
/// sign of it. While the machine has not restarted, the page cache holds whatever the disk does
/// not yet: the set is whole. After a restart it is whole only if the system shut down cleanly
/// (which syncs); after a crash or power loss, files in it may be truncated or missing. vetto
/// cannot tell the two apart, so such a set is refused for `--resume`, and `apply` needs
/// `--accept-unsynced`. Fails closed: a marker that cannot be looked for, or a boot id that
/// cannot be read, counts as unsynced.
pub fn unsynced_before_restart(dir: &Path, meta: &Meta) -> bool {
    let ww = overlay_work(dir);
    let incompat = ww.join("incompat");
    // overlayfs makes both with mode 000: root looks in anyway, their owner only after a chmod
    // (overlayfs makes `work/work` again at the next mount).
    for d in [&ww, &incompat] {
        match std::fs::symlink_metadata(d) {
            Ok(m) if m.is_dir() => {
                let _ = nix::sys::stat::fchmodat(
                    None,
                    d.as_path(),
                    nix::sys::stat::Mode::from_bits_truncate(0o700),
                    nix::sys::stat::FchmodatFlags::NoFollowSymlink,
                );
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => return false,
            _ => break,
        }
    }
    let marker = !matches!(
        std::fs::symlink_metadata(incompat.join("volatile")),
        Err(e) if e.kind() == io::ErrorKind::NotFound
    );
    marker
        && match (meta.boot_id.as_deref(), boot_id()) {
            (Some(then), Some(now)) => then != now,
            _ => true,
        }
}

/// overlayfs' own directory in the work layer of the set in `dir` (`work/work`, mode 000; the
/// overlay makes it again at every mount).
fn overlay_work(dir: &Path) -> PathBuf {
    dir.join("work").join("work")
}

/// This boot's id (`None` where the kernel does not say).
pub fn boot_id() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
}

fn read_meta(dir: &Path) -> Result<Meta, ChangesError> {
    let p = dir.join("meta.json");
    let body = std::fs::read(&p).map_err(io_err("read", &p))?;
    let m: Meta = serde_json::from_slice(&body).map_err(|e| ChangesError::Meta {
        path: p.clone(),
        msg: e.to_string(),
    })?;
    if m.version != 1 {
        return Err(ChangesError::Meta {
            path: p,
            msg: format!("format version {} (this vetto reads 1)", m.version),
        });
    }
    Ok(m)
}

/// Every change set's metadata, oldest first (sets whose metadata cannot be read are named
/// with the reason).
pub fn list() -> Result<Vec<Result<Meta, ChangesError>>, ChangesError> {
    let base = base_dir()?;
    let mut v = vec![];
    let rd = std::fs::read_dir(&base).map_err(io_err("list", &base))?;
    let mut names: Vec<String> = rd
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| valid_id(n))
        .collect();
    names.sort();
    for n in names {
        v.push(read_meta(&base.join(&n)));
    }
    Ok(v)
}
