//! `ps`: the processes in a container's cgroup.

use std::path::Path;

use serde_json::json;

use super::{load, OciError};

pub(super) fn ps(root: &Path, a: &liboci_cli::Ps) -> Result<(), OciError> {
    let pids = load(root, &a.container_id)?.processes()?;
    if a.format == "json" {
        println!("{}", json!(pids));
    } else {
        println!("PID\tCMD");
        for p in pids {
            let cmd = std::fs::read_to_string(format!("/proc/{p}/cmdline"))
                .unwrap_or_default()
                .replace('\0', " ");
            println!("{p}\t{}", cmd.trim_end());
        }
    }
    Ok(())
}
