//! The client of an OpenAI-compatible `POST {base}/embeddings` (OpenAI,
//! vLLM, Ollama, LiteLLM, TEI): texts in, unit vectors out, a batch a call,
//! with the model client's timeouts and failure classes (SPEC §2.10 "Search
//! by meaning").

use super::client::post_json;
use super::{FailureClass, ModelError};
use serde_json::{Value, json};
use std::time::Duration;

/// Texts one call embeds at most.
pub const BATCH_INPUTS: usize = 64;
/// The bytes of a passage that are embedded: its start, as much as an
/// answer shows of it. Small embedding models read 256 to 512 tokens, and
/// some endpoints (TEI, vLLM) refuse a longer input instead of cutting it.
pub const MAX_INPUT_BYTES: usize = 2_000;

/// What of `text` an embedding is made of: its first [`MAX_INPUT_BYTES`], cut at a character.
pub fn sent_input(text: &str) -> &str {
    crate::tools::read::cut_at_char(text, MAX_INPUT_BYTES)
}

/// What a call gave back: one unit vector an input, in order.
#[derive(Debug, Clone, PartialEq)]
pub struct Embedded {
    pub vectors: Vec<Vec<f32>>,
    /// As the endpoint counted them; estimated (a token per four bytes)
    /// when it does not say.
    pub tokens: u64,
}

/// An embeddings endpoint and the model it is asked for.
pub struct EmbeddingsClient {
    http: reqwest::Client,
    url: String,
    api_key: String,
    model: String,
}

impl EmbeddingsClient {
    pub fn new(base_url: &str, model: &str, api_key: &str, timeout: Duration) -> Result<Self, reqwest::Error> {
        let http = reqwest::Client::builder().timeout(timeout).connect_timeout(Duration::from_secs(10)).build()?;
        let url = format!("{}/embeddings", base_url.trim_end_matches('/'));
        Ok(Self { http, url, api_key: api_key.to_owned(), model: model.to_owned() })
    }

    /// The model's name: vectors of another model are not comparable.
    pub fn model(&self) -> &str {
        &self.model
    }

    /// One call for at most [`BATCH_INPUTS`] texts, each cut to [`MAX_INPUT_BYTES`].
    pub async fn embed(&self, inputs: &[&str], purpose: &'static str) -> Result<Embedded, ModelError> {
        let inputs: Vec<&str> = inputs.iter().map(|t| sent_input(t)).collect();
        let started = std::time::Instant::now();
        let body = json!({"model": self.model, "input": inputs, "encoding_format": "float"});
        let result = match post_json(&self.http, &self.url, &self.api_key, &body).await {
            Ok(bytes) => parse_embeddings(&bytes, &inputs),
            Err(e) => Err(e),
        };
        let outcome = match &result {
            Ok(_) => "ok",
            Err(e) if e.class == FailureClass::Transient => "transient",
            Err(_) => "permanent",
        };
        let tokens = result.as_ref().map_or(0, |e| e.tokens);
        crate::metrics::embeddings_call(purpose, outcome, started.elapsed(), inputs.len(), tokens);
        result
    }
}

/// The answer's vectors in the inputs' order (by `index`), each scaled to
/// unit length so that a dot product is the cosine.
pub fn parse_embeddings(bytes: &[u8], inputs: &[&str]) -> Result<Embedded, ModelError> {
    let unusable = |why: &str| ModelError::permanent(format!("the embeddings answer is unusable: {why}"));
    let answer: Value = serde_json::from_slice(bytes).map_err(|_| unusable("not JSON"))?;
    let data = answer["data"].as_array().ok_or_else(|| unusable("no data array"))?;
    if data.len() != inputs.len() {
        return Err(unusable(&format!("{} vectors for {} inputs", data.len(), inputs.len())));
    }
    let mut vectors: Vec<Option<Vec<f32>>> = vec![None; inputs.len()];
    for (position, item) in data.iter().enumerate() {
        let index = item["index"].as_u64().map_or(position, |i| i as usize);
        let values = item["embedding"].as_array().ok_or_else(|| unusable("an item without an embedding array"))?;
        let vector: Option<Vec<f32>> =
            values.iter().map(|v| v.as_f64().map(|f| f as f32).filter(|f| f.is_finite())).collect();
        let vector = vector.filter(|v| !v.is_empty()).ok_or_else(|| unusable("an embedding that is not numbers"))?;
        let slot = vectors.get_mut(index).ok_or_else(|| unusable("an index past the inputs"))?;
        *slot = Some(unit(vector));
    }
    let vectors: Vec<Vec<f32>> =
        vectors.into_iter().collect::<Option<_>>().ok_or_else(|| unusable("an index twice"))?;
    if vectors.windows(2).any(|w| w[0].len() != w[1].len()) {
        return Err(unusable("vectors of different lengths"));
    }
    let estimated = || inputs.iter().map(|t| t.len().div_ceil(4) as u64).sum();
    let tokens = answer["usage"]["total_tokens"]
        .as_u64()
        .or_else(|| answer["usage"]["prompt_tokens"].as_u64())
        .unwrap_or_else(estimated);
    Ok(Embedded { vectors, tokens })
}

/// `v` scaled to length one (a zero vector stays zero).
pub fn unit(mut v: Vec<f32>) -> Vec<f32> {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 && norm.is_finite() {
        v.iter_mut().for_each(|x| *x /= norm);
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vectors_come_back_in_input_order_and_unit_length() {
        let body = br#"{"data":[{"index":1,"embedding":[0,3]},{"index":0,"embedding":[4,0]}],"usage":{"prompt_tokens":7,"total_tokens":7}}"#;
        let embedded = parse_embeddings(body, &["a", "b"]).unwrap();
        assert_eq!(embedded.vectors, vec![vec![1.0, 0.0], vec![0.0, 1.0]]);
        assert_eq!(embedded.tokens, 7);
        let no_usage = br#"{"data":[{"embedding":[1,1]}]}"#;
        assert_eq!(parse_embeddings(no_usage, &["12345678"]).unwrap().tokens, 2, "a token per four bytes");
    }

    #[test]
    fn an_answer_that_does_not_fit_the_inputs_is_refused() {
        for bad in [
            &br#"{"data":[{"embedding":[1]}]}"#[..],
            br#"{"data":[{"index":0,"embedding":[1]},{"index":0,"embedding":[1]}]}"#,
            br#"{"data":[{"embedding":[1]},{"embedding":[1,2]}]}"#,
            br#"{"data":[{"embedding":["x"]},{"embedding":[]}]}"#,
            br#"{"data":[{"embedding":[1e39]},{"embedding":[1]}]}"#,
            br#"{"data":[{"index":9,"embedding":[1]},{"embedding":[1]}]}"#,
            b"not json",
        ] {
            let refused = parse_embeddings(bad, &["a", "b"]).unwrap_err();
            assert_eq!(refused.class, FailureClass::Permanent, "{}", String::from_utf8_lossy(bad));
        }
        assert_eq!(unit(vec![0.0, 0.0]), vec![0.0, 0.0]);
    }
}
