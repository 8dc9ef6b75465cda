//! The rollouts' journal (`store::journal_records`): the lines an object
//! store's rollout holds in the database until its object is rewritten.

use super::*;
use crate::store::journal_records::RolloutAt;
use crate::store::*;
use sqlx::{AssertSqlSafe, Row};

/// A rollout row that is not being forgotten — itself, its workspace or its
/// tenant: a rewrite that began before a forget records nothing after it
/// (and then removes what it wrote).
const NOT_BEING_FORGOTTEN: &str = "NOT forgetting
    AND NOT EXISTS (SELECT 1 FROM workspace_forgets f WHERE f.tenant_id = rollouts.tenant_id
                      AND f.workspace = rollouts.workspace)
    AND NOT EXISTS (SELECT 1 FROM tenants t WHERE t.id = rollouts.tenant_id AND t.deleting_at IS NOT NULL)";

#[async_trait::async_trait]
impl RolloutJournalStore for SqlStore<DB> {
    async fn idle_journaled_rollouts(
        &self,
        before: chrono::DateTime<chrono::Utc>,
        limit: u32,
    ) -> StoreResult<Vec<crate::store::journal_records::JournaledRollout>> {
        use crate::domain::ids::{LayoutName, RolloutId, WorkspaceName};
        // The journal holds only lines not yet in an object: a short table to start from.
        let rows = sqlx::query(AssertSqlSafe(format!(
            "SELECT DISTINCT rollouts.tenant_id, rollouts.workspace, rollouts.layout, rollouts.rollout_id,
                    rollouts.rollout_path
             FROM rollout_journal j JOIN rollouts ON rollouts.tenant_id = j.tenant_id
               AND rollouts.workspace = j.workspace AND rollouts.layout = j.layout AND rollouts.rollout_id = j.rollout_id
             WHERE rollouts.updated_at < $1 AND {NOT_BEING_FORGOTTEN} LIMIT $2"
        )))
        .bind(before)
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|row| {
                Ok(crate::store::journal_records::JournaledRollout {
                    tenant: row.try_get("tenant_id")?,
                    workspace: parse_id(WorkspaceName::parse, row.try_get("workspace")?, "workspace")?,
                    layout: parse_id(LayoutName::parse, row.try_get("layout")?, "layout")?,
                    rollout: parse_id(RolloutId::parse, row.try_get("rollout_id")?, "rollout id")?,
                    rollout_path: row.try_get("rollout_path")?,
                })
            })
            .collect()
    }

    async fn rollout_parts(&self, at: RolloutAt<'_>) -> StoreResult<Option<RolloutParts>> {
        let mut tx = self.pool.begin_with(DB::BEGIN_SNAPSHOT).await?;
        let row = sqlx::query(AssertSqlSafe(format!(
            "SELECT committed_len, object_len, object_etag FROM rollouts
             WHERE tenant_id = $1 AND workspace = $2 AND layout = $3 AND rollout_id = $4 AND {NOT_BEING_FORGOTTEN}"
        )))
        .bind(at.tenant)
        .bind(at.workspace.as_str())
        .bind(at.layout.as_str())
        .bind(at.rollout.as_str())
        .fetch_optional(&mut *tx)
        .await?;
        let Some(row) = row else { return Ok(None) };
        let object_len = row.try_get::<i64, _>("object_len")? as u64;
        let lines = sqlx::query(
            "SELECT start_len, lines FROM rollout_journal
             WHERE tenant_id = $1 AND workspace = $2 AND layout = $3 AND rollout_id = $4 AND start_len >= $5
             ORDER BY start_len",
        )
        .bind(at.tenant)
        .bind(at.workspace.as_str())
        .bind(at.layout.as_str())
        .bind(at.rollout.as_str())
        .bind(object_len as i64)
        .fetch_all(&mut *tx)
        .await?;
        tx.commit().await?;
        let journal = lines
            .iter()
            .map(|line| Ok((line.try_get::<i64, _>("start_len")? as u64, line.try_get::<Vec<u8>, _>("lines")?)))
            .collect::<StoreResult<_>>()?;
        Ok(Some(RolloutParts {
            committed_len: row.try_get::<i64, _>("committed_len")? as u64,
            object_len,
            object_etag: row.try_get("object_etag")?,
            journal,
        }))
    }

    async fn rollout_rewritten(
        &self,
        at: RolloutAt<'_>,
        from: Option<&str>,
        etag: &str,
        object_len: u64,
    ) -> StoreResult<bool> {
        let mut tx = self.begin_write().await?;
        // An early return drops the transaction: nothing of it is kept.
        let moved = sqlx::query(AssertSqlSafe(format!(
            "UPDATE rollouts SET object_len = $5, object_etag = $6
             WHERE tenant_id = $1 AND workspace = $2 AND layout = $3 AND rollout_id = $4 AND {NOT_BEING_FORGOTTEN}
               AND object_len <= $5 AND committed_len >= $5
               AND (object_etag = $7 OR (object_etag IS NULL AND $7 IS NULL))"
        )))
        .bind(at.tenant)
        .bind(at.workspace.as_str())
        .bind(at.layout.as_str())
        .bind(at.rollout.as_str())
        .bind(object_len as i64)
        .bind(etag)
        .bind(from)
        .execute(&mut *tx)
        .await?;
        if moved.rows_affected() == 0 {
            return Ok(false);
        }
        sqlx::query(
            "DELETE FROM rollout_journal
             WHERE tenant_id = $1 AND workspace = $2 AND layout = $3 AND rollout_id = $4 AND start_len < $5",
        )
        .bind(at.tenant)
        .bind(at.workspace.as_str())
        .bind(at.layout.as_str())
        .bind(at.rollout.as_str())
        .bind(object_len as i64)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(true)
    }
}
