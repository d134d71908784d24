//! Drawing the view: sessions, pending approvals (with the selection), the audit feed and a
//! status line.

use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Cell, Paragraph, Row, Table, TableState};
use ratatui::Frame;
use vetto_broker::approvals::GateMode;
use vetto_broker::audit::event::now_ms;

use super::feed::Tone;
use super::sessions::Entry;
use super::{App, PendingRow};

/// The keys, as the pending panel's title lists them.
const KEYS: &str = "↑/↓ j/k select · o once · s session · a always · d deny · D deny always";

/// The widest session id (`vetto-PID-12 hex digits`).
const SESSION_WIDTH: u16 = 26;

/// Draw everything.
pub fn draw(f: &mut Frame, app: &App, pending: &[PendingRow], index: Option<usize>) {
    let sessions = app.sessions.entries().count();
    let [head, top, mid, bottom, status] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Length(sessions.clamp(1, 8) as u16 + 3),
        Constraint::Length(pending.len().clamp(1, 10) as u16 + 3),
        Constraint::Min(4),
        Constraint::Length(1),
    ])
    .areas(f.area());
    f.render_widget(
        Paragraph::new(Line::from(vec![
            Span::styled("vetto watch", Style::new().add_modifier(Modifier::BOLD)),
            Span::raw(format!(
                " · {sessions} session(s) · {} pending · q quit",
                pending.len()
            )),
        ])),
        head,
    );
    draw_sessions(f, app, top);
    draw_pending(f, pending, index, mid);
    draw_feed(f, app, bottom);
    let line = match &app.message {
        Some(n) => Line::styled(
            n.text.as_str(),
            Style::new().fg(if n.ok { Color::Green } else { Color::Red }),
        ),
        None => Line::raw(""),
    };
    f.render_widget(Paragraph::new(line), status);
}

fn header(cells: &[&'static str]) -> Row<'static> {
    Row::new(cells.iter().copied()).style(Style::new().add_modifier(Modifier::BOLD))
}

fn draw_sessions(f: &mut Frame, app: &App, area: Rect) {
    let now = now_ms();
    let rows: Vec<Row> = app
        .sessions
        .entries()
        .map(|(sock, e)| match e {
            Entry::Live(s) => Row::new(vec![
                Cell::from(s.session.clone()),
                Cell::from(mode_name(s.mode)),
                Cell::from(if s.operator { "yes" } else { "no" }),
                Cell::from(s.pending.len().to_string()),
                Cell::from(s.session_rules.len().to_string()),
                Cell::from(format!("{}s", now.saturating_sub(s.started_ms) / 1000)),
                Cell::from(s.scope.clone()),
            ]),
            Entry::Connecting => Row::new(vec![
                Cell::from(session_of(sock)),
                Cell::from("…"),
                Cell::from(""),
                Cell::from(""),
                Cell::from(""),
                Cell::from(""),
                Cell::from("connecting"),
            ]),
            Entry::Failed { why, .. } => Row::new(vec![
                Cell::from(session_of(sock)),
                Cell::from("-"),
                Cell::from(""),
                Cell::from(""),
                Cell::from(""),
                Cell::from(""),
                Cell::from(why.clone()),
            ])
            .style(Style::new().fg(Color::Red)),
        })
        .collect();
    let title = format!("Sessions: {}", rows.len());
    let empty = rows.is_empty();
    let table = Table::new(
        rows,
        [
            Constraint::Length(SESSION_WIDTH),
            Constraint::Length(5),
            Constraint::Length(8),
            Constraint::Length(7),
            Constraint::Length(7),
            Constraint::Length(8),
            Constraint::Fill(1),
        ],
    )
    .header(header(&[
        "SESSION", "MODE", "OPERATOR", "PENDING", "ANSWERS", "UP", "SCOPE",
    ]))
    .block(Block::bordered().title(title));
    f.render_widget(table, area);
    if empty {
        let inner = Rect {
            y: area.y + 2,
            height: 1,
            x: area.x + 1,
            width: area.width.saturating_sub(2),
        };
        f.render_widget(
            Paragraph::new("no running sessions"),
            inner.intersection(area),
        );
    }
}

/// `ask`, `park` or `off`.
fn mode_name(m: GateMode) -> &'static str {
    match m {
        GateMode::Ask => "ask",
        GateMode::Park => "park",
        GateMode::Off => "off",
    }
}

/// The session id in a socket's path (`…/sessions/ID/control.sock`).
fn session_of(sock: &std::path::Path) -> String {
    sock.parent()
        .and_then(|d| d.file_name())
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

fn draw_pending(f: &mut Frame, pending: &[PendingRow], index: Option<usize>, area: Rect) {
    let rows: Vec<Row> = pending
        .iter()
        .map(|p| {
            Row::new(vec![
                Cell::from(p.view.id.clone()),
                Cell::from(p.session.clone()),
                Cell::from(p.view.destination.clone()),
                Cell::from(p.view.waiting.to_string()),
                Cell::from(format!("{}s", p.view.seconds_left)),
            ])
        })
        .collect();
    let table = Table::new(
        rows,
        [
            Constraint::Length(9),
            Constraint::Length(SESSION_WIDTH),
            Constraint::Fill(1),
            Constraint::Length(7),
            Constraint::Length(5),
        ],
    )
    .header(header(&["ID", "SESSION", "DESTINATION", "WAITING", "LEFT"]))
    .row_highlight_style(Style::new().add_modifier(Modifier::REVERSED))
    .highlight_symbol("> ")
    .block(
        Block::bordered()
            .title(format!("Pending approvals: {}", pending.len()))
            .title(Line::from(KEYS).right_aligned())
            .border_style(if pending.is_empty() {
                Style::new()
            } else {
                Style::new().fg(Color::Yellow)
            }),
    );
    let mut state = TableState::default().with_selected(index);
    f.render_stateful_widget(table, area, &mut state);
}

fn draw_feed(f: &mut Frame, app: &App, area: Rect) {
    let title = match app.feed.path() {
        Some(p) => format!("Audit trail: {}", p.display()),
        None => "Audit trail".into(),
    };
    let block = Block::bordered().title(title);
    let problem = app
        .feed
        .problem()
        .map(|p| Line::styled(p.to_string(), Style::new().fg(Color::DarkGray)));
    let lines: Vec<Line> = problem
        .into_iter()
        .chain(app.feed.lines().map(|l| {
            let style = match l.tone {
                Tone::Good => Style::new().fg(Color::Green),
                Tone::Bad => Style::new().fg(Color::Red),
                Tone::Ask => Style::new().fg(Color::Yellow),
                Tone::Plain => Style::new(),
            };
            Line::from(vec![
                Span::raw(format!("{:>6} {} {} ", l.seq, l.time, l.session)),
                Span::styled(format!("{:<18} ", l.kind), style),
                Span::raw(l.text.clone()),
            ])
        }))
        .take(usize::from(area.height.saturating_sub(2)))
        .collect();
    f.render_widget(Paragraph::new(lines).block(block), area);
}
