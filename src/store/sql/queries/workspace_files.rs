//! Memory files in an object store (`store::workspace_files`): the current
//! version of each, made so by a finish, and the chores it leaves.

use super::*;
use crate::domain::ids::WorkspaceName;
use crate::store::workspace_files::*;
use crate::store::{TenantId, parse_id};
use chrono::{DateTime, Utc};
use sqlx::Row;
use uuid::Uuid;

fn version_of(row: &DbRow) -> StoreResult<FileVersion> {
    Ok(FileVersion {
        publish_id: row.try_get("publish_id")?,
        bytes: row.try_get::<i64, _>("bytes")? as u64,
        sha256: row.try_get("sha256")?,
    })
}

impl SqlStore<DB> {
    /// Locks the generation rows a batch of finishes will move, in one order
    /// (tenant, workspace), before any of them: two replicas' batches that
    /// touch the same workspaces in other orders would deadlock otherwise.
    pub(super) async fn lock_generations_in(
        conn: &mut DbConnection,
        mut workspaces: Vec<(TenantId, &WorkspaceName, Uuid)>,
    ) -> StoreResult<()> {
        workspaces.sort_by(|a, b| (a.0, a.1).cmp(&(b.0, b.1)));
        workspaces.dedup_by(|a, b| (a.0, a.1) == (b.0, b.1));
        for (tenant, workspace, publish_id) in workspaces {
            sqlx::query(
                "INSERT INTO workspace_generations (tenant_id, workspace, publish_id) VALUES ($1, $2, $3)
                 ON CONFLICT (tenant_id, workspace) DO UPDATE SET publish_id = workspace_generations.publish_id",
            )
            .bind(tenant)
            .bind(workspace.as_str())
            .bind(publish_id)
            .execute(&mut *conn)
            .await?;
        }
        Ok(())
    }

    /// Makes a publish's versions current in the finish's transaction: the
    /// workspace's generation moves first (its row, locked, orders the
    /// finishes of one workspace), each replaced version is left to remove
    /// and each path to place. The bytes the publish adds (negative: frees).
    pub(super) async fn record_versions_in(
        conn: &mut DbConnection,
        tenant: TenantId,
        workspace: &WorkspaceName,
        changes: &VersionChanges,
        now: DateTime<Utc>,
    ) -> StoreResult<i64> {
        sqlx::query(
            "INSERT INTO workspace_generations (tenant_id, workspace, publish_id) VALUES ($1, $2, $3)
             ON CONFLICT (tenant_id, workspace) DO UPDATE SET publish_id = excluded.publish_id",
        )
        .bind(tenant)
        .bind(workspace.as_str())
        .bind(changes.publish_id)
        .execute(&mut *conn)
        .await?;
        let mut delta = 0i64;
        for (path, version) in &changes.files {
            let old = sqlx::query(
                "SELECT publish_id, bytes, sha256 FROM workspace_files WHERE tenant_id = $1 AND workspace = $2 AND path = $3",
            )
            .bind(tenant)
            .bind(workspace.as_str())
            .bind(path.as_str())
            .fetch_optional(&mut *conn)
            .await?;
            if let Some(old) = old.as_ref().map(version_of).transpose()? {
                delta -= old.bytes as i64;
                // A path the publish lists twice: its own version is not a replaced one.
                if old.publish_id != changes.publish_id {
                    Self::add_chore_in(&mut *conn, tenant, workspace, path, old.publish_id, "remove", now).await?;
                }
            }
            match version {
                Some(new) => {
                    delta += new.bytes as i64;
                    sqlx::query(
                        "INSERT INTO workspace_files (tenant_id, workspace, path, publish_id, bytes, sha256)
                         VALUES ($1, $2, $3, $4, $5, $6)
                         ON CONFLICT (tenant_id, workspace, path) DO UPDATE SET publish_id = excluded.publish_id,
                             bytes = excluded.bytes, sha256 = excluded.sha256",
                    )
                    .bind(tenant)
                    .bind(workspace.as_str())
                    .bind(path.as_str())
                    .bind(new.publish_id)
                    .bind(new.bytes as i64)
                    .bind(new.sha256.as_str())
                    .execute(&mut *conn)
                    .await?;
                }
                None => {
                    sqlx::query("DELETE FROM workspace_files WHERE tenant_id = $1 AND workspace = $2 AND path = $3")
                        .bind(tenant)
                        .bind(workspace.as_str())
                        .bind(path.as_str())
                        .execute(&mut *conn)
                        .await?;
                }
            }
            Self::add_chore_in(&mut *conn, tenant, workspace, path, changes.publish_id, "place", now).await?;
        }
        Ok(delta)
    }

    async fn add_chore_in(
        conn: &mut DbConnection,
        tenant: TenantId,
        workspace: &WorkspaceName,
        path: &str,
        publish_id: Uuid,
        chore: &str,
        now: DateTime<Utc>,
    ) -> StoreResult<()> {
        sqlx::query(
            "INSERT INTO workspace_file_chores (tenant_id, workspace, path, publish_id, chore, since)
             VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING",
        )
        .bind(tenant)
        .bind(workspace.as_str())
        .bind(path)
        .bind(publish_id)
        .bind(chore)
        .bind(now)
        .execute(&mut *conn)
        .await?;
        Ok(())
    }
}

#[async_trait::async_trait]
impl WorkspaceFilesStore for SqlStore<DB> {
    async fn files_generation(&self, tenant: TenantId, workspace: &WorkspaceName) -> StoreResult<Option<Uuid>> {
        let row = sqlx::query("SELECT publish_id FROM workspace_generations WHERE tenant_id = $1 AND workspace = $2")
            .bind(tenant)
            .bind(workspace.as_str())
            .fetch_optional(&self.pool)
            .await?;
        Ok(row.map(|r| r.try_get::<Uuid, _>("publish_id")).transpose()?)
    }

    async fn current_files(&self, tenant: TenantId, workspace: &WorkspaceName) -> StoreResult<CurrentFiles> {
        let mut tx = self.pool.begin_with(DB::BEGIN_SNAPSHOT).await?;
        let generation =
            sqlx::query("SELECT publish_id FROM workspace_generations WHERE tenant_id = $1 AND workspace = $2")
                .bind(tenant)
                .bind(workspace.as_str())
                .fetch_optional(&mut *tx)
                .await?
                .map(|r| r.try_get::<Uuid, _>("publish_id"))
                .transpose()?;
        let rows = sqlx::query(
            "SELECT path, publish_id, bytes, sha256 FROM workspace_files WHERE tenant_id = $1 AND workspace = $2
             ORDER BY path",
        )
        .bind(tenant)
        .bind(workspace.as_str())
        .fetch_all(&mut *tx)
        .await?;
        tx.commit().await?;
        let files = rows.iter().map(|row| Ok((row.try_get("path")?, version_of(row)?))).collect::<StoreResult<_>>()?;
        Ok(CurrentFiles { generation, files })
    }

    async fn current_file(
        &self,
        tenant: TenantId,
        workspace: &WorkspaceName,
        path: &str,
    ) -> StoreResult<Option<FileVersion>> {
        let row = sqlx::query(
            "SELECT publish_id, bytes, sha256 FROM workspace_files WHERE tenant_id = $1 AND workspace = $2 AND path = $3",
        )
        .bind(tenant)
        .bind(workspace.as_str())
        .bind(path)
        .fetch_optional(&self.pool)
        .await?;
        row.as_ref().map(version_of).transpose()
    }

    async fn record_versions(
        &self,
        tenant: TenantId,
        workspace: &WorkspaceName,
        changes: &VersionChanges,
    ) -> StoreResult<()> {
        let mut tx = self.begin_write().await?;
        let conn: &mut DbConnection = &mut tx;
        Self::lock_generations_in(conn, vec![(tenant, workspace, changes.publish_id)]).await?;
        Self::record_versions_in(conn, tenant, workspace, changes, Utc::now()).await?;
        tx.commit().await?;
        Ok(())
    }

    async fn add_empty_files(
        &self,
        tenant: TenantId,
        workspace: &WorkspaceName,
        paths: &[&str],
        publish_id: Uuid,
    ) -> StoreResult<bool> {
        let mut present = 0;
        for path in paths {
            present += usize::from(self.current_file(tenant, workspace, path).await?.is_some());
        }
        if present == paths.len() {
            return Ok(false);
        }
        let mut tx = self.begin_write().await?;
        let conn: &mut DbConnection = &mut tx;
        // The generation row first, as a finish takes it: it orders this
        // publish among the workspace's finishes.
        Self::lock_generations_in(conn, vec![(tenant, workspace, publish_id)]).await?;
        let now = Utc::now();
        let mut added = false;
        for path in paths {
            let inserted = sqlx::query(
                "INSERT INTO workspace_files (tenant_id, workspace, path, publish_id, bytes, sha256)
                 VALUES ($1, $2, $3, $4, 0, $5) ON CONFLICT (tenant_id, workspace, path) DO NOTHING",
            )
            .bind(tenant)
            .bind(workspace.as_str())
            .bind(*path)
            .bind(publish_id)
            .bind(crate::domain::ids::sha256_hex(b""))
            .execute(&mut *conn)
            .await?;
            if inserted.rows_affected() > 0 {
                added = true;
                Self::add_chore_in(conn, tenant, workspace, path, publish_id, "place", now).await?;
            }
        }
        if added {
            sqlx::query("UPDATE workspace_generations SET publish_id = $3 WHERE tenant_id = $1 AND workspace = $2")
                .bind(tenant)
                .bind(workspace.as_str())
                .bind(publish_id)
                .execute(&mut *conn)
                .await?;
        }
        tx.commit().await?;
        Ok(added)
    }

    async fn file_chores(
        &self,
        tenant: TenantId,
        workspace: &WorkspaceName,
        limit: u32,
    ) -> StoreResult<Vec<FileChore>> {
        // Places before removals: a place copies from the current version, never a removed one.
        let rows = sqlx::query(
            "SELECT path, publish_id, chore FROM workspace_file_chores WHERE tenant_id = $1 AND workspace = $2
             ORDER BY chore, since LIMIT $3",
        )
        .bind(tenant)
        .bind(workspace.as_str())
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|row| {
                let (path, publish_id) = (row.try_get("path")?, row.try_get("publish_id")?);
                match row.try_get::<String, _>("chore")?.as_str() {
                    "place" => Ok(FileChore::Place { path, publish_id }),
                    "remove" => Ok(FileChore::Remove { path, publish_id }),
                    other => Err(StoreError::Corrupt(format!("unknown file chore {other}"))),
                }
            })
            .collect()
    }

    async fn workspaces_with_chores(
        &self,
        older_than: DateTime<Utc>,
        limit: u32,
    ) -> StoreResult<Vec<(TenantId, WorkspaceName)>> {
        let rows =
            sqlx::query("SELECT DISTINCT tenant_id, workspace FROM workspace_file_chores WHERE since < $1 LIMIT $2")
                .bind(older_than)
                .bind(i64::from(limit))
                .fetch_all(&self.pool)
                .await?;
        rows.iter()
            .map(|row| {
                let workspace = parse_id(WorkspaceName::parse, row.try_get("workspace")?, "workspace")?;
                Ok((row.try_get("tenant_id")?, workspace))
            })
            .collect()
    }

    async fn chores_done(&self, tenant: TenantId, workspace: &WorkspaceName, chores: &[FileChore]) -> StoreResult<()> {
        let mut tx = self.begin_write().await?;
        for chore in chores {
            let (path, publish_id, kind) = match chore {
                FileChore::Place { path, publish_id } => (path, publish_id, "place"),
                FileChore::Remove { path, publish_id } => (path, publish_id, "remove"),
            };
            sqlx::query(
                "DELETE FROM workspace_file_chores
                 WHERE tenant_id = $1 AND workspace = $2 AND path = $3 AND publish_id = $4 AND chore = $5",
            )
            .bind(tenant)
            .bind(workspace.as_str())
            .bind(path.as_str())
            .bind(*publish_id)
            .bind(kind)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    async fn version_referenced(
        &self,
        tenant: TenantId,
        workspace: &WorkspaceName,
        path: &str,
        publish_id: Uuid,
    ) -> StoreResult<bool> {
        let row = sqlx::query(
            "SELECT 1 AS found FROM workspace_files
               WHERE tenant_id = $1 AND workspace = $2 AND path = $3 AND publish_id = $4
             UNION ALL SELECT 1 AS found FROM workspace_file_chores
               WHERE tenant_id = $1 AND workspace = $2 AND path = $3 AND publish_id = $4",
        )
        .bind(tenant)
        .bind(workspace.as_str())
        .bind(path)
        .bind(publish_id)
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.is_some())
    }
}
