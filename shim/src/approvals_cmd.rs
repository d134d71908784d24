//! `vetto approvals`: list and answer pending requests, list and revoke persistent grants
//! and denials, and answer parked requests (for the next run).
//!
//! Live requests are answered through each session's control socket (its broker checks our
//! credentials); parked requests and persistent rules live in the approvals store, which this
//! command writes itself, recording each answer in the audit trail.

use std::path::PathBuf;

use anyhow::{anyhow, bail, Context, Result};
use vetto_broker::approvals::control::{self, Client, Reply, Request};
use vetto_broker::approvals::gate::Status;
use vetto_broker::approvals::rules::normalize_destination;
use vetto_broker::approvals::{Parked, Rule, RuleStore, Scope, Verdict};
use vetto_broker::audit::event::{rfc3339, Approval, EventKind};
use vetto_broker::audit::{AuditConfig, Recorder};
use vetto_broker::error_chain;

use crate::cli::{ApprovalsArgs, ApprovalsCommand};

const VIA: &str = "vetto approvals";

/// Which store a command works on.
#[derive(Clone, Copy)]
struct Which<'a> {
    shim: bool,
    store: Option<&'a std::path::Path>,
}

impl Which<'_> {
    /// Live sessions are asked only about the user's own store.
    fn live(&self) -> bool {
        !self.shim && self.store.is_none()
    }
    fn path(&self) -> Result<PathBuf> {
        match self.store {
            Some(p) => Ok(p.to_path_buf()),
            None => store_path(self.shim),
        }
    }
}

/// The approvals store: yours, or `vetto-shim`'s.
pub fn store_path(shim: bool) -> Result<PathBuf> {
    if shim {
        return Ok(PathBuf::from(vetto_broker::audit::SHIM_DIR).join("approvals.db"));
    }
    vetto_broker::audit::user_dir()
        .map(|d| d.join("approvals.db"))
        .ok_or_else(|| anyhow!("approvals: no state directory (set HOME or XDG_STATE_HOME)"))
}

/// The store, if there is one: reading or answering never creates it (a store vetto did not
/// make is not trusted, and an empty one answers nothing). A store named with `--store` must
/// exist.
fn open_store(w: Which) -> Result<Option<RuleStore>> {
    let p = w.path()?;
    match std::fs::symlink_metadata(&p) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if w.store.is_some() {
                bail!("approvals: no approvals store at {}", p.display());
            }
            return Ok(None);
        }
        Err(e) => bail!("approvals: cannot read {}: {e}", p.display()),
        Ok(_) => {}
    }
    RuleStore::open(&p)
        .map(Some)
        .map_err(|e| anyhow!(error_chain(&e)))
}

/// Every live session's status, with its socket.
pub fn live_sessions() -> Vec<(PathBuf, Status)> {
    let uid = nix::unistd::geteuid().as_raw();
    let Ok(root) = crate::session::runtime_root(uid) else {
        return vec![];
    };
    control::sockets(&root)
        .into_iter()
        .filter_map(|sock| {
            let mut c = Client::connect(&sock).ok()?;
            match c.call(&Request::Status).ok()? {
                Reply {
                    ok: true,
                    status: Some(s),
                    ..
                } => Some((sock, s)),
                _ => None,
            }
        })
        .collect()
}

fn reply(r: Reply) -> Result<()> {
    if r.ok {
        println!("{}", r.message);
        Ok(())
    } else {
        bail!("{}", r.message)
    }
}

/// Record an answer given here (to a parked request, or a revocation) in the audit trail
/// beside the approvals store.
fn record(w: Which, kind: EventKind) {
    let Some(dir) = w.path().ok().and_then(|p| p.parent().map(PathBuf::from)) else {
        return;
    };
    let cfg = AuditConfig::in_dir(&dir);
    let res = Recorder::open(&cfg, &crate::session::new_id())
        .and_then(|mut r| r.record_batch(vec![(vetto_broker::audit::event::now_ms(), kind)], true));
    if let Err(e) = res {
        eprintln!(
            "vetto: approvals: the answer was kept, but not recorded in the audit trail: {}",
            error_chain(&e)
        );
    }
}

fn by() -> String {
    format!(
        "uid {} ({VIA}, pid {})",
        nix::unistd::geteuid().as_raw(),
        std::process::id()
    )
}

/// `vetto approvals …`.
pub fn command(a: &ApprovalsArgs) -> Result<u8> {
    let w = Which {
        shim: a.shim,
        store: a.store.as_deref(),
    };
    match &a.command {
        None => list(w, a.all, a.json),
        Some(ApprovalsCommand::List { all, json }) => list(w, *all || a.all, *json || a.json),
        Some(ApprovalsCommand::Grant {
            id,
            once: _,
            session,
            always,
            dest,
        }) => {
            let scope = if *always {
                Scope::Always
            } else if *session {
                Scope::Session
            } else {
                Scope::Once
            };
            answer(w, id, Verdict::Grant, scope, dest.as_deref())
        }
        Some(ApprovalsCommand::Deny { id, always, dest }) => {
            let scope = if *always {
                Scope::Always
            } else {
                Scope::Session
            };
            answer(w, id, Verdict::Deny, scope, dest.as_deref())
        }
        Some(ApprovalsCommand::Revoke { id }) => revoke(w, id),
        Some(ApprovalsCommand::Follow) => follow(),
    }
}

fn list(w: Which, all: bool, json: bool) -> Result<u8> {
    let live = if w.live() { live_sessions() } else { vec![] };
    let store = open_store(w)?;
    let parked = match &store {
        Some(s) => s.parked().map_err(|e| anyhow!(error_chain(&e)))?,
        None => vec![],
    };
    let rules = match (&store, all) {
        (Some(s), true) => s.rules(None).map_err(|e| anyhow!(error_chain(&e)))?,
        _ => vec![],
    };
    if json {
        let v = serde_json::json!({
            "sessions": live.iter().map(|(_, s)| s).collect::<Vec<_>>(),
            "parked": parked,
            "rules": rules,
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(0);
    }
    let mut pending = 0;
    for (_, s) in &live {
        for p in &s.pending {
            if pending == 0 {
                println!(
                    "{:<9} {:<10} {:<40} {:<20} {:>7} {:>5}",
                    "ID", "SESSION", "DESTINATION", "FIRST SEEN", "WAITING", "LEFT"
                );
            }
            pending += 1;
            println!(
                "{:<9} {:<10} {:<40} {:<20} {:>7} {:>4}s",
                p.id,
                short(&s.session),
                p.destination,
                rfc3339(p.first_ms),
                p.waiting,
                p.seconds_left
            );
        }
    }
    if pending == 0 {
        println!("no pending requests");
    }
    if !parked.is_empty() {
        println!("\nparked (nobody could answer; `vetto approvals grant ID --always` lets the next run through):");
        for p in &parked {
            print_parked(p);
        }
    }
    if all {
        println!("\nthis session's answers:");
        let mut any = false;
        for (_, s) in &live {
            for r in &s.session_rules {
                any = true;
                println!(
                    "  {:<9} {:<10} {} {} (by {})",
                    r.id,
                    short(&s.session),
                    r.verdict.as_str(),
                    r.destination,
                    r.by
                );
            }
        }
        if !any {
            println!("  none");
        }
        println!("\npersistent grants and denials:");
        if rules.is_empty() {
            println!("  none");
        }
        for r in &rules {
            print_rule(r);
        }
        if !live.is_empty() {
            println!("\nsessions:");
            for (_, s) in &live {
                println!(
                    "  {} {} mode={} operator={} ({})",
                    short(&s.session),
                    s.scope,
                    serde_json::to_value(s.mode)?.as_str().unwrap_or("?"),
                    if s.operator { "yes" } else { "no" },
                    rfc3339(s.started_ms)
                );
            }
        }
    }
    Ok(0)
}

fn short(s: &str) -> &str {
    s.get(..10).unwrap_or(s)
}

fn print_parked(p: &Parked) {
    println!(
        "  {:<9} {:<40} {} (first {}, last {}, {} time(s), session {})",
        p.id,
        p.destination,
        p.scope,
        rfc3339(p.first_ms),
        rfc3339(p.last_ms),
        p.count,
        short(&p.session)
    );
}

fn print_rule(r: &Rule) {
    println!(
        "  {:<9} {:<5} {:<40} {} (by {}, {}; {})",
        r.id,
        r.verdict.as_str(),
        r.destination,
        r.scope,
        r.created_by,
        rfc3339(r.created_ms),
        r.origin
    );
}

fn answer(w: Which, id: &str, verdict: Verdict, scope: Scope, dest: Option<&str>) -> Result<u8> {
    if w.live() {
        for (sock, s) in live_sessions() {
            if s.pending.iter().any(|p| p.id == id) {
                let mut c = Client::connect(&sock).map_err(|e| anyhow!(error_chain(&e)))?;
                let r = c
                    .call(&Request::Answer {
                        id: id.to_string(),
                        verdict,
                        scope,
                        pattern: dest.map(str::to_string),
                        via: VIA.into(),
                    })
                    .map_err(|e| anyhow!(error_chain(&e)))?;
                reply(r)?;
                return Ok(0);
            }
        }
    }
    let Some(store) = open_store(w)? else {
        bail!("no pending or parked request {id} (and no approvals store yet)");
    };
    let Some(p) = store
        .parked_by_id(id)
        .map_err(|e| anyhow!(error_chain(&e)))?
    else {
        bail!("no pending or parked request {id} (see `vetto approvals list --all`)");
    };
    if scope != Scope::Always {
        if verdict == Verdict::Deny {
            store.unpark(id).map_err(|e| anyhow!(error_chain(&e)))?;
            println!("dismissed parked request {id} ({}); it will be parked again if asked again (`deny --always` refuses it for good)", p.destination);
            return Ok(0);
        }
        bail!(
            "{id} is parked: its session did not wait for an answer. Only --always applies (it lets the next run through)"
        );
    }
    let destination = match dest {
        None => p.destination.clone(),
        Some(d) => {
            let norm = normalize_destination(d).map_err(|e| anyhow!(error_chain(&e)))?;
            let (host, port) = p
                .destination
                .rsplit_once(':')
                .context("a parked destination without a port")?;
            let covers = vetto_broker::DnsName::parse(host)
                .ok()
                .zip(port.parse::<u16>().ok())
                .is_some_and(|(n, port)| {
                    vetto_broker::AllowEntry::parse(&norm).is_ok_and(|e| e.allows(&n, port))
                });
            if !covers {
                bail!(
                    "{norm} does not cover the request's destination {}",
                    p.destination
                );
            }
            norm
        }
    };
    let by = by();
    let origin = format!("{} --always of parked request {id}", verdict.as_str());
    let rule = store
        .add(&p.scope, &destination, verdict, &by, &origin)
        .map_err(|e| anyhow!(error_chain(&e)))?;
    let approval = Approval {
        id: id.to_string(),
        destination: rule.destination.clone(),
        scope: Some(Scope::Always),
        answered_by: Some(by),
        waiting: 0,
    };
    record(
        w,
        match verdict {
            Verdict::Grant => EventKind::ApprovalGranted(approval),
            Verdict::Deny => EventKind::ApprovalDenied(approval),
        },
    );
    println!(
        "{} {} for {} from now on (rule {})",
        match verdict {
            Verdict::Grant => "granted",
            Verdict::Deny => "denied",
        },
        rule.destination,
        rule.scope,
        rule.id
    );
    Ok(0)
}

fn revoke(w: Which, id: &str) -> Result<u8> {
    let store = open_store(w)?;
    let revoked = match &store {
        Some(s) => s.revoke(id).map_err(|e| anyhow!(error_chain(&e)))?,
        None => None,
    };
    if let Some(r) = revoked {
        record(
            w,
            EventKind::ApprovalRevoked(Approval {
                id: r.id.clone(),
                destination: r.destination.clone(),
                scope: Some(Scope::Always),
                answered_by: Some(by()),
                waiting: 0,
            }),
        );
        println!(
            "revoked the persistent {} of {} for {}",
            r.verdict.as_str(),
            r.destination,
            r.scope
        );
        return Ok(0);
    }
    if w.live() {
        for (sock, s) in live_sessions() {
            if s.session_rules.iter().any(|r| r.id == id) {
                let mut c = Client::connect(&sock).map_err(|e| anyhow!(error_chain(&e)))?;
                let r = c
                    .call(&Request::Revoke {
                        id: id.to_string(),
                        via: VIA.into(),
                    })
                    .map_err(|e| anyhow!(error_chain(&e)))?;
                reply(r)?;
                return Ok(0);
            }
        }
    }
    bail!("no persistent rule or session answer {id} (see `vetto approvals list --all`)")
}

/// Attach to every session (present and future) and print each new pending request as one
/// line (`pending ID SESSION DESTINATION`); sessions count as attended meanwhile.
fn follow() -> Result<u8> {
    use std::collections::{HashMap, HashSet};
    use std::io::Write;
    use std::sync::mpsc;
    let uid = nix::unistd::geteuid().as_raw();
    let root = crate::session::runtime_root(uid)?;
    let (tx, rx) = mpsc::channel::<String>();
    let mut attached: HashMap<PathBuf, ()> = HashMap::new();
    let mut seen: HashSet<String> = HashSet::new();
    loop {
        for sock in control::sockets(&root) {
            if attached.contains_key(&sock) {
                continue;
            }
            attached.insert(sock.clone(), ());
            let tx = tx.clone();
            std::thread::spawn(move || {
                let Ok(mut c) = Client::connect(&sock) else {
                    return;
                };
                if c.subscribe().is_err() {
                    return;
                }
                let mut first = true;
                while let Ok(r) = c.recv() {
                    let Some(s) = r.status else {
                        let _ = tx.send(format!("error {}", r.message));
                        return;
                    };
                    if first {
                        first = false;
                        let _ = tx.send(format!("attached {} {}", s.session, s.scope));
                    }
                    for p in s.pending {
                        let _ =
                            tx.send(format!("pending {} {} {}", p.id, s.session, p.destination));
                    }
                }
            });
        }
        while let Ok(line) = rx.recv_timeout(std::time::Duration::from_millis(200)) {
            // A pending line is printed once per request.
            if line.starts_with("pending ") && !seen.insert(line.clone()) {
                continue;
            }
            println!("{line}");
            let _ = std::io::stdout().flush();
        }
    }
}
