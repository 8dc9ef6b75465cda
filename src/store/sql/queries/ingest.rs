//! Appends: the session and rollout rows locked for the caller (the ingest
//! service) to write the line, then the new committed length recorded.

use super::rows::*;
use super::*;
use crate::domain::ids::WorkspaceName;
use crate::store::*;
use chrono::{DateTime, Utc};
use sqlx::Row;
use std::collections::{BTreeMap, HashMap};

/// Appends whose session and rollout rows this transaction holds.
struct SqlAppendBatch<'s, DB: Database> {
    tx: WriteTx<'s, DB>,
    starts: Vec<AppendStart>,
    /// What the commit records of each append to be written (by request).
    rows: Vec<Option<RolloutUpdate>>,
    /// The storage limits of the group's tenants that have one.
    storage_limits: BTreeMap<TenantId, u64>,
    now: DateTime<Utc>,
}

/// A tenant's storage as this group sees it, against its limit.
struct StorageBudget {
    limit: u64,
    /// The stored bytes, and the lines this group has placed so far.
    used: u64,
}

/// An append's session and rollout: tenant, session id, layout, rollout id.
type AppendTarget = (TenantId, String, String, String);

/// A rollout's committed length and segment count, and whether a forget of
/// it is queued (it then takes no segment).
type RolloutPosition = (i64, i64, bool);

/// A target whose session was found and locked: the session, and its
/// rollout's position when the rollout exists too.
type KnownTarget = (SessionRecord, Option<RolloutPosition>);

fn append_target(req: &AppendRequest) -> AppendTarget {
    (
        req.tenant_id,
        req.session_id.as_str().to_owned(),
        req.layout_name.as_str().to_owned(),
        req.segment.rollout_id.as_str().to_owned(),
    )
}

/// The session an append goes to, or why it may not open one.
enum Opened {
    /// The session (locked), whether this append opened it, and its rollout's
    /// position when that is known already.
    Session(Box<SessionRecord>, bool, Option<RolloutPosition>),
    Forgetting,
    TooMany(u64),
}

/// The columns an append changes once its line is on disk.
struct RolloutUpdate {
    tenant: TenantId,
    workspace: String,
    session_id: String,
    layout: String,
    rollout_id: String,
    updated_at: String,
    terminal_state: String,
    idempotency_key: Option<String>,
    /// The line's length: what the rollout file grows by.
    bytes: i64,
}

impl SqlStore<DB> {
    pub(super) async fn lock_for_appends<'s>(
        &'s self,
        reqs: &[&AppendRequest],
    ) -> StoreResult<Box<dyn AppendBatch + 's>> {
        let now = Utc::now();
        let mut tx = self.begin_write().await?;
        let (mut known, storage_read) = Self::lock_known_in(&mut tx, reqs).await?;
        let mut budgets = Self::storage_budgets_in(&mut tx, reqs, storage_read).await?;
        let storage_limits = budgets.iter().map(|(tenant, b)| (*tenant, b.limit)).collect();
        let mut starts = Vec::with_capacity(reqs.len());
        let mut rows = Vec::with_capacity(reqs.len());
        for req in reqs {
            let found = known.remove(&append_target(req));
            let budget = budgets.get_mut(&req.tenant_id);
            let start = Self::position_in(&mut tx, req, now, found, budget).await?;
            rows.push(match &start {
                AppendStart::Write(position) => Some(RolloutUpdate {
                    tenant: req.tenant_id,
                    workspace: position.workspace.as_str().to_owned(),
                    session_id: req.session_id.as_str().to_owned(),
                    layout: req.layout_name.as_str().to_owned(),
                    rollout_id: req.segment.rollout_id.as_str().to_owned(),
                    updated_at: req.segment.updated_at.clone(),
                    terminal_state: req.segment.terminal_state.clone(),
                    idempotency_key: req.idempotency.as_ref().map(|c| c.key.clone()),
                    bytes: req.segment.line.len() as i64,
                }),
                AppendStart::Done(_) => None,
            });
            starts.push(start);
        }
        Ok(Box::new(SqlAppendBatch { tx, starts, rows, storage_limits, now }))
    }

    /// What each tenant of the group with a storage limit keeps now
    /// (`read`: as the session lock read it already). Read without a
    /// lock: a group that commits meanwhile is caught when this one
    /// counts its lines (`StoreError::StorageRaced`).
    async fn storage_budgets_in(
        tx: &mut WriteTx<'_, DB>,
        reqs: &[&AppendRequest],
        read: HashMap<TenantId, i64>,
    ) -> StoreResult<HashMap<TenantId, StorageBudget>> {
        let mut budgets = HashMap::new();
        for req in reqs {
            let Some(limit) = req.max_storage_bytes.filter(|l| *l > 0) else { continue };
            if budgets.contains_key(&req.tenant_id) {
                continue;
            }
            let used = match read.get(&req.tenant_id) {
                Some(bytes) => *bytes,
                None => sqlx::query(AssertSqlSafe(format!("SELECT ({}) AS bytes", usage::STORAGE_OF_TENANT)))
                    .bind(req.tenant_id)
                    .fetch_one(&mut **tx)
                    .await?
                    .try_get::<i64, _>("bytes")?,
            };
            budgets.insert(req.tenant_id, StorageBudget { limit, used: used.max(0) as u64 });
        }
        Ok(budgets)
    }

    /// The common case in two statements: the sessions of the appends
    /// that exist, then those of their rollouts that exist, with each
    /// session and, where its rollout exists, the rollout's committed
    /// length and segment count.
    /// Every replica locks all sessions before any rollout, each kind in
    /// one order, so two groups never wait for each other in a cycle.
    /// With a storage limit in the group, the sessions' tenants' storage
    /// is read in the same round trip.
    async fn lock_known_in(
        tx: &mut WriteTx<'_, DB>,
        reqs: &[&AppendRequest],
    ) -> StoreResult<(HashMap<AppendTarget, KnownTarget>, HashMap<TenantId, i64>)> {
        let limited = reqs.iter().any(|r| r.max_storage_bytes.is_some_and(|l| l > 0));
        let storage_column = if limited {
            format!(", ({}) AS tenant_storage", usage::STORAGE_OF_TENANT.replace("$1", "locked.tenant_id"))
        } else {
            String::new()
        };
        let mut query =
            sqlx::QueryBuilder::<DB>::new(format!("SELECT locked.*{storage_column} FROM sessions locked JOIN ("));
        query.push_values(reqs, |mut v, req| {
            v.push_bind(req.tenant_id).push_bind(req.session_id.as_str());
        });
        query.push(") AS v ON locked.tenant_id = v.column1 AND locked.session_id = v.column2");
        query.push(" ORDER BY locked.tenant_id, locked.session_id").push(DB::LOCK_JOINED_ROWS);
        let mut sessions: HashMap<(TenantId, String), SessionRecord> = HashMap::new();
        let mut storage = HashMap::new();
        for row in query.build().fetch_all(&mut **tx).await? {
            let session = Self::record::<SessionRow, SessionRecord>(&row)?;
            let tenant: TenantId = row.try_get("tenant_id")?;
            if limited {
                storage.insert(tenant, row.try_get::<i64, _>("tenant_storage")?);
            }
            sessions.insert((tenant, session.session_id.as_str().to_owned()), session);
        }
        // The rollouts of the appends whose session exists, in the session's workspace.
        let targets: Vec<(&AppendRequest, &SessionRecord)> = reqs
            .iter()
            .filter_map(|req| {
                sessions.get(&(req.tenant_id, req.session_id.as_str().to_owned())).map(|session| (*req, session))
            })
            .collect();
        let mut known = HashMap::new();
        if targets.is_empty() {
            return Ok((known, storage));
        }
        let mut query = sqlx::QueryBuilder::<DB>::new(
            "SELECT locked.tenant_id, locked.workspace, locked.layout, locked.rollout_id,
                    locked.committed_len, locked.segment_count, locked.forgetting
             FROM rollouts locked JOIN (",
        );
        query.push_values(&targets, |mut v, (req, session)| {
            v.push_bind(req.tenant_id)
                .push_bind(session.workspace.as_str())
                .push_bind(req.layout_name.as_str())
                .push_bind(req.segment.rollout_id.as_str());
        });
        query.push(
            ") AS v ON locked.tenant_id = v.column1 AND locked.workspace = v.column2
                 AND locked.layout = v.column3 AND locked.rollout_id = v.column4
             ORDER BY locked.tenant_id, locked.workspace, locked.layout, locked.rollout_id",
        );
        query.push(DB::LOCK_JOINED_ROWS);
        let mut positions: HashMap<(TenantId, String, String, String), RolloutPosition> = HashMap::new();
        for row in query.build().fetch_all(&mut **tx).await? {
            let rollout = (
                row.try_get("tenant_id")?,
                row.try_get("workspace")?,
                row.try_get("layout")?,
                row.try_get("rollout_id")?,
            );
            positions.insert(
                rollout,
                (row.try_get("committed_len")?, row.try_get("segment_count")?, row.try_get("forgetting")?),
            );
        }
        for (req, session) in targets {
            let rollout = (
                req.tenant_id,
                session.workspace.as_str().to_owned(),
                req.layout_name.as_str().to_owned(),
                req.segment.rollout_id.as_str().to_owned(),
            );
            known.insert(append_target(req), (session.clone(), positions.get(&rollout).copied()));
        }
        Ok((known, storage))
    }

    /// Where one append's line goes, its session and rollout rows locked
    /// (`known`: already locked); or its answer when nothing is to be
    /// written, in which case it has left nothing behind in the transaction.
    async fn position_in(
        tx: &mut WriteTx<'_, DB>,
        req: &AppendRequest,
        now: DateTime<Utc>,
        known: Option<KnownTarget>,
        budget: Option<&mut StorageBudget>,
    ) -> StoreResult<AppendStart> {
        if let Some(claim) = &req.idempotency {
            // A concurrent holder of the same key makes this insert wait for
            // its commit, after which the stored answer is there to replay.
            let claimed = sqlx::query(
                "INSERT INTO idempotency_keys (tenant_id, key, request_hash, created_at) VALUES ($1, $2, $3, $4)
                 ON CONFLICT DO NOTHING RETURNING key",
            )
            .bind(req.tenant_id)
            .bind(claim.key.as_str())
            .bind(claim.request_hash.as_str())
            .bind(now)
            .fetch_optional(&mut **tx)
            .await?;
            if claimed.is_none() {
                let row = sqlx::query(
                    "SELECT request_hash, response FROM idempotency_keys WHERE tenant_id = $1 AND key = $2",
                )
                .bind(req.tenant_id)
                .bind(claim.key.as_str())
                .fetch_one(&mut **tx)
                .await?;
                return Ok(AppendStart::Done(replay_or_conflict(
                    claim,
                    row.try_get("request_hash")?,
                    row.try_get("response")?,
                )?));
            }
        }

        // SPEC §2.9: a line that would pass the storage limit is refused
        // before anything of it (a session, a rollout row) is made.
        let line_bytes = req.segment.line.len() as u64;
        if let Some(budget) = &budget
            && budget.used + line_bytes > budget.limit
        {
            return Self::refused_in(tx, req, AppendOutcome::StorageQuota(budget.limit)).await;
        }
        let path_text = req.layout.rollout_path(&req.segment.rollout_id);
        let opened = match known {
            Some((session, position)) => Opened::Session(Box::new(session), false, position),
            None => Self::open_session_in(tx, req, now).await?,
        };
        let mut position = None;
        let mut found = None;
        // Holding the session row keeps a concurrent close from queuing its
        // jobs before this segment is in. A session refused here existed
        // before this append, so only the key's claim is to be taken back.
        let refusal = match opened {
            Opened::Forgetting => Some(AppendOutcome::Forgetting(format!(
                "Workspace {} is being forgotten; open a session there once that is done.",
                req.workspace.clone().unwrap_or_else(WorkspaceName::default_workspace)
            ))),
            Opened::TooMany(limit) => Some(AppendOutcome::TooManyOpenSessions(limit)),
            Opened::Session(session, opened_session, known_position) => {
                let refusal = if req.workspace.as_ref().is_some_and(|w| w != &session.workspace) {
                    Some(AppendOutcome::WorkspaceMismatch(session.workspace.clone()))
                } else if session.state != SessionState::Open {
                    Some(AppendOutcome::SessionClosed(session.state))
                } else {
                    None
                };
                position = known_position;
                found = Some((*session, opened_session));
                refusal
            }
        };
        if let Some(refusal) = refusal {
            return Self::refused_in(tx, req, refusal).await;
        }
        let (session, opened_session) =
            found.ok_or_else(|| corrupt("an append with neither a session nor a refusal"))?;
        let (committed_len, segment_index, forgetting) = match position {
            Some(position) => position,
            None => Self::lock_rollout_in(tx, req, &session.workspace, &path_text, now).await?,
        };
        if forgetting {
            let detail = format!(
                "Rollout {} is being forgotten; it takes segments again once that is done.",
                req.segment.rollout_id
            );
            return Self::refused_in(tx, req, AppendOutcome::Forgetting(detail)).await;
        }
        if let Some(budget) = budget {
            budget.used += line_bytes;
        }
        Ok(AppendStart::Write(AppendPosition {
            workspace: session.workspace,
            rollout_path: path_text,
            committed_len: committed_len as u64,
            segment_index,
            opened_session,
        }))
    }

    /// An append refused before anything was written: its idempotency key's
    /// claim is taken back, so that the key may be used again.
    async fn refused_in(
        tx: &mut WriteTx<'_, DB>,
        req: &AppendRequest,
        refusal: AppendOutcome,
    ) -> StoreResult<AppendStart> {
        if let Some(claim) = &req.idempotency {
            sqlx::query("DELETE FROM idempotency_keys WHERE tenant_id = $1 AND key = $2")
                .bind(req.tenant_id)
                .bind(claim.key.as_str())
                .execute(&mut **tx)
                .await?;
        }
        Ok(AppendStart::Done(refusal))
    }

    /// The session a segment goes to, created if it is new (`true`), its row
    /// locked; or why a new one may not open.
    async fn open_session_in(conn: &mut DbConnection, req: &AppendRequest, now: DateTime<Utc>) -> StoreResult<Opened> {
        if let Some(session) = Self::session_in(&mut *conn, req.tenant_id, &req.session_id, true).await? {
            return Ok(Opened::Session(Box::new(session), false, None));
        }
        let workspace = req.workspace.clone().unwrap_or_else(WorkspaceName::default_workspace);
        if Self::workspace_forgotten_in(&mut *conn, req.tenant_id, &workspace).await? {
            return Ok(Opened::Forgetting);
        }
        if let Some(limit) = req.max_open_sessions
            && Self::open_sessions_in(&mut *conn, req.tenant_id).await? >= limit
        {
            return Ok(Opened::TooMany(limit));
        }
        let opened = sqlx::query(
            "INSERT INTO sessions (tenant_id, session_id, workspace, state, metadata, created_at)
             VALUES ($1, $2, $3, 'open', '{}', $4) ON CONFLICT DO NOTHING RETURNING session_id",
        )
        .bind(req.tenant_id)
        .bind(req.session_id.as_str())
        .bind(workspace.as_str())
        .bind(now)
        .fetch_optional(&mut *conn)
        .await?
        .is_some();
        let session = Self::session_in(&mut *conn, req.tenant_id, &req.session_id, true)
            .await?
            .ok_or_else(|| corrupt("session vanished after insert"))?;
        Ok(Opened::Session(Box::new(session), opened, None))
    }

    /// How many sessions of the tenant are open (its `open_sessions` limit counts them).
    pub(super) async fn open_sessions_in(conn: &mut DbConnection, tenant: TenantId) -> StoreResult<u64> {
        let row = sqlx::query("SELECT count(*) AS n FROM sessions WHERE tenant_id = $1 AND state = 'open'")
            .bind(tenant)
            .fetch_one(&mut *conn)
            .await?;
        Ok(row.try_get::<i64, _>("n")? as u64)
    }

    /// A forget of the workspace is queued or running: no session opens there.
    pub(super) async fn workspace_forgotten_in(
        conn: &mut DbConnection,
        tenant: TenantId,
        workspace: &WorkspaceName,
    ) -> StoreResult<bool> {
        let row = sqlx::query("SELECT 1 AS found FROM workspace_forgets WHERE tenant_id = $1 AND workspace = $2")
            .bind(tenant)
            .bind(workspace.as_str())
            .fetch_optional(&mut *conn)
            .await?;
        Ok(row.is_some())
    }

    /// The rollout's committed length and segment count, its row created if
    /// it is new and locked.
    pub(super) async fn lock_rollout_in(
        conn: &mut DbConnection,
        req: &AppendRequest,
        workspace: &WorkspaceName,
        path_text: &str,
        now: DateTime<Utc>,
    ) -> StoreResult<RolloutPosition> {
        let lock = || {
            sqlx::query(locking::<DB>(
                "SELECT committed_len, segment_count, forgetting FROM rollouts
                 WHERE tenant_id = $1 AND workspace = $2 AND layout = $3 AND rollout_id = $4",
            ))
            .bind(req.tenant_id)
            .bind(workspace.as_str())
            .bind(req.layout_name.as_str())
            .bind(req.segment.rollout_id.as_str())
        };
        let row = match lock().fetch_optional(&mut *conn).await? {
            Some(row) => row,
            None => {
                sqlx::query(
                    "INSERT INTO rollouts (tenant_id, workspace, layout, rollout_id, rollout_path, committed_len,
                                           segment_count, updated_at)
                     VALUES ($1, $2, $3, $4, $5, 0, 0, $6) ON CONFLICT DO NOTHING",
                )
                .bind(req.tenant_id)
                .bind(workspace.as_str())
                .bind(req.layout_name.as_str())
                .bind(req.segment.rollout_id.as_str())
                .bind(path_text)
                .bind(now)
                .execute(&mut *conn)
                .await?;
                lock().fetch_one(&mut *conn).await?
            }
        };
        Ok((row.try_get("committed_len")?, row.try_get("segment_count")?, row.try_get("forgetting")?))
    }
}

#[async_trait::async_trait]
impl<'s> AppendBatch for SqlAppendBatch<'s, DB> {
    fn starts(&self) -> &[AppendStart] {
        &self.starts
    }

    async fn commit(self: Box<Self>) -> StoreResult<()> {
        self.tx.commit().await?;
        Ok(())
    }

    async fn record(&mut self, written: &[WrittenSegment]) -> StoreResult<()> {
        let mut lines = Vec::with_capacity(written.len());
        for segment in written {
            let row = self.rows.get(segment.request).and_then(Option::as_ref);
            lines.push((row.ok_or_else(|| corrupt("a line written for an append that had none to write"))?, segment));
        }
        if lines.len() != self.rows.iter().flatten().count() {
            return Err(corrupt("an append of the batch has no line written"));
        }
        if lines.is_empty() {
            return Ok(());
        }
        // One statement per table for the whole batch, or one for both where
        // the database can: the round trips, not the rows, are what an append costs.
        if DB::WRITING_CTES {
            record_lines_together(&mut self.tx, &lines, self.now).await?;
        } else {
            record_lines_apart(&mut self.tx, &lines, self.now).await?;
        }
        for (row, segment) in &lines {
            if let Some(key) = &row.idempotency_key {
                // Where the append went, so that a forget finds its key.
                sqlx::query(
                    "UPDATE idempotency_keys SET response = $3, workspace = $4, layout = $5, rollout_id = $6
                     WHERE tenant_id = $1 AND key = $2",
                )
                .bind(row.tenant)
                .bind(key.as_str())
                .bind(serde_json::to_string(&segment.receipt).expect("a receipt always serialises"))
                .bind(row.workspace.as_str())
                .bind(row.layout.as_str())
                .bind(row.rollout_id.as_str())
                .execute(&mut *self.tx)
                .await?;
            }
        }
        let mut deltas: BTreeMap<TenantId, usage::UsageDelta> = BTreeMap::new();
        for (row, _) in &lines {
            let change = deltas.entry(row.tenant).or_default();
            change.segments += 1;
            change.bytes_ingested += row.bytes;
            change.add_storage(&row.workspace, row.bytes);
        }
        let storage = SqlStore::<DB>::count_usage_in(&mut self.tx, &deltas, self.now).await?;
        for (tenant, limit) in &self.storage_limits {
            if storage.get(tenant).is_some_and(|bytes| *bytes > 0 && *bytes as u64 > *limit) {
                return Err(StoreError::StorageRaced);
            }
        }
        Ok(())
    }
}

/// A written line, with what its append changes.
type RecordedLine<'a> = (&'a RolloutUpdate, &'a WrittenSegment);

/// The rollouts' new lengths and the sessions' rollouts, a statement each.
async fn record_lines_apart(
    conn: &mut DbConnection,
    lines: &[RecordedLine<'_>],
    now: DateTime<Utc>,
) -> StoreResult<()> {
    let mut update = sqlx::QueryBuilder::<DB>::new(
        "UPDATE rollouts SET committed_len = v.column5, segment_count = rollouts.segment_count + 1,
                last_updated_at = v.column6, last_terminal_state = v.column7, updated_at = ",
    );
    update.push_bind(now).push(" FROM (");
    update.push_values(lines, |mut v, (row, segment)| bind_growth(&mut v, row, segment));
    update.push(
        ") AS v WHERE rollouts.tenant_id = v.column1 AND rollouts.workspace = v.column2
           AND rollouts.layout = v.column3 AND rollouts.rollout_id = v.column4",
    );
    update.build().execute(&mut *conn).await?;
    let mut upsert = sqlx::QueryBuilder::<DB>::new(
        "INSERT INTO session_rollouts (tenant_id, session_id, layout, rollout_id, first_seen_at, segment_count) ",
    );
    upsert.push_values(lines, |mut v, (row, _)| {
        v.push_bind(row.tenant)
            .push_bind(row.session_id.as_str())
            .push_bind(row.layout.as_str())
            .push_bind(row.rollout_id.as_str())
            .push_bind(now)
            .push_unseparated(", 1");
    });
    upsert.push(SESSION_ROLLOUT_COUNTED);
    upsert.build().execute(&mut *conn).await?;
    Ok(())
}

/// Both of [`record_lines_apart`]'s writes in one statement.
async fn record_lines_together(
    conn: &mut DbConnection,
    lines: &[RecordedLine<'_>],
    now: DateTime<Utc>,
) -> StoreResult<()> {
    let mut both = sqlx::QueryBuilder::<DB>::new(
        "WITH v (tenant_id, workspace, layout, rollout_id, committed_len, last_updated_at, last_terminal_state,
                 session_id) AS (",
    );
    both.push_values(lines, |mut v, (row, segment)| {
        bind_growth(&mut v, row, segment);
        v.push_bind(row.session_id.as_str());
    });
    both.push(
        "), grown AS (
            UPDATE rollouts SET committed_len = v.committed_len, segment_count = rollouts.segment_count + 1,
                   last_updated_at = v.last_updated_at, last_terminal_state = v.last_terminal_state, updated_at = ",
    );
    both.push_bind(now).push(
        " FROM v WHERE rollouts.tenant_id = v.tenant_id AND rollouts.workspace = v.workspace
             AND rollouts.layout = v.layout AND rollouts.rollout_id = v.rollout_id)
         INSERT INTO session_rollouts (tenant_id, session_id, layout, rollout_id, first_seen_at, segment_count)
         SELECT tenant_id, session_id, layout, rollout_id, ",
    );
    both.push_bind(now).push(", 1 FROM v").push(SESSION_ROLLOUT_COUNTED);
    both.build().execute(&mut *conn).await?;
    Ok(())
}

/// A line's rollout and what it grows to: the first seven values of either
/// way of recording the lines.
fn bind_growth(
    v: &mut sqlx::query_builder::Separated<'_, DB, &'static str>,
    row: &RolloutUpdate,
    segment: &WrittenSegment,
) {
    v.push_bind(row.tenant)
        .push_bind(row.workspace.as_str())
        .push_bind(row.layout.as_str())
        .push_bind(row.rollout_id.as_str())
        .push_bind(segment.new_len as i64)
        .push_bind(row.updated_at.as_str())
        .push_bind(row.terminal_state.as_str());
}

/// A session's rollout seen again counts one more segment.
const SESSION_ROLLOUT_COUNTED: &str = " ON CONFLICT (tenant_id, session_id, layout, rollout_id)
     DO UPDATE SET segment_count = session_rollouts.segment_count + 1";
