//! An import job where workspace files live in a bucket: the archive is
//! fetched from the bucket to this replica, and the second pass uploads
//! what it places (`bucket::imports`).

use super::{ImportError, Placing, Plan, place};
use crate::bucket::Bucket;
use crate::bucket::imports::ImportUploads;
use crate::domain::redact::Counts;
use crate::jobs::{AttemptError, ImportStaged};
use crate::store::ClaimedJob;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

impl Placing for ImportUploads {
    fn add(&mut self, path: &str, content: &mut dyn Read) -> io::Result<u64> {
        ImportUploads::add(self, path, content)
    }
}

/// Before the first pass: the archive on this replica, and what an earlier
/// attempt of the import uploaded before it died gone (the database holds
/// nothing of the workspace: an attempt checks that first).
pub(super) async fn prepare(bucket: &Bucket, claimed: &ClaimedJob, archive: &Path) -> Result<(), AttemptError> {
    let (tenant, workspace, job_id) = (claimed.tenant_id, &claimed.job.workspace, claimed.job.job_id);
    match bucket.fetch_archive(tenant, workspace, job_id, archive).await {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(AttemptError::fatal(format!("invalid_archive: {e}")));
        }
        Err(e) => return Err(AttemptError::retryable(format!("fetching the archive failed: {e}"))),
    }
    let removed = bucket
        .remove_unrecorded_files(tenant, workspace)
        .await
        .map_err(|e| AttemptError::retryable(format!("removing an earlier attempt's objects failed: {e}")))?;
    if removed > 0 {
        tracing::info!(%job_id, removed, "removed the objects of an import that did not land");
    }
    Ok(())
}

/// The second pass, uploading each file as it is placed (on a blocking
/// thread); the plan with each rollout's object's ETag recorded.
pub(super) async fn stage(
    bucket: &Bucket,
    claimed: &ClaimedJob,
    archive: PathBuf,
    mut plan: Plan,
    scratch_dir: PathBuf,
) -> Result<Result<(Plan, (ImportStaged, Counts)), ImportError>, tokio::task::JoinError> {
    let rollouts = plan.record.rollouts.iter().map(|r| r.rollout_path.clone()).collect();
    let scratch = scratch_dir.join(format!("{}.entry", claimed.job.job_id));
    let mut uploads =
        ImportUploads::new(bucket.clone(), claimed.tenant_id, claimed.job.workspace.clone(), scratch, rollouts);
    tokio::task::spawn_blocking(move || {
        let counts = place(&archive, &mut plan, &mut uploads)?;
        let (versions, etags) = uploads.finish();
        for (path, etag) in etags {
            if let Some(rollout) = plan.record.rollouts.iter_mut().find(|r| r.rollout_path == path) {
                rollout.object_etag = Some(etag);
            }
        }
        Ok((plan, (ImportStaged::Bucket(versions), counts)))
    })
    .await
}
