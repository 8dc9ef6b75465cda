//! Applying a running agent's edit (SPEC §2.10) to the files as they are:
//! at request time as a dry run, and again when its job runs.

use super::apply_patch::parse_patch_input;
use super::{FileEdit, MemoryTools};
use crate::domain::diff::Change;
use crate::domain::ids::sha256_hex;
pub use crate::domain::memory_edit::{EditChange, EditRefusal, MemoryEdit, memory_relative};
use std::path::Path;

/// One file an edit changes, relative to the memory folder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EditedFile {
    pub path: String,
    pub change: Change,
    /// Bytes after the edit minus bytes before.
    pub growth: i64,
}

/// An edit applied to a working copy: what to publish and what it changes.
#[derive(Debug)]
pub struct AppliedEdit {
    /// Paths relative to the workspace root.
    pub edits: Vec<FileEdit>,
    pub changed: Vec<EditedFile>,
}

/// Applies `edit` to the layout's memory folder under `root` as it is on
/// disk now, without writing: its preconditions, then every change, all or
/// nothing. `memories` and `sessions` are the layout's normalised folders.
pub fn apply_edit(root: &Path, memories: &str, sessions: &str, edit: &MemoryEdit) -> Result<AppliedEdit, EditRefusal> {
    let in_memory = |raw: &str| {
        memory_relative(memories, raw)
            .map(|rel| format!("{memories}/{rel}"))
            .ok_or_else(|| invalid(format!("path must be relative to the memory folder and stay inside it: {raw:?}")))
    };
    let mut tools = MemoryTools::new(root.to_path_buf(), memories, sessions);
    for (raw, want) in &edit.expect {
        let rel = in_memory(raw)?;
        let now = tools.content_of(&rel).map_err(invalid)?.map(|bytes| sha256_hex(&bytes));
        if now != *want {
            let shown = |h: &Option<String>| h.clone().unwrap_or_else(|| "absent".into());
            return Err(EditRefusal::MemoryChanged(format!(
                "{raw} has changed: expected {}, it is {}; read it again and redo the edit",
                shown(want),
                shown(&now)
            )));
        }
    }
    match &edit.change {
        EditChange::Patch(text) => {
            let mut ops = parse_patch_input(text).map_err(invalid)?;
            for op in &mut ops {
                op.path = in_memory(&op.path)?;
                if let Some(to) = &op.move_to {
                    op.move_to = Some(in_memory(to)?);
                }
            }
            tools.apply_patch_operations(&ops).map_err(invalid)?;
        }
        EditChange::Operations(commands) => {
            let mut commands = commands.clone();
            for command in &mut commands {
                for path in command.paths_mut() {
                    *path = in_memory(path)?;
                }
            }
            tools.apply_commands(&commands).map_err(invalid)?;
        }
    }
    let mut changed = Vec::new();
    let mut changed_paths = std::collections::HashSet::new();
    let mut edits = tools.into_edits_with_disk(|rel, before, after| {
        let Some(change) = Change::of(before, after.map(str::as_bytes)) else { return };
        let growth = after.map_or(0, |a| a.len() as i64) - before.map_or(0, |b| b.len() as i64);
        let path = rel.strip_prefix(memories).map_or(rel, |r| r.trim_start_matches('/')).to_owned();
        changed_paths.insert(rel.to_owned());
        changed.push(EditedFile { path, change, growth });
    });
    // Writing a file as it already is changes nothing, and publishes nothing.
    edits.retain(|(rel, _)| changed_paths.contains(rel));
    Ok(AppliedEdit { edits, changed })
}

fn invalid(message: impl Into<String>) -> EditRefusal {
    EditRefusal::InvalidPatch(message.into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::path::PathBuf;

    fn workspace() -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("ws");
        std::fs::create_dir_all(root.join("memories/raw_memories")).unwrap();
        std::fs::write(root.join("memories/MEMORY.md"), "# Memory\n- tea\n").unwrap();
        (dir, root)
    }

    #[test]
    fn an_edit_applies_whole_and_says_what_it_changes() {
        let (_dir, root) = workspace();
        let edit = MemoryEdit::from_body(json!({"operations": [
            {"command": "str_replace", "path": "MEMORY.md", "old_str": "- tea", "new_str": "- coffee"},
            {"command": "create", "path": "memories/skills/x.md", "file_text": "x\n"},
        ], "expect": {"MEMORY.md": sha256_hex(b"# Memory\n- tea\n"), "skills/x.md": null}}))
        .unwrap();
        let applied = apply_edit(&root, "memories", "sessions", &edit).unwrap();
        assert_eq!(
            applied.changed,
            [
                EditedFile { path: "MEMORY.md".into(), change: Change::Modified, growth: 3 },
                EditedFile { path: "skills/x.md".into(), change: Change::Added, growth: 2 },
            ]
        );
        assert_eq!(std::fs::read_to_string(root.join("memories/MEMORY.md")).unwrap(), "# Memory\n- tea\n");
    }

    #[test]
    fn stale_preconditions_and_patches_that_cannot_apply_are_refused() {
        let (_dir, root) = workspace();
        let stale =
            MemoryEdit::from_body(json!({"patch": "*** Begin Patch\n*** Delete File: MEMORY.md\n*** End Patch",
            "expect": {"memories/MEMORY.md": sha256_hex(b"older")}}))
            .unwrap();
        assert!(matches!(apply_edit(&root, "memories", "sessions", &stale), Err(EditRefusal::MemoryChanged(_))));
        let missing = MemoryEdit::from_body(
            json!({"patch": "*** Begin Patch\n*** Update File: MEMORY.md\n@@\n-coffee\n+tea\n*** End Patch"}),
        )
        .unwrap();
        assert!(matches!(apply_edit(&root, "memories", "sessions", &missing), Err(EditRefusal::InvalidPatch(_))));
        for path in
            ["raw_memories.md", "raw_memories/r.md", "phase_two_selection.json", "../sessions/x.jsonl", "/etc/x"]
        {
            let owned =
                MemoryEdit::from_body(json!({"operations": [{"command": "create", "path": path, "file_text": "x"}]}))
                    .unwrap();
            assert!(
                matches!(apply_edit(&root, "memories", "sessions", &owned), Err(EditRefusal::InvalidPatch(_))),
                "{path}"
            );
        }
    }
}
