//! A session's report (`vetto run --report FILE`, JSON) and its one-screen summary
//! (`--summary`, on stderr at exit), made from the session's records in the store.

use std::collections::BTreeMap;

use serde::Serialize;

use super::event::{EventKind, SessionEnd, SessionStart};
use super::store::Stored;

/// Traffic to one destination.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct Destination {
    /// The destination as asked.
    pub destination: String,
    /// Connections allowed.
    pub allowed: u64,
    /// Connections refused or failed.
    pub denied: u64,
    /// Bytes sandbox → destination.
    pub bytes_up: u64,
    /// Bytes destination → sandbox.
    pub bytes_down: u64,
    /// Each distinct refusal reason, with its count.
    pub reasons: BTreeMap<String, u64>,
}

/// Everything one session recorded, condensed.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Report {
    /// The session id.
    pub session: String,
    /// Its `session_start`.
    pub start: Option<SessionStart>,
    /// Its `session_end`.
    pub end: Option<SessionEnd>,
    /// Per destination, sorted by name.
    pub destinations: Vec<Destination>,
    /// Refusals (each reason as shown).
    pub refusals: Vec<String>,
    /// Limits reached.
    pub limits: Vec<String>,
    /// How many records the session has.
    pub events: u64,
    /// The chain position of its last record (what `vetto audit verify` checks up to).
    pub last_seq: u64,
}

impl Report {
    /// Condense `records` (one session's, in order).
    pub fn from_records(session: &str, records: &[Stored]) -> Self {
        let mut r = Report {
            session: session.to_string(),
            start: None,
            end: None,
            destinations: vec![],
            refusals: vec![],
            limits: vec![],
            events: records.len() as u64,
            last_seq: records.last().map_or(0, |s| s.event.seq),
        };
        let mut dest: BTreeMap<String, Destination> = BTreeMap::new();
        for s in records {
            match &s.event.kind {
                EventKind::SessionStart(x) => r.start = Some(x.clone()),
                EventKind::SessionEnd(x) => r.end = Some(x.clone()),
                EventKind::Connection(c) => {
                    let name = c.destination.clone().unwrap_or_else(|| "(none)".into());
                    let d = dest.entry(name.clone()).or_insert_with(|| Destination {
                        destination: name,
                        ..Destination::default()
                    });
                    d.bytes_up += c.bytes_up;
                    d.bytes_down += c.bytes_down;
                    if c.allowed() {
                        d.allowed += 1;
                    } else {
                        d.denied += 1;
                        *d.reasons.entry(c.reason.clone()).or_insert(0) += 1;
                    }
                }
                EventKind::Refusal(x) => r.refusals.extend(x.reasons.iter().cloned()),
                EventKind::Limit(l) => r
                    .limits
                    .push(format!("{} ({}): {}", l.limit, l.value, l.detail)),
                _ => {}
            }
        }
        r.destinations = dest.into_values().collect();
        r
    }

    /// The one-screen human summary.
    pub fn summary(&self) -> String {
        let mut out = format!("vetto: session {}", self.session);
        if let Some(e) = &self.end {
            let status = match (e.status, e.signal) {
                (_, Some(s)) => format!("signal {s}"),
                (Some(c), None) => format!("status {c}"),
                (None, None) => "status unknown".into(),
            };
            out.push_str(&format!(
                " ended ({}, {status}) after {:.1} s",
                e.reason.as_str(),
                e.duration_ms as f64 / 1000.0
            ));
            if let Some(c) = &e.control {
                out.push_str(&format!(": {c}"));
            }
        }
        out.push('\n');
        let denied: Vec<&Destination> = self.destinations.iter().filter(|d| d.denied > 0).collect();
        if denied.is_empty() {
            out.push_str("  denied: nothing\n");
        } else {
            out.push_str("  denied:\n");
            for d in denied {
                let why: Vec<String> = d.reasons.iter().map(|(r, n)| format!("{r} ×{n}")).collect();
                out.push_str(&format!("    {}  ({})\n", d.destination, why.join(", ")));
            }
        }
        let out_bytes: Vec<&Destination> =
            self.destinations.iter().filter(|d| d.allowed > 0).collect();
        if out_bytes.is_empty() {
            out.push_str("  allowed: no connections\n");
        } else {
            out.push_str("  allowed (bytes out / in):\n");
            for d in out_bytes {
                out.push_str(&format!(
                    "    {}  {} / {}  ({} connection{})\n",
                    d.destination,
                    d.bytes_up,
                    d.bytes_down,
                    d.allowed,
                    if d.allowed == 1 { "" } else { "s" }
                ));
            }
        }
        for l in &self.limits {
            out.push_str(&format!("  limit reached: {l}\n"));
        }
        for r in &self.refusals {
            out.push_str(&format!("  refused: {r}\n"));
        }
        out.push_str(&format!(
            "  audit: {} events, chain position {} (vetto audit query --session {})\n",
            self.events, self.last_seq, self.session
        ));
        out
    }
}
