//! The records of appends and closes: what a segment's append takes and
//! gives, and the batch that holds its rows locked until it commits.

use super::{JobRecord, SessionRecord, StoreResult, TenantId};
use crate::domain::ids::{LayoutName, RolloutId, SessionId, WorkspaceName};
use crate::domain::job::SessionState;
use crate::domain::layout::ValidLayout;
use crate::domain::segment::Segment;
use async_trait::async_trait;
use serde::Serialize;
use serde_json::Value;

#[derive(Debug, Clone)]
pub struct NewSession {
    pub session_id: SessionId,
    pub workspace: WorkspaceName,
    pub metadata: Value,
    /// The tenant's `open_sessions` limit, if any.
    pub max_open: Option<u64>,
}

#[derive(Debug, Clone)]
pub enum CreateSessionOutcome {
    Created(SessionRecord),
    Existing(SessionRecord),
    /// The workspace is being forgotten: no session opens there until it is done.
    Forgetting,
    /// The tenant has as many open sessions as its limit allows.
    TooManyOpen(u64),
}

/// A client's `Idempotency-Key` and the hash of what it was sent with.
#[derive(Debug, Clone)]
pub struct IdempotencyClaim {
    pub key: String,
    pub request_hash: String,
}

pub struct AppendRequest {
    pub tenant_id: TenantId,
    pub session_id: SessionId,
    /// `?workspace=`; `None` means the session's own (or `default` for a new one).
    pub workspace: Option<WorkspaceName>,
    pub layout_name: LayoutName,
    pub layout: ValidLayout,
    pub segment: Segment,
    pub idempotency: Option<IdempotencyClaim>,
    /// The tenant's `open_sessions` limit, if any: a segment may not open one more.
    pub max_open_sessions: Option<u64>,
    /// The tenant's `storage_bytes` limit, if any: a segment may not pass it.
    pub max_storage_bytes: Option<u64>,
}

#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
#[schemars(rename = "AppendedSegment")]
pub struct SegmentReceipt {
    /// The session's workspace (not part of the answer, which names the session).
    #[serde(skip)]
    pub workspace: WorkspaceName,
    pub session_id: SessionId,
    pub layout: LayoutName,
    pub rollout_id: RolloutId,
    /// 0-based within the rollout file.
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
    /// The workspace or the rollout is being forgotten (the detail says which).
    Forgetting(String),
    /// Opening the session would pass the tenant's `open_sessions` limit.
    TooManyOpenSessions(u64),
    /// The line would take the tenant's storage past this many bytes.
    StorageQuota(u64),
}

/// Where a segment goes, decided and locked by `begin_appends`: the line is
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

/// What `begin_appends` found for one append of a batch.
#[derive(Debug, Clone)]
pub enum AppendStart {
    /// Nothing is to be written: a replay, a conflict, a closed session.
    Done(AppendOutcome),
    /// Write the line here, then commit the batch.
    Write(AppendPosition),
}

/// A line for its rollout file, to be recorded by [`AppendBatch::record`].
#[derive(Debug, Clone)]
pub struct WrittenSegment {
    /// The append's place in the batch.
    pub request: usize,
    /// The rollout file's length with the line.
    pub new_len: u64,
    pub receipt: SegmentReceipt,
}

/// Appends under way in one transaction: their sessions' and rollouts' rows
/// are locked (across replicas) until the batch is committed or dropped
/// (which rolls all of it back).
#[async_trait]
pub trait AppendBatch: Send {
    /// What each append found, in the order they were given.
    fn starts(&self) -> &[AppendStart];
    /// Records every line (one for each `Write` start) and the answers for
    /// their idempotency keys, within the transaction: nothing of it counts
    /// before `commit`, so the lines may still be on their way to the disk.
    async fn record(&mut self, written: &[WrittenSegment]) -> StoreResult<()>;
    /// Commits what was recorded: all of it, or none.
    async fn commit(self: Box<Self>) -> StoreResult<()>;
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
