//! `vetto watch`: a live terminal view of the running sessions, their pending approvals and
//! the audit trail.
//!
//! - [`sessions`]: one subscriber thread per live session's control socket (new sessions are
//!   picked up as their sockets appear). While watch is subscribed, each session counts as
//!   attended, so its broker holds an unlisted name for an answer instead of parking it.
//! - [`feed`]: the newest records of the audit store, polled by chain position.
//! - [`ui`]: drawing, and the answers (`o`, `s`, `a`, `d`, `D`) sent through the selected
//!   request's session socket.
//!
//! The terminal is put back (raw mode off, main screen) by a guard on every way out, and by
//! the panic hook before a panic's message is printed (release builds abort on panic, so no
//! destructor would run then).

mod feed;
mod sessions;
mod ui;

use std::io::Stdout;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use crossterm::event::{self, Event, KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use crossterm::terminal::{self, EnterAlternateScreen, LeaveAlternateScreen};
use ratatui::backend::CrosstermBackend;
use ratatui::Terminal;
use vetto_broker::approvals::control::{Client, Request};
use vetto_broker::approvals::{Scope, Verdict};
use vetto_broker::error_chain;

use feed::Feed;
use sessions::Sessions;

/// How the answers are labelled in the session's record.
const VIA: &str = "vetto watch";
/// How often the sockets and the store are looked at again.
const RESCAN: Duration = Duration::from_millis(250);
/// The longest wait for a key before the screen is drawn again.
const TICK: Duration = Duration::from_millis(100);

/// Run the live view until `q`, Esc or Ctrl-C; `store` is the audit store to follow (default:
/// the user's).
pub fn run(store: Option<&Path>) -> Result<u8> {
    if !crate::pty::is_tty(0) || !crate::pty::is_tty(1) {
        bail!(
            "vetto watch needs a terminal (for a line per request, see `vetto approvals follow`)"
        );
    }
    let uid = nix::unistd::geteuid().as_raw();
    let root = crate::session::runtime_root(uid).context("vetto watch: the runtime directory")?;
    let store = store
        .map(Path::to_path_buf)
        .or_else(|| vetto_broker::audit::user_dir().map(|d| d.join("audit.db")));
    let mut app = App::new(root, store);
    let guard = TerminalGuard::enter()?;
    let mut term = Terminal::new(CrosstermBackend::new(std::io::stdout()))
        .context("vetto watch: the terminal")?;
    let res = app.run(&mut term);
    drop(term);
    drop(guard);
    res.map(|()| 0)
}

/// Raw mode and the alternate screen, undone when dropped (and by the panic hook).
struct TerminalGuard;

impl TerminalGuard {
    fn enter() -> Result<Self> {
        terminal::enable_raw_mode().context("vetto watch: raw mode")?;
        // From here on the guard undoes what was done, whatever fails next.
        let guard = TerminalGuard;
        let prev = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            restore();
            prev(info);
        }));
        crossterm::execute!(
            std::io::stdout(),
            EnterAlternateScreen,
            crossterm::cursor::Hide
        )
        .context("vetto watch: the alternate screen")?;
        Ok(guard)
    }
}

impl Drop for TerminalGuard {
    fn drop(&mut self) {
        restore();
        // The hook set in `enter` restores a terminal that is no longer ours: take it down.
        let _ = std::panic::take_hook();
    }
}

/// Leave the alternate screen, show the cursor, and leave raw mode (each best effort).
fn restore() {
    let _ = crossterm::execute!(
        std::io::stdout(),
        LeaveAlternateScreen,
        crossterm::cursor::Show
    );
    let _ = terminal::disable_raw_mode();
}

/// One pending request as the view lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct PendingRow {
    /// Its session's control socket (where the answer goes).
    socket: PathBuf,
    /// The session id.
    session: String,
    /// The request.
    view: vetto_broker::approvals::gate::PendingView,
}

/// The view's state.
struct App {
    sessions: Sessions,
    feed: Feed,
    /// The selected pending request, by id (kept across refreshes).
    selected: Option<String>,
    /// The last answer's reply, or what went wrong.
    message: Option<Note>,
    /// Where answer threads send their replies.
    replies: mpsc::Sender<Note>,
    /// The replies.
    replied: mpsc::Receiver<Note>,
}

/// A line for the status bar.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Note {
    /// Done (or under way), or failed.
    ok: bool,
    /// What.
    text: String,
}

impl Note {
    fn ok(text: String) -> Self {
        Note { ok: true, text }
    }
    fn err(text: String) -> Self {
        Note { ok: false, text }
    }
}

impl App {
    fn new(root: PathBuf, store: Option<PathBuf>) -> Self {
        let (replies, replied) = mpsc::channel();
        App {
            sessions: Sessions::new(root),
            feed: Feed::new(store),
            selected: None,
            message: None,
            replies,
            replied,
        }
    }

    fn run(&mut self, term: &mut Terminal<CrosstermBackend<Stdout>>) -> Result<()> {
        let mut last_scan: Option<Instant> = None;
        loop {
            if last_scan.is_none_or(|t| t.elapsed() >= RESCAN) {
                self.sessions.scan();
                self.feed.poll();
                last_scan = Some(Instant::now());
            }
            while let Some(u) = self.sessions.try_recv() {
                self.sessions.apply(u);
            }
            while let Ok(m) = self.replied.try_recv() {
                self.message = Some(m);
            }
            let pending = self.pending();
            let index = self.index(&pending);
            term.draw(|f| ui::draw(f, self, &pending, index))
                .context("vetto watch: drawing")?;
            if !event::poll(TICK).context("vetto watch: reading the terminal")? {
                continue;
            }
            match event::read().context("vetto watch: reading the terminal")? {
                Event::Key(k) if k.kind == KeyEventKind::Press && self.key(k, &pending, index) => {
                    return Ok(())
                }
                // A resize is drawn on the next turn.
                _ => {}
            }
        }
    }

    /// Every pending request of every session, oldest first.
    fn pending(&self) -> Vec<PendingRow> {
        let mut rows: Vec<PendingRow> = self
            .sessions
            .live()
            .flat_map(|(socket, s)| {
                s.pending.iter().map(move |p| PendingRow {
                    socket: socket.to_path_buf(),
                    session: s.session.clone(),
                    view: p.clone(),
                })
            })
            .collect();
        rows.sort_by(|a, b| (a.view.first_ms, &a.view.id).cmp(&(b.view.first_ms, &b.view.id)));
        rows
    }

    /// The selected row's index: the selected id if it is still pending, else the first.
    fn index(&mut self, pending: &[PendingRow]) -> Option<usize> {
        let i = self
            .selected
            .as_ref()
            .and_then(|id| pending.iter().position(|p| &p.view.id == id))
            .or(if pending.is_empty() { None } else { Some(0) });
        self.selected = i.and_then(|i| pending.get(i)).map(|p| p.view.id.clone());
        i
    }

    /// Handle a key; true to quit.
    fn key(&mut self, k: KeyEvent, pending: &[PendingRow], index: Option<usize>) -> bool {
        let answer = |verdict, scope| Some((verdict, scope));
        let chosen = match k.code {
            KeyCode::Char('q') | KeyCode::Esc => return true,
            KeyCode::Char('c') if k.modifiers.contains(KeyModifiers::CONTROL) => return true,
            KeyCode::Up | KeyCode::Char('k') => {
                self.select(pending, index, -1);
                None
            }
            KeyCode::Down | KeyCode::Char('j') => {
                self.select(pending, index, 1);
                None
            }
            KeyCode::Char('o') => answer(Verdict::Grant, Scope::Once),
            KeyCode::Char('s') => answer(Verdict::Grant, Scope::Session),
            KeyCode::Char('a') => answer(Verdict::Grant, Scope::Always),
            KeyCode::Char('d') => answer(Verdict::Deny, Scope::Session),
            KeyCode::Char('D') => answer(Verdict::Deny, Scope::Always),
            _ => None,
        };
        if let Some((verdict, scope)) = chosen {
            match index.and_then(|i| pending.get(i)) {
                Some(row) => self.answer(row, verdict, scope),
                None => self.message = Some(Note::err("no pending request to answer".into())),
            }
        }
        false
    }

    /// Move the selection by `by` (wrapping).
    fn select(&mut self, pending: &[PendingRow], index: Option<usize>, by: isize) {
        let (Some(i), n) = (index, pending.len()) else {
            return;
        };
        let next = (i as isize + by).rem_euclid(n as isize) as usize;
        self.selected = pending.get(next).map(|p| p.view.id.clone());
    }

    /// Send an answer through the request's session socket, on a thread of its own (the reply
    /// shows in the status line).
    fn answer(&mut self, row: &PendingRow, verdict: Verdict, scope: Scope) {
        self.message = Some(Note::ok(format!(
            "answering {} ({}): {} {}…",
            row.view.id,
            row.view.destination,
            verdict.as_str(),
            scope_word(scope)
        )));
        let tx = self.replies.clone();
        let (socket, id) = (row.socket.clone(), row.view.id.clone());
        std::thread::spawn(move || {
            let res = Client::connect(&socket).and_then(|mut c| {
                c.call(&Request::Answer {
                    id: id.clone(),
                    verdict,
                    scope,
                    pattern: None,
                    via: VIA.into(),
                })
            });
            let _ = tx.send(match res {
                Ok(r) if r.ok => Note::ok(format!("{id}: {}", r.message)),
                Ok(r) => Note::err(format!("{id}: {}", r.message)),
                Err(e) => Note::err(format!("{id}: {}", error_chain(&e))),
            });
        });
    }
}

/// `once`, `session` or `always`.
fn scope_word(s: Scope) -> &'static str {
    match s {
        Scope::Once => "once",
        Scope::Session => "for the session",
        Scope::Always => "always",
    }
}
