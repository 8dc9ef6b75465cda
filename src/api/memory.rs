//! The read side of a workspace's memory: the phase-two selection and run
//! history (for dashboards), the memory files, and the instructions agent
//! runtimes inject into their next run (SPEC §2.4, §2.5).

use super::AppState;
use super::error::ApiError;
use super::extract::page_of;
use super::extract::{QueryParams, TenantAuth};
use super::layouts::find_layout;
use crate::domain::ids::{LayoutName, WorkspaceName};
use crate::domain::layout::ValidLayout;
use crate::domain::page::{Listing, PageCursor};
use crate::pipeline::read::{ReadAsks, render_instructions};
use crate::store::{FileAtRun, PhaseTwoRun};
use crate::workspace::confine;
use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::path::PathBuf;

/// Before a read of a layout's memory files: a run whose publish was
/// committed but is not yet wholly renamed into place (its writer is in the
/// middle, or died there) is completed, so that no read sees half a run.
pub(crate) async fn settle_publishes(
    state: &AppState,
    tenant: uuid::Uuid,
    workspace: &WorkspaceName,
    layout: &LayoutName,
) {
    settle_publishes_where(state, |s| {
        s.tenant == tenant && s.workspace == workspace.as_str() && s.layout == layout.as_str()
    })
    .await;
}

/// A workspace's files to read, one generation of them while the result
/// is held; a publish of the layout under way on the volume is completed
/// first, so that no read sees half a run.
pub(crate) async fn readable_layout(
    state: &AppState,
    tenant: uuid::Uuid,
    workspace: &WorkspaceName,
    layout: &LayoutName,
) -> Result<crate::bucket::cache::ReadableWorkspace, ApiError> {
    settle_publishes(state, tenant, workspace, layout).await;
    Ok(state.volumes.readable(state.store.as_ref(), tenant, workspace).await?)
}

/// Completes, as a reader, the committed publishes `in_scope` accepts.
pub(crate) async fn settle_publishes_where(
    state: &AppState,
    in_scope: impl Fn(&crate::workspace::publish::PublishScope) -> bool,
) {
    let owner = crate::jobs::PublishOwner::Reader;
    crate::jobs::finish_pending_publishes(state.store.as_ref(), &state.publisher, in_scope, owner).await;
}

/// The tenant's workspace and layout named in the path; 404 for either unknown.
pub(super) async fn locate(
    state: &AppState,
    tenant: uuid::Uuid,
    raw_workspace: &str,
    raw_layout: &str,
) -> Result<(WorkspaceName, LayoutName, ValidLayout), ApiError> {
    let not_found = || ApiError::NotFound(format!("No workspace {raw_workspace}."));
    let workspace = WorkspaceName::parse(raw_workspace).ok_or_else(not_found)?;
    if !state.store.workspace_known(tenant, &workspace).await? {
        return Err(not_found());
    }
    let (layout_name, layout) = find_layout(state, tenant, raw_layout).await?;
    Ok((workspace, layout_name, layout))
}

pub async fn phase_two_selection(
    TenantAuth(tenant): TenantAuth,
    State(state): State<AppState>,
    Path((raw_workspace, raw_layout)): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    let (workspace, layout_name, _) = locate(&state, tenant, &raw_workspace, &raw_layout).await?;
    let document = state.store.phase_two_selection(tenant, &workspace, &layout_name).await?;
    document
        .map(Json)
        .ok_or_else(|| ApiError::NotFound("No phase two has succeeded for this layout in this workspace yet.".into()))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunsQuery {
    limit: Option<i64>,
    cursor: Option<String>,
}

pub async fn runs(
    TenantAuth(tenant): TenantAuth,
    State(state): State<AppState>,
    Path((raw_workspace, raw_layout)): Path<(String, String)>,
    QueryParams(query): QueryParams<RunsQuery>,
) -> Result<Json<RunPage>, ApiError> {
    let page = page_of(Listing::Runs, query.limit, query.cursor.as_deref())?;
    let (workspace, layout_name, _) = locate(&state, tenant, &raw_workspace, &raw_layout).await?;
    let rows = state.store.phase_two_runs(tenant, &workspace, &layout_name, &page).await?;
    let (runs, next_cursor) =
        page.finish(Listing::Runs, rows, |r| PageCursor { at: r.finished_at, key: r.run_id.to_string() });
    Ok(Json(RunPage { runs, next_cursor }))
}

/// A path inside the memory folder, refused if it could leave it.
pub(super) fn memory_file(root: &std::path::Path, memories_dir: &str, raw: &str) -> Option<PathBuf> {
    let relative = history_path(raw)?;
    let memories = confine(root, memories_dir).ok()?;
    confine(&memories, &relative).ok()
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileQuery {
    run_id: Option<String>,
}

/// A file's content type, by its extension.
fn content_type_of(path: &str) -> &'static str {
    match path.rsplit_once('.').map(|(_, ext)| ext) {
        Some("md") => "text/markdown; charset=utf-8",
        Some("json") => "application/json",
        _ => "text/plain; charset=utf-8",
    }
}

fn file_response(path: &str, bytes: Vec<u8>) -> Response {
    let mut response = (StatusCode::OK, bytes).into_response();
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type_of(path)));
    response
}

/// A path inside the memory folder as history records it; `None` if it
/// could leave the folder.
pub(super) use crate::tools::normalize as history_path;

pub async fn file(
    TenantAuth(tenant): TenantAuth,
    State(state): State<AppState>,
    Path((raw_workspace, raw_layout, raw_path)): Path<(String, String, String)>,
    QueryParams(query): QueryParams<FileQuery>,
) -> Result<Response, ApiError> {
    let run_id = query
        .run_id
        .as_deref()
        .map(|raw| {
            uuid::Uuid::parse_str(raw).map_err(|_| ApiError::InvalidRequest(format!("run_id is not a run id: {raw}")))
        })
        .transpose()?;
    let (workspace, layout_name, layout) = locate(&state, tenant, &raw_workspace, &raw_layout).await?;
    let not_found = || ApiError::NotFound(format!("No file {raw_path} in the memory folder."));
    if let Some(run_id) = run_id {
        let path = history_path(&raw_path).ok_or_else(not_found)?;
        return match state.store.file_after_run(tenant, &workspace, &layout_name, run_id, &path).await? {
            FileAtRun::Content(bytes) => Ok(file_response(&path, bytes)),
            FileAtRun::Absent => Err(ApiError::NotFound(format!("{path} did not exist right after run {run_id}."))),
            FileAtRun::Unrecorded => Err(ApiError::NotFound(format!(
                "No kept run changed {path}: its content after run {run_id} is not recorded."
            ))),
            FileAtRun::NotKept => {
                Err(ApiError::NotFound(format!("Run {run_id} is unknown here or its history is no longer kept.")))
            }
        };
    }
    let readable = readable_layout(&state, tenant, &workspace, &layout_name).await?;
    let path = memory_file(readable.root(), &layout.memories_dir.normalized, &raw_path).ok_or_else(not_found)?;
    let bytes = match tokio::fs::read(&path).await {
        Ok(bytes) => bytes,
        Err(e) if matches!(e.kind(), std::io::ErrorKind::NotFound | std::io::ErrorKind::IsADirectory) => {
            return Err(not_found());
        }
        Err(_) if path.is_dir() => return Err(not_found()),
        Err(e) => return Err(ApiError::internal(e)),
    };
    Ok(file_response(&raw_path, bytes))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InstructionsQuery {
    live_update: Option<String>,
}

pub async fn instructions(
    TenantAuth(tenant): TenantAuth,
    State(state): State<AppState>,
    Path((raw_workspace, raw_layout)): Path<(String, String)>,
    QueryParams(query): QueryParams<InstructionsQuery>,
) -> Result<Response, ApiError> {
    let live_update = match query.live_update.as_deref() {
        None => None,
        Some("true") => Some(true),
        Some("false") => Some(false),
        Some(other) => {
            return Err(ApiError::InvalidRequest(format!("live_update must be true or false, got: {other}")));
        }
    };
    match memory_instructions(&state, tenant, &raw_workspace, &raw_layout, live_update).await? {
        Some(body) => Ok(Json(body).into_response()),
        None => Ok(StatusCode::NO_CONTENT.into_response()),
    }
}

/// What `GET …/instructions` answers (SPEC §2.5).
#[derive(Debug, Serialize, schemars::JsonSchema)]
#[schemars(rename = "Instructions")]
pub struct MemoryInstructions {
    pub instructions: String,
    pub memory_dir: String,
    pub truncated: bool,
}

/// A page of `GET …/runs`, newest first.
#[derive(Debug, Serialize, schemars::JsonSchema)]
#[schemars(rename = "RunList")]
pub struct RunPage {
    pub runs: Vec<PhaseTwoRun>,
    /// The next page's cursor; null on the last page.
    pub next_cursor: Option<String>,
}

/// The instructions for the next run (SPEC §2.5);
/// `None` when the layout does not read memory or its summary is missing or
/// blank. The route's and MCP's `memory_instructions` prompt.
pub(crate) async fn memory_instructions(
    state: &AppState,
    tenant: uuid::Uuid,
    raw_workspace: &str,
    raw_layout: &str,
    live_update: Option<bool>,
) -> Result<Option<MemoryInstructions>, ApiError> {
    let (workspace, layout_name, layout) = locate(state, tenant, raw_workspace, raw_layout).await?;
    let Some(read) = &layout.config.read else {
        return Ok(None);
    };
    let readable = readable_layout(state, tenant, &workspace, &layout_name).await?;
    let Some(path) = memory_file(readable.root(), &layout.memories_dir.normalized, "memory_summary.md") else {
        return Ok(None);
    };
    let summary = match tokio::fs::read(&path).await {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(ApiError::internal(e)),
    };
    // Published files are redacted already; a summary written before the
    // rules were set (or by the SDK) is redacted here, so no secret reaches a run.
    let redactor = layout.redactor();
    let summary = match std::str::from_utf8(&summary) {
        Ok(text) if !redactor.is_off() => redactor.redact_text(text, &mut Default::default()).into_bytes(),
        _ => summary,
    };
    let memory_dir = layout.config.memories_dir.as_str();
    let asks = ReadAsks {
        live_update: live_update.unwrap_or(read.live_update),
        citations: read.citations,
        search_by_meaning: state.embeddings.is_some(),
    };
    Ok(render_instructions(memory_dir, &summary, asks).map(|rendered| MemoryInstructions {
        instructions: rendered.text,
        memory_dir: memory_dir.to_owned(),
        truncated: rendered.truncated,
    }))
}
