//! The one decision path for a connection (steps 3–6 of the crate doc): policy → per-
//! destination rate limit → one resolution (names only) → whole answer-set check → exactly
//! one `SocketAddr`. [`plan_connection`] is that path; the server calls it for every proxied
//! connection and the unit tests below call it with fake resolvers.

use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use thiserror::Error;
use tokio::time::timeout;

use crate::allow::{Decision, DenyReason, Policy};
use crate::approvals::{Gate, GateMode, GateRefusal};
use crate::classify::AnswerError;
use crate::ratelimit::RateLimiter;
use crate::target::{DnsName, Target};

/// Time allowed for a system (getaddrinfo) resolution.
pub const SYSTEM_RESOLVE_TIMEOUT: Duration = Duration::from_secs(10);

/// Resolves a validated name to addresses. [`plan_connection`] calls it at most once per
/// connection, only for a name the policy allowed, never for an IP literal.
pub trait Resolver {
    /// All addresses for `name` (the port is passed for resolvers that want it).
    fn resolve(
        &self,
        name: &DnsName,
        port: u16,
    ) -> impl Future<Output = io::Result<Vec<IpAddr>>> + Send;
}

/// The host's resolver: `getaddrinfo(3)` on tokio's blocking pool
/// ([`tokio::net::lookup_host`]), bounded by [`SYSTEM_RESOLVE_TIMEOUT`]. Only ever handed a
/// [`DnsName`], which can never be numeric, so getaddrinfo's own numeric parsing is moot.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemResolver;

impl Resolver for SystemResolver {
    async fn resolve(&self, name: &DnsName, port: u16) -> io::Result<Vec<IpAddr>> {
        let lookup = tokio::net::lookup_host((name.as_str(), port));
        match timeout(SYSTEM_RESOLVE_TIMEOUT, lookup).await {
            Ok(addrs) => Ok(addrs?.map(|sa| sa.ip()).collect()),
            Err(_) => Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "system resolver timed out",
            )),
        }
    }
}

/// Why no address can be dialled. The `Display` of a variant with a source does not repeat
/// that source: print the chain (`{:#}` with anyhow) to see all of it.
#[derive(Debug, Error)]
pub enum PlanError {
    /// The policy refused the target.
    #[error("connection refused by policy")]
    Denied(#[from] DenyReason),
    /// Allowed, but this destination's per-minute connection budget is spent.
    #[error("too many connections to this destination per minute")]
    RateLimited,
    /// The resolver failed.
    #[error("resolving {name} failed")]
    Resolve {
        /// The name.
        name: DnsName,
        /// The resolver's error.
        #[source]
        source: io::Error,
    },
    /// Not listed, and the approvals gate refused it (or a persistent denial names it).
    #[error("refused by approvals")]
    Gate(#[from] GateRefusal),
    /// The answer set was empty or contained a non-public address.
    #[error("{name}")]
    Answer {
        /// The name (or IP literal) being connected to.
        name: String,
        /// What was wrong with the answer set.
        #[source]
        source: AnswerError,
    },
}

/// The one address to dial, and why it was allowed when that was a grant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Planned {
    /// Connect to exactly this.
    pub addr: SocketAddr,
    /// `None`: the allowlist; else the grant that let it through, and who made it.
    pub basis: Option<String>,
}

/// The whole decision for one connection: [`Policy::decide`] (which applies `network.deny`
/// first) → a persistent denial from `gate` → the allowlist → for a name it does not list,
/// in `allowlist` mode, `gate` (this session's answers, a persistent grant, ask or park) →
/// one token of `rate` for the destination (`host:port`) → (names only) one call of
/// `resolver` → whole answer-set check ([`Policy::check_answer`]) → exactly one `SocketAddr`
/// to dial, the first address of the accepted set. A denied or rate-limited target is never
/// resolved, an IP literal never is, and a granted name's answer set is checked like any
/// other. The caller must connect to the returned address and must not resolve the name
/// again for this connection.
pub async fn plan_connection<R: Resolver>(
    policy: &Policy,
    gate: Option<&Gate>,
    rate: &RateLimiter,
    target: &Target,
    resolver: &R,
) -> Result<Planned, PlanError> {
    let decision = policy.decide(target);
    if let Decision::Deny(reason @ DenyReason::PolicyDeny { .. }) = decision {
        return Err(PlanError::Denied(reason));
    }
    if let Some(g) = gate {
        g.check_denial(target)?;
    }
    let mut basis = None;
    if let Decision::Deny(reason) = decision {
        // Only a name the allowlist does not list, and never in strict mode (`GateMode::Off`):
        // a grant reopens nothing the mode itself refuses.
        let unlisted = matches!(
            reason,
            DenyReason::NotAllowlisted { .. } | DenyReason::PortNotAllowed { .. }
        );
        match (gate, target) {
            (Some(g), Target::Name { name, port })
                if unlisted && !policy.strict && g.spec().mode != GateMode::Off =>
            {
                basis = Some(g.decide_unlisted(name, *port).await?);
            }
            _ => return Err(PlanError::Denied(reason)),
        }
    }
    if !rate.try_acquire(&target.to_string()) {
        return Err(PlanError::RateLimited);
    }
    let (addrs, label) = match target {
        Target::Ip { addr, .. } => (vec![*addr], addr.to_string()),
        Target::Name { name, port } => {
            let addrs =
                resolver
                    .resolve(name, *port)
                    .await
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
    Ok(Planned {
        addr: SocketAddr::new(ip, target.port()),
        basis,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // Tests: a panic is the failure report.
mod tests {
    use super::*;
    use crate::classify::AddrClass;
    use crate::error_chain;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A fake resolver that answers from a fixed list and counts calls. No network: the
    /// addresses it returns are only ever classified, never dialled.
    struct Fake {
        answer: Vec<IpAddr>,
        calls: AtomicUsize,
    }

    impl Fake {
        fn new(answer: &[&str]) -> Self {
            Fake {
                answer: answer.iter().map(|s| s.parse().unwrap()).collect(),
                calls: AtomicUsize::new(0),
            }
        }

        fn calls(&self) -> usize {
            self.calls.load(Ordering::SeqCst)
        }
    }

    impl Resolver for Fake {
        async fn resolve(&self, _name: &DnsName, _port: u16) -> io::Result<Vec<IpAddr>> {
            self.calls.fetch_add(1, Ordering::SeqCst);
            Ok(self.answer.clone())
        }
    }

    /// A resolver that fails (and counts its calls).
    #[derive(Default)]
    struct Failing {
        calls: AtomicUsize,
    }

    impl Resolver for Failing {
        async fn resolve(&self, _name: &DnsName, _port: u16) -> io::Result<Vec<IpAddr>> {
            self.calls.fetch_add(1, Ordering::SeqCst);
            Err(io::Error::new(io::ErrorKind::NotFound, "NXDOMAIN"))
        }
    }

    fn t(s: &str) -> Target {
        Target::parse_connect_authority(s).unwrap()
    }

    fn policy(allow: &[&str], cidrs: &[&str], strict: bool) -> Policy {
        Policy::parse(allow, cidrs, strict).unwrap()
    }

    /// A limit no test reaches.
    fn no_limit() -> RateLimiter {
        RateLimiter::new(1_000)
    }

    /// `plan_connection` with a generous rate limit, on a current-thread runtime.
    fn plan<R: Resolver>(p: &Policy, target: &str, r: &R) -> Result<SocketAddr, PlanError> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(plan_connection(p, None, &no_limit(), &t(target), r))
            .map(|planned| planned.addr)
    }

    #[test]
    fn allowed_name_resolves_once_and_dials_first_address() {
        let p = policy(&["*.example.com"], &[], false);
        let r = Fake::new(&["93.184.216.34", "2606:4700::1111"]);
        assert_eq!(
            plan(&p, "www.example.com:443", &r).unwrap(),
            "93.184.216.34:443".parse().unwrap()
        );
        assert_eq!(r.calls(), 1);
    }

    #[test]
    fn denied_name_is_never_resolved() {
        let p = policy(&["*.example.com"], &[], false);
        let r = Fake::new(&["93.184.216.34"]);
        let err = plan(&p, "example.com.evil:443", &r).unwrap_err();
        assert!(matches!(
            err,
            PlanError::Denied(DenyReason::NotAllowlisted { .. })
        ));
        assert_eq!(
            error_chain(&err),
            "connection refused by policy: example.com.evil is not in the allowlist"
        );
        // Strict mode: port 80 is refused before any resolution too.
        let strict = policy(&["a.example:80"], &[], true);
        assert!(matches!(
            plan(&strict, "a.example:80", &r),
            Err(PlanError::Denied(DenyReason::StrictPort80))
        ));
        assert_eq!(r.calls(), 0);
    }

    #[test]
    fn rebinding_answer_is_refused_whole() {
        let p = policy(&["rebind.example"], &[], false);
        let r = Fake::new(&["93.184.216.34", "169.254.169.254"]);
        let err = plan(&p, "rebind.example:443", &r).unwrap_err();
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
            error_chain(&err),
            "rebind.example: answer set refused: 169.254.169.254 is cloud metadata endpoint"
        );
        // The source is printed once: by the chain, not by the variant's own text.
        assert_eq!(err.to_string(), "rebind.example");
        assert_eq!(r.calls(), 1);
        let empty = Fake::new(&[]);
        assert!(matches!(
            plan(&p, "rebind.example:443", &empty),
            Err(PlanError::Answer {
                source: AnswerError::Empty,
                ..
            })
        ));
        let failing = Failing::default();
        let err = plan(&p, "rebind.example:443", &failing).unwrap_err();
        assert!(matches!(err, PlanError::Resolve { .. }));
        assert_eq!(
            error_chain(&err),
            "resolving rebind.example failed: NXDOMAIN"
        );
        assert_eq!(failing.calls.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn any_non_public_address_refuses_the_whole_set() {
        let p = policy(&["a.example"], &[], false);
        for (answer, class) in [
            (&["93.184.216.34", "127.0.0.1"][..], "loopback"),
            (&["10.1.2.3", "93.184.216.34"][..], "private"),
            (&["2606:4700::1111", "::1"][..], "loopback"),
            (&["93.184.216.34", "::ffff:192.168.1.1"][..], "private"),
            (&["fd00::1"][..], "unique local"),
        ] {
            let r = Fake::new(answer);
            let err = plan(&p, "a.example:443", &r).unwrap_err();
            let PlanError::Answer {
                source: AnswerError::Rejected { class: c, .. },
                ..
            } = err
            else {
                panic!("{answer:?}: {err:?}");
            };
            assert_eq!(c.root().name(), class, "{answer:?}");
            assert_eq!(r.calls(), 1, "{answer:?}");
        }
        // Inside allow_cidrs, a non-public answer is accepted (and dialled first-address).
        let p = policy(&["db.example:5432"], &["10.0.0.0/8:5432"], false);
        let r = Fake::new(&["10.1.2.3", "10.1.2.4"]);
        assert_eq!(
            plan(&p, "db.example:5432", &r).unwrap(),
            "10.1.2.3:5432".parse().unwrap()
        );
    }

    #[test]
    fn ip_literal_is_never_resolved() {
        let p = policy(&[], &["10.0.0.0/8"], false);
        let r = Fake::new(&["93.184.216.34"]);
        assert_eq!(
            plan(&p, "10.1.2.3:443", &r).unwrap(),
            "10.1.2.3:443".parse().unwrap()
        );
        assert!(matches!(
            plan(&p, "0x7f.1:443", &r),
            Err(PlanError::Denied(DenyReason::IpLiteralNotAllowed { .. }))
        ));
        assert_eq!(r.calls(), 0);
    }

    #[test]
    fn rate_limited_destination_is_never_resolved() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let p = policy(&["a.example", "b.example"], &[], false);
        let rate = RateLimiter::new(2);
        let r = Fake::new(&["93.184.216.34"]);
        let go = |target: &str| rt.block_on(plan_connection(&p, None, &rate, &t(target), &r));
        assert!(go("a.example:443").is_ok());
        assert!(go("a.example:443").is_ok());
        assert!(matches!(go("a.example:443"), Err(PlanError::RateLimited)));
        assert_eq!(r.calls(), 2);
        // A denied target takes no token and is not resolved; another destination has
        // its own budget.
        assert!(matches!(go("c.example:443"), Err(PlanError::Denied(_))));
        assert!(go("b.example:443").is_ok());
        assert_eq!(r.calls(), 3);
    }
}
