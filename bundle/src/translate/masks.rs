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

/// Binds whose host source *is* or lies inside a secret (a dotfile that is a symlink into
/// `~/.ssh` or to a `.env`, a root beneath `~/.aws`): the bind would show the secret at its
/// destination, which [`mask_places`] (secrets at or beneath a bind's source) does not see.
/// Found by identity (beneath a secret directory the scan found) or by the patterns
/// ([`crate::secrets::secret_containing`]). Each as (destination, the secret, its pattern,
/// the source's kind and identity).
pub type InsideSecret = (PathBuf, PathBuf, String, MaskKind, (u64, u64));

/// See [`InsideSecret`].
pub fn binds_inside_secrets(
    secrets: &[SecretMatch],
    binds: &[(PathBuf, PathBuf)],
    patterns: &[&crate::resolve::Sourced<String>],
    home: &Path,
) -> Result<Vec<InsideSecret>, crate::translate::TranslateError> {
    use std::os::unix::fs::MetadataExt;
    let mut out: Vec<InsideSecret> = vec![];
    let index = crate::secrets::SecretIndex::new(patterns, home)?;
    for (src, dest) in binds {
        let found = secrets
            .iter()
            .find(|s| s.kind == MaskKind::Dir && src != &s.path && src.starts_with(&s.path))
            .map(|s| (s.path.clone(), s.pattern.clone()));
        let hit = match found {
            Some(f) => Some(f),
            None => index.containing(src)?,
        };
        let Some((secret, pattern)) = hit else {
            continue;
        };
        if out.iter().any(|(d, ..)| d == dest) {
            continue;
        }
        // The source is canonical: what the bind shows. Gone since: nothing shown.
        let Ok(m) = std::fs::metadata(src) else {
            continue;
        };
        let kind = if m.is_dir() {
            MaskKind::Dir
        } else {
            MaskKind::File
        };
        out.push((dest.clone(), secret, pattern, kind, (m.dev(), m.ino())));
    }
    Ok(out)
}

/// Secret masks: each secret, at every place a bind shows it, masked by the init; and every
/// bind that is or shows the inside of a secret, masked whole.
pub(super) fn mask(
    b: &mut Builder,
    secrets: &[SecretMatch],
    patterns: &[&crate::resolve::Sourced<String>],
    home: &Path,
) -> Result<(), crate::translate::TranslateError> {
    let whole = binds_inside_secrets(secrets, &b.binds, patterns, home)?;
    let source = crate::resolve::Source::Builtin("secret list".into());
    for (dest, secret, pattern, kind, id) in &whole {
        let k = match kind {
            MaskKind::Dir => InitMountKind::MaskDir,
            _ => InitMountKind::MaskFile,
        };
        b.init_mount(dest, k, *id);
        let what = if dest == secret {
            String::new()
        } else {
            format!(" {}", secret.display())
        };
        b.note(
            "mask",
            dest.display(),
            format!("masked whole: it is or resolves into the secret{what} (pattern `{pattern}`)"),
            &source,
        );
    }
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
    Ok(())
}
