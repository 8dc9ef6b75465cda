//! A batch of job finishes, recorded in one transaction: the fenced write of
//! each outcome, with what it brings along (the raw-memory row, an import's
//! rows, a forget's erasure, a phase-two run and its history), then every
//! tenant's usage and events once for the whole batch.

use super::*;
use crate::domain::events;
use crate::store::*;
use chrono::{DateTime, Utc};
use sqlx::Row;
use std::collections::{BTreeMap, BTreeSet, HashSet};
use uuid::Uuid;

/// What a batch's finishes add to each tenant's counters and events: written
/// after every finish, tenants in order, as every transaction takes the
/// counter rows (see `usage`).
#[derive(Default)]
struct BatchEffects {
    tenants: BTreeMap<TenantId, (usage::UsageDelta, Vec<events::NewEvent>)>,
    /// Tenants a forget erased: nothing of theirs is counted any more.
    gone: BTreeSet<TenantId>,
    /// Tokens each tenant's finishes of the batch used so far, not yet counted.
    tokens: BTreeMap<TenantId, u64>,
}

impl BatchEffects {
    /// Bytes the batch's earlier finishes add to the tenant's storage, not yet counted.
    fn storage_added(&self, tenant: TenantId) -> i64 {
        self.tenants.get(&tenant).map_or(0, |(delta, _)| delta.storage.values().sum())
    }

    fn add(&mut self, tenant: TenantId, delta: usage::UsageDelta, recorded_events: Vec<events::NewEvent>) {
        let (counted, recorded) = self.tenants.entry(tenant).or_default();
        counted.merge(delta);
        recorded.extend(recorded_events);
    }
}

/// The `usage` column's text.
fn stored_usage(usage: crate::llm::TokenUsage) -> String {
    serde_json::to_string(&usage).expect("token usage serializes")
}

/// A finish that touches only its job row, the raw-memory index and the
/// usage counters: a phase one that did not fail, with no token budget to
/// enforce. A batch of them is written with one statement per table.
fn is_plain(claimed: &ClaimedJob, finish: &JobFinish) -> bool {
    let used = finish.accounting.attempt_usage;
    claimed.job.kind == JobKind::PhaseOne
        && finish.phase_two.is_none()
        && finish.import.is_none()
        && finish.passages.is_none()
        && !matches!(finish.outcome, JobOutcome::Failed { .. })
        && (finish.accounting.model_tokens_per_day.is_none() || used.input_tokens + used.output_tokens == 0)
}

/// The job row's columns an outcome sets.
struct OutcomeColumns<'f> {
    state: JobState,
    run_after: DateTime<Utc>,
    error: Option<&'f str>,
    token_limit: Option<i64>,
    finished_at: Option<DateTime<Utc>>,
    usage: String,
    redactions: Option<String>,
}

impl<'f> OutcomeColumns<'f> {
    fn of(job: &JobRecord, finish: &'f JobFinish, now: DateTime<Utc>) -> Self {
        let (state, run_after, error, token_limit, finished_at) = match &finish.outcome {
            JobOutcome::Succeeded { .. } => (JobState::Succeeded, job.run_after, None, None, Some(now)),
            JobOutcome::Skipped => (JobState::Skipped, job.run_after, None, None, Some(now)),
            JobOutcome::RetryAt { at, error, token_limit } => {
                (JobState::Queued, *at, Some(error.as_str()), *token_limit, None)
            }
            JobOutcome::Failed { error } => (JobState::Failed, job.run_after, Some(error.as_str()), None, Some(now)),
        };
        let redactions = (!finish.redactions.is_empty())
            .then(|| serde_json::to_string(&finish.redactions).expect("counts serialise"));
        Self { state, run_after, error, token_limit, finished_at, usage: stored_usage(finish.usage), redactions }
    }
}

impl SqlStore<DB> {
    /// The event a finished run reports: `memory.edited` for an edit that
    /// published (a failed one reports `job.failed`), `run.succeeded` or
    /// `run.failed` for the others.
    fn run_event(job: &JobRecord, run: &PhaseTwoRun) -> Option<events::NewEvent> {
        if job.kind == JobKind::Edit {
            let paths: Vec<&str> = run.files_changed.iter().map(String::as_str).collect();
            return (run.state == RunState::Succeeded)
                .then(|| events::memory_edited(run.run_id, job.workspace.as_str(), job.layout.as_str(), &paths));
        }
        Some(events::run_finished(&events::RunSummary {
            run_id: run.run_id,
            workspace: job.workspace.as_str(),
            layout: job.layout.as_str(),
            kind: &run.kind,
            succeeded: run.state == RunState::Succeeded,
            selected: run.selected,
            added: run.added,
            retained: run.retained,
            removed: run.removed,
            error: run.error.as_deref(),
        }))
    }

    /// Records a batch of finishes within `tx` (its caller commits): for
    /// each, `false` when the worker no longer owns the job (or an import
    /// was refused).
    pub(super) async fn finish_batch_in(
        tx: &mut DbConnection,
        batch: &[(&ClaimedJob, &JobFinish)],
        now: DateTime<Utc>,
    ) -> StoreResult<Vec<bool>> {
        let owned = Self::lock_owned_jobs(&mut *tx, batch).await?;
        let mut recorded: Vec<bool> = batch.iter().map(|(claimed, _)| owned.contains(&claimed.job.job_id)).collect();
        let mut effects = BatchEffects::default();
        let versions = batch.iter().zip(&recorded).filter(|(_, owned)| **owned).filter_map(|((claimed, finish), _)| {
            finish.versions.as_ref().map(|v| (claimed.tenant_id, &claimed.job.workspace, v.publish_id))
        });
        Self::lock_generations_in(&mut *tx, versions.collect()).await?;
        let plain: Vec<_> =
            batch.iter().zip(&recorded).filter(|((c, f), owned)| **owned && is_plain(c, f)).map(|(b, _)| *b).collect();
        Self::finish_plain_in(&mut *tx, &plain, now, &mut effects).await?;
        for ((claimed, finish), recorded) in batch.iter().zip(recorded.iter_mut()) {
            if *recorded && !is_plain(claimed, finish) {
                *recorded = Self::finish_owned_in(&mut *tx, claimed, finish, now, &mut effects).await?;
            }
        }
        for tenant in &effects.gone {
            effects.tenants.remove(tenant);
        }
        let deltas: BTreeMap<TenantId, usage::UsageDelta> =
            effects.tenants.iter_mut().map(|(tenant, (delta, _))| (*tenant, std::mem::take(delta))).collect();
        Self::count_usage_in(&mut *tx, &deltas, now).await?;
        for (tenant, (_, recorded_events)) in &effects.tenants {
            Self::record_events_in(&mut *tx, *tenant, recorded_events, now).await?;
        }
        Ok(recorded)
    }

    /// The batch's jobs this worker still owns (running, under its lease
    /// token), their rows locked in id order.
    async fn lock_owned_jobs(tx: &mut DbConnection, batch: &[(&ClaimedJob, &JobFinish)]) -> StoreResult<HashSet<Uuid>> {
        if batch.is_empty() {
            return Ok(HashSet::new());
        }
        let mut owned = sqlx::QueryBuilder::<DB>::new("SELECT id FROM jobs WHERE state = 'running' AND (");
        let mut leases = owned.separated(" OR ");
        for (claimed, _) in batch {
            leases.push("(id = ").push_bind_unseparated(claimed.job.job_id);
            leases.push_unseparated(" AND lease_token = ").push_bind_unseparated(claimed.token).push_unseparated(")");
        }
        owned.push(") ORDER BY id").push(DB::LOCK_ROWS);
        let rows = owned.build().fetch_all(&mut *tx).await?;
        Ok(rows.iter().map(|row| row.try_get::<Uuid, _>("id")).collect::<Result<_, _>>()?)
    }

    /// Plain finishes (see [`is_plain`]), owned and locked: one `UPDATE` of
    /// their jobs, one upsert of their raw memories.
    async fn finish_plain_in(
        tx: &mut DbConnection,
        plain: &[(&ClaimedJob, &JobFinish)],
        now: DateTime<Utc>,
        effects: &mut BatchEffects,
    ) -> StoreResult<()> {
        if plain.is_empty() {
            return Ok(());
        }
        let mut update = sqlx::QueryBuilder::<DB>::new(
            "WITH finished (id, state, run_after, last_error, token_limit, finished_at, usage, redactions, publish_id) AS (",
        );
        update.push_values(plain, |mut row, (claimed, finish)| {
            let columns = OutcomeColumns::of(&claimed.job, finish, now);
            row.push_bind(claimed.job.job_id)
                .push_bind(columns.state.as_str())
                .push_bind(columns.run_after)
                .push_bind(columns.error.map(str::to_owned))
                .push_bind(columns.token_limit)
                .push_bind(columns.finished_at)
                .push_bind(columns.usage)
                .push_bind(columns.redactions)
                .push_bind(finish.publish_id);
        });
        update.push(
            ") UPDATE jobs SET state = finished.state, run_after = finished.run_after,
                    last_error = finished.last_error, token_limit = COALESCE(finished.token_limit, jobs.token_limit),
                    finished_at = finished.finished_at, usage = finished.usage, lease_owner = NULL,
                    lease_token = NULL, lease_expires_at = NULL,
                    publish_id = COALESCE(finished.publish_id, jobs.publish_id),
                    redactions = COALESCE(finished.redactions, jobs.redactions)
             FROM finished WHERE jobs.id = finished.id",
        );
        update.build().execute(&mut *tx).await?;
        // Two finishes of one rollout in a batch: the later one's row stands,
        // as it would have, one after the other.
        let mut made = BTreeMap::new();
        for (claimed, finish) in plain {
            if let JobOutcome::Succeeded { raw_memory: Some(raw) } = &finish.outcome {
                let job = &claimed.job;
                let key = (claimed.tenant_id, job.workspace.as_str(), job.layout.as_str(), raw.rollout_id.as_str());
                made.insert(key, (raw, job.job_id));
            }
            let mut delta = usage::UsageDelta::default();
            delta.add_model_use(claimed.job.kind, finish.accounting.attempt_usage);
            delta.add_storage(claimed.job.workspace.as_str(), finish.accounting.storage_delta);
            if let (JobOutcome::Succeeded { .. }, Some(versions)) = (&finish.outcome, &finish.versions) {
                let workspace = &claimed.job.workspace;
                let added = Self::record_versions_in(&mut *tx, claimed.tenant_id, workspace, versions, now).await?;
                delta.add_storage(workspace.as_str(), added);
            }
            effects.add(claimed.tenant_id, delta, Vec::new());
        }
        let made: Vec<_> = made
            .into_iter()
            .map(|((tenant, workspace, layout, _), (raw, job_id))| memory::IndexedRawMemory {
                tenant,
                workspace,
                layout,
                raw,
                job_id,
            })
            .collect();
        Self::upsert_raw_memories(&mut *tx, &made, now).await
    }

    /// A finish of a job this worker owns (its row locked); its counters and
    /// events are added to `effects`. `false` when an import's finish finds
    /// it may not land after all: the job then fails and publishes nothing.
    async fn finish_owned_in(
        tx: &mut DbConnection,
        claimed: &ClaimedJob,
        finish: &JobFinish,
        now: DateTime<Utc>,
        effects: &mut BatchEffects,
    ) -> StoreResult<bool> {
        let job = &claimed.job;
        Self::record_outcome_in(&mut *tx, claimed, finish, now).await?;
        let succeeded = matches!(finish.outcome, JobOutcome::Succeeded { .. });
        if let JobOutcome::Succeeded { raw_memory: Some(raw) } = &finish.outcome {
            Self::upsert_raw_memory(&mut *tx, claimed.tenant_id, &job.workspace, &job.layout, raw, job.job_id, now)
                .await?;
        }
        if let (JobKind::Import, true, Some(record)) = (job.kind, succeeded, &finish.import) {
            // In a bucket the files other than rollouts are versions, recorded below.
            let versions = finish.versions.iter().flat_map(|v| &v.files).filter_map(|(_, version)| version.as_ref());
            let storage_added = finish.accounting.storage_delta
                + versions.map(|v| v.bytes as i64).sum::<i64>()
                + effects.storage_added(claimed.tenant_id);
            if !Self::land_import_in(&mut *tx, claimed, record, storage_added, now).await? {
                return Ok(false);
            }
            let mut layouts: Vec<&LayoutName> = record.layouts.iter().map(|(name, _)| name).collect();
            layouts.extend(record.raw_memories.iter().map(|(name, _)| name));
            layouts.sort();
            layouts.dedup();
            for layout in layouts {
                let at = IndexedLayout {
                    tenant: claimed.tenant_id,
                    workspace: job.workspace.clone(),
                    layout: layout.clone(),
                };
                Self::replace_passages_in(&mut *tx, &at, &PassageChanges::default(), now).await?;
            }
        }
        if let (true, Some(changes)) = (succeeded, &finish.passages) {
            let at = IndexedLayout {
                tenant: claimed.tenant_id,
                workspace: job.workspace.clone(),
                layout: job.layout.clone(),
            };
            Self::replace_passages_in(&mut *tx, &at, changes, now).await?;
        }
        let mut delta = usage::UsageDelta::default();
        delta.add_model_use(job.kind, finish.accounting.attempt_usage);
        delta.add_storage(job.workspace.as_str(), finish.accounting.storage_delta);
        if let (true, Some(versions)) = (succeeded, &finish.versions) {
            let added = Self::record_versions_in(&mut *tx, claimed.tenant_id, &job.workspace, versions, now).await?;
            delta.add_storage(job.workspace.as_str(), added);
        }
        let mut recorded_events = Vec::new();
        if let JobOutcome::Failed { error } = &finish.outcome {
            recorded_events.push(job_failed_event(claimed, error));
        }
        if job.kind == JobKind::Forget && succeeded {
            match Self::finish_forget_in(&mut *tx, claimed, &mut delta).await? {
                Some(completed) => recorded_events.push(completed),
                None => {
                    effects.gone.insert(claimed.tenant_id);
                    return Ok(true);
                }
            }
        }
        if let Some(report) = &finish.phase_two {
            Self::record_run_in(&mut *tx, claimed, report, now, &mut delta).await?;
            recorded_events.extend(Self::run_event(job, &report.run));
        }
        if job.kind == JobKind::Edit && succeeded {
            // Published: the request (up to a megabyte of text) is not kept.
            sqlx::query("UPDATE jobs SET spec = $2 WHERE id = $1")
                .bind(job.job_id)
                .bind(crate::domain::job::JobSpec::Edit(None).stored())
                .execute(&mut *tx)
                .await?;
        }
        Self::count_tokens_in(&mut *tx, claimed, finish, now, effects).await?;
        effects.add(claimed.tenant_id, delta, recorded_events);
        Ok(true)
    }

    /// The job row's outcome: state, error, usage, the publish to complete.
    async fn record_outcome_in(
        tx: &mut DbConnection,
        claimed: &ClaimedJob,
        finish: &JobFinish,
        now: DateTime<Utc>,
    ) -> StoreResult<()> {
        let columns = OutcomeColumns::of(&claimed.job, finish, now);
        sqlx::query(
            "UPDATE jobs SET state = $2, run_after = $3, last_error = $4, token_limit = COALESCE($5, token_limit),
                    finished_at = $6, usage = $7, lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL,
                    publish_id = COALESCE($8, publish_id), redactions = COALESCE($9, redactions)
             WHERE id = $1",
        )
        .bind(claimed.job.job_id)
        .bind(columns.state.as_str())
        .bind(columns.run_after)
        .bind(columns.error)
        .bind(columns.token_limit)
        .bind(columns.finished_at)
        .bind(columns.usage)
        .bind(finish.publish_id)
        .bind(columns.redactions)
        .execute(&mut *tx)
        .await?;
        Ok(())
    }

    /// Registers a succeeded import's workspace; when it may not land (the
    /// workspace was taken meanwhile, or the storage limit is reached) the
    /// job fails with why and `false` is answered.
    async fn land_import_in(
        tx: &mut DbConnection,
        claimed: &ClaimedJob,
        record: &ImportRecord,
        storage_added: i64,
        now: DateTime<Utc>,
    ) -> StoreResult<bool> {
        let Err(refused) = Self::register_import(&mut *tx, claimed, record, storage_added, now).await? else {
            return Ok(true);
        };
        sqlx::query(
            "UPDATE jobs SET state = 'failed', last_error = $2, finished_at = $3, lease_owner = NULL,
                    lease_token = NULL, lease_expires_at = NULL WHERE id = $1",
        )
        .bind(claimed.job.job_id)
        .bind(refused.as_str())
        .bind(now)
        .execute(&mut *tx)
        .await?;
        Self::record_events_in(&mut *tx, claimed.tenant_id, &[job_failed_event(claimed, &refused)], now).await?;
        Ok(false)
    }

    /// Erases what a succeeded forget forgot; its `forget.completed` event,
    /// or `None` when the tenant itself is gone.
    async fn finish_forget_in(
        tx: &mut DbConnection,
        claimed: &ClaimedJob,
        delta: &mut usage::UsageDelta,
    ) -> StoreResult<Option<events::NewEvent>> {
        let job = &claimed.job;
        match Self::erase_forgotten(&mut *tx, claimed).await? {
            Freed::RolloutBytes(bytes) => delta.add_storage(job.workspace.as_str(), -bytes),
            Freed::Workspace => {
                delta.dropped_scopes.push(job.workspace.as_str().to_owned());
                delta.recount_history = true;
            }
            Freed::Tenant => return Ok(None),
        }
        let spec = job.forget.as_ref().map(|f| serde_json::to_value(f).expect("a forget spec serialises"));
        Ok(Some(events::forget_completed(job.job_id, job.workspace.as_str(), spec.unwrap_or_default())))
    }

    /// A phase-two, restore, forget or edit run's record, the layout's
    /// selection it settled on and its memory history.
    async fn record_run_in(
        tx: &mut DbConnection,
        claimed: &ClaimedJob,
        report: &PhaseTwoReport,
        now: DateTime<Utc>,
        delta: &mut usage::UsageDelta,
    ) -> StoreResult<()> {
        let (job, run) = (&claimed.job, &report.run);
        sqlx::query(
            "INSERT INTO phase_two_runs (id, tenant_id, workspace, layout, job_id, session_id, state, selected, added,
                                         retained, removed, files_changed, usage, turns, error, started_at, finished_at,
                                         sessions, restored_from, kind, ledger, redactions, rollout_id, reason)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21, $22,
                     $23, $24)",
        )
        .bind(run.run_id)
        .bind(claimed.tenant_id)
        .bind(job.workspace.as_str())
        .bind(job.layout.as_str())
        .bind(job.job_id)
        .bind(run.session_id.as_str())
        .bind(run.state.as_str())
        .bind(run.selected)
        .bind(run.added)
        .bind(run.retained)
        .bind(run.removed)
        .bind(serde_json::to_string(&run.files_changed).expect("a list of paths serialises"))
        .bind(stored_usage(run.usage))
        .bind(run.turns)
        .bind(run.error.as_deref())
        .bind(run.started_at)
        .bind(run.finished_at)
        .bind(serde_json::to_string(&run.sessions).expect("a list of ids serialises"))
        .bind(run.restored_from)
        .bind(run.kind.as_str())
        .bind(run.ledger.as_ref().map(serde_json::Value::to_string))
        .bind(serde_json::to_string(&run.redactions).expect("counts serialise"))
        .bind(run.rollout_id.as_deref())
        .bind(run.reason.as_deref())
        .execute(&mut *tx)
        .await?;
        if let Some(document) = &report.selection {
            sqlx::query(
                "INSERT INTO phase_two_selections (tenant_id, workspace, layout, run_id, document, updated_at)
                 VALUES ($1, $2, $3, $4, $5, $6)
                 ON CONFLICT (tenant_id, workspace, layout) DO UPDATE SET
                    run_id = excluded.run_id, document = excluded.document, updated_at = excluded.updated_at",
            )
            .bind(claimed.tenant_id)
            .bind(job.workspace.as_str())
            .bind(job.layout.as_str())
            .bind(run.run_id)
            .bind(document.to_string())
            .bind(now)
            .execute(&mut *tx)
            .await?;
        }
        if let Some(history) = &report.history {
            Self::record_history(&mut *tx, claimed, run, history).await?;
            delta.recount_history = true;
        }
        delta.runs += 1;
        Ok(())
    }

    /// Adds the attempt's tokens to what the batch has used of the tenant's
    /// daily budget, and holds the tenant's model jobs once it is spent.
    async fn count_tokens_in(
        tx: &mut DbConnection,
        claimed: &ClaimedJob,
        finish: &JobFinish,
        now: DateTime<Utc>,
        effects: &mut BatchEffects,
    ) -> StoreResult<()> {
        let used = finish.accounting.attempt_usage;
        let tokens = used.input_tokens + used.output_tokens;
        let uncounted = effects.tokens.entry(claimed.tenant_id).or_default();
        *uncounted += tokens;
        if let Some(limit) = finish.accounting.model_tokens_per_day
            && tokens > 0
        {
            Self::enforce_token_budget_in(&mut *tx, claimed.tenant_id, Some(limit), *uncounted, now).await?;
        }
        Ok(())
    }
}

fn job_failed_event(claimed: &ClaimedJob, error: &str) -> events::NewEvent {
    let job = &claimed.job;
    events::job_failed(job.job_id, job.kind.as_str(), job.workspace.as_str(), job.layout.as_str(), error)
}
