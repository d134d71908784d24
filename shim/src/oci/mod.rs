//! `vetto-shim`: a runc-compatible OCI runtime on the same embedded libcontainer as
//! `vetto run`, for Docker (`"runtimes"` in `daemon.json`), Podman (`--runtime`), containerd
//! (the runc v2 shim's `BinaryName`, `ctr run --runc-binary`) and Kubernetes `RuntimeClass`.
//!
//! Without a policy it behaves as a plain OCI runtime (plus one thing libcontainer without
//! libseccomp would not do: the bundle's seccomp profile is honoured, see
//! [`vetto_hooks::oci_seccomp`]). With a policy — the `dev.vetto.policy` annotation, or
//! `default_policy` in `/etc/vetto/shim.toml` — the bundle is hardened first
//! ([`vetto_bundle::container`]): refused if privileged, secrets in bind mounts masked,
//! environment filtered, Landlock and vetto's seccomp deny-list applied inside.
//!
//! Containers outlive this process (the caller's shim or conmon reaps them); nothing here
//! arms PDEATHSIG. Errors go to `--log` in the caller's format and to stderr.

mod executor;
mod log;
mod network;
mod prepare;

use std::collections::HashMap;
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use libcontainer::container::builder::ContainerBuilder;
use libcontainer::container::{Container, ContainerStatus};
use libcontainer::signal::Signal;
use libcontainer::syscall::syscall::SyscallType;
use liboci_cli::{CommonCmd, GlobalOpts, StandardCmd};
use serde_json::{json, Value};

use self::log::Logger;
use self::prepare::{shim_dir, ShimState};

/// Errors of `vetto-shim`.
#[derive(Debug, thiserror::Error)]
pub enum OciError {
    /// A file could not be read or written.
    #[error("{what}: {}: {source}", path.display())]
    Io {
        /// What was being done.
        what: &'static str,
        /// The path.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// Malformed input (config.json, process.json, shim.toml, an annotation).
    #[error("{0}")]
    Config(String),
    /// The container does not exist (containerd and Docker match on "does not exist").
    #[error("container \"{0}\" does not exist")]
    NotFound(String),
    /// The id is taken.
    #[error("container \"{0}\" already exists")]
    Exists(String),
    /// The id is not usable as a directory name.
    #[error("invalid container id {0:?}: use letters, digits, '_', '-', '.', '+' (not starting with '.')")]
    BadId(String),
    /// Not supported by this runtime.
    #[error("{0} is not supported by vetto-shim")]
    Unsupported(&'static str),
    /// The policy refused the bundle, or could not be loaded.
    #[error(transparent)]
    Container(#[from] vetto_bundle::container::ContainerError),
    /// The policy could not be loaded.
    #[error(transparent)]
    Policy(#[from] vetto_bundle::PolicyError),
    /// The bundle's seccomp profile.
    #[error(transparent)]
    Seccomp(#[from] vetto_hooks::oci_seccomp::OciSeccompError),
    /// libcontainer failed.
    #[error("{step}: {source}")]
    Runtime {
        /// Which step.
        step: &'static str,
        /// libcontainer's error.
        source: libcontainer::error::LibcontainerError,
    },
    /// The pid in a container's state is not the init this runtime created (a tampered
    /// state file, or the pid was reused after the init exited).
    #[error("container \"{id}\": its state names pid {pid}, which is not the init this runtime created (pid {init}); refusing to act on it")]
    NotOurInit {
        /// The container.
        id: String,
        /// What state.json says.
        pid: i32,
        /// What `create` recorded.
        init: i32,
    },
    /// Listing a container's processes failed.
    #[error("listing the container's processes: {0}")]
    Cgroup(String),
}

fn rt(step: &'static str) -> impl FnOnce(libcontainer::error::LibcontainerError) -> OciError {
    move |source| OciError::Runtime { step, source }
}

#[derive(Parser, Debug)]
#[command(
    name = "vetto-shim",
    version,
    about = "OCI runtime with vetto's hardening (runc-compatible command line)",
    after_help = "Policy: annotation dev.vetto.policy=<profile|/abs/policy.toml|none>, or default_policy in /etc/vetto/shim.toml ($VETTO_SHIM_CONFIG)."
)]
struct Cli {
    #[command(flatten)]
    global: GlobalOpts,
    /// Accepted for runc compatibility (rootless mode is detected from the user id).
    #[arg(long, hide = true, num_args = 0..=1, default_missing_value = "true")]
    rootless: Option<String>,
    /// Policy for every container this runtime entry starts, unless its annotation names
    /// another one; set by the host (Docker's `runtimeArgs`, a wrapper). It cannot be turned
    /// off by an annotation: `dev.vetto.policy=none` is then refused.
    #[arg(long, value_name = "PROFILE|/ABS/POLICY.toml")]
    vetto_policy: Option<String>,
    /// Where policy files named by the `dev.vetto.policy` annotation must lie (default
    /// `/etc/vetto/policies`, or `policy_dir` in the host configuration).
    #[arg(long, value_name = "DIR")]
    vetto_policy_dir: Option<PathBuf>,
    #[command(subcommand)]
    cmd: Cmd,
}

// Parsed once per process: the size difference of liboci-cli's argument structs is moot.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand, Debug)]
enum Cmd {
    #[command(flatten)]
    Standard(StandardCmd),
    #[command(flatten)]
    Common(CommonCmd),
}

/// The state root: `--root`, else `/run/vetto-shim` for root, else
/// `$XDG_RUNTIME_DIR/vetto-shim` (or `/tmp/vetto-shim-UID`).
fn state_root(g: &GlobalOpts, in_userns: bool) -> Result<PathBuf, OciError> {
    let root = match &g.root {
        Some(r) => r.clone(),
        None => {
            // SAFETY: geteuid has no arguments and cannot fail.
            let uid = unsafe { libc::geteuid() };
            if uid == 0 && !in_userns {
                PathBuf::from("/run/vetto-shim")
            } else if let Some(x) = std::env::var_os("XDG_RUNTIME_DIR") {
                PathBuf::from(x).join("vetto-shim")
            } else if uid == 0 {
                // Root of a user namespace: every rootless user would share one path.
                return Err(OciError::Config(
                    "rootless: no state directory: set XDG_RUNTIME_DIR or pass --root".into(),
                ));
            } else {
                PathBuf::from(format!("/tmp/vetto-shim-{uid}"))
            }
        }
    };
    let io = |source| OciError::Io {
        what: "creating the state root",
        path: root.clone(),
        source,
    };
    if let Some(parent) = root.parent() {
        std::fs::create_dir_all(parent).map_err(io)?;
    }
    match std::fs::DirBuilder::new().mode(0o700).create(&root) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(io(e)),
    }
    // Ours alone: not a symlink, owned by us, not open to others (another user could
    // otherwise plant or swap a container's shadow bundle).
    let meta = std::fs::symlink_metadata(&root).map_err(io)?;
    // SAFETY: geteuid has no arguments and cannot fail.
    let me = unsafe { libc::geteuid() };
    if !meta.is_dir() || meta.uid() != me || meta.mode() & 0o022 != 0 {
        return Err(OciError::Config(format!(
            "state root {}: must be a directory owned by uid {me} and not writable by others",
            root.display()
        )));
    }
    Ok(root)
}

/// Running in a user namespace other than the initial one (rootless Podman runs its runtime
/// as uid 0 of the user's namespace): the host's cgroups and `/run` are not ours.
fn rootless() -> bool {
    std::fs::read_to_string("/proc/self/uid_map")
        .map(|m| m.split_whitespace().collect::<Vec<_>>() != ["0", "0", "4294967295"])
        .unwrap_or(true)
}

/// Can this process create cgroups (a delegated cgroup2 subtree it owns)?
fn cgroups_writable() -> bool {
    let Ok(text) = std::fs::read_to_string("/proc/self/cgroup") else {
        return false;
    };
    // "0::/user.slice/..." on a unified host; a hybrid host also has v1 lines.
    let v1 = text.lines().any(|l| !l.starts_with("0::"));
    let unified = text.lines().find_map(|l| l.strip_prefix("0::"));
    match (v1, unified) {
        (false, Some(path)) => {
            let dir = Path::new("/sys/fs/cgroup").join(path.trim_start_matches('/'));
            let c = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()).ok();
            // SAFETY: access() with a valid C string.
            c.is_some_and(|c| unsafe { libc::access(c.as_ptr(), libc::W_OK) } == 0)
        }
        _ => false,
    }
}

fn check_id(id: &str) -> Result<(), OciError> {
    let ok = !id.is_empty()
        && id.len() <= 1024
        && !id.starts_with('.')
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '+'));
    if ok {
        Ok(())
    } else {
        Err(OciError::BadId(id.to_string()))
    }
}

fn load(root: &Path, id: &str) -> Result<Container, OciError> {
    check_id(id)?;
    let dir = root.join(id);
    if !dir.join("state.json").exists() {
        return Err(OciError::NotFound(id.to_string()));
    }
    // What exec, kill and delete act on comes from these files: they must be ours, and the
    // pid they name must still be the init this runtime created (not a host process a
    // tampered state.json points at).
    prepare::private_file(&dir.join("state.json"))?;
    let mut c = Container::load(dir).map_err(rt("loading the container state"))?;
    let record = match ShimState::load(root, id) {
        Ok(s) => s.init,
        Err(OciError::NotFound(_)) => None,
        Err(e) => return Err(e),
    };
    if let (Some(pid), Some((init_pid, start))) = (c.pid(), record) {
        let pid = pid.as_raw();
        let now = u32::try_from(pid).ok().and_then(crate::session::start_time);
        if pid != init_pid || now.is_some_and(|t| t != start) {
            return Err(OciError::NotOurInit {
                id: id.to_string(),
                pid,
                init: init_pid,
            });
        }
    }
    c.refresh_status()
        .map_err(rt("refreshing the container status"))?;
    Ok(c)
}

fn status_str(s: ContainerStatus) -> &'static str {
    match s {
        ContainerStatus::Creating => "creating",
        ContainerStatus::Created => "created",
        ContainerStatus::Running => "running",
        ContainerStatus::Stopped => "stopped",
        ContainerStatus::Paused => "paused",
    }
}

/// The OCI state of a container (runtime spec "State", plus runc's `rootfs`/`created`).
fn state_json(root: &Path, c: &Container) -> Value {
    let shim = ShimState::load(root, c.id()).ok();
    let status = status_str(c.status());
    let pid = match c.status() {
        ContainerStatus::Stopped => 0,
        _ => c.pid().map_or(0, |p| p.as_raw()),
    };
    let mut annotations = c.state.annotations.clone().unwrap_or_default();
    if let Some(p) = shim.as_ref().and_then(|s| s.plan.as_ref()) {
        annotations
            .entry(vetto_bundle::container::POLICY_ANNOTATION.to_string())
            .or_insert_with(|| p.policy.clone());
    }
    json!({
        "ociVersion": "1.0.2",
        "id": c.id(),
        "status": status,
        "pid": pid,
        "bundle": shim.as_ref().map_or_else(|| c.bundle().clone(), |s| s.bundle.clone()),
        "rootfs": shim.as_ref().map(|s| s.rootfs.clone()),
        "created": c.created().map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Nanos, true)),
        "owner": "",
        "annotations": annotations,
    })
}

/// Removes what a failed `create` left: libcontainer's state and the shadow bundle.
fn cleanup(root: &Path, id: &str) {
    if let Ok(mut c) = Container::load(root.join(id)) {
        let _ = c.delete(true);
    }
    let _ = std::fs::remove_dir_all(root.join(id));
    forget(root, id);
}

struct CreateArgs<'a> {
    id: &'a str,
    bundle: &'a Path,
    console_socket: Option<&'a Path>,
    pid_file: Option<&'a Path>,
    preserve_fds: i32,
    no_pivot: bool,
    cgroup_view: bool,
    policy_dir: Option<&'a Path>,
}

impl<'a> CreateArgs<'a> {
    fn new(a: &'a liboci_cli::Create, cgroup_view: bool, policy_dir: Option<&'a Path>) -> Self {
        CreateArgs {
            policy_dir,
            id: &a.container_id,
            bundle: &a.bundle,
            console_socket: a.console_socket.as_deref(),
            pid_file: a.pid_file.as_deref(),
            preserve_fds: a.preserve_fds,
            no_pivot: a.no_pivot,
            cgroup_view,
        }
    }
}

fn create(
    g: &GlobalOpts,
    root: &Path,
    host_policy: Option<&str>,
    log: &Logger,
    a: &CreateArgs<'_>,
) -> Result<Container, OciError> {
    if g.systemd_cgroup {
        return Err(OciError::Unsupported(
            "the systemd cgroup driver (--systemd-cgroup); use cgroupfs",
        ));
    }
    check_id(a.id)?;
    if root.join(a.id).exists() || shim_dir(root, a.id).exists() {
        return Err(OciError::Exists(a.id.to_string()));
    }
    let prepared = prepare::prepare(
        a.id,
        a.bundle,
        root,
        host_policy,
        a.policy_dir,
        a.cgroup_view,
    )?;
    log.debug(&format!("create {}: {}", a.id, prepared.summary));
    if prepared.state.restore_caps.is_some() {
        log.debug("capabilities widened until the seccomp profile is installed");
    }
    let built = ContainerBuilder::new(a.id.to_string(), SyscallType::default())
        .with_root_path(root)
        .map_err(rt("state root"))
        .and_then(|b| b.with_pid_file(a.pid_file).map_err(rt("pid file")))
        .and_then(|b| {
            b.with_executor(prepared.executor)
                .with_console_socket(a.console_socket)
                .with_preserved_fds(a.preserve_fds)
                .validate_id()
                .map_err(rt("container id"))
        })
        .and_then(|b| {
            b.as_init(&prepared.dir)
                .with_systemd(false)
                .with_detach(true)
                .with_no_pivot(a.no_pivot)
                .build()
                .map_err(rt("create"))
        });
    let c = match built {
        Ok(c) => c,
        Err(e) => {
            cleanup(root, a.id);
            return Err(e);
        }
    };
    // The init's identity, for every later command to check what state.json says.
    let mut st = prepared.state.clone();
    st.init = c.pid().and_then(|p| {
        let start = u32::try_from(p.as_raw())
            .ok()
            .and_then(crate::session::start_time)?;
        Some((p.as_raw(), start))
    });
    if let Err(e) = st.save(root, a.id) {
        cleanup(root, a.id);
        return Err(e);
    }
    if let Some(net) = prepared
        .state
        .plan
        .as_ref()
        .and_then(|p| p.network.as_ref())
    {
        let attached = c
            .pid()
            .ok_or_else(|| OciError::Config("network broker: the container has no init".into()))
            .and_then(|pid| network::attach(pid.as_raw(), net, &prepared.dir));
        match attached {
            Ok(broker) => {
                st.broker_pid = Some(broker);
                if let Err(e) = st.save(root, a.id) {
                    network::stop(broker);
                    cleanup(root, a.id);
                    return Err(e);
                }
                log.debug(&format!("network broker {broker} attached"));
            }
            Err(e) => {
                cleanup(root, a.id);
                return Err(e);
            }
        }
    }
    Ok(c)
}

/// Removes vetto's part of a container: its broker and its record and shadow bundle.
fn forget(root: &Path, id: &str) {
    if let Some(pid) = ShimState::load(root, id).ok().and_then(|s| s.broker_pid) {
        network::stop(pid);
    }
    let _ = std::fs::remove_dir_all(shim_dir(root, id));
}

fn wait_exit(pid: i32) -> u8 {
    let mut status = 0;
    loop {
        // SAFETY: status is a valid out pointer.
        let r = unsafe { libc::waitpid(pid, &mut status, 0) };
        if r == pid {
            return u8::try_from(vetto_hooks::init::exit_status(status)).unwrap_or(255);
        }
        if r < 0 && std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            return 255;
        }
    }
}

fn exec(root: &Path, log: &Logger, a: liboci_cli::Exec) -> Result<u8, OciError> {
    let c = load(root, &a.container_id)?;
    if !c.can_exec() {
        return Err(OciError::Config(format!(
            "container \"{}\" is {}: cannot exec",
            a.container_id,
            status_str(c.status())
        )));
    }
    let shim = ShimState::load(root, &a.container_id)?;
    let refuse_caps = |caps: Vec<String>| -> Result<(), OciError> {
        match (&shim.plan, caps.is_empty()) {
            (Some(p), false) => Err(OciError::Config(format!(
                "refused by vetto policy \"{}\": exec with capabilities {}",
                p.policy,
                caps.join(", ")
            ))),
            _ => Ok(()),
        }
    };
    let asked: Vec<String> = a
        .cap
        .iter()
        .map(|c| format!("CAP_{}", c.to_uppercase().trim_start_matches("CAP_")))
        .filter(|c| {
            vetto_bundle::container::PRIVILEGED_CAPS.contains(&c.as_str()) || c == "CAP_MKNOD"
        })
        .collect();
    refuse_caps(asked)?;
    // Without --process, libcontainer gives the process the container's (shadow) sets, which
    // the executor narrows back as for the init.
    let mut executor = shim.executor()?;
    let mut env: HashMap<String, String> = a.env.into_iter().collect();
    let dropped = prepare::filter_env(&shim, &mut env);
    if !dropped.is_empty() {
        log.debug(&format!(
            "exec: environment removed by policy: {}",
            dropped.join(", ")
        ));
    }
    // A process.json gets the same treatment as the init: no_new_privs where the filters
    // need it, environment filtered.
    let mut process_path = a.process.clone();
    // The rewritten process file holds the environment: removed on every path out.
    struct RemoveOnDrop(PathBuf);
    impl Drop for RemoveOnDrop {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }
    let mut tmp: Option<RemoveOnDrop> = None;
    if let Some(p) = &a.process {
        let mut v = prepare::read_json(p, "reading the process file")?;
        executor.restore_caps = None;
        if let Some(plan) = &shim.plan {
            // The same treatment as the init: canonical and non-privileged capabilities,
            // no CAP_MKNOD, no_new_privs, the environment filtered and the policy's set.
            vetto_bundle::container::harden_process(
                &mut v,
                &plan.policy,
                &plan.pass_through,
                &plan.env_set,
            )?;
        } else if shim.seccomp.is_some() {
            vetto_bundle::container::canonical_capabilities(&mut v)?;
            executor.restore_caps = prepare::prepare_caps_for_seccomp(&mut v)?;
        }
        // SAFETY: getpid has no arguments and cannot fail.
        let me = unsafe { libc::getpid() };
        let path = shim_dir(root, &a.container_id).join(format!("exec-{me}.json"));
        std::fs::write(&path, v.to_string()).map_err(|source| OciError::Io {
            what: "writing the process file",
            path: path.clone(),
            source,
        })?;
        process_path = Some(path.clone());
        tmp = Some(RemoveOnDrop(path));
    }
    // Capabilities added with --cap stay after the narrowing.
    if let Some(t) = executor.restore_caps.as_mut() {
        for c in &a.cap {
            let bit = vetto_hooks::process::cap_bit(c)
                .ok_or_else(|| OciError::Config(format!("--cap {c}: unknown capability")))?;
            t.bounding |= bit;
            t.effective |= bit;
            t.permitted |= bit;
        }
    }
    let mut b = ContainerBuilder::new(a.container_id.clone(), SyscallType::default())
        .with_root_path(root)
        .map_err(rt("state root"))?
        .with_pid_file(a.pid_file.as_ref())
        .map_err(rt("pid file"))?
        .with_console_socket(a.console_socket.as_ref())
        .with_preserved_fds(a.preserve_fds)
        .with_executor(executor)
        .validate_id()
        .map_err(rt("container id"))?
        .as_tenant()
        .with_detach(a.detach)
        .with_cwd(a.cwd.as_ref())
        .with_env(env)
        .with_process(process_path.as_ref())
        .with_container_args(a.command.clone())
        .with_additional_gids(a.additional_gids.clone())
        .with_user(a.user.map(|(u, _)| u))
        .with_group(a.user.and_then(|(_, g)| g))
        .with_ignore_paused(a.ignore_paused)
        .with_sub_cgroup(a.cgroup.clone());
    if a.no_new_privs || (a.process.is_none() && shim.plan.is_some()) {
        b = b.with_no_new_privs(true);
    }
    if !a.cap.is_empty() {
        b = b.with_capabilities(a.cap.clone());
    }
    let built = b.build();
    drop(tmp);
    let pid = built.map_err(rt("exec"))?;
    if a.detach {
        return Ok(0);
    }
    Ok(wait_exit(pid.as_raw()))
}

fn ps(root: &Path, a: &liboci_cli::Ps) -> Result<(), OciError> {
    use libcgroups::common::{CgroupConfig, CgroupManager};
    let c = load(root, &a.container_id)?;
    let cfg = c.spec().map_err(rt("reading the container's config"))?;
    let mgr = libcgroups::common::create_cgroup_manager(CgroupConfig {
        cgroup_path: cfg.cgroup_path.clone(),
        systemd_cgroup: false,
        container_name: a.container_id.clone(),
    })
    .map_err(|e| OciError::Cgroup(e.to_string()))?;
    let pids = mgr
        .get_all_pids()
        .map_err(|e| OciError::Cgroup(e.to_string()))?;
    let pids: Vec<i32> = pids.iter().map(|p| p.as_raw()).collect();
    if a.format == "json" {
        println!("{}", json!(pids));
    } else {
        println!("PID\tCMD");
        for p in pids {
            let cmd = std::fs::read_to_string(format!("/proc/{p}/cmdline"))
                .unwrap_or_default()
                .replace('\0', " ");
            println!("{p}\t{}", cmd.trim_end());
        }
    }
    Ok(())
}

fn list(root: &Path, a: &liboci_cli::List) -> Result<(), OciError> {
    let mut rows = vec![];
    if let Ok(rd) = std::fs::read_dir(root) {
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().to_string();
            if name.starts_with('.') {
                continue;
            }
            if let Ok(c) = load(root, &name) {
                rows.push(state_json(root, &c));
            }
        }
    }
    rows.sort_by(|a, b| a["id"].as_str().cmp(&b["id"].as_str()));
    if a.format == "json" {
        println!("{}", Value::Array(rows));
    } else if a.quiet {
        for r in rows {
            println!("{}", r["id"].as_str().unwrap_or(""));
        }
    } else {
        println!("ID\tPID\tSTATUS\tBUNDLE\tCREATED");
        for r in rows {
            println!(
                "{}\t{}\t{}\t{}\t{}",
                r["id"].as_str().unwrap_or(""),
                r["pid"],
                r["status"].as_str().unwrap_or(""),
                r["bundle"].as_str().unwrap_or(""),
                r["created"].as_str().unwrap_or("")
            );
        }
    }
    Ok(())
}

fn features() -> Value {
    json!({
        "ociVersionMin": "1.0.0",
        "ociVersionMax": "1.2.0",
        "hooks": ["prestart", "createRuntime", "createContainer", "startContainer", "poststart", "poststop"],
        "mountOptions": ["ro", "rw", "bind", "rbind", "nosuid", "nodev", "noexec", "private", "rprivate", "shared", "rshared", "slave", "rslave"],
        "linux": {
            "namespaces": ["cgroup", "ipc", "mount", "network", "pid", "user", "uts"],
            "capabilities": vetto_hooks::process::CAP_NAMES
                .iter()
                .map(|n| format!("CAP_{n}"))
                .collect::<Vec<_>>(),
            "cgroup": {"v1": true, "v2": true, "systemd": false, "systemdUser": false},
            "seccomp": {
                "enabled": true,
                "actions": ["SCMP_ACT_ALLOW", "SCMP_ACT_ERRNO", "SCMP_ACT_KILL", "SCMP_ACT_KILL_PROCESS", "SCMP_ACT_KILL_THREAD", "SCMP_ACT_LOG", "SCMP_ACT_TRACE", "SCMP_ACT_TRAP"],
                "operators": ["SCMP_CMP_EQ", "SCMP_CMP_GE", "SCMP_CMP_GT", "SCMP_CMP_LE", "SCMP_CMP_LT", "SCMP_CMP_MASKED_EQ", "SCMP_CMP_NE"],
                "archs": ["SCMP_ARCH_X86_64"]
            },
            "apparmor": {"enabled": false},
            "selinux": {"enabled": false}
        },
        "annotations": {
            "dev.vetto.policy": "a built-in profile name, an absolute path to a host-owned policy file, or \"none\"",
            "org.opencontainers.runc.version": "compatible command line; not runc"
        }
    })
}

fn spec_cmd(a: &liboci_cli::Spec) -> Result<(), OciError> {
    let dir = a.bundle.clone().unwrap_or_else(|| PathBuf::from("."));
    let path = dir.join("config.json");
    if path.exists() {
        return Err(OciError::Config(format!(
            "{} exists: remove it first",
            path.display()
        )));
    }
    let mut spec = serde_json::to_value(libcontainer::oci_spec::runtime::Spec::default())
        .map_err(|e| OciError::Config(e.to_string()))?;
    spec["process"]["terminal"] = Value::Bool(false);
    if a.rootless {
        // SAFETY: getuid/getgid have no arguments and cannot fail.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        let linux = &mut spec["linux"];
        // Unlike runc's, the network namespace stays (a user namespace may own one, and
        // then mount a fresh sysfs): vetto's policies refuse the host's network.
        if let Some(ns) = linux["namespaces"].as_array_mut() {
            ns.push(json!({"type": "user"}));
        }
        linux["uidMappings"] = json!([{"containerID": 0, "hostID": uid, "size": 1}]);
        linux["gidMappings"] = json!([{"containerID": 0, "hostID": gid, "size": 1}]);
        if let Some(r) = linux.as_object_mut() {
            r.remove("resources");
        }
        if let Some(ms) = spec["mounts"].as_array_mut() {
            for m in ms.iter_mut() {
                if let Some(opts) = m["options"].as_array_mut() {
                    opts.retain(|o| o != "gid=5");
                }
            }
        }
    }
    let text = serde_json::to_string_pretty(&spec).map_err(|e| OciError::Config(e.to_string()))?;
    std::fs::write(&path, text).map_err(|source| OciError::Io {
        what: "writing config.json",
        path,
        source,
    })
}

/// Rootless: the host's cgroups are not ours to create (cgroup v1, or v2 without delegation).
/// Like `vetto run`, show libcontainer a read-only cgroup2 hierarchy in a private mount
/// namespace of this process: it then creates no cgroup. Resource limits of the bundle are
/// not applied and `pause` has no freezer (the same as Podman's rootless cgroup-v1 mode).
fn rootless_cgroup_view(log: &Logger) -> Result<(), OciError> {
    // SAFETY: unshare of the mount namespace, single-threaded process.
    if unsafe { libc::unshare(libc::CLONE_NEWNS) } != 0 {
        return Err(OciError::Config(format!(
            "rootless: cannot create a mount namespace: {}",
            std::io::Error::last_os_error()
        )));
    }
    crate::userns::read_only_cgroup_view()
        .map_err(|e| OciError::Config(format!("rootless: {e:#}")))?;
    log.debug("rootless: no cgroups (read-only cgroup2 view)");
    Ok(())
}

fn dispatch(cli: Cli, log: &Logger) -> Result<u8, OciError> {
    let g = &cli.global;
    let host_policy = cli.vetto_policy.as_deref();
    let policy_dir = cli.vetto_policy_dir.as_deref();
    let needs_state = !matches!(
        cli.cmd,
        Cmd::Common(CommonCmd::Features(_)) | Cmd::Common(CommonCmd::Spec(_))
    );
    let in_userns = rootless();
    // SAFETY: geteuid has no arguments and cannot fail.
    if needs_state && unsafe { libc::geteuid() } != 0 && !in_userns {
        return Err(OciError::Unsupported(
            "running as an unprivileged user outside a user namespace (use rootless Podman, \
             which runs the runtime in the user's namespace, `unshare -Ur vetto-shim ...`, \
             or `vetto run`)",
        ));
    }
    let cgroup_view = needs_state && in_userns && !cgroups_writable();
    if cgroup_view {
        rootless_cgroup_view(log)?;
    }
    // Made and checked once, for every command that keeps state.
    let root = match needs_state {
        true => state_root(g, in_userns)?,
        false => PathBuf::new(),
    };
    match cli.cmd {
        Cmd::Standard(StandardCmd::Create(a)) => {
            create(
                g,
                &root,
                host_policy,
                log,
                &CreateArgs::new(&a, cgroup_view, policy_dir),
            )?;
        }
        Cmd::Standard(StandardCmd::Start(a)) => {
            let mut c = load(&root, &a.container_id)?;
            c.start().map_err(rt("start"))?;
        }
        Cmd::Standard(StandardCmd::State(a)) => {
            let c = load(&root, &a.container_id)?;
            let text = serde_json::to_string_pretty(&state_json(&root, &c))
                .map_err(|e| OciError::Config(e.to_string()))?;
            println!("{text}");
        }
        Cmd::Standard(StandardCmd::Kill(a)) => {
            let mut c = load(&root, &a.container_id)?;
            if c.status() == ContainerStatus::Stopped {
                // runc's wording: containerd and Docker match on it.
                return Err(OciError::Config("container not running".into()));
            }
            let sig = Signal::try_from(a.signal.as_str())
                .map_err(|e| OciError::Config(format!("signal {:?}: {e}", a.signal)))?;
            c.kill(sig, a.all).map_err(rt("kill"))?;
        }
        Cmd::Standard(StandardCmd::Delete(a)) => {
            check_id(&a.container_id)?;
            match load(&root, &a.container_id) {
                Ok(mut c) => {
                    c.delete(a.force).map_err(rt("delete"))?;
                    forget(&root, &a.container_id);
                }
                Err(OciError::NotFound(_)) if a.force => {
                    forget(&root, &a.container_id);
                }
                // The recorded init is gone (so is its PID namespace); the pid in the state
                // is someone else's: remove the state without signalling anyone.
                Err(e @ OciError::NotOurInit { .. }) if a.force => {
                    log.debug(&format!("delete --force: {e}; removing the state only"));
                    // The init this runtime recorded, if it is still that process, goes
                    // (with it, its PID namespace).
                    if let Some((pid, start)) = ShimState::load(&root, &a.container_id)
                        .ok()
                        .and_then(|s| s.init)
                    {
                        let now = u32::try_from(pid).ok().and_then(crate::session::start_time);
                        if now == Some(start) {
                            // SAFETY: kill with integers, on the process whose identity
                            // (pid and start time) create recorded.
                            unsafe { libc::kill(pid, libc::SIGKILL) };
                        }
                    }
                    let _ = std::fs::remove_dir_all(root.join(&a.container_id));
                    forget(&root, &a.container_id);
                }
                Err(e) => return Err(e),
            }
        }
        Cmd::Common(CommonCmd::Run(a)) => {
            let as_create = liboci_cli::Create {
                bundle: a.bundle.clone(),
                console_socket: a.console_socket.clone(),
                pid_file: a.pid_file.clone(),
                no_pivot: a.no_pivot,
                no_new_keyring: a.no_new_keyring,
                preserve_fds: a.preserve_fds,
                container_id: a.container_id.clone(),
            };
            let mut c = create(
                g,
                &root,
                host_policy,
                log,
                &CreateArgs::new(&as_create, cgroup_view, policy_dir),
            )?;
            if let Err(e) = c.start() {
                cleanup(&root, &a.container_id);
                return Err(rt("start")(e));
            }
            if a.detach {
                return Ok(0);
            }
            let code = wait_exit(c.pid().map_or(-1, |p| p.as_raw()));
            if !a.keep {
                let _ = c.delete(true);
                forget(&root, &a.container_id);
            }
            return Ok(code);
        }
        Cmd::Common(CommonCmd::Exec(a)) => return exec(&root, log, a),
        Cmd::Common(CommonCmd::Ps(a)) => ps(&root, &a)?,
        Cmd::Common(CommonCmd::Pause(a)) => {
            load(&root, &a.container_id)?.pause().map_err(rt("pause"))?;
        }
        Cmd::Common(CommonCmd::Resume(a)) => {
            load(&root, &a.container_id)?
                .resume()
                .map_err(rt("resume"))?;
        }
        Cmd::Common(CommonCmd::List(a)) => list(&root, &a)?,
        Cmd::Common(CommonCmd::Features(_)) => println!("{:#}", features()),
        Cmd::Common(CommonCmd::Spec(a)) => spec_cmd(&a)?,
        Cmd::Common(CommonCmd::Events(_)) => return Err(OciError::Unsupported("events")),
        Cmd::Common(CommonCmd::Update(_)) => return Err(OciError::Unsupported("update")),
        Cmd::Common(CommonCmd::Checkpointt(_)) => return Err(OciError::Unsupported("checkpoint")),
    }
    Ok(0)
}

/// Finds `--log`/`--log-format` in raw arguments, for errors before parsing succeeds.
fn raw_log_args(args: &[String]) -> (Option<PathBuf>, Option<String>) {
    let mut log = None;
    let mut fmt = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if let Some(v) = a.strip_prefix("--log=") {
            log = Some(PathBuf::from(v));
        } else if a == "--log" || a == "-l" {
            log = it.next().map(PathBuf::from);
        } else if let Some(v) = a.strip_prefix("--log-format=") {
            fmt = Some(v.to_string());
        } else if a == "--log-format" {
            fmt = it.next().cloned();
        }
    }
    (log, fmt)
}

/// Set in the environment of the re-executed runtime: never re-execute twice.
const SEALED_ENV: &str = "_VETTO_SHIM_READ_ONLY_EXE";

fn exe_on_read_only_mount() -> bool {
    // SAFETY: statvfs fills a zeroed struct we own; the magic link names the running file.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: valid C string and out pointer.
    let r = unsafe { libc::statvfs(c"/proc/self/exe".as_ptr(), &mut st) };
    r == 0 && st.f_flag & libc::ST_RDONLY != 0
}

/// CVE-2019-5736 class: while libcontainer's clone of this process runs inside a container
/// (the init before `execve`, an `exec`), a container process could keep `/proc/<pid>/exe`
/// and, once this runtime has exited, reopen it for writing and overwrite the host's binary.
/// Before `create`, `run` and `exec`, the runtime re-executes itself from a read-only mount of
/// its own binary, so that reopening fails with EROFS. No copy is made (runc copies itself
/// into a sealed memfd):
/// 1. a detached read-only clone of the binary's mount (`open_tree(OPEN_TREE_CLONE)` +
///    `mount_setattr(MOUNT_ATTR_RDONLY)`) and `execveat` from it: no namespace changes;
/// 2. where that is not permitted (a user namespace that does not own the mount
///    namespace), a private mount namespace (slave of the current one) with a read-only
///    bind of the binary, and `execv`.
fn reexec_from_read_only_binary(args: &[String]) -> Result<(), OciError> {
    let fail = |what: &str| {
        OciError::Config(format!(
            "sealing the runtime binary: {what}: {}",
            std::io::Error::last_os_error()
        ))
    };
    if exe_on_read_only_mount() {
        std::env::remove_var(SEALED_ENV);
        return Ok(());
    }
    if std::env::var_os(SEALED_ENV).is_some() {
        return Err(OciError::Config(
            "sealing the runtime binary: re-executed, but its mount is still writable".into(),
        ));
    }
    let exe = std::fs::read_link("/proc/self/exe").map_err(|_| fail("readlink /proc/self/exe"))?;
    let c_exe = std::ffi::CString::new(exe.as_os_str().as_encoded_bytes())
        .map_err(|_| OciError::Config("sealing the runtime binary: NUL in its path".into()))?;
    let argv: Vec<std::ffi::CString> = args
        .iter()
        .map(|a| std::ffi::CString::new(a.as_bytes()))
        .collect::<Result<_, _>>()
        .map_err(|_| OciError::Config("NUL byte in an argument".into()))?;
    let mut argv_p: Vec<*const libc::c_char> = argv.iter().map(|a| a.as_ptr()).collect();
    argv_p.push(std::ptr::null());
    let mut env: Vec<std::ffi::CString> = std::env::vars_os()
        .filter_map(|(k, v)| {
            let mut kv = k.into_encoded_bytes();
            kv.push(b'=');
            kv.extend(v.into_encoded_bytes());
            std::ffi::CString::new(kv).ok()
        })
        .collect();
    env.push(std::ffi::CString::new(format!("{SEALED_ENV}=1")).unwrap_or_default());
    let mut envp: Vec<*const libc::c_char> = env.iter().map(|e| e.as_ptr()).collect();
    envp.push(std::ptr::null());

    // 1. Detached read-only clone (where it fails, step 2 follows).
    use vetto_hooks::mounts::{clone_tree, set_attr, MOUNT_ATTR_RDONLY};
    if let Ok(tree) = clone_tree(libc::AT_FDCWD, &c_exe, false, &exe) {
        if set_attr(&tree, MOUNT_ATTR_RDONLY, false, &exe).is_ok() {
            // SAFETY: execveat on our descriptor with NUL-terminated arrays that outlive the
            // call; it returns only on failure.
            unsafe {
                libc::syscall(
                    libc::SYS_execveat,
                    std::os::fd::AsRawFd::as_raw_fd(&tree),
                    c"".as_ptr(),
                    argv_p.as_ptr(),
                    envp.as_ptr(),
                    libc::AT_EMPTY_PATH,
                );
            }
        }
    }
    // 2. A private mount namespace with a read-only bind.
    // SAFETY: unshare of this single-threaded process's mount namespace.
    if unsafe { libc::unshare(libc::CLONE_NEWNS) } != 0 {
        return Err(fail("unshare(CLONE_NEWNS)"));
    }
    // SAFETY: valid C strings and null pointers where allowed; this changes only the new
    // mount namespace.
    let slave = unsafe {
        libc::mount(
            std::ptr::null(),
            c"/".as_ptr(),
            std::ptr::null(),
            libc::MS_REC | libc::MS_SLAVE,
            std::ptr::null(),
        )
    };
    if slave != 0 {
        return Err(fail("making / a slave mount"));
    }
    crate::userns::bind_read_only(&c_exe, &c_exe)
        .map_err(|e| OciError::Config(format!("sealing the runtime binary: {e:#}")))?;
    // SAFETY: NUL-terminated arrays that outlive the call.
    unsafe { libc::execve(c_exe.as_ptr(), argv_p.as_ptr(), envp.as_ptr()) };
    Err(fail(&format!("re-executing {}", exe.display())))
}

/// Entry point of the `vetto-shim` binary.
pub fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("__broker") {
        // The network broker of a hardened container (started by `create`, never by hand);
        // one line per connection to its log (`.vetto/<id>/broker.log`).
        let _ = tracing_subscriber::fmt()
            .with_writer(std::io::stderr)
            .with_ansi(false)
            .with_env_filter(tracing_subscriber::EnvFilter::new("info"))
            .try_init();
        return match crate::broker_cmd::run() {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("vetto-shim: {e:#}");
                ExitCode::from(1)
            }
        };
    }
    let cli = match Cli::try_parse_from(&args) {
        Ok(c) => c,
        Err(e) => {
            if matches!(
                e.kind(),
                clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion
            ) {
                let _ = e.print();
                return ExitCode::SUCCESS;
            }
            let (path, fmt) = raw_log_args(&args);
            Logger::open(path.as_deref(), fmt.as_deref(), false)
                .error(e.to_string().lines().next().unwrap_or("bad arguments"));
            let _ = e.print();
            return ExitCode::from(2);
        }
    };
    // SAFETY: restoring one default disposition before any thread exists.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    if std::env::var_os("VETTO_SHIM_TRACE").is_some() {
        let _ = tracing_subscriber::fmt()
            .with_writer(std::io::stderr)
            .with_env_filter(tracing_subscriber::EnvFilter::new("debug"))
            .try_init();
    }
    let log = Logger::open(
        cli.global.log.as_deref(),
        cli.global.log_format.as_deref(),
        cli.global.debug,
    );
    let clones_enter_containers = matches!(
        cli.cmd,
        Cmd::Standard(StandardCmd::Create(_))
            | Cmd::Common(CommonCmd::Run(_))
            | Cmd::Common(CommonCmd::Exec(_))
    );
    // SAFETY: geteuid has no arguments and cannot fail.
    let can_mount = unsafe { libc::geteuid() } == 0;
    if clones_enter_containers && can_mount {
        if let Err(e) = reexec_from_read_only_binary(&args) {
            log.error(&e.to_string());
            return ExitCode::from(1);
        }
    }
    match dispatch(cli, &log) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            log.error(&e.to_string());
            ExitCode::from(1)
        }
    }
}
