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

/// The text of a built-in agent profile.
pub fn agent_text(name: &str) -> Option<&'static str> {
    AGENTS.iter().find(|(n, _)| *n == name).map(|(_, t)| *t)
}

/// Parse a built-in agent profile.
pub fn load_agent(name: &str) -> Result<PolicyFile, PolicyError> {
    let t = agent_text(name).ok_or_else(|| PolicyError::UnknownAgent(name.to_string()))?;
    PolicyFile::parse(t, &format!("built-in agent profile \"{name}\""))
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
    let t = text(name).ok_or_else(|| PolicyError::UnknownProfile(name.to_string()))?;
    PolicyFile::parse(t, &format!("built-in profile \"{name}\""))
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_builtin_profile_parses() {
        for (name, _) in super::PROFILES {
            super::load(name).expect("built-in profile parses");
        }
        for (name, _) in super::AGENTS {
            let a = super::load_agent(name).expect("built-in agent profile parses");
            assert!(a.profile.is_none() && a.extends.is_none(), "{name}");
        }
    }

    #[test]
    fn agents_are_recognised_by_the_commands_file_name() {
        assert_eq!(super::recognise("claude"), Some("claude"));
        assert_eq!(super::recognise("/usr/local/bin/codex"), Some("codex"));
        assert_eq!(super::recognise("claude-wrapper"), None);
        assert_eq!(super::recognise("bash"), None);
    }
}
