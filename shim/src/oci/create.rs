//! `create` (and `run` = create + start + wait): prepare the shadow bundle, create the
//! container through the engine, record the init's identity, record the session's start
//! (hardened containers), attach the network broker.

use std::path::Path;

use vetto_broker::audit::event::now_ms;

use super::audit::{self, Ending};
use super::log::Logger;
use super::prepare::{self, shim_dir, ShimState};
use super::{check_id, network, OciError};
use crate::engine::{self, Common, CreateOptions, Mode, Sandbox};
use crate::sidecar::BrokerAudit;

/// Removes what a failed `create` left: libcontainer's state and the shadow bundle.
pub(super) fn cleanup(root: &Path, id: &str) {
    engine::remove_state(root, id);
    let _ = std::fs::remove_dir_all(root.join(id));
    forget(root, id);
}

/// [`cleanup`] once `session_start` was recorded: the session ends as a setup failure.
fn cleanup_started(root: &Path, id: &str, log: &Logger, why: &OciError) {
    engine::remove_state(root, id);
    let _ = std::fs::remove_dir_all(root.join(id));
    finish(root, id, log, Ending::setup_failure(why));
}

/// Stops a container's broker, if it has one (it records the connections still open).
pub(super) fn stop_broker(root: &Path, id: &str) {
    if let Some(pid) = ShimState::load(root, id).ok().and_then(|s| s.broker_pid) {
        network::stop(pid);
    }
}

/// Removes vetto's part of a container: its broker and its record and shadow bundle.
pub(super) fn forget(root: &Path, id: &str) {
    stop_broker(root, id);
    let _ = std::fs::remove_dir_all(shim_dir(root, id));
}

/// [`forget`], recording the end of the container's session in between (after its broker's
/// last connections; once, whoever calls it first).
pub(super) fn finish(root: &Path, id: &str, log: &Logger, ending: Ending) {
    stop_broker(root, id);
    audit::end(root, id, log, ending);
    let _ = std::fs::remove_dir_all(shim_dir(root, id));
}

/// The arguments `create` and `run` share.
pub(super) struct CreateArgs<'a> {
    pub a: &'a liboci_cli::Create,
    pub cgroups: super::Cgroups,
    pub policy_dir: Option<&'a Path>,
}

pub(super) fn create(
    root: &Path,
    host_policy: Option<&str>,
    log: &Logger,
    a: &CreateArgs<'_>,
) -> Result<Sandbox, OciError> {
    let (c, id) = (a.a, a.a.container_id.as_str());
    check_id(id)?;
    if root.join(id).exists() || shim_dir(root, id).exists() {
        return Err(OciError::Exists(id.to_string()));
    }
    let mut prepared = prepare::prepare(
        id,
        &c.bundle,
        root,
        host_policy,
        a.policy_dir,
        a.cgroups,
        log,
    )?;
    log.debug(&format!("create {id}: {}", prepared.summary));
    if prepared.state.restore_caps.is_some() {
        log.debug("capabilities widened until the seccomp profile is installed");
    }
    let built = engine::create(CreateOptions {
        common: Common {
            id,
            state_root: root,
            console_socket: c.console_socket.as_deref(),
            pid_file: c.pid_file.as_deref(),
            preserve_fds: c.preserve_fds,
        },
        bundle: &prepared.dir,
        no_pivot: c.no_pivot,
        systemd_cgroup: prepared.systemd,
        hardening: prepared.hardening,
        mode: Mode::Detached,
    });
    // The init is in the cgroup (or nothing is): another create of it may check now.
    drop(prepared.claim.take());
    let c = match built.and_then(|c| match &prepared.disable_oom_killer {
        Some(r) => c.apply_resources(r, true).map(|()| c),
        None => Ok(c),
    }) {
        Ok(c) => c,
        Err(e) => {
            cleanup(root, id);
            let e = OciError::from(e);
            if let Some((mut session, start)) = prepared.audit {
                session.started_ms = now_ms();
                audit::setup_failed(&session, start, id, &e, log);
            }
            return Err(e);
        }
    };
    // The init's identity, for every later command to check what state.json says; the
    // session, for `delete` and the broker to use the same id and store.
    let mut st = prepared.state.clone();
    st.init = c.pid().and_then(|p| {
        let start = u32::try_from(p).ok().and_then(crate::session::start_time)?;
        Some((p, start))
    });
    let start = prepared.audit.map(|(mut session, start)| {
        session.started_ms = now_ms();
        st.audit = Some(session);
        start
    });
    if let Err(e) = st.save(root, id) {
        cleanup(root, id);
        return Err(e);
    }
    // The record exists before `create` reports success; the store is opened only now, after
    // the container's init was cloned, so it never holds one of its descriptors.
    if let (Some(s), Some(start)) = (&st.audit, start) {
        if let Err(e) = audit::begin(s, start) {
            cleanup(root, id);
            return Err(OciError::Audit(e));
        }
        log.debug(&format!(
            "audit: session {} in {}",
            s.id,
            s.config.store.display()
        ));
    }
    if let Some(net) = prepared
        .state
        .plan
        .as_ref()
        .and_then(|p| p.network.as_ref())
    {
        let recorded = st.audit.as_ref().map(|s| BrokerAudit {
            config: s.config.clone(),
            session: s.id.clone(),
        });
        let attached = c
            .pid()
            .ok_or_else(|| OciError::Config("network broker: the container has no init".into()))
            .and_then(|pid| {
                // Nobody answers a container's prompt: unlisted names are parked for a later
                // `vetto approvals --shim grant ID --always`, scoped by the container's policy.
                let approvals = net.broker.as_ref().map(|b| {
                    let policy = prepared
                        .state
                        .plan
                        .as_ref()
                        .map_or("-", |p| p.policy.as_str());
                    crate::sidecar::approvals_spec(
                        b,
                        true,
                        false,
                        format!("container {policy}"),
                        prepared.approvals_db.clone(),
                        st.audit.as_ref().map_or(id, |s| s.id.as_str()),
                        nix::unistd::geteuid().as_raw(),
                    )
                });
                network::attach(pid, net, &prepared.dir, recorded, approvals)
            });
        match attached {
            Ok(broker) => {
                st.broker_pid = Some(broker);
                if let Err(e) = st.save(root, id) {
                    network::stop(broker);
                    cleanup_started(root, id, log, &e);
                    return Err(e);
                }
                log.debug(&format!("network broker {broker} attached"));
            }
            Err(e) => {
                cleanup_started(root, id, log, &e);
                return Err(e);
            }
        }
    }
    Ok(c)
}

/// `run`: create, start, and unless detached wait and delete.
pub(super) fn run(
    root: &Path,
    host_policy: Option<&str>,
    log: &Logger,
    a: &liboci_cli::Run,
    cgroups: super::Cgroups,
    policy_dir: Option<&Path>,
) -> Result<u8, OciError> {
    let as_create = liboci_cli::Create {
        bundle: a.bundle.clone(),
        console_socket: a.console_socket.clone(),
        pid_file: a.pid_file.clone(),
        no_pivot: a.no_pivot,
        no_new_keyring: a.no_new_keyring,
        preserve_fds: a.preserve_fds,
        container_id: a.container_id.clone(),
    };
    let args = CreateArgs {
        a: &as_create,
        cgroups,
        policy_dir,
    };
    let id = a.container_id.as_str();
    let mut c = create(root, host_policy, log, &args)?;
    let pid = match c.start() {
        Ok(pid) => pid,
        Err(e) => {
            let e = OciError::from(e);
            cleanup_started(root, id, log, &e);
            return Err(e);
        }
    };
    if a.detach {
        return Ok(0);
    }
    let status = vetto_hooks::process::wait(pid);
    // This process saw the exit status: the session's end says so (after the broker's last
    // connections), and a later `delete` records nothing more.
    if let Some(code) = status {
        stop_broker(root, id);
        audit::end(root, id, log, Ending::exited(code));
    }
    if !a.keep {
        let _ = c.delete(true);
        finish(root, id, log, Ending::deleted());
    }
    Ok(status.and_then(|c| u8::try_from(c).ok()).unwrap_or(255))
}
