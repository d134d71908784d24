//! Strict parsing and normalisation of a connection destination.
//!
//! A destination reaches the broker as the authority of an HTTP `CONNECT host:port` request
//! line, as the domain field of a SOCKS5 request, or as a `host[:port]` argument. All of them
//! end up here and come out as a [`Target`]: either a validated, normalised [`DnsName`] or an
//! IP literal. Anything ambiguous is refused with a [`TargetError`] that names the problem.
//!
//! Normalisation is: UTS-46 / IDNA mapping to ASCII (which lowercases, maps full-width
//! characters and turns Unicode labels into punycode), ASCII lowercasing, and stripping ONE
//! trailing dot. Only the normalised string is ever used afterwards (allowlist matching and
//! resolution), so what was checked is exactly what is resolved.
//!
//! IP literals are recognised in every form a resolver or `inet_aton(3)` would accept: dotted
//! quad, bracketed IPv6, and the legacy forms `0x7f.1`, `2130706433`, `017700000001`,
//! `127.1`. Detection runs on the normalised (post-IDNA) string, so `１２７.０.０.１` written
//! in full-width digits is an IP literal too. A name whose last label is numeric but which is
//! not a valid IPv4 address (`1.2.3.256`, `08.1`, `example.123`) is refused outright: a name
//! that looks like a number is never handed to DNS.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use idna::uts46::{AsciiDenyList, DnsLength, Hyphens, Uts46};
use thiserror::Error;

/// Longest raw input accepted before any IDNA processing (a cheap guard; real names are
/// bounded by [`MAX_NAME_LEN`] after normalisation).
pub const MAX_INPUT_LEN: usize = 1024;
/// Longest DNS name in presentation form, without the trailing dot.
pub const MAX_NAME_LEN: usize = 253;
/// Longest DNS label.
pub const MAX_LABEL_LEN: usize = 63;

/// Why a destination was refused.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum TargetError {
    /// Nothing to parse (or only a root dot).
    #[error("empty destination")]
    Empty,
    /// The raw input is absurdly long.
    #[error("destination is {len} bytes long (max {MAX_INPUT_LEN})")]
    InputTooLong {
        /// Length of the raw input in bytes.
        len: usize,
    },
    /// The SOCKS5 domain field is not UTF-8.
    #[error("destination is not valid UTF-8")]
    InvalidUtf8,
    /// Whitespace or a control character anywhere in the destination.
    #[error("whitespace or control character {ch:?} in destination")]
    WhitespaceOrControl {
        /// The offending character.
        ch: char,
    },
    /// An invisible (Unicode Default_Ignorable) character such as U+200B or U+00AD, which
    /// UTS-46 would silently delete: refused so what is shown is what is checked.
    #[error("invisible character {ch:?} in destination")]
    InvisibleChar {
        /// The offending character.
        ch: char,
    },
    /// A `%` anywhere: percent-encoding is never decoded, so it is refused.
    #[error("percent-encoding ('%') is not allowed in a destination")]
    PercentEncoding,
    /// `user@host`: userinfo has no meaning for a broker destination.
    #[error("userinfo ('user@host') is not allowed in a destination")]
    Userinfo,
    /// No port where one is required, or an empty port after `:`.
    #[error("missing port")]
    MissingPort,
    /// The port is not a plain decimal number.
    #[error("port {0:?} is not a decimal number")]
    NonNumericPort(String),
    /// Port 0.
    #[error("port 0 is not a valid destination port")]
    PortZero,
    /// The port does not fit in 16 bits.
    #[error("port {0} is out of range (max 65535)")]
    PortOutOfRange(String),
    /// A `:` in the host part that is not a bracketed IPv6 literal.
    #[error("unexpected ':' in host (IPv6 literals must be written as [addr]:port)")]
    UnexpectedColon,
    /// Something in `[...]` that is not an IPv6 address, or unbalanced brackets.
    #[error("malformed bracketed IPv6 literal {0:?}")]
    BadIpv6Literal(String),
    /// Two dots in a row, or a leading dot.
    #[error("empty label in DNS name")]
    EmptyLabel,
    /// A label longer than 63 bytes (after IDNA).
    #[error("label {label:?} is {len} bytes long (max {MAX_LABEL_LEN})")]
    LabelTooLong {
        /// The label (normalised).
        label: String,
        /// Its length in bytes.
        len: usize,
    },
    /// A name longer than 253 bytes (after IDNA, without trailing dot).
    #[error("DNS name is {len} bytes long (max {MAX_NAME_LEN})")]
    NameTooLong {
        /// Length in bytes.
        len: usize,
    },
    /// A character outside letters, digits and `-` (checked after IDNA).
    #[error("character {ch:?} is not allowed in a DNS name (only letters, digits and '-')")]
    NonLdh {
        /// The offending character.
        ch: char,
    },
    /// A label starting or ending with `-`.
    #[error("label {label:?} starts or ends with '-'")]
    HyphenAtEdge {
        /// The label (normalised).
        label: String,
    },
    /// UTS-46 processing refused the name (invalid punycode, disallowed code point, bidi...).
    #[error("IDNA (UTS-46) processing rejected {0:?}")]
    Idna(String),
    /// The name ends in a numeric label but is not a valid IPv4 address in any form.
    #[error("{0:?} looks like a numeric IPv4 address but is not a valid one")]
    BadNumericHost(String),
    /// The HTTP request line is not `CONNECT <authority> HTTP/1.x`.
    #[error("malformed CONNECT request line: {0}")]
    BadRequestLine(&'static str),
}

/// A validated, normalised DNS name: lowercase ASCII LDH labels (punycode for Unicode),
/// no trailing dot, 1..=63 bytes per label, at most 253 bytes, and never numeric-looking.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DnsName(String);

impl DnsName {
    /// Parse and normalise a bare host name. IP literals (in any form) are an error here:
    /// use [`parse_host`] when either is acceptable.
    pub fn parse(s: &str) -> Result<Self, TargetError> {
        match parse_host(s)? {
            Host::Name(n) => Ok(n),
            Host::Ip(ip) => Err(TargetError::BadNumericHost(ip.to_string())),
        }
    }

    /// The normalised name.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// True if `self` is a strict subdomain of `suffix` (`a.example.com` of `example.com`;
    /// `example.com` itself and `evilexample.com` are not).
    pub fn is_strict_subdomain_of(&self, suffix: &DnsName) -> bool {
        let (name, suffix) = (self.0.as_str(), suffix.0.as_str());
        name.len() > suffix.len() + 1
            && name.ends_with(suffix)
            && name.as_bytes()[name.len() - suffix.len() - 1] == b'.'
    }

    /// Number of labels.
    pub fn label_count(&self) -> usize {
        self.0.split('.').count()
    }
}

impl fmt::Display for DnsName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl AsRef<str> for DnsName {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

/// A host without a port: a DNS name or an IP literal.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Host {
    /// A DNS name still to be allowlisted and resolved.
    Name(DnsName),
    /// An IP literal (never resolved).
    Ip(IpAddr),
}

/// A fully parsed destination.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Target {
    /// A DNS name and port.
    Name {
        /// The normalised name.
        name: DnsName,
        /// The port (never 0).
        port: u16,
    },
    /// An IP literal and port. The policy refuses these unless a CIDR explicitly allows them.
    Ip {
        /// The address, exactly as written (an IPv4-mapped IPv6 address stays IPv6).
        addr: IpAddr,
        /// The port (never 0).
        port: u16,
    },
}

impl Target {
    /// Parse an HTTP `CONNECT` authority (`host:port`, `[v6]:port`); the port is required.
    pub fn parse_connect_authority(s: &str) -> Result<Self, TargetError> {
        Self::parse_host_port(s, None)
    }

    /// Parse a `host[:port]` argument. Without a port, `default_port` is used; if that is
    /// `None` the port is required.
    pub fn parse_host_port(s: &str, default_port: Option<u16>) -> Result<Self, TargetError> {
        let (host, port) = split_host_port(s)?;
        let port = match port {
            Some(p) => parse_port(p)?,
            None => match default_port {
                Some(0) => return Err(TargetError::PortZero),
                Some(p) => p,
                None => return Err(TargetError::MissingPort),
            },
        };
        Ok(Self::from_host(parse_host_inner(host)?, port))
    }

    /// A SOCKS5 `ATYP=DOMAINNAME` request: the raw domain bytes and the port.
    /// An IP address written in the domain field is still an IP literal.
    pub fn from_socks5_domain(domain: &[u8], port: u16) -> Result<Self, TargetError> {
        let s = std::str::from_utf8(domain).map_err(|_| TargetError::InvalidUtf8)?;
        if port == 0 {
            return Err(TargetError::PortZero);
        }
        Ok(Self::from_host(parse_host(s)?, port))
    }

    /// A SOCKS5 `ATYP=IPV4/IPV6` request (or any socket address).
    pub fn from_socket_addr(sa: SocketAddr) -> Result<Self, TargetError> {
        if sa.port() == 0 {
            return Err(TargetError::PortZero);
        }
        Ok(Target::Ip {
            addr: sa.ip(),
            port: sa.port(),
        })
    }

    fn from_host(host: Host, port: u16) -> Self {
        match host {
            Host::Name(name) => Target::Name { name, port },
            Host::Ip(addr) => Target::Ip { addr, port },
        }
    }

    /// The destination port.
    pub fn port(&self) -> u16 {
        match self {
            Target::Name { port, .. } | Target::Ip { port, .. } => *port,
        }
    }

    /// The host part.
    pub fn host(&self) -> Host {
        match self {
            Target::Name { name, .. } => Host::Name(name.clone()),
            Target::Ip { addr, .. } => Host::Ip(*addr),
        }
    }

    /// True for an IP literal.
    pub fn is_ip_literal(&self) -> bool {
        matches!(self, Target::Ip { .. })
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Name { name, port } => write!(f, "{name}:{port}"),
            Target::Ip { addr, port } => write!(f, "{}", SocketAddr::new(*addr, *port)),
        }
    }
}

/// Parse an HTTP/1.x CONNECT request line: exactly `CONNECT <authority> HTTP/1.0|1.1`, single
/// spaces, optionally followed by one CRLF (or LF). The method is case-sensitive.
pub fn parse_connect_request_line(line: &str) -> Result<Target, TargetError> {
    let line = line
        .strip_suffix("\r\n")
        .or_else(|| line.strip_suffix('\n'))
        .unwrap_or(line);
    let mut parts = line.split(' ');
    let (Some(method), Some(authority), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(TargetError::BadRequestLine(
            "expected exactly 'CONNECT <host:port> HTTP/1.1'",
        ));
    };
    if method != "CONNECT" {
        return Err(TargetError::BadRequestLine("method is not CONNECT"));
    }
    if version != "HTTP/1.1" && version != "HTTP/1.0" {
        return Err(TargetError::BadRequestLine(
            "version is not HTTP/1.0 or HTTP/1.1",
        ));
    }
    Target::parse_connect_authority(authority)
}

/// Checks every raw input gets before anything else looks at it.
fn precheck(s: &str) -> Result<(), TargetError> {
    if s.is_empty() {
        return Err(TargetError::Empty);
    }
    if s.len() > MAX_INPUT_LEN {
        return Err(TargetError::InputTooLong { len: s.len() });
    }
    if let Some(ch) = s.chars().find(|c| c.is_whitespace() || c.is_control()) {
        return Err(TargetError::WhitespaceOrControl { ch });
    }
    if let Some(ch) = s.chars().find(|&c| is_default_ignorable(c)) {
        return Err(TargetError::InvisibleChar { ch });
    }
    if s.contains('%') {
        return Err(TargetError::PercentEncoding);
    }
    if s.contains('@') {
        return Err(TargetError::Userinfo);
    }
    Ok(())
}

/// Unicode `Default_Ignorable_Code_Point` (DerivedCoreProperties.txt): invisible characters
/// such as soft hyphen, zero-width space/joiners, bidi controls and variation selectors.
fn is_default_ignorable(c: char) -> bool {
    matches!(
        c,
        '\u{00AD}'
            | '\u{034F}'
            | '\u{061C}'
            | '\u{115F}'..='\u{1160}'
            | '\u{17B4}'..='\u{17B5}'
            | '\u{180B}'..='\u{180F}'
            | '\u{200B}'..='\u{200F}'
            | '\u{202A}'..='\u{202E}'
            | '\u{2060}'..='\u{206F}'
            | '\u{3164}'
            | '\u{FE00}'..='\u{FE0F}'
            | '\u{FEFF}'
            | '\u{FFA0}'
            | '\u{FFF0}'..='\u{FFF8}'
            | '\u{1BCA0}'..='\u{1BCA3}'
            | '\u{1D173}'..='\u{1D17A}'
            | '\u{E0000}'..='\u{E0FFF}'
    )
}

/// Split `host[:port]` / `[v6][:port]` without interpreting either part.
fn split_host_port(s: &str) -> Result<(&str, Option<&str>), TargetError> {
    precheck(s)?;
    if s.starts_with('[') {
        let Some(close) = s.find(']') else {
            return Err(TargetError::BadIpv6Literal(s.to_owned()));
        };
        let (host, rest) = s.split_at(close + 1);
        return match rest {
            "" => Ok((host, None)),
            _ => match rest.strip_prefix(':') {
                Some(port) => Ok((host, Some(port))),
                None => Err(TargetError::BadIpv6Literal(s.to_owned())),
            },
        };
    }
    match s.split_once(':') {
        None => Ok((s, None)),
        Some((host, port)) if !port.contains(':') => Ok((host, Some(port))),
        Some(_) => Err(TargetError::UnexpectedColon),
    }
}

/// Parse a port: plain ASCII decimal digits, 1..=65535.
pub fn parse_port(p: &str) -> Result<u16, TargetError> {
    if p.is_empty() {
        return Err(TargetError::MissingPort);
    }
    if !p.bytes().all(|b| b.is_ascii_digit()) {
        return Err(TargetError::NonNumericPort(p.to_owned()));
    }
    let significant = p.trim_start_matches('0');
    if significant.is_empty() {
        return Err(TargetError::PortZero);
    }
    if significant.len() > 5 {
        return Err(TargetError::PortOutOfRange(p.to_owned()));
    }
    significant
        .parse::<u16>()
        .map_err(|_| TargetError::PortOutOfRange(p.to_owned()))
}

/// Parse and normalise a host (no port): DNS name or IP literal in any accepted form.
/// Unlike the authority parsers this also accepts an unbracketed IPv6 address, as found in a
/// SOCKS5 domain field; it is reported as an IP literal, never as a name.
pub fn parse_host(s: &str) -> Result<Host, TargetError> {
    precheck(s)?;
    if !s.starts_with('[') && s.contains(':') {
        return s
            .parse::<Ipv6Addr>()
            .map(|v6| Host::Ip(IpAddr::V6(v6)))
            .map_err(|_| TargetError::UnexpectedColon);
    }
    parse_host_inner(s)
}

/// Host parsing after [`precheck`]; a `:` here is an error unless bracketed.
fn parse_host_inner(s: &str) -> Result<Host, TargetError> {
    if s.is_empty() {
        return Err(TargetError::Empty);
    }
    if let Some(inner) = s.strip_prefix('[') {
        return inner
            .strip_suffix(']')
            .and_then(|v6| v6.parse::<Ipv6Addr>().ok())
            .map(|v6| Host::Ip(IpAddr::V6(v6)))
            .ok_or_else(|| TargetError::BadIpv6Literal(s.to_owned()));
    }
    if s.contains(':') {
        return Err(TargetError::UnexpectedColon);
    }
    let ascii = Uts46::new()
        .to_ascii(
            s.as_bytes(),
            AsciiDenyList::EMPTY,
            Hyphens::Allow,
            DnsLength::Ignore,
        )
        .map_err(|_| TargetError::Idna(s.to_owned()))?;
    let mut name = ascii.to_ascii_lowercase();
    if name.ends_with('.') {
        name.pop();
    }
    if name.is_empty() {
        return Err(TargetError::Empty);
    }
    // IDNA may have mapped full-width characters to ASCII; look for literals again.
    if name.contains(':') {
        return name
            .parse::<Ipv6Addr>()
            .map(|v6| Host::Ip(IpAddr::V6(v6)))
            .map_err(|_| TargetError::UnexpectedColon);
    }
    if ends_in_number(&name) {
        return parse_inet_aton(&name)
            .map(|v4| Host::Ip(IpAddr::V4(v4)))
            .ok_or(TargetError::BadNumericHost(name));
    }
    validate_ldh(&name)?;
    Ok(Host::Name(DnsName(name)))
}

/// WHATWG URL "ends in a number": the last label is all decimal digits, or `0x` followed by
/// hex digits (possibly none). Such a name is an IPv4 address or invalid, never a DNS name.
fn ends_in_number(name: &str) -> bool {
    let last = name.rsplit('.').next().unwrap_or(name);
    if last.is_empty() {
        return false;
    }
    if last.bytes().all(|b| b.is_ascii_digit()) {
        return true;
    }
    match last.strip_prefix("0x").or_else(|| last.strip_prefix("0X")) {
        Some(hex) => hex.bytes().all(|b| b.is_ascii_hexdigit()),
        None => false,
    }
}

/// `inet_aton(3)` semantics (glibc/BSD): 1 to 4 parts separated by `.`, each decimal, octal
/// (leading `0`) or hex (`0x`, digits optional); all parts but the last are one byte, the last
/// fills the remaining bytes. `127.1` = `127.0.0.1`, `2130706433` = `0x7f000001`.
pub fn parse_inet_aton(s: &str) -> Option<Ipv4Addr> {
    let mut parts = [0u32; 4];
    let mut n = 0;
    for part in s.split('.') {
        if n == 4 {
            return None;
        }
        parts[n] = parse_aton_part(part)?;
        n += 1;
    }
    if n == 0 {
        return None;
    }
    let (init, last) = (&parts[..n - 1], parts[n - 1]);
    if init.iter().any(|&p| p > 0xff) {
        return None;
    }
    let last_max = u32::MAX >> (8 * init.len());
    if last > last_max {
        return None;
    }
    let mut value = last;
    for (i, &p) in init.iter().enumerate() {
        value |= p << (24 - 8 * i);
    }
    Some(Ipv4Addr::from(value))
}

fn parse_aton_part(part: &str) -> Option<u32> {
    let (digits, radix) =
        if let Some(hex) = part.strip_prefix("0x").or_else(|| part.strip_prefix("0X")) {
            (hex, 16)
        } else if part.len() > 1 && part.starts_with('0') {
            (&part[1..], 8)
        } else {
            (part, 10)
        };
    if digits.is_empty() {
        // "0x" alone is 0 for inet_aton; an empty part is invalid.
        return (radix == 16).then_some(0);
    }
    let mut value: u32 = 0;
    for c in digits.chars() {
        let d = c.to_digit(radix)?;
        value = value.checked_mul(radix)?.checked_add(d)?;
    }
    Some(value)
}

/// LDH rules on a normalised (lowercase ASCII, no trailing dot) name.
fn validate_ldh(name: &str) -> Result<(), TargetError> {
    if name.len() > MAX_NAME_LEN {
        return Err(TargetError::NameTooLong { len: name.len() });
    }
    for label in name.split('.') {
        if label.is_empty() {
            return Err(TargetError::EmptyLabel);
        }
        if let Some(ch) = label
            .chars()
            .find(|c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-'))
        {
            return Err(match ch {
                '%' => TargetError::PercentEncoding,
                '@' => TargetError::Userinfo,
                c if c.is_whitespace() || c.is_control() => {
                    TargetError::WhitespaceOrControl { ch: c }
                }
                c => TargetError::NonLdh { ch: c },
            });
        }
        if label.len() > MAX_LABEL_LEN {
            return Err(TargetError::LabelTooLong {
                label: label.to_owned(),
                len: label.len(),
            });
        }
        if label.starts_with('-') || label.ends_with('-') {
            return Err(TargetError::HyphenAtEdge {
                label: label.to_owned(),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // Tests: a panic is the failure report.
mod tests {
    use super::*;

    fn name(s: &str) -> String {
        match parse_host(s).unwrap() {
            Host::Name(n) => n.as_str().to_owned(),
            Host::Ip(ip) => panic!("{s:?} parsed as IP {ip}"),
        }
    }

    fn ip(s: &str) -> IpAddr {
        match parse_host(s).unwrap() {
            Host::Ip(ip) => ip,
            Host::Name(n) => panic!("{s:?} parsed as name {n}"),
        }
    }

    fn v4(s: &str) -> IpAddr {
        IpAddr::V4(s.parse().unwrap())
    }

    #[test]
    fn connect_authority_basic() {
        let t = Target::parse_connect_authority("Example.COM:443").unwrap();
        assert_eq!(
            t,
            Target::Name {
                name: DnsName("example.com".into()),
                port: 443
            }
        );
        assert_eq!(t.to_string(), "example.com:443");
        assert_eq!(t.port(), 443);
        assert!(!t.is_ip_literal());
    }

    #[test]
    fn connect_request_line() {
        let t = parse_connect_request_line("CONNECT allowed.com:443 HTTP/1.1\r\n").unwrap();
        assert_eq!(t.to_string(), "allowed.com:443");
        let t = parse_connect_request_line("CONNECT [::1]:8443 HTTP/1.0").unwrap();
        assert_eq!(t.to_string(), "[::1]:8443");
        for bad in [
            "GET allowed.com:443 HTTP/1.1",
            "connect allowed.com:443 HTTP/1.1",
            "CONNECT  allowed.com:443 HTTP/1.1",
            "CONNECT allowed.com:443",
            "CONNECT allowed.com:443 HTTP/2",
            "CONNECT allowed.com:443 HTTP/1.1 x",
        ] {
            assert!(
                matches!(
                    parse_connect_request_line(bad),
                    Err(TargetError::BadRequestLine(_))
                ),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn userinfo_refused() {
        assert_eq!(
            parse_connect_request_line("CONNECT a@allowed.com:443 HTTP/1.1"),
            Err(TargetError::Userinfo)
        );
        assert_eq!(
            Target::parse_connect_authority("a@allowed.com:443"),
            Err(TargetError::Userinfo)
        );
        assert_eq!(
            Target::parse_connect_authority("user:pw@allowed.com:443"),
            Err(TargetError::Userinfo)
        );
        assert_eq!(
            Target::from_socks5_domain(b"a@allowed.com", 443),
            Err(TargetError::Userinfo)
        );
        // A full-width '@' maps to '@' under UTS-46 and is refused after mapping.
        assert_eq!(
            parse_host("a\u{FF20}allowed.com"),
            Err(TargetError::Userinfo)
        );
    }

    #[test]
    fn ports() {
        use TargetError::*;
        assert_eq!(Target::parse_connect_authority("a.com"), Err(MissingPort));
        assert_eq!(Target::parse_connect_authority("a.com:"), Err(MissingPort));
        assert_eq!(Target::parse_connect_authority("a.com:0"), Err(PortZero));
        assert_eq!(Target::parse_connect_authority("a.com:000"), Err(PortZero));
        assert_eq!(
            Target::parse_connect_authority("a.com:65536"),
            Err(PortOutOfRange("65536".into()))
        );
        assert_eq!(
            Target::parse_connect_authority("a.com:99999999999999999999999"),
            Err(PortOutOfRange("99999999999999999999999".into()))
        );
        assert_eq!(
            Target::parse_connect_authority("a.com:https"),
            Err(NonNumericPort("https".into()))
        );
        assert_eq!(
            Target::parse_connect_authority("a.com:+443"),
            Err(NonNumericPort("+443".into()))
        );
        assert_eq!(
            Target::parse_connect_authority("a.com:0x1bb"),
            Err(NonNumericPort("0x1bb".into()))
        );
        assert_eq!(
            Target::parse_connect_authority("a.com:65535").map(|t| t.port()),
            Ok(65535)
        );
        assert_eq!(
            Target::parse_connect_authority("a.com:00443").map(|t| t.port()),
            Ok(443)
        );
        assert_eq!(Target::parse_connect_authority("[::1]"), Err(MissingPort));
        assert_eq!(Target::parse_connect_authority("[::1]:"), Err(MissingPort));
        assert_eq!(Target::from_socks5_domain(b"a.com", 0), Err(PortZero));
        assert_eq!(
            Target::from_socket_addr("1.2.3.4:0".parse().unwrap()),
            Err(PortZero)
        );
        assert_eq!(Target::parse_host_port("a.com", Some(0)), Err(PortZero));
    }

    #[test]
    fn host_port_argument_defaults() {
        assert_eq!(
            Target::parse_host_port("a.com", Some(443)).unwrap().port(),
            443
        );
        assert_eq!(
            Target::parse_host_port("a.com:22", Some(443))
                .unwrap()
                .port(),
            22
        );
        assert_eq!(
            Target::parse_host_port("[2001:db8::1]", Some(443)).unwrap(),
            Target::Ip {
                addr: "2001:db8::1".parse().unwrap(),
                port: 443
            }
        );
        assert_eq!(
            Target::parse_host_port("a.com", None),
            Err(TargetError::MissingPort)
        );
    }

    #[test]
    fn normalisation() {
        assert_eq!(name("EXAMPLE.com"), "example.com");
        assert_eq!(name("example.com."), "example.com");
        assert_eq!(name("ExAmPlE.CoM."), "example.com");
        assert_eq!(name("localhost"), "localhost");
        // Exactly one trailing dot is stripped.
        assert_eq!(parse_host("example.com.."), Err(TargetError::EmptyLabel));
        assert_eq!(parse_host("."), Err(TargetError::Empty));
        assert_eq!(parse_host(""), Err(TargetError::Empty));
        assert_eq!(parse_host(".example.com"), Err(TargetError::EmptyLabel));
        assert_eq!(parse_host("a..b"), Err(TargetError::EmptyLabel));
    }

    #[test]
    fn idna() {
        assert_eq!(name("bücher.example"), "xn--bcher-kva.example");
        assert_eq!(name("BÜCHER.example."), "xn--bcher-kva.example");
        assert_eq!(name("xn--bcher-kva.example"), "xn--bcher-kva.example");
        assert_eq!(name("XN--BCHER-KVA.EXAMPLE"), "xn--bcher-kva.example");
        // Full-width letters and the ideographic full stop are mapped by UTS-46.
        assert_eq!(name("ｅｘａｍｐｌｅ。com"), "example.com");
        // Non-transitional processing: sharp s is kept (punycode), not mapped to "ss".
        assert_eq!(name("straße.de"), "xn--strae-oqa.de");
        // Invalid punycode is refused by IDNA.
        assert!(matches!(
            parse_host("xn--a.example"),
            Err(TargetError::Idna(_))
        ));
    }

    #[test]
    fn lengths() {
        let l63 = "a".repeat(63);
        let l64 = "a".repeat(64);
        assert_eq!(name(&format!("{l63}.com")), format!("{l63}.com"));
        assert_eq!(
            parse_host(&format!("{l64}.com")),
            Err(TargetError::LabelTooLong {
                label: l64.clone(),
                len: 64
            })
        );
        // 4 * 63 + 3 dots = 255 > 253; 3 * 63 + 61 + 3 = 253 is fine.
        let too_long = [l63.as_str(); 4].join(".");
        assert_eq!(
            parse_host(&too_long),
            Err(TargetError::NameTooLong { len: 255 })
        );
        let max = format!("{l63}.{l63}.{l63}.{}", "a".repeat(61));
        assert_eq!(max.len(), 253);
        assert_eq!(name(&max), max);
        assert_eq!(name(&format!("{max}.")), max);
        assert!(matches!(
            parse_host(&format!("a{max}")),
            Err(TargetError::NameTooLong { len: 254 })
        ));
        // A Unicode label that becomes > 63 bytes of punycode.
        let long_unicode = "ü".repeat(60);
        assert!(matches!(
            parse_host(&format!("{long_unicode}.com")),
            Err(TargetError::LabelTooLong { .. })
        ));
        assert!(matches!(
            parse_host(&"a".repeat(MAX_INPUT_LEN + 1)),
            Err(TargetError::InputTooLong { .. })
        ));
    }

    #[test]
    fn ldh_and_hyphens() {
        assert_eq!(name("a-b.example"), "a-b.example");
        assert_eq!(
            name("r3---sn-abc.googlevideo.com"),
            "r3---sn-abc.googlevideo.com"
        );
        assert_eq!(
            parse_host("-a.example"),
            Err(TargetError::HyphenAtEdge { label: "-a".into() })
        );
        assert_eq!(
            parse_host("a-.example"),
            Err(TargetError::HyphenAtEdge { label: "a-".into() })
        );
        for (input, ch) in [
            ("a_b.example", '_'),
            ("a/b.example", '/'),
            ("a*.example", '*'),
            ("a!.example", '!'),
            ("a\\b.example", '\\'),
            ("a]b", ']'),
            ("a,b", ','),
            ("a?b", '?'),
            ("a#b", '#'),
        ] {
            assert_eq!(
                parse_host(input),
                Err(TargetError::NonLdh { ch }),
                "{input:?}"
            );
        }
        // A full-width slash maps to '/' and is refused after mapping.
        assert_eq!(
            parse_host("a\u{FF0F}b.example"),
            Err(TargetError::NonLdh { ch: '/' })
        );
    }

    #[test]
    fn whitespace_control_percent() {
        for (input, ch) in [
            ("a .com", ' '),
            (" a.com", ' '),
            ("a.com\t", '\t'),
            ("a\u{0}.com", '\u{0}'),
            ("a.com\r\n", '\r'),
            ("a\u{7f}.com", '\u{7f}'),
            ("a\u{85}.com", '\u{85}'),
            ("a\u{a0}.com", '\u{a0}'),
            ("a\u{3000}.com", '\u{3000}'),
        ] {
            assert_eq!(
                parse_host(input),
                Err(TargetError::WhitespaceOrControl { ch }),
                "{input:?}"
            );
        }
        assert_eq!(
            Target::parse_connect_authority("a.com :443"),
            Err(TargetError::WhitespaceOrControl { ch: ' ' })
        );
        for ch in [
            '\u{ad}', '\u{200b}', '\u{200d}', '\u{202e}', '\u{2060}', '\u{feff}', '\u{fe0f}',
        ] {
            assert_eq!(
                parse_host(&format!("a{ch}b.com")),
                Err(TargetError::InvisibleChar { ch }),
                "{ch:?}"
            );
        }
        assert_eq!(parse_host("a%2ecom"), Err(TargetError::PercentEncoding));
        assert_eq!(
            Target::parse_connect_authority("a.com:%34%34%33"),
            Err(TargetError::PercentEncoding)
        );
        assert_eq!(
            parse_host("[fe80::1%eth0]"),
            Err(TargetError::PercentEncoding)
        );
        // Full-width percent sign maps to '%'.
        assert_eq!(
            parse_host("a\u{FF05}2e.com"),
            Err(TargetError::PercentEncoding)
        );
        assert_eq!(
            Target::from_socks5_domain(b"a\xff.com", 443),
            Err(TargetError::InvalidUtf8)
        );
    }

    #[test]
    fn legacy_ipv4_forms_are_literals() {
        let lo = v4("127.0.0.1");
        for s in [
            "127.0.0.1",
            "127.0.0.1.",
            "0x7f.1",
            "0X7F.1",
            "0x7f.0.0.1",
            "2130706433",
            "017700000001",
            "0x7f000001",
            "127.1",
            "127.0.1",
            "0177.0.0.1",
            "0177.1",
            "00000000000000177.1",
            "１２７.０.０.１",
            "127。0。0。1",
            "\u{1D7CF}\u{1D7D0}\u{1D7D5}.0.0.\u{1D7CF}",
        ] {
            assert_eq!(ip(s), lo, "{s:?}");
        }
        assert_eq!(ip("0"), v4("0.0.0.0"));
        assert_eq!(ip("0x"), v4("0.0.0.0"));
        assert_eq!(ip("0x.0x.0x.0x"), v4("0.0.0.0"));
        assert_eq!(ip("4294967295"), v4("255.255.255.255"));
        assert_eq!(ip("169.254.43518"), v4("169.254.169.254"));
        assert_eq!(ip("0xa9fea9fe"), v4("169.254.169.254"));
        assert_eq!(ip("10.0x10.0377.9"), v4("10.16.255.9"));
        assert_eq!(ip("1.2.3.4"), v4("1.2.3.4"));
        // A SOCKS5 domain field holding an address is still an IP literal.
        assert_eq!(
            Target::from_socks5_domain(b"0x7f.1", 443),
            Ok(Target::Ip {
                addr: lo,
                port: 443
            })
        );
        assert_eq!(
            Target::parse_connect_authority("2130706433:443"),
            Ok(Target::Ip {
                addr: lo,
                port: 443
            })
        );
        assert!(matches!(
            DnsName::parse("127.1"),
            Err(TargetError::BadNumericHost(_))
        ));
    }

    #[test]
    fn numeric_looking_non_addresses_are_refused() {
        for s in [
            "4294967296",
            "256.1.1.1",
            "1.256.1.1",
            "1.2.3.256",
            "1.2.65536",
            "1.16777216",
            "1.2.3.4.5",
            "08.1.1.1",
            "1.2.3.09",
            "0x100000000",
            "example.123",
            "example.0x1f",
            "example.0x",
            "99999999999999999999",
        ] {
            assert!(
                matches!(parse_host(s), Err(TargetError::BadNumericHost(_))),
                "{s:?} -> {:?}",
                parse_host(s)
            );
        }
        // Numeric labels elsewhere are fine; hex-looking non-numbers are names.
        assert_eq!(name("123.example"), "123.example");
        assert_eq!(name("0x7f.example"), "0x7f.example");
        assert_eq!(name("example.0xg"), "example.0xg");
        assert_eq!(name("1e100.net"), "1e100.net");
    }

    #[test]
    fn ipv6_literals() {
        assert_eq!(ip("[::1]"), "::1".parse::<IpAddr>().unwrap());
        assert_eq!(
            ip("[::ffff:127.0.0.1]"),
            "::ffff:127.0.0.1".parse::<IpAddr>().unwrap()
        );
        assert_eq!(
            Target::parse_connect_authority("[::1]:443"),
            Ok(Target::Ip {
                addr: "::1".parse().unwrap(),
                port: 443
            })
        );
        // Unbracketed in an authority is refused; in a SOCKS5 domain it is an IP literal.
        assert_eq!(
            Target::parse_connect_authority("::1:443"),
            Err(TargetError::UnexpectedColon)
        );
        assert_eq!(
            Target::from_socks5_domain(b"::1", 443),
            Ok(Target::Ip {
                addr: "::1".parse().unwrap(),
                port: 443
            })
        );
        assert_eq!(
            Target::from_socks5_domain(b"a:b", 443),
            Err(TargetError::UnexpectedColon)
        );
        for bad in [
            "[::1",
            "[::1]x",
            "[::1]]:443",
            "[127.0.0.1]",
            "[v1.x]",
            "[]",
            "[a.com]",
        ] {
            assert!(
                matches!(
                    Target::parse_host_port(bad, Some(443)),
                    Err(TargetError::BadIpv6Literal(_))
                ),
                "{bad:?}"
            );
        }
    }
}
