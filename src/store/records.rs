//! The records the store takes and gives: plain data.

use super::{StoreResult, TenantId};
use crate::domain::ids::{LayoutName, RolloutId, SessionId, WorkspaceName};
use crate::domain::job::{ForgetSpec, JobKind, JobState, RunState, SessionState};
use crate::domain::key_scope::KeyScope;
use crate::domain::layout::ValidLayout;
use crate::domain::memory_status::MemoryStatus;
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
    pub name: Option<String>,
    pub scope: KeyScope,
    /// The key that made it (`None`: the tenant's first key, or the admin's).
    pub created_by: Option<Uuid>,
}

/// What became of a key to store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyCreated {
    Created,
    NoTenant,
    /// The tenant holds as many keys as it may.
    AtLimit,
    /// The key that would make it is revoked (or gone).
    MakerRevoked,
}

/// A live key as a request presents it: whose it is and what it reaches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthenticatedKey {
    pub key_id: Uuid,
    pub tenant_id: TenantId,
    pub scope: KeyScope,
}

/// A live key as its tenant lists it (never its secret).
#[derive(Debug, Clone)]
pub struct ApiKeyRecord {
    pub key_id: Uuid,
    pub name: Option<String>,
    pub scope: KeyScope,
    pub created_at: DateTime<Utc>,
    pub created_by: Option<Uuid>,
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
    pub memory_status: Option<MemoryStatus>,
    pub created_at: DateTime<Utc>,
    pub closed_at: Option<DateTime<Utc>>,
}

#[derive(Debug, Clone, Serialize)]
pub struct TouchedRollout {
    pub layout: LayoutName,
    pub rollout_id: RolloutId,
    pub segment_count: i64,
}

/// A tenant's jobs counted (the console's overview).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TenantJobCounts {
    /// `(kind, state, count)`, by kind then state.
    pub by_kind_and_state: Vec<(JobKind, JobState, i64)>,
    pub failed_recently: i64,
}

#[derive(Debug, Clone, Serialize)]
pub struct JobRecord {
    pub job_id: Uuid,
    pub kind: JobKind,
    pub state: JobState,
    /// The session whose close queued the job; `None` for a forget, which
    /// no close queues.
    pub session_id: Option<SessionId>,
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
    /// For a restore job: the run whose memory it puts back.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub restore_run_id: Option<Uuid>,
    /// A phase one made early, for a rollout idle in an open session.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub eager: bool,
    /// For a forget job: what it forgets, and how.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub forget: Option<ForgetSpec>,
    /// Secrets redacted by the job (SPEC §4), by rule.
    pub redactions: crate::domain::redact::Counts,
    /// For an edit job: the edit, until it is published (never shown: it
    /// may be a megabyte of text).
    #[serde(skip)]
    pub edit: Option<Box<crate::domain::memory_edit::MemoryEdit>>,
}

#[derive(Debug, Clone, Serialize)]
pub struct SessionView {
    #[serde(flatten)]
    pub session: SessionRecord,
    /// Why a closing session's jobs are not running: `model_budget`, its
    /// tenant's tokens of the day are spent (SPEC §2.9).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub waiting: Option<&'static str>,
    pub rollouts: Vec<TouchedRollout>,
    pub jobs: Vec<JobRecord>,
}

/// A tenant as the admin listing shows it.
#[derive(Debug, Clone, Serialize)]
pub struct TenantSummary {
    pub tenant_id: TenantId,
    pub name: String,
    pub created_at: DateTime<Utc>,
    /// Keys not revoked.
    pub keys: i64,
    pub sessions: i64,
    /// `active`, or `deleting` while a forget of the tenant runs.
    pub state: &'static str,
}

/// What the store knows of a tenant's workspaces: sessions per workspace,
/// and the layouts with rollouts in each.
#[derive(Debug, Clone, Default)]
pub struct WorkspaceActivity {
    /// `(workspace, sessions, newest session's creation)`
    pub sessions: Vec<(String, i64, Option<DateTime<Utc>>)>,
    /// `(workspace, layout, newest append)`
    pub layouts: Vec<(String, String, Option<DateTime<Utc>>)>,
    /// `(workspace, when an import made it)`
    pub imported: Vec<(String, Option<DateTime<Utc>>)>,
}

/// One entry of `GET /v1/workspaces`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WorkspaceSummary {
    pub name: String,
    /// Layouts with rollouts in this workspace, by name.
    pub layouts: Vec<String>,
    pub sessions: i64,
    /// The newest session's creation or append, whichever is later.
    pub updated_at: Option<DateTime<Utc>>,
}

impl WorkspaceActivity {
    /// One entry per workspace, by name; `default` is always there.
    pub fn summaries(self) -> Vec<WorkspaceSummary> {
        let mut by_name = std::collections::BTreeMap::<String, WorkspaceSummary>::new();
        for (name, sessions, newest) in self.sessions {
            let summary = by_name.entry(name.clone()).or_insert_with(|| WorkspaceSummary::empty(name));
            summary.sessions = sessions;
            summary.updated_at = summary.updated_at.max(newest);
        }
        for (name, layout, newest) in self.layouts {
            let summary = by_name.entry(name.clone()).or_insert_with(|| WorkspaceSummary::empty(name));
            summary.layouts.push(layout);
            summary.updated_at = summary.updated_at.max(newest);
        }
        for (name, created) in self.imported {
            let summary = by_name.entry(name.clone()).or_insert_with(|| WorkspaceSummary::empty(name));
            summary.updated_at = summary.updated_at.max(created);
        }
        by_name.entry("default".into()).or_insert_with(|| WorkspaceSummary::empty("default".into()));
        by_name
            .into_values()
            .map(|mut s| {
                s.layouts.sort();
                s
            })
            .collect()
    }
}

impl WorkspaceSummary {
    fn empty(name: String) -> Self {
        Self { name, layouts: Vec::new(), sessions: 0, updated_at: None }
    }
}

/// A session as the listing shows it (SPEC §2.6).
#[derive(Debug, Clone, Serialize)]
pub struct SessionSummary {
    pub session_id: SessionId,
    pub workspace: WorkspaceName,
    pub state: SessionState,
    pub created_at: DateTime<Utc>,
    pub closed_at: Option<DateTime<Utc>>,
    /// Segments appended in this session, over all its rollouts.
    pub segments: i64,
    /// Rollouts (per layout) the session touched.
    pub rollouts: i64,
    pub memory_status: Option<MemoryStatus>,
}

#[derive(Debug, Clone, Default)]
pub struct SessionFilter {
    pub state: Option<SessionState>,
    pub workspace: Option<WorkspaceName>,
    /// Only these workspaces (a JSON array; a scoped key's), when given.
    pub within: Option<String>,
}

#[derive(Debug, Clone, Default)]
pub struct JobFilter {
    pub state: Option<JobState>,
    pub kind: Option<JobKind>,
    pub session_id: Option<SessionId>,
    /// Only these workspaces (a JSON array; a scoped key's), when given.
    pub within: Option<String>,
}

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

#[derive(Debug, Clone, Serialize)]
pub struct SegmentReceipt {
    /// The session's workspace (not part of the answer, which names the session).
    #[serde(skip)]
    pub workspace: WorkspaceName,
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

pub use crate::domain::index::RawMemoryRecord;

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
    /// `phase_two`, `restore`, `forget` or `edit`.
    pub kind: String,
    pub job_id: Uuid,
    pub session_id: String,
    pub state: RunState,
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
    /// For a restore's run: the run whose memory it put back.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub restored_from: Option<Uuid>,
    /// For an edit's run: the conversation the edit came from, and why it was made.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rollout_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The sessions whose closes the run served.
    pub sessions: Vec<String>,
    /// The rollout ids the run added, retained and removed
    /// (`{"added": [..], "retained": [..], "removed": [..]}`); shown by the console.
    #[serde(skip)]
    pub ledger: Option<Value>,
    /// Secrets redacted from the files the run published, by rule.
    pub redactions: crate::domain::redact::Counts,
}

/// What a phase-two attempt leaves in the database: its run record and, on
/// success, the new selection document (SPEC §2.4).
#[derive(Debug, Clone)]
pub struct PhaseTwoReport {
    pub run: PhaseTwoRun,
    pub selection: Option<Value>,
    /// What a successful run changed, kept as its history.
    pub history: Option<RunHistory>,
}

/// One file a run changed: its content before and after (`None`: absent).
/// The path is relative to the layout's `memories_dir`.
#[derive(Debug, Clone, PartialEq)]
pub struct FileHistory {
    pub path: String,
    pub before: Option<Vec<u8>>,
    pub after: Option<Vec<u8>>,
}

/// A run's history, and how many runs of its layout keep theirs
/// (`MEMORYD_HISTORY_RUNS`): recording it prunes the older ones.
#[derive(Debug, Clone, PartialEq)]
pub struct RunHistory {
    pub files: Vec<FileHistory>,
    pub keep_runs: i64,
    /// A forget's run: the files are kept as it left them and never as they
    /// were before, and the history of the layout's earlier runs goes.
    pub forget: bool,
}

/// One file of a kept run, as recorded: its contents by hash.
#[derive(Debug, Clone, PartialEq)]
pub struct RunFileRecord {
    pub path: String,
    pub before_hash: Option<String>,
    pub after_hash: Option<String>,
    pub before_bytes: Option<i64>,
    pub after_bytes: Option<i64>,
    /// The run kept no before-content (a forget's run): there is no diff.
    pub before_omitted: bool,
}

/// A file as it was right after a run.
#[derive(Debug, Clone, PartialEq)]
pub enum FileAtRun {
    /// The run's history is no longer kept (or it never succeeded).
    NotKept,
    /// No kept run touched the file: its state then is not recorded.
    Unrecorded,
    /// The file did not exist right after the run.
    Absent,
    Content(Vec<u8>),
}

pub struct JobFinish {
    pub outcome: JobOutcome,
    pub phase_two: Option<PhaseTwoReport>,
    /// The job's token usage over all its attempts so far.
    pub usage: Value,
    /// The staged publish this finish makes visible, recorded with the outcome.
    pub publish_id: Option<Uuid>,
    /// Secrets the attempt redacted, by rule.
    pub redactions: crate::domain::redact::Counts,
    /// What the finish adds to the tenant's usage counters.
    pub accounting: JobAccounting,
    /// An import's rows, registered with its outcome.
    pub import: Option<ImportRecord>,
}

/// What a job's finish counts (SPEC §2.9), in its own transaction.
#[derive(Debug, Clone, Copy, Default)]
pub struct JobAccounting {
    /// This attempt's model use (the job's `usage` adds up every attempt's).
    pub attempt_usage: crate::llm::TokenUsage,
    /// Bytes the publish adds to the workspace's files (negative: frees).
    pub storage_delta: i64,
    /// The tenant's `model_tokens_per_day`: reaching it holds the tenant's
    /// model jobs until the next UTC midnight, in the same transaction, so
    /// that no job is claimed in between.
    pub model_tokens_per_day: Option<u64>,
}

/// A tenant's usage counters over a range of days (SPEC §2.9).
#[derive(Debug, Clone, Default)]
pub struct UsageHistory {
    /// The days that have counters, oldest first.
    pub days: Vec<crate::domain::usage::UsageDay>,
    /// The storage the last day before the range left, if one is known.
    pub storage_before: Option<i64>,
}

/// The bytes a tenant keeps under one scope: a workspace's files, or (scope
/// `""`) its memory history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StorageScope {
    pub tenant: TenantId,
    pub scope: String,
    pub bytes: i64,
}

/// `waiting` of a session whose tenant's token budget is spent for the day.
pub const WAITING_FOR_MODEL_BUDGET: &str = "model_budget";

pub use crate::domain::portability::{ExportView, ExportedRollout};

/// A rollout an import places: registered at its whole length.
#[derive(Debug, Clone, PartialEq)]
pub struct ImportedRollout {
    pub layout: LayoutName,
    pub rollout_id: RolloutId,
    pub rollout_path: String,
    pub len: u64,
    pub lines: i64,
}

/// What an import job registers once its files are staged (SPEC §2.7).
#[derive(Debug, Clone, Default)]
pub struct ImportRecord {
    /// Layouts a memoryd manifest names that the tenant lacks: created.
    pub layouts: Vec<(LayoutName, ValidLayout)>,
    pub rollouts: Vec<ImportedRollout>,
    /// `(layout, index row)` of every raw memory with a header.
    pub raw_memories: Vec<(LayoutName, RawMemoryRecord)>,
    /// The tenant's storage limit as the job read it: the finish checks
    /// that the placed files fit under it still.
    pub storage_limit: Option<u64>,
}

/// What a request to import became.
#[derive(Debug, Clone)]
pub enum ImportQueued {
    Job(Box<JobRecord>),
    /// The workspace holds sessions, rollouts or memory, or an import is under way.
    NotEmpty,
    Forgetting,
    /// The archive does not fit in what the tenant's limit leaves (`room`).
    OverQuota {
        room: u64,
    },
}

/// The scope under which a tenant's memory history is counted.
pub const HISTORY_SCOPE: &str = "";

/// What a request to forget conversations became.
#[derive(Debug, Clone)]
pub enum ForgetQueued {
    /// A new forget job, or the one already queued or running for them.
    Job(Box<JobRecord>),
    /// The layout has none of these rollouts in the workspace.
    UnknownRollout,
    /// Sessions that appended to them are not closed yet.
    SessionsOpen(Vec<String>),
}

/// A tenant as the admin listing shows it while it is being forgotten.
pub const TENANT_DELETING: &str = "deleting";

#[derive(Debug, Clone)]
pub enum RetryOutcome {
    Requeued(Box<JobRecord>),
    NotFailed(JobState),
    /// A failed import: its archive was removed when it failed for good.
    ArchiveGone,
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    #[test]
    fn workspaces_merge_sessions_and_layouts_and_default_is_always_there() {
        let t = |m| Some(Utc.with_ymd_and_hms(2026, 12, 1, 8, m, 0).unwrap());
        let activity = WorkspaceActivity {
            sessions: vec![("team".into(), 3, t(5)), ("default".into(), 1, t(1))],
            layouts: vec![
                ("team".into(), "notes".into(), t(9)),
                ("team".into(), "default".into(), t(2)),
                ("orphan".into(), "default".into(), t(3)),
            ],
            imported: vec![("memories-only".into(), t(4)), ("team".into(), t(1))],
        };
        let listed = activity.summaries();
        let names: Vec<_> = listed.iter().map(|w| w.name.as_str()).collect();
        assert_eq!(names, ["default", "memories-only", "orphan", "team"]);
        assert_eq!((listed[1].sessions, listed[1].updated_at, listed[1].layouts.len()), (0, t(4), 0));
        assert_eq!(listed[3].layouts, ["default", "notes"]);
        assert_eq!((listed[3].sessions, listed[3].updated_at), (3, t(9)));
        assert_eq!((listed[0].sessions, listed[0].updated_at, listed[0].layouts.len()), (1, t(1), 0));
        assert_eq!(WorkspaceActivity::default().summaries(), vec![WorkspaceSummary::empty("default".into())]);
    }
}
