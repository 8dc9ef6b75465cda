use super::*;
use crate::domain::memory_format::parse_raw_memory;

const SUMMARY: &str = "session_id: 9b1c\nupdated_at: 2026-04-15T00:00:00+00:00\nrollout_path: sessions/c.jsonl\nterminal_state: completed\n\n# Pinned the CI cache key after a flaky run.\n\nRollout context: the user wanted CI green on GitHub Actions.\n\n## Task 1: fix the flaky CI cache\n\nOutcome: success\n\nPreference signals:\n\n- the user said: \"always pin the runner image\" -> pin images by default\n\nKey steps:\n\n- ran the tests\n\nReferences:\n\n- [1] `pnpm test --filter ci`\n- [2] error: cache miss\n\n## Task 2: bump node\n\nOutcome: partial\n";

const RAW: &str = "rollout_id: c\nupdated_at: 2026-04-15T00:00:00+00:00\nrollout_path: sessions/c.jsonl\nrollout_summary_file: rollout_summaries/c_fix.md\nterminal_state: completed\n\n---\ndescription: fixed the CI cache (success); pin images\ntask: fix-ci-cache\ntask_group: ci\ntask_outcome: success\nkeywords: ci, cache, pnpm\n---\n\n### Task 1: fix the CI cache\n\ntask: fix-ci-cache\ntask_group: ci\ntask_outcome: success\n\nPreference signals:\n- the user said: \"always pin the runner image\" -> pin images by default\n\nReferences:\n- `pnpm test`\n";

const MEMORY: &str = "# Task Group: ci\n\nscope: CI on GitHub Actions: caches, runners.\n\n## Task 1: fix the CI cache, success\n\n### rollout_summary_files\n\n- rollout_summaries/c_fix.md (rollout_id=c, updated_at=2026-04-15T00:00:00+00:00, terminal_state=completed)\n\n### keywords\n\n- ci, cache, pnpm\n\n## User preferences\n\n- the user said: \"always pin the runner image\" -> pin images by default [Task 1]\n\n## Failures and how to do differently\n\n- cache miss -> pin the key [Task 1]\n";

const MEMORY_SUMMARY: &str = "## User Profile\n\nA developer who runs CI on GitHub Actions.\n\n## User preferences\n\n- \"always pin the runner image\"\n\n## General Tips\n\n- pin the cache key\n\n## What's in Memory\n\n### ci\n\n#### 2026-04-15\n\n- ci: cache, pnpm\n  - desc: the CI cache fix\n  - learnings: pin the key\n\n### Older Memory Topics\n\n#### ci\n\n- node bump: node, nvm\n  - desc: a node upgrade\n";

fn problems(format: Format, text: &str) -> Vec<String> {
    check(format, text).into_iter().map(|p| format!("{}: {}", p.line, p.what)).collect()
}

#[test]
fn files_in_their_formats_pass() {
    assert_eq!(problems(Format::RolloutSummary, SUMMARY), Vec::<String>::new());
    assert_eq!(problems(Format::RawMemory, RAW), Vec::<String>::new());
    assert_eq!(problems(Format::MemoryMd, MEMORY), Vec::<String>::new());
    assert_eq!(problems(Format::MemorySummary, MEMORY_SUMMARY), Vec::<String>::new());
    assert_eq!(problems(Format::MemoryMd, ""), Vec::<String>::new(), "no memory yet");
    let with_skill =
        MEMORY.replace("- ci, cache, pnpm\n", "- ci, cache, pnpm\n- Related skill: skills/pin-ci-cache/SKILL.md\n");
    assert_eq!(problems(Format::MemoryMd, &with_skill), Vec::<String>::new(), "a related skill after the keywords");
    let two_keyword_lines = MEMORY.replace("- ci, cache, pnpm\n", "- ci, cache\n- pnpm\n");
    assert_eq!(problems(Format::MemoryMd, &two_keyword_lines), ["11: keywords are one comma-separated bullet"]);
    let skill = "---\nname: pin-ci-cache\ndescription: when CI caches miss\n---\n\n1. pin the key\n";
    assert_eq!(problems(Format::Skill, skill), Vec::<String>::new());
    assert!(uncovered_groups(MEMORY, MEMORY_SUMMARY).is_empty());
    assert_eq!(uncovered_groups("# Task Group: billing\n", MEMORY_SUMMARY), ["billing"]);
}

#[test]
fn strays_are_named_with_their_line() {
    let bad_outcome = SUMMARY.replace("Outcome: partial", "Outcome: done");
    assert!(problems(Format::RolloutSummary, &bad_outcome).iter().any(|p| p.contains("\"done\"")));
    let rollout_level = format!("{SUMMARY}\n## User preferences\n\n- x\n");
    assert!(!problems(Format::RolloutSummary, &rollout_level).is_empty());
    let out_of_order = SUMMARY
        .replace("Key steps:\n\n- ran the tests\n\n", "")
        .replace("References:", "Key steps:\n\n- ran the tests\n\nPreference signals:\n\n- again\n\nReferences:");
    assert!(problems(Format::RolloutSummary, &out_of_order).iter().any(|p| p.contains("out of order")));
    let unnumbered = SUMMARY.replace("- [2] error", "- error");
    assert!(problems(Format::RolloutSummary, &unnumbered).iter().any(|p| p.contains("[2]")));
    let empty_section = SUMMARY.replace("- ran the tests\n", "");
    assert!(problems(Format::RolloutSummary, &empty_section).iter().any(|p| p.contains("empty")));

    let no_outcome = RAW.replace("task_outcome: success\nkeywords", "keywords");
    assert!(problems(Format::RawMemory, &no_outcome).iter().any(|p| p.contains("task_outcome")));
    let flat = "rollout_id: c\n\nThe user likes tea.\n";
    assert!(!problems(Format::RawMemory, flat).is_empty());

    let memoryd_old = "# Memory\n\n## tea\n\n- rollout_summary_files: x\n";
    assert!(!problems(Format::MemoryMd, memoryd_old).is_empty(), "memoryd's former format is refused");
    let bare_file =
        MEMORY.replace(" (rollout_id=c, updated_at=2026-04-15T00:00:00+00:00, terminal_state=completed)", "");
    assert!(problems(Format::MemoryMd, &bare_file).iter().any(|p| p.contains("rollout_id=")));
    let uncited = MEMORY.replace(" [Task 1]\n\n## Failures", "\n\n## Failures");
    assert!(problems(Format::MemoryMd, &uncited).iter().any(|p| p.contains("[Task 1]")));
    let bold = MEMORY.replace("pin images", "**pin** images");
    assert!(problems(Format::MemoryMd, &bold).iter().any(|p| p.contains("bold")));

    let no_tips = MEMORY_SUMMARY.replace("## General Tips", "## Tips");
    assert!(problems(Format::MemorySummary, &no_tips).iter().any(|p| p.contains("General Tips")));
    let bad_day = MEMORY_SUMMARY.replace("#### 2026-04-15", "#### April");
    assert!(problems(Format::MemorySummary, &bad_day).iter().any(|p| p.contains("YYYY-MM-DD")));
    let no_desc = MEMORY_SUMMARY.replace("  - desc: a node upgrade\n", "");
    assert!(problems(Format::MemorySummary, &no_desc).iter().any(|p| p.contains("desc:")));
    assert!(!problems(Format::Skill, "---\nname: Pin CI\ndescription: x\n---\nsteps\n").is_empty());
}

#[test]
fn a_raw_memory_reads_back_whole() {
    let raw = parse_raw_memory(RAW);
    assert_eq!((raw.rollout_id.as_str(), raw.rollout_summary_file.as_str()), ("c", "rollout_summaries/c_fix.md"));
    assert_eq!((raw.task_group.as_str(), raw.outcome.as_str()), ("ci", "success"));
    assert_eq!(raw.keywords, ["ci", "cache", "pnpm"]);
    assert_eq!(raw.tasks.len(), 1);
    let task = &raw.tasks[0];
    assert_eq!((task.name.as_str(), task.outcome.as_str()), ("fix the CI cache", "success"));
    assert_eq!(task.sections[0], ["the user said: \"always pin the runner image\" -> pin images by default"]);
    assert_eq!(task.sections[3], ["`pnpm test`"]);
    assert!(raw.loose.is_empty());
    let prose = parse_raw_memory("rollout_id: m\n\nThe user runs CI on GitHub Actions.\n\n## Steps\n1. bump\n");
    assert_eq!(prose.loose, ["The user runs CI on GitHub Actions.", "## Steps", "1. bump"], "nothing is lost");
}
