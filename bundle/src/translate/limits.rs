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
    if let Some(n) = &policy.limits.open_files {
        rlimits.push(json!({"type": "RLIMIT_NOFILE", "hard": n.value, "soft": n.value}));
        b.note(
            "limit",
            "open_files",
            format!("RLIMIT_NOFILE = {}", n.value),
            &n.source,
        );
    }
    if let Some(n) = &policy.limits.processes {
        rlimits.push(json!({"type": "RLIMIT_NPROC", "hard": n.value, "soft": n.value}));
        b.note(
            "limit",
            "processes",
            format!("RLIMIT_NPROC = {}", n.value),
            &n.source,
        );
    }
    if let Some(n) = &policy.limits.memory {
        rlimits.push(json!({"type": "RLIMIT_AS", "hard": n.value, "soft": n.value}));
        b.note(
            "limit",
            "memory",
            format!("RLIMIT_AS = {} bytes", n.value),
            &n.source,
        );
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
