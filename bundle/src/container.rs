//! Hardening a foreign OCI bundle (Docker's, Podman's, containerd's) with a vetto policy, for
//! `vetto-shim`.
//!
//! The caller's `config.json` stays as it is; [`harden`] edits a copy (plain JSON, so fields
//! this crate does not model survive) and returns the [`ContainerPlan`] the container's init
//! applies right before `execve`:
//!
//! - refused outright, every reason named at once: privileged capabilities, "all devices"
//!   cgroup rules, the host's network or PID namespace, a bind of a container daemon's socket
//!   (or of a directory holding one), a bind of the host's `/`, `/proc`, `/sys` or `/dev`;
//! - `no_new_privs` on, environment filtered (the policy's `never_passes` names are dropped
//!   unless `pass_through` names them; `set` is applied);
//! - secrets found (by the policy's patterns) inside bind-mounted host directories are masked
//!   at the matching path inside: `/dev/null` over files (not `nodev`: it must read empty), an empty read-only tmpfs over
//!   directories; the policy's `protected` paths inside writable binds are bound read-only;
//! - Landlock: everything readable and executable; writable only beneath mounts the bundle
//!   mounts writable — tmpfs always, host binds as the policy's `project` access says — and
//!   `/dev` for device I/O. The image's root filesystem is never writable;
//! - vetto's seccomp deny-list, stacked on the bundle's own profile.

use std::path::{Component, Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::error::{PolicyError, TranslateError};
use crate::gitmeta;
use crate::host::{self, canonical_beyond};
use crate::plan::{FsAccess, LandlockPlan, LandlockRule, NetPlan, SeccompPlan};
use crate::policy::ProjectAccess;
use crate::resolve::{self, Inputs, Policy, TrustContext};
use crate::secrets::{self, MaskKind};
use crate::translate::{environment, landlock, masks, network, seccomp};
use crate::trust::TrustStore;

pub use crate::host::ResolvedSource;
pub use crate::translate::mounts::PROC_READONLY;

/// The annotation that selects a policy for one container.
pub const POLICY_ANNOTATION: &str = "dev.vetto.policy";

/// Annotation value meaning "no hardening" (allowed only when the host does not require it).
pub const NO_POLICY: &str = "none";

/// Capabilities that make a container privileged: refused under any policy.
pub const PRIVILEGED_CAPS: &[&str] = &[
    "CAP_SYS_ADMIN",
    "CAP_SYS_MODULE",
    "CAP_SYS_RAWIO",
    "CAP_SYS_PTRACE",
    "CAP_SYS_BOOT",
    "CAP_SYS_TIME",
    "CAP_DAC_READ_SEARCH",
    "CAP_BPF",
    "CAP_PERFMON",
    "CAP_MAC_ADMIN",
    "CAP_MAC_OVERRIDE",
    "CAP_SYSLOG",
];

/// Sockets of container daemons: whoever can reach one is root on the host.
pub const DAEMON_SOCKETS: &[&str] = &[
    "docker.sock",
    "containerd.sock",
    "podman.sock",
    "crio.sock",
    "buildkitd.sock",
    "dockershim.sock",
];

/// Why a bundle cannot be hardened.
#[derive(Debug, thiserror::Error)]
pub enum ContainerError {
    /// The bundle's `config.json` does not have the expected shape.
    #[error("config.json: {0}")]
    Malformed(String),
    /// The bundle asks for what the policy forbids.
    #[error("refused by vetto policy \"{policy}\": {}", reasons.join("; "))]
    Refused {
        /// The policy's name or path.
        policy: String,
        /// Every reason.
        reasons: Vec<String>,
    },
    /// The policy could not be loaded.
    #[error(transparent)]
    Policy(#[from] PolicyError),
    /// Scanning for secrets failed.
    #[error(transparent)]
    Translate(#[from] TranslateError),
}

/// One mask added over a secret.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mask {
    /// Path inside the container.
    pub path: PathBuf,
    /// File or directory.
    pub kind: MaskKind,
    /// The host path it hides.
    pub host: PathBuf,
}

/// What the init applies in a hardened container (and in every process `exec`'d into it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContainerPlan {
    /// The policy's name or path.
    pub policy: String,
    /// Landlock rules.
    pub landlock: LandlockPlan,
    /// vetto's seccomp deny-list.
    pub seccomp: SeccompPlan,
    /// Secrets masked.
    pub masks: Vec<Mask>,
    /// Environment variables removed.
    pub env_removed: Vec<String>,
    /// The container's network namespace may hold nothing but `lo`: every vetto network mode
    /// keeps the sandbox off the network (the broker is reached on `lo`).
    pub loopback_only: bool,
    /// The broker's listeners and plan, when the policy's network is not off.
    #[serde(default)]
    pub network: Option<NetPlan>,
    /// Environment variables the policy sets (`set`, the broker's proxy variables), also for
    /// every `exec`.
    #[serde(default)]
    pub env_set: Vec<String>,
    /// Names the policy lets through although they look secret.
    #[serde(default)]
    pub pass_through: Vec<String>,
    /// What each host bind was when checked: the init compares, after the mounts, so a path
    /// swapped during `create` fails it.
    #[serde(default)]
    pub binds: Vec<BindCheck>,
}

/// A directory mounted at `path` must be the host directory (`dev`, `ino`) that was checked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BindCheck {
    /// Path inside the container.
    pub path: PathBuf,
    /// Device of the checked host file or directory.
    pub dev: u64,
    /// Inode of the checked host file or directory.
    pub ino: u64,
}

/// Character devices a hardened container may use: null, zero, full, random, urandom, tty,
/// console, ptmx, the pts, fuse, tun, and GPUs (NVIDIA 195, DRI 226). `None`: any minor.
pub const ALLOWED_CHAR_DEVICES: &[(i64, Option<i64>)] = &[
    (1, Some(3)),
    (1, Some(5)),
    (1, Some(7)),
    (1, Some(8)),
    (1, Some(9)),
    (5, Some(0)),
    (5, Some(1)),
    (5, Some(2)),
    (136, None),
    (10, Some(229)),
    (10, Some(200)),
    (195, None),
    (226, None),
];

fn char_device_allowed(major: Option<i64>, minor: Option<i64>) -> bool {
    let (Some(major), minor) = (major.filter(|m| *m >= 0), minor.filter(|m| *m >= 0)) else {
        return false;
    };
    ALLOWED_CHAR_DEVICES
        .iter()
        .any(|&(ma, mi)| ma == major && (mi.is_none() || (minor.is_some() && mi == minor)))
}

/// Rewrites `process.capabilities` as libcontainer will read it (oci-spec accepts
/// `sys_admin`, `SYS_ADMIN`, `CAP_CAP_SYS_ADMIN` alike), so checks compare canonical names.
pub fn canonical_capabilities(process: &mut Value) -> Result<(), ContainerError> {
    if let Some(caps) = process.get_mut("capabilities") {
        let parsed: oci_spec::runtime::LinuxCapabilities = serde_json::from_value(caps.clone())
            .map_err(|e| ContainerError::Malformed(format!("process.capabilities: {e}")))?;
        *caps = serde_json::to_value(parsed)
            .map_err(|e| ContainerError::Malformed(format!("process.capabilities: {e}")))?;
        // oci-spec keeps sets in hash sets: sorted, the result is the same every time.
        if let Some(sets) = caps.as_object_mut() {
            for set in sets.values_mut() {
                if let Some(a) = set.as_array_mut() {
                    a.sort_by(|x, y| x.as_str().cmp(&y.as_str()));
                }
            }
        }
    }
    Ok(())
}

/// What every process of a hardened container gets, the init's and each `exec`'s: canonical
/// capability names, no privileged capability (and a capabilities object at all: without one
/// libcontainer keeps every capability), no CAP_MKNOD, `no_new_privs`, the environment
/// filtered and the policy's variables set. Returns the names removed from the environment.
pub fn harden_process(
    process: &mut Value,
    policy_name: &str,
    pass_through: &[String],
    env_set: &[String],
) -> Result<Vec<String>, ContainerError> {
    if !process.is_object() {
        return Err(ContainerError::Malformed(
            "`process` is not an object".into(),
        ));
    }
    canonical_capabilities(process)?;
    let refused = |reason: String| ContainerError::Refused {
        policy: policy_name.to_string(),
        reasons: vec![reason],
    };
    if process.get("capabilities").is_none() {
        return Err(refused(
            "a process with no capabilities object (it would keep every capability)".into(),
        ));
    }
    let held = privileged_caps(process.get("capabilities"));
    if !held.is_empty() {
        return Err(refused(format!(
            "a privileged process (capabilities {})",
            held.join(", ")
        )));
    }
    if let Some(caps) = process
        .get_mut("capabilities")
        .and_then(Value::as_object_mut)
    {
        for set in caps.values_mut() {
            if let Some(a) = set.as_array_mut() {
                a.retain(|c| c != "CAP_MKNOD");
            }
        }
    }
    process["noNewPrivileges"] = Value::Bool(true);
    let (env, removed) =
        environment::filter_image_env(strs(process.get("env")), pass_through, env_set);
    process["env"] = json!(env);
    Ok(removed)
}

/// Resolve a policy the host controls: a built-in profile name, or an absolute path to a
/// policy file. There is no project, so the trust handoff rule has nothing to guard.
pub fn resolve_host_policy(selector: &str) -> Result<Policy, PolicyError> {
    let inputs = if selector.starts_with('/') {
        Inputs {
            policy_file: Some(PathBuf::from(selector)),
            ..Inputs::default()
        }
    } else {
        if crate::profiles::text(selector).is_none() {
            return Err(PolicyError::UnknownProfile(selector.to_string()));
        }
        Inputs {
            profile_flag: Some(selector.to_string()),
            ..Inputs::default()
        }
    };
    // A project path no file can lie in.
    let nowhere = Path::new("/\0vetto-shim-has-no-project");
    let store = TrustStore::empty(PathBuf::new());
    resolve::resolve(
        &inputs,
        &TrustContext {
            project: nowhere,
            home: nowhere,
            store: &store,
        },
    )
}

fn strs(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// The elements of the JSON array at `pointer` (none if absent or not an array).
fn items<'a>(v: &'a Value, pointer: &str) -> impl Iterator<Item = &'a Value> {
    v.pointer(pointer)
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
}

fn is_bind(m: &Value) -> bool {
    m.get("type").and_then(Value::as_str) == Some("bind")
        || strs(m.get("options"))
            .iter()
            .any(|o| o == "bind" || o == "rbind")
}

fn is_readonly(m: &Value) -> bool {
    strs(m.get("options")).iter().any(|o| o == "ro")
}

fn beneath(path: &str, dir: &str) -> bool {
    Path::new(path).starts_with(dir)
}

/// Where container daemons keep their API sockets. A bind of one of these, or of any
/// directory above one, hands the container the host.
pub const DAEMON_SOCKET_PATHS: &[&str] = &[
    "/run/docker.sock",
    "/var/run/docker.sock",
    "/run/containerd/containerd.sock",
    "/run/containerd/containerd.sock.ttrpc",
    "/run/containerd/s",
    "/run/podman/podman.sock",
    "/run/crio/crio.sock",
    "/run/buildkit/buildkitd.sock",
    "/run/docker/containerd/containerd.sock",
];

/// Host system directories (binaries, libraries, configuration): a hardened container may
/// not get any of them, or anything in them, writable.
pub const SYSTEM_DIRS: &[&str] = &[
    "/etc", "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32",
];

/// The engines' own state: a hardened container may not get one of these, or a directory
/// above one, writable. What the engines put *inside* them for a container (its `/etc/hosts`,
/// `/dev/shm`, Kubernetes volumes) is fine.
pub const ENGINE_STATE_DIRS: &[&str] = &[
    "/run",
    "/var/run",
    "/var/lib/docker",
    "/var/lib/containerd",
    "/var/lib/containers",
    "/var/lib/kubelet",
    "/var/lib/rancher",
];

/// Where rootless engines keep their sockets, beneath each user's runtime directory.
const PER_USER_SOCKETS: &[&str] = &[
    "docker.sock",
    "podman/podman.sock",
    "containerd/containerd.sock",
];

/// The users' runtime directories: a bind of this directory (or of what holds it) holds every
/// rootless engine's socket, of the users logged in now and of those to come.
const USER_RUNTIME_ROOT: &str = "/run/user";

/// Where daemon sockets are or would be, canonical (judged where they would be: a bind of a
/// directory an engine will put its socket in is refused before the engine starts): the
/// well-known paths, and beneath each user's runtime directory there is now. Those that
/// exist come first, so a refusal names a socket that is there when there is one.
fn daemon_socket_places() -> Vec<PathBuf> {
    let users = host::user_runtime_dirs(Path::new(USER_RUNTIME_ROOT));
    let (mut there, absent): (Vec<PathBuf>, Vec<PathBuf>) = DAEMON_SOCKET_PATHS
        .iter()
        .map(PathBuf::from)
        .chain(
            users
                .iter()
                .flat_map(|u| PER_USER_SOCKETS.iter().map(move |rel| u.join(rel))),
        )
        .chain([PathBuf::from("/run/k3s/containerd/containerd.sock")])
        .filter_map(|p| canonical_beyond(&p).ok())
        .partition(|p| p.symlink_metadata().is_ok());
    there.extend(absent);
    there
}

/// Mount types a hardened container may have besides binds.
pub const ALLOWED_MOUNT_TYPES: &[&str] = &[
    "proc", "sysfs", "tmpfs", "devpts", "mqueue", "cgroup", "cgroup2", "bind", "none",
];

/// Where a kernel filesystem type may be mounted in a hardened container (`None`: not a
/// kernel filesystem with host-reaching files).
fn kernel_fs_place(ty: &str) -> Option<&'static str> {
    match ty {
        "proc" => Some("/proc"),
        "sysfs" => Some("/sys"),
        "cgroup" | "cgroup2" => Some("/sys/fs/cgroup"),
        "mqueue" => Some("/dev/mqueue"),
        "devpts" => Some("/dev/pts"),
        _ => None,
    }
}

/// Everything in the bundle that no policy allows. Paths are judged by what they resolve
/// to on the host (symlinks, `..`), as libcontainer will resolve them.
pub fn refusals(spec: &Value) -> Vec<String> {
    refusals_for(spec, &OwnPlaces::default())
}

/// The runtime's own places on this host, judged with the well-known ones.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OwnPlaces {
    /// This runtime's state root(s) (wherever `--root` puts them): nothing in them, nor a
    /// directory holding them, may be bound writable.
    pub state_roots: Vec<PathBuf>,
    /// Directories no container may see at all, with what each is (e.g. "the audit store"):
    /// neither they, nor anything in them, nor a directory holding them may be bound, even
    /// read-only.
    pub sealed: Vec<(PathBuf, String)>,
}

/// Runtimes' state: a container's `state.json` names the pid that `exec` joins and `kill`
/// signals, and vetto-shim's record holds its Landlock plan. Nothing in these may be bound
/// writable, nor a directory holding one.
pub const RUNTIME_STATE_DIRS: &[&str] = &[
    "/run/vetto-shim",
    "/run/runc",
    "/run/crun",
    "/run/youki",
    "/run/containerd/runc",
    "/run/docker/runtime-runc",
    "/run/dbus",
    "/run/systemd",
];

/// Engines' state (besides [`ENGINE_STATE_DIRS`]' holders): inside these only the files and
/// directories an engine makes *for one container* may be bound writable (see
/// [`engine_artifact`]); anything else there is another container's or the engine's own.
pub const ENGINE_INSIDE_DIRS: &[&str] = &[
    "/var/lib/docker",
    "/var/lib/containerd",
    "/var/lib/containers",
    "/var/lib/kubelet",
    "/var/lib/rancher",
    "/run/containerd",
    "/run/containers",
    "/run/libpod",
    "/run/docker",
];

/// Is `rel` (a path inside an engine's state directory) something the engine made for one
/// container, that the container may get writable? Recognised by shape:
/// - `…/<container id>/…/{hosts,hostname,resolv.conf,.containerenv,shm,secrets}`: the files
///   Docker, Podman and containerd's CRI bind into a container (`/etc/hosts`, `/dev/shm`, …),
///   under a directory named by a 64-hex-digit id;
/// - `volumes/<name>/_data` and beneath: Docker and Podman named volumes;
/// - `pods/<uid>/{volumes,volume-subpaths,containers,etc-hosts}…`: kubelet's pod volumes, and
///   its per-container termination-log files and hosts file.
pub fn engine_artifact(rel: &Path) -> bool {
    let c: Vec<&str> = rel
        .components()
        .filter_map(|c| match c {
            Component::Normal(n) => n.to_str(),
            _ => None,
        })
        .collect();
    let hex_id = |s: &str| s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit());
    if let Some(i) = c.iter().position(|s| *s == "volumes") {
        if c.get(i + 2) == Some(&"_data") {
            return true;
        }
    }
    if c.first() == Some(&"pods")
        && c.len() >= 3
        && matches!(
            c[2],
            "volumes" | "volume-subpaths" | "containers" | "etc-hosts"
        )
    {
        return true;
    }
    matches!(
        c.last(),
        Some(&("hosts" | "hostname" | "resolv.conf" | ".containerenv" | "shm" | "secrets"))
    ) && c.iter().any(|s| hex_id(s))
}

/// Resolve a bind's source once ([`host::resolve_once`]). `None`: it does not resolve (or
/// kept changing).
pub fn resolve_source(m: &Value) -> Option<ResolvedSource> {
    host::resolve_once(Path::new(m.get("source").and_then(Value::as_str)?))
}

/// Every mount's source resolved once ([`resolve_source`]; `None` for non-binds).
pub fn resolve_sources(spec: &Value) -> Vec<Option<ResolvedSource>> {
    items(spec, "/mounts")
        .map(|m| if is_bind(m) { resolve_source(m) } else { None })
        .collect()
}

/// [`refusals`], with this runtime's own places (state roots, sealed directories) judged
/// like the well-known ones.
pub fn refusals_for(spec: &Value, own: &OwnPlaces) -> Vec<String> {
    refusals_resolved(spec, own, &resolve_sources(spec))
}

/// [`refusals_for`] on sources already resolved (index-aligned with `mounts`): the paths
/// judged are the paths that are then mounted and checked by inode in the init.
pub fn refusals_resolved(
    spec: &Value,
    own: &OwnPlaces,
    resolved: &[Option<ResolvedSource>],
) -> Vec<String> {
    let mut out = vec![];
    // Judge capabilities as libcontainer will read them.
    let mut process = spec.get("process").cloned().unwrap_or(Value::Null);
    if let Err(e) = canonical_capabilities(&mut process) {
        out.push(e.to_string());
    }
    let caps = process.get("capabilities");
    if caps.is_none() {
        out.push("a process with no capabilities object (it would keep every capability)".into());
    }
    let held = privileged_caps(caps);
    if !held.is_empty() {
        out.push(format!(
            "a privileged container (capabilities {})",
            held.join(", ")
        ));
    }
    // Devices: cgroup rules that grant read or write beyond the allowed character devices,
    // and device nodes other than those (mknod-only rules are harmless: CAP_MKNOD is dropped).
    let num = |d: &Value, k: &str| d.get(k).and_then(Value::as_i64);
    for d in items(spec, "/linux/resources/devices") {
        let allow = d.get("allow").and_then(Value::as_bool) == Some(true);
        let access = d.get("access").and_then(Value::as_str).unwrap_or("rwm");
        if !allow || !(access.contains('r') || access.contains('w')) {
            continue;
        }
        let ty = d.get("type").and_then(Value::as_str).unwrap_or("a");
        if ty != "c" || !char_device_allowed(num(d, "major"), num(d, "minor")) {
            out.push(format!(
                "a privileged container (cgroup device rule allowing {ty} {}:{} {access})",
                num(d, "major").map_or("*".into(), |m| m.to_string()),
                num(d, "minor").map_or("*".into(), |m| m.to_string()),
            ));
        }
    }
    for d in items(spec, "/linux/devices") {
        let path = d.get("path").and_then(Value::as_str).unwrap_or("?");
        let ty = d.get("type").and_then(Value::as_str).unwrap_or("");
        if ty != "c" || !char_device_allowed(num(d, "major"), num(d, "minor")) {
            out.push(format!("access to the host device {path}"));
        }
    }
    // Namespaces: each kind once, new or joined, never the host's (by inode, whatever the
    // path says).
    let ns: Vec<&Value> = items(spec, "/linux/namespaces").collect();
    for (kind, file, what) in [
        ("network", "net", "network"),
        ("pid", "pid", "PID"),
        ("mount", "mnt", "mount"),
        ("ipc", "ipc", "IPC"),
        ("uts", "uts", "UTS"),
    ] {
        let of_kind: Vec<&&Value> = ns
            .iter()
            .filter(|n| n.get("type").and_then(Value::as_str) == Some(kind))
            .collect();
        match of_kind.as_slice() {
            [] if matches!(kind, "network" | "pid" | "mount") => {
                out.push(format!("the host's {what} namespace"))
            }
            [] => {}
            [n] => {
                if let Some(p) = n.get("path").and_then(Value::as_str) {
                    let id = host::ns_id(Path::new(p));
                    let host = [
                        format!("/proc/1/ns/{file}"),
                        format!("/proc/self/ns/{file}"),
                    ];
                    if id.is_none() || host.iter().any(|h| host::ns_id(Path::new(h)) == id) {
                        out.push(format!("the host's {what} namespace ({p})"));
                    }
                }
            }
            _ => out.push(format!("more than one {what} namespace entry")),
        }
    }
    // Mounts.
    let sockets = daemon_socket_places();
    let user_root = canonical_beyond(Path::new(USER_RUNTIME_ROOT)).ok();
    // A directory that does not exist (yet) is judged where it would be: a writable bind of
    // `/var` must be refused whether or not an engine has created `/var/lib/docker` so far.
    let resolve = |dirs: &[&str]| -> Vec<PathBuf> {
        dirs.iter()
            .filter_map(|p| canonical_beyond(Path::new(p)).ok())
            .collect()
    };
    let (system, engine) = (resolve(SYSTEM_DIRS), resolve(ENGINE_STATE_DIRS));
    let inside = resolve(ENGINE_INSIDE_DIRS);
    let mut runtime = resolve(RUNTIME_STATE_DIRS);
    runtime.extend(
        own.state_roots
            .iter()
            .filter_map(|r| canonical_beyond(r).ok()),
    );
    // A sealed directory that cannot be resolved is judged as written (fail closed: its
    // ancestors are still refused by name).
    let sealed: Vec<(PathBuf, &str)> = own
        .sealed
        .iter()
        .map(|(p, what)| {
            (
                canonical_beyond(p).unwrap_or_else(|_| p.clone()),
                what.as_str(),
            )
        })
        .collect();
    if let Some(p @ ("shared" | "rshared")) = spec
        .pointer("/linux/rootfsPropagation")
        .and_then(Value::as_str)
    {
        out.push(format!(
            "rootfsPropagation {p} (mounts made inside would reach the host); use private or slave"
        ));
    }
    for (i, m) in items(spec, "/mounts").enumerate() {
        let dst = m.get("destination").and_then(Value::as_str).unwrap_or("");
        if !dst.starts_with('/') {
            out.push(format!("a mount at the relative path {dst:?}"));
        } else if Path::new(dst)
            .components()
            .any(|c| matches!(c, Component::ParentDir))
        {
            out.push(format!("a mount at {dst:?}, a path with `..`"));
        }
        if !is_bind(m) {
            let ty = m.get("type").and_then(Value::as_str).unwrap_or("");
            if !ALLOWED_MOUNT_TYPES.contains(&ty) {
                out.push(format!("a {ty:?} mount at {dst}"));
            } else if let Some(place) = kernel_fs_place(ty) {
                // Anywhere else it could lie beneath a writable bind or tmpfs, whose Landlock
                // rule would cover it (`/workspace/p/sys/kernel/core_pattern`).
                let at_home = match ty {
                    "cgroup" | "cgroup2" => beneath(dst, place),
                    _ => Path::new(dst) == Path::new(place),
                };
                if !at_home {
                    out.push(format!(
                        "a {ty} mount at {dst} (kernel filesystems only at their standard place, {place})"
                    ));
                }
            }
            continue;
        }
        let src = m.get("source").and_then(Value::as_str).unwrap_or("");
        // A shared bind propagates what vetto mounts beneath it (masks, read-only protections)
        // out to the host, and the host's unmounts back in: binds must be private or slave.
        if let Some(o) = strs(m.get("options"))
            .into_iter()
            .find(|o| o == "shared" || o == "rshared")
        {
            out.push(format!(
                "a bind of {src} (at {dst}) with {o} propagation (vetto's masks would appear on the host, and a host unmount would uncover them); use private or slave"
            ));
        }
        let Some(real) = resolved.get(i).cloned().flatten().map(|r| r.path) else {
            out.push(format!(
                "a bind of {src} (at {dst}), which does not resolve"
            ));
            continue;
        };
        let shown = if Path::new(src) == real {
            src.to_string()
        } else {
            format!("{src} (= {})", real.display())
        };
        let name = real.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if DAEMON_SOCKETS.contains(&name) || sockets.iter().any(|s| s == &real) {
            out.push(format!(
                "a bind of the container daemon socket {shown} (at {dst})"
            ));
        } else if let Some(s) = sockets.iter().find(|s| s.starts_with(&real)) {
            out.push(format!(
                "a bind of {shown} (at {dst}), which holds the container daemon socket {}",
                s.display()
            ));
        } else if user_root.as_ref().is_some_and(|u| u.starts_with(&real)) {
            out.push(format!(
                "a bind of {shown} (at {dst}), which holds the users' runtime directories ({USER_RUNTIME_ROOT}: rootless container daemons' sockets)"
            ));
        } else if real.is_dir() {
            if let Some(s) = DAEMON_SOCKETS.iter().find(|s| real.join(s).exists()) {
                out.push(format!(
                    "a bind of {shown} (at {dst}), which holds the container daemon socket {s}"
                ));
            }
        }
        // Sealed (the audit store): not seen at all, read-only included.
        for (d, what) in &sealed {
            let how = if real == *d {
                "is"
            } else if real.starts_with(d) {
                "is in"
            } else if d.starts_with(&real) {
                "holds"
            } else {
                continue;
            };
            out.push(format!(
                "a bind of {shown} (at {dst}), which {how} {what} {} (no container may see it)",
                d.display()
            ));
        }
        if real == Path::new("/")
            || ["/proc", "/sys", "/dev", "/boot"]
                .iter()
                .any(|h| real.starts_with(h))
        {
            out.push(format!("a bind of the host's {shown} (at {dst})"));
        } else if !is_readonly(m) {
            // Writable: not a system directory, what is in one, or what holds one; not an
            // engine's state directory or what holds one (`/var` holds `/var/lib/docker`).
            let hit = system
                .iter()
                .find(|d| real.starts_with(d) || d.starts_with(&real))
                .or_else(|| engine.iter().find(|d| d.starts_with(&real)));
            if let Some(d) = hit {
                out.push(format!(
                    "a writable bind of {shown} (at {dst}), which is or holds the host's {}",
                    d.display()
                ));
            } else if let Some(d) = runtime
                .iter()
                .find(|d| real.starts_with(d) || d.starts_with(&real))
            {
                out.push(format!(
                    "a writable bind of {shown} (at {dst}), which is in or holds the runtime state {}",
                    d.display()
                ));
            } else if let Some(d) = inside.iter().find(|d| real.starts_with(d) && real != **d) {
                let rel = real.strip_prefix(d).unwrap_or(&real);
                if !engine_artifact(rel) {
                    out.push(format!(
                        "a writable bind of {shown} (at {dst}), inside the engine state {}: only what an engine makes for one container (hosts, hostname, resolv.conf, .containerenv, shm, secrets under a container id; volumes' _data; kubelet pod volumes) may be writable",
                        d.display()
                    ));
                }
            }
        }
    }
    out
}

/// The privileged capabilities in any set of a `capabilities` object.
pub fn privileged_caps(caps: Option<&Value>) -> Vec<String> {
    let mut held: Vec<String> = vec![];
    for set in [
        "bounding",
        "effective",
        "permitted",
        "inheritable",
        "ambient",
    ] {
        for c in strs(caps.and_then(|c| c.get(set))) {
            if PRIVILEGED_CAPS.contains(&c.as_str()) && !held.contains(&c) {
                held.push(c);
            }
        }
    }
    held.sort();
    held
}

/// Relative path with no `..` (policy paths are relative to a bind's root).
fn relative_inside(rel: &str) -> Option<PathBuf> {
    let p = Path::new(rel);
    p.components()
        .all(|c| matches!(c, Component::Normal(_) | Component::CurDir))
        .then(|| p.to_path_buf())
}

/// The `config.json` mount that masks a secret at `inside`: `/dev/null` over a file (not
/// `nodev`: it must read empty), an empty read-only mode-000 tmpfs over a directory.
fn mask_mount(inside: &Path, kind: MaskKind) -> Value {
    match kind {
        MaskKind::File => json!({
            "destination": inside, "type": "bind", "source": "/dev/null",
            "options": ["bind", "ro", "nosuid", "noexec"]
        }),
        // Not reached: links are filtered out before masks are placed; a tmpfs would be the
        // safe answer anyway.
        MaskKind::Dir | MaskKind::Link => json!({
            "destination": inside, "type": "tmpfs", "source": "tmpfs",
            "options": ["ro", "nosuid", "nodev", "noexec", "mode=000", "size=4k"]
        }),
    }
}

/// Harden `spec` (the JSON of a bundle's `config.json`) in place with `policy`.
/// `own`: this runtime's own places (its state root(s), wherever `--root` puts them, judged
/// like the runtimes' well-known ones; the directories no container may see).
pub fn harden(
    spec: &mut Value,
    policy: &Policy,
    policy_name: &str,
    home: &Path,
    own: &OwnPlaces,
) -> Result<ContainerPlan, ContainerError> {
    if !spec.is_object() {
        return Err(ContainerError::Malformed("not a JSON object".into()));
    }
    // Every bind source resolved once: what is judged is what is written back, recorded by
    // inode, and checked again in the container's init after libcontainer mounted it.
    let resolved = resolve_sources(spec);
    let mut reasons = refusals_resolved(spec, own, &resolved);
    if policy.project.value == ProjectAccess::Review {
        reasons.push(
            "filesystem.project = \"review\" is for `vetto run` (a container's binds have no change set); use read, write or write-no-delete".into(),
        );
    }
    if !reasons.is_empty() {
        return Err(ContainerError::Refused {
            policy: policy_name.to_string(),
            reasons,
        });
    }
    // The process: the policy's variables, then the same treatment as every `exec`.
    // The broker's proxy variables win over any the policy or the image set.
    let setup = network::broker_setup(policy)?;
    let env_set = environment::policy_env_list(&environment::policy_vars(policy, setup.as_ref()));
    let pass_through: Vec<String> = policy
        .pass_through
        .iter()
        .map(|s| s.value.clone())
        .collect();
    let process = spec
        .get_mut("process")
        .ok_or_else(|| ContainerError::Malformed("no `process`".into()))?;
    let env_removed = harden_process(process, policy_name, &pass_through, &env_set)?;
    // The engine publishes ports, not vetto-shim.
    let network: Option<NetPlan> = setup.map(|s| s.net_plan(vec![]));

    // Masks and protected paths beneath host binds; Landlock rules from the mounts.
    let patterns = policy.secret_patterns();
    let mut rules = vec![
        LandlockRule {
            path: "/".into(),
            access: FsAccess::ReadExec,
            optional: false,
        },
        LandlockRule {
            path: "/dev".into(),
            access: FsAccess::Device,
            optional: true,
        },
    ];
    let mounts: Vec<Value> = spec
        .get("mounts")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mut extra: Vec<Value> = vec![];
    let mut masks: Vec<Mask> = vec![];
    let mut canonical: Vec<(usize, PathBuf)> = vec![];
    let mut binds: Vec<BindCheck> = vec![];
    // Mount options rewritten: (index, options).
    let mut option_edits: Vec<(usize, Vec<String>)> = vec![];
    // `~/` patterns apply to the runtime's home and to every account's home in a bind.
    let home_patterns: Vec<_> = patterns
        .iter()
        .copied()
        .filter(|p| p.value.starts_with("~/"))
        .collect();
    let homes = host::account_homes();
    // Compiled once for every bind (each account's home on first use).
    let index = secrets::SecretIndex::new(&patterns, home)?;
    let mut home_indexes: Vec<(PathBuf, secrets::SecretIndex)> = vec![];
    // Every host bind as (canonical source, destination), for masks that one bind's scan
    // finds and another bind shows.
    // The same resolution as everything else here (`resolved`, index-aligned with `mounts`).
    let bind_pairs: Vec<(PathBuf, PathBuf)> = mounts
        .iter()
        .zip(&resolved)
        .filter_map(|(m, r)| {
            let dst = m.get("destination").and_then(Value::as_str)?;
            let r = r.as_ref()?;
            (dst.starts_with('/') && !beneath(dst, "/proc") && !beneath(dst, "/sys"))
                .then(|| (r.path.clone(), PathBuf::from(dst)))
        })
        .collect();
    for (i, m) in mounts.iter().enumerate() {
        let dst = m.get("destination").and_then(Value::as_str).unwrap_or("");
        if !dst.starts_with('/') || beneath(dst, "/proc") || beneath(dst, "/sys") {
            continue;
        }
        let writable = !is_readonly(m);
        let ty = m.get("type").and_then(Value::as_str).unwrap_or("");
        if ty == "tmpfs" && strs(m.get("options")).iter().any(|o| o == "tmpcopyup") {
            // Podman's `--tmpfs` asks for a copy of the image's directory; libcontainer has no
            // copy-up and would pass the word to tmpfs, which refuses it. The tmpfs starts
            // empty instead.
            let opts: Vec<String> = strs(m.get("options"))
                .into_iter()
                .filter(|o| o != "tmpcopyup")
                .collect();
            option_edits.push((i, opts));
        }
        if is_bind(m) {
            // No setuid file and no device node through any host bind (devices under /dev
            // are the engine's device binds); a bind the policy gives no write access is
            // mounted read-only, so metadata changes (chmod, chown, utimensat, setxattr), which
            // Landlock does not mediate, fail too, and no writable parent's rule can reach it.
            let mut opts = strs(m.get("options"));
            let no_write = policy.project.value == ProjectAccess::Read;
            for (o, want) in [
                ("nosuid", true),
                ("nodev", !beneath(dst, "/dev")),
                ("ro", writable && no_write),
            ] {
                if want && !opts.iter().any(|x| x == o) {
                    opts.retain(|x| !(o == "ro" && x == "rw"));
                    opts.push(o.to_string());
                }
            }
            if opts != strs(m.get("options")) {
                option_edits.push((i, opts));
            }
            // Resolved once (above), written back, and checked by inode in the init, for
            // files and directories alike.
            let Some(r) = resolved.get(i).cloned().flatten() else {
                continue;
            };
            let src = r.path.clone();
            // What the bind itself is: a file or directory that is, or lies in, a secret
            // (a single file of `~/.aws`, a `.env`, a symlink to one), for this user and for
            // the account whose home holds it. What it holds is scanned below.
            let mut is_secret = index.containing(&src)?;
            for h in homes.iter().filter(|h| src.starts_with(h) && *h != home) {
                if is_secret.is_none() {
                    let at = match home_indexes.iter().position(|(p, _)| p == h) {
                        Some(at) => at,
                        None => {
                            home_indexes
                                .push((h.clone(), secrets::SecretIndex::new(&home_patterns, h)?));
                            home_indexes.len() - 1
                        }
                    };
                    is_secret = home_indexes[at].1.containing(&src)?;
                }
            }
            if let Some((secret, pattern)) = is_secret {
                return Err(ContainerError::Refused {
                    policy: policy_name.to_string(),
                    reasons: vec![format!(
                        "a bind of {} (at {dst}), which is or lies in the secret {} (pattern `{pattern}`)",
                        src.display(),
                        secret.display(),
                    )],
                });
            }
            canonical.push((i, src.clone()));
            binds.push(BindCheck {
                path: dst.into(),
                dev: r.dev,
                ino: r.ino,
            });
            // A path beneath the bind that really is there (no symlink on the way).
            let real_beneath = |rel: &Path| {
                let p = src.join(rel);
                (p.canonicalize().ok().as_ref() == Some(&p)).then_some(p)
            };
            if r.dir {
                // A secret-named symlink's target is masked like any secret; the link itself
                // is checked by `vetto run`'s init only (libcontainer mounts by path). The same
                // walk finds every repository's `.git` entry in the bind.
                let scan = secrets::scan_project(&patterns, home, &src, true)?;
                let git_entries = scan.git_entries;
                let mut found = scan.secrets;
                found.retain(|f| f.kind != MaskKind::Link);
                // Accounts' homes inside the bind, and the one the bind lies in (a bind of
                // another account's `~/.aws`).
                for h in homes
                    .iter()
                    .filter(|h| (h.starts_with(&src) || src.starts_with(h)) && *h != home)
                {
                    for f in secrets::scan(&home_patterns, h, h)? {
                        if f.kind != MaskKind::Link && !found.iter().any(|x| x.path == f.path) {
                            found.push(f);
                        }
                    }
                }
                if let Some(found) = found.iter().find(|f| src.starts_with(&f.path)) {
                    return Err(ContainerError::Refused {
                        policy: policy_name.to_string(),
                        reasons: vec![format!(
                            "a bind of {} (at {dst}), which is or lies in the secret {} (pattern `{}`)",
                            src.display(),
                            found.path.display(),
                            found.pattern
                        )],
                    });
                }
                // Masked wherever a bind shows it: a `.env` that links into another bind's
                // tree masks the target there too.
                let taken: Vec<PathBuf> = masks.iter().map(|m| m.path.clone()).collect();
                for (inside, k) in masks::mask_places(&found, &bind_pairs, &taken) {
                    let Some(f) = found.get(k) else { continue };
                    extra.push(mask_mount(&inside, f.kind));
                    masks.push(Mask {
                        path: inside,
                        kind: f.kind,
                        host: f.path.clone(),
                    });
                }
                if writable && policy.project.value != ProjectAccess::Read {
                    // Git metadata is read-only whatever `protected` says, as in `vetto run`:
                    // every repository in the bind (submodules' gitlinks and separate git
                    // directories, nested repositories), the git and common directories they
                    // name, and what their configuration makes git read or run (included
                    // config files, `core.hooksPath`), where this bind shows them (a writable
                    // bind's own walk covers its own repositories). Parents first, each
                    // destination once.
                    let mut git: Vec<PathBuf> = vec![];
                    for g in &git_entries {
                        git.extend(gitmeta::metadata_paths(g));
                        git.extend(gitmeta::config_references(g).0);
                    }
                    git.sort();
                    git.dedup();
                    // Only objects that are what their path says: a bind of a symlink would
                    // show its target (perhaps outside every bind) at that place.
                    git.retain(|p| p.canonicalize().ok().as_ref() == Some(p));
                    for host in &git {
                        let Some(inside) = masks::shown_at(host, &src, Path::new(dst)) else {
                            continue;
                        };
                        if !extra.iter().any(|m| m["destination"] == json!(inside)) {
                            extra.push(json!({
                                "destination": inside, "type": "bind",
                                "source": host, "options": ["rbind", "ro"]
                            }));
                        }
                    }
                    for p in &policy.protected {
                        let Some(rel) = relative_inside(&p.value) else {
                            continue;
                        };
                        if let Some(host) = real_beneath(&rel) {
                            let inside = Path::new(dst).join(&rel);
                            if !extra.iter().any(|m| m["destination"] == json!(inside)) {
                                extra.push(json!({
                                    "destination": inside, "type": "bind",
                                    "source": host, "options": ["rbind", "ro"]
                                }));
                            }
                        }
                    }
                }
            }
            if writable {
                if let Some(access) = landlock::write_access(policy.project.value) {
                    rules.push(LandlockRule {
                        path: dst.into(),
                        access,
                        optional: false,
                    });
                    if access == FsAccess::ReadWriteNoDelete {
                        for s in &policy.scratch {
                            let rel = relative_inside(&s.value);
                            if let Some(rel) = rel.filter(|r| real_beneath(r).is_some()) {
                                rules.push(LandlockRule {
                                    path: Path::new(dst).join(rel),
                                    access: FsAccess::ReadWrite,
                                    optional: true,
                                });
                            }
                        }
                    }
                }
            }
        } else if ty == "tmpfs" && writable && dst != "/dev" {
            rules.push(LandlockRule {
                path: dst.into(),
                access: FsAccess::ReadWrite,
                optional: false,
            });
        }
    }
    // Landlock rights add up down the tree: a no-delete bind beneath a fully writable tmpfs
    // or bind would get delete and rename from its parent's rule. (A bind with no write access
    // is mounted read-only above, so no parent can hand it writes.)
    let mut inherited = vec![];
    for r in rules
        .iter()
        .filter(|r| r.access == FsAccess::ReadWriteNoDelete)
    {
        if let Some(parent) = rules.iter().find(|p| {
            p.access == FsAccess::ReadWrite && r.path != p.path && r.path.starts_with(&p.path)
        }) {
            inherited.push(format!(
                "a write-no-delete bind at {} beneath the fully writable {} (it would inherit delete and rename; mount it elsewhere)",
                r.path.display(),
                parent.path.display()
            ));
        }
    }
    if !inherited.is_empty() {
        return Err(ContainerError::Refused {
            policy: policy_name.to_string(),
            reasons: inherited,
        });
    }
    // The image's root filesystem is read-only: Landlock already refuses writing to it, and
    // this refuses the metadata changes Landlock does not see.
    if let Some(root) = spec.get_mut("root").and_then(Value::as_object_mut) {
        root.insert("readonly".into(), json!(true));
    }
    // /proc/sys and friends stay read-only wherever the bundle's own list stops.
    if let Some(linux) = spec.get_mut("linux").and_then(Value::as_object_mut) {
        let list = linux.entry("readonlyPaths").or_insert_with(|| json!([]));
        if let Some(arr) = list.as_array_mut() {
            for p in PROC_READONLY {
                if !arr.iter().any(|x| x.as_str() == Some(p)) {
                    arr.push(json!(p));
                }
            }
        }
    }
    // A bind whose destination a mask covers shows the mask, not the bind: nothing to check.
    binds.retain(|b| !masks.iter().any(|m| m.path == b.path));
    if let Some(arr) = spec.get_mut("mounts").and_then(Value::as_array_mut) {
        for (i, opts) in option_edits {
            if let Some(m) = arr.get_mut(i) {
                m["options"] = json!(opts);
            }
        }
        for (i, src) in canonical {
            if let Some(m) = arr.get_mut(i) {
                m["source"] = json!(src);
            }
        }
        arr.extend(extra);
    } else if !extra.is_empty() {
        spec["mounts"] = Value::Array(extra);
    }

    Ok(ContainerPlan {
        policy: policy_name.to_string(),
        landlock: LandlockPlan {
            rules,
            min_abi: 1,
            // No scoping: each `exec` gets a Landlock domain of its own, a sibling of the
            // init's, and scoping would stop `exec kill -HUP 1` and abstract sockets between
            // them. The container's own PID and network namespaces (required) already keep
            // signals and abstract sockets inside.
            scope: false,
        },
        seccomp: seccomp::plan(),
        masks,
        env_removed,
        loopback_only: true,
        network,
        env_set,
        pass_through,
        binds,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base(mounts: Value) -> Value {
        json!({
            "ociVersion": "1.0.2",
            "process": {"args": ["sh"], "cwd": "/", "env": ["PATH=/bin", "GH_TOKEN=x", "AWS_SECRET_ACCESS_KEY=y", "HOME=/root"],
                "capabilities": {"bounding": ["CAP_CHOWN", "CAP_KILL"], "effective": ["CAP_CHOWN"]}},
            "root": {"path": "rootfs"},
            "mounts": mounts,
            "linux": {"namespaces": [{"type": "pid"}, {"type": "network"}, {"type": "mount"}, {"type": "ipc"}]}
        })
    }

    #[test]
    fn privileged_and_host_namespaces_are_refused_with_every_reason() {
        let mut s = base(json!([]));
        s["process"]["capabilities"]["bounding"] = json!(["CAP_SYS_ADMIN", "CAP_CHOWN"]);
        s["linux"]["namespaces"] =
            json!([{"type": "mount"}, {"type": "pid", "path": "/proc/1/ns/pid"}]);
        s["linux"]["resources"] = json!({"devices": [{"allow": true, "access": "rwm"}]});
        let r = refusals(&s);
        let all = r.join("\n");
        assert!(all.contains("CAP_SYS_ADMIN"), "{all}");
        assert!(
            all.contains("cgroup device rule allowing a *:* rwm"),
            "{all}"
        );
        assert!(all.contains("host's network namespace"), "{all}");
        assert!(
            all.contains("host's PID namespace (/proc/1/ns/pid)"),
            "{all}"
        );
        let policy = resolve_host_policy("default").expect("policy");
        let e = harden(
            &mut s,
            &policy,
            "default",
            Path::new("/nonexistent"),
            &OwnPlaces::default(),
        )
        .expect_err("refused");
        assert!(
            e.to_string()
                .starts_with("refused by vetto policy \"default\": a privileged container"),
            "{e}"
        );
    }

    #[test]
    fn daemon_sockets_and_host_root_binds_are_refused() {
        let dir = tempfile::tempdir().expect("tmp");
        std::fs::write(dir.path().join("docker.sock"), "").expect("sock stand-in");
        std::os::unix::fs::symlink(dir.path().join("docker.sock"), dir.path().join("innocent"))
            .expect("symlink");
        let sock = dir.path().join("docker.sock");
        let s = base(json!([
            {"destination": "/var/run/docker.sock", "type": "bind", "source": sock, "options": ["rbind"]},
            {"destination": "/sock", "type": "bind", "source": dir.path().join("innocent"), "options": ["rbind"]},
            {"destination": "/host-run", "type": "bind", "source": dir.path(), "options": ["rbind"]},
            {"destination": "/host", "source": "/", "options": ["rbind", "ro"]},
            {"destination": "/host2", "type": "bind", "source": "/etc/..", "options": ["rbind"]},
            {"destination": "/ps", "type": "bind", "source": "/proc/sys", "options": ["rbind"]},
            {"destination": "/disk", "type": "ext4", "source": "/dev/sda1"},
            {"destination": "rel", "type": "tmpfs", "source": "tmpfs"}
        ]));
        let all = refusals(&s).join("\n");
        let sock = sock.display().to_string();
        assert!(
            all.contains(&format!("daemon socket {sock} (at /var/run/docker.sock)")),
            "{all}"
        );
        assert!(
            all.contains(&format!("(= {sock}) (at /sock)")),
            "a symlink to the socket: {all}"
        );
        assert!(
            all.contains("which holds the container daemon socket docker.sock"),
            "{all}"
        );
        assert!(all.contains("host's / (at /host)"), "{all}");
        assert!(all.contains("host's /etc/.. (= /) (at /host2)"), "{all}");
        assert!(all.contains("host's /proc/sys (at /ps)"), "{all}");
        assert!(all.contains("a \"ext4\" mount at /disk"), "{all}");
        assert!(all.contains("relative path \"rel\""), "{all}");
        // Writable binds of the host's system directories, or of what holds one.
        let s = base(json!([
            {"destination": "/e", "type": "bind", "source": "/etc", "options": ["rbind", "rw"]},
            {"destination": "/v", "type": "bind", "source": "/var", "options": ["rbind"]},
            {"destination": "/eo", "type": "bind", "source": "/etc", "options": ["rbind", "ro"]}
        ]));
        let all = refusals(&s).join("\n");
        assert!(
            all.contains("a writable bind of /etc (at /e), which is or holds the host's /etc"),
            "{all}"
        );
        assert!(all.contains("a writable bind of /var (at /v)"), "{all}");
        // An engine's state root is refused; what it puts inside for a container is fine.
        let mut s = base(json!([]));
        s["mounts"] =
            json!([{"destination": "/x", "type": "bind", "source": "/run", "options": ["rbind"]}]);
        assert!(refusals(&s).join("\n").contains("holds the host's /run"));
        let inside = PathBuf::from(format!("/run/vetto-unit-{}", std::process::id()));
        if std::fs::create_dir(&inside).is_ok() {
            s["mounts"] = json!([{"destination": "/etc/hosts", "type": "bind", "source": inside, "options": ["rbind"]}]);
            let all = refusals(&s).join("\n");
            let _ = std::fs::remove_dir(&inside);
            assert!(all.is_empty(), "{all}");
        }
        assert!(!all.contains("(at /eo)"), "read-only is fine: {all}");
    }

    /// Issue 11: what a bind holds is judged by where daemon sockets would be, not by which
    /// daemons have run on this host: a bind of `/run` is refused on a fresh machine too.
    #[test]
    fn daemon_socket_places_are_judged_whether_or_not_a_daemon_ran() {
        let s = base(json!([
            {"destination": "/r", "type": "bind", "source": "/run", "options": ["rbind", "ro"]}
        ]));
        let all = refusals(&s).join("\n");
        assert!(
            all.contains("a bind of /run (at /r), which holds the container daemon socket"),
            "{all}"
        );
        let places = daemon_socket_places();
        for p in [
            "/run/docker.sock",
            "/run/podman/podman.sock",
            "/run/crio/crio.sock",
        ] {
            let p = canonical_beyond(Path::new(p)).expect("canonical");
            assert!(places.contains(&p), "{}: {places:?}", p.display());
        }
    }

    #[test]
    fn namespaces_are_judged_by_inode_and_devices_by_kind() {
        let mut s = base(json!([]));
        // Two PID entries: libcontainer would take the last one.
        s["linux"]["namespaces"] = json!([{"type": "pid"}, {"type": "pid", "path": "/proc/1/ns/pid"},
            {"type": "network", "path": "/proc/self/ns/net"}, {"type": "mount"}]);
        s["linux"]["devices"] = json!([{"path": "/dev/sda", "type": "b", "major": 8, "minor": 0},
            {"path": "/dev/fuse", "type": "c", "major": 10, "minor": 229}]);
        s["linux"]["resources"] = json!({"devices": [{"allow": false, "access": "rwm"},
            {"allow": true, "type": "c", "major": null, "minor": null, "access": "rwm"}]});
        let all = refusals(&s).join("\n");
        assert!(all.contains("more than one PID namespace entry"), "{all}");
        assert!(
            all.contains("the host's network namespace (/proc/self/ns/net)"),
            "{all}"
        );
        assert!(all.contains("the host device /dev/sda"), "{all}");
        assert!(!all.contains("/dev/fuse"), "{all}");
        assert!(
            all.contains("cgroup device rule allowing c *:* rwm"),
            "{all}"
        );
    }

    #[test]
    fn capability_spellings_devices_and_paths_are_judged_as_libcontainer_reads_them() {
        let mut s = base(json!([
            {"destination": "/proc/../x", "type": "tmpfs", "source": "tmpfs"}
        ]));
        s["process"]["capabilities"]["bounding"] = json!(["sys_admin", "CAP_CAP_SYS_PTRACE"]);
        s["linux"]["devices"] = json!([
            {"path": "/dev/sg0", "type": "c", "major": 21, "minor": 0},
            {"path": "/dev/fuse", "type": "c", "major": 10, "minor": 229}
        ]);
        s["linux"]["resources"] = json!({"devices": [
            {"allow": false, "access": "rwm"},
            {"allow": true, "type": "c", "major": -1, "minor": -1, "access": "m"},
            {"allow": true, "type": "c", "major": 21, "access": "rw"},
            {"allow": true, "type": "c", "major": 136, "access": "rwm"}
        ]});
        let all = refusals(&s).join("\n");
        assert!(
            all.contains("capabilities CAP_SYS_ADMIN, CAP_SYS_PTRACE"),
            "{all}"
        );
        assert!(all.contains("the host device /dev/sg0"), "{all}");
        assert!(!all.contains("/dev/fuse"), "{all}");
        assert!(all.contains("rule allowing c 21:* rw"), "{all}");
        assert!(!all.contains("c *:* m") && !all.contains("c 136"), "{all}");
        assert!(all.contains("\"/proc/../x\", a path with `..`"), "{all}");
        // No capabilities object: libcontainer would keep them all.
        let mut s = base(json!([]));
        s["process"]
            .as_object_mut()
            .expect("process")
            .remove("capabilities");
        assert!(refusals(&s).join("\n").contains("no capabilities object"));
    }

    #[test]
    fn exec_processes_get_the_same_treatment() {
        let mut p = json!({"args": ["sh"], "env": ["PATH=/bin", "GH_TOKEN=x", "HTTP_PROXY=evil"],
            "capabilities": {"bounding": ["CAP_CHOWN", "mknod"], "effective": ["CAP_MKNOD"]}});
        let set = vec!["HTTP_PROXY=http://127.0.0.1:3128".to_string()];
        let removed = harden_process(&mut p, "default", &[], &set).expect("harden");
        assert_eq!(removed, vec!["GH_TOKEN"]);
        assert_eq!(
            p["env"],
            json!(["PATH=/bin", "HTTP_PROXY=http://127.0.0.1:3128"])
        );
        assert_eq!(p["capabilities"]["bounding"], json!(["CAP_CHOWN"]));
        assert_eq!(p["noNewPrivileges"], json!(true));
        let mut p = json!({"args": ["sh"], "capabilities": {"bounding": ["CAP_SYS_ADMIN"]}});
        let e = harden_process(&mut p, "default", &[], &[]).expect_err("privileged");
        assert!(
            e.to_string()
                .contains("a privileged process (capabilities CAP_SYS_ADMIN)"),
            "{e}"
        );
        let mut p = json!({"args": ["sh"]});
        assert!(harden_process(&mut p, "default", &[], &[]).is_err());
    }

    #[test]
    fn protected_paths_do_not_follow_symlinks_out_of_the_bind() {
        let ws = tempfile::tempdir().expect("tmp");
        let elsewhere = tempfile::tempdir().expect("tmp");
        std::fs::write(elsewhere.path().join("config"), "k8s credentials").expect("file");
        // The agent replaced .git with a symlink to another directory of the host.
        std::os::unix::fs::symlink(elsewhere.path(), ws.path().join(".git")).expect("symlink");
        let mut s = base(json!([
            {"destination": "/workspace", "type": "bind", "source": ws.path(), "options": ["rbind", "rw"]}
        ]));
        s["process"]["capabilities"]["bounding"] = json!(["CAP_CHOWN", "CAP_MKNOD"]);
        let policy = resolve_host_policy("default").expect("policy");
        harden(
            &mut s,
            &policy,
            "default",
            Path::new("/nonexistent"),
            &OwnPlaces::default(),
        )
        .expect("harden");
        let mounts = s["mounts"].as_array().expect("mounts");
        assert!(
            !mounts
                .iter()
                .any(|m| m["destination"] == json!("/workspace/.git/config")),
            "{mounts:?}"
        );
        assert_eq!(
            s["process"]["capabilities"]["bounding"],
            json!(["CAP_CHOWN"])
        );
    }

    /// Git metadata of every repository in a writable bind is read-only, as in `vetto run`:
    /// a nested repository's config and a submodule's gitlink and separate git directory (the
    /// escape suite's T05-T07 wrote them through the shim before).
    #[test]
    fn git_metadata_of_every_repository_in_a_bind_is_read_only() {
        let ws = tempfile::tempdir().expect("tmp");
        let w = ws.path().canonicalize().expect("c");
        let git = |dir: &Path, args: &[&str]| {
            let st = std::process::Command::new("git")
                .args(args)
                .current_dir(dir)
                .env("GIT_CONFIG_NOSYSTEM", "1")
                .env("HOME", dir)
                .status()
                .expect("git");
            assert!(st.success(), "git {args:?}");
        };
        git(&w, &["init", "-q", "."]);
        std::fs::create_dir_all(w.join(".git/modules")).expect("mk");
        git(
            &w,
            &["init", "-q", "--separate-git-dir=.git/modules/sub", "sub"],
        );
        std::fs::create_dir_all(w.join("vendor/lib")).expect("mk");
        git(&w.join("vendor/lib"), &["init", "-q", "."]);
        let mut s = base(json!([
            {"destination": "/workspace", "type": "bind", "source": ws.path(), "options": ["rbind", "rw"]}
        ]));
        let policy = resolve_host_policy("default").expect("policy");
        harden(
            &mut s,
            &policy,
            "default",
            Path::new("/nonexistent"),
            &OwnPlaces::default(),
        )
        .expect("harden");
        let mounts = s["mounts"].as_array().expect("mounts");
        for (inside, host) in [
            ("/workspace/.git", w.join(".git")),
            ("/workspace/sub/.git", w.join("sub/.git")),
            ("/workspace/vendor/lib/.git", w.join("vendor/lib/.git")),
        ] {
            let m = mounts
                .iter()
                .find(|m| m["destination"] == json!(inside))
                .unwrap_or_else(|| panic!("{inside} not protected: {mounts:?}"));
            assert_eq!(m["source"], json!(host));
            assert!(m["options"].as_array().expect("o").contains(&json!("ro")));
        }
        assert_eq!(
            mounts
                .iter()
                .filter(|m| m["destination"] == json!("/workspace/.git"))
                .count(),
            1
        );
    }

    /// Issue 10, item 3: a kernel filesystem beneath a writable bind would get the bind's
    /// Landlock rule (`/workspace/p/sys/kernel/core_pattern`).
    #[test]
    fn kernel_filesystems_only_at_their_places() {
        let s = base(json!([
            {"destination": "/proc", "type": "proc", "source": "proc"},
            {"destination": "/workspace/p", "type": "proc", "source": "proc"},
            {"destination": "/sys/fs/cgroup", "type": "cgroup2", "source": "cgroup"},
            {"destination": "/w/cg", "type": "cgroup2", "source": "cgroup"},
            {"destination": "/w/s", "type": "sysfs", "source": "sysfs"},
            {"destination": "/dev/mqueue", "type": "mqueue", "source": "mqueue"},
            {"destination": "/w/mq", "type": "mqueue", "source": "mqueue"}
        ]));
        let all = refusals(&s).join("\n");
        for bad in [
            "proc mount at /workspace/p",
            "cgroup2 mount at /w/cg",
            "sysfs mount at /w/s",
            "mqueue mount at /w/mq",
        ] {
            assert!(all.contains(bad), "{bad}: {all}");
        }
        assert!(
            !all.contains("at /proc ")
                && !all.contains("at /sys/fs/cgroup ")
                && !all.contains("at /dev/mqueue "),
            "{all}"
        );
    }

    /// Issue 10, items 4, 5 and 7: no-delete beneath a writable parent is refused; binds get
    /// nosuid (and nodev outside /dev), binds without write access are read-only mounts,
    /// the image root is read-only, /proc/sys stays read-only, `tmpcopyup` is dropped.
    #[test]
    fn binds_get_mount_flags_and_narrower_binds_cannot_inherit() {
        let ws = tempfile::tempdir().expect("tmp");
        let mut s = base(json!([
            {"destination": "/home", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid"]},
            {"destination": "/tmp", "type": "tmpfs", "source": "tmpfs", "options": ["rw", "tmpcopyup"]},
            {"destination": "/home/proj", "type": "bind", "source": ws.path(), "options": ["rbind", "rw"]}
        ]));
        let read_only = resolve_host_policy("read-only").expect("policy");
        harden(
            &mut s,
            &read_only,
            "read-only",
            Path::new("/nonexistent"),
            &OwnPlaces::default(),
        )
        .expect("harden");
        let mounts = s["mounts"].as_array().expect("mounts");
        let proj = mounts
            .iter()
            .find(|m| m["destination"] == json!("/home/proj"))
            .expect("bind");
        let opts = strs(proj.get("options"));
        for o in ["ro", "nosuid", "nodev"] {
            assert!(opts.contains(&o.to_string()), "{opts:?}");
        }
        assert!(!opts.contains(&"rw".to_string()), "{opts:?}");
        let tmp = mounts
            .iter()
            .find(|m| m["destination"] == json!("/tmp"))
            .expect("tmp");
        assert!(!strs(tmp.get("options")).contains(&"tmpcopyup".to_string()));
        assert_eq!(s["root"]["readonly"], json!(true));
        assert!(strs(s.pointer("/linux/readonlyPaths")).contains(&"/proc/sys".to_string()));
        // Under write-no-delete, the same layout would inherit delete from the tmpfs.
        let mut s = base(json!([
            {"destination": "/home", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid"]},
            {"destination": "/home/proj", "type": "bind", "source": ws.path(), "options": ["rbind", "rw"]}
        ]));
        let nd = resolve_host_policy("default").expect("policy");
        let mut nd = nd;
        nd.project.value = ProjectAccess::WriteNoDelete;
        let e = harden(
            &mut s,
            &nd,
            "nd",
            Path::new("/nonexistent"),
            &OwnPlaces::default(),
        )
        .expect_err("refused");
        assert!(
            e.to_string()
                .contains("write-no-delete bind at /home/proj beneath the fully writable /home"),
            "{e}"
        );
    }

    /// Issue 10, item 7: a bind whose source is (or lies in) a secret directory is refused,
    /// naming the secret, instead of failing later with "changed during create".
    #[test]
    fn a_bind_of_a_secret_is_refused_by_name() {
        let home = tempfile::tempdir().expect("tmp");
        let home = home.path().canonicalize().expect("c");
        std::fs::create_dir_all(home.join(".aws/sub")).expect("mk");
        std::fs::write(home.join(".aws/credentials"), "k").expect("w");
        let policy = resolve_host_policy("default").expect("policy");
        for src in [home.join(".aws"), home.join(".aws/sub")] {
            let mut s = base(json!([
                {"destination": "/creds", "type": "bind", "source": src, "options": ["rbind", "ro"]}
            ]));
            let e = harden(&mut s, &policy, "default", &home, &OwnPlaces::default())
                .expect_err("refused");
            assert!(
                e.to_string().contains(&format!(
                    "which is or lies in the secret {}",
                    home.join(".aws").display()
                )),
                "{e}"
            );
        }
    }

    /// The same for a *file* inside a secret directory, bound by itself or through a
    /// symlink elsewhere, and for a file that is a secret by name.
    #[test]
    fn a_bind_of_a_file_inside_a_secret_is_refused() {
        let home = tempfile::tempdir().expect("tmp");
        let home = home.path().canonicalize().expect("c");
        std::fs::create_dir_all(home.join(".aws")).expect("mk");
        std::fs::create_dir_all(home.join("work")).expect("mk");
        std::fs::write(home.join(".aws/credentials"), "k").expect("w");
        std::fs::write(home.join("work/.env"), "k").expect("w");
        std::os::unix::fs::symlink(
            home.join(".aws/credentials"),
            home.join("work/innocent.conf"),
        )
        .expect("ln");
        let policy = resolve_host_policy("default").expect("policy");
        for (src, secret) in [
            (home.join(".aws/credentials"), home.join(".aws")),
            (home.join("work/innocent.conf"), home.join(".aws")),
            (home.join("work/.env"), home.join("work/.env")),
        ] {
            let mut s = base(json!([
                {"destination": "/creds", "type": "bind", "source": src, "options": ["rbind", "ro"]}
            ]));
            let e = harden(&mut s, &policy, "default", &home, &OwnPlaces::default())
                .expect_err("refused");
            assert!(
                e.to_string().contains(&format!(
                    "which is or lies in the secret {}",
                    secret.display()
                )),
                "{}: {e}",
                src.display()
            );
        }
    }

    /// Issue 10, item 7: a `.env` that links into another bind's tree is masked where that
    /// bind shows its target.
    #[test]
    fn secret_reached_through_a_symlink_into_another_bind_is_masked_there() {
        let t = tempfile::tempdir().expect("tmp");
        let root = t.path().canonicalize().expect("c");
        std::fs::create_dir_all(root.join("a")).expect("mk");
        std::fs::create_dir_all(root.join("shared")).expect("mk");
        std::fs::write(root.join("shared/app.conf"), "TOKEN=1").expect("w");
        std::os::unix::fs::symlink("../shared/app.conf", root.join("a/.env")).expect("ln");
        let mut s = base(json!([
            {"destination": "/a", "type": "bind", "source": root.join("a"), "options": ["rbind", "rw"]},
            {"destination": "/b", "type": "bind", "source": root.join("shared"), "options": ["rbind", "rw"]}
        ]));
        let policy = resolve_host_policy("default").expect("policy");
        let plan = harden(
            &mut s,
            &policy,
            "default",
            Path::new("/nonexistent"),
            &OwnPlaces::default(),
        )
        .expect("harden");
        let masked: Vec<String> = plan
            .masks
            .iter()
            .map(|m| m.path.display().to_string())
            .collect();
        assert!(masked.contains(&"/b/app.conf".to_string()), "{masked:?}");
    }

    /// Issue 10, item 1: runtime state (vetto-shim's own root wherever it is, runc's, …) is
    /// never bound writable; inside an engine's state only per-container artefacts are.
    #[test]
    fn runtime_and_engine_state_cannot_be_bound_writable() {
        let own = tempfile::tempdir().expect("tmp");
        let own = own.path().canonicalize().expect("c");
        std::fs::create_dir_all(own.join(".vetto/victim")).expect("mk");
        let roots = OwnPlaces {
            state_roots: vec![own.clone()],
            ..OwnPlaces::default()
        };
        for src in [own.clone(), own.join(".vetto"), own.join(".vetto/victim")] {
            let s = base(json!([
                {"destination": "/v", "type": "bind", "source": src, "options": ["rbind", "rw"]}
            ]));
            let all = refusals_for(&s, &roots).join("\n");
            assert!(all.contains("runtime state"), "{}: {all}", src.display());
            // Read-only is not a way in for writes (it is the caller's choice to show it).
            let s = base(json!([
                {"destination": "/v", "type": "bind", "source": src, "options": ["rbind", "ro"]}
            ]));
            assert!(refusals_for(&s, &roots).is_empty());
        }
        let id = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
        for ok in [
            format!("containers/{id}/hosts"),
            format!("containers/{id}/mounts/shm"),
            format!("overlay-containers/{id}/userdata/resolv.conf"),
            format!("overlay-containers/{id}/userdata/run/secrets"),
            "volumes/cache/_data".to_string(),
            "volumes/cache/_data/sub".to_string(),
            "pods/7f1c/volumes/kubernetes.io~empty-dir/scratch".to_string(),
            format!("io.containerd.grpc.v1.cri/sandboxes/{id}/shm"),
        ] {
            assert!(engine_artifact(Path::new(&ok)), "{ok}");
        }
        for bad in [
            format!("containers/{id}"),
            format!("containers/{id}/config.v2.json"),
            "containers".to_string(),
            "overlay-containers".to_string(),
            "volumes".to_string(),
            "volumes/cache".to_string(),
            "hosts".to_string(),
            "storage/overlay".to_string(),
        ] {
            assert!(!engine_artifact(Path::new(&bad)), "{bad}");
        }
    }

    /// The audit store's directory is sealed: no bind of it, of anything in it or of a
    /// directory holding it, read-only included; what lies beside it is fine.
    #[test]
    fn sealed_directories_cannot_be_bound_at_all() {
        let t = tempfile::tempdir().expect("tmp");
        let t = t.path().canonicalize().expect("c");
        let audit = t.join("lib/vetto/audit");
        std::fs::create_dir_all(&audit).expect("mk");
        std::fs::create_dir_all(t.join("lib/other")).expect("mk");
        std::fs::write(audit.join("audit.key"), "k").expect("w");
        // A link to the store is judged by where it leads.
        std::os::unix::fs::symlink(&audit, t.join("link")).expect("ln");
        let own = OwnPlaces {
            sealed: vec![(audit.clone(), "the audit store".into())],
            ..OwnPlaces::default()
        };
        for src in [
            audit.clone(),
            audit.join("audit.key"),
            t.join("lib"),
            t.join("lib/vetto"),
            t.clone(),
            t.join("link"),
        ] {
            for opts in [json!(["rbind", "rw"]), json!(["rbind", "ro"])] {
                let s = base(json!([
                    {"destination": "/x", "type": "bind", "source": src, "options": opts}
                ]));
                let all = refusals_for(&s, &own).join("\n");
                assert!(
                    all.contains(&format!(
                        "the audit store {} (no container",
                        audit.display()
                    )),
                    "{}: {all}",
                    src.display()
                );
            }
        }
        let s = base(json!([
            {"destination": "/x", "type": "bind", "source": t.join("lib/other"), "options": ["rbind", "ro"]}
        ]));
        assert!(refusals_for(&s, &own).is_empty());
        // Not yet created: judged where it would be.
        let later = OwnPlaces {
            sealed: vec![(t.join("var/lib/vetto/audit"), "the audit store".into())],
            ..OwnPlaces::default()
        };
        let s = base(json!([
            {"destination": "/x", "type": "bind", "source": t.clone(), "options": ["rbind", "ro"]}
        ]));
        assert!(refusals_for(&s, &later).join("\n").contains("audit store"));
    }

    #[test]
    fn shared_propagation_is_refused() {
        let ws = tempfile::tempdir().expect("tmp");
        let mut s = base(json!([
            {"destination": "/a", "type": "bind", "source": ws.path(), "options": ["rbind", "rshared"]},
            {"destination": "/b", "type": "bind", "source": ws.path(), "options": ["bind", "shared", "ro"]},
            {"destination": "/c", "type": "bind", "source": ws.path(), "options": ["rbind", "rslave"]},
            {"destination": "/d", "type": "bind", "source": ws.path(), "options": ["rbind", "rprivate"]}
        ]));
        s["linux"]["rootfsPropagation"] = json!("rshared");
        let all = refusals(&s).join("\n");
        assert!(all.contains("(at /a) with rshared propagation"), "{all}");
        assert!(all.contains("(at /b) with shared propagation"), "{all}");
        assert!(!all.contains("at /c") && !all.contains("at /d"), "{all}");
        assert!(all.contains("rootfsPropagation rshared"), "{all}");
    }

    #[test]
    fn harden_masks_secrets_in_binds_filters_env_and_limits_writes() {
        let ws = tempfile::tempdir().expect("tmp");
        std::fs::write(ws.path().join(".env"), "TOKEN=1").expect("env");
        std::fs::create_dir_all(ws.path().join(".git/hooks")).expect("git");
        std::fs::create_dir_all(ws.path().join("sub/.aws")).expect("aws");
        let mut s = base(json!([
            {"destination": "/proc", "type": "proc", "source": "proc"},
            {"destination": "/dev", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "mode=755"]},
            {"destination": "/tmp", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid"]},
            {"destination": "/workspace", "type": "bind", "source": ws.path(), "options": ["rbind", "rw"]},
            {"destination": "/ro", "type": "bind", "source": ws.path(), "options": ["rbind", "ro"]}
        ]));
        let policy = resolve_host_policy("default").expect("policy");
        let plan = harden(
            &mut s,
            &policy,
            "default",
            Path::new("/nonexistent"),
            &OwnPlaces::default(),
        )
        .expect("harden");
        assert_eq!(s["process"]["noNewPrivileges"], json!(true));
        let env = strs(s.pointer("/process/env"));
        assert!(env.contains(&"PATH=/bin".to_string()));
        assert!(!env
            .iter()
            .any(|e| e.starts_with("GH_TOKEN") || e.starts_with("AWS_")));
        assert_eq!(plan.env_removed, vec!["GH_TOKEN", "AWS_SECRET_ACCESS_KEY"]);
        let masked: Vec<String> = plan
            .masks
            .iter()
            .map(|m| m.path.display().to_string())
            .collect();
        assert!(
            masked.contains(&"/workspace/.env".to_string()),
            "{masked:?}"
        );
        assert!(masked.contains(&"/ro/.env".to_string()), "{masked:?}");
        let mounts = s["mounts"].as_array().expect("mounts");
        assert!(mounts
            .iter()
            .any(|m| m["destination"] == json!("/workspace/.env")
                && m["source"] == json!("/dev/null")));
        assert!(mounts
            .iter()
            .any(|m| m["destination"] == json!("/workspace/.git")
                && strs(m.get("options")).contains(&"ro".to_string())));
        // Nothing protected is added under the read-only bind.
        assert!(!mounts.iter().any(|m| m["destination"] == json!("/ro/.git")));
        let writable: Vec<String> = plan
            .landlock
            .rules
            .iter()
            .filter(|r| r.access != FsAccess::ReadExec && r.access != FsAccess::Device)
            .map(|r| r.path.display().to_string())
            .collect();
        assert!(writable.contains(&"/tmp".to_string()));
        assert!(
            !writable
                .iter()
                .any(|p| p == "/" || p.starts_with("/ro") || p == "/proc"),
            "{writable:?}"
        );
        assert!(writable.iter().any(|p| p == "/workspace"), "{writable:?}");
    }

    #[test]
    fn read_only_profile_leaves_binds_unwritable_and_unknown_profile_is_named() {
        let ws = tempfile::tempdir().expect("tmp");
        let mut s = base(json!([
            {"destination": "/workspace", "type": "bind", "source": ws.path(), "options": ["rbind"]}
        ]));
        let policy = resolve_host_policy("read-only").expect("policy");
        let plan = harden(
            &mut s,
            &policy,
            "read-only",
            Path::new("/nonexistent"),
            &OwnPlaces::default(),
        )
        .expect("harden");
        assert!(!plan
            .landlock
            .rules
            .iter()
            .any(|r| r.path == Path::new("/workspace")));
        let e = resolve_host_policy("no-such-profile").expect_err("unknown");
        assert!(e.to_string().contains("no-such-profile"), "{e}");
        let e = resolve_host_policy("/nonexistent/policy.toml").expect_err("missing file");
        assert!(e.to_string().contains("/nonexistent/policy.toml"), "{e}");
    }
}
