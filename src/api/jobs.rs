//! `/v1/jobs`: the tenant's phase-one and phase-two jobs.

use super::AppState;
use super::error::ApiError;
use super::extract::page_of;
use super::extract::{QueryParams, TenantAuth};
use crate::domain::ids::{SessionId, WorkspaceName};
use crate::domain::page::{Listing, PageCursor};
use crate::store::AuthenticatedKey;
use crate::store::{JobFilter, JobKind, JobRecord, JobState, RetryOutcome};
use axum::Json;
use axum::extract::{Path, State};
use serde::{Deserialize, Serialize};

/// A page of `GET /v1/jobs`.
#[derive(Debug, Serialize, schemars::JsonSchema)]
#[schemars(rename = "JobList")]
pub struct JobPage {
    pub jobs: Vec<JobRecord>,
    /// The next page's cursor; null on the last page.
    pub next_cursor: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobQuery {
    state: Option<String>,
    kind: Option<String>,
    session_id: Option<String>,
    limit: Option<i64>,
    cursor: Option<String>,
}

fn parse_filter<T>(
    raw: Option<&str>,
    parse: fn(&str) -> Option<T>,
    what: &str,
    allowed: &str,
) -> Result<Option<T>, ApiError> {
    raw.map(|r| parse(r).ok_or_else(|| ApiError::InvalidRequest(format!("{what} must be one of {allowed}, got: {r}"))))
        .transpose()
}

pub async fn list_jobs(
    key: AuthenticatedKey,
    State(state): State<AppState>,
    QueryParams(query): QueryParams<JobQuery>,
) -> Result<Json<JobPage>, ApiError> {
    let filter = JobFilter {
        state: parse_filter(
            query.state.as_deref(),
            JobState::parse,
            "state",
            "queued, running, succeeded, skipped, failed",
        )?,
        kind: parse_filter(query.kind.as_deref(), JobKind::parse, "kind", "phase_one, phase_two, restore")?,
        session_id: query
            .session_id
            .as_deref()
            .map(|raw| {
                SessionId::parse(raw)
                    .ok_or_else(|| ApiError::InvalidRequest(format!("session_id is not a valid session id: {raw}")))
            })
            .transpose()?,
        within: key.scope.workspaces.as_filter(),
    };
    let tenant = key.tenant_id;
    let page = page_of(Listing::Jobs, query.limit, query.cursor.as_deref())?;
    let rows = state.store.list_jobs(tenant, &filter, &page).await?;
    let (jobs, next_cursor) =
        page.finish(Listing::Jobs, rows, |j| PageCursor { at: j.created_at, key: j.job_id.to_string() });
    settle_shown(&state, tenant, &jobs).await;
    Ok(Json(JobPage { jobs, next_cursor }))
}

/// A job id from the path; anything that is not a UUID names no job.
fn job_id(raw: &str) -> Result<uuid::Uuid, ApiError> {
    uuid::Uuid::parse_str(raw).map_err(|_| job_not_found(raw))
}

fn job_not_found(raw: &str) -> ApiError {
    ApiError::NotFound(format!("No job {raw}."))
}

pub async fn get_job(
    TenantAuth(tenant): TenantAuth,
    State(state): State<AppState>,
    Path(raw_id): Path<String>,
) -> Result<Json<JobRecord>, ApiError> {
    let job = state.store.get_job(tenant, job_id(&raw_id)?).await?.ok_or_else(|| job_not_found(&raw_id))?;
    settle_shown(&state, tenant, std::slice::from_ref(&job)).await;
    Ok(Json(job))
}

/// A job shown `succeeded` has its files where every reader finds them: a
/// publish its finish committed but its writer has not wholly renamed into
/// place (it is in the middle, or died there) is completed before the
/// answer, as a read of the memory completes it. In a bucket the
/// workspace's chores are done first too: its files placed at their plain
/// keys and the versions it replaced (a forget's among them) removed.
async fn settle_shown(state: &AppState, tenant: uuid::Uuid, jobs: &[JobRecord]) {
    let succeeded = || jobs.iter().filter(|j| j.state == JobState::Succeeded);
    let shown: std::collections::HashSet<uuid::Uuid> = succeeded().map(|j| j.job_id).collect();
    if shown.is_empty() {
        return;
    }
    super::memory::settle_publishes_where(state, |s| s.tenant == tenant && shown.contains(&s.job_id)).await;
    let Some(bucket) = state.volumes.bucket() else { return };
    let workspaces: std::collections::BTreeSet<&WorkspaceName> = succeeded().map(|j| &j.workspace).collect();
    for workspace in workspaces {
        if let Err(e) = bucket.do_chores(state.store.as_ref(), tenant, workspace).await {
            tracing::warn!(error = %crate::error_chain(&e), "a shown job's chores failed; the sweep will do them");
        }
    }
    // A forget shown done leaves no copy of what it replaced on this replica
    // (its worker drops them just after its finish; this may come first).
    if let Some(cache) = state.volumes.cache() {
        for job in succeeded().filter(|j| j.kind == JobKind::Forget) {
            cache.drop_shared_copies(tenant, Some(&job.workspace)).await;
        }
    }
}

/// Puts a `failed` job back in the queue with a fresh attempt budget.
pub async fn retry_job(
    TenantAuth(tenant): TenantAuth,
    State(state): State<AppState>,
    Path(raw_id): Path<String>,
) -> Result<Json<JobRecord>, ApiError> {
    Ok(Json(retry(&state, tenant, &raw_id).await?))
}

/// Queues a failed job again; 409 for a job that has not failed.
pub(crate) async fn retry(state: &AppState, tenant: uuid::Uuid, raw_id: &str) -> Result<JobRecord, ApiError> {
    let id = job_id(raw_id)?;
    match state.store.retry_job(tenant, id).await?.ok_or_else(|| job_not_found(raw_id))? {
        RetryOutcome::Requeued(job) => {
            state.wake.notify_waiters();
            tracing::info!(job_id = %id, "failed job queued again");
            Ok(*job)
        }
        RetryOutcome::NotFailed(current) => {
            Err(ApiError::JobNotFailed(format!("Only a failed job can be retried; this one is {}.", current.as_str())))
        }
        RetryOutcome::ArchiveGone => Err(ApiError::JobNotRetryable(
            "A failed import cannot be retried: its archive was removed when it failed. Upload the archive again \
             with POST /v1/workspaces/{workspace}/import."
                .to_owned(),
        )),
    }
}
