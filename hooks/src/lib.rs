//! vetto's in-container half: turns a plan into kernel state in the calling process.
//!
//! [`apply`] is the one hardening order, called by both binaries' executors; each step is one
//! mechanism with its own module and error type: [`mounts`] (masks and protections through
//! descriptors), [`netlo`] (loopback up, interfaces listed), [`listen`] (the broker's
//! listeners), [`identity`] (the uid shown inside), [`process`] (`no_new_privs`,
//! capabilities, descriptors, signals), [`landlock`] (filesystem ruleset), [`seccomp`]
//! (vetto's deny-list) and [`oci_seccomp`] (a foreign bundle's own profile), both emitted by
//! [`bpf`] with names resolved by [`syscalls`]. [`init`] is `vetto run`'s PID 1: it calls
//! [`apply`], then forks the command and reaps.
//!
//! Everything here acts on the calling thread (Landlock and seccomp are per-thread), so the
//! caller must be single-threaded.

pub mod apply;
pub mod bpf;
pub mod fsview;
pub mod identity;
pub mod init;
pub mod landlock;
pub mod listen;
pub mod mounts;
pub mod netlo;
pub mod notify;
pub mod oci_seccomp;
pub mod process;
pub mod seccomp;
pub mod stdio;
pub mod syscalls;

#[cfg(test)]
mod testutil;

pub use crate::apply::{apply, Applied, HardenError, Hardening};
pub use crate::landlock::{AppliedLandlock, LandlockError};
pub use crate::netlo::NetError;
pub use crate::process::{CapsDropped, ProcessError};
pub use crate::seccomp::SeccompError;
pub use crate::syscalls::SyscallError;
