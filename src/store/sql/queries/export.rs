//! Moving a workspace out and in (SPEC §2.7): what an export takes from
//! the database (one snapshot of a workspace's rollouts, raw-memory index and
//! selections), and what an import registers in its fenced finish.

use super::rows::*;
use super::*;
use crate::domain::ids::WorkspaceName;
use crate::domain::job::JobSpec;
use crate::store::*;
use chrono::{DateTime, Utc};
use sqlx::Row;
use uuid::Uuid;

/// Rows that make a workspace not empty (and known): an import goes only
/// into one with none.
const WORKSPACE_HOLDS: [&str; 4] = [
    "SELECT 1 AS found FROM workspaces WHERE tenant_id = $1 AND workspace = $2",
    "SELECT 1 AS found FROM sessions WHERE tenant_id = $1 AND workspace = $2 LIMIT 1",
    "SELECT 1 AS found FROM rollouts WHERE tenant_id = $1 AND workspace = $2 LIMIT 1",
    "SELECT 1 AS found FROM raw_memories WHERE tenant_id = $1 AND workspace = $2 LIMIT 1",
];

impl SqlStore<DB> {
    /// What the tenant's storage limit leaves besides import `job_id`'s
    /// own claim; the tenant's claims are taken one at a time (the lock
    /// lasts until the transaction ends).
    async fn storage_room_in(conn: &mut DbConnection, tenant: TenantId, job_id: Uuid, limit: u64) -> StoreResult<u64> {
        if let Some(lock) = DB::LAYOUT_LOCK {
            sqlx::query(lock).bind(format!("storage/{tenant}")).execute(&mut *conn).await?;
        }
        let used: i64 = sqlx::query(AssertSqlSafe(format!(
            "SELECT ({}) - COALESCE((SELECT archive_bytes FROM jobs WHERE id = $2 AND state IN ('queued', 'running')), 0)
             AS bytes",
            usage::STORAGE_OF_TENANT
        )))
        .bind(tenant)
        .bind(job_id)
        .fetch_one(&mut *conn)
        .await?
        .try_get("bytes")?;
        Ok(limit.saturating_sub(used.max(0) as u64))
    }

    pub(super) async fn workspace_empty_in(
        conn: &mut DbConnection,
        tenant: TenantId,
        workspace: &WorkspaceName,
    ) -> StoreResult<bool> {
        for sql in WORKSPACE_HOLDS {
            if sqlx::query(sql).bind(tenant).bind(workspace.as_str()).fetch_optional(&mut *conn).await?.is_some() {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// An import's rows, in its fenced finish; refused (nothing written)
    /// when the workspace took data or a layout took another config
    /// since the job checked, or when `placed_bytes` (with what the batch
    /// added before it) no longer fit under the tenant's storage limit.
    pub(super) async fn register_import(
        conn: &mut DbConnection,
        claimed: &ClaimedJob,
        record: &ImportRecord,
        placed_bytes: i64,
        now: DateTime<Utc>,
    ) -> StoreResult<Result<(), String>> {
        let (tenant, job) = (claimed.tenant_id, &claimed.job);
        if !Self::workspace_empty_in(&mut *conn, tenant, &job.workspace).await? {
            return Ok(Err(format!("workspace_not_empty: workspace {} took data while the import ran", job.workspace)));
        }
        if let Some(limit) = record.storage_limit {
            let room = Self::storage_room_in(&mut *conn, tenant, job.job_id, limit).await?;
            if placed_bytes.max(0) as u64 > room {
                return Ok(Err(format!(
                    "quota_exceeded: the import's {placed_bytes} bytes do not fit in the {room} the tenant's storage limit leaves now"
                )));
            }
        }
        for (name, layout) in &record.layouts {
            let config = serde_json::to_string(&layout.config).expect("a config always serialises");
            sqlx::query(
                "INSERT INTO layouts (tenant_id, name, config, created_at, updated_at) VALUES ($1, $2, $3, $4, $4)
                     ON CONFLICT (tenant_id, name) DO NOTHING",
            )
            .bind(tenant)
            .bind(name.as_str())
            .bind(config.as_str())
            .bind(now)
            .execute(&mut *conn)
            .await?;
            let stored: String = sqlx::query("SELECT config FROM layouts WHERE tenant_id = $1 AND name = $2")
                .bind(tenant)
                .bind(name.as_str())
                .fetch_one(&mut *conn)
                .await?
                .try_get("config")?;
            if parse_layout_config(&stored)?.config != layout.config {
                return Ok(Err(format!("layout_conflict: layout {name} took another config while the import ran")));
            }
        }
        for rollout in &record.rollouts {
            sqlx::query(
                "INSERT INTO rollouts (tenant_id, workspace, layout, rollout_id, rollout_path, committed_len,
                                           segment_count, updated_at, object_len, object_etag)
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
            )
            .bind(tenant)
            .bind(job.workspace.as_str())
            .bind(rollout.layout.as_str())
            .bind(rollout.rollout_id.as_str())
            .bind(rollout.rollout_path.as_str())
            .bind(rollout.len as i64)
            .bind(rollout.lines)
            .bind(now)
            .bind(if rollout.object_etag.is_some() { rollout.len as i64 } else { 0 })
            .bind(rollout.object_etag.as_deref())
            .execute(&mut *conn)
            .await?;
        }
        for (layout, raw) in &record.raw_memories {
            Self::upsert_raw_memory(&mut *conn, tenant, &job.workspace, layout, raw, job.job_id, now).await?;
        }
        // Known from now on, whatever it holds (memory files alone, even).
        sqlx::query("INSERT INTO workspaces (tenant_id, workspace, created_at) VALUES ($1, $2, $3)")
            .bind(tenant)
            .bind(job.workspace.as_str())
            .bind(now)
            .execute(&mut *conn)
            .await?;
        Ok(Ok(()))
    }
}

#[async_trait::async_trait]
impl PortabilityStore for SqlStore<DB> {
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

    async fn queue_import(
        &self,
        tenant: TenantId,
        workspace: &WorkspaceName,
        job_id: Uuid,
        archive_bytes: u64,
        storage_limit: Option<u64>,
    ) -> StoreResult<ImportQueued> {
        let now = Utc::now();
        let mut tx = self.begin_write().await?;
        if let Some(limit) = storage_limit {
            let room = Self::storage_room_in(&mut tx, tenant, job_id, limit).await?;
            if archive_bytes > room {
                return Ok(ImportQueued::OverQuota { room });
            }
        }
        if let Some(lock) = DB::LAYOUT_LOCK {
            // Two imports into one workspace at once: one waits for the other's answer.
            sqlx::query(lock).bind(format!("import/{tenant}/{workspace}")).execute(&mut *tx).await?;
        }
        if Self::workspace_forgotten_in(&mut tx, tenant, workspace).await? {
            return Ok(ImportQueued::Forgetting);
        }
        let importing = sqlx::query(
            "SELECT 1 AS found FROM jobs WHERE tenant_id = $1 AND workspace = $2 AND kind = 'import'
               AND state IN ('queued', 'running') LIMIT 1",
        )
        .bind(tenant)
        .bind(workspace.as_str())
        .fetch_optional(&mut *tx)
        .await?;
        if importing.is_some() || !Self::workspace_empty_in(&mut tx, tenant, workspace).await? {
            return Ok(ImportQueued::NotEmpty);
        }
        sqlx::query(
            "INSERT INTO jobs (id, tenant_id, kind, session_id, workspace, layout, layout_config, state, attempts,
                               run_after, created_at, archive_bytes, spec)
             VALUES ($1, $2, 'import', '', $3, 'default', $5, 'queued', 0, $4, $4, $6, $7)",
        )
        .bind(job_id)
        .bind(tenant)
        .bind(workspace.as_str())
        .bind(now)
        .bind(serde_json::to_string(&default_layout().config).expect("a config always serialises"))
        .bind(i64::try_from(archive_bytes).unwrap_or(i64::MAX))
        .bind(JobSpec::Import.stored())
        .execute(&mut *tx)
        .await?;
        let job = Self::job_in(&mut tx, job_id).await?;
        tx.commit().await?;
        Ok(ImportQueued::Job(Box::new(job)))
    }

    async fn reserve_import(&self, claimed: &ClaimedJob, bytes: u64, limit: u64) -> StoreResult<Option<u64>> {
        let mut tx = self.begin_write().await?;
        let room = Self::storage_room_in(&mut tx, claimed.tenant_id, claimed.job.job_id, limit).await?;
        if bytes <= room {
            let claimed_now = sqlx::query(
                "UPDATE jobs SET archive_bytes = $3 WHERE id = $1 AND lease_token = $2 AND state = 'running'",
            )
            .bind(claimed.job.job_id)
            .bind(claimed.token)
            .bind(i64::try_from(bytes).unwrap_or(i64::MAX))
            .execute(&mut *tx)
            .await?
            .rows_affected();
            if claimed_now == 0 {
                return Ok(None);
            }
        }
        tx.commit().await?;
        Ok(Some(room))
    }

    async fn workspace_empty(&self, tenant: TenantId, workspace: &WorkspaceName) -> StoreResult<bool> {
        let mut conn = self.pool.acquire().await?;
        Self::workspace_empty_in(&mut conn, tenant, workspace).await
    }
}
