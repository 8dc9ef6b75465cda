//! The `extractive` provider's phase one: a deterministic summary of a
//! rollout built from what its segments say (user inputs, tool calls,
//! errors, final answers, terminal states), with no model and no network.

use super::phase_one::RolloutArtifacts;
use crate::domain::pytext::{py_splitlines, py_strip};
use serde_json::Value;

const MAX_QUOTE_CHARS: usize = 300;

fn clip(text: &str) -> String {
    let one_line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if one_line.chars().count() <= MAX_QUOTE_CHARS {
        one_line
    } else {
        format!("{}…", one_line.chars().take(MAX_QUOTE_CHARS).collect::<String>())
    }
}

/// The text of a message item: a string `content` or its text parts.
fn item_text(item: &Value) -> Option<String> {
    match &item["content"] {
        Value::String(s) => Some(s.clone()),
        Value::Array(parts) => {
            let texts: Vec<&str> = parts.iter().filter_map(|p| p["text"].as_str()).collect();
            (!texts.is_empty()).then(|| texts.join(" "))
        }
        _ => None,
    }
    .filter(|t| !py_strip(t).is_empty())
}

fn tool_name(item: &Value) -> Option<String> {
    let kind = item["type"].as_str()?;
    if kind.ends_with("_output") || !(kind.ends_with("_call") || kind == "program") {
        return None;
    }
    Some(item["name"].as_str().map_or_else(|| kind.to_owned(), |name| format!("{name} ({kind})")))
}

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

#[derive(Default)]
struct Digest {
    requests: Vec<String>,
    tools: Vec<String>,
    errors: Vec<String>,
    answers: Vec<String>,
    states: Vec<String>,
    last_updated_at: Option<String>,
}

fn digest(contents: &str) -> Digest {
    let mut d = Digest::default();
    for line in py_splitlines(contents) {
        let Ok(segment) = crate::domain::pyjson::loads(line) else { continue };
        for item in segment["input"].as_array().into_iter().flatten() {
            if item["role"] == "user"
                && let Some(text) = item_text(item)
            {
                d.requests.push(clip(&text));
            }
        }
        for item in segment["generated_items"].as_array().into_iter().flatten() {
            if let Some(tool) = tool_name(item)
                && !d.tools.contains(&tool)
            {
                d.tools.push(tool);
            }
        }
        let meta = &segment["terminal_metadata"];
        if let Some(kind) = meta["exception_type"].as_str() {
            let message = meta["exception_message"].as_str().unwrap_or("");
            d.errors.push(clip(&format!("{kind}: {message}")));
        }
        match &segment["final_output"] {
            Value::Null => {}
            Value::String(s) if py_strip(s).is_empty() => {}
            Value::String(s) => d.answers.push(clip(s)),
            other => d.answers.push(clip(&other.to_string())),
        }
        d.states.push(meta["terminal_state"].as_str().unwrap_or("unknown").to_owned());
        if let Some(at) = segment["updated_at"].as_str() {
            d.last_updated_at = Some(at.to_owned());
        }
    }
    d
}

fn outcome(states: &[String]) -> &'static str {
    match states.last().map(String::as_str) {
        Some("completed") => "done",
        Some("interrupted") | Some("max_turns_exceeded") => "partial",
        Some("cancelled") => "abandoned",
        _ => "failed",
    }
}

fn bullets(items: &[String]) -> String {
    items.iter().map(|i| format!("- {i}\n")).collect()
}

/// The three artifacts for a rollout; all empty when it holds no request and
/// no answer (the same no-op a model would choose).
pub fn extract(contents: &str) -> RolloutArtifacts {
    let d = digest(contents);
    if d.requests.is_empty() && d.answers.is_empty() {
        return RolloutArtifacts {
            rollout_slug: String::new(),
            rollout_summary: String::new(),
            raw_memory: String::new(),
        };
    }
    let task = d.requests.first().or(d.answers.first()).cloned().unwrap_or_default();
    let outcome = outcome(&d.states);
    let mut summary = format!("{} run(s) on: {task}\n\n## Context\n\n", d.states.len());
    summary.push_str(&format!(
        "Runs ended as: {}. Last update: {}.\n",
        d.states.join(", "),
        d.last_updated_at.as_deref().unwrap_or("unknown")
    ));
    summary.push_str(&format!("\n## Tasks\n\n- {task} — {outcome}\n"));
    if !d.requests.is_empty() {
        summary.push_str(&format!("\n## User requests\n\n{}", bullets(&d.requests)));
    }
    if !d.tools.is_empty() {
        summary.push_str(&format!("\n## Key steps\n\nTools used:\n{}", bullets(&d.tools)));
    }
    if !d.errors.is_empty() {
        summary.push_str(&format!("\n## Failures and what to do differently\n\n{}", bullets(&d.errors)));
    }
    if !d.answers.is_empty() {
        summary.push_str(&format!("\n## Final answers\n\n{}", bullets(&d.answers)));
    }
    const STOP_WORDS: [&str; 8] = ["the", "and", "for", "with", "this", "that", "from", "into"];
    let keywords: Vec<String> =
        slug_from(&task).split('-').filter(|w| w.len() > 2 && !STOP_WORDS.contains(w)).map(str::to_owned).collect();
    let mut raw = format!(
        "---\ndescription: {task}\ntask: {task}\ntask_group: {}\ntask_outcome: {outcome}\nkeywords: {}\n---\n\n### {task}\n\n",
        keywords.first().cloned().unwrap_or_default(),
        keywords.join(", ")
    );
    for request in d.requests.iter().skip(1) {
        raw.push_str(&format!("- Follow-up request: {request}\n"));
    }
    for tool in &d.tools {
        raw.push_str(&format!("- Used {tool}.\n"));
    }
    for error in &d.errors {
        raw.push_str(&format!("- Failed with {error}\n"));
    }
    if let Some(answer) = d.answers.last() {
        raw.push_str(&format!("- Final answer: {answer}\n"));
    }
    raw.push_str(&format!("- Outcome: {outcome} (last run {}).\n", d.states.last().map_or("unknown", String::as_str)));
    RolloutArtifacts { rollout_slug: slug_from(&task), rollout_summary: summary, raw_memory: raw }
}

/// What phase two needs of one raw memory file.
#[derive(Debug, Clone, Default, PartialEq)]
struct RawMemoryDigest {
    rollout_id: String,
    updated_at: String,
    summary_file: String,
    task: String,
    outcome: String,
    keywords: String,
    /// The bullets of the body (follow-ups, failures): the summary's sources.
    lessons: Vec<String>,
    /// Every line of the body but the title, clipped: what `MEMORY.md` keeps.
    body: Vec<String>,
}

/// A body line longer than this is clipped; a body keeps this many lines.
const MAX_BODY_LINE_CHARS: usize = 400;
const MAX_BODY_LINES: usize = 120;

fn clipped(line: &str) -> String {
    match line.char_indices().nth(MAX_BODY_LINE_CHARS) {
        Some((cut, _)) => format!("{}…", &line[..cut]),
        None => line.to_owned(),
    }
}

fn digest_raw_memory(text: &str) -> RawMemoryDigest {
    let mut d = RawMemoryDigest::default();
    let mut in_front_matter = false;
    // The header lines (R-P1-12) end at the first empty line; the body follows.
    let mut in_header = true;
    for line in text.lines() {
        if in_header && line.trim().is_empty() {
            in_header = false;
            continue;
        }
        let field = |prefix: &str| line.strip_prefix(prefix).map(|v| py_strip(v).to_owned());
        if line == "---" {
            in_front_matter = !in_front_matter;
            continue;
        }
        if let Some(v) = field("rollout_id:").filter(|_| d.rollout_id.is_empty()) {
            d.rollout_id = v;
        } else if let Some(v) = field("updated_at:").filter(|_| d.updated_at.is_empty()) {
            d.updated_at = v;
        } else if let Some(v) = field("rollout_summary_file:").filter(|_| d.summary_file.is_empty()) {
            d.summary_file = v;
        } else if in_front_matter {
            if let Some(v) = field("task:") {
                d.task = v;
            } else if let Some(v) = field("task_outcome:") {
                d.outcome = v;
            } else if let Some(v) = field("keywords:") {
                d.keywords = v;
            } else if let Some(v) = field("description:").filter(|_| d.task.is_empty()) {
                d.task = v;
            }
        } else if !in_header && !line.trim().is_empty() {
            if let Some(bullet) = line.strip_prefix("- ") {
                d.lessons.push(bullet.to_owned());
            }
            let title = line.strip_prefix("### ").is_some_and(|t| py_strip(t) == d.task);
            if !title && d.body.len() < MAX_BODY_LINES {
                d.body.push(clipped(line));
            }
        }
    }
    if d.task.is_empty() {
        d.task = format!("Conversation {}", d.rollout_id);
    }
    d
}

/// The extractive phase two: `MEMORY.md` and `memory_summary.md` rebuilt
/// from the selected raw memories (newest first), so that what dropped out
/// of the selection drops out of memory too.
pub fn consolidate(raw_memories: &[String]) -> (String, String) {
    let digests: Vec<RawMemoryDigest> = raw_memories.iter().map(|r| digest_raw_memory(r)).collect();
    let mut memory = format!(
        "# Memory\n\nBuilt by memoryd's extractive provider from {} raw memories, newest first.\n",
        digests.len()
    );
    for d in &digests {
        memory.push_str(&format!("\n## {}\n\n", d.task));
        memory.push_str(&format!("- rollout_summary_files: {}\n", d.summary_file));
        if !d.keywords.is_empty() {
            memory.push_str(&format!("- keywords: {}\n", d.keywords));
        }
        if !d.outcome.is_empty() {
            memory.push_str(&format!("- outcome: {} (updated {})\n", d.outcome, d.updated_at));
        }
        // Every line a raw memory's writer wrote stays (a model's prose
        // too, not only the bullets this provider makes).
        for line in &d.body {
            memory.push_str(line);
            memory.push('\n');
        }
    }
    let mut summary =
        format!("## User profile\n\nMemory of {} recent conversations with this user or project.\n", digests.len());
    let requests: Vec<&String> =
        digests.iter().flat_map(|d| &d.lessons).filter(|l| l.starts_with("Follow-up request:")).take(10).collect();
    if !requests.is_empty() {
        summary.push_str("\n## Preferences\n\n");
        for r in requests {
            summary.push_str(&format!("- {r}\n"));
        }
    }
    let tips: Vec<&String> =
        digests.iter().flat_map(|d| &d.lessons).filter(|l| l.starts_with("Failed with")).take(10).collect();
    if !tips.is_empty() {
        summary.push_str("\n## General tips\n\n");
        for t in tips {
            summary.push_str(&format!("- Seen before: {t}\n"));
        }
    }
    summary.push_str("\n## What's in memory\n\n");
    for (i, d) in digests.iter().enumerate() {
        let when = if i < 5 { "Recent" } else { "Older" };
        summary.push_str(&format!("- {when}: {} ({}, {})\n", d.task, d.updated_at, d.outcome));
    }
    (memory, summary)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::phase_one::{Extraction, check_artifacts};

    #[test]
    fn consolidation_lists_every_selected_memory() {
        let raw = "rollout_id: c\nupdated_at: 2026-04-15T00:00:00+00:00\nrollout_path: sessions/c.jsonl\nrollout_summary_file: rollout_summaries/c_fix.md\nterminal_state: completed\n\n---\ndescription: Fix CI\ntask: Fix CI\ntask_group: fix\ntask_outcome: done\nkeywords: fix, ci\n---\n\n### Fix CI\n\n- Follow-up request: use pnpm\n- Failed with ToolError: npm missing\n".to_owned();
        let (memory, summary) = consolidate(&[raw]);
        assert!(memory.contains("## Fix CI\n\n- rollout_summary_files: rollout_summaries/c_fix.md\n- keywords: fix, ci\n- outcome: done (updated 2026-04-15T00:00:00+00:00)\n- Follow-up request: use pnpm\n"));
        assert!(summary.contains("- Follow-up request: use pnpm"));
        assert!(summary.contains("- Seen before: Failed with ToolError: npm missing"));
        assert!(summary.contains("- Recent: Fix CI (2026-04-15T00:00:00+00:00, done)"));
        let (empty_memory, _) = consolidate(&[]);
        assert!(empty_memory.contains("from 0 raw memories"));
    }

    #[test]
    fn a_rollout_becomes_a_valid_memory() {
        let contents = concat!(
            r#"{"updated_at":"2026-04-15T00:00:00+00:00","rollout_id":"c","input":[{"content":"Fix the flaky CI cache!","role":"user"}],"generated_items":[{"type":"function_call","name":"run_tests","arguments":"{}","call_id":"1"},{"type":"function_call_output","call_id":"1","output":"ok"}],"terminal_metadata":{"terminal_state":"completed","exception_type":null,"exception_message":null,"has_final_output":true},"final_output":"Pinned the cache key."}"#,
            "\n",
            r#"{"updated_at":"2026-04-16T00:00:00+00:00","rollout_id":"c","input":[{"content":[{"type":"input_text","text":"Also bump node"}],"role":"user"}],"generated_items":[],"terminal_metadata":{"terminal_state":"failed","exception_type":"ToolError","exception_message":"npm missing","has_final_output":false}}"#,
            "\n"
        );
        let a = extract(contents);
        assert_eq!(a.rollout_slug, "fix-the-flaky-ci-cache");
        assert!(matches!(check_artifacts(&a), Ok(Extraction::Memory { .. })));
        assert!(a.rollout_summary.starts_with("2 run(s) on: Fix the flaky CI cache!"));
        assert!(a.rollout_summary.contains("run_tests (function_call)"));
        assert!(a.raw_memory.contains("task_outcome: failed"));
        assert!(a.raw_memory.contains("- Follow-up request: Also bump node"));
        assert!(a.raw_memory.contains("- Failed with ToolError: npm missing"));
        assert!(a.raw_memory.contains("- Final answer: Pinned the cache key."));
        assert_eq!(extract(contents).raw_memory, a.raw_memory, "deterministic");
    }

    #[test]
    fn nothing_to_remember_gives_the_empty_no_op() {
        let contents = "{\"input\":[],\"generated_items\":[],\"terminal_metadata\":{\"terminal_state\":\"failed\"}}\n";
        assert!(matches!(check_artifacts(&extract(contents)), Ok(Extraction::Empty)));
    }

    #[test]
    fn slugs_are_always_valid() {
        assert_eq!(slug_from("Ünïcode only ???"), "n-code-only");
        assert_eq!(slug_from("!!!"), "rollout");
        assert!(crate::pipeline::phase_one::normalize_slug(&slug_from(&"word ".repeat(40))).is_ok());
    }

    #[test]
    fn a_models_prose_stays_in_memory() {
        let raw = "rollout_id: sdk-1\nupdated_at: 2026-04-15T00:00:00+00:00\nrollout_path: sessions/sdk-1.jsonl\nrollout_summary_file: rollout_summaries/sdk-1_ci.md\nterminal_state: completed\n\nThe user runs CI on GitHub Actions.\nPin the runner image; the cache key follows the lockfile.\n\n## Steps\n1. bump the key\n".to_owned();
        let (memory, _) = consolidate(&[raw]);
        for kept in [
            "The user runs CI on GitHub Actions.",
            "Pin the runner image; the cache key follows the lockfile.",
            "## Steps",
            "1. bump the key",
        ] {
            assert!(memory.contains(kept), "{kept} in {memory}");
        }
        assert!(!memory.contains("terminal_state: completed"), "header lines are not the body: {memory}");
        let long = format!("rollout_id: x\n\n{}\n", "y".repeat(5000));
        let (memory, _) = consolidate(&[long]);
        assert!(memory.contains(&format!("{}…", "y".repeat(400))) && !memory.contains(&"y".repeat(401)));
    }
}
