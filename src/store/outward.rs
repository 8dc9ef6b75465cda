//! The store's interfaces for what leaves the pipeline: moving a workspace
//! out and in, events for webhooks and streams, and the running agent's
//! reads and edits of its memory.

use super::*;
use crate::domain::ids::{LayoutName, RolloutId, SessionId, WorkspaceName};
use async_trait::async_trait;
use chrono::{DateTime, Utc};

/// Moving a workspace out and in (SPEC §2.7).
#[async_trait]
pub trait PortabilityStore: Send + Sync {
    /// The workspace's rollouts (those with committed bytes), raw-memory
    /// index and selections, all as of one instant.
    async fn export_view(&self, tenant: TenantId, workspace: &WorkspaceName) -> StoreResult<ExportView>;
    /// Queues an import into the workspace (job `job_id`), which must hold
    /// no session, rollout or memory, nor be importing or being forgotten.
    /// The archive's `archive_bytes` count against the tenant's storage
    /// from now until the job ends, and must fit under `storage_limit`.
    async fn queue_import(
        &self,
        tenant: TenantId,
        workspace: &WorkspaceName,
        job_id: Uuid,
        archive_bytes: u64,
        storage_limit: Option<u64>,
    ) -> StoreResult<ImportQueued>;
    /// Sets a running import's claim on its tenant's storage to `bytes` if
    /// that fits in the room the rest of the tenant's storage leaves under
    /// `limit`; that room either way, `None` if the job is no longer this worker's.
    async fn reserve_import(&self, claimed: &ClaimedJob, bytes: u64, limit: u64) -> StoreResult<Option<u64>>;
    /// The workspace holds no session, rollout or memory in the database.
    async fn workspace_empty(&self, tenant: TenantId, workspace: &WorkspaceName) -> StoreResult<bool>;
}

/// Events (SPEC §2.8): webhook endpoints, their deliveries, and the outbox
/// the live stream reads. Events themselves are written by the transactions
/// whose changes they report.
#[async_trait]
pub trait EventStore: Send + Sync {
    async fn create_webhook(
        &self,
        tenant: TenantId,
        webhook: NewWebhook,
        now: DateTime<Utc>,
    ) -> StoreResult<WebhookRecord>;
    async fn list_webhooks(&self, tenant: TenantId) -> StoreResult<Vec<WebhookRecord>>;
    async fn get_webhook(&self, tenant: TenantId, webhook: Uuid) -> StoreResult<Option<WebhookRecord>>;
    /// Deletes the endpoint and its deliveries; `false` when there was none.
    async fn delete_webhook(&self, tenant: TenantId, webhook: Uuid) -> StoreResult<bool>;
    /// Changes the endpoint, its secret kept; `None` when there is none.
    async fn update_webhook(
        &self,
        tenant: TenantId,
        webhook: Uuid,
        change: &WebhookChange,
        now: DateTime<Utc>,
    ) -> StoreResult<Option<WebhookRecord>>;
    /// Replaces the secret; the one it replaces signs too until `previous_until`.
    async fn rotate_webhook(
        &self,
        tenant: TenantId,
        webhook: Uuid,
        sealed_secret: &str,
        previous_until: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> StoreResult<Option<WebhookRecord>>;
    /// The endpoint's deliveries, newest first.
    async fn webhook_deliveries(&self, tenant: TenantId, webhook: Uuid, limit: i64)
    -> StoreResult<Vec<DeliveryRecord>>;
    /// Writes `event` to the outbox with its deliveries; its sequence number.
    async fn record_event(&self, tenant: TenantId, event: &crate::domain::events::NewEvent) -> StoreResult<i64>;
    /// Takes the leases of up to `limit` endpoints with deliveries due,
    /// neither paused after a failure nor leased already, and of the first
    /// `per_endpoint` pending deliveries of each, in order, if due.
    async fn claim_deliveries(
        &self,
        now: DateTime<Utc>,
        lease: std::time::Duration,
        limit: i64,
        per_endpoint: usize,
    ) -> StoreResult<Vec<ClaimedDelivery>>;
    /// Records an attempt if the lease is still `claimed`'s; `false` if not.
    async fn finish_delivery(&self, claimed: &ClaimedDelivery, attempt: &DeliveryAttempt) -> StoreResult<bool>;
    /// Gives back an endpoint's lease `token` and the deliveries under it
    /// that were not attempted.
    async fn release_endpoint(&self, webhook: Uuid, token: Uuid) -> StoreResult<()>;
    /// The tenant's events after `after`, oldest first.
    async fn events_after(&self, tenant: TenantId, after: i64, limit: i64) -> StoreResult<Vec<EventRecord>>;
    /// The sequence number of each tenant's newest event (0: none).
    async fn latest_event_seqs(&self, tenants: &[TenantId]) -> StoreResult<Vec<(TenantId, i64)>>;
    /// Deletes events made before `cutoff` that no pending delivery needs,
    /// with their finished deliveries.
    async fn sweep_events(&self, cutoff: DateTime<Utc>, batch: i64) -> StoreResult<u64>;
}

/// The running agent's memory (SPEC §2.10): its edits, queued as jobs, and
/// which raw memories it uses.
#[async_trait]
pub trait AgentMemoryStore: Send + Sync {
    /// Queues an edit in the layout's one-at-a-time lane, with the layout's
    /// config as it is now.
    async fn queue_edit(
        &self,
        tenant: TenantId,
        workspace: &WorkspaceName,
        layout_name: &LayoutName,
        layout: &ValidLayout,
        edit: &crate::domain::memory_edit::MemoryEdit,
    ) -> StoreResult<JobRecord>;
    /// The run a job recorded last, if any.
    async fn run_of_job(&self, tenant: TenantId, job_id: Uuid) -> StoreResult<Option<PhaseTwoRun>>;
    /// Counts a use by `session` of each rollout (once per pair, ever); ids
    /// that are neither a rollout nor a raw memory of the layout are
    /// ignored. How many pairs were new.
    async fn record_memory_uses(
        &self,
        tenant: TenantId,
        workspace: &WorkspaceName,
        layout: &LayoutName,
        session: &SessionId,
        rollouts: &[RolloutId],
        at: DateTime<Utc>,
    ) -> StoreResult<u64>;
    /// The usage of every rollout of the layout that was used.
    async fn memory_usage(
        &self,
        tenant: TenantId,
        workspace: &WorkspaceName,
        layout: &LayoutName,
    ) -> StoreResult<Vec<crate::domain::index::MemoryUsage>>;
    /// Every raw memory of the layout in the workspace, in no order.
    async fn all_raw_memories(
        &self,
        tenant: TenantId,
        workspace: &WorkspaceName,
        layout: &LayoutName,
    ) -> StoreResult<Vec<RawMemoryRecord>>;
}
