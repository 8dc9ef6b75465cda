//! `/v1/sessions`: open, inspect, append segments to and close sessions
//! (SPEC §2.2, §2.3).

use super::AppState;
use super::authorize::SessionWorkspace;
use super::error::{ApiError, STORAGE_FULL};
use super::extract::{JsonBody, OptionalJsonBody, QueryParams, TenantAuth, sha256_hex};
use super::layouts::find_layout;
use crate::domain::ids::{LayoutName, ROLLOUT_ID_ERROR, RolloutId, SessionId, WorkspaceName};
use crate::domain::memory_status::MemoryStatus;
use crate::domain::segment::{SegmentError, build_segment_redacted};
use crate::store::{
    AppendOutcome, AppendRequest, AuthenticatedKey, CloseOutcome, CreateSessionOutcome, IdempotencyClaim, JobKind,
    JobState, NewSession, SessionState,
};
use axum::Json;
use axum::extract::{Extension, Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::time::Duration;

const MAX_IDEMPOTENCY_KEY_LEN: usize = 255;
const MAX_CLOSE_WAIT_SECS: u64 = 300;

fn session_not_found(raw: &str) -> ApiError {
    ApiError::NotFound(format!("No session {raw}."))
}

fn parse_workspace(raw: &str) -> Result<WorkspaceName, ApiError> {
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

#[derive(Deserialize)]
pub struct SegmentQuery {
    workspace: Option<String>,
}

fn idempotency_claim(headers: &HeaderMap, scope: &str, raw_body: &[u8]) -> Result<Option<IdempotencyClaim>, ApiError> {
    let Some(value) = headers.get("idempotency-key") else {
        return Ok(None);
    };
    let key = value.to_str().map_err(|_| ApiError::InvalidRequest("Idempotency-Key must be visible ASCII".into()))?;
    if key.is_empty() || key.len() > MAX_IDEMPOTENCY_KEY_LEN {
        return Err(ApiError::InvalidRequest(format!(
            "Idempotency-Key must be 1 to {MAX_IDEMPOTENCY_KEY_LEN} characters"
        )));
    }
    let mut hashed = scope.as_bytes().to_vec();
    hashed.push(0);
    hashed.extend_from_slice(raw_body);
    Ok(Some(IdempotencyClaim { key: key.to_owned(), request_hash: sha256_hex(&hashed) }))
}

pub async fn append_segment(
    TenantAuth(tenant): TenantAuth,
    State(state): State<AppState>,
    Path((raw_session, raw_layout)): Path<(String, String)>,
    QueryParams(query): QueryParams<SegmentQuery>,
    found: Option<Extension<SessionWorkspace>>,
    headers: HeaderMap,
    body: JsonBody,
) -> Result<axum::response::Response, ApiError> {
    let session_id = SessionId::parse(&raw_session).ok_or_else(|| {
        ApiError::InvalidRequest(format!(
            "session id must match ^[A-Za-z0-9][A-Za-z0-9._-]{{0,127}}$, got: {raw_session}"
        ))
    })?;
    // For a key with some workspaces only, the session must still be in the
    // one the authorization layer found when the append takes its lock.
    let workspace = match query.workspace.as_deref() {
        Some(raw) => Some(parse_workspace(raw)?),
        None => found.map(|Extension(SessionWorkspace(w))| w),
    };
    let (layout_name, layout) = find_layout(&state, tenant, &raw_layout).await?;
    let scope = format!("segment\0{session_id}\0{layout_name}\0{}", query.workspace.as_deref().unwrap_or(""));
    let claim = idempotency_claim(&headers, &scope, &body.raw)?;
    if layout.config.generate.is_none() {
        return Err(generation_disabled(&layout_name));
    }
    if !state.volumes.has_room() {
        return Err(ApiError::InsufficientStorage(STORAGE_FULL.into()));
    }
    // SPEC §4: with `at_ingest`, the stored line itself carries no secret.
    let redactor = layout.config.redaction.at_ingest.then(|| layout.redactor());
    let mut redacted = crate::domain::redact::Counts::new();
    let segment = build_segment_redacted(body.value, chrono::Utc::now(), redactor.as_deref(), &mut redacted).map_err(
        |e| match e {
            SegmentError::RolloutId(_) => ApiError::InvalidRolloutId(ROLLOUT_ID_ERROR.into()),
            SegmentError::Unparseable(detail) => ApiError::InvalidSegment { status: StatusCode::BAD_REQUEST, detail },
            SegmentError::Invalid(detail) => {
                ApiError::InvalidSegment { status: StatusCode::UNPROCESSABLE_ENTITY, detail }
            }
        },
    )?;
    crate::metrics::redactions("ingest", &redacted);
    let bytes = segment.line.len();
    let cited = segment.cited.clone();
    let limits = super::limits::effective_limits(&state, tenant).await?;
    let outcome = state
        .appends
        .append(AppendRequest {
            tenant_id: tenant,
            session_id: session_id.clone(),
            workspace,
            layout_name,
            layout,
            segment,
            idempotency: claim,
            max_open_sessions: limits.open_sessions.filter(|n| *n > 0),
            max_storage_bytes: limits.storage_bytes.filter(|n| *n > 0),
        })
        .await?;
    match outcome {
        AppendOutcome::Appended { receipt, opened_session } => {
            crate::metrics::segment_ingested(bytes);
            state.caches.ingest.record(tenant, super::ingest_rate::current_minute());
            if opened_session {
                crate::metrics::session_opened();
            }
            // The request's own line says it at `info`; this is the hot path.
            tracing::debug!(
                session_id = %receipt.session_id, layout = %receipt.layout, rollout_id = %receipt.rollout_id,
                segment_index = receipt.segment_index, bytes, "segment appended"
            );
            count_citations(&state, tenant, &receipt, &cited).await;
            Ok((StatusCode::CREATED, Json(receipt)).into_response())
        }
        AppendOutcome::Replayed(first) => Ok((StatusCode::CREATED, Json(first)).into_response()),
        AppendOutcome::IdempotencyConflict => {
            Err(ApiError::IdempotencyConflict("This Idempotency-Key was used with another request.".into()))
        }
        AppendOutcome::SessionClosed(s) => Err(ApiError::SessionClosed(format!(
            "Session {session_id} is {}; open a new session for further segments.",
            s.as_str()
        ))),
        AppendOutcome::WorkspaceMismatch(actual) => {
            Err(ApiError::IdempotencyConflict(format!("Session {session_id} belongs to workspace {actual}.")))
        }
        AppendOutcome::Forgetting(detail) => Err(ApiError::Forgetting(detail)),
        AppendOutcome::TooManyOpenSessions(limit) => Err(too_many_open(limit)),
        AppendOutcome::StorageQuota(limit) => Err(ApiError::QuotaExceeded(format!(
            "This tenant may keep {limit} bytes, and this segment of {bytes} bytes would pass that; \
             forget what is no longer needed or ask for a larger limit."
        ))),
    }
}

/// The rollouts an appended segment cites count as used by its session
/// (SPEC §2.10); best effort: the segment is already acknowledged.
async fn count_citations(
    state: &AppState,
    tenant: uuid::Uuid,
    receipt: &crate::store::SegmentReceipt,
    cited: &[crate::domain::ids::RolloutId],
) {
    if cited.is_empty() {
        return;
    }
    let counted = state
        .store
        .record_memory_uses(tenant, &receipt.workspace, &receipt.layout, &receipt.session_id, cited, chrono::Utc::now())
        .await;
    if let Err(e) = counted {
        tracing::warn!(error = %crate::error_chain(&e), "counting a segment's citations failed");
    }
}

fn too_many_open(limit: u64) -> ApiError {
    ApiError::QuotaExceeded(format!("This tenant may have {limit} open sessions; close one before opening another."))
}

fn generation_disabled(layout: &crate::domain::ids::LayoutName) -> ApiError {
    ApiError::GenerationDisabled(format!("Layout {layout} has generate: null; it only reads memory."))
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
