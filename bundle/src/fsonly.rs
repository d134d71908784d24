//! The FS-ONLY tier's view of the host: what replaces FULL's mounts, as plain data.
//!
//! Without a mount namespace nothing can be masked or made private, so everything FULL shows
//! through a mount has to be said with Landlock rules on the host's own objects, and Landlock
//! cannot subtract: a rule on a directory grants its rights on everything beneath it. [`view`]
//! takes FULL's rules and masks (from [`crate::translate::translate`]) and says:
//! - which **roots** to grant: the rules of what FULL binds from the host (system
//!   directories, the project, the policy's roots, HOME's dotfiles) and of the devices it
//!   shows, but not what FULL makes private (`/tmp`, HOME, `/dev/shm`: tmpfs there, the host's
//!   own here) nor the whole `/dev/pts` (the host's terminals): the session gets a private
//!   directory for `TMPDIR` instead, and its own terminal by name; `/proc` and `/sys` become
//!   read-only (the host's, not the sandbox's);
//! - which **exceptions** the grant must go around: every mask (a secret, vetto's sealed
//!   state) and every read-only protection, each with the (device, inode) the scan found.
//!
//! The walk that turns this into rules is `vetto_hooks::fsview`: it works on descriptors and
//! inode identities, never on names resolved twice, so a rename racing the start cannot move
//! a secret under a broad rule (a directory on the way to an exception gets listing only and
//! each entry its own rule; a directory above a masked *directory* not even listing, so the
//! masked directory's names stay hidden). An exception that is no longer where the scan found
//! it, a directory that cannot be listed, or more than [`MAX_RULES`] rules is an error: there
//! is no broad fallback.
//!
//! The consequence, documented in the threat model: a directory on the way to a secret or a
//! protected path (the project root, `.git`) can be listed and its existing files edited, but
//! nothing can be created, removed or renamed directly in it.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::plan::{FsAccess, InitMountKind, LandlockRule};
use crate::translate::Translation;

/// The most rules one FS-ONLY view may need.
pub const MAX_RULES: usize = 4096;

/// The Landlock ABI FS-ONLY needs: 6 scopes signals and abstract UNIX sockets to the sandbox
/// (without a PID namespace, the host's processes of the same user are otherwise reachable).
pub const MIN_ABI: u32 = 6;

/// An object the grant must go around.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Exception {
    /// Where the scan found it (canonical parent).
    pub path: PathBuf,
    /// `None`: no access at all (a mask); `Some`: at most this (a protection).
    pub limit: Option<FsAccess>,
    /// A masked directory: the directories above it get no listing right either (it would
    /// reach into the masked directory).
    pub hide_names: bool,
    /// `st_dev` the scan recorded.
    pub dev: u64,
    /// `st_ino` the scan recorded.
    pub ino: u64,
}

/// The FS-ONLY view: roots to grant and exceptions to go around.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct View {
    /// What to grant (canonical paths), in order.
    pub roots: Vec<LandlockRule>,
    /// What to go around.
    pub exceptions: Vec<Exception>,
    /// The Landlock ABI required.
    pub min_abi: u32,
}

impl View {
    /// The exceptions beneath (or at) `root`.
    pub fn beneath<'a>(&'a self, root: &'a Path) -> impl Iterator<Item = &'a Exception> + 'a {
        self.exceptions
            .iter()
            .filter(move |e| e.path.starts_with(root))
    }
}

/// `path` with its parent resolved (the last component itself is not followed).
fn canonical(path: &Path) -> Option<PathBuf> {
    let parent = path.parent()?.canonicalize().ok()?;
    Some(parent.join(path.file_name()?))
}

fn exceptions(t: &Translation) -> Vec<Exception> {
    let mut out: Vec<Exception> = vec![];
    for m in &t.plan.mounts {
        let (limit, hide_names) = match m.kind {
            InitMountKind::MaskFile => (None, false),
            InitMountKind::MaskDir => (None, true),
            // A symlink with a secret's name: never followed by the walk; its target (if
            // a secret) is an exception of its own.
            InitMountKind::Verify => continue,
            InitMountKind::ReadOnly => (Some(FsAccess::ReadExec), false),
            // A pin only keeps a directory from being renamed; listing-only above an
            // exception already does.
            InitMountKind::Pin => continue,
            // Review mode is refused on FS-ONLY; nothing to carry over.
            InitMountKind::Overlay => continue,
        };
        let path = canonical(&m.path).unwrap_or_else(|| m.path.clone());
        match out
            .iter_mut()
            .find(|e| e.dev == m.dev && e.ino == m.ino && e.path == path)
        {
            Some(e) => {
                if limit.is_none() {
                    e.limit = None;
                }
                e.hide_names |= hide_names;
            }
            None => out.push(Exception {
                path,
                limit,
                hide_names,
                dev: m.dev,
                ino: m.ino,
            }),
        }
    }
    out
}

/// The FS-ONLY view of translation `t`: `private` are the session's own writable directories
/// (its `TMPDIR`), `devices` the terminal devices the command may use, `readable` files it may
/// read (the parent policy of nested runs).
pub fn view(
    t: &Translation,
    private: &[PathBuf],
    devices: &[PathBuf],
    readable: &[PathBuf],
) -> View {
    let spec_mounts = t.spec["mounts"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    let kind_at = |p: &Path| {
        spec_mounts
            .iter()
            .rev()
            .find(|m| m["destination"].as_str().map(Path::new) == Some(p))
            .and_then(|m| m["type"].as_str().map(str::to_string))
    };
    let mut roots = vec![];
    for r in &t.plan.landlock.rules {
        let path = r.path.as_path();
        let access = match (kind_at(path).as_deref(), path.to_str()) {
            (_, Some("/proc" | "/sys")) => FsAccess::ReadExec,
            // Private in FULL (a tmpfs there), the host's own here.
            (Some("tmpfs"), _) => continue,
            (_, Some("/dev/pts")) => continue,
            (_, Some(p)) if p.starts_with("/dev/") => r.access,
            (Some("bind"), _) => r.access,
            // Beneath a bind without a mount of its own (a scratch directory in the project):
            // as the rule says.
            _ if t.plan.landlock.rules.iter().any(|o| {
                o.path != r.path
                    && path.starts_with(&o.path)
                    && kind_at(&o.path).as_deref() == Some("bind")
            }) =>
            {
                r.access
            }
            _ => continue,
        };
        roots.push(LandlockRule {
            path: std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf()),
            access,
            optional: r.optional,
        });
    }
    for (list, access) in [
        (private, FsAccess::ReadWrite),
        (devices, FsAccess::Device),
        (readable, FsAccess::ReadExec),
    ] {
        roots.extend(list.iter().map(|p| LandlockRule {
            path: std::fs::canonicalize(p).unwrap_or_else(|_| p.clone()),
            access,
            optional: false,
        }));
    }
    View {
        roots,
        exceptions: exceptions(t),
        min_abi: MIN_ABI,
    }
}

/// The FS-ONLY tier's deny-list: FULL's, plus the network. Without a network namespace a
/// socket reaches the host's: with the network off, `socket()` is refused whatever the family
/// (a pathname UNIX socket, D-Bus's or the Docker daemon's, would otherwise be reachable:
/// Landlock before ABI 9 does not mediate connecting to one), and `socketpair()` of datagram
/// sockets too (`sendto` with an address works on those even when connected).
///
/// With the broker (`broker`), the only sockets are TCP over IPv4 or IPv6, and they can only
/// be connected: every `connect()` is answered by the supervisor, which connects the socket to
/// the broker itself (`vetto_hooks::seccomp::notify_connect`); here, everything that would
/// reach the host's network without a `connect()` is refused: `bind()` and `listen()` (which
/// binds a port on every address by itself), and TCP Fast Open's `sendto`/`sendmsg` with
/// `MSG_FASTOPEN`, which connects and sends in one call.
pub fn seccomp(base: &crate::plan::SeccompPlan, broker: bool) -> crate::plan::SeccompPlan {
    use crate::plan::{ArgCheck, ArgDeny};
    let mut s = base.clone();
    s.deny_args.retain(|a| a.syscall != "socket");
    if broker {
        s.deny_args.push(ArgDeny {
            syscall: "socket".into(),
            when: vec![
                ArgCheck::Ne { arg: 0, value: 2 },
                ArgCheck::Ne { arg: 0, value: 10 },
            ],
            why: "FS-ONLY with the broker: a family other than AF_INET, AF_INET6".into(),
        });
        // The type's low 4 bits (SOCK_TYPE_MASK; the rest are SOCK_NONBLOCK, SOCK_CLOEXEC).
        for ty in (0..16).filter(|t| *t != SOCK_STREAM) {
            s.deny_args.push(ArgDeny {
                syscall: "socket".into(),
                when: vec![ArgCheck::MaskedEq {
                    arg: 1,
                    mask: 0xf,
                    value: ty,
                }],
                why: "FS-ONLY with the broker: a type other than SOCK_STREAM".into(),
            });
        }
        s.deny_args.push(ArgDeny {
            syscall: "socket".into(),
            when: vec![
                ArgCheck::Ne { arg: 2, value: 0 },
                ArgCheck::Ne {
                    arg: 2,
                    value: IPPROTO_TCP,
                },
            ],
            why: "FS-ONLY with the broker: a protocol other than TCP (MPTCP, SCTP)".into(),
        });
        for syscall in ["bind", "listen"] {
            if !s.deny.iter().any(|d| d == syscall) {
                s.deny.push(syscall.into());
            }
        }
        // The supervisor's listener is the only one: a filter of the sandbox's own with a
        // listener of its own (possible once the supervisor's is gone) could let connect()
        // continue.
        s.deny_args.push(ArgDeny {
            syscall: "seccomp".into(),
            when: vec![ArgCheck::BitsSet {
                arg: 1,
                mask: SECCOMP_FILTER_FLAG_NEW_LISTENER,
            }],
            why: "FS-ONLY with the broker: no seccomp listener but the supervisor's".into(),
        });
        for (syscall, arg) in [("sendto", 3), ("sendmsg", 2), ("sendmmsg", 3)] {
            s.deny_args.push(ArgDeny {
                syscall: syscall.into(),
                when: vec![ArgCheck::BitsSet {
                    arg,
                    mask: MSG_FASTOPEN,
                }],
                why: "FS-ONLY with the broker: TCP Fast Open connects without connect()".into(),
            });
        }
    } else if !s.deny.iter().any(|d| d == "socket") {
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
    s.deny_args.push(ArgDeny {
        syscall: "socketpair".into(),
        when: vec![ArgCheck::Ne { arg: 0, value: 1 }],
        why: "FS-ONLY: socket pairs of AF_UNIX only".into(),
    });
    // Without a PID namespace every process of the same user can be named, and Landlock's
    // scope covers signals only: the calls that act on another process by pid with a plain
    // uid check (no ptrace check) are refused unless they name the caller (0).
    for (syscall, arg) in [
        ("prlimit64", 0),
        ("setpriority", 1),
        ("ioprio_set", 1),
        ("sched_setaffinity", 0),
        ("sched_setscheduler", 0),
        ("sched_setparam", 0),
        ("sched_setattr", 0),
    ] {
        s.deny_args.push(ArgDeny {
            syscall: syscall.into(),
            when: vec![ArgCheck::Ne { arg, value: 0 }],
            why: "FS-ONLY: acts on another process (no PID namespace)".into(),
        });
    }
    // Without an IPC namespace SysV IPC and POSIX message queues are the host's, and
    // Landlock does not mediate them.
    for syscall in SYSV_AND_MQUEUE {
        if !s.deny.iter().any(|d| d == syscall) {
            s.deny.push(syscall.to_string());
        }
    }
    s
}

/// SysV IPC and POSIX message queues: the host's, in a tier without an IPC namespace.
pub const SYSV_AND_MQUEUE: &[&str] = &[
    "shmget",
    "shmat",
    "shmctl",
    "shmdt",
    "msgget",
    "msgsnd",
    "msgrcv",
    "msgctl",
    "semget",
    "semop",
    "semtimedop",
    "semctl",
    "mq_open",
    "mq_unlink",
    "mq_timedsend",
    "mq_timedreceive",
    "mq_notify",
    "mq_getsetattr",
];

/// `SOCK_STREAM`.
const SOCK_STREAM: u32 = 1;
/// `IPPROTO_TCP`.
const IPPROTO_TCP: u32 = 6;
/// `SECCOMP_FILTER_FLAG_NEW_LISTENER`.
const SECCOMP_FILTER_FLAG_NEW_LISTENER: u32 = 8;
/// `MSG_FASTOPEN`.
const MSG_FASTOPEN: u32 = 0x2000_0000;
/// `CLONE_NEWUSER` from `<linux/sched.h>`.
const CLONE_NEWUSER: u32 = 0x1000_0000;
/// `ENOSYS` (asm-generic).
const ENOSYS: i32 = 38;
