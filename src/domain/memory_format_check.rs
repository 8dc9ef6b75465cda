//! Where a memory file strays from its format (SPEC §3.1): each problem with
//! the line it is on. The tests hold every file the extractive provider
//! writes to these checks.

use super::memory_format::{
    BLOCK_SECTIONS, MAX_PROFILE_WORDS, OLDER_TOPICS, OUTCOMES, RAW_SECTIONS, SUMMARY_FILE_SECTIONS, SUMMARY_SECTIONS,
    body, is_day, task_heading,
};

/// Which format a file is held to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    RolloutSummary,
    RawMemory,
    MemoryMd,
    MemorySummary,
    Skill,
}

/// A 1-based line of the checked text and what is wrong there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub line: usize,
    pub what: String,
}

/// Every problem of `text` held to `format`; none for a file that keeps it.
/// Rollout summaries and raw memories are checked after their header lines.
pub fn check(format: Format, text: &str) -> Vec<Problem> {
    let mut found = Found::default();
    match format {
        Format::RolloutSummary => rollout_summary(&mut found, &lines(body(text))),
        Format::RawMemory => raw_memory(&mut found, &lines(body(text))),
        Format::MemoryMd => memory_md(&mut found, &lines(text)),
        Format::MemorySummary => memory_summary(&mut found, &lines(text)),
        Format::Skill => skill(&mut found, &lines(text)),
    }
    if format != Format::Skill {
        common(&mut found, &lines(text));
    }
    found.0
}

fn lines(text: &str) -> Vec<&str> {
    text.lines().collect()
}

#[derive(Default)]
struct Found(Vec<Problem>);

impl Found {
    fn at(&mut self, index: usize, what: impl Into<String>) {
        self.0.push(Problem { line: index + 1, what: what.into() });
    }
}

/// Lists use `-`, nothing is bold.
fn common(found: &mut Found, lines: &[&str]) {
    for (i, line) in lines.iter().enumerate() {
        if line.trim_start().starts_with("* ") {
            found.at(i, "a list item with `*`: lists use `-`");
        }
        if line.contains("**") {
            found.at(i, "bold text: the memory files use none");
        }
    }
}

/// The next non-blank line at or after `from`.
fn next_filled(lines: &[&str], from: usize) -> Option<usize> {
    (from..lines.len()).find(|i| !lines[*i].trim().is_empty())
}

fn outcome_word(found: &mut Found, index: usize, value: &str) {
    if !OUTCOMES.contains(&value.trim()) {
        found.at(index, format!("outcome {value:?} is none of success, partial, fail, uncertain"));
    }
}

/// Subsections of a task, labelled by lines equal to (or starting with)
/// one of `labels`: in their order, each once and never empty.
fn sections(found: &mut Found, lines: &[&str], from: usize, to: usize, labels: &[&str]) {
    let mut last: Option<usize> = None;
    let mut open: Option<(usize, usize)> = None;
    let mut filled = false;
    for (i, line) in lines.iter().enumerate().take(to).skip(from) {
        let Some(label) = labels.iter().position(|l| line.trim() == *l) else {
            filled |= !line.trim().is_empty();
            continue;
        };
        if let Some((at, _)) = open.filter(|_| !filled) {
            found.at(at, format!("{} is empty: leave an empty subsection out", lines[at].trim()));
        }
        if last.is_some_and(|l| l >= label) {
            found.at(i, format!("{} is out of order or repeated", labels[label]));
        }
        last = Some(label);
        open = Some((i, label));
        filled = false;
    }
    if let Some((at, _)) = open.filter(|_| !filled) {
        found.at(at, format!("{} is empty: leave an empty subsection out", lines[at].trim()));
    }
}

/// The spans of numbered task headings (`hashes Task <n>: name`) within
/// `from..to`, numbered 1, 2, …; other headings of that level are refused.
fn tasks(found: &mut Found, lines: &[&str], from: usize, to: usize, hashes: &str) -> Vec<(usize, usize)> {
    let mut starts = Vec::new();
    for (i, line) in lines.iter().enumerate().take(to).skip(from) {
        match task_heading(line, hashes) {
            Some((number, name)) => {
                if number != starts.len() + 1 {
                    found.at(i, format!("task {number} should be numbered {}", starts.len() + 1));
                }
                if name.is_empty() {
                    found.at(i, "a task heading without a name");
                }
                starts.push(i);
            }
            None if line.starts_with(&format!("{hashes} ")) && hashes != "##" => {
                found.at(i, format!("a {hashes} heading that is not `{hashes} Task <n>: <name>`"));
            }
            None => {}
        }
    }
    let ends = starts.iter().skip(1).copied().chain([to]);
    starts.iter().copied().zip(ends).collect()
}

fn rollout_summary(found: &mut Found, lines: &[&str]) {
    match lines.first() {
        Some(first) if first.strip_prefix("# ").is_some_and(|s| !s.trim().is_empty()) => {}
        _ => found.at(0, "a rollout summary starts with `# <one-sentence summary>`"),
    }
    if lines.get(1).is_some_and(|l| !l.trim().is_empty()) {
        found.at(1, "a blank line follows the summary's title");
    }
    match next_filled(lines, 1) {
        Some(i) if lines[i].starts_with("Rollout context: ") => {}
        other => found.at(other.unwrap_or(1), "`Rollout context: …` follows the title"),
    }
    for (i, line) in lines.iter().enumerate().skip(1) {
        if line.starts_with("# ") {
            found.at(i, "only the title is a `#` heading");
        }
        if line.starts_with("## ") && task_heading(line, "##").is_none() {
            found.at(i, "a `##` heading that is not `## Task <n>: <name>` (no rollout-level sections)");
        }
    }
    let spans = tasks(found, lines, 0, lines.len(), "##");
    if spans.is_empty() {
        found.at(lines.len().saturating_sub(1), "a rollout summary has at least one `## Task <n>: <name>`");
    }
    for (start, end) in spans {
        match next_filled(lines, start + 1).filter(|i| *i < end) {
            Some(i) => match lines[i].strip_prefix("Outcome: ") {
                Some(word) => outcome_word(found, i, word),
                None => found.at(i, "a task's first line is `Outcome: <success|partial|fail|uncertain>`"),
            },
            None => found.at(start, "a task without its `Outcome:` line"),
        }
        sections(found, lines, start + 1, end, &SUMMARY_SECTIONS);
        references(found, lines, start, end);
    }
}

/// `References:` items are numbered `[1]`, `[2]`, … within a task.
fn references(found: &mut Found, lines: &[&str], start: usize, end: usize) {
    let Some(label) = (start..end).find(|i| lines[*i].trim() == "References:") else { return };
    let mut next = 1;
    for (i, line) in lines.iter().enumerate().take(end).skip(label + 1) {
        if SUMMARY_SECTIONS.contains(&line.trim()) {
            break;
        }
        let Some(item) = line.strip_prefix("- ") else { continue };
        if !item.starts_with(&format!("[{next}] ")) {
            found.at(i, format!("reference item {next} should start with [{next}]"));
        }
        next += 1;
    }
}

/// The line that closes a front matter opened on the first line; `what`
/// names the file in the problem when there is none.
fn front_matter_end(found: &mut Found, lines: &[&str], what: &str) -> Option<usize> {
    if lines.first().map(|l| l.trim()) != Some("---") {
        found.at(0, format!("{what} starts with its front matter between `---` lines"));
        return None;
    }
    let close = (1..lines.len()).find(|i| lines[*i].trim() == "---");
    if close.is_none() {
        found.at(0, "the front matter is not closed by `---`");
    }
    close
}

fn raw_memory(found: &mut Found, lines: &[&str]) {
    let Some(close) = front_matter_end(found, lines, "a raw memory") else { return };
    let mut seen = Vec::new();
    for (i, line) in lines.iter().enumerate().take(close).skip(1) {
        let Some((key, value)) = line.split_once(':') else {
            found.at(i, "a front matter line is `key: value`");
            continue;
        };
        if value.trim().is_empty() {
            found.at(i, format!("{key} is empty"));
        }
        if key == "task_outcome" {
            outcome_word(found, i, value);
        }
        seen.push(key.trim());
    }
    for key in ["description", "task", "task_group", "task_outcome", "keywords"] {
        if !seen.contains(&key) {
            found.at(0, format!("the front matter has no {key}:"));
        }
    }
    let spans = tasks(found, lines, close + 1, lines.len(), "###");
    if spans.is_empty() {
        found.at(close, "a raw memory has at least one `### Task <n>: <name>` block");
    }
    for (start, end) in spans {
        for key in ["task:", "task_group:", "task_outcome:"] {
            match (start..end).find(|i| lines[*i].starts_with(key)) {
                Some(i) if key == "task_outcome:" => outcome_word(found, i, &lines[i][key.len()..]),
                Some(_) => {}
                None => found.at(start, format!("the task block has no `{key}` line")),
            }
        }
        sections(found, lines, start + 1, end, &RAW_SECTIONS);
    }
}

/// A `rollout_summary_files` bullet: `- rollout_summaries/<file>.md (rollout_id=…, updated_at=…, terminal_state=…[, note])`.
fn summary_file_bullet(line: &str) -> bool {
    let Some(rest) = line.strip_prefix("- rollout_summaries/") else { return false };
    let Some((file, notes)) = rest.split_once(".md (") else { return false };
    let fields: Vec<&str> = notes.trim_end_matches(')').split(", ").collect();
    !file.is_empty()
        && notes.ends_with(')')
        && fields.len() >= 3
        && fields[0].strip_prefix("rollout_id=").is_some_and(|v| !v.is_empty())
        && fields[1].starts_with("updated_at=")
        && fields[2].starts_with("terminal_state=")
}

fn memory_md(found: &mut Found, lines: &[&str]) {
    let starts: Vec<usize> = (0..lines.len()).filter(|i| lines[*i].starts_with("# ")).collect();
    if let Some(i) = next_filled(lines, 0).filter(|i| starts.first() != Some(i)) {
        found.at(i, "MEMORY.md holds `# Task Group: <family>` blocks and nothing before them");
    }
    let ends = starts.iter().skip(1).copied().chain([lines.len()]);
    for (start, end) in starts.iter().copied().zip(ends.collect::<Vec<_>>()) {
        memory_block(found, lines, start, end);
    }
}

fn memory_block(found: &mut Found, lines: &[&str], start: usize, end: usize) {
    if lines[start].strip_prefix("# Task Group: ").is_none_or(|g| g.trim().is_empty()) {
        found.at(start, "a block starts with `# Task Group: <family>`");
    }
    match next_filled(lines, start + 1).filter(|i| *i < end) {
        Some(i) if lines[i].strip_prefix("scope: ").is_some_and(|s| !s.trim().is_empty()) => {}
        other => found.at(other.unwrap_or(start), "`scope: <what it covers>` follows the block's heading"),
    }
    let first_section = (start..end).find(|i| BLOCK_SECTIONS.contains(&lines[*i].trim())).unwrap_or(end);
    let spans = tasks(found, lines, start, first_section, "##");
    if spans.is_empty() {
        found.at(start, "a block has at least one `## Task <n>: <description, outcome>`");
    }
    for (task, task_end) in spans {
        task_anchors(found, lines, task, task_end);
    }
    for (i, line) in lines.iter().enumerate().take(end).skip(first_section) {
        if line.starts_with("## ") && !BLOCK_SECTIONS.contains(&line.trim()) {
            found.at(i, "after the tasks only User preferences, Reusable knowledge and Failures sections follow");
        }
        if line.starts_with("- ") && !line.contains("[Task ") {
            found.at(i, "a block-level bullet cites its tasks ([Task 1])");
        }
    }
    sections(found, lines, first_section, end, &BLOCK_SECTIONS);
}

const RELATED_SKILL: &str = "- Related skill: ";

/// A task's `### rollout_summary_files` (annotated bullets) and `### keywords` (one bullet).
fn task_anchors(found: &mut Found, lines: &[&str], task: usize, end: usize) {
    let heading = |name: &str| (task..end).find(|i| lines[*i].trim() == name);
    let bullets = |from: usize| -> Vec<usize> {
        (from + 1..end).take_while(|i| !lines[*i].starts_with('#')).filter(|i| lines[*i].starts_with("- ")).collect()
    };
    match heading("### rollout_summary_files") {
        None => found.at(task, "a task has `### rollout_summary_files`"),
        Some(at) => {
            let listed = bullets(at);
            if listed.is_empty() {
                found.at(at, "rollout_summary_files lists at least one file");
            }
            for i in listed.into_iter().filter(|i| !summary_file_bullet(lines[*i])) {
                found.at(i, "a file bullet is `- rollout_summaries/<file>.md (rollout_id=<id>, updated_at=<timestamp>, terminal_state=<state>)`");
            }
        }
    }
    match heading("### keywords") {
        None => found.at(task, "a task has `### keywords`"),
        // A pointer to a related skill may follow the keywords (the prompt's place for it).
        Some(at) if bullets(at).iter().filter(|i| !lines[**i].starts_with(RELATED_SKILL)).count() != 1 => {
            found.at(at, "keywords are one comma-separated bullet")
        }
        Some(_) => {}
    }
}

fn memory_summary(found: &mut Found, lines: &[&str]) {
    let mut at = Vec::new();
    for section in SUMMARY_FILE_SECTIONS {
        match lines.iter().position(|l| l.trim() == section) {
            Some(i) => at.push(i),
            None => found.at(0, format!("memory_summary.md has no {section}")),
        }
    }
    if at.windows(2).any(|w| w[0] > w[1]) {
        found.at(0, "the sections are User Profile, User preferences, General Tips, What's in Memory, in that order");
    }
    if let (Some(profile), Some(next)) = (at.first(), at.get(1)) {
        let words: usize = lines[*profile + 1..*next].iter().map(|l| l.split_whitespace().count()).sum();
        if words > MAX_PROFILE_WORDS + MAX_PROFILE_WORDS / 5 {
            found.at(*profile, format!("the profile has {words} words, past about {MAX_PROFILE_WORDS}"));
        }
    }
    if let Some(index) = lines.iter().position(|l| l.trim() == "## What's in Memory") {
        memory_index(found, lines, index);
    }
}

/// `## What's in Memory`: recent topics by `### scope` / `#### YYYY-MM-DD`,
/// then `### Older Memory Topics` by `#### scope`; each topic with its `desc:`.
fn memory_index(found: &mut Found, lines: &[&str], index: usize) {
    let mut older = false;
    let mut under_heading = false;
    for (i, line) in lines.iter().enumerate().skip(index + 1) {
        if line.trim() == OLDER_TOPICS {
            older = true;
            under_heading = false;
        } else if let Some(day) = line.strip_prefix("#### ") {
            if !older && !is_day(day.trim()) {
                found.at(i, "a recent topic's day is `#### YYYY-MM-DD`");
            }
            under_heading = true;
        } else if line.starts_with("### ") {
            under_heading = false;
        } else if line.starts_with("- ") {
            if !under_heading {
                found.at(i, "a topic stands under a `####` day (recent) or scope (older)");
            }
            if !line.contains(": ") {
                found.at(i, "a topic is `- <topic>: <keyword>, <keyword>, …`");
            }
            if lines.get(i + 1).is_none_or(|next| !next.starts_with("  - desc: ")) {
                found.at(i, "a topic is followed by its `  - desc:` line");
            }
        }
    }
}

/// Every `# Task Group` of `memory` is named by some topic line of `summary`.
pub fn uncovered_groups<'a>(memory: &'a str, summary: &str) -> Vec<&'a str> {
    let topics = summary.to_lowercase();
    memory
        .lines()
        .filter_map(|l| l.strip_prefix("# Task Group: "))
        .filter(|group| !topics.contains(&group.trim().to_lowercase()))
        .collect()
}

fn skill(found: &mut Found, lines: &[&str]) {
    let Some(close) = front_matter_end(found, lines, "a skill") else { return };
    let field = |key: &str| lines[1..close].iter().find_map(|l| l.strip_prefix(key)).map(str::trim);
    match field("name:") {
        Some(name)
            if !name.is_empty() && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-') => {}
        _ => found.at(0, "a skill's name: is lower-case and hyphenated"),
    }
    if field("description:").is_none_or(str::is_empty) {
        found.at(0, "a skill's description: says when to use it");
    }
    if next_filled(lines, close + 1).is_none() {
        found.at(close, "a skill has its procedure after the front matter");
    }
}

#[cfg(test)]
#[path = "memory_format_tests.rs"]
mod tests;
