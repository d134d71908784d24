//! The FS-ONLY tier's view of the host: the Landlock rules that replace FULL's mounts.
//!
//! Without a mount namespace nothing can be masked or made private, so everything FULL shows
//! through a mount has to be said with Landlock rules on the host's own paths, and Landlock
//! cannot subtract: a rule on a directory grants its rights on everything beneath it. So
//! [`view`] takes FULL's rules and masks (from [`crate::translate::translate`]) and:
//! - keeps the rules of what FULL binds from the host (system directories, the project, the
//!   policy's roots, HOME's dotfiles) and of the devices it shows;
//! - drops the rules of what FULL makes private (`/tmp`, HOME, `/dev/shm`: tmpfs there, the
//!   host's own here) and of the whole `/dev/pts` (the host's terminals): the session gets a
//!   private directory for `TMPDIR` instead, and its own terminal by name;
//! - `/proc` and `/sys` become read-only (the host's, not the sandbox's);
//! - wherever a kept rule's tree holds a mask (a secret, vetto's sealed state) or a
//!   read-only protection, the rule is not given on that tree: its directory gets listing
//!   only ([`FsAccess::ListDir`]) and each entry is granted on its own, recursively, around
//!   the exceptions. Symlinks met on the way are not followed (their targets need a rule of
//!   their own). A directory that cannot be read, or a view that needs more than
//!   [`MAX_RULES`] rules, is an error: there is no broad fallback.
//!
//! The consequence, documented in the threat model: a directory on the way to a secret or
//! a protected path (the project root, `.git`) can be listed and its existing files edited,
//! but nothing can be created, removed or renamed directly in it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::plan::{FsAccess, InitMountKind, LandlockPlan, LandlockRule};
use crate::translate::Translation;

/// The most rules one FS-ONLY view may need.
pub const MAX_RULES: usize = 4096;

/// The Landlock ABI FS-ONLY needs: 6 scopes signals and abstract UNIX sockets to the sandbox
/// (without a PID namespace, the host's processes of the same user are otherwise reachable).
pub const MIN_ABI: u32 = 6;

/// The view cannot be built: the command does not run.
#[derive(Debug, thiserror::Error)]
pub enum FsOnlyError {
    /// A directory on the way to an exception could not be listed or inspected.
    #[error("FS-ONLY: listing {} to grant access around the secrets and protected paths beneath it failed: {source}", path.display())]
    Enumerate {
        /// Where.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The safety budget of rules is exhausted.
    #[error("FS-ONLY: granting {} around its secrets and protected paths needs more than {MAX_RULES} Landlock rules (the safety budget); use the FULL tier, or move the secrets out of large trees", root.display())]
    Budget {
        /// The rule that was being expanded.
        root: PathBuf,
    },
}

/// What to do at one path: nothing (a mask) or at most this access (a protection).
type Exceptions = BTreeMap<PathBuf, Option<FsAccess>>;

fn exceptions(t: &Translation) -> Exceptions {
    let mut out = Exceptions::new();
    for m in &t.plan.mounts {
        let limit = match m.kind {
            InitMountKind::MaskFile | InitMountKind::MaskDir | InitMountKind::Verify => None,
            InitMountKind::ReadOnly => Some(FsAccess::ReadExec),
            // A pin only keeps a directory from being renamed; ListDir above an exception
            // already does.
            InitMountKind::Pin => continue,
        };
        for p in [Some(m.path.clone()), canonical(&m.path)]
            .into_iter()
            .flatten()
        {
            let e = out.entry(p).or_insert(limit);
            if limit.is_none() {
                *e = None;
            }
        }
    }
    out
}

/// `path` with its parent resolved (the last component itself is not followed).
fn canonical(path: &Path) -> Option<PathBuf> {
    let parent = path.parent()?.canonicalize().ok()?;
    Some(parent.join(path.file_name()?))
}

/// The narrower of two accesses.
fn narrower(a: FsAccess, b: FsAccess) -> FsAccess {
    use FsAccess::*;
    match (a, b) {
        (ListDir, _) | (_, ListDir) => ListDir,
        (ReadExec, _) | (_, ReadExec) => ReadExec,
        (Device, x) | (x, Device) => x,
        (ReadWriteNoDelete, _) | (_, ReadWriteNoDelete) => ReadWriteNoDelete,
        (ReadWrite, ReadWrite) => ReadWrite,
    }
}

struct Expander<'a> {
    exc: &'a Exceptions,
    rules: Vec<LandlockRule>,
    root: PathBuf,
}

impl Expander<'_> {
    fn push(&mut self, path: PathBuf, access: FsAccess, optional: bool) -> Result<(), FsOnlyError> {
        if self.rules.len() >= MAX_RULES {
            return Err(FsOnlyError::Budget {
                root: self.root.clone(),
            });
        }
        self.rules.push(LandlockRule {
            path,
            access,
            optional,
        });
        Ok(())
    }

    /// Grant `access` on `path`, around every exception beneath it.
    fn grant(&mut self, path: &Path, access: FsAccess, optional: bool) -> Result<(), FsOnlyError> {
        let access = match self.exc.get(path) {
            Some(None) => return Ok(()),
            Some(Some(limit)) => narrower(access, *limit),
            None => access,
        };
        let beneath = self
            .exc
            .range(path.to_path_buf()..)
            .take_while(|(e, _)| e.starts_with(path))
            .any(|(e, _)| e != path);
        if !beneath {
            return self.push(path.to_path_buf(), access, optional);
        }
        self.push(path.to_path_buf(), FsAccess::ListDir, optional)?;
        let entries = match std::fs::read_dir(path) {
            Ok(e) => e,
            Err(e) if optional && e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(source) => {
                return Err(FsOnlyError::Enumerate {
                    path: path.to_path_buf(),
                    source,
                })
            }
        };
        let mut names = vec![];
        for entry in entries {
            let entry = entry.map_err(|source| FsOnlyError::Enumerate {
                path: path.to_path_buf(),
                source,
            })?;
            let kind = entry.file_type().map_err(|source| FsOnlyError::Enumerate {
                path: entry.path(),
                source,
            })?;
            // A symlink is not followed: its target is reachable only through a rule of its
            // own (and one inside a granted tree is granted with that tree).
            if !kind.is_symlink() {
                names.push(entry.path());
            }
        }
        names.sort();
        for p in names {
            self.grant(&p, access, false)?;
        }
        Ok(())
    }
}

/// The FS-ONLY Landlock plan for translation `t`: `private` are the session's own writable
/// directories (its `TMPDIR`), `devices` the terminal devices the command may use.
pub fn view(
    t: &Translation,
    private: &[PathBuf],
    devices: &[PathBuf],
) -> Result<LandlockPlan, FsOnlyError> {
    let exc = exceptions(t);
    let spec_mounts = t.spec.mounts().clone().unwrap_or_default();
    let kind_at = |p: &Path| {
        spec_mounts
            .iter()
            .rev()
            .find(|m| m.destination() == p)
            .and_then(|m| m.typ().clone())
    };
    let mut x = Expander {
        exc: &exc,
        rules: vec![],
        root: PathBuf::new(),
    };
    for r in &t.plan.landlock.rules {
        let path = r.path.as_path();
        let access = match (kind_at(path).as_deref(), path.to_str()) {
            (_, Some("/proc" | "/sys")) => FsAccess::ReadExec,
            // Private in FULL (a tmpfs there), the host's own here.
            (Some("tmpfs"), _) => continue,
            (_, Some("/dev/pts")) => continue,
            (_, Some(p)) if p.starts_with("/dev/") => r.access,
            (Some("bind"), _) => r.access,
            // Beneath a bind or a tmpfs without a mount of its own (a scratch directory in
            // the project): as the rule says, if its tree is kept.
            _ if t
                .plan
                .landlock
                .rules
                .iter()
                .any(|o| o.path != r.path && path.starts_with(&o.path)) =>
            {
                r.access
            }
            _ => continue,
        };
        // Granted on the real object: the expansion compares host paths.
        let real = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
        x.root = real.clone();
        x.grant(&real, access, r.optional)?;
    }
    for p in private {
        x.root = p.clone();
        x.push(p.clone(), FsAccess::ReadWrite, false)?;
    }
    for d in devices {
        x.root = d.clone();
        x.push(d.clone(), FsAccess::Device, false)?;
    }
    Ok(LandlockPlan {
        rules: x.rules,
        min_abi: MIN_ABI,
        scope: true,
    })
}

/// The FS-ONLY tier's deny-list: FULL's, plus the network. Without a network namespace a
/// socket reaches the host's: `socket()` is refused whatever the family (a pathname UNIX
/// socket, D-Bus's or the Docker daemon's, would otherwise be reachable: Landlock before ABI 9
/// does not mediate connecting to one), and `socketpair()` of datagram sockets too (`sendto`
/// with an address works on those even when connected).
pub fn seccomp(base: &crate::plan::SeccompPlan) -> crate::plan::SeccompPlan {
    use crate::plan::{ArgCheck, ArgDeny};
    let mut s = base.clone();
    // Refused outright: the family rule is moot.
    s.deny_args.retain(|a| a.syscall != "socket");
    if !s.deny.iter().any(|d| d == "socket") {
        s.deny.push("socket".into());
    }
    s.deny_args.push(ArgDeny {
        syscall: "socketpair".into(),
        // SOCK_DGRAM (2) and SOCK_RAW (3); stream and seqpacket pairs have no address to send to.
        when: vec![ArgCheck::BitsSet { arg: 1, mask: 2 }],
        why: "FS-ONLY: a datagram socket pair can send to a host socket by address".into(),
    });
    // No user namespace of its own (FULL's sandbox is one; here it would hand the agent
    // every capability over new namespaces and the kernel surface behind them).
    for syscall in ["unshare", "clone"] {
        s.deny_args.push(ArgDeny {
            syscall: syscall.into(),
            when: vec![ArgCheck::BitsSet {
                arg: 0,
                mask: CLONE_NEWUSER,
            }],
            why: "FS-ONLY: no new user namespace".into(),
        });
    }
    s.deny_errno.push(crate::plan::ErrnoDeny {
        syscall: "clone3".into(),
        errno: ENOSYS,
        why: "FS-ONLY: its flags live in a struct seccomp cannot read (CLONE_NEWUSER); callers fall back to clone".into(),
    });
    s
}

/// `CLONE_NEWUSER` from `<linux/sched.h>`.
const CLONE_NEWUSER: u32 = 0x1000_0000;
/// `ENOSYS` (asm-generic).
const ENOSYS: i32 = 38;
