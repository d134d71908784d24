//! Toolchain presets: the package-cache directories each tool writes (`[filesystem] caches`,
//! `--cache NAME`) and the registry hosts it fetches from (`network.allow = ["@NAME"]`).
//! Exactly the caches: `~/.cargo/registry` and `~/.cargo/git`, never `~/.cargo/credentials*`
//! (masked) nor `~/.cargo/bin` (what the next shell runs); what inside a cache holds programs
//! run as they are (`~/.npm/_npx`) stays read-only, and Gradle's wrapper distributions are
//! left out.
//!
//! A writable cache is still a trust handoff: the host's own builds use what the session
//! wrote there (cargo compiles the sources in `~/.cargo/registry/src`, Go links the objects in
//! `~/.cache/go-build`). The presets are opt-in for that reason (docs/policy.md).

use crate::error::PolicyError;

/// One tool's preset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Preset {
    /// The name (`cargo`).
    pub name: &'static str,
    /// Its cache directories, as state paths (trailing `/`: created when missing).
    pub dirs: &'static [&'static str],
    /// Lock and index files it keeps beside them (cargo's `.package-cache`), as state paths:
    /// `vetto run` creates them empty when missing (the directory holding them stays
    /// read-only).
    pub files: &'static [&'static str],
    /// What inside them holds programs the host runs as they are, kept read-only when present
    /// (and reported at the end when the session creates it): `protected` paths.
    pub protected: &'static [&'static str],
    /// The registry hosts it fetches from (port 443).
    pub hosts: &'static [&'static str],
}

/// Every preset.
pub const PRESETS: &[Preset] = &[
    Preset {
        name: "cargo",
        dirs: &["~/.cargo/registry/", "~/.cargo/git/"],
        files: &[
            "~/.cargo/.package-cache",
            "~/.cargo/.package-cache-mutate",
            "~/.cargo/.global-cache",
        ],
        protected: &[],
        hosts: &["crates.io", "index.crates.io", "static.crates.io"],
    },
    Preset {
        name: "npm",
        dirs: &["~/.npm/"],
        files: &[],
        protected: &["~/.npm/_npx"],
        hosts: &["registry.npmjs.org"],
    },
    Preset {
        name: "pip",
        dirs: &["~/.cache/pip/"],
        files: &[],
        protected: &[],
        hosts: &["pypi.org", "files.pythonhosted.org"],
    },
    Preset {
        name: "go",
        dirs: &["~/go/pkg/mod/", "~/.cache/go-build/"],
        files: &[],
        protected: &[],
        hosts: &["proxy.golang.org", "sum.golang.org"],
    },
    Preset {
        name: "maven",
        dirs: &["~/.m2/repository/"],
        files: &[],
        protected: &[],
        hosts: &["repo.maven.apache.org", "repo1.maven.org"],
    },
    Preset {
        name: "gradle",
        // Not ~/.gradle/wrapper: the Gradle distributions `./gradlew` runs.
        dirs: &["~/.gradle/caches/"],
        files: &[],
        protected: &[],
        hosts: &[
            "services.gradle.org",
            "downloads.gradle.org",
            "plugins.gradle.org",
            "plugins-artifacts.gradle.org",
            "repo.maven.apache.org",
        ],
    },
];

/// The preset `name`, or an error naming `key`.
pub fn get(key: &str, name: &str) -> Result<&'static Preset, PolicyError> {
    PRESETS
        .iter()
        .find(|p| p.name == name)
        .ok_or_else(|| PolicyError::UnknownPreset {
            key: key.into(),
            name: name.into(),
        })
}

/// Whether `state` (a state path) is a preset's file, which `vetto run` may create empty.
pub fn is_preset_file(state: &str) -> bool {
    PRESETS.iter().any(|p| p.files.contains(&state))
}

/// A `network.allow` entry with presets expanded: `@cargo` is cargo's registry hosts; any
/// other entry is itself.
pub fn expand_allow(entry: &str) -> Result<Vec<String>, PolicyError> {
    match entry.strip_prefix('@') {
        Some(name) => Ok(get("network.allow", name)?
            .hosts
            .iter()
            .map(|h| h.to_string())
            .collect()),
        None => Ok(vec![entry.to_string()]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_name_only_caches_and_registries() {
        for p in PRESETS {
            for f in p.files {
                assert!(f.starts_with("~/") && !f.ends_with('/'), "{f}");
            }
            for d in p.dirs {
                assert!(d.starts_with("~/") && d.ends_with('/'), "{d}");
                for bad in [
                    "credentials",
                    "/bin/",
                    ".npmrc",
                    "settings.xml",
                    "gradle.properties",
                ] {
                    assert!(!d.contains(bad), "{d}");
                }
            }
        }
        assert_eq!(
            expand_allow("@cargo").expect("cargo"),
            ["crates.io", "index.crates.io", "static.crates.io"]
        );
        assert_eq!(expand_allow("example.com").expect("plain"), ["example.com"]);
        assert!(expand_allow("@nope").is_err());
    }
}
