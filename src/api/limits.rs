//! Limits and usage over HTTP (SPEC §2.9): an operator sets a tenant's
//! limits, a tenant reads its own and what it used, and every `/v1` request
//! of a tenant with a request rate passes its token bucket first (per
//! replica), answering with the IETF RateLimit fields.

use super::AppState;
use super::error::ApiError;
use super::extract::QueryParams;
use super::extract::{AdminAuth, JsonBody, TenantAuth};
use crate::domain::limits::{Limits, LimitsView};
use crate::domain::usage::{UsageDay, day_view, fill_days, report_range};
use axum::Json;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderValue, Request};
use axum::middleware::Next;
use axum::response::IntoResponse;
use axum::response::Response;
use serde::{Deserialize, Serialize};
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
) -> Result<Json<LimitsView>, ApiError> {
    Ok(Json(effective_limits(&state, tenant).await?.view()))
}

/// A tenant the admin API names: 404 for one that does not exist.
async fn known_tenant(state: &AppState, raw: &str) -> Result<Uuid, ApiError> {
    let not_found = || ApiError::NotFound(format!("No tenant {raw}."));
    let tenant = Uuid::parse_str(raw).map_err(|_| not_found())?;
    if !state.store.tenant_exists(tenant).await? {
        return Err(not_found());
    }
    Ok(tenant)
}

/// `GET /v1/admin/tenants/{tenant_id}/limits`.
pub async fn tenant_limits(
    _: AdminAuth,
    State(state): State<AppState>,
    Path(raw): Path<String>,
) -> Result<Json<LimitsView>, ApiError> {
    let tenant = known_tenant(&state, &raw).await?;
    Ok(Json(effective_limits(&state, tenant).await?.view()))
}

#[derive(Deserialize)]
pub struct UsageQuery {
    from: Option<String>,
    to: Option<String>,
}

/// A tenant's usage report: its storage now, and its counters per UTC day
/// from `from` to `to`, oldest first, every day present.
/// `GET /v1/usage`: the tenant's storage now and its days, oldest first.
#[derive(Debug, Serialize, schemars::JsonSchema)]
#[schemars(rename = "Usage")]
pub struct UsageReport {
    pub storage_bytes: i64,
    #[serde(serialize_with = "days_as_shown")]
    #[schemars(with = "Vec<crate::domain::usage::DayView<'static>>")]
    pub days: Vec<UsageDay>,
}

fn days_as_shown<S: serde::Serializer>(days: &[UsageDay], serializer: S) -> Result<S::Ok, S::Error> {
    serializer.collect_seq(days.iter().map(day_view))
}

pub(crate) async fn usage_report(state: &AppState, tenant: Uuid, query: &UsageQuery) -> Result<UsageReport, ApiError> {
    let today = chrono::Utc::now().date_naive();
    let (from, to) =
        report_range(query.from.as_deref(), query.to.as_deref(), today).map_err(ApiError::InvalidRequest)?;
    let (from_text, to_text) = (from.format("%Y-%m-%d").to_string(), to.format("%Y-%m-%d").to_string());
    let history = state.store.usage_history(tenant, &from_text, &to_text).await?;
    let storage_bytes = state.store.storage_bytes(tenant).await?;
    let days = fill_days(from, to, &history.days, history.storage_before);
    Ok(UsageReport { storage_bytes, days })
}

/// `GET /v1/usage`.
pub async fn own_usage(
    TenantAuth(tenant): TenantAuth,
    State(state): State<AppState>,
    QueryParams(query): QueryParams<UsageQuery>,
) -> Result<Json<UsageReport>, ApiError> {
    Ok(Json(usage_report(&state, tenant, &query).await?))
}

/// `GET /v1/admin/tenants/{tenant_id}/usage`.
pub async fn tenant_usage(
    _: AdminAuth,
    State(state): State<AppState>,
    Path(raw): Path<String>,
    QueryParams(query): QueryParams<UsageQuery>,
) -> Result<Json<UsageReport>, ApiError> {
    let tenant = known_tenant(&state, &raw).await?;
    Ok(Json(usage_report(&state, tenant, &query).await?))
}

/// `PUT /v1/admin/tenants/{tenant_id}/limits`: the tenant's limits, whole;
/// a field left out takes the server's default, 0 is unlimited.
pub async fn set_limits(
    _: AdminAuth,
    State(state): State<AppState>,
    Path(raw): Path<String>,
    body: JsonBody,
) -> Result<Json<LimitsView>, ApiError> {
    let not_found = || ApiError::NotFound(format!("No tenant {raw}."));
    let tenant = Uuid::parse_str(&raw).map_err(|_| not_found())?;
    let limits: Limits = body.into_typed(ApiError::InvalidRequest)?;
    limits.validate().map_err(ApiError::InvalidRequest)?;
    if !state.store.set_tenant_limits(tenant, &limits).await? {
        return Err(not_found());
    }
    // Other replicas see it within the cache's lifetime.
    state.caches.limits.remove(&tenant);
    let effective = limits.over(state.default_limits);
    // A budget lowered below the day's tokens holds the model jobs now; one
    // raised or removed lets held jobs run at once.
    state.store.apply_token_budget(tenant, effective.model_tokens_per_day, chrono::Utc::now()).await?;
    state.wake.notify_waiters();
    tracing::info!(tenant_id = %tenant, "limits set");
    Ok(Json(effective.view()))
}

/// Every `/v1` route but the admin API passes the tenant's bucket before its
/// handler runs. A request with no valid key passes on (its handler answers
/// 401); a tenant without a request rate has no bucket and no fields.
/// Takes one request from the tenant's bucket on this replica: the rate and
/// the decision, `None` when the tenant has no request rate.
pub(crate) async fn take_request(
    state: &AppState,
    tenant: Uuid,
) -> Option<(crate::domain::limits::RequestRate, super::rate::RateDecision)> {
    let rate = effective_limits(state, tenant).await.ok()?.request_rate()?;
    Some((rate, state.caches.buckets.check(tenant, rate)))
}

/// A batch's segments beyond the one request the rate layer took: the
/// request rate counts segments (SPEC §2.2 "Batches"). The decision, for
/// the response's RateLimit fields (`None`: the layer's stands), or the
/// refusal: 429 when the bucket is short, 413 for a batch larger than the
/// tenant's burst, which no wait would let through.
pub(crate) async fn take_segments(
    state: &AppState,
    tenant: Uuid,
    segments: usize,
) -> Result<Option<super::rate::RateDecision>, ApiError> {
    if segments <= 1 {
        return Ok(None);
    }
    let Some(rate) = effective_limits(state, tenant).await?.request_rate() else { return Ok(None) };
    let more = u32::try_from(segments - 1).unwrap_or(u32::MAX);
    let decision = match u32::try_from(segments) {
        Ok(n) if n <= rate.burst => state.caches.buckets.check_n(tenant, rate, more),
        _ => None,
    };
    let Some(decision) = decision else {
        return Err(ApiError::PayloadTooLarge(format!(
            "A batch counts each segment against this tenant's request rate, in bursts of at most {}; \
             this one has {segments} segments: send at most {} a batch.",
            rate.burst, rate.burst
        )));
    };
    match refusal(rate, &decision) {
        Some(refused) => Err(refused),
        None => Ok(Some(decision)),
    }
}

/// The 429 for a request the bucket refused.
pub(crate) fn refusal(
    rate: crate::domain::limits::RequestRate,
    decision: &super::rate::RateDecision,
) -> Option<ApiError> {
    let secs = decision.retry_after?.as_secs_f64().ceil().max(1.0) as u64;
    Some(ApiError::RateLimited(
        format!(
            "This tenant may make {} requests a second (bursts of {}); try again in {secs} s.",
            rate.per_second, rate.burst
        ),
        secs,
    ))
}

/// Counts the request against its tenant's bucket. The key it finds is
/// handed on, so the authorization layer does not look it up again.
pub async fn limit_requests(State(state): State<AppState>, mut req: Request<Body>, next: Next) -> Response {
    let path = req.uri().path();
    if !path.starts_with("/v1/") || path.starts_with("/v1/admin/") {
        return next.run(req).await;
    }
    let Ok(key) = super::authorize::authenticate(&state, req.headers()).await else { return next.run(req).await };
    let tenant = key.tenant_id;
    req.extensions_mut().insert(key);
    let Some((rate, decision)) = take_request(&state, tenant).await else { return next.run(req).await };
    let mut response = match refusal(rate, &decision) {
        None => next.run(req).await,
        Some(refused) => refused.into_response(),
    };
    // A batch took more than the one request, and says what is left.
    let decision = response.extensions_mut().remove::<super::rate::RateDecision>().unwrap_or(decision);
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
