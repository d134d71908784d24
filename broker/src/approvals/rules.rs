//! Persistent grants and denials, and parked requests: one SQLite database per user (beside
//! the audit store, masked and sealed the same way), written only outside the sandbox.
//!
//! A rule is (scope, destination, verdict): the scope is where it applies (`project PATH` for
//! `vetto run`, `container POLICY` for `vetto-shim`), the destination is `host:port`, or
//! `*.suffix:port` when a person typed the wildcard. A parked request is an ask that nobody
//! could answer (unattended); granting it with `--always` turns it into a rule for the next
//! run. Rules are removed when revoked: their history is the audit trail's.

use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::{params, Connection, OpenFlags, OptionalExtension};
use serde::{Deserialize, Serialize};

use super::{new_id, ApprovalsError, Verdict};
use crate::allow::AllowEntry;
use crate::target::DnsName;

/// A persistent grant or denial.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    /// Its id (for `vetto approvals revoke`).
    pub id: String,
    /// Where it applies.
    pub scope: String,
    /// `host:port` or `*.suffix:port`.
    pub destination: String,
    /// Grant or deny.
    pub verdict: Verdict,
    /// When it was made (ms since the epoch).
    pub created_ms: u64,
    /// Who made it (`uid N`).
    pub created_by: String,
    /// How (`grant --always of approval ID in session S`).
    pub origin: String,
}

/// A request that nobody could answer when it was made.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct Parked {
    /// Its id (for `vetto approvals grant ID --always`).
    pub id: String,
    /// Where it was asked.
    pub scope: String,
    /// `host:port`.
    pub destination: String,
    /// The last session that asked.
    pub session: String,
    /// First asked (ms since the epoch).
    pub first_ms: u64,
    /// Last asked.
    pub last_ms: u64,
    /// How many connections asked.
    pub count: u64,
}

/// The rules database.
pub struct RuleStore {
    conn: Connection,
    path: PathBuf,
}

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS rules(
  id TEXT PRIMARY KEY,
  scope TEXT NOT NULL,
  destination TEXT NOT NULL,
  verdict TEXT NOT NULL CHECK (verdict IN ('grant', 'deny')),
  created_ms INTEGER NOT NULL,
  created_by TEXT NOT NULL,
  origin TEXT NOT NULL,
  UNIQUE(scope, destination)
);
CREATE TABLE IF NOT EXISTS parked(
  id TEXT PRIMARY KEY,
  scope TEXT NOT NULL,
  destination TEXT NOT NULL,
  session TEXT NOT NULL,
  first_ms INTEGER NOT NULL,
  last_ms INTEGER NOT NULL,
  count INTEGER NOT NULL,
  UNIQUE(scope, destination)
);
";

fn verdict_of(s: &str) -> Verdict {
    if s == "grant" {
        Verdict::Grant
    } else {
        // Anything but an exact "grant" refuses.
        Verdict::Deny
    }
}

fn rule_of(r: &rusqlite::Row<'_>) -> rusqlite::Result<Rule> {
    Ok(Rule {
        id: r.get(0)?,
        scope: r.get(1)?,
        destination: r.get(2)?,
        verdict: verdict_of(&r.get::<_, String>(3)?),
        created_ms: r.get::<_, i64>(4)?.max(0) as u64,
        created_by: r.get(5)?,
        origin: r.get(6)?,
    })
}

fn parked_of(r: &rusqlite::Row<'_>) -> rusqlite::Result<Parked> {
    Ok(Parked {
        id: r.get(0)?,
        scope: r.get(1)?,
        destination: r.get(2)?,
        session: r.get(3)?,
        first_ms: r.get::<_, i64>(4)?.max(0) as u64,
        last_ms: r.get::<_, i64>(5)?.max(0) as u64,
        count: r.get::<_, i64>(6)?.max(0) as u64,
    })
}

const RULE_COLS: &str = "id, scope, destination, verdict, created_ms, created_by, origin";
const PARKED_COLS: &str = "id, scope, destination, session, first_ms, last_ms, count";

/// Normalise a destination a person typed: `host:port` or `*.suffix:port` (no port: 443),
/// as the allowlist parses it.
pub fn normalize_destination(d: &str) -> Result<String, ApprovalsError> {
    AllowEntry::parse(d)
        .map(|e| e.to_string())
        .map_err(|e| ApprovalsError::BadDestination {
            destination: d.to_string(),
            reason: crate::error_chain(&e),
        })
}

impl RuleStore {
    /// Open (or create, 0600, in a 0700 directory) the database at `path`. The file itself
    /// may not be a symlink.
    pub fn open(path: &Path) -> Result<Self, ApprovalsError> {
        let sql = |what: &str| {
            let what = what.to_string();
            let path = path.to_path_buf();
            move |source| ApprovalsError::Sql { what, path, source }
        };
        let dir = path.parent().unwrap_or(Path::new("/"));
        crate::audit::store::private_dir(dir).map_err(|e| ApprovalsError::Io {
            what: "creating the directory of".into(),
            path: path.to_path_buf(),
            source: std::io::Error::other(crate::error_chain(&e)),
        })?;
        // Create it 0600 and never through a link, before SQLite opens it.
        crate::audit::store::open_private(path).map_err(|source| ApprovalsError::Io {
            what: "opening".into(),
            path: path.to_path_buf(),
            source,
        })?;
        let conn = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_WRITE
                | OpenFlags::SQLITE_OPEN_NOFOLLOW
                | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(sql("opening"))?;
        conn.busy_timeout(Duration::from_secs(5))
            .map_err(sql("setting the busy timeout"))?;
        conn.pragma_update(None, "journal_mode", "WAL")
            .map_err(sql("WAL mode"))?;
        conn.execute_batch(SCHEMA)
            .map_err(sql("creating the schema"))?;
        Ok(RuleStore {
            conn,
            path: path.to_path_buf(),
        })
    }

    fn sql(&self, what: &str) -> impl FnOnce(rusqlite::Error) -> ApprovalsError {
        let what = what.to_string();
        let path = self.path.clone();
        move |source| ApprovalsError::Sql { what, path, source }
    }

    /// The rule for `name:port` in `scope`: a denial if any matches, else a grant if any
    /// matches. Exact destinations and typed wildcards both count.
    pub fn lookup(
        &self,
        scope: &str,
        name: &DnsName,
        port: u16,
    ) -> Result<Option<Rule>, ApprovalsError> {
        let exact = format!("{name}:{port}");
        let mut stmt = self
            .conn
            .prepare_cached(&format!(
                "SELECT {RULE_COLS} FROM rules WHERE scope = ?1 AND (destination = ?2 OR destination LIKE '*.%')"
            ))
            .map_err(self.sql("looking up a rule"))?;
        let rows = stmt
            .query_map(params![scope, exact], rule_of)
            .map_err(self.sql("looking up a rule"))?;
        let mut grant = None;
        for r in rows {
            let r = r.map_err(self.sql("reading a rule"))?;
            let matches = r.destination == exact
                || AllowEntry::parse(&r.destination).is_ok_and(|e| e.allows(name, port));
            if !matches {
                continue;
            }
            match r.verdict {
                Verdict::Deny => return Ok(Some(r)),
                Verdict::Grant => grant = grant.or(Some(r)),
            }
        }
        Ok(grant)
    }

    /// Record a rule (replacing one for the same scope and destination). `destination` is
    /// normalised first.
    pub fn add(
        &self,
        scope: &str,
        destination: &str,
        verdict: Verdict,
        by: &str,
        origin: &str,
    ) -> Result<Rule, ApprovalsError> {
        let destination = normalize_destination(destination)?;
        let rule = Rule {
            id: new_id(),
            scope: scope.to_string(),
            destination,
            verdict,
            created_ms: crate::audit::event::now_ms(),
            created_by: by.to_string(),
            origin: origin.to_string(),
        };
        self.conn
            .execute(
                "INSERT INTO rules(id, scope, destination, verdict, created_ms, created_by, origin) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) \
                 ON CONFLICT(scope, destination) DO UPDATE SET id = excluded.id, \
                 verdict = excluded.verdict, created_ms = excluded.created_ms, \
                 created_by = excluded.created_by, origin = excluded.origin",
                params![
                    rule.id,
                    rule.scope,
                    rule.destination,
                    rule.verdict.as_str(),
                    rule.created_ms as i64,
                    rule.created_by,
                    rule.origin
                ],
            )
            .map_err(self.sql("adding a rule"))?;
        // What was parked for it is answered now.
        self.conn
            .execute(
                "DELETE FROM parked WHERE scope = ?1 AND destination = ?2",
                params![rule.scope, rule.destination],
            )
            .map_err(self.sql("clearing parked requests"))?;
        Ok(rule)
    }

    /// Remove the rule `id`; returns it, or `None` if there is none.
    pub fn revoke(&self, id: &str) -> Result<Option<Rule>, ApprovalsError> {
        let rule = self
            .conn
            .query_row(
                &format!("SELECT {RULE_COLS} FROM rules WHERE id = ?1"),
                params![id],
                rule_of,
            )
            .optional()
            .map_err(self.sql("reading a rule"))?;
        if rule.is_some() {
            self.conn
                .execute("DELETE FROM rules WHERE id = ?1", params![id])
                .map_err(self.sql("revoking a rule"))?;
        }
        Ok(rule)
    }

    /// Every rule, or those of one scope, oldest first.
    pub fn rules(&self, scope: Option<&str>) -> Result<Vec<Rule>, ApprovalsError> {
        let mut stmt = self
            .conn
            .prepare(&format!(
                "SELECT {RULE_COLS} FROM rules WHERE ?1 IS NULL OR scope = ?1 ORDER BY created_ms, id"
            ))
            .map_err(self.sql("listing rules"))?;
        let rows = stmt
            .query_map(params![scope], rule_of)
            .map_err(self.sql("listing rules"))?;
        rows.collect::<Result<_, _>>()
            .map_err(self.sql("listing rules"))
    }

    /// Park a request under `id` (or count one more ask of the one already parked for the
    /// same scope and destination, which keeps its id); returns it.
    pub fn park(
        &self,
        id: &str,
        scope: &str,
        destination: &str,
        session: &str,
    ) -> Result<Parked, ApprovalsError> {
        let now = crate::audit::event::now_ms() as i64;
        // A sandbox chooses the names it asks for: at most MAX_PARKED new ones per scope.
        let known: bool = self
            .conn
            .query_row(
                "SELECT EXISTS(SELECT 1 FROM parked WHERE scope = ?1 AND destination = ?2)",
                params![scope, destination],
                |r| r.get(0),
            )
            .map_err(self.sql("counting parked requests"))?;
        if !known {
            let n: i64 = self
                .conn
                .query_row(
                    "SELECT COUNT(*) FROM parked WHERE scope = ?1",
                    params![scope],
                    |r| r.get(0),
                )
                .map_err(self.sql("counting parked requests"))?;
            if n >= super::MAX_PARKED as i64 {
                return Err(ApprovalsError::ParkedFull {
                    scope: scope.to_string(),
                });
            }
        }
        self.conn
            .execute(
                "INSERT INTO parked(id, scope, destination, session, first_ms, last_ms, count) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?5, 1) \
                 ON CONFLICT(scope, destination) DO UPDATE SET session = excluded.session, \
                 last_ms = excluded.last_ms, count = count + 1",
                params![id, scope, destination, session, now],
            )
            .map_err(self.sql("parking a request"))?;
        self.conn
            .query_row(
                &format!("SELECT {PARKED_COLS} FROM parked WHERE scope = ?1 AND destination = ?2"),
                params![scope, destination],
                parked_of,
            )
            .map_err(self.sql("reading a parked request"))
    }

    /// Every parked request, oldest first.
    pub fn parked(&self) -> Result<Vec<Parked>, ApprovalsError> {
        let mut stmt = self
            .conn
            .prepare(&format!(
                "SELECT {PARKED_COLS} FROM parked ORDER BY first_ms, id"
            ))
            .map_err(self.sql("listing parked requests"))?;
        let rows = stmt
            .query_map([], parked_of)
            .map_err(self.sql("listing parked requests"))?;
        rows.collect::<Result<_, _>>()
            .map_err(self.sql("listing parked requests"))
    }

    /// The parked request `id`, if any.
    pub fn parked_by_id(&self, id: &str) -> Result<Option<Parked>, ApprovalsError> {
        self.conn
            .query_row(
                &format!("SELECT {PARKED_COLS} FROM parked WHERE id = ?1"),
                params![id],
                parked_of,
            )
            .optional()
            .map_err(self.sql("reading a parked request"))
    }

    /// Forget a parked request (denied without `--always`, or answered).
    pub fn unpark(&self, id: &str) -> Result<(), ApprovalsError> {
        self.conn
            .execute("DELETE FROM parked WHERE id = ?1", params![id])
            .map(drop)
            .map_err(self.sql("removing a parked request"))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // Tests: a panic is the failure report.
mod tests {
    use super::*;

    fn name(s: &str) -> DnsName {
        DnsName::parse(s).unwrap()
    }

    #[test]
    fn denial_wins_and_wildcards_match_only_subdomains() {
        let d = crate::private_tempdir();
        let s = RuleStore::open(&d.path().join("x/approvals.db")).unwrap();
        let p = "project /p";
        assert!(s.lookup(p, &name("a.example.com"), 443).unwrap().is_none());
        s.add(p, "*.example.com", Verdict::Grant, "uid 1", "t")
            .unwrap();
        let g = s.lookup(p, &name("a.example.com"), 443).unwrap().unwrap();
        assert_eq!(
            (g.verdict, g.destination.as_str()),
            (Verdict::Grant, "*.example.com:443")
        );
        assert!(s.lookup(p, &name("example.com"), 443).unwrap().is_none());
        assert!(s.lookup(p, &name("a.example.com"), 80).unwrap().is_none());
        assert!(s
            .lookup("project /q", &name("a.example.com"), 443)
            .unwrap()
            .is_none());
        s.add(p, "a.example.com:443", Verdict::Deny, "uid 1", "t")
            .unwrap();
        assert_eq!(
            s.lookup(p, &name("a.example.com"), 443)
                .unwrap()
                .unwrap()
                .verdict,
            Verdict::Deny
        );
        // The denial's id (two rules made in the same millisecond have no set order).
        let id = s
            .rules(Some(p))
            .unwrap()
            .into_iter()
            .find(|r| r.verdict == Verdict::Deny)
            .unwrap()
            .id;
        assert!(s.revoke(&id).unwrap().is_some());
        assert!(s.revoke(&id).unwrap().is_none());
        assert_eq!(
            s.lookup(p, &name("a.example.com"), 443)
                .unwrap()
                .unwrap()
                .verdict,
            Verdict::Grant
        );
        assert!(s.add(p, "*", Verdict::Grant, "u", "t").is_err());
        assert!(s.add(p, "10.0.0.1:22", Verdict::Grant, "u", "t").is_err());
    }

    #[test]
    fn parking_counts_and_a_rule_clears_it() {
        let d = crate::private_tempdir();
        let path = d.path().join("approvals.db");
        let s = RuleStore::open(&path).unwrap();
        let a = s
            .park("aaaa0001", "project /p", "x.test:443", "s1")
            .unwrap();
        let b = s
            .park("bbbb0002", "project /p", "x.test:443", "s2")
            .unwrap();
        assert_eq!(a.id, "aaaa0001");
        assert_eq!(
            (a.id.clone(), b.count, b.session.as_str()),
            (b.id.clone(), 2, "s2")
        );
        drop(s);
        // Survives a reopen.
        let s = RuleStore::open(&path).unwrap();
        assert_eq!(s.parked_by_id(&a.id).unwrap().unwrap().count, 2);
        s.add("project /p", "x.test:443", Verdict::Grant, "u", "t")
            .unwrap();
        assert!(s.parked().unwrap().is_empty());
        // Bounded per scope: the next new name is refused, a known one still counts.
        for i in 0..crate::approvals::MAX_PARKED {
            s.park(
                &format!("id{i}"),
                "project /f",
                &format!("n{i}.test:443"),
                "s",
            )
            .unwrap();
        }
        assert!(matches!(
            s.park("over", "project /f", "over.test:443", "s"),
            Err(ApprovalsError::ParkedFull { .. })
        ));
        assert_eq!(
            s.park("x", "project /f", "n0.test:443", "s").unwrap().count,
            2
        );
        assert!(s.park("other", "project /g", "over.test:443", "s").is_ok());
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    #[test]
    fn a_symlinked_database_is_refused() {
        let d = crate::private_tempdir();
        std::fs::write(d.path().join("real"), "").unwrap();
        std::os::unix::fs::symlink(d.path().join("real"), d.path().join("approvals.db")).unwrap();
        assert!(RuleStore::open(&d.path().join("approvals.db")).is_err());
    }
}
