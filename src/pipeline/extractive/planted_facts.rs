//! The planted-facts evaluation (issue 58): the conversations of
//! `planted_facts.json` beside this file, each stating a few facts once, go
//! through phase one and phase two; a fact is kept in a file when its
//! `expect` string appears there. The figures are in docs/performance.md;
//! run `cargo test --lib planted_facts -- --nocapture` to see them.

use super::{consolidate, extract};
use crate::domain::memory_format_check::{Format, check, uncovered_groups};
use serde_json::{Value, json};

const CORPUS: &str = include_str!("planted_facts.json");
/// Written after the heuristics were fixed and never used to tune them.
const HELD_OUT: &str = include_str!("planted_facts_held_out.json");

/// A conversation's segments as JSONL, the way a runtime appends them.
fn rollout(conversation: &Value) -> String {
    let mut lines = String::new();
    for (n, segment) in conversation["segments"].as_array().unwrap().iter().enumerate() {
        let mut generated = Vec::new();
        for (i, step) in segment["steps"].as_array().into_iter().flatten().enumerate() {
            if let Some(said) = step["say"].as_str() {
                generated.push(json!({"role": "assistant", "content": said}));
                continue;
            }
            let id = format!("{n}-{i}");
            let arguments = json!({"command": step["command"]}).to_string();
            generated
                .push(json!({"type": "function_call", "call_id": id, "name": step["call"], "arguments": arguments}));
            generated.push(json!({"type": "function_call_output", "call_id": id, "output": step["output"]}));
        }
        let error = segment["error"].as_array();
        let line = json!({
            "updated_at": conversation["updated_at"],
            "rollout_id": conversation["id"],
            "input": [{"role": "user", "content": segment["user"]}],
            "generated_items": generated,
            "terminal_metadata": {
                "terminal_state": segment["state"],
                "exception_type": error.map_or(Value::Null, |e| e[0].clone()),
                "exception_message": error.map_or(Value::Null, |e| e[1].clone()),
                "has_final_output": !segment["answer"].is_null(),
            },
            "final_output": segment["answer"],
        });
        lines.push_str(&format!("{line}\n"));
    }
    lines
}

/// The raw memory file phase one writes (R-P1-12).
fn raw_file(conversation: &Value, raw_memory: &str, slug: &str) -> String {
    let id = conversation["id"].as_str().unwrap();
    format!(
        "rollout_id: {id}\nupdated_at: {}\nrollout_path: sessions/{id}.jsonl\nrollout_summary_file: rollout_summaries/{id}_{slug}.md\nterminal_state: completed\n\n{}\n",
        conversation["updated_at"].as_str().unwrap(),
        raw_memory.trim_end()
    )
}

/// Every file the provider writes for the corpus is in its format.
fn formatted(format: Format, text: &str, source: &Value) {
    let problems = check(format, text);
    assert!(problems.is_empty(), "{format:?} of {source}: {problems:?}\n{text}");
}

/// Facts kept in `MEMORY.md` and in `memory_summary.md`, of all planted.
fn kept(corpus: &str) -> (usize, usize, usize) {
    let corpus: Value = serde_json::from_str(corpus).unwrap();
    let conversations = corpus["conversations"].as_array().unwrap();
    let mut raws = Vec::new();
    for conversation in conversations.iter().rev() {
        let artifacts = extract(&rollout(conversation));
        formatted(Format::RolloutSummary, &artifacts.rollout_summary, conversation);
        formatted(Format::RawMemory, &artifacts.raw_memory, conversation);
        raws.push(raw_file(conversation, &artifacts.raw_memory, &artifacts.rollout_slug));
    }
    let (memory, summary) = consolidate(&raws);
    formatted(Format::MemoryMd, &memory, &corpus["about"]);
    formatted(Format::MemorySummary, &summary, &corpus["about"]);
    assert!(uncovered_groups(&memory, &summary).is_empty(), "every task group is reachable from the summary");
    let (memory, summary) = (memory.to_lowercase(), summary.to_lowercase());
    let facts: Vec<String> = conversations
        .iter()
        .flat_map(|c| c["facts"].as_array().unwrap())
        .map(|f| f["expect"].as_str().unwrap().to_lowercase())
        .collect();
    let in_memory = facts.iter().filter(|f| memory.contains(f.as_str())).count();
    let in_summary = facts.iter().filter(|f| summary.contains(f.as_str())).count();
    for fact in &facts {
        for (file, text) in [("MEMORY.md", &memory), ("memory_summary.md", &summary)] {
            if !text.contains(fact.as_str()) {
                println!("not in {file}: {fact}");
            }
        }
    }
    (facts.len(), in_memory, in_summary)
}

#[test]
fn planted_facts_reach_memory() {
    let (planted, in_memory, in_summary) = kept(CORPUS);
    println!("planted facts: {planted}; kept in MEMORY.md: {in_memory}; kept in memory_summary.md: {in_summary}");
    assert!(in_memory * 10 >= planted * 9, "{in_memory} of {planted} facts in MEMORY.md");
    assert!(in_summary * 2 >= planted, "{in_summary} of {planted} facts in memory_summary.md");
}

#[test]
fn held_out_planted_facts_reach_memory() {
    let (planted, in_memory, in_summary) = kept(HELD_OUT);
    println!(
        "held out: planted facts: {planted}; kept in MEMORY.md: {in_memory}; kept in memory_summary.md: {in_summary}"
    );
    assert!(in_memory * 10 >= planted * 8, "{in_memory} of {planted} facts in MEMORY.md");
    assert!(in_summary * 2 >= planted, "{in_summary} of {planted} facts in memory_summary.md");
}
