//! Memory files in an object store (SPEC §6.1). A publish writes each file
//! it changes as an object of its own, a *version*
//! (`.memoryd/versions/<publish id>/<path>` under the workspace's prefix);
//! the job's fenced finish makes the versions current in the database, where
//! memoryd's readers look them up, so none sees half a run. The finish also
//! records its chores: each path placed at its plain key for readers outside
//! memoryd, each replaced version removed. Chores are done right after the
//! finish and, for one whose process died, by the sweep.

use super::Bucket;
use crate::domain::ids::{WorkspaceName, sha256_hex};
use crate::store::workspace_files::{FileChore, FileVersion, VersionChanges, WorkspaceFilesStore};
use crate::store::{StoreError, TenantId};
use crate::workspace::PathError;
use crate::workspace::publish::FileChanges;
use object_store::PutPayload;
use object_store::path::Path as ObjectKey;
use uuid::Uuid;

#[derive(Debug, thiserror::Error)]
pub enum FilesError {
    #[error("the file's path is refused: {0}")]
    Path(#[from] PathError),
    #[error("the object store failed: {0}")]
    Objects(#[from] object_store::Error),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("the replica's copy failed: {0}")]
    Cache(#[from] std::io::Error),
}

/// The folder of a workspace that holds memoryd's own objects.
pub const OWN_FOLDER: &str = ".memoryd";

/// Chores read at a time.
const CHORES_AT_ONCE: u32 = 100;

/// Requests to the store in flight at a time for one publish or one batch of chores.
pub(crate) const REQUESTS_AT_ONCE: usize = 8;

impl Bucket {
    /// The key of version `publish_id` of a workspace's `path`.
    pub fn version_key(
        &self,
        tenant: TenantId,
        workspace: &WorkspaceName,
        publish_id: Uuid,
        path: &str,
    ) -> Result<ObjectKey, PathError> {
        // The path goes through the one gate first: a version is where its file would be.
        self.url.object_key(tenant, workspace, path)?;
        self.url.own_key(tenant, workspace, &format!("versions/{publish_id}/{path}"))
    }

    /// Writes every file `changes` writes as a version of a new publish,
    /// several at a time; on a failure none is left (the sweep removes what
    /// a write cut short leaves).
    pub async fn stage_versions(
        &self,
        tenant: TenantId,
        workspace: &WorkspaceName,
        changes: FileChanges,
    ) -> Result<VersionChanges, FilesError> {
        use futures_util::{StreamExt, TryStreamExt};
        let publish_id = Uuid::new_v4();
        let mut staged = VersionChanges { publish_id, files: Vec::with_capacity(changes.edits.len()) };
        let mut writes = Vec::new();
        for (path, content) in changes.edits {
            let version = match content {
                Some(bytes) => {
                    let key = self.version_key(tenant, workspace, publish_id, &path)?;
                    let version = FileVersion { publish_id, bytes: bytes.len() as u64, sha256: sha256_hex(&bytes) };
                    writes.push((key, version.sha256.clone(), bytes::Bytes::from(bytes)));
                    Some(version)
                }
                None => {
                    self.url.object_key(tenant, workspace, &path)?;
                    None
                }
            };
            staged.files.push((path, version));
        }
        let writes: Vec<_> = writes
            .into_iter()
            .map(|(key, sha256, bytes)| async move {
                self.objects.put(&key, PutPayload::from(bytes.clone())).await?;
                // Kept by its content (a copy run again rewrites a version
                // key): the phase two that reads it back need not fetch it.
                self.recent.keep(key.as_ref(), &sha256, bytes);
                Ok::<_, object_store::Error>(())
            })
            .collect();
        let written = futures_util::stream::iter(writes).buffer_unordered(REQUESTS_AT_ONCE).try_collect::<()>().await;
        if let Err(e) = written {
            self.discard_versions(tenant, workspace, &staged).await;
            return Err(e.into());
        }
        Ok(staged)
    }

    /// Removes the versions of a publish that was not recorded (its lease
    /// was lost): what fails to go is left to the sweep.
    pub async fn discard_versions(&self, tenant: TenantId, workspace: &WorkspaceName, staged: &VersionChanges) {
        let keys = staged
            .files
            .iter()
            .filter_map(|(path, version)| self.version_key(tenant, workspace, version.as_ref()?.publish_id, path).ok())
            .collect();
        if let Err(e) = self.remove_objects(keys).await {
            tracing::warn!(error = %e, "removing a staged version failed; the sweep will");
        }
    }

    /// The files a layout starts with in a workspace (R-LAY-3): its empty
    /// `MEMORY.md` and `memory_summary.md`, made current where the workspace
    /// has none, and placed for outside readers soon (an append waits for
    /// no request to the object store). A bucket has no folders: a
    /// consolidation's copy gets the layout's from `ensure_layout`.
    pub async fn add_starting_files(
        &self,
        store: crate::store::DynStore,
        tenant: TenantId,
        workspace: &WorkspaceName,
        memories_dir: &str,
    ) -> Result<(), FilesError> {
        let paths = crate::workspace::STARTING_FILES.map(|name| format!("{memories_dir}/{name}"));
        for path in &paths {
            self.url.object_key(tenant, workspace, path)?;
        }
        let paths: Vec<&str> = paths.iter().map(String::as_str).collect();
        if store.add_empty_files(tenant, workspace, &paths, Uuid::new_v4()).await? {
            self.chores_soon(store, tenant, workspace);
        }
        Ok(())
    }

    /// A current file's bytes.
    pub async fn read_version(
        &self,
        tenant: TenantId,
        workspace: &WorkspaceName,
        path: &str,
        version: &FileVersion,
    ) -> Result<Vec<u8>, FilesError> {
        let key = self.version_key(tenant, workspace, version.publish_id, path)?;
        if version.bytes == 0 {
            // An empty file may have no object (a layout's starting files).
            return Ok(Vec::new());
        }
        if let Some(kept) = self.recent.get(key.as_ref(), &version.sha256) {
            return Ok(kept.to_vec());
        }
        let bytes = self.objects.get(&key).await?.bytes().await?;
        if sha256_hex(&bytes) == version.sha256 {
            self.recent.keep(key.as_ref(), &version.sha256, bytes.clone());
        }
        Ok(bytes.to_vec())
    }

    /// Does a workspace's chores, oldest first, a batch at a time: the
    /// batch's files placed (several at a time), then the versions it
    /// replaced removed (in one request where the store takes many), then
    /// the batch recorded done. The number done.
    pub async fn do_chores(
        &self,
        store: &dyn WorkspaceFilesStore,
        tenant: TenantId,
        workspace: &WorkspaceName,
    ) -> Result<usize, FilesError> {
        let _turn = self.chore_turn(tenant, workspace).await;
        self.chores_in_turn(store, tenant, workspace).await
    }

    /// After the finish of a publish: its chores done (`wait`) or done soon
    /// (plain keys placed, replaced versions removed), or its versions
    /// removed if it was not `recorded`. What fails is left to the sweep.
    pub async fn settle_versions(
        &self,
        store: crate::store::DynStore,
        tenant: TenantId,
        workspace: &WorkspaceName,
        versions: VersionChanges,
        recorded: bool,
        wait: bool,
    ) {
        if !recorded {
            return self.discard_versions(tenant, workspace, &versions).await;
        }
        if !wait {
            return self.chores_soon(store, tenant, workspace);
        }
        if let Err(e) = self.do_chores(store.as_ref(), tenant, workspace).await {
            tracing::warn!(publish_id = %versions.publish_id, error = %crate::error_chain(&e), "placing a publish's files failed; the sweep will");
        }
    }

    /// Has a workspace's chores done soon, without waiting for them (a job's
    /// finish): jobs finishing together in a workspace leave one pass to do
    /// all their chores in a few batches, where each waiting for its turn
    /// held a worker for every other's. What fails is left to the sweep;
    /// the jobs API does what is left before it shows a job succeeded.
    pub fn chores_soon(&self, store: crate::store::DynStore, tenant: TenantId, workspace: &WorkspaceName) {
        let wanted = (tenant, workspace.clone());
        if !self.chores_wanted.lock().expect("never poisoned").insert(wanted.clone()) {
            // A pass not yet begun does these too: their finish is committed.
            return;
        }
        let bucket = self.clone();
        tokio::spawn(async move {
            let (tenant, workspace) = (wanted.0, &wanted.1);
            let _turn = bucket.chore_turn(tenant, workspace).await;
            // From here on a finish asks for a pass of its own.
            bucket.chores_wanted.lock().expect("never poisoned").remove(&wanted);
            if let Err(e) = bucket.chores_in_turn(store.as_ref(), tenant, workspace).await {
                tracing::warn!(error = %crate::error_chain(&e), "placing a publish's files failed; the sweep will");
            }
        });
    }

    async fn chores_in_turn(
        &self,
        store: &dyn WorkspaceFilesStore,
        tenant: TenantId,
        workspace: &WorkspaceName,
    ) -> Result<usize, FilesError> {
        use futures_util::{StreamExt, TryStreamExt};
        let mut done = 0;
        loop {
            let chores = store.file_chores(tenant, workspace, CHORES_AT_ONCE).await?;
            if chores.is_empty() {
                return Ok(done);
            }
            let mut places = std::collections::BTreeSet::new();
            let mut replaced = Vec::new();
            for chore in &chores {
                match chore {
                    FileChore::Place { path, .. } => {
                        places.insert(path.as_str());
                    }
                    FileChore::Remove { path, publish_id } => {
                        replaced.push(self.version_key(tenant, workspace, *publish_id, path)?);
                    }
                }
            }
            // Places first: a place copies from the current version, never a replaced one.
            // Futures made before they are streamed: a stream's closures over
            // borrowed items would not be `Send` for every lifetime.
            let mut places = places.into_iter();
            if let Some(pause) = self.pause_after_first_place
                && places.len() > 1
                && let Some(first) = places.next()
            {
                self.place(store, tenant, workspace, first).await?;
                tokio::time::sleep(pause).await;
            }
            let places: Vec<_> = places.map(|path| self.place(store, tenant, workspace, path)).collect();
            futures_util::stream::iter(places).buffer_unordered(REQUESTS_AT_ONCE).try_collect::<()>().await?;
            self.remove_objects(replaced).await?;
            store.chores_done(tenant, workspace, &chores).await?;
            done += chores.len();
        }
    }

    /// Makes `path`'s plain key what the database says is current: a copy
    /// of its version, or nothing. A version replaced meanwhile (its copy
    /// fails, or the row moved on) is looked up again.
    async fn place(
        &self,
        store: &dyn WorkspaceFilesStore,
        tenant: TenantId,
        workspace: &WorkspaceName,
        path: &str,
    ) -> Result<(), FilesError> {
        let plain = self.url.object_key(tenant, workspace, path)?;
        let mut current = store.current_file(tenant, workspace, path).await?;
        loop {
            let placed = match &current {
                None => self.objects.delete(&plain).await,
                Some(version) if version.bytes == 0 => self.objects.put(&plain, PutPayload::new()).await.map(drop),
                Some(version) => {
                    let from = self.version_key(tenant, workspace, version.publish_id, path)?;
                    self.objects.copy(&from, &plain).await
                }
            };
            match placed {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => return Err(e.into()),
            }
            let now = store.current_file(tenant, workspace, path).await?;
            if now == current {
                return Ok(());
            }
            current = now;
        }
    }
}

/// An object of memoryd's own folder, by its key below the bucket's prefix.
enum OwnObject<'k> {
    Version {
        tenant: TenantId,
        workspace: WorkspaceName,
        publish_id: Uuid,
        path: &'k str,
    },
    /// An uploaded archive waiting for import job `job_id`.
    Archive {
        job_id: Uuid,
    },
}

fn own_object_of_key(rest: &str) -> Option<OwnObject<'_>> {
    let mut parts = rest.splitn(6, '/');
    let tenant = Uuid::parse_str(parts.next()?).ok()?;
    let workspace = WorkspaceName::parse(parts.next()?)?;
    if parts.next()? != OWN_FOLDER {
        return None;
    }
    match (parts.next()?, parts.next()?, parts.next()) {
        ("versions", publish_id, Some(path)) => {
            let publish_id = Uuid::parse_str(publish_id).ok()?;
            Some(OwnObject::Version { tenant, workspace, publish_id, path })
        }
        ("imports", name, None) => {
            Some(OwnObject::Archive { job_id: Uuid::parse_str(name.strip_suffix(".tar.gz")?).ok()? })
        }
        _ => None,
    }
}

impl Bucket {
    /// Removes the versions no finish recorded (their writer died or lost
    /// its lease), and the archives no import job will read (the replica
    /// receiving one died before queueing it), once they are older than
    /// `grace`; the number removed. Lists every object under the prefix.
    pub async fn remove_unreferenced_versions(
        &self,
        store: &dyn crate::store::Store,
        grace: std::time::Duration,
    ) -> Result<usize, FilesError> {
        use futures_util::TryStreamExt;
        let before = chrono::Utc::now() - chrono::Duration::from_std(grace).unwrap_or(chrono::Duration::hours(1));
        let prefix = self.url.prefix_key();
        let skip = prefix.as_ref().map_or(0, |p| p.as_ref().len() + 1);
        let mut listed = self.objects.list(prefix.as_ref());
        let mut removed = 0;
        while let Some(meta) = listed.try_next().await? {
            let Some(own) = meta.location.as_ref().get(skip..).and_then(own_object_of_key) else { continue };
            if meta.last_modified >= before {
                continue;
            }
            let used = match own {
                OwnObject::Version { tenant, workspace, publish_id, path } => {
                    store.version_referenced(tenant, &workspace, path, publish_id).await?
                }
                OwnObject::Archive { job_id } => store.job_pending(job_id).await?,
            };
            if used {
                continue;
            }
            self.recent.drop_keys([meta.location.as_ref()]);
            match self.objects.delete(&meta.location).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => removed += 1,
                Err(e) => return Err(e.into()),
            }
        }
        Ok(removed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn version_of_key(rest: &str) -> Option<(TenantId, WorkspaceName, Uuid, &str)> {
        match own_object_of_key(rest)? {
            OwnObject::Version { tenant, workspace, publish_id, path } => Some((tenant, workspace, publish_id, path)),
            OwnObject::Archive { .. } => None,
        }
    }

    #[test]
    fn version_keys_come_apart_into_their_places() {
        let (tenant, publish) = (Uuid::new_v4(), Uuid::new_v4());
        let key = format!("{tenant}/ws/.memoryd/versions/{publish}/memories/skills/a/SKILL.md");
        let (t, w, p, path) = version_of_key(&key).unwrap();
        assert_eq!((t, w.as_str(), p, path), (tenant, "ws", publish, "memories/skills/a/SKILL.md"));
        assert!(version_of_key(&format!("{tenant}/ws/memories/MEMORY.md")).is_none());
        assert!(version_of_key(&format!("{tenant}/ws/.memoryd/versions/{publish}")).is_none());
        assert!(version_of_key(&format!("{tenant}/ws/.memoryd/other/{publish}/x")).is_none());
        assert!(version_of_key(&format!("nope/ws/.memoryd/versions/{publish}/x")).is_none());
        let archive = format!("{tenant}/ws/.memoryd/imports/{publish}.tar.gz");
        assert!(matches!(own_object_of_key(&archive), Some(OwnObject::Archive { job_id }) if job_id == publish));
        assert!(own_object_of_key(&format!("{tenant}/ws/.memoryd/imports/{publish}")).is_none());
        assert!(own_object_of_key(&format!("{tenant}/ws/.memoryd/imports/{publish}.tar.gz/x")).is_none());
    }
}
