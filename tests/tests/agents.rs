//! Agent profiles and toolchain caches (issue 17): each built-in agent profile adds exactly
//! what its page in docs/agents/ says; `vetto run claude` picks the profile by the command's
//! name; its state is writable and persists, its own settings stay read-only; a user profile
//! extends a built-in one; a cache preset makes exactly the cache directories writable. Every
//! run is real (`vetto run`, FULL and FS-ONLY, root and rootless); nothing here uses the
//! network.

use serde_json::Value;
use vetto_integration::{both, err, out, Fixture};

const AGENTS: &[&str] = &["claude", "codex", "aider", "gemini", "opencode"];

/// The "Exactly what the profile adds" block of docs/agents/NAME.md: key → entries.
fn documented(name: &str) -> Vec<(String, Vec<String>)> {
    let path = format!("{}/../docs/agents/{name}.md", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).expect("agent page");
    let block = text
        .split("```text\n")
        .nth(1)
        .and_then(|b| b.split("```").next())
        .expect("the page's profile block");
    block
        .lines()
        .filter_map(|l| l.split_once(": "))
        .map(|(k, v)| {
            let mut items: Vec<String> = v
                .split(", ")
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .collect();
            items.sort();
            (k.to_string(), items)
        })
        .collect()
}

/// The entries of `list` (a resolved policy's `[{value, source}]`) the agent profile added.
fn from_agent(list: &Value, name: &str) -> Vec<String> {
    let src = serde_json::json!({ "kind": "builtin", "name": format!("agent profile \"{name}\"") });
    let mut v: Vec<String> = list
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["source"] == src)
        .filter_map(|e| e["value"].as_str().map(str::to_string))
        .collect();
    v.sort();
    v
}

/// Every `network.allow` value of a resolved policy, in order.
fn allowed(policy: &Value) -> Vec<String> {
    policy["allow"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|a| a["value"].as_str().map(str::to_string))
        .collect()
}

fn explain(f: &Fixture, args: &[&str]) -> Value {
    let mut full = vec!["policy", "explain", "--json", "--no-user-policy"];
    full.extend_from_slice(args);
    let o = f.vetto(&full);
    assert!(o.status.success(), "explain {args:?}: {}", err(&o));
    serde_json::from_str(&out(&o)).expect("explain json")
}

both!(
    each_agent_profile_adds_exactly_what_its_page_documents,
    |f| {
        for name in AGENTS {
            let e = explain(f, &["--agent", name]);
            let p = &e["policy"];
            assert_eq!(p["agent"], *name);
            let set = {
                let src = serde_json::json!({ "kind": "builtin", "name": format!("agent profile \"{name}\"") });
                let mut v: Vec<String> = p["env_set"]
                    .as_object()
                    .into_iter()
                    .flatten()
                    .filter(|(_, s)| s["source"] == src)
                    .map(|(k, s)| format!("{k}={}", s["value"].as_str().unwrap_or("")))
                    .collect();
                v.sort();
                v
            };
            for (key, want) in documented(name) {
                let got = match key.as_str() {
                    "state" => from_agent(&p["state"], name),
                    "protected" => from_agent(&p["protected"], name),
                    "allow" => from_agent(&p["allow"], name),
                    "pass_through" => from_agent(&p["pass_through"], name),
                    "set" => set.clone(),
                    other => panic!("{name}: unknown key {other} in its page"),
                };
                assert_eq!(
                    got, want,
                    "{name}: {key} differs from docs/agents/{name}.md"
                );
            }
            // Its hosts only: nothing else reachable, and the base profile's own keys untouched.
            assert_eq!(p["network"]["value"], "allowlist", "{name}");
            let all = allowed(p);
            let mine = from_agent(&p["allow"], name);
            assert_eq!(all.len(), mine.len(), "{name}: {all:?}");
        }
        // The credential variables are named as exposed.
        let o = f.vetto(&["policy", "explain", "--no-user-policy", "--agent", "codex"]);
        let text = out(&o);
        assert!(
            text.contains("OPENAI_API_KEY") && text.contains("exposed to the sandboxed command"),
            "{text}"
        );
    }
);

/// A fake agent named like a real one, installed outside the project and outside anything
/// the sandbox shows (as `npm -g` into HOME would), and the PATH that finds it.
fn fake_agent(f: &Fixture, name: &str, script: &str) -> String {
    let dir = f.root.join("outside/agents");
    std::fs::create_dir_all(&dir).expect("mkdir");
    let p = dir.join(name);
    std::fs::write(&p, format!("#!/bin/sh\n{script}\n")).expect("w");
    std::process::Command::new("chmod")
        .args(["755", &p.display().to_string()])
        .status()
        .expect("chmod");
    f.own(&f.root.join("outside"));
    format!("{}:/usr/local/bin:/usr/bin:/bin", dir.display())
}

both!(
    the_agent_is_recognised_by_name_and_keeps_its_state_not_its_settings,
    |f| {
        // (FS-ONLY cannot let a file be created directly in a directory that holds a protected
        // one, documented: the agent's existing files and subdirectories are what it writes.)
        std::fs::create_dir_all(f.home.join(".claude/projects")).expect("mkdir");
        std::fs::write(f.home.join(".claude/history.jsonl"), "").expect("w");
        std::fs::write(
            f.home.join(".claude/settings.json"),
            "{\"permissions\":{}}\n",
        )
        .expect("w");
        std::fs::write(f.home.join(".claude.json"), "{}\n").expect("w");
        f.own(&f.home);
        let path = fake_agent(
        f,
        "claude",
        "echo $1 >> ~/.claude/history.jsonl && echo session > ~/.claude/projects/session-$1 && echo state; \
         echo '{\"a\":1}' > ~/.claude.json && echo json; \
         echo '{\"permissions\":{\"allow\":[\"Bash\"]}}' > ~/.claude/settings.json 2>/dev/null && echo SETTINGS; \
         echo key=$ANTHROPIC_API_KEY traffic=$CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC; \
         echo x > ~/.ssh/planted 2>/dev/null && echo SSH; cat ~/.ssh/id_ed25519 2>/dev/null | grep -c PRIVATE",
    );
        for tier in ["full", "fs-only"] {
            let o = f.run_env(
                &["--tier", tier],
                &["claude", tier],
                &[("ANTHROPIC_API_KEY", "sk-ant-dummy"), ("PATH", &path)],
            );
            assert_eq!(
                out(&o),
                "state\njson\nkey=sk-ant-dummy traffic=1\n0\n",
                "{tier}: {}",
                err(&o)
            );
            assert!(
                err(&o).contains("agent profile claude"),
                "{tier}: {}",
                err(&o)
            );
            assert!(
                f.home
                    .join(format!(".claude/projects/session-{tier}"))
                    .exists(),
                "{tier}"
            );
        }
        assert_eq!(
            std::fs::read_to_string(f.home.join(".claude/settings.json")).expect("r"),
            "{\"permissions\":{}}\n"
        );
        // `--agent none`: the same command gets the base profile only.
        let o = f.run_env(
            &["--tier", "full", "--agent", "none"],
            &["claude", "none"],
            &[("ANTHROPIC_API_KEY", "sk-ant-dummy"), ("PATH", &path)],
        );
        assert!(!err(&o).contains("agent profile"), "{}", err(&o));
        assert!(out(&o).contains("key= traffic="), "{}", out(&o));
        assert!(!f.home.join(".claude/projects/session-none").exists());
        assert_eq!(
            std::fs::read_to_string(f.home.join(".claude/history.jsonl")).expect("r"),
            "full\nfs-only\n"
        );
    }
);

both!(
    a_missing_state_directory_is_created_and_a_new_settings_file_reported,
    |f| {
        let path = fake_agent(
        f,
        "gemini",
        "echo c > ~/.gemini/oauth_creds.json && echo creds; mkdir -p ~/.gemini/commands && echo x > ~/.gemini/commands/evil.toml && echo planted",
    );
        // Through a shell the command is `sh`, not the agent: the base profile (HOME private;
        // the agent's file is not shown either).
        let o = f.run_env(
            &["--tier", "full"],
            &["/bin/sh", "-c", "gemini"],
            &[("PATH", &path)],
        );
        assert!(
            !out(&o).contains("creds"),
            "the shell is not the agent: {}",
            err(&o)
        );
        assert!(!f.home.join(".gemini").exists());
        // A `gemini` of the project's (here through a relative PATH entry) is not the agent.
        std::fs::create_dir_all(f.proj.join("bin")).expect("mkdir");
        std::fs::copy(
            f.root.join("outside/agents/gemini"),
            f.proj.join("bin/gemini"),
        )
        .expect("cp");
        f.own(&f.proj.join("bin"));
        let o = f.run_env(
            &["--tier", "full"],
            &["gemini"],
            &[("PATH", &format!("bin:{path}"))],
        );
        assert!(!err(&o).contains("agent profile"), "{}", err(&o));
        assert!(!f.home.join(".gemini").exists());
        let o = f.run_env(&["--tier", "full"], &["gemini"], &[("PATH", &path)]);
        assert_eq!(out(&o), "creds\nplanted\n", "{}", err(&o));
        assert!(f.home.join(".gemini/oauth_creds.json").exists());
        // A protected path the sandbox created is named at the end (the trust handoff report).
        assert!(
            err(&o).contains(".gemini/commands"),
            "not reported: {}",
            err(&o)
        );
    }
);

both!(a_user_profile_extends_a_builtin_one, |f| {
    let dir = f.home.join(".config/vetto/profiles");
    std::fs::create_dir_all(&dir).expect("mkdir");
    std::fs::write(
        dir.join("myclaude.toml"),
        "# My Claude Code.\nextends = \"claude\"\n[network]\nallow = [\"llm.example.test\"]\n",
    )
    .expect("w");
    f.own(&f.home.join(".config"));
    let o = f.vetto(&["profiles", "list"]);
    let text = out(&o);
    for want in [
        "base     default",
        "agent    claude",
        "yours    myclaude     extends claude",
    ] {
        assert!(text.contains(want), "{want}: {text} {}", err(&o));
    }
    let e = explain(f, &["--agent", "myclaude"]);
    let allow = allowed(&e["policy"]);
    assert!(
        allow.iter().any(|a| a == "api.anthropic.com")
            && allow.iter().any(|a| a == "llm.example.test"),
        "{allow:?}"
    );
    let o = f.vetto(&["profiles", "show", "myclaude"]);
    assert!(
        out(&o).contains("built-in agent profile \"claude\"")
            && out(&o).contains("llm.example.test")
    );
    // `extends` anywhere else is an error, and so is an unknown agent.
    let p = f.root.join("outside/extends.toml");
    std::fs::write(&p, "extends = \"claude\"\n").expect("w");
    f.own(&p);
    let o = f.vetto(&["policy", "explain", "--policy", &p.display().to_string()]);
    assert!(
        !o.status.success() && err(&o).contains("only an agent profile"),
        "{}",
        err(&o)
    );
    let o = f.vetto(&["policy", "explain", "--agent", "nope"]);
    assert!(
        !o.status.success() && err(&o).contains("unknown agent profile `nope`"),
        "{}",
        err(&o)
    );
});

both!(a_cache_preset_opens_exactly_the_cache_directories, |f| {
    std::fs::create_dir_all(f.home.join(".cargo/bin")).expect("mkdir");
    std::fs::write(
        f.home.join(".cargo/credentials.toml"),
        "token = \"dummy-cargo\"\n",
    )
    .expect("w");
    f.own(&f.home);
    for tier in ["full", "fs-only"] {
        let o = f.run_sh(
            &["--tier", tier, "-q", "--cache", "cargo", "--cache", "npm"],
            &format!(
                "touch ~/.cargo/registry/{tier} && echo registry; touch ~/.cargo/git/{tier} && echo git; \
                 touch ~/.npm/{tier} && echo npm; \
                 cat ~/.cargo/credentials.toml 2>/dev/null | grep -c dummy-cargo; \
                 echo x > ~/.cargo/bin/evil-{tier} 2>/dev/null && echo BIN-WRITTEN; echo done"
            ),
        );
        assert_eq!(
            out(&o),
            "registry\ngit\nnpm\n0\ndone\n",
            "{tier}: {}",
            err(&o)
        );
        for p in [".cargo/registry", ".cargo/git", ".npm"] {
            assert!(f.home.join(p).join(tier).exists(), "{tier}: {p}");
        }
        assert!(!f.home.join(format!(".cargo/bin/evil-{tier}")).exists());
    }
    assert_eq!(
        std::fs::read_to_string(f.home.join(".cargo/credentials.toml")).expect("r"),
        "token = \"dummy-cargo\"\n"
    );
    // Their registries, by name.
    let e = explain(f, &["--net", "allow:@cargo,@pip", "--cache", "pip"]);
    let allow = allowed(&e["policy"]);
    assert_eq!(
        allow,
        [
            "crates.io",
            "index.crates.io",
            "static.crates.io",
            "pypi.org",
            "files.pythonhosted.org"
        ]
    );
    let o = f.vetto(&["policy", "explain", "--cache", "conda"]);
    assert!(
        !o.status.success() && err(&o).contains("unknown preset `conda`"),
        "{}",
        err(&o)
    );
});

both!(another_sandboxs_settings_import_as_a_working_policy, |f| {
    let srt = f.root.join("outside/srt.json");
    std::fs::write(
        &srt,
        r#"{"network": {"allowedDomains": ["api.example.test"], "allowUnixSockets": ["/var/run/docker.sock"]},
            "filesystem": {"denyRead": ["~/notes"], "allowWrite": ["."], "denyWrite": ["Makefile"]}}"#,
    )
    .expect("w");
    std::fs::create_dir_all(f.home.join("notes")).expect("mkdir");
    std::fs::write(f.home.join("notes/token"), "dummy-notes-token\n").expect("w");
    std::fs::write(f.proj.join("Makefile"), "all:\n").expect("w");
    f.own(&f.root.join("outside"));
    f.own(&f.home);
    f.own(&f.proj);
    let out_file = f.root.join("outside/imported.toml");
    let o = f.vetto(&[
        "policy",
        "import",
        &srt.display().to_string(),
        "--out",
        &out_file.display().to_string(),
    ]);
    assert!(o.status.success(), "{}", err(&o));
    assert!(
        err(&o).contains("not mapped: network.allowUnixSockets"),
        "{}",
        err(&o)
    );
    let text = std::fs::read_to_string(&out_file).expect("written");
    assert!(
        text.contains("# not mapped: network.allowUnixSockets"),
        "{text}"
    );
    // It is a policy vetto runs with: the allowlist kept, the write-protection held.
    let e = explain(f, &["--policy", &out_file.display().to_string()]);
    let allow = allowed(&e["policy"]);
    assert_eq!(allow, ["api.example.test", "api.example.test:80"]);
    let o = f.run_sh(
        &[
            "--tier",
            "full",
            "-q",
            "--policy",
            &out_file.display().to_string(),
        ],
        "echo x >> Makefile 2>/dev/null && echo WROTE; echo ok",
    );
    assert_eq!(out(&o), "ok\n", "{}", err(&o));
    assert_eq!(
        std::fs::read_to_string(f.proj.join("Makefile")).expect("r"),
        "all:\n"
    );
    // Never over an existing file; garbage is refused with the reason.
    let o = f.vetto(&[
        "policy",
        "import",
        &srt.display().to_string(),
        "--out",
        &out_file.display().to_string(),
    ]);
    assert!(!o.status.success(), "overwrote");
    std::fs::write(&srt, "{{ not json").expect("w");
    let o = f.vetto(&["policy", "import", &srt.display().to_string()]);
    assert!(
        !o.status.success() && err(&o).contains("neither JSON"),
        "{}",
        err(&o)
    );
});

both!(a_protected_settings_link_is_checked_and_put_back, |f| {
    // A dotfile manager's layout: ~/.claude/settings.json -> ~/dotfiles/claude-settings.json.
    std::fs::create_dir_all(f.home.join(".claude")).expect("mkdir");
    std::fs::create_dir_all(f.home.join("dotfiles")).expect("mkdir");
    std::fs::write(f.home.join("dotfiles/claude-settings.json"), "{}\n").expect("w");
    std::os::unix::fs::symlink(
        f.home.join("dotfiles/claude-settings.json"),
        f.home.join(".claude/settings.json"),
    )
    .expect("ln");
    f.own(&f.home);
    let path = fake_agent(
        f,
        "claude",
        "rm -f ~/.claude/settings.json && echo '{\"hooks\":{}}' > ~/.claude/settings.json && echo replaced; \
         mkdir -p ~/.claude/commands && echo evil > ~/.claude/commands/x.md && echo planted",
    );
    let pol = f.root.join("outside/remove.toml");
    std::fs::write(&pol, "[filesystem]\nhandoff = \"remove\"\n").expect("w");
    f.own(&pol);
    let o = f.run_env(
        &["--tier", "full", "--policy", &pol.display().to_string()],
        &["claude"],
        &[("PATH", &path)],
    );
    assert_eq!(out(&o), "replaced\nplanted\n", "{}", err(&o));
    let e = err(&o);
    assert!(
        e.contains("the sandbox replaced") && e.contains("link") && e.contains("put back"),
        "{e}"
    );
    assert!(
        e.contains(".claude/commands") && e.contains("removed"),
        "{e}"
    );
    // The link is back, pointing where it did; the planted command is gone.
    assert_eq!(
        std::fs::read_link(f.home.join(".claude/settings.json")).expect("a link again"),
        f.home.join("dotfiles/claude-settings.json")
    );
    assert!(!f.home.join(".claude/commands").exists());
    assert_eq!(
        std::fs::read_to_string(f.home.join("dotfiles/claude-settings.json")).expect("r"),
        "{}\n"
    );
});
