//! Any OpenAI-compatible endpoint, over the Responses API (`POST
//! {base}/responses`) or Chat Completions (`POST {base}/chat/completions`,
//! for vLLM, Ollama, llama.cpp, LiteLLM).

use super::{
    AgentItem, AgentRequest, AgentTurn, FailureClass, Model, ModelError, ModelReply, StructuredRequest, TokenUsage,
    ToolCall,
};
use crate::config::LlmApi;
use async_trait::async_trait;
use reqwest::StatusCode;
use reqwest::header::RETRY_AFTER;
use serde_json::{Value, json};
use std::time::Duration;

pub struct OpenAiModel {
    http: reqwest::Client,
    base_url: String,
    api_key: String,
    api: LlmApi,
}

impl OpenAiModel {
    pub fn new(base_url: &str, api_key: &str, api: LlmApi, timeout: Duration) -> Result<Self, reqwest::Error> {
        let http = reqwest::Client::builder().timeout(timeout).connect_timeout(Duration::from_secs(10)).build()?;
        Ok(Self { http, base_url: base_url.trim_end_matches('/').to_owned(), api_key: api_key.to_owned(), api })
    }

    fn body(&self, req: &StructuredRequest) -> (String, Value) {
        match self.api {
            LlmApi::Responses => {
                let mut body = json!({
                    "model": req.model,
                    "instructions": req.instructions,
                    "input": [{"role": "user", "content": req.user_message}],
                    "text": {"format": {"type": "json_schema", "name": req.schema_name, "schema": req.schema, "strict": true}},
                    "store": false,
                });
                if let Some(effort) = &req.reasoning_effort {
                    body["reasoning"] = json!({"effort": effort});
                }
                (format!("{}/responses", self.base_url), body)
            }
            LlmApi::ChatCompletions => {
                let mut body = json!({
                    "model": req.model,
                    "messages": [
                        {"role": "system", "content": req.instructions},
                        {"role": "user", "content": req.user_message},
                    ],
                    "response_format": {"type": "json_schema", "json_schema": {"name": req.schema_name, "schema": req.schema, "strict": true}},
                });
                if let Some(effort) = &req.reasoning_effort {
                    body["reasoning_effort"] = json!(effort);
                }
                (format!("{}/chat/completions", self.base_url), body)
            }
        }
    }

    fn parse_reply(&self, body: &Value) -> Result<ModelReply, ModelError> {
        let usage = self.usage_of(body);
        let (text, usage) = match self.api {
            LlmApi::Responses => {
                let mut text = String::new();
                for item in body["output"].as_array().into_iter().flatten() {
                    for part in item["content"].as_array().into_iter().flatten() {
                        match part["type"].as_str() {
                            Some("output_text") => text.push_str(part["text"].as_str().unwrap_or("")),
                            Some("refusal") => {
                                return Err(refused(usage));
                            }
                            _ => {}
                        }
                    }
                }
                (text, usage)
            }
            LlmApi::ChatCompletions => {
                let message = &body["choices"][0]["message"];
                if message["refusal"].is_string() {
                    return Err(refused(usage));
                }
                (message["content"].as_str().unwrap_or("").to_owned(), usage)
            }
        };
        if text.is_empty() {
            return Err(ModelError { usage, ..ModelError::permanent("the model answered with no text") });
        }
        Ok(ModelReply { text, usage })
    }
}

fn refused(usage: TokenUsage) -> ModelError {
    ModelError { usage, ..ModelError::permanent("the model refused to answer") }
}

/// `Retry-After` as seconds or as an HTTP date.
fn retry_after(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    let value = headers.get(RETRY_AFTER)?.to_str().ok()?.trim();
    if let Ok(secs) = value.parse::<f64>() {
        return (secs.is_finite() && secs >= 0.0).then(|| Duration::from_secs_f64(secs));
    }
    let at = chrono::DateTime::parse_from_rfc2822(value).ok()?;
    (at.with_timezone(&chrono::Utc) - chrono::Utc::now()).to_std().ok().or(Some(Duration::ZERO))
}

/// The API's own error message, never the request.
fn api_error_message(body: &str) -> String {
    let parsed: Option<Value> = serde_json::from_str(body).ok();
    let message = parsed
        .as_ref()
        .and_then(|v| v["error"]["message"].as_str().map(str::to_owned))
        .unwrap_or_else(|| body.chars().take(300).collect());
    message.chars().take(500).collect()
}

fn classify(status: StatusCode, body: &str) -> FailureClass {
    let code = serde_json::from_str::<Value>(body).ok().and_then(|v| v["error"]["code"].as_str().map(str::to_owned));
    if code.as_deref() == Some("context_length_exceeded") {
        FailureClass::ContextLength
    } else if status == StatusCode::TOO_MANY_REQUESTS
        || status == StatusCode::REQUEST_TIMEOUT
        || status.is_server_error()
    {
        FailureClass::Transient
    } else {
        FailureClass::Permanent
    }
}

impl OpenAiModel {
    /// One POST; the parsed JSON answer, or the failure told apart.
    fn api_name(&self) -> &'static str {
        match self.api {
            LlmApi::Responses => "responses",
            LlmApi::ChatCompletions => "chat_completions",
        }
    }

    /// `post` with its outcome, latency and tokens counted for `phase`.
    async fn measured<T>(
        &self,
        phase: &str,
        call: impl std::future::Future<Output = Result<(T, TokenUsage), ModelError>>,
    ) -> Result<T, ModelError> {
        let started = std::time::Instant::now();
        let result = call.await;
        let (outcome, usage) = match &result {
            Ok((_, usage)) => ("ok", *usage),
            Err(e) => match e.class {
                FailureClass::Transient => ("transient", e.usage),
                FailureClass::ContextLength => ("context_length", e.usage),
                FailureClass::Permanent => ("permanent", e.usage),
            },
        };
        crate::metrics::model_call(
            phase,
            self.api_name(),
            outcome,
            started.elapsed(),
            usage.input_tokens,
            usage.output_tokens,
        );
        result.map(|(value, _)| value)
    }

    async fn post(&self, url: &str, body: &Value) -> Result<Value, ModelError> {
        let transient = |message: String| ModelError {
            class: FailureClass::Transient,
            message,
            retry_after: None,
            usage: TokenUsage::default(),
        };
        let response = self
            .http
            .post(url)
            .bearer_auth(&self.api_key)
            .json(body)
            .send()
            .await
            .map_err(|e| transient(format!("model request failed: {}", without_url(e))))?;
        let status = response.status();
        let headers = response.headers().clone();
        let text = response
            .text()
            .await
            .map_err(|e| transient(format!("reading the model's answer failed: {}", without_url(e))))?;
        if !status.is_success() {
            return Err(ModelError {
                class: classify(status, &text),
                message: format!("model API answered {status}: {}", api_error_message(&text)),
                retry_after: retry_after(&headers),
                usage: TokenUsage::default(),
            });
        }
        serde_json::from_str(&text)
            .map_err(|e| ModelError::permanent(format!("the model API's answer is not JSON: {e}")))
    }

    fn usage_of(&self, body: &Value) -> TokenUsage {
        let (input, output) = match self.api {
            LlmApi::Responses => ("input_tokens", "output_tokens"),
            LlmApi::ChatCompletions => ("prompt_tokens", "completion_tokens"),
        };
        TokenUsage {
            input_tokens: body["usage"][input].as_u64().unwrap_or(0),
            output_tokens: body["usage"][output].as_u64().unwrap_or(0),
            calls: 1,
        }
    }

    fn agent_body(&self, req: &AgentRequest<'_>) -> (String, Value) {
        match self.api {
            LlmApi::Responses => {
                let input: Vec<Value> = req
                    .items
                    .iter()
                    .map(|item| match item {
                        AgentItem::User(text) => json!({"role": "user", "content": text}),
                        AgentItem::Assistant(text) => json!({"role": "assistant", "content": text}),
                        AgentItem::Call(c) if c.custom => {
                            json!({"type": "custom_tool_call", "call_id": c.call_id, "name": c.name, "input": c.arguments})
                        }
                        AgentItem::Call(c) => {
                            json!({"type": "function_call", "call_id": c.call_id, "name": c.name, "arguments": c.arguments})
                        }
                        AgentItem::Output { call, output } if call.custom => {
                            json!({"type": "custom_tool_call_output", "call_id": call.call_id, "output": output})
                        }
                        AgentItem::Output { call, output } => {
                            json!({"type": "function_call_output", "call_id": call.call_id, "output": output})
                        }
                    })
                    .collect();
                let tools: Vec<Value> = req
                    .tools
                    .iter()
                    .map(|t| json!({"type": "function", "name": t.name, "description": t.description, "parameters": t.parameters, "strict": false}))
                    .collect();
                let mut body = json!({"model": req.model, "instructions": req.instructions, "input": input, "tools": tools, "store": false});
                if let Some(effort) = &req.reasoning_effort {
                    body["reasoning"] = json!({"effort": effort});
                }
                (format!("{}/responses", self.base_url), body)
            }
            LlmApi::ChatCompletions => {
                let mut messages = vec![json!({"role": "system", "content": req.instructions})];
                for item in req.items {
                    match item {
                        AgentItem::User(text) => messages.push(json!({"role": "user", "content": text})),
                        AgentItem::Assistant(text) => messages.push(json!({"role": "assistant", "content": text})),
                        AgentItem::Call(c) => {
                            let call = json!({"id": c.call_id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}});
                            // Calls of one turn share one assistant message.
                            match messages.last_mut() {
                                Some(last) if last["role"] == "assistant" && last["tool_calls"].is_array() => {
                                    last["tool_calls"].as_array_mut().expect("checked above").push(call)
                                }
                                _ => messages.push(json!({"role": "assistant", "content": null, "tool_calls": [call]})),
                            }
                        }
                        AgentItem::Output { call, output } => {
                            messages.push(json!({"role": "tool", "tool_call_id": call.call_id, "content": output}))
                        }
                    }
                }
                let tools: Vec<Value> = req
                    .tools
                    .iter()
                    .map(|t| json!({"type": "function", "function": {"name": t.name, "description": t.description, "parameters": t.parameters}}))
                    .collect();
                let mut body = json!({"model": req.model, "messages": messages, "tools": tools});
                if let Some(effort) = &req.reasoning_effort {
                    body["reasoning_effort"] = json!(effort);
                }
                (format!("{}/chat/completions", self.base_url), body)
            }
        }
    }

    fn parse_turn(&self, body: &Value) -> AgentTurn {
        let usage = self.usage_of(body);
        let mut text = String::new();
        let mut calls = Vec::new();
        match self.api {
            LlmApi::Responses => {
                for item in body["output"].as_array().into_iter().flatten() {
                    let field = |k: &str| item[k].as_str().unwrap_or_default().to_owned();
                    match item["type"].as_str() {
                        Some("function_call") => calls.push(ToolCall {
                            call_id: field("call_id"),
                            name: field("name"),
                            arguments: field("arguments"),
                            custom: false,
                        }),
                        Some("custom_tool_call") => calls.push(ToolCall {
                            call_id: field("call_id"),
                            name: field("name"),
                            arguments: field("input"),
                            custom: true,
                        }),
                        Some("message") => {
                            for part in item["content"].as_array().into_iter().flatten() {
                                text.push_str(part["text"].as_str().unwrap_or_default());
                            }
                        }
                        _ => {}
                    }
                }
            }
            LlmApi::ChatCompletions => {
                let message = &body["choices"][0]["message"];
                text = message["content"].as_str().unwrap_or_default().to_owned();
                for call in message["tool_calls"].as_array().into_iter().flatten() {
                    calls.push(ToolCall {
                        call_id: call["id"].as_str().unwrap_or_default().to_owned(),
                        name: call["function"]["name"].as_str().unwrap_or_default().to_owned(),
                        arguments: call["function"]["arguments"].as_str().unwrap_or_default().to_owned(),
                        custom: false,
                    });
                }
            }
        }
        AgentTurn { text, calls, usage }
    }
}

#[async_trait]
impl Model for OpenAiModel {
    async fn structured(&self, req: &StructuredRequest) -> Result<ModelReply, ModelError> {
        let (url, body) = self.body(req);
        self.measured("phase_one", async {
            let reply = self.parse_reply(&self.post(&url, &body).await?)?;
            let usage = reply.usage;
            Ok((reply, usage))
        })
        .await
    }

    async fn agent_turn(&self, req: &AgentRequest<'_>) -> Result<AgentTurn, ModelError> {
        let (url, body) = self.agent_body(req);
        self.measured("phase_two", async {
            let turn = self.parse_turn(&self.post(&url, &body).await?);
            let usage = turn.usage;
            Ok((turn, usage))
        })
        .await
    }
}

fn without_url(e: reqwest::Error) -> String {
    let kind = if e.is_timeout() {
        "timed out"
    } else if e.is_connect() {
        "could not connect"
    } else {
        "transport error"
    };
    format!("{kind}: {}", e.without_url())
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::{HeaderMap, HeaderValue};

    #[test]
    fn failures_are_told_apart() {
        assert_eq!(classify(StatusCode::TOO_MANY_REQUESTS, ""), FailureClass::Transient);
        assert_eq!(classify(StatusCode::BAD_GATEWAY, "oops"), FailureClass::Transient);
        assert_eq!(classify(StatusCode::BAD_REQUEST, "{}"), FailureClass::Permanent);
        assert_eq!(classify(StatusCode::UNAUTHORIZED, "{}"), FailureClass::Permanent);
        assert_eq!(classify(StatusCode::NOT_FOUND, "{}"), FailureClass::Permanent);
        assert_eq!(
            classify(StatusCode::BAD_REQUEST, r#"{"error":{"code":"context_length_exceeded","message":"too long"}}"#),
            FailureClass::ContextLength
        );
    }

    #[test]
    fn retry_after_reads_seconds_and_dates() {
        let mut h = HeaderMap::new();
        h.insert(RETRY_AFTER, HeaderValue::from_static("2"));
        assert_eq!(retry_after(&h), Some(Duration::from_secs(2)));
        h.insert(RETRY_AFTER, HeaderValue::from_static("Wed, 21 Oct 2015 07:28:00 GMT"));
        assert_eq!(retry_after(&h), Some(Duration::ZERO));
        h.insert(RETRY_AFTER, HeaderValue::from_static("soon"));
        assert_eq!(retry_after(&h), None);
    }
}
