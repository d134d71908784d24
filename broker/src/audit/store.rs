//! The audit store: one SQLite database (WAL) holding one hash chain, its signed checkpoints,
//! and the export cursors; beside it the signed head file and the writers' lock file.
//!
//! Each record carries the SHA-256 of the record before it ([`record_hash`]), so an edited,
//! inserted, reordered or removed record breaks the chain where it happened. The head (the last
//! record's position and hash, signed) is kept outside the database, in `<db>.head`: a tail cut
//! off the database, or the database replaced by an older copy, no longer reaches it.
//!
//! Several processes write at once (sessions, their brokers, shim containers). Every append
//! holds an exclusive `flock` on `<db>.lock` across its transaction and the head update, so the
//! chain stays one line and the head never goes backwards. An append first checks that the
//! database still reaches the signed head, and refuses to write into a store that does not
//! (vetto fails closed then: `vetto audit verify` says where it broke).

use std::collections::HashMap;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use ed25519_dalek::SigningKey;
use rusqlite::{params, Connection, OpenFlags, OptionalExtension, TransactionBehavior};
use sha2::{Digest, Sha256};

use super::event::{rfc3339, Event, EventKind};
use super::key::Checkpoint;
use super::AuditError;

/// A checkpoint is written at least every this many records (and at every session end).
pub const CHECKPOINT_EVERY: u64 = 1000;

/// The WAL is checkpointed into the database when it reaches this many pages, and cut back to
/// nothing when a store is closed with at least this many in it ([`Store::checkpoint_if_due`]).
pub(crate) const WAL_PAGES: i64 = 64;

/// How long the session writer's checkpoint after its answer waits for other connections
/// (nobody waits for it; past this, the next writer's close folds the WAL).
const FOLD_PATIENCE: std::time::Duration = std::time::Duration::from_millis(50);

/// The WAL hook of a connection whose checkpoints are deferred ([`Store::defer_checkpoints`]):
/// it replaces SQLite's autocheckpoint (which is this same hook) with nothing; the WAL's length
/// is read from its file when the writer folds it.
fn no_autocheckpoint(_: &rusqlite::hooks::Wal, _: std::ffi::c_int) -> rusqlite::Result<()> {
    Ok(())
}

/// The length in frames of the WAL of the database `db` with pages of `page_size` bytes, from
/// the WAL file's size (a 32-byte header, then frames of a 24-byte header and a page each; 0
/// when there is none). The file keeps its length when SQLite starts writing it from the
/// beginning again, so this may count frames already folded: it errs towards folding.
fn wal_frames(db: &Path, page_size: u64) -> u64 {
    let mut wal = db.as_os_str().to_owned();
    wal.push("-wal");
    let len = std::fs::metadata(&wal).map(|m| m.len()).unwrap_or(0);
    len.saturating_sub(32) / (page_size.max(512) + 24)
}

/// The `prev` of the first record.
pub const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// A record's hash: SHA-256 over the store's id, the position, the previous hash and the exact
/// stored body (hex).
pub fn record_hash(store_id: &str, seq: u64, prev: &str, body: &str) -> String {
    let mut h = Sha256::new();
    h.update(b"vetto-audit-record-v1\0");
    h.update(store_id.as_bytes());
    h.update(b"\0");
    h.update(seq.to_string().as_bytes());
    h.update(b"\0");
    h.update(prev.as_bytes());
    h.update(b"\0");
    h.update(body.as_bytes());
    hex::encode(h.finalize())
}

/// Open (or create, 0600) one of the store's own files for reading and writing, without
/// following a symlink and without passing it across an exec.
/// An existing file must be a regular file of this user's that nobody else may read or write.
pub(crate) fn open_private(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::MetadataExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)?;
    let m = f.metadata()?;
    // SAFETY: geteuid cannot fail.
    let me = unsafe { libc::geteuid() };
    if !m.is_file() || m.uid() != me || m.mode() & 0o077 != 0 {
        return Err(std::io::Error::other(format!(
            "not a private file of this user (owner uid {}, mode {:o}; expected uid {me}, mode 0600): refusing to trust it",
            m.uid(),
            m.mode() & 0o7777
        )));
    }
    Ok(f)
}

/// Create `dir` (and its parents) if needed; a directory vetto creates is 0700. An existing
/// one must be a real directory (not a symlink) of this user's that nobody else may write or
/// read: vetto's state is trusted only where it made it.
pub fn private_dir(dir: &Path) -> Result<(), AuditError> {
    use std::os::unix::fs::MetadataExt;
    let err = |what: String, source| AuditError::Io {
        what,
        path: dir.to_path_buf(),
        source,
    };
    if std::fs::symlink_metadata(dir).is_err() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|source| err("creating the state directory".into(), source))?;
    }
    let m = std::fs::symlink_metadata(dir)
        .map_err(|source| err("checking the state directory".into(), source))?;
    // SAFETY: geteuid cannot fail.
    let me = unsafe { libc::geteuid() };
    if !m.is_dir() || m.uid() != me || m.mode() & 0o077 != 0 {
        return Err(err(
            format!(
                "refusing the state directory (it must be a directory, not a symlink, owned by uid {me} with mode 0700; found {} owned by uid {} mode {:o}):",
                if m.file_type().is_symlink() { "a symlink" } else if m.is_dir() { "a directory" } else { "a file" },
                m.uid(),
                m.mode() & 0o7777
            ),
            std::io::Error::from(std::io::ErrorKind::PermissionDenied),
        ));
    }
    Ok(())
}

/// The files of one store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StorePaths {
    /// The SQLite database.
    pub db: PathBuf,
    /// The signed head (`<db>.head`).
    pub head: PathBuf,
    /// The writers' lock (`<db>.lock`).
    pub lock: PathBuf,
}

impl StorePaths {
    /// The files of the store at `db`.
    pub fn new(db: &Path) -> Self {
        let with = |ext: &str| {
            let mut s = db.as_os_str().to_os_string();
            s.push(ext);
            PathBuf::from(s)
        };
        StorePaths {
            db: db.to_path_buf(),
            head: with(".head"),
            lock: with(".lock"),
        }
    }
}

/// One stored record: the event and its place in the chain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stored {
    /// The event (its `seq` is the chain position).
    pub event: Event,
    /// The exact body that was hashed.
    pub body: String,
    /// The previous record's hash.
    pub prev: String,
    /// This record's hash.
    pub hash: String,
}

impl Stored {
    /// The event as one JSON object with `prev` and `hash` added (a JSONL line).
    pub fn to_json(&self) -> serde_json::Value {
        let mut v = serde_json::to_value(&self.event).unwrap_or(serde_json::Value::Null);
        if let Some(o) = v.as_object_mut() {
            o.insert("prev".into(), self.prev.clone().into());
            o.insert("hash".into(), self.hash.clone().into());
        }
        v
    }
}

/// Which records to read.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    /// Only records at or after this time (RFC 3339 UTC).
    pub since: Option<String>,
    /// Only this session's.
    pub session: Option<String>,
    /// Only this kind.
    pub kind: Option<String>,
    /// Only records after this chain position.
    pub after_seq: Option<u64>,
    /// At most this many (the first ones).
    pub limit: Option<u64>,
}

/// One session as `vetto audit sessions` lists it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct SessionRow {
    /// The session id.
    pub session: String,
    /// Its first record's time.
    pub first: String,
    /// Its last record's time.
    pub last: String,
    /// Its records.
    pub events: u64,
    /// Its `session_start` body, if recorded.
    pub start: Option<serde_json::Value>,
    /// Its `session_end` body, if recorded.
    pub end: Option<serde_json::Value>,
    /// Connections allowed / denied or failed.
    pub allowed: u64,
    /// Connections refused or failed.
    pub denied: u64,
}

/// An open store.
pub struct Store {
    paths: StorePaths,
    conn: Connection,
    lock: std::fs::File,
    /// The head file, open for rewriting in place (writers only).
    head: Option<std::fs::File>,
    store_id: String,
    /// The head this writer signed last, with the key it signed with: a head found identical
    /// (every field, the signature included) at the next append is not verified again.
    signed_last: Option<(ed25519_dalek::VerifyingKey, Checkpoint)>,
}

impl Drop for Store {
    /// Every connection cuts a long WAL back as it closes (see [`Store::fold_wal`]), without
    /// waiting for anyone: the broker's and vetto-shim's closes come before a status is
    /// delivered. Their autocheckpoint has folded it already, so what is left is the cut. A
    /// read-only connection cannot, and a failure loses nothing (the records are in the WAL).
    fn drop(&mut self) {
        let _ = self.fold_wal(std::time::Duration::ZERO);
    }
}

fn sql(path: &Path, what: &str) -> impl Fn(rusqlite::Error) -> AuditError {
    let path = path.to_path_buf();
    let what = what.to_string();
    move |source| AuditError::Sql {
        what: what.clone(),
        path: path.clone(),
        source,
    }
}

/// How long opening the store retries a busy database (as `busy_timeout`).
const BUSY_PATIENCE: std::time::Duration = std::time::Duration::from_secs(30);

/// SQLITE_BUSY or SQLITE_LOCKED: another connection holds what this one needs, for now.
fn is_busy(e: &rusqlite::Error) -> bool {
    matches!(
        e.sqlite_error_code(),
        Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
    )
}

/// Holds the writers' lock until dropped.
struct Locked<'a>(&'a std::fs::File);

impl<'a> Locked<'a> {
    fn take(f: &'a std::fs::File, path: &Path) -> Result<Self, AuditError> {
        loop {
            // SAFETY: flock on a descriptor we own.
            if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) } == 0 {
                return Ok(Locked(f));
            }
            let e = std::io::Error::last_os_error();
            if e.kind() != std::io::ErrorKind::Interrupted {
                return Err(AuditError::Io {
                    what: "locking the store".into(),
                    path: path.to_path_buf(),
                    source: e,
                });
            }
        }
    }
}

impl Drop for Locked<'_> {
    fn drop(&mut self) {
        // SAFETY: unlocking a descriptor we own.
        unsafe { libc::flock(self.0.as_raw_fd(), libc::LOCK_UN) };
    }
}

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS records(
    seq INTEGER PRIMARY KEY, session TEXT NOT NULL, session_seq INTEGER NOT NULL,
    time TEXT NOT NULL, kind TEXT NOT NULL, body TEXT NOT NULL, prev TEXT NOT NULL,
    hash TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS records_session ON records(session, session_seq);
CREATE TABLE IF NOT EXISTS checkpoints(
    seq INTEGER PRIMARY KEY, hash TEXT NOT NULL, time TEXT NOT NULL, signature TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS exports(destination TEXT PRIMARY KEY, acked INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS head(
    id INTEGER PRIMARY KEY CHECK (id = 1), seq INTEGER NOT NULL, hash TEXT NOT NULL,
    time TEXT NOT NULL, signature TEXT NOT NULL);
";

impl Store {
    /// Open (or create) the store at `paths`. With `create` false a missing database is an
    /// error (the readers: `verify`, `query`).
    pub fn open(paths: &StorePaths, create: bool) -> Result<Self, AuditError> {
        if let Some(dir) = paths.db.parent() {
            if create {
                private_dir(dir)?;
            }
        }
        for p in [&paths.db, &paths.head, &paths.lock] {
            if let Ok(m) = std::fs::symlink_metadata(p) {
                if !m.is_file() {
                    return Err(AuditError::NotRegular(p.clone()));
                }
            }
        }
        if !create && !paths.db.is_file() {
            return Err(AuditError::NoStore(paths.db.clone()));
        }
        let lock = open_private(&paths.lock)
            .or_else(|e| match create {
                // A reader without write access to the lock (e.g. a copy): read without it.
                false => std::fs::File::open("/dev/null"),
                true => Err(e),
            })
            .map_err(|source| AuditError::Io {
                what: "opening the lock".into(),
                path: paths.lock.clone(),
                source,
            })?;
        let flags = match create {
            true => OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_CREATE,
            false => OpenFlags::SQLITE_OPEN_READ_WRITE,
        } | OpenFlags::SQLITE_OPEN_NO_MUTEX
            | OpenFlags::SQLITE_OPEN_NOFOLLOW;
        let e = sql(&paths.db, "opening");
        // SQLite's NOFOLLOW refuses a symlink anywhere in the path: open it through the
        // directory's canonical path (a HOME reached through a symlink is ordinary), so only
        // the database file itself may not be a link.
        let db = match (paths.db.parent(), paths.db.file_name()) {
            (Some(dir), Some(name)) if !dir.as_os_str().is_empty() => dir
                .canonicalize()
                .map(|d| d.join(name))
                .unwrap_or_else(|_| paths.db.clone()),
            _ => paths.db.clone(),
        };
        // Opening can meet SQLITE_BUSY without SQLite's busy handler being asked (another
        // connection closing as the last one, or replaying the WAL, at that very moment): with
        // dozens of sessions starting and ending at once it did, about once in a few thousand
        // opens. Busy is transient: try again, for up to as long as the busy timeout.
        let started = std::time::Instant::now();
        let open = || -> Result<Connection, rusqlite::Error> {
            let conn = Connection::open_with_flags(&db, flags)?;
            // What is left of the patience, so that the retries below do not add to it.
            let left = BUSY_PATIENCE.saturating_sub(started.elapsed());
            conn.busy_timeout(left.max(std::time::Duration::from_millis(1)))?;
            conn.pragma_update(None, "journal_mode", "WAL")?;
            conn.pragma_update(None, "synchronous", "NORMAL")?;
            // Every session opens the store, appends twice and closes it. Closing the last
            // connection would checkpoint (two fsyncs) and delete the WAL, and the next session
            // would create it again (two more: the file and its directory): on a filesystem busy
            // with the sandbox's own set-up, that was most of auditing's start-up cost. So the WAL
            // stays, and is folded into the database every 64 pages instead. (The first connection
            // replays the WAL when it opens, which costs in proportion to its size: so a store
            // closed with 64 pages or more in its WAL cuts it back to nothing, see fold_wal; the
            // file stays, empty.)
            conn.set_db_config(
                rusqlite::config::DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE,
                true,
            )?;
            conn.pragma_update(None, "wal_autocheckpoint", WAL_PAGES)?;
            Ok(conn)
        };
        let conn = loop {
            match open() {
                Ok(c) => break c,
                Err(err) if is_busy(&err) && started.elapsed() < BUSY_PATIENCE => {
                    std::thread::sleep(std::time::Duration::from_millis(5));
                }
                Err(err) => return Err(e(err)),
            }
        };
        let _ = std::fs::set_permissions(&paths.db, std::fs::Permissions::from_mode(0o600));
        let head = match create {
            true => Some(open_private(&paths.head).map_err(|source| AuditError::Io {
                what: "opening the head".into(),
                path: paths.head.clone(),
                source,
            })?),
            false => None,
        };
        let mut store = Store {
            paths: paths.clone(),
            conn,
            lock,
            head,
            store_id: String::new(),
            signed_last: None,
        };
        store.store_id = store.init(create)?;
        Ok(store)
    }

    /// The schema and the store's id, made once (under the lock, so two first writers agree).
    fn init(&mut self, create: bool) -> Result<String, AuditError> {
        let e = sql(&self.paths.db, "initialising");
        let existing: Option<String> = self
            .conn
            .query_row("SELECT value FROM meta WHERE key = 'store_id'", [], |r| {
                r.get(0)
            })
            .optional()
            .unwrap_or(None);
        if let Some(id) = existing {
            return Ok(id);
        }
        if !create {
            return Err(AuditError::NoStore(self.paths.db.clone()));
        }
        let _l = Locked::take(&self.lock, &self.paths.lock)?;
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(&e)?;
        tx.execute_batch(SCHEMA).map_err(&e)?;
        let id: Option<String> = tx
            .query_row("SELECT value FROM meta WHERE key = 'store_id'", [], |r| {
                r.get(0)
            })
            .optional()
            .map_err(&e)?;
        let id = match id {
            Some(id) => id,
            None => {
                let mut b = [0u8; 16];
                getrandom::fill(&mut b).map_err(|x| AuditError::Io {
                    what: "generating the store id".into(),
                    path: self.paths.db.clone(),
                    source: std::io::Error::other(x.to_string()),
                })?;
                let id = hex::encode(b);
                tx.execute(
                    "INSERT INTO meta(key, value) VALUES ('store_id', ?1)",
                    params![id],
                )
                .map_err(&e)?;
                id
            }
        };
        tx.commit().map_err(&e)?;
        Ok(id)
    }

    /// From now on, a commit of this connection no longer folds the WAL into the database
    /// when it has grown to [`WAL_PAGES`] (SQLite's autocheckpoint: the WAL synced, copied and
    /// the database synced, ~3 ms on a disk, every few sessions, inside the commit that crossed
    /// the line); [`Store::checkpoint_if_due`] does it when the caller no longer has anyone
    /// waiting (the session writer: after its answer to `session_end`). What a commit
    /// guarantees is unchanged (`synchronous=NORMAL`: safe from a crash of the process at once,
    /// from a power loss once a checkpoint has synced the WAL, which now comes a moment after
    /// the answer rather than inside it, every few sessions as before). Every other connection
    /// keeps its autocheckpoint, and every connection cuts a long WAL back as it closes, so a
    /// WAL left long by a writer killed before its checkpoint is folded by the next commit of
    /// one of those, or by the next writer's close.
    pub fn defer_checkpoints(&self) {
        self.conn.wal_hook(Some(no_autocheckpoint));
    }

    /// The WAL's length in frames ([`wal_frames`]), with this database's page size.
    fn wal_frames(&self) -> u64 {
        let page_size = self
            .conn
            .query_row("PRAGMA page_size", [], |r| r.get::<_, i64>(0))
            .ok()
            .and_then(|n| u64::try_from(n).ok())
            .unwrap_or(4096);
        wal_frames(&self.paths.db, page_size)
    }

    /// Fold the WAL into the database and cut it back to nothing (`TRUNCATE`), if it holds
    /// [`WAL_PAGES`] frames or more; other connections are waited for up to `patience`
    /// (their readers and writers: a fold they block is left for a later close). Returns
    /// whether the WAL was cut back.
    ///
    /// Why it is cut, not only folded: the first connection to open the store (every session's
    /// writer is a process of its own, so nearly always) reads the whole WAL to rebuild its
    /// index, and after that rebuild SQLite counts none of its frames as folded, so it appends
    /// to them. Only a later write of the connection that folded it would start the WAL
    /// afresh, and the last writer of a session makes none. Uncut, the WAL grew by every
    /// session (30 MB after a day of tests), and every session's start read all of it.
    fn fold_wal(&self, patience: std::time::Duration) -> Result<bool, AuditError> {
        if self.wal_frames() < WAL_PAGES as u64 {
            return Ok(false);
        }
        let e = sql(&self.paths.db, "checkpointing the WAL");
        self.conn.busy_timeout(patience).map_err(&e)?;
        let busy: Result<i64, _> =
            self.conn
                .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| r.get(0));
        // The store's own patience again, for whatever this connection does next.
        let _ = self.conn.busy_timeout(BUSY_PATIENCE);
        match busy {
            Ok(0) => Ok(true),
            Ok(_) => Ok(false),
            Err(err) if is_busy(&err) => Ok(false),
            Err(err) => Err(e(err)),
        }
    }

    /// With [`Store::defer_checkpoints`], after the last commit that anyone waits for: fold
    /// the WAL into the database and cut it back if it is due (see [`Store::fold_wal`]).
    /// Returns whether it was.
    pub fn checkpoint_if_due(&self) -> Result<bool, AuditError> {
        self.fold_wal(FOLD_PATIENCE)
    }

    /// The store's random id.
    pub fn id(&self) -> &str {
        &self.store_id
    }

    /// Its files.
    pub fn paths(&self) -> &StorePaths {
        &self.paths
    }

    /// The signed head file, if there is one.
    pub fn read_head(&self) -> Result<Option<Checkpoint>, AuditError> {
        read_head(&self.paths.head)
    }

    /// Append `events` (time in ms since the epoch, session, kind) as one transaction; with
    /// `checkpoint`, also write a signed checkpoint at the new head. Returns them as stored.
    pub fn append(
        &mut self,
        key: &SigningKey,
        events: Vec<(u64, String, EventKind)>,
        checkpoint: bool,
    ) -> Result<Vec<Stored>, AuditError> {
        if events.is_empty() && !checkpoint {
            return Ok(vec![]);
        }
        let e = sql(&self.paths.db, "appending");
        let _l = Locked::take(&self.lock, &self.paths.lock)?;
        let head = self.head_now()?;
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(&e)?;
        let last: Option<(u64, String)> = tx
            .query_row(
                "SELECT seq, hash FROM records ORDER BY seq DESC LIMIT 1",
                [],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()
            .map_err(&e)?;
        let db_head = read_db_head(&tx, &self.store_id).map_err(&e)?;
        let vk = key.verifying_key();
        check_heads(
            &vk,
            self.signed_last
                .as_ref()
                .filter(|(k, _)| *k == vk)
                .map(|(_, c)| c),
            &self.store_id,
            last.as_ref(),
            db_head.as_ref(),
            head.as_ref(),
            |seq| {
                tx.query_row(
                    "SELECT hash FROM records WHERE seq = ?1",
                    params![seq],
                    |r| r.get::<_, String>(0),
                )
                .optional()
                .ok()
                .flatten()
            },
        )
        .map_err(AuditError::Broken)?;
        let (mut seq, mut prev) = last.unwrap_or((0, GENESIS.to_string()));
        let mut session_seqs: HashMap<String, u64> = HashMap::new();
        let mut out = Vec::with_capacity(events.len());
        {
            let mut max_seq = tx
                .prepare_cached(
                    "SELECT COALESCE(MAX(session_seq), 0) FROM records WHERE session = ?1",
                )
                .map_err(&e)?;
            let mut insert = tx
                .prepare_cached(
                    "INSERT INTO records(seq, session, session_seq, time, kind, body, prev, hash)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                )
                .map_err(&e)?;
            for (ms, session, kind) in events {
                let sseq = match session_seqs.get_mut(&session) {
                    Some(n) => n,
                    None => {
                        let n: u64 = max_seq
                            .query_row(params![session], |r| r.get(0))
                            .map_err(&e)?;
                        session_seqs.entry(session.clone()).or_insert(n)
                    }
                };
                *sseq += 1;
                seq += 1;
                let event = Event {
                    seq,
                    session,
                    session_seq: *sseq,
                    time: rfc3339(ms),
                    kind,
                };
                let body = serde_json::to_string(&event).map_err(AuditError::Json)?;
                let hash = record_hash(&self.store_id, seq, &prev, &body);
                insert
                    .execute(params![
                        seq,
                        event.session,
                        event.session_seq,
                        event.time,
                        event.kind.name(),
                        body,
                        prev,
                        hash
                    ])
                    .map_err(&e)?;
                let record_prev = std::mem::replace(&mut prev, hash.clone());
                out.push(Stored {
                    event,
                    body,
                    prev: record_prev,
                    hash,
                });
            }
        }
        if seq == 0 {
            // Nothing recorded yet: nothing to sign.
            tx.commit().map_err(&e)?;
            return Ok(out);
        }
        let now = rfc3339(super::event::now_ms());
        let last_cp: u64 = tx
            .query_row("SELECT COALESCE(MAX(seq), 0) FROM checkpoints", [], |r| {
                r.get(0)
            })
            .map_err(&e)?;
        // The head and a checkpoint at the same place say the same thing: one signature.
        let head = Checkpoint::sign(key, &self.store_id, seq, &prev, &now);
        tx.execute(
            "INSERT OR REPLACE INTO head(id, seq, hash, time, signature) VALUES (1, ?1, ?2, ?3, ?4)",
            params![head.seq, head.hash, head.time, head.signature],
        )
        .map_err(&e)?;
        if checkpoint || seq >= last_cp + CHECKPOINT_EVERY {
            tx.execute(
                "INSERT OR REPLACE INTO checkpoints(seq, hash, time, signature) VALUES (?1, ?2, ?3, ?4)",
                params![head.seq, head.hash, head.time, head.signature],
            )
            .map_err(&e)?;
        }
        tx.commit().map_err(&e)?;
        self.signed_last = Some((vk, head.clone()));
        // Rewritten in place, still under the lock. A writer killed before this leaves the
        // file behind the database's own signed head, on the same chain: the next append (and
        // verify) accepts that, and the file catches up.
        self.write_head(&head)?;
        Ok(out)
    }

    /// The head as the open head file holds it (empty: none yet).
    fn head_now(&self) -> Result<Option<Checkpoint>, AuditError> {
        use std::os::unix::fs::FileExt;
        let Some(f) = &self.head else {
            return read_head(&self.paths.head);
        };
        let mut buf = vec![0u8; 1024];
        let n = f.read_at(&mut buf, 0).map_err(|source| AuditError::Io {
            what: "reading the head".into(),
            path: self.paths.head.clone(),
            source,
        })?;
        if n == 0 {
            return Ok(None);
        }
        serde_json::from_slice(&buf[..n]).map(Some).map_err(|_| {
            AuditError::Broken(format!(
                "the head file {} is not a signed head",
                self.paths.head.display()
            ))
        })
    }

    fn write_head(&self, cp: &Checkpoint) -> Result<(), AuditError> {
        use std::os::unix::fs::FileExt;
        let io = |source| AuditError::Io {
            what: "writing the head".into(),
            path: self.paths.head.clone(),
            source,
        };
        let Some(f) = &self.head else {
            return Err(io(std::io::Error::other("the store was opened read-only")));
        };
        let text = serde_json::to_vec(cp).map_err(AuditError::Json)?;
        f.write_all_at(&text, 0).map_err(io)?;
        // A head is as long as the last one but for a digit of its sequence number now and
        // then: cut the file only when something of an older, longer head is left after this
        // one (an ftruncate, even to the same length, is a journal transaction of its own on
        // ext4: 25-200 us, twice in every session).
        let len = text.len() as u64;
        if f.metadata().map_err(io)?.len() != len {
            f.set_len(len).map_err(io)?;
        }
        Ok(())
    }

    /// Records matching `f`, in chain order.
    pub fn query(&self, f: &Filter) -> Result<Vec<Stored>, AuditError> {
        let e = sql(&self.paths.db, "reading");
        let mut q = String::from("SELECT body, prev, hash FROM records WHERE seq > ?1");
        let mut args: Vec<rusqlite::types::Value> = vec![(f.after_seq.unwrap_or(0) as i64).into()];
        if let Some(s) = &f.since {
            args.push(s.clone().into());
            q.push_str(&format!(" AND time >= ?{}", args.len()));
        }
        if let Some(s) = &f.session {
            args.push(s.clone().into());
            q.push_str(&format!(" AND session = ?{}", args.len()));
        }
        if let Some(k) = &f.kind {
            args.push(k.clone().into());
            q.push_str(&format!(" AND kind = ?{}", args.len()));
        }
        q.push_str(" ORDER BY seq");
        if let Some(l) = f.limit {
            q.push_str(&format!(" LIMIT {l}"));
        }
        let mut st = self.conn.prepare(&q).map_err(&e)?;
        let rows = st
            .query_map(rusqlite::params_from_iter(args), |r| {
                Ok((r.get::<_, String>(0)?, r.get(1)?, r.get(2)?))
            })
            .map_err(&e)?;
        let mut out = vec![];
        for row in rows {
            let (body, prev, hash) = row.map_err(&e)?;
            let event: Event = serde_json::from_str(&body).map_err(AuditError::Json)?;
            out.push(Stored {
                event,
                body,
                prev,
                hash,
            });
        }
        Ok(out)
    }

    /// Every session, oldest first: every id with a `session_start` (not the ids of other
    /// records' groups, such as a change set's `changes` records).
    pub fn sessions(&self) -> Result<Vec<SessionRow>, AuditError> {
        let e = sql(&self.paths.db, "reading");
        let mut st = self
            .conn
            .prepare(
                "SELECT session, MIN(time), MAX(time), COUNT(*),
                    (SELECT body FROM records r2 WHERE r2.session = r.session AND kind = 'session_start' ORDER BY seq LIMIT 1),
                    (SELECT body FROM records r2 WHERE r2.session = r.session AND kind = 'session_end' ORDER BY seq DESC LIMIT 1),
                    SUM(kind = 'connection' AND json_extract(body, '$.decision') = 'allow'),
                    SUM(kind = 'connection' AND json_extract(body, '$.decision') != 'allow')
                 FROM records r GROUP BY session
                 HAVING SUM(kind = 'session_start') > 0 ORDER BY MIN(seq)",
            )
            .map_err(&e)?;
        let parse = |b: Option<String>| b.and_then(|b| serde_json::from_str(&b).ok());
        let rows = st
            .query_map([], |r| {
                Ok(SessionRow {
                    session: r.get(0)?,
                    first: r.get(1)?,
                    last: r.get(2)?,
                    events: r.get(3)?,
                    start: parse(r.get(4)?),
                    end: parse(r.get(5)?),
                    allowed: r.get::<_, Option<u64>>(6)?.unwrap_or(0),
                    denied: r.get::<_, Option<u64>>(7)?.unwrap_or(0),
                })
            })
            .map_err(&e)?;
        rows.collect::<Result<Vec<_>, _>>().map_err(&e)
    }

    /// Every checkpoint, in order.
    pub fn checkpoints(&self) -> Result<Vec<Checkpoint>, AuditError> {
        let e = sql(&self.paths.db, "reading");
        let mut st = self
            .conn
            .prepare("SELECT seq, hash, time, signature FROM checkpoints ORDER BY seq")
            .map_err(&e)?;
        let id = self.store_id.clone();
        let rows = st
            .query_map([], |r| {
                Ok(Checkpoint {
                    store_id: id.clone(),
                    seq: r.get(0)?,
                    hash: r.get(1)?,
                    time: r.get(2)?,
                    signature: r.get(3)?,
                })
            })
            .map_err(&e)?;
        rows.collect::<Result<Vec<_>, _>>().map_err(&e)
    }

    /// Every record's raw columns, in stored order (for `verify`): (seq, session,
    /// session_seq, time, kind, body, prev, hash).
    pub fn raw_records(&self) -> Result<Vec<RawRecord>, AuditError> {
        let e = sql(&self.paths.db, "reading");
        let mut st = self
            .conn
            .prepare(
                "SELECT seq, session, session_seq, time, kind, body, prev, hash FROM records ORDER BY seq",
            )
            .map_err(&e)?;
        let rows = st
            .query_map([], |r| {
                Ok(RawRecord {
                    seq: r.get(0)?,
                    session: r.get(1)?,
                    session_seq: r.get(2)?,
                    time: r.get(3)?,
                    kind: r.get(4)?,
                    body: r.get(5)?,
                    prev: r.get(6)?,
                    hash: r.get(7)?,
                })
            })
            .map_err(&e)?;
        rows.collect::<Result<Vec<_>, _>>().map_err(&e)
    }

    /// Run `f` holding the writers' lock inside one read transaction: a consistent view of the
    /// database and the head file.
    pub fn snapshot<T>(
        &mut self,
        f: impl FnOnce(&Store) -> Result<T, AuditError>,
    ) -> Result<T, AuditError> {
        let lock = self.lock.try_clone().map_err(|source| AuditError::Io {
            what: "locking the store".into(),
            path: self.paths.lock.clone(),
            source,
        })?;
        let _l = Locked::take(&lock, &self.paths.lock)?;
        let e = sql(&self.paths.db, "reading");
        self.conn.execute_batch("BEGIN").map_err(&e)?;
        let out = f(self);
        let _ = self.conn.execute_batch("COMMIT");
        out
    }

    /// The database's own signed head, if any.
    pub fn db_head(&self) -> Result<Option<Checkpoint>, AuditError> {
        read_db_head(&self.conn, &self.store_id).map_err(sql(&self.paths.db, "reading the head"))
    }

    /// How far `destination` has acknowledged (the last chain position it confirmed).
    pub fn acked(&self, destination: &str) -> Result<Option<u64>, AuditError> {
        self.conn
            .query_row(
                "SELECT acked FROM exports WHERE destination = ?1",
                params![destination],
                |r| r.get(0),
            )
            .optional()
            .map_err(sql(&self.paths.db, "reading the export cursor"))
    }

    /// Record that `destination` confirmed everything up to `seq` (never moves backwards).
    pub fn set_acked(&self, destination: &str, seq: u64) -> Result<(), AuditError> {
        self.conn
            .execute(
                "INSERT INTO exports(destination, acked) VALUES (?1, ?2)
                 ON CONFLICT(destination) DO UPDATE SET acked = MAX(acked, excluded.acked)",
                params![destination, seq],
            )
            .map(|_| ())
            .map_err(sql(&self.paths.db, "writing the export cursor"))
    }

    /// Give `destination` the cursor `seq` if it has none yet; returns whether it did. One
    /// statement, so a cursor another writer set or moved meanwhile is never changed.
    pub fn start_acked(&self, destination: &str, seq: u64) -> Result<bool, AuditError> {
        self.conn
            .execute(
                "INSERT INTO exports(destination, acked) VALUES (?1, ?2)
                 ON CONFLICT(destination) DO NOTHING",
                params![destination, seq],
            )
            .map(|n| n == 1)
            .map_err(sql(&self.paths.db, "writing the export cursor"))
    }

    /// The last chain position, 0 when empty.
    pub fn last_seq(&self) -> Result<u64, AuditError> {
        self.conn
            .query_row("SELECT COALESCE(MAX(seq), 0) FROM records", [], |r| {
                r.get(0)
            })
            .map_err(sql(&self.paths.db, "reading"))
    }
}

/// One record's columns as stored.
#[derive(Debug, Clone)]
pub struct RawRecord {
    /// Chain position.
    pub seq: u64,
    /// Session column.
    pub session: String,
    /// Session position column.
    pub session_seq: u64,
    /// Time column.
    pub time: String,
    /// Kind column.
    pub kind: String,
    /// The hashed body.
    pub body: String,
    /// Previous hash.
    pub prev: String,
    /// This hash.
    pub hash: String,
}

/// The signed head the database keeps of itself (written in each append's transaction).
pub fn read_db_head(
    conn: &Connection,
    store_id: &str,
) -> Result<Option<Checkpoint>, rusqlite::Error> {
    conn.query_row(
        "SELECT seq, hash, time, signature FROM head WHERE id = 1",
        [],
        |r| {
            Ok(Checkpoint {
                store_id: store_id.to_string(),
                seq: r.get(0)?,
                hash: r.get(1)?,
                time: r.get(2)?,
                signature: r.get(3)?,
            })
        },
    )
    .optional()
}

/// Whether the store's two signed heads hold (the rule writers and `verify` share):
/// - the database's own head (`db`) is signed by `key` for `store_id`, and the records end
///   exactly there (`last`): no record after it, none cut before it;
/// - the head file (`file`) is signed too, and lies on the same chain at or before it: ahead
///   means the database was cut or replaced by an older copy; behind (on the chain) means a
///   writer stopped between its commit and the file's update, which is harmless.
///
/// `hash_at` gives the stored hash of a record. `known` is a head already known to be signed
/// by `key` (the writer's own last one): a head identical to it, or to one verified here
/// already (the database's head and the head file are usually the same), is not verified a
/// second time. The error says what is wrong.
pub fn check_heads<'a>(
    key: &ed25519_dalek::VerifyingKey,
    known: Option<&'a Checkpoint>,
    store_id: &str,
    last: Option<&(u64, String)>,
    db: Option<&'a Checkpoint>,
    file: Option<&'a Checkpoint>,
    hash_at: impl Fn(u64) -> Option<String>,
) -> Result<(), String> {
    let good = std::cell::Cell::new(known);
    let signed = |c: &'a Checkpoint| {
        if c.store_id != store_id {
            return false;
        }
        if good.get().is_some_and(|g| g == c) {
            return true;
        }
        let ok = c.verifies(key);
        if ok {
            good.set(Some(c));
        }
        ok
    };
    match (last, db) {
        (None, None) => {}
        (None, Some(d)) => {
            return Err(format!(
                "the database is empty but its signed head is at record {}",
                d.seq
            ))
        }
        (Some((seq, _)), None) => {
            return Err(format!("the database has {seq} records but no signed head"))
        }
        (Some(_), Some(d)) if !signed(d) => {
            return Err("the database's head is not signed by this store's key".into())
        }
        (Some((seq, _)), Some(d)) if d.seq > *seq => {
            return Err(format!(
                "the store ends at record {seq} but its signed head is at record {}: records {}..{} were cut off",
                d.seq,
                seq + 1,
                d.seq
            ))
        }
        (Some((seq, hash)), Some(d)) if d.seq != *seq || d.hash != *hash => {
            return Err(format!(
                "the database ends at record {seq} but its signed head is at record {} with another hash: records were appended or rewritten without the key",
                d.seq
            ))
        }
        (Some(_), Some(_)) => {}
    }
    match (file, db) {
        (None, None) => Ok(()),
        (None, Some(_)) => Err("the head file is missing".into()),
        (Some(f), _) if !signed(f) => {
            Err("the head file is not signed by this store's key".into())
        }
        (Some(f), None) => Err(format!(
            "the head file is at record {} but the database has no head",
            f.seq
        )),
        (Some(f), Some(d)) if f.seq > d.seq => Err(format!(
            "the store ends at record {} but the head file is signed at record {}: records {}..{} were cut off (the tail truncated, or the store replaced by an older copy)",
            d.seq,
            f.seq,
            d.seq + 1,
            f.seq
        )),
        (Some(f), Some(_)) if hash_at(f.seq).as_deref() != Some(f.hash.as_str()) => Err(format!(
            "record {}: its hash differs from the head file's (the store was replaced or rewritten)",
            f.seq
        )),
        (Some(_), Some(_)) => Ok(()),
    }
}

/// The signed head at `path`, if there is one.
pub fn read_head(path: &Path) -> Result<Option<Checkpoint>, AuditError> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(AuditError::Io {
                what: "reading the head".into(),
                path: path.to_path_buf(),
                source,
            })
        }
    };
    if text.is_empty() {
        return Ok(None);
    }
    serde_json::from_str(&text).map(Some).map_err(|_| {
        AuditError::Broken(format!(
            "the head file {} is not a signed head",
            path.display()
        ))
    })
}
