//! The consolidation agent's tools (SPEC §5): `apply_patch`, `read_file`,
//! `list_files` and `search_files`, confined to the layout's folders.
//! Every answer, error or not, is text for the model; nothing here panics or
//! writes outside the memory folder.

pub mod apply_patch;
mod snapshot;

pub use snapshot::Snapshot;

use crate::llm::ToolSpec;
use crate::workspace::{confine, write_atomic};
use apply_patch::{DiffMode, OperationKind, apply_diff, parse_patch_input};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

const READ_LIMIT_LINES: usize = 2000;
const MAX_LISTED: usize = 1000;
const MAX_MATCHES: usize = 200;
/// Files only memoryd writes; relative to the memory folder.
const MEMORYD_OWNED: [&str; 3] = ["raw_memories", "raw_memories.md", "phase_two_selection.json"];

pub fn tool_specs() -> Vec<ToolSpec> {
    vec![
        ToolSpec {
            name: "apply_patch",
            description: "Create, update, move or delete files in the memory folder with a V4A patch (*** Begin Patch … *** End Patch). The whole patch applies or none of it.",
            parameters: json!({"type": "object", "properties": {"patch": {"type": "string", "description": "The patch text."}}, "required": ["patch"], "additionalProperties": false}),
        },
        ToolSpec {
            name: "read_file",
            description: "Read a text file of the memory or sessions folder, with line numbers. Long files come in slices: pass offset (first line, 1-based) and limit.",
            parameters: json!({"type": "object", "properties": {"path": {"type": "string"}, "offset": {"type": "integer", "minimum": 1}, "limit": {"type": "integer", "minimum": 1}}, "required": ["path"], "additionalProperties": false}),
        },
        ToolSpec {
            name: "list_files",
            description: "List the files under a folder of the memory folder (default: all of it).",
            parameters: json!({"type": "object", "properties": {"path": {"type": "string"}}, "additionalProperties": false}),
        },
        ToolSpec {
            name: "search_files",
            description: "Find lines matching a regular expression (or plain text) in the memory folder or a folder or file under it; answers path:line: text.",
            parameters: json!({"type": "object", "properties": {"pattern": {"type": "string"}, "path": {"type": "string"}}, "required": ["pattern"], "additionalProperties": false}),
        },
    ]
}

/// Normalised relative path: `a//b/./c` → `a/b/c`; `None` for absolute paths
/// or any `..`.
fn normalize(path: &str) -> Option<String> {
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

fn is_under(path: &str, dir: &str) -> bool {
    path == dir || path.strip_prefix(dir).is_some_and(|rest| rest.starts_with('/'))
}

/// The tools of one phase-two run over one workspace.
pub struct MemoryTools {
    root: PathBuf,
    memories: String,
    sessions: String,
    snapshot: Snapshot,
    changed: Vec<String>,
    /// The job whose temporary files these writes make.
    owner: uuid::Uuid,
}

impl MemoryTools {
    /// `memories` and `sessions` are the layout's normalised directories.
    pub fn new(root: PathBuf, memories: &str, sessions: &str, snapshot: Snapshot, owner: uuid::Uuid) -> Self {
        Self {
            root,
            memories: memories.to_owned(),
            sessions: sessions.to_owned(),
            snapshot,
            changed: Vec::new(),
            owner,
        }
    }

    /// The files this run wrote or deleted, relative to the workspace root.
    pub fn changed_files(&self) -> &[String] {
        &self.changed
    }

    pub fn into_snapshot(self) -> Snapshot {
        self.snapshot
    }

    /// Writes a file memoryd itself produces in this run (`raw_memories.md`,
    /// or the extractive provider's files), recorded like any edit.
    pub fn write_owned(&mut self, rel: &str, text: &str) -> std::io::Result<()> {
        let mut overlay = BTreeMap::new();
        overlay.insert(rel.to_owned(), Some(text.to_owned()));
        self.commit(overlay)
    }

    /// A readable path: under the memory or the sessions folder.
    fn readable(&self, path: &str) -> Result<(String, PathBuf), String> {
        let rel = normalize(path)
            .ok_or_else(|| format!("path must be relative to the workspace root and stay inside it: {path}"))?;
        if !is_under(&rel, &self.memories) && !is_under(&rel, &self.sessions) {
            return Err(format!("path is outside the memory and sessions folders: {path}"));
        }
        let abs = confine(&self.root, &rel).map_err(|_| format!("path must not escape root: {path}"))?;
        Ok((rel, abs))
    }

    /// A writable path: under the memory folder, not one memoryd maintains.
    fn writable(&self, path: &str) -> Result<(String, PathBuf), String> {
        if path.is_empty() {
            return Err("apply_patch path must be non-empty".into());
        }
        let rel = normalize(path).ok_or_else(|| format!("apply_patch path must not escape root: {path}"))?;
        let Some(inside) = rel.strip_prefix(&self.memories).and_then(|r| r.strip_prefix('/')) else {
            return Err(format!("apply_patch may only write under {}/: {path}", self.memories));
        };
        if MEMORYD_OWNED.iter().any(|owned| is_under(inside, owned)) {
            return Err(format!("apply_patch may not write {path}: memoryd maintains it"));
        }
        let abs = confine(&self.root, &rel).map_err(|_| format!("apply_patch path must not escape root: {path}"))?;
        Ok((rel, abs))
    }

    /// Runs one tool call; the answer is the tool output for the model.
    pub fn call(&mut self, name: &str, arguments: &str) -> String {
        let args: Value = match serde_json::from_str(arguments) {
            Ok(v) => v,
            Err(_) if name == "apply_patch" => return self.apply_patch(arguments),
            Err(e) => return format!("{name}: arguments are not valid JSON: {e}"),
        };
        let text = |key: &str| args.get(key).and_then(Value::as_str);
        let result = match name {
            "apply_patch" => match text("patch").or(text("input")) {
                Some(patch) => Ok(self.apply_patch(patch)),
                None => Ok(self.apply_patch(arguments)),
            },
            "read_file" => match text("path") {
                Some(path) => self.read_file(
                    path,
                    args.get("offset").and_then(Value::as_u64),
                    args.get("limit").and_then(Value::as_u64),
                ),
                None => Err("read_file needs a path".into()),
            },
            "list_files" => self.list_files(text("path")),
            "search_files" => match text("pattern") {
                Some(pattern) => self.search_files(pattern, text("path")),
                None => Err("search_files needs a pattern".into()),
            },
            other => Err(format!("unknown tool: {other}")),
        };
        result.unwrap_or_else(|e| e)
    }

    fn apply_patch(&mut self, input: &str) -> String {
        match self.try_apply_patch(input) {
            Ok(out) | Err(out) => out,
        }
    }

    /// Validates every path, computes every result in memory, then writes:
    /// the whole patch or none of it.
    fn try_apply_patch(&mut self, input: &str) -> Result<String, String> {
        let ops = parse_patch_input(input)?;
        let mut targets = BTreeMap::new();
        for op in &ops {
            for path in std::iter::once(&op.path).chain(op.move_to.as_ref()) {
                let (rel, abs) = self.writable(path)?;
                targets.insert(path.clone(), (rel, abs));
            }
        }
        let mut overlay: BTreeMap<String, Option<String>> = BTreeMap::new();
        let current = |overlay: &BTreeMap<String, Option<String>>,
                       rel: &str,
                       abs: &Path,
                       shown: &str|
         -> Result<Option<String>, String> {
            if let Some(content) = overlay.get(rel) {
                return Ok(content.clone());
            }
            match std::fs::read(abs) {
                Ok(bytes) => String::from_utf8(bytes)
                    .map(Some)
                    .map_err(|_| format!("apply_patch could not decode file: {shown}")),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
                Err(_) if abs.is_dir() => Err(format!("apply_patch could not decode file: {shown}")),
                Err(e) => Err(format!("apply_patch could not read {shown}: {e}")),
            }
        };
        let mut outputs = Vec::new();
        for op in &ops {
            let (rel, abs) = &targets[&op.path];
            match op.kind {
                OperationKind::Delete => {
                    current(&overlay, rel, abs, &op.path)?
                        .ok_or_else(|| format!("apply_patch missing file: {}", op.path))?;
                    overlay.insert(rel.clone(), None);
                    outputs.push(format!("Deleted {}", op.path));
                }
                OperationKind::Create => {
                    if current(&overlay, rel, abs, &op.path)?.is_some() {
                        return Err(format!(
                            "apply_patch cannot create {} because it already exists. Use an update_file operation to change an existing file.",
                            op.path
                        ));
                    }
                    overlay.insert(rel.clone(), Some(apply_diff("", &op.diff, DiffMode::Create)?));
                    outputs.push(format!("Created {}", op.path));
                }
                OperationKind::Update => {
                    let old = current(&overlay, rel, abs, &op.path)?
                        .ok_or_else(|| format!("apply_patch missing file: {}", op.path))?;
                    let new = apply_diff(&old, &op.diff, DiffMode::Update)?;
                    match &op.move_to {
                        Some(to) => {
                            let (to_rel, _) = &targets[to];
                            if to_rel != rel {
                                overlay.insert(rel.clone(), None);
                            }
                            overlay.insert(to_rel.clone(), Some(new));
                            outputs.push(format!("Updated {}\nMoved {} to {to}", op.path, op.path));
                        }
                        None => {
                            overlay.insert(rel.clone(), Some(new));
                            outputs.push(format!("Updated {}", op.path));
                        }
                    }
                }
            }
        }
        self.commit(overlay).map_err(|e| format!("apply_patch could not write the files: {e}"))?;
        Ok(outputs.join("\n"))
    }

    fn commit(&mut self, overlay: BTreeMap<String, Option<String>>) -> std::io::Result<()> {
        for rel in overlay.keys() {
            self.snapshot.record(&self.root, rel)?;
        }
        for (rel, content) in overlay {
            let abs = confine(&self.root, &rel).map_err(std::io::Error::other)?;
            match content {
                Some(text) => write_atomic(&abs, text.as_bytes(), self.owner)?,
                None => match std::fs::remove_file(&abs) {
                    Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
                    _ => {}
                },
            }
            if !self.changed.contains(&rel) {
                self.changed.push(rel);
            }
        }
        Ok(())
    }

    fn read_file(&self, path: &str, offset: Option<u64>, limit: Option<u64>) -> Result<String, String> {
        let (_, abs) = self.readable(path)?;
        let bytes = std::fs::read(&abs).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => format!("read_file: no such file: {path}"),
            _ if abs.is_dir() => format!("read_file: {path} is a folder; use list_files"),
            _ => format!("read_file: cannot read {path}: {e}"),
        })?;
        let text = String::from_utf8_lossy(&bytes);
        let lines: Vec<&str> = text.lines().collect();
        if lines.is_empty() {
            return Ok(format!("{path} is empty."));
        }
        let start = offset.unwrap_or(1).max(1) as usize;
        let limit = limit.map_or(READ_LIMIT_LINES, |l| l.max(1) as usize);
        if start > lines.len() {
            return Err(format!("read_file: {path} has {} lines; offset {start} is past the end", lines.len()));
        }
        let end = (start - 1 + limit).min(lines.len());
        let mut out: String =
            lines[start - 1..end].iter().enumerate().map(|(i, l)| format!("{:>6}\t{l}\n", start + i)).collect();
        if end < lines.len() {
            out.push_str(&format!("… {} more lines; read on with offset {}\n", lines.len() - end, end + 1));
        }
        Ok(out)
    }

    fn files_under(&self, dir: &Path, out: &mut Vec<String>) {
        let Ok(entries) = std::fs::read_dir(dir) else { return };
        let mut entries: Vec<_> = entries.flatten().collect();
        entries.sort_by_key(|e| e.file_name());
        for entry in entries {
            let Ok(kind) = entry.file_type() else { continue };
            if kind.is_dir() {
                self.files_under(&entry.path(), out);
            } else if kind.is_file()
                && let Ok(rel) = entry.path().strip_prefix(&self.root)
            {
                out.push(rel.to_string_lossy().into_owned());
            }
        }
    }

    fn list_files(&self, path: Option<&str>) -> Result<String, String> {
        let path = path.unwrap_or(&self.memories);
        let (rel, abs) = self.readable(path)?;
        if !is_under(&rel, &self.memories) {
            return Err(format!("list_files lists the memory folder only: {path}"));
        }
        let mut files = Vec::new();
        self.files_under(&abs, &mut files);
        if files.is_empty() {
            return Ok(format!("No files under {path}."));
        }
        let more = files.len().saturating_sub(MAX_LISTED);
        files.truncate(MAX_LISTED);
        let mut out = files.join("\n");
        if more > 0 {
            out.push_str(&format!("\n… {more} more files"));
        }
        Ok(out)
    }

    fn search_files(&self, pattern: &str, path: Option<&str>) -> Result<String, String> {
        let path = path.unwrap_or(&self.memories);
        let (_, abs) = self.readable(path)?;
        let matcher = regex::Regex::new(pattern).unwrap_or_else(|_| {
            regex::Regex::new(&regex::escape(pattern)).expect("an escaped pattern always compiles")
        });
        let mut files = Vec::new();
        if abs.is_file() {
            files.push(abs.strip_prefix(&self.root).map(|r| r.to_string_lossy().into_owned()).unwrap_or_default());
        } else {
            self.files_under(&abs, &mut files);
        }
        let mut out = Vec::new();
        let mut total = 0;
        for file in files {
            let Ok(bytes) = std::fs::read(self.root.join(&file)) else { continue };
            for (i, line) in String::from_utf8_lossy(&bytes).lines().enumerate() {
                if matcher.is_match(line) {
                    total += 1;
                    if out.len() < MAX_MATCHES {
                        let shown: String = line.chars().take(300).collect();
                        out.push(format!("{file}:{}: {shown}", i + 1));
                    }
                }
            }
        }
        if out.is_empty() {
            return Ok(format!("No lines match {pattern:?}."));
        }
        if total > out.len() {
            out.push(format!("… {} more matches", total - out.len()));
        }
        Ok(out.join("\n"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Fixture {
        _dir: tempfile::TempDir,
        _snapshots: tempfile::TempDir,
        root: PathBuf,
        tools: MemoryTools,
    }

    fn fixture() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let snapshots = tempfile::tempdir().unwrap();
        let root = dir.path().join("ws");
        for d in ["memories/raw_memories", "memories/rollout_summaries", "memories/skills", "sessions"] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        std::fs::write(root.join("memories/MEMORY.md"), "").unwrap();
        std::fs::write(root.join("memories/memory_summary.md"), "").unwrap();
        std::fs::write(root.join("memories/raw_memories.md"), "raw").unwrap();
        std::fs::write(root.join("memories/raw_memories/r.md"), "rollout_id: r\n").unwrap();
        std::fs::write(root.join("sessions/r.jsonl"), "{\"a\":1}\n").unwrap();
        let snapshot = Snapshot::create(snapshots.path().join("job")).unwrap();
        let tools = MemoryTools::new(root.clone(), "memories", "sessions", snapshot, uuid::Uuid::new_v4());
        Fixture { _dir: dir, _snapshots: snapshots, root, tools }
    }

    fn patch(tools: &mut MemoryTools, body: &str) -> String {
        tools.call("apply_patch", &json!({"patch": format!("*** Begin Patch\n{body}\n*** End Patch")}).to_string())
    }

    #[test]
    fn the_sdk_json_update_writes_memory() {
        let mut f = fixture();
        let out = f
            .tools
            .call("apply_patch", r#"{"type":"update_file","path":"memories/MEMORY.md","diff":"@@\n+memory entry\n"}"#);
        assert_eq!(out, "Updated memories/MEMORY.md");
        assert_eq!(std::fs::read_to_string(f.root.join("memories/MEMORY.md")).unwrap(), "memory entry\n");
        assert_eq!(f.tools.changed_files(), ["memories/MEMORY.md"]);
    }

    #[test]
    fn hostile_paths_are_refused_and_nothing_changes() {
        let mut f = fixture();
        let outside = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(outside.path(), f.root.join("memories/skills/escape")).unwrap();
        let cases = [
            ("*** Add File: ../../x\n+x", "apply_patch path must not escape root: ../../x"),
            ("*** Add File: /etc/passwd\n+x", "apply_patch path must not escape root: /etc/passwd"),
            ("*** Add File: sessions/x.jsonl\n+x", "apply_patch may only write under memories/: sessions/x.jsonl"),
            (
                "*** Update File: memories/raw_memories.md\n@@\n+x",
                "apply_patch may not write memories/raw_memories.md: memoryd maintains it",
            ),
            (
                "*** Add File: memories/raw_memories/new.md\n+x",
                "apply_patch may not write memories/raw_memories/new.md: memoryd maintains it",
            ),
            (
                "*** Add File: memories/phase_two_selection.json\n+x",
                "apply_patch may not write memories/phase_two_selection.json: memoryd maintains it",
            ),
            (
                "*** Add File: memories/skills/escape/pwned.md\n+x",
                "apply_patch path must not escape root: memories/skills/escape/pwned.md",
            ),
            (
                "*** Add File: memories/../../other-tenant/default/memories/MEMORY.md\n+x",
                "apply_patch path must not escape root: memories/../../other-tenant/default/memories/MEMORY.md",
            ),
        ];
        for (body, expected) in cases {
            assert_eq!(patch(&mut f.tools, body), expected);
        }
        assert!(std::fs::read_dir(outside.path()).unwrap().next().is_none());
        assert!(!f.root.join("sessions/x.jsonl").exists());
        assert_eq!(std::fs::read_to_string(f.root.join("memories/raw_memories.md")).unwrap(), "raw");
        assert!(f.tools.changed_files().is_empty());
        assert!(f.tools.call("read_file", r#"{"path":"/etc/passwd"}"#).contains("must be relative"));
        assert!(f.tools.call("read_file", r#"{"path":"../x"}"#).contains("must be relative"));
        assert!(f.tools.call("read_file", r#"{"path":"memories/skills/escape/a"}"#).contains("must not escape root"));
        assert!(f.tools.call("list_files", r#"{"path":"sessions"}"#).contains("memory folder only"));
    }

    #[test]
    fn a_failing_operation_leaves_every_file_as_it_was() {
        let mut f = fixture();
        let out = patch(
            &mut f.tools,
            "*** Update File: memories/MEMORY.md\n@@\n+first\n*** Delete File: memories/missing.md",
        );
        assert_eq!(out, "apply_patch missing file: memories/missing.md");
        assert_eq!(std::fs::read_to_string(f.root.join("memories/MEMORY.md")).unwrap(), "");
        let out = patch(&mut f.tools, "*** Add File: memories/MEMORY.md\n+again");
        assert!(out.starts_with("apply_patch cannot create memories/MEMORY.md because it already exists."), "{out}");
    }

    #[test]
    fn operations_see_each_other_and_moves_work() {
        let mut f = fixture();
        let out = patch(
            &mut f.tools,
            "*** Add File: memories/skills/ci/SKILL.md\n+# CI\n+\n*** Update File: memories/skills/ci/SKILL.md\n*** Move to: memories/skills/ci/README.md\n@@\n # CI\n+step one",
        );
        assert_eq!(
            out,
            "Created memories/skills/ci/SKILL.md\nUpdated memories/skills/ci/SKILL.md\nMoved memories/skills/ci/SKILL.md to memories/skills/ci/README.md"
        );
        assert!(!f.root.join("memories/skills/ci/SKILL.md").exists());
        assert_eq!(std::fs::read_to_string(f.root.join("memories/skills/ci/README.md")).unwrap(), "# CI\nstep one\n");
    }

    #[test]
    fn read_list_and_search() {
        let mut f = fixture();
        std::fs::write(f.root.join("memories/MEMORY.md"), "alpha\nbeta tea\ngamma\n").unwrap();
        assert_eq!(
            f.tools.call("read_file", r#"{"path":"memories/MEMORY.md","offset":2,"limit":1}"#),
            "     2\tbeta tea\n… 1 more lines; read on with offset 3\n"
        );
        assert!(f.tools.call("read_file", r#"{"path":"sessions/r.jsonl"}"#).contains("{\"a\":1}"));
        assert!(f.tools.call("read_file", r#"{"path":"memories/nope.md"}"#).contains("no such file"));
        let listed = f.tools.call("list_files", "{}");
        assert!(listed.contains("memories/MEMORY.md") && listed.contains("memories/raw_memories/r.md"));
        assert_eq!(f.tools.call("search_files", r#"{"pattern":"t[e]a"}"#), "memories/MEMORY.md:2: beta tea");
        assert_eq!(f.tools.call("search_files", r#"{"pattern":"(unclosed"}"#), "No lines match \"(unclosed\".");
        assert!(
            f.tools
                .call("search_files", r#"{"pattern":"a","path":"sessions/r.jsonl"}"#)
                .contains("sessions/r.jsonl:1:")
        );
        assert_eq!(f.tools.call("delete_everything", "{}"), "unknown tool: delete_everything");
    }

    #[test]
    fn the_snapshot_restores_what_the_run_changed() {
        let mut f = fixture();
        std::fs::write(f.root.join("memories/MEMORY.md"), "before\n").unwrap();
        patch(
            &mut f.tools,
            "*** Update File: memories/MEMORY.md\n@@\n-before\n+after\n*** Add File: memories/skills/new.md\n+x",
        );
        patch(&mut f.tools, "*** Delete File: memories/memory_summary.md");
        assert_eq!(std::fs::read_to_string(f.root.join("memories/MEMORY.md")).unwrap(), "after\n");
        let root = f.root.clone();
        f.tools.into_snapshot().restore(&root).unwrap();
        assert_eq!(std::fs::read_to_string(root.join("memories/MEMORY.md")).unwrap(), "before\n");
        assert!(!root.join("memories/skills/new.md").exists());
        assert_eq!(std::fs::read_to_string(root.join("memories/memory_summary.md")).unwrap(), "");
    }
}
