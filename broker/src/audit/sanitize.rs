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

/// (kind, needles, pattern). Each pattern matches the whole secret to replace. A pattern is
/// compiled (a regex: ~1 ms each, which every session would pay) only the first time one of
/// its needles occurs in a text, case-insensitively; most texts contain none.
const PATTERNS: &[(&str, &[&str], &str)] = &[
    // PEM private keys: the whole block, or its start when the block is cut.
    (
        "private-key",
        &["private key-----"],
        r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----(?s:.*?)(?:-----END [A-Z0-9 ]*PRIVATE KEY-----|\z)",
    ),
    // GitHub: classic and fine-grained tokens.
    (
        "github-token",
        &["ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"],
        r"\b(?:gh[pousr]_[A-Za-z0-9]{36,255}|github_pat_[A-Za-z0-9_]{22,255})",
    ),
    // AWS access key ids, and secret keys named as such.
    (
        "aws-access-key-id",
        &[
            "akia", "asia", "agpa", "aida", "aroa", "anpa", "anva", "aipa",
        ],
        r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA|ANVA|AIPA)[A-Z0-9]{16}\b",
    ),
    (
        "aws-secret-access-key",
        &["aws_secret_access_key", "secretaccesskey"],
        r"(?i)(?:aws_secret_access_key|secretaccesskey)\s*[=:]\s*[A-Za-z0-9/+=]{40}",
    ),
    // Anthropic, then OpenAI (`sk-proj-…`, `sk-…`).
    (
        "anthropic-key",
        &["sk-ant-"],
        r"\bsk-ant-[A-Za-z0-9_\-]{20,}",
    ),
    (
        "openai-key",
        &["sk-"],
        r"\bsk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_\-]{20,}",
    ),
    // Slack, Google API keys, npm and PyPI tokens.
    ("slack-token", &["xox"], r"\bxox[abposr]-[A-Za-z0-9\-]{10,}"),
    ("google-api-key", &["aiza"], r"\bAIza[0-9A-Za-z_\-]{35}"),
    ("npm-token", &["npm_"], r"\bnpm_[A-Za-z0-9]{36}"),
    ("pypi-token", &["pypi-"], r"\bpypi-[A-Za-z0-9_\-]{50,}"),
    // `Authorization: Bearer …` and `token …` headers.
    (
        "bearer",
        &["bearer", "token"],
        r"(?i)\b(?:bearer|token)\s+[A-Za-z0-9_\-\.=:/+]{16,}",
    ),
];

/// `user:password@` in a URL: the password is replaced, the user kept.
const URL_CREDENTIALS: (&[&str], &str) =
    (&["@"], r"(?i)\b([a-z][a-z0-9+.\-]*://[^/\s:@]*):[^@\s/]+@");

/// Compiled on first use, one slot per pattern (`None` inside: it did not compile).
fn compiled(i: usize) -> Option<&'static Regex> {
    static RE: [OnceLock<Option<Regex>>; PATTERNS.len() + 1] =
        [const { OnceLock::new() }; PATTERNS.len() + 1];
    let src = match PATTERNS.get(i) {
        Some((_, _, p)) => p,
        None => URL_CREDENTIALS.1,
    };
    RE.get(i)?.get_or_init(|| Regex::new(src).ok()).as_ref()
}

fn has_needle(lower: &str, needles: &[&str]) -> bool {
    needles.iter().any(|n| lower.contains(n))
}

/// `s` with every token-shaped value replaced.
pub fn redact(s: &str) -> String {
    let lower = s.to_ascii_lowercase();
    let mut out = s.to_string();
    if has_needle(&lower, URL_CREDENTIALS.0) && lower.contains("://") {
        if let Some(url) = compiled(PATTERNS.len()) {
            out = url
                .replace_all(&out, "$1:[REDACTED:password]@")
                .into_owned();
        }
    }
    for (i, (kind, needles, _)) in PATTERNS.iter().enumerate() {
        if !has_needle(&lower, needles) {
            continue;
        }
        if let Some(re) = compiled(i) {
            if re.is_match(&out) {
                out = re
                    .replace_all(&out, format!("[REDACTED:{kind}]").as_str())
                    .into_owned();
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_pattern_compiles() {
        for i in 0..=PATTERNS.len() {
            assert!(compiled(i).is_some(), "pattern {i}");
        }
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
