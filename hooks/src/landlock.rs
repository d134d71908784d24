//! Landlock: turn a [`LandlockPlan`] into a ruleset enforced on the calling thread.
//!
//! The ruleset handles every filesystem right of [`HANDLED_ABI`] that the kernel supports, so
//! anything not granted by a rule is denied. Rights introduced up to `plan.min_abi` are a hard
//! requirement: on an older kernel [`apply`] fails instead of degrading. Network rights (ABI 4)
//! are deliberately not handled: the sandbox has its own network namespace.

use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use ::landlock::{
    Access, AccessFs, AccessNet, BitFlags, CompatLevel, Compatible, PathBeneath, RulesetAttr,
    RulesetCreatedAttr, RulesetError, RulesetStatus, Scope, ABI,
};
use thiserror::Error;
use vetto_bundle::plan::{FsAccess, LandlockPlan, LandlockRule};

/// The ABI whose filesystem rights are handled.
///
/// ABIs 6 to 8 add no filesystem right over ABI 5 (6: scopes, 7: audit logging, 8: thread
/// sync). ABI 9's `ResolveUnix` (connecting to pathname UNIX sockets) is *not* handled on
/// purpose: handling it would deny `connect()` to every socket under read-only paths, a
/// behaviour change no kernel here could test. Moving this constant is a policy decision.
pub const HANDLED_ABI: ABI = ABI::V8;

/// The highest `min_abi` a plan may require (what the landlock crate knows).
pub const MAX_KNOWN_ABI: u32 = 10;

/// First ABI with signal and abstract-UNIX-socket scoping.
const SCOPE_ABI: u32 = 6;
/// The ABI of TCP bind and connect rules.
const NET_ABI: u32 = 4;

/// `LANDLOCK_CREATE_RULESET_VERSION` from `<linux/landlock.h>`.
const LANDLOCK_CREATE_RULESET_VERSION: libc::c_ulong = 1 << 0;

/// Rights that make sense on a non-directory (the kernel rejects the others with EINVAL).
pub(crate) fn file_rights() -> BitFlags<AccessFs> {
    AccessFs::Execute
        | AccessFs::WriteFile
        | AccessFs::ReadFile
        | AccessFs::Truncate
        | AccessFs::IoctlDev
}

/// Landlock failures. Every variant means the command must not run.
#[derive(Debug, Error)]
pub enum LandlockError {
    /// The kernel has no Landlock (not built, or not in the `lsm=` list).
    #[error("Landlock is not available on this kernel (plan requires ABI {required})")]
    Unavailable {
        /// `plan.min_abi`.
        required: u32,
    },
    /// The kernel's ABI is older than the plan requires.
    #[error("Landlock ABI {kernel} is below the required ABI {required}")]
    AbiTooOld {
        /// What the kernel reports.
        kernel: u32,
        /// `plan.min_abi`.
        required: u32,
    },
    /// The plan asks for an ABI this build does not know.
    #[error("Landlock ABI {0} is required but this build knows ABIs up to {MAX_KNOWN_ABI}")]
    UnknownAbi(u32),
    /// A rule path is relative.
    #[error("Landlock rule path {0} is not absolute")]
    RelativePath(PathBuf),
    /// A non-optional rule path does not exist.
    #[error("Landlock rule path {0} does not exist")]
    MissingPath(PathBuf),
    /// A rule path could not be opened or inspected.
    #[error("Landlock rule path {path}: {source}")]
    Open {
        /// The path.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Building or enforcing the ruleset failed (includes a hard requirement not met).
    #[error("Landlock: {0}")]
    Ruleset(#[from] RulesetError),
    /// Adding the rule for this path failed.
    #[error("Landlock rule for {path}: {source}")]
    Rule {
        /// The path.
        path: PathBuf,
        /// Why.
        source: RulesetError,
    },
    /// The kernel accepted nothing.
    #[error("Landlock ruleset was not enforced")]
    NotEnforced,
}

/// What [`apply`] enforced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppliedLandlock {
    /// The kernel's Landlock ABI.
    pub abi: u32,
    /// Every requested right (and scope) is enforced; `false` means some rights of
    /// [`HANDLED_ABI`] above `min_abi` are unknown to this kernel and were left out.
    pub fully_enforced: bool,
    /// Number of path rules added.
    pub rules: usize,
    /// Optional rules skipped because their path does not exist.
    pub skipped: Vec<PathBuf>,
    /// Signals and abstract UNIX sockets are scoped to the sandbox.
    pub scoped: bool,
}

/// The kernel's Landlock ABI version, or `None` if Landlock is unavailable.
pub fn abi_version() -> Option<u32> {
    // SAFETY: with a NULL attribute, size 0 and the VERSION flag the syscall only returns the
    // ABI version; no memory is read or written.
    let v = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    if v > 0 {
        u32::try_from(v).ok()
    } else {
        None
    }
}

fn abi_from(version: u32) -> Result<ABI, LandlockError> {
    if version > MAX_KNOWN_ABI {
        return Err(LandlockError::UnknownAbi(version));
    }
    // `ABI::from(i32)` is exact up to the crate's newest ABI, checked just above.
    let v = i32::try_from(version).map_err(|_| LandlockError::UnknownAbi(version))?;
    Ok(ABI::from(v))
}

/// The Landlock rights of an access class (before masking to what the kernel supports).
pub fn rights(access: FsAccess) -> BitFlags<AccessFs> {
    let all = AccessFs::from_all(HANDLED_ABI);
    match access {
        FsAccess::ReadExec => AccessFs::Execute | AccessFs::ReadFile | AccessFs::ReadDir,
        FsAccess::ReadWrite => all,
        FsAccess::ReadWriteNoDelete => {
            all & !(AccessFs::RemoveFile | AccessFs::RemoveDir | AccessFs::Refer)
        }
        FsAccess::Device => {
            AccessFs::ReadFile | AccessFs::WriteFile | AccessFs::IoctlDev | AccessFs::ReadDir
        }
        FsAccess::ListDir => AccessFs::ReadDir.into(),
    }
}

/// A ruleset handling every filesystem right of [`HANDLED_ABI`] the kernel knows (those up
/// to `min_abi` required), scoped on ABI ≥ 6 when `scope`, and, with `deny_tcp` (FS-ONLY,
/// which has no network namespace), handling TCP bind and connect with no rule allowing
/// either (ABI ≥ 4, required); with the kernel's ABI and whether it is scoped.
pub(crate) fn new_ruleset(
    min_abi: u32,
    scope: bool,
    deny_tcp: bool,
) -> Result<(::landlock::RulesetCreated, u32, bool), LandlockError> {
    let required = min_abi.max(1);
    let min_abi = abi_from(required)?;
    let kernel = abi_version().ok_or(LandlockError::Unavailable { required })?;
    if kernel < required {
        return Err(LandlockError::AbiTooOld { kernel, required });
    }
    // Rights up to min_abi are a hard requirement; newer ones are best effort.
    let required_rights = AccessFs::from_all(min_abi.min(HANDLED_ABI));
    let mut ruleset = ::landlock::Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(required_rights)?
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(AccessFs::from_all(HANDLED_ABI))?;
    let scoped = scope && kernel >= SCOPE_ABI;
    if scoped {
        ruleset = ruleset
            .set_compatibility(CompatLevel::HardRequirement)
            .scope(Scope::from_all(ABI::V6))?
            .set_compatibility(CompatLevel::BestEffort);
    }
    if deny_tcp {
        if kernel < NET_ABI {
            return Err(LandlockError::AbiTooOld {
                kernel,
                required: NET_ABI,
            });
        }
        ruleset = ruleset
            .set_compatibility(CompatLevel::HardRequirement)
            .handle_access(AccessNet::from_all(ABI::V4))?
            .set_compatibility(CompatLevel::BestEffort);
    }
    Ok((ruleset.create()?, kernel, scoped))
}

/// Opens `path` with `O_PATH` (no read permission needed, no side effect on devices).
/// `Ok(None)` if it does not exist.
fn open_path(path: &Path) -> Result<Option<(OwnedFd, bool)>, LandlockError> {
    let open_err = |source| LandlockError::Open {
        path: path.to_path_buf(),
        source,
    };
    let c = CString::new(path.as_os_str().as_bytes())
        .map_err(|e| open_err(std::io::Error::new(std::io::ErrorKind::InvalidInput, e)))?;
    // SAFETY: `c` is a NUL-terminated path; O_PATH needs no mode argument.
    let fd = unsafe { libc::open(c.as_ptr(), libc::O_PATH | libc::O_CLOEXEC) };
    if fd < 0 {
        let e = std::io::Error::last_os_error();
        return match e.raw_os_error() {
            Some(libc::ENOENT) => Ok(None),
            _ => Err(open_err(e)),
        };
    }
    // SAFETY: `fd` was just opened and is owned by nobody else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: an all-zero `stat` is a valid value of this plain C struct.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `fd` is open (O_PATH descriptors support fstat) and `st` is a valid out pointer.
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
        return Err(open_err(std::io::Error::last_os_error()));
    }
    Ok(Some((fd, st.st_mode & libc::S_IFMT == libc::S_IFDIR)))
}

/// Builds and enforces the ruleset on the calling thread (and its future children).
///
/// Sets `no_new_privs` as Landlock requires. Fails if the kernel ABI is below
/// `plan.min_abi`, if a non-optional path is missing, or if nothing is enforced.
pub fn apply(plan: &LandlockPlan) -> Result<AppliedLandlock, LandlockError> {
    let (mut created, kernel, scoped) = new_ruleset(plan.min_abi, plan.scope, false)?;

    let mut rules = 0;
    let mut skipped = Vec::new();
    for LandlockRule {
        path,
        access,
        optional,
    } in &plan.rules
    {
        if !path.is_absolute() {
            return Err(LandlockError::RelativePath(path.clone()));
        }
        let Some((fd, is_dir)) = open_path(path)? else {
            if *optional {
                skipped.push(path.clone());
                continue;
            }
            return Err(LandlockError::MissingPath(path.clone()));
        };
        let mut granted = rights(*access);
        if !is_dir {
            granted &= file_rights();
        }
        created = created
            .add_rule(PathBeneath::new(fd, granted))
            .map_err(|source| LandlockError::Rule {
                path: path.clone(),
                source,
            })?;
        rules += 1;
    }

    let status = created.restrict_self()?;
    let fully_enforced = match status.ruleset {
        RulesetStatus::FullyEnforced => true,
        RulesetStatus::PartiallyEnforced => false,
        RulesetStatus::NotEnforced => return Err(LandlockError::NotEnforced),
    };
    Ok(AppliedLandlock {
        abi: kernel,
        fully_enforced,
        rules,
        skipped,
        scoped,
    })
}

#[cfg(test)]
mod tests {
    use std::fs;
    use std::io::ErrorKind;
    use std::os::unix::fs::OpenOptionsExt;

    use super::*;
    use crate::testutil::{in_child, TempDir};

    fn rule(path: impl Into<PathBuf>, access: FsAccess, optional: bool) -> LandlockRule {
        LandlockRule {
            path: path.into(),
            access,
            optional,
        }
    }

    fn system_rules() -> Vec<LandlockRule> {
        ["/usr", "/lib", "/lib64", "/bin", "/etc"]
            .into_iter()
            .map(|p| rule(p, FsAccess::ReadExec, true))
            .collect()
    }

    fn expect_denied<T: std::fmt::Debug>(what: &str, r: std::io::Result<T>) -> Result<(), String> {
        match r {
            Err(e) if e.kind() == ErrorKind::PermissionDenied => Ok(()),
            other => Err(format!("{what}: expected EACCES, got {other:?}")),
        }
    }

    fn expect_ok<T>(what: &str, r: std::io::Result<T>) -> Result<T, String> {
        r.map_err(|e| format!("{what}: {e}"))
    }

    #[test]
    fn abi_is_reported() {
        let abi = abi_version().expect("this machine has Landlock");
        assert!(abi >= 1);
    }

    #[test]
    fn rights_mapping() {
        let no_delete = rights(FsAccess::ReadWriteNoDelete);
        assert!(!no_delete.contains(AccessFs::RemoveFile));
        assert!(!no_delete.contains(AccessFs::RemoveDir));
        assert!(!no_delete.contains(AccessFs::Refer));
        assert!(no_delete.contains(AccessFs::MakeReg | AccessFs::WriteFile | AccessFs::Truncate));
        assert_eq!(rights(FsAccess::ReadWrite), AccessFs::from_all(ABI::V5));
        assert!(!rights(FsAccess::ReadWrite).contains(AccessFs::ResolveUnix));
        assert_eq!(
            rights(FsAccess::ReadExec),
            AccessFs::Execute | AccessFs::ReadFile | AccessFs::ReadDir
        );
        assert!(rights(FsAccess::Device).contains(AccessFs::IoctlDev));
    }

    #[test]
    fn read_exec_and_no_delete_are_enforced() {
        let a = TempDir::new("ll-a");
        let b = TempDir::new("ll-b");
        let outside = TempDir::new("ll-outside");
        fs::write(a.path().join("file"), b"a").expect("seed a");
        fs::write(b.path().join("old"), b"b").expect("seed b");
        fs::write(outside.path().join("secret"), b"s").expect("seed outside");
        let mut rules = system_rules();
        rules.push(rule(a.path(), FsAccess::ReadExec, false));
        rules.push(rule(b.path(), FsAccess::ReadWriteNoDelete, false));
        rules.push(rule("/dev/null", FsAccess::Device, false));
        rules.push(rule("/does/not/exist/vetto", FsAccess::ReadWrite, true));
        let plan = LandlockPlan {
            rules,
            min_abi: 1,
            scope: false,
        };
        let (a, b, outside) = (
            a.path().to_path_buf(),
            b.path().to_path_buf(),
            outside.path(),
        );
        in_child(|| {
            let applied = apply(&plan).map_err(|e| e.to_string())?;
            if applied.abi != abi_version().unwrap_or(0) || applied.abi < 1 {
                return Err(format!("bad abi in {applied:?}"));
            }
            if !applied.fully_enforced {
                return Err(format!("not fully enforced: {applied:?}"));
            }
            if applied.skipped != [PathBuf::from("/does/not/exist/vetto")] {
                return Err(format!("skipped: {applied:?}"));
            }
            // A: read-only.
            expect_ok("read A/file", fs::read(a.join("file")))?;
            expect_ok("list A", fs::read_dir(&a))?;
            expect_denied(
                "write A/file",
                fs::OpenOptions::new().write(true).open(a.join("file")),
            )?;
            expect_denied("create A/new", fs::write(a.join("new"), b"x"))?;
            // B: create and modify, but no delete and no rename.
            expect_ok("create B/new", fs::write(b.join("new"), b"x"))?;
            expect_ok("rewrite B/new", fs::write(b.join("new"), b"yy"))?;
            expect_ok("mkdir B/d", fs::create_dir(b.join("d")))?;
            expect_denied("unlink B/old", fs::remove_file(b.join("old")))?;
            expect_denied("rmdir B/d", fs::remove_dir(b.join("d")))?;
            expect_denied("rename B/old", fs::rename(b.join("old"), b.join("renamed")))?;
            // Unlisted paths: nothing.
            expect_denied("read /root", fs::read_dir("/root"))?;
            expect_denied("read outside/secret", fs::read(outside.join("secret")))?;
            expect_denied("list parent of A", fs::read_dir(a.parent().unwrap_or(&a)))?;
            // System dirs stay usable.
            expect_ok("read /etc/passwd", fs::read("/etc/passwd"))?;
            // Device: `> /dev/null` opens with O_TRUNC, which is ignored for devices.
            expect_ok(
                "open /dev/null O_WRONLY|O_TRUNC",
                fs::OpenOptions::new()
                    .write(true)
                    .custom_flags(libc::O_TRUNC)
                    .open("/dev/null"),
            )?;
            Ok(())
        });
    }

    #[test]
    fn missing_required_path_fails_and_names_it() {
        let plan = LandlockPlan {
            rules: vec![rule("/does/not/exist/vetto", FsAccess::ReadExec, false)],
            min_abi: 1,
            scope: false,
        };
        in_child(|| match apply(&plan) {
            Err(e @ LandlockError::MissingPath(_))
                if e.to_string().contains("/does/not/exist/vetto") =>
            {
                Ok(())
            }
            other => Err(format!("expected MissingPath, got {other:?}")),
        });
    }

    #[test]
    fn relative_path_is_refused() {
        let plan = LandlockPlan {
            rules: vec![rule("etc", FsAccess::ReadExec, true)],
            min_abi: 1,
            scope: false,
        };
        in_child(|| match apply(&plan) {
            Err(LandlockError::RelativePath(_)) => Ok(()),
            other => Err(format!("expected RelativePath, got {other:?}")),
        });
    }

    #[test]
    fn abi_above_kernel_fails_and_names_it() {
        let kernel = abi_version().expect("landlock");
        if kernel >= MAX_KNOWN_ABI {
            return;
        }
        let required = kernel + 1;
        let plan = LandlockPlan {
            rules: system_rules(),
            min_abi: required,
            scope: false,
        };
        in_child(|| {
            // Must fail before restricting anything.
            let r = apply(&plan);
            let msg = match &r {
                Err(e @ LandlockError::AbiTooOld { .. }) => e.to_string(),
                other => return Err(format!("expected AbiTooOld, got {other:?}")),
            };
            if !msg.contains(&format!("ABI {required}")) || !msg.contains(&format!("ABI {kernel}"))
            {
                return Err(format!("message does not name the ABIs: {msg}"));
            }
            expect_ok("still unrestricted", fs::read_dir("/root"))?;
            Ok(())
        });
        in_child(|| {
            match apply(&LandlockPlan {
                rules: vec![],
                min_abi: 99,
                scope: false,
            }) {
                Err(LandlockError::UnknownAbi(99)) => Ok(()),
                other => Err(format!("expected UnknownAbi, got {other:?}")),
            }
        });
    }

    #[test]
    fn scope_blocks_signals_to_outside() {
        if abi_version().unwrap_or(0) < SCOPE_ABI {
            return;
        }
        let plan = |scope| LandlockPlan {
            rules: system_rules(),
            min_abi: 1,
            scope,
        };
        for scope in [false, true] {
            let plan = plan(scope);
            in_child(|| {
                let applied = apply(&plan).map_err(|e| e.to_string())?;
                if applied.scoped != scope {
                    return Err(format!("scoped: {applied:?}"));
                }
                // SAFETY: signal 0 only checks permission; getppid has no arguments.
                let rc = unsafe { libc::kill(libc::getppid(), 0) };
                let errno = crate::testutil::errno();
                match (scope, rc) {
                    (false, 0) => Ok(()),
                    (true, -1) if errno == libc::EPERM => Ok(()),
                    _ => Err(format!(
                        "scope {scope}: kill(parent, 0) = {rc}, errno {errno}"
                    )),
                }
            });
        }
    }
}
