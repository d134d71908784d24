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
//!
//! One file per command, as youki's `commands/`: [`create`] (and `run`), [`start`], [`exec`],
//! [`kill`], [`delete`], [`state`] (and `list`), [`ps`], [`pause`] (and `resume`), [`spec`]
//! (and `features`); [`reexec`] is the binary re-exec guard, [`prepare`] the shadow bundle and
//! vetto's record, [`network`] the broker of a hardened container, [`audit`] its audit
//! trail. Every one of them reaches libcontainer only through [`crate::engine`].

mod audit;
mod claim;
mod create;
mod delete;
mod exec;
mod hook_relay;
mod kill;
mod log;
mod network;
mod pause;
mod prepare;
mod ps;
mod reexec;
mod spec;
mod start;
mod state;
mod update;

use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use liboci_cli::{CommonCmd, GlobalOpts, StandardCmd};

use self::create::CreateArgs;
use self::log::Logger;
use self::prepare::ShimState;
use crate::engine::{self, EngineError, Sandbox, Status};

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
    /// The network broker of a hardened container could not be attached.
    #[error("network broker: {what}")]
    Network {
        /// Which step.
        what: &'static str,
        /// Why.
        #[source]
        source: anyhow::Error,
    },
    /// vetto's deny-list could not be compiled.
    #[error("vetto seccomp deny-list: {0}")]
    DenyList(#[from] vetto_hooks::seccomp::SeccompError),
    /// The engine (libcontainer) failed.
    #[error(transparent)]
    Engine(#[from] EngineError),
    /// A hardened container's audit record could not be written: a session that cannot be
    /// recorded does not run, so the container is not created.
    #[error("audit: the container cannot be recorded, so it is not created")]
    Audit(#[source] vetto_broker::audit::AuditError),
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
}

/// Entry point for the `oci_config` fuzz target in `fuzz/` (not part of the API).
#[doc(hidden)]
pub mod fuzzing {
    use std::path::{Path, PathBuf};

    pub use super::OciError;

    /// `create`'s first half, [`super::prepare::prepare`], on the bundle directory `bundle`
    /// (its `config.json` as the caller wrote it), with the cgroupfs driver (the systemd
    /// one with `systemd`), messages to stderr only: the shadow bundle's directory, or the
    /// error `create` would report. The host configuration is read as `vetto-shim` reads it
    /// (`$VETTO_SHIM_CONFIG`).
    pub fn prepare(
        id: &str,
        bundle: &Path,
        root: &Path,
        runtime_policy: Option<&str>,
        policy_dir: Option<&Path>,
        systemd: bool,
    ) -> Result<PathBuf, OciError> {
        let log = super::log::Logger::open(None, None, false);
        let cgroups = match systemd {
            true => super::Cgroups::Systemd,
            false => super::Cgroups::Cgroupfs,
        };
        super::prepare::prepare(id, bundle, root, runtime_policy, policy_dir, cgroups, &log)
            .map(|p| p.dir)
    }
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
/// The state root: `--root`, else `/run/vetto-shim` for root, else
/// `$XDG_RUNTIME_DIR/vetto-shim` (or `/tmp/vetto-shim-UID`).
fn state_root(g: &GlobalOpts, in_userns: bool) -> Result<PathBuf, OciError> {
    let root = match &g.root {
        Some(r) => r.clone(),
        None => {
            let uid = nix::unistd::geteuid().as_raw();
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
    let me = nix::unistd::geteuid().as_raw();
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
/// How the container's cgroup is made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Cgroups {
    /// Directories under `/sys/fs/cgroup` (runc's default driver).
    Cgroupfs,
    /// A transient systemd scope (`--systemd-cgroup`; `slice:prefix:name` paths).
    Systemd,
    /// None: a rootless caller that cannot create cgroups (see [`rootless_cgroup_view`]).
    ReadOnlyView,
}

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
            nix::unistd::access(&dir, nix::unistd::AccessFlags::W_OK).is_ok()
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

/// Loads container `id`, refusing a state that is not ours or names another process.
fn load(root: &Path, id: &str) -> Result<Sandbox, OciError> {
    check_id(id)?;
    let dir = root.join(id);
    if !dir.join("state.json").exists() {
        return Err(OciError::NotFound(id.to_string()));
    }
    // What exec, kill and delete act on comes from these files: they must be ours, and the
    // pid they name must still be the init this runtime created (not a host process a
    // tampered state.json points at).
    prepare::private_file(&dir.join("state.json"))?;
    let c = engine::load(&dir)?;
    let record = match ShimState::load(root, id) {
        Ok(s) => s.init,
        Err(OciError::NotFound(_)) => None,
        Err(e) => return Err(e),
    };
    if let (Some(pid), Some((init_pid, start))) = (c.pid(), record) {
        let now = u32::try_from(pid).ok().and_then(crate::session::start_time);
        if pid != init_pid || now.is_some_and(|t| t != start) {
            return Err(OciError::NotOurInit {
                id: id.to_string(),
                pid,
                init: init_pid,
            });
        }
    }
    Ok(c)
}

fn status_str(s: Status) -> &'static str {
    match s {
        Status::Creating => "creating",
        Status::Created => "created",
        Status::Running => "running",
        Status::Stopped => "stopped",
        Status::Paused => "paused",
    }
}

/// Rootless: the host's cgroups are not ours to create (cgroup v1, or v2 without delegation).
/// Like `vetto run`, show libcontainer a read-only cgroup2 hierarchy in a private mount
/// namespace of this process: it then creates no cgroup. Resource limits of the bundle are
/// not applied and `pause` has no freezer (the same as Podman's rootless cgroup-v1 mode).
fn rootless_cgroup_view(log: &Logger) -> Result<(), OciError> {
    nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNS)
        .map_err(|e| OciError::Config(format!("rootless: cannot create a mount namespace: {e}")))?;
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
    if needs_state && !nix::unistd::geteuid().is_root() && !in_userns {
        return Err(OciError::Unsupported(
            "running as an unprivileged user outside a user namespace (use rootless Podman, \
             which runs the runtime in the user's namespace, `unshare -Ur vetto-shim ...`, \
             or `vetto run`)",
        ));
    }
    // The caller's driver: systemd (`--systemd-cgroup`, a `slice:prefix:name` path; rootless,
    // through the user's own systemd), else cgroupfs, or for a rootless caller that cannot
    // create cgroups, none at all.
    let cgroups = if g.systemd_cgroup {
        Cgroups::Systemd
    } else if needs_state && in_userns && !cgroups_writable() {
        Cgroups::ReadOnlyView
    } else {
        Cgroups::Cgroupfs
    };
    if cgroups == Cgroups::ReadOnlyView {
        rootless_cgroup_view(log)?;
    }
    // Made and checked once, for every command that keeps state.
    let root = match needs_state {
        true => state_root(g, in_userns)?,
        false => PathBuf::new(),
    };
    match cli.cmd {
        Cmd::Standard(StandardCmd::Create(a)) => {
            let args = CreateArgs {
                a: &a,
                cgroups,
                policy_dir,
            };
            create::create(&root, host_policy, log, &args)?;
        }
        Cmd::Standard(StandardCmd::Start(a)) => start::start(&root, &a.container_id)?,
        Cmd::Standard(StandardCmd::State(a)) => state::state(&root, &a.container_id)?,
        Cmd::Standard(StandardCmd::Kill(a)) => kill::kill(&root, &a)?,
        Cmd::Standard(StandardCmd::Delete(a)) => delete::delete(&root, log, &a)?,
        Cmd::Common(CommonCmd::Run(a)) => {
            return create::run(&root, host_policy, log, &a, cgroups, policy_dir)
        }
        Cmd::Common(CommonCmd::Exec(a)) => return exec::exec(&root, log, a),
        Cmd::Common(CommonCmd::Ps(a)) => ps::ps(&root, &a)?,
        Cmd::Common(CommonCmd::Pause(a)) => pause::pause(&root, &a.container_id)?,
        Cmd::Common(CommonCmd::Resume(a)) => pause::resume(&root, &a.container_id)?,
        Cmd::Common(CommonCmd::List(a)) => state::list(&root, &a)?,
        Cmd::Common(CommonCmd::Features(_)) => println!("{:#}", spec::features()),
        Cmd::Common(CommonCmd::Spec(a)) => spec::spec_cmd(&a)?,
        Cmd::Common(CommonCmd::Events(a)) => update::events(&root, &a)?,
        Cmd::Common(CommonCmd::Update(a)) => update::update(&root, &a)?,
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
    if args.get(1).map(String::as_str) == Some(hook_relay::RELAY_ARG) {
        // A bundle hook, run by libcontainer through the relay (see `hook_relay`).
        return hook_relay::main(&args[2..]);
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
    let can_mount = nix::unistd::geteuid().is_root();
    if clones_enter_containers && can_mount {
        if let Err(e) = reexec::reexec_from_read_only_binary(&args) {
            log.error(&vetto_broker::error_chain(&e));
            return ExitCode::from(1);
        }
    }
    match dispatch(cli, &log) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            log.error(&vetto_broker::error_chain(&e));
            ExitCode::from(1)
        }
    }
}
