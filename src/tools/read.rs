//! The running agent's read tools (SPEC §2.10): list, read and search a
//! layout's memory folder on disk, as the HTTP routes and MCP serve them.
//! Paths here are relative to the memory folder and already confined by
//! the caller; memoryd's own temporary files and symlinks are never shown.

use crate::domain::ids::sha256_hex;
use crate::workspace::is_temporary_file;
use chrono::{DateTime, Utc};
use serde::Serialize;
use std::path::Path;

/// Entries a listing page holds at most (Codex's limit).
pub const MAX_LISTED: usize = 2000;
/// A read returns at most this many bytes (20,000 tokens at 4 bytes each).
pub const MAX_READ_BYTES: usize = 80_000;

#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Invalid(String),
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[schemars(inline)]
#[serde(rename_all = "snake_case")]
pub enum EntryKind {
    File,
    Dir,
}

#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct MemoryEntry {
    /// Relative to memories_dir.
    pub path: String,
    pub kind: EntryKind,
    /// null for a folder.
    pub bytes: Option<u64>,
    pub modified_at: Option<DateTime<Utc>>,
}

/// How much one answer may hold. An HTTP answer counts the memory's text
/// alone against its cap; an MCP result is text a model reads, so each line
/// there is also charged what its rendering adds (a line number, a path).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    pub bytes: usize,
    pub per_line: usize,
}

impl Budget {
    /// What a line of `len` bytes costs.
    pub fn line(&self, len: usize) -> usize {
        len + self.per_line
    }
}

/// One listing page: entries after `after` (a path), sorted by path.
pub struct ListPage {
    pub entries: Vec<MemoryEntry>,
    /// The last path of a full page, to continue after.
    pub next_after: Option<String>,
}

fn walk_error(e: std::io::Error, shown: &str) -> ReadError {
    if e.kind() == std::io::ErrorKind::NotFound {
        ReadError::NotFound(format!("No file or folder {shown} in the memory folder."))
    } else {
        ReadError::Io(e)
    }
}

/// Every entry under `dir` (relative to `memory_root`, `""` for all of it),
/// recursively: the file itself when `dir` is a file. Without `sizes`, no
/// file is stat'ed (a search needs only the names: the kind comes from the
/// directory listing itself).
pub(super) fn entries_under(memory_root: &Path, dir: &str, sizes: bool) -> Result<Vec<MemoryEntry>, ReadError> {
    let start = if dir.is_empty() { memory_root.to_path_buf() } else { memory_root.join(dir) };
    let meta = match std::fs::symlink_metadata(&start) {
        // A layout's memory folder appears with its first segment: until then it is empty.
        Err(e) if dir.is_empty() && e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        other => other.map_err(|e| walk_error(e, dir))?,
    };
    if meta.is_file() {
        return Ok(vec![entry(dir.to_owned(), &meta)]);
    }
    if !meta.is_dir() {
        return Err(ReadError::NotFound(format!("No file or folder {dir} in the memory folder.")));
    }
    let mut found = Vec::new();
    let mut pending = vec![start];
    while let Some(folder) = pending.pop() {
        let listed = match std::fs::read_dir(&folder) {
            Ok(listed) => listed,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e.into()),
        };
        for item in listed {
            let item = item?;
            let Ok(kind) = item.file_type() else { continue };
            if is_temporary_file(&item.file_name()) || !(kind.is_file() || kind.is_dir()) {
                continue;
            }
            let Ok(relative) = item.path().strip_prefix(memory_root).map(|p| p.to_string_lossy().into_owned()) else {
                continue;
            };
            if kind.is_dir() {
                pending.push(item.path());
            }
            if sizes {
                let Ok(meta) = item.metadata() else { continue };
                found.push(entry(relative, &meta));
            } else {
                let kind = if kind.is_dir() { EntryKind::Dir } else { EntryKind::File };
                found.push(MemoryEntry { path: relative, kind, bytes: None, modified_at: None });
            }
        }
    }
    found.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(found)
}

fn entry(path: String, meta: &std::fs::Metadata) -> MemoryEntry {
    let kind = if meta.is_dir() { EntryKind::Dir } else { EntryKind::File };
    MemoryEntry {
        path,
        kind,
        bytes: (kind == EntryKind::File).then_some(meta.len()),
        modified_at: meta.modified().ok().map(DateTime::<Utc>::from),
    }
}

/// Every file of the memory folder, sorted by path.
pub fn files(memory_root: &Path) -> Result<Vec<MemoryEntry>, ReadError> {
    let mut all = entries_under(memory_root, "", true)?;
    all.retain(|e| e.kind == EntryKind::File);
    Ok(all)
}

/// `memory/list`: a page of the entries under `dir`: at most
/// [`MAX_LISTED`], and as many as `budget` holds (one at least).
pub fn list(memory_root: &Path, dir: &str, after: Option<&str>, budget: Budget) -> Result<ListPage, ReadError> {
    let mut remaining = entries_under(memory_root, dir, true)?
        .into_iter()
        .filter(|e| after.is_none_or(|after| e.path.as_str() > after))
        .peekable();
    let (mut entries, mut spent) = (Vec::new(), 0);
    while let Some(next) = remaining.peek() {
        let cost = budget.line(next.path.len());
        if entries.len() == MAX_LISTED || (!entries.is_empty() && spent + cost > budget.bytes) {
            break;
        }
        spent += cost;
        entries.extend(remaining.next());
    }
    let next_after = remaining.peek().is_some().then(|| entries.last().map(|e| e.path.clone())).flatten();
    Ok(ListPage { entries, next_after })
}

/// Lines as a model reads them best: numbered from `first`, then, when the
/// file (of `total` lines) goes on, how many lines are left and where to read on.
/// The running agent's `memory_read` and the consolidation agent's `read_file`
/// both answer so.
pub fn numbered_lines<'a>(lines: impl Iterator<Item = &'a str>, first: u64, total: u64) -> String {
    let mut shown = 0;
    let mut out = String::new();
    for (i, line) in lines.enumerate() {
        out.push_str(&format!("{:>6}\t{line}\n", first + i as u64));
        shown += 1;
    }
    let next = first + shown;
    if next <= total {
        out.push_str(&format!("… {} more lines; read on with offset {next}\n", total + 1 - next));
    }
    out
}

/// What `memory/read` answers.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
#[schemars(rename = "MemoryRead")]
pub struct FileSlice {
    pub path: String,
    pub text: String,
    pub offset: u64,
    pub lines: u64,
    pub total_lines: u64,
    /// The byte cap cut the slice before `limit` lines.
    pub truncated: bool,
    /// Of the whole file, for `expect` preconditions of an edit.
    pub sha256: String,
    /// Where in line `offset` the text starts (absent: at its start).
    #[serde(skip_serializing_if = "is_zero")]
    #[schemars(range(min = 0))]
    pub byte_offset: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// Which part of a file a read asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SliceRequest {
    /// The first line (1-based).
    pub offset: u64,
    /// Lines at most.
    pub limit: Option<u64>,
    /// The byte of the first line to start at (for a line longer than one answer holds).
    pub byte_offset: u64,
}

fn read_file(memory_root: &Path, path: &str) -> Result<(Vec<u8>, std::fs::Metadata), ReadError> {
    let abs = memory_root.join(path);
    let meta = std::fs::symlink_metadata(&abs).map_err(|e| walk_error(e, path))?;
    if meta.is_dir() {
        return Err(ReadError::Invalid(format!("{path} is a folder; list it with memory/list.")));
    }
    if !meta.is_file() || abs.file_name().is_some_and(is_temporary_file) {
        return Err(ReadError::NotFound(format!("No file {path} in the memory folder.")));
    }
    let bytes = std::fs::read(&abs).map_err(|e| walk_error(e, path))?;
    Ok((bytes, meta))
}

/// The SHA-256 of a file's bytes, remembered by the file's identity: memory
/// files are replaced by a rename (a new inode) and never written in place,
/// so an inode with the same length and modification time holds the same
/// bytes. A megabyte's digest costs most of a read otherwise.
fn file_sha256(meta: &std::fs::Metadata, bytes: &[u8]) -> String {
    use std::os::unix::fs::MetadataExt;
    /// A file's device, inode, modification time (s, ns) and length.
    type Identity = (u64, u64, i64, i64, u64);
    static DIGESTS: std::sync::LazyLock<moka::sync::Cache<Identity, String>> =
        std::sync::LazyLock::new(|| moka::sync::Cache::new(10_000));
    let identity = (meta.dev(), meta.ino(), meta.mtime(), meta.mtime_nsec(), meta.len());
    if meta.len() != bytes.len() as u64 {
        return sha256_hex(bytes);
    }
    DIGESTS.get_with(identity, || sha256_hex(bytes))
}

/// Where line `number` (1-based) of `text` starts; `None` past its end.
fn line_start(text: &str, number: u64) -> Option<usize> {
    let mut at = 0;
    for _ in 1..number {
        at += text[at..].find('\n')? + 1;
        if at >= text.len() {
            return None;
        }
    }
    Some(at)
}

fn count_lines(text: &str) -> u64 {
    let newlines = memchr::memchr_iter(b'\n', text.as_bytes()).count() as u64;
    newlines + u64::from(!text.is_empty() && !text.ends_with('\n'))
}

/// The file's text; invalid UTF-8 replaced (the check alone is far faster
/// than the replacing decoder, and almost every file passes it).
pub(super) fn decoded(bytes: &[u8]) -> std::borrow::Cow<'_, str> {
    match std::str::from_utf8(bytes) {
        Ok(text) => std::borrow::Cow::Borrowed(text),
        Err(_) => String::from_utf8_lossy(bytes),
    }
}

/// The budget of an HTTP listing: [`MAX_LISTED`] entries, whatever their length.
pub const HTTP_LIST: Budget = Budget { bytes: usize::MAX, per_line: 0 };

/// The budget of an HTTP read: [`MAX_READ_BYTES`] of the file's text.
pub const HTTP_READ: Budget = Budget { bytes: MAX_READ_BYTES, per_line: 0 };

/// `memory/read`: lines `offset` (1-based) onward, from `byte_offset` of the
/// first, at most `limit` of them and as much as `budget` holds, cut at a
/// line end (a line longer than that alone is cut within it).
pub fn read(memory_root: &Path, path: &str, asked: SliceRequest, budget: Budget) -> Result<FileSlice, ReadError> {
    let (bytes, meta) = read_file(memory_root, path)?;
    let sha256 = file_sha256(&meta, &bytes);
    let text = decoded(&bytes);
    let total_lines = count_lines(&text);
    let offset = asked.offset.max(1);
    let past_end = || ReadError::Invalid(format!("offset {offset} is past the end: {path} has {total_lines} lines."));
    if offset > total_lines.max(1) {
        return Err(past_end());
    }
    let line_at = line_start(&text, offset).unwrap_or(text.len());
    let start = start_in_line(&text, line_at, asked.byte_offset).ok_or_else(|| {
        ReadError::Invalid(format!("byte_offset {} is past the end of line {offset}.", asked.byte_offset))
    })?;
    let wanted = text[start..].split_inclusive('\n').take(asked.limit.map_or(usize::MAX, |l| l as usize));
    let (mut end, mut spent, mut lines, mut truncated) = (start, 0, 0u64, false);
    for line in wanted {
        if spent + budget.line(line.len()) > budget.bytes {
            truncated = true;
            if lines == 0 {
                // One line longer than the budget: as much of it as fits (the
                // whole line when only its newline would be left for later).
                let cut = cut_at_char(line, budget.bytes.saturating_sub(budget.per_line).max(1)).len();
                end += if cut + 1 == line.len() && line.ends_with('\n') { line.len() } else { cut };
                lines = 1;
            }
            break;
        }
        spent += budget.line(line.len());
        end += line.len();
        lines += 1;
    }
    let byte_offset = (start - line_at) as u64;
    let text = text[start..end].to_owned();
    Ok(FileSlice { path: path.to_owned(), text, offset, lines, total_lines, truncated, sha256, byte_offset })
}

/// Byte `byte_offset` of the line starting at `line_at` (back to a character
/// boundary); `None` past the line's end.
fn start_in_line(text: &str, line_at: usize, byte_offset: u64) -> Option<usize> {
    let line_len = memchr::memchr(b'\n', &text.as_bytes()[line_at..]).unwrap_or(text.len() - line_at);
    let within = usize::try_from(byte_offset).ok().filter(|b| *b <= line_len)?;
    let mut start = line_at + within;
    while !text.is_char_boundary(start) {
        start -= 1;
    }
    Some(start)
}

pub(crate) fn cut_at_char(text: &str, max: usize) -> &str {
    let mut end = max.min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// A memory file's rollout, for counting usage: `raw_memories/<id>.md` or
/// `rollout_summaries/<id>_<slug>.md` (rollout ids hold no `_`).
pub fn rollout_of_memory_file(path: &str) -> Option<&str> {
    if let Some(name) = path.strip_prefix("raw_memories/") {
        return name.strip_suffix(".md").filter(|id| !id.contains('/'));
    }
    let name = path.strip_prefix("rollout_summaries/")?.strip_suffix(".md")?;
    let id = name.split_once('_').map_or(name, |(id, _)| id);
    (!id.contains('/')).then_some(id)
}

#[cfg(test)]
#[path = "read_tests.rs"]
mod tests;
