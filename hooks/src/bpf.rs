//! The one classic-BPF emitter for seccomp filters: opcodes, `struct seccomp_data` offsets,
//! return values, and a small assembler with labels. Both filters are emitted with it:
//! vetto's deny-list prologue ([`crate::seccomp`], whose rule body seccompiler compiles) and a
//! bundle's own OCI profile ([`crate::oci_seccomp`]).

use seccompiler::sock_filter;

/// The kernel's limit on a filter's length.
pub const BPF_MAX_LEN: usize = 4096;

// Classic BPF opcodes (<linux/bpf_common.h>).
/// `BPF_LD | BPF_W | BPF_ABS`.
pub const LD_W_ABS: u16 = 0x20;
/// `BPF_ALU | BPF_AND | BPF_K`.
pub const ALU_AND_K: u16 = 0x54;
/// `BPF_JMP | BPF_JA`.
pub const JA: u16 = 0x05;
/// `BPF_JMP | BPF_JEQ | BPF_K`.
pub const JEQ_K: u16 = 0x15;
/// `BPF_JMP | BPF_JGT | BPF_K`.
pub const JGT_K: u16 = 0x25;
/// `BPF_JMP | BPF_JGE | BPF_K`.
pub const JGE_K: u16 = 0x35;
/// `BPF_RET | BPF_K`.
pub const RET_K: u16 = 0x06;

// `struct seccomp_data` offsets.
/// The syscall number.
pub const DATA_NR: u32 = 0;
/// The `AUDIT_ARCH_*` of the calling ABI.
pub const DATA_ARCH: u32 = 4;
/// The first argument (each is 8 bytes, low half first on little-endian).
pub const DATA_ARGS: u32 = 16;

/// `AUDIT_ARCH_*` of the native architecture (<linux/audit.h>).
#[cfg(target_arch = "x86_64")]
pub const AUDIT_ARCH: u32 = 62 | 0x8000_0000 | 0x4000_0000;
/// `AUDIT_ARCH_*` of the native architecture (<linux/audit.h>).
#[cfg(target_arch = "aarch64")]
pub const AUDIT_ARCH: u32 = 183 | 0x8000_0000 | 0x4000_0000;

/// The x32 ABI marks its syscall numbers with this bit.
pub const X32_SYSCALL_BIT: u32 = 0x4000_0000;

// Return values (<linux/seccomp.h>).
/// Kill the process.
pub const RET_KILL_PROCESS: u32 = 0x8000_0000;
/// Kill the thread.
pub const RET_KILL_THREAD: u32 = 0;
/// SIGSYS.
pub const RET_TRAP: u32 = 0x0003_0000;
/// Fail with the errno in the low 16 bits.
pub const RET_ERRNO: u32 = 0x0005_0000;
/// Notify a tracer.
pub const RET_TRACE: u32 = 0x7ff0_0000;
/// Allow and log.
pub const RET_LOG: u32 = 0x7ffc_0000;
/// Allow.
pub const RET_ALLOW: u32 = 0x7fff_0000;

/// Fail the syscall with `errno`.
pub const fn ret_errno(errno: u32) -> u32 {
    RET_ERRNO | (errno & 0xffff)
}

/// A jump target inside the program being assembled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// The next instruction.
    Next,
    /// A label.
    Label(usize),
}

#[derive(Debug, Clone, Copy)]
enum Ins {
    Stmt(u16, u32),
    Jump(u16, u32, Target, Target),
    Always(usize),
    Label(usize),
}

/// A program being assembled: instructions and labels, jumps resolved by [`Asm::finish`].
#[derive(Default)]
pub struct Asm {
    ins: Vec<Ins>,
    labels: usize,
}

impl Asm {
    /// A new label, placed later with [`Asm::place`].
    pub fn label(&mut self) -> usize {
        self.labels += 1;
        self.labels - 1
    }
    /// A statement.
    pub fn stmt(&mut self, code: u16, k: u32) {
        self.ins.push(Ins::Stmt(code, k));
    }
    /// A conditional jump.
    pub fn jump(&mut self, code: u16, k: u32, jt: Target, jf: Target) {
        self.ins.push(Ins::Jump(code, k, jt, jf));
    }
    /// Place label `l` here.
    pub fn place(&mut self, l: usize) {
        self.ins.push(Ins::Label(l));
    }

    /// An unconditional jump to label `l`.
    pub fn always(&mut self, l: usize) {
        self.ins.push(Ins::Always(l));
    }

    /// Resolves labels; `None` if a conditional jump is longer than 255.
    pub fn finish(self) -> Option<Vec<sock_filter>> {
        let mut pos = vec![0usize; self.labels];
        let mut n = 0usize;
        for i in &self.ins {
            match i {
                Ins::Label(l) => pos[*l] = n,
                _ => n += 1,
            }
        }
        let mut out = Vec::with_capacity(n);
        for i in &self.ins {
            let here = out.len();
            let off = |t: Target| -> Option<u8> {
                match t {
                    Target::Next => Some(0),
                    Target::Label(l) => u8::try_from(pos[l].checked_sub(here + 1)?).ok(),
                }
            };
            match *i {
                Ins::Label(_) => {}
                Ins::Stmt(code, k) => out.push(sock_filter {
                    code,
                    jt: 0,
                    jf: 0,
                    k,
                }),
                Ins::Jump(code, k, jt, jf) => out.push(sock_filter {
                    code,
                    jt: off(jt)?,
                    jf: off(jf)?,
                    k,
                }),
                Ins::Always(l) => out.push(sock_filter {
                    code: JA,
                    jt: 0,
                    jf: 0,
                    k: u32::try_from(pos[l].checked_sub(here + 1)?).ok()?,
                }),
            }
        }
        Some(out)
    }
}
