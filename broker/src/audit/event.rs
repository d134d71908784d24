//! The audit event model: what a session records, for `vetto run` and `vetto-shim` alike.
//!
//! An [`Event`] is what a writer hands to the [`Recorder`](super::Recorder); the store gives it
//! its place (the session's sequence number and the chain's) when it is appended. Every kind a
//! later feature will emit (the `approval_*` kinds) is declared here now, so readers and
//! exporters already know its shape.
//!
//! Unknown fields are accepted when reading (serde cannot refuse them through the flattened,
//! tagged `kind`); what a record says is pinned by its hash, not by the parser.

use serde::{Deserialize, Serialize};

use crate::server::{ConnEvent, EventDecision};

/// The engine that ran a session.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Engine {
    /// `vetto run`.
    Run,
    /// A `vetto-shim` container.
    Shim {
        /// The container id the caller chose.
        container: String,
        /// The engine that drove the runtime (`podman`, `docker`, `containerd`, `cri-o`),
        /// when it can be told from the bundle's annotations.
        driver: Option<String>,
    },
}

/// Why a session ended.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
#[serde(rename_all = "snake_case")]
pub enum EndReason {
    /// The command exited on its own (see the status).
    Exit,
    /// The command was ended by a signal.
    Signal,
    /// The wall-clock limit killed the sandbox.
    WallClock,
    /// vetto (or the runtime's caller) killed the sandbox.
    Killed,
    /// The sandbox could not be set up; the command never ran (see `control`).
    SetupFailure,
    /// A shim container was deleted; its engine reaped it, so its status is not known here.
    Deleted,
    /// The supervisor ended (was killed) or gave the session up without recording its end:
    /// its audit writer recorded this when their connection closed (see `control`). The
    /// command's status is not known.
    Lost,
}

impl EndReason {
    /// The snake_case name.
    pub fn as_str(self) -> &'static str {
        match self {
            EndReason::Exit => "exit",
            EndReason::Signal => "signal",
            EndReason::WallClock => "wall_clock",
            EndReason::Killed => "killed",
            EndReason::SetupFailure => "setup_failure",
            EndReason::Deleted => "deleted",
            EndReason::Lost => "lost",
        }
    }
}

/// `session_start`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct SessionStart {
    /// SHA-256 (hex) of the effective policy, as `vetto policy explain --json` shows it.
    pub policy_digest: String,
    /// The base profile.
    pub profile: String,
    /// Every layer that contributed, in order (built-in profile, user file, policy files,
    /// flags).
    pub layers: Vec<String>,
    /// The tier in force (`FULL`, or `shim`).
    pub tier: String,
    /// The Landlock ABI enforced, if any.
    pub landlock_abi: Option<u32>,
    /// The command (sanitized).
    pub argv: Vec<String>,
    /// The project directory (`vetto run`) or the bundle (`vetto-shim`).
    pub project: String,
    /// The caller's uid on the host.
    pub uid: u32,
    /// What ran the session.
    pub engine: Engine,
    /// Review mode: the change set the session's writes went to (the project itself was not
    /// written); its `changes` records say what was applied from it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub change_set: Option<String>,
}

/// `changes`: a person applied or discarded a review-mode change set (recorded under the
/// change set's id as the session). The paths are the agent's choice: they are stored escaped
/// (`escape_debug`), not passed through the secret redactor (a name made to look like a token
/// must not hide itself), and at most [`Changes::LISTED`] of each list are kept, with the totals
/// and a digest of the whole lists.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct Changes {
    /// `apply` or `discard`.
    pub action: String,
    /// The change set.
    pub change_set: String,
    /// The project it was made from.
    pub project: String,
    /// Entries applied, as `<tag> <path>` (`A`dded, `M`odified, `D`eleted, ...): the first
    /// [`Changes::LISTED`].
    pub applied: Vec<String>,
    /// How many entries were applied.
    pub applied_total: u64,
    /// Selected entries left unapplied, and why (`failed: ...` for one that failed): the first
    /// [`Changes::LISTED`].
    pub skipped: Vec<Skipped>,
    /// How many selected entries were left unapplied.
    pub skipped_total: u64,
    /// SHA-256 (hex) of every applied line and every skipped path and reason, newline-separated,
    /// in order: the whole lists, however long.
    pub lists_sha256: String,
    /// `--force`: paths the project changed meanwhile were applied too.
    pub force: bool,
    /// `--include-handoff`: trust-handoff paths were applied too.
    pub include_handoff: bool,
    /// `--accept-unsynced`: a set last used before a restart was applied.
    pub accept_unsynced: bool,
    /// What went wrong after the project was changed (the command failed), if anything.
    pub error: Option<String>,
    /// The caller's uid on the host.
    pub uid: u32,
}

impl Changes {
    /// At most this many entries of each list are stored.
    pub const LISTED: usize = 1000;
}

/// One entry `vetto changes apply` left unapplied.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct Skipped {
    /// The project-relative path (escaped).
    pub path: String,
    /// Why.
    pub why: String,
}

/// `session_end`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct SessionEnd {
    /// The exit status vetto returned (or the runtime reported), when known.
    pub status: Option<i32>,
    /// The signal that ended the command, if it was one.
    pub signal: Option<i32>,
    /// From `session_start` to now.
    pub duration_ms: u64,
    /// Why it ended.
    pub reason: EndReason,
    /// For [`EndReason::SetupFailure`]: the control that could not be established, and why.
    pub control: Option<String>,
}

/// `connection`: one connection through the broker, as its `ConnEvent` reported it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct Connection {
    /// `allow`, `deny` or `error`.
    pub decision: String,
    /// How it ended (allow) or why it was refused (deny / error).
    pub reason: String,
    /// More detail, if any (sanitized).
    pub detail: Option<String>,
    /// The listener (`http`, `socks5`, `host-port …`, `publish …`).
    pub listener: String,
    /// The destination as asked (sanitized).
    pub destination: Option<String>,
    /// The one address dialled.
    pub dialled: Option<String>,
    /// Bytes sandbox → destination.
    pub bytes_up: u64,
    /// Bytes destination → sandbox.
    pub bytes_down: u64,
    /// From accept to close.
    pub duration_ms: u64,
    /// Why it was let through, when that was not the allowlist: the grant and who made it
    /// (`grant --once by uid 1000 (...)`, `persistent grant …`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub basis: Option<String>,
}

impl From<&ConnEvent> for Connection {
    fn from(e: &ConnEvent) -> Self {
        Connection {
            decision: e.decision.as_str().to_string(),
            reason: e.reason.clone(),
            detail: e.detail.clone(),
            listener: e.listener.to_string(),
            destination: e.target.clone(),
            dialled: e.dialled.map(|a| a.to_string()),
            bytes_up: e.bytes_up,
            bytes_down: e.bytes_down,
            duration_ms: e.duration_ms,
            basis: e.basis.clone(),
        }
    }
}

impl Connection {
    /// Whether the broker let it through.
    pub fn allowed(&self) -> bool {
        self.decision == EventDecision::Allow.as_str()
    }
}

/// `refusal`: vetto refused to start something (a shim bundle, a policy); the reasons as the
/// user saw them.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// What was refused: `policy`, `bundle`, `exec`.
    pub subject: String,
    /// Each reason, as printed.
    pub reasons: Vec<String>,
    /// The command or container it would have run, if known (sanitized).
    pub argv: Vec<String>,
    /// What ran it.
    pub engine: Engine,
}

/// `limit`: a resource limit was reached.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct Limit {
    /// `wall_clock`, `processes`, `connections`, `connect_rate`.
    pub limit: String,
    /// The configured value.
    pub value: u64,
    /// What happened (e.g. "the sandbox was killed", "fork refused 12 times").
    pub detail: String,
}

/// An approval's scope (declared for the approvals feature).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalScope {
    /// This connection only.
    Once,
    /// Until the session ends.
    Session,
    /// Persisted: later sessions too.
    Always,
}

/// The `approval_*` events (declared for the approvals feature, which emits them).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct Approval {
    /// The approval's id (as `vetto approvals` lists it).
    pub id: String,
    /// The destination it is about.
    pub destination: String,
    /// For a grant or a denial: its scope.
    pub scope: Option<ApprovalScope>,
    /// Who answered (user name and uid, from the control socket's peer credentials), for a
    /// grant, denial or revocation.
    pub answered_by: Option<String>,
    /// How many connections were waiting on it.
    pub waiting: u32,
}

/// What happened.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum EventKind {
    /// A session began.
    SessionStart(SessionStart),
    /// A session ended.
    SessionEnd(SessionEnd),
    /// A connection through the broker ended.
    Connection(Connection),
    /// Something was refused before it ran.
    Refusal(Refusal),
    /// A resource limit was reached.
    Limit(Limit),
    /// A destination waits for a person's answer.
    ApprovalRequested(Approval),
    /// A person allowed it.
    ApprovalGranted(Approval),
    /// A person refused it.
    ApprovalDenied(Approval),
    /// Nobody answered in time: refused.
    ApprovalTimeout(Approval),
    /// A persistent grant or denial was withdrawn.
    ApprovalRevoked(Approval),
    /// Nobody could answer: refused at once and kept for a later `--always` grant.
    ApprovalParked(Approval),
    /// A review-mode change set was applied or discarded.
    Changes(Changes),
}

/// Every kind's name, as stored and as `vetto audit query --kind` takes it.
pub const KINDS: &[&str] = &[
    "session_start",
    "session_end",
    "connection",
    "refusal",
    "limit",
    "approval_requested",
    "approval_granted",
    "approval_denied",
    "approval_timeout",
    "approval_revoked",
    "approval_parked",
    "changes",
];

impl EventKind {
    /// The kind's name (one of [`KINDS`]).
    pub fn name(&self) -> &'static str {
        match self {
            EventKind::SessionStart(_) => KINDS[0],
            EventKind::SessionEnd(_) => KINDS[1],
            EventKind::Connection(_) => KINDS[2],
            EventKind::Refusal(_) => KINDS[3],
            EventKind::Limit(_) => KINDS[4],
            EventKind::ApprovalRequested(_) => KINDS[5],
            EventKind::ApprovalGranted(_) => KINDS[6],
            EventKind::ApprovalDenied(_) => KINDS[7],
            EventKind::ApprovalTimeout(_) => KINDS[8],
            EventKind::ApprovalRevoked(_) => KINDS[9],
            EventKind::ApprovalParked(_) => KINDS[10],
            EventKind::Changes(_) => KINDS[11],
        }
    }

    /// The same event with every free-text field passed through the secret sanitizer
    /// ([`super::sanitize::redact`]).
    pub fn sanitized(mut self) -> Self {
        use super::sanitize::redact;
        let opt = |o: &mut Option<String>| {
            if let Some(s) = o.as_mut() {
                *s = redact(s);
            }
        };
        let all = |v: &mut Vec<String>| v.iter_mut().for_each(|s| *s = redact(s));
        match &mut self {
            EventKind::SessionStart(s) => {
                all(&mut s.argv);
                all(&mut s.layers);
                s.project = redact(&s.project);
            }
            EventKind::SessionEnd(e) => opt(&mut e.control),
            EventKind::Connection(c) => {
                opt(&mut c.detail);
                opt(&mut c.destination);
            }
            EventKind::Refusal(r) => {
                all(&mut r.reasons);
                all(&mut r.argv);
            }
            EventKind::Limit(l) => l.detail = redact(&l.detail),
            EventKind::ApprovalRequested(a)
            | EventKind::ApprovalGranted(a)
            | EventKind::ApprovalDenied(a)
            | EventKind::ApprovalTimeout(a)
            | EventKind::ApprovalRevoked(a)
            | EventKind::ApprovalParked(a) => a.destination = redact(&a.destination),
            EventKind::Changes(c) => {
                // Not the paths (see `Changes`).
                c.project = redact(&c.project);
                opt(&mut c.error);
            }
        }
        self
    }
}

/// One stored event: its place in the session and in the store's chain, and its body.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct Event {
    /// The store's chain position (1, 2, …; one chain per store).
    pub seq: u64,
    /// The session.
    pub session: String,
    /// The position in the session (1, 2, …), monotonic.
    pub session_seq: u64,
    /// UTC, RFC 3339 with milliseconds.
    pub time: String,
    /// What happened.
    #[serde(flatten)]
    pub kind: EventKind,
}

/// Milliseconds since the epoch, now.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// `ms` since the epoch as RFC 3339 UTC with milliseconds (`2026-11-30T23:59:59.123Z`), which
/// sorts as text in time order.
pub fn rfc3339(ms: u64) -> String {
    let secs = ms / 1000;
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60,
        ms % 1000
    )
}

/// The milliseconds since the epoch of an RFC 3339 UTC time as [`rfc3339`] writes it (the
/// fraction and the `Z` optional), or `None`.
pub fn parse_rfc3339(s: &str) -> Option<u64> {
    let b = s.as_bytes();
    if b.len() < 19 || b[4] != b'-' || b[7] != b'-' || b[10] != b'T' || b[13] != b':' {
        return None;
    }
    let num = |r: std::ops::Range<usize>| s.get(r)?.parse::<i64>().ok();
    let (y, m, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (hh, mm, ss) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&m) || !(1..=31).contains(&d) || hh > 23 || mm > 59 || ss > 60 {
        return None;
    }
    let rest = s.get(19..)?.trim_end_matches('Z');
    let frac = match rest.strip_prefix('.') {
        Some(f) if !f.is_empty() && f.len() <= 9 && f.bytes().all(|c| c.is_ascii_digit()) => {
            let f = format!("{f:0<3}");
            f.get(..3)?.parse::<i64>().ok()?
        }
        None if rest.is_empty() => 0,
        _ => return None,
    };
    // Days from civil (the inverse of the above).
    let y2 = if m <= 2 { y - 1 } else { y };
    let era = y2.div_euclid(400);
    let yoe = y2.rem_euclid(400);
    let mp = if m > 2 { m - 3 } else { m + 9 };
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let secs = days * 86_400 + hh * 3600 + mm * 60 + ss;
    u64::try_from(secs * 1000 + frac).ok()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // Tests: a panic is the failure report.
mod tests {
    use super::*;

    #[test]
    fn rfc3339_round_trips_and_sorts() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(951_782_400_000), "2000-02-29T00:00:00.000Z");
        let t = 1_796_083_199_123; // 2026-11-30T23:59:59.123Z
        assert_eq!(rfc3339(t), "2026-11-30T23:59:59.123Z");
        for ms in [0, 951_782_400_000, t, 4_102_444_800_000, 1_234_567_890_123] {
            assert_eq!(parse_rfc3339(&rfc3339(ms)), Some(ms));
        }
        assert_eq!(parse_rfc3339("2026-11-30T23:59:59Z"), Some(t - 123));
        assert!(rfc3339(t - 1) < rfc3339(t));
        for bad in [
            "",
            "2026-13-01T00:00:00Z",
            "yesterday",
            "2026-11-30T23:59:59.Z",
        ] {
            assert_eq!(parse_rfc3339(bad), None, "{bad}");
        }
    }

    #[test]
    fn every_kind_is_named_and_round_trips() {
        let a = Approval {
            id: "a1".into(),
            destination: "example.com:443".into(),
            scope: Some(ApprovalScope::Session),
            answered_by: Some("dev (1000)".into()),
            waiting: 2,
        };
        let kinds = vec![
            EventKind::Limit(Limit {
                limit: "wall_clock".into(),
                value: 5,
                detail: "killed".into(),
            }),
            EventKind::ApprovalRequested(a.clone()),
            EventKind::ApprovalGranted(a.clone()),
            EventKind::ApprovalDenied(a.clone()),
            EventKind::ApprovalTimeout(a.clone()),
            EventKind::ApprovalRevoked(a),
            EventKind::Changes(Changes {
                action: "apply".into(),
                change_set: "20261202-101010-abcdef".into(),
                project: "/p".into(),
                applied: vec!["A token ghp_0123456789abcdefghij0123456789abcdef".into()],
                applied_total: 1,
                skipped: vec![Skipped {
                    path: "b: c".into(),
                    why: "changed in the project meanwhile".into(),
                }],
                skipped_total: 1,
                lists_sha256: "00".repeat(32),
                force: false,
                include_handoff: true,
                accept_unsynced: false,
                error: None,
                uid: 1000,
            }),
        ];
        for k in kinds {
            let ev = Event {
                seq: 1,
                session: "s".into(),
                session_seq: 1,
                time: rfc3339(0),
                kind: k,
            };
            let v = serde_json::to_value(&ev).unwrap();
            assert_eq!(v["kind"], ev.kind.name());
            assert!(KINDS.contains(&ev.kind.name()));
            assert_eq!(serde_json::from_value::<Event>(v).unwrap(), ev);
        }
    }
}
