//! Appending segments (SPEC §2.2): one to a layout, or a batch naming each
//! segment's layout, all acknowledged or none. Both build their segments,
//! hand them to the ingest service as one append, and count what it took.

use super::AppState;
use super::error::{ApiError, STORAGE_FULL};
use super::extract::{JsonBody, QueryParams, TenantAuth, sha256_hex};
use super::layouts::find_layout;
use super::sessions::{parse_session_id, parse_workspace, too_many_open};
use crate::domain::ids::{LayoutName, ROLLOUT_ID_ERROR, RolloutId, SessionId, WorkspaceName};
use crate::domain::layout::ValidLayout;
use crate::domain::redact::Counts;
use crate::domain::segment::{SegmentError, build_segment_redacted};
use crate::store::{AnswerShape, AppendOutcome, AppendRequest, IdempotencyClaim, SegmentAppend, SegmentReceipt};
use axum::Json;
use axum::extract::{Extension, Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::Value;

const MAX_IDEMPOTENCY_KEY_LEN: usize = 255;

/// The most distinct rollouts a batch's citations count, per layout (a
/// single segment reads at most 1,000 ids, SPEC §2.10).
const MAX_CITED_PER_LAYOUT: usize = 1000;

#[derive(Deserialize)]
pub struct SegmentQuery {
    workspace: Option<String>,
}

/// Who appends where: the parts of a request both routes share.
struct Target {
    tenant: uuid::Uuid,
    session_id: SessionId,
    /// `?workspace=`, or for a key with some workspaces only the one the
    /// authorization layer found (the session must still be there when the
    /// append takes its lock).
    workspace: Option<WorkspaceName>,
    claim: Option<IdempotencyClaim>,
}

impl Target {
    fn of(
        tenant: uuid::Uuid,
        raw_session: &str,
        query: &SegmentQuery,
        found: Option<Extension<super::authorize::SessionWorkspace>>,
        headers: &HeaderMap,
        // What the key's hash covers besides the body and `?workspace=`.
        scope: &str,
        body: &JsonBody,
    ) -> Result<Self, ApiError> {
        let session_id = parse_session_id(raw_session)?;
        let workspace = match query.workspace.as_deref() {
            Some(raw) => Some(parse_workspace(raw)?),
            None => found.map(|Extension(super::authorize::SessionWorkspace(w))| w),
        };
        let scope = format!("{scope}\0{}", query.workspace.as_deref().unwrap_or(""));
        let claim = idempotency_claim(headers, &scope, &body.raw)?;
        Ok(Self { tenant, session_id, workspace, claim })
    }
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
    found: Option<Extension<super::authorize::SessionWorkspace>>,
    headers: HeaderMap,
    body: JsonBody,
) -> Result<Response, ApiError> {
    let session_id = parse_session_id(&raw_session)?;
    if let Some(raw) = query.workspace.as_deref() {
        parse_workspace(raw)?;
    }
    let (layout_name, layout) = find_layout(&state, tenant, &raw_layout).await?;
    let scope = format!("segment\0{session_id}\0{layout_name}");
    let target = Target::of(tenant, &raw_session, &query, found, &headers, &scope, &body)?;
    writable(&state, &layout_name, &layout)?;
    let mut redacted = Counts::new();
    let segment = build(layout_name, layout, body.value, &mut redacted)?;
    crate::metrics::redactions("ingest", &redacted);
    let answer = append(&state, target, vec![segment], AnswerShape::Single).await?;
    Ok((StatusCode::CREATED, Json(answer)).into_response())
}

pub async fn append_batch(
    TenantAuth(tenant): TenantAuth,
    State(state): State<AppState>,
    Path(raw_session): Path<String>,
    QueryParams(query): QueryParams<SegmentQuery>,
    found: Option<Extension<super::authorize::SessionWorkspace>>,
    headers: HeaderMap,
    body: JsonBody,
) -> Result<Response, ApiError> {
    let scope = format!("batch\0{}", parse_session_id(&raw_session)?);
    let target = Target::of(tenant, &raw_session, &query, found, &headers, &scope, &body)?;
    let raw_segments = batch_segments(body.value, state.config.quotas.max_batch_segments)?;
    let decision = super::limits::take_segments(&state, tenant, raw_segments.len()).await?;
    let mut layouts: Vec<(LayoutName, ValidLayout)> = Vec::new();
    let mut redacted = Counts::new();
    let mut segments = Vec::with_capacity(raw_segments.len());
    for (index, raw) in raw_segments.into_iter().enumerate() {
        let at = |error| at_segment(index, error);
        let (name, layout, value) = batch_layout(&state, tenant, &mut layouts, raw).await.map_err(at)?;
        writable(&state, &name, &layout).map_err(at)?;
        segments.push(build(name, layout, value, &mut redacted).map_err(at)?);
    }
    crate::metrics::redactions("ingest", &redacted);
    let answer = append(&state, target, segments, AnswerShape::Batch).await?;
    let mut response = (StatusCode::CREATED, Json(answer)).into_response();
    if let Some(decision) = decision {
        response.extensions_mut().insert(decision);
    }
    Ok(response)
}

/// A batch refused for its segment at `index`; a failure of memoryd's own
/// (or its database's, or its disk's) is no segment's and is left as it is.
fn at_segment(index: usize, error: ApiError) -> ApiError {
    match error {
        ApiError::Internal(_) | ApiError::Unavailable(_) | ApiError::InsufficientStorage(_) => error,
        error => ApiError::AtSegment { index, error: Box::new(error) },
    }
}

/// The batch's segments: `{"segments": [segment, …]}`, 1 to `max` of them.
fn batch_segments(body: Value, max: usize) -> Result<Vec<Value>, ApiError> {
    let shape = || ApiError::InvalidSegment {
        status: StatusCode::UNPROCESSABLE_ENTITY,
        detail: "A batch is {\"segments\": [segment, …]}, each segment naming its \"layout\".".into(),
    };
    let Value::Object(mut fields) = body else { return Err(shape()) };
    let Some(Value::Array(segments)) = fields.remove("segments") else { return Err(shape()) };
    if let Some(unknown) = fields.keys().next() {
        return Err(ApiError::InvalidSegment {
            status: StatusCode::UNPROCESSABLE_ENTITY,
            detail: format!("unknown field `{unknown}`: a batch has only `segments`"),
        });
    }
    if segments.is_empty() {
        return Err(ApiError::InvalidSegment {
            status: StatusCode::UNPROCESSABLE_ENTITY,
            detail: "A batch holds at least one segment.".into(),
        });
    }
    if segments.len() > max {
        return Err(ApiError::PayloadTooLarge(format!(
            "A batch holds at most {max} segments (MEMORYD_MAX_BATCH_SEGMENTS); this one has {}.",
            segments.len()
        )));
    }
    Ok(segments)
}

/// A batch segment's layout (looked up once a batch), and the segment
/// without its `layout` field.
async fn batch_layout(
    state: &AppState,
    tenant: uuid::Uuid,
    layouts: &mut Vec<(LayoutName, ValidLayout)>,
    raw: Value,
) -> Result<(LayoutName, ValidLayout, Value), ApiError> {
    let invalid =
        |detail: &str| ApiError::InvalidSegment { status: StatusCode::UNPROCESSABLE_ENTITY, detail: detail.to_owned() };
    let Value::Object(mut fields) = raw else { return Err(invalid("A segment must be a JSON object.")) };
    let raw_layout = match fields.shift_remove("layout") {
        Some(Value::String(name)) => name,
        Some(_) => return Err(invalid("layout must be a string")),
        None => return Err(invalid("A batch's segment names its layout: \"layout\" is missing.")),
    };
    let found = layouts.iter().find(|(name, _)| name.as_str() == raw_layout).cloned();
    let (name, layout) = match found {
        Some(found) => found,
        None => {
            let found = find_layout(state, tenant, &raw_layout).await?;
            layouts.push(found.clone());
            found
        }
    };
    Ok((name, layout, Value::Object(fields)))
}

/// A layout that takes segments, on a volume with room for them.
fn writable(state: &AppState, name: &LayoutName, layout: &ValidLayout) -> Result<(), ApiError> {
    if layout.config.generate.is_none() {
        return Err(ApiError::GenerationDisabled(format!("Layout {name} has generate: null; it only reads memory.")));
    }
    if !state.volumes.has_room() {
        return Err(ApiError::InsufficientStorage(STORAGE_FULL.into()));
    }
    Ok(())
}

/// One segment as stored: sanitised, with the key order of R-SEG-4, and
/// (SPEC §4, with `at_ingest`) carrying no secret.
fn build(
    name: LayoutName,
    layout: ValidLayout,
    value: Value,
    redacted: &mut Counts,
) -> Result<SegmentAppend, ApiError> {
    let redactor = layout.config.redaction.at_ingest.then(|| layout.redactor());
    let segment =
        build_segment_redacted(value, chrono::Utc::now(), redactor.as_deref(), redacted).map_err(|e| match e {
            SegmentError::RolloutId(_) => ApiError::InvalidRolloutId(ROLLOUT_ID_ERROR.into()),
            SegmentError::Unparseable(detail) => ApiError::InvalidSegment { status: StatusCode::BAD_REQUEST, detail },
            SegmentError::Invalid(detail) => {
                ApiError::InvalidSegment { status: StatusCode::UNPROCESSABLE_ENTITY, detail }
            }
        })?;
    Ok(SegmentAppend { layout_name: name, layout, segment })
}

/// Appends the segments as one, and answers as `shape` says: a receipt, or
/// the batch's receipts (a replay: the first answer again).
async fn append(
    state: &AppState,
    target: Target,
    segments: Vec<SegmentAppend>,
    shape: AnswerShape,
) -> Result<Value, ApiError> {
    let limits = super::limits::effective_limits(state, target.tenant).await?;
    let bytes: Vec<usize> = segments.iter().map(|s| s.segment.line.len()).collect();
    let cited: Vec<(LayoutName, Vec<RolloutId>)> =
        segments.iter().map(|s| (s.layout_name.clone(), s.segment.cited.clone())).collect();
    let request = AppendRequest {
        tenant_id: target.tenant,
        session_id: target.session_id.clone(),
        workspace: target.workspace,
        segments,
        answer: shape,
        idempotency: target.claim,
        max_open_sessions: limits.open_sessions.filter(|n| *n > 0),
        max_storage_bytes: limits.storage_bytes.filter(|n| *n > 0),
    };
    let refused = |index: usize, error: ApiError| match shape {
        AnswerShape::Single => error,
        AnswerShape::Batch => at_segment(index, error),
    };
    let session_id = &target.session_id;
    let (receipts, opened_session) = match state.appends.append(request).await? {
        AppendOutcome::Appended { receipts, opened_session } => (receipts, opened_session),
        AppendOutcome::Replayed(first) => return Ok(first),
        AppendOutcome::IdempotencyConflict => {
            return Err(ApiError::IdempotencyConflict("This Idempotency-Key was used with another request.".into()));
        }
        AppendOutcome::SessionClosed(s) => {
            let detail = format!("Session {session_id} is {}; open a new session for further segments.", s.as_str());
            return Err(refused(0, ApiError::SessionClosed(detail)));
        }
        AppendOutcome::WorkspaceMismatch(actual) => {
            let detail = format!("Session {session_id} belongs to workspace {actual}.");
            return Err(refused(0, ApiError::IdempotencyConflict(detail)));
        }
        AppendOutcome::Forgetting { detail, index } => return Err(refused(index, ApiError::Forgetting(detail))),
        AppendOutcome::TooManyOpenSessions(limit) => return Err(refused(0, too_many_open(limit))),
        AppendOutcome::StorageQuota { limit, index } => {
            let detail = format!(
                "This tenant may keep {limit} bytes, and this segment of {} bytes would pass that; \
                 forget what is no longer needed or ask for a larger limit.",
                bytes[index]
            );
            return Err(refused(index, ApiError::QuotaExceeded(detail)));
        }
    };
    counted(state, target.tenant, &receipts, &bytes, opened_session);
    count_citations(state, target.tenant, &receipts, cited).await;
    Ok(shape.answer(session_id, &receipts))
}

/// The metrics and this replica's ingest rate of appended segments.
fn counted(state: &AppState, tenant: uuid::Uuid, receipts: &[SegmentReceipt], bytes: &[usize], opened: bool) {
    for (receipt, bytes) in receipts.iter().zip(bytes) {
        crate::metrics::segment_ingested(*bytes);
        // The request's own line says it at `info`; this is the hot path.
        tracing::debug!(
            session_id = %receipt.session_id, layout = %receipt.layout, rollout_id = %receipt.rollout_id,
            segment_index = receipt.segment_index, bytes, "segment appended"
        );
    }
    state.caches.ingest.record(tenant, super::ingest_rate::current_minute(), receipts.len() as u64);
    if opened {
        crate::metrics::session_opened();
    }
}

/// The rollouts the appended segments cite count as used by their session
/// (SPEC §2.10), once a (session, rollout) pair, per layout; best effort:
/// the segments are already acknowledged.
async fn count_citations(
    state: &AppState,
    tenant: uuid::Uuid,
    receipts: &[SegmentReceipt],
    cited: Vec<(LayoutName, Vec<RolloutId>)>,
) {
    let Some(first) = receipts.first() else { return };
    let mut by_layout: Vec<(LayoutName, Vec<RolloutId>)> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for (layout, ids) in cited {
        for id in ids {
            let at = match by_layout.iter().position(|(l, _)| *l == layout) {
                Some(at) => at,
                None => {
                    by_layout.push((layout.clone(), Vec::new()));
                    by_layout.len() - 1
                }
            };
            if by_layout[at].1.len() < MAX_CITED_PER_LAYOUT && seen.insert((layout.clone(), id.clone())) {
                by_layout[at].1.push(id);
            }
        }
    }
    for (layout, ids) in by_layout {
        let counted = state
            .store
            .record_memory_uses(tenant, &first.workspace, &layout, &first.session_id, &ids, chrono::Utc::now())
            .await;
        if let Err(e) = counted {
            tracing::warn!(error = %crate::error_chain(&e), "counting a segment's citations failed");
        }
    }
}
