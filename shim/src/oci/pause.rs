//! `pause` and `resume` (the freezer cgroup).

use std::path::Path;

use super::{load, OciError};

pub(super) fn pause(root: &Path, id: &str) -> Result<(), OciError> {
    load(root, id)?.pause()?;
    Ok(())
}

pub(super) fn resume(root: &Path, id: &str) -> Result<(), OciError> {
    load(root, id)?.resume()?;
    Ok(())
}
