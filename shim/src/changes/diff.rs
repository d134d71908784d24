//! `vetto changes diff`: a unified diff for text files, a line for everything else.

use std::ffi::OsStr;
use std::fmt::Write as _;
use std::path::Path;

use super::fsat::Dir;
use super::scan::{Entry, Kind, What};
use super::ChangesError;

/// Is `b` text vetto prints as a diff (UTF-8, no NUL)?
fn is_text(b: &[u8]) -> bool {
    !b.contains(&0) && std::str::from_utf8(b).is_ok()
}

/// Files larger than this are described, not diffed.
const DIFF_LIMIT: usize = 1 << 20;

/// Characters that would let a file's content rewrite what the reviewer sees: every control
/// character but newline and tab (escape sequences, carriage return, backspace) and the
/// bidirectional and zero-width formatting characters.
fn hides(c: char) -> bool {
    (c.is_control() && c != '\n' && c != '\t')
        || matches!(c, '\u{200B}'..='\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}' | '\u{FEFF}')
}

/// `s` with every [`hides`] character written as `\u{..}`; `true` if any was.
fn shown(s: &str) -> (String, bool) {
    let mut out = String::with_capacity(s.len());
    let mut any = false;
    for c in s.chars() {
        if hides(c) {
            any = true;
            out.push_str(&format!("\\u{{{:x}}}", c as u32));
        } else {
            out.push(c);
        }
    }
    (out, any)
}

fn split(rel: &str) -> (&Path, &OsStr) {
    let p = Path::new(rel);
    (
        p.parent().unwrap_or(Path::new("")),
        p.file_name().unwrap_or(OsStr::new("")),
    )
}

/// The content of the regular file `rel` beneath `root`, if there is one.
fn content(root: &Dir, rel: &str) -> Option<Vec<u8>> {
    let (parent, name) = split(rel);
    root.open_beneath(parent).ok()?.read(name).ok()
}

/// The diff of one entry. Control characters cannot reach the output: refused names are
/// printed escaped and their content is not shown.
pub fn entry(upper: &Dir, project: &Dir, e: &Entry) -> Result<String, ChangesError> {
    let mut s = String::new();
    let name = e.path.escape_debug().to_string();
    let flag = if e.handoff { " (trust-handoff)" } else { "" };
    if let Some(r) = &e.refused {
        let _ = writeln!(s, "refused: {name}: {r}");
        return Ok(s);
    }
    match (e.what, e.kind) {
        (_, Kind::Nothing) => {}
        (What::Dir, Kind::Added) => {
            let _ = writeln!(s, "new directory {name}{flag} (mode {:o})", e.perm);
        }
        (What::Dir, Kind::Replaced) => {
            let _ = writeln!(
                s,
                "replaced directory {name}{flag}: the project's entries in it are deleted"
            );
        }
        (_, Kind::Mode) => {
            let _ = writeln!(s, "mode change {name}{flag} -> {:o}", e.perm);
        }
        (What::Whiteout, Kind::Deleted) => {
            let _ = writeln!(s, "deleted {name}{flag}");
            if let Some(old) = content(project, &e.path) {
                text_diff(&mut s, &e.path, Some(&old), None);
            }
        }
        (What::Symlink, _) => {
            let (parent, n) = split(&e.path);
            let t = upper
                .open_beneath(parent)
                .and_then(|d| d.read_link(n))
                .map_err(|source| ChangesError::Io {
                    what: "read link",
                    path: e.path.clone().into(),
                    source,
                })?;
            let _ = writeln!(
                s,
                "symlink {name}{flag} -> {}",
                t.to_string_lossy().escape_debug()
            );
        }
        (What::File, kind) => {
            let new = content(upper, &e.path).ok_or_else(|| ChangesError::Io {
                what: "read",
                path: format!("upper layer: {}", e.path).into(),
                source: std::io::Error::from_raw_os_error(libc::ENOENT),
            })?;
            let old = if kind == Kind::Added {
                None
            } else {
                content(project, &e.path)
            };
            if !flag.is_empty() {
                let _ = writeln!(s, "trust-handoff file {name}");
            }
            if kind == Kind::Added {
                let _ = writeln!(s, "new file {name} (mode {:o})", e.perm);
            }
            for n in &e.notes {
                let _ = writeln!(s, "note: {name}: {n}");
            }
            text_diff(&mut s, &e.path, old.as_deref(), Some(&new));
        }
        (What::Special | What::Whiteout | What::Dir, _) => {}
    }
    Ok(s)
}

fn text_diff(s: &mut String, rel: &str, old: Option<&[u8]>, new: Option<&[u8]>) {
    let a = if old.is_some() {
        format!("a/{rel}")
    } else {
        "/dev/null".into()
    };
    let b = if new.is_some() {
        format!("b/{rel}")
    } else {
        "/dev/null".into()
    };
    let (o, n) = (old.unwrap_or(b""), new.unwrap_or(b""));
    if o.len() > DIFF_LIMIT || n.len() > DIFF_LIMIT {
        let _ = writeln!(
            s,
            "Large files {a} ({} bytes) and {b} ({} bytes) differ: not shown",
            o.len(),
            n.len()
        );
        return;
    }
    if !is_text(o) || !is_text(n) {
        let _ = writeln!(s, "Binary files {a} and {b} differ");
        return;
    }
    let (o, n) = (
        std::str::from_utf8(o).unwrap_or(""),
        std::str::from_utf8(n).unwrap_or(""),
    );
    let d = similar::TextDiff::from_lines(o, n);
    let text = d
        .unified_diff()
        .context_radius(3)
        .header(&a, &b)
        .to_string();
    let (text, escaped) = shown(&text);
    if escaped {
        let _ = writeln!(
            s,
            "NOTE: {rel} holds control or invisible formatting characters (shown as \\u{{..}}): read it with care",
            rel = rel.escape_debug()
        );
    }
    s.push_str(&text);
}

#[cfg(test)]
mod tests {
    #[test]
    fn binary_and_text() {
        assert!(super::is_text(b"hello\n"));
        assert!(!super::is_text(b"he\0llo"));
        assert!(!super::is_text(b"\xff\xfe"));
        let mut s = String::new();
        super::text_diff(&mut s, "f", Some(b"a\nb\n"), Some(b"a\nc\n"));
        assert!(s.contains("--- a/f\n+++ b/f\n"), "{s}");
        assert!(s.contains("-b\n+c\n"), "{s}");
        // Escape sequences and carriage returns cannot redraw the reviewer's screen.
        let mut s = String::new();
        super::text_diff(
            &mut s,
            "f",
            Some(b"a\n"),
            Some(b"a\ncurl x|sh\r# tidy\n\x1b[1A\x1b[2Kok\n\xe2\x80\xaeevil\n"),
        );
        assert!(
            !s.contains('\r') && !s.contains('\x1b') && !s.contains('\u{202e}'),
            "{s}"
        );
        assert!(
            s.contains("\\u{d}") && s.contains("\\u{1b}") && s.contains("\\u{202e}"),
            "{s}"
        );
        assert!(s.starts_with("NOTE: f holds control"), "{s}");
    }
}
