//! A repository's metadata, located the way git locates it, so that all of it can be made
//! read-only inside the sandbox.
//!
//! git reads configuration from, and runs hooks named by, its *git directory* and its *common
//! directory*. Both can be redirected by files the sandbox could otherwise write:
//! - a `.git` that is a file (`gitdir: PATH`: linked worktrees, submodules, `--separate-git-dir`)
//!   names the git directory;
//! - `GITDIR/commondir` names the common directory (`config`, `hooks/`, `objects/`, `refs/`);
//! - `config`, `config.worktree`, `hooks/`, `info/`, `modules/*/` (submodules' own git
//!   directories) and `worktrees/*/` all live inside those two directories.
//!
//! A file created in a writable git directory (`commondir` is absent in an ordinary
//! repository) cannot be told apart from the lock files git itself creates there
//! (`index.lock` renamed over `index`): Landlock grants rights by directory, not by name. So the
//! whole git directory, the common directory and the `.git` entry itself are read-only: git
//! inside the sandbox can read history, diff and show status, but commits, fetches into the
//! repository and checkouts that write the index are refused (`Read-only file system`), and
//! nothing the next host-side `git` reads as configuration can be planted.

use std::path::{Path, PathBuf};

/// The paths that make up one repository's metadata, canonical, each existing: the `.git`
/// entry (directory or gitlink file), the git directory it names, and the common directory.
/// A path that cannot be resolved is left out: git could not use it either.
pub fn metadata_paths(dot_git: &Path) -> Vec<PathBuf> {
    let mut out = vec![];
    let Ok(meta) = dot_git.symlink_metadata() else {
        return out;
    };
    let Some(base) = dot_git.parent() else {
        return out;
    };
    let Ok(entry) = dot_git.canonicalize() else {
        // A dangling symlink: nothing git could use; the link itself is a plain project file.
        return out;
    };
    // The entry itself: a symlink named .git is protected at the name, so it cannot be
    // re-pointed, and at its target.
    if meta.file_type().is_symlink() {
        out.push(dot_git.to_path_buf());
    }
    out.push(entry.clone());
    if let Some(gd) = resolve_gitdir(&entry, base) {
        if let Some(common) = std::fs::read_to_string(gd.join("commondir"))
            .ok()
            .map(|t| gd.join(t.trim_end_matches(['\n', '\r'])))
            .and_then(|p| p.canonicalize().ok())
            .filter(|p| p.is_dir())
        {
            out.push(common);
        }
        out.push(gd);
    }
    out.sort();
    out.dedup();
    out
}

/// The git directory a canonical `.git` entry in `base` names: itself, or a gitlink's target.
fn resolve_gitdir(entry: &Path, base: &Path) -> Option<PathBuf> {
    if entry.is_dir() {
        return Some(entry.to_path_buf());
    }
    std::fs::read_to_string(entry)
        .ok()
        .and_then(|t| gitlink_target(&t).map(|g| base.join(g)))
        .and_then(|p| p.canonicalize().ok())
        .filter(|p| p.is_dir())
}

/// What a repository's own configuration points at outside its git directory, as the host's
/// `git` reads it (`git config --local --includes --show-origin`): every included config file
/// (`include.path`, `includeIf`: git reads them as configuration) and `core.hooksPath` (git
/// runs the hooks in it; relative to the worktree, e.g. husky's `.husky`). Paths that exist are
/// returned canonical in `.0`, absent ones (that the sandbox could create) as-is in `.1`.
/// Without a host `git` nothing is returned: nothing on the host reads them either.
pub fn config_references(dot_git: &Path) -> (Vec<PathBuf>, Vec<PathBuf>) {
    let (mut present, mut absent) = (vec![], vec![]);
    let Some(worktree) = dot_git.parent() else {
        return (present, absent);
    };
    let Some(gitdir) = dot_git
        .canonicalize()
        .ok()
        .and_then(|e| resolve_gitdir(&e, worktree))
    else {
        return (present, absent);
    };
    let out = std::process::Command::new("git")
        .args([
            "config",
            "--local",
            "--includes",
            "--show-origin",
            "--null",
            "--list",
        ])
        .env_clear()
        .env("GIT_DIR", &gitdir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("HOME", "/nonexistent-vetto")
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output();
    let Ok(out) = out else {
        return (present, absent);
    };
    let mut add = |p: PathBuf| match p.canonicalize() {
        Ok(c) => present.push(c),
        Err(_) => {
            // Named by its resolved parent, when that exists.
            let named = p
                .parent()
                .and_then(|d| d.canonicalize().ok())
                .zip(p.file_name())
                .map(|(d, n)| d.join(n));
            absent.push(named.unwrap_or(p));
        }
    };
    let fields: Vec<&[u8]> = out.stdout.split(|b| *b == 0).collect();
    for pair in fields.chunks(2) {
        let [origin, kv] = pair else { continue };
        let origin = String::from_utf8_lossy(origin);
        let origin = origin.strip_prefix("file:").map(PathBuf::from);
        if let Some(f) = &origin {
            add(f.clone());
        }
        let kv = String::from_utf8_lossy(kv);
        let Some((k, v)) = kv.split_once('\n') else {
            continue;
        };
        if v.is_empty() {
            continue;
        }
        let k = k.to_ascii_lowercase();
        let home = || std::env::var_os("HOME").map(PathBuf::from);
        let expand = |v: &str, base: Option<&Path>| -> Option<PathBuf> {
            if let Some(rest) = v.strip_prefix("~/") {
                return home().map(|h| h.join(rest));
            }
            let p = Path::new(v);
            if p.is_absolute() {
                Some(p.to_path_buf())
            } else {
                base.map(|b| b.join(p))
            }
        };
        if k == "core.hookspath" {
            // Relative to where hooks run: the worktree's top.
            add(expand(v, Some(worktree)).unwrap_or_else(|| worktree.join(v)));
        } else if k == "include.path" || (k.starts_with("includeif.") && k.ends_with(".path")) {
            // Relative to the file that includes it; one that does not exist yet is read as
            // soon as it does.
            let dir = origin.as_deref().and_then(Path::parent);
            if let Some(p) = expand(v, dir) {
                add(p);
            }
        }
    }
    present.sort();
    present.dedup();
    absent.sort();
    absent.dedup();
    (present, absent)
}

/// The path in a gitlink file (`gitdir: PATH`), as git reads it (`read_gitfile_gently`).
pub fn gitlink_target(text: &str) -> Option<&str> {
    let t = text.strip_prefix("gitdir: ")?;
    let t = t.trim_end_matches(['\n', '\r']);
    (!t.is_empty()).then_some(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_repository_is_its_directory() {
        let t = tempfile::tempdir().expect("tmp");
        let root = t.path().canonicalize().expect("c");
        std::fs::create_dir_all(root.join("p/.git/hooks")).expect("mk");
        assert_eq!(
            metadata_paths(&root.join("p/.git")),
            vec![root.join("p/.git")]
        );
    }

    #[test]
    fn gitlink_and_commondir_are_followed() {
        let t = tempfile::tempdir().expect("tmp");
        let root = t.path().canonicalize().expect("c");
        let main = root.join("main/.git");
        let wt = main.join("worktrees/w");
        std::fs::create_dir_all(&wt).expect("mk");
        std::fs::write(wt.join("commondir"), "../..\n").expect("w");
        std::fs::create_dir_all(root.join("w")).expect("mk");
        std::fs::write(root.join("w/.git"), format!("gitdir: {}\n", wt.display())).expect("w");
        let mut want = vec![root.join("w/.git"), wt.clone(), main.clone()];
        want.sort();
        assert_eq!(metadata_paths(&root.join("w/.git")), want);
        // Relative gitlinks resolve against the directory holding the .git file.
        std::fs::create_dir_all(root.join("main/sub")).expect("mk");
        std::fs::create_dir_all(main.join("modules/sub")).expect("mk");
        std::fs::write(root.join("main/sub/.git"), "gitdir: ../.git/modules/sub\n").expect("w");
        let mut want = vec![root.join("main/sub/.git"), main.join("modules/sub")];
        want.sort();
        assert_eq!(metadata_paths(&root.join("main/sub/.git")), want);
    }

    #[test]
    fn hooks_path_and_included_config_are_found() {
        if std::process::Command::new("git")
            .arg("--version")
            .output()
            .is_err()
        {
            eprintln!("skipped: no git on this host");
            return;
        }
        let t = tempfile::tempdir().expect("tmp");
        let root = t.path().canonicalize().expect("c");
        let git = |args: &[&str]| {
            let st = std::process::Command::new("git")
                .arg("-C")
                .arg(&root)
                .args(args)
                .status()
                .expect("git");
            assert!(st.success());
        };
        git(&["init", "-q", "."]);
        std::fs::create_dir(root.join(".husky")).expect("mk");
        std::fs::write(root.join("inc.cfg"), "[core]\n\tautocrlf = false\n").expect("w");
        git(&["config", "core.hooksPath", ".husky"]);
        git(&["config", "include.path", "../inc.cfg"]);
        git(&["config", "--add", "include.path", "../absent.cfg"]);
        let (present, absent) = config_references(&root.join(".git"));
        assert!(present.contains(&root.join(".husky")), "{present:?}");
        assert!(present.contains(&root.join("inc.cfg")), "{present:?}");
        assert!(present.contains(&root.join(".git/config")), "{present:?}");
        // An include that does not exist yet is read as soon as it does.
        assert!(absent.contains(&root.join("absent.cfg")), "{absent:?}");
        std::fs::remove_dir(root.join(".husky")).expect("rm");
        let (_, absent) = config_references(&root.join(".git"));
        assert!(absent.contains(&root.join(".husky")), "{absent:?}");
    }

    #[test]
    fn unusable_links_name_only_the_entry() {
        let t = tempfile::tempdir().expect("tmp");
        let root = t.path().canonicalize().expect("c");
        std::fs::write(root.join(".git"), "gitdir: /nonexistent-vetto\n").expect("w");
        assert_eq!(metadata_paths(&root.join(".git")), vec![root.join(".git")]);
        assert_eq!(gitlink_target("nonsense"), None);
        assert!(metadata_paths(&root.join("absent/.git")).is_empty());
    }
}
