//! The one wrapper around libcontainer: every `ContainerBuilder` and `Container` of both
//! binaries is here. `vetto run` ([`crate::run`]) and every `vetto-shim` command
//! ([`crate::oci`]) create, exec, start, signal, pause and delete through these functions;
//! what differs between them is data:
//!
//! - [`Mode`]: `vetto run`'s init is supervised (PDEATHSIG armed early, the hardening applied right
//!   before PID 1 forks the command, errors written to a pipe); `vetto-shim`'s is detached
//!   (the hardening applied in `validate()`, so a failure fails `create` with its reason,
//!   and the process `execvp`s `process.args`);
//! - [`CreateOptions`] / [`ExecOptions`]: console socket, pid file, preserved descriptors,
//!   `--no-pivot`, the cgroup driver, and everything `exec` passes;
//! - the [`Hardening`] both kinds of process apply through [`vetto_hooks::apply`], the one
//!   hardening order.
//!
//! libcontainer clones this process and `chdir`s it: call it only from a single-threaded
//! process, from the thread that lives as long as the sandbox (PDEATHSIG follows the parent
//! thread).

use std::collections::HashMap;
use std::ffi::CString;
use std::os::fd::RawFd;
use std::path::Path;

use libcontainer::container::builder::ContainerBuilder;
use libcontainer::container::{Container, ContainerStatus};
use libcontainer::oci_spec::runtime::Spec;
use libcontainer::signal::Signal;
use libcontainer::syscall::syscall::SyscallType;
use libcontainer::workload::{Executor, ExecutorError, ExecutorValidationError};
use nix::unistd::Pid;
use vetto_hooks::apply::{self, Hardening};
use vetto_hooks::init::{self, InitConfig};

/// Errors of the engine.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// libcontainer refused or failed.
    #[error("{step}: {source}")]
    Runtime {
        /// Which step.
        step: &'static str,
        /// libcontainer's error (boxed: with the systemd driver it is large).
        #[source]
        source: Box<libcontainer::error::LibcontainerError>,
    },
    /// The container has no pid after start.
    #[error("the container has no init process")]
    NoPid,
    /// A signal name libcontainer does not know.
    #[error("signal {name:?}: {source}")]
    Signal {
        /// What was asked.
        name: String,
        /// Why not.
        #[source]
        source: libcontainer::signal::SignalError<String>,
    },
    /// A step on the container's cgroup failed.
    #[error("{step}: {message}")]
    Cgroup {
        /// Which step.
        step: &'static str,
        /// The cgroup library's error.
        message: String,
    },
}

fn rt(step: &'static str) -> impl FnOnce(libcontainer::error::LibcontainerError) -> EngineError {
    move |source| EngineError::Runtime {
        step,
        source: Box::new(source),
    }
}

/// How the container's process runs after libcontainer's setup.
#[derive(Debug, Clone, Copy)]
pub enum Mode {
    /// `vetto run`: PID 1 of a supervised sandbox. PDEATHSIG is armed as the hardening's
    /// `parent_death` step says (with the supervisor's pidfd), also in `validate()`.
    Supervised {
        /// The command's stdio is a pseudo-terminal.
        tty: bool,
        /// Write end of the pipe setup errors are reported on.
        error_fd: Option<RawFd>,
        /// Write end of the pipe PID 1 reports the command's exit code on, once the rest of
        /// the sandbox is reaped ([`InitConfig::status_fd`]).
        status_fd: Option<RawFd>,
        /// The session's pids cgroup's `tasks` (v1) or `cgroup.procs` (v2), opened by the
        /// supervisor as host root: the init writes `0` to it in `validate()`, moving itself
        /// in before it forks anything ([`crate::pids::PidsCgroup::join_fd`]).
        pids_cgroup: Option<RawFd>,
    },
    /// `vetto-shim`: a detached container (or an `exec`'d process) whose caller reaps it.
    Detached,
}

/// Runs inside the container's process, after libcontainer's setup.
#[derive(Clone)]
struct VettoExecutor {
    hardening: Hardening,
    mode: Mode,
    /// A container's init: libcontainer has swapped the caller's /dev/null stdio for a
    /// read-only one, to be made read-write again. (It leaves a tenant's stdio alone.)
    reopen_null: bool,
}

fn report(mode: Mode, msg: &str) {
    match mode {
        Mode::Supervised { error_fd, .. } => init::report(error_fd, msg),
        Mode::Detached => eprintln!("vetto-shim: {msg}"),
    }
}

impl Executor for VettoExecutor {
    fn validate(&self, spec: &Spec) -> Result<(), ExecutorValidationError> {
        let invalid = |msg: String| {
            report(self.mode, &msg);
            ExecutorValidationError::ArgValidationError(msg)
        };
        if self.reopen_null {
            vetto_hooks::stdio::reopen_dev_null().map_err(|e| invalid(e.to_string()))?;
        }
        match self.mode {
            Mode::Supervised { pids_cgroup, .. } => {
                if let Some(fd) = pids_cgroup {
                    crate::pids::join_through(fd).map_err(|e| invalid(format!("{e:#}")))?;
                }
                // Runs after libcontainer's id switch and capability drop, which would clear it.
                match self.hardening.parent_death {
                    Some(pidfd) => {
                        apply::arm_parent_death(pidfd).map_err(|e| invalid(e.to_string()))
                    }
                    None => Ok(()),
                }
            }
            // The network namespace is final here (the runtime's prestart hooks have run), and
            // libcontainer has not yet reported ready: a failure fails `create`, and the
            // bundle's startContainer hooks run restricted, as under runc.
            Mode::Detached => {
                let args = spec
                    .process()
                    .as_ref()
                    .and_then(|p| p.args().as_ref())
                    .filter(|a| !a.is_empty());
                let Some(args) = args else {
                    return Err(invalid("process.args is empty".into()));
                };
                // As runc and crun: a command that cannot be executed fails `create` (and
                // `exec`), not silently after `start` reported success.
                let env = spec
                    .process()
                    .as_ref()
                    .and_then(|p| p.env().as_ref())
                    .map(Vec::as_slice)
                    .unwrap_or_default();
                find_executable(&args[0], env).map_err(invalid)?;
                apply::apply(&self.hardening)
                    .map(drop)
                    .map_err(|e| invalid(e.to_string()))
            }
        }
    }

    fn exec(&self, spec: &Spec) -> Result<(), ExecutorError> {
        let process = spec.process().as_ref().ok_or(ExecutorError::InvalidArg)?;
        let args = process.args().clone().unwrap_or_default();
        let fail = |msg: String| {
            report(self.mode, &msg);
            ExecutorError::Other(msg)
        };
        match self.mode {
            Mode::Supervised {
                tty,
                error_fd,
                status_fd,
                ..
            } => {
                let cfg = InitConfig {
                    args,
                    env: process.env().clone().unwrap_or_default(),
                    tty,
                    error_fd,
                    status_fd,
                };
                match init::run(&self.hardening, &cfg) {
                    Ok(never) => match never {},
                    Err(e) => Err(fail(e.to_string())),
                }
            }
            Mode::Detached => {
                let argv = args
                    .iter()
                    .map(|a| CString::new(a.as_bytes()))
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|_| fail("process.args contains a NUL byte".into()))?;
                let file = argv.first().cloned().ok_or(ExecutorError::InvalidArg)?;
                // PATH is the container's: libcontainer's setup_envs replaced the environment.
                let err = match nix::unistd::execvp(&file, &argv) {
                    Ok(never) => match never {},
                    Err(e) => e,
                };
                Err(fail(format!(
                    "exec {:?}: {}",
                    args.first().map(String::as_str).unwrap_or(""),
                    err.desc()
                )))
            }
        }
    }
}

/// Where `execvp` in the container will find `name`: itself if it holds a `/`, else the
/// first match in the process's `PATH` (glibc's default without one). An error says why the
/// command cannot be run.
fn find_executable(name: &str, env: &[String]) -> Result<std::path::PathBuf, String> {
    use nix::unistd::{access, AccessFlags};
    use std::path::PathBuf;
    let runnable = |p: &Path| -> Result<(), String> {
        let m = std::fs::metadata(p).map_err(|e| format!("exec {name:?}: {}: {e}", p.display()))?;
        if !m.is_file() {
            return Err(format!(
                "exec {name:?}: {} is not a regular file",
                p.display()
            ));
        }
        access(p, AccessFlags::X_OK)
            .map_err(|e| format!("exec {name:?}: {}: {}", p.display(), e.desc()))
    };
    if name.is_empty() {
        return Err("process.args[0] is empty".into());
    }
    if name.contains('/') {
        let p = PathBuf::from(name);
        return runnable(&p).map(|()| p);
    }
    let path = env
        .iter()
        .find_map(|e| e.strip_prefix("PATH="))
        .unwrap_or("/bin:/usr/bin");
    let mut last = None;
    for dir in path.split(':') {
        let dir = if dir.is_empty() { "." } else { dir };
        let p = Path::new(dir).join(name);
        if std::fs::symlink_metadata(&p).is_err() {
            continue;
        }
        match runnable(&p) {
            Ok(()) => return Ok(p),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| format!("exec {name:?}: executable file not found in $PATH")))
}

/// What `create` and `exec` both need.
pub struct Common<'a> {
    /// The container id.
    pub id: &'a str,
    /// libcontainer's state root.
    pub state_root: &'a Path,
    /// Where libcontainer sends the pty master (a terminal was asked for).
    pub console_socket: Option<&'a Path>,
    /// Where the process's pid is written.
    pub pid_file: Option<&'a Path>,
    /// Descriptors above stdio passed in.
    pub preserve_fds: i32,
}

/// What `create` needs.
pub struct CreateOptions<'a> {
    /// Id, state root, terminal, pid file, descriptors.
    pub common: Common<'a>,
    /// The bundle directory (holds `config.json`).
    pub bundle: &'a Path,
    /// `--no-pivot`.
    pub no_pivot: bool,
    /// The systemd cgroup driver (`--systemd-cgroup`).
    pub systemd_cgroup: bool,
    /// What the process applies before the command runs.
    pub hardening: Hardening,
    /// Supervised (`vetto run`) or detached (`vetto-shim`).
    pub mode: Mode,
}

/// What `exec` needs (a process joining a running container, always detached mode).
pub struct ExecOptions<'a> {
    /// Id, state root, terminal, pid file, descriptors.
    pub common: Common<'a>,
    /// The caller does not wait.
    pub detach: bool,
    /// Working directory.
    pub cwd: Option<&'a Path>,
    /// Environment added to the container's.
    pub env: HashMap<String, String>,
    /// A `process.json` (replaces args, cwd, env…).
    pub process: Option<&'a Path>,
    /// The command.
    pub args: Vec<String>,
    /// Supplementary groups.
    pub additional_gids: Vec<u32>,
    /// uid.
    pub user: Option<u32>,
    /// gid.
    pub group: Option<u32>,
    /// Exec even if the container is paused.
    pub ignore_paused: bool,
    /// A sub-cgroup of the container's to join.
    pub sub_cgroup: Option<String>,
    /// Set `no_new_privs`.
    pub no_new_privs: bool,
    /// Capabilities added (`--cap`).
    pub capabilities: Vec<String>,
    /// What the process applies before the command runs.
    pub hardening: Hardening,
}

/// A container libcontainer knows (created, running or stopped).
pub struct Sandbox(Container);

/// The OCI status of a container.
pub type Status = ContainerStatus;

/// The builder both kinds of container process start from.
fn builder(c: &Common<'_>, executor: VettoExecutor) -> Result<ContainerBuilder, EngineError> {
    ContainerBuilder::new(c.id.to_string(), SyscallType::default())
        .with_root_path(c.state_root)
        .map_err(rt("state root"))?
        .with_pid_file(c.pid_file)
        .map_err(rt("pid file"))?
        .with_executor(executor)
        .with_console_socket(c.console_socket)
        .with_preserved_fds(c.preserve_fds)
        .validate_id()
        .map_err(rt("container id"))
}

/// Create the container from a bundle on disk. A failed create leaves libcontainer's state
/// behind (status "creating"): the caller removes it ([`remove_state`]).
pub fn create(o: CreateOptions<'_>) -> Result<Sandbox, EngineError> {
    let executor = VettoExecutor {
        hardening: o.hardening,
        mode: o.mode,
        reopen_null: true,
    };
    builder(&o.common, executor)?
        .as_init(o.bundle)
        .with_systemd(o.systemd_cgroup)
        .with_detach(true)
        .with_no_pivot(o.no_pivot)
        .build()
        .map(Sandbox)
        .map_err(rt("create"))
}

/// Start a process in a running container; returns its pid.
pub fn exec(o: ExecOptions<'_>) -> Result<i32, EngineError> {
    let executor = VettoExecutor {
        hardening: o.hardening,
        mode: Mode::Detached,
        reopen_null: false,
    };
    let mut b = builder(&o.common, executor)?
        .as_tenant()
        .with_detach(o.detach)
        .with_cwd(o.cwd)
        .with_env(o.env)
        .with_process(o.process)
        .with_container_args(o.args)
        .with_additional_gids(o.additional_gids)
        .with_user(o.user)
        .with_group(o.group)
        .with_ignore_paused(o.ignore_paused)
        .with_sub_cgroup(o.sub_cgroup);
    if o.no_new_privs {
        b = b.with_no_new_privs(true);
    }
    if !o.capabilities.is_empty() {
        b = b.with_capabilities(o.capabilities);
    }
    b.build().map(Pid::as_raw).map_err(rt("exec"))
}

/// Load a container's state from `dir` (`<state root>/<id>`), status refreshed.
pub fn load(dir: &Path) -> Result<Sandbox, EngineError> {
    let mut c = Container::load(dir.to_path_buf()).map_err(rt("loading the container state"))?;
    c.refresh_status()
        .map_err(rt("refreshing the container status"))?;
    Ok(Sandbox(c))
}

/// Remove what libcontainer keeps of container `id` under `state_root` (after a failed
/// create, or a container whose init is gone), best effort.
pub fn remove_state(state_root: &Path, id: &str) {
    if let Ok(mut c) = Container::load(state_root.join(id)) {
        let _ = c.delete(true);
    }
}

impl Sandbox {
    /// The container id.
    pub fn id(&self) -> &str {
        self.0.id()
    }

    /// Its status.
    pub fn status(&self) -> Status {
        self.0.status()
    }

    /// The init's pid (in this process's PID namespace).
    pub fn pid(&self) -> Option<i32> {
        self.0.pid().map(Pid::as_raw)
    }

    /// The bundle libcontainer was given.
    pub fn bundle(&self) -> &Path {
        self.0.bundle()
    }

    /// When it was created.
    pub fn created(&self) -> Option<chrono::DateTime<chrono::Utc>> {
        self.0.created()
    }

    /// The bundle's annotations.
    pub fn annotations(&self) -> HashMap<String, String> {
        self.0.state.annotations.clone().unwrap_or_default()
    }

    /// A process can be exec'd into it.
    pub fn can_exec(&self) -> bool {
        self.0.can_exec()
    }

    /// Start the created container; returns the init's pid.
    pub fn start(&mut self) -> Result<i32, EngineError> {
        self.0.start().map_err(rt("start"))?;
        self.pid().ok_or(EngineError::NoPid)
    }

    /// Send `signal` (a name or number) to the init, or with `all` to every process.
    pub fn kill(&mut self, signal: &str, all: bool) -> Result<(), EngineError> {
        let sig = Signal::try_from(signal).map_err(|source| EngineError::Signal {
            name: signal.to_string(),
            source,
        })?;
        self.0.kill(sig, all).map_err(rt("kill"))
    }

    /// Delete its state (with `force`, kill what runs first).
    pub fn delete(&mut self, force: bool) -> Result<(), EngineError> {
        self.0.delete(force).map_err(rt("delete"))
    }

    /// Freeze it.
    pub fn pause(&mut self) -> Result<(), EngineError> {
        self.0.pause().map_err(rt("pause"))
    }

    /// Thaw it.
    pub fn resume(&mut self) -> Result<(), EngineError> {
        self.0.resume().map_err(rt("resume"))
    }

    /// The manager of its cgroup (the driver it was created with).
    fn cgroup(&self) -> Result<libcgroups::common::AnyCgroupManager, EngineError> {
        use libcgroups::common::CgroupConfig;
        let cfg = self
            .0
            .spec()
            .map_err(rt("reading the container's config"))?;
        libcgroups::common::create_cgroup_manager(CgroupConfig {
            cgroup_path: cfg.cgroup_path.clone(),
            systemd_cgroup: self.0.systemd(),
            container_name: self.id().to_string(),
        })
        .map_err(|e| EngineError::Cgroup {
            step: "opening the container's cgroup",
            message: e.to_string(),
        })
    }

    /// Applies `resources` to its cgroup (`update`; `create` for what libcontainer leaves
    /// out, such as `disableOOMKiller`).
    pub fn apply_resources(
        &self,
        resources: &oci_spec::runtime::LinuxResources,
        disable_oom_killer: bool,
    ) -> Result<(), EngineError> {
        use libcgroups::common::{CgroupManager, ControllerOpt};
        self.cgroup()?
            .apply(&ControllerOpt {
                resources,
                freezer_state: None,
                oom_score_adj: None,
                disable_oom_killer,
            })
            .map_err(|e| EngineError::Cgroup {
                step: "applying resources to the container's cgroup",
                message: e.to_string(),
            })
    }

    /// Its cgroup's statistics (cpu, memory, pids, blkio, hugetlb).
    pub fn stats(&self) -> Result<libcgroups::stats::Stats, EngineError> {
        use libcgroups::common::CgroupManager;
        self.cgroup()?.stats().map_err(|e| EngineError::Cgroup {
            step: "reading the container's cgroup statistics",
            message: e.to_string(),
        })
    }

    /// The pids in its cgroup.
    pub fn processes(&self) -> Result<Vec<i32>, EngineError> {
        use libcgroups::common::CgroupManager;
        let mgr = self.cgroup()?;
        let pids = mgr.get_all_pids().map_err(|e| EngineError::Cgroup {
            step: "listing the container's processes",
            message: e.to_string(),
        })?;
        Ok(pids.iter().map(|p| p.as_raw()).collect())
    }
}
