//! Policy paths resolved on the host for `vetto run` (these read the file system: they
//! canonicalize and stat), and the rule on which roots may be opened to the sandbox.

use std::path::{Path, PathBuf};

use crate::error::TranslateError;
use crate::host::HostFacts;
use crate::policy::expand_path;

/// (device, inode) of the object at `p`, not following a final symlink.
pub(super) fn file_id(p: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let m = p.symlink_metadata().ok()?;
    (!m.file_type().is_symlink()).then(|| (m.dev(), m.ino()))
}

pub(super) fn path_err(key: &str, path: &str, reason: impl ToString) -> TranslateError {
    TranslateError::Path {
        key: key.into(),
        path: path.into(),
        reason: reason.to_string(),
    }
}

/// A project-relative path that resolves outside the project.
fn escapes(key: &str, raw: &str, canon: &Path) -> TranslateError {
    path_err(
        key,
        raw,
        format!(
            "escapes the project through a symlink (resolves to {})",
            canon.display()
        ),
    )
}

/// Resolve a policy path that must exist. Project-relative paths must stay inside the
/// project after symlinks are resolved.
pub(super) fn resolve_existing(
    key: &str,
    raw: &str,
    facts: &HostFacts,
) -> Result<PathBuf, TranslateError> {
    let expanded = expand_path(raw, &facts.home, &facts.project)?;
    let canon = expanded
        .canonicalize()
        .map_err(|source| TranslateError::Io {
            key: key.into(),
            path: raw.into(),
            what: format!("cannot resolve {}", expanded.display()),
            source,
        })?;
    let relative = !raw.starts_with('/') && !raw.starts_with('~');
    if relative && !canon.starts_with(&facts.project) {
        return Err(escapes(key, raw, &canon));
    }
    Ok(canon)
}

/// Resolve a project-relative path that may not exist yet. Returns `None` if absent.
pub(super) fn resolve_in_project(
    key: &str,
    raw: &str,
    facts: &HostFacts,
) -> Result<Option<PathBuf>, TranslateError> {
    if raw.starts_with('/') || raw.starts_with('~') {
        return Err(path_err(key, raw, "must be relative to the project"));
    }
    let expanded = expand_path(raw, &facts.home, &facts.project)?;
    if expanded.symlink_metadata().is_err() {
        return Ok(None);
    }
    let canon = expanded
        .canonicalize()
        .map_err(|source| TranslateError::Io {
            key: key.into(),
            path: raw.into(),
            what: "cannot resolve".into(),
            source,
        })?;
    if !canon.starts_with(&facts.project) {
        return Err(escapes(key, raw, &canon));
    }
    Ok(Some(canon))
}

pub(super) fn check_root(
    key: &str,
    raw: &str,
    p: &Path,
    writable: bool,
    facts: &HostFacts,
) -> Result<(), TranslateError> {
    // Host sockets live under /run (and /var/run): a read-only bind does not stop connect().
    let under = ["/proc", "/sys", "/dev", "/run", "/var/run"];
    if p == Path::new("/") || under.iter().any(|f| p.starts_with(f)) {
        return Err(path_err(
            key,
            raw,
            format!("{} cannot be opened to the sandbox", p.display()),
        ));
    }
    if writable {
        for h in &facts.host_sealed {
            if h.starts_with(p) || p.starts_with(h) {
                return Err(path_err(
                    key,
                    raw,
                    format!(
                        "would let the sandbox move or replace {}, vetto's audit store (or its change sets): vetto keeps them from the sandbox",
                        h.display()
                    ),
                ));
            }
        }
        for h in &facts.host_private {
            if h.starts_with(p) || p.starts_with(h) {
                return Err(path_err(
                    key,
                    raw,
                    format!(
                        "would let the sandbox write {}, which vetto's own trust relies on",
                        h.display()
                    ),
                ));
            }
        }
    }
    Ok(())
}
