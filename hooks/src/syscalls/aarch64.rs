//! The aarch64 syscall table, from `libc::SYS_*` (the kernel's numbers for the build target),
//! and the x86_64 syscalls aarch64 does not have (nothing to deny there).

/// Builds `("SYS_name", libc::SYS_name)` pairs; the `SYS_` prefix is stripped at lookup.
macro_rules! table {
    ($($sys:ident),* $(,)?) => {
        &[$((stringify!($sys), libc::$sys as i64)),*]
    };
}

/// Syscalls of aarch64 vetto names (checked against libc for gnu and musl).
const COMMON: &[(&str, i64)] = table![
    SYS_ptrace,
    SYS_process_vm_readv,
    SYS_process_vm_writev,
    SYS_pidfd_getfd,
    SYS_pidfd_open,
    SYS_pidfd_send_signal,
    SYS_process_mrelease,
    SYS_process_madvise,
    SYS_io_uring_setup,
    SYS_io_uring_enter,
    SYS_io_uring_register,
    SYS_io_setup,
    SYS_io_destroy,
    SYS_io_submit,
    SYS_io_cancel,
    SYS_io_getevents,
    SYS_userfaultfd,
    SYS_mount,
    SYS_umount2,
    SYS_fsopen,
    SYS_fsconfig,
    SYS_fsmount,
    SYS_fspick,
    SYS_move_mount,
    SYS_open_tree,
    SYS_mount_setattr,
    SYS_pivot_root,
    SYS_chroot,
    SYS_init_module,
    SYS_finit_module,
    SYS_delete_module,
    SYS_kexec_load,
    SYS_bpf,
    SYS_perf_event_open,
    SYS_reboot,
    SYS_swapon,
    SYS_swapoff,
    SYS_keyctl,
    SYS_add_key,
    SYS_request_key,
    SYS_acct,
    SYS_unshare,
    SYS_setns,
    SYS_clone,
    SYS_clone3,
    SYS_personality,
    SYS_quotactl,
    SYS_quotactl_fd,
    SYS_settimeofday,
    SYS_clock_settime,
    SYS_clock_adjtime,
    SYS_adjtimex,
    SYS_sethostname,
    SYS_setdomainname,
    SYS_syslog,
    SYS_vhangup,
    SYS_name_to_handle_at,
    SYS_open_by_handle_at,
    SYS_lookup_dcookie,
    SYS_nfsservctl,
    SYS_fanotify_init,
    SYS_kcmp,
    SYS_mbind,
    SYS_migrate_pages,
    SYS_move_pages,
    SYS_set_mempolicy,
    SYS_get_mempolicy,
    SYS_set_mempolicy_home_node,
    SYS_landlock_create_ruleset,
    SYS_landlock_add_rule,
    SYS_landlock_restrict_self,
    SYS_seccomp,
    SYS_memfd_secret,
    SYS_memfd_create,
    SYS_vmsplice,
    SYS_mknodat,
    SYS_socket,
    SYS_socketpair,
    SYS_ioctl,
    SYS_prctl,
    SYS_setuid,
    SYS_setgid,
    SYS_setreuid,
    SYS_setregid,
    SYS_setresuid,
    SYS_setresgid,
    SYS_setgroups,
    SYS_setfsuid,
    SYS_setfsgid,
    SYS_capset,
    SYS_execve,
    SYS_execveat,
    SYS_futex_waitv,
    SYS_mseal,
    SYS_fchmod,
    SYS_fchmodat,
    SYS_fchmodat2,
    SYS_openat,
    SYS_openat2,
    SYS_mkdirat,
    SYS_setxattr,
    SYS_lsetxattr,
    SYS_fsetxattr,
];

/// Syscalls newer than the `libc` crate knows, by number: since Linux 6.13 every architecture
/// shares one number for each new syscall (asm-generic and x86_64 alike).
const NEWER: &[(&str, i64)] = &[
    ("SYS_setxattrat", 463),
    ("SYS_getxattrat", 464),
    ("SYS_listxattrat", 465),
    ("SYS_removexattrat", 466),
    ("SYS_open_tree_attr", 467),
];

/// Syscalls of x86_64 that have no entry point on aarch64.
pub const X86_64_ONLY_NAMES: &[&str] = &[
    "mknod",
    "chmod",
    "open",
    "creat",
    "mkdir",
    "iopl",
    "ioperm",
    "modify_ldt",
    "uselib",
    "_sysctl",
    "vserver",
    "ustat",
    "sysfs",
    "afs_syscall",
    "tuxcall",
    "security",
    "getpmsg",
    "putpmsg",
    "set_thread_area",
    "get_thread_area",
    "arch_prctl",
    "time",
];

/// aarch64 syscalls given by number: `libc` has no `SYS_kexec_file_load` for
/// aarch64-unknown-linux-musl, although the kernel has it (asm-generic/unistd.h: 294).
const AARCH64_EXTRA: &[(&str, i64)] = &[("SYS_kexec_file_load", 294)];

/// Every `(name, number)` of the table.
pub fn table() -> impl Iterator<Item = (&'static str, i64)> {
    COMMON
        .iter()
        .chain(NEWER)
        .chain(AARCH64_EXTRA)
        .filter_map(|&(n, nr)| Some((n.strip_prefix("SYS_")?, nr)))
}
