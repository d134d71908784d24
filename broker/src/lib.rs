//! vetto's host-side network broker: the pure decision core.
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
//! 4. **Only then resolve** the name, once, outside the sandbox ([`Resolver`]).
//! 5. **Classify the whole answer set** ([`classify()`]): if ANY address is loopback, private,
//!    link-local, shared, cloud metadata, multicast, reserved, documentation... (IPv4, IPv6,
//!    and IPv4 embedded in mapped/compatible/NAT64/6to4/Teredo IPv6) and not inside an
//!    allowed CIDR, the entire answer is refused ([`check_answer_set`]).
//! 6. **Dial exactly one `SocketAddr`**, the first address of the accepted set, and never
//!    resolve the name again for this connection, so a DNS rebinding between check and use
//!    is impossible. [`plan_connection`] performs steps 3–6 and returns that address.
//!
//! This is CONNECT-level mediation only: no TLS interception, SNI filtering or content
//! inspection. The modules above are pure: nothing in them opens a socket, and
//! [`SystemResolver`] is the only piece that touches the host (via `getaddrinfo`).
//!
//! The server ([`server`]) puts them to work: [`serve`] accepts on listeners bound by the
//! supervisor inside the sandbox's network namespace (HTTP `CONNECT`, SOCKS5, or a fixed
//! host loopback port), applies the steps above per connection (async, with its own DNS
//! client in [`dns`] when a resolver address is configured), dials from the host and relays
//! bytes, with a connection limit, a per-destination rate limit, an idle timeout, and one
//! [`ConnEvent`] per connection. Its tests only ever use loopback addresses.

pub mod allow;
pub mod classify;
pub mod dns;
mod http_proxy;
pub mod plan;
mod ratelimit;
mod relay;
pub mod server;
mod socks5;
pub mod target;

pub use allow::{
    AllowEntry, AllowError, CidrRule, Decision, DenyReason, HostPattern, Policy, DEFAULT_PORT,
};
pub use classify::{
    check_answer_set, classify, classify_v4, classify_v6, in_cidrs, AddrClass, AnswerError,
    Embedding,
};
pub use ipnet::IpNet;
pub use plan::{plan_connection, PlanError, Resolver, SystemResolver};
pub use server::{
    serve, serve_with_events, BrokerError, BrokerSpec, ConnEvent, EventDecision, ListenerKind,
};
pub use target::{
    parse_connect_request_line, parse_host, parse_inet_aton, parse_port, DnsName, Host, Target,
    TargetError,
};
