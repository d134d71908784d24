//! Byte relay between the sandbox-side client and the dialled upstream, with half-close
//! propagation, byte counters and an idle timeout.

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use std::os::fd::{AsFd, AsRawFd, OwnedFd};

use nix::fcntl::{OFlag, SpliceFFlags};
use nix::sys::socket::Shutdown;
use tokio::io::Interest;
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

/// Bytes moved so far by one relay, held by the connection's record, so that a relay cut
/// short (the session ended, the broker was stopped) still accounts for what it moved.
#[derive(Debug, Default)]
pub(crate) struct Moved {
    /// Client → upstream.
    pub(crate) up: AtomicU64,
    /// Upstream → client.
    pub(crate) down: AtomicU64,
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

/// Move bytes from `r` to `w` until EOF. Starts with a small userspace buffer (cheap for idle
/// connections); once reads keep filling it, switches to `splice(2)` through a pipe, so bulk
/// data moves socket → pipe → socket inside the kernel without being copied through the
/// broker (on 2 cores the broker's copies were what held throughput down).
async fn pump(r: &TcpStream, w: &TcpStream, count: &AtomicU64, act: &Activity) -> io::Result<()> {
    let mut buf = vec![0u8; BUF_START];
    let mut full_reads = 0u32;
    loop {
        let n = loop {
            r.readable().await?;
            match r.try_read(&mut buf) {
                Ok(n) => break n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Err(e),
            }
        };
        if n == 0 {
            // Propagate the half-close; the other direction keeps going.
            shutdown_write(w);
            return Ok(());
        }
        act.touch();
        write_all(w, &buf[..n], count).await?;
        act.touch();
        if n == buf.len() {
            full_reads += 1;
            if buf.len() < BUF_MAX {
                buf.resize((buf.len() * 4).min(BUF_MAX), 0);
            } else if full_reads >= 4 {
                if let Some(pipe) = Pipe::new() {
                    drop(std::mem::take(&mut buf));
                    return splice_pump(r, w, &pipe, count, act).await;
                }
            }
        }
    }
}

/// Write all of `data`, counting each part into `count` as the kernel takes it (a relay cut
/// half-way still accounts for what went out).
async fn write_all(w: &TcpStream, mut data: &[u8], count: &AtomicU64) -> io::Result<()> {
    while !data.is_empty() {
        w.writable().await?;
        match w.try_write(data) {
            Ok(n) => {
                count.fetch_add(n as u64, Ordering::Relaxed);
                data = &data[n..];
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

fn shutdown_write(w: &TcpStream) {
    // Best effort: the peer may already be gone, and the relay learns that from its reads.
    let _ = nix::sys::socket::shutdown(w.as_raw_fd(), Shutdown::Write);
}

/// A non-blocking pipe (both ends closed on drop).
struct Pipe {
    rd: OwnedFd,
    wr: OwnedFd,
}

/// The splice pipe's capacity asked for: a pipe holds 64 KiB by default, so each pair of
/// splices (and each wake-up) moved at most that; 1 MiB (the unprivileged maximum,
/// `fs.pipe-max-size`) moves sixteen times as much per call. The pages are taken only while
/// bytes are in flight; when the user's pipe quota (`fs.pipe-user-pages-soft`) is spent the
/// kernel refuses and the default size stays.
const PIPE_SIZE: libc::c_int = 1 << 20;

impl Pipe {
    fn new() -> Option<Self> {
        let (rd, wr) = nix::unistd::pipe2(OFlag::O_NONBLOCK | OFlag::O_CLOEXEC).ok()?;
        // SAFETY: fcntl(F_SETPIPE_SZ) on a pipe we own; integer arguments only.
        let _ = unsafe { libc::fcntl(wr.as_raw_fd(), libc::F_SETPIPE_SZ, PIPE_SIZE) };
        Some(Pipe { rd, wr })
    }
}

/// Move up to `len` bytes from `from` to `to` inside the kernel (one of them is a pipe).
fn splice(from: impl AsFd, to: impl AsFd, len: usize) -> io::Result<usize> {
    let flags = SpliceFFlags::SPLICE_F_MOVE | SpliceFFlags::SPLICE_F_NONBLOCK;
    Ok(nix::fcntl::splice(from, None, to, None, len, flags)?)
}

async fn splice_pump(
    r: &TcpStream,
    w: &TcpStream,
    pipe: &Pipe,
    count: &AtomicU64,
    act: &Activity,
) -> io::Result<()> {
    loop {
        // The pipe is empty here, so EAGAIN can only mean the socket has nothing to read.
        // (async_io waits for readiness and retries on WouldBlock.)
        let n = r
            .async_io(Interest::READABLE, || {
                splice(r, &pipe.wr, PIPE_SIZE as usize)
            })
            .await?;
        if n == 0 {
            shutdown_write(w);
            return Ok(());
        }
        act.touch();
        let mut left = n;
        while left > 0 {
            let out = w
                .async_io(Interest::WRITABLE, || splice(&pipe.rd, w, left))
                .await?;
            count.fetch_add(out as u64, Ordering::Relaxed);
            left -= out;
        }
        act.touch();
    }
}

/// Relay until both directions are closed, one fails, or nothing moves for `idle`.
/// `initial_up` (bytes the client sent before the relay started) goes upstream first.
/// Counts into `moved` as bytes go.
pub(crate) async fn relay(
    client: TcpStream,
    upstream: TcpStream,
    initial_up: &[u8],
    idle: Duration,
    moved: &Moved,
) -> RelayEnd {
    let act = Activity {
        start: Instant::now(),
        last_ms: AtomicU64::new(0),
    };
    let (up, down) = (&moved.up, &moved.down);
    {
        let (client, upstream) = (&client, &upstream);
        let up_dir = async {
            if !initial_up.is_empty() {
                write_all(upstream, initial_up, up).await?;
                act.touch();
            }
            pump(client, upstream, up, &act).await
        };
        let down_dir = pump(upstream, client, down, &act);
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
    }
}
