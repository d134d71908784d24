//! Finding the secret paths that exist on this host, resolved through symlinks.
//!
//! Landlock cannot subtract `$PROJECT/.env` from an allowed project root, so each secret that
//! exists is masked by a bind overlay on its *resolved* path: a `.env` that is a symlink to
//! `~/.ssh/id_ed25519` masks the key itself, wherever it is reached from.

use std::path::{Path, PathBuf};

use globset::{Glob, GlobMatcher};
use serde::Serialize;

use crate::error::TranslateError;
use crate::resolve::{Source, Sourced};

/// The built-in secret list.
pub struct BuiltinSecrets {
    /// File patterns: a bare name (or name glob) matches anywhere in the project; `~/…` and
    /// `/…` are anchored, with globs allowed in the last component.
    pub files: &'static [&'static str],
    /// Directory patterns.
    pub dirs: &'static [&'static str],
}

/// What vetto masks unless a policy says `extend = false`.
pub const BUILTIN_SECRETS: BuiltinSecrets = BuiltinSecrets {
    files: &[
        ".env",
        ".env.*",
        "~/.docker/config.json",
        "~/.netrc",
        "~/.npmrc",
        "~/.pypirc",
        "~/.git-credentials",
        "~/.cargo/credentials",
        "~/.cargo/credentials.toml",
        "~/.config/hub",
        "/etc/shadow",
        "/etc/gshadow",
        "/etc/ssh/ssh_host_*_key",
    ],
    dirs: &[
        "~/.ssh",
        "~/.aws",
        "~/.gnupg",
        "~/.config/gcloud",
        "~/.azure",
        "~/.kube",
        "~/.config/gh",
        "~/.password-store",
    ],
};

/// Directories not descended into while looking for name patterns in the project: they are
/// large, tool-managed, and a secret planted there by the agent was readable to it anyway.
pub const SCAN_SKIP: &[&str] = &[".git", "node_modules", "target"];

/// How many directory entries the project scan may visit before it fails closed.
pub const SCAN_BUDGET: usize = 200_000;

/// File or directory mask.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum MaskKind {
    /// `/dev/null` bound over it.
    File,
    /// An empty mode-000 tmpfs over it.
    Dir,
}

/// One secret that exists and will be masked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SecretMatch {
    /// The resolved path that is masked.
    pub path: PathBuf,
    /// File or directory.
    pub kind: MaskKind,
    /// The pattern that found it.
    pub pattern: String,
    /// The path it was found at, when that was a symlink.
    pub via: Option<PathBuf>,
    /// Where the pattern came from.
    pub source: Source,
}

/// A file name, compared literally unless it has glob characters (building a glob matcher
/// compiles a regex: ~0.1 ms each, paid on every start).
enum NameMatch {
    Literal(String),
    Glob(GlobMatcher),
}

impl NameMatch {
    fn is_match(&self, name: &std::ffi::OsStr) -> bool {
        match self {
            NameMatch::Literal(l) => name == l.as_str(),
            NameMatch::Glob(g) => g.is_match(name),
        }
    }
}

enum Pattern {
    /// A name (or name glob) matched anywhere in the project.
    Name(NameMatch),
    /// An absolute path whose last component may be a glob.
    Anchored { dir: PathBuf, last: NameMatch },
}

fn compile(raw: &str, home: &Path, project: &Path) -> Result<Pattern, TranslateError> {
    let bad = |reason: String| TranslateError::Path {
        key: "secrets".into(),
        path: raw.into(),
        reason,
    };
    let glob = |s: &str| {
        if !s.contains(['*', '?', '[', '{']) {
            return Ok(NameMatch::Literal(s.to_string()));
        }
        Glob::new(s)
            .map(|g| NameMatch::Glob(g.compile_matcher()))
            .map_err(|e| bad(format!("bad glob: {e}")))
    };
    if !raw.contains('/') && !raw.starts_with('~') {
        return Ok(Pattern::Name(glob(raw)?));
    }
    let abs = crate::policy::expand_path(raw, home, project)?;
    let dir = abs
        .parent()
        .ok_or_else(|| bad("no parent directory".into()))?;
    if dir.to_string_lossy().contains(['*', '?', '[', '{']) {
        return Err(bad(
            "globs are allowed only in the last path component".into()
        ));
    }
    let last = abs
        .file_name()
        .ok_or_else(|| bad("no file name".into()))?
        .to_string_lossy()
        .into_owned();
    Ok(Pattern::Anchored {
        dir: dir.to_path_buf(),
        last: glob(&last)?,
    })
}

/// Find every existing path matched by the secret patterns. `files`, `dirs` and `globs` are
/// matched alike; the kind of mask follows what the resolved path really is.
pub fn scan(
    patterns: &[&Sourced<String>],
    home: &Path,
    project: &Path,
) -> Result<Vec<SecretMatch>, TranslateError> {
    let mut compiled = vec![];
    for p in patterns {
        compiled.push((compile(&p.value, home, project)?, *p));
    }
    let mut found: Vec<SecretMatch> = vec![];
    let mut add = |path: &Path, pat: &Sourced<String>| -> Result<(), TranslateError> {
        if let Some(m) = resolve_match(path, pat)? {
            if !found.iter().any(|f| f.path == m.path) {
                found.push(m);
            }
        }
        Ok(())
    };
    let names: Vec<_> = compiled
        .iter()
        .filter_map(|(c, s)| match c {
            Pattern::Name(g) => Some((g, *s)),
            _ => None,
        })
        .collect();
    for (c, s) in &compiled {
        if let Pattern::Anchored { dir, last } = c {
            if let NameMatch::Literal(name) = last {
                let p = dir.join(name);
                if p.symlink_metadata().is_ok() {
                    add(&p, s)?;
                }
                continue;
            }
            let Ok(rd) = std::fs::read_dir(dir) else {
                continue;
            };
            for e in rd.flatten() {
                if last.is_match(&e.file_name()) {
                    add(&e.path(), s)?;
                }
            }
        }
    }
    if !names.is_empty() {
        let mut budget = SCAN_BUDGET;
        let mut stack = vec![project.to_path_buf()];
        while let Some(dir) = stack.pop() {
            let rd = std::fs::read_dir(&dir).map_err(|e| TranslateError::SecretScan {
                root: dir.clone(),
                reason: e.to_string(),
            })?;
            for e in rd {
                let e = e.map_err(|e| TranslateError::SecretScan {
                    root: dir.clone(),
                    reason: e.to_string(),
                })?;
                budget = budget
                    .checked_sub(1)
                    .ok_or_else(|| TranslateError::SecretScan {
                        root: project.to_path_buf(),
                        reason: format!(
                        "more than {SCAN_BUDGET} entries; name the secrets with anchored paths \
                         (e.g. `config/.env`) or narrow the project"
                    ),
                    })?;
                let name = e.file_name();
                let ft = e.file_type().map_err(|err| TranslateError::SecretScan {
                    root: e.path(),
                    reason: err.to_string(),
                })?;
                if let Some((_, s)) = names.iter().find(|(g, _)| g.is_match(&name)) {
                    add(&e.path(), s)?;
                    if ft.is_dir() {
                        continue;
                    }
                }
                if ft.is_dir() && !SCAN_SKIP.iter().any(|s| name == *s) {
                    stack.push(e.path());
                }
            }
        }
    }
    found.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(found)
}

fn resolve_match(
    path: &Path,
    pat: &Sourced<String>,
) -> Result<Option<SecretMatch>, TranslateError> {
    let is_link = path
        .symlink_metadata()
        .map(|m| m.file_type().is_symlink())
        .unwrap_or(false);
    // A dangling symlink points at nothing to read: it is not masked, and reading it fails.
    let Ok(resolved) = path.canonicalize() else {
        return Ok(None);
    };
    let meta = std::fs::metadata(&resolved).map_err(|e| TranslateError::SecretScan {
        root: resolved.clone(),
        reason: e.to_string(),
    })?;
    let kind = if meta.is_dir() {
        MaskKind::Dir
    } else {
        MaskKind::File
    };
    Ok(Some(SecretMatch {
        via: (is_link || resolved != path).then(|| path.to_path_buf()),
        path: resolved,
        kind,
        pattern: pat.value.clone(),
        source: pat.source.clone(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn src(v: &str) -> Sourced<String> {
        Sourced {
            value: v.into(),
            source: Source::Builtin("t".into()),
        }
    }

    #[test]
    fn finds_nested_env_and_follows_symlinks() {
        let t = tempfile::tempdir().expect("tmp");
        let root = t.path().canonicalize().expect("c");
        let home = root.join("home");
        let proj = root.join("proj");
        std::fs::create_dir_all(home.join(".ssh")).expect("mk");
        std::fs::write(home.join(".ssh/id_ed25519"), "KEY").expect("w");
        std::fs::create_dir_all(proj.join("api")).expect("mk");
        std::fs::create_dir_all(proj.join("node_modules/x")).expect("mk");
        std::fs::write(proj.join("api/.env.local"), "A=1").expect("w");
        std::fs::write(proj.join("node_modules/x/.env"), "skipped").expect("w");
        symlink(home.join(".ssh/id_ed25519"), proj.join(".env")).expect("ln");
        let pats = [src(".env"), src(".env.*"), src("~/.ssh"), src("~/.aws")];
        let refs: Vec<_> = pats.iter().collect();
        let m = scan(&refs, &home, &proj).expect("scan");
        let paths: Vec<_> = m.iter().map(|m| (m.path.clone(), m.kind)).collect();
        assert!(
            paths.contains(&(home.join(".ssh"), MaskKind::Dir)),
            "{paths:?}"
        );
        assert!(
            paths.contains(&(proj.join("api/.env.local"), MaskKind::File)),
            "{paths:?}"
        );
        let key = m
            .iter()
            .find(|m| m.path == home.join(".ssh/id_ed25519"))
            .expect("symlink target masked");
        assert_eq!(key.via.as_deref(), Some(proj.join(".env").as_path()));
        assert!(!paths
            .iter()
            .any(|(p, _)| p.starts_with(proj.join("node_modules"))));
        assert_eq!(m.len(), 3);
    }

    #[test]
    fn glob_in_middle_component_is_refused() {
        let e = compile("~/.config/*/token", Path::new("/h"), Path::new("/p"))
            .err()
            .expect("refused");
        assert_eq!(
            e.to_string(),
            "secrets: `~/.config/*/token`: globs are allowed only in the last path component"
        );
    }

    #[test]
    fn anchored_last_component_glob() {
        let t = tempfile::tempdir().expect("tmp");
        let home = t.path().canonicalize().expect("c");
        std::fs::create_dir_all(home.join(".cargo")).expect("mk");
        std::fs::write(home.join(".cargo/credentials.toml"), "t").expect("w");
        std::fs::write(home.join(".cargo/config.toml"), "t").expect("w");
        let pats = [src("~/.cargo/credentials*")];
        let refs: Vec<_> = pats.iter().collect();
        let m = scan(&refs, &home, &home.join("p")).expect("scan");
        assert_eq!(m.len(), 1);
        assert_eq!(m[0].path, home.join(".cargo/credentials.toml"));
    }
}
