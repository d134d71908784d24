//! Policy → OCI bundle: a pure function from (resolved policy, host facts, secrets found) to
//! an OCI runtime `Spec`, the `Plan` the in-container init applies, and an explanation of
//! every item with where it came from.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use oci_spec::runtime::Spec;
use serde::Serialize;
use serde_json::{json, Value};

use crate::error::TranslateError;
use crate::host::HostFacts;
use crate::plan::{
    default_seccomp, BrokerPlan, FsAccess, Identity, InitMount, InitMountKind, LandlockPlan,
    LandlockRule, Listener, ListenerRole, NetPlan, Plan, HTTP_PROXY_PORT, SOCKS_PORT,
};
use crate::policy::{expand_path, HandoffAction, NetworkMode, ProjectAccess};
use crate::resolve::{Policy, Source};
use crate::secrets::{MaskKind, SecretMatch};

/// Environment variables passed from the caller by default (exact names).
pub const BUILTIN_ENV: &[&str] = &[
    "TERM",
    "COLORTERM",
    "LANG",
    "LANGUAGE",
    "TZ",
    "EDITOR",
    "VISUAL",
    "PAGER",
    "PATH",
    "SHELL",
    "CARGO_HOME",
    "RUSTUP_HOME",
    "RUSTUP_TOOLCHAIN",
    "GOPATH",
    "GOROOT",
    "NVM_DIR",
    "PYENV_ROOT",
    "JAVA_HOME",
    "NO_COLOR",
    "COLUMNS",
    "LINES",
];

/// The locale categories (`locale(7)`): passed by default. Other `LC_*` names are not locale
/// settings and may carry anything (`LC_DB_PASS`); they pass only when named.
pub const LOCALE_ENV: &[&str] = &[
    "LC_ALL",
    "LC_CTYPE",
    "LC_NUMERIC",
    "LC_TIME",
    "LC_COLLATE",
    "LC_MONETARY",
    "LC_MESSAGES",
    "LC_PAPER",
    "LC_NAME",
    "LC_ADDRESS",
    "LC_TELEPHONE",
    "LC_MEASUREMENT",
    "LC_IDENTIFICATION",
];

/// Names that never pass unless named exactly in `pass_through`.
pub fn never_passes(name: &str) -> bool {
    let n = name.to_ascii_uppercase();
    n == "GH_TOKEN"
        || n.starts_with("AWS_")
        || n.ends_with("_API_KEY")
        || n.ends_with("_TOKEN")
        || n.contains("SECRET")
        || n.contains("PASSWORD")
        || n.ends_with("_CREDENTIALS")
}

/// Size of the private `/dev/shm`.
pub const SHM_SIZE: &str = "64m";

/// One line of `vetto policy explain`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ExplainItem {
    /// mount, mask, protected, landlock, seccomp, env, limit, namespace, network, note.
    pub category: String,
    /// The path, name or syscall.
    pub item: String,
    /// What is done to it.
    pub detail: String,
    /// Where it came from.
    pub source: String,
}

/// The result of translation.
#[derive(Debug, Clone)]
pub struct Translation {
    /// The OCI runtime spec (`config.json`).
    pub spec: Spec,
    /// What the init applies.
    pub plan: Plan,
    /// Symlinks to create in the rootfs (merged-/usr hosts: `/bin -> usr/bin`).
    pub rootfs_links: Vec<(PathBuf, String)>,
    /// Every item with its origin.
    pub explain: Vec<ExplainItem>,
    /// Protected paths that were absent: host tools load them, so the supervisor reports (and
    /// with `filesystem.handoff = "remove"` removes) any the sandbox created.
    pub handoff_watch: Vec<PathBuf>,
    /// What to do with them.
    pub handoff: HandoffAction,
}

struct Builder {
    mounts: Vec<(PathBuf, Value, usize)>,
    /// Every bind as (canonical source on the host, destination inside).
    binds: Vec<(PathBuf, PathBuf)>,
    /// Mounts the init makes through descriptors (masks, protections).
    init_mounts: Vec<InitMount>,
    rules: Vec<LandlockRule>,
    explain: Vec<ExplainItem>,
    seq: usize,
}

impl Builder {
    fn note(
        &mut self,
        category: &str,
        item: impl ToString,
        detail: impl ToString,
        source: impl ToString,
    ) {
        self.explain.push(ExplainItem {
            category: category.into(),
            item: item.to_string(),
            detail: detail.to_string(),
            source: source.to_string(),
        });
    }

    fn mount(&mut self, dest: &Path, m: Value) {
        self.seq += 1;
        self.mounts.push((dest.to_path_buf(), m, self.seq));
    }

    fn bind(&mut self, path: &Path, writable: bool) {
        self.bind_from(path, path, writable);
    }

    /// Bind the host's `src` (canonical) at `dest` inside.
    fn bind_from(&mut self, src: &Path, dest: &Path, writable: bool) {
        let mut opts = vec!["rbind", "nosuid", "nodev"];
        opts.push(if writable { "rw" } else { "ro" });
        self.mount(
            dest,
            json!({"destination": dest, "type": "bind", "source": src, "options": opts}),
        );
        self.binds.push((src.to_path_buf(), dest.to_path_buf()));
    }

    /// An init mount on the existing object at `path` (inside = on the host).
    fn init_mount(&mut self, path: &Path, kind: InitMountKind, id: (u64, u64)) {
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
        });
    }

    fn tmpfs(&mut self, path: &Path, opts: &[&str]) {
        self.mount(
            path,
            json!({"destination": path, "type": "tmpfs", "source": "tmpfs", "options": opts}),
        );
    }

    fn rule(&mut self, path: &Path, access: FsAccess, optional: bool) {
        self.rules.retain(|r| r.path != path);
        self.rules.push(LandlockRule {
            path: path.to_path_buf(),
            access,
            optional,
        });
    }
}

/// Where a bind from the host's `src` to `dest` shows the host path `p`, if it does.
pub fn shown_at(p: &Path, src: &Path, dest: &Path) -> Option<PathBuf> {
    let rel = p.strip_prefix(src).ok()?;
    Some(if rel.as_os_str().is_empty() {
        dest.to_path_buf()
    } else {
        dest.join(rel)
    })
}

/// A secret's note suffix: the symlink it was reached through, if any.
fn via_note(s: &SecretMatch) -> String {
    s.via
        .as_ref()
        .map(|v| format!(" (reached through symlink {})", v.display()))
        .unwrap_or_default()
}

/// (device, inode) of the object at `p`, not following a final symlink.
fn file_id(p: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let m = p.symlink_metadata().ok()?;
    (!m.file_type().is_symlink()).then(|| (m.dev(), m.ino()))
}

fn path_err(key: &str, path: &str, reason: impl ToString) -> TranslateError {
    TranslateError::Path {
        key: key.into(),
        path: path.into(),
        reason: reason.to_string(),
    }
}

/// Resolve a policy path that must exist. Project-relative paths must stay inside the
/// project after symlinks are resolved.
fn resolve_existing(key: &str, raw: &str, facts: &HostFacts) -> Result<PathBuf, TranslateError> {
    let expanded = expand_path(raw, &facts.home, &facts.project)?;
    let canon = expanded.canonicalize().map_err(|e| {
        path_err(
            key,
            raw,
            format!("cannot resolve {}: {e}", expanded.display()),
        )
    })?;
    let relative = !raw.starts_with('/') && !raw.starts_with('~');
    if relative && !canon.starts_with(&facts.project) {
        return Err(path_err(
            key,
            raw,
            format!(
                "escapes the project through a symlink (resolves to {})",
                canon.display()
            ),
        ));
    }
    Ok(canon)
}

/// Resolve a project-relative path that may not exist yet. Returns `None` if absent.
fn resolve_in_project(
    key: &str,
    raw: &str,
    facts: &HostFacts,
) -> Result<Option<PathBuf>, TranslateError> {
    if raw.starts_with('/') || raw.starts_with('~') {
        return Err(path_err(key, raw, "must be relative to the project"));
    }
    let expanded = expand_path(raw, &facts.home, &facts.project)?;
    if expanded.symlink_metadata().is_err() {
        return Ok(None);
    }
    let canon = expanded
        .canonicalize()
        .map_err(|e| path_err(key, raw, format!("cannot resolve: {e}")))?;
    if !canon.starts_with(&facts.project) {
        return Err(path_err(
            key,
            raw,
            format!(
                "escapes the project through a symlink (resolves to {})",
                canon.display()
            ),
        ));
    }
    Ok(Some(canon))
}

fn check_root(
    key: &str,
    raw: &str,
    p: &Path,
    writable: bool,
    facts: &HostFacts,
) -> Result<(), TranslateError> {
    // Host sockets live under /run (and /var/run): a read-only bind does not stop connect().
    let under = ["/proc", "/sys", "/dev", "/run", "/var/run"];
    if p == Path::new("/") || under.iter().any(|f| p.starts_with(f)) {
        return Err(path_err(
            key,
            raw,
            format!("{} cannot be opened to the sandbox", p.display()),
        ));
    }
    if writable {
        for h in &facts.host_private {
            if h.starts_with(p) || p.starts_with(h) {
                return Err(path_err(
                    key,
                    raw,
                    format!(
                        "would let the sandbox write {}, which vetto's own trust relies on",
                        h.display()
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// The broker's half of a policy, shared by `vetto run` and `vetto-shim`.
#[derive(Debug, Clone)]
pub struct BrokerSetup {
    /// Listeners on the sandbox's loopback, in the order they are handed to the broker.
    pub listeners: Vec<Listener>,
    /// What the broker enforces.
    pub broker: BrokerPlan,
    /// The proxy variables pointing at the listeners.
    pub env: Vec<(String, String)>,
}

/// Listeners, broker plan and proxy variables for a policy whose network is not off (`None`
/// when it is). `host_ports` are checked either way.
pub fn broker_setup(policy: &Policy) -> Result<Option<BrokerSetup>, TranslateError> {
    let net_on = policy.network.value != NetworkMode::Off;
    let mut listeners = vec![];
    let mut env = vec![];
    if net_on {
        listeners.push(Listener {
            port: HTTP_PROXY_PORT,
            role: ListenerRole::HttpProxy,
        });
        listeners.push(Listener {
            port: SOCKS_PORT,
            role: ListenerRole::Socks5,
        });
        let http = format!("http://127.0.0.1:{HTTP_PROXY_PORT}");
        let socks = format!("socks5h://127.0.0.1:{SOCKS_PORT}");
        let local = "localhost,127.0.0.1".to_string();
        for (k, v) in [
            ("HTTP_PROXY", &http),
            ("HTTPS_PROXY", &http),
            ("ALL_PROXY", &socks),
            ("http_proxy", &http),
            ("https_proxy", &http),
            ("all_proxy", &socks),
            ("NO_PROXY", &local),
            ("no_proxy", &local),
        ] {
            env.push((k.to_string(), v.clone()));
        }
    }
    for hp in &policy.host_ports {
        let port = hp
            .value
            .rsplit_once(':')
            .and_then(|(_, p)| p.parse::<u16>().ok())
            .ok_or_else(|| TranslateError::Path {
                key: "network.host_ports".into(),
                path: hp.value.clone(),
                reason: "no port".into(),
            })?;
        if port == HTTP_PROXY_PORT || port == SOCKS_PORT {
            return Err(TranslateError::Path {
                key: "network.host_ports".into(),
                path: hp.value.clone(),
                reason: format!("ports {HTTP_PROXY_PORT} and {SOCKS_PORT} are the broker's own"),
            });
        }
        if net_on {
            listeners.push(Listener {
                port,
                role: ListenerRole::HostPort {
                    target: hp.value.clone(),
                },
            });
        }
    }
    Ok(net_on.then(|| BrokerSetup {
        listeners,
        broker: BrokerPlan {
            allow: policy.allow.iter().map(|a| a.value.clone()).collect(),
            allow_cidrs: policy.allow_cidrs.iter().map(|a| a.value.clone()).collect(),
            strict: policy.network.value == NetworkMode::Strict,
            resolver: policy.resolver.as_ref().map(|r| r.value.clone()),
            connects_per_minute: policy.connects_per_minute.value,
            max_connections: policy.max_connections.value,
        },
        env,
    }))
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
    for p in &policy.publish {
        if p.value == 0 || p.value == HTTP_PROXY_PORT || p.value == SOCKS_PORT {
            return Err(TranslateError::Path {
                key: "network.publish".into(),
                path: p.value.to_string(),
                reason: format!(
                    "not a port, or one of the broker's own ({HTTP_PROXY_PORT}, {SOCKS_PORT})"
                ),
            });
        }
    }
    let net_on = policy.network.value != NetworkMode::Off;
    let builtin = Source::Builtin("layout".into());
    let ignored: Vec<&str> = [
        ("allow", policy.allow.is_empty()),
        ("host_ports", policy.host_ports.is_empty()),
        ("allow_cidrs", policy.allow_cidrs.is_empty()),
        ("publish", policy.publish.is_empty()),
        ("resolver", policy.resolver.is_none()),
    ]
    .iter()
    .filter(|(_, empty)| !empty && !net_on)
    .map(|(k, _)| *k)
    .collect();
    let mut b = Builder {
        mounts: vec![],
        binds: vec![],
        init_mounts: vec![],
        rules: vec![],
        explain: vec![],
        seq: 0,
    };
    let mut links = vec![];
    // Host paths the sandbox can write and that outlive it: the project (unless read-only)
    // and the write roots.
    let mut writable_roots: Vec<PathBuf> = vec![];

    // System directories, read-only.
    for d in &facts.system_dirs {
        match &d.symlink {
            Some(target) => {
                links.push((d.path.clone(), target.clone()));
                b.note(
                    "mount",
                    d.path.display(),
                    format!("symlink -> {target}"),
                    &builtin,
                );
            }
            None => {
                b.bind(&d.path, false);
                b.rule(&d.path, FsAccess::ReadExec, false);
                b.note("mount", d.path.display(), "read-only bind", &builtin);
            }
        }
    }
    // Kernel filesystems and devices.
    b.mount(Path::new("/proc"), json!({"destination": "/proc", "type": "proc", "source": "proc", "options": ["nosuid", "nodev", "noexec"]}));
    b.note(
        "mount",
        "/proc",
        "new procfs for the sandbox's PID namespace",
        &builtin,
    );
    b.rule(Path::new("/proc"), FsAccess::ReadWrite, false);
    b.mount(Path::new("/sys"), json!({"destination": "/sys", "type": "sysfs", "source": "sysfs", "options": ["nosuid", "nodev", "noexec", "ro"]}));
    b.note(
        "mount",
        "/sys",
        "read-only sysfs of the sandbox's network namespace",
        &builtin,
    );
    b.rule(Path::new("/sys"), FsAccess::ReadExec, false);
    b.tmpfs(
        Path::new("/dev"),
        &["nosuid", "strictatime", "mode=755", "size=65536k"],
    );
    b.mount(Path::new("/dev/pts"), json!({"destination": "/dev/pts", "type": "devpts", "source": "devpts", "options": ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"]}));
    b.tmpfs(
        Path::new("/dev/shm"),
        &[
            "nosuid",
            "nodev",
            "noexec",
            "mode=1777",
            &format!("size={SHM_SIZE}"),
        ],
    );
    b.note("mount", "/dev", format!("minimal: null zero full random urandom tty ptmx, devpts, private /dev/shm ({SHM_SIZE})"), &builtin);
    for dev in ["null", "zero", "full", "random", "urandom", "tty"] {
        b.rule(&Path::new("/dev").join(dev), FsAccess::Device, false);
    }
    b.rule(Path::new("/dev/pts"), FsAccess::Device, false);
    b.rule(Path::new("/dev/ptmx"), FsAccess::Device, false);
    b.rule(Path::new("/dev/shm"), FsAccess::ReadWrite, false);
    // Private /tmp and HOME.
    let project_access = policy.project.value;
    let nodelete_inside = |root: &Path| {
        project_access == ProjectAccess::WriteNoDelete && facts.project.starts_with(root)
    };
    b.tmpfs(Path::new("/tmp"), &["nosuid", "nodev", "mode=1777"]);
    let tmp_access = if nodelete_inside(Path::new("/tmp")) {
        FsAccess::ReadWriteNoDelete
    } else {
        FsAccess::ReadWrite
    };
    b.rule(Path::new("/tmp"), tmp_access, false);
    b.note("mount", "/tmp", "private tmpfs", &builtin);
    if facts.home != Path::new("/") && facts.home != facts.project {
        b.tmpfs(&facts.home, &["nosuid", "nodev", "mode=700"]);
        let home_access = if nodelete_inside(&facts.home) {
            FsAccess::ReadWriteNoDelete
        } else {
            FsAccess::ReadWrite
        };
        b.rule(&facts.home, home_access, false);
        b.note(
            "mount",
            facts.home.display(),
            "private tmpfs HOME",
            &builtin,
        );
        if home_access == FsAccess::ReadWriteNoDelete {
            for sub in [".cache", ".config", ".local"] {
                let p = facts.home.join(sub);
                b.tmpfs(&p, &["nosuid", "nodev", "mode=700"]);
                b.rule(&p, FsAccess::ReadWrite, false);
                b.note("mount", p.display(), "private tmpfs (fully writable; HOME itself is no-delete because the write-no-delete project lies inside it)", &builtin);
            }
        }
    }
    for dot in &facts.home_dotfiles {
        // A dotfile may be a symlink (`~/.cargo -> /data/cargo`): the bind shows its target at
        // the link's path, and masks follow that mapping (below).
        let src = dot.canonicalize().unwrap_or_else(|_| dot.clone());
        b.bind_from(&src, dot, false);
        b.rule(dot, FsAccess::ReadExec, false);
        b.note(
            "mount",
            dot.display(),
            "read-only bind (commit identity / toolchain)",
            Source::Builtin("home dotfiles".into()),
        );
    }
    // Extra roots.
    for (list, writable) in [(&policy.read, false), (&policy.write, true)] {
        let key = if writable {
            "filesystem.write"
        } else {
            "filesystem.read"
        };
        for r in list {
            let p = resolve_existing(key, &r.value, facts)?;
            check_root(key, &r.value, &p, writable, facts)?;
            b.bind(&p, writable);
            if writable {
                writable_roots.push(p.clone());
            }
            let access = match writable {
                false => FsAccess::ReadExec,
                // Landlock rights add up down the tree: a write root that contains a
                // write-no-delete project must not hand it the remove rights.
                true if nodelete_inside(&p) => FsAccess::ReadWriteNoDelete,
                true => FsAccess::ReadWrite,
            };
            b.rule(&p, access, false);
            b.note(
                "mount",
                p.display(),
                if writable {
                    "read-write bind"
                } else {
                    "read-only bind"
                },
                &r.source,
            );
        }
    }
    // The project.
    let (proj_access, proj_detail) = match project_access {
        ProjectAccess::Read => (FsAccess::ReadExec, "project, read-only bind"),
        ProjectAccess::Write => (FsAccess::ReadWrite, "project, read-write bind"),
        ProjectAccess::WriteNoDelete => (
            FsAccess::ReadWriteNoDelete,
            "project, read-write bind; Landlock denies remove and rename",
        ),
    };
    b.bind(&facts.project, project_access != ProjectAccess::Read);
    if project_access != ProjectAccess::Read {
        writable_roots.push(facts.project.clone());
    }
    b.rule(&facts.project, proj_access, false);
    b.note(
        "mount",
        facts.project.display(),
        proj_detail,
        &policy.project.source,
    );
    if project_access == ProjectAccess::WriteNoDelete {
        for s in &policy.scratch {
            match resolve_in_project("filesystem.scratch", &s.value, facts)? {
                Some(p) if p.is_dir() => {
                    b.rule(&p, FsAccess::ReadWrite, false);
                    b.note(
                        "landlock",
                        p.display(),
                        "scratch: fully writable (delete and rename allowed)",
                        &s.source,
                    );
                }
                _ => b.note(
                    "landlock",
                    &s.value,
                    "scratch: absent now, so not exempt (created later it is no-delete too)",
                    &s.source,
                ),
            }
        }
    }
    // Protected paths: read-only binds over what the sandbox could otherwise write, made by
    // the init on the exact objects found here (see `InitMount`). Every directory between the
    // writable root and the protected path is pinned as a mount point of its own: a mount
    // point cannot be renamed or removed, so `mv .git .git.old` cannot carry a protection away.
    let protect = |b: &mut Builder, p: &Path, why: &str, source: &dyn std::fmt::Display| {
        let Some(root) = writable_roots.iter().find(|r| p.starts_with(r)) else {
            return;
        };
        let Some(id) = file_id(p) else {
            let what = if p.symlink_metadata().is_ok() {
                "a symlink: no mount can cover the link itself (it could be re-pointed); what it resolves to is protected where it is writable"
            } else {
                "absent: nothing to protect now"
            };
            b.note("protected", p.display(), what, source);
            return;
        };
        let rel: Vec<_> = p
            .strip_prefix(root)
            .map(|r| r.components().collect())
            .unwrap_or_default();
        let mut anc = root.clone();
        for c in rel.iter().take(rel.len().saturating_sub(1)) {
            anc.push(c);
            if let Some(aid) = file_id(&anc) {
                if !b.init_mounts.iter().any(|m| m.path == anc) {
                    b.note(
                        "protected",
                        anc.display(),
                        "pinned as a mount point so it cannot be renamed or removed",
                        source,
                    );
                }
                b.init_mount(&anc, InitMountKind::Pin, aid);
            }
        }
        b.init_mount(p, InitMountKind::ReadOnly, id);
        b.note("protected", p.display(), why, source);
    };
    // Repository metadata, located the way git locates it (gitlink files, commondir), in
    // every repository and submodule the scan found.
    let git_src = Source::Builtin("git metadata".into());
    for g in &facts.git_metadata {
        protect(
            &mut b,
            g,
            "git metadata, read-only (configuration, hooks and the files that point git elsewhere cannot be planted)",
            &git_src,
        );
    }
    // Every policy file this session read, and vetto's own configuration (trust store), if
    // the sandbox could write them.
    for f in &policy.files {
        protect(
            &mut b,
            f,
            "policy file, read-only",
            &Source::Builtin("policy file".into()),
        );
    }
    for h in &facts.host_private {
        protect(
            &mut b,
            h,
            "vetto's configuration and trust store, read-only",
            &Source::Builtin("vetto configuration".into()),
        );
    }
    let mut handoff_watch: Vec<PathBuf> = vec![];
    // What the repository's configuration names but does not exist yet (a `core.hooksPath`
    // directory, an included config file): if the sandbox creates it, host git reads or runs
    // it. No bind can cover an absent path, so it is watched like an absent protected path.
    for g in &facts.git_absent {
        if writable_roots.iter().any(|r| g.starts_with(r)) {
            b.note(
                "protected",
                g.display(),
                "named by git configuration (hooks path or include) but absent: if the sandbox creates it, vetto reports it at the end",
                &git_src,
            );
            handoff_watch.push(g.clone());
        }
    }
    if project_access != ProjectAccess::Read {
        for pr in &policy.protected {
            match resolve_in_project("filesystem.protected", &pr.value, facts)? {
                Some(p) => protect(
                    &mut b,
                    &p,
                    "read-only bind over the writable project",
                    &pr.source,
                ),
                None => {
                    let p = facts.project.join(&pr.value);
                    b.note(
                        "protected",
                        p.display(),
                        format!(
                            "absent: if the sandbox creates it, vetto reports it at the end ({})",
                            match policy.handoff.value {
                                HandoffAction::Warn => "and leaves it",
                                HandoffAction::Remove => "and removes it",
                            }
                        ),
                        &pr.source,
                    );
                    handoff_watch.push(p);
                }
            }
        }
    }
    // Secret masks: each secret, at every place a bind shows it (a bind's destination may
    // differ from its source: `~/.cargo -> /data/cargo`).
    let mut mask_targets: Vec<(PathBuf, &SecretMatch)> = vec![];
    for s in secrets {
        for (src, dest) in &b.binds {
            if let Some(t) = shown_at(&s.path, src, dest) {
                if !mask_targets.iter().any(|(p, _)| *p == t) {
                    mask_targets.push((t, s));
                }
            }
        }
    }
    mask_targets.sort_by(|a, b| a.0.cmp(&b.0));
    for s in secrets {
        if !mask_targets.iter().any(|(_, m)| std::ptr::eq(*m, s)) {
            b.note(
                "mask",
                s.path.display(),
                format!("not visible in the sandbox, nothing to mask{}", via_note(s)),
                &s.source,
            );
        }
    }
    let masked_dirs: Vec<PathBuf> = mask_targets
        .iter()
        .filter(|(_, s)| s.kind == MaskKind::Dir)
        .map(|(p, _)| p.clone())
        .collect();
    for (t, s) in &mask_targets {
        let via = via_note(s);
        let shown = if *t == s.path {
            String::new()
        } else {
            format!(" (the host's {})", s.path.display())
        };
        if masked_dirs.iter().any(|d| t != d && t.starts_with(d)) {
            b.note(
                "mask",
                t.display(),
                format!("inside a masked directory{via}"),
                &s.source,
            );
            continue;
        }
        let (k, what) = match s.kind {
            MaskKind::File => (InitMountKind::MaskFile, "/dev/null bound over it"),
            MaskKind::Dir => (
                InitMountKind::MaskDir,
                "empty mode-000 read-only tmpfs over it",
            ),
        };
        b.init_mount(t, k, (s.dev, s.ino));
        b.note(
            "mask",
            t.display(),
            format!("{what} (pattern `{}`){shown}{via}", s.pattern),
            &s.source,
        );
    }
    // The init's mounts: parents first; at one path pin, then read-only, then mask. A pin
    // or protection beneath a read-only path is already read-only.
    let ro: Vec<PathBuf> = b
        .init_mounts
        .iter()
        .filter(|m| m.kind == InitMountKind::ReadOnly)
        .map(|m| m.path.clone())
        .collect();
    b.init_mounts.retain(|m| match m.kind {
        InitMountKind::Pin | InitMountKind::ReadOnly => !ro.iter().any(|r| {
            (m.path != *r && m.path.starts_with(r))
                || (m.kind == InitMountKind::Pin && m.path == *r)
        }),
        _ => true,
    });
    b.init_mounts.sort_by(|x, y| {
        (x.path.components().count(), x.kind).cmp(&(y.path.components().count(), y.kind))
    });
    // Parents before children; for one destination, the order written (masks last).
    b.mounts
        .sort_by_key(|(d, _, seq)| (d.components().count(), *seq));
    let mounts: Vec<Value> = b.mounts.iter().map(|(_, m, _)| m.clone()).collect();

    for r in &b.rules {
        let src = builtin.to_string();
        b.explain.push(ExplainItem {
            category: "landlock".into(),
            item: r.path.display().to_string(),
            detail: format!("{:?}", r.access),
            source: src,
        });
    }

    // Environment.
    let mut env: BTreeMap<String, String> = BTreeMap::new();
    for (k, v) in &facts.env {
        let exact = policy.pass_through.iter().find(|p| &p.value == k);
        if let Some(p) = exact {
            env.insert(k.clone(), v.clone());
            b.note("env", k, "passed through (explicit)", &p.source);
        } else if (BUILTIN_ENV.contains(&k.as_str()) || LOCALE_ENV.contains(&k.as_str()))
            && !never_passes(k)
        {
            env.insert(k.clone(), v.clone());
            b.note(
                "env",
                k,
                "passed through",
                Source::Builtin("environment allowlist".into()),
            );
        }
    }
    let fixed = Source::Builtin("environment".into());
    for (k, v) in [
        ("HOME", facts.home.display().to_string()),
        ("USER", facts.user.clone()),
        ("LOGNAME", facts.user.clone()),
        ("VETTO_SANDBOX", "1".to_string()),
    ] {
        env.insert(k.into(), v.clone());
        b.note("env", k, format!("set to {v}"), &fixed);
    }
    if !env.contains_key("PATH") {
        let v = "/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin".to_string();
        b.note("env", "PATH", format!("set to {v}"), &fixed);
        env.insert("PATH".into(), v);
    }
    for (k, v) in &policy.env_set {
        env.insert(k.clone(), v.value.clone());
        b.note("env", k, format!("set to {}", v.value), &v.source);
    }
    // Network: listeners the broker accepts on, and the proxy variables pointing at them.
    let setup = broker_setup(policy)?;
    let net_src = Source::Builtin("network broker".into());
    for (k, v) in setup.as_ref().map(|s| s.env.as_slice()).unwrap_or_default() {
        env.insert(k.clone(), v.clone());
        b.note("env", k, format!("set to {v}"), &net_src);
    }
    let (listeners, broker) = match setup {
        Some(s) => (s.listeners, Some(s.broker)),
        None => (vec![], None),
    };
    let env_list: Vec<String> = env.iter().map(|(k, v)| format!("{k}={v}")).collect();

    // Limits.
    let mut rlimits = vec![];
    let core = if policy.limits.core_dumps.value {
        u64::MAX
    } else {
        0
    };
    rlimits.push(json!({"type": "RLIMIT_CORE", "hard": core, "soft": core}));
    b.note(
        "limit",
        "core_dumps",
        if core == 0 {
            "RLIMIT_CORE = 0"
        } else {
            "allowed"
        },
        &policy.limits.core_dumps.source,
    );
    if let Some(n) = &policy.limits.open_files {
        rlimits.push(json!({"type": "RLIMIT_NOFILE", "hard": n.value, "soft": n.value}));
        b.note(
            "limit",
            "open_files",
            format!("RLIMIT_NOFILE = {}", n.value),
            &n.source,
        );
    }
    if let Some(n) = &policy.limits.processes {
        rlimits.push(json!({"type": "RLIMIT_NPROC", "hard": n.value, "soft": n.value}));
        b.note(
            "limit",
            "processes",
            format!("RLIMIT_NPROC = {}", n.value),
            &n.source,
        );
    }
    if let Some(n) = &policy.limits.memory {
        rlimits.push(json!({"type": "RLIMIT_AS", "hard": n.value, "soft": n.value}));
        b.note(
            "limit",
            "memory",
            format!("RLIMIT_AS = {} bytes", n.value),
            &n.source,
        );
    }
    if let Some(w) = &policy.limits.wall_clock {
        b.note(
            "limit",
            "wall_clock",
            format!("{} s, then the whole sandbox is killed", w.value.as_secs()),
            &w.source,
        );
    }

    // Seccomp and Landlock plan.
    let seccomp = default_seccomp();
    for s in &seccomp.deny {
        b.note(
            "seccomp",
            s,
            "EPERM",
            Source::Builtin("seccomp deny-list".into()),
        );
    }
    for i in &seccomp.deny_ioctls {
        b.note(
            "seccomp",
            format!("ioctl {}", i.name),
            "EPERM",
            Source::Builtin("seccomp deny-list".into()),
        );
    }
    for r in &seccomp.deny_args {
        b.note(
            "seccomp",
            &r.syscall,
            format!("EPERM with {}", r.why),
            Source::Builtin("seccomp deny-list".into()),
        );
    }
    for r in &seccomp.deny_errno {
        b.note(
            "seccomp",
            &r.syscall,
            format!("errno {}: {}", r.errno, r.why),
            Source::Builtin("seccomp deny-list".into()),
        );
    }
    b.note(
        "seccomp",
        "x32 ABI and foreign architectures",
        "EPERM",
        Source::Builtin("seccomp deny-list".into()),
    );
    for ns in ["user", "mount", "pid", "network", "ipc", "uts", "cgroup"] {
        b.note("namespace", ns, "new", &builtin);
    }
    if net_on {
        b.note(
            "network",
            "mode",
            format!(
                "{}: private network namespace with only lo; the host-side broker accepts on 127.0.0.1:{HTTP_PROXY_PORT} (HTTP CONNECT) and 127.0.0.1:{SOCKS_PORT} (SOCKS5)",
                policy.network.value
            ),
            &policy.network.source,
        );
        for a in &policy.allow {
            b.note("network", &a.value, "allowed destination", &a.source);
        }
        for c in &policy.allow_cidrs {
            b.note(
                "network",
                &c.value,
                "allowed address range (even if private)",
                &c.source,
            );
        }
        for h in &policy.host_ports {
            b.note(
                "network",
                format!("localhost:{}", h.value.rsplit(':').next().unwrap_or("")),
                format!("relayed to the host's {}", h.value),
                &h.source,
            );
        }
        for p in &policy.publish {
            b.note(
                "network",
                format!("host 127.0.0.1:{}", p.value),
                format!("published: relayed to the sandbox's port {}", p.value),
                &p.source,
            );
        }
        if let Some(r) = &policy.resolver {
            b.note(
                "network",
                "resolver",
                format!("DNS asked at {} (outside the sandbox)", r.value),
                &r.source,
            );
        }
    } else {
        b.note(
            "network",
            "mode",
            "off: private network namespace, only lo (up)",
            &policy.network.source,
        );
    }
    for k in ignored {
        b.note(
            "network",
            k,
            "IGNORED: mode is off, so nothing is reachable",
            &policy.network.source,
        );
    }
    b.note(
        "process",
        "capabilities",
        "all dropped before exec (CapEff = CapBnd = 0), no_new_privs",
        &builtin,
    );
    b.note(
        "process",
        "identity",
        format!(
            "uid {} gid {} inside, mapped to the caller",
            facts.uid, facts.gid
        ),
        &builtin,
    );
    b.note(
        "approvals",
        "mode",
        format!("{:?}", policy.approvals.value).to_lowercase(),
        &policy.approvals.source,
    );

    // Held by the init only: CAP_SYS_ADMIN (of the sandbox's user namespace) for the masks
    // and protections it mounts; all are dropped before the command runs.
    let caps = [
        "CAP_SYS_ADMIN",
        "CAP_NET_ADMIN",
        "CAP_SETPCAP",
        "CAP_SETUID",
        "CAP_SETGID",
        "CAP_SETFCAP",
    ];
    let spec_json = json!({
        "ociVersion": "1.0.2",
        "root": {"path": "rootfs", "readonly": true},
        "hostname": "vetto",
        "process": {
            "terminal": false,
            "user": {"uid": 0, "gid": 0},
            "args": ["/bin/true"],
            "env": env_list,
            "cwd": facts.cwd,
            "noNewPrivileges": true,
            "capabilities": {"bounding": caps, "effective": caps, "permitted": caps},
            "rlimits": rlimits,
        },
        "mounts": mounts,
        "linux": {
            "uidMappings": [{"containerID": 0, "hostID": facts.uid, "size": 1}],
            "gidMappings": [{"containerID": 0, "hostID": facts.gid, "size": 1}],
            "namespaces": [
                {"type": "user"}, {"type": "mount"}, {"type": "pid"}, {"type": "network"},
                {"type": "ipc"}, {"type": "uts"}, {"type": "cgroup"}
            ],
            "cgroupsPath": format!("/vetto/{id}"),
            "maskedPaths": [
                "/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
                "/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/proc/scsi",
                "/sys/firmware", "/sys/devices/virtual/powercap"
            ],
            "readonlyPaths": [
                "/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"
            ],
        },
        "annotations": {"dev.vetto.profile": policy.profile},
    });
    let spec: Spec =
        serde_json::from_value(spec_json).map_err(|e| TranslateError::Oci(e.to_string()))?;

    let plan = Plan {
        version: 1,
        mounts: b.init_mounts.clone(),
        landlock: LandlockPlan {
            rules: b.rules.clone(),
            min_abi: 1,
            scope: facts.landlock_abi.is_some_and(|a| a >= 6),
        },
        seccomp,
        loopback_up: true,
        network: NetPlan {
            listeners,
            broker,
            publish: if net_on {
                policy.publish.iter().map(|p| p.value).collect()
            } else {
                vec![]
            },
        },
        identity: Identity {
            uid: facts.uid,
            gid: facts.gid,
        },
        wall_clock_secs: policy.limits.wall_clock.as_ref().map(|w| w.value.as_secs()),
    };
    Ok(Translation {
        spec,
        plan,
        rootfs_links: links,
        explain: b.explain,
        handoff_watch,
        handoff: policy.handoff.value,
    })
}
