//! A scripted OpenAI-compatible server for the tests and the benchmark (no
//! test may need a real model): the Responses API and Chat Completions,
//! replies per call (or a default), faults (status codes, `Retry-After`,
//! delays), and a record of every request.

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::{Value, json};
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[derive(Clone, Debug)]
pub enum Reply {
    /// A successful answer whose output text is this JSON.
    Output(Value),
    /// An agent turn calling function tools: `(name, arguments JSON)`.
    Calls(Vec<(&'static str, Value)>),
    /// A Responses API custom tool call with raw text input.
    CustomCall(&'static str, String),
    /// A final agent answer: text and no tool call.
    Text(&'static str),
    /// A whole consolidation in two turns: `apply_patch` calls writing
    /// `MEMORY.md` and `memory_summary.md`, then — once the request carries
    /// their outputs — a final answer.
    Consolidate,
    /// An error status with an OpenAI-style error body.
    Status { status: u16, code: Option<&'static str>, retry_after: Option<&'static str> },
}

#[derive(Clone, Debug)]
pub struct Scripted {
    pub reply: Reply,
    pub delay: Duration,
}

impl Reply {
    pub fn artifacts(slug: &str, summary: &str, raw: &str) -> Self {
        Reply::Output(json!({"rollout_slug": slug, "rollout_summary": summary, "raw_memory": raw}))
    }

    pub fn status(status: u16) -> Self {
        Reply::Status { status, code: None, retry_after: None }
    }

    pub fn after(self, delay: Duration) -> Scripted {
        Scripted { reply: self, delay }
    }

    pub fn now(self) -> Scripted {
        Scripted { reply: self, delay: Duration::ZERO }
    }
}

#[derive(Clone, Debug)]
pub struct Recorded {
    pub path: String,
    pub body: Value,
    pub authorization: Option<String>,
    pub received_at: chrono::DateTime<chrono::Utc>,
}

impl Recorded {
    /// The user message, for either API.
    pub fn user_message(&self) -> String {
        let from_responses = self.body["input"][0]["content"].as_str();
        let from_chat = self.body["messages"][1]["content"].as_str();
        from_responses.or(from_chat).unwrap_or_default().to_owned()
    }

    /// The system instructions, for either API.
    pub fn instructions(&self) -> String {
        let from_responses = self.body["instructions"].as_str();
        let from_chat = self.body["messages"][0]["content"].as_str();
        from_responses.or(from_chat).unwrap_or_default().to_owned()
    }
}

#[derive(Default)]
struct FakeState {
    script: VecDeque<Scripted>,
    default: Option<Scripted>,
    agent_default: Option<Scripted>,
    requests: Vec<Recorded>,
    /// Off for long benchmarks, whose prompts would pile up.
    recording: bool,
}

#[derive(Clone)]
pub struct FakeLlm {
    pub base_url: String,
    state: Arc<Mutex<FakeState>>,
    embeddings: crate::fake_embeddings::Shared,
}

impl FakeLlm {
    /// Serves on a free loopback port and records every request.
    pub async fn start() -> Self {
        Self::serve(true).await.expect("the fake model binds a loopback port")
    }

    /// Serves on a free loopback port, recording nothing.
    pub async fn start_unrecorded() -> std::io::Result<Self> {
        Self::serve(false).await
    }

    async fn serve(recording: bool) -> std::io::Result<Self> {
        let state = Arc::new(Mutex::new(FakeState { recording, ..FakeState::default() }));
        let embeddings = crate::fake_embeddings::Shared::default();
        let app = Router::new()
            .route("/v1/responses", post(answer))
            .route("/v1/chat/completions", post(answer))
            .with_state(state.clone())
            .merge(
                Router::new()
                    .route("/v1/embeddings", post(crate::fake_embeddings::embed))
                    .with_state(embeddings.clone()),
            );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, app).await {
                tracing::error!(error = %e, "the fake model stopped");
            }
        });
        Ok(Self { base_url: format!("http://{addr}/v1"), state, embeddings })
    }

    /// Replies used in order, one per call, before the default.
    pub fn push(&self, scripted: Scripted) {
        self.state.lock().unwrap().script.push_back(scripted);
    }

    /// The reply once the script is used up.
    pub fn set_default(&self, scripted: Scripted) {
        self.state.lock().unwrap().default = Some(scripted);
    }

    /// The reply to agent turns (requests with tools) once the script is used up.
    pub fn set_agent_default(&self, scripted: Scripted) {
        self.state.lock().unwrap().agent_default = Some(scripted);
    }

    /// Starts recording afresh (forgetting what was recorded), or stops.
    pub fn set_recording(&self, on: bool) {
        let mut state = self.state.lock().unwrap();
        state.recording = on;
        state.requests.clear();
    }

    pub fn requests(&self) -> Vec<Recorded> {
        self.state.lock().unwrap().requests.clone()
    }

    /// The structured-output calls of phase one (phase two's agent turns carry tools instead).
    pub fn phase_one_requests(&self) -> Vec<Recorded> {
        self.requests().into_iter().filter(|r| r.body.get("tools").is_none()).collect()
    }

    /// Each embeddings call's inputs, in order.
    pub fn embedding_calls(&self) -> Vec<Vec<String>> {
        self.embeddings.lock().unwrap().calls.clone()
    }

    /// While `true`, every embeddings call answers 503.
    pub fn set_embeddings_failing(&self, failing: bool) {
        self.embeddings.lock().unwrap().failing = failing;
    }

    /// Phase two's agent turns.
    pub fn phase_two_requests(&self) -> Vec<Recorded> {
        self.requests().into_iter().filter(|r| r.body.get("tools").is_some()).collect()
    }
}

async fn answer(State(state): State<Arc<Mutex<FakeState>>>, uri: Uri, headers: HeaderMap, body: String) -> Response {
    let body: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
    let scripted = {
        let mut s = state.lock().unwrap();
        if s.recording {
            s.requests.push(Recorded {
                path: uri.path().to_owned(),
                body: body.clone(),
                authorization: headers.get("authorization").and_then(|v| v.to_str().ok()).map(str::to_owned),
                received_at: chrono::Utc::now(),
            });
        }
        let agent_turn = body.get("tools").is_some();
        s.script.pop_front().or_else(|| {
            if agent_turn { s.agent_default.clone().or_else(|| s.default.clone()) } else { s.default.clone() }
        })
    };
    let Some(scripted) = scripted else {
        return (StatusCode::INTERNAL_SERVER_ERROR, "no scripted reply").into_response();
    };
    tokio::time::sleep(scripted.delay).await;
    let reply = match scripted.reply {
        Reply::Consolidate if carries_tool_outputs(&body) => Reply::Text("Memory updated."),
        Reply::Consolidate => Reply::Calls(vec![
            update("memories/MEMORY.md", "consolidated memory"),
            update("memories/memory_summary.md", "consolidated summary"),
        ]),
        other => other,
    };
    match reply {
        Reply::Status { status, code, retry_after } => {
            let status = StatusCode::from_u16(status).unwrap();
            let error = json!({"error": {"message": format!("scripted {status}"), "type": "test", "code": code}});
            let mut response = (status, axum::Json(error)).into_response();
            if let Some(after) = retry_after {
                response.headers_mut().insert("retry-after", after.parse().unwrap());
            }
            response
        }
        Reply::Calls(calls) => {
            let responses = uri.path().ends_with("/responses");
            let items: Vec<Value> = calls
                .iter()
                .enumerate()
                .map(|(i, (name, args))| {
                    if responses {
                        json!({"type": "function_call", "call_id": format!("call_{i}"), "name": name, "arguments": args.to_string()})
                    } else {
                        json!({"id": format!("call_{i}"), "type": "function", "function": {"name": name, "arguments": args.to_string()}})
                    }
                })
                .collect();
            let reply = if responses {
                json!({"output": items, "usage": {"input_tokens": 50, "output_tokens": 10}})
            } else {
                json!({"choices": [{"index": 0, "message": {"role": "assistant", "content": null, "tool_calls": items}}],
                       "usage": {"prompt_tokens": 50, "completion_tokens": 10}})
            };
            axum::Json(reply).into_response()
        }
        Reply::CustomCall(name, input) => axum::Json(json!({
            "output": [{"type": "custom_tool_call", "call_id": "custom_0", "name": name, "input": input}],
            "usage": {"input_tokens": 50, "output_tokens": 10}
        }))
        .into_response(),
        Reply::Text(text) => {
            let reply = if uri.path().ends_with("/responses") {
                json!({"output": [{"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]}],
                       "usage": {"input_tokens": 50, "output_tokens": 5}})
            } else {
                json!({"choices": [{"index": 0, "message": {"role": "assistant", "content": text}}],
                       "usage": {"prompt_tokens": 50, "completion_tokens": 5}})
            };
            axum::Json(reply).into_response()
        }
        Reply::Consolidate => unreachable!("resolved above"),
        Reply::Output(output) => {
            let text = output.to_string();
            let reply = if uri.path().ends_with("/responses") {
                json!({"id": "resp_1", "object": "response", "output": [
                    {"type": "reasoning", "summary": []},
                    {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]}
                ], "usage": {"input_tokens": 120, "output_tokens": 30, "total_tokens": 150}})
            } else {
                json!({"id": "chatcmpl-1", "object": "chat.completion", "choices": [
                    {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
                ], "usage": {"prompt_tokens": 120, "completion_tokens": 30, "total_tokens": 150}})
            };
            axum::Json(reply).into_response()
        }
    }
}

fn carries_tool_outputs(body: &Value) -> bool {
    let items = body["input"].as_array().or(body["messages"].as_array());
    items.into_iter().flatten().any(|i| i["type"] == "function_call_output" || i["role"] == "tool")
}

/// An `apply_patch` call in the SDK's JSON form, replacing nothing and adding `line`.
fn update(path: &str, line: &str) -> (&'static str, Value) {
    let operation = json!({"type": "update_file", "path": path, "diff": format!("@@\n+{line}\n")});
    ("apply_patch", json!({"patch": operation.to_string()}))
}
