//! The SOCKS5 listener (RFC 1928): "no authentication" only, `CONNECT` only.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::timeout;

use crate::relay::relay;
use crate::server::{
    close_after_refusal, decide_and_dial, sanitize, socks_rep, Record, Refusal, Shared,
    HANDSHAKE_TIMEOUT, REJECT_TIMEOUT,
};
use crate::target::Target;

const VERSION: u8 = 0x05;
const METHOD_NO_AUTH: u8 = 0x00;
const METHOD_NONE_ACCEPTABLE: u8 = 0xff;
const CMD_CONNECT: u8 = 0x01;
const CMD_BIND: u8 = 0x02;
const CMD_UDP_ASSOCIATE: u8 = 0x03;
const ATYP_IPV4: u8 = 0x01;
const ATYP_DOMAIN: u8 = 0x03;
const ATYP_IPV6: u8 = 0x04;

/// Encode a reply; without a bound address, `0.0.0.0:0`.
fn reply(rep: u8, bound: Option<SocketAddr>) -> Vec<u8> {
    let bound = bound.unwrap_or_else(|| SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0)));
    let mut r = vec![VERSION, rep, 0x00];
    match bound.ip() {
        IpAddr::V4(v4) => {
            r.push(ATYP_IPV4);
            r.extend_from_slice(&v4.octets());
        }
        IpAddr::V6(v6) => {
            r.push(ATYP_IPV6);
            r.extend_from_slice(&v6.octets());
        }
    }
    r.extend_from_slice(&bound.port().to_be_bytes());
    r
}

/// Why the handshake did not produce a target.
pub(crate) struct HandshakeFail {
    /// A reply to send (REP code), if the client got as far as a request.
    pub(crate) rep: Option<u8>,
    pub(crate) code: &'static str,
    pub(crate) detail: String,
}

fn fail(rep: Option<u8>, code: &'static str, detail: impl Into<String>) -> HandshakeFail {
    HandshakeFail {
        rep,
        code,
        detail: detail.into(),
    }
}

/// Method negotiation and request. On success the client has been told "no
/// authentication" and has sent a `CONNECT` request for the returned target.
/// Generic over the stream only so that [`crate::fuzzing`] can drive it in memory.
pub(crate) async fn handshake<S>(stream: &mut S, rec: &mut Record) -> Result<Target, HandshakeFail>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let closed = |_| {
        fail(
            None,
            "client-closed",
            "client closed during the SOCKS5 handshake",
        )
    };
    let mut hdr = [0u8; 2];
    stream.read_exact(&mut hdr).await.map_err(closed)?;
    if hdr[0] != VERSION {
        return Err(fail(
            None,
            "protocol-error",
            format!("not a SOCKS5 greeting (version byte {:#04x})", hdr[0]),
        ));
    }
    let mut methods = vec![0u8; usize::from(hdr[1])];
    stream.read_exact(&mut methods).await.map_err(closed)?;
    if !methods.contains(&METHOD_NO_AUTH) {
        let _ = stream.write_all(&[VERSION, METHOD_NONE_ACCEPTABLE]).await;
        return Err(fail(
            None,
            "no-acceptable-auth",
            "the client offered no \"no authentication\" method",
        ));
    }
    stream
        .write_all(&[VERSION, METHOD_NO_AUTH])
        .await
        .map_err(closed)?;

    let mut req = [0u8; 4];
    stream.read_exact(&mut req).await.map_err(closed)?;
    let [ver, cmd, _rsv, atyp] = req;
    if ver != VERSION {
        return Err(fail(
            Some(socks_rep::GENERAL_FAILURE),
            "protocol-error",
            format!("bad SOCKS5 request version byte {ver:#04x}"),
        ));
    }
    enum Addr {
        Ip(IpAddr),
        Domain(Vec<u8>),
    }
    let addr = match atyp {
        ATYP_IPV4 => {
            let mut b = [0u8; 4];
            stream.read_exact(&mut b).await.map_err(closed)?;
            Addr::Ip(IpAddr::V4(Ipv4Addr::from(b)))
        }
        ATYP_IPV6 => {
            let mut b = [0u8; 16];
            stream.read_exact(&mut b).await.map_err(closed)?;
            Addr::Ip(IpAddr::V6(Ipv6Addr::from(b)))
        }
        ATYP_DOMAIN => {
            let mut len = [0u8; 1];
            stream.read_exact(&mut len).await.map_err(closed)?;
            let mut b = vec![0u8; usize::from(len[0])];
            stream.read_exact(&mut b).await.map_err(closed)?;
            Addr::Domain(b)
        }
        other => {
            return Err(fail(
                Some(socks_rep::ADDRESS_TYPE_NOT_SUPPORTED),
                "address-type-not-supported",
                format!("SOCKS5 address type {other:#04x} is not supported"),
            ))
        }
    };
    let mut port = [0u8; 2];
    stream.read_exact(&mut port).await.map_err(closed)?;
    let port = u16::from_be_bytes(port);
    rec.target = Some(match &addr {
        Addr::Ip(ip) => SocketAddr::new(*ip, port).to_string(),
        Addr::Domain(d) => format!("{}:{port}", sanitize(&String::from_utf8_lossy(d))),
    });
    if cmd != CMD_CONNECT {
        let what = match cmd {
            CMD_BIND => "BIND".to_string(),
            CMD_UDP_ASSOCIATE => "UDP ASSOCIATE".to_string(),
            other => format!("command {other:#04x}"),
        };
        return Err(fail(
            Some(socks_rep::COMMAND_NOT_SUPPORTED),
            "command-not-supported",
            format!("SOCKS5 {what} is not supported (CONNECT only)"),
        ));
    }
    let target = match addr {
        Addr::Ip(ip) => Target::from_socket_addr(SocketAddr::new(ip, port)),
        Addr::Domain(d) => Target::from_socks5_domain(&d, port),
    };
    target.map_err(|e| {
        let r = Refusal::invalid_destination(&e);
        fail(Some(r.socks), r.code, r.detail)
    })
}

async fn send_reply(stream: &mut TcpStream, rep: u8, bound: Option<SocketAddr>) {
    let _ = timeout(HANDSHAKE_TIMEOUT, stream.write_all(&reply(rep, bound))).await;
}

pub(crate) async fn handle(shared: &Shared, mut stream: TcpStream, rec: &mut Record) {
    let target = match timeout(HANDSHAKE_TIMEOUT, handshake(&mut stream, rec)).await {
        Ok(Ok(target)) => target,
        Ok(Err(f)) => {
            rec.deny(f.code, f.detail);
            if let Some(rep) = f.rep {
                send_reply(&mut stream, rep, None).await;
            }
            return close_after_refusal(stream).await;
        }
        Err(_) => {
            return rec.deny(
                "request-timeout",
                format!(
                    "no complete SOCKS5 request within {}s",
                    HANDSHAKE_TIMEOUT.as_secs()
                ),
            )
        }
    };
    rec.target = Some(target.to_string());
    let upstream = match decide_and_dial(shared, &target, rec).await {
        Ok(upstream) => upstream,
        Err(r) => {
            rec.refuse(&r);
            send_reply(&mut stream, r.socks, None).await;
            return close_after_refusal(stream).await;
        }
    };
    // The upstream socket's local address is the host's own: the sandbox is not told it.
    if let Err(e) = stream.write_all(&reply(socks_rep::SUCCEEDED, None)).await {
        return rec.deny("client-error", format!("writing the SOCKS5 reply: {e}"));
    }
    let stats = relay(stream, upstream, &[], shared.idle, &rec.moved).await;
    rec.relayed(stats);
}

/// Over the connection limit: complete the handshake briefly, answer REP=0x01, close.
pub(crate) async fn reject(mut stream: TcpStream, rec: &mut Record, r: &Refusal) {
    let outcome = timeout(REJECT_TIMEOUT, handshake(&mut stream, rec)).await;
    if matches!(
        outcome,
        Ok(Ok(_)) | Ok(Err(HandshakeFail { rep: Some(_), .. }))
    ) {
        send_reply(&mut stream, r.socks, None).await;
    }
    close_after_refusal(stream).await;
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // Tests: a panic is the failure report.
mod tests {
    use super::*;

    #[test]
    fn reply_encoding() {
        assert_eq!(reply(0x02, None), vec![5, 2, 0, 1, 0, 0, 0, 0, 0, 0]);
        let v6: SocketAddr = "[::1]:258".parse().unwrap();
        let r = reply(0, Some(v6));
        assert_eq!(r.len(), 22);
        assert_eq!(&r[..4], &[5, 0, 0, 4]);
        assert_eq!(&r[20..], &[1, 2]);
    }
}
