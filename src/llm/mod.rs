//! Models: the OpenAI-compatible client (Responses API and Chat Completions)
//! and the failures it tells apart.

mod chat;
mod client;
pub mod embeddings;
mod responses;

pub use chat::ChatCompletions;
pub use client::{OpenAiModel, WireApi};
pub use responses::Responses;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::time::Duration;

/// One structured-output call: instructions, one user message, a strict schema.
#[derive(Debug, Clone)]
pub struct StructuredRequest {
    pub model: String,
    pub instructions: String,
    pub user_message: String,
    pub schema_name: String,
    pub schema: Value,
    pub reasoning_effort: Option<String>,
}

/// Tokens and calls a job's model use came to; stored as this JSON with the
/// job and its run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[schemars(inline)]
#[serde(default)]
pub struct TokenUsage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub calls: u64,
}

impl TokenUsage {
    pub fn add(&mut self, other: TokenUsage) {
        self.input_tokens += other.input_tokens;
        self.output_tokens += other.output_tokens;
        self.calls += other.calls;
    }
}

#[derive(Debug, Clone)]
pub struct ModelReply {
    /// The text the model answered with (for structured output: the JSON).
    pub text: String,
    pub usage: TokenUsage,
}

/// How a failed call should be treated by the job engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureClass {
    /// 408, 429, 5xx, timeouts, connection errors: worth another attempt soon.
    Transient,
    /// The prompt does not fit the model's context window: the next attempt
    /// sends a shorter rollout.
    ContextLength,
    /// 400, 401, 403, 404, output that is not the schema: retrying the same
    /// request will not help until something changes.
    Permanent,
}

#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct ModelError {
    pub class: FailureClass,
    pub message: String,
    pub retry_after: Option<Duration>,
    /// Tokens spent on a call that still failed (for example unusable output).
    pub usage: TokenUsage,
}

impl ModelError {
    pub fn permanent(message: impl Into<String>) -> Self {
        Self {
            class: FailureClass::Permanent,
            message: message.into(),
            retry_after: None,
            usage: TokenUsage::default(),
        }
    }
}

/// A function tool as the model API describes it.
#[derive(Debug, Clone)]
pub struct ToolSpec {
    pub name: &'static str,
    pub description: &'static str,
    pub parameters: Value,
}

/// A tool call the model made. `custom` marks a Responses API custom tool
/// call (raw text input), which the SDK's own tests use for `apply_patch`.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    pub call_id: String,
    pub name: String,
    pub arguments: String,
    pub custom: bool,
}

/// The conversation of an agent loop, in API-neutral form.
#[derive(Debug, Clone)]
pub enum AgentItem {
    User(String),
    Assistant(String),
    Call(ToolCall),
    Output { call: ToolCall, output: String },
}

#[derive(Debug, Clone)]
pub struct AgentRequest<'a> {
    pub model: String,
    pub instructions: String,
    pub items: &'a [AgentItem],
    pub tools: &'a [ToolSpec],
    pub reasoning_effort: Option<String>,
}

/// One model turn: tool calls to run, or (with none) the final answer.
#[derive(Debug, Clone)]
pub struct AgentTurn {
    pub text: String,
    pub calls: Vec<ToolCall>,
    pub usage: TokenUsage,
}

/// Where memory comes from: a model, or the built-in deterministic provider.
#[derive(Clone)]
pub enum Provider {
    Model(std::sync::Arc<dyn Model>),
    Extractive,
}

#[async_trait]
pub trait Model: Send + Sync + 'static {
    async fn structured(&self, request: &StructuredRequest) -> Result<ModelReply, ModelError>;
    async fn agent_turn(&self, request: &AgentRequest<'_>) -> Result<AgentTurn, ModelError>;
}
