//! Entry points for the fuzz targets in `fuzz/` (not part of the broker's API): the client
//! side of the two proxy listeners, driven on in-memory streams with the same code the
//! server runs ([`crate::socks5`]'s handshake, [`crate::http_proxy`]'s head reader and request
//! parsers), stopping where the server would decide and dial.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::server::{ListenerKind, Record};
use crate::target::Target;

/// A client connection in memory: reads `input` then end-of-file, keeps what is written.
struct Mem<'a> {
    input: &'a [u8],
    written: Vec<u8>,
}

impl AsyncRead for Mem<'_> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.input).poll_read(cx, buf)
    }
}

impl AsyncWrite for Mem<'_> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.written.extend_from_slice(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

fn run<F: std::future::Future>(f: F) -> F::Output {
    thread_local! {
        static RT: tokio::runtime::Runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap_or_else(|e| panic!("fuzzing: no tokio runtime: {e}"));
    }
    RT.with(|rt| rt.block_on(f))
}

fn record(listener: ListenerKind) -> Record {
    let (events, _) = tokio::sync::mpsc::unbounded_channel();
    Record::with_events(events, listener, SocketAddr::from(([127, 0, 0, 1], 1)))
}

/// A SOCKS5 handshake that did not produce a target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Socks5Refusal {
    /// The REP code the server answers with, if the client got as far as a request.
    pub rep: Option<u8>,
    /// The event's reason code.
    pub code: &'static str,
    /// The event's detail.
    pub detail: String,
}

/// The SOCKS5 listener's handshake over `input` (then end-of-file): the target it asks
/// for, or the refusal; and every byte the server wrote during the handshake.
pub fn socks5_handshake(input: &[u8]) -> (Result<Target, Socks5Refusal>, Vec<u8>) {
    let mut stream = Mem {
        input,
        written: Vec::new(),
    };
    let mut rec = record(ListenerKind::Socks5);
    let r = run(crate::socks5::handshake(&mut stream, &mut rec)).map_err(|f| Socks5Refusal {
        rep: f.rep,
        code: f.code,
        detail: f.detail,
    });
    (r, stream.written)
}

/// A request the HTTP proxy listener would take to the policy decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HttpAccepted {
    /// `CONNECT`: the tunnel's target, and how many bytes after the head are relayed as the
    /// start of the tunnel.
    Connect {
        /// The destination.
        target: Target,
        /// Bytes already read after the head.
        leftover: usize,
    },
    /// An absolute-form request, forwarded.
    Forward {
        /// The URI's authority.
        target: Target,
        /// Length of the rewritten head at the start of what went upstream.
        head: usize,
        /// `Content-Length` framing.
        content_length: Option<u64>,
        /// `Transfer-Encoding: chunked` framing.
        chunked: bool,
        /// The whole body was sent (the client's bytes held all of it, well-formed).
        body_complete: bool,
    },
}

/// The HTTP proxy listener over `input` (then end-of-file), as if every destination were
/// allowed and dialled: what it accepted and every byte it sent upstream, or the response it
/// would send the client instead (empty when the client closed before a complete head).
pub fn http_request(input: &[u8]) -> (Result<HttpAccepted, Vec<u8>>, Vec<u8>) {
    let mut client = input;
    let mut upstream = Vec::new();
    let r = run(crate::http_proxy::without_network(
        &mut client,
        &mut upstream,
    ));
    (r, upstream)
}

/// The chunked request-body decoder over `input` in one piece: the canonical chunks it
/// writes upstream, whether the body ended, and the error that refused it.
pub fn chunked_body(input: &[u8]) -> (Vec<u8>, bool, Option<String>) {
    crate::http_proxy::rechunk(input)
}
