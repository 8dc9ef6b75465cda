//! Passages: the unit a search by relevance ranks (SPEC §2.10 "Search by
//! meaning"). A memory file is cut at its level-one and level-two headings:
//! a `## Task` section of `MEMORY.md` is one passage, ranked with its
//! `# Task Group` heading, and what stands under a `#` heading before its
//! first `##` (a group's scope, a summary's preamble) is one too. Deeper
//! headings (a task's `### keywords`) stay inside their section, and a `#`
//! inside a fenced code block is no heading.

/// One section of a memory file.
#[derive(Debug, Clone, PartialEq)]
pub struct Passage {
    /// 1-based, the section's first line (its heading's).
    pub line: u64,
    /// 1-based, its last line.
    pub end_line: u64,
    /// Its heading, under its group's (`Task Group: ci › Task 2: pin the runner`).
    pub heading: String,
    /// Its lines, the group heading's before them when it has one: what is ranked.
    pub ranked_text: String,
    /// Its lines as the file holds them: what an answer shows.
    pub text: String,
}

/// The files whose passages are ranked: the memory the agent reads —
/// `MEMORY.md`, `memory_summary.md`, rollout summaries and skills — not the
/// raw memories and the selection, which consolidation reads. `path` is
/// relative to the memory folder.
pub fn is_ranked(path: &str) -> bool {
    matches!(path, "MEMORY.md" | "memory_summary.md")
        || (path.starts_with("rollout_summaries/") && path.ends_with(".md"))
        || (path.starts_with("skills/") && path.ends_with(".md"))
}

/// What a passage's vector is stored under: the SHA-256 of the text embedded.
pub fn digest(passage: &Passage) -> String {
    crate::domain::ids::sha256_hex(passage.ranked_text.as_bytes())
}

/// The digests of the passages of `text`, each once, in order.
pub fn digests(text: &str) -> Vec<String> {
    let mut seen = std::collections::HashSet::new();
    cut(text).iter().map(digest).filter(|d| seen.insert(d.clone())).collect()
}

/// Where the section under way began, and the group it sits in.
struct Open {
    line: u64,
    heading: String,
    group: Option<String>,
    lines: Vec<String>,
}

/// The passages of a file's `text`, in order.
pub fn cut(text: &str) -> Vec<Passage> {
    let (mut passages, mut fenced) = (Vec::new(), false);
    let mut group: Option<String> = None;
    let mut open = Open { line: 1, heading: String::new(), group: None, lines: Vec::new() };
    for (index, line) in text.lines().enumerate() {
        let number = index as u64 + 1;
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        }
        let level = if fenced { None } else { heading_level(line) };
        if let Some(level @ (1 | 2)) = level {
            close(
                std::mem::replace(
                    &mut open,
                    Open { line: number, heading: String::new(), group: None, lines: Vec::new() },
                ),
                &mut passages,
            );
            let title = line.trim_start_matches('#').trim().to_owned();
            if level == 1 {
                group = Some(title.clone());
            }
            open.group = if level == 2 { group.clone() } else { None };
            open.heading = title;
        }
        open.lines.push(line.to_owned());
    }
    close(open, &mut passages);
    passages
}

/// Ends the section under way: a passage, unless nothing but its heading
/// (or blank lines) stands in it.
fn close(open: Open, passages: &mut Vec<Passage>) {
    let body = open.lines.iter().skip(usize::from(!open.heading.is_empty()));
    if body.clone().all(|l| l.trim().is_empty()) {
        return;
    }
    let text = open.lines.join("\n");
    let (heading, ranked_text) = match &open.group {
        Some(group) => (format!("{group} › {}", open.heading), format!("{group}\n{text}")),
        None => (open.heading.clone(), text.clone()),
    };
    let end_line = open.line + open.lines.len() as u64 - 1;
    passages.push(Passage { line: open.line, end_line, heading, ranked_text, text });
}

/// `Some(n)` for a Markdown heading of level `n` (`#`… and a space).
fn heading_level(line: &str) -> Option<usize> {
    let hashes = line.bytes().take_while(|b| *b == b'#').count();
    ((1..=6).contains(&hashes) && line[hashes..].starts_with(' ')).then_some(hashes)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MEMORY: &str = "# Task Group: ci\nscope: the CI of the web app\n\n## Task 1: pin the runner\n- pinned ubuntu-24.04\n### keywords\n- runner, image\n\n## Task 2: cache\n- bump the key\n# Task Group: tea\n## Task 1: green tea\n- in the morning\n";

    #[test]
    fn tasks_are_passages_with_their_group() {
        let passages = cut(MEMORY);
        let headings: Vec<&str> = passages.iter().map(|p| p.heading.as_str()).collect();
        assert_eq!(
            headings,
            [
                "Task Group: ci",
                "Task Group: ci › Task 1: pin the runner",
                "Task Group: ci › Task 2: cache",
                "Task Group: tea › Task 1: green tea"
            ]
        );
        let runner = &passages[1];
        assert_eq!((runner.line, runner.end_line), (4, 8));
        assert!(runner.text.starts_with("## Task 1") && runner.text.contains("- runner, image"), "keywords stay");
        assert!(runner.ranked_text.starts_with("Task Group: ci\n## Task 1"));
        assert_eq!(passages[3].line, 12, "a group heading alone makes no passage");
    }

    #[test]
    fn a_fenced_hash_is_no_heading_and_a_preamble_is_a_passage() {
        let passages = cut("intro line\n```sh\n# a comment\n```\n## Setup\nrun it\n");
        assert_eq!(passages.len(), 2);
        assert_eq!((passages[0].heading.as_str(), passages[0].end_line), ("", 4));
        assert_eq!(passages[1].heading, "Setup");
        assert!(cut("").is_empty() && cut("\n\n").is_empty());
        assert_eq!(cut("#hashtag\ntext").len(), 1, "no space, no heading");
    }
}
