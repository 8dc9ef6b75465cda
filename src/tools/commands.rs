//! The commands of Anthropic's memory tool (`create`, `str_replace`,
//! `insert`, `delete`, `rename`) over the same private working copy as
//! `apply_patch`: every command sees the ones before it, and a list of
//! commands applies whole or not at all (SPEC §2.10).

use super::{MemoryTools, is_under};
pub use crate::domain::memory_edit::MemoryCommand;
use std::collections::BTreeMap;

const TOOL: &str = "memory edit";

/// The working copy as the commands change it: the run's edits so far.
type Overlay = BTreeMap<String, Option<String>>;

impl MemoryTools {
    /// Applies `commands` in order to the working copy: all of them, or none
    /// (the first failure is the error). The answer lists what each did.
    pub fn apply_commands(&mut self, commands: &[MemoryCommand]) -> Result<String, String> {
        let mut overlay = Overlay::new();
        let mut outputs = Vec::with_capacity(commands.len());
        for command in commands {
            outputs.push(self.apply_command(&mut overlay, command)?);
        }
        self.commit(overlay);
        Ok(outputs.join("\n"))
    }

    fn apply_command(&self, overlay: &mut Overlay, command: &MemoryCommand) -> Result<String, String> {
        match command {
            MemoryCommand::Create { path, file_text } => {
                let (rel, abs) = self.writable(TOOL, path)?;
                let existed = self.current_text(TOOL, overlay, &rel, &abs, path)?.is_some();
                overlay.insert(rel, Some(file_text.clone()));
                Ok(format!("{} {path}", if existed { "Overwrote" } else { "Created" }))
            }
            MemoryCommand::StrReplace { path, old_str, new_str } => {
                let text = self.existing_text(overlay, path)?;
                let new = replace_once(&text, old_str, new_str).map_err(|e| format!("{e} in {path}"))?;
                overlay.insert(self.writable(TOOL, path)?.0, Some(new));
                Ok(format!("Replaced the text in {path}"))
            }
            MemoryCommand::Insert { path, insert_line, insert_text } => {
                let text = self.existing_text(overlay, path)?;
                let new = insert_after(&text, *insert_line, insert_text).map_err(|e| format!("{e} in {path}"))?;
                overlay.insert(self.writable(TOOL, path)?.0, Some(new));
                Ok(format!("Inserted text after line {insert_line} of {path}"))
            }
            MemoryCommand::Delete { path } => {
                let files = self.files_at(overlay, path)?;
                for rel in &files {
                    overlay.insert(rel.clone(), None);
                }
                Ok(format!("Deleted {path}"))
            }
            MemoryCommand::Rename { old_path, new_path } => self.rename(overlay, old_path, new_path),
        }
    }

    /// The text of a file that must exist.
    fn existing_text(&self, overlay: &Overlay, path: &str) -> Result<String, String> {
        let (rel, abs) = self.writable(TOOL, path)?;
        self.current_text(TOOL, overlay, &rel, &abs, path)?.ok_or_else(|| format!("{TOOL}: no such file: {path}"))
    }

    /// The working copy's files at `path`: the file itself, or every file
    /// under the folder; each one writable. None at all is an error.
    fn files_at(&self, overlay: &Overlay, path: &str) -> Result<Vec<String>, String> {
        let (rel, abs) = self.writable(TOOL, path)?;
        if self.current_text(TOOL, overlay, &rel, &abs, path).is_ok_and(|t| t.is_some()) {
            return Ok(vec![rel]);
        }
        let mut files = self.files_under(&rel);
        for (edited, content) in overlay.iter() {
            let listed = files.iter().position(|f| f == edited);
            match (content, listed) {
                (Some(_), None) if is_under(edited, &rel) => files.push(edited.clone()),
                (None, Some(at)) => {
                    files.remove(at);
                }
                _ => {}
            }
        }
        if files.is_empty() {
            return Err(format!("{TOOL}: no such file or folder: {path}"));
        }
        for file in &files {
            self.writable(TOOL, file)?;
        }
        files.sort();
        Ok(files)
    }

    fn rename(&self, overlay: &mut Overlay, old_path: &str, new_path: &str) -> Result<String, String> {
        let (old_rel, _) = self.writable(TOOL, old_path)?;
        let (new_rel, _) = self.writable(TOOL, new_path)?;
        if old_rel == new_rel {
            return Err(format!("{TOOL}: {old_path} and {new_path} are the same path"));
        }
        if is_under(&new_rel, &old_rel) {
            return Err(format!("{TOOL}: cannot move {old_path} into itself"));
        }
        let moving = self.files_at(overlay, old_path)?;
        let mut moved = Vec::with_capacity(moving.len());
        for from in &moving {
            let to = format!("{new_rel}{}", &from[old_rel.len()..]);
            let (to_rel, to_abs) = self.writable(TOOL, &to)?;
            if self.current_text(TOOL, overlay, &to_rel, &to_abs, &to)?.is_some() {
                return Err(format!("{TOOL}: cannot rename {old_path} to {new_path}: {to} already exists"));
            }
            let (from_rel, from_abs) = self.writable(TOOL, from)?;
            moved.push((to_rel, self.current_text(TOOL, overlay, &from_rel, &from_abs, from)?));
        }
        for from in moving {
            overlay.insert(from, None);
        }
        for (to, text) in moved {
            overlay.insert(to, text);
        }
        Ok(format!("Renamed {old_path} to {new_path}"))
    }
}

/// `text` with its one occurrence of `old` replaced by `new`.
pub fn replace_once(text: &str, old: &str, new: &str) -> Result<String, String> {
    if old.is_empty() {
        return Err(format!("{TOOL}: old_str must not be empty"));
    }
    let mut found = text.match_indices(old);
    let Some((at, _)) = found.next() else {
        return Err(format!("{TOOL}: old_str does not occur"));
    };
    if found.next().is_some() {
        let count = 2 + found.count();
        return Err(format!("{TOOL}: old_str occurs {count} times; it must occur exactly once"));
    }
    Ok(format!("{}{new}{}", &text[..at], &text[at + old.len()..]))
}

/// `text` with `inserted` placed after line `after` (0: before the first);
/// the inserted text becomes whole lines of its own.
pub fn insert_after(text: &str, after: u64, inserted: &str) -> Result<String, String> {
    let lines: Vec<&str> = text.split_inclusive('\n').collect();
    let count = lines.len() as u64;
    if after > count {
        return Err(format!("{TOOL}: insert_line {after} is past the end: the file has {count} lines (0 to {count})"));
    }
    let at = after as usize;
    let mut out = String::with_capacity(text.len() + inserted.len() + 2);
    for line in &lines[..at] {
        out.push_str(line);
    }
    if at > 0 && !out.ends_with('\n') {
        out.push('\n');
    }
    out.push_str(inserted);
    if !inserted.ends_with('\n') && (at < lines.len() || !inserted.is_empty()) {
        out.push('\n');
    }
    for line in &lines[at..] {
        out.push_str(line);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn tools() -> (tempfile::TempDir, PathBuf, MemoryTools) {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("ws");
        std::fs::create_dir_all(root.join("memories/skills/ci")).unwrap();
        std::fs::create_dir_all(root.join("memories/raw_memories")).unwrap();
        std::fs::write(root.join("memories/MEMORY.md"), "# Memory\n- tea\n").unwrap();
        std::fs::write(root.join("memories/skills/ci/SKILL.md"), "step\n").unwrap();
        std::fs::write(root.join("memories/raw_memories/r.md"), "raw\n").unwrap();
        let tools = MemoryTools::new(root.clone(), "memories", "sessions");
        (dir, root, tools)
    }

    fn command(json: &str) -> MemoryCommand {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn replace_once_needs_exactly_one_occurrence() {
        assert_eq!(replace_once("a tea b", "tea", "coffee").unwrap(), "a coffee b");
        assert_eq!(
            replace_once("tea tea", "tea", "x").unwrap_err(),
            "memory edit: old_str occurs 2 times; it must occur exactly once"
        );
        assert_eq!(replace_once("abc", "x", "y").unwrap_err(), "memory edit: old_str does not occur");
        assert!(replace_once("abc", "", "y").is_err());
    }

    #[test]
    fn insert_places_whole_lines() {
        assert_eq!(insert_after("a\nb\n", 0, "top").unwrap(), "top\na\nb\n");
        assert_eq!(insert_after("a\nb\n", 1, "mid\n").unwrap(), "a\nmid\nb\n");
        assert_eq!(insert_after("a\nb\n", 2, "end").unwrap(), "a\nb\nend\n");
        assert_eq!(insert_after("a\nb", 2, "end").unwrap(), "a\nb\nend\n");
        assert_eq!(insert_after("", 0, "only").unwrap(), "only\n");
        assert_eq!(
            insert_after("a\n", 2, "x").unwrap_err(),
            "memory edit: insert_line 2 is past the end: the file has 1 lines (0 to 1)"
        );
    }

    #[test]
    fn commands_see_each_other_and_apply_whole() {
        let (_dir, root, mut tools) = tools();
        let out = tools
            .apply_commands(&[
                command(r#"{"command":"create","path":"memories/notes.md","file_text":"one\n"}"#),
                command(r#"{"command":"insert","path":"memories/notes.md","insert_line":1,"insert_text":"two"}"#),
                command(
                    r#"{"command":"str_replace","path":"memories/MEMORY.md","old_str":"- tea","new_str":"- coffee"}"#,
                ),
                command(r#"{"command":"rename","old_path":"memories/skills/ci","new_path":"memories/skills/build"}"#),
            ])
            .unwrap();
        assert_eq!(out.lines().count(), 4, "{out}");
        let edits = tools.into_edits();
        assert!(edits.contains(&("memories/notes.md".into(), Some("one\ntwo\n".into()))));
        assert!(edits.contains(&("memories/MEMORY.md".into(), Some("# Memory\n- coffee\n".into()))));
        assert!(edits.contains(&("memories/skills/ci/SKILL.md".into(), None)));
        assert!(edits.contains(&("memories/skills/build/SKILL.md".into(), Some("step\n".into()))));
        assert_eq!(
            std::fs::read_to_string(root.join("memories/MEMORY.md")).unwrap(),
            "# Memory\n- tea\n",
            "the disk is untouched"
        );
    }

    #[test]
    fn a_failing_command_leaves_nothing_and_owned_files_are_refused() {
        let (_dir, _root, mut tools) = tools();
        let err = tools
            .apply_commands(&[
                command(r#"{"command":"create","path":"memories/a.md","file_text":"x"}"#),
                command(r#"{"command":"delete","path":"memories/missing.md"}"#),
            ])
            .unwrap_err();
        assert_eq!(err, "memory edit: no such file or folder: memories/missing.md");
        assert!(tools.changed_files().is_empty());
        for bad in [
            r#"{"command":"delete","path":"memories/raw_memories/r.md"}"#,
            r#"{"command":"create","path":"memories/raw_memories.md","file_text":"x"}"#,
            r#"{"command":"delete","path":"memories"}"#,
            r#"{"command":"rename","old_path":"memories/MEMORY.md","new_path":"memories/phase_two_selection.json"}"#,
            r#"{"command":"create","path":"sessions/x.jsonl","file_text":"x"}"#,
        ] {
            let err = tools.apply_commands(&[command(bad)]).unwrap_err();
            assert!(err.contains("may not write") || err.contains("may only write"), "{bad}: {err}");
        }
        let err = tools
            .apply_commands(&[command(
                r#"{"command":"rename","old_path":"memories/MEMORY.md","new_path":"memories/skills/ci/SKILL.md"}"#,
            )])
            .unwrap_err();
        assert!(err.contains("already exists"), "{err}");
        let err = tools
            .apply_commands(&[command(
                r#"{"command":"rename","old_path":"memories/skills","new_path":"memories/skills/inner"}"#,
            )])
            .unwrap_err();
        assert!(err.contains("into itself"), "{err}");
        assert!(tools.changed_files().is_empty());
    }

    #[test]
    fn deleting_a_folder_deletes_its_files() {
        let (_dir, _root, mut tools) = tools();
        tools.apply_commands(&[command(r#"{"command":"delete","path":"memories/skills"}"#)]).unwrap();
        assert_eq!(tools.into_edits(), [("memories/skills/ci/SKILL.md".to_owned(), None)]);
    }
}
