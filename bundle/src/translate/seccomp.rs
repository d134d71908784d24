//! The seccomp section: vetto's deny-list, the same for `vetto run` and `vetto-shim` (which
//! stacks it on the bundle's own profile), and its notes.

use crate::plan::{default_seccomp, SeccompPlan};
use crate::resolve::Source;

use super::Builder;

/// The deny-list every vetto sandbox and hardened container gets.
pub fn plan() -> SeccompPlan {
    default_seccomp()
}

/// One note for each rule of the deny-list.
pub(super) fn note(b: &mut Builder, seccomp: &SeccompPlan) {
    let src = || Source::Builtin("seccomp deny-list".into());
    for s in &seccomp.deny {
        b.note("seccomp", s, "EPERM", src());
    }
    for i in &seccomp.deny_ioctls {
        b.note("seccomp", format!("ioctl {}", i.name), "EPERM", src());
    }
    for r in &seccomp.deny_args {
        b.note(
            "seccomp",
            &r.syscall,
            format!("EPERM with {}", r.why),
            src(),
        );
    }
    for r in &seccomp.deny_errno {
        b.note(
            "seccomp",
            &r.syscall,
            format!("errno {}: {}", r.errno, r.why),
            src(),
        );
    }
    b.note(
        "seccomp",
        "x32 ABI and foreign architectures",
        "EPERM",
        src(),
    );
}
