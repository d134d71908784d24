//! Built-in profiles, written in the same TOML a user writes (see `bundle/profiles/`).

use crate::error::PolicyError;
use crate::policy::PolicyFile;

/// Names and texts of the built-in profiles.
pub const PROFILES: &[(&str, &str)] = &[
    ("default", include_str!("../profiles/default.toml")),
    ("read-only", include_str!("../profiles/read-only.toml")),
    ("ci", include_str!("../profiles/ci.toml")),
];

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
    }
}
