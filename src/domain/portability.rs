//! Moving a workspace out (SPEC §2.7): which of its files an export holds,
//! and how much of each, and the manifest that describes them. No tenant
//! id, key, absolute path or host name goes into either.

use crate::domain::ids::{LayoutName, RolloutId};
use crate::domain::index::RawMemoryRecord;
use crate::domain::layout::StoredLayout;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Value, json};
use std::collections::HashMap;

/// A rollout as an export lists it: its committed length is what the
/// archive holds of its file.
#[derive(Debug, Clone, PartialEq)]
pub struct ExportedRollout {
    pub layout: String,
    pub rollout_id: String,
    pub rollout_path: String,
    pub committed_len: u64,
    pub segment_count: i64,
    pub updated_at: Option<String>,
    pub terminal_state: Option<String>,
}

/// What the database holds of a workspace, read in one snapshot: the rest
/// of an export is its files.
#[derive(Debug, Clone, Default)]
pub struct ExportView {
    pub rollouts: Vec<ExportedRollout>,
    /// `(layout, index row)`.
    pub raw_memories: Vec<(String, RawMemoryRecord)>,
    /// `(layout, the last successful selection)`.
    pub selections: Vec<(String, Value)>,
}

/// The manifest's name at the archive's root.
pub const MANIFEST_NAME: &str = "memoryd-export.json";
/// What `format` says, and the version of the manifest's shape.
pub const FORMAT: &str = "memoryd-export";
pub const FORMAT_VERSION: u64 = 1;

/// How much of a file under the workspace an export holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Take {
    /// All of it.
    Whole,
    /// A rollout: its committed prefix.
    Prefix(u64),
    /// None: a rollout file no append has committed yet (or not memoryd's).
    Nothing,
}

/// What of `relative` (a path under the workspace) the export takes:
/// rollouts up to their committed length; in a layout's sessions folder, a
/// `.jsonl` file with no committed rollout is left out; anything else whole.
pub fn take(relative: &str, rollouts: &HashMap<&str, &ExportedRollout>, layouts: &[StoredLayout]) -> Take {
    if let Some(rollout) = rollouts.get(relative) {
        return Take::Prefix(rollout.committed_len);
    }
    let uncommitted_rollout = layouts.iter().any(|l| {
        relative
            .strip_prefix(l.layout.sessions_dir.normalized.as_str())
            .and_then(|rest| rest.strip_prefix('/'))
            .is_some_and(|name| !name.contains('/') && name.ends_with(".jsonl"))
    });
    if uncommitted_rollout { Take::Nothing } else { Take::Whole }
}

/// `memoryd-export.json`: the tenant's layouts' configs, and per layout the
/// rollouts the archive holds (with their committed lengths), the raw-memory
/// index and the last selection. `rollouts` are those whose file is in the archive.
pub fn manifest(workspace: &str, layouts: &[StoredLayout], view: &ExportView, rollouts: &[&ExportedRollout]) -> Value {
    let layout_entries: Vec<Value> = layouts
        .iter()
        .map(|l| {
            let name = l.name.as_str();
            let raw_memories: Vec<Value> = view
                .raw_memories
                .iter()
                .filter(|(layout, _)| layout == name)
                .map(|(_, raw)| {
                    json!({
                        "rollout_id": raw.rollout_id.as_str(),
                        "updated_at": raw.updated_at,
                        "rollout_path": raw.rollout_path,
                        "rollout_summary_file": raw.rollout_summary_file,
                        "terminal_state": raw.terminal_state,
                        "extracted_len": raw.extracted_len,
                    })
                })
                .collect();
            let layout_rollouts: Vec<Value> = rollouts
                .iter()
                .filter(|r| r.layout == name)
                .map(|r| {
                    json!({
                        "rollout_id": r.rollout_id,
                        "rollout_path": r.rollout_path,
                        "committed_len": r.committed_len,
                        "segment_count": r.segment_count,
                        "updated_at": r.updated_at,
                        "terminal_state": r.terminal_state,
                    })
                })
                .collect();
            let selection = view.selections.iter().find(|(layout, _)| layout == name).map(|(_, s)| s.clone());
            json!({
                "name": name,
                "config": l.layout.config,
                "rollouts": layout_rollouts,
                "raw_memories": raw_memories,
                "selection": selection,
            })
        })
        .collect();
    json!({
        "format": FORMAT,
        "version": FORMAT_VERSION,
        "workspace": workspace,
        "layouts": layout_entries,
    })
}

/// The most entries an archive to import may hold (SPEC §2.7).
pub const MAX_ENTRIES: u64 = 100_000;
/// The most an archive to import may expand to, as a multiple of its
/// compressed size (SPEC §2.7).
pub const MAX_EXPANSION: u64 = 10;
/// The most bytes a memoryd manifest may have: the index of as many
/// rollouts as an archive's entry limit can hold.
pub const MAX_MANIFEST_BYTES: u64 = 16 << 20;

/// An entry's name, checked: a relative path of UTF-8 components without
/// `.` or `..`, NUL or control characters; a trailing `/` (a folder) is
/// dropped. The error is the 422's detail.
pub fn archive_path(raw: &[u8]) -> Result<String, String> {
    let shown = String::from_utf8_lossy(raw).escape_debug().to_string();
    let text = std::str::from_utf8(raw).map_err(|_| format!("entry {shown}: the name is not UTF-8"))?;
    if text.chars().any(char::is_control) {
        return Err(format!("entry {shown}: the name holds a control character"));
    }
    if text.starts_with('/') {
        return Err(format!("entry {shown}: an absolute path"));
    }
    let trimmed = text.strip_suffix('/').unwrap_or(text);
    let trimmed = trimmed.strip_prefix("./").unwrap_or(trimmed);
    if trimmed.is_empty() || trimmed.split('/').any(|c| c.is_empty() || c == "." || c == "..") {
        return Err(format!("entry {shown}: a path with an empty, . or .. component"));
    }
    Ok(trimmed.to_owned())
}

/// What a file of an archive is to the layouts it is imported into.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Placement {
    /// A conversation: `<sessions_dir>/<rollout id>.jsonl`, registered at its whole length.
    Rollout { layout: String, rollout_id: RolloutId },
    /// A raw memory, `<memories_dir>/raw_memories/<name>.md`: indexed from its header.
    RawMemory { layout: String },
    /// `<memories_dir>/phase_two_selection.json`: left out, since the
    /// selection memoryd serves and selects against lives in its database
    /// (the next phase two writes the file again).
    Selection,
    /// Any other file in a layout's folders: placed as it is.
    Other,
    /// In no layout's folders: the archive is refused.
    Outside,
}

fn under<'p>(path: &'p str, dir: &str) -> Option<&'p str> {
    path.strip_prefix(dir).and_then(|rest| rest.strip_prefix('/')).filter(|rest| !rest.is_empty())
}

/// Where `path` (checked by [`archive_path`]) falls among `layouts`.
pub fn placement(path: &str, layouts: &[StoredLayout]) -> Placement {
    for l in layouts {
        if let Some(name) = under(path, &l.layout.sessions_dir.normalized)
            && !name.contains('/')
            && let Some(id) = name.strip_suffix(".jsonl").and_then(RolloutId::parse)
            && id.file_name() == name
        {
            return Placement::Rollout { layout: l.name.as_str().to_owned(), rollout_id: id };
        }
    }
    if layouts.iter().any(|l| under(path, &l.layout.memories_dir.normalized) == Some("phase_two_selection.json")) {
        return Placement::Selection;
    }
    for l in layouts {
        if let Some(name) = under(path, &l.layout.memories_dir.normalized).and_then(|p| under(p, "raw_memories"))
            && !name.contains('/')
            && name.ends_with(".md")
        {
            return Placement::RawMemory { layout: l.name.as_str().to_owned() };
        }
    }
    let inside = layouts.iter().any(|l| {
        under(path, &l.layout.sessions_dir.normalized).is_some()
            || under(path, &l.layout.memories_dir.normalized).is_some()
    });
    if inside { Placement::Other } else { Placement::Outside }
}

/// A raw memory's index row from its header lines (R-P1-12): the five
/// `key: value` lines in their order, then an empty line. `None` when the
/// file is not one.
pub fn raw_memory_header(text: &str) -> Option<RawMemoryRecord> {
    let mut lines = text.split('\n');
    let mut field = |key: &str| lines.next()?.strip_prefix(key)?.strip_prefix(": ").map(str::to_owned);
    let rollout_id = RolloutId::parse(&field("rollout_id")?)?;
    let updated_at = field("updated_at")?;
    let rollout_path = field("rollout_path")?;
    let rollout_summary_file = field("rollout_summary_file")?;
    let terminal_state = field("terminal_state")?;
    if !lines.next()?.is_empty() {
        return None;
    }
    Some(RawMemoryRecord {
        rollout_id,
        updated_at,
        rollout_path,
        rollout_summary_file,
        terminal_state,
        extracted_len: 0,
    })
}

/// A layout a memoryd manifest names, with what its export held.
#[derive(Debug)]
pub struct ManifestLayout {
    pub name: LayoutName,
    /// The layout's config as the archive spells it, for the layout rules to read.
    pub config: Box<RawValue>,
    /// `rollout_id` → the length its raw memory was extracted from.
    pub extracted: HashMap<String, u64>,
}

/// The parts of a manifest an import reads; everything else in it is
/// skipped as it is parsed, never held (SPEC §2.7: an archive's JSON is bounded).
#[derive(Deserialize)]
struct ManifestDocument {
    format: Option<String>,
    version: Option<u64>,
    layouts: Option<Vec<ManifestLayoutEntry>>,
}

#[derive(Deserialize)]
struct ManifestLayoutEntry {
    name: String,
    config: Box<RawValue>,
    #[serde(default)]
    raw_memories: Vec<ManifestRawMemory>,
}

#[derive(Deserialize)]
struct ManifestRawMemory {
    rollout_id: Option<String>,
    extracted_len: Option<u64>,
}

/// A memoryd manifest, read back; the error is the 422's detail.
pub fn read_manifest(bytes: &[u8]) -> Result<Vec<ManifestLayout>, String> {
    let bad = |why: &str| format!("{MANIFEST_NAME}: {why}");
    let document: ManifestDocument =
        serde_json::from_slice(bytes).map_err(|e| bad(&format!("not a manifest memoryd reads ({e})")))?;
    if document.format.as_deref() != Some(FORMAT) {
        return Err(bad(&format!("format must be {FORMAT:?}")));
    }
    match document.version {
        Some(FORMAT_VERSION) => {}
        other => return Err(bad(&format!("version {other:?} is not one this memoryd reads ({FORMAT_VERSION})"))),
    }
    let layouts = document.layouts.ok_or_else(|| bad("layouts must be a list"))?;
    layouts
        .into_iter()
        .map(|l| {
            let name =
                LayoutName::parse(&l.name).ok_or_else(|| bad(&format!("layout name {:?} is not valid", l.name)))?;
            let extracted =
                l.raw_memories.into_iter().filter_map(|r| Some((r.rollout_id?, r.extracted_len?))).collect();
            Ok(ManifestLayout { name, config: l.config, extracted })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::layout::{LayoutConfig, ValidLayout, default_layout};

    fn rollout(layout: &str, id: &str, path: &str, len: u64) -> ExportedRollout {
        ExportedRollout {
            layout: layout.into(),
            rollout_id: id.into(),
            rollout_path: path.into(),
            committed_len: len,
            segment_count: 2,
            updated_at: Some("2026-12-01T00:00:00Z".into()),
            terminal_state: Some("completed".into()),
        }
    }

    fn layouts() -> Vec<StoredLayout> {
        let team: LayoutConfig =
            serde_json::from_value(json!({"memories_dir": "team/mem", "sessions_dir": "team/sessions"})).unwrap();
        vec![
            StoredLayout { name: LayoutName::default_layout(), layout: default_layout(), updated_at: None },
            StoredLayout {
                name: LayoutName::parse("team").unwrap(),
                layout: ValidLayout::new(team).unwrap(),
                updated_at: None,
            },
        ]
    }

    #[test]
    fn rollouts_are_cut_and_uncommitted_ones_left_out() {
        let committed = rollout("default", "chat-1", "sessions/chat-1.jsonl", 120);
        let rollouts = HashMap::from([("sessions/chat-1.jsonl", &committed)]);
        let layouts = layouts();
        assert_eq!(take("sessions/chat-1.jsonl", &rollouts, &layouts), Take::Prefix(120));
        assert_eq!(take("sessions/chat-2.jsonl", &rollouts, &layouts), Take::Nothing);
        assert_eq!(take("team/sessions/x.jsonl", &rollouts, &layouts), Take::Nothing);
        assert_eq!(take("sessions/notes.txt", &rollouts, &layouts), Take::Whole);
        assert_eq!(take("sessions/deeper/x.jsonl", &rollouts, &layouts), Take::Whole);
        assert_eq!(take("sessionsx/x.jsonl", &rollouts, &layouts), Take::Whole);
        assert_eq!(take("memories/MEMORY.md", &rollouts, &layouts), Take::Whole);
    }

    #[test]
    fn the_manifest_lists_each_layout_with_its_rollouts_index_and_selection() {
        let committed = rollout("team", "chat-1", "team/sessions/chat-1.jsonl", 120);
        let view = ExportView {
            rollouts: vec![committed.clone(), rollout("team", "gone", "team/sessions/gone.jsonl", 5)],
            raw_memories: vec![(
                "team".into(),
                RawMemoryRecord {
                    rollout_id: RolloutId::parse("chat-1").unwrap(),
                    updated_at: "2026-12-01T00:00:00Z".into(),
                    rollout_path: "team/sessions/chat-1.jsonl".into(),
                    rollout_summary_file: "rollout_summaries/chat-1.md".into(),
                    terminal_state: "completed".into(),
                    extracted_len: 120,
                },
            )],
            selections: vec![("team".into(), json!({"version": 1}))],
        };
        let document = manifest("ops", &layouts(), &view, &[&committed]);
        let keys: Vec<&String> = document.as_object().unwrap().keys().collect();
        assert_eq!(keys, ["format", "version", "workspace", "layouts"]);
        assert_eq!((document["format"].as_str(), document["version"].as_u64()), (Some(FORMAT), Some(1)));
        let default = &document["layouts"][0];
        assert_eq!(default["name"], "default");
        assert_eq!((default["rollouts"].as_array().unwrap().len(), &default["selection"]), (0, &Value::Null));
        let team = &document["layouts"][1];
        assert_eq!(team["config"]["memories_dir"], "team/mem");
        assert_eq!(team["rollouts"].as_array().unwrap().len(), 1, "only rollouts the archive holds");
        assert_eq!(team["rollouts"][0]["committed_len"], 120);
        assert_eq!(team["raw_memories"][0]["extracted_len"], 120);
        assert_eq!(team["selection"], json!({"version": 1}));
    }
    #[test]
    fn archive_paths_are_relative_and_plain() {
        assert_eq!(archive_path(b"sessions/a.jsonl"), Ok("sessions/a.jsonl".to_owned()));
        assert_eq!(archive_path(b"./memories/"), Ok("memories".to_owned()));
        for bad in
            [&b"/etc/passwd"[..], b"../x", b"a/../../x", b"a//b", b"a/./b", b"a\0b", b"a\nb", b"\xff.md", b"", b"./"]
        {
            assert!(archive_path(bad).is_err(), "{:?}", String::from_utf8_lossy(bad));
        }
        assert!(archive_path(b"x/\x1b[31m").unwrap_err().contains("control character"));
    }

    #[test]
    fn files_fall_in_a_layouts_folders_or_outside() {
        let layouts = layouts();
        let rollout = |layout: &str, id: &str| Placement::Rollout {
            layout: layout.into(),
            rollout_id: RolloutId::parse(id).unwrap(),
        };
        assert_eq!(placement("sessions/chat-1.jsonl", &layouts), rollout("default", "chat-1"));
        assert_eq!(placement("team/sessions/x.jsonl", &layouts), rollout("team", "x"));
        assert_eq!(placement("sessions/notes.txt", &layouts), Placement::Other);
        assert_eq!(placement("sessions/deep/x.jsonl", &layouts), Placement::Other);
        assert_eq!(
            placement("memories/raw_memories/chat-1.md", &layouts),
            Placement::RawMemory { layout: "default".into() }
        );
        assert_eq!(placement("team/mem/raw_memories/x.md", &layouts), Placement::RawMemory { layout: "team".into() });
        assert_eq!(placement("memories/MEMORY.md", &layouts), Placement::Other);
        assert_eq!(placement("memories/phase_two_selection.json", &layouts), Placement::Selection);
        assert_eq!(placement("team/mem/phase_two_selection.json", &layouts), Placement::Selection);
        assert_eq!(placement("memories/skills/phase_two_selection.json", &layouts), Placement::Other);
        assert_eq!(placement("memories", &layouts), Placement::Outside);
        assert_eq!(placement("elsewhere/MEMORY.md", &layouts), Placement::Outside);
        assert_eq!(placement("memoriesx/a.md", &layouts), Placement::Outside);
    }

    #[test]
    fn a_raw_memory_is_indexed_from_its_header_lines() {
        let text = "rollout_id: chat-1\nupdated_at: 2026-04-15T00:00:00+00:00\nrollout_path: sessions/chat-1.jsonl\nrollout_summary_file: rollout_summaries/chat-1_fix.md\nterminal_state: completed\n\nmemory\n";
        let row = raw_memory_header(text).unwrap();
        assert_eq!(row.rollout_id.as_str(), "chat-1");
        assert_eq!((row.updated_at.as_str(), row.terminal_state.as_str()), ("2026-04-15T00:00:00+00:00", "completed"));
        assert_eq!(row.rollout_summary_file, "rollout_summaries/chat-1_fix.md");
        assert!(raw_memory_header(&text.replace("updated_at", "updated")).is_none());
        assert!(raw_memory_header(&text.replace("completed\n\n", "completed\nmore\n")).is_none());
        assert!(raw_memory_header(&text.replace("chat-1\nupdated", "../x\nupdated")).is_none());
        assert!(raw_memory_header("just notes").is_none());
    }

    #[test]
    fn a_manifest_is_read_back() {
        let committed = rollout("default", "chat-1", "sessions/chat-1.jsonl", 12);
        let view = ExportView {
            rollouts: vec![committed.clone()],
            raw_memories: vec![(
                "default".into(),
                RawMemoryRecord {
                    rollout_id: RolloutId::parse("chat-1").unwrap(),
                    updated_at: "u".into(),
                    rollout_path: "sessions/chat-1.jsonl".into(),
                    rollout_summary_file: "rollout_summaries/chat-1_x.md".into(),
                    terminal_state: "completed".into(),
                    extracted_len: 12,
                },
            )],
            selections: vec![],
        };
        let bytes = serde_json::to_vec(&manifest("ops", &layouts(), &view, &[&committed])).unwrap();
        let read = read_manifest(&bytes).unwrap();
        assert_eq!(read.len(), 2);
        assert_eq!((read[0].name.as_str(), read[0].extracted.get("chat-1")), ("default", Some(&12)));
        let config: Value = serde_json::from_str(read[1].config.get()).unwrap();
        assert_eq!(config["memories_dir"], "team/mem");
        assert!(read_manifest(b"{").unwrap_err().contains("not a manifest memoryd reads"));
        let padded =
            format!(r#"{{"format": "memoryd-export", "pad": [{}0], "version": 1, "layouts": []}}"#, "0,".repeat(1000));
        assert!(read_manifest(padded.as_bytes()).unwrap().is_empty(), "what it does not read is skipped");
        assert!(
            read_manifest(br#"{"format": "memoryd-export", "version": 2, "layouts": []}"#)
                .unwrap_err()
                .contains("version")
        );
        assert!(read_manifest(br#"{"format": "x", "version": 1}"#).unwrap_err().contains("format"));
        let bad_name = br#"{"format": "memoryd-export", "version": 1, "layouts": [{"name": "../x", "config": {}}]}"#;
        assert!(read_manifest(bad_name).unwrap_err().contains("layout name"));
    }
}
