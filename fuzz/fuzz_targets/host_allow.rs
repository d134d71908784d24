//! A destination through each of the broker's target parsers, then the allowlist decision.
//!
//! Input: byte 0 chooses the parser (bits 0-1: `Target::parse_host_port` with the default
//! port 443, the same without a default (a `CONNECT` authority), `parse_host` on port 443,
//! or `Target::from_socks5_domain` with the port in bytes 1-2), strict mode (bit 2), and
//! whether more allow entries follow the destination, one a line (bit 3).
//!
//! Invariants, written from the documented rules, not from the code:
//! - an IP literal is allowed only outside strict mode, on the port of an `allow_cidrs` range
//!   that holds it (or the IPv4 address it maps);
//! - with the fixed list below, a name is allowed exactly when it equals an exact entry or is
//!   a strict subdomain of a wildcard entry, on that entry's port, is not refused by a deny
//!   entry, and (strict mode) the port is not 80;
//! - a normalised name parses back to itself, and the decision on it is the same.

#![no_main]

use std::net::IpAddr;

use ipnet::IpNet;
use libfuzzer_sys::fuzz_target;
use vetto_broker::{parse_host, DnsName, Host, Policy, Target};

/// As written in a policy (to exercise normalisation).
const ALLOW: &[&str] = &[
    "crates.io",
    "Static.Crates.IO.:443",
    "*.npmjs.org",
    "github.com:22",
    "*.example.com:8080",
    "bücher.example",
    "plain.test:80",
];
/// The same entries, normalised by hand: (suffix?, name, port).
const ALLOW_NORMAL: &[(bool, &str, u16)] = &[
    (false, "crates.io", 443),
    (false, "static.crates.io", 443),
    (true, "npmjs.org", 443),
    (false, "github.com", 22),
    (true, "example.com", 8080),
    (false, "xn--bcher-kva.example", 443),
    (false, "plain.test", 80),
];
const DENY: &[&str] = &["blocked.crates.io", "*.evil.npmjs.org", "github.com:2222"];
/// (suffix?, name, port or all).
const DENY_NORMAL: &[(bool, &str, Option<u16>)] = &[
    (false, "blocked.crates.io", None),
    (true, "evil.npmjs.org", None),
    (false, "github.com", Some(2222)),
];
const CIDRS: &[&str] = &["10.1.0.0/16", "192.0.2.0/24:8080", "2001:db8::/32"];
/// The same ranges and ports, by hand.
fn cidrs() -> [(IpNet, u16); 3] {
    [
        ("10.1.0.0/16".parse().expect("net"), 443),
        ("192.0.2.0/24".parse().expect("net"), 8080),
        ("2001:db8::/32".parse().expect("net"), 443),
    ]
}

fn matches(suffix: bool, pattern: &str, name: &str) -> bool {
    if suffix {
        name.len() > pattern.len() + 1
            && name.ends_with(pattern)
            && name.as_bytes()[name.len() - pattern.len() - 1] == b'.'
    } else {
        name == pattern
    }
}

fn expected_name(name: &str, port: u16, strict: bool) -> bool {
    let denied = DENY_NORMAL
        .iter()
        .any(|&(s, p, dp)| matches(s, p, name) && dp.is_none_or(|dp| dp == port));
    let allowed = ALLOW_NORMAL
        .iter()
        .any(|&(s, p, ap)| ap == port && matches(s, p, name));
    !denied && allowed && !(strict && port == 80)
}

fn ip_may_pass(addr: IpAddr, port: u16) -> bool {
    let mapped = match addr {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4),
        IpAddr::V4(_) => None,
    };
    cidrs().iter().any(|(net, p)| {
        *p == port && (net.contains(&addr) || mapped.is_some_and(|m| net.contains(&m)))
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((&flags, rest)) = data.split_first() else {
        return;
    };
    let strict = flags & 4 != 0;
    let (dest, extra): (&[u8], Vec<&str>) = if flags & 8 != 0 {
        let mut lines = rest.split(|&b| b == b'\n');
        let dest = lines.next().unwrap_or_default();
        let extra = lines.filter_map(|l| std::str::from_utf8(l).ok()).collect();
        (dest, extra)
    } else {
        (rest, vec![])
    };
    let parsed = match flags & 3 {
        0 => std::str::from_utf8(dest)
            .ok()
            .map(|s| Target::parse_host_port(s, Some(443))),
        1 => std::str::from_utf8(dest)
            .ok()
            .map(|s| Target::parse_connect_authority(s)),
        2 => std::str::from_utf8(dest).ok().map(|s| {
            parse_host(s).map(|h| match h {
                Host::Name(name) => Target::Name { name, port: 443 },
                Host::Ip(addr) => Target::Ip { addr, port: 443 },
            })
        }),
        _ => dest
            .get(2..)
            .map(|d| Target::from_socks5_domain(d, u16::from_be_bytes([dest[0], dest[1]]))),
    };
    let Some(Ok(target)) = parsed else {
        return;
    };

    let allow: Vec<&str> = ALLOW.iter().copied().chain(extra.iter().copied()).collect();
    let policy = Policy::parse(&allow, CIDRS, strict)
        .and_then(|p| p.with_deny(DENY))
        .or_else(|_| Policy::parse(ALLOW, CIDRS, strict).and_then(|p| p.with_deny(DENY)))
        .expect("the fixed policy parses");
    let exact_list = extra.is_empty() || Policy::parse(&allow, CIDRS, strict).is_err();
    let decision = policy.decide(&target);

    assert_ne!(target.port(), 0);
    match &target {
        Target::Ip { addr, port } => {
            if decision.is_allowed() {
                assert!(!strict, "strict mode allowed the IP literal {addr}");
                assert!(
                    ip_may_pass(*addr, *port),
                    "IP literal {target} allowed outside allow_cidrs"
                );
            } else if !strict && exact_list {
                let direct = cidrs().iter().any(|(n, p)| p == port && n.contains(addr));
                assert!(
                    !direct,
                    "{target} is inside an allowed range but refused: {decision:?}"
                );
            }
        }
        Target::Name { name, port } => {
            // The normalised name is a fixed point of normalisation.
            let again = DnsName::parse(name.as_str())
                .unwrap_or_else(|e| panic!("normalised name {name} does not parse: {e}"));
            assert_eq!(&again, name, "normalisation is not idempotent");
            assert_eq!(again.as_str(), name.as_str().to_ascii_lowercase());
            let t2 = Target::parse_connect_authority(&target.to_string())
                .unwrap_or_else(|e| panic!("{target} does not parse back: {e}"));
            assert_eq!(t2, target);
            assert_eq!(
                policy.decide(&t2),
                decision,
                "decision not stable under re-parsing"
            );
            if strict && *port == 80 {
                assert!(!decision.is_allowed(), "strict mode allowed port 80");
            }
            let denied = DENY_NORMAL
                .iter()
                .any(|&(s, p, dp)| matches(s, p, name.as_str()) && dp.is_none_or(|dp| dp == *port));
            if denied {
                assert!(!decision.is_allowed(), "{target} is denied but allowed");
            }
            if exact_list {
                assert_eq!(
                    decision.is_allowed(),
                    expected_name(name.as_str(), *port, strict),
                    "{target} (strict={strict}): {decision:?}"
                );
            } else if expected_name(name.as_str(), *port, strict) {
                assert!(decision.is_allowed(), "extra entries narrowed {target}");
            }
        }
    }
});
