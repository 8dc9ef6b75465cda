//! Imports where workspace files live in a bucket (SPEC §2.7, §6.1). The
//! uploaded archive is kept as an object of the workspace's own folder
//! (`.memoryd/imports/<job id>.tar.gz`), so the import job may run on any
//! replica. Its second pass uploads each file as it is placed: a rollout at
//! its key, recorded by the finish with the object's ETag; every other file
//! as a version of one publish, made current by the same finish.

use super::Bucket;
use super::copy::{CopyError, upload};
use crate::domain::ids::WorkspaceName;
use crate::store::workspace_files::{FileVersion, VersionChanges};
use crate::workspace::archive::ArchiveEntry;
use std::collections::HashSet;
use std::io;
use std::path::{Path, PathBuf};
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

    /// Brings job `job_id`'s archive to `local` (written aside, then renamed
    /// into place) unless this replica has it already; `NotFound` when the
    /// bucket has it no more.
    pub async fn fetch_archive(
        &self,
        tenant: Uuid,
        workspace: &WorkspaceName,
        job_id: Uuid,
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
        let aside = local.with_file_name(format!("{job_id}.download"));
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

    /// Removes every object at a file's key in a workspace the database
    /// holds nothing of: what an import that did not land uploaded (an
    /// attempt killed, or the job failed). memoryd's own folder is left:
    /// its versions go by the sweep, the archive with its job.
    pub async fn remove_unrecorded_files(
        &self,
        tenant: Uuid,
        workspace: &WorkspaceName,
    ) -> Result<usize, object_store::Error> {
        use futures_util::TryStreamExt;
        let prefix = object_store::path::Path::parse(self.url.workspace_prefix(tenant, workspace))?;
        let own = format!("{}/{}/", prefix.as_ref(), super::files::OWN_FOLDER);
        let keys: Vec<_> = self
            .objects
            .list(Some(&prefix))
            .try_filter(|meta| std::future::ready(!meta.location.as_ref().starts_with(&own)))
            .map_ok(|meta| meta.location)
            .try_collect()
            .await?;
        let removed = keys.len();
        self.remove_objects(keys).await?;
        Ok(removed)
    }
}

/// An import's files uploaded one at a time as its second pass reads them
/// (from a blocking thread: each upload is waited for on the runtime).
pub struct ImportUploads {
    bucket: Bucket,
    tenant: Uuid,
    workspace: WorkspaceName,
    runtime: tokio::runtime::Handle,
    /// Where an entry is written before it is uploaded (its length and
    /// digest known, a large one sent in parts).
    scratch: PathBuf,
    rollouts: HashSet<String>,
    versions: VersionChanges,
    /// Each rollout's path and the ETag of the object that holds it.
    uploaded_rollouts: Vec<(String, String)>,
}

impl ImportUploads {
    /// `rollouts`: the paths that are conversations (written at their keys).
    pub fn new(
        bucket: Bucket,
        tenant: Uuid,
        workspace: WorkspaceName,
        scratch: PathBuf,
        rollouts: HashSet<String>,
    ) -> Self {
        Self {
            bucket,
            tenant,
            workspace,
            runtime: tokio::runtime::Handle::current(),
            scratch,
            rollouts,
            versions: VersionChanges { publish_id: Uuid::new_v4(), files: Vec::new() },
            uploaded_rollouts: Vec::new(),
        }
    }

    /// Uploads `path` with what `content` holds; the bytes written.
    pub fn add(&mut self, path: &str, content: &mut dyn io::Read) -> io::Result<u64> {
        let len = {
            let mut file = std::fs::File::create(&self.scratch)?;
            io::copy(content, &mut file)?
        };
        let rollout = self.rollouts.contains(path);
        let (tenant, workspace, publish_id) = (self.tenant, &self.workspace, self.versions.publish_id);
        let key = if rollout {
            self.bucket.url.object_key(tenant, workspace, path)
        } else {
            self.bucket.version_key(tenant, workspace, publish_id, path)
        }
        .map_err(io::Error::other)?;
        let entry = ArchiveEntry { relative: path.to_owned(), source: self.scratch.clone(), len, modified: 0 };
        let written = self.runtime.block_on(upload(&self.bucket.objects, key, entry)).map_err(io_error)?;
        if rollout {
            let e_tag = written.e_tag.ok_or_else(|| io::Error::other("the bucket gave the rollout no ETag"))?;
            self.uploaded_rollouts.push((path.to_owned(), e_tag));
        } else {
            let version = FileVersion { publish_id, bytes: len, sha256: hex::encode(written.digest) };
            self.versions.files.push((path.to_owned(), Some(version)));
        }
        Ok(len)
    }

    /// The versions to make current, and each rollout's object's ETag.
    pub fn finish(mut self) -> (VersionChanges, Vec<(String, String)>) {
        let versions =
            VersionChanges { publish_id: self.versions.publish_id, files: std::mem::take(&mut self.versions.files) };
        (versions, std::mem::take(&mut self.uploaded_rollouts))
    }
}

impl Drop for ImportUploads {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.scratch);
    }
}
