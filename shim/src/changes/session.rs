//! A review-mode session's change set: made (or resumed) before the sandbox is planned, held
//! locked while the session runs, summarised at its end.

use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path};

use vetto_bundle::host::{HostFacts, ReviewLayers};
use vetto_bundle::resolve::Policy;

use super::{ChangeSet, ChangesError, Span};

/// The change set of a `vetto run` in review mode. Dropped before the session started, a set
/// this run made is removed again: a refused run leaves nothing behind.
#[derive(Debug)]
pub struct ReviewRun {
    cs: Option<ChangeSet>,
    fresh: bool,
    started: bool,
    /// The walk recording the project's directories (a new set's), while the sandbox is
    /// being planned.
    dirs: Option<std::thread::JoinHandle<Option<std::collections::BTreeMap<String, u64>>>>,
}

/// At most this many directories are recorded (beyond, a moved-in directory is not detected).
const DIRS_LIMIT: usize = 200_000;

/// Linux 5.11 lets a user namespace mount overlayfs; earlier kernels refuse.
fn kernel_ok() -> Result<(), ChangesError> {
    let u = nix::sys::utsname::uname().map_err(|e| ChangesError::Review(e.to_string()))?;
    let rel = u.release().to_string_lossy().into_owned();
    let mut it = rel
        .split(|c: char| !c.is_ascii_digit())
        .filter(|s| !s.is_empty())
        .map(|s| s.parse::<u32>().unwrap_or(0));
    let (maj, min) = (it.next().unwrap_or(0), it.next().unwrap_or(0));
    if (maj, min) < (5, 11) {
        return Err(ChangesError::Review(format!(
            "review mode needs Linux 5.11 or later (overlayfs in a user namespace); this kernel is {rel}"
        )));
    }
    Ok(())
}

/// The project-relative paths a change set flags as trust-handoff (with what lies below and
/// above them): what write mode would protect in the project. The policy's project protected
/// paths, and where one is a symlink, what it resolves to; the policy files in the project;
/// every repository's metadata the scan found (nested repositories, separate git
/// directories); and what the repositories' configuration makes git read or run
/// (`core.hooksPath`, included files), present or not.
fn handoff_paths(facts: &HostFacts, policy: &Policy) -> Vec<String> {
    let project = &facts.project;
    let mut v: Vec<String> = vec![];
    let mut add = |p: &Path| {
        if let Ok(rel) = p.strip_prefix(project) {
            if !rel.as_os_str().is_empty() {
                v.push(rel.display().to_string());
            }
        }
    };
    for pr in &policy.protected {
        if pr.value.starts_with("~/") || pr.value.starts_with('/') {
            continue;
        }
        let p = project.join(&pr.value);
        add(&p);
        // Nothing there (lstat fails): it resolves to nothing either, and realpath's readlink
        // of every component (most of the protected paths, in most projects) is skipped. A
        // name directly in the (canonical) project that is not a link is its own resolution.
        let mut c = Path::new(&pr.value).components();
        let direct = matches!((c.next(), c.next()), (Some(Component::Normal(_)), None));
        match std::fs::symlink_metadata(&p) {
            Err(_) => continue,
            Ok(m) if direct && !m.file_type().is_symlink() => continue,
            Ok(_) => {}
        }
        if let Ok(target) = p.canonicalize() {
            add(&target);
        }
    }
    for f in policy
        .files
        .iter()
        .chain(&facts.git_metadata)
        .chain(&facts.git_absent)
    {
        add(f);
    }
    v.sort();
    v.dedup();
    v
}

impl ReviewRun {
    /// Make a change set for the project, or open `resume` (which must be this project's).
    /// Refused: an old kernel, a project that holds vetto's change sets (or lies in them), and
    /// a change set on another file system than the project (the overlay would then show other
    /// inode numbers than the secret scan saw, and the masks could not be checked).
    pub fn prepare(
        resume: Option<&str>,
        facts: &HostFacts,
        policy: &Policy,
    ) -> Result<Self, ChangesError> {
        kernel_ok()?;
        let base = super::base_dir()?;
        // What an earlier session discarded and could not remove (it was killed first).
        super::sweep_trash(&base);
        let base = base.canonicalize().unwrap_or(base);
        if base.starts_with(&facts.project) || facts.project.starts_with(&base) {
            return Err(ChangesError::Review(format!(
                "the project {} holds vetto's change sets ({}) or lies in them: the sandbox would see them; use another project directory or XDG_STATE_HOME",
                facts.project.display(),
                base.display()
            )));
        }
        // The session is recorded in the set with the one `meta.json` written here: its start
        // is this moment (the sandbox's, a few milliseconds later), and a session refused
        // before it started takes its record out again (the drop).
        let span = Span {
            started_ms: now_ms(),
            ended_ms: None,
        };
        let (cs, fresh) = match resume {
            Some(id) => {
                let mut cs = ChangeSet::open(id)?;
                // The project the set was made from, still the same directory.
                cs.project_dir()?;
                if cs.meta.project != facts.project {
                    return Err(ChangesError::Review(format!(
                        "change set {id} is for the project {}, not {}",
                        cs.meta.project.display(),
                        facts.project.display()
                    )));
                }
                // The last mount's marker goes (overlayfs refuses a work directory holding it),
                // after the set's writes are flushed; a set not known to be whole is refused.
                // The marker this session's mount leaves is of this boot.
                cs.clear_overlay_work()?;
                cs.meta.boot_id = super::boot_id();
                cs.meta.sessions.push(span);
                cs.save()?;
                (cs, false)
            }
            None => (
                ChangeSet::create(&facts.project, handoff_paths(facts, policy), span)?,
                true,
            ),
        };
        let dirs = fresh.then(|| {
            let project = facts.project.clone();
            std::thread::spawn(move || {
                let d = super::fsat::Dir::open(&project).ok()?;
                super::record_dirs(&d, DIRS_LIMIT)
            })
        });
        let mut run = Self {
            cs: Some(cs),
            fresh,
            started: false,
            dirs,
        };
        run.same_fs(&facts.project)?;
        Ok(run)
    }

    fn set(&self) -> &ChangeSet {
        // Present from `prepare` until `finish` or drop.
        self.cs.as_ref().expect("change set present")
    }

    fn same_fs(&mut self, project: &Path) -> Result<(), ChangesError> {
        let upper = self.set().upper();
        let a = std::fs::metadata(project).map_err(|source| ChangesError::Io {
            what: "inspect",
            path: project.to_path_buf(),
            source,
        })?;
        let b = std::fs::metadata(&upper).map_err(|source| ChangesError::Io {
            what: "inspect",
            path: upper.clone(),
            source,
        })?;
        if a.dev() != b.dev() {
            return Err(ChangesError::Review(format!(
                "the change set {} is on another file system than the project {}: review mode needs both on one (set XDG_STATE_HOME to a directory on the project's file system)",
                upper.display(),
                project.display()
            )));
        }
        Ok(())
    }

    /// The set's id.
    pub fn id(&self) -> &str {
        &self.set().meta.id
    }

    /// The overlay's layers.
    pub fn layers(&self) -> ReviewLayers {
        ReviewLayers {
            upper: self.set().upper(),
            work: self.set().work(),
        }
    }

    /// Wait for the record of the project's directories (before the process may need to be
    /// single-threaded again: entering a user namespace).
    pub fn settle(&mut self) {
        if let Some(h) = self.dirs.take() {
            let dirs = h.join().ok().flatten();
            if let (Some(cs), Some(dirs)) = (self.cs.as_mut(), dirs) {
                cs.meta.dirs = dirs;
            }
        }
    }

    /// The session starts: the set is kept from now on. Its record of the session was
    /// written when the set was prepared, so nothing is written here, while the command runs
    /// (a rename over `meta.json` makes ext4 start writing the new file's blocks out).
    pub fn start(&mut self) {
        self.started = true;
    }

    /// The session ended: record it and return the summary for stderr. A new set with nothing
    /// in it is discarded: taken out of the listing now, and returned to be removed once
    /// nobody waits ([`super::Trash::remove`]).
    pub fn finish(mut self) -> (String, Option<super::Trash>) {
        let Some(mut cs) = self.cs.take() else {
            return (String::new(), None);
        };
        if let Some(s) = cs.meta.sessions.last_mut() {
            s.ended_ms = Some(now_ms());
        }
        let id = cs.meta.id.clone();
        let scanned = cs.scan();
        if self.fresh && matches!(&scanned, Ok(entries) if entries.is_empty()) {
            return match cs.discard_later() {
                Ok(trash) => (
                    "vetto: review: the session changed nothing in the project; no change set kept\n"
                        .into(),
                    Some(trash),
                ),
                Err(e) => (
                    format!("vetto: review: the session changed nothing in the project, but its empty change set {id} could not be removed: {e}\n"),
                    None,
                ),
            };
        }
        let saved = cs.save();
        let msg = match scanned {
            Ok(entries) => {
                let mut s = String::from("vetto: review: ");
                s.push_str(&crate::changes_cmd::summary(&cs, &entries));
                s.push_str(&format!(
                    "vetto: review: nothing reached the project. `vetto changes diff {id}` shows the changes, `vetto changes apply {id}` applies them, `vetto changes discard {id}` drops them, `vetto run --resume {id} ...` continues on them\n"
                ));
                if let Err(e) = saved {
                    s.push_str(&format!("vetto: review: {e}\n"));
                }
                s
            }
            Err(e) => {
                format!("vetto: review: change set {id} kept, but it could not be read back: {e}\n")
            }
        };
        (msg, None)
    }
}

impl Drop for ReviewRun {
    fn drop(&mut self) {
        self.settle();
        match (self.cs.take(), self.started, self.fresh) {
            (Some(cs), false, true) => {
                let _ = cs.discard();
            }
            // A resumed set: the session that did not start is no longer recorded.
            (Some(mut cs), false, false) => {
                cs.meta.sessions.pop();
                let _ = cs.save();
            }
            _ => {}
        }
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}
