//! The policy file format: what a user writes in TOML.
//!
//! Every table is `deny_unknown_fields`: a misspelt key is an error that names the file, the
//! line, the column and the key, never a silently ignored restriction. Every field is optional
//! here because a file is one *layer*: the built-in profile, the user file, `--policy FILE` and
//! the command-line flags are merged in that order by [`crate::resolve`].

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::error::PolicyError;

/// One layer of policy, as written in a TOML file.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PolicyFile {
    /// The built-in profile this file starts from (`default`, `read-only`, `ci`). Only the
    /// first layer that names one is used as the base; a later layer naming a different profile
    /// is an error.
    pub profile: Option<String>,
    /// Only in a user agent profile (`$XDG_CONFIG_HOME/vetto/profiles/NAME.toml`, chosen with
    /// `vetto run --agent NAME`): the built-in agent profile it builds on (`claude`, `codex`,
    /// `aider`, `gemini`, `opencode`).
    pub extends: Option<String>,
    /// Filesystem access: the project, extra roots, protected paths.
    pub filesystem: Option<FilesystemSection>,
    /// Secret paths masked inside the sandbox.
    pub secrets: Option<SecretsSection>,
    /// Network mode and allowlist.
    pub network: Option<NetworkSection>,
    /// The environment allowlist.
    pub environment: Option<EnvironmentSection>,
    /// Resource limits.
    pub limits: Option<LimitsSection>,
    /// What happens to requests that would need a human's answer.
    pub approvals: Option<ApprovalsSection>,
    /// Where the audit trail is exported (besides the store, which is always written).
    pub audit: Option<AuditSection>,
    /// Which sandbox tier the command needs.
    pub sandbox: Option<SandboxSection>,
}

/// A Linux sandbox tier, ordered from the weaker: `fs-only` < `full`.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum Tier {
    /// Landlock, seccomp, no_new_privs, no capabilities, no sockets but the broker's; no
    /// namespaces (where user namespaces cannot be created).
    FsOnly,
    /// User, mount, PID, network, IPC and UTS namespaces, masks, Landlock and seccomp.
    Full,
}

impl fmt::Display for Tier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Tier::FsOnly => "fs-only",
            Tier::Full => "full",
        })
    }
}

/// `[sandbox]`
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SandboxSection {
    /// The weakest tier the command may run in (`fs-only`, the default, or `full`): where only
    /// a weaker one can be established, the command does not run.
    pub require: Option<Tier>,
}

/// How much the sandbox may do to the project tree (side-effect levels READ / WRITE /
/// DESTRUCTIVE mapped onto Landlock rights).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum ProjectAccess {
    /// Read and execute only.
    Read,
    /// Everything, inside the sandbox, on an overlay of the project: the writes land in a
    /// change set (`vetto changes`) and reach the project only when a person applies them.
    /// Narrower than `write-no-delete` for the host: nothing reaches the project by itself.
    Review,
    /// Create and modify, but not delete or rename (except under `scratch`).
    WriteNoDelete,
    /// Everything, deletion included.
    Write,
}

impl fmt::Display for ProjectAccess {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ProjectAccess::Read => "read",
            ProjectAccess::Review => "review",
            ProjectAccess::WriteNoDelete => "write-no-delete",
            ProjectAccess::Write => "write",
        })
    }
}

/// What happens to a protected path the sandbox created (it was absent at start, so no
/// read-only bind could cover it; host tools load such files: `.mcp.json`, `.vscode/tasks.json`).
/// Ordered from the narrowest: `remove` is stricter than `warn`.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum HandoffAction {
    /// Reported on stderr at the end of the session, and removed.
    Remove,
    /// Reported on stderr at the end of the session, and left in place.
    Warn,
}

impl fmt::Display for HandoffAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            HandoffAction::Remove => "remove",
            HandoffAction::Warn => "warn",
        })
    }
}

/// `[filesystem]`
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FilesystemSection {
    /// Access to the project tree: `read`, `review`, `write` or `write-no-delete`.
    pub project: Option<ProjectAccess>,
    /// Project-relative directories that stay fully writable under `write-no-delete`.
    pub scratch: Option<Vec<String>>,
    /// Extra read-only roots (absolute, `~/...`, or project-relative).
    pub read: Option<Vec<String>>,
    /// Extra read-write roots.
    pub write: Option<Vec<String>>,
    /// Paths that stay read-only even where the sandbox could write: project-relative, or
    /// `~/...` inside a writable root or state path (an agent's own settings).
    pub protected: Option<Vec<String>>,
    /// A tool's own state under HOME, read-write: a directory (written with a trailing `/`,
    /// `~/.claude/`) is created by `vetto run` when missing; a file (`~/.claude.json`) is
    /// bound when present (else the sandbox's private HOME holds it for the session).
    pub state: Option<Vec<String>>,
    /// Toolchain package caches made writable by name (`cargo`, `npm`, `pip`, `go`, `maven`,
    /// `gradle`): exactly their cache directories (`~/.cargo/registry/`, not
    /// `~/.cargo/credentials.toml` nor `~/.cargo/bin`), as state paths.
    pub caches: Option<Vec<String>>,
    /// What to do with a protected path that was absent at start and that the sandbox created:
    /// `warn` (default) or `remove`.
    pub handoff: Option<HandoffAction>,
}

/// `[secrets]`
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SecretsSection {
    /// Keep the built-in secret list (`true`, the default) or replace it by this file's lists.
    pub extend: Option<bool>,
    /// Secret files: `/dev/null` is bound over each.
    pub files: Option<Vec<String>>,
    /// Secret directories: an empty mode-000 tmpfs is mounted over each.
    pub dirs: Option<Vec<String>>,
    /// Name globs (`*.pem`) matched anywhere in the project, or path globs with the glob in the last component
    /// (`~/.config/tool/*.token`).
    pub globs: Option<Vec<String>>,
}

/// Network modes, from narrowest to widest.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum NetworkMode {
    /// No network at all: a private network namespace with only `lo`.
    Off,
    /// Allowlisted names through the broker, never asks, no IP literals, no port 80.
    Strict,
    /// Allowlisted names through the broker.
    Allowlist,
}

impl fmt::Display for NetworkMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            NetworkMode::Off => "off",
            NetworkMode::Strict => "strict",
            NetworkMode::Allowlist => "allowlist",
        })
    }
}

/// A host loopback port opened to the sandbox: `5432` or `"127.0.0.1:8080"`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum HostPort {
    /// A port on the host's 127.0.0.1.
    Port(u16),
    /// `ADDR:PORT` on the host's loopback.
    Addr(String),
}

impl fmt::Display for HostPort {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HostPort::Port(p) => write!(f, "{p}"),
            HostPort::Addr(a) => f.write_str(a),
        }
    }
}

/// `[network]`
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NetworkSection {
    /// `off` (default), `allowlist` or `strict`.
    pub mode: Option<NetworkMode>,
    /// Allowed destinations: `host`, `host:port`, `*.suffix`.
    pub allow: Option<Vec<String>>,
    /// Host loopback ports reachable from the sandbox's `localhost`.
    pub host_ports: Option<Vec<HostPort>>,
    /// Sandbox ports published on the host's loopback.
    pub publish: Option<Vec<u16>>,
    /// Address ranges (CIDR) that may be dialled although private or reserved.
    pub allow_cidrs: Option<Vec<String>>,
    /// Destinations always refused, before anything else (`host`, `*.suffix`, each on every
    /// port; `host:port` on that port): no allow entry, grant or answer reopens them.
    pub deny: Option<Vec<String>>,
    /// DNS server the broker asks (`"127.0.0.1:5353"`); default: the system resolver.
    pub resolver: Option<String>,
    /// New connections per destination (host:port) per minute (default 120).
    pub connects_per_minute: Option<u32>,
    /// Concurrent connections through the broker (default 1024).
    pub max_connections: Option<u32>,
}

/// `[environment]`
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EnvironmentSection {
    /// Exact variable names passed from the caller's environment.
    pub pass_through: Option<Vec<String>>,
    /// Variables set to a fixed value inside the sandbox.
    pub set: Option<BTreeMap<String, String>>,
}

/// `[limits]`
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LimitsSection {
    /// Wall-clock limit for the whole session: `"90s"`, `"30m"`, `"2h"`.
    pub wall_clock: Option<String>,
    /// Maximum number of processes (RLIMIT_NPROC, or pids.max with cgroups).
    pub processes: Option<u64>,
    /// Memory limit: `"512M"`, `"4G"` (RLIMIT_AS, or memory.max with cgroups).
    pub memory: Option<String>,
    /// Maximum open files per process (RLIMIT_NOFILE).
    pub open_files: Option<u64>,
    /// Allow core dumps (default `false`: RLIMIT_CORE = 0).
    pub core_dumps: Option<bool>,
}

/// What happens to a request that would ask a human.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum AskMode {
    /// Unattended: anything that would ask is denied.
    Deny,
    /// Interactive: ask the operator.
    Ask,
}

/// `[approvals]`
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ApprovalsSection {
    /// `ask` (interactive) or `deny` (unattended, e.g. CI).
    pub mode: Option<AskMode>,
    /// How long a connection waits for an answer before it is refused: `"60s"` (default),
    /// `"5m"`; at most one hour.
    pub timeout: Option<String>,
}

/// `[audit]`: exporters. The host writes or connects there, outside the sandbox, so a project
/// policy that sets or changes either needs `vetto trust` like any widening.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AuditSection {
    /// Append every event as JSON lines to this file (absolute path, `~/` allowed), outside
    /// everything the sandbox can read or write.
    pub jsonl: Option<String>,
    /// Send every event to this OpenTelemetry collector (OTLP/HTTP logs, `http://` URL).
    pub otlp: Option<String>,
}

impl PolicyFile {
    /// Parse one policy layer. `origin` names it in error messages (a file path or
    /// `built-in profile "default"`).
    pub fn parse(text: &str, origin: &str) -> Result<Self, PolicyError> {
        toml::from_str::<PolicyFile>(text).map_err(|e| PolicyError::Parse {
            origin: origin.to_string(),
            message: describe_toml_error(text, &e),
        })
    }

    /// Read and parse a policy file from disk.
    pub fn load(path: &Path) -> Result<Self, PolicyError> {
        let text = std::fs::read_to_string(path).map_err(|source| PolicyError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Self::parse(&text, &path.display().to_string())
    }
}

/// Render a TOML error as `line L, column C: message`, with the offending key when serde
/// names one.
fn describe_toml_error(text: &str, e: &toml::de::Error) -> String {
    let msg = e.message().trim().to_string();
    match e.span() {
        Some(span) => {
            let (line, col) = line_col(text, span.start);
            let snippet = text.get(span.clone()).unwrap_or("").trim();
            if snippet.is_empty() || snippet.contains('\n') {
                format!("line {line}, column {col}: {msg}")
            } else {
                format!("line {line}, column {col}: {msg} (at `{snippet}`)")
            }
        }
        None => msg,
    }
}

fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let upto = text.get(..offset).unwrap_or(text);
    let line = upto.matches('\n').count() + 1;
    let col = upto.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, col)
}

/// Expand `~` and make a policy path absolute against `base` (the project for
/// project-relative paths). Refuses `..` components: a policy path says where it is, it does
/// not climb.
pub fn expand_path(raw: &str, home: &Path, base: &Path) -> Result<PathBuf, PolicyError> {
    if raw.is_empty() {
        return Err(PolicyError::BadPath {
            path: raw.to_string(),
            reason: "empty path".into(),
        });
    }
    if raw.contains('\0') {
        return Err(PolicyError::BadPath {
            path: raw.escape_debug().to_string(),
            reason: "contains a NUL byte".into(),
        });
    }
    let p = if raw == "~" {
        home.to_path_buf()
    } else if let Some(rest) = raw.strip_prefix("~/") {
        home.join(rest)
    } else if raw.starts_with('~') {
        return Err(PolicyError::BadPath {
            path: raw.to_string(),
            reason: "only `~/` (the caller's own HOME) is supported, not `~user`".into(),
        });
    } else if raw.starts_with('/') {
        PathBuf::from(raw)
    } else {
        base.join(raw)
    };
    if p.components()
        .any(|c| matches!(c, std::path::Component::ParentDir))
    {
        return Err(PolicyError::BadPath {
            path: raw.to_string(),
            reason: "`..` is not allowed in policy paths".into(),
        });
    }
    Ok(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn misspelt_key_names_line_column_and_key() {
        let text = "[environment]\npass_thru = [\"FOO\"]\n";
        let err = PolicyFile::parse(text, "p.toml").expect_err("must fail");
        let s = err.to_string();
        assert!(
            s.starts_with("p.toml: line 2, column 1: unknown field `pass_thru`"),
            "{s}"
        );
        assert!(s.contains("expected `pass_through` or `set`"), "{s}");
    }

    #[test]
    fn unknown_table_is_an_error() {
        let err = PolicyFile::parse("[filesystm]\n", "p.toml").expect_err("must fail");
        assert!(
            err.to_string().contains("unknown field `filesystm`"),
            "{err}"
        );
        assert!(err.to_string().contains("line 1, column 2"), "{err}");
    }

    #[test]
    fn wrong_type_is_an_error() {
        let err = PolicyFile::parse("[limits]\nprocesses = \"many\"\n", "p.toml").expect_err("x");
        let s = err.to_string();
        assert!(
            s.starts_with("p.toml: line 2, column 13: invalid type: string \"many\", expected u64"),
            "{s}"
        );
    }

    #[test]
    fn bad_enum_value_is_an_error() {
        let err = PolicyFile::parse("[filesystem]\nproject = \"rw\"\n", "p.toml").expect_err("x");
        let s = err.to_string();
        assert!(s.contains("line 2, column 11"), "{s}");
        assert!(
            s.contains("unknown variant `rw`, expected one of `read`, `review`, `write-no-delete`, `write`"),
            "{s}"
        );
    }

    #[test]
    fn full_file_parses() {
        let text = r#"
profile = "default"
[filesystem]
project = "write-no-delete"
scratch = ["target"]
read = ["/opt/data"]
write = ["~/scratch"]
protected = [".git/hooks"]
[secrets]
extend = true
files = ["config/master.key"]
dirs = ["~/.password-store"]
globs = ["*.pem"]
[network]
mode = "allowlist"
allow = ["crates.io", "*.npmjs.org:443"]
host_ports = [5432, "127.0.0.1:8080"]
publish = [3000]
allow_cidrs = ["10.1.0.0/16"]
[environment]
pass_through = ["OPENAI_API_KEY"]
set = { FOO = "bar" }
[limits]
wall_clock = "30m"
processes = 512
memory = "4G"
open_files = 1024
core_dumps = false
[approvals]
mode = "deny"
"#;
        let p = PolicyFile::parse(text, "p.toml").expect("parses");
        assert_eq!(
            p.network.as_ref().and_then(|n| n.host_ports.clone()),
            Some(vec![
                HostPort::Port(5432),
                HostPort::Addr("127.0.0.1:8080".into())
            ])
        );
        assert_eq!(
            p.filesystem.and_then(|f| f.project),
            Some(ProjectAccess::WriteNoDelete)
        );
    }

    #[test]
    fn expand_path_rules() {
        let home = Path::new("/home/u");
        let proj = Path::new("/work/p");
        assert_eq!(
            expand_path("~/.ssh", home, proj).ok(),
            Some(PathBuf::from("/home/u/.ssh"))
        );
        assert_eq!(
            expand_path("docs", home, proj).ok(),
            Some(PathBuf::from("/work/p/docs"))
        );
        assert_eq!(
            expand_path("/etc", home, proj).ok(),
            Some(PathBuf::from("/etc"))
        );
        let e = expand_path("../x", home, proj).expect_err("dotdot");
        assert_eq!(
            e.to_string(),
            "bad path `../x`: `..` is not allowed in policy paths"
        );
        assert!(expand_path("~root/x", home, proj).is_err());
        assert!(expand_path("", home, proj).is_err());
    }
}
