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

#[derive(Debug, Clone, PartialEq, Serialize)]
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

    fn unhurried() -> SearchStop {
        SearchStop::new(Instant::now() + Duration::from_secs(600), Arc::default())
    }

    fn search(root: &Path, dir: &str, query: &SearchQuery<'_>) -> Result<SearchPage, ReadError> {
        super::search(root, dir, query, &unhurried())
    }

    /// Every `(path, line)` that following the cursors from the first page
    /// visits, and how many pages it took.
    fn every_page(root: &Path, query: SearchQuery<'_>, stop: impl Fn() -> SearchStop) -> (Vec<(String, u64)>, usize) {
        let (mut seen, mut pages, mut after) = (Vec::new(), 0, None);
        loop {
            pages += 1;
            assert!(pages < 10_000, "the cursors never end: {seen:?}");
            let page = super::search(root, "", &SearchQuery { after: after.clone(), ..query }, &stop()).unwrap();
            seen.extend(page.matches.into_iter().map(|m| (m.path, m.line)));
            match page.next_after {
                Some(next) => after = Some(next),
                None => return (seen, pages),
            }
        }
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
        let (seen, pages) = every_page(&root, SearchQuery { limit: 1, ..query("tea") }, unhurried);
        assert_eq!(seen.len(), 4, "{seen:?}");
        assert_eq!(pages, 4, "a page of exactly the last match says there is no more");
    }

    #[test]
    fn a_regex_that_matches_empty_pages_to_the_end() {
        let (_dir, root) = folder();
        let (seen, _) = every_page(&root, SearchQuery { regex: true, limit: 2, ..query("^") }, unhurried);
        let mut lines = 0;
        for file in ["MEMORY.md", "memory_summary.md", "rollout_summaries/chat-1_tea.md", "skills/ci/SKILL.md"] {
            lines += std::fs::read_to_string(root.join(file)).unwrap().lines().count();
        }
        assert_eq!(seen.len(), lines, "each line once, no line after a last newline: {seen:?}");
        let ends = search(&root, "", &SearchQuery { regex: true, ..query("$") }).unwrap();
        assert_eq!(ends.matches.len(), lines);
    }

    #[test]
    fn an_answer_keeps_to_its_budget_and_says_where_to_go_on() {
        let (_dir, root) = folder();
        let long = format!("{}\n", "needle ".repeat(400));
        std::fs::write(root.join("big.md"), long.repeat(3000)).unwrap();
        let wide = SearchQuery { limit: MAX_MATCHES, context: MAX_CONTEXT, ..query("needle") };
        let page = search(&root, "big.md", &wide).unwrap();
        let bytes: usize = page.matches.iter().map(SearchMatch::text_bytes).sum();
        assert!(bytes <= MAX_ANSWER_BYTES, "{bytes}");
        assert!(page.matches.len() < MAX_MATCHES && page.next_after.is_some());
        assert!(page.matches.iter().flat_map(|m| &m.before).all(|l| l.len() <= MAX_LINE_BYTES + 6), "context is cut");
    }

    #[test]
    fn a_search_past_its_deadline_answers_with_where_it_stopped() {
        let (_dir, root) = folder();
        std::fs::write(root.join("many.md"), "x\n".repeat(50_000)).unwrap();
        // Matches spanning two lines, never one alone: each probe moves on one line without a match.
        let late = || SearchStop::new(Instant::now(), Arc::default());
        let (seen, pages) = every_page(&root, SearchQuery { regex: true, limit: 200, ..query("x\\nx|tea") }, late);
        assert_eq!(seen.len(), 4, "every match, each once: {seen:?}");
        assert!(pages > 40, "each page stopped at its deadline: {pages}");
        let cancelled = SearchStop::new(Instant::now() + Duration::from_secs(600), Arc::new(AtomicBool::new(true)));
        let page = super::search(&root, "many.md", &SearchQuery { regex: true, ..query("x\\nx") }, &cancelled).unwrap();
        assert_eq!(page.next_after, Some(("many.md".into(), PROBES_BETWEEN_CHECKS as u64 - 1)));
    }

    #[test]
    fn a_match_across_lines_hides_no_line_that_matches_alone() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("MEMORY.md"), "111\n222\n333\n").unwrap();
        let spanning = SearchQuery { regex: true, ..query("111\\n222\\n333|222") };
        let (seen, _) = every_page(dir.path(), spanning, unhurried);
        assert_eq!(seen, [("MEMORY.md".to_owned(), 2)]);
        let anchored = SearchQuery { regex: true, ..query("\\A111|333\\z") };
        let (seen, _) = every_page(dir.path(), anchored, unhurried);
        assert_eq!(seen, [("MEMORY.md".to_owned(), 1), ("MEMORY.md".to_owned(), 3)], "\\z is a line's end here");
    }

    #[test]
    fn a_greedy_pattern_scans_each_file_once() {
        let (_dir, root) = folder();
        std::fs::write(root.join("many.md"), "x\n".repeat(20_000)).unwrap();
        let greedy = SearchQuery { regex: true, limit: MAX_MATCHES, ..query("(?s)^.+") };
        let (seen, pages) = every_page(&root, greedy, unhurried);
        let lines: usize = 3 + 1 + 2 + 1 + 20_000;
        assert_eq!((seen.len(), pages), (lines, lines.div_ceil(MAX_MATCHES)));
    }

    /// Random files (empty lines, no last newline, long lines, CRLF) and
    /// random patterns (some matching empty): following the cursors from
    /// the first page visits exactly the lines a line-by-line scan matches,
    /// each once, whatever the page size, the budget or the deadline.
    #[test]
    fn search_paging_visits_each_match_once_property() {
        let mut rng = crate::test_rng::XorShift(0x9e37_79b9_7f4a_7c15);
        let pieces = ["", "a", "ab", "b a", "\r", "é", "tea", "x"];
        let patterns =
            ["^", "$", "a*", "a", "^$", "b|$", "(?s).*", "\\b", "a+b?", "é", "a\\nb|b", "(?s)a.*b|x", "tea$"];
        for case in 0..300 {
            let dir = tempfile::tempdir().unwrap();
            let root = dir.path().to_path_buf();
            for file in 0..(1 + rng.next() % 3) {
                let mut text = String::new();
                for _ in 0..rng.next() % 40 {
                    for _ in 0..rng.next() % 4 {
                        text.push_str(pieces[(rng.next() % pieces.len() as u64) as usize]);
                    }
                    if rng.next().is_multiple_of(17) {
                        text.push_str(&"a".repeat(1500));
                    }
                    text.push('\n');
                }
                if rng.next().is_multiple_of(2) {
                    text.pop();
                }
                let name = ["MEMORY.md", "notes/b.md", "memory_summary.md"][file as usize];
                std::fs::create_dir_all(root.join(name).parent().unwrap()).unwrap();
                std::fs::write(root.join(name), &text).unwrap();
            }
            let pattern = patterns[(rng.next() % patterns.len() as u64) as usize];
            let regex =
                regex::RegexBuilder::new(pattern).case_insensitive(true).multi_line(true).crlf(true).build().unwrap();
            let mut expected = Vec::new();
            for name in ["MEMORY.md", "memory_summary.md", "notes/b.md"] {
                let Ok(text) = std::fs::read_to_string(root.join(name)) else { continue };
                let lines: Vec<&str> = text.split_inclusive('\n').map(|l| l.strip_suffix('\n').unwrap_or(l)).collect();
                expected.extend(
                    lines
                        .iter()
                        .enumerate()
                        .filter(|(_, l)| regex.is_match(l))
                        .map(|(i, _)| (name.to_owned(), i as u64 + 1)),
                );
            }
            let limit = 1 + (rng.next() % 7) as usize;
            let asked = SearchQuery { regex: true, limit, context: (rng.next() % 3) as usize, ..query(pattern) };
            let late = rng.next().is_multiple_of(3);
            let stop = || if late { SearchStop::new(Instant::now(), Arc::default()) } else { unhurried() };
            let (seen, _) = every_page(&root, asked, stop);
            assert_eq!(seen, expected, "case {case}: {pattern:?} limit {limit}");
        }
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
