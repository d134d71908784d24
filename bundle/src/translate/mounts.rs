//! The mounts section of `vetto run`: what the sandbox sees of the host (system directories,
//! HOME's dotfiles, the policy's roots, the project), its private `/proc`, `/sys`, `/dev`,
//! `/tmp` and HOME, each with its Landlock rule; and the order the mounts are made in.
//!
//! `vetto-shim` keeps the bundle's own mounts and only edits them ([`crate::container`]); the
//! kernel paths kept read-only ([`PROC_READONLY`]) are shared.

use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use crate::error::TranslateError;
use crate::host::HostFacts;
use crate::plan::{FsAccess, InitMountKind};
use crate::policy::ProjectAccess;
use crate::resolve::{Policy, Source};

use super::landlock::write_access;
use super::paths::{check_root, resolve_existing, resolve_in_project};
use super::{Builder, SHM_SIZE};

/// `/proc` paths that stay read-only in every sandbox and hardened container, whatever the
/// bundle says.
pub const PROC_READONLY: &[&str] = &[
    "/proc/bus",
    "/proc/fs",
    "/proc/irq",
    "/proc/sys",
    "/proc/sysrq-trigger",
];

/// `/proc` and `/sys` paths hidden in a `vetto run` sandbox.
pub const PROC_MASKED: &[&str] = &[
    "/proc/acpi",
    "/proc/asound",
    "/proc/kcore",
    "/proc/keys",
    "/proc/latency_stats",
    "/proc/timer_list",
    "/proc/timer_stats",
    "/proc/sched_debug",
    "/proc/scsi",
    "/sys/firmware",
    "/sys/devices/virtual/powercap",
];

/// What the layout leaves for the later sections.
pub(super) struct Layout {
    /// Symlinks to create in the rootfs (merged-/usr hosts: `/bin -> usr/bin`).
    pub links: Vec<(PathBuf, String)>,
    /// Host paths the sandbox can write and that outlive it: the project (unless read-only),
    /// the write roots and the state paths.
    pub writable_roots: Vec<PathBuf>,
    /// The state paths bound, where the sandbox sees them (`~/.claude`, also when that is a
    /// symlink on the host): what `~/...` protections are placed within.
    pub state_inside: Vec<PathBuf>,
}

/// Every mount of the sandbox, with its Landlock rule and note.
pub(super) fn layout(
    b: &mut Builder,
    policy: &Policy,
    facts: &HostFacts,
) -> Result<Layout, TranslateError> {
    let builtin = Source::Builtin("layout".into());
    let mut links = vec![];
    let mut writable_roots: Vec<PathBuf> = vec![];

    // System directories, read-only.
    for d in &facts.system_dirs {
        match &d.symlink {
            Some(target) => {
                links.push((d.path.clone(), target.clone()));
                b.note(
                    "mount",
                    d.path.display(),
                    format!("symlink -> {target}"),
                    &builtin,
                );
            }
            None => {
                b.bind(&d.path, false);
                b.rule(&d.path, FsAccess::ReadExec, false);
                b.note("mount", d.path.display(), "read-only bind", &builtin);
            }
        }
    }
    // Kernel filesystems and devices.
    b.mount(Path::new("/proc"), json!({"destination": "/proc", "type": "proc", "source": "proc", "options": ["nosuid", "nodev", "noexec"]}));
    b.note(
        "mount",
        "/proc",
        "new procfs for the sandbox's PID namespace",
        &builtin,
    );
    b.rule(Path::new("/proc"), FsAccess::ReadWrite, false);
    b.mount(Path::new("/sys"), json!({"destination": "/sys", "type": "sysfs", "source": "sysfs", "options": ["nosuid", "nodev", "noexec", "ro"]}));
    b.note(
        "mount",
        "/sys",
        "read-only sysfs of the sandbox's network namespace",
        &builtin,
    );
    b.rule(Path::new("/sys"), FsAccess::ReadExec, false);
    b.tmpfs(
        Path::new("/dev"),
        &["nosuid", "strictatime", "mode=755", "size=65536k"],
    );
    b.mount(Path::new("/dev/pts"), json!({"destination": "/dev/pts", "type": "devpts", "source": "devpts", "options": ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"]}));
    b.tmpfs(
        Path::new("/dev/shm"),
        &[
            "nosuid",
            "nodev",
            "noexec",
            "mode=1777",
            &format!("size={SHM_SIZE}"),
        ],
    );
    b.note("mount", "/dev", format!("minimal: null zero full random urandom tty ptmx, devpts, private /dev/shm ({SHM_SIZE})"), &builtin);
    for dev in ["null", "zero", "full", "random", "urandom", "tty"] {
        b.rule(&Path::new("/dev").join(dev), FsAccess::Device, false);
    }
    b.rule(Path::new("/dev/pts"), FsAccess::Device, false);
    b.rule(Path::new("/dev/ptmx"), FsAccess::Device, false);
    b.rule(Path::new("/dev/shm"), FsAccess::ReadWrite, false);
    // Private /tmp and HOME.
    let project_access = policy.project.value;
    let nodelete_inside = |root: &Path| {
        project_access == ProjectAccess::WriteNoDelete && facts.project.starts_with(root)
    };
    b.tmpfs(Path::new("/tmp"), &["nosuid", "nodev", "mode=1777"]);
    let tmp_access = if nodelete_inside(Path::new("/tmp")) {
        FsAccess::ReadWriteNoDelete
    } else {
        FsAccess::ReadWrite
    };
    b.rule(Path::new("/tmp"), tmp_access, false);
    b.note("mount", "/tmp", "private tmpfs", &builtin);
    if facts.home != Path::new("/") && facts.home != facts.project {
        b.tmpfs(&facts.home, &["nosuid", "nodev", "mode=700"]);
        let home_access = if nodelete_inside(&facts.home) {
            FsAccess::ReadWriteNoDelete
        } else {
            FsAccess::ReadWrite
        };
        b.rule(&facts.home, home_access, false);
        b.note(
            "mount",
            facts.home.display(),
            "private tmpfs HOME",
            &builtin,
        );
        if home_access == FsAccess::ReadWriteNoDelete {
            for sub in [".cache", ".config", ".local"] {
                let p = facts.home.join(sub);
                b.tmpfs(&p, &["nosuid", "nodev", "mode=700"]);
                b.rule(&p, FsAccess::ReadWrite, false);
                b.note("mount", p.display(), "private tmpfs (fully writable; HOME itself is no-delete because the write-no-delete project lies inside it)", &builtin);
            }
        }
    }
    for dot in &facts.home_dotfiles {
        // A dotfile may be a symlink (`~/.cargo -> /data/cargo`): the bind shows its target at
        // the link's path, and masks follow that mapping (below).
        let src = dot.canonicalize().unwrap_or_else(|_| dot.clone());
        b.bind_from(&src, dot, false);
        b.rule(dot, FsAccess::ReadExec, false);
        b.note(
            "mount",
            dot.display(),
            "read-only bind (commit identity / toolchain)",
            Source::Builtin("home dotfiles".into()),
        );
    }
    // Extra roots.
    for (list, writable) in [(&policy.read, false), (&policy.write, true)] {
        let key = if writable {
            "filesystem.write"
        } else {
            "filesystem.read"
        };
        for r in list {
            let p = resolve_existing(key, &r.value, facts)?;
            check_root(key, &r.value, &p, writable, facts)?;
            if writable {
                review_outside(key, &r.value, &p, project_access, facts)?;
            }
            b.bind(&p, writable);
            if writable {
                writable_roots.push(p.clone());
            }
            let access = match writable {
                false => FsAccess::ReadExec,
                // Landlock rights add up down the tree: a write root that contains a
                // write-no-delete project must not hand it the remove rights.
                true if nodelete_inside(&p) => FsAccess::ReadWriteNoDelete,
                true => FsAccess::ReadWrite,
            };
            b.rule(&p, access, false);
            b.note(
                "mount",
                p.display(),
                if writable {
                    "read-write bind"
                } else {
                    "read-only bind"
                },
                &r.source,
            );
        }
    }
    // Tools' state under HOME (agent profiles, toolchain caches): read-write, bound from what
    // it resolves to at the path the tool uses. A directory `vetto run` creates when missing
    // (so `policy explain` may see it absent); a file only when present.
    let mut state_inside = vec![];
    for st in &policy.state {
        let dir = st.value.ends_with('/');
        let raw = st.value.trim_end_matches('/');
        let inside = crate::policy::expand_path(raw, &facts.home, &facts.project)?;
        if inside.symlink_metadata().is_err() {
            b.note(
                "mount",
                inside.display(),
                if dir {
                    "state: absent (`vetto run` creates it)"
                } else {
                    "state: absent (the sandbox's private HOME holds it for this session)"
                },
                &st.source,
            );
            continue;
        }
        let p = resolve_existing("filesystem.state", raw, facts)?;
        check_root("filesystem.state", &st.value, &p, true, facts)?;
        review_outside("filesystem.state", &st.value, &p, project_access, facts)?;
        review_outside(
            "filesystem.state",
            &st.value,
            &inside,
            project_access,
            facts,
        )?;
        b.bind_from(&p, &inside, true);
        writable_roots.push(p.clone());
        let access = if nodelete_inside(&p) {
            FsAccess::ReadWriteNoDelete
        } else {
            FsAccess::ReadWrite
        };
        b.rule(&inside, access, false);
        b.note(
            "mount",
            inside.display(),
            "state, read-write bind",
            &st.source,
        );
        state_inside.push(inside);
    }
    // The project.
    let proj_access = write_access(project_access).unwrap_or(FsAccess::ReadExec);
    let proj_detail = match project_access {
        ProjectAccess::Read => "project, read-only bind",
        ProjectAccess::Write => "project, read-write bind",
        ProjectAccess::WriteNoDelete => {
            "project, read-write bind; Landlock denies remove and rename"
        }
        ProjectAccess::Review => {
            "project, overlay: the project read-only below, the writes in a change set (vetto changes)"
        }
    };
    if project_access == ProjectAccess::Review {
        let layers = facts.review.as_ref().ok_or_else(|| TranslateError::Path {
            key: "filesystem.project".into(),
            path: "review".into(),
            reason: "review mode needs a change set (vetto run makes one; vetto-shim has none)"
                .into(),
        })?;
        b.mount(&facts.project, overlay(&facts.project, layers)?);
        // The overlay shows the project at its own path, as a bind would: the secrets in it
        // are masked there (and everything else that maps host paths through the binds).
        b.binds.push((facts.project.clone(), facts.project.clone()));
    } else {
        b.bind(&facts.project, project_access != ProjectAccess::Read);
    }
    if project_access != ProjectAccess::Read {
        writable_roots.push(facts.project.clone());
    }
    b.rule(&facts.project, proj_access, false);
    b.note(
        "mount",
        facts.project.display(),
        proj_detail,
        &policy.project.source,
    );
    if project_access == ProjectAccess::WriteNoDelete {
        for s in &policy.scratch {
            match resolve_in_project("filesystem.scratch", &s.value, facts)? {
                Some(p) if p.is_dir() => {
                    b.rule(&p, FsAccess::ReadWrite, false);
                    b.note(
                        "landlock",
                        p.display(),
                        "scratch: fully writable (delete and rename allowed)",
                        &s.source,
                    );
                }
                _ => b.note(
                    "landlock",
                    &s.value,
                    "scratch: absent now, so not exempt (created later it is no-delete too)",
                    &s.source,
                ),
            }
        }
    }

    Ok(Layout {
        links,
        writable_roots,
        state_inside,
    })
}

/// The mounts in the order they are made: the init's parents first, at one path pin, then
/// read-only, then mask; the spec's parents before children, for one destination in the
/// order written (masks last). Returns the spec's.
pub(super) fn order(b: &mut Builder) -> Vec<Value> {
    // The init's mounts: parents first; at one path pin, then read-only, then mask. A pin
    // or protection beneath a read-only path is already read-only.
    let ro: Vec<PathBuf> = b
        .init_mounts
        .iter()
        .filter(|m| m.kind == InitMountKind::ReadOnly)
        .map(|m| m.path.clone())
        .collect();
    b.init_mounts.retain(|m| match m.kind {
        InitMountKind::Pin | InitMountKind::ReadOnly => !ro.iter().any(|r| {
            (m.path != *r && m.path.starts_with(r))
                || (m.kind == InitMountKind::Pin && m.path == *r)
        }),
        _ => true,
    });
    b.init_mounts.sort_by(|x, y| {
        (x.path.components().count(), x.kind).cmp(&(y.path.components().count(), y.kind))
    });
    // Parents before children; for one destination, the order written (masks last).
    b.mounts
        .sort_by_key(|(d, _, seq)| (d.components().count(), *seq));
    b.mounts.iter().map(|(_, m, _)| m.clone()).collect()
}

/// The review-mode overlay of the project. Redirects, metacopy and the inode index stay off,
/// so the upper layer holds only plain entries, whiteouts and opaque directories (what
/// `vetto changes` reads); `userxattr` keeps overlayfs' own attributes in `user.overlay.*`,
/// which is what an overlay mounted in a user namespace must use.
fn overlay(project: &Path, layers: &crate::host::ReviewLayers) -> Result<Value, TranslateError> {
    let mut opts: Vec<String> = vec![];
    for (key, p) in [
        ("lowerdir", project),
        ("upperdir", layers.upper.as_path()),
        ("workdir", layers.work.as_path()),
    ] {
        let s = p.to_str().filter(|s| !s.contains([',', ':', '\\', '\n']));
        let Some(s) = s else {
            return Err(TranslateError::Path {
                key: "filesystem.project".into(),
                path: p.display().to_string(),
                reason: format!(
                    "review mode cannot name this directory as the overlay's {key}: its path is not UTF-8 or holds ',', ':' or '\\'"
                ),
            });
        };
        opts.push(format!("{key}={s}"));
    }
    for o in [
        "userxattr",
        "redirect_dir=nofollow",
        "metacopy=off",
        "index=off",
        "nosuid",
        "nodev",
        // The session's end does not wait for its writes to reach the disk (unmounting a
        // writable overlay syncs the upper file system otherwise: milliseconds for a few
        // files, seconds after a build). overlayfs leaves a marker in the work directory;
        // `vetto` checks it before a set is used again (shim/src/changes: a set last used
        // before a restart may have lost writes in a crash).
        "volatile",
    ] {
        opts.push(o.into());
    }
    Ok(json!({"destination": project, "type": "overlay", "source": "overlay", "options": opts}))
}

/// In review mode, a writable bind at or inside the project would put the sandbox's writes
/// there straight into the project, past the change set: refused.
fn review_outside(
    key: &str,
    raw: &str,
    p: &Path,
    project_access: ProjectAccess,
    facts: &HostFacts,
) -> Result<(), TranslateError> {
    if project_access == ProjectAccess::Review && p.starts_with(&facts.project) {
        return Err(TranslateError::Path {
            key: key.into(),
            path: raw.into(),
            reason: format!(
                "{} is in the project, which review mode holds in a change set: a writable bind there would reach the project without review (leave it to the overlay, or use another project access)",
                p.display()
            ),
        });
    }
    Ok(())
}
