//! The private runtime directory and one session's files in it.
//!
//! `$XDG_RUNTIME_DIR/vetto/` when that is the caller's own, else `/tmp/vetto-<uid>/` (created
//! 0700, refused if it is a symlink or somebody else's). Each session gets
//! `sessions/<id>/{bundle,state}` and a `supervisor` file with its pid and start time, so the
//! next start can tell a crashed session's leftovers from a live one and sweep them.

use std::fs;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

/// One session's directory; removed on drop.
pub struct Session {
    /// Its id (also the container id).
    pub id: String,
    /// `sessions/<id>`.
    pub dir: PathBuf,
}

impl Session {
    /// The OCI bundle directory.
    pub fn bundle(&self) -> PathBuf {
        self.dir.join("bundle")
    }
    /// libcontainer's state root.
    pub fn state(&self) -> PathBuf {
        self.dir.join("state")
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        if let Err(e) = fs::remove_dir_all(&self.dir) {
            tracing::warn!(dir = %self.dir.display(), "cannot remove session directory: {e}");
        }
    }
}

fn private_dir(p: &Path, uid: u32) -> Result<()> {
    match fs::symlink_metadata(p) {
        Ok(m) => {
            if m.file_type().is_symlink() || !m.is_dir() {
                bail!("runtime directory {} is not a plain directory", p.display());
            }
            if m.uid() != uid || m.mode() & 0o077 != 0 {
                bail!(
                    "runtime directory {} must be owned by uid {uid} with mode 0700 (found uid {} mode {:o})",
                    p.display(),
                    m.uid(),
                    m.mode() & 0o7777
                );
            }
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => fs::DirBuilder::new()
            .mode(0o700)
            .create(p)
            .with_context(|| format!("creating runtime directory {}", p.display())),
        Err(e) => Err(e).with_context(|| format!("checking runtime directory {}", p.display())),
    }
}

/// The runtime root for this user.
pub fn runtime_root(uid: u32) -> Result<PathBuf> {
    if let Some(x) = std::env::var_os("XDG_RUNTIME_DIR").map(PathBuf::from) {
        if x.is_absolute()
            && fs::metadata(&x)
                .map(|m| m.uid() == uid && m.is_dir())
                .unwrap_or(false)
        {
            let root = x.join("vetto");
            private_dir(&root, uid)?;
            return Ok(root);
        }
    }
    let root = std::env::temp_dir().join(format!("vetto-{uid}"));
    private_dir(&root, uid)?;
    Ok(root)
}

/// Start time of a process in clock ticks since boot (field 22 of /proc/PID/stat).
pub fn start_time(pid: u32) -> Option<u64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = stat.rsplit_once(')')?.1;
    after.split_whitespace().nth(19)?.parse().ok()
}

/// Remove sessions whose supervisor is gone (crashed, SIGKILLed).
pub fn sweep_stale(root: &Path) {
    let Ok(rd) = fs::read_dir(root.join("sessions")) else {
        return;
    };
    for e in rd.flatten() {
        let dir = e.path();
        let alive = fs::read_to_string(dir.join("supervisor"))
            .ok()
            .and_then(|s| {
                let (pid, start) = s.trim().split_once(' ')?;
                Some((pid.parse::<u32>().ok()?, start.parse::<u64>().ok()?))
            })
            .is_some_and(|(pid, start)| start_time(pid) == Some(start));
        if !alive {
            tracing::info!(dir = %dir.display(), "sweeping stale session");
            if let Err(err) = fs::remove_dir_all(&dir) {
                tracing::warn!(dir = %dir.display(), "cannot sweep stale session: {err}");
            }
        }
    }
}

/// Create a new session directory.
pub fn create(root: &Path) -> Result<Session> {
    let sessions = root.join("sessions");
    if !sessions.exists() {
        fs::DirBuilder::new()
            .mode(0o700)
            .create(&sessions)
            .context("creating sessions directory")?;
    }
    let pid = std::process::id();
    let mut rnd = [0u8; 6];
    if let Ok(mut f) = fs::File::open("/dev/urandom") {
        use std::io::Read;
        let _ = f.read_exact(&mut rnd);
    }
    let id = format!(
        "vetto-{pid}-{}",
        rnd.iter().map(|b| format!("{b:02x}")).collect::<String>()
    );
    let dir = sessions.join(&id);
    fs::DirBuilder::new()
        .mode(0o700)
        .create(&dir)
        .with_context(|| format!("creating {}", dir.display()))?;
    let s = Session { id, dir };
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(s.dir.join("supervisor"))
        .context("writing the supervisor file")?;
    writeln!(f, "{pid} {}", start_time(pid).unwrap_or(0)).context("writing the supervisor file")?;
    fs::DirBuilder::new()
        .mode(0o700)
        .create(s.bundle())
        .context("creating the bundle directory")?;
    fs::DirBuilder::new()
        .mode(0o700)
        .create(s.state())
        .context("creating the state directory")?;
    Ok(s)
}
