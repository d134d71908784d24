//! The audit trail of hardened containers (see `vetto_broker::audit`).
//!
//! A container `vetto-shim` hardens with a policy is one session, from `create` to `delete`:
//! - `create` makes a fresh session id (container ids are reused; session ids never are) and
//!   keeps it, with the store it writes to, in vetto's record of the container ([`Session`] in
//!   the [`ShimState`](super::prepare::ShimState)), so every later command and the broker use
//!   the same id and the same store whatever environment their caller gives them (Podman's
//!   conmon runs `delete` with almost none);
//! - `create` records `session_start` after libcontainer created the container and before it
//!   reports success: if the record cannot be written, `create` fails and leaves nothing;
//! - the container's broker records each connection itself;
//! - `delete` (or `run`, which knows the exit status) records `session_end` with a signed
//!   checkpoint, once, and exports to OTLP when configured;
//! - a bundle refused by `create` or `run`, or an `exec` refused in a hardened container,
//!   records a `refusal` with the reasons as printed (best effort: the refusal already fails
//!   closed).
//!
//! A bundle run without a policy (`none`) is not a vetto session and records nothing. The
//! store is opened only by this runtime process and its broker, after the container's
//! processes were cloned, so no container process ever holds one of its descriptors; its
//! directory is refused as a bind source ([`vetto_bundle::container::OwnPlaces::sealed`]).

use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use vetto_broker::audit::event::{now_ms, EndReason, Engine, Refusal, SessionEnd, SessionStart};
use vetto_broker::audit::{otlp, AuditConfig, AuditError, EventKind, JsonlTarget, Recorder};
use vetto_broker::error_chain;

use super::log::Logger;
use super::prepare::{shim_dir, ShimState};
use super::OciError;

/// `[audit]` in `/etc/vetto/shim.toml`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuditTable {
    /// The SQLite store (absolute); the key is `audit.key` beside it. Default
    /// [`vetto_broker::audit::SHIM_DIR`]`/audit.db` (for a rootless runtime, the user's
    /// `$XDG_STATE_HOME/vetto/audit/audit.db`).
    pub store: Option<PathBuf>,
    /// Record hardened containers (default true).
    #[serde(default = "yes")]
    pub enabled: bool,
    /// Also append every event to this JSON-lines file (absolute).
    pub jsonl: Option<PathBuf>,
    /// Also export to this OpenTelemetry collector (OTLP/HTTP logs, `http://`), at `delete`.
    pub otlp: Option<String>,
}

fn yes() -> bool {
    true
}

impl Default for AuditTable {
    fn default() -> Self {
        AuditTable {
            store: None,
            enabled: true,
            jsonl: None,
            otlp: None,
        }
    }
}

impl AuditTable {
    /// What the strict parser cannot say: paths absolute and plain, a usable OTLP URL.
    pub fn check(&self) -> Result<(), String> {
        let plain = |key: &str, p: &Path| -> Result<(), String> {
            if !p.is_absolute()
                || p.file_name().is_none()
                || p.components()
                    .any(|c| matches!(c, std::path::Component::ParentDir))
            {
                return Err(format!(
                    "audit.{key} = {:?}: must be an absolute path to a file, without `..`",
                    p.display().to_string()
                ));
            }
            Ok(())
        };
        if let Some(s) = &self.store {
            plain("store", s)?;
        }
        if let Some(j) = &self.jsonl {
            plain("jsonl", j)?;
        }
        if let Some(u) = &self.otlp {
            otlp::destination(u)
                .map(|_| ())
                .map_err(|e| format!("audit.otlp: {}", error_chain(&e)))?;
        }
        Ok(())
    }

    /// The store's path, enabled or not: its directory is sealed from every hardened
    /// container either way. `None`: a rootless runtime with no state directory.
    pub fn store_path(&self, rootless: bool) -> Option<PathBuf> {
        if let Some(s) = &self.store {
            return Some(s.clone());
        }
        match rootless {
            false => Some(Path::new(vetto_broker::audit::SHIM_DIR).join("audit.db")),
            // Root of the user's namespace: root's directory is not ours; the user's is.
            true => vetto_broker::audit::user_dir().map(|d| d.join("audit.db")),
        }
    }

    /// Where a hardened container's audit goes; `None` when auditing is off.
    pub fn config(&self, rootless: bool) -> Result<Option<AuditConfig>, OciError> {
        if !self.enabled {
            return Ok(None);
        }
        let store = self.store_path(rootless).ok_or_else(|| {
            OciError::Config(
                "audit: a rootless runtime keeps its audit store in the user's state directory, but neither XDG_STATE_HOME nor HOME names one; set [audit] store in the host configuration (or enabled = false)"
                    .into(),
            )
        })?;
        let dir = store.parent().unwrap_or(Path::new("/"));
        Ok(Some(AuditConfig {
            key: dir.join("audit.key"),
            store,
            jsonl: self.jsonl.clone().map(JsonlTarget::File),
            otlp: self.otlp.clone(),
        }))
    }
}

/// A hardened container's session, as vetto's record keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Session {
    /// The session id (fresh per container lifetime).
    pub id: String,
    /// The store, key and exporters it writes to.
    pub config: AuditConfig,
    /// When `session_start` was recorded (ms since the epoch).
    pub started_ms: u64,
    /// What ran it.
    pub engine: Engine,
    /// The container's command.
    pub argv: Vec<String>,
    /// A `kill` with SIGKILL reached the container (the end is then "killed", signal 9).
    #[serde(default)]
    pub killed: bool,
}

/// What is known of a session's end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ending {
    /// The exit status, when this process saw it (`run`).
    pub status: Option<i32>,
    /// The signal that ended it, if known.
    pub signal: Option<i32>,
    /// Why it ended.
    pub reason: EndReason,
    /// For a setup failure: what failed.
    pub control: Option<String>,
}

impl Ending {
    /// `delete`: the engine reaped the init, so the status is not known here.
    pub fn deleted() -> Self {
        Ending {
            status: None,
            signal: None,
            reason: EndReason::Deleted,
            control: None,
        }
    }

    /// `create` or `run` failed after `session_start` was recorded.
    pub fn setup_failure(what: &OciError) -> Self {
        Ending {
            status: None,
            signal: None,
            reason: EndReason::SetupFailure,
            control: Some(error_chain(what)),
        }
    }

    /// `run` waited for the init: its status (128+N for signal N).
    pub fn exited(code: i32) -> Self {
        match code > 128 {
            true => Ending {
                status: Some(code),
                signal: Some(code - 128),
                reason: EndReason::Signal,
                control: None,
            },
            false => Ending {
                status: Some(code),
                signal: None,
                reason: EndReason::Exit,
                control: None,
            },
        }
    }
}

/// The engine that drove this runtime, told from the bundle's annotations, where the bundle
/// lies, and the environment the engine gave the runtime; `None` when it cannot be told.
pub fn driver(
    annotations: Option<&serde_json::Map<String, Value>>,
    bundle: &Path,
) -> Option<String> {
    let keys: Vec<&str> = annotations
        .map(|a| a.keys().map(String::as_str).collect())
        .unwrap_or_default();
    let any = |prefix: &str| keys.iter().any(|k| k.starts_with(prefix));
    let manager = annotations
        .and_then(|a| a.get("io.container.manager"))
        .and_then(Value::as_str);
    // Podman also writes `io.kubernetes.cri-o.*` annotations: its own marks come first.
    let found = if manager == Some("libpod") || any("io.podman.") {
        Some("podman")
    } else if manager == Some("cri-o") || any("io.kubernetes.cri-o.") {
        Some("cri-o")
    } else if any("io.kubernetes.cri.") {
        Some("containerd")
    } else if any("com.docker.") {
        Some("docker")
    } else {
        // containerd's runc shim keeps bundles under its namespace; Docker's is `moby`.
        let b = bundle.to_string_lossy();
        if b.contains("/io.containerd.runtime.v2.task/moby/") {
            Some("docker")
        } else if b.contains("/io.containerd.runtime.v2.task/") {
            Some("containerd")
        } else if std::env::var_os("_CONTAINERS_USERNS_CONFIGURED").is_some()
            || std::env::var_os("_CONTAINERS_ROOTLESS_UID").is_some()
        {
            // containers/common (Podman) sets these for the runtimes it starts.
            Some("podman")
        } else {
            None
        }
    };
    found.map(str::to_string)
}

/// The caller's uid on the host: the effective uid, mapped out of a user namespace (rootless
/// Podman runs its runtime as root of the user's namespace).
pub fn host_uid() -> u32 {
    let uid = nix::unistd::geteuid().as_raw();
    let map = std::fs::read_to_string("/proc/self/uid_map").unwrap_or_default();
    for line in map.lines() {
        let f: Vec<u64> = line
            .split_whitespace()
            .filter_map(|x| x.parse().ok())
            .collect();
        if let [inside, outside, count] = f[..] {
            let u = u64::from(uid);
            if u >= inside && u - inside < count {
                return u32::try_from(outside + (u - inside)).unwrap_or(uid);
            }
        }
    }
    uid
}

/// Record `session_start`, and start the OTLP cursor at it. Fails (closed) if the record
/// cannot be written.
pub fn begin(s: &Session, start: SessionStart) -> Result<(), AuditError> {
    let mut rec = Recorder::open(&s.config, &s.id)?;
    let stored = rec.record(EventKind::SessionStart(start))?;
    if let Some(url) = &s.config.otlp {
        // A collector this store never sent to starts with this session, not the history.
        otlp::start_cursor(rec.store(), url, stored.event.seq.saturating_sub(1))
            .map_err(AuditError::Otlp)?;
    }
    Ok(())
}

/// The marker that `session_end` was (being) recorded, in the container's vetto directory:
/// made exclusively, so two deletes record one end.
const ENDED: &str = "audit-ended";

/// Record the session's end (once: a second call, or a second `delete`, records nothing),
/// with a signed checkpoint, then export to OTLP if configured. Failures are warnings: the
/// container is gone either way.
pub fn end(root: &Path, id: &str, log: &Logger, ending: Ending) {
    let Ok(Some(s)) = ShimState::load(root, id).map(|st| st.audit) else {
        return;
    };
    let marker = shim_dir(root, id).join(ENDED);
    let first = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&marker);
    match first {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => return,
        Err(e) => {
            log.warn(&format!(
                "audit: container \"{id}\": {}: {e}; its end is not recorded",
                marker.display()
            ));
            return;
        }
    }
    record_end(&s, id, ending, log);
}

/// Record `session_end` of `s` now (with a signed checkpoint) and export; failures are
/// warnings.
fn record_end(s: &Session, id: &str, ending: Ending, log: &Logger) {
    let ending = match (s.killed, ending.reason) {
        (true, EndReason::Deleted) => Ending {
            status: None,
            signal: Some(libc::SIGKILL),
            reason: EndReason::Killed,
            control: None,
        },
        _ => ending,
    };
    let body = SessionEnd {
        status: ending.status,
        signal: ending.signal,
        duration_ms: now_ms().saturating_sub(s.started_ms),
        reason: ending.reason,
        control: ending.control,
    };
    let mut rec = match Recorder::open(&s.config, &s.id) {
        Ok(r) => r,
        Err(e) => {
            log.warn(&format!(
                "audit: container \"{id}\": its end could not be recorded: {}",
                error_chain(&e)
            ));
            return;
        }
    };
    if let Err(e) = rec.record_batch(vec![(now_ms(), EventKind::SessionEnd(body))], true) {
        log.warn(&format!(
            "audit: container \"{id}\": its end could not be recorded: {}",
            error_chain(&e)
        ));
    }
    if let Some(url) = &s.config.otlp {
        // One attempt: a collector that is down must not hold up the engine's delete; the
        // next container (or `vetto audit export`) sends the backlog.
        let opts = otlp::Options {
            retries: 0,
            ..otlp::Options::default()
        };
        match otlp::export_pending(rec.store(), url, &opts) {
            Ok(x) if x.pending > 0 => log.warn(&format!(
                "audit: the OTLP collector at {url} did not take {} event(s) yet; they wait in the store (`vetto audit export --store {} --otlp {url}` sends them)",
                x.pending,
                s.config.store.display()
            )),
            Ok(_) => {}
            Err(e) => log.warn(&format!("audit: OTLP export to {url}: {}", error_chain(&e))),
        }
    }
}

/// A hardened container libcontainer could not create (its init's hardening failed, say): the
/// session is recorded as one that could not be set up, start and end (best effort: `create`
/// fails anyway).
pub fn setup_failed(s: &Session, start: SessionStart, id: &str, why: &OciError, log: &Logger) {
    match begin(s, start) {
        Ok(()) => record_end(s, id, Ending::setup_failure(why), log),
        Err(e) => log.warn(&format!(
            "audit: container \"{id}\": its failed setup could not be recorded: {}",
            error_chain(&e)
        )),
    }
}

/// Record a refusal (best effort: the refusal itself already failed closed; a store that
/// cannot be written is a warning).
pub fn refusal(
    config: &AuditConfig,
    session: &str,
    subject: &str,
    reasons: Vec<String>,
    argv: &[String],
    engine: Engine,
    log: &Logger,
) {
    let r = Refusal {
        subject: subject.to_string(),
        reasons,
        argv: argv.to_vec(),
        engine,
    };
    if let Err(e) = vetto_broker::audit::record_refusal(config, session, r) {
        log.warn(&format!(
            "audit: the refusal could not be recorded: {}",
            error_chain(&e)
        ));
    }
}

/// The reasons of a refusal as the user sees them: each listed reason of a policy's refusal,
/// else the whole message.
pub fn reasons(e: &OciError) -> Vec<String> {
    match e {
        OciError::Container(vetto_bundle::container::ContainerError::Refused {
            reasons, ..
        }) => reasons.clone(),
        other => vec![error_chain(other)],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_is_strict_and_its_paths_absolute() {
        let t: AuditTable =
            toml::from_str("store = \"/s/a.db\"\njsonl = \"/j.jsonl\"\notlp = \"http://c:4318\"\n")
                .expect("parse");
        assert!(t.enabled);
        assert!(t.check().is_ok());
        let c = t.config(false).expect("config").expect("enabled");
        assert_eq!(c.store, PathBuf::from("/s/a.db"));
        assert_eq!(c.key, PathBuf::from("/s/audit.key"));
        assert_eq!(c.jsonl, Some(JsonlTarget::File("/j.jsonl".into())));
        assert!(toml::from_str::<AuditTable>("stor = \"/x\"\n").is_err());
        for bad in [
            "store = \"rel/a.db\"",
            "store = \"/a/../b.db\"",
            "jsonl = \"-\"",
            "otlp = \"https://c\"",
        ] {
            let t: AuditTable = toml::from_str(bad).expect("parse");
            assert!(t.check().is_err(), "{bad}");
        }
        let off: AuditTable = toml::from_str("enabled = false").expect("parse");
        assert_eq!(off.config(false).expect("ok"), None);
        let d = AuditTable::default();
        assert_eq!(
            d.store_path(false),
            Some(PathBuf::from("/var/lib/vetto/audit/audit.db"))
        );
    }

    #[test]
    fn the_driver_is_told_from_annotations_bundle_and_environment() {
        let ann = |k: &str, v: &str| {
            let mut m = serde_json::Map::new();
            m.insert(k.into(), Value::String(v.into()));
            m
        };
        let b = Path::new("/b");
        let d = |m: &serde_json::Map<String, Value>| driver(Some(m), b);
        assert_eq!(
            d(&ann("io.container.manager", "libpod")).as_deref(),
            Some("podman")
        );
        assert_eq!(
            d(&ann("io.podman.annotations.autoremove", "TRUE")).as_deref(),
            Some("podman")
        );
        assert_eq!(
            d(&ann("io.kubernetes.cri.container-type", "container")).as_deref(),
            Some("containerd")
        );
        assert_eq!(
            d(&ann("io.kubernetes.cri-o.ContainerType", "container")).as_deref(),
            Some("cri-o")
        );
        assert_eq!(d(&ann("com.docker.x", "y")).as_deref(), Some("docker"));
        // What Podman 4 writes.
        let mut podman = ann("io.container.manager", "libpod");
        podman.insert(
            "io.kubernetes.cri-o.TTY".into(),
            Value::String("false".into()),
        );
        assert_eq!(d(&podman).as_deref(), Some("podman"));
        let none = serde_json::Map::new();
        assert_eq!(
            driver(
                Some(&none),
                Path::new("/run/containerd/io.containerd.runtime.v2.task/moby/abc")
            )
            .as_deref(),
            Some("docker")
        );
        assert_eq!(
            driver(
                None,
                Path::new("/run/containerd/io.containerd.runtime.v2.task/default/abc")
            )
            .as_deref(),
            Some("containerd")
        );
    }

    #[test]
    fn an_exit_status_says_how_it_ended() {
        assert_eq!(Ending::exited(0).reason, EndReason::Exit);
        let k = Ending::exited(137);
        assert_eq!(
            (k.reason, k.signal, k.status),
            (EndReason::Signal, Some(9), Some(137))
        );
    }
}
