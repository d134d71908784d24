//! `vetto policy import`: another sandbox's settings as a vetto policy layer, so users who
//! switch keep their allowlists. Three inputs:
//!
//! - Anthropic's sandbox-runtime settings (`~/.srt-settings.json`: `network`,
//!   `filesystem`, ...);
//! - Claude Code's `settings.json` (its `sandbox` object, and the `WebFetch(domain:…)`,
//!   `Read(…)` and `Edit(…)` rules of `permissions`);
//! - Codex's `config.toml` (`sandbox_mode`, `[sandbox_workspace_write]`,
//!   `[shell_environment_policy]`).
//!
//! Every field is either mapped or named in [`Imported::unmapped`] with the reason: nothing is
//! dropped silently. Where the two models differ, the result is the narrower reading (srt
//! allows reading everything but `denyRead`; vetto shows the project, the system and a few
//! dotfiles only, and says so).

use serde_json::Value;

use crate::policy::{
    EnvironmentSection, FilesystemSection, NetworkMode, NetworkSection, PolicyFile, ProjectAccess,
    SecretsSection,
};

/// What an import failed on.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    /// Not JSON or TOML of a known shape.
    #[error("{0}")]
    Format(String),
}

/// The result: the policy layer, and every field that has no vetto equivalent.
#[derive(Debug, Clone, Default)]
pub struct Imported {
    /// What the input was (`sandbox-runtime settings`, ...).
    pub kind: &'static str,
    /// The policy.
    pub policy: PolicyFile,
    /// `(field, why)` for each field not mapped.
    pub unmapped: Vec<(String, String)>,
    /// `(field, how)` notes on fields mapped with a difference worth knowing.
    pub notes: Vec<(String, String)>,
}

impl Imported {
    fn skip(&mut self, field: &str, why: &str) {
        self.unmapped.push((field.to_string(), why.to_string()));
    }
    fn note(&mut self, field: &str, how: &str) {
        self.notes.push((field.to_string(), how.to_string()));
    }

    /// The policy as TOML, with a header naming the source, the unmapped fields and the notes.
    pub fn to_toml(&self, origin: &str) -> Result<String, ImportError> {
        let body = toml::to_string(&self.policy)
            .map_err(|e| ImportError::Format(format!("writing the policy: {e}")))?;
        let mut out = format!(
            "# Imported by `vetto policy import` from {origin} ({}).\n",
            self.kind
        );
        for (f, how) in &self.notes {
            out.push_str(&format!("# note: {f}: {how}\n"));
        }
        for (f, why) in &self.unmapped {
            out.push_str(&format!("# not mapped: {f}: {why}\n"));
        }
        out.push('\n');
        out.push_str(&body);
        Ok(out)
    }
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s.as_str().map(str::to_string))
        .collect()
}

/// `allowedDomains` entries as vetto allow entries: srt lets a domain through its HTTP and
/// SOCKS proxies on any port; vetto's entries are per port (a bare name is 443), so 80 is
/// added too.
fn domains(list: &[String], im: &mut Imported, field: &str) -> Vec<String> {
    let mut out = vec![];
    for d in list {
        let d = d.trim().trim_end_matches('.').to_ascii_lowercase();
        if d.is_empty() {
            continue;
        }
        if d == "*" {
            im.skip(field, "`*` (every domain): vetto has no allow-everything entry; unlisted destinations are asked for instead (approvals)");
            continue;
        }
        out.push(d.clone());
        out.push(format!("{d}:80"));
    }
    if !out.is_empty() {
        im.note(field, "each domain allowed on ports 443 and 80 (srt's proxies take any port; add `host:PORT` for others)");
    }
    out
}

/// Is `p` (as the other tool wrote it) the project itself?
fn is_project(p: &str) -> bool {
    matches!(p, "." | "./" | "$PWD" | "${PWD}")
}

fn srt_network(n: &Value, im: &mut Imported, prefix: &str) -> Option<NetworkSection> {
    let obj = n.as_object()?;
    let mut net = NetworkSection::default();
    for (k, v) in obj {
        let field = format!("{prefix}network.{k}");
        match k.as_str() {
            "allowedDomains" => {
                let allow = domains(&strings(v), im, &field);
                net.mode = Some(if allow.is_empty() {
                    NetworkMode::Off
                } else {
                    NetworkMode::Allowlist
                });
                net.allow = Some(allow);
            }
            "deniedDomains" => net.deny = Some(strings(v)),
            "allowUnixSockets" => im.skip(&field, "vetto never shows the host's Unix sockets to the sandbox (docker.sock would be root on the host)"),
            "allowAllUnixSockets" => im.skip(&field, "vetto never shows the host's Unix sockets to the sandbox"),
            "allowLocalBinding" => im.skip(&field, "in FULL the sandbox binds its own loopback anyway (a private network namespace); to reach it from the host use `network.publish`"),
            "httpProxyPort" | "socksProxyPort" => im.skip(&field, "vetto's broker is its own proxy (127.0.0.1:3128 and :1080 inside)"),
            _ => im.skip(&field, "unknown to this importer"),
        }
    }
    Some(net)
}

fn srt_filesystem(f: &Value, im: &mut Imported, policy: &mut PolicyFile) {
    let Some(obj) = f.as_object() else { return };
    let mut fs = FilesystemSection {
        // srt writes nowhere unless allowWrite says so.
        project: Some(ProjectAccess::Read),
        ..Default::default()
    };
    let mut secrets = SecretsSection::default();
    for (k, v) in obj {
        let field = format!("filesystem.{k}");
        match k.as_str() {
            "denyRead" => {
                let (globs, paths): (Vec<String>, Vec<String>) =
                    strings(v).into_iter().partition(|p| p.contains('*'));
                if !paths.is_empty() {
                    secrets.files = Some(paths);
                }
                if !globs.is_empty() {
                    secrets.globs = Some(globs);
                }
                im.note(&field, "masked as secrets (vetto's built-in secret list stays too); everything else outside the project, the system and a few dotfiles is not shown at all, which srt's allow-all reads do not match");
            }
            "allowWrite" => {
                let mut write = vec![];
                for p in strings(v) {
                    if is_project(&p) {
                        fs.project = Some(ProjectAccess::Write);
                    } else if p == "/tmp" || p == "/tmp/" || p == "/private/tmp" {
                        im.note(
                            &field,
                            "/tmp: the sandbox's own /tmp is private and writable already",
                        );
                    } else {
                        write.push(p);
                    }
                }
                if !write.is_empty() {
                    fs.write = Some(write);
                }
            }
            "denyWrite" => {
                let mut protected = vec![];
                for p in strings(v) {
                    let rel = p.strip_prefix("./").unwrap_or(&p).to_string();
                    if rel.starts_with('/') {
                        im.skip(&format!("{field} {p}"), "an absolute path: vetto protects project-relative and `~/` paths (what is not a write root is read-only already)");
                    } else {
                        protected.push(rel);
                    }
                }
                if !protected.is_empty() {
                    fs.protected = Some(protected);
                }
            }
            _ => im.skip(&field, "unknown to this importer"),
        }
    }
    policy.filesystem = Some(fs);
    if secrets.files.is_some() || secrets.globs.is_some() {
        policy.secrets = Some(secrets);
    }
}

/// Anthropic sandbox-runtime settings.
fn srt(v: &Value) -> Imported {
    let mut im = Imported {
        kind: "sandbox-runtime settings",
        ..Default::default()
    };
    let mut policy = PolicyFile {
        network: Some(NetworkSection {
            mode: Some(NetworkMode::Off),
            ..Default::default()
        }),
        ..Default::default()
    };
    for (k, val) in v.as_object().into_iter().flatten() {
        match k.as_str() {
            "network" => policy.network = srt_network(val, &mut im, ""),
            "filesystem" => srt_filesystem(val, &mut im, &mut policy),
            "ignoreViolations" => im.skip(k, "vetto records every refusal in its audit trail; nothing is silenced"),
            "enableWeakerNestedSandbox" => im.skip(k, "vetto has no weaker mode (where namespaces are missing it runs FS-ONLY and says so)"),
            _ => im.skip(k, "unknown to this importer"),
        }
    }
    im.policy = policy;
    im
}

/// The `X(arg)` of a Claude Code permission rule.
fn rule_arg<'a>(rule: &'a str, tool: &str) -> Option<&'a str> {
    rule.strip_prefix(tool)?
        .strip_prefix('(')?
        .strip_suffix(')')
}

/// Claude Code's settings.json.
fn claude(v: &Value) -> Imported {
    let mut im = Imported {
        kind: "Claude Code settings",
        ..Default::default()
    };
    let mut policy = PolicyFile::default();
    let mut net = NetworkSection::default();
    let mut fs = FilesystemSection::default();
    let mut secrets = SecretsSection::default();
    for (k, val) in v.as_object().into_iter().flatten() {
        match k.as_str() {
            "sandbox" => {
                for (sk, sv) in val.as_object().into_iter().flatten() {
                    let field = format!("sandbox.{sk}");
                    match sk.as_str() {
                        "network" => {
                            if let Some(n) = srt_network(sv, &mut im, "sandbox.") {
                                if n.allow.is_some() {
                                    net.allow = n.allow;
                                }
                                if n.deny.is_some() {
                                    net.deny = n.deny;
                                }
                            }
                        }
                        "enabled" => im.note(&field, "vetto always sandboxes"),
                        "autoAllowBashIfSandboxed" | "excludedCommands" | "allowUnsandboxedCommands" => im.skip(&field, "a Claude Code permission choice; under vetto every command the agent runs is sandboxed, none is excluded"),
                        "enableWeakerNestedSandbox" => im.skip(&field, "vetto has no weaker mode"),
                        _ => im.skip(&field, "unknown to this importer"),
                    }
                }
            }
            "permissions" => {
                for (pk, pv) in val.as_object().into_iter().flatten() {
                    for rule in strings(pv) {
                        let field = format!("permissions.{pk} {rule}");
                        match pk.as_str() {
                            "allow" => match rule_arg(&rule, "WebFetch") {
                                Some(a) if a.starts_with("domain:") => {
                                    let d = a.trim_start_matches("domain:").to_string();
                                    let mut list = net.allow.take().unwrap_or_default();
                                    list.extend(domains(&[d], &mut im, &field));
                                    net.allow = Some(list);
                                }
                                _ => im.skip(&field, "a Claude Code tool permission: vetto does not decide which tools the agent may call"),
                            },
                            "deny" => {
                                if let Some(p) = rule_arg(&rule, "Read") {
                                    // Claude Code's paths: `//abs` is absolute, `~/x` in HOME,
                                    // `/x` relative to the settings file (the project's, for a
                                    // project file) and `x` to the working directory: both of
                                    // those are the project here.
                                    let p = match p.strip_prefix("//") {
                                        Some(abs) => format!("/{abs}"),
                                        None => p.trim_start_matches('/').to_string(),
                                    };
                                    let p = p.strip_prefix("./").unwrap_or(&p).replace("**", "*");
                                    let list = if p.contains('*') { &mut secrets.globs } else { &mut secrets.files };
                                    list.get_or_insert_with(Vec::new).push(p);
                                } else if let Some(p) = rule_arg(&rule, "Edit").or(rule_arg(&rule, "Write")) {
                                    let p = p.strip_prefix("./").unwrap_or(p);
                                    if p.starts_with('/') || p.contains('*') {
                                        im.skip(&field, "vetto protects project-relative and `~/` paths, without globs");
                                    } else {
                                        fs.protected.get_or_insert_with(Vec::new).push(p.to_string());
                                    }
                                } else {
                                    im.skip(&field, "a Claude Code tool permission: vetto does not decide which tools the agent may call");
                                }
                            }
                            _ => im.skip(&field, "a Claude Code tool permission: vetto does not decide which tools the agent may call"),
                        }
                    }
                }
            }
            _ => im.skip(k, "a Claude Code setting, not a sandbox one"),
        }
    }
    if net.allow.as_ref().is_some_and(|a| !a.is_empty()) {
        net.mode = Some(NetworkMode::Allowlist);
    }
    if net != NetworkSection::default() {
        policy.network = Some(net);
    }
    if fs != FilesystemSection::default() {
        policy.filesystem = Some(fs);
    }
    if secrets != SecretsSection::default() {
        policy.secrets = Some(secrets);
    }
    im.policy = policy;
    im
}

/// Codex's config.toml.
fn codex(v: &toml::Value) -> Imported {
    let mut im = Imported {
        kind: "Codex config",
        ..Default::default()
    };
    let mut policy = PolicyFile::default();
    let mut fs = FilesystemSection::default();
    let mut net: Option<NetworkSection> = None;
    let mut env = EnvironmentSection::default();
    let mut read_only = false;
    // Codex drops *KEY*, *SECRET*, *TOKEN* variables before include_only unless told not to.
    let default_excludes = !v
        .get("shell_environment_policy")
        .and_then(|p| p.get("ignore_default_excludes"))
        .and_then(toml::Value::as_bool)
        .unwrap_or(false);
    for (k, val) in v.as_table().into_iter().flatten() {
        match k.as_str() {
            "sandbox_mode" => match val.as_str() {
                Some("read-only") => {
                    fs.project = Some(ProjectAccess::Read);
                    read_only = true;
                }
                Some("workspace-write") => fs.project = Some(ProjectAccess::Write),
                Some("danger-full-access") => {
                    fs.project = Some(ProjectAccess::Write);
                    im.skip(k, "danger-full-access (no sandbox): vetto has no such mode; the project is writable, the rest as strict as the profile");
                }
                _ => im.skip(k, "an unknown mode"),
            },
            "sandbox_workspace_write" => {
                for (sk, sv) in val.as_table().into_iter().flatten() {
                    let field = format!("{k}.{sk}");
                    match sk.as_str() {
                        "writable_roots" => {
                            fs.write = Some(
                                sv.as_array()
                                    .into_iter()
                                    .flatten()
                                    .filter_map(|s| s.as_str().map(str::to_string))
                                    .collect(),
                            )
                        }
                        "network_access" => {
                            if sv.as_bool() == Some(true) {
                                net = Some(NetworkSection {
                                    mode: Some(NetworkMode::Allowlist),
                                    allow: Some(vec![]),
                                    ..Default::default()
                                });
                                im.note(&field, "true (any destination): vetto allows nothing unlisted; the mode is allowlist with an empty list, so each destination is asked for (approvals); list the ones you use in `network.allow`");
                            } else {
                                net = Some(NetworkSection {
                                    mode: Some(NetworkMode::Off),
                                    ..Default::default()
                                });
                            }
                        }
                        "exclude_tmpdir_env_var" | "exclude_slash_tmp" => im.skip(&field, "the sandbox's /tmp and TMPDIR are private and writable in vetto"),
                        _ => im.skip(&field, "unknown to this importer"),
                    }
                }
            }
            "shell_environment_policy" => {
                for (sk, sv) in val.as_table().into_iter().flatten() {
                    let field = format!("{k}.{sk}");
                    match sk.as_str() {
                        "set" => {
                            env.set = Some(
                                sv.as_table()
                                    .into_iter()
                                    .flatten()
                                    .filter_map(|(a, b)| Some((a.clone(), b.as_str()?.to_string())))
                                    .collect(),
                            )
                        }
                        "include_only" => {
                            let (mut exact, patterns): (Vec<String>, Vec<String>) = sv
                                .as_array()
                                .into_iter()
                                .flatten()
                                .filter_map(|s| s.as_str().map(str::to_string))
                                .partition(|n| crate::resolve::valid_env_name(n));
                            if default_excludes {
                                exact.retain(|n| {
                                    let u = n.to_ascii_uppercase();
                                    let secret = ["KEY", "SECRET", "TOKEN"].iter().any(|w| u.contains(w));
                                    if secret {
                                        im.unmapped.push((
                                            format!("{field} {n}"),
                                            "Codex drops it (its default excludes *KEY*, *SECRET*, *TOKEN*): not passed either".into(),
                                        ));
                                    }
                                    !secret
                                });
                            }
                            if !exact.is_empty() {
                                env.pass_through = Some(exact);
                            }
                            for p in patterns {
                                im.skip(&format!("{field} {p}"), "a pattern: vetto passes exact names only");
                            }
                        }
                        "inherit" | "exclude" | "ignore_default_excludes" => im.skip(&field, "vetto passes a fixed allowlist (PATH, LANG, TERM, ...) plus the exact names listed, never a secret-looking variable unless named"),
                        _ => im.skip(&field, "unknown to this importer"),
                    }
                }
            }
            "approval_policy" => im.skip(k, "a Codex choice of which commands it asks about; vetto's approvals are for network destinations"),
            _ => im.skip(k, "a Codex setting, not a sandbox one"),
        }
    }
    if read_only {
        // Codex ignores the workspace-write settings in read-only mode: so does the import.
        if fs.write.take().is_some() {
            im.skip(
                "sandbox_workspace_write.writable_roots",
                "ignored by Codex in read-only mode",
            );
        }
        if net.take().is_some() {
            im.skip(
                "sandbox_workspace_write.network_access",
                "ignored by Codex in read-only mode (no network)",
            );
        }
        net = Some(NetworkSection {
            mode: Some(NetworkMode::Off),
            ..Default::default()
        });
    }
    if fs != FilesystemSection::default() {
        policy.filesystem = Some(fs);
    }
    policy.network = net;
    if env != EnvironmentSection::default() {
        policy.environment = Some(env);
    }
    im.policy = policy;
    im
}

/// Import `text` (JSON: sandbox-runtime or Claude Code settings; TOML: Codex config).
pub fn import(text: &str) -> Result<Imported, ImportError> {
    if let Ok(v) = serde_json::from_str::<Value>(text) {
        let obj = v
            .as_object()
            .ok_or_else(|| ImportError::Format("a JSON settings file is an object".into()))?;
        let claude_keys = ["sandbox", "permissions", "env", "hooks", "model", "$schema"];
        return Ok(if obj.keys().any(|k| claude_keys.contains(&k.as_str())) {
            claude(&v)
        } else {
            srt(&v)
        });
    }
    match text.parse::<toml::Value>() {
        Ok(v) => Ok(codex(&v)),
        Err(e) => Err(ImportError::Format(format!(
            "neither JSON (sandbox-runtime or Claude Code settings) nor TOML (Codex config): {e}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roundtrip(im: &Imported) -> PolicyFile {
        let text = im.to_toml("test").expect("toml");
        PolicyFile::parse(&text, "imported").expect("the import parses as a vetto policy")
    }

    #[test]
    fn sandbox_runtime_settings_keep_their_allowlist_and_name_the_rest() {
        let im = import(
            r#"{"network": {"allowedDomains": ["github.com", "*.npmjs.org"], "deniedDomains": ["evil.example"],
                "allowUnixSockets": ["/var/run/docker.sock"], "allowLocalBinding": true},
               "filesystem": {"denyRead": ["~/.ssh", "~/secrets/*.key"], "allowWrite": [".", "/tmp", "~/.cache/x"],
                "denyWrite": [".env", "/etc/hosts"]},
               "ignoreViolations": {}, "somethingNew": 1}"#,
        )
        .expect("import");
        let p = roundtrip(&im);
        let net = p.network.expect("network");
        assert_eq!(net.mode, Some(NetworkMode::Allowlist));
        assert_eq!(
            net.allow.expect("allow"),
            [
                "github.com",
                "github.com:80",
                "*.npmjs.org",
                "*.npmjs.org:80"
            ]
        );
        assert_eq!(net.deny.expect("deny"), ["evil.example"]);
        let fs = p.filesystem.expect("fs");
        assert_eq!(fs.project, Some(ProjectAccess::Write));
        assert_eq!(fs.write.expect("write"), ["~/.cache/x"]);
        assert_eq!(fs.protected.expect("protected"), [".env"]);
        let s = p.secrets.expect("secrets");
        assert_eq!(s.files.expect("files"), ["~/.ssh"]);
        assert_eq!(s.globs.expect("globs"), ["~/secrets/*.key"]);
        let named: Vec<&str> = im.unmapped.iter().map(|(f, _)| f.as_str()).collect();
        for f in [
            "network.allowUnixSockets",
            "network.allowLocalBinding",
            "filesystem.denyWrite /etc/hosts",
            "ignoreViolations",
            "somethingNew",
        ] {
            assert!(named.contains(&f), "{f} not named: {named:?}");
        }
    }

    #[test]
    fn no_write_and_no_domains_is_read_only_and_offline() {
        let p = roundtrip(&import(r#"{"filesystem": {"denyRead": []}}"#).expect("import"));
        assert_eq!(p.network.expect("net").mode, Some(NetworkMode::Off));
        assert_eq!(p.filesystem.expect("fs").project, Some(ProjectAccess::Read));
    }

    #[test]
    fn claude_settings_sandbox_and_permissions() {
        let im = import(
            r#"{"sandbox": {"enabled": true, "excludedCommands": ["docker"], "network": {"allowUnixSockets": ["/x"]}},
               "permissions": {"allow": ["WebFetch(domain:docs.rs)", "Bash(npm test)"],
                               "deny": ["Read(./.env.local)", "Read(~/.aws/**)", "Edit(Makefile)",
                                        "Read(//etc/app/secret)", "Read(/config/key.pem)"]},
               "model": "opus"}"#,
        )
        .expect("import");
        assert_eq!(im.kind, "Claude Code settings");
        let p = roundtrip(&im);
        assert_eq!(
            p.network.expect("net").allow.expect("allow"),
            ["docs.rs", "docs.rs:80"]
        );
        let s = p.secrets.expect("secrets");
        assert_eq!(
            s.files.expect("files"),
            [".env.local", "/etc/app/secret", "config/key.pem"]
        );
        assert_eq!(s.globs.expect("globs"), ["~/.aws/*"]);
        assert_eq!(
            p.filesystem.expect("fs").protected.expect("p"),
            ["Makefile"]
        );
        let named: Vec<&str> = im.unmapped.iter().map(|(f, _)| f.as_str()).collect();
        for f in [
            "sandbox.excludedCommands",
            "sandbox.network.allowUnixSockets",
            "permissions.allow Bash(npm test)",
            "model",
        ] {
            assert!(named.contains(&f), "{f} not named: {named:?}");
        }
    }

    #[test]
    fn codex_config() {
        let im = import(
            "model = \"o3\"\nsandbox_mode = \"workspace-write\"\napproval_policy = \"on-request\"\n\
             [sandbox_workspace_write]\nwritable_roots = [\"/data/out\"]\nnetwork_access = false\nexclude_slash_tmp = true\n\
             [shell_environment_policy]\ninclude_only = [\"PATH\", \"AWS_*\", \"GITHUB_TOKEN\"]\nset = { CI = \"1\" }\n",
        )
        .expect("import");
        assert_eq!(im.kind, "Codex config");
        let p = roundtrip(&im);
        let fs = p.filesystem.expect("fs");
        assert_eq!(fs.project, Some(ProjectAccess::Write));
        assert_eq!(fs.write.expect("write"), ["/data/out"]);
        assert_eq!(p.network.expect("net").mode, Some(NetworkMode::Off));
        let env = p.environment.expect("env");
        assert_eq!(env.pass_through.expect("pass"), ["PATH"]);
        assert_eq!(
            env.set.expect("set").get("CI").map(String::as_str),
            Some("1")
        );
        let named: Vec<&str> = im.unmapped.iter().map(|(f, _)| f.as_str()).collect();
        for f in [
            "model",
            "approval_policy",
            "sandbox_workspace_write.exclude_slash_tmp",
            "shell_environment_policy.include_only AWS_*",
        ] {
            assert!(named.contains(&f), "{f} not named: {named:?}");
        }
    }

    #[test]
    fn codex_read_only_ignores_the_workspace_write_settings() {
        let im = import(
            "sandbox_mode = \"read-only\"\n[sandbox_workspace_write]\nwritable_roots = [\"/data\"]\nnetwork_access = true\n",
        )
        .expect("import");
        let p = roundtrip(&im);
        let fs = p.filesystem.expect("fs");
        assert_eq!(fs.project, Some(ProjectAccess::Read));
        assert!(fs.write.is_none());
        assert_eq!(p.network.expect("net").mode, Some(NetworkMode::Off));
    }

    #[test]
    fn garbage_is_an_error() {
        assert!(import("not [ json or toml").is_err());
        assert!(import("[1, 2]").is_err());
    }
}
