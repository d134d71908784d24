//! `make bench`: events per second sustained into the audit store (SQLite, WAL) and a JSONL
//! file, with the hash chain, a signed head per append and a signed checkpoint every
//! `CHECKPOINT_EVERY` records; then how long `verify` takes over them. The same library code
//! the supervisor, the broker and vetto-shim write with.
//!
//! Usage: audit_bench DIR [EVENTS]

use std::time::Instant;

use vetto_broker::audit::event::{now_ms, Connection, EventKind};
use vetto_broker::audit::{key, verify, AuditConfig, JsonlTarget, Recorder, StorePaths};

fn event(i: u64) -> EventKind {
    EventKind::Connection(Connection {
        decision: if i.is_multiple_of(7) { "deny" } else { "allow" }.into(),
        reason: if i.is_multiple_of(7) {
            "not-allowlisted"
        } else {
            "closed"
        }
        .into(),
        detail: None,
        listener: "http".into(),
        destination: Some(format!("host{}.example.com:443", i % 50)),
        dialled: Some("203.0.113.7:443".into()),
        bytes_up: 1000 + i,
        bytes_down: 20_000 + i,
        duration_ms: 12,
        basis: None,
    })
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let dir = std::path::PathBuf::from(args.next().ok_or("usage: audit_bench DIR [EVENTS]")?);
    let n: u64 = args
        .next()
        .map(|s| s.parse())
        .transpose()?
        .unwrap_or(100_000);
    let mut cfg = AuditConfig::in_dir(&dir);
    cfg.jsonl = Some(JsonlTarget::File(dir.join("audit.jsonl")));

    // As the broker writes: events batched as they queue up (up to 256 per transaction).
    let mut rec = Recorder::open(&cfg, "bench-batched")?;
    let t = Instant::now();
    let mut i = 0;
    while i < n {
        let batch: Vec<_> = (i..(i + 256).min(n))
            .map(|j| (now_ms(), event(j)))
            .collect();
        i += batch.len() as u64;
        rec.record_batch(batch, false)?;
    }
    rec.checkpoint()?;
    let batched = n as f64 / t.elapsed().as_secs_f64();

    // As the supervisor writes: one event per transaction (each with its signed head).
    let single_n = (n / 10).max(1);
    let t = Instant::now();
    for j in 0..single_n {
        rec.record_batch(vec![(now_ms(), event(j))], false)?;
    }
    let single = single_n as f64 / t.elapsed().as_secs_f64();

    // Several writers at once, one event per transaction each (concurrent sessions).
    let writers = 4u64;
    let per = single_n / writers;
    let t = Instant::now();
    let handles: Vec<_> = (0..writers)
        .map(|w| {
            let cfg = cfg.clone();
            std::thread::spawn(move || -> Result<(), String> {
                let mut r =
                    Recorder::open(&cfg, &format!("bench-w{w}")).map_err(|e| e.to_string())?;
                for j in 0..per {
                    r.record_batch(vec![(now_ms(), event(j))], false)
                        .map_err(|e| e.to_string())?;
                }
                Ok(())
            })
        })
        .collect();
    for h in handles {
        h.join().map_err(|_| "a writer panicked")??;
    }
    let concurrent = (per * writers) as f64 / t.elapsed().as_secs_f64();

    // What a `vetto run` adds: open the store, record the start, record the end with a
    // signed checkpoint, close; with no other connection open, as a lone session finds it.
    drop(rec);
    let sessions = 200u32;
    let (mut open, mut first, mut last, mut close) = (0.0, 0.0, 0.0, 0.0);
    let t = Instant::now();
    for i in 0..sessions {
        let t0 = Instant::now();
        let mut r = Recorder::open(&cfg, &format!("bench-session-{i}"))?;
        let t1 = Instant::now();
        r.record(EventKind::Limit(vetto_broker::audit::event::Limit {
            limit: "bench".into(),
            value: 0,
            detail: "a stand-in for session_start".into(),
        }))?;
        let t2 = Instant::now();
        r.record_batch(vec![(now_ms(), event(u64::from(i)))], true)?;
        let t3 = Instant::now();
        drop(r);
        let t4 = Instant::now();
        open += (t1 - t0).as_secs_f64();
        first += (t2 - t1).as_secs_f64();
        last += (t3 - t2).as_secs_f64();
        close += (t4 - t3).as_secs_f64();
    }
    let per_session = t.elapsed().as_secs_f64() * 1e3 / f64::from(sessions);
    let ms = |x: f64| x * 1e3 / f64::from(sessions);
    println!(
        "audit: per session: open {:.3} ms, start {:.3} ms, end+checkpoint {:.3} ms, close {:.3} ms",
        ms(open),
        ms(first),
        ms(last),
        ms(close)
    );

    let k = key::load(&cfg.key)?.verifying_key();
    let t = Instant::now();
    let report = verify::verify(&StorePaths::new(&cfg.store), &k)?;
    let vt = t.elapsed().as_secs_f64();
    if !report.ok() {
        return Err(format!(
            "the bench's own store does not verify: {:?}",
            report.problems
        )
        .into());
    }
    println!(
        "audit: {batched:.0} events/s batched (256/transaction, as the broker writes; goal >= 10000), \
         {single:.0} events/s one per transaction (as the supervisor writes), \
         {concurrent:.0} events/s from {writers} concurrent writers one per transaction; \
         SQLite + JSONL, chain, signed head per transaction, checkpoint every 1000"
    );
    println!(
        "audit: a session's own cost (open the store, record its start, record its end with a signed checkpoint, close): {per_session:.3} ms"
    );
    println!(
        "audit: verify of {} records and {} checkpoints: {:.0} ms ({:.0} records/s)",
        report.records,
        report.checkpoints,
        vt * 1e3,
        report.records as f64 / vt
    );
    Ok(())
}
