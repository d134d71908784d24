//! Classification of IP addresses into "public" and named non-public ranges, and the
//! all-or-nothing check of a resolver's answer set.
//!
//! IPv6 forms that embed an IPv4 address are looked through: the embedded address is
//! classified, and the IPv6 address is non-public whenever it is. IPv4-mapped (`::ffff:0:0/96`)
//! and IPv4-compatible (`::/96`) addresses are non-public regardless (a mapped address dials
//! the IPv4 host directly; the compatible form is deprecated). NAT64 local-use
//! (`64:ff9b:1::/48`) is not globally reachable per the IANA registry and is non-public
//! regardless too. Everything outside `2000::/3` that is not listed is `Reserved`.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::IpNet;
use thiserror::Error;

/// How an IPv6 address embeds an IPv4 address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Embedding {
    /// `::ffff:a.b.c.d` (`::ffff:0:0/96`).
    Ipv4Mapped,
    /// `::a.b.c.d` (`::/96`, deprecated).
    Ipv4Compatible,
    /// NAT64 well-known prefix `64:ff9b::/96`.
    Nat64,
    /// NAT64 local-use prefix `64:ff9b:1::/48` (IPv4 taken from the last 32 bits).
    Nat64LocalUse,
    /// 6to4 `2002::/16` (IPv4 in bits 16..48).
    SixToFour,
    /// Teredo `2001::/32` server address (bits 32..64).
    TeredoServer,
    /// Teredo `2001::/32` client address (last 32 bits XOR `0xffffffff`).
    TeredoClient,
}

impl Embedding {
    /// Short human-readable name.
    pub fn name(self) -> &'static str {
        match self {
            Embedding::Ipv4Mapped => "IPv4-mapped IPv6 (::ffff:0:0/96)",
            Embedding::Ipv4Compatible => "IPv4-compatible IPv6 (::/96)",
            Embedding::Nat64 => "NAT64 (64:ff9b::/96)",
            Embedding::Nat64LocalUse => "local-use NAT64 (64:ff9b:1::/48)",
            Embedding::SixToFour => "6to4 (2002::/16)",
            Embedding::TeredoServer => "Teredo server (2001::/32)",
            Embedding::TeredoClient => "Teredo client (2001::/32)",
        }
    }
}

/// The class of an address: `Public`, or the named reason it is not.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AddrClass {
    /// Globally routable unicast, as far as this table knows.
    Public,
    /// `0.0.0.0/8` ("this network"), `::`.
    Unspecified,
    /// `127.0.0.0/8`, `::1`.
    Loopback,
    /// RFC 1918: `10/8`, `172.16/12`, `192.168/16`.
    Private,
    /// `169.254/16`, `fe80::/10`.
    LinkLocal,
    /// A cloud instance-metadata endpoint: `169.254.169.254`, `169.254.170.2` (ECS),
    /// `168.63.129.16` (Azure WireServer), `100.100.100.200` (Alibaba), `fd00:ec2::254`.
    CloudMetadata,
    /// Carrier-grade NAT shared space `100.64/10`.
    SharedAddressSpace,
    /// `224/4`, `ff00::/8`.
    Multicast,
    /// `255.255.255.255`.
    Broadcast,
    /// `240/4`, and IPv6 outside `2000::/3` not otherwise listed.
    Reserved,
    /// `192.0.2/24`, `198.51.100/24`, `203.0.113/24`, `2001:db8::/32`, `3fff::/20`.
    Documentation,
    /// `198.18/15`, `2001:2::/48`.
    Benchmarking,
    /// `192.0.0/24`, `2001::/23` (outside Teredo and benchmarking).
    IetfProtocolAssignments,
    /// `192.88.99/24` (deprecated 6to4 relay anycast).
    SixToFourRelayAnycast,
    /// `fc00::/7`.
    UniqueLocal,
    /// `fec0::/10` (deprecated site-local).
    SiteLocal,
    /// `100::/64` discard-only.
    Discard,
    /// An IPv6 address whose embedded IPv4 address makes it non-public (or which is
    /// non-public by construction: mapped, compatible, local-use NAT64).
    Embedded {
        /// The embedding form.
        via: Embedding,
        /// The embedded IPv4 address.
        v4: Ipv4Addr,
    },
}

impl AddrClass {
    /// True only for [`AddrClass::Public`].
    pub fn is_public(self) -> bool {
        self == AddrClass::Public
    }

    /// For an embedding, the class of the embedded IPv4 address.
    pub fn embedded_class(self) -> Option<AddrClass> {
        match self {
            AddrClass::Embedded { v4, .. } => Some(classify_v4(v4)),
            _ => None,
        }
    }

    /// The class that explains the verdict: the embedded IPv4 address's class if that is
    /// non-public, otherwise `self` (`::ffff:127.0.0.1` → `Loopback`).
    pub fn root(self) -> AddrClass {
        match self.embedded_class() {
            Some(inner) if !inner.is_public() => inner,
            _ => self,
        }
    }

    /// Short human-readable name of the range.
    pub fn name(self) -> &'static str {
        match self {
            AddrClass::Public => "public",
            AddrClass::Unspecified => "unspecified",
            AddrClass::Loopback => "loopback",
            AddrClass::Private => "private",
            AddrClass::LinkLocal => "link-local",
            AddrClass::CloudMetadata => "cloud metadata endpoint",
            AddrClass::SharedAddressSpace => "shared address space (CGNAT)",
            AddrClass::Multicast => "multicast",
            AddrClass::Broadcast => "broadcast",
            AddrClass::Reserved => "reserved",
            AddrClass::Documentation => "documentation",
            AddrClass::Benchmarking => "benchmarking",
            AddrClass::IetfProtocolAssignments => "IETF protocol assignments",
            AddrClass::SixToFourRelayAnycast => "6to4 relay anycast",
            AddrClass::UniqueLocal => "unique local",
            AddrClass::SiteLocal => "site-local",
            AddrClass::Discard => "discard-only",
            AddrClass::Embedded { via, .. } => via.name(),
        }
    }
}

impl fmt::Display for AddrClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AddrClass::Embedded { via, v4 } => {
                write!(f, "{} embedding {v4} ({})", via.name(), classify_v4(*v4))
            }
            other => f.write_str(other.name()),
        }
    }
}

/// IPv4 table, most specific first.
const V4_TABLE: &[([u8; 4], u8, AddrClass)] = &[
    ([255, 255, 255, 255], 32, AddrClass::Broadcast),
    ([169, 254, 169, 254], 32, AddrClass::CloudMetadata),
    ([169, 254, 170, 2], 32, AddrClass::CloudMetadata),
    ([168, 63, 129, 16], 32, AddrClass::CloudMetadata),
    ([100, 100, 100, 200], 32, AddrClass::CloudMetadata),
    ([0, 0, 0, 0], 8, AddrClass::Unspecified),
    ([127, 0, 0, 0], 8, AddrClass::Loopback),
    ([10, 0, 0, 0], 8, AddrClass::Private),
    ([172, 16, 0, 0], 12, AddrClass::Private),
    ([192, 168, 0, 0], 16, AddrClass::Private),
    ([169, 254, 0, 0], 16, AddrClass::LinkLocal),
    ([100, 64, 0, 0], 10, AddrClass::SharedAddressSpace),
    ([192, 0, 0, 0], 24, AddrClass::IetfProtocolAssignments),
    ([192, 0, 2, 0], 24, AddrClass::Documentation),
    ([198, 51, 100, 0], 24, AddrClass::Documentation),
    ([203, 0, 113, 0], 24, AddrClass::Documentation),
    ([198, 18, 0, 0], 15, AddrClass::Benchmarking),
    ([192, 88, 99, 0], 24, AddrClass::SixToFourRelayAnycast),
    ([224, 0, 0, 0], 4, AddrClass::Multicast),
    ([240, 0, 0, 0], 4, AddrClass::Reserved),
];

/// Plain IPv6 ranges (embeddings are handled in code), most specific first.
const V6_TABLE: &[(u128, u8, AddrClass)] = &[
    (0, 128, AddrClass::Unspecified),
    (1, 128, AddrClass::Loopback),
    (0xfd00_0ec2 << 96 | 0x254, 128, AddrClass::CloudMetadata),
    (0x0100 << 112, 64, AddrClass::Discard),
    (0x2001_0db8 << 96, 32, AddrClass::Documentation),
    (0x2001_0002 << 96, 48, AddrClass::Benchmarking),
    (0x3fff << 112, 20, AddrClass::Documentation),
    (0xfc00 << 112, 7, AddrClass::UniqueLocal),
    (0xfe80 << 112, 10, AddrClass::LinkLocal),
    (0xfec0 << 112, 10, AddrClass::SiteLocal),
    (0xff00 << 112, 8, AddrClass::Multicast),
];

fn v4_in(ip: u32, net: [u8; 4], len: u8) -> bool {
    let mask = u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0);
    ip & mask == u32::from_be_bytes(net)
}

fn v6_in(ip: u128, net: u128, len: u8) -> bool {
    let mask = u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0);
    ip & mask == net
}

/// Classify any address.
pub fn classify(ip: IpAddr) -> AddrClass {
    match ip {
        IpAddr::V4(v4) => classify_v4(v4),
        IpAddr::V6(v6) => classify_v6(v6),
    }
}

/// Classify an IPv4 address.
pub fn classify_v4(ip: Ipv4Addr) -> AddrClass {
    let bits = u32::from(ip);
    V4_TABLE
        .iter()
        .find(|(net, len, _)| v4_in(bits, *net, *len))
        .map_or(AddrClass::Public, |(_, _, class)| *class)
}

/// Classify an IPv6 address, looking through every IPv4 embedding.
pub fn classify_v6(ip: Ipv6Addr) -> AddrClass {
    let bits = u128::from(ip);
    let low32 = Ipv4Addr::from(bits as u32);
    if let Some((_, _, class)) = V6_TABLE
        .iter()
        .find(|(net, len, _)| v6_in(bits, *net, *len))
    {
        return *class;
    }
    let embedded = |via, v4| AddrClass::Embedded { via, v4 };
    let if_non_public = |via, v4: Ipv4Addr| {
        if classify_v4(v4).is_public() {
            None
        } else {
            Some(embedded(via, v4))
        }
    };
    // ::ffff:0:0/96 and ::/96 (:: and ::1 were handled by the table).
    if v6_in(bits, 0xffff << 32, 96) {
        return embedded(Embedding::Ipv4Mapped, low32);
    }
    if v6_in(bits, 0, 96) {
        return embedded(Embedding::Ipv4Compatible, low32);
    }
    if v6_in(bits, 0x0064_ff9b << 96, 96) {
        return if_non_public(Embedding::Nat64, low32).unwrap_or(AddrClass::Public);
    }
    if v6_in(bits, 0x0064_ff9b_0001 << 80, 48) {
        return embedded(Embedding::Nat64LocalUse, low32);
    }
    if v6_in(bits, 0x2002 << 112, 16) {
        let v4 = Ipv4Addr::from((bits >> 80) as u32);
        return if_non_public(Embedding::SixToFour, v4).unwrap_or(AddrClass::Public);
    }
    if v6_in(bits, 0x2001_0000 << 96, 32) {
        let server = Ipv4Addr::from((bits >> 64) as u32);
        let client = Ipv4Addr::from(!(bits as u32));
        return if_non_public(Embedding::TeredoServer, server)
            .or_else(|| if_non_public(Embedding::TeredoClient, client))
            .unwrap_or(AddrClass::Public);
    }
    if v6_in(bits, 0x2001_0000 << 96, 23) {
        return AddrClass::IetfProtocolAssignments;
    }
    if !v6_in(bits, 0x2000 << 112, 3) {
        return AddrClass::Reserved;
    }
    AddrClass::Public
}

/// Why a resolver answer set cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum AnswerError {
    /// The resolver returned no addresses.
    #[error("the name resolved to no addresses")]
    Empty,
    /// One address in the set is non-public and not inside an allowed CIDR; the whole
    /// set is refused.
    #[error("answer set refused: {addr} is {class}")]
    Rejected {
        /// The first offending address.
        addr: IpAddr,
        /// Its class.
        class: AddrClass,
    },
}

/// True if `ip` lies in one of `cidrs`. An IPv4-mapped IPv6 address also matches an IPv4
/// CIDR containing the mapped address (it dials that IPv4 host).
pub fn in_cidrs(ip: IpAddr, cidrs: &[IpNet]) -> bool {
    let mapped = match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4),
        IpAddr::V4(_) => None,
    };
    cidrs
        .iter()
        .any(|net| net.contains(&ip) || mapped.is_some_and(|m| net.contains(&m)))
}

/// Check a whole answer set: if ANY address is non-public and not inside one of `cidrs`,
/// the entire set is refused (a rebinding answer mixing public and private addresses gets
/// nothing). Otherwise the first address is the one to dial, and the name must not be
/// resolved again for this connection.
pub fn check_answer_set(addrs: &[IpAddr], cidrs: &[IpNet]) -> Result<IpAddr, AnswerError> {
    let first = *addrs.first().ok_or(AnswerError::Empty)?;
    for &addr in addrs {
        let class = classify(addr);
        if !class.is_public() && !in_cidrs(addr, cidrs) {
            return Err(AnswerError::Rejected { addr, class });
        }
    }
    Ok(first)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // Tests: a panic is the failure report.
mod tests {
    use super::*;

    fn c(s: &str) -> AddrClass {
        classify(s.parse().unwrap())
    }

    fn emb(via: Embedding, v4: &str) -> AddrClass {
        AddrClass::Embedded {
            via,
            v4: v4.parse().unwrap(),
        }
    }

    #[test]
    fn ipv4_ranges() {
        use AddrClass::*;
        let cases = [
            ("127.0.0.1", Loopback),
            ("127.255.255.254", Loopback),
            ("0.0.0.0", Unspecified),
            ("0.1.2.3", Unspecified),
            ("10.0.0.1", Private),
            ("10.255.255.255", Private),
            ("172.16.0.1", Private),
            ("172.31.255.255", Private),
            ("192.168.1.1", Private),
            ("169.254.0.1", LinkLocal),
            ("169.254.169.254", CloudMetadata),
            ("169.254.170.2", CloudMetadata),
            ("168.63.129.16", CloudMetadata),
            ("100.100.100.200", CloudMetadata),
            ("100.64.0.1", SharedAddressSpace),
            ("100.127.255.255", SharedAddressSpace),
            ("224.0.0.1", Multicast),
            ("239.255.255.250", Multicast),
            ("255.255.255.255", Broadcast),
            ("240.0.0.1", Reserved),
            ("255.255.255.254", Reserved),
            ("192.0.2.1", Documentation),
            ("198.51.100.7", Documentation),
            ("203.0.113.200", Documentation),
            ("198.18.0.1", Benchmarking),
            ("198.19.255.255", Benchmarking),
            ("192.0.0.8", IetfProtocolAssignments),
            ("192.88.99.1", SixToFourRelayAnycast),
        ];
        for (ip, class) in cases {
            assert_eq!(c(ip), class, "{ip}");
            assert!(!class.is_public());
        }
    }

    #[test]
    fn ipv4_public_and_boundaries() {
        for ip in [
            "93.184.216.34",
            "1.1.1.1",
            "8.8.8.8",
            "9.255.255.255",
            "11.0.0.0",
            "172.15.255.255",
            "172.32.0.0",
            "192.167.255.255",
            "192.169.0.0",
            "169.253.255.255",
            "169.255.0.0",
            "100.63.255.255",
            "100.128.0.0",
            "126.255.255.255",
            "128.0.0.0",
            "198.17.255.255",
            "198.20.0.0",
            "192.0.1.0",
            "192.0.3.0",
            "192.88.98.255",
            "223.255.255.255",
            "168.63.129.17",
        ] {
            assert_eq!(c(ip), AddrClass::Public, "{ip}");
        }
    }

    #[test]
    fn ipv6_ranges() {
        use AddrClass::*;
        let cases = [
            ("::1", Loopback),
            ("::", Unspecified),
            ("fc00::1", UniqueLocal),
            ("fdff:ffff::1", UniqueLocal),
            ("fd00:ec2::254", CloudMetadata),
            ("fd00:ec2::253", UniqueLocal),
            ("fe80::1", LinkLocal),
            ("febf::1", LinkLocal),
            ("fec0::1", SiteLocal),
            ("feff::1", SiteLocal),
            ("ff02::1", Multicast),
            ("ff0e::1", Multicast),
            ("2001:db8::1", Documentation),
            ("2001:db8:ffff::1", Documentation),
            ("3fff::1", Documentation),
            ("100::1", Discard),
            ("100::ffff:ffff:ffff:ffff", Discard),
            ("2001:2::1", Benchmarking),
            ("2001:10::1", IetfProtocolAssignments),
            ("2001:1ff::1", IetfProtocolAssignments),
            ("::ffff:0:7f00:1", Reserved),
            ("100:0:0:1::", Reserved),
            ("4000::1", Reserved),
            ("5f00::1", Reserved),
            ("1000::1", Reserved),
        ];
        for (ip, class) in cases {
            assert_eq!(c(ip), class, "{ip}");
            assert!(!class.is_public());
        }
    }

    #[test]
    fn ipv6_public() {
        for ip in [
            "2606:4700::1111",
            "2a00:1450:4001:80b::200e",
            "2001:200::1",
            "2001:4860:4860::8888",
            "2002:5db8:d822::1",
            "64:ff9b::5db8:d822",
            "64:ff9b::93.184.216.34",
            "3fff:1000::1",
        ] {
            assert_eq!(c(ip), AddrClass::Public, "{ip}");
        }
    }

    #[test]
    fn embeddings() {
        use Embedding::*;
        let cases = [
            ("::ffff:127.0.0.1", emb(Ipv4Mapped, "127.0.0.1")),
            ("::ffff:169.254.169.254", emb(Ipv4Mapped, "169.254.169.254")),
            // Mapped and compatible are non-public even with a public IPv4 inside.
            ("::ffff:93.184.216.34", emb(Ipv4Mapped, "93.184.216.34")),
            ("::127.0.0.1", emb(Ipv4Compatible, "127.0.0.1")),
            ("::93.184.216.34", emb(Ipv4Compatible, "93.184.216.34")),
            ("::2", emb(Ipv4Compatible, "0.0.0.2")),
            ("64:ff9b::7f00:1", emb(Nat64, "127.0.0.1")),
            ("64:ff9b::a9fe:a9fe", emb(Nat64, "169.254.169.254")),
            ("64:ff9b::10.0.0.1", emb(Nat64, "10.0.0.1")),
            ("64:ff9b:1::7f00:1", emb(Nat64LocalUse, "127.0.0.1")),
            ("64:ff9b:1::5db8:d822", emb(Nat64LocalUse, "93.184.216.34")),
            ("2002:7f00:1::", emb(SixToFour, "127.0.0.1")),
            ("2002:a9fe:a9fe::1", emb(SixToFour, "169.254.169.254")),
            ("2002:c0a8:101::", emb(SixToFour, "192.168.1.1")),
            // Teredo client 127.0.0.1: last 32 bits are !0x7f000001 = 0x80fffffe.
            (
                "2001:0:5db8:d822::80ff:fffe",
                emb(TeredoClient, "127.0.0.1"),
            ),
            (
                "2001:0:5db8:d822::5601:5601",
                emb(TeredoClient, "169.254.169.254"),
            ),
            ("2001:0:a00:1::5db8:d822", emb(TeredoServer, "10.0.0.1")),
        ];
        for (ip, class) in cases {
            assert_eq!(c(ip), class, "{ip}");
            assert!(!class.is_public(), "{ip}");
        }
        // Teredo with both endpoints public: 93.184.216.34 server, client 1.1.1.1.
        assert_eq!(c("2001:0:5db8:d822::fefe:fefe"), AddrClass::Public);
    }

    #[test]
    fn root_class_and_display() {
        assert_eq!(c("::ffff:127.0.0.1").root(), AddrClass::Loopback);
        assert_eq!(c("::127.0.0.1").root(), AddrClass::Loopback);
        assert_eq!(c("64:ff9b::7f00:1").root(), AddrClass::Loopback);
        assert_eq!(c("2002:7f00:1::").root(), AddrClass::Loopback);
        assert_eq!(c("2001:0:5db8:d822::80ff:fffe").root(), AddrClass::Loopback);
        assert_eq!(c("::1").root(), AddrClass::Loopback);
        assert_eq!(
            c("::ffff:93.184.216.34").embedded_class(),
            Some(AddrClass::Public)
        );
        assert_eq!(
            c("::ffff:93.184.216.34").root(),
            emb(Embedding::Ipv4Mapped, "93.184.216.34")
        );
        assert_eq!(c("127.0.0.1").embedded_class(), None);
        assert_eq!(
            c("64:ff9b::7f00:1").to_string(),
            "NAT64 (64:ff9b::/96) embedding 127.0.0.1 (loopback)"
        );
        assert_eq!(c("169.254.169.254").to_string(), "cloud metadata endpoint");
    }

    #[test]
    fn every_literal_form_of_loopback() {
        use crate::target::{parse_host, Host};
        for s in [
            "0x7f.1",
            "2130706433",
            "017700000001",
            "127.1",
            "[::ffff:127.0.0.1]",
            "[::1]",
            "[::127.0.0.1]",
            "[64:ff9b::7f00:1]",
            "[2002:7f00:1::]",
        ] {
            let Ok(Host::Ip(ip)) = parse_host(s) else {
                panic!("{s:?} is not an IP literal");
            };
            assert_eq!(classify(ip).root(), AddrClass::Loopback, "{s:?}");
        }
    }

    fn ips(list: &[&str]) -> Vec<IpAddr> {
        list.iter().map(|s| s.parse().unwrap()).collect()
    }

    fn nets(list: &[&str]) -> Vec<IpNet> {
        list.iter().map(|s| s.parse().unwrap()).collect()
    }

    #[test]
    fn answer_set_all_or_nothing() {
        assert_eq!(check_answer_set(&[], &[]), Err(AnswerError::Empty));
        assert_eq!(
            check_answer_set(&ips(&["93.184.216.34", "2606:4700::1111"]), &[]),
            Ok("93.184.216.34".parse().unwrap())
        );
        // One bad address poisons the whole set, wherever it is.
        for bad in [
            "127.0.0.1",
            "169.254.169.254",
            "::ffff:10.0.0.1",
            "fd00:ec2::254",
        ] {
            let set = ips(&["93.184.216.34", bad, "1.1.1.1"]);
            assert_eq!(
                check_answer_set(&set, &[]),
                Err(AnswerError::Rejected {
                    addr: bad.parse().unwrap(),
                    class: c(bad)
                }),
                "{bad}"
            );
        }
        let err = check_answer_set(&ips(&["1.1.1.1", "10.0.0.1"]), &[]).unwrap_err();
        assert_eq!(err.to_string(), "answer set refused: 10.0.0.1 is private");
    }

    #[test]
    fn answer_set_with_cidrs() {
        let allowed = nets(&["10.1.0.0/16", "fd12::/16"]);
        assert_eq!(
            check_answer_set(&ips(&["10.1.2.3", "fd12::1", "1.1.1.1"]), &allowed),
            Ok("10.1.2.3".parse().unwrap())
        );
        // A mapped address is covered by the IPv4 CIDR of the address it dials.
        assert_eq!(
            check_answer_set(&ips(&["::ffff:10.1.2.3"]), &allowed),
            Ok("::ffff:10.1.2.3".parse().unwrap())
        );
        // Outside the CIDR is still refused, and so is the rest of the set.
        assert!(matches!(
            check_answer_set(&ips(&["10.1.2.3", "10.2.0.1"]), &allowed),
            Err(AnswerError::Rejected { .. })
        ));
        assert!(matches!(
            check_answer_set(&ips(&["10.1.2.3", "169.254.169.254"]), &allowed),
            Err(AnswerError::Rejected {
                class: AddrClass::CloudMetadata,
                ..
            })
        ));
        assert!(in_cidrs("10.1.0.1".parse().unwrap(), &allowed));
        assert!(!in_cidrs("::10.1.0.1".parse().unwrap(), &allowed));
    }
}
