//! The network broker as a sidecar process: the supervisor receives the listening sockets the
//! sandbox's init created on its loopback, and starts `vetto __broker` with them as fds 3…
//! The broker is async (tokio) and so never lives in the single-threaded supervisor that
//! drives libcontainer. It dies with the supervisor (PDEATHSIG); if it crashes, the sockets
//! close and the sandbox's network is gone: it fails closed.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use std::net::SocketAddr;

use anyhow::{anyhow, bail, Context, Result};
use serde::{Deserialize, Serialize};
use vetto_broker::approvals::{ApprovalSpec, GateMode};
use vetto_broker::server::{BrokerError, BrokerSpec, ListenerKind};
use vetto_broker::{error_chain, DEFAULT_IDLE_TIMEOUT_SECS};
use vetto_bundle::plan::{BrokerPlan, Listener, ListenerRole};

/// The environment variable carrying the broker's [`Launch`] (JSON).
pub const SPEC_ENV: &str = "VETTO_BROKER_SPEC";

/// Everything `vetto __broker` is started with, besides its descriptors: written by
/// [`spawn`] and read by `broker_cmd` with the same types (serde, unknown fields refused),
/// so the two ends cannot disagree on a name.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Launch {
    /// The broker's configuration.
    pub spec: BrokerSpec,
    /// What each inherited listening socket is, in fd order from 3.
    pub listeners: Vec<ListenerKind>,
    /// Where the broker records each connection, if the session is audited.
    pub audit: Option<BrokerAudit>,
}

/// The audit trail a broker writes its connections into: the store, and the session they
/// belong to.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct BrokerAudit {
    /// The store, key and JSONL sink (OTLP is exported by the supervisor or the shim).
    pub config: vetto_broker::audit::AuditConfig,
    /// The session id.
    pub session: String,
}

/// A `SOCK_SEQPACKET` pair: (supervisor end, init end).
pub fn channel() -> Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: socketpair writes two descriptors into our array.
    let r = unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    };
    if r != 0 {
        bail!("network: socketpair: {}", std::io::Error::last_os_error());
    }
    // SAFETY: both descriptors were just created and are ours alone.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Receive the listeners the init sent, in plan order.
pub fn receive(sock: &OwnedFd, want: usize, timeout: Duration) -> Result<Vec<OwnedFd>> {
    let mut p = libc::pollfd {
        fd: sock.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    let n = unsafe { libc::poll(&mut p, 1, timeout.as_millis() as libc::c_int) };
    if n != 1 {
        bail!("network: the sandbox did not hand over its listening sockets");
    }
    let out = crate::fdpass::recv_fds(sock.as_raw_fd())
        .map_err(|e| anyhow::anyhow!("network: receiving the listening sockets: {e}"))?;
    if out.len() != want {
        bail!(
            "network: expected {want} listening sockets from the sandbox, got {}",
            out.len()
        );
    }
    Ok(out)
}

/// The broker's listener kind for a planned sandbox listener. A `host_ports` target is
/// parsed as a `SocketAddr` here; `serve` then refuses one that is not loopback.
fn listener_kind(r: &ListenerRole) -> Result<ListenerKind> {
    Ok(match r {
        ListenerRole::HttpProxy => ListenerKind::HttpProxy,
        ListenerRole::Socks5 => ListenerKind::Socks5,
        ListenerRole::HostPort { target } => ListenerKind::HostPort(
            target
                .parse::<SocketAddr>()
                .with_context(|| format!("network: host port target {target:?}"))?,
        ),
    })
}

/// Bind the host side of `network.publish` now, so a port in use fails before the sandbox
/// starts.
pub fn bind_published(ports: &[u16]) -> Result<Vec<(u16, OwnedFd)>> {
    ports
        .iter()
        .map(|p| {
            let l = std::net::TcpListener::bind(("127.0.0.1", *p)).with_context(|| {
                format!("network.publish: cannot listen on the host's 127.0.0.1:{p}")
            })?;
            Ok((*p, OwnedFd::from(l)))
        })
        .collect()
}

/// The environment variable naming a pid the broker exits with (`vetto-shim`).
pub const WATCH_ENV: &str = "VETTO_BROKER_WATCH_PID";

/// How the broker's life is tied to its sandbox.
pub enum Lifetime {
    /// `vetto run`: it dies with the supervisor (PDEATHSIG).
    DieWithParent,
    /// `vetto-shim`: the runtime exits right after `create`, so the broker is a daemon in its
    /// own session that exits when the container's init (this pid) does; its output goes to
    /// the given file.
    Watch {
        /// The container's init.
        pid: i32,
        /// stdout and stderr.
        log: std::fs::File,
    },
}

/// The spec the broker is started with for `plan` (without the sandbox's network
/// namespace descriptor, which only [`spawn`] knows). Every field of both types is named
/// here, so a field added to either is a compile error until it is bridged; the idle timeout
/// is not a policy key, so it is the broker's default.
pub fn broker_spec(plan: &BrokerPlan) -> BrokerSpec {
    let BrokerPlan {
        allow,
        allow_cidrs,
        strict,
        resolver,
        connects_per_minute,
        max_connections,
        deny,
        ask: _,
        approval_timeout_secs: _,
    } = plan;
    BrokerSpec {
        allow: allow.clone(),
        allow_cidrs: allow_cidrs.clone(),
        strict: *strict,
        resolver: resolver.clone(),
        max_connections: *max_connections,
        idle_timeout_secs: DEFAULT_IDLE_TIMEOUT_SECS,
        connects_per_minute: *connects_per_minute,
        sandbox_netns_fd: None,
        deny: deny.clone(),
        // Set by the caller ([`approvals_spec`]): who can answer depends on where it runs.
        approvals: None,
        // Set by [`spawn`] in FS-ONLY.
        peers_fd: None,
    }
}

/// The broker's approvals for `plan`: `ask` holds unlisted names for an answer (when an
/// operator is there), `park` refuses them at once and keeps them for a later `--always`
/// grant (`unattended`, `approvals.mode = "deny"`, `vetto-shim`), `off` in strict mode.
pub fn approvals_spec(
    plan: &BrokerPlan,
    unattended: bool,
    terminal: bool,
    scope: String,
    rules: Option<std::path::PathBuf>,
    session: &str,
    owner_uid: u32,
) -> ApprovalSpec {
    let mode = if plan.strict {
        GateMode::Off
    } else if plan.ask && !unattended {
        GateMode::Ask
    } else {
        GateMode::Park
    };
    ApprovalSpec {
        mode,
        terminal,
        timeout_secs: plan.approval_timeout_secs,
        scope,
        rules,
        session: session.to_string(),
        owner_uid,
        control_fd: None,
    }
}

/// Bind a session's control socket (`control.sock` in its private directory), 0600.
pub fn bind_control(session_dir: &std::path::Path) -> Result<OwnedFd> {
    use std::os::unix::fs::PermissionsExt;
    let path = session_dir.join(vetto_broker::approvals::control::SOCKET_NAME);
    let l = std::os::unix::net::UnixListener::bind(&path)
        .with_context(|| format!("approvals: binding the control socket {}", path.display()))?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
        .with_context(|| format!("approvals: chmod 0600 {}", path.display()))?;
    Ok(OwnedFd::from(l))
}

/// What is wrong in a spec [`BrokerSpec::validate`] refused, once: the error and its
/// sources, without the "invalid broker spec" prefix.
pub fn spec_problem(e: &BrokerError) -> String {
    match e {
        BrokerError::Policy(allow) => error_chain(allow),
        BrokerError::Spec(what) => what.clone(),
        other => error_chain(other),
    }
}

/// What the broker gets on the host's side besides the sandbox's listeners.
#[derive(Default)]
pub struct HostSide {
    /// The host side of each published port ([`bind_published`]).
    pub published: Vec<(u16, OwnedFd)>,
    /// FS-ONLY: the read end of the supervisor's announcement pipe (`BrokerSpec::peers_fd`).
    pub peers: Option<OwnedFd>,
}

/// Start `vetto __broker` (from this executable) with the listeners as fds 3, 4, …
///
/// The spec is checked in this process first ([`BrokerSpec::validate`]), so a broker that
/// would refuse it is never started: the caller gets the broker's reason, once.
pub fn spawn(
    plan: &BrokerPlan,
    listeners: &[Listener],
    mut fds: Vec<OwnedFd>,
    host: HostSide,
    lifetime: Lifetime,
    audit: Option<BrokerAudit>,
    approvals: Option<(ApprovalSpec, Option<OwnedFd>)>,
) -> Result<Child> {
    let HostSide { published, peers } = host;
    // fds 3…: the sandbox's listeners, the host side of each published port, and (with
    // publish) the sandbox's network namespace.
    let netns = match published.is_empty() {
        true => None,
        false => fds.pop(),
    };
    let mut kinds = listeners
        .iter()
        .map(|l| listener_kind(&l.role))
        .collect::<Result<Vec<_>>>()?;
    for (port, fd) in published {
        kinds.push(ListenerKind::Publish(port));
        fds.push(fd);
    }
    let netns_fd = netns.as_ref().map(|_| 3 + fds.len() as i32);
    fds.extend(netns);
    let approvals = approvals.map(|(mut spec, control)| {
        spec.control_fd = control.as_ref().map(|_| 3 + fds.len() as i32);
        fds.extend(control);
        spec
    });
    let peers_fd = peers.as_ref().map(|_| 3 + fds.len() as i32);
    fds.extend(peers);
    let spec = BrokerSpec {
        sandbox_netns_fd: netns_fd,
        approvals,
        peers_fd,
        ..broker_spec(plan)
    };
    spec.validate()
        .map_err(|e| anyhow!("network: the broker cannot start: {}", spec_problem(&e)))?;
    let launch = Launch {
        spec,
        listeners: kinds,
        audit,
    };
    let launch = serde_json::to_string(&launch).context("network: broker spec")?;
    let raw: Vec<RawFd> = fds.iter().map(|f| f.as_raw_fd()).collect();
    // This very binary, wherever it runs from (vetto-shim runs from a detached read-only
    // mount, which has no path).
    let mut cmd = Command::new("/proc/self/exe");
    // Shown as this program's own name (`ps`, `pgrep -f "vetto __broker"`).
    if let Some(argv0) = std::env::args_os().next() {
        cmd.arg0(argv0);
    }
    cmd.arg("__broker")
        .env(SPEC_ENV, launch)
        .stdin(Stdio::null());
    let die_with_parent = matches!(lifetime, Lifetime::DieWithParent);
    if let Lifetime::Watch { pid, log } = lifetime {
        let err = log.try_clone().context("network: broker log")?;
        cmd.env(WATCH_ENV, pid.to_string())
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(err));
    }
    // SAFETY: between fork and exec only async-signal-safe calls: dup2, fcntl, prctl, setsid,
    // close_range.
    unsafe {
        cmd.pre_exec(move || {
            // Move the listeners to 3.. (first out of the way, then into place).
            let mut tmp = vec![];
            for fd in &raw {
                let t = libc::fcntl(*fd, libc::F_DUPFD, 100);
                if t < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                tmp.push(t);
            }
            for (i, t) in tmp.iter().enumerate() {
                if libc::dup2(*t, 3 + i as i32) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            // Nothing else of the parent's (e.g. descriptors a runtime's caller preserved)
            // crosses the exec. CLOSE_RANGE_CLOEXEC, not a close: the pipe that reports a
            // failed exec back to the parent must stay open until then.
            const CLOSE_RANGE_CLOEXEC: libc::c_uint = 1 << 2;
            libc::syscall(
                libc::SYS_close_range,
                3 + tmp.len() as u32,
                u32::MAX,
                CLOSE_RANGE_CLOEXEC,
            );
            if die_with_parent {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
            } else if libc::setsid() < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let child = cmd.spawn().context("network: starting the broker")?;
    drop(fds);
    Ok(child)
}

/// How long a broker has to record its last connections when the session ends.
pub const STOP_GRACE: Duration = Duration::from_secs(2);

/// End the broker with the session: SIGTERM, so it records the connections still open (as
/// aborted) and exits; SIGKILL if it has not within [`STOP_GRACE`].
pub fn stop(child: Child) {
    let pid = child.id() as libc::pid_t;
    // Our own unreaped child: its pid cannot have been reused.
    let pidfd = vetto_hooks::process::pidfd_open(pid, 0).ok();
    // SAFETY: kill(2) on our unreaped child: its pid cannot have been reused.
    let termed = unsafe { libc::kill(pid, libc::SIGTERM) } == 0;
    let deadline = std::time::Instant::now() + STOP_GRACE;
    let exited = termed
        && match &pidfd {
            Some(fd) => {
                let mut p = libc::pollfd {
                    fd: fd.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                };
                loop {
                    let left = deadline.saturating_duration_since(std::time::Instant::now());
                    // SAFETY: one pollfd we own, for the given count.
                    let r = unsafe { libc::poll(&mut p, 1, left.as_millis() as libc::c_int) };
                    if r >= 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR)
                    {
                        break r > 0;
                    }
                }
            }
            // No pidfd (an old kernel, a seccomp profile around vetto): look, without reaping,
            // every half millisecond.
            None => loop {
                // SAFETY: an all-zero siginfo is valid for the kernel to fill.
                let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
                // SAFETY: waitid on our own child with WNOWAIT: it stays reapable below.
                let r = unsafe {
                    libc::waitid(
                        libc::P_PID,
                        pid as libc::id_t,
                        &mut info,
                        libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
                    )
                };
                // SAFETY: filled by waitid (si_pid 0: still running).
                if r == 0 && unsafe { info.si_pid() } == pid {
                    break true;
                }
                if r != 0 || std::time::Instant::now() >= deadline {
                    break false;
                }
                std::thread::sleep(Duration::from_micros(500));
            },
        };
    if !exited {
        // SAFETY: as above: not yet reaped.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
    // Reaped here with its resource use: the broker's CPU time is what a relayed byte costs
    // (`make bench` reports it per GiB).
    let mut status = 0;
    // SAFETY: an all-zero rusage is a valid value for the kernel to fill.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: wait4 on our own child, with pointers to locals.
        let r = unsafe { libc::wait4(pid, &mut status, 0, &mut ru) };
        if r >= 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            break;
        }
    }
    let ms = |t: libc::timeval| t.tv_sec as f64 * 1e3 + t.tv_usec as f64 / 1e3;
    tracing::info!(
        user_ms = format!("{:.1}", ms(ru.ru_utime)),
        sys_ms = format!("{:.1}", ms(ru.ru_stime)),
        max_rss_kib = ru.ru_maxrss,
        "broker cpu"
    );
    drop(child);
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // Tests: a panic is the failure report.
mod tests {
    use super::*;

    fn plan() -> BrokerPlan {
        BrokerPlan {
            allow: vec!["crates.io".into()],
            allow_cidrs: vec!["10.1.0.0/16:5432".into()],
            strict: true,
            resolver: Some("127.0.0.53:53".into()),
            connects_per_minute: 7,
            max_connections: 9,
            deny: vec!["evil.test".into()],
            ask: true,
            approval_timeout_secs: 60,
        }
    }

    #[test]
    fn spec_is_the_plan_with_the_brokers_idle_default() {
        let spec = broker_spec(&plan());
        assert_eq!(spec.allow, ["crates.io"]);
        assert_eq!(spec.allow_cidrs, ["10.1.0.0/16:5432"]);
        assert!(spec.strict);
        assert_eq!(spec.resolver.as_deref(), Some("127.0.0.53:53"));
        assert_eq!((spec.max_connections, spec.connects_per_minute), (9, 7));
        assert_eq!(spec.idle_timeout_secs, DEFAULT_IDLE_TIMEOUT_SECS);
        assert_eq!(spec.sandbox_netns_fd, None);
        spec.validate().unwrap();
    }

    #[test]
    fn launch_round_trips_and_refuses_unknown_fields() {
        let launch = Launch {
            spec: broker_spec(&plan()),
            listeners: vec![
                listener_kind(&ListenerRole::HttpProxy).unwrap(),
                listener_kind(&ListenerRole::Socks5).unwrap(),
                listener_kind(&ListenerRole::HostPort {
                    target: "[::1]:6379".into(),
                })
                .unwrap(),
                ListenerKind::Publish(8080),
            ],
            audit: Some(BrokerAudit {
                config: vetto_broker::audit::AuditConfig::in_dir(std::path::Path::new("/s")),
                session: "abc".into(),
            }),
        };
        assert_eq!(
            launch.listeners[2],
            ListenerKind::HostPort("[::1]:6379".parse().unwrap())
        );
        let json = serde_json::to_string(&launch).unwrap();
        assert_eq!(serde_json::from_str::<Launch>(&json).unwrap(), launch);
        let mut v: serde_json::Value = serde_json::from_str(&json).unwrap();
        v["roles"] = "http socks5".into();
        assert!(serde_json::from_str::<Launch>(&v.to_string()).is_err());
        let mut v: serde_json::Value = serde_json::from_str(&json).unwrap();
        v["spec"]["connects_per_dest_per_minute"] = 3.into();
        assert!(serde_json::from_str::<Launch>(&v.to_string()).is_err());
        assert!(listener_kind(&ListenerRole::HostPort {
            target: "localhost:5432".into()
        })
        .is_err());
    }
}
