//! The one error type of the HTTP layer. Every failure leaves memoryd as an
//! RFC 9457 problem document with a stable `code`; internal details go to the
//! log, never to the client.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

/// The credential a route takes.
#[derive(Debug, Clone, Copy)]
pub enum Credential {
    TenantKey,
    AdminToken,
}

impl Credential {
    fn wanted(self) -> &'static str {
        match self {
            Self::TenantKey => {
                "This route takes a tenant's API key (Authorization: Bearer <api_key>); it was missing, revoked or not valid."
            }
            Self::AdminToken => {
                "This route takes the admin token (Authorization: Bearer <MEMORYD_ADMIN_TOKEN>); it was missing or not valid."
            }
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// Says which credential the route wants.
    #[error("{}", .0.wanted())]
    Unauthorized(Credential),
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    InvalidJson(String),
    #[error("{0}")]
    InvalidRolloutId(String),
    #[error("{detail}")]
    InvalidSegment { status: StatusCode, detail: String },
    #[error("{0}")]
    InvalidLayout(String),
    #[error("{0}")]
    InvalidRequest(String),
    /// Well formed, but asks for what cannot be had together (422).
    #[error("{0}")]
    UnprocessableRequest(String),
    #[error("{0}")]
    LayoutConflict(String),
    #[error("{0}")]
    PreconditionFailed(String),
    #[error("{0}")]
    GenerationDisabled(String),
    #[error("{0}")]
    SessionClosed(String),
    #[error("{0}")]
    IdempotencyConflict(String),
    #[error("{0}")]
    PayloadTooLarge(String),
    #[error("{0}")]
    JobNotFailed(String),
    #[error("{0}")]
    JobNotRetryable(String),
    #[error("{0}")]
    WebhookDisabled(String),
    #[error("{0}")]
    HistoryExpired(String),
    #[error("{0}")]
    SessionOpen(String),
    #[error("{0}")]
    Forgetting(String),
    #[error("{0}")]
    QuotaExceeded(String),
    /// The key lacks the permission, or may not reach that far.
    #[error("{0}")]
    Forbidden(String),
    #[error("{0}")]
    WorkspaceNotEmpty(String),
    #[error("{0}")]
    InvalidArchive(String),
    #[error("{0}")]
    InvalidWebhook(String),
    #[error("{0}")]
    InvalidPatch(String),
    #[error("{0}")]
    ReadOnly(String),
    #[error("{0}")]
    MemoryChanged(String),
    /// What the request needs is not set up on this server (an embeddings endpoint).
    #[error("{0}")]
    NotConfigured(String),
    #[error("{0}")]
    RequestTimeout(String),
    #[error("{0}")]
    Unavailable(String),
    /// This replica serves as many of these at once as it may.
    #[error("{0}")]
    Busy(String),
    /// Too many requests, or failed attempts: the client waits this many seconds.
    #[error("{0}")]
    RateLimited(String, u64),
    #[error("{0}")]
    InsufficientStorage(String),
    /// A batch was refused for one of its segments: that segment's error,
    /// and its place in the batch (the problem's `index`).
    #[error("segments[{index}]: {error}")]
    AtSegment { index: usize, error: Box<ApiError> },
    /// The cause goes to the log with its whole chain, never to the client.
    #[error("internal error")]
    Internal(#[source] Box<dyn std::error::Error + Send + Sync>),
}

impl ApiError {
    pub fn internal(err: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Self {
        Self::Internal(err.into())
    }

    pub(crate) fn status_and_code(&self) -> (StatusCode, &'static str) {
        match self {
            Self::Unauthorized(_) => (StatusCode::UNAUTHORIZED, "unauthorized"),
            Self::NotFound(_) => (StatusCode::NOT_FOUND, "not_found"),
            Self::InvalidJson(_) => (StatusCode::BAD_REQUEST, "invalid_json"),
            Self::InvalidRolloutId(_) => (StatusCode::BAD_REQUEST, "invalid_rollout_id"),
            Self::InvalidSegment { status, .. } => (*status, "invalid_segment"),
            Self::InvalidLayout(_) => (StatusCode::UNPROCESSABLE_ENTITY, "invalid_layout"),
            Self::InvalidRequest(_) => (StatusCode::BAD_REQUEST, "invalid_request"),
            Self::UnprocessableRequest(_) => (StatusCode::UNPROCESSABLE_ENTITY, "invalid_request"),
            Self::LayoutConflict(_) => (StatusCode::CONFLICT, "layout_conflict"),
            Self::PreconditionFailed(_) => (StatusCode::PRECONDITION_FAILED, "precondition_failed"),
            Self::GenerationDisabled(_) => (StatusCode::CONFLICT, "generation_disabled"),
            Self::SessionClosed(_) => (StatusCode::CONFLICT, "session_closed"),
            Self::IdempotencyConflict(_) => (StatusCode::CONFLICT, "idempotency_conflict"),
            Self::PayloadTooLarge(_) => (StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large"),
            Self::JobNotFailed(_) => (StatusCode::CONFLICT, "job_not_failed"),
            Self::JobNotRetryable(_) => (StatusCode::CONFLICT, "job_not_retryable"),
            Self::WebhookDisabled(_) => (StatusCode::CONFLICT, "webhook_disabled"),
            Self::HistoryExpired(_) => (StatusCode::CONFLICT, "history_expired"),
            Self::SessionOpen(_) => (StatusCode::CONFLICT, "session_open"),
            Self::Forgetting(_) => (StatusCode::CONFLICT, "forgetting"),
            Self::QuotaExceeded(_) => (StatusCode::FORBIDDEN, "quota_exceeded"),
            Self::Forbidden(_) => (StatusCode::FORBIDDEN, "forbidden"),
            Self::WorkspaceNotEmpty(_) => (StatusCode::CONFLICT, "workspace_not_empty"),
            Self::InvalidArchive(_) => (StatusCode::UNPROCESSABLE_ENTITY, "invalid_archive"),
            Self::InvalidWebhook(_) => (StatusCode::UNPROCESSABLE_ENTITY, "invalid_webhook"),
            Self::InvalidPatch(_) => (StatusCode::UNPROCESSABLE_ENTITY, "invalid_patch"),
            Self::ReadOnly(_) => (StatusCode::CONFLICT, "read_only"),
            Self::MemoryChanged(_) => (StatusCode::CONFLICT, "memory_changed"),
            Self::NotConfigured(_) => (StatusCode::CONFLICT, "not_configured"),
            Self::RequestTimeout(_) => (StatusCode::REQUEST_TIMEOUT, "request_timeout"),
            Self::Unavailable(_) => (StatusCode::SERVICE_UNAVAILABLE, "unavailable"),
            Self::Busy(_) | Self::RateLimited(..) => (StatusCode::TOO_MANY_REQUESTS, "rate_limited"),
            Self::InsufficientStorage(_) => (StatusCode::INSUFFICIENT_STORAGE, "insufficient_storage"),
            Self::AtSegment { error, .. } => error.status_and_code(),
            Self::Internal(_) => (StatusCode::INTERNAL_SERVER_ERROR, "internal"),
        }
    }
}

const RETRY_UNAVAILABLE_SECS: &str = "5";
const RETRY_STORAGE_SECS: &str = "30";

/// A problem document for `status`, used for errors raised outside the
/// handlers too (unknown routes, panics, timeouts, body limits).
pub fn problem(status: StatusCode, code: &str, detail: &str) -> Response {
    problem_at(status, code, detail, None)
}

/// [`problem`], naming the batch's segment it is about.
fn problem_at(status: StatusCode, code: &str, detail: &str, index: Option<usize>) -> Response {
    let mut response = (status, problem_document(status, code, detail, index)).into_response();
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(PROBLEM_CONTENT_TYPE));
    let headers = response.headers_mut();
    match status {
        StatusCode::UNAUTHORIZED => {
            headers.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        // Both pass by themselves: a database coming back, space being freed.
        StatusCode::SERVICE_UNAVAILABLE => {
            headers.insert(header::RETRY_AFTER, HeaderValue::from_static(RETRY_UNAVAILABLE_SECS));
        }
        StatusCode::INSUFFICIENT_STORAGE => {
            headers.insert(header::RETRY_AFTER, HeaderValue::from_static(RETRY_STORAGE_SECS));
        }
        // The rate limiter sets its own wait over this one.
        StatusCode::TOO_MANY_REQUESTS => {
            headers.insert(header::RETRY_AFTER, HeaderValue::from_static(RETRY_UNAVAILABLE_SECS));
        }
        _ => {}
    }
    response
}

pub const PROBLEM_CONTENT_TYPE: &str = "application/problem+json";

/// The RFC 9457 document every error answers with.
#[derive(Debug, serde::Serialize)]
pub struct ProblemDocument<'a> {
    #[serde(rename = "type")]
    pub problem_type: String,
    pub title: &'static str,
    pub status: u16,
    pub detail: &'a str,
    pub code: &'a str,
    /// The batch's segment the problem is about (SPEC §2.2 "Batches").
    #[serde(skip_serializing_if = "Option::is_none")]
    pub index: Option<usize>,
}

/// The problem document of `status`, as text.
pub fn problem_json(status: StatusCode, code: &str, detail: &str) -> String {
    problem_document(status, code, detail, None)
}

fn problem_document(status: StatusCode, code: &str, detail: &str, index: Option<usize>) -> String {
    let document = ProblemDocument {
        problem_type: format!("urn:memoryd:problem:{code}"),
        title: status.canonical_reason().unwrap_or("Error"),
        status: status.as_u16(),
        detail,
        code,
        index,
    };
    serde_json::to_string(&document).expect("a problem document serializes")
}

/// The code for a status that no handler chose (SPEC §8 plus the generic ones).
pub fn code_for_status(status: StatusCode) -> &'static str {
    match status.as_u16() {
        400 => "invalid_request",
        401 => "unauthorized",
        404 => "not_found",
        405 => "method_not_allowed",
        408 => "request_timeout",
        413 => "payload_too_large",
        415 => "unsupported_media_type",
        429 => "rate_limited",
        431 => "headers_too_large",
        503 => "unavailable",
        507 => "insufficient_storage",
        s if s >= 500 => "internal",
        _ => "invalid_request",
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, code) = self.status_and_code();
        if let Self::Internal(cause) = &self {
            tracing::error!(error = %crate::error_chain(cause.as_ref()), "request failed");
            return problem(status, code, "An internal error occurred; the request id identifies it in the log.");
        }
        let index = match &self {
            Self::AtSegment { index, .. } => Some(*index),
            _ => None,
        };
        let mut response = problem_at(status, code, &self.to_string(), index);
        if let Self::RateLimited(_, secs) = self {
            response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(secs.max(1)));
        }
        response
    }
}

impl From<crate::store::StoreError> for ApiError {
    fn from(err: crate::store::StoreError) -> Self {
        store_problem(&err).unwrap_or_else(|| Self::internal(err))
    }
}

/// The problem a store failure is for its caller; `None` for a fault of memoryd's own.
fn store_problem(err: &crate::store::StoreError) -> Option<ApiError> {
    use crate::store::Failure;
    match err.failure() {
        Failure::Unavailable => {
            tracing::warn!(error = %crate::error_chain(err), "the database is unavailable");
            Some(ApiError::Unavailable("The database is unavailable; try again shortly.".into()))
        }
        Failure::StorageFull => {
            tracing::warn!(error = %crate::error_chain(err), "the storage is full");
            Some(ApiError::InsufficientStorage(STORAGE_FULL.into()))
        }
        Failure::Other => None,
    }
}

impl From<crate::bucket::files::FilesError> for ApiError {
    fn from(err: crate::bucket::files::FilesError) -> Self {
        use crate::bucket::files::FilesError;
        match err {
            FilesError::Store(e) => e.into(),
            FilesError::Objects(e) => {
                tracing::warn!(error = %crate::error_chain(&e), "the object store is unavailable");
                ApiError::Unavailable("The object store is unavailable; try again shortly.".into())
            }
            other => Self::internal(other),
        }
    }
}

impl From<crate::bucket::rollouts::RolloutError> for ApiError {
    fn from(err: crate::bucket::rollouts::RolloutError) -> Self {
        use crate::bucket::rollouts::RolloutError;
        match err {
            RolloutError::Store(e) => e.into(),
            RolloutError::Objects(e) => crate::bucket::files::FilesError::Objects(e).into(),
            RolloutError::Copy(e) => Self::from_disk(e),
            other => Self::internal(other),
        }
    }
}

impl From<crate::ingest::IngestError> for ApiError {
    fn from(err: crate::ingest::IngestError) -> Self {
        use crate::ingest::IngestError;
        match err {
            IngestError::Store(e) => store_problem(&e).unwrap_or_else(|| Self::internal(e)),
            IngestError::Disk(e) if crate::store::io_failure(&e) == crate::store::Failure::StorageFull => {
                tracing::warn!(error = %e, "the data volume is full");
                Self::InsufficientStorage(STORAGE_FULL.into())
            }
            other => Self::internal(other),
        }
    }
}

impl ApiError {
    /// A failure to write the data volume: 507 when it is full (never a
    /// 500 for a full disk), else a fault of memoryd's own.
    pub fn from_disk(e: std::io::Error) -> Self {
        if crate::store::io_failure(&e) == crate::store::Failure::StorageFull {
            tracing::warn!(error = %e, "the data volume is full");
            return Self::InsufficientStorage(STORAGE_FULL.into());
        }
        Self::internal(e)
    }
}

pub const STORAGE_FULL: &str = "The data volume is full; nothing was written. Try again once space is freed.";
