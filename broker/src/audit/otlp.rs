//! The OTLP/HTTP logs exporter: the store's records, sent to an OpenTelemetry collector as log
//! records, for fleets of CI runners whose audit is gathered in one place.
//!
//! - **Encoding** ([`encode_request`], [`log_record`], [`severity`], [`unix_nanos`]): one
//!   `ExportLogsServiceRequest` per batch in the OTLP JSON encoding (lowerCamelCase names,
//!   64-bit integers as decimal strings): one `resourceLogs` (`service.name = "vetto"`,
//!   `vetto.store_id`, `host.name`), one `scopeLogs` (`vetto.audit`), one `logRecord` per
//!   stored record whose body is the record's exact stored JSON (so its hash can be checked
//!   by whoever receives it) and whose attributes repeat its place in the chain.
//! - **Transport** ([`Endpoint`], [`post`], [`parse_response`], [`classify`]): a minimal
//!   blocking HTTP/1.1 client, `http://host:port/path` only. TLS is not built in: point vetto
//!   at a collector or agent on loopback that forwards.
//! - **Delivery** ([`export_pending`]): the records after the destination's cursor, in batches
//!   (the bounded buffer); the cursor moves only after a 2xx, so nothing is lost and nothing
//!   acknowledged is sent again. A collector that is down, slow or overloaded (connection
//!   errors, timeouts, 429/502/503/504) is retried with a short backoff until the time budget
//!   is spent, and what it did not take stays pending in the store for the next export: it
//!   never fails a session. Delivery is at least once: a batch whose answer was lost (the
//!   connection dropped after the collector took it) is sent again; `vetto.store_id` with
//!   `vetto.seq` is a unique key to drop such a duplicate downstream.
//!
//! Exports into one store are serialised by a `flock` on `<db>.otlp.lock` (not the writers'
//! lock, so appends never wait on the network), so two sessions ending at once do not send the
//! same records.

use std::io::{Read, Write};
use std::net::{Ipv6Addr, SocketAddr, TcpStream, ToSocketAddrs};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use nix::fcntl::{Flock, FlockArg};
use serde_json::{json, Value};
use thiserror::Error;

use super::event::{parse_rfc3339, EventKind};
use super::store::{Filter, Store, Stored};
use super::AuditError;

/// Records read from the store and sent per request (the bounded in-memory buffer).
pub const DEFAULT_BATCH: usize = 512;
/// The total time one export may take.
pub const DEFAULT_DEADLINE: Duration = Duration::from_secs(2);
/// Retries of one batch after its first attempt (the time budget may end them sooner).
pub const DEFAULT_RETRIES: u32 = 3;
/// The resource's `service.name`.
pub const SERVICE_NAME: &str = "vetto";
/// The instrumentation scope's name.
pub const SCOPE_NAME: &str = "vetto.audit";
/// OTLP's `SEVERITY_NUMBER_INFO`.
pub const INFO: (&str, u8) = ("INFO", 9);
/// OTLP's `SEVERITY_NUMBER_WARN`.
pub const WARN: (&str, u8) = ("WARN", 13);

/// The backoff before the first retry; it doubles up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(5);
/// At most this much of a response is read.
const MAX_RESPONSE: usize = 64 * 1024;
/// At most this much of a refusal's body is quoted.
const QUOTED_BODY: usize = 200;

const TLS_WHY: &str = "https is not supported: TLS is not built into vetto; point it at a local OpenTelemetry collector or agent (e.g. http://127.0.0.1:4318/v1/logs on loopback) that forwards to the remote one";

/// Why an export did not complete. A collector that is down or overloaded is not one of these
/// (see [`Exported::stopped`]): the records wait in the store.
#[derive(Debug, Error)]
pub enum OtlpError {
    /// The endpoint URL is not one this exporter can use.
    #[error("endpoint {url:?}: {why}")]
    Url {
        /// The URL.
        url: String,
        /// What is wrong.
        why: String,
    },
    /// The store could not be read, or the cursor not moved.
    #[error("OTLP export to {destination}: {what}")]
    Store {
        /// The destination (its cursor key).
        destination: String,
        /// What was being done.
        what: &'static str,
        /// The store's error.
        #[source]
        source: Box<AuditError>,
    },
    /// The export lock beside the store could not be taken.
    #[error("OTLP export lock {}", path.display())]
    Lock {
        /// The lock file.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// The collector refused a batch with a status that is not retried (a 4xx other than 429,
    /// a 500, a redirect): resending the same request would be refused again.
    #[error("the collector at {destination} refused a batch of {records} records with HTTP {status} (not retried): {body:?}")]
    Refused {
        /// The destination.
        destination: String,
        /// The HTTP status.
        status: u16,
        /// Records in the refused batch (still pending).
        records: usize,
        /// The first 200 bytes of the answer's body.
        body: String,
    },
}

/// What an export did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Exported {
    /// Records the collector acknowledged in this call.
    pub sent: u64,
    /// Records still waiting (the collector was down or refused).
    pub pending: u64,
    /// Of `sent`, the records the collector said it dropped (an OTLP `partialSuccess`); they
    /// are not sent again, since the rest of their batch was taken.
    pub rejected: u64,
    /// The collector's `partialSuccess` message, if it gave one.
    pub rejected_message: Option<String>,
    /// Why it stopped with records pending: the last retryable failure, the time budget,
    /// another export running.
    pub stopped: Option<String>,
}

/// How an export runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// Records per request, the most held in memory at once (at least 1).
    pub batch: usize,
    /// The total time budget: past it the export stops and what is left waits.
    pub deadline: Duration,
    /// Retries of one batch after its first attempt.
    pub retries: u32,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            batch: DEFAULT_BATCH,
            deadline: DEFAULT_DEADLINE,
            retries: DEFAULT_RETRIES,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Encoding

/// The resource every record is sent under.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resource {
    /// The store's random id (`vetto.store_id`).
    pub store_id: String,
    /// The host's name (`host.name`).
    pub host: String,
}

impl Resource {
    /// The resource of `store` on this host.
    pub fn of(store: &Store) -> Self {
        Resource {
            store_id: store.id().to_string(),
            host: hostname(),
        }
    }
}

/// This host's name, from `/proc/sys/kernel/hostname` (`unknown` if unreadable).
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "unknown".into())
}

/// A record's severity (text, number): WARN for refusals, connections that were not allowed
/// and limits; INFO for everything else.
pub fn severity(kind: &EventKind) -> (&'static str, u8) {
    match kind {
        EventKind::Refusal(_) | EventKind::Limit(_) => WARN,
        EventKind::Connection(c) if !c.allowed() => WARN,
        _ => INFO,
    }
}

/// Nanoseconds since the epoch of a stored time (RFC 3339 UTC), or `None`.
pub fn unix_nanos(time: &str) -> Option<u64> {
    parse_rfc3339(time)?.checked_mul(1_000_000)
}

/// An OTLP `KeyValue` with a string value.
pub fn string_attr(key: &str, value: &str) -> Value {
    json!({ "key": key, "value": { "stringValue": value } })
}

/// An OTLP `KeyValue` with an int64 value (a decimal string in JSON).
pub fn int_attr(key: &str, value: u64) -> Value {
    let v = i64::try_from(value).unwrap_or(i64::MAX);
    json!({ "key": key, "value": { "intValue": v.to_string() } })
}

/// One stored record as an OTLP `LogRecord`.
pub fn log_record(r: &Stored) -> Value {
    let (text, number) = severity(&r.event.kind);
    let time = unix_nanos(&r.event.time).unwrap_or(0).to_string();
    let kind = r.event.kind.name();
    json!({
        "timeUnixNano": time,
        "observedTimeUnixNano": time,
        "severityNumber": number,
        "severityText": text,
        "body": { "stringValue": r.body },
        "attributes": [
            string_attr("event.name", kind),
            string_attr("vetto.session", &r.event.session),
            int_attr("vetto.session_seq", r.event.session_seq),
            int_attr("vetto.seq", r.event.seq),
            string_attr("vetto.kind", kind),
            string_attr("vetto.hash", &r.hash),
            string_attr("vetto.prev", &r.prev),
        ],
    })
}

/// The `ExportLogsServiceRequest` for `records`.
pub fn encode_request(resource: &Resource, records: &[Stored]) -> Value {
    json!({
        "resourceLogs": [{
            "resource": {
                "attributes": [
                    string_attr("service.name", SERVICE_NAME),
                    string_attr("vetto.store_id", &resource.store_id),
                    string_attr("host.name", &resource.host),
                ],
            },
            "scopeLogs": [{
                "scope": { "name": SCOPE_NAME, "version": env!("CARGO_PKG_VERSION") },
                "logRecords": records.iter().map(log_record).collect::<Vec<_>>(),
            }],
        }],
    })
}

// ---------------------------------------------------------------------------------------------
// Transport

/// An `http://host:port/path` endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// The host: a name (lowercased), an IPv4 address, or an IPv6 address (no brackets).
    pub host: String,
    /// The port (80 when the URL names none).
    pub port: u16,
    /// The path and query, as given (`/` when empty).
    pub path: String,
}

impl Endpoint {
    /// Parse `url`: `http://host[:port][/path]` only.
    pub fn parse(url: &str) -> Result<Self, OtlpError> {
        let bad = |why: &str| OtlpError::Url {
            url: url.to_string(),
            why: why.to_string(),
        };
        let (scheme, rest) = url
            .split_once("://")
            .ok_or_else(|| bad("not a URL: expected http://host:port/path"))?;
        match scheme.to_ascii_lowercase().as_str() {
            "http" => {}
            "https" => return Err(bad(TLS_WHY)),
            _ => return Err(bad("only http://host:port/path is supported")),
        }
        if url.bytes().any(|b| b <= b' ' || b >= 0x7f) {
            return Err(bad(
                "contains a space, a control character or a non-ASCII character",
            ));
        }
        if rest.contains('#') {
            return Err(bad("a fragment (#) has no meaning here"));
        }
        let (authority, path) = match rest.find(['/', '?']) {
            Some(i) => rest.split_at(i),
            None => (rest, ""),
        };
        if authority.contains('@') {
            return Err(bad("credentials in the URL are not supported"));
        }
        let (host, port) = split_host_port(authority).map_err(bad)?;
        let path = match path {
            "" => "/".to_string(),
            p if p.starts_with('?') => format!("/{p}"),
            p => p.to_string(),
        };
        Ok(Endpoint { host, port, path })
    }

    /// `host:port` as the `Host` header and a URL write it (IPv6 in brackets).
    pub fn authority(&self) -> String {
        match self.host.contains(':') {
            true => format!("[{}]:{}", self.host, self.port),
            false => format!("{}:{}", self.host, self.port),
        }
    }

    /// The normalised URL (`http://host:port/path`): the key of the destination's cursor.
    pub fn key(&self) -> String {
        format!("http://{}{}", self.authority(), self.path)
    }
}

fn split_host_port(authority: &str) -> Result<(String, u16), &'static str> {
    let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
        let (addr, after) = v6
            .split_once(']')
            .ok_or("an IPv6 address must end with ]")?;
        addr.parse::<Ipv6Addr>()
            .map_err(|_| "not an IPv6 address between [ and ]")?;
        let port = match after {
            "" => None,
            p => Some(p.strip_prefix(':').ok_or("expected :port after ]")?),
        };
        (addr.to_ascii_lowercase(), port)
    } else {
        if authority.matches(':').count() > 1 {
            return Err("an IPv6 address goes in [ ] (http://[::1]:4318/v1/logs)");
        }
        let (host, port) = match authority.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (authority, None),
        };
        if host.is_empty() {
            return Err("no host");
        }
        if !host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.' || b == b'_')
        {
            return Err("the host is not a name or an address (an IPv6 address goes in [ ])");
        }
        (host.to_ascii_lowercase(), port)
    };
    let port = match port {
        None => 80,
        Some(p) => match p.parse::<u16>() {
            Ok(n) if n > 0 && p.bytes().all(|b| b.is_ascii_digit()) => n,
            _ => return Err("the port is not a number from 1 to 65535"),
        },
    };
    Ok((host, port))
}

/// An HTTP response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// The status code.
    pub status: u16,
    /// The headers (names lowercased), in order.
    pub headers: Vec<(String, String)>,
    /// The body (de-chunked; at most what was read).
    pub body: Vec<u8>,
}

impl Response {
    /// The first header named `name` (lowercase).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// The time left before `until`, or a timeout error when none is.
fn remaining(until: Instant) -> std::io::Result<Duration> {
    let left = until.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            "the time budget is spent",
        ));
    }
    Ok(left)
}

fn connect(ep: &Endpoint, until: Instant) -> std::io::Result<TcpStream> {
    let addrs: Vec<SocketAddr> = (ep.host.as_str(), ep.port).to_socket_addrs()?.collect();
    let mut last = None;
    for a in addrs {
        match TcpStream::connect_timeout(&a, remaining(until)?) {
            Ok(s) => return Ok(s),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::NotFound,
            format!("{} resolves to no address", ep.host),
        )
    }))
}

/// The request's bytes: a `POST` of `body` (JSON) to `ep`, closing the connection after.
pub fn request_bytes(ep: &Endpoint, body: &[u8]) -> Vec<u8> {
    let head = format!(
        "POST {} HTTP/1.1\r\nHost: {}\r\nUser-Agent: vetto/{}\r\nContent-Type: application/json\r\nAccept: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        ep.path,
        ep.authority(),
        env!("CARGO_PKG_VERSION"),
        body.len()
    );
    let mut out = Vec::with_capacity(head.len() + body.len());
    out.extend_from_slice(head.as_bytes());
    out.extend_from_slice(body);
    out
}

/// POST `body` to `ep` and read the answer, all before `until`.
pub fn post(ep: &Endpoint, body: &[u8], until: Instant) -> std::io::Result<Response> {
    let mut s = connect(ep, until)?;
    s.set_write_timeout(Some(remaining(until)?))?;
    // A collector may answer (413, say) and close before it has read the whole request: its
    // answer, if one came, says more than the write's error.
    let written = s
        .write_all(&request_bytes(ep, body))
        .and_then(|()| s.flush());
    let mut raw = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        let left = match remaining(until) {
            Ok(left) => left,
            Err(e) if final_head_end(&raw).is_none() => return Err(e),
            Err(_) => break,
        };
        s.set_read_timeout(Some(left))?;
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => raw.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            // Once the answer's head is in, an error (a reset, a timeout) only cuts its body:
            // the status is what counts.
            Err(e) if final_head_end(&raw).is_none() => return Err(e),
            Err(_) => break,
        }
        if raw.len() >= MAX_RESPONSE || raw_complete(&raw) {
            break;
        }
    }
    if let Err(e) = written {
        if final_head_end(&raw).is_none() {
            return Err(e);
        }
    }
    parse_response(&raw).map_err(|why| std::io::Error::new(std::io::ErrorKind::InvalidData, why))
}

/// Whether `raw` holds a whole answer: its final head, and its body by `Content-Length` or
/// the last chunk (without either, only the end of the connection tells).
fn raw_complete(raw: &[u8]) -> bool {
    let (Some(start), Ok(r)) = (final_head_end(raw), parse_response(raw)) else {
        return false;
    };
    if is_chunked(&r.headers) {
        return raw.ends_with(b"0\r\n\r\n");
    }
    match r
        .header("content-length")
        .and_then(|v| v.parse::<usize>().ok())
    {
        Some(len) => raw.len() - start >= len,
        None => false,
    }
}

fn head_end(raw: &[u8]) -> Option<usize> {
    raw.windows(4).position(|w| w == b"\r\n\r\n").map(|i| i + 4)
}

/// Where the body of the final (non-1xx) answer begins.
fn final_head_end(raw: &[u8]) -> Option<usize> {
    let mut start = 0;
    loop {
        let end = start + head_end(&raw[start..])?;
        let status = status_of(&raw[start..end]).ok()?;
        if !(100..200).contains(&status) {
            return Some(end);
        }
        start = end;
    }
}

fn status_of(head: &[u8]) -> Result<u16, String> {
    let line_end = head
        .windows(2)
        .position(|w| w == b"\r\n")
        .unwrap_or(head.len());
    let line =
        std::str::from_utf8(&head[..line_end]).map_err(|_| "a status line that is not text")?;
    let mut parts = line.splitn(3, ' ');
    let version = parts.next().unwrap_or("");
    let code = parts.next().unwrap_or("");
    if !version.starts_with("HTTP/1.") {
        return Err(format!("not an HTTP/1 answer: {:?}", truncate(line, 80)));
    }
    match code.parse::<u16>() {
        Ok(c) if code.len() == 3 && (100..600).contains(&c) => Ok(c),
        _ => Err(format!("a malformed status line: {:?}", truncate(line, 80))),
    }
}

fn is_chunked(headers: &[(String, String)]) -> bool {
    headers
        .iter()
        .any(|(n, v)| n == "transfer-encoding" && v.to_ascii_lowercase().contains("chunked"))
}

/// Parse an HTTP/1.1 answer (interim 1xx answers skipped; the body de-chunked, or cut to its
/// `Content-Length`).
pub fn parse_response(raw: &[u8]) -> Result<Response, String> {
    let mut start = 0;
    loop {
        let rest = &raw[start..];
        let end = head_end(rest).ok_or("the answer ended before its headers did")?;
        let head = std::str::from_utf8(&rest[..end]).map_err(|_| "headers that are not text")?;
        let status = status_of(&rest[..end])?;
        if (100..200).contains(&status) {
            start += end;
            continue;
        }
        let mut headers = vec![];
        for line in head.split("\r\n").skip(1).filter(|l| !l.is_empty()) {
            let (n, v) = line
                .split_once(':')
                .ok_or_else(|| format!("a malformed header: {:?}", truncate(line, 80)))?;
            headers.push((n.trim().to_ascii_lowercase(), v.trim().to_string()));
        }
        let body = &rest[end..];
        let body = if is_chunked(&headers) {
            dechunk(body)
        } else {
            let len = headers
                .iter()
                .find(|(n, _)| n == "content-length")
                .and_then(|(_, v)| v.parse::<usize>().ok());
            match len {
                Some(l) => body[..l.min(body.len())].to_vec(),
                None => body.to_vec(),
            }
        };
        return Ok(Response {
            status,
            headers,
            body,
        });
    }
}

/// The data of a chunked body (as much as is there).
fn dechunk(mut b: &[u8]) -> Vec<u8> {
    let mut out = vec![];
    while let Some(eol) = b.windows(2).position(|w| w == b"\r\n") {
        let size = std::str::from_utf8(&b[..eol])
            .ok()
            .and_then(|l| usize::from_str_radix(l.split(';').next().unwrap_or("").trim(), 16).ok());
        let Some(size) = size.filter(|s| *s > 0) else {
            break;
        };
        let data = &b[eol + 2..];
        out.extend_from_slice(&data[..size.min(data.len())]);
        if data.len() < size + 2 {
            break;
        }
        b = &data[size + 2..];
    }
    out
}

fn truncate(s: &str, max: usize) -> &str {
    match s.char_indices().nth(max) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

/// What an answer means for the batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// A 2xx: the batch is delivered (`rejected` of it dropped by the collector, which said
    /// why in `message`).
    Acked {
        /// `partialSuccess.rejectedLogRecords`.
        rejected: u64,
        /// `partialSuccess.errorMessage`, if not empty.
        message: Option<String>,
    },
    /// 429, 502, 503, 504: try again later (after `after`, if the collector said).
    Retry {
        /// The status.
        status: u16,
        /// `Retry-After`, in seconds.
        after: Option<Duration>,
    },
    /// Anything else: the same request would be refused again.
    Refused {
        /// The status.
        status: u16,
        /// The first 200 bytes of the body.
        body: String,
    },
}

/// What an answer means (the OTLP/HTTP rules: only 429, 502, 503 and 504 are retried).
pub fn classify(r: &Response) -> Outcome {
    match r.status {
        200..=299 => {
            let (rejected, message) = partial_success(&r.body);
            Outcome::Acked { rejected, message }
        }
        429 | 502 | 503 | 504 => Outcome::Retry {
            status: r.status,
            after: r
                .header("retry-after")
                .and_then(|v| v.trim().parse::<u64>().ok())
                .map(Duration::from_secs),
        },
        status => Outcome::Refused {
            status,
            body: String::from_utf8_lossy(&r.body[..r.body.len().min(QUOTED_BODY)])
                .trim()
                .to_string(),
        },
    }
}

/// An `ExportLogsServiceResponse`'s `partialSuccess`: (rejected records, message).
pub fn partial_success(body: &[u8]) -> (u64, Option<String>) {
    let Ok(v) = serde_json::from_slice::<Value>(body) else {
        return (0, None);
    };
    let p = &v["partialSuccess"];
    let rejected = match &p["rejectedLogRecords"] {
        Value::String(s) => s.parse().unwrap_or(0),
        n => n.as_u64().unwrap_or(0),
    };
    let message = p["errorMessage"]
        .as_str()
        .filter(|m| !m.is_empty())
        .map(|m| truncate(m, QUOTED_BODY).to_string());
    (rejected, message)
}

// ---------------------------------------------------------------------------------------------
// Delivery

/// How one batch went.
enum Delivery {
    Acked {
        rejected: u64,
        message: Option<String>,
    },
    GaveUp(String),
    Refused {
        status: u16,
        body: String,
    },
}

/// The backoff after `attempt` failures (1, 2, …), with up to a quarter more at random so a
/// fleet of runners does not retry in step.
fn backoff(attempt: u32) -> Duration {
    let base = FIRST_BACKOFF
        .saturating_mul(1u32 << attempt.saturating_sub(1).min(16))
        .min(MAX_BACKOFF);
    let jitter = getrandom::u32().unwrap_or(0) % 256;
    base + base / 4 * jitter / 256
}

/// POST one batch, retrying what may be retried while the budget lasts.
fn deliver(ep: &Endpoint, body: &[u8], retries: u32, until: Instant) -> Delivery {
    let mut attempt = 0u32;
    loop {
        let (why, after) = match post(ep, body, until) {
            Ok(r) => match classify(&r) {
                Outcome::Acked { rejected, message } => {
                    return Delivery::Acked { rejected, message }
                }
                Outcome::Refused { status, body } => return Delivery::Refused { status, body },
                Outcome::Retry { status, after } => (format!("HTTP {status}"), after),
            },
            Err(e) => (e.to_string(), None),
        };
        attempt += 1;
        if attempt > retries {
            return Delivery::GaveUp(format!(
                "the collector at {} did not take the batch: {why} (after {attempt} attempts)",
                ep.key()
            ));
        }
        let wait = backoff(attempt).max(after.unwrap_or_default());
        if Instant::now() + wait >= until {
            return Delivery::GaveUp(format!(
                "the collector at {} did not take the batch: {why} (the time budget is spent)",
                ep.key()
            ));
        }
        std::thread::sleep(wait);
    }
}

fn store_err(destination: &str, what: &'static str) -> impl Fn(AuditError) -> OtlpError {
    let destination = destination.to_string();
    move |e| OtlpError::Store {
        destination: destination.clone(),
        what,
        source: Box::new(e),
    }
}

/// The cursor key of `url` (its normalised form), or why the URL cannot be used.
pub fn destination(url: &str) -> Result<String, OtlpError> {
    Endpoint::parse(url).map(|e| e.key())
}

/// Start the cursor of `url` just before `first_seq` (a session's first record) if the store
/// has none for it yet, so a session that names a new destination sends its own records, not
/// the whole history (`vetto audit export --otlp` sends that). Returns whether it did.
pub fn start_cursor(store: &Store, url: &str, first_seq: u64) -> Result<bool, OtlpError> {
    let dest = destination(url)?;
    store
        .start_acked(&dest, first_seq.saturating_sub(1))
        .map_err(store_err(&dest, "starting the export cursor"))
}

/// The lock that serialises the exports of one store, or `None` if another export still holds
/// it at `until`.
fn export_lock(store: &Store, until: Instant) -> Result<Option<Flock<std::fs::File>>, OtlpError> {
    let mut path = store.paths().db.as_os_str().to_os_string();
    path.push(".otlp.lock");
    let path = PathBuf::from(path);
    let mut file = super::store::open_private(&path).map_err(|source| OtlpError::Lock {
        path: path.clone(),
        source,
    })?;
    loop {
        match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(l) => return Ok(Some(l)),
            Err((f, nix::errno::Errno::EWOULDBLOCK)) => file = f,
            Err((_, nix::errno::Errno::EINTR)) => {
                return Err(OtlpError::Lock {
                    path,
                    source: std::io::Error::from(std::io::ErrorKind::Interrupted),
                })
            }
            Err((_, e)) => {
                return Err(OtlpError::Lock {
                    path,
                    source: std::io::Error::from(e),
                })
            }
        }
        if Instant::now() + Duration::from_millis(20) >= until {
            return Ok(None);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The records `destination` has not acknowledged.
fn pending(store: &Store, destination: &str) -> Result<u64, OtlpError> {
    let e = store_err(destination, "reading the export cursor");
    let last = store.last_seq().map_err(&e)?;
    let acked = store.acked(destination).map_err(&e)?.unwrap_or(0);
    Ok(last.saturating_sub(acked))
}

/// Send every record of `store` the collector at `url` has not acknowledged yet, in batches,
/// within `opts.deadline`. A collector that is down or overloaded is not an error: what it did
/// not take is counted in [`Exported::pending`] and waits for the next export.
pub fn export_pending(store: &Store, url: &str, opts: &Options) -> Result<Exported, OtlpError> {
    let until = Instant::now() + opts.deadline;
    let ep = Endpoint::parse(url)?;
    let dest = ep.key();
    let mut out = Exported::default();
    let Some(_lock) = export_lock(store, until)? else {
        out.stopped = Some("another export from this store was still running".into());
        out.pending = pending(store, &dest)?;
        return Ok(out);
    };
    let resource = Resource::of(store);
    let batch = u64::try_from(opts.batch.max(1)).unwrap_or(u64::MAX);
    loop {
        if Instant::now() >= until {
            out.stopped = Some("the time budget is spent".into());
            break;
        }
        let after = store
            .acked(&dest)
            .map_err(store_err(&dest, "reading the export cursor"))?;
        let records = store
            .query(&Filter {
                after_seq: after,
                limit: Some(batch),
                ..Filter::default()
            })
            .map_err(store_err(&dest, "reading the records to send"))?;
        let Some(last) = records.last().map(|r| r.event.seq) else {
            break;
        };
        let body = encode_request(&resource, &records).to_string();
        match deliver(&ep, body.as_bytes(), opts.retries, until) {
            Delivery::Acked { rejected, message } => {
                store
                    .set_acked(&dest, last)
                    .map_err(store_err(&dest, "moving the export cursor"))?;
                out.sent += records.len() as u64;
                out.rejected += rejected;
                if message.is_some() {
                    out.rejected_message = message;
                }
            }
            Delivery::GaveUp(why) => {
                out.stopped = Some(why);
                break;
            }
            Delivery::Refused { status, body } => {
                return Err(OtlpError::Refused {
                    destination: dest,
                    status,
                    records: records.len(),
                    body,
                })
            }
        }
    }
    out.pending = pending(store, &dest)?;
    Ok(out)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // Tests: a panic is the failure report.
mod tests {
    //! Every listener here is one the test opens itself on 127.0.0.1.

    use std::collections::BTreeMap;
    use std::net::TcpListener;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};

    use super::*;
    use crate::audit::event::{
        Approval, ApprovalScope, Connection, EndReason, Engine, Limit, Refusal, SessionEnd,
        SessionStart,
    };
    use crate::audit::store::StorePaths;
    use crate::audit::{AuditConfig, Recorder};

    const T0: u64 = 1_796_083_199_123; // 2026-11-30T23:59:59.123Z

    fn connection(decision: &str) -> EventKind {
        EventKind::Connection(Connection {
            decision: decision.into(),
            reason: "closed".into(),
            detail: None,
            listener: "http".into(),
            destination: Some("example.com:443".into()),
            dialled: Some("93.184.215.14:443".into()),
            bytes_up: 10,
            bytes_down: 20,
            duration_ms: 5,
            basis: None,
        })
    }

    fn approval() -> Approval {
        Approval {
            id: "a1".into(),
            destination: "example.org:443".into(),
            scope: Some(ApprovalScope::Once),
            answered_by: Some("dev (1000)".into()),
            waiting: 1,
        }
    }

    /// One event of every kind (and a connection of each decision), with its severity.
    fn every_kind() -> Vec<(EventKind, (&'static str, u8))> {
        vec![
            (
                EventKind::SessionStart(SessionStart {
                    policy_digest: "00".repeat(32),
                    profile: "default".into(),
                    layers: vec!["built-in profile \"default\"".into()],
                    tier: "FULL".into(),
                    landlock_abi: Some(6),
                    argv: vec!["/bin/true".into(), "naïve \"quoted\"\n".into()],
                    project: "/p".into(),
                    uid: 1000,
                    engine: Engine::Run,
                    change_set: Some("20261202-101010-abcdef".into()),
                }),
                INFO,
            ),
            (connection("allow"), INFO),
            (connection("deny"), WARN),
            (connection("error"), WARN),
            (
                EventKind::Refusal(Refusal {
                    subject: "policy".into(),
                    reasons: vec!["no".into()],
                    argv: vec![],
                    engine: Engine::Run,
                }),
                WARN,
            ),
            (
                EventKind::Limit(Limit {
                    limit: "processes".into(),
                    value: 64,
                    detail: "fork refused".into(),
                }),
                WARN,
            ),
            (EventKind::ApprovalRequested(approval()), INFO),
            (EventKind::ApprovalGranted(approval()), INFO),
            (EventKind::ApprovalDenied(approval()), INFO),
            (EventKind::ApprovalTimeout(approval()), INFO),
            (EventKind::ApprovalRevoked(approval()), INFO),
            (
                EventKind::SessionEnd(SessionEnd {
                    status: Some(0),
                    signal: None,
                    duration_ms: 12,
                    reason: EndReason::Exit,
                    control: None,
                }),
                INFO,
            ),
        ]
    }

    /// Record one session of every kind in the store in `dir` (times T0, T0+1, …).
    fn session(cfg: &AuditConfig, name: &str) -> Vec<Stored> {
        let mut r = Recorder::open(cfg, name).unwrap();
        let events = every_kind()
            .into_iter()
            .enumerate()
            .map(|(i, (k, _))| (T0 + i as u64, k))
            .collect();
        r.record_batch(events, true).unwrap()
    }

    fn open(cfg: &AuditConfig) -> Store {
        Store::open(&StorePaths::new(&cfg.store), false).unwrap()
    }

    fn attrs(v: &Value) -> BTreeMap<String, Value> {
        v["attributes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|kv| (kv["key"].as_str().unwrap().to_string(), kv["value"].clone()))
            .collect()
    }

    /// Every object key in `v` is lowerCamelCase, as the OTLP JSON mapping names fields.
    fn assert_camel_case(v: &Value) {
        match v {
            Value::Object(o) => {
                for (k, x) in o {
                    assert!(
                        k.starts_with(|c: char| c.is_ascii_lowercase())
                            && k.chars().all(|c| c.is_ascii_alphanumeric()),
                        "{k}"
                    );
                    assert_camel_case(x);
                }
            }
            Value::Array(a) => a.iter().for_each(assert_camel_case),
            _ => {}
        }
    }

    #[test]
    fn severity_is_warn_for_refusals_denials_and_limits() {
        for (k, want) in every_kind() {
            assert_eq!(severity(&k), want, "{}", k.name());
        }
    }

    #[test]
    fn a_record_encodes_every_field() {
        let d = crate::private_tempdir();
        let cfg = AuditConfig::in_dir(d.path());
        let stored = session(&cfg, "s1");
        for (r, (_, (text, number))) in stored.iter().zip(every_kind()) {
            let v = log_record(r);
            assert_camel_case(&v);
            let o = v.as_object().unwrap();
            let keys: Vec<&str> = o.keys().map(String::as_str).collect();
            assert_eq!(
                keys,
                [
                    "attributes",
                    "body",
                    "observedTimeUnixNano",
                    "severityNumber",
                    "severityText",
                    "timeUnixNano"
                ],
                "no traceId, spanId or anything else"
            );
            let nanos = ((T0 + r.event.seq - 1) * 1_000_000).to_string();
            assert_eq!(v["timeUnixNano"], Value::String(nanos.clone()));
            assert_eq!(v["observedTimeUnixNano"], Value::String(nanos));
            assert_eq!(v["severityNumber"], json!(number));
            assert!(v["severityNumber"].is_u64());
            assert_eq!(v["severityText"], text);
            assert_eq!(v["body"], json!({ "stringValue": r.body }));
            let kind = r.event.kind.name();
            let want: BTreeMap<String, Value> = [
                ("event.name", json!({ "stringValue": kind })),
                ("vetto.kind", json!({ "stringValue": kind })),
                ("vetto.session", json!({ "stringValue": "s1" })),
                (
                    "vetto.session_seq",
                    json!({ "intValue": r.event.session_seq.to_string() }),
                ),
                ("vetto.seq", json!({ "intValue": r.event.seq.to_string() })),
                ("vetto.hash", json!({ "stringValue": r.hash })),
                ("vetto.prev", json!({ "stringValue": r.prev })),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect();
            assert_eq!(attrs(&v), want);
            assert_eq!(v["attributes"].as_array().unwrap().len(), want.len());
        }
        // The body is the exact stored text, byte for byte (its hash is checkable).
        let r = &stored[0];
        let body = log_record(r)["body"]["stringValue"]
            .as_str()
            .unwrap()
            .to_string();
        assert_eq!(
            crate::audit::store::record_hash(open(&cfg).id(), 1, &r.prev, &body),
            r.hash
        );
    }

    #[test]
    fn a_request_has_one_resource_and_one_scope() {
        let d = crate::private_tempdir();
        let cfg = AuditConfig::in_dir(d.path());
        let stored = session(&cfg, "s1");
        let res = Resource {
            store_id: "abc123".into(),
            host: "runner-7".into(),
        };
        let v = encode_request(&res, &stored);
        assert_camel_case(&v);
        let rl = v["resourceLogs"].as_array().unwrap();
        assert_eq!(rl.len(), 1);
        let want: BTreeMap<String, Value> = [
            ("service.name", "vetto"),
            ("vetto.store_id", "abc123"),
            ("host.name", "runner-7"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), json!({ "stringValue": v })))
        .collect();
        assert_eq!(attrs(&rl[0]["resource"]), want);
        let sl = rl[0]["scopeLogs"].as_array().unwrap();
        assert_eq!(sl.len(), 1);
        assert_eq!(sl[0]["scope"]["name"], "vetto.audit");
        let recs = sl[0]["logRecords"].as_array().unwrap();
        assert_eq!(recs.len(), stored.len());
        for (v, r) in recs.iter().zip(&stored) {
            assert_eq!(*v, log_record(r));
        }
        // The host's name is the kernel's.
        let h = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
        assert_eq!(hostname(), h.trim());
        assert_eq!(unix_nanos("1970-01-01T00:00:01.500Z"), Some(1_500_000_000));
        assert_eq!(unix_nanos("not a time"), None);
    }

    /// With VETTO_OTLP_SAMPLE set, write a request of one session of every kind there, for
    /// tests/otlp/check.sh to post to the Python receiver.
    #[test]
    fn sample_request_for_the_receiver() {
        let d = crate::private_tempdir();
        let cfg = AuditConfig::in_dir(d.path());
        session(&cfg, "s1");
        session(&cfg, "s2");
        let store = open(&cfg);
        let records = store.query(&Filter::default()).unwrap();
        assert_eq!(records.len(), 2 * every_kind().len());
        let v = encode_request(&Resource::of(&store), &records);
        let text = v.to_string();
        assert_eq!(serde_json::from_str::<Value>(&text).unwrap(), v);
        if let Some(out) = std::env::var_os("VETTO_OTLP_SAMPLE") {
            std::fs::write(out, text).unwrap();
        }
    }

    #[test]
    fn urls() {
        let ep = Endpoint::parse("http://127.0.0.1:4318/v1/logs").unwrap();
        assert_eq!(
            ep,
            Endpoint {
                host: "127.0.0.1".into(),
                port: 4318,
                path: "/v1/logs".into()
            }
        );
        assert_eq!(ep.key(), "http://127.0.0.1:4318/v1/logs");
        for (url, key) in [
            (
                "HTTP://LocalHost:4318/v1/logs",
                "http://localhost:4318/v1/logs",
            ),
            ("http://collector", "http://collector:80/"),
            ("http://collector?x=1", "http://collector:80/?x=1"),
            ("http://[::1]:4318/v1/logs", "http://[::1]:4318/v1/logs"),
            ("http://[::FFFF:7f00:1]/", "http://[::ffff:7f00:1]:80/"),
        ] {
            assert_eq!(destination(url).unwrap(), key, "{url}");
        }
        let refused = |url: &str| match Endpoint::parse(url) {
            Err(e @ OtlpError::Url { .. }) => e.to_string(),
            other => panic!("{url}: {other:?}"),
        };
        let https = refused("https://collector.example.com/v1/logs");
        assert!(https.contains("TLS is not built in"), "{https}");
        assert!(https.contains("local OpenTelemetry collector"), "{https}");
        assert!(https.contains("loopback"), "{https}");
        for (url, why) in [
            ("ftp://h/x", "only http://"),
            ("127.0.0.1:4318", "not a URL"),
            ("http://h:4318/v1/logs\r\nX-Evil: 1", "control character"),
            ("http://h:4318/a b", "space"),
            ("http://user:pw@h:4318/", "credentials"),
            ("http://h:0/", "port"),
            ("http://h:99999/", "port"),
            ("http://h:+80/", "port"),
            ("http://h:/", "port"),
            ("http://:80/", "no host"),
            ("http:///v1/logs", "no host"),
            ("http://::1:4318/", "IPv6"),
            ("http://[::1/", "]"),
            ("http://[nope]:1/", "IPv6"),
            ("http://h/x#frag", "fragment"),
            ("http://h\u{e9}/", "non-ASCII"),
        ] {
            let e = refused(url);
            assert!(e.contains(why), "{url}: {e}");
        }
    }

    #[test]
    fn answers_parse_and_classify() {
        let ok = parse_response(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}",
        )
        .unwrap();
        assert_eq!(ok.status, 200);
        assert_eq!(ok.header("content-type"), Some("application/json"));
        assert_eq!(
            classify(&ok),
            Outcome::Acked {
                rejected: 0,
                message: None
            }
        );
        // An interim 100 Continue, then a chunked partial success.
        let body = br#"{"partialSuccess":{"rejectedLogRecords":"2","errorMessage":"too old"}}"#;
        let mut raw =
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                .to_vec();
        raw.extend_from_slice(format!("{:x}\r\n", 10).as_bytes());
        raw.extend_from_slice(&body[..10]);
        raw.extend_from_slice(format!("\r\n{:x}\r\n", body.len() - 10).as_bytes());
        raw.extend_from_slice(&body[10..]);
        raw.extend_from_slice(b"\r\n0\r\n\r\n");
        assert!(raw_complete(&raw));
        assert!(!raw_complete(&raw[..raw.len() - 3]));
        let r = parse_response(&raw).unwrap();
        assert_eq!(r.body, body);
        assert_eq!(
            classify(&r),
            Outcome::Acked {
                rejected: 2,
                message: Some("too old".into())
            }
        );
        assert_eq!(
            partial_success(br#"{"partialSuccess":{"rejectedLogRecords":3}}"#),
            (3, None)
        );
        // Retried: 429, 502, 503, 504 (with Retry-After when given).
        for s in [429, 502, 503, 504] {
            let r = parse_response(
                format!("HTTP/1.1 {s} X\r\nRetry-After: 3\r\nContent-Length: 0\r\n\r\n").as_bytes(),
            )
            .unwrap();
            assert_eq!(
                classify(&r),
                Outcome::Retry {
                    status: s,
                    after: Some(Duration::from_secs(3))
                }
            );
        }
        // Not retried: any other 4xx or 5xx, a redirect; the body quoted up to 200 bytes.
        let long = "e".repeat(300);
        for s in [400, 401, 404, 413, 500, 501, 301] {
            let r = parse_response(
                format!(
                    "HTTP/1.0 {s} Bad\r\nContent-Length: {}\r\n\r\n{long}",
                    long.len()
                )
                .as_bytes(),
            )
            .unwrap();
            assert_eq!(
                classify(&r),
                Outcome::Refused {
                    status: s,
                    body: "e".repeat(200)
                }
            );
        }
        // A body cut to its Content-Length; no length: what was read.
        let r = parse_response(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}junk").unwrap();
        assert_eq!(r.body, b"{}");
        assert!(!raw_complete(b"HTTP/1.1 200 OK\r\n\r\n{}"));
        assert!(raw_complete(
            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}"
        ));
        for bad in [
            &b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n"[..],
            b"SSH-2.0-OpenSSH\r\n\r\n",
            b"HTTP/1.1 2000 OK\r\n\r\n",
            b"HTTP/1.1 abc OK\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nno colon\r\n\r\n",
        ] {
            assert!(
                parse_response(bad).is_err(),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn the_request_is_plain_http_1_1() {
        let ep = Endpoint::parse("http://[::1]:4318/v1/logs").unwrap();
        let raw = request_bytes(&ep, b"{}");
        let text = String::from_utf8(raw).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        assert_eq!(body, "{}");
        let lines: Vec<&str> = head.split("\r\n").collect();
        assert_eq!(lines[0], "POST /v1/logs HTTP/1.1");
        for h in [
            "Host: [::1]:4318",
            "Content-Type: application/json",
            "Content-Length: 2",
            "Connection: close",
        ] {
            assert!(lines.contains(&h), "{h}: {head}");
        }
    }

    // --- A collector on loopback -----------------------------------------------------------

    /// One request the test collector got, and the status it answered.
    struct Got {
        head: String,
        body: Vec<u8>,
        answered: u16,
    }

    impl Got {
        /// The chain positions of the records in it.
        fn seqs(&self) -> Vec<u64> {
            let v: Value = serde_json::from_slice(&self.body).unwrap();
            v["resourceLogs"][0]["scopeLogs"][0]["logRecords"]
                .as_array()
                .unwrap()
                .iter()
                .map(|r| {
                    attrs(r)["vetto.seq"]["intValue"]
                        .as_str()
                        .unwrap()
                        .parse()
                        .unwrap()
                })
                .collect()
        }
    }

    /// What the test collector does with its n-th connection.
    #[derive(Clone, Copy)]
    enum Answer {
        Status(u16, &'static str),
        /// Read the request, answer nothing until stopped.
        Silence,
    }

    struct Collector {
        port: u16,
        stop: Arc<AtomicBool>,
        got: Arc<Mutex<Vec<Got>>>,
        thread: std::thread::JoinHandle<()>,
    }

    impl Collector {
        /// Serve on `listener` (127.0.0.1): the n-th connection gets `script[n]`, then 200 `{}`.
        fn serve(listener: TcpListener, script: Vec<Answer>) -> Self {
            let port = listener.local_addr().unwrap().port();
            let stop = Arc::new(AtomicBool::new(false));
            let got = Arc::new(Mutex::new(vec![]));
            let (s, g) = (stop.clone(), got.clone());
            let thread = std::thread::spawn(move || {
                let mut held = vec![];
                for (n, conn) in listener.incoming().enumerate() {
                    if s.load(Ordering::SeqCst) {
                        break;
                    }
                    let mut conn = conn.unwrap();
                    let (head, body) = read_request(&mut conn);
                    let answer = script.get(n).copied().unwrap_or(Answer::Status(200, "{}"));
                    let answered = match answer {
                        Answer::Status(status, text) => {
                            let _ = conn.write_all(
                                format!(
                                    "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{text}",
                                    text.len()
                                )
                                .as_bytes(),
                            );
                            status
                        }
                        Answer::Silence => {
                            held.push(conn);
                            0
                        }
                    };
                    g.lock().unwrap().push(Got {
                        head,
                        body,
                        answered,
                    });
                }
            });
            Collector {
                port,
                stop,
                got,
                thread,
            }
        }

        fn url(&self) -> String {
            format!("http://127.0.0.1:{}/v1/logs", self.port)
        }

        fn stop(self) -> Vec<Got> {
            self.stop.store(true, Ordering::SeqCst);
            let _ = TcpStream::connect(("127.0.0.1", self.port));
            self.thread.join().unwrap();
            std::mem::take(&mut *self.got.lock().unwrap())
        }
    }

    fn read_request(conn: &mut TcpStream) -> (String, Vec<u8>) {
        conn.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut raw = vec![];
        let mut buf = [0u8; 4096];
        loop {
            if let Some(end) = head_end(&raw) {
                let head = String::from_utf8_lossy(&raw[..end]).to_string();
                let len: usize = head
                    .lines()
                    .find_map(|l| l.strip_prefix("Content-Length: "))
                    .map_or(0, |v| v.trim().parse().unwrap());
                if raw.len() >= end + len {
                    return (head, raw[end..end + len].to_vec());
                }
            }
            match conn.read(&mut buf) {
                Ok(0) | Err(_) => return (String::from_utf8_lossy(&raw).to_string(), vec![]),
                Ok(n) => raw.extend_from_slice(&buf[..n]),
            }
        }
    }

    fn loopback() -> TcpListener {
        TcpListener::bind("127.0.0.1:0").unwrap()
    }

    /// The positions the collector acknowledged, in the order it got them.
    fn acknowledged(got: &[Got]) -> Vec<u64> {
        got.iter()
            .filter(|g| (200..300).contains(&g.answered))
            .flat_map(Got::seqs)
            .collect()
    }

    fn opts(batch: usize, deadline_ms: u64, retries: u32) -> Options {
        Options {
            batch,
            deadline: Duration::from_millis(deadline_ms),
            retries,
        }
    }

    #[test]
    fn a_collector_answering_503_then_200_gets_everything_once() {
        let d = crate::private_tempdir();
        let cfg = AuditConfig::in_dir(d.path());
        session(&cfg, "s1");
        session(&cfg, "s2");
        let store = open(&cfg);
        let n = store.last_seq().unwrap();
        assert_eq!(n, 24);
        let c = Collector::serve(
            loopback(),
            vec![
                Answer::Status(503, "{}"),
                Answer::Status(200, "{}"),
                Answer::Status(429, "{}"),
            ],
        );
        let url = c.url();
        let out = export_pending(&store, &url, &opts(10, 10_000, 3)).unwrap();
        assert_eq!(
            out,
            Exported {
                sent: n,
                pending: 0,
                ..Exported::default()
            }
        );
        assert_eq!(store.acked(&url).unwrap(), Some(n));
        // Nothing more to send: no request.
        let again = export_pending(&store, &url, &opts(10, 10_000, 3)).unwrap();
        assert_eq!((again.sent, again.pending), (0, 0));
        let got = c.stop();
        let answered: Vec<u16> = got.iter().map(|g| g.answered).collect();
        assert_eq!(answered, [503, 200, 429, 200, 200], "3 batches, 2 retried");
        assert_eq!(acknowledged(&got), (1..=n).collect::<Vec<_>>());
        for g in &got {
            assert!(
                g.head.starts_with("POST /v1/logs HTTP/1.1\r\n"),
                "{}",
                g.head
            );
            assert!(g.head.contains("Content-Type: application/json\r\n"));
            assert!(g.head.contains("Connection: close\r\n"));
        }
    }

    #[test]
    fn a_collector_down_then_up_loses_nothing_and_duplicates_nothing() {
        let d = crate::private_tempdir();
        let cfg = AuditConfig::in_dir(d.path());
        session(&cfg, "s1");
        let store = open(&cfg);
        // A port nobody listens on (taken, then given back).
        let port = loopback().local_addr().unwrap().port();
        let url = format!("http://127.0.0.1:{port}/v1/logs");
        let t = Instant::now();
        let out = export_pending(&store, &url, &opts(5, 400, 10)).unwrap();
        assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
        assert_eq!((out.sent, out.pending), (0, 12));
        assert!(out.stopped.unwrap().contains("refused"));
        assert_eq!(store.acked(&url).unwrap(), None);
        // More records while it is down.
        session(&cfg, "s2");
        let out = export_pending(&store, &url, &opts(5, 100, 0)).unwrap();
        assert_eq!((out.sent, out.pending), (0, 24));
        // It comes up: everything, once, in order.
        let c = Collector::serve(TcpListener::bind(("127.0.0.1", port)).unwrap(), vec![]);
        let out = export_pending(&store, &url, &opts(5, 10_000, 3)).unwrap();
        assert_eq!((out.sent, out.pending, out.stopped), (24, 0, None));
        session(&cfg, "s3");
        let out = export_pending(&store, &url, &opts(5, 10_000, 3)).unwrap();
        assert_eq!((out.sent, out.pending), (12, 0));
        let got = c.stop();
        assert_eq!(got.len(), 5 + 3);
        assert_eq!(acknowledged(&got), (1..=36).collect::<Vec<_>>());
        assert_eq!(store.acked(&url).unwrap(), Some(36));
    }

    #[test]
    fn a_400_is_not_retried_and_moves_nothing() {
        let d = crate::private_tempdir();
        let cfg = AuditConfig::in_dir(d.path());
        session(&cfg, "s1");
        let store = open(&cfg);
        let long: &'static str = Box::leak(format!("bad {}", "x".repeat(400)).into_boxed_str());
        let c = Collector::serve(loopback(), vec![Answer::Status(400, long)]);
        let url = c.url();
        let e = export_pending(&store, &url, &opts(512, 10_000, 5)).unwrap_err();
        match &e {
            OtlpError::Refused {
                status,
                records,
                body,
                ..
            } => {
                assert_eq!((*status, *records), (400, 12));
                assert_eq!(body.len(), 200);
                assert!(body.starts_with("bad xxx"));
            }
            other => panic!("{other:?}"),
        }
        let text = e.to_string();
        assert!(
            text.contains("HTTP 400") && text.contains("not retried"),
            "{text}"
        );
        assert_eq!(store.acked(&url).unwrap(), None);
        let got = c.stop();
        assert_eq!(got.len(), 1, "no retry");
    }

    #[test]
    fn a_partial_success_counts_as_delivered() {
        let d = crate::private_tempdir();
        let cfg = AuditConfig::in_dir(d.path());
        session(&cfg, "s1");
        let store = open(&cfg);
        let c = Collector::serve(
            loopback(),
            vec![Answer::Status(
                200,
                r#"{"partialSuccess":{"rejectedLogRecords":"1","errorMessage":"one too big"}}"#,
            )],
        );
        let url = c.url();
        let out = export_pending(&store, &url, &opts(512, 10_000, 0)).unwrap();
        assert_eq!((out.sent, out.pending, out.rejected), (12, 0, 1));
        assert_eq!(out.rejected_message.as_deref(), Some("one too big"));
        assert_eq!(c.stop().len(), 1);
    }

    #[test]
    fn https_is_refused_before_anything_is_read() {
        let d = crate::private_tempdir();
        let cfg = AuditConfig::in_dir(d.path());
        session(&cfg, "s1");
        let store = open(&cfg);
        let e = export_pending(
            &store,
            "https://127.0.0.1:4318/v1/logs",
            &Options::default(),
        )
        .unwrap_err();
        assert!(matches!(e, OtlpError::Url { .. }), "{e:?}");
        assert!(e.to_string().contains("TLS is not built in"), "{e}");
        assert_eq!(
            start_cursor(&store, "https://127.0.0.1:4318/v1/logs", 1)
                .unwrap_err()
                .to_string(),
            e.to_string()
        );
    }

    #[test]
    fn a_collector_that_never_answers_is_bounded_by_the_deadline() {
        let d = crate::private_tempdir();
        let cfg = AuditConfig::in_dir(d.path());
        session(&cfg, "s1");
        let store = open(&cfg);
        let c = Collector::serve(loopback(), vec![Answer::Silence; 10]);
        let url = c.url();
        let t = Instant::now();
        let out = export_pending(&store, &url, &opts(512, 500, 5)).unwrap();
        let took = t.elapsed();
        assert!(took < Duration::from_secs(3), "{took:?}");
        assert_eq!((out.sent, out.pending), (0, 12));
        assert!(out.stopped.is_some());
        assert_eq!(store.acked(&url).unwrap(), None);
        c.stop();
    }

    #[test]
    fn a_new_destination_starts_at_the_session() {
        let d = crate::private_tempdir();
        let cfg = AuditConfig::in_dir(d.path());
        session(&cfg, "old");
        let mine = session(&cfg, "mine");
        let store = open(&cfg);
        let c = Collector::serve(loopback(), vec![]);
        // Spelled another way: the same destination.
        let url = c.url().replace("http://", "HTTP://");
        let first = mine[0].event.seq;
        assert!(start_cursor(&store, &url, first).unwrap());
        // A second session does not move it (nor back, nor forward).
        assert!(!start_cursor(&store, &url, first + 5).unwrap());
        assert!(!start_cursor(&store, &url, 1).unwrap());
        assert_eq!(store.acked(&c.url()).unwrap(), Some(first - 1));
        let out = export_pending(&store, &url, &Options::default()).unwrap();
        assert_eq!((out.sent, out.pending), (12, 0));
        let got = c.stop();
        assert_eq!(acknowledged(&got), (first..=24).collect::<Vec<_>>());
    }

    #[test]
    fn concurrent_exports_send_each_record_once() {
        let d = crate::private_tempdir();
        let cfg = AuditConfig::in_dir(d.path());
        for s in 0..4 {
            session(&cfg, &format!("s{s}"));
        }
        let c = Collector::serve(loopback(), vec![]);
        let url = c.url();
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let (cfg, url) = (cfg.clone(), url.clone());
                std::thread::spawn(move || {
                    export_pending(&open(&cfg), &url, &opts(7, 20_000, 3)).unwrap()
                })
            })
            .collect();
        let sent: u64 = threads.into_iter().map(|t| t.join().unwrap().sent).sum();
        assert_eq!(sent, 48);
        let got = c.stop();
        assert_eq!(acknowledged(&got), (1..=48).collect::<Vec<_>>());
    }

    #[test]
    fn errors_name_their_source_once() {
        let e = OtlpError::Store {
            destination: "http://127.0.0.1:4318/v1/logs".into(),
            what: "reading the records to send",
            source: Box::new(AuditError::Broken("x".into())),
        };
        let text = e.to_string();
        assert_eq!(
            text,
            "OTLP export to http://127.0.0.1:4318/v1/logs: reading the records to send"
        );
        let source = std::error::Error::source(&e).unwrap().to_string();
        assert!(source.contains("broken"), "{source}");
    }
}
