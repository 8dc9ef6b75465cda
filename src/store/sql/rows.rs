//! Rows read back as records.

use super::*;
use crate::domain::ids::{LayoutName, RolloutId, SessionId, WorkspaceName};
use crate::store::*;
use sqlx::Row;
use uuid::Uuid;
for_every_dialect! {
    impl {
    pub(super) fn raw_memory_from_row(r: &DB::Row) -> StoreResult<RawMemoryRecord> {
        Ok(RawMemoryRecord {
            rollout_id: parse_id(RolloutId::parse, r.try_get("rollout_id")?, "rollout id")?,
            updated_at: r.try_get("updated_at")?,
            rollout_path: r.try_get("rollout_path")?,
            rollout_summary_file: r.try_get("rollout_summary_file")?,
            terminal_state: r.try_get("terminal_state")?,
            extracted_len: r.try_get::<i64, _>("extracted_len")? as u64,
        })
    }

    pub(super) fn claimed_from_row(r: &DB::Row, token: Uuid) -> StoreResult<ClaimedJob> {
        Ok(ClaimedJob {
            job: Self::job_from_row(r)?,
            tenant_id: r.try_get("tenant_id")?,
            layout: parse_layout_config(r.try_get("layout_config")?)?,
            token,
            token_limit: r.try_get("token_limit")?,
        })
    }

    pub(super) fn session_from_row(r: &DB::Row) -> StoreResult<SessionRecord> {
        let metadata: String = r.try_get("metadata")?;
        let memory_status: Option<String> = r.try_get("memory_status")?;
        Ok(SessionRecord {
            session_id: parse_id(SessionId::parse, r.try_get("session_id")?, "session id")?,
            workspace: parse_id(WorkspaceName::parse, r.try_get("workspace")?, "workspace")?,
            state: parse_id(SessionState::parse, r.try_get("state")?, "session state")?,
            metadata: serde_json::from_str(&metadata).map_err(corrupt)?,
            memory_status: memory_status.map(|s| serde_json::from_str(&s)).transpose().map_err(corrupt)?,
            created_at: r.try_get("created_at")?,
            closed_at: r.try_get("closed_at")?,
        })
    }

    pub(super) fn job_from_row(r: &DB::Row) -> StoreResult<JobRecord> {
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
}
