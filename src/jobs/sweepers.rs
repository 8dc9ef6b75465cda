//! The sweepers that run beside the workers: sessions left unsettled,
//! retention, the storage counters, eager phase one.

use super::{WorkerContext, reconcile_storage};
use chrono::Utc;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Every few seconds: settle sessions whose last worker died before it could.
pub(super) async fn session_sweeper(ctx: Arc<WorkerContext>, shutdown: CancellationToken) {
    let ctx = &ctx;
    every(SWEEP_INTERVAL, shutdown, move || async move {
        match ctx.store.settle_finished_sessions().await {
            Ok(0) => {}
            Ok(n) => {
                tracing::info!(sessions = n, "settled finished sessions");
                ctx.events.committed();
            }
            Err(e) => tracing::warn!(error = %crate::error_chain(&e), "settling finished sessions failed"),
        }
    })
    .await;
}

const SWEEP_INTERVAL: Duration = Duration::from_secs(5);

/// Where workspace files live in a bucket, every few seconds: drop this
/// replica's copies of workspaces another replica changed or forgot, and do
/// the chores of finishes whose process died before it could; now and then,
/// remove the versions no finish recorded.
pub(super) async fn bucket_sweeper(ctx: Arc<WorkerContext>, shutdown: CancellationToken) {
    let (Some(bucket), Some(cache)) = (ctx.volumes.bucket().cloned(), ctx.volumes.cache().cloned()) else { return };
    let (ctx, bucket, cache) = (&ctx, &bucket, &cache);
    let mut rounds = 0u64;
    every(SWEEP_INTERVAL, shutdown, move || {
        rounds += 1;
        let unreferenced_round = rounds % UNREFERENCED_EVERY_ROUNDS == 1;
        async move {
            let store = ctx.store.as_ref();
            cache.drop_stale(store).await;
            bucket.drop_expired_copies();
            // The object store down: what follows could only fail (and log
            // so for each workspace); it is all left for when it answers.
            if !bucket.reachable().await {
                return;
            }
            rewrite_idle_rollouts(ctx, bucket).await;
            let late = Utc::now() - chrono::Duration::seconds(30);
            match store.workspaces_with_chores(late, 100).await {
                Ok(workspaces) => {
                    for (tenant, workspace) in workspaces {
                        if let Err(e) = bucket.do_chores(store, tenant, &workspace).await {
                            tracing::warn!(error = %crate::error_chain(&e), "a workspace's bucket chores failed");
                        }
                    }
                }
                Err(e) => tracing::warn!(error = %crate::error_chain(&e), "listing bucket chores failed"),
            }
            if unreferenced_round {
                // Older than any attempt that may still record them.
                let grace = ctx.settings.lease * 4;
                match bucket.remove_unreferenced_versions(store, grace).await {
                    Ok(0) => {}
                    Ok(removed) => {
                        tracing::info!(removed, "removed versions no finish recorded, archives no job reads")
                    }
                    Err(e) => tracing::warn!(error = %crate::error_chain(&e), "sweeping unrecorded versions failed"),
                }
            }
        }
    })
    .await;
}

/// Moves the journal's lines of idle rollouts into their objects, so that
/// the journal drains also for rollouts no phase one reads (a layout that
/// generates nothing, a phase one skipped).
async fn rewrite_idle_rollouts(ctx: &WorkerContext, bucket: &crate::bucket::Bucket) {
    let before = Utc::now() - chrono::Duration::from_std(ctx.settings.idle_rollout).unwrap_or(chrono::Duration::MAX);
    let idle = match ctx.store.idle_journaled_rollouts(before, 100).await {
        Ok(idle) => idle,
        Err(e) => return tracing::warn!(error = %crate::error_chain(&e), "listing idle rollouts failed"),
    };
    for rollout in &idle {
        if let Err(e) = bucket.rewrite_rollout(ctx.store.as_ref(), rollout.at(), &rollout.rollout_path).await {
            tracing::warn!(error = %crate::error_chain(&e), "rewriting an idle rollout's object failed");
        }
    }
}

/// The unrecorded versions are looked for every this many rounds (10 minutes).
const UNREFERENCED_EVERY_ROUNDS: u64 = 120;

/// Every couple of seconds: embed the passages of layouts whose indexing is
/// due (published while this process was busy, on another replica, or
/// after a failed embedding call whose backoff has passed).
pub(super) async fn index_sweeper(ctx: Arc<WorkerContext>, shutdown: CancellationToken) {
    let Some(indexer) = ctx.indexer.clone() else { return };
    let indexer = &indexer;
    every(Duration::from_secs(2), shutdown, move || async move { indexer.sweep().await }).await;
}

/// Runs `round` at once and then every `period`, until shutdown is asked for
/// (a round under way finishes; the wait between rounds does not).
async fn every<F, Fut>(period: Duration, shutdown: CancellationToken, mut round: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    while !shutdown.is_cancelled() {
        round().await;
        tokio::select! {
            _ = tokio::time::sleep(period) => {}
            _ = shutdown.cancelled() => {}
        }
    }
}

/// Rows one retention statement deletes at most: each batch is a short
/// transaction of its own, so appends never wait long behind a sweep.
const RETENTION_BATCH: i64 = 1000;

/// Deletes in batches until a batch comes back short.
async fn in_batches<F, Fut>(mut batch: F) -> crate::store::StoreResult<u64>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = crate::store::StoreResult<u64>>,
{
    let mut total = 0;
    loop {
        let deleted = batch().await?;
        total += deleted;
        if deleted < RETENTION_BATCH as u64 {
            return Ok(total);
        }
    }
}

/// Removes every idempotency key made before `before`, a batch at a time.
pub async fn expire_idempotency_keys(
    store: &dyn crate::store::Store,
    before: chrono::DateTime<Utc>,
) -> crate::store::StoreResult<u64> {
    in_batches(|| store.expire_idempotency_keys(before, RETENTION_BATCH)).await
}

/// One retention sweep (SPEC §2.7): expired idempotency keys, records and
/// delivered events go, idle rollouts are queued for forgetting.
pub async fn sweep_retention(ctx: &WorkerContext) -> crate::store::StoreResult<()> {
    let retention = &ctx.settings.retention;
    let now = Utc::now();
    let to_chrono = |d: Duration| chrono::Duration::from_std(d).unwrap_or(chrono::Duration::MAX);
    let keys_before = now - to_chrono(retention.idempotency_ttl);
    let keys = expire_idempotency_keys(ctx.store.as_ref(), keys_before).await?;
    let mut records = 0;
    if let Some(keep) = retention.records {
        let before = now - to_chrono(keep);
        records = in_batches(|| ctx.store.expire_records(before, RETENTION_BATCH)).await?;
    }
    let events_before = now - to_chrono(retention.events);
    let events = in_batches(|| ctx.store.sweep_events(events_before, RETENTION_BATCH)).await?;
    super::leftovers::remove_orphaned_archives(&ctx.store, &ctx.volumes, ctx.settings.body_timeout).await;
    super::leftovers::repair_rollout_files(&ctx.store, &ctx.volumes).await;
    let forgets = ctx.store.queue_retention_forgets(now, retention.rollout_days).await?;
    if !forgets.is_empty() {
        ctx.wake.notify_waiters();
    }
    if keys + records + events > 0 || !forgets.is_empty() {
        tracing::info!(idempotency_keys = keys, records, events, forget_jobs = forgets.len(), "retention sweep");
    }
    Ok(())
}

pub(super) async fn retention_sweeper(ctx: Arc<WorkerContext>, shutdown: CancellationToken) {
    let ctx = &ctx;
    every(ctx.settings.retention.sweep_every, shutdown, move || async move {
        if let Err(e) = sweep_retention(ctx).await {
            tracing::warn!(error = %crate::error_chain(&e), "the retention sweep failed; it runs again later");
        }
    })
    .await;
}

/// Walks the volume to correct the storage counters, at start-up and then
/// every `MEMORYD_STORAGE_RECONCILE_SECS`.
pub(super) async fn storage_reconciler(ctx: Arc<WorkerContext>, shutdown: CancellationToken) {
    let ctx = &ctx;
    every(ctx.settings.storage_reconcile, shutdown, move || async move {
        match reconcile_storage(&ctx.store, &ctx.volumes).await {
            Ok(report) if report.corrected > 0 => {
                tracing::info!(corrected = report.corrected, drift_bytes = report.drift, "storage reconciled")
            }
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(error = %crate::error_chain(&e), "reconciling storage failed; it runs again later")
            }
        }
    })
    .await;
}

/// Every few seconds: vacuums the hot tables that carry more than `floor`
/// dead row versions (Postgres), so that claims, settles and scrapes do not
/// walk past them when the server's autovacuum is off or behind.
pub(super) async fn dead_row_reclaimer(ctx: Arc<WorkerContext>, floor: i64, shutdown: CancellationToken) {
    let ctx = &ctx;
    every(SWEEP_INTERVAL, shutdown, move || async move {
        match ctx.store.reclaim_dead_rows(floor).await {
            Ok(vacuumed) => {
                for (table, dead) in vacuumed {
                    crate::metrics::table_vacuumed(&table);
                    tracing::info!(table, dead_rows = dead, "vacuumed a table");
                }
            }
            Err(e) => {
                tracing::warn!(error = %crate::error_chain(&e), "reclaiming dead rows failed; it runs again later")
            }
        }
    })
    .await;
}

/// Queues eager phase one for rollouts idle `idle` long in open sessions
/// (SPEC §5), looking every quarter of that (at most every 5 s).
pub(super) async fn eager_sweeper(ctx: Arc<WorkerContext>, idle: Duration, shutdown: CancellationToken) {
    let period = (idle / 4).clamp(Duration::from_millis(250), SWEEP_INTERVAL);
    let ctx = &ctx;
    every(period, shutdown, move || async move {
        let idle_since = Utc::now() - chrono::Duration::from_std(idle).unwrap_or(chrono::Duration::MAX);
        match ctx.store.queue_eager_phase_one(idle_since, 500).await {
            Ok(jobs) if jobs.is_empty() => {}
            Ok(jobs) => {
                crate::metrics::eager_phase_one_queued(jobs.len());
                tracing::info!(jobs = jobs.len(), "eager phase one queued for idle rollouts");
                ctx.wake.notify_waiters();
            }
            Err(e) => tracing::warn!(error = %crate::error_chain(&e), "queuing eager phase one failed"),
        }
    })
    .await;
}
