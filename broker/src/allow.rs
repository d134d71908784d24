//! The allowlist and the policy decision for a parsed [`Target`].
//!
//! Entries are `host`, `host:port`, `*.suffix` and `*.suffix:port`, normalised exactly like
//! targets (IDNA, lowercase, one trailing dot stripped), so string equality of normalised
//! names is the whole matching rule. An entry without a port allows port 443 only; any
//! other port (80, 22, ...) must be written explicitly and each entry allows one port.
//! `*.example.com` matches strict subdomains (`a.example.com`, `a.b.example.com`), never
//! `example.com` itself, `example.com.evil` or `evilexample.com`.
//!
//! `allow_cidrs` is the only way to permit an IP-literal target, and the only way a
//! non-public resolved address is accepted. A CIDR rule is `net/len` or `net/len:port`; its
//! port (443 when absent) applies to IP-literal targets only: for a resolved name, the port
//! was already authorised by the name's allowlist entry, and any CIDR admits the address.

use std::fmt;
use std::net::IpAddr;

use ipnet::IpNet;
use thiserror::Error;

use crate::classify::{check_answer_set, in_cidrs, AnswerError};
use crate::target::{parse_port, DnsName, Target, TargetError};

/// The port an entry without an explicit port allows.
pub const DEFAULT_PORT: u16 = 443;

/// Why an allowlist or CIDR entry was refused. Every variant names the entry.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum AllowError {
    /// The host or port part failed the same checks a target gets.
    #[error("allowlist entry {entry:?}")]
    Invalid {
        /// The entry as written.
        entry: String,
        /// What is wrong with it.
        #[source]
        source: TargetError,
    },
    /// An IP literal (in any form) where a name was expected.
    #[error("allowlist entry {entry:?} is an IP address; use allow_cidrs for addresses")]
    IpLiteral {
        /// The entry as written.
        entry: String,
    },
    /// A `*` anywhere but as a whole leading `*.` label.
    #[error("allowlist entry {entry:?}: a wildcard must be a leading '*.' followed by a domain")]
    BadWildcard {
        /// The entry as written.
        entry: String,
    },
    /// `*.com`: a wildcard over a single label.
    #[error("allowlist entry {entry:?}: a wildcard over a single-label suffix is too broad")]
    WildcardTooBroad {
        /// The entry as written.
        entry: String,
    },
    /// A malformed `allow_cidrs` entry.
    #[error("allow_cidrs entry {entry:?}: {reason}")]
    BadCidr {
        /// The entry as written.
        entry: String,
        /// What is wrong with it.
        reason: String,
        /// The parser's error, when one said it (a bad port).
        #[source]
        source: Option<TargetError>,
    },
}

/// The host part of an allowlist entry.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum HostPattern {
    /// `host`: exactly this name.
    Exact(DnsName),
    /// `*.suffix`: any strict subdomain of `suffix` (stored without `*.`).
    Subdomains(DnsName),
}

impl HostPattern {
    /// True if `name` matches this pattern.
    pub fn matches(&self, name: &DnsName) -> bool {
        match self {
            HostPattern::Exact(host) => host == name,
            HostPattern::Subdomains(suffix) => name.is_strict_subdomain_of(suffix),
        }
    }
}

impl fmt::Display for HostPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HostPattern::Exact(host) => write!(f, "{host}"),
            HostPattern::Subdomains(suffix) => write!(f, "*.{suffix}"),
        }
    }
}

/// One parsed `network.deny` entry: a host pattern, and the one port it refuses, or every
/// port when the entry named none (a refusal is read broadly, unlike an allow entry).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct DenyEntry {
    /// Which names.
    pub pattern: HostPattern,
    /// Which port (`None`: all of them).
    pub port: Option<u16>,
}

impl DenyEntry {
    /// Parse `host`, `host:port`, `*.suffix` or `*.suffix:port` (the allowlist's syntax).
    pub fn parse(entry: &str) -> Result<Self, AllowError> {
        let a = AllowEntry::parse(entry)?;
        // Names hold no ':' and IP literals are refused above: a ':' is the port's.
        let port = entry.contains(':').then_some(a.port);
        Ok(DenyEntry {
            pattern: a.pattern,
            port,
        })
    }

    /// True if this entry refuses `name` on `port`.
    pub fn refuses(&self, name: &DnsName, port: u16) -> bool {
        self.port.is_none_or(|p| p == port) && self.pattern.matches(name)
    }
}

impl fmt::Display for DenyEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.port {
            Some(p) => write!(f, "{}:{p}", self.pattern),
            None => write!(f, "{}:*", self.pattern),
        }
    }
}

/// One parsed allowlist entry: a host pattern and the one port it allows.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct AllowEntry {
    /// Which names.
    pub pattern: HostPattern,
    /// Which port ([`DEFAULT_PORT`] when the entry named none).
    pub port: u16,
}

impl AllowEntry {
    /// Parse `host`, `host:port`, `*.suffix` or `*.suffix:port`.
    pub fn parse(entry: &str) -> Result<Self, AllowError> {
        let owned = || entry.to_owned();
        let (wildcard, rest) = match entry.strip_prefix("*.") {
            Some(rest) => (true, rest),
            None => (false, entry),
        };
        if rest.contains('*') || (wildcard && rest.is_empty()) {
            return Err(AllowError::BadWildcard { entry: owned() });
        }
        let target = Target::parse_host_port(rest, Some(DEFAULT_PORT)).map_err(|source| {
            AllowError::Invalid {
                entry: owned(),
                source,
            }
        })?;
        let (name, port) = match target {
            Target::Name { name, port } => (name, port),
            Target::Ip { .. } => return Err(AllowError::IpLiteral { entry: owned() }),
        };
        let pattern = if wildcard {
            if name.label_count() < 2 {
                return Err(AllowError::WildcardTooBroad { entry: owned() });
            }
            HostPattern::Subdomains(name)
        } else {
            HostPattern::Exact(name)
        };
        Ok(AllowEntry { pattern, port })
    }

    /// True if this entry allows `name` on `port`.
    pub fn allows(&self, name: &DnsName, port: u16) -> bool {
        self.port == port && self.pattern.matches(name)
    }
}

impl fmt::Display for AllowEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.pattern, self.port)
    }
}

/// One parsed `allow_cidrs` entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CidrRule {
    /// The range (host bits are always zero).
    pub net: IpNet,
    /// The port an IP-literal target inside `net` may use ([`DEFAULT_PORT`] when none).
    pub port: u16,
}

impl CidrRule {
    /// Parse `addr/len` or `addr/len:port`. Addresses use the strict standard notation
    /// (no `inet_aton` shorthands, no leading zeros), the prefix length is required, and
    /// host bits must be zero.
    pub fn parse(entry: &str) -> Result<Self, AllowError> {
        let bad = |reason: String| AllowError::BadCidr {
            entry: entry.to_owned(),
            reason,
            source: None,
        };
        if let Some(ch) = entry.chars().find(|c| c.is_whitespace() || c.is_control()) {
            return Err(bad(format!("whitespace or control character {ch:?}")));
        }
        let Some((addr, rest)) = entry.split_once('/') else {
            return Err(bad("missing '/prefix-length'".into()));
        };
        let (len, port) = match rest.split_once(':') {
            Some((len, port)) => (len, Some(port)),
            None => (rest, None),
        };
        let addr: IpAddr = addr.parse().map_err(|_| {
            bad(format!(
                "{addr:?} is not an IPv4 or IPv6 address in standard notation"
            ))
        })?;
        if len.is_empty() || len.len() > 3 || !len.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad(format!("prefix length {len:?} is not a number")));
        }
        let len: u8 = len
            .parse()
            .map_err(|_| bad(format!("prefix length {len} is too long")))?;
        let net =
            IpNet::new(addr, len).map_err(|_| bad(format!("prefix length {len} is too long")))?;
        if net.trunc() != net {
            return Err(bad(format!(
                "host bits are set; did you mean {}?",
                net.trunc()
            )));
        }
        let port = match port {
            Some(p) => parse_port(p).map_err(|source| AllowError::BadCidr {
                entry: entry.to_owned(),
                reason: "bad port".into(),
                source: Some(source),
            })?,
            None => DEFAULT_PORT,
        };
        Ok(CidrRule { net, port })
    }

    /// True if this rule permits an IP-literal target `addr:port`.
    pub fn admits_literal(&self, addr: IpAddr, port: u16) -> bool {
        self.port == port && in_cidrs(addr, &[self.net])
    }
}

impl fmt::Display for CidrRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.net, self.port)
    }
}

/// Why a target was denied.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum DenyReason {
    /// A `network.deny` entry names it.
    #[error("refused by network.deny entry {entry}")]
    PolicyDeny {
        /// The entry, as `pattern:port` or `pattern:*`.
        entry: String,
    },
    /// Strict mode never allows port 80.
    #[error("port 80 (plaintext HTTP) is refused in strict mode")]
    StrictPort80,
    /// Strict mode never allows an IP literal.
    #[error("IP literal {addr} is refused in strict mode")]
    StrictIpLiteral {
        /// The literal.
        addr: IpAddr,
    },
    /// An IP literal outside every allowed CIDR (for that port).
    #[error("IP literal {addr} port {port} is not permitted by allow_cidrs")]
    IpLiteralNotAllowed {
        /// The literal.
        addr: IpAddr,
        /// The requested port.
        port: u16,
    },
    /// No entry matches the name at all.
    #[error("{name} is not in the allowlist")]
    NotAllowlisted {
        /// The normalised name.
        name: DnsName,
    },
    /// Some entry matches the name, but none for this port.
    #[error(
        "{name} is allowlisted, but not for port {port} (entries without a port allow 443 only)"
    )]
    PortNotAllowed {
        /// The normalised name.
        name: DnsName,
        /// The requested port.
        port: u16,
    },
}

/// The verdict for one target.
#[must_use]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Go ahead: resolve (names only), check the answer set, dial one address.
    Allow,
    /// Refuse the connection.
    Deny(DenyReason),
}

impl Decision {
    /// True for [`Decision::Allow`].
    pub fn is_allowed(&self) -> bool {
        matches!(self, Decision::Allow)
    }
}

/// The broker's network policy.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Policy {
    /// Allowed names and ports.
    pub allow: Vec<AllowEntry>,
    /// Allowed address ranges.
    pub cidrs: Vec<CidrRule>,
    /// Strict mode: no IP literals at all, no port 80.
    pub strict: bool,
    /// Refused names (`network.deny`), before everything else.
    pub deny: Vec<DenyEntry>,
}

impl Policy {
    /// Parse a policy from its string form (as in `[network] allow` / `allow_cidrs`).
    /// The first bad entry is the error.
    pub fn parse<A: AsRef<str>, C: AsRef<str>>(
        allow: &[A],
        cidrs: &[C],
        strict: bool,
    ) -> Result<Self, AllowError> {
        Ok(Policy {
            allow: allow
                .iter()
                .map(|e| AllowEntry::parse(e.as_ref()))
                .collect::<Result<_, _>>()?,
            cidrs: cidrs
                .iter()
                .map(|e| CidrRule::parse(e.as_ref()))
                .collect::<Result<_, _>>()?,
            strict,
            deny: vec![],
        })
    }

    /// This policy with `network.deny` entries. The first bad entry is the error.
    pub fn with_deny<D: AsRef<str>>(mut self, deny: &[D]) -> Result<Self, AllowError> {
        self.deny = deny
            .iter()
            .map(|e| DenyEntry::parse(e.as_ref()))
            .collect::<Result<_, _>>()?;
        Ok(self)
    }

    /// The `network.deny` entry that refuses `target`, if any (names only: IP literals have
    /// their own rules, `allow_cidrs`).
    pub fn denied_by(&self, target: &Target) -> Option<&DenyEntry> {
        match target {
            Target::Name { name, port } => self.deny.iter().find(|d| d.refuses(name, *port)),
            Target::Ip { .. } => None,
        }
    }

    /// Decide whether `target` may be connected to, before any resolution.
    pub fn decide(&self, target: &Target) -> Decision {
        if let Some(d) = self.denied_by(target) {
            return Decision::Deny(DenyReason::PolicyDeny {
                entry: d.to_string(),
            });
        }
        let port = target.port();
        if self.strict && port == 80 {
            return Decision::Deny(DenyReason::StrictPort80);
        }
        match target {
            Target::Ip { addr, port } => {
                if self.strict {
                    Decision::Deny(DenyReason::StrictIpLiteral { addr: *addr })
                } else if self.cidrs.iter().any(|r| r.admits_literal(*addr, *port)) {
                    Decision::Allow
                } else {
                    Decision::Deny(DenyReason::IpLiteralNotAllowed {
                        addr: *addr,
                        port: *port,
                    })
                }
            }
            Target::Name { name, port } => {
                let mut name_matched = false;
                for entry in &self.allow {
                    if entry.pattern.matches(name) {
                        if entry.port == *port {
                            return Decision::Allow;
                        }
                        name_matched = true;
                    }
                }
                Decision::Deny(if name_matched {
                    DenyReason::PortNotAllowed {
                        name: name.clone(),
                        port: *port,
                    }
                } else {
                    DenyReason::NotAllowlisted { name: name.clone() }
                })
            }
        }
    }

    /// All allowed ranges, regardless of port (for answer-set checks).
    pub fn cidr_nets(&self) -> Vec<IpNet> {
        self.cidrs.iter().map(|r| r.net).collect()
    }

    /// Check a resolver answer set against the classification table and `allow_cidrs`;
    /// see [`check_answer_set`].
    pub fn check_answer(&self, addrs: &[IpAddr]) -> Result<IpAddr, AnswerError> {
        check_answer_set(addrs, &self.cidr_nets())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // Tests: a panic is the failure report.
mod tests {
    use super::*;

    fn policy(allow: &[&str], cidrs: &[&str], strict: bool) -> Policy {
        Policy::parse(allow, cidrs, strict).unwrap()
    }

    fn t(s: &str) -> Target {
        Target::parse_connect_authority(s).unwrap()
    }

    fn allowed(p: &Policy, target: &str) -> bool {
        p.decide(&t(target)).is_allowed()
    }

    fn name(s: &str) -> DnsName {
        DnsName::parse(s).unwrap()
    }

    #[test]
    fn wildcard_matching() {
        let p = policy(&["*.example.com"], &[], false);
        assert!(allowed(&p, "a.example.com:443"));
        assert!(allowed(&p, "a.b.example.com:443"));
        assert!(!allowed(&p, "example.com:443"));
        assert!(!allowed(&p, "example.com.evil:443"));
        assert!(!allowed(&p, "a.example.com.evil:443"));
        assert!(!allowed(&p, "evilexample.com:443"));
        assert!(!allowed(&p, "a.evilexample.com:443"));
        assert!(!allowed(&p, "example.org:443"));
        assert_eq!(
            p.decide(&t("example.com.evil:443")),
            Decision::Deny(DenyReason::NotAllowlisted {
                name: name("example.com.evil")
            })
        );
    }

    #[test]
    fn exact_matching() {
        let p = policy(&["example.com"], &[], false);
        assert!(allowed(&p, "example.com:443"));
        assert!(!allowed(&p, "a.example.com:443"));
        assert!(!allowed(&p, "example.co:443"));
        assert!(!allowed(&p, "xexample.com:443"));
    }

    #[test]
    fn ports_are_explicit() {
        let p = policy(
            &["example.com", "git.example.com:22", "*.cdn.example:80"],
            &[],
            false,
        );
        assert!(allowed(&p, "example.com:443"));
        assert_eq!(
            p.decide(&t("example.com:80")),
            Decision::Deny(DenyReason::PortNotAllowed {
                name: name("example.com"),
                port: 80
            })
        );
        assert!(!allowed(&p, "example.com:22"));
        assert!(!allowed(&p, "example.com:8443"));
        assert!(allowed(&p, "git.example.com:22"));
        // An entry with a port allows that port only, not 443 as well.
        assert!(!allowed(&p, "git.example.com:443"));
        assert!(allowed(&p, "a.cdn.example:80"));
        assert!(!allowed(&p, "a.cdn.example:443"));
        // Explicit :443 is the same as no port.
        assert_eq!(AllowEntry::parse("a.com:443"), AllowEntry::parse("a.com"));
    }

    #[test]
    fn case_and_trailing_dot_normalise_to_same_hit() {
        for entry in ["example.com", "EXAMPLE.COM", "Example.Com.", "example.com."] {
            let p = policy(&[entry], &[], false);
            for target in [
                "example.com:443",
                "EXAMPLE.COM:443",
                "ExAmPlE.cOm.:443",
                "example.com.:443",
            ] {
                assert!(allowed(&p, target), "{entry} vs {target}");
            }
        }
        let p = policy(&["*.Example.COM."], &[], false);
        assert!(allowed(&p, "WWW.example.com.:443"));
        assert!(!allowed(&p, "EXAMPLE.COM.:443"));
    }

    #[test]
    fn unicode_names_both_ways() {
        for entry in ["bücher.example", "xn--bcher-kva.example", "BÜCHER.example."] {
            let p = policy(&[entry], &[], false);
            assert!(allowed(&p, "bücher.example:443"), "{entry}");
            assert!(allowed(&p, "xn--bcher-kva.example:443"), "{entry}");
            assert!(allowed(&p, "XN--BCHER-KVA.EXAMPLE.:443"), "{entry}");
            assert!(!allowed(&p, "bucher.example:443"), "{entry}");
        }
        let p = policy(&["*.bücher.example"], &[], false);
        assert!(allowed(&p, "www.xn--bcher-kva.example:443"));
        assert!(allowed(&p, "shop.bücher.example:443"));
        assert_eq!(
            p.allow[0].to_string(),
            "*.xn--bcher-kva.example:443".to_owned()
        );
    }

    #[test]
    fn ip_literals_need_cidrs() {
        let p = policy(&["example.com"], &[], false);
        for target in [
            "127.0.0.1:443",
            "0x7f.1:443",
            "[::1]:443",
            "93.184.216.34:443",
        ] {
            assert!(
                matches!(
                    p.decide(&t(target)),
                    Decision::Deny(DenyReason::IpLiteralNotAllowed { .. })
                ),
                "{target}"
            );
        }
        let p = policy(
            &[],
            &[
                "10.1.0.0/16",
                "10.1.0.0/16:5432",
                "fd12::/16",
                "93.184.216.0/24",
            ],
            false,
        );
        assert!(allowed(&p, "10.1.2.3:443"));
        assert!(allowed(&p, "10.1.2.3:5432"));
        assert!(allowed(&p, "[::ffff:10.1.2.3]:443"));
        assert!(allowed(&p, "[fd12::1]:443"));
        assert!(allowed(&p, "93.184.216.34:443"));
        assert!(!allowed(&p, "10.1.2.3:80"));
        assert!(!allowed(&p, "10.2.0.1:443"));
        assert!(!allowed(&p, "[fd12::1]:5432"));
        // The inet_aton spelling of an address in range is the same address.
        assert!(allowed(&p, "10.66051:443"));
    }

    #[test]
    fn strict_mode() {
        let p = policy(
            &["example.com", "example.com:80", "plain.example:80"],
            &["10.0.0.0/8", "10.0.0.0/8:80"],
            true,
        );
        assert!(allowed(&p, "example.com:443"));
        assert_eq!(
            p.decide(&t("example.com:80")),
            Decision::Deny(DenyReason::StrictPort80)
        );
        assert_eq!(
            p.decide(&t("plain.example:80")),
            Decision::Deny(DenyReason::StrictPort80)
        );
        assert_eq!(
            p.decide(&t("10.0.0.1:443")),
            Decision::Deny(DenyReason::StrictIpLiteral {
                addr: "10.0.0.1".parse().unwrap()
            })
        );
        assert!(!allowed(&p, "[::1]:443"));
        assert!(!allowed(&p, "2130706433:443"));
        // The same policy without strict allows all of them.
        let lax = Policy { strict: false, ..p };
        assert!(allowed(&lax, "example.com:80"));
        assert!(allowed(&lax, "10.0.0.1:443"));
        assert!(allowed(&lax, "10.0.0.1:80"));
    }

    #[test]
    fn entry_errors_name_the_entry() {
        let cases: &[(&str, AllowError)] = &[
            (
                "a@b.com",
                AllowError::Invalid {
                    entry: "a@b.com".into(),
                    source: TargetError::Userinfo,
                },
            ),
            (
                "b.com:0",
                AllowError::Invalid {
                    entry: "b.com:0".into(),
                    source: TargetError::PortZero,
                },
            ),
            (
                "b.com:65536",
                AllowError::Invalid {
                    entry: "b.com:65536".into(),
                    source: TargetError::PortOutOfRange("65536".into()),
                },
            ),
            (
                "b.com:",
                AllowError::Invalid {
                    entry: "b.com:".into(),
                    source: TargetError::MissingPort,
                },
            ),
            (
                "",
                AllowError::Invalid {
                    entry: "".into(),
                    source: TargetError::Empty,
                },
            ),
            (
                "-b.com",
                AllowError::Invalid {
                    entry: "-b.com".into(),
                    source: TargetError::HyphenAtEdge { label: "-b".into() },
                },
            ),
            ("*", AllowError::BadWildcard { entry: "*".into() }),
            ("*.", AllowError::BadWildcard { entry: "*.".into() }),
            (
                "*example.com",
                AllowError::BadWildcard {
                    entry: "*example.com".into(),
                },
            ),
            (
                "a.*.com",
                AllowError::BadWildcard {
                    entry: "a.*.com".into(),
                },
            ),
            (
                "*.*.com",
                AllowError::BadWildcard {
                    entry: "*.*.com".into(),
                },
            ),
            (
                "*.com",
                AllowError::WildcardTooBroad {
                    entry: "*.com".into(),
                },
            ),
            (
                "127.0.0.1",
                AllowError::IpLiteral {
                    entry: "127.0.0.1".into(),
                },
            ),
            (
                "0x7f.1:80",
                AllowError::IpLiteral {
                    entry: "0x7f.1:80".into(),
                },
            ),
            (
                "[::1]:443",
                AllowError::IpLiteral {
                    entry: "[::1]:443".into(),
                },
            ),
        ];
        for (entry, err) in cases {
            assert_eq!(AllowEntry::parse(entry).as_ref(), Err(err), "{entry:?}");
            assert!(err.to_string().contains(&format!("{entry:?}")));
        }
        let err = Policy::parse(&["ok.com", "bad_name.com"], &[] as &[&str], false).unwrap_err();
        assert_eq!(err.to_string(), "allowlist entry \"bad_name.com\"");
        assert_eq!(
            crate::error_chain(&err),
            "allowlist entry \"bad_name.com\": character '_' is not allowed in a DNS name \
             (only letters, digits and '-')"
        );
    }

    #[test]
    fn cidr_parsing() {
        let r = CidrRule::parse("10.1.0.0/16").unwrap();
        assert_eq!(r.port, 443);
        assert_eq!(r.to_string(), "10.1.0.0/16:443");
        assert_eq!(CidrRule::parse("fd00::/8:5432").unwrap().port, 5432);
        assert_eq!(
            CidrRule::parse("::ffff:10.0.0.0/104").unwrap().net,
            "::ffff:10.0.0.0/104".parse::<IpNet>().unwrap()
        );
        for bad in [
            "10.1.0.0",
            "10.1.0.1/16",
            "10.1/16",
            "010.1.0.0/16",
            "0x0a.1.0.0/16",
            "10.1.0.0/33",
            "::/129",
            "10.1.0.0/",
            "10.1.0.0/1a",
            "10.1.0.0/0016",
            "10.1.0.0/16:0",
            "10.1.0.0/16:",
            "10.1.0.0/16:http",
            "10.1.0.0 /16",
            "[fd00::]/8",
            "example.com/24",
            "",
        ] {
            let err = CidrRule::parse(bad).unwrap_err();
            assert!(
                matches!(&err, AllowError::BadCidr { entry, .. } if entry == bad),
                "{bad:?}: {err}"
            );
        }
        assert_eq!(
            crate::error_chain(&CidrRule::parse("10.1.0.0/16:http").unwrap_err()),
            "allow_cidrs entry \"10.1.0.0/16:http\": bad port: port \"http\" is not a decimal \
             number"
        );
        assert_eq!(
            CidrRule::parse("10.1.0.1/16").unwrap_err().to_string(),
            "allow_cidrs entry \"10.1.0.1/16\": host bits are set; did you mean 10.1.0.0/16?"
        );
    }

    #[test]
    fn answer_check_uses_all_cidrs() {
        let p = policy(&["db.internal:5432"], &["10.1.0.0/16"], false);
        assert!(allowed(&p, "db.internal:5432"));
        // The name's entry authorised port 5432; the CIDR admits the private address.
        assert_eq!(
            p.check_answer(&["10.1.0.5".parse().unwrap()]),
            Ok("10.1.0.5".parse().unwrap())
        );
        assert!(p
            .check_answer(&["10.1.0.5".parse().unwrap(), "10.2.0.5".parse().unwrap()])
            .is_err());
        assert!(Policy::default()
            .check_answer(&["10.1.0.5".parse().unwrap()])
            .is_err());
    }
}
