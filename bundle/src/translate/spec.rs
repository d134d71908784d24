//! The OCI runtime spec of `vetto run`, from what the sections decided.

use std::path::PathBuf;

use serde_json::{json, Value};

use crate::host::HostFacts;
use crate::resolve::Policy;

use super::capabilities::INIT_CAPS;
use super::mounts::{PROC_MASKED, PROC_READONLY};

/// `config.json`: the environment, limits and mounts given, the init's capabilities, the
/// caller mapped to root of a new user namespace, every other namespace new. As JSON: it is
/// written out as such, and libcontainer parses it into `oci_spec`'s types when it creates the
/// container (`Translation::oci` parses it the same way, for those who read it typed).
pub(super) fn config(
    policy: &Policy,
    facts: &HostFacts,
    id: &str,
    env: Vec<String>,
    rlimits: Vec<Value>,
    mounts: Vec<Value>,
) -> Value {
    let cwd: &PathBuf = &facts.cwd;
    json!({
        "ociVersion": "1.0.2",
        "root": {"path": "rootfs", "readonly": true},
        "hostname": "vetto",
        "process": {
            "terminal": false,
            "user": {"uid": 0, "gid": 0},
            "args": ["/bin/true"],
            "env": env,
            "cwd": cwd,
            "noNewPrivileges": true,
            "capabilities": {"bounding": INIT_CAPS, "effective": INIT_CAPS, "permitted": INIT_CAPS},
            "rlimits": rlimits,
        },
        "mounts": mounts,
        "linux": {
            "uidMappings": [{"containerID": 0, "hostID": facts.uid, "size": 1}],
            "gidMappings": [{"containerID": 0, "hostID": facts.gid, "size": 1}],
            "namespaces": [
                {"type": "user"}, {"type": "mount"}, {"type": "pid"}, {"type": "network"},
                {"type": "ipc"}, {"type": "uts"}, {"type": "cgroup"}
            ],
            "cgroupsPath": format!("/vetto/{id}"),
            "maskedPaths": PROC_MASKED,
            "readonlyPaths": PROC_READONLY,
        },
        "annotations": {"dev.vetto.profile": policy.profile},
    })
}
