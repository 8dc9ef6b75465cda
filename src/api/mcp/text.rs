//! The tools' answers as text a model reads well: listings one entry a
//! line, reads numbered, searches as `path:line: text`.

use super::tools::MAX_RESULT_BYTES;
use crate::api::agent_memory::{MemoryListing, MemorySearchPage, PublishedEdit};
use crate::api::ranked::RankedPage;
use crate::tools::read::{FileSlice, numbered_lines};

fn more(next_cursor: Option<&str>, what: &str) -> String {
    match next_cursor {
        Some(cursor) => format!("\n… more {what}: pass cursor {cursor}"),
        None => String::new(),
    }
}

/// `memory_list`: one entry a line, folders with a slash.
pub(super) fn listing(listed: &MemoryListing) -> String {
    if listed.entries.is_empty() {
        return "The memory folder holds nothing here.".into();
    }
    let lines: Vec<String> = listed
        .entries
        .iter()
        .map(|e| match e.bytes {
            Some(bytes) => format!("{} ({bytes} bytes)", e.path),
            None => format!("{}/", e.path),
        })
        .collect();
    format!("{}{}", lines.join("\n"), more(listed.next_cursor.as_deref(), "entries"))
}

/// `memory_read`: numbered lines, then where to read on (within a line
/// too long for one result), then the file's digest for `memory_edit`.
pub(super) fn slice(read: &FileSlice) -> String {
    if read.total_lines == 0 {
        return format!("{} is empty.\nsha256 {}", read.path, read.sha256);
    }
    let cut_within_line = read.truncated && !read.text.ends_with('\n');
    let mut said = if cut_within_line {
        let next = read.byte_offset + read.text.len() as u64;
        format!(
            "{}\n… line {} goes on: read on with offset {} and byte_offset {next}\n",
            numbered_lines(read.text.lines(), read.offset, 0).trim_end_matches('\n'),
            read.offset,
            read.offset
        )
    } else {
        numbered_lines(read.text.lines(), read.offset, read.total_lines)
    };
    said.push_str(&format!("sha256 {} (of the whole file, for memory_edit's expect)", read.sha256));
    said
}

/// A result's text, never over [`MAX_RESULT_BYTES`]: the budgets keep every
/// result well under it, and this cut only guards what they cannot foresee,
/// keeping the last line (where a result says how to read on).
pub(super) fn within_result(text: String) -> String {
    if text.len() <= MAX_RESULT_BYTES {
        return text;
    }
    const NOTE: &str = "\n… the result is cut at 64 KiB: ask for less (a smaller limit).\n";
    let (body, last) = text.trim_end_matches('\n').rsplit_once('\n').unwrap_or(("", text.as_str()));
    let last = if last.len() > MAX_RESULT_BYTES / 4 { "" } else { last };
    let kept = crate::tools::read::cut_at_char(body, MAX_RESULT_BYTES - NOTE.len() - last.len());
    format!("{kept}{NOTE}{last}")
}

/// `memory_search`: `path:line: text`, context lines as `path-line- text`.
pub(super) fn matches(found: &MemorySearchPage) -> String {
    if found.matches.is_empty() {
        return "No line of the memory folder matches.".into();
    }
    let mut lines = Vec::new();
    for m in &found.matches {
        let (path, line) = (&m.path, m.line);
        for (i, text) in m.before.iter().enumerate() {
            lines.push(format!("{path}-{}- {text}", line - (m.before.len() - i) as u64));
        }
        lines.push(format!("{path}:{line}: {}", m.text));
        for (i, text) in m.after.iter().enumerate() {
            lines.push(format!("{path}-{}- {text}", line + 1 + i as u64));
        }
    }
    format!("{}{}", lines.join("\n"), more(found.next_cursor.as_deref(), "matches"))
}

/// `memory_search` with `mode=ranked`: each passage under a line naming
/// where it stands, best first.
pub(super) fn passages(found: &RankedPage) -> String {
    if found.matches.is_empty() {
        return "No section of the memory folder answers the query.".into();
    }
    let shown: Vec<String> = found
        .matches
        .iter()
        .map(|p| {
            let lines = if p.line == p.end_line { p.line.to_string() } else { format!("{}-{}", p.line, p.end_line) };
            let heading = if p.heading.is_empty() { String::new() } else { format!(" {}", p.heading) };
            format!("{}:{lines} (score {}){heading}\n{}", p.path, p.score, p.text)
        })
        .collect();
    format!("{}{}", shown.join("\n\n"), more(found.next_cursor.as_deref(), "sections"))
}

/// `memory_edit`: what the published edit changed.
pub(super) fn published(edit: &PublishedEdit) -> String {
    let changes: Vec<String> = edit.changes.iter().map(|c| format!("{} {}", c.change.as_str(), c.path)).collect();
    if changes.is_empty() {
        return "The edit is published; it changed nothing (the files already read so).".into();
    }
    format!("The edit is published: {}.", changes.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::read::{EntryKind, MemoryEntry};
    use crate::tools::search::SearchMatch;

    fn strings(lines: &[&str]) -> Vec<String> {
        lines.iter().map(|l| l.to_string()).collect()
    }

    #[test]
    fn searches_read_like_grep() {
        let found = MemorySearchPage {
            matches: vec![SearchMatch {
                path: "MEMORY.md".into(),
                line: 4,
                text: "pin the runner".into(),
                before: strings(&["# CI"]),
                after: strings(&["- done"]),
            }],
            next_cursor: Some("abc".into()),
        };
        assert_eq!(
            matches(&found),
            "MEMORY.md-3- # CI\nMEMORY.md:4: pin the runner\nMEMORY.md-5- - done\n… more matches: pass cursor abc"
        );
        let none = MemorySearchPage { matches: vec![], next_cursor: None };
        assert_eq!(matches(&none), "No line of the memory folder matches.");
    }

    fn slice_of(text: &str, offset: u64, lines: u64, total_lines: u64) -> FileSlice {
        let path = "MEMORY.md".into();
        let sha256 = "ab12".into();
        FileSlice { path, text: text.into(), offset, lines, total_lines, truncated: false, sha256, byte_offset: 0 }
    }

    const DIGEST: &str = "sha256 ab12 (of the whole file, for memory_edit's expect)";

    #[test]
    fn reads_are_numbered_and_say_where_to_go_on() {
        assert_eq!(
            slice(&slice_of("b\nc\n", 2, 2, 5)),
            format!("     2\tb\n     3\tc\n… 2 more lines; read on with offset 4\n{DIGEST}")
        );
        assert_eq!(slice(&slice_of("a\n", 1, 1, 1)), format!("     1\ta\n{DIGEST}"));
        assert_eq!(slice(&slice_of("", 1, 0, 0)), "MEMORY.md is empty.\nsha256 ab12");
    }

    #[test]
    fn a_line_cut_within_says_where_it_goes_on() {
        let cut = FileSlice { truncated: true, byte_offset: 100, ..slice_of("xxxx", 3, 1, 9) };
        assert_eq!(
            slice(&cut),
            format!("     3\txxxx\n… line 3 goes on: read on with offset 3 and byte_offset 104\n{DIGEST}")
        );
    }

    #[test]
    fn no_result_passes_the_cap_and_a_cut_keeps_where_to_read_on() {
        assert_eq!(within_result("short".into()), "short");
        let long = within_result("é".repeat(MAX_RESULT_BYTES));
        assert!(long.len() <= MAX_RESULT_BYTES && long.ends_with("(a smaller limit).\n"), "{}", long.len());
        let paged = within_result(format!("{}\n… more matches: pass cursor abc", "x".repeat(MAX_RESULT_BYTES)));
        assert!(
            paged.len() <= MAX_RESULT_BYTES && paged.ends_with("pass cursor abc"),
            "{}",
            &paged[paged.len() - 80..]
        );
    }

    #[test]
    fn listings_mark_folders() {
        let entry = |path: &str, kind, bytes| MemoryEntry { path: path.into(), kind, bytes, modified_at: None };
        let listed = MemoryListing {
            entries: vec![entry("MEMORY.md", EntryKind::File, Some(12)), entry("skills", EntryKind::Dir, None)],
            next_cursor: None,
        };
        assert_eq!(listing(&listed), "MEMORY.md (12 bytes)\nskills/");
    }
}
