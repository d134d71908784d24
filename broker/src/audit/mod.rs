//! The audit exporter: every session's decisions, recorded outside the sandbox in a
//! tamper-evident store, and exported.
//!
//! - [`event`]: the event model (`session_start`, `session_end`, `connection`, `refusal`,
//!   `limit`, and the `approval_*` kinds).
//! - [`store`]: the SQLite store (WAL) holding one hash chain per store, signed checkpoints,
//!   the signed head file beside it, export cursors.
//! - [`key`]: the Ed25519 checkpoint key, made on first use (0600).
//! - [`verify`](mod@verify): `vetto audit verify`.
//! - [`jsonl`], [`otlp`]: the exporters (a JSONL file or stdout; OTLP/HTTP logs).
//! - [`sanitize`]: the best-effort secret sanitizer applied to every event's free text.
//! - [`report`]: a session's report (`--report`) and one-screen summary (`--summary`).
//!
//! Writers are the processes outside the sandbox: `vetto run`'s supervisor (session start and
//! end, limits, refusals), the broker sidecar (connections), and `vetto-shim` (a container's
//! create, delete and refusals). Each opens the store itself, after the sandbox's processes
//! were created, so no sandboxed process ever holds one of its descriptors.

pub mod event;
pub mod jsonl;
pub mod key;
pub mod otlp;
pub mod report;
pub mod sanitize;
pub mod store;
pub mod verify;

use std::path::{Path, PathBuf};

use ed25519_dalek::SigningKey;
use serde::{Deserialize, Serialize};
use thiserror::Error;

pub use event::{Connection, Event, EventKind};
pub use jsonl::{Jsonl, JsonlTarget};
pub use store::{Filter, Store, StorePaths, Stored};

/// What went wrong in the audit trail. A writer that gets one fails closed: the session does
/// not run without its record.
#[derive(Debug, Error)]
pub enum AuditError {
    /// A filesystem operation failed.
    #[error("audit: {what} {}", path.display())]
    Io {
        /// What was being done.
        what: String,
        /// On what.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// The database refused.
    #[error("audit store {}: {what}", path.display())]
    Sql {
        /// What was being done.
        what: String,
        /// The database.
        path: PathBuf,
        /// The error.
        #[source]
        source: rusqlite::Error,
    },
    /// There is no store there (readers only).
    #[error("audit store {}: no such store", .0.display())]
    NoStore(PathBuf),
    /// One of the store's files is not a regular file (a symlink, a FIFO…).
    #[error("audit store: {} is not a regular file (refused)", .0.display())]
    NotRegular(PathBuf),
    /// The store no longer ends at its signed head: it was cut or replaced. Nothing is
    /// appended to it.
    #[error("audit store is broken: {0}; nothing more is written to it (run `vetto audit verify`, then move the store aside to start a new one)")]
    Broken(String),
    /// The checkpoint key cannot be used.
    #[error("audit key {}: {what}", path.display())]
    Key {
        /// The key file.
        path: PathBuf,
        /// What is wrong.
        what: String,
        /// The error, if one.
        #[source]
        source: Option<std::io::Error>,
    },
    /// The JSONL destination was refused or failed.
    #[error("audit JSONL {}: {why}", path.display())]
    Jsonl {
        /// The destination.
        path: PathBuf,
        /// What is wrong.
        why: String,
        /// The error, if one.
        #[source]
        source: Option<std::io::Error>,
    },
    /// An event could not be encoded or decoded.
    #[error("audit: event encoding")]
    Json(#[source] serde_json::Error),
    /// The OTLP exporter failed.
    #[error("audit OTLP")]
    Otlp(#[source] otlp::OtlpError),
}

/// Where a session's audit goes: handed from the supervisor (or the shim) to its broker.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct AuditConfig {
    /// The SQLite store.
    pub store: PathBuf,
    /// The checkpoint key.
    pub key: PathBuf,
    /// The JSONL destination, if any.
    pub jsonl: Option<JsonlTarget>,
    /// The OTLP/HTTP logs endpoint, if any.
    pub otlp: Option<String>,
}

impl AuditConfig {
    /// The store and key in `dir` (`audit.db`, `audit.key`).
    pub fn in_dir(dir: &Path) -> Self {
        AuditConfig {
            store: dir.join("audit.db"),
            key: dir.join("audit.key"),
            jsonl: None,
            otlp: None,
        }
    }
}

/// A session's writer: appends to the store (and the JSONL sink) under the session's id.
pub struct Recorder {
    store: Store,
    key: SigningKey,
    jsonl: Option<Jsonl>,
    session: String,
    config: AuditConfig,
}

impl Recorder {
    /// Open the store (creating it and the key on first use) and the JSONL sink.
    pub fn open(config: &AuditConfig, session: &str) -> Result<Self, AuditError> {
        let store = Store::open(&StorePaths::new(&config.store), true)?;
        let key = key::load_or_create(&config.key)?;
        let jsonl = config.jsonl.as_ref().map(Jsonl::open).transpose()?;
        Ok(Recorder {
            store,
            key,
            jsonl,
            session: session.to_string(),
            config: config.clone(),
        })
    }

    /// The session's id.
    pub fn session(&self) -> &str {
        &self.session
    }

    /// The configuration it was opened with.
    pub fn config(&self) -> &AuditConfig {
        &self.config
    }

    /// The store.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Record one event, now.
    pub fn record(&mut self, kind: EventKind) -> Result<Stored, AuditError> {
        let mut v = self.record_batch(vec![(event::now_ms(), kind)], false)?;
        v.pop()
            .ok_or_else(|| AuditError::Broken("an append returned nothing".into()))
    }

    /// Record events (time in ms since the epoch, kind) in one transaction, sanitized; with
    /// `checkpoint`, sign a checkpoint after them.
    pub fn record_batch(
        &mut self,
        events: Vec<(u64, EventKind)>,
        checkpoint: bool,
    ) -> Result<Vec<Stored>, AuditError> {
        let session = self.session.clone();
        self.record_batch_as(&session, events, checkpoint)
    }

    /// [`Recorder::record_batch`] under another session's id (its numbering continues): for
    /// a session whose own writer could not end it.
    pub fn record_batch_as(
        &mut self,
        session: &str,
        events: Vec<(u64, EventKind)>,
        checkpoint: bool,
    ) -> Result<Vec<Stored>, AuditError> {
        let events = events
            .into_iter()
            .map(|(t, k)| (t, session.to_string(), k.sanitized()))
            .collect();
        let stored = self.store.append(&self.key, events, checkpoint)?;
        if let Some(j) = self.jsonl.as_mut() {
            j.write(&stored)?;
        }
        Ok(stored)
    }

    /// Sign a checkpoint at the current head.
    pub fn checkpoint(&mut self) -> Result<(), AuditError> {
        self.store.append(&self.key, vec![], true).map(|_| ())
    }

    /// This session's records so far.
    pub fn session_events(&self) -> Result<Vec<Stored>, AuditError> {
        self.store.query(&Filter {
            session: Some(self.session.clone()),
            ..Filter::default()
        })
    }
}

/// Record that vetto refused to start something (a policy, a bundle, an exec), in `session`,
/// with a signed checkpoint after it.
pub fn record_refusal(
    config: &AuditConfig,
    session: &str,
    refusal: event::Refusal,
) -> Result<(), AuditError> {
    Recorder::open(config, session)?
        .record_batch(vec![(event::now_ms(), EventKind::Refusal(refusal))], true)
        .map(|_| ())
}

/// `$XDG_STATE_HOME/vetto` (or `~/.local/state/vetto`): vetto's state directory for the
/// calling user (an XDG_STATE_HOME or HOME that is not absolute counts as unset).
pub fn state_dir() -> Option<PathBuf> {
    std::env::var_os("XDG_STATE_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| {
            std::env::var_os("HOME")
                .map(PathBuf::from)
                .filter(|p| p.is_absolute())
                .map(|h| h.join(".local/state"))
        })
        .map(|d| d.join("vetto"))
}

/// `state_dir()/audit`: where `vetto run` keeps its store and key.
pub fn user_dir() -> Option<PathBuf> {
    state_dir().map(|d| d.join("audit"))
}

/// Where `vetto-shim` keeps its store and key unless `/etc/vetto/shim.toml` says otherwise.
pub const SHIM_DIR: &str = "/var/lib/vetto/audit";

#[cfg(test)]
mod tests;
