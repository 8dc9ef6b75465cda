//! Phase two's input (R-P2-1..5, R-P2-8): which raw memories are selected
//! (newest first, or by usage as Codex ranks them, SPEC §2.10), what changed
//! since the last successful run, `raw_memories.md`, the selection block of
//! the prompt and `phase_two_selection.json`.

use crate::domain::pyjson::{PyJsonStyle, dumps};
use crate::domain::pytext::py_strip;
use crate::domain::time::{parse_rfc3339, py_isoformat};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::cmp::Reverse;
use std::collections::HashSet;

/// One raw memory as the selection sees it (the header of its file).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SelectionItem {
    pub rollout_id: String,
    pub updated_at: String,
    pub rollout_path: String,
    pub rollout_summary_file: String,
    pub terminal_state: String,
    /// Sessions that used it (SPEC §2.10), and when one last did.
    #[serde(default)]
    pub usage_count: i64,
    #[serde(default)]
    pub last_usage: Option<DateTime<Utc>>,
}

/// `updated_at` as an instant; empty, `unknown` or unparseable text has none.
fn instant(updated_at: &str) -> Option<DateTime<Utc>> {
    parse_rfc3339(py_strip(updated_at))
}

/// Newest first, compared as instants (memoryd does better than the SDK's
/// string order here); unknown times last; ties by rollout id descending.
pub fn order_newest_first(items: &mut [SelectionItem]) {
    items.sort_by_key(|item| Reverse((instant(&item.updated_at), item.rollout_id.clone())));
}

/// Codex's order (SPEC §2.10): most used first, then the latest use (or,
/// never used, the latest update) newest first, then rollout id descending.
pub fn order_by_usage(items: &mut [SelectionItem]) {
    items.sort_by_key(|item| {
        let recent = item.last_usage.or_else(|| instant(&item.updated_at));
        Reverse((item.usage_count, recent, item.rollout_id.clone()))
    });
}

/// How a layout chooses what phase two consolidates (its `generate` config).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SelectionPolicy {
    /// `max_raw_memories_for_consolidation`.
    pub cap: usize,
    /// `selection: "usage"`; otherwise newest first.
    pub by_usage: bool,
    /// `max_unused_days`: what was neither used nor updated since then is left out.
    pub unused_since: Option<DateTime<Utc>>,
}

impl SelectionPolicy {
    /// The policy a layout's generate config sets, as of `now`.
    pub fn of(generate: &crate::domain::layout::GenerateConfig, now: DateTime<Utc>) -> Self {
        Self {
            cap: generate.max_raw_memories_for_consolidation.max(1) as usize,
            by_usage: generate.selection == crate::domain::layout::SelectionMode::Usage,
            unused_since: generate.max_unused_days.map(|days| now - chrono::Duration::days(days)),
        }
    }

    /// The newest `cap` raw memories are all it can choose from: the
    /// index may be asked for those alone.
    pub fn needs_only_newest(&self) -> bool {
        !self.by_usage && self.unused_since.is_none()
    }

    /// Used or updated since the window's start (always, without a window).
    fn keeps(&self, item: &SelectionItem) -> bool {
        let Some(since) = self.unused_since else { return true };
        item.last_usage.is_some_and(|used| used >= since) || instant(&item.updated_at).is_some_and(|at| at >= since)
    }
}

/// What phase two works from, against the last successful selection.
#[derive(Debug, Clone, PartialEq)]
pub struct PhaseTwoSelection {
    pub selected: Vec<SelectionItem>,
    pub retained: HashSet<String>,
    pub removed: Vec<SelectionItem>,
}

impl PhaseTwoSelection {
    pub fn added_count(&self) -> usize {
        self.selected.len() - self.retained.len()
    }

    pub fn added_ids(&self) -> Vec<String> {
        self.selected.iter().filter(|s| !self.retained.contains(&s.rollout_id)).map(|s| s.rollout_id.clone()).collect()
    }

    pub fn retained_ids(&self) -> Vec<String> {
        self.selected.iter().filter(|s| self.retained.contains(&s.rollout_id)).map(|s| s.rollout_id.clone()).collect()
    }
}

/// R-P2-2 and R-P2-3: filter, order, cap, and compare with the prior
/// selection. The removed entries carry the usage `items` knows of them.
pub fn build_selection(
    mut items: Vec<SelectionItem>,
    policy: &SelectionPolicy,
    prior: &[SelectionItem],
) -> PhaseTwoSelection {
    items.retain(|i| !py_strip(&i.rollout_id).is_empty() && !py_strip(&i.rollout_summary_file).is_empty());
    let usage: std::collections::HashMap<String, (i64, Option<DateTime<Utc>>)> =
        items.iter().map(|i| (i.rollout_id.clone(), (i.usage_count, i.last_usage))).collect();
    items.retain(|i| policy.keeps(i));
    if policy.by_usage {
        order_by_usage(&mut items)
    } else {
        order_newest_first(&mut items)
    }
    items.truncate(policy.cap);
    let selected_ids: HashSet<&str> = items.iter().map(|i| i.rollout_id.as_str()).collect();
    let retained =
        prior.iter().filter(|p| selected_ids.contains(p.rollout_id.as_str())).map(|p| p.rollout_id.clone()).collect();
    let removed = prior
        .iter()
        .filter(|p| !selected_ids.contains(p.rollout_id.as_str()))
        .map(|p| {
            let (usage_count, last_usage) = usage.get(&p.rollout_id).copied().unwrap_or_default();
            SelectionItem { usage_count, last_usage, ..p.clone() }
        })
        .collect();
    PhaseTwoSelection { selected: items, retained, removed }
}

fn or_unknown(updated_at: &str) -> &str {
    if updated_at.is_empty() { "unknown" } else { updated_at }
}

/// R-P2-5: the selection block of the consolidation prompt, line for line.
pub fn render_selection_block(selection: &PhaseTwoSelection) -> String {
    let mut out = format!(
        "- selected inputs this run: {}\n- newly added since the last successful Phase 2 run: {}\n- retained from the last successful Phase 2 run: {}\n- removed from the last successful Phase 2 run: {}\n\nCurrent selected Phase 1 inputs:\n",
        selection.selected.len(),
        selection.added_count(),
        selection.retained.len(),
        selection.removed.len()
    );
    if selection.selected.is_empty() {
        out.push_str("- none\n");
    }
    for item in &selection.selected {
        let status = if selection.retained.contains(&item.rollout_id) { "retained" } else { "added" };
        out.push_str(&format!(
            "- [{status}] rollout_id={}, rollout_summary_file={}, updated_at={}\n",
            item.rollout_id,
            item.rollout_summary_file,
            or_unknown(&item.updated_at)
        ));
    }
    out.push_str("\nRemoved from the last successful Phase 2 selection:\n");
    if selection.removed.is_empty() {
        out.push_str("- none\n");
    }
    for item in &selection.removed {
        out.push_str(&format!(
            "- rollout_id={}, rollout_summary_file={}, updated_at={}\n",
            item.rollout_id,
            item.rollout_summary_file,
            or_unknown(&item.updated_at)
        ));
    }
    out
}

/// R-P2-4: the selected raw memories, each without its trailing newlines,
/// joined by a blank line, with no final newline.
pub fn raw_memories_md(chunks: &[String]) -> String {
    chunks.iter().map(|c| c.trim_end_matches('\n')).collect::<Vec<_>>().join("\n\n")
}

/// An entry of the SDK's file: its five keys, nothing else (SPEC §3, R-P2-8).
fn sdk_item_json(item: &SelectionItem) -> Value {
    json!({
        "rollout_id": item.rollout_id,
        "updated_at": item.updated_at,
        "rollout_path": item.rollout_path,
        "rollout_summary_file": item.rollout_summary_file,
        "terminal_state": item.terminal_state,
    })
}

/// An entry as the route serves it: the SDK's five keys, then the usage.
fn item_json(item: &SelectionItem) -> Value {
    let mut entry = sdk_item_json(item);
    entry["usage_count"] = json!(item.usage_count);
    entry["last_usage"] = json!(item.last_usage.map(py_isoformat));
    entry
}

/// R-P2-8: `json.dumps(payload, indent=2) + "\n"`, with the SDK's keys only.
pub fn selection_file(selected: &[SelectionItem], written_at: &str) -> String {
    let payload = json!({
        "version": 1,
        "updated_at": written_at,
        "selected": selected.iter().map(sdk_item_json).collect::<Vec<_>>(),
    });
    format!("{}\n", dumps(&payload, PyJsonStyle::INDENT2))
}

/// SPEC §2.4: the document `GET …/phase_two_selection` answers with.
pub fn selection_document(selection: &PhaseTwoSelection, written_at: &str, run_id: &str) -> Value {
    json!({
        "version": 1,
        "updated_at": written_at,
        "run_id": run_id,
        "selected": selection.selected.iter().map(item_json).collect::<Vec<_>>(),
        "added_rollout_ids": selection.added_ids(),
        "retained_rollout_ids": selection.retained_ids(),
        "removed": selection.removed.iter().map(item_json).collect::<Vec<_>>(),
    })
}

/// The prior selection from a stored document's `selected` list (R-P2-3:
/// entries without an id or a summary file are skipped).
pub fn prior_from_document(document: &Value) -> Vec<SelectionItem> {
    let text = |v: &Value| match v {
        Value::String(s) => py_strip(s).to_owned(),
        Value::Null => String::new(),
        other => other.to_string(),
    };
    document["selected"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e.is_object())
        .map(|e| SelectionItem {
            rollout_id: text(&e["rollout_id"]),
            updated_at: text(&e["updated_at"]),
            rollout_path: text(&e["rollout_path"]),
            rollout_summary_file: text(&e["rollout_summary_file"]),
            terminal_state: text(&e["terminal_state"]),
            usage_count: 0,
            last_usage: None,
        })
        .filter(|e| !e.rollout_id.is_empty() && !e.rollout_summary_file.is_empty())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(id: &str, updated_at: &str) -> SelectionItem {
        SelectionItem {
            rollout_id: id.into(),
            updated_at: updated_at.into(),
            rollout_path: format!("sessions/{id}.jsonl"),
            rollout_summary_file: format!("rollout_summaries/{id}_s.md"),
            terminal_state: "completed".into(),
            usage_count: 0,
            last_usage: None,
        }
    }

    fn recent(cap: usize) -> SelectionPolicy {
        SelectionPolicy { cap, by_usage: false, unused_since: None }
    }

    fn at(text: &str) -> DateTime<Utc> {
        parse_rfc3339(text).unwrap()
    }

    fn used(mut item: SelectionItem, count: i64, last: &str) -> SelectionItem {
        item.usage_count = count;
        item.last_usage = Some(at(last));
        item
    }

    fn ids(items: &[SelectionItem]) -> Vec<&str> {
        items.iter().map(|i| i.rollout_id.as_str()).collect()
    }

    #[test]
    fn newest_first_unknown_last_ties_by_id_descending() {
        let mut items = vec![
            item("a", "2026-01-01T00:00:00+00:00"),
            item("c", "unknown"),
            item("d", "2026-02-01T00:00:00+00:00"),
            item("f", ""),
            item("b", "2026-01-01T00:00:00+00:00"),
            item("e", "garbage"),
        ];
        order_newest_first(&mut items);
        assert_eq!(ids(&items), ["d", "b", "a", "f", "e", "c"]);
    }

    #[test]
    fn instants_not_strings_decide() {
        // As strings the +02:00 stamp sorts first; as instants it is an hour older.
        let mut items = vec![item("x", "2026-01-01T10:00:00+02:00"), item("y", "2026-01-01T09:00:00+00:00")];
        order_newest_first(&mut items);
        assert_eq!(ids(&items), ["y", "x"]);
    }

    #[test]
    fn added_retained_and_removed_against_the_prior_selection() {
        let prior = vec![item("old", "2026-01-01T00:00:00Z"), item("kept", "2026-01-02T00:00:00Z")];
        let items = vec![
            item("kept", "2026-01-02T00:00:00Z"),
            item("new", "2026-01-03T00:00:00Z"),
            item("old", "2026-01-01T00:00:00Z"),
        ];
        let s = build_selection(items, &recent(2), &prior);
        assert_eq!(ids(&s.selected), ["new", "kept"]);
        assert_eq!(s.added_ids(), ["new"]);
        assert_eq!(s.retained_ids(), ["kept"]);
        assert_eq!(ids(&s.removed), ["old"]);
        assert_eq!(
            render_selection_block(&s),
            "- selected inputs this run: 2\n- newly added since the last successful Phase 2 run: 1\n- retained from the last successful Phase 2 run: 1\n- removed from the last successful Phase 2 run: 1\n\nCurrent selected Phase 1 inputs:\n- [added] rollout_id=new, rollout_summary_file=rollout_summaries/new_s.md, updated_at=2026-01-03T00:00:00Z\n- [retained] rollout_id=kept, rollout_summary_file=rollout_summaries/kept_s.md, updated_at=2026-01-02T00:00:00Z\n\nRemoved from the last successful Phase 2 selection:\n- rollout_id=old, rollout_summary_file=rollout_summaries/old_s.md, updated_at=2026-01-01T00:00:00Z\n"
        );
    }

    #[test]
    fn by_usage_most_used_first_then_latest_use_or_update() {
        let items = vec![
            item("never-new", "2026-03-01T00:00:00Z"),
            used(item("once-old", "2026-01-01T00:00:00Z"), 1, "2026-02-01T00:00:00Z"),
            used(item("twice", "2026-01-01T00:00:00Z"), 2, "2026-01-05T00:00:00Z"),
            used(item("once-recent", "2026-01-01T00:00:00Z"), 1, "2026-03-05T00:00:00Z"),
            item("never-old", "2025-12-01T00:00:00Z"),
            item("never-tie-a", "2025-12-01T00:00:00Z"),
        ];
        let policy = SelectionPolicy { cap: 10, by_usage: true, unused_since: None };
        let s = build_selection(items.clone(), &policy, &[]);
        assert_eq!(ids(&s.selected), ["twice", "once-recent", "once-old", "never-new", "never-tie-a", "never-old"]);
        // The default order is the SDK's, whatever the usage.
        let s = build_selection(items, &recent(10), &[]);
        assert_eq!(ids(&s.selected), ["never-new", "twice", "once-recent", "once-old", "never-tie-a", "never-old"]);
    }

    #[test]
    fn a_window_leaves_out_what_was_neither_used_nor_updated_in_it() {
        let items = vec![
            item("fresh", "2026-03-01T00:00:00Z"),
            item("stale", "2026-01-01T00:00:00Z"),
            used(item("stale-but-used", "2026-01-01T00:00:00Z"), 1, "2026-02-25T00:00:00Z"),
            used(item("used-long-ago", "2026-01-01T00:00:00Z"), 3, "2026-01-02T00:00:00Z"),
            item("unknown", "unknown"),
        ];
        let since = Some(at("2026-02-20T00:00:00Z"));
        let prior = vec![item("stale", "2026-01-01T00:00:00Z"), item("used-long-ago", "2026-01-01T00:00:00Z")];
        for by_usage in [false, true] {
            let s = build_selection(items.clone(), &SelectionPolicy { cap: 10, by_usage, unused_since: since }, &prior);
            let mut kept = ids(&s.selected);
            kept.sort();
            assert_eq!(kept, ["fresh", "stale-but-used"]);
            assert_eq!(ids(&s.removed), ["stale", "used-long-ago"]);
            assert_eq!(s.removed[1].usage_count, 3, "removed entries carry their usage");
        }
    }

    #[test]
    fn an_empty_selection_says_none() {
        let s = build_selection(Vec::new(), &recent(5), &[]);
        assert_eq!(
            render_selection_block(&s),
            "- selected inputs this run: 0\n- newly added since the last successful Phase 2 run: 0\n- retained from the last successful Phase 2 run: 0\n- removed from the last successful Phase 2 run: 0\n\nCurrent selected Phase 1 inputs:\n- none\n\nRemoved from the last successful Phase 2 selection:\n- none\n"
        );
    }

    #[test]
    fn raw_memories_md_joins_without_a_final_newline() {
        assert_eq!(raw_memories_md(&["a\n\n".into(), "b\n".into()]), "a\n\nb");
    }

    #[test]
    fn the_selection_file_is_python_indent_2() {
        let text = selection_file(&[item("chat-1", "2026-04-15T00:00:00+00:00")], "2026-04-15T12:34:56.789012+00:00");
        assert_eq!(
            text,
            "{\n  \"version\": 1,\n  \"updated_at\": \"2026-04-15T12:34:56.789012+00:00\",\n  \"selected\": [\n    {\n      \"rollout_id\": \"chat-1\",\n      \"updated_at\": \"2026-04-15T00:00:00+00:00\",\n      \"rollout_path\": \"sessions/chat-1.jsonl\",\n      \"rollout_summary_file\": \"rollout_summaries/chat-1_s.md\",\n      \"terminal_state\": \"completed\"\n    }\n  ]\n}\n"
        );
        let back: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(prior_from_document(&back), vec![item("chat-1", "2026-04-15T00:00:00+00:00")]);
    }

    #[test]
    fn prior_entries_without_id_or_summary_are_skipped() {
        let doc = json!({"selected": [{"rollout_id": " "}, 5, {"rollout_id": "a", "rollout_summary_file": "f"}]});
        assert_eq!(prior_from_document(&doc).len(), 1);
        assert!(prior_from_document(&json!({"selected": "x"})).is_empty());
    }
}
