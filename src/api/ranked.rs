//! `memory/search?mode=…` (SPEC §2.10 "Search by meaning"): which search a
//! request asks for, and the three that rank passages — `ranked` (BM25 over
//! words), `semantic` (the cosine of embeddings) and `hybrid` (the two fused
//! by reciprocal rank) — a page at a time. Without an embeddings endpoint,
//! `semantic` and `hybrid` answer 409 `not_configured`.

use super::AppState;
use super::agent_memory::{self, CursorOf, MemorySearchPage, SearchParams};
use super::error::ApiError;
use super::extract::{QueryParams, TenantAuth};
use crate::domain::ids::sha256_hex;
use crate::store::IndexedLayout;
use crate::tools::passage_index::layout_passages;
use crate::tools::rank::{self, Candidates, Scored};
use crate::tools::read::Budget;
use crate::tools::search as lines;
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
        SearchMode::Passages(ranking) => {
            SearchAnswer::Passages(search(state, tenant, workspace, layout, params, ranking, HTTP_PASSAGES).await?)
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
    Passages(Ranking),
}

/// What ranks passages.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ranking {
    Words,
    Semantic,
    Hybrid,
}

impl Ranking {
    fn mode(self) -> &'static str {
        match self {
            Self::Words => "ranked",
            Self::Semantic => "semantic",
            Self::Hybrid => "hybrid",
        }
    }
}

/// Passages a page holds at most, and by default.
pub const MAX_PASSAGES: usize = 50;
const DEFAULT_PASSAGES: usize = 10;
/// An answer shows at most this much of a passage, cut at a line end.
const MAX_PASSAGE_BYTES: usize = 2000;
/// And at most this much of its heading.
const MAX_HEADING_BYTES: usize = 200;
/// A search by meaning waits this long for its query's embedding, then
/// ranks by words: a slow endpoint must not stall every search.
const QUERY_EMBEDDING_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);
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
    /// `semantic` and `hybrid`: passages searched had no vector yet (their
    /// layout's indexing is under way or failed and will be retried) and
    /// were ranked by their words; all of them when the query itself could
    /// not be embedded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub not_embedded: Option<u64>,
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
    /// How well it answers the query (BM25, cosine or fused rank; comparable within one answer).
    pub score: f64,
    /// Its text, at most 2,000 bytes, cut at a line end.
    pub text: String,
}

/// The search `params` ask for.
pub(crate) fn mode_of(params: &SearchParams) -> Result<SearchMode, ApiError> {
    let ranking = match params.mode.as_deref() {
        None | Some("substring") | Some("regex") => return Ok(SearchMode::Lines),
        Some("ranked") => Ranking::Words,
        Some("semantic") => Ranking::Semantic,
        Some("hybrid") => Ranking::Hybrid,
        Some(other) => {
            return Err(ApiError::InvalidRequest(format!(
                "mode is substring, regex, ranked, semantic or hybrid, got: {other:?}"
            )));
        }
    };
    if params.regex == Some(true) {
        return Err(ApiError::InvalidRequest(format!("mode={} ranks passages; it takes no regex.", ranking.mode())));
    }
    Ok(SearchMode::Passages(ranking))
}

/// Where a page starts: the rank after the last page's, for this query
/// over this folder.
#[derive(Serialize, serde::Deserialize)]
struct Position {
    next: usize,
    query: String,
}

/// What a cursor is bound to: the query, the folder searched and the mode.
fn digest_of(query: &str, dir: &str, ranking: Ranking) -> String {
    sha256_hex(format!("{}\n{dir}\n{query}", ranking.mode()).as_bytes())
}

/// Passages under `path` ranked as `ranking` asks, best first, as many a
/// page as `limit` and `budget` allow (one at least).
pub(crate) async fn search(
    state: &AppState,
    tenant: uuid::Uuid,
    workspace: &str,
    layout: &str,
    params: SearchParams,
    ranking: Ranking,
    budget: Budget,
) -> Result<RankedPage, ApiError> {
    let query = agent_memory::required_query(params.query)?;
    let limit = params.limit.unwrap_or(DEFAULT_PASSAGES);
    if !(1..=MAX_PASSAGES).contains(&limit) {
        return Err(ApiError::InvalidRequest(format!(
            "limit must be 1 to {MAX_PASSAGES} with mode={}.",
            ranking.mode()
        )));
    }
    if ranking != Ranking::Words && state.embeddings.is_none() {
        return Err(ApiError::NotConfigured(format!(
            "mode={} ranks by embeddings, and this server has no embeddings endpoint configured \
             (MEMORYD_EMBEDDINGS_BASE_URL and MEMORYD_EMBEDDINGS_MODEL); mode=ranked ranks by words.",
            ranking.mode()
        )));
    }
    let terms = rank::query_terms(&query, MAX_QUERY_WORDS).map_err(ApiError::InvalidRequest)?;
    let context = agent_memory::cursor_context(CursorOf::Ranked, tenant, workspace, layout);
    let (memory_root, dir, at, readable) =
        agent_memory::folder_at(state, tenant, workspace, layout, params.path.as_deref()).await?;
    let digest = digest_of(&query, &dir, ranking);
    let start = match params.cursor.as_deref() {
        None => 0,
        Some(raw) => {
            let position: Position = agent_memory::decode_cursor(state, &context, raw)?;
            if position.query != digest {
                return Err(ApiError::InvalidRequest(
                    "cursor is one of another query's (or folder's, or mode's) pages.".into(),
                ));
            }
            position.next
        }
    };
    let whole_layout = dir.is_empty();
    let cache = state.caches.passages.clone();
    let files = agent_memory::on_disk(move || layout_passages(Some(&cache), &memory_root, &dir)).await?;
    drop(readable);
    let candidates = Candidates::of(&files);
    let (scored, not_embedded) = match ranking {
        Ranking::Words => (candidates.by_words(&terms), None),
        _ => {
            let keep = start.saturating_add(limit);
            let asked = (query.as_str(), terms.as_slice(), whole_layout);
            let (ranked, not_embedded) = by_meaning(state, &at, &candidates, asked, ranking, keep).await?;
            (ranked, Some(not_embedded))
        }
    };
    let total = scored.len();
    let ranked = rank::best(scored, start.saturating_add(limit));
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
        (next < total).then(|| agent_memory::encode_cursor(state, &context, &Position { next, query: digest }));
    Ok(RankedPage { mode: ranking.mode(), matches, next_cursor, not_embedded })
}

/// `semantic` or `hybrid` over `candidates`: the passages with a vector by
/// their cosine with the query's, fused with the word ranking of all
/// (`hybrid`) or of those without one (`semantic`) as deep as a page
/// starting `keep` passages in needs; and how many had none.
async fn by_meaning<'a>(
    state: &AppState,
    at: &IndexedLayout,
    candidates: &Candidates<'a>,
    (query, terms, whole_layout): (&str, &[String], bool),
    ranking: Ranking,
    keep: usize,
) -> Result<(Vec<Scored<'a>>, u64), ApiError> {
    let client = state.embeddings.as_ref().expect("checked by the caller");
    let (index, vectors) =
        crate::meaning::layout_vectors(&state.store, &state.caches.vectors, at, client.model()).await?;
    let query_vector = match tokio::time::timeout(QUERY_EMBEDDING_TIMEOUT, client.embed(&[query], "query")).await {
        Ok(Ok(mut embedded)) => embedded.vectors.pop(),
        Ok(Err(e)) => {
            tracing::warn!(tenant_id = %at.tenant, error = %e, "embedding a query failed; ranked by words");
            None
        }
        Err(_) => {
            tracing::warn!(tenant_id = %at.tenant, "embedding a query timed out; ranked by words");
            None
        }
    };
    // A vector of another length (another model) counts as none.
    let dimensions = query_vector.as_ref().map_or(0, Vec::len);
    let resolved: Vec<Option<&[f32]>> = candidates
        .vectors(&vectors.by_digest)
        .into_iter()
        .map(|v| v.filter(|v| query_vector.is_none() || v.len() == dimensions))
        .collect();
    let missing = resolved.iter().filter(|v| v.is_none()).count() as u64;
    if missing > 0 && whole_layout && index.is_none_or(|i| !i.pending()) {
        // Published before vectors existed, or with another model: index it.
        state.store.mark_index_stale(at, chrono::Utc::now()).await?;
    }
    let Some(query_vector) = query_vector else {
        return Ok((candidates.by_words(terms), candidates.len() as u64));
    };
    let semantic = candidates.by_vector(&query_vector, &resolved);
    let depth = rank::FUSION_DEPTH.max(keep);
    let ranked = match ranking {
        Ranking::Hybrid => rank::fuse(vec![semantic, candidates.by_words(terms)], depth),
        _ if missing == 0 => semantic,
        _ => {
            let words = candidates.by_words(terms);
            let embedded: std::collections::HashSet<(&str, u64)> =
                semantic.iter().map(|v| (v.path, v.passage.line)).collect();
            let unembedded: Vec<Scored<'a>> =
                words.into_iter().filter(|s| !embedded.contains(&(s.path, s.passage.line))).collect();
            rank::fuse(vec![semantic, unembedded], depth)
        }
    };
    Ok((ranked, missing))
}

fn shown(scored: &Scored<'_>) -> PassageMatch {
    PassageMatch {
        path: scored.path.to_owned(),
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
