//! Phase one as pure functions (R-P1): the prompt from a rollout's JSONL, the
//! structured-output schema, the checks on the model's answer and the two
//! files it becomes.

use super::prompts::{PHASE_ONE_SYSTEM, PHASE_ONE_USER, extra_prompt_section, render};
use super::truncate::truncate_text;
use crate::domain::pyjson::{PyJsonStyle, dumps};
use crate::domain::pytext::{py_rstrip, py_splitlines, py_strip};
use serde::Deserialize;
use serde_json::{Map, Value, json};

/// R-P1-4: `_PHASE_ONE_ROLLOUT_TOKEN_LIMIT`.
pub const PHASE_ONE_TOKEN_LIMIT: usize = 150_000;

/// The name the SDK sends its schema under (R-P1-7).
pub const SCHEMA_NAME: &str = "final_output";

/// R-P1-7: the strict JSON schema of the three fields, key for key.
pub fn rollout_extraction_schema() -> Value {
    json!({
        "properties": {
            "rollout_slug": {"title": "Rollout Slug", "type": "string"},
            "rollout_summary": {"title": "Rollout Summary", "type": "string"},
            "raw_memory": {"title": "Raw Memory", "type": "string"}
        },
        "required": ["rollout_slug", "rollout_summary", "raw_memory"],
        "title": "RolloutExtractionArtifacts",
        "type": "object",
        "additionalProperties": false
    })
}

/// What phase one sends to the model.
#[derive(Debug, Clone, PartialEq)]
pub struct PhaseOnePrompt {
    pub instructions: String,
    pub user_message: String,
}

/// R-P1-9: what the files say about the rollout, from its last segment.
#[derive(Debug, Clone, PartialEq)]
pub struct RolloutFacts {
    pub updated_at: String,
    pub terminal_state: String,
    pub segment_count: usize,
}

/// `str(value or "unknown")` for a JSON value.
fn py_str_or_unknown(value: Option<&Value>) -> String {
    match value {
        None | Some(Value::Null) | Some(Value::Bool(false)) => "unknown".into(),
        Some(Value::String(s)) if s.is_empty() => "unknown".into(),
        Some(Value::String(s)) => s.clone(),
        Some(Value::Bool(true)) => "True".into(),
        Some(other) => dumps(other, PyJsonStyle::COMPACT),
    }
}

fn terminal_metadata_of(segment: &Value) -> Value {
    segment.get("terminal_metadata").cloned().unwrap_or_else(|| Value::Object(Map::new()))
}

/// R-P1-3: one segment's metadata, or the summary of several.
fn terminal_metadata_json(segments: &[Value]) -> String {
    let last = segments.last().expect("at least one segment");
    let value = if segments.len() == 1 {
        terminal_metadata_of(last)
    } else {
        let states: Vec<Value> = segments
            .iter()
            .filter(|s| s.is_object())
            .map(|s| match terminal_metadata_of(s).get("terminal_state") {
                Some(v) => v.clone(),
                None => Value::String("unknown".into()),
            })
            .collect();
        json!({
            "segment_count": segments.len(),
            "final_terminal_metadata": terminal_metadata_of(last),
            "terminal_states": states,
        })
    };
    dumps(&value, PyJsonStyle::SORTED_INDENT2_TIGHT)
}

/// R-P1-2..5: the prompt for a rollout file's text.
/// `redact` takes the secrets out of the rollout text the model will read
/// (after truncation, so the budget and the notice stay those of R-TR).
pub fn render_phase_one(
    rollout_contents: &str,
    token_limit: usize,
    extra_prompt: Option<&str>,
    redact: &mut dyn FnMut(&str) -> String,
) -> Result<(PhaseOnePrompt, RolloutFacts), String> {
    let mut segments = Vec::new();
    for line in py_splitlines(rollout_contents) {
        if py_strip(line).is_empty() {
            continue;
        }
        let value: Value = crate::domain::pyjson::loads(line).map_err(|e| format!("invalid JSONL record: {e}"))?;
        segments.push(value);
    }
    let Some(last) = segments.last() else {
        return Err("rollout_contents must contain at least one JSONL record".into());
    };
    let facts = RolloutFacts {
        updated_at: py_str_or_unknown(last.get("updated_at")),
        terminal_state: match last.get("terminal_metadata") {
            Some(Value::Object(m)) => py_str_or_unknown(m.get("terminal_state")),
            _ => "unknown".into(),
        },
        segment_count: segments.len(),
    };
    let truncated = truncate_text(rollout_contents, token_limit);
    let rendered = if truncated == rollout_contents {
        redact(&truncated)
    } else {
        format!(
            "\n\n[rollout content omitted: this phase-one memory prompt contains a truncated view of the saved rollout. original_chars={}; rendered_chars={}. Do not assume the rendered rollout below is complete.]\n\n{}",
            rollout_contents.chars().count(),
            truncated.chars().count(),
            redact(&truncated)
        )
    };
    let metadata = terminal_metadata_json(&segments);
    let user_message =
        render(PHASE_ONE_USER, &[("terminal_metadata_json", &metadata), ("rollout_contents", &rendered)]);
    let instructions = render(PHASE_ONE_SYSTEM, &[("extra_prompt_section", &extra_prompt_section(extra_prompt))]);
    Ok((PhaseOnePrompt { instructions, user_message }, facts))
}

/// The model's structured answer.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RolloutArtifacts {
    pub rollout_slug: String,
    pub rollout_summary: String,
    pub raw_memory: String,
}

/// A checked answer: nothing to remember, or the three parts to write.
#[derive(Debug, Clone, PartialEq)]
pub enum Extraction {
    Empty,
    Memory { slug: String, rollout_summary: String, raw_memory: String },
}

/// Python's `repr()` of a string, for the SDK's error messages.
fn py_repr(s: &str) -> String {
    let quote = if s.contains('\'') && !s.contains('"') { '"' } else { '\'' };
    let mut out = String::from(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if (c as u32) < 0x20 || c == '\u{7f}' => out.push_str(&format!("\\x{:02x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push(quote);
    out
}

/// R-P1-10: strip, drop one `.md`, then `^[a-z0-9][a-z0-9_-]{0,79}$`.
pub fn normalize_slug(value: &str) -> Result<String, String> {
    let stripped = py_strip(value);
    let slug = stripped.strip_suffix(".md").unwrap_or(stripped);
    let bytes = slug.as_bytes();
    let valid = !bytes.is_empty()
        && bytes.len() <= 80
        && (bytes[0].is_ascii_lowercase() || bytes[0].is_ascii_digit())
        && bytes.iter().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'_' || *b == b'-');
    if valid { Ok(slug.to_owned()) } else { Err(format!("Invalid rollout_slug: {}", py_repr(value))) }
}

/// A slug made of any text, R-P1-10 safe: lower-case ASCII letters and
/// digits, every other run of characters one `-`, at most 80 bytes.
pub fn sanitize_slug(text: &str) -> String {
    let mut slug = String::with_capacity(text.len().min(80));
    for c in text.chars() {
        let c = c.to_ascii_lowercase();
        if c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' {
            slug.push(c);
        } else if !slug.is_empty() && !slug.ends_with('-') {
            slug.push('-');
        }
    }
    slug.truncate(80);
    let slug = slug.trim_matches(|c| c == '-' || c == '_').to_owned();
    if slug.is_empty() { "rollout".into() } else { slug }
}

/// The model's slug as a file name may carry it: redacted first, so that no
/// secret it repeats becomes a name (lower-casing would hide it from the
/// rules after); only a slug that held one is rewritten, any other must
/// pass R-P1-10 as it is.
pub fn redact_slug(slug: &str, redact: impl FnOnce(&str) -> String) -> String {
    let redacted = redact(slug);
    if redacted == slug { slug.to_owned() } else { sanitize_slug(&redacted) }
}

/// R-P1-8 and R-P1-10.
pub fn check_artifacts(a: &RolloutArtifacts) -> Result<Extraction, String> {
    let blank = [&a.rollout_slug, &a.rollout_summary, &a.raw_memory].map(|f| py_strip(f).is_empty());
    if blank.iter().all(|b| *b) {
        return Ok(Extraction::Empty);
    }
    if blank.iter().any(|b| *b) {
        return Err("Phase 1 returned partially-empty memory artifacts.".into());
    }
    Ok(Extraction::Memory {
        slug: normalize_slug(&a.rollout_slug)?,
        rollout_summary: a.rollout_summary.clone(),
        raw_memory: a.raw_memory.clone(),
    })
}

/// R-P1-11: relative to `memories_dir`.
pub fn rollout_summary_file(rollout_id: &str, slug: &str) -> String {
    format!("rollout_summaries/{rollout_id}_{slug}.md")
}

/// R-P1-12.
pub fn format_raw_memory(
    rollout_id: &str,
    facts: &RolloutFacts,
    rollout_path: &str,
    summary_file: &str,
    raw_memory: &str,
) -> String {
    format!(
        "rollout_id: {rollout_id}\nupdated_at: {}\nrollout_path: {rollout_path}\nrollout_summary_file: {summary_file}\nterminal_state: {}\n\n{}\n",
        facts.updated_at,
        facts.terminal_state,
        py_rstrip(raw_memory)
    )
}

/// R-P1-13; `session_id` is the session whose close produced the job.
pub fn format_rollout_summary(session_id: &str, facts: &RolloutFacts, rollout_path: &str, summary: &str) -> String {
    format!(
        "session_id: {session_id}\nupdated_at: {}\nrollout_path: {rollout_path}\nterminal_state: {}\n\n{}\n",
        facts.updated_at,
        facts.terminal_state,
        py_rstrip(summary)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const ONE: &str = "{\"updated_at\":\"2026-04-15T00:00:00+00:00\",\"rollout_id\":\"chat-1\",\"input\":[{\"content\":\"hello\",\"role\":\"user\"}],\"generated_items\":[],\"terminal_metadata\":{\"terminal_state\":\"completed\",\"exception_type\":null,\"exception_message\":null,\"has_final_output\":true},\"final_output\":\"done\"}\n";
    const TWO: &str = "{\"updated_at\":\"2026-04-16T00:00:00+00:00\",\"rollout_id\":\"chat-1\",\"input\":[],\"generated_items\":[],\"terminal_metadata\":{\"terminal_state\":\"interrupted\",\"exception_type\":null,\"exception_message\":null,\"has_final_output\":false}}\n";

    #[test]
    fn one_segment_gives_its_metadata_sorted_with_tight_colons() {
        let (prompt, facts) = render_phase_one(ONE, PHASE_ONE_TOKEN_LIMIT, None, &mut str::to_owned).unwrap();
        assert!(prompt.user_message.contains(
            "```json\n{\n  \"exception_message\":null,\n  \"exception_type\":null,\n  \"has_final_output\":true,\n  \"terminal_state\":\"completed\"\n}\n```"
        ));
        assert!(prompt.user_message.contains(&format!("{ONE}\n\nIMPORTANT:")), "two blank lines before IMPORTANT");
        assert_eq!(
            facts,
            RolloutFacts {
                updated_at: "2026-04-15T00:00:00+00:00".into(),
                terminal_state: "completed".into(),
                segment_count: 1
            }
        );
        assert!(!prompt.instructions.contains("DEVELOPER-SPECIFIC EXTRA GUIDANCE"));
        assert!(!prompt.instructions.contains("{{"));
    }

    #[test]
    fn several_segments_give_count_last_metadata_and_states() {
        let text = format!("{ONE}\n{TWO}");
        let (prompt, facts) =
            render_phase_one(&text, PHASE_ONE_TOKEN_LIMIT, Some("Remember tea."), &mut str::to_owned).unwrap();
        assert!(prompt.user_message.contains("\"segment_count\":2"));
        assert!(prompt.user_message.contains("\"terminal_states\":[\n    \"completed\",\n    \"interrupted\"\n  ]"));
        assert!(prompt.user_message.contains("\"final_terminal_metadata\":{\n    \"exception_message\":null,"));
        assert_eq!(facts.terminal_state, "interrupted");
        assert_eq!(facts.updated_at, "2026-04-16T00:00:00+00:00");
        assert_eq!(facts.segment_count, 2);
        assert!(prompt.instructions.contains("DEVELOPER-SPECIFIC EXTRA GUIDANCE"));
        assert!(prompt.instructions.contains("Remember tea."));
    }

    #[test]
    fn a_huge_rollout_is_truncated_with_both_markers() {
        let content = format!("start{}middle{}end", "a".repeat(700_000), "z".repeat(700_000));
        let line = format!(
            "{{\"updated_at\":\"x\",\"input\":[{{\"content\":\"{content}\",\"role\":\"user\"}}],\"terminal_metadata\":{{\"terminal_state\":\"completed\"}}}}\n"
        );
        let (prompt, _) = render_phase_one(&line, PHASE_ONE_TOKEN_LIMIT, None, &mut str::to_owned).unwrap();
        let m = &prompt.user_message;
        assert!(m.contains("rollout content omitted"));
        assert!(m.contains("Do not assume the rendered rollout below is complete"));
        assert!(m.contains("tokens truncated"));
        assert!(m.contains("\"content\":\"startaaa") && m.contains("zzzend\""));
        assert!(!m.contains("middle"));
        assert!(m.contains(&format!("original_chars={}", line.chars().count())));
    }

    #[test]
    fn empty_and_invalid_rollouts_are_refused() {
        assert_eq!(
            render_phase_one("\n  \n", 10, None, &mut str::to_owned).unwrap_err(),
            "rollout_contents must contain at least one JSONL record"
        );
        assert!(
            render_phase_one("{not json\n", 10, None, &mut str::to_owned)
                .unwrap_err()
                .starts_with("invalid JSONL record")
        );
    }

    #[test]
    fn unknown_facts_fall_back_to_unknown() {
        let (_, facts) = render_phase_one("{\"terminal_metadata\":\"x\"}\n", 10, None, &mut str::to_owned).unwrap();
        assert_eq!((facts.updated_at.as_str(), facts.terminal_state.as_str()), ("unknown", "unknown"));
    }

    #[test]
    fn a_slug_that_holds_a_secret_is_redacted_then_made_safe() {
        let redact = |s: &str| s.replace("AKIAIOSFODNN7EXAMPLE", "[REDACTED:aws_access_key]");
        assert_eq!(redact_slug("aws-AKIAIOSFODNN7EXAMPLE-rotate", redact), "aws-redacted-aws_access_key-rotate");
        assert_eq!(redact_slug("fix-ci", redact), "fix-ci");
        assert_eq!(redact_slug("Fix CI", redact), "Fix CI", "any other slug is checked as it is");
        assert_eq!(sanitize_slug("--!!--"), "rollout");
        assert!(normalize_slug(&sanitize_slug(&"Ab ".repeat(60))).is_ok());
    }

    #[test]
    fn slugs_follow_r_p1_10() {
        assert_eq!(normalize_slug(" fix-bug.md ").unwrap(), "fix-bug");
        assert_eq!(normalize_slug("a_b-1").unwrap(), "a_b-1");
        assert_eq!(normalize_slug(&"a".repeat(80)).unwrap().len(), 80);
        assert!(normalize_slug(&"a".repeat(81)).is_err());
        assert_eq!(normalize_slug("Fix Bug").unwrap_err(), "Invalid rollout_slug: 'Fix Bug'");
        assert_eq!(normalize_slug("it's").unwrap_err(), "Invalid rollout_slug: \"it's\"");
        assert!(normalize_slug("-x").is_err());
        assert!(normalize_slug("../x").is_err());
    }

    #[test]
    fn artifacts_are_all_or_nothing() {
        let a = |s: &str, r: &str, m: &str| RolloutArtifacts {
            rollout_slug: s.into(),
            rollout_summary: r.into(),
            raw_memory: m.into(),
        };
        assert_eq!(check_artifacts(&a(" ", "", "\n")), Ok(Extraction::Empty));
        assert_eq!(
            check_artifacts(&a("x", "", "m")).unwrap_err(),
            "Phase 1 returned partially-empty memory artifacts."
        );
        assert!(matches!(check_artifacts(&a("x", "s", "m")), Ok(Extraction::Memory { .. })));
        assert!(check_artifacts(&a("X", "s", "m")).is_err());
    }

    #[test]
    fn files_have_the_sdk_headers() {
        let facts = RolloutFacts {
            updated_at: "2026-04-15T00:00:00+00:00".into(),
            terminal_state: "completed".into(),
            segment_count: 1,
        };
        assert_eq!(
            format_raw_memory(
                "chat-1",
                &facts,
                "sessions/chat-1.jsonl",
                "rollout_summaries/chat-1_fix-bug.md",
                "memory\n\n  "
            ),
            "rollout_id: chat-1\nupdated_at: 2026-04-15T00:00:00+00:00\nrollout_path: sessions/chat-1.jsonl\nrollout_summary_file: rollout_summaries/chat-1_fix-bug.md\nterminal_state: completed\n\nmemory\n"
        );
        assert_eq!(
            format_rollout_summary("6f1c0f0e-0000-4000-8000-000000000000", &facts, "sessions/chat-1.jsonl", "summary "),
            "session_id: 6f1c0f0e-0000-4000-8000-000000000000\nupdated_at: 2026-04-15T00:00:00+00:00\nrollout_path: sessions/chat-1.jsonl\nterminal_state: completed\n\nsummary\n"
        );
    }

    #[test]
    fn schema_is_the_sdk_schema_to_the_byte() {
        assert_eq!(
            serde_json::to_string(&rollout_extraction_schema()).unwrap(),
            r#"{"properties":{"rollout_slug":{"title":"Rollout Slug","type":"string"},"rollout_summary":{"title":"Rollout Summary","type":"string"},"raw_memory":{"title":"Raw Memory","type":"string"}},"required":["rollout_slug","rollout_summary","raw_memory"],"title":"RolloutExtractionArtifacts","type":"object","additionalProperties":false}"#
        );
    }
}
