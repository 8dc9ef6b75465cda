//! The job queue: claims with a per-tenant share, leases, fenced finishes, retries.

use super::rows::*;
use super::*;
use crate::domain::job::JobSpec;
use crate::store::*;
use chrono::{DateTime, Utc};
use sqlx::Row;
use uuid::Uuid;

/// Queues again the running jobs (all, or the one `$2` names) whose lease
/// expired by `$1`: their worker stopped renewing (killed, crashed or cut
/// off). The attempt counted at the claim stays counted.
const REQUEUE_EXPIRED: &str = "UPDATE jobs SET state = 'queued', lease_owner = NULL, lease_token = NULL,
        lease_expires_at = NULL,
        last_error = 'lease_expired: the worker stopped during the attempt (killed, crashed or cut off)'
     WHERE state = 'running' AND lease_expires_at <= $1 AND ($2 IS NULL OR id = $2)";

impl SqlStore<DB> {
    /// A job just written in this transaction, as the API shows it.
    pub(super) async fn job_in(conn: &mut DbConnection, job_id: Uuid) -> StoreResult<JobRecord> {
        let row = sqlx::query(AssertSqlSafe(format!("SELECT {} FROM jobs WHERE id = $1", job_columns::<DB>())))
            .bind(job_id)
            .fetch_one(&mut *conn)
            .await?;
        Self::record::<JobRow, JobRecord>(&row)
    }

    /// A phase-two job starting serves exactly the closes whose phase one
    /// has finished; those still extracting move to the layout's waiting
    /// job (a new one if none waits), so that no close is served by a run
    /// that started before its raw memories existed (SPEC §2.3). Returns
    /// the sessions the job serves.
    async fn serve_only_ready_sessions(
        tx: &mut DbConnection,
        claimed: &ClaimedJob,
        now: DateTime<Utc>,
    ) -> StoreResult<Vec<String>> {
        let job = &claimed.job;
        let rows = sqlx::query(
            "SELECT js.session_id, CAST(CASE WHEN EXISTS (
                        SELECT 1 FROM jobs p WHERE p.tenant_id = js.tenant_id AND p.session_id = js.session_id
                           AND p.layout = $2 AND p.kind = 'phase_one' AND p.state IN ('queued', 'running'))
                        THEN 1 ELSE 0 END AS BIGINT) AS extracting
                 FROM job_sessions js WHERE js.job_id = $1 ORDER BY js.session_id",
        )
        .bind(job.job_id)
        .bind(job.layout.as_str())
        .fetch_all(&mut *tx)
        .await?;
        let mut ready = Vec::new();
        let mut extracting = Vec::new();
        for row in rows {
            let session: String = row.try_get("session_id")?;
            if row.try_get::<i64, _>("extracting")? == 1 { extracting.push(session) } else { ready.push(session) }
        }
        // With none ready (a phase one retried since the claim was chosen) it serves them all.
        if extracting.is_empty() || ready.is_empty() {
            ready.extend(extracting);
            return Ok(ready);
        }
        let target = match Self::waiting_phase_two(&mut *tx, claimed.tenant_id, &job.workspace, &job.layout).await? {
            Some(waiting) if waiting != job.job_id => waiting,
            _ => {
                let id = Uuid::new_v4();
                sqlx::query(
                        "INSERT INTO jobs (id, tenant_id, kind, session_id, workspace, layout, rollout_id, layout_config,
                                           state, attempts, run_after, created_at, spec)
                         SELECT $2, tenant_id, kind, $3, workspace, layout, rollout_id, layout_config, 'queued', 0, $4, $4,
                                spec
                         FROM jobs WHERE id = $1",
                    )
                    .bind(job.job_id)
                    .bind(id)
                    .bind(extracting[0].as_str())
                    .bind(now)
                    .execute(&mut *tx)
                    .await?;
                id
            }
        };
        for session in &extracting {
            sqlx::query("UPDATE job_sessions SET job_id = $3 WHERE job_id = $1 AND session_id = $2")
                .bind(job.job_id)
                .bind(session.as_str())
                .bind(target)
                .execute(&mut *tx)
                .await?;
        }
        sqlx::query("UPDATE jobs SET session_id = $2 WHERE id = $1")
            .bind(job.job_id)
            .bind(ready[0].as_str())
            .execute(&mut *tx)
            .await?;
        Ok(ready)
    }
}

#[async_trait::async_trait]
impl JobQueue for SqlStore<DB> {
    async fn list_jobs(&self, tenant: TenantId, filter: &JobFilter, page: &PageRequest) -> StoreResult<Vec<JobRecord>> {
        let (after_at, after_id) = page.after.as_ref().map(|c| (c.at, Uuid::parse_str(&c.key).ok())).unzip();
        let after_id = after_id.flatten();
        let rows = sqlx::query(AssertSqlSafe(format!(
            "SELECT {} FROM jobs WHERE tenant_id = $1
               AND ($2 IS NULL OR state = $2)
               AND ($3 IS NULL OR kind = $3)
               AND ($4 IS NULL OR (kind = 'phase_one' AND session_id = $4)
                    OR id IN (SELECT job_id FROM job_sessions WHERE tenant_id = $1 AND session_id = $4))
               AND ($5 IS NULL OR created_at < $5 OR (created_at = $5 AND id < $6))
               AND ($8 IS NULL OR workspace IN ({}))
             ORDER BY created_at DESC, id DESC LIMIT $7",
            job_columns::<DB>(),
            DB::json_texts("$8")
        )))
        .bind(tenant)
        .bind(filter.state.map(JobState::as_str))
        .bind(filter.kind.map(JobKind::as_str))
        .bind(filter.session_id.as_ref().map(SessionId::as_str))
        .bind(after_at)
        .bind(after_id)
        .bind(page.fetch())
        .bind(filter.within.as_deref())
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(Self::record::<JobRow, JobRecord>).collect()
    }

    async fn get_job(&self, tenant: TenantId, job_id: Uuid) -> StoreResult<Option<JobRecord>> {
        let row = sqlx::query(AssertSqlSafe(format!(
            "SELECT {} FROM jobs WHERE tenant_id = $1 AND id = $2",
            job_columns::<DB>()
        )))
        .bind(tenant)
        .bind(job_id)
        .fetch_optional(&self.pool)
        .await?;
        row.as_ref().map(Self::record::<JobRow, JobRecord>).transpose()
    }

    async fn claim_jobs(&self, req: &ClaimRequest<'_>, limit: usize) -> StoreResult<Vec<ClaimedJob>> {
        let mut tx = self.begin_write().await?;
        if let Some(gate) = DB::CLAIM_GATE {
            match sqlx::query(gate).execute(&mut *tx).await {
                // Another claim holds the gate longer than a claim takes.
                Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some(LOCK_NOT_AVAILABLE) => {
                    return Ok(Vec::new());
                }
                result => result?,
            };
        }
        // A job whose worker stopped renewing its lease is queued again,
        // in its old place; the attempt counted at its claim stays counted,
        // so a job that kills its worker runs out of attempts.
        sqlx::query(REQUEUE_EXPIRED).bind(req.now).bind(None::<Uuid>).execute(&mut *tx).await?;
        let chosen = Self::choose_claims(&mut tx, req, limit).await?;
        if chosen.is_empty() {
            return Ok(Vec::new());
        }
        let token = Uuid::new_v4();
        let Some(rows) = Self::lease_chosen(&mut tx, req, &chosen, token).await? else {
            return Ok(Vec::new());
        };
        let mut claimed = Vec::with_capacity(rows.len());
        for row in &rows {
            let mut job = <ClaimedRow as sqlx::FromRow<_>>::from_row(row)?.into_claimed(token)?;
            if job.job.kind == JobKind::PhaseTwo {
                job.job.sessions = Self::serve_only_ready_sessions(&mut tx, &job, req.now).await?;
            }
            claimed.push(job);
        }
        tx.commit().await?;
        // In turn order, as they were chosen.
        claimed.sort_by_key(|c| chosen.iter().position(|id| *id == c.job.job_id));
        Ok(claimed)
    }

    async fn renew_lease(&self, job_id: Uuid, token: Uuid, until: DateTime<Utc>) -> StoreResult<bool> {
        // An explicit transaction: its commit reports a failure that an
        // autocommit `RETURNING` statement on SQLite would not.
        let mut tx = self.begin_write().await?;
        let renewed = sqlx::query(
            "UPDATE jobs SET lease_expires_at = $3 WHERE id = $1 AND lease_token = $2 AND state = 'running' RETURNING id",
        )
        .bind(job_id)
        .bind(token)
        .bind(until)
        .fetch_optional(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(renewed.is_some())
    }

    async fn finish_jobs(&self, batch: &[(&ClaimedJob, &JobFinish)]) -> StoreResult<Vec<bool>> {
        let now = Utc::now();
        let mut tx = self.begin_write().await?;
        let recorded = Self::finish_batch_in(&mut tx, batch, now).await?;
        tx.commit().await?;
        Ok(recorded)
    }

    async fn release_job(&self, job_id: Uuid, token: Uuid) -> StoreResult<bool> {
        // An explicit transaction: its commit reports a failure that an
        // autocommit `RETURNING` statement on SQLite would not.
        let mut tx = self.begin_write().await?;
        let released = sqlx::query(
            "UPDATE jobs SET state = 'queued', attempts = attempts - 1, run_after = $3,
                    lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL
             WHERE id = $1 AND lease_token = $2 AND state = 'running' RETURNING id",
        )
        .bind(job_id)
        .bind(token)
        .bind(Utc::now())
        .fetch_optional(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(released.is_some())
    }

    async fn retry_job(&self, tenant: TenantId, job_id: Uuid) -> StoreResult<Option<RetryOutcome>> {
        let mut tx = self.begin_write().await?;
        let Some(row) = sqlx::query(locking::<DB>("SELECT * FROM jobs WHERE tenant_id = $1 AND id = $2"))
            .bind(tenant)
            .bind(job_id)
            .fetch_optional(&mut *tx)
            .await?
        else {
            return Ok(None);
        };
        let job = Self::record::<JobRow, JobRecord>(&row)?;
        if job.state != JobState::Failed {
            return Ok(Some(RetryOutcome::NotFailed(job.state)));
        }
        if job.kind == JobKind::Import {
            return Ok(Some(RetryOutcome::ArchiveGone));
        }
        let now = Utc::now();
        let row = sqlx::query(
            "UPDATE jobs SET state = 'queued', attempts = 0, run_after = $2, finished_at = NULL
             WHERE id = $1 RETURNING *",
        )
        .bind(job_id)
        .bind(now)
        .fetch_one(&mut *tx)
        .await?;
        // The sessions it serves wait for this job again.
        sqlx::query(
            "UPDATE sessions SET state = 'closing', memory_status = NULL, closed_at = NULL
             WHERE tenant_id = $1 AND state = 'closed' AND (session_id = $2
                OR session_id IN (SELECT session_id FROM job_sessions WHERE job_id = $3))",
        )
        .bind(tenant)
        .bind(job.session_id.as_ref().map_or("", SessionId::as_str))
        .bind(job_id)
        .execute(&mut *tx)
        .await?;
        let job = Self::record::<JobRow, JobRecord>(&row)?;
        tx.commit().await?;
        Ok(Some(RetryOutcome::Requeued(Box::new(job))))
    }

    async fn job_lease_live(&self, job_id: Uuid, now: DateTime<Utc>) -> StoreResult<bool> {
        let row =
            sqlx::query("SELECT 1 AS live FROM jobs WHERE id = $1 AND state = 'running' AND lease_expires_at > $2")
                .bind(job_id)
                .bind(now)
                .fetch_optional(&self.pool)
                .await?;
        Ok(row.is_some())
    }

    async fn job_pending(&self, job_id: Uuid) -> StoreResult<bool> {
        let row = sqlx::query("SELECT 1 AS pending FROM jobs WHERE id = $1 AND state IN ('queued', 'running')")
            .bind(job_id)
            .fetch_optional(&self.pool)
            .await?;
        Ok(row.is_some())
    }

    async fn publish_decision(
        &self,
        job_id: Uuid,
        publish_id: Uuid,
        now: DateTime<Utc>,
    ) -> StoreResult<PublishDecision> {
        // Decided from the job's row; only a job whose lease has expired is
        // written to: taken from its worker first, as a claim would, so that a
        // worker that wakes later cannot finish it and a publish judged
        // abandoned can never be committed after all. A row that changed in
        // between (finished, renewed) is read again; after a few such races
        // the publish is left for later.
        for _ in 0..3 {
            let row = sqlx::query("SELECT state, lease_expires_at, publish_id FROM jobs WHERE id = $1")
                .bind(job_id)
                .fetch_optional(&self.pool)
                .await?;
            let Some(row) = row else { return Ok(PublishDecision::Abandoned) };
            if row.try_get::<Option<Uuid>, _>("publish_id")? == Some(publish_id) {
                return Ok(PublishDecision::Committed);
            }
            if JobState::parse(&row.try_get::<String, _>("state")?) != Some(JobState::Running) {
                return Ok(PublishDecision::Abandoned);
            }
            if row.try_get::<Option<DateTime<Utc>>, _>("lease_expires_at")?.is_some_and(|until| until > now) {
                return Ok(PublishDecision::Pending);
            }
            let taken = sqlx::query(REQUEUE_EXPIRED).bind(now).bind(Some(job_id)).execute(&self.pool).await?;
            if taken.rows_affected() > 0 {
                return Ok(PublishDecision::Abandoned);
            }
        }
        Ok(PublishDecision::Pending)
    }

    async fn queue_eager_phase_one(&self, idle_since: DateTime<Utc>, limit: i64) -> StoreResult<Vec<JobRecord>> {
        let now = Utc::now();
        let mut tx = self.begin_write().await?;
        // Rollouts (with the open session that last touched them) idle since
        // `idle_since` whose committed bytes outgrew their raw memory.
        let candidates = sqlx::query(
            "SELECT r.tenant_id, s.session_id, r.workspace, r.layout, r.rollout_id
             FROM rollouts r
             JOIN session_rollouts sr ON sr.tenant_id = r.tenant_id AND sr.layout = r.layout AND sr.rollout_id = r.rollout_id
             JOIN sessions s ON s.tenant_id = sr.tenant_id AND s.session_id = sr.session_id
                AND s.workspace = r.workspace AND s.state = 'open'
             LEFT JOIN raw_memories m ON m.tenant_id = r.tenant_id AND m.workspace = r.workspace
                AND m.layout = r.layout AND m.rollout_id = r.rollout_id
             WHERE r.updated_at <= $1 AND (m.extracted_len IS NULL OR m.extracted_len < r.committed_len)
               AND NOT EXISTS (
                 SELECT 1 FROM jobs j WHERE j.tenant_id = r.tenant_id AND j.workspace = r.workspace
                    AND j.layout = r.layout AND j.rollout_id = r.rollout_id AND j.kind = 'phase_one'
                    AND (j.state IN ('queued', 'running') OR (j.eager AND j.created_at >= r.updated_at)))
             ORDER BY r.updated_at LIMIT $2",
        )
        .bind(idle_since)
        .bind(limit)
        .fetch_all(&mut *tx)
        .await?;
        let mut queued = Vec::new();
        let mut seen = std::collections::HashSet::new();
        let mut layouts_of = std::collections::HashMap::new();
        for row in &candidates {
            let tenant: Uuid = row.try_get("tenant_id")?;
            let (session, workspace, layout_name, rollout): (String, String, String, String) = (
                row.try_get("session_id")?,
                row.try_get("workspace")?,
                row.try_get("layout")?,
                row.try_get("rollout_id")?,
            );
            // A rollout two open sessions share is extracted once.
            if !seen.insert((tenant, workspace.clone(), layout_name.clone(), rollout.clone())) {
                continue;
            }
            let name = parse_id(LayoutName::parse, &layout_name, "layout name")?;
            if let std::collections::hash_map::Entry::Vacant(slot) = layouts_of.entry(tenant) {
                slot.insert(with_implicit_default(Self::layouts_in(&mut *tx, tenant).await?));
            }
            let Some(layout) = layout_named(&layouts_of[&tenant], &name).filter(|l| l.config.generate.is_some()) else {
                continue;
            };
            let job_id = Uuid::new_v4();
            sqlx::query(
                "INSERT INTO jobs (id, tenant_id, kind, session_id, workspace, layout, rollout_id, layout_config,
                                   state, attempts, run_after, created_at, eager, spec)
                 VALUES ($1, $2, 'phase_one', $3, $4, $5, $6, $7, 'queued', 0, $8, $8, $9, $10)",
            )
            .bind(job_id)
            .bind(tenant)
            .bind(session.as_str())
            .bind(workspace.as_str())
            .bind(layout_name.as_str())
            .bind(rollout.as_str())
            .bind(serde_json::to_string(&layout.config).expect("a config always serialises"))
            .bind(now)
            .bind(true)
            .bind(JobSpec::PhaseOne.stored())
            .execute(&mut *tx)
            .await?;
            queued.push(Self::job_in(&mut tx, job_id).await?);
        }
        tx.commit().await?;
        Ok(queued)
    }

    async fn leased_jobs(&self, now: DateTime<Utc>) -> StoreResult<i64> {
        let row = sqlx::query("SELECT count(*) AS n FROM jobs WHERE state = 'running' AND lease_expires_at > $1")
            .bind(now)
            .fetch_one(&self.pool)
            .await?;
        Ok(row.try_get("n")?)
    }

    async fn job_counts(&self) -> StoreResult<Vec<(String, String, i64)>> {
        // Only the states an index finds: the cost follows the queue, not the history.
        let rows = sqlx::query(
            "SELECT kind, state, count(*) AS n FROM jobs WHERE state IN ('queued', 'running') GROUP BY kind, state",
        )
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(|r| Ok((r.try_get("kind")?, r.try_get("state")?, r.try_get("n")?))).collect()
    }

    async fn tenant_job_counts(&self, tenant: TenantId, failed_after: DateTime<Utc>) -> StoreResult<TenantJobCounts> {
        let rows = sqlx::query(
            "SELECT kind, state, count(*) AS n,
                    SUM(CASE WHEN state = 'failed' AND finished_at > $2 THEN 1 ELSE 0 END) AS failed_recently
             FROM jobs WHERE tenant_id = $1 GROUP BY kind, state ORDER BY kind, state",
        )
        .bind(tenant)
        .bind(failed_after)
        .fetch_all(&self.pool)
        .await?;
        let mut counts = TenantJobCounts { by_kind_and_state: Vec::with_capacity(rows.len()), failed_recently: 0 };
        for row in &rows {
            let (kind, state): (String, String) = (row.try_get("kind")?, row.try_get("state")?);
            let kind = JobKind::parse(&kind).ok_or_else(|| corrupt(format!("job kind {kind:?}")))?;
            let state = JobState::parse(&state).ok_or_else(|| corrupt(format!("job state {state:?}")))?;
            counts.by_kind_and_state.push((kind, state, row.try_get("n")?));
            counts.failed_recently += row.try_get::<i64, _>("failed_recently")?;
        }
        Ok(counts)
    }
}

/// A queued job that may start now: its kind is asked for (`$1`, `$2`,
/// `$4`, `$5`), it is due (`$3`), its phase two's closes have their raw
/// memories, its tenant's model budget is not held, and its layout's lane
/// is free. A layout's lane runs one phase two, restore, forget or edit at
/// a time, and a waiting edit goes before the layout's next other run
/// (SPEC §2.10: it lands between them, and is quick).
const DUE: &str = "q.state = 'queued' AND q.run_after <= $3
    AND ((q.kind = 'phase_one' AND $1 = 1) OR (q.kind IN ('phase_two', 'restore', 'edit') AND $2 = 1)
         OR (q.kind = 'forget' AND $4 = 1) OR (q.kind = 'import' AND $5 = 1))
    AND (q.kind <> 'phase_two' OR EXISTS (
          SELECT 1 FROM job_sessions js WHERE js.job_id = q.id AND NOT EXISTS (
             SELECT 1 FROM jobs p WHERE p.tenant_id = q.tenant_id AND p.session_id = js.session_id
                AND p.layout = q.layout AND p.kind = 'phase_one' AND p.state IN ('queued', 'running'))))
    AND (q.kind NOT IN ('phase_one', 'phase_two') OR NOT EXISTS (
          SELECT 1 FROM model_budget_holds h WHERE h.tenant_id = q.tenant_id AND h.until > $3))
    AND (q.kind = 'phase_one' OR NOT EXISTS (
          SELECT 1 FROM jobs o WHERE o.tenant_id = q.tenant_id AND o.workspace = q.workspace
             AND o.layout = q.layout AND o.kind IN ('phase_two', 'restore', 'forget', 'edit')
             AND o.state = 'running'))
    AND (q.kind NOT IN ('phase_two', 'restore', 'forget') OR NOT EXISTS (
          SELECT 1 FROM jobs e WHERE e.tenant_id = q.tenant_id AND e.workspace = q.workspace
             AND e.layout = q.layout AND e.kind = 'edit' AND e.state = 'queued' AND e.run_after <= $3))";

/// The claim's candidates in turn order (`$6` of them, at most `$7` per
/// tenant), written once for this database.
///
/// A tenant's n-th due job takes its turn after the tenant's running ones
/// and its n - 1 before it: claiming in turn order is claiming one job at a
/// time, each to the tenant with the fewest running. Only each tenant's
/// first `limit` jobs can be among the first `limit` turns, and only they
/// are read: the tenants with queued jobs are found by skipping through the
/// index, one probe per tenant, and each is asked for its first few
/// (Postgres joins them laterally; SQLite, which cannot, looks them up by
/// id). Equal turns go to the tenant served longest ago (one never served
/// first), then to the older job: a tenant new to a backlog of many does
/// not wait for every other tenant's whole queue.
static CLAIM_CANDIDATES: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    let by_tenant = DB::QUEUED_BY_TENANT;
    let queued_tenants = format!(
        "WITH RECURSIVE queued_tenants(tenant_id) AS (
            SELECT (SELECT tenant_id FROM jobs{by_tenant} WHERE state = 'queued' ORDER BY tenant_id LIMIT 1)
            UNION ALL
            SELECT (SELECT j.tenant_id FROM jobs j{by_tenant} WHERE j.state = 'queued' AND j.tenant_id > t.tenant_id
                    ORDER BY j.tenant_id LIMIT 1)
            FROM queued_tenants t WHERE t.tenant_id IS NOT NULL)"
    );
    let first_due =
        format!("FROM jobs q WHERE q.tenant_id = t.tenant_id AND {DUE} ORDER BY q.run_after, q.created_at LIMIT $7");
    let due_jobs = if DB::LATERAL {
        format!(
            "({queued_tenants}
              SELECT f.* FROM queued_tenants t CROSS JOIN LATERAL (
                SELECT q.id, q.kind, q.tenant_id, q.workspace, q.layout, q.run_after, q.created_at {first_due}) f
              WHERE t.tenant_id IS NOT NULL)"
        )
    } else {
        format!(
            "({queued_tenants}
              SELECT f.id, f.kind, f.tenant_id, f.workspace, f.layout, f.run_after, f.created_at
              FROM queued_tenants t JOIN jobs f ON f.id IN (SELECT q.id {first_due})
              WHERE t.tenant_id IS NOT NULL)"
        )
    };
    format!(
        "SELECT c.id, c.kind, c.tenant_id, c.workspace, c.layout, c.turn FROM (
           SELECT j.id, j.kind, j.tenant_id, j.workspace, j.layout, j.run_after, j.created_at,
                  COALESCE(share.running, 0)
                    + row_number() OVER (PARTITION BY j.tenant_id ORDER BY j.run_after, j.created_at) AS turn,
                  served.last_claimed_at
           FROM {due_jobs} j
           LEFT JOIN (SELECT tenant_id, count(*) AS running FROM jobs
                      WHERE state = 'running' GROUP BY tenant_id) share
                  ON share.tenant_id = j.tenant_id
           LEFT JOIN tenant_turns served ON served.tenant_id = j.tenant_id
         ) c
         ORDER BY c.turn, c.last_claimed_at NULLS FIRST, c.run_after, c.created_at
         LIMIT $6"
    )
});

impl SqlStore<DB> {
    /// The ids of the jobs a claim of `limit` takes, in turn order.
    async fn choose_claims(tx: &mut DbConnection, req: &ClaimRequest<'_>, limit: usize) -> StoreResult<Vec<Uuid>> {
        // Most claims are served by each tenant's first due job alone: when
        // the batch fills with jobs of the smallest turn, no tenant's second
        // job (a turn later at least) could have come before them. Otherwise
        // each tenant's first `limit` are read.
        let mut chosen = Vec::with_capacity(limit);
        for per_tenant in [1, limit] {
            let candidates = sqlx::query(AssertSqlSafe(CLAIM_CANDIDATES.as_str()))
                .bind(i64::from(req.kinds.contains(&JobKind::PhaseOne)))
                .bind(i64::from(req.kinds.contains(&JobKind::PhaseTwo)))
                .bind(req.now)
                .bind(i64::from(req.kinds.contains(&JobKind::Forget)))
                .bind(i64::from(req.kinds.contains(&JobKind::Import)))
                .bind(i64::try_from(limit.saturating_mul(2)).unwrap_or(i64::MAX))
                .bind(i64::try_from(per_tenant).unwrap_or(i64::MAX))
                .fetch_all(&mut *tx)
                .await?;
            // At most one job runs alone per layout (a phase two, a restore, a
            // forget): a batch takes one of them per layout.
            chosen.clear();
            let mut layouts_taken = std::collections::HashSet::new();
            let mut last_turn = None;
            for row in &candidates {
                if chosen.len() == limit {
                    break;
                }
                let kind: String = row.try_get("kind")?;
                let layout = (
                    row.try_get::<Uuid, _>("tenant_id")?,
                    row.try_get::<String, _>("workspace")?,
                    row.try_get::<String, _>("layout")?,
                );
                if kind != JobKind::PhaseOne.as_str() && !layouts_taken.insert(layout) {
                    continue;
                }
                chosen.push(row.try_get::<Uuid, _>("id")?);
                last_turn = Some(row.try_get::<i64, _>("turn")?);
            }
            let first_turn = candidates.first().map(|row| row.try_get::<i64, _>("turn")).transpose()?;
            if per_tenant == limit || (chosen.len() == limit && last_turn == first_turn) {
                break;
            }
        }
        Ok(chosen)
    }

    /// Leases the chosen jobs to the claiming worker under `token` and
    /// records their tenants' turn; `None` when another replica started one
    /// of these layouts' phase two first.
    async fn lease_chosen(
        tx: &mut DbConnection,
        req: &ClaimRequest<'_>,
        chosen: &[Uuid],
        token: Uuid,
    ) -> StoreResult<Option<Vec<DbRow>>> {
        let mut update = sqlx::QueryBuilder::<DB>::new("UPDATE jobs SET state = 'running', lease_owner = ");
        update.push_bind(req.worker);
        update.push(", lease_token = ").push_bind(token);
        update.push(", lease_expires_at = ").push_bind(req.now + req.lease);
        update.push(", attempts = attempts + 1, started_at = COALESCE(started_at, ").push_bind(req.now);
        // The state is wrapped so that no planner ranges over an index on it
        // (both would, on statistics that lag a burst of closes) instead of
        // looking up the few ids.
        update.push(") WHERE COALESCE(state, '') = 'queued' AND run_after <= ").push_bind(req.now);
        update.push(" AND id IN (");
        let mut ids = update.separated(", ");
        for id in chosen {
            ids.push_bind(*id);
        }
        update.push(") RETURNING *");
        let rows = match update.build().fetch_all(&mut *tx).await {
            Ok(rows) => rows,
            Err(sqlx::Error::Database(e)) if e.is_unique_violation() => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let tenants: std::collections::BTreeSet<Uuid> =
            rows.iter().map(|row| row.try_get::<Uuid, _>("tenant_id")).collect::<Result<_, _>>()?;
        if !tenants.is_empty() {
            let mut served = sqlx::QueryBuilder::<DB>::new("INSERT INTO tenant_turns (tenant_id, last_claimed_at) ");
            served.push_values(&tenants, |mut values, tenant| {
                values.push_bind(*tenant).push_bind(req.now);
            });
            served.push(" ON CONFLICT (tenant_id) DO UPDATE SET last_claimed_at = excluded.last_claimed_at");
            served.build().execute(&mut *tx).await?;
        }
        Ok(Some(rows))
    }
}
