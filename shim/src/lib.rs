//! vetto's runtime edge: the `vetto` command line (sandboxed sessions, policy tools, the
//! broker sidecar) and `vetto-shim`, the OCI runtime Docker, Podman and containerd drive
//! ([`oci`]). Both binaries are thin `main`s over this library; libcontainer is reached only
//! through [`engine`], by `vetto run` ([`run`]) and by every `vetto-shim` command alike.

pub mod approvals_cmd;
pub mod audit;
pub mod broker_cmd;
pub mod changes;
pub mod changes_cmd;
pub mod cli;
pub mod connect;
pub mod cpus;
pub mod doctor;
pub mod engine;
pub mod fdpass;
pub mod front;
pub mod fsnet;
pub mod fsonly;
pub mod handoff;
pub mod nested;
pub mod netcheck;
pub mod nsstage;
pub mod oci;
pub mod pids;
pub mod policy_cmd;
pub mod pty;
pub mod rootfs;
pub mod run;
pub mod session;
pub mod sidecar;
pub mod tier;
pub mod userns;
pub mod watch;
