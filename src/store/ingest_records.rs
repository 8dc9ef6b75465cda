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

/// An append: one or more segments to one session, in order, all of them
/// acknowledged or none (SPEC §2.2: a single append is a batch of one).
pub struct AppendRequest {
    pub tenant_id: TenantId,
    pub session_id: SessionId,
    /// `?workspace=`; `None` means the session's own (or `default` for a new one).
    pub workspace: Option<WorkspaceName>,
    /// At least one.
    pub segments: Vec<SegmentAppend>,
    /// The answer an idempotency key keeps: a batch's or a single segment's.
    pub answer: AnswerShape,
    pub idempotency: Option<IdempotencyClaim>,
    /// The tenant's `open_sessions` limit, if any: a segment may not open one more.
    pub max_open_sessions: Option<u64>,
    /// The tenant's `storage_bytes` limit, if any: a segment may not pass it.
    pub max_storage_bytes: Option<u64>,
}

/// One segment of an append, with the layout it goes to.
pub struct SegmentAppend {
    pub layout_name: LayoutName,
    pub layout: ValidLayout,
    pub segment: Segment,
}

/// What the route answers, and so what an idempotency key replays.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AnswerShape {
    /// The segment's receipt.
    Single,
    /// [`BatchAnswer`].
    Batch,
}

impl AnswerShape {
    /// The route's answer for these receipts: what a 201 carries and an
    /// idempotency key keeps.
    pub fn answer(self, session_id: &SessionId, receipts: &[SegmentReceipt]) -> Value {
        match (self, receipts) {
            (AnswerShape::Single, [receipt]) => serde_json::to_value(receipt),
            _ => serde_json::to_value(BatchAnswer { session_id: session_id.clone(), receipts: receipts.to_vec() }),
        }
        .expect("a receipt always serialises")
    }
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

/// A batch's answer: each segment's receipt, in the batch's order.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
#[schemars(rename = "AppendedBatch")]
pub struct BatchAnswer {
    pub session_id: SessionId,
    pub receipts: Vec<SegmentReceipt>,
}

#[derive(Debug, Clone)]
pub enum AppendOutcome {
    /// Each segment's receipt, in order; `opened_session`: this append opened the session.
    Appended {
        receipts: Vec<SegmentReceipt>,
        opened_session: bool,
    },
    /// The first response to this idempotency key, returned again.
    Replayed(Value),
    IdempotencyConflict,
    SessionClosed(SessionState),
    WorkspaceMismatch(WorkspaceName),
    /// The workspace or a rollout is being forgotten (the detail says
    /// which); `index`: the first segment refused.
    Forgetting {
        detail: String,
        index: usize,
    },
    /// Opening the session would pass the tenant's `open_sessions` limit.
    TooManyOpenSessions(u64),
    /// The segment at `index` would take the tenant's storage past `limit` bytes.
    StorageQuota {
        limit: u64,
        index: usize,
    },
}

/// Where an append's segments go, decided and locked by `begin_appends`.
#[derive(Debug, Clone)]
pub struct AppendPosition {
    pub workspace: WorkspaceName,
    /// This append opens the session.
    pub opened_session: bool,
    /// Each segment's place, in the append's order.
    pub places: Vec<SegmentPlace>,
}

/// One segment's line: written at `offset` of its rollout file (the
/// committed length, plus the lines of this append before it in the same
/// file), and its receipt.
#[derive(Debug, Clone)]
pub struct SegmentPlace {
    pub offset: u64,
    pub receipt: SegmentReceipt,
}

/// What `begin_appends` found for one append of a group.
#[derive(Debug, Clone)]
pub enum AppendStart {
    /// Nothing is to be written: a replay, a conflict, a closed session.
    Done(AppendOutcome),
    /// Write the lines here, then commit the group.
    Write(AppendPosition),
}

/// Appends under way in one transaction: their sessions' and rollouts' rows
/// are locked (across replicas) until the group is committed or dropped
/// (which rolls all of it back).
#[async_trait]
pub trait AppendBatch: Send {
    /// What each append found, in the order they were given.
    fn starts(&self) -> &[AppendStart];
    /// Records every line of each `Write` start and the answers for their
    /// idempotency keys, within the transaction: nothing of it counts before
    /// `commit`, so the lines may still be on their way to the disk.
    async fn record(&mut self) -> StoreResult<()>;
    /// Keeps lines in the rollouts' journal, within the transaction: where
    /// rollouts live in an object store, this is what makes them durable.
    async fn journal(&mut self, lines: &[JournalLines]) -> StoreResult<()>;
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

/// One append's lines to one rollout, kept in its journal (SPEC §6.1).
#[derive(Debug, Clone)]
pub struct JournalLines {
    pub tenant: TenantId,
    pub workspace: String,
    pub layout: String,
    pub rollout_id: String,
    /// The rollout's length before these lines: where they start.
    pub start_len: u64,
    pub lines: std::sync::Arc<str>,
}

/// What a rollout in an object store is made of: its object's first
/// `object_len` bytes (of version `object_etag`; none before its first
/// rewrite), then its journal's lines, each `(start_len, lines)`, in order.
#[derive(Debug, Clone, PartialEq)]
pub struct RolloutParts {
    pub committed_len: u64,
    pub object_len: u64,
    pub object_etag: Option<String>,
    pub journal: Vec<(u64, Vec<u8>)>,
}

/// The committed state of one rollout file.
#[derive(Debug, Clone)]
pub struct CommittedRollout {
    pub rollout_path: String,
    pub committed_len: u64,
    pub segment_count: i64,
}
