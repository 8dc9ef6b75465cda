//! The running agent's read tools (SPEC §2.10): list, read and search a
//! layout's memory folder on disk, as the HTTP routes and MCP serve them.
//! Paths here are relative to the memory folder and already confined by
//! the caller; memoryd's own temporary files and symlinks are never shown.

use crate::domain::ids::sha256_hex;
use crate::workspace::is_temporary_file;
use chrono::{DateTime, Utc};
use serde::Serialize;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

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

/// A search answer holds at most this much text, lines and context together.
pub const MAX_ANSWER_BYTES: usize = 256 * 1024;
/// How long one search may scan before it answers with what it found.
pub const SEARCH_DEADLINE: Duration = Duration::from_secs(2);
/// Probes for a match between two looks at the clock and the cancellation flag.
const PROBES_BETWEEN_CHECKS: usize = 256;

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

#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
#[schemars(rename = "MemoryMatch")]
pub struct SearchMatch {
    pub path: String,
    pub line: u64,
    pub text: String,
    pub before: Vec<String>,
    pub after: Vec<String>,
}

impl SearchMatch {
    fn text_bytes(&self) -> usize {
        self.text.len() + self.before.iter().chain(&self.after).map(String::len).sum::<usize>()
    }
}

pub struct SearchPage {
    pub matches: Vec<SearchMatch>,
    /// Where the next page starts: after this `(path, line)`. Set when the
    /// page is full, the answer's budget is spent or the deadline passed.
    pub next_after: Option<(String, u64)>,
}

/// When a search must stop scanning: at its deadline, or as soon as the
/// request that asked for it is gone (the flag is set from another thread).
#[derive(Clone)]
pub struct SearchStop {
    deadline: Instant,
    cancelled: Arc<AtomicBool>,
}

impl SearchStop {
    pub fn new(deadline: Instant, cancelled: Arc<AtomicBool>) -> Self {
        Self { deadline, cancelled }
    }

    fn now(&self) -> bool {
        self.cancelled.load(Ordering::Relaxed) || Instant::now() >= self.deadline
    }
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
        .crlf(true)
        .size_limit(1 << 20)
        .build()
        .map_err(|e| ReadError::Invalid(format!("query is not a valid regex: {e}")))
}

/// Whether a file without a match of the pattern anywhere in its text can
/// be passed over whole: true unless the pattern looks at the start or end
/// of the whole text (`\A`, `\z`), which a line tried alone has at its own
/// ends. A literal never does.
fn whole_text_prefilter(query: &SearchQuery<'_>) -> bool {
    if !query.regex {
        return true;
    }
    let parsed = regex_syntax::ParserBuilder::new()
        .case_insensitive(!query.case_sensitive)
        .multi_line(true)
        .crlf(true)
        .build()
        .parse(query.query);
    parsed.is_ok_and(|hir| {
        let looks = hir.properties().look_set();
        !looks.contains(regex_syntax::hir::Look::Start) && !looks.contains(regex_syntax::hir::Look::End)
    })
}

/// Files are searched `MEMORY.md` first, then `memory_summary.md`, then by path.
fn search_order(path: &str) -> (u8, &str) {
    match path {
        "MEMORY.md" => (0, path),
        "memory_summary.md" => (1, path),
        _ => (2, path),
    }
}

/// What is left of one page while files are searched.
struct Room {
    matches: usize,
    bytes: usize,
}

/// How the search of one file ended.
enum FileEnd {
    /// Every line was looked at.
    Done,
    /// The page is full or its budget spent: the next page starts after the last match.
    Full,
    /// Stopped after this line (1-based) without a match there.
    StoppedAfter(u64),
}

/// `memory/search`: matching lines of the files under `dir`, in search
/// order, one match per line. A page ends at `limit` matches, at
/// [`MAX_ANSWER_BYTES`] of text, or when `stop` says so, with where to go on.
pub fn search(
    memory_root: &Path,
    dir: &str,
    query: &SearchQuery<'_>,
    stop: &SearchStop,
) -> Result<SearchPage, ReadError> {
    let matcher = matcher(query)?;
    let prefilter = whole_text_prefilter(query);
    let mut files: Vec<String> = entries_under(memory_root, dir, false)?
        .into_iter()
        .filter(|e| e.kind == EntryKind::File)
        .map(|e| e.path)
        .collect();
    files.sort_by(|a, b| search_order(a).cmp(&search_order(b)));
    let limit = query.limit.clamp(1, MAX_MATCHES);
    // One match more than the page holds tells whether there is a next page.
    let mut room = Room { matches: limit + 1, bytes: MAX_ANSWER_BYTES };
    let mut matches = Vec::new();
    let mut last_scanned: Option<(String, u64)> = None;
    for path in files {
        let skip_through = match &query.after {
            // A file the last page searched to its end.
            Some((after, u64::MAX)) if search_order(&path) <= search_order(after) => continue,
            Some((after, line)) if search_order(&path) == search_order(after) => *line,
            Some((after, _)) if search_order(&path) < search_order(after) => continue,
            _ => 0,
        };
        // Each page looks at one file at least, so that following its cursors always ends.
        if let Some(scanned) = last_scanned.as_ref().filter(|_| stop.now()) {
            return Ok(SearchPage { matches, next_after: Some(scanned.clone()) });
        }
        let Ok(bytes) = std::fs::read(memory_root.join(&path)) else { continue };
        let text = decoded(&bytes);
        let scan = FileScan {
            path: &path,
            text: &text,
            matcher: &matcher,
            literal: !query.regex,
            prefilter,
            context: query.context,
        };
        match scan.run(skip_through, &mut room, &mut matches, stop) {
            FileEnd::Done => last_scanned = Some((path.clone(), u64::MAX)),
            FileEnd::Full => break,
            FileEnd::StoppedAfter(line) => return Ok(SearchPage { matches, next_after: Some((path, line)) }),
        }
    }
    let full = room.matches == 0 || room.bytes == 0;
    matches.truncate(limit);
    let next_after = full.then(|| matches.last().map(|m: &SearchMatch| (m.path.clone(), m.line))).flatten();
    Ok(SearchPage { matches, next_after })
}

/// What one look for a match found.
enum Probe {
    /// A match on this line (0-based), starting at this byte of it.
    Hit(usize, usize),
    /// No line through this one matches alone.
    MissedThrough(usize),
    /// None in the rest of the file.
    End,
}

/// One file's text searched line by line.
struct FileScan<'a> {
    path: &'a str,
    text: &'a str,
    matcher: &'a regex::Regex,
    /// A plain substring: found in the whole text at once (its matches are
    /// as long as the query, so no find reaches far past where it starts).
    literal: bool,
    /// A file with no match in its whole text may be passed over.
    prefilter: bool,
    context: usize,
}

impl FileScan<'_> {
    /// Matches after line `skip_through`, while the page has room.
    fn run(&self, skip_through: u64, room: &mut Room, out: &mut Vec<SearchMatch>, stop: &SearchStop) -> FileEnd {
        let first = usize::try_from(skip_through).unwrap_or(usize::MAX);
        // Most files of a search hold no match: they are passed over without their lines found.
        if first == 0 && self.prefilter && !self.matcher.is_match(self.text) {
            return FileEnd::Done;
        }
        let starts = line_starts(self.text);
        let (mut index, mut steps) = (first, 0usize);
        while index < starts.len() {
            steps += 1;
            if steps.is_multiple_of(PROBES_BETWEEN_CHECKS) && stop.now() {
                return FileEnd::StoppedAfter(index as u64);
            }
            let (line, at) = match self.probe(&starts, index) {
                Probe::Hit(line, at) => (line, at),
                Probe::MissedThrough(line) => {
                    index = line + 1;
                    continue;
                }
                Probe::End => return FileEnd::Done,
            };
            let found = self.found(&starts, line, at);
            if found.text_bytes() > room.bytes {
                room.bytes = 0;
                return FileEnd::Full;
            }
            room.bytes -= found.text_bytes();
            room.matches -= 1;
            out.push(found);
            if room.matches == 0 {
                return FileEnd::Full;
            }
            index = line + 1;
        }
        FileEnd::Done
    }

    /// Looks for a match from line `index` (0-based) on. A literal is found
    /// in the whole text (leftmost first, so no line before the one it
    /// starts on holds one), then that line is tried alone; a regex is tried
    /// on line `index` alone, the text cut at the line's end (what it sees
    /// before the line stays, for `^` and `\b`). Nothing a match holds reaches
    /// past its line, an empty match included, and each call reads one line
    /// of a regex's text: a file costs one pass whatever the pattern.
    fn probe(&self, starts: &[usize], index: usize) -> Probe {
        let line = if self.literal {
            let Some(hit) = self.matcher.find_at(self.text, starts[index]) else { return Probe::End };
            starts.partition_point(|s| *s <= hit.start()).max(1) - 1
        } else {
            index
        };
        let alone = &self.text[..line_end(self.text, starts, line)];
        match self.matcher.find_at(alone, starts[line]) {
            Some(hit) => Probe::Hit(line, hit.start() - starts[line]),
            None => Probe::MissedThrough(line),
        }
    }

    fn line<'t>(&'t self, starts: &[usize], index: usize) -> &'t str {
        &self.text[starts[index]..line_end(self.text, starts, index)]
    }

    fn found(&self, starts: &[usize], index: usize, at: usize) -> SearchMatch {
        let shown = |i: usize| cut_around(self.line(starts, i).trim_end_matches('\r'), 0);
        SearchMatch {
            path: self.path.to_owned(),
            line: index as u64 + 1,
            text: cut_around(self.line(starts, index).trim_end_matches('\r'), at),
            before: (index.saturating_sub(self.context)..index).map(shown).collect(),
            after: (index + 1..(index + 1 + self.context).min(starts.len())).map(shown).collect(),
        }
    }
}

/// Where each line starts (a final empty line after a last newline is
/// none; an empty text has no line).
fn line_starts(text: &str) -> Vec<usize> {
    if text.is_empty() {
        return Vec::new();
    }
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
#[path = "read_tests.rs"]
mod tests;
