//! Erasing what a forget job removed (SPEC §2.7): every row of the
//! forgotten conversations, workspace or tenant, in the job's fenced finish.

use super::*;
use crate::domain::ids::{LayoutName, RolloutId};
use crate::domain::job::ForgetScope;
use crate::domain::memory_status::{MemoryStatus, ledger_without};
use crate::store::*;
use sqlx::Row;
use uuid::Uuid;

/// What an erasing statement binds: the scope it erases (`$1`… naming the
/// tenant, workspace and so on), then, for some, the forget job itself
/// (`$n + 1`), which must survive its own erasure.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Binds {
    Scope,
    ScopeAndOwnJob,
}

impl SqlStore<DB> {
    /// Drops the history blobs of a tenant that no kept run refers to.
    pub(super) async fn drop_unreferenced_blobs(conn: &mut DbConnection, tenant: TenantId) -> StoreResult<()> {
        sqlx::query(
            "DELETE FROM history_blobs WHERE tenant_id = $1 AND NOT EXISTS (
                SELECT 1 FROM run_files f WHERE f.tenant_id = $1
                   AND (f.before_hash = history_blobs.hash OR f.after_hash = history_blobs.hash))",
        )
        .bind(tenant)
        .execute(&mut *conn)
        .await?;
        Ok(())
    }

    /// Every row of what a succeeded forget job removed, in its fenced
    /// finish; says what it freed of the tenant's storage.
    pub(super) async fn erase_forgotten(conn: &mut DbConnection, claimed: &ClaimedJob) -> StoreResult<Freed> {
        let job = &claimed.job;
        let spec = job.forget.as_ref().ok_or_else(|| corrupt("a forget job without a target"))?;
        match spec.scope {
            ForgetScope::Rollouts => {
                let bytes = Self::erase_rollouts(
                    conn,
                    claimed.tenant_id,
                    &job.workspace,
                    &job.layout,
                    &spec.rollout_ids,
                    job.job_id,
                )
                .await?;
                Ok(Freed::RolloutBytes(bytes))
            }
            ForgetScope::Workspace => {
                Self::erase_workspace(conn, claimed.tenant_id, &job.workspace, job.job_id).await?;
                Ok(Freed::Workspace)
            }
            ForgetScope::Tenant => {
                Self::erase_tenant(conn, claimed.tenant_id).await?;
                Ok(Freed::Tenant)
            }
        }
    }

    async fn erase_rollouts(
        conn: &mut DbConnection,
        tenant: TenantId,
        workspace: &WorkspaceName,
        layout: &LayoutName,
        ids: &[RolloutId],
        own_job: Uuid,
    ) -> StoreResult<i64> {
        let mut freed = 0;
        for id in ids {
            let row = sqlx::query(
                "SELECT committed_len FROM rollouts WHERE tenant_id = $1 AND workspace = $2 AND layout = $3 AND rollout_id = $4",
            )
            .bind(tenant)
            .bind(workspace.as_str())
            .bind(layout.as_str())
            .bind(id.as_str())
            .fetch_optional(&mut *conn)
            .await?;
            if let Some(row) = row {
                freed += row.try_get::<i64, _>("committed_len")?;
            }
        }
        // `$1`–`$4` name the rollout.
        const BY_ROLLOUT: [(Binds, &str); 10] = [
            (
                Binds::Scope,
                "DELETE FROM rollout_journal WHERE tenant_id = $1 AND workspace = $2 AND layout = $3 AND rollout_id = $4",
            ),
            (
                Binds::Scope,
                "DELETE FROM rollouts WHERE tenant_id = $1 AND workspace = $2 AND layout = $3 AND rollout_id = $4",
            ),
            (
                Binds::Scope,
                "DELETE FROM raw_memories WHERE tenant_id = $1 AND workspace = $2 AND layout = $3 AND rollout_id = $4",
            ),
            (
                Binds::Scope,
                "DELETE FROM memory_uses WHERE tenant_id = $1 AND workspace = $2 AND layout = $3 AND rollout_id = $4",
            ),
            (
                Binds::Scope,
                "UPDATE phase_two_runs SET rollout_id = NULL
                 WHERE tenant_id = $1 AND workspace = $2 AND layout = $3 AND rollout_id = $4",
            ),
            (
                Binds::Scope,
                "DELETE FROM idempotency_keys WHERE tenant_id = $1 AND workspace = $2 AND layout = $3 AND rollout_id = $4",
            ),
            // A batch's key, with every rollout its answer names.
            (
                Binds::Scope,
                "DELETE FROM idempotency_keys WHERE tenant_id = $1 AND key IN (
                    SELECT key FROM idempotency_key_rollouts
                    WHERE tenant_id = $1 AND workspace = $2 AND layout = $3 AND rollout_id = $4)",
            ),
            (
                Binds::Scope,
                "DELETE FROM idempotency_key_rollouts WHERE tenant_id = $1 AND key IN (
                    SELECT key FROM idempotency_key_rollouts
                    WHERE tenant_id = $1 AND workspace = $2 AND layout = $3 AND rollout_id = $4)",
            ),
            (
                Binds::Scope,
                "DELETE FROM session_rollouts WHERE tenant_id = $1 AND layout = $3 AND rollout_id = $4
                    AND session_id IN (SELECT session_id FROM sessions WHERE tenant_id = $1 AND workspace = $2)",
            ),
            // Its phase-one jobs (no phase-two job names a rollout).
            (
                Binds::ScopeAndOwnJob,
                "DELETE FROM jobs WHERE tenant_id = $1 AND workspace = $2 AND layout = $3 AND rollout_id = $4 AND id <> $5",
            ),
        ];
        for id in ids {
            for (binds, sql) in BY_ROLLOUT {
                let query =
                    sqlx::query(sql).bind(tenant).bind(workspace.as_str()).bind(layout.as_str()).bind(id.as_str());
                let query = if binds == Binds::ScopeAndOwnJob { query.bind(own_job) } else { query };
                query.execute(&mut *conn).await?;
            }
        }
        Self::erase_earlier_forgets_naming(conn, tenant, workspace, layout, ids, own_job).await?;
        Self::scrub_errors_naming(conn, tenant, workspace, ids, own_job).await?;
        Self::erase_ledgers_naming(conn, tenant, workspace, layout, ids).await?;
        Self::erase_events_naming(conn, tenant, workspace, ids).await?;
        Self::erase_statuses_naming(conn, tenant, workspace, layout, ids).await?;
        Ok(freed)
    }

    /// Earlier forgets of several rollouts that named one of `ids`: their
    /// records would name it.
    async fn erase_earlier_forgets_naming(
        conn: &mut DbConnection,
        tenant: TenantId,
        workspace: &WorkspaceName,
        layout: &LayoutName,
        ids: &[RolloutId],
        own_job: Uuid,
    ) -> StoreResult<()> {
        let earlier = sqlx::query(
            "SELECT id, spec FROM jobs WHERE tenant_id = $1 AND workspace = $2 AND layout = $3
               AND kind = 'forget' AND id <> $4",
        )
        .bind(tenant)
        .bind(workspace.as_str())
        .bind(layout.as_str())
        .bind(own_job)
        .fetch_all(&mut *conn)
        .await?;
        for row in earlier {
            let named = super::forget::forget_in(&row)?.rollout_ids;
            if named.iter().any(|n| ids.contains(n)) {
                sqlx::query("DELETE FROM jobs WHERE id = $1")
                    .bind(row.try_get::<Uuid, _>("id")?)
                    .execute(&mut *conn)
                    .await?;
            }
        }
        Ok(())
    }

    /// Jobs' and runs' error texts that name one of `ids` are replaced.
    async fn scrub_errors_naming(
        conn: &mut DbConnection,
        tenant: TenantId,
        workspace: &WorkspaceName,
        ids: &[RolloutId],
        own_job: Uuid,
    ) -> StoreResult<()> {
        for (select, update) in [
            (
                "SELECT id, last_error AS error FROM jobs WHERE tenant_id = $1 AND workspace = $2 AND last_error IS NOT NULL",
                "UPDATE jobs SET last_error = $2 WHERE id = $1",
            ),
            (
                "SELECT id, error FROM phase_two_runs WHERE tenant_id = $1 AND workspace = $2 AND error IS NOT NULL",
                "UPDATE phase_two_runs SET error = $2 WHERE id = $1",
            ),
        ] {
            let rows = sqlx::query(select).bind(tenant).bind(workspace.as_str()).fetch_all(&mut *conn).await?;
            for row in rows {
                let id: Uuid = row.try_get("id")?;
                if id != own_job && mentions_any(row.try_get("error")?, ids) {
                    sqlx::query(update).bind(id).bind(SCRUBBED_ERROR).execute(&mut *conn).await?;
                }
            }
        }
        Ok(())
    }

    /// Sessions' memory statuses lose the rollouts' entries.
    async fn erase_statuses_naming(
        conn: &mut DbConnection,
        tenant: TenantId,
        workspace: &WorkspaceName,
        layout: &LayoutName,
        ids: &[RolloutId],
    ) -> StoreResult<()> {
        let statuses = sqlx::query(
            "SELECT session_id, memory_status FROM sessions
             WHERE tenant_id = $1 AND workspace = $2 AND memory_status IS NOT NULL",
        )
        .bind(tenant)
        .bind(workspace.as_str())
        .fetch_all(&mut *conn)
        .await?;
        for row in statuses {
            let text: String = row.try_get("memory_status")?;
            if !mentions_any(&text, ids) {
                continue;
            }
            let status: MemoryStatus = serde_json::from_str(&text).map_err(corrupt)?;
            if let Some(cleaned) = status.without_rollouts(layout, ids) {
                sqlx::query("UPDATE sessions SET memory_status = $3 WHERE tenant_id = $1 AND session_id = $2")
                    .bind(tenant)
                    .bind(row.try_get::<String, _>("session_id")?)
                    .bind(cleaned.to_string())
                    .execute(&mut *conn)
                    .await?;
            }
        }
        Ok(())
    }

    /// Earlier runs' ledgers (added, retained, removed) lose the ids; their
    /// counts stay what those runs did.
    async fn erase_ledgers_naming(
        conn: &mut DbConnection,
        tenant: TenantId,
        workspace: &WorkspaceName,
        layout: &LayoutName,
        ids: &[RolloutId],
    ) -> StoreResult<()> {
        let rows = sqlx::query(
            "SELECT id, ledger FROM phase_two_runs
             WHERE tenant_id = $1 AND workspace = $2 AND layout = $3 AND ledger IS NOT NULL",
        )
        .bind(tenant)
        .bind(workspace.as_str())
        .bind(layout.as_str())
        .fetch_all(&mut *conn)
        .await?;
        for row in rows {
            let text: String = row.try_get("ledger")?;
            if !mentions_any(&text, ids) {
                continue;
            }
            let ledger: serde_json::Value = serde_json::from_str(&text).map_err(corrupt)?;
            if let Some(cleaned) = ledger_without(&ledger, ids) {
                sqlx::query("UPDATE phase_two_runs SET ledger = $2 WHERE id = $1")
                    .bind(row.try_get::<Uuid, _>("id")?)
                    .bind(cleaned.to_string())
                    .execute(&mut *conn)
                    .await?;
            }
        }
        Ok(())
    }

    /// The workspace's events (and their deliveries) that name one of
    /// `ids`: a closed session's failures, a failed job's error.
    async fn erase_events_naming(
        conn: &mut DbConnection,
        tenant: TenantId,
        workspace: &WorkspaceName,
        ids: &[RolloutId],
    ) -> StoreResult<()> {
        let rows = sqlx::query("SELECT seq, payload FROM events WHERE tenant_id = $1 AND workspace = $2")
            .bind(tenant)
            .bind(workspace.as_str())
            .fetch_all(&mut *conn)
            .await?;
        for row in rows {
            if !mentions_any(row.try_get("payload")?, ids) {
                continue;
            }
            let seq: i64 = row.try_get("seq")?;
            for sql in [
                "DELETE FROM webhook_deliveries WHERE tenant_id = $1 AND event_seq = $2",
                "DELETE FROM events WHERE tenant_id = $1 AND seq = $2",
            ] {
                sqlx::query(sql).bind(tenant).bind(seq).execute(&mut *conn).await?;
            }
        }
        Ok(())
    }

    async fn erase_workspace(
        conn: &mut DbConnection,
        tenant: TenantId,
        workspace: &WorkspaceName,
        own_job: Uuid,
    ) -> StoreResult<()> {
        // `$1`, `$2` name the workspace.
        const BY_WORKSPACE: [(Binds, &str); 23] = [
            (Binds::Scope, "DELETE FROM memory_uses WHERE tenant_id = $1 AND workspace = $2"),
            // Its events, and their deliveries, leave the outbox, but for the
            // forget's own: the `session.closed` of the sessions it ended
            // (the `forget.completed` is recorded after this).
            (
                Binds::ScopeAndOwnJob,
                // Both statements keep the events that are not the
                // `session.closed` of a session the forget job `$3` ended.
                "DELETE FROM webhook_deliveries WHERE tenant_id = $1 AND event_seq IN (
                    SELECT seq FROM events WHERE tenant_id = $1 AND workspace = $2
                      AND NOT (event_type = 'session.closed' AND payload LIKE '%\"status\":\"forgotten\"%'
                               AND created_at >= (SELECT created_at FROM jobs WHERE id = $3)))",
            ),
            (
                Binds::ScopeAndOwnJob,
                "DELETE FROM events WHERE tenant_id = $1 AND workspace = $2
                   AND NOT (event_type = 'session.closed' AND payload LIKE '%\"status\":\"forgotten\"%'
                            AND created_at >= (SELECT created_at FROM jobs WHERE id = $3))",
            ),
            (
                Binds::Scope,
                "DELETE FROM session_rollouts WHERE tenant_id = $1
                    AND session_id IN (SELECT session_id FROM sessions WHERE tenant_id = $1 AND workspace = $2)",
            ),
            (Binds::Scope, "DELETE FROM sessions WHERE tenant_id = $1 AND workspace = $2"),
            (
                Binds::ScopeAndOwnJob,
                "DELETE FROM job_sessions WHERE job_id IN (SELECT id FROM jobs WHERE tenant_id = $1 AND workspace = $2 AND id <> $3)",
            ),
            (Binds::ScopeAndOwnJob, "DELETE FROM jobs WHERE tenant_id = $1 AND workspace = $2 AND id <> $3"),
            (Binds::Scope, "DELETE FROM rollout_journal WHERE tenant_id = $1 AND workspace = $2"),
            (Binds::Scope, "DELETE FROM workspace_files WHERE tenant_id = $1 AND workspace = $2"),
            (Binds::Scope, "DELETE FROM workspace_generations WHERE tenant_id = $1 AND workspace = $2"),
            (Binds::Scope, "DELETE FROM workspace_file_chores WHERE tenant_id = $1 AND workspace = $2"),
            (Binds::Scope, "DELETE FROM rollouts WHERE tenant_id = $1 AND workspace = $2"),
            (Binds::Scope, "DELETE FROM raw_memories WHERE tenant_id = $1 AND workspace = $2"),
            (Binds::Scope, "DELETE FROM phase_two_selections WHERE tenant_id = $1 AND workspace = $2"),
            (Binds::Scope, "DELETE FROM phase_two_runs WHERE tenant_id = $1 AND workspace = $2"),
            (
                Binds::Scope,
                "DELETE FROM run_files WHERE run_id IN (SELECT run_id FROM run_history WHERE tenant_id = $1 AND workspace = $2)",
            ),
            (Binds::Scope, "DELETE FROM run_history WHERE tenant_id = $1 AND workspace = $2"),
            (Binds::Scope, "DELETE FROM idempotency_keys WHERE tenant_id = $1 AND workspace = $2"),
            (Binds::Scope, "DELETE FROM idempotency_key_rollouts WHERE tenant_id = $1 AND workspace = $2"),
            (Binds::Scope, "DELETE FROM workspace_forgets WHERE tenant_id = $1 AND workspace = $2"),
            (Binds::Scope, "DELETE FROM passage_vectors WHERE tenant_id = $1 AND workspace = $2"),
            (Binds::Scope, "DELETE FROM passage_indexes WHERE tenant_id = $1 AND workspace = $2"),
            (Binds::Scope, "DELETE FROM workspaces WHERE tenant_id = $1 AND workspace = $2"),
        ];
        for (binds, sql) in BY_WORKSPACE {
            let query = sqlx::query(sql).bind(tenant).bind(workspace.as_str());
            let query = if binds == Binds::ScopeAndOwnJob { query.bind(own_job) } else { query };
            query.execute(&mut *conn).await?;
        }
        Self::drop_unreferenced_blobs(conn, tenant).await
    }

    async fn erase_tenant(conn: &mut DbConnection, tenant: TenantId) -> StoreResult<()> {
        // Children before the rows they refer to.
        const BY_TENANT: [&str; 35] = [
            "DELETE FROM memory_uses WHERE tenant_id = $1",
            "DELETE FROM passage_vectors WHERE tenant_id = $1",
            "DELETE FROM passage_indexes WHERE tenant_id = $1",
            "DELETE FROM webhook_deliveries WHERE tenant_id = $1",
            "DELETE FROM tenant_turns WHERE tenant_id = $1",
            "DELETE FROM webhooks WHERE tenant_id = $1",
            "DELETE FROM events WHERE tenant_id = $1",
            "DELETE FROM event_counters WHERE tenant_id = $1",
            "DELETE FROM tenant_limits WHERE tenant_id = $1",
            "DELETE FROM storage_usage WHERE tenant_id = $1",
            "DELETE FROM usage_days WHERE tenant_id = $1",
            "DELETE FROM model_usage_days WHERE tenant_id = $1",
            "DELETE FROM model_budget_holds WHERE tenant_id = $1",
            "DELETE FROM run_files WHERE tenant_id = $1",
            "DELETE FROM run_history WHERE tenant_id = $1",
            "DELETE FROM history_blobs WHERE tenant_id = $1",
            "DELETE FROM phase_two_runs WHERE tenant_id = $1",
            "DELETE FROM phase_two_selections WHERE tenant_id = $1",
            "DELETE FROM raw_memories WHERE tenant_id = $1",
            "DELETE FROM job_sessions WHERE tenant_id = $1",
            "DELETE FROM jobs WHERE tenant_id = $1",
            "DELETE FROM idempotency_key_rollouts WHERE tenant_id = $1",
            "DELETE FROM idempotency_keys WHERE tenant_id = $1",
            "DELETE FROM session_rollouts WHERE tenant_id = $1",
            "DELETE FROM rollout_journal WHERE tenant_id = $1",
            "DELETE FROM workspace_files WHERE tenant_id = $1",
            "DELETE FROM workspace_generations WHERE tenant_id = $1",
            "DELETE FROM workspace_file_chores WHERE tenant_id = $1",
            "DELETE FROM rollouts WHERE tenant_id = $1",
            "DELETE FROM sessions WHERE tenant_id = $1",
            "DELETE FROM workspace_forgets WHERE tenant_id = $1",
            "DELETE FROM workspaces WHERE tenant_id = $1",
            "DELETE FROM layouts WHERE tenant_id = $1",
            "DELETE FROM api_keys WHERE tenant_id = $1",
            "DELETE FROM tenants WHERE id = $1",
        ];
        for sql in BY_TENANT {
            sqlx::query(sql).bind(tenant).execute(&mut *conn).await?;
        }
        Ok(())
    }
}
