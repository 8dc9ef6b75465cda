//! An import job where workspace files live in a bucket: the archive is
//! fetched from the bucket to this replica, and the second pass uploads
//! what it places (`bucket::imports`).

use super::{ImportError, Placing, Plan, place};
use crate::bucket::Bucket;
use crate::bucket::imports::{ImportUploads, UploadsShared};
use crate::domain::redact::Counts;
use crate::jobs::{AttemptError, ImportStaged, WorkerContext};
use crate::store::ClaimedJob;
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::sync::Arc;

impl Placing for ImportUploads {
    fn add(&mut self, path: &str, content: &mut dyn Read) -> io::Result<u64> {
        ImportUploads::add(self, path, content)
    }
}

/// Before the first pass: the archive on this replica, and what an earlier
/// attempt killed here left beside it gone.
pub(super) async fn fetch(bucket: &Bucket, claimed: &ClaimedJob, archive: &Path) -> Result<(), AttemptError> {
    let (tenant, workspace, job_id) = (claimed.tenant_id, &claimed.job.workspace, claimed.job.job_id);
    if let Some(dir) = archive.parent() {
        for attempt in 1..claimed.job.attempts {
            for name in [format!("{job_id}.{attempt}.entry"), format!("{job_id}.{attempt}.download")] {
                crate::workspace::remove_if_present(&dir.join(name))
                    .map_err(|e| AttemptError::retryable(format!("removing an earlier attempt's file failed: {e}")))?;
            }
        }
    }
    match bucket.fetch_archive((tenant, workspace), (job_id, claimed.job.attempts), archive).await {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            Err(AttemptError::fatal(format!("invalid_archive: {e}; upload the archive again")))
        }
        Err(e) => Err(AttemptError::retryable(format!("fetching the archive failed: {e}"))),
    }
}

/// Tells the uploads to stop when the attempt is given up (its future
/// dropped: the lease was lost), so that they write nothing after it.
struct GiveUpOnDrop(Arc<UploadsShared>);

impl Drop for GiveUpOnDrop {
    fn drop(&mut self) {
        self.0.given_up.store(true, std::sync::atomic::Ordering::Release);
    }
}

/// The second pass, uploading each file as it is placed (on a blocking
/// thread); the plan with each rollout's object's ETag recorded. What a
/// pass that fails uploaded of the conversations is removed.
pub(super) async fn stage(
    ctx: &WorkerContext,
    bucket: &Bucket,
    claimed: &ClaimedJob,
    archive: PathBuf,
    mut plan: Plan,
) -> Result<Result<(Plan, (ImportStaged, Counts)), ImportError>, tokio::task::JoinError> {
    let (tenant, workspace) = (claimed.tenant_id, claimed.job.workspace.clone());
    let rollouts = plan
        .record
        .rollouts
        .iter()
        .map(|r| (r.rollout_path.clone(), (r.layout.clone(), r.rollout_id.clone())))
        .collect();
    let scratch = ctx.volumes.imports_dir().join(format!("{}.{}.entry", claimed.job.job_id, claimed.job.attempts));
    let shared = Arc::new(UploadsShared::default());
    let _give_up = GiveUpOnDrop(shared.clone());
    let mut uploads = ImportUploads::new(
        (bucket.clone(), ctx.store.clone()),
        (tenant, workspace.clone()),
        scratch,
        rollouts,
        shared.clone(),
    );
    let placed = shared.clone();
    let staged = tokio::task::spawn_blocking(move || {
        let counts = place(&archive, &mut plan, &mut uploads)?;
        let versions = uploads.finish();
        for uploaded in placed.rollouts.lock().expect("never poisoned").iter() {
            if let Some(rollout) = plan.record.rollouts.iter_mut().find(|r| r.rollout_path == uploaded.path) {
                rollout.object_etag = Some(uploaded.e_tag.clone());
            }
        }
        Ok((plan, (ImportStaged::Bucket(versions), counts)))
    })
    .await;
    if !matches!(staged, Ok(Ok(_))) {
        let uploaded = shared.rollouts.lock().expect("never poisoned").clone();
        if let Err(e) = bucket.remove_uploaded_rollouts(ctx.store.as_ref(), tenant, &workspace, &uploaded).await {
            tracing::warn!(job_id = %claimed.job.job_id, error = %e, "removing what a failed import uploaded failed");
        }
    }
    staged
}
