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

    fn umask() -> u32 {
        let status = std::fs::read_to_string("/proc/self/status").expect("status");
        let line = status
            .lines()
            .find(|l| l.starts_with("Umask:"))
            .expect("Umask line");
        u32::from_str_radix(line["Umask:".len()..].trim(), 8).expect("octal")
    }
}
