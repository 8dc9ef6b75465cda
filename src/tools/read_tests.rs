//! Tests of `read.rs`.

use super::*;
use crate::tools::search::*;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

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

fn list_http(root: &Path, dir: &str, after: Option<&str>) -> Result<ListPage, ReadError> {
    list(root, dir, after, HTTP_LIST)
}

fn read_http(root: &Path, path: &str, offset: u64, limit: Option<u64>) -> Result<FileSlice, ReadError> {
    read(root, path, SliceRequest { offset, limit, byte_offset: 0 }, HTTP_READ)
}

fn query(text: &str) -> SearchQuery<'_> {
    SearchQuery {
        query: text,
        regex: false,
        case_sensitive: false,
        context: 0,
        limit: 50,
        after: None,
        budget: HTTP_SEARCH,
    }
}

fn unhurried() -> SearchStop {
    SearchStop::new(Instant::now() + Duration::from_secs(600), Arc::default())
}

fn search(root: &Path, dir: &str, query: &SearchQuery<'_>) -> Result<SearchPage, ReadError> {
    crate::tools::search::search(root, dir, query, &unhurried())
}

/// Every `(path, line)` that following the cursors from the first page
/// visits, and how many pages it took.
fn every_page(root: &Path, query: SearchQuery<'_>, stop: impl Fn() -> SearchStop) -> (Vec<(String, u64)>, usize) {
    let (mut seen, mut pages, mut after) = (Vec::new(), 0, None);
    loop {
        pages += 1;
        assert!(pages < 10_000, "the cursors never end: {seen:?}");
        let page =
            crate::tools::search::search(root, "", &SearchQuery { after: after.clone(), ..query }, &stop()).unwrap();
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
    let page = list_http(&root, "", None).unwrap();
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
    let after = list_http(&root, "skills", Some("skills/ci")).unwrap();
    assert_eq!(after.entries.len(), 1);
    assert!(matches!(list_http(&root, "nothing", None), Err(ReadError::NotFound(_))));
    assert!(list_http(&root.join("not-yet"), "", None).unwrap().entries.is_empty(), "a folder not made yet is empty");
    assert_eq!(list_http(&root, "MEMORY.md", None).unwrap().entries.len(), 1);
}

#[test]
fn reads_are_sliced_by_lines_and_capped_by_bytes() {
    let (_dir, root) = folder();
    let whole = read_http(&root, "MEMORY.md", 1, None).unwrap();
    assert_eq!((whole.lines, whole.total_lines, whole.truncated), (3, 3, false));
    assert_eq!(whole.sha256, sha256_hex(b"# Memory\n- green tea\n- ci: pin the runner\n"));
    let slice = read_http(&root, "MEMORY.md", 2, Some(1)).unwrap();
    assert_eq!((slice.text.as_str(), slice.offset, slice.lines), ("- green tea\n", 2, 1));
    assert!(matches!(read_http(&root, "MEMORY.md", 9, None), Err(ReadError::Invalid(_))));
    assert!(matches!(read_http(&root, "skills", 1, None), Err(ReadError::Invalid(_))));
    assert!(matches!(read_http(&root, "nope.md", 1, None), Err(ReadError::NotFound(_))));
    std::fs::write(root.join("big.md"), "x".repeat(50_000) + "\n" + &"y".repeat(50_000) + "\n").unwrap();
    let capped = read_http(&root, "big.md", 1, None).unwrap();
    assert_eq!((capped.lines, capped.truncated, capped.text.len()), (1, true, 50_001));
    std::fs::write(root.join("huge.md"), "é".repeat(60_000)).unwrap();
    let cut = read_http(&root, "huge.md", 1, None).unwrap();
    assert!(cut.truncated && cut.text.len() <= MAX_READ_BYTES && cut.text.len() >= MAX_READ_BYTES - 1);
    std::fs::write(root.join("bad.md"), b"ok\n\xff\xfe\n").unwrap();
    assert_eq!(read_http(&root, "bad.md", 2, None).unwrap().text, "\u{fffd}\u{fffd}\n");
    std::fs::write(root.join("empty.md"), "").unwrap();
    assert_eq!(read_http(&root, "empty.md", 1, None).unwrap().total_lines, 0);
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
    let page =
        crate::tools::search::search(&root, "many.md", &SearchQuery { regex: true, ..query("x\\nx") }, &cancelled)
            .unwrap();
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
    let patterns = ["^", "$", "a*", "a", "^$", "b|$", "(?s).*", "\\b", "a+b?", "é", "a\\nb|b", "(?s)a.*b|x", "tea$"];
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

#[test]
fn a_budget_pages_a_listing_and_each_page_holds_one_entry_at_least() {
    let (_dir, root) = folder();
    let tight = Budget { bytes: 100, per_line: 24 };
    let (mut seen, mut after, mut pages) = (Vec::new(), None, 0);
    loop {
        pages += 1;
        let page = list(&root, "", after.as_deref(), tight).unwrap();
        let cost: usize = page.entries.iter().map(|e| tight.line(e.path.len())).sum();
        assert!(page.entries.len() == 1 || cost <= tight.bytes, "{cost}");
        seen.extend(page.entries.iter().map(|e| e.path.clone()));
        match page.next_after {
            Some(next) => after = Some(next),
            None => break,
        }
    }
    let all: Vec<String> = list_http(&root, "", None).unwrap().entries.into_iter().map(|e| e.path).collect();
    assert_eq!(seen, all);
    assert!(pages > 2, "the budget cut the listing into pages");
}

#[test]
fn a_line_longer_than_the_budget_is_read_in_pieces() {
    let (_dir, root) = folder();
    let line = "ab".repeat(500) + "é" + &"c".repeat(301);
    std::fs::write(root.join("long.md"), format!("first\n{line}\nlast\n")).unwrap();
    let budget = Budget { bytes: 300, per_line: 12 };
    let (mut pieces, mut byte_offset) = (String::new(), 0);
    loop {
        let slice = read(&root, "long.md", SliceRequest { offset: 2, limit: None, byte_offset }, budget).unwrap();
        assert_eq!((slice.offset, slice.byte_offset), (2, byte_offset));
        pieces.push_str(&slice.text);
        if slice.text.ends_with('\n') {
            break;
        }
        assert!(slice.truncated && !slice.text.is_empty() && slice.text.len() <= 300, "{slice:?}");
        byte_offset += slice.text.len() as u64;
    }
    assert!(pieces.starts_with(&format!("{line}\n")), "the pieces make the line again");
    let inside_e = SliceRequest { offset: 2, limit: Some(1), byte_offset: 1001 };
    assert_eq!(read(&root, "long.md", inside_e, HTTP_READ).unwrap().byte_offset, 1000, "back to a character");
    let past = SliceRequest { offset: 2, limit: None, byte_offset: line.len() as u64 + 1 };
    assert!(matches!(read(&root, "long.md", past, HTTP_READ), Err(ReadError::Invalid(_))));
    let at_end = SliceRequest { offset: 2, limit: Some(1), byte_offset: line.len() as u64 };
    assert_eq!(
        read(&root, "long.md", at_end, HTTP_READ).unwrap().text,
        "\n",
        "the end of a line is a place to read on from"
    );
}

#[test]
fn a_line_one_newline_longer_than_the_budget_is_read_whole() {
    let (_dir, root) = folder();
    let budget = Budget { bytes: 300, per_line: 12 };
    std::fs::write(root.join("edge.md"), format!("{}\nnext\n", "y".repeat(288))).unwrap();
    let first = read(&root, "edge.md", SliceRequest { offset: 1, limit: None, byte_offset: 0 }, budget).unwrap();
    assert_eq!(first.text.len(), 289, "no piece of one newline is left for a second read");
    assert!(first.truncated && first.text.ends_with('\n'));
}

#[test]
fn a_search_budget_charges_each_lines_path_and_pages_through_everything() {
    let (_dir, root) = folder();
    let (all, one_page) = every_page(&root, query("tea"), unhurried);
    assert_eq!(one_page, 1);
    let tight = SearchQuery { context: 1, budget: Budget { bytes: 30, per_line: 16 }, ..query("tea") };
    let (seen, pages) = every_page(&root, tight, unhurried);
    assert_eq!(seen, all, "every match once, in order");
    assert!(pages >= all.len(), "each match costs more than the budget: one a page");
}

#[test]
fn a_first_match_too_big_for_the_page_keeps_its_line_and_drops_context() {
    let (_dir, root) = folder();
    let text: String =
        (0..41).map(|i| if i == 20 { "needle\n".to_owned() } else { format!("{}\n", "c".repeat(900)) }).collect();
    std::fs::write(root.join("wide.md"), text).unwrap();
    let tight = SearchQuery { context: 20, budget: Budget { bytes: 5_000, per_line: 16 }, ..query("needle") };
    let page = search(&root, "wide.md", &tight).unwrap();
    let found = &page.matches[0];
    assert_eq!((found.line, found.text.as_str()), (21, "needle"));
    assert!(found.before.len() + found.after.len() < 40 && !found.before.is_empty(), "context trimmed to fit");
    assert!(found.text_bytes() <= 5_000);
}
