//! Tying it together: decide, resolve once, check the whole answer set, pick one address.

use std::io;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};

use thiserror::Error;

use crate::allow::{Decision, DenyReason, Policy};
use crate::classify::AnswerError;
use crate::target::{DnsName, Target};

/// Resolves a validated name to addresses. Called at most once per connection.
pub trait Resolver {
    /// All addresses for `name` (the port is passed for resolvers that want it).
    fn resolve(&self, name: &DnsName, port: u16) -> io::Result<Vec<IpAddr>>;
}

/// The host's resolver via `getaddrinfo(3)` (std's `ToSocketAddrs`). Only ever handed a
/// [`DnsName`], which can never be numeric, so getaddrinfo's own numeric parsing is moot.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemResolver;

impl Resolver for SystemResolver {
    fn resolve(&self, name: &DnsName, port: u16) -> io::Result<Vec<IpAddr>> {
        Ok((name.as_str(), port)
            .to_socket_addrs()?
            .map(|sa| sa.ip())
            .collect())
    }
}

/// Why no address can be dialled.
#[derive(Debug, Error)]
pub enum PlanError {
    /// The policy refused the target.
    #[error("connection refused by policy: {0}")]
    Denied(#[from] DenyReason),
    /// The resolver failed.
    #[error("resolving {name} failed: {source}")]
    Resolve {
        /// The name.
        name: DnsName,
        /// The resolver's error.
        #[source]
        source: io::Error,
    },
    /// The answer set was empty or contained a non-public address.
    #[error("{name}: {source}")]
    Answer {
        /// The name (or IP literal) being connected to.
        name: String,
        /// What was wrong with the answer set.
        #[source]
        source: AnswerError,
    },
}

/// The whole decision for one connection: policy → (names only) one resolution → whole
/// answer-set check → exactly one `SocketAddr` to dial. The caller must connect to the
/// returned address and must not resolve the name again for this connection.
pub fn plan_connection<R: Resolver + ?Sized>(
    policy: &Policy,
    target: &Target,
    resolver: &R,
) -> Result<SocketAddr, PlanError> {
    if let Decision::Deny(reason) = policy.decide(target) {
        return Err(PlanError::Denied(reason));
    }
    let (addrs, label) = match target {
        Target::Ip { addr, .. } => (vec![*addr], addr.to_string()),
        Target::Name { name, port } => {
            let addrs = resolver
                .resolve(name, *port)
                .map_err(|source| PlanError::Resolve {
                    name: name.clone(),
                    source,
                })?;
            (addrs, name.to_string())
        }
    };
    let ip = policy
        .check_answer(&addrs)
        .map_err(|source| PlanError::Answer {
            name: label,
            source,
        })?;
    Ok(SocketAddr::new(ip, target.port()))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // Tests: a panic is the failure report.
mod tests {
    use super::*;
    use crate::classify::AddrClass;
    use std::cell::Cell;

    /// A fake resolver that answers from a fixed list and counts calls. No network.
    struct Fake {
        answer: Vec<IpAddr>,
        calls: Cell<usize>,
    }

    impl Fake {
        fn new(answer: &[&str]) -> Self {
            Fake {
                answer: answer.iter().map(|s| s.parse().unwrap()).collect(),
                calls: Cell::new(0),
            }
        }
    }

    impl Resolver for Fake {
        fn resolve(&self, _name: &DnsName, _port: u16) -> io::Result<Vec<IpAddr>> {
            self.calls.set(self.calls.get() + 1);
            Ok(self.answer.clone())
        }
    }

    struct Failing;

    impl Resolver for Failing {
        fn resolve(&self, _name: &DnsName, _port: u16) -> io::Result<Vec<IpAddr>> {
            Err(io::Error::new(io::ErrorKind::NotFound, "NXDOMAIN"))
        }
    }

    fn t(s: &str) -> Target {
        Target::parse_connect_authority(s).unwrap()
    }

    #[test]
    fn allowed_name_resolves_once_and_dials_first_address() {
        let p = Policy::parse(&["*.example.com"], &[] as &[&str], false).unwrap();
        let r = Fake::new(&["93.184.216.34", "2606:4700::1111"]);
        assert_eq!(
            plan_connection(&p, &t("www.example.com:443"), &r).unwrap(),
            "93.184.216.34:443".parse().unwrap()
        );
        assert_eq!(r.calls.get(), 1);
    }

    #[test]
    fn denied_name_is_never_resolved() {
        let p = Policy::parse(&["*.example.com"], &[] as &[&str], false).unwrap();
        let r = Fake::new(&["93.184.216.34"]);
        assert!(matches!(
            plan_connection(&p, &t("example.com.evil:443"), &r),
            Err(PlanError::Denied(DenyReason::NotAllowlisted { .. }))
        ));
        assert_eq!(r.calls.get(), 0);
    }

    #[test]
    fn rebinding_answer_is_refused_whole() {
        let p = Policy::parse(&["rebind.example"], &[] as &[&str], false).unwrap();
        let r = Fake::new(&["93.184.216.34", "169.254.169.254"]);
        let err = plan_connection(&p, &t("rebind.example:443"), &r).unwrap_err();
        assert!(matches!(
            err,
            PlanError::Answer {
                source: AnswerError::Rejected {
                    class: AddrClass::CloudMetadata,
                    ..
                },
                ..
            }
        ));
        assert_eq!(
            err.to_string(),
            "rebind.example: answer set refused: 169.254.169.254 is cloud metadata endpoint"
        );
        let empty = Fake::new(&[]);
        assert!(matches!(
            plan_connection(&p, &t("rebind.example:443"), &empty),
            Err(PlanError::Answer {
                source: AnswerError::Empty,
                ..
            })
        ));
        assert!(matches!(
            plan_connection(&p, &t("rebind.example:443"), &Failing),
            Err(PlanError::Resolve { .. })
        ));
    }

    #[test]
    fn ip_literal_is_never_resolved() {
        let p = Policy::parse(&[] as &[&str], &["10.0.0.0/8"], false).unwrap();
        let r = Fake::new(&["93.184.216.34"]);
        assert_eq!(
            plan_connection(&p, &t("10.1.2.3:443"), &r).unwrap(),
            "10.1.2.3:443".parse().unwrap()
        );
        assert!(matches!(
            plan_connection(&p, &t("0x7f.1:443"), &r),
            Err(PlanError::Denied(DenyReason::IpLiteralNotAllowed { .. }))
        ));
        assert_eq!(r.calls.get(), 0);
    }
}
