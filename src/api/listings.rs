//! Listings for operators and dashboards (SPEC §2.6): sessions, workspaces,
//! a layout's memory files and, for the admin, tenants. Listings that grow
//! without bound are paged by keyset cursors.

use super::AppState;
use super::error::ApiError;
use super::extract::{AdminAuth, QueryParams, TenantAuth, page_of};
use super::memory::locate;
use crate::domain::ids::WorkspaceName;
use crate::domain::page::{Listing, PageCursor};
use crate::store::{AuthenticatedKey, SessionFilter, SessionState, SessionSummary, TenantSummary, WorkspaceSummary};
use crate::workspace::{confine, folder_files};
use axum::Json;
use axum::extract::{Path, State};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use std::path::Path as FsPath;

/// A page of `GET /v1/sessions`.
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct SessionPage {
    pub sessions: Vec<SessionSummary>,
    /// The next page's cursor; null on the last page.
    pub next_cursor: Option<String>,
}

/// `GET /v1/workspaces`: every workspace the key sees (a tenant has few).
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct WorkspaceList {
    pub workspaces: Vec<WorkspaceSummary>,
}

/// `GET …/files`: the memory folder as it is now.
#[derive(Debug, Serialize, schemars::JsonSchema)]
#[schemars(rename = "FileList")]
pub struct MemoryFileList {
    pub files: Vec<MemoryFile>,
}

/// A page of the admin's `GET /v1/admin/tenants`.
#[derive(Debug, Serialize, schemars::JsonSchema)]
#[schemars(rename = "TenantList")]
pub struct TenantPage {
    pub tenants: Vec<TenantSummary>,
    /// The next page's cursor; null on the last page.
    pub next_cursor: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SessionsQuery {
    state: Option<String>,
    workspace: Option<String>,
    limit: Option<i64>,
    cursor: Option<String>,
}

pub async fn list_sessions(
    key: AuthenticatedKey,
    State(state): State<AppState>,
    QueryParams(query): QueryParams<SessionsQuery>,
) -> Result<Json<SessionPage>, ApiError> {
    let page = page_of(Listing::Sessions, query.limit, query.cursor.as_deref())?;
    let filter = SessionFilter {
        state: query
            .state
            .as_deref()
            .map(|raw| {
                SessionState::parse(raw).ok_or_else(|| {
                    ApiError::InvalidRequest(format!("state must be one of open, closing, closed, got: {raw}"))
                })
            })
            .transpose()?,
        workspace: query
            .workspace
            .as_deref()
            .map(|raw| {
                WorkspaceName::parse(raw)
                    .ok_or_else(|| ApiError::InvalidRequest(format!("workspace is not a valid workspace name: {raw}")))
            })
            .transpose()?,
        within: key.scope.workspaces.as_filter(),
    };
    let rows = state.store.list_sessions(key.tenant_id, &filter, &page).await?;
    let (sessions, next_cursor) = page
        .finish(Listing::Sessions, rows, |s| PageCursor { at: s.created_at, key: s.session_id.as_str().to_owned() });
    Ok(Json(SessionPage { sessions, next_cursor }))
}

pub async fn list_workspaces(
    key: AuthenticatedKey,
    State(state): State<AppState>,
) -> Result<Json<WorkspaceList>, ApiError> {
    let mut workspaces = state.store.workspace_activity(key.tenant_id).await?.summaries();
    workspaces.retain(|w| key.scope.workspaces.sees(&w.name));
    Ok(Json(WorkspaceList { workspaces }))
}

#[derive(Debug, Serialize, schemars::JsonSchema)]
pub(crate) struct MemoryFile {
    /// Relative to memories_dir.
    pub path: String,
    pub bytes: u64,
    pub modified_at: DateTime<Utc>,
}

fn memory_files(dir: &FsPath) -> std::io::Result<Vec<MemoryFile>> {
    folder_files(dir)?
        .into_iter()
        .map(|(path, meta)| Ok(MemoryFile { path, bytes: meta.len(), modified_at: meta.modified()?.into() }))
        .collect()
}

/// The file listing takes no parameters: it is the memory folder as it is
/// now. (A file as it was after a run is `GET …/files/{path}?run_id=`.)
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NoParams {}

pub async fn list_files(
    TenantAuth(tenant): TenantAuth,
    State(state): State<AppState>,
    Path((raw_workspace, raw_layout)): Path<(String, String)>,
    QueryParams(NoParams {}): QueryParams<NoParams>,
) -> Result<Json<MemoryFileList>, ApiError> {
    let (workspace, layout_name, layout) = locate(&state, tenant, &raw_workspace, &raw_layout).await?;
    let readable = super::memory::readable_layout(&state, tenant, &workspace, &layout_name).await?;
    let files = memory_files_of(readable.root(), &layout.memories_dir.normalized).await?;
    Ok(Json(MemoryFileList { files }))
}

/// The files of a layout's memory folder in a workspace (`root`).
pub(crate) async fn memory_files_of(root: &FsPath, memories_dir: &str) -> Result<Vec<MemoryFile>, ApiError> {
    let memories = confine(root, memories_dir).map_err(ApiError::internal)?;
    tokio::task::spawn_blocking(move || memory_files(&memories))
        .await
        .map_err(ApiError::internal)?
        .map_err(ApiError::internal)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TenantsQuery {
    limit: Option<i64>,
    cursor: Option<String>,
}

pub async fn list_tenants(
    _: AdminAuth,
    State(state): State<AppState>,
    QueryParams(query): QueryParams<TenantsQuery>,
) -> Result<Json<TenantPage>, ApiError> {
    let page = page_of(Listing::Tenants, query.limit, query.cursor.as_deref())?;
    let rows = state.store.list_tenants(&page).await?;
    let (tenants, next_cursor) =
        page.finish(Listing::Tenants, rows, |t| PageCursor { at: t.created_at, key: t.tenant_id.to_string() });
    Ok(Json(TenantPage { tenants, next_cursor }))
}
