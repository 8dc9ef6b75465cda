//! The records of events and webhook deliveries (SPEC §2.8): plain data.

use super::TenantId;
use chrono::{DateTime, Utc};
use serde::Serialize;
use uuid::Uuid;

/// A webhook endpoint as its tenant sees it (its secret is never shown
/// again after it is made).
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
#[schemars(rename = "Webhook")]
pub struct WebhookRecord {
    pub webhook_id: Uuid,
    pub url: String,
    /// The event types it receives; `["*"]`: all.
    pub events: Vec<String>,
    pub description: Option<String>,
    /// `enabled` or `disabled` (it answered 410 Gone, or a PATCH disabled it).
    #[schemars(extend("enum" = ["enabled", "disabled"]))]
    pub state: String,
    /// Why it was disabled (it answered 410 Gone, or a PATCH disabled it).
    pub disabled_reason: Option<String>,
    /// Until when the secret before the last rotation still signs.
    pub previous_secret_until: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// An endpoint to create; its secret sealed.
#[derive(Debug, Clone)]
pub struct NewWebhook {
    pub webhook_id: Uuid,
    pub url: String,
    pub subscription: String,
    pub description: Option<String>,
    pub sealed_secret: String,
}

/// What a `PATCH` changes of an endpoint; `None`: unchanged.
#[derive(Debug, Clone, Default)]
pub struct WebhookChange {
    pub url: Option<String>,
    pub subscription: Option<String>,
    /// `Some(None)` clears the description.
    pub description: Option<Option<String>>,
    /// `Some(true)`: enabled again (its pause lifted); `Some(false)`: disabled.
    pub enabled: Option<bool>,
}

/// One event's delivery to one endpoint.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
#[schemars(rename = "Delivery")]
pub struct DeliveryRecord {
    pub event_id: String,
    pub event_type: String,
    #[schemars(extend("enum" = ["pending", "succeeded", "failed", "dropped"]))]
    pub state: String,
    pub attempts: i64,
    pub last_status: Option<i64>,
    pub last_error: Option<String>,
    /// The start of the receiver's answer (1 KiB).
    pub last_response: Option<String>,
    pub last_attempt_at: Option<DateTime<Utc>>,
    /// When it is tried next, while it is pending.
    pub next_attempt_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
}

/// An event of the outbox.
#[derive(Debug, Clone)]
pub struct EventRecord {
    pub seq: i64,
    pub event_type: String,
    pub payload: String,
    /// The workspace it reports on; `None` for a tenant's own (a webhook test).
    pub workspace: Option<String>,
}

/// A delivery a worker holds the lease of.
#[derive(Debug, Clone)]
pub struct ClaimedDelivery {
    pub tenant_id: TenantId,
    pub webhook_id: Uuid,
    pub event_seq: i64,
    pub attempts: i64,
    pub url: String,
    pub sealed_secret: String,
    /// The secret before the last rotation, while it still signs.
    pub sealed_previous: Option<String>,
    pub payload: String,
    pub token: Uuid,
}

/// How a delivery attempt ended.
#[derive(Debug, Clone)]
pub struct DeliveryAttempt {
    pub status: Option<u16>,
    pub error: Option<String>,
    pub response: Option<String>,
    pub answer: crate::domain::events::Answer,
    pub at: DateTime<Utc>,
}
