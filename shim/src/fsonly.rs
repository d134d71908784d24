//! `vetto run` in the FS-ONLY tier: no namespaces, so no libcontainer and no init. The
//! supervisor forks the command itself; the child, before `execve`, takes its own process
//! group, sets the policy's rlimits, and applies the same [`apply`](vetto_hooks::apply::apply)
//! steps as FULL's init minus the namespace ones: no_new_privs, Landlock with the narrow view
//! of [`vetto_bundle::fsonly::view`] (ABI ≥ 6, so signals and abstract UNIX sockets are scoped
//! to the sandbox), every capability dropped, PDEATHSIG checked against the supervisor's
//! pidfd, and the deny-list with sockets refused ([`vetto_bundle::fsonly::seccomp`]), or, with
//! the broker, TCP sockets whose every `connect()` this supervisor makes itself, to the broker
//! only ([`crate::fsnet`]).
//!
//! The supervisor is the sandbox's child subreaper (`PR_SET_CHILD_SUBREAPER`): a process
//! that leaves the group with `setsid()` or is orphaned by a double fork is reparented to it,
//! not to the host's init, and when the command ends it kills and reaps every descendant
//! until none is left. Inside the sandbox, the command's parent stays behind as the sandbox's
//! own reaper: when the command ends, or the supervisor dies (a parent-death signal, even on
//! SIGKILL), it kills every process of its Landlock domain (`kill(-1)`, which the domain's
//! signal scope confines) and reaps them. What remains is documented in the threat model.

use std::ffi::CString;
use std::os::fd::{AsRawFd, RawFd};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde_json::Value;

use vetto_broker::audit::event::EndReason;
use vetto_bundle::host::HostFacts;
use vetto_bundle::resolve::Policy;
use vetto_bundle::translate::Translation;
use vetto_hooks::apply::{self, Capabilities, Filter, Hardening};
use vetto_hooks::init::FORWARDED;
use vetto_hooks::process;

use crate::audit;
use crate::cli::RunArgs;
use crate::run::{EXIT_SETUP, EXIT_WALL_CLOCK};

/// What the network plan asks that this tier cannot give, if anything.
fn network_refusal(t: &Translation, git_ssh: bool) -> Option<String> {
    let net = &t.plan.network;
    if !net.publish.is_empty() || git_ssh {
        return Some("network: the FS-ONLY tier cannot publish a port or carry --git-ssh (the sandbox may not listen, and has no network namespace of its own to dial into); the broker works. Run without them, or where FULL can be established (see `vetto doctor`)".into());
    }
    if net.broker.is_none() && !net.listeners.is_empty() {
        return Some("network: listeners without the broker".into());
    }
    None
}

/// The terminal devices on stdin, stdout and stderr (`/dev/pts/N`), granted by name.
fn terminals() -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = vec![];
    for fd in 0..3 {
        // SAFETY: isatty on a descriptor number.
        if unsafe { libc::isatty(fd) } != 1 {
            continue;
        }
        if let Ok(p) = std::fs::read_link(format!("/proc/self/fd/{fd}")) {
            if p.starts_with("/dev/") && !out.contains(&p) {
                out.push(p);
            }
        }
    }
    out
}

/// A private directory of the session (0700, in `base`: the caller's temporary directory,
/// `/tmp` or a parent sandbox's private `TMPDIR`, for the sandbox's own `TMPDIR`; vetto's
/// runtime directory, a tmpfs where there is one, for what vetto writes), removed at the end.
struct PrivateTmp(PathBuf);

impl PrivateTmp {
    fn create(base: &Path, uid: u32) -> Result<Self> {
        let template = CString::new(format!(
            "{}/vetto-fs-{uid}.{}.XXXXXX",
            base.display(),
            std::process::id()
        ))
        .context("TMPDIR holds a NUL byte")?;
        let mut buf = template.into_bytes_with_nul();
        // SAFETY: mkdtemp rewrites the X's of the NUL-terminated template we own (mode 0700).
        let p = unsafe { libc::mkdtemp(buf.as_mut_ptr().cast()) };
        if p.is_null() {
            bail!(
                "FS-ONLY: creating a private directory for the session in {}: {}",
                base.display(),
                std::io::Error::last_os_error()
            );
        }
        buf.pop();
        let path = PathBuf::from(String::from_utf8(buf).context("mkdtemp path")?);
        Ok(PrivateTmp(path))
    }
}

/// Remove the private directories of sessions whose supervisor is gone (killed before it
/// could remove them) in `base`: `vetto-fs-UID.PID.*`, owned by `uid`, where no process `PID`
/// runs.
fn sweep_stale(base: &Path, uid: u32) {
    use std::os::unix::fs::MetadataExt;
    let prefix = format!("vetto-fs-{uid}.");
    let Ok(entries) = std::fs::read_dir(base) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix(&prefix)) else {
            continue;
        };
        let Some(pid) = rest.split('.').next().and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        if crate::session::running(pid) {
            continue;
        }
        // Only a real directory of ours (not a symlink someone put there).
        if e.path()
            .symlink_metadata()
            .is_ok_and(|m| m.is_dir() && m.uid() == uid)
        {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

impl Drop for PrivateTmp {
    fn drop(&mut self) {
        // remove_dir_all does not follow symlinks the sandbox left there.
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

struct Rlimit {
    resource: libc::__rlimit_resource_t,
    value: u64,
}

fn rlimits(spec: &Value) -> Vec<Rlimit> {
    let mut out = vec![];
    for r in spec
        .pointer("/process/rlimits")
        .and_then(|v| v.as_array())
        .into_iter()
        .flatten()
    {
        let resource = match r["type"].as_str() {
            Some("RLIMIT_NOFILE") => libc::RLIMIT_NOFILE,
            Some("RLIMIT_NPROC") => libc::RLIMIT_NPROC,
            Some("RLIMIT_CORE") => libc::RLIMIT_CORE,
            Some("RLIMIT_AS") => libc::RLIMIT_AS,
            _ => continue,
        };
        if let Some(value) = r["hard"].as_u64() {
            out.push(Rlimit { resource, value });
        }
    }
    out
}

fn cstrings(v: &[String]) -> Result<Vec<CString>> {
    v.iter()
        .map(|s| CString::new(s.as_bytes()).with_context(|| format!("{s:?} holds a NUL byte")))
        .collect()
}

/// Everything the child needs, prepared before the fork (it allocates nothing after).
struct Child {
    file: CString,
    argv: Vec<CString>,
    envp: Vec<CString>,
    cwd: CString,
    rlimits: Vec<Rlimit>,
    /// The Landlock ruleset, enforced first (before the rest of `hardening`).
    ruleset: Option<vetto_hooks::fsview::Built>,
    hardening: Hardening,
    tty: bool,
    error_fd: RawFd,
    pidfd: RawFd,
    /// With the broker: the socket the connect() listener goes to the supervisor on.
    notify_fd: Option<RawFd>,
}

fn report(fd: RawFd, msg: &str) {
    // SAFETY: writing a buffer we own to our error pipe; a failure changes nothing.
    unsafe { libc::write(fd, msg.as_ptr().cast(), msg.len()) };
}

/// Report `what` to the supervisor and leave the forked child with `code`.
fn die(fd: RawFd, what: &str, code: i32) -> ! {
    report(fd, what);
    // SAFETY: leaving the forked child without the parent's destructors.
    unsafe { libc::_exit(code) }
}

fn child_main(mut c: Child) -> ! {
    let fail = |what: &str, code: i32| -> ! { die(c.error_fd, what, code) };
    // SAFETY: setpgid with integers: the command leads a process group of its own.
    unsafe { libc::setpgid(0, 0) };
    if c.tty {
        // SAFETY: integer-only calls; SIGTTOU is ignored so a background group may take the
        // terminal, then restored by the reset below.
        unsafe {
            libc::signal(libc::SIGTTOU, libc::SIG_IGN);
            libc::tcsetpgrp(0, libc::getpid());
        }
    }
    if process::reset_signal_dispositions().is_err() {
        fail("FS-ONLY: resetting signal dispositions failed", 125);
    }
    for r in &c.rlimits {
        let lim = libc::rlimit {
            rlim_cur: r.value,
            rlim_max: r.value,
        };
        // SAFETY: setrlimit reads the struct we own.
        if unsafe { libc::setrlimit(r.resource, &lim) } != 0 {
            fail(
                &format!(
                    "limits: setrlimit({}): {}",
                    r.resource,
                    std::io::Error::last_os_error()
                ),
                125,
            );
        }
    }
    // SAFETY: chdir to a NUL-terminated path we own.
    if unsafe { libc::chdir(c.cwd.as_ptr()) } != 0 {
        fail(
            &format!(
                "working directory {:?}: {}",
                c.cwd,
                std::io::Error::last_os_error()
            ),
            125,
        );
    }
    // Landlock first (it consumes, and closes, the ruleset's descriptor).
    // (The reaper's kill(-1) below relies on this domain's signal scope: no ruleset, no run.)
    match c.ruleset.take().map(|r| r.restrict_self()) {
        Some(Ok(_)) => {}
        Some(Err(e)) => fail(&vetto_broker::error_chain(&e), 125),
        None => fail("FS-ONLY: no Landlock ruleset", 125),
    }
    // Nothing of the supervisor's reaches the command but stdio; the error pipe (CLOEXEC)
    // and the supervisor's pidfd stay open until exec.
    let mut keep = vec![c.error_fd, c.pidfd];
    keep.extend(c.notify_fd);
    // If the kernel refuses, the command must not run: it would inherit what the supervisor
    // holds.
    if let Err(e) = process::close_all_but(&keep) {
        fail(
            &format!("FS-ONLY: closing the supervisor's descriptors ({e})"),
            125,
        );
    }
    if let Err(e) = apply::apply(&c.hardening) {
        fail(&vetto_broker::error_chain(&e), 125);
    }
    sandbox_reaper(&c)
}

/// The signal the sandbox's reaper gets when the supervisor dies (not one the supervisor
/// forwards, so it cannot be mistaken for one).
fn parent_death_signal() -> libc::c_int {
    libc::SIGRTMIN() + 3
}

/// Inside the sandbox (under every control already): the process group's leader stays
/// behind as the sandbox's own subreaper and forks the command. When the command ends, or
/// when the supervisor dies (PDEATHSIG, even by SIGKILL), it kills and reaps every
/// descendant, then exits with the command's status. The agent can kill it (same domain);
/// its orphans then go to the supervisor, the next subreaper up.
fn sandbox_reaper(c: &Child) -> ! {
    let fail = |what: &str, code: i32| -> ! { die(c.error_fd, what, code) };
    let pdeath = parent_death_signal();
    let mut handled: Vec<libc::c_int> = FORWARDED.to_vec();
    handled.extend([libc::SIGCHLD, pdeath]);
    let Ok(sfd) = process::block_into_signalfd(&handled, libc::SFD_CLOEXEC) else {
        fail("FS-ONLY: the sandbox's reaper: signalfd failed", 125)
    };
    // SAFETY: integer-only prctls.
    let armed = unsafe {
        libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
            && libc::prctl(libc::PR_SET_PDEATHSIG, pdeath as libc::c_ulong, 0, 0, 0) == 0
    };
    if !armed {
        fail("FS-ONLY: the sandbox's reaper: prctl failed", 125);
    }
    if apply::arm_parent_death(Some(c.pidfd)).is_err() {
        fail("FS-ONLY: the supervisor exited during setup", 125);
    }
    // arm_parent_death set SIGKILL; the reaper needs a signal it can act on.
    // SAFETY: integer-only prctl.
    unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, pdeath as libc::c_ulong, 0, 0, 0) };
    // SAFETY: the reaper is single-threaded; the command's side only execs or _exits.
    let cmd = unsafe { libc::fork() };
    if cmd < 0 {
        fail("FS-ONLY: fork of the command failed", 125);
    }
    if cmd == 0 {
        // SAFETY: integer-only prctls: the command has no subreaper role and no PDEATHSIG.
        unsafe {
            libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0);
            libc::prctl(libc::PR_SET_PDEATHSIG, 0, 0, 0, 0);
        }
        if process::reset_signal_dispositions().is_err() {
            fail("FS-ONLY: resetting signal dispositions failed", 125);
        }
        exec_command(c);
    }
    // SAFETY: closing the reaper's copies; the command keeps its own until exec.
    unsafe {
        libc::close(c.error_fd);
        libc::close(c.pidfd);
    }
    let code = loop {
        // SAFETY: signalfd_siginfo is plain data.
        let mut info: libc::signalfd_siginfo = unsafe { std::mem::zeroed() };
        let want = std::mem::size_of::<libc::signalfd_siginfo>();
        // SAFETY: reading one siginfo into our struct (blocking).
        let r = unsafe {
            libc::read(
                sfd.as_raw_fd(),
                (&mut info as *mut libc::signalfd_siginfo).cast(),
                want,
            )
        };
        if r as usize == want && info.ssi_signo as libc::c_int == pdeath {
            break 128 + libc::SIGKILL;
        }
        // Forwarded signals reach the whole group from the supervisor: nothing to do here.
        let mut done = None;
        loop {
            let mut st = 0;
            // SAFETY: non-blocking reap of any child of ours.
            let p = unsafe { libc::waitpid(-1, &mut st, libc::WNOHANG) };
            if p <= 0 {
                break;
            }
            if p == cmd {
                if libc::WIFEXITED(st) {
                    done = Some(libc::WEXITSTATUS(st));
                } else if libc::WIFSIGNALED(st) {
                    done = Some(128 + libc::WTERMSIG(st));
                }
            }
        }
        if let Some(code) = done {
            break code;
        }
    };
    // Every process of this Landlock domain (and of domains nested in it): the scope limits
    // kill(-1) to those, and one pass is atomic against fork, so a chain of processes that
    // fork, setsid and exit cannot outrun it. Then reap until none is left.
    loop {
        // SAFETY: integer-only; Landlock's signal scope (required, ABI >= 6) confines it.
        unsafe { libc::kill(-1, libc::SIGKILL) };
        let mut st = 0;
        // SAFETY: reaping any child of ours.
        let r = unsafe { libc::waitpid(-1, &mut st, 0) };
        if r < 0 && std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            break;
        }
    }
    // SAFETY: leaving without the parent's destructors.
    unsafe { libc::_exit(code) }
}

fn exec_command(c: &Child) -> ! {
    let fail = |what: &str, code: i32| -> ! { die(c.error_fd, what, code) };
    let mut argv_p: Vec<*const libc::c_char> = c.argv.iter().map(|a| a.as_ptr()).collect();
    argv_p.push(std::ptr::null());
    let mut envp_p: Vec<*const libc::c_char> = c.envp.iter().map(|a| a.as_ptr()).collect();
    envp_p.push(std::ptr::null());
    // SAFETY: NUL-terminated arrays of pointers to CStrings that outlive the call.
    unsafe { libc::execvpe(c.file.as_ptr(), argv_p.as_ptr(), envp_p.as_ptr()) };
    let err = std::io::Error::last_os_error();
    let code = if err.raw_os_error() == Some(libc::ENOENT) {
        127
    } else {
        126
    };
    fail(
        &format!("cannot execute {}: {err}", c.file.to_string_lossy()),
        code,
    )
}

/// This process's direct children (`/proc/self/task/*/children`).
fn children() -> Vec<libc::pid_t> {
    let mut out = vec![];
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return out;
    };
    for t in tasks.flatten() {
        if let Ok(s) = std::fs::read_to_string(t.path().join("children")) {
            out.extend(
                s.split_whitespace()
                    .filter_map(|p| p.parse::<libc::pid_t>().ok()),
            );
        }
    }
    out
}

/// Kill and reap every descendant (and the command's process group, if given: its leader
/// must be unreaped, so the number is still the group's) but `spare` (the broker, stopped on
/// its own so it records the connections still open): orphans are reparented to this
/// subreaper, so repeat until there is no other child left.
fn kill_all(pgid: Option<libc::pid_t>, spare: &[libc::pid_t]) {
    if let Some(g) = pgid {
        // SAFETY: signalling the command's process group, once, before anything is reaped
        // (the kernel signals every member at once; a killed member forks no more).
        unsafe { libc::kill(-g, libc::SIGKILL) };
    }
    loop {
        let kids: Vec<libc::pid_t> = children()
            .into_iter()
            .filter(|p| !spare.contains(p))
            .collect();
        if kids.is_empty() {
            return;
        }
        for pid in &kids {
            // SAFETY: as above.
            unsafe { libc::kill(*pid, libc::SIGKILL) };
        }
        for pid in &kids {
            let mut st = 0;
            // SAFETY: reaping a child of ours; EINTR retried, anything else (already reaped)
            // ends the wait for it.
            while unsafe { libc::waitpid(*pid, &mut st, 0) } < 0
                && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR)
            {}
        }
    }
}

enum Outcome {
    Exited { code: i32, forwarded: bool },
    WallClock,
}

/// Wait for the command, forwarding signals and reaping orphans; each of `ours` (the broker
/// and the audit writer, children too) is marked gone if it ends first (then it must not be
/// signalled or waited for by pid any more).
fn supervise(
    child: libc::pid_t,
    sfd: RawFd,
    deadline: Option<Instant>,
    ours: &mut [(libc::pid_t, bool)],
) -> Outcome {
    let mut forwarded = false;
    loop {
        let mut p = libc::pollfd {
            fd: sfd,
            events: libc::POLLIN,
            revents: 0,
        };
        let timeout = deadline.map_or(-1, |d| {
            d.saturating_duration_since(Instant::now())
                .as_millis()
                .min(i32::MAX as u128) as i32
        });
        // SAFETY: one pollfd we own.
        let n = unsafe { libc::poll(&mut p, 1, timeout) };
        if n == 0 && deadline.is_some_and(|d| Instant::now() >= d) {
            return Outcome::WallClock;
        }
        loop {
            // SAFETY: signalfd_siginfo is plain data.
            let mut info: libc::signalfd_siginfo = unsafe { std::mem::zeroed() };
            let want = std::mem::size_of::<libc::signalfd_siginfo>();
            // SAFETY: reading one siginfo into our struct (the signalfd is non-blocking).
            let r =
                unsafe { libc::read(sfd, (&mut info as *mut libc::signalfd_siginfo).cast(), want) };
            if r as usize != want {
                break;
            }
            let sig = info.ssi_signo as libc::c_int;
            // (A signal sent to vetto's whole group, relayed by the front too, is passed once.)
            if sig != libc::SIGCHLD && crate::front::fresh(&info) {
                forwarded |= sig != libc::SIGWINCH && sig != libc::SIGCONT;
                // SAFETY: forwarding to the command's process group (its pid is its pgid).
                if unsafe { libc::kill(-child, sig) } != 0 {
                    // SAFETY: as above, the pid alone.
                    unsafe { libc::kill(child, sig) };
                }
            }
        }
        // Reap what ended (orphans included); the command itself is left a zombie, so the
        // group kill that follows (its pid is its group's id) cannot reach a process that
        // took the number since: kill_all reaps it.
        loop {
            // SAFETY: siginfo_t is plain data; all zeros is valid.
            let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
            // SAFETY: waitid fills `info`; WNOWAIT leaves the child reapable.
            let r = unsafe {
                libc::waitid(
                    libc::P_ALL,
                    0,
                    &mut info,
                    libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
                )
            };
            // SAFETY: waitid filled `info` (si_pid 0: nothing has ended).
            let (pid, status) = unsafe { (info.si_pid(), info.si_status()) };
            if r != 0 || pid == 0 {
                break;
            }
            if pid == child {
                let code = match info.si_code {
                    libc::CLD_EXITED => status,
                    _ => 128 + status,
                };
                return Outcome::Exited { code, forwarded };
            }
            for (o, gone) in ours.iter_mut() {
                if *o == pid {
                    *gone = true;
                }
            }
            let mut st = 0;
            // SAFETY: reaping the child waitid named.
            unsafe { libc::waitpid(pid, &mut st, libc::WNOHANG) };
        }
    }
}

fn read_all(fd: RawFd) -> String {
    let mut out = vec![];
    let mut buf = [0u8; 4096];
    loop {
        // SAFETY: reading into our buffer.
        let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
        if n <= 0 {
            break;
        }
        out.extend_from_slice(&buf[..n as usize]);
    }
    String::from_utf8_lossy(&out).trim().to_string()
}

/// Inputs of an FS-ONLY run, gathered by [`crate::run::run`].
pub struct FsOnly<'a> {
    /// The command line.
    pub args: &'a RunArgs,
    /// Host facts.
    pub facts: &'a HostFacts,
    /// The policy.
    pub policy: &'a Policy,
    /// Its translation (FULL's rules and masks, turned into this tier's view here).
    pub t: &'a Translation,
    /// The audit configuration.
    pub audit_cfg: Option<&'a vetto_broker::audit::AuditConfig>,
    /// The session id.
    pub session: &'a str,
    /// The user's runtime directory (checked out of the sandbox's reach): where a session
    /// with the broker keeps its approvals control socket.
    pub runtime_root: &'a Path,
    /// The phase timings, begun by `vetto run`.
    pub phases: crate::run::Phases,
    /// The project walk's listing cache, for the walk at the end.
    pub listings: vetto_bundle::listing::ListingCache,
}

/// Run the command in the FS-ONLY tier; returns its exit status.
pub fn run(r: FsOnly<'_>) -> Result<u8> {
    let FsOnly {
        args,
        facts,
        policy,
        t,
        audit_cfg,
        session,
        runtime_root,
        phases: mut ph,
        listings,
    } = r;
    if let Some(why) = network_refusal(t, args.git_ssh) {
        bail!("{why}");
    }
    let broker_plan = t.plan.network.broker.as_ref();
    // With the broker, a session directory for the approvals' control socket (and its id).
    let sess = match broker_plan {
        Some(_) => Some(crate::session::create(runtime_root)?),
        None => None,
    };
    let session_id: String = sess.as_ref().map_or(session, |s| s.id.as_str()).to_string();
    let session: &str = &session_id;
    // The session's audit writer opens the store and records `session_start` while the view
    // is built; its answer is collected before the command's process is forked (see
    // audit/writer.rs).
    let audit_pending = audit::start_writer(
        audit_cfg,
        session,
        || {
            audit::run_start(
                policy,
                facts.landlock_abi,
                &args.command,
                &facts.project,
                facts.uid,
                "FS-ONLY",
            )
        },
        &args.audit,
    )?;
    let net = match broker_plan {
        Some(_) => Some(crate::fsnet::prepare(&t.plan.network.listeners)?),
        None => None,
    };
    let temp_dir = std::env::temp_dir();
    sweep_stale(&temp_dir, facts.uid);
    sweep_stale(runtime_root, facts.uid);
    let tmp = PrivateTmp::create(&temp_dir, facts.uid)?;
    // A nested `vetto run` reads this sandbox's policy as its ceiling: a file the sandbox may
    // read, not write, outside its TMPDIR. In the runtime directory: where /tmp is a disk
    // file system, creating and removing a directory with a file there cost ~0.5 ms. Where
    // that directory cannot be written (this vetto runs nested in an FS-ONLY sandbox, whose
    // Landlock rules leave the runtime directory alone), in the temporary directory.
    let meta = PrivateTmp::create(runtime_root, facts.uid)
        .or_else(|_| PrivateTmp::create(&temp_dir, facts.uid))?;
    let parent_file = meta.0.join("parent-policy.json");
    std::fs::write(&parent_file, crate::nested::serialize(policy)?)
        .context("writing the policy for nested sandboxes")?;
    let view = vetto_bundle::fsonly::view(
        t,
        std::slice::from_ref(&tmp.0),
        &terminals(),
        std::slice::from_ref(&parent_file),
    );
    // Built here, on descriptors; the command's process only enforces it.
    let ruleset = vetto_hooks::fsview::build(&view)?;
    let seccomp = vetto_hooks::seccomp::compile(&vetto_bundle::fsonly::seccomp(
        &t.plan.seccomp,
        broker_plan.is_some(),
    ))?;
    let mut filters = vec![];
    if let Some(n) = &net {
        filters.push(Filter::NotifyConnect {
            program: vetto_hooks::notify::connect_filter()?,
            send_to: n.chan_child.as_raw_fd(),
        });
    }
    filters.push(Filter::DenyList(seccomp));
    ph.mark("view");

    let mut spec = t.spec.clone();
    crate::run::clamp_rlimits(&mut spec);
    let mut env: Vec<String> = spec["process"]["env"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| e.as_str())
        .filter(|e| !e.starts_with("TMPDIR="))
        .map(String::from)
        .collect();
    env.retain(|e| !e.starts_with(&format!("{}=", crate::nested::PARENT_POLICY_ENV)));
    env.push(format!("TMPDIR={}", tmp.0.display()));
    env.push(format!(
        "{}={}",
        crate::nested::PARENT_POLICY_ENV,
        parent_file.display()
    ));
    let cwd = spec["process"]["cwd"]
        .as_str()
        .map(PathBuf::from)
        .unwrap_or_else(|| facts.project.clone());

    let pidfd = vetto_hooks::process::pidfd_open(std::process::id() as libc::pid_t, 0)
        .map_err(|e| anyhow::anyhow!("PDEATHSIG: pidfd_open: {e}"))?;
    let tty = crate::pty::is_tty(0);
    let capabilities = match facts.uid {
        0 => Capabilities::DropAll,
        _ => Capabilities::DropHeld,
    };
    let (err_r, err_w) = crate::run::pipe()?;
    let child = Child {
        file: CString::new(args.command[0].as_bytes()).context("the command holds a NUL byte")?,
        argv: cstrings(&args.command)?,
        envp: cstrings(&env)?,
        cwd: CString::new(cwd.as_os_str().as_encoded_bytes()).context("working directory")?,
        rlimits: rlimits(&spec),
        ruleset: Some(ruleset),
        hardening: Hardening {
            no_new_privs: true,
            landlock: None,
            capabilities,
            parent_death: Some(Some(pidfd.as_raw_fd())),
            filters,
            ..Hardening::default()
        },
        tty,
        error_fd: err_w.as_raw_fd(),
        pidfd: pidfd.as_raw_fd(),
        notify_fd: net.as_ref().map(|n| n.chan_child.as_raw_fd()),
    };

    let nested = std::env::var_os(crate::nested::PARENT_POLICY_ENV).is_some();
    let mut pids_cg = match (&policy.limits.processes, facts.uid) {
        (Some(n), 0) => match crate::pids::PidsCgroup::create(session, n.value) {
            Ok(c) => Some(c),
            // Inside a vetto sandbox no cgroup can be made; the parent's limit (which this
            // policy cannot raise: see nested.rs) still holds every process of this one.
            Err(e) if nested => {
                if !args.quiet {
                    eprintln!("vetto: limits.processes: held by the parent sandbox's limit (a nested sandbox cannot make a pids cgroup: {e:#})");
                }
                None
            }
            Err(e) => return Err(e.context(
                "limits.processes: RLIMIT_NPROC does not bind a root caller, so a pids cgroup is needed and could not be made (the command did not run)",
            )),
        },
        _ => None,
    };
    // SAFETY: integer-only prctl: orphans of the sandbox are reparented to us.
    if unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) } != 0 {
        bail!(
            "FS-ONLY cleanup: PR_SET_CHILD_SUBREAPER: {}",
            std::io::Error::last_os_error()
        );
    }
    let mut handled: Vec<libc::c_int> = FORWARDED.to_vec();
    handled.push(libc::SIGCHLD);
    let sfd = process::block_into_signalfd(&handled, libc::SFD_CLOEXEC | libc::SFD_NONBLOCK)
        .context("supervisor: signalfd")?;

    let mut live = match audit_pending {
        Some(p) => Some(p.started().map_err(|e| {
            e.context("audit: the session cannot be recorded, so the command does not run")
        })?),
        None => None,
    };
    ph.mark("audit start");
    // The broker, before the command: it cannot start, the command does not run.
    let mut net = net;
    let broker = match (broker_plan, net.as_mut(), sess.as_ref()) {
        (Some(plan), Some(n), Some(sess)) => {
            let started = (|| -> Result<std::process::Child> {
                let spec = crate::sidecar::approvals_spec(
                    plan,
                    args.unattended,
                    crate::pty::is_tty(0),
                    format!("project {}", facts.project.display()),
                    vetto_broker::audit::user_dir().map(|d| d.join("approvals.db")),
                    session,
                    facts.uid,
                );
                let control = crate::sidecar::bind_control(&sess.dir)?;
                crate::sidecar::spawn(
                    plan,
                    &t.plan.network.listeners,
                    std::mem::take(&mut n.listeners),
                    crate::sidecar::HostSide {
                        published: vec![],
                        peers: n.peers_r.take(),
                    },
                    crate::sidecar::Lifetime::DieWithParent,
                    audit_cfg.map(|c| crate::sidecar::BrokerAudit {
                        config: c.clone(),
                        session: session.to_string(),
                    }),
                    Some((spec, Some(control))),
                )
            })();
            match started {
                Ok(c) => Some(c),
                Err(e) => {
                    crate::run::end_setup_failure(live.take(), format!("{e:#}"));
                    return Err(e);
                }
            }
        }
        _ => None,
    };
    if let Some(cg) = pids_cg.as_mut() {
        cg.enter()?;
    }
    // SAFETY: the supervisor is single-threaded here; the child runs only child_main, which
    // uses what was prepared above and leaves by execve or _exit.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        drop(err_r);
        child_main(child);
    }
    let fork_err = std::io::Error::last_os_error();
    if pid > 0 {
        // SAFETY: integer-only; as the child does itself, so neither order races.
        unsafe { libc::setpgid(pid, pid) };
    }
    if let Some(cg) = pids_cg.as_mut() {
        cg.leave()?;
    }
    drop(err_w);
    drop(child);
    ph.mark("container");
    let broker_pid = broker.as_ref().map(|b| b.id() as libc::pid_t);
    let writer_pid = live.as_ref().map(|l| l.pid());
    // Our own children beside the sandbox (spared by kill_all), and whether `supervise`
    // reaped them.
    let mut ours: Vec<(libc::pid_t, bool)> = broker_pid
        .into_iter()
        .chain(writer_pid)
        .map(|p| (p, false))
        .collect();
    let spare: Vec<libc::pid_t> = ours.iter().map(|(p, _)| *p).collect();
    // The sandbox's connect() listener, sent before its command runs; then answered here.
    let mut net_failed: Option<anyhow::Error> = None;
    if let Some(n) = net.take() {
        let crate::fsnet::Prepared {
            routes,
            peers_w,
            chan,
            chan_child,
            ..
        } = n;
        drop(chan_child);
        if pid > 0 {
            match crate::fsnet::receive(&chan) {
                Ok(l) => crate::fsnet::serve(l, routes, peers_w),
                Err(e) => {
                    net_failed = Some(e);
                    kill_all(Some(pid), &spare);
                }
            }
        }
    }
    if pid < 0 {
        crate::run::end_setup_failure(live.take(), format!("fork: {fork_err}"));
        bail!("fork: {fork_err}");
    }
    let deadline = t
        .plan
        .wall_clock_secs
        .map(|s| Instant::now() + Duration::from_secs(s));
    let net_ok = net_failed.is_none();
    // A sandbox that never sent its listener was killed and reaped above: nothing to wait for.
    let status = match net_failed {
        Some(_) => Outcome::Exited {
            code: 125,
            forwarded: false,
        },
        None => supervise(pid, sfd.as_raw_fd(), deadline, &mut ours),
    };
    let gone = |p: Option<libc::pid_t>| ours.iter().any(|(o, g)| Some(*o) == p && *g);
    let broker_gone = gone(broker_pid);
    if gone(writer_pid) {
        if let Some(l) = live.as_mut() {
            l.reaped_elsewhere();
        }
    }
    // A broker or writer reaped by `supervise` is no longer ours to spare: its pid may be
    // reused. The command's group only while its leader is unreaped (see `supervise`).
    let spare: Vec<libc::pid_t> = ours.iter().filter(|(_, g)| !g).map(|(p, _)| *p).collect();
    kill_all(net_ok.then_some(pid), &spare);
    if tty {
        // SAFETY: integer-only calls: take the terminal back for our own group (SIGTTOU
        // ignored for the call, as a background group must).
        unsafe {
            let old = libc::signal(libc::SIGTTOU, libc::SIG_IGN);
            libc::tcsetpgrp(0, libc::getpgrp());
            libc::signal(libc::SIGTTOU, old);
        }
    }
    let refused_forks = pids_cg.as_ref().and_then(|c| c.refused_forks());
    drop(pids_cg);
    // The broker records the connections still open, then exits: before the session's end.
    if let Some(b) = broker.filter(|_| !broker_gone) {
        crate::sidecar::stop(b);
    }
    ph.mark("session");
    let msg = read_all(err_r.as_raw_fd());
    // The command's own report of a failed setup comes first; else the supervisor's.
    let (status, msg) = match net_failed {
        Some(e) => (
            Outcome::Exited {
                code: 125,
                forwarded: false,
            },
            if msg.is_empty() {
                format!("{e:#}")
            } else {
                msg
            },
        ),
        None => (status, msg),
    };
    if let Some(l) = live.as_mut() {
        crate::run::record_limits(
            l,
            refused_forks,
            policy,
            matches!(status, Outcome::WallClock).then_some(t.plan.wall_clock_secs.unwrap_or(0)),
        );
    }
    let (code, reason, control) = match &status {
        Outcome::WallClock => (i32::from(EXIT_WALL_CLOCK), EndReason::WallClock, None),
        Outcome::Exited { code, .. } if !msg.is_empty() && *code == 125 => (
            i32::from(EXIT_SETUP),
            EndReason::SetupFailure,
            Some(msg.clone()),
        ),
        Outcome::Exited { code, forwarded } if *code > 128 => (
            *code,
            match forwarded {
                true => EndReason::Killed,
                false => EndReason::Signal,
            },
            None,
        ),
        Outcome::Exited { code, .. } => (*code, EndReason::Exit, None),
    };
    // The writer records the end while the handoff is checked; its answer (and the summary)
    // is collected before the status goes to the front.
    let mut ending = live.map(|l| {
        let signal = (code > 128 && reason != EndReason::SetupFailure).then_some(code - 128);
        l.finish(Some(code), signal, reason, control)
    });
    // (FS-ONLY has no review mode: run.rs refuses it before this tier is chosen.)
    crate::handoff::check_session(t, policy, facts, listings, session);
    ph.mark("handoff");
    if let Some(e) = ending.as_mut() {
        e.answer();
        ph.mark("audit end");
    }
    let code = match status {
        Outcome::WallClock => {
            eprintln!(
                "vetto: wall-clock limit of {} s reached: the sandbox was killed",
                t.plan.wall_clock_secs.unwrap_or(0)
            );
            EXIT_WALL_CLOCK
        }
        Outcome::Exited { code, .. } => match msg.is_empty() {
            true => code as u8,
            false if code == 126 || code == 127 => {
                eprintln!("vetto: {msg}");
                code as u8
            }
            false => {
                eprintln!("vetto: sandbox setup failed, the command did not run: {msg}");
                EXIT_SETUP
            }
        },
    };
    // Everything the caller waits for is done, as in FULL (run.rs): every process of the
    // sandbox killed and reaped (the reaper's kill(-1) of its Landlock domain, then
    // kill_all), the broker stopped, the record ended, the handoff checked, everything said.
    // The front exits with the status now; the private directories are removed after it
    // (a supervisor killed meanwhile leaves them to the next run's sweep_stale).
    ph.mark("status");
    crate::front::deliver(code);
    drop(sess);
    drop(tmp);
    drop(meta);
    ph.mark("teardown");
    // The writer, which exits after its answer, is reaped.
    drop(ending);
    Ok(code)
}
