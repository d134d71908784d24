//! The one syscall table: names to numbers for the architecture this crate is built for,
//! used by both seccomp compilers ([`crate::seccomp`] for vetto's deny-list,
//! [`crate::oci_seccomp`] for a bundle's profile).
//!
//! x86_64 (64-bit ABI): the full table generated from the kernel headers ([`x86_64`],
//! `scripts/gen-syscall-table.sh`). aarch64: `libc::SYS_*` for the syscalls vetto names
//! ([`aarch64`], compiled there only). The x32 and i386 ABIs are handled by the filters'
//! prologues, not by this table.

use thiserror::Error;

#[cfg(target_arch = "aarch64")]
pub mod aarch64;
#[cfg(target_arch = "x86_64")]
pub mod x86_64;

#[cfg(not(any(
    all(target_arch = "x86_64", target_pointer_width = "64"),
    target_arch = "aarch64"
)))]
compile_error!("vetto-hooks supports x86_64 (64-bit ABI) and aarch64 only");

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

/// This architecture's table, `(name, number)`.
#[cfg(target_arch = "x86_64")]
fn table() -> impl Iterator<Item = (&'static str, i64)> {
    x86_64::TABLE.iter().map(|&(n, nr)| (n, i64::from(nr)))
}

/// This architecture's table, `(name, number)`.
#[cfg(target_arch = "aarch64")]
fn table() -> impl Iterator<Item = (&'static str, i64)> {
    aarch64::table()
}

/// The number of `name` on this architecture, if it has that syscall.
pub fn number(name: &str) -> Option<i64> {
    table().find(|(n, _)| *n == name).map(|(_, nr)| nr)
}

/// Every syscall name of this architecture's table.
pub fn names() -> impl Iterator<Item = &'static str> {
    table().map(|(n, _)| n)
}

/// Resolves a syscall name (as in `man 2 syscalls`, e.g. `"umount2"`) for this architecture.
pub fn resolve(name: &str) -> Result<Resolved, SyscallError> {
    if let Some(nr) = number(name) {
        return Ok(Resolved::Number(nr));
    }
    #[cfg(target_arch = "aarch64")]
    if aarch64::X86_64_ONLY_NAMES.contains(&name) {
        return Ok(Resolved::AbsentOnThisArch);
    }
    Err(SyscallError::Unknown(name.to_string()))
}

/// The mount family in the table: every syscall that mounts, unmounts, moves or reconfigures
/// a mount or a filesystem context (`mount`, `umount2`, the new mount API `fsopen` … `open_tree*`
/// … `mount_setattr`, `pivot_root`), found by name so a syscall added to the table later is
/// caught by the test below until the deny-list names it. `statmount`/`listmount` only read.
pub fn mount_family() -> Vec<&'static str> {
    names()
        .filter(|n| {
            (n.contains("mount") && !matches!(*n, "statmount" | "listmount"))
                || n.starts_with("open_tree")
                || matches!(*n, "fsopen" | "fsconfig" | "fspick" | "pivot_root")
        })
        .collect()
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
        let mut all: Vec<&str> = names().collect();
        let len = all.len();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), len);
    }

    /// The generated table agrees with libc's numbers for the build target.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn the_generated_table_agrees_with_libc() {
        for (name, nr) in [
            ("ptrace", libc::SYS_ptrace),
            ("mount", libc::SYS_mount),
            ("umount2", libc::SYS_umount2),
            ("unshare", libc::SYS_unshare),
            ("setns", libc::SYS_setns),
            ("bpf", libc::SYS_bpf),
            ("keyctl", libc::SYS_keyctl),
            ("io_uring_setup", libc::SYS_io_uring_setup),
            ("open_tree", libc::SYS_open_tree),
            ("mount_setattr", libc::SYS_mount_setattr),
            ("fchmodat2", libc::SYS_fchmodat2),
            ("kexec_file_load", libc::SYS_kexec_file_load),
        ] {
            assert_eq!(number(name), Some(nr), "{name}");
        }
    }

    #[test]
    fn every_mount_syscall_is_denied() {
        let deny = vetto_bundle::plan::default_seccomp().deny;
        let family = mount_family();
        assert!(family.len() >= 10, "{family:?}");
        for name in family {
            assert!(
                deny.iter().any(|d| d == name),
                "{name} is a mount syscall the default deny-list does not name"
            );
        }
    }
}
