//! The session's audit writer: a process of its own, forked by the supervisor before it
//! creates the sandbox, that opens the store, records `session_start`, and later the session's
//! limits and `session_end`.
//!
//! Why a process: opening the store (SQLite's first connection: its shared-memory index, the
//! schema) and the first append cost the supervisor ~1.1 ms that nothing else could overlap,
//! since libcontainer must be driven from a single thread (its clone skips glibc's fork
//! handlers). The writer does that work on another CPU while the sandbox is being created, and
//! the supervisor only collects its answer before the command starts; at the end it records
//! `session_end` while the supervisor tears the session down.
//!
//! Why a fork and not an exec of vetto: a fresh vetto process spends ~2 ms of CPU before its
//! `main` (loading and relocating the image, faulting it in), which on two CPUs slowed the
//! sandbox's creation by as much as it saved. The fork is taken while the supervisor is
//! single-threaded (as libcontainer requires anyway), and the child only ever runs
//! `writer_main`, which leaves with `_exit`: none of the supervisor's destructors (its
//! session directory's removal) runs in it.
//!
//! What does not change:
//! - **Fail closed.** The command starts only after the writer has said `session_start` is
//!   stored ([`Pending::started`]); any other answer, or none (the writer died), is the
//!   session's error.
//! - **No sandbox process holds the store.** Only the writer opens it, in a process no
//!   sandbox process descends from. The supervisor holds one end of a socket pair to it,
//!   close-on-exec: the sandbox's processes are clones of the supervisor, and the command's
//!   exec closes it (PID 1 closes its copy as the command starts; FS-ONLY's sandbox process
//!   right after it applies Landlock, before seccomp and the exec).
//! - **Nothing sent later can redirect a write.** The `--report` file and `--summary` are
//!   fixed at the fork; a request carries only the end's status and reason.
//!
//! What does change: `session_start` is recorded before the sandbox is created, not after, so
//! `duration_ms` includes the creation (a few milliseconds); and a set-up that fails after the
//! fork leaves a `session_start` with a `setup_failure` end, where nothing was recorded before.
//! - **What is printed, and when.** The writer sends what it has to say (problems, the
//!   summary) with its answer, and the supervisor prints it where it printed it before.
//!
//! The writer outlives the supervisor only to end the record: when the socket closes without
//! a `session_end` (the supervisor was killed, or gave the session up), it records one with
//! reason `lost`, saying so, and exits. It is not killed with the supervisor
//! (`PR_SET_PDEATHSIG` would take that record with it); a supervisor gone before the writer
//! started leaves it nothing to record, and it leaves at once. Its own process group keeps
//! the terminal's signals (Ctrl-C is the supervisor's to forward) off it; it ignores them
//! besides. It keeps nothing of the supervisor's descriptors but stderr.
//!
//! Protocol (one line each): the writer answers `ok` or `error: …` once `session_start` is
//! written; then the supervisor sends `Request`s (JSON), and the writer answers
//! `Request::End` with an `Ended` (JSON), then does what nobody waits for (a due WAL
//! checkpoint, closing the store: `Local::close`) and exits.

use std::io::{BufRead, BufReader, Write};
use std::os::fd::{AsRawFd, IntoRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use serde::{Deserialize, Serialize};

use vetto_broker::audit::event::{EndReason, Limit, SessionStart};
use vetto_broker::audit::AuditConfig;

use crate::cpus::Cpus;

/// The writer's process name (`/proc/PID/comm`).
pub const WRITER_NAME: &std::ffi::CStr = c"vetto-audit";

/// A request after the start.
#[derive(Serialize, Deserialize, Debug, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "snake_case")]
enum Request {
    /// Record a limit the session reached.
    Limit(Limit),
    /// End, as `lost`, the sessions whose directories this session swept as stale, where
    /// the store holds their start and no end (see `Local::end_abandoned`).
    Abandoned(Vec<String>),
    /// Record `session_end` (with a signed checkpoint), export, write the report; answer with
    /// what to print; then exit.
    End {
        status: Option<i32>,
        signal: Option<i32>,
        reason: EndReason,
        control: Option<String>,
    },
}

/// The supervisor's side of a writer.
struct Conn {
    pid: libc::pid_t,
    sock: BufReader<UnixStream>,
    reaped: Option<String>,
}

impl Conn {
    /// Reap the writer (once); how it ended.
    fn reap(&mut self) -> String {
        if let Some(s) = &self.reaped {
            return s.clone();
        }
        let mut st = 0;
        let s = loop {
            // SAFETY: waitpid on our own child, which only this handle reaps.
            let r = unsafe { libc::waitpid(self.pid, &mut st, 0) };
            if r == self.pid {
                break match (libc::WIFEXITED(st), libc::WIFSIGNALED(st)) {
                    (true, _) => format!("exit status {}", libc::WEXITSTATUS(st)),
                    (_, true) => format!("signal {}", libc::WTERMSIG(st)),
                    _ => format!("wait status {st}"),
                };
            }
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EINTR) {
                break format!("not reapable: {e}");
            }
        };
        self.reaped = Some(s.clone());
        s
    }
}

impl Drop for Conn {
    /// A writer given up on (an error before the command ran, or no `session_end`) sees the
    /// socket close and exits; it is reaped here, so nothing is left behind.
    fn drop(&mut self) {
        let _ = self.sock.get_ref().shutdown(std::net::Shutdown::Both);
        self.reap();
    }
}

/// A writer that was started, whose answer is not read yet.
pub struct Pending(Option<Conn>);

impl Drop for Pending {
    /// Given up on before [`Pending::started`] (the set-up failed after the writer started):
    /// the session's record ends as a set-up failure instead of staying open.
    fn drop(&mut self) {
        if let Some(c) = self.0.take() {
            if let Ok(live) = (Pending(Some(c))).started() {
                live.end(
                    None,
                    None,
                    EndReason::SetupFailure,
                    Some(
                        "the set-up failed before the command started (vetto said why on stderr)"
                            .into(),
                    ),
                );
            }
        }
    }
}

/// A session being recorded by its writer.
pub struct Live(Conn);

/// How long [`thread_count`] waits for a joined thread to leave `/proc/self/task`.
const THREADS_SETTLE: Duration = Duration::from_millis(50);

/// The threads this process runs, as `/proc/self/task` lists them once any joined thread is
/// gone (`None` if it cannot be read).
///
/// A thread that has been joined can stay listed for a moment: the kernel wakes its joiner
/// when it clears the thread's id, a few steps before it unhashes the thread, and the woken
/// joiner can run first (a single read saw two threads after 885 of 20,000 joins in
/// `shim/tests/thread_count.rs`; review mode joins its directory walk just before the
/// writer's fork). Such a thread runs no user code any more,
/// so it holds no lock a child could inherit. The list is read again, for up to
/// [`THREADS_SETTLE`], while it shows more than one; a thread still listed after that is
/// counted.
pub fn thread_count() -> Option<usize> {
    settled(
        || {
            std::fs::read_dir("/proc/self/task")
                .ok()
                .map(Iterator::count)
        },
        THREADS_SETTLE,
    )
}

/// `count()`, read again every 100 µs while it is above one, until `patience` has passed.
fn settled(mut count: impl FnMut() -> Option<usize>, patience: Duration) -> Option<usize> {
    let deadline = Instant::now() + patience;
    loop {
        let n = count()?;
        if n <= 1 || Instant::now() >= deadline {
            return Some(n);
        }
        std::thread::sleep(Duration::from_micros(100));
    }
}

/// Fork the session's writer, which opens the store and records `start`. Its answer is read
/// by [`Pending::started`], after the work it overlaps.
///
/// Call it only while the process is single-threaded (the supervisor is, before and during
/// libcontainer's create): the child runs Rust code after the fork.
///
/// `report` (`--report`) and `summary` (`--summary`) are what the end writes and shows;
/// they are fixed here, so nothing sent later can name another file.
pub fn spawn(
    cfg: &AuditConfig,
    session: &str,
    start: SessionStart,
    report: Option<&Path>,
    summary: bool,
) -> Result<Pending> {
    let report = report.map(|p| std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf()));
    // A thread started before this point would make the fork unsound (a lock it holds stays
    // held in the child): refuse rather than risk it.
    if let Some(n) = thread_count() {
        if n > 1 {
            bail!("audit: the writer is forked from a single-threaded supervisor, and this one runs {n} threads");
        }
    }
    let (ours, theirs) = UnixStream::pair().context("audit: the writer's socket")?;
    // SAFETY: getpid has no preconditions.
    let parent = unsafe { libc::getpid() };
    let cpus = Cpus::now();
    // SAFETY: the process is single-threaded here (see above), so the child inherits no lock
    // another thread held; it runs writer_main only, which never returns (it leaves with
    // _exit, so nothing of the parent's is dropped twice).
    match unsafe { libc::fork() } {
        -1 => Err(anyhow!(
            "audit: starting the writer: fork: {}",
            std::io::Error::last_os_error()
        )),
        0 => {
            let theirs: OwnedFd = theirs.into();
            // The parent's end: forgotten here, closed with the rest in writer_main.
            let _ = ours.into_raw_fd();
            let out = Outputs {
                report: report.as_deref(),
                summary,
                cpus,
            };
            writer_main(parent, theirs, cfg, session, start, out)
        }
        pid => {
            if let Some(c) = &cpus {
                c.keep_off(pid);
            }
            drop(theirs);
            Ok(Pending(Some(Conn {
                pid,
                sock: BufReader::new(ours),
                reaped: None,
            })))
        }
    }
}

fn send<T: Serialize>(sock: &mut UnixStream, v: &T) -> Result<()> {
    let mut line = serde_json::to_vec(v)?;
    line.push(b'\n');
    sock.write_all(&line)?;
    Ok(())
}

fn answer(sock: &mut BufReader<UnixStream>) -> Option<String> {
    let mut line = String::new();
    match sock.read_line(&mut line) {
        Ok(n) if n > 0 => Some(line.trim_end().to_string()),
        _ => None,
    }
}

/// How a writer that gave no answer ended.
fn gone(c: &mut Conn) -> String {
    format!("the writer ended ({}) without an answer", c.reap())
}

impl Pending {
    /// Wait for the writer's answer: `Ok` once `session_start` is stored.
    pub fn started(mut self) -> Result<Live> {
        let Some(mut c) = self.0.take() else {
            bail!("audit: the writer's answer was read already");
        };
        match answer(&mut c.sock).as_deref() {
            Some("ok") => Ok(Live(c)),
            Some(other) => {
                bail!("{}", other.strip_prefix("error: ").unwrap_or(other))
            }
            None => Err(anyhow!("audit: {}", gone(&mut c))),
        }
    }
}

impl Live {
    /// The writer's pid (a child of the caller: a supervisor that reaps children it does not
    /// know must spare it).
    pub fn pid(&self) -> libc::pid_t {
        self.0.pid
    }

    /// The caller reaped the writer itself (it ended early): its pid is not waited for again.
    pub fn reaped_elsewhere(&mut self) {
        self.0
            .reaped
            .get_or_insert_with(|| "reaped by the supervisor".into());
    }

    /// Record a limit that was reached (a failure is reported, not fatal: the session is over).
    pub fn limit(&mut self, l: Limit) {
        if let Err(e) = send(self.0.sock.get_mut(), &Request::Limit(l)) {
            eprintln!("vetto: audit: a limit could not be recorded: {e:#}");
        }
    }

    /// End the sessions this one swept as stale (`session::sweep_stale`), where the store
    /// holds their start and no end. The writer does it while the session runs.
    pub fn abandoned(&mut self, sessions: Vec<String>) {
        if sessions.is_empty() {
            return;
        }
        if let Err(e) = send(self.0.sock.get_mut(), &Request::Abandoned(sessions)) {
            eprintln!("vetto: audit: the sessions swept as stale could not be ended: {e:#}");
        }
    }

    /// Record `session_end` with a signed checkpoint, export, and write the report and summary.
    /// Returns false if the end could not be recorded.
    pub fn end(
        self,
        status: Option<i32>,
        signal: Option<i32>,
        reason: EndReason,
        control: Option<String>,
    ) -> bool {
        self.finish(status, signal, reason, control).wait()
    }

    /// Send `session_end` (as [`Live::end`] records it) without waiting: the supervisor's
    /// own teardown overlaps the writer's, and [`Ending::wait`] collects the answer.
    pub fn finish(
        mut self,
        status: Option<i32>,
        signal: Option<i32>,
        reason: EndReason,
        control: Option<String>,
    ) -> Ending {
        let req = Request::End {
            status,
            signal,
            reason,
            control,
        };
        let sent = send(self.0.sock.get_mut(), &req);
        Ending { conn: self.0, sent }
    }
}

/// The writer's answer to `session_end`.
#[derive(Serialize, Deserialize, Debug, PartialEq)]
#[serde(deny_unknown_fields)]
struct Ended {
    /// `session_end` is in the store.
    recorded: bool,
    /// What to show on stderr: problems, and the summary.
    stderr: String,
}

/// A `session_end` sent, its answer not yet read.
pub struct Ending {
    conn: Conn,
    sent: Result<()>,
}

impl Ending {
    /// Wait for the writer's answer, show what it has to say, and reap it. Returns false if
    /// the end could not be recorded.
    pub fn wait(mut self) -> bool {
        self.answer()
        // Dropped: the writer, which exits after its answer, is reaped.
    }

    /// Wait for the writer's answer and show what it has to say; the writer is reaped when
    /// this is dropped (its exit is not waited for here: `vetto run` delivers its status
    /// first). Returns false if the end could not be recorded.
    pub fn answer(&mut self) -> bool {
        if let Err(e) = &self.sent {
            eprintln!("vetto: audit: the session's end could not be recorded: {e:#}");
            return false;
        }
        let c = &mut self.conn;
        match answer(&mut c.sock).map(|a| serde_json::from_str::<Ended>(&a)) {
            Some(Ok(e)) => {
                eprint!("{}", e.stderr);
                e.recorded
            }
            Some(Err(e)) => {
                eprintln!("vetto: audit: the writer's answer to the session's end: {e}");
                false
            }
            None => {
                eprintln!(
                    "vetto: audit: the session's end could not be recorded: {}",
                    gone(c)
                );
                false
            }
        }
    }
}

/// What the end writes and shows, fixed when the writer is forked.
struct Outputs<'a> {
    report: Option<&'a Path>,
    summary: bool,
    /// Off the supervisor's CPU ([`Cpus`]).
    cpus: Option<Cpus>,
}

/// The writer's process: set itself apart, record the start, serve the session, `_exit`.
fn writer_main(
    parent: libc::pid_t,
    sock: OwnedFd,
    cfg: &AuditConfig,
    session: &str,
    start: SessionStart,
    out: Outputs<'_>,
) -> ! {
    // First, off the supervisor's CPU (the supervisor also moves it, in case it runs first).
    if let Some(c) = &out.cpus {
        c.keep_off(0);
    }
    // SAFETY: integer-only calls on this process: leave if the supervisor is gone already
    // (nothing is recorded yet), and a process group of its own, away from the terminal's
    // signals.
    unsafe {
        if libc::getppid() != parent {
            libc::_exit(1);
        }
        libc::setpgid(0, 0);
        // Its command line is the supervisor's (a fork); `ps -o comm` tells them apart.
        libc::prctl(libc::PR_SET_NAME, WRITER_NAME.as_ptr(), 0, 0, 0);
    }
    for sig in [
        libc::SIGINT,
        libc::SIGQUIT,
        libc::SIGTERM,
        libc::SIGHUP,
        libc::SIGTSTP,
        libc::SIGTTIN,
        // Writing to a terminal from outside its foreground group.
        libc::SIGTTOU,
        libc::SIGPIPE,
    ] {
        // SAFETY: setting a signal's disposition to ignore; this process has one thread.
        unsafe { libc::signal(sig, libc::SIG_IGN) };
    }
    // Of the supervisor's descriptors, only stderr stays (the socket goes to 3): not the
    // session's lock, not the caller's stdin or stdout (a reader waiting for the command's
    // output to end must not wait for the writer), not what the caller left open.
    let fd = sock.as_raw_fd();
    // SAFETY: integer-only calls on descriptors of this process, which nothing else here
    // uses: 3 becomes the socket, /dev/null stands in for 0 and 1, the rest is closed.
    unsafe {
        if fd != 3 && libc::dup2(fd, 3) != 3 {
            libc::_exit(1);
        }
    }
    if vetto_hooks::process::close_fds_above(3).is_err() {
        // SAFETY: leaving at once (see below): the writer must not hold what it could not close.
        unsafe { libc::_exit(1) };
    }
    // /dev/null stands in for 0 and 1, and for 2 when the caller had closed stderr and the
    // socket took its number (it must not stay there).
    let std_fds: &[libc::c_int] = if fd == 2 { &[0, 1, 2] } else { &[0, 1] };
    if vetto_hooks::process::null_over(std_fds).is_err() {
        // SAFETY: leaving at once, as above.
        unsafe { libc::_exit(1) };
    }
    // The descriptor number the OwnedFd held is closed or is 3 now: forget it.
    std::mem::forget(sock);
    // SAFETY: 3 is the socket (dup2 above), owned by this process from here.
    let fd = unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(3) };
    // A panic must not unwind into the supervisor's frames this process was forked from:
    // their destructors (the session directory's removal) are not the writer's to run.
    let code = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        serve(
            BufReader::new(UnixStream::from(fd)),
            cfg,
            session,
            start,
            out,
        )
    }))
    .unwrap_or(101);
    // SAFETY: leaving without the supervisor's destructors or exit handlers.
    unsafe { libc::_exit(code) }
}

fn serve(
    mut sock: BufReader<UnixStream>,
    cfg: &AuditConfig,
    session: &str,
    start: SessionStart,
    out: Outputs<'_>,
) -> i32 {
    let reply = |sock: &mut BufReader<UnixStream>, s: &str| {
        let _ = sock.get_mut().write_all(format!("{s}\n").as_bytes());
    };
    let mut local = match super::begin_local(cfg, session, start) {
        Ok(l) => l,
        Err(e) => {
            reply(&mut sock, &format!("error: {e:#}"));
            return 1;
        }
    };
    reply(&mut sock, "ok");
    let mut line = String::new();
    loop {
        line.clear();
        if sock.read_line(&mut line).unwrap_or(0) == 0 {
            // The supervisor ended, or closed the session, without a session_end: the record
            // says so instead of staying open. Its report is written; nobody reads a summary.
            // (Whether the supervisor is dead cannot be told yet: its descriptors close
            // before it is reparented.)
            let control = "vetto's supervisor ended, or closed the session, before it recorded \
                           the session's end (was it killed?); the command's status is not known";
            let (recorded, _) = local.end(
                None,
                None,
                EndReason::Lost,
                Some(control.into()),
                out.report,
                false,
            );
            local.close();
            return i32::from(!recorded);
        }
        match serde_json::from_str::<Request>(&line) {
            Ok(Request::Limit(l)) => local.limit(l),
            Ok(Request::Abandoned(ids)) => local.end_abandoned(&ids),
            Ok(Request::End {
                status,
                signal,
                reason,
                control,
            }) => {
                let (recorded, stderr) =
                    local.end(status, signal, reason, control, out.report, out.summary);
                let ended = serde_json::to_string(&Ended { recorded, stderr })
                    .unwrap_or_else(|_| r#"{"recorded":false,"stderr":""}"#.into());
                // The caller's stderr is let go before the answer: a reader of it waits for
                // every copy to close, and vetto's status follows the answer at once. (What
                // the end has to say is in the answer.)
                // Best effort: a stderr left as it was only delays the caller's reader.
                let _ = vetto_hooks::process::null_over(&[2]);
                reply(&mut sock, &ended);
                // Then what nobody waits for: a due checkpoint, closing the store.
                drop(sock);
                local.close();
                return i32::from(!recorded);
            }
            Err(e) => eprintln!("vetto: audit: the writer got a request it cannot read: {e}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_count_above_one_is_read_again_until_it_settles_or_patience_runs_out() {
        let mut seen = vec![2, 2, 1, 5].into_iter();
        assert_eq!(settled(|| seen.next(), Duration::from_secs(5)), Some(1));
        let mut reads = 0;
        let start = Instant::now();
        let stuck = settled(
            || {
                reads += 1;
                Some(3)
            },
            Duration::from_millis(5),
        );
        assert_eq!(stuck, Some(3));
        assert!(reads > 1 && start.elapsed() >= Duration::from_millis(5));
        assert_eq!(settled(|| Some(1), Duration::from_secs(5)), Some(1));
        assert_eq!(settled(|| None, Duration::from_secs(5)), None);
    }

    #[test]
    fn requests_read_back_as_written_and_unknown_fields_are_refused() {
        let r = Request::End {
            status: Some(3),
            signal: None,
            reason: EndReason::Exit,
            control: Some("x".into()),
        };
        let s = serde_json::to_string(&r).expect("serialize");
        assert_eq!(serde_json::from_str::<Request>(&s).expect("read back"), r);
        let bad = s.replace("\"control\"", "\"contrl\"");
        assert!(serde_json::from_str::<Request>(&bad).is_err());
    }
}
