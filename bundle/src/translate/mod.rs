//! Policy → OCI bundle: a pure function of (resolved policy, host facts, secrets found) — but
//! for the policy's own paths, which it resolves on the host (see [`crate`]) — to an OCI
//! runtime `Spec`, the `Plan` the in-container init applies, and an explanation of every item
//! with where it came from.
//!
//! [`translate`] is a sequence of sections, one file each. Those `vetto-shim`'s
//! [`crate::container`] needs too take plain inputs, and both translators call them:
//! [`environment`] (which variables pass, what the policy sets), [`masks`] (where a secret is
//! shown), [`network`] (the broker's listeners, plan and proxy variables), [`seccomp`] (the
//! deny-list), [`landlock`] (a writable bind's access), [`mounts`] (the read-only `/proc`
//! paths). The rest is `vetto run`'s alone: [`capabilities`], `limits`, the protections,
//! the explanation's closing notes, and the spec itself.

use std::path::{Path, PathBuf};

use oci_spec::runtime::Spec;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::error::TranslateError;
use crate::host::HostFacts;
use crate::plan::{FsAccess, Identity, InitMount, InitMountKind, LandlockPlan, LandlockRule, Plan};
use crate::policy::HandoffAction;
use crate::resolve::Policy;
use crate::secrets::SecretMatch;

pub mod capabilities;
pub mod environment;
mod explain;
pub mod landlock;
mod limits;
pub mod masks;
pub mod mounts;
pub mod network;
mod paths;
mod protect;
pub mod seccomp;
mod spec;

pub use environment::{never_passes, BUILTIN_ENV, LOCALE_ENV};
pub use explain::ExplainItem;
pub use masks::shown_at;
pub use network::{broker_setup, BrokerSetup};

/// Size of the private `/dev/shm`.
pub const SHM_SIZE: &str = "64m";

/// The result of translation.
#[derive(Debug, Clone)]
pub struct Translation {
    /// The OCI runtime spec (`config.json`), as the JSON written out: see [`Translation::oci`].
    pub spec: Value,
    /// What the init applies.
    pub plan: Plan,
    /// Symlinks to create in the rootfs (merged-/usr hosts: `/bin -> usr/bin`).
    pub rootfs_links: Vec<(PathBuf, String)>,
    /// Every item with its origin (empty for `vetto run`, which does not show it).
    pub explain: Vec<ExplainItem>,
    /// Protected paths that were absent: host tools load them, so the supervisor reports (and
    /// with `filesystem.handoff = "remove"` removes) any the sandbox created.
    pub handoff_watch: Vec<PathBuf>,
    /// Protected paths that are symlinks, with their target at start: checked at the end like
    /// `handoff_watch` (a link replaced by the sandbox is reported, and with `remove` restored).
    pub handoff_links: Vec<(PathBuf, PathBuf)>,
    /// What to do with them.
    pub handoff: HandoffAction,
    /// Host directories the sandbox can write (canonical): nothing vetto writes on the host
    /// during the session may live beneath them.
    pub writable_roots: Vec<PathBuf>,
}

impl Translation {
    /// The spec in `oci_spec`'s types, parsed as libcontainer parses `config.json`.
    pub fn oci(&self) -> Result<Spec, TranslateError> {
        Spec::deserialize(&self.spec).map_err(TranslateError::Oci)
    }

    /// The host sources of the spec's bind mounts.
    pub fn bind_sources(&self) -> Vec<PathBuf> {
        self.spec["mounts"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|m| m["type"].as_str() == Some("bind"))
            .filter_map(|m| m["source"].as_str().map(PathBuf::from))
            .collect()
    }
}

/// The bundle as the sections build it.
#[derive(Default)]
struct Builder {
    mounts: Vec<(PathBuf, Value, usize)>,
    /// Every bind as (canonical source on the host, destination inside).
    binds: Vec<(PathBuf, PathBuf)>,
    /// Mounts the init makes through descriptors (masks, protections).
    init_mounts: Vec<InitMount>,
    rules: Vec<LandlockRule>,
    explain: Vec<ExplainItem>,
    /// No explanation is kept (`vetto run`: only `vetto policy explain` shows it).
    quiet: bool,
    seq: usize,
}

impl Builder {
    pub(super) fn mount(&mut self, dest: &Path, m: Value) {
        self.seq += 1;
        self.mounts.push((dest.to_path_buf(), m, self.seq));
    }

    pub(super) fn bind(&mut self, path: &Path, writable: bool) {
        self.bind_from(path, path, writable);
    }

    /// Bind the host's `src` (canonical) at `dest` inside.
    pub(super) fn bind_from(&mut self, src: &Path, dest: &Path, writable: bool) {
        let mut opts = vec!["rbind", "nosuid", "nodev"];
        opts.push(if writable { "rw" } else { "ro" });
        self.mount(
            dest,
            json!({"destination": dest, "type": "bind", "source": src, "options": opts}),
        );
        self.binds.push((src.to_path_buf(), dest.to_path_buf()));
    }

    /// An init mount on the existing object at `path` (inside = on the host).
    pub(super) fn init_mount(&mut self, path: &Path, kind: InitMountKind, id: (u64, u64)) {
        if self
            .init_mounts
            .iter()
            .any(|m| m.path == path && m.kind == kind)
        {
            return;
        }
        self.init_mounts.push(InitMount {
            path: path.to_path_buf(),
            kind,
            dev: id.0,
            ino: id.1,
            overlay: None,
        });
    }

    pub(super) fn tmpfs(&mut self, path: &Path, opts: &[&str]) {
        self.mount(
            path,
            json!({"destination": path, "type": "tmpfs", "source": "tmpfs", "options": opts}),
        );
    }

    pub(super) fn rule(&mut self, path: &Path, access: FsAccess, optional: bool) {
        self.rules.retain(|r| r.path != path);
        self.rules.push(LandlockRule {
            path: path.to_path_buf(),
            access,
            optional,
        });
    }
}

/// Translate a resolved policy for this host into a bundle. `secrets` is the result of
/// [`crate::secrets::scan`] on the same facts; `id` names the session (cgroup path, hostname
/// stays `vetto`).
pub fn translate(
    policy: &Policy,
    facts: &HostFacts,
    secrets: &[SecretMatch],
    id: &str,
) -> Result<Translation, TranslateError> {
    network::check_publish(policy)?;
    let mut b = Builder {
        quiet: id == "run",
        ..Builder::default()
    };
    let layout = mounts::layout(&mut b, policy, facts)?;
    // In review mode nothing the sandbox writes in the project reaches it: the project's
    // protected paths and git metadata stay writable in the overlay (git works), and `vetto
    // changes` flags them as trust-handoff paths instead.
    let review = policy.project.value == crate::policy::ProjectAccess::Review;
    let protect_roots: Vec<PathBuf> = layout
        .writable_roots
        .iter()
        .filter(|r| !(review && **r == facts.project))
        .cloned()
        .collect();
    let (handoff_watch, handoff_links) =
        protect::protect_all(&mut b, policy, facts, &protect_roots, &layout.state_inside)?;
    masks::mask(&mut b, secrets, &policy.secret_patterns(), &facts.home)?;
    protect::pin_sealed(&mut b, facts, &layout.writable_roots);
    let mounts = mounts::order(&mut b);
    if review {
        for m in &mut b.init_mounts {
            if m.path.starts_with(&facts.project) {
                m.overlay = Some(facts.project.clone());
            }
        }
        // First of all: the project is the overlay on this change set's upper layer.
        // (`vetto policy explain` shows a change set that does not exist yet.)
        let upper = facts
            .review
            .as_ref()
            .map(|l| (&l.upper, std::fs::metadata(&l.upper)));
        match upper {
            Some((_, Err(e))) if id == "explain" && e.kind() == std::io::ErrorKind::NotFound => {}
            Some((p, Err(source))) => {
                return Err(TranslateError::Io {
                    key: "filesystem.project".into(),
                    path: p.display().to_string(),
                    what: "review mode's upper layer".into(),
                    source,
                })
            }
            None => {}
            Some((_, Ok(upper))) => {
                use std::os::unix::fs::MetadataExt;
                b.init_mounts.insert(
                    0,
                    InitMount {
                        path: facts.project.clone(),
                        kind: InitMountKind::Overlay,
                        dev: upper.dev(),
                        ino: upper.ino(),
                        overlay: Some(facts.project.clone()),
                    },
                );
            }
        }
    }
    landlock::note(&mut b);
    let setup = network::broker_setup(policy)?;
    let env = environment::environment(&mut b, policy, facts, setup.as_ref());
    let rlimits = limits::rlimits(&mut b, policy);
    let seccomp = seccomp::plan();
    seccomp::note(&mut b, &seccomp);
    explain::namespaces(&mut b);
    network::note(&mut b, policy);
    capabilities::note(&mut b);
    explain::identity(&mut b, policy, facts);
    let spec = spec::config(policy, facts, id, env, rlimits, mounts);
    let plan = Plan {
        version: 1,
        mounts: b.init_mounts,
        landlock: LandlockPlan {
            rules: b.rules,
            min_abi: 1,
            scope: facts.landlock_abi.is_some_and(|a| a >= 6),
        },
        seccomp,
        loopback_up: true,
        network: network::net_plan(policy, setup),
        identity: Identity {
            uid: facts.uid,
            gid: facts.gid,
        },
        wall_clock_secs: policy.limits.wall_clock.as_ref().map(|w| w.value.as_secs()),
    };
    Ok(Translation {
        spec,
        plan,
        rootfs_links: layout.links,
        explain: b.explain,
        handoff_watch,
        handoff_links,
        handoff: policy.handoff.value,
        writable_roots: layout.writable_roots,
    })
}
