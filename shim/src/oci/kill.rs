//! `kill`: signal the init, or with `--all` every process of the container. A SIGKILL that
//! reached a hardened container is noted in vetto's record: its session then ends "killed".

use std::path::Path;

use super::prepare::ShimState;
use super::{load, OciError};
use crate::engine::Status;

/// Is this `kill` argument SIGKILL (`KILL`, `SIGKILL`, `9`, any case)?
fn is_sigkill(s: &str) -> bool {
    let u = s.trim().to_ascii_uppercase();
    matches!(u.trim_start_matches("SIG"), "KILL" | "9")
}

pub(super) fn kill(root: &Path, a: &liboci_cli::Kill) -> Result<(), OciError> {
    let mut c = load(root, &a.container_id)?;
    if c.status() == Status::Stopped {
        // runc's wording: containerd and Docker match on it.
        return Err(OciError::Config("container not running".into()));
    }
    c.kill(&a.signal, a.all)?;
    if is_sigkill(&a.signal) {
        if let Ok(mut st) = ShimState::load(root, &a.container_id) {
            if let Some(s) = st.audit.as_mut().filter(|s| !s.killed) {
                s.killed = true;
                // Best effort: the end is then recorded as "deleted".
                let _ = st.save(root, &a.container_id);
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn sigkill_in_every_spelling() {
        for s in ["KILL", "SIGKILL", "9", "kill", "sigkill"] {
            assert!(super::is_sigkill(s), "{s}");
        }
        for s in ["TERM", "15", "SIGTERM", "19"] {
            assert!(!super::is_sigkill(s), "{s}");
        }
    }
}
