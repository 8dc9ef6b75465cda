//! The raw-memory index and phase two's selections and runs.

use super::rows::*;
use super::*;
use crate::domain::ids::{LayoutName, RolloutId, WorkspaceName};
use crate::store::*;
use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::Row;
use uuid::Uuid;
/// A raw memory as the index records it: whose, and which job made it.
pub(super) struct IndexedRawMemory<'a> {
    pub tenant: TenantId,
    pub workspace: &'a str,
    pub layout: &'a str,
    pub raw: &'a RawMemoryRecord,
    pub job_id: Uuid,
}

impl SqlStore<DB> {
    pub(super) async fn upsert_raw_memory(
        conn: &mut DbConnection,
        tenant: TenantId,
        workspace: &WorkspaceName,
        layout: &LayoutName,
        raw: &RawMemoryRecord,
        job_id: Uuid,
        now: DateTime<Utc>,
    ) -> StoreResult<()> {
        let indexed = IndexedRawMemory { tenant, workspace: workspace.as_str(), layout: layout.as_str(), raw, job_id };
        Self::upsert_raw_memories(conn, &[indexed], now).await
    }

    /// Adds or replaces index rows, one statement for all of them; no two
    /// may share a rollout (one statement cannot update a row twice).
    pub(super) async fn upsert_raw_memories(
        conn: &mut DbConnection,
        made: &[IndexedRawMemory<'_>],
        now: DateTime<Utc>,
    ) -> StoreResult<()> {
        if made.is_empty() {
            return Ok(());
        }
        let mut upsert = sqlx::QueryBuilder::<DB>::new(
            "INSERT INTO raw_memories (tenant_id, workspace, layout, rollout_id, updated_at, rollout_path,
                                       rollout_summary_file, terminal_state, extracted_len, job_id, written_at,
                                       updated_at_utc) ",
        );
        upsert.push_values(made, |mut row, m| {
            row.push_bind(m.tenant)
                .push_bind(m.workspace)
                .push_bind(m.layout)
                .push_bind(m.raw.rollout_id.as_str())
                .push_bind(m.raw.updated_at.as_str())
                .push_bind(m.raw.rollout_path.as_str())
                .push_bind(m.raw.rollout_summary_file.as_str())
                .push_bind(m.raw.terminal_state.as_str())
                .push_bind(m.raw.extracted_len as i64)
                .push_bind(m.job_id)
                .push_bind(now)
                .push_bind(sortable_instant(&m.raw.updated_at));
        });
        upsert.push(
            " ON CONFLICT (tenant_id, workspace, layout, rollout_id) DO UPDATE SET
                updated_at = excluded.updated_at, updated_at_utc = excluded.updated_at_utc,
                rollout_path = excluded.rollout_path,
                rollout_summary_file = excluded.rollout_summary_file, terminal_state = excluded.terminal_state,
                extracted_len = excluded.extracted_len, job_id = excluded.job_id, written_at = excluded.written_at",
        );
        upsert.build().execute(&mut *conn).await?;
        Ok(())
    }
}

#[async_trait::async_trait]
impl MemoryIndex for SqlStore<DB> {
    async fn raw_memory(
        &self,
        tenant: TenantId,
        workspace: &WorkspaceName,
        layout: &LayoutName,
        rollout: &RolloutId,
    ) -> StoreResult<Option<RawMemoryRecord>> {
        let row = sqlx::query(
            "SELECT * FROM raw_memories WHERE tenant_id = $1 AND workspace = $2 AND layout = $3 AND rollout_id = $4",
        )
        .bind(tenant)
        .bind(workspace.as_str())
        .bind(layout.as_str())
        .bind(rollout.as_str())
        .fetch_optional(&self.pool)
        .await?;
        row.as_ref().map(Self::record::<RawMemoryRow, RawMemoryRecord>).transpose()
    }

    async fn newest_raw_memories(
        &self,
        tenant: TenantId,
        workspace: &WorkspaceName,
        layout: &LayoutName,
        limit: usize,
    ) -> StoreResult<Vec<RawMemoryRecord>> {
        let order = DB::BYTE_ORDER;
        let rows = sqlx::query(AssertSqlSafe(format!(
            "SELECT rollout_id, updated_at, rollout_path, rollout_summary_file, terminal_state, extracted_len
             FROM raw_memories WHERE tenant_id = $1 AND workspace = $2 AND layout = $3
             ORDER BY updated_at_utc{order} DESC, rollout_id{order} DESC LIMIT $4"
        )))
        .bind(tenant)
        .bind(workspace.as_str())
        .bind(layout.as_str())
        .bind(limit as i64)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(Self::record::<RawMemoryRow, RawMemoryRecord>).collect()
    }

    async fn phase_two_selection(
        &self,
        tenant: TenantId,
        workspace: &WorkspaceName,
        layout: &LayoutName,
    ) -> StoreResult<Option<Value>> {
        let row = sqlx::query(
            "SELECT document FROM phase_two_selections WHERE tenant_id = $1 AND workspace = $2 AND layout = $3",
        )
        .bind(tenant)
        .bind(workspace.as_str())
        .bind(layout.as_str())
        .fetch_optional(&self.pool)
        .await?;
        row.map(|r| serde_json::from_str(r.try_get("document")?).map_err(corrupt)).transpose()
    }

    async fn phase_two_runs(
        &self,
        tenant: TenantId,
        workspace: &WorkspaceName,
        layout: &LayoutName,
        page: &PageRequest,
    ) -> StoreResult<Vec<PhaseTwoRun>> {
        let (after_at, after_id) = page.after.as_ref().map(|c| (c.at, Uuid::parse_str(&c.key).ok())).unzip();
        let after_id = after_id.flatten();
        let rows = sqlx::query(
            "SELECT * FROM phase_two_runs WHERE tenant_id = $1 AND workspace = $2 AND layout = $3
               AND ($4 IS NULL OR finished_at < $4 OR (finished_at = $4 AND id < $5))
             ORDER BY finished_at DESC, id DESC LIMIT $6",
        )
        .bind(tenant)
        .bind(workspace.as_str())
        .bind(layout.as_str())
        .bind(after_at)
        .bind(after_id)
        .bind(page.fetch())
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(Self::record::<RunRow, PhaseTwoRun>).collect()
    }

    async fn import_raw_memories(
        &self,
        tenant: TenantId,
        workspace: &WorkspaceName,
        layout: &LayoutName,
        records: &[RawMemoryRecord],
    ) -> StoreResult<()> {
        let now = Utc::now();
        let mut tx = self.begin_write().await?;
        for raw in records {
            Self::upsert_raw_memory(&mut tx, tenant, workspace, layout, raw, Uuid::nil(), now).await?;
        }
        tx.commit().await?;
        Ok(())
    }
}
