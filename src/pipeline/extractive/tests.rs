use super::*;
use crate::domain::memory_format_check::{Format, check, uncovered_groups};
use crate::pipeline::phase_one::{Extraction, check_artifacts};
use serde_json::{Value, json};

fn segment(
    at: &str,
    user: &str,
    generated: Value,
    state: &str,
    exception: Option<(&str, &str)>,
    answer: Value,
) -> String {
    let (kind, message) = exception.map_or((Value::Null, Value::Null), |(k, m)| (json!(k), json!(m)));
    let line = json!({
        "updated_at": at, "rollout_id": "c",
        "input": [{"role": "user", "content": user}],
        "generated_items": generated,
        "terminal_metadata": {"terminal_state": state, "exception_type": kind, "exception_message": message, "has_final_output": !answer.is_null()},
        "final_output": answer,
    });
    format!("{line}\n")
}

fn call(id: &str, name: &str, command: &str, output: &str) -> [Value; 2] {
    [
        json!({"type": "function_call", "call_id": id, "name": name, "arguments": json!({"command": command}).to_string()}),
        json!({"type": "function_call_output", "call_id": id, "output": output}),
    ]
}

/// Three tasks: a fix that fails once and then works, with the user's
/// defaults and a correction; a second task that is interrupted; a third
/// that fails.
fn conversation() -> String {
    let mut fix = Vec::new();
    fix.extend(call("1", "shell", "npm ci", "npm ERR! code ENOENT: npm not found"));
    fix.extend(call("2", "shell", "pnpm install --frozen-lockfile", "Done in 4.2s"));
    fix.push(json!({"role": "assistant", "content": [{"type": "output_text", "text": "Switched to `pnpm install --frozen-lockfile`."}]}));
    [
        segment("2026-04-15T09:00:00+00:00", "I'm a platform engineer at Acme. Fix the flaky CI cache in .github/workflows/ci.yml. We use pnpm, never npm.", json!(fix), "completed", None, json!("The cache key now follows pnpm-lock.yaml.")),
        segment("2026-04-15T09:05:00+00:00", "No, pin the runner image to ubuntu-22.04 instead of latest.", json!([]), "completed", None, json!("Pinned ubuntu-22.04.")),
        segment("2026-04-15T10:00:00+00:00", "Write release notes for version 2.3 from the merged pull requests", json!([{"role": "assistant", "content": "Drafting the notes."}]), "interrupted", None, Value::Null),
        segment("2026-04-16T08:00:00+00:00", "Deploy the billing service to staging with the new config", json!(call("3", "shell", "kubectl apply -f billing.yaml", "error: unable to recognize billing.yaml")), "failed", Some(("ToolError", "kubectl exited 1")), Value::Null),
    ]
    .concat()
}

/// The files as phase one writes them: header lines, then the artifacts.
fn raw_file(id: &str, at: &str, raw: &str) -> String {
    format!(
        "rollout_id: {id}\nupdated_at: {at}\nrollout_path: sessions/{id}.jsonl\nrollout_summary_file: rollout_summaries/{id}_x.md\nterminal_state: completed\n\n{}\n",
        raw.trim_end()
    )
}

fn problems(format: Format, text: &str) -> Vec<String> {
    check(format, text).into_iter().map(|p| format!("line {}: {}", p.line, p.what)).collect()
}

#[test]
fn a_conversation_becomes_memory_in_the_sdks_formats() {
    let a = extract(&conversation());
    assert!(matches!(check_artifacts(&a), Ok(Extraction::Memory { .. })));
    assert_eq!(problems(Format::RolloutSummary, &a.rollout_summary), Vec::<String>::new(), "{}", a.rollout_summary);
    assert_eq!(problems(Format::RawMemory, &a.raw_memory), Vec::<String>::new(), "{}", a.raw_memory);
    let summary = &a.rollout_summary;
    assert!(
        summary.contains("## Task 1: Fix the flaky CI cache in .github/workflows/ci.yml\n"),
        "named by what it asks: {summary}"
    );
    assert!(
        summary.contains("## Task 2: Write release notes") && summary.contains("## Task 3: Deploy the billing service")
    );
    assert_eq!(summary.matches("Outcome: ").collect::<Vec<_>>().len(), 3);
    assert!(summary.contains("Outcome: success\n"), "the fix worked after its failure: {summary}");
    assert!(summary.contains("Outcome: partial\n"), "an interrupted run with progress is partial, never fail");
    assert!(summary.contains("Outcome: fail\n"));
    for kept in [
        "\"We use pnpm, never npm\" -> a standing default",
        "\"No, pin the runner image to ubuntu-22.04 instead of latest\" -> a correction",
        "\"I'm a platform engineer at Acme\" -> who the user is",
        "`npm ci` failed with \"npm ERR! code ENOENT: npm not found\"; what worked after: `pnpm install --frozen-lockfile`",
        "- [1] ",
        "`pnpm install --frozen-lockfile`",
        "error: ToolError: kubectl exited 1",
    ] {
        assert!(summary.contains(kept), "{kept:?} in {summary}");
    }
    assert!(!summary.contains("## User preferences"), "no rollout-level preferences");
    assert!(a.raw_memory.contains("task_outcome: success\nkeywords: "));
    assert!(a.raw_memory.contains("### Task 3: Deploy the billing service"));
    assert_eq!(extract(&conversation()).raw_memory, a.raw_memory, "deterministic");
}

#[test]
fn consolidation_writes_blocks_and_a_summary_that_routes_to_them() {
    let first = extract(&conversation());
    let other = extract(&segment(
        "2026-03-01T00:00:00+00:00",
        "Please always answer in British English when drafting docs",
        json!([]),
        "completed",
        None,
        json!("Noted."),
    ));
    let raws = [
        raw_file("c", "2026-04-16T08:00:00+00:00", &first.raw_memory),
        raw_file("d", "2026-03-01T00:00:00+00:00", &other.raw_memory),
        raw_file(
            "m",
            "2026-02-01T00:00:00+00:00",
            "The user runs CI on GitHub Actions.\n\n## Steps\n1. bump the key\n",
        ),
    ];
    let (memory, summary) = consolidate(&raws);
    assert_eq!(problems(Format::MemoryMd, &memory), Vec::<String>::new(), "{memory}");
    assert_eq!(problems(Format::MemorySummary, &summary), Vec::<String>::new(), "{summary}");
    assert_eq!(uncovered_groups(&memory, &summary), Vec::<&str>::new(), "{summary}");
    assert!(memory.contains(
        "- rollout_summaries/c_x.md (rollout_id=c, updated_at=2026-04-16T08:00:00+00:00, terminal_state=completed)"
    ));
    assert!(memory.contains("\"We use pnpm, never npm\" -> a standing default for similar work [Task 1]"), "{memory}");
    for kept in ["The user runs CI on GitHub Actions.", "Steps", "1. bump the key"] {
        assert!(memory.contains(kept), "a model's prose stays: {kept}");
    }
    assert!(
        summary.contains(
            "- when asking for this task, the user said: \"Please always answer in British English when drafting docs\""
        ),
        "{summary}"
    );
    assert!(summary.contains("I'm a platform engineer at Acme"), "the profile keeps who the user is: {summary}");
    assert!(summary.contains("#### 2026-04-16") && summary.contains("#### 2026-03-01"));
    assert!(summary.contains("npm not found"), "a failure and its fix reach the tips: {summary}");
    let (empty_memory, empty_summary) = consolidate(&[]);
    assert_eq!(empty_memory, "");
    assert_eq!(problems(Format::MemorySummary, &empty_summary), Vec::<String>::new());
}

#[test]
fn outcomes_follow_the_last_run_and_its_troubles() {
    use signals::outcome;
    assert_eq!(outcome("completed", false, true), "success");
    assert_eq!(outcome("completed", true, true), "partial");
    assert_eq!(outcome("interrupted", false, true), "partial");
    assert_eq!(outcome("max_turns_exceeded", true, false), "uncertain");
    assert_eq!(outcome("cancelled", false, false), "uncertain");
    assert_eq!(outcome("failed", false, true), "fail");
    assert_eq!(outcome("something new", false, true), "uncertain");
}

#[test]
fn statements_that_set_a_default_are_told_apart() {
    use signals::{Said, failed_output, statement_kind};
    assert_eq!(statement_kind("I'm a data scientist on the fraud team"), Some(Said::Identity));
    assert_eq!(statement_kind("Actually, use the staging cluster"), Some(Said::Correction));
    assert_eq!(statement_kind("Never push to main directly"), Some(Said::Default));
    assert_eq!(statement_kind("We use Postgres 15 everywhere"), Some(Said::Default));
    assert_eq!(statement_kind("What time is it in Paris"), None);
    assert!(failed_output("Traceback (most recent call last):"));
    assert!(failed_output("error: unable to recognize"));
    assert!(!failed_output("12 passed, 0 failed"));
    assert!(!failed_output("finished with no errors"));
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
