//! Regression tests for the holes an independent attack run found (issue 9): each plays the
//! agent inside the real `vetto run`, as root and as `nobody`, and checks on the host that the
//! attack left nothing behind that a host tool would load or run.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use vetto_integration::{both, err, out, Fixture, Mode};

/// Run a shell command on the host as the fixture's user, in `dir`.
fn host_sh(f: &Fixture, dir: &Path, script: &str) -> std::process::Output {
    let env = f.base_env();
    let mut c = f.command(&["/bin/sh", "-c", script], &env);
    c.current_dir(dir);
    c.output().expect("host sh")
}

/// A policy file outside the project, owned by the fixture's user.
fn policy(f: &Fixture, name: &str, text: &str) -> String {
    let p = f.root.join(name);
    std::fs::write(&p, text).expect("write policy");
    f.own(&p);
    p.display().to_string()
}

// --- 1. git metadata ------------------------------------------------------------------------

both!(git_metadata_cannot_plant_configuration_for_host_git, |f| {
    let marker = f.root.join("outside/PWNED");
    // A second repository layout: a submodule-style gitlink into .git/modules.
    let o = host_sh(
        f,
        &f.proj,
        "mkdir -p .git/modules && git init -q --separate-git-dir=.git/modules/sub sub && echo sub > sub/f",
    );
    assert!(o.status.success(), "{}", err(&o));
    let script = format!(
        "mkdir .x && cp -r .git/objects .git/refs .git/HEAD .x/ && \
         printf '[core]\\n\\tfsmonitor = \"touch {m}\"\\n' > .x/config; \
         echo ../.x > .git/commondir 2>/dev/null && echo COMMONDIR-WRITTEN; \
         echo '[core]' >> .git/config 2>/dev/null && echo CONFIG-WRITTEN; \
         touch .git/config.worktree 2>/dev/null && echo WORKTREE-CONFIG-WRITTEN; \
         printf '#!/bin/sh\\ntouch {m}\\n' > .git/hooks/post-checkout 2>/dev/null && echo HOOK-WRITTEN; \
         printf 'gitdir: ../.x\\n' > sub/.git 2>/dev/null && echo GITLINK-WRITTEN; \
         printf '[core]\\n\\tfsmonitor = \"touch {m}\"\\n' >> .git/modules/sub/config 2>/dev/null && echo SUBCONFIG-WRITTEN; \
         mv .git .git-old 2>/dev/null && echo MOVED; \
         git status --short >/dev/null && echo status-ok; git log --oneline | wc -l",
        m = marker.display()
    );
    let o = f.run_sh(&[], &script);
    assert_eq!(out(&o), "status-ok\n1\n", "stderr: {}", err(&o));
    assert!(!f.proj.join(".git/commondir").exists());
    // The user's next git commands on the host run nothing the sandbox planted.
    for dir in [f.proj.clone(), f.proj.join("sub")] {
        let o = host_sh(
            f,
            &dir,
            "git status --short >/dev/null; git diff >/dev/null; echo done",
        );
        assert_eq!(out(&o), "done\n", "{}", err(&o));
    }
    assert!(
        !marker.exists(),
        "host git ran a command planted by the sandbox"
    );
});

// What the repository's configuration points at in the worktree: a hooks directory (husky's
// `.husky`) and included config files, present or not yet.
both!(git_hooks_path_and_included_config_are_protected, |f| {
    let marker = f.root.join("outside/PWNED");
    let o = host_sh(
        f,
        &f.proj,
        "mkdir .husky && printf '#!/bin/sh\nexit 0\n' > .husky/pre-commit && chmod +x .husky/pre-commit && \
         git config core.hooksPath .husky && printf '[user]\n\tname = Shared\n' > shared.gitconfig && \
         git config include.path ../shared.gitconfig && git config --add include.path ../later.gitconfig",
    );
    assert!(o.status.success(), "{}", err(&o));
    let script = format!(
        "printf '#!/bin/sh\ntouch {m}\n' > .husky/pre-commit 2>/dev/null && echo HOOK-WRITTEN; \
         printf '[core]\n\tfsmonitor = \"touch {m}\"\n' >> shared.gitconfig 2>/dev/null && echo INCLUDE-WRITTEN; \
         mv .husky .husky-old 2>/dev/null && echo MOVED; \
         printf '[core]\n\tfsmonitor = \"touch {m}\"\n' > later.gitconfig; echo done",
        m = marker.display()
    );
    let o = f.run_sh(&[], &script);
    assert_eq!(out(&o), "done\n", "stderr: {}", err(&o));
    assert!(
        err(&o).contains(&format!(
            "trust handoff: the sandbox created {}",
            f.proj.join("later.gitconfig").display()
        )),
        "{}",
        err(&o)
    );
    // With handoff = "remove" the planted include is gone before host git can read it.
    let pol = policy(f, "remove.toml", "[filesystem]\nhandoff = \"remove\"\n");
    let _ = std::fs::remove_file(f.proj.join("later.gitconfig"));
    let o = f.run_sh(&["--policy", &pol], &script);
    assert_eq!(out(&o), "done\n", "stderr: {}", err(&o));
    assert!(!f.proj.join("later.gitconfig").exists());
    let o = host_sh(f, &f.proj, "git status --short >/dev/null; echo done");
    assert_eq!(out(&o), "done\n", "{}", err(&o));
    assert!(
        !marker.exists(),
        "host git ran a command planted by the sandbox"
    );
});

both!(git_reads_but_cannot_write_the_repository, |f| {
    let o = f.run_sh(
        &[],
        "git log -1 --format=%s && echo change >> README && git diff --stat | tail -1 && git commit -qam x",
    );
    assert!(!o.status.success());
    assert!(out(&o).starts_with("init\n"), "{}", out(&o));
    assert!(err(&o).contains("Read-only file system"), "{}", err(&o));
});

// --- 2. setuid / setgid files, file capabilities, the process limit -------------------------

fn setid_files(root: &Path, found: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(root).expect("ls").flatten() {
        let m = e.path().symlink_metadata().expect("meta");
        if m.mode() & 0o6000 != 0 {
            found.push(e.path());
        }
        if m.is_dir() && !m.file_type().is_symlink() {
            setid_files(&e.path(), found);
        }
    }
}

both!(no_setuid_or_setgid_file_reaches_the_host, |f| {
    let script = "cp /bin/sh a; chmod u+s a 2>/dev/null && echo CHMOD; chmod g+s a 2>/dev/null && echo CHMOD-G; \
        install -m 4755 /bin/sh b 2>/dev/null && echo INSTALL; \
        python3 -c 'import os; os.close(os.open(\"c\", os.O_CREAT|os.O_WRONLY, 0o6755))' 2>/dev/null && echo OPEN; \
        python3 -c 'import os; os.mkdir(\"d\", 0o2755)' 2>/dev/null && echo MKDIR; \
        python3 -c 'import os; os.chmod(\"a\", 0o4755, follow_symlinks=False)' 2>/dev/null && echo FCHMODAT; \
        python3 -c 'import os; os.setxattr(\"a\", \"security.capability\", b\"\\x01\\x00\\x00\\x02\" + b\"\\xff\" * 16)' 2>/dev/null && echo SETXATTR; \
        python3 -c 'import socket; socket.socket(socket.AF_VSOCK, socket.SOCK_STREAM)' 2>/dev/null && echo VSOCK; \
        chmod 755 a && echo plain-chmod-ok";
    let o = f.run_sh(&[], script);
    assert_eq!(out(&o), "plain-chmod-ok\n", "stderr: {}", err(&o));
    let mut found = vec![];
    setid_files(&f.proj, &mut found);
    assert!(
        found.is_empty(),
        "setuid/setgid files on the host: {found:?}"
    );
    let caps = Command::new("getfattr")
        .args(["-n", "security.capability"])
        .arg(f.proj.join("a"))
        .output();
    if let Ok(c) = caps {
        assert!(!out(&c).contains("security.capability"), "{}", out(&c));
    }
});

both!(process_limit_holds, |f| {
    std::fs::write(
        f.proj.join("forks.py"),
        "import os, time\nn = 0\nfor i in range(300):\n    try:\n        pid = os.fork()\n    except OSError:\n        break\n    if pid == 0:\n        time.sleep(3)\n        os._exit(0)\n    n += 1\nprint(n)\n",
    )
    .expect("w");
    f.own(&f.proj.join("forks.py"));
    let p = policy(f, "limit.toml", "[limits]\nprocesses = 64\n");
    let o = f.run_argv(&["--policy", &p], &["/usr/bin/python3", "forks.py"]);
    assert!(o.status.success(), "{}", err(&o));
    let n: u32 = out(&o).trim().parse().expect("a count");
    // The limit counts every process of the sandbox (python itself included) for root, and
    // every process of the uid (other tests' included) for nobody.
    assert!(n < 64, "forked {n} processes under processes = 64");
    if f.mode == Mode::Root {
        // Only the limit stops it (the pids cgroup counts this sandbox alone).
        assert!(n >= 60, "forked only {n}: the limit should be 64");
        // ... and the audit says so (docs/audit.md: `limit` `processes` for a root caller).
        let q = f.vetto(&["audit", "query", "--json"]);
        assert!(q.status.success(), "{}", err(&q));
        let limit = out(&q)
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .find(|e| e["kind"] == "limit" && e["limit"] == "processes");
        let limit = limit.unwrap_or_else(|| panic!("no processes limit record:\n{}", out(&q)));
        assert_eq!(limit["value"].as_u64(), Some(64), "{limit}");
        assert!(
            limit["detail"]
                .as_str()
                .is_some_and(|d| d.contains("refused")),
            "{limit}"
        );
    }
});

// --- 3. trust and policy files through aliases ------------------------------------------------

both!(
    home_through_a_symlink_cannot_vouch_for_its_own_policy,
    |f| {
        // HOME is reached through a symlink and the project is the home directory.
        let link = f.root.join("homelink");
        std::os::unix::fs::symlink(&f.home, &link).expect("ln");
        let link_s = link.display().to_string();
        let home_s = f.home.display().to_string();
        let mut env: Vec<(String, String)> = f
            .base_env()
            .into_iter()
            .filter(|(k, _)| k != "XDG_CONFIG_HOME" && k != "HOME")
            .collect();
        env.push(("HOME".into(), link_s));
        let bin = f.bin.display().to_string();
        let run = |script: &str| {
            f.command(
                &[
                    &bin,
                    "run",
                    "--project",
                    &home_s,
                    "--",
                    "/bin/sh",
                    "-c",
                    script,
                ],
                &env,
            )
            .output()
            .expect("run")
        };
        // Session 1 writes a widening user policy and a trust entry for it.
        let script = "mkdir -p ~/.config/vetto && printf '[secrets]\\nextend = false\\n' > ~/.config/vetto/policy.toml && \
        d=$(sha256sum ~/.config/vetto/policy.toml | cut -d' ' -f1) && \
        printf '{\"%s\": \"%s\"}' \"$(readlink -f ~/.config/vetto/policy.toml)\" \"$d\" > ~/.config/vetto/trusted.json; echo wrote";
        let o = run(script);
        assert!(out(&o).contains("wrote"), "{}", err(&o));
        // Session 2 must not read ~/.ssh.
        let o = run("cat ~/.ssh/id_ed25519 2>/dev/null; echo end");
        assert!(
            !out(&o).contains("PRIVATE KEY"),
            "the key leaked: {}",
            out(&o)
        );
        assert!(
            !o.status.success() && err(&o).contains("secrets"),
            "the untrusted widening must be refused: {} / {}",
            out(&o),
            err(&o)
        );
    }
);

both!(
    policy_file_in_a_write_root_is_read_only_and_untrusted,
    |f| {
        let shared = f.root.join("outside");
        let p = shared.join("vetto.toml");
        std::fs::write(&p, "[limits]\nprocesses = 100\n").expect("w");
        f.own(&p);
        let ps = p.display().to_string();
        let ss = shared.display().to_string();
        let o = f.run_sh(
        &["--policy", &ps, "--allow-write", &ss],
        &format!("printf '[secrets]\\nextend = false\\n' >> '{ps}' 2>/dev/null && echo WROTE; touch '{ss}/other' && echo root-writable"),
    );
        assert_eq!(out(&o), "root-writable\n", "{}", err(&o));
        // Had the agent changed it (as the host user could), the next run refuses the widening.
        std::fs::write(&p, "[secrets]\nextend = false\n").expect("w");
        let o = f.run_sh(&["--policy", &ps, "--allow-write", &ss], "echo ran");
        assert_eq!(o.status.code(), Some(2), "{} / {}", out(&o), err(&o));
        assert!(err(&o).contains("secrets"), "{}", err(&o));
    }
);

both!(untrusted_scratch_cannot_cancel_write_no_delete, |f| {
    std::fs::write(
        f.proj.join("vetto.toml"),
        "[filesystem]\nscratch = [\".\"]\n",
    )
    .expect("w");
    f.own(&f.proj.join("vetto.toml"));
    let o = f.run_sh(
        &[
            "--policy",
            "vetto.toml",
            "--project-access",
            "write-no-delete",
        ],
        "rm README && echo DELETED",
    );
    assert_eq!(o.status.code(), Some(2), "{} / {}", out(&o), err(&o));
    assert!(err(&o).contains("filesystem.scratch"), "{}", err(&o));
    assert!(f.proj.join("README").exists());
});

// --- 4. secret side doors ------------------------------------------------------------------

both!(
    symlinked_toolchain_home_and_git_credentials_are_masked,
    |f| {
        let data = f.root.join("outside/cargo");
        std::fs::create_dir_all(&data).expect("mk");
        std::fs::write(data.join("credentials.toml"), "token = \"cargo-secret\"\n").expect("w");
        std::fs::write(data.join("config.toml"), "[net]\n").expect("w");
        std::os::unix::fs::symlink(&data, f.home.join(".cargo")).expect("ln");
        std::fs::create_dir_all(f.home.join(".config/git")).expect("mk");
        std::fs::write(
            f.home.join(".config/git/credentials"),
            "https://u:git-secret@example.invalid\n",
        )
        .expect("w");
        f.own(&f.root.join("outside"));
        f.own(&f.home);
        let o = f.run_env(
        &[],
        &[
            "/bin/sh",
            "-c",
            "cat ~/.cargo/credentials.toml ~/.config/git/credentials; test -f ~/.cargo/config.toml && echo cargo-config-visible; echo \"[$LC_DB_PASS][$LC_ALL]\"",
        ],
        &[("LC_DB_PASS", "db-secret"), ("LC_ALL", "C.UTF-8")],
    );
        let s = out(&o);
        assert!(!s.contains("secret"), "{s}");
        assert_eq!(
            s,
            "cargo-config-visible\n[][C.UTF-8]\n",
            "stderr: {}",
            err(&o)
        );
    }
);

// --- 5. trust-handoff files created during the session --------------------------------------

both!(
    handoff_files_created_inside_are_reported_and_can_be_removed,
    |f| {
        std::fs::create_dir_all(f.proj.join(".claude")).expect("mk");
        f.own(&f.proj.join(".claude"));
        let script = "echo '{\"mcpServers\":{}}' > .mcp.json; mkdir -p .vscode .devcontainer && echo '{}' > .vscode/tasks.json && echo '{}' > .devcontainer/devcontainer.json; git init -q nested/deeper; \
        echo '{}' > .claude/settings.local.json 2>/dev/null && echo CLAUDE-WRITTEN; echo done";
        let o = f.run_sh(&[], script);
        assert_eq!(out(&o), "done\n", "{}", err(&o));
        for p in [
            ".mcp.json",
            ".vscode",
            ".devcontainer",
            "nested/deeper/.git",
        ] {
            assert!(
                err(&o).contains(&format!(
                    "trust handoff: the sandbox created {}",
                    f.proj.join(p).display()
                )),
                "{p} not reported: {}",
                err(&o)
            );
            assert!(f.proj.join(p).exists(), "warn leaves {p}");
        }
        let log = std::fs::read_to_string(f.home.join(".local/state/vetto/handoff.log"))
            .expect("recorded");
        assert!(log.contains(".mcp.json"), "{log}");
        // With handoff = "remove" they are removed.
        for p in [".mcp.json", ".vscode", ".devcontainer", "nested"] {
            let _ = std::fs::remove_dir_all(f.proj.join(p));
            let _ = std::fs::remove_file(f.proj.join(p));
        }
        let pol = policy(f, "remove.toml", "[filesystem]\nhandoff = \"remove\"\n");
        let o = f.run_sh(&["--policy", &pol], script);
        assert!(err(&o).contains("removed"), "{}", err(&o));
        for p in [
            ".mcp.json",
            ".vscode",
            ".devcontainer",
            "nested/deeper/.git",
        ] {
            assert!(!f.proj.join(p).exists(), "{p} not removed");
        }
    }
);

// --- 6. masks placed race-free against concurrent renames -----------------------------------

both!(masks_land_on_the_scanned_files_despite_rename_races, |f| {
    std::fs::create_dir_all(f.proj.join("x")).expect("mk");
    std::fs::create_dir_all(f.proj.join("y")).expect("mk");
    std::fs::write(f.proj.join("x/.env.local"), "NESTED=race-secret\n").expect("w");
    std::fs::write(f.proj.join("y/other"), "plain\n").expect("w");
    f.own(&f.proj.join("x"));
    f.own(&f.proj.join("y"));
    // Another process of the same user swaps x and y as fast as it can.
    let racer = format!(
        "import ctypes, time\nlibc = ctypes.CDLL(None, use_errno=True)\nend = time.time() + 60\n\
         while time.time() < end:\n    libc.renameat2(-100, b'{p}/x', -100, b'{p}/y', 2)\n",
        p = f.proj.display()
    );
    let mut child = f
        .command(&["/usr/bin/python3", "-c", &racer], &f.base_env())
        .spawn()
        .expect("racer");
    let start = Instant::now();
    let mut refused = 0;
    let mut ran = 0;
    while ran + refused < 8 && start.elapsed() < Duration::from_secs(50) {
        let o = f.run_sh(&[], "cat x/.env.local y/.env.local 2>/dev/null; echo end");
        let s = out(&o);
        assert!(!s.contains("race-secret"), "the secret was read: {s}");
        if o.status.success() {
            ran += 1;
        } else {
            // Fail closed: the scan or the mask placement saw the tree change.
            assert!(
                err(&o).contains("changed between the scan and the mount")
                    || err(&o).contains("secret scan")
                    || err(&o).contains("No such file"),
                "{}",
                err(&o)
            );
            refused += 1;
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    eprintln!("{ran} sessions ran, {refused} refused to start");
    // No placeholder files were created on the host.
    let mut names: Vec<String> = ["x", "y"]
        .iter()
        .flat_map(|d| std::fs::read_dir(f.proj.join(d)).expect("ls").flatten())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, vec![".env.local", "other"]);
});

// --- a granted path that is, or resolves into, a secret --------------------------------------

// HOME's dotfiles and the policy's roots are bound (FULL) or granted (FS-ONLY) at their
// resolved target. A dotfile that is a symlink to a secret (`~/.gitconfig -> .ssh/id_ed25519`,
// `~/.cargo -> .aws`, `~/.rustup -> a .env`) and a root beneath a secret directory must not
// show it: each is masked whole, in both tiers.
both!(
    a_dotfile_or_root_resolving_into_a_secret_is_masked_whole,
    |f| {
        std::fs::create_dir_all(f.home.join(".aws")).expect("mkdir");
        std::fs::write(f.home.join(".aws/credentials"), "aws_secret=dummy-aws\n").expect("w");
        std::fs::create_dir_all(f.home.join("dots")).expect("mkdir");
        std::fs::write(f.home.join("dots/.env.tools"), "TOOLS_SECRET=dummy-tools\n").expect("w");
        std::fs::remove_file(f.home.join(".gitconfig")).expect("rm");
        std::os::unix::fs::symlink(".ssh/id_ed25519", f.home.join(".gitconfig")).expect("ln");
        std::os::unix::fs::symlink(".aws", f.home.join(".cargo")).expect("ln");
        std::os::unix::fs::symlink("dots/.env.tools", f.home.join(".rustup")).expect("ln");
        f.own(&f.home);
        let p = policy(
            f,
            "roots.toml",
            &format!(
                "[filesystem]\nread = [\"{}\"]\n",
                f.home.join(".ssh/id_ed25519").display()
            ),
        );
        for tier in ["full", "fs-only"] {
            let o = f.run_sh(
            &["--tier", tier, "-q", "--policy", &p],
            "cat ~/.gitconfig ~/.cargo/credentials ~/.rustup ~/.ssh/id_ed25519 2>/dev/null; echo done",
        );
            let s = out(&o);
            assert_eq!(s, "done\n", "{tier}: {s} {}", err(&o));
        }
        let o = f.vetto(&["policy", "explain", "--policy", &p]);
        let text = out(&o);
        assert!(
            text.contains("masked whole: it is or resolves into the secret"),
            "{text} {}",
            err(&o)
        );
    }
);

// --- the project walk's listing cache (issue 18) --------------------------------------------

both!(a_secret_added_to_a_cached_directory_is_still_masked, |f| {
    // Directories whose ctime is older than the cache's racy window, so that their listings
    // are cached by the first run and reused by the next.
    for d in ["old/deep", "elsewhere"] {
        std::fs::create_dir_all(f.proj.join(d)).expect("mkdir");
    }
    f.own(&f.proj);
    std::thread::sleep(Duration::from_millis(2_300));
    let debug = [("RUST_LOG", "vetto=debug"), ("NO_COLOR", "1")];
    // A count from the walk's debug record ("project walk: directory listings reused=N ...").
    let walk_count = |o: &std::process::Output, field: &str| -> usize {
        let e = err(o);
        let at = e
            .find(&format!(" {field}="))
            .unwrap_or_else(|| panic!("no walk record with {field}: {e}"));
        e[at + field.len() + 2..]
            .split(|c: char| !c.is_ascii_digit())
            .next()
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    };
    let reused = |o: &std::process::Output| walk_count(o, "reused");
    let verdicts = |o: &std::process::Output| walk_count(o, "leaf_verdicts");
    // The walk's record stood in for the walk (bundle/src/walkrecord.rs).
    let recorded = |o: &std::process::Output| err(o).contains(" walk_record=true");
    let check = |tier: &str, when: &str| {
        let o = f.run_env(
            &["--tier", tier],
            &[
                "/bin/sh",
                "-c",
                "cat old/.env old/deep/.env.local old/new/.env old/deep/.env 2>&1; echo end",
            ],
            &debug,
        );
        let text = out(&o);
        assert!(text.ends_with("end\n"), "{tier}: {text} {}", err(&o));
        assert!(
            !text.contains("SECRET"),
            "{tier}, {when}: a secret was shown: {text}"
        );
        // The cache was in use (the project's own directory was unchanged): the test is about
        // it, not about a fresh walk. The walk's record did not stand in: the project changed.
        assert!(
            reused(&o) >= 1,
            "{tier}: no listing was reused: {}",
            err(&o)
        );
        assert!(
            !recorded(&o),
            "{tier}, {when}: the record of an earlier walk stood in for a changed project: {}",
            err(&o)
        );
    };
    for tier in ["full", "fs-only"] {
        // The first run caches the listings and records the walk; the second takes the
        // record instead of walking (nothing changed): the changes below land in directories
        // the cache and the record hold.
        let o = f.run_env(&["--tier", tier], &["/bin/true"], &debug);
        assert!(o.status.success(), "{tier}: {}", err(&o));
        let o = f.run_env(&["--tier", tier], &["/bin/true"], &debug);
        assert!(o.status.success(), "{tier}: {}", err(&o));
        assert!(
            recorded(&o),
            "{tier}: the walk's record did not stand in for the unchanged project: {}",
            err(&o)
        );
        // A file added to `elsewhere` (a leaf) makes the record miss; the walks that follow
        // reuse the listings, the first recording which are leaves for these patterns, the
        // second taking those verdicts (old/deep is one): the changes below also land in a
        // directory whose leaf verdict the cache holds.
        let o = host_sh(f, &f.proj, &format!("touch elsewhere/marker-{tier}"));
        assert!(o.status.success(), "{}", err(&o));
        let mut last = None;
        for _ in 0..2 {
            let o = f.run_env(&["--tier", tier], &["/bin/true"], &debug);
            assert!(o.status.success(), "{tier}: {}", err(&o));
            assert!(!recorded(&o), "{tier}: the record stood in: {}", err(&o));
            last = Some(o);
        }
        let o = last.expect("two runs");
        assert!(
            verdicts(&o) >= 1,
            "{tier}: the leaves' verdicts were not used: {}",
            err(&o)
        );
        // The walk at the session's end (its own record no longer holds: a directory changed)
        // reads the listings: a repository the sandbox makes in a directory they hold is
        // found.
        let o = f.run_env(
            &["--tier", tier],
            &["/bin/sh", "-c", "mkdir old/deep/.git && echo end"],
            &debug,
        );
        assert_eq!(out(&o), "end\n", "{tier}: {}", err(&o));
        let made = f.proj.join("old/deep/.git");
        assert!(
            err(&o).contains(&format!(
                "trust handoff: the sandbox created {}",
                made.display()
            )),
            "{tier}: the new repository was not reported: {}",
            err(&o)
        );
        std::fs::remove_dir(&made).expect("rmdir");
        // Three ways a secret appears in a directory whose listing is cached: created there,
        // renamed in from elsewhere, and in a new subdirectory. Checked once the changed
        // directories' new ctimes are old enough to be trusted: only the ctimes' change tells
        // them from the cached listings then.
        let o = host_sh(
            f,
            &f.proj,
            "echo SECRET-NEW > old/.env && echo SECRET-MOVED > elsewhere/x && \
             mv elsewhere/x old/deep/.env.local && mkdir old/new && echo SECRET-SUB > old/new/.env",
        );
        assert!(o.status.success(), "{}", err(&o));
        std::thread::sleep(Duration::from_millis(2_300));
        check(tier, "after the racy window");
        // And at once, within it.
        let o = host_sh(f, &f.proj, "echo SECRET-NOW > old/deep/.env");
        assert!(o.status.success(), "{}", err(&o));
        check(tier, "within the racy window");
        let o = host_sh(
            f,
            &f.proj,
            "rm -r old/.env old/deep/.env.local old/deep/.env old/new",
        );
        assert!(o.status.success(), "{}", err(&o));
        // Past the racy window again, so the next tier's runs cache these directories.
        std::thread::sleep(Duration::from_millis(2_300));
    }
});
