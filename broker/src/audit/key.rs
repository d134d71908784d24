//! The checkpoint key: an Ed25519 key made on first use, mode 0600, in the user's state
//! directory (root's for `vetto-shim`). It never enters a sandbox: the directory it lives in is
//! masked in every `vetto run` sandbox that could otherwise see it, and `vetto-shim` refuses
//! bundles that bind it.
//!
//! Signed checkpoints ([`Checkpoint`]) pin the chain's head (sequence number and hash) at a
//! moment: anyone without this key who edits, truncates or replaces the store cannot make a
//! checkpoint that verifies.

use std::io::{Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use ed25519_dalek::{Signature, Signer, SigningKey, Verifier, VerifyingKey};
use serde::{Deserialize, Serialize};

use super::AuditError;

/// The key file's contents: a label line, then the 32-byte seed in hex.
const LABEL: &str = "vetto-audit-ed25519-seed-v1";

/// Load the key at `path`, or make it (and its directory, 0700) if there is none. A key that
/// is a symlink, not a regular file, not the caller's, or readable by others is refused.
pub fn load_or_create(path: &Path) -> Result<SigningKey, AuditError> {
    let err = |what: &str, source: std::io::Error| AuditError::Key {
        path: path.to_path_buf(),
        what: what.to_string(),
        source: Some(source),
    };
    match load(path) {
        Ok(k) => return Ok(k),
        Err(AuditError::Key {
            source: Some(e), ..
        }) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    if let Some(dir) = path.parent() {
        super::store::private_dir(dir)?;
    }
    let mut seed = [0u8; 32];
    let mut tag = [0u8; 8];
    getrandom::fill(&mut seed)
        .and_then(|()| getrandom::fill(&mut tag))
        .map_err(|e| err("generating", std::io::Error::other(e.to_string())))?;
    // Written whole under a private name, then linked into place: several sessions starting
    // at once on a new machine never see a half-written key, and the first link wins.
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = path.with_file_name(format!(".{name}.{}.tmp", hex::encode(tag)));
    let written = (|| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&tmp)?;
        f.write_all(format!("{LABEL}\n{}\n", hex::encode(seed)).as_bytes())?;
        f.sync_all()?;
        std::fs::hard_link(&tmp, path)
    })();
    let _ = std::fs::remove_file(&tmp);
    match written {
        Ok(()) => {}
        // Another session made it first: use that one.
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => return load(path),
        Err(e) => return Err(err("creating", e)),
    }
    let key = SigningKey::from_bytes(&seed);
    let public = public_path(path);
    let ptmp = public.with_file_name(format!(".audit.pub.{}.tmp", hex::encode(tag)));
    if std::fs::write(
        &ptmp,
        format!("{}\n", hex::encode(key.verifying_key().as_bytes())),
    )
    .and_then(|()| std::fs::rename(&ptmp, &public))
    .is_err()
    {
        let _ = std::fs::remove_file(&ptmp);
    }
    Ok(key)
}

/// Load an existing key.
pub fn load(path: &Path) -> Result<SigningKey, AuditError> {
    let bad = |what: String| AuditError::Key {
        path: path.to_path_buf(),
        what,
        source: None,
    };
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .map_err(|e| AuditError::Key {
            path: path.to_path_buf(),
            what: "opening".into(),
            source: Some(e),
        })?;
    let meta = f.metadata().map_err(|e| AuditError::Key {
        path: path.to_path_buf(),
        what: "stat".into(),
        source: Some(e),
    })?;
    if !meta.is_file() {
        return Err(bad("is not a regular file".into()));
    }
    let euid = nix::unistd::geteuid().as_raw();
    if meta.uid() != euid {
        return Err(bad(format!("belongs to uid {}, not to {euid}", meta.uid())));
    }
    if meta.mode() & 0o077 != 0 {
        return Err(bad(format!(
            "has mode {:o}: others may read it (it must be 0600)",
            meta.mode() & 0o777
        )));
    }
    let mut text = String::new();
    f.read_to_string(&mut text).map_err(|e| AuditError::Key {
        path: path.to_path_buf(),
        what: "reading".into(),
        source: Some(e),
    })?;
    let mut lines = text.lines();
    if lines.next() != Some(LABEL) {
        return Err(bad("is not a vetto audit key".into()));
    }
    let seed: [u8; 32] = lines
        .next()
        .and_then(|h| hex::decode(h.trim()).ok())
        .and_then(|b| b.try_into().ok())
        .ok_or_else(|| bad("holds no valid seed".into()))?;
    Ok(SigningKey::from_bytes(&seed))
}

/// Where the public half is written next to the key (`audit.key` → `audit.pub`).
pub fn public_path(key: &Path) -> PathBuf {
    key.with_extension("pub")
}

/// Read a public key file (hex, as written next to the key).
pub fn load_public(path: &Path) -> Result<VerifyingKey, AuditError> {
    let text = std::fs::read_to_string(path).map_err(|e| AuditError::Key {
        path: path.to_path_buf(),
        what: "reading the public key".into(),
        source: Some(e),
    })?;
    parse_public(text.trim()).ok_or_else(|| AuditError::Key {
        path: path.to_path_buf(),
        what: "is not an Ed25519 public key in hex".into(),
        source: None,
    })
}

/// An Ed25519 public key from hex.
pub fn parse_public(hex_key: &str) -> Option<VerifyingKey> {
    let bytes: [u8; 32] = hex::decode(hex_key).ok()?.try_into().ok()?;
    VerifyingKey::from_bytes(&bytes).ok()
}

/// A signed statement that the store `store_id`'s chain had `hash` at `seq` at `time`. The
/// store keeps them in its `checkpoints` table; the latest is also the head file beside it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Checkpoint {
    /// The store's random id (from its `meta` table).
    pub store_id: String,
    /// The chain position.
    pub seq: u64,
    /// The record's hash (hex).
    pub hash: String,
    /// When it was signed (RFC 3339 UTC).
    pub time: String,
    /// Ed25519 signature (hex) over [`Checkpoint::message`].
    pub signature: String,
}

impl Checkpoint {
    /// The signed bytes.
    pub fn message(store_id: &str, seq: u64, hash: &str, time: &str) -> Vec<u8> {
        format!("vetto-audit-checkpoint-v1\n{store_id}\n{seq}\n{hash}\n{time}\n").into_bytes()
    }

    /// Sign a checkpoint.
    pub fn sign(key: &SigningKey, store_id: &str, seq: u64, hash: &str, time: &str) -> Self {
        let sig = key.sign(&Self::message(store_id, seq, hash, time));
        Checkpoint {
            store_id: store_id.to_string(),
            seq,
            hash: hash.to_string(),
            time: time.to_string(),
            signature: hex::encode(sig.to_bytes()),
        }
    }

    /// Whether `key` signed it.
    pub fn verifies(&self, key: &VerifyingKey) -> bool {
        let Some(sig) = hex::decode(&self.signature)
            .ok()
            .and_then(|b| <[u8; 64]>::try_from(b).ok())
        else {
            return false;
        };
        key.verify(
            &Self::message(&self.store_id, self.seq, &self.hash, &self.time),
            &Signature::from_bytes(&sig),
        )
        .is_ok()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // Tests: a panic is the failure report.
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn made_once_0600_and_reloaded() {
        let d = crate::private_tempdir();
        let p = d.path().join("state/audit.key");
        let k1 = load_or_create(&p).unwrap();
        let k2 = load_or_create(&p).unwrap();
        assert_eq!(k1.to_bytes(), k2.to_bytes());
        let mode = std::fs::metadata(&p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let dmode = std::fs::metadata(p.parent().unwrap())
            .unwrap()
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(dmode, 0o700);
        let public = load_public(&public_path(&p)).unwrap();
        assert_eq!(public, k1.verifying_key());
    }

    #[test]
    fn sessions_racing_to_make_the_key_all_get_the_same_whole_key() {
        for _ in 0..20 {
            let d = crate::private_tempdir();
            let p = d.path().join("state/audit.key");
            let threads: Vec<_> = (0..8)
                .map(|_| {
                    let p = p.clone();
                    std::thread::spawn(move || load_or_create(&p).map(|k| k.to_bytes()))
                })
                .collect();
            let keys: Vec<[u8; 32]> = threads
                .into_iter()
                .map(|t| t.join().unwrap().unwrap())
                .collect();
            assert!(keys.iter().all(|k| *k == keys[0]));
            let left: Vec<_> = std::fs::read_dir(p.parent().unwrap())
                .unwrap()
                .map(|e| e.unwrap().file_name())
                .collect();
            assert_eq!(left.len(), 2, "only the key and its public half: {left:?}");
        }
    }

    #[test]
    fn a_readable_or_symlinked_key_is_refused() {
        let d = crate::private_tempdir();
        let p = d.path().join("audit.key");
        load_or_create(&p).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = load(&p).unwrap_err().to_string();
        assert!(e.contains("others may read it"), "{e}");
        let l = d.path().join("link.key");
        std::os::unix::fs::symlink(&p, &l).unwrap();
        assert!(load(&l).is_err());
    }

    #[test]
    fn checkpoints_verify_only_with_their_key_and_content() {
        let k = SigningKey::from_bytes(&[7u8; 32]);
        let other = SigningKey::from_bytes(&[8u8; 32]);
        let c = Checkpoint::sign(&k, "store", 5, "ab", "t");
        assert!(c.verifies(&k.verifying_key()));
        assert!(!c.verifies(&other.verifying_key()));
        let mut moved = c.clone();
        moved.seq = 4;
        assert!(!moved.verifies(&k.verifying_key()));
    }
}
