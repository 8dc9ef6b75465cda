//! The memory files' formats (SPEC §3.1), as the SDK's prompts set them: a
//! rollout summary, a raw memory, `MEMORY.md`, `memory_summary.md` and a
//! skill. The extractive provider writes them and reads raw memories back
//! through [`parse_raw_memory`]; `memory_format_check` says where a file
//! strays, for the tests and for anything that must trust a file it did not
//! write.

/// The four outcome words of a task.
pub const OUTCOMES: [&str; 4] = ["success", "partial", "fail", "uncertain"];
/// A rollout summary task's subsections, in their order.
pub const SUMMARY_SECTIONS: [&str; 5] =
    ["Preference signals:", "Key steps:", "Failures and how to do differently:", "Reusable knowledge:", "References:"];
/// A raw memory task block's subsections, in their order.
pub const RAW_SECTIONS: [&str; 4] =
    ["Preference signals:", "Reusable knowledge:", "Failures and how to do differently:", "References:"];
/// A `MEMORY.md` block's sections after its tasks, in their order.
pub const BLOCK_SECTIONS: [&str; 3] =
    ["## User preferences", "## Reusable knowledge", "## Failures and how to do differently"];
/// `memory_summary.md`'s sections, in their order.
pub const SUMMARY_FILE_SECTIONS: [&str; 4] =
    ["## User Profile", "## User preferences", "## General Tips", "## What's in Memory"];
/// The index section of older topics in `memory_summary.md`.
pub const OLDER_TOPICS: &str = "### Older Memory Topics";
/// The profile is free-form, at most about this many words.
pub const MAX_PROFILE_WORDS: usize = 500;

/// The text after a file's header lines (`key: value` lines up to the
/// first empty one, R-P1-12/13); the whole text when it has none.
pub fn body(text: &str) -> &str {
    let mut at = 0;
    for line in text.split_inclusive('\n') {
        let bare = line.trim_end_matches(['\n', '\r']);
        if bare.is_empty() {
            return if at == 0 { text } else { &text[at + line.len()..] };
        }
        if !is_header_line(bare) {
            return text;
        }
        at += line.len();
    }
    text
}

fn is_header_line(line: &str) -> bool {
    line.split_once(": ")
        .is_some_and(|(key, _)| !key.is_empty() && key.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'))
}

/// A `YYYY-MM-DD` day, as `memory_summary.md`'s recent topics are headed.
pub fn is_day(text: &str) -> bool {
    let bytes = text.as_bytes();
    bytes.len() == 10
        && bytes.iter().enumerate().all(|(i, b)| if i == 4 || i == 7 { *b == b'-' } else { b.is_ascii_digit() })
}

/// `Task <n>: <name>` after a heading's hashes: the number and the name.
pub fn task_heading<'a>(line: &'a str, hashes: &str) -> Option<(usize, &'a str)> {
    let rest = line.strip_prefix(hashes)?.strip_prefix(" Task ")?;
    let (number, name) = rest.split_once(':')?;
    Some((number.trim().parse().ok()?, name.trim()))
}

/// One task block of a raw memory.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RawTask {
    pub name: String,
    pub task: String,
    pub task_group: String,
    pub outcome: String,
    /// Lines of each subsection, by [`RAW_SECTIONS`] index, bullets without their `- `.
    pub sections: [Vec<String>; 4],
}

/// A raw memory as its format reads: the header lines, the front matter and
/// the task blocks. Text outside them (a writer that kept no format) is
/// `loose`, line by line, so that nothing a writer wrote is lost.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RawMemory {
    pub rollout_id: String,
    pub updated_at: String,
    pub rollout_summary_file: String,
    pub terminal_state: String,
    pub description: String,
    pub task: String,
    pub task_group: String,
    pub outcome: String,
    pub keywords: Vec<String>,
    pub tasks: Vec<RawTask>,
    pub loose: Vec<String>,
}

/// Reads a raw memory file (header lines included, or not).
pub fn parse_raw_memory(text: &str) -> RawMemory {
    let mut memory = RawMemory::default();
    let rest = body(text);
    for line in text[..text.len() - rest.len()].lines() {
        let Some((key, value)) = line.split_once(": ") else { continue };
        let value = value.trim().to_owned();
        match key {
            "rollout_id" => memory.rollout_id = value,
            "updated_at" => memory.updated_at = value,
            "rollout_summary_file" => memory.rollout_summary_file = value,
            "terminal_state" => memory.terminal_state = value,
            _ => {}
        }
    }
    let mut lines = rest.lines().peekable();
    if lines.peek().map(|l| l.trim()) == Some("---") {
        lines.next();
        for line in lines.by_ref() {
            if line.trim() == "---" {
                break;
            }
            front_matter_field(&mut memory, line);
        }
    }
    let mut section: Option<usize> = None;
    for line in lines {
        if let Some((_, name)) = task_heading(line, "###") {
            memory.tasks.push(RawTask { name: name.to_owned(), ..RawTask::default() });
            section = None;
            continue;
        }
        let Some(task) = memory.tasks.last_mut() else {
            if !line.trim().is_empty() {
                memory.loose.push(line.to_owned());
            }
            continue;
        };
        if let Some(found) = RAW_SECTIONS.iter().position(|label| line.trim() == *label) {
            section = Some(found);
            continue;
        }
        match (section, line.split_once(": ")) {
            (None, Some(("task", v))) => task.task = v.trim().to_owned(),
            (None, Some(("task_group", v))) => task.task_group = v.trim().to_owned(),
            (None, Some(("task_outcome", v))) => task.outcome = v.trim().to_owned(),
            (Some(at), _) if !line.trim().is_empty() => {
                let item = line.trim().strip_prefix("- ").unwrap_or(line.trim());
                task.sections[at].push(item.to_owned());
            }
            (None, _) if !line.trim().is_empty() => memory.loose.push(line.to_owned()),
            _ => {}
        }
    }
    memory
}

fn front_matter_field(memory: &mut RawMemory, line: &str) {
    let Some((key, value)) = line.split_once(':') else { return };
    let value = value.trim().to_owned();
    match key.trim() {
        "description" => memory.description = value,
        "task" => memory.task = value,
        "task_group" => memory.task_group = value,
        "task_outcome" => memory.outcome = value,
        "keywords" => {
            memory.keywords = value.split(',').map(|k| k.trim().to_owned()).filter(|k| !k.is_empty()).collect();
        }
        _ => {}
    }
}
