//! `vetto doctor`: what this machine supports and which tier follows.

use std::path::Path;

use serde::Serialize;

/// One probe's outcome.
#[derive(Debug, Clone, Serialize)]
pub struct Probe {
    /// What was probed.
    pub name: String,
    /// Usable for vetto.
    pub ok: bool,
    /// What was found.
    pub detail: String,
}

/// What vetto can enforce on this machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Tier {
    /// Landlock, user namespaces and seccomp.
    #[serde(rename = "FULL")]
    Full,
    /// Landlock and seccomp without namespaces.
    #[serde(rename = "FS-ONLY")]
    FsOnly,
    /// vetto refuses to run commands.
    #[serde(rename = "none")]
    None,
}

impl std::fmt::Display for Tier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Tier::Full => "FULL",
            Tier::FsOnly => "FS-ONLY",
            Tier::None => "none",
        })
    }
}

/// The whole report.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// What can be enforced.
    pub tier: Tier,
    /// Why that tier.
    pub reason: String,
    /// Landlock ABI, if any.
    pub landlock_abi: Option<u32>,
    /// cgroup layout: v1, hybrid, v2.
    pub cgroup_layout: String,
    /// Every probe.
    pub probes: Vec<Probe>,
    /// The self-test sandbox, when run.
    pub selftest: Option<Vec<Probe>>,
}

fn read_trim(p: &str) -> Option<String> {
    std::fs::read_to_string(p)
        .ok()
        .map(|s| s.trim().to_string())
}

/// Can this user create a user namespace? Tried for real in a child process.
fn probe_userns() -> Probe {
    let mut notes = vec![];
    if let Some(v) = read_trim("/proc/sys/kernel/unprivileged_userns_clone") {
        notes.push(format!("kernel.unprivileged_userns_clone={v}"));
    }
    if let Some(v) = read_trim("/proc/sys/user/max_user_namespaces") {
        notes.push(format!("user.max_user_namespaces={v}"));
    }
    if let Some(v) = read_trim("/proc/sys/kernel/apparmor_restrict_unprivileged_userns") {
        notes.push(format!("kernel.apparmor_restrict_unprivileged_userns={v}"));
    }
    let sysctl_ok = read_trim("/proc/sys/kernel/unprivileged_userns_clone")
        .is_none_or(|v| v == "1")
        && read_trim("/proc/sys/user/max_user_namespaces").is_none_or(|v| v != "0")
        && read_trim("/proc/sys/kernel/apparmor_restrict_unprivileged_userns")
            .is_none_or(|v| v == "0");
    // SAFETY: fork in a process that has not started other threads at this point of doctor;
    // the child only calls async-signal-safe functions (unshare, _exit).
    let pid = unsafe { libc::fork() };
    let tried = match pid {
        0 => {
            // SAFETY: unshare and _exit are async-signal-safe and touch no Rust state.
            unsafe {
                let r = libc::unshare(libc::CLONE_NEWUSER);
                libc::_exit(if r == 0 { 0 } else { 1 })
            }
        }
        p if p > 0 => vetto_hooks::process::wait(p) == Some(0),
        _ => false,
    };
    let root = nix::unistd::geteuid().is_root();
    notes.push(format!(
        "unshare(CLONE_NEWUSER) {}",
        if tried { "works" } else { "fails" }
    ));
    let ok = tried && (root || sysctl_ok);
    Probe {
        name: "user namespaces".into(),
        ok: ok && (sysctl_ok || root),
        detail: format!(
            "{}{}",
            notes.join(", "),
            if root && !sysctl_ok {
                " (root only: unprivileged users cannot)"
            } else {
                ""
            }
        ),
    }
}

fn probe_seccomp() -> Probe {
    let actions = read_trim("/proc/sys/kernel/seccomp/actions_avail").unwrap_or_default();
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let has_field = status.lines().any(|l| l.starts_with("Seccomp:"));
    let ok = has_field && actions.split_whitespace().any(|a| a == "errno");
    Probe {
        name: "seccomp".into(),
        ok,
        detail: if ok {
            format!("filter mode available, actions: {actions}")
        } else {
            "seccomp filters unavailable".into()
        },
    }
}

fn cgroup_layout() -> (String, Probe) {
    use crate::userns::{fs_magic, CGROUP2_MAGIC, TMPFS_MAGIC};
    let layout = match fs_magic("/sys/fs/cgroup") {
        Some(CGROUP2_MAGIC) => "v2",
        Some(TMPFS_MAGIC) if fs_magic("/sys/fs/cgroup/unified") == Some(CGROUP2_MAGIC) => "hybrid",
        Some(TMPFS_MAGIC) => "v1",
        _ => "none",
    };
    let own = read_trim("/proc/self/cgroup").unwrap_or_default();
    let v2_path = own
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .unwrap_or("/")
        .to_string();
    let delegated = match layout {
        "v2" => {
            let dir = Path::new("/sys/fs/cgroup").join(v2_path.trim_start_matches('/'));
            nix::unistd::access(&dir.join("cgroup.procs"), nix::unistd::AccessFlags::W_OK).is_ok()
        }
        _ => Path::new("/sys/fs/cgroup/pids/vetto").exists(),
    };
    let root = nix::unistd::getuid().is_root();
    let pids = crate::pids::available();
    let detail = match (root, pids) {
        (true, true) => format!(
            "layout {layout}; as root, `limits.processes` is a pids cgroup per session (RLIMIT_NPROC does not bind root); otherwise limits are rlimits"
        ),
        (true, false) => format!(
            "layout {layout}; NO pids controller: as root, a policy with `limits.processes` (every built-in profile) cannot run"
        ),
        (false, _) => format!(
            "layout {layout}; {}",
            if delegated {
                "a delegated subtree exists, but vetto creates no cgroup: limits are rlimits"
            } else {
                "vetto creates no cgroup (none is needed): limits are rlimits"
            }
        ),
    };
    let ok = !root || pids;
    (
        layout.to_string(),
        Probe {
            name: "cgroups".into(),
            ok,
            detail,
        },
    )
}

/// Probe the machine.
pub fn probe() -> Report {
    let abi = vetto_hooks::landlock::abi_version();
    let ll = Probe {
        name: "landlock".into(),
        ok: abi.is_some(),
        detail: match abi {
            Some(a) => format!(
                "ABI {a}{}",
                if a >= 6 {
                    " (signal and abstract-socket scoping)"
                } else {
                    ""
                }
            ),
            None => "unavailable (kernel without Landlock, or not in the LSM list)".into(),
        },
    };
    let userns = probe_userns();
    let sc = probe_seccomp();
    let (layout, cg) = cgroup_layout();
    let (tier, reason) = if ll.ok && userns.ok && sc.ok {
        (
            Tier::Full,
            "Landlock, user namespaces and seccomp are all available".to_string(),
        )
    } else if ll.ok && sc.ok {
        (
            Tier::FsOnly,
            format!("user namespaces unavailable: {}", userns.detail),
        )
    } else {
        let missing: Vec<&str> = [(&ll, "Landlock"), (&sc, "seccomp")]
            .iter()
            .filter(|(p, _)| !p.ok)
            .map(|(_, n)| *n)
            .collect();
        (
            Tier::None,
            format!(
                "missing {}: vetto refuses to run commands",
                missing.join(" and ")
            ),
        )
    };
    Report {
        tier,
        reason,
        landlock_abi: abi,
        cgroup_layout: layout,
        probes: vec![ll, userns, sc, cg],
        selftest: None,
    }
}

const SELFTEST: &str = r#"
[ -s .env ] && echo "secret-mask=FAIL .env readable" || echo "secret-mask=ok .env reads empty"
touch /etc/.vetto-selftest 2>/dev/null && echo "read-only-system=FAIL /etc writable" || echo "read-only-system=ok /etc not writable"
echo x > selftest.out 2>/dev/null && echo "project-write=ok project writable" || echo "project-write=FAIL project not writable"
ls / >/dev/null 2>&1 && echo "landlock=FAIL / listable" || echo "landlock=ok / not listable (no rule covers it)"
n=$(ls /sys/class/net | tr '
' ' '); [ "$n" = "lo " ] && echo "network=ok only lo" || echo "network=FAIL interfaces: $n"
c=$(ls /proc | grep -c '^[0-9]'); [ "$c" -le 8 ] && echo "pid-namespace=ok $c processes visible" || echo "pid-namespace=FAIL $c processes visible"
grep -q '^CapEff:.0000000000000000' /proc/self/status && grep -q '^CapBnd:.0000000000000000' /proc/self/status && echo "capabilities=ok none" || echo "capabilities=FAIL some held"
grep -q '^NoNewPrivs:.1' /proc/self/status && echo "no-new-privs=ok set" || echo "no-new-privs=FAIL unset"
grep -q '^Seccomp:.2' /proc/self/status && echo "seccomp=ok filter installed" || echo "seccomp=FAIL no filter"
"#;

/// Run a real sandbox with the default profile in a throwaway project and report what it
/// enforced.
pub fn selftest() -> Vec<Probe> {
    let fail = |detail: String| {
        vec![Probe {
            name: "self-test".into(),
            ok: false,
            detail,
        }]
    };
    let dir = std::env::temp_dir().join(format!("vetto-selftest-{}", std::process::id()));
    if let Err(e) = std::fs::create_dir(&dir)
        .and_then(|_| std::fs::write(dir.join(".env"), "VETTO_SELFTEST_SECRET=1\n"))
    {
        return fail(format!("cannot create {}: {e}", dir.display()));
    }
    let exe = std::env::current_exe();
    let out = exe.and_then(|exe| {
        std::process::Command::new(exe)
            .args([
                "run",
                "--no-user-policy",
                "--profile",
                "default",
                "--project",
            ])
            .arg(&dir)
            .args(["--", "/bin/sh", "-c", SELFTEST])
            .current_dir(&dir)
            .stdin(std::process::Stdio::null())
            .output()
    });
    let _ = std::fs::remove_dir_all(&dir);
    let out = match out {
        Ok(o) => o,
        Err(e) => return fail(format!("cannot start vetto: {e}")),
    };
    if !out.status.success() {
        return fail(format!(
            "the sandbox did not run: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let (name, rest) = l.split_once('=')?;
            let (verdict, detail) = rest.split_once(' ')?;
            Some(Probe {
                name: name.into(),
                ok: verdict == "ok",
                detail: detail.into(),
            })
        })
        .collect()
}

/// Print the report.
pub fn print(r: &Report) {
    println!("tier: {} ({})", r.tier, r.reason);
    for p in &r.probes {
        println!(
            "  [{}] {:<16} {}",
            if p.ok { " ok " } else { "FAIL" },
            p.name,
            p.detail
        );
    }
    if let Some(st) = &r.selftest {
        println!("self-test sandbox:");
        for p in st {
            println!(
                "  [{}] {:<28} {}",
                if p.ok { " ok " } else { "FAIL" },
                p.name,
                p.detail
            );
        }
    }
}
