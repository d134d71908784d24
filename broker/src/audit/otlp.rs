//! The OTLP/HTTP logs exporter (being written: see the module's functions).

use thiserror::Error;

use super::store::Store;

/// Why an export did not complete.
#[derive(Debug, Error)]
pub enum OtlpError {
    /// The endpoint URL is not one this exporter can use.
    #[error("endpoint {url:?}: {why}")]
    Url {
        /// The URL.
        url: String,
        /// What is wrong.
        why: String,
    },
}

/// What an export did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Exported {
    /// Records the collector acknowledged in this call.
    pub sent: u64,
    /// Records still waiting (the collector was down or refused).
    pub pending: u64,
}

/// Send every record of `store` the collector at `url` has not acknowledged yet.
pub fn export_pending(_store: &Store, url: &str) -> Result<Exported, OtlpError> {
    Err(OtlpError::Url {
        url: url.to_string(),
        why: "not implemented yet".into(),
    })
}
