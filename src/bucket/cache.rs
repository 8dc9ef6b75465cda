//! A replica's copy of the memory files of the workspaces it reads, where
//! they live in an object store (SPEC §6.1): never the truth — made from
//! the versions the database says are current, checked against the
//! workspace's generation before every read, wiped at start-up, bounded by
//! `MEMORYD_CACHE_BYTES`, and dropped for what is forgotten.
//!
//! A reader holds its workspace's copy shared while it reads; bringing a
//! copy up to date holds it alone. So a read sees one generation whole,
//! never half of a run's files.

use super::Bucket;
use super::files::FilesError;
use crate::domain::ids::WorkspaceName;
use crate::store::TenantId;
use crate::store::workspace_files::{CurrentFiles, WorkspaceFilesStore};
use crate::workspace::confine;
use futures_util::{StreamExt, TryStreamExt};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Instant;
use tokio::sync::{OwnedRwLockReadGuard, RwLock};
use uuid::Uuid;

/// One workspace's copy: which generation it is (`None`: not made yet),
/// each file's digest and size.
#[derive(Debug, Default)]
pub struct WorkspaceCopy {
    generation: Option<Option<Uuid>>,
    files: HashMap<String, (String, u64)>,
    last_read: Option<Instant>,
}

impl WorkspaceCopy {
    fn bytes(&self) -> u64 {
        self.files.values().map(|(_, bytes)| bytes).sum()
    }
}

type Key = (TenantId, WorkspaceName);

/// The file that marks a folder as a replica's copies (a tenant id is never
/// this name).
const CACHE_MARK: &str = ".memoryd-copies";

/// The copies of one replica, under `<data_dir>/workspaces`.
#[derive(Debug)]
pub struct WorkspaceCache {
    root: PathBuf,
    /// Jobs' own copies: `<jobs_root>/<tenant>/<workspace>/<job>`.
    jobs_root: PathBuf,
    limit: u64,
    copies: Mutex<HashMap<Key, Arc<RwLock<WorkspaceCopy>>>>,
}

/// A workspace's files as one generation, for as long as this is held.
pub struct ReadableWorkspace {
    root: PathBuf,
    _held: Option<OwnedRwLockReadGuard<WorkspaceCopy>>,
}

impl ReadableWorkspace {
    /// Files on a volume are read where they are: nothing is held.
    pub fn on_volume(root: PathBuf) -> Self {
        Self { root, _held: None }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }
}

/// A job's own copy of a workspace's files, which it reads for as long as
/// it runs (a consolidation takes minutes: no reader waits on it): on a
/// volume the files where they are; from a bucket, hard links to one
/// generation of the replica's copy, removed when dropped.
pub struct JobWorkspace {
    root: PathBuf,
    own: bool,
}

impl JobWorkspace {
    pub fn on_volume(root: PathBuf) -> Self {
        Self { root, own: false }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }
}

impl Drop for JobWorkspace {
    fn drop(&mut self) {
        if self.own
            && let Err(e) = remove_tree(&self.root)
        {
            tracing::warn!(error = %e, "removing a job's copy of its workspace failed");
        }
    }
}

/// Links every file under `from` to the same place under `to`.
fn link_tree(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    let entries = match std::fs::read_dir(from) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    for entry in entries {
        let entry = entry?;
        let (source, target) = (entry.path(), to.join(entry.file_name()));
        if entry.file_type()?.is_dir() {
            link_tree(&source, &target)?;
        } else {
            std::fs::hard_link(&source, &target)?;
        }
    }
    Ok(())
}

fn remove_tree(dir: &Path) -> std::io::Result<()> {
    match std::fs::remove_dir_all(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// Writes a cached file: renamed into place, not synced (a copy a crash
/// leaves is wiped at the next start).
fn write_copy(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().ok_or_else(|| std::io::Error::other("a cached file has no folder"))?;
    std::fs::create_dir_all(dir)?;
    let tmp = dir.join(format!(".memoryd-cache-{}.tmp", Uuid::new_v4()));
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, path)
}

impl WorkspaceCache {
    /// The cache under `root` (`<data_dir>/workspaces`), emptied: what an
    /// earlier life left is not known to be current. A folder that holds
    /// files but not the cache's mark is a volume's workspaces (a data dir
    /// moved to a bucket and not cleared): refused, never wiped.
    pub fn new(root: PathBuf, jobs_root: PathBuf, limit: u64) -> std::io::Result<Self> {
        let holds_files = std::fs::read_dir(&root).is_ok_and(|mut entries| entries.next().is_some());
        if holds_files && !root.join(CACHE_MARK).exists() {
            return Err(std::io::Error::other(format!(
                "{} holds a volume's workspaces, not this replica's copies: copy them into the bucket \
                 (memoryd copy-to-bucket) and move the folder away",
                root.display()
            )));
        }
        remove_tree(&root)?;
        remove_tree(&jobs_root)?;
        std::fs::create_dir_all(&root)?;
        std::fs::write(root.join(CACHE_MARK), b"")?;
        Ok(Self { root, jobs_root, limit, copies: Mutex::default() })
    }

    fn workspace_root(&self, tenant: TenantId, workspace: &WorkspaceName) -> Result<PathBuf, FilesError> {
        Ok(confine(&self.root, &format!("{tenant}/{workspace}"))?)
    }

    fn copy_of(&self, tenant: TenantId, workspace: &WorkspaceName) -> Arc<RwLock<WorkspaceCopy>> {
        let mut copies = self.copies.lock().expect("the cache's map is never poisoned");
        copies.entry((tenant, workspace.clone())).or_default().clone()
    }

    /// The workspace's files, current as of this call, held until the result is dropped.
    pub async fn readable(
        &self,
        bucket: &Bucket,
        store: &dyn WorkspaceFilesStore,
        tenant: TenantId,
        workspace: &WorkspaceName,
    ) -> Result<ReadableWorkspace, FilesError> {
        let root = self.workspace_root(tenant, workspace)?;
        let generation = store.files_generation(tenant, workspace).await?;
        let copy = self.copy_of(tenant, workspace);
        let held = copy.clone().read_owned().await;
        if held.generation == Some(generation) {
            return Ok(ReadableWorkspace { root, _held: Some(held) });
        }
        drop(held);
        let held = {
            let mut made = copy.clone().write_owned().await;
            let mut tries = 0;
            while made.generation != Some(generation) {
                let current = store.current_files(tenant, workspace).await?;
                match bring_up_to_date(bucket, tenant, workspace, &root, &mut made, current).await {
                    // A version replaced (and removed) since the listing: list again.
                    Err(FilesError::Objects(object_store::Error::NotFound { .. })) if tries < 3 => tries += 1,
                    Err(e) => return Err(e),
                    Ok(()) => break,
                }
            }
            made.last_read = Some(Instant::now());
            // Held from making to reading: nothing drops or changes it between.
            made.downgrade()
        };
        self.keep_within_limit(tenant, workspace);
        Ok(ReadableWorkspace { root, _held: Some(held) })
    }

    /// A copy of the workspace's current files for job `job_id` (see [`JobWorkspace`]).
    pub async fn job_copy(
        &self,
        bucket: &Bucket,
        store: &dyn WorkspaceFilesStore,
        tenant: TenantId,
        workspace: &WorkspaceName,
        job_id: Uuid,
    ) -> Result<JobWorkspace, FilesError> {
        let dir = confine(&self.jobs_root, &format!("{tenant}/{workspace}/{job_id}"))?;
        let readable = self.readable(bucket, store, tenant, workspace).await?;
        remove_tree(&dir)?;
        let job = JobWorkspace { root: dir, own: true };
        let (from, to) = (readable.root().to_owned(), job.root.clone());
        tokio::task::spawn_blocking(move || link_tree(&from, &to)).await.map_err(std::io::Error::other)??;
        Ok(job)
    }

    /// Drops the copies no reader holds, least recently read first, until
    /// the cache is within its limit (the one just made is kept).
    fn keep_within_limit(&self, tenant: TenantId, workspace: &WorkspaceName) {
        let copies = self.copies.lock().expect("the cache's map is never poisoned");
        let mut held: Vec<_> =
            copies.iter().filter_map(|(key, copy)| Some((key, copy.clone().try_write_owned().ok()?))).collect();
        let busy: u64 = copies.values().filter_map(|c| c.try_read().ok().map(|c| c.bytes())).sum();
        let mut total = busy + held.iter().map(|(_, c)| c.bytes()).sum::<u64>();
        held.sort_by_key(|(_, c)| c.last_read);
        for ((copy_tenant, copy_workspace), mut copy) in held {
            if total <= self.limit {
                break;
            }
            if (*copy_tenant, copy_workspace) == (tenant, workspace) {
                continue;
            }
            total -= copy.bytes();
            self.drop_copy(*copy_tenant, copy_workspace, &mut copy);
        }
    }

    fn drop_copy(&self, tenant: TenantId, workspace: &WorkspaceName, copy: &mut WorkspaceCopy) {
        *copy = WorkspaceCopy::default();
        let removed =
            self.workspace_root(tenant, workspace).map_err(std::io::Error::other).and_then(|root| remove_tree(&root));
        if let Err(e) = removed {
            tracing::warn!(%tenant, error = %e, "removing a cached workspace failed");
        }
    }

    /// Drops the copies of a forgotten tenant (`workspace` none) or
    /// workspace, waiting for their readers; the entries stay (one lock per
    /// folder, whoever holds a clone of it), made again by the next read.
    pub async fn forget(&self, tenant: TenantId, workspace: Option<&WorkspaceName>) {
        self.drop_shared_copies(tenant, workspace).await;
        let relative = match workspace {
            Some(workspace) => format!("{tenant}/{workspace}"),
            None => tenant.to_string(),
        };
        // Jobs' copies too: a job of what is forgotten is cancelled.
        for root in [&self.root, &self.jobs_root] {
            let removed = confine(root, &relative).map_err(std::io::Error::other).and_then(|dir| remove_tree(&dir));
            if let Err(e) = removed {
                tracing::warn!(%tenant, error = %e, "removing a forgotten workspace's cache failed");
            }
        }
    }

    /// Drops the copies readers share of a tenant's workspaces (`workspace`
    /// none) or of one, waiting for their readers; jobs' own copies stay
    /// (after a forget of rollouts, a job of another layout runs on).
    pub async fn drop_shared_copies(&self, tenant: TenantId, workspace: Option<&WorkspaceName>) {
        let gone: Vec<(Key, Arc<RwLock<WorkspaceCopy>>)> = {
            let copies = self.copies.lock().expect("the cache's map is never poisoned");
            copies
                .iter()
                .filter(|((t, w), _)| *t == tenant && workspace.is_none_or(|ws| ws == w))
                .map(|(k, c)| (k.clone(), c.clone()))
                .collect()
        };
        for ((tenant, workspace), copy) in gone {
            let mut copy = copy.write_owned().await;
            self.drop_copy(tenant, &workspace, &mut copy);
        }
    }

    /// Drops every copy whose workspace has moved on or is gone (another
    /// replica published or forgot): the sweep, on every replica, so that a
    /// forgotten file outlives its forget on no replica for longer than
    /// the sweep's interval. The copies dropped.
    pub async fn drop_stale(&self, store: &dyn WorkspaceFilesStore) -> usize {
        let copies: Vec<(Key, Arc<RwLock<WorkspaceCopy>>)> = {
            let copies = self.copies.lock().expect("the cache's map is never poisoned");
            copies.iter().map(|(k, c)| (k.clone(), c.clone())).collect()
        };
        let mut dropped = 0;
        for ((tenant, workspace), copy) in copies {
            let Some(made) = copy.read().await.generation else { continue };
            match store.files_generation(tenant, &workspace).await {
                Ok(now) if now == made => {}
                Ok(now) => {
                    let mut copy = copy.write().await;
                    // Brought up to date meanwhile: current, not stale.
                    if copy.generation.is_some_and(|made| made != now) {
                        self.drop_copy(tenant, &workspace, &mut copy);
                        dropped += 1;
                    }
                }
                Err(e) => tracing::warn!(error = %crate::error_chain(&e), "checking a cached workspace failed"),
            }
        }
        dropped
    }
}

/// Makes `copy` the workspace's `current` files: each file it lacks or
/// holds another version of is fetched, each it holds that is no longer
/// current removed.
async fn bring_up_to_date(
    bucket: &Bucket,
    tenant: TenantId,
    workspace: &WorkspaceName,
    root: &Path,
    copy: &mut WorkspaceCopy,
    current: CurrentFiles,
) -> Result<(), FilesError> {
    if copy.generation.is_none() && copy.files.is_empty() {
        // Never made: whatever is in its folder is not known to be current.
        remove_tree(root)?;
    }
    // Until it is whole, the copy is of no generation.
    copy.generation = None;
    let wanted: HashMap<&str, _> = current.files.iter().map(|(path, v)| (path.as_str(), v)).collect();
    let stale: Vec<String> = copy.files.keys().filter(|p| !wanted.contains_key(p.as_str())).cloned().collect();
    for path in stale {
        crate::workspace::remove_if_present(&confine(root, &path)?)?;
        copy.files.remove(&path);
    }
    // Futures made before they are streamed: a stream's closures over
    // borrowed items would not be `Send` for every lifetime.
    let fetches: Vec<_> = current
        .files
        .iter()
        .filter(|(path, v)| copy.files.get(path).is_none_or(|(sha, _)| *sha != v.sha256))
        .map(|(path, version)| async move {
            let bytes = bucket.read_version(tenant, workspace, path, version).await?;
            Ok::<_, FilesError>((path, version, bytes))
        })
        .collect();
    let mut fetched = futures_util::stream::iter(fetches).buffer_unordered(super::files::REQUESTS_AT_ONCE);
    while let Some((path, version, bytes)) = fetched.try_next().await? {
        write_copy(&confine(root, path)?, &bytes)?;
        copy.files.insert(path.clone(), (version.sha256.clone(), version.bytes));
    }
    // A bucket holds no folders: a used layout's (its memories folder has
    // a `MEMORY.md`) are made as on a volume (R-LAY-3).
    for (path, _) in &current.files {
        if let Some((memories, "MEMORY.md")) = path.rsplit_once('/') {
            for sub in crate::workspace::STARTING_FOLDERS {
                std::fs::create_dir_all(confine(root, &format!("{memories}/{sub}"))?)?;
            }
        }
    }
    copy.generation = Some(current.generation);
    Ok(())
}
