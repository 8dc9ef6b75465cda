//! The store over SQL, written once for both databases. What differs between
//! Postgres and SQLite — how a transaction takes its locks, the migrations —
//! is the [`Dialect`] of each; the queries themselves are common SQL.

use super::*;
use crate::domain::layout::{LayoutPutDecision, decide_layout_put};
use crate::workspace::{append_durably, confine, ensure_layout};
use sqlx::{AssertSqlSafe, ColumnIndex, Database, Decode, Encode, Executor, IntoArguments, Pool, Row, Type};

/// What one database does its own way.
pub trait Dialect: Database {
    /// This backend's schema, in order.
    const MIGRATIONS: &'static [Migration];
    /// Appended to a `SELECT` whose rows the transaction must hold until it
    /// ends (`FOR UPDATE`); empty where the write transaction already
    /// excludes every other writer.
    const LOCK_ROWS: &'static str;
    /// Appended to the claim query: skip rows another worker is claiming.
    const CLAIM_ROWS: &'static str;
    /// Run first in a claim transaction where claims are not already
    /// serialised: it serialises them (concurrent claims would each see the
    /// other's tenant with nothing running yet, and the per-tenant share would
    /// not hold) and may relax the claim's commit, which is safe to lose.
    const CLAIM_GATE: Option<&'static str>;
    /// Starts a transaction that will write.
    const BEGIN_WRITE: &'static str;
    /// Statements around migrations so that replicas never migrate at once.
    const MIGRATION_LOCK: Option<(&'static str, &'static str)>;
    /// Makes a text `ORDER BY` compare bytes (code points), whatever the
    /// database's collation.
    const BYTE_ORDER: &'static str;
    /// The database admits one writer at a time: queue writers in the process
    /// (fairly, without the busy-wait sleeps of a contended lock).
    const ONE_WRITER: bool;
}

/// A store on any [`Dialect`].
pub struct SqlStore<DB: Database> {
    pool: Pool<DB>,
    write_gate: Option<tokio::sync::Mutex<()>>,
}

/// A write transaction, holding the process's write gate where the dialect has one.
struct WriteTx<'g, DB: Database> {
    tx: sqlx::Transaction<'static, DB>,
    _gate: Option<tokio::sync::MutexGuard<'g, ()>>,
}

impl<DB: Database> std::ops::Deref for WriteTx<'_, DB> {
    type Target = DB::Connection;

    fn deref(&self) -> &DB::Connection {
        &self.tx
    }
}

impl<DB: Database> std::ops::DerefMut for WriteTx<'_, DB> {
    fn deref_mut(&mut self) -> &mut DB::Connection {
        &mut self.tx
    }
}

impl<DB: Database> WriteTx<'_, DB> {
    async fn commit(self) -> Result<(), sqlx::Error> {
        self.tx.commit().await
    }
}

/// SQLSTATE of a lock wait that ran past `lock_timeout`.
const LOCK_NOT_AVAILABLE: &str = "55P03";

/// A query that must lock the rows it reads.
fn locking<DB: Dialect>(select: &str) -> AssertSqlSafe<String> {
    AssertSqlSafe(format!("{select}{}", DB::LOCK_ROWS))
}

/// `updated_at` as fixed-width UTC text that sorts as the instants do; empty
/// when it is unknown or unparseable (it then sorts after every instant).
fn sortable_instant(updated_at: &str) -> String {
    crate::domain::time::parse_rfc3339(crate::domain::pytext::py_strip(updated_at))
        .map(|t| t.format("%Y-%m-%dT%H:%M:%S%.9fZ").to_string())
        .unwrap_or_default()
}

fn corrupt(e: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt(e.to_string())
}

impl<DB> SqlStore<DB>
where
    DB: Dialect,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    DB::Arguments: IntoArguments<DB>,
    for<'q> Uuid: Encode<'q, DB> + Decode<'q, DB> + Type<DB>,
    for<'q> Option<Uuid>: Encode<'q, DB>,
    for<'q> String: Encode<'q, DB> + Decode<'q, DB> + Type<DB>,
    for<'q> Option<String>: Encode<'q, DB>,
    for<'q> &'q str: Encode<'q, DB> + Decode<'q, DB> + Type<DB>,
    for<'q> Option<&'q str>: Encode<'q, DB>,
    for<'q> i64: Encode<'q, DB> + Decode<'q, DB> + Type<DB>,
    for<'q> Option<i64>: Encode<'q, DB>,
    for<'q> DateTime<Utc>: Encode<'q, DB> + Decode<'q, DB> + Type<DB>,
    for<'q> Option<DateTime<Utc>>: Encode<'q, DB>,
    for<'a> &'a str: ColumnIndex<DB::Row>,
{
    /// Wraps a connected pool and brings its schema up to date.
    pub async fn open(pool: Pool<DB>) -> StoreResult<Self> {
        let store = Self { pool, write_gate: DB::ONE_WRITER.then(|| tokio::sync::Mutex::new(())) };
        store.migrate().await.map_err(|e| StoreError::Migration(e.to_string()))?;
        store.backfill_sortable_instants().await?;
        Ok(store)
    }

    /// Rows indexed before `updated_at_utc` existed get it now.
    async fn backfill_sortable_instants(&self) -> StoreResult<()> {
        let rows = sqlx::query(
            "SELECT tenant_id, workspace, layout, rollout_id, updated_at FROM raw_memories WHERE updated_at_utc IS NULL",
        )
        .fetch_all(&self.pool)
        .await?;
        for r in rows {
            sqlx::query(
                "UPDATE raw_memories SET updated_at_utc = $5
                 WHERE tenant_id = $1 AND workspace = $2 AND layout = $3 AND rollout_id = $4",
            )
            .bind(r.try_get::<Uuid, _>("tenant_id")?)
            .bind(r.try_get::<String, _>("workspace")?)
            .bind(r.try_get::<String, _>("layout")?)
            .bind(r.try_get::<String, _>("rollout_id")?)
            .bind(sortable_instant(r.try_get("updated_at")?))
            .execute(&self.pool)
            .await?;
        }
        Ok(())
    }

    async fn begin_write(&self) -> Result<WriteTx<'_, DB>, sqlx::Error> {
        let gate = match &self.write_gate {
            Some(gate) => Some(gate.lock().await),
            None => None,
        };
        Ok(WriteTx { tx: self.pool.begin_with(DB::BEGIN_WRITE).await?, _gate: gate })
    }

    async fn migrate(&self) -> Result<(), sqlx::Error> {
        let mut conn = self.pool.acquire().await?;
        if let Some((lock, _)) = DB::MIGRATION_LOCK {
            sqlx::query(lock).execute(&mut *conn).await?;
        }
        let result = async {
            sqlx::query(
                "CREATE TABLE IF NOT EXISTS memoryd_migrations (version BIGINT PRIMARY KEY, applied_at TEXT NOT NULL)",
            )
            .execute(&mut *conn)
            .await?;
            for m in DB::MIGRATIONS {
                let done = sqlx::query("SELECT version FROM memoryd_migrations WHERE version = $1")
                    .bind(m.version)
                    .fetch_optional(&mut *conn)
                    .await?;
                if done.is_some() {
                    continue;
                }
                let mut tx = sqlx::Connection::begin_with(&mut *conn, DB::BEGIN_WRITE).await?;
                sqlx::raw_sql(AssertSqlSafe(m.sql)).execute(&mut *tx).await?;
                sqlx::query("INSERT INTO memoryd_migrations (version, applied_at) VALUES ($1, $2)")
                    .bind(m.version)
                    .bind(Utc::now().to_rfc3339())
                    .execute(&mut *tx)
                    .await?;
                tx.commit().await?;
            }
            Ok::<_, sqlx::Error>(())
        }
        .await;
        if let Some((_, unlock)) = DB::MIGRATION_LOCK {
            sqlx::query(unlock).execute(&mut *conn).await?;
        }
        result
    }

    async fn layouts_in<'e>(
        executor: impl Executor<'e, Database = DB>,
        tenant: TenantId,
    ) -> StoreResult<Vec<StoredLayout>> {
        let rows = sqlx::query("SELECT name, config, updated_at FROM layouts WHERE tenant_id = $1 ORDER BY name")
            .bind(tenant)
            .fetch_all(executor)
            .await?;
        rows.iter()
            .map(|r| {
                Ok(StoredLayout {
                    name: parse_id(LayoutName::parse, r.try_get("name")?, "layout name")?,
                    layout: parse_layout_config(r.try_get("config")?)?,
                    updated_at: Some(r.try_get("updated_at")?),
                })
            })
            .collect()
    }

    async fn session_in<'e>(
        executor: impl Executor<'e, Database = DB>,
        tenant: TenantId,
        id: &SessionId,
        lock: bool,
    ) -> StoreResult<Option<SessionRecord>> {
        let select = "SELECT * FROM sessions WHERE tenant_id = $1 AND session_id = $2";
        let sql = if lock { locking::<DB>(select) } else { AssertSqlSafe(select.to_owned()) };
        let row = sqlx::query(sql).bind(tenant).bind(id.as_str()).fetch_optional(executor).await?;
        row.as_ref().map(Self::session_from_row).transpose()
    }

    async fn touched_in<'e>(
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

    async fn jobs_of_session<'e>(
        executor: impl Executor<'e, Database = DB>,
        tenant: TenantId,
        id: &SessionId,
    ) -> StoreResult<Vec<JobRecord>> {
        let rows = sqlx::query(
            "SELECT * FROM jobs WHERE tenant_id = $1 AND session_id = $2 ORDER BY created_at, kind, layout, rollout_id",
        )
        .bind(tenant)
        .bind(id.as_str())
        .fetch_all(executor)
        .await?;
        rows.iter().map(Self::job_from_row).collect()
    }

    async fn settle_session_in(&self, tenant: TenantId, session_id: &str) -> StoreResult<()> {
        let open_jobs = "SELECT count(*) AS n FROM jobs WHERE tenant_id = $1 AND session_id = $2 AND state IN ('queued', 'running')";
        let open = sqlx::query(open_jobs).bind(tenant).bind(session_id).fetch_one(&self.pool).await?;
        if open.try_get::<i64, _>("n")? > 0 {
            return Ok(());
        }
        let mut tx = self.begin_write().await?;
        sqlx::query(locking::<DB>("SELECT state FROM sessions WHERE tenant_id = $1 AND session_id = $2"))
            .bind(tenant)
            .bind(session_id)
            .execute(&mut *tx)
            .await?;
        let open = sqlx::query(open_jobs).bind(tenant).bind(session_id).fetch_one(&mut *tx).await?;
        if open.try_get::<i64, _>("n")? > 0 {
            return Ok(());
        }
        let failed = sqlx::query(
            "SELECT id, kind, layout, rollout_id, last_error FROM jobs
             WHERE tenant_id = $1 AND session_id = $2 AND state = 'failed' ORDER BY created_at, kind, layout, rollout_id",
        )
        .bind(tenant)
        .bind(session_id)
        .fetch_all(&mut *tx)
        .await?;
        let failures = failed
            .iter()
            .map(|r| {
                Ok(serde_json::json!({
                    "job_id": r.try_get::<Uuid, _>("id")?,
                    "kind": r.try_get::<String, _>("kind")?,
                    "layout": r.try_get::<String, _>("layout")?,
                    "rollout_id": r.try_get::<Option<String>, _>("rollout_id")?,
                    "error": r.try_get::<Option<String>, _>("last_error")?,
                }))
            })
            .collect::<StoreResult<Vec<_>>>()?;
        sqlx::query(
            "UPDATE sessions SET state = 'closed', memory_status = $3, closed_at = $4
             WHERE tenant_id = $1 AND session_id = $2 AND state = 'closing'",
        )
        .bind(tenant)
        .bind(session_id)
        .bind(settled_memory_status(failures).to_string())
        .bind(Utc::now())
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }

    /// The session a segment goes to, created if it is new (`true`), its row locked.
    async fn open_session_in(
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
    async fn lock_rollout_in(
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

    async fn upsert_raw_memory(
        conn: &mut DB::Connection,
        tenant: TenantId,
        workspace: &WorkspaceName,
        layout: &LayoutName,
        raw: &RawMemoryRecord,
        job_id: Uuid,
        now: DateTime<Utc>,
    ) -> StoreResult<()> {
        sqlx::query(
            "INSERT INTO raw_memories (tenant_id, workspace, layout, rollout_id, updated_at, rollout_path,
                                       rollout_summary_file, terminal_state, extracted_len, job_id, written_at,
                                       updated_at_utc)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)
             ON CONFLICT (tenant_id, workspace, layout, rollout_id) DO UPDATE SET
                updated_at = excluded.updated_at, updated_at_utc = excluded.updated_at_utc,
                rollout_path = excluded.rollout_path,
                rollout_summary_file = excluded.rollout_summary_file, terminal_state = excluded.terminal_state,
                extracted_len = excluded.extracted_len, job_id = excluded.job_id, written_at = excluded.written_at",
        )
        .bind(tenant)
        .bind(workspace.as_str())
        .bind(layout.as_str())
        .bind(raw.rollout_id.as_str())
        .bind(raw.updated_at.as_str())
        .bind(raw.rollout_path.as_str())
        .bind(raw.rollout_summary_file.as_str())
        .bind(raw.terminal_state.as_str())
        .bind(raw.extracted_len as i64)
        .bind(job_id)
        .bind(now)
        .bind(sortable_instant(&raw.updated_at))
        .execute(&mut *conn)
        .await?;
        Ok(())
    }

    fn raw_memory_from_row(r: &DB::Row) -> StoreResult<RawMemoryRecord> {
        Ok(RawMemoryRecord {
            rollout_id: parse_id(RolloutId::parse, r.try_get("rollout_id")?, "rollout id")?,
            updated_at: r.try_get("updated_at")?,
            rollout_path: r.try_get("rollout_path")?,
            rollout_summary_file: r.try_get("rollout_summary_file")?,
            terminal_state: r.try_get("terminal_state")?,
            extracted_len: r.try_get::<i64, _>("extracted_len")? as u64,
        })
    }

    fn claimed_from_row(r: &DB::Row, token: Uuid) -> StoreResult<ClaimedJob> {
        Ok(ClaimedJob {
            job: Self::job_from_row(r)?,
            tenant_id: r.try_get("tenant_id")?,
            layout: parse_layout_config(r.try_get("layout_config")?)?,
            token,
            token_limit: r.try_get("token_limit")?,
        })
    }

    fn session_from_row(r: &DB::Row) -> StoreResult<SessionRecord> {
        let metadata: String = r.try_get("metadata")?;
        let memory_status: Option<String> = r.try_get("memory_status")?;
        Ok(SessionRecord {
            session_id: parse_id(SessionId::parse, r.try_get("session_id")?, "session id")?,
            workspace: parse_id(WorkspaceName::parse, r.try_get("workspace")?, "workspace")?,
            state: SessionState::parse(r.try_get("state")?)?,
            metadata: serde_json::from_str(&metadata).map_err(corrupt)?,
            memory_status: memory_status.map(|s| serde_json::from_str(&s)).transpose().map_err(corrupt)?,
            created_at: r.try_get("created_at")?,
            closed_at: r.try_get("closed_at")?,
        })
    }

    fn job_from_row(r: &DB::Row) -> StoreResult<JobRecord> {
        let rollout: Option<String> = r.try_get("rollout_id")?;
        let usage: Option<String> = r.try_get("usage")?;
        Ok(JobRecord {
            job_id: r.try_get("id")?,
            kind: parse_id(JobKind::parse, r.try_get("kind")?, "job kind")?,
            state: parse_id(JobState::parse, r.try_get("state")?, "job state")?,
            session_id: parse_id(SessionId::parse, r.try_get("session_id")?, "session id")?,
            workspace: parse_id(WorkspaceName::parse, r.try_get("workspace")?, "workspace")?,
            layout: parse_id(LayoutName::parse, r.try_get("layout")?, "layout name")?,
            rollout_id: rollout.as_deref().map(|s| parse_id(RolloutId::parse, s, "rollout id")).transpose()?,
            attempts: r.try_get("attempts")?,
            run_after: r.try_get("run_after")?,
            last_error: r.try_get("last_error")?,
            usage: usage.map(|s| serde_json::from_str(&s)).transpose().map_err(corrupt)?,
            created_at: r.try_get("created_at")?,
            started_at: r.try_get("started_at")?,
            finished_at: r.try_get("finished_at")?,
        })
    }
}

#[async_trait]
impl<DB> Store for SqlStore<DB>
where
    DB: Dialect,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    DB::Arguments: IntoArguments<DB>,
    for<'q> Uuid: Encode<'q, DB> + Decode<'q, DB> + Type<DB>,
    for<'q> Option<Uuid>: Encode<'q, DB>,
    for<'q> String: Encode<'q, DB> + Decode<'q, DB> + Type<DB>,
    for<'q> Option<String>: Encode<'q, DB>,
    for<'q> &'q str: Encode<'q, DB> + Decode<'q, DB> + Type<DB>,
    for<'q> Option<&'q str>: Encode<'q, DB>,
    for<'q> i64: Encode<'q, DB> + Decode<'q, DB> + Type<DB>,
    for<'q> Option<i64>: Encode<'q, DB>,
    for<'q> DateTime<Utc>: Encode<'q, DB> + Decode<'q, DB> + Type<DB>,
    for<'q> Option<DateTime<Utc>>: Encode<'q, DB>,
    for<'a> &'a str: ColumnIndex<DB::Row>,
{
    async fn ping(&self) -> StoreResult<()> {
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }

    async fn create_tenant(&self, name: &str, key: &NewApiKey) -> StoreResult<Tenant> {
        let now = Utc::now();
        let mut tx = self.begin_write().await?;
        sqlx::query("INSERT INTO tenants (id, name, created_at) VALUES ($1, $2, $3)")
            .bind(key.tenant_id)
            .bind(name)
            .bind(now)
            .execute(&mut *tx)
            .await?;
        sqlx::query("INSERT INTO api_keys (id, tenant_id, key_hash, created_at) VALUES ($1, $2, $3, $4)")
            .bind(key.key_id)
            .bind(key.tenant_id)
            .bind(key.key_hash.as_str())
            .bind(now)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(Tenant { tenant_id: key.tenant_id, name: name.to_owned(), created_at: now })
    }

    async fn create_api_key(&self, key: &NewApiKey) -> StoreResult<bool> {
        // An explicit transaction: its commit reports a failure that an
        // autocommit `RETURNING` statement on SQLite would not.
        let mut tx = self.begin_write().await?;
        let inserted = sqlx::query(
            "INSERT INTO api_keys (id, tenant_id, key_hash, created_at)
             SELECT $1, id, $3, $4 FROM tenants WHERE id = $2 RETURNING id",
        )
        .bind(key.key_id)
        .bind(key.tenant_id)
        .bind(key.key_hash.as_str())
        .bind(Utc::now())
        .fetch_optional(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(inserted.is_some())
    }

    async fn revoke_api_key(&self, key_id: Uuid) -> StoreResult<bool> {
        // An explicit transaction: its commit reports a failure that an
        // autocommit `RETURNING` statement on SQLite would not.
        let mut tx = self.begin_write().await?;
        let revoked =
            sqlx::query("UPDATE api_keys SET revoked_at = $2 WHERE id = $1 AND revoked_at IS NULL RETURNING id")
                .bind(key_id)
                .bind(Utc::now())
                .fetch_optional(&mut *tx)
                .await?;
        tx.commit().await?;
        Ok(revoked.is_some())
    }

    async fn tenant_for_key_hash(&self, key_hash: &str) -> StoreResult<Option<TenantId>> {
        let row = sqlx::query("SELECT tenant_id FROM api_keys WHERE key_hash = $1 AND revoked_at IS NULL")
            .bind(key_hash)
            .fetch_optional(&self.pool)
            .await?;
        Ok(row.map(|r| r.try_get("tenant_id")).transpose()?)
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
        let mut tx = self.begin_write().await?;
        // The tenant row serialises layout changes, so two concurrent PUTs
        // cannot both pass the conflict rules.
        sqlx::query(locking::<DB>("SELECT id FROM tenants WHERE id = $1")).bind(tenant).execute(&mut *tx).await?;
        let existing: Vec<(LayoutName, ValidLayout)> = with_implicit_default(Self::layouts_in(&mut *tx, tenant).await?)
            .into_iter()
            .map(|l| (l.name, l.layout))
            .collect();
        let decision = match decide_layout_put(&existing, name, layout, if_match) {
            Ok(d) => d,
            Err(e) => return Ok(Err(e)),
        };
        if decision == LayoutPutDecision::Unchanged {
            return Ok(Ok(PutLayoutOutcome::Unchanged));
        }
        sqlx::query(
            "INSERT INTO layouts (tenant_id, name, config, created_at, updated_at) VALUES ($1, $2, $3, $4, $4)
             ON CONFLICT (tenant_id, name) DO UPDATE SET config = excluded.config, updated_at = excluded.updated_at",
        )
        .bind(tenant)
        .bind(name.as_str())
        .bind(serde_json::to_string(&layout.config).expect("a config always serialises"))
        .bind(Utc::now())
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(Ok(if decision == LayoutPutDecision::Create {
            PutLayoutOutcome::Created
        } else {
            PutLayoutOutcome::Replaced
        }))
    }

    async fn create_session(&self, tenant: TenantId, new: &NewSession) -> StoreResult<CreateSessionOutcome> {
        // One transaction whose commit reports a failure (a full disk, say) that
        // an autocommit `RETURNING` statement on SQLite would not.
        let mut tx = self.begin_write().await?;
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
        Ok(Some(SessionView { session, rollouts, jobs }))
    }

    async fn session_state(&self, tenant: TenantId, id: &SessionId) -> StoreResult<Option<SessionState>> {
        let row = sqlx::query("SELECT state FROM sessions WHERE tenant_id = $1 AND session_id = $2")
            .bind(tenant)
            .bind(id.as_str())
            .fetch_optional(&self.pool)
            .await?;
        row.map(|r| SessionState::parse(r.try_get("state")?)).transpose()
    }

    async fn append_segment(&self, req: AppendRequest<'_>) -> StoreResult<AppendOutcome> {
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
                return replay_or_conflict(claim, row.try_get("request_hash")?, row.try_get("response")?);
            }
        }

        let rollout_id = &req.segment.rollout_id;
        let path_text = rollout_path(req.layout, rollout_id);
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
                (Self::session_from_row(&row)?, false, Some(position))
            }
            None => {
                let (session, opened) = Self::open_session_in(&mut tx, &req, now).await?;
                (session, opened, None)
            }
        };
        // Holding the session row keeps a concurrent close from queuing its
        // jobs before this segment is in.
        if req.workspace.is_some_and(|w| w != &session.workspace) {
            return Ok(AppendOutcome::WorkspaceMismatch(session.workspace));
        }
        if session.state != SessionState::Open {
            return Ok(AppendOutcome::SessionClosed(session.state));
        }
        let (committed_len, segment_index) = match position {
            Some(position) => position,
            None => Self::lock_rollout_in(&mut tx, &req, &session.workspace, &path_text, now).await?,
        };

        let root = req.volumes.workspace_root(req.tenant_id, &session.workspace)?;
        let layout = req.layout.clone();
        let line = req.segment.line.clone();
        let file_name = rollout_id.file_name();
        let new_len = tokio::task::spawn_blocking(move || -> StoreResult<u64> {
            ensure_layout(&root, &layout)?;
            let sessions = confine(&root, &layout.sessions_dir.normalized)?;
            Ok(append_durably(&confine(&sessions, &file_name)?, committed_len as u64, line.as_bytes())?)
        })
        .await
        .map_err(|e| StoreError::Io(std::io::Error::other(e)))??;

        sqlx::query(
            "UPDATE rollouts SET committed_len = $5, segment_count = segment_count + 1, last_updated_at = $6,
                    last_terminal_state = $7, updated_at = $8
             WHERE tenant_id = $1 AND workspace = $2 AND layout = $3 AND rollout_id = $4",
        )
        .bind(req.tenant_id)
        .bind(session.workspace.as_str())
        .bind(req.layout_name.as_str())
        .bind(rollout_id.as_str())
        .bind(new_len as i64)
        .bind(req.segment.updated_at.as_str())
        .bind(req.segment.terminal_state.as_str())
        .bind(now)
        .execute(&mut *tx)
        .await?;
        sqlx::query(
            "INSERT INTO session_rollouts (tenant_id, session_id, layout, rollout_id, segment_count, first_seen_at)
             VALUES ($1, $2, $3, $4, 1, $5)
             ON CONFLICT (tenant_id, session_id, layout, rollout_id)
             DO UPDATE SET segment_count = session_rollouts.segment_count + 1",
        )
        .bind(req.tenant_id)
        .bind(req.session_id.as_str())
        .bind(req.layout_name.as_str())
        .bind(rollout_id.as_str())
        .bind(now)
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
            sqlx::query("UPDATE idempotency_keys SET response = $3 WHERE tenant_id = $1 AND key = $2")
                .bind(req.tenant_id)
                .bind(claim.key.as_str())
                .bind(serde_json::to_string(&receipt).expect("a receipt always serialises"))
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        Ok(AppendOutcome::Appended { receipt, opened_session })
    }

    async fn close_session(&self, tenant: TenantId, id: &SessionId) -> StoreResult<Option<CloseOutcome>> {
        let mut tx = self.begin_write().await?;
        let Some(mut session) = Self::session_in(&mut *tx, tenant, id, true).await? else {
            return Ok(None);
        };
        let closed_now = session.state == SessionState::Open;
        if closed_now {
            let now = Utc::now();
            let touched = Self::touched_in(&mut *tx, tenant, id).await?;
            let layouts = Self::layouts_in(&mut *tx, tenant).await?;
            for (kind, layout_name, rollout) in jobs_for_close(&touched) {
                let layout = resolve_layout(layouts.clone(), &layout_name)
                    .ok_or_else(|| corrupt(format!("layout {layout_name} of a session is gone")))?;
                sqlx::query(
                    "INSERT INTO jobs (id, tenant_id, kind, session_id, workspace, layout, rollout_id, layout_config,
                                       state, attempts, run_after, created_at)
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 'queued', 0, $9, $9)",
                )
                .bind(Uuid::new_v4())
                .bind(tenant)
                .bind(kind.as_str())
                .bind(id.as_str())
                .bind(session.workspace.as_str())
                .bind(layout_name.as_str())
                .bind(rollout.as_ref().map(RolloutId::as_str))
                .bind(serde_json::to_string(&layout.config).expect("a config always serialises"))
                .bind(now)
                .execute(&mut *tx)
                .await?;
            }
            let transition = close_transition(touched.is_empty(), now);
            sqlx::query(
                "UPDATE sessions SET state = $3, memory_status = $4, closed_at = $5 WHERE tenant_id = $1 AND session_id = $2",
            )
            .bind(tenant)
            .bind(id.as_str())
            .bind(transition.state.as_str())
            .bind(transition.memory_status.as_ref().map(Value::to_string))
            .bind(transition.closed_at)
            .execute(&mut *tx)
            .await?;
            session.state = transition.state;
            session.memory_status = transition.memory_status;
            session.closed_at = transition.closed_at;
        }
        let jobs = Self::jobs_of_session(&mut *tx, tenant, id).await?;
        tx.commit().await?;
        Ok(Some(CloseOutcome { session, jobs, closed_now }))
    }

    async fn list_jobs(&self, tenant: TenantId, filter: &JobFilter) -> StoreResult<Vec<JobRecord>> {
        let rows = sqlx::query(
            "SELECT * FROM jobs WHERE tenant_id = $1
               AND ($2 IS NULL OR state = $2)
               AND ($3 IS NULL OR kind = $3)
               AND ($4 IS NULL OR session_id = $4)
             ORDER BY created_at DESC, id LIMIT 1000",
        )
        .bind(tenant)
        .bind(filter.state.map(JobState::as_str))
        .bind(filter.kind.map(JobKind::as_str))
        .bind(filter.session_id.as_ref().map(SessionId::as_str))
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(Self::job_from_row).collect()
    }

    async fn get_job(&self, tenant: TenantId, job_id: Uuid) -> StoreResult<Option<JobRecord>> {
        let row = sqlx::query("SELECT * FROM jobs WHERE tenant_id = $1 AND id = $2")
            .bind(tenant)
            .bind(job_id)
            .fetch_optional(&self.pool)
            .await?;
        row.as_ref().map(Self::job_from_row).transpose()
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

    async fn claim_job(&self, req: &ClaimRequest<'_>) -> StoreResult<Option<ClaimedJob>> {
        let mut tx = self.begin_write().await?;
        if let Some(gate) = DB::CLAIM_GATE {
            match sqlx::query(gate).execute(&mut *tx).await {
                // Another claim holds the gate longer than a claim takes.
                Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some(LOCK_NOT_AVAILABLE) => return Ok(None),
                result => result?,
            };
        }
        let token = Uuid::new_v4();
        let claimed = sqlx::query(AssertSqlSafe(format!(
            "UPDATE jobs SET state = 'running', lease_owner = $4, lease_token = $5, lease_expires_at = $6,
                    attempts = attempts + 1, started_at = COALESCE(started_at, $3)
             WHERE id = (
             SELECT j.id FROM jobs j
             LEFT JOIN (SELECT tenant_id, count(*) AS running FROM jobs
                        WHERE state = 'running' AND lease_expires_at > $3 GROUP BY tenant_id) share
                    ON share.tenant_id = j.tenant_id
             WHERE ((j.kind = 'phase_one' AND $1 = 1) OR (j.kind = 'phase_two' AND $2 = 1))
               AND ((j.state = 'queued' AND j.run_after <= $3) OR (j.state = 'running' AND j.lease_expires_at <= $3))
               AND (j.kind <> 'phase_two' OR NOT EXISTS (
                     SELECT 1 FROM jobs p WHERE p.tenant_id = j.tenant_id AND p.session_id = j.session_id
                        AND p.layout = j.layout AND p.kind = 'phase_one' AND p.state IN ('queued', 'running')))
               AND (j.kind <> 'phase_two' OR NOT EXISTS (
                     SELECT 1 FROM jobs o WHERE o.tenant_id = j.tenant_id AND o.workspace = j.workspace
                        AND o.layout = j.layout AND o.kind = 'phase_two' AND o.state = 'running' AND o.id <> j.id))
             ORDER BY COALESCE(share.running, 0), j.run_after, j.created_at
             LIMIT 1{})
             RETURNING *",
            DB::CLAIM_ROWS
        )))
        .bind(i64::from(req.kinds.contains(&JobKind::PhaseOne)))
        .bind(i64::from(req.kinds.contains(&JobKind::PhaseTwo)))
        .bind(req.now)
        .bind(req.worker)
        .bind(token)
        .bind(req.now + req.lease)
        .fetch_optional(&mut *tx)
        .await;
        let row = match claimed {
            Ok(Some(row)) => row,
            Ok(None) => return Ok(None),
            // Another replica started this layout's phase two first.
            Err(sqlx::Error::Database(e)) if e.is_unique_violation() => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let claimed = Self::claimed_from_row(&row, token)?;
        tx.commit().await?;
        Ok(Some(claimed))
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

    async fn finish_job(&self, claimed: &ClaimedJob, finish: JobFinish) -> StoreResult<bool> {
        let now = Utc::now();
        let job = &claimed.job;
        let mut tx = self.begin_write().await?;
        let owned =
            sqlx::query(locking::<DB>("SELECT id FROM jobs WHERE id = $1 AND lease_token = $2 AND state = 'running'"))
                .bind(job.job_id)
                .bind(claimed.token)
                .fetch_optional(&mut *tx)
                .await?;
        if owned.is_none() {
            return Ok(false);
        }
        let usage = finish.usage.to_string();
        let (state, run_after, error, token_limit, finished_at) = match &finish.outcome {
            JobOutcome::Succeeded { .. } => (JobState::Succeeded, job.run_after, None, None, Some(now)),
            JobOutcome::Skipped => (JobState::Skipped, job.run_after, None, None, Some(now)),
            JobOutcome::RetryAt { at, error, token_limit } => {
                (JobState::Queued, *at, Some(error.as_str()), *token_limit, None)
            }
            JobOutcome::Failed { error } => (JobState::Failed, job.run_after, Some(error.as_str()), None, Some(now)),
        };
        sqlx::query(
            "UPDATE jobs SET state = $2, run_after = $3, last_error = $4, token_limit = COALESCE($5, token_limit),
                    finished_at = $6, usage = $7, lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL,
                    publish_id = COALESCE($8, publish_id)
             WHERE id = $1",
        )
        .bind(job.job_id)
        .bind(state.as_str())
        .bind(run_after)
        .bind(error)
        .bind(token_limit)
        .bind(finished_at)
        .bind(usage)
        .bind(finish.publish_id)
        .execute(&mut *tx)
        .await?;
        if let JobOutcome::Succeeded { raw_memory: Some(raw) } = &finish.outcome {
            Self::upsert_raw_memory(&mut tx, claimed.tenant_id, &job.workspace, &job.layout, raw, job.job_id, now)
                .await?;
        }
        if let Some(report) = &finish.phase_two {
            let run = &report.run;
            sqlx::query(
                "INSERT INTO phase_two_runs (id, tenant_id, workspace, layout, job_id, session_id, state, selected, added,
                                             retained, removed, files_changed, usage, turns, error, started_at, finished_at)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17)",
            )
            .bind(run.run_id)
            .bind(claimed.tenant_id)
            .bind(job.workspace.as_str())
            .bind(job.layout.as_str())
            .bind(job.job_id)
            .bind(run.session_id.as_str())
            .bind(run.state.as_str())
            .bind(run.selected)
            .bind(run.added)
            .bind(run.retained)
            .bind(run.removed)
            .bind(serde_json::to_string(&run.files_changed).expect("a list of paths serialises"))
            .bind(run.usage.to_string())
            .bind(run.turns)
            .bind(run.error.as_deref())
            .bind(run.started_at)
            .bind(run.finished_at)
            .execute(&mut *tx)
            .await?;
            if let Some(document) = &report.selection {
                sqlx::query(
                    "INSERT INTO phase_two_selections (tenant_id, workspace, layout, run_id, document, updated_at)
                     VALUES ($1, $2, $3, $4, $5, $6)
                     ON CONFLICT (tenant_id, workspace, layout) DO UPDATE SET
                        run_id = excluded.run_id, document = excluded.document, updated_at = excluded.updated_at",
                )
                .bind(claimed.tenant_id)
                .bind(job.workspace.as_str())
                .bind(job.layout.as_str())
                .bind(run.run_id)
                .bind(document.to_string())
                .bind(now)
                .execute(&mut *tx)
                .await?;
            }
        }
        tx.commit().await?;
        Ok(true)
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
        let job = Self::job_from_row(&row)?;
        if job.state != JobState::Failed {
            return Ok(Some(RetryOutcome::NotFailed(job.state)));
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
        // The session waits for this job again.
        sqlx::query(
            "UPDATE sessions SET state = 'closing', memory_status = NULL, closed_at = NULL
             WHERE tenant_id = $1 AND session_id = $2 AND state = 'closed'",
        )
        .bind(tenant)
        .bind(job.session_id.as_str())
        .execute(&mut *tx)
        .await?;
        let job = Self::job_from_row(&row)?;
        tx.commit().await?;
        Ok(Some(RetryOutcome::Requeued(Box::new(job))))
    }

    async fn raw_memory(
        &self,
        tenant: TenantId,
        workspace: &WorkspaceName,
        layout: &LayoutName,
        rollout: &RolloutId,
    ) -> StoreResult<Option<RawMemoryRecord>> {
        let row = sqlx::query(
            "SELECT * FROM raw_memories WHERE tenant_id = $1 AND workspace = $2 AND layout = $3 AND rollout_id = $4",
        )
        .bind(tenant)
        .bind(workspace.as_str())
        .bind(layout.as_str())
        .bind(rollout.as_str())
        .fetch_optional(&self.pool)
        .await?;
        row.as_ref().map(Self::raw_memory_from_row).transpose()
    }

    async fn newest_raw_memories(
        &self,
        tenant: TenantId,
        workspace: &WorkspaceName,
        layout: &LayoutName,
        limit: usize,
    ) -> StoreResult<Vec<RawMemoryRecord>> {
        let order = DB::BYTE_ORDER;
        let rows = sqlx::query(AssertSqlSafe(format!(
            "SELECT rollout_id, updated_at, rollout_path, rollout_summary_file, terminal_state, extracted_len
             FROM raw_memories WHERE tenant_id = $1 AND workspace = $2 AND layout = $3
             ORDER BY updated_at_utc{order} DESC, rollout_id{order} DESC LIMIT $4"
        )))
        .bind(tenant)
        .bind(workspace.as_str())
        .bind(layout.as_str())
        .bind(limit as i64)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(Self::raw_memory_from_row).collect()
    }

    async fn phase_two_selection(
        &self,
        tenant: TenantId,
        workspace: &WorkspaceName,
        layout: &LayoutName,
    ) -> StoreResult<Option<Value>> {
        let row = sqlx::query(
            "SELECT document FROM phase_two_selections WHERE tenant_id = $1 AND workspace = $2 AND layout = $3",
        )
        .bind(tenant)
        .bind(workspace.as_str())
        .bind(layout.as_str())
        .fetch_optional(&self.pool)
        .await?;
        row.map(|r| serde_json::from_str(r.try_get("document")?).map_err(corrupt)).transpose()
    }

    async fn phase_two_runs(
        &self,
        tenant: TenantId,
        workspace: &WorkspaceName,
        layout: &LayoutName,
        limit: i64,
    ) -> StoreResult<Vec<PhaseTwoRun>> {
        let rows = sqlx::query(
            "SELECT * FROM phase_two_runs WHERE tenant_id = $1 AND workspace = $2 AND layout = $3
             ORDER BY finished_at DESC, id LIMIT $4",
        )
        .bind(tenant)
        .bind(workspace.as_str())
        .bind(layout.as_str())
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|r| {
                let files: String = r.try_get("files_changed")?;
                let usage: String = r.try_get("usage")?;
                Ok(PhaseTwoRun {
                    run_id: r.try_get("id")?,
                    job_id: r.try_get("job_id")?,
                    session_id: r.try_get("session_id")?,
                    state: r.try_get("state")?,
                    selected: r.try_get("selected")?,
                    added: r.try_get("added")?,
                    retained: r.try_get("retained")?,
                    removed: r.try_get("removed")?,
                    files_changed: serde_json::from_str(&files).map_err(corrupt)?,
                    usage: serde_json::from_str(&usage).map_err(corrupt)?,
                    turns: r.try_get("turns")?,
                    error: r.try_get("error")?,
                    started_at: r.try_get("started_at")?,
                    finished_at: r.try_get("finished_at")?,
                })
            })
            .collect()
    }

    async fn import_raw_memories(
        &self,
        tenant: TenantId,
        workspace: &WorkspaceName,
        layout: &LayoutName,
        records: &[RawMemoryRecord],
    ) -> StoreResult<()> {
        let now = Utc::now();
        let mut tx = self.begin_write().await?;
        for raw in records {
            Self::upsert_raw_memory(&mut tx, tenant, workspace, layout, raw, Uuid::nil(), now).await?;
        }
        tx.commit().await?;
        Ok(())
    }

    async fn settle_session(&self, tenant: TenantId, session_id: &SessionId) -> StoreResult<()> {
        self.settle_session_in(tenant, session_id.as_str()).await
    }

    async fn settle_finished_sessions(&self) -> StoreResult<usize> {
        let rows = sqlx::query(
            "SELECT s.tenant_id, s.session_id FROM sessions s
             WHERE s.state = 'closing' AND NOT EXISTS (
                 SELECT 1 FROM jobs j WHERE j.tenant_id = s.tenant_id AND j.session_id = s.session_id
                    AND j.state IN ('queued', 'running'))
             LIMIT 100",
        )
        .fetch_all(&self.pool)
        .await?;
        for r in &rows {
            self.settle_session_in(r.try_get("tenant_id")?, r.try_get("session_id")?).await?;
        }
        Ok(rows.len())
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

    async fn publish_decision(
        &self,
        job_id: Uuid,
        publish_id: Uuid,
        now: DateTime<Utc>,
    ) -> StoreResult<PublishDecision> {
        let row = sqlx::query("SELECT state, lease_expires_at, publish_id FROM jobs WHERE id = $1")
            .bind(job_id)
            .fetch_optional(&self.pool)
            .await?;
        let Some(row) = row else { return Ok(PublishDecision::Abandoned) };
        if row.try_get::<Option<Uuid>, _>("publish_id")? == Some(publish_id) {
            return Ok(PublishDecision::Committed);
        }
        let leased = row.try_get::<String, _>("state")? == "running"
            && row.try_get::<Option<DateTime<Utc>>, _>("lease_expires_at")?.is_some_and(|until| until > now);
        Ok(if leased { PublishDecision::Pending } else { PublishDecision::Abandoned })
    }

    async fn job_counts(&self) -> StoreResult<Vec<(String, String, i64)>> {
        let rows = sqlx::query("SELECT kind, state, count(*) AS n FROM jobs GROUP BY kind, state")
            .fetch_all(&self.pool)
            .await?;
        rows.iter().map(|r| Ok((r.try_get("kind")?, r.try_get("state")?, r.try_get("n")?))).collect()
    }

    async fn workspace_known(&self, tenant: TenantId, workspace: &WorkspaceName) -> StoreResult<bool> {
        if workspace == &WorkspaceName::default_workspace() {
            return Ok(true);
        }
        let row = sqlx::query("SELECT 1 AS known FROM sessions WHERE tenant_id = $1 AND workspace = $2 LIMIT 1")
            .bind(tenant)
            .bind(workspace.as_str())
            .fetch_optional(&self.pool)
            .await?;
        Ok(row.is_some())
    }
}
