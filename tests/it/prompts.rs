//! The prompts as the model receives them: golden files of the rendered
//! phase-one and phase-two prompts (`MEMORYD_UPDATE_GOLDEN=1` rewrites them
//! after a deliberate change; review the diff), the memory formats they must
//! name, and a check that no run of seven words of the SDK's prompts is in
//! memoryd's (docs/prompts.md: the rules carry over, the sentences do not).

use crate::every_backend;
use crate::fake_llm::{FakeLlm, Reply};
use crate::harness::{Backend, TestApp, use_model};
use reqwest::Method;
use serde_json::json;
use std::collections::HashSet;
use std::path::Path;

every_backend!(the_model_gets_the_golden_prompts_and_they_name_the_formats);

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// Compares `actual` with `tests/golden/<name>`, or rewrites it when asked.
fn golden(name: &str, actual: &str) {
    let path = Path::new(ROOT).join("tests/golden").join(name);
    if std::env::var_os("MEMORYD_UPDATE_GOLDEN").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{name}: {e}"));
    if expected != actual {
        let line = expected.lines().zip(actual.lines()).position(|(a, b)| a != b).map_or(0, |i| i + 1);
        panic!("{name} differs from the golden file near line {line}; MEMORYD_UPDATE_GOLDEN=1 rewrites it");
    }
}

async fn the_model_gets_the_golden_prompts_and_they_name_the_formats(backend: Backend) {
    let fake = FakeLlm::start().await;
    let app = TestApp::start_with(backend, use_model(&fake, "responses")).await;
    let t = app.tenant().await;
    let layout = json!({"memories_dir": "golden_memory", "sessions_dir": "golden_sessions", "generate": {"extra_prompt": "Note which package manager the user prefers.", "phase_two_max_turns": 7}});
    let res = app.request(Method::PUT, "/v1/layouts/golden", &t.key).json(&layout).send().await.unwrap();
    assert!(res.status().is_success(), "{}", res.text().await.unwrap());
    let segment = json!({"rollout_id": "golden-1", "updated_at": "2026-11-30T09:15:00+00:00",
        "input": [{"role": "user", "content": "Add a lint step to CI. We use pnpm, never npm."}],
        "generated_items": [{"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Added `pnpm lint` to ci.yml."}]}],
        "terminal_metadata": {"terminal_state": "completed", "exception_type": null, "exception_message": null, "has_final_output": true},
        "final_output": "Added `pnpm lint` to ci.yml."});
    app.post_segment(&t.key, "s", "golden", segment).await;
    fake.push(Reply::artifacts("ci-lint-step", "# Added a lint step", "---\ndescription: d\n---").now());
    fake.push(Reply::Text("done").now());
    let res = app.request(Method::POST, "/v1/sessions/s/close?wait=60", &t.key).send().await.unwrap();
    assert_eq!(res.status(), 200);

    let one = fake.phase_one_requests();
    assert_eq!(one.len(), 1);
    golden("phase_one_instructions.md", &one[0].instructions());
    golden("phase_one_user_message.md", &one[0].user_message());
    let two = fake.phase_two_requests();
    assert_eq!(two.len(), 1, "phase two ran once");
    let prompt = two[0].user_message();
    golden("phase_two_prompt.md", &prompt);

    // The formats of the memory files, the SDK's (docs/prompts.md).
    let instructions = one[0].instructions();
    for format in [
        "Rollout context:",
        "## Task 1:",
        "Outcome: <success|partial|fail|uncertain>",
        "Preference signals:",
        "Key steps:",
        "Failures and how to do differently:",
        "Reusable knowledge:",
        "References:",
        "task_outcome: <success|partial|fail|uncertain>",
        "keywords:",
        "### Task 1:",
        "Note which package manager the user prefers.",
    ] {
        assert!(instructions.contains(format), "phase one names {format:?}");
    }
    for format in [
        "# Task Group:",
        "scope:",
        "### rollout_summary_files",
        "(rollout_id=<id>, updated_at=<timestamp>, terminal_state=<state>",
        "### keywords",
        "## User preferences",
        "## Reusable knowledge",
        "## Failures and how to do differently",
        "## User Profile",
        "## General Tips",
        "## What's in Memory",
        "#### <YYYY-MM-DD",
        "### Older Memory Topics",
        "- desc:",
        "- learnings:",
        "skills/<skill-name>/",
        "name:",
        "description:",
        "at most 7",
        "- [added] rollout_id=golden-1, rollout_summary_file=rollout_summaries/golden-1_ci-lint-step.md, updated_at=2026-11-30T09:15:00+00:00",
        "DEVELOPER-SPECIFIC EXTRA GUIDANCE",
    ] {
        assert!(prompt.contains(format), "phase two names {format:?}");
    }
}

/// The words of a text as `scripts/upstream-prompt-windows.py` cuts them.
fn words(text: &str) -> Vec<String> {
    let word = regex::Regex::new(r"[a-z0-9]+(?:'[a-z]+)?").unwrap();
    word.find_iter(&text.to_lowercase()).map(|m| m.as_str().to_owned()).collect()
}

fn fnv1a32(text: &str) -> u32 {
    text.bytes().fold(0x811c_9dc5, |h: u32, b| (h ^ u32::from(b)).wrapping_mul(0x0100_0193))
}

/// Prose of a prompt: code blocks and spans (formats, which must be the
/// SDK's) and the marker strings the SDK's tests assert cut the text into
/// pieces whose windows are checked apart.
fn prose_pieces(text: &str) -> Vec<String> {
    const MARKERS: [&str; 6] = [
        "(already provided below; do NOT open again)",
        "========= MEMORY_SUMMARY BEGINS =========",
        "========= MEMORY_SUMMARY ENDS =========",
        "DEVELOPER-SPECIFIC EXTRA GUIDANCE",
        "Memory is writable.",
        "Never update memories. You can only read them.",
    ];
    let code = regex::Regex::new(r"(?s)```.*?```|`[^`\n]*`").unwrap();
    let mut text = code.replace_all(text, "\u{0}").into_owned();
    for marker in MARKERS {
        text = text.replace(marker, "\u{0}");
    }
    text.split('\u{0}').map(str::to_owned).collect()
}

/// The hashed seven-word windows of the SDK's prompts.
fn upstream_windows() -> HashSet<u32> {
    std::fs::read_to_string(Path::new(ROOT).join("tests/data/upstream_prompt_windows.txt"))
        .unwrap()
        .lines()
        .map(|line| u32::from_str_radix(line, 16).unwrap())
        .collect()
}

#[test]
fn no_run_of_seven_upstream_words_is_in_memoryds_prompts() {
    let hashes = upstream_windows();
    assert!(hashes.len() > 10_000, "the upstream windows are there");
    let mut copied = Vec::new();
    let prompts = Path::new(ROOT).join("src/pipeline/prompts");
    let mut checked = 0;
    for entry in std::fs::read_dir(&prompts).unwrap() {
        let path = entry.unwrap().path();
        for piece in prose_pieces(&std::fs::read_to_string(&path).unwrap()) {
            let words = words(&piece);
            for window in words.windows(7) {
                checked += 1;
                let joined = window.join(" ");
                if hashes.contains(&fnv1a32(&joined)) {
                    copied.push(format!("{}: {joined}", path.file_name().unwrap().to_string_lossy()));
                }
            }
        }
    }
    assert!(checked > 5_000, "the prompts were read: {checked} windows");
    assert!(copied.is_empty(), "runs of upstream's words: {copied:#?}");
}

#[test]
fn the_check_finds_a_copied_run() {
    // A sentence of the SDK's phase-one prompt, as the check would meet it.
    let hashes = upstream_windows();
    let words = words("Raw rollouts are immutable evidence. NEVER edit raw rollouts.");
    assert!(words.windows(7).any(|w| hashes.contains(&fnv1a32(&w.join(" ")))));
}
