//! The consolidation agent's tools (SPEC §5): `apply_patch`, `read_file`,
//! `list_files` and `search_files`, confined to the layout's folders.
//! Every answer, error or not, is text for the model; nothing here panics.
//! The tools never write to disk: edits go to a private working copy (an
//! overlay of the memory folder that the read tools see too), which the run
//! hands over as plain data to be published at once when it succeeds
//! (SPEC §4: readers never see a consolidation half done).

pub mod apply_patch;
pub mod commands;
pub mod edit;
pub mod passage_index;
pub mod rank;
pub mod read;
pub mod search;

use crate::llm::ToolSpec;
use crate::workspace::confine;
use apply_patch::{DiffMode, OperationKind, PatchOperation, apply_diff, parse_patch_input};
use search::MAX_MATCHES;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

const READ_LIMIT_LINES: usize = 2000;
/// One unpaged listing of the working copy (the prompt says so); the running
/// agent's listing pages instead, `read::MAX_LISTED` entries a page.
const MAX_LISTED: usize = 1000;
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
            description: "Read a text file of the memory or sessions folder, with line numbers: 2,000 lines from offset (first line, 1-based; default 1) unless limit says otherwise. A longer file ends with a line saying which offset reads on.",
            parameters: json!({"type": "object", "properties": {"path": {"type": "string"}, "offset": {"type": "integer", "minimum": 1}, "limit": {"type": "integer", "minimum": 1}}, "required": ["path"], "additionalProperties": false}),
        },
        ToolSpec {
            name: "list_files",
            description: "List the files under a folder of the memory folder (default: all of it), each with its line count, at most 1,000.",
            parameters: json!({"type": "object", "properties": {"path": {"type": "string"}}, "additionalProperties": false}),
        },
        ToolSpec {
            name: "search_files",
            description: "Find lines matching a regular expression (or plain text) in the memory folder or a folder or file under it; answers path:line: text, at most 200 lines of 300 characters.",
            parameters: json!({"type": "object", "properties": {"pattern": {"type": "string"}, "path": {"type": "string"}}, "required": ["pattern"], "additionalProperties": false}),
        },
    ]
}

pub(crate) use crate::domain::memory_edit::normalize;

/// Whether the consolidation agent may write `path` (relative to the memory
/// folder): anything there but the files memoryd maintains.
pub fn agent_may_write(path: &str) -> bool {
    // A part named like memoryd's temporary files would be stored, yet hidden
    // from every listing and read, and removed by the next leftover sweep.
    let temporary = path.split('/').any(|part| crate::workspace::is_temporary_file(std::ffi::OsStr::new(part)));
    !temporary && !MEMORYD_OWNED.iter().any(|owned| is_under(path, owned))
}

/// Lines as `str::lines` counts them, which is how `read_file` numbers them.
fn line_count(bytes: &[u8]) -> usize {
    bytes.iter().filter(|b| **b == b'\n').count() + usize::from(!bytes.is_empty() && !bytes.ends_with(b"\n"))
}

fn is_under(path: &str, dir: &str) -> bool {
    path == dir || path.strip_prefix(dir).is_some_and(|rest| rest.starts_with('/'))
}

/// One file of a run's working copy: its new text, or `None` when deleted.
/// Paths are relative to the workspace root.
pub type FileEdit = (String, Option<String>);

/// The tools of one phase-two run over one workspace.
pub struct MemoryTools {
    root: PathBuf,
    memories: String,
    sessions: String,
    /// The run's edits, in the order the files were first changed.
    edits: Vec<FileEdit>,
    /// What the read tools answer is redacted with the layout's rules: the
    /// model must not read a secret from a rollout or an unredacted file.
    redactor: Option<std::sync::Arc<crate::domain::redact::Redactor>>,
}

impl MemoryTools {
    /// `memories` and `sessions` are the layout's normalised directories.
    pub fn new(root: PathBuf, memories: &str, sessions: &str) -> Self {
        Self { root, memories: memories.to_owned(), sessions: sessions.to_owned(), edits: Vec::new(), redactor: None }
    }

    /// The same tools, their read answers redacted with `redactor`.
    pub fn redacting(mut self, redactor: std::sync::Arc<crate::domain::redact::Redactor>) -> Self {
        self.redactor = Some(redactor);
        self
    }

    /// A read tool's answer as the model may see it: redacted, rollout
    /// lines (JSON) with their escaped strings matched decoded.
    fn redacted(&self, answer: String, reads_sessions: bool) -> String {
        let Some(redactor) = self.redactor.as_ref().filter(|r| !r.is_off()) else { return answer };
        let mut counts = crate::domain::redact::Counts::new();
        let out = if reads_sessions {
            redactor.redact_jsonl(&answer, &mut counts)
        } else {
            redactor.redact_text(&answer, &mut counts)
        };
        crate::metrics::redactions("tool_output", &counts);
        out
    }

    /// The files this run wrote or deleted, relative to the workspace root.
    pub fn changed_files(&self) -> Vec<String> {
        self.edits.iter().map(|(rel, _)| rel.clone()).collect()
    }

    /// The working copy's changes, for publishing.
    pub fn into_edits(self) -> Vec<FileEdit> {
        self.edits
    }

    /// The working copy's bytes of `rel` (relative to the workspace root),
    /// confined like every read; `None` when absent.
    pub fn content_of(&self, rel: &str) -> Result<Option<Vec<u8>>, String> {
        let abs = confine(&self.root, rel).map_err(|_| format!("path must not escape root: {rel}"))?;
        self.current(rel, &abs).map_err(|e| format!("cannot read {rel}: {e}"))
    }

    /// The working copy's changes, each shown to `visit` with what the disk
    /// holds now (before) and what the change makes of it (after).
    pub fn into_edits_with_disk(self, mut visit: impl FnMut(&str, Option<&[u8]>, Option<&str>)) -> Vec<FileEdit> {
        for (rel, after) in &self.edits {
            let before = confine(&self.root, rel).ok().and_then(|abs| std::fs::read(abs).ok());
            visit(rel, before.as_deref(), after.as_deref());
        }
        self.edits
    }

    /// Writes a file memoryd itself produces in this run (`raw_memories.md`,
    /// or the extractive provider's files), recorded like any edit.
    pub fn write_owned(&mut self, rel: &str, text: &str) {
        self.commit(BTreeMap::from([(rel.to_owned(), Some(text.to_owned()))]));
    }

    /// Deletes a file from the working copy (a forget removes what the agent
    /// must no longer see), recorded like any edit.
    pub fn delete_owned(&mut self, rel: &str) {
        self.commit(BTreeMap::from([(rel.to_owned(), None)]));
    }

    /// The working copy's content of `rel`: the run's edit, else the disk.
    fn current(&self, rel: &str, abs: &Path) -> std::io::Result<Option<Vec<u8>>> {
        if let Some((_, edit)) = self.edits.iter().find(|(r, _)| r == rel) {
            return Ok(edit.as_ref().map(|text| text.as_bytes().to_vec()));
        }
        match std::fs::read(abs) {
            Ok(bytes) => Ok(Some(bytes)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Whether a read of `path` (default: the memory folder) reaches rollout files.
    fn names_sessions(&self, path: Option<&str>) -> bool {
        path.and_then(normalize).is_some_and(|rel| is_under(&rel, &self.sessions) || is_under(&self.sessions, &rel))
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
    /// `tool` names the tool in the error.
    fn writable(&self, tool: &str, path: &str) -> Result<(String, PathBuf), String> {
        if path.is_empty() {
            return Err(format!("{tool} path must be non-empty"));
        }
        let rel = normalize(path).ok_or_else(|| format!("{tool} path must not escape root: {path}"))?;
        let Some(inside) = rel.strip_prefix(&self.memories).and_then(|r| r.strip_prefix('/')) else {
            return Err(format!("{tool} may only write under {}/: {path}", self.memories));
        };
        if !agent_may_write(inside) {
            return Err(format!("{tool} may not write {path}: memoryd maintains it"));
        }
        let abs = confine(&self.root, &rel).map_err(|_| format!("{tool} path must not escape root: {path}"))?;
        Ok((rel, abs))
    }

    /// The working copy's text of a writable file (`None`: absent); `shown`
    /// is how the caller named it, for errors.
    fn current_text(
        &self,
        tool: &str,
        overlay: &BTreeMap<String, Option<String>>,
        rel: &str,
        abs: &Path,
        shown: &str,
    ) -> Result<Option<String>, String> {
        if let Some(content) = overlay.get(rel) {
            return Ok(content.clone());
        }
        match self.current(rel, abs) {
            Ok(Some(bytes)) => {
                String::from_utf8(bytes).map(Some).map_err(|_| format!("{tool} could not decode file: {shown}"))
            }
            Ok(None) => Ok(None),
            Err(_) if abs.is_dir() => Err(format!("{tool} could not decode file: {shown}")),
            Err(e) => Err(format!("{tool} could not read {shown}: {e}")),
        }
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
                Some(path) => self
                    .read_file(
                        path,
                        args.get("offset").and_then(Value::as_u64),
                        args.get("limit").and_then(Value::as_u64),
                    )
                    .map(|answer| self.redacted(answer, self.names_sessions(Some(path)))),
                None => Err("read_file needs a path".into()),
            },
            "list_files" => self.list_files(text("path")),
            "search_files" => match text("pattern") {
                Some(pattern) => self
                    .search_files(pattern, text("path"))
                    .map(|answer| self.redacted(answer, self.names_sessions(text("path")))),
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

    fn try_apply_patch(&mut self, input: &str) -> Result<String, String> {
        self.apply_patch_operations(&parse_patch_input(input)?)
    }

    /// Validates every path, computes every result in memory, then writes:
    /// the whole patch or none of it.
    pub fn apply_patch_operations(&mut self, ops: &[PatchOperation]) -> Result<String, String> {
        const TOOL: &str = "apply_patch";
        let mut targets = BTreeMap::new();
        for op in ops {
            for path in std::iter::once(&op.path).chain(op.move_to.as_ref()) {
                let (rel, abs) = self.writable(TOOL, path)?;
                targets.insert(path.clone(), (rel, abs));
            }
        }
        let mut overlay: BTreeMap<String, Option<String>> = BTreeMap::new();
        let mut outputs = Vec::new();
        for op in ops {
            let (rel, abs) = &targets[&op.path];
            let current = self.current_text(TOOL, &overlay, rel, abs, &op.path)?;
            match op.kind {
                OperationKind::Delete => {
                    current.ok_or_else(|| format!("apply_patch missing file: {}", op.path))?;
                    overlay.insert(rel.clone(), None);
                    outputs.push(format!("Deleted {}", op.path));
                }
                OperationKind::Create => {
                    if current.is_some() {
                        return Err(format!(
                            "apply_patch cannot create {} because it already exists. Use an update_file operation to change an existing file.",
                            op.path
                        ));
                    }
                    overlay.insert(rel.clone(), Some(apply_diff("", &op.diff, DiffMode::Create)?));
                    outputs.push(format!("Created {}", op.path));
                }
                OperationKind::Update => {
                    let old = current.ok_or_else(|| format!("apply_patch missing file: {}", op.path))?;
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
        self.commit(overlay);
        Ok(outputs.join("\n"))
    }

    fn commit(&mut self, overlay: BTreeMap<String, Option<String>>) {
        for (rel, content) in overlay {
            match self.edits.iter_mut().find(|(r, _)| *r == rel) {
                Some((_, edit)) => *edit = content,
                None => self.edits.push((rel, content)),
            }
        }
    }

    fn read_file(&self, path: &str, offset: Option<u64>, limit: Option<u64>) -> Result<String, String> {
        let (rel, abs) = self.readable(path)?;
        let bytes = self
            .current(&rel, &abs)
            .map_err(|e| {
                if abs.is_dir() {
                    format!("read_file: {path} is a folder; use list_files")
                } else {
                    format!("read_file: cannot read {path}: {e}")
                }
            })?
            .ok_or_else(|| format!("read_file: no such file: {path}"))?;
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
        Ok(read::numbered_lines(lines[start - 1..end].iter().copied(), start as u64, lines.len() as u64))
    }

    /// The working copy's files under `dir` (relative to the workspace root),
    /// sorted: those on disk that the run did not delete, and those it added.
    fn files_under(&self, dir: &str) -> Vec<String> {
        let mut files = Vec::new();
        if let Ok(abs) = confine(&self.root, dir) {
            self.disk_files_under(&abs, &mut files);
        }
        for (rel, edit) in &self.edits {
            let listed = files.iter().position(|f| f == rel);
            match (edit, listed) {
                (Some(_), None) if is_under(rel, dir) => files.push(rel.clone()),
                (None, Some(at)) => {
                    files.remove(at);
                }
                _ => {}
            }
        }
        files.sort();
        files
    }

    fn disk_files_under(&self, dir: &Path, out: &mut Vec<String>) {
        let Ok(entries) = std::fs::read_dir(dir) else { return };
        for entry in entries.flatten() {
            let Ok(kind) = entry.file_type() else { continue };
            if kind.is_dir() {
                self.disk_files_under(&entry.path(), out);
            } else if kind.is_file()
                && let Ok(rel) = entry.path().strip_prefix(&self.root)
            {
                out.push(rel.to_string_lossy().into_owned());
            }
        }
    }

    fn list_files(&self, path: Option<&str>) -> Result<String, String> {
        let path = path.unwrap_or(&self.memories);
        let (rel, _) = self.readable(path)?;
        if !is_under(&rel, &self.memories) {
            return Err(format!("list_files lists the memory folder only: {path}"));
        }
        let mut files = self.files_under(&rel);
        if files.is_empty() {
            return Ok(format!("No files under {path}."));
        }
        let more = files.len().saturating_sub(MAX_LISTED);
        files.truncate(MAX_LISTED);
        let mut out = files.iter().map(|file| self.listed(file)).collect::<Vec<_>>().join("\n");
        if more > 0 {
            out.push_str(&format!("\n… {more} more files"));
        }
        Ok(out)
    }

    /// One line of a listing: the path and its line count, what the SDK's
    /// agent learns with `rg --files` and `wc -l` (SPEC §5).
    fn listed(&self, file: &str) -> String {
        let bytes = confine(&self.root, file).ok().and_then(|abs| self.current(file, &abs).ok().flatten());
        match bytes {
            Some(bytes) => match line_count(&bytes) {
                1 => format!("{file} (1 line)"),
                n => format!("{file} ({n} lines)"),
            },
            None => file.to_owned(),
        }
    }

    fn search_files(&self, pattern: &str, path: Option<&str>) -> Result<String, String> {
        let path = path.unwrap_or(&self.memories);
        let (rel, abs) = self.readable(path)?;
        let matcher = regex::Regex::new(pattern).unwrap_or_else(|_| {
            regex::Regex::new(&regex::escape(pattern)).expect("an escaped pattern always compiles")
        });
        let files = match self.current(&rel, &abs) {
            Ok(Some(_)) => vec![rel],
            _ => self.files_under(&rel),
        };
        let mut out = Vec::new();
        let mut total = 0;
        for file in files {
            let Ok(Some(bytes)) = confine(&self.root, &file).and_then(|abs| Ok(self.current(&file, &abs)?)) else {
                continue;
            };
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
#[path = "tests.rs"]
mod tests;
