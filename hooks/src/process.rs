//! Process attributes the init resets before running the command: `no_new_privs`,
//! capabilities, inherited file descriptors, signal dispositions.
//!
//! None of these functions depends on `/proc` being readable, because they may run after
//! Landlock (which normally does not grant `/proc`); [`read_caps`] is the exception and is meant
//! for tests and the doctor.

use std::io;

use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;
use thiserror::Error;

/// Process-attribute failures.
#[derive(Debug, Error)]
pub enum ProcessError {
    /// The capability sets could not be read back.
    #[error("reading back the capability sets: {0}")]
    CapsUnreadable(String),
    /// A syscall failed.
    #[error("{call}: {source}")]
    Sys {
        /// Which call.
        call: &'static str,
        /// The OS error.
        source: io::Error,
    },
    /// After dropping, some capability is still there.
    #[error("capabilities remain after dropping them: effective {effective:#x}, permitted {permitted:#x}, inheritable {inheritable:#x}")]
    CapsRemain {
        /// Effective set.
        effective: u64,
        /// Permitted set.
        permitted: u64,
        /// Inheritable set.
        inheritable: u64,
    },
    /// `no_new_privs` did not stick.
    #[error("no_new_privs is not set after PR_SET_NO_NEW_PRIVS")]
    NoNewPrivsNotSet,
    /// `/proc/self/status` could not be read or parsed.
    #[error("/proc/self/status: {0}")]
    Status(String),
}

fn sys(call: &'static str) -> ProcessError {
    ProcessError::Sys {
        call,
        source: io::Error::last_os_error(),
    }
}

/// `CAP_SETPCAP`: needed to change securebits and the bounding set.
const CAP_SETPCAP: u32 = 8;
/// `_LINUX_CAPABILITY_VERSION_3`: two 32-bit words per set.
const CAPABILITY_VERSION_3: u32 = 0x2008_0522;

/// Securebits locked by [`drop_all_capabilities`]: root gets no capabilities on exec or from
/// uid changes, ambient capabilities cannot be raised, and `KEEP_CAPS` stays off.
pub const SECUREBITS: libc::c_int = libc::SECBIT_NOROOT
    | libc::SECBIT_NOROOT_LOCKED
    | libc::SECBIT_NO_SETUID_FIXUP
    | libc::SECBIT_NO_SETUID_FIXUP_LOCKED
    | libc::SECBIT_KEEP_CAPS_LOCKED
    | libc::SECBIT_NO_CAP_AMBIENT_RAISE
    | libc::SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED;

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: libc::c_int,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

/// The calling thread's (effective, permitted, inheritable) sets, from `capget`.
fn capget() -> Result<(u64, u64, u64), ProcessError> {
    let mut header = CapHeader {
        version: CAPABILITY_VERSION_3,
        pid: 0,
    };
    let mut data = [CapData::default(); 2];
    // SAFETY: version 3 makes the kernel write exactly two `CapData` into `data`.
    let rc = unsafe { libc::syscall(libc::SYS_capget, &mut header, data.as_mut_ptr()) };
    if rc != 0 {
        return Err(sys("capget"));
    }
    let join = |lo: u32, hi: u32| u64::from(lo) | (u64::from(hi) << 32);
    Ok((
        join(data[0].effective, data[1].effective),
        join(data[0].permitted, data[1].permitted),
        join(data[0].inheritable, data[1].inheritable),
    ))
}

/// Sets `no_new_privs` (never cleared again: setuid bits and file capabilities stop granting
/// privileges on exec). Required before seccomp and Landlock for an unprivileged process.
pub fn set_no_new_privs() -> Result<(), ProcessError> {
    // SAFETY: PR_SET_NO_NEW_PRIVS takes integer arguments only.
    if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
        return Err(sys("prctl(PR_SET_NO_NEW_PRIVS)"));
    }
    // SAFETY: PR_GET_NO_NEW_PRIVS takes integer arguments only.
    match unsafe { libc::prctl(libc::PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) } {
        1 => Ok(()),
        _ => Err(ProcessError::NoNewPrivsNotSet),
    }
}

/// The highest capability number the kernel knows: `/proc/sys/kernel/cap_last_cap`, or, if
/// `/proc` is unreadable, the last one `PR_CAPBSET_READ` accepts.
pub fn last_cap() -> u32 {
    std::fs::read_to_string("/proc/sys/kernel/cap_last_cap")
        .ok()
        .and_then(|s| s.trim().parse::<u32>().ok())
        .unwrap_or_else(last_cap_probed)
}

/// The last capability `PR_CAPBSET_READ` accepts (EINVAL past the kernel's last one).
fn last_cap_probed() -> u32 {
    let mut last = 0;
    for cap in 0..64u32 {
        // SAFETY: PR_CAPBSET_READ takes integer arguments only; EINVAL past the last cap.
        if unsafe { libc::prctl(libc::PR_CAPBSET_READ, libc::c_ulong::from(cap), 0, 0, 0) } < 0 {
            break;
        }
        last = cap;
    }
    last
}

/// Drops from the bounding set every capability not in `keep` (a bit mask). Needs
/// `CAP_SETPCAP`.
fn drop_bounding_except(keep: u64) -> Result<(), ProcessError> {
    for cap in 0..=last_cap() {
        if keep & (1u64 << cap) != 0 {
            continue;
        }
        let cap = libc::c_ulong::from(cap);
        // SAFETY: PR_CAPBSET_READ takes integer arguments only.
        match unsafe { libc::prctl(libc::PR_CAPBSET_READ, cap, 0, 0, 0) } {
            0 => continue,
            1 => {}
            _ => return Err(sys("prctl(PR_CAPBSET_READ)")),
        }
        // SAFETY: PR_CAPBSET_DROP takes integer arguments only.
        if unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) } != 0 {
            return Err(sys("prctl(PR_CAPBSET_DROP)"));
        }
    }
    Ok(())
}

/// What [`drop_all_capabilities`] could do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CapsDropped {
    /// [`SECUREBITS`] are set and locked. Needs `CAP_SETPCAP`.
    pub securebits_locked: bool,
    /// The bounding set is empty. Needs `CAP_SETPCAP`; without it, `no_new_privs` is what keeps
    /// exec from granting capabilities.
    pub bounding_cleared: bool,
}

/// Drops every capability of the calling thread for good.
///
/// With `CAP_SETPCAP` (the sandbox's root, in its user namespace): locks [`SECUREBITS`] and
/// empties the bounding set; any failure there is an error. Without it (an unprivileged
/// process) those two steps are skipped, and reported in [`CapsDropped`]. In both cases it
/// clears the ambient set and sets effective, permitted and inheritable to zero, then checks
/// with `capget` that nothing remains.
pub fn drop_all_capabilities() -> Result<CapsDropped, ProcessError> {
    let (effective, _, _) = capget()?;
    let can_setpcap = effective & (1 << CAP_SETPCAP) != 0;
    let mut dropped = CapsDropped {
        securebits_locked: false,
        bounding_cleared: false,
    };

    if can_setpcap {
        // SAFETY: PR_GET_SECUREBITS takes integer arguments only.
        let current = unsafe { libc::prctl(libc::PR_GET_SECUREBITS, 0, 0, 0, 0) };
        if current < 0 {
            return Err(sys("prctl(PR_GET_SECUREBITS)"));
        }
        if current & SECUREBITS != SECUREBITS {
            let bits = libc::c_ulong::try_from(current | SECUREBITS).unwrap_or_default();
            // SAFETY: PR_SET_SECUREBITS takes integer arguments only.
            if unsafe { libc::prctl(libc::PR_SET_SECUREBITS, bits, 0, 0, 0) } != 0 {
                return Err(sys("prctl(PR_SET_SECUREBITS)"));
            }
        }
        dropped.securebits_locked = true;

        drop_bounding_except(0)?;
        dropped.bounding_cleared = true;
    }

    // SAFETY: PR_CAP_AMBIENT_CLEAR_ALL takes integer arguments only.
    let rc = unsafe {
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::c_ulong::try_from(libc::PR_CAP_AMBIENT_CLEAR_ALL).unwrap_or_default(),
            0,
            0,
            0,
        )
    };
    // EINVAL: a kernel older than 4.3 has no ambient set, so nothing to clear.
    if rc != 0 && io::Error::last_os_error().raw_os_error() != Some(libc::EINVAL) {
        return Err(sys("prctl(PR_CAP_AMBIENT_CLEAR_ALL)"));
    }

    let mut header = CapHeader {
        version: CAPABILITY_VERSION_3,
        pid: 0,
    };
    let data = [CapData::default(); 2];
    // SAFETY: version 3 makes the kernel read exactly two `CapData` from `data`.
    if unsafe { libc::syscall(libc::SYS_capset, &mut header, data.as_ptr()) } != 0 {
        return Err(sys("capset"));
    }
    match capget()? {
        (0, 0, 0) => Ok(dropped),
        (effective, permitted, inheritable) => Err(ProcessError::CapsRemain {
            effective,
            permitted,
            inheritable,
        }),
    }
}

/// Capability sets as bit masks (bit N = capability N).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct CapSets {
    /// Bounding set.
    pub bounding: u64,
    /// Effective set.
    pub effective: u64,
    /// Permitted set.
    pub permitted: u64,
    /// Inheritable set.
    pub inheritable: u64,
}

/// The bit of a capability named as in OCI (`"CAP_SYS_ADMIN"`); `None` if unknown.
pub fn cap_bit(name: &str) -> Option<u64> {
    let short = name.strip_prefix("CAP_")?;
    CAP_NAMES
        .iter()
        .position(|n| *n == short)
        .map(|i| 1u64 << i)
}

/// Capability names without `CAP_`, indexed by number (Linux 6.x).
pub const CAP_NAMES: &[&str] = &[
    "CHOWN",
    "DAC_OVERRIDE",
    "DAC_READ_SEARCH",
    "FOWNER",
    "FSETID",
    "KILL",
    "SETGID",
    "SETUID",
    "SETPCAP",
    "LINUX_IMMUTABLE",
    "NET_BIND_SERVICE",
    "NET_BROADCAST",
    "NET_ADMIN",
    "NET_RAW",
    "IPC_LOCK",
    "IPC_OWNER",
    "SYS_MODULE",
    "SYS_RAWIO",
    "SYS_CHROOT",
    "SYS_PTRACE",
    "SYS_PACCT",
    "SYS_ADMIN",
    "SYS_BOOT",
    "SYS_NICE",
    "SYS_RESOURCE",
    "SYS_TIME",
    "SYS_TTY_CONFIG",
    "MKNOD",
    "LEASE",
    "AUDIT_WRITE",
    "AUDIT_CONTROL",
    "SETFCAP",
    "MAC_OVERRIDE",
    "MAC_ADMIN",
    "SYSLOG",
    "WAKE_ALARM",
    "BLOCK_SUSPEND",
    "AUDIT_READ",
    "PERFMON",
    "BPF",
    "CHECKPOINT_RESTORE",
];

/// Narrows the calling thread's capabilities to `target`: drops from the bounding set what
/// `target.bounding` lacks (needs `CAP_SETPCAP`, so that is done first), then sets effective,
/// permitted and inheritable with `capset`. Only narrows: a capability the thread lacks is not
/// gained. The ambient set is left alone (the kernel clears ambient capabilities that leave
/// the permitted or inheritable set).
pub fn set_capabilities(target: &CapSets) -> Result<(), ProcessError> {
    drop_bounding_except(target.bounding)?;
    let (eff, perm, inh) = capget()?;
    let (eff, perm, inh) = (
        eff & target.effective,
        perm & target.permitted,
        inh & target.inheritable,
    );
    let mut header = CapHeader {
        version: CAPABILITY_VERSION_3,
        pid: 0,
    };
    let data = [
        CapData {
            effective: eff as u32,
            permitted: perm as u32,
            inheritable: inh as u32,
        },
        CapData {
            effective: (eff >> 32) as u32,
            permitted: (perm >> 32) as u32,
            inheritable: (inh >> 32) as u32,
        },
    ];
    // SAFETY: version 3 makes the kernel read exactly two `CapData` from `data`.
    if unsafe { libc::syscall(libc::SYS_capset, &mut header, data.as_ptr()) } != 0 {
        return Err(sys("capset"));
    }
    // Read back from the kernel's own report: a seccomp filter could have answered "success"
    // (errno 0) to capset or prctl without anything happening, and to capget as well.
    let status = std::fs::read_to_string("/proc/thread-self/status")
        .map_err(|e| ProcessError::CapsUnreadable(e.to_string()))?;
    let field = |name: &str| -> Result<u64, ProcessError> {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
            .ok_or_else(|| {
                ProcessError::CapsUnreadable(format!("no {name} in /proc/thread-self/status"))
            })
    };
    let (e2, p2, i2, bnd) = (
        field("CapEff:")?,
        field("CapPrm:")?,
        field("CapInh:")?,
        field("CapBnd:")?,
    );
    if e2 & !eff != 0 || p2 & !perm != 0 || i2 & !inh != 0 || bnd & !target.bounding != 0 {
        return Err(ProcessError::CapsRemain {
            effective: e2,
            permitted: p2,
            inheritable: i2,
        });
    }
    Ok(())
}

/// The page-aligned ranges of the main program's executable, non-writable `PT_LOAD` segments,
/// from its program headers (`AT_PHDR`, `AT_PHNUM`; the load bias from `PT_PHDR`). Rounded
/// inwards, so no range covers a page that another segment shares. Empty when the headers
/// cannot be read this way (a program without `PT_PHDR`), or when the program has text
/// relocations (`DT_TEXTREL`, `DF_TEXTREL`): then its code pages hold private changes.
pub fn program_code_ranges() -> Vec<(usize, usize)> {
    // SAFETY: getauxval reads the auxiliary vector the kernel gave the process.
    let (phdr, phnum) = unsafe {
        (
            libc::getauxval(libc::AT_PHDR) as usize,
            libc::getauxval(libc::AT_PHNUM) as usize,
        )
    };
    if phdr == 0 || phnum == 0 {
        return vec![];
    }
    // SAFETY: AT_PHDR and AT_PHNUM describe the main program's program headers, which the
    // kernel mapped with the program and which stay mapped, unchanged, for its lifetime.
    let headers = unsafe { std::slice::from_raw_parts(phdr as *const libc::Elf64_Phdr, phnum) };
    let Some(bias) = headers
        .iter()
        .find(|h| h.p_type == libc::PT_PHDR)
        .and_then(|h| phdr.checked_sub(h.p_vaddr as usize))
    else {
        return vec![];
    };
    if has_text_relocations(headers, bias) {
        return vec![];
    }
    // SAFETY: sysconf has no memory arguments.
    let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096);
    headers
        .iter()
        .filter(|h| {
            h.p_type == libc::PT_LOAD && h.p_flags & libc::PF_X != 0 && h.p_flags & libc::PF_W == 0
        })
        .filter_map(|h| {
            let start = bias.checked_add(h.p_vaddr as usize)?;
            let end = start.checked_add(h.p_memsz as usize)?;
            let (start, end) = (
                start.checked_add(page - 1)? / page * page,
                end / page * page,
            );
            (end > start).then_some((start, end - start))
        })
        .collect()
}

/// Does the program's dynamic section ask for text relocations (the loader writes into its
/// code pages, which then are private copies)? `true` when it cannot be read.
fn has_text_relocations(headers: &[libc::Elf64_Phdr], bias: usize) -> bool {
    /// An `Elf64_Dyn`: tag and value.
    #[repr(C)]
    struct Dyn {
        tag: i64,
        val: u64,
    }
    const DT_NULL: i64 = 0;
    const DT_TEXTREL: i64 = 22;
    const DT_FLAGS: i64 = 30;
    const DF_TEXTREL: u64 = 0x4;
    let Some(dynamic) = headers.iter().find(|h| h.p_type == libc::PT_DYNAMIC) else {
        // A static program: nothing relocates its code at run time.
        return false;
    };
    let Some(addr) = bias.checked_add(dynamic.p_vaddr as usize) else {
        return true;
    };
    let n = dynamic.p_memsz as usize / std::mem::size_of::<Dyn>();
    if addr == 0 || addr % std::mem::align_of::<Dyn>() != 0 {
        return true;
    }
    // SAFETY: PT_DYNAMIC lies within a loaded segment of the program (the loader read it
    // there to link us), aligned as checked; its `p_memsz` bytes stay mapped for the
    // program's lifetime and are only read here.
    let entries = unsafe { std::slice::from_raw_parts(addr as *const Dyn, n) };
    entries
        .iter()
        .take_while(|d| d.tag != DT_NULL)
        .any(|d| d.tag == DT_TEXTREL || (d.tag == DT_FLAGS && d.val & DF_TEXTREL != 0))
}

/// Drop this process's page-table entries for the main program's code (see
/// [`program_code_ranges`]): `madvise(MADV_DONTNEED)` on a read-only private file mapping
/// only unmaps pages, which fault back in from the same file when run again. PID 1 calls it
/// once the command is forked: the set-up mapped megabytes of the image that PID 1 never runs
/// again, and unmapping them is most of what its exit costs, on the session's exit path (the
/// supervisor waits for that exit). Done here, it overlaps the command's start instead.
/// Returns the bytes dropped.
pub fn drop_code_mappings() -> Result<usize, ProcessError> {
    let mut dropped = 0;
    for (start, len) in program_code_ranges() {
        // SAFETY: the range lies within the main program's executable, non-writable load
        // segment (page-aligned inwards), in a program without text relocations: a private
        // file mapping whose pages hold no private changes (a debugger's breakpoint would be
        // one, and would be lost: harmless), so MADV_DONTNEED only discards page-table
        // entries and later accesses fault the same bytes in again from the file the mapping
        // holds open.
        if unsafe { libc::madvise(start as *mut libc::c_void, len, libc::MADV_DONTNEED) } != 0 {
            return Err(sys("madvise"));
        }
        dropped += len;
    }
    Ok(dropped)
}

/// Closes every file descriptor above 2 except `keep` (`close_range` between them).
pub fn close_all_but(keep: &[libc::c_int]) -> Result<(), ProcessError> {
    let mut keep: Vec<libc::c_uint> = keep
        .iter()
        .filter_map(|k| libc::c_uint::try_from(*k).ok())
        .collect();
    keep.sort_unstable();
    let mut from: libc::c_uint = 3;
    for k in keep.into_iter().chain([libc::c_uint::MAX]) {
        if k > from {
            // SAFETY: close_range takes integers; it closes only this process's descriptors.
            if unsafe { libc::syscall(libc::SYS_close_range, from, k - 1, 0) } != 0 {
                return Err(sys("close_range"));
            }
        }
        from = from.max(k.saturating_add(1));
    }
    Ok(())
}

/// Closes every file descriptor above `fd` (`close_range`, or `/proc/self/fd` on kernels
/// before 5.9).
pub fn close_fds_above(fd: libc::c_int) -> Result<(), ProcessError> {
    let first = libc::c_uint::try_from(fd.saturating_add(1)).unwrap_or(0);
    // SAFETY: close_range takes integers only; it closes descriptors nobody else uses here.
    let rc = unsafe { libc::syscall(libc::SYS_close_range, first, libc::c_uint::MAX, 0) };
    if rc == 0 {
        return Ok(());
    }
    match io::Error::last_os_error().raw_os_error() {
        Some(libc::ENOSYS) | Some(libc::EINVAL) => close_fds_above_by_listing(fd),
        _ => Err(sys("close_range")),
    }
}

/// The `/proc/self/fd` fallback of [`close_fds_above`].
fn close_fds_above_by_listing(fd: libc::c_int) -> Result<(), ProcessError> {
    let io_err = |source| ProcessError::Sys {
        call: "read /proc/self/fd",
        source,
    };
    // Collect first: the directory stream holds a descriptor of its own until dropped.
    let fds: Vec<libc::c_int> = std::fs::read_dir("/proc/self/fd")
        .map_err(io_err)?
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .filter(|&n| n > fd)
        .collect();
    for n in fds {
        // SAFETY: closing a descriptor number; EBADF (the listing's own, now closed) is ignored.
        if unsafe { libc::close(n) } != 0
            && io::Error::last_os_error().raw_os_error() != Some(libc::EBADF)
        {
            return Err(sys("close"));
        }
    }
    Ok(())
}

/// Every signal to `SIG_DFL` (except `SIGKILL`/`SIGSTOP`, which cannot change) and an empty
/// signal mask. Ignored signals and the mask survive `execve`, so this is for right before it.
///
/// The real-time signals libc reserves for itself (32 and 33 with glibc, up to 34 with musl)
/// are refused by libc's `sigaction`; they are reset with the raw syscall, because an ignored
/// signal 32 inherited from whoever started us is common and would reach the command.
pub fn reset_signal_dispositions() -> Result<(), ProcessError> {
    let rt_min = libc::SIGRTMIN();
    for sig in 32..rt_min {
        // Kernel `struct sigaction` (handler, flags, restorer, mask: 4 words on x86_64 and
        // aarch64); all zero is SIG_DFL with no flags and an empty mask.
        let act = [0u64; 4];
        // SAFETY: `act` is a valid, large enough kernel sigaction; no old action requested;
        // the last argument is the kernel sigset size (8 bytes for 64 signals).
        let rc = unsafe {
            libc::syscall(
                libc::SYS_rt_sigaction,
                sig,
                act.as_ptr(),
                std::ptr::null_mut::<libc::c_void>(),
                8usize,
            )
        };
        if rc != 0 {
            return Err(sys("rt_sigaction"));
        }
    }
    for sig in (1..=31).chain(rt_min..=libc::SIGRTMAX()) {
        if sig == libc::SIGKILL || sig == libc::SIGSTOP {
            continue;
        }
        // SAFETY: an all-zero sigaction is valid; we then set the handler to SIG_DFL.
        let mut act: libc::sigaction = unsafe { std::mem::zeroed() };
        act.sa_sigaction = libc::SIG_DFL;
        // SAFETY: `act` is a valid sigaction; the old action is not requested.
        if unsafe { libc::sigaction(sig, &act, std::ptr::null_mut()) } != 0 {
            return Err(sys("sigaction"));
        }
    }
    // SAFETY: an all-zero sigset_t is valid storage; sigemptyset then initialises it.
    let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is valid storage for a signal set.
    unsafe { libc::sigemptyset(&mut set) };
    // SAFETY: `set` is an initialised signal set; the old mask is not requested.
    let rc = unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &set, std::ptr::null_mut()) };
    if rc != 0 {
        return Err(ProcessError::Sys {
            call: "pthread_sigmask",
            source: io::Error::from_raw_os_error(rc),
        });
    }
    Ok(())
}

/// `(CapEff, CapBnd)` of the calling thread, parsed from `/proc/self/status`.
pub fn read_caps() -> Result<(u64, u64), ProcessError> {
    let status = std::fs::read_to_string("/proc/self/status")
        .map_err(|e| ProcessError::Status(e.to_string()))?;
    parse_caps(&status)
}

fn parse_caps(status: &str) -> Result<(u64, u64), ProcessError> {
    let field = |name: &str| -> Result<u64, ProcessError> {
        let line = status
            .lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .ok_or_else(|| ProcessError::Status(format!("no {name} line")))?;
        u64::from_str_radix(line.trim(), 16)
            .map_err(|e| ProcessError::Status(format!("{name}: {e}")))
    };
    Ok((field("CapEff")?, field("CapBnd")?))
}

/// Blocks `signals` for the calling thread and returns a signalfd that delivers them
/// (`flags`: `SFD_CLOEXEC`, `SFD_NONBLOCK`). Used by the sandbox's PID 1 and by the
/// supervisor, which both read their signals in a loop instead of handling them.
pub fn block_into_signalfd(
    signals: &[libc::c_int],
    flags: libc::c_int,
) -> io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    // SAFETY: sigset_t is plain data initialised by sigemptyset before use.
    let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointer to our sigset.
    unsafe { libc::sigemptyset(&mut set) };
    for s in signals {
        // SAFETY: valid pointer; an invalid signal number is rejected with EINVAL.
        if unsafe { libc::sigaddset(&mut set, *s) } != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    // SAFETY: valid set pointer; the old mask is not needed.
    if unsafe { libc::sigprocmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: valid set pointer; -1 creates a new descriptor.
    let fd = unsafe { libc::signalfd(-1, &set, flags) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor nothing else owns.
    Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) })
}

/// Point each of `fds` at `/dev/null` (opened read-write). The descriptor opened for it is
/// closed afterwards unless it is one of 0, 1, 2 (the lowest free number: a standard
/// descriptor that was closed stays taken, so that no file opened later lands there and
/// receives what is written to it). Only `open`, `dup2` and `close`: safe in a child forked
/// from a threaded process. An error is the first call that failed; the caller decides
/// whether that is fatal.
pub fn null_over(fds: &[libc::c_int]) -> io::Result<()> {
    // SAFETY: a constant C string; a new descriptor or -1.
    let null = unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
    if null < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut result = Ok(());
    for &fd in fds {
        // SAFETY: integer-only: duplicates our descriptor onto `fd`.
        let r = unsafe { libc::dup2(null, fd) };
        if (r < 0 || r != fd) && result.is_ok() {
            result = Err(io::Error::last_os_error());
        }
    }
    if null > 2 {
        // SAFETY: the descriptor opened above, ours alone.
        unsafe { libc::close(null) };
    }
    result
}

/// A pidfd of process (or, with `PIDFD_THREAD`, thread) `pid`: `pidfd_open(2)` with `flags`.
/// The caller knows the pid is not reused meanwhile (its own unreaped child, itself, its
/// parent checked alive) or checks what the pidfd refers to after opening it.
pub fn pidfd_open(pid: libc::pid_t, flags: libc::c_uint) -> io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    // SAFETY: pidfd_open takes two integers and returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, flags) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor nothing else owns (a descriptor number fits a c_int).
    Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd as libc::c_int) })
}

/// How a child ended, as a shell says it: its exit code, or 128 + the signal that killed it;
/// `None` while it has not ended.
pub fn exit_code(status: WaitStatus) -> Option<i32> {
    match status {
        WaitStatus::Exited(_, code) => Some(code),
        WaitStatus::Signaled(_, sig, _) => Some(128 + sig as i32),
        _ => None,
    }
}

/// Wait for the child `pid` (retrying on EINTR) and return [`exit_code`]; `None` if it cannot
/// be waited for.
pub fn wait(pid: i32) -> Option<i32> {
    loop {
        match waitpid(Pid::from_raw(pid), None) {
            Ok(st) => {
                if let Some(code) = exit_code(st) {
                    return Some(code);
                }
            }
            Err(nix::Error::EINTR) => {}
            Err(_) => return None,
        }
    }
}

/// Without blocking: the child `pid`'s [`exit_code`], once it has ended.
pub fn try_wait(pid: i32) -> Option<i32> {
    waitpid(Pid::from_raw(pid), Some(WaitPidFlag::WNOHANG))
        .ok()
        .and_then(exit_code)
}

/// SIGKILL the child `pid` (a sandbox's init: its PID namespace dies with it) and reap it.
pub fn kill_and_reap(pid: i32) {
    let _ = nix::sys::signal::kill(Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL);
    let _ = wait(pid);
}

/// An anonymous mapping used as the stack of a child cloned with `CLONE_VM` (the tier probe,
/// the command's child), with an inaccessible lowest page: an overflow faults instead of
/// writing below it. Unmapped when dropped: only once no task runs on it.
pub struct ChildStack {
    base: *mut libc::c_void,
    len: usize,
}

impl ChildStack {
    /// `usable` bytes of stack above a guard page (the system's page size: 4 KiB here, up to
    /// 64 KiB on some arm64 kernels). Pages are only touched as used.
    pub fn new(usable: usize) -> io::Result<ChildStack> {
        let overflow = || io::Error::from_raw_os_error(libc::EOVERFLOW);
        // SAFETY: sysconf has no memory arguments.
        let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) })
            .map_err(|_| overflow())?;
        let len = usable
            .div_ceil(page)
            .checked_add(1)
            .and_then(|n| n.checked_mul(page))
            .ok_or_else(overflow)?;
        // SAFETY: a new private anonymous mapping; nothing else refers to it.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let stack = ChildStack { base, len };
        // SAFETY: the first page of the mapping just made, ours alone.
        if unsafe { libc::mprotect(base, page, libc::PROT_NONE) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(stack)
    }

    /// The highest address (stacks grow down): page-aligned, so 16-byte aligned.
    pub fn top(&self) -> *mut libc::c_void {
        self.base.wrapping_byte_add(self.len)
    }
}

impl Drop for ChildStack {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`; its owner drops it only once no task runs on it
        // (and leaks it otherwise).
        unsafe { libc::munmap(self.base, self.len) };
    }
}

/// The calling thread's signal mask before [`block_all_signals`], put back by
/// [`Blocked::restore`].
pub struct Blocked(libc::sigset_t);

/// Block every signal in the calling thread (around a `CLONE_VM` clone: no handler of this
/// process may run in the child before it has reset its dispositions).
pub fn block_all_signals() -> io::Result<Blocked> {
    // SAFETY: all-zero sigset_t values are valid storage; sigfillset initialises `all`.
    let (mut all, mut old): (libc::sigset_t, libc::sigset_t) =
        unsafe { (std::mem::zeroed(), std::mem::zeroed()) };
    // SAFETY: `all` is valid storage for a signal set.
    unsafe { libc::sigfillset(&mut all) };
    // SAFETY: valid signal sets; the old mask is written to `old`.
    let rc = unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old) };
    if rc != 0 {
        return Err(io::Error::from_raw_os_error(rc));
    }
    Ok(Blocked(old))
}

impl Blocked {
    /// Put the mask back.
    pub fn restore(self) {
        // SAFETY: a signal set pthread_sigmask filled; the old mask is not requested.
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &self.0, std::ptr::null_mut()) };
    }
}

#[cfg(test)]
mod tests {
    use std::os::fd::AsRawFd;

    use super::*;

    /// A child's stack: the usable size above one inaccessible page of the system's
    /// size, its top aligned for the call `clone` makes on it.
    #[test]
    fn a_child_stack_has_a_guard_page_below_it() {
        // SAFETY: sysconf has no memory arguments.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
        let stack = ChildStack::new(64 * 1024).expect("a stack");
        let (base, top) = (stack.base as usize, stack.top() as usize);
        assert!(top - base >= 64 * 1024 + page, "{base:#x}..{top:#x}");
        assert_eq!(top % 16, 0);
        let maps = std::fs::read_to_string("/proc/self/maps").expect("maps");
        let perms = |at: usize| {
            maps.lines()
                .find_map(|l| {
                    let (range, rest) = l.split_once(' ')?;
                    let (a, b) = range.split_once('-')?;
                    let (a, b) = (
                        usize::from_str_radix(a, 16).ok()?,
                        usize::from_str_radix(b, 16).ok()?,
                    );
                    (a <= at && at < b).then(|| rest[..4].to_string())
                })
                .unwrap_or_default()
        };
        assert_eq!(perms(base), "---p", "the guard page");
        assert_eq!(perms(base + page - 1), "---p", "the guard page's end");
        assert_eq!(perms(base + page), "rw-p", "the stack's lowest page");
        assert_eq!(perms(top - 1), "rw-p", "the stack's top");
    }

    use crate::testutil::{errno, in_child};

    /// `null_over` points exactly the descriptors it is given at /dev/null.
    #[test]
    fn null_over_replaces_the_given_descriptors_only() {
        let (r, w) = nix::unistd::pipe().expect("pipe");
        let (a, b) = (900, 901);
        // SAFETY: duplicating our own pipe onto two unused high numbers.
        unsafe {
            assert_eq!(libc::dup2(w.as_raw_fd(), a), a);
            assert_eq!(libc::dup2(w.as_raw_fd(), b), b);
        }
        let target = |fd: i32| std::fs::read_link(format!("/proc/self/fd/{fd}")).ok();
        null_over(&[a]).expect("null_over");
        assert_eq!(target(a), Some("/dev/null".into()));
        assert_eq!(
            target(b),
            target(w.as_raw_fd()),
            "another descriptor was touched"
        );
        assert!(null_over(&[-1]).is_err(), "a bad descriptor is an error");
        // SAFETY: closing the two numbers this test made.
        unsafe {
            libc::close(a);
            libc::close(b);
        }
        drop(r);
    }

    /// The permissions and Rss in kB of the mapping that holds `addr`, from `smaps` text.
    fn mapping_rss(smaps: &str, addr: usize) -> Result<(String, u64), String> {
        let mut found: Option<String> = None;
        for line in smaps.lines() {
            let mut f = line.split_whitespace();
            let first = f.next().unwrap_or("");
            if let Some((a, b)) = first.split_once('-') {
                if let (Ok(a), Ok(b)) = (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16))
                {
                    found = (a <= addr && addr < b).then(|| f.next().unwrap_or("").to_string());
                    continue;
                }
            }
            if let (Some(perms), Some(kb)) = (&found, line.strip_prefix("Rss:")) {
                let kb = kb.trim().trim_end_matches("kB").trim();
                return Ok((perms.clone(), kb.parse().map_err(|_| format!("Rss {kb}"))?));
            }
        }
        Err(format!("no mapping holds {addr:#x}"))
    }

    /// `/proc/self/smaps` read with `pread` into a buffer allocated beforehand, so that little
    /// code runs between the call before it and the kernel's count.
    fn smaps_now(fd: &std::fs::File, buf: &mut [u8]) -> Result<String, String> {
        let mut n = 0;
        loop {
            // SAFETY: reading into the unused tail of a buffer we own.
            let r = unsafe {
                libc::pread(
                    fd.as_raw_fd(),
                    buf[n..].as_mut_ptr().cast(),
                    buf.len() - n,
                    n as libc::off_t,
                )
            };
            if r <= 0 {
                break;
            }
            n += r as usize;
            if n == buf.len() {
                return Err("smaps does not fit the buffer".into());
            }
        }
        String::from_utf8(buf[..n].to_vec()).map_err(|e| e.to_string())
    }

    #[test]
    fn text_relocations_are_found_in_a_dynamic_section() {
        let section = |entries: &[[u64; 2]]| -> bool {
            let dynamic = libc::Elf64_Phdr {
                p_type: libc::PT_DYNAMIC,
                p_flags: 0,
                p_offset: 0,
                p_vaddr: entries.as_ptr() as u64,
                p_paddr: 0,
                p_filesz: std::mem::size_of_val(entries) as u64,
                p_memsz: std::mem::size_of_val(entries) as u64,
                p_align: 8,
            };
            has_text_relocations(&[dynamic], 0)
        };
        // DT_NEEDED, DT_FLAGS with BIND_NOW only, DT_NULL.
        assert!(!section(&[[1, 0], [30, 0x8], [0, 0]]));
        assert!(section(&[[1, 0], [22, 0], [0, 0]]), "DT_TEXTREL");
        assert!(section(&[[30, 0x8 | 0x4], [0, 0]]), "DF_TEXTREL");
        // After DT_NULL nothing counts.
        assert!(!section(&[[0, 0], [22, 0]]));
        // This test program has none, and its code ranges are found.
        assert!(!program_code_ranges().is_empty());
    }

    #[test]
    fn dropping_the_code_mappings_unmaps_the_programs_code_which_still_runs() {
        in_child(|| {
            let ranges = program_code_ranges();
            let here = program_code_ranges as *const () as usize;
            if !ranges.iter().any(|&(s, l)| s <= here && here < s + l) {
                return Err(format!("{here:#x} is in none of {ranges:x?}"));
            }
            let smaps_text =
                std::fs::read_to_string("/proc/self/smaps").map_err(|e| e.to_string())?;
            for &(s, l) in &ranges {
                // Each range starts and ends in a private, executable, read-only mapping.
                for a in [s, s + l - 1] {
                    let (perms, _) = mapping_rss(&smaps_text, a)?;
                    if perms != "r-xp" {
                        return Err(format!("{a:#x} is in a {perms} mapping"));
                    }
                }
            }
            let smaps = std::fs::File::open("/proc/self/smaps").map_err(|e| e.to_string())?;
            let mut buf = vec![0u8; 4 << 20];
            let (_, before) = mapping_rss(&smaps_now(&smaps, &mut buf)?, here)?;
            let dropped = drop_code_mappings().map_err(|e| e.to_string())?;
            let text = smaps_now(&smaps, &mut buf)?;
            let (_, after) = mapping_rss(&text, here)?;
            // Without the drop the count could only grow between the two reads. What is mapped
            // again is what ran since (the return and the read; in a debug build each small
            // library function called is a fault-around window of its own).
            if dropped == 0 || after >= before {
                return Err(format!(
                    "dropped {dropped} bytes: Rss {before} kB before, {after} kB after"
                ));
            }
            // The code runs again (it faulted back in) and finds the same ranges.
            if program_code_ranges() != ranges {
                return Err("the ranges changed".into());
            }
            Ok(())
        });
    }

    fn status_line(name: &str) -> Result<String, String> {
        let s = std::fs::read_to_string("/proc/self/status").map_err(|e| e.to_string())?;
        s.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .map(|v| v.trim().to_string())
            .ok_or_else(|| format!("no {name}"))
    }

    #[test]
    fn parses_status() {
        let s = "Name:\tx\nCapInh:\t0000000000000000\nCapEff:\t000001fffeffffff\nCapBnd:\t0000000000000003\n";
        assert_eq!(parse_caps(s).expect("parse"), (0x01ff_feff_ffff, 3));
        assert!(parse_caps("CapEff:\t0\n").is_err());
    }

    #[test]
    fn no_new_privs_sticks() {
        in_child(|| {
            set_no_new_privs().map_err(|e| e.to_string())?;
            match status_line("NoNewPrivs")?.as_str() {
                "1" => Ok(()),
                v => Err(format!("NoNewPrivs: {v}")),
            }
        });
    }

    #[test]
    fn last_cap_matches_proc() {
        let proc: u32 = std::fs::read_to_string("/proc/sys/kernel/cap_last_cap")
            .expect("cap_last_cap")
            .trim()
            .parse()
            .expect("number");
        assert_eq!(last_cap(), proc);
        assert_eq!(last_cap_probed(), proc);
    }

    #[test]
    fn drops_everything_as_root() {
        if !nix::unistd::geteuid().is_root() {
            return;
        }
        in_child(|| {
            let (eff, _) = read_caps().map_err(|e| e.to_string())?;
            if eff == 0 {
                return Err("test needs capabilities".into());
            }
            let d = drop_all_capabilities().map_err(|e| e.to_string())?;
            if d != (CapsDropped {
                securebits_locked: true,
                bounding_cleared: true,
            }) {
                return Err(format!("{d:?}"));
            }
            let caps = read_caps().map_err(|e| e.to_string())?;
            if caps != (0, 0) {
                return Err(format!("caps after drop: {caps:x?}"));
            }
            for name in ["CapPrm", "CapInh", "CapAmb"] {
                if u64::from_str_radix(&status_line(name)?, 16) != Ok(0) {
                    return Err(format!("{name} not empty"));
                }
            }
            // SAFETY: PR_GET_SECUREBITS takes integer arguments only.
            let bits = unsafe { libc::prctl(libc::PR_GET_SECUREBITS, 0, 0, 0, 0) };
            if bits & SECUREBITS != SECUREBITS || bits & libc::SECBIT_KEEP_CAPS != 0 {
                return Err(format!("securebits {bits:#x}"));
            }
            // Root without capabilities: a privileged operation fails...
            // SAFETY: chroot takes a NUL-terminated path.
            let rc = unsafe { libc::chroot(c"/".as_ptr()) };
            crate::testutil::expect_errno("chroot", rc.into(), libc::EPERM)?;
            // ...and capabilities cannot come back: the lock holds.
            // SAFETY: PR_SET_SECUREBITS takes integer arguments only.
            let rc = unsafe { libc::prctl(libc::PR_SET_SECUREBITS, 0, 0, 0, 0) };
            crate::testutil::expect_errno("clear securebits", rc.into(), libc::EPERM)?;
            Ok(())
        });
    }

    #[test]
    fn unprivileged_drop_skips_what_needs_setpcap() {
        if !nix::unistd::geteuid().is_root() {
            return;
        }
        in_child(|| {
            // Become nobody: the kernel clears permitted/effective, the bounding set stays.
            // SAFETY: setresgid/setresuid take integers only.
            if unsafe { libc::setresgid(65534, 65534, 65534) } != 0
                // SAFETY: as above.
                || unsafe { libc::setresuid(65534, 65534, 65534) } != 0
            {
                return Err(format!("setresuid: errno {}", errno()));
            }
            let d = drop_all_capabilities().map_err(|e| e.to_string())?;
            if d != (CapsDropped {
                securebits_locked: false,
                bounding_cleared: false,
            }) {
                return Err(format!("{d:?}"));
            }
            match read_caps().map_err(|e| e.to_string())? {
                (0, bnd) if bnd != 0 => Ok(()),
                caps => Err(format!("caps {caps:x?}")),
            }
        });
    }

    #[test]
    fn closes_fds_above() {
        for by_listing in [false, true] {
            in_child(|| {
                let files: Vec<std::fs::File> = (0..5)
                    .map(|_| std::fs::File::open("/dev/null"))
                    .collect::<Result<_, _>>()
                    .map_err(|e| e.to_string())?;
                let fds: Vec<i32> = files.iter().map(|f| f.as_raw_fd()).collect();
                let r = if by_listing {
                    close_fds_above_by_listing(2)
                } else {
                    close_fds_above(2)
                };
                r.map_err(|e| e.to_string())?;
                for fd in fds {
                    // SAFETY: F_GETFD only queries the descriptor.
                    if unsafe { libc::fcntl(fd, libc::F_GETFD) } != -1 || errno() != libc::EBADF {
                        return Err(format!("fd {fd} still open"));
                    }
                }
                for fd in 0..=2 {
                    // SAFETY: F_GETFD only queries the descriptor.
                    if unsafe { libc::fcntl(fd, libc::F_GETFD) } == -1 && errno() == libc::EBADF {
                        return Err(format!("stdio fd {fd} was closed"));
                    }
                }
                // The Files' destructors would close numbers that may be reused; forget them.
                files.into_iter().for_each(std::mem::forget);
                Ok(())
            });
        }
    }

    extern "C" fn handler(_: libc::c_int) {}

    #[test]
    fn resets_signals() {
        in_child(|| {
            // SAFETY: installing SIG_IGN and a no-op handler, then blocking SIGTERM, in the child.
            unsafe {
                libc::signal(libc::SIGINT, libc::SIG_IGN);
                libc::signal(libc::SIGUSR1, handler as *const () as libc::sighandler_t);
                libc::signal(libc::SIGRTMIN() + 1, libc::SIG_IGN);
                let mut set: libc::sigset_t = std::mem::zeroed();
                libc::sigemptyset(&mut set);
                libc::sigaddset(&mut set, libc::SIGTERM);
                libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
            }
            reset_signal_dispositions().map_err(|e| e.to_string())?;
            for sig in (1..=31).chain(libc::SIGRTMIN()..=libc::SIGRTMAX()) {
                if sig == libc::SIGKILL || sig == libc::SIGSTOP {
                    continue;
                }
                // SAFETY: an all-zero sigaction is valid storage for the query.
                let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
                // SAFETY: query only (NULL new action).
                unsafe { libc::sigaction(sig, std::ptr::null(), &mut old) };
                if old.sa_sigaction != libc::SIG_DFL {
                    return Err(format!("signal {sig} not SIG_DFL"));
                }
            }
            // SigBlk/SigIgn are this thread's mask and ignored set.
            for name in ["SigBlk", "SigIgn"] {
                if u64::from_str_radix(&status_line(name)?, 16) != Ok(0) {
                    return Err(format!("{name} = {}", status_line(name)?));
                }
            }
            Ok(())
        });
    }
}

#[cfg(test)]
mod set_caps_tests {
    use super::*;
    use crate::testutil::{enter_user_and_net_ns, in_child};

    fn status(field: &str) -> Result<u64, String> {
        let s = std::fs::read_to_string("/proc/self/status").map_err(|e| e.to_string())?;
        let v = s
            .lines()
            .find_map(|l| l.strip_prefix(field))
            .ok_or(format!("no {field}"))?;
        u64::from_str_radix(v.trim(), 16).map_err(|e| e.to_string())
    }

    #[test]
    fn narrows_to_the_target_sets_and_names_resolve() {
        assert_eq!(cap_bit("CAP_SYS_ADMIN"), Some(1 << 21));
        assert_eq!(cap_bit("CAP_CHOWN"), Some(1));
        assert_eq!(cap_bit("CAP_BPF"), Some(1 << 39));
        assert_eq!(cap_bit("SYS_ADMIN"), None);
        assert_eq!(cap_bit("CAP_NOPE"), None);
        in_child(|| {
            enter_user_and_net_ns()?;
            let keep = (1 << 0) | (1 << 5); // CHOWN, KILL
            let target = CapSets {
                bounding: keep,
                effective: keep,
                permitted: keep,
                inheritable: 0,
            };
            set_capabilities(&target).map_err(|e| e.to_string())?;
            let (eff, bnd, prm) = (status("CapEff:")?, status("CapBnd:")?, status("CapPrm:")?);
            if (eff, bnd, prm) != (keep, keep, keep) {
                return Err(format!("eff {eff:x} bnd {bnd:x} prm {prm:x}"));
            }
            // Narrowing never widens: asking for more keeps what is left.
            set_capabilities(&CapSets {
                bounding: u64::MAX,
                effective: u64::MAX,
                permitted: u64::MAX,
                inheritable: 0,
            })
            .map_err(|e| e.to_string())?;
            if status("CapEff:")? != keep {
                return Err("widened".into());
            }
            Ok(())
        });
    }
}
