//! The FS-ONLY tier's Landlock ruleset, built by the supervisor from a
//! [`View`](vetto_bundle::fsonly::View) on descriptors and inode identities, and enforced by
//! the command's process after `fork` ([`Built::restrict_self`]).
//!
//! Every decision is made on the object a descriptor holds, never on a name resolved twice:
//! - a root is opened once (`O_PATH`); the directories on the way from it to each exception
//!   are opened one component at a time without following symlinks, and their (device, inode)
//!   form the set of directories to go *through*;
//! - the walk then opens each entry of such a directory with `openat(O_PATH | O_NOFOLLOW)` and
//!   decides by the entry's identity: an exception (no rule, or its limit), a directory to go
//!   through (listing only, or nothing above a masked directory, then its entries), anything
//!   else (the root's access, on that descriptor); symlinks get no rule;
//! - each rule is added on the descriptor the decision was made on, so the kernel binds it to
//!   that inode: a later rename moves nothing under a broader rule;
//! - after the last rule, every exception must have been met in the walk and still be, by the
//!   same name, in the directory it was met in. A rename racing the start therefore fails it
//!   closed ([`FsViewError::Changed`]); it cannot lend a secret's directory a sibling's rule.

use std::collections::{HashMap, HashSet};
use std::ffi::{CStr, CString, OsStr};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use ::landlock::{
    PathBeneath, RestrictionStatus, RulesetCreated, RulesetCreatedAttr, RulesetError, RulesetStatus,
};
use thiserror::Error;
use vetto_bundle::fsonly::{View, MAX_RULES};
use vetto_bundle::plan::FsAccess;

use crate::landlock::{file_rights, new_ruleset, rights, LandlockError};

/// The ruleset could not be built: the command does not run.
#[derive(Debug, Error)]
pub enum FsViewError {
    /// Landlock itself.
    #[error(transparent)]
    Landlock(#[from] LandlockError),
    /// Adding a rule failed.
    #[error("Landlock rule for {path}: {source}")]
    Rule {
        /// Where.
        path: PathBuf,
        /// Why.
        source: RulesetError,
    },
    /// A root or a directory on the way could not be opened or listed.
    #[error("FS-ONLY: {what} {path}: {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// Where.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A secret or a protected path is not where (or what) the scan found.
    #[error("FS-ONLY: {} changed since the scan (renamed, replaced or moved while the sandbox was being set up); the command does not run", path.display())]
    Changed {
        /// Where the scan found it.
        path: PathBuf,
    },
    /// The safety budget of rules is exhausted.
    #[error("FS-ONLY: granting {} around its secrets and protected paths needs more than {MAX_RULES} Landlock rules (the safety budget); use the FULL tier, or move the secrets out of large trees", root.display())]
    Budget {
        /// The root that was being expanded.
        root: PathBuf,
    },
}

type Id = (u64, u64);

fn identity(fd: RawFd) -> std::io::Result<(Id, u32)> {
    // SAFETY: an all-zero `stat` is a valid value of this plain C struct.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `fd` is open; `st` is a valid out pointer.
    if unsafe { libc::fstat(fd, &mut st) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(((st.st_dev, st.st_ino), st.st_mode & libc::S_IFMT))
}

fn open_at(dir: RawFd, name: &CStr, flags: libc::c_int) -> std::io::Result<OwnedFd> {
    // SAFETY: `name` is NUL-terminated; the result is a new descriptor or -1.
    let fd = unsafe { libc::openat(dir, name.as_ptr(), flags | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: just opened, owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Opens the absolute, canonical `path` (`O_PATH`) one component at a time, never through a
/// symlink: a component that is one now (it was resolved when the view was made) is `ELOOP`.
/// Component by component rather than `openat2(RESOLVE_NO_SYMLINKS)`, which a parent
/// sandbox's seccomp may refuse (vetto's own does, with `ENOSYS`).
fn open_no_symlinks(path: &Path) -> std::io::Result<OwnedFd> {
    let mut cur = open_at(libc::AT_FDCWD, c"/", libc::O_PATH | libc::O_DIRECTORY)?;
    let comps: Vec<&OsStr> = path
        .components()
        .filter_map(|c| match c {
            std::path::Component::Normal(n) => Some(n),
            _ => None,
        })
        .collect();
    if !path.is_absolute()
        || path
            .components()
            .any(|c| matches!(c, std::path::Component::ParentDir))
    {
        return Err(std::io::Error::from_raw_os_error(libc::EINVAL));
    }
    for (i, comp) in comps.iter().enumerate() {
        let last = i + 1 == comps.len();
        let name = cstr(comp)?;
        let flags = libc::O_PATH | libc::O_NOFOLLOW | if last { 0 } else { libc::O_DIRECTORY };
        cur = match open_at(cur.as_raw_fd(), &name, flags) {
            Ok(fd) => fd,
            // O_DIRECTORY on a symlink.
            Err(e) if e.raw_os_error() == Some(libc::ENOTDIR) => {
                return Err(std::io::Error::from_raw_os_error(libc::ELOOP))
            }
            Err(e) => return Err(e),
        };
        if last && identity(cur.as_raw_fd())?.1 == libc::S_IFLNK {
            return Err(std::io::Error::from_raw_os_error(libc::ELOOP));
        }
    }
    Ok(cur)
}

fn cstr(s: &OsStr) -> std::io::Result<CString> {
    CString::new(s.as_bytes()).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))
}

/// The names in the directory `dir` (not `.` and `..`).
fn names(dir: RawFd) -> std::io::Result<Vec<CString>> {
    let rd = open_at(dir, c".", libc::O_RDONLY | libc::O_DIRECTORY)?;
    // SAFETY: fdopendir takes ownership of the descriptor on success.
    let d = unsafe { libc::fdopendir(rd.as_raw_fd()) };
    if d.is_null() {
        return Err(std::io::Error::last_os_error());
    }
    std::mem::forget(rd);
    let mut out = vec![];
    loop {
        // SAFETY: errno is thread-local; reset to tell the end from an error.
        unsafe { *libc::__errno_location() = 0 };
        // SAFETY: `d` is an open directory stream.
        let e = unsafe { libc::readdir(d) };
        if e.is_null() {
            let err = std::io::Error::last_os_error();
            // SAFETY: closing the stream we opened (and its descriptor).
            unsafe { libc::closedir(d) };
            if err.raw_os_error().unwrap_or(0) != 0 {
                return Err(err);
            }
            break;
        }
        // SAFETY: d_name is a NUL-terminated array inside the entry readdir returned.
        let name = unsafe { CStr::from_ptr((*e).d_name.as_ptr()) };
        if name.to_bytes() != b"." && name.to_bytes() != b".." {
            out.push(name.to_owned());
        }
    }
    out.sort();
    Ok(out)
}

/// What [`build`] made.
pub struct Built {
    ruleset: RulesetCreated,
    /// Every rule, by the path it was reached at and its access (for `explain` and tests).
    pub granted: Vec<(PathBuf, FsAccess)>,
    /// The kernel's Landlock ABI.
    pub abi: u32,
}

impl Built {
    /// Enforce the ruleset on the calling process (sets no_new_privs).
    pub fn restrict_self(self) -> Result<RestrictionStatus, LandlockError> {
        let status = self.ruleset.restrict_self()?;
        if status.ruleset == RulesetStatus::NotEnforced {
            return Err(LandlockError::NotEnforced);
        }
        Ok(status)
    }
}

struct Walk {
    ruleset: Option<RulesetCreated>,
    granted: Vec<(PathBuf, FsAccess)>,
    /// Exceptions by identity → their limit.
    exceptions: HashMap<Id, Option<FsAccess>>,
    /// Directories to go through; those above a masked directory get no rule.
    through: HashSet<Id>,
    hidden: HashSet<Id>,
    /// Where each exception was met: (the directory's descriptor, the name, its identity).
    met: Vec<(OwnedFd, CString, Id, PathBuf)>,
    root: PathBuf,
}

impl Walk {
    fn add(
        &mut self,
        fd: OwnedFd,
        path: PathBuf,
        access: FsAccess,
        is_dir: bool,
    ) -> Result<(), FsViewError> {
        if self.granted.len() >= MAX_RULES {
            return Err(FsViewError::Budget {
                root: self.root.clone(),
            });
        }
        let mut r = rights(access);
        if !is_dir {
            r &= file_rights();
        }
        if r.is_empty() {
            return Ok(());
        }
        let ruleset = self.ruleset.take().ok_or(LandlockError::NotEnforced)?;
        self.ruleset = Some(
            ruleset
                .add_rule(PathBeneath::new(fd, r))
                .map_err(|source| FsViewError::Rule {
                    path: path.clone(),
                    source,
                })?,
        );
        self.granted.push((path, access));
        Ok(())
    }

    /// Grant `access` to `fd` (at `path`), or go through it to its children. `known` is its
    /// identity and type when the caller has just read them from this very descriptor (each
    /// child of a directory gone through is inspected once, not once there and once here).
    fn walk(
        &mut self,
        fd: OwnedFd,
        path: PathBuf,
        access: FsAccess,
        known: Option<(Id, u32)>,
    ) -> Result<(), FsViewError> {
        let io = |what, path: &Path| {
            let path = path.to_path_buf();
            move |source| FsViewError::Io { what, path, source }
        };
        let (id, kind) = match known {
            Some(k) => k,
            None => identity(fd.as_raw_fd()).map_err(io("inspecting", &path))?,
        };
        let access = match self.exceptions.get(&id) {
            Some(None) => return Ok(()),
            Some(Some(limit)) => narrower(access, *limit),
            None => access,
        };
        let is_dir = kind == libc::S_IFDIR;
        if !is_dir || !self.through.contains(&id) {
            return self.add(fd, path, access, is_dir);
        }
        if !self.hidden.contains(&id) {
            let list =
                open_at(fd.as_raw_fd(), c".", libc::O_PATH).map_err(io("reopening", &path))?;
            self.add(list, path.clone(), FsAccess::ListDir, true)?;
        }
        for name in names(fd.as_raw_fd()).map_err(io("listing", &path))? {
            let child_path = path.join(OsStr::from_bytes(name.to_bytes()));
            let child = match open_at(fd.as_raw_fd(), &name, libc::O_PATH | libc::O_NOFOLLOW) {
                Ok(c) => c,
                // Gone since the listing: nothing to grant.
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) => continue,
                Err(e) => return Err(io("opening", &child_path)(e)),
            };
            let (cid, ckind) =
                identity(child.as_raw_fd()).map_err(io("inspecting", &child_path))?;
            if ckind == libc::S_IFLNK {
                continue;
            }
            if self.exceptions.contains_key(&cid) {
                let dir =
                    open_at(fd.as_raw_fd(), c".", libc::O_PATH).map_err(io("reopening", &path))?;
                self.met.push((dir, name.clone(), cid, child_path.clone()));
            }
            self.walk(child, child_path, access, Some((cid, ckind)))?;
        }
        Ok(())
    }
}

/// The narrower of two accesses.
fn narrower(a: FsAccess, b: FsAccess) -> FsAccess {
    use FsAccess::*;
    match (a, b) {
        (ListDir, _) | (_, ListDir) => ListDir,
        (ReadExec, _) | (_, ReadExec) => ReadExec,
        (Device, x) | (x, Device) => x,
        (ReadWriteNoDelete, _) | (_, ReadWriteNoDelete) => ReadWriteNoDelete,
        (ReadWrite, ReadWrite) => ReadWrite,
    }
}

/// Build the FS-ONLY ruleset for `view` (scoped: ABI ≥ 6 is required by the view).
pub fn build(view: &View) -> Result<Built, FsViewError> {
    let (ruleset, abi, _scoped) = new_ruleset(view.min_abi, true, true)?;
    let mut w = Walk {
        ruleset: Some(ruleset),
        granted: vec![],
        exceptions: HashMap::new(),
        through: HashSet::new(),
        hidden: HashSet::new(),
        met: vec![],
        root: PathBuf::new(),
    };
    for e in &view.exceptions {
        let id = (e.dev, e.ino);
        let limit = match w.exceptions.get(&id) {
            Some(None) => None,
            Some(Some(_)) if e.limit.is_none() => None,
            Some(Some(l)) => Some(*l),
            None => e.limit,
        };
        w.exceptions.insert(id, limit);
    }
    let mut roots = vec![];
    for r in &view.roots {
        // Canonical when the view was made: a symlink on the way now is a change (a directory
        // swapped for a link to elsewhere between the plan and the build).
        let fd = match open_no_symlinks(&r.path) {
            Ok(fd) => fd,
            Err(e) if r.optional && e.raw_os_error() == Some(libc::ENOENT) => continue,
            Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
                return Err(FsViewError::Changed {
                    path: r.path.clone(),
                })
            }
            Err(source) => {
                return Err(FsViewError::Io {
                    what: "opening",
                    path: r.path.clone(),
                    source,
                })
            }
        };
        // The directories from the root to each exception beneath it, by identity.
        for e in view.beneath(&r.path) {
            let Ok(rel) = e.path.strip_prefix(&r.path) else {
                continue;
            };
            let comps: Vec<&OsStr> = rel.iter().collect();
            let Some((_, dirs)) = comps.split_last() else {
                continue;
            };
            let (rid, _) = identity(fd.as_raw_fd()).map_err(|source| FsViewError::Io {
                what: "inspecting",
                path: r.path.clone(),
                source,
            })?;
            w.through.insert(rid);
            if e.hide_names {
                w.hidden.insert(rid);
            }
            let mut cur =
                open_at(fd.as_raw_fd(), c".", libc::O_PATH).map_err(|source| FsViewError::Io {
                    what: "opening",
                    path: r.path.clone(),
                    source,
                })?;
            for d in dirs {
                let name = cstr(d).map_err(|_| FsViewError::Changed {
                    path: e.path.clone(),
                })?;
                cur = open_at(
                    cur.as_raw_fd(),
                    &name,
                    libc::O_PATH | libc::O_NOFOLLOW | libc::O_DIRECTORY,
                )
                .map_err(|_| FsViewError::Changed {
                    path: e.path.clone(),
                })?;
                let (id, _) = identity(cur.as_raw_fd()).map_err(|_| FsViewError::Changed {
                    path: e.path.clone(),
                })?;
                w.through.insert(id);
                if e.hide_names {
                    w.hidden.insert(id);
                }
            }
        }
        roots.push((fd, r.path.clone(), r.access));
    }
    // Kept to re-resolve every exception from its root once the rules are in.
    let mut kept: Vec<(OwnedFd, PathBuf)> = vec![];
    for (fd, path, access) in roots {
        if let Ok(dup) = open_at(fd.as_raw_fd(), c".", libc::O_PATH) {
            kept.push((dup, path.clone()));
        }
        w.root = path.clone();
        w.walk(fd, path, access, None)?;
    }
    // Every exception beneath a root was met, and is still where it was met.
    for e in &view.exceptions {
        let id = (e.dev, e.ino);
        let under_a_root = view.roots.iter().any(|r| e.path.starts_with(&r.path));
        if under_a_root
            && !w.met.iter().any(|(_, _, mid, _)| *mid == id)
            && !view.roots.iter().any(|r| r.path == e.path)
        {
            return Err(FsViewError::Changed {
                path: e.path.clone(),
            });
        }
    }
    for (dir, name, id, path) in &w.met {
        let now = open_at(dir.as_raw_fd(), name, libc::O_PATH | libc::O_NOFOLLOW)
            .and_then(|fd| identity(fd.as_raw_fd()));
        if !matches!(now, Ok((nid, _)) if nid == *id) {
            return Err(FsViewError::Changed { path: path.clone() });
        }
    }
    // And the whole way down to it is still made of the directories the walk went through
    // (listing only): a directory above it moved under a broad rule during the build would
    // lend it that rule, since Landlock adds rights along the path that exists at access.
    for (root_fd, root) in &kept {
        for e in view.beneath(root) {
            let Ok(rel) = e.path.strip_prefix(root) else {
                continue;
            };
            if rel.as_os_str().is_empty() {
                continue;
            }
            let changed = || FsViewError::Changed {
                path: e.path.clone(),
            };
            let mut cur =
                open_at(root_fd.as_raw_fd(), c".", libc::O_PATH).map_err(|_| changed())?;
            let comps: Vec<&OsStr> = rel.iter().collect();
            for (i, comp) in comps.iter().enumerate() {
                let (id, _) = identity(cur.as_raw_fd()).map_err(|_| changed())?;
                if !w.through.contains(&id) {
                    return Err(changed());
                }
                let name = cstr(comp).map_err(|_| changed())?;
                let last = i + 1 == comps.len();
                let flags =
                    libc::O_PATH | libc::O_NOFOLLOW | if last { 0 } else { libc::O_DIRECTORY };
                cur = open_at(cur.as_raw_fd(), &name, flags).map_err(|_| changed())?;
            }
            let (id, _) = identity(cur.as_raw_fd()).map_err(|_| changed())?;
            if id != (e.dev, e.ino) {
                return Err(changed());
            }
        }
    }
    let ruleset = w.ruleset.take().ok_or(LandlockError::NotEnforced)?;
    Ok(Built {
        ruleset,
        granted: w.granted,
        abi,
    })
}
