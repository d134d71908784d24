//! The binary re-exec guard (CVE-2019-5736 class): before a command whose clones enter a
//! container, the runtime re-executes itself from a read-only mount of its own binary.

use super::OciError;

use std::ffi::CString;
use std::os::fd::AsRawFd;

use nix::fcntl::AtFlags;
use nix::mount::MsFlags;
use nix::sched::CloneFlags;
use nix::sys::statvfs::FsFlags;

/// Set in the environment of the re-executed runtime: never re-execute twice.
const SEALED_ENV: &str = "_VETTO_SHIM_READ_ONLY_EXE";

fn exe_on_read_only_mount() -> bool {
    nix::sys::statvfs::statvfs("/proc/self/exe")
        .is_ok_and(|st| st.flags().contains(FsFlags::ST_RDONLY))
}

/// CVE-2019-5736 class: while libcontainer's clone of this process runs inside a container
/// (the init before `execve`, an `exec`), a container process could keep `/proc/<pid>/exe`
/// and, once this runtime has exited, reopen it for writing and overwrite the host's binary.
/// Before `create`, `run` and `exec`, the runtime re-executes itself from a read-only mount of
/// its own binary, so that reopening fails with EROFS. No copy is made (runc copies itself
/// into a sealed memfd):
/// 1. a detached read-only clone of the binary's mount (`open_tree(OPEN_TREE_CLONE)` +
///    `mount_setattr(MOUNT_ATTR_RDONLY)`) and `execveat` from it: no namespace changes;
/// 2. where that is not permitted (a user namespace that does not own the mount
///    namespace), a private mount namespace (slave of the current one) with a read-only
///    bind of the binary, and `execv`.
pub(super) fn reexec_from_read_only_binary(args: &[String]) -> Result<(), OciError> {
    let fail = |what: &str, e: nix::Error| {
        OciError::Config(format!("sealing the runtime binary: {what}: {e}"))
    };
    if exe_on_read_only_mount() {
        std::env::remove_var(SEALED_ENV);
        return Ok(());
    }
    if std::env::var_os(SEALED_ENV).is_some() {
        return Err(OciError::Config(
            "sealing the runtime binary: re-executed, but its mount is still writable".into(),
        ));
    }
    let exe = std::fs::read_link("/proc/self/exe").map_err(|e| {
        OciError::Config(format!(
            "sealing the runtime binary: readlink /proc/self/exe: {e}"
        ))
    })?;
    let c_exe = CString::new(exe.as_os_str().as_encoded_bytes())
        .map_err(|_| OciError::Config("sealing the runtime binary: NUL in its path".into()))?;
    let argv: Vec<CString> = args
        .iter()
        .map(|a| CString::new(a.as_bytes()))
        .collect::<Result<_, _>>()
        .map_err(|_| OciError::Config("NUL byte in an argument".into()))?;
    let mut env: Vec<CString> = std::env::vars_os()
        .filter_map(|(k, v)| {
            let mut kv = k.into_encoded_bytes();
            kv.push(b'=');
            kv.extend(v.into_encoded_bytes());
            CString::new(kv).ok()
        })
        .collect();
    env.push(CString::new(format!("{SEALED_ENV}=1")).unwrap_or_default());

    // 1. Detached read-only clone (where it fails, step 2 follows).
    use vetto_hooks::mounts::{clone_tree, set_attr, MOUNT_ATTR_RDONLY};
    if let Ok(tree) = clone_tree(libc::AT_FDCWD, &c_exe, false, &exe) {
        if set_attr(&tree, MOUNT_ATTR_RDONLY, false, &exe).is_ok() {
            // Returns only on failure.
            let _ = nix::unistd::execveat(
                Some(tree.as_raw_fd()),
                c"",
                &argv,
                &env,
                AtFlags::AT_EMPTY_PATH,
            );
        }
    }
    // 2. A private mount namespace with a read-only bind.
    nix::sched::unshare(CloneFlags::CLONE_NEWNS).map_err(|e| fail("unshare(CLONE_NEWNS)", e))?;
    nix::mount::mount(
        None::<&str>,
        "/",
        None::<&str>,
        MsFlags::MS_REC | MsFlags::MS_SLAVE,
        None::<&str>,
    )
    .map_err(|e| fail("making / a slave mount", e))?;
    crate::userns::bind_read_only(&c_exe, &c_exe)
        .map_err(|e| OciError::Config(format!("sealing the runtime binary: {e:#}")))?;
    let e = match nix::unistd::execve(&c_exe, &argv, &env) {
        Ok(never) => match never {},
        Err(e) => e,
    };
    Err(fail(&format!("re-executing {}", exe.display()), e))
}
