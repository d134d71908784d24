//! The precedence and the ask / answer / timeout / park cycle, through [`plan_connection`]
//! (the path the server takes) with a fake resolver: nothing here touches the network.

use std::io;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};

use super::*;
use crate::plan::{plan_connection, PlanError, Resolver};
use crate::ratelimit::RateLimiter;
use crate::server::BrokerEvent;
use crate::target::{DnsName, Target};
use crate::Policy;

/// Answers every name with one documentation-range address (only classified, never dialled).
struct Fake(Vec<IpAddr>);

impl Resolver for Fake {
    async fn resolve(&self, _name: &DnsName, _port: u16) -> io::Result<Vec<IpAddr>> {
        Ok(self.0.clone())
    }
}

fn public() -> Fake {
    // 192.0.2.0/24 is documentation; admitted by the policies below through allow_cidrs.
    Fake(vec!["192.0.2.10".parse().unwrap()])
}

fn t(s: &str) -> Target {
    Target::parse_connect_authority(s).unwrap()
}

struct World {
    _dir: tempfile::TempDir,
    db: std::path::PathBuf,
    gate: Arc<Gate>,
    events: UnboundedReceiver<BrokerEvent>,
}

fn world(mode: GateMode, terminal: bool, timeout_secs: u64) -> World {
    let dir = crate::private_tempdir();
    let db = dir.path().join("approvals.db");
    let (tx, events) = unbounded_channel();
    let gate = Gate::new(
        ApprovalSpec {
            mode,
            terminal,
            timeout_secs,
            scope: "project /p".into(),
            rules: Some(db.clone()),
            session: "s1".into(),
            owner_uid: 0,
            control_fd: None,
        },
        tx,
    )
    .unwrap();
    World {
        _dir: dir,
        db,
        gate,
        events,
    }
}

fn policy(allow: &[&str], deny: &[&str], strict: bool) -> Policy {
    Policy::parse(allow, &["192.0.2.0/24"], strict)
        .unwrap()
        .with_deny(deny)
        .unwrap()
}

async fn plan(p: &Policy, g: &Gate, target: &str) -> Result<Option<String>, PlanError> {
    plan_connection(p, Some(g), &RateLimiter::new(1000), &t(target), &public())
        .await
        .map(|planned| planned.basis)
}

fn kinds(rx: &mut UnboundedReceiver<BrokerEvent>) -> Vec<String> {
    let mut out = vec![];
    while let Ok(e) = rx.try_recv() {
        if let BrokerEvent::Approval(k) = e {
            out.push(k.name().to_string());
        }
    }
    out
}

fn gate_code(r: Result<Option<String>, PlanError>) -> String {
    match r {
        Err(PlanError::Gate(g)) => g.code().to_string(),
        Err(PlanError::Denied(d)) => format!("denied: {d}"),
        Err(e) => format!("other: {e}"),
        Ok(b) => format!("ok {b:?}"),
    }
}

#[tokio::test]
async fn precedence_policy_deny_then_denial_then_allow_then_grant() {
    let w = world(GateMode::Park, false, 5);
    let store = RuleStore::open(&w.db).unwrap();
    let p = policy(&["listed.test", "both.test"], &["*.blocked.test"], false);
    // A persistent grant cannot reopen a policy deny.
    store
        .add(
            "project /p",
            "x.blocked.test:443",
            Verdict::Grant,
            "uid 0",
            "t",
        )
        .unwrap();
    assert!(gate_code(plan(&p, &w.gate, "x.blocked.test:443").await).contains("network.deny"));
    // A persistent denial beats the allowlist.
    store
        .add("project /p", "both.test:443", Verdict::Deny, "uid 0", "t")
        .unwrap();
    assert_eq!(
        gate_code(plan(&p, &w.gate, "both.test:443").await),
        "persistent-denial"
    );
    // The allowlist: no basis.
    assert_eq!(plan(&p, &w.gate, "listed.test:443").await.unwrap(), None);
    // A persistent grant lets an unlisted name through, and says so.
    store
        .add(
            "project /p",
            "granted.test:443",
            Verdict::Grant,
            "uid 0",
            "t",
        )
        .unwrap();
    let basis = plan(&p, &w.gate, "granted.test:443")
        .await
        .unwrap()
        .unwrap();
    assert!(basis.starts_with("persistent grant"), "{basis}");
    // Other scopes' rules do not apply.
    store
        .add("project /q", "other.test:443", Verdict::Grant, "uid 0", "t")
        .unwrap();
    assert_eq!(
        gate_code(plan(&p, &w.gate, "other.test:443").await),
        "approval-parked"
    );
}

#[tokio::test]
async fn a_grant_never_widens_past_the_mode() {
    let w = world(GateMode::Ask, true, 5);
    let store = RuleStore::open(&w.db).unwrap();
    store
        .add(
            "project /p",
            "granted.test:443",
            Verdict::Grant,
            "uid 0",
            "t",
        )
        .unwrap();
    store
        .add(
            "project /p",
            "granted.test:80",
            Verdict::Grant,
            "uid 0",
            "t",
        )
        .unwrap();
    // Strict: no grant applies, nothing asks.
    let strict = policy(&[], &[], true);
    assert!(gate_code(plan(&strict, &w.gate, "granted.test:443").await).starts_with("denied"));
    assert!(gate_code(plan(&strict, &w.gate, "granted.test:80").await).starts_with("denied"));
    // An IP literal outside allow_cidrs is never asked about or granted.
    let p = policy(&[], &[], false);
    assert!(gate_code(plan(&p, &w.gate, "198.51.100.7:443").await).starts_with("denied"));
    // A granted name whose answer set is private is still refused.
    let private = Fake(vec!["10.0.0.5".parse().unwrap()]);
    let r = plan_connection(
        &p,
        Some(&w.gate),
        &RateLimiter::new(10),
        &t("granted.test:443"),
        &private,
    )
    .await;
    assert!(matches!(r, Err(PlanError::Answer { .. })), "{r:?}");
    // Off mode (strict) in an allowlist policy: no grant either.
    let off = world(GateMode::Off, true, 5);
    RuleStore::open(&off.db)
        .unwrap()
        .add(
            "project /p",
            "granted.test:443",
            Verdict::Grant,
            "uid 0",
            "t",
        )
        .unwrap();
    assert!(gate_code(plan(&p, &off.gate, "granted.test:443").await).starts_with("denied"));
}

#[tokio::test(start_paused = true)]
async fn many_connections_wait_on_one_approval_and_a_grant_once_lets_them_through() {
    let mut w = world(GateMode::Ask, true, 60);
    let p = Arc::new(policy(&[], &[], false));
    let mut waiters = vec![];
    for _ in 0..3 {
        let (p, g) = (Arc::clone(&p), Arc::clone(&w.gate));
        waiters.push(tokio::spawn(
            async move { plan(&p, &g, "new.test:443").await },
        ));
    }
    tokio::time::sleep(Duration::from_millis(10)).await;
    let st = w.gate.status();
    assert_eq!(st.pending.len(), 1, "{st:?}");
    assert_eq!(st.pending[0].waiting, 3);
    let id = st.pending[0].id.clone();
    w.gate
        .answer(&id, Verdict::Grant, Scope::Once, None, "uid 7 (test)")
        .unwrap();
    for h in waiters {
        let basis = h.await.unwrap().unwrap().unwrap();
        assert_eq!(
            basis,
            format!("grant --once by uid 7 (test) (approval {id})")
        );
    }
    assert_eq!(
        kinds(&mut w.events),
        ["approval_requested", "approval_granted"]
    );
    // Once means once: the next connection asks again.
    let g = Arc::clone(&w.gate);
    let next =
        tokio::spawn(async move { plan(&policy(&[], &[], false), &g, "new.test:443").await });
    tokio::time::sleep(Duration::from_millis(10)).await;
    let id2 = w.gate.status().pending[0].id.clone();
    assert_ne!(id, id2);
    w.gate
        .answer(&id2, Verdict::Deny, Scope::Once, None, "uid 7 (test)")
        .unwrap();
    assert_eq!(gate_code(next.await.unwrap()), "approval-denied");
    // A plain deny holds for the session: no new prompt.
    assert_eq!(
        gate_code(plan(&p, &w.gate, "new.test:443").await),
        "approval-denied"
    );
    assert!(w.gate.status().pending.is_empty());
    // Revoking it lets the next connection ask again.
    w.gate.revoke(&id2, "uid 7").unwrap();
    assert!(w.gate.revoke(&id2, "uid 7").is_err());
}

#[tokio::test(start_paused = true)]
async fn session_and_always_answers_hold_and_always_persists() {
    let w = world(GateMode::Ask, true, 60);
    let p = Arc::new(policy(&[], &[], false));
    for (dest, scope) in [
        ("s.test:443", Scope::Session),
        ("a.test:443", Scope::Always),
    ] {
        let (pp, g) = (Arc::clone(&p), Arc::clone(&w.gate));
        let h = tokio::spawn(async move { plan(&pp, &g, dest).await });
        tokio::time::sleep(Duration::from_millis(10)).await;
        let id = w.gate.status().pending[0].id.clone();
        w.gate
            .answer(&id, Verdict::Grant, scope, None, "uid 7")
            .unwrap();
        assert!(h.await.unwrap().is_ok());
        // No prompt the second time.
        assert!(plan(&p, &w.gate, dest).await.unwrap().is_some());
    }
    let rules = RuleStore::open(&w.db).unwrap().rules(None).unwrap();
    assert_eq!(rules.len(), 1);
    assert_eq!(rules[0].destination, "a.test:443");
    // A typed wildcard must cover the request, and needs --session or --always.
    let (pp, g) = (Arc::clone(&p), Arc::clone(&w.gate));
    let h = tokio::spawn(async move { plan(&pp, &g, "x.wild.test:443").await });
    tokio::time::sleep(Duration::from_millis(10)).await;
    let id = w.gate.status().pending[0].id.clone();
    assert!(w
        .gate
        .answer(
            &id,
            Verdict::Grant,
            Scope::Always,
            Some("*.other.test"),
            "u"
        )
        .is_err());
    assert!(w
        .gate
        .answer(&id, Verdict::Grant, Scope::Once, Some("*.wild.test"), "u")
        .is_err());
    w.gate
        .answer(&id, Verdict::Grant, Scope::Always, Some("*.wild.test"), "u")
        .unwrap();
    assert!(h.await.unwrap().is_ok());
    assert!(plan(&p, &w.gate, "y.wild.test:443")
        .await
        .unwrap()
        .is_some());
}

#[tokio::test(start_paused = true)]
async fn timeout_refuses_records_and_parks() {
    let mut w = world(GateMode::Ask, true, 3);
    let p = policy(&[], &[], false);
    let r = plan(&p, &w.gate, "slow.test:443").await;
    let Err(PlanError::Gate(GateRefusal::Timeout { id, .. })) = r else {
        panic!("{r:?}");
    };
    assert_eq!(
        kinds(&mut w.events),
        ["approval_requested", "approval_timeout"]
    );
    let parked = RuleStore::open(&w.db).unwrap().parked().unwrap();
    assert_eq!(
        (parked[0].id.as_str(), parked[0].destination.as_str()),
        (id.as_str(), "slow.test:443")
    );
}

#[tokio::test]
async fn nobody_to_answer_parks_at_once_and_a_later_always_grant_lets_the_next_run_through() {
    // Ask mode, but no terminal and nobody attached.
    let mut w = world(GateMode::Ask, false, 60);
    let p = policy(&[], &[], false);
    let r = plan(&p, &w.gate, "later.test:443").await;
    let Err(PlanError::Gate(GateRefusal::Parked { id, .. })) = r else {
        panic!("{r:?}");
    };
    assert_eq!(kinds(&mut w.events), ["approval_parked"]);
    // Again: the same parked request, counted twice.
    let _ = plan(&p, &w.gate, "later.test:443").await;
    let store = RuleStore::open(&w.db).unwrap();
    let parked = store.parked_by_id(&id).unwrap().unwrap();
    assert_eq!(parked.count, 2);
    // The operator grants it for good (as `vetto approvals grant ID --always` does).
    store
        .add(
            &parked.scope,
            &parked.destination,
            Verdict::Grant,
            "uid 0",
            "t",
        )
        .unwrap();
    assert!(plan(&p, &w.gate, "later.test:443").await.unwrap().is_some());
    // Attached operator: asks instead of parking.
    let _a = w.gate.attach();
    assert!(w.gate.operator_present());
}
