//! A bundle's own OCI seccomp profile (`linux.seccomp`, e.g. Docker's or Podman's default) as
//! a classic-BPF program.
//!
//! libcontainer is built without libseccomp, so it ignores `linux.seccomp`; `vetto-shim`
//! compiles the profile here (in the runtime process, before anything is cloned) and the
//! container's init installs it right before `execve`. seccompiler cannot express a profile
//! (one match action per filter), so this module has its own small assembler:
//!
//! 1. architecture check: only native x86_64 syscalls are matched against the rules. A
//!    syscall of another ABI (i386 `int 0x80`, x32) gets the default action, or `EPERM` when
//!    the default action would let it through (its numbers mean other syscalls, so allowing
//!    it would bypass the rules). 32-bit programs inside such containers therefore fail;
//! 2. one block per syscall number, in profile order, rules with argument conditions before
//!    unconditional ones (the more specific rule wins, as in libseccomp). Conditions of one
//!    rule are ANDed and compare the full 64-bit argument, as libseccomp does on 64-bit
//!    architectures; a rule that compares one argument twice becomes one rule per condition
//!    (ORed), as runc and libcontainer do;
//! 3. the default action.
//!
//! Names this table does not know are skipped, as libseccomp skips names unknown on the
//! architecture. `SCMP_ACT_NOTIFY` (a seccomp agent) is refused: there is no agent.

use std::collections::BTreeMap;

use oci_spec::runtime::{LinuxSeccomp, LinuxSeccompAction, LinuxSeccompOperator};
use seccompiler::sock_filter;
use thiserror::Error;

/// Why a profile cannot be compiled or installed.
#[derive(Debug, Error)]
pub enum OciSeccompError {
    /// Only x86_64 has a full syscall table.
    #[error("OCI seccomp profiles are only supported on x86_64, not {0}")]
    UnsupportedArch(&'static str),
    /// A seccomp agent was asked for.
    #[error("seccomp action SCMP_ACT_NOTIFY (a seccomp agent) is not supported")]
    Notify,
    /// An argument index beyond the six syscall arguments.
    #[error("seccomp rule for `{syscall}`: argument index {index} is out of range (0-5)")]
    ArgIndex {
        /// The syscall.
        syscall: String,
        /// The index.
        index: usize,
    },
    /// An unknown filter flag.
    #[error("unknown seccomp filter flag `{0}`")]
    Flag(String),
    /// A rule block is too long for an 8-bit conditional jump.
    #[error("a seccomp rule has too many argument conditions")]
    RuleTooLong,
    /// The program is longer than the kernel accepts.
    #[error("the seccomp profile compiles to {0} instructions, the kernel accepts at most 4096")]
    TooLong(usize),
    /// seccomp(2) failed.
    #[error("installing the bundle's seccomp profile: {0}")]
    Install(std::io::Error),
}

/// A compiled profile: the program and the `seccomp(2)` flags it asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompiledProfile {
    /// The BPF program.
    pub program: Vec<sock_filter>,
    /// `SECCOMP_FILTER_FLAG_*`.
    pub flags: u32,
}

use crate::bpf::{
    Asm, Target, ALU_AND_K, AUDIT_ARCH, DATA_ARCH, DATA_ARGS, DATA_NR, JEQ_K, JGE_K, JGT_K,
    LD_W_ABS, RET_ALLOW, RET_ERRNO, RET_K, RET_KILL_PROCESS, RET_KILL_THREAD, RET_LOG, RET_TRACE,
    RET_TRAP, X32_SYSCALL_BIT,
};

fn ret_value(action: LinuxSeccompAction, errno: Option<u32>) -> Result<u32, OciSeccompError> {
    let errno = errno.unwrap_or(libc::EPERM as u32) & 0xffff;
    Ok(match action {
        LinuxSeccompAction::ScmpActAllow => RET_ALLOW,
        LinuxSeccompAction::ScmpActErrno => RET_ERRNO | errno,
        LinuxSeccompAction::ScmpActKill | LinuxSeccompAction::ScmpActKillThread => RET_KILL_THREAD,
        LinuxSeccompAction::ScmpActKillProcess => RET_KILL_PROCESS,
        LinuxSeccompAction::ScmpActTrap => RET_TRAP,
        LinuxSeccompAction::ScmpActTrace => RET_TRACE | errno,
        LinuxSeccompAction::ScmpActLog => RET_LOG,
        LinuxSeccompAction::ScmpActNotify => return Err(OciSeccompError::Notify),
    })
}

/// One argument condition; on mismatch, jumps to `fail`.
fn condition(a: &mut Asm, index: usize, op: LinuxSeccompOperator, v1: u64, v2: u64, fail: usize) {
    let lo_off = DATA_ARGS + 8 * index as u32;
    let hi_off = lo_off + 4;
    let hi = |v: u64| (v >> 32) as u32;
    let lo = |v: u64| v as u32;
    let f = Target::Label(fail);
    let ok = a.label();
    let okt = Target::Label(ok);
    use LinuxSeccompOperator as Op;
    use Target::Next;
    match op {
        Op::ScmpCmpEq => {
            a.stmt(LD_W_ABS, hi_off);
            a.jump(JEQ_K, hi(v1), Next, f);
            a.stmt(LD_W_ABS, lo_off);
            a.jump(JEQ_K, lo(v1), Next, f);
        }
        Op::ScmpCmpNe => {
            a.stmt(LD_W_ABS, hi_off);
            a.jump(JEQ_K, hi(v1), Next, okt);
            a.stmt(LD_W_ABS, lo_off);
            a.jump(JEQ_K, lo(v1), f, Next);
        }
        Op::ScmpCmpMaskedEq => {
            // OCI: `value` is the mask, `valueTwo` the value (libseccomp's datum_a, datum_b).
            a.stmt(LD_W_ABS, hi_off);
            a.stmt(ALU_AND_K, hi(v1));
            a.jump(JEQ_K, hi(v2), Next, f);
            a.stmt(LD_W_ABS, lo_off);
            a.stmt(ALU_AND_K, lo(v1));
            a.jump(JEQ_K, lo(v2), Next, f);
        }
        Op::ScmpCmpGt | Op::ScmpCmpGe => {
            a.stmt(LD_W_ABS, hi_off);
            a.jump(JGT_K, hi(v1), okt, Next);
            a.jump(JEQ_K, hi(v1), Next, f);
            a.stmt(LD_W_ABS, lo_off);
            let code = if op == Op::ScmpCmpGt { JGT_K } else { JGE_K };
            a.jump(code, lo(v1), Next, f);
        }
        Op::ScmpCmpLt | Op::ScmpCmpLe => {
            a.stmt(LD_W_ABS, hi_off);
            a.jump(JGE_K, hi(v1), Next, okt);
            a.jump(JGT_K, hi(v1), f, Next);
            a.stmt(LD_W_ABS, lo_off);
            let code = if op == Op::ScmpCmpLt { JGE_K } else { JGT_K };
            a.jump(code, lo(v1), f, Next);
        }
    }
    a.place(ok);
}

fn flag_bits(profile: &LinuxSeccomp) -> Result<u32, OciSeccompError> {
    let mut bits = 0;
    for f in profile.flags().iter().flatten() {
        let name = serde_json::to_value(f)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_else(|| format!("{f:?}"));
        bits |= match name.as_str() {
            "SECCOMP_FILTER_FLAG_LOG" => 2,
            "SECCOMP_FILTER_FLAG_SPEC_ALLOW" => 4,
            // Single-threaded init: synchronising threads is a no-op.
            "SECCOMP_FILTER_FLAG_TSYNC" => 0,
            _ => return Err(OciSeccompError::Flag(name)),
        };
    }
    Ok(bits)
}

/// Compiles a profile for this architecture.
pub fn compile(profile: &LinuxSeccomp) -> Result<CompiledProfile, OciSeccompError> {
    if !cfg!(target_arch = "x86_64") {
        return Err(OciSeccompError::UnsupportedArch(std::env::consts::ARCH));
    }
    let default = ret_value(profile.default_action(), profile.default_errno_ret())?;
    let foreign = if default == RET_ALLOW || default == RET_LOG {
        RET_ERRNO | libc::EPERM as u32
    } else {
        default
    };

    // Rules per syscall number, in first-seen order; conditional rules first.
    struct Rule<'a> {
        ret: u32,
        args: &'a [oci_spec::runtime::LinuxSeccompArg],
    }
    let mut order: Vec<u32> = vec![];
    let mut by_nr: BTreeMap<u32, Vec<Rule<'_>>> = BTreeMap::new();
    for sc in profile.syscalls().iter().flatten() {
        let ret = ret_value(sc.action(), sc.errno_ret())?;
        let args = sc.args().as_deref().unwrap_or(&[]);
        for name in sc.names() {
            let Some(nr) = crate::syscalls::number(name).and_then(|n| u32::try_from(n).ok()) else {
                continue;
            };
            for arg in args {
                if arg.index() > 5 {
                    return Err(OciSeccompError::ArgIndex {
                        syscall: name.clone(),
                        index: arg.index(),
                    });
                }
            }
            if !by_nr.contains_key(&nr) {
                order.push(nr);
            }
            // As libseccomp can compare an argument only once per rule, runc and libcontainer
            // add each condition as a rule of its own when an index repeats: they match as OR.
            let mut seen = 0u8;
            let repeats = args.iter().any(|a| {
                let bit = 1u8 << a.index();
                let dup = seen & bit != 0;
                seen |= bit;
                dup
            });
            let rules = by_nr.entry(nr).or_default();
            if repeats {
                rules.extend(args.iter().map(|a| Rule {
                    ret,
                    args: std::slice::from_ref(a),
                }));
            } else {
                rules.push(Rule { ret, args });
            }
        }
    }

    let mut a = Asm::default();
    let native = a.label();
    a.stmt(LD_W_ABS, DATA_ARCH);
    a.jump(JEQ_K, AUDIT_ARCH, Target::Label(native), Target::Next);
    a.stmt(RET_K, foreign);
    a.place(native);
    a.stmt(LD_W_ABS, DATA_NR);
    let after_x32 = a.label();
    a.jump(
        JGE_K,
        X32_SYSCALL_BIT,
        Target::Next,
        Target::Label(after_x32),
    );
    a.stmt(RET_K, foreign);
    a.place(after_x32);

    for nr in order {
        let Some(rules) = by_nr.get_mut(&nr) else {
            continue;
        };
        rules.sort_by_key(|r| r.args.is_empty());
        let next = a.label();
        let block = a.label();
        a.jump(JEQ_K, nr, Target::Label(block), Target::Next);
        a.always(next);
        a.place(block);
        let mut unconditional = false;
        for r in rules.iter() {
            if r.args.is_empty() {
                a.stmt(RET_K, r.ret);
                unconditional = true;
                break;
            }
            let fail = a.label();
            for arg in r.args {
                condition(
                    &mut a,
                    arg.index(),
                    arg.op(),
                    arg.value(),
                    arg.value_two().unwrap_or(0),
                    fail,
                );
            }
            a.stmt(RET_K, r.ret);
            a.place(fail);
        }
        if !unconditional {
            a.stmt(RET_K, default);
        }
        // A block changes the accumulator only on paths that return; the jump over it keeps
        // the syscall number loaded for the next comparison.
        a.place(next);
    }
    a.stmt(RET_K, default);

    let program = a.finish().ok_or(OciSeccompError::RuleTooLong)?;
    if program.len() > 4096 {
        return Err(OciSeccompError::TooLong(program.len()));
    }
    Ok(CompiledProfile {
        program,
        flags: flag_bits(profile)?,
    })
}

/// Installs a compiled profile on the calling thread. Unlike seccompiler's `apply_filter`,
/// this does not set `no_new_privs`: the kernel then requires `CAP_SYS_ADMIN`, or that the
/// caller set `no_new_privs` itself (what `vetto-shim` arranges, see its documentation).
pub fn install(p: &CompiledProfile) -> Result<(), OciSeccompError> {
    let prog = libc::sock_fprog {
        len: u16::try_from(p.program.len())
            .map_err(|_| OciSeccompError::TooLong(p.program.len()))?,
        // seccompiler's sock_filter has the kernel's layout (u16, u8, u8, u32).
        filter: p.program.as_ptr() as *mut libc::sock_filter,
    };
    // SAFETY: `prog` points at `len` valid instructions that outlive the call; the kernel
    // copies the program.
    let r = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_SET_MODE_FILTER,
            p.flags,
            &prog as *const libc::sock_fprog,
        )
    };
    if r != 0 {
        return Err(OciSeccompError::Install(std::io::Error::last_os_error()));
    }
    Ok(())
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use super::*;
    use crate::testutil::{errno, expect_errno, in_child};

    fn profile(json: &str) -> LinuxSeccomp {
        serde_json::from_str(json).expect("profile json")
    }

    fn install_nnp(p: &CompiledProfile) -> Result<(), String> {
        crate::process::set_no_new_privs().map_err(|e| e.to_string())?;
        install(p).map_err(|e| e.to_string())
    }

    #[test]
    fn allowlist_profile_denies_the_rest_with_its_errno() {
        let p = compile(&profile(
            r#"{"defaultAction":"SCMP_ACT_ERRNO","defaultErrnoRet":38,
                "syscalls":[{"names":["read","write","exit","exit_group","rt_sigreturn",
                  "brk","mmap","munmap","futex","getpid","sigaltstack","rt_sigprocmask",
                  "madvise","close","sched_yield","clock_gettime"],"action":"SCMP_ACT_ALLOW"},
                  {"names":["getppid"],"action":"SCMP_ACT_ERRNO","errnoRet":13}]}"#,
        ))
        .expect("compile");
        in_child(|| {
            install_nnp(&p)?;
            // SAFETY: syscalls without memory arguments.
            expect_errno("getuid", unsafe { libc::syscall(libc::SYS_getuid) }, 38)?;
            // SAFETY: as above.
            expect_errno("getppid", unsafe { libc::syscall(libc::SYS_getppid) }, 13)?;
            // SAFETY: as above.
            let pid = unsafe { libc::syscall(libc::SYS_getpid) };
            if pid <= 0 {
                return Err(format!("getpid allowed but returned {pid} ({})", errno()));
            }
            Ok(())
        });
    }

    #[test]
    fn argument_conditions_compare_64_bits() {
        // personality(2) allowed for 0 and 8 only (as in Docker's profile); kill(2) allowed
        // only for signal 0 (EQ), dup(2) denied for fds >= 100 (GE), umask for masks with
        // bit 0o002 set (MASKED_EQ).
        let p = compile(&profile(
            r#"{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[
                {"names":["personality"],"action":"SCMP_ACT_ALLOW","args":[{"index":0,"value":0,"op":"SCMP_CMP_EQ"}]},
                {"names":["personality"],"action":"SCMP_ACT_ALLOW","args":[{"index":0,"value":8,"op":"SCMP_CMP_EQ"}]},
                {"names":["personality"],"action":"SCMP_ACT_ERRNO","errnoRet":1},
                {"names":["kill"],"action":"SCMP_ACT_ERRNO","errnoRet":22,"args":[{"index":1,"value":0,"op":"SCMP_CMP_NE"}]},
                {"names":["dup"],"action":"SCMP_ACT_ERRNO","errnoRet":24,"args":[{"index":0,"value":100,"op":"SCMP_CMP_GE"}]},
                {"names":["umask"],"action":"SCMP_ACT_ERRNO","errnoRet":21,"args":[{"index":0,"value":2,"valueTwo":2,"op":"SCMP_CMP_MASKED_EQ"}]}
            ]}"#,
        ))
        .expect("compile");
        in_child(|| {
            install_nnp(&p)?;
            // SAFETY: syscalls with integer arguments only, throughout.
            unsafe {
                if libc::syscall(libc::SYS_personality, 0xffff_ffffu64) < 0 {
                    // 0xffffffff queries; it is neither 0 nor 8: denied.
                    if errno() != libc::EPERM {
                        return Err(format!("personality(query): errno {}", errno()));
                    }
                } else {
                    return Err("personality(0xffffffff) must be denied".into());
                }
                // High bits set: not equal to 0 although the low word is.
                expect_errno(
                    "personality(1<<32)",
                    libc::syscall(libc::SYS_personality, 1u64 << 32),
                    libc::EPERM,
                )?;
                if libc::syscall(libc::SYS_personality, 0u64) < 0 {
                    return Err(format!("personality(0) denied: {}", errno()));
                }
                if libc::syscall(libc::SYS_kill, libc::getpid(), 0) != 0 {
                    return Err("kill(self, 0) must pass".into());
                }
                expect_errno(
                    "kill(self, SIGCONT)",
                    libc::syscall(libc::SYS_kill, libc::getpid(), libc::SIGCONT),
                    22,
                )?;
                expect_errno("dup(100)", libc::syscall(libc::SYS_dup, 100), 24)?;
                expect_errno("dup(1<<32)", libc::syscall(libc::SYS_dup, 1u64 << 32), 24)?;
                // dup(99): passes the filter, then EBADF from the kernel.
                expect_errno("dup(99)", libc::syscall(libc::SYS_dup, 99), libc::EBADF)?;
                expect_errno("umask(0o022)", libc::syscall(libc::SYS_umask, 0o022), 21)?;
                if libc::syscall(libc::SYS_umask, 0o020) < 0 {
                    return Err("umask(0o020) must pass".into());
                }
            }
            Ok(())
        });
    }

    #[test]
    fn a_repeated_argument_index_means_or_as_in_runc() {
        // kill(2) denied when the signal is 10 or 12 (two conditions on argument 1).
        let p = compile(&profile(
            r#"{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"names":["kill"],"action":"SCMP_ACT_ERRNO","errnoRet":22,
                "args":[{"index":1,"value":10,"op":"SCMP_CMP_EQ"},{"index":1,"value":12,"op":"SCMP_CMP_EQ"}]}]}"#,
        ))
        .expect("compile");
        in_child(|| {
            install_nnp(&p)?;
            // SAFETY: kill with integers; signal 0 only probes our own pid.
            let (r10, r12, r0) = unsafe {
                let pid = libc::getpid();
                let r10 = libc::syscall(libc::SYS_kill, pid, 10);
                let e10 = errno();
                let r12 = libc::syscall(libc::SYS_kill, pid, 12);
                let e12 = errno();
                let r0 = libc::syscall(libc::SYS_kill, pid, 0);
                ((r10, e10), (r12, e12), r0)
            };
            if r10 != (-1, 22) || r12 != (-1, 22) || r0 != 0 {
                return Err(format!("kill 10: {r10:?}, kill 12: {r12:?}, kill 0: {r0}"));
            }
            Ok(())
        });
    }

    #[test]
    fn denylist_profile_refuses_foreign_abis() {
        // Default allow: an x32 number must not slip through as "not in the list".
        let p = compile(&profile(
            r#"{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"names":["getppid"],"action":"SCMP_ACT_ERRNO"}]}"#,
        ))
        .expect("compile");
        in_child(|| {
            install_nnp(&p)?;
            // SAFETY: an integer-only syscall.
            let x32 = unsafe { libc::syscall(libc::SYS_getpid | 0x4000_0000) };
            expect_errno("x32 getpid", x32, libc::EPERM)?;
            // SAFETY: an integer-only syscall.
            let ppid = unsafe { libc::syscall(libc::SYS_getppid) };
            expect_errno("getppid", ppid, libc::EPERM)
        });
    }

    #[test]
    fn unknown_names_are_skipped_and_bad_input_named() {
        assert!(compile(&profile(
            r#"{"defaultAction":"SCMP_ACT_ERRNO","syscalls":[{"names":["no_such_call","read"],"action":"SCMP_ACT_ALLOW"}]}"#
        ))
        .is_ok());
        let e = compile(&profile(r#"{"defaultAction":"SCMP_ACT_NOTIFY"}"#)).expect_err("notify");
        assert!(e.to_string().contains("SCMP_ACT_NOTIFY"));
        let e = compile(&profile(
            r#"{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"names":["read"],"action":"SCMP_ACT_ERRNO","args":[{"index":6,"value":0,"op":"SCMP_CMP_EQ"}]}]}"#,
        ))
        .expect_err("index");
        assert!(e.to_string().contains("argument index 6"), "{e}");
    }

    #[test]
    fn table_is_sorted_and_unique() {
        let t = crate::syscalls::x86_64::TABLE;
        assert!(t.windows(2).all(|w| w[0].1 < w[1].1));
        assert!(t.iter().any(|&(n, nr)| n == "ptrace" && nr == 101));
        assert!(t.iter().any(|&(n, nr)| n == "clone3" && nr == 435));
    }
}
