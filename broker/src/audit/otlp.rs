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
pub fn export_pending(_store: &Store, url: &str, _opts: &Options) -> Result<Exported, OtlpError> {
    Err(OtlpError::Url {
        url: url.to_string(),
        why: "not implemented yet".into(),
    })
}

/// Export options.
#[derive(Debug, Clone)]
pub struct Options {
    /// The whole budget.
    pub deadline: std::time::Duration,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            deadline: std::time::Duration::from_secs(2),
        }
    }
}

/// Whether `url` is an endpoint this exporter can use.
pub fn check_url(url: &str) -> Result<(), OtlpError> {
    match url.starts_with("http://") {
        true => Ok(()),
        false => Err(OtlpError::Url {
            url: url.to_string(),
            why: "only http:// is supported".into(),
        }),
    }
}

/// Start `url`'s cursor at `seq` if it has none.
pub fn start_cursor(_store: &Store, _url: &str, _seq: u64) -> Result<(), OtlpError> {
    Ok(())
}
