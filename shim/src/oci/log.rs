//! The `--log` file, in the format the caller asked for.
//!
//! containerd and Docker read the last `"level":"error"` line of a JSON log to explain a failed
//! runtime call ("unable to retrieve OCI runtime error" when there is none), and stop reading
//! at the first line that is not JSON: in JSON mode every line written here is one JSON object.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::Path;

/// Where runtime messages go.
pub struct Logger {
    file: Option<File>,
    json: bool,
    debug: bool,
}

impl Logger {
    /// Opens (appends to) `path`; without one, messages go to stderr only.
    pub fn open(path: Option<&Path>, format: Option<&str>, debug: bool) -> Logger {
        let file = path.and_then(|p| {
            OpenOptions::new()
                .create(true)
                .append(true)
                .open(p)
                .map_err(|e| eprintln!("vetto-shim: cannot open log {}: {e}", p.display()))
                .ok()
        });
        Logger {
            file,
            json: format == Some("json"),
            debug,
        }
    }

    fn line(&self, level: &str, msg: &str) -> String {
        let time = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Nanos, true);
        if self.json {
            serde_json::json!({"level": level, "msg": msg, "time": time}).to_string()
        } else {
            format!("time=\"{time}\" level={level} msg={msg:?}")
        }
    }

    fn write(&self, level: &str, msg: &str) {
        if let Some(mut f) = self.file.as_ref() {
            let _ = writeln!(f, "{}", self.line(level, msg));
        }
    }

    /// An error: to the log and to stderr (as runc does).
    pub fn error(&self, msg: &str) {
        self.write("error", msg);
        eprintln!("vetto-shim: {msg}");
    }

    /// A warning (something failed that does not fail the command): to the log and to
    /// stderr.
    pub fn warn(&self, msg: &str) {
        self.write("warning", msg);
        eprintln!("vetto-shim: warning: {msg}");
    }

    /// With `--debug` only.
    pub fn debug(&self, msg: &str) {
        if self.debug {
            self.write("debug", msg);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_lines_are_json_with_level_and_msg() {
        let dir = tempfile::tempdir().expect("tmp");
        let p = dir.path().join("log.json");
        let l = Logger::open(Some(&p), Some("json"), true);
        l.debug("one \"quoted\"\nline");
        l.write("warning", "two");
        let text = std::fs::read_to_string(&p).expect("log");
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).expect("every line is JSON"))
            .collect();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0]["level"], "debug");
        assert_eq!(lines[0]["msg"], "one \"quoted\"\nline");
        assert!(lines[1]["time"].as_str().is_some_and(|t| t.ends_with('Z')));
    }
}
