//! Byte relay between the sandbox-side client and the dialled upstream, with half-close
//! propagation, byte counters and an idle timeout.

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

/// Per-direction buffer size to start with: idle connections stay cheap (1,000 held open cost
/// 8 MiB of buffers).
const BUF_START: usize = 4 * 1024;
/// A buffer that a read fills completely grows fourfold, up to this: bulk transfers then
/// move in few large syscalls.
const BUF_MAX: usize = 256 * 1024;

/// How a relay ended.
#[derive(Debug)]
pub(crate) enum RelayEnd {
    /// Both directions reached EOF.
    Closed,
    /// No byte moved in either direction for the idle timeout.
    IdleTimeout,
    /// A read or write failed (reset, broken pipe...).
    Error(io::Error),
}

/// Totals of one relay.
#[derive(Debug)]
pub(crate) struct RelayStats {
    /// Client → upstream, including `initial_up`.
    pub up: u64,
    /// Upstream → client.
    pub down: u64,
    pub end: RelayEnd,
}

/// Last activity, in milliseconds since `start`.
struct Activity {
    start: Instant,
    last_ms: AtomicU64,
}

impl Activity {
    fn touch(&self) {
        let ms = u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_ms.store(ms, Ordering::Relaxed);
    }

    fn deadline(&self, idle: Duration) -> Instant {
        self.start + Duration::from_millis(self.last_ms.load(Ordering::Relaxed)) + idle
    }
}

async fn pump<R, W>(r: &mut R, w: &mut W, count: &AtomicU64, act: &Activity) -> io::Result<()>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut buf = vec![0u8; BUF_START];
    loop {
        let n = r.read(&mut buf).await?;
        if n == buf.len() && buf.len() < BUF_MAX {
            let grown = (buf.len() * 4).min(BUF_MAX);
            w.write_all(&buf[..n]).await?;
            count.fetch_add(n as u64, Ordering::Relaxed);
            act.touch();
            buf.resize(grown, 0);
            continue;
        }
        if n == 0 {
            // Propagate the half-close; the other direction keeps going.
            let _ = w.shutdown().await;
            return Ok(());
        }
        act.touch();
        w.write_all(&buf[..n]).await?;
        count.fetch_add(n as u64, Ordering::Relaxed);
        act.touch();
    }
}

/// Relay until both directions are closed, one fails, or nothing moves for `idle`.
/// `initial_up` (bytes the client sent before the relay started) goes upstream first.
pub(crate) async fn relay(
    mut client: TcpStream,
    mut upstream: TcpStream,
    initial_up: &[u8],
    idle: Duration,
) -> RelayStats {
    let act = Activity {
        start: Instant::now(),
        last_ms: AtomicU64::new(0),
    };
    let up = AtomicU64::new(0);
    let down = AtomicU64::new(0);
    let end = {
        let (mut cr, mut cw) = client.split();
        let (mut ur, mut uw) = upstream.split();
        let up_dir = async {
            if !initial_up.is_empty() {
                uw.write_all(initial_up).await?;
                up.fetch_add(initial_up.len() as u64, Ordering::Relaxed);
                act.touch();
            }
            pump(&mut cr, &mut uw, &up, &act).await
        };
        let down_dir = pump(&mut ur, &mut cw, &down, &act);
        let watchdog = async {
            loop {
                let deadline = act.deadline(idle);
                if Instant::now() >= deadline {
                    return;
                }
                tokio::time::sleep_until(deadline).await;
            }
        };
        tokio::select! {
            r = async { tokio::try_join!(up_dir, down_dir) } => match r {
                Ok(_) => RelayEnd::Closed,
                Err(e) => RelayEnd::Error(e),
            },
            () = watchdog => RelayEnd::IdleTimeout,
        }
    };
    RelayStats {
        up: up.load(Ordering::Relaxed),
        down: down.load(Ordering::Relaxed),
        end,
    }
}
