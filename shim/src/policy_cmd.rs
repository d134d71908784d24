//! `vetto policy …` and `vetto trust`: resolving the layers for this host and showing them.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use vetto_bundle::host::HostFacts;
use vetto_bundle::listing::ListingCache;
use vetto_bundle::policy::{
    EnvironmentSection, FilesystemSection, LimitsSection, NetworkMode, NetworkSection, PolicyFile,
};
use vetto_bundle::resolve::{self, Inputs, Layer, Policy, Source, Sourced, TrustContext};
use vetto_bundle::secrets;
use vetto_bundle::translate::{translate, Translation};
use vetto_bundle::trust::TrustStore;

use crate::cli::PolicyArgs;

/// `$XDG_CONFIG_HOME/vetto` (or `~/.config/vetto`), canonical: a HOME or config directory
/// reached through a symlink is compared with the (canonical) project as what it is. Fails
/// when it cannot be resolved.
pub fn config_dir() -> Result<PathBuf> {
    let raw = std::env::var_os("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")))
        .map(|c| c.join("vetto"))
        .context("cannot locate the config directory (set HOME)")?;
    vetto_bundle::host::canonical_beyond(&raw)
        .with_context(|| format!("resolving the config directory {}", raw.display()))
}

/// The trust store, unless it lies inside the project (the sandbox could write it): then an
/// empty one.
pub fn trust_store(project: &Path) -> Result<TrustStore> {
    trust_store_in(&config_dir()?, project)
}

/// [`trust_store`] in an already resolved config directory.
fn trust_store_in(config: &Path, project: &Path) -> Result<TrustStore> {
    let path = config.join("trusted.json");
    if path.starts_with(project) {
        tracing::warn!(store = %path.display(), "trust store lies inside the project; ignoring it");
        return Ok(TrustStore::empty(path));
    }
    Ok(TrustStore::load(&path)?)
}

fn flag_layer(name: &str, file: PolicyFile) -> Layer {
    Layer {
        file,
        source: Source::Flag(name.to_string()),
    }
}

/// Flags as layers, one per flag so `explain` names each.
pub fn flag_layers(a: &PolicyArgs) -> Result<Vec<Layer>> {
    let mut layers = vec![];
    if let Some(acc) = &a.project_access {
        let text = format!("[filesystem]\nproject = {}\n", toml_escape(acc));
        layers.push(flag_layer(
            "--project-access",
            PolicyFile::parse(&text, "--project-access")?,
        ));
    }
    for (name, list, write) in [
        ("--allow-read", &a.allow_read, false),
        ("--allow-write", &a.allow_write, true),
    ] {
        for p in list {
            let fs = if write {
                FilesystemSection {
                    write: Some(vec![p.clone()]),
                    ..Default::default()
                }
            } else {
                FilesystemSection {
                    read: Some(vec![p.clone()]),
                    ..Default::default()
                }
            };
            layers.push(flag_layer(
                name,
                PolicyFile {
                    filesystem: Some(fs),
                    ..Default::default()
                },
            ));
        }
    }
    if !a.pass_env.is_empty() {
        let env = EnvironmentSection {
            pass_through: Some(a.pass_env.clone()),
            set: None,
        };
        layers.push(flag_layer(
            "--pass-env",
            PolicyFile {
                environment: Some(env),
                ..Default::default()
            },
        ));
    }
    if let Some(n) = &a.net {
        let (mode, hosts) = n.split_once(':').unwrap_or((n.as_str(), ""));
        let mode = match mode {
            "off" => NetworkMode::Off,
            "allow" | "allowlist" => NetworkMode::Allowlist,
            "strict" => NetworkMode::Strict,
            other => {
                bail!("--net: unknown mode `{other}` (off, allow:HOSTS, strict:HOSTS)")
            }
        };
        let allow: Vec<String> = hosts
            .split(',')
            .filter(|h| !h.is_empty())
            .map(str::to_string)
            .collect();
        if mode == NetworkMode::Off && !allow.is_empty() {
            bail!("--net off takes no hosts");
        }
        let net = NetworkSection {
            mode: Some(mode),
            allow: Some(allow),
            ..Default::default()
        };
        layers.push(flag_layer(
            "--net",
            PolicyFile {
                network: Some(net),
                ..Default::default()
            },
        ));
    }
    if !a.command_install.is_empty() {
        layers.push(Layer {
            file: PolicyFile {
                filesystem: Some(FilesystemSection {
                    read: Some(a.command_install.clone()),
                    ..Default::default()
                }),
                ..Default::default()
            },
            source: Source::Builtin("the command's installation".into()),
        });
    }
    if !a.cache.is_empty() {
        let fs = FilesystemSection {
            caches: Some(a.cache.clone()),
            ..Default::default()
        };
        layers.push(flag_layer(
            "--cache",
            PolicyFile {
                filesystem: Some(fs),
                ..Default::default()
            },
        ));
    }
    if let Some(w) = &a.wall_clock {
        let l = LimitsSection {
            wall_clock: Some(w.clone()),
            ..Default::default()
        };
        layers.push(flag_layer(
            "--wall-clock",
            PolicyFile {
                limits: Some(l),
                ..Default::default()
            },
        ));
    }
    Ok(layers)
}

fn toml_escape(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Where the user's own agent profiles live.
pub fn user_profiles_dir(config: &Path) -> PathBuf {
    config.join("profiles")
}

/// The agent profile `--agent NAME` names: the user's own file of that name if there is one,
/// else the built-in one; `none` (or no flag): none.
fn agent_input(name: Option<&str>, config: &Path) -> Result<Option<resolve::AgentInput>> {
    let Some(name) = name.filter(|n| *n != "none") else {
        return Ok(None);
    };
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        bail!("--agent {name:?}: a profile name (letters, digits, - and _)");
    }
    let file = user_profiles_dir(config).join(format!("{name}.toml"));
    let user_file = file.exists().then_some(file);
    if user_file.is_none() && vetto_bundle::profiles::agent_text(name).is_none() {
        return Err(vetto_bundle::PolicyError::UnknownAgent(name.to_string()).into());
    }
    Ok(Some(resolve::AgentInput {
        name: name.to_string(),
        user_file,
    }))
}

/// The directories of the policy's state paths (`~/.claude/`, the toolchain caches) that do
/// not exist yet, created (0700) so the sandbox's writes persist. Only under HOME (the policy
/// checks that), only for `vetto run`.
pub fn create_state_dirs(policy: &Policy, home: &Path, keep_out: &[PathBuf]) -> Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    for st in &policy.state {
        let dir = st.value.ends_with('/');
        if !dir && !vetto_bundle::presets::is_preset_file(&st.value) {
            continue;
        }
        let p = vetto_bundle::policy::expand_path(st.value.trim_end_matches('/'), home, home)?;
        // Never in or around vetto's own configuration and audit store (the translation
        // refuses such a state path; nothing is made for it first).
        let canon = vetto_bundle::host::canonical_beyond(&p)?;
        if p.symlink_metadata().is_ok()
            || keep_out
                .iter()
                .any(|k| canon.starts_with(k) || k.starts_with(&canon))
        {
            continue;
        }
        if dir {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(&p)
                .with_context(|| format!("filesystem.state: creating {}", p.display()))?;
        } else {
            if let Some(parent) = p.parent() {
                std::fs::DirBuilder::new()
                    .recursive(true)
                    .mode(0o700)
                    .create(parent)
                    .with_context(|| format!("filesystem.state: creating {}", parent.display()))?;
            }
            std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&p)
                .with_context(|| format!("filesystem.state: creating {}", p.display()))?;
        }
    }
    Ok(())
}

/// `vetto profiles list`.
pub fn profiles_list() -> Result<()> {
    for (name, text) in vetto_bundle::profiles::PROFILES {
        println!("base     {name:<12} {}", first_comment(text));
    }
    for (name, text) in vetto_bundle::profiles::AGENTS {
        println!("agent    {name:<12} {}", first_comment(text));
    }
    let dir = user_profiles_dir(&config_dir()?);
    let mut own: Vec<(String, String)> = std::fs::read_dir(&dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let p = e.path();
            let name = p.file_stem()?.to_str()?.to_string();
            (p.extension()? == "toml").then_some(())?;
            let what = match PolicyFile::load(&p) {
                Ok(f) => match f.extends {
                    Some(b) => format!("extends {b} ({})", p.display()),
                    None => p.display().to_string(),
                },
                Err(e) => format!("INVALID: {e}"),
            };
            Some((name, what))
        })
        .collect();
    own.sort();
    for (name, what) in own {
        println!("yours    {name:<12} {what}");
    }
    Ok(())
}

fn first_comment(text: &str) -> &str {
    text.lines()
        .next()
        .and_then(|l| l.strip_prefix("# "))
        .unwrap_or("")
        .trim_end_matches('.')
}

/// `vetto profiles show NAME`.
pub fn profiles_show(name: &str) -> Result<()> {
    if let Some(t) = vetto_bundle::profiles::text(name) {
        print!("{t}");
        return Ok(());
    }
    let file = user_profiles_dir(&config_dir()?).join(format!("{name}.toml"));
    if file.exists() {
        let own = std::fs::read_to_string(&file)
            .with_context(|| format!("reading {}", file.display()))?;
        if let Some(base) = PolicyFile::parse(&own, &file.display().to_string())?.extends {
            match vetto_bundle::profiles::agent_text(&base) {
                Some(t) => println!("# --- built-in agent profile \"{base}\" ---\n{t}"),
                None => bail!("{}: extends unknown agent profile `{base}`", file.display()),
            }
        }
        print!("# --- {} ---\n{own}", file.display());
        return Ok(());
    }
    match vetto_bundle::profiles::agent_text(name) {
        Some(t) => print!("{t}"),
        None => return Err(vetto_bundle::PolicyError::UnknownProfile(name.to_string()).into()),
    }
    Ok(())
}

/// `vetto policy import FILE [--out FILE]`.
pub fn import(file: &Path, out: Option<&Path>) -> Result<()> {
    let text =
        std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
    let im = vetto_bundle::import::import(&text)
        .map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?;
    let toml = im
        .to_toml(&file.display().to_string())
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    // What it writes is a policy vetto reads back: checked here, not by the user later.
    PolicyFile::parse(&toml, "the imported policy")?;
    for (f, why) in &im.unmapped {
        eprintln!("vetto: not mapped: {f}: {why}");
    }
    match out {
        None => print!("{toml}"),
        Some(o) => {
            use std::io::Write;
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(o)
                .with_context(|| format!("writing {} (it must not exist yet)", o.display()))?;
            f.write_all(toml.as_bytes())
                .with_context(|| format!("writing {}", o.display()))?;
            eprintln!(
                "vetto: wrote {} ({}, {} field(s) not mapped); `vetto policy explain --policy {}` shows what it does",
                o.display(),
                im.kind,
                im.unmapped.len(),
                o.display()
            );
        }
    }
    Ok(())
}

/// Resolve the policy for this host from the arguments.
pub fn resolve_policy(a: &PolicyArgs, facts: &HostFacts) -> Result<Policy> {
    let config = config_dir()?;
    let user_file = if a.no_user_policy {
        None
    } else {
        Some(config.join("policy.toml")).filter(|p| p.exists())
    };
    let inputs = Inputs {
        profile_flag: a.profile.clone(),
        user_file,
        policy_file: a.policy.clone(),
        flags: flag_layers(a)?,
        agent: agent_input(a.agent.as_deref(), &config)?,
    };
    let store = trust_store_in(&config, &facts.project)?;
    Ok(resolve::resolve(
        &inputs,
        &TrustContext {
            project: &facts.project,
            home: &facts.home,
            store: &store,
        },
    )?)
}

/// One of vetto's private directories as a secret pattern, if it exists (`vetto run` makes it
/// before planning). A project inside it is refused (`why`): it cannot be hidden from a
/// sandbox that is given it. `what` names it in `explain`.
fn private_mask(
    dir: Option<PathBuf>,
    project: &Path,
    what: &str,
    why: &str,
) -> Result<Option<Sourced<String>>> {
    let Some(Ok(dir)) = dir.map(|d| d.canonicalize()) else {
        return Ok(None);
    };
    if project.starts_with(&dir) {
        anyhow::bail!(
            "the project {} is inside {what} {}: {why}",
            project.display(),
            dir.display()
        );
    }
    Ok(Some(Sourced {
        value: dir.display().to_string(),
        source: Source::Builtin(what.into()),
    }))
}

/// Facts, policy, secret scan and translation, for `explain` and `run`. Review mode's layers
/// are shown as a change set that does not exist yet (`vetto run` makes it: [`build_with`]).
pub fn build(a: &PolicyArgs, id: &str) -> Result<(HostFacts, Policy, Translation)> {
    let (facts, policy, t, _) = build_with(a, id, &mut |_, _| {
        let base = crate::changes::dir()
            .map(|d| d.join("NEW"))
            .unwrap_or_else(|| PathBuf::from("NEW"));
        Ok(vetto_bundle::host::ReviewLayers {
            upper: base.join("upper"),
            work: base.join("work"),
        })
    })?;
    Ok((facts, policy, t))
}

/// Review mode's layers for a policy and host: made (or resumed) by the caller.
pub type ReviewSetup<'a> =
    dyn FnMut(&HostFacts, &Policy) -> Result<vetto_bundle::host::ReviewLayers> + 'a;

/// [`build`], with `review` asked for the overlay's layers when the policy's project access is
/// `review`. Also the project walk's listing cache, ready for a second walk at the session's
/// end ([`ListingCache::into_next_walk`]: the file is not read again; when the walk's record
/// stood in for this walk, nothing was read, and the later walk reads it only if its own
/// record does not hold).
pub fn build_with(
    a: &PolicyArgs,
    id: &str,
    review: &mut ReviewSetup<'_>,
) -> Result<(HostFacts, Policy, Translation, ListingCache)> {
    let mut facts = HostFacts::gather(a.project.as_deref())?;
    facts.landlock_abi = vetto_hooks::landlock::abi_version();
    facts.host_private.push(config_dir()?);
    let policy = resolve_policy(a, &facts)?;
    crate::netcheck::validate_network(&policy)?;
    let review_mode = policy.project.value == vetto_bundle::policy::ProjectAccess::Review;
    if review_mode && id == "run" {
        // Made now, so that it is masked and sealed below like any existing one.
        crate::changes::base_dir()?;
    }
    // vetto's audit store and its key, and review mode's change sets (every session's): masked
    // wherever a bind would show them, and no `write` root may hold them (a rename of an
    // ancestor would carry them away, and a sandbox could plant a change set in their place).
    let audit = private_mask(
        vetto_broker::audit::user_dir(),
        &facts.project,
        "vetto's audit store",
        "the sandbox would reach the store and its key",
    )?;
    let changes = private_mask(
        crate::changes::dir(),
        &facts.project,
        "vetto's change sets",
        "run vetto from the project itself, and apply a change set with `vetto changes apply`",
    )?;
    for m in audit.iter().chain(&changes) {
        facts.host_sealed.push(PathBuf::from(&m.value));
    }
    if id == "run" {
        let keep_out: Vec<PathBuf> = facts
            .host_private
            .iter()
            .chain(&facts.host_sealed)
            .cloned()
            .collect();
        create_state_dirs(&policy, &facts.home, &keep_out)?;
    }
    let mut patterns = policy.secret_patterns();
    patterns.extend(audit.as_ref());
    patterns.extend(changes.as_ref());
    let mut listings = crate::session::listing_cache(facts.uid, &facts.project);
    let scan =
        secrets::scan_project_cached(&patterns, &facts.home, &facts.project, true, &mut listings)?;
    if let Err(e) = listings.save() {
        tracing::debug!(error = %e, "the project's listing cache was not saved");
    }
    tracing::debug!(
        reused = listings.hits,
        read = listings.misses,
        unopened = listings.unopened,
        leaf_verdicts = listings.leaf_verdicts,
        walk_record = listings.walk_record,
        "project walk: directory listings"
    );
    for g in &scan.git_entries {
        facts
            .git_metadata
            .extend(vetto_bundle::gitmeta::metadata_paths(g));
        let (present, absent) = vetto_bundle::gitmeta::config_references(g);
        facts.git_metadata.extend(present);
        facts.git_absent.extend(absent);
    }
    facts.git_metadata.sort();
    facts.git_metadata.dedup();
    facts.git_absent.sort();
    facts.git_absent.dedup();
    // Review mode's change set, once the repositories' metadata is known (it is what the set
    // flags as trust-handoff).
    if review_mode {
        facts.review = Some(review(&facts, &policy)?);
    }
    let t = translate(&policy, &facts, &scan.secrets, id)?;
    Ok((facts, policy, t, listings.into_next_walk()))
}

/// `vetto policy check [FILE]`.
pub fn check(file: Option<&Path>, a: &PolicyArgs) -> Result<()> {
    match file {
        Some(f) => {
            let pf = PolicyFile::load(f)?;
            // Values (durations, sizes, ports) are checked by merging over the profile.
            let profile = pf.profile.clone().unwrap_or_else(|| "default".into());
            let base = vetto_bundle::profiles::load(&profile)?;
            let merged = resolve::merge(
                &profile,
                &[
                    Layer {
                        file: base,
                        source: Source::Builtin("profile".into()),
                    },
                    Layer {
                        file: pf,
                        source: Source::PolicyFile(f.to_path_buf()),
                    },
                ],
            )?;
            crate::netcheck::validate_network(&merged)?;
            println!("ok: {}", f.display());
        }
        None => {
            let facts = HostFacts::gather(a.project.as_deref())?;
            let p = resolve_policy(a, &facts)?;
            crate::netcheck::validate_network(&p)?;
            println!("ok: profile {} with {} file(s)", p.profile, p.files.len());
        }
    }
    Ok(())
}

/// `vetto policy explain`.
pub fn explain(a: &PolicyArgs, json: bool) -> Result<()> {
    let (facts, policy, t) = build(a, "explain")?;
    let rules = persistent_rules(&facts.project)?;
    if json {
        let v = serde_json::json!({
            "approvals": rules,
            "profile": policy.profile,
            "project": facts.project,
            "landlock_abi": facts.landlock_abi,
            "policy": policy,
            "explain": t.explain,
            "plan": t.plan,
            "config": t.spec,
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    println!(
        "profile: {}    project: {}    landlock ABI: {}",
        policy.profile,
        facts.project.display(),
        facts
            .landlock_abi
            .map_or("unavailable".to_string(), |a| a.to_string())
    );
    let mut last = String::new();
    for e in &t.explain {
        if e.category != last {
            println!("\n{}:", e.category);
            last = e.category.clone();
        }
        println!("  {:<40} {}  [{}]", e.item, e.detail, e.source);
    }
    println!("\npersistent approvals for this project (`vetto approvals list --all`):");
    if rules.is_empty() {
        println!("  none");
    }
    for r in &rules {
        println!(
            "  {:<40} {}  [rule {} by {}, {}; {}]",
            r.destination,
            match r.verdict {
                vetto_broker::approvals::Verdict::Grant => "granted (skips asking)",
                vetto_broker::approvals::Verdict::Deny =>
                    "denied (refused without asking, even if allowlisted)",
            },
            r.id,
            r.created_by,
            vetto_broker::audit::event::rfc3339(r.created_ms),
            r.origin
        );
    }
    Ok(())
}

/// The persistent grants and denials that apply to `project` (none if the store does not
/// exist yet: explain creates nothing).
fn persistent_rules(project: &Path) -> Result<Vec<vetto_broker::approvals::Rule>> {
    let path = crate::approvals_cmd::store_path(false)?;
    if !path.exists() {
        return Ok(vec![]);
    }
    let store = vetto_broker::approvals::RuleStore::open(&path)
        .map_err(|e| anyhow::anyhow!(vetto_broker::error_chain(&e)))?;
    store
        .rules(Some(&format!("project {}", project.display())))
        .map_err(|e| anyhow::anyhow!(vetto_broker::error_chain(&e)))
}

/// `vetto trust FILE`.
pub fn trust(file: &Path) -> Result<()> {
    let canon = file
        .canonicalize()
        .with_context(|| format!("cannot resolve {}", file.display()))?;
    PolicyFile::load(&canon)?;
    let cwd = std::env::current_dir()?;
    let mut store = trust_store(&cwd)?;
    if store.path().starts_with(&cwd) {
        bail!("the trust store {} lies inside this directory; run vetto trust from outside the project", store.path().display());
    }
    let digest = store.record(&canon)?;
    store.save()?;
    println!(
        "trusted {} (sha256 {digest}) in {}",
        canon.display(),
        store.path().display()
    );
    Ok(())
}
