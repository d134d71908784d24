//! `vetto changes`: list, diff, apply and discard review mode's change sets ([`crate::changes`]).

use std::fmt::Write as _;

use anyhow::{Context, Result};

use crate::changes::apply::{self, Options, Result1};
use crate::changes::scan::{Entry, Kind};
use crate::changes::{self, ChangeSet};
use crate::cli::ChangesCommand;
use vetto_broker::audit::event::{now_ms, Changes, EventKind, Skipped};
use vetto_broker::audit::{AuditConfig, Recorder};

/// Run a `vetto changes` command; the exit code is 1 when an `apply` left something selected
/// unapplied.
pub fn command(c: &ChangesCommand) -> Result<u8> {
    // A deep tree holds a descriptor or two per level while it is walked: the soft limit on
    // descriptors is raised to the hard one (a tree deeper than that fails with the reason,
    // before anything is applied).
    if let Ok((_, hard)) =
        nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
    {
        let _ =
            nix::sys::resource::setrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE, hard, hard);
    }
    match c {
        ChangesCommand::List { id: None, json } => list_sets(*json),
        ChangesCommand::List { id: Some(id), json } => {
            let cs = ChangeSet::open(id)?;
            let entries = cs.scan()?;
            if *json {
                let v = serde_json::json!({ "meta": cs.meta, "entries": entries });
                println!("{}", serde_json::to_string_pretty(&v)?);
            } else {
                print!("{}", summary(&cs, &entries));
            }
            Ok(0)
        }
        ChangesCommand::Diff { id, paths } => {
            let cs = ChangeSet::open(id)?;
            let sel = paths
                .iter()
                .map(|p| apply::normalize(p, &cs.meta.project))
                .collect::<Result<Vec<_>, _>>()?;
            let upper = cs.upper_dir()?;
            let project = cs.project_dir()?;
            let entries = changes::scan::scan(&upper, &project, &cs.meta.protected)?;
            let mut shown = 0;
            for e in entries.iter().filter(|e| apply::selected(&sel, &e.path)) {
                print!("{}", changes::diff::entry(&upper, &project, e)?);
                shown += 1;
            }
            if shown == 0 && !sel.is_empty() {
                anyhow::bail!(
                    "changes: nothing in change set {id} under {}",
                    sel.join(", ")
                );
            }
            Ok(0)
        }
        ChangesCommand::Apply {
            id,
            paths,
            force,
            include_handoff,
            accept_unsynced,
            no_audit,
        } => {
            let mut cs = ChangeSet::open(id)?;
            let sel = paths
                .iter()
                .map(|p| apply::normalize(p, &cs.meta.project))
                .collect::<Result<Vec<_>, _>>()?;
            let rec = recorder(id, *no_audit)?;
            let out = apply::apply(
                &mut cs,
                &sel,
                Options {
                    force: *force,
                    include_handoff: *include_handoff,
                    accept_unsynced: *accept_unsynced,
                },
            )
            .with_context(|| format!("applying change set {id}"))?;
            let mut lines = vec![];
            let (mut applied, mut skipped) = (vec![], vec![]);
            for (e, r) in &out.entries {
                let p = e.path.escape_debug().to_string();
                match r {
                    Result1::Applied if e.kind == Kind::Nothing => {}
                    Result1::Applied => {
                        lines.push(format!("applied  {} {p}", e.kind.tag()));
                        applied.push(format!("{} {p}", e.kind.tag()));
                    }
                    Result1::Skipped(why) => {
                        lines.push(format!("skipped  {} {p}: {why}", e.kind.tag()));
                        skipped.push(Skipped {
                            path: p,
                            why: why.clone(),
                        });
                    }
                    Result1::Failed(why) => {
                        lines.push(format!("FAILED   {} {p}: {why}", e.kind.tag()));
                        skipped.push(Skipped {
                            path: p,
                            why: format!("failed: {why}"),
                        });
                    }
                }
            }
            let n = applied.len();
            let error = out.save_error.as_ref().map(|e| e.to_string());
            // Recorded before anything is printed: a reader that goes away (SIGPIPE) must not
            // cost the record of a change already made.
            record(
                rec,
                changes_record(
                    "apply",
                    &cs,
                    applied,
                    skipped,
                    (*force, *include_handoff, *accept_unsynced),
                    error.clone(),
                ),
            )?;
            for l in lines {
                println!("{l}");
            }
            println!("{n} applied to {}", cs.meta.project.display());
            if let Some(e) = error {
                anyhow::bail!("applying change set {id}: {e}");
            }
            Ok(if out.all_applied() { 0 } else { 1 })
        }
        ChangesCommand::Discard { id, no_audit } => {
            let cs = ChangeSet::open(id)?;
            let rec = recorder(id, *no_audit)?;
            let mut c = changes_record("discard", &cs, vec![], vec![], (false, false, false), None);
            let done = cs.discard();
            c.error = done.as_ref().err().map(|e| e.to_string());
            record(rec, c)?;
            done?;
            println!("discarded change set {id}");
            Ok(0)
        }
    }
}

/// The audit trail's recorder for an apply or a discard of change set `id` (recorded under
/// the set's id), opened before anything changes: a decision that cannot be recorded is not
/// carried out.
fn recorder(id: &str, no_audit: bool) -> Result<Option<Recorder>> {
    if no_audit {
        return Ok(None);
    }
    let dir = crate::audit::user_dir()?;
    let refused = |e: vetto_broker::audit::AuditError| {
        anyhow::anyhow!(
            "audit: {}: nothing was changed (--no-audit goes ahead without a record)",
            vetto_broker::error_chain(&e)
        )
    };
    let mut rec = Recorder::open(&AuditConfig::in_dir(&dir), id).map_err(refused)?;
    // A signed checkpoint now: the store's chain and heads are checked and it is written to
    // (lock, space, permissions) before anything changes, not only after.
    rec.checkpoint().map_err(refused)?;
    Ok(Some(rec))
}

/// The `changes` record of an apply or a discard of `cs`: at most [`Changes::LISTED`] entries
/// of each list, with the totals and a digest of the whole lists. `flags`: `--force`,
/// `--include-handoff`, `--accept-unsynced`.
fn changes_record(
    action: &str,
    cs: &ChangeSet,
    mut applied: Vec<String>,
    mut skipped: Vec<Skipped>,
    flags: (bool, bool, bool),
    error: Option<String>,
) -> Changes {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    for a in &applied {
        h.update(a.as_bytes());
        h.update(b"\n");
    }
    for s in &skipped {
        h.update(s.path.as_bytes());
        h.update(b"\n");
        h.update(s.why.as_bytes());
        h.update(b"\n");
    }
    let lists_sha256 = crate::audit::hex(&h.finalize());
    let (applied_total, skipped_total) = (applied.len() as u64, skipped.len() as u64);
    applied.truncate(Changes::LISTED);
    skipped.truncate(Changes::LISTED);
    Changes {
        action: action.into(),
        change_set: cs.meta.id.clone(),
        project: cs.meta.project.display().to_string(),
        applied,
        applied_total,
        skipped,
        skipped_total,
        lists_sha256,
        force: flags.0,
        include_handoff: flags.1,
        accept_unsynced: flags.2,
        error,
        uid: nix::unistd::getuid().as_raw(),
    }
}

/// Record what was applied or discarded (the change is made: a failure here is reported, and
/// the command fails).
fn record(rec: Option<Recorder>, c: Changes) -> Result<()> {
    let Some(mut rec) = rec else {
        return Ok(());
    };
    rec.record_batch(vec![(now_ms(), EventKind::Changes(c))], true)
        .map(|_| ())
        .map_err(|e| {
            anyhow::anyhow!(
                "audit: the change was made but could not be recorded: {}",
                vetto_broker::error_chain(&e)
            )
        })
}

fn list_sets(json: bool) -> Result<u8> {
    let sets = changes::list()?;
    if json {
        let v: Vec<_> = sets
            .iter()
            .map(|m| match m {
                Ok(m) => serde_json::to_value(m).unwrap_or_default(),
                Err(e) => serde_json::json!({ "error": e.to_string() }),
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(0);
    }
    for m in sets {
        match m {
            Ok(m) => println!(
                "{}  {}  {} session(s){}",
                m.id,
                m.project.display(),
                m.sessions.len(),
                match changes::dir()
                    .is_some_and(|d| changes::unsynced_before_restart(&d.join(&m.id), &m))
                {
                    true => "  (last used before a restart: may be incomplete)",
                    false => "",
                }
            ),
            Err(e) => println!("?  {e}"),
        }
    }
    Ok(0)
}

/// The review summary of a set: counts, then trust-handoff entries, refused entries and the
/// rest. Printed by `vetto changes list ID` and at the end of a review-mode session.
pub fn summary(cs: &ChangeSet, entries: &[Entry]) -> String {
    let mut s = String::new();
    let count = |k: Kind| {
        entries
            .iter()
            .filter(|e| e.kind == k && e.refused.is_none())
            .count()
    };
    let handoff: Vec<&Entry> = entries
        .iter()
        .filter(|e| e.handoff && e.refused.is_none() && e.kind != Kind::Nothing)
        .collect();
    let refused: Vec<&Entry> = entries.iter().filter(|e| e.refused.is_some()).collect();
    let _ = writeln!(
        s,
        "change set {} for {}: {} added, {} modified, {} deleted, {} mode changes, {} replaced; {} trust-handoff, {} refused",
        cs.meta.id,
        cs.meta.project.display(),
        count(Kind::Added),
        count(Kind::Modified),
        count(Kind::Deleted),
        count(Kind::Mode),
        count(Kind::Replaced),
        handoff.len(),
        refused.len()
    );
    if cs.unsynced_before_restart() {
        let _ = writeln!(
            s,
            "WARNING: the system restarted after this set's last session, whose writes were left to the kernel to flush: after a crash, files in it may be incomplete (apply needs --accept-unsynced; it cannot be resumed)"
        );
    }
    if !handoff.is_empty() {
        let _ = writeln!(
            s,
            "trust-handoff paths (host tools load or run these; not applied without --include-handoff):"
        );
        for e in &handoff {
            let _ = writeln!(s, "  {} {}", e.kind.tag(), e.path.escape_debug());
        }
    }
    if !refused.is_empty() {
        let _ = writeln!(s, "refused (never applied):");
        for e in &refused {
            let _ = writeln!(
                s,
                "  ! {}: {}",
                e.path.escape_debug(),
                e.refused.as_deref().unwrap_or("")
            );
        }
    }
    let rest: Vec<&Entry> = entries
        .iter()
        .filter(|e| !e.handoff && e.refused.is_none() && e.kind != Kind::Nothing)
        .collect();
    if !rest.is_empty() {
        let _ = writeln!(s, "changes:");
        for e in rest {
            let notes = if e.notes.is_empty() {
                String::new()
            } else {
                format!(" ({})", e.notes.join("; "))
            };
            let _ = writeln!(s, "  {} {}{notes}", e.kind.tag(), e.path.escape_debug());
        }
    }
    s
}
