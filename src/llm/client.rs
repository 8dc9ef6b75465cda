//! The client of any OpenAI-compatible endpoint: one POST per call, its
//! failures told apart, its latency and tokens counted. What differs between
//! the Responses API and Chat Completions is a [`WireApi`] each
//! (`responses.rs`, `chat.rs`).

use super::{AgentRequest, AgentTurn, FailureClass, Model, ModelError, ModelReply, StructuredRequest, TokenUsage};
use async_trait::async_trait;
use reqwest::StatusCode;
use reqwest::header::RETRY_AFTER;
use serde_json::Value;
use std::marker::PhantomData;
use std::time::Duration;

/// One wire format: its request bodies and how its replies read.
pub trait WireApi: Send + Sync + 'static {
    /// The API's name in metrics.
    const NAME: &'static str;
    /// The path under the base URL.
    const PATH: &'static str;
    fn structured_body(req: &StructuredRequest) -> Value;
    fn parse_structured(body: &[u8]) -> Result<ModelReply, ModelError>;
    fn agent_body(req: &AgentRequest<'_>) -> Value;
    fn parse_turn(body: &[u8]) -> Result<AgentTurn, ModelError>;
}

pub struct OpenAiModel<W> {
    http: reqwest::Client,
    url: String,
    api_key: String,
    wire: PhantomData<W>,
}

impl<W: WireApi> OpenAiModel<W> {
    pub fn new(base_url: &str, api_key: &str, timeout: Duration) -> Result<Self, reqwest::Error> {
        let http = reqwest::Client::builder().timeout(timeout).connect_timeout(Duration::from_secs(10)).build()?;
        let url = format!("{}/{}", base_url.trim_end_matches('/'), W::PATH);
        Ok(Self { http, url, api_key: api_key.to_owned(), wire: PhantomData })
    }

    /// A call with its outcome, latency and tokens counted for `phase`.
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
        crate::metrics::model_call(phase, W::NAME, outcome, started.elapsed(), usage.input_tokens, usage.output_tokens);
        result.map(|(value, _)| value)
    }

    async fn post(&self, body: &Value) -> Result<Vec<u8>, ModelError> {
        post_json(&self.http, &self.url, &self.api_key, body).await
    }
}

#[async_trait]
impl<W: WireApi> Model for OpenAiModel<W> {
    async fn structured(&self, req: &StructuredRequest) -> Result<ModelReply, ModelError> {
        let body = W::structured_body(req);
        self.measured("phase_one", async {
            let reply = W::parse_structured(&self.post(&body).await?)?;
            if reply.text.is_empty() {
                return Err(ModelError {
                    usage: reply.usage,
                    ..ModelError::permanent("the model answered with no text")
                });
            }
            let usage = reply.usage;
            Ok((reply, usage))
        })
        .await
    }

    async fn agent_turn(&self, req: &AgentRequest<'_>) -> Result<AgentTurn, ModelError> {
        let body = W::agent_body(req);
        self.measured("phase_two", async {
            let turn = W::parse_turn(&self.post(&body).await?)?;
            let usage = turn.usage;
            Ok((turn, usage))
        })
        .await
    }
}

/// One POST of `body` to an OpenAI-compatible endpoint; the answer's bytes,
/// or the failure told apart (the model client and the embeddings client).
pub(super) async fn post_json(
    http: &reqwest::Client,
    url: &str,
    api_key: &str,
    body: &Value,
) -> Result<Vec<u8>, ModelError> {
    let transient = |message: String| ModelError {
        class: FailureClass::Transient,
        message,
        retry_after: None,
        usage: TokenUsage::default(),
    };
    let response = http
        .post(url)
        .bearer_auth(api_key)
        .json(body)
        .send()
        .await
        .map_err(|e| transient(format!("model request failed: {}", without_url(e))))?;
    let status = response.status();
    let headers = response.headers().clone();
    let bytes = response
        .bytes()
        .await
        .map_err(|e| transient(format!("reading the model's answer failed: {}", without_url(e))))?;
    if !status.is_success() {
        let text = String::from_utf8_lossy(&bytes);
        return Err(ModelError {
            class: classify(status, &text),
            message: format!("model API answered {status}: {}", api_error_message(&text)),
            retry_after: retry_after(&headers),
            usage: TokenUsage::default(),
        });
    }
    Ok(bytes.to_vec())
}

/// The longest a model endpoint's `Retry-After` makes a job wait: the
/// header is the endpoint's word, and a huge one must neither overflow nor
/// park the job for years.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(3600);

/// `Retry-After` as seconds or as an HTTP date, at most [`MAX_RETRY_AFTER`];
/// a negative or unreadable one is ignored.
fn retry_after(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    let value = headers.get(RETRY_AFTER)?.to_str().ok()?.trim();
    if let Ok(secs) = value.parse::<f64>() {
        if secs.is_nan() || secs < 0.0 {
            return None;
        }
        return Some(Duration::try_from_secs_f64(secs).map_or(MAX_RETRY_AFTER, |d| d.min(MAX_RETRY_AFTER)));
    }
    let at = chrono::DateTime::parse_from_rfc2822(value).ok()?;
    let wait = (at.with_timezone(&chrono::Utc) - chrono::Utc::now()).to_std().unwrap_or(Duration::ZERO);
    Some(wait.min(MAX_RETRY_AFTER))
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
        for (huge, want) in
            [("1e20", Some(MAX_RETRY_AFTER)), ("inf", Some(MAX_RETRY_AFTER)), ("-5", None), ("NaN", None)]
        {
            h.insert(RETRY_AFTER, HeaderValue::from_static(huge));
            assert_eq!(retry_after(&h), want, "{huge}");
        }
        h.insert(RETRY_AFTER, HeaderValue::from_static("Fri, 01 Jan 9999 00:00:00 GMT"));
        assert_eq!(retry_after(&h), Some(MAX_RETRY_AFTER));
    }
}
