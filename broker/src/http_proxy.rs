//! The HTTP proxy listener: `CONNECT host:port` tunnels, and plain-HTTP forwarding of
//! absolute-form requests (`GET http://host[:port]/path HTTP/1.1`, any method).
//!
//! Both paths follow the same order: strict parse of the destination → [`plan_connection`]
//! (via [`decide_and_dial`]: [`Policy::decide`] → rate limit → resolve once → whole
//! answer-set check) → dial exactly that one address → relay. A plain-HTTP request is only forwarded when the policy allows the host
//! on that port (80 unless the URI names another; an allowlist entry without a port allows
//! 443 only, and strict mode refuses port 80). Its head is rewritten before it goes
//! upstream: origin-form request target, hop-by-hop headers removed, a `Host` header equal
//! to the URI's authority (a client `Host` naming anything else is refused), and
//! `Connection: close`.
//!
//! Exactly one request is forwarded per client connection: its head and its body, framed by
//! `Content-Length` or `Transfer-Encoding: chunked` (re-encoded as parsed: extensions and
//! trailers dropped), and nothing else. A request with both framings, several conflicting
//! lengths or any other transfer coding is refused before anything is dialled. Bytes the
//! client sends after that body (a pipelined second request, naming any `Host`) are never
//! read into the upstream connection; the response is relayed until the upstream closes,
//! then the client connection is closed.
//!
//! [`Policy::decide`]: crate::allow::Policy::decide
//! [`plan_connection`]: crate::plan::plan_connection

use std::convert::Infallible;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::{timeout, Instant};

use crate::relay::{relay, Moved, RelayEnd};
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

/// Request headers the proxy writes itself, in canonical form (`Host` from the URI, the
/// body's framing from what was parsed), instead of copying the client's.
const FRAMING_AND_HOST: &[&str] = &["host", "content-length", "transfer-encoding"];

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
/// Generic over the stream only so that [`crate::fuzzing`] can drive it in memory.
pub(crate) async fn read_head<S: AsyncRead + Unpin>(stream: &mut S) -> Result<Head, HeadError> {
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
    let stats = relay(stream, upstream, leftover, shared.idle, &rec.moved).await;
    rec.relayed(stats);
}

/// A plain-HTTP request in absolute form: parse the request line and the headers
/// completely, then decide and dial, then send the rewritten head and exactly the one body
/// ([`exchange`]), relay the response, and close.
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
    let request = match req.upstream_head(&head.headers) {
        Ok(r) => r,
        Err(e) => return send_refusal(stream, rec, &e.refusal()).await,
    };
    let upstream = match decide_and_dial(shared, &req.target, rec).await {
        Ok(upstream) => upstream,
        Err(r) => return send_refusal(stream, rec, &r).await,
    };
    let mut client = stream;
    let stats = exchange(
        &mut client,
        upstream,
        &request,
        &head.leftover,
        shared.idle,
        &rec.moved,
    )
    .await;
    let closed = matches!(stats, RelayEnd::Closed);
    rec.relayed(stats);
    if closed {
        // The response went out whole: FIN, then discard what the client still sends for
        // a moment, so unread pipelined bytes do not turn the close into a reset that
        // could destroy the response on the client's side.
        close_after_refusal(client).await;
    }
}

/// How the one forwarded request's body is delimited (RFC 9112 §6.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BodyFraming {
    /// Neither `Content-Length` nor `Transfer-Encoding`: a request without a body.
    None,
    /// `Content-Length: n`.
    Length(u64),
    /// `Transfer-Encoding: chunked`.
    Chunked,
}

/// The request as it goes upstream: the rewritten head and how its body ends.
#[derive(Debug)]
struct UpstreamRequest {
    head: Vec<u8>,
    body: BodyFraming,
}

/// Largest read from the client while forwarding a body.
const BODY_BUF: usize = 16 * 1024;
/// First and largest buffer for the response (it grows while reads fill it).
const RESPONSE_BUF_START: usize = 4 * 1024;
const RESPONSE_BUF_MAX: usize = 64 * 1024;

/// Byte counters and the last activity of an [`exchange`].
struct Progress<'a> {
    start: Instant,
    last_ms: AtomicU64,
    moved: &'a Moved,
}

impl Progress<'_> {
    fn touch(&self) {
        let ms = u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_ms.store(ms, Ordering::Relaxed);
    }

    fn deadline(&self, idle: Duration) -> Instant {
        self.start + Duration::from_millis(self.last_ms.load(Ordering::Relaxed)) + idle
    }
}

/// Why sending the request upstream stopped early.
enum SendError {
    /// The client: closed or failed before the body was complete, or sent a malformed
    /// chunked body. The request is incomplete: the exchange ends.
    Client(io::Error),
    /// Writing upstream failed (it closed, maybe after answering early): the response
    /// side decides how the exchange ends.
    Upstream,
}

/// Send `request` upstream (its head, then exactly its body: from `leftover` first, then
/// from the client, never reading past the body's end for a `Content-Length` body, and
/// discarding whatever follows the last chunk of a chunked one), while the response is
/// relayed to the client; ends when the upstream closes, on an error, or after `idle`
/// without a byte moving. Nothing the client sends after the body reaches the upstream.
async fn exchange(
    client: &mut TcpStream,
    mut upstream: TcpStream,
    request: &UpstreamRequest,
    leftover: &[u8],
    idle: Duration,
    moved: &Moved,
) -> RelayEnd {
    let p = Progress {
        start: Instant::now(),
        last_ms: AtomicU64::new(0),
        moved,
    };
    let (mut cr, mut cw) = client.split();
    let (mut ur, mut uw) = upstream.split();
    {
        let p = &p;
        let send = async {
            match send_request(&mut cr, &mut uw, request, leftover, p).await {
                Err(SendError::Client(e)) => e,
                // Done (or the upstream stopped reading): wait for the response side.
                Ok(()) | Err(SendError::Upstream) => {
                    match std::future::pending::<Infallible>().await {}
                }
            }
        };
        let respond = async {
            let mut buf = vec![0u8; RESPONSE_BUF_START];
            loop {
                let n = ur.read(&mut buf).await?;
                if n == 0 {
                    cw.shutdown().await?;
                    return Ok::<(), io::Error>(());
                }
                p.touch();
                write_counted(&mut cw, &buf[..n], &p.moved.down).await?;
                p.touch();
                if n == buf.len() && buf.len() < RESPONSE_BUF_MAX {
                    buf.resize((buf.len() * 4).min(RESPONSE_BUF_MAX), 0);
                }
            }
        };
        let watchdog = async {
            loop {
                let deadline = p.deadline(idle);
                if Instant::now() >= deadline {
                    return;
                }
                tokio::time::sleep_until(deadline).await;
            }
        };
        tokio::select! {
            e = send => RelayEnd::Error(e),
            r = respond => match r {
                Ok(()) => RelayEnd::Closed,
                Err(e) => RelayEnd::Error(e),
            },
            () = watchdog => RelayEnd::IdleTimeout,
        }
    }
}

/// Write `data` upstream and count it.
async fn send_up<W: AsyncWriteExt + Unpin>(
    w: &mut W,
    data: &[u8],
    p: &Progress<'_>,
) -> Result<(), SendError> {
    if data.is_empty() {
        return Ok(());
    }
    write_counted(w, data, &p.moved.up)
        .await
        .map_err(|_| SendError::Upstream)?;
    p.touch();
    Ok(())
}

/// Write all of `data`, counting each part into `count` as it is taken (an exchange cut
/// half-way still accounts for what went out).
async fn write_counted<W: AsyncWriteExt + Unpin>(
    w: &mut W,
    mut data: &[u8],
    count: &AtomicU64,
) -> io::Result<()> {
    while !data.is_empty() {
        let n = w.write(data).await?;
        if n == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        count.fetch_add(n as u64, Ordering::Relaxed);
        data = data.get(n..).unwrap_or_default();
    }
    Ok(())
}

/// Read the next piece of the body from the client (at most `max` bytes).
async fn read_body<R: AsyncReadExt + Unpin>(
    r: &mut R,
    buf: &mut [u8],
    max: usize,
    p: &Progress<'_>,
) -> Result<usize, SendError> {
    let want = buf.len().min(max);
    let n = r.read(&mut buf[..want]).await.map_err(SendError::Client)?;
    if n == 0 {
        return Err(SendError::Client(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "the client closed before the request body was complete",
        )));
    }
    p.touch();
    Ok(n)
}

/// The head, then exactly the body. Returns when the body is complete.
async fn send_request<R, W>(
    client: &mut R,
    upstream: &mut W,
    request: &UpstreamRequest,
    leftover: &[u8],
    p: &Progress<'_>,
) -> Result<(), SendError>
where
    R: AsyncReadExt + Unpin,
    W: AsyncWriteExt + Unpin,
{
    send_up(upstream, &request.head, p).await?;
    let mut buf = vec![0u8; BODY_BUF];
    match request.body {
        BodyFraming::None => Ok(()),
        BodyFraming::Length(len) => {
            let mut left = len;
            let take = usize::try_from(left).map_or(leftover.len(), |l| l.min(leftover.len()));
            send_up(upstream, &leftover[..take], p).await?;
            left -= take as u64;
            while left > 0 {
                let max = usize::try_from(left).unwrap_or(usize::MAX);
                let n = read_body(client, &mut buf, max, p).await?;
                send_up(upstream, &buf[..n], p).await?;
                left -= n as u64;
            }
            Ok(())
        }
        BodyFraming::Chunked => {
            let mut decoder = ChunkedBody::default();
            let mut out = Vec::new();
            let mut input: &[u8] = leftover;
            loop {
                decoder.feed(input, &mut out).map_err(|e| {
                    SendError::Client(io::Error::new(io::ErrorKind::InvalidData, e))
                })?;
                send_up(upstream, &out, p).await?;
                out.clear();
                if decoder.is_done() {
                    // Whatever followed the last chunk in `input` is dropped here.
                    return Ok(());
                }
                let n = read_body(client, &mut buf, BODY_BUF, p).await?;
                input = &buf[..n];
            }
        }
    }
}

/// Longest chunk-size line (with its extensions) accepted.
const CHUNK_LINE_LIMIT: usize = 4096;

/// Why a chunked request body is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum ChunkError {
    #[error("malformed chunked request body: a line does not end with CRLF")]
    LineEnding,
    #[error("malformed chunked request body: chunk size line {0:?}")]
    SizeLine(String),
    #[error("malformed chunked request body: a chunk-size line exceeds {CHUNK_LINE_LIMIT} bytes")]
    SizeLineTooLong,
    #[error("malformed chunked request body: chunk data is not followed by CRLF")]
    DataEnd,
    #[error(
        "malformed chunked request body: the trailer section exceeds {} bytes",
        HTTP_HEAD_LIMIT
    )]
    TrailerTooLarge,
}

/// Where a chunked body is.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum ChunkState {
    /// Reading a chunk-size line.
    #[default]
    Size,
    /// This many bytes of chunk data still to come.
    Data(u64),
    /// The CR after chunk data.
    DataCr,
    /// The LF after chunk data.
    DataLf,
    /// Reading trailer lines, after the last chunk.
    Trailer,
    /// The body is complete.
    Done,
}

/// An incremental, strict decoder of a chunked body (RFC 9112 §7.1) that writes the same
/// chunks back out in canonical form: `{size:x}\r\n`, the data, `\r\n`, and `0\r\n\r\n`
/// at the end. Extensions and trailer fields are dropped, so the upstream sees exactly the
/// framing that was parsed here. Input after the end is never consumed.
#[derive(Debug, Default)]
struct ChunkedBody {
    state: ChunkState,
    /// The line being read (size line or trailer line).
    line: Vec<u8>,
    /// Bytes of trailer section so far.
    trailer_len: usize,
}

impl ChunkedBody {
    fn is_done(&self) -> bool {
        self.state == ChunkState::Done
    }

    /// Consume `input` up to the end of the body, appending canonical chunks to `out`.
    fn feed(&mut self, mut input: &[u8], out: &mut Vec<u8>) -> Result<(), ChunkError> {
        while !input.is_empty() {
            match self.state {
                ChunkState::Done => return Ok(()),
                ChunkState::Data(left) => {
                    let take = usize::try_from(left).map_or(input.len(), |l| l.min(input.len()));
                    out.extend_from_slice(&input[..take]);
                    input = &input[take..];
                    let left = left - take as u64;
                    self.state = match left {
                        0 => ChunkState::DataCr,
                        l => ChunkState::Data(l),
                    };
                }
                ChunkState::DataCr | ChunkState::DataLf => {
                    let want = if self.state == ChunkState::DataCr {
                        b'\r'
                    } else {
                        b'\n'
                    };
                    if input[0] != want {
                        return Err(ChunkError::DataEnd);
                    }
                    input = &input[1..];
                    self.state = if want == b'\r' {
                        ChunkState::DataLf
                    } else {
                        out.extend_from_slice(b"\r\n");
                        ChunkState::Size
                    };
                }
                ChunkState::Size | ChunkState::Trailer => {
                    let (part, complete) = match input.iter().position(|&b| b == b'\n') {
                        Some(i) => (&input[..=i], true),
                        None => (input, false),
                    };
                    input = &input[part.len()..];
                    self.line.extend_from_slice(part);
                    if self.state == ChunkState::Size {
                        if self.line.len() > CHUNK_LINE_LIMIT {
                            return Err(ChunkError::SizeLineTooLong);
                        }
                    } else {
                        self.trailer_len += part.len();
                        if self.trailer_len > HTTP_HEAD_LIMIT {
                            return Err(ChunkError::TrailerTooLarge);
                        }
                    }
                    if complete {
                        self.end_line(out)?;
                    }
                }
            }
        }
        Ok(())
    }

    /// A complete size or trailer line is in `self.line`.
    fn end_line(&mut self, out: &mut Vec<u8>) -> Result<(), ChunkError> {
        let Some(content) = self.line.strip_suffix(b"\r\n") else {
            return Err(ChunkError::LineEnding);
        };
        if self.state == ChunkState::Size {
            let size = parse_chunk_size(content)?;
            out.extend_from_slice(format!("{size:x}\r\n").as_bytes());
            self.state = match size {
                0 => ChunkState::Trailer,
                n => ChunkState::Data(n),
            };
        } else if content.is_empty() {
            out.extend_from_slice(b"\r\n");
            self.state = ChunkState::Done;
        }
        self.line.clear();
        Ok(())
    }
}

/// `chunk-size [ chunk-ext ]` (RFC 9112 §7.1.1): at most 16 hex digits (the size fits in
/// 64 bits), then nothing, or optional spaces and `;` followed by visible ASCII, spaces
/// and tabs (the extensions are not forwarded).
fn parse_chunk_size(line: &[u8]) -> Result<u64, ChunkError> {
    let bad = || ChunkError::SizeLine(sanitize(&String::from_utf8_lossy(line)));
    let digits = line.iter().take_while(|b| b.is_ascii_hexdigit()).count();
    if digits == 0 || digits > 16 {
        return Err(bad());
    }
    let rest = &line[digits..];
    let ext = match rest.iter().position(|&b| b != b' ' && b != b'\t') {
        None if rest.is_empty() => rest,
        Some(i) if rest[i] == b';' => &rest[i..],
        _ => return Err(bad()),
    };
    if !ext
        .iter()
        .all(|&b| b == b'\t' || b == b' ' || b.is_ascii_graphic())
    {
        return Err(bad());
    }
    let hex = std::str::from_utf8(&line[..digits]).map_err(|_| bad())?;
    u64::from_str_radix(hex, 16).map_err(|_| bad())
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
    /// authority, the client's end-to-end headers in order, the body's framing as one
    /// canonical `Content-Length` or `Transfer-Encoding: chunked` field, and
    /// `Connection: close`; with how the body ends.
    fn upstream_head(&self, header_block: &[u8]) -> Result<UpstreamRequest, ForwardError> {
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
        let mut body = BodyFraming::None;
        if has_length {
            let invalid = || ForwardError::invalid("invalid or conflicting Content-Length headers");
            let first = lengths.first().ok_or_else(invalid)?;
            if !lengths
                .iter()
                .all(|l| l.iter().all(u8::is_ascii_digit) && l == first)
            {
                return Err(invalid());
            }
            // ASCII digits only, so UTF-8; a value beyond 64 bits is refused.
            let len = std::str::from_utf8(first)
                .ok()
                .and_then(|l| l.parse::<u64>().ok())
                .ok_or_else(invalid)?;
            body = BodyFraming::Length(len);
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
            body = BodyFraming::Chunked;
        }

        let mut out = format!(
            "{} {} {}\r\nHost: {canonical_host}\r\n",
            self.method, self.origin, self.version
        )
        .into_bytes();
        for f in &fields {
            if FRAMING_AND_HOST.contains(&f.key.as_str())
                || HOP_BY_HOP.contains(&f.key.as_str())
                || drop_keys.contains(&f.key)
            {
                continue;
            }
            out.extend_from_slice(f.name.as_bytes());
            out.extend_from_slice(b": ");
            out.extend_from_slice(f.value);
            out.extend_from_slice(b"\r\n");
        }
        match body {
            BodyFraming::None => {}
            BodyFraming::Length(n) => {
                out.extend_from_slice(format!("Content-Length: {n}\r\n").as_bytes())
            }
            BodyFraming::Chunked => out.extend_from_slice(b"Transfer-Encoding: chunked\r\n"),
        }
        out.extend_from_slice(b"Connection: close\r\n\r\n");
        Ok(UpstreamRequest { head: out, body })
    }
}

/// What [`handle`] makes of a client's bytes, without a policy or a network, as if every
/// destination were allowed and dialled: the head ([`read_head`]), the request line
/// (`CONNECT`: [`parse_connect_request_line`]; any other method: [`AbsoluteRequest::parse`]
/// and [`AbsoluteRequest::upstream_head`]), and for a forwarded request what
/// [`send_request`] writes to `upstream` (the rewritten head, then exactly the body). A
/// refusal comes back as the response [`handle`] would send. For [`crate::fuzzing`] only.
pub(crate) async fn without_network<R, W>(
    client: &mut R,
    upstream: &mut W,
) -> Result<crate::fuzzing::HttpAccepted, Vec<u8>>
where
    R: AsyncRead + Unpin,
    W: AsyncWriteExt + Unpin,
{
    use crate::fuzzing::HttpAccepted;
    let head = match read_head(client).await {
        Ok(head) => head,
        Err(HeadError::TooLarge) => {
            let r = protocol_refusal("head-too-large", 431, "too large".into());
            return Err(refusal_response(&r));
        }
        Err(HeadError::Closed | HeadError::Io(_)) => return Err(vec![]),
    };
    let Ok(line) = std::str::from_utf8(&head.request_line) else {
        let r = protocol_refusal("invalid-request", 400, "not UTF-8".into());
        return Err(refusal_response(&r));
    };
    let method = line.split(' ').next().unwrap_or_default();
    if method == "CONNECT" {
        return match parse_connect_request_line(line) {
            Ok(target) => Ok(HttpAccepted::Connect {
                target,
                leftover: head.leftover.len(),
            }),
            Err(e @ TargetError::BadRequestLine(_)) => Err(refusal_response(&protocol_refusal(
                "invalid-request",
                400,
                e.to_string(),
            ))),
            Err(e) => Err(refusal_response(&Refusal::invalid_destination(&e))),
        };
    }
    let req = AbsoluteRequest::parse(line).map_err(|e| refusal_response(&e.refusal()))?;
    let request = req
        .upstream_head(&head.headers)
        .map_err(|e| refusal_response(&e.refusal()))?;
    let moved = Moved::default();
    let p = Progress {
        start: Instant::now(),
        last_ms: AtomicU64::new(0),
        moved: &moved,
    };
    let sent = send_request(client, upstream, &request, &head.leftover, &p).await;
    Ok(HttpAccepted::Forward {
        target: req.target,
        head: request.head.len(),
        content_length: match request.body {
            BodyFraming::Length(n) => Some(n),
            _ => None,
        },
        chunked: request.body == BodyFraming::Chunked,
        body_complete: sent.is_ok(),
    })
}

/// [`ChunkedBody`] over `input` in one piece: the canonical chunks it writes, whether the
/// body ended, and how it was refused. For [`crate::fuzzing`] only.
pub(crate) fn rechunk(input: &[u8]) -> (Vec<u8>, bool, Option<String>) {
    let mut decoder = ChunkedBody::default();
    let mut out = Vec::new();
    let err = decoder.feed(input, &mut out).err().map(|e| e.to_string());
    (out, decoder.is_done(), err)
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
        let head = parse(line)?.upstream_head(headers.as_bytes())?.head;
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

    fn framing(line: &str, headers: &str) -> Result<BodyFraming, ForwardError> {
        Ok(parse(line)?.upstream_head(headers.as_bytes())?.body)
    }

    #[test]
    fn body_framing_is_parsed_and_rewritten_canonically() {
        let post = "POST http://name.test/ HTTP/1.1";
        assert_eq!(framing(post, "\r\n"), Ok(BodyFraming::None));
        assert_eq!(
            framing(post, "Content-Length: 007\r\n\r\n"),
            Ok(BodyFraming::Length(7))
        );
        assert_eq!(
            framing(post, "Content-Length: 5, 5\r\nContent-Length: 5\r\n\r\n"),
            Ok(BodyFraming::Length(5))
        );
        assert_eq!(
            framing(post, "Content-Length: 18446744073709551615\r\n\r\n"),
            Ok(BodyFraming::Length(u64::MAX))
        );
        assert_eq!(
            framing(post, "Transfer-Encoding: CHUNKED\r\n\r\n"),
            Ok(BodyFraming::Chunked)
        );
        for headers in [
            "Content-Length: 18446744073709551616\r\n\r\n",
            "Content-Length: 5, 6\r\n\r\n",
            "Content-Length: 05, 5\r\n\r\n",
            "Content-Length: +5\r\n\r\n",
            "Content-Length: 0x5\r\n\r\n",
            "Transfer-Encoding: chunked\r\nContent-Length: 0\r\n\r\n",
        ] {
            assert!(
                matches!(framing(post, headers), Err(ForwardError::Invalid(_))),
                "{headers:?}"
            );
        }
        // One canonical framing field goes upstream, whatever the client's spelling.
        assert_eq!(
            rewrite(post, "content-length: 5, 5\r\nX-A: 1\r\n\r\n").unwrap(),
            "POST / HTTP/1.1\r\nHost: name.test\r\nX-A: 1\r\nContent-Length: 5\r\n\
             Connection: close\r\n\r\n"
        );
        assert_eq!(
            rewrite(post, "Transfer-Encoding:  Chunked \r\n\r\n").unwrap(),
            "POST / HTTP/1.1\r\nHost: name.test\r\nTransfer-Encoding: chunked\r\n\
             Connection: close\r\n\r\n"
        );
    }

    /// Feed `input` in pieces of `step` bytes; returns the output and how much of the
    /// input was needed to complete the body (`None`: not complete).
    fn decode(input: &[u8], step: usize) -> Result<(Vec<u8>, Option<usize>), ChunkError> {
        let mut d = ChunkedBody::default();
        let mut out = Vec::new();
        for (i, piece) in input.chunks(step).enumerate() {
            d.feed(piece, &mut out)?;
            if d.is_done() {
                return Ok((out, Some(((i + 1) * step).min(input.len()))));
            }
        }
        Ok((out, None))
    }

    #[test]
    fn chunked_bodies_are_reencoded_and_end_exactly() {
        let body = b"5;name=value\r\nhello\r\n00C \t; a\r\n hello world\r\n\
                     0\r\nX-Trailer: 1\r\nY: 2\r\n\r\nGET http://evil.test/ HTTP/1.1\r\n\r\n";
        let canonical = b"5\r\nhello\r\nc\r\n hello world\r\n0\r\n\r\n";
        let end = body.len() - b"GET http://evil.test/ HTTP/1.1\r\n\r\n".len();
        for step in [1, 2, 3, 7, body.len()] {
            let (out, done) = decode(body, step).unwrap();
            assert_eq!(out, canonical, "step {step}");
            // Completed within the piece holding the last byte of the body.
            let done = done.unwrap();
            assert!(done >= end && done < end + step, "step {step}: {done}");
        }
        // Whatever follows the end is never consumed into the output.
        let mut d = ChunkedBody::default();
        let mut out = Vec::new();
        d.feed(b"0\r\n\r\n1\r\nX\r\n0\r\n\r\n", &mut out).unwrap();
        assert!(d.is_done());
        assert_eq!(out, b"0\r\n\r\n");
        d.feed(b"more", &mut out).unwrap();
        assert_eq!(out, b"0\r\n\r\n");
        // Incomplete.
        assert_eq!(decode(b"5\r\nhel", 100).unwrap().1, None);
        assert_eq!(decode(b"0\r\nX: 1\r\n", 100).unwrap().1, None);

        for bad in [
            &b"5\nhello\r\n0\r\n\r\n"[..],
            b"5\r\nhello\n0\r\n\r\n",
            b"5\r\nhelloX\r\n0\r\n\r\n",
            b"0\r\n\n",
            b"x\r\n",
            b"\r\n",
            b"-5\r\n",
            b"+5\r\n",
            b"0x5\r\n",
            b"5 \r\n",
            b"5 5\r\n",
            b" 5\r\n",
            b"5;a\x00b\r\n",
            b"5;\rb\r\n",
            b"10000000000000000\r\n",
            b"00000000000000005\r\n",
        ] {
            assert!(decode(bad, 1).is_err(), "{bad:?}");
            assert!(decode(bad, bad.len()).is_err(), "{bad:?}");
        }
        let long = format!("5;{}\r\n", "a".repeat(CHUNK_LINE_LIMIT));
        assert_eq!(
            decode(long.as_bytes(), 64),
            Err(ChunkError::SizeLineTooLong)
        );
        let trailer = format!("0\r\nX: {}\r\n\r\n", "a".repeat(HTTP_HEAD_LIMIT));
        assert_eq!(
            decode(trailer.as_bytes(), 64),
            Err(ChunkError::TrailerTooLarge)
        );
        // The largest size that fits in 64 bits is accepted (and then just awaited).
        let (out, done) = decode(b"ffffffffffffffff\r\nab", 100).unwrap();
        assert_eq!(out, b"ffffffffffffffff\r\nab");
        assert_eq!(done, None);
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
