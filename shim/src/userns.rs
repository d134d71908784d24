//! The supervisor's own user and mount namespace.
//!
//! Before it calls libcontainer, the supervisor moves itself into a user namespace that maps
//! 0 → the caller and a private mount namespace in which `/sys/fs/cgroup` is the unified
//! (cgroup2) hierarchy. Three things follow, root and rootless alike:
//! - libcontainer runs its rootless path (the same code for every caller), and the
//!   container's user namespace maps 0 → 0 of this one, i.e. → the caller on the host;
//! - libcontainer's cgroup manager sees a read-only cgroup v2 hierarchy (on this v1-hybrid
//!   host: the unified one) and tolerates the EROFS for the cgroup it cannot create, so no
//!   cgroup is created, joined or left behind (the attach costs 4–15 ms and is the main
//!   start-up cost); limits are rlimits (see docs/policy.md);
//! - nothing of the host's mount table is changed.
//!
//! `vetto run`'s user namespace is made ahead of time by `nsstage`'s helper and joined here
//! ([`enter_prepared`]); rootless `vetto-shim` makes only a mount namespace and calls
//! [`read_only_cgroup_view`].

use anyhow::{bail, Result};

/// The filesystem type (`statfs` f_type) at `path`.
pub(crate) fn fs_magic(path: &str) -> Option<i64> {
    let c = std::ffi::CString::new(path).ok()?;
    // SAFETY: statfs writes into a zeroed struct we own; the path is a valid C string.
    let mut s: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    (unsafe { libc::statfs(c.as_ptr(), &mut s) } == 0).then_some(s.f_type)
}

/// `statfs` magic of cgroup2.
pub(crate) const CGROUP2_MAGIC: i64 = 0x6367_7270;
/// `statfs` magic of tmpfs (the cgroup v1 / hybrid root).
pub(crate) const TMPFS_MAGIC: i64 = 0x0102_1994;

/// A plain bind (`MS_BIND`, not recursive) of `src` onto `dst`, in the caller's mount
/// namespace, which must be its private one.
pub(crate) fn bind(src: &std::ffi::CStr, dst: &std::ffi::CStr) -> std::io::Result<()> {
    // SAFETY: valid C strings; a bind mount inside the caller's private mount namespace.
    if unsafe {
        libc::mount(
            src.as_ptr(),
            dst.as_ptr(),
            std::ptr::null(),
            libc::MS_BIND,
            std::ptr::null(),
        )
    } != 0
    {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Bind `src` over `dst` read-only, keeping the flags the kernel locks in a user namespace.
/// Read-only, libcontainer's cgroup manager gets EROFS for the cgroup it would create and
/// leaves the container in the caller's cgroup: no cgroup is made or joined, for root and
/// rootless alike, and none can be left behind.
pub(crate) fn bind_read_only(src: &std::ffi::CStr, dst: &std::ffi::CStr) -> Result<()> {
    if let Err(e) = bind(src, dst) {
        bail!("mount namespace: binding {:?} read-only: {e}", dst);
    }
    // SAFETY: statvfs fills a zeroed struct we own.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::statvfs(dst.as_ptr(), &mut st) } != 0 {
        bail!(
            "mount namespace: statvfs of {:?}: {}",
            dst,
            std::io::Error::last_os_error()
        );
    }
    let mut flags = libc::MS_BIND | libc::MS_REMOUNT | libc::MS_RDONLY;
    for (st_flag, ms_flag) in [
        (libc::ST_NOSUID, libc::MS_NOSUID),
        (libc::ST_NODEV, libc::MS_NODEV),
        (libc::ST_NOEXEC, libc::MS_NOEXEC),
        (libc::ST_NOATIME, libc::MS_NOATIME),
        (libc::ST_NODIRATIME, libc::MS_NODIRATIME),
        (libc::ST_RELATIME, libc::MS_RELATIME),
    ] {
        if st.f_flag & st_flag != 0 {
            flags |= ms_flag;
        }
    }
    // SAFETY: valid C string; remounting our own bind read-only.
    if unsafe {
        libc::mount(
            std::ptr::null(),
            dst.as_ptr(),
            std::ptr::null(),
            flags,
            std::ptr::null(),
        )
    } != 0
    {
        bail!(
            "mount namespace: making {:?} read-only: {}",
            dst,
            std::io::Error::last_os_error()
        );
    }
    Ok(())
}

/// Enter the supervisor namespace that `nsstage` made ahead of time (U1: 0 → the caller,
/// setgroups denied), and make a private mount namespace owned by it with the read-only
/// cgroup view. Must be called while the process is single-threaded, with the helper reaped.
pub fn enter_prepared(ns: &crate::nsstage::Namespaces) -> Result<()> {
    ns.enter_outer()?;
    // SAFETY: unshare with a flag only; the process is single-threaded here.
    if unsafe { libc::unshare(libc::CLONE_NEWNS) } != 0 {
        let e = std::io::Error::last_os_error();
        bail!("mount namespace: cannot create one for the supervisor: {e}");
    }
    read_only_cgroup_view()
}

/// In the current (already private) mount namespace: make `/` private and show a read-only
/// cgroup2 hierarchy at `/sys/fs/cgroup`, so libcontainer creates no cgroup (it tolerates
/// EROFS). Used by `vetto run` and by rootless `vetto-shim`.
pub fn read_only_cgroup_view() -> Result<()> {
    let root = c"/";
    // SAFETY: valid C strings; MS_REC|MS_PRIVATE changes propagation of our own namespace only.
    if unsafe {
        libc::mount(
            std::ptr::null(),
            root.as_ptr(),
            std::ptr::null(),
            libc::MS_REC | libc::MS_PRIVATE,
            std::ptr::null(),
        )
    } != 0
    {
        bail!(
            "mount namespace: making / private: {}",
            std::io::Error::last_os_error()
        );
    }
    match fs_magic("/sys/fs/cgroup") {
        Some(CGROUP2_MAGIC) => bind_read_only(c"/sys/fs/cgroup", c"/sys/fs/cgroup")?,
        _ if fs_magic("/sys/fs/cgroup/unified") == Some(CGROUP2_MAGIC) => {
            bind_read_only(c"/sys/fs/cgroup/unified", c"/sys/fs/cgroup")?
        }
        _ => {
            // Pure cgroup v1: a private cgroup2 mount (needs its own cgroup namespace).
            // SAFETY: unshare with a flag only.
            let ok = unsafe { libc::unshare(libc::CLONE_NEWCGROUP) } == 0;
            let (src, dst, ty) = (c"cgroup2", c"/sys/fs/cgroup", c"cgroup2");
            let flags = libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC;
            // SAFETY: valid C strings; mounting inside our private mount namespace.
            let mounted = ok
                && unsafe {
                    libc::mount(
                        src.as_ptr(),
                        dst.as_ptr(),
                        ty.as_ptr(),
                        flags,
                        std::ptr::null(),
                    )
                } == 0;
            if !mounted {
                bail!(
                    "cgroups: no cgroup2 hierarchy available: {}",
                    std::io::Error::last_os_error()
                );
            }
        }
    }
    Ok(())
}
