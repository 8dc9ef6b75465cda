//! Forgetting over HTTP (SPEC §2.7): a conversation, a workspace, a tenant.
//! Each answers 202 with the forget job that does it (the same job again
//! while it is queued or running).

use super::AppState;
use super::error::ApiError;
use super::extract::{AdminAuth, QueryParams, TenantAuth};
use super::memory::locate;
use crate::domain::ids::{RolloutId, WorkspaceName};
use crate::domain::job::ForgetMode;
use crate::store::{ForgetQueued, JobRecord};
use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde::Deserialize;
use uuid::Uuid;

type Accepted = (StatusCode, Json<JobRecord>);

fn accepted(state: &AppState, job: &JobRecord) -> Result<Accepted, ApiError> {
    state.wake.notify_waiters();
    Ok((StatusCode::ACCEPTED, Json(job.clone())))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ForgetQuery {
    mode: Option<String>,
}

pub(crate) fn forget_mode(raw: Option<&str>) -> Result<ForgetMode, ApiError> {
    match raw {
        None => Ok(ForgetMode::Scrub),
        Some(raw) => ForgetMode::parse(raw)
            .ok_or_else(|| ApiError::InvalidRequest(format!("mode must be scrub or rebuild, got: {raw}"))),
    }
}

/// `DELETE /v1/workspaces/{workspace}/layouts/{layout}/rollouts/{rollout_id}`.
pub async fn forget_rollout(
    TenantAuth(tenant): TenantAuth,
    State(state): State<AppState>,
    Path((raw_workspace, raw_layout, raw_rollout)): Path<(String, String, String)>,
    QueryParams(query): QueryParams<ForgetQuery>,
) -> Result<Accepted, ApiError> {
    let mode = forget_mode(query.mode.as_deref())?;
    let job = queue_forget_rollout(&state, tenant, &raw_workspace, &raw_layout, &raw_rollout, mode).await?;
    accepted(&state, &job)
}

pub(crate) async fn queue_forget_rollout(
    state: &AppState,
    tenant: Uuid,
    raw_workspace: &str,
    raw_layout: &str,
    raw_rollout: &str,
    mode: ForgetMode,
) -> Result<JobRecord, ApiError> {
    let (workspace, layout_name, layout) = locate(state, tenant, raw_workspace, raw_layout).await?;
    let not_found =
        || ApiError::NotFound(format!("Layout {layout_name} has no rollout {raw_rollout} in workspace {workspace}."));
    let rollout = RolloutId::parse(raw_rollout).ok_or_else(not_found)?;
    let queued = state.store.queue_forget_rollouts(tenant, &workspace, &layout_name, &layout, &[rollout], mode).await?;
    match queued {
        ForgetQueued::Job(job) => {
            tracing::info!(job_id = %job.job_id, mode = mode.as_str(), "forget of a rollout queued");
            Ok(*job)
        }
        ForgetQueued::UnknownRollout => Err(not_found()),
        ForgetQueued::SessionsOpen(sessions) => Err(ApiError::SessionOpen(format!(
            "Rollout {raw_rollout} is still in use by sessions that are not closed: {}. Close them first.",
            sessions.join(", ")
        ))),
    }
}

/// `DELETE /v1/workspaces/{workspace}`.
pub async fn forget_workspace(
    TenantAuth(tenant): TenantAuth,
    State(state): State<AppState>,
    Path(raw_workspace): Path<String>,
) -> Result<Accepted, ApiError> {
    let job = queue_forget_workspace(&state, tenant, &raw_workspace).await?;
    accepted(&state, &job)
}

pub(crate) async fn queue_forget_workspace(
    state: &AppState,
    tenant: Uuid,
    raw_workspace: &str,
) -> Result<JobRecord, ApiError> {
    let not_found = || ApiError::NotFound(format!("No workspace {raw_workspace}."));
    let workspace = WorkspaceName::parse(raw_workspace).ok_or_else(not_found)?;
    let job = state.store.queue_forget_workspace(tenant, &workspace).await?.ok_or_else(not_found)?;
    tracing::info!(job_id = %job.job_id, "forget of a workspace queued");
    Ok(job)
}

/// `DELETE /v1/admin/tenants/{tenant_id}`: its keys stop working at once.
pub async fn delete_tenant(
    _: AdminAuth,
    State(state): State<AppState>,
    Path(raw_tenant): Path<String>,
) -> Result<Accepted, ApiError> {
    let job = queue_forget_tenant(&state, &raw_tenant).await?;
    accepted(&state, &job)
}

pub(crate) async fn queue_forget_tenant(state: &AppState, raw_tenant: &str) -> Result<JobRecord, ApiError> {
    let not_found = || ApiError::NotFound(format!("No tenant {raw_tenant}."));
    let tenant = Uuid::parse_str(raw_tenant).map_err(|_| not_found())?;
    let job = state.store.queue_forget_tenant(tenant).await?.ok_or_else(not_found)?;
    // Revoked keys must stop working on this replica now, not in a cache's lifetime.
    state.caches.keys.clear();
    state.caches.layouts.remove(&tenant);
    tracing::info!(job_id = %job.job_id, tenant_id = %tenant, "forget of a tenant queued");
    Ok(job)
}
