//! Seccomp: the deny-list of a [`SeccompPlan`] as a BPF filter.
//!
//! The program is our own prologue followed, unchanged, by what seccompiler compiles:
//!
//! 1. prologue (`deny_foreign_arch`): a syscall of another architecture (i386 `int 0x80` on
//!    x86_64, arm32 on aarch64) returns `EPERM`. seccompiler's own arch check would kill the
//!    whole process instead, which is what remains if `deny_foreign_arch` is false (their
//!    numbers mean different syscalls, so allowing them would bypass the list);
//! 2. prologue (`deny_x32`, x86_64 only): a syscall number with the x32 bit (`0x40000000`)
//!    returns `EPERM`; seccompiler compares exact numbers, so x32 would otherwise go through;
//! 3. seccompiler: its arch check (always passes here), then each denied syscall returns
//!    `EPERM` and so does `ioctl` whose request (argument 1, compared on its low 32 bits as
//!    the kernel truncates it) is denied; everything else is allowed.
//!
//! The prologue only jumps within itself, so seccompiler's relative jumps stay valid.

use std::collections::BTreeMap;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};
use thiserror::Error;
use vetto_bundle::plan::{ArgCheck, SeccompPlan};

use crate::syscalls::{self, Resolved, SyscallError};

/// Seccomp failures.
#[derive(Debug, Error)]
pub enum SeccompError {
    /// A denied syscall name is unknown.
    #[error(transparent)]
    Syscall(#[from] SyscallError),
    /// seccompiler refused the filter.
    #[error("seccomp filter: {0}")]
    Compile(#[from] seccompiler::BackendError),
    /// The program is longer than the kernel accepts.
    #[error("seccomp filter has {0} instructions, the kernel accepts at most {BPF_MAX_LEN}")]
    TooLong(usize),
    /// A conditional jump of the prologue is longer than classic BPF can encode.
    #[error("seccomp filter: a jump is longer than 255 instructions")]
    JumpTooLong,
    /// Installing the filter failed.
    #[error("installing the seccomp filter: {0}")]
    Install(#[from] seccompiler::Error),
}

use crate::bpf::{ret_errno, Asm, Target, DATA_ARCH, DATA_NR, JEQ_K, LD_W_ABS, RET_K};
pub use crate::bpf::{AUDIT_ARCH, BPF_MAX_LEN, X32_SYSCALL_BIT};

/// `EPERM` as a seccomp return value.
const RET_EPERM: u32 = ret_errno(libc::EPERM as u32);

#[cfg(target_arch = "x86_64")]
const TARGET: TargetArch = TargetArch::x86_64;
#[cfg(target_arch = "aarch64")]
const TARGET: TargetArch = TargetArch::aarch64;

/// The syscall numbers `names` deny on this architecture, deduplicated. Names of syscalls the
/// architecture does not have (see [`Resolved::AbsentOnThisArch`]) are skipped; unknown names
/// are an error naming them.
pub fn resolve_syscalls(names: &[String]) -> Result<Vec<(String, i64)>, SeccompError> {
    let mut out: Vec<(String, i64)> = Vec::with_capacity(names.len());
    for name in names {
        if let Resolved::Number(nr) = syscalls::resolve(name)? {
            if !out.iter().any(|&(_, n)| n == nr) {
                out.push((name.clone(), nr));
            }
        }
    }
    Ok(out)
}

/// Our prologue (see the module documentation).
fn prologue(plan: &SeccompPlan) -> Result<BpfProgram, SeccompError> {
    let mut a = Asm::default();
    if plan.deny_foreign_arch {
        let native = a.label();
        a.stmt(LD_W_ABS, DATA_ARCH);
        a.jump(JEQ_K, AUDIT_ARCH, Target::Label(native), Target::Next);
        a.stmt(RET_K, RET_EPERM);
        a.place(native);
    }
    #[cfg(target_arch = "x86_64")]
    if plan.deny_x32 {
        // Without the arch check above, a foreign arch reaches this with its own numbers; a
        // number >= 0x40000000 is no syscall there either, so EPERM is still right. Negative
        // numbers (syscall(-1)) also compare as >= and get EPERM instead of ENOSYS.
        let below = a.label();
        a.stmt(LD_W_ABS, DATA_NR);
        a.jump(
            crate::bpf::JGE_K,
            X32_SYSCALL_BIT,
            Target::Next,
            Target::Label(below),
        );
        a.stmt(RET_K, RET_EPERM);
        a.place(below);
    }
    // Syscalls refused with their own errno (after the architecture check: the numbers are
    // this architecture's).
    for d in &plan.deny_errno {
        if let Resolved::Number(nr) = syscalls::resolve(&d.syscall)? {
            let other = a.label();
            a.stmt(LD_W_ABS, DATA_NR);
            a.jump(JEQ_K, nr as u32, Target::Next, Target::Label(other));
            a.stmt(RET_K, ret_errno(d.errno as u32));
            a.place(other);
        }
    }
    a.finish().ok_or(SeccompError::JumpTooLong)
}

fn condition(c: &ArgCheck) -> Result<SeccompCondition, seccompiler::BackendError> {
    match *c {
        ArgCheck::BitsSet { arg, mask } => SeccompCondition::new(
            arg,
            SeccompCmpArgLen::Dword,
            SeccompCmpOp::MaskedEq(u64::from(mask)),
            u64::from(mask),
        ),
        ArgCheck::Ne { arg, value } => SeccompCondition::new(
            arg,
            SeccompCmpArgLen::Dword,
            SeccompCmpOp::Ne,
            u64::from(value),
        ),
        ArgCheck::MaskedEq { arg, mask, value } => SeccompCondition::new(
            arg,
            SeccompCmpArgLen::Dword,
            SeccompCmpOp::MaskedEq(u64::from(mask)),
            u64::from(value),
        ),
    }
}

/// Compiles the plan into the BPF program [`install`] loads.
pub fn compile(plan: &SeccompPlan) -> Result<BpfProgram, SeccompError> {
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    for (_, nr) in resolve_syscalls(&plan.deny)? {
        // An empty chain matches unconditionally.
        rules.insert(nr, Vec::new());
    }
    if !plan.deny_ioctls.is_empty() && !rules.contains_key(&libc::SYS_ioctl) {
        let chain = plan
            .deny_ioctls
            .iter()
            .map(|d| {
                let cond = SeccompCondition::new(
                    1,
                    SeccompCmpArgLen::Dword,
                    SeccompCmpOp::Eq,
                    u64::from(d.request),
                )?;
                SeccompRule::new(vec![cond])
            })
            .collect::<Result<Vec<_>, _>>()?;
        rules.insert(libc::SYS_ioctl, chain);
    }
    // Argument rules: several for one syscall are alternatives; a syscall denied outright
    // keeps its empty (unconditional) chain.
    let unconditional: Vec<i64> = rules
        .iter()
        .filter(|(_, chain)| chain.is_empty())
        .map(|(nr, _)| *nr)
        .collect();
    for r in &plan.deny_args {
        let Resolved::Number(nr) = syscalls::resolve(&r.syscall)? else {
            continue;
        };
        if unconditional.contains(&nr) {
            continue;
        }
        let conds = r
            .when
            .iter()
            .map(condition)
            .collect::<Result<Vec<_>, _>>()?;
        rules.entry(nr).or_default().push(SeccompRule::new(conds)?);
    }
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        TARGET,
    )?;
    let body: BpfProgram = filter.try_into()?;
    let mut program = prologue(plan)?;
    program.extend(body);
    if program.len() > BPF_MAX_LEN {
        return Err(SeccompError::TooLong(program.len()));
    }
    Ok(program)
}

/// Loads a compiled program on the calling thread (seccompiler sets `no_new_privs` first).
/// Threads that already exist are not filtered; the init is single-threaded.
pub fn install(program: &BpfProgram) -> Result<(), SeccompError> {
    seccompiler::apply_filter(program)?;
    Ok(())
}

/// [`compile`] then [`install`].
pub fn apply(plan: &SeccompPlan) -> Result<(), SeccompError> {
    install(&compile(plan)?)
}

#[cfg(test)]
mod tests {
    use vetto_bundle::plan::{default_seccomp, IoctlDeny};

    use super::*;
    use crate::testutil::{errno, expect_errno, in_child, run_in_child, Outcome};

    const TIOCSTI: u64 = 0x5412;
    /// Same value on x86_64 and aarch64.
    const TCGETS: u64 = 0x5401;

    fn devnull() -> Result<std::fs::File, String> {
        std::fs::File::open("/dev/null").map_err(|e| e.to_string())
    }

    /// Raw ioctl with a full 64-bit request.
    fn ioctl(fd: i32, request: u64) -> i64 {
        let c = 0u8;
        // SAFETY: the argument points at a valid byte; the kernel rejects the request anyway.
        unsafe { libc::syscall(libc::SYS_ioctl, fd, request, &c as *const u8) }
    }

    #[test]
    fn program_starts_with_prologue_then_seccompiler() {
        let plan = default_seccomp();
        let program = compile(&plan).expect("compile");
        let first = &program[0];
        assert_eq!((first.code, first.k), (crate::bpf::LD_W_ABS, DATA_ARCH));
        // seccompiler's own arch check follows the prologue, intact.
        let n = prologue(&plan).expect("prologue").len();
        assert_eq!(program[n + 2].k, libc::SECCOMP_RET_KILL_PROCESS);
        #[cfg(target_arch = "x86_64")]
        assert_eq!(n, 6 + 3 * plan.deny_errno.len());
        let bare = SeccompPlan {
            deny_x32: false,
            deny_foreign_arch: false,
            deny_errno: vec![],
            ..plan
        };
        assert!(prologue(&bare).expect("prologue").is_empty());
    }

    /// The argument rules: no mode with the setuid/setgid bit by any syscall that takes a
    /// mode, no xattrs, no openat2, no socket family but unix/inet/inet6/netlink. Each is
    /// checked against a control call that the filter lets through.
    #[test]
    fn setid_modes_xattrs_and_socket_families_are_refused() {
        let program = compile(&default_seccomp()).expect("compile");
        let dir = crate::testutil::TempDir::new("setid");
        let d = dir.path().to_path_buf();
        let ee = |w: &str, r: i32, e: i32| expect_errno(w, i64::from(r), e);
        in_child(move || {
            install(&program).map_err(|e| e.to_string())?;
            let p = |n: &str| {
                std::ffi::CString::new(d.join(n).to_string_lossy().as_bytes()).expect("c")
            };
            let f = p("f");
            // SAFETY: valid C string; plain mode arguments.
            let fd = unsafe { libc::open(f.as_ptr(), libc::O_CREAT | libc::O_WRONLY, 0o755) };
            if fd < 0 {
                return Err(format!("control open: {}", errno()));
            }
            // SAFETY: as above.
            unsafe {
                ee("chmod u+s", libc::chmod(f.as_ptr(), 0o4755), libc::EPERM)?;
                ee("chmod g+s", libc::chmod(f.as_ptr(), 0o2755), libc::EPERM)?;
                ee("fchmod u+s", libc::fchmod(fd, 0o4755), libc::EPERM)?;
                ee(
                    "fchmodat u+s",
                    libc::fchmodat(libc::AT_FDCWD, f.as_ptr(), 0o4755, 0),
                    libc::EPERM,
                )?;
                let r = libc::syscall(452, libc::AT_FDCWD, f.as_ptr(), 0o6755, 0) as i32;
                ee("fchmodat2 ug+s", r, libc::EPERM)?;
                // The upper half of the register is ignored by the kernel and by the filter.
                let r = libc::syscall(libc::SYS_fchmod, fd, 0x1_0000_4755u64) as i32;
                ee("fchmod with high bits", r, libc::EPERM)?;
                if libc::fchmod(fd, 0o755) != 0 {
                    return Err(format!("control fchmod 0755: {}", errno()));
                }
                let g = p("g");
                let r = libc::open(g.as_ptr(), libc::O_CREAT | libc::O_WRONLY, 0o4755);
                ee("open(O_CREAT, 04755)", r, libc::EPERM)?;
                let r = libc::openat(
                    libc::AT_FDCWD,
                    g.as_ptr(),
                    libc::O_CREAT | libc::O_WRONLY,
                    0o2755,
                );
                ee("openat(O_CREAT, 02755)", r, libc::EPERM)?;
                ee("creat 04755", libc::creat(g.as_ptr(), 0o4755), libc::EPERM)?;
                ee("mkdir 02755", libc::mkdir(g.as_ptr(), 0o2755), libc::EPERM)?;
                ee(
                    "mknod S_IFREG|04755",
                    libc::mknod(g.as_ptr(), libc::S_IFREG | 0o4755, 0),
                    libc::EPERM,
                )?;
                if std::path::Path::new(&d.join("g")).exists() {
                    return Err("a refused call created the file".into());
                }
                let how = [0u64; 3];
                let r = libc::syscall(
                    libc::SYS_openat2,
                    libc::AT_FDCWD,
                    g.as_ptr(),
                    how.as_ptr(),
                    24,
                ) as i32;
                ee("openat2", r, libc::ENOSYS)?;
                let name = c"security.capability";
                let v = [0u8; 20];
                let r = libc::setxattr(f.as_ptr(), name.as_ptr(), v.as_ptr().cast(), v.len(), 0);
                ee("setxattr", r, libc::EOPNOTSUPP)?;
                let r = libc::fsetxattr(fd, c"user.x".as_ptr(), v.as_ptr().cast(), 1, 0);
                ee("fsetxattr", r, libc::EOPNOTSUPP)?;
                let r = libc::socket(libc::AF_VSOCK, libc::SOCK_STREAM, 0);
                ee("socket(AF_VSOCK)", r, libc::EPERM)?;
                let r = libc::socket(libc::AF_PACKET, libc::SOCK_DGRAM, 0);
                ee("socket(AF_PACKET)", r, libc::EPERM)?;
                for fam in [libc::AF_UNIX, libc::AF_INET, libc::AF_INET6] {
                    let s = libc::socket(fam, libc::SOCK_STREAM, 0);
                    if s < 0 {
                        return Err(format!("control socket({fam}): {}", errno()));
                    }
                    libc::close(s);
                }
                let s = libc::socket(libc::AF_NETLINK, libc::SOCK_RAW, 0);
                if s < 0 {
                    return Err(format!("control socket(AF_NETLINK): {}", errno()));
                }
                libc::close(s);
                libc::close(fd);
            }
            Ok(())
        });
    }

    #[test]
    fn unknown_syscall_is_an_error_naming_it() {
        let plan = SeccompPlan {
            deny: vec!["ptrace".into(), "frobnicate".into()],
            ..default_seccomp()
        };
        let err = compile(&plan).expect_err("unknown name");
        assert!(err.to_string().contains("frobnicate"), "{err}");
    }

    #[test]
    fn duplicates_and_ioctl_in_deny_list() {
        let names: Vec<String> = ["mount", "mount", "ioctl"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(resolve_syscalls(&names).expect("resolve").len(), 2);
        // `ioctl` denied outright wins over per-request rules.
        let plan = SeccompPlan {
            deny: names,
            ..default_seccomp()
        };
        let program = compile(&plan).expect("compile");
        in_child(|| {
            install(&program).map_err(|e| e.to_string())?;
            let f = devnull()?;
            let mut n = 0i32;
            // SAFETY: FIONREAD writes an int into `n`.
            let rc =
                unsafe { libc::ioctl(std::os::fd::AsRawFd::as_raw_fd(&f), libc::FIONREAD, &mut n) };
            expect_errno("FIONREAD", rc.into(), libc::EPERM)
        });
    }

    /// Calls a syscall with arguments that are invalid for all of them (so an unfiltered call
    /// fails harmlessly) and returns (ret, errno).
    fn call_invalid(nr: i64) -> (i64, i32) {
        let bad = u64::MAX;
        // SAFETY: every argument is invalid (-1 descriptors, flags, pointers); the kernel
        // rejects the call or the filter does.
        let ret = unsafe { libc::syscall(nr, bad, bad, bad, bad, bad, bad) };
        (ret, errno())
    }

    #[test]
    fn denies_the_default_list_and_allows_the_rest() {
        let plan = default_seccomp();
        let program = compile(&plan).expect("compile");
        let denied = resolve_syscalls(&plan.deny).expect("resolve");
        assert_eq!(denied.len(), plan.deny.len());
        // Control: without the filter, the same calls fail some other way (or the check below
        // proves nothing). Some may be EPERM for policy reasons; those must not be all of them.
        let mut control_eperm = Vec::new();
        for (name, nr) in &denied {
            let name = name.clone();
            let nr = *nr;
            if let Outcome::Exited { code: 0, .. } = run_in_child(|| match call_invalid(nr) {
                (-1, libc::EPERM) => Ok(()),
                other => Err(format!("{other:?}")),
            }) {
                control_eperm.push(name);
            }
        }
        eprintln!("EPERM without the filter too: {control_eperm:?}");
        assert!(control_eperm.len() < denied.len() / 2, "{control_eperm:?}");

        let denied_in_child = denied.clone();
        in_child(move || {
            // SAFETY: getpid has no arguments.
            let pid = unsafe { libc::getpid() };
            install(&program).map_err(|e| e.to_string())?;
            for (name, nr) in &denied_in_child {
                let (ret, e) = call_invalid(*nr);
                if (ret, e) != (-1, libc::EPERM) {
                    return Err(format!("{name}: ret {ret} errno {e}"));
                }
            }
            // SAFETY: getpid has no arguments.
            if unsafe { libc::getpid() } != pid {
                return Err("getpid changed".into());
            }
            // SAFETY: PTRACE_TRACEME takes no pointers.
            let rc = unsafe { libc::ptrace(libc::PTRACE_TRACEME, 0, 0, 0) };
            expect_errno("ptrace(TRACEME)", rc, libc::EPERM)?;
            // SAFETY: valid NUL-terminated strings; the target does not exist (ENOENT unfiltered).
            let rc = unsafe {
                libc::mount(
                    c"none".as_ptr(),
                    c"/nonexistent-vetto".as_ptr(),
                    c"tmpfs".as_ptr(),
                    0,
                    std::ptr::null(),
                )
            };
            expect_errno("mount", rc.into(), libc::EPERM)?;
            // Allowed syscalls still work.
            std::fs::read("/proc/self/status").map_err(|e| format!("read: {e}"))?;
            Ok(())
        });
    }

    #[test]
    fn ioctl_requests_compared_on_32_bits() {
        let program = compile(&default_seccomp()).expect("compile");
        // Unfiltered, TIOCSTI on /dev/null is ENOTTY.
        in_child(|| {
            let f = devnull()?;
            expect_errno(
                "TIOCSTI unfiltered",
                ioctl(std::os::fd::AsRawFd::as_raw_fd(&f), TIOCSTI),
                libc::ENOTTY,
            )
        });
        in_child(|| {
            let f = devnull()?;
            let fd = std::os::fd::AsRawFd::as_raw_fd(&f);
            install(&program).map_err(|e| e.to_string())?;
            expect_errno("TIOCSTI", ioctl(fd, TIOCSTI), libc::EPERM)?;
            expect_errno(
                "TIOCSTI with high bits",
                ioctl(fd, 0x1_0000_0000 | TIOCSTI),
                libc::EPERM,
            )?;
            expect_errno("TIOCLINUX", ioctl(fd, 0x541C), libc::EPERM)?;
            expect_errno("TIOCSTI on fd 0", ioctl(0, TIOCSTI), libc::EPERM)?;
            // Other requests go through to the driver.
            expect_errno("TCGETS", ioctl(fd, TCGETS), libc::ENOTTY)?;
            Ok(())
        });
    }

    #[test]
    fn ioctl_rules_only() {
        let plan = SeccompPlan {
            deny: vec![],
            deny_ioctls: vec![IoctlDeny {
                name: "TIOCSTI".into(),
                request: 0x5412,
            }],
            deny_args: vec![],
            deny_errno: vec![],
            deny_x32: false,
            deny_foreign_arch: false,
        };
        let program = compile(&plan).expect("compile");
        in_child(|| {
            let f = devnull()?;
            let fd = std::os::fd::AsRawFd::as_raw_fd(&f);
            install(&program).map_err(|e| e.to_string())?;
            expect_errno("TIOCSTI", ioctl(fd, TIOCSTI), libc::EPERM)?;
            expect_errno("TIOCLINUX", ioctl(fd, 0x541C), libc::ENOTTY)
        });
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn x32_syscalls_are_denied() {
        let nr = i64::from(X32_SYSCALL_BIT) | libc::SYS_getpid;
        // Unfiltered: the pid (x32 enabled) or ENOSYS, never EPERM.
        in_child(|| {
            // SAFETY: x32 getpid takes no arguments.
            let ret = unsafe { libc::syscall(nr) };
            if ret == -1 && errno() == libc::EPERM {
                return Err("EPERM without a filter".into());
            }
            Ok(())
        });
        let with = compile(&default_seccomp()).expect("compile");
        in_child(|| {
            install(&with).map_err(|e| e.to_string())?;
            // SAFETY: as above.
            expect_errno("x32 getpid", unsafe { libc::syscall(nr) }, libc::EPERM)
        });
        // deny_x32 = false: seccompiler alone lets x32 through (its numbers never match).
        let without = compile(&SeccompPlan {
            deny_x32: false,
            ..default_seccomp()
        })
        .expect("compile");
        in_child(|| {
            install(&without).map_err(|e| e.to_string())?;
            // SAFETY: as above.
            let ret = unsafe { libc::syscall(nr) };
            if ret == -1 && errno() == libc::EPERM {
                return Err("x32 denied although deny_x32 is false".into());
            }
            Ok(())
        });
    }

    /// i386 `getpid` through `int 0x80`; returns eax (pid or -errno).
    #[cfg(target_arch = "x86_64")]
    fn int80_getpid() -> i32 {
        let mut eax: i32 = 20;
        // SAFETY: `int 0x80` with eax=20 is the i386 getpid; it reads no memory. r8-r11 are
        // declared clobbered because older kernels did not preserve them.
        unsafe {
            std::arch::asm!(
                "int 0x80",
                inlateout("eax") eax,
                lateout("r8") _, lateout("r9") _, lateout("r10") _, lateout("r11") _,
                options(nostack)
            );
        }
        eax
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn foreign_arch_is_denied_not_killed() {
        // Does this kernel run i386 syscalls at all?
        let supported = matches!(
            run_in_child(|| {
                // SAFETY: getpid has no arguments.
                let pid = unsafe { libc::getpid() };
                if int80_getpid() == pid {
                    Ok(())
                } else {
                    Err("no ia32".into())
                }
            }),
            Outcome::Exited { code: 0, .. }
        );
        if !supported {
            eprintln!("ia32 emulation unavailable: skipping");
            return;
        }
        let with = compile(&default_seccomp()).expect("compile");
        in_child(|| {
            install(&with).map_err(|e| e.to_string())?;
            match int80_getpid() {
                e if e == -libc::EPERM => Ok(()),
                other => Err(format!("int 0x80 getpid returned {other}")),
            }
        });
        // Without our prologue, seccompiler kills the process.
        let without = compile(&SeccompPlan {
            deny_foreign_arch: false,
            ..default_seccomp()
        })
        .expect("compile");
        let outcome = run_in_child(|| {
            install(&without).map_err(|e| e.to_string())?;
            int80_getpid();
            Err("survived".into())
        });
        assert!(
            matches!(outcome, Outcome::Signaled(libc::SIGSYS)),
            "{outcome:?}"
        );
    }
}
