//! `spec` (a default `config.json`, runc's `--rootless` variant) and `features`.

use std::path::PathBuf;

use serde_json::{json, Value};

use super::OciError;

/// `features`: what this runtime supports (runtime spec "Features Structure").
pub(super) fn features() -> Value {
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

/// `spec`.
pub(super) fn spec_cmd(a: &liboci_cli::Spec) -> Result<(), OciError> {
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
        let (uid, gid) = (nix::unistd::getuid(), nix::unistd::getgid());
        let (uid, gid) = (uid.as_raw(), gid.as_raw());
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
