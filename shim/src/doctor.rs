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

/// Can FULL's namespaces be created here? Tried for real, by the probe `vetto run --tier
/// auto` uses ([`crate::tier::probe_full`]); the sysctls are reported beside it.
fn probe_userns() -> (Probe, Option<crate::tier::NoFull>) {
    let mut notes = vec![];
    for (name, path) in [
        (
            "kernel.unprivileged_userns_clone",
            "/proc/sys/kernel/unprivileged_userns_clone",
        ),
        (
            "user.max_user_namespaces",
            "/proc/sys/user/max_user_namespaces",
        ),
        (
            "kernel.apparmor_restrict_unprivileged_userns",
            "/proc/sys/kernel/apparmor_restrict_unprivileged_userns",
        ),
    ] {
        if let Some(v) = read_trim(path) {
            notes.push(format!("{name}={v}"));
        }
    }
    let tried = crate::tier::probe_full();
    match &tried {
        Ok(()) => notes.push("a probe sandbox's namespaces were created".into()),
        Err(no) => notes.push(format!("probe: {no}")),
    }
    (
        Probe {
            name: "user namespaces".into(),
            ok: tried.is_ok(),
            detail: notes.join(", "),
        },
        tried.err(),
    )
}

/// The name vetto's AppArmor profile is loaded under (`apparmor/vetto`).
pub const APPARMOR_PROFILE: &str = "vetto";

/// Ubuntu's restriction of unprivileged user namespaces, and whether vetto's profile (which
/// grants `userns,`) is loaded; `None` where the kernel has no such restriction.
fn probe_apparmor() -> Option<Probe> {
    let restrict = read_trim("/proc/sys/kernel/apparmor_restrict_unprivileged_userns")?;
    let loaded = std::fs::read_to_string("/sys/kernel/security/apparmor/profiles")
        .ok()
        .map(|s| {
            s.lines().any(|l| {
                l.split(" (").next().is_some_and(|n| {
                    n == APPARMOR_PROFILE
                        || n.starts_with(&format!("{APPARMOR_PROFILE}//"))
                        || n.ends_with("/vetto")
                        || n.ends_with("/vetto-shim")
                })
            })
        });
    let state = match loaded {
        Some(true) => "vetto's profile is loaded",
        Some(false) => "vetto's profile is NOT loaded",
        None => "the loaded profiles cannot be read (AppArmor off, or securityfs not mounted)",
    };
    let restricted = restrict == "1";
    Some(Probe {
        name: "apparmor".into(),
        ok: !restricted || loaded == Some(true),
        detail: match (restricted, loaded) {
            (false, _) => format!("apparmor_restrict_unprivileged_userns=0 (no restriction); {state}"),
            (true, Some(true)) => format!("unprivileged user namespaces are restricted; {state}, so vetto may create them"),
            (true, _) => format!("unprivileged user namespaces are restricted and {state}: install it (`sudo make install`, or the Debian package, puts it in /etc/apparmor.d/vetto) and load it with `sudo apparmor_parser -r /etc/apparmor.d/vetto`"),
        },
    })
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
    let (userns, no_full) = probe_userns();
    let sc = probe_seccomp();
    let (layout, cg) = cgroup_layout();
    let aa = probe_apparmor();
    let fs_missing = crate::tier::fs_only_missing(abi);
    let (tier, reason) = if ll.ok && userns.ok && sc.ok {
        (
            Tier::Full,
            "Landlock, user namespaces and seccomp are all available".to_string(),
        )
    } else if fs_missing.is_none() && sc.ok {
        (
            Tier::FsOnly,
            format!(
                "FULL cannot be established ({}); to enable it: {}",
                no_full
                    .as_ref()
                    .map(|n| n.to_string())
                    .unwrap_or_else(|| "Landlock or seccomp is missing".into()),
                no_full.as_ref().map(|n| n.fix()).unwrap_or_default()
            ),
        )
    } else {
        let mut missing: Vec<String> = vec![];
        if let Some(m) = &fs_missing {
            missing.push(m.clone());
        }
        if !sc.ok {
            missing.push("seccomp filters".into());
        }
        if let Some(n) = &no_full {
            missing.push(format!(
                "user namespaces ({n}; to enable them: {})",
                n.fix()
            ));
        }
        (
            Tier::None,
            format!(
                "missing {}: vetto refuses to run commands",
                missing.join("; ")
            ),
        )
    };
    let mut probes = vec![ll, userns, sc, cg];
    probes.extend(aa);
    Report {
        tier,
        reason,
        landlock_abi: abi,
        cgroup_layout: layout,
        probes,
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

/// The FS-ONLY tier's self-test: no namespaces to check, the network refused by seccomp;
/// the write is checked in a subdirectory (nothing can be created directly in a directory
/// that holds a secret, here the project root).
const SELFTEST_FS_ONLY: &str = r#"
cat .env >/dev/null 2>&1 && echo "secret-mask=FAIL .env readable" || echo "secret-mask=ok .env unreadable"
touch /etc/.vetto-selftest 2>/dev/null && echo "read-only-system=FAIL /etc writable" || echo "read-only-system=ok /etc not writable"
echo x > work/selftest.out 2>/dev/null && echo "project-write=ok project writable" || echo "project-write=FAIL project not writable"
ls / >/dev/null 2>&1 && echo "landlock=FAIL / listable" || echo "landlock=ok / not listable (no rule covers it)"
ls "$HOME" >/dev/null 2>&1 && echo "home=FAIL HOME listable" || echo "home=ok HOME not listable"
if command -v python3 >/dev/null; then python3 -c 'import socket; socket.socket()' 2>/dev/null && echo "network=FAIL a socket was created" || echo "network=ok socket() refused"; fi
grep -q '^CapEff:.0000000000000000' /proc/self/status && echo "capabilities=ok none effective" || echo "capabilities=FAIL some held"
grep -q '^NoNewPrivs:.1' /proc/self/status && echo "no-new-privs=ok set" || echo "no-new-privs=FAIL unset"
grep -q '^Seccomp:.2' /proc/self/status && echo "seccomp=ok filter installed" || echo "seccomp=FAIL no filter"
"#;

/// Run a real sandbox with the default profile in a throwaway project, in `tier`, and report
/// what it enforced.
pub fn selftest(tier: Tier) -> Vec<Probe> {
    let fail = |detail: String| {
        vec![Probe {
            name: "self-test".into(),
            ok: false,
            detail,
        }]
    };
    let dir = std::env::temp_dir().join(format!("vetto-selftest-{}", std::process::id()));
    if let Err(e) = std::fs::create_dir(&dir)
        .and_then(|_| std::fs::create_dir(dir.join("work")))
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
                "--quiet",
                "--tier",
                match tier {
                    Tier::FsOnly => "fs-only",
                    _ => "full",
                },
                "--project",
            ])
            .arg(&dir)
            .args([
                "--",
                "/bin/sh",
                "-c",
                match tier {
                    Tier::FsOnly => SELFTEST_FS_ONLY,
                    _ => SELFTEST,
                },
            ])
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
