//! File-safe identifiers: rollout ids (R-RID-2), session ids, layout and
//! workspace names share one rule, because each of them ends up in a path.

use super::pytext::py_strip;
use sha2::{Digest, Sha256};
use std::fmt;

/// Lowercase hex SHA-256: how API keys are stored and history blobs named.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Equality that takes as long whichever byte differs (for secrets and signatures).
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    bool::from(subtle::ConstantTimeEq::ct_eq(a, b))
}

/// The SDK's message for an id that fails R-RID-2.
pub const ROLLOUT_ID_ERROR: &str =
    "Sandbox memory rollout ID must be a file-safe ID containing only letters, numbers, '.', '_', or '-'.";

/// `^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`
pub fn is_file_safe_id(s: &str) -> bool {
    let bytes = s.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 128
        && bytes[0].is_ascii_alphanumeric()
        && bytes[1..].iter().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// The schema of a name [`is_file_safe_id`] takes, as requests and paths give it.
pub struct FileSafeId;

impl schemars::JsonSchema for FileSafeId {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "FileSafeId".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"})
    }
}

/// Lower-case hex of `bytes` random bytes from the operating system, for
/// generated ids and secrets.
pub fn random_hex(bytes: usize) -> String {
    let mut buf = vec![0u8; bytes];
    getrandom::fill(&mut buf).expect("the operating system gives random bytes");
    hex::encode(buf)
}

macro_rules! file_safe_name {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
        #[serde(transparent)]
        pub struct $name(String);

        impl $name {
            /// Validates an untrimmed name; `None` when it is not file-safe.
            pub fn parse(raw: &str) -> Option<Self> {
                is_file_safe_id(raw).then(|| Self(raw.to_owned()))
            }

            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        /// A string in answers; what a request may name is the path rule above.
        impl schemars::JsonSchema for $name {
            fn inline_schema() -> bool {
                true
            }

            fn schema_name() -> std::borrow::Cow<'static, str> {
                stringify!($name).into()
            }

            fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
                schemars::json_schema!({"type": "string"})
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }
    };
}

file_safe_name!(
    /// One conversation; its file is `<sessions_dir>/<id>.jsonl`.
    RolloutId
);
file_safe_name!(
    /// A live session over one workspace, named by the caller or a UUID.
    SessionId
);
file_safe_name!(
    /// A directory inside the tenant's volume.
    WorkspaceName
);
file_safe_name!(
    /// A named memory configuration of a tenant.
    LayoutName
);

impl RolloutId {
    /// R-RID-2: the id is stripped (Python semantics) before it is checked.
    pub fn parse_client(raw: &str) -> Result<Self, &'static str> {
        Self::parse(py_strip(raw)).ok_or(ROLLOUT_ID_ERROR)
    }

    /// R-RID-1 step 4: a new conversation per run.
    pub fn generate() -> Self {
        Self(format!("run-{}", random_hex(16)))
    }

    /// R-RID-3.
    pub fn file_name(&self) -> String {
        format!("{}.jsonl", self.0)
    }

    /// R-RID-4: the id back from a file name; only the last suffix is removed.
    pub fn from_file_name(file_name: &str) -> Option<Self> {
        let name = py_strip(file_name.rsplit('/').next().unwrap_or(file_name));
        let stem = match name.rfind('.') {
            Some(dot) if dot > 0 => &name[..dot],
            _ => name,
        };
        Self::parse(stem)
    }
}

impl SessionId {
    pub fn generate() -> Self {
        Self(uuid::Uuid::new_v4().to_string())
    }
}

impl WorkspaceName {
    pub fn default_workspace() -> Self {
        Self("default".into())
    }
}

impl LayoutName {
    pub fn default_layout() -> Self {
        Self("default".into())
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn random_hex_is_that_many_random_bytes() {
        let (a, b) = (super::random_hex(32), super::random_hex(32));
        assert_eq!(a.len(), 64);
        assert!(a.bytes().all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()));
        assert_ne!(a, b);
        // Every bit can be set: a UUIDv4 fixes six of them.
        let seen =
            (0..64).map(|_| super::random_hex(16)).fold(0u128, |acc, h| acc | u128::from_str_radix(&h, 16).unwrap());
        assert_eq!(seen, u128::MAX);
    }

    use super::*;

    #[test]
    fn rollout_ids_follow_r_rid_2() {
        assert_eq!(RolloutId::parse_client("chat-session.2026_04").unwrap().file_name(), "chat-session.2026_04.jsonl");
        assert_eq!(RolloutId::parse_client("../chat-session"), Err(ROLLOUT_ID_ERROR));
        assert_eq!(RolloutId::parse_client(" "), Err(ROLLOUT_ID_ERROR));
        assert_eq!(RolloutId::parse_client(""), Err(ROLLOUT_ID_ERROR));
        assert_eq!(RolloutId::parse_client("  chat-1 \u{1f}").unwrap().as_str(), "chat-1");
        assert!(RolloutId::parse_client("user:42").is_err());
        assert!(RolloutId::parse_client("has space").is_err());
        assert!(RolloutId::parse_client(".hidden").is_err());
        assert!(RolloutId::parse_client("_x").is_err());
        assert!(RolloutId::parse_client("a/b").is_err());
        assert!(RolloutId::parse_client("é").is_err());
        let max = format!("a{}", "b".repeat(127));
        assert_eq!(RolloutId::parse_client(&max).unwrap().as_str().len(), 128);
        assert!(RolloutId::parse_client(&format!("{max}c")).is_err());
        assert_eq!(RolloutId::parse_client("a.b").unwrap().file_name(), "a.b.jsonl");
    }

    #[test]
    fn generated_rollout_ids_are_run_and_32_hex() {
        let id = RolloutId::generate();
        let hex = id.as_str().strip_prefix("run-").unwrap();
        assert_eq!(hex.len(), 32);
        assert!(hex.bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()));
        assert_ne!(RolloutId::generate(), id);
    }

    #[test]
    fn file_names_map_back_to_ids_by_the_last_suffix() {
        assert_eq!(RolloutId::from_file_name("a.b.jsonl").unwrap().as_str(), "a.b");
        assert_eq!(RolloutId::from_file_name("sessions/chat-1.jsonl").unwrap().as_str(), "chat-1");
        assert!(RolloutId::from_file_name("sessions/.jsonl").is_none());
    }
}
