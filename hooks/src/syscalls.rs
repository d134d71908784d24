//! Syscall names to numbers for the architecture this crate is built for.
//!
//! Only x86_64 (64-bit ABI) and aarch64 are supported. The numbers come from `libc::SYS_*`, so
//! they are the kernel's numbers for the build target; the x32 and i386 ABIs are handled by the
//! seccomp prologue, not by this table.

use thiserror::Error;

/// Why a syscall name could not be resolved.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum SyscallError {
    /// The name is not a syscall of any architecture vetto supports (or not in the table).
    #[error("unknown syscall `{0}` (not a syscall vetto knows on {arch})", arch = std::env::consts::ARCH)]
    Unknown(String),
}

/// Result of resolving one name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resolved {
    /// The syscall number on this architecture.
    Number(i64),
    /// The syscall exists on another supported architecture but has no entry point on this one
    /// (e.g. `iopl` or `mknod` on aarch64). There is nothing to deny: a program cannot invoke a
    /// syscall the architecture does not have.
    AbsentOnThisArch,
}

/// Builds `("SYS_name", libc::SYS_name)` pairs; the `SYS_` prefix is stripped at lookup.
macro_rules! table {
    ($($sys:ident),* $(,)?) => {
        &[$((stringify!($sys), libc::$sys as i64)),*]
    };
}

/// Syscalls present on both x86_64 and aarch64 (checked against libc for gnu and musl).
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

/// Syscalls that exist on x86_64 only (legacy or x86-specific entry points).
#[cfg(target_arch = "x86_64")]
const X86_64_ONLY: &[(&str, i64)] = table![
    SYS_mknod,
    SYS_chmod,
    SYS_open,
    SYS_creat,
    SYS_mkdir,
    SYS_iopl,
    SYS_ioperm,
    SYS_modify_ldt,
    SYS_uselib,
    SYS__sysctl,
    SYS_vserver,
    SYS_ustat,
    SYS_sysfs,
    SYS_afs_syscall,
    SYS_tuxcall,
    SYS_security,
    SYS_getpmsg,
    SYS_putpmsg,
    SYS_set_thread_area,
    SYS_get_thread_area,
    SYS_arch_prctl,
    SYS_time,
    SYS_kexec_file_load,
];

/// Names of [`X86_64_ONLY`], for aarch64 where they have no entry point.
#[cfg(target_arch = "aarch64")]
const X86_64_ONLY_NAMES: &[&str] = &[
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
#[cfg(target_arch = "aarch64")]
const AARCH64_EXTRA: &[(&str, i64)] = &[("SYS_kexec_file_load", 294)];

#[cfg(not(any(
    all(target_arch = "x86_64", target_pointer_width = "64"),
    target_arch = "aarch64"
)))]
compile_error!("vetto-hooks supports x86_64 (64-bit ABI) and aarch64 only");

fn lookup(table: &[(&str, i64)], name: &str) -> Option<i64> {
    table
        .iter()
        .find(|(sys, _)| sys.strip_prefix("SYS_") == Some(name))
        .map(|&(_, nr)| nr)
}

/// Resolves a syscall name (as in `man 2 syscalls`, e.g. `"umount2"`) for this architecture.
pub fn resolve(name: &str) -> Result<Resolved, SyscallError> {
    if let Some(nr) = lookup(COMMON, name).or_else(|| lookup(NEWER, name)) {
        return Ok(Resolved::Number(nr));
    }
    #[cfg(target_arch = "x86_64")]
    if let Some(nr) = lookup(X86_64_ONLY, name) {
        return Ok(Resolved::Number(nr));
    }
    #[cfg(target_arch = "aarch64")]
    {
        if let Some(nr) = lookup(AARCH64_EXTRA, name) {
            return Ok(Resolved::Number(nr));
        }
        if X86_64_ONLY_NAMES.contains(&name) {
            return Ok(Resolved::AbsentOnThisArch);
        }
    }
    Err(SyscallError::Unknown(name.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_deny_list_resolves_to_numbers() {
        for name in &vetto_bundle::plan::default_seccomp().deny {
            assert!(
                matches!(resolve(name), Ok(Resolved::Number(_))),
                "{name} must resolve on this architecture"
            );
        }
    }

    #[test]
    fn every_argument_and_errno_rule_resolves() {
        let plan = vetto_bundle::plan::default_seccomp();
        let names = plan
            .deny_args
            .iter()
            .map(|r| &r.syscall)
            .chain(plan.deny_errno.iter().map(|r| &r.syscall));
        for name in names {
            assert!(resolve(name).is_ok(), "{name} must be known");
        }
        #[cfg(target_arch = "x86_64")]
        {
            assert_eq!(resolve("fchmodat2"), Ok(Resolved::Number(452)));
            assert_eq!(resolve("setxattrat"), Ok(Resolved::Number(463)));
            assert_eq!(resolve("open_tree_attr"), Ok(Resolved::Number(467)));
        }
    }

    #[test]
    fn known_numbers() {
        assert_eq!(resolve("ptrace"), Ok(Resolved::Number(libc::SYS_ptrace)));
        assert!(resolve("_sysctl").is_ok());
        #[cfg(target_arch = "x86_64")]
        {
            assert_eq!(resolve("ptrace"), Ok(Resolved::Number(101)));
            assert_eq!(resolve("kexec_file_load"), Ok(Resolved::Number(320)));
            assert_eq!(resolve("iopl"), Ok(Resolved::Number(172)));
        }
        #[cfg(all(target_arch = "aarch64", target_env = "gnu"))]
        assert_eq!(
            resolve("kexec_file_load"),
            Ok(Resolved::Number(libc::SYS_kexec_file_load))
        );
    }

    #[test]
    fn unknown_name_is_an_error_naming_it() {
        let err = resolve("not_a_syscall").expect_err("unknown");
        assert_eq!(err, SyscallError::Unknown("not_a_syscall".into()));
        assert!(err.to_string().contains("not_a_syscall"));
        // The prefix is not part of the name.
        assert!(resolve("SYS_ptrace").is_err());
    }

    #[test]
    fn no_duplicate_names() {
        let mut names: Vec<&str> = COMMON.iter().chain(NEWER).map(|(n, _)| *n).collect();
        #[cfg(target_arch = "x86_64")]
        names.extend(X86_64_ONLY.iter().map(|(n, _)| *n));
        let len = names.len();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), len);
    }
}
