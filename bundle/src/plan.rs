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

/// The seccomp deny-list.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SeccompPlan {
    /// Syscalls that return EPERM.
    pub deny: Vec<String>,
    /// ioctl requests that return EPERM.
    pub deny_ioctls: Vec<IoctlDeny>,
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

/// What the in-container init does.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Plan {
    /// Format version.
    pub version: u32,
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
