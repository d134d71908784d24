//! A minimal DNS-over-UDP stub client, used when the broker is told to query a specific
//! DNS server instead of the host's resolver.
//!
//! For one validated [`DnsName`] it sends an `A` and an `AAAA` query (recursion desired,
//! EDNS0 with a 1232-byte payload) from a fresh ephemeral port of a socket `connect`ed to
//! the server, each with a random 16-bit id. A reply is accepted only if it comes from the
//! server, carries the id of an outstanding query and echoes exactly its question;
//! anything else is ignored. Each attempt waits [`ATTEMPT_TIMEOUT`]; unanswered queries
//! are sent once more (new socket, new ids). From an accepted reply, every `A`/`AAAA`
//! record of the answer section is collected, whatever its owner name: `CNAME` records are
//! not followed (the recursive server already did that) and the addresses that follow them
//! are kept. Nothing is cached. A truncated reply is an error (no TCP fallback).
//!
//! The caller checks the whole returned set (see [`crate::check_answer_set`]); this module
//! only transports it.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use thiserror::Error;
use tokio::net::UdpSocket;
use tokio::time::{timeout_at, Instant};

use crate::plan::Resolver;
use crate::target::DnsName;

/// How long one attempt waits for the replies.
pub const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(3);
/// Attempts per query (the first send plus one retry).
pub const ATTEMPTS: usize = 2;
/// The UDP payload size advertised with EDNS0.
pub const EDNS_PAYLOAD: u16 = 1232;

const TYPE_A: u16 = 1;
const TYPE_AAAA: u16 = 28;
const TYPE_OPT: u16 = 41;
const CLASS_IN: u16 = 1;
const RCODE_NXDOMAIN: u8 = 3;

/// A record type this client asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueryType {
    /// IPv4 addresses.
    A,
    /// IPv6 addresses.
    Aaaa,
}

impl QueryType {
    fn code(self) -> u16 {
        match self {
            QueryType::A => TYPE_A,
            QueryType::Aaaa => TYPE_AAAA,
        }
    }
}

/// Encode a query for `name`/`qtype` with the given id: RD set, one question, one EDNS0
/// OPT record.
pub fn build_query(id: u16, name: &DnsName, qtype: QueryType) -> Vec<u8> {
    let mut q = Vec::with_capacity(12 + name.as_str().len() + 2 + 4 + 11);
    q.extend_from_slice(&id.to_be_bytes());
    q.extend_from_slice(&0x0100u16.to_be_bytes()); // QR=0 opcode=0 RD=1
    q.extend_from_slice(&1u16.to_be_bytes()); // QDCOUNT
    q.extend_from_slice(&0u16.to_be_bytes()); // ANCOUNT
    q.extend_from_slice(&0u16.to_be_bytes()); // NSCOUNT
    q.extend_from_slice(&1u16.to_be_bytes()); // ARCOUNT (OPT)
    for label in name.as_str().split('.') {
        // A DnsName has 1..=63-byte ASCII labels, so the length fits in one byte.
        q.push(label.len() as u8);
        q.extend_from_slice(label.as_bytes());
    }
    q.push(0);
    q.extend_from_slice(&qtype.code().to_be_bytes());
    q.extend_from_slice(&CLASS_IN.to_be_bytes());
    // OPT pseudo-record: root name, type 41, class = payload size, TTL 0, no options.
    q.push(0);
    q.extend_from_slice(&TYPE_OPT.to_be_bytes());
    q.extend_from_slice(&EDNS_PAYLOAD.to_be_bytes());
    q.extend_from_slice(&0u32.to_be_bytes());
    q.extend_from_slice(&0u16.to_be_bytes());
    q
}

/// What a reply that matched a query said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplyError {
    /// TC bit set.
    Truncated,
    /// A non-zero RCODE other than NXDOMAIN (SERVFAIL, REFUSED...).
    Rcode(u8),
    /// The answer section could not be parsed.
    Malformed(&'static str),
}

impl std::fmt::Display for ReplyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReplyError::Truncated => f.write_str("truncated reply (TCP fallback not supported)"),
            ReplyError::Rcode(2) => f.write_str("server failure (SERVFAIL)"),
            ReplyError::Rcode(5) => f.write_str("query refused by the server (REFUSED)"),
            ReplyError::Rcode(r) => write!(f, "error reply (RCODE {r})"),
            ReplyError::Malformed(what) => write!(f, "malformed reply: {what}"),
        }
    }
}

impl std::error::Error for ReplyError {}

/// Why [`resolve_udp`] has no answer: the payload of the `io::Error` it returns (whose
/// `source()` is then this error's source).
#[derive(Debug, Error)]
pub enum DnsError {
    /// The server answered a query with an error.
    #[error("DNS server {server}: {qtype:?} query")]
    Reply {
        /// The server.
        server: SocketAddr,
        /// The query it answered.
        qtype: QueryType,
        /// What the reply said.
        #[source]
        source: ReplyError,
    },
    /// Sending or receiving failed, or no reply came in time.
    #[error("DNS server {server}")]
    Io {
        /// The server.
        server: SocketAddr,
        /// The socket's error.
        #[source]
        source: io::Error,
    },
    /// No attempt was made at all.
    #[error("DNS server {server} did not answer")]
    NoAnswer {
        /// The server.
        server: SocketAddr,
    },
    /// No random query id could be drawn.
    #[error("no randomness for DNS ids")]
    Random(#[source] getrandom::Error),
}

/// Parse a datagram as the reply to query `id` for `name`/`qtype`.
///
/// `None`: the datagram is not a reply to this query (wrong id, not a response, different
/// question, unparseable header or question) and must be ignored. `Some(Ok(addrs))`: every
/// `A`/`AAAA` record of the answer section (NXDOMAIN gives an empty list).
pub fn parse_reply(
    msg: &[u8],
    id: u16,
    name: &DnsName,
    qtype: QueryType,
) -> Option<Result<Vec<IpAddr>, ReplyError>> {
    let mut r = Reader { msg, pos: 0 };
    if r.u16()? != id {
        return None;
    }
    let flags = r.u16()?;
    let (qr, opcode, tc, rcode) = (
        flags & 0x8000 != 0,
        (flags >> 11) & 0xf,
        flags & 0x0200 != 0,
        (flags & 0xf) as u8,
    );
    if !qr || opcode != 0 {
        return None;
    }
    let (qdcount, ancount) = (r.u16()?, r.u16()?);
    r.u16()?; // NSCOUNT
    r.u16()?; // ARCOUNT
    if qdcount != 1 {
        return None;
    }
    let qname = r.name()?;
    if !qname.eq_ignore_ascii_case(name.as_str())
        || r.u16()? != qtype.code()
        || r.u16()? != CLASS_IN
    {
        return None;
    }
    if tc {
        return Some(Err(ReplyError::Truncated));
    }
    match rcode {
        0 => {}
        RCODE_NXDOMAIN => return Some(Ok(Vec::new())),
        other => return Some(Err(ReplyError::Rcode(other))),
    }
    Some(r.answers(ancount))
}

struct Reader<'a> {
    msg: &'a [u8],
    pos: usize,
}

impl Reader<'_> {
    fn bytes(&mut self, n: usize) -> Option<&[u8]> {
        let end = self.pos.checked_add(n)?;
        let s = self.msg.get(self.pos..end)?;
        self.pos = end;
        Some(s)
    }

    fn u8(&mut self) -> Option<u8> {
        self.bytes(1).map(|b| b[0])
    }

    fn u16(&mut self) -> Option<u16> {
        self.bytes(2).map(|b| u16::from_be_bytes([b[0], b[1]]))
    }

    fn u32(&mut self) -> Option<u32> {
        self.bytes(4)
            .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// Skip a (possibly compressed) name without following pointers.
    fn skip_name(&mut self) -> Option<()> {
        loop {
            let len = self.u8()?;
            match len & 0xc0 {
                0x00 if len == 0 => return Some(()),
                0x00 => {
                    self.bytes(usize::from(len))?;
                }
                0xc0 => {
                    self.u8()?;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    /// Decode a (possibly compressed) name at the cursor into dotted form, following at
    /// most 16 pointers; the cursor ends after the name's in-place encoding.
    fn name(&mut self) -> Option<String> {
        let mut out = String::new();
        let mut pos = self.pos;
        let mut end_of_name: Option<usize> = None;
        let mut jumps = 0;
        loop {
            let len = *self.msg.get(pos)?;
            match len & 0xc0 {
                0x00 if len == 0 => {
                    self.pos = end_of_name.unwrap_or(pos + 1);
                    return Some(out);
                }
                0x00 => {
                    let label = self.msg.get(pos + 1..pos + 1 + usize::from(len))?;
                    if !out.is_empty() {
                        out.push('.');
                    }
                    // Keep the bytes verbatim where printable ASCII; anything else can
                    // never equal a DnsName, so a placeholder is enough.
                    out.extend(label.iter().map(|&b| {
                        if b.is_ascii_graphic() {
                            char::from(b)
                        } else {
                            '\u{fffd}'
                        }
                    }));
                    if out.len() > 255 {
                        return None;
                    }
                    pos += 1 + usize::from(len);
                }
                0xc0 => {
                    let lo = *self.msg.get(pos + 1)?;
                    end_of_name.get_or_insert(pos + 2);
                    jumps += 1;
                    if jumps > 16 {
                        return None;
                    }
                    pos = usize::from(u16::from_be_bytes([len & 0x3f, lo]));
                }
                _ => return None,
            }
        }
    }

    fn answers(&mut self, ancount: u16) -> Result<Vec<IpAddr>, ReplyError> {
        let bad = ReplyError::Malformed;
        let mut addrs = Vec::new();
        for _ in 0..ancount {
            self.skip_name().ok_or(bad("bad owner name"))?;
            let rtype = self.u16().ok_or(bad("short record"))?;
            let class = self.u16().ok_or(bad("short record"))?;
            self.u32().ok_or(bad("short record"))?; // TTL
            let rdlen = self.u16().ok_or(bad("short record"))?;
            let rdata = self
                .bytes(usize::from(rdlen))
                .ok_or(bad("record data past end"))?;
            if class != CLASS_IN {
                continue;
            }
            match rtype {
                TYPE_A => {
                    let b: [u8; 4] = rdata.try_into().map_err(|_| bad("A record length"))?;
                    addrs.push(IpAddr::V4(Ipv4Addr::from(b)));
                }
                TYPE_AAAA => {
                    let b: [u8; 16] = rdata.try_into().map_err(|_| bad("AAAA record length"))?;
                    addrs.push(IpAddr::V6(Ipv6Addr::from(b)));
                }
                _ => {} // CNAME, DNAME, RRSIG...: not followed, not used.
            }
        }
        Ok(addrs)
    }
}

fn random_id() -> io::Result<u16> {
    getrandom::u32()
        .map(|v| v as u16)
        .map_err(|e| io::Error::other(DnsError::Random(e)))
}

fn local_bind_addr(server: SocketAddr) -> SocketAddr {
    match server {
        SocketAddr::V4(_) => SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0)),
        SocketAddr::V6(_) => SocketAddr::from((Ipv6Addr::UNSPECIFIED, 0)),
    }
}

/// A [`Resolver`] asking one DNS server over UDP ([`resolve_udp`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdpResolver {
    /// The server's address.
    pub server: SocketAddr,
}

impl Resolver for UdpResolver {
    async fn resolve(&self, name: &DnsName, _port: u16) -> io::Result<Vec<IpAddr>> {
        resolve_udp(self.server, name).await
    }
}

/// Resolve `name` to all its `A` and `AAAA` addresses by asking `server` over UDP.
///
/// Succeeds if at least one of the two queries got a valid reply (the `A` addresses come
/// first); fails if neither did. An empty `Ok` means the name has no addresses.
pub async fn resolve_udp(server: SocketAddr, name: &DnsName) -> io::Result<Vec<IpAddr>> {
    let types = [QueryType::A, QueryType::Aaaa];
    let mut results: [Option<Result<Vec<IpAddr>, ReplyError>>; 2] = [None, None];
    let mut last_io: Option<io::Error> = None;
    for _ in 0..ATTEMPTS {
        if results.iter().all(Option::is_some) {
            break;
        }
        if let Err(e) = attempt(server, name, &types, &mut results).await {
            last_io = Some(e);
        }
    }
    let mut addrs = Vec::new();
    let mut any_ok = false;
    let mut first_err: Option<DnsError> = None;
    for (qtype, result) in types.into_iter().zip(results) {
        match result {
            Some(Ok(a)) => {
                any_ok = true;
                addrs.extend(a);
            }
            Some(Err(source)) => {
                first_err.get_or_insert(DnsError::Reply {
                    server,
                    qtype,
                    source,
                });
            }
            None => {}
        }
    }
    if any_ok {
        return Ok(addrs);
    }
    Err(match (first_err, last_io) {
        (Some(e), _) => io::Error::other(e),
        (None, Some(source)) => io::Error::new(source.kind(), DnsError::Io { server, source }),
        (None, None) => io::Error::new(io::ErrorKind::TimedOut, DnsError::NoAnswer { server }),
    })
}

/// One attempt: send every still-unanswered query from a fresh socket and collect replies
/// until all are answered or [`ATTEMPT_TIMEOUT`] passes.
async fn attempt(
    server: SocketAddr,
    name: &DnsName,
    types: &[QueryType; 2],
    results: &mut [Option<Result<Vec<IpAddr>, ReplyError>>; 2],
) -> io::Result<()> {
    let sock = UdpSocket::bind(local_bind_addr(server)).await?;
    sock.connect(server).await?;
    let mut ids = [0u16; 2];
    for (i, qtype) in types.iter().enumerate() {
        if results[i].is_none() {
            ids[i] = random_id()?;
            sock.send(&build_query(ids[i], name, *qtype)).await?;
        }
    }
    let deadline = Instant::now() + ATTEMPT_TIMEOUT;
    let mut buf = vec![0u8; 4096];
    while results.iter().any(Option::is_none) {
        let n = match timeout_at(deadline, sock.recv(&mut buf)).await {
            Err(_elapsed) => {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "no reply within 3 s",
                ))
            }
            Ok(r) => r?,
        };
        for (i, qtype) in types.iter().enumerate() {
            if results[i].is_none() {
                if let Some(r) = parse_reply(&buf[..n], ids[i], name, *qtype) {
                    results[i] = Some(r);
                    break;
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // Tests: a panic is the failure report.
mod tests {
    use super::*;

    fn n(s: &str) -> DnsName {
        DnsName::parse(s).unwrap()
    }

    /// A reply to `query` with the given raw answer records appended.
    fn reply(query: &[u8], flags: u16, ancount: u16, answers: &[u8]) -> Vec<u8> {
        // Header + question of the query (drop its OPT record: 11 bytes).
        let mut r = query[..query.len() - 11].to_vec();
        r[2..4].copy_from_slice(&flags.to_be_bytes());
        r[6..8].copy_from_slice(&ancount.to_be_bytes());
        r[10..12].copy_from_slice(&0u16.to_be_bytes());
        r.extend_from_slice(answers);
        r
    }

    fn rr(name: &[u8], rtype: u16, rdata: &[u8]) -> Vec<u8> {
        let mut v = name.to_vec();
        v.extend_from_slice(&rtype.to_be_bytes());
        v.extend_from_slice(&CLASS_IN.to_be_bytes());
        v.extend_from_slice(&60u32.to_be_bytes());
        v.extend_from_slice(&(rdata.len() as u16).to_be_bytes());
        v.extend_from_slice(rdata);
        v
    }

    const PTR_QNAME: &[u8] = &[0xc0, 12];

    #[test]
    fn query_encoding() {
        let q = build_query(0xabcd, &n("Www.Example.com"), QueryType::Aaaa);
        assert_eq!(&q[..12], &[0xab, 0xcd, 1, 0, 0, 1, 0, 0, 0, 0, 0, 1]);
        assert_eq!(&q[12..29], b"\x03www\x07example\x03com\x00");
        assert_eq!(&q[29..33], &[0, 28, 0, 1]);
        assert_eq!(&q[33..], &[0, 0, 41, 0x04, 0xd0, 0, 0, 0, 0, 0, 0]);
    }

    #[test]
    fn cname_then_addresses() {
        let name = n("a.example");
        let q = build_query(7, &name, QueryType::A);
        let mut ans = rr(PTR_QNAME, 5, b"\x01b\x07example\x00");
        ans.extend(rr(b"\x01b\x07example\x00", TYPE_A, &[192, 0, 2, 1]));
        ans.extend(rr(PTR_QNAME, TYPE_A, &[198, 51, 100, 2]));
        let msg = reply(&q, 0x8180, 3, &ans);
        assert_eq!(
            parse_reply(&msg, 7, &name, QueryType::A),
            Some(Ok(vec![
                "192.0.2.1".parse().unwrap(),
                "198.51.100.2".parse().unwrap()
            ]))
        );
        // Wrong id, wrong type, wrong name, or a query (QR=0): ignored.
        assert_eq!(parse_reply(&msg, 8, &name, QueryType::A), None);
        assert_eq!(parse_reply(&msg, 7, &name, QueryType::Aaaa), None);
        assert_eq!(parse_reply(&msg, 7, &n("b.example"), QueryType::A), None);
        let mut not_resp = msg.clone();
        not_resp[2] &= 0x7f;
        assert_eq!(parse_reply(&not_resp, 7, &name, QueryType::A), None);
        // Case of the echoed question does not matter.
        let mut upper = msg.clone();
        upper[13] = b'A';
        assert!(parse_reply(&upper, 7, &name, QueryType::A).is_some());
        // A short datagram is ignored.
        assert_eq!(parse_reply(&msg[..5], 7, &name, QueryType::A), None);
    }

    #[test]
    fn aaaa_and_errors() {
        let name = n("a.example");
        let q = build_query(9, &name, QueryType::Aaaa);
        let v6: Ipv6Addr = "2001:db8::1".parse().unwrap();
        let msg = reply(&q, 0x8180, 1, &rr(PTR_QNAME, TYPE_AAAA, &v6.octets()));
        assert_eq!(
            parse_reply(&msg, 9, &name, QueryType::Aaaa),
            Some(Ok(vec![IpAddr::V6(v6)]))
        );
        let nx = reply(&q, 0x8183, 0, &[]);
        assert_eq!(
            parse_reply(&nx, 9, &name, QueryType::Aaaa),
            Some(Ok(vec![]))
        );
        let servfail = reply(&q, 0x8182, 0, &[]);
        assert_eq!(
            parse_reply(&servfail, 9, &name, QueryType::Aaaa),
            Some(Err(ReplyError::Rcode(2)))
        );
        let tc = reply(&q, 0x8380, 0, &[]);
        assert_eq!(
            parse_reply(&tc, 9, &name, QueryType::Aaaa),
            Some(Err(ReplyError::Truncated))
        );
        let bad_len = reply(&q, 0x8180, 1, &rr(PTR_QNAME, TYPE_AAAA, &[1, 2, 3, 4]));
        assert!(matches!(
            parse_reply(&bad_len, 9, &name, QueryType::Aaaa),
            Some(Err(ReplyError::Malformed(_)))
        ));
        let mut short = msg.clone();
        short.truncate(short.len() - 3);
        assert!(matches!(
            parse_reply(&short, 9, &name, QueryType::Aaaa),
            Some(Err(ReplyError::Malformed(_)))
        ));
    }

    #[test]
    fn pointer_loops_are_refused() {
        let name = n("a.example");
        let mut msg = vec![0, 1, 0x81, 0x80, 0, 1, 0, 0, 0, 0, 0, 0];
        msg.extend_from_slice(&[0xc0, 12]); // question name points at itself
        msg.extend_from_slice(&[0, 1, 0, 1]);
        assert_eq!(parse_reply(&msg, 1, &name, QueryType::A), None);
    }
}
