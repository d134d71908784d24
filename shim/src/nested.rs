//! Nested sandboxes: `vetto run` inside a vetto sandbox.
//!
//! A sandbox cannot create FULL's namespaces (its seccomp filter refuses the mounts), so a
//! nested `vetto run` picks FS-ONLY by itself, and Landlock and seccomp stack: whatever the
//! nested policy says, the kernel keeps enforcing the parent's domain and filter beneath it.
//! On top of that, the parent tells its sandbox what its policy was (a read-only file, named by
//! [`PARENT_POLICY_ENV`]) so that a nested policy asking for more than its parent is refused
//! up front with a list of what would exceed the ceiling, instead of failing piecemeal. That
//! list is a convenience: an agent can unset the variable, and the kernel still enforces the
//! ceiling.

use std::path::Path;

use anyhow::{bail, Context, Result};
use vetto_bundle::resolve::{widenings, Policy};

/// Names the parent's resolved policy (JSON) inside a sandbox.
pub const PARENT_POLICY_ENV: &str = "VETTO_PARENT_POLICY";

/// Where a FULL parent binds its policy, read-only, inside the sandbox.
pub const PARENT_POLICY_PATH: &str = "/.vetto/parent-policy.json";

/// The parent's policy, when this `vetto run` is inside a vetto sandbox that said so. A file
/// named but unreadable or malformed is an error: the ceiling cannot be judged.
pub fn parent() -> Result<Option<Policy>> {
    let Some(path) = std::env::var_os(PARENT_POLICY_ENV) else {
        return Ok(None);
    };
    let path = Path::new(&path);
    let text = std::fs::read(path).with_context(|| {
        format!(
            "nested sandbox: {PARENT_POLICY_ENV} names {}, which cannot be read",
            path.display()
        )
    })?;
    let p: Policy = serde_json::from_slice(&text).with_context(|| {
        format!(
            "nested sandbox: the parent's policy in {} is malformed",
            path.display()
        )
    })?;
    Ok(Some(p))
}

/// Refuse a nested policy that asks for more than its parent. The tier is not compared: a
/// nested sandbox is FS-ONLY stacked on the parent's tier, never weaker than the parent.
pub fn check_ceiling(parent: &Policy, child: &Policy) -> Result<()> {
    let over: Vec<String> = widenings(parent, child)
        .into_iter()
        .filter(|w| !w.contains("sandbox.require"))
        .collect();
    if !over.is_empty() {
        bail!(
            "nested sandbox: this policy asks for more than the sandbox it runs in allows (its ceiling); the command does not run:\n  - {}",
            over.join("\n  - ")
        );
    }
    Ok(())
}

/// The parent's policy as the file a sandbox reads.
pub fn serialize(policy: &Policy) -> Result<Vec<u8>> {
    serde_json::to_vec(policy).context("nested sandbox: serialising the policy")
}
