//! Directory-descriptor file access for change sets: every path is resolved one component at a
//! time from a directory descriptor, never through a symlink (`openat2` with `RESOLVE_BENEATH`
//! and `RESOLVE_NO_SYMLINKS`, `O_NOFOLLOW` on the last component). Both sides are untrusted for
//! that purpose: the upper layer was written by the sandbox, and the project may have been
//! changed while the session ran.

use std::ffi::{CString, OsStr, OsString};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::Path;

/// An open directory.
#[derive(Debug)]
pub struct Dir {
    fd: OwnedFd,
}

fn cname(b: &[u8]) -> io::Result<CString> {
    CString::new(b).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

fn owned(raw: libc::c_int) -> io::Result<OwnedFd> {
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `raw` is a descriptor the kernel just returned to us and nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}

/// The kind of a directory entry, from `lstat`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ftype {
    /// A regular file.
    File,
    /// A directory.
    Dir,
    /// A symbolic link.
    Symlink,
    /// A character device 0:0: an overlay whiteout.
    Whiteout,
    /// Anything else: a device node, FIFO or socket.
    Special(&'static str),
}

/// What `lstat` says about an entry.
#[derive(Debug, Clone, Copy)]
pub struct Stat {
    /// Kind.
    pub ftype: Ftype,
    /// Permission bits including setuid, setgid and sticky (`st_mode & 0o7777`).
    pub perm: u32,
    /// Size in bytes.
    pub size: u64,
    /// Change time, nanoseconds since the epoch.
    pub ctime_ns: i128,
    /// Hard links.
    pub nlink: u64,
    /// Device.
    pub dev: u64,
    /// Inode.
    pub ino: u64,
}

impl Stat {
    fn from(st: &libc::stat) -> Self {
        let fmt = st.st_mode & libc::S_IFMT;
        let ftype = match fmt {
            libc::S_IFREG => Ftype::File,
            libc::S_IFDIR => Ftype::Dir,
            libc::S_IFLNK => Ftype::Symlink,
            libc::S_IFCHR if st.st_rdev == 0 => Ftype::Whiteout,
            libc::S_IFCHR => Ftype::Special("character device"),
            libc::S_IFBLK => Ftype::Special("block device"),
            libc::S_IFIFO => Ftype::Special("FIFO"),
            libc::S_IFSOCK => Ftype::Special("socket"),
            _ => Ftype::Special("unknown file type"),
        };
        Self {
            ftype,
            perm: st.st_mode & 0o7777,
            size: u64::try_from(st.st_size).unwrap_or(0),
            ctime_ns: i128::from(st.st_ctime) * 1_000_000_000 + i128::from(st.st_ctime_nsec),
            nlink: st.st_nlink,
            dev: st.st_dev,
            ino: st.st_ino,
        }
    }
}

const DIR_FLAGS: libc::c_int =
    libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC;

impl Dir {
    /// Open an absolute directory path (the change set's or project's root; the caller names it).
    pub fn open(p: &Path) -> io::Result<Self> {
        let c = cname(p.as_os_str().as_bytes())?;
        // SAFETY: `c` is a valid NUL-terminated string for the call's duration.
        let fd = owned(unsafe { libc::open(c.as_ptr(), DIR_FLAGS) })?;
        Ok(Self { fd })
    }

    /// Open the directory `rel` beneath this one, through no symlink and no `..`.
    pub fn open_beneath(&self, rel: &Path) -> io::Result<Self> {
        if rel.as_os_str().is_empty() {
            return self.dup();
        }
        use nix::fcntl::{OFlag, OpenHow, ResolveFlag};
        let how = OpenHow::new()
            .flags(OFlag::from_bits_truncate(DIR_FLAGS))
            .resolve(
                ResolveFlag::RESOLVE_BENEATH
                    | ResolveFlag::RESOLVE_NO_SYMLINKS
                    | ResolveFlag::RESOLVE_NO_MAGICLINKS
                    // Not into a file system mounted inside (the overlay did not show it).
                    | ResolveFlag::RESOLVE_NO_XDEV,
            );
        let raw = nix::fcntl::openat2(self.fd.as_raw_fd(), rel, how)?;
        let fd = owned(raw)?;
        Ok(Self { fd })
    }

    /// The descriptor, for calls that take one (it stays owned here).
    pub fn raw(&self) -> libc::c_int {
        self.fd.as_raw_fd()
    }

    fn dup(&self) -> io::Result<Self> {
        Ok(Self {
            fd: self.fd.try_clone()?,
        })
    }

    /// Open the child directory `name` (not through a symlink, and not a mount point: a
    /// directory on another device than this one is `EXDEV`).
    pub fn child(&self, name: &OsStr) -> io::Result<Self> {
        let c = cname(name.as_bytes())?;
        // SAFETY: `c` is NUL-terminated and lives across the call; the fd is ours.
        let fd = owned(unsafe { libc::openat(self.fd.as_raw_fd(), c.as_ptr(), DIR_FLAGS) })?;
        let d = Self { fd };
        if d.stat_self()?.dev != self.stat_self()?.dev {
            return Err(io::Error::from_raw_os_error(libc::EXDEV));
        }
        Ok(d)
    }

    /// The value of extended attribute `attr` on the entry `name`, if set, without opening it
    /// (an entry its owner made unreadable still answers; a FIFO is never opened).
    pub fn xattr_of(&self, name: &OsStr, attr: &str) -> io::Result<Option<Vec<u8>>> {
        let mut p = format!("/proc/self/fd/{}/", self.fd.as_raw_fd()).into_bytes();
        p.extend_from_slice(name.as_bytes());
        let path = cname(&p)?;
        let a = cname(attr.as_bytes())?;
        let mut buf = vec![0u8; 256];
        // SAFETY: lgetxattr writes at most `buf.len()` bytes into `buf`, which we own; the
        // strings are NUL-terminated. The last component is not followed.
        let n = unsafe {
            libc::lgetxattr(
                path.as_ptr(),
                a.as_ptr(),
                buf.as_mut_ptr().cast::<libc::c_void>(),
                buf.len(),
            )
        };
        xattr_result(n, buf)
    }

    /// `lstat` of the entry `name`; `None` when there is none.
    pub fn stat(&self, name: &OsStr) -> io::Result<Option<Stat>> {
        let c = cname(name.as_bytes())?;
        // SAFETY: an all-zero `stat` is a valid value of this plain C struct.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: fstatat writes into `st`, which we own; `c` is NUL-terminated.
        let r = unsafe {
            libc::fstatat(
                self.fd.as_raw_fd(),
                c.as_ptr(),
                &mut st,
                libc::AT_SYMLINK_NOFOLLOW,
            )
        };
        if r != 0 {
            let e = io::Error::last_os_error();
            return match e.raw_os_error() {
                Some(libc::ENOENT) => Ok(None),
                _ => Err(e),
            };
        }
        Ok(Some(Stat::from(&st)))
    }

    /// `fstat` of this directory.
    pub fn stat_self(&self) -> io::Result<Stat> {
        // SAFETY: as in `stat`.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: fstat writes into `st`, which we own.
        if unsafe { libc::fstat(self.fd.as_raw_fd(), &mut st) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Stat::from(&st))
    }

    /// Every entry but `.` and `..`: its name, and whether it is a directory as `getdents`
    /// reports it (`None` when it does not say).
    fn entries(&self) -> io::Result<Vec<(OsString, Option<bool>)>> {
        let mut d = nix::dir::Dir::from_fd(nix::unistd::dup(self.fd.as_raw_fd())?)?;
        let mut v = vec![];
        for e in d.iter() {
            let e = e?;
            let n = e.file_name().to_bytes();
            if n != b"." && n != b".." {
                let is_dir = e.file_type().map(|t| t == nix::dir::Type::Directory);
                v.push((OsString::from_vec(n.to_vec()), is_dir));
            }
        }
        Ok(v)
    }

    /// The entries' names, sorted, without `.` and `..`.
    pub fn names(&self) -> io::Result<Vec<OsString>> {
        let mut v: Vec<OsString> = self.entries()?.into_iter().map(|(n, _)| n).collect();
        v.sort();
        Ok(v)
    }

    /// The names of the entries that are directories (an unknown type is looked up).
    pub fn subdirs(&self) -> io::Result<Vec<OsString>> {
        let mut v = vec![];
        for (name, is_dir) in self.entries()? {
            let is_dir = match is_dir {
                Some(d) => d,
                None => self.stat(&name)?.is_some_and(|s| s.ftype == Ftype::Dir),
            };
            if is_dir {
                v.push(name);
            }
        }
        Ok(v)
    }

    /// Open the regular file `name` for reading (not through a symlink).
    pub fn open_file(&self, name: &OsStr) -> io::Result<std::fs::File> {
        let c = cname(name.as_bytes())?;
        // SAFETY: `c` is NUL-terminated and lives across the call.
        let fd = owned(unsafe {
            libc::openat(
                self.fd.as_raw_fd(),
                c.as_ptr(),
                libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK,
            )
        })?;
        let f = std::fs::File::from(fd);
        if !f.metadata()?.is_file() {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        Ok(f)
    }

    /// Read the whole regular file `name`.
    pub fn read(&self, name: &OsStr) -> io::Result<Vec<u8>> {
        use std::io::Read;
        let mut v = vec![];
        self.open_file(name)?.read_to_end(&mut v)?;
        Ok(v)
    }

    /// The target of the symlink `name`.
    pub fn read_link(&self, name: &OsStr) -> io::Result<OsString> {
        Ok(nix::fcntl::readlinkat(Some(self.fd.as_raw_fd()), name)?)
    }

    /// Create the directory `name`.
    pub fn mkdir(&self, name: &OsStr, perm: u32) -> io::Result<()> {
        nix::sys::stat::mkdirat(
            Some(self.fd.as_raw_fd()),
            name,
            nix::sys::stat::Mode::from_bits_truncate(perm),
        )?;
        Ok(())
    }

    /// Set the permission bits of the entry `name` (not through a symlink: a directory is
    /// opened first and changed through its descriptor).
    pub fn chmod_dir(&self, name: &OsStr, perm: u32) -> io::Result<()> {
        let d = self.child(name)?;
        nix::sys::stat::fchmod(
            d.fd.as_raw_fd(),
            nix::sys::stat::Mode::from_bits_truncate(perm),
        )?;
        Ok(())
    }

    /// Create `name` exclusively as a new regular file with `perm`, for writing.
    pub fn create_new(&self, name: &OsStr, perm: u32) -> io::Result<std::fs::File> {
        let c = cname(name.as_bytes())?;
        // SAFETY: `c` is NUL-terminated and lives across the call.
        let fd = owned(unsafe {
            libc::openat(
                self.fd.as_raw_fd(),
                c.as_ptr(),
                libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC,
                0o600 as libc::c_uint,
            )
        })?;
        let f = std::fs::File::from(fd);
        nix::sys::stat::fchmod(
            f.as_raw_fd(),
            nix::sys::stat::Mode::from_bits_truncate(perm),
        )?;
        Ok(f)
    }

    /// Create the symlink `name` pointing at `target`.
    pub fn symlink(&self, target: &OsStr, name: &OsStr) -> io::Result<()> {
        nix::unistd::symlinkat(target, Some(self.fd.as_raw_fd()), name)?;
        Ok(())
    }

    /// Rename `from` to `to`, both in this directory (replacing `to` unless it is a directory).
    pub fn rename(&self, from: &OsStr, to: &OsStr) -> io::Result<()> {
        nix::fcntl::renameat(
            Some(self.fd.as_raw_fd()),
            from,
            Some(self.fd.as_raw_fd()),
            to,
        )?;
        Ok(())
    }

    /// Remove the entry `name`: a file, symlink, whiteout or special file with `unlink`, a
    /// directory with everything in it (descending by descriptor, never through a symlink,
    /// never into another file system; a directory its owner made unreadable is opened up
    /// first, since it is going anyway).
    pub fn remove_all(&self, name: &OsStr) -> io::Result<()> {
        match self.stat(name)? {
            None => Ok(()),
            Some(s) if s.ftype == Ftype::Dir => {
                let d = match self.child(name) {
                    Err(e) if e.raw_os_error() == Some(libc::EACCES) => {
                        nix::sys::stat::fchmodat(
                            Some(self.fd.as_raw_fd()),
                            name,
                            nix::sys::stat::Mode::from_bits_truncate(0o700),
                            nix::sys::stat::FchmodatFlags::NoFollowSymlink,
                        )?;
                        self.child(name)?
                    }
                    r => r?,
                };
                for n in d.names()? {
                    d.remove_all(&n)?;
                }
                nix::unistd::unlinkat(
                    Some(self.fd.as_raw_fd()),
                    name,
                    nix::unistd::UnlinkatFlags::RemoveDir,
                )?;
                Ok(())
            }
            Some(_) => {
                nix::unistd::unlinkat(
                    Some(self.fd.as_raw_fd()),
                    name,
                    nix::unistd::UnlinkatFlags::NoRemoveDir,
                )?;
                Ok(())
            }
        }
    }

    /// Remove the directory `name` if it is empty; `false` if it is not.
    pub fn rmdir_if_empty(&self, name: &OsStr) -> io::Result<bool> {
        match nix::unistd::unlinkat(
            Some(self.fd.as_raw_fd()),
            name,
            nix::unistd::UnlinkatFlags::RemoveDir,
        ) {
            Ok(()) => Ok(true),
            Err(nix::errno::Errno::ENOTEMPTY | nix::errno::Errno::EEXIST) => Ok(false),
            Err(nix::errno::Errno::ENOENT) => Ok(true),
            Err(e) => Err(e.into()),
        }
    }
}

fn xattr_result(n: isize, mut buf: Vec<u8>) -> io::Result<Option<Vec<u8>>> {
    if n < 0 {
        let e = io::Error::last_os_error();
        return match e.raw_os_error() {
            Some(libc::ENODATA) | Some(libc::ENOTSUP) => Ok(None),
            // Set, with a value longer than any vetto looks for.
            Some(libc::ERANGE) => Ok(Some(vec![])),
            _ => Err(e),
        };
    }
    buf.truncate(usize::try_from(n).unwrap_or(0));
    Ok(Some(buf))
}
