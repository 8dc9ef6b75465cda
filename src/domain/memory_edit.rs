//! A running agent's edit of its memory (SPEC §2.10), as the route takes it
//! and a job stores it: a V4A patch or the commands of Anthropic's memory
//! tool, with preconditions and who asked. Applying it is `tools::edit`.

use super::ids::{RolloutId, SessionId};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Component, Path};

/// One command of Anthropic's memory tool. Paths are the caller's until
/// the edit maps them onto the memory folder.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "command", rename_all = "snake_case", deny_unknown_fields)]
pub enum MemoryCommand {
    /// Writes a file, replacing one that exists.
    Create { path: String, file_text: String },
    /// Replaces the one occurrence of `old_str`.
    StrReplace { path: String, old_str: String, new_str: String },
    /// Inserts text after line `insert_line` (0: at the top).
    Insert { path: String, insert_line: u64, insert_text: String },
    /// Deletes a file, or every file under a folder.
    Delete { path: String },
    /// Moves a file, or every file under a folder, to a path that is free.
    Rename { old_path: String, new_path: String },
}

impl MemoryCommand {
    /// Every path the command names, for mapping and checking.
    pub fn paths_mut(&mut self) -> Vec<&mut String> {
        match self {
            Self::Create { path, .. }
            | Self::StrReplace { path, .. }
            | Self::Insert { path, .. }
            | Self::Delete { path } => vec![path],
            Self::Rename { old_path, new_path } => vec![old_path, new_path],
        }
    }
}

/// Bodies above this are refused (413).
pub const MAX_EDIT_BYTES: usize = 1 << 20;
const MAX_OPERATIONS: usize = 1000;
const MAX_REASON_CHARS: usize = 1000;

/// What an edit changes: a V4A patch or the memory tool's commands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EditChange {
    Patch(String),
    Operations(Vec<MemoryCommand>),
}

/// One edit as requested; paths as the caller wrote them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryEdit {
    pub change: EditChange,
    /// Path → the SHA-256 (hex) its content must have; `None`: it must not exist.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub expect: BTreeMap<String, Option<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// Why an edit is refused; each is a problem of its own (§8).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EditRefusal {
    /// The request is malformed (400 `invalid_request`).
    InvalidRequest(String),
    /// The change cannot apply, or writes where it may not (422 `invalid_patch`).
    InvalidPatch(String),
    /// An `expect` precondition does not hold (409 `memory_changed`).
    MemoryChanged(String),
}

impl EditRefusal {
    /// How a failed edit job records why, so that the route can answer the
    /// same problem for it.
    pub fn to_job_error(&self) -> String {
        match self {
            Self::InvalidRequest(m) | Self::InvalidPatch(m) => format!("invalid_patch: {m}"),
            Self::MemoryChanged(m) => format!("memory_changed: {m}"),
        }
    }

    /// The refusal a failed edit job's error records, if it is one.
    pub fn from_job_error(error: &str) -> Option<Self> {
        if let Some(m) = error.strip_prefix("invalid_patch: ") {
            return Some(Self::InvalidPatch(m.to_owned()));
        }
        error.strip_prefix("memory_changed: ").map(|m| Self::MemoryChanged(m.to_owned()))
    }
}

fn invalid(message: impl Into<String>) -> EditRefusal {
    EditRefusal::InvalidPatch(message.into())
}

impl MemoryEdit {
    /// The route's body (SPEC §2.10): `patch` or `operations`, with
    /// optional `expect`, `session_id`, `rollout_id` and `reason`.
    pub fn from_body(body: Value) -> Result<Self, EditRefusal> {
        let Value::Object(mut fields) = body else {
            return Err(invalid("The body must be a JSON object with \"patch\" or \"operations\"."));
        };
        const KNOWN: [&str; 6] = ["patch", "operations", "expect", "session_id", "rollout_id", "reason"];
        if let Some(unknown) = fields.keys().find(|k| !KNOWN.contains(&k.as_str())) {
            return Err(invalid(format!("Unknown field {unknown:?}; an edit takes {}.", KNOWN.join(", "))));
        }
        let change = match (fields.remove("patch"), fields.remove("operations")) {
            (Some(Value::String(patch)), None) => EditChange::Patch(patch),
            (None, Some(Value::Array(items))) => EditChange::Operations(parse_operations(items)?),
            (Some(_), Some(_)) => return Err(invalid("Give either \"patch\" or \"operations\", not both.")),
            (Some(_), None) => return Err(invalid("\"patch\" must be a string (*** Begin Patch … *** End Patch).")),
            (None, Some(_)) => return Err(invalid("\"operations\" must be a list of commands.")),
            (None, None) => return Err(invalid("An edit needs \"patch\" or \"operations\".")),
        };
        let expect = match fields.remove("expect") {
            None | Some(Value::Null) => BTreeMap::new(),
            Some(Value::Object(map)) => map.into_iter().map(expected_hash).collect::<Result<_, _>>()?,
            Some(_) => return Err(invalid("\"expect\" must map paths to SHA-256 hex digests.")),
        };
        let text = |fields: &mut serde_json::Map<String, Value>, name: &str| match fields.remove(name) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(_) => Err(EditRefusal::InvalidRequest(format!("{name} must be a string"))),
        };
        let session_id = text(&mut fields, "session_id")?;
        let rollout_id = text(&mut fields, "rollout_id")?.map(|r| r.trim().to_owned());
        let reason = text(&mut fields, "reason")?;
        if let Some(s) = &session_id
            && SessionId::parse(s).is_none()
        {
            return Err(EditRefusal::InvalidRequest(format!("session_id is not a valid session id: {s:?}")));
        }
        if let Some(r) = &rollout_id
            && RolloutId::parse(r).is_none()
        {
            return Err(EditRefusal::InvalidRequest(format!("rollout_id is not a valid rollout id: {r:?}")));
        }
        if reason.as_ref().is_some_and(|r| r.chars().count() > MAX_REASON_CHARS) {
            return Err(EditRefusal::InvalidRequest(format!("reason must be at most {MAX_REASON_CHARS} characters")));
        }
        Ok(Self { change, expect, session_id, rollout_id, reason })
    }
}

fn parse_operations(items: Vec<Value>) -> Result<Vec<MemoryCommand>, EditRefusal> {
    if items.is_empty() || items.len() > MAX_OPERATIONS {
        return Err(invalid(format!("\"operations\" must hold 1 to {MAX_OPERATIONS} commands.")));
    }
    items
        .into_iter()
        .enumerate()
        .map(|(i, item)| {
            serde_json::from_value(item).map_err(|e| {
                invalid(format!("operations[{i}]: {e} (commands: create, str_replace, insert, delete, rename)"))
            })
        })
        .collect()
}

fn expected_hash((path, want): (String, Value)) -> Result<(String, Option<String>), EditRefusal> {
    match want {
        Value::Null => Ok((path, None)),
        Value::String(hash) if hash.len() == 64 && hash.bytes().all(|b| b.is_ascii_hexdigit()) => {
            Ok((path, Some(hash.to_ascii_lowercase())))
        }
        _ => Err(invalid(format!("expect[{path:?}] must be a SHA-256 hex digest (or null: the file must not exist)"))),
    }
}

/// A path the caller gave, relative to the memory folder (`MEMORY.md`) or
/// spelled as the instructions do (`memories/MEMORY.md`); `None` when it
/// is absolute, climbs out or is empty.
pub fn memory_relative(memories: &str, raw: &str) -> Option<String> {
    if raw.chars().any(char::is_control) {
        return None;
    }
    let normalized = normalize(raw)?;
    match normalized.strip_prefix(memories) {
        Some("") => None,
        Some(rest) if rest.starts_with('/') => Some(rest[1..].to_owned()),
        _ => Some(normalized),
    }
}

/// Normalised relative path: `a//b/./c` → `a/b/c`; `None` for absolute paths,
/// any `..`, or nothing at all.
pub fn normalize(path: &str) -> Option<String> {
    let mut parts = Vec::new();
    for component in Path::new(path).components() {
        match component {
            Component::Normal(p) => parts.push(p.to_str()?.to_owned()),
            Component::CurDir => {}
            _ => return None,
        }
    }
    (!parts.is_empty()).then(|| parts.join("/"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn paths_with_or_without_the_folder_prefix() {
        assert_eq!(memory_relative("memories", "MEMORY.md").as_deref(), Some("MEMORY.md"));
        assert_eq!(memory_relative("memories", "memories/MEMORY.md").as_deref(), Some("MEMORY.md"));
        assert_eq!(memory_relative("memories", "./memories//skills/a.md").as_deref(), Some("skills/a.md"));
        assert_eq!(memory_relative("team/memory", "team/memory/x.md").as_deref(), Some("x.md"));
        assert_eq!(memory_relative("memories", "memories-old/x.md").as_deref(), Some("memories-old/x.md"));
        for bad in ["/etc/passwd", "../x", "a/../../b", "", "memories", "a\u{0}b", "a\nb"] {
            assert_eq!(memory_relative("memories", bad), None, "{bad:?}");
        }
    }

    #[test]
    fn bodies_are_checked_before_anything_runs() {
        let ok = MemoryEdit::from_body(json!({"patch": "*** Begin Patch\n*** End Patch", "reason": "fix"})).unwrap();
        assert_eq!(ok.reason.as_deref(), Some("fix"));
        let refused = |body: Value| MemoryEdit::from_body(body).unwrap_err();
        assert!(matches!(refused(json!([])), EditRefusal::InvalidPatch(_)));
        assert!(matches!(refused(json!({})), EditRefusal::InvalidPatch(_)));
        assert!(matches!(refused(json!({"patch": "x", "operations": []})), EditRefusal::InvalidPatch(_)));
        assert!(matches!(refused(json!({"operations": []})), EditRefusal::InvalidPatch(_)));
        assert!(matches!(refused(json!({"operations": [{"command": "view"}]})), EditRefusal::InvalidPatch(_)));
        assert!(matches!(refused(json!({"patch": "x", "nonsense": 1})), EditRefusal::InvalidPatch(_)));
        assert!(matches!(refused(json!({"patch": "x", "expect": {"a": "not-hex"}})), EditRefusal::InvalidPatch(_)));
        assert!(matches!(refused(json!({"patch": "x", "session_id": "bad id"})), EditRefusal::InvalidRequest(_)));
        assert!(matches!(refused(json!({"patch": "x", "rollout_id": "../x"})), EditRefusal::InvalidRequest(_)));
        let refusal = EditRefusal::MemoryChanged("MEMORY.md has changed".into());
        assert_eq!(EditRefusal::from_job_error(&refusal.to_job_error()), Some(refusal));
        assert_eq!(EditRefusal::from_job_error("reading failed"), None);
    }

    #[test]
    fn commands_parse_with_the_memory_tools_names() {
        let command = |json: &str| serde_json::from_str::<MemoryCommand>(json);
        assert_eq!(
            command(r#"{"command":"str_replace","path":"p","old_str":"a","new_str":"b"}"#).unwrap(),
            MemoryCommand::StrReplace { path: "p".into(), old_str: "a".into(), new_str: "b".into() }
        );
        assert!(command(r#"{"command":"view","path":"p"}"#).is_err());
        assert!(command(r#"{"command":"delete","path":"p","extra":1}"#).is_err());
        assert!(command(r#"{"command":"insert","path":"p","insert_line":-1,"insert_text":"x"}"#).is_err());
    }
}
