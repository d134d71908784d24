//! Test support: run a check in a forked child so that the restrictions it applies (Landlock,
//! seccomp, capability drops, namespaces) never reach the test harness itself.

use std::fs::File;
use std::io::Read;
use std::os::fd::FromRawFd;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

/// How the child ended.
#[derive(Debug)]
pub enum Outcome {
    /// `_exit(code)`; `message` is what the check reported (empty on success).
    Exited { code: i32, message: String },
    /// Killed by this signal.
    Signaled(i32),
}

/// Forks; the child runs `check` and `_exit`s with 0 on `Ok`, 1 on `Err` (the message goes
/// back through a pipe), 2 on panic. The parent waits and returns the outcome.
///
/// The child must not touch locks other test threads may hold (no `std::env`, no stdout).
pub fn run_in_child<F: FnOnce() -> Result<(), String>>(check: F) -> Outcome {
    let mut fds = [0i32; 2];
    // SAFETY: pipe2 writes two file descriptors into the two-element array.
    let rc = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) };
    assert_eq!(rc, 0, "pipe2: {}", std::io::Error::last_os_error());
    let [read_fd, write_fd] = fds;
    // SAFETY: the child only runs `check`, writes to the pipe and calls `_exit`; it never returns
    // into the test harness.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
    if pid == 0 {
        // SAFETY: read_fd is ours and unused in the child.
        unsafe { libc::close(read_fd) };
        let (code, message) = match catch_unwind(AssertUnwindSafe(check)) {
            Ok(Ok(())) => (0, String::new()),
            Ok(Err(m)) => (1, m),
            Err(p) => {
                let m = p
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                (2, format!("panic: {m}"))
            }
        };
        // Raw write, no File: the check may have closed write_fd (close_fds_above), and
        // dropping a File whose descriptor is already closed aborts.
        let mut rest = message.as_bytes();
        while !rest.is_empty() {
            // SAFETY: `rest` is a valid buffer of `rest.len()` bytes.
            let n = unsafe { libc::write(write_fd, rest.as_ptr().cast(), rest.len()) };
            let Ok(n @ 1..) = usize::try_from(n) else {
                break;
            };
            rest = rest.get(n..).unwrap_or_default();
        }
        // SAFETY: terminates the child without running the harness's atexit handlers.
        unsafe { libc::_exit(code) };
    }
    // SAFETY: write_fd belongs to the child now; the parent closes its copy.
    unsafe { libc::close(write_fd) };
    // SAFETY: read_fd is the open read end of the pipe, owned by this File from now on.
    let mut r = unsafe { File::from_raw_fd(read_fd) };
    let mut message = String::new();
    let _ = r.read_to_string(&mut message);
    let mut status = 0;
    loop {
        // SAFETY: waits for our own child; status is a valid out pointer.
        let w = unsafe { libc::waitpid(pid, &mut status, 0) };
        if w == pid {
            break;
        }
        let e = std::io::Error::last_os_error();
        assert_eq!(e.raw_os_error(), Some(libc::EINTR), "waitpid: {e}");
    }
    if libc::WIFSIGNALED(status) {
        Outcome::Signaled(libc::WTERMSIG(status))
    } else {
        Outcome::Exited {
            code: libc::WEXITSTATUS(status),
            message,
        }
    }
}

/// [`run_in_child`], asserting that the check succeeded.
pub fn in_child<F: FnOnce() -> Result<(), String>>(check: F) {
    match run_in_child(check) {
        Outcome::Exited { code: 0, .. } => {}
        Outcome::Exited { code, message } => panic!("child check failed ({code}): {message}"),
        Outcome::Signaled(sig) => panic!("child killed by signal {sig}"),
    }
}

/// `errno` of the last failed libc call.
pub fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// Checks that a raw libc return value is -1 with `expected` errno.
pub fn expect_errno(what: &str, ret: i64, expected: i32) -> Result<(), String> {
    let e = errno();
    if ret == -1 && e == expected {
        Ok(())
    } else {
        Err(format!(
            "{what}: expected errno {expected} ({}), got ret {ret} errno {e} ({})",
            std::io::Error::from_raw_os_error(expected),
            std::io::Error::from_raw_os_error(e)
        ))
    }
}

/// A fresh directory under /tmp, removed on drop (by the parent).
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> Self {
        static N: AtomicU32 = AtomicU32::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let p = std::env::temp_dir().join(format!(
            "vetto-hooks-{tag}-{}-{n}-{nanos}",
            std::process::id()
        ));
        std::fs::create_dir_all(&p).expect("create temp dir");
        TempDir(p)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Enters a new user and network namespace, mapping the current uid/gid to root inside.
/// Must be called in a single-threaded process (a forked child).
pub fn enter_user_and_net_ns() -> Result<(), String> {
    // SAFETY: plain syscalls without pointers.
    let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
    // SAFETY: unshare takes only flags; the caller is single-threaded.
    if unsafe { libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNET) } != 0 {
        return Err(format!("unshare: {}", std::io::Error::last_os_error()));
    }
    let w = |p: &str, s: String| std::fs::write(p, s).map_err(|e| format!("write {p}: {e}"));
    w("/proc/self/uid_map", format!("0 {uid} 1\n"))?;
    w("/proc/self/setgroups", "deny\n".to_string())?;
    w("/proc/self/gid_map", format!("0 {gid} 1\n"))?;
    Ok(())
}
