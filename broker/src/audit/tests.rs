//! The store, the chain and `verify`, against every kind of tampering the issue names.
#![allow(clippy::unwrap_used)] // Tests: a panic is the failure report.

use rusqlite::params;

use super::event::{EndReason, Engine, EventKind, Limit, SessionEnd, SessionStart};
use super::key;
use super::store::{Store, StorePaths};
use super::verify::verify;
use super::{AuditConfig, AuditError, Recorder};

fn start() -> EventKind {
    EventKind::SessionStart(SessionStart {
        policy_digest: "00".repeat(32),
        profile: "default".into(),
        layers: vec!["built-in profile \"default\"".into()],
        tier: "FULL".into(),
        landlock_abi: Some(7),
        argv: vec!["true".into()],
        project: "/p".into(),
        uid: 1000,
        engine: Engine::Run,
        change_set: None,
    })
}

fn end() -> EventKind {
    EventKind::SessionEnd(SessionEnd {
        status: Some(0),
        signal: None,
        duration_ms: 3,
        reason: EndReason::Exit,
        control: None,
    })
}

fn limit(i: u64) -> EventKind {
    EventKind::Limit(Limit {
        limit: "processes".into(),
        value: i,
        detail: format!("event {i}"),
    })
}

/// A store with `n` sessions of start, 3 limits, end (5 records each).
fn filled(dir: &std::path::Path, n: usize) -> AuditConfig {
    let cfg = AuditConfig::in_dir(dir);
    for s in 0..n {
        let mut r = Recorder::open(&cfg, &format!("s{s}")).unwrap();
        r.record(start()).unwrap();
        for i in 0..3 {
            r.record(limit(i)).unwrap();
        }
        r.record_batch(vec![(super::event::now_ms(), end())], true)
            .unwrap();
    }
    cfg
}

fn check(cfg: &AuditConfig) -> super::verify::Report {
    let k = key::load(&cfg.key).unwrap().verifying_key();
    verify(&StorePaths::new(&cfg.store), &k).unwrap()
}

fn sql(cfg: &AuditConfig, q: &str) {
    let c = rusqlite::Connection::open(&cfg.store).unwrap();
    c.execute_batch(q).unwrap();
}

#[test]
fn a_clean_store_verifies() {
    let d = crate::private_tempdir();
    let cfg = filled(d.path(), 3);
    let r = check(&cfg);
    assert!(r.ok(), "{r:?}");
    assert_eq!((r.records, r.sessions, r.head), (15, 3, Some(15)));
    assert_eq!(r.checkpoints, 3, "one per session end");
}

#[test]
fn an_edited_field_breaks_at_its_record() {
    let d = crate::private_tempdir();
    let cfg = filled(d.path(), 2);
    sql(
        &cfg,
        "UPDATE records SET body = replace(body, '\"exit\"', '\"killed\"') WHERE seq = 5",
    );
    let r = check(&cfg);
    assert_eq!(r.broken_at, Some(5), "{r:?}");
    assert!(r.problems[0].contains("edited"), "{r:?}");
    // An indexed column alone.
    let d = crate::private_tempdir();
    let cfg = filled(d.path(), 2);
    sql(&cfg, "UPDATE records SET kind = 'limit' WHERE seq = 6");
    assert_eq!(check(&cfg).broken_at, Some(6));
}

#[test]
fn a_deleted_row_breaks_at_its_place() {
    let d = crate::private_tempdir();
    let cfg = filled(d.path(), 2);
    sql(&cfg, "DELETE FROM records WHERE seq = 7");
    let r = check(&cfg);
    assert_eq!(r.broken_at, Some(7), "{r:?}");
    assert!(r.problems[0].contains("missing"), "{r:?}");
}

#[test]
fn two_reordered_rows_break_at_the_first() {
    let d = crate::private_tempdir();
    let cfg = filled(d.path(), 2);
    // Swap the contents of records 3 and 4 (positions kept).
    sql(
        &cfg,
        "UPDATE records SET seq = -1 WHERE seq = 3;
         UPDATE records SET seq = 3 WHERE seq = 4;
         UPDATE records SET seq = 4 WHERE seq = -1;",
    );
    let r = check(&cfg);
    assert_eq!(r.broken_at, Some(3), "{r:?}");
}

#[test]
fn a_forged_row_breaks_where_it_was_inserted() {
    let d = crate::private_tempdir();
    let cfg = filled(d.path(), 2);
    // Make room after record 4, then insert a record whose own hash is right for its content
    // and its link: only its successor's link betrays it.
    let c = rusqlite::Connection::open(&cfg.store).unwrap();
    c.execute_batch("UPDATE records SET seq = seq + 1000 WHERE seq > 4; UPDATE records SET seq = seq - 999 WHERE seq > 1000;").unwrap();
    let (id, prev): (String, String) = c
        .query_row(
            "SELECT (SELECT value FROM meta WHERE key='store_id'), hash FROM records WHERE seq = 4",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    let body = r#"{"seq":5,"session":"s0","session_seq":5,"time":"2026-01-01T00:00:00.000Z","kind":"limit","limit":"x","value":1,"detail":"forged"}"#;
    let hash = super::store::record_hash(&id, 5, &prev, body);
    c.execute(
        "INSERT INTO records VALUES (5, 's0', 5, '2026-01-01T00:00:00.000Z', 'limit', ?1, ?2, ?3)",
        params![body, prev, hash],
    )
    .unwrap();
    let r = check(&cfg);
    assert!(!r.ok());
    assert!(r.broken_at.unwrap() <= 6, "{r:?}");
}

#[test]
fn a_truncated_tail_is_caught_by_the_head() {
    let d = crate::private_tempdir();
    let cfg = filled(d.path(), 2);
    // Cut the last record and its checkpoint: the chain in the database is consistent.
    sql(
        &cfg,
        "DELETE FROM records WHERE seq = 10; DELETE FROM checkpoints WHERE seq = 10;",
    );
    let r = check(&cfg);
    assert_eq!(r.broken_at, Some(10), "{r:?}");
    assert!(r.problems[0].contains("cut off"), "{r:?}");
    // And a writer refuses to append to it.
    let e = Recorder::open(&cfg, "later")
        .unwrap()
        .record(start())
        .err()
        .unwrap();
    assert!(matches!(e, AuditError::Broken(_)), "{e}");
}

#[test]
fn an_older_copy_of_the_store_is_caught() {
    let d = crate::private_tempdir();
    let cfg = filled(d.path(), 1);
    let old = d.path().join("old.db");
    {
        let c = rusqlite::Connection::open(&cfg.store).unwrap();
        c.execute("VACUUM INTO ?1", params![old.to_str().unwrap()])
            .unwrap();
    }
    let mut r = Recorder::open(&cfg, "s9").unwrap();
    r.record(start()).unwrap();
    drop(r);
    for ext in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{ext}", cfg.store.display()));
    }
    std::fs::copy(&old, &cfg.store).unwrap();
    let rep = check(&cfg);
    assert_eq!(rep.broken_at, Some(6), "{rep:?}");
}

#[test]
fn a_rewritten_chain_is_caught_by_the_signatures() {
    let d = crate::private_tempdir();
    let cfg = filled(d.path(), 2);
    // Edit record 2 and recompute every hash after it: the chain links again, but the signed
    // checkpoints and head name the old hashes.
    let c = rusqlite::Connection::open(&cfg.store).unwrap();
    let id: String = c
        .query_row("SELECT value FROM meta WHERE key='store_id'", [], |r| {
            r.get(0)
        })
        .unwrap();
    c.execute_batch("UPDATE records SET body = replace(body, 'event 0', 'event X') WHERE seq = 2")
        .unwrap();
    let rows: Vec<(u64, String)> = c
        .prepare("SELECT seq, body FROM records ORDER BY seq")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .map(|r| r.unwrap())
        .collect();
    let mut prev = super::store::GENESIS.to_string();
    for (seq, body) in rows {
        let h = super::store::record_hash(&id, seq, &prev, &body);
        c.execute(
            "UPDATE records SET prev = ?1, hash = ?2 WHERE seq = ?3",
            params![prev, h, seq],
        )
        .unwrap();
        prev = h;
    }
    let r = check(&cfg);
    assert_eq!(
        r.broken_at,
        Some(5),
        "the first checkpoint after the edit: {r:?}"
    );
}

#[test]
fn a_forged_head_or_another_key_does_not_verify() {
    let d = crate::private_tempdir();
    let cfg = filled(d.path(), 1);
    let other = ed25519_dalek::SigningKey::from_bytes(&[9u8; 32]).verifying_key();
    let r = verify(&StorePaths::new(&cfg.store), &other).unwrap();
    assert!(!r.ok());
    std::fs::remove_file(StorePaths::new(&cfg.store).head).unwrap();
    let r = check(&cfg);
    assert!(
        r.problems
            .iter()
            .any(|p| p.contains("head") && p.contains("missing")),
        "{r:?}"
    );
}

/// A writer skips verifying a head identical (signature included) to one it signed itself or
/// verified already; anything else is verified: a head forged with another key fails whether
/// or not a good one is known.
#[test]
fn only_a_head_identical_to_a_known_good_one_skips_verification() {
    use super::key::Checkpoint;
    use super::store::check_heads;
    let k = ed25519_dalek::SigningKey::from_bytes(&[7u8; 32]);
    let vk = k.verifying_key();
    let other = ed25519_dalek::SigningKey::from_bytes(&[9u8; 32]);
    let good = Checkpoint::sign(&k, "s", 3, "h3", "t");
    let forged = Checkpoint::sign(&other, "s", 3, "h3", "t");
    let last = (3u64, "h3".to_string());
    let at = |_| Some("h3".to_string());
    for known in [None, Some(&good)] {
        assert!(check_heads(&vk, known, "s", Some(&last), Some(&good), Some(&good), at).is_ok());
        let r = check_heads(&vk, known, "s", Some(&last), Some(&forged), Some(&good), at);
        assert!(r.is_err_and(|e| e.contains("database's head is not signed")));
        let r = check_heads(&vk, known, "s", Some(&last), Some(&good), Some(&forged), at);
        assert!(r.is_err_and(|e| e.contains("head file is not signed")));
    }
    // Known for another store: not taken.
    let elsewhere = Checkpoint::sign(&k, "t", 3, "h3", "t");
    let r = check_heads(
        &vk,
        Some(&elsewhere),
        "s",
        Some(&last),
        Some(&elsewhere),
        None,
        at,
    );
    assert!(r.is_err());
}

#[test]
fn concurrent_writers_keep_one_chain() {
    let d = crate::private_tempdir();
    let cfg = AuditConfig::in_dir(d.path());
    Recorder::open(&cfg, "init")
        .unwrap()
        .record(start())
        .unwrap();
    let threads: Vec<_> = (0..8)
        .map(|t| {
            let cfg = cfg.clone();
            std::thread::spawn(move || {
                let mut r = Recorder::open(&cfg, &format!("t{t}")).unwrap();
                for i in 0..25 {
                    r.record(limit(i)).unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let r = check(&cfg);
    assert!(r.ok(), "{r:?}");
    assert_eq!(r.records, 201);
    let store = Store::open(&StorePaths::new(&cfg.store), false).unwrap();
    let t3 = store
        .query(&super::Filter {
            session: Some("t3".into()),
            ..Default::default()
        })
        .unwrap();
    let seqs: Vec<u64> = t3.iter().map(|s| s.event.session_seq).collect();
    assert_eq!(seqs, (1..=25).collect::<Vec<_>>());
}

#[test]
fn free_text_is_sanitized_before_it_is_stored() {
    let d = crate::private_tempdir();
    let cfg = AuditConfig::in_dir(d.path());
    let mut r = Recorder::open(&cfg, "s").unwrap();
    let mut ev = start();
    if let EventKind::SessionStart(s) = &mut ev {
        s.argv = vec![
            "curl".into(),
            "-H".into(),
            "Authorization: Bearer ghp_0123456789abcdefghijABCDEFGHIJ012345".into(),
        ];
    }
    let stored = r.record(ev).unwrap();
    assert!(!stored.body.contains("ghp_0123"), "{}", stored.body);
    assert!(stored.body.contains("REDACTED"), "{}", stored.body);
}

#[test]
fn a_store_reached_through_a_symlinked_directory_works_but_a_symlinked_file_is_refused() {
    let d = crate::private_tempdir();
    let real = d.path().join("real");
    std::fs::create_dir(&real).unwrap();
    let link = d.path().join("link");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    // A HOME reached through a symlink: the store lives in it normally.
    let cfg = AuditConfig::in_dir(&link.join("state"));
    Recorder::open(&cfg, "s").unwrap().record(start()).unwrap();
    assert!(check(&cfg).ok());
    // The database file itself a symlink: refused.
    let other = d.path().join("other");
    std::os::unix::fs::DirBuilderExt::mode(&mut std::fs::DirBuilder::new(), 0o700)
        .create(&other)
        .unwrap();
    std::os::unix::fs::symlink(real.join("state/audit.db"), other.join("audit.db")).unwrap();
    let e = Store::open(&StorePaths::new(&other.join("audit.db")), true)
        .err()
        .unwrap();
    assert!(matches!(e, AuditError::NotRegular(_)), "{e}");
}

#[test]
fn a_writer_refuses_a_head_it_did_not_sign_so_it_never_signs_over_a_rewrite() {
    let d = crate::private_tempdir();
    let cfg = filled(d.path(), 2);
    // Cut the last session and write a head that matches the new end, with a forged
    // signature: the chain in the database is consistent again.
    sql(
        &cfg,
        "DELETE FROM records WHERE seq > 5; DELETE FROM checkpoints WHERE seq > 5;",
    );
    let c = rusqlite::Connection::open(&cfg.store).unwrap();
    let (id, hash): (String, String) = c
        .query_row(
            "SELECT (SELECT value FROM meta WHERE key='store_id'), hash FROM records WHERE seq = 5",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    let forged = super::key::Checkpoint {
        store_id: id,
        seq: 5,
        hash,
        time: "2000-01-01T00:00:00.000Z".into(),
        signature: "00".into(),
    };
    std::fs::write(
        StorePaths::new(&cfg.store).head,
        serde_json::to_string(&forged).unwrap(),
    )
    .unwrap();
    let e = Recorder::open(&cfg, "later")
        .unwrap()
        .record(start())
        .err()
        .unwrap();
    assert!(matches!(e, AuditError::Broken(_)), "{e}");
    assert!(!check(&cfg).ok());
}

#[test]
fn removed_checkpoints_are_found() {
    let d = crate::private_tempdir();
    let cfg = filled(d.path(), 3);
    sql(&cfg, "DELETE FROM checkpoints WHERE seq = 10");
    let r = check(&cfg);
    assert_eq!(r.broken_at, Some(10), "{r:?}");
    assert!(r.problems[0].contains("checkpoint is missing"), "{r:?}");
}

#[test]
fn a_writer_killed_between_its_commit_and_the_head_file_leaves_a_usable_store() {
    let d = crate::private_tempdir();
    let cfg = filled(d.path(), 1);
    let head = StorePaths::new(&cfg.store).head;
    let before = std::fs::read(&head).unwrap();
    Recorder::open(&cfg, "next")
        .unwrap()
        .record(start())
        .unwrap();
    // As if killed after the commit: the file still holds the previous head.
    std::fs::write(&head, &before).unwrap();
    let r = check(&cfg);
    assert!(
        r.ok(),
        "the database's own signed head covers the tail: {r:?}"
    );
    Recorder::open(&cfg, "after")
        .unwrap()
        .record(start())
        .unwrap();
    let r = check(&cfg);
    assert!(r.ok(), "{r:?}");
    assert_eq!(r.head, Some(7));
    // But a head file from another store, or one ahead of the database, is not accepted.
    sql(&cfg, "DELETE FROM records WHERE seq = 7; UPDATE head SET seq = 6, hash = (SELECT hash FROM records WHERE seq = 6)");
    assert!(!check(&cfg).ok(), "an unsigned database head");
}

#[test]
fn state_directories_and_files_vetto_did_not_make_private_are_refused() {
    use super::store::{open_private, private_dir};
    use std::os::unix::fs::PermissionsExt;
    let d = crate::private_tempdir();
    // A directory vetto creates is 0700, and so is each parent it creates.
    let made = d.path().join("a/b");
    private_dir(&made).unwrap();
    for p in [d.path().join("a"), made.clone()] {
        let mode = std::fs::metadata(&p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700, "{}", p.display());
    }
    // An existing directory others may read or write: refused, and left as it was.
    let open = d.path().join("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o755)).unwrap();
    let e = private_dir(&open).unwrap_err().to_string();
    assert!(e.contains("mode 755"), "{e}");
    assert_eq!(
        std::fs::metadata(&open).unwrap().permissions().mode() & 0o777,
        0o755
    );
    // A symlink to a private directory: refused (the link could be swapped).
    let link = d.path().join("link");
    std::os::unix::fs::symlink(&made, &link).unwrap();
    let e = private_dir(&link).unwrap_err().to_string();
    assert!(e.contains("a symlink"), "{e}");
    // Files: a new one is 0600; an existing readable one or a symlink is refused.
    let f = made.join("store.db");
    drop(open_private(&f).unwrap());
    assert_eq!(
        std::fs::metadata(&f).unwrap().permissions().mode() & 0o777,
        0o600
    );
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).unwrap();
    assert!(open_private(&f).is_err());
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).unwrap();
    let fl = made.join("link.db");
    std::os::unix::fs::symlink(&f, &fl).unwrap();
    let e = open_private(&fl).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::ELOOP), "{e}");
    // Someone else's directory or file (only root can make one here).
    if nix::unistd::geteuid().is_root() {
        let other = nix::unistd::Uid::from_raw(65534);
        let theirs = d.path().join("theirs");
        private_dir(&theirs).unwrap();
        nix::unistd::chown(&theirs, Some(other), None).unwrap();
        let e = private_dir(&theirs).unwrap_err().to_string();
        assert!(e.contains("owned by uid 65534"), "{e}");
        nix::unistd::chown(&f, Some(other), None).unwrap();
        let e = open_private(&f).unwrap_err().to_string();
        assert!(e.contains("owner uid 65534"), "{e}");
    }
}

/// The head file is rewritten in place and cut only when the new head is shorter than what
/// the file holds: a longer head left there (here the same head, pretty-printed) is cut to the
/// new one, which parses and verifies; a head as long as the last is written without a cut.
#[test]
fn a_head_shorter_than_the_file_is_cut_to_its_length() {
    let d = crate::private_tempdir();
    let cfg = filled(d.path(), 1);
    let head = StorePaths::new(&cfg.store).head;
    let compact: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&head).unwrap()).unwrap();
    let long = serde_json::to_vec_pretty(&compact).unwrap();
    std::fs::write(&head, &long).unwrap();
    assert!(check(&cfg).ok(), "the pretty head says the same");
    let mut r = Recorder::open(&cfg, "next").unwrap();
    r.record_batch(vec![(super::event::now_ms(), end())], true)
        .unwrap();
    let now = std::fs::read(&head).unwrap();
    assert!(now.len() < long.len(), "written compact: {}", now.len());
    let v: serde_json::Value = serde_json::from_slice(&now).expect("nothing of the old head left");
    assert_ne!(v, compact, "a new head");
    assert!(check(&cfg).ok(), "{:?}", check(&cfg));
}

/// Commits of `r` (one record each) until well past the WAL's checkpoint size; the database
/// file's size before and after (in WAL mode only a checkpoint writes the database file).
fn commits_grow_the_database(r: &mut Recorder, db: &std::path::Path) -> (u64, u64) {
    let size = || std::fs::metadata(db).unwrap().len();
    let before = size();
    for i in 0..300 {
        r.record(limit(i)).unwrap();
    }
    (before, size())
}

#[test]
fn a_connection_that_defers_checkpoints_folds_the_wal_only_when_asked() {
    let d = crate::private_tempdir();
    let cfg = AuditConfig::in_dir(d.path());
    let mut r = Recorder::open(&cfg, "s").unwrap();
    r.store().defer_checkpoints();
    assert!(
        !r.store().checkpoint_if_due().unwrap(),
        "nothing is due yet"
    );
    let (before, after) = commits_grow_the_database(&mut r, &cfg.store);
    assert_eq!(before, after, "a commit checkpointed the WAL");
    assert!(
        r.store().checkpoint_if_due().unwrap(),
        "300 commits are due"
    );
    let folded = std::fs::metadata(&cfg.store).unwrap().len();
    assert!(
        folded > after,
        "the checkpoint wrote nothing: {after} -> {folded}"
    );
    assert!(
        !r.store().checkpoint_if_due().unwrap(),
        "nothing new is due"
    );
    // Everything is there, in one chain.
    drop(r);
    let rep = check(&cfg);
    assert!(
        rep.problems.is_empty() && rep.broken_at.is_none(),
        "{rep:?}"
    );
}

#[test]
fn a_connection_that_does_not_defer_checkpoints_as_it_commits() {
    // The control for the test above: the same commits, and the WAL is folded by them.
    let d = crate::private_tempdir();
    let cfg = AuditConfig::in_dir(d.path());
    let mut r = Recorder::open(&cfg, "s").unwrap();
    let (before, after) = commits_grow_the_database(&mut r, &cfg.store);
    assert!(
        after > before,
        "no commit checkpointed: {before} -> {after}"
    );
}

/// The WAL's length in frames, from its file (a 32-byte header, then frames of a 24-byte
/// header and a page each). Worked out here on its own, not with the store's `wal_frames`: a
/// mistake there would otherwise hide from the test that bounds it.
fn wal_frames(db: &std::path::Path) -> u64 {
    let mut wal = db.as_os_str().to_owned();
    wal.push("-wal");
    let len = std::fs::metadata(&wal).map(|m| m.len()).unwrap_or(0);
    len.saturating_sub(32) / (4096 + 24)
}

/// How a connection writes in [`sessions_one_after_another`].
#[derive(Clone, Copy, Debug)]
enum Writes {
    /// As the session writer: checkpoints deferred until after the last commit.
    Deferred,
    /// Two commits, SQLite's autocheckpoint on (the broker, vetto-shim).
    Two,
    /// One commit, autocheckpoint on (the CLI's one-record writers).
    One,
}

/// `sessions` sessions one after another, each a connection of its own opened when no other
/// is (as each session's writer is, a process of its own), writing as `how` says.
fn sessions_one_after_another(cfg: &AuditConfig, sessions: usize, how: Writes) {
    for i in 0..sessions {
        let mut r = Recorder::open(cfg, &format!("s{i}")).unwrap();
        if let Writes::Deferred = how {
            r.store().defer_checkpoints();
        }
        if !matches!(how, Writes::One) {
            r.record(limit(1)).unwrap();
        }
        r.record_batch(vec![(super::event::now_ms(), end())], true)
            .unwrap();
        if let Writes::Deferred = how {
            r.store().checkpoint_if_due().unwrap();
        }
    }
}

#[test]
fn the_wal_stays_short_however_many_sessions_the_store_has_seen() {
    // Each opener that finds no other connection replays the whole WAL (a read per frame), and
    // a WAL is only ever started again by a later write of the connection that folded it,
    // which the last writer of a session need not make: unless the WAL is cut back as a store
    // is closed, it grows with every session, and so does every session's start-up.
    for how in [Writes::Deferred, Writes::Two, Writes::One] {
        let d = crate::private_tempdir();
        let cfg = AuditConfig::in_dir(d.path());
        sessions_one_after_another(&cfg, 10, how);
        let after_10 = wal_frames(&cfg.store);
        sessions_one_after_another(&cfg, 150, how);
        let after_160 = wal_frames(&cfg.store);
        // The bound: what commits may add on top of the fold's trigger before the next close.
        let bound = 2 * super::store::WAL_PAGES as u64;
        assert!(
            after_160 <= bound,
            "{how:?}: after 160 sessions the WAL holds {after_160} frames (after 10: {after_10}; bound {bound})"
        );
        let rep = check(&cfg);
        assert!(
            rep.problems.is_empty() && rep.broken_at.is_none(),
            "{rep:?}"
        );
    }
}
