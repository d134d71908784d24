//! The control socket: how a person's answers reach a session's broker.
//!
//! A Unix stream socket, `control.sock` in the session's directory of the user's private
//! runtime directory (0700, the socket 0600), bound by the supervisor before the sandbox
//! starts and never bound into any sandbox. One JSON object per line each way: a
//! [`Request`], then a [`Reply`] (`subscribe` keeps the connection and sends a new status
//! line whenever something changes; while it is open the session counts as attended).
//!
//! Every peer is checked before a byte of it is read (`SO_PEERCRED`): its uid must be the
//! session owner's, it must live in the broker's own PID namespace, and not in a user
//! namespace below the broker's (the supervisor's private one, which every sandbox of the
//! session lives below). A process in any sandbox lives in other namespaces, so even a copy
//! of the socket (a bind, a hard link, a passed descriptor) gets it nothing but a refusal,
//! which is recorded.

use std::io::{BufRead, BufReader, Write};
use std::os::fd::AsFd;
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

fn ns(pid: i32, kind: &str) -> std::io::Result<PathBuf> {
    std::fs::read_link(format!("/proc/{pid}/ns/{kind}"))
}

/// How many PID namespaces deep `pid` is, counted from the one `/proc` shows: the length of
/// the `NSpid` line of its status (one pid per level), which anyone may read, whatever
/// namespace the process is in.
fn pid_depth(pid: i32) -> Result<usize, String> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .map_err(|e| format!("reading /proc/{pid}/status: {e}"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("NSpid:"))
        .map(|l| l.split_whitespace().count())
        .filter(|n| *n > 0)
        .ok_or_else(|| format!("/proc/{pid}/status has no NSpid line"))
}

/// Check a peer: the owner's uid, in our own PID namespace, and not in a user namespace below
/// ours. Returns the uid and pid, or why not.
///
/// The broker runs in the supervisor's private user namespace, below the user's own (where
/// `vetto approvals` and `vetto watch` run), and every sandbox of the session lives below the
/// broker's. So the PID namespace is compared by depth (a peer the broker can see at all is
/// in its namespace or below it, and only the former is as deep), and the user namespace by
/// what the broker may read of it: it holds every capability over its own namespace and those
/// below it, so it can read the namespace of any process in them; the namespace of a process
/// above or beside it (the kernel refuses: no capability there) is not a sandbox's of this
/// session, and a sandbox of any other session is in a PID namespace of its own.
pub fn check_peer(fd: impl AsFd, owner: u32) -> Result<(u32, i32), String> {
    let cred = nix::sys::socket::getsockopt(&fd, nix::sys::socket::sockopt::PeerCredentials)
        .map_err(|e| format!("no peer credentials: {e}"))?;
    let (uid, pid) = (cred.uid(), cred.pid());
    if uid != owner {
        return Err(format!(
            "peer uid {uid} (pid {pid}) is not the session's owner (uid {owner})"
        ));
    }
    // A pid of 0: the peer is in a PID namespace that ours cannot see into.
    if pid <= 0 {
        return Err(format!("peer uid {uid} has no pid in the broker's PID namespace"));
    }
    let mine = pid_depth(std::process::id() as i32)
        .map_err(|e| format!("the broker's own PID namespace: {e}"))?;
    let theirs = pid_depth(pid).map_err(|e| format!("peer pid {pid}: {e}: refused"))?;
    if theirs != mine {
        return Err(format!(
            "peer pid {pid} is in another PID namespace ({theirs} level(s) deep, the broker's {mine}): a sandboxed process"
        ));
    }
    let mine = ns(std::process::id() as i32, "user")
        .map_err(|e| format!("reading the broker's own user namespace: {e}"))?;
    match ns(pid, "user") {
        // The supervisor's own namespace.
        Ok(theirs) if theirs == mine => {}
        Ok(theirs) => {
            return Err(format!(
                "peer pid {pid} is in a user namespace below the broker's ({}, not {}): a sandboxed process",
                theirs.display(),
                mine.display()
            ))
        }
        // Above or beside the broker's: the user's own.
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {}
        Err(e) => {
            return Err(format!(
                "peer pid {pid}: its user namespace cannot be read ({e}): refused"
            ))
        }
    }
    Ok((uid, pid))
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
    let (uid, pid) = match check_peer(&stream, gate.spec().owner_uid) {
        Ok(p) => p,
        Err(why) => {
            tracing::warn!("control socket: refused: {why}");
            let _ = gate.events().send(BrokerEvent::Approval(EventKind::Refusal(Refusal {
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
        if send(&mut w, &Reply::status(gate.status())).await.is_err() {
            return;
        }
        tokio::select! {
            c = changes.changed() => if c.is_err() { return },
            // Anything from the client, or its going away, ends the subscription.
            _ = r.read_until(b'\n', &mut buf) => return,
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
        self.next()
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
    pub fn next(&mut self) -> Result<Reply, ApprovalsError> {
        let mut line = String::new();
        let n = self
            .reader
            .read_line(&mut line)
            .map_err(|e| ApprovalsError::Control(format!("reading: {e}")))?;
        if n == 0 {
            return Err(ApprovalsError::Control("the broker closed the connection".into()));
        }
        serde_json::from_str(line.trim_end())
            .map_err(|e| ApprovalsError::Control(format!("bad reply: {e}")))
    }

    /// Subscribe: from now on [`Client::next`] returns each new status (no read timeout).
    pub fn subscribe(&mut self) -> Result<(), ApprovalsError> {
        self.send(&Request::Subscribe)?;
        self.reader
            .get_ref()
            .set_read_timeout(None)
            .map_err(|e| ApprovalsError::Control(format!("{e}")))
    }

    /// Set how long [`Client::next`] waits.
    pub fn set_timeout(&mut self, t: Option<Duration>) -> Result<(), ApprovalsError> {
        self.reader
            .get_ref()
            .set_read_timeout(t)
            .map_err(|e| ApprovalsError::Control(format!("{e}")))
    }
}
