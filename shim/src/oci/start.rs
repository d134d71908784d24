//! `start`: run the created container's command.

use std::path::Path;

use super::{load, OciError};

pub(super) fn start(root: &Path, id: &str) -> Result<(), OciError> {
    load(root, id)?.start()?;
    Ok(())
}
