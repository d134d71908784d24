//! Trust-handoff files the sandbox created: protected paths that were absent at start (so no
//! read-only bind could cover them) and that host tools load or run (`.mcp.json`,
//! `.vscode/tasks.json`, `.devcontainer/`, `.envrc`, ...). At the end of the session each one
//! that now exists is named on stderr and recorded in `$XDG_STATE_HOME/vetto/handoff.log`
//! (JSON lines), and with `filesystem.handoff = "remove"` removed.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use vetto_bundle::policy::HandoffAction;

/// What was found for one watched path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// The path.
    pub path: PathBuf,
    /// Removed (with `remove`), or why not.
    pub outcome: String,
}

/// Is every directory between `project` and `p` (exclusive) a real directory? A removal must
/// not follow a symlink the sandbox planted on the way.
fn plain_parents(project: &Path, p: &Path) -> bool {
    let Ok(rel) = p.strip_prefix(project) else {
        return false;
    };
    let mut cur = project.to_path_buf();
    let comps: Vec<_> = rel.components().collect();
    for c in comps.iter().take(comps.len().saturating_sub(1)) {
        cur.push(c);
        match cur.symlink_metadata() {
            Ok(m) if m.is_dir() => {}
            _ => return false,
        }
    }
    true
}

/// `.git` entries in the project now that were not there at start (`known`: the canonical
/// metadata paths found then): repositories the sandbox made, whose configuration a host `git`
/// run inside them (or an editor that scans subfolders for repositories) would read.
fn new_repositories(
    project: &Path,
    known: &[PathBuf],
    listings: &mut vetto_bundle::listing::ListingCache,
) -> Vec<PathBuf> {
    let scan = vetto_bundle::secrets::scan_project_cached(&[], project, project, true, listings);
    if scan.is_ok() {
        let _ = listings.save();
    }
    match scan {
        Ok(scan) => scan
            .git_entries
            .into_iter()
            .filter(|g| !known.contains(g))
            .collect(),
        Err(e) => {
            eprintln!("vetto: cannot look for git repositories the sandbox created: {e}");
            vec![]
        }
    }
}

/// [`check`] at a `vetto run` session's end (both tiers), from its translation, policy and
/// host facts. A read-only project cannot have gained a repository, nor one under review
/// (its writes went to a change set): no walk for those.
pub fn check_session(
    t: &vetto_bundle::translate::Translation,
    policy: &vetto_bundle::resolve::Policy,
    facts: &vetto_bundle::host::HostFacts,
    listings: vetto_bundle::listing::ListingCache,
    session: &str,
) -> Vec<Finding> {
    use vetto_bundle::policy::ProjectAccess;
    let known_git = (!matches!(
        policy.project.value,
        ProjectAccess::Read | ProjectAccess::Review
    ))
    .then_some((facts.git_metadata.as_slice(), listings));
    check(
        &t.handoff_watch,
        &t.handoff_links,
        known_git,
        t.handoff,
        &facts.project,
        &facts.home,
        session,
    )
}

/// Check the watched paths after the session, and (given the metadata paths known at start,
/// when the project was writable, with the project walk's listing cache) look for git
/// repositories the sandbox created; report,
/// record and (with `remove`) remove.
pub fn check(
    watch: &[PathBuf],
    links: &[(PathBuf, PathBuf)],
    known_git: Option<(&[PathBuf], vetto_bundle::listing::ListingCache)>,
    action: HandoffAction,
    project: &Path,
    home: &Path,
    session: &str,
) -> Vec<Finding> {
    let mut out = vec![];
    let mut watch = watch.to_vec();
    let created = known_git.map_or_else(Vec::new, |(k, mut listings)| {
        new_repositories(project, k, &mut listings)
    });
    for g in created {
        if !watch.contains(&g) {
            watch.push(g);
        }
    }
    for p in &watch {
        let Ok(meta) = p.symlink_metadata() else {
            continue;
        };
        // The root it lies in: the project, or HOME for an agent's own settings.
        let root = if p.starts_with(project) {
            project
        } else {
            home
        };
        let outcome = match action {
            HandoffAction::Warn => {
                "left in place: review it before a host tool loads it".to_string()
            }
            HandoffAction::Remove if !plain_parents(root, p) => {
                "NOT removed: a directory on its path is a symlink; review it".to_string()
            }
            HandoffAction::Remove => {
                let r = if meta.is_dir() {
                    std::fs::remove_dir_all(p)
                } else {
                    std::fs::remove_file(p)
                };
                match r {
                    Ok(()) => "removed (filesystem.handoff = \"remove\")".to_string(),
                    Err(e) => format!("NOT removed ({e}); review it"),
                }
            }
        };
        eprintln!(
            "vetto: trust handoff: the sandbox created {}, which host tools load; {outcome}",
            p.display()
        );
        tracing::warn!(path = %p.display(), %outcome, "trust handoff: created during the session");
        out.push(Finding {
            path: p.clone(),
            outcome,
        });
    }
    // Protected links: still the same link?
    for (p, target) in links {
        if std::fs::read_link(p).ok().as_ref() == Some(target) {
            continue;
        }
        let outcome = match action {
            HandoffAction::Warn => {
                format!(
                    "it was a link to {}: review what is there now before a host tool loads it",
                    target.display()
                )
            }
            HandoffAction::Remove if !plain_parents(home, p) => {
                "NOT restored: a directory on its path is a symlink; review it".to_string()
            }
            HandoffAction::Remove => {
                let gone = match p.symlink_metadata() {
                    Ok(m) if m.is_dir() => std::fs::remove_dir_all(p),
                    Ok(_) => std::fs::remove_file(p),
                    Err(_) => Ok(()),
                };
                match gone.and_then(|()| std::os::unix::fs::symlink(target, p)) {
                    Ok(()) => format!(
                        "the link to {} put back (filesystem.handoff = \"remove\")",
                        target.display()
                    ),
                    Err(e) => format!("NOT restored ({e}); it was a link to {}", target.display()),
                }
            }
        };
        eprintln!(
            "vetto: trust handoff: the sandbox replaced {}, which host tools load; {outcome}",
            p.display()
        );
        tracing::warn!(path = %p.display(), %outcome, "trust handoff: a protected link replaced during the session");
        out.push(Finding {
            path: p.clone(),
            outcome,
        });
    }
    if !out.is_empty() {
        if let Err(e) = record(&out, session) {
            eprintln!("vetto: cannot record the trust-handoff findings: {e}");
        }
    }
    out
}

fn record(findings: &[Finding], session: &str) -> std::io::Result<()> {
    let dir = vetto_broker::audit::state_dir().ok_or_else(|| std::io::Error::other("no HOME"))?;
    std::fs::create_dir_all(&dir)?;
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(dir.join("handoff.log"))?;
    let ts = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    for x in findings {
        let line = serde_json::json!({
            "time": ts,
            "session": session,
            "event": "trust_handoff_created",
            "path": x.path,
            "outcome": x.outcome,
        });
        writeln!(f, "{line}")?;
    }
    Ok(())
}
