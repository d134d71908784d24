//! `delete`: remove a container's state (with `--force`, kill what runs first), its broker
//! and vetto's record; a hardened container's session ends here (`session_end`, once).

use std::path::Path;

use nix::sys::signal::Signal;
use nix::unistd::Pid;

use super::audit::Ending;
use super::create::finish;
use super::log::Logger;
use super::prepare::ShimState;
use super::{check_id, load, OciError};

pub(super) fn delete(root: &Path, log: &Logger, a: &liboci_cli::Delete) -> Result<(), OciError> {
    check_id(&a.container_id)?;
    match load(root, &a.container_id) {
        Ok(mut c) => {
            match c.delete(a.force) {
                Ok(()) => {}
                // `--force` always removes the container: whatever failed (a cgroup that will
                // not go, a hook), the state is gone afterwards and the failure is a warning.
                Err(e) if a.force => {
                    log.warn(&format!(
                        "delete --force {}: {}; removing the state anyway",
                        a.container_id,
                        vetto_broker::error_chain(&e)
                    ));
                    kill_recorded_init(root, log, &a.container_id);
                    let _ = std::fs::remove_dir_all(root.join(&a.container_id));
                }
                Err(e) => return Err(e.into()),
            }
            finish(root, &a.container_id, log, Ending::deleted());
        }
        Err(OciError::NotFound(_)) if a.force => {
            finish(root, &a.container_id, log, Ending::deleted())
        }
        // The recorded init is gone (so is its PID namespace); the pid in the state is
        // someone else's: remove the state without signalling anyone.
        Err(e @ OciError::NotOurInit { .. }) if a.force => {
            log.debug(&format!("delete --force: {e}; removing the state only"));
            kill_recorded_init(root, log, &a.container_id);
            let _ = std::fs::remove_dir_all(root.join(&a.container_id));
            finish(root, &a.container_id, log, Ending::deleted());
        }
        Err(e) => return Err(e),
    }
    Ok(())
}

/// The init this runtime recorded, if it is still that process, goes (with it, its PID
/// namespace); then the cgroup this runtime recorded for the container, once empty (what
/// libcontainer's delete would have removed, here from vetto's own record, not from the
/// state file that could not be used).
fn kill_recorded_init(root: &Path, log: &Logger, id: &str) {
    let Ok(record) = ShimState::load(root, id) else {
        return;
    };
    if let Some((pid, start)) = record.init {
        let now = u32::try_from(pid).ok().and_then(crate::session::start_time);
        if now == Some(start) {
            let _ = nix::sys::signal::kill(Pid::from_raw(pid), Signal::SIGKILL);
        }
    }
    if let Some(cg) = &record.cgroup {
        let wait = std::time::Duration::from_secs(2);
        if let Err(e) = super::prepare::remove_cgroup(Path::new("/sys/fs/cgroup"), cg, wait) {
            log.warn(&format!(
                "delete --force {id}: cgroup {cg}: {e}; left in place"
            ));
        }
    }
}
