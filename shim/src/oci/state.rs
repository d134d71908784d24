//! `state` and `list`: the OCI state of a container (runtime spec "State", plus runc's
//! `rootfs`/`created`), with the policy vetto applied among its annotations.

use std::path::Path;

use serde_json::{json, Value};

use super::prepare::ShimState;
use super::{load, status_str, OciError};
use crate::engine::{Sandbox, Status};

/// The OCI state of a container.
pub(super) fn state_json(root: &Path, c: &Sandbox) -> Value {
    let shim = ShimState::load(root, c.id()).ok();
    let pid = match c.status() {
        Status::Stopped => 0,
        _ => c.pid().unwrap_or(0),
    };
    let mut annotations = c.annotations();
    if let Some(p) = shim.as_ref().and_then(|s| s.plan.as_ref()) {
        annotations
            .entry(vetto_bundle::container::POLICY_ANNOTATION.to_string())
            .or_insert_with(|| p.policy.clone());
    }
    json!({
        "ociVersion": "1.0.2",
        "id": c.id(),
        "status": status_str(c.status()),
        "pid": pid,
        "bundle": shim.as_ref().map_or_else(|| c.bundle().to_path_buf(), |s| s.bundle.clone()),
        "rootfs": shim.as_ref().map(|s| s.rootfs.clone()),
        "created": c.created().map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Nanos, true)),
        "owner": "",
        "annotations": annotations,
    })
}

/// `state <id>`.
pub(super) fn state(root: &Path, id: &str) -> Result<(), OciError> {
    let c = load(root, id)?;
    let text = serde_json::to_string_pretty(&state_json(root, &c))
        .map_err(|e| OciError::Config(e.to_string()))?;
    println!("{text}");
    Ok(())
}

/// `list`.
pub(super) fn list(root: &Path, a: &liboci_cli::List) -> Result<(), OciError> {
    let mut rows = vec![];
    if let Ok(rd) = std::fs::read_dir(root) {
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().to_string();
            if name.starts_with('.') {
                continue;
            }
            if let Ok(c) = load(root, &name) {
                rows.push(state_json(root, &c));
            }
        }
    }
    rows.sort_by(|a, b| a["id"].as_str().cmp(&b["id"].as_str()));
    if a.format == "json" {
        println!("{}", Value::Array(rows));
    } else if a.quiet {
        for r in rows {
            println!("{}", r["id"].as_str().unwrap_or(""));
        }
    } else {
        println!("ID\tPID\tSTATUS\tBUNDLE\tCREATED");
        for r in rows {
            println!(
                "{}\t{}\t{}\t{}\t{}",
                r["id"].as_str().unwrap_or(""),
                r["pid"],
                r["status"].as_str().unwrap_or(""),
                r["bundle"].as_str().unwrap_or(""),
                r["created"].as_str().unwrap_or("")
            );
        }
    }
    Ok(())
}
