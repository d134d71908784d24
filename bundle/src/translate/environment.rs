//! The environment section: which variables of an environment pass into the sandbox, and
//! what the policy sets. Shared by both translators: `vetto run` filters the caller's
//! environment ([`EnvOrigin::Caller`], an allowlist) into the typed `Spec`; `vetto-shim`
//! filters the image's own ([`EnvOrigin::Image`], a deny-list) in the bundle's JSON
//! ([`filter_image_env`]). Both decide with [`verdict`] and set [`policy_vars`].

use std::collections::BTreeMap;

use crate::host::HostFacts;
use crate::resolve::{Policy, Source};

use super::network::BrokerSetup;
use super::Builder;

/// Environment variables passed from the caller by default (exact names).
pub const BUILTIN_ENV: &[&str] = &[
    "TERM",
    "COLORTERM",
    "LANG",
    "LANGUAGE",
    "TZ",
    "EDITOR",
    "VISUAL",
    "PAGER",
    "PATH",
    "SHELL",
    "CARGO_HOME",
    "RUSTUP_HOME",
    "RUSTUP_TOOLCHAIN",
    "GOPATH",
    "GOROOT",
    "NVM_DIR",
    "PYENV_ROOT",
    "JAVA_HOME",
    "NO_COLOR",
    "COLUMNS",
    "LINES",
];

/// The locale categories (`locale(7)`): passed by default. Other `LC_*` names are not locale
/// settings and may carry anything (`LC_DB_PASS`); they pass only when named.
pub const LOCALE_ENV: &[&str] = &[
    "LC_ALL",
    "LC_CTYPE",
    "LC_NUMERIC",
    "LC_TIME",
    "LC_COLLATE",
    "LC_MONETARY",
    "LC_MESSAGES",
    "LC_PAPER",
    "LC_NAME",
    "LC_ADDRESS",
    "LC_TELEPHONE",
    "LC_MEASUREMENT",
    "LC_IDENTIFICATION",
];

/// Names that never pass unless named exactly in `pass_through`.
pub fn never_passes(name: &str) -> bool {
    let n = name.to_ascii_uppercase();
    n == "GH_TOKEN"
        || n.starts_with("AWS_")
        || n.ends_with("_API_KEY")
        || n.ends_with("_TOKEN")
        || n.contains("SECRET")
        || n.contains("PASSWORD")
        || n.ends_with("_CREDENTIALS")
}
/// Where an environment comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EnvOrigin {
    /// The caller's (`vetto run`): only what the allowlist or `pass_through` names passes.
    Caller,
    /// The image's own (`vetto-shim`): everything passes but what looks secret.
    Image,
}

/// What becomes of one variable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EnvVerdict {
    /// Named exactly in `pass_through`: passes, whatever it looks like.
    Named,
    /// Passes by default: on the allowlist ([`BUILTIN_ENV`], [`LOCALE_ENV`]) for the caller's
    /// environment, any variable of the image's.
    Default,
    /// Looks secret ([`never_passes`]) and is not named: removed.
    Secret,
    /// The caller's, on no list: not passed.
    Unlisted,
}

impl EnvVerdict {
    /// Does the variable pass?
    pub fn passes(self) -> bool {
        matches!(self, EnvVerdict::Named | EnvVerdict::Default)
    }
}

/// The verdict on the variable `name` of an environment from `origin`, given the names the
/// policy passes through.
pub fn verdict(name: &str, pass_through: &[String], origin: EnvOrigin) -> EnvVerdict {
    if pass_through.iter().any(|p| p == name) {
        EnvVerdict::Named
    } else if never_passes(name) {
        EnvVerdict::Secret
    } else if origin == EnvOrigin::Image
        || BUILTIN_ENV.contains(&name)
        || LOCALE_ENV.contains(&name)
    {
        EnvVerdict::Default
    } else {
        EnvVerdict::Unlisted
    }
}

/// One variable the policy sets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetVar {
    /// The name.
    pub name: String,
    /// The value.
    pub value: String,
    /// Where it came from.
    pub source: Source,
}

/// What the policy sets, in order, a later one winning over an earlier one of the same name:
/// `environment.set`, then the broker's proxy variables (which win over any the policy or the
/// image set).
pub fn policy_vars(policy: &Policy, broker: Option<&BrokerSetup>) -> Vec<SetVar> {
    let net_src = Source::Builtin("network broker".into());
    let set = policy.env_set.iter().map(|(k, v)| SetVar {
        name: k.clone(),
        value: v.value.clone(),
        source: v.source.clone(),
    });
    let proxy = broker
        .map(|s| s.env.as_slice())
        .unwrap_or_default()
        .iter()
        .map(|(k, v)| SetVar {
            name: k.clone(),
            value: v.clone(),
            source: net_src.clone(),
        });
    set.chain(proxy).collect()
}

/// [`policy_vars`] as `NAME=value` entries, each name once (the last one set).
pub fn policy_env_list(vars: &[SetVar]) -> Vec<String> {
    let mut out: Vec<String> = vec![];
    for v in vars {
        out.retain(|e| e.split('=').next() != Some(v.name.as_str()));
        out.push(format!("{}={}", v.name, v.value));
    }
    out
}

/// An image's environment (`NAME=value` entries) filtered: what looks secret is removed
/// unless `pass_through` names it, what `env_set` sets is replaced, and `env_set` appended.
/// Returns the new environment and the names removed.
pub fn filter_image_env(
    env: Vec<String>,
    pass_through: &[String],
    env_set: &[String],
) -> (Vec<String>, Vec<String>) {
    let set_names: Vec<&str> = env_set
        .iter()
        .map(|kv| kv.split('=').next().unwrap_or(""))
        .collect();
    let mut removed = vec![];
    let mut out: Vec<String> = vec![];
    for kv in env {
        let name = kv.split('=').next().unwrap_or("");
        if verdict(name, pass_through, EnvOrigin::Image) == EnvVerdict::Secret {
            removed.push(name.to_string());
        } else if !set_names.contains(&name) {
            out.push(kv);
        }
    }
    out.extend(env_set.iter().cloned());
    (out, removed)
}

/// The sandbox's environment for `vetto run`: the caller's variables that pass, the fixed
/// identity variables, a default `PATH`, then [`policy_vars`]. Returns `NAME=value` entries,
/// sorted by name.
pub(super) fn environment(
    b: &mut Builder,
    policy: &Policy,
    facts: &HostFacts,
    broker: Option<&BrokerSetup>,
) -> Vec<String> {
    let mut env: BTreeMap<String, String> = BTreeMap::new();
    let named: Vec<String> = policy
        .pass_through
        .iter()
        .map(|p| p.value.clone())
        .collect();
    for (k, v) in &facts.env {
        match verdict(k, &named, EnvOrigin::Caller) {
            EnvVerdict::Named => {
                env.insert(k.clone(), v.clone());
                let source = policy.pass_through.iter().find(|p| &p.value == k);
                if let Some(p) = source {
                    b.note(
                        "env",
                        k,
                        "passed through (explicit): exposed to the sandboxed command",
                        &p.source,
                    );
                }
            }
            EnvVerdict::Default => {
                env.insert(k.clone(), v.clone());
                b.note(
                    "env",
                    k,
                    "passed through",
                    Source::Builtin("environment allowlist".into()),
                );
            }
            EnvVerdict::Secret | EnvVerdict::Unlisted => {}
        }
    }
    for p in &policy.pass_through {
        if !facts.env.contains_key(&p.value) {
            b.note(
                "env",
                &p.value,
                "named (explicit), not set now: exposed to the sandboxed command when set",
                &p.source,
            );
        }
    }
    let fixed = Source::Builtin("environment".into());
    for (k, v) in [
        ("HOME", facts.home.display().to_string()),
        ("USER", facts.user.clone()),
        ("LOGNAME", facts.user.clone()),
        ("VETTO_SANDBOX", "1".to_string()),
    ] {
        env.insert(k.into(), v.clone());
        b.note("env", k, format!("set to {v}"), &fixed);
    }
    if !env.contains_key("PATH") {
        let v = "/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin".to_string();
        b.note("env", "PATH", format!("set to {v}"), &fixed);
        env.insert("PATH".into(), v);
    }
    for v in policy_vars(policy, broker) {
        b.note("env", &v.name, format!("set to {}", v.value), &v.source);
        env.insert(v.name, v.value);
    }
    env.iter().map(|(k, v)| format!("{k}={v}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caller_and_image_environments_are_judged_alike_but_for_the_default() {
        let named = vec!["MY_TOKEN".to_string()];
        for origin in [EnvOrigin::Caller, EnvOrigin::Image] {
            assert_eq!(verdict("MY_TOKEN", &named, origin), EnvVerdict::Named);
            assert_eq!(verdict("GH_TOKEN", &named, origin), EnvVerdict::Secret);
            assert_eq!(verdict("PATH", &named, origin), EnvVerdict::Default);
        }
        assert_eq!(
            verdict("FOO", &named, EnvOrigin::Caller),
            EnvVerdict::Unlisted
        );
        assert_eq!(
            verdict("FOO", &named, EnvOrigin::Image),
            EnvVerdict::Default
        );
        // Not a locale category: passes only when named.
        assert_eq!(
            verdict("LC_DB_PASS", &named, EnvOrigin::Caller),
            EnvVerdict::Unlisted
        );
    }
}
