//! The notes of `vetto policy explain`: one [`ExplainItem`] per item of the bundle, with where
//! it came from; the sections add theirs, this file the closing ones.

use serde::Serialize;

use crate::host::HostFacts;
use crate::resolve::{Policy, Source};

use super::Builder;

/// One line of `vetto policy explain`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ExplainItem {
    /// mount, mask, protected, landlock, seccomp, env, limit, namespace, network, note.
    pub category: String,
    /// The path, name or syscall.
    pub item: String,
    /// What is done to it.
    pub detail: String,
    /// Where it came from.
    pub source: String,
}

impl Builder {
    pub(super) fn note(
        &mut self,
        category: &str,
        item: impl ToString,
        detail: impl ToString,
        source: impl ToString,
    ) {
        if self.quiet {
            return;
        }
        self.explain.push(ExplainItem {
            category: category.into(),
            item: item.to_string(),
            detail: detail.to_string(),
            source: source.to_string(),
        });
    }
}

/// The namespaces, all new.
pub(super) fn namespaces(b: &mut Builder) {
    for ns in ["user", "mount", "pid", "network", "ipc", "uts", "cgroup"] {
        b.note("namespace", ns, "new", Source::Builtin("layout".into()));
    }
}

/// Who the command runs as, and the approvals mode.
pub(super) fn identity(b: &mut Builder, policy: &Policy, facts: &HostFacts) {
    b.note(
        "process",
        "identity",
        format!(
            "uid {} gid {} inside, mapped to the caller",
            facts.uid, facts.gid
        ),
        Source::Builtin("layout".into()),
    );
    b.note(
        "approvals",
        "mode",
        format!("{:?}", policy.approvals.value).to_lowercase(),
        &policy.approvals.source,
    );
}
