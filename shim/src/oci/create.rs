//! `create` (and `run` = create + start + wait): prepare the shadow bundle, create the
//! container through the engine, record the init's identity, attach the network broker.

use std::path::Path;

use liboci_cli::GlobalOpts;

use super::log::Logger;
use super::prepare::{self, shim_dir, ShimState};
use super::{check_id, network, OciError};
use crate::engine::{self, CreateOptions, Mode, Sandbox};

/// Removes what a failed `create` left: libcontainer's state and the shadow bundle.
pub(super) fn cleanup(root: &Path, id: &str) {
    engine::remove_state(root, id);
    let _ = std::fs::remove_dir_all(root.join(id));
    forget(root, id);
}

/// Removes vetto's part of a container: its broker and its record and shadow bundle.
pub(super) fn forget(root: &Path, id: &str) {
    if let Some(pid) = ShimState::load(root, id).ok().and_then(|s| s.broker_pid) {
        network::stop(pid);
    }
    let _ = std::fs::remove_dir_all(shim_dir(root, id));
}

/// The arguments `create` and `run` share.
pub(super) struct CreateArgs<'a> {
    pub id: &'a str,
    pub bundle: &'a Path,
    pub console_socket: Option<&'a Path>,
    pub pid_file: Option<&'a Path>,
    pub preserve_fds: i32,
    pub no_pivot: bool,
    pub cgroup_view: bool,
    pub policy_dir: Option<&'a Path>,
}

impl<'a> CreateArgs<'a> {
    pub fn new(a: &'a liboci_cli::Create, cgroup_view: bool, policy_dir: Option<&'a Path>) -> Self {
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

    pub fn from_run(
        a: &'a liboci_cli::Run,
        cgroup_view: bool,
        policy_dir: Option<&'a Path>,
    ) -> Self {
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

pub(super) fn create(
    g: &GlobalOpts,
    root: &Path,
    host_policy: Option<&str>,
    log: &Logger,
    a: &CreateArgs<'_>,
) -> Result<Sandbox, OciError> {
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
    let built = engine::create(CreateOptions {
        id: a.id,
        bundle: &prepared.dir,
        state_root: root,
        console_socket: a.console_socket,
        pid_file: a.pid_file,
        preserve_fds: a.preserve_fds,
        no_pivot: a.no_pivot,
        systemd_cgroup: false,
        hardening: prepared.hardening,
        mode: Mode::Detached,
    });
    let c = match built {
        Ok(c) => c,
        Err(e) => {
            cleanup(root, a.id);
            return Err(e.into());
        }
    };
    // The init's identity, for every later command to check what state.json says.
    let mut st = prepared.state.clone();
    st.init = c.pid().and_then(|p| {
        let start = u32::try_from(p).ok().and_then(crate::session::start_time)?;
        Some((p, start))
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
            .and_then(|pid| network::attach(pid, net, &prepared.dir));
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

/// `run`: create, start, and unless detached wait and delete.
pub(super) fn run(
    g: &GlobalOpts,
    root: &Path,
    host_policy: Option<&str>,
    log: &Logger,
    a: &liboci_cli::Run,
    cgroup_view: bool,
    policy_dir: Option<&Path>,
) -> Result<u8, OciError> {
    let mut c = create(
        g,
        root,
        host_policy,
        log,
        &CreateArgs::from_run(a, cgroup_view, policy_dir),
    )?;
    let pid = match c.start() {
        Ok(pid) => pid,
        Err(e) => {
            cleanup(root, &a.container_id);
            return Err(e.into());
        }
    };
    if a.detach {
        return Ok(0);
    }
    let code = engine::wait(pid)
        .and_then(|c| u8::try_from(c).ok())
        .unwrap_or(255);
    if !a.keep {
        let _ = c.delete(true);
        forget(root, &a.container_id);
    }
    Ok(code)
}
