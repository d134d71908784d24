//! The trust store: SHA-256 digests of policy files the operator reviewed with `vetto trust`,
//! kept outside the project so the sandbox cannot vouch for its own policy.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::error::PolicyError;

/// Path → hex SHA-256 of the contents that were reviewed.
#[derive(Debug, Clone)]
pub struct TrustStore {
    path: PathBuf,
    entries: BTreeMap<PathBuf, String>,
}

/// The SHA-256 of bytes, in hex.
pub fn sha256_hex(content: &[u8]) -> String {
    Sha256::digest(content)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The SHA-256 of a file, in hex.
pub fn sha256_file(path: &Path) -> Result<String, std::io::Error> {
    let mut f = std::fs::File::open(path)?;
    let mut h = Sha256::new();
    let mut buf = [0u8; 8192];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(h.finalize().iter().map(|b| format!("{b:02x}")).collect())
}

impl TrustStore {
    /// A store with no entries that will be saved at `path`.
    pub fn empty(path: PathBuf) -> Self {
        TrustStore {
            path,
            entries: BTreeMap::new(),
        }
    }

    /// Load the store; a missing file is an empty store.
    pub fn load(path: &Path) -> Result<Self, PolicyError> {
        let entries = match std::fs::read_to_string(path) {
            Ok(t) => serde_json::from_str(&t).map_err(|source| PolicyError::TrustStoreFormat {
                path: path.to_path_buf(),
                source,
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => BTreeMap::new(),
            Err(source) => {
                return Err(PolicyError::TrustStoreIo {
                    path: path.to_path_buf(),
                    source,
                })
            }
        };
        Ok(TrustStore {
            path: path.to_path_buf(),
            entries,
        })
    }

    /// Where the store lives.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Is this file trusted with exactly these contents (the bytes that were parsed)?
    pub fn is_trusted_content(&self, file: &Path, content: &[u8]) -> bool {
        self.entries
            .get(file)
            .is_some_and(|want| *want == sha256_hex(content))
    }

    /// Record a file's current digest. Returns the digest.
    pub fn record(&mut self, file: &Path) -> Result<String, PolicyError> {
        let canon = file.canonicalize().map_err(|source| PolicyError::Read {
            path: file.to_path_buf(),
            source,
        })?;
        let d = sha256_file(&canon).map_err(|source| PolicyError::Read {
            path: canon.clone(),
            source,
        })?;
        self.entries.insert(canon, d.clone());
        Ok(d)
    }

    /// Write the store atomically (temp file + rename), mode 0600.
    pub fn save(&self) -> Result<(), PolicyError> {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let err = |reason: String| PolicyError::TrustStore {
            path: self.path.clone(),
            reason,
        };
        let dir = self
            .path
            .parent()
            .ok_or_else(|| err("no parent directory".into()))?;
        let io = |source: std::io::Error| PolicyError::TrustStoreIo {
            path: self.path.clone(),
            source,
        };
        std::fs::create_dir_all(dir).map_err(io)?;
        let tmp = dir.join(format!(".trusted.{}.tmp", std::process::id()));
        let text = serde_json::to_string_pretty(&self.entries).map_err(|source| {
            PolicyError::TrustStoreFormat {
                path: self.path.clone(),
                source,
            }
        })?;
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)
            .map_err(io)?;
        f.write_all(text.as_bytes()).map_err(io)?;
        std::fs::rename(&tmp, &self.path).map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            io(e)
        })
    }
}
