//! Forgetting and retention (SPEC §2.7): queuing forget jobs, erasing every
//! row of what a forget job removed in its fenced finish, and the sweeps that
//! expire old records.

use super::*;
use crate::domain::events::session_closed;
use crate::domain::ids::{LayoutName, RolloutId, WorkspaceName};
use crate::domain::job::{ForgetMode, ForgetScope, ForgetSpec, JobSpec};
use crate::domain::layout::{ValidLayout, default_layout, with_implicit_default};
use crate::domain::memory_status::MemoryStatus;
use crate::store::*;
use chrono::{DateTime, Utc};
use sqlx::Row;
use uuid::Uuid;

/// Rollouts of one layout that one retention sweep forgets at most.
const RETENTION_BATCH: i64 = 1000;

/// What a new forget job is.
struct NewForget<'a> {
    scope: ForgetScope,
    mode: ForgetMode,
    workspace: &'a WorkspaceName,
    layout_name: &'a LayoutName,
    layout: &'a ValidLayout,
    rollouts: &'a [RolloutId],
}

/// The target of the forget job a row (`spec`) holds.
pub(super) fn forget_in(row: &<DB as sqlx::Database>::Row) -> StoreResult<ForgetSpec> {
    match JobSpec::from_stored(JobKind::Forget, row.try_get("spec")?).map_err(corrupt)? {
        JobSpec::Forget(forget) => Ok(forget),
        _ => unreachable!("from_stored checks the kind"),
    }
}

impl SqlStore<DB> {
    async fn insert_forget(
        conn: &mut DbConnection,
        tenant: TenantId,
        new: &NewForget<'_>,
        now: DateTime<Utc>,
    ) -> StoreResult<JobRecord> {
        let job_id = Uuid::new_v4();
        let single = (new.rollouts.len() == 1).then(|| new.rollouts[0].as_str());
        let spec = JobSpec::Forget(ForgetSpec { scope: new.scope, mode: new.mode, rollout_ids: new.rollouts.to_vec() });
        sqlx::query(
            "INSERT INTO jobs (id, tenant_id, kind, session_id, workspace, layout, rollout_id, layout_config, state,
                               attempts, run_after, created_at, spec)
             VALUES ($1, $2, 'forget', '', $3, $4, $5, $6, 'queued', 0, $7, $7, $8)",
        )
        .bind(job_id)
        .bind(tenant)
        .bind(new.workspace.as_str())
        .bind(new.layout_name.as_str())
        .bind(single)
        .bind(serde_json::to_string(&new.layout.config).expect("a config always serialises"))
        .bind(now)
        .bind(spec.stored())
        .execute(&mut *conn)
        .await?;
        Self::job_in(conn, job_id).await
    }

    /// Marks the rollouts (those that exist) as being forgotten, then checks
    /// that every session that appended to them is closed: the mark, taken
    /// first, waits for appends under way and refuses later ones. Without
    /// `take_over`, a rollout another forget already marked is left to it.
    async fn mark_rollouts_forgetting(
        conn: &mut DbConnection,
        tenant: TenantId,
        workspace: &WorkspaceName,
        layout: &LayoutName,
        rollouts: &[RolloutId],
        take_over: bool,
    ) -> StoreResult<Result<Vec<RolloutId>, Vec<String>>> {
        let mut known = Vec::new();
        let mut open = std::collections::BTreeSet::new();
        for rollout in rollouts {
            let marked = sqlx::query(
                "UPDATE rollouts SET forgetting = TRUE
                 WHERE tenant_id = $1 AND workspace = $2 AND layout = $3 AND rollout_id = $4
                   AND ($5 = 1 OR NOT forgetting)
                 RETURNING rollout_id",
            )
            .bind(tenant)
            .bind(workspace.as_str())
            .bind(layout.as_str())
            .bind(rollout.as_str())
            .bind(i64::from(take_over))
            .fetch_optional(&mut *conn)
            .await?;
            let indexed = sqlx::query(
                "SELECT 1 AS found FROM raw_memories
                 WHERE tenant_id = $1 AND workspace = $2 AND layout = $3 AND rollout_id = $4",
            )
            .bind(tenant)
            .bind(workspace.as_str())
            .bind(layout.as_str())
            .bind(rollout.as_str())
            .fetch_optional(&mut *conn)
            .await?;
            if marked.is_some() || (take_over && indexed.is_some()) {
                known.push(rollout.clone());
            }
            let sessions = sqlx::query(
                "SELECT s.session_id FROM session_rollouts sr
                 JOIN sessions s ON s.tenant_id = sr.tenant_id AND s.session_id = sr.session_id
                 WHERE sr.tenant_id = $1 AND s.workspace = $2 AND sr.layout = $3 AND sr.rollout_id = $4
                   AND s.state <> 'closed'",
            )
            .bind(tenant)
            .bind(workspace.as_str())
            .bind(layout.as_str())
            .bind(rollout.as_str())
            .fetch_all(&mut *conn)
            .await?;
            for row in sessions {
                open.insert(row.try_get::<String, _>("session_id")?);
            }
        }
        Ok(if open.is_empty() { Ok(known) } else { Err(open.into_iter().collect()) })
    }

    /// Ends the open and closing sessions (without memory) and cancels the
    /// queued and running jobs of a tenant, or of one of its workspaces.
    async fn end_everything_in(
        conn: &mut DbConnection,
        tenant: TenantId,
        workspace: Option<&WorkspaceName>,
        now: DateTime<Utc>,
    ) -> StoreResult<()> {
        let workspace = workspace.map(WorkspaceName::as_str);
        let status = MemoryStatus::forgotten();
        let mut ended: Vec<String> = sqlx::query_scalar(
            "UPDATE sessions SET state = 'closed', memory_status = $3, closed_at = $4
             WHERE tenant_id = $1 AND ($2 IS NULL OR workspace = $2) AND state <> 'closed'
             RETURNING session_id",
        )
        .bind(tenant)
        .bind(workspace)
        .bind(status.to_string())
        .bind(now)
        .fetch_all(&mut *conn)
        .await?;
        // A runtime waiting on a session of a forgotten workspace learns why
        // it ended (a forgotten tenant's streams end with its keys).
        if let Some(workspace) = workspace {
            ended.sort_unstable();
            let events: Vec<_> = ended.iter().map(|id| session_closed(id, workspace, &status)).collect();
            Self::record_events_in(conn, tenant, &events, now).await?;
        }
        // A running job's worker can no longer renew or finish it: its
        // publish is fenced out and its staged files are discarded.
        sqlx::query(
            "UPDATE jobs SET state = 'cancelled', finished_at = $3, lease_owner = NULL, lease_token = NULL,
                    lease_expires_at = NULL
             WHERE tenant_id = $1 AND ($2 IS NULL OR workspace = $2) AND state IN ('queued', 'running')",
        )
        .bind(tenant)
        .bind(workspace)
        .bind(now)
        .execute(&mut *conn)
        .await?;
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    async fn forget_rollouts_queued(
        &self,
        tenant: TenantId,
        workspace: &WorkspaceName,
        layout_name: &LayoutName,
        layout: &ValidLayout,
        rollouts: &[RolloutId],
        mode: ForgetMode,
        take_over: bool,
    ) -> StoreResult<ForgetQueued> {
        let now = Utc::now();
        let mut tx = self.begin_write().await?;
        if let Some(job) = Self::pending_forget_of(&mut tx, tenant, workspace, layout_name, rollouts).await? {
            return Ok(ForgetQueued::Job(Box::new(job)));
        }
        let known =
            match Self::mark_rollouts_forgetting(&mut tx, tenant, workspace, layout_name, rollouts, take_over).await? {
                // Dropping the transaction takes the marks back.
                Err(open) => return Ok(ForgetQueued::SessionsOpen(open)),
                Ok(known) if known.is_empty() => return Ok(ForgetQueued::UnknownRollout),
                Ok(known) => known,
            };
        let new = NewForget { scope: ForgetScope::Rollouts, mode, workspace, layout_name, layout, rollouts: &known };
        let job = Self::insert_forget(&mut tx, tenant, &new, now).await?;
        tx.commit().await?;
        Ok(ForgetQueued::Job(Box::new(job)))
    }

    /// A forget job, queued or running, that already forgets all of these rollouts.
    async fn pending_forget_of(
        conn: &mut DbConnection,
        tenant: TenantId,
        workspace: &WorkspaceName,
        layout: &LayoutName,
        rollouts: &[RolloutId],
    ) -> StoreResult<Option<JobRecord>> {
        let pending = sqlx::query(
            "SELECT id, spec FROM jobs WHERE tenant_id = $1 AND workspace = $2 AND layout = $3
               AND kind = 'forget' AND state IN ('queued', 'running')
             ORDER BY created_at",
        )
        .bind(tenant)
        .bind(workspace.as_str())
        .bind(layout.as_str())
        .fetch_all(&mut *conn)
        .await?;
        for row in pending {
            let forget = forget_in(&row)?;
            if forget.scope == ForgetScope::Rollouts && rollouts.iter().all(|r| forget.rollout_ids.contains(r)) {
                return Ok(Some(Self::job_in(conn, row.try_get("id")?).await?));
            }
        }
        Ok(None)
    }
}

#[async_trait::async_trait]
impl ForgetStore for SqlStore<DB> {
    async fn queue_forget_rollouts(
        &self,
        tenant: TenantId,
        workspace: &WorkspaceName,
        layout_name: &LayoutName,
        layout: &ValidLayout,
        rollouts: &[RolloutId],
        mode: ForgetMode,
    ) -> StoreResult<ForgetQueued> {
        self.forget_rollouts_queued(tenant, workspace, layout_name, layout, rollouts, mode, true).await
    }

    async fn queue_forget_workspace(
        &self,
        tenant: TenantId,
        workspace: &WorkspaceName,
    ) -> StoreResult<Option<JobRecord>> {
        let now = Utc::now();
        let mut tx = self.begin_write().await?;
        let pending =
            sqlx::query(locking::<DB>("SELECT job_id FROM workspace_forgets WHERE tenant_id = $1 AND workspace = $2"))
                .bind(tenant)
                .bind(workspace.as_str())
                .fetch_optional(&mut *tx)
                .await?;
        if let Some(row) = pending {
            let job = Self::job_in(&mut tx, row.try_get("job_id")?).await?;
            return Ok(Some(job));
        }
        // Known as everywhere else: a session, a rollout, a raw memory or an import made it.
        let known = workspace == &WorkspaceName::default_workspace()
            || !Self::workspace_empty_in(&mut tx, tenant, workspace).await?;
        if !known {
            return Ok(None);
        }
        Self::end_everything_in(&mut tx, tenant, Some(workspace), now).await?;
        let (layout_name, layout) = (LayoutName::default_layout(), default_layout());
        let new = NewForget {
            scope: ForgetScope::Workspace,
            mode: ForgetMode::Rebuild,
            workspace,
            layout_name: &layout_name,
            layout: &layout,
            rollouts: &[],
        };
        let job = Self::insert_forget(&mut tx, tenant, &new, now).await?;
        sqlx::query("INSERT INTO workspace_forgets (tenant_id, workspace, job_id) VALUES ($1, $2, $3)")
            .bind(tenant)
            .bind(workspace.as_str())
            .bind(job.job_id)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(Some(job))
    }

    async fn queue_forget_tenant(&self, tenant: TenantId) -> StoreResult<Option<JobRecord>> {
        let now = Utc::now();
        let mut tx = self.begin_write().await?;
        let Some(row) = sqlx::query(locking::<DB>("SELECT deleting_at FROM tenants WHERE id = $1"))
            .bind(tenant)
            .fetch_optional(&mut *tx)
            .await?
        else {
            return Ok(None);
        };
        if row.try_get::<Option<DateTime<Utc>>, _>("deleting_at")?.is_some() {
            let forgets = sqlx::query(
                "SELECT id, spec FROM jobs WHERE tenant_id = $1 AND kind = 'forget' ORDER BY created_at DESC",
            )
            .bind(tenant)
            .fetch_all(&mut *tx)
            .await?;
            for row in forgets {
                if forget_in(&row)?.scope == ForgetScope::Tenant {
                    return Ok(Some(Self::job_in(&mut tx, row.try_get("id")?).await?));
                }
            }
        }
        sqlx::query("UPDATE tenants SET deleting_at = $2 WHERE id = $1")
            .bind(tenant)
            .bind(now)
            .execute(&mut *tx)
            .await?;
        sqlx::query("UPDATE api_keys SET revoked_at = $2 WHERE tenant_id = $1 AND revoked_at IS NULL")
            .bind(tenant)
            .bind(now)
            .execute(&mut *tx)
            .await?;
        Self::end_everything_in(&mut tx, tenant, None, now).await?;
        let (workspace, layout_name, layout) =
            (WorkspaceName::default_workspace(), LayoutName::default_layout(), default_layout());
        let new = NewForget {
            scope: ForgetScope::Tenant,
            mode: ForgetMode::Rebuild,
            workspace: &workspace,
            layout_name: &layout_name,
            layout: &layout,
            rollouts: &[],
        };
        let job = Self::insert_forget(&mut tx, tenant, &new, now).await?;
        tx.commit().await?;
        Ok(Some(job))
    }

    async fn workspace_forgetting(&self, tenant: TenantId, workspace: &WorkspaceName) -> StoreResult<bool> {
        let row = sqlx::query("SELECT 1 AS found FROM workspace_forgets WHERE tenant_id = $1 AND workspace = $2")
            .bind(tenant)
            .bind(workspace.as_str())
            .fetch_optional(&self.pool)
            .await?;
        Ok(row.is_some())
    }

    async fn compact_after_forget(&self) -> StoreResult<()> {
        if let Some(sql) = DB::AFTER_FORGET {
            // No transaction may be open on the connection, and no writer may
            // be between its statements.
            // A reader in the middle of a read keeps the log (SQLite answers
            // busy): then the checkpoint is tried again, for up to a second.
            for _ in 0..50 {
                let row = match &self.writer {
                    Some(writer) => {
                        let _gate = writer.gate.lock().await;
                        sqlx::query(sql).fetch_optional(&writer.connection).await?
                    }
                    None => sqlx::query(sql).fetch_optional(&self.pool).await?,
                };
                let busy = row.and_then(|r| r.try_get::<i64, _>(0).ok()).unwrap_or(0);
                if busy == 0 {
                    return Ok(());
                }
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
            tracing::warn!("the log of forgotten rows could not be folded in: readers kept it busy");
        }
        Ok(())
    }

    async fn expire_idempotency_keys(&self, before: DateTime<Utc>, batch: i64) -> StoreResult<u64> {
        // The oldest `batch` keys, the same ones for both statements of the transaction.
        const EXPIRED: &str = "SELECT tenant_id, key FROM idempotency_keys WHERE created_at < $1
                               ORDER BY created_at, tenant_id, key LIMIT $2";
        let mut tx = self.begin_write().await?;
        // A batch's key lists its rollouts: the listing goes with the key.
        sqlx::query(AssertSqlSafe(format!(
            "DELETE FROM idempotency_key_rollouts WHERE (tenant_id, key) IN ({EXPIRED})"
        )))
        .bind(before)
        .bind(batch)
        .execute(&mut *tx)
        .await?;
        let deleted = sqlx::query(AssertSqlSafe(format!(
            "DELETE FROM idempotency_keys WHERE (tenant_id, key) IN ({EXPIRED}) RETURNING 1 AS gone"
        )))
        .bind(before)
        .bind(batch)
        .fetch_all(&mut *tx)
        .await?
        .len() as u64;
        tx.commit().await?;
        Ok(deleted)
    }

    async fn expire_records(&self, before: DateTime<Utc>, batch: i64) -> StoreResult<u64> {
        let mut tx = self.begin_write().await?;
        // The rows are chosen once and locked, so that the statements below
        // delete the same ones (a job's `job_sessions` rows before the job).
        let jobs: Vec<Uuid> = sqlx::query(locking::<DB>(
            "SELECT id FROM jobs WHERE finished_at < $1 AND state IN ('succeeded', 'skipped', 'failed', 'cancelled')
             ORDER BY finished_at LIMIT $2",
        ))
        .bind(before)
        .bind(batch)
        .fetch_all(&mut *tx)
        .await?
        .iter()
        .map(|r| r.try_get("id"))
        .collect::<Result<_, _>>()?;
        let sessions: Vec<(TenantId, String)> = sqlx::query(locking::<DB>(
            "SELECT tenant_id, session_id FROM sessions WHERE closed_at < $1 AND state = 'closed'
             ORDER BY closed_at LIMIT $2",
        ))
        .bind(before)
        .bind(batch)
        .fetch_all(&mut *tx)
        .await?
        .iter()
        .map(|r| Ok((r.try_get("tenant_id")?, r.try_get("session_id")?)))
        .collect::<Result<_, sqlx::Error>>()?;
        for id in &jobs {
            for sql in ["DELETE FROM job_sessions WHERE job_id = $1", "DELETE FROM jobs WHERE id = $1"] {
                sqlx::query(sql).bind(id).execute(&mut *tx).await?;
            }
        }
        for (tenant, session) in &sessions {
            for sql in [
                "DELETE FROM session_rollouts WHERE tenant_id = $1 AND session_id = $2",
                "DELETE FROM sessions WHERE tenant_id = $1 AND session_id = $2",
            ] {
                sqlx::query(sql).bind(tenant).bind(session.as_str()).execute(&mut *tx).await?;
            }
        }
        // Sign-outs of console sessions that have expired anyway.
        sqlx::query("DELETE FROM console_signouts WHERE expires_at < $1").bind(Utc::now()).execute(&mut *tx).await?;
        tx.commit().await?;
        Ok((jobs.len() + sessions.len()) as u64)
    }

    async fn queue_retention_forgets(&self, now: DateTime<Utc>, default_days: f64) -> StoreResult<Vec<JobRecord>> {
        let tenants: Vec<TenantId> = sqlx::query("SELECT id FROM tenants WHERE deleting_at IS NULL ORDER BY id")
            .fetch_all(&self.pool)
            .await?
            .iter()
            .map(|r| r.try_get("id"))
            .collect::<Result<_, _>>()?;
        let mut queued = Vec::new();
        for tenant in tenants {
            let layouts = with_implicit_default(Self::layouts_in(&self.pool, tenant).await?);
            for stored in layouts {
                let Some(idle) = stored.layout.config.retention.rollout_idle_limit(default_days) else { continue };
                let idle_rollouts = sqlx::query(
                    "SELECT r.workspace, r.rollout_id FROM rollouts r
                     WHERE r.tenant_id = $1 AND r.layout = $2 AND r.updated_at < $3 AND NOT r.forgetting
                       AND NOT EXISTS (
                         SELECT 1 FROM session_rollouts sr JOIN sessions s
                            ON s.tenant_id = sr.tenant_id AND s.session_id = sr.session_id
                         WHERE sr.tenant_id = r.tenant_id AND sr.layout = r.layout AND sr.rollout_id = r.rollout_id
                           AND s.workspace = r.workspace AND s.state <> 'closed')
                     ORDER BY r.workspace, r.rollout_id LIMIT $4",
                )
                .bind(tenant)
                .bind(stored.name.as_str())
                .bind(now - idle)
                .bind(RETENTION_BATCH)
                .fetch_all(&self.pool)
                .await?;
                let mut by_workspace: std::collections::BTreeMap<String, Vec<RolloutId>> = Default::default();
                for row in &idle_rollouts {
                    let rollout = parse_id(RolloutId::parse, row.try_get("rollout_id")?, "rollout id")?;
                    by_workspace.entry(row.try_get("workspace")?).or_default().push(rollout);
                }
                for (workspace, rollouts) in by_workspace {
                    let workspace = parse_id(WorkspaceName::parse, &workspace, "workspace")?;
                    let queued_now = self
                        .forget_rollouts_queued(
                            tenant,
                            &workspace,
                            &stored.name,
                            &stored.layout,
                            &rollouts,
                            ForgetMode::Scrub,
                            false,
                        )
                        .await?;
                    if let ForgetQueued::Job(job) = queued_now {
                        queued.push(*job);
                    }
                }
            }
        }
        Ok(queued)
    }
}
