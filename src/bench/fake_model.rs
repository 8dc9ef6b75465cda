//! An OpenAI-compatible model that answers after a fixed latency, for the
//! benchmark: phase one gets three artifacts, a phase-two agent gets one
//! `apply_patch` turn writing both memory files, then a final answer.

use axum::Router;
use axum::extract::State;
use axum::http::Uri;
use axum::routing::post;
use serde_json::{Value, json};
use std::net::SocketAddr;
use std::time::Duration;

fn reply(uri: &Uri, body: &Value) -> Value {
    let responses = uri.path().ends_with("/responses");
    let text = |text: String| {
        if responses {
            json!({"output": [{"type": "message", "content": [{"type": "output_text", "text": text}]}],
                   "usage": {"input_tokens": 100, "output_tokens": 20}})
        } else {
            json!({"choices": [{"message": {"role": "assistant", "content": text}}],
                   "usage": {"prompt_tokens": 100, "completion_tokens": 20}})
        }
    };
    if body.get("tools").is_none() {
        let artifacts = json!({"rollout_slug": "bench", "rollout_summary": "A benchmark conversation.",
                               "raw_memory": "- The user benchmarks memoryd."});
        return text(artifacts.to_string());
    }
    let done = body.to_string().contains("_call_output") || body.to_string().contains("\"role\":\"tool\"");
    if done {
        return text("Memory updated.".into());
    }
    let patch = |path: &str, line: &str| {
        json!({"patch": json!({"type": "update_file", "path": path, "diff": format!("@@\n+{line}\n")}).to_string()})
            .to_string()
    };
    let calls = [("memories/MEMORY.md", "benchmark memory"), ("memories/memory_summary.md", "benchmark summary")];
    if responses {
        let items: Vec<Value> = calls
            .iter()
            .enumerate()
            .map(|(i, (p, l))| json!({"type": "function_call", "call_id": format!("c{i}"), "name": "apply_patch", "arguments": patch(p, l)}))
            .collect();
        json!({"output": items, "usage": {"input_tokens": 100, "output_tokens": 20}})
    } else {
        let items: Vec<Value> = calls
            .iter()
            .enumerate()
            .map(|(i, (p, l))| json!({"id": format!("c{i}"), "type": "function", "function": {"name": "apply_patch", "arguments": patch(p, l)}}))
            .collect();
        json!({"choices": [{"message": {"role": "assistant", "content": null, "tool_calls": items}}],
               "usage": {"prompt_tokens": 100, "completion_tokens": 20}})
    }
}

async fn answer(State(latency): State<Duration>, uri: Uri, body: String) -> axum::Json<Value> {
    let body: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
    tokio::time::sleep(latency).await;
    axum::Json(reply(&uri, &body))
}

/// Serves on a free loopback port until the process ends; returns the base URL.
pub async fn start(latency: Duration) -> std::io::Result<String> {
    let app = Router::new()
        .route("/v1/responses", post(answer))
        .route("/v1/chat/completions", post(answer))
        .with_state(latency);
    let listener = tokio::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0))).await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::error!(error = %e, "the benchmark's fake model stopped");
        }
    });
    Ok(format!("http://{addr}/v1"))
}
