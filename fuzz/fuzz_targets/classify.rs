//! The address classifier, for every form an address reaches it in: 4 or 16 raw bytes (a
//! SOCKS5 request, a DNS answer), or text through the broker's host parser (dotted quad,
//! `inet_aton` shorthands, bracketed or bare IPv6), and whole answer sets.
//!
//! Invariants (the ranges are written here from the RFCs, not taken from the code under
//! test): loopback `127/8`, `10/8`, `172.16/12`, `192.168/16`, link-local `169.254/16`,
//! shared `100.64/10`, "this network" `0/8`, multicast `224/4`, reserved `240/4`, and in
//! IPv6 `::`, `::1`, `fc00::/7`, `fe80::/10`, `ff00::/8`, and any IPv6 form embedding one of
//! the IPv4 ranges (mapped `::ffff:0:0/96`, compatible `::/96`, NAT64 `64:ff9b::/96`, 6to4
//! `2002::/16`) are never public; an answer set holding one is refused whole, without
//! `allow_cidrs`; an accepted set dials its first address.

#![no_main]

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use libfuzzer_sys::fuzz_target;
use vetto_broker::{check_answer_set, classify, classify_v4, classify_v6, parse_host, Host};

fn v4_in(a: Ipv4Addr, net: [u8; 4], len: u32) -> bool {
    let mask = if len == 0 { 0 } else { u32::MAX << (32 - len) };
    u32::from(a) & mask == u32::from(Ipv4Addr::from(net)) & mask
}

/// Never public, IPv4.
fn v4_non_public(a: Ipv4Addr) -> bool {
    v4_in(a, [127, 0, 0, 0], 8)
        || v4_in(a, [10, 0, 0, 0], 8)
        || v4_in(a, [172, 16, 0, 0], 12)
        || v4_in(a, [192, 168, 0, 0], 16)
        || v4_in(a, [169, 254, 0, 0], 16)
        || v4_in(a, [100, 64, 0, 0], 10)
        || v4_in(a, [0, 0, 0, 0], 8)
        || v4_in(a, [224, 0, 0, 0], 4)
        || v4_in(a, [240, 0, 0, 0], 4)
}

fn v6_in(a: Ipv6Addr, net: u128, len: u32) -> bool {
    let mask = if len == 0 {
        0
    } else {
        u128::MAX << (128 - len)
    };
    u128::from(a) & mask == net & mask
}

/// Never public, IPv6 (with every IPv4 embedding looked through).
fn v6_non_public(a: Ipv6Addr) -> bool {
    let x = u128::from(a);
    let low32 = Ipv4Addr::from((x & 0xffff_ffff) as u32);
    x == 0
        || x == 1
        || v6_in(a, 0xfc00 << 112, 7)
        || v6_in(a, 0xfe80 << 112, 10)
        || v6_in(a, 0xff00 << 112, 8)
        // IPv4-mapped: the IPv4 host itself; whatever it is, never "public IPv6".
        || v6_in(a, 0xffff << 32, 96)
        // IPv4-compatible, deprecated.
        || (v6_in(a, 0, 96) && v4_non_public(low32))
        // NAT64 well-known prefix.
        || (v6_in(a, 0x0064_ff9b << 96, 96) && v4_non_public(low32))
        // 6to4: the IPv4 address in bits 16..48.
        || (v6_in(a, 0x2002 << 112, 16) && v4_non_public(Ipv4Addr::from((x >> 80) as u32)))
}

fn check(ip: IpAddr) {
    let class = classify(ip);
    match ip {
        IpAddr::V4(a) => {
            assert_eq!(class, classify_v4(a));
            if v4_non_public(a) {
                assert!(!class.is_public(), "{a} classified public");
            }
            // The mapped and NAT64 forms of an IPv4 address are never more public than it.
            let mapped = a.to_ipv6_mapped();
            assert!(
                !classify_v6(mapped).is_public(),
                "{mapped} classified public"
            );
            let nat64 = Ipv6Addr::from((0x0064_ff9b_u128 << 96) | u128::from(u32::from(a)));
            if !class.is_public() {
                assert!(
                    !classify_v6(nat64).is_public(),
                    "{nat64} ({a}: {class}) public"
                );
            }
        }
        IpAddr::V6(a) => {
            assert_eq!(class, classify_v6(a));
            if v6_non_public(a) {
                assert!(!class.is_public(), "{a} classified public");
            }
        }
    }
    // Display never panics, and the root class of a non-public address is non-public.
    let _ = class.to_string();
    if !class.is_public() {
        assert!(!class.root().is_public(), "{ip}: {class} has a public root");
    }
}

fuzz_target!(|data: &[u8]| {
    // Raw forms, and every address in the input read as an answer set.
    let mut answer = vec![];
    for chunk in data.chunks(16) {
        if let Ok(b) = <[u8; 16]>::try_from(chunk) {
            answer.push(IpAddr::V6(Ipv6Addr::from(b)));
        }
        if let Ok(b) = <[u8; 4]>::try_from(&chunk[..chunk.len().min(4)]) {
            answer.push(IpAddr::V4(Ipv4Addr::from(b)));
        }
    }
    for &ip in &answer {
        check(ip);
    }
    match check_answer_set(&answer, &[]) {
        Ok(first) => {
            assert_eq!(Some(&first), answer.first());
            for &ip in &answer {
                assert!(classify(ip).is_public(), "answer with {ip} accepted");
            }
        }
        Err(_) => assert!(answer.is_empty() || answer.iter().any(|&ip| !classify(ip).is_public())),
    }
    // Text forms through the broker's host parser.
    if let Ok(s) = std::str::from_utf8(data) {
        if let Ok(Host::Ip(ip)) = parse_host(s) {
            check(ip);
            // A standard literal means what the standard library says it means.
            if let Ok(std_ip) = s.trim_matches(['[', ']']).parse::<IpAddr>() {
                if !s.starts_with('[') || s.ends_with(']') {
                    assert_eq!(ip, std_ip, "{s:?}");
                }
            }
        }
    }
});
