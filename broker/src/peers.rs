//! The connections a supervisor made for its sandbox, announced before each is made.
//!
//! In FS-ONLY there is no network namespace: the broker listens on the host's loopback, where
//! any local process could connect too, use the sandbox's allowlist, raise approval prompts in
//! its name and write its audit trail. The sandbox itself never connects: the supervisor
//! connects each socket the sandbox asks to connect (seccomp user notification), after binding
//! it to a loopback port of its own choosing, which it announces here first (two bytes, big
//! endian, on a pipe the broker is started with). A connection whose source port was not
//! announced is closed unanswered and unrecorded, and each announcement admits one
//! connection. When the pipe closes (the supervisor is gone), nothing more is admitted.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::AsyncReadExt;
use tokio::sync::Notify;

/// How long a connection may wait for its announcement (it is written before the connect, so
/// only the reader's scheduling delays it).
pub const WAIT: Duration = Duration::from_secs(2);

/// How long an announcement stays good: the connection it announces follows at once, so an
/// older one is of a connect that failed, and its port may since be another process's.
pub const FRESH: Duration = Duration::from_secs(10);

/// Announced source ports, each admitting one connection while fresh.
#[derive(Default)]
pub struct Peers {
    ports: Mutex<HashMap<u16, Vec<std::time::Instant>>>,
    changed: Notify,
}

impl Peers {
    /// Starts reading announcements from `pipe` (the read end of a pipe) on the current
    /// tokio runtime.
    pub fn start(pipe: OwnedFd) -> std::io::Result<Arc<Peers>> {
        let mut rx = tokio::net::unix::pipe::Receiver::from_owned_fd(pipe)?;
        let peers = Arc::new(Peers::default());
        let p = Arc::clone(&peers);
        tokio::spawn(async move {
            let mut b = [0u8; 2];
            while rx.read_exact(&mut b).await.is_ok() {
                p.announce(u16::from_be_bytes(b));
            }
            tracing::info!("the supervisor's announcements ended: no new connection is admitted");
        });
        Ok(peers)
    }

    /// One connection from `port` may be admitted.
    pub fn announce(&self, port: u16) {
        if let Ok(mut m) = self.ports.lock() {
            let now = std::time::Instant::now();
            m.retain(|_, v| {
                v.retain(|t| now.duration_since(*t) < FRESH);
                !v.is_empty()
            });
            m.entry(port).or_default().push(now);
        }
        self.changed.notify_waiters();
    }

    fn take(&self, port: u16) -> bool {
        let Ok(mut m) = self.ports.lock() else {
            return false;
        };
        let Some(v) = m.get_mut(&port) else {
            return false;
        };
        let now = std::time::Instant::now();
        v.retain(|t| now.duration_since(*t) < FRESH);
        let ok = v.pop().is_some();
        if v.is_empty() {
            m.remove(&port);
        }
        ok
    }

    /// Whether `client` was announced, waiting up to `wait` for it. The supervisor binds
    /// every socket it connects to 127.0.0.1 exactly (a v6 socket to `::ffff:127.0.0.1`, which
    /// the IPv4 listener sees as 127.0.0.1): a port from any other loopback address (another
    /// local user can bind `127.0.0.2:P` beside the sandbox's `127.0.0.1:P`) is never one.
    pub async fn admit(&self, client: SocketAddr, wait: Duration) -> bool {
        let ip = match client.ip() {
            std::net::IpAddr::V6(v6) => v6
                .to_ipv4_mapped()
                .map_or(std::net::IpAddr::V6(v6), std::net::IpAddr::V4),
            v4 => v4,
        };
        if ip != std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST) {
            return false;
        }
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if self.take(client.port()) {
                return true;
            }
            if tokio::time::timeout_at(deadline, changed).await.is_err() {
                return false;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn admits_each_announcement_once_and_nothing_else() {
        let p = Peers::default();
        let a: SocketAddr = "127.0.0.1:40000".parse().expect("test value");
        let w = Duration::from_millis(50);
        assert!(!p.admit(a, w).await, "nothing announced yet");
        p.announce(40000);
        assert!(p.admit(a, w).await);
        assert!(!p.admit(a, w).await, "one announcement, one connection");
        p.announce(40000);
        let public: SocketAddr = "192.0.2.1:40000".parse().expect("test value");
        assert!(!p.admit(public, w).await, "never a non-loopback peer");
        // Another loopback address with the announced port: another local user's socket.
        let other: SocketAddr = "127.0.0.2:40000".parse().expect("test value");
        assert!(!p.admit(other, w).await, "only 127.0.0.1 itself");
        let mapped: SocketAddr = "[::ffff:127.0.0.1]:40000".parse().expect("test value");
        assert!(p.admit(mapped, w).await, "the v4-mapped form of 127.0.0.1");
    }

    #[tokio::test]
    async fn waits_for_an_announcement_that_comes_late() {
        let p = Arc::new(Peers::default());
        let q = Arc::clone(&p);
        let a: SocketAddr = "127.0.0.1:40001".parse().expect("test value");
        let waiter = tokio::spawn(async move { q.admit(a, Duration::from_secs(5)).await });
        tokio::time::sleep(Duration::from_millis(50)).await;
        p.announce(40001);
        assert!(waiter.await.expect("test value"));
    }

    #[tokio::test]
    async fn reads_announcements_from_a_pipe_and_stops_at_its_end() {
        let (r, w) = nix::unistd::pipe().expect("test value");
        let p = Peers::start(r).expect("test value");
        nix::unistd::write(&w, &40002u16.to_be_bytes()).expect("test value");
        let a: SocketAddr = "127.0.0.1:40002".parse().expect("test value");
        assert!(p.admit(a, Duration::from_secs(5)).await);
        drop(w);
        let b: SocketAddr = "127.0.0.1:40003".parse().expect("test value");
        assert!(!p.admit(b, Duration::from_millis(100)).await);
    }
}
