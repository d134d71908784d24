//! Masks and protections mounted by the init, through descriptors, on the exact objects the
//! host-side scan found.
//!
//! A mount made by path lands on whatever the path names at that moment. Another process of the
//! same user (a second sandbox on the same project) can swap directories with
//! `renameat2(RENAME_EXCHANGE)` between the scan and the mount, so that a mask covers the wrong
//! file and the secret stays readable. Here each path is opened one component at a time with
//! `O_PATH | O_NOFOLLOW`, the object's (device, inode) is compared with what the scan recorded,
//! and the mount is attached to *that descriptor* with the new mount API (`open_tree` or
//! `fsmount`, then `move_mount(MOVE_MOUNT_T_EMPTY_PATH)`): a rename after the check moves the dentry, and the
//! mount moves with it. The mount is then read back through a fresh walk. A mismatch is a
//! setup failure: the command does not run.

use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path};

use vetto_bundle::plan::{InitMount, InitMountKind};

/// Why a mask or protection could not be placed.
#[derive(Debug, thiserror::Error)]
pub enum MountError {
    /// A syscall failed.
    #[error("{what} {path}: {source}")]
    Os {
        /// The step.
        what: &'static str,
        /// The path.
        path: String,
        /// The error.
        source: std::io::Error,
    },
    /// The object at the path is not the one the scan found.
    #[error("{path} changed between the scan and the mount (found device {found_dev} inode {found_ino}, the scan saw device {dev} inode {ino}); is something renaming inside the project?")]
    Changed {
        /// The path.
        path: String,
        /// What the scan saw.
        dev: u64,
        /// What the scan saw.
        ino: u64,
        /// What is there now.
        found_dev: u64,
        /// What is there now.
        found_ino: u64,
    },
    /// Review mode's project is not an overlay inside the sandbox.
    #[error("{0} is not the review overlay (its file system is not overlayfs): the masks inside it cannot be checked")]
    NotOverlay(String),
    /// The mount is not what was asked for when read back.
    #[error("{path}: the {kind:?} mount did not take effect")]
    NotApplied {
        /// The path.
        path: String,
        /// What was mounted.
        kind: InitMountKind,
    },
    /// A path that is not absolute or contains `..`.
    #[error("{0}: not an absolute, normal path")]
    BadPath(String),
}

// <linux/mount.h>
const OPEN_TREE_CLONE: u32 = 1;
const AT_RECURSIVE: u32 = 0x8000;
const MOVE_MOUNT_F_EMPTY_PATH: u32 = 0x4;
const MOVE_MOUNT_T_EMPTY_PATH: u32 = 0x40;
/// `MOUNT_ATTR_RDONLY`.
pub const MOUNT_ATTR_RDONLY: u64 = 0x1;
/// `MOUNT_ATTR_NOSUID`.
pub const MOUNT_ATTR_NOSUID: u64 = 0x2;
/// `MOUNT_ATTR_NODEV`.
pub const MOUNT_ATTR_NODEV: u64 = 0x4;
/// `MOUNT_ATTR_NOEXEC`.
pub const MOUNT_ATTR_NOEXEC: u64 = 0x8;
/// `MOUNT_ATTR_STRICTATIME` (a value of the `MOUNT_ATTR__ATIME` field, not a flag: only for a
/// new mount's `fsmount`, where no atime was set before).
pub const MOUNT_ATTR_STRICTATIME: u64 = 0x20;

/// The `MOUNT_ATTR_*` bit a config.json mount option sets (`ro`, `nosuid`, `nodev`,
/// `noexec`); `Some(0)` for the options that set none (`rw`, `bind`, `rbind`); `None` for
/// any other.
pub fn attr_bit(option: &str) -> Option<u64> {
    match option {
        "ro" => Some(MOUNT_ATTR_RDONLY),
        "nosuid" => Some(MOUNT_ATTR_NOSUID),
        "nodev" => Some(MOUNT_ATTR_NODEV),
        "noexec" => Some(MOUNT_ATTR_NOEXEC),
        "rw" | "bind" | "rbind" => Some(0),
        _ => None,
    }
}
const FSOPEN_CLOEXEC: u32 = 0x1;
const FSMOUNT_CLOEXEC: u32 = 0x1;
const FSCONFIG_SET_FLAG: u32 = 0;
const FSCONFIG_SET_STRING: u32 = 1;
const FSCONFIG_CMD_CREATE: u32 = 6;

/// `struct mount_attr` of mount_setattr(2).
#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

fn os(what: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> MountError {
    let path = path.display().to_string();
    move |source| MountError::Os { what, path, source }
}

fn check(ret: libc::c_long) -> std::io::Result<libc::c_long> {
    if ret < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

fn owned(ret: libc::c_long) -> std::io::Result<OwnedFd> {
    let fd = check(ret)? as RawFd;
    // SAFETY: the kernel just returned this descriptor; nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Open `path` with `O_PATH`, one component at a time, following no symlink.
pub fn open_nofollow(path: &Path) -> Result<OwnedFd, MountError> {
    let bad = || MountError::BadPath(path.display().to_string());
    let mut comps = path.components();
    if comps.next() != Some(Component::RootDir) {
        return Err(bad());
    }
    // SAFETY: a valid C string; O_PATH opens nothing for I/O.
    let mut cur = owned(unsafe {
        libc::open(
            c"/".as_ptr(),
            libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    } as libc::c_long)
    .map_err(os("opening", path))?;
    for c in comps {
        let Component::Normal(name) = c else {
            return Err(bad());
        };
        let name = CString::new(name.as_bytes()).map_err(|_| bad())?;
        // SAFETY: a valid directory descriptor and C string.
        cur = owned(unsafe {
            libc::openat(
                cur.as_raw_fd(),
                name.as_ptr(),
                libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            )
        } as libc::c_long)
        .map_err(os("opening", path))?;
    }
    Ok(cur)
}

fn stat_fd(fd: &OwnedFd, path: &Path) -> Result<libc::stat, MountError> {
    fstat(fd.as_raw_fd()).map_err(os("stat", path))
}

/// `fstat(2)` of a descriptor (also one this process does not own, such as stdio).
pub fn fstat(fd: RawFd) -> std::io::Result<libc::stat> {
    // SAFETY: fstat fills a zeroed struct we own.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: as above; fstat only reads the descriptor (EBADF if it is not open).
    check(unsafe { libc::fstat(fd, &mut st) } as libc::c_long)?;
    Ok(st)
}

/// The null device (character device 1:3), whatever path it was reached by.
pub(crate) fn is_null_device(st: &libc::stat) -> bool {
    st.st_mode & libc::S_IFMT == libc::S_IFCHR && st.st_rdev == libc::makedev(1, 3)
}

/// `mount_setattr` on a detached tree: set the `MOUNT_ATTR_*` bits in `set` (recursively).
pub fn set_attr(tree: &OwnedFd, set: u64, recursive: bool, path: &Path) -> Result<(), MountError> {
    let attr = MountAttr {
        attr_set: set,
        attr_clr: 0,
        propagation: 0,
        userns_fd: 0,
    };
    let flags = libc::AT_EMPTY_PATH as u32 | if recursive { AT_RECURSIVE } else { 0 };
    // SAFETY: a detached mount's descriptor, an empty C string, and a mount_attr we own.
    check(unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            tree.as_raw_fd(),
            c"".as_ptr(),
            flags,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    })
    .map_err(os("mount_setattr", path))?;
    Ok(())
}

/// `open_tree(OPEN_TREE_CLONE)`: a detached copy of the mount at `name` relative to `from`
/// (or of `from` itself when `name` is empty), recursive or not. `path` names it in errors.
pub fn clone_tree(
    from: RawFd,
    name: &std::ffi::CStr,
    recursive: bool,
    path: &Path,
) -> Result<OwnedFd, MountError> {
    let mut flags = OPEN_TREE_CLONE | libc::O_CLOEXEC as u32;
    if name.is_empty() {
        flags |= libc::AT_EMPTY_PATH as u32;
    }
    if recursive {
        flags |= AT_RECURSIVE;
    }
    // SAFETY: a valid descriptor (or AT_FDCWD) and C string.
    owned(unsafe { libc::syscall(libc::SYS_open_tree, from, name.as_ptr(), flags) })
        .map_err(os("open_tree", path))
}

/// `move_mount` of the detached `tree` onto `target` (an `O_PATH` descriptor of the mount
/// point). `path` names it in errors.
pub fn attach(tree: &OwnedFd, target: &OwnedFd, path: &Path) -> Result<(), MountError> {
    // SAFETY: two valid descriptors and empty C strings.
    check(unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            tree.as_raw_fd(),
            c"".as_ptr(),
            target.as_raw_fd(),
            c"".as_ptr(),
            MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH,
        )
    })
    .map_err(os("move_mount", path))?;
    Ok(())
}

fn fsconfig(
    fs: &OwnedFd,
    key: &std::ffi::CStr,
    value: &std::ffi::CStr,
    path: &Path,
) -> Result<(), MountError> {
    // SAFETY: a valid fs context descriptor and C strings.
    check(unsafe {
        libc::syscall(
            libc::SYS_fsconfig,
            fs.as_raw_fd(),
            FSCONFIG_SET_STRING,
            key.as_ptr(),
            value.as_ptr(),
            0,
        )
    })
    .map_err(os("fsconfig", path))?;
    Ok(())
}

fn fsconfig_flag(fs: &OwnedFd, key: &std::ffi::CStr, path: &Path) -> Result<(), MountError> {
    // SAFETY: a valid fs context descriptor and C string; a flag takes no value.
    check(unsafe {
        libc::syscall(
            libc::SYS_fsconfig,
            fs.as_raw_fd(),
            FSCONFIG_SET_FLAG,
            key.as_ptr(),
            std::ptr::null::<libc::c_char>(),
            0,
        )
    })
    .map_err(os("fsconfig", path))?;
    Ok(())
}

fn empty_tmpfs(path: &Path) -> Result<OwnedFd, MountError> {
    let attrs = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC;
    new_tmpfs(
        &[(c"mode", c"000"), (c"size", c"4k"), (c"nr_inodes", c"1")],
        attrs,
        path,
    )
}

/// A new tmpfs, detached (attach it with [`attach`]): `options` are its `key=value`
/// parameters (`mode`, `size`), `attrs` its `MOUNT_ATTR_*` bits. `path` names it in errors.
pub fn new_tmpfs(
    options: &[(&std::ffi::CStr, &std::ffi::CStr)],
    attrs: u64,
    path: &Path,
) -> Result<OwnedFd, MountError> {
    let options: Vec<(&std::ffi::CStr, Option<&std::ffi::CStr>)> =
        options.iter().map(|(k, v)| (*k, Some(*v))).collect();
    new_fs(c"tmpfs", &options, attrs, path)
}

/// A new instance of the kernel file system `fstype` (`tmpfs`, `devpts`), detached (attach
/// it with [`attach`]): `options` are its parameters, `key=value` or (without a value) a
/// flag such as devpts' `newinstance`; `attrs` its `MOUNT_ATTR_*` bits. `path` names it in
/// errors.
pub fn new_fs(
    fstype: &std::ffi::CStr,
    options: &[(&std::ffi::CStr, Option<&std::ffi::CStr>)],
    attrs: u64,
    path: &Path,
) -> Result<OwnedFd, MountError> {
    // SAFETY: a valid C string.
    let fs = owned(unsafe { libc::syscall(libc::SYS_fsopen, fstype.as_ptr(), FSOPEN_CLOEXEC) })
        .map_err(os("fsopen", path))?;
    for (k, v) in options {
        match v {
            Some(v) => fsconfig(&fs, k, v, path)?,
            None => fsconfig_flag(&fs, k, path)?,
        }
    }
    // SAFETY: a valid fs context; no pointers.
    check(unsafe {
        libc::syscall(
            libc::SYS_fsconfig,
            fs.as_raw_fd(),
            FSCONFIG_CMD_CREATE,
            std::ptr::null::<libc::c_char>(),
            std::ptr::null::<libc::c_char>(),
            0,
        )
    })
    .map_err(os("fsconfig create", path))?;
    // SAFETY: a valid, created fs context; no pointers.
    owned(unsafe { libc::syscall(libc::SYS_fsmount, fs.as_raw_fd(), FSMOUNT_CLOEXEC, attrs) })
        .map_err(os("fsmount", path))
}

fn read_only(fd: &OwnedFd, path: &Path) -> Result<bool, MountError> {
    // SAFETY: fstatvfs fills a zeroed struct we own; the descriptor is valid.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    check(unsafe { libc::fstatvfs(fd.as_raw_fd(), &mut st) } as libc::c_long)
        .map_err(os("statvfs", path))?;
    Ok(st.f_flag & libc::ST_RDONLY != 0)
}

/// overlayfs' `f_type`.
const OVERLAYFS_SUPER_MAGIC: libc::c_long = 0x794c_7630;

/// The device an object of the scan shows inside the sandbox: the host's, or, in review mode's
/// overlay, the overlay's own (after checking that the overlay's root is one).
fn expected_dev(m: &InitMount) -> Result<u64, MountError> {
    let Some(root) = &m.overlay else {
        return Ok(m.dev);
    };
    if !m.path.starts_with(root) {
        return Err(MountError::BadPath(m.path.display().to_string()));
    }
    let fd = open_nofollow(root)?;
    // SAFETY: an all-zero statfs is a valid value of this plain C struct.
    let mut sfs: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: fstatfs fills the struct we own; the descriptor is valid.
    check(unsafe { libc::fstatfs(fd.as_raw_fd(), &mut sfs) } as libc::c_long)
        .map_err(os("statfs", root))?;
    if sfs.f_type as libc::c_long != OVERLAYFS_SUPER_MAGIC {
        return Err(MountError::NotOverlay(root.display().to_string()));
    }
    Ok(stat_fd(&fd, root)?.st_dev)
}

/// Make one mount (see the module documentation).
pub fn apply_one(m: &InitMount) -> Result<(), MountError> {
    let path = m.path.as_path();
    let dev = expected_dev(m)?;
    let target = open_nofollow(path)?;
    let st = stat_fd(&target, path)?;
    // A `Verify` object must also still be a symlink: a file made after the link was removed
    // may reuse its inode number.
    let is_link = st.st_mode & libc::S_IFMT == libc::S_IFLNK;
    if (st.st_dev, st.st_ino) != (dev, m.ino) || (m.kind == InitMountKind::Verify && !is_link) {
        return Err(MountError::Changed {
            path: path.display().to_string(),
            dev,
            ino: m.ino,
            found_dev: st.st_dev,
            found_ino: st.st_ino,
        });
    }
    let tree = match m.kind {
        // The same symlink, opened with O_NOFOLLOW (checked above): nothing to mount.
        InitMountKind::Verify => return Ok(()),
        // The overlay with the change set's upper layer (checked above): nothing to mount.
        InitMountKind::Overlay => return Ok(()),
        InitMountKind::Pin => clone_tree(target.as_raw_fd(), c"", true, path)?,
        InitMountKind::ReadOnly => {
            let t = clone_tree(target.as_raw_fd(), c"", true, path)?;
            set_attr(
                &t,
                MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
                true,
                path,
            )?;
            t
        }
        InitMountKind::MaskFile => {
            let t = clone_tree(libc::AT_FDCWD, c"/dev/null", false, path)?;
            set_attr(
                &t,
                MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC,
                false,
                path,
            )?;
            t
        }
        InitMountKind::MaskDir => empty_tmpfs(path)?,
    };
    attach(&tree, &target, path)?;
    // Read back through a fresh walk: the path must now show the mount.
    let after = open_nofollow(path)?;
    let st2 = stat_fd(&after, path)?;
    let ok = match m.kind {
        InitMountKind::Verify | InitMountKind::Pin | InitMountKind::Overlay => {
            (st2.st_dev, st2.st_ino) == (dev, m.ino)
        }
        InitMountKind::ReadOnly => {
            (st2.st_dev, st2.st_ino) == (dev, m.ino) && read_only(&after, path)?
        }
        InitMountKind::MaskFile => is_null_device(&st2),
        InitMountKind::MaskDir => {
            st2.st_mode & libc::S_IFMT == libc::S_IFDIR
                && st2.st_mode & 0o7777 == 0
                && (st2.st_dev, st2.st_ino) != (dev, m.ino)
                && read_only(&after, path)?
        }
    };
    if !ok {
        return Err(MountError::NotApplied {
            path: path.display().to_string(),
            kind: m.kind,
        });
    }
    Ok(())
}

/// Make every mount, in order.
pub fn apply(mounts: &[InitMount]) -> Result<(), MountError> {
    mounts.iter().try_for_each(apply_one)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A symlink named `.env` in a new directory, and the (Verify) mount the scan would plan
    /// for it. The directory is returned to keep it alive.
    fn linked_env() -> (tempfile::TempDir, std::path::PathBuf, InitMount) {
        use std::os::unix::fs::MetadataExt;
        let t = tempfile::tempdir().expect("tmp");
        let dir = t.path().canonicalize().expect("c");
        let env = dir.join(".env");
        std::os::unix::fs::symlink("nowhere", &env).expect("ln");
        let m = std::fs::symlink_metadata(&env).expect("lstat");
        let want = InitMount {
            path: env,
            kind: InitMountKind::Verify,
            dev: m.dev(),
            ino: m.ino(),
            overlay: None,
        };
        (t, dir, want)
    }

    #[test]
    fn an_overlay_object_outside_an_overlay_fails_closed() {
        use std::os::unix::fs::MetadataExt;
        let (_t, dir, want) = linked_env();
        // The same object, but claimed to lie in review mode's overlay: the directory is no
        // overlay, so nothing is checked against a device the init cannot vouch for.
        let want = InitMount {
            overlay: Some(dir.clone()),
            ..want
        };
        let e = apply_one(&want).expect_err("not an overlay");
        assert!(matches!(e, MountError::NotOverlay(_)), "{e}");
        // Review mode's project check: a plain directory is not the overlay.
        let d = std::fs::metadata(&dir).expect("stat");
        let project = InitMount {
            path: dir.clone(),
            kind: InitMountKind::Overlay,
            dev: d.dev(),
            ino: d.ino(),
            overlay: Some(dir.clone()),
        };
        let e = apply_one(&project).expect_err("not an overlay");
        assert!(matches!(e, MountError::NotOverlay(_)), "{e}");
        // An object outside the overlay's mount point it names is a malformed plan.
        let want = InitMount {
            overlay: Some(dir.join("elsewhere")),
            ..want
        };
        let e = apply_one(&want).expect_err("outside");
        assert!(matches!(e, MountError::BadPath(_)), "{e}");
    }

    /// A secret-named symlink checked at start: passes while it is the same link, and fails
    /// closed once a file (or another link) took its name.
    #[test]
    fn verify_fails_when_the_symlink_was_replaced() {
        let (_t, _dir, want) = linked_env();
        let env = want.path.clone();
        apply_one(&want).expect("unchanged link");
        std::fs::remove_file(&env).expect("rm");
        std::fs::write(&env, "API_KEY=secret").expect("w");
        let e = apply_one(&want).expect_err("a file in the link's place");
        assert!(matches!(e, MountError::Changed { .. }), "{e}");
        std::fs::remove_file(&env).expect("rm");
        let e = apply_one(&want).expect_err("gone");
        assert!(matches!(e, MountError::Os { .. }), "{e}");
    }
}
