//! `vetto run`: policy → bundle → libcontainer → wait, from one single-threaded supervisor.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde_json::Value;

use vetto_hooks::process;

use vetto_broker::audit::event::{EndReason, Engine, Limit};
use vetto_broker::error_chain;

use crate::cli::RunArgs;
use crate::engine::{self, Common, CreateOptions, Mode};
use crate::{audit, policy_cmd, pty, session, sidecar, userns};
use vetto_bundle::policy::Tier;

/// Exit status when vetto itself could not set the sandbox up (as Docker and Podman do).
pub const EXIT_SETUP: u8 = 125;
/// Exit status when the wall-clock limit killed the sandbox (as timeout(1) does).
pub const EXIT_WALL_CLOCK: u8 = 124;

/// Phase timings, logged at info level (`-v`): the same names in both tiers where they apply.
pub struct Phases {
    start: Instant,
    last: Instant,
}

impl Phases {
    pub(crate) fn new() -> Self {
        let now = Instant::now();
        Phases {
            start: now,
            last: now,
        }
    }
    pub(crate) fn mark(&mut self, phase: &str) {
        let now = Instant::now();
        tracing::info!(
            phase,
            ms = format!("{:.2}", (now - self.last).as_secs_f64() * 1e3),
            total_ms = format!("{:.2}", (now - self.start).as_secs_f64() * 1e3),
            "phase"
        );
        self.last = now;
    }
}

pub(crate) fn clamp_rlimits(spec: &mut Value) {
    let Some(list) = spec
        .pointer_mut("/process/rlimits")
        .and_then(|v| v.as_array_mut())
    else {
        return;
    };
    for r in list {
        let res = match r["type"].as_str() {
            Some("RLIMIT_NOFILE") => libc::RLIMIT_NOFILE,
            Some("RLIMIT_NPROC") => libc::RLIMIT_NPROC,
            Some("RLIMIT_CORE") => libc::RLIMIT_CORE,
            Some("RLIMIT_AS") => libc::RLIMIT_AS,
            _ => continue,
        };
        let mut cur = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit fills our struct.
        if unsafe { libc::getrlimit(res, &mut cur) } != 0 {
            continue;
        }
        for k in ["hard", "soft"] {
            if let Some(v) = r[k].as_u64() {
                if v > cur.rlim_max {
                    r[k] = Value::from(cur.rlim_max);
                }
            }
        }
    }
}

pub(crate) fn pipe() -> Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 writes two descriptors into our array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        bail!("pipe: {}", std::io::Error::last_os_error());
    }
    // SAFETY: both descriptors were just created and are ours alone.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

fn read_all_nonblocking(fd: RawFd) -> String {
    // SAFETY: setting O_NONBLOCK on our own descriptor.
    unsafe { libc::fcntl(fd, libc::F_SETFL, libc::O_NONBLOCK) };
    let mut out = vec![];
    let mut buf = [0u8; 4096];
    loop {
        // SAFETY: reading into our buffer.
        let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
        if n <= 0 {
            break;
        }
        out.extend_from_slice(&buf[..n as usize]);
    }
    String::from_utf8_lossy(&out).trim().to_string()
}

const SUPERVISED: &[libc::c_int] = &[
    libc::SIGINT,
    libc::SIGTERM,
    libc::SIGHUP,
    libc::SIGQUIT,
    libc::SIGWINCH,
    libc::SIGCHLD,
];

fn copy(from: RawFd, to: RawFd) -> bool {
    let mut buf = [0u8; 16384];
    // SAFETY: reading into our buffer.
    let n = unsafe { libc::read(from, buf.as_mut_ptr().cast(), buf.len()) };
    if n <= 0 {
        return n < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::WouldBlock;
    }
    let mut off = 0usize;
    while off < n as usize {
        // SAFETY: writing from our buffer.
        let w = unsafe { libc::write(to, buf[off..].as_ptr().cast(), n as usize - off) };
        if w <= 0 {
            if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return false;
        }
        off += w as usize;
    }
    true
}

fn drain_once(from: RawFd, to: RawFd) -> bool {
    let mut buf = [0u8; 16384];
    // SAFETY: reading into our buffer.
    let n = unsafe { libc::read(from, buf.as_mut_ptr().cast(), buf.len()) };
    if n <= 0 {
        return false;
    }
    // SAFETY: writing from our buffer.
    unsafe { libc::write(to, buf.as_ptr().cast(), n as usize) };
    true
}

/// Run the command; returns its exit status.
pub fn run(args: &RunArgs) -> Result<u8> {
    let mut ph = Phases::new();
    // FULL's user, network and IPC namespaces, made by a helper on the other CPU while the
    // policy is built (nsstage.rs); collected and checked when the tier is chosen (with
    // `--tier auto`, its outcome is the tier probe's verdict), closed if it is not FULL.
    // SAFETY: getuid and getgid have no preconditions.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    let stage = (args.tier != crate::tier::TierChoice::FsOnly)
        .then(|| crate::nsstage::Stage::spawn(uid, gid));
    // The audit store's directory exists before the sandbox is planned, so the plan masks it
    // (the key is made in it when the session's recorder opens, before anything runs).
    let audit_dir = audit::prepare(&args.audit)?;
    // The approvals store lives there too, audited or not (the broker opens it): made now, so
    // the plan masks it even for a project around it (HOME) and seals it from write roots.
    if let Some(d) = vetto_broker::audit::user_dir() {
        vetto_broker::audit::store::private_dir(&d)
            .map_err(|e| anyhow::anyhow!(vetto_broker::error_chain(&e)))?;
    }
    // The command as `execvp` would find it on the host (the sandbox gets the same PATH).
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
    let host_path = std::env::var("PATH").unwrap_or_default();
    let project = args
        .policy
        .project
        .clone()
        .unwrap_or_else(|| cwd.clone())
        .canonicalize()
        .unwrap_or_else(|_| cwd.clone());
    let found = args
        .command
        .first()
        .and_then(|c| vetto_bundle::host::resolve_command(c, &host_path, &cwd));
    let outside_project = found
        .as_ref()
        .and_then(|f| f.canonicalize().ok())
        .is_some_and(|c| !c.starts_with(&project));
    // `vetto run claude`: the agent's own profile, unless another (or `none`) is named; only
    // for a bare name that resolves outside the project (a `claude` in the project, or found
    // through a relative PATH entry, is the project's program, not the agent: `--agent`).
    let mut policy_args = args.policy.clone();
    if policy_args.agent.is_none() && outside_project {
        policy_args.agent = args
            .command
            .first()
            .filter(|c| !c.contains('/'))
            .and_then(|c| vetto_bundle::profiles::recognise(c))
            .map(str::to_string);
    }
    // The command's own installation, read-only, where the sandbox would not see it (an agent
    // installed into HOME by npm or pipx).
    if let (Some(f), true) = (&found, outside_project) {
        let home = PathBuf::from(std::env::var_os("HOME").unwrap_or_default());
        let home = home.canonicalize().unwrap_or(home);
        let keep_out: Vec<PathBuf> = [
            policy_cmd::config_dir().ok(),
            vetto_broker::audit::user_dir(),
        ]
        .into_iter()
        .flatten()
        .collect();
        policy_args.command_install =
            vetto_bundle::host::command_install(f, &home, &project, &keep_out)
                .iter()
                .map(|p| p.display().to_string())
                .collect();
    }
    if let Some(id) = &args.resume {
        match policy_args.project_access.as_deref() {
            None | Some("review") => policy_args.project_access = Some("review".into()),
            Some(other) => bail!(
                "--resume {id} continues a review-mode change set; it cannot be combined with --project-access {other}"
            ),
        }
    }
    let mut review: Option<crate::changes::session::ReviewRun> = None;
    let built = policy_cmd::build_with(&policy_args, "run", &mut |facts, policy| {
        let r = crate::changes::session::ReviewRun::prepare(args.resume.as_deref(), facts, policy)?;
        let layers = r.layers();
        review = Some(r);
        Ok(layers)
    });
    let (facts, policy, mut t, listings) = match built {
        Ok(b) => b,
        Err(e) => {
            if let Some(dir) = &audit_dir {
                let home = PathBuf::from(std::env::var_os("HOME").unwrap_or_default());
                if let Ok(cfg) = audit::run_config(dir, &args.audit, None, &home) {
                    let reason = error_chain(e.as_ref());
                    audit::refusal(
                        &cfg,
                        &session::new_id(),
                        "policy",
                        vec![reason],
                        &args.command,
                        Engine::Run,
                    );
                }
            }
            return Err(e);
        }
    };
    if let Some(parent) = crate::nested::parent()? {
        crate::nested::check_ceiling(&parent, &policy)?;
        if t.plan.network.broker.is_some() {
            bail!("network: a nested sandbox runs with the network off: its broker would dial from inside the parent sandbox, which has no network but the parent's broker; run the nested sandbox with the network off");
        }
    }
    let mut staged = stage.map(|s| s.and_then(crate::nsstage::Stage::collect));
    let verdict = staged
        .as_ref()
        .map(|r| r.as_ref().map(|_| ()).map_err(|e| e.as_no_full()));
    let tier =
        match crate::tier::select(args.tier, policy.require.value, facts.landlock_abi, verdict) {
            Ok(tier) => tier,
            Err(why) => {
                if let Some(dir) = &audit_dir {
                    let home = PathBuf::from(std::env::var_os("HOME").unwrap_or_default());
                    if let Ok(cfg) = audit::run_config(dir, &args.audit, None, &home) {
                        audit::refusal(
                            &cfg,
                            &session::new_id(),
                            "tier",
                            vec![why.clone()],
                            &args.command,
                            Engine::Run,
                        );
                    }
                }
                bail!("{why}");
            }
        };
    if tier != Tier::Full {
        // FS-ONLY: the namespaces (if any were made) are closed now.
        staged = None;
    }
    let tier_name = match tier {
        Tier::Full => "FULL",
        Tier::FsOnly => "FS-ONLY",
    };
    if review.is_some() && tier == Tier::FsOnly {
        bail!("review mode needs the FULL tier: the project's overlay is mounted in the sandbox's own mount namespace, which FS-ONLY does not have (see `vetto doctor`)");
    }
    if !args.quiet {
        let agent = policy
            .agent
            .as_ref()
            .map(|a| format!(", agent profile {a}"))
            .unwrap_or_default();
        eprintln!(
            "vetto: tier {tier_name}, landlock ABI {}{agent}",
            facts.landlock_abi.unwrap_or(0)
        );
    }
    let audit_cfg = audit_dir
        .as_deref()
        .map(|d| audit::run_config(d, &args.audit, Some(&policy), &facts.home))
        .transpose()?;
    let visible: Vec<PathBuf> = t.bind_sources();
    if let Some(cfg) = &audit_cfg {
        audit::check_outside(cfg, &t.writable_roots, &visible)?;
    }
    let change_set = review.as_ref().map(|r| r.id().to_string());
    let audit_start = || {
        let mut s = audit::run_start(
            &policy,
            facts.landlock_abi,
            &args.command,
            &facts.project,
            facts.uid,
            tier_name,
        );
        s.change_set = change_set.clone();
        s
    };
    ph.mark("policy");

    let root = session::runtime_root(facts.uid)?;
    // The sessions' control sockets live there: no sandbox may reach it by any path.
    if let Ok(canon) = root.canonicalize() {
        if let Some(r) = visible
            .iter()
            .chain(&t.writable_roots)
            .find(|r| canon.starts_with(r) || r.starts_with(&canon))
        {
            bail!(
                "approvals: the runtime directory {} (which holds the sessions' control sockets) is inside or around {}, which the sandbox can reach; set XDG_RUNTIME_DIR elsewhere",
                canon.display(),
                r.display()
            );
        }
    }
    // The approvals store the broker will open: a store that cannot be opened stops the run
    // here, before anything starts.
    if t.plan.network.broker.is_some() {
        if let Some(db) = vetto_broker::audit::user_dir().map(|d| d.join("approvals.db")) {
            vetto_broker::approvals::RuleStore::open(&db)
                .map_err(|e| anyhow::anyhow!(vetto_broker::error_chain(&e)))?;
        }
    }
    let swept = session::sweep_stale(&root);
    // FS-ONLY has no libcontainer state; its session directory holds the approvals' control
    // socket when the broker runs.
    if tier == Tier::FsOnly {
        return crate::fsonly::run(crate::fsonly::FsOnly {
            args,
            facts: &facts,
            policy: &policy,
            t: &t,
            audit_cfg: audit_cfg.as_ref(),
            session: &session::new_id(),
            runtime_root: &root,
            phases: ph,
            listings,
        });
    }
    // The policy nested runs read as their ceiling (bound read-only below).
    t.plan
        .landlock
        .rules
        .push(vetto_bundle::plan::LandlockRule {
            path: crate::nested::PARENT_POLICY_PATH.into(),
            access: vetto_bundle::plan::FsAccess::ReadExec,
            optional: false,
        });
    // FULL from here: the namespaces made ahead of time, checked, or the command does not
    // run (a failure names the step).
    let namespaces = staged
        .take()
        .unwrap_or(Err(crate::nsstage::NsStageError::NoReport))
        .context(
            "tier FULL: the sandbox's namespaces could not be set up; the command does not run",
        )?;
    let sess = session::create(&root)?;
    let bundle = sess.bundle();

    // config.json: the translated spec, with the command, joining the namespaces made ahead
    // of time.
    let mut spec = std::mem::take(&mut t.spec);
    spec["process"]["args"] = Value::from(args.command.clone());
    // The user, network and IPC namespaces are joined, not made: their maps are written
    // already (the sandbox's user namespace maps 0 -> 0 of the supervisor's, i.e. -> the
    // caller), so the spec carries none.
    for m in ["uidMappings", "gidMappings"] {
        if let Some(l) = spec["linux"].as_object_mut() {
            l.remove(m);
        }
    }
    for (ty, path) in namespaces.paths() {
        if let Some(list) = spec["linux"]["namespaces"].as_array_mut() {
            for ns in list.iter_mut().filter(|n| n["type"] == ty) {
                ns["path"] = Value::from(path.clone());
            }
        }
    }
    spec["process"]["terminal"] = Value::from(pty::is_tty(0) && pty::is_tty(1));
    spec["linux"]["cgroupsPath"] = Value::from(format!("/vetto/{}", sess.id));
    if args.git_ssh {
        git_ssh(&mut spec, t.plan.network.broker.is_some())?;
    }
    clamp_rlimits(&mut spec);
    // A nested `vetto run` reads this sandbox's policy as its ceiling (read-only inside).
    let parent_file = sess.dir.join("parent-policy.json");
    std::fs::write(&parent_file, crate::nested::serialize(&policy)?)
        .context("writing the policy for nested sandboxes")?;
    if let Some(m) = spec["mounts"].as_array_mut() {
        m.push(serde_json::json!({"destination": crate::nested::PARENT_POLICY_PATH, "type": "bind", "source": parent_file, "options": ["bind", "ro", "nosuid", "nodev", "noexec"]}));
    }
    if let Some(env) = spec["process"]["env"].as_array_mut() {
        env.push(Value::from(format!(
            "{}={}",
            crate::nested::PARENT_POLICY_ENV,
            crate::nested::PARENT_POLICY_PATH
        )));
    }
    // The mounts the supervisor makes itself (rootfs.rs's `Premade`), out of config.json.
    let links: Vec<PathBuf> = t.rootfs_links.iter().map(|(l, _)| l.clone()).collect();
    let all_mounts: Vec<Value> = spec["mounts"].as_array().cloned().unwrap_or_default();
    // Each bind's source is looked at once (symlinks followed, as libcontainer does): is it a
    // directory, a regular file?
    let kinds = std::cell::RefCell::new(std::collections::HashMap::<PathBuf, (bool, bool)>::new());
    let kind = |p: &Path| {
        *kinds
            .borrow_mut()
            .entry(p.to_path_buf())
            .or_insert_with(|| {
                p.metadata()
                    .map_or((false, false), |m| (m.is_dir(), m.is_file()))
            })
    };
    let pre = crate::rootfs::premade(&all_mounts, &links, &|p: &Path| {
        let (dir, file) = kind(p);
        dir || file
    });
    let (mut premade, mut left) = (vec![], vec![]);
    for (m, p) in all_mounts.iter().zip(&pre) {
        match p {
            true => premade.push(m.clone()),
            false => left.push(m.clone()),
        }
    }
    spec["mounts"] = Value::from(left);
    // Compact: libcontainer reads it back once, and no one else reads it. (The plan is not
    // written beside it: the init gets it in memory, and nothing read the copy.)
    std::fs::write(bundle.join("config.json"), serde_json::to_vec(&spec)?)
        .context("writing config.json")?;
    let rootfs = bundle.join("rootfs");
    std::fs::create_dir(&rootfs).context("creating rootfs")?;
    for (link, target) in &t.rootfs_links {
        let rel = link.strip_prefix("/").unwrap_or(link);
        std::os::unix::fs::symlink(target, rootfs.join(rel))
            .with_context(|| format!("rootfs link {}", link.display()))?;
    }
    let dirs = crate::rootfs::mount_points(&all_mounts, &links, &|p: &Path| kind(p).0);
    crate::rootfs::make(&rootfs, &dirs);
    ph.mark("bundle");

    // RLIMIT_NPROC does not bind host root: a root caller's process limit is a pids cgroup.
    let pids_cg = match (&policy.limits.processes, facts.uid) {
        (Some(n), 0) => Some(crate::pids::PidsCgroup::create(&sess.id, n.value).context(
            "limits.processes: RLIMIT_NPROC does not bind a root caller, so a pids cgroup is needed and could not be made (the command did not run)",
        )?),
        _ => None,
    };
    if let Some(r) = review.as_mut() {
        r.settle();
    }
    // The session's audit writer opens the store and records `session_start` on another CPU
    // while the sandbox is created; its answer is collected before the command starts. It is
    // started here, outside the user namespace and the pids cgroup (see audit/writer.rs).
    let audit_pending =
        audit::start_writer(audit_cfg.as_ref(), &sess.id, audit_start, &args.audit)?;
    userns::enter_prepared(&namespaces)?;
    let mut premade = crate::rootfs::Premade::make(&rootfs, &premade)?;
    ph.mark("userns");

    let tty = pty::is_tty(0) && pty::is_tty(1);
    let console = match tty {
        true => {
            let path = sess.dir.join("console.sock");
            let l = std::os::unix::net::UnixListener::bind(&path)
                .context("terminal: console socket")?;
            Some((l, path))
        }
        false => None,
    };
    let (err_r, err_w) = pipe()?;
    let (status_r, status_w) = pipe()?;
    let net = &t.plan.network;
    let published = sidecar::bind_published(&net.publish)?;
    let listen_chan = match net.listeners.is_empty() {
        true => None,
        false => Some(sidecar::channel()?),
    };
    let pidfd = vetto_hooks::process::pidfd_open(nix::unistd::getpid().as_raw(), 0).ok();
    let sfd = vetto_hooks::process::block_into_signalfd(
        SUPERVISED,
        libc::SFD_CLOEXEC | libc::SFD_NONBLOCK,
    )
    .context("supervisor: signalfd")?;
    // Compiled here, before anything is cloned: a bad deny-list fails first.
    let mut hardening = vetto_hooks::init::hardening(
        &t.plan,
        listen_chan
            .as_ref()
            .map(|(_, init_end)| init_end.as_raw_fd()),
        pidfd.as_ref().map(|p| p.as_raw_fd()),
    )?;
    // The init checks that it joined the network namespace checked here.
    hardening.netns = Some(namespaces.net_id());
    let mode = Mode::Supervised {
        tty,
        error_fd: Some(err_w.as_raw_fd()),
        status_fd: Some(status_w.as_raw_fd()),
        pids_cgroup: pids_cg.as_ref().map(|c| c.join_fd()),
    };
    let cwd = std::env::current_dir()?;
    arm_setup_watchdog();
    let state_root = sess.state();
    let created = engine::create(CreateOptions {
        common: Common {
            id: &sess.id,
            state_root: &state_root,
            console_socket: console.as_ref().map(|(_, p)| p.as_path()),
            pid_file: None,
            preserve_fds: 0,
        },
        bundle: &bundle,
        no_pivot: false,
        systemd_cgroup: false,
        hardening,
        mode,
    });
    // libcontainer chdirs while it works; come back before anything relative is used.
    let _ = std::env::set_current_dir(&cwd);
    drop(err_w);
    drop(status_w);
    let listen_sock = listen_chan.map(|(sup, _init_end)| sup);
    let mut container = match created {
        Ok(c) => c,
        Err(e) => {
            let msg = read_all_nonblocking(err_r.as_raw_fd());
            let msg = match msg.is_empty() {
                true => e.to_string(),
                false => format!("{e}: {msg}"),
            };
            if let Some(p) = audit_pending {
                end_setup_failure(p.started().ok(), msg.clone());
            }
            bail!("{msg}");
        }
    };
    // The sandbox holds its namespaces now; the supervisor's descriptors of them go.
    drop(namespaces);
    ph.mark("create");
    // The record exists before the command runs. Only the writer opens the store, so no
    // sandbox process holds one of its descriptors.
    let mut live = match audit_pending {
        Some(p) => match p.started() {
            Ok(l) => Some(l),
            Err(e) => {
                let _ = container.delete(true);
                return Err(e.context(
                    "audit: the session cannot be recorded, so the command does not run",
                ));
            }
        },
        None => None,
    };
    if let Some(l) = live.as_mut() {
        // Sessions swept as stale at the start whose end was never recorded: the writer ends
        // them while this one runs (nothing is sent when none was swept).
        l.abandoned(swept);
    }
    ph.mark("audit start");
    let setup_failed = |live: Option<audit::Live>, what: &anyhow::Error| {
        end_setup_failure(live, format!("{what:#}"));
    };
    let master = match &console {
        Some((l, _)) => match pty::recv_master(l, Duration::from_secs(10)) {
            Ok(m) => {
                pty::copy_winsize(0, m.as_raw_fd());
                Some(m)
            }
            Err(e) => {
                let _ = container.delete(true);
                setup_failed(live, &e);
                return Err(e);
            }
        },
        None => None,
    };
    let init_pid = match container.start() {
        Ok(p) => p,
        Err(e) => {
            let _ = container.delete(true);
            let e = anyhow::Error::from(e);
            setup_failed(live, &e);
            return Err(e);
        }
    };
    let _ = std::env::set_current_dir(&cwd);
    // The sandbox has its copies of the premade mounts: the supervisor's go, while the
    // command starts.
    premade.detach();
    if let Some(r) = review.as_mut() {
        // The sandbox runs on the set from now on: it is kept, whatever happens next.
        r.start();
    }
    let broker = match (&listen_sock, &net.broker) {
        (Some(sock), Some(plan)) => {
            let want = net.listeners.len() + usize::from(!net.publish.is_empty());
            let approvals = || -> Result<_> {
                let spec = sidecar::approvals_spec(
                    plan,
                    args.unattended,
                    // A person at the terminal vetto was started from can answer from another.
                    pty::is_tty(0),
                    format!("project {}", facts.project.display()),
                    vetto_broker::audit::user_dir().map(|d| d.join("approvals.db")),
                    &sess.id,
                    facts.uid,
                );
                let control = sidecar::bind_control(&sess.dir)?;
                Ok((spec, Some(control)))
            };
            let started = sidecar::receive(sock, want, Duration::from_secs(10)).and_then(|fds| {
                sidecar::spawn(
                    plan,
                    &net.listeners,
                    fds,
                    sidecar::HostSide {
                        published,
                        peers: None,
                    },
                    sidecar::Lifetime::DieWithParent,
                    audit_cfg.as_ref().map(|c| sidecar::BrokerAudit {
                        config: c.clone(),
                        session: sess.id.clone(),
                    }),
                    Some(approvals()?),
                )
            });
            match started {
                Ok(child) => Some(child),
                Err(e) => {
                    process::kill_and_reap(init_pid);
                    setup_failed(live, &e);
                    return Err(e);
                }
            }
        }
        _ => None,
    };
    // SAFETY: alarm(0) cancels the watchdog.
    unsafe { libc::alarm(0) };
    ph.mark("container");

    let deadline = t
        .plan
        .wall_clock_secs
        .map(|s| Instant::now() + Duration::from_secs(s));
    let raw = master.as_ref().and_then(|_| pty::RawMode::enter(0));
    let (status, init_left) = supervise(
        init_pid,
        sfd.as_raw_fd(),
        master.as_ref().map(|m| m.as_raw_fd()),
        deadline,
        status_r.as_raw_fd(),
    );
    drop(raw);
    // Nothing of the sandbox runs any more: PID 1 reaped it all before it reported the
    // status (or it has exited). Having reported, PID 1 waits to be killed: it is killed and
    // reaped last (`init_left`), after the front has the status, so that its end (its
    // namespaces' teardown) does not hold up the session's.
    // No cgroup was made (see userns.rs). libcontainer's state lives in the session
    // directory, removed below with it, so its delete() (a cgroup manager round trip, ~2 ms)
    // has nothing left to do.
    drop(container);
    let refused_forks = pids_cg.as_ref().and_then(|c| c.refused_forks());
    // The broker records the connections still open, then exits: before the session's end.
    if let Some(b) = broker {
        sidecar::stop(b);
    }
    ph.mark("session");
    let msg = read_all_nonblocking(err_r.as_raw_fd());
    if let Some(l) = live.as_mut() {
        record_limits(
            l,
            refused_forks,
            &policy,
            matches!(status, Outcome::WallClock).then_some(t.plan.wall_clock_secs.unwrap_or(0)),
        );
    }
    // The writer records the end while the handoff is checked; its answer (and the summary)
    // is collected before the status goes to the front.
    let mut ending = live.map(|l| {
        let (status, signal, reason, control) = match &status {
            Outcome::WallClock => (
                Some(i32::from(EXIT_WALL_CLOCK)),
                None,
                EndReason::WallClock,
                None,
            ),
            Outcome::Exited { code, .. } if !msg.is_empty() && *code != 126 && *code != 127 => (
                Some(i32::from(EXIT_SETUP)),
                None,
                EndReason::SetupFailure,
                Some(msg.clone()),
            ),
            Outcome::Exited { code, forwarded } if *code > 128 => {
                let reason = match forwarded {
                    true => EndReason::Killed,
                    false => EndReason::Signal,
                };
                (Some(*code), Some(code - 128), reason, None)
            }
            Outcome::Exited { code, .. } => (Some(*code), None, EndReason::Exit, None),
        };
        l.finish(status, signal, reason, control)
    });
    crate::handoff::check_session(&t, &policy, &facts, listings, &sess.id);
    ph.mark("handoff");
    // The writer's answer; it is reaped (its exit waited for) after the status is delivered.
    if let Some(e) = ending.as_mut() {
        e.answer();
        ph.mark("audit end");
    }
    let mut trash = None;
    if let Some(r) = review.take() {
        let (summary, t) = r.finish();
        eprint!("{summary}");
        trash = t;
    }
    let code = match status {
        Outcome::WallClock => {
            eprintln!(
                "vetto: wall-clock limit of {} s reached: the sandbox was killed",
                t.plan.wall_clock_secs.unwrap_or(0)
            );
            EXIT_WALL_CLOCK
        }
        Outcome::Exited { code, .. } => {
            let code = code as u8;
            match msg.is_empty() {
                true => code,
                false if code == 126 || code == 127 => {
                    eprintln!("vetto: {msg}");
                    code
                }
                false => {
                    eprintln!("vetto: sandbox setup failed, the command did not run: {msg}");
                    EXIT_SETUP
                }
            }
        }
    };
    // Everything the caller waits for is done: nothing of the sandbox runs, the record is
    // ended, the handoff checked, everything said. The front exits with the status now; what
    // is left below is this process's own (stdout and stderr are /dev/null from here).
    if tracing::enabled!(tracing::Level::INFO) {
        tracing::info!(peak_rss_kib = peak_rss_kib(), "supervisor");
    }
    ph.mark("status");
    crate::front::deliver(code);
    if init_left {
        // It has reported and waits for this (see `vetto_hooks::init`).
        process::kill_and_reap(init_pid);
    }
    // Emptied as the kernel finished PID 1 (the only member left).
    drop(pids_cg);
    ph.mark("reaped");
    // After PID 1's mount namespace is gone: removing the bundle's mount points while it
    // was being torn down detached its mounts from here, in contention with the kernel.
    drop(sess);
    ph.mark("session dir");
    // An empty new change set, out of the listing since its summary: removed now that the
    // overlay's mount namespace is gone (a supervisor killed before this leaves it to the
    // next review session's sweep).
    if let Some(t) = trash {
        let _ = t.remove();
    }
    drop(ending);
    Ok(code)
}

/// This process's peak resident set (`VmHWM`), in KiB (0 if unreadable): with the front, the
/// caller's `wait4` sees the front's, not the supervisor's.
fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

/// End a session's record (if it has one) as a setup failure: the command did not run, for
/// the reason `detail`. Both tiers' supervisors call it.
pub(crate) fn end_setup_failure(live: Option<audit::Live>, detail: String) {
    if let Some(l) = live {
        l.end(None, None, EndReason::SetupFailure, Some(detail));
    }
}

/// Record the limits the session hit: forks refused at `limits.processes`, and the wall
/// clock (its seconds) when it killed the sandbox. Both tiers' supervisors call it.
pub(crate) fn record_limits(
    live: &mut audit::Live,
    refused_forks: Option<u64>,
    policy: &vetto_bundle::resolve::Policy,
    wall_clock_hit: Option<u64>,
) {
    if let (Some(n), Some(limit)) = (refused_forks.filter(|n| *n > 0), &policy.limits.processes) {
        live.limit(Limit {
            limit: "processes".into(),
            value: limit.value,
            detail: format!("a fork was refused {n} time(s) at the limit"),
        });
    }
    if let Some(secs) = wall_clock_hit {
        live.limit(Limit {
            limit: "wall_clock".into(),
            value: secs,
            detail: "the sandbox was killed".into(),
        });
    }
}

/// Where the vetto binary is bound inside the sandbox for `--git-ssh` when it is not visible
/// at its own path.
pub const INNER_VETTO: &str = "/tmp/.vetto/vetto";

fn git_ssh(spec: &mut Value, broker: bool) -> Result<()> {
    if !broker {
        bail!("--git-ssh: the network is off; allow the git host's port 22 (e.g. --net allow:github.com:22)");
    }
    let exe = std::env::current_exe().context("--git-ssh: locating the vetto binary")?;
    let visible = ["/usr/", "/opt/"].iter().any(|p| exe.starts_with(p));
    let inner = if visible {
        exe.display().to_string()
    } else {
        if let Some(m) = spec["mounts"].as_array_mut() {
            m.push(serde_json::json!({"destination": INNER_VETTO, "type": "bind", "source": exe, "options": ["bind", "ro", "nosuid", "nodev"]}));
        }
        INNER_VETTO.to_string()
    };
    let cmd = format!("GIT_SSH_COMMAND=ssh -o ProxyCommand='{inner} connect %h %p'");
    if let Some(env) = spec["process"]["env"].as_array_mut() {
        env.retain(|e| {
            !e.as_str()
                .is_some_and(|s| s.starts_with("GIT_SSH_COMMAND="))
        });
        env.push(Value::from(cmd));
    }
    Ok(())
}

/// Seconds the container setup may take before vetto gives up.
pub const SETUP_TIMEOUT_SECS: u32 = 60;

extern "C" fn setup_timed_out(_: libc::c_int) {
    let msg =
        b"vetto: sandbox setup did not finish within 60 s; giving up (the command did not run)\n";
    // SAFETY: write and _exit are async-signal-safe; the buffer is static.
    unsafe {
        libc::write(2, msg.as_ptr().cast(), msg.len());
        libc::_exit(EXIT_SETUP as libc::c_int);
    }
}

/// If libcontainer's setup ever hangs (its processes died without reporting), the
/// supervisor exits instead of waiting forever; PDEATHSIG takes anything it started along.
fn arm_setup_watchdog() {
    // SAFETY: installing an async-signal-safe handler for SIGALRM, then arming the timer.
    unsafe {
        libc::signal(
            libc::SIGALRM,
            setup_timed_out as *const () as libc::sighandler_t,
        );
        libc::alarm(SETUP_TIMEOUT_SECS);
    }
}

enum Outcome {
    /// The init exited with this status; `forwarded` when vetto had relayed a terminating
    /// signal (SIGINT, SIGTERM, SIGHUP, SIGQUIT) to it.
    Exited {
        code: i32,
        forwarded: bool,
    },
    WallClock,
}

/// Wait for the sandbox's end, forwarding signals and the terminal meanwhile. Returns how it
/// ended, and whether PID 1 is still to be reaped: it reported the command's exit code on
/// `status` (every other process of the sandbox reaped) and is exiting.
fn supervise(
    init: i32,
    sfd: RawFd,
    master: Option<RawFd>,
    deadline: Option<Instant>,
    status: RawFd,
) -> (Outcome, bool) {
    let mut stdin_open = master.is_some();
    let mut forwarded = false;
    let mut master_open = master.is_some();
    let mut status_open = true;
    loop {
        let mut fds = vec![
            libc::pollfd {
                fd: sfd,
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: if status_open { status } else { -1 },
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        if let Some(m) = master {
            fds.push(libc::pollfd {
                fd: if stdin_open { 0 } else { -1 },
                events: libc::POLLIN,
                revents: 0,
            });
            fds.push(libc::pollfd {
                fd: if master_open { m } else { -1 },
                events: libc::POLLIN,
                revents: 0,
            });
        }
        let timeout = deadline.map_or(-1, |d| {
            d.saturating_duration_since(Instant::now())
                .as_millis()
                .min(i32::MAX as u128) as i32
        });
        // SAFETY: polling our own array of pollfds.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout) };
        if n == 0 && deadline.is_some_and(|d| Instant::now() >= d) {
            process::kill_and_reap(init);
            return (Outcome::WallClock, false);
        }
        if let Some(m) = master {
            if fds[2].revents & (libc::POLLIN | libc::POLLHUP) != 0 && !copy(0, m) {
                stdin_open = false;
            }
            if fds[3].revents & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) != 0 && !copy(m, 1) {
                master_open = false;
            }
        }
        let mut reported = None;
        if fds[1].revents & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) != 0 {
            let mut buf = [0u8; 4];
            // SAFETY: reading at most 4 bytes into our own buffer.
            let r = unsafe { libc::read(status, buf.as_mut_ptr().cast(), buf.len()) };
            match r {
                4 => reported = Some(i32::from_ne_bytes(buf)),
                // Closed without a report (PID 1 died another way): its exit tells.
                _ => status_open = false,
            }
        }
        if fds[0].revents & libc::POLLIN != 0 {
            loop {
                // SAFETY: signalfd_siginfo is plain data.
                let mut info: libc::signalfd_siginfo = unsafe { std::mem::zeroed() };
                let want = std::mem::size_of::<libc::signalfd_siginfo>();
                // SAFETY: reading exactly one siginfo into our struct.
                let r = unsafe {
                    libc::read(sfd, (&mut info as *mut libc::signalfd_siginfo).cast(), want)
                };
                if r as usize != want {
                    break;
                }
                let sig = info.ssi_signo as libc::c_int;
                match sig {
                    libc::SIGCHLD => {}
                    libc::SIGWINCH => {
                        if let Some(m) = master {
                            pty::copy_winsize(0, m);
                        }
                    }
                    // A signal sent to vetto's whole group, relayed by the front too.
                    _ if !crate::front::fresh(&info) => {}
                    s => {
                        forwarded = true;
                        // SAFETY: forwarding a signal to the init we created; it relays it to
                        // the command's process group.
                        unsafe { libc::kill(init, s) };
                    }
                }
            }
        }
        let ended = match reported {
            Some(code) => Some((code, true)),
            None => process::try_wait(init).map(|code| (code, false)),
        };
        if let Some((code, init_left)) = ended {
            if let Some(m) = master {
                // SAFETY: our own descriptor; drain what the command wrote last.
                unsafe { libc::fcntl(m, libc::F_SETFL, libc::O_NONBLOCK) };
                while drain_once(m, 1) {}
            }
            return (Outcome::Exited { code, forwarded }, init_left);
        }
    }
}
