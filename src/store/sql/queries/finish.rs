//! A job's finish: the fenced write of its outcome, with what the outcome
//! brings along (the raw-memory row, an import's rows, a forget's erasure, a
//! phase-two run and its history, the tenant's usage and events).

use super::*;
use crate::domain::events;
use crate::store::*;
use chrono::{DateTime, Utc};

impl SqlStore<DB> {
    /// A job's finish, within the transaction `tx` (its caller commits):
    /// `false` when the worker no longer owns the job.
    pub(super) async fn finish_in(
        tx: &mut DbConnection,
        claimed: &ClaimedJob,
        finish: &JobFinish,
        now: DateTime<Utc>,
    ) -> StoreResult<bool> {
        let job = &claimed.job;
        let owned =
            sqlx::query(locking::<DB>("SELECT id FROM jobs WHERE id = $1 AND lease_token = $2 AND state = 'running'"))
                .bind(job.job_id)
                .bind(claimed.token)
                .fetch_optional(&mut *tx)
                .await?;
        if owned.is_none() {
            return Ok(false);
        }
        let usage = finish.usage.to_string();
        let (state, run_after, error, token_limit, finished_at) = match &finish.outcome {
            JobOutcome::Succeeded { .. } => (JobState::Succeeded, job.run_after, None, None, Some(now)),
            JobOutcome::Skipped => (JobState::Skipped, job.run_after, None, None, Some(now)),
            JobOutcome::RetryAt { at, error, token_limit } => {
                (JobState::Queued, *at, Some(error.as_str()), *token_limit, None)
            }
            JobOutcome::Failed { error } => (JobState::Failed, job.run_after, Some(error.as_str()), None, Some(now)),
        };
        sqlx::query(
            "UPDATE jobs SET state = $2, run_after = $3, last_error = $4, token_limit = COALESCE($5, token_limit),
                    finished_at = $6, usage = $7, lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL,
                    publish_id = COALESCE($8, publish_id), redactions = COALESCE($9, redactions)
             WHERE id = $1",
        )
        .bind(job.job_id)
        .bind(state.as_str())
        .bind(run_after)
        .bind(error)
        .bind(token_limit)
        .bind(finished_at)
        .bind(usage)
        .bind(finish.publish_id)
        .bind(
            (!finish.redactions.is_empty())
                .then(|| serde_json::to_string(&finish.redactions).expect("counts serialise")),
        )
        .execute(&mut *tx)
        .await?;
        if let JobOutcome::Succeeded { raw_memory: Some(raw) } = &finish.outcome {
            Self::upsert_raw_memory(&mut *tx, claimed.tenant_id, &job.workspace, &job.layout, raw, job.job_id, now)
                .await?;
        }
        if let (JobKind::Import, JobOutcome::Succeeded { .. }, Some(record)) =
            (job.kind, &finish.outcome, &finish.import)
            && let Err(refused) = Self::register_import(&mut *tx, claimed, record, now).await?
        {
            // Its files are not published: the job fails with why.
            sqlx::query(
                "UPDATE jobs SET state = 'failed', last_error = $2, finished_at = $3, lease_owner = NULL,
                        lease_token = NULL, lease_expires_at = NULL WHERE id = $1",
            )
            .bind(job.job_id)
            .bind(refused.as_str())
            .bind(now)
            .execute(&mut *tx)
            .await?;
            let failed = events::job_failed(
                job.job_id,
                job.kind.as_str(),
                job.workspace.as_str(),
                job.layout.as_str(),
                &refused,
            );
            Self::record_events_in(&mut *tx, claimed.tenant_id, &[failed], now).await?;
            return Ok(false);
        }
        let mut tally = usage::Tally { model: Some((job.kind, finish.accounting.attempt_usage)), ..Default::default() };
        let mut news = Vec::new();
        if let JobOutcome::Failed { error } = &finish.outcome {
            news.push(events::job_failed(
                job.job_id,
                job.kind.as_str(),
                job.workspace.as_str(),
                job.layout.as_str(),
                error,
            ));
        }
        tally.add_storage(job.workspace.as_str(), finish.accounting.storage_delta);
        let mut tenant_gone = false;
        if job.kind == JobKind::Forget && matches!(finish.outcome, JobOutcome::Succeeded { .. }) {
            match Self::erase_forgotten(&mut *tx, claimed).await? {
                Freed::RolloutBytes(bytes) => tally.add_storage(job.workspace.as_str(), -bytes),
                Freed::Workspace => {
                    tally.dropped_scopes.push(job.workspace.as_str().to_owned());
                    tally.recount_history = true;
                }
                Freed::Tenant => tenant_gone = true,
            }
            let spec = job.forget.as_ref().map(|f| serde_json::to_value(f).expect("a forget spec serialises"));
            news.push(events::forget_completed(job.job_id, job.workspace.as_str(), spec.unwrap_or_default()));
        }
        if let Some(report) = &finish.phase_two {
            let run = &report.run;
            sqlx::query(
                "INSERT INTO phase_two_runs (id, tenant_id, workspace, layout, job_id, session_id, state, selected, added,
                                             retained, removed, files_changed, usage, turns, error, started_at, finished_at,
                                             sessions, restored_from, kind, ledger, redactions)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21, $22)",
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
            .bind(run.usage.to_string())
            .bind(run.turns)
            .bind(run.error.as_deref())
            .bind(run.started_at)
            .bind(run.finished_at)
            .bind(serde_json::to_string(&run.sessions).expect("a list of ids serialises"))
            .bind(run.restored_from)
            .bind(run.kind.as_str())
            .bind(run.ledger.as_ref().map(serde_json::Value::to_string))
            .bind(serde_json::to_string(&run.redactions).expect("counts serialise"))
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
                tally.recount_history = true;
            }
            tally.runs += 1;
            news.push(events::run_finished(&events::RunSummary {
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
            }));
        }
        if !tenant_gone {
            let used = finish.accounting.attempt_usage;
            let tokens = used.input_tokens + used.output_tokens;
            if let Some(limit) = finish.accounting.model_tokens_per_day
                && tokens > 0
            {
                Self::enforce_token_budget_in(&mut *tx, claimed.tenant_id, Some(limit), tokens, now).await?;
            }
            let tallies = std::collections::BTreeMap::from([(claimed.tenant_id, tally)]);
            Self::count_usage_in(&mut *tx, &tallies, now).await?;
            Self::record_events_in(&mut *tx, claimed.tenant_id, &news, now).await?;
        }
        Ok(true)
    }
}
