//! `memory/search?mode=…` (SPEC §2.10 "Search by meaning"): which search a
//! request asks for, and `mode=ranked`, the memory's passages ranked by BM25
//! (`tools/rank.rs`), a page at a time. `semantic` and `hybrid` rank by
//! embeddings, which this server has no endpoint for: they answer 409
//! `not_configured`.

use super::AppState;
use super::agent_memory::{self, CursorOf, MemorySearchPage, SearchParams};
use super::error::ApiError;
use super::extract::{QueryParams, TenantAuth};
use crate::domain::ids::sha256_hex;
use crate::tools::read::Budget;
use crate::tools::{rank, search as lines};
use axum::Json;
use axum::extract::{Path, State};
use serde::Serialize;

/// `GET …/memory/search`: lines, or passages by relevance, as `mode` asks.
pub async fn search_route(
    TenantAuth(tenant): TenantAuth,
    State(state): State<AppState>,
    Path((workspace, layout)): Path<(String, String)>,
    QueryParams(params): QueryParams<SearchParams>,
) -> Result<Json<SearchAnswer>, ApiError> {
    let (state, workspace, layout) = (&state, workspace.as_str(), layout.as_str());
    Ok(Json(match mode_of(&params)? {
        SearchMode::Lines => SearchAnswer::Lines(
            agent_memory::search_memory(state, tenant, workspace, layout, params, lines::HTTP_SEARCH).await?,
        ),
        SearchMode::Ranked => {
            SearchAnswer::Passages(search(state, tenant, workspace, layout, params, HTTP_PASSAGES).await?)
        }
    }))
}

/// What `memory/search` answers: matching lines, or passages by relevance.
#[derive(Debug, Serialize)]
#[serde(untagged)]
pub enum SearchAnswer {
    Lines(MemorySearchPage),
    Passages(RankedPage),
}

/// How a search finds: line by line, or passages ranked by relevance.
pub(crate) enum SearchMode {
    Lines,
    Ranked,
}

/// Passages a page holds at most, and by default.
pub const MAX_PASSAGES: usize = 50;
const DEFAULT_PASSAGES: usize = 10;
/// An answer shows at most this much of a passage, cut at a line end.
const MAX_PASSAGE_BYTES: usize = 2000;
/// And at most this much of its heading.
const MAX_HEADING_BYTES: usize = 200;
/// A query ranks by its first this many distinct words.
const MAX_QUERY_WORDS: usize = 64;
/// What an HTTP page holds at most (its passages' text, headings and paths).
const HTTP_PASSAGES: Budget = Budget { bytes: 256 * 1024, per_line: 0 };

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

/// Where a page starts: the rank after the last page's, for this query
/// over this folder.
#[derive(Serialize, serde::Deserialize)]
struct Position {
    next: usize,
    query: String,
}

/// What a cursor is bound to: the query and the folder searched.
fn digest_of(query: &str, dir: &str) -> String {
    sha256_hex(format!("{dir}\n{query}").as_bytes())
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
    let query = agent_memory::required_query(params.query)?;
    let limit = params.limit.unwrap_or(DEFAULT_PASSAGES);
    if !(1..=MAX_PASSAGES).contains(&limit) {
        return Err(ApiError::InvalidRequest(format!("limit must be 1 to {MAX_PASSAGES} with mode=ranked.")));
    }
    let context = agent_memory::cursor_context(CursorOf::Ranked, tenant, workspace, layout);
    let (memory_root, dir) = agent_memory::folder_at(state, tenant, workspace, layout, params.path.as_deref()).await?;
    let digest = digest_of(&query, &dir);
    let start = match params.cursor.as_deref() {
        None => 0,
        Some(raw) => {
            let position: Position = agent_memory::decode_cursor(state, &context, raw)?;
            if position.query != digest {
                return Err(ApiError::InvalidRequest("cursor is one of another query's (or folder's) pages.".into()));
            }
            position.next
        }
    };
    let ranked = agent_memory::on_disk(move || rank::rank(&memory_root, &dir, &query, MAX_QUERY_WORDS)).await?;
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
    PassageMatch {
        path: scored.path.clone(),
        line: scored.passage.line,
        end_line: scored.passage.end_line,
        heading: cut_at(&scored.passage.heading, MAX_HEADING_BYTES, false).to_owned(),
        score: (scored.score * 10_000.0).round() / 10_000.0,
        text: cut_at(&scored.passage.text, MAX_PASSAGE_BYTES, true).to_owned(),
    }
}

/// `text` in at most `max` bytes: at a line end when `at_line_end` and one
/// falls after its first line, else at a character boundary.
fn cut_at(text: &str, max: usize, at_line_end: bool) -> &str {
    if text.len() <= max {
        return text;
    }
    let cut = crate::tools::read::cut_at_char(text, max);
    match cut.rfind('\n').filter(|at| at_line_end && *at > 0) {
        Some(line_end) => &text[..line_end],
        None => cut,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_passage_is_cut_at_a_line_end_or_a_character_never_inside_one() {
        let text = format!("{}—\nrest", "x".repeat(1998));
        assert_eq!(cut_at(&text, MAX_PASSAGE_BYTES, true), "x".repeat(1998), "the dash straddles byte 2000");
        let no_line_end = "é".repeat(1500);
        assert_eq!(cut_at(&no_line_end, MAX_PASSAGE_BYTES, true).len(), 2000);
        let first_line_long = format!("\n{}", "y".repeat(3000));
        assert_eq!(
            cut_at(&first_line_long, MAX_PASSAGE_BYTES, true).len(),
            2000,
            "a newline at 0 is no line end to cut at"
        );
        assert_eq!(cut_at("short\ntext", MAX_PASSAGE_BYTES, true), "short\ntext");
        assert_eq!(cut_at(&"›".repeat(100), MAX_HEADING_BYTES, false).len(), 198);
    }
}
