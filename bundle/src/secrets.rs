//! Finding the secret paths that exist on this host, resolved through symlinks.
//!
//! Landlock cannot subtract `$PROJECT/.env` from an allowed project root, so each secret that
//! exists is masked by a bind overlay on its *resolved* path: a `.env` that is a symlink to
//! `~/.ssh/id_ed25519` masks the key itself, wherever it is reached from.

use std::path::{Path, PathBuf};

use globset::{Glob, GlobMatcher};

pub use crate::listing::ListingCache;
use crate::listing::{LeafKey, Listing, Stamp};
use crate::walkrecord;
use serde::Serialize;

use crate::error::TranslateError;
use crate::resolve::{Source, Sourced};

/// The built-in secret list.
pub struct BuiltinSecrets {
    /// File patterns: a bare name (or name glob) matches anywhere in the project; `~/…` and
    /// `/…` are anchored, with globs allowed in the last component.
    pub files: &'static [&'static str],
    /// Directory patterns.
    pub dirs: &'static [&'static str],
}

/// What vetto masks unless a policy says `extend = false`.
pub const BUILTIN_SECRETS: BuiltinSecrets = BuiltinSecrets {
    files: &[
        ".env",
        ".env.*",
        "~/.docker/config.json",
        "~/.netrc",
        "~/.npmrc",
        "~/.pypirc",
        "~/.git-credentials",
        "~/.config/git/credentials",
        "~/.cargo/credentials",
        "~/.cargo/credentials.toml",
        "~/.config/hub",
        "~/.m2/settings.xml",
        "~/.m2/settings-security.xml",
        "~/.gradle/gradle.properties",
        "/etc/shadow",
        "/etc/gshadow",
        "/etc/ssh/ssh_host_*_key",
    ],
    dirs: &[
        "~/.ssh",
        "~/.aws",
        "~/.gnupg",
        "~/.config/gcloud",
        "~/.azure",
        "~/.kube",
        "~/.config/gh",
        "~/.password-store",
    ],
};

/// Directories not descended into while looking for name patterns in the project: they are
/// large, tool-managed, and a secret planted there by the agent was readable to it anyway.
pub const SCAN_SKIP: &[&str] = &[".git", "node_modules", "target"];

/// How many directory entries the project scan may visit before it fails closed.
pub const SCAN_BUDGET: usize = 200_000;

/// File or directory mask.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum MaskKind {
    /// `/dev/null` bound over it.
    File,
    /// An empty mode-000 tmpfs over it.
    Dir,
    /// A symlink with a secret's name (its target, if it has one, is masked as a file or
    /// directory): nothing is mounted over the link, but `vetto run`'s init checks that the
    /// name is still this very symlink before the command starts. A regular file put in its
    /// place between the scan and the start would otherwise be shown unmasked.
    Link,
}

/// One secret that exists and will be masked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SecretMatch {
    /// The resolved path that is masked.
    pub path: PathBuf,
    /// File or directory.
    pub kind: MaskKind,
    /// The pattern that found it.
    pub pattern: String,
    /// The path it was found at, when that was a symlink.
    pub via: Option<PathBuf>,
    /// Where the pattern came from.
    pub source: Source,
    /// `st_dev` of the resolved object when it was found (the init checks it before masking).
    pub dev: u64,
    /// `st_ino` of the resolved object when it was found.
    pub ino: u64,
}

/// A file name, compared literally unless it has glob characters (building a glob matcher
/// compiles a regex: ~0.1 ms each, paid on every start, and patterns are compiled once per
/// bind). The common globs (`.env.*`, `*.pem`, `ssh_host_*_key`: only `*` and `?`) are
/// matched directly, byte for byte as globset would; the rest go to globset.
enum NameMatch {
    Literal(String),
    Wildcard(Vec<u8>),
    Glob(GlobMatcher),
}

impl NameMatch {
    fn is_match(&self, name: &std::ffi::OsStr) -> bool {
        use std::os::unix::ffi::OsStrExt;
        match self {
            NameMatch::Literal(l) => name == l.as_str(),
            NameMatch::Wildcard(w) => wildcard_match(w, name.as_bytes()),
            NameMatch::Glob(g) => g.is_match(name),
        }
    }
}

/// Can `glob` be matched by [`wildcard_match`] with globset's meaning? Only `*` (not `**`,
/// which globset reads as a recursive prefix in some places) and `?`, no classes,
/// alternates, escapes or separators.
fn is_simple_wildcard(glob: &str) -> bool {
    !glob.contains(['[', ']', '{', '}', '\\', '/']) && !glob.contains("**")
}

/// Byte-wise wildcard match: `*` is any run of bytes, `?` exactly one byte (globset compiles
/// a name glob to a bytes regex with `.` matching any byte, newline included). Linear
/// backtracking to the last `*` only: O(pattern × name), no blow-up on hostile names.
fn wildcard_match(pat: &[u8], name: &[u8]) -> bool {
    let (mut p, mut n) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while n < name.len() {
        match pat.get(p) {
            Some(b'*') => {
                star = Some((p, n));
                p += 1;
            }
            Some(&c) if c == b'?' || c == name[n] => {
                p += 1;
                n += 1;
            }
            _ => match star {
                Some((sp, sn)) => {
                    p = sp + 1;
                    n = sn + 1;
                    star = Some((sp, sn + 1));
                }
                None => return false,
            },
        }
    }
    pat[p..].iter().all(|&c| c == b'*')
}

enum Pattern {
    /// A name (or name glob) matched anywhere in the project.
    Name(NameMatch),
    /// An absolute path whose last component may be a glob.
    Anchored { dir: PathBuf, last: NameMatch },
}

impl Pattern {
    /// With an anchored pattern's directory resolved (symlinks, `..`), as canonical paths are
    /// compared with it; unchanged when it does not exist.
    fn resolved(self) -> Pattern {
        self.resolved_with(&mut vec![])
    }

    /// [`Pattern::resolved`], taking a directory's canonical form from `known` (directory,
    /// canonical) when it was resolved already, and adding it there when not.
    fn resolved_with(self, known: &mut Vec<(PathBuf, PathBuf)>) -> Pattern {
        match self {
            Pattern::Anchored { dir, last } => {
                let dir = match known.iter().find(|(d, _)| *d == dir) {
                    Some((_, c)) => c.clone(),
                    None => {
                        let c = dir.canonicalize().unwrap_or_else(|_| dir.clone());
                        known.push((dir, c.clone()));
                        c
                    }
                };
                Pattern::Anchored { dir, last }
            }
            name => name,
        }
    }
}

fn compile(raw: &str, home: &Path, project: &Path) -> Result<Pattern, TranslateError> {
    let bad = |reason: String| TranslateError::Path {
        key: "secrets".into(),
        path: raw.into(),
        reason,
    };
    let glob = |s: &str| {
        if !s.contains(['*', '?', '[', '{']) {
            return Ok(NameMatch::Literal(s.to_string()));
        }
        if is_simple_wildcard(s) {
            return Ok(NameMatch::Wildcard(s.as_bytes().to_vec()));
        }
        Glob::new(s)
            .map(|g| NameMatch::Glob(g.compile_matcher()))
            .map_err(|e| bad(format!("bad glob: {e}")))
    };
    if !raw.contains('/') && !raw.starts_with('~') {
        return Ok(Pattern::Name(glob(raw)?));
    }
    let abs = crate::policy::expand_path(raw, home, project)?;
    let dir = abs
        .parent()
        .ok_or_else(|| bad("no parent directory".into()))?;
    if dir.to_string_lossy().contains(['*', '?', '[', '{']) {
        return Err(bad(
            "globs are allowed only in the last path component".into()
        ));
    }
    let last = abs
        .file_name()
        .ok_or_else(|| bad("no file name".into()))?
        .to_string_lossy()
        .into_owned();
    Ok(Pattern::Anchored {
        dir: dir.to_path_buf(),
        last: glob(&last)?,
    })
}

/// Find every existing path matched by the secret patterns. `files`, `dirs` and `globs` are
/// matched alike; the kind of mask follows what the resolved path really is.
pub fn scan(
    patterns: &[&Sourced<String>],
    home: &Path,
    project: &Path,
) -> Result<Vec<SecretMatch>, TranslateError> {
    Ok(scan_project(patterns, home, project, false)?.secrets)
}

/// The secret that `path` (canonical) is or lies in, by `patterns` (`~` is `home`): an
/// anchored pattern (`~/.aws`, `/etc/ssh/ssh_host_*_key`) matching `path` or one of its
/// ancestors, or a name pattern (`.env*`, `*.pem`) matching `path`'s own name. A scan starts
/// beneath a directory, so this is the check for what a bind *is* rather than what it holds:
/// a bind of a single file, or of a directory inside a secret one.
///
/// For more than one path, build a [`SecretIndex`] once and ask it for each.
pub fn secret_containing(
    patterns: &[&Sourced<String>],
    home: &Path,
    path: &Path,
) -> Result<Option<(PathBuf, String)>, TranslateError> {
    SecretIndex::new(patterns, home)?.containing(path)
}

/// The patterns of [`secret_containing`], compiled once and with their directories resolved
/// once, for asking about many paths (every bind of a bundle). Compiling and resolving per
/// path cost a `realpath` (a `readlink` per component) for each anchored pattern and each
/// bind: ~250 `readlink`s on every start of the default profile.
pub struct SecretIndex {
    entries: Vec<(IndexEntry, String)>,
    home: PathBuf,
}

enum IndexEntry {
    /// A name pattern, or an anchored one with its directory canonical.
    Compiled(Pattern),
    /// A relative pattern with a directory part: anchored at the path asked about, as
    /// [`secret_containing`] always did, so compiled per path.
    PerPath,
}

impl SecretIndex {
    /// Compile `patterns` (`~` is `home`). Fails on a pattern that does not compile.
    pub fn new(patterns: &[&Sourced<String>], home: &Path) -> Result<Self, TranslateError> {
        let mut entries = Vec::with_capacity(patterns.len());
        // Most anchored patterns share a directory (`~`, `~/.config`, `/etc`): each is
        // resolved once.
        let mut canonical: Vec<(PathBuf, PathBuf)> = vec![];
        for p in patterns {
            let raw = &p.value;
            let relative_with_dir = raw.contains('/') && !raw.starts_with(['/', '~']);
            let entry = if relative_with_dir {
                // Checked now (anchored anywhere), so that a bad one fails the index.
                compile(raw, home, Path::new("/"))?;
                IndexEntry::PerPath
            } else {
                // The base is not used: the pattern is a bare name or absolute.
                IndexEntry::Compiled(
                    compile(raw, home, Path::new("/"))?.resolved_with(&mut canonical),
                )
            };
            entries.push((entry, raw.clone()));
        }
        Ok(Self {
            entries,
            home: home.to_path_buf(),
        })
    }

    /// The secret that `path` (canonical) is or lies in, and the pattern that says so: the
    /// first pattern, in the order given, that matches.
    pub fn containing(&self, path: &Path) -> Result<Option<(PathBuf, String)>, TranslateError> {
        for (entry, raw) in &self.entries {
            let per_path;
            let pattern = match entry {
                IndexEntry::Compiled(p) => p,
                IndexEntry::PerPath => {
                    per_path = compile(raw, &self.home, path)?.resolved();
                    &per_path
                }
            };
            match pattern {
                Pattern::Name(m) => {
                    if path.file_name().is_some_and(|n| m.is_match(n)) {
                        return Ok(Some((path.to_path_buf(), raw.clone())));
                    }
                }
                Pattern::Anchored { dir, last } => {
                    for a in path.ancestors() {
                        if a.parent() == Some(dir.as_path())
                            && a.file_name().is_some_and(|n| last.is_match(n))
                        {
                            return Ok(Some((a.to_path_buf(), raw.clone())));
                        }
                    }
                }
            }
        }
        Ok(None)
    }
}

/// What one walk of the project found.
#[derive(Debug, Clone, Default)]
pub struct Scan {
    /// Secrets, sorted by path.
    pub secrets: Vec<SecretMatch>,
    /// Every `.git` entry (directory or gitlink file) in the project, the project's own
    /// included; not descended into. Empty unless asked for.
    pub git_entries: Vec<PathBuf>,
}

/// [`scan`], and in the same walk, when `find_git` is set, every `.git` entry of the project
/// (repositories and submodules at any depth, except beneath [`SCAN_SKIP`] directories).
///
/// The walk is checked for consistency: every directory it listed is listed again afterwards
/// and must still be the same inode with the same entries. Otherwise something renamed inside
/// the project while it was walked (a second sandbox swapping directories with
/// `RENAME_EXCHANGE` can hide a secret from a walk that reads `x` before and `y` after the
/// swap); the walk is repeated, and after [`SCAN_ATTEMPTS`] the start is refused.
pub fn scan_project(
    patterns: &[&Sourced<String>],
    home: &Path,
    project: &Path,
    find_git: bool,
) -> Result<Scan, TranslateError> {
    scan_project_cached(patterns, home, project, find_git, &mut ListingCache::none())
}

/// [`scan_project`], reusing the listings of directories unchanged since `cache` was saved
/// (see [`crate::listing`]) and recording what it read; the caller saves it.
pub fn scan_project_cached(
    patterns: &[&Sourced<String>],
    home: &Path,
    project: &Path,
    find_git: bool,
    cache: &mut ListingCache,
) -> Result<Scan, TranslateError> {
    scan_within(patterns, home, project, find_git, cache, SCAN_BUDGET)
}

/// [`scan_project_cached`] with a budget of `budget` entries instead of [`SCAN_BUDGET`].
fn scan_within(
    patterns: &[&Sourced<String>],
    home: &Path,
    project: &Path,
    find_git: bool,
    cache: &mut ListingCache,
    budget: usize,
) -> Result<Scan, TranslateError> {
    for _ in 0..SCAN_ATTEMPTS {
        let mut visited = vec![];
        let attempt = Attempt {
            home,
            project,
            find_git,
            budget,
        };
        let mut pending = None;
        let Some(scan) = scan_attempt(patterns, &attempt, &mut visited, cache, &mut pending)?
        else {
            continue;
        };
        // A directory seen under two names was renamed during the walk (it may have hidden
        // another one); so was one whose inode or entries differ now (for a listing whose
        // directory's ctime is old and unchanged, the ctime says so: see crate::listing).
        let mut inos: Vec<(u64, u64)> = visited.iter().map(|v| v.ino).collect();
        inos.sort_unstable();
        let distinct = inos.windows(2).all(|w| w[0] != w[1]);
        if distinct && visited.iter().all(|v| v.unchanged()) {
            if let Some(p) = pending {
                record_walk(p, project, &visited);
            }
            return Ok(scan);
        }
    }
    Err(TranslateError::SecretScan {
        root: project.to_path_buf(),
        reason: format!(
            "the project changed while it was scanned, {SCAN_ATTEMPTS} times in a row \
             (is something renaming inside it?); the masks cannot be placed reliably"
        ),
    })
}

/// Walks of a changing project before the start is refused.
pub const SCAN_ATTEMPTS: usize = 3;

/// One directory as the walk saw it.
struct Visited {
    path: PathBuf,
    /// (device, inode).
    ino: (u64, u64),
    /// Its ctime when it was opened, and whether that is old enough to stand for its entries.
    ctime: Stamp,
    trusted: bool,
    /// Its entries, sorted by name.
    entries: Listing,
}

impl Visited {
    fn unchanged(&self) -> bool {
        // The same directory at the same old ctime holds the same entries (crate::listing):
        // one `lstat` says so.
        if self.trusted {
            use std::os::unix::fs::MetadataExt;
            if let Ok(m) = std::fs::symlink_metadata(&self.path) {
                if m.is_dir()
                    && (m.dev(), m.ino()) == self.ino
                    && (m.ctime(), m.ctime_nsec()) == self.ctime
                {
                    return true;
                }
            }
        }
        let Ok(d) = Dir::open_path(&self.path) else {
            return false;
        };
        if d.ino != self.ino {
            return false;
        }
        if self.trusted && d.ctime == self.ctime {
            return true;
        }
        d.entries()
            .ok()
            .and_then(Listing::from_entries)
            .is_some_and(|e| e.same_names(&self.entries))
    }
}

/// A directory's listing: from `cache` when it holds this very directory unchanged, else
/// read (and recorded there).
/// Also whether its ctime may stand for its entries ([`ListingCache::trusted`]).
fn listing(d: &Dir, cache: &mut ListingCache) -> std::io::Result<(Listing, bool)> {
    use std::os::fd::AsRawFd;
    let trusted = cache.trusted(d.ino.0, d.fd.as_raw_fd(), d.encrypted, d.ctime);
    if let Some(e) = cache.get(d.ino, d.ctime, trusted) {
        return Ok((e, trusted));
    }
    let e = Listing::from_entries(d.entries()?)
        .ok_or_else(|| std::io::Error::from_raw_os_error(libc::ENAMETOOLONG))?;
    cache.put(d.ino, d.ctime, trusted, &e);
    Ok((e, trusted))
}

/// The subdirectory `name` of `parent`, when the walk need not open it: one `statx` through
/// the parent's descriptor (not following a symlink) finds a directory on the parent's own
/// file system whose (device, inode) and ctime are those of a listing in `cache` that its
/// ctime may stand for ([`ListingCache::trusted`]), and that listing holds nothing the walk
/// would look at: no name a pattern in `names` matches, no `.git` when `find_git`, and no
/// directory to descend into. That is a leaf of the tree as the walk last saw it, and most
/// directories of a source tree are. Returned: its identity, ctime and listing. It is checked
/// again after the walk like every trusted directory ([`Visited::unchanged`]), so a change
/// since the `statx` repeats the walk as a change since an `open` would. When a walk with the
/// same `key` ([`leaf_key`]) recorded this very listing as a leaf, its names are not matched
/// again.
///
/// A leaf costs one system call this way instead of three (`openat`, `statx`, `close`); a
/// directory that turns out not to be one pays one `statx` more. On the bench's 10,000-file
/// tree (100 leaves in 100 directories) a warm walk makes 100 fewer calls; a tree with more
/// leaves than inner directories, the usual shape, saves more. A walk whose cache cannot hit
/// (none, or an empty one) does not ask.
fn cached_leaf(
    parent: &Dir,
    name: &std::ffi::OsStr,
    cache: &mut ListingCache,
    names: &[(&NameMatch, &Sourced<String>)],
    find_git: bool,
    key: LeafKey,
) -> Option<((u64, u64), Stamp, Listing)> {
    use std::os::fd::AsRawFd;
    use std::os::unix::ffi::OsStrExt;
    if !cache.may_hit() {
        return None;
    }
    let c = Dir::c_name(name.as_bytes()).ok()?;
    let st = statx_at(parent.fd.as_raw_fd(), &c, libc::AT_SYMLINK_NOFOLLOW).ok()?;
    if u32::from(st.stx_mode) & libc::S_IFMT != libc::S_IFDIR {
        return None;
    }
    let (ino, ctime, encrypted) = statx_identity(&st);
    // Another file system (a mount point): opened, so that its own kind is asked.
    if ino.0 != parent.ino.0 {
        return None;
    }
    // The parent's descriptor answers for the file system both are on.
    let trusted = cache.trusted(ino.0, parent.fd.as_raw_fd(), encrypted, ctime);
    let (listed, verdict) = cache.peek(ino, ctime, trusted, key)?;
    // A walk with the same key found this very listing a leaf: the names need not be
    // matched again (the verdict is a function of the listing and the key alone).
    if !verdict {
        for (entry, is_dir) in listed.iter() {
            if descends(entry, is_dir)
                || (find_git && entry == ".git")
                || names.iter().any(|(g, _)| g.is_match(entry))
            {
                return None;
            }
        }
    }
    cache.keep(ino, ctime, &listed, key, verdict);
    Some((ino, ctime, listed))
}

/// The key under which a walk records the leaves it found ([`LeafKey`]): what decides whether
/// a listing is a leaf for it, i.e. its name patterns, exactly as written and in order (a
/// name pattern's matcher depends on its text alone), whether it looks for `.git`, the
/// directories it does not descend into ([`SCAN_SKIP`]), and the code that matches: the
/// identity of the running vetto binary (device, inode, size, mtime and ctime of
/// `/proc/self/exe`), so that an upgrade whose globs or rules match more names judges every
/// name again. 0 (nothing recorded or reused) when the binary cannot be identified.
fn leaf_key(names: &[(&NameMatch, &Sourced<String>)], find_git: bool) -> LeafKey {
    use sha2::{Digest, Sha256};
    let Some(exe) = binary_identity() else {
        return 0;
    };
    let mut h = Sha256::new();
    h.update(b"vetto leaf rule 1\0");
    h.update(exe);
    h.update([u8::from(find_git)]);
    for skip in SCAN_SKIP {
        h.update((skip.len() as u64).to_le_bytes());
        h.update(skip.as_bytes());
    }
    h.update((names.len() as u64).to_le_bytes());
    for (_, s) in names {
        h.update((s.value.len() as u64).to_le_bytes());
        h.update(s.value.as_bytes());
    }
    let d = h.finalize();
    let mut k = [0u8; 16];
    k.copy_from_slice(&d[..16]);
    // 0 means "no key"; a digest whose first 128 bits are 0 is not seen in practice.
    LeafKey::from_le_bytes(k).max(1)
}

/// The running binary, as (device, inode, size, mtime, ctime) of `/proc/self/exe`, once per
/// process: a rebuilt or reinstalled vetto differs.
fn binary_identity() -> Option<[u8; 48]> {
    static ID: std::sync::OnceLock<Option<[u8; 48]>> = std::sync::OnceLock::new();
    *ID.get_or_init(|| {
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::metadata("/proc/self/exe").ok()?;
        let mut b = [0u8; 48];
        let fields = [
            m.dev(),
            m.ino(),
            m.size(),
            m.mtime() as u64,
            m.mtime_nsec() as u64,
            m.ctime() as u64,
        ];
        for (i, v) in fields.iter().enumerate() {
            b[i * 8..i * 8 + 8].copy_from_slice(&v.to_le_bytes());
        }
        Some(b)
    })
}

/// What the walk knows a directory by, from its `statx`: (device, inode), ctime, and whether
/// it is an fscrypt directory (`STATX_ATTR_ENCRYPTED`).
fn statx_identity(st: &libc::statx) -> ((u64, u64), Stamp, bool) {
    (
        (
            libc::makedev(st.stx_dev_major, st.stx_dev_minor),
            st.stx_ino,
        ),
        (st.stx_ctime.tv_sec, i64::from(st.stx_ctime.tv_nsec)),
        st.stx_attributes & libc::STATX_ATTR_ENCRYPTED as u64 != 0,
    )
}

/// Does the walk descend into the entry `name` (a directory, unless it is one of [`SCAN_SKIP`])?
fn descends(name: &std::ffi::OsStr, is_dir: bool) -> bool {
    is_dir && !SCAN_SKIP.iter().any(|s| name == *s)
}

/// A directory open for reading, with its inode (`O_NOFOLLOW`: never through a symlink).
struct Dir {
    fd: std::os::fd::OwnedFd,
    /// (device, inode).
    ino: (u64, u64),
    /// ctime when opened.
    ctime: Stamp,
    /// An fscrypt directory (`STATX_ATTR_ENCRYPTED`).
    encrypted: bool,
}

impl Dir {
    fn from_fd(raw: libc::c_int) -> std::io::Result<Self> {
        use std::os::fd::{AsRawFd, FromRawFd};
        if raw < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: the kernel just returned this descriptor; nothing else owns it.
        let fd = unsafe { std::os::fd::OwnedFd::from_raw_fd(raw) };
        let st = statx_at(fd.as_raw_fd(), c"", libc::AT_EMPTY_PATH)?;
        let (ino, ctime, encrypted) = statx_identity(&st);
        Ok(Dir {
            fd,
            ino,
            ctime,
            encrypted,
        })
    }

    /// A name as a C string (a NUL inside is EINVAL, as the kernel would say).
    fn c_name(b: &[u8]) -> std::io::Result<std::ffi::CString> {
        std::ffi::CString::new(b).map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))
    }

    const FLAGS: libc::c_int =
        libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC;

    fn open_path(p: &Path) -> std::io::Result<Self> {
        use std::os::unix::ffi::OsStrExt;
        let c = Self::c_name(p.as_os_str().as_bytes())?;
        // SAFETY: a valid C string.
        Self::from_fd(unsafe { libc::open(c.as_ptr(), Self::FLAGS) })
    }

    fn open_child(&self, name: &std::ffi::OsStr) -> std::io::Result<Self> {
        use std::os::fd::AsRawFd;
        use std::os::unix::ffi::OsStrExt;
        let c = Self::c_name(name.as_bytes())?;
        // SAFETY: a valid directory descriptor and C string.
        Self::from_fd(unsafe { libc::openat(self.fd.as_raw_fd(), c.as_ptr(), Self::FLAGS) })
    }

    /// `fstatat` of an entry, not following a symlink.
    fn stat_child(&self, name: &std::ffi::OsStr) -> std::io::Result<libc::stat> {
        use std::os::fd::AsRawFd;
        use std::os::unix::ffi::OsStrExt;
        let c = Self::c_name(name.as_bytes())?;
        // SAFETY: fstatat fills a zeroed struct we own.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: a valid directory descriptor, C string and out pointer.
        let r = unsafe {
            libc::fstatat(
                self.fd.as_raw_fd(),
                c.as_ptr(),
                &mut st,
                libc::AT_SYMLINK_NOFOLLOW,
            )
        };
        if r != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(st)
    }

    /// (name, is a directory) of every entry but `.` and `..`, read through this descriptor.
    fn entries(&self) -> std::io::Result<Vec<crate::listing::Entry>> {
        use std::os::fd::AsRawFd;
        use std::os::unix::ffi::OsStrExt;
        // SAFETY: duplicating our own descriptor; fdopendir takes the duplicate.
        let dup = unsafe { libc::fcntl(self.fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 0) };
        if dup < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: a directory descriptor we own; on success the DIR owns it.
        let dirp = unsafe { libc::fdopendir(dup) };
        if dirp.is_null() {
            let e = std::io::Error::last_os_error();
            // SAFETY: fdopendir failed, so the duplicate is still ours to close.
            unsafe { libc::close(dup) };
            return Err(e);
        }
        // SAFETY: rewind the shared offset: the duplicate shares it with `self.fd`.
        unsafe { libc::rewinddir(dirp) };
        let mut out = vec![];
        let result = loop {
            // SAFETY: errno is thread-local; reset so a NULL return can be told apart.
            unsafe { *libc::__errno_location() = 0 };
            // SAFETY: dirp is a valid, open DIR.
            let ent = unsafe { libc::readdir(dirp) };
            if ent.is_null() {
                let e = std::io::Error::last_os_error();
                break if e.raw_os_error().unwrap_or(0) == 0 {
                    Ok(())
                } else {
                    Err(e)
                };
            }
            // SAFETY: readdir returned a valid entry whose d_name is NUL-terminated.
            let (name, d_type) = unsafe {
                (
                    std::ffi::CStr::from_ptr((*ent).d_name.as_ptr())
                        .to_bytes()
                        .to_vec(),
                    (*ent).d_type,
                )
            };
            if name == b"." || name == b".." {
                continue;
            }
            let is_dir = match d_type {
                libc::DT_DIR => true,
                libc::DT_UNKNOWN => self
                    .stat_child(std::ffi::OsStr::from_bytes(&name))
                    .is_ok_and(|st| st.st_mode & libc::S_IFMT == libc::S_IFDIR),
                _ => false,
            };
            out.push((std::ffi::OsStr::from_bytes(&name).to_os_string(), is_dir));
        };
        // SAFETY: closing the DIR we opened (and the duplicate it owns).
        unsafe { libc::closedir(dirp) };
        result.map(|()| out)
    }
}

/// What one walk is asked: the home and project directories, whether `.git` entries are
/// looked for, and how many entries it may visit.
struct Attempt<'a> {
    home: &'a Path,
    project: &'a Path,
    find_git: bool,
    budget: usize,
}

fn scan_attempt(
    patterns: &[&Sourced<String>],
    a: &Attempt<'_>,
    visited: &mut Vec<Visited>,
    cache: &mut ListingCache,
    pending: &mut Option<Pending>,
) -> Result<Option<Scan>, TranslateError> {
    let (home, project, find_git) = (a.home, a.project, a.find_git);
    let mut git_entries = vec![];
    let mut compiled = vec![];
    for p in patterns {
        compiled.push((compile(&p.value, home, project)?, *p));
    }
    let mut found: Vec<SecretMatch> = vec![];
    let mut add = |m: Option<SecretMatch>| {
        if let Some(m) = m.filter(|m| !found.iter().any(|f| f.path == m.path)) {
            found.push(m);
        }
    };
    let names: Vec<_> = compiled
        .iter()
        .filter_map(|(c, s)| match c {
            Pattern::Name(g) => Some((g, *s)),
            _ => None,
        })
        .collect();
    for (c, s) in &compiled {
        if let Pattern::Anchored { dir, last } = c {
            if let NameMatch::Literal(name) = last {
                let p = dir.join(name);
                if p.symlink_metadata().is_ok() {
                    for m in resolve_match(&p, s)? {
                        add(Some(m));
                    }
                }
                continue;
            }
            let Ok(rd) = std::fs::read_dir(dir) else {
                continue;
            };
            for e in rd.flatten() {
                if last.is_match(&e.file_name()) {
                    for m in resolve_match(&e.path(), s)? {
                        add(Some(m));
                    }
                }
            }
        }
    }
    // Set when an entry listed a moment ago is gone: the walk must be repeated.
    let mut changed = false;
    // Matches judged through the descriptor, added after the walk (for one target, a match
    // reached through a symlink is recorded first, as the path-based walk did).
    let mut direct: Vec<SecretMatch> = vec![];
    // The index in `names` of the pattern that matched each of `direct`.
    let mut direct_by: Vec<usize> = vec![];
    // A walk that matched a secret through a symlink is not recorded (walkrecord.rs).
    let mut linked = false;
    let mut target = None;
    // The leaf key, computed at most once for the record and the walk.
    let leaf = std::cell::OnceCell::new();
    let leaf_of = || *leaf.get_or_init(|| leaf_key(&names, find_git));
    'walk: {
        if names.is_empty() && !find_git {
            break 'walk;
        }
        // The record of an earlier walk, when the project is as it recorded (walkrecord.rs).
        target = record_target(cache, &leaf_of, &names, find_git, a.budget, project);
        if let Some((d, g)) = target
            .as_ref()
            .and_then(|t| reuse_record(t, project, &names, cache))
        {
            direct.extend(d);
            git_entries.extend(g);
            cache.walk_record = true;
            target = None;
            break 'walk;
        }
        let mut budget = a.budget;
        let over_budget = || TranslateError::SecretScan {
            root: project.to_path_buf(),
            reason: format!(
                "more than {} entries; name the secrets with anchored paths \
                 (e.g. `config/.env`) or narrow the project",
                a.budget
            ),
        };
        let err = |root: &Path, e: std::io::Error| TranslateError::SecretScan {
            root: root.to_path_buf(),
            reason: e.to_string(),
        };
        let root = Dir::open_path(project).map_err(|e| err(project, e))?;
        // Only a cache that can hit takes or records verdicts (no digest, no stat of the
        // binary for a cold walk or one without a cache).
        let key = match cache.may_hit() {
            true => leaf_of(),
            false => 0,
        };
        // Depth first, holding one descriptor per level: each directory is opened relative to
        // the descriptor of the one it was listed in, never by a path that a rename could
        // redirect, and its inode is recorded with the entries read from that descriptor (a
        // cached leaf is `statx`ed through that descriptor instead: `cached_leaf`).
        let mut stack: Vec<(PathBuf, Dir, Listing, usize)> = vec![];
        let (listed, trusted) = listing(&root, cache).map_err(|e| err(project, e))?;
        visited.push(Visited {
            path: project.to_path_buf(),
            ino: root.ino,
            ctime: root.ctime,
            trusted,
            entries: listed.clone(),
        });
        stack.push((project.to_path_buf(), root, listed, 0));
        while let Some((dir, fd, listed, next)) = stack.last_mut() {
            // The listing is shared (a reference count), so the entry is borrowed, not copied.
            let listed = listed.clone();
            let Some(((name, is_dir), after)) = listed.next_at(*next) else {
                stack.pop();
                continue;
            };
            *next = after;
            let matched = names.iter().position(|(g, _)| g.is_match(name));
            let descend = descends(name, is_dir);
            let is_git = find_git && name == ".git";
            budget = budget.checked_sub(1).ok_or_else(over_budget)?;
            if matched.is_none() && !descend && !is_git {
                continue;
            }
            let path = dir.join(name);
            if is_git {
                git_entries.push(path.clone());
            }
            if let Some(i) = matched {
                let s = names[i].1;
                // Judged through the directory's descriptor: a path lookup now could land in
                // another directory that a rename put at this path.
                match fd.stat_child(name) {
                    Ok(st) if st.st_mode & libc::S_IFMT == libc::S_IFLNK => {
                        linked = true;
                        for m in resolve_match(&path, s)? {
                            add(Some(m));
                        }
                    }
                    Ok(st) => {
                        let kind = if st.st_mode & libc::S_IFMT == libc::S_IFDIR {
                            MaskKind::Dir
                        } else {
                            MaskKind::File
                        };
                        direct.push(SecretMatch {
                            path: path.clone(),
                            kind,
                            pattern: s.value.clone(),
                            via: None,
                            source: s.source.clone(),
                            dev: st.st_dev,
                            ino: st.st_ino,
                        });
                        direct_by.push(i);
                    }
                    Err(e) if e.raw_os_error() == Some(libc::ENOENT) => changed = true,
                    Err(e) => return Err(err(&path, e)),
                }
                if is_dir {
                    continue;
                }
            }
            if descend {
                // A directory known unchanged whose listing holds nothing to look at is not
                // opened: see [`cached_leaf`]. Its entries count against the budget.
                if let Some((ino, ctime, listed)) =
                    cached_leaf(fd, name, cache, &names, find_git, key)
                {
                    budget = budget.checked_sub(listed.len()).ok_or_else(over_budget)?;
                    visited.push(Visited {
                        path,
                        ino,
                        ctime,
                        trusted: true,
                        entries: listed,
                    });
                    continue;
                }
                let child = match fd.open_child(name) {
                    Ok(c) => c,
                    // Gone or replaced by a non-directory since it was listed: the listing
                    // check below sees the change and the walk is repeated.
                    Err(e)
                        if matches!(
                            e.raw_os_error(),
                            Some(libc::ENOENT | libc::ENOTDIR | libc::ELOOP)
                        ) =>
                    {
                        changed = true;
                        continue;
                    }
                    Err(e) => return Err(err(&path, e)),
                };
                let (listed, trusted) = listing(&child, cache).map_err(|e| err(&path, e))?;
                visited.push(Visited {
                    path: path.clone(),
                    ino: child.ino,
                    ctime: child.ctime,
                    trusted,
                    entries: listed.clone(),
                });
                stack.push((path, child, listed, 0));
            }
        }
    }
    if changed {
        return Ok(None);
    }
    if let Some(t) = target.filter(|_| !linked) {
        *pending = Some(Pending {
            target: t,
            found: direct
                .iter()
                .zip(&direct_by)
                .map(|(m, &i)| walkrecord::Found {
                    rel: relative_to(&m.path, project),
                    dir: m.kind == MaskKind::Dir,
                    pattern: i as u32,
                    dev: m.dev,
                    ino: m.ino,
                })
                .collect(),
            git: git_entries
                .iter()
                .map(|g| relative_to(g, project))
                .collect(),
        });
    }
    for m in direct {
        add(Some(m));
    }
    found.sort_by(|a, b| a.path.cmp(&b.path));
    git_entries.sort();
    Ok(Some(Scan {
        secrets: found,
        git_entries,
    }))
}

/// Where and under which key a walk is recorded ([`crate::walkrecord`]).
struct RecordTarget {
    file: PathBuf,
    key: u128,
}

/// A walk that may be recorded once its consistency check passes: where, and what it found.
struct Pending {
    target: RecordTarget,
    found: Vec<walkrecord::Found>,
    git: Vec<Vec<u8>>,
}

/// Where this walk's record lives and its key, when the cache has a file and the running
/// binary can be identified. The key is a SHA-256 of the leaf key (`leaf`: [`leaf_key`], the name
/// patterns as written, `.git` looked for or not, the skipped names, the binary), the entry
/// budget and the project; the file's name, of what kind of walk it is (the patterns and
/// `find_git`, not the binary: an upgrade overwrites its predecessor's record).
fn record_target(
    cache: &ListingCache,
    leaf: &dyn Fn() -> LeafKey,
    names: &[(&NameMatch, &Sourced<String>)],
    find_git: bool,
    budget: usize,
    project: &Path,
) -> Option<RecordTarget> {
    use sha2::{Digest, Sha256};
    use std::os::unix::ffi::OsStrExt;
    let listings = cache.record_beside()?;
    let leaf = leaf();
    if leaf == 0 {
        return None;
    }
    let mut h = Sha256::new();
    h.update(b"vetto walk record 1\0");
    h.update(leaf.to_le_bytes());
    h.update((budget as u64).to_le_bytes());
    h.update(project.as_os_str().as_bytes());
    let d = h.finalize();
    let mut k = [0u8; 16];
    k.copy_from_slice(&d[..16]);
    let mut tag = crate::listing::fnv1a(&[u8::from(find_git)]);
    for (_, s) in names {
        tag ^= crate::listing::fnv1a(s.value.as_bytes()).rotate_left(7);
        tag = tag.wrapping_mul(0x0000_0100_0000_01b3);
    }
    Some(RecordTarget {
        file: walkrecord::file(listings, tag),
        key: u128::from_le_bytes(k),
    })
}

/// `p` relative to `project`, as bytes.
fn relative_to(p: &Path, project: &Path) -> Vec<u8> {
    use std::os::unix::ffi::OsStrExt;
    p.strip_prefix(project)
        .unwrap_or(p)
        .as_os_str()
        .as_bytes()
        .to_vec()
}

/// Record a walk that passed its consistency check, when every directory it visited had a
/// trusted ctime and lay on the project's own file system (one fstatfs answered for it). The
/// walk visited directories in pre-order (each before those beneath it): reversed, that is a
/// post-order, the order a record is checked in. A record that cannot be written is no error:
/// the next start walks.
fn record_walk(p: Pending, project: &Path, visited: &[Visited]) {
    let Some((root, rest)) = visited.split_first() else {
        return;
    };
    if !visited.iter().all(|v| v.trusted && v.ino.0 == root.ino.0) {
        return;
    }
    let rec = walkrecord::Record {
        root: (root.ino, root.ctime),
        dirs: rest
            .iter()
            .rev()
            .map(|v| walkrecord::Dir {
                rel: relative_to(&v.path, project),
                ino: v.ino,
                ctime: v.ctime,
            })
            .collect(),
        found: p.found,
        git: p.git,
    };
    // Not saved (a full disk, a read-only state directory): the next start walks.
    let _ = walkrecord::save(&p.target.file, p.target.key, project, &rec);
}

/// The secrets matched by name and the `.git` entries of the recorded walk, when the project
/// is as the record has it ([`crate::walkrecord`] says why this check is enough): the project
/// directory the same, on a file system whose ctimes are trusted; every recorded directory, in
/// the recorded post-order, found by its path relative to the project's descriptor (its last
/// component not followed) as the same directory at the same ctime; then the project
/// directory again unchanged and still at its path. Anything else is `None`: the project is
/// walked.
fn reuse_record(
    t: &RecordTarget,
    project: &Path,
    names: &[(&NameMatch, &Sourced<String>)],
    cache: &mut ListingCache,
) -> Option<(Vec<SecretMatch>, Vec<PathBuf>)> {
    use std::os::fd::AsRawFd;
    use std::os::unix::ffi::OsStrExt;
    let rec = walkrecord::load(&t.file, t.key, project)?;
    let root = Dir::open_path(project).ok()?;
    let fd = root.fd.as_raw_fd();
    if (root.ino, root.ctime) != rec.root
        || !cache.trusted(root.ino.0, fd, root.encrypted, root.ctime)
    {
        return None;
    }
    for d in &rec.dirs {
        let c = Dir::c_name(&d.rel).ok()?;
        let st = statx_at(fd, &c, libc::AT_SYMLINK_NOFOLLOW).ok()?;
        let (ino, ctime, _) = statx_identity(&st);
        if u32::from(st.stx_mode) & libc::S_IFMT != libc::S_IFDIR
            || ino != d.ino
            || ctime != d.ctime
        {
            return None;
        }
    }
    let again = statx_at(fd, c"", libc::AT_EMPTY_PATH).ok()?;
    let (ino, ctime, _) = statx_identity(&again);
    let at_path = {
        use std::os::unix::fs::MetadataExt;
        std::fs::symlink_metadata(project)
            .ok()
            .map(|m| (m.dev(), m.ino()))
    };
    if (ino, ctime) != rec.root || at_path != Some(rec.root.0) {
        return None;
    }
    let mut secrets = Vec::with_capacity(rec.found.len());
    for f in &rec.found {
        let (_, s) = names.get(usize::try_from(f.pattern).ok()?)?;
        secrets.push(SecretMatch {
            path: project.join(std::ffi::OsStr::from_bytes(&f.rel)),
            kind: if f.dir { MaskKind::Dir } else { MaskKind::File },
            pattern: s.value.clone(),
            via: None,
            source: s.source.clone(),
            dev: f.dev,
            ino: f.ino,
        });
    }
    let git = rec
        .git
        .iter()
        .map(|g| project.join(std::ffi::OsStr::from_bytes(g)))
        .collect();
    // A record in use is rewritten once a day, so that the week-old sweep spares it.
    if !crate::listing::written_today(&t.file) {
        let _ = walkrecord::save(&t.file, t.key, project, &rec);
    }
    Some((secrets, git))
}

/// `statx` of `path` relative to the directory `fd` (`flags`: `AT_SYMLINK_NOFOLLOW`, or
/// `AT_EMPTY_PATH` with an empty path for `fd` itself), basic fields.
fn statx_at(
    fd: libc::c_int,
    path: &std::ffi::CStr,
    flags: libc::c_int,
) -> std::io::Result<libc::statx> {
    // SAFETY: an all-zero statx is valid for the kernel to fill.
    let mut st: libc::statx = unsafe { std::mem::zeroed() };
    // SAFETY: a descriptor the caller holds open, a valid C string, a local to fill.
    let r = unsafe { libc::statx(fd, path.as_ptr(), flags, libc::STATX_BASIC_STATS, &mut st) };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(st)
}

/// The secret a matched path names: its resolved target (masked), and when the path is a
/// symlink, the link itself ([`MaskKind::Link`], checked unchanged at start), also when it
/// dangles or points somewhere the sandbox cannot see.
fn resolve_match(path: &Path, pat: &Sourced<String>) -> Result<Vec<SecretMatch>, TranslateError> {
    let mut out = vec![];
    let link = path
        .symlink_metadata()
        .ok()
        .filter(|m| m.file_type().is_symlink());
    let is_link = link.is_some();
    if let Some(m) = link {
        out.push(SecretMatch {
            path: path.to_path_buf(),
            kind: MaskKind::Link,
            pattern: pat.value.clone(),
            via: None,
            source: pat.source.clone(),
            dev: std::os::unix::fs::MetadataExt::dev(&m),
            ino: std::os::unix::fs::MetadataExt::ino(&m),
        });
    }
    // A dangling symlink points at nothing to read: no mask, only the link check.
    let Ok(resolved) = path.canonicalize() else {
        return Ok(out);
    };
    let meta = std::fs::metadata(&resolved).map_err(|e| TranslateError::SecretScan {
        root: resolved.clone(),
        reason: e.to_string(),
    })?;
    let kind = if meta.is_dir() {
        MaskKind::Dir
    } else {
        MaskKind::File
    };
    out.push(SecretMatch {
        dev: std::os::unix::fs::MetadataExt::dev(&meta),
        ino: std::os::unix::fs::MetadataExt::ino(&meta),
        via: (is_link || resolved != path).then(|| path.to_path_buf()),
        path: resolved,
        kind,
        pattern: pat.value.clone(),
        source: pat.source.clone(),
    });
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn src(v: &str) -> Sourced<String> {
        Sourced {
            value: v.into(),
            source: Source::Builtin("t".into()),
        }
    }

    /// The direct wildcard matcher agrees with globset (its oracle) on every pattern it takes
    /// and on names built from the patterns' own bytes plus newline, '/', NUL and non-UTF-8.
    #[test]
    fn wildcard_matches_as_globset_does() {
        use std::os::unix::ffi::OsStrExt;
        let pats = [
            ".env.*",
            "*.pem",
            "ssh_host_*_key",
            "*",
            "?",
            "a*b*c",
            "*a*",
            "??*",
            "*.?",
            "x?y*",
            "*é*",
            ".*rc",
            "id_*",
            "*_*_*",
        ];
        let alphabet: &[u8] = b"abcxy._ekpm\n/\0\xff\xc3\xa9*?";
        let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for pat in pats {
            assert!(is_simple_wildcard(pat), "{pat}");
            let oracle = Glob::new(pat).expect("glob").compile_matcher();
            let mut names: Vec<Vec<u8>> = vec![vec![], pat.as_bytes().to_vec()];
            for _ in 0..4000 {
                let len = (next() % 9) as usize;
                names.push(
                    (0..len)
                        .map(|_| alphabet[(next() % alphabet.len() as u64) as usize])
                        .collect(),
                );
            }
            for n in names {
                let os = std::ffi::OsStr::from_bytes(&n);
                assert_eq!(
                    wildcard_match(pat.as_bytes(), &n),
                    oracle.is_match(os),
                    "pattern {pat:?}, name {n:?}"
                );
            }
        }
        for other in ["[ab]*", "{a,b}", "**", "a\\*", "x/*"] {
            assert!(!is_simple_wildcard(other), "{other}");
        }
    }

    /// One index, asked about many paths, answers as the patterns say: anchored patterns
    /// through a HOME reached by a symlink (its directory is resolved once, at build), name
    /// patterns on the path's own name, the first matching pattern in order, nothing for a
    /// path outside every secret, and relative patterns as before. A bad pattern fails the
    /// build, not a later question.
    #[test]
    fn an_index_built_once_finds_what_each_pattern_names() {
        let t = tempfile::tempdir().expect("tmp");
        let root = t.path().canonicalize().expect("c");
        let real_home = root.join("real-home");
        std::fs::create_dir_all(real_home.join(".aws/sub")).expect("mk");
        std::fs::create_dir_all(root.join("etc/ssh")).expect("mk");
        symlink(&real_home, root.join("home")).expect("ln");
        let host_key = format!("{}/etc/ssh/ssh_host_*_key", root.display());
        let pats = [
            src(".env*"),
            src("~/.aws"),
            src(&host_key),
            src("conf/creds"),
            src("*.pem"),
        ];
        let refs: Vec<_> = pats.iter().collect();
        let index = SecretIndex::new(&refs, &root.join("home")).expect("index");
        let ask = |p: &Path| index.containing(p).expect("ask");
        assert_eq!(
            ask(&real_home.join(".aws/sub")),
            Some((real_home.join(".aws"), "~/.aws".to_string()))
        );
        assert_eq!(
            ask(&real_home.join(".aws")),
            Some((real_home.join(".aws"), "~/.aws".to_string()))
        );
        assert_eq!(
            ask(&root.join("etc/ssh/ssh_host_ed25519_key")),
            Some((root.join("etc/ssh/ssh_host_ed25519_key"), host_key.clone()))
        );
        assert_eq!(ask(&root.join("etc/ssh/ssh_config")), None);
        assert_eq!(
            ask(&root.join("p/.env.local")),
            Some((root.join("p/.env.local"), ".env*".to_string()))
        );
        // `.env.pem` matches two patterns: the first in order names it.
        assert_eq!(
            ask(&root.join("p/.env.pem")),
            Some((root.join("p/.env.pem"), ".env*".to_string()))
        );
        assert_eq!(
            ask(&root.join("p/cert.pem")),
            Some((root.join("p/cert.pem"), "*.pem".to_string()))
        );
        assert_eq!(ask(&real_home.join(".awsx")), None);
        assert_eq!(ask(&root.join("p/src")), None);
        // A relative pattern with a directory part is anchored at the path asked about (as
        // it always was): the index and a per-path compile agree.
        let rel = [src("conf/creds")];
        let rel: Vec<_> = rel.iter().collect();
        let rel_index = SecretIndex::new(&rel, &root).expect("index");
        for p in [
            root.join("p/conf/creds"),
            root.join("p/conf/creds/x"),
            root.join("p"),
        ] {
            let want = match compile("conf/creds", &root, &p).expect("compile") {
                Pattern::Anchored { dir, last } => p
                    .ancestors()
                    .find(|a| {
                        a.parent() == Some(dir.as_path())
                            && a.file_name().is_some_and(|n| last.is_match(n))
                    })
                    .map(|a| (a.to_path_buf(), "conf/creds".to_string())),
                Pattern::Name(_) => unreachable!("it has a directory part"),
            };
            assert_eq!(
                rel_index.containing(&p).expect("ask"),
                want,
                "{}",
                p.display()
            );
        }
        // The one-shot function is the index.
        assert_eq!(
            secret_containing(&refs, &root.join("home"), &real_home.join(".aws/sub")).expect("ask"),
            Some((real_home.join(".aws"), "~/.aws".to_string()))
        );
        for bad in ["~/a*/b", "a*/b", "x/../y"] {
            let bad = [src(bad)];
            let bad: Vec<_> = bad.iter().collect();
            assert!(SecretIndex::new(&bad, &root).is_err(), "{}", bad[0].value);
        }
    }

    /// A temporary directory (kept alive by the first value) with a project and a listing
    /// cache's state directory in it, and a horizon after which every ctime so far is trusted
    /// (no waiting out the racy window).
    fn cache_world() -> (tempfile::TempDir, PathBuf, PathBuf, PathBuf, Stamp) {
        let t = tempfile::tempdir().expect("tmp");
        let root = t.path().canonicalize().expect("c");
        let proj = root.join("proj");
        let state = root.join("state");
        std::fs::create_dir_all(&state).expect("mk");
        let d = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("now");
        (t, root, proj, state, (d.as_secs() as i64 + 3600, 0))
    }

    /// The walk fails closed past its budget of entries, cold and warm alike: the entries
    /// of a leaf the warm walk does not open (its listing from the cache) count as if it were
    /// read. (Fails if `cached_leaf`'s entries went uncounted: the warm walk would then pass
    /// with less.)
    #[test]
    fn the_entry_budget_holds_for_cached_leaves_too() {
        let (_t, root, proj, state, later) = cache_world();
        for d in ["a/leaf", "b/node_modules/x"] {
            std::fs::create_dir_all(proj.join(d)).expect("mk");
        }
        for f in ["a/leaf/1", "a/leaf/2", "a/leaf/3", "a/leaf/4", "b/.env"] {
            std::fs::write(proj.join(f), "K=1").expect("w");
        }
        // proj: a, b; a: leaf; leaf: 1-4; b: .env, node_modules (not descended into).
        let entries = 2 + 1 + 4 + 2;
        let pats = [src(".env*")];
        let refs: Vec<_> = pats.iter().collect();
        let walk = |budget: usize| {
            let mut c =
                ListingCache::open_with_horizon(&state, &proj, later).without_walk_records();
            let r = scan_within(&refs, &root, &proj, true, &mut c, budget);
            c.save().expect("save");
            (r, c.unopened)
        };
        let over = |r: Result<Scan, TranslateError>| match r {
            Err(TranslateError::SecretScan { reason, .. }) => {
                reason.starts_with(&format!("more than {} entries", entries - 1))
            }
            _ => false,
        };
        assert!(over(walk(entries - 1).0), "cold, one entry short");
        let (cold, _) = walk(entries);
        assert_eq!(
            cold.expect("cold, exactly enough").secrets[0].path,
            proj.join("b/.env")
        );
        // Warm: the cache knows every listing; `leaf` (and so its four entries) is not
        // opened.
        let (warm, unopened) = walk(entries);
        assert_eq!(
            unopened, 1,
            "the leaf was opened: this walk is not the cached one"
        );
        assert_eq!(
            warm.expect("warm, exactly enough").secrets[0].path,
            proj.join("b/.env")
        );
        let (r, unopened) = walk(entries - 1);
        assert_eq!(unopened, 1);
        assert!(over(r), "warm, one entry short");
        // And the binaries' budget is the constant.
        let mut c = ListingCache::open_with_horizon(&state, &proj, later).without_walk_records();
        assert!(scan_project_cached(&refs, &root, &proj, true, &mut c).is_ok());
    }

    /// A warm walk does not open the leaves its cache knows (directories whose listing holds
    /// nothing to look at), and finds what a cold walk finds: a leaf whose cached listing
    /// holds a secret's name or a `.git` is no leaf (it is opened and judged), a leaf that
    /// changed is read again, and one replaced by a symlink is not followed.
    #[test]
    fn a_warm_walk_skips_only_the_leaves_it_may() {
        let (_t, root, proj, state, later) = cache_world();
        for d in [
            "a/leaf1",
            "a/leaf2/node_modules/x",
            "b/holds-env",
            "b/repo/.git",
            "c",
        ] {
            std::fs::create_dir_all(proj.join(d)).expect("mk");
        }
        for f in ["a/leaf1/x.rs", "a/leaf2/y.rs", "b/holds-env/.env", "c/z"] {
            std::fs::write(proj.join(f), "K=1").expect("w");
        }
        std::fs::write(root.join("outside.env"), "K=1").expect("w");
        let pats = [src(".env*")];
        let refs: Vec<_> = pats.iter().collect();
        let walk_with = |refs: &[&Sourced<String>]| {
            let mut c =
                ListingCache::open_with_horizon(&state, &proj, later).without_walk_records();
            let s = scan_project_cached(refs, &root, &proj, true, &mut c).expect("scan");
            c.save().expect("save");
            let found: Vec<PathBuf> = s.secrets.iter().map(|m| m.path.clone()).collect();
            (
                found,
                s.git_entries,
                c.unopened,
                c.misses,
                c.hits,
                c.leaf_verdicts,
            )
        };
        let walk = || walk_with(&refs);
        let cold = walk();
        assert_eq!(cold.0, [proj.join("b/holds-env/.env")]);
        assert_eq!(cold.1, [proj.join("b/repo/.git")]);
        assert_eq!(cold.2, 0, "nothing cached yet");
        let warm = walk();
        assert_eq!((&warm.0, &warm.1), (&cold.0, &cold.1));
        assert_eq!(warm.3, 0, "no listing was read");
        // All eight directories (the project, a, leaf1, leaf2, b, holds-env, repo, c).
        assert_eq!(warm.4, 8, "every listing came from the cache");
        // Exactly leaf1, leaf2 (its node_modules is not descended into) and c; not a or b
        // (they hold directories), holds-env (a secret's name), repo (a `.git`), nor the
        // project itself.
        assert_eq!(warm.2, 3, "the leaves were not opened");
        assert_eq!(
            warm.5, 0,
            "no leaf verdict recorded yet: the names were matched"
        );
        // The next walk with the same patterns takes the verdicts the last one recorded.
        let third = walk();
        assert_eq!((&third.0, &third.1, third.2), (&cold.0, &cold.1, 3));
        assert_eq!(third.5, 3, "the leaves' names were not matched again");
        // Whether `.git` is looked for is part of the key: the same patterns without it take
        // no verdict (a leaf for it may hold a `.git`: repo is one of its four leaves). Not
        // saved, so the verdicts of the walks below stay as they were.
        let mut c = ListingCache::open_with_horizon(&state, &proj, later).without_walk_records();
        scan_project_cached(&refs, &root, &proj, false, &mut c).expect("scan");
        assert_eq!(
            (c.unopened, c.leaf_verdicts),
            (4, 0),
            "judged afresh without .git"
        );
        // The after-session walk (no patterns, `.git` only) records its own verdicts beside
        // the first walk's, which stay usable: each listing keeps the last two keys.
        let git_only = walk_with(&[]);
        assert_eq!(git_only.1, cold.1);
        assert_eq!(walk_with(&[]).5, git_only.2, "its own verdicts, next time");
        let fourth = walk();
        assert_eq!(
            (&fourth.0, fourth.5),
            (&cold.0, 3),
            "the first walk's verdicts kept"
        );
        // A walk with other patterns does not: `*.rs` names a file in leaf1 and leaf2 (no
        // leaves for it), and it is found there although the cache holds leaf verdicts for
        // those very listings. (Fails if the key ignored the patterns.)
        let rs = [src("*.rs")];
        let rs: Vec<_> = rs.iter().collect();
        let other = walk_with(&rs);
        assert_eq!(
            other.0,
            [proj.join("a/leaf1/x.rs"), proj.join("a/leaf2/y.rs")]
        );
        // Its leaves are c and holds-env (`.env` is no `*.rs`), both judged afresh.
        assert_eq!((other.2, other.5), (2, 0), "its leaves, judged afresh");
        // A cache that trusts no ctime (as if every one were within the racy window) reuses
        // nothing and leaves nothing unopened.
        let mut distrust =
            ListingCache::open_with_horizon(&state, &proj, (0, 0)).without_walk_records();
        let s = scan_project_cached(&refs, &root, &proj, true, &mut distrust).expect("scan");
        assert_eq!((distrust.unopened, distrust.hits), (0, 0));
        assert_eq!(s.git_entries, cold.1);
        // The changes below must move the ctimes: past the file system's clock tick first
        // (a coarse one on kernels without fine-grained timestamps).
        std::thread::sleep(std::time::Duration::from_millis(50));
        // A secret added to a cached leaf: its ctime changed, it is read again.
        std::fs::write(proj.join("a/leaf1/.env.local"), "K=2").expect("w");
        // A leaf replaced by a symlink to a directory holding a secret: not followed (the
        // project's own listing changed, so it is read again and shows the link as a link).
        std::fs::remove_dir_all(proj.join("c")).expect("rm");
        std::os::unix::fs::symlink(&root, proj.join("c")).expect("ln");
        // A repository made in a cached leaf.
        std::fs::create_dir_all(proj.join("a/leaf2/.git")).expect("mk");
        let after = walk();
        assert_eq!(
            after.0,
            [
                proj.join("a/leaf1/.env.local"),
                proj.join("b/holds-env/.env")
            ]
        );
        assert_eq!(
            after.1,
            [proj.join("a/leaf2/.git"), proj.join("b/repo/.git")]
        );
    }

    /// A walk's record (walkrecord.rs) stands in for the walk only while the project is as
    /// it recorded: a secret added anywhere, however deep, a directory renamed, other
    /// patterns, untrusted ctimes or a damaged record: the project is walked, and every walk
    /// finds what a walk without any cache finds. A secret reached through a symlink is never
    /// taken from a record; anchored patterns are resolved afresh either way.
    #[test]
    fn a_walk_record_stands_in_only_for_an_unchanged_project() {
        let (_t, root, proj, state, later) = cache_world();
        for d in ["a/leaf/deep", "b/sub", "repo/.git", "c"] {
            std::fs::create_dir_all(proj.join(d)).expect("mk");
        }
        for f in ["a/leaf/x.rs", "b/.env", "b/sub/y.rs", "c/z"] {
            std::fs::write(proj.join(f), "K=1").expect("w");
        }
        let pats = [src(".env*"), src("~/home-token")];
        let refs: Vec<_> = pats.iter().collect();
        let records = || -> Vec<PathBuf> {
            let mut v: Vec<PathBuf> = std::fs::read_dir(&state)
                .expect("ls")
                .flatten()
                .map(|e| e.path())
                .filter(|p| p.to_string_lossy().contains(".walk"))
                .collect();
            v.sort();
            v
        };
        // The oracle: a walk with no cache at all.
        let plain = |refs: &[&Sourced<String>]| {
            scan_project_cached(refs, &root, &proj, true, &mut ListingCache::none()).expect("scan")
        };
        let walk_with = |refs: &[&Sourced<String>], horizon: Stamp| {
            let mut c = ListingCache::open_with_horizon(&state, &proj, horizon);
            let s = scan_project_cached(refs, &root, &proj, true, &mut c).expect("scan");
            c.save().expect("save");
            let same = plain(refs);
            assert_eq!(s.secrets, same.secrets, "as a walk without a cache finds");
            assert_eq!(s.git_entries, same.git_entries);
            (s, c.walk_record)
        };
        let walk = || walk_with(&refs, later);
        let (cold, used) = walk();
        assert!(!used, "no record yet");
        assert_eq!(records().len(), 1, "the walk was recorded");
        assert_eq!(
            cold.secrets
                .iter()
                .map(|m| m.path.clone())
                .collect::<Vec<_>>(),
            [proj.join("b/.env")]
        );
        assert_eq!(cold.git_entries, [proj.join("repo/.git")]);
        let (warm, used) = walk();
        assert!(used, "the record stood in for the walk");
        assert_eq!(
            (&warm.secrets, &warm.git_entries),
            (&cold.secrets, &cold.git_entries)
        );
        // Anchored patterns are not part of a record: a secret made for one is found by a
        // walk the record stands in for.
        std::fs::write(root.join("home-token"), "T").expect("w");
        let (s, used) = walk();
        assert!(used);
        assert!(s.secrets.iter().any(|m| m.path == root.join("home-token")));
        // Past the file system's clock tick, so that each change below moves a ctime.
        let tick = || std::thread::sleep(std::time::Duration::from_millis(50));
        // Each change is made, walked (not from the record) and walked again (the new record).
        let changes: [(&str, &dyn Fn()); 5] = [
            ("a secret in the project's own directory", &|| {
                std::fs::write(proj.join(".env.top"), "K=4").expect("w")
            }),
            ("a secret three levels down", &|| {
                std::fs::write(proj.join("a/leaf/deep/.env.local"), "K=2").expect("w")
            }),
            ("a directory holding a secret renamed over another", &|| {
                std::fs::rename(proj.join("b/sub"), proj.join("c/sub")).expect("mv");
                std::fs::create_dir(proj.join("b/sub")).expect("mk");
            }),
            ("a new repository", &|| {
                std::fs::create_dir_all(proj.join("c/sub/.git")).expect("mk")
            }),
            ("a secret in a leaf", &|| {
                std::fs::write(proj.join("c/.env.prod"), "K=3").expect("w")
            }),
        ];
        for (what, change) in changes {
            tick();
            change();
            let (_, used) = walk();
            assert!(!used, "{what}: the record stood in for a changed project");
            let (_, used) = walk();
            assert!(used, "{what}: not recorded again");
        }
        let (last, _) = walk();
        assert_eq!(
            last.secrets
                .iter()
                .map(|m| m.path.clone())
                .collect::<Vec<_>>(),
            [
                root.join("home-token"),
                proj.join(".env.top"),
                proj.join("a/leaf/deep/.env.local"),
                proj.join("b/.env"),
                proj.join("c/.env.prod"),
            ]
        );
        assert_eq!(
            last.git_entries,
            [proj.join("c/sub/.git"), proj.join("repo/.git")]
        );
        // Other patterns: another record (the key differs), found afresh.
        let rs = [src("*.rs")];
        let rs: Vec<_> = rs.iter().collect();
        let (other, used) = walk_with(&rs, later);
        assert!(!used, "another walk's record");
        assert_eq!(other.secrets.len(), 2);
        assert_eq!(records().len(), 2);
        // Untrusted ctimes: no record used, none written.
        for r in records() {
            std::fs::remove_file(r).expect("rm");
        }
        let (_, used) = walk_with(&refs, (0, 0));
        assert!(!used);
        assert!(records().is_empty(), "recorded with untrusted ctimes");
        // A damaged record (cut short): not used.
        walk();
        let rec = records().pop().expect("recorded");
        let b = std::fs::read(&rec).expect("r");
        std::fs::write(&rec, &b[..b.len() - 1]).expect("w");
        let (_, used) = walk();
        assert!(!used, "a damaged record was used");
        // A secret reached through a symlink: such a walk is not recorded.
        for r in records() {
            std::fs::remove_file(r).expect("rm");
        }
        std::fs::write(root.join("target.txt"), "S").expect("w");
        symlink(root.join("target.txt"), proj.join("a/.env")).expect("ln");
        let (s, used) = walk();
        assert!(!used);
        assert!(s.secrets.iter().any(|m| m.path == root.join("target.txt")));
        assert!(
            records().is_empty(),
            "a walk through a symlinked secret was recorded"
        );
    }

    #[test]
    fn finds_nested_env_and_follows_symlinks() {
        let t = tempfile::tempdir().expect("tmp");
        let root = t.path().canonicalize().expect("c");
        let home = root.join("home");
        let proj = root.join("proj");
        std::fs::create_dir_all(home.join(".ssh")).expect("mk");
        std::fs::write(home.join(".ssh/id_ed25519"), "KEY").expect("w");
        std::fs::create_dir_all(proj.join("api")).expect("mk");
        std::fs::create_dir_all(proj.join("node_modules/x")).expect("mk");
        std::fs::write(proj.join("api/.env.local"), "A=1").expect("w");
        std::fs::write(proj.join("node_modules/x/.env"), "skipped").expect("w");
        symlink(home.join(".ssh/id_ed25519"), proj.join(".env")).expect("ln");
        let pats = [src(".env"), src(".env.*"), src("~/.ssh"), src("~/.aws")];
        let refs: Vec<_> = pats.iter().collect();
        let m = scan(&refs, &home, &proj).expect("scan");
        let paths: Vec<_> = m.iter().map(|m| (m.path.clone(), m.kind)).collect();
        assert!(
            paths.contains(&(home.join(".ssh"), MaskKind::Dir)),
            "{paths:?}"
        );
        assert!(
            paths.contains(&(proj.join("api/.env.local"), MaskKind::File)),
            "{paths:?}"
        );
        let key = m
            .iter()
            .find(|m| m.path == home.join(".ssh/id_ed25519"))
            .expect("symlink target masked");
        assert_eq!(key.via.as_deref(), Some(proj.join(".env").as_path()));
        assert!(!paths
            .iter()
            .any(|(p, _)| p.starts_with(proj.join("node_modules"))));
        // The link itself is recorded too, by its own inode, to be checked at start.
        let link = m
            .iter()
            .find(|m| m.path == proj.join(".env"))
            .expect("the link");
        assert_eq!(link.kind, MaskKind::Link);
        let lm = std::fs::symlink_metadata(proj.join(".env")).expect("lstat");
        assert_eq!(
            (link.dev, link.ino),
            (
                std::os::unix::fs::MetadataExt::dev(&lm),
                std::os::unix::fs::MetadataExt::ino(&lm)
            )
        );
        assert_eq!(m.len(), 4);
    }

    // A `.env` that dangles (or points where the sandbox cannot see) masks nothing, but the
    // name is still recorded: a file put in its place before the start must not go unmasked.
    #[test]
    fn dangling_secret_symlink_is_recorded_as_a_link() {
        let t = tempfile::tempdir().expect("tmp");
        let proj = t.path().canonicalize().expect("c");
        symlink(proj.join("nowhere"), proj.join(".env")).expect("ln");
        let pats = [src(".env")];
        let refs: Vec<_> = pats.iter().collect();
        let m = scan(&refs, &proj, &proj).expect("scan");
        assert_eq!(m.len(), 1, "{m:?}");
        assert_eq!(
            (m[0].path.clone(), m[0].kind),
            (proj.join(".env"), MaskKind::Link)
        );
    }

    #[test]
    fn glob_in_middle_component_is_refused() {
        let e = compile("~/.config/*/token", Path::new("/h"), Path::new("/p"))
            .err()
            .expect("refused");
        assert_eq!(
            e.to_string(),
            "secrets: `~/.config/*/token`: globs are allowed only in the last path component"
        );
    }

    #[test]
    fn anchored_last_component_glob() {
        let t = tempfile::tempdir().expect("tmp");
        let home = t.path().canonicalize().expect("c");
        std::fs::create_dir_all(home.join(".cargo")).expect("mk");
        std::fs::write(home.join(".cargo/credentials.toml"), "t").expect("w");
        std::fs::write(home.join(".cargo/config.toml"), "t").expect("w");
        let pats = [src("~/.cargo/credentials*")];
        let refs: Vec<_> = pats.iter().collect();
        let m = scan(&refs, &home, &home.join("p")).expect("scan");
        assert_eq!(m.len(), 1);
        assert_eq!(m[0].path, home.join(".cargo/credentials.toml"));
    }
}
