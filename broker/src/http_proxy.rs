//! The HTTP proxy listener: `CONNECT host:port` tunnels, and plain-HTTP forwarding of
//! absolute-form requests (`GET http://host[:port]/path HTTP/1.1`, any method).
//!
//! Both paths follow the same order: strict parse of the destination → [`Policy::decide`]
//! (via [`decide_and_dial`]) → resolve once → whole answer-set check → dial exactly one
//! address → relay. A plain-HTTP request is only forwarded when the policy allows the host
//! on that port (80 unless the URI names another; an allowlist entry without a port allows
//! 443 only, and strict mode refuses port 80). Its head is rewritten before it goes
//! upstream: origin-form request target, hop-by-hop headers removed, a `Host` header equal
//! to the URI's authority (a client `Host` naming anything else is refused), and
//! `Connection: close`, so one request is served per connection.
//!
//! [`Policy::decide`]: crate::allow::Policy::decide

use std::io;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::timeout;

use crate::relay::relay;
use crate::server::{
    close_after_refusal, decide_and_dial, sanitize, EventDecision, Record, Refusal, Shared,
    HANDSHAKE_TIMEOUT, HTTP_HEAD_LIMIT, REJECT_TIMEOUT,
};
use crate::target::{parse_connect_request_line, Target, TargetError};

const ESTABLISHED: &[u8] = b"HTTP/1.1 200 Connection established\r\n\r\n";

/// Port of an `http://` URI without one.
const HTTP_DEFAULT_PORT: u16 = 80;

/// Request headers never forwarded upstream (hop-by-hop, or proxy-only). `Host` is not
/// here: it is replaced by the canonical one.
const HOP_BY_HOP: &[&str] = &[
    "connection",
    "proxy-connection",
    "proxy-authorization",
    "keep-alive",
    "te",
    "trailer",
    "upgrade",
];

/// Headers a `Connection` option may not name: removing them would change where the
/// request goes or where it ends.
const NOT_NAMEABLE_IN_CONNECTION: &[&str] = &["host", "content-length", "transfer-encoding"];

/// A request head read from the client.
#[derive(Debug)]
pub(crate) struct Head {
    /// The first line, without its line ending.
    pub(crate) request_line: Vec<u8>,
    /// The header lines after the first line, up to and including the empty line that
    /// ends the head.
    pub(crate) headers: Vec<u8>,
    /// Bytes received after the blank line that ends the head.
    pub(crate) leftover: Vec<u8>,
}

#[derive(Debug)]
pub(crate) enum HeadError {
    /// EOF before a complete head.
    Closed,
    /// No blank line within [`HTTP_HEAD_LIMIT`] bytes.
    TooLarge,
    Io(io::Error),
}

/// Where the parts of a head end.
#[derive(Debug, PartialEq, Eq)]
struct HeadBounds {
    /// End of the first line (exclusive, without its line ending).
    line_end: usize,
    /// Start of the second line.
    headers_start: usize,
    /// End of the head (just after the empty line).
    head_end: usize,
}

/// Find the end of the head: the first empty line (`\r\n` or bare `\n`).
fn find_head_end(buf: &[u8]) -> Option<HeadBounds> {
    let mut first_line = None;
    let mut line_start = 0;
    for (i, &b) in buf.iter().enumerate() {
        if b != b'\n' {
            continue;
        }
        let line = &buf[line_start..i];
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        match first_line {
            None => first_line = Some((line_start + line.len(), i + 1)),
            Some((line_end, headers_start)) if line.is_empty() => {
                return Some(HeadBounds {
                    line_end,
                    headers_start,
                    head_end: i + 1,
                })
            }
            Some(_) => {}
        }
        line_start = i + 1;
    }
    None
}

/// Read the request head: at most [`HTTP_HEAD_LIMIT`] bytes are ever buffered.
pub(crate) async fn read_head(stream: &mut TcpStream) -> Result<Head, HeadError> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 2048];
    loop {
        if let Some(b) = find_head_end(&buf) {
            let leftover = buf.split_off(b.head_end);
            let headers = buf.split_off(b.headers_start);
            buf.truncate(b.line_end);
            return Ok(Head {
                request_line: buf,
                headers,
                leftover,
            });
        }
        let room = HTTP_HEAD_LIMIT - buf.len();
        if room == 0 {
            return Err(HeadError::TooLarge);
        }
        let want = room.min(chunk.len());
        let n = stream
            .read(&mut chunk[..want])
            .await
            .map_err(HeadError::Io)?;
        if n == 0 {
            return Err(HeadError::Closed);
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

fn reason_phrase(status: u16) -> &'static str {
    match status {
        400 => "Bad Request",
        403 => "Forbidden",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        _ => "Error",
    }
}

/// The full refusal response.
fn refusal_response(r: &Refusal) -> Vec<u8> {
    let body = format!("vetto: {}\n", r.detail);
    let allow = if r.status == 405 {
        "Allow: CONNECT\r\n"
    } else {
        ""
    };
    format!(
        "HTTP/1.1 {} {}\r\nX-Vetto-Deny: {}\r\n{allow}Content-Type: text/plain\r\n\
         Connection: close\r\nContent-Length: {}\r\n\r\n{body}",
        r.status,
        reason_phrase(r.status),
        r.header,
        body.len()
    )
    .into_bytes()
}

async fn send_refusal(mut stream: TcpStream, rec: &mut Record, r: &Refusal) {
    rec.refuse(r);
    let _ = timeout(HANDSHAKE_TIMEOUT, stream.write_all(&refusal_response(r))).await;
    close_after_refusal(stream).await;
}

fn protocol_refusal(code: &'static str, status: u16, detail: String) -> Refusal {
    Refusal::new(EventDecision::Deny, code, status, 0, detail)
}

pub(crate) async fn handle(shared: &Shared, mut stream: TcpStream, rec: &mut Record) {
    let head = match timeout(HANDSHAKE_TIMEOUT, read_head(&mut stream)).await {
        Ok(Ok(head)) => head,
        Ok(Err(HeadError::Closed)) => {
            return rec.deny(
                "client-closed",
                "client closed before a complete request head",
            )
        }
        Ok(Err(HeadError::Io(e))) => {
            return rec.deny("client-error", format!("reading the request head: {e}"))
        }
        Ok(Err(HeadError::TooLarge)) => {
            let r = protocol_refusal(
                "head-too-large",
                431,
                format!("the request head exceeds {HTTP_HEAD_LIMIT} bytes"),
            );
            return send_refusal(stream, rec, &r).await;
        }
        Err(_) => {
            let r = protocol_refusal(
                "request-timeout",
                408,
                format!(
                    "no complete request head within {}s",
                    HANDSHAKE_TIMEOUT.as_secs()
                ),
            );
            return send_refusal(stream, rec, &r).await;
        }
    };
    let Ok(line) = std::str::from_utf8(&head.request_line) else {
        let r = protocol_refusal(
            "invalid-request",
            400,
            "the request line is not valid UTF-8".into(),
        );
        return send_refusal(stream, rec, &r).await;
    };
    let method = line.split(' ').next().unwrap_or_default();
    if method == "CONNECT" {
        tunnel(shared, stream, rec, line, &head.leftover).await;
    } else {
        forward(shared, stream, rec, line, &head).await;
    }
}

/// `CONNECT host:port`: answer `200` once the one address is dialled, then relay.
async fn tunnel(
    shared: &Shared,
    mut stream: TcpStream,
    rec: &mut Record,
    line: &str,
    leftover: &[u8],
) {
    let authority = line.split(' ').nth(1).unwrap_or_default();
    let target = match parse_connect_request_line(line) {
        Ok(t) => t,
        Err(e @ TargetError::BadRequestLine(_)) => {
            rec.target = Some(sanitize(authority));
            let r = protocol_refusal("invalid-request", 400, e.to_string());
            return send_refusal(stream, rec, &r).await;
        }
        Err(e) => {
            rec.target = Some(sanitize(authority));
            return send_refusal(stream, rec, &Refusal::invalid_destination(&e)).await;
        }
    };
    rec.target = Some(target.to_string());
    let upstream = match decide_and_dial(shared, &target, rec).await {
        Ok(upstream) => upstream,
        Err(r) => return send_refusal(stream, rec, &r).await,
    };
    if let Err(e) = stream.write_all(ESTABLISHED).await {
        return rec.deny("client-error", format!("writing the 200 response: {e}"));
    }
    let stats = relay(stream, upstream, leftover, shared.idle).await;
    rec.relayed(stats);
}

/// A plain-HTTP request in absolute form: parse the request line and the headers
/// completely, then decide and dial, then send the rewritten head, the body bytes already
/// read, and relay both ways until either side closes.
async fn forward(shared: &Shared, stream: TcpStream, rec: &mut Record, line: &str, head: &Head) {
    let request_target = line.split(' ').nth(1).unwrap_or_default();
    let req = match AbsoluteRequest::parse(line) {
        Ok(req) => req,
        Err(e) => {
            if !request_target.is_empty() {
                rec.target = Some(sanitize(request_target));
            }
            return send_refusal(stream, rec, &e.refusal()).await;
        }
    };
    rec.target = Some(req.target.to_string());
    let mut upstream_bytes = match req.upstream_head(&head.headers) {
        Ok(h) => h,
        Err(e) => return send_refusal(stream, rec, &e.refusal()).await,
    };
    let upstream = match decide_and_dial(shared, &req.target, rec).await {
        Ok(upstream) => upstream,
        Err(r) => return send_refusal(stream, rec, &r).await,
    };
    upstream_bytes.extend_from_slice(&head.leftover);
    let stats = relay(stream, upstream, &upstream_bytes, shared.idle).await;
    rec.relayed(stats);
}

/// Why a plain-HTTP request is not forwarded (before any policy decision).
#[derive(Debug, PartialEq, Eq)]
enum ForwardError {
    /// Not a proxy request at all (origin-form `GET /path`, `OPTIONS *`): `405`.
    NotAbsolute { method: String },
    /// An absolute URI with a scheme other than `http`: `400`.
    UnsupportedScheme(String),
    /// A malformed request line or header: `400`.
    Invalid(String),
    /// The URI's authority is not a valid destination: `403`, as for `CONNECT`.
    Destination(TargetError),
    /// A `Host` header that does not designate the URI's authority: `400`.
    HostMismatch(String),
}

impl ForwardError {
    fn invalid(detail: impl Into<String>) -> Self {
        ForwardError::Invalid(detail.into())
    }

    fn refusal(&self) -> Refusal {
        match self {
            ForwardError::NotAbsolute { method } => protocol_refusal(
                "method-not-allowed",
                405,
                format!(
                    "the vetto proxy relays CONNECT tunnels and absolute-form plain-HTTP \
                     requests ('{} http://host[:port]/path'); an origin-form request is not \
                     a proxy request",
                    sanitize(method)
                ),
            ),
            ForwardError::UnsupportedScheme(scheme) => protocol_refusal(
                "unsupported-scheme",
                400,
                format!(
                    "scheme \"{}\" is not forwarded: only http:// URIs are (use CONNECT for \
                     https)",
                    sanitize(scheme)
                ),
            ),
            ForwardError::Invalid(detail) => {
                protocol_refusal("invalid-request", 400, detail.clone())
            }
            ForwardError::Destination(e) => Refusal::invalid_destination(e),
            ForwardError::HostMismatch(detail) => {
                protocol_refusal("host-mismatch", 400, detail.clone())
            }
        }
    }
}

/// `tchar` (RFC 9110 §5.6.2): the characters of a method or a header field name.
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

fn is_token(s: &[u8]) -> bool {
    !s.is_empty() && s.iter().all(|&b| is_tchar(b))
}

/// A URI scheme (RFC 3986 §3.1).
fn is_scheme(s: &str) -> bool {
    let mut bytes = s.bytes();
    bytes.next().is_some_and(|b| b.is_ascii_alphabetic())
        && bytes.all(|b| b.is_ascii_alphanumeric() || b"+-.".contains(&b))
}

fn trim_ows(mut s: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = s {
        s = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = s {
        s = rest;
    }
    s
}

/// The `Host` value for `target` as sent upstream: the normalised authority, without the
/// port when it is 80.
fn host_header(target: &Target) -> String {
    let host = match target {
        Target::Name { name, .. } => name.to_string(),
        Target::Ip {
            addr: std::net::IpAddr::V4(a),
            ..
        } => a.to_string(),
        Target::Ip {
            addr: std::net::IpAddr::V6(a),
            ..
        } => format!("[{a}]"),
    };
    match target.port() {
        HTTP_DEFAULT_PORT => host,
        port => format!("{host}:{port}"),
    }
}

/// One header line of the client's head.
struct Field<'a> {
    name: &'a str,
    /// Lowercased name.
    key: String,
    /// The value without surrounding whitespace.
    value: &'a [u8],
}

/// Split and check the header block: no obsolete line folding, no bare CR, token names
/// directly followed by `:`, and values of visible characters, spaces and tabs only.
fn parse_fields(block: &[u8]) -> Result<Vec<Field<'_>>, ForwardError> {
    let mut fields = Vec::new();
    for line in block.split(|&b| b == b'\n') {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.is_empty() {
            break;
        }
        if matches!(line[0], b' ' | b'\t') {
            return Err(ForwardError::invalid(
                "obsolete header line folding is not accepted",
            ));
        }
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            return Err(ForwardError::invalid("a header line has no ':'"));
        };
        let (name, value) = (&line[..colon], trim_ows(&line[colon + 1..]));
        if !is_token(name) {
            return Err(ForwardError::invalid(format!(
                "invalid header field name {:?}",
                String::from_utf8_lossy(name)
            )));
        }
        // Token characters are ASCII.
        let name = std::str::from_utf8(name).unwrap_or_default();
        if let Some(&b) = value
            .iter()
            .find(|&&b| !(b == b'\t' || b == b' ' || b.is_ascii_graphic() || b >= 0x80))
        {
            return Err(ForwardError::invalid(format!(
                "control character {:?} in header field {name}",
                char::from(b)
            )));
        }
        fields.push(Field {
            name,
            key: name.to_ascii_lowercase(),
            value,
        });
    }
    Ok(fields)
}

/// The comma-separated list elements of every `key` field, trimmed, empty ones dropped.
fn list_values<'a>(fields: &'a [Field<'_>], key: &'a str) -> impl Iterator<Item = &'a [u8]> {
    fields
        .iter()
        .filter(move |f| f.key == key)
        .flat_map(|f| f.value.split(|&b| b == b','))
        .map(trim_ows)
        .filter(|v| !v.is_empty())
}

/// A parsed absolute-form request line.
#[derive(Debug, PartialEq, Eq)]
struct AbsoluteRequest<'a> {
    method: &'a str,
    /// The URI's authority (port 80 when it names none).
    target: Target,
    /// The origin-form request target: the path (at least `/`) and the query.
    origin: String,
    version: &'a str,
}

impl<'a> AbsoluteRequest<'a> {
    /// Parse `<method> http://host[:port][/path][?query] HTTP/1.x`: single spaces, a token
    /// method, no userinfo, no fragment, printable ASCII path and query.
    fn parse(line: &'a str) -> Result<Self, ForwardError> {
        let mut parts = line.split(' ');
        let (Some(method), Some(uri), Some(version), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(ForwardError::invalid(
                "malformed request line: expected exactly '<METHOD> http://host[:port]/path \
                 HTTP/1.1'",
            ));
        };
        if !is_token(method.as_bytes()) {
            return Err(ForwardError::invalid(
                "malformed request line: the method is not an HTTP token",
            ));
        }
        if version != "HTTP/1.1" && version != "HTTP/1.0" {
            return Err(ForwardError::invalid(
                "malformed request line: version is not HTTP/1.0 or HTTP/1.1",
            ));
        }
        if uri.starts_with('/') || uri == "*" {
            return Err(ForwardError::NotAbsolute {
                method: method.to_owned(),
            });
        }
        let Some((scheme, rest)) = uri.split_once(':').filter(|(s, _)| is_scheme(s)) else {
            return Err(ForwardError::invalid(
                "the request target is not an absolute URI ('http://host[:port]/path')",
            ));
        };
        if !scheme.eq_ignore_ascii_case("http") {
            return Err(ForwardError::UnsupportedScheme(scheme.to_owned()));
        }
        let Some(rest) = rest.strip_prefix("//") else {
            return Err(ForwardError::invalid(
                "an http URI must be 'http://host[:port]/path'",
            ));
        };
        let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
        let (authority, path) = rest.split_at(end);
        if authority.contains('@') {
            return Err(ForwardError::invalid(
                "userinfo ('user@host') is not allowed in the request URI",
            ));
        }
        if path.contains('#') {
            return Err(ForwardError::invalid(
                "a fragment ('#') is not allowed in a request target",
            ));
        }
        if let Some(ch) = path.chars().find(|c| !c.is_ascii_graphic()) {
            return Err(ForwardError::invalid(format!(
                "character {ch:?} is not allowed in the request path or query (percent-encode \
                 it)"
            )));
        }
        let target = Target::parse_host_port(authority, Some(HTTP_DEFAULT_PORT))
            .map_err(ForwardError::Destination)?;
        let origin = match path.as_bytes().first() {
            None => "/".to_owned(),
            Some(b'?') => format!("/{path}"),
            Some(_) => path.to_owned(),
        };
        Ok(AbsoluteRequest {
            method,
            target,
            origin,
            version,
        })
    }

    /// The head to send upstream: origin-form request line, one `Host` equal to the URI's
    /// authority, the client's end-to-end headers in order, and `Connection: close`.
    fn upstream_head(&self, header_block: &[u8]) -> Result<Vec<u8>, ForwardError> {
        let fields = parse_fields(header_block)?;
        let canonical_host = host_header(&self.target);

        let hosts: Vec<&Field<'_>> = fields.iter().filter(|f| f.key == "host").collect();
        if hosts.len() > 1 {
            return Err(ForwardError::HostMismatch(
                "more than one Host header".into(),
            ));
        }
        if let Some(host) = hosts.first() {
            let value = String::from_utf8_lossy(host.value);
            let same = Target::parse_host_port(&value, Some(HTTP_DEFAULT_PORT))
                .is_ok_and(|t| t == self.target);
            if !same {
                return Err(ForwardError::HostMismatch(format!(
                    "Host header \"{}\" does not match the request URI authority {}",
                    sanitize(&value),
                    canonical_host
                )));
            }
        }

        let mut drop_keys: Vec<String> = Vec::new();
        for option in list_values(&fields, "connection") {
            if !is_token(option) {
                return Err(ForwardError::invalid(
                    "the Connection header is not a list of tokens",
                ));
            }
            let key = String::from_utf8_lossy(option).to_ascii_lowercase();
            if NOT_NAMEABLE_IN_CONNECTION.contains(&key.as_str()) {
                return Err(ForwardError::invalid(format!(
                    "the Connection header names {key}, which must reach the origin server"
                )));
            }
            drop_keys.push(key);
        }

        let lengths: Vec<&[u8]> = list_values(&fields, "content-length").collect();
        let has_length = fields.iter().any(|f| f.key == "content-length");
        if has_length
            && (lengths.is_empty()
                || !lengths
                    .iter()
                    .all(|l| l.iter().all(u8::is_ascii_digit) && *l == lengths[0]))
        {
            return Err(ForwardError::invalid(
                "invalid or conflicting Content-Length headers",
            ));
        }
        if fields.iter().any(|f| f.key == "transfer-encoding") {
            if has_length {
                return Err(ForwardError::invalid(
                    "a request with both Transfer-Encoding and Content-Length is refused",
                ));
            }
            if self.version == "HTTP/1.0" {
                return Err(ForwardError::invalid(
                    "Transfer-Encoding in an HTTP/1.0 request is refused",
                ));
            }
            let codings: Vec<&[u8]> = list_values(&fields, "transfer-encoding").collect();
            if !matches!(codings[..], [c] if c.eq_ignore_ascii_case(b"chunked")) {
                return Err(ForwardError::invalid(
                    "only 'Transfer-Encoding: chunked' is accepted in a request",
                ));
            }
        }

        let mut out = format!(
            "{} {} {}\r\nHost: {canonical_host}\r\n",
            self.method, self.origin, self.version
        )
        .into_bytes();
        for f in &fields {
            if f.key == "host" || HOP_BY_HOP.contains(&f.key.as_str()) || drop_keys.contains(&f.key)
            {
                continue;
            }
            out.extend_from_slice(f.name.as_bytes());
            out.extend_from_slice(b": ");
            out.extend_from_slice(f.value);
            out.extend_from_slice(b"\r\n");
        }
        out.extend_from_slice(b"Connection: close\r\n\r\n");
        Ok(out)
    }
}

/// Over the connection limit: read the head briefly, answer `503`, close.
pub(crate) async fn reject(mut stream: TcpStream, rec: &mut Record, r: &Refusal) {
    if let Ok(Ok(head)) = timeout(REJECT_TIMEOUT, read_head(&mut stream)).await {
        if let Ok(line) = std::str::from_utf8(&head.request_line) {
            rec.target = line.split(' ').nth(1).map(sanitize);
        }
    }
    send_refusal(stream, rec, r).await;
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // Tests: a panic is the failure report.
mod tests {
    use super::*;

    fn bounds(line_end: usize, headers_start: usize, head_end: usize) -> Option<HeadBounds> {
        Some(HeadBounds {
            line_end,
            headers_start,
            head_end,
        })
    }

    #[test]
    fn head_end() {
        assert_eq!(
            find_head_end(b"CONNECT a:1 HTTP/1.1\r\n\r\n"),
            bounds(20, 22, 24)
        );
        assert_eq!(
            find_head_end(b"CONNECT a:1 HTTP/1.1\r\nHost: a\r\n\r\nxyz"),
            bounds(20, 22, 33)
        );
        assert_eq!(
            find_head_end(b"CONNECT a:1 HTTP/1.1\n\nx"),
            bounds(20, 21, 22)
        );
        assert_eq!(find_head_end(b"CONNECT a:1 HTTP/1.1\r\nHost: a\r\n"), None);
        assert_eq!(find_head_end(b"CONNECT a:1 HTTP/1.1"), None);
    }

    fn parse(line: &str) -> Result<AbsoluteRequest<'_>, ForwardError> {
        AbsoluteRequest::parse(line)
    }

    fn target(s: &str) -> Target {
        Target::parse_connect_authority(s).unwrap()
    }

    #[test]
    fn absolute_request_lines() {
        let r = parse("GET http://Name.Test:8080/x?y=1 HTTP/1.1").unwrap();
        assert_eq!(r.method, "GET");
        assert_eq!(r.target, target("name.test:8080"));
        assert_eq!(r.origin, "/x?y=1");
        assert_eq!(r.version, "HTTP/1.1");
        let r = parse("HEAD HTTP://name.test HTTP/1.0").unwrap();
        assert_eq!(r.target, target("name.test:80"));
        assert_eq!(r.origin, "/");
        assert_eq!(
            parse("GET http://name.test?q HTTP/1.1").unwrap().origin,
            "/?q"
        );
        // The authority ends at the first '/' or '?': an '@' after it is path.
        assert_eq!(
            parse("PROPFIND http://name.test/a@b HTTP/1.1")
                .unwrap()
                .origin,
            "/a@b"
        );
        assert_eq!(
            parse("GET http://[::1]:8080/ HTTP/1.1").unwrap().target,
            target("[::1]:8080")
        );

        let invalid = |line: &str| match parse(line) {
            Err(ForwardError::Invalid(_)) => {}
            other => panic!("{line:?}: {other:?}"),
        };
        for line in [
            "GET http://a@name.test/ HTTP/1.1",
            "GET http://u:p@name.test:80/ HTTP/1.1",
            "GET http://name.test\\@evil.test/ HTTP/1.1",
            "GET http://name.test/#frag HTTP/1.1",
            "GET http://name.test#@evil.test/ HTTP/1.1",
            "GET http://name.test/\u{e9} HTTP/1.1",
            "GET http://name.test/\t HTTP/1.1",
            "GET  http://name.test/ HTTP/1.1",
            "GET http://name.test/ HTTP/1.1 x",
            "GET http://name.test/",
            "GET http://name.test/ HTTP/2",
            "G(T http://name.test/ HTTP/1.1",
            "GET http:name.test/ HTTP/1.1",
            "GET name.test HTTP/1.1",
            "",
        ] {
            invalid(line);
        }
        for (line, scheme) in [
            ("GET https://name.test/ HTTP/1.1", "https"),
            ("GET ftp://name.test/ HTTP/1.1", "ftp"),
            ("GET name.test:80 HTTP/1.1", "name.test"),
        ] {
            assert_eq!(
                parse(line),
                Err(ForwardError::UnsupportedScheme(scheme.into())),
                "{line:?}"
            );
        }
        for line in ["GET / HTTP/1.1", "OPTIONS * HTTP/1.1"] {
            assert!(
                matches!(parse(line), Err(ForwardError::NotAbsolute { .. })),
                "{line:?}"
            );
        }
        assert_eq!(
            parse("GET http://name.test:0/ HTTP/1.1"),
            Err(ForwardError::Destination(TargetError::PortZero))
        );
        assert_eq!(
            parse("GET http://name.test%2e/ HTTP/1.1"),
            Err(ForwardError::Destination(TargetError::PercentEncoding))
        );
        assert_eq!(
            parse("GET http:///x HTTP/1.1"),
            Err(ForwardError::Destination(TargetError::Empty))
        );
    }

    fn rewrite(line: &str, headers: &str) -> Result<String, ForwardError> {
        let head = parse(line)?.upstream_head(headers.as_bytes())?;
        Ok(String::from_utf8(head).unwrap())
    }

    #[test]
    fn upstream_head_rewriting() {
        let got = rewrite(
            "POST http://name.test:8080/p?q=1 HTTP/1.1",
            "Host: NAME.test.:8080\r\nProxy-Connection: keep-alive\r\n\
             Proxy-Authorization: Basic eA==\r\nConnection: keep-alive, X-Hop\r\n\
             X-Hop: 1\r\nKeep-Alive: 300\r\nTE: trailers\r\nTrailer: X-T\r\n\
             Upgrade: websocket\r\nUser-Agent:  t/1 \r\nContent-Length: 3\r\n\r\n",
        )
        .unwrap();
        assert_eq!(
            got,
            "POST /p?q=1 HTTP/1.1\r\nHost: name.test:8080\r\nUser-Agent: t/1\r\n\
             Content-Length: 3\r\nConnection: close\r\n\r\n"
        );
        // No Host: the URI's authority is added (without the default port).
        assert_eq!(
            rewrite("GET http://name.test:80 HTTP/1.0", "\n").unwrap(),
            "GET / HTTP/1.0\r\nHost: name.test\r\nConnection: close\r\n\r\n"
        );
        assert_eq!(
            rewrite(
                "GET http://[::1]:8080/ HTTP/1.1",
                "host: [0:0::1]:8080\nAccept: */*\n\n"
            )
            .unwrap(),
            "GET / HTTP/1.1\r\nHost: [::1]:8080\r\nAccept: */*\r\nConnection: close\r\n\r\n"
        );
        // Host with or without the default port designates the same authority.
        assert!(rewrite(
            "GET http://name.test/ HTTP/1.1",
            "Host: name.test:80\r\n\r\n"
        )
        .is_ok());
        assert!(rewrite(
            "GET http://name.test/ HTTP/1.1",
            "Transfer-Encoding: Chunked\r\n\r\n"
        )
        .is_ok());

        for host in [
            "Host: other.test\r\n",
            "Host: name.test:8080\r\n",
            "Host: a@name.test\r\n",
            "Host: \r\n",
            "Host: name.test\r\nHost: name.test\r\n",
        ] {
            let headers = format!("{host}\r\n");
            assert!(
                matches!(
                    rewrite("GET http://name.test/ HTTP/1.1", &headers),
                    Err(ForwardError::HostMismatch(_))
                ),
                "{host:?}"
            );
        }
        for headers in [
            "X-A: 1\r\n folded\r\n\r\n",
            "X-A : 1\r\n\r\n",
            "X-A\r\n\r\n",
            "X-A: a\rb\r\n\r\n",
            "X-A: a\x00b\r\n\r\n",
            "Connection: Host\r\n\r\n",
            "Connection: content-length\r\nContent-Length: 1\r\n\r\n",
            "Connection: a b\r\n\r\n",
            "Content-Length: 1\r\nContent-Length: 2\r\n\r\n",
            "Content-Length: -1\r\n\r\n",
            "Content-Length:\r\n\r\n",
            "Content-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
            "Transfer-Encoding: gzip, chunked\r\n\r\n",
            "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
        ] {
            assert!(
                matches!(
                    rewrite("GET http://name.test/ HTTP/1.1", headers),
                    Err(ForwardError::Invalid(_))
                ),
                "{headers:?}"
            );
        }
        assert!(matches!(
            rewrite(
                "POST http://name.test/ HTTP/1.0",
                "Transfer-Encoding: chunked\r\n\r\n"
            ),
            Err(ForwardError::Invalid(_))
        ));
    }

    #[test]
    fn refusal_rendering() {
        let r = Refusal::new(
            EventDecision::Deny,
            "not-allowlisted",
            403,
            2,
            "evil.example:443 refused: evil.example is not in the allowlist".into(),
        );
        let text = String::from_utf8(refusal_response(&r)).unwrap();
        let body = "vetto: evil.example:443 refused: evil.example is not in the allowlist\n";
        assert_eq!(
            text,
            format!(
                "HTTP/1.1 403 Forbidden\r\nX-Vetto-Deny: not-allowlisted\r\n\
                 Content-Type: text/plain\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            )
        );
    }
}
