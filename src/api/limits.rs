//! Limits over HTTP (SPEC §2.9): an operator sets a tenant's, a tenant reads
//! its own, and every `/v1` request of a tenant with a request rate passes
//! its token bucket first (per replica), answering with the IETF RateLimit
//! fields.

use super::AppState;
use super::error::{ApiError, problem};
use super::extract::{AdminAuth, JsonBody, TenantAuth, bearer_token, sha256_hex, tenant_of_key_hash};
use crate::domain::limits::Limits;
use axum::Json;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderValue, Request, StatusCode, header};
use axum::middleware::Next;
use axum::response::Response;
use serde_json::Value;
use uuid::Uuid;

/// A tenant's limits in force: what an operator set over the server's defaults.
pub(crate) async fn effective_limits(state: &AppState, tenant: Uuid) -> Result<Limits, ApiError> {
    if let Some(limits) = state.caches.limits.get(&tenant) {
        return Ok(limits);
    }
    let set = state.store.tenant_limits(tenant).await?.unwrap_or_default();
    let limits = set.over(state.default_limits);
    state.caches.limits.put(tenant, limits);
    Ok(limits)
}

/// `GET /v1/limits`.
pub async fn own_limits(
    TenantAuth(tenant): TenantAuth,
    State(state): State<AppState>,
) -> Result<Json<Value>, ApiError> {
    Ok(Json(effective_limits(&state, tenant).await?.view()))
}

fn tenant_id(raw: &str) -> Result<Uuid, ApiError> {
    Uuid::parse_str(raw).map_err(|_| ApiError::NotFound(format!("No tenant {raw}.")))
}

/// `GET /v1/admin/tenants/{tenant_id}/limits`.
pub async fn tenant_limits(
    _: AdminAuth,
    State(state): State<AppState>,
    Path(raw): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let tenant = tenant_id(&raw)?;
    if !state.store.list_tenants().await?.iter().any(|t| t.tenant_id == tenant) {
        return Err(ApiError::NotFound(format!("No tenant {raw}.")));
    }
    Ok(Json(effective_limits(&state, tenant).await?.view()))
}

/// `PUT /v1/admin/tenants/{tenant_id}/limits`: the tenant's limits, whole;
/// a field left out takes the server's default, 0 is unlimited.
pub async fn set_limits(
    _: AdminAuth,
    State(state): State<AppState>,
    Path(raw): Path<String>,
    body: JsonBody,
) -> Result<Json<Value>, ApiError> {
    let tenant = tenant_id(&raw)?;
    let limits: Limits = body.into_typed(ApiError::InvalidRequest)?;
    limits.validate().map_err(ApiError::InvalidRequest)?;
    if !state.store.set_tenant_limits(tenant, &limits).await? {
        return Err(ApiError::NotFound(format!("No tenant {raw}.")));
    }
    // Other replicas see it within the cache's lifetime.
    state.caches.limits.remove(&tenant);
    tracing::info!(tenant_id = %tenant, "limits set");
    Ok(Json(limits.over(state.default_limits).view()))
}

/// Every `/v1` route but the admin API passes the tenant's bucket before its
/// handler runs. A request with no valid key passes on (its handler answers
/// 401); a tenant without a request rate has no bucket and no fields.
pub async fn limit_requests(State(state): State<AppState>, req: Request<Body>, next: Next) -> Response {
    let path = req.uri().path();
    if !path.starts_with("/v1/") || path.starts_with("/v1/admin/") {
        return next.run(req).await;
    }
    let tenant = match bearer_token(req.headers()) {
        Some(key) => tenant_of_key_hash(&state, &sha256_hex(key.as_bytes())).await.ok().flatten(),
        None => None,
    };
    let Some(tenant) = tenant else { return next.run(req).await };
    let rate = match effective_limits(&state, tenant).await {
        Ok(limits) => limits.request_rate(),
        Err(_) => None,
    };
    let Some(rate) = rate else { return next.run(req).await };
    let decision = state.caches.buckets.check(tenant, rate);
    let mut response = match decision.retry_after {
        None => next.run(req).await,
        Some(wait) => {
            let secs = wait.as_secs_f64().ceil().max(1.0) as u64;
            let mut refused = problem(
                StatusCode::TOO_MANY_REQUESTS,
                "rate_limited",
                &format!(
                    "This tenant may make {} requests a second (bursts of {}); try again in {secs} s.",
                    rate.per_second, rate.burst
                ),
            );
            refused.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(secs));
            refused
        }
    };
    let headers = response.headers_mut();
    if let Ok(policy) = HeaderValue::from_str(&format!("\"tenant\";q={};w=1", rate.burst)) {
        headers.insert("ratelimit-policy", policy);
    }
    let fields = format!("\"tenant\";r={};t={}", decision.remaining, decision.seconds_to_refill());
    if let Ok(value) = HeaderValue::from_str(&fields) {
        headers.insert("ratelimit", value);
    }
    response
}
