//! `vetto __broker`: the sidecar's entry point (started by `sidecar::spawn`, never by hand).
//! It takes its [`Launch`] (spec and listener kinds) from the environment and the listening
//! sockets as fds 3…, and serves until the supervisor kills it.

use std::net::TcpListener;
use std::os::fd::FromRawFd;

use anyhow::{bail, Context, Result};
use nix::sys::resource::{getrlimit, setrlimit, Resource};
use nix::sys::stat::{fstat, SFlag};
use vetto_broker::server::serve;

use crate::sidecar::{Launch, SPEC_ENV, WATCH_ENV};

fn fd_is_socket(fd: i32) -> bool {
    fstat(fd)
        .is_ok_and(|st| SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT == SFlag::S_IFSOCK)
}

/// Exit the whole broker when `pid` (a `vetto-shim` container's init) exits: a thread blocks
/// on a pidfd of it.
fn watch(pid: i32) -> Result<()> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) } as i32;
    if fd < 0 {
        bail!(
            "broker: the container's init {pid} is gone: {}",
            std::io::Error::last_os_error()
        );
    }
    std::thread::spawn(move || {
        let mut p = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd; -1 waits until the process exits.
        while unsafe { libc::poll(&mut p, 1, -1) } < 0 {}
        std::process::exit(0);
    });
    Ok(())
}

/// Run the broker.
pub fn run() -> Result<()> {
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
    if let Some(pid) = std::env::var(WATCH_ENV)
        .ok()
        .and_then(|p| p.parse::<i32>().ok())
    {
        watch(pid)?;
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("broker: tokio runtime")?;
    rt.block_on(serve(launch.spec, listeners))
        .context("broker")?;
    Ok(())
}
