//! The network broker as a sidecar process: the supervisor receives the listening sockets the
//! sandbox's init created on its loopback, and starts `vetto __broker` with them as fds 3…
//! The broker is async (tokio) and so never lives in the single-threaded supervisor that
//! drives libcontainer. It dies with the supervisor (PDEATHSIG); if it crashes, the sockets
//! close and the sandbox's network is gone: it fails closed.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use vetto_broker::server::{BrokerError, BrokerSpec};
use vetto_bundle::plan::{BrokerPlan, Listener, ListenerRole};

/// The environment variable carrying the broker's spec (JSON).
pub const SPEC_ENV: &str = "VETTO_BROKER_SPEC";
/// The environment variable naming each inherited listener's role, in fd order from 3.
pub const ROLES_ENV: &str = "VETTO_BROKER_ROLES";

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

fn role_name(r: &ListenerRole) -> String {
    match r {
        ListenerRole::HttpProxy => "http".into(),
        ListenerRole::Socks5 => "socks5".into(),
        ListenerRole::HostPort { target } => format!("host:{target}"),
    }
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

/// Seconds without traffic after which the broker closes a relayed connection.
pub const IDLE_TIMEOUT_SECS: u64 = 300;

/// The spec the broker is started with for `plan` (without the sandbox's network
/// namespace descriptor, which only [`spawn`] knows).
pub fn broker_spec(plan: &BrokerPlan) -> BrokerSpec {
    BrokerSpec {
        allow: plan.allow.clone(),
        allow_cidrs: plan.allow_cidrs.clone(),
        strict: plan.strict,
        resolver: plan.resolver.clone(),
        max_connections: usize::try_from(plan.max_connections).unwrap_or(usize::MAX),
        idle_timeout_secs: IDLE_TIMEOUT_SECS,
        connects_per_dest_per_minute: plan.connects_per_minute,
        sandbox_netns_fd: None,
    }
}

/// Run the broker's own validation of `spec` in this process: every check
/// [`vetto_broker::serve`] makes before it touches a listener (allowlist and CIDR entries,
/// resolver, limits). `serve` validates the spec first and, given no listeners, then
/// returns [`BrokerError::NoListeners`]: that answer means the spec is good.
pub fn check_spec(spec: &BrokerSpec) -> Result<(), BrokerError> {
    // A current-thread runtime starts no thread (the supervisor must stay single-threaded
    // for its user namespace), and is gone when this returns.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| BrokerError::Internal(format!("tokio runtime: {e}")))?;
    match rt.block_on(vetto_broker::serve(spec.clone(), Vec::new())) {
        Err(BrokerError::NoListeners) | Ok(()) => Ok(()),
        Err(e) => Err(e),
    }
}

/// What is wrong in a spec `check_spec` refused, once (the error's text, without the
/// "invalid broker spec" prefix and without repeating its source).
pub fn spec_problem(e: &BrokerError) -> String {
    match e {
        BrokerError::Policy(allow) => allow.to_string(),
        BrokerError::Spec(what) => what.clone(),
        other => other.to_string(),
    }
}

/// Start `vetto __broker` (from this executable) with the listeners as fds 3, 4, …
///
/// The spec is checked in this process first (see [`check_spec`]), so a broker that would
/// refuse it is never started: the caller gets the broker's reason, once.
pub fn spawn(
    plan: &BrokerPlan,
    listeners: &[Listener],
    mut fds: Vec<OwnedFd>,
    published: Vec<(u16, OwnedFd)>,
    lifetime: Lifetime,
) -> Result<Child> {
    // fds 3…: the sandbox's listeners, the host side of each published port, and (with
    // publish) the sandbox's network namespace.
    let netns = match published.is_empty() {
        true => None,
        false => fds.pop(),
    };
    let mut roles: Vec<String> = listeners.iter().map(|l| role_name(&l.role)).collect();
    for (port, fd) in published {
        roles.push(format!("publish:{port}"));
        fds.push(fd);
    }
    let netns_fd = netns.as_ref().map(|_| 3 + fds.len() as i32);
    fds.extend(netns);
    let spec = BrokerSpec {
        sandbox_netns_fd: netns_fd,
        ..broker_spec(plan)
    };
    check_spec(&spec)
        .map_err(|e| anyhow!("network: the broker cannot start: {}", spec_problem(&e)))?;
    let spec = serde_json::to_string(&spec).context("network: broker spec")?;
    let raw: Vec<RawFd> = fds.iter().map(|f| f.as_raw_fd()).collect();
    // This very binary, wherever it runs from (vetto-shim runs from a detached read-only
    // mount, which has no path).
    let mut cmd = Command::new("/proc/self/exe");
    // Shown as this program's own name (`ps`, `pgrep -f "vetto __broker"`).
    if let Some(argv0) = std::env::args_os().next() {
        cmd.arg0(argv0);
    }
    cmd.arg("__broker")
        .env(SPEC_ENV, spec)
        .env(ROLES_ENV, roles.join(" "))
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

/// End the broker with the session.
pub fn stop(mut child: Child) {
    let _ = child.kill();
    let _ = child.wait();
}
