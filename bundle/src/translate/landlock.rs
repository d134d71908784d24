//! The Landlock section: the access a writable bind gets under the policy's project access
//! (shared by `vetto run` and `vetto-shim`), and the notes of `vetto run`'s rules.

use crate::plan::FsAccess;
use crate::policy::ProjectAccess;
use crate::resolve::Source;

use super::{Builder, ExplainItem};

/// The Landlock access of a writable bind (the project, or a host bind in a container) under
/// the policy's `project` access; `None` when the policy gives no write access.
pub fn write_access(project: ProjectAccess) -> Option<FsAccess> {
    match project {
        ProjectAccess::Read => None,
        // The overlay: the sandbox's writes go to the change set, not to the project.
        ProjectAccess::Write | ProjectAccess::Review => Some(FsAccess::ReadWrite),
        ProjectAccess::WriteNoDelete => Some(FsAccess::ReadWriteNoDelete),
    }
}

/// One note for each rule.
pub(super) fn note(b: &mut Builder) {
    if b.quiet {
        return;
    }
    let src = Source::Builtin("layout".into()).to_string();
    for r in &b.rules {
        b.explain.push(ExplainItem {
            category: "landlock".into(),
            item: r.path.display().to_string(),
            detail: format!("{:?}", r.access),
            source: src.clone(),
        });
    }
}
