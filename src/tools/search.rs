//! The running agent's search (SPEC §2.10): matching lines of a layout's
//! memory folder, a page at a time, bounded in matches, bytes and time.

use super::read::{Budget, EntryKind, ReadError, cut_at_char, decoded, entries_under};
use serde::Serialize;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Matches a search page holds at most.
pub const MAX_MATCHES: usize = 200;
/// A regex longer than this is refused.
pub const MAX_PATTERN_BYTES: usize = 1000;
/// A matching line longer than this is cut around the match.
pub(crate) const MAX_LINE_BYTES: usize = 1000;
/// Context lines around a match, at most.
pub const MAX_CONTEXT: usize = 20;

/// A search answer holds at most this much text, lines and context together.
pub const MAX_ANSWER_BYTES: usize = 256 * 1024;
/// How long one search may scan before it answers with what it found.
pub const SEARCH_DEADLINE: Duration = Duration::from_secs(2);
/// Probes for a match between two looks at the clock and the cancellation flag.
pub(crate) const PROBES_BETWEEN_CHECKS: usize = 256;

/// A search as `memory/search` asks it.
pub struct SearchQuery<'a> {
    pub query: &'a str,
    pub regex: bool,
    pub case_sensitive: bool,
    pub context: usize,
    pub limit: usize,
    /// Continue after this `(path, line)`.
    pub after: Option<(String, u64)>,
    /// What a page holds ([`HTTP_SEARCH`] for the route).
    pub budget: Budget,
}

/// The budget of an HTTP search: [`MAX_ANSWER_BYTES`] of lines and context.
pub const HTTP_SEARCH: Budget = Budget { bytes: MAX_ANSWER_BYTES, per_line: 0 };

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
    pub(crate) fn text_bytes(&self) -> usize {
        self.text.len() + self.before.iter().chain(&self.after).map(String::len).sum::<usize>()
    }

    /// Drops context lines, farthest first, until the match costs at most
    /// `bytes` (or has none left): a page's first match always fits, and a
    /// match is never cut itself.
    fn fit_context(&mut self, bytes: usize, budget: Budget) {
        while self.cost(budget) > bytes && !(self.before.is_empty() && self.after.is_empty()) {
            if self.before.len() >= self.after.len() {
                self.before.remove(0);
            } else {
                self.after.pop();
            }
        }
    }

    /// What the match costs of `budget`: its text, and where lines are
    /// rendered with their path and number, each line's prefix.
    fn cost(&self, budget: Budget) -> usize {
        let lines = 1 + self.before.len() + self.after.len();
        let prefix = if budget.per_line == 0 { 0 } else { budget.line(self.path.len()) };
        self.text_bytes() + lines * prefix
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
    let mut room = Room { matches: limit + 1, bytes: query.budget.bytes };
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
            budget: query.budget,
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
    budget: Budget,
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
            let mut found = self.found(&starts, line, at);
            if out.is_empty() {
                found.fit_context(room.bytes, self.budget);
            }
            let cost = found.cost(self.budget);
            // A page holds one match at least, so that following its cursors always ends.
            if cost > room.bytes && !out.is_empty() {
                room.bytes = 0;
                return FileEnd::Full;
            }
            room.bytes = room.bytes.saturating_sub(cost);
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
pub(crate) fn cut_around(line: &str, at: usize) -> String {
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
