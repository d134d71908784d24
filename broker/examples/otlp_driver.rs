//! A stand-in for the `vetto` commands tests/otlp/run.sh drives, with the real store and the
//! real exporter, so tests/otlp/driver.sh runs the same scenario against the Python receiver
//! before (and besides) the CLI:
//!
//! ```text
//! otlp_driver session DIR NAME URL   like `vetto run --audit-otlp URL -- /bin/true`: record a
//!                                    session (start, connections, a limit, end) in DIR's
//!                                    store, start URL's cursor at it, export with the defaults
//! otlp_driver export DIR URL         like `vetto audit export --otlp URL` (30 s budget)
//! otlp_driver query DIR              like `vetto audit query --json`: one record per line
//! ```

use std::error::Error;
use std::io::Write;
use std::path::Path;
use std::time::Duration;

use vetto_broker::audit::event::{
    Connection, EndReason, Engine, EventKind, Limit, SessionEnd, SessionStart,
};
use vetto_broker::audit::otlp::{export_pending, start_cursor, Exported, Options};
use vetto_broker::audit::{AuditConfig, Filter, Recorder, Store, StorePaths};

fn events(name: &str) -> Vec<EventKind> {
    let conn = |decision: &str| {
        EventKind::Connection(Connection {
            decision: decision.into(),
            reason: "closed".into(),
            detail: None,
            listener: "http".into(),
            destination: Some("example.com:443".into()),
            dialled: None,
            bytes_up: 1,
            bytes_down: 2,
            duration_ms: 3,
            basis: None,
        })
    };
    vec![
        EventKind::SessionStart(SessionStart {
            policy_digest: "00".repeat(32),
            profile: "default".into(),
            layers: vec![],
            tier: "FULL".into(),
            landlock_abi: None,
            argv: vec!["/bin/true".into(), name.into()],
            project: "/p".into(),
            uid: 0,
            engine: Engine::Run,
            change_set: None,
        }),
        conn("allow"),
        conn("deny"),
        EventKind::Limit(Limit {
            limit: "processes".into(),
            value: 1,
            detail: "fork refused".into(),
        }),
        EventKind::SessionEnd(SessionEnd {
            status: Some(0),
            signal: None,
            duration_ms: 1,
            reason: EndReason::Exit,
            control: None,
        }),
    ]
}

fn print(e: &Exported) {
    println!(
        "{{\"sent\":{},\"pending\":{},\"rejected\":{},\"stopped\":{}}}",
        e.sent,
        e.pending,
        e.rejected,
        serde_json::to_string(&e.stopped).unwrap_or_default()
    );
}

fn main() -> Result<(), Box<dyn Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    match args.as_slice() {
        ["session", dir, name, url] => {
            let cfg = AuditConfig::in_dir(Path::new(dir));
            let mut r = Recorder::open(&cfg, name)?;
            let mut first = None;
            for k in events(name) {
                let s = r.record(k)?;
                first.get_or_insert(s.event.seq);
            }
            r.checkpoint()?;
            start_cursor(r.store(), url, first.unwrap_or(1))?;
            // A collector that is down must not fail the session: only a bad URL or a store
            // error is an error here.
            print(&export_pending(r.store(), url, &Options::default())?);
        }
        ["export", dir, url] => {
            let store = Store::open(&StorePaths::new(&Path::new(dir).join("audit.db")), false)?;
            let opts = Options {
                deadline: Duration::from_secs(30),
                retries: 10,
                ..Options::default()
            };
            print(&export_pending(&store, url, &opts)?);
        }
        ["query", dir] => {
            let store = Store::open(&StorePaths::new(&Path::new(dir).join("audit.db")), false)?;
            let mut out = std::io::stdout().lock();
            for r in store.query(&Filter::default())? {
                writeln!(out, "{}", r.to_json())?;
            }
        }
        _ => {
            eprintln!("usage: otlp_driver session DIR NAME URL | export DIR URL | query DIR");
            std::process::exit(2);
        }
    }
    Ok(())
}
