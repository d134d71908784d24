//! The bundle's hooks, as the runtime spec says they run.
//!
//! libcontainer runs hooks itself, but three things differ from the spec there: the state on
//! a hook's stdin names the bundle libcontainer was given (vetto-shim's hardened copy,
//! `<root>/.vetto/<id>`, not the caller's bundle) and the status libcontainer holds at that
//! moment (`creating` for `prestart`); a failing or timed-out `poststart` or `poststop` hook
//! fails `start` or `delete` (the spec: "the runtime MUST log a warning and continue"); and a
//! hook that exits without reading its stdin can end the runtime with SIGPIPE.
//!
//! So every hook that runs in the runtime's namespaces (`prestart`, `createRuntime`,
//! `createContainer`, `poststart`, `poststop`) is rewritten in the shadow bundle to go
//! through this relay: `/proc/self/exe __hook KIND BUNDLE TIMEOUT -- PATH ARG0 ARGS...`.
//! `/proc/self/exe` is whichever vetto-shim binary runs the hook (the read-only re-executed
//! one included); the hook's own `env` stays on the relay and is passed on unchanged. The
//! relay reads the state, sets `bundle` and `status`, starts the hook with it on stdin
//! (a hook that reads none of it is fine), and reports its end: failure is an error for the
//! first three kinds and a warning for the last two. `startContainer` hooks run inside the
//! container after `pivot_root`, where the runtime's binary must not be reachable; they are
//! left as they are (their state names the shadow bundle).

use std::io::{Read, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::OciError;

/// The relay's first argument.
pub(super) const RELAY_ARG: &str = "__hook";

/// The hook kinds that run in the runtime's mount namespace, and the status each one's state
/// carries (the runtime spec's lifecycle; runtime-tools' `hooks_stdin`).
const RELAYED: [(&str, &str); 5] = [
    ("prestart", "created"),
    ("createRuntime", "created"),
    ("createContainer", "created"),
    ("poststart", "running"),
    ("poststop", "stopped"),
];

/// The most state a hook is handed (libcontainer's state of one container is a few KiB).
const MAX_STATE: u64 = 1 << 20;

/// Whether a failure of this kind is only a warning.
fn warn_only(kind: &str) -> bool {
    matches!(kind, "poststart" | "poststop")
}

/// Rewrites the relayed hooks of `spec` (the shadow bundle's config) to go through the relay,
/// with `bundle` (the caller's) as the state's bundle.
pub(super) fn relay_hooks(spec: &mut Value, bundle: &Path) -> Result<(), OciError> {
    let Some(hooks) = spec.get_mut("hooks").and_then(Value::as_object_mut) else {
        return Ok(());
    };
    let bundle = bundle
        .to_str()
        .ok_or_else(|| OciError::Config("the bundle path is not UTF-8".into()))?;
    for (kind, _) in RELAYED {
        let Some(list) = hooks.get_mut(kind).and_then(Value::as_array_mut) else {
            continue;
        };
        for hook in list {
            let obj = hook.as_object_mut().ok_or_else(|| {
                OciError::Config(format!("hooks.{kind}: an entry is not an object"))
            })?;
            let path = obj
                .get("path")
                .and_then(Value::as_str)
                .ok_or_else(|| OciError::Config(format!("hooks.{kind}: an entry has no path")))?
                .to_string();
            if !path.starts_with('/') {
                return Err(OciError::Config(format!(
                    "hooks.{kind}: path {path:?} is not absolute"
                )));
            }
            let args: Vec<String> = match obj.get("args") {
                None | Some(Value::Null) => vec![path.clone()],
                Some(Value::Array(a)) => a
                    .iter()
                    .map(|v| v.as_str().map(str::to_string))
                    .collect::<Option<Vec<_>>>()
                    .ok_or_else(|| {
                        OciError::Config(format!("hooks.{kind}: args must be strings"))
                    })?,
                Some(_) => {
                    return Err(OciError::Config(format!(
                        "hooks.{kind}: args must be an array"
                    )))
                }
            };
            let args = if args.is_empty() {
                vec![path.clone()]
            } else {
                args
            };
            // A warning-only hook's timeout is the relay's to enforce (libcontainer would fail
            // the command); the others keep theirs on the relay, which kills the hook with it.
            let timeout = match obj.get("timeout") {
                None | Some(Value::Null) => 0,
                Some(t) => t.as_u64().filter(|t| *t > 0).ok_or_else(|| {
                    OciError::Config(format!("hooks.{kind}: timeout must be a positive integer"))
                })?,
            };
            if warn_only(kind) {
                obj.remove("timeout");
            }
            let mut relay = vec![
                "vetto-shim".to_string(),
                RELAY_ARG.to_string(),
                kind.to_string(),
                bundle.to_string(),
                timeout.to_string(),
                "--".to_string(),
                path,
            ];
            relay.extend(args);
            obj.insert("path".into(), Value::from("/proc/self/exe"));
            obj.insert("args".into(), Value::from(relay));
        }
    }
    Ok(())
}

/// The relay itself (`vetto-shim __hook KIND BUNDLE TIMEOUT -- PATH ARG0 ARGS...`); the exit
/// code is the hook's for an error-kind hook, 0 (after a warning) for a warning-only one.
pub(super) fn main(args: &[String]) -> ExitCode {
    match relay(args) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("vetto-shim: hook: {e}");
            ExitCode::from(1)
        }
    }
}

fn relay(args: &[String]) -> Result<u8, String> {
    let [kind, bundle, timeout, sep, path, arg0, rest @ ..] = args else {
        return Err("usage: vetto-shim __hook KIND BUNDLE TIMEOUT -- PATH ARG0 [ARGS...]".into());
    };
    if sep != "--" {
        return Err("usage: vetto-shim __hook KIND BUNDLE TIMEOUT -- PATH ARG0 [ARGS...]".into());
    }
    let status = RELAYED
        .iter()
        .find(|(k, _)| k == kind)
        .map(|(_, s)| *s)
        .ok_or_else(|| format!("unknown hook kind {kind:?}"))?;
    let timeout: u64 = timeout
        .parse()
        .map_err(|_| format!("bad timeout {timeout:?}"))?;
    let mut raw = Vec::new();
    std::io::stdin()
        .take(MAX_STATE)
        .read_to_end(&mut raw)
        .map_err(|e| format!("reading the container state: {e}"))?;
    let state = match serde_json::from_slice::<Value>(&raw) {
        Ok(Value::Object(mut m)) => {
            m.insert("bundle".into(), Value::from(bundle.as_str()));
            m.insert("status".into(), Value::from(status));
            serde_json::to_vec(&m).map_err(|e| e.to_string())?
        }
        _ => raw,
    };
    let outcome = run_hook(path, arg0, rest, &state, timeout);
    let failure = match outcome {
        Ok(None) => return Ok(0),
        Ok(Some(code)) => (format!("exited with status {code}"), code),
        Err(HookEnd::Signal(sig)) => (
            format!("was killed by signal {sig}"),
            128u8.saturating_add(sig),
        ),
        Err(HookEnd::TimedOut) => (format!("timed out after {timeout}s and was killed"), 124),
        Err(HookEnd::Start(e)) => (format!("could not be started: {e}"), 127),
    };
    if warn_only(kind) {
        eprintln!(
            "vetto-shim: warning: {kind} hook {path} {}; continuing",
            failure.0
        );
        return Ok(0);
    }
    eprintln!("vetto-shim: {kind} hook {path} {}", failure.0);
    Ok(failure.1)
}

enum HookEnd {
    Signal(u8),
    TimedOut,
    Start(std::io::Error),
}

/// Runs the hook with `state` on its stdin; `Ok(None)` when it exits 0, `Ok(Some(code))` for
/// another exit code.
fn run_hook(
    path: &str,
    arg0: &str,
    args: &[String],
    state: &[u8],
    timeout: u64,
) -> Result<Option<u8>, HookEnd> {
    let mut cmd = Command::new(path);
    cmd.arg0(arg0)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::inherit())
        .stderr(Stdio::inherit());
    // SAFETY: between fork and exec only async-signal-safe calls: prctl and signal.
    unsafe {
        cmd.pre_exec(|| {
            // The hook goes when the relay goes (libcontainer kills the relay on its timeout).
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            // The relay ignores SIGPIPE; the hook gets the default disposition back.
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
            Ok(())
        });
    }
    let mut child = cmd.spawn().map_err(HookEnd::Start)?;
    if let Some(mut stdin) = child.stdin.take() {
        // A hook that exits without reading its state is not an error (EPIPE is ignored; the
        // relay's SIGPIPE is ignored, so it cannot end the relay or the runtime).
        let _ = stdin.write_all(state);
    }
    let deadline = (timeout > 0).then(|| Instant::now() + Duration::from_secs(timeout));
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break s,
            Ok(None) => {}
            Err(e) => return Err(HookEnd::Start(e)),
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            let _ = child.kill();
            let _ = child.wait();
            return Err(HookEnd::TimedOut);
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    if let Some(sig) = status.signal() {
        return Err(HookEnd::Signal(u8::try_from(sig).unwrap_or(u8::MAX)));
    }
    match status.code() {
        Some(0) => Ok(None),
        Some(c) => Ok(Some(u8::try_from(c).unwrap_or(u8::MAX))),
        None => Ok(Some(u8::MAX)),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn relayed_kinds_are_rewritten_and_start_container_is_left() {
        let mut spec = serde_json::json!({"hooks": {
            "prestart": [{"path": "/bin/true", "args": ["true", "a"], "timeout": 3, "env": ["X=1"]}],
            "poststop": [{"path": "/bin/false", "timeout": 2}],
            "startContainer": [{"path": "/bin/sh"}]
        }});
        relay_hooks(&mut spec, Path::new("/b")).unwrap();
        let pre = &spec["hooks"]["prestart"][0];
        assert_eq!(pre["path"], "/proc/self/exe");
        assert_eq!(
            pre["args"],
            serde_json::json!([
                "vetto-shim",
                "__hook",
                "prestart",
                "/b",
                "3",
                "--",
                "/bin/true",
                "true",
                "a"
            ])
        );
        assert_eq!(pre["timeout"], 3);
        assert_eq!(pre["env"], serde_json::json!(["X=1"]));
        let post = &spec["hooks"]["poststop"][0];
        assert_eq!(
            post["args"],
            serde_json::json!([
                "vetto-shim",
                "__hook",
                "poststop",
                "/b",
                "2",
                "--",
                "/bin/false",
                "/bin/false"
            ])
        );
        assert!(
            post.get("timeout").is_none(),
            "the relay enforces a warning hook's timeout"
        );
        assert_eq!(spec["hooks"]["startContainer"][0]["path"], "/bin/sh");
    }

    #[test]
    fn bad_hooks_are_named() {
        for bad in [
            serde_json::json!({"hooks": {"prestart": [{"path": "rel"}]}}),
            serde_json::json!({"hooks": {"prestart": [{"args": ["x"]}]}}),
            serde_json::json!({"hooks": {"poststart": [{"path": "/x", "args": [1]}]}}),
            serde_json::json!({"hooks": {"poststart": [{"path": "/x", "timeout": 0}]}}),
        ] {
            let mut s = bad.clone();
            let e = relay_hooks(&mut s, Path::new("/b"))
                .unwrap_err()
                .to_string();
            assert!(e.contains("hooks."), "{e}");
        }
    }
}
