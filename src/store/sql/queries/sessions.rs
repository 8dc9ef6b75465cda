//! Sessions: opening, viewing, closing (with the jobs a close queues) and settling.

use super::rows::*;
use super::*;
use crate::domain::events::session_closed;
use crate::domain::ids::{LayoutName, RolloutId, SessionId, WorkspaceName};
use crate::domain::job::{JobKind, JobSpec, jobs_for_close};
use crate::domain::memory_status::close_transition;
use crate::domain::memory_status::{MemoryFailure, MemoryStatus};
use crate::store::*;
use chrono::Utc;
use sqlx::{Executor, Row};
use uuid::Uuid;
impl SqlStore<DB> {
    pub(super) async fn session_in<'e>(
        executor: impl Executor<'e, Database = DB>,
        tenant: TenantId,
        id: &SessionId,
        lock: bool,
    ) -> StoreResult<Option<SessionRecord>> {
        let select = "SELECT * FROM sessions WHERE tenant_id = $1 AND session_id = $2";
        let sql = if lock { locking::<DB>(select) } else { AssertSqlSafe(select.to_owned()) };
        let row = sqlx::query(sql).bind(tenant).bind(id.as_str()).fetch_optional(executor).await?;
        row.as_ref().map(Self::record::<SessionRow, SessionRecord>).transpose()
    }

    pub(super) async fn touched_in<'e>(
        executor: impl Executor<'e, Database = DB>,
        tenant: TenantId,
        id: &SessionId,
    ) -> StoreResult<Vec<TouchedRollout>> {
        let rows = sqlx::query(
            "SELECT layout, rollout_id, segment_count FROM session_rollouts
             WHERE tenant_id = $1 AND session_id = $2 ORDER BY layout, rollout_id",
        )
        .bind(tenant)
        .bind(id.as_str())
        .fetch_all(executor)
        .await?;
        rows.iter()
            .map(|r| {
                Ok(TouchedRollout {
                    layout: parse_id(LayoutName::parse, r.try_get("layout")?, "layout name")?,
                    rollout_id: parse_id(RolloutId::parse, r.try_get("rollout_id")?, "rollout id")?,
                    segment_count: r.try_get("segment_count")?,
                })
            })
            .collect()
    }

    /// The layout's phase-two job that is queued and not yet started, locked:
    /// a close joins it rather than queue another (SPEC §2.3).
    pub(super) async fn waiting_phase_two(
        conn: &mut DbConnection,
        tenant: TenantId,
        workspace: &WorkspaceName,
        layout: &LayoutName,
    ) -> StoreResult<Option<Uuid>> {
        if let Some(lock) = DB::LAYOUT_LOCK {
            sqlx::query(lock).bind(format!("{tenant}/{workspace}/{layout}")).execute(&mut *conn).await?;
        }
        let row = sqlx::query(locking::<DB>(
            "SELECT id FROM jobs WHERE tenant_id = $1 AND workspace = $2 AND layout = $3
               AND kind = 'phase_two' AND state = 'queued' ORDER BY created_at LIMIT 1",
        ))
        .bind(tenant)
        .bind(workspace.as_str())
        .bind(layout.as_str())
        .fetch_optional(&mut *conn)
        .await?;
        Ok(row.map(|r| r.try_get("id")).transpose()?)
    }

    /// Phase-two job `job_id` serves `session` too.
    pub(super) async fn serve_session(
        conn: &mut DbConnection,
        job_id: Uuid,
        tenant: TenantId,
        session: &str,
    ) -> StoreResult<()> {
        sqlx::query(
            "INSERT INTO job_sessions (job_id, tenant_id, session_id) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING",
        )
        .bind(job_id)
        .bind(tenant)
        .bind(session)
        .execute(&mut *conn)
        .await?;
        Ok(())
    }

    /// The session's rollouts whose raw memory was made from exactly their
    /// committed bytes, as `(layout, rollout)`.
    async fn extracted_at_committed_len(
        conn: &mut DbConnection,
        tenant: TenantId,
        session: &SessionId,
        workspace: &WorkspaceName,
    ) -> StoreResult<std::collections::HashSet<(LayoutName, RolloutId)>> {
        let rows = sqlx::query(
            "SELECT r.layout, r.rollout_id FROM session_rollouts sr
             JOIN rollouts r ON r.tenant_id = sr.tenant_id AND r.workspace = $3 AND r.layout = sr.layout
                AND r.rollout_id = sr.rollout_id
             JOIN raw_memories m ON m.tenant_id = r.tenant_id AND m.workspace = r.workspace AND m.layout = r.layout
                AND m.rollout_id = r.rollout_id
             WHERE sr.tenant_id = $1 AND sr.session_id = $2 AND m.extracted_len = r.committed_len",
        )
        .bind(tenant)
        .bind(session.as_str())
        .bind(workspace.as_str())
        .fetch_all(&mut *conn)
        .await?;
        rows.iter()
            .map(|r| {
                Ok((
                    parse_id(LayoutName::parse, r.try_get("layout")?, "layout name")?,
                    parse_id(RolloutId::parse, r.try_get("rollout_id")?, "rollout id")?,
                ))
            })
            .collect()
    }

    pub(super) async fn jobs_of_session<'e>(
        executor: impl Executor<'e, Database = DB>,
        tenant: TenantId,
        id: &SessionId,
    ) -> StoreResult<Vec<JobRecord>> {
        let rows = sqlx::query(AssertSqlSafe(format!(
            "SELECT {} FROM jobs WHERE tenant_id = $1 AND {SESSION_JOBS} ORDER BY created_at, kind, layout, rollout_id",
            job_columns::<DB>()
        )))
        .bind(tenant)
        .bind(id.as_str())
        .fetch_all(executor)
        .await?;
        rows.iter().map(Self::record::<JobRow, JobRecord>).collect()
    }

    pub(super) async fn settle_session_in(&self, tenant: TenantId, session_id: &str) -> StoreResult<bool> {
        let mut tx = self.begin_write().await?;
        let Some(session) =
            sqlx::query(locking::<DB>("SELECT workspace FROM sessions WHERE tenant_id = $1 AND session_id = $2"))
                .bind(tenant)
                .bind(session_id)
                .fetch_optional(&mut *tx)
                .await?
        else {
            return Ok(false);
        };
        // Its callers ask first, without a lock, which sessions have no job
        // left; under the session's lock the question is asked again.
        let open = sqlx::query(AssertSqlSafe(format!(
            "SELECT count(*) AS n FROM jobs WHERE tenant_id = $1 AND {SESSION_JOBS} AND state IN ('queued', 'running')"
        )))
        .bind(tenant)
        .bind(session_id)
        .fetch_one(&mut *tx)
        .await?;
        if open.try_get::<i64, _>("n")? > 0 {
            return Ok(false);
        }
        let failed = sqlx::query(AssertSqlSafe(format!(
            "SELECT id, kind, layout, rollout_id, last_error FROM jobs
             WHERE tenant_id = $1 AND {SESSION_JOBS} AND state = 'failed' AND NOT eager
             ORDER BY created_at, kind, layout, rollout_id"
        )))
        .bind(tenant)
        .bind(session_id)
        .fetch_all(&mut *tx)
        .await?;
        let failures = failed
            .iter()
            .map(|r| {
                let kind: String = r.try_get("kind")?;
                Ok(MemoryFailure {
                    job_id: r.try_get("id")?,
                    kind: JobKind::parse(&kind).ok_or_else(|| corrupt(format!("job kind {kind:?}")))?,
                    layout: r.try_get("layout")?,
                    rollout_id: r.try_get("rollout_id")?,
                    error: r.try_get("last_error")?,
                })
            })
            .collect::<StoreResult<Vec<_>>>()?;
        let memory_status = MemoryStatus::settled(failures);
        let now = Utc::now();
        let settled = sqlx::query(
            "UPDATE sessions SET state = 'closed', memory_status = $3, closed_at = $4
             WHERE tenant_id = $1 AND session_id = $2 AND state = 'closing' RETURNING session_id",
        )
        .bind(tenant)
        .bind(session_id)
        .bind(memory_status.to_string())
        .bind(now)
        .fetch_optional(&mut *tx)
        .await?;
        if settled.is_some() {
            let workspace: String = session.try_get("workspace")?;
            let closed = session_closed(session_id, &workspace, &memory_status);
            Self::record_events_in(&mut tx, tenant, &[closed], now).await?;
        }
        tx.commit().await?;
        Ok(settled.is_some())
    }
}

#[async_trait::async_trait]
impl SessionStore for SqlStore<DB> {
    async fn list_sessions(
        &self,
        tenant: TenantId,
        filter: &SessionFilter,
        page: &PageRequest,
    ) -> StoreResult<Vec<SessionSummary>> {
        let (after_at, after_id) = page.after.as_ref().map(|c| (c.at, c.key.as_str())).unzip();
        let rows = sqlx::query(AssertSqlSafe(format!(
            "SELECT s.session_id, s.workspace, s.state, s.memory_status, s.created_at, s.closed_at,
                    CAST(COALESCE((SELECT SUM(r.segment_count) FROM session_rollouts r
                                   WHERE r.tenant_id = s.tenant_id AND r.session_id = s.session_id), 0) AS BIGINT) AS segments,
                    (SELECT COUNT(*) FROM session_rollouts r
                     WHERE r.tenant_id = s.tenant_id AND r.session_id = s.session_id) AS rollouts
             FROM sessions s
             WHERE s.tenant_id = $1 AND ($2 IS NULL OR s.state = $2) AND ($3 IS NULL OR s.workspace = $3)
               AND ($4 IS NULL OR s.created_at < $4 OR (s.created_at = $4 AND s.session_id < $5))
               AND ($7 IS NULL OR s.workspace IN ({}))
             ORDER BY s.created_at DESC, s.session_id DESC LIMIT $6",
            DB::json_texts("$7")
        )))
        .bind(tenant)
        .bind(filter.state.map(SessionState::as_str))
        .bind(filter.workspace.as_ref().map(WorkspaceName::as_str))
        .bind(after_at)
        .bind(after_id)
        .bind(page.fetch())
        .bind(filter.within.as_deref())
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(Self::record::<SessionSummaryRow, SessionSummary>).collect()
    }

    async fn session_workspace(&self, tenant: TenantId, id: &SessionId) -> StoreResult<Option<WorkspaceName>> {
        let row = sqlx::query("SELECT workspace FROM sessions WHERE tenant_id = $1 AND session_id = $2")
            .bind(tenant)
            .bind(id.as_str())
            .fetch_optional(&self.pool)
            .await?;
        row.map(|r| WorkspaceName::parse(r.try_get("workspace")?).ok_or_else(|| corrupt("session workspace")))
            .transpose()
    }

    async fn create_session(&self, tenant: TenantId, new: &NewSession) -> StoreResult<CreateSessionOutcome> {
        // One transaction whose commit reports a failure (a full disk, say) that
        // an autocommit `RETURNING` statement on SQLite would not.
        let mut tx = self.begin_write().await?;
        if Self::session_in(&mut *tx, tenant, &new.session_id, false).await?.is_none() {
            if Self::workspace_forgotten_in(&mut tx, tenant, &new.workspace).await? {
                return Ok(CreateSessionOutcome::Forgetting);
            }
            if let Some(limit) = new.max_open
                && Self::open_sessions_in(&mut tx, tenant).await? >= limit
            {
                return Ok(CreateSessionOutcome::TooManyOpen(limit));
            }
        }
        let inserted = sqlx::query(
            "INSERT INTO sessions (tenant_id, session_id, workspace, state, metadata, created_at)
             VALUES ($1, $2, $3, 'open', $4, $5) ON CONFLICT DO NOTHING RETURNING session_id",
        )
        .bind(tenant)
        .bind(new.session_id.as_str())
        .bind(new.workspace.as_str())
        .bind(new.metadata.to_string())
        .bind(Utc::now())
        .fetch_optional(&mut *tx)
        .await?;
        let record = Self::session_in(&mut *tx, tenant, &new.session_id, false)
            .await?
            .ok_or_else(|| corrupt("session vanished after insert"))?;
        tx.commit().await?;
        Ok(if inserted.is_some() {
            CreateSessionOutcome::Created(record)
        } else {
            CreateSessionOutcome::Existing(record)
        })
    }

    async fn session_view(&self, tenant: TenantId, id: &SessionId) -> StoreResult<Option<SessionView>> {
        let Some(session) = Self::session_in(&self.pool, tenant, id, false).await? else {
            return Ok(None);
        };
        let rollouts = Self::touched_in(&self.pool, tenant, id).await?;
        let jobs = Self::jobs_of_session(&self.pool, tenant, id).await?;
        let held_jobs = session.state == SessionState::Closing
            && jobs
                .iter()
                .any(|j| j.state == JobState::Queued && matches!(j.kind, JobKind::PhaseOne | JobKind::PhaseTwo));
        let waiting = if held_jobs && self.model_budget_hold(tenant, Utc::now()).await?.is_some() {
            Some(WAITING_FOR_MODEL_BUDGET)
        } else {
            None
        };
        Ok(Some(SessionView { session, waiting, rollouts, jobs }))
    }

    async fn session_state(&self, tenant: TenantId, id: &SessionId) -> StoreResult<Option<SessionState>> {
        let row = sqlx::query("SELECT state FROM sessions WHERE tenant_id = $1 AND session_id = $2")
            .bind(tenant)
            .bind(id.as_str())
            .fetch_optional(&self.pool)
            .await?;
        row.map(|r| parse_id(SessionState::parse, r.try_get("state")?, "session state")).transpose()
    }

    async fn begin_appends<'s>(&'s self, reqs: &[&AppendRequest]) -> StoreResult<Box<dyn AppendBatch + 's>> {
        self.lock_for_appends(reqs).await
    }

    async fn close_session(
        &self,
        tenant: TenantId,
        id: &SessionId,
        phase_two_delay: chrono::Duration,
    ) -> StoreResult<Option<CloseOutcome>> {
        let mut tx = self.begin_write().await?;
        let Some(mut session) = Self::session_in(&mut *tx, tenant, id, true).await? else {
            return Ok(None);
        };
        let closed_now = session.state == SessionState::Open;
        if closed_now {
            let now = Utc::now();
            let touched = Self::touched_in(&mut *tx, tenant, id).await?;
            let layouts = with_implicit_default(Self::layouts_in(&mut *tx, tenant).await?);
            let pairs: Vec<_> = touched.iter().map(|t| (t.layout.clone(), t.rollout_id.clone())).collect();
            let already_extracted = Self::extracted_at_committed_len(&mut tx, tenant, id, &session.workspace).await?;
            for (kind, layout_name, rollout) in jobs_for_close(&pairs) {
                if kind == JobKind::PhaseTwo {
                    let waiting = Self::waiting_phase_two(&mut tx, tenant, &session.workspace, &layout_name).await?;
                    if let Some(job_id) = waiting {
                        Self::serve_session(&mut tx, job_id, tenant, id.as_str()).await?;
                        continue;
                    }
                }
                let layout = layout_named(&layouts, &layout_name)
                    .ok_or_else(|| corrupt(format!("layout {layout_name} of a session is gone")))?;
                let job_id = Uuid::new_v4();
                let run_after = if kind == JobKind::PhaseTwo { now + phase_two_delay } else { now };
                // SPEC §5: a rollout whose raw memory was made (early) at its
                // committed length needs no new extraction: its job succeeds at once.
                let extracted =
                    rollout.as_ref().is_some_and(|r| already_extracted.contains(&(layout_name.clone(), r.clone())));
                let (state, finished_at) =
                    if extracted { (JobState::Succeeded, Some(now)) } else { (JobState::Queued, None) };
                sqlx::query(
                    "INSERT INTO jobs (id, tenant_id, kind, session_id, workspace, layout, rollout_id, layout_config,
                                       state, attempts, run_after, created_at, started_at, finished_at, spec)
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $11, 0, $9, $10, $12, $12, $13)",
                )
                .bind(job_id)
                .bind(tenant)
                .bind(kind.as_str())
                .bind(id.as_str())
                .bind(session.workspace.as_str())
                .bind(layout_name.as_str())
                .bind(rollout.as_ref().map(RolloutId::as_str))
                .bind(serde_json::to_string(&layout.config).expect("a config always serialises"))
                .bind(run_after)
                .bind(now)
                .bind(state.as_str())
                .bind(finished_at)
                .bind(if kind == JobKind::PhaseTwo { JobSpec::PhaseTwo } else { JobSpec::PhaseOne }.stored())
                .execute(&mut *tx)
                .await?;
                if kind == JobKind::PhaseTwo {
                    Self::serve_session(&mut tx, job_id, tenant, id.as_str()).await?;
                }
            }
            let transition = close_transition(touched.is_empty(), now);
            sqlx::query(
                "UPDATE sessions SET state = $3, memory_status = $4, closed_at = $5 WHERE tenant_id = $1 AND session_id = $2",
            )
            .bind(tenant)
            .bind(id.as_str())
            .bind(transition.state.as_str())
            .bind(transition.memory_status.as_ref().map(MemoryStatus::to_string))
            .bind(transition.closed_at)
            .execute(&mut *tx)
            .await?;
            session.state = transition.state;
            session.memory_status = transition.memory_status;
            session.closed_at = transition.closed_at;
            Self::hold_new_model_jobs_in(&mut tx, tenant, now).await?;
            let closes =
                std::collections::BTreeMap::from([(tenant, usage::UsageDelta { closes: 1, ..Default::default() })]);
            Self::count_usage_in(&mut tx, &closes, now).await?;
            if let Some(memory_status) =
                session.memory_status.as_ref().filter(|_| session.state == SessionState::Closed)
            {
                let closed = session_closed(id.as_str(), session.workspace.as_str(), memory_status);
                Self::record_events_in(&mut tx, tenant, &[closed], now).await?;
            }
        }
        let jobs = Self::jobs_of_session(&mut *tx, tenant, id).await?;
        tx.commit().await?;
        Ok(Some(CloseOutcome { session, jobs, closed_now }))
    }

    async fn committed_rollout(
        &self,
        tenant: TenantId,
        workspace: &WorkspaceName,
        layout: &LayoutName,
        rollout: &RolloutId,
    ) -> StoreResult<Option<CommittedRollout>> {
        let row = sqlx::query(
            "SELECT rollout_path, committed_len, segment_count FROM rollouts
             WHERE tenant_id = $1 AND workspace = $2 AND layout = $3 AND rollout_id = $4",
        )
        .bind(tenant)
        .bind(workspace.as_str())
        .bind(layout.as_str())
        .bind(rollout.as_str())
        .fetch_optional(&self.pool)
        .await?;
        row.map(|r| {
            Ok(CommittedRollout {
                rollout_path: r.try_get("rollout_path")?,
                committed_len: r.try_get::<i64, _>("committed_len")? as u64,
                segment_count: r.try_get("segment_count")?,
            })
        })
        .transpose()
    }

    async fn workspace_activity(&self, tenant: TenantId) -> StoreResult<WorkspaceActivity> {
        let sessions = sqlx::query(
            "SELECT workspace, COUNT(*) AS sessions, MAX(created_at) AS newest FROM sessions
             WHERE tenant_id = $1 GROUP BY workspace",
        )
        .bind(tenant)
        .fetch_all(&self.pool)
        .await?;
        let layouts = sqlx::query(
            "SELECT workspace, layout, MAX(updated_at) AS newest FROM rollouts
             WHERE tenant_id = $1 GROUP BY workspace, layout",
        )
        .bind(tenant)
        .fetch_all(&self.pool)
        .await?;
        let imported = sqlx::query("SELECT workspace, created_at FROM workspaces WHERE tenant_id = $1")
            .bind(tenant)
            .fetch_all(&self.pool)
            .await?;
        Ok(WorkspaceActivity {
            imported: imported
                .iter()
                .map(|r| Ok((r.try_get("workspace")?, r.try_get("created_at")?)))
                .collect::<Result<_, sqlx::Error>>()?,
            sessions: sessions
                .iter()
                .map(|r| Ok((r.try_get("workspace")?, r.try_get("sessions")?, r.try_get("newest")?)))
                .collect::<Result<_, sqlx::Error>>()?,
            layouts: layouts
                .iter()
                .map(|r| Ok((r.try_get("workspace")?, r.try_get("layout")?, r.try_get("newest")?)))
                .collect::<Result<_, sqlx::Error>>()?,
        })
    }

    async fn workspace_known(&self, tenant: TenantId, workspace: &WorkspaceName) -> StoreResult<bool> {
        if workspace == &WorkspaceName::default_workspace() {
            return Ok(true);
        }
        // A session used it, or an import filled it.
        let mut conn = self.pool.acquire().await?;
        Ok(!Self::workspace_empty_in(&mut conn, tenant, workspace).await?)
    }

    async fn settle_session(&self, tenant: TenantId, session_id: &SessionId) -> StoreResult<bool> {
        self.settle_session_in(tenant, session_id.as_str()).await
    }

    async fn sessions_without_open_jobs(
        &self,
        sessions: &[(TenantId, SessionId)],
    ) -> StoreResult<Vec<(TenantId, SessionId)>> {
        if sessions.is_empty() {
            return Ok(Vec::new());
        }
        let mut settleable = sqlx::QueryBuilder::<DB>::new("WITH served (tenant_id, session_id) AS (");
        settleable.push_values(sessions, |mut row, (tenant, session)| {
            row.push_bind(*tenant).push_bind(session.as_str());
        });
        settleable.push(
            // Scalar subqueries, not `NOT EXISTS`: Postgres would turn those
            // into an anti-join reading every unfinished job (3 ms a batch
            // during a drain) instead of two index probes per session.
            ") SELECT DISTINCT s.tenant_id, s.session_id FROM served s
             WHERE (SELECT 1 FROM jobs j WHERE j.tenant_id = s.tenant_id AND j.session_id = s.session_id
                       AND j.kind = 'phase_one' AND j.state IN ('queued', 'running') LIMIT 1) IS NULL
               AND (SELECT 1 FROM job_sessions js JOIN jobs j ON j.id = js.job_id
                     WHERE js.tenant_id = s.tenant_id AND js.session_id = s.session_id
                       AND j.state IN ('queued', 'running') LIMIT 1) IS NULL",
        );
        let rows = settleable.build().fetch_all(&self.pool).await?;
        rows.iter()
            .map(|r| {
                let session: String = r.try_get("session_id")?;
                let session = SessionId::parse(&session).ok_or_else(|| corrupt(format!("session id {session:?}")))?;
                Ok((r.try_get("tenant_id")?, session))
            })
            .collect()
    }

    async fn settle_finished_sessions(&self) -> StoreResult<usize> {
        let rows = sqlx::query(
            "SELECT s.tenant_id, s.session_id FROM sessions s
             WHERE s.state = 'closing'
               AND NOT EXISTS (
                 SELECT 1 FROM jobs j WHERE j.tenant_id = s.tenant_id AND j.session_id = s.session_id
                    AND j.kind = 'phase_one' AND j.state IN ('queued', 'running'))
               AND NOT EXISTS (
                 SELECT 1 FROM job_sessions js JOIN jobs j ON j.id = js.job_id
                  WHERE js.tenant_id = s.tenant_id AND js.session_id = s.session_id AND j.state IN ('queued', 'running'))
             LIMIT 100",
        )
        .fetch_all(&self.pool)
        .await?;
        for r in &rows {
            self.settle_session_in(r.try_get("tenant_id")?, r.try_get("session_id")?).await?;
        }
        Ok(rows.len())
    }
}
