//! `make bench`: the latency a persistent grant adds over an allowlist entry. The real broker
//! (`serve_with_events`, the same code `vetto __broker` runs) on a loopback listener, a stub
//! DNS server and an upstream on 127.0.0.1 (admitted by `allow_cidrs`); `allowed.bench` is on
//! the allowlist, `granted.bench` is not and has a persistent grant in the approvals store (so
//! each of its connections also looks the grant up). For each connection: connect to the
//! proxy, `CONNECT name:port`, read the `200`: the time until then. Interleaved rounds, then
//! the medians and their difference. Only loopback is used.
//!
//! Usage: approval_bench DIR [CONNECTIONS]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream, UdpSocket};
use std::time::{Duration, Instant};

use vetto_broker::approvals::{ApprovalSpec, GateMode, RuleStore, Verdict};
use vetto_broker::server::{serve_with_events, BrokerSpec, ListenerKind};

/// Answer every A query with 127.0.0.1 (and AAAA with nothing).
fn dns(sock: UdpSocket) {
    let mut buf = [0u8; 512];
    while let Ok((n, from)) = sock.recv_from(&mut buf) {
        let q = &buf[..n];
        let mut i = 12;
        while i < q.len() && q[i] != 0 {
            i += 1 + q[i] as usize;
        }
        if i + 5 > q.len() {
            continue;
        }
        let qtype = u16::from_be_bytes([q[i + 1], q[i + 2]]);
        let mut r = q[..i + 5].to_vec();
        r[2] = 0x81;
        r[3] = 0x80;
        let a = u16::from(qtype == 1);
        r[6..8].copy_from_slice(&a.to_be_bytes());
        r[8..12].copy_from_slice(&[0, 0, 0, 0]);
        if a == 1 {
            r.extend_from_slice(&[0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 5, 0, 4, 127, 0, 0, 1]);
        }
        let _ = sock.send_to(&r, from);
    }
}

fn once(proxy: std::net::SocketAddr, target: &str) -> Duration {
    let t = Instant::now();
    let mut s = TcpStream::connect(proxy).expect("proxy");
    s.set_nodelay(true).expect("nodelay");
    write!(s, "CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n").expect("send");
    let mut buf = [0u8; 256];
    let mut got = Vec::new();
    while !got.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = s.read(&mut buf).expect("read");
        assert!(n > 0, "the proxy closed: {}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&buf[..n]);
    }
    assert!(
        got.starts_with(b"HTTP/1.1 200"),
        "{target}: {}",
        String::from_utf8_lossy(&got)
    );
    t.elapsed()
}

fn median(v: &mut [Duration]) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    let mut args = std::env::args().skip(1);
    let dir = std::path::PathBuf::from(args.next().expect("usage: approval_bench DIR [N]"));
    let n: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(1000);
    // A state directory as vetto makes one (0700): the store refuses anything looser.
    std::os::unix::fs::DirBuilderExt::mode(std::fs::DirBuilder::new().recursive(true), 0o700)
        .create(&dir)
        .expect("dir");
    let db = dir.join("approvals.db");
    let _ = std::fs::remove_file(&db);

    let upstream = TcpListener::bind("127.0.0.1:0").expect("upstream");
    let port = upstream.local_addr().expect("addr").port();
    std::thread::spawn(move || {
        // Accept and drop: the client closes after the 200.
        for c in upstream.incoming() {
            drop(c);
        }
    });
    let dns_sock = UdpSocket::bind("127.0.0.1:0").expect("dns");
    let resolver = dns_sock.local_addr().expect("addr").to_string();
    std::thread::spawn(move || dns(dns_sock));

    let scope = "project /bench";
    RuleStore::open(&db)
        .expect("store")
        .add(
            scope,
            &format!("granted.bench:{port}"),
            Verdict::Grant,
            "uid 0",
            "bench",
        )
        .expect("grant");
    let spec = BrokerSpec {
        allow: vec![format!("allowed.bench:{port}")],
        allow_cidrs: vec!["127.0.0.1/32".into()],
        resolver: Some(resolver),
        connects_per_minute: 1_000_000,
        approvals: Some(ApprovalSpec {
            mode: GateMode::Park,
            terminal: false,
            timeout_secs: 60,
            scope: scope.into(),
            rules: Some(db),
            session: "bench".into(),
            owner_uid: 0,
            control_fd: None,
        }),
        ..BrokerSpec::default()
    };
    let listener = TcpListener::bind("127.0.0.1:0").expect("proxy");
    let proxy = listener.local_addr().expect("addr");
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        rt.block_on(async move {
            tokio::spawn(async move { while rx.recv().await.is_some() {} });
            let r = serve_with_events(spec, vec![(ListenerKind::HttpProxy, listener)], tx).await;
            eprintln!("broker stopped: {r:?}");
        });
    });
    let allowed = format!("allowed.bench:{port}");
    let granted = format!("granted.bench:{port}");
    // Warm up both paths.
    for _ in 0..50 {
        once(proxy, &allowed);
        once(proxy, &granted);
    }
    let (mut a, mut g) = (Vec::with_capacity(n), Vec::with_capacity(n));
    for i in 0..n {
        // Alternate which goes first, so neither always follows the other.
        if i % 2 == 0 {
            a.push(once(proxy, &allowed));
            g.push(once(proxy, &granted));
        } else {
            g.push(once(proxy, &granted));
            a.push(once(proxy, &allowed));
        }
    }
    let (ma, mg) = (median(&mut a), median(&mut g));
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    println!(
        "{n} CONNECTs each, interleaved: allowlisted median {:.1} us, persistent grant median {:.1} us, added {:+.1} us ({:.3} ms; goal <= 0.1 ms)",
        us(ma),
        us(mg),
        us(mg) - us(ma),
        (us(mg) - us(ma)) / 1000.0
    );
}
