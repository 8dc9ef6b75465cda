//! The outbox, webhook endpoints and their deliveries (SPEC §2.8).
//!
//! An event is written by the transaction that makes the change it reports,
//! as that transaction's last write: its tenant's counter row hands out the
//! sequence number and stays locked until the commit, so a tenant's events
//! are numbered without gaps in commit order, and a reader that sees number
//! n has every event before it.

use super::rows::{ClaimedDeliveryRow, DeliveryRow, EventRow, WebhookRow};
use super::*;
use crate::domain::events::NewEvent;
use crate::store::*;
use chrono::{DateTime, Utc};
use sqlx::FromRow;
use sqlx::Row;
use uuid::Uuid;

const WEBHOOK_COLUMNS: &str =
    "id, url, events, description, state, disabled_reason, previous_until, created_at, updated_at";

impl SqlStore<DB> {
    /// Writes the tenant's events and a pending delivery of each to every
    /// enabled endpoint that takes its type. Run it last in the transaction.
    pub(super) async fn record_events_in(
        conn: &mut DbConnection,
        tenant: TenantId,
        events: &[NewEvent],
        now: DateTime<Utc>,
    ) -> StoreResult<Vec<i64>> {
        if events.is_empty() {
            return Ok(Vec::new());
        }
        let count = events.len() as i64;
        let last: i64 = sqlx::query(
            "INSERT INTO event_counters (tenant_id, last_seq) VALUES ($1, $2)
                 ON CONFLICT (tenant_id) DO UPDATE SET last_seq = event_counters.last_seq + excluded.last_seq
                 RETURNING last_seq",
        )
        .bind(tenant)
        .bind(count)
        .fetch_one(&mut *conn)
        .await?
        .try_get("last_seq")?;
        let mut seqs = Vec::with_capacity(events.len());
        for (event, seq) in events.iter().zip(last - count + 1..) {
            sqlx::query(
                "INSERT INTO events (tenant_id, seq, event_type, payload, created_at, workspace)
                 VALUES ($1, $2, $3, $4, $5, $6)",
            )
            .bind(tenant)
            .bind(seq)
            .bind(event.event_type.as_str())
            .bind(event.payload(now))
            .bind(now)
            .bind(event.data.get("workspace").and_then(serde_json::Value::as_str))
            .execute(&mut *conn)
            .await?;
            let fan_out =
                "INSERT INTO webhook_deliveries (tenant_id, webhook_id, event_seq, event_type, state, attempts,
                                                            next_attempt_at, created_at)
                     SELECT $1, id, $2, $3, 'pending', 0, $4, $4 FROM webhooks
                     WHERE tenant_id = $1 AND state = 'enabled'";
            match event.only_webhook {
                Some(webhook) => {
                    sqlx::query(AssertSqlSafe(format!("{fan_out} AND id = $5")))
                        .bind(tenant)
                        .bind(seq)
                        .bind(event.event_type.as_str())
                        .bind(now)
                        .bind(webhook)
                        .execute(&mut *conn)
                        .await?
                }
                None => {
                    sqlx::query(AssertSqlSafe(format!(
                        "{fan_out} AND (events = '*' OR events LIKE '%,' || $3 || ',%')"
                    )))
                    .bind(tenant)
                    .bind(seq)
                    .bind(event.event_type.as_str())
                    .bind(now)
                    .execute(&mut *conn)
                    .await?
                }
            };
            seqs.push(seq);
        }
        Ok(seqs)
    }

    fn webhook_record(row: &DbRow) -> StoreResult<WebhookRecord> {
        Ok(WebhookRow::from_row(row)?.into())
    }

    async fn webhook_in(
        conn: &mut DbConnection,
        tenant: TenantId,
        webhook: Uuid,
    ) -> StoreResult<Option<WebhookRecord>> {
        let row = sqlx::query(AssertSqlSafe(format!(
            "SELECT {WEBHOOK_COLUMNS} FROM webhooks WHERE tenant_id = $1 AND id = $2"
        )))
        .bind(tenant)
        .bind(webhook)
        .fetch_optional(&mut *conn)
        .await?;
        row.as_ref().map(Self::webhook_record).transpose()
    }
}

#[async_trait::async_trait]
impl EventStore for SqlStore<DB> {
    async fn create_webhook(
        &self,
        tenant: TenantId,
        webhook: NewWebhook,
        now: DateTime<Utc>,
    ) -> StoreResult<WebhookRecord> {
        let mut tx = self.begin_write().await?;
        sqlx::query(
            "INSERT INTO webhooks (id, tenant_id, url, events, description, secret, state, created_at, updated_at)
             VALUES ($1, $2, $3, $4, $5, $6, 'enabled', $7, $7)",
        )
        .bind(webhook.webhook_id)
        .bind(tenant)
        .bind(webhook.url.as_str())
        .bind(webhook.subscription.as_str())
        .bind(webhook.description.as_deref())
        .bind(webhook.sealed_secret.as_str())
        .bind(now)
        .execute(&mut *tx)
        .await?;
        let record = Self::webhook_in(&mut tx, tenant, webhook.webhook_id).await?;
        tx.commit().await?;
        record.ok_or_else(|| corrupt("a webhook just made is missing"))
    }

    async fn list_webhooks(&self, tenant: TenantId) -> StoreResult<Vec<WebhookRecord>> {
        let rows = sqlx::query(AssertSqlSafe(format!(
            "SELECT {WEBHOOK_COLUMNS} FROM webhooks WHERE tenant_id = $1 ORDER BY created_at, id"
        )))
        .bind(tenant)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(Self::webhook_record).collect()
    }

    async fn get_webhook(&self, tenant: TenantId, webhook: Uuid) -> StoreResult<Option<WebhookRecord>> {
        let mut conn = self.pool.acquire().await?;
        Self::webhook_in(&mut conn, tenant, webhook).await
    }

    async fn delete_webhook(&self, tenant: TenantId, webhook: Uuid) -> StoreResult<bool> {
        let mut tx = self.begin_write().await?;
        sqlx::query("DELETE FROM webhook_deliveries WHERE tenant_id = $1 AND webhook_id = $2")
            .bind(tenant)
            .bind(webhook)
            .execute(&mut *tx)
            .await?;
        let deleted = sqlx::query("DELETE FROM webhooks WHERE tenant_id = $1 AND id = $2 RETURNING id")
            .bind(tenant)
            .bind(webhook)
            .fetch_optional(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(deleted.is_some())
    }

    async fn update_webhook(
        &self,
        tenant: TenantId,
        webhook: Uuid,
        change: &WebhookChange,
        now: DateTime<Utc>,
    ) -> StoreResult<Option<WebhookRecord>> {
        let mut tx = self.begin_write().await?;
        let state = change.enabled.map(|enabled| if enabled { "enabled" } else { "disabled" });
        let updated = sqlx::query(
            "UPDATE webhooks SET url = COALESCE($3, url), events = COALESCE($4, events),
                    description = CASE WHEN $5 THEN $6 ELSE description END,
                    state = COALESCE($7, state),
                    disabled_reason = CASE WHEN $7 IS NULL THEN disabled_reason
                                           WHEN $7 = 'enabled' THEN NULL ELSE 'disabled by PATCH' END,
                    paused_until = CASE WHEN $7 = 'enabled' THEN NULL ELSE paused_until END,
                    updated_at = $8
             WHERE tenant_id = $1 AND id = $2 RETURNING id",
        )
        .bind(tenant)
        .bind(webhook)
        .bind(change.url.as_deref())
        .bind(change.subscription.as_deref())
        .bind(change.description.is_some())
        .bind(change.description.clone().flatten())
        .bind(state)
        .bind(now)
        .fetch_optional(&mut *tx)
        .await?;
        if state == Some("disabled") {
            // What it had pending goes, as when a 410 disables it.
            sqlx::query(
                "UPDATE webhook_deliveries SET state = 'dropped', lease_token = NULL, lease_expires_at = NULL
                 WHERE webhook_id = $1 AND state = 'pending'",
            )
            .bind(webhook)
            .execute(&mut *tx)
            .await?;
        }
        let record = if updated.is_some() { Self::webhook_in(&mut tx, tenant, webhook).await? } else { None };
        tx.commit().await?;
        Ok(record)
    }

    async fn rotate_webhook(
        &self,
        tenant: TenantId,
        webhook: Uuid,
        sealed_secret: &str,
        previous_until: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> StoreResult<Option<WebhookRecord>> {
        let mut tx = self.begin_write().await?;
        let rotated = sqlx::query(
            "UPDATE webhooks SET previous_secret = secret, previous_until = $3, secret = $4, updated_at = $5
             WHERE tenant_id = $1 AND id = $2 RETURNING id",
        )
        .bind(tenant)
        .bind(webhook)
        .bind(previous_until)
        .bind(sealed_secret)
        .bind(now)
        .fetch_optional(&mut *tx)
        .await?;
        let record = if rotated.is_some() { Self::webhook_in(&mut tx, tenant, webhook).await? } else { None };
        tx.commit().await?;
        Ok(record)
    }

    async fn webhook_deliveries(
        &self,
        tenant: TenantId,
        webhook: Uuid,
        limit: i64,
    ) -> StoreResult<Vec<DeliveryRecord>> {
        let rows = sqlx::query(
            "SELECT event_seq, event_type, state, attempts, last_status, last_error, last_response, last_attempt_at,
                    next_attempt_at, created_at
             FROM webhook_deliveries WHERE tenant_id = $1 AND webhook_id = $2
             ORDER BY event_seq DESC LIMIT $3",
        )
        .bind(tenant)
        .bind(webhook)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(|row| Ok(DeliveryRow::from_row(row)?.into_record(tenant))).collect()
    }

    async fn record_event(&self, tenant: TenantId, event: &NewEvent) -> StoreResult<i64> {
        let mut tx = self.begin_write().await?;
        let seqs = Self::record_events_in(&mut tx, tenant, std::slice::from_ref(event), Utc::now()).await?;
        tx.commit().await?;
        seqs.first().copied().ok_or_else(|| corrupt("an event was not numbered"))
    }

    async fn claim_deliveries(
        &self,
        now: DateTime<Utc>,
        lease: std::time::Duration,
        limit: i64,
        per_endpoint: usize,
    ) -> StoreResult<Vec<ClaimedDelivery>> {
        let mut tx = self.begin_write().await?;
        // Endpoints neither paused nor leased with a delivery due, the one
        // served longest ago first; each probe reads one endpoint's first
        // pending deliveries through the index, never a whole backlog.
        let endpoints = sqlx::query(AssertSqlSafe(format!(
            "SELECT w.id FROM webhooks w
             WHERE w.state = 'enabled'
               AND (w.paused_until IS NULL OR w.paused_until <= $1)
               AND (w.lease_token IS NULL OR w.lease_expires_at <= $1)
               AND EXISTS (SELECT 1 FROM webhook_deliveries d
                           WHERE d.webhook_id = w.id AND d.state = 'pending' AND d.next_attempt_at <= $1)
             ORDER BY w.lease_expires_at IS NOT NULL, w.lease_expires_at LIMIT $2{}",
            DB::SKIP_LOCKED
        )))
        .bind(now)
        .bind(limit)
        .fetch_all(&mut *tx)
        .await?;
        let token = Uuid::new_v4();
        let until = now + chrono::Duration::from_std(lease).unwrap_or(chrono::Duration::seconds(300));
        for row in &endpoints {
            let webhook: Uuid = row.try_get("id")?;
            sqlx::query("UPDATE webhooks SET lease_token = $2, lease_expires_at = $3 WHERE id = $1")
                .bind(webhook)
                .bind(token)
                .bind(until)
                .execute(&mut *tx)
                .await?;
            // In order: a delivery waiting for its retry holds back the
            // later ones, as the endpoint's pause does.
            let leased = sqlx::query(
                "UPDATE webhook_deliveries SET lease_token = $2, lease_expires_at = $3
                 WHERE webhook_id = $1 AND event_seq IN (
                     SELECT event_seq FROM webhook_deliveries WHERE webhook_id = $1 AND state = 'pending'
                     ORDER BY event_seq LIMIT $4)
                   AND next_attempt_at <= $5",
            )
            .bind(webhook)
            .bind(token)
            .bind(until)
            .bind(i64::try_from(per_endpoint).unwrap_or(i64::MAX))
            .bind(now)
            .execute(&mut *tx)
            .await?;
            if leased.rows_affected() == 0 {
                sqlx::query("UPDATE webhooks SET lease_token = NULL WHERE id = $1")
                    .bind(webhook)
                    .execute(&mut *tx)
                    .await?;
            }
        }
        let rows = sqlx::query(
            "SELECT d.tenant_id, d.webhook_id, d.event_seq, d.attempts, w.url, w.secret,
                    CASE WHEN w.previous_until > $2 THEN w.previous_secret END AS previous_secret, e.payload
             FROM webhook_deliveries d
             JOIN webhooks w ON w.id = d.webhook_id
             JOIN events e ON e.tenant_id = d.tenant_id AND e.seq = d.event_seq
             WHERE d.lease_token = $1
             ORDER BY d.webhook_id, d.event_seq",
        )
        .bind(token)
        .bind(now)
        .fetch_all(&mut *tx)
        .await?;
        tx.commit().await?;
        rows.iter().map(|row| Ok(ClaimedDeliveryRow::from_row(row)?.leased_under(token))).collect()
    }

    async fn finish_delivery(&self, claimed: &ClaimedDelivery, attempt: &DeliveryAttempt) -> StoreResult<bool> {
        use crate::domain::events::{Answer, retry_after};
        let attempts = claimed.attempts + 1;
        let (state, next) = match attempt.answer {
            Answer::Delivered => ("succeeded", attempt.at),
            Answer::Gone => ("failed", attempt.at),
            Answer::Failed => match retry_after(attempts) {
                Some(wait) => ("pending", attempt.at + chrono::Duration::from_std(wait).unwrap_or_default()),
                None => ("failed", attempt.at),
            },
        };
        let mut tx = self.begin_write().await?;
        let recorded = sqlx::query(
            "UPDATE webhook_deliveries SET state = $4, attempts = $5, next_attempt_at = $6, lease_token = NULL,
                    lease_expires_at = NULL, last_status = $7, last_error = $8, last_response = $9, last_attempt_at = $10
             WHERE webhook_id = $1 AND event_seq = $2 AND lease_token = $3 AND state = 'pending' RETURNING event_seq",
        )
        .bind(claimed.webhook_id)
        .bind(claimed.event_seq)
        .bind(claimed.token)
        .bind(state)
        .bind(attempts)
        .bind(next)
        .bind(attempt.status.map(i64::from))
        .bind(attempt.error.as_deref())
        .bind(attempt.response.as_deref())
        .bind(attempt.at)
        .fetch_optional(&mut *tx)
        .await?
        .is_some();
        if recorded && state == "pending" {
            sqlx::query("UPDATE webhooks SET paused_until = $2 WHERE id = $1")
                .bind(claimed.webhook_id)
                .bind(next)
                .execute(&mut *tx)
                .await?;
        }
        if recorded && attempt.answer == Answer::Gone {
            sqlx::query("UPDATE webhooks SET state = 'disabled', disabled_reason = $2, updated_at = $3 WHERE id = $1")
                .bind(claimed.webhook_id)
                .bind("the endpoint answered 410 Gone")
                .bind(attempt.at)
                .execute(&mut *tx)
                .await?;
            sqlx::query(
                "UPDATE webhook_deliveries SET state = 'dropped', lease_token = NULL, lease_expires_at = NULL
                 WHERE webhook_id = $1 AND state = 'pending'",
            )
            .bind(claimed.webhook_id)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(recorded)
    }

    async fn release_endpoint(&self, webhook: Uuid, token: Uuid) -> StoreResult<()> {
        let mut tx = self.begin_write().await?;
        sqlx::query(
            "UPDATE webhook_deliveries SET lease_token = NULL, lease_expires_at = NULL
             WHERE webhook_id = $1 AND lease_token = $2",
        )
        .bind(webhook)
        .bind(token)
        .execute(&mut *tx)
        .await?;
        sqlx::query("UPDATE webhooks SET lease_token = NULL WHERE id = $1 AND lease_token = $2")
            .bind(webhook)
            .bind(token)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }

    async fn events_after(&self, tenant: TenantId, after: i64, limit: i64) -> StoreResult<Vec<EventRecord>> {
        let rows = sqlx::query(
            "SELECT seq, event_type, payload, workspace FROM events WHERE tenant_id = $1 AND seq > $2 ORDER BY seq LIMIT $3",
        )
        .bind(tenant)
        .bind(after)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(|row| Ok(EventRow::from_row(row)?.into())).collect()
    }

    async fn latest_event_seqs(&self, tenants: &[TenantId]) -> StoreResult<Vec<(TenantId, i64)>> {
        let mut latest = Vec::with_capacity(tenants.len());
        let mut conn = self.pool.acquire().await?;
        for chunk in tenants.chunks(100) {
            let mut query =
                sqlx::QueryBuilder::<DB>::new("SELECT tenant_id, last_seq FROM event_counters WHERE tenant_id IN (");
            let mut list = query.separated(", ");
            for tenant in chunk {
                list.push_bind(*tenant);
            }
            query.push(")");
            for row in query.build().fetch_all(&mut *conn).await? {
                latest.push((row.try_get("tenant_id")?, row.try_get("last_seq")?));
            }
        }
        for tenant in tenants {
            if !latest.iter().any(|(t, _)| t == tenant) {
                latest.push((*tenant, 0));
            }
        }
        Ok(latest)
    }

    async fn sweep_events(&self, cutoff: DateTime<Utc>, batch: i64) -> StoreResult<u64> {
        let mut tx = self.begin_write().await?;
        let deliveries = sqlx::query(
            "DELETE FROM webhook_deliveries WHERE (webhook_id, event_seq) IN (
                SELECT d.webhook_id, d.event_seq FROM events e
                JOIN webhook_deliveries d ON d.tenant_id = e.tenant_id AND d.event_seq = e.seq
                WHERE e.created_at < $1 AND d.state <> 'pending' LIMIT $2)",
        )
        .bind(cutoff)
        .bind(batch)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        let events = sqlx::query(
            "DELETE FROM events WHERE (tenant_id, seq) IN (
                SELECT tenant_id, seq FROM events e WHERE created_at < $1 AND NOT EXISTS (
                    SELECT 1 FROM webhook_deliveries d WHERE d.tenant_id = e.tenant_id AND d.event_seq = e.seq)
                LIMIT $2)",
        )
        .bind(cutoff)
        .bind(batch)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        tx.commit().await?;
        // At least a batch whenever either was one: the caller sweeps again.
        Ok(deliveries + events)
    }
}
