//! Showing the caller's own uid/gid inside the sandbox.
//!
//! libcontainer needs uid 0 mapped while it sets the container up, so the container's user
//! namespace maps 0 → the caller. Right before Landlock, the init creates one more (nested)
//! user namespace that maps the caller's uid → that 0, and switches to it: the command then
//! runs as the caller's uid, files it creates are the caller's on the host, and it holds no
//! capability in any namespace (the bounding set is emptied while that is still possible).

use std::io::Write;

/// Errors of the identity switch.
#[derive(Debug, thiserror::Error)]
pub enum IdentityError {
    /// A step failed.
    #[error("identity switch to uid {uid}: {step}: {source}")]
    Step {
        /// The uid.
        uid: u32,
        /// Which step.
        step: &'static str,
        /// The OS error.
        source: std::io::Error,
    },
}

fn last_err() -> std::io::Error {
    std::io::Error::last_os_error()
}

fn write_file(path: &str, text: &str) -> std::io::Result<()> {
    let mut f = std::fs::OpenOptions::new().write(true).open(path)?;
    f.write_all(text.as_bytes())
}

/// Switch to `uid`/`gid` through a nested user namespace mapping them to the current 0.
/// Must run as uid 0 of the container's user namespace with CAP_SETFCAP (to map uid 0 of the
/// parent namespace) and before Landlock. Does nothing for uid 0.
pub fn switch_to(uid: u32, gid: u32) -> Result<(), IdentityError> {
    if uid == 0 && gid == 0 {
        return Ok(());
    }
    let step = |step: &'static str| {
        move |source: std::io::Error| IdentityError::Step { uid, step, source }
    };
    // libcontainer leaves the init non-dumpable; /proc/self/{setgroups,uid_map} are then
    // owned by the real root and not writable.
    // SAFETY: integer-only prctl.
    if unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 1, 0, 0, 0) } != 0 {
        return Err(step("PR_SET_DUMPABLE")(last_err()));
    }
    // SAFETY: unshare with a flag only; the init is single-threaded.
    if unsafe { libc::unshare(libc::CLONE_NEWUSER) } != 0 {
        return Err(step("unshare(CLONE_NEWUSER)")(last_err()));
    }
    write_file("/proc/self/setgroups", "deny").map_err(step("write setgroups"))?;
    write_file("/proc/self/uid_map", &format!("{uid} 0 1\n")).map_err(step("write uid_map"))?;
    write_file("/proc/self/gid_map", &format!("{gid} 0 1\n")).map_err(step("write gid_map"))?;
    // SAFETY: plain id syscalls; the init is single-threaded so there is no setxid broadcast.
    if unsafe { libc::setresgid(gid, gid, gid) } != 0 {
        return Err(step("setresgid")(last_err()));
    }
    // SAFETY: as above. The uid is already `uid` as seen from the new namespace, so this
    // clears no capability: the init drops them all right after Landlock.
    if unsafe { libc::setresuid(uid, uid, uid) } != 0 {
        return Err(step("setresuid")(last_err()));
    }
    Ok(())
}
