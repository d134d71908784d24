//! The one wrapper around libcontainer (create, start, delete) and the executor that hands
//! the container's init over to `vetto_hooks::init`.
//!
//! libcontainer clones this process and `chdir`s it: call it only from the single-threaded
//! supervisor, from the thread that lives as long as the sandbox (PDEATHSIG follows the
//! parent thread).

use std::os::fd::RawFd;
use std::path::Path;

use libcontainer::container::builder::ContainerBuilder;
use libcontainer::container::Container;
use libcontainer::oci_spec::runtime::Spec;
use libcontainer::syscall::syscall::SyscallType;
use libcontainer::workload::{Executor, ExecutorError, ExecutorValidationError};
use vetto_bundle::plan::Plan;
use vetto_hooks::init::{self, InitConfig};

/// Errors of the engine.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// libcontainer refused or failed.
    #[error("container runtime: {step}: {source}")]
    Runtime {
        /// Which step.
        step: &'static str,
        /// libcontainer's error.
        source: libcontainer::error::LibcontainerError,
    },
    /// The container has no pid after start.
    #[error("container runtime: the container has no init process")]
    NoPid,
}

/// Runs inside the container's init process, after libcontainer's setup.
#[derive(Clone)]
pub struct VettoExecutor {
    /// What to apply.
    pub plan: Plan,
    /// The command's stdio is a pseudo-terminal.
    pub tty: bool,
    /// pidfd of the supervisor.
    pub supervisor_pidfd: Option<RawFd>,
    /// Write end of the error pipe.
    pub error_fd: Option<RawFd>,
    /// The init's end of the socket the broker's listeners are sent over.
    pub listener_fd: Option<RawFd>,
}

impl Executor for VettoExecutor {
    fn validate(&self, _spec: &Spec) -> Result<(), ExecutorValidationError> {
        // Runs after libcontainer's id switch and capability drop, which would clear it.
        init::arm_parent_death(self.supervisor_pidfd).map_err(|e| {
            init::report(self.error_fd, &e.to_string());
            ExecutorValidationError::ArgValidationError(e.to_string())
        })
    }

    fn exec(&self, spec: &Spec) -> Result<(), ExecutorError> {
        let process = spec.process().as_ref().ok_or(ExecutorError::InvalidArg)?;
        let cfg = InitConfig {
            args: process.args().clone().unwrap_or_default(),
            env: process.env().clone().unwrap_or_default(),
            tty: self.tty,
            supervisor_pidfd: self.supervisor_pidfd,
            error_fd: self.error_fd,
            listener_fd: self.listener_fd,
        };
        match init::run(&self.plan, &cfg) {
            Ok(never) => match never {},
            Err(e) => {
                init::report(self.error_fd, &e.to_string());
                Err(ExecutorError::Other(e.to_string()))
            }
        }
    }
}

/// Create the container from a bundle on disk (state under `state_root`).
pub fn create(
    id: &str,
    bundle: &Path,
    state_root: &Path,
    executor: VettoExecutor,
    console_socket: Option<&Path>,
) -> Result<Container, EngineError> {
    let rt = |step: &'static str| move |source| EngineError::Runtime { step, source };
    ContainerBuilder::new(id.to_string(), SyscallType::default())
        .with_root_path(state_root)
        .map_err(rt("state root"))?
        .with_executor(executor)
        .with_console_socket(console_socket)
        .validate_id()
        .map_err(rt("container id"))?
        .as_init(bundle)
        .with_systemd(false)
        .with_detach(true)
        .build()
        .map_err(rt("create"))
}

/// Start the created container; returns the init's pid (in the supervisor's pid namespace).
pub fn start(c: &mut Container) -> Result<i32, EngineError> {
    c.start().map_err(|source| EngineError::Runtime {
        step: "start",
        source,
    })?;
    c.pid().map(|p| p.as_raw()).ok_or(EngineError::NoPid)
}

/// Delete the container's state (the init has exited).
pub fn delete(c: &mut Container) {
    if let Err(e) = c.delete(true) {
        tracing::debug!("container delete: {e}");
    }
}
