//! The `Plan`: plain data the in-container init (`hooks/`) turns into kernel state. It is
//! serialisable so `vetto policy explain` prints exactly what will be applied and golden tests
//! pin it.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// Landlock access classes. Each maps to a fixed set of Landlock rights in `hooks/`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FsAccess {
    /// Read files, list directories, execute.
    ReadExec,
    /// Everything, including remove and rename.
    ReadWrite,
    /// Create and modify, but no remove-file / remove-dir (and so no rename).
    ReadWriteNoDelete,
    /// Character devices: read, write, ioctl (`/dev/null`, `/dev/tty`, pts).
    Device,
    /// List the directory (and those beneath it) and nothing else: the FS-ONLY tier's rule
    /// for a directory on the way to a secret or a protected path ([`crate::fsonly`]).
    ListDir,
}

/// One Landlock path rule.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LandlockRule {
    /// Absolute path inside the sandbox.
    pub path: PathBuf,
    /// What is allowed beneath it.
    pub access: FsAccess,
    /// Skip the rule if the path does not exist inside (optional system dirs).
    pub optional: bool,
}

/// Landlock settings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LandlockPlan {
    /// Path rules.
    pub rules: Vec<LandlockRule>,
    /// Minimum ABI required; below it the command does not run (fail closed).
    pub min_abi: u32,
    /// On ABI ≥ 6: abstract unix sockets and signals scoped to the sandbox.
    pub scope: bool,
}

/// An ioctl request number refused by argument.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IoctlDeny {
    /// Its name.
    pub name: String,
    /// The request number (compared as a 32-bit value, as the kernel does).
    pub request: u32,
}

/// One condition on a syscall argument, compared on its low 32 bits (every argument these
/// rules look at is an `int` or `mode_t`; the kernel ignores the upper half).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "op")]
pub enum ArgCheck {
    /// `(arg & mask) == mask`: some bits are set.
    BitsSet {
        /// Argument index (0-5).
        arg: u8,
        /// The bits.
        mask: u32,
    },
    /// `arg != value`.
    Ne {
        /// Argument index (0-5).
        arg: u8,
        /// The value.
        value: u32,
    },
    /// `(arg & mask) == value`: a field of the argument has this value.
    MaskedEq {
        /// Argument index (0-5).
        arg: u8,
        /// The field's bits.
        mask: u32,
        /// The value.
        value: u32,
    },
}

/// A syscall refused (EPERM) when all of its checks hold.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArgDeny {
    /// The syscall.
    pub syscall: String,
    /// All must hold.
    pub when: Vec<ArgCheck>,
    /// Why, for `vetto policy explain`.
    pub why: String,
}

/// A syscall refused with a specific errno (so callers take their fallback path).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrnoDeny {
    /// The syscall.
    pub syscall: String,
    /// The errno returned (`libc::ENOSYS`, `libc::EOPNOTSUPP`, ...).
    pub errno: i32,
    /// Why, for `vetto policy explain`.
    pub why: String,
}

/// The seccomp deny-list.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SeccompPlan {
    /// Syscalls that return EPERM.
    pub deny: Vec<String>,
    /// ioctl requests that return EPERM.
    pub deny_ioctls: Vec<IoctlDeny>,
    /// Syscalls that return EPERM when their arguments match (a syscall listed here may have
    /// several rules: any one that holds refuses the call).
    pub deny_args: Vec<ArgDeny>,
    /// Syscalls that return another errno than EPERM.
    pub deny_errno: Vec<ErrnoDeny>,
    /// x32-ABI syscalls (nr | 0x40000000) return EPERM.
    pub deny_x32: bool,
    /// Syscalls of any other architecture (i386 `int 0x80`) return EPERM.
    pub deny_foreign_arch: bool,
}

/// How the init switches to the caller's identity.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Identity {
    /// The uid the command sees (the caller's).
    pub uid: u32,
    /// The gid the command sees.
    pub gid: u32,
}

/// What a listening socket created inside the sandbox is for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "kind")]
pub enum ListenerRole {
    /// The HTTP CONNECT proxy.
    HttpProxy,
    /// The SOCKS5 proxy.
    Socks5,
    /// Relayed to this address on the host's loopback.
    HostPort {
        /// `127.0.0.1:5432`
        target: String,
    },
}

/// One loopback listener the init creates in the sandbox's network namespace and hands to
/// the broker (which accepts on it directly: no copy through the supervisor).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Listener {
    /// Port on the sandbox's 127.0.0.1.
    pub port: u16,
    /// What it is for.
    pub role: ListenerRole,
}

/// What the host-side broker enforces (plain data; the broker crate validates it again).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BrokerPlan {
    /// Allowlist entries.
    pub allow: Vec<String>,
    /// CIDRs that may be dialled although non-public.
    pub allow_cidrs: Vec<String>,
    /// Strict mode: no IP literals, no port 80, never asks.
    pub strict: bool,
    /// DNS server to ask instead of the system resolver.
    pub resolver: Option<String>,
    /// New connections per destination per minute.
    pub connects_per_minute: u32,
    /// Concurrent connections.
    pub max_connections: u32,
    /// Destinations always refused (`network.deny`).
    pub deny: Vec<String>,
    /// Whether an unlisted name may be held for a person's answer (`approvals.mode = "ask"`
    /// and not strict mode); the broker still parks it when nobody can answer.
    pub ask: bool,
    /// How long a held connection waits for the answer.
    pub approval_timeout_secs: u64,
}

/// The sandbox's network.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetPlan {
    /// Loopback listeners to create inside (empty: network off).
    pub listeners: Vec<Listener>,
    /// The broker, when any listener exists.
    pub broker: Option<BrokerPlan>,
    /// Sandbox loopback ports published on the host's 127.0.0.1 (the init then also hands
    /// over its network namespace, for the broker to dial into).
    pub publish: Vec<u16>,
}

/// Port of the HTTP proxy inside the sandbox.
pub const HTTP_PROXY_PORT: u16 = 3128;
/// Port of the SOCKS5 proxy inside the sandbox.
pub const SOCKS_PORT: u16 = 1080;

/// What the init mounts at one path (see [`InitMount`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum InitMountKind {
    /// Nothing mounted: review mode's project must be the overlay vetto asked for, whose root
    /// shows the inode of the change set's upper layer (`ino`) on the overlay's device. A
    /// project that is anything else (an overlay that failed to mount, another layer) stops
    /// the command.
    Overlay,
    /// The directory bound onto itself, writable: a mount point cannot be renamed or removed,
    /// so what is protected beneath it cannot be carried away.
    Pin,
    /// The file or directory bound onto itself read-only (recursively), `nosuid,nodev`.
    ReadOnly,
    /// `/dev/null` bound over a secret file, read-only.
    MaskFile,
    /// An empty, read-only, mode-000 tmpfs over a secret directory.
    MaskDir,
    /// Nothing mounted: the object (a symlink with a secret's name) must still be the one the
    /// scan found, or the command does not run.
    Verify,
}

/// A mount the init makes itself, before Landlock, on the exact object the host-side scan
/// found: it opens the path one component at a time without following symlinks, checks the
/// (device, inode) pair the scan recorded, mounts onto that descriptor, and checks the result.
/// A concurrent rename therefore cannot move a mask or a protection onto another file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InitMount {
    /// Absolute path inside the sandbox.
    pub path: PathBuf,
    /// What is mounted there.
    pub kind: InitMountKind,
    /// `st_dev` of the object found on the host.
    pub dev: u64,
    /// `st_ino` of the object found on the host.
    pub ino: u64,
    /// The object lies in review mode's overlay of the project, mounted here: overlayfs shows
    /// the project's inode numbers (the layers share one file system, which `vetto run`
    /// checks) under its own device, so the init expects `ino` on the overlay's device, after
    /// checking that this path is an overlay.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overlay: Option<PathBuf>,
}

/// What the in-container init does.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Plan {
    /// Format version.
    pub version: u32,
    /// Masks and protections, in order (parents first).
    #[serde(default)]
    pub mounts: Vec<InitMount>,
    /// Landlock rules.
    pub landlock: LandlockPlan,
    /// Seccomp deny-list.
    pub seccomp: SeccompPlan,
    /// Bring `lo` up.
    pub loopback_up: bool,
    /// Listeners for the broker.
    pub network: NetPlan,
    /// Identity switch.
    pub identity: Identity,
    /// Wall-clock limit in seconds (enforced by the supervisor).
    pub wall_clock_secs: Option<u64>,
}

/// The seccomp deny-list every vetto sandbox gets.
pub fn default_seccomp() -> SeccompPlan {
    let deny = [
        "ptrace",
        "process_vm_readv",
        "process_vm_writev",
        "pidfd_getfd",
        "io_uring_setup",
        "io_uring_enter",
        "io_uring_register",
        "userfaultfd",
        "mount",
        "umount2",
        "fsopen",
        "fsconfig",
        "fsmount",
        "fspick",
        "move_mount",
        "open_tree",
        "open_tree_attr",
        "mount_setattr",
        "pivot_root",
        "init_module",
        "finit_module",
        "delete_module",
        "kexec_load",
        "kexec_file_load",
        "bpf",
        "perf_event_open",
        "reboot",
        "swapon",
        "swapoff",
        "keyctl",
        "add_key",
        "request_key",
    ];
    SeccompPlan {
        deny: deny.iter().map(|s| s.to_string()).collect(),
        deny_args: setid_mode_rules()
            .into_iter()
            .chain(std::iter::once(socket_family_rule()))
            .collect(),
        deny_errno: vec![
            ErrnoDeny {
                syscall: "openat2".into(),
                errno: ENOSYS,
                why: "its mode lives in a struct seccomp cannot read (setuid files); callers fall back to openat".into(),
            },
        ]
        .into_iter()
        .chain(SETXATTR.iter().map(|s| ErrnoDeny {
            syscall: s.to_string(),
            errno: EOPNOTSUPP,
            why: "extended attributes cannot be set (security.capability would plant file capabilities)".into(),
        }))
        .collect(),
        deny_ioctls: vec![
            IoctlDeny {
                name: "TIOCSTI".into(),
                request: 0x5412,
            },
            IoctlDeny {
                name: "TIOCLINUX".into(),
                request: 0x541C,
            },
        ],
        deny_x32: true,
        deny_foreign_arch: true,
    }
}

// Linux errno values (asm-generic; the same on x86_64 and aarch64). Plain numbers keep this
// crate free of libc in the plan.
const ENOSYS: i32 = 38;
const EOPNOTSUPP: i32 = 95;

/// Mode bits that make an executable run with its owner's or group's identity.
pub const S_ISUID: u32 = 0o4000;
/// See [`S_ISUID`].
pub const S_ISGID: u32 = 0o2000;

/// Every syscall that sets extended attributes.
pub const SETXATTR: &[&str] = &["setxattr", "lsetxattr", "fsetxattr", "setxattrat"];

/// Every syscall that takes a file mode, with the index of the mode argument: no file the
/// sandbox creates or changes may get the setuid or setgid bit (a root caller's sandbox would
/// otherwise leave a root setuid binary on the host). `openat2` carries its mode in a struct
/// and is refused whole (see `deny_errno`).
pub const MODE_ARGS: &[(&str, u8)] = &[
    ("chmod", 1),
    ("fchmod", 1),
    ("fchmodat", 2),
    ("fchmodat2", 2),
    ("open", 2),
    ("openat", 3),
    ("creat", 1),
    ("mkdir", 1),
    ("mkdirat", 2),
    ("mknod", 1),
    ("mknodat", 2),
];

fn setid_mode_rules() -> Vec<ArgDeny> {
    let mut v = vec![];
    for (sys, arg) in MODE_ARGS {
        for (bit, name) in [(S_ISUID, "setuid"), (S_ISGID, "setgid")] {
            v.push(ArgDeny {
                syscall: sys.to_string(),
                when: vec![ArgCheck::BitsSet {
                    arg: *arg,
                    mask: bit,
                }],
                why: format!("a mode with the {name} bit"),
            });
        }
    }
    v
}

/// Socket families the sandbox may create: unix, inet, inet6, netlink. Every other family
/// (AF_VSOCK reaches the hypervisor's host, AF_PACKET, AF_BLUETOOTH, ...) is refused.
pub const SOCKET_FAMILIES: &[(&str, u32)] = &[
    ("AF_UNIX", 1),
    ("AF_INET", 2),
    ("AF_INET6", 10),
    ("AF_NETLINK", 16),
];

fn socket_family_rule() -> ArgDeny {
    ArgDeny {
        syscall: "socket".into(),
        when: SOCKET_FAMILIES
            .iter()
            .map(|(_, f)| ArgCheck::Ne { arg: 0, value: *f })
            .collect(),
        why: format!(
            "a family other than {}",
            SOCKET_FAMILIES
                .iter()
                .map(|(n, _)| *n)
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}
