//! The network section: the broker's listeners, its plan and the proxy variables (shared by
//! `vetto run` and `vetto-shim`), and for `vetto run` the published ports and the notes.

use crate::error::TranslateError;
use crate::plan::{BrokerPlan, Listener, ListenerRole, NetPlan, HTTP_PROXY_PORT, SOCKS_PORT};
use crate::policy::{AskMode, NetworkMode};
use crate::resolve::Policy;

use super::Builder;

/// The broker's half of a policy, shared by `vetto run` and `vetto-shim`.
#[derive(Debug, Clone)]
pub struct BrokerSetup {
    /// Listeners on the sandbox's loopback, in the order they are handed to the broker.
    pub listeners: Vec<Listener>,
    /// What the broker enforces.
    pub broker: BrokerPlan,
    /// The proxy variables pointing at the listeners.
    pub env: Vec<(String, String)>,
}

/// Listeners, broker plan and proxy variables for a policy whose network is not off (`None`
/// when it is). `host_ports` are checked either way.
pub fn broker_setup(policy: &Policy) -> Result<Option<BrokerSetup>, TranslateError> {
    let net_on = policy.network.value != NetworkMode::Off;
    let mut listeners = vec![];
    let mut env = vec![];
    if net_on {
        listeners.push(Listener {
            port: HTTP_PROXY_PORT,
            role: ListenerRole::HttpProxy,
        });
        listeners.push(Listener {
            port: SOCKS_PORT,
            role: ListenerRole::Socks5,
        });
        let http = format!("http://127.0.0.1:{HTTP_PROXY_PORT}");
        let socks = format!("socks5h://127.0.0.1:{SOCKS_PORT}");
        let local = "localhost,127.0.0.1".to_string();
        for (k, v) in [
            ("HTTP_PROXY", &http),
            ("HTTPS_PROXY", &http),
            ("ALL_PROXY", &socks),
            ("http_proxy", &http),
            ("https_proxy", &http),
            ("all_proxy", &socks),
            ("NO_PROXY", &local),
            ("no_proxy", &local),
        ] {
            env.push((k.to_string(), v.clone()));
        }
    }
    for hp in &policy.host_ports {
        let port = hp
            .value
            .rsplit_once(':')
            .and_then(|(_, p)| p.parse::<u16>().ok())
            .ok_or_else(|| TranslateError::Path {
                key: "network.host_ports".into(),
                path: hp.value.clone(),
                reason: "no port".into(),
            })?;
        if port == HTTP_PROXY_PORT || port == SOCKS_PORT {
            return Err(TranslateError::Path {
                key: "network.host_ports".into(),
                path: hp.value.clone(),
                reason: format!("ports {HTTP_PROXY_PORT} and {SOCKS_PORT} are the broker's own"),
            });
        }
        if net_on {
            listeners.push(Listener {
                port,
                role: ListenerRole::HostPort {
                    target: hp.value.clone(),
                },
            });
        }
    }
    Ok(net_on.then(|| BrokerSetup {
        listeners,
        broker: BrokerPlan {
            allow: policy.allow.iter().map(|a| a.value.clone()).collect(),
            allow_cidrs: policy.allow_cidrs.iter().map(|a| a.value.clone()).collect(),
            strict: policy.network.value == NetworkMode::Strict,
            resolver: policy.resolver.as_ref().map(|r| r.value.clone()),
            connects_per_minute: policy.connects_per_minute.value,
            max_connections: policy.max_connections.value,
            deny: policy.deny.iter().map(|a| a.value.clone()).collect(),
            ask: policy.approvals.value == AskMode::Ask
                && policy.network.value == NetworkMode::Allowlist,
            approval_timeout_secs: policy.approval_timeout.value,
        },
        env,
    }))
}

/// Translate a resolved policy for this host into a bundle. `secrets` is the result of
/// [`crate::secrets::scan`] on the same facts; `id` names the session (cgroup path, hostname
impl BrokerSetup {
    /// The sandbox's network plan: these listeners and broker, and the sandbox ports
    /// published on the host (`vetto-shim` publishes none: the engine does).
    pub fn net_plan(self, publish: Vec<u16>) -> NetPlan {
        NetPlan {
            listeners: self.listeners,
            broker: Some(self.broker),
            publish,
        }
    }
}

/// `network.publish` names sandbox ports other than the broker's own.
pub(super) fn check_publish(policy: &Policy) -> Result<(), TranslateError> {
    for p in &policy.publish {
        if p.value == 0 || p.value == HTTP_PROXY_PORT || p.value == SOCKS_PORT {
            return Err(TranslateError::Path {
                key: "network.publish".into(),
                path: p.value.to_string(),
                reason: format!(
                    "not a port, or one of the broker's own ({HTTP_PROXY_PORT}, {SOCKS_PORT})"
                ),
            });
        }
    }
    Ok(())
}

/// The plan for `vetto run`: the broker's, with the published ports, or only `lo`.
pub(super) fn net_plan(policy: &Policy, setup: Option<BrokerSetup>) -> NetPlan {
    match setup {
        Some(s) => s.net_plan(policy.publish.iter().map(|p| p.value).collect()),
        None => NetPlan {
            listeners: vec![],
            broker: None,
            publish: vec![],
        },
    }
}

/// The network notes of `vetto policy explain`, and the keys a network that is off ignores.
pub(super) fn note(b: &mut Builder, policy: &Policy) {
    let net_on = policy.network.value != NetworkMode::Off;
    if net_on {
        b.note(
            "network",
            "mode",
            format!(
                "{}: private network namespace with only lo; the host-side broker accepts on 127.0.0.1:{HTTP_PROXY_PORT} (HTTP CONNECT) and 127.0.0.1:{SOCKS_PORT} (SOCKS5)",
                policy.network.value
            ),
            &policy.network.source,
        );
        for a in &policy.allow {
            b.note("network", &a.value, "allowed destination", &a.source);
        }
        for d in &policy.deny {
            b.note(
                "network",
                &d.value,
                "always refused (network.deny: before the allowlist, grants and asking)",
                &d.source,
            );
        }
        for c in &policy.allow_cidrs {
            b.note(
                "network",
                &c.value,
                "allowed address range (even if private)",
                &c.source,
            );
        }
        let unlisted = match (policy.network.value, policy.approvals.value) {
            (NetworkMode::Strict, _) => "refused (strict mode never asks; grants do not apply)".to_string(),
            (_, AskMode::Ask) => format!(
                "held for a person's answer (`vetto approvals`, `vetto watch`) up to {}s when someone can answer, else refused and parked; persistent grants apply",
                policy.approval_timeout.value
            ),
            (_, AskMode::Deny) => "refused at once and parked (unattended); persistent grants apply".to_string(),
        };
        b.note(
            "network",
            "unlisted names",
            unlisted,
            &policy.approvals.source,
        );
        for h in &policy.host_ports {
            b.note(
                "network",
                format!("localhost:{}", h.value.rsplit(':').next().unwrap_or("")),
                format!("relayed to the host's {}", h.value),
                &h.source,
            );
        }
        for p in &policy.publish {
            b.note(
                "network",
                format!("host 127.0.0.1:{}", p.value),
                format!("published: relayed to the sandbox's port {}", p.value),
                &p.source,
            );
        }
        if let Some(r) = &policy.resolver {
            b.note(
                "network",
                "resolver",
                format!("DNS asked at {} (outside the sandbox)", r.value),
                &r.source,
            );
        }
    } else {
        b.note(
            "network",
            "mode",
            "off: private network namespace, only lo (up)",
            &policy.network.source,
        );
    }
    let ignored = [
        ("allow", policy.allow.is_empty()),
        ("host_ports", policy.host_ports.is_empty()),
        ("allow_cidrs", policy.allow_cidrs.is_empty()),
        ("publish", policy.publish.is_empty()),
        ("resolver", policy.resolver.is_none()),
    ];
    for (k, _) in ignored.iter().filter(|(_, empty)| !empty && !net_on) {
        b.note(
            "network",
            k,
            "IGNORED: mode is off, so nothing is reachable",
            &policy.network.source,
        );
    }
}
