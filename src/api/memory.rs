//! The read side of a workspace's memory: the phase-two selection and run
//! history (for dashboards), the memory files, and the instructions agent
//! runtimes inject into their next run (SPEC §2.4, §2.5).

use super::AppState;
use super::error::ApiError;
use super::extract::{QueryParams, TenantAuth};
use super::layouts::find_layout;
use crate::domain::ids::{LayoutName, WorkspaceName};
use crate::domain::layout::ValidLayout;
use crate::pipeline::read::render_instructions;
use crate::workspace::confine;
use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};
use std::path::{Component, PathBuf};

/// The tenant's workspace and layout named in the path; 404 for either unknown.
async fn locate(
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
}

pub async fn runs(
    TenantAuth(tenant): TenantAuth,
    State(state): State<AppState>,
    Path((raw_workspace, raw_layout)): Path<(String, String)>,
    QueryParams(query): QueryParams<RunsQuery>,
) -> Result<Json<Value>, ApiError> {
    let limit = query.limit.unwrap_or(100);
    if !(1..=1000).contains(&limit) {
        return Err(ApiError::InvalidRequest(format!("limit must be from 1 to 1000, got: {limit}")));
    }
    let (workspace, layout_name, _) = locate(&state, tenant, &raw_workspace, &raw_layout).await?;
    let runs = state.store.phase_two_runs(tenant, &workspace, &layout_name, limit).await?;
    Ok(Json(json!({"runs": runs})))
}

/// A path inside the memory folder, refused if it could leave it.
fn memory_file(root: &std::path::Path, memories_dir: &str, raw: &str) -> Option<PathBuf> {
    let relative = std::path::Path::new(raw);
    if relative.components().any(|c| !matches!(c, Component::Normal(_) | Component::CurDir)) {
        return None;
    }
    let memories = confine(root, memories_dir).ok()?;
    confine(&memories, raw).ok()
}

pub async fn file(
    TenantAuth(tenant): TenantAuth,
    State(state): State<AppState>,
    Path((raw_workspace, raw_layout, raw_path)): Path<(String, String, String)>,
) -> Result<Response, ApiError> {
    let (workspace, _, layout) = locate(&state, tenant, &raw_workspace, &raw_layout).await?;
    let not_found = || ApiError::NotFound(format!("No file {raw_path} in the memory folder."));
    let root = state.volumes.workspace_root(tenant, &workspace).map_err(|_| not_found())?;
    let path = memory_file(&root, &layout.memories_dir.normalized, &raw_path).ok_or_else(not_found)?;
    let bytes = match tokio::fs::read(&path).await {
        Ok(bytes) => bytes,
        Err(e) if matches!(e.kind(), std::io::ErrorKind::NotFound | std::io::ErrorKind::IsADirectory) => {
            return Err(not_found());
        }
        Err(_) if path.is_dir() => return Err(not_found()),
        Err(e) => return Err(ApiError::internal(e)),
    };
    let content_type = match path.extension().and_then(|e| e.to_str()) {
        Some("md") => "text/markdown; charset=utf-8",
        Some("json") => "application/json",
        _ => "text/plain; charset=utf-8",
    };
    let mut response = (StatusCode::OK, bytes).into_response();
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    Ok(response)
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
    let (workspace, _, layout) = locate(&state, tenant, &raw_workspace, &raw_layout).await?;
    let Some(read) = &layout.config.read else {
        return Ok(StatusCode::NO_CONTENT.into_response());
    };
    let root = state.volumes.workspace_root(tenant, &workspace).map_err(ApiError::internal)?;
    let Some(path) = memory_file(&root, &layout.memories_dir.normalized, "memory_summary.md") else {
        return Ok(StatusCode::NO_CONTENT.into_response());
    };
    let summary = match tokio::fs::read(&path).await {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(StatusCode::NO_CONTENT.into_response()),
        Err(e) => return Err(ApiError::internal(e)),
    };
    let memory_dir = layout.config.memories_dir.as_str();
    match render_instructions(memory_dir, &summary, live_update.unwrap_or(read.live_update)) {
        Some(rendered) => Ok(Json(json!({
            "instructions": rendered.text,
            "memory_dir": memory_dir,
            "truncated": rendered.truncated,
        }))
        .into_response()),
        None => Ok(StatusCode::NO_CONTENT.into_response()),
    }
}
