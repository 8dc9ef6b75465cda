//! Moving a workspace out (SPEC §2.7): which of its files an export holds,
//! and how much of each, and the manifest that describes them. No tenant
//! id, key, absolute path or host name goes into either.

use crate::domain::index::RawMemoryRecord;
use crate::domain::layout::StoredLayout;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::ids::{LayoutName, RolloutId};
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
}
