//! `limits.processes` for a root caller: a pids cgroup.
//!
//! RLIMIT_NPROC is not enforced for host uid 0 (the kernel exempts `INIT_USER` in
//! `copy_process`), and a root caller's sandbox runs as host uid 0. So when the caller is root
//! and the policy limits processes, the sandbox is started inside a pids cgroup of its own
//! (`pids/vetto/<session>` on a cgroup v1 host, `vetto/<session>` with the pids controller on
//! cgroup v2) whose `pids.max` is the limit plus vetto's own PID 1. FULL's container init
//! moves itself in while libcontainer sets it up, before it forks anything
//! ([`join_through`], through a descriptor the supervisor opened: one move, where the
//! supervisor's own in and out around the creation were two, on the start's critical path);
//! FS-ONLY's supervisor thread enters it around its fork. So the init and everything it
//! starts are in it, the supervisor and the broker are not. If no such cgroup can be made or
//! joined, the command does not run.
//!
//! On cgroup v1 the thread moves itself through `tasks` with "0": a move of the calling
//! thread alone skips the global `cgroup_threadgroup_rwsem`, whose write side waits for an
//! RCU grace period when none is under way (~7 ms, up to 25 ms, on the reference machine,
//! for each of the two moves through `cgroup.procs`; ~0.25 ms through `tasks`). A child
//! inherits the cgroups of the thread that forks it. cgroup v2 moves whole processes only
//! (`cgroup.procs`).
//!
//! The descriptors are opened before the supervisor enters its user namespace (whose mount
//! namespace shows only a read-only cgroup2 view); writes through them still act as host root.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use crate::userns::{fs_magic, CGROUP2_MAGIC};

/// A session's pids cgroup, removed on drop.
pub struct PidsCgroup {
    dir: PathBuf,
    /// The parent directory (`vetto/`), to remove the session's cgroup through after the
    /// supervisor's mount namespace no longer shows the hierarchy.
    parent: File,
    procs: File,
    home_procs: File,
    /// `pids.events`, opened at creation: at the session's end the supervisor's mount
    /// namespace shows the cgroup2 view at /sys/fs/cgroup, where the v1 path is not.
    events: Option<File>,
    /// The supervisor itself is in the cgroup (between `enter` and `leave`).
    entered: bool,
}

fn hierarchy() -> Option<(PathBuf, bool)> {
    let v1 = Path::new("/sys/fs/cgroup/pids");
    if v1.join("pids.max").exists() || v1.join("cgroup.procs").exists() && !is_v2(v1) {
        return Some((v1.to_path_buf(), false));
    }
    let v2 = Path::new("/sys/fs/cgroup");
    if is_v2(v2) {
        let ctl = std::fs::read_to_string(v2.join("cgroup.controllers")).unwrap_or_default();
        if ctl.split_whitespace().any(|c| c == "pids") {
            return Some((v2.to_path_buf(), true));
        }
    }
    None
}

/// Is a pids controller available for [`PidsCgroup::create`]?
pub fn available() -> bool {
    hierarchy().is_some()
}

fn is_v2(p: &Path) -> bool {
    p.to_str()
        .and_then(fs_magic)
        .is_some_and(|m| m == CGROUP2_MAGIC)
}

/// The cgroup (relative to the hierarchy's root) this process is in.
fn own_cgroup(v2: bool) -> Result<String> {
    let text = std::fs::read_to_string("/proc/self/cgroup").context("reading /proc/self/cgroup")?;
    for line in text.lines() {
        let mut it = line.splitn(3, ':');
        let (_, ctl, path) = (it.next(), it.next().unwrap_or(""), it.next().unwrap_or(""));
        let hit = if v2 {
            ctl.is_empty()
        } else {
            ctl.split(',').any(|c| c == "pids")
        };
        if hit {
            return Ok(path.to_string());
        }
    }
    bail!("no pids cgroup in /proc/self/cgroup")
}

fn write_file(p: &Path, text: &str) -> Result<()> {
    let mut f = OpenOptions::new()
        .write(true)
        .open(p)
        .with_context(|| format!("opening {}", p.display()))?;
    f.write_all(text.as_bytes())
        .with_context(|| format!("writing {text:?} to {}", p.display()))
}

/// Remove session cgroups left by supervisors that were killed. A session's cgroup is named
/// after its session id, `vetto-<supervisor pid>-<random>`, and is empty between its creation
/// and the moment the init (or FS-ONLY's supervisor) enters it: so only a cgroup whose
/// supervisor process no longer exists is removed (and `rmdir` still refuses one that holds
/// a process). A reused pid only delays the removal.
fn sweep(parent: &Path) {
    let Ok(rd) = std::fs::read_dir(parent) else {
        return;
    };
    for e in rd.flatten() {
        let name = e.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix("vetto-"))
            .and_then(|n| n.split('-').next())
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if crate::session::running(pid) {
            continue;
        }
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            let _ = std::fs::remove_dir(e.path());
        }
    }
}

impl PidsCgroup {
    /// Create the cgroup for `session` with room for `limit` processes of the command (plus
    /// vetto's PID 1). Call before entering the supervisor's user namespace.
    pub fn create(session: &str, limit: u64) -> Result<Self> {
        let Some((root, v2)) = hierarchy() else {
            bail!("no pids cgroup controller is mounted (cgroup v1 pids or cgroup v2 with pids)");
        };
        let parent = root.join("vetto");
        match std::fs::DirBuilder::new().mode(0o755).create(&parent) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e).with_context(|| format!("creating {}", parent.display())),
        }
        if v2 {
            write_file(&root.join("cgroup.subtree_control"), "+pids")?;
            write_file(&parent.join("cgroup.subtree_control"), "+pids")?;
        }
        sweep(&parent);
        let dir = parent.join(session);
        std::fs::DirBuilder::new()
            .mode(0o755)
            .create(&dir)
            .with_context(|| format!("creating {}", dir.display()))?;
        let made = (|| -> Result<Self> {
            write_file(
                &dir.join("pids.max"),
                &(limit.saturating_add(1)).to_string(),
            )?;
            let home = root.join(own_cgroup(v2)?.trim_start_matches('/'));
            // The calling thread alone on v1 (see the module's notes); v2 moves processes.
            let move_file = match v2 {
                true => "cgroup.procs",
                false => "tasks",
            };
            let procs = OpenOptions::new()
                .write(true)
                .open(dir.join(move_file))
                .with_context(|| format!("opening the session cgroup's {move_file}"))?;
            let home_procs = OpenOptions::new()
                .write(true)
                .open(home.join(move_file))
                .with_context(|| format!("opening {}/{move_file}", home.display()))?;
            let parent =
                File::open(&parent).with_context(|| format!("opening {}", parent.display()))?;
            let events = File::open(dir.join("pids.events")).ok();
            Ok(PidsCgroup {
                dir: dir.clone(),
                parent,
                procs,
                home_procs,
                events,
                entered: false,
            })
        })();
        if made.is_err() {
            let _ = std::fs::remove_dir(&dir);
        }
        made
    }

    /// Move the calling thread (v1; the process on v2) into the cgroup: what it forks is born
    /// there.
    pub fn enter(&mut self) -> Result<()> {
        self.procs
            .write_all(b"0")
            .context("joining the session's pids cgroup")?;
        self.entered = true;
        Ok(())
    }

    /// The descriptor a process writes `0` to to move itself in ([`join_through`]): the
    /// container's init, cloned with it before it forks anything (FULL). Opened as host root
    /// before the supervisor entered its user namespace; the kernel checks the opener's
    /// credentials, so the init, root only in its own user namespace, can still use it. It
    /// is close-on-exec, and PID 1 closes it with the rest before the command starts.
    pub fn join_fd(&self) -> std::os::fd::RawFd {
        std::os::fd::AsRawFd::as_raw_fd(&self.procs)
    }

    /// How many forks `pids.max` refused (`pids.events`' `max` count), read through the
    /// descriptor opened at creation.
    pub fn refused_forks(&self) -> Option<u64> {
        use std::os::unix::fs::FileExt;
        let mut buf = [0u8; 256];
        let n = self.events.as_ref()?.read_at(&mut buf, 0).ok()?;
        let text = std::str::from_utf8(&buf[..n]).ok()?;
        text.lines()
            .find_map(|l| l.strip_prefix("max "))
            .and_then(|n| n.trim().parse().ok())
    }

    /// Move the calling thread (v1; the process on v2) back where it was.
    pub fn leave(&mut self) -> Result<()> {
        if !self.entered {
            return Ok(());
        }
        self.home_procs
            .write_all(b"0")
            .context("leaving the session's pids cgroup")?;
        self.entered = false;
        Ok(())
    }
}

/// Move the calling thread (v1; the process on v2) into the cgroup whose `tasks` (or
/// `cgroup.procs`) `fd` is: on v1 a move of the caller's own thread, the cheap one (see the
/// module's notes). In the container's init (`engine`'s `validate()`), which then forks
/// everything the session runs.
pub fn join_through(fd: std::os::fd::RawFd) -> Result<()> {
    // SAFETY: writing one byte from a static buffer to a descriptor the caller names.
    let n = unsafe { libc::write(fd, b"0".as_ptr().cast(), 1) };
    if n != 1 {
        bail!(
            "limits.processes: joining the session's pids cgroup: {}",
            std::io::Error::last_os_error()
        );
    }
    Ok(())
}

impl Drop for PidsCgroup {
    fn drop(&mut self) {
        let _ = self.leave();
        let Some(name) = self
            .dir
            .file_name()
            .and_then(|n| std::ffi::CString::new(n.as_encoded_bytes()).ok())
        else {
            return;
        };
        // The sandbox's processes are dead; the cgroup empties as the kernel finishes them.
        for _ in 0..50 {
            // SAFETY: a directory descriptor we own and a valid C string.
            let r = unsafe {
                libc::unlinkat(
                    std::os::fd::AsRawFd::as_raw_fd(&self.parent),
                    name.as_ptr(),
                    libc::AT_REMOVEDIR,
                )
            };
            if r == 0 {
                return;
            }
            match std::io::Error::last_os_error().raw_os_error() {
                Some(libc::EBUSY) => {}
                Some(libc::ENOENT) => return,
                _ => break,
            }
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        tracing::warn!(dir = %self.dir.display(), "pids cgroup still busy; the next start removes it");
    }
}
