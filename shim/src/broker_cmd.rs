//! `vetto __broker`: the sidecar's entry point (started by `sidecar::spawn`, never by hand).
//! It takes the spec from the environment and the listening sockets as fds 3…, and serves
//! until the supervisor kills it.

use std::net::{SocketAddr, TcpListener};
use std::os::fd::FromRawFd;

use anyhow::{bail, Context, Result};
use vetto_broker::server::{serve, BrokerSpec, ListenerKind};

use crate::sidecar::{ROLES_ENV, SPEC_ENV, WATCH_ENV};

fn fd_is_socket(fd: i32) -> bool {
    // SAFETY: fstat fills a zeroed struct we own.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    (unsafe { libc::fstat(fd, &mut st) } == 0) && (st.st_mode & libc::S_IFMT) == libc::S_IFSOCK
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
    let spec: BrokerSpec =
        serde_json::from_str(&std::env::var(SPEC_ENV).context("broker: no spec")?)
            .context("broker: bad spec")?;
    let roles = std::env::var(ROLES_ENV).context("broker: no listener roles")?;
    let mut listeners = vec![];
    for (i, role) in roles.split_whitespace().enumerate() {
        let fd = 3 + i as i32;
        if !fd_is_socket(fd) {
            bail!("broker: fd {fd} is not the listening socket for {role}");
        }
        let kind = match role {
            "http" => ListenerKind::HttpProxy,
            "socks5" => ListenerKind::Socks5,
            r if r.starts_with("publish:") => match r["publish:".len()..].parse::<u16>() {
                Ok(p) => ListenerKind::Publish(p),
                Err(_) => bail!("broker: bad listener role {r}"),
            },
            r => match r.strip_prefix("host:").map(str::parse::<SocketAddr>) {
                Some(Ok(a)) => ListenerKind::HostPort(a),
                _ => bail!("broker: unknown listener role {r}"),
            },
        };
        // SAFETY: fd 3+i was placed by the supervisor for us alone and is a socket (checked).
        let l = unsafe { TcpListener::from_raw_fd(fd) };
        listeners.push((kind, l));
    }
    // Two descriptors per relayed connection: take the whole hard limit for the sockets.
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit on our own struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 {
            lim.rlim_cur = lim.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
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
    rt.block_on(serve(spec, listeners)).context("broker")?;
    Ok(())
}
