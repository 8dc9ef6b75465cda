//! One rollout segment: validation, server-side sanitising (R-SEG-5) and the
//! stored JSONL line (R-SEG-4, R-SEG-7).

use super::ids::RolloutId;
use super::pyjson::{PyJsonStyle, dumps};
use super::time::{parse_rfc3339, py_isoformat};
use chrono::{DateTime, Utc};
use serde_json::{Map, Value};
use std::sync::Arc;

const DROPPED_ROLES: [&str; 2] = ["developer", "system"];
const KEPT_ROLES: [&str; 3] = ["assistant", "tool", "user"];
const DROPPED_TYPES: [&str; 3] = ["compaction", "image_generation_call", "reasoning"];
/// R-SEG-5 step 4: every call/output pair type the SDK keeps.
pub const KEPT_TYPES: [&str; 20] = [
    "apply_patch_call",
    "apply_patch_call_output",
    "computer_call",
    "computer_call_output",
    "custom_tool_call",
    "custom_tool_call_output",
    "function_call",
    "function_call_output",
    "local_shell_call",
    "local_shell_call_output",
    "mcp_approval_request",
    "mcp_approval_response",
    "mcp_call",
    "program",
    "program_output",
    "shell_call",
    "shell_call_output",
    "tool_search_call",
    "tool_search_output",
    "web_search_call",
];

/// SPEC §2.2: what the TypeScript SDK (openai-agents-js) keeps besides
/// those: its record of a tool's result, and of a hosted tool's call.
pub const TYPESCRIPT_KEPT_TYPES: [&str; 2] = ["function_call_result", "hosted_tool_call"];

pub const TERMINAL_STATES: [&str; 6] =
    ["completed", "interrupted", "cancelled", "failed", "max_turns_exceeded", "guardrail_tripped"];

/// R-SEG-5: whether an item of `input` or `generated_items` is remembered.
pub fn should_keep_item(item: &Map<String, Value>) -> bool {
    if let Some(role) = item.get("role").and_then(Value::as_str) {
        if DROPPED_ROLES.contains(&role) {
            return false;
        }
        if KEPT_ROLES.contains(&role) {
            return true;
        }
    }
    match item.get("type").and_then(Value::as_str) {
        Some(t) if DROPPED_TYPES.contains(&t) => false,
        Some(t) => KEPT_TYPES.contains(&t) || TYPESCRIPT_KEPT_TYPES.contains(&t),
        None => false,
    }
}

/// Why a segment body is refused; each maps to one problem code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SegmentError {
    /// 400 `invalid_rollout_id`
    RolloutId(&'static str),
    /// 400 `invalid_segment`: a value that does not parse
    Unparseable(String),
    /// 422 `invalid_segment`: a wrong type or an unknown terminal state
    Invalid(String),
}

/// A validated segment, ready to append.
#[derive(Debug, Clone, PartialEq)]
pub struct Segment {
    pub rollout_id: RolloutId,
    pub updated_at: String,
    pub terminal_state: String,
    /// The compact JSON line, with its final `\n`; shared, not copied, by
    /// each attempt of the group that writes it.
    pub line: Arc<str>,
    /// The rollouts its answer cites as used memory (SPEC §2.10).
    pub cited: Vec<RolloutId>,
}

fn sanitize_items(field: &str, value: Value) -> Result<Vec<Value>, SegmentError> {
    let items = match value {
        Value::Null => return Ok(Vec::new()),
        Value::Array(items) => items,
        _ => {
            return Err(SegmentError::Invalid(format!("{field} must be an array of items")));
        }
    };
    let mut kept = Vec::with_capacity(items.len());
    for item in items {
        match &item {
            Value::Object(map) => {
                if should_keep_item(map) {
                    kept.push(item);
                }
            }
            _ => {
                return Err(SegmentError::Invalid(format!("{field} items must be objects")));
            }
        }
    }
    Ok(kept)
}

fn optional_string(meta: &mut Map<String, Value>, key: &str) -> Result<Value, SegmentError> {
    match meta.remove(key) {
        None | Some(Value::Null) => Ok(Value::Null),
        Some(Value::String(s)) => Ok(Value::String(s)),
        Some(_) => Err(SegmentError::Invalid(format!("terminal_metadata.{key} must be a string or null"))),
    }
}

/// R-SEG-6 for a client that sent no terminal metadata: derive it from the
/// segment itself, as the SDK does for a run that raised no exception.
fn derived_terminal_state(final_output: &Value, interruptions: &[Value]) -> &'static str {
    if !final_output.is_null() {
        "completed"
    } else if !interruptions.is_empty() {
        "interrupted"
    } else {
        "failed"
    }
}

fn terminal_metadata(
    value: Option<Value>,
    final_output: &Value,
    interruptions: &[Value],
) -> Result<Map<String, Value>, SegmentError> {
    let mut meta = match value {
        None | Some(Value::Null) => {
            let state = derived_terminal_state(final_output, interruptions);
            let mut m = Map::new();
            m.insert("terminal_state".into(), state.into());
            m.insert("has_final_output".into(), (state == "completed").into());
            m
        }
        Some(Value::Object(m)) => m,
        Some(_) => {
            return Err(SegmentError::Invalid("terminal_metadata must be an object".into()));
        }
    };
    let state = match meta.remove("terminal_state") {
        Some(Value::String(s)) if TERMINAL_STATES.contains(&s.as_str()) => s,
        _ => {
            return Err(SegmentError::Invalid(format!(
                "terminal_metadata.terminal_state must be one of {}",
                TERMINAL_STATES.join(", ")
            )));
        }
    };
    let exception_type = optional_string(&mut meta, "exception_type")?;
    let exception_message = optional_string(&mut meta, "exception_message")?;
    let has_final_output = match meta.remove("has_final_output") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => b,
        Some(_) => {
            return Err(SegmentError::Invalid("terminal_metadata.has_final_output must be a boolean".into()));
        }
    };
    let mut ordered = Map::new();
    ordered.insert("terminal_state".into(), state.into());
    ordered.insert("exception_type".into(), exception_type);
    ordered.insert("exception_message".into(), exception_message);
    ordered.insert("has_final_output".into(), has_final_output.into());
    ordered.extend(meta);
    Ok(ordered)
}

/// Turns a client body into the stored line. `now` stamps a segment that
/// carries no `updated_at`.
pub fn build_segment(body: Value, now: DateTime<Utc>) -> Result<Segment, SegmentError> {
    build_segment_redacted(body, now, None, &mut Default::default())
}

/// As [`build_segment`], the stored line's string values redacted with
/// `redactor` when there is one (a layout's `at_ingest`): the structure and
/// the key order stay, only the text of secrets changes.
pub fn build_segment_redacted(
    body: Value,
    now: DateTime<Utc>,
    redactor: Option<&super::redact::Redactor>,
    counts: &mut super::redact::Counts,
) -> Result<Segment, SegmentError> {
    let Value::Object(mut body) = body else {
        return Err(SegmentError::Invalid("a segment must be a JSON object".into()));
    };
    let rollout_id = match body.shift_remove("rollout_id") {
        None | Some(Value::Null) => RolloutId::generate(),
        Some(Value::String(s)) => RolloutId::parse_client(&s).map_err(SegmentError::RolloutId)?,
        Some(_) => return Err(SegmentError::Invalid("rollout_id must be a string".into())),
    };
    let updated_at = match body.shift_remove("updated_at") {
        None | Some(Value::Null) => py_isoformat(now),
        Some(Value::String(s)) => {
            if parse_rfc3339(&s).is_none() {
                return Err(SegmentError::Unparseable(format!("updated_at must be an RFC 3339 timestamp, got: {s}")));
            }
            s
        }
        Some(_) => return Err(SegmentError::Invalid("updated_at must be a string".into())),
    };
    let input = match body.shift_remove("input") {
        Some(Value::String(s)) => {
            let mut item = Map::new();
            item.insert("content".into(), Value::String(s));
            item.insert("role".into(), "user".into());
            vec![Value::Object(item)]
        }
        Some(other) => sanitize_items("input", other)?,
        None => Vec::new(),
    };
    let generated_items =
        sanitize_items("generated_items", body.shift_remove("generated_items").unwrap_or(Value::Null))?;
    let interruptions = match body.shift_remove("interruptions") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => items,
        Some(_) => {
            return Err(SegmentError::Invalid("interruptions must be an array".into()));
        }
    };
    let final_output = body.shift_remove("final_output").unwrap_or(Value::Null);
    let cited = super::citation::segment_citations(&final_output, &generated_items);
    let meta = terminal_metadata(body.shift_remove("terminal_metadata"), &final_output, &interruptions)?;
    let terminal_state = meta["terminal_state"].as_str().unwrap_or("unknown").to_owned();

    let mut line = Map::new();
    line.insert("updated_at".into(), Value::String(updated_at.clone()));
    line.insert("rollout_id".into(), Value::String(rollout_id.as_str().into()));
    line.insert("input".into(), Value::Array(input));
    line.insert("generated_items".into(), Value::Array(generated_items));
    if !interruptions.is_empty() {
        line.insert("interruptions".into(), Value::Array(interruptions));
    }
    line.insert("terminal_metadata".into(), Value::Object(meta));
    if !final_output.is_null() {
        line.insert("final_output".into(), final_output);
    }
    line.extend(body);
    let mut line = Value::Object(line);
    if let Some(redactor) = redactor {
        redactor.redact_json(&mut line, counts);
    }
    let mut text = dumps(&line, PyJsonStyle::COMPACT);
    text.push('\n');
    Ok(Segment { rollout_id, updated_at, terminal_state, line: text.into(), cited })
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;
    use serde_json::json;

    fn now() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 4, 15, 12, 34, 56).unwrap()
    }

    fn keep(item: Value) -> bool {
        should_keep_item(item.as_object().unwrap())
    }

    #[test]
    fn each_kept_type_is_kept() {
        for t in KEPT_TYPES.iter().chain(&TYPESCRIPT_KEPT_TYPES) {
            assert!(keep(json!({"type": t})), "{t}");
        }
        assert_eq!(KEPT_TYPES.len() + TYPESCRIPT_KEPT_TYPES.len(), 22, "either SDK's kept types, no more");
    }

    #[test]
    fn the_typescript_sdks_items_are_kept_whatever_their_status() {
        let result = json!({"type": "function_call_result", "name": "lookup", "callId": "c1", "status": "completed",
                            "output": {"type": "text", "text": "42"}});
        let hosted = json!({"type": "hosted_tool_call", "name": "web_search_call", "status": "completed"});
        assert!(keep(result) && keep(hosted));
        assert!(!keep(json!({"type": "function_call_results"})), "only the exact names");
        assert!(!keep(json!({"role": "system", "type": "hosted_tool_call"})), "a dropped role still decides");
    }

    #[test]
    fn dropped_types_unknown_types_and_bare_items_are_dropped() {
        for t in [
            "compaction",
            "image_generation_call",
            "reasoning",
            "file_search_call",
            "code_interpreter_call",
            "item_reference",
            "message",
            "brand_new_type",
        ] {
            assert!(!keep(json!({"type": t})), "{t}");
        }
        assert!(!keep(json!({"content": "no role, no type"})));
    }

    #[test]
    fn roles_decide_before_types() {
        assert!(!keep(json!({"role": "developer", "content": "debug"})));
        assert!(!keep(json!({"role": "system", "content": "sys", "type": "message"})));
        for role in ["assistant", "tool", "user"] {
            assert!(keep(json!({"role": role, "type": "reasoning"})), "{role}");
        }
        assert!(keep(json!({"role": "critic", "type": "function_call"})));
        assert!(!keep(json!({"role": "critic", "type": "message"})));
    }

    #[test]
    fn stored_line_has_the_sdk_key_order_and_sanitised_items() {
        let body = json!({
            "extra": {"z": 1, "a": 2},
            "final_output": "done",
            "terminal_metadata": {"has_final_output": true, "terminal_state": "completed"},
            "generated_items": [
                {"type": "reasoning", "summary": []},
                {"type": "message", "role": "assistant", "id": "m1", "content": [{"type": "output_text", "text": "hi"}]}
            ],
            "input": [
                {"role": "developer", "content": "debug"},
                {"role": "system", "content": "system"},
                {"role": "user", "content": "hello"},
                {"type": "reasoning", "summary": []},
                {"type": "compaction", "summary": "compact", "encrypted_content": "e"}
            ],
            "rollout_id": " chat-1 ",
            "updated_at": "2026-04-15T00:00:00+00:00"
        });
        let seg = build_segment(body, now()).unwrap();
        assert_eq!(seg.rollout_id.as_str(), "chat-1");
        assert_eq!(
            &*seg.line,
            concat!(
                r#"{"updated_at":"2026-04-15T00:00:00+00:00","rollout_id":"chat-1","#,
                r#""input":[{"role":"user","content":"hello"}],"#,
                r#""generated_items":[{"type":"message","role":"assistant","id":"m1","content":[{"type":"output_text","text":"hi"}]}],"#,
                r#""terminal_metadata":{"terminal_state":"completed","exception_type":null,"exception_message":null,"has_final_output":true},"#,
                r#""final_output":"done","extra":{"z":1,"a":2}}"#,
                "\n"
            )
        );
    }

    #[test]
    fn string_input_becomes_one_user_item_content_first() {
        let seg = build_segment(
            json!({"rollout_id": "c", "input": "héllo", "updated_at": "2026-04-15T00:00:00+00:00",
                   "terminal_metadata": {"terminal_state": "completed", "has_final_output": true},
                   "final_output": "done"}),
            now(),
        )
        .unwrap();
        assert_eq!(
            &*seg.line,
            "{\"updated_at\":\"2026-04-15T00:00:00+00:00\",\"rollout_id\":\"c\",\"input\":[{\"content\":\"h\\u00e9llo\",\"role\":\"user\"}],\"generated_items\":[],\"terminal_metadata\":{\"terminal_state\":\"completed\",\"exception_type\":null,\"exception_message\":null,\"has_final_output\":true},\"final_output\":\"done\"}\n"
        );
    }

    #[test]
    fn interruptions_are_kept_unsanitised_and_only_when_present() {
        let call = json!({"id": "fc_1", "call_id": "call_1", "name": "get_weather",
                          "arguments": "{\"city\":\"Paris\"}", "type": "function_call"});
        let seg = build_segment(
            json!({"rollout_id": "c", "input": "hello",
                   "interruptions": [call, {"type": "reasoning"}],
                   "terminal_metadata": {"terminal_state": "interrupted"}}),
            now(),
        )
        .unwrap();
        let line: Value = serde_json::from_str(&seg.line).unwrap();
        let keys: Vec<&str> = line.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            ["updated_at", "rollout_id", "input", "generated_items", "interruptions", "terminal_metadata"]
        );
        assert_eq!(line["interruptions"][1], json!({"type": "reasoning"}));
        assert_eq!(line["updated_at"], "2026-04-15T12:34:56+00:00");
        assert_eq!(
            line["terminal_metadata"],
            json!({"terminal_state": "interrupted", "exception_type": null,
                   "exception_message": null, "has_final_output": false})
        );
        let seg = build_segment(
            json!({"rollout_id": "c", "interruptions": [],
                                       "terminal_metadata": {"terminal_state": "failed"}}),
            now(),
        )
        .unwrap();
        assert!(!seg.line.contains("interruptions"));
    }

    #[test]
    fn terminal_states_are_checked() {
        for state in TERMINAL_STATES {
            let seg = build_segment(json!({"rollout_id": "c", "terminal_metadata": {"terminal_state": state}}), now())
                .unwrap();
            assert_eq!(seg.terminal_state, state);
        }
        for bad in [json!("done"), json!(null), json!(3)] {
            let err = build_segment(json!({"rollout_id": "c", "terminal_metadata": {"terminal_state": bad}}), now());
            assert!(matches!(err, Err(SegmentError::Invalid(_))));
        }
        let err = build_segment(
            json!({"rollout_id": "c", "terminal_metadata": {"terminal_state": "failed", "has_final_output": "yes"}}),
            now(),
        );
        assert!(matches!(err, Err(SegmentError::Invalid(_))));
    }

    #[test]
    fn missing_terminal_metadata_is_derived_as_the_sdk_would() {
        let state = |body| build_segment(body, now()).unwrap().terminal_state;
        assert_eq!(state(json!({"final_output": "x"})), "completed");
        assert_eq!(state(json!({"interruptions": [{"type": "function_call"}]})), "interrupted");
        assert_eq!(state(json!({})), "failed");
    }

    #[test]
    fn bad_ids_timestamps_and_types_are_refused() {
        assert!(matches!(build_segment(json!({"rollout_id": "../x"}), now()), Err(SegmentError::RolloutId(_))));
        assert!(matches!(build_segment(json!({"rollout_id": 5}), now()), Err(SegmentError::Invalid(_))));
        assert!(matches!(build_segment(json!({"updated_at": "soon"}), now()), Err(SegmentError::Unparseable(_))));
        assert!(matches!(build_segment(json!({"input": 5}), now()), Err(SegmentError::Invalid(_))));
        assert!(matches!(build_segment(json!({"input": ["text"]}), now()), Err(SegmentError::Invalid(_))));
        assert!(matches!(build_segment(json!([1]), now()), Err(SegmentError::Invalid(_))));
    }

    #[test]
    fn absent_rollout_id_gets_a_fresh_run_id() {
        let seg = build_segment(json!({"final_output": "x"}), now()).unwrap();
        assert!(seg.rollout_id.as_str().starts_with("run-"));
        assert!(seg.line.contains(&format!("\"rollout_id\":\"{}\"", seg.rollout_id)));
    }
}
