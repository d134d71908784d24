//! The network broker for hardened `vetto-shim` containers whose policy is not `off`.
//!
//! The container has no interface but `lo` (checked by its init). After `create` has built
//! it, the runtime forks a child that joins the container's network namespace, brings `lo`
//! up, binds the broker's listeners on the container's 127.0.0.1 and sends them back over a
//! socket pair; the runtime then starts `vetto-shim __broker` with them, as a daemon in its
//! own session that exits with the container's init. The proxy variables were put in the
//! container's environment by the hardening. Dialing happens from the host's network
//! namespace, after the broker's checks (see `broker/`). In an audited container the broker
//! records each connection in the container's session; it stops on SIGTERM (sent by its
//! watch thread when the init exits, or by [`stop`]) after recording those still open.

use std::os::fd::{AsRawFd, RawFd};
use std::path::Path;
use std::time::Duration;

use vetto_bundle::plan::NetPlan;
use vetto_hooks::{listen, netlo};

use super::OciError;
use crate::sidecar;

fn net_err(msg: String) -> OciError {
    OciError::Config(format!("network broker: {msg}"))
}

fn broker(what: &'static str) -> impl FnOnce(anyhow::Error) -> OciError {
    move |source| OciError::Network { what, source }
}

/// In a forked child: join the namespace, bring `lo` up, bind and send the listeners.
fn child(netns: RawFd, net: &NetPlan, sock: RawFd) -> i32 {
    // SAFETY: setns with a descriptor we hold; affects only this (forked) process.
    if unsafe { libc::setns(netns, libc::CLONE_NEWNET) } != 0 {
        return 2;
    }
    if netlo::loopback_up().is_err() {
        return 3;
    }
    match listen::open_and_send(&net.listeners, false, sock) {
        Ok(()) => 0,
        Err(_) => 4,
    }
}

/// Attach the broker to the container whose init is `init_pid`; returns the broker's pid.
/// `audit`: where it records connections (a hardened container's session).
pub fn attach(
    init_pid: i32,
    net: &NetPlan,
    dir: &Path,
    audit: Option<sidecar::BrokerAudit>,
    approvals: Option<vetto_broker::approvals::ApprovalSpec>,
) -> Result<i32, OciError> {
    let plan = net
        .broker
        .as_ref()
        .ok_or_else(|| net_err("no broker plan".into()))?;
    let netns = std::fs::File::open(format!("/proc/{init_pid}/ns/net"))
        .map_err(|e| net_err(format!("opening the container's network namespace: {e}")))?;
    let (ours, theirs) = sidecar::channel().map_err(broker("the listener channel"))?;
    // SAFETY: the runtime is single-threaded (libcontainer is done); the child only makes
    // syscalls and leaves with _exit.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(net_err(format!(
            "fork: {}",
            std::io::Error::last_os_error()
        )));
    }
    if pid == 0 {
        let code = child(netns.as_raw_fd(), net, theirs.as_raw_fd());
        // SAFETY: leaving the forked child without running the parent's destructors.
        unsafe { libc::_exit(code) };
    }
    drop(theirs);
    let code = vetto_hooks::process::wait(pid)
        .ok_or_else(|| net_err("lost the helper that binds the listeners".into()))?;
    if code != 0 {
        return Err(net_err(
            match code {
                2 => "cannot join the container's network namespace",
                3 => "cannot bring lo up in the container",
                4 => {
                    "cannot listen on the container's 127.0.0.1 (a port the broker needs is taken)"
                }
                _ => "the helper that binds the listeners failed",
            }
            .into(),
        ));
    }
    let fds = sidecar::receive(&ours, net.listeners.len(), Duration::from_secs(5))
        .map_err(broker("receiving the listeners"))?;
    let log = std::fs::File::create(dir.join("broker.log"))
        .map_err(|e| net_err(format!("broker log: {e}")))?;
    let child = sidecar::spawn(
        plan,
        &net.listeners,
        fds,
        sidecar::HostSide::default(),
        sidecar::Lifetime::Watch { pid: init_pid, log },
        audit,
        approvals.map(|a| (a, None)),
    )
    .map_err(broker("starting the broker"))?;
    Ok(child.id() as i32)
}

/// Stops the broker recorded for a container (if that pid is still a broker): SIGTERM, so it
/// records the connections still open and exits, then SIGKILL if it has not within
/// [`sidecar::STOP_GRACE`]. Signals go through a pidfd opened before the check, so a pid
/// reused since is never signalled.
pub fn stop(pid: i32) {
    let Ok(pidfd) = vetto_hooks::process::pidfd_open(pid, 0) else {
        return; // Gone (and reaped).
    };
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    if !cmdline.split(|b| *b == 0).any(|a| a == b"__broker") {
        return; // Exited (a zombie has no command line), or not a broker.
    }
    let signal = |sig: i32| {
        // SAFETY: pidfd_send_signal with our pidfd, a signal number, no siginfo, no flags.
        unsafe {
            libc::syscall(
                libc::SYS_pidfd_send_signal,
                pidfd.as_raw_fd(),
                sig,
                std::ptr::null::<libc::siginfo_t>(),
                0,
            )
        }
    };
    if signal(libc::SIGTERM) == 0 {
        let mut p = libc::pollfd {
            fd: pidfd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = libc::c_int::try_from(sidecar::STOP_GRACE.as_millis()).unwrap_or(2000);
        // SAFETY: one valid pollfd; a pidfd is readable once its process has exited.
        if unsafe { libc::poll(&mut p, 1, ms) } == 1 {
            return;
        }
    }
    signal(libc::SIGKILL);
}
