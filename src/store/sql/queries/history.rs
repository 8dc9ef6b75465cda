//! Memory history (SPEC §2.6): each successful run's changed files, their
//! contents stored once per tenant by hash, kept for the newest runs of
//! each layout; and what a file was right after a kept run.

use super::*;
use crate::domain::ids::{LayoutName, WorkspaceName, sha256_hex};
use crate::domain::job::JobSpec;
use crate::store::*;
use sqlx::Row;
use uuid::Uuid;

impl SqlStore<DB> {
    /// Records a successful run's history in the transaction that records
    /// the run, then drops the history of its layout's runs beyond the
    /// newest `keep_runs`, and the contents no kept run refers to any more.
    pub(super) async fn record_history(
        conn: &mut DbConnection,
        claimed: &ClaimedJob,
        run: &PhaseTwoRun,
        history: &RunHistory,
    ) -> StoreResult<()> {
        let (tenant, job) = (claimed.tenant_id, &claimed.job);
        sqlx::query(
            "INSERT INTO run_history (run_id, tenant_id, workspace, layout, finished_at, before_omitted)
             VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(run.run_id)
        .bind(tenant)
        .bind(job.workspace.as_str())
        .bind(job.layout.as_str())
        .bind(run.finished_at)
        .bind(history.forget)
        .execute(&mut *conn)
        .await?;
        for file in &history.files {
            let mut hashes = [None, None];
            // A forget's run keeps nothing of what the files held before it.
            let before = if history.forget { &None } else { &file.before };
            for (slot, content) in hashes.iter_mut().zip([before, &file.after]) {
                if let Some(bytes) = content {
                    let hash = sha256_hex(bytes);
                    sqlx::query(
                        "INSERT INTO history_blobs (tenant_id, hash, content) VALUES ($1, $2, $3)
                         ON CONFLICT (tenant_id, hash) DO NOTHING",
                    )
                    .bind(tenant)
                    .bind(hash.as_str())
                    .bind(bytes.as_slice())
                    .execute(&mut *conn)
                    .await?;
                    *slot = Some(hash);
                }
            }
            let [before_hash, after_hash] = hashes;
            sqlx::query(
                "INSERT INTO run_files (run_id, tenant_id, path, before_hash, after_hash, before_bytes, after_bytes)
                 VALUES ($1, $2, $3, $4, $5, $6, $7)",
            )
            .bind(run.run_id)
            .bind(tenant)
            .bind(file.path.as_str())
            .bind(before_hash)
            .bind(after_hash)
            .bind(before.as_ref().map(|b| b.len() as i64))
            .bind(file.after.as_ref().map(|b| b.len() as i64))
            .execute(&mut *conn)
            .await?;
        }
        if !history.forget {
            return Self::prune_history(conn, tenant, &job.workspace, &job.layout, history.keep_runs).await;
        }
        // Memory history recorded before a forget could bring it back: only
        // the forget's own run stays.
        let dropped = sqlx::query(
            "DELETE FROM run_files WHERE run_id IN (
                SELECT run_id FROM run_history WHERE tenant_id = $1 AND workspace = $2 AND layout = $3 AND run_id <> $4)",
        );
        let runs = sqlx::query(
            "DELETE FROM run_history WHERE tenant_id = $1 AND workspace = $2 AND layout = $3 AND run_id <> $4",
        );
        for query in [dropped, runs] {
            query
                .bind(tenant)
                .bind(job.workspace.as_str())
                .bind(job.layout.as_str())
                .bind(run.run_id)
                .execute(&mut *conn)
                .await?;
        }
        Self::drop_unreferenced_blobs(conn, tenant).await
    }

    async fn prune_history(
        conn: &mut DbConnection,
        tenant: TenantId,
        workspace: &WorkspaceName,
        layout: &LayoutName,
        keep_runs: i64,
    ) -> StoreResult<()> {
        let expired: Vec<Uuid> = sqlx::query(
            "SELECT run_id FROM run_history WHERE tenant_id = $1 AND workspace = $2 AND layout = $3
             ORDER BY finished_at DESC, run_id DESC LIMIT 1000 OFFSET $4",
        )
        .bind(tenant)
        .bind(workspace.as_str())
        .bind(layout.as_str())
        .bind(keep_runs)
        .fetch_all(&mut *conn)
        .await?
        .iter()
        .map(|r| r.try_get("run_id"))
        .collect::<Result<_, _>>()?;
        for run_id in expired {
            let hashes: Vec<Option<String>> = sqlx::query(
                "SELECT before_hash AS hash FROM run_files WHERE run_id = $1
                 UNION SELECT after_hash AS hash FROM run_files WHERE run_id = $1",
            )
            .bind(run_id)
            .fetch_all(&mut *conn)
            .await?
            .iter()
            .map(|r| r.try_get("hash"))
            .collect::<Result<_, _>>()?;
            sqlx::query("DELETE FROM run_files WHERE run_id = $1").bind(run_id).execute(&mut *conn).await?;
            sqlx::query("DELETE FROM run_history WHERE run_id = $1").bind(run_id).execute(&mut *conn).await?;
            for hash in hashes.into_iter().flatten() {
                sqlx::query(
                    "DELETE FROM history_blobs WHERE tenant_id = $1 AND hash = $2 AND NOT EXISTS (
                        SELECT 1 FROM run_files WHERE tenant_id = $1 AND (before_hash = $2 OR after_hash = $2))",
                )
                .bind(tenant)
                .bind(hash.as_str())
                .execute(&mut *conn)
                .await?;
            }
        }
        Ok(())
    }
}

#[async_trait::async_trait]
impl RunHistoryStore for SqlStore<DB> {
    async fn phase_two_run(
        &self,
        tenant: TenantId,
        workspace: &WorkspaceName,
        layout: &LayoutName,
        run_id: Uuid,
    ) -> StoreResult<Option<PhaseTwoRun>> {
        let row = sqlx::query(
            "SELECT * FROM phase_two_runs WHERE tenant_id = $1 AND workspace = $2 AND layout = $3 AND id = $4",
        )
        .bind(tenant)
        .bind(workspace.as_str())
        .bind(layout.as_str())
        .bind(run_id)
        .fetch_optional(&self.pool)
        .await?;
        row.as_ref().map(Self::record::<super::rows::RunRow, PhaseTwoRun>).transpose()
    }

    async fn forgotten_since(
        &self,
        tenant: TenantId,
        workspace: &WorkspaceName,
        layout: &LayoutName,
        run_id: Uuid,
    ) -> StoreResult<bool> {
        let forget = sqlx::query(
            "SELECT 1 AS found FROM phase_two_runs
             WHERE tenant_id = $1 AND workspace = $2 AND layout = $3 AND kind = 'forget' AND state = 'succeeded'
               AND id <> $4 AND finished_at >= (SELECT finished_at FROM phase_two_runs WHERE id = $4)
             LIMIT 1",
        )
        .bind(tenant)
        .bind(workspace.as_str())
        .bind(layout.as_str())
        .bind(run_id)
        .fetch_optional(&self.pool)
        .await?;
        Ok(forget.is_some())
    }

    async fn run_files(&self, tenant: TenantId, run_id: Uuid) -> StoreResult<Option<Vec<RunFileRecord>>> {
        let kept = sqlx::query("SELECT 1 AS kept FROM run_history WHERE tenant_id = $1 AND run_id = $2")
            .bind(tenant)
            .bind(run_id)
            .fetch_optional(&self.pool)
            .await?;
        if kept.is_none() {
            return Ok(None);
        }
        let rows = sqlx::query(
            "SELECT f.path, f.before_hash, f.after_hash, f.before_bytes, f.after_bytes, h.before_omitted
             FROM run_files f JOIN run_history h ON h.run_id = f.run_id
             WHERE f.run_id = $1 ORDER BY f.path",
        )
        .bind(run_id)
        .fetch_all(&self.pool)
        .await?;
        let files = rows
            .iter()
            .map(|r| {
                Ok(RunFileRecord {
                    path: r.try_get("path")?,
                    before_hash: r.try_get("before_hash")?,
                    after_hash: r.try_get("after_hash")?,
                    before_bytes: r.try_get("before_bytes")?,
                    after_bytes: r.try_get("after_bytes")?,
                    before_omitted: r.try_get("before_omitted")?,
                })
            })
            .collect::<Result<_, sqlx::Error>>()?;
        Ok(Some(files))
    }

    async fn queue_restore(
        &self,
        tenant: TenantId,
        run: &PhaseTwoRun,
        workspace: &WorkspaceName,
        layout_name: &LayoutName,
        layout: &crate::domain::layout::ValidLayout,
    ) -> StoreResult<Option<JobRecord>> {
        let now = chrono::Utc::now();
        let mut tx = self.begin_write().await?;
        let kept = sqlx::query("SELECT 1 AS kept FROM run_history WHERE tenant_id = $1 AND run_id = $2")
            .bind(tenant)
            .bind(run.run_id)
            .fetch_optional(&mut *tx)
            .await?;
        if kept.is_none() {
            return Ok(None);
        }
        let job_id = Uuid::new_v4();
        sqlx::query(
            "INSERT INTO jobs (id, tenant_id, kind, session_id, workspace, layout, layout_config, state, attempts,
                               run_after, created_at, spec)
             VALUES ($1, $2, 'restore', $3, $4, $5, $6, 'queued', 0, $7, $7, $8)",
        )
        .bind(job_id)
        .bind(tenant)
        .bind(run.session_id.as_str())
        .bind(workspace.as_str())
        .bind(layout_name.as_str())
        .bind(serde_json::to_string(&layout.config).expect("a config always serialises"))
        .bind(now)
        .bind(JobSpec::Restore { run_id: run.run_id }.stored())
        .execute(&mut *tx)
        .await?;
        let job = Self::job_in(&mut tx, job_id).await?;
        tx.commit().await?;
        Ok(Some(job))
    }

    async fn history_paths(
        &self,
        tenant: TenantId,
        workspace: &WorkspaceName,
        layout: &LayoutName,
    ) -> StoreResult<Vec<String>> {
        let rows = sqlx::query(
            "SELECT DISTINCT f.path FROM run_files f JOIN run_history h ON h.run_id = f.run_id
             WHERE h.tenant_id = $1 AND h.workspace = $2 AND h.layout = $3 ORDER BY f.path",
        )
        .bind(tenant)
        .bind(workspace.as_str())
        .bind(layout.as_str())
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.iter().map(|r| r.try_get("path")).collect::<Result<_, _>>()?)
    }

    async fn history_blob(&self, tenant: TenantId, hash: &str) -> StoreResult<Option<Vec<u8>>> {
        let row = sqlx::query("SELECT content FROM history_blobs WHERE tenant_id = $1 AND hash = $2")
            .bind(tenant)
            .bind(hash)
            .fetch_optional(&self.pool)
            .await?;
        Ok(row.map(|r| r.try_get("content")).transpose()?)
    }

    async fn file_after_run(
        &self,
        tenant: TenantId,
        workspace: &WorkspaceName,
        layout: &LayoutName,
        run_id: Uuid,
        path: &str,
    ) -> StoreResult<FileAtRun> {
        let Some(run) = sqlx::query("SELECT finished_at FROM run_history WHERE tenant_id = $1 AND run_id = $2 AND workspace = $3 AND layout = $4")
            .bind(tenant)
            .bind(run_id)
            .bind(workspace.as_str())
            .bind(layout.as_str())
            .fetch_optional(&self.pool)
            .await?
        else {
            return Ok(FileAtRun::NotKept);
        };
        let at: chrono::DateTime<chrono::Utc> = run.try_get("finished_at")?;
        // The last change at or before the run says what it left; failing
        // that, the first change after it says what it found.
        let last_before = sqlx::query(
            "SELECT f.after_hash AS hash FROM run_files f JOIN run_history h ON h.run_id = f.run_id
             WHERE h.tenant_id = $1 AND h.workspace = $2 AND h.layout = $3 AND f.path = $4
               AND (h.finished_at < $5 OR (h.finished_at = $5 AND h.run_id <= $6))
             ORDER BY h.finished_at DESC, h.run_id DESC LIMIT 1",
        );
        let first_after = sqlx::query(
            "SELECT f.before_hash AS hash FROM run_files f JOIN run_history h ON h.run_id = f.run_id
             WHERE h.tenant_id = $1 AND h.workspace = $2 AND h.layout = $3 AND f.path = $4
               AND (h.finished_at > $5 OR (h.finished_at = $5 AND h.run_id > $6))
             ORDER BY h.finished_at, h.run_id LIMIT 1",
        );
        for query in [last_before, first_after] {
            let found = query
                .bind(tenant)
                .bind(workspace.as_str())
                .bind(layout.as_str())
                .bind(path)
                .bind(at)
                .bind(run_id)
                .fetch_optional(&self.pool)
                .await?;
            if let Some(row) = found {
                let hash: Option<String> = row.try_get("hash")?;
                return match hash {
                    None => Ok(FileAtRun::Absent),
                    Some(hash) => self
                        .history_blob(tenant, &hash)
                        .await?
                        .map(FileAtRun::Content)
                        .ok_or_else(|| StoreError::Corrupt(format!("history refers to a missing blob {hash}"))),
                };
            }
        }
        Ok(FileAtRun::Unrecorded)
    }
}
