//! The broker's side of approvals: this session's pending requests and answers, the
//! persistent rules, and the precedence between them (see the [module](super) docs).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use thiserror::Error;
use tokio::sync::{mpsc::UnboundedSender, watch};
use tokio::time::Instant;

use super::rules::{normalize_destination, Rule, RuleStore};
use super::{new_id, ApprovalSpec, ApprovalsError, GateMode, Scope, Verdict, MAX_PENDING};
use crate::allow::AllowEntry;
use crate::audit::event::{now_ms, rfc3339, Approval, EventKind};
use crate::server::BrokerEvent;
use crate::target::{DnsName, Target};

/// Why the gate refused a name the policy did not list (or one a persistent denial names).
#[derive(Debug, Error, Clone)]
pub enum GateRefusal {
    /// A persistent denial names it.
    #[error("{destination} refused by persistent denial {rule} ({by})")]
    PersistentDenial {
        /// `host:port`.
        destination: String,
        /// The rule's id.
        rule: String,
        /// Who made it.
        by: String,
    },
    /// A person denied it earlier in this session.
    #[error("{destination} refused: denied earlier in this session by {by} (approval {id})")]
    SessionDenial {
        /// `host:port`.
        destination: String,
        /// The approval.
        id: String,
        /// Who.
        by: String,
    },
    /// A person denied it now.
    #[error("{destination} refused: denied by {by} (approval {id})")]
    Denied {
        /// `host:port`.
        destination: String,
        /// The approval.
        id: String,
        /// Who.
        by: String,
    },
    /// Nobody answered in time.
    #[error("{destination} refused: nobody answered within {secs}s; parked as {id}: `vetto approvals grant {id} --always` lets a later run through")]
    Timeout {
        /// `host:port`.
        destination: String,
        /// The parked request (the approval's own id, unless one was parked earlier for the
        /// same destination).
        id: String,
        /// The timeout.
        secs: u64,
    },
    /// Nobody could answer (unattended): refused at once, and parked.
    #[error("{destination} is not in the allowlist and nobody can answer here; parked as {id}: `vetto approvals grant {id} --always` lets a later run through")]
    Parked {
        /// `host:port`.
        destination: String,
        /// The parked request.
        id: String,
    },
    /// Nobody could answer and there is no store to park in.
    #[error("{destination} is not in the allowlist and nobody can answer here")]
    Unattended {
        /// `host:port`.
        destination: String,
    },
    /// Nobody could answer, and the parked list of this scope is full: refused, not kept.
    #[error("{destination} is not in the allowlist and nobody can answer here; not parked: {} requests are parked for this scope already", super::MAX_PARKED)]
    ParkedFull {
        /// `host:port`.
        destination: String,
    },
    /// Too many destinations already wait.
    #[error("{destination} refused: {MAX_PENDING} other destinations already wait for an answer")]
    TooManyPending {
        /// `host:port`.
        destination: String,
    },
    /// The rules store failed: refused (fail closed).
    #[error("{destination} refused: the approvals store failed: {reason}")]
    Store {
        /// `host:port`.
        destination: String,
        /// The error chain.
        reason: String,
    },
}

impl GateRefusal {
    /// What the sandboxed client is told: the reason, without approval ids, rule ids, names
    /// or paths. An id is an authorisation's handle, and text the sandbox has can be replayed
    /// to the operator on the terminal they share ("grant 1a2b3c4d"): the operator reads ids
    /// and destinations only from `vetto approvals` and `vetto watch`. (The audit record keeps
    /// the full text, [`GateRefusal`]'s `Display`.)
    pub fn public(&self) -> String {
        match self {
            GateRefusal::PersistentDenial { destination, .. } => {
                format!("{destination} refused by a persistent denial for this project")
            }
            GateRefusal::SessionDenial { destination, .. } | GateRefusal::Denied { destination, .. } => {
                format!("{destination} refused by the operator")
            }
            GateRefusal::Timeout { destination, secs, .. } => format!(
                "{destination} is not in the allowlist and nobody answered within {secs}s; the request is kept for the operator (`vetto approvals`)"
            ),
            GateRefusal::Parked { destination, .. } => format!(
                "{destination} is not in the allowlist and nobody can answer here; the request is kept for the operator (`vetto approvals`)"
            ),
            GateRefusal::Unattended { destination } => {
                format!("{destination} is not in the allowlist and nobody can answer here")
            }
            GateRefusal::ParkedFull { destination } => format!(
                "{destination} is not in the allowlist and nobody can answer here; too many requests are kept for the operator already"
            ),
            GateRefusal::TooManyPending { destination } => format!(
                "{destination} refused: {MAX_PENDING} other destinations already wait for an answer"
            ),
            GateRefusal::Store { destination, .. } => format!(
                "{destination} refused: the approvals store failed (see the session's audit trail)"
            ),
        }
    }

    /// The short reason code (`X-Vetto-Deny`, the connection event's `reason`).
    pub fn code(&self) -> &'static str {
        match self {
            GateRefusal::PersistentDenial { .. } => "persistent-denial",
            GateRefusal::SessionDenial { .. } | GateRefusal::Denied { .. } => "approval-denied",
            GateRefusal::Timeout { .. } => "approval-timeout",
            GateRefusal::Parked { .. } | GateRefusal::Unattended { .. } => "approval-parked",
            GateRefusal::TooManyPending { .. } | GateRefusal::ParkedFull { .. } => "approvals-full",
            GateRefusal::Store { .. } => "approvals-store",
        }
    }
}

/// How a pending request ended, as its waiters see it.
#[derive(Clone, Debug)]
enum Outcome {
    Granted(String),
    Denied(String),
    /// With the id it was parked under (the request's own, or one parked earlier for the same
    /// destination).
    TimedOut(String),
}

/// One request waiting for an answer (all connections to its destination share it).
#[derive(Debug)]
struct Pending {
    id: String,
    destination: String,
    first_ms: u64,
    waiting: u32,
    deadline: Instant,
    tx: watch::Sender<Option<Outcome>>,
}

/// A request as `vetto approvals` and `vetto watch` show it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct PendingView {
    /// Its id.
    pub id: String,
    /// `host:port`.
    pub destination: String,
    /// First asked (ms since the epoch).
    pub first_ms: u64,
    /// Connections waiting on it now.
    pub waiting: u32,
    /// Seconds left before it is refused.
    pub seconds_left: u64,
}

/// An answer that holds for the rest of the session (`--session`, or a plain `deny`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct SessionRule {
    /// The approval it answered (`vetto approvals revoke ID`).
    pub id: String,
    /// `host:port` or a typed `*.suffix:port`.
    pub destination: String,
    /// Grant or deny.
    pub verdict: Verdict,
    /// Who.
    pub by: String,
}

/// One session as the control socket reports it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct Status {
    /// The session id.
    pub session: String,
    /// Where persistent rules apply.
    pub scope: String,
    /// Ask, park or off.
    pub mode: GateMode,
    /// Whether someone can answer now (a terminal, or an attached `vetto watch`).
    pub operator: bool,
    /// The broker's pid.
    pub broker_pid: u32,
    /// When the broker started (ms since the epoch).
    pub started_ms: u64,
    /// The answer timeout.
    pub timeout_secs: u64,
    /// Waiting requests.
    pub pending: Vec<PendingView>,
    /// This session's standing answers.
    pub session_rules: Vec<SessionRule>,
}

#[derive(Default)]
struct Inner {
    pending: Vec<Pending>,
    session: Vec<SessionRule>,
}

/// The broker's approvals state.
pub struct Gate {
    spec: ApprovalSpec,
    rules: Option<Mutex<RuleStore>>,
    inner: Mutex<Inner>,
    events: UnboundedSender<BrokerEvent>,
    version: watch::Sender<u64>,
    subscribers: AtomicUsize,
    started_ms: u64,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding it cannot leave the data half-changed in a way that matters more
    // than losing the broker: keep going with what is there.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn pattern_matches(pattern: &str, name: &DnsName, port: u16) -> bool {
    pattern == format!("{name}:{port}")
        || AllowEntry::parse(pattern).is_ok_and(|e| e.allows(name, port))
}

impl Gate {
    /// A gate for `spec`, opening its rules store (a store that cannot be opened stops the
    /// broker from starting: fail closed).
    pub fn new(
        spec: ApprovalSpec,
        events: UnboundedSender<BrokerEvent>,
    ) -> Result<Arc<Self>, ApprovalsError> {
        if !(1..=super::MAX_TIMEOUT_SECS).contains(&spec.timeout_secs) {
            return Err(ApprovalsError::Invalid(format!(
                "approvals timeout must be 1..={} seconds, got {}",
                super::MAX_TIMEOUT_SECS,
                spec.timeout_secs
            )));
        }
        let rules = spec
            .rules
            .as_deref()
            .map(RuleStore::open)
            .transpose()?
            .map(Mutex::new);
        Ok(Arc::new(Gate {
            spec,
            rules,
            inner: Mutex::new(Inner::default()),
            events,
            version: watch::Sender::new(0),
            subscribers: AtomicUsize::new(0),
            started_ms: now_ms(),
        }))
    }

    /// Its configuration.
    pub fn spec(&self) -> &ApprovalSpec {
        &self.spec
    }

    /// Where its events go.
    pub fn events(&self) -> &UnboundedSender<BrokerEvent> {
        &self.events
    }

    fn emit(&self, kind: EventKind) {
        let _ = self.events.send(BrokerEvent::Approval(kind));
    }

    fn changed(&self) {
        self.version.send_modify(|v| *v = v.wrapping_add(1));
    }

    /// A receiver that changes whenever the status does.
    pub fn watch(&self) -> watch::Receiver<u64> {
        self.version.subscribe()
    }

    /// Count an attached operator for as long as the returned guard lives.
    pub fn attach(self: &Arc<Self>) -> Attached {
        self.subscribers.fetch_add(1, Ordering::SeqCst);
        self.changed();
        Attached(Arc::clone(self))
    }

    /// Whether someone can answer now.
    pub fn operator_present(&self) -> bool {
        self.spec.terminal || self.subscribers.load(Ordering::SeqCst) > 0
    }

    fn lookup(&self, name: &DnsName, port: u16) -> Result<Option<Rule>, GateRefusal> {
        let Some(rules) = &self.rules else {
            return Ok(None);
        };
        lock(rules)
            .lookup(&self.spec.scope, name, port)
            .map_err(|e| GateRefusal::Store {
                destination: format!("{name}:{port}"),
                reason: crate::error_chain(&e),
            })
    }

    /// Step 2 of the precedence, for every named destination (allowlisted or not): a
    /// persistent denial in this scope refuses it.
    pub fn check_denial(&self, target: &Target) -> Result<(), GateRefusal> {
        let Target::Name { name, port } = target else {
            return Ok(());
        };
        match self.lookup(name, *port)? {
            Some(r) if r.verdict == Verdict::Deny => Err(GateRefusal::PersistentDenial {
                destination: format!("{name}:{port}"),
                rule: r.id,
                by: r.created_by,
            }),
            _ => Ok(()),
        }
    }

    /// Steps 4–6 for a name the policy did not list (in `allowlist` mode, after
    /// [`Gate::check_denial`]): this session's answers, then a persistent grant, then ask (or
    /// park). Returns the basis of the grant, as the connection's event records it.
    pub async fn decide_unlisted(&self, name: &DnsName, port: u16) -> Result<String, GateRefusal> {
        let destination = format!("{name}:{port}");
        {
            let inner = lock(&self.inner);
            if let Some(r) = inner
                .session
                .iter()
                .find(|r| pattern_matches(&r.destination, name, port))
            {
                return match r.verdict {
                    Verdict::Grant => {
                        Ok(format!("grant --session by {} (approval {})", r.by, r.id))
                    }
                    Verdict::Deny => Err(GateRefusal::SessionDenial {
                        destination,
                        id: r.id.clone(),
                        by: r.by.clone(),
                    }),
                };
            }
        }
        if let Some(r) = self.lookup(name, port)? {
            return match r.verdict {
                Verdict::Grant => Ok(format!(
                    "persistent grant {} for {} ({}, {})",
                    r.id,
                    r.destination,
                    r.created_by,
                    rfc3339(r.created_ms)
                )),
                Verdict::Deny => Err(GateRefusal::PersistentDenial {
                    destination,
                    rule: r.id,
                    by: r.created_by,
                }),
            };
        }
        match self.spec.mode {
            GateMode::Ask if self.operator_present() => self.ask(destination).await,
            _ => Err(self.park(&new_id(), &destination)),
        }
    }

    /// Refuse at once and park the request for a later `--always` grant.
    fn park(&self, id: &str, destination: &str) -> GateRefusal {
        let Some(rules) = &self.rules else {
            return GateRefusal::Unattended {
                destination: destination.to_string(),
            };
        };
        let parked = lock(rules).park(id, &self.spec.scope, destination, &self.spec.session);
        match parked {
            Ok(p) => {
                self.emit(EventKind::ApprovalParked(Approval {
                    id: p.id.clone(),
                    destination: destination.to_string(),
                    scope: None,
                    answered_by: None,
                    waiting: 1,
                }));
                self.changed();
                GateRefusal::Parked {
                    destination: destination.to_string(),
                    id: p.id,
                }
            }
            Err(ApprovalsError::ParkedFull { .. }) => GateRefusal::ParkedFull {
                destination: destination.to_string(),
            },
            Err(e) => GateRefusal::Store {
                destination: destination.to_string(),
                reason: crate::error_chain(&e),
            },
        }
    }

    async fn ask(&self, destination: String) -> Result<String, GateRefusal> {
        let (mut rx, deadline, id) = {
            let mut inner = lock(&self.inner);
            if let Some(p) = inner
                .pending
                .iter_mut()
                .find(|p| p.destination == destination)
            {
                p.waiting += 1;
                (p.tx.subscribe(), p.deadline, p.id.clone())
            } else {
                if inner.pending.len() >= MAX_PENDING {
                    return Err(GateRefusal::TooManyPending { destination });
                }
                let id = new_id();
                let (tx, rx) = watch::channel(None);
                let deadline = Instant::now() + Duration::from_secs(self.spec.timeout_secs);
                inner.pending.push(Pending {
                    id: id.clone(),
                    destination: destination.clone(),
                    first_ms: now_ms(),
                    waiting: 1,
                    deadline,
                    tx,
                });
                self.emit(EventKind::ApprovalRequested(Approval {
                    id: id.clone(),
                    destination: destination.clone(),
                    scope: None,
                    answered_by: None,
                    waiting: 1,
                }));
                if self.spec.terminal {
                    // No id here: this terminal is the sandbox's too, and it could print a
                    // look-alike line. The operator answers from `vetto approvals` or
                    // `vetto watch`, which show the broker's own view of the request.
                    eprintln!(
                        "vetto: a destination not in the allowlist waits for your answer: \
                         run `vetto approvals` or `vetto watch` in another terminal (refused in {}s)",
                        self.spec.timeout_secs
                    );
                }
                (rx, deadline, id)
            }
        };
        self.changed();
        let _waiting = Waiting {
            gate: self,
            id: id.clone(),
        };
        let answered = tokio::time::timeout_at(deadline, rx.wait_for(Option::is_some))
            .await
            .ok()
            .and_then(|r| r.ok().map(|o| o.clone()));
        let outcome = match answered {
            Some(o) => o,
            // Time is up (or the sender went away): expire it, unless an answer came first,
            // in which case that answer is what `rx` now holds.
            None => {
                self.expire(&id);
                rx.borrow().clone()
            }
        };
        match outcome {
            Some(Outcome::Granted(basis)) => Ok(basis),
            Some(Outcome::Denied(by)) => Err(GateRefusal::Denied {
                destination,
                id,
                by,
            }),
            Some(Outcome::TimedOut(parked)) => Err(GateRefusal::Timeout {
                destination,
                id: parked,
                secs: self.spec.timeout_secs,
            }),
            None => Err(GateRefusal::Timeout {
                destination,
                id,
                secs: self.spec.timeout_secs,
            }),
        }
    }

    /// Time is up for `id`: refuse its waiters, record it, park it.
    fn expire(&self, id: &str) {
        let p = {
            let mut inner = lock(&self.inner);
            let Some(i) = inner.pending.iter().position(|p| p.id == id) else {
                return;
            };
            inner.pending.remove(i)
        };
        // Kept for a later `--always` grant, as an unattended ask is (under the id already
        // parked for the destination, if there is one).
        let parked = self
            .rules
            .as_ref()
            .and_then(|r| {
                lock(r)
                    .park(&p.id, &self.spec.scope, &p.destination, &self.spec.session)
                    .ok()
            })
            .map_or_else(|| p.id.clone(), |parked| parked.id);
        p.tx.send_replace(Some(Outcome::TimedOut(parked)));
        self.emit(EventKind::ApprovalTimeout(Approval {
            id: p.id.clone(),
            destination: p.destination.clone(),
            scope: None,
            answered_by: None,
            waiting: p.waiting,
        }));
        self.changed();
    }

    /// A person's answer to the pending request `id` (from the control socket; `by` names
    /// them from their credentials). `pattern` is a destination the person typed to widen a
    /// `--session` or `--always` answer (`*.example.com:443`); it must cover the request.
    pub fn answer(
        &self,
        id: &str,
        verdict: Verdict,
        scope: Scope,
        pattern: Option<&str>,
        by: &str,
    ) -> Result<String, ApprovalsError> {
        let mut inner = lock(&self.inner);
        let Some(i) = inner.pending.iter().position(|p| p.id == id) else {
            return Err(ApprovalsError::NotFound(id.to_string()));
        };
        let dest = inner.pending[i].destination.clone();
        let target = match pattern {
            None => dest.clone(),
            Some(_) if scope == Scope::Once => {
                return Err(ApprovalsError::Invalid(
                    "a destination pattern needs --session or --always".into(),
                ))
            }
            Some(p) => {
                let norm = normalize_destination(p)?;
                let (host, port) = dest.rsplit_once(':').unwrap_or((dest.as_str(), "443"));
                let covers = DnsName::parse(host)
                    .ok()
                    .zip(port.parse::<u16>().ok())
                    .is_some_and(|(n, port)| pattern_matches(&norm, &n, port));
                if !covers {
                    return Err(ApprovalsError::Invalid(format!(
                        "{norm} does not cover the request's destination {dest}"
                    )));
                }
                norm
            }
        };
        let scope_word = match scope {
            Scope::Once => "--once",
            Scope::Session => "--session",
            Scope::Always => "--always",
        };
        let (outcome, message) = match (verdict, scope) {
            (Verdict::Grant, Scope::Once) => (
                Outcome::Granted(format!("grant --once by {by} (approval {id})")),
                format!("granted {dest} once"),
            ),
            (_, Scope::Always) => {
                let Some(rules) = &self.rules else {
                    return Err(ApprovalsError::Invalid(
                        "this session has no approvals store, so nothing can be kept: answer --once or --session".into(),
                    ));
                };
                let origin = format!(
                    "{} {scope_word} of approval {id} in session {}",
                    verdict.as_str(),
                    self.spec.session
                );
                let rule = lock(rules).add(&self.spec.scope, &target, verdict, by, &origin)?;
                match verdict {
                    Verdict::Grant => (
                        Outcome::Granted(format!(
                            "grant --always by {by} (approval {id}, rule {} for {})",
                            rule.id, rule.destination
                        )),
                        format!(
                            "granted {} for {} from now on (rule {})",
                            rule.destination, self.spec.scope, rule.id
                        ),
                    ),
                    Verdict::Deny => (
                        Outcome::Denied(format!("{by} (deny --always, rule {})", rule.id)),
                        format!(
                            "denied {} for {} from now on (rule {})",
                            rule.destination, self.spec.scope, rule.id
                        ),
                    ),
                }
            }
            (verdict, _) => {
                // `--session`, or a plain deny (which holds for the session: the sandbox
                // cannot ask again and again).
                inner.session.push(SessionRule {
                    id: id.to_string(),
                    destination: target.clone(),
                    verdict,
                    by: by.to_string(),
                });
                match verdict {
                    Verdict::Grant => (
                        Outcome::Granted(format!("grant --session by {by} (approval {id})")),
                        format!("granted {target} for this session"),
                    ),
                    Verdict::Deny => (
                        Outcome::Denied(by.to_string()),
                        format!("denied {target} for this session"),
                    ),
                }
            }
        };
        let p = inner.pending.remove(i);
        drop(inner);
        p.tx.send_replace(Some(outcome));
        let approval = Approval {
            id: id.to_string(),
            destination: target,
            scope: Some(match (verdict, scope) {
                (Verdict::Deny, Scope::Once) => Scope::Session,
                _ => scope,
            }),
            answered_by: Some(by.to_string()),
            waiting: p.waiting,
        };
        self.emit(match verdict {
            Verdict::Grant => EventKind::ApprovalGranted(approval),
            Verdict::Deny => EventKind::ApprovalDenied(approval),
        });
        self.changed();
        Ok(message)
    }

    /// Withdraw this session's answer `id` (`--session` grant or denial).
    pub fn revoke(&self, id: &str, by: &str) -> Result<String, ApprovalsError> {
        let r = {
            let mut inner = lock(&self.inner);
            let Some(i) = inner.session.iter().position(|r| r.id == id) else {
                return Err(ApprovalsError::NotFound(id.to_string()));
            };
            inner.session.remove(i)
        };
        self.emit(EventKind::ApprovalRevoked(Approval {
            id: r.id.clone(),
            destination: r.destination.clone(),
            scope: Some(Scope::Session),
            answered_by: Some(by.to_string()),
            waiting: 0,
        }));
        self.changed();
        Ok(format!(
            "revoked this session's {} of {}",
            r.verdict.as_str(),
            r.destination
        ))
    }

    /// The session as the control socket reports it.
    pub fn status(&self) -> Status {
        let inner = lock(&self.inner);
        let now = Instant::now();
        Status {
            session: self.spec.session.clone(),
            scope: self.spec.scope.clone(),
            mode: self.spec.mode,
            operator: self.operator_present(),
            broker_pid: std::process::id(),
            started_ms: self.started_ms,
            timeout_secs: self.spec.timeout_secs,
            pending: inner
                .pending
                .iter()
                .map(|p| PendingView {
                    id: p.id.clone(),
                    destination: p.destination.clone(),
                    first_ms: p.first_ms,
                    waiting: p.waiting,
                    seconds_left: p.deadline.saturating_duration_since(now).as_secs(),
                })
                .collect(),
            session_rules: inner.session.clone(),
        }
    }
}

/// An attached operator (see [`Gate::attach`]).
pub struct Attached(Arc<Gate>);

impl Drop for Attached {
    fn drop(&mut self) {
        self.0.subscribers.fetch_sub(1, Ordering::SeqCst);
        self.0.changed();
    }
}

/// One connection waiting on a pending request: counted off when it stops waiting.
struct Waiting<'a> {
    gate: &'a Gate,
    id: String,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        let mut inner = lock(&self.gate.inner);
        if let Some(p) = inner.pending.iter_mut().find(|p| p.id == self.id) {
            p.waiting = p.waiting.saturating_sub(1);
            drop(inner);
            self.gate.changed();
        }
    }
}
