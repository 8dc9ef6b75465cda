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
/// Matches a search page holds at most.
pub const MAX_MATCHES: usize = 200;
/// A regex longer than this is refused.
pub const MAX_PATTERN_BYTES: usize = 1000;
/// A matching line longer than this is cut around the match.
const MAX_LINE_BYTES: usize = 1000;
/// Context lines around a match, at most.
pub const MAX_CONTEXT: usize = 20;

#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Invalid(String),
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EntryKind {
    File,
    Dir,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MemoryEntry {
    pub path: String,
    pub kind: EntryKind,
    /// `None` for a folder.
    pub bytes: Option<u64>,
    pub modified_at: Option<DateTime<Utc>>,
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
fn entries_under(memory_root: &Path, dir: &str, sizes: bool) -> Result<Vec<MemoryEntry>, ReadError> {
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

/// `memory/list`: a page of the entries under `dir`.
pub fn list(memory_root: &Path, dir: &str, after: Option<&str>) -> Result<ListPage, ReadError> {
    let mut entries: Vec<MemoryEntry> = entries_under(memory_root, dir, true)?
        .into_iter()
        .filter(|e| after.is_none_or(|after| e.path.as_str() > after))
        .take(MAX_LISTED + 1)
        .collect();
    let next_after = (entries.len() > MAX_LISTED).then(|| {
        entries.truncate(MAX_LISTED);
        entries.last().map(|e| e.path.clone()).unwrap_or_default()
    });
    Ok(ListPage { entries, next_after })
}

/// What `memory/read` answers.
#[derive(Debug, Clone, PartialEq, Serialize)]
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
fn decoded(bytes: &[u8]) -> std::borrow::Cow<'_, str> {
    match std::str::from_utf8(bytes) {
        Ok(text) => std::borrow::Cow::Borrowed(text),
        Err(_) => String::from_utf8_lossy(bytes),
    }
}

/// `memory/read`: lines `offset` (1-based) onward, at most `limit` of them
/// and at most [`MAX_READ_BYTES`], cut at a line end.
pub fn read(memory_root: &Path, path: &str, offset: u64, limit: Option<u64>) -> Result<FileSlice, ReadError> {
    let (bytes, meta) = read_file(memory_root, path)?;
    let sha256 = file_sha256(&meta, &bytes);
    let text = decoded(&bytes);
    let total_lines = count_lines(&text);
    let offset = offset.max(1);
    let past_end = || ReadError::Invalid(format!("offset {offset} is past the end: {path} has {total_lines} lines."));
    if offset > total_lines.max(1) {
        return Err(past_end());
    }
    let start = line_start(&text, offset).unwrap_or(text.len());
    let wanted = text[start..].split_inclusive('\n').take(limit.map_or(usize::MAX, |l| l as usize));
    let (mut end, mut lines, mut truncated) = (start, 0u64, false);
    for line in wanted {
        if end - start + line.len() > MAX_READ_BYTES {
            truncated = true;
            if lines == 0 {
                // One line longer than the cap: as much of it as fits.
                end += cut_at_char(line, MAX_READ_BYTES).len();
                lines = 1;
            }
            break;
        }
        end += line.len();
        lines += 1;
    }
    let text = text[start..end].to_owned();
    Ok(FileSlice { path: path.to_owned(), text, offset, lines, total_lines, truncated, sha256 })
}

fn cut_at_char(text: &str, max: usize) -> &str {
    let mut end = max.min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// A search as `memory/search` asks it.
pub struct SearchQuery<'a> {
    pub query: &'a str,
    pub regex: bool,
    pub case_sensitive: bool,
    pub context: usize,
    pub limit: usize,
    /// Continue after this `(path, line)`.
    pub after: Option<(String, u64)>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SearchMatch {
    pub path: String,
    pub line: u64,
    pub text: String,
    pub before: Vec<String>,
    pub after: Vec<String>,
}

pub struct SearchPage {
    pub matches: Vec<SearchMatch>,
    /// The `(path, line)` of a full page's last match, to continue after.
    pub next_after: Option<(String, u64)>,
}

/// The linear-time matcher of a query (the `regex` crate has no
/// backtracking): a plain substring unless `regex`.
pub fn matcher(query: &SearchQuery<'_>) -> Result<regex::Regex, ReadError> {
    if query.query.is_empty() {
        return Err(ReadError::Invalid("query must not be empty.".into()));
    }
    if query.regex && query.query.len() > MAX_PATTERN_BYTES {
        return Err(ReadError::Invalid(format!("A regex may be at most {MAX_PATTERN_BYTES} bytes.")));
    }
    let pattern = if query.regex { query.query.to_owned() } else { regex::escape(query.query) };
    regex::RegexBuilder::new(&pattern)
        .case_insensitive(!query.case_sensitive)
        .multi_line(true)
        .size_limit(1 << 20)
        .build()
        .map_err(|e| ReadError::Invalid(format!("query is not a valid regex: {e}")))
}

/// Files are searched `MEMORY.md` first, then `memory_summary.md`, then by path.
fn search_order(path: &str) -> (u8, &str) {
    match path {
        "MEMORY.md" => (0, path),
        "memory_summary.md" => (1, path),
        _ => (2, path),
    }
}

/// `memory/search`: matching lines of the files under `dir`, in search
/// order, one match per line.
pub fn search(memory_root: &Path, dir: &str, query: &SearchQuery<'_>) -> Result<SearchPage, ReadError> {
    let matcher = matcher(query)?;
    let mut files: Vec<String> = entries_under(memory_root, dir, false)?
        .into_iter()
        .filter(|e| e.kind == EntryKind::File)
        .map(|e| e.path)
        .collect();
    files.sort_by(|a, b| search_order(a).cmp(&search_order(b)));
    let limit = query.limit.clamp(1, MAX_MATCHES);
    let mut matches = Vec::new();
    for path in files {
        let skip_through = match &query.after {
            Some((after, line)) if search_order(&path) == search_order(after) => *line,
            Some((after, _)) if search_order(&path) < search_order(after) => continue,
            _ => 0,
        };
        let Ok(bytes) = std::fs::read(memory_root.join(&path)) else { continue };
        let text = decoded(&bytes);
        search_text(&path, &text, &matcher, query.context, skip_through, limit + 1 - matches.len(), &mut matches);
        if matches.len() > limit {
            break;
        }
    }
    let next_after = (matches.len() > limit).then(|| {
        matches.truncate(limit);
        matches.last().map(|m| (m.path.clone(), m.line)).unwrap_or_default()
    });
    Ok(SearchPage { matches, next_after })
}

/// Up to `room` matching lines of one file after line `skip_through`.
fn search_text(
    path: &str,
    text: &str,
    matcher: &regex::Regex,
    context: usize,
    skip_through: u64,
    room: usize,
    out: &mut Vec<SearchMatch>,
) {
    let mut starts: Option<Vec<usize>> = None;
    let mut at = 0;
    let mut found = 0;
    while found < room && at <= text.len() {
        let Some(hit) = matcher.find_at(text, at) else { break };
        let starts = starts.get_or_insert_with(|| line_starts(text));
        let index = starts.partition_point(|s| *s <= hit.start()) - 1;
        let end = line_end(text, starts, index);
        at = end + 1;
        if (index as u64) < skip_through {
            continue;
        }
        let line = |i: usize| text[starts[i]..line_end(text, starts, i)].trim_end_matches('\r').to_owned();
        out.push(SearchMatch {
            path: path.to_owned(),
            line: index as u64 + 1,
            text: cut_around(&line(index), hit.start() - starts[index]),
            before: (index.saturating_sub(context)..index).map(line).collect(),
            after: (index + 1..(index + 1 + context).min(starts.len())).map(line).collect(),
        });
        found += 1;
    }
}

/// Where each line starts (a final empty line after a last newline is none).
fn line_starts(text: &str) -> Vec<usize> {
    let mut starts = vec![0];
    starts.extend(memchr::memchr_iter(b'\n', text.as_bytes()).map(|i| i + 1).filter(|i| *i < text.len()));
    starts
}

/// Where line `index` ends, its newline left out.
fn line_end(text: &str, starts: &[usize], index: usize) -> usize {
    starts.get(index + 1).map_or_else(|| text.strip_suffix('\n').map_or(text.len(), str::len), |next| next - 1)
}

/// A line cut to [`MAX_LINE_BYTES`] around the match at byte `at`.
fn cut_around(line: &str, at: usize) -> String {
    if line.len() <= MAX_LINE_BYTES {
        return line.to_owned();
    }
    let mut start = at.saturating_sub(MAX_LINE_BYTES / 4).min(line.len() - MAX_LINE_BYTES);
    while !line.is_char_boundary(start) {
        start -= 1;
    }
    let shown = cut_at_char(&line[start..], MAX_LINE_BYTES);
    let before = if start > 0 { "…" } else { "" };
    let after = if start + shown.len() < line.len() { "…" } else { "" };
    format!("{before}{shown}{after}")
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
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn folder() -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("memories");
        std::fs::create_dir_all(root.join("rollout_summaries")).unwrap();
        std::fs::create_dir_all(root.join("skills/ci")).unwrap();
        std::fs::write(root.join("MEMORY.md"), "# Memory\n- green tea\n- ci: pin the runner\n").unwrap();
        std::fs::write(root.join("memory_summary.md"), "likes tea\n").unwrap();
        // A last line with its newline, as most memory files end.
        std::fs::write(root.join("rollout_summaries/chat-1_tea.md"), "Tea talk\nTEA again\n").unwrap();
        std::fs::write(root.join("skills/ci/SKILL.md"), "pin the runner image\n").unwrap();
        std::fs::write(root.join("skills/.memoryd-00000000-0000-0000-0000-000000000000-x.tmp"), "staged").unwrap();
        (dir, root)
    }

    fn query(text: &str) -> SearchQuery<'_> {
        SearchQuery { query: text, regex: false, case_sensitive: false, context: 0, limit: 50, after: None }
    }

    #[test]
    fn listing_is_sorted_recursive_and_hides_temporary_files() {
        let (_dir, root) = folder();
        let page = list(&root, "", None).unwrap();
        let paths: Vec<&str> = page.entries.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "MEMORY.md",
                "memory_summary.md",
                "rollout_summaries",
                "rollout_summaries/chat-1_tea.md",
                "skills",
                "skills/ci",
                "skills/ci/SKILL.md"
            ]
        );
        assert_eq!(page.entries[2].kind, EntryKind::Dir);
        assert_eq!(page.entries[0].bytes, Some(42));
        assert!(page.next_after.is_none());
        let after = list(&root, "skills", Some("skills/ci")).unwrap();
        assert_eq!(after.entries.len(), 1);
        assert!(matches!(list(&root, "nothing", None), Err(ReadError::NotFound(_))));
        assert!(list(&root.join("not-yet"), "", None).unwrap().entries.is_empty(), "a folder not made yet is empty");
        assert_eq!(list(&root, "MEMORY.md", None).unwrap().entries.len(), 1);
    }

    #[test]
    fn reads_are_sliced_by_lines_and_capped_by_bytes() {
        let (_dir, root) = folder();
        let whole = read(&root, "MEMORY.md", 1, None).unwrap();
        assert_eq!((whole.lines, whole.total_lines, whole.truncated), (3, 3, false));
        assert_eq!(whole.sha256, sha256_hex(b"# Memory\n- green tea\n- ci: pin the runner\n"));
        let slice = read(&root, "MEMORY.md", 2, Some(1)).unwrap();
        assert_eq!((slice.text.as_str(), slice.offset, slice.lines), ("- green tea\n", 2, 1));
        assert!(matches!(read(&root, "MEMORY.md", 9, None), Err(ReadError::Invalid(_))));
        assert!(matches!(read(&root, "skills", 1, None), Err(ReadError::Invalid(_))));
        assert!(matches!(read(&root, "nope.md", 1, None), Err(ReadError::NotFound(_))));
        std::fs::write(root.join("big.md"), "x".repeat(50_000) + "\n" + &"y".repeat(50_000) + "\n").unwrap();
        let capped = read(&root, "big.md", 1, None).unwrap();
        assert_eq!((capped.lines, capped.truncated, capped.text.len()), (1, true, 50_001));
        std::fs::write(root.join("huge.md"), "é".repeat(60_000)).unwrap();
        let cut = read(&root, "huge.md", 1, None).unwrap();
        assert!(cut.truncated && cut.text.len() <= MAX_READ_BYTES && cut.text.len() >= MAX_READ_BYTES - 1);
        std::fs::write(root.join("bad.md"), b"ok\n\xff\xfe\n").unwrap();
        assert_eq!(read(&root, "bad.md", 2, None).unwrap().text, "\u{fffd}\u{fffd}\n");
        std::fs::write(root.join("empty.md"), "").unwrap();
        assert_eq!(read(&root, "empty.md", 1, None).unwrap().total_lines, 0);
    }

    #[test]
    fn search_goes_memory_first_case_insensitive_by_default() {
        let (_dir, root) = folder();
        let page = search(&root, "", &query("tea")).unwrap();
        let found: Vec<(&str, u64)> = page.matches.iter().map(|m| (m.path.as_str(), m.line)).collect();
        assert_eq!(
            found,
            [
                ("MEMORY.md", 2),
                ("memory_summary.md", 1),
                ("rollout_summaries/chat-1_tea.md", 1),
                ("rollout_summaries/chat-1_tea.md", 2)
            ]
        );
        assert_eq!(page.matches[1].text, "likes tea", "a last line's newline is not part of it");
        let sensitive = SearchQuery { case_sensitive: true, ..query("TEA") };
        assert_eq!(search(&root, "", &sensitive).unwrap().matches.len(), 1);
        let regex = SearchQuery { regex: true, context: 1, ..query(r"pin\s+the") };
        let page = search(&root, "", &regex).unwrap();
        assert_eq!(page.matches[0].before, ["- green tea"]);
        assert_eq!(page.matches[0].after, Vec::<String>::new());
        assert_eq!(page.matches[1].path, "skills/ci/SKILL.md");
        let bad = SearchQuery { regex: true, ..query("(unclosed") };
        assert!(matches!(search(&root, "", &bad), Err(ReadError::Invalid(_))));
        assert!(matches!(search(&root, "", &query("")), Err(ReadError::Invalid(_))));
        let long = "a".repeat(MAX_PATTERN_BYTES + 1);
        assert!(matches!(search(&root, "", &SearchQuery { regex: true, ..query(&long) }), Err(ReadError::Invalid(_))));
    }

    #[test]
    fn search_pages_continue_after_the_cursor() {
        let (_dir, root) = folder();
        let mut after = None;
        let mut seen = Vec::new();
        loop {
            let page = search(&root, "", &SearchQuery { limit: 1, after: after.clone(), ..query("tea") }).unwrap();
            seen.extend(page.matches.into_iter().map(|m| (m.path, m.line)));
            match page.next_after {
                Some(next) => after = Some(next),
                None => break,
            }
        }
        assert_eq!(seen.len(), 4, "{seen:?}");
    }

    #[test]
    fn long_lines_are_cut_around_the_match() {
        let line = format!("{}needle{}", "a".repeat(5000), "b".repeat(5000));
        let cut = cut_around(&line, 5000);
        assert!(cut.contains("needle") && cut.starts_with('…') && cut.ends_with('…'), "{}", cut.len());
        assert!(cut.len() <= MAX_LINE_BYTES + 6);
    }

    #[test]
    fn memory_files_name_their_rollouts() {
        assert_eq!(rollout_of_memory_file("raw_memories/chat-1.md"), Some("chat-1"));
        assert_eq!(rollout_of_memory_file("rollout_summaries/chat-1_tea-time.md"), Some("chat-1"));
        assert_eq!(rollout_of_memory_file("rollout_summaries/chat-1.md"), Some("chat-1"));
        assert_eq!(rollout_of_memory_file("MEMORY.md"), None);
        assert_eq!(rollout_of_memory_file("raw_memories/a/b.md"), None);
    }
}
