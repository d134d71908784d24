//! The capabilities section of `vetto run`: what the init holds, all dropped before exec.
//!
//! `vetto-shim`'s capability rules stay in [`crate::container`] (`PRIVILEGED_CAPS`,
//! `canonical_capabilities`, `harden_process`): it judges a set the bundle brings, where
//! `vetto run` writes its own.

use crate::resolve::Source;

use super::Builder;

/// Held by the init only: CAP_SYS_ADMIN (of the sandbox's user namespace) for the masks and
/// protections it mounts; all are dropped before the command runs.
pub const INIT_CAPS: &[&str] = &[
    "CAP_SYS_ADMIN",
    "CAP_NET_ADMIN",
    "CAP_SETPCAP",
    "CAP_SETUID",
    "CAP_SETGID",
    "CAP_SETFCAP",
];

/// The note: nothing is left to the command.
pub(super) fn note(b: &mut Builder) {
    b.note(
        "process",
        "capabilities",
        "all dropped before exec (CapEff = CapBnd = 0), no_new_privs",
        Source::Builtin("layout".into()),
    );
}
