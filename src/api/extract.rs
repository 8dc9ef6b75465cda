//! Extractors: the authenticated tenant, the admin token, JSON bodies and
//! query strings, each failing with a problem document.

use super::AppState;
use super::error::{ApiError, Credential};
use crate::domain::ids::constant_time_eq;
pub use crate::domain::ids::sha256_hex;
use crate::domain::page::{Listing, PageRequest};
use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Query, Request};
use axum::http::request::Parts;
use axum::http::{StatusCode, header};
use serde::de::DeserializeOwned;
use serde_json::Value;
use sha2::{Digest, Sha256};

fn bearer(parts: &Parts) -> Option<&str> {
    bearer_token(&parts.headers)
}

/// The token of an `Authorization: Bearer …` header.
pub(crate) fn bearer_token(headers: &axum::http::HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then_some(token.trim()).filter(|t| !t.is_empty())
}

/// The tenant of the request's API key, as the authorization layer checked
/// it: the only source of tenant ids.
pub struct TenantAuth(pub uuid::Uuid);

impl FromRequestParts<AppState> for TenantAuth {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &AppState) -> Result<Self, ApiError> {
        let key = parts.extensions.get::<crate::store::AuthenticatedKey>();
        key.map(|k| TenantAuth(k.tenant_id)).ok_or_else(|| ApiError::internal("a tenant route declared no key access"))
    }
}

/// `given` is the configured admin token (never, when none is configured).
pub(crate) fn is_admin_token(state: &AppState, given: &str) -> bool {
    // Digests have one length whatever the token's, so the comparison tells
    // nothing about the token's length either.
    state.config.admin_token.as_deref().is_some_and(|expected| {
        constant_time_eq(&Sha256::digest(given.as_bytes()), &Sha256::digest(expected.as_bytes()))
    })
}

/// `Bearer <MEMORYD_ADMIN_TOKEN>`; with no token configured the admin API
/// does not exist.
pub struct AdminAuth;

impl FromRequestParts<AppState> for AdminAuth {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        if state.config.admin_token.is_none() {
            return Err(ApiError::NotFound(
                "The admin API is off: this memoryd was started without MEMORYD_ADMIN_TOKEN.".into(),
            ));
        }
        // Guesses are throttled per address, as console sign-ins are.
        let peer = parts.extensions.get::<axum::extract::ConnectInfo<std::net::SocketAddr>>().map(|c| c.0);
        let addr = super::client::Client::of(peer, &parts.headers).addr;
        let now = std::time::Instant::now();
        if let Some(wait) = addr.and_then(|a| state.caches.admin_failures.wait(a, now)) {
            let secs = wait.as_secs().max(1);
            return Err(ApiError::RateLimited(
                format!("Too many wrong admin tokens from this address; try again in {secs} s."),
                secs,
            ));
        }
        let given = bearer(parts).ok_or(ApiError::Unauthorized(Credential::AdminToken))?;
        if is_admin_token(state, given) {
            return Ok(AdminAuth);
        }
        // A wrong token is a guess: counted against the address.
        if let Some(addr) = addr {
            state.caches.admin_failures.failed(addr, now);
        }
        Err(ApiError::Unauthorized(Credential::AdminToken))
    }
}

/// A JSON body kept as raw bytes (for idempotency hashing) and as a value
/// whose key order is the client's. An empty body is 400 `invalid_json`.
pub struct JsonBody {
    pub raw: Bytes,
    pub value: Value,
}

/// A JSON body whose every field is optional: an empty body reads as `{}`.
pub struct OptionalJsonBody(pub JsonBody);

impl JsonBody {
    pub fn into_typed<T: DeserializeOwned>(self, to_error: fn(String) -> ApiError) -> Result<T, ApiError> {
        serde_json::from_value(self.value).map_err(|e| to_error(e.to_string()))
    }

    /// Reads the body within the body timeout, refusing at once one whose
    /// `Content-Length` is over `limit`. `None` for an empty body.
    async fn read(req: Request, state: &AppState, limit: usize) -> Result<Option<Self>, ApiError> {
        let too_large = || ApiError::PayloadTooLarge(format!("The body exceeds the limit of {limit} bytes."));
        let declared = req.headers().get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
        if declared.is_some_and(|len| len > limit as u64) {
            return Err(too_large());
        }
        let timeout = state.config.http.body_timeout;
        let raw = tokio::time::timeout(timeout, Bytes::from_request(req, state))
            .await
            .map_err(|_| {
                ApiError::RequestTimeout(format!("The body did not arrive within {} seconds.", timeout.as_secs()))
            })?
            .map_err(|rejection| {
                if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
                    too_large()
                } else {
                    ApiError::InvalidJson(format!("The body could not be read: {rejection}"))
                }
            })?;
        if raw.iter().all(u8::is_ascii_whitespace) {
            return Ok(None);
        }
        let value = serde_json::from_slice(&raw)
            .map_err(|e| ApiError::InvalidJson(format!("The body is not valid JSON: {e}")))?;
        Ok(Some(Self { raw, value }))
    }
}

impl FromRequest<AppState> for JsonBody {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, ApiError> {
        Self::read(req, state, state.config.quotas.max_segment_bytes)
            .await?
            .ok_or_else(|| ApiError::InvalidJson("The body is empty; it must be a JSON document.".into()))
    }
}

impl FromRequest<AppState> for OptionalJsonBody {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, ApiError> {
        let body = JsonBody::read(req, state, state.config.quotas.max_segment_bytes).await?;
        Ok(Self(body.unwrap_or_else(|| JsonBody { raw: Bytes::new(), value: Value::Object(Default::default()) })))
    }
}

/// A JSON body of a memory edit: at most a mebibyte (SPEC §2.10).
pub struct EditBody(pub JsonBody);

impl FromRequest<AppState> for EditBody {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, ApiError> {
        let limit = crate::domain::memory_edit::MAX_EDIT_BYTES.min(state.config.quotas.max_segment_bytes);
        JsonBody::read(req, state, limit)
            .await?
            .map(EditBody)
            .ok_or_else(|| ApiError::InvalidJson("The body is empty; it must be a JSON document.".into()))
    }
}

/// Query parameters; a malformed query is a 400 `invalid_request`.
pub struct QueryParams<T>(pub T);

impl<T: DeserializeOwned + Send> FromRequestParts<AppState> for QueryParams<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        Query::<T>::from_request_parts(parts, state)
            .await
            .map(|Query(q)| QueryParams(q))
            .map_err(|e| ApiError::InvalidRequest(e.body_text()))
    }
}

/// The page of `listing` a request asks for: a limit out of range or a
/// cursor that is not one of this listing's is a 400.
pub fn page_of(listing: Listing, limit: Option<i64>, cursor: Option<&str>) -> Result<PageRequest, ApiError> {
    PageRequest::parse(listing, limit, cursor).map_err(ApiError::InvalidRequest)
}
