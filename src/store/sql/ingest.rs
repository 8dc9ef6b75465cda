//! Appends: the session and rollout rows locked for the caller (the ingest
//! service) to write the line, then the new committed length recorded.

use super::rows::*;
use super::*;
use crate::domain::ids::WorkspaceName;
use crate::store::*;
use chrono::{DateTime, Utc};
use sqlx::Row;

/// An append whose session and rollout rows this transaction holds.
struct SqlAppendSlot<'s, DB: Database> {
    tx: WriteTx<'s, DB>,
    position: AppendPosition,
    tenant: TenantId,
    session_id: String,
    layout: String,
    rollout_id: String,
    updated_at: String,
    terminal_state: String,
    idempotency_key: Option<String>,
    now: DateTime<Utc>,
}
for_every_dialect! {
    impl {
        pub(super) async fn lock_for_append<'s>(&'s self, req: &AppendRequest<'_>) -> StoreResult<AppendStart<'s>> {
        let now = Utc::now();
        let mut tx = self.begin_write().await?;
        if let Some(claim) = req.idempotency {
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
            .fetch_optional(&mut *tx)
            .await?;
            if claimed.is_none() {
                let row = sqlx::query(
                    "SELECT request_hash, response FROM idempotency_keys WHERE tenant_id = $1 AND key = $2",
                )
                .bind(req.tenant_id)
                .bind(claim.key.as_str())
                .fetch_one(&mut *tx)
                .await?;
                return Ok(AppendStart::Done(replay_or_conflict(claim, row.try_get("request_hash")?, row.try_get("response")?)?));
            }
        }

        let rollout_id = &req.segment.rollout_id;
        let path_text = req.layout.rollout_path(rollout_id);
        // The common case in one statement: the session and the rollout exist,
        // and both rows are locked.
        let known = sqlx::query(locking::<DB>(
            "SELECT s.*, r.committed_len AS rollout_committed_len, r.segment_count AS rollout_segment_count
             FROM sessions s JOIN rollouts r
               ON r.tenant_id = s.tenant_id AND r.workspace = s.workspace AND r.layout = $3 AND r.rollout_id = $4
             WHERE s.tenant_id = $1 AND s.session_id = $2",
        ))
        .bind(req.tenant_id)
        .bind(req.session_id.as_str())
        .bind(req.layout_name.as_str())
        .bind(rollout_id.as_str())
        .fetch_optional(&mut *tx)
        .await?;
        let (session, opened_session, position) = match known {
            Some(row) => {
                let position = (row.try_get::<i64, _>("rollout_committed_len")?, row.try_get("rollout_segment_count")?);
                (Self::record::<SessionRow, SessionRecord>(&row)?, false, Some(position))
            }
            None => {
                let (session, opened) = Self::open_session_in(&mut tx, req, now).await?;
                (session, opened, None)
            }
        };
        // Holding the session row keeps a concurrent close from queuing its
        // jobs before this segment is in.
        if req.workspace.is_some_and(|w| w != &session.workspace) {
            return Ok(AppendStart::Done(AppendOutcome::WorkspaceMismatch(session.workspace)));
        }
        if session.state != SessionState::Open {
            return Ok(AppendStart::Done(AppendOutcome::SessionClosed(session.state)));
        }
        let (committed_len, segment_index) = match position {
            Some(position) => position,
            None => Self::lock_rollout_in(&mut tx, req, &session.workspace, &path_text, now).await?,
        };

        let slot = SqlAppendSlot {
            tx,
            position: AppendPosition {
                workspace: session.workspace,
                rollout_path: path_text,
                committed_len: committed_len as u64,
                segment_index,
                opened_session,
            },
            tenant: req.tenant_id,
            session_id: req.session_id.as_str().to_owned(),
            layout: req.layout_name.as_str().to_owned(),
            rollout_id: rollout_id.as_str().to_owned(),
            updated_at: req.segment.updated_at.clone(),
            terminal_state: req.segment.terminal_state.clone(),
            idempotency_key: req.idempotency.map(|c| c.key.clone()),
            now,
        };
        Ok(AppendStart::Write(Box::new(slot)))
    }

    /// The session a segment goes to, created if it is new (`true`), its row locked.
    pub(super) async fn open_session_in(
        conn: &mut DB::Connection,
        req: &AppendRequest<'_>,
        now: DateTime<Utc>,
    ) -> StoreResult<(SessionRecord, bool)> {
        if let Some(session) = Self::session_in(&mut *conn, req.tenant_id, req.session_id, true).await? {
            return Ok((session, false));
        }
        let workspace = req.workspace.cloned().unwrap_or_else(WorkspaceName::default_workspace);
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
        let session = Self::session_in(&mut *conn, req.tenant_id, req.session_id, true)
            .await?
            .ok_or_else(|| corrupt("session vanished after insert"))?;
        Ok((session, opened))
    }

    /// The rollout's committed length and segment count, its row created if
    /// it is new and locked.
    pub(super) async fn lock_rollout_in(
        conn: &mut DB::Connection,
        req: &AppendRequest<'_>,
        workspace: &WorkspaceName,
        path_text: &str,
        now: DateTime<Utc>,
    ) -> StoreResult<(i64, i64)> {
        let lock = || {
            sqlx::query(locking::<DB>(
                "SELECT committed_len, segment_count FROM rollouts
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
        Ok((row.try_get("committed_len")?, row.try_get("segment_count")?))
    }
    }
}

for_every_dialect! {
    @bounded [#[async_trait::async_trait] impl<'s, DB> AppendSlot for SqlAppendSlot<'s, DB>]

    fn position(&self) -> &AppendPosition {
        &self.position
    }

    async fn commit(mut self: Box<Self>, new_len: u64, receipt: &SegmentReceipt) -> StoreResult<()> {
        sqlx::query(
            "UPDATE rollouts SET committed_len = $5, segment_count = segment_count + 1, last_updated_at = $6,
                    last_terminal_state = $7, updated_at = $8
             WHERE tenant_id = $1 AND workspace = $2 AND layout = $3 AND rollout_id = $4",
        )
        .bind(self.tenant)
        .bind(self.position.workspace.as_str())
        .bind(self.layout.as_str())
        .bind(self.rollout_id.as_str())
        .bind(new_len as i64)
        .bind(self.updated_at.as_str())
        .bind(self.terminal_state.as_str())
        .bind(self.now)
        .execute(&mut *self.tx)
        .await?;
        sqlx::query(
            "INSERT INTO session_rollouts (tenant_id, session_id, layout, rollout_id, segment_count, first_seen_at)
             VALUES ($1, $2, $3, $4, 1, $5)
             ON CONFLICT (tenant_id, session_id, layout, rollout_id)
             DO UPDATE SET segment_count = session_rollouts.segment_count + 1",
        )
        .bind(self.tenant)
        .bind(self.session_id.as_str())
        .bind(self.layout.as_str())
        .bind(self.rollout_id.as_str())
        .bind(self.now)
        .execute(&mut *self.tx)
        .await?;
        if let Some(key) = &self.idempotency_key {
            sqlx::query("UPDATE idempotency_keys SET response = $3 WHERE tenant_id = $1 AND key = $2")
                .bind(self.tenant)
                .bind(key.as_str())
                .bind(serde_json::to_string(receipt).expect("a receipt always serialises"))
                .execute(&mut *self.tx)
                .await?;
        }
        self.tx.commit().await?;
        Ok(())
    }
}
