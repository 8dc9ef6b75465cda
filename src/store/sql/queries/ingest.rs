//! Appends: the session and rollout rows locked for the caller (the ingest
//! service) to write the lines; `ingest_record` then records the new
//! committed lengths. An append is one or more segments to one session, all
//! of them placed or none.

use super::ingest_record::{AppendRows, KeyAnswer, SqlAppendBatch};
use super::ingest_rollouts::{place_lines, rollout_forgotten};
use super::rows::*;
use super::*;
use crate::domain::ids::WorkspaceName;
use crate::store::*;
use chrono::{DateTime, Utc};
use sqlx::Row;
use std::collections::{BTreeSet, HashMap};

/// A tenant's storage as this group sees it, against its limit.
struct StorageBudget {
    limit: u64,
    /// The stored bytes, and the lines this group has placed so far.
    used: u64,
}

/// A rollout of a session's workspace: tenant, workspace, layout, rollout id.
pub(super) type RolloutKey = (TenantId, String, String, String);

/// A rollout's committed length and segment count, and whether a forget of
/// it is queued (it then takes no segment).
pub(super) type RolloutPosition = (i64, i64, bool);

/// What the group's first two statements found and locked.
#[derive(Default)]
pub(super) struct Known {
    /// The sessions that exist.
    pub sessions: HashMap<(TenantId, String), SessionRecord>,
    /// Those of their rollouts that exist, in the sessions' workspaces.
    pub rollouts: HashMap<RolloutKey, RolloutPosition>,
    /// With a storage limit in the group: the sessions' tenants' storage.
    pub storage: HashMap<TenantId, i64>,
}

/// The session an append goes to, or why it may not open one.
enum Opened {
    /// The session (locked), and whether this append opened it.
    Session(Box<SessionRecord>, bool),
    Forgetting,
    TooMany(u64),
}

/// What placing one append came to.
enum Placed {
    Start(AppendStart, Option<AppendRows>),
    /// Refused after it had changed the transaction (opened its session,
    /// made a rollout's row): the transaction is rolled back and made again
    /// with this answer, so nothing of the append is left.
    Undo(AppendOutcome),
}

impl SqlStore<DB> {
    pub(super) async fn lock_for_appends<'s>(
        &'s self,
        reqs: &[&AppendRequest],
    ) -> StoreResult<Box<dyn AppendBatch + 's>> {
        // Each round that does not end answers one more append: at most one round an append.
        let mut answered: HashMap<usize, AppendOutcome> = HashMap::new();
        loop {
            let now = Utc::now();
            let mut tx = self.begin_write().await?;
            let mut known = Self::lock_known_in(&mut tx, reqs, &answered).await?;
            let storage_read = std::mem::take(&mut known.storage);
            let mut budgets = Self::storage_budgets_in(&mut tx, reqs, storage_read).await?;
            let storage_limits = budgets.iter().map(|(tenant, b)| (*tenant, b.limit)).collect();
            let mut starts = Vec::with_capacity(reqs.len());
            let mut rows = Vec::with_capacity(reqs.len());
            let mut undo = None;
            for (i, req) in reqs.iter().enumerate() {
                if let Some(outcome) = answered.get(&i) {
                    starts.push(AppendStart::Done(outcome.clone()));
                    rows.push(None);
                    continue;
                }
                match Self::place_in(&mut tx, req, now, &known, budgets.get_mut(&req.tenant_id)).await? {
                    Placed::Start(start, row) => {
                        starts.push(start);
                        rows.push(row);
                    }
                    Placed::Undo(outcome) => {
                        undo = Some((i, outcome));
                        break;
                    }
                }
            }
            match undo {
                None => return Ok(Box::new(SqlAppendBatch { tx, starts, rows, storage_limits, now })),
                Some((i, outcome)) => {
                    drop(tx);
                    answered.insert(i, outcome);
                }
            }
        }
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
    /// (but those `answered` already) that exist, then those of their
    /// rollouts that exist, each locked. Every replica locks all sessions
    /// before any rollout, each kind in one order, so two groups never wait
    /// for each other in a cycle. With a storage limit in the group, the
    /// sessions' tenants' storage is read in the same round trip.
    async fn lock_known_in(
        tx: &mut WriteTx<'_, DB>,
        reqs: &[&AppendRequest],
        answered: &HashMap<usize, AppendOutcome>,
    ) -> StoreResult<Known> {
        let reqs: Vec<&AppendRequest> =
            reqs.iter().enumerate().filter(|(i, _)| !answered.contains_key(i)).map(|(_, r)| *r).collect();
        let mut known = Known::default();
        if reqs.is_empty() {
            return Ok(known);
        }
        let limited = reqs.iter().any(|r| r.max_storage_bytes.is_some_and(|l| l > 0));
        let storage_column = if limited {
            format!(", ({}) AS tenant_storage", usage::STORAGE_OF_TENANT.replace("$1", "locked.tenant_id"))
        } else {
            String::new()
        };
        let mut query =
            sqlx::QueryBuilder::<DB>::new(format!("SELECT locked.*{storage_column} FROM sessions locked JOIN ("));
        query.push_values(&reqs, |mut v, req| {
            v.push_bind(req.tenant_id).push_bind(req.session_id.as_str());
        });
        query.push(") AS v ON locked.tenant_id = v.column1 AND locked.session_id = v.column2");
        query.push(" ORDER BY locked.tenant_id, locked.session_id").push(DB::LOCK_JOINED_ROWS);
        for row in query.build().fetch_all(&mut **tx).await? {
            let session = Self::record::<SessionRow, SessionRecord>(&row)?;
            let tenant: TenantId = row.try_get("tenant_id")?;
            if limited {
                known.storage.insert(tenant, row.try_get::<i64, _>("tenant_storage")?);
            }
            known.sessions.insert((tenant, session.session_id.as_str().to_owned()), session);
        }
        // The rollouts of the appends whose session exists, in the session's workspace.
        let mut targets: BTreeSet<RolloutKey> = BTreeSet::new();
        for req in &reqs {
            let Some(session) = known.sessions.get(&(req.tenant_id, req.session_id.as_str().to_owned())) else {
                continue;
            };
            for s in &req.segments {
                let (layout, rollout) = (s.layout_name.as_str(), s.segment.rollout_id.as_str());
                targets.insert((req.tenant_id, session.workspace.as_str().to_owned(), layout.into(), rollout.into()));
            }
        }
        if targets.is_empty() {
            return Ok(known);
        }
        let mut query = sqlx::QueryBuilder::<DB>::new(
            "SELECT locked.tenant_id, locked.workspace, locked.layout, locked.rollout_id,
                    locked.committed_len, locked.segment_count, locked.forgetting
             FROM rollouts locked JOIN (",
        );
        query.push_values(&targets, |mut v, (tenant, workspace, layout, rollout)| {
            v.push_bind(*tenant).push_bind(workspace.as_str()).push_bind(layout.as_str()).push_bind(rollout.as_str());
        });
        query.push(
            ") AS v ON locked.tenant_id = v.column1 AND locked.workspace = v.column2
                 AND locked.layout = v.column3 AND locked.rollout_id = v.column4
             ORDER BY locked.tenant_id, locked.workspace, locked.layout, locked.rollout_id",
        );
        query.push(DB::LOCK_JOINED_ROWS);
        for row in query.build().fetch_all(&mut **tx).await? {
            let rollout = (
                row.try_get("tenant_id")?,
                row.try_get("workspace")?,
                row.try_get("layout")?,
                row.try_get("rollout_id")?,
            );
            let position = (row.try_get("committed_len")?, row.try_get("segment_count")?, row.try_get("forgetting")?);
            known.rollouts.insert(rollout, position);
        }
        Ok(known)
    }

    /// Where each of an append's lines goes, its session and rollout rows
    /// locked; or its answer when nothing is to be written, in which case it
    /// has left nothing behind in the transaction (or asks to be undone).
    async fn place_in(
        tx: &mut WriteTx<'_, DB>,
        req: &AppendRequest,
        now: DateTime<Utc>,
        known: &Known,
        budget: Option<&mut StorageBudget>,
    ) -> StoreResult<Placed> {
        if let Some(done) = Self::claim_key_in(tx, req, now).await? {
            return Ok(Placed::Start(AppendStart::Done(done), None));
        }
        // SPEC §2.9: a line that would pass the storage limit is refused
        // before anything of its append (a session, a rollout row) is made.
        let bytes: u64 = req.segments.iter().map(|s| s.segment.line.len() as u64).sum();
        if let Some(budget) = &budget {
            let mut used = budget.used;
            for (index, s) in req.segments.iter().enumerate() {
                used += s.segment.line.len() as u64;
                if used > budget.limit {
                    return Self::refused_in(tx, req, AppendOutcome::StorageQuota { limit: budget.limit, index }).await;
                }
            }
        }
        let existing = known.sessions.get(&(req.tenant_id, req.session_id.as_str().to_owned()));
        if req.segments.len() > 1 {
            let default = WorkspaceName::default_workspace();
            let workspace = existing.map(|s| &s.workspace).or(req.workspace.as_ref()).unwrap_or(&default);
            if let Some(index) = Self::forgotten_first_in(tx, req, workspace, known).await? {
                return Self::refused_in(tx, req, rollout_forgotten(req, index)).await;
            }
        }
        let opened = match existing {
            Some(session) => Opened::Session(Box::new(session.clone()), false),
            None => Self::open_session_in(tx, req, now).await?,
        };
        // Holding the session row keeps a concurrent close from queuing its
        // jobs before these segments are in. A session refused here existed
        // before this append, so only the key's claim is to be taken back.
        let (session, opened_session) = match opened {
            Opened::Forgetting => {
                let workspace = req.workspace.clone().unwrap_or_else(WorkspaceName::default_workspace);
                let detail =
                    format!("Workspace {workspace} is being forgotten; open a session there once that is done.");
                return Self::refused_in(tx, req, AppendOutcome::Forgetting { detail, index: 0 }).await;
            }
            Opened::TooMany(limit) => {
                return Self::refused_in(tx, req, AppendOutcome::TooManyOpenSessions(limit)).await;
            }
            Opened::Session(session, opened) => (*session, opened),
        };
        if req.workspace.as_ref().is_some_and(|w| w != &session.workspace) {
            return Self::refused_in(tx, req, AppendOutcome::WorkspaceMismatch(session.workspace.clone())).await;
        }
        if session.state != SessionState::Open {
            return Self::refused_in(tx, req, AppendOutcome::SessionClosed(session.state)).await;
        }
        let (positions, made) = Self::lock_rollouts_in(tx, req, &session.workspace, known, now).await?;
        let forgotten = positions.values().filter(|(_, (_, _, forgetting))| *forgetting).map(|(first, _)| *first).min();
        if let Some(index) = forgotten {
            let refusal = rollout_forgotten(req, index);
            if opened_session || made {
                return Ok(Placed::Undo(refusal));
            }
            return Self::refused_in(tx, req, refusal).await;
        }
        if let Some(budget) = budget {
            budget.used += bytes;
        }
        let (places, rollouts) = place_lines(req, &session.workspace, positions);
        let receipts: Vec<SegmentReceipt> = places.iter().map(|p| p.receipt.clone()).collect();
        let key = req.idempotency.as_ref().map(|claim| KeyAnswer {
            key: claim.key.clone(),
            answer: serde_json::to_string(&req.answer.answer(&req.session_id, &receipts))
                .expect("an answer always serialises"),
        });
        let row = AppendRows {
            tenant: req.tenant_id,
            workspace: session.workspace.as_str().to_owned(),
            session_id: req.session_id.as_str().to_owned(),
            rollouts,
            key,
            segments: req.segments.len() as i64,
            bytes: bytes as i64,
        };
        let position = AppendPosition { workspace: session.workspace, opened_session, places };
        Ok(Placed::Start(AppendStart::Write(position), Some(row)))
    }

    /// Claims the append's idempotency key; the stored answer (or a
    /// conflict) when another request holds it already. A concurrent holder
    /// of the same key makes the insert wait for its commit, after which
    /// the stored answer is there to replay.
    async fn claim_key_in(
        tx: &mut WriteTx<'_, DB>,
        req: &AppendRequest,
        now: DateTime<Utc>,
    ) -> StoreResult<Option<AppendOutcome>> {
        let Some(claim) = &req.idempotency else { return Ok(None) };
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
        if claimed.is_some() {
            return Ok(None);
        }
        let row = sqlx::query("SELECT request_hash, response FROM idempotency_keys WHERE tenant_id = $1 AND key = $2")
            .bind(req.tenant_id)
            .bind(claim.key.as_str())
            .fetch_one(&mut **tx)
            .await?;
        Ok(Some(replay_or_conflict(claim, row.try_get("request_hash")?, row.try_get("response")?)?))
    }

    /// An append refused before anything was written: its idempotency key's
    /// claim is taken back, so that the key may be used again.
    async fn refused_in(tx: &mut WriteTx<'_, DB>, req: &AppendRequest, refusal: AppendOutcome) -> StoreResult<Placed> {
        if let Some(claim) = &req.idempotency {
            sqlx::query("DELETE FROM idempotency_keys WHERE tenant_id = $1 AND key = $2")
                .bind(req.tenant_id)
                .bind(claim.key.as_str())
                .execute(&mut **tx)
                .await?;
        }
        Ok(Placed::Start(AppendStart::Done(refusal), None))
    }

    /// The session an append goes to, created if it is new (`true`), its row
    /// locked; or why a new one may not open.
    async fn open_session_in(conn: &mut DbConnection, req: &AppendRequest, now: DateTime<Utc>) -> StoreResult<Opened> {
        if let Some(session) = Self::session_in(&mut *conn, req.tenant_id, &req.session_id, true).await? {
            return Ok(Opened::Session(Box::new(session), false));
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
        Ok(Opened::Session(Box::new(session), opened))
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
}
