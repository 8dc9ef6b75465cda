//! What an export takes from the database (SPEC §2.7): one snapshot of a
//! workspace's rollouts, raw-memory index and selections.

use super::rows::*;
use super::*;
use crate::domain::ids::WorkspaceName;
use crate::store::*;
use sqlx::Row;

for_every_dialect! {
    impl PortabilityStore {
    async fn export_view(&self, tenant: TenantId, workspace: &WorkspaceName) -> StoreResult<ExportView> {
        let mut tx = self.pool.begin_with(DB::BEGIN_SNAPSHOT).await?;
        let rows = sqlx::query(
            "SELECT layout, rollout_id, rollout_path, committed_len, segment_count, last_updated_at, last_terminal_state
             FROM rollouts WHERE tenant_id = $1 AND workspace = $2 AND committed_len > 0
             ORDER BY layout, rollout_id",
        )
        .bind(tenant)
        .bind(workspace.as_str())
        .fetch_all(&mut *tx)
        .await?;
        let mut view = ExportView::default();
        for row in rows {
            view.rollouts.push(ExportedRollout {
                layout: row.try_get("layout")?,
                rollout_id: row.try_get("rollout_id")?,
                rollout_path: row.try_get("rollout_path")?,
                committed_len: row.try_get::<i64, _>("committed_len")? as u64,
                segment_count: row.try_get("segment_count")?,
                updated_at: row.try_get("last_updated_at")?,
                terminal_state: row.try_get("last_terminal_state")?,
            });
        }
        let rows = sqlx::query(
            "SELECT layout, rollout_id, updated_at, rollout_path, rollout_summary_file, terminal_state, extracted_len
             FROM raw_memories WHERE tenant_id = $1 AND workspace = $2 ORDER BY layout, rollout_id",
        )
        .bind(tenant)
        .bind(workspace.as_str())
        .fetch_all(&mut *tx)
        .await?;
        for row in &rows {
            view.raw_memories.push((row.try_get("layout")?, Self::record::<RawMemoryRow, RawMemoryRecord>(row)?));
        }
        let rows = sqlx::query(
            "SELECT layout, document FROM phase_two_selections WHERE tenant_id = $1 AND workspace = $2 ORDER BY layout",
        )
        .bind(tenant)
        .bind(workspace.as_str())
        .fetch_all(&mut *tx)
        .await?;
        for row in rows {
            let document: String = row.try_get("document")?;
            view.selections.push((row.try_get("layout")?, serde_json::from_str(&document).map_err(corrupt)?));
        }
        tx.commit().await?;
        Ok(view)
    }
    }
}
