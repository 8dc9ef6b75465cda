//! The records the store takes and gives: plain data.

use super::TenantId;
use crate::domain::ids::{LayoutName, RolloutId, SessionId, WorkspaceName};
use crate::domain::job::{ForgetSpec, JobKind, JobState, RunState, SessionState};
use crate::domain::key_scope::KeyScope;
use crate::domain::layout::ValidLayout;
use crate::domain::memory_status::MemoryStatus;
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

#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct SessionRecord {
    pub session_id: SessionId,
    pub workspace: WorkspaceName,
    pub state: SessionState,
    #[schemars(with = "serde_json::Map<String, Value>")]
    pub metadata: Value,
    pub memory_status: Option<MemoryStatus>,
    pub created_at: DateTime<Utc>,
    pub closed_at: Option<DateTime<Utc>>,
}

#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
#[schemars(rename = "SessionRollout")]
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

#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
#[schemars(rename = "Job")]
pub struct JobRecord {
    pub job_id: Uuid,
    pub kind: JobKind,
    pub state: JobState,
    /// The session whose close queued the job; null for a forget, which
    /// no close queues.
    pub session_id: Option<SessionId>,
    pub workspace: WorkspaceName,
    pub layout: LayoutName,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rollout_id: Option<RolloutId>,
    pub attempts: i64,
    pub run_after: DateTime<Utc>,
    pub last_error: Option<String>,
    pub usage: Option<crate::llm::TokenUsage>,
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

#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
#[schemars(rename = "Session")]
pub struct SessionView {
    #[serde(flatten)]
    pub session: SessionRecord,
    /// Why a closing session's jobs are not running: `model_budget`, its
    /// tenant's tokens of the day are spent (SPEC §2.9).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = ["model_budget"]))]
    pub waiting: Option<&'static str>,
    pub rollouts: Vec<TouchedRollout>,
    pub jobs: Vec<JobRecord>,
}

/// A tenant as the admin listing shows it.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct TenantSummary {
    pub tenant_id: TenantId,
    pub name: String,
    pub created_at: DateTime<Utc>,
    /// Keys not revoked.
    pub keys: i64,
    pub sessions: i64,
    /// `active`, or `deleting` while a forget of the tenant runs.
    #[schemars(extend("enum" = ["active", "deleting"]))]
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
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
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
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
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
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct PhaseTwoRun {
    pub run_id: Uuid,
    /// The kind of job that made the run.
    #[schemars(extend("enum" = ["phase_two", "restore", "forget", "edit"]))]
    pub kind: String,
    pub job_id: Uuid,
    pub session_id: String,
    pub state: RunState,
    pub selected: i64,
    pub added: i64,
    pub retained: i64,
    pub removed: i64,
    pub files_changed: Vec<String>,
    pub usage: crate::llm::TokenUsage,
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
    /// For an edit's run: why it was made.
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
    pub usage: crate::llm::TokenUsage,
    /// The staged publish this finish makes visible, recorded with the outcome.
    pub publish_id: Option<Uuid>,
    /// Secrets the attempt redacted, by rule.
    pub redactions: crate::domain::redact::Counts,
    /// What the finish adds to the tenant's usage counters.
    pub accounting: JobAccounting,
    /// An import's rows, registered with its outcome.
    pub import: Option<ImportRecord>,
    /// The passages a publish leaves in the files it changes: the vectors
    /// of the others are dropped with the finish (SPEC §2.10).
    pub passages: Option<super::PassageChanges>,
    /// Where workspace files live in an object store: the versions this
    /// finish makes current (SPEC §6.1).
    pub versions: Option<super::workspace_files::VersionChanges>,
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
    /// Where files live in a bucket: the ETag of the object the import
    /// wrote it to (the object holds all of it).
    pub object_etag: Option<String>,
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
#[path = "records_tests.rs"]
mod tests;
