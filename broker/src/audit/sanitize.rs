//! The best-effort secret sanitizer: token-shaped values in an event's free-text fields
//! (argv, details, reasons, destinations) are replaced by `[REDACTED:<kind>]` before the event
//! is stored or exported.
//!
//! Best-effort, and documented as such: it knows the shapes below and nothing else. A secret
//! of another shape, or one split across arguments, passes through. It is a second line: the
//! sandbox keeps secrets out of the agent's reach; this keeps the ones that were typed on a
//! command line out of the audit trail.

use std::sync::OnceLock;

use regex::Regex;

/// (kind, pattern). Each pattern matches the whole secret to replace.
const PATTERNS: &[(&str, &str)] = &[
    // PEM private keys: the whole block, or its start when the block is cut.
    (
        "private-key",
        r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----(?s:.*?)(?:-----END [A-Z0-9 ]*PRIVATE KEY-----|\z)",
    ),
    // GitHub: classic and fine-grained tokens.
    (
        "github-token",
        r"\b(?:gh[pousr]_[A-Za-z0-9]{36,255}|github_pat_[A-Za-z0-9_]{22,255})",
    ),
    // AWS access key ids, and secret keys named as such.
    (
        "aws-access-key-id",
        r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA|ANVA|AIPA)[A-Z0-9]{16}\b",
    ),
    (
        "aws-secret-access-key",
        r"(?i)(?:aws_secret_access_key|secretaccesskey)\s*[=:]\s*[A-Za-z0-9/+=]{40}",
    ),
    // Anthropic, then OpenAI (`sk-proj-…`, `sk-…`).
    ("anthropic-key", r"\bsk-ant-[A-Za-z0-9_\-]{20,}"),
    (
        "openai-key",
        r"\bsk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_\-]{20,}",
    ),
    // Slack, Google API keys, npm and PyPI tokens.
    ("slack-token", r"\bxox[abposr]-[A-Za-z0-9\-]{10,}"),
    ("google-api-key", r"\bAIza[0-9A-Za-z_\-]{35}"),
    ("npm-token", r"\bnpm_[A-Za-z0-9]{36}"),
    ("pypi-token", r"\bpypi-[A-Za-z0-9_\-]{50,}"),
    // `Authorization: Bearer …` and `token …` headers.
    (
        "bearer",
        r"(?i)\b(?:bearer|token)\s+[A-Za-z0-9_\-\.=:/+]{16,}",
    ),
];

/// `user:password@` in a URL: the password is replaced, the user kept.
const URL_CREDENTIALS: &str = r"(?i)\b([a-z][a-z0-9+.\-]*://[^/\s:@]*):[^@\s/]+@";

type Compiled = (Vec<(&'static str, Regex)>, Option<Regex>);

fn compiled() -> &'static Compiled {
    static RE: OnceLock<Compiled> = OnceLock::new();
    RE.get_or_init(|| {
        let list = PATTERNS
            .iter()
            .filter_map(|(k, p)| Regex::new(p).ok().map(|r| (*k, r)))
            .collect();
        (list, Regex::new(URL_CREDENTIALS).ok())
    })
}

/// `s` with every token-shaped value replaced.
pub fn redact(s: &str) -> String {
    let (list, url) = compiled();
    let mut out = match url {
        Some(url) => url.replace_all(s, "$1:[REDACTED:password]@").into_owned(),
        None => s.to_string(),
    };
    for (kind, re) in list {
        if re.is_match(&out) {
            out = re
                .replace_all(&out, format!("[REDACTED:{kind}]").as_str())
                .into_owned();
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_pattern_compiles() {
        assert_eq!(compiled().0.len(), PATTERNS.len());
        assert!(compiled().1.is_some());
    }

    #[test]
    fn known_shapes_are_redacted() {
        let cases = [
            ("ghp_0123456789abcdefghijABCDEFGHIJ012345", "github-token"),
            ("github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz", "github-token"),
            ("AKIAIOSFODNN7EXAMPLE", "aws-access-key-id"),
            ("aws_secret_access_key=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "aws-secret-access-key"),
            ("sk-ant-api03-abcdefghijklmnopqrstuvwxyz0123", "anthropic-key"),
            ("sk-proj-abcdefghijklmnopqrstuvwxyz0123", "openai-key"),
            ("xoxb-123456789012-abcdefghij", "slack-token"),
            ("Authorization: Bearer abcdefghijklmnop0123", "bearer"),
            ("-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXk\n-----END OPENSSH PRIVATE KEY-----", "private-key"),
            ("-----BEGIN RSA PRIVATE KEY-----\nMIIEow (cut)", "private-key"),
        ];
        for (secret, kind) in cases {
            let text = format!("curl -H x {secret} tail");
            let out = redact(&text);
            assert!(
                out.contains(&format!("[REDACTED:{kind}]")),
                "{text} -> {out}"
            );
            assert!(!out.contains(secret), "{text} -> {out}");
        }
    }

    #[test]
    fn url_passwords_are_redacted_and_the_user_kept() {
        let out = redact("git clone https://bob:hunter2hunter2@example.com/r.git");
        assert_eq!(
            out,
            "git clone https://bob:[REDACTED:password]@example.com/r.git"
        );
        assert_eq!(
            redact("https://example.com:8443/x"),
            "https://example.com:8443/x"
        );
    }

    #[test]
    fn ordinary_text_is_untouched() {
        for s in [
            "cargo build --release",
            "not-allowlisted: example.com:443 is not on network.allow",
            "/home/dev/project",
            "sk-short",
        ] {
            assert_eq!(redact(s), s);
        }
    }
}
