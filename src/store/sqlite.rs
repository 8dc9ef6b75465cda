//! The embedded store for a single replica. Every write transaction starts
//! with `BEGIN IMMEDIATE`, which takes SQLite's one write lock: that is what
//! serialises appends here, as the row locks do on Postgres. Ids and
//! timestamps are stored as text (fixed-width RFC 3339, so they sort).

use super::*;
use crate::domain::layout::{LayoutPutDecision, decide_layout_put};
use crate::workspace::{append_durably, ensure_layout};
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteRow, SqliteSynchronous,
};
use sqlx::{Row, SqlitePool};
use std::str::FromStr;

const MIGRATIONS: &[Migration] = &[Migration {
    version: 1,
    sql: include_str!("../../migrations/sqlite/0001_core.sql"),
}];

pub struct SqliteStore {
    pool: SqlitePool,
}

/// Fixed-width UTC text, so that SQL comparisons order instants correctly.
pub(crate) fn ts(t: DateTime<Utc>) -> String {
    t.format("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()
}

fn parse_ts(s: &str) -> StoreResult<DateTime<Utc>> {
    crate::domain::time::parse_rfc3339(s)
        .ok_or_else(|| StoreError::Corrupt(format!("stored timestamp {s:?}")))
}

fn get_ts(r: &SqliteRow, column: &str) -> StoreResult<DateTime<Utc>> {
    parse_ts(r.try_get(column)?)
}

fn get_opt_ts(r: &SqliteRow, column: &str) -> StoreResult<Option<DateTime<Utc>>> {
    r.try_get::<Option<&str>, _>(column)?
        .map(parse_ts)
        .transpose()
}

fn parse_uuid(s: &str) -> StoreResult<Uuid> {
    Uuid::parse_str(s).map_err(|e| StoreError::Corrupt(format!("stored uuid {s:?}: {e}")))
}

impl SqliteStore {
    pub async fn connect(url: &str) -> StoreResult<Self> {
        let options = SqliteConnectOptions::from_str(url)?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Full)
            .foreign_keys(true)
            .busy_timeout(std::time::Duration::from_secs(30));
        if let Some(dir) = options.get_filename().parent() {
            std::fs::create_dir_all(dir)?;
        }
        let pool = SqlitePoolOptions::new()
            .max_connections(8)
            .connect_with(options)
            .await?;
        let store = Self { pool };
        store.migrate().await?;
        Ok(store)
    }

    async fn migrate(&self) -> StoreResult<()> {
        let result = async {
            let mut tx = self.pool.begin_with("BEGIN IMMEDIATE").await?;
            sqlx::query(
                "CREATE TABLE IF NOT EXISTS memoryd_migrations (version INTEGER PRIMARY KEY, applied_at TEXT NOT NULL)",
            )
            .execute(&mut *tx)
            .await?;
            for m in MIGRATIONS {
                let done: Option<i64> =
                    sqlx::query_scalar("SELECT version FROM memoryd_migrations WHERE version = $1")
                        .bind(m.version)
                        .fetch_optional(&mut *tx)
                        .await?;
                if done.is_some() {
                    continue;
                }
                sqlx::raw_sql(sqlx::AssertSqlSafe(m.sql)).execute(&mut *tx).await?;
                sqlx::query("INSERT INTO memoryd_migrations (version, applied_at) VALUES ($1, $2)")
                    .bind(m.version)
                    .bind(ts(Utc::now()))
                    .execute(&mut *tx)
                    .await?;
            }
            tx.commit().await
        }
        .await;
        result.map_err(|e| StoreError::Migration(e.to_string()))
    }

    async fn layouts_in(
        executor: impl sqlx::SqliteExecutor<'_>,
        tenant: TenantId,
    ) -> StoreResult<Vec<StoredLayout>> {
        let rows = sqlx::query(
            "SELECT name, config, updated_at FROM layouts WHERE tenant_id = $1 ORDER BY name",
        )
        .bind(tenant.to_string())
        .fetch_all(executor)
        .await?;
        rows.iter()
            .map(|r| {
                Ok(StoredLayout {
                    name: parse_id(LayoutName::parse, r.try_get("name")?, "layout name")?,
                    layout: parse_layout_config(r.try_get("config")?)?,
                    updated_at: Some(get_ts(r, "updated_at")?),
                })
            })
            .collect()
    }

    async fn session_in(
        executor: impl sqlx::SqliteExecutor<'_>,
        tenant: TenantId,
        id: &SessionId,
    ) -> StoreResult<Option<SessionRecord>> {
        // BEGIN IMMEDIATE already holds the database's write lock.
        let row = sqlx::query("SELECT * FROM sessions WHERE tenant_id = $1 AND session_id = $2")
            .bind(tenant.to_string())
            .bind(id.as_str())
            .fetch_optional(executor)
            .await?;
        row.as_ref().map(session_from_row).transpose()
    }

    async fn jobs_of_session(
        executor: impl sqlx::SqliteExecutor<'_>,
        tenant: TenantId,
        id: &SessionId,
    ) -> StoreResult<Vec<JobRecord>> {
        let rows = sqlx::query(
            "SELECT * FROM jobs WHERE tenant_id = $1 AND session_id = $2 ORDER BY created_at, kind, layout, rollout_id",
        )
        .bind(tenant.to_string())
        .bind(id.as_str())
        .fetch_all(executor)
        .await?;
        rows.iter().map(job_from_row).collect()
    }
}

fn session_from_row(r: &SqliteRow) -> StoreResult<SessionRecord> {
    let metadata: String = r.try_get("metadata")?;
    let memory_status: Option<String> = r.try_get("memory_status")?;
    Ok(SessionRecord {
        session_id: parse_id(SessionId::parse, r.try_get("session_id")?, "session id")?,
        workspace: parse_id(WorkspaceName::parse, r.try_get("workspace")?, "workspace")?,
        state: SessionState::parse(r.try_get("state")?)?,
        metadata: serde_json::from_str(&metadata)
            .map_err(|e| StoreError::Corrupt(e.to_string()))?,
        memory_status: memory_status
            .map(|s| serde_json::from_str(&s))
            .transpose()
            .map_err(|e| StoreError::Corrupt(e.to_string()))?,
        created_at: get_ts(r, "created_at")?,
        closed_at: get_opt_ts(r, "closed_at")?,
    })
}

fn job_from_row(r: &SqliteRow) -> StoreResult<JobRecord> {
    let kind: String = r.try_get("kind")?;
    let state: String = r.try_get("state")?;
    let rollout: Option<String> = r.try_get("rollout_id")?;
    let usage: Option<String> = r.try_get("usage")?;
    Ok(JobRecord {
        job_id: parse_uuid(r.try_get("id")?)?,
        kind: parse_id(JobKind::parse, &kind, "job kind")?,
        state: parse_id(JobState::parse, &state, "job state")?,
        session_id: parse_id(SessionId::parse, r.try_get("session_id")?, "session id")?,
        workspace: parse_id(WorkspaceName::parse, r.try_get("workspace")?, "workspace")?,
        layout: parse_id(LayoutName::parse, r.try_get("layout")?, "layout name")?,
        rollout_id: rollout
            .as_deref()
            .map(|s| parse_id(RolloutId::parse, s, "rollout id"))
            .transpose()?,
        attempts: r.try_get("attempts")?,
        run_after: get_ts(r, "run_after")?,
        last_error: r.try_get("last_error")?,
        usage: usage
            .map(|s| serde_json::from_str(&s))
            .transpose()
            .map_err(|e| StoreError::Corrupt(e.to_string()))?,
        created_at: get_ts(r, "created_at")?,
        started_at: get_opt_ts(r, "started_at")?,
        finished_at: get_opt_ts(r, "finished_at")?,
    })
}

#[async_trait]
impl Store for SqliteStore {
    async fn ping(&self) -> StoreResult<()> {
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }

    async fn create_tenant(&self, name: &str, key: &NewApiKey) -> StoreResult<Tenant> {
        let now = Utc::now();
        let mut tx = self.pool.begin_with("BEGIN IMMEDIATE").await?;
        sqlx::query("INSERT INTO tenants (id, name, created_at) VALUES ($1, $2, $3)")
            .bind(key.tenant_id.to_string())
            .bind(name)
            .bind(ts(now))
            .execute(&mut *tx)
            .await?;
        sqlx::query(
            "INSERT INTO api_keys (id, tenant_id, key_hash, created_at) VALUES ($1, $2, $3, $4)",
        )
        .bind(key.key_id.to_string())
        .bind(key.tenant_id.to_string())
        .bind(&key.key_hash)
        .bind(ts(now))
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(Tenant {
            tenant_id: key.tenant_id,
            name: name.to_owned(),
            created_at: now,
        })
    }

    async fn create_api_key(&self, key: &NewApiKey) -> StoreResult<bool> {
        let inserted = sqlx::query(
            "INSERT INTO api_keys (id, tenant_id, key_hash, created_at) SELECT $1, id, $3, $4 FROM tenants WHERE id = $2",
        )
        .bind(key.key_id.to_string())
        .bind(key.tenant_id.to_string())
        .bind(&key.key_hash)
        .bind(ts(Utc::now()))
        .execute(&self.pool)
        .await?;
        Ok(inserted.rows_affected() == 1)
    }

    async fn revoke_api_key(&self, key_id: Uuid) -> StoreResult<bool> {
        let updated =
            sqlx::query("UPDATE api_keys SET revoked_at = $2 WHERE id = $1 AND revoked_at IS NULL")
                .bind(key_id.to_string())
                .bind(ts(Utc::now()))
                .execute(&self.pool)
                .await?;
        Ok(updated.rows_affected() == 1)
    }

    async fn tenant_for_key_hash(&self, key_hash: &str) -> StoreResult<Option<TenantId>> {
        let tenant: Option<String> = sqlx::query_scalar(
            "SELECT tenant_id FROM api_keys WHERE key_hash = $1 AND revoked_at IS NULL",
        )
        .bind(key_hash)
        .fetch_optional(&self.pool)
        .await?;
        tenant.as_deref().map(parse_uuid).transpose()
    }

    async fn stored_layouts(&self, tenant: TenantId) -> StoreResult<Vec<StoredLayout>> {
        Self::layouts_in(&self.pool, tenant).await
    }

    async fn put_layout(
        &self,
        tenant: TenantId,
        name: &LayoutName,
        layout: &ValidLayout,
        if_match: Option<&str>,
    ) -> StoreResult<Result<PutLayoutOutcome, LayoutPutError>> {
        let mut tx = self.pool.begin_with("BEGIN IMMEDIATE").await?;
        let existing: Vec<(LayoutName, ValidLayout)> =
            with_implicit_default(Self::layouts_in(&mut *tx, tenant).await?)
                .into_iter()
                .map(|l| (l.name, l.layout))
                .collect();
        let decision = match decide_layout_put(&existing, name, layout, if_match) {
            Ok(d) => d,
            Err(e) => return Ok(Err(e)),
        };
        let config = serde_json::to_string(&layout.config).expect("a config always serialises");
        let now = Utc::now();
        let outcome = match decision {
            LayoutPutDecision::Unchanged => PutLayoutOutcome::Unchanged,
            LayoutPutDecision::Create | LayoutPutDecision::Replace => {
                sqlx::query(
                    "INSERT INTO layouts (tenant_id, name, config, created_at, updated_at) VALUES ($1, $2, $3, $4, $4)
                     ON CONFLICT (tenant_id, name) DO UPDATE SET config = EXCLUDED.config, updated_at = EXCLUDED.updated_at",
                )
                .bind(tenant.to_string())
                .bind(name.as_str())
                .bind(config)
                .bind(ts(now))
                .execute(&mut *tx)
                .await?;
                if decision == LayoutPutDecision::Create {
                    PutLayoutOutcome::Created
                } else {
                    PutLayoutOutcome::Replaced
                }
            }
        };
        tx.commit().await?;
        Ok(Ok(outcome))
    }

    async fn create_session(
        &self,
        tenant: TenantId,
        new: &NewSession,
    ) -> StoreResult<CreateSessionOutcome> {
        let inserted = sqlx::query(
            "INSERT INTO sessions (tenant_id, session_id, workspace, state, metadata, created_at)
             VALUES ($1, $2, $3, 'open', $4, $5) ON CONFLICT DO NOTHING",
        )
        .bind(tenant.to_string())
        .bind(new.session_id.as_str())
        .bind(new.workspace.as_str())
        .bind(new.metadata.to_string())
        .bind(ts(Utc::now()))
        .execute(&self.pool)
        .await?;
        let record = Self::session_in(&self.pool, tenant, &new.session_id)
            .await?
            .ok_or_else(|| StoreError::Corrupt("session vanished after insert".into()))?;
        Ok(if inserted.rows_affected() == 1 {
            CreateSessionOutcome::Created(record)
        } else {
            CreateSessionOutcome::Existing(record)
        })
    }

    async fn session_view(
        &self,
        tenant: TenantId,
        id: &SessionId,
    ) -> StoreResult<Option<SessionView>> {
        let Some(session) = Self::session_in(&self.pool, tenant, id).await? else {
            return Ok(None);
        };
        let rows = sqlx::query(
            "SELECT layout, rollout_id, segment_count FROM session_rollouts
             WHERE tenant_id = $1 AND session_id = $2 ORDER BY layout, rollout_id",
        )
        .bind(tenant.to_string())
        .bind(id.as_str())
        .fetch_all(&self.pool)
        .await?;
        let rollouts = rows
            .iter()
            .map(|r| {
                Ok(TouchedRollout {
                    layout: parse_id(LayoutName::parse, r.try_get("layout")?, "layout name")?,
                    rollout_id: parse_id(RolloutId::parse, r.try_get("rollout_id")?, "rollout id")?,
                    segment_count: r.try_get("segment_count")?,
                })
            })
            .collect::<StoreResult<Vec<_>>>()?;
        let jobs = Self::jobs_of_session(&self.pool, tenant, id).await?;
        Ok(Some(SessionView {
            session,
            rollouts,
            jobs,
        }))
    }

    async fn session_state(
        &self,
        tenant: TenantId,
        id: &SessionId,
    ) -> StoreResult<Option<SessionState>> {
        let state: Option<String> = sqlx::query_scalar(
            "SELECT state FROM sessions WHERE tenant_id = $1 AND session_id = $2",
        )
        .bind(tenant.to_string())
        .bind(id.as_str())
        .fetch_optional(&self.pool)
        .await?;
        state.as_deref().map(SessionState::parse).transpose()
    }

    async fn append_segment(&self, req: AppendRequest<'_>) -> StoreResult<AppendOutcome> {
        let now = Utc::now();
        let mut tx = self.pool.begin_with("BEGIN IMMEDIATE").await?;
        if let Some(claim) = req.idempotency {
            let claimed = sqlx::query(
                "INSERT INTO idempotency_keys (tenant_id, key, request_hash, created_at) VALUES ($1, $2, $3, $4)
                 ON CONFLICT DO NOTHING",
            )
            .bind(req.tenant_id.to_string())
            .bind(&claim.key)
            .bind(&claim.request_hash)
            .bind(ts(now))
            .execute(&mut *tx)
            .await?;
            if claimed.rows_affected() == 0 {
                let row = sqlx::query("SELECT request_hash, response FROM idempotency_keys WHERE tenant_id = $1 AND key = $2")
                    .bind(req.tenant_id.to_string())
                    .bind(&claim.key)
                    .fetch_one(&mut *tx)
                    .await?;
                return replay_or_conflict(
                    claim,
                    row.try_get("request_hash")?,
                    row.try_get("response")?,
                );
            }
        }

        let workspace = req
            .workspace
            .cloned()
            .unwrap_or_else(WorkspaceName::default_workspace);
        sqlx::query(
            "INSERT INTO sessions (tenant_id, session_id, workspace, state, metadata, created_at)
             VALUES ($1, $2, $3, 'open', '{}', $4) ON CONFLICT DO NOTHING",
        )
        .bind(req.tenant_id.to_string())
        .bind(req.session_id.as_str())
        .bind(workspace.as_str())
        .bind(ts(now))
        .execute(&mut *tx)
        .await?;
        let session = Self::session_in(&mut *tx, req.tenant_id, req.session_id)
            .await?
            .ok_or_else(|| StoreError::Corrupt("session vanished after insert".into()))?;
        if req.workspace.is_some_and(|w| w != &session.workspace) {
            return Ok(AppendOutcome::WorkspaceMismatch(session.workspace));
        }
        if session.state != SessionState::Open {
            return Ok(AppendOutcome::SessionClosed(session.state));
        }

        let rollout_id = &req.segment.rollout_id;
        let path_text = rollout_path(req.layout, rollout_id);
        sqlx::query(
            "INSERT INTO rollouts (tenant_id, workspace, layout, rollout_id, rollout_path, committed_len, segment_count, updated_at)
             VALUES ($1, $2, $3, $4, $5, 0, 0, $6) ON CONFLICT DO NOTHING",
        )
        .bind(req.tenant_id.to_string())
        .bind(session.workspace.as_str())
        .bind(req.layout_name.as_str())
        .bind(rollout_id.as_str())
        .bind(&path_text)
        .bind(ts(now))
        .execute(&mut *tx)
        .await?;
        let row = sqlx::query(
            "SELECT committed_len, segment_count FROM rollouts
             WHERE tenant_id = $1 AND workspace = $2 AND layout = $3 AND rollout_id = $4",
        )
        .bind(req.tenant_id.to_string())
        .bind(session.workspace.as_str())
        .bind(req.layout_name.as_str())
        .bind(rollout_id.as_str())
        .fetch_one(&mut *tx)
        .await?;
        let committed_len: i64 = row.try_get("committed_len")?;
        let segment_index: i64 = row.try_get("segment_count")?;

        let root = req
            .volumes
            .workspace_root(req.tenant_id, &session.workspace)?;
        let layout = req.layout.clone();
        let line = req.segment.line.clone();
        let file_name = rollout_id.file_name();
        let new_len = tokio::task::spawn_blocking(move || -> StoreResult<u64> {
            ensure_layout(&root, &layout)?;
            let sessions = crate::workspace::confine(&root, &layout.sessions_dir.normalized)?;
            let path = crate::workspace::confine(&sessions, &file_name)?;
            Ok(append_durably(
                &path,
                committed_len as u64,
                line.as_bytes(),
            )?)
        })
        .await
        .map_err(|e| StoreError::Io(std::io::Error::other(e)))??;

        sqlx::query(
            "UPDATE rollouts SET committed_len = $5, segment_count = segment_count + 1, last_updated_at = $6,
                    last_terminal_state = $7, updated_at = $8
             WHERE tenant_id = $1 AND workspace = $2 AND layout = $3 AND rollout_id = $4",
        )
        .bind(req.tenant_id.to_string())
        .bind(session.workspace.as_str())
        .bind(req.layout_name.as_str())
        .bind(rollout_id.as_str())
        .bind(new_len as i64)
        .bind(&req.segment.updated_at)
        .bind(&req.segment.terminal_state)
        .bind(ts(now))
        .execute(&mut *tx)
        .await?;
        sqlx::query(
            "INSERT INTO session_rollouts (tenant_id, session_id, layout, rollout_id, segment_count, first_seen_at)
             VALUES ($1, $2, $3, $4, 1, $5)
             ON CONFLICT (tenant_id, session_id, layout, rollout_id)
             DO UPDATE SET segment_count = session_rollouts.segment_count + 1",
        )
        .bind(req.tenant_id.to_string())
        .bind(req.session_id.as_str())
        .bind(req.layout_name.as_str())
        .bind(rollout_id.as_str())
        .bind(ts(now))
        .execute(&mut *tx)
        .await?;
        let receipt = SegmentReceipt {
            session_id: req.session_id.clone(),
            layout: req.layout_name.clone(),
            rollout_id: rollout_id.clone(),
            segment_index,
            rollout_path: path_text,
        };
        if let Some(claim) = req.idempotency {
            sqlx::query(
                "UPDATE idempotency_keys SET response = $3 WHERE tenant_id = $1 AND key = $2",
            )
            .bind(req.tenant_id.to_string())
            .bind(&claim.key)
            .bind(serde_json::to_string(&receipt).expect("a receipt always serialises"))
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(AppendOutcome::Appended(receipt))
    }

    async fn close_session(
        &self,
        tenant: TenantId,
        id: &SessionId,
    ) -> StoreResult<Option<CloseOutcome>> {
        let mut tx = self.pool.begin_with("BEGIN IMMEDIATE").await?;
        let Some(mut session) = Self::session_in(&mut *tx, tenant, id).await? else {
            return Ok(None);
        };
        if session.state == SessionState::Open {
            let now = Utc::now();
            let rows = sqlx::query(
                "SELECT layout, rollout_id, segment_count FROM session_rollouts
                 WHERE tenant_id = $1 AND session_id = $2 ORDER BY layout, rollout_id",
            )
            .bind(tenant.to_string())
            .bind(id.as_str())
            .fetch_all(&mut *tx)
            .await?;
            let touched = rows
                .iter()
                .map(|r| {
                    Ok(TouchedRollout {
                        layout: parse_id(LayoutName::parse, r.try_get("layout")?, "layout name")?,
                        rollout_id: parse_id(
                            RolloutId::parse,
                            r.try_get("rollout_id")?,
                            "rollout id",
                        )?,
                        segment_count: r.try_get("segment_count")?,
                    })
                })
                .collect::<StoreResult<Vec<_>>>()?;
            let layouts = Self::layouts_in(&mut *tx, tenant).await?;
            for (kind, layout_name, rollout) in jobs_for_close(&touched) {
                let layout = resolve_layout(layouts.clone(), &layout_name).ok_or_else(|| {
                    StoreError::Corrupt(format!("layout {layout_name} of a session is gone"))
                })?;
                sqlx::query(
                    "INSERT INTO jobs (id, tenant_id, kind, session_id, workspace, layout, rollout_id, layout_config,
                                       state, attempts, run_after, created_at)
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 'queued', 0, $9, $9)",
                )
                .bind(Uuid::new_v4().to_string())
                .bind(tenant.to_string())
                .bind(kind.as_str())
                .bind(id.as_str())
                .bind(session.workspace.as_str())
                .bind(layout_name.as_str())
                .bind(rollout.as_ref().map(RolloutId::as_str))
                .bind(serde_json::to_string(&layout.config).expect("a config always serialises"))
                .bind(ts(now))
                .execute(&mut *tx)
                .await?;
            }
            let (state, status, closed_at) = if touched.is_empty() {
                (
                    SessionState::Closed,
                    Some(serde_json::json!({"status": "complete", "failures": []})),
                    Some(now),
                )
            } else {
                (SessionState::Closing, None, None)
            };
            sqlx::query(
                "UPDATE sessions SET state = $3, memory_status = $4, closed_at = $5 WHERE tenant_id = $1 AND session_id = $2",
            )
            .bind(tenant.to_string())
            .bind(id.as_str())
            .bind(state.as_str())
            .bind(status.as_ref().map(Value::to_string))
            .bind(closed_at.map(ts))
            .execute(&mut *tx)
            .await?;
            session.state = state;
            session.memory_status = status;
            session.closed_at = closed_at;
        }
        let jobs = Self::jobs_of_session(&mut *tx, tenant, id).await?;
        tx.commit().await?;
        Ok(Some(CloseOutcome { session, jobs }))
    }

    async fn list_jobs(&self, tenant: TenantId, filter: &JobFilter) -> StoreResult<Vec<JobRecord>> {
        let rows = sqlx::query(
            "SELECT * FROM jobs WHERE tenant_id = $1
               AND ($2 IS NULL OR state = $2)
               AND ($3 IS NULL OR kind = $3)
               AND ($4 IS NULL OR session_id = $4)
             ORDER BY created_at DESC, id LIMIT 1000",
        )
        .bind(tenant.to_string())
        .bind(filter.state.map(JobState::as_str))
        .bind(filter.kind.map(JobKind::as_str))
        .bind(filter.session_id.as_ref().map(SessionId::as_str))
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(job_from_row).collect()
    }

    async fn get_job(&self, tenant: TenantId, job_id: Uuid) -> StoreResult<Option<JobRecord>> {
        let row = sqlx::query("SELECT * FROM jobs WHERE tenant_id = $1 AND id = $2")
            .bind(tenant.to_string())
            .bind(job_id.to_string())
            .fetch_optional(&self.pool)
            .await?;
        row.as_ref().map(job_from_row).transpose()
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
        .bind(tenant.to_string())
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
}
