//! `memory/search?mode=…` (SPEC §2.10 "Search by meaning"): which search a
//! request asks for, and `mode=ranked`, the memory's passages ranked by BM25
//! (`tools/rank.rs`), a page at a time. `semantic` and `hybrid` rank by
//! embeddings, which this server has no endpoint for: they answer 409
//! `not_configured`.

use super::AppState;
use super::agent_memory::{self, CursorOf, SearchMode, SearchParams};
use super::error::ApiError;
use crate::domain::ids::sha256_hex;
use crate::tools::rank;
use crate::tools::read::Budget;
use serde::Serialize;

/// Passages a page holds at most, and by default.
pub const MAX_PASSAGES: usize = 50;
const DEFAULT_PASSAGES: usize = 10;
/// An answer shows at most this much of a passage, cut at a line end.
const MAX_PASSAGE_BYTES: usize = 2000;

/// A page of passages, best first.
#[derive(Debug, Serialize, schemars::JsonSchema)]
#[schemars(rename = "MemoryPassages")]
pub struct RankedPage {
    #[schemars(extend("enum" = ["ranked", "semantic", "hybrid"]))]
    pub mode: &'static str,
    pub matches: Vec<PassageMatch>,
    /// The next page's cursor; null on the last page.
    pub next_cursor: Option<String>,
}

/// One passage: a section of a memory file.
#[derive(Debug, Serialize, schemars::JsonSchema)]
#[schemars(rename = "MemoryPassage")]
pub struct PassageMatch {
    /// Relative to memories_dir.
    pub path: String,
    /// Its first line (1-based).
    pub line: u64,
    /// Its last line.
    pub end_line: u64,
    /// Its heading under its group's (`Task Group: ci › Task 2: pin the runner`); "" before a file's first.
    pub heading: String,
    /// How well it answers the query (BM25; comparable within one answer).
    pub score: f64,
    /// Its text, at most 2,000 bytes, cut at a line end.
    pub text: String,
}

/// The search `params` ask for; `semantic` and `hybrid` are refused here.
pub(crate) fn mode_of(params: &SearchParams) -> Result<SearchMode, ApiError> {
    match params.mode.as_deref() {
        None | Some("substring") | Some("regex") => Ok(SearchMode::Lines),
        Some("ranked") if params.regex == Some(true) => {
            Err(ApiError::InvalidRequest("mode=ranked ranks words; it takes no regex.".into()))
        }
        Some("ranked") => Ok(SearchMode::Ranked),
        Some(mode @ ("semantic" | "hybrid")) => Err(ApiError::NotConfigured(format!(
            "mode={mode} ranks by embeddings, and this server has no embeddings endpoint configured; \
             mode=ranked ranks by words."
        ))),
        Some(other) => Err(ApiError::InvalidRequest(format!(
            "mode is substring, regex, ranked, semantic or hybrid, got: {other:?}"
        ))),
    }
}

/// Where a page starts: the rank after the last page's, for this query.
#[derive(Serialize, serde::Deserialize)]
struct Position {
    next: usize,
    query: String,
}

/// `mode=ranked`: the passages under `path` that hold the query's words,
/// best first, as many a page as `limit` and `budget` allow (one at least).
pub(crate) async fn search(
    state: &AppState,
    tenant: uuid::Uuid,
    workspace: &str,
    layout: &str,
    params: SearchParams,
    budget: Budget,
) -> Result<RankedPage, ApiError> {
    let query =
        params.query.filter(|q| !q.is_empty()).ok_or_else(|| ApiError::InvalidRequest("query is required.".into()))?;
    let limit = params.limit.unwrap_or(DEFAULT_PASSAGES);
    if !(1..=MAX_PASSAGES).contains(&limit) {
        return Err(ApiError::InvalidRequest(format!("limit must be 1 to {MAX_PASSAGES} with mode=ranked.")));
    }
    let context = agent_memory::cursor_context(CursorOf::Ranked, tenant, workspace, layout);
    let digest = sha256_hex(query.as_bytes());
    let start = match params.cursor.as_deref() {
        None => 0,
        Some(raw) => {
            let position: Position = agent_memory::decode_cursor(state, &context, raw)?;
            if position.query != digest {
                return Err(ApiError::InvalidRequest("cursor is one of another query's pages.".into()));
            }
            position.next
        }
    };
    let (memory_root, dir) = agent_memory::folder_at(state, tenant, workspace, layout, params.path.as_deref()).await?;
    let ranked = agent_memory::on_disk(move || rank::rank(&memory_root, &dir, &query)).await?;
    let (mut matches, mut spent) = (Vec::new(), 0);
    for scored in ranked.iter().skip(start).take(limit) {
        let shown = shown(scored);
        let cost = budget.line(shown.text.len() + shown.heading.len() + shown.path.len());
        if !matches.is_empty() && spent + cost > budget.bytes {
            break;
        }
        spent += cost;
        matches.push(shown);
    }
    let next = start + matches.len();
    let next_cursor =
        (next < ranked.len()).then(|| agent_memory::encode_cursor(state, &context, &Position { next, query: digest }));
    Ok(RankedPage { mode: "ranked", matches, next_cursor })
}

fn shown(scored: &rank::Scored) -> PassageMatch {
    let text = &scored.passage.text;
    let mut end = text.len().min(MAX_PASSAGE_BYTES);
    if end < text.len() {
        end = text[..end].rfind('\n').unwrap_or_else(|| {
            let mut at = end;
            while !text.is_char_boundary(at) {
                at -= 1;
            }
            at
        });
    }
    PassageMatch {
        path: scored.path.clone(),
        line: scored.passage.line,
        end_line: scored.passage.end_line,
        heading: scored.passage.heading.clone(),
        score: (scored.score * 10_000.0).round() / 10_000.0,
        text: text[..end].to_owned(),
    }
}
