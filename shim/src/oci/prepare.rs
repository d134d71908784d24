//! `create`'s first half: read the caller's bundle, choose the policy, harden a copy of
//! `config.json`, compile the seccomp filters, and write the copy (the "shadow bundle") and
//! vetto's own record of the container under the state root. libcontainer is then pointed at
//! the shadow bundle; the caller's bundle is never modified.
//!
//! State layout under `--root`: `<id>/` is libcontainer's; `.vetto/<id>/config.json` is the
//! shadow bundle and `.vetto/<id>/vetto.json` the [`ShimState`].

use std::collections::HashMap;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use libcontainer::oci_spec::runtime::{LinuxSeccomp, Spec};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use vetto_broker::audit::event::{Engine, SessionStart};
use vetto_bundle::container::{
    self, ContainerError, ContainerPlan, OwnPlaces, NO_POLICY, POLICY_ANNOTATION,
};
use vetto_bundle::resolve::Policy;
use vetto_bundle::translate::environment::{self, EnvOrigin, EnvVerdict};
use vetto_hooks::apply::{Capabilities, Filter, Hardening, Network};
use vetto_hooks::oci_seccomp;
use vetto_hooks::process::{self, CapSets};

use super::audit::{self, AuditTable, Session};
use super::log::Logger;
use super::OciError;

/// The host's defaults, `/etc/vetto/shim.toml` (or `$VETTO_SHIM_CONFIG`).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostConfig {
    /// Policy for containers without the annotation: a profile name or an absolute path.
    pub default_policy: Option<String>,
    /// Every container gets a policy: the annotation cannot turn it off or pick another one
    /// than `default_policy`.
    #[serde(default)]
    pub require_policy: bool,
    /// Where policy files named by an annotation must lie (default `/etc/vetto/policies`).
    pub policy_dir: Option<String>,
    /// `[audit]`: where hardened containers are recorded.
    #[serde(default)]
    pub audit: AuditTable,
}

/// The host configuration file's path.
pub fn host_config_path() -> PathBuf {
    std::env::var_os("VETTO_SHIM_CONFIG")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/etc/vetto/shim.toml"))
}

impl HostConfig {
    /// Loads the file if it exists; a malformed file is an error naming it.
    pub fn load() -> Result<HostConfig, OciError> {
        let path = host_config_path();
        match std::fs::read_to_string(&path) {
            Ok(text) => {
                let c: HostConfig = toml::from_str(&text).map_err(|e| {
                    OciError::Config(format!("{}: {}", path.display(), e.message().trim()))
                })?;
                c.audit
                    .check()
                    .map_err(|e| OciError::Config(format!("{}: {e}", path.display())))?;
                Ok(c)
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(HostConfig::default()),
            Err(e) => Err(OciError::Io {
                what: "reading the host configuration",
                path,
                source: e,
            }),
        }
    }
}

/// vetto's record of one container (`.vetto/<id>/vetto.json`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ShimState {
    /// The caller's bundle directory.
    pub bundle: PathBuf,
    /// The root filesystem (absolute).
    pub rootfs: PathBuf,
    /// The hardening applied, if any.
    pub plan: Option<ContainerPlan>,
    /// The bundle's own seccomp profile.
    pub seccomp: Option<LinuxSeccomp>,
    /// The init's capabilities were widened to install the profile; it narrows back to these.
    pub restore_caps: Option<CapSets>,
    /// The policy's network mode (`off`, `allowlist`, `strict`).
    #[serde(default)]
    pub network_mode: String,
    /// The network broker's pid, when one was attached.
    #[serde(default)]
    pub broker_pid: Option<i32>,
    /// The init's pid and start time (clock ticks since boot) when it was created: what a
    /// later command reads back as the container's pid must still be that process.
    #[serde(default)]
    pub init: Option<(i32, u64)>,
    /// The audit session of a hardened container (set once `session_start` is recorded).
    #[serde(default)]
    pub audit: Option<Session>,
    /// The container's cgroup, as a cgroupfs path from the hierarchies' roots, when this
    /// runtime made it there (not a systemd scope, not a rootless read-only view): what a
    /// `delete --force` that could not go through libcontainer removes ([`remove_cgroup`]).
    #[serde(default)]
    pub cgroup: Option<String>,
}

/// A state file this runtime reads back must be what it wrote: a regular file (not a symlink)
/// owned by this runtime's uid and writable by nobody else, in a directory likewise. A file
/// that is absent is left to the caller (not found).
pub fn private_file(path: &Path) -> Result<(), OciError> {
    use std::os::unix::fs::MetadataExt;
    let me = nix::unistd::geteuid().as_raw();
    let bad = |what: &str| {
        OciError::Config(format!(
            "state file {}: {what}; it was not written by this runtime, refusing to use it",
            path.display()
        ))
    };
    for (p, dir) in [(path, false), (path.parent().unwrap_or(path), true)] {
        match std::fs::symlink_metadata(p) {
            Ok(m) => {
                if m.file_type().is_symlink() || m.is_dir() != dir {
                    return Err(bad("not a plain file in a plain directory"));
                }
                if m.uid() != me || m.mode() & 0o022 != 0 {
                    return Err(bad(&format!(
                        "owned by uid {} with mode {:o}",
                        m.uid(),
                        m.mode() & 0o7777
                    )));
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => {
                return Err(OciError::Io {
                    what: "checking a state file",
                    path: p.to_path_buf(),
                    source: e,
                })
            }
        }
    }
    Ok(())
}

/// vetto's directory for one container.
pub fn shim_dir(root: &Path, id: &str) -> PathBuf {
    root.join(".vetto").join(id)
}

impl ShimState {
    /// Reads the record of `id`.
    pub fn load(root: &Path, id: &str) -> Result<ShimState, OciError> {
        let path = shim_dir(root, id).join("vetto.json");
        private_file(&path)?;
        let text = std::fs::read_to_string(&path).map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                OciError::NotFound(id.to_string())
            } else {
                OciError::Io {
                    what: "reading the container record",
                    path: path.clone(),
                    source: e,
                }
            }
        })?;
        serde_json::from_str(&text)
            .map_err(|e| OciError::Config(format!("{}: {e}", path.display())))
    }

    /// Rewrites the record of `id`.
    pub fn save(&self, root: &Path, id: &str) -> Result<(), OciError> {
        let path = shim_dir(root, id).join("vetto.json");
        let body = serde_json::to_vec_pretty(self).map_err(|e| OciError::Config(e.to_string()))?;
        let tmp = path.with_extension("json.tmp");
        std::fs::write(&tmp, body)
            .and_then(|()| std::fs::rename(&tmp, &path))
            .map_err(|source| OciError::Io {
                what: "writing the container record",
                path,
                source,
            })
    }

    /// What the init or an `exec`'d process applies ([`vetto_hooks::apply`]): the bind
    /// checks, the network check, Landlock (hardened), the bundle's profile then vetto's
    /// deny-list, and the capabilities narrowed back after the profile if they were widened
    /// to install it. Filters are compiled here, in the runtime process: a bad profile fails
    /// before anything is cloned.
    pub fn hardening(&self) -> Result<Hardening, OciError> {
        let mut filters = vec![];
        if let Some(p) = &self.seccomp {
            filters.push(Filter::OciProfile(oci_seccomp::compile(p)?));
        }
        let plan = self.plan.as_ref();
        if let Some(p) = plan {
            filters.push(Filter::DenyList(vetto_hooks::seccomp::compile(&p.seccomp)?));
        }
        Ok(Hardening {
            binds: plan.map(|p| p.binds.clone()).unwrap_or_default(),
            netns: None,
            network: match plan.is_some_and(|p| p.loopback_only) {
                true => Network::LoopbackOnly(self.network_mode.clone()),
                false => Network::Untouched,
            },
            landlock: plan.map(|p| p.landlock.clone()),
            capabilities: match self.restore_caps {
                Some(t) => Capabilities::NarrowAfterFilters(t),
                None => Capabilities::AsSet,
            },
            filters,
            ..Hardening::default()
        })
    }
}

fn canonical_selector(sel: &str) -> String {
    if sel.starts_with('/') {
        if let Ok(p) = Path::new(sel).canonicalize() {
            return p.display().to_string();
        }
    }
    sel.to_string()
}

/// Where annotation-named policy files must live unless the host says otherwise.
pub const DEFAULT_POLICY_DIR: &str = "/etc/vetto/policies";

fn check_selector(sel: &str) -> Result<(), OciError> {
    if !sel.starts_with('/') && (sel.contains('/') || vetto_bundle::profiles::text(sel).is_none()) {
        return Err(OciError::Config(format!(
            "{POLICY_ANNOTATION}={sel:?}: not a profile ({}) nor an absolute path",
            vetto_bundle::profiles::PROFILES
                .iter()
                .map(|(n, _)| *n)
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    if sel.starts_with('/') {
        check_host_owned(Path::new(sel))?;
    }
    Ok(())
}

/// Which policy applies. The host decides, the annotation only chooses where the host lets it:
/// - `--vetto-policy P` (the runtime entry's own arguments): P; an annotation naming anything
///   else, `none` included, is refused;
/// - `require_policy = true` in the host configuration: the annotation must agree with
///   `default_policy` when there is one, and cannot be `none`; with neither, the container is
///   refused;
/// - otherwise: the annotation (`none` turns hardening off), else `default_policy`, else none.
///
/// A policy file named by an annotation must lie in the host's policy directory
/// (`policy_dir`, `--vetto-policy-dir`, default [`DEFAULT_POLICY_DIR`]); every file named
/// by path must be host-owned (see [`check_host_owned`]).
pub fn select_policy(
    annotations: Option<&serde_json::Map<String, Value>>,
    host: &HostConfig,
    runtime_policy: Option<&str>,
    policy_dir: &Path,
) -> Result<Option<String>, OciError> {
    let asked = annotations
        .and_then(|a| a.get(POLICY_ANNOTATION))
        .map(|v| {
            v.as_str().map(str::to_string).ok_or_else(|| {
                OciError::Config(format!("annotation {POLICY_ANNOTATION} is not a string"))
            })
        })
        .transpose()?;
    let conflict = |fixed: &str, why: &str, a: &str| {
        OciError::Config(format!(
            "annotation {POLICY_ANNOTATION}={a}: this runtime requires a policy and uses \"{fixed}\" ({why})"
        ))
    };
    if let Some(fixed) = runtime_policy {
        if let Some(a) = asked.as_deref().filter(|a| *a != fixed) {
            return Err(conflict(fixed, "--vetto-policy", a));
        }
        check_selector(fixed)?;
        return Ok(Some(canonical_selector(fixed)));
    }
    let conf = host_config_path().display().to_string();
    let chosen = match (asked, host.require_policy, &host.default_policy) {
        (Some(a), true, _) if a == NO_POLICY => {
            return Err(OciError::Config(format!(
                "annotation {POLICY_ANNOTATION}={NO_POLICY}: this host requires a policy (require_policy in {conf})"
            )))
        }
        (Some(a), true, Some(d)) if &a != d => return Err(conflict(d, &conf, &a)),
        (None, true, None) => {
            return Err(OciError::Config(format!(
                "no {POLICY_ANNOTATION} annotation, and this host requires a policy (require_policy in {conf}, no default_policy)"
            )))
        }
        (Some(a), _, _) if a == NO_POLICY => None,
        (Some(a), _, _) => {
            if a.starts_with('/') {
                let dir = policy_dir.canonicalize().unwrap_or_else(|_| policy_dir.to_path_buf());
                let real = Path::new(&a).canonicalize().ok();
                if !real.is_some_and(|r| r.starts_with(&dir)) {
                    return Err(OciError::Config(format!(
                        "annotation {POLICY_ANNOTATION}={a}: a policy file named by an annotation must be in the host's policy directory {}",
                        dir.display()
                    )));
                }
            }
            Some(a)
        }
        (None, _, d) => d.clone(),
    };
    if let Some(sel) = &chosen {
        check_selector(sel)?;
    }
    // The checked file is the loaded file: a path is returned resolved.
    Ok(chosen.map(|c| canonical_selector(&c)))
}

/// A policy file named by path must be one the host controls: a regular file owned by root
/// (or the runtime's user), not writable by group or others, and so is every directory above
/// it (a world-writable directory only with the sticky bit, like `/tmp`).
fn check_host_owned(path: &Path) -> Result<(), OciError> {
    let me = nix::unistd::geteuid().as_raw();
    let bad = |why: String| OciError::Config(format!("policy file {}: {why}", path.display()));
    let real = path.canonicalize().map_err(|e| bad(e.to_string()))?;
    let meta = std::fs::metadata(&real).map_err(|e| bad(e.to_string()))?;
    if !meta.is_file() {
        return Err(bad("not a regular file".into()));
    }
    let mut here: Option<&Path> = Some(&real);
    while let Some(p) = here {
        let m = std::fs::metadata(p).map_err(|e| bad(format!("{}: {e}", p.display())))?;
        let what = if p == real {
            "the file".to_string()
        } else {
            format!("directory {}", p.display())
        };
        if m.uid() != 0 && m.uid() != me {
            return Err(bad(format!(
                "{what} is owned by uid {}, not by the host",
                m.uid()
            )));
        }
        let sticky = m.permissions().mode() & 0o1000 != 0;
        let mode = m.permissions().mode();
        let sticky_root_dir = m.is_dir() && sticky && m.uid() == 0;
        if mode & 0o022 != 0 && !sticky_root_dir {
            return Err(bad(format!("{what} is writable by group or others")));
        }
        here = p.parent();
    }
    Ok(())
}

/// Reads and parses a JSON file handed over by the caller; errors name the file (and the
/// line and column of a syntax error).
pub fn read_json(path: &Path, what: &'static str) -> Result<Value, OciError> {
    let text = std::fs::read_to_string(path).map_err(|source| OciError::Io {
        what,
        path: path.to_path_buf(),
        source,
    })?;
    serde_json::from_str(&text).map_err(|e| OciError::Config(format!("{}: {e}", path.display())))
}

fn home_dir() -> PathBuf {
    std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/root"))
}

/// Does a `capabilities` object hold `cap` in its bounding, effective and permitted sets?
/// (No object at all: libcontainer leaves the process's capabilities as they are: all.)
pub fn caps_hold(caps: Option<&Value>, cap: &str) -> bool {
    let Some(caps) = caps else {
        return true;
    };
    ["bounding", "effective", "permitted"].iter().all(|set| {
        caps.get(*set)
            .and_then(Value::as_array)
            .is_some_and(|a| a.iter().any(|c| c == cap))
    })
}

/// A `capabilities` object as bit masks; unknown names are an error naming them.
pub fn cap_sets(caps: &Value) -> Result<CapSets, OciError> {
    let mask = |set: &str| -> Result<u64, OciError> {
        let mut m = 0;
        for c in caps
            .get(set)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let name = c.as_str().unwrap_or("");
            m |= process::cap_bit(name).ok_or_else(|| {
                OciError::Config(format!(
                    "process.capabilities.{set}: unknown capability {c}"
                ))
            })?;
        }
        Ok(m)
    };
    Ok(CapSets {
        bounding: mask("bounding")?,
        effective: mask("effective")?,
        permitted: mask("permitted")?,
        inheritable: mask("inheritable")?,
    })
}

/// Lets libcontainer leave `CAP_SYS_ADMIN` (to install the seccomp profile without
/// `no_new_privs`, as runc does before it drops capabilities) and `CAP_SETPCAP` (to drop
/// them from the bounding set again) with the process; the init narrows back to the
/// bundle's own sets right after installing the filters, before `execve`.
fn widen_for_seccomp(caps: &mut Value) {
    for set in ["bounding", "effective", "permitted"] {
        if let Some(a) = caps.get_mut(set).and_then(Value::as_array_mut) {
            for cap in ["CAP_SYS_ADMIN", "CAP_SETPCAP"] {
                if !a.iter().any(|c| c == cap) {
                    a.push(Value::String(cap.into()));
                }
            }
        } else if let Some(o) = caps.as_object_mut() {
            o.insert(
                set.into(),
                serde_json::json!(["CAP_SYS_ADMIN", "CAP_SETPCAP"]),
            );
        }
    }
}

/// For a process (the init's or an `exec`'s) of a container with a seccomp profile: if it has
/// neither `no_new_privs` nor `CAP_SYS_ADMIN`, widen its capabilities for the filter's sake
/// and return the sets the init must narrow back to.
pub fn prepare_caps_for_seccomp(process: &mut Value) -> Result<Option<CapSets>, OciError> {
    let nnp = process.get("noNewPrivileges").and_then(Value::as_bool) == Some(true);
    if nnp || caps_hold(process.get("capabilities"), "CAP_SYS_ADMIN") {
        return Ok(None);
    }
    let Some(caps) = process.get_mut("capabilities") else {
        return Ok(None);
    };
    let original = cap_sets(caps)?;
    widen_for_seccomp(caps);
    Ok(Some(original))
}

/// What `create` hands libcontainer.
pub struct Prepared {
    /// The shadow bundle directory.
    pub dir: PathBuf,
    /// vetto's record.
    pub state: ShimState,
    /// What the init applies.
    pub hardening: Hardening,
    /// The policy applied (for the log).
    pub summary: String,
    /// A hardened, audited container: its session (to be kept in the record) and the
    /// `session_start` to record once libcontainer has created it.
    pub audit: Option<(Session, SessionStart)>,
    /// The approvals store (persistent grants, parked requests), beside the audit store and
    /// sealed from containers with it.
    pub approvals_db: Option<PathBuf>,
    /// `linux.resources.memory.disableOOMKiller`, which libcontainer does not apply: the
    /// memory resources to apply again with it once the cgroup exists.
    pub disable_oom_killer: Option<oci_spec::runtime::LinuxResources>,
    /// libcontainer's systemd cgroup manager (`--systemd-cgroup` on a cgroup v2 host).
    pub systemd: bool,
    /// The claim on the container's cgroup, from the check that it is empty: to be released
    /// once libcontainer has put the init in it (or failed).
    pub claim: Option<super::claim::Claim>,
}

fn write_private(path: &Path, bytes: &[u8]) -> Result<(), OciError> {
    use std::io::Write;
    let io = |source| OciError::Io {
        what: "writing the shadow bundle",
        path: path.to_path_buf(),
        source,
    };
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(io)?;
    f.write_all(bytes).map_err(io)
}

/// Which policy applies and the bundle hardened with it: every error here is the bundle or
/// its policy refused (but a failed secret scan).
fn choose_and_harden(
    spec: &mut Value,
    host: &HostConfig,
    runtime_policy: Option<&str>,
    policy_dir: &Path,
    own: &OwnPlaces,
) -> Result<Option<(ContainerPlan, Policy)>, OciError> {
    let selector = select_policy(
        spec.get("annotations").and_then(Value::as_object),
        host,
        runtime_policy,
        policy_dir,
    )?;
    let Some(sel) = selector else {
        return Ok(None);
    };
    let policy = container::resolve_host_policy(&sel)?;
    let plan = container::harden(spec, &policy, &sel, &home_dir(), own)?;
    Ok(Some((plan, policy)))
}

/// Is this error of [`choose_and_harden`] a refusal (recorded as one)?
fn is_refusal(e: &OciError) -> bool {
    !matches!(e, OciError::Container(ContainerError::Translate(_)))
}

/// Reads and hardens the caller's bundle, writes the shadow bundle. A refused bundle is
/// recorded as a `refusal` (best effort) before the error is returned.
pub fn prepare(
    id: &str,
    bundle: &Path,
    root: &Path,
    runtime_policy: Option<&str>,
    policy_dir: Option<&Path>,
    cgroups: super::Cgroups,
    log: &Logger,
) -> Result<Prepared, OciError> {
    let bundle = bundle.canonicalize().map_err(|source| OciError::Io {
        what: "opening the bundle",
        path: bundle.to_path_buf(),
        source,
    })?;
    let cfg_path = bundle.join("config.json");
    let mut spec = read_json(&cfg_path, "reading the bundle's config.json")?;
    // The typed model libcontainer will use must accept it too.
    let typed: Spec = serde_json::from_value(spec.clone())
        .map_err(|e| OciError::Config(format!("{}: {e}", cfg_path.display())))?;

    let host = HostConfig::load()?;
    let dir = policy_dir
        .map(Path::to_path_buf)
        .or_else(|| host.policy_dir.as_ref().map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from(DEFAULT_POLICY_DIR));
    let rootless = super::rootless();
    // The audit store's directory: no hardened container may see it (enabled or not).
    let sealed = host
        .audit
        .store_path(rootless)
        .and_then(|s| s.parent().map(Path::to_path_buf))
        .map(|d| (d, "the audit store".to_string()));
    let approvals_db = sealed.as_ref().map(|(d, _)| d.join("approvals.db"));
    let own = OwnPlaces {
        state_roots: vec![root.to_path_buf()],
        sealed: sealed.into_iter().collect(),
    };
    let argv: Vec<String> = spec
        .pointer("/process/args")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|x| x.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    let engine = Engine::Shim {
        container: id.to_string(),
        driver: audit::driver(spec.get("annotations").and_then(Value::as_object), &bundle),
    };
    let session = crate::session::new_id();
    let (plan, policy) = match choose_and_harden(&mut spec, &host, runtime_policy, &dir, &own) {
        Ok(Some((plan, policy))) => (Some(plan), Some(policy)),
        Ok(None) => (None, None),
        Err(e) => {
            if is_refusal(&e) {
                match host.audit.config(rootless) {
                    Ok(Some(cfg)) => audit::refusal(
                        &cfg,
                        &session,
                        "bundle",
                        audit::reasons(&e),
                        &argv,
                        engine,
                        log,
                    ),
                    Ok(None) => {}
                    Err(why) => log.warn(&format!(
                        "the refusal could not be recorded: {}",
                        vetto_broker::error_chain(&why)
                    )),
                }
            }
            return Err(e);
        }
    };
    let network_mode = policy
        .as_ref()
        .map(|p| p.network.value.to_string())
        .unwrap_or_default();
    // A hardened container is a session: it is not created unless it can be recorded.
    let audit = match &policy {
        Some(policy) => host.audit.config(rootless)?.map(|config| {
            let start = SessionStart {
                policy_digest: crate::audit::policy_digest(policy),
                profile: policy.profile.clone(),
                layers: crate::audit::layers(policy),
                tier: "shim".into(),
                landlock_abi: vetto_hooks::landlock::abi_version(),
                argv: argv.clone(),
                project: bundle.display().to_string(),
                uid: audit::host_uid(),
                engine: engine.clone(),
                change_set: None,
            };
            let s = Session {
                id: session.clone(),
                config,
                started_ms: 0,
                engine: engine.clone(),
                argv: argv.clone(),
                killed: false,
            };
            (s, start)
        }),
        None => None,
    };

    // Root filesystem: absolute, so the shadow bundle can live elsewhere.
    let root_rel = typed
        .root()
        .as_ref()
        .map(|r| r.path().clone())
        .ok_or_else(|| OciError::Config(format!("{}: no `root`", cfg_path.display())))?;
    let rootfs = bundle.join(root_rel);
    spec["root"]["path"] = Value::String(rootfs.display().to_string());

    // Every resource field is applied or refused, never silently dropped (libcgroups ignores
    // some fields, and others on one cgroup version or where a v1 controller is not mounted).
    if cgroups != super::Cgroups::ReadOnlyView {
        let unified = matches!(
            libcgroups::common::get_cgroup_setup(),
            Ok(libcgroups::common::CgroupSetup::Unified)
        );
        let v1_mounted = |c: &str| {
            Path::new("/sys/fs/cgroup")
                .join(c)
                .join("cgroup.procs")
                .exists()
        };
        let refused = unapplied_resources(
            spec.pointer("/linux/resources").unwrap_or(&Value::Null),
            unified,
            &v1_mounted,
        );
        if !refused.is_empty() {
            return Err(OciError::Config(format!(
                "linux.resources: {} cannot be applied on this host; remove {}",
                refused.join("; "),
                if refused.len() == 1 { "it" } else { "them" }
            )));
        }
    }

    // disableOOMKiller: cgroup v1's memory.oom_control; cgroup v2 has no such switch, and a
    // field that cannot be applied is refused, not dropped.
    let disable_oom_killer = match typed
        .linux()
        .as_ref()
        .and_then(|l| l.resources().as_ref())
        .and_then(|r| r.memory().as_ref())
        .filter(|m| m.disable_oom_killer() == Some(true))
    {
        None => None,
        Some(_) if cgroups == super::Cgroups::ReadOnlyView => None,
        Some(m) => {
            let v1_memory = libcgroups::common::get_cgroup_setup()
                .is_ok_and(|s| !matches!(s, libcgroups::common::CgroupSetup::Unified))
                && cgroups == super::Cgroups::Cgroupfs
                && Path::new("/sys/fs/cgroup/memory/memory.oom_control").exists();
            if !v1_memory {
                return Err(OciError::Config(
                    "linux.resources.memory.disableOOMKiller: cgroup v2 (and the systemd driver) \
                     cannot disable the OOM killer; remove the field"
                        .into(),
                ));
            }
            let mut r = oci_spec::runtime::LinuxResources::default();
            r.set_memory(Some(*m));
            Some(r)
        }
    };

    // An AppArmor profile asked for on a host without AppArmor: refused with the reason (the
    // caller asked for a confinement this host cannot give; libcontainer says only "io error").
    if let Some(profile) = typed
        .process()
        .as_ref()
        .and_then(|p| p.apparmor_profile().as_ref())
        .filter(|p| !p.is_empty())
    {
        let enabled = std::fs::read_to_string("/sys/module/apparmor/parameters/enabled")
            .is_ok_and(|s| s.trim() == "Y");
        if !enabled {
            return Err(OciError::Config(format!(
                "process.apparmorProfile {profile:?}: AppArmor is not enabled on this host \
                 (/sys/module/apparmor/parameters/enabled is not Y); remove the profile or enable AppArmor"
            )));
        }
    }

    // Hooks: the state they get names the caller's bundle; poststart/poststop failures warn.
    super::hook_relay::relay_hooks(&mut spec, &bundle)?;

    // Never an empty cgroupsPath: libcontainer would then use (and on delete, kill) the
    // caller's own cgroup.
    if spec
        .pointer("/linux/cgroupsPath")
        .and_then(Value::as_str)
        .is_none_or(str::is_empty)
    {
        let path = match cgroups {
            // systemd's form, `slice:prefix:name`: a scope `vetto-shim-<id>.scope`.
            super::Cgroups::Systemd if nix::unistd::geteuid().is_root() && !super::rootless() => {
                format!("system.slice:vetto-shim:{id}")
            }
            super::Cgroups::Systemd => format!("user.slice:vetto-shim:{id}"),
            _ => format!("/vetto-shim/{id}"),
        };
        if let Some(linux) = spec.get_mut("linux").and_then(Value::as_object_mut) {
            linux.insert("cgroupsPath".into(), Value::String(path));
        }
    }

    // The systemd driver on a host whose controllers are cgroup v1 (libcgroups' systemd
    // manager is v2 only, and would take `slice:prefix:name` for a relative directory): the
    // same place systemd would make the scope, as cgroupfs paths, which is where Docker and
    // containerd look for the container's statistics.
    let systemd = cgroups == super::Cgroups::Systemd
        && matches!(
            libcgroups::common::get_cgroup_setup(),
            Ok(libcgroups::common::CgroupSetup::Unified)
        );
    if cgroups == super::Cgroups::Systemd && !systemd {
        let given = spec
            .pointer("/linux/cgroupsPath")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let path = systemd_path_on_v1(&given)?;
        log.debug(&format!(
            "systemd cgroup driver on a cgroup v1 host: {given} is created as {path}"
        ));
        spec["linux"]["cgroupsPath"] = Value::String(path);
    }

    // One container, one cgroup (runc refuses the same; runtime-spec lets a runtime reject
    // an unfit cgroup): a cgroup that already holds processes is another container's (the
    // same id under another --root, or a cgroupsPath given twice), and this container's
    // kill and delete would kill them, its limits replace theirs.
    // The check holds the cgroup's claim (`claim.rs`) until the caller has created the
    // container: a concurrent create of the same cgroup waits, then finds this one's init.
    let mut cgroup = None;
    let mut claim = None;
    if cgroups != super::Cgroups::ReadOnlyView && !systemd {
        if let Some(path) = spec.pointer("/linux/cgroupsPath").and_then(Value::as_str) {
            // Recorded as the path it is, relative or absolute: both name the same
            // directories (`cgroup_dirs`).
            cgroup = Some(path.to_string());
            if path.split('/').any(|c| c == "..") {
                return Err(OciError::Config(format!(
                    "linux.cgroupsPath {path:?}: a \"..\" component; name the cgroup by its own path"
                )));
            }
            claim = Some(super::claim::take(
                &super::claim::dir()?,
                path,
                super::claim::WAIT,
            )?);
            if let Some((dir, n)) = populated_cgroup(Path::new("/sys/fs/cgroup"), path) {
                return Err(OciError::Config(format!(
                    "linux.cgroupsPath {path:?}: the cgroup is not empty ({n} process(es) in {}): \
                     it belongs to another container, whose processes this container's kill and \
                     delete would kill; give this container its own id or cgroupsPath",
                    dir.display()
                )));
            }
        }
    }

    // Rootless without cgroups (see `rootless_cgroup_view`): the container's cgroup mount
    // becomes a read-only bind of the view this process shows at /sys/fs/cgroup.
    if cgroups == super::Cgroups::ReadOnlyView {
        for m in spec
            .get_mut("mounts")
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten()
        {
            if m.get("type").and_then(Value::as_str) == Some("cgroup") {
                *m = serde_json::json!({
                    "destination": m.get("destination").cloned().unwrap_or(Value::Null),
                    "type": "bind", "source": "/sys/fs/cgroup",
                    "options": ["rbind", "ro", "nosuid", "noexec", "nodev"]
                });
            }
        }
    }

    // Seccomp: compiled by `hardening()` below (a bad profile fails there, before anything is
    // written), installed by the init.
    let seccomp = typed.linux().as_ref().and_then(|l| l.seccomp().clone());
    // (A hardened bundle has no_new_privs: nothing to widen.)
    let restore_caps = match (&seccomp, spec.get_mut("process")) {
        (Some(_), Some(process)) => prepare_caps_for_seccomp(process)?,
        _ => None,
    };

    let state = ShimState {
        bundle: bundle.clone(),
        rootfs,
        plan,
        seccomp,
        restore_caps,
        network_mode,
        broker_pid: None,
        init: None,
        audit: None,
        cgroup,
    };
    let hardening = state.hardening()?;
    let summary = match &state.plan {
        Some(p) => format!(
            "policy {:?}: {} Landlock rules, {} secrets masked, {} environment variables removed",
            p.policy,
            p.landlock.rules.len(),
            p.masks.len(),
            p.env_removed.len()
        ),
        None => "no vetto policy: plain OCI behaviour".into(),
    };

    let dir = shim_dir(root, id);
    if let Some(parent) = dir.parent() {
        std::fs::create_dir_all(parent).map_err(|source| OciError::Io {
            what: "creating the state root",
            path: parent.to_path_buf(),
            source,
        })?;
        let _ = std::fs::set_permissions(parent, std::fs::Permissions::from_mode(0o700));
    }
    std::fs::create_dir(&dir).map_err(|source| {
        if source.kind() == std::io::ErrorKind::AlreadyExists {
            OciError::Exists(id.to_string())
        } else {
            OciError::Io {
                what: "creating the shadow bundle",
                path: dir.clone(),
                source,
            }
        }
    })?;
    let body = serde_json::to_vec_pretty(&spec).map_err(|e| OciError::Config(e.to_string()))?;
    let rec = serde_json::to_vec_pretty(&state).map_err(|e| OciError::Config(e.to_string()))?;
    let written = write_private(&dir.join("config.json"), &body)
        .and_then(|()| write_private(&dir.join("vetto.json"), &rec));
    if let Err(e) = written {
        let _ = std::fs::remove_dir_all(&dir);
        return Err(e);
    }
    Ok(Prepared {
        dir,
        state,
        hardening,
        summary,
        audit,
        approvals_db,
        disable_oom_killer,
        systemd,
        claim,
    })
}

/// The resource fields of `r` (`linux.resources`) that would not be applied here: libcgroups
/// ignores some everywhere, some on one cgroup version, and a v1 controller that is not
/// mounted applies nothing. A zero, `false`, empty or null value counts as unset (as runc).
/// `disableOOMKiller` is handled by the caller.
pub(super) fn unapplied_resources(
    r: &Value,
    unified: bool,
    v1_mounted: &dyn Fn(&str) -> bool,
) -> Vec<String> {
    fn holds(v: &Value) -> bool {
        match v {
            Value::Null => false,
            Value::Bool(b) => *b,
            Value::Number(n) => n.as_f64() != Some(0.0),
            Value::String(s) => !s.is_empty(),
            Value::Array(a) => !a.is_empty(),
            Value::Object(o) => o.values().any(holds),
        }
    }
    let set = |ptr: &str| r.pointer(ptr).is_some_and(holds);
    let mut out = Vec::new();
    let mut no = |field: &str, why: &str| out.push(format!("{field} ({why})"));
    // Nowhere.
    if r.pointer("/memory/useHierarchy").and_then(Value::as_bool) == Some(false) {
        no(
            "memory.useHierarchy = false",
            "the kernel always uses the hierarchy",
        );
    }
    if set("/memory/checkBeforeUpdate") {
        no("memory.checkBeforeUpdate", "not implemented");
    }
    if set("/rdma") {
        no("rdma", "not implemented");
    }
    if unified {
        for (ptr, field) in [
            ("/memory/kernel", "memory.kernel"),
            ("/memory/kernelTCP", "memory.kernelTCP"),
            ("/network", "network"),
        ] {
            if set(ptr) {
                no(field, "cgroup v1 only");
            }
        }
        // A swappiness is not zero-means-unset: 0 is a real value.
        if r.pointer("/memory/swappiness")
            .is_some_and(|v| !v.is_null())
        {
            no("memory.swappiness", "cgroup v1 only");
        }
    } else {
        if set("/unified") {
            no(
                "unified",
                "cgroup v2 only; this host's controllers are cgroup v1",
            );
        }
        if set("/blockIO/leafWeight")
            || r.pointer("/blockIO/weightDevice")
                .and_then(Value::as_array)
                .is_some_and(|d| {
                    d.iter()
                        .any(|e| e.get("leafWeight").is_some_and(|w| !w.is_null()))
                })
        {
            no("blockIO.leafWeight", "not implemented on cgroup v1");
        }
        for (ptr, ctrl) in [
            ("/hugepageLimits", "hugetlb"),
            ("/network/classID", "net_cls"),
            ("/network/priorities", "net_prio"),
            ("/pids", "pids"),
            ("/blockIO", "blkio"),
            ("/cpu", "cpu"),
            ("/memory", "memory"),
        ] {
            if set(ptr) && !v1_mounted(ctrl) {
                let field = ptr.trim_start_matches('/').replace('/', ".");
                no(&field, &format!("no cgroup v1 {ctrl} hierarchy is mounted"));
            }
        }
    }
    out
}

/// The components of cgroup path `path` as libcgroups resolves it, relative and absolute
/// alike (empty ones and `.` dropped): one cgroup, one sequence, however it is spelled. Both
/// the cgroup's directories ([`cgroup_dirs`]) and its claim's name (`claim.rs`) are made of
/// them, so the two always name the same cgroup.
pub(super) fn cgroup_components(path: &str) -> impl Iterator<Item = &str> {
    path.split('/').filter(|c| !c.is_empty() && *c != ".")
}

/// The directories of cgroup `path` that exist: in the unified hierarchy mounted at `root`,
/// and in every hierarchy mounted below it (cgroup v1's controllers, a hybrid host's
/// `unified`). libcgroups joins a relative path at each hierarchy's root, as an absolute
/// one (not under the caller's own cgroup): so is it here. None for the root cgroup itself
/// or a `..`.
fn cgroup_dirs(root: &Path, path: &str) -> Option<Vec<PathBuf>> {
    let rel: PathBuf = cgroup_components(path).collect();
    if rel.as_os_str().is_empty() || rel.components().any(|c| c.as_os_str() == "..") {
        return None;
    }
    let mut tops = vec![root.to_path_buf()];
    if let Ok(entries) = std::fs::read_dir(root) {
        tops.extend(entries.flatten().map(|e| e.path()));
    }
    Some(
        tops.into_iter()
            .map(|top| top.join(&rel))
            .filter(|d| d.join("cgroup.procs").exists())
            .collect(),
    )
}

/// The first directory of cgroup `path` ([`cgroup_dirs`]) that holds a process, with its
/// count.
fn populated_cgroup(root: &Path, path: &str) -> Option<(PathBuf, usize)> {
    cgroup_dirs(root, path)?.into_iter().find_map(|dir| {
        let procs = std::fs::read_to_string(dir.join("cgroup.procs")).ok()?;
        let n = procs.lines().filter(|l| !l.trim().is_empty()).count();
        (n > 0).then_some((dir, n))
    })
}

/// Removes the (emptied) cgroup at `path` from every hierarchy ([`cgroup_dirs`]), waiting up
/// to `wait` for its processes to be gone (a killed init's PID namespace empties it as the
/// kernel finishes them). Only `rmdir`: a cgroup that still holds a process is left, and
/// named. The parents (`/vetto-shim`) stay, as libcontainer leaves them.
pub(super) fn remove_cgroup(
    root: &Path,
    path: &str,
    wait: std::time::Duration,
) -> Result<(), String> {
    let mut dirs = cgroup_dirs(root, path)
        .ok_or_else(|| format!("{path:?} is not a cgroup this runtime makes"))?;
    let until = std::time::Instant::now() + wait;
    loop {
        dirs.retain(|d| std::fs::remove_dir(d).is_err() && d.exists());
        if dirs.is_empty() {
            return Ok(());
        }
        if std::time::Instant::now() >= until {
            let left: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
            return Err(format!("still in use: {}", left.join(", ")));
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// Where systemd puts the scope of `slice:prefix:name` (`system.slice:docker:ID` →
/// `/system.slice/docker-ID.scope`; a nested slice `a-b.slice` → `/a.slice/a-b.slice`).
pub(super) fn systemd_path_on_v1(given: &str) -> Result<String, OciError> {
    let bad = || {
        OciError::Config(format!(
            "linux.cgroupsPath {given:?}: the systemd cgroup driver expects slice:prefix:name"
        ))
    };
    let parts: Vec<&str> = given.split(':').collect();
    let [slice, prefix, name] = parts.as_slice() else {
        return Err(bad());
    };
    let ok = |s: &str| !s.contains('/') && s != "." && s != "..";
    if !ok(slice) || !ok(prefix) || !ok(name) || name.is_empty() {
        return Err(bad());
    }
    let mut path = String::new();
    let slice = if slice.is_empty() {
        "system.slice"
    } else {
        slice
    };
    if slice != "-.slice" {
        let stem = slice.strip_suffix(".slice").ok_or_else(bad)?;
        let mut acc = String::new();
        for (i, part) in stem.split('-').enumerate() {
            if part.is_empty() {
                return Err(bad());
            }
            if i > 0 {
                acc.push('-');
            }
            acc.push_str(part);
            path.push('/');
            path.push_str(&acc);
            path.push_str(".slice");
        }
    }
    let unit = if name.ends_with(".slice") {
        (*name).to_string()
    } else if prefix.is_empty() {
        format!("{name}.scope")
    } else {
        format!("{prefix}-{name}.scope")
    };
    path.push('/');
    path.push_str(&unit);
    Ok(path)
}

/// Environment of an `exec`'d process filtered as the policy filters the init's (the same
/// verdict as the image's environment, [`environment::verdict`]).
pub fn filter_env(state: &ShimState, env: &mut HashMap<String, String>) -> Vec<String> {
    let Some(plan) = &state.plan else {
        return vec![];
    };
    let drop: Vec<String> = env
        .keys()
        .filter(|k| {
            environment::verdict(k, &plan.pass_through, EnvOrigin::Image) == EnvVerdict::Secret
        })
        .cloned()
        .collect();
    for k in &drop {
        env.remove(k);
    }
    drop
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shipped_shim_toml_example_is_a_valid_host_configuration() {
        let text = include_str!("../../../packaging/shim.toml.example");
        let c: HostConfig = toml::from_str(text).expect("the example parses strictly");
        c.audit.check().expect("its audit table is valid");
        assert_eq!(c.default_policy.as_deref(), Some("default"));
        assert!(c.require_policy);
    }

    fn ann(v: &str) -> serde_json::Map<String, Value> {
        let mut m = serde_json::Map::new();
        m.insert(POLICY_ANNOTATION.into(), Value::String(v.into()));
        m
    }

    #[test]
    fn the_host_decides_and_the_annotation_only_chooses_where_allowed() {
        let dir = Path::new(DEFAULT_POLICY_DIR);
        let free = HostConfig::default();
        // No host setting: the annotation chooses, `none` included.
        assert_eq!(
            select_policy(Some(&ann("read-only")), &free, None, dir).expect("ok"),
            Some("read-only".into())
        );
        assert_eq!(
            select_policy(Some(&ann("none")), &free, None, dir).expect("ok"),
            None
        );
        assert_eq!(select_policy(None, &free, None, dir).expect("ok"), None);
        // --vetto-policy: fixed; another annotation or `none` is refused.
        assert_eq!(
            select_policy(None, &free, Some("ci"), dir).expect("ok"),
            Some("ci".into())
        );
        for a in ["none", "default"] {
            let e = select_policy(Some(&ann(a)), &free, Some("ci"), dir).expect_err("refused");
            assert!(
                e.to_string().contains("requires a policy and uses \"ci\""),
                "{e}"
            );
        }
        // require_policy: agree with the default, or name one when there is none.
        let required = HostConfig {
            default_policy: Some("read-only".into()),
            require_policy: true,
            policy_dir: None,
            audit: AuditTable::default(),
        };
        assert!(select_policy(Some(&ann("default")), &required, None, dir).is_err());
        assert_eq!(
            select_policy(None, &required, None, dir).expect("ok"),
            Some("read-only".into())
        );
        let bare = HostConfig {
            default_policy: None,
            require_policy: true,
            policy_dir: None,
            audit: AuditTable::default(),
        };
        let e = select_policy(None, &bare, None, dir).expect_err("no policy");
        assert!(e.to_string().contains("requires a policy"), "{e}");
        // Annotation paths: only inside the policy directory.
        let e = select_policy(Some(&ann("/etc/passwd")), &free, None, dir).expect_err("outside");
        assert!(e.to_string().contains("policy directory"), "{e}");
        let e = select_policy(Some(&ann("x/y")), &free, None, dir).expect_err("relative");
        assert!(e.to_string().contains("not a profile"), "{e}");
    }
}

#[cfg(test)]
mod systemd_path_tests {
    #![allow(clippy::unwrap_used)]
    use super::systemd_path_on_v1;

    #[test]
    fn slice_prefix_name_becomes_systemds_own_path() {
        for (given, want) in [
            ("system.slice:docker:abc", "/system.slice/docker-abc.scope"),
            ("user.slice:libpod:x", "/user.slice/libpod-x.scope"),
            ("kubepods-besteffort-pod1.slice:cri-containerd:c1", "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod1.slice/cri-containerd-c1.scope"),
            (":vetto:c", "/system.slice/vetto-c.scope"),
            ("-.slice:p:n", "/p-n.scope"),
            ("machine.slice::n", "/machine.slice/n.scope"),
        ] {
            assert_eq!(systemd_path_on_v1(given).unwrap(), want, "{given}");
        }
        for bad in [
            "/abs/path",
            "a:b",
            "x.slice:p:",
            "x.slice:p:../e",
            "nos:p:n",
            "a--b.slice:p:n",
        ] {
            assert!(systemd_path_on_v1(bad).is_err(), "{bad}");
        }
    }
}

#[cfg(test)]
mod resources_tests {
    use super::unapplied_resources;
    use serde_json::json;

    #[test]
    fn fields_that_would_be_dropped_are_named() {
        let all = |_: &str| true;
        let none = |_: &str| false;
        // Docker's defaults (zeros, false) are unset: nothing to refuse.
        let docker = json!({"devices": [{"allow": false, "access": "rwm"}],
            "memory": {"disableOOMKiller": false, "reservation": 0}, "cpu": {"shares": 0},
            "pids": {"limit": 0}, "blockIO": {"weight": 0}});
        assert!(unapplied_resources(&docker, false, &none).is_empty());
        assert!(unapplied_resources(&docker, true, &none).is_empty());
        let r = json!({"rdma": {"mlx": {"hcaHandles": 1}}, "memory": {"useHierarchy": false}});
        assert_eq!(unapplied_resources(&r, false, &all).len(), 2);
        let v2only = json!({"unified": {"memory.high": "1G"}});
        assert!(unapplied_resources(&v2only, true, &all).is_empty());
        assert!(unapplied_resources(&v2only, false, &all)[0].starts_with("unified"));
        let v1only = json!({"memory": {"kernel": 1, "swappiness": 0}, "network": {"classID": 1}});
        assert_eq!(unapplied_resources(&v1only, true, &all).len(), 3);
        assert!(unapplied_resources(&v1only, false, &all).is_empty());
        let hp = json!({"hugepageLimits": [{"pageSize": "2MB", "limit": 1}], "pids": {"limit": 5}});
        let v = unapplied_resources(&hp, false, &|c| c == "pids");
        assert_eq!(v.len(), 1, "{v:?}");
        assert!(v[0].contains("hugetlb"), "{v:?}");
    }
}

#[cfg(test)]
mod populated_cgroup_tests {
    #![allow(clippy::unwrap_used)]
    use super::populated_cgroup;

    #[test]
    fn a_cgroup_with_a_process_in_any_hierarchy_is_found() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path();
        // A hybrid host: v1 controllers, the unified hierarchy, and the root's own files.
        for d in [
            "cpu,cpuacct/vetto-shim/a",
            "pids/vetto-shim/a",
            "unified/vetto-shim/b",
        ] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        std::fs::write(root.join("cgroup.procs"), "1\n").unwrap();
        std::fs::write(root.join("cpu,cpuacct/vetto-shim/a/cgroup.procs"), "").unwrap();
        std::fs::write(root.join("pids/vetto-shim/a/cgroup.procs"), "41\n42\n").unwrap();
        std::fs::write(root.join("unified/vetto-shim/b/cgroup.procs"), "\n").unwrap();
        assert_eq!(
            populated_cgroup(root, "/vetto-shim/a"),
            Some((root.join("pids/vetto-shim/a"), 2))
        );
        // Empty everywhere, or absent: nothing.
        assert_eq!(populated_cgroup(root, "/vetto-shim/b"), None);
        assert_eq!(populated_cgroup(root, "/vetto-shim/c"), None);
        // Relative, or spelled otherwise: libcgroups makes the same directories of it.
        for same in ["vetto-shim/a", "//vetto-shim/./a/", "./vetto-shim/a"] {
            assert_eq!(
                populated_cgroup(root, same),
                Some((root.join("pids/vetto-shim/a"), 2)),
                "{same}"
            );
        }
        // The root cgroup itself is every process's: never "another container's".
        for top in ["/", "", ".", "./"] {
            assert_eq!(populated_cgroup(root, top), None, "{top:?}");
        }
    }

    /// `remove_cgroup` removes with `rmdir` only, and names what it could not remove (here a
    /// directory with a file in it, as a cgroup holding a process refuses `rmdir`); it refuses
    /// a path that is no cgroup of its own.
    #[test]
    fn a_cgroup_is_removed_only_by_rmdir() {
        use super::remove_cgroup;
        use std::time::Duration;
        let t = tempfile::tempdir().unwrap();
        let root = t.path();
        std::fs::create_dir_all(root.join("pids/vetto-shim/a")).unwrap();
        std::fs::write(root.join("pids/vetto-shim/a/cgroup.procs"), "7\n").unwrap();
        let e = remove_cgroup(root, "/vetto-shim/a", Duration::ZERO).unwrap_err();
        assert!(
            e.contains("still in use") && e.contains("pids/vetto-shim/a"),
            "{e}"
        );
        assert!(root.join("pids/vetto-shim/a/cgroup.procs").exists());
        assert_eq!(
            remove_cgroup(root, "/vetto-shim/none", Duration::ZERO),
            Ok(())
        );
        for bad in ["/", "", "/vetto-shim/../x", "vetto-shim/../x"] {
            assert!(remove_cgroup(root, bad, Duration::ZERO).is_err(), "{bad}");
        }
        // A relative path names the same cgroup as the absolute one.
        let e = remove_cgroup(root, "vetto-shim/a", Duration::ZERO).unwrap_err();
        assert!(e.contains("pids/vetto-shim/a"), "{e}");
    }
}
