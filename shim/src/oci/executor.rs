//! What runs inside a `vetto-shim` container's init (and every `exec`'d process) after
//! libcontainer's setup: Landlock (hardened containers), the bundle's own seccomp profile,
//! vetto's deny-list (hardened), then `execvp`.
//!
//! Everything is compiled in the runtime process before the clone, so a bad profile fails
//! `create`, not the container. Landlock, both seccomp filters and the capability narrowing
//! are applied in `validate()`, which runs before the init reports ready (a failure fails
//! `create` with the reason) and before the bundle's startContainer hooks; `exec()` only
//! calls `execvp`.

use std::ffi::CString;

use libcontainer::oci_spec::runtime::Spec;
use libcontainer::workload::{Executor, ExecutorError, ExecutorValidationError};
use seccompiler::BpfProgram;
use vetto_bundle::container::BindCheck;
use vetto_bundle::plan::LandlockPlan;
use vetto_hooks::oci_seccomp::{self, CompiledProfile};
use vetto_hooks::process::{self, CapSets};
use vetto_hooks::{landlock, seccomp};

/// The in-container half of `vetto-shim`.
#[derive(Clone, Default)]
pub struct OciExecutor {
    /// Landlock rules (hardened containers).
    pub landlock: Option<LandlockPlan>,
    /// The bundle's own seccomp profile.
    pub profile: Option<CompiledProfile>,
    /// vetto's deny-list (hardened containers), stacked on the profile.
    pub deny_list: Option<BpfProgram>,
    /// Refuse to start if the network namespace holds anything but `lo`; the name of the
    /// policy's network mode, for the message.
    pub loopback_only: Option<String>,
    /// Capabilities were widened to install the profile: narrow back to these after it.
    pub restore_caps: Option<CapSets>,
    /// Host directories as checked at `create`: what is mounted must be them.
    pub binds: Vec<BindCheck>,
}

fn fail(msg: String) -> ExecutorError {
    eprintln!("vetto-shim: {msg}");
    ExecutorError::Other(msg)
}

impl Executor for OciExecutor {
    fn validate(&self, spec: &Spec) -> Result<(), ExecutorValidationError> {
        let args = spec
            .process()
            .as_ref()
            .and_then(|p| p.args().as_ref())
            .filter(|a| !a.is_empty());
        if args.is_none() {
            return Err(ExecutorValidationError::ArgValidationError(
                "process.args is empty".into(),
            ));
        }
        // The network namespace is final here: the runtime's prestart hooks (Docker's
        // libnetwork) have run, and Podman configures it before `create`.
        if let Some(mode) = &self.loopback_only {
            let names = vetto_hooks::netlo::interface_names().map_err(|e| {
                ExecutorValidationError::ArgValidationError(format!("network: {e}"))
            })?;
            if let Some(other) = names.iter().find(|n| n.as_str() != "lo") {
                return Err(ExecutorValidationError::ArgValidationError(format!(
                    "network: the policy's network mode is {mode:?} (no network but the broker on lo) but the container has network interface {other:?}: start it with no network (--network none)"
                )));
            }
        }
        let invalid = ExecutorValidationError::ArgValidationError;
        for b in &self.binds {
            use std::os::unix::fs::MetadataExt;
            let same =
                std::fs::metadata(&b.path).is_ok_and(|m| m.dev() == b.dev && m.ino() == b.ino);
            if !same {
                return Err(invalid(format!(
                    "bind {}: the mounted file or directory is not the host object that was checked (a path on the way to it was renamed or replaced during create)",
                    b.path.display()
                )));
            }
        }
        if let Some(plan) = &self.landlock {
            landlock::apply(plan).map_err(|e| invalid(format!("Landlock: {e}")))?;
        }
        // The filters and the capability narrowing happen here, before libcontainer waits for
        // `start` and runs the bundle's startContainer hooks: those run restricted, as under
        // runc, and a failure fails `create` with its reason.
        if let Some(p) = &self.profile {
            oci_seccomp::install(p).map_err(|e| invalid(e.to_string()))?;
        }
        if let Some(f) = &self.deny_list {
            seccomp::install(f).map_err(|e| invalid(format!("vetto seccomp deny-list: {e}")))?;
        }
        if let Some(t) = &self.restore_caps {
            process::set_capabilities(t).map_err(|e| {
                invalid(format!(
                    "narrowing capabilities after installing the seccomp profile: {e}"
                ))
            })?;
        }
        Ok(())
    }

    fn exec(&self, spec: &Spec) -> Result<(), ExecutorError> {
        let args = spec
            .process()
            .as_ref()
            .and_then(|p| p.args().clone())
            .unwrap_or_default();
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
