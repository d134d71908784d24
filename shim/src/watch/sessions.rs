//! The live sessions: a subscriber thread per control socket, each forwarding its session's
//! status over a channel for as long as the broker keeps the subscription.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use vetto_broker::approvals::control::{self, Client, Reply};
use vetto_broker::approvals::gate::Status;
use vetto_broker::error_chain;

/// How long a socket that failed waits before it is tried again.
const RETRY: Duration = Duration::from_secs(2);

/// What a subscriber thread reports.
#[derive(Debug)]
pub enum Update {
    /// The session's status now.
    Status(PathBuf, Box<Status>),
    /// The subscription ended (the session is over, or the broker refused us), why, and
    /// whether trying again may help (a refusal is recorded by the broker each time, and
    /// would only be repeated).
    Ended(PathBuf, String, bool),
}

/// One socket as the view knows it.
#[derive(Debug)]
pub enum Entry {
    /// Subscribed; no status yet.
    Connecting,
    /// Subscribed, with its latest status.
    Live(Box<Status>),
    /// The subscription ended; tried again after [`RETRY`] if the socket is still there
    /// (unless the broker refused us).
    Failed {
        /// Why.
        why: String,
        /// When.
        at: Instant,
        /// Whether to try again.
        retry: bool,
    },
}

/// Every session's control socket under the runtime directory, and what it last said.
pub struct Sessions {
    root: PathBuf,
    entries: BTreeMap<PathBuf, Entry>,
    tx: mpsc::Sender<Update>,
    rx: mpsc::Receiver<Update>,
}

impl Sessions {
    /// Sessions under `root` (the user's vetto runtime directory).
    pub fn new(root: PathBuf) -> Self {
        let (tx, rx) = mpsc::channel();
        Sessions {
            root,
            entries: BTreeMap::new(),
            tx,
            rx,
        }
    }

    /// Subscribe to every socket not yet subscribed to (and to failed ones again, after a
    /// while); forget sockets that are gone.
    pub fn scan(&mut self) {
        let now = control::sockets(&self.root);
        self.entries
            .retain(|p, e| now.contains(p) || !matches!(e, Entry::Failed { .. }));
        for sock in now {
            let start = match self.entries.get(&sock) {
                None => true,
                Some(Entry::Failed { at, retry, .. }) => *retry && at.elapsed() >= RETRY,
                Some(_) => false,
            };
            if start {
                self.entries.insert(sock.clone(), Entry::Connecting);
                subscribe(sock, self.tx.clone());
            }
        }
    }

    /// The next report, if there is one.
    pub fn try_recv(&self) -> Option<Update> {
        self.rx.try_recv().ok()
    }

    /// Take in a report.
    pub fn apply(&mut self, u: Update) {
        match u {
            Update::Status(p, s) => {
                self.entries.insert(p, Entry::Live(s));
            }
            Update::Ended(p, why, retry) => {
                self.entries.insert(
                    p,
                    Entry::Failed {
                        why,
                        at: Instant::now(),
                        retry,
                    },
                );
            }
        }
    }

    /// Every socket and its entry, in path order.
    pub fn entries(&self) -> impl Iterator<Item = (&Path, &Entry)> {
        self.entries.iter().map(|(p, e)| (p.as_path(), e))
    }

    /// The sessions with a status.
    pub fn live(&self) -> impl Iterator<Item = (&Path, &Status)> {
        self.entries().filter_map(|(p, e)| match e {
            Entry::Live(s) => Some((p, s.as_ref())),
            _ => None,
        })
    }
}

/// Subscribe to `sock` on a thread of its own, forwarding each status to `tx` until the
/// subscription ends (or the view is gone).
fn subscribe(sock: PathBuf, tx: mpsc::Sender<Update>) {
    std::thread::spawn(move || {
        let (why, retry) = follow(&sock, &tx);
        let _ = tx.send(Update::Ended(sock, why, retry));
    });
}

/// Forward `sock`'s statuses; returns why it stopped, and whether to try again.
fn follow(sock: &Path, tx: &mpsc::Sender<Update>) -> (String, bool) {
    let mut c = match Client::connect(sock) {
        Ok(c) => c,
        Err(e) => return (error_chain(&e), true),
    };
    if let Err(e) = c.subscribe() {
        return (error_chain(&e), true);
    }
    loop {
        match c.recv() {
            Ok(Reply {
                status: Some(s), ..
            }) => {
                if tx
                    .send(Update::Status(sock.to_path_buf(), Box::new(s)))
                    .is_err()
                {
                    return ("the view is gone".into(), false);
                }
            }
            // Refused (or nonsense): asking again would get the same answer.
            Ok(r) => return (r.message, false),
            Err(e) => return (error_chain(&e), true),
        }
    }
}
