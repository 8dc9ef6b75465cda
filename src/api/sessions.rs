//! `/v1/sessions`: open, inspect, append segments to and close sessions
//! (SPEC §2.2, §2.3).

use super::AppState;
use super::error::ApiError;
use super::extract::{OptionalJsonBody, QueryParams, TenantAuth};
use crate::domain::ids::{LayoutName, RolloutId, SessionId, WorkspaceName};
use crate::domain::memory_status::MemoryStatus;
use crate::store::{AuthenticatedKey, CloseOutcome, CreateSessionOutcome, JobKind, JobState, NewSession, SessionState};
use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::time::Duration;

const MAX_CLOSE_WAIT_SECS: u64 = 300;

fn session_not_found(raw: &str) -> ApiError {
    ApiError::NotFound(format!("No session {raw}."))
}

/// A session id in a path; 400 when it is not one.
pub(super) fn parse_session_id(raw: &str) -> Result<SessionId, ApiError> {
    SessionId::parse(raw).ok_or_else(|| {
        ApiError::InvalidRequest(format!("session id must match ^[A-Za-z0-9][A-Za-z0-9._-]{{0,127}}$, got: {raw}"))
    })
}

pub(super) fn parse_workspace(raw: &str) -> Result<WorkspaceName, ApiError> {
    WorkspaceName::parse(raw).ok_or_else(|| {
        ApiError::InvalidRequest(format!("workspace must match ^[A-Za-z0-9][A-Za-z0-9._-]{{0,127}}$, got: {raw}"))
    })
}

#[derive(Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "NewSession")]
pub(crate) struct OpenSession {
    #[schemars(with = "Option<crate::domain::ids::FileSafeId>")]
    session_id: Option<String>,
    #[schemars(with = "Option<crate::domain::ids::FileSafeId>")]
    workspace: Option<String>,
    metadata: Option<serde_json::Map<String, Value>>,
}

pub async fn create_session(
    key: AuthenticatedKey,
    State(state): State<AppState>,
    OptionalJsonBody(body): OptionalJsonBody,
) -> Result<impl IntoResponse, ApiError> {
    let open: OpenSession = body.into_typed(ApiError::InvalidRequest)?;
    let session_id = match open.session_id {
        Some(raw) => SessionId::parse(&raw).ok_or_else(|| {
            ApiError::InvalidRequest(format!("session_id must match ^[A-Za-z0-9][A-Za-z0-9._-]{{0,127}}$, got: {raw}"))
        })?,
        None => SessionId::generate(),
    };
    let workspace = match open.workspace {
        Some(raw) => parse_workspace(&raw)?,
        None => WorkspaceName::default_workspace(),
    };
    if !key.scope.workspaces.sees(workspace.as_str()) {
        return Err(super::authorize::outside(&workspace));
    }
    let tenant = key.tenant_id;
    let metadata = Value::Object(open.metadata.unwrap_or_default());
    let max_open = super::limits::effective_limits(&state, tenant).await?.open_sessions.filter(|n| *n > 0);
    let new = NewSession { session_id: session_id.clone(), workspace, metadata, max_open };
    let status = match state.store.create_session(tenant, &new).await? {
        CreateSessionOutcome::Created(_) => {
            crate::metrics::session_opened();
            StatusCode::CREATED
        }
        CreateSessionOutcome::Existing(existing) => {
            if existing.workspace != new.workspace || existing.metadata != new.metadata {
                return Err(ApiError::IdempotencyConflict(format!(
                    "Session {session_id} already exists with another workspace or metadata."
                )));
            }
            StatusCode::OK
        }
        CreateSessionOutcome::TooManyOpen(limit) => return Err(too_many_open(limit)),
        CreateSessionOutcome::Forgetting => {
            return Err(ApiError::Forgetting(format!(
                "Workspace {} is being forgotten; open a session there once that is done.",
                new.workspace
            )));
        }
    };
    let view =
        state.store.session_view(tenant, &session_id).await?.ok_or_else(|| session_not_found(session_id.as_str()))?;
    Ok((status, Json(view)))
}

pub async fn get_session(
    TenantAuth(tenant): TenantAuth,
    State(state): State<AppState>,
    Path(raw_id): Path<String>,
) -> Result<impl IntoResponse, ApiError> {
    let id = SessionId::parse(&raw_id).ok_or_else(|| session_not_found(&raw_id))?;
    let view = state.store.session_view(tenant, &id).await?.ok_or_else(|| session_not_found(&raw_id))?;
    Ok(Json(view))
}

pub(super) fn too_many_open(limit: u64) -> ApiError {
    ApiError::QuotaExceeded(format!("This tenant may have {limit} open sessions; close one before opening another."))
}

#[derive(Deserialize)]
pub struct CloseQuery {
    wait: Option<String>,
}

/// What a close answers: the session and the jobs it queued.
#[derive(Debug, Serialize, schemars::JsonSchema)]
#[schemars(rename = "CloseResult")]
pub struct CloseAnswer {
    pub session_id: SessionId,
    pub state: SessionState,
    pub memory_status: Option<MemoryStatus>,
    pub jobs: Vec<ClosedJob>,
}

/// One job of a close, as its answer names it.
#[derive(Debug, Serialize, schemars::JsonSchema)]
#[schemars(rename = "QueuedJob")]
pub struct ClosedJob {
    pub job_id: uuid::Uuid,
    pub kind: JobKind,
    pub layout: LayoutName,
    pub state: JobState,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rollout_id: Option<RolloutId>,
}

fn close_body(outcome: CloseOutcome) -> CloseAnswer {
    let jobs = outcome
        .jobs
        .into_iter()
        .map(|j| ClosedJob {
            job_id: j.job_id,
            kind: j.kind,
            layout: j.layout,
            state: j.state,
            rollout_id: j.rollout_id,
        })
        .collect();
    let session = outcome.session;
    CloseAnswer { session_id: session.session_id, state: session.state, memory_status: session.memory_status, jobs }
}

/// Closes a session (queuing its jobs) and, given `wait`, holds until it is
/// closed or the time passes.
pub(crate) async fn close_and_wait(
    state: &AppState,
    tenant: uuid::Uuid,
    raw_id: &str,
    wait: Option<Duration>,
) -> Result<CloseOutcome, ApiError> {
    let id = SessionId::parse(raw_id).ok_or_else(|| session_not_found(raw_id))?;
    let debounce = chrono::Duration::from_std(state.config.jobs.phase_two_debounce).unwrap_or(chrono::Duration::MAX);
    let mut outcome =
        state.store.close_session(tenant, &id, debounce).await?.ok_or_else(|| session_not_found(raw_id))?;
    if outcome.closed_now {
        crate::metrics::session_closed();
        // Phase-one jobs a close finds already done (their memory was made early).
        for _ in outcome.jobs.iter().filter(|j| j.kind == JobKind::PhaseOne && j.state == JobState::Succeeded) {
            crate::metrics::phase_one_reused();
        }
        state.wake.notify_waiters();
        state.events.committed();
    }
    if let Some(wait) = wait {
        let deadline = tokio::time::Instant::now() + wait;
        let shutdown = state.shutdown.clone();
        while outcome.session.state != SessionState::Closed && tokio::time::Instant::now() < deadline {
            // Jobs finished in this process wake us; another replica's are seen by polling.
            let step = tokio::time::Instant::now() + Duration::from_millis(200);
            tokio::select! {
                _ = tokio::time::sleep_until(step.min(deadline)) => {}
                _ = state.wake.notified() => {}
                _ = shutdown.cancelled() => break,
            }
            let view = state.store.session_view(tenant, &id).await?.ok_or_else(|| session_not_found(raw_id))?;
            outcome = CloseOutcome { session: view.session, jobs: view.jobs, closed_now: false };
        }
    }
    Ok(outcome)
}

pub async fn close_session(
    TenantAuth(tenant): TenantAuth,
    State(state): State<AppState>,
    Path(raw_id): Path<String>,
    QueryParams(query): QueryParams<CloseQuery>,
) -> Result<impl IntoResponse, ApiError> {
    let wait = match query.wait.as_deref() {
        None => None,
        Some(raw) => match raw.parse::<u64>() {
            Ok(s) if s <= MAX_CLOSE_WAIT_SECS => Some(Duration::from_secs(s)),
            _ => {
                return Err(ApiError::InvalidRequest(format!(
                    "wait must be a whole number of seconds from 0 to {MAX_CLOSE_WAIT_SECS}, got: {raw}"
                )));
            }
        },
    };
    let outcome = close_and_wait(&state, tenant, &raw_id, wait).await?;
    let status = if wait.is_some() && outcome.session.state == SessionState::Closed {
        StatusCode::OK
    } else {
        StatusCode::ACCEPTED
    };
    Ok((status, Json(close_body(outcome))))
}
