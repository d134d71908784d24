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
    let gitdir = if entry.is_dir() {
        Some(entry)
    } else {
        std::fs::read_to_string(&entry)
            .ok()
            .and_then(|t| gitlink_target(&t).map(|g| base.join(g)))
            .and_then(|p| p.canonicalize().ok())
            .filter(|p| p.is_dir())
    };
    if let Some(gd) = gitdir {
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
    fn unusable_links_name_only_the_entry() {
        let t = tempfile::tempdir().expect("tmp");
        let root = t.path().canonicalize().expect("c");
        std::fs::write(root.join(".git"), "gitdir: /nonexistent-vetto\n").expect("w");
        assert_eq!(metadata_paths(&root.join(".git")), vec![root.join(".git")]);
        assert_eq!(gitlink_target("nonsense"), None);
        assert!(metadata_paths(&root.join("absent/.git")).is_empty());
    }
}
