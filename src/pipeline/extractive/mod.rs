//! The `extractive` provider: memory with no model and no network (SPEC
//! §5). Phase one reads a rollout's tasks ([`signals`]) and writes its
//! rollout summary and raw memory in the formats of SPEC §3.1; phase two
//! ([`consolidate`]) builds `MEMORY.md` and `memory_summary.md` from the
//! selected raw memories, in those formats too.

mod consolidate;
mod signals;

pub use consolidate::consolidate;

use super::phase_one::RolloutArtifacts;
use signals::{Task, read_tasks, task_group};

/// A slug from the first request: lower-case words joined by `-` (R-P1-10 safe).
fn slug_from(text: &str) -> String {
    let words: Vec<String> = text
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|w| !w.is_empty())
        .take(6)
        .map(str::to_ascii_lowercase)
        .collect();
    let mut slug = words.join("-");
    slug.truncate(60);
    let slug = slug.trim_end_matches('-').to_owned();
    if slug.is_empty() { "rollout".into() } else { slug }
}

fn subsection(out: &mut String, label: &str, items: &[String], numbered: bool) {
    if items.is_empty() {
        return;
    }
    out.push_str(&format!("\n{label}\n\n"));
    for (i, item) in items.iter().enumerate() {
        if numbered {
            out.push_str(&format!("- [{}] {item}\n", i + 1));
        } else {
            out.push_str(&format!("- {item}\n"));
        }
    }
}

fn preference_bullets(task: &Task) -> Vec<String> {
    task.preferences.iter().map(|(_, bullet)| bullet.clone()).collect()
}

/// The rollout summary (SPEC §3.1): a title, its context, a section a task.
fn rollout_summary(tasks: &[Task]) -> String {
    let first = &tasks[0].name;
    let title = match tasks.len() {
        1 => format!("{first} ({}).", tasks[0].outcome),
        n => format!("{first} ({}), and {} more task{}.", tasks[0].outcome, n - 1, if n > 2 { "s" } else { "" }),
    };
    let states: Vec<&str> = tasks.iter().map(|t| t.state.as_str()).collect();
    let mut out = format!(
        "# {title}\n\nRollout context: the user asked: \"{}\"; {} task{}, the last run ended {}.\n",
        tasks[0].request,
        tasks.len(),
        if tasks.len() > 1 { "s" } else { "" },
        states.last().copied().unwrap_or("unknown")
    );
    for (i, task) in tasks.iter().enumerate() {
        out.push_str(&format!("\n## Task {}: {}\n\nOutcome: {}\n", i + 1, task.name, task.outcome));
        subsection(&mut out, "Preference signals:", &preference_bullets(task), false);
        subsection(&mut out, "Key steps:", &task.steps, false);
        subsection(&mut out, "Failures and how to do differently:", &task.failures, false);
        subsection(&mut out, "Reusable knowledge:", &task.knowledge, false);
        subsection(&mut out, "References:", &task.references, true);
    }
    out
}

/// The raw memory (SPEC §3.1): a front matter, then a block a task.
fn raw_memory(tasks: &[Task]) -> String {
    let group = task_group(&tasks[0].name);
    let names: Vec<String> = tasks.iter().map(|t| format!("{} ({})", t.name, t.outcome)).collect();
    let takeaway = tasks
        .iter()
        .find_map(|t| t.preferences.first().map(|(_, b)| b.clone()).or_else(|| t.failures.first().cloned()))
        .map(|t| format!("; {t}"))
        .unwrap_or_default();
    let mut keywords: Vec<String> = Vec::new();
    for keyword in tasks.iter().flat_map(|t| &t.keywords) {
        if keywords.len() < 12 && !keywords.contains(keyword) {
            keywords.push(keyword.clone());
        }
    }
    let mut out = format!(
        "---\ndescription: {}{takeaway}\ntask: {}\ntask_group: {group}\ntask_outcome: {}\nkeywords: {}\n---\n",
        names.join("; "),
        slug_from(&tasks[0].name),
        tasks[0].outcome,
        if keywords.is_empty() { group.to_owned() } else { keywords.join(", ") }
    );
    for (i, task) in tasks.iter().enumerate() {
        out.push_str(&format!(
            "\n### Task {}: {}\n\ntask: {}\ntask_group: {}\ntask_outcome: {}\n",
            i + 1,
            task.name,
            slug_from(&task.name),
            task_group(&task.name),
            task.outcome
        ));
        subsection(&mut out, "Preference signals:", &preference_bullets(task), false);
        let mut knowledge = task.knowledge.clone();
        knowledge.extend(task.steps.iter().take(4).map(|s| format!("a step that worked: {s}")));
        subsection(&mut out, "Reusable knowledge:", &knowledge, false);
        subsection(&mut out, "Failures and how to do differently:", &task.failures, false);
        subsection(&mut out, "References:", &task.references, false);
    }
    out
}

/// The three artifacts for a rollout; all empty when it holds no request and
/// no answer (the same no-op a model would choose).
pub fn extract(contents: &str) -> RolloutArtifacts {
    let tasks = read_tasks(contents);
    if tasks.is_empty() {
        return RolloutArtifacts {
            rollout_slug: String::new(),
            rollout_summary: String::new(),
            raw_memory: String::new(),
        };
    }
    RolloutArtifacts {
        rollout_slug: slug_from(&tasks[0].name),
        rollout_summary: rollout_summary(&tasks),
        raw_memory: raw_memory(&tasks),
    }
}

#[cfg(test)]
mod planted_facts;
#[cfg(test)]
mod tests;
