//! The audit trail at the binaries' edge: which store and exporters a session uses, its
//! `session_start` / `session_end` / `limit` / `refusal` records, `--report` and `--summary`,
//! and `vetto audit verify|query|sessions|export`.
//!
//! The store, its key and the exporters live in the library (`vetto_broker::audit`); this
//! module only decides where and when.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{anyhow, bail, Context, Result};
use sha2::{Digest, Sha256};

use vetto_broker::audit::event::{
    now_ms, parse_rfc3339, rfc3339, EndReason, Engine, Limit, Refusal, SessionEnd, SessionStart,
    KINDS,
};
use vetto_broker::audit::report::Report;
use vetto_broker::audit::{
    key, otlp, verify, AuditConfig, EventKind, Filter, JsonlTarget, Recorder, Store, StorePaths,
};
use vetto_broker::error_chain;
use vetto_bundle::resolve::Policy;

use crate::cli::{AuditArgs, AuditCommand};

/// The store directory `vetto run` writes (`$XDG_STATE_HOME/vetto/audit`), created 0700.
pub fn user_dir() -> Result<PathBuf> {
    let dir = vetto_broker::audit::user_dir().ok_or_else(|| {
        anyhow!("audit: neither XDG_STATE_HOME nor HOME names a directory for the audit store")
    })?;
    vetto_broker::audit::store::private_dir(&dir).map_err(|e| anyhow!(error_chain(&e)))?;
    Ok(dir)
}

/// Make the store's directory before the sandbox is planned, so the secret scan finds it and
/// masks it wherever the sandbox could otherwise see it (the key is made inside it on first
/// use, when the session's recorder opens).
pub fn prepare(a: &AuditArgs) -> Result<Option<PathBuf>> {
    if a.no_audit {
        return Ok(None);
    }
    user_dir().map(Some)
}

/// A `~/`-relative path made absolute against `home`.
fn expand(p: &str, home: &Path) -> String {
    match p.strip_prefix("~/") {
        Some(rest) => home.join(rest).display().to_string(),
        None => p.to_string(),
    }
}

/// The audit configuration of a `vetto run` whose store is in `dir`: the exporters named by
/// the flags, else by the policy.
pub fn run_config(
    dir: &Path,
    a: &AuditArgs,
    policy: Option<&Policy>,
    home: &Path,
) -> Result<AuditConfig> {
    let mut cfg = AuditConfig::in_dir(dir);
    let from_policy = |f: fn(&Policy) -> &Option<vetto_bundle::resolve::Sourced<String>>| {
        policy.and_then(|p| f(p).as_ref().map(|s| s.value.clone()))
    };
    cfg.jsonl = a
        .audit_jsonl
        .clone()
        .or_else(|| from_policy(|p| &p.audit_jsonl))
        .map(|j| JsonlTarget::parse(&expand(&j, home)));
    cfg.otlp = a
        .audit_otlp
        .clone()
        .or_else(|| from_policy(|p| &p.audit_otlp));
    if cfg.jsonl == Some(JsonlTarget::Stdout) {
        bail!("audit.jsonl = \"-\": the sandboxed command writes to the same stdout and could forge lines; give a file outside the sandbox's reach");
    }
    if let Some(u) = &cfg.otlp {
        otlp::destination(u).map_err(|e| anyhow!("audit.otlp: {}", error_chain(&e)))?;
    }
    Ok(cfg)
}

/// The JSONL file is opened by the supervisor and, while the session runs, by its broker: it
/// may not lie where the sandbox can write, or the sandbox could put a link or a FIFO there
/// between the two opens (or edit what was written); nor where a bind shows it inside.
pub fn check_outside(cfg: &AuditConfig, writable: &[PathBuf], visible: &[PathBuf]) -> Result<()> {
    let Some(JsonlTarget::File(p)) = &cfg.jsonl else {
        return Ok(());
    };
    if !p.is_absolute() {
        // Refused with its own reason when it is opened.
        return Ok(());
    }
    let canon = vetto_bundle::host::canonical_beyond(p)
        .with_context(|| format!("audit.jsonl {}", p.display()))?;
    if let Some(root) = writable.iter().find(|r| canon.starts_with(r)) {
        bail!(
            "audit.jsonl {}: inside {}, which the sandbox can write (it could replace the file during the session); choose a path outside it",
            p.display(),
            root.display()
        );
    }
    // Nor where it can read: the trail holds every session's commands and destinations.
    if let Some(src) = visible.iter().find(|r| canon.starts_with(r)) {
        bail!(
            "audit.jsonl {}: inside {}, which the sandbox can read; choose a path outside it",
            p.display(),
            src.display()
        );
    }
    Ok(())
}

/// SHA-256 (hex) of the effective policy.
pub fn policy_digest(p: &Policy) -> String {
    let json = serde_json::to_vec(p).unwrap_or_default();
    hex(&Sha256::digest(json))
}

/// Lower-case hex of `b`.
pub(crate) fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Every layer a policy was made from, in order.
pub fn layers(p: &Policy) -> Vec<String> {
    let mut out = vec![format!("built-in profile {:?}", p.profile)];
    out.extend(p.files.iter().map(|f| f.display().to_string()));
    out
}

pub mod writer;
pub use writer::{spawn, Ending, Live, Pending};

/// Both tiers' supervisors: fork the session's writer (if the session is audited), with the
/// `--report` and `--summary` of `a`. Fails closed.
pub fn start_writer(
    cfg: Option<&AuditConfig>,
    session: &str,
    start: impl FnOnce() -> SessionStart,
    a: &AuditArgs,
) -> Result<Option<Pending>> {
    cfg.map(|cfg| {
        spawn(cfg, session, start(), a.report.as_deref(), a.summary).map_err(|e| {
            e.context("audit: the session cannot be recorded, so the command does not run")
        })
    })
    .transpose()
}

/// A session being recorded, in this process: the audit writer's (see [`writer`]).
pub(crate) struct Local {
    rec: Recorder,
    started: Instant,
    /// What to show on stderr with the end (limits that could not be recorded).
    notes: String,
}

/// Open the store and record `session_start`. Fails (closed) if it cannot be recorded.
pub(crate) fn begin_local(cfg: &AuditConfig, session: &str, start: SessionStart) -> Result<Local> {
    let mut rec = Recorder::open(cfg, session).map_err(|e| anyhow!(error_chain(&e)))?;
    // The writer folds the WAL into the database after its answers, not inside the commit
    // that someone waits for (`Local::close`).
    rec.store().defer_checkpoints();
    let stored = rec
        .record(EventKind::SessionStart(start))
        .map_err(|e| anyhow!(error_chain(&e)))?;
    if let Some(url) = &cfg.otlp {
        // A destination this store has never sent to starts with this session, not with the
        // whole history (`vetto audit export` sends that).
        otlp::start_cursor(rec.store(), url, stored.event.seq.saturating_sub(1))
            .map_err(|e| anyhow!("audit.otlp: {}", error_chain(&e)))?;
    }
    Ok(Local {
        rec,
        started: Instant::now(),
        notes: String::new(),
    })
}

impl Local {
    /// Record a limit that was reached (a failure is reported, not fatal: the session is over).
    pub fn limit(&mut self, l: Limit) {
        if let Err(e) = self.rec.record(EventKind::Limit(l)) {
            self.notes
                .push_str(&format!("vetto: audit: {}\n", error_chain(&e)));
        }
    }

    /// End, as `lost`, each session of `sessions` that this store holds a `session_start` of
    /// and no `session_end`: sessions whose supervisor and writer both ended before the end
    /// was recorded (killed together, or the machine stopped), found when their directories
    /// were swept as stale. The duration is up to the last record of them. A failure is noted
    /// (shown with the end), not fatal.
    pub fn end_abandoned(&mut self, sessions: &[String]) {
        use std::fmt::Write as _;
        for id in sessions {
            let records = match self.rec.store().query(&Filter {
                session: Some(id.clone()),
                ..Filter::default()
            }) {
                Ok(r) => r,
                Err(e) => {
                    writeln!(
                        self.notes,
                        "vetto: audit: reading session {id}: {}",
                        error_chain(&e)
                    )
                    .ok();
                    continue;
                }
            };
            let start = records
                .iter()
                .find(|r| matches!(r.event.kind, EventKind::SessionStart(_)));
            let ended = records
                .iter()
                .any(|r| matches!(r.event.kind, EventKind::SessionEnd(_)));
            let (Some(start), false, Some(last)) = (start, ended, records.last()) else {
                continue;
            };
            let ms = |t: &str| parse_rfc3339(t).unwrap_or(0);
            let end = SessionEnd {
                status: None,
                signal: None,
                duration_ms: ms(&last.event.time).saturating_sub(ms(&start.event.time)),
                reason: EndReason::Lost,
                control: Some(format!(
                    "vetto's supervisor and its audit writer both ended before they recorded the \
                     session's end (killed together, or the machine stopped); found by session {} \
                     when it swept this one's directory; its last record was at {}; the \
                     command's status is not known",
                    self.rec.session(),
                    last.event.time
                )),
            };
            if let Err(e) =
                self.rec
                    .record_batch_as(id, vec![(now_ms(), EventKind::SessionEnd(end))], true)
            {
                writeln!(
                    self.notes,
                    "vetto: audit: ending abandoned session {id}: {}",
                    error_chain(&e)
                )
                .ok();
            }
        }
    }

    /// Record `session_end` with a signed checkpoint, export, and write the report. Returns
    /// whether the end was recorded, and what to show on stderr (problems, the summary): the
    /// supervisor prints it, in its own order.
    pub fn end(
        &mut self,
        status: Option<i32>,
        signal: Option<i32>,
        reason: EndReason,
        control: Option<String>,
        report: Option<&Path>,
        summary: bool,
    ) -> (bool, String) {
        use std::fmt::Write as _;
        let mut out = std::mem::take(&mut self.notes);
        let end = SessionEnd {
            status,
            signal,
            duration_ms: u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX),
            reason,
            control,
        };
        let mut ok = true;
        if let Err(e) = self
            .rec
            .record_batch(vec![(now_ms(), EventKind::SessionEnd(end))], true)
        {
            writeln!(
                out,
                "vetto: audit: the session's end could not be recorded: {}",
                error_chain(&e)
            )
            .ok();
            ok = false;
        }
        if let Some(url) = self.rec.config().otlp.clone() {
            // One attempt within the deadline: a collector that is down costs the session
            // nothing more, and the next session (or `vetto audit export`) sends the backlog.
            let opts = otlp::Options {
                retries: 0,
                ..otlp::Options::default()
            };
            match otlp::export_pending(self.rec.store(), &url, &opts) {
                Ok(x) if x.pending > 0 => writeln!(
                    out,
                    "vetto: audit: the OTLP collector at {url} did not take {} event(s) yet; they wait in the store (`vetto audit export --otlp {url}` sends them)",
                    x.pending
                ),
                Ok(_) => Ok(()),
                Err(e) => writeln!(out, "vetto: audit: OTLP export to {url}: {}", error_chain(&e)),
            }
            .ok();
        }
        if report.is_some() || summary {
            match self.rec.session_events() {
                Ok(events) => {
                    let r = Report::from_records(self.rec.session(), &events);
                    if let Some(path) = report {
                        if let Err(e) = write_report(path, &r) {
                            writeln!(out, "vetto: --report {}: {e:#}", path.display()).ok();
                        }
                    }
                    if summary {
                        out.push_str(&r.summary());
                    }
                }
                Err(e) => {
                    writeln!(
                        out,
                        "vetto: audit: reading the session back: {}",
                        error_chain(&e)
                    )
                    .ok();
                }
            }
        }
        (ok, out)
    }

    /// After the last answer: fold the WAL into the database if it is due (see
    /// `Store::defer_checkpoints`), then close the store. Nobody waits for this: vetto's
    /// status has been delivered, or is being, while it runs.
    pub fn close(self) {
        // A checkpoint that fails loses nothing (the records are in the WAL, which the next
        // checkpoint folds), and there is nobody left to tell: stderr is /dev/null by now.
        let _ = self.rec.store().checkpoint_if_due();
    }
}

fn write_report(path: &Path, r: &Report) -> Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .context("opening")?;
    if !f.metadata()?.is_file() {
        bail!("not a regular file");
    }
    serde_json::to_writer_pretty(&mut f, r)?;
    f.write_all(b"\n")?;
    Ok(())
}

/// Record a refusal (best effort: the refusal itself is what the user sees).
pub fn refusal(
    cfg: &AuditConfig,
    session: &str,
    subject: &str,
    reasons: Vec<String>,
    argv: &[String],
    engine: Engine,
) {
    let r = Refusal {
        subject: subject.to_string(),
        reasons,
        argv: argv.to_vec(),
        engine,
    };
    if let Err(e) = vetto_broker::audit::record_refusal(cfg, session, r) {
        eprintln!(
            "vetto: audit: the refusal could not be recorded: {}",
            error_chain(&e)
        );
    }
}

/// A `session_start` for `vetto run`.
pub fn run_start(
    policy: &Policy,
    landlock_abi: Option<u32>,
    argv: &[String],
    project: &Path,
    uid: u32,
    tier: &str,
) -> SessionStart {
    SessionStart {
        policy_digest: policy_digest(policy),
        profile: policy.profile.clone(),
        layers: layers(policy),
        tier: tier.into(),
        landlock_abi,
        argv: argv.to_vec(),
        project: project.display().to_string(),
        uid,
        engine: Engine::Run,
        change_set: None,
    }
}

// ---- `vetto audit …` ----

fn store_path(store: &Option<PathBuf>) -> Result<PathBuf> {
    match store {
        Some(s) => Ok(s.clone()),
        None => Ok(vetto_broker::audit::user_dir()
            .ok_or_else(|| anyhow!("no audit store: give --store"))?
            .join("audit.db")),
    }
}

/// The public key to verify with: `--key` (a key or a public key file), else the key next to
/// the store, else the user's.
fn verifying_key(store: &Path, k: &Option<PathBuf>) -> Result<ed25519_dalek::VerifyingKey> {
    let candidates: Vec<PathBuf> = match k {
        Some(k) => vec![k.clone()],
        None => {
            let mut v = vec![];
            if let Some(d) = store.parent() {
                v.push(d.join("audit.key"));
                v.push(d.join("audit.pub"));
            }
            if let Some(d) = vetto_broker::audit::user_dir() {
                v.push(d.join("audit.key"));
            }
            v
        }
    };
    for c in &candidates {
        if !c.exists() {
            continue;
        }
        let text = std::fs::read_to_string(c).unwrap_or_default();
        if text.starts_with("vetto-audit-ed25519-seed") {
            return key::load(c)
                .map(|k| k.verifying_key())
                .map_err(|e| anyhow!(error_chain(&e)));
        }
        return key::load_public(c).map_err(|e| anyhow!(error_chain(&e)));
    }
    bail!(
        "no key to verify with (looked for {}); give --key with the store's audit.key or audit.pub",
        candidates
            .iter()
            .map(|c| c.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    )
}

/// `--since`: an RFC 3339 time, or a duration back from now (`30s`, `10m`, `2h`, `7d`).
pub fn parse_since(s: &str) -> Result<String> {
    if let Some(ms) = parse_rfc3339(s) {
        return Ok(rfc3339(ms));
    }
    let (num, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
    let n: u64 = num.parse().map_err(|_| {
        anyhow!("--since {s:?}: not a time (2026-11-30T12:00:00Z) or a duration (10m, 2h, 7d)")
    })?;
    let secs = match unit {
        "s" | "" => n,
        "m" => n * 60,
        "h" => n * 3600,
        "d" => n * 86_400,
        _ => bail!("--since {s:?}: unknown unit {unit:?} (s, m, h, d)"),
    };
    Ok(rfc3339(now_ms().saturating_sub(secs.saturating_mul(1000))))
}

fn open(store: &Option<PathBuf>) -> Result<Store> {
    let p = store_path(store)?;
    Store::open(&StorePaths::new(&p), false).map_err(|e| anyhow!(error_chain(&e)))
}

/// `vetto audit …`; returns the exit status.
pub fn command(c: &AuditCommand) -> Result<u8> {
    match c {
        AuditCommand::Verify { store, key, json } => {
            let p = store_path(store)?;
            let k = verifying_key(&p, key)?;
            let r =
                verify::verify(&StorePaths::new(&p), &k).map_err(|e| anyhow!(error_chain(&e)))?;
            if *json {
                println!("{}", serde_json::to_string_pretty(&r)?);
            } else if r.ok() {
                println!(
                    "audit store {} verifies: {} records in {} sessions, {} signed checkpoints, signed head at record {}",
                    p.display(),
                    r.records,
                    r.sessions,
                    r.checkpoints,
                    r.head.map_or("-".into(), |h| h.to_string())
                );
            } else {
                println!(
                    "audit store {} is BROKEN at record {}:",
                    p.display(),
                    r.broken_at.unwrap_or(0)
                );
                for x in &r.problems {
                    println!("  {x}");
                }
            }
            Ok(u8::from(!r.ok()))
        }
        AuditCommand::Query {
            store,
            since,
            session,
            kind,
            json,
            limit,
        } => {
            if let Some(k) = kind {
                if !KINDS.contains(&k.as_str()) {
                    bail!("--kind {k:?}: not a kind (one of {})", KINDS.join(", "));
                }
            }
            let s = open(store)?;
            let rows = s
                .query(&Filter {
                    since: since.as_deref().map(parse_since).transpose()?,
                    session: session.clone(),
                    kind: kind.clone(),
                    after_seq: None,
                    limit: *limit,
                })
                .map_err(|e| anyhow!(error_chain(&e)))?;
            let mut out = std::io::stdout().lock();
            for r in rows {
                if *json {
                    writeln!(out, "{}", r.to_json())?;
                } else {
                    writeln!(
                        out,
                        "{:>6} {} {} #{:<3} {:<18} {}",
                        r.event.seq,
                        r.event.time,
                        r.event.session,
                        r.event.session_seq,
                        r.event.kind.name(),
                        describe(&r.event.kind)
                    )?;
                }
            }
            Ok(0)
        }
        AuditCommand::Sessions { store, json } => {
            let s = open(store)?;
            let rows = s.sessions().map_err(|e| anyhow!(error_chain(&e)))?;
            let mut out = std::io::stdout().lock();
            for r in rows {
                if *json {
                    writeln!(out, "{}", serde_json::to_string(&r)?)?;
                    continue;
                }
                let argv = r
                    .start
                    .as_ref()
                    .and_then(|s| s["argv"].as_array())
                    .map(|a| {
                        a.iter()
                            .filter_map(|x| x.as_str())
                            .collect::<Vec<_>>()
                            .join(" ")
                    })
                    .unwrap_or_default();
                let end = r
                    .end
                    .as_ref()
                    .map(|e| {
                        format!(
                            "{} {}",
                            e["reason"].as_str().unwrap_or("?"),
                            e["status"].as_i64().map_or("-".into(), |s| s.to_string())
                        )
                    })
                    .unwrap_or_else(|| "(no end recorded)".into());
                writeln!(
                    out,
                    "{}  {}  {:<22} conn +{} -{}  {}",
                    r.session, r.first, end, r.allowed, r.denied, argv
                )?;
            }
            Ok(0)
        }
        AuditCommand::Export { store, otlp: url } => {
            let s = open(store)?;
            let x = otlp::export_pending(
                &s,
                url,
                &otlp::Options {
                    deadline: std::time::Duration::from_secs(30),
                    ..otlp::Options::default()
                },
            )
            .map_err(|e| anyhow!(error_chain(&e)))?;
            println!("sent {} event(s); {} still pending", x.sent, x.pending);
            Ok(u8::from(x.pending > 0))
        }
    }
}

/// One line about an event, as `vetto audit query` and `vetto watch` show it.
pub fn describe(k: &EventKind) -> String {
    match k {
        EventKind::SessionStart(s) => format!("{} ({})", s.argv.join(" "), s.project),
        EventKind::SessionEnd(e) => format!(
            "{} status={} {} ms{}",
            e.reason.as_str(),
            e.status.map_or("-".into(), |s| s.to_string()),
            e.duration_ms,
            e.control
                .as_deref()
                .map(|c| format!(": {c}"))
                .unwrap_or_default()
        ),
        EventKind::Connection(c) => format!(
            "{} {} {} ({} up, {} down)",
            c.decision,
            c.destination.as_deref().unwrap_or("-"),
            c.reason,
            c.bytes_up,
            c.bytes_down
        ),
        EventKind::Refusal(r) => format!("{}: {}", r.subject, r.reasons.join("; ")),
        EventKind::Limit(l) => format!("{} {}: {}", l.limit, l.value, l.detail),
        EventKind::Changes(c) => {
            let flags: Vec<&str> = [
                (c.force, "--force"),
                (c.include_handoff, "--include-handoff"),
                (c.accept_unsynced, "--accept-unsynced"),
            ]
            .into_iter()
            .filter_map(|(on, f)| on.then_some(f))
            .collect();
            format!(
                "{} change set {} ({}): {} applied, {} skipped{}{}",
                c.action,
                c.change_set,
                c.project,
                c.applied_total,
                c.skipped_total,
                flags.iter().map(|f| format!(", {f}")).collect::<String>(),
                c.error
                    .as_deref()
                    .map(|e| format!("; error: {e}"))
                    .unwrap_or_default()
            )
        }
        EventKind::ApprovalRequested(a)
        | EventKind::ApprovalGranted(a)
        | EventKind::ApprovalDenied(a)
        | EventKind::ApprovalTimeout(a)
        | EventKind::ApprovalRevoked(a)
        | EventKind::ApprovalParked(a) => {
            let mut s = format!("{} {}", a.id, a.destination);
            if let Some(sc) = a.scope {
                s.push_str(&format!(
                    " {}",
                    serde_json::to_value(sc)
                        .ok()
                        .and_then(|v| v.as_str().map(str::to_string))
                        .unwrap_or_default()
                ));
            }
            if let Some(by) = &a.answered_by {
                s.push_str(&format!(" by {by}"));
            }
            s
        }
    }
}
