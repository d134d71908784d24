//! `vetto __broker`: the sidecar's entry point (started by `sidecar::spawn`, never by hand).
//! It takes its [`Launch`] (spec and listener kinds) from the environment and the listening
//! sockets as fds 3…, and serves until the supervisor stops it (SIGTERM; for `vetto-shim`,
//! when the container's init exits).
//!
//! When the session is audited, every connection's event is appended to the audit store by a
//! writer thread, in batches, as it ends. On SIGTERM the server stops accepting, the
//! connections under way get [`DRAIN`] to end on their own (the sandbox's side is closed by
//! then), those still open are cut and recorded (as aborted), the writer drains, and the
//! broker exits. If an event cannot be
//! recorded the broker exits at once: it fails closed, and the sandbox's network goes with it.

use std::net::TcpListener;
use std::os::fd::FromRawFd;

use anyhow::{bail, Context, Result};
use nix::sys::resource::{getrlimit, setrlimit, Resource};
use nix::sys::stat::{fstat, SFlag};
use vetto_broker::audit::{event::now_ms, Connection, EventKind, Recorder};
use vetto_broker::error_chain;
use vetto_broker::server::{serve_until, BrokerEvent};

use crate::sidecar::{BrokerAudit, Launch, SPEC_ENV, WATCH_ENV};

/// How long the connections under way may take to end on their own after SIGTERM. At a
/// session's end the sandbox's side is closed, so a relay ends as soon as it runs and sees
/// that; one whose upstream stays open and idle waits out the whole drain, which `vetto run`
/// pays at its exit: so it is short (and well inside [`crate::sidecar::STOP_GRACE`]).
pub const DRAIN: std::time::Duration = std::time::Duration::from_millis(100);

fn fd_is_socket(fd: i32) -> bool {
    fstat(fd)
        .is_ok_and(|st| SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT == SFlag::S_IFSOCK)
}

/// Stop the broker (as SIGTERM does) when `pid` (a `vetto-shim` container's init) exits: a
/// thread blocks on a pidfd of it.
fn watch(pid: i32) -> Result<()> {
    let pidfd = match vetto_hooks::process::pidfd_open(pid, 0) {
        Ok(fd) => fd,
        Err(e) => bail!("broker: the container's init {pid} is gone: {e}"),
    };
    std::thread::spawn(move || {
        use std::os::fd::AsRawFd;
        let mut p = libc::pollfd {
            fd: pidfd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd; -1 waits until the process exits.
        while unsafe { libc::poll(&mut p, 1, -1) } < 0 {}
        let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGTERM);
    });
    Ok(())
}

/// Run the broker.
pub fn run() -> Result<()> {
    // The supervisor blocks the signals it reads from a signalfd, and a blocked mask survives
    // exec: unblock them, or SIGTERM would never reach the handler below.
    nix::sys::signal::SigSet::empty()
        .thread_set_mask()
        .context("broker: signal mask")?;
    let launch: Launch = serde_json::from_str(&std::env::var(SPEC_ENV).context("broker: no spec")?)
        .context("broker: bad spec")?;
    let mut listeners = vec![];
    for (i, kind) in launch.listeners.into_iter().enumerate() {
        let fd = 3 + i as i32;
        if !fd_is_socket(fd) {
            bail!("broker: fd {fd} is not the listening socket for {kind}");
        }
        // SAFETY: fd 3+i was placed by the supervisor for us alone and is a socket (checked).
        let l = unsafe { TcpListener::from_raw_fd(fd) };
        listeners.push((kind, l));
    }
    // Two descriptors per relayed connection: take the whole hard limit for the sockets
    // (best effort: the soft limit stays as it was if this fails).
    if let Ok((_, hard)) = getrlimit(Resource::RLIMIT_NOFILE) {
        let _ = setrlimit(Resource::RLIMIT_NOFILE, hard, hard);
    }
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<BrokerEvent>();
    let writer = match launch.audit {
        Some(a) => Some(writer(a, rx)?),
        None => {
            drop(rx);
            None
        }
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("broker: tokio runtime")?;
    let served = rt.block_on(async {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .context("broker: SIGTERM handler")?;
        // The watch thread raises SIGTERM: its handler must be in place first.
        if let Some(pid) = std::env::var(WATCH_ENV)
            .ok()
            .and_then(|p| p.parse::<i32>().ok())
        {
            watch(pid)?;
        }
        let stop = async move {
            let _ = term.recv().await;
        };
        serve_until(launch.spec, listeners, tx, stop, DRAIN)
            .await
            .context("broker")
    });
    // Shutting the runtime down cancels every connection still open: each sends its event
    // (as aborted), and with the last sender gone the writer drains and ends. A blocking
    // lookup still running (getaddrinfo cannot be cancelled) is not waited for: left to the
    // process's exit, so the stop stays well inside STOP_GRACE.
    rt.shutdown_timeout(std::time::Duration::from_millis(200));
    if let Some(w) = writer {
        let _ = w.join();
    }
    served
}

/// Start the thread that appends connection events to the audit store. The store is opened
/// here, before serving: a broker that cannot record does not relay.
fn writer(
    a: BrokerAudit,
    mut rx: tokio::sync::mpsc::UnboundedReceiver<BrokerEvent>,
) -> Result<std::thread::JoinHandle<()>> {
    let mut rec = Recorder::open(&a.config, &a.session).context("broker: audit")?;
    Ok(std::thread::spawn(move || {
        while let Some(first) = rx.blocking_recv() {
            let mut batch = vec![first];
            while batch.len() < 256 {
                match rx.try_recv() {
                    Ok(e) => batch.push(e),
                    Err(_) => break,
                }
            }
            let events = batch
                .into_iter()
                .map(|e| {
                    let kind = match e {
                        BrokerEvent::Connection(c) => EventKind::Connection(Connection::from(&c)),
                        BrokerEvent::Approval(k) => k,
                    };
                    (now_ms(), kind)
                })
                .collect();
            if let Err(e) = rec.record_batch(events, false) {
                eprintln!(
                    "vetto: broker: an event could not be recorded, so the broker stops (the sandbox's network goes with it): {}",
                    error_chain(&e)
                );
                std::process::exit(1);
            }
        }
    }))
}
