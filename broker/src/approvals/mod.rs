//! Approvals: allow / ask / deny for network destinations that the policy does not list.
//!
//! - [`gate`]: the broker's side. The one place where the precedence is applied, after the
//!   policy's own decision, first rule first: an explicit policy deny (`network.deny`, in
//!   [`crate::Policy::decide`]); a persistent denial; an explicit allow; this session's
//!   answers; a persistent grant; ask (or park, when nobody can answer). A grant only ever
//!   reopens a *name* the policy did not list, in `allowlist` mode: never a strict-mode
//!   refusal, never an IP literal, and the answer-set check still runs after it.
//! - [`rules`]: persistent grants and denials and parked requests (SQLite, outside the
//!   sandbox).
//! - [`control`]: the control socket (0600 in the user's runtime directory, never inside a
//!   sandbox) that carries a person's answers; each peer's credentials are checked
//!   (`SO_PEERCRED`: the session owner's uid, and the broker's own PID namespace, so no
//!   process of any sandbox gets an answer in even through a copy of the socket).
//!
//! The agent never answers its own prompt: the answer comes only through the control socket,
//! which the sandbox can neither see nor, if it got hold of a copy, be heard on.

pub mod control;
pub mod gate;
pub mod rules;

use std::os::fd::RawFd;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use thiserror::Error;

pub use crate::audit::event::ApprovalScope as Scope;
pub use gate::{Gate, GateRefusal};
pub use rules::{Parked, Rule, RuleStore};

/// The longest a connection may wait for an answer (the policy's bound too).
pub const MAX_TIMEOUT_SECS: u64 = 3600;
/// How many distinct destinations may wait for an answer at once in one session; more are
/// refused at once (a sandbox cannot bury the operator in prompts).
pub const MAX_PENDING: usize = 32;

/// How many distinct destinations may be parked per scope (project or container policy);
/// beyond that a new one is refused without being kept, so a sandbox cannot flood the store
/// or bury a real request in the operator's list.
pub const MAX_PARKED: usize = 64;

/// A person's answer.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    /// Let it through.
    Grant,
    /// Refuse it.
    Deny,
}

impl Verdict {
    /// `grant` or `deny`.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Grant => "grant",
            Verdict::Deny => "deny",
        }
    }
}

/// What the broker does with a name the policy does not list.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum GateMode {
    /// Hold the connection and ask (when someone can answer; otherwise park).
    Ask,
    /// Never hold: refuse at once and park the request for a later `--always` grant
    /// (`--unattended`, `approvals.mode = "deny"`, every `vetto-shim` container). Persistent
    /// grants still apply.
    Park,
    /// Strict mode: nothing but the allowlist; no grant, no parking (persistent denials
    /// still apply).
    Off,
}

/// The broker's approvals configuration (part of its spec).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ApprovalSpec {
    /// Ask, park or off.
    pub mode: GateMode,
    /// The supervisor has a terminal, so a person is there to answer from another one.
    pub terminal: bool,
    /// How long a held connection waits (1..=[`MAX_TIMEOUT_SECS`]).
    pub timeout_secs: u64,
    /// Where persistent rules apply: `project /path` or `container …`.
    pub scope: String,
    /// The rules database (none: no persistent rules, nothing parked).
    pub rules: Option<PathBuf>,
    /// The session id (shown and recorded).
    pub session: String,
    /// The session owner's uid on the host (recorded with each answer; the control socket
    /// accepts only the broker's own user).
    pub owner_uid: u32,
    /// A listening Unix socket for answers (the control socket), if any.
    pub control_fd: Option<RawFd>,
}

/// What went wrong with approvals.
#[derive(Debug, Error)]
pub enum ApprovalsError {
    /// A filesystem operation failed.
    #[error("approvals: {what} {}", path.display())]
    Io {
        /// What was being done.
        what: String,
        /// On what.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// The rules database refused.
    #[error("approvals store {}: {what}", path.display())]
    Sql {
        /// What was being done.
        what: String,
        /// The database.
        path: PathBuf,
        /// The error.
        #[source]
        source: rusqlite::Error,
    },
    /// A destination a person typed is not `host[:port]` or `*.suffix[:port]`.
    #[error("{destination:?} is not a destination: {reason}")]
    BadDestination {
        /// As typed.
        destination: String,
        /// Why.
        reason: String,
    },
    /// No pending request, session rule or parked request has this id.
    #[error("no approval {0} (see `vetto approvals list --all`)")]
    NotFound(String),
    /// An answer that cannot apply.
    #[error("{0}")]
    Invalid(String),
    /// Too many requests are parked for this scope already.
    #[error(
        "{} requests are already parked for {scope}; answer or dismiss some (`vetto approvals`)",
        MAX_PARKED
    )]
    ParkedFull {
        /// The scope.
        scope: String,
    },
    /// The control socket said no, or spoke nonsense.
    #[error("control socket: {0}")]
    Control(String),
}

/// A fresh id: 8 hex digits from the OS's random source (a clock-and-pid value if that
/// fails, which only makes ids guessable, not shared).
pub fn new_id() -> String {
    let v = getrandom::u32().unwrap_or_else(|_| {
        (crate::audit::event::now_ms() as u32) ^ std::process::id().rotate_left(16)
    });
    format!("{v:08x}")
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // Tests: a panic is the failure report.
mod tests;
