//! End-to-end tests of the broker server. Every socket in this file is on loopback
//! (127.0.0.0/8): the stub DNS server, the echo servers, the broker listeners, and every
//! address the broker dials. Non-loopback addresses only ever appear as DNS answers that
//! the broker must refuse (never dialled) or as a spec value that `serve` must reject
//! before accepting anything.
#![allow(clippy::unwrap_used)] // Tests: a panic is the failure report.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};
use tokio::time::timeout;
use vetto_broker::{
    serve, serve_with_events, BrokerError, BrokerEvent, BrokerSpec, ConnEvent, EventDecision,
    ListenerKind,
};

const T: Duration = Duration::from_secs(10);

// ---------------------------------------------------------------------------------------
// Stub DNS server
// ---------------------------------------------------------------------------------------

/// A UDP DNS server on 127.0.0.1 answering A/AAAA from a mutable map (NXDOMAIN for names
/// not in it) and recording every query name it receives.
struct StubDns {
    addr: SocketAddr,
    records: Arc<Mutex<HashMap<String, Vec<IpAddr>>>>,
    log: Arc<Mutex<Vec<(String, u16)>>>,
}

impl StubDns {
    async fn start() -> Self {
        let sock = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let addr = sock.local_addr().unwrap();
        let records: Arc<Mutex<HashMap<String, Vec<IpAddr>>>> = Arc::default();
        let log: Arc<Mutex<Vec<(String, u16)>>> = Arc::default();
        let (r, l) = (Arc::clone(&records), Arc::clone(&log));
        tokio::spawn(async move {
            let mut buf = [0u8; 1500];
            loop {
                let Ok((n, peer)) = sock.recv_from(&mut buf).await else {
                    continue;
                };
                if let Some(reply) = Self::answer(&buf[..n], &r, &l) {
                    let _ = sock.send_to(&reply, peer).await;
                }
            }
        });
        StubDns { addr, records, log }
    }

    fn answer(
        q: &[u8],
        records: &Mutex<HashMap<String, Vec<IpAddr>>>,
        log: &Mutex<Vec<(String, u16)>>,
    ) -> Option<Vec<u8>> {
        let (name, qtype, _) = parse_question(q)?;
        log.lock().unwrap().push((name.clone(), qtype));
        let addrs = records.lock().unwrap().get(&name).cloned();
        build_reply(q, addrs.as_deref())
    }

    fn set(&self, name: &str, addrs: &[&str]) {
        self.records.lock().unwrap().insert(
            name.to_string(),
            addrs.iter().map(|a| a.parse().unwrap()).collect(),
        );
    }

    fn queries_for(&self, name: &str) -> usize {
        self.log
            .lock()
            .unwrap()
            .iter()
            .filter(|(n, _)| n == name)
            .count()
    }

    fn resolver(&self) -> Option<String> {
        Some(self.addr.to_string())
    }
}

/// The (lowercased) name, type and end offset of a query's uncompressed question.
fn parse_question(q: &[u8]) -> Option<(String, u16, usize)> {
    let mut pos = 12;
    let mut labels = Vec::new();
    loop {
        let len = usize::from(*q.get(pos)?);
        pos += 1;
        if len == 0 {
            break;
        }
        labels.push(String::from_utf8_lossy(q.get(pos..pos + len)?).into_owned());
        pos += len;
    }
    let qtype = u16::from_be_bytes([*q.get(pos)?, *q.get(pos + 1)?]);
    Some((labels.join(".").to_ascii_lowercase(), qtype, pos + 4))
}

/// A reply to `q` carrying the addresses of the queried type (`None`: NXDOMAIN).
fn build_reply(q: &[u8], addrs: Option<&[IpAddr]>) -> Option<Vec<u8>> {
    let (_, qtype, question_end) = parse_question(q)?;
    let answers: Vec<IpAddr> = addrs
        .unwrap_or_default()
        .iter()
        .copied()
        .filter(|a| matches!((a, qtype), (IpAddr::V4(_), 1) | (IpAddr::V6(_), 28)))
        .collect();
    let mut r = q.get(..question_end)?.to_vec();
    let rcode = if addrs.is_none() { 3 } else { 0 };
    r[2..4].copy_from_slice(&(0x8180u16 | rcode).to_be_bytes());
    r[6..8].copy_from_slice(&(answers.len() as u16).to_be_bytes());
    r[8..12].copy_from_slice(&[0, 0, 0, 0]);
    for a in answers {
        r.extend_from_slice(&[0xc0, 12]);
        let (t, data) = match a {
            IpAddr::V4(v4) => (1u16, v4.octets().to_vec()),
            IpAddr::V6(v6) => (28u16, v6.octets().to_vec()),
        };
        r.extend_from_slice(&t.to_be_bytes());
        r.extend_from_slice(&1u16.to_be_bytes());
        r.extend_from_slice(&30u32.to_be_bytes());
        r.extend_from_slice(&(data.len() as u16).to_be_bytes());
        r.extend_from_slice(&data);
    }
    Some(r)
}

// ---------------------------------------------------------------------------------------
// Echo servers, broker, clients
// ---------------------------------------------------------------------------------------

/// An echo server on `bind` (a loopback address) that counts accepted connections.
async fn echo_server(bind: &str) -> (SocketAddr, Arc<AtomicUsize>) {
    let listener = TcpListener::bind(bind).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let count = Arc::new(AtomicUsize::new(0));
    let c = Arc::clone(&count);
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            c.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let (mut r, mut w) = s.split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
                let _ = w.shutdown().await;
            });
        }
    });
    (addr, count)
}

/// A listener that only counts connections (a trap that must never be reached).
async fn trap(bind: SocketAddr) -> Option<Arc<AtomicUsize>> {
    let listener = TcpListener::bind(bind).await.ok()?;
    let count = Arc::new(AtomicUsize::new(0));
    let c = Arc::clone(&count);
    tokio::spawn(async move {
        while let Ok(_conn) = listener.accept().await {
            c.fetch_add(1, Ordering::SeqCst);
        }
    });
    Some(count)
}

struct Broker {
    addrs: Vec<SocketAddr>,
    events: UnboundedReceiver<BrokerEvent>,
}

impl Broker {
    async fn start(spec: BrokerSpec, kinds: &[ListenerKind]) -> Self {
        let mut listeners = Vec::new();
        let mut addrs = Vec::new();
        for kind in kinds {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            addrs.push(l.local_addr().unwrap());
            listeners.push((*kind, l));
        }
        let (tx, events) = unbounded_channel();
        tokio::spawn(async move {
            let r = serve_with_events(spec, listeners, tx).await;
            panic!("serve returned: {r:?}");
        });
        Broker { addrs, events }
    }

    async fn event(&mut self) -> ConnEvent {
        loop {
            if let BrokerEvent::Connection(e) =
                timeout(T, self.events.recv()).await.unwrap().unwrap()
            {
                return e;
            }
        }
    }
}

struct Resp {
    status: u16,
    headers: HashMap<String, String>,
    body: String,
    stream: TcpStream,
    /// Bytes after the response head (for 200: relayed data).
    rest: Vec<u8>,
}

async fn read_until_head_end(stream: &mut TcpStream) -> (String, Vec<u8>) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 1024];
    loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let rest = buf.split_off(i + 4);
            return (String::from_utf8(buf).unwrap(), rest);
        }
        let n = timeout(T, stream.read(&mut chunk)).await.unwrap().unwrap();
        assert!(n > 0, "EOF before response head; got {buf:?}");
        buf.extend_from_slice(&chunk[..n]);
    }
}

async fn http_request(proxy: SocketAddr, request: &[u8]) -> Resp {
    let mut stream = TcpStream::connect(proxy).await.unwrap();
    stream.write_all(request).await.unwrap();
    let (head, mut rest) = read_until_head_end(&mut stream).await;
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap();
    let status: u16 = status_line.split(' ').nth(1).unwrap().parse().unwrap();
    let headers: HashMap<String, String> = lines
        .filter(|l| !l.is_empty())
        .map(|l| {
            let (k, v) = l.split_once(": ").unwrap();
            (k.to_ascii_lowercase(), v.to_string())
        })
        .collect();
    let mut body = String::new();
    if status != 200 {
        timeout(T, stream.read_to_end(&mut rest))
            .await
            .unwrap()
            .unwrap();
        // Close our side too, as a client does after `Connection: close`.
        stream.shutdown().await.unwrap();
        body = String::from_utf8(std::mem::take(&mut rest)).unwrap();
        let len: usize = headers["content-length"].parse().unwrap();
        assert_eq!(body.len(), len);
        assert_eq!(headers["content-type"], "text/plain");
        assert_eq!(headers["connection"], "close");
        assert!(headers.contains_key("x-vetto-deny"), "{headers:?}");
    }
    Resp {
        status,
        headers,
        body,
        stream,
        rest,
    }
}

async fn connect(proxy: SocketAddr, authority: &str, early: &[u8]) -> Resp {
    let mut req = format!("CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n\r\n").into_bytes();
    req.extend_from_slice(early);
    http_request(proxy, &req).await
}

/// Write `msg` and read exactly as many bytes back.
async fn echo_roundtrip(stream: &mut TcpStream, msg: &[u8]) {
    stream.write_all(msg).await.unwrap();
    let mut back = vec![0u8; msg.len()];
    timeout(T, stream.read_exact(&mut back))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(back, msg);
}

/// Read exactly `n` bytes (some may already be in `rest`).
async fn read_n(stream: &mut TcpStream, rest: &mut Vec<u8>, n: usize) -> Vec<u8> {
    let mut out = std::mem::take(rest);
    let mut chunk = [0u8; 256];
    while out.len() < n {
        let k = timeout(T, stream.read(&mut chunk)).await.unwrap().unwrap();
        assert!(k > 0);
        out.extend_from_slice(&chunk[..k]);
    }
    out
}

async fn close_and_wait_eof(mut stream: TcpStream) {
    stream.shutdown().await.unwrap();
    let mut sink = Vec::new();
    timeout(T, stream.read_to_end(&mut sink))
        .await
        .unwrap()
        .unwrap();
}

fn spec(allow: &[String], cidrs: &[&str], dns: &StubDns) -> BrokerSpec {
    BrokerSpec {
        allow: allow.to_vec(),
        allow_cidrs: cidrs.iter().map(|s| s.to_string()).collect(),
        resolver: dns.resolver(),
        ..BrokerSpec::default()
    }
}

/// SOCKS5: greeting with "no auth", then a request; returns the stream and the reply.
async fn socks_request(proxy: SocketAddr, request: &[u8]) -> (TcpStream, Vec<u8>) {
    let mut s = TcpStream::connect(proxy).await.unwrap();
    s.write_all(&[5, 1, 0]).await.unwrap();
    let mut m = [0u8; 2];
    timeout(T, s.read_exact(&mut m)).await.unwrap().unwrap();
    assert_eq!(m, [5, 0]);
    s.write_all(request).await.unwrap();
    let mut head = [0u8; 4];
    timeout(T, s.read_exact(&mut head)).await.unwrap().unwrap();
    let addr_len = match head[3] {
        1 => 4,
        4 => 16,
        other => panic!("unexpected ATYP {other}"),
    };
    let mut rest = vec![0u8; addr_len + 2];
    timeout(T, s.read_exact(&mut rest)).await.unwrap().unwrap();
    let mut reply = head.to_vec();
    reply.extend(rest);
    (s, reply)
}

fn socks_domain_request(name: &str, port: u16) -> Vec<u8> {
    let mut r = vec![5, 1, 0, 3, name.len() as u8];
    r.extend_from_slice(name.as_bytes());
    r.extend_from_slice(&port.to_be_bytes());
    r
}

/// A loopback port with nothing listening on it.
fn closed_port(ip: &str) -> u16 {
    let l = std::net::TcpListener::bind((ip, 0)).unwrap();
    l.local_addr().unwrap().port()
}

// ---------------------------------------------------------------------------------------
// 1. CONNECT success
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn connect_allowlisted_name_relays_both_ways() {
    let dns = StubDns::start().await;
    let (echo, accepted) = echo_server("127.0.0.2:0").await;
    let port = echo.port();
    dns.set("echo.vetto.test", &["127.0.0.2"]);
    let mut b = Broker::start(
        spec(
            &[format!("echo.vetto.test:{port}")],
            &["127.0.0.2/32"],
            &dns,
        ),
        &[ListenerKind::HttpProxy],
    )
    .await;

    // Bytes sent right after the head are forwarded after the 200.
    let mut r = connect(b.addrs[0], &format!("Echo.Vetto.Test:{port}"), b"early").await;
    assert_eq!(r.status, 200);
    let early = read_n(&mut r.stream, &mut r.rest, 5).await;
    assert_eq!(early, b"early");
    echo_roundtrip(&mut r.stream, b"ping-pong").await;
    close_and_wait_eof(r.stream).await;

    let ev = b.event().await;
    assert_eq!(ev.listener, ListenerKind::HttpProxy);
    assert_eq!(ev.decision, EventDecision::Allow);
    assert_eq!(ev.reason, "closed");
    assert_eq!(
        ev.target.as_deref(),
        Some(&*format!("echo.vetto.test:{port}"))
    );
    assert_eq!(ev.dialled, Some(echo));
    assert_eq!((ev.bytes_up, ev.bytes_down), (14, 14));
    assert_eq!(ev.client.ip(), "127.0.0.1".parse::<IpAddr>().unwrap());
    assert_eq!(accepted.load(Ordering::SeqCst), 1);
    // Resolved through the stub: one A and one AAAA query.
    assert_eq!(dns.queries_for("echo.vetto.test"), 2);
    // The event is serialisable.
    let json = serde_json::to_string(&ev).unwrap();
    assert!(json.contains(r#""decision":"allow""#), "{json}");
    assert_eq!(serde_json::from_str::<ConnEvent>(&json).unwrap(), ev);
}

// ---------------------------------------------------------------------------------------
// 2. Rebinding: non-public answers are refused whole, nothing is dialled
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn non_public_answers_are_refused_and_never_dialled() {
    let dns = StubDns::start().await;
    let (echo, accepted) = echo_server("127.0.0.2:0").await;
    let port = echo.port();
    // A trap on 127.0.0.1 with the same port: where a loopback or mapped answer would go.
    let trap_count = trap(SocketAddr::from(([127, 0, 0, 1], port))).await;
    let name = "rebind.vetto.test";
    let mut b = Broker::start(
        spec(&[format!("{name}:{port}")], &["127.0.0.2/32"], &dns),
        &[ListenerKind::HttpProxy],
    )
    .await;

    let cases: &[(&[&str], &str)] = &[
        (&["127.0.0.1"], "non-public-answer: loopback"),
        (
            &["169.254.169.254"],
            "non-public-answer: cloud metadata endpoint",
        ),
        (
            &["::ffff:127.0.0.1"],
            "non-public-answer: loopback via IPv4-mapped IPv6 (::ffff:0:0/96)",
        ),
        (&["127.0.0.2", "127.0.0.1"], "non-public-answer: loopback"),
    ];
    for (answer, header) in cases {
        dns.set(name, answer);
        let r = connect(b.addrs[0], &format!("{name}:{port}"), b"").await;
        assert_eq!(r.status, 403, "{answer:?}: {}", r.body);
        assert_eq!(r.headers["x-vetto-deny"], *header, "{answer:?}");
        assert!(r.body.starts_with("vetto: "), "{}", r.body);
        assert!(r.body.contains("refused whole"), "{}", r.body);
        let ev = b.event().await;
        assert_eq!(ev.decision, EventDecision::Deny);
        assert_eq!(ev.reason, "non-public-answer");
        assert_eq!(ev.dialled, None);
    }
    assert_eq!(accepted.load(Ordering::SeqCst), 0);
    if let Some(t) = trap_count {
        assert_eq!(t.load(Ordering::SeqCst), 0);
    }

    // The same name flipped back to the allowed address works.
    dns.set(name, &["127.0.0.2"]);
    let mut r = connect(b.addrs[0], &format!("{name}:{port}"), b"").await;
    assert_eq!(r.status, 200);
    echo_roundtrip(&mut r.stream, b"ok").await;
    assert_eq!(accepted.load(Ordering::SeqCst), 1);
}

// ---------------------------------------------------------------------------------------
// 3. Denied before any resolution; literals; malformed requests
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn denied_requests_never_resolve_or_dial() {
    let dns = StubDns::start().await;
    let (echo, accepted) = echo_server("127.0.0.2:0").await;
    let port = echo.port();
    // The stub WOULD answer these: the point is that it is never asked.
    dns.set("evil.vetto.test", &["127.0.0.2"]);
    dns.set("allowed.vetto.test", &["127.0.0.2"]);
    let mut b = Broker::start(
        spec(&["allowed.vetto.test".to_string()], &[], &dns),
        &[ListenerKind::HttpProxy],
    )
    .await;
    let proxy = b.addrs[0];

    let r = connect(proxy, &format!("evil.vetto.test:{port}"), b"").await;
    assert_eq!(r.status, 403);
    assert_eq!(r.headers["x-vetto-deny"], "not-allowlisted");
    assert!(
        r.body.contains("evil.vetto.test is not in the allowlist"),
        "{}",
        r.body
    );
    assert_eq!(b.event().await.reason, "not-allowlisted");

    // Allowlisted name, wrong port (entries without a port allow 443 only).
    let r = connect(proxy, &format!("allowed.vetto.test:{port}"), b"").await;
    assert_eq!(r.status, 403);
    assert_eq!(r.headers["x-vetto-deny"], "port-not-allowed");
    assert_eq!(b.event().await.reason, "port-not-allowed");

    // IP literal without a CIDR (in several spellings).
    for literal in [
        format!("127.0.0.2:{port}"),
        format!("0x7f.0.0.2:{port}"),
        format!("[::ffff:127.0.0.2]:{port}"),
    ] {
        let r = connect(proxy, &literal, b"").await;
        assert_eq!(r.status, 403, "{literal}");
        assert_eq!(r.headers["x-vetto-deny"], "ip-literal-not-allowed");
        assert!(r.body.contains("allow_cidrs"), "{}", r.body);
        let ev = b.event().await;
        assert_eq!(ev.reason, "ip-literal-not-allowed");
        assert_eq!(ev.dialled, None);
    }

    // Userinfo.
    let r = connect(proxy, "a@allowed.vetto.test:443", b"").await;
    assert_eq!(r.status, 403);
    assert_eq!(r.headers["x-vetto-deny"], "invalid-destination");
    assert!(r.body.contains("userinfo"), "{}", r.body);
    let ev = b.event().await;
    assert_eq!(ev.reason, "invalid-destination");
    assert_eq!(ev.target.as_deref(), Some("a@allowed.vetto.test:443"));

    // Neither CONNECT nor an absolute-form request (absolute-form: see `http_forward_*`).
    let r = http_request(proxy, b"GET / HTTP/1.1\r\nHost: allowed.vetto.test\r\n\r\n").await;
    assert_eq!(r.status, 405);
    assert_eq!(r.headers["x-vetto-deny"], "method-not-allowed");
    assert_eq!(r.headers["allow"], "CONNECT");
    assert_eq!(b.event().await.reason, "method-not-allowed");

    // Malformed request line.
    let r = http_request(proxy, b"CONNECT  allowed.vetto.test:443 HTTP/1.1\r\n\r\n").await;
    assert_eq!(r.status, 400);
    assert_eq!(r.headers["x-vetto-deny"], "invalid-request");
    assert_eq!(b.event().await.reason, "invalid-request");

    // Oversized head.
    let mut big = b"CONNECT allowed.vetto.test:443 HTTP/1.1\r\n".to_vec();
    big.extend(std::iter::repeat_n(b'a', 9000));
    let r = http_request(proxy, &big).await;
    assert_eq!(r.status, 431);
    assert_eq!(b.event().await.reason, "head-too-large");

    assert_eq!(dns.queries_for("evil.vetto.test"), 0);
    assert_eq!(dns.queries_for("allowed.vetto.test"), 0);
    assert_eq!(accepted.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn resolution_and_connect_failures_are_502() {
    let dns = StubDns::start().await;
    let port = closed_port("127.0.0.2");
    dns.set("closed.vetto.test", &["127.0.0.2"]);
    // "gone.vetto.test" is not in the stub: NXDOMAIN.
    let mut b = Broker::start(
        spec(
            &[
                format!("closed.vetto.test:{port}"),
                "gone.vetto.test".to_string(),
            ],
            &["127.0.0.2/32"],
            &dns,
        ),
        &[ListenerKind::HttpProxy],
    )
    .await;
    let r = connect(b.addrs[0], &format!("closed.vetto.test:{port}"), b"").await;
    assert_eq!(r.status, 502);
    assert_eq!(r.headers["x-vetto-deny"], "connect-refused");
    let ev = b.event().await;
    assert_eq!(ev.decision, EventDecision::Error);
    assert_eq!(ev.dialled, Some(SocketAddr::from(([127, 0, 0, 2], port))));

    let r = connect(b.addrs[0], "gone.vetto.test:443", b"").await;
    assert_eq!(r.status, 502);
    assert_eq!(r.headers["x-vetto-deny"], "empty-answer");
    assert_eq!(b.event().await.reason, "empty-answer");
    assert_eq!(dns.queries_for("gone.vetto.test"), 2);

    // A resolver that does not listen (ICMP port unreachable on loopback).
    let dead = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let dead_addr = dead.local_addr().unwrap();
    drop(dead);
    let mut b = Broker::start(
        BrokerSpec {
            resolver: Some(dead_addr.to_string()),
            ..spec(&["gone.vetto.test".to_string()], &[], &dns)
        },
        &[ListenerKind::HttpProxy],
    )
    .await;
    let r = connect(b.addrs[0], "gone.vetto.test:443", b"").await;
    assert_eq!(r.status, 502);
    assert_eq!(r.headers["x-vetto-deny"], "resolve-failed");
    assert!(r.body.contains(&dead_addr.to_string()), "{}", r.body);
    // The DNS client's typed error arrives whole: the server, then the socket's error.
    assert!(
        r.body.contains(&format!(
            "resolving the name failed: DNS server {dead_addr}: "
        )),
        "{}",
        r.body
    );
    assert_eq!(b.event().await.decision, EventDecision::Error);
}

#[tokio::test]
async fn dns_client_ignores_forged_replies_and_retries() {
    let sock = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let server = sock.local_addr().unwrap();
    let real: Vec<IpAddr> = vec![
        "127.0.0.3".parse().unwrap(),
        "127.0.0.4".parse().unwrap(),
        "::1".parse().unwrap(),
    ];
    let forged: Vec<IpAddr> = vec!["127.0.0.9".parse().unwrap()];
    let answers = real.clone();
    tokio::spawn(async move {
        let mut buf = [0u8; 1500];
        let mut seen = 0;
        loop {
            let (n, peer) = sock.recv_from(&mut buf).await.unwrap();
            seen += 1;
            let q = &buf[..n];
            if seen == 1 {
                continue; // The first query is lost: the client must retry it.
            }
            // Wrong id.
            let mut bad_id = build_reply(q, Some(&forged)).unwrap();
            bad_id[0] ^= 0xff;
            sock.send_to(&bad_id, peer).await.unwrap();
            // Right id, different question name.
            let mut bad_q = build_reply(q, Some(&forged)).unwrap();
            bad_q[13] ^= 0x01;
            sock.send_to(&bad_q, peer).await.unwrap();
            // The real answer.
            let good = build_reply(q, Some(&answers)).unwrap();
            sock.send_to(&good, peer).await.unwrap();
        }
    });
    let name = vetto_broker::DnsName::parse("x.vetto.test").unwrap();
    let got = vetto_broker::dns::resolve_udp(server, &name).await.unwrap();
    assert_eq!(got, real);
}

// ---------------------------------------------------------------------------------------
// 3b. Plain-HTTP forwarding of absolute-form requests
// ---------------------------------------------------------------------------------------

/// What the test HTTP server received on one connection.
#[derive(Debug, Clone)]
struct Seen {
    request_line: String,
    /// (lowercased name, value), in order.
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Seen {
    fn header(&self, name: &str) -> Vec<&str> {
        self.headers
            .iter()
            .filter(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
            .collect()
    }
}

const HTTP_RESPONSE: &[u8] =
    b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 6\r\nConnection: close\r\n\r\norigin";

/// An HTTP/1.1 server on `bind` (loopback): reads one request (head plus a
/// `Content-Length` body), records it, answers [`HTTP_RESPONSE`] and closes.
async fn http_server(bind: &str) -> (SocketAddr, Arc<Mutex<Vec<Seen>>>) {
    let listener = TcpListener::bind(bind).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
    let log = Arc::clone(&seen);
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            let log = Arc::clone(&log);
            tokio::spawn(async move {
                let (head, mut body) = read_until_head_end(&mut s).await;
                let mut lines = head.split("\r\n");
                let request_line = lines.next().unwrap().to_string();
                let headers: Vec<(String, String)> = lines
                    .filter(|l| !l.is_empty())
                    .map(|l| {
                        let (k, v) = l.split_once(": ").unwrap();
                        (k.to_ascii_lowercase(), v.to_string())
                    })
                    .collect();
                let len: usize = headers
                    .iter()
                    .find(|(k, _)| k == "content-length")
                    .map_or(0, |(_, v)| v.parse().unwrap());
                let body = read_n(&mut s, &mut body, len).await;
                log.lock().unwrap().push(Seen {
                    request_line,
                    headers,
                    body,
                });
                s.write_all(HTTP_RESPONSE).await.unwrap();
                let _ = s.shutdown().await;
            });
        }
    });
    (addr, seen)
}

/// Send `request` to the proxy and read everything it answers until it closes.
async fn http_exchange(proxy: SocketAddr, request: &[u8]) -> Vec<u8> {
    let mut s = TcpStream::connect(proxy).await.unwrap();
    s.write_all(request).await.unwrap();
    let mut all = Vec::new();
    timeout(T, s.read_to_end(&mut all)).await.unwrap().unwrap();
    s.shutdown().await.unwrap();
    all
}

#[tokio::test]
async fn http_forward_allowlisted_name_on_its_port() {
    let dns = StubDns::start().await;
    let (origin, seen) = http_server("127.0.0.2:0").await;
    let port = origin.port();
    dns.set("web.vetto.test", &["127.0.0.2"]);
    let mut b = Broker::start(
        spec(&[format!("web.vetto.test:{port}")], &["127.0.0.2/32"], &dns),
        &[ListenerKind::HttpProxy],
    )
    .await;
    let proxy = b.addrs[0];

    let request = format!(
        "GET http://web.vetto.test:{port}/x?y=1 HTTP/1.1\r\nHost: web.vetto.test:{port}\r\n\
         Proxy-Connection: keep-alive\r\nProxy-Authorization: Basic c2VjcmV0\r\n\
         Connection: keep-alive, X-Hop\r\nX-Hop: 1\r\nKeep-Alive: 300\r\nTE: trailers\r\n\
         User-Agent: vetto-test\r\nAccept: */*\r\n\r\n"
    );
    let response = http_exchange(proxy, request.as_bytes()).await;
    assert_eq!(response, HTTP_RESPONSE);
    let ev = b.event().await;
    assert_eq!(ev.listener, ListenerKind::HttpProxy);
    assert_eq!(ev.decision, EventDecision::Allow);
    assert_eq!(ev.reason, "closed");
    assert_eq!(
        ev.target.as_deref(),
        Some(&*format!("web.vetto.test:{port}"))
    );
    assert_eq!(ev.dialled, Some(origin));
    assert_eq!(ev.bytes_down, HTTP_RESPONSE.len() as u64);
    {
        let seen = seen.lock().unwrap();
        assert_eq!(seen.len(), 1);
        let s = &seen[0];
        assert_eq!(s.request_line, "GET /x?y=1 HTTP/1.1");
        assert_eq!(s.header("host"), [format!("web.vetto.test:{port}")]);
        assert_eq!(s.header("connection"), ["close"]);
        for hop in [
            "proxy-connection",
            "proxy-authorization",
            "x-hop",
            "keep-alive",
            "te",
        ] {
            assert!(s.header(hop).is_empty(), "{hop} forwarded: {s:?}");
        }
        assert_eq!(s.header("user-agent"), ["vetto-test"]);
        assert_eq!(s.header("accept"), ["*/*"]);
        assert_eq!(s.headers.len(), 4, "{s:?}");
    }

    // A body sent with the head is forwarded; a missing Host is added; any method token.
    let request = format!(
        "PUT HTTP://WEB.vetto.test:{port} HTTP/1.1\r\nContent-Length: 11\r\n\r\nhello world"
    );
    let response = http_exchange(proxy, request.as_bytes()).await;
    assert_eq!(response, HTTP_RESPONSE);
    assert_eq!(b.event().await.decision, EventDecision::Allow);
    {
        let seen = seen.lock().unwrap();
        let s = &seen[1];
        assert_eq!(s.request_line, "PUT / HTTP/1.1");
        assert_eq!(s.header("host"), [format!("web.vetto.test:{port}")]);
        assert_eq!(s.body, b"hello world");
    }
    // Resolved once per request, through the stub.
    assert_eq!(dns.queries_for("web.vetto.test"), 4);
}

#[tokio::test]
async fn http_forward_refusals() {
    let dns = StubDns::start().await;
    let (origin, seen) = http_server("127.0.0.2:0").await;
    let port = origin.port();
    for name in ["web.vetto.test", "only443.vetto.test", "strict.vetto.test"] {
        dns.set(name, &["127.0.0.2"]);
    }
    let mut b = Broker::start(
        spec(
            &[
                format!("web.vetto.test:{port}"),
                "only443.vetto.test".to_string(),
            ],
            &["127.0.0.2/32"],
            &dns,
        ),
        &[ListenerKind::HttpProxy],
    )
    .await;
    let proxy = b.addrs[0];

    let cases: Vec<(String, u16, &str)> = vec![
        // Allowed on 443 only: http:// means port 80.
        (
            "GET http://only443.vetto.test/ HTTP/1.1\r\nHost: only443.vetto.test\r\n\r\n".into(),
            403,
            "port-not-allowed",
        ),
        (
            "GET http://evil.vetto.test/ HTTP/1.1\r\n\r\n".into(),
            403,
            "not-allowlisted",
        ),
        (
            format!("GET http://127.0.0.2:{port}/ HTTP/1.1\r\n\r\n"),
            403,
            "ip-literal-not-allowed",
        ),
        // Userinfo.
        (
            format!("GET http://a@web.vetto.test:{port}/ HTTP/1.1\r\n\r\n"),
            400,
            "invalid-request",
        ),
        // Other schemes are not forwarded.
        (
            "GET https://web.vetto.test/ HTTP/1.1\r\nHost: web.vetto.test\r\n\r\n".into(),
            400,
            "unsupported-scheme",
        ),
        (
            format!("GET ftp://web.vetto.test:{port}/ HTTP/1.1\r\n\r\n"),
            400,
            "unsupported-scheme",
        ),
        // Host naming another virtual host, or another port.
        (
            format!("GET http://web.vetto.test:{port}/ HTTP/1.1\r\nHost: other.vetto.test\r\n\r\n"),
            400,
            "host-mismatch",
        ),
        (
            format!("GET http://web.vetto.test:{port}/ HTTP/1.1\r\nHost: web.vetto.test\r\n\r\n"),
            400,
            "host-mismatch",
        ),
        // Ambiguous framing.
        (
            format!(
                "POST http://web.vetto.test:{port}/ HTTP/1.1\r\nContent-Length: 1\r\n\
                 Transfer-Encoding: chunked\r\n\r\n"
            ),
            400,
            "invalid-request",
        ),
    ];
    for (request, status, reason) in cases {
        let r = http_request(proxy, request.as_bytes()).await;
        assert_eq!(r.status, status, "{request:?}: {}", r.body);
        assert_eq!(r.headers["x-vetto-deny"], reason, "{request:?}");
        assert!(r.body.starts_with("vetto: "), "{}", r.body);
        let ev = b.event().await;
        assert_eq!(ev.decision, EventDecision::Deny, "{request:?}");
        assert_eq!(ev.reason, reason, "{request:?}");
        assert_eq!(ev.dialled, None, "{request:?}");
    }
    assert_eq!(dns.queries_for("only443.vetto.test"), 0);
    assert_eq!(dns.queries_for("evil.vetto.test"), 0);
    assert_eq!(dns.queries_for("web.vetto.test"), 0);
    assert!(seen.lock().unwrap().is_empty());

    // Strict mode refuses port 80 even when it is listed.
    let mut b = Broker::start(
        BrokerSpec {
            strict: true,
            ..spec(&["strict.vetto.test:80".to_string()], &[], &dns)
        },
        &[ListenerKind::HttpProxy],
    )
    .await;
    let r = http_request(
        b.addrs[0],
        b"GET http://strict.vetto.test/ HTTP/1.1\r\nHost: strict.vetto.test\r\n\r\n",
    )
    .await;
    assert_eq!(r.status, 403);
    assert_eq!(r.headers["x-vetto-deny"], "strict-port-80");
    assert!(r.body.contains("strict mode"), "{}", r.body);
    assert_eq!(b.event().await.reason, "strict-port-80");
    assert_eq!(dns.queries_for("strict.vetto.test"), 0);
    assert!(seen.lock().unwrap().is_empty());
}

/// What a keep-alive HTTP server received on one connection.
#[derive(Debug, Default)]
struct ConnLog {
    /// Every request it parsed.
    requests: Vec<Seen>,
    /// Every byte it read.
    raw: Vec<u8>,
}

/// The server end of one connection of [`keepalive_server`]: buffered reads, every byte
/// also appended to the connection's log as soon as it arrives.
struct Wire {
    s: TcpStream,
    buf: Vec<u8>,
    log: Arc<Mutex<Vec<ConnLog>>>,
    idx: usize,
}

impl Wire {
    async fn more(&mut self) -> bool {
        let mut chunk = [0u8; 4096];
        match self.s.read(&mut chunk).await {
            Ok(n) if n > 0 => {
                self.buf.extend_from_slice(&chunk[..n]);
                self.log.lock().unwrap()[self.idx]
                    .raw
                    .extend_from_slice(&chunk[..n]);
                true
            }
            _ => false,
        }
    }

    /// The next CRLF-terminated line, without its CRLF.
    async fn line(&mut self) -> Option<String> {
        loop {
            if let Some(i) = self.buf.windows(2).position(|w| w == b"\r\n") {
                let line: Vec<u8> = self.buf.drain(..i + 2).take(i).collect();
                return Some(String::from_utf8(line).unwrap());
            }
            if !self.more().await {
                return None;
            }
        }
    }

    async fn take(&mut self, n: usize) -> Option<Vec<u8>> {
        while self.buf.len() < n {
            if !self.more().await {
                return None;
            }
        }
        Some(self.buf.drain(..n).collect())
    }

    /// One request: head, then a `Content-Length` or chunked body.
    async fn request(&mut self) -> Option<Seen> {
        let request_line = self.line().await?;
        let mut headers = Vec::new();
        loop {
            let l = self.line().await?;
            if l.is_empty() {
                break;
            }
            let (k, v) = l.split_once(':').unwrap();
            headers.push((k.to_ascii_lowercase(), v.trim().to_string()));
        }
        let mut seen = Seen {
            request_line,
            headers,
            body: Vec::new(),
        };
        if seen.header("transfer-encoding") == ["chunked"] {
            loop {
                let size_line = self.line().await?;
                let size = usize::from_str_radix(size_line.split(';').next().unwrap(), 16).unwrap();
                if size == 0 {
                    while !self.line().await?.is_empty() {}
                    break;
                }
                let data = self.take(size).await?;
                seen.body.extend_from_slice(&data);
                assert_eq!(self.take(2).await?, b"\r\n");
            }
        } else if let Some(len) = seen.header("content-length").first() {
            seen.body = self.take(len.parse().unwrap()).await?;
        }
        Some(seen)
    }
}

/// The answer of [`keepalive_server`] to every request (no `Connection: close`).
const KEEPALIVE_RESPONSE: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\norigin";

/// An HTTP/1.1 server on `bind` (loopback) that ignores `Connection: close`: it serves
/// every request it can read on a connection and keeps the connection open, so whatever
/// the proxy lets through after the first request shows up in its log.
async fn keepalive_server(bind: &str) -> (SocketAddr, Arc<Mutex<Vec<ConnLog>>>) {
    let listener = TcpListener::bind(bind).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let conns: Arc<Mutex<Vec<ConnLog>>> = Arc::default();
    let log = Arc::clone(&conns);
    tokio::spawn(async move {
        while let Ok((s, _)) = listener.accept().await {
            let idx = {
                let mut l = log.lock().unwrap();
                l.push(ConnLog::default());
                l.len() - 1
            };
            let mut wire = Wire {
                s,
                buf: Vec::new(),
                log: Arc::clone(&log),
                idx,
            };
            tokio::spawn(async move {
                while let Some(seen) = wire.request().await {
                    wire.log.lock().unwrap()[wire.idx].requests.push(seen);
                    if wire.s.write_all(KEEPALIVE_RESPONSE).await.is_err() {
                        break;
                    }
                }
            });
        }
    });
    (addr, conns)
}

/// Read one response of exactly `expected.len()` bytes from the proxy.
async fn read_response(s: &mut TcpStream, expected: &[u8]) {
    let mut got = vec![0u8; expected.len()];
    timeout(T, s.read_exact(&mut got)).await.unwrap().unwrap();
    assert_eq!(got, expected);
}

#[tokio::test]
async fn http_forward_sends_one_request_per_connection() {
    let dns = StubDns::start().await;
    let (origin, conns) = keepalive_server("127.0.0.2:0").await;
    let port = origin.port();
    dns.set("web.vetto.test", &["127.0.0.2"]);
    dns.set("other.vetto.test", &["127.0.0.2"]);
    let b = Broker::start(
        spec(
            &[
                format!("web.vetto.test:{port}"),
                format!("other.vetto.test:{port}"),
            ],
            &["127.0.0.2/32"],
            &dns,
        ),
        &[ListenerKind::HttpProxy],
    )
    .await;
    let proxy = b.addrs[0];
    let second = format!(
        "GET http://other.vetto.test:{port}/second HTTP/1.1\r\nHost: other.vetto.test:{port}\r\n\r\n"
    );
    // (what, the client's writes, the body upstream must get)
    type Case<'a> = (&'a str, Vec<Vec<u8>>, &'a [u8]);
    let cases: Vec<Case<'_>> = vec![
        // Two requests in one write, the second naming another Host (allowlisted too, on
        // the same checked upstream address).
        (
            "pipelined GET",
            vec![format!(
                "GET http://web.vetto.test:{port}/first HTTP/1.1\r\nHost: web.vetto.test:{port}\r\n\r\n{second}"
            )
            .into_bytes()],
            b"",
        ),
        // The second request right behind a Content-Length body.
        (
            "after a Content-Length body",
            vec![format!(
                "POST http://web.vetto.test:{port}/first HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello{second}"
            )
            .into_bytes()],
            b"hello",
        ),
        // The second request right behind a chunked body (with an extension and a trailer),
        // the body arriving in pieces.
        (
            "after a chunked body",
            vec![
                format!(
                    "POST http://web.vetto.test:{port}/first HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5;x=1\r\nhel"
                )
                .into_bytes(),
                b"lo\r\n6\r\n world\r\n0\r\nX-Trailer: t\r\n".to_vec(),
                format!("\r\n{second}").into_bytes(),
            ],
            b"hello world",
        ),
    ];
    for (i, (what, writes, body)) in cases.into_iter().enumerate() {
        let mut s = TcpStream::connect(proxy).await.unwrap();
        for w in writes {
            s.write_all(&w).await.unwrap();
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        read_response(&mut s, KEEPALIVE_RESPONSE).await;
        // A request sent after the first response is not forwarded either.
        let _ = s.write_all(second.as_bytes()).await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        let conns = conns.lock().unwrap();
        assert_eq!(
            conns.len(),
            i + 1,
            "{what}: one upstream connection per case"
        );
        let c = &conns[i];
        assert_eq!(c.requests.len(), 1, "{what}: {:?}", c.requests);
        let r = &c.requests[0];
        assert_eq!(r.request_line.split(' ').nth(1), Some("/first"), "{what}");
        assert_eq!(r.body, body, "{what}");
        assert_eq!(r.header("connection"), ["close"], "{what}");
        let raw = String::from_utf8_lossy(&c.raw);
        assert!(!raw.contains("other.vetto.test"), "{what}: {raw:?}");
        assert!(!raw.contains("/second"), "{what}: {raw:?}");
        if what == "after a chunked body" {
            // The body goes upstream re-encoded: the chunks as parsed, no extension, no
            // trailer, and nothing after the last chunk.
            assert!(
                raw.ends_with("\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"),
                "{raw:?}"
            );
            assert_eq!(r.header("transfer-encoding"), ["chunked"]);
        }
    }
    // DNS was asked about the first request's host only.
    assert_eq!(dns.queries_for("other.vetto.test"), 0);
}

#[tokio::test]
async fn http_forward_closes_after_the_one_response() {
    let dns = StubDns::start().await;
    let (origin, seen) = http_server("127.0.0.2:0").await;
    let port = origin.port();
    dns.set("web.vetto.test", &["127.0.0.2"]);
    let mut b = Broker::start(
        spec(&[format!("web.vetto.test:{port}")], &["127.0.0.2/32"], &dns),
        &[ListenerKind::HttpProxy],
    )
    .await;
    let first =
        format!("POST http://web.vetto.test:{port}/ HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc");
    let request = format!(
        "{first}GET http://web.vetto.test:{port}/again HTTP/1.1\r\nHost: web.vetto.test:{port}\r\n\r\n"
    );
    // The client gets the one response, then the connection ends.
    assert_eq!(
        http_exchange(b.addrs[0], request.as_bytes()).await,
        HTTP_RESPONSE
    );
    let ev = b.event().await;
    assert_eq!(ev.decision, EventDecision::Allow);
    assert_eq!(ev.reason, "closed");
    assert_eq!(ev.bytes_down, HTTP_RESPONSE.len() as u64);
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].body, b"abc");
    // Upstream got the rewritten head and the 3 body bytes: nothing of the second request.
    let head_len = format!(
        "POST / HTTP/1.1\r\nHost: web.vetto.test:{port}\r\nContent-Length: 3\r\nConnection: close\r\n\r\n"
    )
    .len();
    assert_eq!(ev.bytes_up, (head_len + 3) as u64);
}

#[tokio::test]
async fn http_forward_refuses_ambiguous_framing() {
    let dns = StubDns::start().await;
    let (origin, conns) = keepalive_server("127.0.0.2:0").await;
    let port = origin.port();
    dns.set("web.vetto.test", &["127.0.0.2"]);
    let mut b = Broker::start(
        spec(&[format!("web.vetto.test:{port}")], &["127.0.0.2/32"], &dns),
        &[ListenerKind::HttpProxy],
    )
    .await;
    let smuggled = format!("GET http://web.vetto.test:{port}/smuggled HTTP/1.1\r\n\r\n");
    for framing in [
        "Content-Length: 4\r\nTransfer-Encoding: chunked\r\n",
        "Transfer-Encoding: chunked\r\nContent-Length: 4\r\n",
        "Transfer-Encoding: chunked\r\nContent-Length: 0\r\n",
        "Content-Length: 4\r\nTransfer-Encoding: identity\r\n",
        "Transfer-Encoding: chunked, identity\r\n",
        "Transfer-Encoding: identity, chunked\r\n",
        "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n",
        "Content-Length: 4\r\nContent-Length: 5\r\n",
        "Content-Length: 4, 5\r\n",
        "Content-Length: +4\r\n",
        "Content-Length: 99999999999999999999999\r\n",
        "Transfer-Encoding : chunked\r\n",
    ] {
        let request = format!(
            "POST http://web.vetto.test:{port}/ HTTP/1.1\r\nHost: web.vetto.test:{port}\r\n\
             {framing}\r\n0\r\n\r\n{smuggled}"
        );
        let r = http_request(b.addrs[0], request.as_bytes()).await;
        assert_eq!(r.status, 400, "{framing:?}: {}", r.body);
        assert_eq!(r.headers["x-vetto-deny"], "invalid-request", "{framing:?}");
        let ev = b.event().await;
        assert_eq!(ev.decision, EventDecision::Deny, "{framing:?}");
        assert_eq!(ev.dialled, None, "{framing:?}");
    }
    assert!(conns.lock().unwrap().is_empty());
    assert_eq!(dns.queries_for("web.vetto.test"), 0);
}

// ---------------------------------------------------------------------------------------
// 4. SOCKS5
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn socks5_domain_and_literal_paths() {
    let dns = StubDns::start().await;
    let (echo, accepted) = echo_server("127.0.0.2:0").await;
    let port = echo.port();
    let closed = closed_port("127.0.0.2");
    dns.set("echo.vetto.test", &["127.0.0.2"]);
    dns.set("meta.vetto.test", &["169.254.169.254"]);
    dns.set("closed.vetto.test", &["127.0.0.2"]);
    dns.set("evil.vetto.test", &["127.0.0.2"]);
    let mut b = Broker::start(
        spec(
            &[
                format!("echo.vetto.test:{port}"),
                format!("meta.vetto.test:{port}"),
                format!("closed.vetto.test:{closed}"),
                "gone.vetto.test".to_string(),
            ],
            &["127.0.0.2/32", &format!("127.0.0.2/32:{port}")],
            &dns,
        ),
        &[ListenerKind::Socks5],
    )
    .await;
    let proxy = b.addrs[0];

    // socks5h: the name goes to the broker.
    let (mut s, reply) = socks_request(proxy, &socks_domain_request("echo.vetto.test", port)).await;
    assert_eq!(reply[..4], [5, 0, 0, 1]);
    echo_roundtrip(&mut s, b"through socks").await;
    close_and_wait_eof(s).await;
    let ev = b.event().await;
    assert_eq!(ev.listener, ListenerKind::Socks5);
    assert_eq!(ev.decision, EventDecision::Allow);
    assert_eq!(ev.dialled, Some(echo));
    assert_eq!((ev.bytes_up, ev.bytes_down), (13, 13));

    // IPv4 literal admitted by the CIDR with that port.
    let mut req = vec![5, 1, 0, 1, 127, 0, 0, 2];
    req.extend_from_slice(&port.to_be_bytes());
    let (mut s, reply) = socks_request(proxy, &req).await;
    assert_eq!(reply[1], 0);
    echo_roundtrip(&mut s, b"literal").await;
    drop(s);
    assert_eq!(b.event().await.decision, EventDecision::Allow);

    // Refusals and failures, each with its reply code.
    let cases: Vec<(Vec<u8>, u8, &str)> = vec![
        (
            socks_domain_request("evil.vetto.test", port),
            0x02,
            "not-allowlisted",
        ),
        (
            socks_domain_request("meta.vetto.test", port),
            0x02,
            "non-public-answer",
        ),
        (
            socks_domain_request("gone.vetto.test", 443),
            0x04,
            "empty-answer",
        ),
        (
            socks_domain_request("closed.vetto.test", closed),
            0x05,
            "connect-refused",
        ),
        (
            socks_domain_request("a@echo.vetto.test", port),
            0x02,
            "invalid-destination",
        ),
        (
            {
                let mut r = vec![5, 1, 0, 1, 127, 0, 0, 2];
                r.extend_from_slice(&closed.to_be_bytes());
                r
            },
            0x02,
            "ip-literal-not-allowed",
        ),
        (
            // UDP ASSOCIATE
            vec![5, 3, 0, 1, 0, 0, 0, 0, 0, 0],
            0x07,
            "command-not-supported",
        ),
        (
            // BIND
            socks_domain_request("echo.vetto.test", port)
                .into_iter()
                .enumerate()
                .map(|(i, b)| if i == 1 { 2 } else { b })
                .collect(),
            0x07,
            "command-not-supported",
        ),
    ];
    for (req, rep, reason) in cases {
        let (mut s, reply) = socks_request(proxy, &req).await;
        assert_eq!(reply[1], rep, "{reason}");
        let mut sink = Vec::new();
        timeout(T, s.read_to_end(&mut sink)).await.unwrap().unwrap();
        drop(s);
        let ev = b.event().await;
        assert_eq!(ev.reason, reason);
        assert_ne!(ev.decision, EventDecision::Allow);
    }
    assert_eq!(dns.queries_for("evil.vetto.test"), 0);
    assert_eq!(accepted.load(Ordering::SeqCst), 2);

    // No "no authentication" method offered: 0xFF and close.
    let mut s = TcpStream::connect(proxy).await.unwrap();
    s.write_all(&[5, 1, 2]).await.unwrap();
    let mut all = Vec::new();
    timeout(T, s.read_to_end(&mut all)).await.unwrap().unwrap();
    assert_eq!(all, [5, 0xff]);
    assert_eq!(b.event().await.reason, "no-acceptable-auth");
}

// ---------------------------------------------------------------------------------------
// 5. HostPort
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn host_port_relays_to_loopback() {
    let dns = StubDns::start().await;
    let (echo, accepted) = echo_server("127.0.0.1:0").await;
    let mut b = Broker::start(
        spec(&[], &[], &dns),
        &[ListenerKind::HostPort(echo), ListenerKind::HttpProxy],
    )
    .await;
    let mut s = TcpStream::connect(b.addrs[0]).await.unwrap();
    echo_roundtrip(&mut s, b"to the host").await;
    close_and_wait_eof(s).await;
    let ev = b.event().await;
    assert_eq!(ev.listener, ListenerKind::HostPort(echo));
    assert_eq!(ev.decision, EventDecision::Allow);
    assert_eq!(ev.dialled, Some(echo));
    assert_eq!((ev.bytes_up, ev.bytes_down), (11, 11));
    assert_eq!(accepted.load(Ordering::SeqCst), 1);
    // The proxy listener beside it still refuses everything (empty allowlist).
    let r = connect(b.addrs[1], &format!("127.0.0.1:{}", echo.port()), b"").await;
    assert_eq!(r.status, 403);
    assert_eq!(accepted.load(Ordering::SeqCst), 1);
}

/// The broker is stopped (the session ended) while connections are open: each is still
/// recorded, as the broker decided it. A relay under way reads `allow`/`aborted` with the
/// bytes it had moved, on every relaying path; a connection cut before its decision reads
/// `error`/`aborted`. (`vetto __broker` stops by dropping this very future.)
#[tokio::test]
async fn connections_cut_by_the_brokers_stop_are_recorded_as_decided() {
    let dns = StubDns::start().await;
    let (echo, _) = echo_server("127.0.0.2:0").await;
    let (host_echo, _) = echo_server("127.0.0.1:0").await;
    let port = echo.port();
    dns.set("echo.vetto.test", &["127.0.0.2"]);
    let kinds = [
        ListenerKind::HttpProxy,
        ListenerKind::Socks5,
        ListenerKind::HostPort(host_echo),
    ];
    let mut listeners = Vec::new();
    let mut addrs = Vec::new();
    for kind in kinds {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        addrs.push(l.local_addr().unwrap());
        listeners.push((kind, l));
    }
    let (tx, mut events) = unbounded_channel();
    let spec = spec(
        &[format!("echo.vetto.test:{port}")],
        &["127.0.0.2/32"],
        &dns,
    );
    let server = tokio::spawn(serve_with_events(spec, listeners, tx));

    // CONNECT, relaying: 9 bytes each way, still open.
    let mut r = connect(addrs[0], &format!("echo.vetto.test:{port}"), b"").await;
    assert_eq!(r.status, 200);
    echo_roundtrip(&mut r.stream, b"ping-pong").await;
    // SOCKS5, relaying: 5 bytes each way, still open.
    let (mut socks, rest) =
        socks_request(addrs[1], &socks_domain_request("echo.vetto.test", port)).await;
    assert_eq!(rest[1], 0, "SOCKS5 reply {rest:?}");
    echo_roundtrip(&mut socks, b"socks").await;
    // Host port, relaying: 11 bytes each way, still open.
    let mut host = TcpStream::connect(addrs[2]).await.unwrap();
    echo_roundtrip(&mut host, b"to the host").await;
    // A proxy client that has not finished its request: no decision yet.
    let mut pending = TcpStream::connect(addrs[0]).await.unwrap();
    pending.write_all(b"CONNECT echo.vetto.test").await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;

    server.abort();
    let _ = server.await;
    let mut got = Vec::new();
    while let Ok(Some(ev)) = timeout(T, events.recv()).await {
        if let BrokerEvent::Connection(e) = ev {
            got.push(e);
        }
    }
    let find = |listener: ListenerKind, decision: EventDecision| {
        got.iter()
            .find(|e| e.listener == listener && e.decision == decision)
            .unwrap_or_else(|| panic!("no {decision:?} event on {listener}: {got:?}"))
    };
    for (listener, bytes) in [
        (ListenerKind::HttpProxy, 9),
        (ListenerKind::Socks5, 5),
        (ListenerKind::HostPort(host_echo), 11),
    ] {
        let ev = find(listener, EventDecision::Allow);
        assert_eq!(ev.reason, "aborted", "{ev:?}");
        assert_eq!((ev.bytes_up, ev.bytes_down), (bytes, bytes), "{ev:?}");
        assert!(ev.dialled.is_some(), "{ev:?}");
    }
    let undecided = find(ListenerKind::HttpProxy, EventDecision::Error);
    assert_eq!(undecided.reason, "aborted");
    assert_eq!(undecided.dialled, None);
    assert_eq!(got.len(), 4, "{got:?}");
    drop((r, socks, host, pending));
}

/// A stop with a drain: nothing new is accepted, a relay whose client closes within the
/// drain ends on its own (`closed`, with its bytes), one still open after it is cut
/// (`aborted`), and `serve_until` returns Ok.
#[tokio::test]
async fn a_stop_drains_relays_that_end_and_cuts_the_rest() {
    let dns = StubDns::start().await;
    let (host_echo, _) = echo_server("127.0.0.1:0").await;
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let (tx, mut events) = unbounded_channel();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(vetto_broker::serve_until(
        spec(&[], &[], &dns),
        vec![(ListenerKind::HostPort(host_echo), l)],
        tx,
        async {
            let _ = stop_rx.await;
        },
        Duration::from_millis(600),
    ));
    let mut ends = TcpStream::connect(addr).await.unwrap();
    echo_roundtrip(&mut ends, b"ends").await;
    let mut stays = TcpStream::connect(addr).await.unwrap();
    echo_roundtrip(&mut stays, b"stays open").await;
    let stopped_at = std::time::Instant::now();
    stop_tx.send(()).unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    // The listener is closed: a new connection is refused.
    assert!(
        TcpStream::connect(addr).await.is_err(),
        "still accepting after the stop"
    );
    // Within the drain, one relay ends on its own.
    close_and_wait_eof(ends).await;
    let r = timeout(T, server).await.unwrap().unwrap();
    assert!(r.is_ok(), "{r:?}");
    assert!(
        stopped_at.elapsed() >= Duration::from_millis(600),
        "the drain was not waited"
    );
    let mut got = Vec::new();
    while let Ok(Some(ev)) = timeout(T, events.recv()).await {
        if let BrokerEvent::Connection(e) = ev {
            got.push(e);
        }
    }
    assert_eq!(got.len(), 2, "{got:?}");
    let by = |up: u64| {
        got.iter()
            .find(|e| e.bytes_up == up)
            .unwrap_or_else(|| panic!("{got:?}"))
    };
    let (ended, cut) = (by(4), by(10));
    assert_eq!(
        (ended.decision, ended.reason.as_str()),
        (EventDecision::Allow, "closed")
    );
    assert_eq!(ended.bytes_down, 4);
    assert_eq!(
        (cut.decision, cut.reason.as_str()),
        (EventDecision::Allow, "aborted")
    );
    assert_eq!(cut.bytes_down, 10);
    drop(stays);
}

#[tokio::test]
async fn serve_refuses_bad_setups() {
    let l = || std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    // A non-loopback HostPort target is refused before anything is accepted (and is never
    // dialled: serve returns at once).
    let err = serve(
        BrokerSpec::default(),
        vec![
            (ListenerKind::HttpProxy, l()),
            (ListenerKind::HostPort("192.0.2.1:80".parse().unwrap()), l()),
        ],
    )
    .await
    .unwrap_err();
    assert!(
        matches!(err, BrokerError::HostPortNotLoopback { index: 1, .. }),
        "{err}"
    );
    assert!(matches!(
        serve(BrokerSpec::default(), vec![]).await,
        Err(BrokerError::NoListeners)
    ));
    let bad = BrokerSpec {
        allow: vec!["exa mple.com".into()],
        ..BrokerSpec::default()
    };
    assert!(matches!(
        serve(bad, vec![(ListenerKind::HttpProxy, l())]).await,
        Err(BrokerError::Policy(_))
    ));
}

// ---------------------------------------------------------------------------------------
// 6. Limits
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn max_connections_is_enforced() {
    let dns = StubDns::start().await;
    let (echo, _) = echo_server("127.0.0.1:0").await;
    let mut b = Broker::start(
        BrokerSpec {
            max_connections: 1,
            ..spec(&[], &[], &dns)
        },
        &[
            ListenerKind::HostPort(echo),
            ListenerKind::HttpProxy,
            ListenerKind::Socks5,
        ],
    )
    .await;
    // Hold the only slot.
    let mut held = TcpStream::connect(b.addrs[0]).await.unwrap();
    echo_roundtrip(&mut held, b"hold").await;

    let r = connect(b.addrs[1], "a.vetto.test:443", b"").await;
    assert_eq!(r.status, 503);
    assert_eq!(r.headers["x-vetto-deny"], "too-many-connections");
    let ev = b.event().await;
    assert_eq!(ev.reason, "too-many-connections");
    assert_eq!(ev.target.as_deref(), Some("a.vetto.test:443"));

    let (s, reply) = socks_request(b.addrs[2], &socks_domain_request("a.vetto.test", 443)).await;
    assert_eq!(reply[1], 0x01);
    drop(s);
    assert_eq!(b.event().await.reason, "too-many-connections");

    let mut extra = TcpStream::connect(b.addrs[0]).await.unwrap();
    let mut sink = Vec::new();
    timeout(T, extra.read_to_end(&mut sink))
        .await
        .unwrap()
        .unwrap();
    assert!(sink.is_empty());
    assert_eq!(b.event().await.reason, "too-many-connections");

    // Free the slot: the next request is handled normally (refused by policy, not 503).
    close_and_wait_eof(held).await;
    assert_eq!(b.event().await.decision, EventDecision::Allow);
    let r = connect(b.addrs[1], "a.vetto.test:443", b"").await;
    assert_eq!(r.status, 403);
    assert_eq!(dns.queries_for("a.vetto.test"), 0);
}

#[tokio::test]
async fn rate_limit_per_destination() {
    let dns = StubDns::start().await;
    let (echo, accepted) = echo_server("127.0.0.2:0").await;
    let port = echo.port();
    dns.set("echo.vetto.test", &["127.0.0.2"]);
    let mut b = Broker::start(
        BrokerSpec {
            connects_per_minute: 2,
            ..spec(
                &[
                    format!("echo.vetto.test:{port}"),
                    format!("other.vetto.test:{port}"),
                ],
                &["127.0.0.2/32"],
                &dns,
            )
        },
        &[ListenerKind::HttpProxy, ListenerKind::Socks5],
    )
    .await;
    for _ in 0..2 {
        let mut r = connect(b.addrs[0], &format!("echo.vetto.test:{port}"), b"").await;
        assert_eq!(r.status, 200);
        echo_roundtrip(&mut r.stream, b"x").await;
        close_and_wait_eof(r.stream).await;
        assert_eq!(b.event().await.decision, EventDecision::Allow);
    }
    let r = connect(b.addrs[0], &format!("echo.vetto.test:{port}"), b"").await;
    assert_eq!(r.status, 429);
    assert_eq!(r.headers["x-vetto-deny"], "rate-limited");
    assert_eq!(b.event().await.reason, "rate-limited");
    // The limit is per destination and shared by the listeners.
    let (s, reply) =
        socks_request(b.addrs[1], &socks_domain_request("echo.vetto.test", port)).await;
    assert_eq!(reply[1], 0x02);
    drop(s);
    assert_eq!(b.event().await.reason, "rate-limited");
    // Another destination has its own budget (it then fails on NXDOMAIN, not the limit).
    let r = connect(b.addrs[0], &format!("other.vetto.test:{port}"), b"").await;
    assert_eq!(r.headers["x-vetto-deny"], "empty-answer");
    assert_eq!(accepted.load(Ordering::SeqCst), 2);
    // Rate-limited attempts were not resolved: 2 connections × (A + AAAA).
    assert_eq!(dns.queries_for("echo.vetto.test"), 4);
}

#[tokio::test]
async fn idle_relays_are_closed() {
    let dns = StubDns::start().await;
    let (echo, _) = echo_server("127.0.0.1:0").await;
    let mut b = Broker::start(
        BrokerSpec {
            idle_timeout_secs: 1,
            ..spec(&[], &[], &dns)
        },
        &[ListenerKind::HostPort(echo)],
    )
    .await;
    let mut s = TcpStream::connect(b.addrs[0]).await.unwrap();
    echo_roundtrip(&mut s, b"then silence").await;
    let started = std::time::Instant::now();
    let mut sink = Vec::new();
    timeout(T, s.read_to_end(&mut sink)).await.unwrap().unwrap();
    assert!(started.elapsed() >= Duration::from_millis(800));
    let ev = b.event().await;
    assert_eq!(ev.reason, "idle-timeout");
    assert_eq!(ev.decision, EventDecision::Allow);
    assert_eq!((ev.bytes_up, ev.bytes_down), (12, 12));
}
