//! Memory history over HTTP (SPEC §2.6): one run with the diff of every
//! file it changed.

use super::AppState;
use super::error::ApiError;
use super::extract::TenantAuth;
use super::memory::locate;
use crate::domain::diff::{Change, unified_diff};
use crate::store::{JobRecord, PhaseTwoRun, RunFileRecord};
use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde::Serialize;
use uuid::Uuid;

pub(crate) fn run_id(raw: &str) -> Result<Uuid, ApiError> {
    Uuid::parse_str(raw).map_err(|_| ApiError::NotFound(format!("No run {raw}.")))
}

async fn blob(state: &AppState, tenant: Uuid, hash: Option<&str>) -> Result<Option<Vec<u8>>, ApiError> {
    match hash {
        None => Ok(None),
        Some(hash) => state
            .store
            .history_blob(tenant, hash)
            .await?
            .map(Some)
            .ok_or_else(|| ApiError::internal(format!("history blob {hash} is missing"))),
    }
}

/// One file a run changed, with its diff (null: binary, over the diff's
/// size, or a forget's run, whose before must not be shown).
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct FileChange {
    /// Relative to memories_dir.
    pub path: String,
    pub change: Change,
    /// A unified diff; null for binary content, a side over 1 MiB, or a
    /// forget's run (which keeps no before-content).
    pub diff: Option<String>,
    pub before_bytes: Option<i64>,
    pub after_bytes: Option<i64>,
}

/// `GET …/runs/{run_id}`: the run, and what it changed while its history is kept.
#[derive(Debug, Serialize, schemars::JsonSchema)]
#[schemars(rename = "RunDetail")]
pub struct RunWithChanges {
    #[serde(flatten)]
    pub run: PhaseTwoRun,
    pub history_kept: bool,
    pub changes: Option<Vec<FileChange>>,
}

pub(crate) async fn change_of(state: &AppState, tenant: Uuid, file: &RunFileRecord) -> Result<FileChange, ApiError> {
    let path = file.path.clone();
    if file.before_omitted {
        // A forget's run: what the file held before must not be shown, nor a diff against it.
        let change = if file.after_hash.is_some() { Change::Modified } else { Change::Deleted };
        return Ok(FileChange { path, change, diff: None, before_bytes: None, after_bytes: file.after_bytes });
    }
    let before = blob(state, tenant, file.before_hash.as_deref()).await?;
    let after = blob(state, tenant, file.after_hash.as_deref()).await?;
    let change = Change::of(before.as_deref(), after.as_deref()).unwrap_or(Change::Modified);
    let diff = unified_diff(&file.path, before.as_deref(), after.as_deref());
    Ok(FileChange { path, change, diff, before_bytes: file.before_bytes, after_bytes: file.after_bytes })
}

/// `POST …/runs/{run_id}/restore`: queues a restore job (202 with it).
pub async fn restore(
    TenantAuth(tenant): TenantAuth,
    State(state): State<AppState>,
    Path((raw_workspace, raw_layout, raw_run)): Path<(String, String, String)>,
) -> Result<(StatusCode, Json<JobRecord>), ApiError> {
    let job = queue_restore(&state, tenant, &raw_workspace, &raw_layout, &raw_run).await?;
    Ok((StatusCode::ACCEPTED, Json(job)))
}

pub(crate) async fn queue_restore(
    state: &AppState,
    tenant: Uuid,
    raw_workspace: &str,
    raw_layout: &str,
    raw_run: &str,
) -> Result<JobRecord, ApiError> {
    let (workspace, layout_name, layout) = locate(state, tenant, raw_workspace, raw_layout).await?;
    let id = run_id(raw_run)?;
    let run = state
        .store
        .phase_two_run(tenant, &workspace, &layout_name, id)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("No run {raw_run}.")))?;
    let Some(job) = state.store.queue_restore(tenant, &run, &workspace, &layout_name, &layout).await? else {
        let detail = if state.store.forgotten_since(tenant, &workspace, &layout_name, id).await? {
            format!(
                "The history of run {id} is no longer kept: a forget of this layout since then dropped it, so that forgotten conversations cannot come back."
            )
        } else {
            format!(
                "The history of run {id} is no longer kept: only successful runs keep theirs, the newest {} of each layout.",
                state.config.jobs.history_runs
            )
        };
        return Err(ApiError::HistoryExpired(detail));
    };
    state.wake.notify_waiters();
    tracing::info!(job_id = %job.job_id, run_id = %id, "restore queued");
    Ok(job)
}

pub async fn run(
    TenantAuth(tenant): TenantAuth,
    State(state): State<AppState>,
    Path((raw_workspace, raw_layout, raw_run)): Path<(String, String, String)>,
) -> Result<Json<RunWithChanges>, ApiError> {
    let (workspace, layout_name, _) = locate(&state, tenant, &raw_workspace, &raw_layout).await?;
    let id = run_id(&raw_run)?;
    let run = state
        .store
        .phase_two_run(tenant, &workspace, &layout_name, id)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("No run {raw_run}.")))?;
    let changes = match state.store.run_files(tenant, id).await? {
        Some(files) => {
            let mut changes = Vec::with_capacity(files.len());
            for file in &files {
                changes.push(change_of(&state, tenant, file).await?);
            }
            Some(changes)
        }
        None => None,
    };
    Ok(Json(RunWithChanges { run, history_kept: changes.is_some(), changes }))
}
