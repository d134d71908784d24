//! `vetto audit verify`: check a store's whole chain, every checkpoint and the signed head, and
//! say where it breaks.
//!
//! What a clean result proves: nobody without the checkpoint key changed, inserted, reordered
//! or removed a record up to the signed head, cut records off its end, or put an older copy of
//! the database in its place. What it cannot prove: that the host's root (who can read the key)
//! did none of that, or that the store *and* its head were not both replaced by an older pair
//! (only a copy kept elsewhere, such as an OTLP collector's, shows that).

use std::collections::HashMap;

use ed25519_dalek::VerifyingKey;
use serde::Serialize;

use super::event::Event;
use super::store::{check_heads, record_hash, Store, StorePaths, CHECKPOINT_EVERY, GENESIS};
use super::AuditError;

/// What `verify` found.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Report {
    /// Records in the database.
    pub records: u64,
    /// Checkpoints in the database.
    pub checkpoints: u64,
    /// The signed head's position, if any.
    pub head: Option<u64>,
    /// Distinct sessions.
    pub sessions: u64,
    /// The first record (chain position) where the chain breaks, if it does.
    pub broken_at: Option<u64>,
    /// Every problem, in chain order (the first one is where it breaks).
    pub problems: Vec<String>,
}

impl Report {
    /// True when nothing is wrong.
    pub fn ok(&self) -> bool {
        self.problems.is_empty()
    }
}

/// At most this many problems are listed (the first is what matters).
const MAX_PROBLEMS: usize = 20;

/// Verify the store at `paths` against the public key `key`.
pub fn verify(paths: &StorePaths, key: &VerifyingKey) -> Result<Report, AuditError> {
    let mut store = Store::open(paths, false)?;
    store.snapshot(|s| check(s, key))
}

fn check(store: &Store, key: &VerifyingKey) -> Result<Report, AuditError> {
    let records = store.raw_records()?;
    let checkpoints = store.checkpoints()?;
    let head = store.read_head()?;
    let id = store.id().to_string();
    let mut problems: Vec<(u64, String)> = vec![];
    let mut push = |seq: u64, p: String| {
        if problems.len() < MAX_PROBLEMS {
            problems.push((seq, p));
        }
    };

    // The chain: positions 1, 2, … with no gap, each linked to the one before, each hash the
    // hash of its content, each indexed column equal to the body.
    let mut prev = GENESIS.to_string();
    let mut expected = 1u64;
    let mut hashes: HashMap<u64, String> = HashMap::new();
    let mut session_seq: HashMap<String, u64> = HashMap::new();
    for r in &records {
        if r.seq != expected {
            push(
                expected,
                format!(
                    "record {expected} is missing (the next stored record is {}): records were removed",
                    r.seq
                ),
            );
        }
        if r.prev != prev {
            push(
                r.seq,
                format!(
                    "record {} does not follow the record before it (its link is {}…, the previous hash is {}…): a record was inserted, removed or moved here",
                    r.seq,
                    short(&r.prev),
                    short(&prev)
                ),
            );
        }
        let h = record_hash(&id, r.seq, &r.prev, &r.body);
        if h != r.hash {
            push(
                r.seq,
                format!(
                    "record {}: its content does not match its hash (edited)",
                    r.seq
                ),
            );
        }
        match serde_json::from_str::<Event>(&r.body) {
            Ok(ev) => {
                if ev.seq != r.seq
                    || ev.session != r.session
                    || ev.session_seq != r.session_seq
                    || ev.time != r.time
                    || ev.kind.name() != r.kind
                {
                    push(
                        r.seq,
                        format!(
                            "record {}: its indexed columns differ from its content (edited)",
                            r.seq
                        ),
                    );
                }
                let last = session_seq.entry(ev.session.clone()).or_insert(0);
                if ev.session_seq != *last + 1 {
                    push(
                        r.seq,
                        format!(
                            "record {}: session {} jumps from event {} to {}",
                            r.seq, ev.session, last, ev.session_seq
                        ),
                    );
                }
                *last = ev.session_seq;
            }
            Err(e) => push(r.seq, format!("record {}: not a valid event: {e}", r.seq)),
        }
        hashes.insert(r.seq, r.hash.clone());
        prev = r.hash.clone();
        expected = r.seq + 1;
    }
    let last = records.last().map_or(0, |r| r.seq);

    // Writers sign a checkpoint at every session end and at least every CHECKPOINT_EVERY
    // records: a missing one was removed (it would otherwise let a rewritten chain pass).
    let signed: std::collections::HashSet<u64> = checkpoints.iter().map(|c| c.seq).collect();
    for r in &records {
        if r.kind == "session_end" && !signed.contains(&r.seq) {
            push(
                r.seq,
                format!(
                    "record {} ends a session but its signed checkpoint is missing (removed)",
                    r.seq
                ),
            );
        }
    }
    let mut marks: Vec<u64> = signed.iter().copied().filter(|s| *s <= last).collect();
    marks.sort_unstable();
    let mut from = 0u64;
    for m in marks.into_iter().chain(std::iter::once(last)) {
        if m.saturating_sub(from) > 2 * CHECKPOINT_EVERY {
            push(
                from + 1,
                format!(
                    "records {}..{m} have no signed checkpoint (writers sign one at least every {CHECKPOINT_EVERY}): checkpoints were removed",
                    from + 1
                ),
            );
        }
        from = m;
    }

    // Checkpoints: each signed by the key, each naming a record that is there with that hash.
    for c in &checkpoints {
        if !c.verifies(key) {
            push(
                c.seq,
                format!("checkpoint at record {}: the signature does not verify with this key (forged or edited)", c.seq),
            );
        } else {
            match hashes.get(&c.seq) {
                Some(h) if *h == c.hash => {}
                Some(_) => push(
                    c.seq,
                    format!("record {}: its hash differs from the one signed in the checkpoint (the chain was rewritten up to here)", c.seq),
                ),
                None => push(
                    c.seq,
                    format!("the signed checkpoint at record {} names a record the store no longer has (removed)", c.seq),
                ),
            }
        }
    }

    // The two signed heads: the database's own (written in each append's transaction) and the
    // head file outside it.
    let db_head = store.db_head()?;
    let last_rec = records.last().map(|r| (r.seq, r.hash.clone()));
    if let Err(why) = check_heads(
        key,
        None,
        &id,
        last_rec.as_ref(),
        db_head.as_ref(),
        head.as_ref(),
        |seq| hashes.get(&seq).cloned(),
    ) {
        // Where it breaks: past the end for a cut, else at the end.
        let at = match (&head, &db_head) {
            (_, Some(d)) if d.seq > last => last + 1,
            (Some(f), Some(d)) if f.seq > d.seq => d.seq + 1,
            (Some(f), Some(d)) if f.seq < d.seq || why.starts_with("record") => f.seq.max(1),
            _ => last.max(1),
        };
        push(at, why);
    }
    problems.sort_by_key(|(s, _)| *s);
    Ok(Report {
        records: records.len() as u64,
        checkpoints: checkpoints.len() as u64,
        head: head.map(|h| h.seq),
        sessions: session_seq.len() as u64,
        broken_at: problems.first().map(|(s, _)| *s),
        problems: problems.into_iter().map(|(_, p)| p).collect(),
    })
}

fn short(h: &str) -> &str {
    h.get(..12).unwrap_or(h)
}
