//! Memory files whose workspace lives in an object store (SPEC §6.1): which
//! version of each file is current — made so by a job's fenced finish, in
//! its transaction (`JobFinish::versions`) — and what that finish left to
//! do in the bucket (place plain keys, remove replaced versions).

use super::{StoreResult, TenantId};
use crate::domain::ids::WorkspaceName;
use async_trait::async_trait;
use uuid::Uuid;

/// One file's content as a publish staged it: the object
/// `.memoryd/versions/<publish_id>/<path>` under its workspace's prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileVersion {
    pub publish_id: Uuid,
    pub bytes: u64,
    pub sha256: String,
}

/// What a publish changes, path by path (`None`: the file is removed).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct VersionChanges {
    pub publish_id: Uuid,
    pub files: Vec<(String, Option<FileVersion>)>,
}

/// A workspace's current files and the generation they are: the last
/// publish that changed them (none: no publish since the workspace began).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CurrentFiles {
    pub generation: Option<Uuid>,
    pub files: Vec<(String, FileVersion)>,
}

/// What a finish left to do in the bucket for one path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FileChore {
    /// Make the plain key what the current row says (the finish `publish_id` asked).
    Place { path: String, publish_id: Uuid },
    /// Remove the replaced version `publish_id` of `path`.
    Remove { path: String, publish_id: Uuid },
}

#[async_trait]
pub trait WorkspaceFilesStore: Send + Sync {
    /// The generation of a workspace's files: the last publish that changed them.
    async fn files_generation(&self, tenant: TenantId, workspace: &WorkspaceName) -> StoreResult<Option<Uuid>>;
    /// Every current file of a workspace, read in one snapshot with its generation.
    async fn current_files(&self, tenant: TenantId, workspace: &WorkspaceName) -> StoreResult<CurrentFiles>;
    /// One current file.
    async fn current_file(
        &self,
        tenant: TenantId,
        workspace: &WorkspaceName,
        path: &str,
    ) -> StoreResult<Option<FileVersion>>;
    /// The chores left for a workspace, oldest first, at most `limit`.
    async fn file_chores(&self, tenant: TenantId, workspace: &WorkspaceName, limit: u32)
    -> StoreResult<Vec<FileChore>>;
    /// Workspaces with chores older than `older_than` (for the sweep), at most `limit`.
    async fn workspaces_with_chores(
        &self,
        older_than: chrono::DateTime<chrono::Utc>,
        limit: u32,
    ) -> StoreResult<Vec<(TenantId, WorkspaceName)>>;
    /// Chores done, in one transaction.
    async fn chores_done(&self, tenant: TenantId, workspace: &WorkspaceName, chores: &[FileChore]) -> StoreResult<()>;
    /// Makes `changes` current outside a job (a data dir copied into the
    /// bucket), as a finish records them: the generation moved, replaced
    /// versions and plain keys left as chores.
    async fn record_versions(
        &self,
        tenant: TenantId,
        workspace: &WorkspaceName,
        changes: &VersionChanges,
    ) -> StoreResult<()>;
    /// Makes the layout's starting files (R-LAY-3) current, empty, at the
    /// `paths` that have no file, as one publish `publish_id` (its versions
    /// have no object: they are 0 bytes); whether any was missing.
    async fn add_empty_files(
        &self,
        tenant: TenantId,
        workspace: &WorkspaceName,
        paths: &[&str],
        publish_id: Uuid,
    ) -> StoreResult<bool>;
    /// Whether a version (a staged object's publish) is current or still has chores:
    /// the sweep removes staged objects of neither.
    async fn version_referenced(
        &self,
        tenant: TenantId,
        workspace: &WorkspaceName,
        path: &str,
        publish_id: Uuid,
    ) -> StoreResult<bool>;
}
