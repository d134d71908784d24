//! Built-in profiles, written in the same TOML a user writes (see `bundle/profiles/`).

use crate::error::PolicyError;
use crate::policy::PolicyFile;

/// Names and texts of the built-in profiles.
pub const PROFILES: &[(&str, &str)] = &[
    ("default", include_str!("../profiles/default.toml")),
    ("read-only", include_str!("../profiles/read-only.toml")),
    ("ci", include_str!("../profiles/ci.toml")),
];

/// Names and texts of the built-in agent profiles: layered over the base profile by
/// `vetto run --agent NAME`, or when the command's name is one of them (`vetto run claude`).
pub const AGENTS: &[(&str, &str)] = &[
    ("claude", include_str!("../profiles/agents/claude.toml")),
    ("codex", include_str!("../profiles/agents/codex.toml")),
    ("aider", include_str!("../profiles/agents/aider.toml")),
    ("gemini", include_str!("../profiles/agents/gemini.toml")),
    ("opencode", include_str!("../profiles/agents/opencode.toml")),
];

/// The built-in profiles and agent profiles as JSON (`build.rs` makes it from their TOML):
/// what a start parses.
const JSON: &[(&str, &str)] = &[
    (
        "default",
        include_str!(concat!(env!("OUT_DIR"), "/default.json")),
    ),
    (
        "read-only",
        include_str!(concat!(env!("OUT_DIR"), "/read-only.json")),
    ),
    ("ci", include_str!(concat!(env!("OUT_DIR"), "/ci.json"))),
    (
        "agents-claude",
        include_str!(concat!(env!("OUT_DIR"), "/agents-claude.json")),
    ),
    (
        "agents-codex",
        include_str!(concat!(env!("OUT_DIR"), "/agents-codex.json")),
    ),
    (
        "agents-aider",
        include_str!(concat!(env!("OUT_DIR"), "/agents-aider.json")),
    ),
    (
        "agents-gemini",
        include_str!(concat!(env!("OUT_DIR"), "/agents-gemini.json")),
    ),
    (
        "agents-opencode",
        include_str!(concat!(env!("OUT_DIR"), "/agents-opencode.json")),
    ),
];

/// Parse the JSON form of built-in profile `key` (`default`, `agents-claude`), which exists
/// for every name in [`PROFILES`] and [`AGENTS`] (`tests`).
fn parse_json(key: &str, origin: &str) -> Result<PolicyFile, PolicyError> {
    let parse_error = |message: String| PolicyError::Parse {
        origin: origin.to_string(),
        message,
    };
    let text = JSON
        .iter()
        .find(|(k, _)| *k == key)
        .map(|(_, t)| *t)
        .ok_or_else(|| parse_error("no JSON form was built for it".into()))?;
    serde_json::from_str(text).map_err(|e| parse_error(e.to_string()))
}

/// The text of a built-in agent profile.
pub fn agent_text(name: &str) -> Option<&'static str> {
    AGENTS.iter().find(|(n, _)| *n == name).map(|(_, t)| *t)
}

/// Parse a built-in agent profile.
pub fn load_agent(name: &str) -> Result<PolicyFile, PolicyError> {
    agent_text(name).ok_or_else(|| PolicyError::UnknownAgent(name.to_string()))?;
    parse_json(
        &format!("agents-{name}"),
        &format!("built-in agent profile \"{name}\""),
    )
}

/// The built-in agent a command is, by its file name (`claude`, `/usr/bin/codex`).
pub fn recognise(command: &str) -> Option<&'static str> {
    let base = std::path::Path::new(command).file_name()?.to_str()?;
    AGENTS.iter().map(|(n, _)| *n).find(|n| *n == base)
}

/// The text of a built-in profile.
pub fn text(name: &str) -> Option<&'static str> {
    PROFILES.iter().find(|(n, _)| *n == name).map(|(_, t)| *t)
}

/// Parse a built-in profile.
pub fn load(name: &str) -> Result<PolicyFile, PolicyError> {
    text(name).ok_or_else(|| PolicyError::UnknownProfile(name.to_string()))?;
    parse_json(name, &format!("built-in profile \"{name}\""))
}

#[cfg(test)]
mod tests {
    use crate::policy::PolicyFile;

    /// Every built-in profile parses from its TOML, and what a start loads (its JSON form,
    /// made by build.rs) is exactly that; no JSON form is left without its TOML.
    #[test]
    fn every_builtin_profile_parses_and_its_json_form_is_the_same() {
        for (name, text) in super::PROFILES {
            let toml = PolicyFile::parse(text, name).expect("built-in profile parses");
            assert_eq!(super::load(name).expect("JSON form"), toml, "{name}");
        }
        for (name, text) in super::AGENTS {
            let toml = PolicyFile::parse(text, name).expect("built-in agent profile parses");
            let a = super::load_agent(name).expect("JSON form");
            assert_eq!(a, toml, "{name}");
            assert!(a.profile.is_none() && a.extends.is_none(), "{name}");
        }
        assert_eq!(
            super::JSON.len(),
            super::PROFILES.len() + super::AGENTS.len()
        );
    }

    #[test]
    fn agents_are_recognised_by_the_commands_file_name() {
        assert_eq!(super::recognise("claude"), Some("claude"));
        assert_eq!(super::recognise("/usr/local/bin/codex"), Some("codex"));
        assert_eq!(super::recognise("claude-wrapper"), None);
        assert_eq!(super::recognise("bash"), None);
    }
}
