//! Layering: built-in profile → user file → `--policy FILE` → command-line flags, each item
//! remembering where it came from, and the trust handoff rule for files the sandbox could
//! have written.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::PolicyError;
use crate::policy::{
    AskMode, HandoffAction, HostPort, NetworkMode, PolicyFile, ProjectAccess, SecretsSection, Tier,
};
use crate::profiles;
use crate::secrets::BUILTIN_SECRETS;

/// Where a piece of the resolved policy came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", content = "name", rename_all = "kebab-case")]
pub enum Source {
    /// A built-in profile or list.
    Builtin(String),
    /// `$XDG_CONFIG_HOME/vetto/policy.toml`.
    UserFile(PathBuf),
    /// `--policy FILE`.
    PolicyFile(PathBuf),
    /// A command-line flag.
    Flag(String),
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Builtin(n) => write!(f, "built-in {n}"),
            Source::UserFile(p) => write!(f, "user file {}", p.display()),
            Source::PolicyFile(p) => write!(f, "policy file {}", p.display()),
            Source::Flag(n) => write!(f, "flag {n}"),
        }
    }
}

/// A value and its origin.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sourced<T> {
    /// The value.
    pub value: T,
    /// Where it came from.
    pub source: Source,
}

impl<T> Sourced<T> {
    fn new(value: T, source: &Source) -> Self {
        Sourced {
            value,
            source: source.clone(),
        }
    }
}

/// One layer with its origin.
#[derive(Debug, Clone)]
pub struct Layer {
    /// The parsed layer.
    pub file: PolicyFile,
    /// Where it came from.
    pub source: Source,
}

/// Resource limits, resolved.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limits {
    /// Wall clock for the whole session.
    pub wall_clock: Option<Sourced<Duration>>,
    /// Process count.
    pub processes: Option<Sourced<u64>>,
    /// Memory in bytes.
    pub memory: Option<Sourced<u64>>,
    /// Open files per process.
    pub open_files: Option<Sourced<u64>>,
    /// Core dumps allowed.
    pub core_dumps: Sourced<bool>,
}

/// The fully resolved policy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Policy {
    /// The base profile's name.
    pub profile: String,
    /// The agent profile layered over it, if any (`claude`, or the user's own).
    pub agent: Option<String>,
    /// Access to the project tree.
    pub project: Sourced<ProjectAccess>,
    /// Fully writable directories under write-no-delete.
    pub scratch: Vec<Sourced<String>>,
    /// Extra read-only roots.
    pub read: Vec<Sourced<String>>,
    /// Extra read-write roots.
    pub write: Vec<Sourced<String>>,
    /// Read-only paths inside the project (or `~/...` inside a writable root or state path).
    pub protected: Vec<Sourced<String>>,
    /// Tools' state paths under HOME, read-write (a trailing `/`: a directory, created when
    /// missing); the toolchain caches' directories among them.
    pub state: Vec<Sourced<String>>,
    /// The toolchain caches asked for, by name.
    pub caches: Vec<Sourced<String>>,
    /// What happens to protected paths the sandbox created.
    pub handoff: Sourced<HandoffAction>,
    /// Secret files.
    pub secret_files: Vec<Sourced<String>>,
    /// Secret directories.
    pub secret_dirs: Vec<Sourced<String>>,
    /// Secret globs.
    pub secret_globs: Vec<Sourced<String>>,
    /// Network mode.
    pub network: Sourced<NetworkMode>,
    /// Allowed destinations.
    pub allow: Vec<Sourced<String>>,
    /// Host loopback ports.
    pub host_ports: Vec<Sourced<String>>,
    /// Published sandbox ports.
    pub publish: Vec<Sourced<u16>>,
    /// Explicitly allowed CIDRs.
    pub allow_cidrs: Vec<Sourced<String>>,
    /// Destinations always refused.
    pub deny: Vec<Sourced<String>>,
    /// DNS server for the broker (None: the system resolver).
    pub resolver: Option<Sourced<String>>,
    /// Broker rate limit per destination per minute.
    pub connects_per_minute: Sourced<u32>,
    /// Broker concurrency limit.
    pub max_connections: Sourced<u32>,
    /// Exact environment names passed through.
    pub pass_through: Vec<Sourced<String>>,
    /// Fixed environment values.
    pub env_set: BTreeMap<String, Sourced<String>>,
    /// Resource limits.
    pub limits: Limits,
    /// Unattended or interactive.
    pub approvals: Sourced<AskMode>,
    /// How long a connection waits for an answer (seconds).
    pub approval_timeout: Sourced<u64>,
    /// The audit JSONL destination (`-` is stdout).
    pub audit_jsonl: Option<Sourced<String>>,
    /// The audit OTLP/HTTP logs endpoint.
    pub audit_otlp: Option<Sourced<String>>,
    /// Every policy file that contributed (they are protected inside the sandbox).
    pub files: Vec<PathBuf>,
    /// The weakest tier the command may run in.
    pub require: Sourced<Tier>,
}

impl Policy {
    /// Every secret pattern (files, directories, globs), for [`crate::secrets::scan`].
    pub fn secret_patterns(&self) -> Vec<&Sourced<String>> {
        self.secret_files
            .iter()
            .chain(&self.secret_dirs)
            .chain(&self.secret_globs)
            .collect()
    }
}

fn push_unique<T: PartialEq + Clone>(dst: &mut Vec<Sourced<T>>, items: &[T], src: &Source) {
    for item in items {
        if !dst.iter().any(|d| &d.value == item) {
            dst.push(Sourced::new(item.clone(), src));
        }
    }
}

/// How long a connection waits for a person's answer when `approvals.timeout` is not set.
pub const DEFAULT_APPROVAL_TIMEOUT_SECS: u64 = 60;
/// The longest `approvals.timeout`.
pub const MAX_APPROVAL_TIMEOUT_SECS: u64 = 3600;

/// Parse `"90s"`, `"30m"`, `"2h"`, `"1d"` or a plain number of seconds.
pub fn parse_duration(key: &str, s: &str) -> Result<Duration, PolicyError> {
    let bad = |reason: &str| PolicyError::BadValue {
        key: key.into(),
        value: s.into(),
        reason: reason.into(),
    };
    let t = s.trim();
    let (num, unit) = t.split_at(t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len()));
    let n: u64 = num
        .parse()
        .map_err(|_| bad("expected a number followed by s, m, h or d"))?;
    let mult = match unit {
        "" | "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86400,
        _ => return Err(bad("unit must be s, m, h or d")),
    };
    if n == 0 {
        return Err(bad("must be greater than zero"));
    }
    n.checked_mul(mult)
        .map(Duration::from_secs)
        .ok_or_else(|| bad("too large"))
}

/// Parse `"512M"`, `"4G"`, `"1024K"` or a plain number of bytes.
pub fn parse_size(key: &str, s: &str) -> Result<u64, PolicyError> {
    let bad = |reason: &str| PolicyError::BadValue {
        key: key.into(),
        value: s.into(),
        reason: reason.into(),
    };
    let t = s.trim();
    let (num, unit) = t.split_at(t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len()));
    let n: u64 = num
        .parse()
        .map_err(|_| bad("expected a number followed by K, M or G"))?;
    let mult: u64 = match unit {
        "" | "B" => 1,
        "K" | "KiB" => 1 << 10,
        "M" | "MiB" => 1 << 20,
        "G" | "GiB" => 1 << 30,
        _ => return Err(bad("unit must be K, M or G")),
    };
    let v = n.checked_mul(mult).ok_or_else(|| bad("too large"))?;
    if v < (16 << 20) {
        return Err(bad("must be at least 16M"));
    }
    Ok(v)
}

fn host_port_string(hp: &HostPort) -> Result<String, PolicyError> {
    match hp {
        HostPort::Port(0) => Err(PolicyError::BadValue {
            key: "network.host_ports".into(),
            value: "0".into(),
            reason: "port 0 is not a port".into(),
        }),
        HostPort::Port(p) => Ok(format!("127.0.0.1:{p}")),
        HostPort::Addr(a) => {
            let sa: std::net::SocketAddr = a.parse().map_err(|_| PolicyError::BadValue {
                key: "network.host_ports".into(),
                value: a.clone(),
                reason: "expected PORT or LOOPBACK-ADDRESS:PORT".into(),
            })?;
            if !sa.ip().is_loopback() || sa.port() == 0 {
                return Err(PolicyError::BadValue {
                    key: "network.host_ports".into(),
                    value: a.clone(),
                    reason: "host_ports opens only a port on the host's loopback".into(),
                });
            }
            Ok(sa.to_string())
        }
    }
}

/// Merge layers over a base profile. The first layer must be the profile itself.
pub fn merge(profile: &str, layers: &[Layer]) -> Result<Policy, PolicyError> {
    let builtin = Source::Builtin(format!("profile \"{profile}\""));
    let builtin_secrets = Source::Builtin("secret list".into());
    let mut p = Policy {
        profile: profile.to_string(),
        agent: None,
        project: Sourced::new(ProjectAccess::Read, &builtin),
        scratch: vec![],
        read: vec![],
        write: vec![],
        protected: vec![],
        state: vec![],
        caches: vec![],
        handoff: Sourced::new(HandoffAction::Warn, &builtin),
        secret_files: vec![],
        secret_dirs: vec![],
        secret_globs: vec![],
        network: Sourced::new(NetworkMode::Off, &builtin),
        allow: vec![],
        host_ports: vec![],
        publish: vec![],
        allow_cidrs: vec![],
        deny: vec![],
        resolver: None,
        connects_per_minute: Sourced::new(120, &builtin),
        max_connections: Sourced::new(1024, &builtin),
        pass_through: vec![],
        env_set: BTreeMap::new(),
        limits: Limits {
            wall_clock: None,
            processes: None,
            memory: None,
            open_files: None,
            core_dumps: Sourced::new(false, &builtin),
        },
        approvals: Sourced::new(AskMode::Ask, &builtin),
        approval_timeout: Sourced::new(DEFAULT_APPROVAL_TIMEOUT_SECS, &builtin),
        audit_jsonl: None,
        audit_otlp: None,
        files: vec![],
        require: Sourced::new(Tier::FsOnly, &builtin),
    };
    let builtin_section = SecretsSection {
        extend: None,
        files: Some(
            BUILTIN_SECRETS
                .files
                .iter()
                .map(|s| s.to_string())
                .collect(),
        ),
        dirs: Some(BUILTIN_SECRETS.dirs.iter().map(|s| s.to_string()).collect()),
        globs: None,
    };
    apply_secrets(&mut p, &builtin_section, &builtin_secrets);

    for layer in layers {
        let src = &layer.source;
        let f = &layer.file;
        match src {
            Source::UserFile(path) | Source::PolicyFile(path) => p.files.push(path.clone()),
            _ => {}
        }
        if let Some(r) = f.sandbox.as_ref().and_then(|s| s.require) {
            p.require = Sourced::new(r, src);
        }
        if let Some(fs) = &f.filesystem {
            if let Some(a) = fs.project {
                p.project = Sourced::new(a, src);
            }
            if let Some(h) = fs.handoff {
                p.handoff = Sourced::new(h, src);
            }
            push_unique(&mut p.scratch, fs.scratch.as_deref().unwrap_or(&[]), src);
            push_unique(&mut p.read, fs.read.as_deref().unwrap_or(&[]), src);
            push_unique(&mut p.write, fs.write.as_deref().unwrap_or(&[]), src);
            push_unique(
                &mut p.protected,
                fs.protected.as_deref().unwrap_or(&[]),
                src,
            );
            let state = fs.state.as_deref().unwrap_or(&[]);
            for st in state {
                let rest = st.strip_prefix("~/").unwrap_or("");
                let comps: Vec<&str> = rest.trim_end_matches('/').split('/').collect();
                if !st.starts_with("~/")
                    || comps
                        .iter()
                        .any(|c| c.is_empty() || *c == "." || *c == "..")
                {
                    return Err(PolicyError::BadValue {
                        key: "filesystem.state".into(),
                        value: st.clone(),
                        reason:
                            "a path beneath HOME (`~/...`), without `.`, `..` or empty components"
                                .into(),
                    });
                }
            }
            push_unique(&mut p.state, state, src);
            for c in fs.caches.as_deref().unwrap_or(&[]) {
                let preset = crate::presets::get("filesystem.caches", c)?;
                push_unique(&mut p.caches, std::slice::from_ref(c), src);
                let dirs: Vec<String> = preset
                    .dirs
                    .iter()
                    .chain(preset.files)
                    .map(|d| d.to_string())
                    .collect();
                push_unique(&mut p.state, &dirs, src);
                let protected: Vec<String> =
                    preset.protected.iter().map(|d| d.to_string()).collect();
                push_unique(&mut p.protected, &protected, src);
            }
        }
        if let Some(s) = &f.secrets {
            apply_secrets(&mut p, s, src);
        }
        if let Some(n) = &f.network {
            if let Some(m) = n.mode {
                p.network = Sourced::new(m, src);
            }
            let mut allow = vec![];
            for a in n.allow.as_deref().unwrap_or(&[]) {
                allow.extend(crate::presets::expand_allow(a)?);
            }
            push_unique(&mut p.allow, &allow, src);
            let hps = n
                .host_ports
                .as_deref()
                .unwrap_or(&[])
                .iter()
                .map(host_port_string)
                .collect::<Result<Vec<_>, _>>()?;
            push_unique(&mut p.host_ports, &hps, src);
            push_unique(&mut p.publish, n.publish.as_deref().unwrap_or(&[]), src);
            push_unique(
                &mut p.allow_cidrs,
                n.allow_cidrs.as_deref().unwrap_or(&[]),
                src,
            );
            push_unique(&mut p.deny, n.deny.as_deref().unwrap_or(&[]), src);
            if let Some(v) = n.connects_per_minute {
                if v == 0 || v > 1_000_000 {
                    return Err(PolicyError::BadValue {
                        key: "network.connects_per_minute".into(),
                        value: v.to_string(),
                        reason: "must be between 1 and 1000000".into(),
                    });
                }
                p.connects_per_minute = Sourced::new(v, src);
            }
            // Its range is the broker's (vetto_broker::MAX_MAX_CONNECTIONS), checked by the
            // broker's own spec validation when the policy is loaded (vetto's netcheck) and
            // before a broker starts; a second bound here could only disagree with it.
            if let Some(v) = n.max_connections {
                p.max_connections = Sourced::new(v, src);
            }
            if let Some(r) = &n.resolver {
                let sa: std::net::SocketAddr = r.parse().map_err(|_| PolicyError::BadValue {
                    key: "network.resolver".into(),
                    value: r.clone(),
                    reason: "expected ADDRESS:PORT of a DNS server".into(),
                })?;
                p.resolver = Some(Sourced::new(sa.to_string(), src));
            }
        }
        if let Some(e) = &f.environment {
            let names = e.pass_through.as_deref().unwrap_or(&[]);
            for n in names {
                if !valid_env_name(n) {
                    return Err(PolicyError::BadValue {
                        key: "environment.pass_through".into(),
                        value: n.clone(),
                        reason: "an exact variable name ([A-Za-z_][A-Za-z0-9_]*), no patterns"
                            .into(),
                    });
                }
            }
            push_unique(&mut p.pass_through, names, src);
            for (k, v) in e.set.iter().flatten() {
                if !valid_env_name(k) || v.contains('\0') {
                    return Err(PolicyError::BadValue {
                        key: "environment.set".into(),
                        value: k.clone(),
                        reason: "not a valid variable name or value".into(),
                    });
                }
                p.env_set.insert(k.clone(), Sourced::new(v.clone(), src));
            }
        }
        if let Some(l) = &f.limits {
            if let Some(w) = &l.wall_clock {
                p.limits.wall_clock =
                    Some(Sourced::new(parse_duration("limits.wall_clock", w)?, src));
            }
            if let Some(n) = l.processes {
                if n == 0 {
                    return Err(PolicyError::BadValue {
                        key: "limits.processes".into(),
                        value: "0".into(),
                        reason: "must be at least 1".into(),
                    });
                }
                p.limits.processes = Some(Sourced::new(n, src));
            }
            if let Some(m) = &l.memory {
                p.limits.memory = Some(Sourced::new(parse_size("limits.memory", m)?, src));
            }
            if let Some(n) = l.open_files {
                if n < 16 {
                    return Err(PolicyError::BadValue {
                        key: "limits.open_files".into(),
                        value: n.to_string(),
                        reason: "must be at least 16".into(),
                    });
                }
                p.limits.open_files = Some(Sourced::new(n, src));
            }
            if let Some(c) = l.core_dumps {
                p.limits.core_dumps = Sourced::new(c, src);
            }
        }
        if let Some(a) = f.approvals.as_ref().and_then(|a| a.mode) {
            p.approvals = Sourced::new(a, src);
        }
        if let Some(t) = f.approvals.as_ref().and_then(|a| a.timeout.as_deref()) {
            let d = parse_duration("approvals.timeout", t)?.as_secs();
            if !(1..=MAX_APPROVAL_TIMEOUT_SECS).contains(&d) {
                return Err(PolicyError::BadValue {
                    key: "approvals.timeout".into(),
                    value: t.into(),
                    reason: format!("must be between 1s and {MAX_APPROVAL_TIMEOUT_SECS}s"),
                });
            }
            p.approval_timeout = Sourced::new(d, src);
        }
        if let Some(a) = &f.audit {
            if let Some(j) = &a.jsonl {
                p.audit_jsonl = Some(Sourced::new(j.clone(), src));
            }
            if let Some(o) = &a.otlp {
                p.audit_otlp = Some(Sourced::new(o.clone(), src));
            }
        }
    }
    Ok(p)
}

fn apply_secrets(p: &mut Policy, s: &SecretsSection, src: &Source) {
    if s.extend == Some(false) {
        p.secret_files.clear();
        p.secret_dirs.clear();
        p.secret_globs.clear();
    }
    push_unique(&mut p.secret_files, s.files.as_deref().unwrap_or(&[]), src);
    push_unique(&mut p.secret_dirs, s.dirs.as_deref().unwrap_or(&[]), src);
    push_unique(&mut p.secret_globs, s.globs.as_deref().unwrap_or(&[]), src);
}

/// `[A-Za-z_][A-Za-z0-9_]*`
pub fn valid_env_name(n: &str) -> bool {
    let mut chars = n.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Everything that feeds resolution.
#[derive(Debug, Clone, Default)]
pub struct Inputs {
    /// `--profile`.
    pub profile_flag: Option<String>,
    /// The user file, if it exists.
    pub user_file: Option<PathBuf>,
    /// `--policy FILE`.
    pub policy_file: Option<PathBuf>,
    /// Flags, as a layer (source names each flag).
    pub flags: Vec<Layer>,
    /// The agent profile, if one is chosen.
    pub agent: Option<AgentInput>,
}

/// The agent profile chosen (`--agent NAME`, or the command's name).
#[derive(Debug, Clone, Default)]
pub struct AgentInput {
    /// Its name.
    pub name: String,
    /// The user's own profile of that name, if there is one (it may `extends` a built-in).
    pub user_file: Option<PathBuf>,
}

/// What the trust rule needs to know about the host.
pub struct TrustContext<'a> {
    /// The project directory (canonical).
    pub project: &'a Path,
    /// The caller's HOME (canonical), to expand `~/` in write roots.
    pub home: &'a Path,
    /// Recorded trust.
    pub store: &'a crate::trust::TrustStore,
}

/// Read a policy file once: the same bytes are parsed and, for the trust rule, hashed.
fn load_layer(path: &Path, user: bool) -> Result<(Layer, Vec<u8>), PolicyError> {
    let canon = path.canonicalize().map_err(|source| PolicyError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let bytes = std::fs::read(&canon).map_err(|source| PolicyError::Read {
        path: canon.clone(),
        source,
    })?;
    let text = std::str::from_utf8(&bytes).map_err(|_| PolicyError::Parse {
        origin: canon.display().to_string(),
        message: "not UTF-8 text".into(),
    })?;
    let file = PolicyFile::parse(text, &canon.display().to_string())?;
    let source = if user {
        Source::UserFile(canon)
    } else {
        Source::PolicyFile(canon)
    };
    Ok((Layer { file, source }, bytes))
}

/// The base profile: the flag wins, then the first file that names one; two files naming
/// different profiles conflict.
fn choose_profile(flag: Option<&String>, files: &[&Layer]) -> Result<String, PolicyError> {
    let mut profile: Option<(String, String)> =
        flag.cloned().map(|p| (p, "flag --profile".to_string()));
    for l in files {
        if let Some(named) = &l.file.profile {
            match &profile {
                Some((base, origin)) if base != named && origin != "flag --profile" => {
                    return Err(PolicyError::ProfileConflict {
                        origin: l.source.to_string(),
                        named: named.clone(),
                        base: base.clone(),
                    })
                }
                Some(_) => {}
                None => profile = Some((named.clone(), l.source.to_string())),
            }
        }
    }
    Ok(profile.map_or_else(|| "default".to_string(), |(p, _)| p))
}

/// The merged policy of the profile `files` choose, then `files`, then `flags`.
fn merge_all(
    flag: Option<&String>,
    files: &[&Layer],
    flags: &[Layer],
) -> Result<Policy, PolicyError> {
    let profile = choose_profile(flag, files)?;
    let mut layers = vec![Layer {
        file: profiles::load(&profile)?,
        source: Source::Builtin(format!("profile \"{profile}\"")),
    }];
    layers.extend(files.iter().map(|l| (*l).clone()));
    layers.extend(flags.iter().cloned());
    merge(&profile, &layers)
}

/// Resolve every layer into one policy, applying the trust handoff rule: a policy file the
/// sandbox could write (inside the project, or inside any write root of the *final* policy,
/// flags included) whose SHA-256 has not been recorded with `vetto trust` may only narrow.
/// Widenings are judged on the final effective policy: with and without that file, every
/// other layer (the flags that come after it included) in place.
pub fn resolve(inputs: &Inputs, trust: &TrustContext<'_>) -> Result<Policy, PolicyError> {
    let mut file_layers = vec![];
    // The agent profile first: the built-in one (or the one the user's extends), then the
    // user's own.
    if let Some(a) = &inputs.agent {
        let user = a
            .user_file
            .as_ref()
            .map(|f| load_layer(f, true))
            .transpose()?;
        let builtin = match &user {
            Some((l, _)) => l.file.extends.clone(),
            None => Some(a.name.clone()),
        };
        if let Some(b) = builtin {
            file_layers.push((
                Layer {
                    file: profiles::load_agent(&b)?,
                    source: Source::Builtin(format!("agent profile \"{b}\"")),
                },
                vec![],
            ));
        }
        file_layers.extend(user);
    }
    let agent_layers = file_layers.len();
    if let Some(u) = &inputs.user_file {
        file_layers.push(load_layer(u, true)?);
    }
    if let Some(pf) = &inputs.policy_file {
        file_layers.push(load_layer(pf, false)?);
    }
    for (l, _) in &file_layers[agent_layers..] {
        if l.file.extends.is_some() {
            return Err(PolicyError::BadValue {
                key: "extends".into(),
                value: l.source.to_string(),
                reason: "only an agent profile ($XDG_CONFIG_HOME/vetto/profiles/NAME.toml, chosen with --agent NAME) extends another".into(),
            });
        }
    }
    let flag = inputs.profile_flag.as_ref();
    let all: Vec<&Layer> = file_layers.iter().map(|(l, _)| l).collect();
    let mut final_policy = merge_all(flag, &all, &inputs.flags)?;
    final_policy.agent = inputs.agent.as_ref().map(|a| a.name.clone());
    let roots = writable_roots(&final_policy, trust)?;
    for (i, (l, bytes)) in file_layers.iter().enumerate() {
        let path = match &l.source {
            Source::UserFile(p) | Source::PolicyFile(p) => p.clone(),
            _ => continue,
        };
        if !roots.iter().any(|r| path.starts_with(r)) {
            continue;
        }
        if trust.store.is_trusted_content(&path, bytes) {
            continue;
        }
        let others: Vec<&Layer> = file_layers
            .iter()
            .enumerate()
            .filter(|(j, _)| *j != i)
            .map(|(_, (l, _))| l)
            .collect();
        let mut without = merge_all(flag, &others, &inputs.flags)?;
        without.agent = final_policy.agent.clone();
        let w = widenings(&without, &final_policy);
        if !w.is_empty() {
            return Err(PolicyError::UntrustedWidening { path, widenings: w });
        }
    }
    Ok(final_policy)
}

/// Every host root the sandbox of `policy` could write and that outlives it: the project and
/// each write root, canonical. A write root that does not exist holds no policy file (and
/// cannot be bound); one that cannot be resolved otherwise is an error.
fn writable_roots(policy: &Policy, trust: &TrustContext<'_>) -> Result<Vec<PathBuf>, PolicyError> {
    let mut roots = vec![trust.project.to_path_buf()];
    for w in policy.write.iter().chain(&policy.state) {
        let p = crate::policy::expand_path(&w.value, trust.home, trust.project)?;
        match p.canonicalize() {
            Ok(c) => roots.push(c),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(source) => return Err(PolicyError::Read { path: p, source }),
        }
    }
    Ok(roots)
}

fn added<T: PartialEq + fmt::Debug>(
    key: &str,
    before: &[Sourced<T>],
    after: &[Sourced<T>],
) -> Option<String> {
    let new: Vec<String> = after
        .iter()
        .filter(|a| !before.iter().any(|b| b.value == a.value))
        .map(|a| format!("{:?}", a.value))
        .collect();
    (!new.is_empty()).then(|| format!("adds {key} {}", new.join(", ")))
}

fn removed<T: PartialEq + fmt::Debug>(
    key: &str,
    before: &[Sourced<T>],
    after: &[Sourced<T>],
) -> Option<String> {
    added(key, after, before).map(|s| s.replacen("adds", "removes", 1))
}

fn raised(key: &str, before: Option<u64>, after: Option<u64>) -> Option<String> {
    match (before, after) {
        (Some(b), None) => Some(format!("lifts {key} (was {b})")),
        (Some(b), Some(a)) if a > b => Some(format!("raises {key} from {b} to {a}")),
        _ => None,
    }
}

/// Every way `after` allows more than `before`.
pub fn widenings(before: &Policy, after: &Policy) -> Vec<String> {
    let mut w = vec![];
    if after.project.value > before.project.value {
        w.push(format!(
            "raises filesystem.project from {} to {}",
            before.project.value, after.project.value
        ));
    }
    if after.project.value == ProjectAccess::WriteNoDelete {
        w.extend(added("filesystem.scratch", &before.scratch, &after.scratch));
    }
    w.extend(added("filesystem.read", &before.read, &after.read));
    w.extend(added("filesystem.write", &before.write, &after.write));
    w.extend(added("filesystem.state", &before.state, &after.state));
    w.extend(removed(
        "filesystem.protected",
        &before.protected,
        &after.protected,
    ));
    if after.require.value < before.require.value {
        w.push(format!(
            "lowers sandbox.require from {} to {}",
            before.require.value, after.require.value
        ));
    }
    if after.handoff.value > before.handoff.value {
        w.push(format!(
            "changes filesystem.handoff from {} to {}",
            before.handoff.value, after.handoff.value
        ));
    }
    w.extend(removed(
        "secrets.files",
        &before.secret_files,
        &after.secret_files,
    ));
    w.extend(removed(
        "secrets.dirs",
        &before.secret_dirs,
        &after.secret_dirs,
    ));
    w.extend(removed(
        "secrets.globs",
        &before.secret_globs,
        &after.secret_globs,
    ));
    if after.network.value > before.network.value {
        w.push(format!(
            "raises network.mode from {} to {}",
            before.network.value, after.network.value
        ));
    }
    w.extend(added("network.allow", &before.allow, &after.allow));
    w.extend(added(
        "network.host_ports",
        &before.host_ports,
        &after.host_ports,
    ));
    w.extend(added("network.publish", &before.publish, &after.publish));
    w.extend(added(
        "network.allow_cidrs",
        &before.allow_cidrs,
        &after.allow_cidrs,
    ));
    w.extend(removed("network.deny", &before.deny, &after.deny));
    if after.resolver.as_ref().map(|r| &r.value) != before.resolver.as_ref().map(|r| &r.value) {
        w.push("changes network.resolver".into());
    }
    w.extend(raised(
        "network.connects_per_minute",
        Some(before.connects_per_minute.value.into()),
        Some(after.connects_per_minute.value.into()),
    ));
    w.extend(raised(
        "network.max_connections",
        Some(before.max_connections.value.into()),
        Some(after.max_connections.value.into()),
    ));
    w.extend(added(
        "environment.pass_through",
        &before.pass_through,
        &after.pass_through,
    ));
    for (k, v) in &after.env_set {
        if before.env_set.get(k).map(|b| &b.value) != Some(&v.value) {
            w.push(format!("sets environment variable {k}"));
        }
    }
    let secs = |d: &Option<Sourced<Duration>>| d.as_ref().map(|s| s.value.as_secs());
    let val = |d: &Option<Sourced<u64>>| d.as_ref().map(|s| s.value);
    w.extend(raised(
        "limits.wall_clock (s)",
        secs(&before.limits.wall_clock),
        secs(&after.limits.wall_clock),
    ));
    w.extend(raised(
        "limits.processes",
        val(&before.limits.processes),
        val(&after.limits.processes),
    ));
    w.extend(raised(
        "limits.memory",
        val(&before.limits.memory),
        val(&after.limits.memory),
    ));
    w.extend(raised(
        "limits.open_files",
        val(&before.limits.open_files),
        val(&after.limits.open_files),
    ));
    if after.limits.core_dumps.value && !before.limits.core_dumps.value {
        w.push("enables limits.core_dumps".into());
    }
    if after.approvals.value > before.approvals.value {
        w.push("changes approvals.mode from deny to ask".into());
    }
    // The host writes the JSONL file and connects to the collector: where is the user's call.
    let val = |v: &Option<Sourced<String>>| v.as_ref().map(|s| s.value.clone());
    if val(&after.audit_jsonl) != val(&before.audit_jsonl) {
        w.push("changes audit.jsonl (a file the host writes)".into());
    }
    if val(&after.audit_otlp) != val(&before.audit_otlp) {
        w.push("changes audit.otlp (a collector the host connects to)".into());
    }
    w
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trust::TrustStore;

    fn layer(text: &str, source: Source) -> Layer {
        Layer {
            file: PolicyFile::parse(text, "test").expect("parses"),
            source,
        }
    }

    #[test]
    fn layers_override_in_order_and_keep_sources() {
        let base = Layer {
            file: profiles::load("default").expect("p"),
            source: Source::Builtin("profile \"default\"".into()),
        };
        let user = layer(
            "[filesystem]\nproject = \"write-no-delete\"\nread = [\"/opt\"]\n",
            Source::UserFile("/u.toml".into()),
        );
        let flag = layer(
            "[filesystem]\nproject = \"read\"\n",
            Source::Flag("--project-access".into()),
        );
        let p = merge("default", &[base, user, flag]).expect("merge");
        assert_eq!(p.project.value, ProjectAccess::Read);
        assert_eq!(p.project.source, Source::Flag("--project-access".into()));
        assert_eq!(p.read[0].value, "/opt");
        assert_eq!(p.read[0].source, Source::UserFile("/u.toml".into()));
        assert_eq!(
            p.scratch[0].source,
            Source::Builtin("profile \"default\"".into())
        );
        assert!(p.secret_dirs.iter().any(|s| s.value == "~/.ssh"));
        assert_eq!(p.files, vec![PathBuf::from("/u.toml")]);
    }

    #[test]
    fn extend_false_replaces_builtin_secrets() {
        let base = Layer {
            file: profiles::load("default").expect("p"),
            source: Source::Builtin("x".into()),
        };
        let l = layer(
            "[secrets]\nextend = false\nfiles = [\"only.key\"]\n",
            Source::Flag("f".into()),
        );
        let p = merge("default", &[base, l]).expect("merge");
        assert_eq!(p.secret_files.len(), 1);
        assert!(p.secret_dirs.is_empty());
    }

    #[test]
    fn durations_and_sizes() {
        assert_eq!(
            parse_duration("k", "30m").ok(),
            Some(Duration::from_secs(1800))
        );
        assert_eq!(
            parse_duration("k", "90").ok(),
            Some(Duration::from_secs(90))
        );
        assert_eq!(
            parse_duration("limits.wall_clock", "5 minutes")
                .expect_err("bad")
                .to_string(),
            "bad value for `limits.wall_clock`: `5 minutes`: unit must be s, m, h or d"
        );
        assert_eq!(parse_size("k", "4G").ok(), Some(4 << 30));
        assert!(parse_size("k", "1K").is_err());
    }

    #[test]
    fn host_ports_must_be_loopback() {
        let base = Layer {
            file: profiles::load("default").expect("p"),
            source: Source::Builtin("x".into()),
        };
        let l = layer(
            "[network]\nhost_ports = [\"10.0.0.1:5432\"]\n",
            Source::Flag("f".into()),
        );
        let e = merge("default", &[base, l]).expect_err("must refuse");
        assert!(
            e.to_string().contains("only a port on the host's loopback"),
            "{e}"
        );
    }

    fn ctx_resolve(project: &Path, file: &Path, store: &TrustStore) -> Result<Policy, PolicyError> {
        let inputs = Inputs {
            policy_file: Some(file.to_path_buf()),
            ..Default::default()
        };
        resolve(
            &inputs,
            &TrustContext {
                project,
                home: project,
                store,
            },
        )
    }

    /// Widenings are judged on the final policy: a scratch entry matters once a later flag
    /// sets write-no-delete.
    #[test]
    fn untrusted_scratch_cannot_cancel_a_later_write_no_delete_flag() {
        let dir = tempfile::tempdir().expect("tmp");
        let proj = dir.path().canonicalize().expect("c");
        let f = proj.join("vetto.toml");
        std::fs::write(&f, "[filesystem]\nscratch = [\".\"]\n").expect("w");
        let store = TrustStore::empty(dir.path().join("nowhere.json"));
        let inputs = Inputs {
            policy_file: Some(f.clone()),
            flags: vec![layer(
                "[filesystem]\nproject = \"write-no-delete\"\n",
                Source::Flag("--project-access".into()),
            )],
            ..Default::default()
        };
        let ctx = TrustContext {
            project: &proj,
            home: &proj,
            store: &store,
        };
        let e = resolve(&inputs, &ctx).expect_err("widening refused");
        assert!(e.to_string().contains("filesystem.scratch"), "{e}");
    }

    /// A policy file inside a write root that only a flag gives is sandbox-writable too.
    #[test]
    fn policy_file_in_a_flag_write_root_may_not_widen() {
        let dir = tempfile::tempdir().expect("tmp");
        let root = dir.path().canonicalize().expect("c");
        let proj = root.join("proj");
        let shared = root.join("shared");
        std::fs::create_dir_all(&proj).expect("mk");
        std::fs::create_dir_all(&shared).expect("mk");
        let f = shared.join("vetto.toml");
        std::fs::write(&f, "[secrets]\nextend = false\n").expect("w");
        let store = TrustStore::empty(root.join("nowhere.json"));
        let ctx = TrustContext {
            project: &proj,
            home: &root,
            store: &store,
        };
        let with_flag = Inputs {
            policy_file: Some(f.clone()),
            flags: vec![layer(
                &format!("[filesystem]\nwrite = [\"{}\"]\n", shared.display()),
                Source::Flag("--allow-write".into()),
            )],
            ..Default::default()
        };
        let e = resolve(&with_flag, &ctx).expect_err("widening refused");
        assert!(e.to_string().contains("secrets"), "{e}");
        // Without the write root, the file is the operator's and may widen.
        let plain = Inputs {
            policy_file: Some(f),
            ..Default::default()
        };
        resolve(&plain, &ctx).expect("outside every writable root");
    }

    #[test]
    fn untrusted_project_policy_may_narrow() {
        let dir = tempfile::tempdir().expect("tmp");
        let proj = dir.path().canonicalize().expect("c");
        let f = proj.join("vetto.toml");
        std::fs::write(
            &f,
            "profile = \"default\"\n[filesystem]\nproject = \"read\"\n[limits]\nprocesses = 10\n",
        )
        .expect("w");
        let store = TrustStore::empty(dir.path().join("nowhere.json"));
        let p = ctx_resolve(&proj, &f, &store).expect("narrowing is fine");
        assert_eq!(p.project.value, ProjectAccess::Read);
    }

    #[test]
    fn untrusted_project_policy_may_not_widen_until_trusted() {
        let dir = tempfile::tempdir().expect("tmp");
        let proj = dir.path().join("p");
        std::fs::create_dir(&proj).expect("mk");
        let proj = proj.canonicalize().expect("c");
        let f = proj.join("vetto.toml");
        std::fs::write(&f, "[network]\nmode = \"allowlist\"\nallow = [\"evil.example\"]\n[secrets]\nextend = false\n").expect("w");
        let store_path = dir.path().join("trust.json");
        let store = TrustStore::load(&store_path).expect("load");
        let e = ctx_resolve(&proj, &f, &store).expect_err("widening refused");
        let s = e.to_string();
        assert!(
            s.contains("raises network.mode from off to allowlist"),
            "{s}"
        );
        assert!(s.contains("adds network.allow \"evil.example\""), "{s}");
        assert!(s.contains("removes secrets.dirs"), "{s}");
        assert!(s.contains("vetto trust"), "{s}");

        let mut store = store;
        store.record(&f).expect("record");
        store.save().expect("save");
        let store = TrustStore::load(&store_path).expect("reload");
        ctx_resolve(&proj, &f, &store).expect("trusted file may widen");

        // The agent edits the trusted file: its hash changes and the trust is gone.
        std::fs::write(
            &f,
            "[network]\nmode = \"allowlist\"\nallow = [\"evil2.example\"]\n",
        )
        .expect("w");
        assert!(ctx_resolve(&proj, &f, &store).is_err());
    }

    #[test]
    fn an_untrusted_project_policy_may_not_choose_the_audit_exporters() {
        let dir = tempfile::tempdir().expect("tmp");
        let proj = dir.path().canonicalize().expect("c");
        let f = proj.join("vetto.toml");
        std::fs::write(
            &f,
            "[audit]\notlp = \"http://collector.example:4318/v1/logs\"\njsonl = \"/tmp/x.jsonl\"\n",
        )
        .expect("w");
        let store = TrustStore::empty(dir.path().join("nowhere.json"));
        let s = ctx_resolve(&proj, &f, &store)
            .expect_err("widening refused")
            .to_string();
        assert!(s.contains("changes audit.otlp"), "{s}");
        assert!(s.contains("changes audit.jsonl"), "{s}");
        // Outside the project the file is the operator's: it may.
        let other = tempfile::tempdir().expect("tmp");
        let g = other.path().join("op-audit.toml");
        std::fs::write(&g, "[audit]\njsonl = \"-\"\n").expect("w");
        let p = ctx_resolve(&proj, &g, &store).expect("ok");
        assert_eq!(p.audit_jsonl.map(|j| j.value).as_deref(), Some("-"));
    }

    #[test]
    fn policy_outside_project_may_widen() {
        let dir = tempfile::tempdir().expect("tmp");
        let proj = dir.path().join("p");
        std::fs::create_dir(&proj).expect("mk");
        let f = dir.path().join("outside.toml");
        std::fs::write(&f, "[filesystem]\nread = [\"/opt\"]\n").expect("w");
        let store = TrustStore::empty(dir.path().join("t.json"));
        let p = ctx_resolve(&proj.canonicalize().expect("c"), &f, &store).expect("ok");
        assert_eq!(p.read.len(), 1);
    }

    #[test]
    fn profile_conflict_and_unknown_profile() {
        let dir = tempfile::tempdir().expect("tmp");
        let proj = dir.path().canonicalize().expect("c");
        let f = dir.path().join("x.toml");
        std::fs::write(&f, "profile = \"nope\"\n").expect("w");
        let store = TrustStore::empty(dir.path().join("t.json"));
        let e = ctx_resolve(&proj, &f, &store).expect_err("unknown");
        assert_eq!(
            e.to_string(),
            "unknown profile `nope` (built-in profiles: default, read-only, ci)"
        );
    }
}
