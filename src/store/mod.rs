//! The store: one interface over the state memoryd keeps in a database, with a
//! Postgres implementation for production and an embedded SQLite one for a
//! single replica. Both run the same tests.

mod postgres;
mod sql;
mod sqlite;

pub use postgres::PgStore;
pub use sql::{Dialect, SqlStore};
pub use sqlite::SqliteStore;

use crate::domain::ids::{LayoutName, RolloutId, SessionId, WorkspaceName};
use crate::domain::layout::{LayoutPutError, ValidLayout};
use crate::domain::segment::Segment;
use crate::workspace::Volumes;
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;
use std::sync::Arc;
use uuid::Uuid;

pub type TenantId = Uuid;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),
    #[error("migration failed: {0}")]
    Migration(String),
    #[error("workspace I/O failed: {0}")]
    Io(#[from] std::io::Error),
    #[error("workspace path refused: {0}")]
    Path(#[from] crate::workspace::PathError),
    #[error("stored data is inconsistent: {0}")]
    Corrupt(String),
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
            Self::Io(e) | Self::Path(crate::workspace::PathError::Io(e)) => io_failure(e),
            _ => Failure::Other,
        }
    }
}

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
                // class 08 connection failures, 57P0x the server stopping or starting.
                return match code.as_ref() {
                    "53100" => Failure::StorageFull,
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

#[derive(Debug, Clone, Serialize)]
pub struct Tenant {
    pub tenant_id: TenantId,
    pub name: String,
    pub created_at: DateTime<Utc>,
}

/// An API key as stored: only the SHA-256 of the secret.
#[derive(Debug, Clone)]
pub struct NewApiKey {
    pub key_id: Uuid,
    pub tenant_id: TenantId,
    pub key_hash: String,
}

#[derive(Debug, Clone)]
pub struct StoredLayout {
    pub name: LayoutName,
    pub layout: ValidLayout,
    pub updated_at: Option<DateTime<Utc>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PutLayoutOutcome {
    Created,
    Unchanged,
    Replaced,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SessionState {
    Open,
    Closing,
    Closed,
}

impl SessionState {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Open => "open",
            Self::Closing => "closing",
            Self::Closed => "closed",
        }
    }

    pub fn parse(s: &str) -> StoreResult<Self> {
        match s {
            "open" => Ok(Self::Open),
            "closing" => Ok(Self::Closing),
            "closed" => Ok(Self::Closed),
            other => Err(StoreError::Corrupt(format!("unknown session state {other}"))),
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct SessionRecord {
    pub session_id: SessionId,
    pub workspace: WorkspaceName,
    pub state: SessionState,
    pub metadata: Value,
    pub memory_status: Option<Value>,
    pub created_at: DateTime<Utc>,
    pub closed_at: Option<DateTime<Utc>>,
}

#[derive(Debug, Clone, Serialize)]
pub struct TouchedRollout {
    pub layout: LayoutName,
    pub rollout_id: RolloutId,
    pub segment_count: i64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum JobKind {
    PhaseOne,
    PhaseTwo,
}

impl JobKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::PhaseOne => "phase_one",
            Self::PhaseTwo => "phase_two",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "phase_one" => Some(Self::PhaseOne),
            "phase_two" => Some(Self::PhaseTwo),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum JobState {
    Queued,
    Running,
    Succeeded,
    Skipped,
    Failed,
}

impl JobState {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Queued => "queued",
            Self::Running => "running",
            Self::Succeeded => "succeeded",
            Self::Skipped => "skipped",
            Self::Failed => "failed",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "queued" => Some(Self::Queued),
            "running" => Some(Self::Running),
            "succeeded" => Some(Self::Succeeded),
            "skipped" => Some(Self::Skipped),
            "failed" => Some(Self::Failed),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct JobRecord {
    pub job_id: Uuid,
    pub kind: JobKind,
    pub state: JobState,
    pub session_id: SessionId,
    pub workspace: WorkspaceName,
    pub layout: LayoutName,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rollout_id: Option<RolloutId>,
    pub attempts: i64,
    pub run_after: DateTime<Utc>,
    pub last_error: Option<String>,
    pub usage: Option<Value>,
    pub created_at: DateTime<Utc>,
    pub started_at: Option<DateTime<Utc>>,
    pub finished_at: Option<DateTime<Utc>>,
}

#[derive(Debug, Clone, Serialize)]
pub struct SessionView {
    #[serde(flatten)]
    pub session: SessionRecord,
    pub rollouts: Vec<TouchedRollout>,
    pub jobs: Vec<JobRecord>,
}

#[derive(Debug, Clone, Default)]
pub struct JobFilter {
    pub state: Option<JobState>,
    pub kind: Option<JobKind>,
    pub session_id: Option<SessionId>,
}

#[derive(Debug, Clone)]
pub struct NewSession {
    pub session_id: SessionId,
    pub workspace: WorkspaceName,
    pub metadata: Value,
}

#[derive(Debug, Clone)]
pub enum CreateSessionOutcome {
    Created(SessionRecord),
    Existing(SessionRecord),
}

/// A client's `Idempotency-Key` and the hash of what it was sent with.
#[derive(Debug, Clone)]
pub struct IdempotencyClaim {
    pub key: String,
    pub request_hash: String,
}

pub struct AppendRequest<'a> {
    pub tenant_id: TenantId,
    pub session_id: &'a SessionId,
    /// `?workspace=`; `None` means the session's own (or `default` for a new one).
    pub workspace: Option<&'a WorkspaceName>,
    pub layout_name: &'a LayoutName,
    pub layout: &'a ValidLayout,
    pub segment: &'a Segment,
    pub idempotency: Option<&'a IdempotencyClaim>,
    pub volumes: &'a Volumes,
}

#[derive(Debug, Clone, Serialize)]
pub struct SegmentReceipt {
    pub session_id: SessionId,
    pub layout: LayoutName,
    pub rollout_id: RolloutId,
    pub segment_index: i64,
    pub rollout_path: String,
}

#[derive(Debug, Clone)]
pub enum AppendOutcome {
    /// `opened_session`: this segment opened the session.
    Appended {
        receipt: SegmentReceipt,
        opened_session: bool,
    },
    /// The first response to this idempotency key, returned again.
    Replayed(Value),
    IdempotencyConflict,
    SessionClosed(SessionState),
    WorkspaceMismatch(WorkspaceName),
}

#[derive(Debug, Clone)]
pub struct CloseOutcome {
    pub session: SessionRecord,
    pub jobs: Vec<JobRecord>,
    /// This call moved the session out of `open`.
    pub closed_now: bool,
}

/// The committed state of one rollout file.
#[derive(Debug, Clone)]
pub struct CommittedRollout {
    pub rollout_path: String,
    pub committed_len: u64,
    pub segment_count: i64,
}

/// What a worker asks the queue for.
#[derive(Debug, Clone)]
pub struct ClaimRequest<'a> {
    pub worker: &'a str,
    pub kinds: &'a [JobKind],
    pub now: DateTime<Utc>,
    pub lease: chrono::Duration,
}

/// A job a worker owns until its lease runs out; `token` fences every write.
#[derive(Debug, Clone)]
pub struct ClaimedJob {
    pub job: JobRecord,
    pub tenant_id: TenantId,
    /// The layout config the job was queued with.
    pub layout: ValidLayout,
    pub token: Uuid,
    /// A smaller phase-one budget after a context-window overflow.
    pub token_limit: Option<i64>,
}

/// The index row of one raw memory (the header of its file, and the
/// rollout file length it was extracted from).
#[derive(Debug, Clone, PartialEq)]
pub struct RawMemoryRecord {
    pub rollout_id: RolloutId,
    pub updated_at: String,
    pub rollout_path: String,
    pub rollout_summary_file: String,
    pub terminal_state: String,
    pub extracted_len: u64,
}

#[derive(Debug, Clone)]
pub enum JobOutcome {
    Succeeded { raw_memory: Option<RawMemoryRecord> },
    Skipped,
    RetryAt { at: DateTime<Utc>, error: String, token_limit: Option<i64> },
    Failed { error: String },
}

/// What became of a staged publish (see `workspace::publish`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PublishDecision {
    /// The job's fenced finish recorded it: complete it.
    Committed,
    /// Its job is still held under a live lease: its owner may yet commit it.
    Pending,
    /// It will never be recorded: undo it.
    Abandoned,
}

/// One phase-two attempt, as `GET …/runs` shows it.
#[derive(Debug, Clone, Serialize)]
pub struct PhaseTwoRun {
    pub run_id: Uuid,
    pub job_id: Uuid,
    pub session_id: String,
    pub state: String,
    pub selected: i64,
    pub added: i64,
    pub retained: i64,
    pub removed: i64,
    pub files_changed: Vec<String>,
    pub usage: Value,
    pub turns: i64,
    pub error: Option<String>,
    pub started_at: DateTime<Utc>,
    pub finished_at: DateTime<Utc>,
}

/// What a phase-two attempt leaves in the database: its run record and, on
/// success, the new selection document (SPEC §2.4).
#[derive(Debug, Clone)]
pub struct PhaseTwoReport {
    pub run: PhaseTwoRun,
    pub selection: Option<Value>,
}

pub struct JobFinish {
    pub outcome: JobOutcome,
    pub phase_two: Option<PhaseTwoReport>,
    /// The job's token usage over all its attempts so far.
    pub usage: Value,
    /// The staged publish this finish makes visible, recorded with the outcome.
    pub publish_id: Option<Uuid>,
}

#[derive(Debug, Clone)]
pub enum RetryOutcome {
    Requeued(Box<JobRecord>),
    NotFailed(JobState),
}

#[async_trait]
pub trait Store: Send + Sync + 'static {
    async fn ping(&self) -> StoreResult<()>;

    async fn create_tenant(&self, name: &str, key: &NewApiKey) -> StoreResult<Tenant>;
    /// `false` when the tenant does not exist.
    async fn create_api_key(&self, key: &NewApiKey) -> StoreResult<bool>;
    /// `false` when no live key has that id.
    async fn revoke_api_key(&self, key_id: Uuid) -> StoreResult<bool>;
    async fn tenant_for_key_hash(&self, key_hash: &str) -> StoreResult<Option<TenantId>>;

    /// The stored layouts; the implicit default is added by the caller.
    async fn stored_layouts(&self, tenant: TenantId) -> StoreResult<Vec<StoredLayout>>;
    async fn put_layout(
        &self,
        tenant: TenantId,
        name: &LayoutName,
        layout: &ValidLayout,
        if_match: Option<&str>,
    ) -> StoreResult<Result<PutLayoutOutcome, LayoutPutError>>;

    async fn create_session(&self, tenant: TenantId, new: &NewSession) -> StoreResult<CreateSessionOutcome>;
    async fn session_view(&self, tenant: TenantId, id: &SessionId) -> StoreResult<Option<SessionView>>;
    async fn session_state(&self, tenant: TenantId, id: &SessionId) -> StoreResult<Option<SessionState>>;
    /// Durable append: the line is on disk and recorded before this returns `Appended`.
    async fn append_segment(&self, req: AppendRequest<'_>) -> StoreResult<AppendOutcome>;
    /// `None` for an unknown session. Moves an open session to `closing` and
    /// queues its jobs in one transaction; idempotent afterwards.
    async fn close_session(&self, tenant: TenantId, id: &SessionId) -> StoreResult<Option<CloseOutcome>>;

    async fn list_jobs(&self, tenant: TenantId, filter: &JobFilter) -> StoreResult<Vec<JobRecord>>;
    async fn get_job(&self, tenant: TenantId, job_id: Uuid) -> StoreResult<Option<JobRecord>>;

    async fn committed_rollout(
        &self,
        tenant: TenantId,
        workspace: &WorkspaceName,
        layout: &LayoutName,
        rollout: &RolloutId,
    ) -> StoreResult<Option<CommittedRollout>>;

    /// Takes the next due job (or one whose lease expired) of `kinds`,
    /// preferring tenants with the fewest running jobs. Phase two waits for
    /// its close's phase-one jobs and runs alone per layout.
    async fn claim_job(&self, req: &ClaimRequest<'_>) -> StoreResult<Option<ClaimedJob>>;
    /// `false` when the worker no longer owns the job.
    async fn renew_lease(&self, job_id: Uuid, token: Uuid, until: DateTime<Utc>) -> StoreResult<bool>;
    /// Records the outcome (and the publish it commits) only while `token`
    /// still owns the job; `false` means the result was discarded.
    async fn finish_job(&self, claimed: &ClaimedJob, finish: JobFinish) -> StoreResult<bool>;
    /// Gives a job back to the queue untouched (shutdown): another replica
    /// takes it at once, and the attempt does not count.
    async fn release_job(&self, job_id: Uuid, token: Uuid) -> StoreResult<bool>;
    /// `POST /v1/jobs/{id}/retry`; `None` for an unknown job.
    async fn retry_job(&self, tenant: TenantId, job_id: Uuid) -> StoreResult<Option<RetryOutcome>>;
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
    /// Phase-two runs, newest first.
    async fn phase_two_runs(
        &self,
        tenant: TenantId,
        workspace: &WorkspaceName,
        layout: &LayoutName,
        limit: i64,
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
    /// Closes a `closing` session once none of its jobs is queued or running.
    /// Workers call it after a job's outcome is committed and its files are
    /// published, so the last job to finish always sees every other one
    /// finished; `settle_finished_sessions` covers a process that died between.
    async fn settle_session(&self, tenant: TenantId, session_id: &SessionId) -> StoreResult<()>;
    /// Closes `closing` sessions whose jobs have all finished but which were
    /// not settled (their last worker died between commit and settle).
    async fn settle_finished_sessions(&self) -> StoreResult<usize>;
    /// Some worker holds the job under a lease that has not expired: its
    /// temporary files may still be renamed into place.
    async fn job_lease_live(&self, job_id: Uuid, now: DateTime<Utc>) -> StoreResult<bool>;
    /// Whether a staged publish of `job_id` was committed, may still be, or never will.
    async fn publish_decision(
        &self,
        job_id: Uuid,
        publish_id: Uuid,
        now: DateTime<Utc>,
    ) -> StoreResult<PublishDecision>;
    /// `(kind, state, count)` of every job in the database: the queue's depth.
    async fn job_counts(&self) -> StoreResult<Vec<(String, String, i64)>>;
    /// `default` always; another workspace once a session has used it.
    async fn workspace_known(&self, tenant: TenantId, workspace: &WorkspaceName) -> StoreResult<bool>;
}

pub type DynStore = Arc<dyn Store>;

/// Opens the store named by `database_url` and applies its migrations.
pub async fn connect(database_url: &str) -> StoreResult<DynStore> {
    if database_url.starts_with("postgres://") || database_url.starts_with("postgresql://") {
        Ok(Arc::new(postgres::connect(database_url).await?))
    } else if database_url.starts_with("sqlite:") {
        Ok(Arc::new(sqlite::connect(database_url).await?))
    } else {
        Err(StoreError::Migration("DATABASE_URL must start with postgres://, postgresql:// or sqlite:".into()))
    }
}

/// Migrations are SQL files embedded at build time, applied in order, each
/// once; the applied versions are kept in `memoryd_migrations`.
pub struct Migration {
    pub version: i64,
    pub sql: &'static str,
}

/// The layout a job or segment uses: a stored one or the implicit default.
pub fn resolve_layout(stored: Vec<StoredLayout>, name: &LayoutName) -> Option<ValidLayout> {
    stored
        .into_iter()
        .find(|l| &l.name == name)
        .map(|l| l.layout)
        .or_else(|| (name == &LayoutName::default_layout()).then(default_layout))
}

pub fn default_layout() -> ValidLayout {
    ValidLayout::new(Default::default()).expect("the default layout is valid")
}

/// Every layout of a tenant, the implicit default included (SPEC §1).
pub fn with_implicit_default(mut stored: Vec<StoredLayout>) -> Vec<StoredLayout> {
    let default_name = LayoutName::default_layout();
    if !stored.iter().any(|l| l.name == default_name) {
        stored.insert(0, StoredLayout { name: default_name, layout: default_layout(), updated_at: None });
    }
    stored
}

/// `rollout_path` as the SDK prints it (R-P1-11): normalised sessions dir and file.
pub fn rollout_path(layout: &ValidLayout, rollout: &RolloutId) -> String {
    format!("{}/{}", layout.sessions_dir.normalized, rollout.file_name())
}

pub(crate) fn parse_layout_config(text: &str) -> StoreResult<ValidLayout> {
    let config = serde_json::from_str(text).map_err(|e| StoreError::Corrupt(format!("stored layout config: {e}")))?;
    ValidLayout::new(config).map_err(StoreError::Corrupt)
}

pub(crate) fn parse_id<T>(parse: fn(&str) -> Option<T>, s: &str, what: &str) -> StoreResult<T> {
    parse(s).ok_or_else(|| StoreError::Corrupt(format!("stored {what} {s:?} is not valid")))
}

/// Where a close leaves a session: closed at once when it touched nothing,
/// otherwise closing until its jobs finish.
pub(crate) struct CloseTransition {
    pub state: SessionState,
    pub memory_status: Option<Value>,
    pub closed_at: Option<DateTime<Utc>>,
}

pub(crate) fn close_transition(touched_nothing: bool, now: DateTime<Utc>) -> CloseTransition {
    if touched_nothing {
        CloseTransition {
            state: SessionState::Closed,
            memory_status: Some(settled_memory_status(Vec::new())),
            closed_at: Some(now),
        }
    } else {
        CloseTransition { state: SessionState::Closing, memory_status: None, closed_at: None }
    }
}

/// A session's state once none of its jobs is left to run (SPEC §2.3).
pub(crate) fn settled_memory_status(failures: Vec<Value>) -> Value {
    let status = if failures.is_empty() { "complete" } else { "partial" };
    serde_json::json!({"status": status, "failures": failures})
}

/// The jobs one close queues (SPEC §2.3): a phase-one job per touched rollout
/// and layout, and a phase-two job per touched layout.
pub(crate) fn jobs_for_close(touched: &[TouchedRollout]) -> Vec<(JobKind, LayoutName, Option<RolloutId>)> {
    let mut jobs = Vec::new();
    let mut layouts: Vec<&LayoutName> = Vec::new();
    for t in touched {
        jobs.push((JobKind::PhaseOne, t.layout.clone(), Some(t.rollout_id.clone())));
        if !layouts.contains(&&t.layout) {
            layouts.push(&t.layout);
        }
    }
    for layout in layouts {
        jobs.push((JobKind::PhaseTwo, layout.clone(), None));
    }
    jobs
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
