//! The one hardening order. Both front doors call [`apply`]: `vetto run`'s init (right before
//! it forks the command and stays PID 1) and `vetto-shim`'s executor (in `validate()`, before
//! the container reports ready, so a failure fails `create`). What differs between them is
//! data — which steps a [`Hardening`] carries — never the order:
//!
//! 1. **binds checked**: each host object a foreign bundle's bind was judged by is still the
//!    one mounted (device and inode);
//! 2. **masks and protections** mounted through descriptors (needs `CAP_SYS_ADMIN` of the
//!    sandbox's user namespace, dropped below);
//! 3. **network**: `lo` brought up (needs `CAP_NET_ADMIN`), or the namespace checked to hold
//!    nothing but `lo`;
//! 4. **listeners** for the broker opened inside and handed over;
//! 5. **identity** switched (a nested user namespace; needs `CAP_SETFCAP`);
//! 6. **no_new_privs** (where libcontainer did not already set it);
//! 7. **Landlock**;
//! 8. **capabilities dropped** (all, checked to be gone), then non-dumpable;
//! 9. **PDEATHSIG** re-armed and the supervisor checked (the identity switch cleared it);
//! 10. **seccomp filters** installed in order (a bundle's OCI profile, then vetto's deny-list),
//!     after everything above so none of it is refused by them;
//! 11. **capabilities narrowed** to a given set, where they were widened only so that a filter
//!     could be installed without `no_new_privs` (a foreign bundle's profile).
//!
//! Filters are compiled by the caller before the container is cloned, so a bad deny-list or
//! profile fails before anything is created. An error can leave the process partly
//! restricted: the caller must then exit, not run the command.

use std::os::fd::RawFd;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;

use seccompiler::BpfProgram;
use thiserror::Error;
use vetto_bundle::container::BindCheck;
use vetto_bundle::plan::{InitMount, LandlockPlan, Listener};

use crate::landlock::{AppliedLandlock, LandlockError};
use crate::oci_seccomp::{CompiledProfile, OciSeccompError};
use crate::process::{CapSets, CapsDropped, ProcessError};
use crate::{identity, landlock, listen, mounts, netlo, notify, oci_seccomp, process, seccomp};

/// A control that could not be established: the command does not run.
#[derive(Debug, Error)]
pub enum HardenError {
    /// A bind's host object changed between the check and the mount.
    #[error("bind {}: the mounted file or directory is not the host object that was checked (a path on the way to it was renamed or replaced during create)", path.display())]
    BindReplaced {
        /// Path inside the container.
        path: PathBuf,
    },
    /// The network namespace joined is not the one made and checked for the sandbox.
    #[error("network: the sandbox is not in the network namespace made for it (namespace {found}, expected {expected})")]
    ForeignNetns {
        /// What /proc/self/ns/net is.
        found: String,
        /// What it must be.
        expected: String,
    },
    /// A secret mask or a protection could not be placed.
    #[error("masks and protected paths: {0}")]
    Mount(#[from] mounts::MountError),
    /// Bringing `lo` up, or listing the interfaces, failed.
    #[error("network: {0}")]
    Net(#[from] netlo::NetError),
    /// The network namespace holds an interface the policy does not allow.
    #[error("network: the policy's network mode is {mode:?} (no network but the broker on lo) but the container has network interface {interface:?}: start it with no network (--network none)")]
    ForeignInterface {
        /// The policy's network mode.
        mode: String,
        /// The interface found.
        interface: String,
    },
    /// The broker's listeners could not be created or handed over.
    #[error("network: {0}")]
    Listen(#[from] listen::ListenError),
    /// The identity switch failed.
    #[error(transparent)]
    Identity(#[from] identity::IdentityError),
    /// `no_new_privs`, the capability drop or narrowing failed.
    #[error("capabilities: {0}")]
    Process(#[from] ProcessError),
    /// Capabilities remain after the drop.
    #[error("capabilities: still held: CapEff={effective:x} CapBnd={bounding:x}")]
    CapsRemain {
        /// CapEff.
        effective: u64,
        /// CapBnd.
        bounding: u64,
    },
    /// Landlock could not be applied.
    #[error(transparent)]
    Landlock(#[from] LandlockError),
    /// vetto's deny-list could not be installed.
    #[error("seccomp: {0}")]
    Seccomp(#[from] seccomp::SeccompError),
    /// The bundle's OCI seccomp profile could not be installed.
    #[error(transparent)]
    OciSeccomp(#[from] OciSeccompError),
    /// FS-ONLY's connect() notification could not be set up.
    #[error("network (FS-ONLY broker): {0}")]
    Notify(#[from] crate::notify::NotifyError),
    /// `PR_SET_PDEATHSIG` failed.
    #[error("PR_SET_PDEATHSIG: {0}")]
    ParentDeath(#[source] nix::Error),
    /// The supervisor is gone: nothing must run unsupervised.
    #[error("the vetto supervisor exited during setup")]
    SupervisorGone,
}

/// Step 3.
#[derive(Debug, Clone, Default)]
pub enum Network {
    /// Leave the namespace as it is.
    #[default]
    Untouched,
    /// Bring `lo` up.
    LoopbackUp,
    /// Refuse to go on if any interface but `lo` exists; the policy's network mode, for the
    /// message.
    LoopbackOnly(String),
}

/// Step 4: the broker's listening sockets, opened inside and sent over `channel`.
#[derive(Debug, Clone)]
pub struct Listeners {
    /// What to listen on.
    pub listeners: Vec<Listener>,
    /// Also open the socket for published ports.
    pub publish: bool,
    /// The init's end of the socket they are sent over.
    pub channel: RawFd,
}

/// Steps 8 and 11: how the capabilities end.
#[derive(Debug, Clone, Copy, Default)]
pub enum Capabilities {
    /// As libcontainer left them (the bundle's own sets).
    #[default]
    AsSet,
    /// All dropped before the filters (bounding set, ambient, securebits locked), checked to
    /// be gone, and the process made non-dumpable.
    DropAll,
    /// Narrowed to these sets after the filters (they were widened only to install them).
    NarrowAfterFilters(CapSets),
    /// Every capability held dropped and checked to be gone, the bounding set left as it is
    /// (an unprivileged process in the host's user namespace cannot clear it; with
    /// no_new_privs no exec can raise a capability from it): the FS-ONLY tier's caller that
    /// is not root.
    DropHeld,
}

/// One seccomp filter, compiled before the clone.
#[derive(Clone)]
pub enum Filter {
    /// A foreign bundle's own OCI profile.
    OciProfile(CompiledProfile),
    /// vetto's deny-list.
    DenyList(BpfProgram),
    /// FS-ONLY with the broker: every `connect()` stops for the supervisor
    /// ([`crate::notify`]); the listener is sent over `send_to`, which is then closed.
    NotifyConnect {
        /// The filter ([`crate::notify::connect_filter`]).
        program: BpfProgram,
        /// A unix socket to the supervisor.
        send_to: RawFd,
    },
}

/// Everything [`apply`] does, step by step; an empty step is skipped.
#[derive(Clone, Default)]
pub struct Hardening {
    /// Step 1.
    pub binds: Vec<BindCheck>,
    /// Step 2.
    pub mounts: Vec<InitMount>,
    /// Step 3: the network namespace this process must be in (nsfs device and inode), when
    /// it was made ahead of time and joined by path (`vetto run`), checked before anything
    /// is done in it.
    pub netns: Option<(u64, u64)>,
    /// Step 3.
    pub network: Network,
    /// Step 4.
    pub listeners: Option<Listeners>,
    /// Step 5: (uid, gid) to show inside.
    pub identity: Option<(u32, u32)>,
    /// Step 6.
    pub no_new_privs: bool,
    /// Step 7.
    pub landlock: Option<LandlockPlan>,
    /// Steps 8 and 11.
    pub capabilities: Capabilities,
    /// Step 9: re-arm PDEATHSIG, and check the supervisor through its pidfd (if any).
    pub parent_death: Option<Option<RawFd>>,
    /// Step 10, in this order.
    pub filters: Vec<Filter>,
}

/// What [`apply`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Applied {
    /// The Landlock ruleset, if one was applied.
    pub landlock: Option<AppliedLandlock>,
    /// What the capability drop could do, if all were dropped.
    pub caps: Option<CapsDropped>,
    /// Seccomp filters installed.
    pub filters: usize,
}

/// Arm PDEATHSIG(SIGKILL) and make sure the supervisor is still alive (a pidfd polls readable
/// once its process has exited).
pub fn arm_parent_death(pidfd: Option<RawFd>) -> Result<(), HardenError> {
    nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL)
        .map_err(HardenError::ParentDeath)?;
    if let Some(fd) = pidfd {
        let mut p = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd, zero timeout.
        let r = unsafe { libc::poll(&mut p, 1, 0) };
        if r > 0 && p.revents & (libc::POLLIN | libc::POLLHUP) != 0 {
            return Err(HardenError::SupervisorGone);
        }
    }
    Ok(())
}

fn check_binds(binds: &[BindCheck]) -> Result<(), HardenError> {
    for b in binds {
        let same = std::fs::metadata(&b.path).is_ok_and(|m| m.dev() == b.dev && m.ino() == b.ino);
        if !same {
            return Err(HardenError::BindReplaced {
                path: b.path.clone(),
            });
        }
    }
    Ok(())
}

/// Applies `h` to the calling (single-threaded) process in the order of the module doc.
pub fn apply(h: &Hardening) -> Result<Applied, HardenError> {
    let mut done = Applied::default();
    check_binds(&h.binds)?;
    mounts::apply(&h.mounts)?;
    if let Some(want) = h.netns {
        let found = std::fs::metadata("/proc/self/ns/net").map(|m| (m.dev(), m.ino()));
        if found.as_ref().ok() != Some(&want) {
            return Err(HardenError::ForeignNetns {
                found: match found {
                    Ok((d, i)) => format!("{d}:{i}"),
                    Err(e) => e.to_string(),
                },
                expected: format!("{}:{}", want.0, want.1),
            });
        }
    }
    match &h.network {
        Network::Untouched => {}
        Network::LoopbackUp => netlo::loopback_up()?,
        Network::LoopbackOnly(mode) => {
            if let Some(other) = netlo::interface_names()?.into_iter().find(|n| n != "lo") {
                return Err(HardenError::ForeignInterface {
                    mode: mode.clone(),
                    interface: other,
                });
            }
        }
    }
    if let Some(l) = &h.listeners {
        listen::open_and_send(&l.listeners, l.publish, l.channel)?;
    }
    if let Some((uid, gid)) = h.identity {
        identity::switch_to(uid, gid)?;
    }
    if h.no_new_privs {
        process::set_no_new_privs()?;
    }
    if let Some(plan) = &h.landlock {
        done.landlock = Some(landlock::apply(plan)?);
    }
    if let Capabilities::DropAll | Capabilities::DropHeld = h.capabilities {
        done.caps = Some(process::drop_all_capabilities()?);
        // Non-dumpable: the sandbox cannot open /proc/1/{mem,exe,environ} of its init.
        // SAFETY: integer-only prctl.
        unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) };
        let (effective, bounding) = process::read_caps()?;
        let bounding_must_be_empty = matches!(h.capabilities, Capabilities::DropAll);
        if effective != 0 || (bounding_must_be_empty && bounding != 0) {
            return Err(HardenError::CapsRemain {
                effective,
                bounding,
            });
        }
    }
    if let Some(pidfd) = h.parent_death {
        arm_parent_death(pidfd)?;
    }
    for f in &h.filters {
        match f {
            Filter::OciProfile(p) => oci_seccomp::install(p)?,
            Filter::DenyList(p) => seccomp::install(p)?,
            Filter::NotifyConnect { program, send_to } => {
                let listener = notify::install_with_listener(program)?;
                notify::send_listener(*send_to, &listener)?;
                // SAFETY: the socket was handed to this step alone; nothing uses it after.
                unsafe { libc::close(*send_to) };
            }
        }
        done.filters += 1;
    }
    if let Capabilities::NarrowAfterFilters(t) = &h.capabilities {
        process::set_capabilities(t)?;
    }
    Ok(done)
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use vetto_bundle::plan::{default_seccomp, FsAccess, LandlockRule};

    use super::*;
    use crate::testutil::{enter_user_and_net_ns, expect_errno, in_child, TempDir};

    fn rule(path: impl Into<PathBuf>, access: FsAccess) -> LandlockRule {
        LandlockRule {
            path: path.into(),
            access,
            optional: true,
        }
    }

    fn hardening(rules: Vec<LandlockRule>) -> Hardening {
        Hardening {
            netns: None,
            network: Network::LoopbackUp,
            no_new_privs: true,
            landlock: Some(LandlockPlan {
                rules,
                min_abi: 1,
                scope: true,
            }),
            capabilities: Capabilities::DropAll,
            parent_death: Some(None),
            filters: vec![Filter::DenyList(
                seccomp::compile(&default_seccomp()).expect("the default deny-list compiles"),
            )],
            ..Hardening::default()
        }
    }

    #[test]
    fn apply_establishes_every_control_of_vetto_run() {
        let ro = TempDir::new("apply-ro");
        let rw = TempDir::new("apply-rw");
        let mut rules: Vec<LandlockRule> = ["/usr", "/lib", "/lib64", "/bin", "/etc", "/proc"]
            .into_iter()
            .map(|p| rule(p, FsAccess::ReadExec))
            .collect();
        rules.push(rule(ro.path(), FsAccess::ReadExec));
        rules.push(rule(rw.path(), FsAccess::ReadWrite));
        let h = hardening(rules);
        let (ro, rw) = (ro.path().to_path_buf(), rw.path().to_path_buf());
        in_child(|| {
            enter_user_and_net_ns()?;
            let done = apply(&h).map_err(|e| e.to_string())?;
            let caps = done.caps.ok_or("no capability report")?;
            if done.filters != 1
                || done.landlock.as_ref().is_none_or(|l| l.rules < 3)
                || !caps.bounding_cleared
                || !caps.securebits_locked
            {
                return Err(format!("{done:?}"));
            }
            if !netlo::link_is_up(netlo::LOOPBACK).map_err(|e| e.to_string())? {
                return Err("lo down".into());
            }
            if process::read_caps().map_err(|e| e.to_string())? != (0, 0) {
                return Err("caps remain".into());
            }
            let status = std::fs::read_to_string("/proc/self/status").map_err(|e| e.to_string())?;
            for want in ["NoNewPrivs:\t1", "Seccomp:\t2"] {
                if !status.lines().any(|l| l == want) {
                    return Err(format!("missing {want:?}"));
                }
            }
            // SAFETY: integer-only prctl.
            if unsafe { libc::prctl(libc::PR_GET_DUMPABLE, 0, 0, 0, 0) } != 0 {
                return Err("still dumpable".into());
            }
            let ro_write = std::fs::write(ro.join("x"), b"x");
            if !matches!(&ro_write, Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied) {
                return Err(format!("write in ro: {ro_write:?}"));
            }
            std::fs::write(rw.join("x"), b"x").map_err(|e| format!("write in rw: {e}"))?;
            std::fs::remove_file(rw.join("x")).map_err(|e| format!("unlink in rw: {e}"))?;
            if std::fs::read_dir("/root").is_ok() {
                return Err("/root readable".into());
            }
            // SAFETY: PTRACE_TRACEME takes no pointers.
            let rc = unsafe { libc::ptrace(libc::PTRACE_TRACEME, 0, 0, 0) };
            expect_errno("ptrace", rc, libc::EPERM)?;
            Ok(())
        });
    }

    #[test]
    fn a_replaced_bind_stops_before_anything_is_applied() {
        let dir = TempDir::new("apply-bind");
        let meta = std::fs::metadata(dir.path()).expect("stat");
        let mut h = hardening(vec![]);
        h.binds = vec![BindCheck {
            path: dir.path().to_path_buf(),
            dev: meta.dev(),
            ino: meta.ino() + 1,
        }];
        in_child(|| match apply(&h) {
            Err(HardenError::BindReplaced { .. }) => {
                let status =
                    std::fs::read_to_string("/proc/self/status").map_err(|e| e.to_string())?;
                if status
                    .lines()
                    .any(|l| l == "NoNewPrivs:\t1" || l == "Seccomp:\t2")
                {
                    return Err("restrictions applied before failing".into());
                }
                Ok(())
            }
            other => Err(format!("{other:?}")),
        });
    }

    /// `vetto run` joins a network namespace made ahead of time: a process in any other one
    /// stops before anything is applied, and one in the expected one goes on.
    #[test]
    fn another_network_namespace_stops_before_anything_is_applied() {
        let own = std::fs::metadata("/proc/self/ns/net").expect("own netns");
        let h = Hardening {
            netns: Some((own.dev(), own.ino() + 1)),
            network: Network::Untouched,
            no_new_privs: true,
            ..Hardening::default()
        };
        in_child(|| match apply(&h) {
            Err(HardenError::ForeignNetns { found, expected }) => {
                let status =
                    std::fs::read_to_string("/proc/self/status").map_err(|e| e.to_string())?;
                if status.lines().any(|l| l == "NoNewPrivs:\t1") {
                    return Err("restrictions applied before failing".into());
                }
                if found == expected {
                    return Err(format!("{found} == {expected}"));
                }
                Ok(())
            }
            other => Err(format!("{other:?}")),
        });
        let h = Hardening {
            netns: Some((own.dev(), own.ino())),
            ..h
        };
        in_child(|| match apply(&h) {
            Ok(_) => Ok(()),
            other => Err(format!("{other:?}")),
        });
    }

    #[test]
    fn loopback_only_accepts_lo_alone_and_refuses_another_interface() {
        let h = Hardening {
            netns: None,
            network: Network::LoopbackOnly("off".into()),
            ..Hardening::default()
        };
        in_child(|| {
            enter_user_and_net_ns()?;
            apply(&h).map_err(|e| format!("a namespace with only lo: {e}"))?;
            // A tun device opened inside the new network namespace is an interface there
            // (root only: the device node is 0600).
            let tun = match std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open("/dev/net/tun")
            {
                Ok(t) => t,
                Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
                    eprintln!("refusal not checked: /dev/net/tun needs root ({e})");
                    return Ok(());
                }
                Err(e) => return Err(format!("/dev/net/tun: {e}")),
            };
            // SAFETY: ifreq is plain data; zeroed is a valid value.
            let mut ifr: libc::ifreq = unsafe { std::mem::zeroed() };
            for (d, s) in ifr.ifr_name.iter_mut().zip(b"vettotun0") {
                *d = *s as libc::c_char;
            }
            ifr.ifr_ifru.ifru_flags = (libc::IFF_TUN | libc::IFF_NO_PI) as libc::c_short;
            // SAFETY: TUNSETIFF reads and writes the ifreq we own.
            let rc = unsafe {
                libc::ioctl(
                    std::os::fd::AsRawFd::as_raw_fd(&tun),
                    libc::TUNSETIFF as _,
                    &mut ifr,
                )
            };
            if rc != 0 {
                return Err(format!("TUNSETIFF: {}", std::io::Error::last_os_error()));
            }
            match apply(&h) {
                Err(HardenError::ForeignInterface { interface, .. })
                    if interface == "vettotun0" =>
                {
                    Ok(())
                }
                other => Err(format!("with vettotun0 present: {other:?}")),
            }
        });
    }
}
