//! The limits section of `vetto run`: resource limits, and the wall clock the supervisor
//! enforces. (`vetto-shim` leaves limits to the engine.)

use serde_json::{json, Value};

use crate::resolve::Policy;

use super::Builder;

/// The `process.rlimits` of the spec.
pub(super) fn rlimits(b: &mut Builder, policy: &Policy) -> Vec<Value> {
    let mut rlimits = vec![];
    let core = if policy.limits.core_dumps.value {
        u64::MAX
    } else {
        0
    };
    rlimits.push(json!({"type": "RLIMIT_CORE", "hard": core, "soft": core}));
    b.note(
        "limit",
        "core_dumps",
        if core == 0 {
            "RLIMIT_CORE = 0"
        } else {
            "allowed"
        },
        &policy.limits.core_dumps.source,
    );
    let sized = [
        ("RLIMIT_NOFILE", "open_files", &policy.limits.open_files, ""),
        ("RLIMIT_NPROC", "processes", &policy.limits.processes, ""),
        ("RLIMIT_AS", "memory", &policy.limits.memory, " bytes"),
    ];
    for (ty, key, limit, unit) in sized {
        if let Some(n) = limit {
            rlimits.push(json!({"type": ty, "hard": n.value, "soft": n.value}));
            b.note("limit", key, format!("{ty} = {}{unit}", n.value), &n.source);
        }
    }
    if let Some(w) = &policy.limits.wall_clock {
        b.note(
            "limit",
            "wall_clock",
            format!("{} s, then the whole sandbox is killed", w.value.as_secs()),
            &w.source,
        );
    }
    rlimits
}
