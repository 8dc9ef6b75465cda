//! The extractive phase two: `MEMORY.md` and `memory_summary.md` rebuilt in
//! the formats of SPEC §3.1 from the selected raw memories (newest first),
//! so that what dropped out of the selection drops out of memory too. A raw
//! memory in another shape (a model's prose, an older memoryd's) keeps every
//! line it holds, as knowledge of a task of its own.

use super::signals::one_line;
use crate::domain::memory_format::{RawMemory, RawTask, is_day, parse_raw_memory};

/// Topics of this many newest raw memories are the summary's recent ones.
const RECENT_MEMORIES: usize = 8;
/// A block-level bullet longer than this is cut.
const MAX_BULLET_CHARS: usize = 600;
/// The summary's preference and tip lists keep at most this many bullets.
const MAX_SUMMARY_BULLETS: usize = 40;

/// A raw memory with its tasks, a shapeless one made one task of its lines.
fn with_tasks(mut raw: RawMemory) -> RawMemory {
    if raw.task_group.trim().is_empty() {
        raw.task_group = format!("rollout {}", if raw.rollout_id.is_empty() { "unknown" } else { &raw.rollout_id });
    }
    if raw.tasks.is_empty() {
        let name = [&raw.description, &raw.task].into_iter().find(|t| !t.is_empty()).cloned();
        let loose =
            raw.loose.iter().map(|l| l.trim_start_matches(['#', '-', ' ']).to_owned()).filter(|l| !l.is_empty());
        let mut task = RawTask {
            name: name.unwrap_or_else(|| format!("conversation {}", raw.rollout_id)),
            outcome: if raw.outcome.is_empty() { "uncertain".into() } else { raw.outcome.clone() },
            ..RawTask::default()
        };
        task.sections[1] = loose.collect();
        raw.tasks.push(task);
    }
    raw
}

/// The tasks of one `# Task Group`, newest first: each with the raw memory it is of.
struct Block<'a> {
    group: String,
    tasks: Vec<(&'a RawMemory, &'a RawTask)>,
}

/// Tasks go to the block of their own `task_group` (a rollout's tasks may
/// belong to several), else of their raw memory's.
fn blocks(raws: &[RawMemory]) -> Vec<Block<'_>> {
    let mut blocks: Vec<Block<'_>> = Vec::new();
    for raw in raws {
        for task in &raw.tasks {
            let group =
                if task.task_group.trim().is_empty() { raw.task_group.clone() } else { task.task_group.clone() };
            match blocks.iter_mut().find(|b| b.group == group) {
                Some(block) => block.tasks.push((raw, task)),
                None => blocks.push(Block { group, tasks: vec![(raw, task)] }),
            }
        }
    }
    blocks
}

fn outcome_of(task: &RawTask, raw: &RawMemory) -> String {
    [&task.outcome, &raw.outcome].into_iter().find(|o| !o.is_empty()).cloned().unwrap_or_else(|| "uncertain".into())
}

/// A task's own keywords: those of its raw memory its name or subsections
/// mention, else its name's longer words.
fn keywords_of(raw: &RawMemory, task: &RawTask) -> String {
    let text = format!("{} {}", task.name, task.sections.iter().flatten().cloned().collect::<Vec<_>>().join(" "))
        .to_lowercase();
    let mut keywords: Vec<String> = raw.keywords.iter().filter(|k| text.contains(&k.to_lowercase())).cloned().collect();
    for word in task.name.split(|c: char| c.is_whitespace() || c == ',').filter(|w| w.len() > 3) {
        let word = word.trim_matches(|c: char| !c.is_alphanumeric()).to_lowercase();
        if keywords.len() < 8 && !word.is_empty() && !keywords.iter().any(|k| k.to_lowercase() == word) {
            keywords.push(word);
        }
    }
    keywords.join(", ").replace(['\n', '\r'], " ")
}

/// One `# Task Group` block: its tasks with their anchors, then what they teach, each bullet citing its tasks.
fn block_text(block: &Block<'_>) -> String {
    let mut scope: Vec<String> = Vec::new();
    for (raw, task) in &block.tasks {
        let line = format!("{} ({})", one_line(&task.name, 120), outcome_of(task, raw));
        if scope.len() < 3 && !scope.contains(&line) {
            scope.push(line);
        }
    }
    let mut out = format!("# Task Group: {}\n\nscope: {}\n", block.group, scope.join("; "));
    let mut learned: [Vec<String>; 3] = Default::default();
    for (number, (raw, task)) in block.tasks.iter().enumerate().map(|(i, t)| (i + 1, t)) {
        out.push_str(&format!("\n## Task {number}: {}, {}\n\n", one_line(&task.name, 160), outcome_of(task, raw)));
        out.push_str(&format!(
            "### rollout_summary_files\n\n- {} (rollout_id={}, updated_at={}, terminal_state={})\n\n",
            raw.rollout_summary_file,
            raw.rollout_id,
            raw.updated_at,
            if raw.terminal_state.is_empty() { "unknown" } else { &raw.terminal_state }
        ));
        out.push_str(&format!("### keywords\n\n- {}\n", keywords_of(raw, task)));
        for (into, from) in learned.iter_mut().zip([0, 1, 2]) {
            for item in &task.sections[from] {
                let bullet = format!("- {} [Task {number}]", one_line(item, MAX_BULLET_CHARS));
                if !into.contains(&bullet) {
                    into.push(bullet);
                }
            }
        }
    }
    for (heading, bullets) in
        ["## User preferences", "## Reusable knowledge", "## Failures and how to do differently"].iter().zip(&learned)
    {
        if !bullets.is_empty() {
            out.push_str(&format!("\n{heading}\n\n{}\n", bullets.join("\n")));
        }
    }
    out
}

/// The items of one subsection (by index) across every raw memory, deduplicated.
fn every(raws: &[RawMemory], section: usize) -> Vec<String> {
    let mut items: Vec<String> = Vec::new();
    for item in raws.iter().flat_map(|r| &r.tasks).flat_map(|t| &t.sections[section]) {
        let item = one_line(item, MAX_BULLET_CHARS);
        if items.len() < MAX_SUMMARY_BULLETS && !items.contains(&item) {
            items.push(item);
        }
    }
    items
}

fn profile(raws: &[RawMemory]) -> String {
    if raws.is_empty() {
        return "No conversation is remembered yet.".into();
    }
    let who: Vec<String> = every(raws, 0).into_iter().filter(|p| p.contains("who the user is")).take(10).collect();
    let newest = raws.first().map(|r| r.updated_at.get(..10).unwrap_or(&r.updated_at).to_owned()).unwrap_or_default();
    let mut text = format!(
        "A user of this agent, remembered from {} conversation{} (the newest {newest}).",
        raws.len(),
        if raws.len() == 1 { "" } else { "s" }
    );
    for statement in who {
        text.push_str(&format!("\n- {statement}"));
    }
    text
}

fn topic(raw: &RawMemory, task: &RawTask, with_learnings: bool) -> String {
    let desc = if raw.description.is_empty() { task.name.clone() } else { raw.description.clone() };
    let mut out =
        format!("- {}: {}\n  - desc: {}\n", one_line(&task.name, 120), keywords_of(raw, task), one_line(&desc, 300));
    if with_learnings {
        let learnings: Vec<String> =
            task.sections[2].iter().chain(&task.sections[1]).take(2).map(|l| one_line(l, 240)).collect();
        if !learnings.is_empty() {
            out.push_str(&format!("  - learnings: {}\n", learnings.join("; ")));
        }
    }
    out
}

/// `## What's in Memory`: the tasks of the newest raw memories by scope and
/// day, then every other task by scope; every task group reachable from a topic.
fn index(blocks: &[Block<'_>], raws: &[RawMemory]) -> String {
    let recent = |raw: &RawMemory| {
        raws.iter().take(RECENT_MEMORIES).any(|r| std::ptr::eq(r, raw)) && raw.updated_at.get(..10).is_some_and(is_day)
    };
    let mut out = String::from("## What's in Memory\n");
    for block in blocks {
        let mine: Vec<&(&RawMemory, &RawTask)> = block.tasks.iter().filter(|(raw, _)| recent(raw)).collect();
        if mine.is_empty() {
            continue;
        }
        out.push_str(&format!("\n### {}\n", block.group));
        let mut days: Vec<&str> = mine.iter().map(|(raw, _)| &raw.updated_at[..10]).collect();
        days.dedup();
        for day in days {
            out.push_str(&format!("\n#### {day}\n\n"));
            for (raw, task) in mine.iter().filter(|(raw, _)| &raw.updated_at[..10] == day) {
                out.push_str(&topic(raw, task, true));
            }
        }
    }
    let mut older = String::new();
    for block in blocks {
        let rest: Vec<&(&RawMemory, &RawTask)> = block.tasks.iter().filter(|(raw, _)| !recent(raw)).collect();
        if rest.is_empty() {
            continue;
        }
        older.push_str(&format!("\n#### {}\n\n", block.group));
        for (raw, task) in rest {
            older.push_str(&topic(raw, task, false));
        }
    }
    if !older.is_empty() {
        out.push_str(&format!("\n### Older Memory Topics\n{older}"));
    }
    out
}

fn bullets_or(items: &[String], none: &str) -> String {
    if items.is_empty() { format!("- {none}\n") } else { items.iter().map(|i| format!("- {i}\n")).collect() }
}

/// `MEMORY.md` and `memory_summary.md` from the selected raw memories (file
/// contents, header lines included), newest first.
pub fn consolidate(raw_memories: &[String]) -> (String, String) {
    let raws: Vec<RawMemory> = raw_memories.iter().map(|r| with_tasks(parse_raw_memory(r))).collect();
    let groups = blocks(&raws);
    let memory = groups.iter().map(block_text).collect::<Vec<_>>().join("\n");
    let preferences: Vec<String> = every(&raws, 0).into_iter().filter(|p| !p.contains("who the user is")).collect();
    let mut tips = every(&raws, 2);
    tips.extend(every(&raws, 1).into_iter().filter(|k| k.starts_with("after ")));
    let summary = format!(
        "## User Profile\n\n{}\n\n## User preferences\n\n{}\n## General Tips\n\n{}\n{}",
        profile(&raws),
        bullets_or(&preferences, "none stated yet: the conversations so far set no default"),
        bullets_or(&tips, "nothing learned the hard way yet"),
        index(&groups, &raws)
    );
    (memory, summary)
}
