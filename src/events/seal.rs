//! Webhook secrets at rest. A secret must be usable to sign, so it cannot
//! be hashed: it is sealed with ChaCha20-Poly1305 under the deployment's
//! secrets key (`MEMORYD_SECRETS_KEY`, else `<data dir>/secrets.key`, made
//! on first start with mode 0600), bound to its endpoint's id. A copy of
//! the database alone reveals no secret.

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use chacha20poly1305::aead::{Aead, Payload};
use chacha20poly1305::{ChaCha20Poly1305, KeyInit, Nonce};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use uuid::Uuid;

const SEALED_PREFIX: &str = "v1:";

#[derive(Debug, thiserror::Error)]
pub enum SealError {
    #[error("MEMORYD_SECRETS_KEY must be the base64 of 32 bytes")]
    BadKey,
    #[error("reading or making the secrets key file {0}: {1}")]
    KeyFile(String, std::io::Error),
    #[error("a stored webhook secret does not open with this secrets key")]
    Unreadable,
}

#[derive(Clone)]
pub struct SecretsKey {
    cipher: ChaCha20Poly1305,
}

impl std::fmt::Debug for SecretsKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SecretsKey(..)")
    }
}

impl SecretsKey {
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, SealError> {
        let cipher = ChaCha20Poly1305::new_from_slice(bytes).map_err(|_| SealError::BadKey)?;
        Ok(Self { cipher })
    }

    /// The configured key, else the data directory's key file (made now if
    /// it does not exist; replicas sharing the volume share it).
    pub fn load(configured: Option<&str>, data_dir: &Path) -> Result<Self, SealError> {
        if let Some(text) = configured.filter(|t| !t.trim().is_empty()) {
            let bytes = BASE64.decode(text.trim()).map_err(|_| SealError::BadKey)?;
            return Self::from_bytes(&bytes);
        }
        let path = data_dir.join("secrets.key");
        let failed = |e| SealError::KeyFile(path.display().to_string(), e);
        match std::fs::read(&path) {
            Ok(bytes) => Self::from_bytes(&bytes),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let mut bytes = [0u8; 32];
                getrandom::fill(&mut bytes).expect("the operating system's random source");
                match Self::publish_key_file(&path, &bytes) {
                    Ok(()) => Self::from_bytes(&bytes),
                    // Another replica made it first: use theirs.
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                        Self::from_bytes(&std::fs::read(&path).map_err(failed)?)
                    }
                    Err(e) => Err(failed(e)),
                }
            }
            Err(e) => Err(failed(e)),
        }
    }

    /// Writes the key beside `path` and links it into place, which fails if
    /// a key is there already: no replica ever reads half of a key.
    fn publish_key_file(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
        let staged = path.with_extension(format!("key.{}.tmp", Uuid::new_v4().simple()));
        let written = (|| {
            let mut file = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&staged)?;
            file.write_all(bytes)?;
            file.sync_all()?;
            std::fs::hard_link(&staged, path)
        })();
        let _ = std::fs::remove_file(&staged);
        written?;
        if let Some(dir) = path.parent() {
            std::fs::File::open(dir)?.sync_all()?;
        }
        Ok(())
    }

    pub fn seal(&self, webhook: Uuid, secret: &str) -> String {
        format!("{SEALED_PREFIX}{}", BASE64.encode(self.seal_bytes(webhook.as_bytes(), secret.as_bytes())))
    }

    pub fn open(&self, webhook: Uuid, sealed: &str) -> Result<String, SealError> {
        let bytes = BASE64
            .decode(sealed.strip_prefix(SEALED_PREFIX).ok_or(SealError::Unreadable)?)
            .map_err(|_| SealError::Unreadable)?;
        let opened = self.open_bytes(webhook.as_bytes(), &bytes).ok_or(SealError::Unreadable)?;
        String::from_utf8(opened).map_err(|_| SealError::Unreadable)
    }

    /// `message` sealed for `context`: unreadable without the key, and it
    /// opens under that context only (a nonce, then the ciphertext and tag).
    pub fn seal_bytes(&self, context: &[u8], message: &[u8]) -> Vec<u8> {
        let mut nonce = [0u8; 12];
        getrandom::fill(&mut nonce).expect("the operating system's random source");
        let sealed = self
            .cipher
            .encrypt(&Nonce::from(nonce), Payload { msg: message, aad: context })
            .expect("sealing a short message cannot fail");
        let mut out = nonce.to_vec();
        out.extend_from_slice(&sealed);
        out
    }

    /// What [`Self::seal_bytes`] sealed for `context`; `None` for anything else.
    pub fn open_bytes(&self, context: &[u8], sealed: &[u8]) -> Option<Vec<u8>> {
        let (nonce, body) = sealed.split_at_checked(12)?;
        let nonce: [u8; 12] = nonce.try_into().ok()?;
        self.cipher.decrypt(&Nonce::from(nonce), Payload { msg: body, aad: context }).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sealed_secret_opens_only_for_its_endpoint_and_key() {
        let key = SecretsKey::from_bytes(&[7u8; 32]).unwrap();
        let (webhook, other) = (Uuid::new_v4(), Uuid::new_v4());
        let sealed = key.seal(webhook, "whsec_abc");
        assert!(!sealed.contains("whsec_abc"));
        assert_ne!(sealed, key.seal(webhook, "whsec_abc"), "a fresh nonce each time");
        assert_eq!(key.open(webhook, &sealed).unwrap(), "whsec_abc");
        assert!(key.open(other, &sealed).is_err(), "bound to its endpoint");
        assert!(SecretsKey::from_bytes(&[8u8; 32]).unwrap().open(webhook, &sealed).is_err());
        assert!(key.open(webhook, "whsec_abc").is_err());
        assert!(SecretsKey::from_bytes(&[1u8; 16]).is_err());
    }

    #[test]
    fn the_key_file_is_made_once_and_private() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let first = SecretsKey::load(None, dir.path()).unwrap();
        let sealed = first.seal(Uuid::nil(), "whsec_x");
        let again = SecretsKey::load(None, dir.path()).unwrap();
        assert_eq!(again.open(Uuid::nil(), &sealed).unwrap(), "whsec_x");
        let mode = std::fs::metadata(dir.path().join("secrets.key")).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let configured = BASE64.encode([9u8; 32]);
        assert!(SecretsKey::load(Some(&configured), dir.path()).unwrap().open(Uuid::nil(), &sealed).is_err());
        assert!(matches!(SecretsKey::load(Some("short"), dir.path()), Err(SealError::BadKey)));
    }
}
