//! Reading the host. [`HostFacts`]: the inputs of `vetto run`'s translation that come from the
//! machine, gathered once so the translation's sections take them as plain data (and golden
//! tests can feed fixed facts). [`canonical_beyond`]: a path judged where it would be, whether
//! or not it exists yet. Then what `vetto-shim`'s hardening reads: bind sources resolved once
//! ([`resolve_once`]), namespace identities, account homes, users' runtime directories.

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
    /// Host directories the sandbox must never reach at all (vetto's audit store): masked
    /// wherever a bind shows them, and no writable root may contain them (a rename of an
    /// ancestor would carry the store away).
    pub host_sealed: Vec<PathBuf>,
    /// Repository metadata in the project (canonical: `.git` entries, the git and common
    /// directories they name), from [`crate::gitmeta::metadata_paths`] over the scan's finds.
    pub git_metadata: Vec<PathBuf>,
    /// Paths a repository's configuration makes git read or run that do not exist yet
    /// (`core.hooksPath`, `include.path`), from [`crate::gitmeta::config_references`].
    pub git_absent: Vec<PathBuf>,
    /// Review mode's overlay layers for the project (`project = "review"`): the change set's
    /// upper and work directories, on the project's file system, outside the sandbox's reach.
    pub review: Option<ReviewLayers>,
}

/// The upper and work directories of a review-mode overlay.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ReviewLayers {
    /// overlayfs' `upperdir`.
    pub upper: PathBuf,
    /// overlayfs' `workdir`.
    pub work: PathBuf,
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

/// The executable `command` names, as `execvp` would find it: a name with a `/` relative to
/// `cwd`, else the first `PATH` entry (relative entries, and the empty one, relative to `cwd`)
/// that holds an executable file of that name.
pub fn resolve_command(command: &str, path: &str, cwd: &Path) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let executable = |p: &Path| {
        p.metadata()
            .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if command.contains('/') {
        let p = cwd.join(command);
        return executable(&p).then_some(p);
    }
    path.split(':')
        .map(|d| cwd.join(d).join(command))
        .find(|p| executable(p))
}

/// Where the command vetto is asked to run (`found`, from [`resolve_command`]) is installed,
/// when the sandbox would not see it (an agent installed with `npm -g` into `~/.npm-global`,
/// with pipx into `~/.local/share/pipx`, a single binary in `~/.local/share/claude`): the
/// directory it is found in (so it runs by its own name: multi-call programs such as rustup's
/// `cargo` go by it) and the installation that resolves to, the Python virtual environment,
/// the npm package or the file itself, all to show read-only. What the sandbox sees already
/// (under a system directory, the project or a HOME dotfile root) is left out, and so is
/// anything that would be HOME, hold HOME, or hold or lie in a built-in secret directory or
/// one of `keep_out` (vetto's configuration and audit store).
pub fn command_install(
    found: &Path,
    home: &Path,
    project: &Path,
    keep_out: &[PathBuf],
) -> Vec<PathBuf> {
    let shown = |p: &Path| {
        SYSTEM_DIRS.iter().any(|d| p.starts_with(d))
            || p.starts_with(project)
            || HOME_DOTFILES.iter().any(|d| p.starts_with(home.join(d)))
    };
    let acceptable = |p: &Path| {
        let secret_dirs = crate::secrets::BUILTIN_SECRETS
            .dirs
            .iter()
            .filter_map(|d| d.strip_prefix("~/").map(|r| home.join(r)));
        !shown(p)
            && !home.starts_with(p)
            && p != Path::new("/")
            && !secret_dirs
                .chain(keep_out.iter().cloned())
                .any(|s| s.starts_with(p) || p.starts_with(&s))
    };
    let mut out: Vec<PathBuf> = vec![];
    if let Some(dir) = found.parent().and_then(|d| d.canonicalize().ok()) {
        if acceptable(&dir) {
            out.push(dir);
        }
    }
    let Ok(target) = found.canonicalize() else {
        return out;
    };
    let root = target
        .ancestors()
        .skip(1)
        .find(|a| a.join("pyvenv.cfg").is_file())
        .map(Path::to_path_buf)
        .or_else(|| {
            // An npm package: the directory beneath node_modules (or its @scope).
            target.ancestors().skip(1).find_map(|a| {
                let parent = a.parent()?;
                let in_modules = parent.file_name()? == "node_modules"
                    || (parent.file_name()?.to_str()?.starts_with('@')
                        && parent.parent()?.file_name()? == "node_modules");
                (in_modules && a.join("package.json").is_file()).then(|| a.to_path_buf())
            })
        })
        .unwrap_or(target);
    if acceptable(&root) && !out.iter().any(|o| root.starts_with(o)) {
        out.push(root);
    }
    out
}

/// The canonical form of an absolute path that may not exist yet: its deepest existing
/// ancestor resolved through symlinks, plus the rest (which, not existing, holds no symlink).
/// `..` is refused; so is a path whose existing part cannot be resolved (fail closed: every
/// comparison of paths the trust rule makes is between canonical paths).
pub fn canonical_beyond(p: &Path) -> Result<PathBuf, std::io::Error> {
    use std::path::Component;
    let invalid = |why: &str| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("{}: {why}", p.display()),
        )
    };
    if !p.is_absolute() {
        return Err(invalid("not an absolute path"));
    }
    if p.components().any(|c| c == Component::ParentDir) {
        return Err(invalid("contains `..`"));
    }
    let mut existing = p.to_path_buf();
    let mut rest: Vec<std::ffi::OsString> = vec![];
    loop {
        match existing.canonicalize() {
            Ok(c) => {
                let mut out = c;
                for r in rest.iter().rev() {
                    out.push(r);
                }
                return Ok(out);
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                // A dangling symlink is not "absent": it would resolve elsewhere once its
                // target appears.
                if existing.symlink_metadata().is_ok() {
                    return Err(e);
                }
                let Some(name) = existing.file_name().map(|n| n.to_os_string()) else {
                    return Err(e);
                };
                rest.push(name);
                if !existing.pop() {
                    return Err(e);
                }
            }
            Err(e) => return Err(e),
        }
    }
}

fn canonical_dir(p: &Path, what: &str) -> Result<PathBuf, TranslateError> {
    let c = p.canonicalize().map_err(|source| TranslateError::Io {
        key: what.into(),
        path: p.display().to_string(),
        what: String::new(),
        source,
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
        let cwd = std::env::current_dir().map_err(|source| TranslateError::Io {
            key: "cwd".into(),
            path: ".".into(),
            what: String::new(),
            source,
        })?;
        let project = canonical_dir(project.unwrap_or(&cwd), "project")?;
        let cwd = cwd.canonicalize().unwrap_or_else(|_| project.clone());
        let cwd = if cwd.starts_with(&project) {
            cwd
        } else {
            project.clone()
        };
        let (uid, gid) = (
            nix::unistd::getuid().as_raw(),
            nix::unistd::getgid().as_raw(),
        );
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
        let home = canonical_beyond(Path::new(&home_raw)).map_err(|source| TranslateError::Io {
            key: "HOME".into(),
            path: home_raw.clone(),
            what: String::new(),
            source,
        })?;
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
            host_sealed: vec![],
            git_metadata: vec![],
            git_absent: vec![],
            review: None,
        })
    }
}

// What `vetto-shim`'s hardening reads of the host ([`crate::container`]), gathered here.

/// A bind source resolved once: its canonical path and the (device, inode, is a directory)
/// of the object that path named when it was opened (`O_PATH | O_NOFOLLOW`) and checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedSource {
    /// Canonical host path.
    pub path: PathBuf,
    /// `st_dev`.
    pub dev: u64,
    /// `st_ino`.
    pub ino: u64,
    /// A directory (else a file).
    pub dir: bool,
}

/// Resolve a path once: canonicalize, open the result without following a final symlink,
/// and confirm through the descriptor that the object opened is at that path (a rename
/// between the two steps is seen). `None`: it does not resolve (or kept changing).
pub fn resolve_once(src: &Path) -> Option<ResolvedSource> {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    use std::os::unix::ffi::OsStrExt;
    let path = src.canonicalize().ok()?;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
    // SAFETY: a valid C string; O_PATH opens nothing for I/O.
    let fd = unsafe {
        libc::open(
            c.as_ptr(),
            libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return None;
    }
    // SAFETY: a descriptor the kernel just returned; nothing else owns it.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let at = std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd())).ok()?;
    if at != path {
        return None;
    }
    // SAFETY: fstat fills a zeroed struct we own; the descriptor is valid.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
        return None;
    }
    Some(ResolvedSource {
        path,
        dev: st.st_dev,
        ino: st.st_ino,
        dir: st.st_mode & libc::S_IFMT == libc::S_IFDIR,
    })
}

/// (device, inode) of a namespace file, to compare namespaces whatever path names them.
pub fn ns_id(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

/// Home directories of the host's accounts (`/etc/passwd`), canonical, for `~/` secret
/// patterns.
pub fn account_homes() -> Vec<PathBuf> {
    std::fs::read_to_string("/etc/passwd")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split(':').nth(5))
        .filter(|h| h.starts_with('/') && *h != "/")
        .filter_map(|h| Path::new(h).canonicalize().ok())
        .collect()
}

/// The users' runtime directories there are now (`/run/user/<uid>`).
pub fn user_runtime_dirs(root: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(root)
        .map(|rd| rd.flatten().map(|e| e.path()).collect())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exe(p: &Path, text: &str) {
        use std::os::unix::fs::PermissionsExt;
        std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        std::fs::write(p, text).expect("w");
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    }

    #[test]
    fn the_commands_installation_is_found_as_execvp_would_and_kept_narrow() {
        let t = tempfile::tempdir().expect("tmp");
        let root = t.path().canonicalize().expect("c");
        let home = root.join("home");
        let proj = root.join("proj");
        std::fs::create_dir_all(home.join(".ssh")).expect("mkdir");
        std::fs::create_dir_all(&proj).expect("mkdir");
        // npm -g into HOME: bin/tool -> ../lib/node_modules/@s/tool/cli.js
        let pkg = home.join(".npm-global/lib/node_modules/@s/tool");
        exe(&pkg.join("cli.js"), "#!/usr/bin/env node\n");
        std::fs::write(pkg.join("package.json"), "{}").expect("w");
        std::fs::create_dir_all(home.join(".npm-global/bin")).expect("mkdir");
        std::os::unix::fs::symlink(
            "../lib/node_modules/@s/tool/cli.js",
            home.join(".npm-global/bin/tool"),
        )
        .expect("ln");
        // pipx: ~/.local/share/pipx/venvs/ai/bin/ai, linked from ~/bin
        let venv = home.join(".local/share/pipx/venvs/ai");
        exe(&venv.join("bin/ai"), "#!/bin/sh\n");
        std::fs::write(venv.join("pyvenv.cfg"), "home = /usr/bin\n").expect("w");
        std::fs::create_dir_all(home.join("bin")).expect("mkdir");
        std::os::unix::fs::symlink(venv.join("bin/ai"), home.join("bin/ai")).expect("ln");
        // the project's own program, and one in ~/.ssh
        exe(&proj.join("bin/tool"), "#!/bin/sh\n");
        exe(&home.join(".ssh/tool2"), "#!/bin/sh\n");

        let path = format!(
            "{}/.npm-global/bin:{}/bin:/usr/bin",
            home.display(),
            home.display()
        );
        let found = resolve_command("tool", &path, &proj).expect("found on PATH");
        assert_eq!(found, home.join(".npm-global/bin/tool"));
        assert_eq!(
            command_install(&found, &home, &proj, &[]),
            [home.join(".npm-global/bin"), pkg.clone()]
        );
        let found = resolve_command("ai", &path, &proj).expect("found");
        assert_eq!(
            command_install(&found, &home, &proj, &[]),
            [home.join("bin"), venv.clone()]
        );
        // A relative PATH entry resolves against the working directory: the project's.
        let found = resolve_command("tool", "bin:/usr/bin", &proj).expect("found");
        assert_eq!(found, proj.join("bin/tool"));
        assert!(command_install(&found, &home, &proj, &[]).is_empty());
        // Never a secret directory, HOME itself, or what vetto keeps out.
        let found =
            resolve_command("tool2", &format!("{}/.ssh", home.display()), &proj).expect("found");
        assert!(command_install(&found, &home, &proj, &[]).is_empty());
        exe(&home.join("tool3"), "#!/bin/sh\n");
        let found = resolve_command("tool3", &home.display().to_string(), &proj).expect("found");
        assert_eq!(
            command_install(&found, &home, &proj, &[]),
            [home.join("tool3")]
        );
        let found = resolve_command("tool", &path, &proj).expect("found");
        assert_eq!(
            command_install(&found, &home, &proj, &[home.join(".npm-global/lib")]),
            [home.join(".npm-global/bin")]
        );
        // Not executable, or absent: nothing.
        std::fs::write(home.join("bin/plain"), "x").expect("w");
        assert!(resolve_command("plain", &format!("{}/bin", home.display()), &proj).is_none());
        assert!(resolve_command("nope", &path, &proj).is_none());
    }

    #[test]
    fn canonical_beyond_resolves_the_existing_part() {
        let t = tempfile::tempdir().expect("tmp");
        let root = t.path().canonicalize().expect("c");
        std::fs::create_dir(root.join("real")).expect("mk");
        std::os::unix::fs::symlink(root.join("real"), root.join("link")).expect("ln");
        assert_eq!(
            canonical_beyond(&root.join("link/.config/vetto")).expect("ok"),
            root.join("real/.config/vetto")
        );
        assert_eq!(
            canonical_beyond(&root.join("real")).expect("ok"),
            root.join("real")
        );
        assert!(canonical_beyond(Path::new("relative/x")).is_err());
        assert!(canonical_beyond(&root.join("real/../x")).is_err());
        std::os::unix::fs::symlink(root.join("nowhere"), root.join("dangling")).expect("ln");
        assert!(canonical_beyond(&root.join("dangling/x")).is_err());
    }
}
