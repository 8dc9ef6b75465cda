//! Rollouts whose workspace files live in an object store (SPEC §6.1): an
//! object cannot be appended to, so acknowledged lines wait in the
//! rollout's journal, in the database, until its object is rewritten with
//! them. Appends journal their lines in the group commit's transaction
//! ([`super::AppendBatch::journal`]).

use super::{RolloutParts, StoreResult, TenantId};
use crate::domain::ids::{LayoutName, RolloutId, WorkspaceName};
use async_trait::async_trait;
use chrono::{DateTime, Utc};

/// A rollout by its place: the key of its row and of its journal's lines.
#[derive(Debug, Clone, Copy)]
pub struct RolloutAt<'a> {
    pub tenant: TenantId,
    pub workspace: &'a WorkspaceName,
    pub layout: &'a LayoutName,
    pub rollout: &'a RolloutId,
}

/// A rollout with lines in the journal, and where its object is.
#[derive(Debug, Clone)]
pub struct JournaledRollout {
    pub tenant: TenantId,
    pub workspace: WorkspaceName,
    pub layout: LayoutName,
    pub rollout: RolloutId,
    pub rollout_path: String,
}

impl JournaledRollout {
    pub fn at(&self) -> RolloutAt<'_> {
        RolloutAt { tenant: self.tenant, workspace: &self.workspace, layout: &self.layout, rollout: &self.rollout }
    }
}

#[async_trait]
pub trait RolloutJournalStore: Send + Sync {
    /// Rollouts with lines in the journal and no append since `before`
    /// (idle), at most `limit`; none being forgotten.
    async fn idle_journaled_rollouts(&self, before: DateTime<Utc>, limit: u32) -> StoreResult<Vec<JournaledRollout>>;
    /// What the rollout is made of now, read in one snapshot; `None` for an
    /// unknown (or forgotten) rollout.
    async fn rollout_parts(&self, at: RolloutAt<'_>) -> StoreResult<Option<RolloutParts>>;
    /// The rollout's object was rewritten from version `from` (none: it had
    /// no object) to version `etag`, holding its first `object_len` bytes:
    /// recorded, and the journal's lines it now holds dropped, in one
    /// transaction. `false`, with nothing changed, when the rollout is gone
    /// or its object's recorded version is no longer `from` (another rewrite
    /// came first).
    async fn rollout_rewritten(
        &self,
        at: RolloutAt<'_>,
        from: Option<&str>,
        etag: &str,
        object_len: u64,
    ) -> StoreResult<bool>;
}
