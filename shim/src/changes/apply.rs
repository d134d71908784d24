//! `vetto changes apply`: bringing a change set's entries into the project.
//!
//! Every project path is reached from the project's directory descriptor through no symlink
//! (`RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS`; the last component is never followed either), so
//! neither a symlink the sandbox left nor one the user made meanwhile can send a write outside
//! the project. Files are written to a new temporary file beside the target and renamed over
//! it. Setuid and setgid bits are never applied; refused entries (see [`super::scan`]) never.
//!
//! Before anything is written, each selected entry is checked against the project: an entry
//! whose project counterpart was created, changed or removed since the set's first session
//! started (its ctime is that late, and the change is not one an earlier `apply` made) is
//! skipped, unless `force`. Trust-handoff entries need `include_handoff`.
//!
//! An applied entry leaves the upper layer (a later `--resume` then sees the project's copy,
//! which is the same); entries inside a replaced directory stay until the directory is
//! applied whole, because the opaque directory hides the project's copy.

use std::collections::BTreeSet;
use std::ffi::{OsStr, OsString};
use std::io;
use std::path::{Path, PathBuf};

use super::fsat::{Dir, Ftype};
use super::scan::{Entry, Kind, What};
use super::{ChangeSet, ChangesError};

/// Options.
#[derive(Debug, Clone, Copy, Default)]
pub struct Options {
    /// Apply entries the project changed meanwhile.
    pub force: bool,
    /// Apply trust-handoff entries.
    pub include_handoff: bool,
    /// Apply a set last used before a restart (which may have lost writes in a crash).
    pub accept_unsynced: bool,
}

/// What happened to one entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Result1 {
    /// Applied.
    Applied,
    /// Not applied, with the reason.
    Skipped(String),
    /// Applying failed part-way (the reason); the project may hold this entry's old state.
    Failed(String),
}

/// The outcome, entry by entry.
#[derive(Debug, Default)]
pub struct Outcome {
    /// `(entry, result)` in the set's order.
    pub entries: Vec<(Entry, Result1)>,
    /// The project was changed, but the set's metadata could not be saved afterwards.
    pub save_error: Option<ChangesError>,
}

impl Outcome {
    /// Did everything selected apply?
    pub fn all_applied(&self) -> bool {
        self.entries
            .iter()
            .all(|(e, r)| *r == Result1::Applied || e.kind == Kind::Nothing)
    }
}

/// Turn a user's path argument into the project-relative form entries use. Absolute paths
/// inside the project are accepted; `..`, and paths outside the project, are not.
pub fn normalize(arg: &str, project: &Path) -> Result<String, ChangesError> {
    let p = Path::new(arg);
    let rel = if p.is_absolute() {
        p.strip_prefix(project)
            .map_err(|_| {
                ChangesError::BadPath(format!(
                    "{arg} is not inside the project {}",
                    project.display()
                ))
            })?
            .to_path_buf()
    } else {
        p.to_path_buf()
    };
    let mut out = PathBuf::new();
    for c in rel.components() {
        match c {
            std::path::Component::Normal(n) => out.push(n),
            std::path::Component::CurDir => {}
            _ => {
                return Err(ChangesError::BadPath(format!(
                    "{arg}: name a path inside the project without '..'"
                )))
            }
        }
    }
    let s = out
        .to_str()
        .ok_or_else(|| ChangesError::BadPath(format!("{arg}: not UTF-8")))?
        .to_string();
    Ok(if s.is_empty() { ".".into() } else { s })
}

/// Does the selection take entry path `p`? (Empty: everything.)
pub fn selected(sel: &[String], p: &str) -> bool {
    sel.is_empty()
        || sel.iter().any(|s| {
            s == "."
                || s == p
                || (p.len() > s.len() && p.starts_with(s.as_str()) && p.as_bytes()[s.len()] == b'/')
        })
}

fn split(rel: &str) -> (&Path, &OsStr) {
    let p = Path::new(rel);
    (
        p.parent().unwrap_or(Path::new("")),
        p.file_name().unwrap_or(OsStr::new("")),
    )
}

fn io_msg(what: &str, e: &io::Error) -> String {
    match e.raw_os_error() {
        Some(libc::ELOOP) | Some(libc::EXDEV) => {
            format!("{what}: a symlink (or a path leaving the project) is on the way; vetto does not follow it")
        }
        _ => format!("{what}: {e}"),
    }
}

/// The newest ctime at or below `name` in `dir` that the user made (not in `accepted`), for
/// a subtree about to be deleted or replaced.
fn changed_below(
    dir: &Dir,
    name: &OsStr,
    rel: &str,
    since: i64,
    cs: &ChangeSet,
) -> io::Result<Option<String>> {
    let Some(st) = dir.stat(name)? else {
        return Ok(None);
    };
    let ours = cs.meta.accepted.get(rel).copied();
    if st.ctime_ns >= i128::from(since) && Some(st.ctime_ns) != ours.map(i128::from) {
        return Ok(Some(rel.to_string()));
    }
    if st.ftype == Ftype::Dir {
        let d = dir.child(name)?;
        for n in d.names()? {
            let r = format!("{rel}/{}", n.to_string_lossy());
            if let Some(x) = changed_below(&d, &n, &r, since, cs)? {
                return Ok(Some(x));
            }
        }
    }
    Ok(None)
}

/// A directory on the way to `rel` (or `rel` itself) that is not the one the first session
/// started with: the user moved another directory there. Answers are kept in `seen`.
fn moved_dir(
    project: &Dir,
    rel: &str,
    cs: &ChangeSet,
    seen: &mut std::collections::HashMap<String, bool>,
) -> Option<String> {
    let mut prefix = String::new();
    for part in rel.split('/') {
        if !prefix.is_empty() {
            prefix.push('/');
        }
        prefix.push_str(part);
        let Some(&ino) = cs.meta.dirs.get(&prefix) else {
            continue;
        };
        let differs = *seen.entry(prefix.clone()).or_insert_with(|| {
            project
                .open_beneath(Path::new(&prefix))
                .and_then(|d| d.stat_self())
                .is_ok_and(|s| s.ino != ino)
        });
        if differs {
            return Some(format!(
                "the directory {} is not the one the session started with (moved or replaced in the project since)",
                prefix.escape_debug()
            ));
        }
    }
    None
}

/// Why `e` must not be applied to the project as it is now, if so.
fn conflict(project: &Dir, e: &Entry, cs: &ChangeSet, adding: &BTreeSet<String>) -> Option<String> {
    if e.path == "." {
        let st = project.stat_self().ok()?;
        let ours = cs.meta.accepted.get(".").map(|&c| i128::from(c));
        return (st.ctime_ns >= i128::from(cs.meta.started_ns) && Some(st.ctime_ns) != ours)
            .then(|| "the project directory changed since the session started".into());
    }
    let (parent, name) = split(&e.path);
    let pd = match project.open_beneath(parent) {
        Ok(d) => d,
        Err(err) if err.raw_os_error() == Some(libc::ENOENT) => {
            // Fine when the parent is being added too.
            let p = parent.to_string_lossy();
            if e.kind == Kind::Added && adding.contains(p.as_ref()) {
                return None;
            }
            return Some(format!(
                "its directory {} is not in the project now",
                p.escape_debug()
            ));
        }
        Err(err) => return Some(io_msg("its directory", &err)),
    };
    let st = match pd.stat(name) {
        Ok(s) => s,
        Err(err) => return Some(io_msg("inspect", &err)),
    };
    let since = i128::from(cs.meta.started_ns);
    let ours = cs.meta.accepted.get(&e.path).map(|&c| i128::from(c));
    match (e.kind, st) {
        (Kind::Added, None) => None,
        (Kind::Added, Some(s)) if e.what == What::Dir && s.ftype == Ftype::Dir => None,
        (Kind::Added, Some(_)) => {
            Some("the project has an entry there now, made since the session started".into())
        }
        (_, None) => Some("removed from the project since the session started".into()),
        (Kind::Deleted | Kind::Replaced, Some(s)) if s.ftype == Ftype::Dir => {
            match changed_below(&pd, name, &e.path, cs.meta.started_ns, cs) {
                Ok(None) => None,
                Ok(Some(p)) => Some(format!(
                    "{} changed in the project since the session started",
                    p.escape_debug()
                )),
                Err(err) => Some(io_msg("inspect", &err)),
            }
        }
        (_, Some(s)) if s.ctime_ns >= since && Some(s.ctime_ns) != ours => {
            Some("changed in the project since the session started".into())
        }
        _ => None,
    }
}

/// Apply the entries of `cs` that `sel` selects.
pub fn apply(cs: &mut ChangeSet, sel: &[String], opts: Options) -> Result<Outcome, ChangesError> {
    if !opts.accept_unsynced && cs.unsynced_before_restart() {
        return Err(ChangesError::UnsyncedBeforeRestart(cs.meta.id.clone()));
    }
    // A write-back error since the session (the overlay is `volatile`: nothing else reports
    // one) would have the layer read back stale data: refused.
    cs.sync_upper()?;
    let project = cs.project_dir()?;
    let upper = cs.upper_dir()?;
    let entries = super::scan::scan(&upper, &project, &cs.meta.protected)?;
    // The selection, with the new directories it lies in (they must be created first).
    let picked: Vec<bool> = entries.iter().map(|e| selected(sel, &e.path)).collect();
    let needed = |d: &Entry| {
        d.what == What::Dir
            && d.kind == Kind::Added
            && entries.iter().zip(&picked).any(|(e, &p)| {
                p && e.path.len() > d.path.len()
                    && e.path.starts_with(&d.path)
                    && e.path.as_bytes()[d.path.len()] == b'/'
            })
    };
    let chosen: Vec<Entry> = entries
        .iter()
        .zip(&picked)
        .filter(|(e, &p)| p || needed(e))
        .map(|(e, _)| e.clone())
        .collect();
    if chosen.is_empty() && !sel.is_empty() {
        return Err(ChangesError::BadPath(format!(
            "nothing in change set {} under {}",
            cs.meta.id,
            sel.join(", ")
        )));
    }
    // Replaced directories applied whole: entries inside are applied with them.
    let replaced: Vec<String> = chosen
        .iter()
        .filter(|e| e.kind == Kind::Replaced && e.what == What::Dir)
        .map(|e| e.path.clone())
        .collect();
    let under =
        |p: &str, d: &str| p.len() > d.len() && p.starts_with(d) && p.as_bytes()[d.len()] == b'/';
    let adding: BTreeSet<String> = chosen
        .iter()
        .filter(|e| e.what == What::Dir && matches!(e.kind, Kind::Added | Kind::Replaced))
        .map(|e| e.path.clone())
        .collect();

    // Decide every entry before writing anything.
    let mut moved = std::collections::HashMap::new();
    let mut plan: Vec<(Entry, Result1)> = vec![];
    let mut blocked: Vec<String> = vec![]; // directories not applied: nothing beneath them is
    for e in chosen {
        let verdict = if let Some(b) = blocked.iter().find(|b| under(&e.path, b)) {
            Some(format!("inside {}, which is not applied", b.escape_debug()))
        } else if let Some(r) = &e.refused {
            Some(format!("refused: {r}"))
        } else if e.handoff && !opts.include_handoff {
            Some("a trust-handoff path: apply it with --include-handoff after reading it".into())
        } else if e.kind == Kind::Nothing {
            None
        } else if e.in_replaced && !replaced.iter().any(|d| under(&e.path, d)) {
            Some("inside a replaced directory: apply that directory as a whole".into())
        } else if e.in_replaced || opts.force {
            // Inside a replaced directory: checked with the directory.
            None
        } else {
            moved_dir(&project, &e.path, cs, &mut moved)
                .or_else(|| conflict(&project, &e, cs, &adding))
                .map(|c| format!("{c} (--force applies it anyway)"))
        };
        match verdict {
            Some(why) => {
                // Entries beneath a directory that is not created are not applied either.
                if (e.what == What::Dir && matches!(e.kind, Kind::Added | Kind::Replaced))
                    || e.refused.is_some()
                {
                    blocked.push(e.path.clone());
                }
                plan.push((e, Result1::Skipped(why)));
            }
            None => plan.push((e, Result1::Applied)),
        }
    }
    // A replaced directory with anything inside skipped is not applied whole: skip it all.
    for d in &replaced {
        let inner_skipped = plan
            .iter()
            .any(|(e, r)| under(&e.path, d) && matches!(r, Result1::Skipped(_)));
        if inner_skipped {
            for (e, r) in plan.iter_mut() {
                if (e.path == *d || under(&e.path, d)) && *r == Result1::Applied {
                    *r = Result1::Skipped(format!(
                        "part of the replaced directory {}, which cannot be applied whole",
                        d.escape_debug()
                    ));
                }
            }
        }
    }

    // Write.
    for (e, r) in plan.iter_mut() {
        if *r != Result1::Applied || e.kind == Kind::Nothing {
            continue;
        }
        if let Some(b) = blocked.iter().find(|b| under(&e.path, b)) {
            *r = Result1::Failed(format!("{} could not be applied", b.escape_debug()));
            continue;
        }
        if let Err(err) = apply_one(&project, &upper, e) {
            *r = Result1::Failed(io_msg("apply", &err));
            if e.what == What::Dir {
                blocked.push(e.path.clone());
            }
            continue;
        }
        let (parent, name) = split(&e.path);
        let st = if e.path == "." {
            project.stat_self().ok()
        } else {
            project
                .open_beneath(parent)
                .and_then(|d| d.stat(name))
                .ok()
                .flatten()
        };
        // The directories this apply made or removed are vetto's, not moved in by the user.
        if matches!(e.kind, Kind::Deleted | Kind::Replaced) {
            let below = format!("{}/", e.path);
            cs.meta.dirs.retain(|k, _| !k.starts_with(&below));
        }
        if let Some(st) = st {
            cs.meta.accepted.insert(
                e.path.clone(),
                i64::try_from(st.ctime_ns).unwrap_or(i64::MAX),
            );
            if st.ftype == Ftype::Dir {
                cs.meta.dirs.insert(e.path.clone(), st.ino);
            } else {
                cs.meta.dirs.remove(&e.path);
            }
        } else {
            cs.meta.accepted.remove(&e.path);
            cs.meta.dirs.remove(&e.path);
        }
    }
    // The project has changed by now: the outcome is returned whatever happens next, so that
    // it is reported and recorded.
    let save_error = cs.save().err();
    if save_error.is_some() {
        return Ok(Outcome {
            entries: plan,
            save_error,
        });
    }

    // Take applied entries out of the upper layer, deepest first.
    for (e, r) in plan.iter().rev() {
        if *r != Result1::Applied || e.in_replaced || e.path == "." {
            continue;
        }
        let (parent, name) = split(&e.path);
        let Ok(ud) = upper.open_beneath(parent) else {
            continue;
        };
        let _ = match (e.what, e.kind) {
            (What::Dir, Kind::Replaced) => {
                let whole = plan
                    .iter()
                    .filter(|(x, _)| under(&x.path, &e.path))
                    .all(|(_, r)| *r == Result1::Applied);
                if whole {
                    ud.remove_all(name).map(|_| true)
                } else {
                    Ok(false)
                }
            }
            (What::Dir, _) => ud.rmdir_if_empty(name),
            (What::File | What::Symlink | What::Whiteout, _) => ud.remove_all(name).map(|_| true),
            (What::Special, _) => Ok(false),
        };
    }
    Ok(Outcome {
        entries: plan,
        save_error: None,
    })
}

fn tmp_name(name: &OsStr) -> OsString {
    let mut b = [0u8; 6];
    // SAFETY: getrandom writes at most `b.len()` bytes into `b`, which we own.
    let _ = unsafe { libc::getrandom(b.as_mut_ptr().cast::<libc::c_void>(), b.len(), 0) };
    let tag: String = b.iter().map(|x| format!("{x:02x}")).collect();
    let mut s = OsString::from(".vetto-apply-");
    s.push(tag);
    let _ = name;
    s
}

/// Write one entry into the project.
fn apply_one(project: &Dir, upper: &Dir, e: &Entry) -> io::Result<()> {
    let perm = e.perm & 0o1777;
    if e.path == "." {
        return nix::sys::stat::fchmod(
            project.raw(),
            nix::sys::stat::Mode::from_bits_truncate(perm),
        )
        .map_err(io::Error::from);
    }
    let (parent, name) = split(&e.path);
    let pd = project.open_beneath(parent)?;
    match (e.what, e.kind) {
        (What::Whiteout, Kind::Deleted) => pd.remove_all(name),
        (What::Dir, Kind::Mode) => pd.chmod_dir(name, perm),
        (What::Dir, Kind::Added) => match pd.stat(name)? {
            Some(s) if s.ftype == Ftype::Dir => pd.chmod_dir(name, perm),
            Some(_) => Err(io::Error::from_raw_os_error(libc::EEXIST)),
            None => pd.mkdir(name, perm),
        },
        (What::Dir, Kind::Replaced) => {
            pd.remove_all(name)?;
            pd.mkdir(name, perm)
        }
        // A file with other hard links (a package store, `cp -al`) is not changed in place:
        // its new mode would reach the links outside the project. It is copied instead.
        (What::File, Kind::Mode) if pd.stat(name)?.is_none_or(|s| s.nlink <= 1) => {
            let f = pd.open_file(name)?;
            nix::sys::stat::fchmod(
                std::os::fd::AsRawFd::as_raw_fd(&f),
                nix::sys::stat::Mode::from_bits_truncate(perm),
            )
            .map_err(io::Error::from)
        }
        (What::File, _) => {
            let ud = upper.open_beneath(parent)?;
            let mut src = ud.open_file(name)?;
            let tmp = tmp_name(name);
            let mut dst = pd.create_new(&tmp, perm)?;
            let copied = io::copy(&mut src, &mut dst).and_then(|_| {
                nix::sys::stat::fchmod(
                    std::os::fd::AsRawFd::as_raw_fd(&dst),
                    nix::sys::stat::Mode::from_bits_truncate(perm),
                )
                .map_err(io::Error::from)
            });
            drop(dst);
            let done = copied.and_then(|_| replace(&pd, &tmp, name));
            if done.is_err() {
                let _ = pd.remove_all(&tmp);
            }
            done
        }
        (What::Symlink, _) => {
            let ud = upper.open_beneath(parent)?;
            let target = ud.read_link(name)?;
            let tmp = tmp_name(name);
            pd.symlink(&target, &tmp)?;
            let done = replace(&pd, &tmp, name);
            if done.is_err() {
                let _ = pd.remove_all(&tmp);
            }
            done
        }
        _ => Ok(()),
    }
}

/// Rename `tmp` over `name`; a directory at `name` (a file replacing a directory) goes first.
fn replace(pd: &Dir, tmp: &OsStr, name: &OsStr) -> io::Result<()> {
    if let Some(s) = pd.stat(name)? {
        if s.ftype == Ftype::Dir {
            pd.remove_all(name)?;
        }
    }
    pd.rename(tmp, name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selection() {
        let s = vec!["src".to_string()];
        assert!(selected(&s, "src"));
        assert!(selected(&s, "src/a.rs"));
        assert!(!selected(&s, "srcx"));
        assert!(!selected(&s, "lib/src"));
        assert!(selected(&[], "x"));
    }

    #[test]
    fn path_arguments() {
        let p = Path::new("/home/u/proj");
        assert_eq!(normalize("./src/a.rs", p).expect("ok"), "src/a.rs");
        assert_eq!(normalize("/home/u/proj/src", p).expect("ok"), "src");
        assert_eq!(normalize("/home/u/proj", p).expect("ok"), ".");
        assert!(normalize("../x", p).is_err());
        assert!(normalize("src/../../x", p).is_err());
        assert!(normalize("/etc/passwd", p).is_err());
    }
}
