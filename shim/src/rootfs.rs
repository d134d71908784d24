//! `vetto run`'s rootfs directory: the mount points that can be made before the sandbox is.
//!
//! libcontainer makes every mount's destination inside the container with pathrs's checked
//! walk (`Root::mkdir_all`): an `openat2` that fails, a partial walk, a procfs-verified reopen
//! and a `mkdirat` per component, with a `/proc/thread-self/fd` readlink for each error it
//! records: about thirty system calls per mount point, on the start-up's critical path. The
//! rootfs directory is the session's own (fresh, in a directory only the caller can write,
//! holding nothing but the links made just before), so the destinations that lie directly in
//! it can be made here with one `mkdir` each. libcontainer still resolves and checks every
//! destination (in the root, no magic links) before it mounts there; only the creation moves.
//!
//! Left to libcontainer: destinations inside another mount (a tmpfs mounted at `/tmp` or
//! `/root` at run time hides anything made here), under one of the rootfs's links, with a
//! component that is not a plain name, and files (the mount point of a file bind; its parent
//! directory is made).
//!
//! The binds and tmpfs mounts themselves are made here too where libcontainer would make them
//! in a tree nothing else can reach ([`premade`], [`Premade`]): the supervisor mounts them in
//! its private mount namespace, under a bind of the rootfs onto itself, before `create`;
//! libcontainer's recursive bind of the rootfs carries them into the sandbox's namespace, and
//! the supervisor detaches its copies once the sandbox has started. `/dev`'s tmpfs, its devpts
//! instance and `/dev/shm` are among them: libcontainer's checked walk and mount cost ~60
//! system calls each, and the init's mount phase took 1.56 ms with them, 1.15 ms without
//! (median of 40 sessions, issue 18). `/proc` and `/sys` (whose mounts need the sandbox's own
//! PID and network namespaces), the device nodes libcontainer binds into `/dev`, overlays and
//! anything inside them stay libcontainer's.

use std::os::unix::fs::DirBuilderExt;
use std::path::{Component, Path, PathBuf};

use serde_json::Value;

/// The directories to make in the rootfs, relative to it, parents before children.
/// `mounts` is config.json's `mounts`; `links` the rootfs's symlinks (absolute paths);
/// `is_dir` says whether a bind's source is a directory (as libcontainer decides: following
/// symlinks).
pub fn mount_points(
    mounts: &[Value],
    links: &[PathBuf],
    is_dir: &dyn Fn(&Path) -> bool,
) -> Vec<PathBuf> {
    let dests: Vec<&Path> = mounts
        .iter()
        .filter_map(|m| m["destination"].as_str().map(Path::new))
        .collect();
    let mut out: Vec<PathBuf> = Vec::new();
    for m in mounts {
        let Some(dest) = m["destination"].as_str().map(Path::new) else {
            continue;
        };
        let Some(rel) = plain_relative(dest) else {
            continue;
        };
        // Inside another mount, or under a link: not reachable from here.
        let hidden = dest
            .ancestors()
            .skip(1)
            .filter(|a| a.parent().is_some())
            .any(|a| dests.contains(&a));
        if hidden
            || dest
                .ancestors()
                .any(|a| links.iter().any(|l| l.as_path() == a))
        {
            continue;
        }
        let bind = m["type"].as_str() == Some("bind")
            || m["options"].as_array().is_some_and(|o| {
                o.iter()
                    .any(|o| matches!(o.as_str(), Some("bind" | "rbind")))
            });
        let dir = match (bind, m["source"].as_str()) {
            (false, _) => rel,
            (true, Some(src)) if is_dir(Path::new(src)) => rel,
            // A file's mount point is libcontainer's to create; its parent is made here.
            _ => match rel.parent() {
                Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
                _ => continue,
            },
        };
        for a in dir.ancestors().collect::<Vec<_>>().into_iter().rev() {
            if !a.as_os_str().is_empty() && !out.iter().any(|o| o == a) {
                out.push(a.to_path_buf());
            }
        }
    }
    out
}

/// `dest` without its leading `/`, if it is absolute and every other component is a name.
fn plain_relative(dest: &Path) -> Option<PathBuf> {
    let mut c = dest.components();
    if c.next() != Some(Component::RootDir) {
        return None;
    }
    let rest: PathBuf = c.clone().collect();
    (c.all(|c| matches!(c, Component::Normal(_))) && !rest.as_os_str().is_empty()).then_some(rest)
}

/// Makes `dirs` (from [`mount_points`]) in `rootfs`, mode 0755 as libcontainer would. Best
/// effort: a directory that cannot be made here is made (or refused, with its error) by
/// libcontainer. `mkdir` does not follow a final symlink, and every parent was made (or
/// found, as a directory this function made) before its children.
pub fn make(rootfs: &Path, dirs: &[PathBuf]) {
    let mut b = std::fs::DirBuilder::new();
    b.mode(0o755);
    for d in dirs {
        if let Err(e) = b.create(rootfs.join(d)) {
            tracing::debug!("rootfs: {} left to libcontainer: {e}", d.display());
        }
    }
}

/// Which of config.json's `mounts` the supervisor makes itself, in its private mount
/// namespace, before libcontainer runs (see [`Premade`]): binds of host paths and tmpfs
/// mounts, with only the options libcontainer would apply as mount attributes (`ro`,
/// `nosuid`, `nodev`, `noexec`, `rw`, `bind`, `rbind`; a tmpfs's `mode=`, `size=` and
/// `strictatime`), new devpts instances (`mode=`, `ptmxmode=`, `newinstance` and those
/// attributes), at a destination made of plain names, under none of the rootfs's links, not
/// in `/proc` or `/sys` (whose mounts need the sandbox's own namespaces), and inside no mount
/// left to libcontainer (which would mount over it). A devpts made here belongs to the
/// supervisor's user namespace, the sandbox's parent: its ptys work as in one of the
/// sandbox's own, and the sandbox cannot remount it. A bind's source must be a directory or a regular
/// file (`plain`, following symlinks as libcontainer does). Everything else stays in
/// config.json.
pub fn premade(mounts: &[Value], links: &[PathBuf], plain: &dyn Fn(&Path) -> bool) -> Vec<bool> {
    let mut out = vec![false; mounts.len()];
    let dest = |m: &Value| m["destination"].as_str().map(PathBuf::from);
    let eligible = |m: &Value| -> bool {
        let Some(d) = dest(m) else { return false };
        if plain_relative(&d).is_none()
            || ["/proc", "/sys"].iter().any(|s| d.starts_with(s))
            || d.ancestors()
                .any(|a| links.iter().any(|l| l.as_path() == a))
        {
            return false;
        }
        let opts: Vec<&str> = match m["options"].as_array() {
            Some(a) => match a.iter().map(|o| o.as_str()).collect::<Option<Vec<_>>>() {
                Some(o) => o,
                None => return false,
            },
            None => vec![],
        };
        match (m["type"].as_str(), m["source"].as_str()) {
            (Some("bind"), Some(src)) => {
                Path::new(src).is_absolute()
                    && opts.iter().any(|o| matches!(*o, "bind" | "rbind"))
                    && opts
                        .iter()
                        .all(|o| vetto_hooks::mounts::attr_bit(o).is_some())
                    && plain(Path::new(src))
            }
            (Some("tmpfs"), Some("tmpfs")) => opts.iter().all(|o| {
                o.starts_with("mode=") || o.starts_with("size=") || fs_attr_bit(o).is_some()
            }),
            // A new devpts instance: its mode parameters, `newinstance` (what a mount through
            // fsopen is anyway) and attribute options. Not `uid=`/`gid=`: their ids would be
            // mapped in the supervisor's user namespace, not the sandbox's.
            (Some("devpts"), Some("devpts")) => opts.iter().all(|o| {
                o.starts_with("mode=")
                    || o.starts_with("ptmxmode=")
                    || *o == "newinstance"
                    || fs_attr_bit(o).is_some()
            }),
            _ => false,
        }
    };
    for (i, m) in mounts.iter().enumerate() {
        out[i] = eligible(m);
    }
    // Inside a mount left to libcontainer (made there after, or over, this one): left too,
    // until nothing changes (a mount left to it may leave those inside it).
    loop {
        let left: Vec<PathBuf> = mounts
            .iter()
            .zip(&out)
            .filter(|(_, p)| !**p)
            .filter_map(|(m, _)| dest(m))
            .collect();
        let mut changed = false;
        for (i, m) in mounts.iter().enumerate() {
            if out[i]
                && dest(m)
                    .is_some_and(|d| d.ancestors().skip(1).any(|a| left.iter().any(|l| l == a)))
            {
                out[i] = false;
                changed = true;
            }
        }
        if !changed {
            return out;
        }
    }
}

/// The mounts the supervisor made in the rootfs ([`premade`]), held until the sandbox has its
/// own copy. libcontainer binds the rootfs onto itself recursively in the sandbox's new mount
/// namespace, so the sandbox starts with them; they are made here with four system calls each
/// (`open_tree`, `mount_setattr`, `move_mount`, and the mount point's `mkdirat`) instead of
/// libcontainer's ~55 (pathrs's checked walk and procfs-verified reopen, for a destination in a
/// directory this process made a moment ago and no sandbox process can reach). The attributes
/// are libcontainer's: the options' `MOUNT_ATTR_*` bits on the mount itself (not on those
/// below it in an `rbind`). Copied into the sandbox's mount namespace, which belongs to a
/// user namespace below the supervisor's, they are locked: the sandbox cannot unmount one or
/// clear a flag.
///
/// The supervisor's own copies are detached ([`Premade::detach`], or the drop) once the
/// sandbox exists: its mount namespace then holds no mount in the session directory, which it
/// removes at the end.
pub struct Premade {
    rootfs: PathBuf,
    mounted: bool,
}

impl Premade {
    /// Bind `rootfs` onto itself (one mount to detach later) and make `mounts` inside it, in
    /// order. The caller is in its private mount namespace. On an error, nothing stays
    /// mounted.
    pub fn make(rootfs: &Path, mounts: &[Value]) -> anyhow::Result<Premade> {
        use anyhow::Context;
        let mut p = Premade {
            rootfs: rootfs.to_path_buf(),
            mounted: false,
        };
        if mounts.is_empty() {
            return Ok(p);
        }
        let c = std::ffi::CString::new(rootfs.as_os_str().as_encoded_bytes())
            .context("rootfs: its path holds a NUL")?;
        crate::userns::bind(&c, &c)
            .with_context(|| format!("rootfs: binding {} onto itself", rootfs.display()))?;
        p.mounted = true;
        let root = vetto_hooks::mounts::open_nofollow(rootfs)
            .map_err(|e| anyhow::anyhow!("rootfs: {e}"))?;
        for m in mounts {
            make_one(&root, m).with_context(|| {
                format!(
                    "rootfs: mounting {}",
                    m["destination"].as_str().unwrap_or("?")
                )
            })?;
        }
        Ok(p)
    }

    /// Detach the supervisor's copies (the sandbox keeps its own). Best effort, once.
    pub fn detach(&mut self) {
        if !std::mem::take(&mut self.mounted) {
            return;
        }
        let Ok(c) = std::ffi::CString::new(self.rootfs.as_os_str().as_encoded_bytes()) else {
            return;
        };
        // SAFETY: a valid C string; detaches our own bind (and what is under it) from the
        // caller's private mount namespace only.
        if unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) } != 0 {
            tracing::warn!(
                "rootfs: detaching {}: {}",
                self.rootfs.display(),
                std::io::Error::last_os_error()
            );
        }
    }
}

impl Drop for Premade {
    fn drop(&mut self) {
        self.detach();
    }
}

/// The `MOUNT_ATTR_*` bits an option sets on a new file system's mount ([`attr_bit`]'s, and
/// `strictatime`, which only a new mount can take as a bit: changing a mount's atime mode
/// takes more than one).
///
/// [`attr_bit`]: vetto_hooks::mounts::attr_bit
fn fs_attr_bit(option: &str) -> Option<u64> {
    match option {
        "strictatime" => Some(vetto_hooks::mounts::MOUNT_ATTR_STRICTATIME),
        o => vetto_hooks::mounts::attr_bit(o),
    }
}

/// One premade mount, at its destination under `root` (an `O_PATH` descriptor of the rootfs).
fn make_one(root: &std::os::fd::OwnedFd, m: &Value) -> anyhow::Result<()> {
    use anyhow::{bail, Context};
    use std::os::fd::AsRawFd;
    use vetto_hooks::mounts as vm;
    let dest = Path::new(m["destination"].as_str().unwrap_or(""));
    let Some(rel) = plain_relative(dest) else {
        bail!("not a plain absolute path");
    };
    let opts: Vec<&str> = m["options"]
        .as_array()
        .map(|a| a.iter().filter_map(|o| o.as_str()).collect())
        .unwrap_or_default();
    match m["type"].as_str() {
        Some(fstype @ ("tmpfs" | "devpts")) => {
            let attrs = opts
                .iter()
                .filter_map(|o| fs_attr_bit(o))
                .fold(0, |a, b| a | b);
            // Its parameters: `key=value`, and devpts' one flag.
            let params: Vec<(std::ffi::CString, Option<std::ffi::CString>)> = opts
                .iter()
                .filter_map(|o| match o.split_once('=') {
                    Some((k, v)) => Some((k, Some(v))),
                    None => (*o == "newinstance").then_some((*o, None)),
                })
                .map(|(k, v)| {
                    Ok((
                        std::ffi::CString::new(k)?,
                        v.map(std::ffi::CString::new).transpose()?,
                    ))
                })
                .collect::<Result<_, std::ffi::NulError>>()
                .context("a mount option holds a NUL")?;
            // The source libcontainer would give it (what mountinfo and df show).
            let source = m["source"]
                .as_str()
                .map(std::ffi::CString::new)
                .transpose()
                .context("the source holds a NUL")?;
            let params: Vec<(&std::ffi::CStr, Option<&std::ffi::CStr>)> = source
                .iter()
                .map(|s| (c"source", Some(s.as_c_str())))
                .chain(params.iter().map(|(k, v)| (k.as_c_str(), v.as_deref())))
                .collect();
            let fstype = std::ffi::CString::new(fstype).context("the type holds a NUL")?;
            let tree = vm::new_fs(&fstype, &params, attrs, dest)?;
            let target = mount_point(root, &rel, true)?;
            vm::attach(&tree, &target, dest)?;
        }
        _ => {
            let attrs = opts
                .iter()
                .filter_map(|o| vm::attr_bit(o))
                .fold(0, |a, b| a | b);
            let src = m["source"].as_str().unwrap_or("");
            let csrc = std::ffi::CString::new(src).context("the source holds a NUL")?;
            // The source as libcontainer takes it: its symlinks followed.
            let tree = vm::clone_tree(
                libc::AT_FDCWD,
                &csrc,
                opts.contains(&"rbind"),
                Path::new(src),
            )?;
            if attrs != 0 {
                vm::set_attr(&tree, attrs, false, dest)?;
            }
            let is_dir = vm::fstat(tree.as_raw_fd())
                .map(|st| st.st_mode & libc::S_IFMT == libc::S_IFDIR)
                .context("the source's type")?;
            let target = mount_point(root, &rel, is_dir)?;
            vm::attach(&tree, &target, dest)?;
        }
    }
    Ok(())
}

/// An `O_PATH` descriptor of the mount point `rel` under `root`, made (0755 directories, a
/// 0644 empty file for a file's mount point) where missing. No symlink is followed: `rel` is
/// walked one name at a time from `root`, whose tree this process made.
fn mount_point(
    root: &std::os::fd::OwnedFd,
    rel: &Path,
    dir: bool,
) -> anyhow::Result<std::os::fd::OwnedFd> {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    use std::os::unix::ffi::OsStrExt;
    let names: Vec<&std::ffi::OsStr> = rel.iter().collect();
    let mut cur: Option<OwnedFd> = None;
    for (i, name) in names.iter().enumerate() {
        let last = i + 1 == names.len();
        let at = cur.as_ref().unwrap_or(root).as_raw_fd();
        let c = std::ffi::CString::new(name.as_bytes())?;
        let want_dir = !last || dir;
        if want_dir {
            // SAFETY: a valid descriptor and C string.
            if unsafe { libc::mkdirat(at, c.as_ptr(), 0o755) } != 0 {
                let e = std::io::Error::last_os_error();
                if e.raw_os_error() != Some(libc::EEXIST) {
                    return Err(anyhow::anyhow!("mkdir {}: {e}", rel.display()));
                }
            }
        } else {
            // SAFETY: a valid descriptor and C string; O_EXCL|O_NOFOLLOW makes a new file only.
            let fd = unsafe {
                libc::openat(
                    at,
                    c.as_ptr(),
                    libc::O_CREAT
                        | libc::O_EXCL
                        | libc::O_WRONLY
                        | libc::O_NOFOLLOW
                        | libc::O_CLOEXEC,
                    0o644,
                )
            };
            if fd >= 0 {
                // SAFETY: the descriptor just opened, ours alone.
                drop(unsafe { OwnedFd::from_raw_fd(fd) });
            } else {
                let e = std::io::Error::last_os_error();
                if e.raw_os_error() != Some(libc::EEXIST) {
                    return Err(anyhow::anyhow!("create {}: {e}", rel.display()));
                }
            }
        }
        let mut flags = libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC;
        if want_dir {
            flags |= libc::O_DIRECTORY;
        }
        // SAFETY: a valid descriptor and C string.
        let fd = unsafe { libc::openat(at, c.as_ptr(), flags) };
        if fd < 0 {
            return Err(anyhow::anyhow!(
                "open {}: {}",
                rel.display(),
                std::io::Error::last_os_error()
            ));
        }
        // SAFETY: the descriptor just opened, ours alone.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        if !want_dir {
            let st = vetto_hooks::mounts::fstat(fd.as_raw_fd())?;
            if st.st_mode & libc::S_IFMT != libc::S_IFREG {
                return Err(anyhow::anyhow!("{}: not a regular file", rel.display()));
            }
        }
        cur = Some(fd);
    }
    cur.ok_or_else(|| anyhow::anyhow!("an empty destination"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn points(mounts: Value, links: &[&str]) -> Vec<String> {
        let links: Vec<PathBuf> = links.iter().map(PathBuf::from).collect();
        let m = mounts.as_array().expect("an array").clone();
        mount_points(&m, &links, &|p: &Path| {
            !p.to_string_lossy().ends_with(".json")
        })
        .into_iter()
        .map(|p| p.display().to_string())
        .collect()
    }

    #[test]
    fn only_what_lies_directly_in_the_rootfs_is_made() {
        let got = points(
            json!([
                {"destination": "/usr", "type": "bind", "source": "/usr", "options": ["rbind", "ro"]},
                {"destination": "/proc", "type": "proc", "source": "proc"},
                {"destination": "/tmp", "type": "tmpfs", "source": "tmpfs"},
                {"destination": "/tmp/project", "type": "bind", "source": "/home/u/p", "options": ["rbind"]},
                {"destination": "/dev", "type": "tmpfs", "source": "tmpfs"},
                {"destination": "/dev/pts", "type": "devpts", "source": "devpts"},
                {"destination": "/home/u/p", "source": "/home/u/p", "options": ["rbind"]},
                {"destination": "/.vetto/parent-policy.json", "type": "bind", "source": "/s/parent-policy.json", "options": ["bind", "ro"]},
                {"destination": "/lib/modules", "type": "bind", "source": "/lib/modules", "options": ["rbind"]},
                {"destination": "/a/../etc", "type": "tmpfs", "source": "tmpfs"},
                {"destination": "relative", "type": "tmpfs", "source": "tmpfs"},
                {"destination": "/", "type": "tmpfs", "source": "tmpfs"},
                {"destination": "/.file.json", "type": "bind", "source": "/x.json"}
            ]),
            &["/lib", "/bin"],
        );
        assert_eq!(
            got,
            ["usr", "proc", "tmp", "dev", "home", "home/u", "home/u/p", ".vetto"]
        );
    }

    #[test]
    fn the_directories_are_made_without_following_a_planted_link() {
        let dir = tempfile::tempdir().expect("tempdir");
        let rootfs = dir.path().join("rootfs");
        std::fs::create_dir(&rootfs).expect("rootfs");
        let outside = dir.path().join("outside");
        std::fs::create_dir(&outside).expect("outside");
        // A link where a mount point would go: mkdir fails on it, nothing is made outside.
        std::os::unix::fs::symlink(&outside, rootfs.join("usr")).expect("link");
        make(
            &rootfs,
            &[
                PathBuf::from("usr"),
                PathBuf::from("etc"),
                PathBuf::from("etc/ssl"),
            ],
        );
        assert!(rootfs.join("etc/ssl").is_dir());
        assert_eq!(std::fs::read_dir(&outside).expect("outside").count(), 0);
        let mode = std::os::unix::fs::PermissionsExt::mode(
            &std::fs::metadata(rootfs.join("etc"))
                .expect("etc")
                .permissions(),
        );
        assert_eq!(mode & 0o7777, 0o755 & !umask());
    }

    /// The destinations `premade` picks: binds of plain sources, tmpfs and devpts mounts with
    /// only attribute and mode options, outside /proc and /sys, under no link and inside no
    /// mount left to libcontainer (nor inside one that such a mount leaves); the rest stays.
    #[test]
    fn the_supervisor_makes_binds_and_tmpfs_that_libcontainer_would_not_mount_over() {
        let m = json!([
            {"destination": "/usr", "type": "bind", "source": "/usr", "options": ["rbind", "nosuid", "nodev", "ro"]},
            {"destination": "/proc", "type": "proc", "source": "proc", "options": ["nosuid"]},
            {"destination": "/tmp", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "nodev", "mode=1777"]},
            {"destination": "/tmp/p", "type": "bind", "source": "/home/u/p", "options": ["rbind", "rw"]},
            {"destination": "/dev", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "strictatime", "mode=755", "size=65536k"]},
            {"destination": "/dev/pts", "type": "devpts", "source": "devpts", "options": ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"]},
            {"destination": "/dev/x", "type": "bind", "source": "/x", "options": ["bind"]},
            {"destination": "/sys", "type": "sysfs", "source": "sysfs", "options": ["ro"]},
            {"destination": "/sys/fs/t", "type": "tmpfs", "source": "tmpfs", "options": []},
            {"destination": "/pts2", "type": "devpts", "source": "devpts", "options": ["gid=5"]},
            {"destination": "/pts2/in", "type": "tmpfs", "source": "tmpfs", "options": []},
            {"destination": "/t2", "type": "tmpfs", "source": "tmpfs", "options": ["relatime"]},
            {"destination": "/lib/m", "type": "bind", "source": "/m", "options": ["rbind"]},
            {"destination": "/o", "type": "overlay", "source": "overlay", "options": ["lowerdir=/a"]},
            {"destination": "/o/in", "type": "bind", "source": "/in", "options": ["rbind"]},
            {"destination": "/o/in/deeper", "type": "tmpfs", "source": "tmpfs", "options": []},
            {"destination": "/s", "type": "bind", "source": "/s", "options": ["rbind", "rro"]},
            {"destination": "/s/t", "type": "tmpfs", "source": "tmpfs", "options": ["uid=5"]},
            {"destination": "/dev.json", "type": "bind", "source": "/c.json", "options": ["bind", "ro"]},
            {"destination": "/chr", "type": "bind", "source": "/dev/null", "options": ["bind"]},
            {"destination": "/nobind", "type": "bind", "source": "/n", "options": ["ro"]},
            {"destination": "/a/../b", "type": "tmpfs", "source": "tmpfs", "options": []},
            {"destination": "/rel", "type": "bind", "source": "rel", "options": ["bind"]}
        ]);
        let m = m.as_array().expect("an array").clone();
        let plain = |p: &Path| p != Path::new("/dev/null");
        let got: Vec<&str> = premade(&m, &[PathBuf::from("/lib")], &plain)
            .iter()
            .zip(&m)
            .filter(|(p, _)| **p)
            .filter_map(|(_, m)| m["destination"].as_str())
            .collect();
        assert_eq!(
            got,
            [
                "/usr",
                "/tmp",
                "/tmp/p",
                "/dev",
                "/dev/pts",
                "/dev/x",
                "/dev.json"
            ]
        );
    }

    /// A mount point is made one name at a time without following a link: a link where a
    /// directory or the file's mount point would go fails the mount, and nothing is made
    /// where it points. A file's mount point is a new empty regular file.
    #[test]
    fn a_premade_mount_point_follows_no_link() {
        let tmp = tempfile::tempdir().expect("tmp");
        let rootfs = tmp.path().join("rootfs");
        let outside = tmp.path().join("outside");
        std::fs::create_dir(&rootfs).expect("rootfs");
        std::fs::create_dir(&outside).expect("outside");
        std::os::unix::fs::symlink(&outside, rootfs.join("usr")).expect("link");
        std::os::unix::fs::symlink(outside.join("f"), rootfs.join("f")).expect("file link");
        let root = vetto_hooks::mounts::open_nofollow(&rootfs).expect("open");
        assert!(mount_point(&root, Path::new("usr/share"), true).is_err());
        assert!(mount_point(&root, Path::new("usr"), true).is_err());
        let err = mount_point(&root, Path::new("f"), false).expect_err("a link");
        assert!(err.to_string().contains("not a regular file"), "{err}");
        assert_eq!(std::fs::read_dir(&outside).expect("outside").count(), 0);
        mount_point(&root, Path::new("a/b/c.json"), false).expect("a file's mount point");
        let m = std::fs::symlink_metadata(rootfs.join("a/b/c.json")).expect("made");
        assert!(m.is_file() && m.len() == 0);
        assert!(rootfs.join("a/b").is_dir());
        mount_point(&root, Path::new("a/b"), true).expect("an existing directory");
    }

    fn umask() -> u32 {
        let status = std::fs::read_to_string("/proc/self/status").expect("status");
        let line = status
            .lines()
            .find(|l| l.starts_with("Umask:"))
            .expect("Umask line");
        u32::from_str_radix(line["Umask:".len()..].trim(), 8).expect("octal")
    }
}
