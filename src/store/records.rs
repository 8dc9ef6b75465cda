//! The records the store takes and gives: plain data.

use super::{StoreResult, TenantId};
use crate::domain::ids::{LayoutName, RolloutId, SessionId, WorkspaceName};
use crate::domain::job::{JobKind, JobState, SessionState};
use crate::domain::layout::ValidLayout;
use crate::domain::segment::Segment;
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;
use uuid::Uuid;

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

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PutLayoutOutcome {
    Created,
    Unchanged,
    Replaced,
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
    /// For a phase-two job: the sessions whose closes it serves.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub sessions: Vec<String>,
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

/// Where a segment goes, decided and locked by `begin_append`: the line is
/// written at `committed_len` of the rollout file at `rollout_path`.
#[derive(Debug, Clone)]
pub struct AppendPosition {
    pub workspace: WorkspaceName,
    pub rollout_path: String,
    pub committed_len: u64,
    pub segment_index: i64,
    /// This segment opens the session.
    pub opened_session: bool,
}

/// An append under way: its rollout's row is locked (across replicas) until
/// the slot is committed or dropped (which rolls it back).
#[async_trait]
pub trait AppendSlot: Send {
    fn position(&self) -> &AppendPosition;
    /// Records the line written (the file is now `new_len` bytes long) and
    /// the answer for its idempotency key, and releases the lock.
    async fn commit(self: Box<Self>, new_len: u64, receipt: &SegmentReceipt) -> StoreResult<()>;
}

/// What `begin_append` found.
pub enum AppendStart<'s> {
    /// Nothing is to be written: a replay, a conflict, a closed session.
    Done(AppendOutcome),
    /// Write the line, then commit the slot.
    Write(Box<dyn AppendSlot + 's>),
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
    /// The sessions whose closes the run served.
    pub sessions: Vec<String>,
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
