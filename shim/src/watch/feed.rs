//! The audit feed: the newest records of the store, read by chain position (each poll asks
//! only for what came after the last one seen).

use std::collections::VecDeque;
use std::path::PathBuf;

use vetto_broker::audit::{EventKind, Filter, Store, StorePaths, Stored};
use vetto_broker::error_chain;

/// How many records the feed keeps (and reads back when it starts).
pub const KEEP: usize = 200;

/// One record as the feed shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Line {
    /// Chain position.
    pub seq: u64,
    /// `HH:MM:SS` (UTC).
    pub time: String,
    /// The session id.
    pub session: String,
    /// The event's kind (`connection`, `approval_granted`, …).
    pub kind: &'static str,
    /// What happened.
    pub text: String,
    /// How to colour it.
    pub tone: Tone,
}

/// A line's colour.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tone {
    /// Let through, granted.
    Good,
    /// Refused, denied, timed out.
    Bad,
    /// Waiting for someone.
    Ask,
    /// Everything else.
    Plain,
}

/// The store being followed.
pub struct Feed {
    path: Option<PathBuf>,
    store: Option<Store>,
    last: u64,
    lines: VecDeque<Line>,
    problem: Option<String>,
}

impl Feed {
    /// Follow the store at `path` (none: the user has no state directory).
    pub fn new(path: Option<PathBuf>) -> Self {
        Feed {
            path,
            store: None,
            last: 0,
            lines: VecDeque::new(),
            problem: None,
        }
    }

    /// The store's path, if there is one.
    pub fn path(&self) -> Option<&std::path::Path> {
        self.path.as_deref()
    }

    /// Why there is nothing to show, if so (no store yet, or it failed).
    pub fn problem(&self) -> Option<&str> {
        self.problem.as_deref()
    }

    /// The lines, newest first.
    pub fn lines(&self) -> impl Iterator<Item = &Line> {
        self.lines.iter().rev()
    }

    /// Read what is new (opening the store first if it has appeared). A store that fails is
    /// reopened on the next poll; the lines already read stay.
    pub fn poll(&mut self) {
        let Some(path) = &self.path else {
            self.problem = Some("no audit store (neither XDG_STATE_HOME nor HOME is set)".into());
            return;
        };
        if self.store.is_none() {
            if !path.exists() {
                self.problem = Some(format!("no audit store yet ({})", path.display()));
                return;
            }
            match Store::open(&StorePaths::new(path), false) {
                Ok(s) => {
                    // Start with the newest records, not the whole history.
                    if self.last == 0 {
                        match s.last_seq() {
                            Ok(n) => self.last = n.saturating_sub(KEEP as u64),
                            Err(e) => {
                                self.problem = Some(error_chain(&e));
                                return;
                            }
                        }
                    }
                    self.store = Some(s);
                }
                Err(e) => {
                    self.problem = Some(error_chain(&e));
                    return;
                }
            }
        }
        let Some(store) = &self.store else { return };
        let read = store.query(&Filter {
            after_seq: Some(self.last),
            limit: Some(KEEP as u64),
            ..Filter::default()
        });
        match read {
            Ok(rows) => {
                self.problem = None;
                for r in rows {
                    self.last = self.last.max(r.event.seq);
                    self.lines.push_back(line(&r));
                }
                while self.lines.len() > KEEP {
                    self.lines.pop_front();
                }
            }
            Err(e) => {
                self.problem = Some(error_chain(&e));
                self.store = None;
            }
        }
    }
}

/// A record as a feed line.
fn line(r: &Stored) -> Line {
    let kind = &r.event.kind;
    let mut text = crate::audit::describe(kind);
    let tone = match kind {
        EventKind::Connection(c) => {
            if let Some(b) = &c.basis {
                text.push_str(&format!(" [{b}]"));
            }
            if c.allowed() {
                Tone::Good
            } else {
                Tone::Bad
            }
        }
        EventKind::ApprovalGranted(_) => Tone::Good,
        EventKind::ApprovalDenied(_)
        | EventKind::ApprovalTimeout(_)
        | EventKind::Refusal(_)
        | EventKind::Limit(_) => Tone::Bad,
        EventKind::ApprovalRequested(_) | EventKind::ApprovalParked(_) => Tone::Ask,
        _ => Tone::Plain,
    };
    let time = r
        .event
        .time
        .get(11..19)
        .unwrap_or(&r.event.time)
        .to_string();
    Line {
        seq: r.event.seq,
        time,
        session: r.event.session.clone(),
        kind: kind.name(),
        text,
        tone,
    }
}
