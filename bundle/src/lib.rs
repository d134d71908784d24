//! vetto's policy model and its translation into an OCI bundle.
//!
//! Data flows one way: a [`policy::PolicyFile`] per layer → [`resolve::resolve`] → a
//! [`resolve::Policy`] → with [`host::HostFacts`] and the [`secrets::scan`] →
//! [`translate::translate`] → an OCI `Spec` plus a [`plan::Plan`] for the in-container init.
//! Nothing here makes a syscall beyond reading host facts.

pub mod container;
pub mod error;
pub mod gitmeta;
pub mod host;
pub mod plan;
pub mod policy;
pub mod profiles;
pub mod resolve;
pub mod secrets;
pub mod translate;
pub mod trust;

pub use error::{PolicyError, TranslateError};

/// The JSON Schema of the policy file, for editor completion.
pub fn schema() -> String {
    let s = schemars::schema_for!(policy::PolicyFile);
    serde_json::to_string_pretty(&s).unwrap_or_default()
}
