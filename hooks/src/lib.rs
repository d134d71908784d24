//! vetto's in-container init: applies a [`Plan`] to the calling process.
//!
//! Each module is one mechanism with its own error type: [`netlo`] (loopback up),
//! [`process`] (`no_new_privs`, capabilities, descriptors, signals), [`landlock`]
//! (filesystem ruleset), [`seccomp`] (syscall deny-list, with names resolved by
//! [`syscalls`]). [`harden`] runs them in the only order that works. The identity switch and
//! PID-1 duties live elsewhere.
//!
//! Everything here acts on the calling thread (Landlock and seccomp are per-thread), so the
//! caller must be single-threaded.

pub mod identity;
pub mod init;
pub mod landlock;
pub mod listen;
pub mod mounts;
pub mod netlo;
pub mod oci_seccomp;
pub mod process;
pub mod seccomp;
pub mod syscall_table;
pub mod syscalls;

#[cfg(test)]
mod testutil;

use thiserror::Error;
use vetto_bundle::plan::Plan;

pub use crate::landlock::{AppliedLandlock, LandlockError};
pub use crate::netlo::NetError;
pub use crate::process::{CapsDropped, ProcessError};
pub use crate::seccomp::SeccompError;
pub use crate::syscalls::SyscallError;

/// Any failure of the init's hardening. Each means the command must not run.
#[derive(Debug, Error)]
pub enum HooksError {
    /// Bringing `lo` up failed.
    #[error(transparent)]
    Net(#[from] NetError),
    /// `no_new_privs` or the capability drop failed.
    #[error(transparent)]
    Process(#[from] ProcessError),
    /// Landlock failed or is below the plan's minimum ABI.
    #[error(transparent)]
    Landlock(#[from] LandlockError),
    /// The seccomp filter could not be built or installed.
    #[error(transparent)]
    Seccomp(#[from] SeccompError),
}

/// What [`harden`] applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    /// `lo` was brought up.
    pub loopback_up: bool,
    /// The Landlock ruleset (ABI, rule count, skipped optional paths).
    pub landlock: AppliedLandlock,
    /// What the capability drop could do.
    pub caps: CapsDropped,
    /// Syscalls in the seccomp filter (after deduplication; names of syscalls this
    /// architecture does not have are not counted).
    pub syscalls_denied: usize,
    /// ioctl requests in the seccomp filter.
    pub ioctls_denied: usize,
    /// Length of the installed BPF program.
    pub bpf_instructions: usize,
}

/// Applies the plan to the calling (single-threaded) process, in this order:
///
/// 1. compile the seccomp filter, so that a bad deny-list fails before anything changes;
/// 2. bring `lo` up, if the plan says so (needs `CAP_NET_ADMIN`, dropped below);
/// 3. set `no_new_privs`;
/// 4. enforce Landlock;
/// 5. drop all capabilities;
/// 6. install seccomp last, so it cannot block the steps above.
///
/// An error can leave the process partly restricted; the caller must then exit, not run the
/// command.
pub fn harden(plan: &Plan) -> Result<Report, HooksError> {
    let denied = seccomp::resolve_syscalls(&plan.seccomp.deny)?;
    let program = seccomp::compile(&plan.seccomp)?;
    if plan.loopback_up {
        netlo::loopback_up()?;
    }
    process::set_no_new_privs()?;
    let landlock = landlock::apply(&plan.landlock)?;
    let caps = process::drop_all_capabilities()?;
    seccomp::install(&program)?;
    Ok(Report {
        loopback_up: plan.loopback_up,
        landlock,
        caps,
        syscalls_denied: denied.len(),
        ioctls_denied: plan.seccomp.deny_ioctls.len(),
        bpf_instructions: program.len(),
    })
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use vetto_bundle::plan::{
        default_seccomp, FsAccess, Identity, LandlockPlan, LandlockRule, NetPlan,
    };

    use super::*;
    use crate::testutil::{enter_user_and_net_ns, expect_errno, in_child, TempDir};

    fn plan(rules: Vec<LandlockRule>, loopback_up: bool) -> Plan {
        Plan {
            version: 1,
            mounts: vec![],
            landlock: LandlockPlan {
                rules,
                min_abi: 1,
                scope: true,
            },
            seccomp: default_seccomp(),
            loopback_up,
            network: NetPlan {
                listeners: vec![],
                broker: None,
                publish: vec![],
            },
            identity: Identity { uid: 0, gid: 0 },
            wall_clock_secs: None,
        }
    }

    fn rule(path: impl Into<PathBuf>, access: FsAccess) -> LandlockRule {
        LandlockRule {
            path: path.into(),
            access,
            optional: true,
        }
    }

    #[test]
    fn harden_applies_everything_in_a_sandbox() {
        let ro = TempDir::new("harden-ro");
        let rw = TempDir::new("harden-rw");
        let mut rules: Vec<LandlockRule> = ["/usr", "/lib", "/lib64", "/bin", "/etc", "/proc"]
            .into_iter()
            .map(|p| rule(p, FsAccess::ReadExec))
            .collect();
        rules.push(rule(ro.path(), FsAccess::ReadExec));
        rules.push(rule(rw.path(), FsAccess::ReadWrite));
        let plan = plan(rules, true);
        let (ro, rw) = (ro.path().to_path_buf(), rw.path().to_path_buf());
        in_child(|| {
            enter_user_and_net_ns()?;
            let report = harden(&plan).map_err(|e| e.to_string())?;
            if report.syscalls_denied != plan.seccomp.deny.len()
                || report.ioctls_denied != 2
                || report.landlock.rules < 3
                || !report.caps.bounding_cleared
                || !report.caps.securebits_locked
            {
                return Err(format!("{report:?}"));
            }
            // lo is up.
            if !netlo::link_is_up(netlo::LOOPBACK).map_err(|e| e.to_string())? {
                return Err("lo down".into());
            }
            // Capabilities gone, no_new_privs and a seccomp filter in place.
            if process::read_caps().map_err(|e| e.to_string())? != (0, 0) {
                return Err("caps remain".into());
            }
            let status = std::fs::read_to_string("/proc/self/status").map_err(|e| e.to_string())?;
            for want in ["NoNewPrivs:\t1", "Seccomp:\t2"] {
                if !status.lines().any(|l| l == want) {
                    return Err(format!("missing {want:?}"));
                }
            }
            // Landlock: read-only dir, read-write dir, nothing else.
            let ro_write = std::fs::write(ro.join("x"), b"x");
            if !matches!(&ro_write, Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied) {
                return Err(format!("write in ro: {ro_write:?}"));
            }
            std::fs::write(rw.join("x"), b"x").map_err(|e| format!("write in rw: {e}"))?;
            std::fs::remove_file(rw.join("x")).map_err(|e| format!("unlink in rw: {e}"))?;
            if std::fs::read_dir("/root").is_ok() {
                return Err("/root readable".into());
            }
            // Seccomp: denied syscalls return EPERM.
            // SAFETY: PTRACE_TRACEME takes no pointers.
            let rc = unsafe { libc::ptrace(libc::PTRACE_TRACEME, 0, 0, 0) };
            expect_errno("ptrace", rc, libc::EPERM)?;
            Ok(())
        });
    }

    #[test]
    fn harden_fails_early_on_a_bad_deny_list() {
        let mut p = plan(vec![], false);
        p.seccomp.deny.push("no_such_syscall".into());
        in_child(|| match harden(&p) {
            Err(HooksError::Seccomp(e)) if e.to_string().contains("no_such_syscall") => {
                // Nothing was applied.
                let status =
                    std::fs::read_to_string("/proc/self/status").map_err(|e| e.to_string())?;
                if status.lines().any(|l| l == "NoNewPrivs:\t1") {
                    return Err("no_new_privs set before failing".into());
                }
                Ok(())
            }
            other => Err(format!("{other:?}")),
        });
    }
}
