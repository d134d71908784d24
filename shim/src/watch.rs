//! `vetto watch`: the live view (being written).

use std::path::Path;

use anyhow::{bail, Result};

/// Run the live view.
pub fn run(_store: Option<&Path>) -> Result<u8> {
    bail!("vetto watch: not built yet")
}
