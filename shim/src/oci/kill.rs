//! `kill`: signal the init, or with `--all` every process of the container.

use std::path::Path;

use super::{load, OciError};
use crate::engine::Status;

pub(super) fn kill(root: &Path, a: &liboci_cli::Kill) -> Result<(), OciError> {
    let mut c = load(root, &a.container_id)?;
    if c.status() == Status::Stopped {
        // runc's wording: containerd and Docker match on it.
        return Err(OciError::Config("container not running".into()));
    }
    c.kill(&a.signal, a.all)?;
    Ok(())
}
