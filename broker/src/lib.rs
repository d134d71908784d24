//! vetto's host-side network broker: the per-connection decision and the server that
//! applies it.
//!
//! In `allowlist` and `strict` network modes the sandboxed child has no route to the
//! Internet; it reaches allowed destinations only through this broker (HTTP `CONNECT` or
//! SOCKS5). For every connection the broker does, in this order and nothing else:
//!
//! 1. **Parse** the destination strictly ([`target`]): `CONNECT host:port`, a SOCKS5
//!    domain, or a `host[:port]` argument. Userinfo, percent-encoding, whitespace, control
//!    characters, bad ports and malformed names are refused with a [`TargetError`].
//! 2. **Normalise** it: IDNA/UTS-46 to ASCII (punycode), lowercase, one trailing dot
//!    stripped. IP literals are recognised in every form `inet_aton(3)` or a resolver
//!    accepts (`127.1`, `0x7f.1`, `2130706433`, `017700000001`, `[::ffff:127.0.0.1]`) and
//!    become [`Target::Ip`]; a numeric-looking name is never treated as a DNS name.
//! 3. **Allowlist** ([`allow`]): [`Policy::decide`] matches the normalised name and port
//!    against `host[:port]` / `*.suffix[:port]` entries (no port means 443 only). IP literals
//!    pass only inside an explicit `allow_cidrs` range, and never in strict mode; strict mode
//!    also refuses port 80.
//! 4. **Only then resolve** the name, once, outside the sandbox (a [`Resolver`]: the
//!    host's [`SystemResolver`], or the UDP client [`dns::UdpResolver`] when the spec names a
//!    DNS server). An allowed destination first takes one token of its per-minute budget
//!    ([`RateLimiter`]); a denied or rate-limited one is never resolved, an IP literal never is.
//! 5. **Classify the whole answer set** ([`classify()`]): if ANY address is loopback, private,
//!    link-local, shared, cloud metadata, multicast, reserved, documentation... (IPv4, IPv6,
//!    and IPv4 embedded in mapped/compatible/NAT64/6to4/Teredo IPv6) and not inside an
//!    allowed CIDR, the entire answer is refused ([`Policy::check_answer`], which applies
//!    [`check_answer_set`] with the allowed CIDRs).
//! 6. **Dial exactly one `SocketAddr`**, the first address of the accepted set, and never
//!    resolve the name again for this connection, so a DNS rebinding between check and use
//!    is impossible.
//!
//! Steps 3–6 are one async function, [`plan_connection`], which returns the address to dial;
//! the server calls it for every proxied connection (and then connects to exactly that
//! address), and its unit tests call it with fake resolvers. DNS answers are checked there
//! and nowhere else: the resolvers only transport them.
//!
//! This is CONNECT-level mediation only: no TLS interception, SNI filtering or content
//! inspection. [`target`], [`allow`] and [`mod@classify`] are pure; the resolvers are the only
//! pieces of the decision that touch the host or the network.
//!
//! The server ([`server`]) puts them to work: [`serve`] accepts on listeners bound by the
//! supervisor inside the sandbox's network namespace (HTTP `CONNECT`, SOCKS5, or a fixed
//! host loopback port), runs [`plan_connection`] per proxied connection, dials from the host
//! and relays bytes, with a connection limit, an idle timeout, and one [`ConnEvent`] per
//! connection. Its tests only ever use loopback addresses.
//!
//! Errors: the `Display` of an error variant never repeats its `#[source]`; print the whole
//! chain (`{:#}` with anyhow, or [`error_chain`]).

pub mod allow;
pub mod approvals;
pub mod audit;
pub mod classify;
pub mod dns;
#[doc(hidden)]
pub mod fuzzing;
mod http_proxy;
pub mod peers;
pub mod plan;
pub mod ratelimit;
mod relay;
pub mod server;
mod socks5;
pub mod target;

pub use allow::{
    AllowEntry, AllowError, CidrRule, Decision, DenyEntry, DenyReason, HostPattern, Policy,
    DEFAULT_PORT,
};
pub use classify::{
    check_answer_set, classify, classify_v4, classify_v6, in_cidrs, AddrClass, AnswerError,
    Embedding,
};
pub use dns::UdpResolver;
pub use ipnet::IpNet;
pub use plan::{
    plan_connection, PlanError, Planned, Resolver, SystemResolver, SYSTEM_RESOLVE_TIMEOUT,
};
pub use ratelimit::RateLimiter;
pub use server::{
    serve, serve_until, serve_with_events, BrokerError, BrokerEvent, BrokerSpec, ConnEvent,
    EventDecision, ListenerKind, DEFAULT_IDLE_TIMEOUT_SECS, MAX_MAX_CONNECTIONS,
};
pub use target::{
    parse_connect_request_line, parse_host, parse_inet_aton, parse_port, DnsName, Host, Target,
    TargetError,
};

/// `e` and its sources, joined with `": "` (what anyhow's `{:#}` prints), each link once: a
/// source whose text its parent's message already carries is not repeated. Both binaries print
/// errors through this, whichever convention an error type follows.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = s.source();
    }
    out
}

/// A temporary directory as vetto makes its state directories (0700): stores refuse a
/// directory others may read or write, and `tempfile` follows the umask (often 0755).
#[cfg(test)]
pub(crate) fn private_tempdir() -> tempfile::TempDir {
    use std::os::unix::fs::PermissionsExt;
    tempfile::Builder::new()
        .permissions(std::fs::Permissions::from_mode(0o700))
        .tempdir()
        .expect("creating a temporary directory")
}

#[cfg(test)]
mod tests {
    #[derive(Debug, thiserror::Error)]
    enum E {
        /// Carries its source in its message.
        #[error("creating: {0}")]
        Inline(#[source] std::io::Error),
        /// Leaves its source to the chain.
        #[error("creating")]
        Chained(#[source] std::io::Error),
    }

    #[test]
    fn every_link_is_printed_once_whichever_convention() {
        let io = || std::io::Error::new(std::io::ErrorKind::NotFound, "No such file");
        let inline = super::error_chain(&E::Inline(io()));
        let chained = super::error_chain(&E::Chained(io()));
        assert_eq!(inline, chained);
        assert_eq!(inline.matches("No such file").count(), 1, "{inline}");
    }
}
