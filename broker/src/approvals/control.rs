//! The control socket: how a person's answers reach a session's broker.
//!
//! A Unix stream socket, `control.sock` in the session's directory of the user's private
//! runtime directory (0700, the socket 0600), bound by the supervisor before the sandbox
//! starts and never bound into any sandbox. One JSON object per line each way: a
//! [`Request`], then a [`Reply`] (`subscribe` keeps the connection and sends a new status
//! line whenever something changes; while it is open the session counts as attended).
//!
//! Every peer is checked before a byte of it is read (`SO_PEERCRED`): its uid must be the
//! broker's own (the session owner's), and it must live in the broker's own PID namespace
//! (`NSpid` in `/proc/PID/status`; the supervisor and broker run in the host's, every sandbox
//! in its own). A process in any sandbox is one PID namespace down, so even a copy of the
//! socket (a bind, a hard link, a passed descriptor) gets it nothing but a refusal, which is
//! recorded.

use std::io::{BufRead, BufReader, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};

use super::gate::{Gate, Status};
use super::{ApprovalsError, Scope, Verdict};
use crate::audit::event::{Engine, EventKind, Refusal};
use crate::server::BrokerEvent;

/// The socket's file name in a session directory.
pub const SOCKET_NAME: &str = "control.sock";
/// The longest request line read.
const MAX_LINE: u64 = 16 * 1024;
/// The longest reply line a client reads (a status lists at most 32 pending requests).
const MAX_REPLY: u64 = 4 * 1024 * 1024;
/// How long a subscriber may take to accept a status line.
const WRITE_TIMEOUT: Duration = Duration::from_secs(5);

/// What a client asks.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum Request {
    /// The session's status.
    Status,
    /// Answer a pending request.
    Answer {
        /// The request's id.
        id: String,
        /// Grant or deny.
        verdict: Verdict,
        /// Once, for the session, or always.
        scope: Scope,
        /// A wider destination the person typed (`*.example.com:443`).
        pattern: Option<String>,
        /// The tool that sends it (`vetto approvals`, `vetto watch`): a label in the record.
        via: String,
    },
    /// Withdraw a `--session` answer.
    Revoke {
        /// The approval's id.
        id: String,
        /// The tool that sends it.
        via: String,
    },
    /// Status now and after every change, until the client goes (the session is attended
    /// meanwhile).
    Subscribe,
}

/// The answer to one request.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Reply {
    /// Whether it was done.
    pub ok: bool,
    /// What was done, or why not.
    pub message: String,
    /// For `status` and `subscribe`.
    pub status: Option<Status>,
}

impl Reply {
    fn ok(message: String) -> Self {
        Reply {
            ok: true,
            message,
            status: None,
        }
    }
    fn err(message: String) -> Self {
        Reply {
            ok: false,
            message,
            status: None,
        }
    }
    fn status(s: Status) -> Self {
        Reply {
            ok: true,
            message: String::new(),
            status: Some(s),
        }
    }
}

/// How many PID namespaces deep `pid` is, seen from this process's `/proc` (the `NSpid`
/// line of its status: one entry per namespace from ours down to its own).
fn pid_depth(pid: &str) -> Result<usize, String> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .map_err(|e| format!("/proc/{pid}/status cannot be read ({e})"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("NSpid:"))
        .map(|v| v.split_whitespace().count())
        .filter(|n| *n > 0)
        .ok_or_else(|| format!("/proc/{pid}/status has no NSpid line"))
}

/// `SO_PEERPIDFD` (asm-generic; Linux 6.5+): a pidfd of the process that connected.
const SO_PEERPIDFD: libc::c_int = 77;

/// A pidfd of the peer: from the socket (`SO_PEERPIDFD`) where the kernel has it, else opened
/// from its pid now (a narrower window, which the liveness check still closes for a peer that
/// is gone).
fn peer_pidfd(fd: BorrowedFd<'_>, pid: i32) -> Result<OwnedFd, String> {
    let mut raw: libc::c_int = -1;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `raw`, an int we own.
    let r = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            SO_PEERPIDFD,
            (&mut raw as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    if r == 0 && raw >= 0 {
        // SAFETY: the kernel just gave us this descriptor; nothing else owns it.
        return Ok(unsafe { OwnedFd::from_raw_fd(raw) });
    }
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
    let p = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) } as libc::c_int;
    if p < 0 {
        return Err(format!(
            "peer pid {pid}: no pidfd ({})",
            std::io::Error::last_os_error()
        ));
    }
    // SAFETY: as above: a new descriptor of ours.
    Ok(unsafe { OwnedFd::from_raw_fd(p) })
}

/// Whether the process behind `pidfd` still runs (signal 0: only "no such process" says no).
fn alive(pidfd: &OwnedFd) -> bool {
    // SAFETY: pidfd_send_signal with our pidfd, signal 0, no siginfo, no flags.
    let r = unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            pidfd.as_raw_fd(),
            0,
            std::ptr::null::<libc::siginfo_t>(),
            0,
        )
    };
    r == 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}

/// Check a peer: the broker's own user (as both are seen from the broker's user namespace:
/// the session owner), in the broker's own PID namespace (every sandbox has its own, one
/// level down). The peer is held by a pidfd while its `/proc` entry is read and must still be
/// alive afterwards, so a pid it freed and another process took cannot pass for it. Returns
/// the pid, or why not.
pub fn check_peer(fd: impl AsFd) -> Result<i32, String> {
    let cred = nix::sys::socket::getsockopt(&fd, nix::sys::socket::sockopt::PeerCredentials)
        .map_err(|e| format!("no peer credentials: {e}"))?;
    let (uid, pid) = (cred.uid(), cred.pid());
    let mine = nix::unistd::geteuid().as_raw();
    if uid != mine {
        return Err(format!(
            "peer pid {pid} runs as another user (uid {uid} where the session's owner is {mine}, as the broker sees them)"
        ));
    }
    // A pid of 0: the peer is in a PID namespace that ours cannot see into.
    if pid <= 0 {
        return Err("the peer has no pid in the broker's PID namespace".into());
    }
    let pidfd = peer_pidfd(fd.as_fd(), pid)?;
    let ours = pid_depth("self")?;
    let theirs = pid_depth(&pid.to_string())?;
    if !alive(&pidfd) {
        return Err(format!(
            "peer pid {pid} exited before it could be checked (its pid may name another process now)"
        ));
    }
    if theirs != ours {
        return Err(format!(
            "peer pid {pid} lives in another PID namespace ({theirs} level(s) deep where the broker is {ours}): a sandboxed process"
        ));
    }
    Ok(pid)
}

/// Serve the control socket until the broker stops.
pub async fn serve(listener: tokio::net::UnixListener, gate: Arc<Gate>) {
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                tokio::spawn(connection(stream, Arc::clone(&gate)));
            }
            Err(e) => {
                tracing::warn!("control socket: accept: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

async fn send(w: &mut tokio::net::unix::OwnedWriteHalf, r: &Reply) -> std::io::Result<()> {
    let mut line = serde_json::to_vec(r).map_err(std::io::Error::other)?;
    line.push(b'\n');
    w.write_all(&line).await
}

async fn connection(stream: tokio::net::UnixStream, gate: Arc<Gate>) {
    // The owner's uid on the host, for the record (the check compares ids as the broker sees
    // them).
    let uid = gate.spec().owner_uid;
    let pid = match check_peer(&stream) {
        Ok(p) => p,
        Err(why) => {
            tracing::warn!("control socket: refused: {why}");
            let _ = gate
                .events()
                .send(BrokerEvent::Approval(EventKind::Refusal(Refusal {
                    subject: "approvals control".into(),
                    reasons: vec![why.clone()],
                    argv: vec![],
                    engine: Engine::Run,
                })));
            let (_, mut w) = stream.into_split();
            let _ = send(&mut w, &Reply::err(format!("refused: {why}"))).await;
            return;
        }
    };
    let (r, mut w) = stream.into_split();
    let mut r = tokio::io::BufReader::new(r);
    loop {
        let mut line = String::new();
        let n = match (&mut r).take(MAX_LINE).read_line(&mut line).await {
            Ok(n) => n,
            Err(_) => return,
        };
        if n == 0 {
            return;
        }
        if !line.ends_with('\n') {
            let _ = send(&mut w, &Reply::err("request line too long".into())).await;
            return;
        }
        let req: Request = match serde_json::from_str(line.trim_end()) {
            Ok(r) => r,
            Err(e) => {
                let _ = send(&mut w, &Reply::err(format!("bad request: {e}"))).await;
                continue;
            }
        };
        let reply = match req {
            Request::Status => Reply::status(gate.status()),
            Request::Answer {
                id,
                verdict,
                scope,
                pattern,
                via,
            } => {
                let by = format!("uid {uid} ({}, pid {pid})", label(&via));
                match gate.answer(&id, verdict, scope, pattern.as_deref(), &by) {
                    Ok(m) => Reply::ok(m),
                    Err(e) => Reply::err(crate::error_chain(&e)),
                }
            }
            Request::Revoke { id, via } => {
                let by = format!("uid {uid} ({}, pid {pid})", label(&via));
                match gate.revoke(&id, &by) {
                    Ok(m) => Reply::ok(m),
                    Err(e) => Reply::err(crate::error_chain(&e)),
                }
            }
            Request::Subscribe => {
                subscribe(&gate, r, w).await;
                return;
            }
        };
        if send(&mut w, &reply).await.is_err() {
            return;
        }
    }
}

/// A short printable label (the client names itself; it is only a label).
fn label(via: &str) -> String {
    let l: String = via
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || " -_.".contains(*c))
        .take(32)
        .collect();
    if l.is_empty() {
        "unnamed client".into()
    } else {
        l
    }
}

async fn subscribe(
    gate: &Arc<Gate>,
    mut r: tokio::io::BufReader<tokio::net::unix::OwnedReadHalf>,
    mut w: tokio::net::unix::OwnedWriteHalf,
) {
    let _attached = gate.attach();
    let mut changes = gate.watch();
    let mut buf = Vec::new();
    loop {
        changes.mark_unchanged();
        // A client that stops reading is dropped (and the session no longer counts as
        // attended) rather than holding this task for ever.
        let status = Reply::status(gate.status());
        let sent = tokio::time::timeout(WRITE_TIMEOUT, send(&mut w, &status)).await;
        if !matches!(sent, Ok(Ok(()))) {
            return;
        }
        // A line, EOF, or more than a line's worth of bytes without one ends it.
        if buf.len() as u64 >= MAX_LINE {
            return;
        }
        let mut limited = (&mut r).take(MAX_LINE);
        tokio::select! {
            c = changes.changed() => if c.is_err() { return },
            _ = limited.read_until(b'\n', &mut buf) => return,
            // Refresh the countdowns now and then.
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
        }
    }
}

/// The control socket of every live session under `runtime_root` (`sessions/*/control.sock`).
pub fn sockets(runtime_root: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(runtime_root.join("sessions"))
        .map(|rd| {
            rd.flatten()
                .map(|e| e.path().join(SOCKET_NAME))
                .filter(|p| {
                    use std::os::unix::fs::FileTypeExt;
                    std::fs::symlink_metadata(p).is_ok_and(|m| m.file_type().is_socket())
                })
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

/// A blocking client of one session's control socket.
pub struct Client {
    reader: BufReader<UnixStream>,
    writer: UnixStream,
}

impl Client {
    /// Connect to `path`.
    pub fn connect(path: &Path) -> Result<Self, ApprovalsError> {
        let io = |source| ApprovalsError::Io {
            what: "connecting to".into(),
            path: path.to_path_buf(),
            source,
        };
        let s = UnixStream::connect(path).map_err(io)?;
        s.set_read_timeout(Some(Duration::from_secs(10)))
            .map_err(io)?;
        let writer = s.try_clone().map_err(io)?;
        Ok(Client {
            reader: BufReader::new(s),
            writer,
        })
    }

    /// Send `req`; read one reply.
    pub fn call(&mut self, req: &Request) -> Result<Reply, ApprovalsError> {
        self.send(req)?;
        self.recv()
    }

    fn send(&mut self, req: &Request) -> Result<(), ApprovalsError> {
        let mut line = serde_json::to_vec(req)
            .map_err(|e| ApprovalsError::Control(format!("encoding: {e}")))?;
        line.push(b'\n');
        self.writer
            .write_all(&line)
            .map_err(|e| ApprovalsError::Control(format!("sending: {e}")))
    }

    /// The next reply (for a subscription: the next status).
    pub fn recv(&mut self) -> Result<Reply, ApprovalsError> {
        let mut line = String::new();
        let n = std::io::Read::take(&mut self.reader, MAX_REPLY)
            .read_line(&mut line)
            .map_err(|e| ApprovalsError::Control(format!("reading: {e}")))?;
        if n == 0 {
            return Err(ApprovalsError::Control(
                "the broker closed the connection".into(),
            ));
        }
        if !line.ends_with('\n') {
            return Err(ApprovalsError::Control("reply line too long".into()));
        }
        serde_json::from_str(line.trim_end())
            .map_err(|e| ApprovalsError::Control(format!("bad reply: {e}")))
    }

    /// Subscribe: from now on [`Client::recv`] returns each new status (no read timeout).
    pub fn subscribe(&mut self) -> Result<(), ApprovalsError> {
        self.send(&Request::Subscribe)?;
        self.reader
            .get_ref()
            .set_read_timeout(None)
            .map_err(|e| ApprovalsError::Control(format!("{e}")))
    }

    /// Set how long [`Client::recv`] waits.
    pub fn set_timeout(&mut self, t: Option<Duration>) -> Result<(), ApprovalsError> {
        self.reader
            .get_ref()
            .set_read_timeout(t)
            .map_err(|e| ApprovalsError::Control(format!("{e}")))
    }
}
