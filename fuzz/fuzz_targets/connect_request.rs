//! What a client sends the HTTP proxy listener: the `CONNECT` request line parser on its own
//! ([`parse_connect_request_line`]), then the whole input through the listener's head reader
//! and request parsers ([`vetto_broker::fuzzing::http_request`]: `CONNECT`, or an
//! absolute-form request whose head is rewritten and whose body is re-framed for upstream).
//!
//! Invariants: nothing panics; a parsed target prints as an authority that parses back to
//! itself; what goes upstream is one well-formed head (CRLF lines, one `Host`, at most one
//! framing header, nothing after its blank line but the body) followed by exactly the body
//! its framing announces; a refusal is one well-formed response.

#![no_main]

use libfuzzer_sys::fuzz_target;
use vetto_broker::fuzzing::{chunked_body, http_request, HttpAccepted};
use vetto_broker::{parse_connect_request_line, Target};

fn round_trips(t: &Target) {
    assert_ne!(t.port(), 0, "port 0 accepted: {t:?}");
    let again = Target::parse_connect_authority(&t.to_string())
        .unwrap_or_else(|e| panic!("{t} does not parse back: {e}"));
    assert_eq!(&again, t, "{t} parses back as something else");
}

/// `head` is a well-formed request head: CRLF lines, no bare CR or LF, a blank line only at
/// the end, `Host` exactly once, and at most one of the framing headers.
fn well_formed_head(head: &[u8]) {
    let text = String::from_utf8_lossy(head);
    assert!(
        head.ends_with(b"\r\n\r\n"),
        "head does not end with a blank line: {text:?}"
    );
    let body = &head[..head.len() - 4];
    for (i, &b) in body.iter().enumerate() {
        if b == b'\n' {
            assert!(
                i > 0 && body[i - 1] == b'\r',
                "bare LF in the upstream head: {text:?}"
            );
        }
        if b == b'\r' {
            assert_eq!(
                body.get(i + 1),
                Some(&b'\n'),
                "bare CR in the upstream head: {text:?}"
            );
        }
    }
    let lines: Vec<&[u8]> = body.split(|&b| b == b'\n').collect();
    let count = |name: &str| {
        lines
            .iter()
            .skip(1)
            .filter(|l| {
                let l = l.strip_suffix(b"\r").unwrap_or(l);
                assert!(
                    !l.is_empty(),
                    "blank line inside the upstream head: {text:?}"
                );
                l.len() > name.len()
                    && l[..name.len()].eq_ignore_ascii_case(name.as_bytes())
                    && l[name.len()] == b':'
            })
            .count()
    };
    assert_eq!(
        count("host"),
        1,
        "upstream head without exactly one Host: {text:?}"
    );
    let framing = count("content-length") + count("transfer-encoding");
    assert!(
        framing <= 1,
        "upstream head with {framing} framing headers: {text:?}"
    );
}

/// A refusal response: status line, headers, blank line, then exactly Content-Length bytes.
fn well_formed_response(resp: &[u8]) {
    if resp.is_empty() {
        return; // the client closed before a complete head: nothing is sent
    }
    let text = String::from_utf8_lossy(resp);
    assert!(
        resp.starts_with(b"HTTP/1.1 4") || resp.starts_with(b"HTTP/1.1 5"),
        "{text:?}"
    );
    let end = text
        .find("\r\n\r\n")
        .unwrap_or_else(|| panic!("no end of head: {text:?}"));
    let (head, body) = (&text[..end], &text[end + 4..]);
    for line in head.split("\r\n") {
        assert!(
            !line.contains(['\r', '\n']),
            "bare CR/LF in a refusal head: {text:?}"
        );
    }
    let len: usize = head
        .split("\r\n")
        .find_map(|l| l.strip_prefix("Content-Length: "))
        .and_then(|l| l.parse().ok())
        .unwrap_or_else(|| panic!("no Content-Length: {text:?}"));
    assert_eq!(body.len(), len, "refusal body length differs: {text:?}");
}

fuzz_target!(|data: &[u8]| {
    if let Ok(line) = std::str::from_utf8(data) {
        if let Ok(t) = parse_connect_request_line(line) {
            round_trips(&t);
        }
    }
    let (r, upstream) = http_request(data);
    match r {
        Err(resp) => {
            well_formed_response(&resp);
            assert!(upstream.is_empty(), "a refused request sent bytes upstream");
        }
        Ok(HttpAccepted::Connect { target, leftover }) => {
            round_trips(&target);
            assert!(upstream.is_empty());
            assert!(leftover <= data.len());
        }
        Ok(HttpAccepted::Forward {
            target,
            head,
            content_length,
            chunked,
            body_complete,
        }) => {
            round_trips(&target);
            assert!(upstream.len() >= head);
            well_formed_head(&upstream[..head]);
            let body = &upstream[head..];
            match (content_length, chunked) {
                (Some(_), true) => panic!("two framings"),
                (Some(n), false) => {
                    assert!(body.len() as u64 <= n, "more body than Content-Length: {n}");
                    if body_complete {
                        assert_eq!(body.len() as u64, n, "short body sent as complete");
                    }
                }
                (None, true) => {
                    // What goes upstream is canonical: decoding it again gives it back, whole.
                    let (again, done, err) = chunked_body(body);
                    assert_eq!(err, None, "upstream chunked body does not decode");
                    assert_eq!(again, body, "upstream chunked body is not canonical");
                    assert_eq!(done, body_complete, "chunked body end differs");
                }
                (None, false) => assert!(body.is_empty(), "body sent without framing"),
            }
            // The body is the client's bytes, re-framed without growing.
            assert!(
                body.len() <= data.len(),
                "upstream body longer than the input"
            );
        }
    }
    // The chunked decoder on its own (bodies arrive in any number of pieces).
    let (out, done, err) = chunked_body(data);
    if err.is_none() && done {
        let (again, done2, err2) = chunked_body(&out);
        assert_eq!(
            (again.as_slice(), done2, err2),
            (out.as_slice(), true, None)
        );
    }
});
