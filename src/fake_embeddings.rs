//! The fake model's `POST /v1/embeddings` (SPEC §2.10's endpoint), for the
//! tests and the benchmark: deterministic vectors in which words of one
//! topic share a dimension, so a paraphrase ("which tool installs
//! dependencies") lands near what memory says ("the package manager is
//! pnpm") without sharing a word with it. Other words hash to a dimension
//! of their own; a few small words count for nothing.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};

/// Dimensions of a fake vector.
pub const DIMENSIONS: usize = 64;

/// Topics: each word of a group is the group's dimension.
const TOPICS: [&[&str]; 8] = [
    &["package", "packages", "manager", "pnpm", "npm", "yarn", "dependencies", "dependency", "install", "installs"],
    &["timezone", "zone", "utc", "berlin", "cet", "clock", "hours"],
    &["reviewer", "review", "reviews", "approve", "approves", "approval"],
    &["deploy", "deploys", "deployment", "release", "ship", "vpn", "production"],
    &["runner", "image", "ubuntu", "pinned", "pin"],
    &["tea", "coffee", "drink", "morning", "green"],
    &["canary", "secret", "forgotten"],
    &["editor", "vim", "emacs", "vscode", "ide"],
];
/// Words that say nothing of a topic.
const QUIET: [&str; 16] =
    ["the", "a", "an", "is", "are", "of", "to", "in", "which", "what", "do", "we", "our", "and", "for", "uses"];

#[derive(Default)]
pub(crate) struct EmbedState {
    /// Each call's inputs, in order.
    pub calls: Vec<Vec<String>>,
    /// Answer 503 to every call while set.
    pub failing: bool,
}

pub(crate) type Shared = Arc<Mutex<EmbedState>>;

/// The fake vector of `text` (unit length; zero for a text of quiet words).
pub fn vector(text: &str) -> Vec<f32> {
    use unicode_segmentation::UnicodeSegmentation;
    let mut v = vec![0.0f32; DIMENSIONS];
    for word in text.unicode_words().map(str::to_lowercase) {
        if QUIET.contains(&word.as_str()) {
            continue;
        }
        match TOPICS.iter().position(|topic| topic.contains(&word.as_str())) {
            Some(topic) => v[topic] += 1.0,
            None => {
                let hash =
                    word.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ b as u64).wrapping_mul(0x100_0000_01b3));
                v[TOPICS.len() + (hash % (DIMENSIONS - TOPICS.len()) as u64) as usize] += 0.5;
            }
        }
    }
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 {
        v.iter_mut().for_each(|x| *x /= norm);
    }
    v
}

pub(crate) async fn embed(State(state): State<Shared>, Json(body): Json<Value>) -> Response {
    let inputs: Vec<String> = match &body["input"] {
        Value::String(one) => vec![one.clone()],
        Value::Array(many) => many.iter().filter_map(|v| v.as_str().map(str::to_owned)).collect(),
        _ => {
            return (StatusCode::BAD_REQUEST, Json(json!({"error": {"message": "input is required"}}))).into_response();
        }
    };
    {
        let mut s = state.lock().unwrap();
        if s.failing {
            let error = json!({"error": {"message": "the embeddings model is overloaded", "type": "server_error"}});
            return (StatusCode::SERVICE_UNAVAILABLE, Json(error)).into_response();
        }
        s.calls.push(inputs.clone());
    }
    let tokens: usize = inputs.iter().map(|t| t.split_whitespace().count()).sum();
    let data: Vec<Value> = inputs
        .iter()
        .enumerate()
        .map(|(index, text)| json!({"object": "embedding", "index": index, "embedding": vector(text)}))
        .collect();
    Json(json!({"object": "list", "data": data, "model": body["model"],
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}))
    .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cosine(a: &str, b: &str) -> f32 {
        vector(a).iter().zip(vector(b)).map(|(x, y)| x * y).sum()
    }

    #[test]
    fn a_paraphrase_is_near_and_another_topic_is_far() {
        let near = cosine("which tool installs dependencies", "the package manager is pnpm");
        let far = cosine("which tool installs dependencies", "green tea in the morning");
        assert!(near > 0.6 && far < 0.2, "near {near}, far {far}");
        assert_eq!(vector("the a of").iter().sum::<f32>(), 0.0);
    }
}
