//! The protections of `vetto run`: what the sandbox could write but must not (repository
//! metadata, policy files, vetto's configuration, the policy's `protected` paths) is bound
//! read-only by the init on the exact objects found; what is absent is watched instead.
//!
//! `vetto-shim` protects the policy's `protected` paths with `config.json` binds of its own
//! ([`crate::container::harden`]): libcontainer mounts them, there is no init to pin with.

use std::path::{Path, PathBuf};

use crate::error::TranslateError;
use crate::host::HostFacts;
use crate::plan::InitMountKind;
use crate::policy::{HandoffAction, ProjectAccess};
use crate::resolve::{Policy, Source};

use super::paths::{file_id, resolve_in_project};
use super::Builder;

/// Protect `p` if a writable root holds it: read-only, made by the init on the object found
/// now, every directory between the root and `p` pinned as a mount point of its own (a mount
/// point cannot be renamed or removed, so `mv .git .git.old` cannot carry a protection away).
fn protect(
    b: &mut Builder,
    writable_roots: &[PathBuf],
    p: &Path,
    why: &str,
    source: &dyn std::fmt::Display,
) {
    let Some(root) = writable_roots.iter().find(|r| p.starts_with(r)) else {
        return;
    };
    let Some(id) = file_id(p) else {
        let what = if p.symlink_metadata().is_ok() {
            "a symlink: no mount can cover the link itself (it could be re-pointed); what it resolves to is protected where it is writable"
        } else {
            "absent: nothing to protect now"
        };
        b.note("protected", p.display(), what, source);
        return;
    };
    let rel: Vec<_> = p
        .strip_prefix(root)
        .map(|r| r.components().collect())
        .unwrap_or_default();
    let mut anc = root.clone();
    for c in rel.iter().take(rel.len().saturating_sub(1)) {
        anc.push(c);
        if let Some(aid) = file_id(&anc) {
            if !b.init_mounts.iter().any(|m| m.path == anc) {
                b.note(
                    "protected",
                    anc.display(),
                    "pinned as a mount point so it cannot be renamed or removed",
                    source,
                );
            }
            b.init_mount(&anc, InitMountKind::Pin, aid);
        }
    }
    b.init_mount(p, InitMountKind::ReadOnly, id);
    b.note("protected", p.display(), why, source);
}

/// vetto's own state that the host reads back by path (the audit store, its key, the approvals
/// store: [`HostFacts::host_sealed`]), when a writable root holds it (a project at HOME): it is
/// masked, and every directory between the root and it is pinned as a mount point, so the
/// sandbox can neither rename an ancestor to carry the mask away nor build a directory of its
/// own at the path for the next session to trust.
pub(super) fn pin_sealed(b: &mut Builder, facts: &HostFacts, writable_roots: &[PathBuf]) {
    let source = Source::Builtin("vetto state".into());
    for h in &facts.host_sealed {
        let Some(root) = writable_roots.iter().find(|r| h.starts_with(r) && *r != h) else {
            continue;
        };
        let rel: Vec<_> = h
            .strip_prefix(root)
            .map(|r| r.components().collect())
            .unwrap_or_default();
        let mut anc = root.clone();
        for c in rel.iter().take(rel.len().saturating_sub(1)) {
            anc.push(c);
            if let Some(aid) = file_id(&anc) {
                if !b.init_mounts.iter().any(|m| m.path == anc) {
                    b.note(
                        "protected",
                        anc.display(),
                        format!(
                            "pinned as a mount point so {} cannot be moved or replaced",
                            h.display()
                        ),
                        &source,
                    );
                }
                b.init_mount(&anc, InitMountKind::Pin, aid);
            }
        }
    }
}

/// A protected path absent at start: watched, and said so.
fn watch_absent(
    b: &mut Builder,
    watch: &mut Vec<PathBuf>,
    p: PathBuf,
    action: HandoffAction,
    source: &Source,
) {
    b.note(
        "protected",
        p.display(),
        format!(
            "absent: if the sandbox creates it, vetto reports it at the end ({})",
            match action {
                HandoffAction::Warn => "and leaves it",
                HandoffAction::Remove => "and removes it",
            }
        ),
        source,
    );
    watch.push(p);
}

/// What the end of the session checks: absent protected paths, and protected links with
/// their targets.
pub(super) type Watched = (Vec<PathBuf>, Vec<(PathBuf, PathBuf)>);

/// Every protection; returns the absent paths to watch ([`super::Translation::handoff_watch`])
/// and the protected links to check ([`super::Translation::handoff_links`]).
pub(super) fn protect_all(
    b: &mut Builder,
    policy: &Policy,
    facts: &HostFacts,
    writable_roots: &[PathBuf],
    state_inside: &[PathBuf],
) -> Result<Watched, TranslateError> {
    let mut links: Vec<(PathBuf, PathBuf)> = vec![];
    let project_access = policy.project.value;
    // Protected paths: read-only binds over what the sandbox could otherwise write, made by
    // the init on the exact objects found here (see `InitMount`). Every directory between the
    // writable root and the protected path is pinned as a mount point of its own: a mount
    // point cannot be renamed or removed, so `mv .git .git.old` cannot carry a protection away.
    // Repository metadata, located the way git locates it (gitlink files, commondir), in
    // every repository and submodule the scan found.
    let git_src = Source::Builtin("git metadata".into());
    for g in &facts.git_metadata {
        protect(
            b,
            writable_roots,
            g,
            "git metadata, read-only (configuration, hooks and the files that point git elsewhere cannot be planted)",
            &git_src,
        );
    }
    // Every policy file this session read, and vetto's own configuration (trust store), if
    // the sandbox could write them.
    for f in &policy.files {
        protect(
            b,
            writable_roots,
            f,
            "policy file, read-only",
            &Source::Builtin("policy file".into()),
        );
    }
    for h in &facts.host_private {
        protect(
            b,
            writable_roots,
            h,
            "vetto's configuration and trust store, read-only",
            &Source::Builtin("vetto configuration".into()),
        );
    }
    let mut handoff_watch: Vec<PathBuf> = vec![];
    // What the repository's configuration names but does not exist yet (a `core.hooksPath`
    // directory, an included config file): if the sandbox creates it, host git reads or runs
    // it. No bind can cover an absent path, so it is watched like an absent protected path.
    for g in &facts.git_absent {
        if writable_roots.iter().any(|r| g.starts_with(r)) {
            b.note(
                "protected",
                g.display(),
                "named by git configuration (hooks path or include) but absent: if the sandbox creates it, vetto reports it at the end",
                &git_src,
            );
            handoff_watch.push(g.clone());
        }
    }
    // `~/...` protections: within the state paths (an agent's own settings in its state
    // directory), or a write root. Placed where the sandbox sees them.
    let home_roots: Vec<PathBuf> = state_inside.iter().chain(writable_roots).cloned().collect();
    for pr in policy
        .protected
        .iter()
        .filter(|p| p.value.starts_with("~/"))
    {
        let p = crate::policy::expand_path(&pr.value, &facts.home, &facts.project)?;
        if !home_roots.iter().any(|r| p.starts_with(r)) {
            continue;
        }
        let link = p
            .symlink_metadata()
            .ok()
            .filter(|m| m.file_type().is_symlink())
            .and_then(|_| std::fs::read_link(&p).ok());
        if let Some(target) = link {
            // A link (a dotfile manager's): no mount covers the link itself, and its directory
            // is writable, so it is recorded and checked at the end (replaced: reported, and
            // with `remove` put back); what it points at is protected where it is writable.
            if let Ok(resolved) = p.canonicalize() {
                protect(
                    b,
                    &home_roots,
                    &resolved,
                    "read-only bind (the target of a protected link)",
                    &pr.source,
                );
            }
            b.note(
                "protected",
                p.display(),
                format!(
                    "a symlink to {}: checked at the end; if the sandbox replaced it, vetto reports it ({})",
                    target.display(),
                    match policy.handoff.value {
                        HandoffAction::Warn => "and leaves it",
                        HandoffAction::Remove => "and puts the link back",
                    }
                ),
                &pr.source,
            );
            links.push((p, target));
        } else if p.symlink_metadata().is_ok() {
            protect(
                b,
                &home_roots,
                &p,
                "read-only bind (it could widen the agent's own permissions)",
                &pr.source,
            );
        } else {
            watch_absent(b, &mut handoff_watch, p, policy.handoff.value, &pr.source);
        }
    }
    if project_access == ProjectAccess::Review {
        for pr in policy
            .protected
            .iter()
            .filter(|p| !p.value.starts_with("~/"))
        {
            b.note(
                "protected",
                &pr.value,
                "review mode: written to the change set, listed first and applied only with --include-handoff",
                &pr.source,
            );
        }
    } else if project_access != ProjectAccess::Read {
        for pr in policy
            .protected
            .iter()
            .filter(|p| !p.value.starts_with("~/"))
        {
            match resolve_in_project("filesystem.protected", &pr.value, facts)? {
                Some(p) => protect(
                    b,
                    writable_roots,
                    &p,
                    "read-only bind over the writable project",
                    &pr.source,
                ),
                None => watch_absent(
                    b,
                    &mut handoff_watch,
                    facts.project.join(&pr.value),
                    policy.handoff.value,
                    &pr.source,
                ),
            }
        }
    }
    Ok((handoff_watch, links))
}
