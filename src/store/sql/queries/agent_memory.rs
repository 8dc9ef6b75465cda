//! The running agent's memory (SPEC §2.10): edit jobs, and the uses of raw
//! memories that rank a `usage` layout's selection.

use super::rows::*;
use super::*;
use crate::domain::ids::{LayoutName, RolloutId, SessionId, WorkspaceName};
use crate::domain::index::MemoryUsage;
use crate::domain::job::JobSpec;
use crate::domain::layout::ValidLayout;
use crate::domain::memory_edit::MemoryEdit;
use crate::store::*;
use chrono::{DateTime, Utc};
use sqlx::Row;
use uuid::Uuid;

#[async_trait::async_trait]
impl AgentMemoryStore for SqlStore<DB> {
    async fn queue_edit(
        &self,
        tenant: TenantId,
        workspace: &WorkspaceName,
        layout_name: &LayoutName,
        layout: &ValidLayout,
        edit: &MemoryEdit,
    ) -> StoreResult<JobRecord> {
        let now = Utc::now();
        let job_id = Uuid::new_v4();
        let mut tx = self.begin_write().await?;
        // An edit belongs to no close: its job's session column is empty
        // (the session it names is the run's), so no close waits for it.
        sqlx::query(
            "INSERT INTO jobs (id, tenant_id, kind, session_id, workspace, layout, rollout_id, layout_config, state,
                               attempts, run_after, created_at, spec)
             VALUES ($1, $2, 'edit', '', $3, $4, $5, $6, 'queued', 0, $7, $7, $8)",
        )
        .bind(job_id)
        .bind(tenant)
        .bind(workspace.as_str())
        .bind(layout_name.as_str())
        .bind(edit.rollout_id.as_deref())
        .bind(serde_json::to_string(&layout.config).expect("a config always serialises"))
        .bind(now)
        .bind(JobSpec::Edit(Some(Box::new(edit.clone()))).stored())
        .execute(&mut *tx)
        .await?;
        let job = Self::job_in(&mut tx, job_id).await?;
        tx.commit().await?;
        Ok(job)
    }

    async fn run_of_job(&self, tenant: TenantId, job_id: Uuid) -> StoreResult<Option<PhaseTwoRun>> {
        let row = sqlx::query(
            "SELECT * FROM phase_two_runs WHERE tenant_id = $1 AND job_id = $2 ORDER BY finished_at DESC LIMIT 1",
        )
        .bind(tenant)
        .bind(job_id)
        .fetch_optional(&self.pool)
        .await?;
        row.as_ref().map(Self::record::<RunRow, PhaseTwoRun>).transpose()
    }

    async fn record_memory_uses(
        &self,
        tenant: TenantId,
        workspace: &WorkspaceName,
        layout: &LayoutName,
        session: &SessionId,
        rollouts: &[RolloutId],
        at: DateTime<Utc>,
    ) -> StoreResult<u64> {
        if rollouts.is_empty() {
            return Ok(0);
        }
        let mut tx = self.begin_write().await?;
        let mut counted = 0;
        for rollout in rollouts {
            let inserted = sqlx::query(
                "INSERT INTO memory_uses (tenant_id, workspace, layout, rollout_id, session_id, used_at)
                 SELECT $1, $2, $3, $4, $5, $6
                 WHERE EXISTS (SELECT 1 FROM raw_memories WHERE tenant_id = $1 AND workspace = $2 AND layout = $3
                                  AND rollout_id = $4)
                    OR EXISTS (SELECT 1 FROM rollouts WHERE tenant_id = $1 AND workspace = $2 AND layout = $3
                                  AND rollout_id = $4 AND NOT forgetting)
                 ON CONFLICT (tenant_id, workspace, layout, rollout_id, session_id) DO NOTHING",
            )
            .bind(tenant)
            .bind(workspace.as_str())
            .bind(layout.as_str())
            .bind(rollout.as_str())
            .bind(session.as_str())
            .bind(at)
            .execute(&mut *tx)
            .await?;
            counted += inserted.rows_affected();
        }
        tx.commit().await?;
        Ok(counted)
    }

    async fn memory_usage(
        &self,
        tenant: TenantId,
        workspace: &WorkspaceName,
        layout: &LayoutName,
    ) -> StoreResult<Vec<MemoryUsage>> {
        let rows = sqlx::query(
            "SELECT rollout_id, count(*) AS usage_count, max(used_at) AS last_usage FROM memory_uses
             WHERE tenant_id = $1 AND workspace = $2 AND layout = $3 GROUP BY rollout_id",
        )
        .bind(tenant)
        .bind(workspace.as_str())
        .bind(layout.as_str())
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|r| {
                Ok(MemoryUsage {
                    rollout_id: r.try_get("rollout_id")?,
                    usage_count: r.try_get("usage_count")?,
                    last_usage: r.try_get("last_usage")?,
                })
            })
            .collect()
    }

    async fn all_raw_memories(
        &self,
        tenant: TenantId,
        workspace: &WorkspaceName,
        layout: &LayoutName,
    ) -> StoreResult<Vec<RawMemoryRecord>> {
        let rows = sqlx::query(
            "SELECT rollout_id, updated_at, rollout_path, rollout_summary_file, terminal_state, extracted_len
             FROM raw_memories WHERE tenant_id = $1 AND workspace = $2 AND layout = $3",
        )
        .bind(tenant)
        .bind(workspace.as_str())
        .bind(layout.as_str())
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(Self::record::<RawMemoryRow, RawMemoryRecord>).collect()
    }
}
