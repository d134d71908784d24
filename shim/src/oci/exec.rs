//! `exec`: a process joining a running container gets the same treatment as its init —
//! privileged capabilities refused, the environment filtered, a `process.json` hardened like
//! `config.json`'s process, and the same [`Hardening`](vetto_hooks::apply::Hardening) applied.
//! A refused `exec` in an audited container is recorded (`refusal`, subject `exec`) in the
//! container's session.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use vetto_hooks::apply::Capabilities;

use super::audit;
use super::log::Logger;
use super::prepare::{self, shim_dir, ShimState};
use super::{load, status_str, OciError};
use crate::engine::{self, Common, ExecOptions};

/// The rewritten process file holds the environment: removed on every path out.
struct RemoveOnDrop(PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

pub(super) fn exec(root: &Path, log: &Logger, a: liboci_cli::Exec) -> Result<u8, OciError> {
    let c = load(root, &a.container_id)?;
    if !c.can_exec() {
        return Err(OciError::Config(format!(
            "container \"{}\" is {}: cannot exec",
            a.container_id,
            status_str(c.status())
        )));
    }
    let shim = ShimState::load(root, &a.container_id)?;
    let asked: Vec<String> = a
        .cap
        .iter()
        .map(|c| format!("CAP_{}", c.to_uppercase().trim_start_matches("CAP_")))
        .filter(|c| {
            vetto_bundle::container::PRIVILEGED_CAPS.contains(&c.as_str()) || c == "CAP_MKNOD"
        })
        .collect();
    // A refusal is recorded in the container's session (best effort), then returned.
    let refused = |e: OciError, argv: &[String]| -> OciError {
        if let Some(s) = &shim.audit {
            let reasons = audit::reasons(&e);
            audit::refusal(
                &s.config,
                &s.id,
                "exec",
                reasons,
                argv,
                s.engine.clone(),
                log,
            );
        }
        e
    };
    if let (Some(p), false) = (&shim.plan, asked.is_empty()) {
        let e = OciError::Container(vetto_bundle::container::ContainerError::Refused {
            policy: p.policy.clone(),
            reasons: vec![format!("exec with capabilities {}", asked.join(", "))],
        });
        return Err(refused(e, &a.command));
    }
    // Without --process, libcontainer gives the process the container's (shadow) sets, which
    // the hardening narrows back as for the init.
    let mut hardening = shim.hardening()?;
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
    let mut tmp: Option<RemoveOnDrop> = None;
    if let Some(p) = &a.process {
        let mut v = prepare::read_json(p, "reading the process file")?;
        hardening.capabilities = Capabilities::AsSet;
        if let Some(plan) = &shim.plan {
            // The same treatment as the init: canonical and non-privileged capabilities,
            // no CAP_MKNOD, no_new_privs, the environment filtered and the policy's set.
            let hardened = vetto_bundle::container::harden_process(
                &mut v,
                &plan.policy,
                &plan.pass_through,
                &plan.env_set,
            );
            if let Err(e) = hardened {
                let argv: Vec<String> = v
                    .get("args")
                    .and_then(serde_json::Value::as_array)
                    .map(|a| {
                        a.iter()
                            .filter_map(|x| x.as_str().map(str::to_string))
                            .collect()
                    })
                    .unwrap_or_default();
                return Err(refused(e.into(), &argv));
            }
        } else if shim.seccomp.is_some() {
            vetto_bundle::container::canonical_capabilities(&mut v)?;
            if let Some(t) = prepare::prepare_caps_for_seccomp(&mut v)? {
                hardening.capabilities = Capabilities::NarrowAfterFilters(t);
            }
        }
        let path =
            shim_dir(root, &a.container_id).join(format!("exec-{}.json", nix::unistd::getpid()));
        std::fs::write(&path, v.to_string()).map_err(|source| OciError::Io {
            what: "writing the process file",
            path: path.clone(),
            source,
        })?;
        process_path = Some(path.clone());
        tmp = Some(RemoveOnDrop(path));
    }
    // Capabilities added with --cap stay after the narrowing.
    if let Capabilities::NarrowAfterFilters(t) = &mut hardening.capabilities {
        for c in &a.cap {
            let bit = vetto_hooks::process::cap_bit(c)
                .ok_or_else(|| OciError::Config(format!("--cap {c}: unknown capability")))?;
            t.bounding |= bit;
            t.effective |= bit;
            t.permitted |= bit;
        }
    }
    let built = engine::exec(ExecOptions {
        common: Common {
            id: &a.container_id,
            state_root: root,
            console_socket: a.console_socket.as_deref(),
            pid_file: a.pid_file.as_deref(),
            preserve_fds: a.preserve_fds,
        },
        detach: a.detach,
        cwd: a.cwd.as_deref(),
        env,
        process: process_path.as_deref(),
        args: a.command.clone(),
        additional_gids: a.additional_gids.clone(),
        user: a.user.map(|(u, _)| u),
        group: a.user.and_then(|(_, g)| g),
        ignore_paused: a.ignore_paused,
        sub_cgroup: a.cgroup.clone(),
        no_new_privs: a.no_new_privs || (a.process.is_none() && shim.plan.is_some()),
        capabilities: a.cap.clone(),
        hardening,
    });
    drop(tmp);
    let pid = built?;
    if a.detach {
        return Ok(0);
    }
    Ok(vetto_hooks::process::wait(pid)
        .and_then(|c| u8::try_from(c).ok())
        .unwrap_or(255))
}
