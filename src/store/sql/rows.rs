//! Rows as the database holds them (read by sqlx's `FromRow`), and the
//! records they become once their ids and JSON are checked.

use super::*;
use crate::domain::ids::{LayoutName, RolloutId, SessionId, WorkspaceName};
use crate::domain::job::JobSpec;
use crate::store::*;
use chrono::{DateTime, Utc};
use sqlx::FromRow;
use uuid::Uuid;

#[derive(FromRow)]
pub(super) struct JobRow {
    id: Uuid,
    kind: String,
    state: String,
    session_id: String,
    workspace: String,
    layout: String,
    rollout_id: Option<String>,
    attempts: i64,
    run_after: DateTime<Utc>,
    last_error: Option<String>,
    usage: Option<String>,
    created_at: DateTime<Utc>,
    started_at: Option<DateTime<Utc>>,
    finished_at: Option<DateTime<Utc>>,
    /// Comma-separated; only where the query asked for it.
    #[sqlx(default)]
    sessions: Option<String>,
    #[sqlx(default)]
    eager: bool,
    #[sqlx(default)]
    redactions: Option<String>,
    spec: String,
}

impl TryFrom<JobRow> for JobRecord {
    type Error = StoreError;

    fn try_from(r: JobRow) -> StoreResult<Self> {
        let kind = parse_id(JobKind::parse, &r.kind, "job kind")?;
        let spec = JobSpec::from_stored(kind, &r.spec).map_err(corrupt)?;
        let (restore_run_id, forget, edit) = match spec {
            JobSpec::Restore { run_id } => (Some(run_id), None, None),
            JobSpec::Forget(forget) => (None, Some(forget), None),
            JobSpec::Edit(edit) => (None, None, edit),
            JobSpec::PhaseOne | JobSpec::PhaseTwo | JobSpec::Import => (None, None, None),
        };
        Ok(JobRecord {
            job_id: r.id,
            kind,
            state: parse_id(JobState::parse, &r.state, "job state")?,
            // A forget job belongs to no session: its column holds ''.
            session_id: match r.session_id.as_str() {
                "" => None,
                id => Some(parse_id(SessionId::parse, id, "session id")?),
            },
            workspace: parse_id(WorkspaceName::parse, &r.workspace, "workspace")?,
            layout: parse_id(LayoutName::parse, &r.layout, "layout name")?,
            rollout_id: r.rollout_id.as_deref().map(|s| parse_id(RolloutId::parse, s, "rollout id")).transpose()?,
            attempts: r.attempts,
            run_after: r.run_after,
            last_error: r.last_error,
            usage: r.usage.map(|s| serde_json::from_str(&s)).transpose().map_err(corrupt)?,
            created_at: r.created_at,
            started_at: r.started_at,
            finished_at: r.finished_at,
            sessions: sorted_list(r.sessions.as_deref()),
            restore_run_id,
            eager: r.eager,
            forget,
            redactions: counts(r.redactions.as_deref())?,
            edit,
        })
    }
}

/// Redaction counts as stored (a JSON object; none recorded: empty).
fn counts(stored: Option<&str>) -> StoreResult<crate::domain::redact::Counts> {
    stored.map(serde_json::from_str).transpose().map_err(corrupt).map(Option::unwrap_or_default)
}

fn sorted_list(joined: Option<&str>) -> Vec<String> {
    let mut list: Vec<String> = joined.into_iter().flat_map(|s| s.split(',')).map(str::to_owned).collect();
    list.sort();
    list
}

/// A job row as a claim returns it: the job, its tenant and its config.
#[derive(FromRow)]
pub(super) struct ClaimedRow {
    #[sqlx(flatten)]
    job: JobRow,
    tenant_id: Uuid,
    layout_config: String,
    token_limit: Option<i64>,
}

impl ClaimedRow {
    pub(super) fn into_claimed(self, token: Uuid) -> StoreResult<ClaimedJob> {
        Ok(ClaimedJob {
            job: self.job.try_into()?,
            tenant_id: self.tenant_id,
            layout: parse_layout_config(&self.layout_config)?,
            token,
            token_limit: self.token_limit,
        })
    }
}

#[derive(FromRow)]
pub(super) struct SessionRow {
    session_id: String,
    workspace: String,
    state: String,
    metadata: String,
    memory_status: Option<String>,
    created_at: DateTime<Utc>,
    closed_at: Option<DateTime<Utc>>,
}

impl TryFrom<SessionRow> for SessionRecord {
    type Error = StoreError;

    fn try_from(r: SessionRow) -> StoreResult<Self> {
        Ok(SessionRecord {
            session_id: parse_id(SessionId::parse, &r.session_id, "session id")?,
            workspace: parse_id(WorkspaceName::parse, &r.workspace, "workspace")?,
            state: parse_id(SessionState::parse, &r.state, "session state")?,
            metadata: serde_json::from_str(&r.metadata).map_err(corrupt)?,
            memory_status: r.memory_status.map(|s| serde_json::from_str(&s)).transpose().map_err(corrupt)?,
            created_at: r.created_at,
            closed_at: r.closed_at,
        })
    }
}

#[derive(FromRow)]
pub(super) struct SessionSummaryRow {
    session_id: String,
    workspace: String,
    state: String,
    memory_status: Option<String>,
    created_at: DateTime<Utc>,
    closed_at: Option<DateTime<Utc>>,
    segments: i64,
    rollouts: i64,
}

impl TryFrom<SessionSummaryRow> for SessionSummary {
    type Error = StoreError;

    fn try_from(r: SessionSummaryRow) -> StoreResult<Self> {
        Ok(SessionSummary {
            session_id: parse_id(SessionId::parse, &r.session_id, "session id")?,
            workspace: parse_id(WorkspaceName::parse, &r.workspace, "workspace")?,
            state: parse_id(SessionState::parse, &r.state, "session state")?,
            created_at: r.created_at,
            closed_at: r.closed_at,
            segments: r.segments,
            rollouts: r.rollouts,
            memory_status: r.memory_status.map(|s| serde_json::from_str(&s)).transpose().map_err(corrupt)?,
        })
    }
}

#[derive(FromRow)]
pub(super) struct RawMemoryRow {
    rollout_id: String,
    updated_at: String,
    rollout_path: String,
    rollout_summary_file: String,
    terminal_state: String,
    extracted_len: i64,
}

impl TryFrom<RawMemoryRow> for RawMemoryRecord {
    type Error = StoreError;

    fn try_from(r: RawMemoryRow) -> StoreResult<Self> {
        Ok(RawMemoryRecord {
            rollout_id: parse_id(RolloutId::parse, &r.rollout_id, "rollout id")?,
            updated_at: r.updated_at,
            rollout_path: r.rollout_path,
            rollout_summary_file: r.rollout_summary_file,
            terminal_state: r.terminal_state,
            extracted_len: r.extracted_len as u64,
        })
    }
}

#[derive(FromRow)]
pub(super) struct RunRow {
    id: Uuid,
    job_id: Uuid,
    session_id: String,
    state: String,
    selected: i64,
    added: i64,
    retained: i64,
    removed: i64,
    files_changed: String,
    usage: String,
    turns: i64,
    error: Option<String>,
    started_at: DateTime<Utc>,
    finished_at: DateTime<Utc>,
    sessions: Option<String>,
    #[sqlx(default)]
    restored_from: Option<Uuid>,
    #[sqlx(default)]
    kind: Option<String>,
    #[sqlx(default)]
    ledger: Option<String>,
    #[sqlx(default)]
    redactions: Option<String>,
    #[sqlx(default)]
    rollout_id: Option<String>,
    #[sqlx(default)]
    reason: Option<String>,
}

impl TryFrom<RunRow> for PhaseTwoRun {
    type Error = StoreError;

    fn try_from(r: RunRow) -> StoreResult<Self> {
        Ok(PhaseTwoRun {
            run_id: r.id,
            kind: r.kind.unwrap_or_else(|| "phase_two".into()),
            job_id: r.job_id,
            session_id: r.session_id,
            state: RunState::parse(&r.state).ok_or_else(|| corrupt(format!("run state {:?}", r.state)))?,
            selected: r.selected,
            added: r.added,
            retained: r.retained,
            removed: r.removed,
            files_changed: serde_json::from_str(&r.files_changed).map_err(corrupt)?,
            usage: serde_json::from_str(&r.usage).map_err(corrupt)?,
            turns: r.turns,
            error: r.error,
            started_at: r.started_at,
            finished_at: r.finished_at,
            sessions: r.sessions.map(|s| serde_json::from_str(&s)).transpose().map_err(corrupt)?.unwrap_or_default(),
            restored_from: r.restored_from,
            rollout_id: r.rollout_id,
            reason: r.reason,
            ledger: r.ledger.map(|s| serde_json::from_str(&s)).transpose().map_err(corrupt)?,
            redactions: counts(r.redactions.as_deref())?,
        })
    }
}

#[derive(FromRow)]
pub(super) struct LayoutRow {
    name: String,
    config: String,
    updated_at: DateTime<Utc>,
}

impl TryFrom<LayoutRow> for StoredLayout {
    type Error = StoreError;

    fn try_from(r: LayoutRow) -> StoreResult<Self> {
        Ok(StoredLayout {
            name: parse_id(LayoutName::parse, &r.name, "layout name")?,
            layout: parse_layout_config(&r.config)?,
            updated_at: Some(r.updated_at),
        })
    }
}

#[derive(FromRow)]
pub(super) struct WebhookRow {
    id: Uuid,
    url: String,
    /// `*` or the subscribed types, comma-separated.
    events: String,
    description: Option<String>,
    state: String,
    disabled_reason: Option<String>,
    previous_until: Option<DateTime<Utc>>,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
}

impl From<WebhookRow> for WebhookRecord {
    fn from(row: WebhookRow) -> Self {
        let events = if row.events == "*" {
            vec!["*".to_owned()]
        } else {
            crate::domain::events::subscription_types(&row.events)
        };
        Self {
            webhook_id: row.id,
            url: row.url,
            events,
            description: row.description,
            state: row.state,
            disabled_reason: row.disabled_reason,
            previous_secret_until: row.previous_until,
            created_at: row.created_at,
            updated_at: row.updated_at,
        }
    }
}

#[derive(FromRow)]
pub(super) struct DeliveryRow {
    event_seq: i64,
    event_type: String,
    state: String,
    attempts: i64,
    last_status: Option<i64>,
    last_error: Option<String>,
    last_response: Option<String>,
    last_attempt_at: Option<DateTime<Utc>>,
    next_attempt_at: Option<DateTime<Utc>>,
    created_at: DateTime<Utc>,
}

impl DeliveryRow {
    pub(super) fn into_record(self, tenant: TenantId) -> DeliveryRecord {
        let pending = self.state == "pending";
        DeliveryRecord {
            event_id: crate::domain::events::event_id(tenant, self.event_seq),
            event_type: self.event_type,
            state: self.state,
            attempts: self.attempts,
            last_status: self.last_status,
            last_error: self.last_error,
            last_response: self.last_response,
            last_attempt_at: self.last_attempt_at,
            next_attempt_at: self.next_attempt_at.filter(|_| pending),
            created_at: self.created_at,
        }
    }
}

#[derive(FromRow)]
pub(super) struct ClaimedDeliveryRow {
    tenant_id: Uuid,
    webhook_id: Uuid,
    event_seq: i64,
    attempts: i64,
    url: String,
    secret: String,
    previous_secret: Option<String>,
    payload: String,
}

impl ClaimedDeliveryRow {
    pub(super) fn leased_under(self, token: Uuid) -> ClaimedDelivery {
        ClaimedDelivery {
            tenant_id: self.tenant_id,
            webhook_id: self.webhook_id,
            event_seq: self.event_seq,
            attempts: self.attempts,
            url: self.url,
            sealed_secret: self.secret,
            sealed_previous: self.previous_secret,
            payload: self.payload,
            token,
        }
    }
}

#[derive(FromRow)]
pub(super) struct EventRow {
    seq: i64,
    event_type: String,
    payload: String,
    workspace: Option<String>,
}

impl From<EventRow> for EventRecord {
    fn from(row: EventRow) -> Self {
        Self { seq: row.seq, event_type: row.event_type, payload: row.payload, workspace: row.workspace }
    }
}
