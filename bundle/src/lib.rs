//! vetto's policy model and its translation into an OCI bundle.
//!
//! Data flows one way: a [`policy::PolicyFile`] per layer → [`resolve::resolve`] → a
//! [`resolve::Policy`] → with [`host::HostFacts`] and the [`secrets::scan`] →
//! [`translate::translate`] → an OCI `Spec` plus a [`plan::Plan`] for the in-container init.
//! [`container::harden`] hardens a foreign bundle for `vetto-shim` with the same sections.
//!
//! Nothing here mounts or starts anything, and one function writes
//! ([`trust::TrustStore::save`], the trust store). The host is read in these places only:
//! - [`host`]: [`host::HostFacts::gather`] (ids, environment, working directory, which system
//!   directories and HOME dotfiles exist), [`host::canonical_beyond`] (symlinks of a path's
//!   existing part), and for `vetto-shim` bind sources resolved once through `O_PATH`
//!   descriptors, namespace identities (`/proc/1/ns`, `/proc/self/ns`), account homes
//!   (`/etc/passwd`) and users' runtime directories (`/run/user`);
//! - [`secrets`]: the secret scan walks the project (and each bind) through descriptors;
//!   [`gitmeta`] reads repositories' `.git` files and configuration;
//! - `translate`'s policy paths (`filesystem.read`, `write`, `protected`, `scratch`, the HOME
//!   dotfiles' targets) are resolved and stat'ed on the host;
//! - [`container`]: besides the above, whether a bind source directory holds a daemon socket
//!   by name, and whether a `protected` or `scratch` path beneath a bind is really there;
//! - [`policy`], [`resolve`], [`trust`]: policy files and the trust store are read.

pub mod container;
pub mod error;
pub mod fsonly;
pub mod gitmeta;
pub mod host;
pub mod import;
pub mod listing;
pub mod plan;
pub mod policy;
pub mod presets;
pub mod profiles;
pub mod resolve;
pub mod secrets;
pub mod translate;
pub mod trust;
mod walkrecord;

pub use error::{PolicyError, TranslateError};

/// The JSON Schema of the policy file, for editor completion.
pub fn schema() -> String {
    let s = schemars::schema_for!(policy::PolicyFile);
    serde_json::to_string_pretty(&s).unwrap_or_default()
}
