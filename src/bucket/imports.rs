//! Imports where workspace files live in a bucket (SPEC §2.7, §6.1). The
//! uploaded archive is kept as an object of the workspace's own folder
//! (`.memoryd/imports/<job id>.tar.gz`), so the import job may run on any
//! replica. Its second pass uploads each file as it is placed: a rollout at
//! its key, recorded by the finish with the object's ETag; every other file
//! as a version of one publish, made current by the same finish.

use super::Bucket;
use super::copy::{CopyError, upload};
use crate::domain::ids::{LayoutName, RolloutId, WorkspaceName};
use crate::store::DynStore;
use crate::store::journal_records::{RolloutAt, RolloutJournalStore};
use crate::store::workspace_files::{FileVersion, VersionChanges};
use crate::workspace::archive::ArchiveEntry;
use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use uuid::Uuid;

fn io_error(e: CopyError) -> io::Error {
    match e {
        CopyError::Volume(e) => e,
        other => io::Error::other(other),
    }
}

impl Bucket {
    /// Where an uploaded archive waits for its import job.
    fn archive_key(&self, tenant: Uuid, workspace: &WorkspaceName, job_id: Uuid) -> object_store::path::Path {
        self.url.own_key(tenant, workspace, &format!("imports/{job_id}.tar.gz")).expect("a job id is a plain name")
    }

    /// Keeps the archive at `local` for the job `job_id`, on any replica.
    pub async fn put_archive(
        &self,
        tenant: Uuid,
        workspace: &WorkspaceName,
        job_id: Uuid,
        local: &Path,
    ) -> io::Result<()> {
        let len = tokio::fs::metadata(local).await?.len();
        let entry = ArchiveEntry { relative: format!("{job_id}.tar.gz"), source: local.to_owned(), len, modified: 0 };
        upload(&self.objects, self.archive_key(tenant, workspace, job_id), entry).await.map_err(io_error)?;
        Ok(())
    }

    /// Brings job `job_id`'s archive to `local` (written aside under a name
    /// of attempt `attempt`'s, then renamed into place) unless this replica
    /// has it already; `NotFound` when the bucket has it no more.
    pub async fn fetch_archive(
        &self,
        (tenant, workspace): (Uuid, &WorkspaceName),
        (job_id, attempt): (Uuid, i64),
        local: &Path,
    ) -> io::Result<()> {
        use futures_util::TryStreamExt;
        use tokio::io::AsyncWriteExt;
        if tokio::fs::try_exists(local).await? {
            return Ok(());
        }
        let got = match self.objects.get(&self.archive_key(tenant, workspace, job_id)).await {
            Ok(got) => got,
            Err(object_store::Error::NotFound { .. }) => {
                return Err(io::Error::new(io::ErrorKind::NotFound, "the import's archive is gone from the bucket"));
            }
            Err(e) => return Err(io::Error::other(e)),
        };
        if let Some(dir) = local.parent() {
            tokio::fs::create_dir_all(dir).await?;
        }
        let aside = local.with_file_name(format!("{job_id}.{attempt}.download"));
        let mut file = tokio::fs::File::create(&aside).await?;
        let mut stream = got.into_stream();
        while let Some(chunk) = stream.try_next().await.map_err(io::Error::other)? {
            file.write_all(&chunk).await?;
        }
        file.sync_all().await?;
        tokio::fs::rename(&aside, local).await
    }

    /// Removes job `job_id`'s archive from the bucket (done with, or never queued).
    pub async fn remove_archive(&self, tenant: Uuid, workspace: &WorkspaceName, job_id: Uuid) {
        if let Err(e) = self.remove_objects(vec![self.archive_key(tenant, workspace, job_id)]).await {
            tracing::warn!(%job_id, error = %e, "removing an import's archive from the bucket failed");
        }
    }

    /// Removes the rollouts an import uploaded that did not land: each
    /// whose rollout the database does not know and whose object is still
    /// the one the import wrote (same ETag) — never another's at that key.
    pub async fn remove_uploaded_rollouts(
        &self,
        store: &dyn RolloutJournalStore,
        tenant: Uuid,
        workspace: &WorkspaceName,
        uploaded: &[UploadedRollout],
    ) -> Result<(), String> {
        let mut gone = Vec::new();
        for rollout in uploaded {
            let at = RolloutAt { tenant, workspace, layout: &rollout.layout, rollout: &rollout.rollout_id };
            if store.rollout_parts(at).await.map_err(|e| crate::error_chain(&e))?.is_some() {
                continue;
            }
            let key = self.url.object_key(tenant, workspace, &rollout.path).map_err(|e| e.to_string())?;
            match self.objects.head(&key).await {
                Ok(meta) if meta.e_tag.as_deref() == Some(rollout.e_tag.as_str()) => gone.push(key),
                Ok(_) | Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => return Err(e.to_string()),
            }
        }
        self.remove_objects(gone).await.map_err(|e| e.to_string())
    }
}

/// A conversation an import wrote to its key.
#[derive(Debug, Clone)]
pub struct UploadedRollout {
    pub layout: LayoutName,
    pub rollout_id: RolloutId,
    pub path: String,
    pub e_tag: String,
}

/// What the attempt's other tasks share with its uploads: whether to go on,
/// and what was uploaded (kept when an upload fails, to be removed).
#[derive(Debug, Default)]
pub struct UploadsShared {
    pub given_up: std::sync::atomic::AtomicBool,
    pub rollouts: std::sync::Mutex<Vec<UploadedRollout>>,
}

/// An import's files uploaded one at a time as its second pass reads them
/// (from a blocking thread: each request is waited for on the runtime).
pub struct ImportUploads {
    bucket: Bucket,
    store: DynStore,
    tenant: Uuid,
    workspace: WorkspaceName,
    runtime: tokio::runtime::Handle,
    /// Where an entry is written before it is uploaded (its length and
    /// digest known, a large one sent in parts): the attempt's own.
    scratch: PathBuf,
    /// The paths that are conversations (written at their keys), and whose.
    rollouts: HashMap<String, (LayoutName, RolloutId)>,
    versions: VersionChanges,
    shared: Arc<UploadsShared>,
}

impl ImportUploads {
    pub fn new(
        (bucket, store): (Bucket, DynStore),
        (tenant, workspace): (Uuid, WorkspaceName),
        scratch: PathBuf,
        rollouts: HashMap<String, (LayoutName, RolloutId)>,
        shared: Arc<UploadsShared>,
    ) -> Self {
        let versions = VersionChanges { publish_id: Uuid::new_v4(), files: Vec::new() };
        let runtime = tokio::runtime::Handle::current();
        Self { bucket, store, tenant, workspace, runtime, scratch, rollouts, versions, shared }
    }

    /// Uploads `path` with what `content` holds; the bytes written. A
    /// conversation is written at its key only while the database knows no
    /// rollout there (it would be another's: the import may not land).
    pub fn add(&mut self, path: &str, content: &mut dyn io::Read) -> io::Result<u64> {
        let len = {
            let mut file = std::fs::File::create(&self.scratch)?;
            io::copy(content, &mut file)?
        };
        if self.shared.given_up.load(std::sync::atomic::Ordering::Acquire) {
            return Err(io::Error::other("the attempt was given up"));
        }
        let (tenant, workspace, publish_id) = (self.tenant, &self.workspace, self.versions.publish_id);
        let rollout = self.rollouts.get(path);
        let key = match rollout {
            Some((layout, rollout_id)) => {
                let at = RolloutAt { tenant, workspace, layout, rollout: rollout_id };
                if self.runtime.block_on(self.store.rollout_parts(at)).map_err(io::Error::other)?.is_some() {
                    return Err(io::Error::other(format!("{path} became a conversation of the workspace meanwhile")));
                }
                self.bucket.url.object_key(tenant, workspace, path)
            }
            None => self.bucket.version_key(tenant, workspace, publish_id, path),
        }
        .map_err(io::Error::other)?;
        let entry = ArchiveEntry { relative: path.to_owned(), source: self.scratch.clone(), len, modified: 0 };
        let written = self.runtime.block_on(upload(&self.bucket.objects, key, entry)).map_err(io_error)?;
        match rollout {
            Some((layout, rollout_id)) => {
                let e_tag = written.e_tag.ok_or_else(|| io::Error::other("the bucket gave the rollout no ETag"))?;
                let uploaded = UploadedRollout {
                    layout: layout.clone(),
                    rollout_id: rollout_id.clone(),
                    path: path.to_owned(),
                    e_tag,
                };
                self.shared.rollouts.lock().expect("never poisoned").push(uploaded);
            }
            None => {
                let version = FileVersion { publish_id, bytes: len, sha256: hex::encode(written.digest) };
                self.versions.files.push((path.to_owned(), Some(version)));
            }
        }
        Ok(len)
    }

    /// The versions to make current.
    pub fn finish(mut self) -> VersionChanges {
        VersionChanges { publish_id: self.versions.publish_id, files: std::mem::take(&mut self.versions.files) }
    }
}

impl Drop for ImportUploads {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.scratch);
    }
}
