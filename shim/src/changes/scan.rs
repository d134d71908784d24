//! Reading an upper layer: what the sandbox added, changed and deleted, compared with the
//! project as it is now.
//!
//! The upper layer is hostile input. An entry is **refused** (listed with the reason, never
//! applied) when it is a device node, FIFO or socket; a symlink whose target is absolute or
//! climbs out of the project; an entry with a name that is not UTF-8 or holds a control
//! character (a newline would forge lines of the summary); or carries an overlay redirect or
//! metacopy attribute (vetto mounts with neither, so only a forged layer has them). A whiteout
//! with nothing beneath it in the project deletes nothing and is listed as such. Setuid and
//! setgid bits are never applied (noted per entry).

use std::ffi::OsStr;
use std::path::{Component, Path, PathBuf};

use serde::Serialize;

use super::fsat::{Dir, Ftype, Stat};
use super::ChangesError;

/// What happened to a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    /// New: nothing was there in the project.
    Added,
    /// A regular file or symlink whose content or target changed.
    Modified,
    /// Only the permission bits changed.
    Mode,
    /// Deleted (an overlay whiteout over a project entry).
    Deleted,
    /// A directory replaced whole (an opaque directory: the project's contents are deleted and
    /// the entries below it are its new contents), or an entry replaced by one of another type.
    Replaced,
    /// Something the project does not have and the set does not add: a whiteout over nothing,
    /// or an entry the sandbox copied up unchanged. Nothing to apply.
    Nothing,
}

impl Kind {
    /// A one-letter tag for listings.
    pub fn tag(self) -> &'static str {
        match self {
            Kind::Added => "A",
            Kind::Modified => "M",
            Kind::Mode => "P",
            Kind::Deleted => "D",
            Kind::Replaced => "R",
            Kind::Nothing => "-",
        }
    }
}

/// The upper layer's kind of entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum What {
    /// Regular file.
    File,
    /// Directory.
    Dir,
    /// Symbolic link.
    Symlink,
    /// Whiteout (a deletion).
    Whiteout,
    /// Device node, FIFO or socket.
    Special,
}

/// One changed path.
#[derive(Debug, Clone, Serialize)]
pub struct Entry {
    /// The path relative to the project (UTF-8: other names are refused with a lossy form here).
    pub path: String,
    /// What the upper layer holds there.
    pub what: What,
    /// What happened.
    pub kind: Kind,
    /// The permission bits to apply (setuid and setgid cleared), for files and directories.
    pub perm: u32,
    /// A trust-handoff path (git metadata, editor or agent settings, MCP definitions: the
    /// policy's protected paths, and `.git` anywhere): not applied without `--include-handoff`.
    pub handoff: bool,
    /// Why it is never applied.
    pub refused: Option<String>,
    /// Below a replaced (opaque) directory: the project's entries there are gone in the set.
    pub in_replaced: bool,
    /// Remarks (bits dropped, nothing to delete).
    pub notes: Vec<String>,
}

/// Is `rel` a trust-handoff path under `protected`?
pub fn is_handoff(rel: &str, protected: &[String]) -> bool {
    let p = Path::new(rel);
    if p.components().any(|c| {
        matches!(c, Component::Normal(n) if n == ".git" || n == ".gitmodules" || n == ".gitattributes")
    }) {
        return true;
    }
    // The path, anything below it, and anything above it: replacing or deleting an ancestor
    // (or making it a symlink elsewhere) changes the protected path too.
    protected.iter().any(|q| {
        let q = Path::new(q.trim_end_matches('/'));
        !q.as_os_str().is_empty() && (p.starts_with(q) || q.starts_with(p))
    })
}

/// A name vetto will apply: UTF-8 and free of control characters.
fn name_problem(name: &OsStr) -> Option<String> {
    match name.to_str() {
        None => Some("its name is not UTF-8".into()),
        Some(s) if s.chars().any(|c| c.is_control()) => {
            Some("its name holds a control character (newline, tab, escape...)".into())
        }
        Some(_) => None,
    }
}

/// Does a symlink at `rel` pointing at `target` stay in the project, whatever the links it
/// passes through point at? Relative, with `..` only as leading components (a `..` after a
/// name is resolved where that name's own link points, so `up/..` with `up -> ..` climbs out
/// although it looks like it cancels), and not climbing above the project's root.
fn link_inside(rel: &Path, target: &Path) -> bool {
    if target.is_absolute() {
        return false;
    }
    let mut depth: i64 = rel.components().count() as i64 - 1;
    let mut named = false;
    for c in target.components() {
        match c {
            Component::ParentDir if named => return false,
            Component::ParentDir => depth -= 1,
            Component::Normal(_) => named = true,
            Component::CurDir => {}
            _ => return false,
        }
        if depth < 0 {
            return false;
        }
    }
    true
}

const OPAQUE: [&str; 2] = ["user.overlay.opaque", "trusted.overlay.opaque"];
const FORBIDDEN: [&str; 4] = [
    "user.overlay.redirect",
    "trusted.overlay.redirect",
    "user.overlay.metacopy",
    "trusted.overlay.metacopy",
];

fn forbidden_xattr(dir: &Dir, name: &OsStr) -> Result<Option<&'static str>, std::io::Error> {
    for a in FORBIDDEN {
        if dir.xattr_of(name, a)?.is_some() {
            return Ok(Some(a));
        }
    }
    Ok(None)
}

struct Walk<'a> {
    protected: &'a [String],
    out: Vec<Entry>,
}

/// Scan `upper` against `project`: every entry of the upper layer, parents before children,
/// in name order.
pub fn scan(upper: &Dir, project: &Dir, protected: &[String]) -> Result<Vec<Entry>, ChangesError> {
    let mut w = Walk {
        protected,
        out: vec![],
    };
    // The root: only its permission bits can differ.
    let us = upper.stat_self().map_err(err("read", ""))?;
    let ps = project.stat_self().map_err(err("read", ""))?;
    let root_perm = us.perm & 0o1777 & !(0o022 & !ps.perm);
    if root_perm != ps.perm & 0o1777 {
        w.out.push(Entry {
            path: ".".into(),
            what: What::Dir,
            kind: Kind::Mode,
            perm: root_perm,
            handoff: false,
            refused: None,
            in_replaced: false,
            notes: vec![],
        });
    }
    w.dir(upper, Some(project), Path::new(""), false)?;
    Ok(w.out)
}

fn err<'a>(what: &'static str, rel: &'a str) -> impl FnOnce(std::io::Error) -> ChangesError + 'a {
    move |source| ChangesError::Io {
        what,
        path: PathBuf::from(format!("upper layer: {rel}")),
        source,
    }
}

impl Walk<'_> {
    fn dir(
        &mut self,
        upper: &Dir,
        lower: Option<&Dir>,
        rel: &Path,
        in_replaced: bool,
    ) -> Result<(), ChangesError> {
        let rels = rel.to_string_lossy().into_owned();
        for name in upper.names().map_err(err("list", &rels))? {
            let child = rel.join(&name);
            let path = child.to_string_lossy().into_owned();
            let Some(us) = upper.stat(&name).map_err(err("inspect", &path))? else {
                continue;
            };
            let mut e = Entry {
                path: path.clone(),
                what: match us.ftype {
                    Ftype::File => What::File,
                    Ftype::Dir => What::Dir,
                    Ftype::Symlink => What::Symlink,
                    Ftype::Whiteout => What::Whiteout,
                    Ftype::Special(_) => What::Special,
                },
                kind: Kind::Added,
                perm: us.perm & 0o1777,
                handoff: is_handoff(&path, self.protected),
                refused: None,
                in_replaced,
                notes: vec![],
            };
            if us.perm & 0o6000 != 0 && matches!(us.ftype, Ftype::File | Ftype::Dir) {
                e.notes.push("setuid/setgid bits are not applied".into());
            }
            let ls: Option<Stat> = match lower {
                Some(l) => l.stat(&name).map_err(|source| ChangesError::Io {
                    what: "inspect",
                    path: PathBuf::from(format!("project: {path}")),
                    source,
                })?,
                None => None,
            };
            // No group or other write bit the project's entry did not have already.
            let lower_perm = ls
                .filter(|l| l.ftype == us.ftype)
                .map(|l| l.perm)
                .unwrap_or(0);
            let added_write = e.perm & 0o022 & !lower_perm;
            if added_write != 0 && matches!(us.ftype, Ftype::File | Ftype::Dir) {
                e.perm &= !added_write;
                e.notes.push(format!(
                    "group/other write bits ({added_write:03o}) are not applied"
                ));
            }
            if let Some(p) = name_problem(&name) {
                e.refused = Some(p);
                // Nothing below a refused directory is applied either; list it as one entry.
                self.out.push(e);
                continue;
            }
            match us.ftype {
                Ftype::Special(what) => {
                    e.refused = Some(format!("a {what} is never applied"));
                    self.out.push(e);
                }
                Ftype::Whiteout => {
                    e.kind = if ls.is_some() {
                        Kind::Deleted
                    } else {
                        e.notes
                            .push("nothing of that name in the project: nothing to delete".into());
                        Kind::Nothing
                    };
                    self.out.push(e);
                }
                Ftype::Symlink => {
                    let t = upper.read_link(&name).map_err(err("read link", &path))?;
                    if !link_inside(&child, Path::new(&t)) {
                        e.refused = Some(format!(
                            "a symlink pointing outside the project ({})",
                            t.to_string_lossy().escape_debug()
                        ));
                    } else if t.to_str().is_none_or(|s| s.chars().any(|c| c.is_control())) {
                        e.refused = Some("a symlink target that is not plain UTF-8".into());
                    }
                    e.kind = match ls.map(|s| s.ftype) {
                        None => Kind::Added,
                        Some(Ftype::Symlink) => {
                            let old = lower
                                .map(|l| l.read_link(&name))
                                .transpose()
                                .map_err(err("read link", &path))?;
                            if old.as_deref() == Some(t.as_os_str()) {
                                Kind::Nothing
                            } else {
                                Kind::Modified
                            }
                        }
                        Some(_) => Kind::Replaced,
                    };
                    self.out.push(e);
                }
                Ftype::File => {
                    if let Some(a) = forbidden_xattr(upper, &name).map_err(err("read", &path))? {
                        e.refused = Some(format!("carries the overlay attribute {a}"));
                    }
                    let f = match upper.open_file(&name) {
                        Ok(f) => f,
                        Err(x) => {
                            e.refused = Some(format!("cannot be read in the change set ({x})"));
                            self.out.push(e);
                            continue;
                        }
                    };
                    e.kind = match ls {
                        None => Kind::Added,
                        Some(l) if l.ftype == Ftype::File => {
                            let same = l.size == us.size
                                && match lower.map(|d| same_content(f, d, &name)) {
                                    Some(Ok(same)) => same,
                                    Some(Err(x)) => {
                                        e.refused = Some(format!(
                                            "cannot be compared with the project's ({x})"
                                        ));
                                        false
                                    }
                                    None => false,
                                };
                            if !same {
                                Kind::Modified
                            } else if l.perm & 0o1777 != e.perm {
                                Kind::Mode
                            } else {
                                Kind::Nothing
                            }
                        }
                        Some(_) => Kind::Replaced,
                    };
                    self.out.push(e);
                }
                Ftype::Dir => {
                    let opaque = OPAQUE.iter().try_fold(false, |acc, a| {
                        Ok::<_, std::io::Error>(
                            acc || upper.xattr_of(&name, a)?.as_deref() == Some(b"y"),
                        )
                    });
                    let opaque = opaque.map_err(err("read", &path))?;
                    if let Some(a) = forbidden_xattr(upper, &name).map_err(err("read", &path))? {
                        e.refused = Some(format!("carries the overlay attribute {a}"));
                        self.out.push(e);
                        continue;
                    }
                    // Nothing below an unreadable directory can be reviewed: it is refused whole.
                    let ud = match upper.child(&name) {
                        Ok(d) => d,
                        Err(x) => {
                            e.refused = Some(format!(
                                "a directory that cannot be read in the change set ({x}): nothing in it is applied"
                            ));
                            self.out.push(e);
                            continue;
                        }
                    };
                    let lower_dir = match (ls, lower) {
                        (Some(l), Some(ld)) if l.ftype == Ftype::Dir && !opaque => {
                            match ld.child(&name) {
                                Ok(d) => Some(d),
                                Err(x) if x.raw_os_error() == Some(libc::EXDEV) => {
                                    e.refused = Some(
                                        "a mount point in the project (the sandbox saw the directory beneath it): nothing in it is applied".into(),
                                    );
                                    self.out.push(e);
                                    continue;
                                }
                                Err(source) => {
                                    return Err(ChangesError::Io {
                                        what: "open",
                                        path: PathBuf::from(format!("project: {path}")),
                                        source,
                                    })
                                }
                            }
                        }
                        _ => None,
                    };
                    let replaced_here;
                    e.kind = match ls {
                        None => {
                            replaced_here = false;
                            Kind::Added
                        }
                        Some(_) if lower_dir.is_some() => {
                            replaced_here = false;
                            if ls.map(|l| l.perm & 0o1777) != Some(e.perm) {
                                Kind::Mode
                            } else {
                                Kind::Nothing
                            }
                        }
                        Some(_) => {
                            replaced_here = true;
                            Kind::Replaced
                        }
                    };
                    // A merged directory whose bits did not change is only a parent: not listed.
                    if e.kind != Kind::Nothing || !e.notes.is_empty() {
                        self.out.push(e);
                    }
                    self.dir(
                        &ud,
                        lower_dir.as_ref(),
                        &child,
                        in_replaced || replaced_here,
                    )?;
                }
            }
        }
        Ok(())
    }
}

/// Do the open file `fa` and the regular file `name` in `b` hold the same bytes?
fn same_content(mut fa: std::fs::File, b: &Dir, name: &OsStr) -> std::io::Result<bool> {
    use std::io::Read;
    let mut fb = b.open_file(name)?;
    let mut ba = vec![0u8; 64 * 1024];
    let mut bb = vec![0u8; 64 * 1024];
    loop {
        let na = read_full(&mut fa, &mut ba)?;
        let nb = read_full(&mut fb, &mut bb)?;
        if na != nb || ba[..na] != bb[..nb] {
            return Ok(false);
        }
        if na == 0 {
            return Ok(true);
        }
    }
    fn read_full(f: &mut std::fs::File, buf: &mut [u8]) -> std::io::Result<usize> {
        let mut n = 0;
        while n < buf.len() {
            match f.read(&mut buf[n..])? {
                0 => break,
                k => n += k,
            }
        }
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn symlinks_inside_and_outside() {
        let r = |a: &str, t: &str| link_inside(Path::new(a), Path::new(t));
        assert!(r("a", "b"));
        assert!(r("d/a", "../b"));
        assert!(!r("a", "../b"));
        assert!(!r("d/a", "../../b"));
        assert!(!r("a", "/etc/passwd"));
        assert!(
            !r("d/e/a", "../x/../y"),
            "a `..` after a name may climb through a link"
        );
        assert!(!r("d/a", "x/../../../y"));
        assert!(
            !r("a/t", "up/.."),
            "`up -> ..` then `..` is the project's parent"
        );
        assert!(r("d/e/a", "../../x/y"));
    }

    #[test]
    fn handoff_paths() {
        let p = vec![
            ".vscode".to_string(),
            ".mcp.json".to_string(),
            ".github/workflows".into(),
        ];
        assert!(is_handoff(".git/config", &p));
        assert!(is_handoff("sub/.git/hooks/pre-commit", &p));
        assert!(is_handoff(".mcp.json", &p));
        assert!(is_handoff(".vscode/tasks.json", &p));
        assert!(is_handoff(".github/workflows/ci.yml", &p));
        assert!(!is_handoff(".github/CODEOWNERS", &p));
        assert!(!is_handoff("src/main.rs", &p));
        assert!(is_handoff(".github", &p), "an ancestor of a protected path");
        assert!(!is_handoff(".vscodex", &p));
    }

    #[test]
    fn control_characters_in_names_are_refused() {
        assert!(name_problem(OsStr::new("a\nb")).is_some());
        assert!(name_problem(OsStr::new("a\x1bb")).is_some());
        assert!(name_problem(OsStr::new("..a")).is_none());
        use std::os::unix::ffi::OsStrExt;
        assert!(name_problem(OsStr::from_bytes(b"a\xffb")).is_some());
    }
}
