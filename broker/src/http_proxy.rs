//! The HTTP `CONNECT` listener.

use std::io;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::timeout;

use crate::relay::relay;
use crate::server::{
    close_after_refusal, decide_and_dial, sanitize, EventDecision, Record, Refusal, Shared,
    HANDSHAKE_TIMEOUT, HTTP_HEAD_LIMIT, REJECT_TIMEOUT,
};
use crate::target::{parse_connect_request_line, TargetError};

const ESTABLISHED: &[u8] = b"HTTP/1.1 200 Connection established\r\n\r\n";

/// A request head read from the client.
#[derive(Debug)]
pub(crate) struct Head {
    /// The first line, without its line ending.
    pub(crate) request_line: Vec<u8>,
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

/// Find the end of the head: the first empty line (`\r\n` or bare `\n`). Returns the end
/// of the first line (exclusive, without its line ending) and the end of the head.
fn find_head_end(buf: &[u8]) -> Option<(usize, usize)> {
    let mut first_line_end = None;
    let mut line_start = 0;
    for (i, &b) in buf.iter().enumerate() {
        if b != b'\n' {
            continue;
        }
        let line = &buf[line_start..i];
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if first_line_end.is_none() {
            first_line_end = Some(line_start + line.len());
        } else if line.is_empty() {
            return first_line_end.map(|f| (f, i + 1));
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
        if let Some((line_end, head_end)) = find_head_end(&buf) {
            let leftover = buf.split_off(head_end);
            buf.truncate(line_end);
            return Ok(Head {
                request_line: buf,
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
    if method != "CONNECT" {
        let r = protocol_refusal(
            "method-not-allowed",
            405,
            format!(
                "only CONNECT is supported by the vetto proxy (got method \"{}\"); plain-HTTP \
                 requests through the proxy are not relayed",
                sanitize(method)
            ),
        );
        return send_refusal(stream, rec, &r).await;
    }
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
    let stats = relay(stream, upstream, &head.leftover, shared.idle).await;
    rec.relayed(stats);
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

    #[test]
    fn head_end() {
        assert_eq!(
            find_head_end(b"CONNECT a:1 HTTP/1.1\r\n\r\n"),
            Some((20, 24))
        );
        assert_eq!(
            find_head_end(b"CONNECT a:1 HTTP/1.1\r\nHost: a\r\n\r\nxyz"),
            Some((20, 33))
        );
        assert_eq!(find_head_end(b"CONNECT a:1 HTTP/1.1\n\nx"), Some((20, 22)));
        assert_eq!(find_head_end(b"CONNECT a:1 HTTP/1.1\r\nHost: a\r\n"), None);
        assert_eq!(find_head_end(b"CONNECT a:1 HTTP/1.1"), None);
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
