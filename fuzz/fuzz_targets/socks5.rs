//! What a client sends the SOCKS5 listener: method negotiation and the request, through the
//! listener's own handshake ([`vetto_broker::fuzzing::socks5_handshake`], an in-memory
//! stream, end-of-file after the input).
//!
//! Invariants: nothing panics; the server writes only its method choice before the request
//! is judged; a target is only produced for a well-formed `CONNECT` request whose bytes say
//! so, with a non-zero port and, for a name, a normalised name that parses back to itself.

#![no_main]

use libfuzzer_sys::fuzz_target;
use vetto_broker::fuzzing::socks5_handshake;
use vetto_broker::{DnsName, Target};

fuzz_target!(|data: &[u8]| {
    let (r, written) = socks5_handshake(data);
    match r {
        Ok(target) => {
            assert_eq!(
                written,
                [5, 0],
                "server wrote {written:?} for an accepted handshake"
            );
            // The bytes: VER NMETHODS METHODS... VER CMD RSV ATYP ADDR PORT.
            assert_eq!(data[0], 5);
            let n = usize::from(data[1]);
            assert!(
                data[2..2 + n].contains(&0),
                "accepted without offering 'no auth'"
            );
            let req = &data[2 + n..];
            assert_eq!(&req[..2], &[5, 1], "accepted a request that is not CONNECT");
            let (addr_len, name) = match req[3] {
                1 => (4, false),
                4 => (16, false),
                3 => (1 + usize::from(req[4]), true),
                other => panic!("accepted address type {other}"),
            };
            let port_at = 4 + addr_len;
            let port = u16::from_be_bytes([req[port_at], req[port_at + 1]]);
            assert_eq!(target.port(), port);
            assert_ne!(port, 0, "port 0 accepted");
            match &target {
                Target::Name { name: n, .. } => {
                    assert!(name, "a name from an IP address type");
                    assert_eq!(DnsName::parse(n.as_str()).as_ref(), Ok(n), "{n} not stable");
                }
                Target::Ip { .. } => {}
            }
        }
        Err(f) => {
            assert!(
                written.is_empty() || written == [5, 0] || written == [5, 0xff],
                "server wrote {written:?} before refusing ({})",
                f.code
            );
            if let Some(rep) = f.rep {
                assert!(
                    (1..=8).contains(&rep),
                    "REP {rep:#04x} is not an RFC 1928 code"
                );
            }
        }
    }
});
