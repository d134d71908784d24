//! The broker server: accepts on listeners that someone else bound inside the sandbox's
//! network namespace, and for each connection decides, resolves, checks and dials from the
//! broker's own namespace, then relays bytes.
//!
//! Four listener kinds ([`ListenerKind`]):
//!
//! * `HttpProxy`: HTTP/1.1 `CONNECT host:port`, and absolute-form plain HTTP
//!   (`GET http://host[:port]/…`, port 80 by default, so `host:80` must be allowed); other
//!   request forms get `405`.
//! * `Socks5`: RFC 1928, "no authentication", `CONNECT` only.
//! * `HostPort(addr)`: every connection is relayed to one host loopback address.
//! * `Publish(port)`: a host-side listener whose connections are dialled to `port` on the
//!   sandbox's own loopback, from a thread that joins the sandbox's network namespace.
//!
//! For the two proxy kinds the order is fixed: strict parse, then [`plan_connection`]
//! ([`Policy::decide`] → per-destination rate limit → resolve (names only, once; IP
//! literals are never resolved) → whole answer-set check → exactly one `SocketAddr`), then
//! dial that address → relay. A refusal is answered
//! in the client's protocol (HTTP status + `X-Vetto-Deny`, or a SOCKS reply code) and
//! every connection, whatever happened, produces exactly one [`ConnEvent`] when it ends.
//!
//! Nothing here binds a listener or changes any route: if the broker dies, the sandbox
//! simply loses the relays (fail closed). A failure in one connection never reaches the
//! accept loops; [`serve`] returns (with an error) only if a listener cannot be used.

use std::fmt;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{BorrowedFd, FromRawFd, RawFd};
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use thiserror::Error;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc::UnboundedSender;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::task::{JoinError, JoinSet};
use tokio::time::{timeout, Instant};

use crate::allow::{AllowError, DenyReason, Policy};
use crate::approvals::{control, ApprovalSpec, ApprovalsError, Gate, GateRefusal};
use crate::classify::{AddrClass, AnswerError};
use crate::dns::UdpResolver;
use crate::plan::{plan_connection, PlanError, Resolver, SystemResolver};
use crate::ratelimit::RateLimiter;
use crate::relay::{relay, Moved, RelayEnd};
use crate::target::{DnsName, Target, TargetError};
use crate::{error_chain, http_proxy, socks5};

/// Connections waiting for the supervisor's announcement at once ([`crate::peers`]).
const MAX_ADMITTING: usize = 256;
/// Default for [`BrokerSpec::max_connections`].
pub const DEFAULT_MAX_CONNECTIONS: u32 = 256;
/// Default for [`BrokerSpec::idle_timeout_secs`].
pub const DEFAULT_IDLE_TIMEOUT_SECS: u64 = 300;
/// Default for [`BrokerSpec::connects_per_minute`].
pub const DEFAULT_CONNECTS_PER_MINUTE: u32 = 120;
/// Upper bound for [`BrokerSpec::max_connections`]: the only bound of the policy key
/// `network.max_connections` too (vetto checks that key with [`BrokerSpec::validate`]).
pub const MAX_MAX_CONNECTIONS: u32 = 65_536;
/// Upper bound for [`BrokerSpec::idle_timeout_secs`] (7 days).
pub const MAX_IDLE_TIMEOUT_SECS: u64 = 7 * 24 * 3600;

/// Longest HTTP request head accepted.
pub const HTTP_HEAD_LIMIT: usize = 8 * 1024;
/// Time allowed for the HTTP request head or the SOCKS5 handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Time allowed for the outgoing TCP connect.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Time an over-limit connection is given to send its request before it gets its refusal.
pub(crate) const REJECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How many over-limit connections are answered at once; beyond that they are just closed.
const MAX_REJECTING: usize = 64;

/// What the supervisor sends (as JSON) to configure the broker. Every string is validated
/// by [`serve`] (and by [`BrokerSpec::validate`], the same checks); unknown fields are an
/// error, missing ones take their defaults.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct BrokerSpec {
    /// Allowlist entries: `crates.io`, `*.npmjs.org`, `host:22` (no port = 443 only).
    pub allow: Vec<String>,
    /// CIDRs (`10.0.0.0/8`, `10.1.2.3/32:22`) admitting IP literals and non-public answers.
    pub allow_cidrs: Vec<String>,
    /// Strict mode: no IP literals, no port 80.
    pub strict: bool,
    /// `ip:port` of a DNS server to query over UDP instead of the system resolver.
    pub resolver: Option<String>,
    /// Concurrent connections across all listeners (1..=[`MAX_MAX_CONNECTIONS`]).
    pub max_connections: u32,
    /// A relayed connection with no traffic in either direction for this long is closed
    /// (1..=604800).
    pub idle_timeout_secs: u64,
    /// Connection attempts per minute to one `host:port` after the allowlist said yes
    /// (token bucket, burst = this value; at least 1).
    pub connects_per_minute: u32,
    /// A descriptor of the sandbox's network namespace (`/proc/PID/ns/net`), needed by
    /// `Publish` listeners to dial into the sandbox. It must stay open for as long as
    /// [`serve`] runs (the broker only borrows it; the sidecar hands it over for good).
    pub sandbox_netns_fd: Option<RawFd>,
    /// Names always refused (`network.deny`: `host`, `*.suffix` on every port, or with a
    /// port on that one).
    pub deny: Vec<String>,
    /// What happens to names the allowlist does not list (none: they are refused).
    pub approvals: Option<ApprovalSpec>,
    /// FS-ONLY: the read end of a pipe on which the supervisor announces the source port of
    /// each connection it makes for the sandbox ([`crate::peers`]); only those are served.
    /// Handed to [`serve`] for good.
    pub peers_fd: Option<RawFd>,
}

impl Default for BrokerSpec {
    fn default() -> Self {
        BrokerSpec {
            allow: Vec::new(),
            allow_cidrs: Vec::new(),
            strict: false,
            resolver: None,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            idle_timeout_secs: DEFAULT_IDLE_TIMEOUT_SECS,
            connects_per_minute: DEFAULT_CONNECTS_PER_MINUTE,
            sandbox_netns_fd: None,
            deny: Vec::new(),
            approvals: None,
            peers_fd: None,
        }
    }
}

/// What the broker reports: each connection when it ends, and each approvals event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BrokerEvent {
    /// A connection ended.
    Connection(ConnEvent),
    /// An approval was requested, answered, timed out, parked or revoked, or the control
    /// socket refused a peer.
    Approval(crate::audit::EventKind),
}

/// What a listener speaks.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[serde(rename_all = "kebab-case")]
pub enum ListenerKind {
    /// HTTP `CONNECT` proxy.
    HttpProxy,
    /// SOCKS5 proxy (no authentication, `CONNECT` only).
    Socks5,
    /// Forward every connection to this host loopback address.
    HostPort(SocketAddr),
    /// A host-side listener whose connections go to this port on the sandbox's own loopback
    /// (`network.publish`).
    Publish(u16),
}

impl fmt::Display for ListenerKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ListenerKind::HttpProxy => f.write_str("http-proxy"),
            ListenerKind::Socks5 => f.write_str("socks5"),
            ListenerKind::HostPort(t) => write!(f, "host-port({t})"),
            ListenerKind::Publish(p) => write!(f, "publish({p})"),
        }
    }
}

/// The broad outcome of a connection.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[serde(rename_all = "lowercase")]
pub enum EventDecision {
    /// Relayed (the `reason` says how the relay ended).
    Allow,
    /// Refused: policy, answer set, limits, or a protocol violation.
    Deny,
    /// Allowed, but resolution or the connect failed (or the task was cancelled).
    Error,
}

impl EventDecision {
    /// `allow`, `deny` or `error`.
    pub fn as_str(self) -> &'static str {
        match self {
            EventDecision::Allow => "allow",
            EventDecision::Deny => "deny",
            EventDecision::Error => "error",
        }
    }
}

/// The accounting record of one connection, emitted once when it ends.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct ConnEvent {
    /// The listener that accepted it.
    pub listener: ListenerKind,
    /// The client's address (inside the sandbox).
    pub client: SocketAddr,
    /// The destination as requested, normalised (`name:port`, `ip:port`); for a
    /// destination that failed to parse, the raw text, escaped and cut at 256 characters.
    /// `None` if the client never got as far as naming one.
    pub target: Option<String>,
    /// Allow / deny / error.
    pub decision: EventDecision,
    /// Short machine-readable reason: for `allow` how the relay ended (`closed`,
    /// `idle-timeout`, `relay-error`), otherwise why it was refused or failed
    /// (`not-allowlisted`, `non-public-answer`, `rate-limited`, ...). For HTTP this is
    /// also the start of the `X-Vetto-Deny` header.
    pub reason: String,
    /// Human-readable explanation, if any.
    pub detail: Option<String>,
    /// The one address dialled, if it got that far.
    pub dialled: Option<SocketAddr>,
    /// Bytes client → upstream.
    pub bytes_up: u64,
    /// Bytes upstream → client.
    pub bytes_down: u64,
    /// From accept to close.
    pub duration_ms: u64,
    /// When a grant (not the allowlist) let it through: which, and who made it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub basis: Option<String>,
}

/// Why [`serve`] could not start or stopped. As everywhere in this crate, the text of a
/// variant with a source does not repeat that source: print the chain (`{:#}` with anyhow,
/// or [`error_chain`]).
#[derive(Debug, Error)]
pub enum BrokerError {
    /// An allowlist or CIDR entry is invalid.
    #[error("invalid broker spec")]
    Policy(#[from] AllowError),
    /// Another spec field is invalid.
    #[error("invalid broker spec: {0}")]
    Spec(String),
    /// `serve` was given no listeners.
    #[error("no listeners to serve")]
    NoListeners,
    /// A `HostPort` target is not a loopback address.
    #[error("listener {index}: host-port target {target} is not a loopback address")]
    HostPortNotLoopback {
        /// Position in the listener list.
        index: usize,
        /// The refused target.
        target: SocketAddr,
    },
    /// A listener could not be made non-blocking or registered with the runtime.
    #[error("listener {index} ({kind}) cannot be used")]
    Listener {
        /// Position in the listener list.
        index: usize,
        /// Its kind.
        kind: ListenerKind,
        /// The error.
        #[source]
        source: io::Error,
    },
    /// `accept` failed with a non-transient error; the broker stops.
    #[error("listener {kind} on {local}: accept failed")]
    Accept {
        /// Its kind.
        kind: ListenerKind,
        /// Its local address, as text.
        local: String,
        /// The error.
        #[source]
        source: io::Error,
    },
    /// An accept loop ended unexpectedly (panic or cancellation).
    #[error("internal error: an accept loop ended")]
    AcceptLoop(#[source] JoinError),
    /// The approvals gate cannot be set up (its store, its control socket).
    #[error("approvals")]
    Approvals(#[from] ApprovalsError),
    /// The supervisor's announcement pipe cannot be used.
    #[error("the peers pipe cannot be used")]
    Peers(#[source] io::Error),
}

/// The resolver a spec selects: the host's, or one DNS server over UDP.
#[derive(Debug, Clone, Copy)]
enum SpecResolver {
    /// `getaddrinfo(3)` via tokio's blocking pool.
    System(SystemResolver),
    /// Our own stub client against this server.
    Udp(UdpResolver),
}

impl Resolver for SpecResolver {
    async fn resolve(&self, name: &DnsName, port: u16) -> io::Result<Vec<IpAddr>> {
        match self {
            SpecResolver::System(r) => r.resolve(name, port).await,
            SpecResolver::Udp(r) => r.resolve(name, port).await,
        }
    }
}

/// State shared by every accept loop and connection.
pub(crate) struct Shared {
    policy: Policy,
    resolver: SpecResolver,
    max_connections: u32,
    conns: Arc<Semaphore>,
    rejecting: Arc<Semaphore>,
    rate: RateLimiter,
    pub(crate) idle: Duration,
    events: UnboundedSender<BrokerEvent>,
    sandbox_netns: Option<RawFd>,
    gate: Option<Arc<Gate>>,
    peers: Option<Arc<crate::peers::Peers>>,
    admitting: Arc<Semaphore>,
}

fn parse_resolver(s: &str) -> Result<SocketAddr, BrokerError> {
    let sa: SocketAddr = s.parse().map_err(|_| {
        BrokerError::Spec(format!(
            "resolver {s:?} is not an 'ip:port' socket address ('[v6]:port' for IPv6)"
        ))
    })?;
    let ip = sa.ip();
    if sa.port() == 0 || ip.is_unspecified() || ip.is_multicast() || ip == IpAddr::from([255; 4]) {
        return Err(BrokerError::Spec(format!(
            "resolver {s:?} is not a usable unicast address and port"
        )));
    }
    Ok(sa)
}

impl Shared {
    fn new(spec: &BrokerSpec, events: UnboundedSender<BrokerEvent>) -> Result<Self, BrokerError> {
        let policy =
            Policy::parse(&spec.allow, &spec.allow_cidrs, spec.strict)?.with_deny(&spec.deny)?;
        let resolver = match &spec.resolver {
            None => SpecResolver::System(SystemResolver),
            Some(s) => SpecResolver::Udp(UdpResolver {
                server: parse_resolver(s)?,
            }),
        };
        if !(1..=MAX_MAX_CONNECTIONS).contains(&spec.max_connections) {
            return Err(BrokerError::Spec(format!(
                "max_connections must be 1..={MAX_MAX_CONNECTIONS}, got {}",
                spec.max_connections
            )));
        }
        if !(1..=MAX_IDLE_TIMEOUT_SECS).contains(&spec.idle_timeout_secs) {
            return Err(BrokerError::Spec(format!(
                "idle_timeout_secs must be 1..={MAX_IDLE_TIMEOUT_SECS}, got {}",
                spec.idle_timeout_secs
            )));
        }
        if spec.connects_per_minute == 0 {
            return Err(BrokerError::Spec(
                "connects_per_minute must be at least 1 (use a large value to \
                 effectively disable the limit)"
                    .into(),
            ));
        }
        // At most MAX_MAX_CONNECTIONS (checked above): lossless.
        let permits = usize::try_from(spec.max_connections).unwrap_or(usize::MAX);
        let gate = spec
            .approvals
            .clone()
            .map(|a| Gate::new(a, events.clone()))
            .transpose()?;
        Ok(Shared {
            policy,
            resolver,
            max_connections: spec.max_connections,
            conns: Arc::new(Semaphore::new(permits)),
            rejecting: Arc::new(Semaphore::new(MAX_REJECTING)),
            rate: RateLimiter::new(spec.connects_per_minute),
            idle: Duration::from_secs(spec.idle_timeout_secs),
            events,
            sandbox_netns: spec.sandbox_netns_fd,
            gate,
            peers: None,
            admitting: Arc::new(Semaphore::new(MAX_ADMITTING)),
        })
    }
}

impl BrokerSpec {
    /// Every check [`serve`] makes of the spec before it looks at its listeners (allowlist
    /// and CIDR entries, resolver, limits), by the same code, without serving anything.
    pub fn validate(&self) -> Result<(), BrokerError> {
        let (events, _) = tokio::sync::mpsc::unbounded_channel();
        // The rules store is opened when the broker starts, not here.
        let without_store = BrokerSpec {
            approvals: self
                .approvals
                .clone()
                .map(|a| ApprovalSpec { rules: None, ..a }),
            ..self.clone()
        };
        Shared::new(&without_store, events).map(drop)
    }
}

/// Run the broker on already-bound, listening sockets until a listener fails.
///
/// Each connection is logged with one `tracing::info!` event when it ends. Returns only on
/// error: an invalid spec, a non-loopback `HostPort` target, a listener that cannot be
/// converted, or a non-transient `accept` error (then every connection still open is
/// dropped, since they belong to this future; the same happens if the future is dropped).
pub async fn serve(
    spec: BrokerSpec,
    listeners: Vec<(ListenerKind, std::net::TcpListener)>,
) -> Result<(), BrokerError> {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    drop(rx);
    serve_with_events(spec, listeners, tx).await
}

/// [`serve`], also sending every [`BrokerEvent`] to `events` (send errors are ignored).
///
/// With `spec.approvals.control_fd`, that descriptor (a listening Unix socket, which `serve`
/// takes over) is the session's control socket, served beside the listeners.
pub async fn serve_with_events(
    spec: BrokerSpec,
    listeners: Vec<(ListenerKind, std::net::TcpListener)>,
    events: UnboundedSender<BrokerEvent>,
) -> Result<(), BrokerError> {
    serve_until(
        spec,
        listeners,
        events,
        std::future::pending(),
        Duration::ZERO,
    )
    .await
}

/// [`serve_with_events`] until `stop` completes: then every listener is closed (nothing new
/// is accepted), the connections under way get up to `drain` to end on their own (at a
/// session's end the sandbox's side is already closed, so a relay ends as soon as it sees
/// that), and whatever is still open after it is cut (recorded as `aborted`). Returns `Ok`
/// after a stop.
pub async fn serve_until(
    spec: BrokerSpec,
    listeners: Vec<(ListenerKind, std::net::TcpListener)>,
    events: UnboundedSender<BrokerEvent>,
    stop: impl std::future::Future<Output = ()>,
    drain: Duration,
) -> Result<(), BrokerError> {
    let mut shared = Shared::new(&spec, events)?;
    if let Some(fd) = spec.peers_fd {
        // SAFETY: the spec hands this descriptor to `serve` for good (see `peers_fd`).
        let pipe = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) };
        shared.peers = Some(crate::peers::Peers::start(pipe).map_err(BrokerError::Peers)?);
    }
    let shared = Arc::new(shared);
    if listeners.is_empty() {
        return Err(BrokerError::NoListeners);
    }
    let control = match (
        &shared.gate,
        spec.approvals.as_ref().and_then(|a| a.control_fd),
    ) {
        (Some(gate), Some(fd)) => {
            // SAFETY: the spec hands this descriptor to `serve` for good (the sidecar placed
            // it for us alone); nothing else in this process owns or closes it.
            let std_listener = unsafe { std::os::unix::net::UnixListener::from_raw_fd(fd) };
            let listener = std_listener
                .set_nonblocking(true)
                .and_then(|()| tokio::net::UnixListener::from_std(std_listener))
                .map_err(|source| ApprovalsError::Io {
                    what: "using the control socket".into(),
                    path: format!("fd {fd}").into(),
                    source,
                })?;
            Some(tokio::spawn(control::serve(listener, Arc::clone(gate))))
        }
        _ => None,
    };
    let _stop_control = AbortOnDrop(control);
    for (index, (kind, _)) in listeners.iter().enumerate() {
        if let ListenerKind::HostPort(target) = *kind {
            if !target.ip().is_loopback() || target.port() == 0 {
                return Err(BrokerError::HostPortNotLoopback { index, target });
            }
        }
    }
    let mut converted = Vec::with_capacity(listeners.len());
    for (index, (kind, std_listener)) in listeners.into_iter().enumerate() {
        let listener = std_listener
            .set_nonblocking(true)
            .and_then(|()| TcpListener::from_std(std_listener))
            .map_err(|source| BrokerError::Listener {
                index,
                kind,
                source,
            })?;
        converted.push((kind, listener));
    }
    let (stopping, stopped) = tokio::sync::watch::channel(false);
    let mut loops = JoinSet::new();
    for (kind, listener) in converted {
        tracing::info!(
            listener = %kind,
            local = %listener.local_addr().map_or_else(|_| "?".to_string(), |a| a.to_string()),
            "vetto broker listening"
        );
        loops.spawn(accept_loop(
            Arc::clone(&shared),
            kind,
            listener,
            stopped.clone(),
            drain,
        ));
    }
    let first = tokio::select! {
        r = loops.join_next() => r,
        () = stop => {
            tracing::info!(drain_ms = drain.as_millis() as u64, "vetto broker stopping: no new connections");
            let _ = stopping.send(true);
            // Every loop drains its own connections, bounded by `drain`; a failed loop's
            // error still wins.
            let mut failed = None;
            while let Some(r) = loops.join_next().await {
                match r {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => failed = failed.or(Some(e)),
                    Err(join_err) => failed = failed.or(Some(BrokerError::AcceptLoop(join_err))),
                }
            }
            return failed.map_or(Ok(()), Err);
        }
    };
    let err = match first {
        Some(Ok(Err(err))) => err,
        // A loop returns Ok only after a stop, which is handled above.
        Some(Ok(Ok(()))) | None => BrokerError::NoListeners,
        Some(Err(join_err)) => BrokerError::AcceptLoop(join_err),
    };
    tracing::error!(error = %error_chain(&err), "vetto broker stopping");
    loops.abort_all();
    Err(err)
}

/// Stops a spawned task when dropped.
struct AbortOnDrop(Option<tokio::task::JoinHandle<()>>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        if let Some(t) = &self.0 {
            t.abort();
        }
    }
}

/// Accept errors that concern one connection or a momentary shortage, not the listener.
fn accept_error_is_transient(e: &io::Error) -> bool {
    use io::ErrorKind::*;
    matches!(
        e.kind(),
        ConnectionAborted | ConnectionReset | ConnectionRefused | Interrupted | WouldBlock
    ) || matches!(
        e.raw_os_error(),
        // EMFILE, ENFILE, ENOBUFS, ENOMEM, EPROTO, EPERM (netfilter), ETIMEDOUT
        Some(24 | 23 | 105 | 12 | 71 | 1 | 110)
    )
}

/// Completes once a stop is signalled (or the signalling side is gone).
async fn stop_seen(stopped: &mut tokio::sync::watch::Receiver<bool>) {
    // The guard wait_for returns is dropped here, before the caller awaits anything else.
    let _ = stopped.wait_for(|s| *s).await.map(drop);
}

/// Accept until the listener fails (`Err`) or a stop is signalled on `stopped` (`Ok`, after
/// the connections under way ended or `drain` passed; those still open are then cut).
async fn accept_loop(
    shared: Arc<Shared>,
    kind: ListenerKind,
    listener: TcpListener,
    mut stopped: tokio::sync::watch::Receiver<bool>,
    drain: Duration,
) -> Result<(), BrokerError> {
    let local = listener
        .local_addr()
        .map_or_else(|_| "?".to_string(), |a| a.to_string());
    let mut conns = JoinSet::new();
    loop {
        while let Some(done) = conns.try_join_next() {
            if let Err(e) = done {
                if e.is_panic() {
                    tracing::error!(listener = %kind, "a connection task panicked: {e}");
                }
            }
        }
        let accepted = tokio::select! {
            // A stop wins over a connection waiting in the backlog: nothing new after it.
            biased;
            () = stop_seen(&mut stopped) => {
                drop(listener);
                let _ = tokio::time::timeout(drain, async {
                    while conns.join_next().await.is_some() {}
                })
                .await;
                // Dropping the set cuts what is left: each record goes out as `aborted`.
                return Ok(());
            }
            a = listener.accept() => a,
        };
        let (stream, client) = match accepted {
            Ok(accepted) => accepted,
            Err(e) if accept_error_is_transient(&e) => {
                tracing::warn!(listener = %kind, %local, "accept: {e} (continuing)");
                tokio::select! {
                    () = stop_seen(&mut stopped) => {}
                    () = tokio::time::sleep(Duration::from_millis(50)) => {}
                }
                continue;
            }
            Err(source) => {
                return Err(BrokerError::Accept {
                    kind,
                    local,
                    source,
                })
            }
        };
        if shared.peers.is_some() {
            // At most MAX_ADMITTING connections wait for their announcement at once; more are
            // closed at once (the sandbox's own have theirs before they connect).
            match Arc::clone(&shared.admitting).try_acquire_owned() {
                Ok(permit) => {
                    conns.spawn(admit_then_dispatch(
                        Arc::clone(&shared),
                        kind,
                        stream,
                        client,
                        permit,
                    ));
                }
                Err(_) => drop(stream),
            }
            continue;
        }
        match Arc::clone(&shared.conns).try_acquire_owned() {
            Ok(permit) => {
                conns.spawn(handle(Arc::clone(&shared), kind, stream, client, permit));
            }
            Err(_) => {
                let mut rec = Record::new(&shared, kind, client);
                let refusal = Refusal::too_many(shared.max_connections);
                match Arc::clone(&shared.rejecting).try_acquire_owned() {
                    Ok(permit) => {
                        conns.spawn(reject(kind, stream, rec, refusal, permit));
                    }
                    Err(_) => {
                        rec.refuse(&refusal);
                        drop(stream);
                    }
                }
            }
        }
    }
}

/// With announced peers ([`crate::peers`]): a connection the supervisor did not announce is
/// closed unanswered and unrecorded (it is not the sandbox's); an announced one goes on as
/// any other.
async fn admit_then_dispatch(
    shared: Arc<Shared>,
    kind: ListenerKind,
    stream: TcpStream,
    client: SocketAddr,
    admitting: OwnedSemaphorePermit,
) {
    if let Some(peers) = &shared.peers {
        if !peers.admit(client, crate::peers::WAIT).await {
            tracing::warn!(listener = %kind, %client, "a connection the supervisor did not announce (not the sandbox's): closed");
            return;
        }
    }
    drop(admitting);
    match Arc::clone(&shared.conns).try_acquire_owned() {
        Ok(permit) => handle(Arc::clone(&shared), kind, stream, client, permit).await,
        Err(_) => {
            let mut rec = Record::new(&shared, kind, client);
            let refusal = Refusal::too_many(shared.max_connections);
            match Arc::clone(&shared.rejecting).try_acquire_owned() {
                Ok(permit) => reject(kind, stream, rec, refusal, permit).await,
                Err(_) => {
                    rec.refuse(&refusal);
                    drop(stream);
                }
            }
        }
    }
}

async fn handle(
    shared: Arc<Shared>,
    kind: ListenerKind,
    stream: TcpStream,
    client: SocketAddr,
    permit: OwnedSemaphorePermit,
) {
    let mut rec = Record::new(&shared, kind, client);
    let _ = stream.set_nodelay(true);
    match kind {
        ListenerKind::HttpProxy => http_proxy::handle(&shared, stream, &mut rec).await,
        ListenerKind::Socks5 => socks5::handle(&shared, stream, &mut rec).await,
        ListenerKind::HostPort(target) => host_port(&shared, stream, target, &mut rec).await,
        ListenerKind::Publish(port) => publish(&shared, stream, port, &mut rec).await,
    }
    // Free the slot before the event goes out, so whoever sees the event can connect again.
    drop(permit);
    drop(rec);
}

/// Answer an over-limit connection in its own protocol, then close it.
async fn reject(
    kind: ListenerKind,
    stream: TcpStream,
    mut rec: Record,
    refusal: Refusal,
    _permit: OwnedSemaphorePermit,
) {
    match kind {
        ListenerKind::HttpProxy => http_proxy::reject(stream, &mut rec, &refusal).await,
        ListenerKind::Socks5 => socks5::reject(stream, &mut rec, &refusal).await,
        ListenerKind::HostPort(target) => {
            rec.target = Some(target.to_string());
            drop(stream);
        }
        ListenerKind::Publish(port) => {
            rec.target = Some(format!("sandbox:{port}"));
            drop(stream);
        }
    }
    rec.refuse(&refusal);
}

async fn host_port(shared: &Shared, client: TcpStream, target: SocketAddr, rec: &mut Record) {
    rec.target = Some(target.to_string());
    rec.dialled = Some(target);
    match connect(target).await {
        Ok(upstream) => {
            rec.allowed();
            let stats = relay(client, upstream, &[], shared.idle, &rec.moved).await;
            rec.relayed(stats);
        }
        Err(refusal) => rec.refuse(&refusal),
    }
}

/// A connection from the host's loopback to a published port: dialled inside the sandbox's
/// network namespace from a short-lived thread that joins it (`setns` is per thread).
async fn publish(shared: &Shared, client: TcpStream, port: u16, rec: &mut Record) {
    let target = SocketAddr::from(([127, 0, 0, 1], port));
    rec.target = Some(format!("sandbox:{port}"));
    rec.dialled = Some(target);
    let Some(ns) = shared.sandbox_netns else {
        rec.refuse(&Refusal::connect_failed(
            target,
            &std::io::Error::other("no sandbox network namespace"),
        ));
        return;
    };
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::spawn(move || {
        let r = (|| {
            // SAFETY: `sandbox_netns_fd` must stay open while `serve` runs (its documented
            // contract; `vetto __broker` never closes it at all), and the borrow lives only
            // for the setns call below, made right after the connection's task started us.
            let ns = unsafe { BorrowedFd::borrow_raw(ns) };
            // On this dedicated thread only (network namespaces are per thread); the thread
            // ends right after the connect.
            nix::sched::setns(ns, nix::sched::CloneFlags::CLONE_NEWNET)?;
            let s = std::net::TcpStream::connect_timeout(&target, CONNECT_TIMEOUT)?;
            s.set_nonblocking(true)?;
            Ok(s)
        })();
        let _ = tx.send(r);
    });
    let upstream = match rx.await {
        Ok(Ok(s)) => TcpStream::from_std(s),
        Ok(Err(e)) => Err(e),
        Err(_) => Err(std::io::Error::other("dialling thread vanished")),
    };
    match upstream {
        Ok(upstream) => {
            rec.allowed();
            let _ = upstream.set_nodelay(true);
            let stats = relay(client, upstream, &[], shared.idle, &rec.moved).await;
            rec.relayed(stats);
        }
        Err(e) => rec.refuse(&Refusal::connect_failed(target, &e)),
    }
}

/// Connect to exactly `addr`, with [`CONNECT_TIMEOUT`].
async fn connect(addr: SocketAddr) -> Result<TcpStream, Refusal> {
    match timeout(CONNECT_TIMEOUT, TcpStream::connect(addr)).await {
        Ok(Ok(stream)) => {
            let _ = stream.set_nodelay(true);
            Ok(stream)
        }
        Ok(Err(e)) => Err(Refusal::connect_failed(addr, &e)),
        Err(_) => Err(Refusal::connect_timeout(addr)),
    }
}

/// [`plan_connection`] (policy → rate limit → resolve once → whole answer-set check → one
/// address), then connect to that one address. Records the dialled address in `rec`.
pub(crate) async fn decide_and_dial(
    shared: &Shared,
    target: &Target,
    rec: &mut Record,
) -> Result<TcpStream, Refusal> {
    let planned = plan_connection(
        &shared.policy,
        shared.gate.as_deref(),
        &shared.rate,
        target,
        &shared.resolver,
    )
    .await
    .map_err(|e| Refusal::plan(target, &e))?;
    rec.basis = planned.basis;
    let addr = planned.addr;
    rec.dialled = Some(addr);
    let upstream = connect(addr).await?;
    rec.allowed();
    Ok(upstream)
}

/// A refusal or failure, with its rendering in both protocols.
#[derive(Debug, Clone)]
pub(crate) struct Refusal {
    pub(crate) decision: EventDecision,
    /// Short reason code.
    pub(crate) code: &'static str,
    /// `X-Vetto-Deny` value: the code, optionally with a short ASCII qualifier.
    pub(crate) header: String,
    pub(crate) status: u16,
    pub(crate) socks: u8,
    /// One sentence for the body and the event.
    pub(crate) detail: String,
    /// For the event instead of `detail`, when the client must not see all of it.
    pub(crate) record: Option<String>,
}

pub(crate) mod socks_rep {
    pub const SUCCEEDED: u8 = 0x00;
    pub const GENERAL_FAILURE: u8 = 0x01;
    pub const NOT_ALLOWED: u8 = 0x02;
    pub const NETWORK_UNREACHABLE: u8 = 0x03;
    pub const HOST_UNREACHABLE: u8 = 0x04;
    pub const CONNECTION_REFUSED: u8 = 0x05;
    pub const COMMAND_NOT_SUPPORTED: u8 = 0x07;
    pub const ADDRESS_TYPE_NOT_SUPPORTED: u8 = 0x08;
}

impl Refusal {
    pub(crate) fn new(
        decision: EventDecision,
        code: &'static str,
        status: u16,
        socks: u8,
        detail: String,
    ) -> Self {
        Refusal {
            decision,
            code,
            header: code.to_string(),
            status,
            socks,
            detail,
            record: None,
        }
    }

    fn deny(code: &'static str, status: u16, socks: u8, detail: String) -> Self {
        Self::new(EventDecision::Deny, code, status, socks, detail)
    }

    fn fail(code: &'static str, status: u16, socks: u8, detail: String) -> Self {
        Self::new(EventDecision::Error, code, status, socks, detail)
    }

    pub(crate) fn invalid_destination(e: &TargetError) -> Self {
        Self::deny(
            "invalid-destination",
            403,
            socks_rep::NOT_ALLOWED,
            format!("invalid destination: {e}"),
        )
    }

    /// The refusal for what [`plan_connection`] said.
    fn plan(target: &Target, e: &PlanError) -> Self {
        match e {
            PlanError::Denied(reason) => Self::denied(target, reason),
            PlanError::RateLimited => Self::rate_limited(target),
            PlanError::Resolve { source, .. } => Self::resolve_failed(target, source),
            PlanError::Answer { source, .. } => Self::answer(target, source),
            PlanError::Gate(g) => Self::gate(g),
        }
    }

    /// The sandbox is told the reason without ids or paths ([`GateRefusal::public`]); the
    /// connection's record keeps all of it.
    fn gate(g: &GateRefusal) -> Self {
        let mut r = Self::deny(g.code(), 403, socks_rep::NOT_ALLOWED, g.public());
        r.record = Some(g.to_string());
        if let GateRefusal::Store { .. } = g {
            tracing::error!("{g}");
        }
        r
    }

    fn denied(target: &Target, reason: &DenyReason) -> Self {
        let code = match reason {
            DenyReason::PolicyDeny { .. } => "policy-deny",
            DenyReason::StrictPort80 => "strict-port-80",
            DenyReason::StrictIpLiteral { .. } => "strict-ip-literal",
            DenyReason::IpLiteralNotAllowed { .. } => "ip-literal-not-allowed",
            DenyReason::NotAllowlisted { .. } => "not-allowlisted",
            DenyReason::PortNotAllowed { .. } => "port-not-allowed",
        };
        Self::deny(
            code,
            403,
            socks_rep::NOT_ALLOWED,
            format!("{target} refused: {reason}"),
        )
    }

    fn rate_limited(target: &Target) -> Self {
        Self::deny(
            "rate-limited",
            429,
            socks_rep::NOT_ALLOWED,
            format!("{target} refused: too many connections to this destination per minute"),
        )
    }

    fn too_many(max: u32) -> Self {
        Self::deny(
            "too-many-connections",
            503,
            socks_rep::GENERAL_FAILURE,
            format!("too many concurrent connections through the broker (max {max})"),
        )
    }

    fn resolve_failed(target: &Target, e: &io::Error) -> Self {
        Self::fail(
            "resolve-failed",
            502,
            socks_rep::HOST_UNREACHABLE,
            format!("{target}: resolving the name failed: {}", error_chain(e)),
        )
    }

    fn answer(target: &Target, e: &AnswerError) -> Self {
        match e {
            AnswerError::Empty => Self::fail(
                "empty-answer",
                502,
                socks_rep::HOST_UNREACHABLE,
                format!("{target}: the name resolved to no addresses"),
            ),
            AnswerError::Rejected { addr, class } => {
                let mut r = Self::deny(
                    "non-public-answer",
                    403,
                    socks_rep::NOT_ALLOWED,
                    format!(
                        "{target} refused: it resolved to {addr}, which is {class}; an answer \
                         set with any non-public address not covered by allow_cidrs is \
                         refused whole"
                    ),
                );
                r.header = format!("non-public-answer: {}", class_label(*class));
                r
            }
        }
    }

    fn connect_failed(addr: SocketAddr, e: &io::Error) -> Self {
        let (code, socks) = match e.kind() {
            io::ErrorKind::ConnectionRefused => ("connect-refused", socks_rep::CONNECTION_REFUSED),
            io::ErrorKind::NetworkUnreachable => ("connect-failed", socks_rep::NETWORK_UNREACHABLE),
            io::ErrorKind::HostUnreachable => ("connect-failed", socks_rep::HOST_UNREACHABLE),
            _ => ("connect-failed", socks_rep::GENERAL_FAILURE),
        };
        Self::fail(
            code,
            502,
            socks,
            format!("connecting to {addr} failed: {e}"),
        )
    }

    fn connect_timeout(addr: SocketAddr) -> Self {
        Self::fail(
            "connect-timeout",
            502,
            socks_rep::HOST_UNREACHABLE,
            format!(
                "connecting to {addr} timed out after {}s",
                CONNECT_TIMEOUT.as_secs()
            ),
        )
    }
}

/// Short ASCII label of a non-public class for `X-Vetto-Deny`: the root class, plus the
/// embedding if there is one (`loopback via IPv4-mapped IPv6 (::ffff:0:0/96)`).
fn class_label(class: AddrClass) -> String {
    match class {
        AddrClass::Embedded { via, .. } => format!("{} via {}", class.root().name(), via.name()),
        other => other.name().to_string(),
    }
}

/// Escape and cut client-supplied text before it goes into an event or a log line.
pub(crate) fn sanitize(s: &str) -> String {
    let mut out: String = s.chars().take(256).flat_map(char::escape_default).collect();
    if s.chars().nth(256).is_some() {
        out.push_str("...");
    }
    out
}

/// The accounting record of a connection under way. Emitted exactly once, when dropped,
/// so a connection cancelled mid-way is still accounted for: as `error`/`aborted` before the
/// broker's decision, as `allow`/`aborted` with the bytes already moved once the upstream
/// is connected (the session ended, or the broker was stopped, before the relay did).
pub(crate) struct Record {
    events: UnboundedSender<BrokerEvent>,
    pub(crate) basis: Option<String>,
    listener: ListenerKind,
    client: SocketAddr,
    start: Instant,
    pub(crate) target: Option<String>,
    decision: EventDecision,
    reason: String,
    detail: Option<String>,
    pub(crate) dialled: Option<SocketAddr>,
    /// What the relay has moved so far (it counts into this as it goes).
    pub(crate) moved: Moved,
}

impl Record {
    fn new(shared: &Shared, listener: ListenerKind, client: SocketAddr) -> Self {
        Self::with_events(shared.events.clone(), listener, client)
    }

    /// A record whose event goes to `events` (the fuzz entry points of [`crate::fuzzing`]
    /// give one whose receiver is gone).
    pub(crate) fn with_events(
        events: UnboundedSender<BrokerEvent>,
        listener: ListenerKind,
        client: SocketAddr,
    ) -> Self {
        Record {
            events,
            basis: None,
            listener,
            client,
            start: Instant::now(),
            target: None,
            decision: EventDecision::Error,
            reason: "aborted".into(),
            detail: None,
            dialled: None,
            moved: Moved::default(),
        }
    }

    pub(crate) fn refuse(&mut self, r: &Refusal) {
        self.decision = r.decision;
        self.reason = r.code.to_string();
        self.detail = Some(r.record.clone().unwrap_or_else(|| r.detail.clone()));
    }

    /// A refusal for a protocol violation or a client that went away.
    pub(crate) fn deny(&mut self, reason: &str, detail: impl Into<String>) {
        self.decision = EventDecision::Deny;
        self.reason = reason.to_string();
        self.detail = Some(detail.into());
    }

    /// The upstream is connected: the broker allowed the connection. Until [`Self::relayed`]
    /// says how it ended, it reads `aborted`.
    pub(crate) fn allowed(&mut self) {
        self.decision = EventDecision::Allow;
        self.reason = "aborted".into();
        self.detail = None;
    }

    pub(crate) fn relayed(&mut self, end: RelayEnd) {
        self.decision = EventDecision::Allow;
        let (reason, detail) = match end {
            RelayEnd::Closed => ("closed", None),
            RelayEnd::IdleTimeout => ("idle-timeout", None),
            RelayEnd::Error(e) => ("relay-error", Some(e.to_string())),
        };
        self.reason = reason.into();
        self.detail = detail;
    }
}

impl Drop for Record {
    fn drop(&mut self) {
        let ev = ConnEvent {
            listener: self.listener,
            client: self.client,
            target: self.target.take(),
            decision: self.decision,
            reason: std::mem::take(&mut self.reason),
            detail: self.detail.take(),
            dialled: self.dialled,
            bytes_up: self.moved.up.load(std::sync::atomic::Ordering::Relaxed),
            bytes_down: self.moved.down.load(std::sync::atomic::Ordering::Relaxed),
            duration_ms: u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX),
            basis: self.basis.take(),
        };
        tracing::info!(
            listener = %ev.listener,
            client = %ev.client,
            requested = ev.target.as_deref().unwrap_or("-"),
            decision = ev.decision.as_str(),
            reason = %ev.reason,
            detail = ev.detail.as_deref().unwrap_or(""),
            dialled = %ev.dialled.map_or_else(|| "-".to_string(), |a| a.to_string()),
            bytes_up = ev.bytes_up,
            bytes_down = ev.bytes_down,
            duration_ms = ev.duration_ms,
            basis = ev.basis.as_deref().unwrap_or("-"),
            "vetto broker connection"
        );
        let _ = self.events.send(BrokerEvent::Connection(ev));
    }
}

/// Close a connection after a refusal: send FIN, then discard what the client still sends
/// for a moment (bounded), so the refusal is not lost to a reset.
pub(crate) async fn close_after_refusal(mut stream: TcpStream) {
    let _ = stream.shutdown().await;
    let drain = async {
        let mut buf = [0u8; 4096];
        let mut total = 0usize;
        while total < 64 * 1024 {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => total += n,
            }
        }
    };
    let _ = timeout(Duration::from_millis(500), drain).await;
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // Tests: a panic is the failure report.
mod tests {
    use super::*;

    #[test]
    fn spec_json_defaults_and_unknown_fields() {
        let spec: BrokerSpec = serde_json::from_str(r#"{"allow":["crates.io"]}"#).unwrap();
        assert_eq!(spec.max_connections, DEFAULT_MAX_CONNECTIONS);
        assert_eq!(spec.idle_timeout_secs, DEFAULT_IDLE_TIMEOUT_SECS);
        assert_eq!(spec.connects_per_minute, DEFAULT_CONNECTS_PER_MINUTE);
        assert!(serde_json::from_str::<BrokerSpec>(r#"{"alow":["crates.io"]}"#).is_err());
        let kind: ListenerKind = serde_json::from_str(r#"{"host-port":"127.0.0.1:5432"}"#).unwrap();
        assert_eq!(
            kind,
            ListenerKind::HostPort("127.0.0.1:5432".parse().unwrap())
        );
        assert_eq!(
            serde_json::to_string(&ListenerKind::HttpProxy).unwrap(),
            r#""http-proxy""#
        );
    }

    #[test]
    fn spec_validation() {
        let (tx, _rx) = tokio::sync::mpsc::unbounded_channel();
        let ok = BrokerSpec::default();
        assert!(Shared::new(&ok, tx.clone()).is_ok());
        for bad in [
            BrokerSpec {
                allow: vec!["*.com".into()],
                ..ok.clone()
            },
            BrokerSpec {
                allow_cidrs: vec!["10.0.0.1/8".into()],
                ..ok.clone()
            },
            BrokerSpec {
                resolver: Some("localhost:53".into()),
                ..ok.clone()
            },
            BrokerSpec {
                resolver: Some("0.0.0.0:53".into()),
                ..ok.clone()
            },
            BrokerSpec {
                resolver: Some("127.0.0.1:0".into()),
                ..ok.clone()
            },
            BrokerSpec {
                max_connections: 0,
                ..ok.clone()
            },
            BrokerSpec {
                idle_timeout_secs: 0,
                ..ok.clone()
            },
            BrokerSpec {
                idle_timeout_secs: u64::MAX,
                ..ok.clone()
            },
            BrokerSpec {
                connects_per_minute: 0,
                ..ok.clone()
            },
        ] {
            assert!(Shared::new(&bad, tx.clone()).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn validate_is_the_servers_check() {
        assert!(BrokerSpec::default().validate().is_ok());
        let bad = BrokerSpec {
            max_connections: MAX_MAX_CONNECTIONS + 1,
            ..BrokerSpec::default()
        };
        let e = bad.validate().unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid broker spec: max_connections must be 1..=65536, got 65537"
        );
        let max = BrokerSpec {
            max_connections: MAX_MAX_CONNECTIONS,
            ..BrokerSpec::default()
        };
        assert!(max.validate().is_ok());
    }

    #[test]
    fn errors_print_their_source_once() {
        let e = BrokerSpec {
            allow: vec!["a b.example".into()],
            ..BrokerSpec::default()
        }
        .validate()
        .unwrap_err();
        assert_eq!(
            error_chain(&e),
            "invalid broker spec: allowlist entry \"a b.example\": whitespace or control \
             character ' ' in destination"
        );
        let e = BrokerError::Listener {
            index: 1,
            kind: ListenerKind::Socks5,
            source: io::Error::other("boom"),
        };
        assert_eq!(error_chain(&e), "listener 1 (socks5) cannot be used: boom");
        let e = BrokerError::Accept {
            kind: ListenerKind::HttpProxy,
            local: "127.0.0.1:3128".into(),
            source: io::Error::other("boom"),
        };
        assert_eq!(
            error_chain(&e),
            "listener http-proxy on 127.0.0.1:3128: accept failed: boom"
        );
    }

    #[test]
    fn class_labels() {
        assert_eq!(
            class_label(crate::classify("::ffff:127.0.0.1".parse().unwrap())),
            "loopback via IPv4-mapped IPv6 (::ffff:0:0/96)"
        );
        assert_eq!(
            class_label(crate::classify("169.254.169.254".parse().unwrap())),
            "cloud metadata endpoint"
        );
    }

    #[test]
    fn sanitize_escapes_and_cuts() {
        assert_eq!(sanitize("a\r\nb"), "a\\r\\nb");
        assert_eq!(sanitize(&"x".repeat(300)).len(), 259);
    }
}
