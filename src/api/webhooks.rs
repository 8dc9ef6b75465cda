//! Webhook endpoints and the live event stream over HTTP (SPEC §2.8).

use super::AppState;
use super::authorize::key_of_hash;
use super::error::{ApiError, Credential};
use super::extract::{JsonBody, QueryParams, TenantAuth, bearer_token};
use super::slots::StreamSlot;
use crate::domain::events::{EventType, SubscribedType, new_secret, parse_event_id, subscription_text};
use crate::domain::ids::sha256_hex;
use crate::domain::key_scope::Workspaces;
use crate::events::delivery::check_endpoint;
use crate::events::stream::PAGE;
use crate::store::AuthenticatedKey;
use crate::store::{DeliveryRecord, EventRecord, NewWebhook, TenantId, WebhookChange, WebhookRecord};
use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use futures_util::Stream;
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::broadcast;
use uuid::Uuid;

/// Endpoints one tenant may have.
const MAX_WEBHOOKS: usize = 20;
const MAX_DESCRIPTION: usize = 500;
/// How long a rotated-out secret still signs.
const ROTATION_OVERLAP: chrono::Duration = chrono::Duration::hours(24);
const KEEP_ALIVE: Duration = Duration::from_secs(15);
/// How often an open stream checks that its key still opens its tenant: a
/// revoked or expired key's stream ends within this and the key cache's second.
const KEY_RECHECK: Duration = Duration::from_secs(1);

#[derive(Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct WebhookBody {
    #[schemars(extend("format" = "uri"))]
    url: String,
    /// The event types it receives; `["*"]`, `[]` or none: all.
    #[serde(default)]
    #[schemars(with = "Option<Vec<SubscribedType>>")]
    events: Option<Vec<String>>,
    #[serde(default)]
    #[schemars(length(max = MAX_DESCRIPTION))]
    description: Option<String>,
}

/// Event type names; `["*"]`, an empty list or none: all.
fn event_types(names: &[String]) -> Result<Vec<EventType>, String> {
    if names.iter().any(|n| n == "*") {
        return if names.len() == 1 { Ok(Vec::new()) } else { Err("\"*\" stands alone in events".into()) };
    }
    names
        .iter()
        .map(|n| {
            EventType::parse(n).ok_or_else(|| {
                let known: Vec<&str> = EventType::ALL.iter().map(|t| t.as_str()).collect();
                format!("unknown event type {n:?}; known: {}", known.join(", "))
            })
        })
        .collect()
}

/// An endpoint just made or rotated, with its secret (shown once).
#[derive(Debug, Serialize, schemars::JsonSchema)]
#[schemars(rename = "WebhookWithSecret")]
pub struct WebhookView {
    #[serde(flatten)]
    pub record: WebhookRecord,
    /// `whsec_` and the base64 of 32 bytes; shown once.
    pub secret: String,
}

/// `GET /v1/webhooks`.
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct WebhookList {
    pub webhooks: Vec<WebhookRecord>,
}

/// `GET …/deliveries`, newest first.
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct DeliveryList {
    pub deliveries: Vec<DeliveryRecord>,
}

/// `POST …/test`: the event written for the endpoint.
#[derive(Debug, Serialize)]
pub struct TestEventQueued {
    pub event_id: String,
    #[serde(rename = "type")]
    pub event_type: &'static str,
}

fn webhook_view(record: WebhookRecord, secret: String) -> Json<WebhookView> {
    Json(WebhookView { record, secret })
}

fn parse_webhook_id(raw: &str) -> Result<Uuid, ApiError> {
    Uuid::parse_str(raw).map_err(|_| ApiError::NotFound(format!("No webhook {raw}.")))
}

async fn existing_webhook(state: &AppState, tenant: TenantId, raw: &str) -> Result<WebhookRecord, ApiError> {
    let id = parse_webhook_id(raw)?;
    state.store.get_webhook(tenant, id).await?.ok_or_else(|| ApiError::NotFound(format!("No webhook {raw}.")))
}

/// `POST /v1/webhooks`.
pub async fn create_webhook(
    TenantAuth(tenant): TenantAuth,
    State(state): State<AppState>,
    body: JsonBody,
) -> Result<(StatusCode, Json<WebhookView>), ApiError> {
    let body: WebhookBody = body.into_typed(ApiError::InvalidWebhook)?;
    let types = event_types(body.events.as_deref().unwrap_or_default()).map_err(ApiError::InvalidWebhook)?;
    checked_description(body.description.as_deref())?;
    let url = check_endpoint(&body.url, state.events.policy)
        .await
        .map_err(|refused| ApiError::InvalidWebhook(refused.to_string()))?;
    if state.store.list_webhooks(tenant).await?.len() >= MAX_WEBHOOKS {
        return Err(ApiError::InvalidWebhook(format!("a tenant has at most {MAX_WEBHOOKS} webhooks")));
    }
    let webhook_id = Uuid::new_v4();
    let secret = new_secret();
    let new = NewWebhook {
        webhook_id,
        url: url.to_string(),
        subscription: subscription_text(&types),
        description: body.description,
        sealed_secret: state.events.key.seal(webhook_id, &secret),
    };
    let record = state.store.create_webhook(tenant, new, chrono::Utc::now()).await?;
    Ok((StatusCode::CREATED, webhook_view(record, secret)))
}

/// `GET /v1/webhooks`.
pub async fn list_webhooks(
    TenantAuth(tenant): TenantAuth,
    State(state): State<AppState>,
) -> Result<Json<WebhookList>, ApiError> {
    let webhooks = state.store.list_webhooks(tenant).await?;
    Ok(Json(WebhookList { webhooks }))
}

/// `GET /v1/webhooks/{webhook_id}`.
pub async fn get_webhook(
    TenantAuth(tenant): TenantAuth,
    State(state): State<AppState>,
    Path(raw): Path<String>,
) -> Result<Json<WebhookRecord>, ApiError> {
    Ok(Json(existing_webhook(&state, tenant, &raw).await?))
}

/// Every field optional; what is left out stays.
#[derive(Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct WebhookPatch {
    #[schemars(extend("format" = "uri"))]
    url: Option<String>,
    #[schemars(with = "Option<Vec<SubscribedType>>")]
    events: Option<Vec<String>>,
    /// `null` clears it.
    #[serde(default, deserialize_with = "present")]
    #[schemars(length(max = MAX_DESCRIPTION))]
    description: Option<Option<String>>,
    #[schemars(extend("enum" = ["enabled", "disabled", null]))]
    state: Option<String>,
}

/// A field given as `null` is present: `Some(None)`.
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Option<String>>, D::Error> {
    Option::<String>::deserialize(d).map(Some)
}

fn checked_description(description: Option<&str>) -> Result<(), ApiError> {
    if description.is_some_and(|d| d.chars().count() > MAX_DESCRIPTION) {
        return Err(ApiError::InvalidWebhook(format!("description is longer than {MAX_DESCRIPTION} characters")));
    }
    Ok(())
}

/// `PATCH /v1/webhooks/{webhook_id}`: a new URL, event types or
/// description, or the endpoint enabled again (or disabled); its secret and
/// deliveries stay.
pub async fn update_webhook(
    TenantAuth(tenant): TenantAuth,
    State(state): State<AppState>,
    Path(raw): Path<String>,
    body: JsonBody,
) -> Result<Json<WebhookRecord>, ApiError> {
    let id = parse_webhook_id(&raw)?;
    let patch: WebhookPatch = body.into_typed(ApiError::InvalidWebhook)?;
    checked_description(patch.description.as_ref().and_then(Option::as_deref))?;
    let enabled = match patch.state.as_deref() {
        None => None,
        Some("enabled") => Some(true),
        Some("disabled") => Some(false),
        Some(other) => {
            return Err(ApiError::InvalidWebhook(format!("state is \"enabled\" or \"disabled\", got: {other:?}")));
        }
    };
    let subscription = match &patch.events {
        Some(names) => Some(subscription_text(&event_types(names).map_err(ApiError::InvalidWebhook)?)),
        None => None,
    };
    let url = match &patch.url {
        Some(url) => Some(
            check_endpoint(url, state.events.policy)
                .await
                .map_err(|refused| ApiError::InvalidWebhook(refused.to_string()))?
                .to_string(),
        ),
        None => None,
    };
    let change = WebhookChange { url, subscription, description: patch.description, enabled };
    let record = state
        .store
        .update_webhook(tenant, id, &change, chrono::Utc::now())
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("No webhook {raw}.")))?;
    Ok(Json(record))
}

/// `DELETE /v1/webhooks/{webhook_id}`: the endpoint and its pending deliveries.
pub async fn delete_webhook(
    TenantAuth(tenant): TenantAuth,
    State(state): State<AppState>,
    Path(raw): Path<String>,
) -> Result<StatusCode, ApiError> {
    let id = parse_webhook_id(&raw)?;
    if !state.store.delete_webhook(tenant, id).await? {
        return Err(ApiError::NotFound(format!("No webhook {raw}.")));
    }
    Ok(StatusCode::NO_CONTENT)
}

/// `POST /v1/webhooks/{webhook_id}/rotate`: a new secret, shown once; the
/// old one signs too for 24 hours.
pub async fn rotate_webhook(
    TenantAuth(tenant): TenantAuth,
    State(state): State<AppState>,
    Path(raw): Path<String>,
) -> Result<Json<WebhookView>, ApiError> {
    let id = parse_webhook_id(&raw)?;
    let secret = new_secret();
    let now = chrono::Utc::now();
    let sealed = state.events.key.seal(id, &secret);
    let record = state
        .store
        .rotate_webhook(tenant, id, &sealed, now + ROTATION_OVERLAP, now)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("No webhook {raw}.")))?;
    Ok(webhook_view(record, secret))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeliveriesQuery {
    limit: Option<i64>,
}

/// `GET /v1/webhooks/{webhook_id}/deliveries`: newest first.
pub async fn webhook_deliveries(
    TenantAuth(tenant): TenantAuth,
    State(state): State<AppState>,
    Path(raw): Path<String>,
    QueryParams(query): QueryParams<DeliveriesQuery>,
) -> Result<Json<DeliveryList>, ApiError> {
    let limit = crate::domain::page::page_limit(query.limit).map_err(ApiError::InvalidRequest)?;
    let webhook = existing_webhook(&state, tenant, &raw).await?;
    let deliveries = state.store.webhook_deliveries(tenant, webhook.webhook_id, limit).await?;
    Ok(Json(DeliveryList { deliveries }))
}

/// `POST /v1/webhooks/{webhook_id}/test`: a `webhook.test` event for this
/// endpoint alone.
pub async fn test_webhook(
    TenantAuth(tenant): TenantAuth,
    State(state): State<AppState>,
    Path(raw): Path<String>,
) -> Result<(StatusCode, Json<TestEventQueued>), ApiError> {
    let event_id = send_test_event(&state, tenant, &raw).await?;
    Ok((StatusCode::ACCEPTED, Json(TestEventQueued { event_id, event_type: EventType::WebhookTest.as_str() })))
}

/// Writes a `webhook.test` event for the tenant's endpoint `raw`; its event id.
pub(crate) async fn send_test_event(state: &AppState, tenant: TenantId, raw: &str) -> Result<String, ApiError> {
    let webhook = existing_webhook(state, tenant, raw).await?;
    if webhook.state != "enabled" {
        return Err(ApiError::WebhookDisabled(format!(
            "Webhook {raw} is disabled ({}): nothing is sent to it. PATCH it with {{\"state\": \"enabled\"}} first.",
            webhook.disabled_reason.as_deref().unwrap_or("disabled")
        )));
    }
    let seq = state.store.record_event(tenant, &crate::domain::events::webhook_test(webhook.webhook_id)).await?;
    state.events.committed();
    Ok(crate::domain::events::event_id(tenant, seq))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EventsQuery {
    types: Option<String>,
}

/// One live stream's place: what it sent last, what it has yet to send.
struct StreamState {
    state: AppState,
    tenant: TenantId,
    types: Vec<EventType>,
    /// The workspaces the stream's key reaches: no other's event is sent.
    workspaces: Workspaces,
    receiver: broadcast::Receiver<Arc<EventRecord>>,
    sent_through: i64,
    /// Events to send, each with whether it was read from the outbox.
    pending: VecDeque<(Arc<EventRecord>, bool)>,
    /// The last outbox read filled its page: there may be more to read.
    outbox_behind: bool,
    /// The SHA-256 of the key the stream was opened with, and when it was last checked.
    key_hash: String,
    key_checked: tokio::time::Instant,
    _slot: StreamSlot,
    _gauge: StreamGauge,
}

/// Counts the stream in `memoryd_event_streams` while it is open.
struct StreamGauge;

impl StreamGauge {
    fn open() -> Self {
        crate::metrics::event_streams(1.0);
        Self
    }
}

impl Drop for StreamGauge {
    fn drop(&mut self) {
        crate::metrics::event_streams(-1.0);
    }
}

impl StreamState {
    /// Reads what the broadcast cannot give (a resume, a stream that fell
    /// behind) from the outbox, a page at a time.
    async fn catch_up(&mut self) -> Result<(), crate::store::StoreError> {
        let events = self.state.store.events_after(self.tenant, self.sent_through, PAGE).await?;
        self.outbox_behind = events.len() as i64 == PAGE;
        self.pending.extend(events.into_iter().map(|e| (Arc::new(e), true)));
        Ok(())
    }

    /// Whether the stream's key still opens its tenant: not revoked, not
    /// expired (a failed lookup is not a revocation: the stream goes on).
    async fn key_still_opens(&mut self) -> bool {
        self.key_checked = tokio::time::Instant::now();
        match key_of_hash(&self.state, &self.key_hash).await {
            Ok(found) => found.is_some_and(|k| k.tenant_id == self.tenant && !k.scope.expired(chrono::Utc::now())),
            Err(_) => true,
        }
    }

    /// An event this stream does not send: a test event (for its endpoint
    /// alone), a type not asked for, another workspace's or (for a key
    /// with some workspaces only) the tenant's own.
    fn withheld(&self, event: &EventRecord) -> bool {
        let for_one_endpoint = event.event_type == EventType::WebhookTest.as_str();
        let unwanted = !self.types.is_empty() && !self.types.iter().any(|t| t.as_str() == event.event_type);
        let unseen = !self.workspaces.is_all() && !event.workspace.as_deref().is_some_and(|w| self.workspaces.sees(w));
        for_one_endpoint || unwanted || unseen
    }

    async fn next_event(&mut self) -> Option<Event> {
        let shutdown = self.state.shutdown.clone();
        loop {
            if shutdown.is_cancelled() {
                return None;
            }
            if self.key_checked.elapsed() >= KEY_RECHECK && !self.key_still_opens().await {
                return None;
            }
            if let Some((event, from_outbox)) = self.pending.pop_front() {
                if event.seq <= self.sent_through {
                    continue;
                }
                // The outbox may have holes (events swept or forgotten): what
                // it holds next is next. A gap in the broadcast means the
                // stream fell behind it, and the outbox has the rest.
                if !from_outbox && event.seq > self.sent_through + 1 {
                    self.pending.clear();
                    if self.catch_up().await.is_err() {
                        return None;
                    }
                    continue;
                }
                self.sent_through = event.seq;
                if self.withheld(&event) {
                    continue;
                }
                return Some(
                    Event::default()
                        .id(crate::domain::events::event_id(self.tenant, event.seq))
                        .event(event.event_type.clone())
                        .data(event.payload.clone()),
                );
            }
            if self.outbox_behind {
                if self.catch_up().await.is_err() {
                    return None;
                }
                continue;
            }
            let received = tokio::select! {
                _ = shutdown.cancelled() => return None,
                received = self.receiver.recv() => received,
                _ = tokio::time::sleep_until(self.key_checked + KEY_RECHECK) => continue,
            };
            match received {
                Ok(event) => self.pending.push_back((event, false)),
                Err(broadcast::error::RecvError::Lagged(_)) => {
                    if self.catch_up().await.is_err() {
                        return None;
                    }
                }
                Err(broadcast::error::RecvError::Closed) => return None,
            }
        }
    }
}

/// `GET /v1/events`: the tenant's events as a live `text/event-stream`,
/// resumed after `Last-Event-ID` from the outbox.
pub async fn stream_events(
    key: AuthenticatedKey,
    State(state): State<AppState>,
    QueryParams(query): QueryParams<EventsQuery>,
    headers: HeaderMap,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, ApiError> {
    let tenant = key.tenant_id;
    let names: Vec<String> = query
        .types
        .as_deref()
        .map(|t| t.split(',').map(str::trim).filter(|s| !s.is_empty()).map(str::to_owned).collect())
        .unwrap_or_default();
    let types = event_types(&names).map_err(ApiError::InvalidRequest)?;
    let resume = match headers.get("last-event-id") {
        None => None,
        Some(value) => {
            let text = value.to_str().unwrap_or_default();
            Some(parse_event_id(tenant, text).ok_or_else(|| {
                ApiError::InvalidRequest(format!("Last-Event-ID {text:?} is not an event id of this tenant"))
            })?)
        }
    };
    let key_hash = bearer_token(&headers)
        .map(|key| sha256_hex(key.as_bytes()))
        .ok_or(ApiError::Unauthorized(Credential::TenantKey))?;
    let slot = state.slots.stream(tenant)?;
    let (receiver, latest) = state.events.hub.subscribe(tenant).await?;
    let mut stream = StreamState {
        state,
        tenant,
        types,
        workspaces: key.scope.workspaces,
        receiver,
        sent_through: resume.unwrap_or(latest),
        pending: VecDeque::new(),
        outbox_behind: false,
        key_hash,
        key_checked: tokio::time::Instant::now(),
        _slot: slot,
        _gauge: StreamGauge::open(),
    };
    if resume.is_some() {
        stream.catch_up().await?;
    }
    let events = futures_util::stream::unfold(stream, |mut stream| async move {
        let event = stream.next_event().await?;
        Some((Ok(event), stream))
    });
    Ok(Sse::new(events).keep_alive(KeepAlive::new().interval(KEEP_ALIVE)))
}
