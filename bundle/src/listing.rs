//! A cache of the project walk's directory listings, so that a start on an unchanged project
//! of thousands of files opens and `fstat`s each directory instead of reading it (and only
//! `statx`es a leaf through its parent's descriptor: `secrets.rs::cached_leaf`).
//!
//! A listing is reused only for the very directory it was read from, unchanged since: the same
//! (device, inode) and the same **ctime**, to the nanosecond. Adding, removing or renaming an
//! entry updates the directory's ctime, and so does every `utimensat`, `chmod` or `chown`;
//! unlike the mtime, the ctime cannot be set back from user space, so a directory cannot be
//! made to look unchanged after a `.env` was put in it. A listing is stored only when its
//! directory's ctime is older than [`RACY_SECS`] before the walk began: file system timestamps
//! come from a coarse clock, so a change made in the same tick as the read could otherwise
//! leave the ctime as it was (git's "racy clean" problem).
//!
//! The secret patterns are judged afresh on every walk, with one exception: a listing may carry
//! the keys of the last two walks that recorded it as a **leaf** (no directory to descend
//! into, nothing the walk looks at). A key ([`LeafKey`]) is a SHA-256 of the exact name
//! patterns, whether `.git` was looked for, the skipped directory names and the identity of
//! the vetto binary doing the matching. A walk with the same key reuses that verdict for the
//! same listing (same inode, same ctime) instead of matching every name again; any other walk
//! (other patterns, another vetto build) judges the names itself. Every matched entry is still
//! `fstatat`ed and resolved then. The cache lives in vetto's audit state directory, out of
//! every sandbox's reach; a missing, unreadable or malformed file is an empty cache.

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::io::Write;
use std::os::fd::RawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::rc::Rc;

/// A directory entry as read: (name, is a directory).
pub type Entry = (OsString, bool);

/// A directory's change stamp: (seconds, nanoseconds) of its ctime.
pub type Stamp = (i64, i64);

/// Seconds a directory's ctime must lie before the walk's start for its listing to be kept.
pub const RACY_SECS: i64 = 2;

/// The file's magic and format version.
const MAGIC: &[u8; 8] = b"vtlst003";

/// What a walk is known by when it records a listing as a leaf: the first 128 bits of a
/// SHA-256 of what decides the verdict (`secrets.rs::leaf_key`). 0 is no key: nothing is
/// recorded or reused under it.
pub type LeafKey = u128;

/// The keys of the (last two) walks that found a listing a leaf; a slot of 0 is empty.
type Leaves = [LeafKey; 2];

/// Cached listings: (device, inode) → (ctime, listing, keys of walks that found it a leaf).
type Listings = HashMap<(u64, u64), (Stamp, Listing, Leaves)>;

/// One directory's entries, sorted by name, as records `[is_dir: u8][len: u16 LE][name]` in a
/// shared buffer (the whole cache file, or the one listing read): iterating copies nothing.
#[derive(Clone)]
pub struct Listing {
    buf: Rc<[u8]>,
    start: usize,
    end: usize,
    /// Number of entries.
    len: usize,
}

impl Listing {
    /// From entries read from a directory (sorted here). `None` if a name is longer than a
    /// record holds (no Linux file system allows one).
    pub fn from_entries(mut entries: Vec<Entry>) -> Option<Listing> {
        entries.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        let mut b = Vec::with_capacity(entries.iter().map(|e| e.0.len() + 3).sum());
        for (name, is_dir) in &entries {
            let n = u16::try_from(name.len()).ok()?;
            b.push(u8::from(*is_dir));
            b.extend_from_slice(&n.to_le_bytes());
            b.extend_from_slice(name.as_bytes());
        }
        let end = b.len();
        Some(Listing {
            buf: b.into(),
            start: 0,
            end,
            len: entries.len(),
        })
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.len
    }

    /// No entries?
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The entries, in name order.
    pub fn iter(&self) -> ListingIter<'_> {
        ListingIter {
            rest: &self.buf[self.start..self.end],
        }
    }

    /// The entry at byte offset `pos` (0 for the first) and the offset of the next.
    pub fn next_at(&self, pos: usize) -> Option<((&OsStr, bool), usize)> {
        let b = self.buf.get(self.start.checked_add(pos)?..self.end)?;
        let (rec, rest) = split_record(b)?;
        Some((rec, self.end - self.start - rest.len()))
    }

    /// The raw records.
    fn raw(&self) -> &[u8] {
        &self.buf[self.start..self.end]
    }

    /// Are its names what a directory can hold: each non-empty, without `/` or NUL, sorted
    /// and distinct? A listing read from the cache file is checked so before its names are
    /// used ([`ListingCache::get`], [`ListingCache::peek`]), not when the file is parsed:
    /// a warm walk reuses most listings by their leaf verdict, without looking at a name.
    fn well_formed(&self) -> bool {
        let mut prev: Option<&OsStr> = None;
        for (name, _) in self.iter() {
            let bytes = name.as_bytes();
            if bytes.is_empty() || bytes.contains(&b'/') || bytes.contains(&0) {
                return false;
            }
            if prev.is_some_and(|p| p >= name) {
                return false;
            }
            prev = Some(name);
        }
        true
    }

    /// Do both hold the same names?
    pub fn same_names(&self, other: &Listing) -> bool {
        self.iter().map(|e| e.0).eq(other.iter().map(|e| e.0))
    }
}

/// Iterator over a [`Listing`]: (name, is a directory).
pub struct ListingIter<'a> {
    rest: &'a [u8],
}

impl<'a> Iterator for ListingIter<'a> {
    type Item = (&'a OsStr, bool);
    fn next(&mut self) -> Option<Self::Item> {
        let (rec, rest) = split_record(self.rest)?;
        self.rest = rest;
        Some(rec)
    }
}

/// The first record of `b` and what follows it; `None` at the end or on a short record
/// (a listing's records were checked whole when it was made or parsed).
fn split_record(b: &[u8]) -> Option<((&OsStr, bool), &[u8])> {
    let (&flag, rest) = b.split_first()?;
    let n = u16::from_le_bytes(rest.get(..2)?.try_into().ok()?) as usize;
    let name = rest.get(2..2 + n)?;
    Some(((OsStr::from_bytes(name), flag == 1), &rest[2 + n..]))
}

/// The cached listings of one project.
#[derive(Default)]
pub struct ListingCache {
    /// Where it is saved (`None`: kept in memory only).
    file: Option<PathBuf>,
    /// Loaded.
    old: Listings,
    /// Seen in this walk and old enough to keep: what is saved.
    new: Listings,
    /// A leaf verdict was recorded that the file does not hold yet.
    leaves_added: bool,
    /// A ctime strictly before this is trusted.
    trust_before: Stamp,
    /// The project, and whether its file was read yet (on the first lookup, not at `open`).
    project: PathBuf,
    loaded: bool,
    /// Per device: does its file system keep ctimes locally (see [`ctime_is_local`])?
    local: HashMap<u64, bool>,
    /// Listings reused.
    pub hits: usize,
    /// Listings read from the directory.
    pub misses: usize,
    /// Of the listings reused, those of directories the walk did not open (leaves).
    pub unopened: usize,
    /// Of those, the leaves whose names were not matched again (a recorded verdict of a
    /// walk with the same key).
    pub leaf_verdicts: usize,
    /// The walk was not made: its record held (`crate::walkrecord`).
    pub walk_record: bool,
    /// Walks are recorded and their records used (beside the file).
    walk_records: bool,
}

impl ListingCache {
    /// A cache that reuses nothing and saves nothing.
    pub fn none() -> Self {
        Self::default()
    }

    /// The cache for `project` in `dir` (which the caller keeps private), read on its first
    /// lookup. Its trust horizon is fixed now: open it when the walk begins.
    pub fn open(dir: &Path, project: &Path) -> Self {
        let name = format!("{:016x}", fnv1a(project.as_os_str().as_bytes()));
        let file = dir.join(name);
        let horizon = std::time::SystemTime::now()
            .checked_sub(std::time::Duration::from_secs(RACY_SECS as u64))
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or((0, 0), |d| {
                (d.as_secs() as i64, i64::from(d.subsec_nanos()))
            });
        ListingCache {
            walk_records: true,
            file: Some(file),
            old: HashMap::new(),
            new: HashMap::new(),
            trust_before: horizon,
            project: project.to_path_buf(),
            loaded: false,
            local: HashMap::new(),
            leaves_added: false,
            hits: 0,
            misses: 0,
            unopened: 0,
            leaf_verdicts: 0,
            walk_record: false,
        }
    }

    /// [`Self::open`] trusting every ctime before `horizon` (tests: no waiting out the racy
    /// window).
    #[cfg(test)]
    pub(crate) fn open_with_horizon(dir: &Path, project: &Path, horizon: Stamp) -> Self {
        ListingCache {
            trust_before: horizon,
            ..Self::open(dir, project)
        }
    }

    fn load(&mut self) {
        if self.loaded {
            return;
        }
        self.loaded = true;
        if let Some(file) = &self.file {
            self.old = std::fs::read(file)
                .ok()
                .and_then(|b| parse(b.into(), &self.project))
                .unwrap_or_default();
            // A warm walk takes most of them again.
            self.new.reserve(self.old.len());
        }
    }

    /// May the directory open as `fd` (on device `dev`, encrypted or not, at ctime `c`) be
    /// known by its ctime alone? Only on a file system whose kernel keeps the ctime itself
    /// (not FUSE, NFS, 9p, virtiofs, overlayfs, FAT…: there the ctime comes from elsewhere or
    /// can be set), not for an fscrypt directory (its names differ locked and unlocked, and
    /// unlocking does not change the ctime), and only when the ctime is older than the
    /// horizon.
    pub fn trusted(&mut self, dev: u64, fd: RawFd, encrypted: bool, c: Stamp) -> bool {
        if self.file.is_none() || encrypted || c >= self.trust_before {
            return false;
        }
        *self.local.entry(dev).or_insert_with(|| ctime_is_local(fd))
    }

    /// The listing of directory `ino` if it is cached at exactly ctime `c` (`trusted`: what
    /// [`Self::trusted`] said of it).
    pub fn get(&mut self, ino: (u64, u64), c: Stamp, trusted: bool) -> Option<Listing> {
        if !trusted {
            return None;
        }
        self.load();
        let (stamp, listing, leaves) = self.old.get(&ino)?;
        if *stamp != c || !listing.well_formed() {
            return None;
        }
        let l = listing.clone();
        self.new.insert(ino, (c, l.clone(), *leaves));
        self.hits += 1;
        Some(l)
    }

    /// The cache for a later walk of the same project in the same process (`vetto run`'s walk
    /// at the session's end): what this walk saw and would save, without reading the file
    /// again. Its trust horizon stays this walk's, which is earlier than the later walk's
    /// start: no ctime is trusted that the later walk's own horizon would not trust.
    pub fn into_next_walk(self) -> Self {
        // This walk's record held and nothing was read: the later walk reads the file if it
        // needs it.
        if !self.loaded && self.new.is_empty() {
            return ListingCache {
                walk_record: false,
                ..self
            };
        }
        let new = HashMap::with_capacity(self.new.len());
        ListingCache {
            walk_records: self.walk_records,
            file: self.file,
            old: self.new,
            new,
            leaves_added: false,
            trust_before: self.trust_before,
            project: self.project,
            loaded: true,
            local: self.local,
            hits: 0,
            misses: 0,
            unopened: 0,
            leaf_verdicts: 0,
            walk_record: false,
        }
    }

    /// The cache's file, when walks are recorded (their records live beside it).
    pub(crate) fn record_beside(&self) -> Option<&Path> {
        self.file.as_deref().filter(|_| self.walk_records)
    }

    /// This cache without walk records (tests of the listings themselves).
    #[cfg(test)]
    pub(crate) fn without_walk_records(self) -> Self {
        ListingCache {
            walk_records: false,
            ..self
        }
    }

    /// Could a lookup hit at all: a cache with a file that held listings. (A walk without one
    /// need not spend a system call on asking.)
    pub(crate) fn may_hit(&mut self) -> bool {
        if self.file.is_none() {
            return false;
        }
        self.load();
        !self.old.is_empty()
    }

    /// The cached listing of directory `ino` at exactly ctime `c`, without taking it, if
    /// `trusted` ([`Self::trusted`] said so); taken with [`Self::keep`] if used. Also whether
    /// a walk with key `key` (never 0) found that listing a leaf.
    pub(crate) fn peek(
        &mut self,
        ino: (u64, u64),
        c: Stamp,
        trusted: bool,
        key: LeafKey,
    ) -> Option<(Listing, bool)> {
        if !trusted {
            return None;
        }
        self.load();
        let (stamp, listing, leaves) = self.old.get(&ino)?;
        let verdict = key != 0 && leaves.contains(&key);
        // Names matched again are checked first; a verdict reuses none of them.
        (*stamp == c && (verdict || listing.well_formed())).then(|| (listing.clone(), verdict))
    }

    /// Take a listing [`Self::peek`] returned (it stays in the saved cache), as a hit of a
    /// directory not opened, which the walk with key `key` found a leaf (recorded beside the
    /// listing; the older of two other keys gives way). `verdict`: that was known already,
    /// the names were not matched again.
    pub(crate) fn keep(
        &mut self,
        ino: (u64, u64),
        c: Stamp,
        listing: &Listing,
        key: LeafKey,
        verdict: bool,
    ) {
        let mut leaves = self.old.get(&ino).map_or([0; 2], |o| o.2);
        if key != 0 && !leaves.contains(&key) {
            leaves = [key, leaves[0]];
            self.leaves_added = true;
        }
        self.new.insert(ino, (c, listing.clone(), leaves));
        self.hits += 1;
        self.unopened += 1;
        self.leaf_verdicts += usize::from(verdict);
    }

    /// Record the listing just read from directory `ino` (whose ctime was `c` when opened,
    /// before the read): kept only when `c` is old enough.
    pub fn put(&mut self, ino: (u64, u64), c: Stamp, trusted: bool, listing: &Listing) {
        self.misses += 1;
        if trusted {
            self.new.insert(ino, (c, listing.clone(), [0; 2]));
        }
    }

    /// Save what this walk saw (atomically: a temporary file renamed over the old one).
    pub fn save(&self) -> std::io::Result<()> {
        let Some(file) = &self.file else {
            return Ok(());
        };
        if self.new.is_empty() {
            return Ok(());
        }
        // Every listing came from the file and nothing was read: the file says the same
        // already (it is still rewritten once a day, so the week-old sweep spares it).
        if self.misses == 0
            && !self.leaves_added
            && self.new.len() == self.old.len()
            && written_today(file)
        {
            return Ok(());
        }
        let project = self.project.as_os_str().as_bytes();
        let size: usize = self.new.values().map(|(_, l, _)| l.raw().len() + 80).sum();
        let mut b = Vec::with_capacity(size + project.len() + 32);
        b.extend_from_slice(MAGIC);
        b.extend_from_slice(&(project.len() as u64).to_le_bytes());
        b.extend_from_slice(project);
        b.extend_from_slice(&(self.new.len() as u64).to_le_bytes());
        for ((dev, ino), ((s, ns), l, leaves)) in &self.new {
            let raw = l.raw();
            for v in [*dev, *ino, *s as u64, *ns as u64] {
                b.extend_from_slice(&v.to_le_bytes());
            }
            for k in leaves {
                b.extend_from_slice(&k.to_le_bytes());
            }
            b.extend_from_slice(&(raw.len() as u64).to_le_bytes());
            b.extend_from_slice(raw);
        }
        replace_file(file, &b)
    }
}

/// Write `file` (mode 0600) as a whole or not at all: a temporary file beside it (its name
/// with `.tmp` and our pid after it; one a crashed process of the same pid left is removed
/// first), renamed over it. The cache's files and the walk records are written so.
pub(crate) fn replace_file(file: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut tmp = file.as_os_str().to_os_string();
    tmp.push(format!(".tmp{}", std::process::id()));
    let tmp = PathBuf::from(tmp);
    let _ = std::fs::remove_file(&tmp);
    let written = (|| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&tmp)?;
        f.write_all(bytes)?;
        std::fs::rename(&tmp, file)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

/// A little-endian reader over a cache file or a walk record; `None` past its end.
pub(crate) struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(b: &'a [u8]) -> Self {
        Reader { b, at: 0 }
    }
    /// The range of the next `n` bytes.
    pub(crate) fn take(&mut self, n: usize) -> Option<std::ops::Range<usize>> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.b.len())?;
        let r = self.at..end;
        self.at = end;
        Some(r)
    }
    /// The next `n` bytes.
    pub(crate) fn slice(&mut self, n: usize) -> Option<&'a [u8]> {
        let r = self.take(n)?;
        Some(&self.b[r])
    }
    pub(crate) fn u64(&mut self) -> Option<u64> {
        self.slice(8)?.try_into().ok().map(u64::from_le_bytes)
    }
    pub(crate) fn u128(&mut self) -> Option<u128> {
        self.slice(16)?.try_into().ok().map(u128::from_le_bytes)
    }
    /// A count of items, each at least 8 bytes: no larger than what is left could hold.
    pub(crate) fn count(&mut self) -> Option<usize> {
        let n = usize::try_from(self.u64()?).ok()?;
        (n <= (self.b.len() - self.at) / 8).then_some(n)
    }
    /// A length-prefixed byte string.
    pub(crate) fn bytes(&mut self) -> Option<&'a [u8]> {
        let n = usize::try_from(self.u64()?).ok()?;
        self.slice(n)
    }
    /// Everything was read.
    pub(crate) fn done(&self) -> bool {
        self.at == self.b.len()
    }
}

/// Was `file` written within the last day? (A cache file or record still in use is rewritten
/// once a day, so that the week-old sweep of the cache directory spares it.)
pub(crate) fn written_today(file: &Path) -> bool {
    std::fs::metadata(file)
        .and_then(|m| m.modified())
        .is_ok_and(|t| t.elapsed().is_ok_and(|a| a.as_secs() < 24 * 3600))
}

/// The cached listings, if `buf` is a well-formed cache of `project` (a hash collision with
/// another project's file is told apart by the path stored in it). Every record's framing is
/// checked here (a flag is 0 or 1, a name lies within its listing); the names themselves before
/// they are used ([`Listing::well_formed`]).
fn parse(buf: Rc<[u8]>, project: &Path) -> Option<Listings> {
    let mut r = Reader::new(&buf);
    let magic = r.take(MAGIC.len())?;
    let n = usize::try_from(r.u64()?).ok()?;
    let p = r.take(n)?;
    if &buf[magic] != MAGIC || &buf[p] != project.as_os_str().as_bytes() {
        return None;
    }
    let dirs = r.u64()?;
    let mut out = HashMap::with_capacity(dirs.min(1 << 16) as usize);
    for _ in 0..dirs {
        let (dev, ino, s, ns) = (r.u64()?, r.u64()?, r.u64()?, r.u64()?);
        let leaves = [r.u128()?, r.u128()?];
        let len = usize::try_from(r.u64()?).ok()?;
        let range = r.take(len)?;
        let mut rest = &buf[range.clone()];
        let mut count = 0;
        // The records' framing is checked here; their names when they are used
        // ([`Listing::well_formed`]).
        while !rest.is_empty() {
            count += 1;
            if rest[0] > 1 {
                return None;
            }
            let (_, tail) = split_record(rest)?;
            rest = tail;
        }
        let listing = Listing {
            buf: buf.clone(),
            start: range.start,
            end: range.end,
            len: count,
        };
        out.insert((dev, ino), ((s as i64, ns as i64), listing, leaves));
    }
    r.done().then_some(out)
}

/// Does the file system of `fd` keep directory ctimes in the kernel, where no one can set
/// them: ext2/3/4, xfs, btrfs, tmpfs, f2fs, bcachefs. Anything else (or an error) is not
/// cached.
fn ctime_is_local(fd: RawFd) -> bool {
    const LOCAL: [i64; 6] = [
        0xEF53,      // ext2, ext3, ext4
        0x5846_5342, // xfs
        0x9123_683E, // btrfs
        0x0102_1994, // tmpfs
        0xF2F5_2010, // f2fs
        0xCA45_1A4E, // bcachefs
    ];
    // SAFETY: an all-zero statfs is valid for the kernel to fill.
    let mut s: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: fstatfs on a descriptor the caller holds open, into a local.
    if unsafe { libc::fstatfs(fd, &mut s) } != 0 {
        return false;
    }
    LOCAL.contains(&(s.f_type as i64))
}

/// FNV-1a, 64 bits: the cache file's name from the project's path.
pub(crate) fn fnv1a(b: &[u8]) -> u64 {
    b.iter().fold(0xcbf2_9ce4_8422_2325, |h, &x| {
        (h ^ u64::from(x)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entries(names: &[(&str, bool)]) -> Listing {
        Listing::from_entries(names.iter().map(|(n, d)| (OsString::from(n), *d)).collect())
            .expect("listing")
    }

    #[test]
    fn a_listing_comes_back_only_for_the_same_inode_and_ctime() {
        let t = tempfile::tempdir().expect("tmp");
        let proj = Path::new("/p");
        let mut c = ListingCache::open(t.path(), proj);
        let old = (1_000, 5);
        c.put((1, 2), old, true, &entries(&[("src", true), ("a", false)]));
        // Too recent to keep.
        c.put((1, 3), (i64::MAX, 0), false, &entries(&[("b", false)]));
        c.save().expect("save");
        let mut c = ListingCache::open(t.path(), proj);
        let hit = c.get((1, 2), old, true).expect("hit");
        let got: Vec<_> = hit.iter().collect();
        assert_eq!(got, [(OsStr::new("a"), false), (OsStr::new("src"), true)]);
        assert!(c.get((1, 2), (1_000, 6), true).is_none(), "another ctime");
        assert!(c.get((9, 2), old, true).is_none(), "another device");
        assert!(
            c.get((1, 3), (i64::MAX, 0), true).is_none(),
            "racy: never stored"
        );
        // Another project's file under the same name is not read as this one's.
        assert!(ListingCache::open(t.path(), Path::new("/q"))
            .get((1, 2), old, true)
            .is_none());
    }

    #[test]
    fn trust_needs_an_old_ctime_a_local_file_system_and_no_encryption() {
        use std::os::fd::AsRawFd;
        let t = tempfile::tempdir().expect("tmp");
        let dir = std::fs::File::open(t.path()).expect("open");
        let fd = dir.as_raw_fd();
        let mut c = ListingCache::open(t.path(), Path::new("/p"));
        // The temporary directory is on ext4 or tmpfs here.
        assert!(c.trusted(1, fd, false, (1_000, 0)));
        assert!(!c.trusted(1, fd, true, (1_000, 0)), "encrypted");
        assert!(!c.trusted(1, fd, false, (i64::MAX, 0)), "too recent");
        let proc_fs = std::fs::File::open("/proc").expect("proc");
        assert!(
            !c.trusted(2, proc_fs.as_raw_fd(), false, (1_000, 0)),
            "not a local-ctime file system"
        );
        assert!(!ListingCache::none().trusted(1, fd, false, (1_000, 0)));
    }

    /// A leaf verdict is saved and read back with its listing, only for the key it was
    /// recorded under; the last two keys recorded stay; a listing read again (a new ctime)
    /// carries none.
    #[test]
    fn leaf_verdicts_belong_to_their_listing_and_key() {
        let t = tempfile::tempdir().expect("tmp");
        let proj = Path::new("/p");
        let (ino, old) = ((1, 2), (1_000, 5));
        let l = entries(&[("a", false)]);
        let mut c = ListingCache::open(t.path(), proj);
        c.put(ino, old, true, &l);
        c.save().expect("save");
        let verdict = |k: LeafKey, at: Stamp| {
            ListingCache::open(t.path(), proj)
                .peek(ino, at, true, k)
                .map(|(_, v)| v)
        };
        assert_eq!(verdict(7, old), Some(false), "read, not yet judged");
        for k in [7, 8] {
            let mut c = ListingCache::open(t.path(), proj);
            let (got, _) = c.peek(ino, old, true, k).expect("cached");
            assert_eq!(got.len(), 1);
            c.keep(ino, old, &got, k, false);
            c.save().expect("save");
        }
        assert_eq!(
            (verdict(7, old), verdict(8, old), verdict(9, old)),
            (Some(true), Some(true), Some(false))
        );
        assert_eq!(verdict(0, old), Some(false), "no key, no verdict");
        assert_eq!(
            verdict(7, (1_000, 6)),
            None,
            "another ctime: no listing at all"
        );
        // A third key: the oldest (7) gives way.
        let mut c = ListingCache::open(t.path(), proj);
        let (got, _) = c.peek(ino, old, true, 9).expect("cached");
        c.keep(ino, old, &got, 9, false);
        c.save().expect("save");
        assert_eq!(
            (verdict(7, old), verdict(8, old), verdict(9, old)),
            (Some(false), Some(true), Some(true))
        );
        // The directory changed and was read again: its new listing carries no verdict.
        let new = (1_001, 0);
        let mut c = ListingCache::open(t.path(), proj);
        assert!(c.get(ino, new, true).is_none());
        c.put(ino, new, true, &entries(&[("a", false), (".env", false)]));
        c.save().expect("save");
        assert_eq!(
            (verdict(8, new), verdict(9, new)),
            (Some(false), Some(false))
        );
    }

    /// The one cache file a test's directory holds.
    fn the_file(dir: &Path) -> std::path::PathBuf {
        std::fs::read_dir(dir)
            .expect("ls")
            .flatten()
            .next()
            .expect("the cache file")
            .path()
    }

    #[test]
    fn a_malformed_file_is_an_empty_cache() {
        let t = tempfile::tempdir().expect("tmp");
        let proj = Path::new("/p");
        let mut c = ListingCache::open(t.path(), proj);
        c.put((1, 2), (1_000, 0), true, &entries(&[("a", false)]));
        c.save().expect("save");
        let file = the_file(t.path());
        let good = std::fs::read(&file).expect("read");
        for cut in [good.len() - 1, 12, 0] {
            std::fs::write(&file, &good[..cut]).expect("w");
            assert!(ListingCache::open(t.path(), proj)
                .get((1, 2), (1_000, 0), true)
                .is_none());
        }
        let mut bad = good.clone();
        let slash = bad.len() - 1;
        bad[slash] = b'/';
        std::fs::write(&file, &bad).expect("w");
        assert!(ListingCache::open(t.path(), proj)
            .get((1, 2), (1_000, 0), true)
            .is_none());
    }

    /// Names are checked when a listing is used, one listing at a time: a listing whose names
    /// could not come from a directory (unsorted, or holding a `/`) is not reused, by `get`
    /// or by a `peek` that matches names again; the file's other listings still are.
    #[test]
    fn a_listing_with_a_bad_name_is_refused_and_the_others_still_serve() {
        let t = tempfile::tempdir().expect("tmp");
        let proj = Path::new("/p");
        let at = (1_000, 0);
        let mut c = ListingCache::open(t.path(), proj);
        c.put((1, 2), at, true, &entries(&[("a", false)]));
        c.put((1, 3), at, true, &entries(&[("b", false), ("c", true)]));
        c.put((1, 4), at, true, &entries(&[("x", false)]));
        c.save().expect("save");
        let file = the_file(t.path());
        let good = std::fs::read(&file).expect("read");
        let find =
            |b: &[u8], rec: &[u8]| b.windows(rec.len()).position(|w| w == rec).expect("record");
        // (1, 3) becomes "b", "a": unsorted. (1, 4) becomes "/".
        let mut bad = good.clone();
        let c_at = find(&bad, b"\x01\x01\x00c");
        bad[c_at + 3] = b'a';
        let x_at = find(&bad, b"\x00\x01\x00x");
        bad[x_at + 3] = b'/';
        std::fs::write(&file, &bad).expect("w");
        let mut c = ListingCache::open(t.path(), proj);
        assert!(c.get((1, 3), at, true).is_none(), "unsorted");
        assert!(
            c.peek((1, 3), at, true, 5).is_none(),
            "unsorted, matched again"
        );
        assert!(c.get((1, 4), at, true).is_none(), "a slash");
        assert!(
            c.peek((1, 4), at, true, 5).is_none(),
            "a slash, matched again"
        );
        let a = c.get((1, 2), at, true).expect("the well-formed listing");
        assert_eq!(a.iter().map(|e| e.0.to_owned()).collect::<Vec<_>>(), ["a"]);
    }

    /// The walk at a session's end starts from what the walk at its start saw, in memory: its
    /// trusted listings hit without the file (removed here), an untrusted one does not, and
    /// the first walk's trust horizon still bounds what is trusted.
    #[test]
    fn the_next_walk_starts_from_this_walks_listings() {
        let t = tempfile::tempdir().expect("tmp");
        let proj = Path::new("/p");
        let horizon = (2_000, 0);
        let mut c = ListingCache::open_with_horizon(t.path(), proj, horizon);
        c.put((1, 2), (1_000, 0), true, &entries(&[("a", false)]));
        c.put((1, 3), (1_000, 0), false, &entries(&[("b", false)]));
        c.save().expect("save");
        for f in std::fs::read_dir(t.path()).expect("ls").flatten() {
            std::fs::remove_file(f.path()).expect("rm");
        }
        let mut next = c.into_next_walk();
        assert!(
            next.get((1, 2), (1_000, 0), true).is_some(),
            "taken from the first walk"
        );
        assert!(
            next.get((1, 2), (1_001, 0), true).is_none(),
            "another ctime"
        );
        assert!(
            next.get((1, 3), (1_000, 0), true).is_none(),
            "never trusted"
        );
        assert!(
            !next.trusted(1, -1, false, horizon),
            "the first walk's horizon"
        );
        assert_eq!((next.hits, next.misses), (1, 0));
        // What it saw is saved as a walk's would be.
        next.put((1, 5), (1_500, 0), true, &entries(&[("c", false)]));
        next.save().expect("save");
        let mut again = ListingCache::open(t.path(), proj);
        assert!(again.get((1, 2), (1_000, 0), true).is_some());
        assert!(again.get((1, 5), (1_500, 0), true).is_some());
    }
}
