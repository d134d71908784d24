//! The secrets section: where a secret found on the host is shown inside (shared by
//! `vetto run` and `vetto-shim`), and for `vetto run` the init's masks over those places.
//!
//! The two translators mask differently, on purpose: `vetto run`'s init mounts each mask
//! through a descriptor on the exact (device, inode) the scan found; `vetto-shim` adds
//! `config.json` mounts, because libcontainer mounts them before its init runs.

use std::path::{Path, PathBuf};

use crate::plan::InitMountKind;
use crate::secrets::{MaskKind, SecretMatch};

use super::Builder;

/// Where a bind from the host's `src` to `dest` shows the host path `p`, if it does.
pub fn shown_at(p: &Path, src: &Path, dest: &Path) -> Option<PathBuf> {
    let rel = p.strip_prefix(src).ok()?;
    Some(if rel.as_os_str().is_empty() {
        dest.to_path_buf()
    } else {
        dest.join(rel)
    })
}

/// Every place inside where the binds (canonical host source, destination) show one of the
/// `secrets` (a bind's destination may differ from its source: `~/.cargo -> /data/cargo`),
/// with the index of the secret: in the order of the secrets, then of the binds; each place
/// once (for the first secret shown there), and none of the places already `taken`.
pub fn mask_places(
    secrets: &[SecretMatch],
    binds: &[(PathBuf, PathBuf)],
    taken: &[PathBuf],
) -> Vec<(PathBuf, usize)> {
    let mut out: Vec<(PathBuf, usize)> = vec![];
    for (i, s) in secrets.iter().enumerate() {
        for (src, dest) in binds {
            if let Some(t) = shown_at(&s.path, src, dest) {
                if !taken.contains(&t) && !out.iter().any(|(p, _)| *p == t) {
                    out.push((t, i));
                }
            }
        }
    }
    out
}

/// A secret's note suffix: the symlink it was reached through, if any.
fn via_note(s: &SecretMatch) -> String {
    s.via
        .as_ref()
        .map(|v| format!(" (reached through symlink {})", v.display()))
        .unwrap_or_default()
}

/// Secret masks: each secret, at every place a bind shows it, masked by the init.
pub(super) fn mask(b: &mut Builder, secrets: &[SecretMatch]) {
    let mut targets = mask_places(secrets, &b.binds, &[]);
    targets.sort_by(|a, b| a.0.cmp(&b.0));
    for (i, s) in secrets.iter().enumerate() {
        if !targets.iter().any(|(_, m)| *m == i) {
            b.note(
                "mask",
                s.path.display(),
                format!("not visible in the sandbox, nothing to mask{}", via_note(s)),
                &s.source,
            );
        }
    }
    let masked_dirs: Vec<PathBuf> = targets
        .iter()
        .filter(|(_, i)| secrets[*i].kind == MaskKind::Dir)
        .map(|(p, _)| p.clone())
        .collect();
    for (t, i) in &targets {
        let s = &secrets[*i];
        let via = via_note(s);
        let shown = if *t == s.path {
            String::new()
        } else {
            format!(" (the host's {})", s.path.display())
        };
        if masked_dirs.iter().any(|d| t != d && t.starts_with(d)) {
            b.note(
                "mask",
                t.display(),
                format!("inside a masked directory{via}"),
                &s.source,
            );
            continue;
        }
        let (k, what) = match s.kind {
            MaskKind::Link => (
                InitMountKind::Verify,
                "a symlink with a secret's name: checked unchanged at start",
            ),
            MaskKind::File => (InitMountKind::MaskFile, "/dev/null bound over it"),
            MaskKind::Dir => (
                InitMountKind::MaskDir,
                "empty mode-000 read-only tmpfs over it",
            ),
        };
        b.init_mount(t, k, (s.dev, s.ino));
        b.note(
            "mask",
            t.display(),
            format!("{what} (pattern `{}`){shown}{via}", s.pattern),
            &s.source,
        );
    }
}
