//! Host facts: the inputs of the translation that come from the machine, gathered once so
//! the translation itself stays a pure function (and golden tests can feed fixed facts).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::error::TranslateError;

/// Everything about the host the translation depends on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HostFacts {
    /// The caller's uid.
    pub uid: u32,
    /// The caller's gid.
    pub gid: u32,
    /// The caller's user name (for `USER`).
    pub user: String,
    /// The caller's HOME (canonical).
    pub home: PathBuf,
    /// The project directory (canonical).
    pub project: PathBuf,
    /// Working directory inside the sandbox (canonical, inside the project).
    pub cwd: PathBuf,
    /// The caller's environment.
    pub env: BTreeMap<String, String>,
    /// Landlock ABI version, if Landlock is available.
    pub landlock_abi: Option<u32>,
    /// System directories that exist on the host, and whether each is a symlink (merged /usr).
    pub system_dirs: Vec<SystemDir>,
    /// Optional HOME dotfiles and toolchain homes that exist.
    pub home_dotfiles: Vec<PathBuf>,
    /// Host paths the sandbox must never be able to write (vetto's config and trust store).
    pub host_private: Vec<PathBuf>,
}

/// A top-level system directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SystemDir {
    /// `/usr`, `/bin`, ...
    pub path: PathBuf,
    /// `Some("usr/bin")` when it is a symlink on the host (recreated in the rootfs).
    pub symlink: Option<String>,
}

/// System directories bound read-only when they exist.
pub const SYSTEM_DIRS: &[&str] = &[
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt",
];

/// Files and directories under HOME that are bound read-only when they exist: commit identity
/// and toolchain homes. Secrets inside them stay masked.
pub const HOME_DOTFILES: &[&str] = &[
    ".gitconfig",
    ".config/git",
    ".cargo",
    ".rustup",
    ".nvm",
    ".pyenv",
    ".local/bin",
    "go",
];

fn canonical_dir(p: &Path, what: &str) -> Result<PathBuf, TranslateError> {
    let c = p.canonicalize().map_err(|e| TranslateError::Path {
        key: what.into(),
        path: p.display().to_string(),
        reason: e.to_string(),
    })?;
    if !c.is_dir() {
        return Err(TranslateError::Path {
            key: what.into(),
            path: p.display().to_string(),
            reason: "not a directory".into(),
        });
    }
    Ok(c)
}

impl HostFacts {
    /// Gather the facts for a project (default: the current directory). Landlock support is
    /// filled in by the caller, which owns the kernel probes.
    pub fn gather(project: Option<&Path>) -> Result<Self, TranslateError> {
        let cwd = std::env::current_dir().map_err(|e| TranslateError::Path {
            key: "cwd".into(),
            path: ".".into(),
            reason: e.to_string(),
        })?;
        let project = canonical_dir(project.unwrap_or(&cwd), "project")?;
        let cwd = cwd.canonicalize().unwrap_or_else(|_| project.clone());
        let cwd = if cwd.starts_with(&project) {
            cwd
        } else {
            project.clone()
        };
        // SAFETY: getuid/getgid cannot fail and touch no memory.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        let env: BTreeMap<String, String> = std::env::vars_os()
            .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
            .collect();
        let home_raw = env.get("HOME").cloned().unwrap_or_else(|| "/".into());
        if !home_raw.starts_with('/') {
            return Err(TranslateError::Path {
                key: "HOME".into(),
                path: home_raw,
                reason: "HOME must be an absolute path".into(),
            });
        }
        let home = Path::new(&home_raw)
            .canonicalize()
            .unwrap_or_else(|_| PathBuf::from(&home_raw));
        let user = env
            .get("USER")
            .or_else(|| env.get("LOGNAME"))
            .cloned()
            .unwrap_or_else(|| {
                if uid == 0 {
                    "root".into()
                } else {
                    format!("u{uid}")
                }
            });
        let system_dirs = SYSTEM_DIRS
            .iter()
            .filter_map(|d| {
                let p = Path::new(d);
                let meta = p.symlink_metadata().ok()?;
                let symlink = if meta.file_type().is_symlink() {
                    Some(std::fs::read_link(p).ok()?.to_string_lossy().into_owned())
                } else if meta.is_dir() {
                    None
                } else {
                    return None;
                };
                Some(SystemDir {
                    path: p.to_path_buf(),
                    symlink,
                })
            })
            .collect();
        let home_dotfiles = HOME_DOTFILES
            .iter()
            .map(|d| home.join(d))
            .filter(|p| p.exists())
            .collect();
        Ok(HostFacts {
            uid,
            gid,
            user,
            home,
            project,
            cwd,
            env,
            landlock_abi: None,
            system_dirs,
            home_dotfiles,
            host_private: vec![],
        })
    }
}
