//! The record of a whole project walk, so that a start on an unchanged project checks one
//! `statx` per directory instead of walking it (issue 18: policy and bundle within a
//! millisecond on a project of 10,000 files).
//!
//! A walk whose every directory had a trusted ctime ([`crate::listing`]: on a file system
//! that keeps ctimes itself, older than the racy window) and that passed its consistency
//! check saw the project as it was at one moment. It is recorded: each directory's path
//! relative to the project, (device, inode) and ctime, in **post-order** (every directory
//! after all those beneath it), and what the walk found: the secrets matched by name (with the
//! index of the pattern that matched them) and the `.git` entries.
//!
//! A later walk with the same key ([`crate::secrets`]: the name patterns, whether `.git` is
//! looked for, the skipped names, the entry budget, the vetto binary and the project) reuses
//! that result when, in the recorded order, every directory is found at its path (relative to
//! the project's descriptor, the last component not followed) as the same directory with the
//! same ctime, and then the project itself is: why that is enough:
//!
//! - A directory's ctime cannot be set back, and every entry added, removed or renamed in it
//!   changes it; a recorded ctime is older than the racy window, so a later change cannot
//!   leave it as it was. The very directory (device and inode) found with its recorded ctime
//!   has not changed since that ctime was set: it holds the names it held then, bound to the
//!   same inodes. (A directory made since in its place has a new inode or a new ctime.)
//! - So every recorded directory was unchanged from the record until its own check, and at the
//!   moment the check began the whole tree was as recorded: the walk's result holds for that
//!   moment, as a walk's result holds for the moment its consistency check establishes. A
//!   change after that is a change after the scan, as for any walk (the init checks each
//!   secret's inode again before masking it).
//! - The order adds this: each directory is checked before its ancestors, which are then found
//!   unchanged, so every path the check looked up ran through directories as recorded; no
//!   answer came through a path an ancestor's change had redirected.
//!
//! A walk that matched a secret through a symlink is not recorded (its target lies anywhere,
//! unchanged ctimes in the project say nothing about it), nor is one with any directory
//! whose ctime is not trusted. The secrets found by anchored patterns are resolved afresh on
//! every walk. A record that is missing, malformed, of another key or of another project, or
//! that does not match the tree, is not used: the project is walked.

use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use crate::listing::{Reader, Stamp};

/// The file's magic and format version.
const MAGIC: &[u8; 8] = b"vtwlk001";

/// One directory of the record: its path relative to the project, (device, inode), ctime.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Dir {
    pub rel: Vec<u8>,
    pub ino: (u64, u64),
    pub ctime: Stamp,
}

/// A secret the walk matched by name (not through a symlink).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Found {
    pub rel: Vec<u8>,
    /// A directory (masked as one) or not.
    pub dir: bool,
    /// Index of the name pattern that matched it, in the walk's order.
    pub pattern: u32,
    pub dev: u64,
    pub ino: u64,
}

/// A recorded walk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Record {
    /// The project directory itself.
    pub root: ((u64, u64), Stamp),
    /// Every other directory, in post-order.
    pub dirs: Vec<Dir>,
    pub found: Vec<Found>,
    /// The `.git` entries, relative to the project.
    pub git: Vec<Vec<u8>>,
}

impl Record {
    fn encode(&self, key: u128, project: &Path) -> Vec<u8> {
        let mut b = Vec::with_capacity(64 + self.dirs.len() * 48);
        b.extend_from_slice(MAGIC);
        b.extend_from_slice(&key.to_le_bytes());
        bytes(&mut b, project.as_os_str().as_bytes());
        let ((dev, ino), (s, ns)) = self.root;
        for v in [dev, ino, s as u64, ns as u64] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        b.extend_from_slice(&(self.dirs.len() as u64).to_le_bytes());
        for d in &self.dirs {
            bytes(&mut b, &d.rel);
            for v in [d.ino.0, d.ino.1, d.ctime.0 as u64, d.ctime.1 as u64] {
                b.extend_from_slice(&v.to_le_bytes());
            }
        }
        b.extend_from_slice(&(self.found.len() as u64).to_le_bytes());
        for f in &self.found {
            bytes(&mut b, &f.rel);
            b.push(u8::from(f.dir));
            b.extend_from_slice(&f.pattern.to_le_bytes());
            b.extend_from_slice(&f.dev.to_le_bytes());
            b.extend_from_slice(&f.ino.to_le_bytes());
        }
        b.extend_from_slice(&(self.git.len() as u64).to_le_bytes());
        for g in &self.git {
            bytes(&mut b, g);
        }
        b
    }

    /// The record in `buf`, if it is well formed and of `key` and `project`.
    fn decode(buf: &[u8], key: u128, project: &Path) -> Option<Record> {
        let mut r = Reader::new(buf);
        if r.slice(MAGIC.len())? != MAGIC
            || r.u128()? != key
            || r.bytes()? != project.as_os_str().as_bytes()
        {
            return None;
        }
        let root = ((r.u64()?, r.u64()?), (r.u64()? as i64, r.u64()? as i64));
        let n = r.count()?;
        let mut dirs = Vec::with_capacity(n);
        for _ in 0..n {
            let rel = relative(r.bytes()?)?;
            let ino = (r.u64()?, r.u64()?);
            let ctime = (r.u64()? as i64, r.u64()? as i64);
            dirs.push(Dir { rel, ino, ctime });
        }
        let n = r.count()?;
        let mut found = Vec::with_capacity(n);
        for _ in 0..n {
            let rel = relative(r.bytes()?)?;
            let dir = match r.slice(1)?[0] {
                0 => false,
                1 => true,
                _ => return None,
            };
            let pattern = u32::from_le_bytes(r.slice(4)?.try_into().ok()?);
            let (dev, ino) = (r.u64()?, r.u64()?);
            found.push(Found {
                rel,
                dir,
                pattern,
                dev,
                ino,
            });
        }
        let n = r.count()?;
        let mut git = Vec::with_capacity(n);
        for _ in 0..n {
            git.push(relative(r.bytes()?)?);
        }
        r.done().then_some(Record {
            root,
            dirs,
            found,
            git,
        })
    }
}

/// A length-prefixed byte string.
fn bytes(b: &mut Vec<u8>, s: &[u8]) {
    b.extend_from_slice(&(s.len() as u64).to_le_bytes());
    b.extend_from_slice(s);
}

/// `s` if it is a relative path of plain names: not empty, no NUL, no leading `/`, no empty,
/// `.` or `..` component. (The file is vetto's own; this keeps a damaged one from naming a
/// path outside the project.)
fn relative(s: &[u8]) -> Option<Vec<u8>> {
    let plain = !s.is_empty()
        && !s.contains(&0)
        && s.split(|&c| c == b'/')
            .all(|c| !c.is_empty() && c != b"." && c != b"..");
    plain.then(|| s.to_vec())
}

/// Where the records of one project's walks live: the listing cache's file, with `.walk` and
/// a tag of the walk's kind (`secrets.rs::record_target`) after it; one file per kind of walk
/// (vetto run's walk at the start and the one at the end have different patterns).
pub(crate) fn file(listings: &Path, tag: u64) -> PathBuf {
    let mut name = listings.file_name().unwrap_or_default().to_os_string();
    name.push(format!(".walk{tag:016x}"));
    listings.with_file_name(name)
}

/// The record for `key` and `project` in `file`, if there is a well-formed one.
pub(crate) fn load(file: &Path, key: u128, project: &Path) -> Option<Record> {
    let buf = std::fs::read(file).ok()?;
    Record::decode(&buf, key, project)
}

/// Save `rec` for `key` and `project` in `file` (written whole or not at all).
pub(crate) fn save(file: &Path, key: u128, project: &Path, rec: &Record) -> std::io::Result<()> {
    crate::listing::replace_file(file, &rec.encode(key, project))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Record {
        Record {
            root: ((1, 2), (3, 4)),
            dirs: vec![
                Dir {
                    rel: b"a/b".to_vec(),
                    ino: (1, 5),
                    ctime: (6, 7),
                },
                Dir {
                    rel: b"a".to_vec(),
                    ino: (1, 8),
                    ctime: (9, 10),
                },
            ],
            found: vec![Found {
                rel: b"a/.env".to_vec(),
                dir: false,
                pattern: 0,
                dev: 1,
                ino: 11,
            }],
            git: vec![b".git".to_vec()],
        }
    }

    #[test]
    fn a_record_reads_back_for_its_key_and_project_only() {
        let p = Path::new("/p");
        let b = sample().encode(7, p);
        assert_eq!(Record::decode(&b, 7, p), Some(sample()));
        assert_eq!(Record::decode(&b, 8, p), None, "another key");
        assert_eq!(
            Record::decode(&b, 7, Path::new("/q")),
            None,
            "another project"
        );
        // Every truncation, and a byte more, is refused.
        for n in 0..b.len() {
            assert_eq!(Record::decode(&b[..n], 7, p), None, "cut at {n}");
        }
        let mut more = b.clone();
        more.push(0);
        assert_eq!(Record::decode(&more, 7, p), None);
    }

    #[test]
    fn a_record_naming_a_path_outside_the_project_is_refused() {
        let p = Path::new("/p");
        for bad in [
            &b"../x"[..],
            b"/etc",
            b"a/../../x",
            b"",
            b"a//b",
            b"./a",
            b"a\0b",
        ] {
            let mut r = sample();
            r.dirs[0].rel = bad.to_vec();
            assert_eq!(Record::decode(&r.encode(7, p), 7, p), None, "{bad:?}");
            let mut r = sample();
            r.found[0].rel = bad.to_vec();
            assert_eq!(Record::decode(&r.encode(7, p), 7, p), None, "{bad:?}");
        }
    }
}
