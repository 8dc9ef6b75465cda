//! The store: the state memoryd keeps in a database, never files. One
//! interface, by subject (tenants and keys, layouts, sessions and ingest, the
//! job queue, the memory index), with a Postgres implementation for
//! production and an embedded SQLite one for a single replica; both run the
//! same tests. Where a file must be written under a database lock (an
//! append), the store hands out a locked unit of work and the caller writes.

mod event_records;
mod ingest_records;
pub mod journal_records;
mod outward;
mod postgres;
mod records;
mod sql;
mod sqlite;
mod vector_records;
pub mod workspace_files;

pub use crate::domain::job::{JobKind, JobState, RunState, SessionState};
pub use crate::domain::layout::{StoredLayout, default_layout, layout_named, with_implicit_default};
pub use event_records::*;
pub use ingest_records::*;
pub use journal_records::RolloutJournalStore;
pub use outward::*;
pub use postgres::PgStore;
pub use records::*;
pub use sql::{Dialect, SqlStore};
pub use sqlite::SqliteStore;
pub use vector_records::*;
pub use workspace_files::WorkspaceFilesStore;

use crate::domain::ids::{LayoutName, RolloutId, SessionId, WorkspaceName};
use crate::domain::layout::{LayoutPutError, ValidLayout};
pub use crate::domain::page::{PageCursor, PageRequest};
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde_json::Value;
use std::sync::Arc;
use uuid::Uuid;

pub type TenantId = Uuid;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("database error")]
    Database(#[from] sqlx::Error),
    #[error("migration failed")]
    Migration(#[from] sqlx::migrate::MigrateError),
    #[error("stored data is inconsistent: {0}")]
    Corrupt(String),
    /// Appends of another transaction took the tenant past its storage limit
    /// between this group's check and its commit: nothing of it was kept,
    /// and made again it sees them.
    #[error("the tenant's storage changed while the appends were made")]
    StorageRaced,
}

pub type StoreResult<T> = Result<T, StoreError>;

/// What a failed store call means for the caller: wait for a dependency to
/// come back, wait for space, or a fault of its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// The database cannot be reached or refuses work for now.
    Unavailable,
    /// The volume (the database's or the workspaces') has no room.
    StorageFull,
    Other,
}

impl StoreError {
    pub fn failure(&self) -> Failure {
        match self {
            Self::Database(e) => database_failure(e),
            Self::StorageRaced => Failure::Unavailable,
            _ => Failure::Other,
        }
    }

    /// The server failed this transaction to break a deadlock with another
    /// (SQLSTATE 40P01): nothing of it was kept, and it may be run again.
    pub fn is_deadlock(&self) -> bool {
        match self {
            Self::Database(sqlx::Error::Database(db)) => db.code().is_some_and(|c| c == DEADLOCK_DETECTED),
            _ => false,
        }
    }
}

const DEADLOCK_DETECTED: &str = "40P01";

pub fn io_failure(e: &std::io::Error) -> Failure {
    match e.kind() {
        std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded => Failure::StorageFull,
        _ => Failure::Other,
    }
}

fn database_failure(e: &sqlx::Error) -> Failure {
    match e {
        // A connection cut midway surfaces as a protocol or TLS error as often as an I/O one.
        sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed
        | sqlx::Error::Tls(_)
        | sqlx::Error::Protocol(_) => Failure::Unavailable,
        sqlx::Error::Io(io) => match io_failure(io) {
            Failure::StorageFull => Failure::StorageFull,
            _ => Failure::Unavailable,
        },
        sqlx::Error::Database(db) => {
            let code = db.code().unwrap_or_default();
            if db.try_downcast_ref::<sqlx::postgres::PgDatabaseError>().is_some() {
                // SQLSTATE class 53 is insufficient resources (53100: disk full),
                // class 08 connection failures, 57P0x the server stopping or starting;
                // 40P01 a deadlock between replicas' transactions, which the server
                // broke by failing this one: each is worth trying again.
                return match code.as_ref() {
                    "53100" => Failure::StorageFull,
                    DEADLOCK_DETECTED => Failure::Unavailable,
                    c if c.starts_with("08") || c.starts_with("53") || c.starts_with("57P") => Failure::Unavailable,
                    _ => Failure::Other,
                };
            }
            // SQLite's extended result codes: the primary code is the low byte
            // (13 full; 5 busy, 6 locked, 8 read-only, 10 I/O error, 14 cannot open).
            match code.parse::<i32>().map(|c| c & 0xff) {
                Ok(13) => Failure::StorageFull,
                Ok(5 | 6 | 8 | 10 | 14) => Failure::Unavailable,
                _ => Failure::Other,
            }
        }
        _ => Failure::Other,
    }
}

/// Tenants and their API keys (stored only as hashes).
#[async_trait]
pub trait TenantStore: Send + Sync {
    async fn create_tenant(&self, name: &str, key: &NewApiKey) -> StoreResult<Tenant>;
    /// Stores the key unless its tenant is gone or already holds
    /// `max_keys` keys not revoked (expired ones included), or its maker is revoked.
    async fn create_api_key(&self, key: &NewApiKey, max_keys: u64) -> StoreResult<KeyCreated>;
    /// Revokes the live key with that id (of `tenant`, when given), the keys
    /// it made, and theirs; `false` when no live key has that id.
    async fn revoke_api_key(&self, tenant: Option<TenantId>, key_id: Uuid) -> StoreResult<bool>;
    /// The live (not revoked) key with this SHA-256, expired or not, of a
    /// tenant not being forgotten.
    async fn key_for_hash(&self, key_hash: &str) -> StoreResult<Option<AuthenticatedKey>>;
    /// A page of the tenant's keys not revoked, newest first.
    async fn list_api_keys(&self, tenant: TenantId, page: &PageRequest) -> StoreResult<Vec<ApiKeyRecord>>;
    /// The tenant's live key with that id.
    async fn api_key(&self, tenant: TenantId, key_id: Uuid) -> StoreResult<Option<ApiKeyRecord>>;
    /// A page of the tenants, oldest first, with their live keys and
    /// sessions counted: the cost follows the page, not every tenant.
    async fn list_tenants(&self, page: &PageRequest) -> StoreResult<Vec<TenantSummary>>;
    /// Whether the tenant exists (being forgotten included): one row read.
    async fn tenant_exists(&self, tenant: TenantId) -> StoreResult<bool>;
    /// The limits an operator set for the tenant (`None`: none set).
    async fn tenant_limits(&self, tenant: TenantId) -> StoreResult<Option<crate::domain::limits::Limits>>;
    /// `false` when the tenant does not exist (or is being forgotten).
    async fn set_tenant_limits(&self, tenant: TenantId, limits: &crate::domain::limits::Limits) -> StoreResult<bool>;
    /// A console session signed out: refused from now on, until `expires_at`.
    async fn end_console_session(&self, session_id: &str, expires_at: DateTime<Utc>) -> StoreResult<()>;
    async fn console_session_ended(&self, session_id: &str) -> StoreResult<bool>;
}

/// A tenant's layouts.
#[async_trait]
pub trait LayoutStore: Send + Sync {
    /// The stored layouts; the implicit default is added by the caller.
    async fn stored_layouts(&self, tenant: TenantId) -> StoreResult<Vec<StoredLayout>>;
    async fn put_layout(
        &self,
        tenant: TenantId,
        name: &LayoutName,
        layout: &ValidLayout,
        if_match: Option<&str>,
    ) -> StoreResult<Result<PutLayoutOutcome, LayoutPutError>>;
}

/// Sessions, the segments appended to their rollouts, and their close.
#[async_trait]
pub trait SessionStore: Send + Sync {
    async fn create_session(&self, tenant: TenantId, new: &NewSession) -> StoreResult<CreateSessionOutcome>;
    async fn session_view(&self, tenant: TenantId, id: &SessionId) -> StoreResult<Option<SessionView>>;
    /// The tenant's sessions, newest first, one page (SPEC §2.6).
    async fn list_sessions(
        &self,
        tenant: TenantId,
        filter: &SessionFilter,
        page: &PageRequest,
    ) -> StoreResult<Vec<SessionSummary>>;
    async fn session_state(&self, tenant: TenantId, id: &SessionId) -> StoreResult<Option<SessionState>>;
    /// The workspace of the session, when it exists: one row read.
    async fn session_workspace(&self, tenant: TenantId, id: &SessionId) -> StoreResult<Option<WorkspaceName>>;
    /// Locks, in one transaction and in the order given, the session and the
    /// rollout of each append (opening sessions that are new) and says where
    /// each line goes; the caller writes the lines and commits the batch.
    /// No two appends of a batch may go to one rollout (their lines would
    /// take the same place) or carry one idempotency key.
    async fn begin_appends<'s>(&'s self, reqs: &[&AppendRequest]) -> StoreResult<Box<dyn AppendBatch + 's>>;
    /// `None` for an unknown session. Moves an open session to `closing` and
    /// queues its jobs in one transaction; idempotent afterwards.
    /// A new phase-two job waits `phase_two_delay` before it may start
    /// (`MEMORYD_PHASE_TWO_DEBOUNCE_MS`); a waiting one is joined instead.
    async fn close_session(
        &self,
        tenant: TenantId,
        id: &SessionId,
        phase_two_delay: chrono::Duration,
    ) -> StoreResult<Option<CloseOutcome>>;
    async fn committed_rollout(
        &self,
        tenant: TenantId,
        workspace: &WorkspaceName,
        layout: &LayoutName,
        rollout: &RolloutId,
    ) -> StoreResult<Option<CommittedRollout>>;
    /// The raw material of `GET /v1/workspaces`.
    async fn workspace_activity(&self, tenant: TenantId) -> StoreResult<WorkspaceActivity>;
    /// `default` always; another workspace once a session has used it.
    async fn workspace_known(&self, tenant: TenantId, workspace: &WorkspaceName) -> StoreResult<bool>;
    /// Closes a `closing` session once none of its jobs is queued or running.
    /// Workers call it after a job's outcome is committed and its files are
    /// published, so the last job to finish always sees every other one
    /// finished; `settle_finished_sessions` covers a process that died between.
    /// Whether it closed the session now (and so recorded its event).
    async fn settle_session(&self, tenant: TenantId, session_id: &SessionId) -> StoreResult<bool>;
    /// Of `sessions`, those none of whose jobs is queued or running: the
    /// ones a batch of finishes, once committed, may settle (one query for
    /// the batch, where asking `settle_session` of each would cost one each).
    async fn sessions_without_open_jobs(
        &self,
        sessions: &[(TenantId, SessionId)],
    ) -> StoreResult<Vec<(TenantId, SessionId)>>;
    /// Closes `closing` sessions whose jobs have all finished but which were
    /// not settled (their last worker died between commit and settle).
    async fn settle_finished_sessions(&self) -> StoreResult<usize>;
}

/// The job queue: claims, leases, fenced finishes, retries.
#[async_trait]
pub trait JobQueue: Send + Sync {
    /// The tenant's jobs, newest first, one page.
    async fn list_jobs(&self, tenant: TenantId, filter: &JobFilter, page: &PageRequest) -> StoreResult<Vec<JobRecord>>;
    async fn get_job(&self, tenant: TenantId, job_id: Uuid) -> StoreResult<Option<JobRecord>>;
    /// Takes the next due job (or one whose lease expired) of `kinds`,
    /// preferring tenants with the fewest running jobs. Phase two waits for
    /// its close's phase-one jobs and runs alone per layout.
    /// Claims up to `limit` due jobs at once, in the order single claims
    /// would take them: the tenant with the fewest running jobs first (each
    /// job claimed counting as running for the next), then the oldest.
    async fn claim_jobs(&self, req: &ClaimRequest<'_>, limit: usize) -> StoreResult<Vec<ClaimedJob>>;
    /// One job, as [`JobQueue::claim_jobs`] takes them.
    async fn claim_job(&self, req: &ClaimRequest<'_>) -> StoreResult<Option<ClaimedJob>> {
        Ok(self.claim_jobs(req, 1).await?.into_iter().next())
    }
    /// `false` when the worker no longer owns the job.
    async fn renew_lease(&self, job_id: Uuid, token: Uuid, until: DateTime<Utc>) -> StoreResult<bool>;
    /// Records the outcome (and the publish it commits) only while `token`
    /// still owns the job; `false` means the result was discarded.
    async fn finish_job(&self, claimed: &ClaimedJob, finish: &JobFinish) -> StoreResult<bool> {
        Ok(self.finish_jobs(&[(claimed, finish)]).await?.pop().unwrap_or(false))
    }
    /// Several finishes in one transaction (a group commit): each recorded
    /// as [`JobQueue::finish_job`] records it, in order, or, on an error,
    /// none of them.
    async fn finish_jobs(&self, batch: &[(&ClaimedJob, &JobFinish)]) -> StoreResult<Vec<bool>>;
    /// Gives a job back to the queue untouched (shutdown): another replica
    /// takes it at once, and the attempt does not count.
    async fn release_job(&self, job_id: Uuid, token: Uuid) -> StoreResult<bool>;
    /// `POST /v1/jobs/{id}/retry`; `None` for an unknown job.
    async fn retry_job(&self, tenant: TenantId, job_id: Uuid) -> StoreResult<Option<RetryOutcome>>;
    /// Some worker holds the job under a lease that has not expired: its
    /// temporary files may still be renamed into place.
    async fn job_lease_live(&self, job_id: Uuid, now: DateTime<Utc>) -> StoreResult<bool>;
    /// The job is queued or running (its inputs are still needed).
    async fn job_pending(&self, job_id: Uuid) -> StoreResult<bool>;
    /// Whether a staged publish of `job_id` was committed, may still be, or never will.
    async fn publish_decision(
        &self,
        job_id: Uuid,
        publish_id: Uuid,
        now: DateTime<Utc>,
    ) -> StoreResult<PublishDecision>;
    /// Queues an eager phase one (SPEC §5) for each rollout of an open
    /// session that has had no segment since `idle_since`, holds more than
    /// its raw memory was made from, and has no phase one waiting or an eager
    /// one made since its last segment; at most `limit`. Returns the jobs.
    async fn queue_eager_phase_one(&self, idle_since: DateTime<Utc>, limit: i64) -> StoreResult<Vec<JobRecord>>;
    /// `(kind, state, count)` of the queued and running jobs: the queue's depth.
    async fn job_counts(&self) -> StoreResult<Vec<(String, String, i64)>>;
    /// Running jobs whose lease has not expired at `now`: a worker may still write.
    async fn leased_jobs(&self, now: DateTime<Utc>) -> StoreResult<i64>;
    /// One tenant's jobs, all of them counted: by kind and state, and those
    /// that failed after `failed_after`.
    async fn tenant_job_counts(&self, tenant: TenantId, failed_after: DateTime<Utc>) -> StoreResult<TenantJobCounts>;
}

/// The raw-memory index and phase two's selections and runs.
#[async_trait]
pub trait MemoryIndex: Send + Sync {
    async fn raw_memory(
        &self,
        tenant: TenantId,
        workspace: &WorkspaceName,
        layout: &LayoutName,
        rollout: &RolloutId,
    ) -> StoreResult<Option<RawMemoryRecord>>;
    /// The newest `limit` raw memories of a layout in a workspace (R-P2-2:
    /// newest `updated_at` first as instants, unknown last, ties by rollout id
    /// descending): phase two's selection.
    async fn newest_raw_memories(
        &self,
        tenant: TenantId,
        workspace: &WorkspaceName,
        layout: &LayoutName,
        limit: usize,
    ) -> StoreResult<Vec<RawMemoryRecord>>;
    /// The last successful selection document, if any.
    async fn phase_two_selection(
        &self,
        tenant: TenantId,
        workspace: &WorkspaceName,
        layout: &LayoutName,
    ) -> StoreResult<Option<Value>>;
    /// Phase-two runs, newest first, one page.
    async fn phase_two_runs(
        &self,
        tenant: TenantId,
        workspace: &WorkspaceName,
        layout: &LayoutName,
        page: &PageRequest,
    ) -> StoreResult<Vec<PhaseTwoRun>>;
    /// Index rows for raw memory files that are already on disk (written by
    /// the SDK or another tool); their job id is the nil UUID.
    async fn import_raw_memories(
        &self,
        tenant: TenantId,
        workspace: &WorkspaceName,
        layout: &LayoutName,
        records: &[RawMemoryRecord],
    ) -> StoreResult<()>;
}

/// Memory history: what each kept run changed, and the files as they were.
#[async_trait]
pub trait RunHistoryStore: Send + Sync {
    async fn phase_two_run(
        &self,
        tenant: TenantId,
        workspace: &WorkspaceName,
        layout: &LayoutName,
        run_id: Uuid,
    ) -> StoreResult<Option<PhaseTwoRun>>;
    /// Whether a forget of the layout succeeded after `run_id` finished
    /// (a forget drops the history recorded before it).
    async fn forgotten_since(
        &self,
        tenant: TenantId,
        workspace: &WorkspaceName,
        layout: &LayoutName,
        run_id: Uuid,
    ) -> StoreResult<bool>;
    /// The files a run changed; `None` when its history is not kept.
    async fn run_files(&self, tenant: TenantId, run_id: Uuid) -> StoreResult<Option<Vec<RunFileRecord>>>;
    async fn history_blob(&self, tenant: TenantId, hash: &str) -> StoreResult<Option<Vec<u8>>>;
    /// Queues a restore of the layout's memory to what `run` left, with the
    /// layout's current config; `None` when the run's history is not kept.
    async fn queue_restore(
        &self,
        tenant: TenantId,
        run: &PhaseTwoRun,
        workspace: &WorkspaceName,
        layout_name: &LayoutName,
        layout: &ValidLayout,
    ) -> StoreResult<Option<JobRecord>>;
    /// The paths (relative to the memory folder) any kept run of the layout changed.
    async fn history_paths(
        &self,
        tenant: TenantId,
        workspace: &WorkspaceName,
        layout: &LayoutName,
    ) -> StoreResult<Vec<String>>;
    /// `path` (relative to the memory folder) as it was right after the run.
    async fn file_after_run(
        &self,
        tenant: TenantId,
        workspace: &WorkspaceName,
        layout: &LayoutName,
        run_id: Uuid,
        path: &str,
    ) -> StoreResult<FileAtRun>;
}

/// Forgetting and retention (SPEC §2.7). A forget is queued here and runs
/// as a job; its fenced finish erases the rows of what it removed.
#[async_trait]
pub trait ForgetStore: Send + Sync {
    /// Queues a forget of conversations of one layout in one workspace (or
    /// returns the one already queued or running for them). The rollouts are
    /// marked so that they take no more segments.
    async fn queue_forget_rollouts(
        &self,
        tenant: TenantId,
        workspace: &WorkspaceName,
        layout_name: &LayoutName,
        layout: &ValidLayout,
        rollouts: &[RolloutId],
        mode: crate::domain::job::ForgetMode,
    ) -> StoreResult<ForgetQueued>;
    /// Ends the workspace's sessions, cancels its jobs and queues its forget;
    /// `None` for a workspace the tenant never used.
    async fn queue_forget_workspace(
        &self,
        tenant: TenantId,
        workspace: &WorkspaceName,
    ) -> StoreResult<Option<JobRecord>>;
    /// Revokes the tenant's keys, ends its sessions, cancels its jobs and
    /// queues its forget; `None` for an unknown tenant.
    async fn queue_forget_tenant(&self, tenant: TenantId) -> StoreResult<Option<JobRecord>>;
    /// A forget of the workspace is queued or running.
    async fn workspace_forgetting(&self, tenant: TenantId, workspace: &WorkspaceName) -> StoreResult<bool>;
    /// After a forget, leaves no copy of deleted rows in the database's
    /// files where the database can promise it (SQLite: truncates the WAL).
    async fn compact_after_forget(&self) -> StoreResult<()>;
    /// Deletes at most `batch` idempotency keys made before `before` (with
    /// the rollouts a batch's key lists).
    async fn expire_idempotency_keys(&self, before: DateTime<Utc>, batch: i64) -> StoreResult<u64>;
    /// Deletes at most `batch` finished jobs and `batch` closed sessions that
    /// ended before `before`: records only, never memory.
    async fn expire_records(&self, before: DateTime<Utc>, batch: i64) -> StoreResult<u64>;
    /// Queues a scrub forget per layout and workspace of the rollouts idle
    /// past their layout's retention (`default_days` where it sets none).
    async fn queue_retention_forgets(&self, now: DateTime<Utc>, default_days: f64) -> StoreResult<Vec<JobRecord>>;
}

/// What tenants use (SPEC §2.9): storage kept up to date by the
/// transactions that change it, counters per UTC day, token budgets.
#[async_trait]
pub trait UsageStore: Send + Sync {
    /// The bytes the tenant keeps: its workspaces' files and its history.
    async fn storage_bytes(&self, tenant: TenantId) -> StoreResult<i64>;
    /// The tenant's counters from `from` to `to` (`YYYY-MM-DD`, inclusive).
    async fn usage_history(&self, tenant: TenantId, from: &str, to: &str) -> StoreResult<UsageHistory>;
    /// Every tenant's storage by scope, for the reconciling walk.
    async fn storage_scopes(&self) -> StoreResult<Vec<StorageScope>>;
    /// Where files live in a bucket, the database is what readers see: each
    /// workspace's counted bytes beside its rollouts' committed lengths and
    /// its current files' bytes, read in one snapshot.
    async fn storage_as_recorded(&self) -> StoreResult<Vec<(StorageScope, i64)>>;
    /// Sets a scope's bytes to what a walk found, unless they changed since
    /// `seen` was read (the walk may have missed that change); `false` then.
    async fn correct_storage(&self, scope: &StorageScope, actual: i64) -> StoreResult<bool>;
    /// The tenant's history bytes, counted again from the database.
    async fn recount_history(&self, tenant: TenantId) -> StoreResult<()>;
    /// Holds the tenant's model jobs until the next UTC midnight when its
    /// tokens of the day reach `limit`, and releases them otherwise (a
    /// limit raised or removed). Returns the hold's end.
    async fn apply_token_budget(
        &self,
        tenant: TenantId,
        limit: Option<u64>,
        now: DateTime<Utc>,
    ) -> StoreResult<Option<DateTime<Utc>>>;
    /// When the tenant's model jobs may run again, if they are held now.
    async fn model_budget_hold(&self, tenant: TenantId, now: DateTime<Utc>) -> StoreResult<Option<DateTime<Utc>>>;
}

/// The whole store.
#[async_trait]
pub trait Store:
    TenantStore
    + LayoutStore
    + SessionStore
    + JobQueue
    + MemoryIndex
    + RunHistoryStore
    + ForgetStore
    + UsageStore
    + PortabilityStore
    + EventStore
    + AgentMemoryStore
    + PassageVectorStore
    + RolloutJournalStore
    + WorkspaceFilesStore
    + 'static
{
    async fn ping(&self) -> StoreResult<()>;
    /// Write transactions of this store run one at a time (SQLite).
    fn one_writer(&self) -> bool;
    /// Vacuums the tables every job, append and close writes that carry more
    /// than `floor` dead row versions (Postgres: a queue row leaves one at
    /// every state it moves through, and every later scan walks past them
    /// until a vacuum), whether or not the server's autovacuum runs. The
    /// tables vacuumed, with the dead versions each had.
    async fn reclaim_dead_rows(&self, floor: i64) -> StoreResult<Vec<(String, i64)>>;
}

pub type DynStore = Arc<dyn Store>;

/// The longest pause between two tries of a database that cannot be reached.
const MOST_DATABASE_PAUSE: std::time::Duration = std::time::Duration::from_secs(5);

/// Opens the store as [`connect`] does, waiting up to `wait` for a Postgres
/// that cannot be reached yet — refused, not resolvable, starting up: a
/// replica started before its database, as in every rollout — and saying
/// each time what it waits for. Any other failure, and any SQLite failure
/// (a file in the data dir: nothing to wait for), stops the start at once.
pub async fn connect_waiting(database_url: &str, wait: std::time::Duration) -> StoreResult<DynStore> {
    let wait = if database_url.starts_with("sqlite:") { std::time::Duration::ZERO } else { wait };
    let started = std::time::Instant::now();
    let mut pause = std::time::Duration::from_millis(250);
    loop {
        match connect(database_url).await {
            Err(e) if e.failure() == Failure::Unavailable && started.elapsed() + pause <= wait => {
                tracing::warn!(
                    error = %crate::error_chain(&e),
                    waited_secs = started.elapsed().as_secs(),
                    retry_in_ms = u64::try_from(pause.as_millis()).unwrap_or(u64::MAX),
                    "waiting for the database"
                );
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(MOST_DATABASE_PAUSE);
            }
            opened => return opened,
        }
    }
}

/// Opens the store named by `database_url` and applies its migrations.
pub async fn connect(database_url: &str) -> StoreResult<DynStore> {
    if database_url.starts_with("postgres://") || database_url.starts_with("postgresql://") {
        Ok(Arc::new(postgres::connect(database_url).await?))
    } else if database_url.starts_with("sqlite:") {
        Ok(Arc::new(sqlite::connect(database_url).await?))
    } else {
        Err(StoreError::Corrupt("DATABASE_URL must start with postgres://, postgresql:// or sqlite:".into()))
    }
}

pub(crate) fn parse_layout_config(text: &str) -> StoreResult<ValidLayout> {
    let config = serde_json::from_str(text).map_err(|e| StoreError::Corrupt(format!("stored layout config: {e}")))?;
    ValidLayout::new(config).map_err(StoreError::Corrupt)
}

pub(crate) fn parse_id<T>(parse: fn(&str) -> Option<T>, s: &str, what: &str) -> StoreResult<T> {
    parse(s).ok_or_else(|| StoreError::Corrupt(format!("stored {what} {s:?} is not valid")))
}

/// The stored answer to an idempotency key, or a conflict when the key came
/// with another request.
pub(crate) fn replay_or_conflict(
    claim: &IdempotencyClaim,
    stored_hash: String,
    stored_response: Option<String>,
) -> StoreResult<AppendOutcome> {
    if stored_hash != claim.request_hash {
        return Ok(AppendOutcome::IdempotencyConflict);
    }
    let response =
        stored_response.ok_or_else(|| StoreError::Corrupt("committed idempotency key without a response".into()))?;
    Ok(AppendOutcome::Replayed(serde_json::from_str(&response).map_err(|e| StoreError::Corrupt(e.to_string()))?))
}
