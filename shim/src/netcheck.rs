//! The `[network]` keys of a resolved policy, checked when the policy is loaded (`vetto run`,
//! `vetto policy explain`, `vetto policy check`), whatever the network mode, with the
//! broker's own code: an entry the broker would refuse is bad input, reported once, naming
//! the key, where it came from and the entry, before anything is created.
//!
//! - `allow` and `allow_cidrs`: [`AllowEntry::parse`] and [`CidrRule::parse`], the parsers
//!   the broker's [`vetto_broker::Policy::parse`] runs.
//! - `host_ports`: as the broker reads its `host:ADDR` listener role (a `SocketAddr`) and
//!   then requires of it (a loopback address and a port).
//! - `resolver`, `max_connections`, `connects_per_minute`: each alone, then the whole spec
//!   the broker is started with ([`sidecar::broker_spec`]), through the broker's own spec
//!   validation ([`BrokerSpec::validate`]). The policy layer does not bound
//!   `max_connections` itself: the broker's limit ([`vetto_broker::MAX_MAX_CONNECTIONS`]) is
//!   the only one.

use std::net::SocketAddr;

use thiserror::Error;
use vetto_broker::{error_chain, AllowEntry, BrokerSpec, CidrRule};
use vetto_bundle::policy::NetworkMode;
use vetto_bundle::resolve::{Policy, Source};
use vetto_bundle::translate::broker_setup;
use vetto_bundle::TranslateError;

use crate::sidecar;

/// A network key the broker would refuse.
#[derive(Debug, Error)]
pub enum NetCheckError {
    /// One entry (or value) of a key.
    #[error("{key} ({origin}): {reason}")]
    Entry {
        /// The policy key, `network.allow`.
        key: &'static str,
        /// The layer that set it.
        origin: Source,
        /// The broker's reason, naming the entry.
        reason: String,
    },
    /// The spec built from the whole policy (every entry passed on its own).
    #[error("network: the broker would refuse this policy: {0}")]
    Spec(String),
    /// The broker's part of the policy cannot be built at all.
    #[error(transparent)]
    Translate(#[from] TranslateError),
}

/// Check every network entry of `policy` the way the broker will parse it.
pub fn validate_network(policy: &Policy) -> Result<(), NetCheckError> {
    let entry = |key: &'static str, origin: &Source, reason: String| NetCheckError::Entry {
        key,
        origin: origin.clone(),
        reason,
    };
    for a in &policy.allow {
        AllowEntry::parse(&a.value)
            .map_err(|e| entry("network.allow", &a.source, error_chain(&e)))?;
    }
    for c in &policy.allow_cidrs {
        CidrRule::parse(&c.value)
            .map_err(|e| entry("network.allow_cidrs", &c.source, error_chain(&e)))?;
    }
    for h in &policy.host_ports {
        host_port(&h.value).map_err(|reason| entry("network.host_ports", &h.source, reason))?;
    }
    // The spec exactly as the broker would get it, also when the network is off now. It holds
    // the resolver and the limits too: when it passes, each of them alone passes (the broker
    // checks them one by one), so they are checked alone only to name the key that fails.
    let full = (|| {
        let mut on = policy.clone();
        if on.network.value == NetworkMode::Off {
            on.network.value = NetworkMode::Allowlist;
        }
        if let Some(setup) = broker_setup(&on)? {
            sidecar::broker_spec(&setup.broker)
                .validate()
                .map_err(|e| NetCheckError::Spec(sidecar::spec_problem(&e)))?;
        }
        Ok::<_, NetCheckError>(())
    })();
    let Err(full) = full else {
        return Ok(());
    };
    let alone = |key: &'static str, origin: &Source, spec: BrokerSpec| {
        spec.validate()
            .map_err(|e| entry(key, origin, sidecar::spec_problem(&e)))
    };
    if let Some(r) = &policy.resolver {
        alone(
            "network.resolver",
            &r.source,
            BrokerSpec {
                resolver: Some(r.value.clone()),
                ..BrokerSpec::default()
            },
        )?;
    }
    let m = &policy.max_connections;
    alone(
        "network.max_connections",
        &m.source,
        BrokerSpec {
            max_connections: m.value,
            ..BrokerSpec::default()
        },
    )?;
    let c = &policy.connects_per_minute;
    alone(
        "network.connects_per_minute",
        &c.source,
        BrokerSpec {
            connects_per_minute: c.value,
            ..BrokerSpec::default()
        },
    )?;
    Err(full)
}

/// A `host_ports` target as the broker takes it: its listener role `host:ADDR` is parsed as
/// a `SocketAddr` (`broker_cmd`), and `serve` refuses a target that is not a loopback
/// address with a port.
fn host_port(value: &str) -> Result<SocketAddr, String> {
    let addr: SocketAddr = value
        .parse()
        .map_err(|_| format!("{value:?} is not an ADDRESS:PORT socket address"))?;
    if !addr.ip().is_loopback() || addr.port() == 0 {
        return Err(format!(
            "{value:?} is not a loopback address with a port (host_ports reaches only the \
             host's loopback)"
        ));
    }
    Ok(addr)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // Tests: a panic is the failure report.
mod tests {
    use std::path::PathBuf;

    use vetto_bundle::policy::PolicyFile;
    use vetto_bundle::resolve::{self, Layer};

    use super::*;

    /// The default profile with `toml` on top, as `vetto policy check FILE` merges it.
    fn policy(toml: &str) -> Policy {
        let layers = [
            Layer {
                file: vetto_bundle::profiles::load("default").unwrap(),
                source: Source::Builtin("profile".into()),
            },
            Layer {
                file: PolicyFile::parse(toml, "test.toml").unwrap(),
                source: Source::PolicyFile(PathBuf::from("/p/test.toml")),
            },
        ];
        resolve::merge("default", &layers).unwrap()
    }

    fn refused(toml: &str) -> NetCheckError {
        validate_network(&policy(toml)).unwrap_err()
    }

    #[test]
    fn good_network_keys_pass() {
        validate_network(&policy(
            "[network]\nmode = \"allowlist\"\nallow = [\"crates.io\", \"*.crates.io\", \
             \"github.com:22\", \"bücher.example\"]\nallow_cidrs = [\"10.1.0.0/16:5432\"]\n\
             host_ports = [5432, \"[::1]:6379\"]\nresolver = \"127.0.0.53:53\"\n\
             max_connections = 65536\nconnects_per_minute = 1000000\n",
        ))
        .unwrap();
        validate_network(&policy("")).unwrap();
    }

    #[test]
    fn bad_entries_name_key_origin_and_entry_once_with_the_brokers_reason() {
        for (toml, key, entry) in [
            (
                "allow = [\"ok.example\", \"*.com\"]",
                "network.allow",
                "*.com",
            ),
            ("allow = [\"127.0.0.1\"]", "network.allow", "127.0.0.1"),
            ("allow = [\"[::1]:443\"]", "network.allow", "[::1]:443"),
            ("allow = [\"a b.example\"]", "network.allow", "a b.example"),
            (
                "allow_cidrs = [\"10.0.0.1/8\"]",
                "network.allow_cidrs",
                "10.0.0.1/8",
            ),
        ] {
            // Network off (the default): still bad input.
            let err = refused(&format!("[network]\n{toml}\n"));
            let broker = if key == "network.allow" {
                error_chain(&AllowEntry::parse(entry).unwrap_err())
            } else {
                error_chain(&CidrRule::parse(entry).unwrap_err())
            };
            assert_eq!(
                err.to_string(),
                format!("{key} (policy file /p/test.toml): {broker}"),
                "{toml}"
            );
            assert_eq!(
                err.to_string().matches(&format!("{entry:?}")).count(),
                1,
                "{err}"
            );
            assert!(std::error::Error::source(&err).is_none(), "{err}");
        }
        // The broker's reason comes with its own source, once.
        assert_eq!(
            refused("[network]\nallow = [\"a b.example\"]\n").to_string(),
            "network.allow (policy file /p/test.toml): allowlist entry \"a b.example\": \
             whitespace or control character ' ' in destination"
        );
    }

    #[test]
    fn values_only_the_broker_refuses() {
        // The policy layer accepts these; the broker would not start with them.
        let err = refused("[network]\nmode = \"allowlist\"\nresolver = \"0.0.0.0:53\"\n");
        assert_eq!(
            err.to_string(),
            "network.resolver (policy file /p/test.toml): resolver \"0.0.0.0:53\" is not a \
             usable unicast address and port"
        );
        let err = refused("[network]\nmax_connections = 100000\n");
        assert_eq!(
            err.to_string(),
            "network.max_connections (policy file /p/test.toml): max_connections must be \
             1..=65536, got 100000"
        );
        // The broker's bound is the only one (the policy layer has none of its own).
        let err = refused("[network]\nmax_connections = 0\n");
        assert_eq!(
            err.to_string(),
            format!(
                "network.max_connections (policy file /p/test.toml): max_connections must be \
                 1..={}, got 0",
                vetto_broker::MAX_MAX_CONNECTIONS
            )
        );
        assert!(refused("[network]\nmax_connections = 5000000\n")
            .to_string()
            .starts_with("network.max_connections (policy file /p/test.toml): "));
        // host_ports: the broker's own ports are refused with the translation's error.
        assert!(matches!(
            refused("[network]\nhost_ports = [3128]\n"),
            NetCheckError::Translate(_)
        ));
        assert_eq!(
            host_port("127.0.0.1:5432"),
            Ok("127.0.0.1:5432".parse().unwrap())
        );
        assert!(host_port("10.0.0.1:5432").is_err());
        assert!(host_port("127.0.0.1:0").is_err());
        assert!(host_port("localhost:5432").is_err());
    }

    #[test]
    fn check_spec_is_the_brokers_validation() {
        BrokerSpec::default().validate().unwrap();
        let bad = BrokerSpec {
            allow: vec!["*.com".into()],
            ..BrokerSpec::default()
        };
        let e = bad.validate().unwrap_err();
        assert!(matches!(e, vetto_broker::BrokerError::Policy(_)), "{e}");
        assert_eq!(
            sidecar::spec_problem(&e),
            "allowlist entry \"*.com\": a wildcard over a single-label suffix is too broad"
        );
    }
}
