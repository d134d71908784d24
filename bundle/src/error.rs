//! Errors of the policy model and the translation, one enum per concern, joined here.

use std::path::PathBuf;

/// Reading, parsing or resolving a policy.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    /// The file could not be read.
    #[error("cannot read policy file {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// TOML syntax, an unknown key, a wrong type or value.
    #[error("{origin}: {message}")]
    Parse {
        /// The file path or built-in profile name.
        origin: String,
        /// Line, column and what is wrong.
        message: String,
    },
    /// No such built-in profile.
    #[error("unknown profile `{0}` (built-in profiles: default, read-only, ci)")]
    UnknownProfile(String),
    /// No such agent profile (built-in or the user's).
    #[error("unknown agent profile `{0}` (built-in: claude, codex, aider, gemini, opencode; yours: $XDG_CONFIG_HOME/vetto/profiles/NAME.toml)")]
    UnknownAgent(String),
    /// An unknown toolchain cache or network preset.
    #[error("{key}: unknown preset `{name}` (cargo, npm, pip, go, maven, gradle)")]
    UnknownPreset {
        /// The key.
        key: String,
        /// The name.
        name: String,
    },
    /// Two layers name different base profiles.
    #[error("{origin} names profile `{named}` but the base profile is already `{base}`")]
    ProfileConflict {
        /// The layer.
        origin: String,
        /// What it names.
        named: String,
        /// What was chosen before.
        base: String,
    },
    /// A path in the policy is malformed.
    #[error("bad path `{path}`: {reason}")]
    BadPath {
        /// The path as written.
        path: String,
        /// Why.
        reason: String,
    },
    /// A value is malformed (a duration, a size, a port).
    #[error("bad value for `{key}`: `{value}`: {reason}")]
    BadValue {
        /// The key.
        key: String,
        /// The value as written.
        value: String,
        /// Why.
        reason: String,
    },
    /// An untrusted policy file tries to widen the sandbox.
    #[error(
        "{} lies inside a path the sandbox can write and is not trusted, so it may only narrow the \
         policy, but it widens: {}. Review it, then run `vetto trust {}` to record its SHA-256 \
         outside the project",
        path.display(), widenings.join("; "), path.display()
    )]
    UntrustedWidening {
        /// The policy file.
        path: PathBuf,
        /// Each widening, described.
        widenings: Vec<String>,
    },
    /// The trust store could not be read or written.
    #[error("trust store {}: {reason}", path.display())]
    TrustStore {
        /// The store.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// The trust store could not be read or written: an I/O error.
    #[error("trust store {}", path.display())]
    TrustStoreIo {
        /// The store.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The trust store is not valid JSON (or could not be serialized).
    #[error("trust store {}", path.display())]
    TrustStoreFormat {
        /// The store.
        path: PathBuf,
        /// Why.
        #[source]
        source: serde_json::Error,
    },
}

/// Turning a resolved policy and host facts into a bundle.
#[derive(Debug, thiserror::Error)]
pub enum TranslateError {
    /// A path in the policy is unusable on this host.
    #[error("{key}: `{path}`: {reason}")]
    Path {
        /// Which policy key.
        key: String,
        /// The path.
        path: String,
        /// Why.
        reason: String,
    },
    /// A path could not be resolved or read on the host.
    #[error("{key}: `{path}`{}", if what.is_empty() { String::new() } else { format!(": {what}") })]
    Io {
        /// Which policy key (or host fact).
        key: String,
        /// The path.
        path: String,
        /// What was being done, if more than the key says.
        what: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The policy itself is invalid.
    #[error(transparent)]
    Policy(#[from] PolicyError),
    /// The secret scan could not finish: fail closed.
    #[error("secret scan of {} failed: {reason}", root.display())]
    SecretScan {
        /// Where.
        root: PathBuf,
        /// Why.
        reason: String,
    },
    /// A feature the policy asks for is not built yet.
    #[error("{0} is not supported yet")]
    Unsupported(String),
    /// The translated spec does not parse into `oci_spec`'s types.
    #[error("reading the OCI spec")]
    Oci(#[source] serde_json::Error),
}
