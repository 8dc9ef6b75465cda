//! What follows an import's finish, on either storage.

use crate::bucket::imports::UploadedRollout;
use crate::jobs::WorkerContext;
use crate::store::{ClaimedJob, ImportedRollout};

/// After an import's finish, done with its archive whatever the outcome
/// (here and in the bucket); where files live in a bucket, the
/// conversations an import that did not land uploaded go too (its versions
/// went with the publish it did not record). Whether the finish refused to
/// land the import.
pub(crate) async fn after_finish(
    ctx: &WorkerContext,
    claimed: &ClaimedJob,
    recorded: &Result<bool, crate::store::StoreError>,
    failed: bool,
    rollouts: Vec<ImportedRollout>,
) -> bool {
    let refused = refused_at_finish(ctx, claimed, recorded).await;
    if !matches!(recorded, Ok(true)) && !refused {
        return false;
    }
    let (tenant, workspace, job_id) = (claimed.tenant_id, &claimed.job.workspace, claimed.job.job_id);
    if let Err(e) = crate::workspace::remove_if_present(&ctx.volumes.import_archive(job_id)) {
        tracing::warn!(%job_id, error = %crate::error_chain(&e), "removing an import's archive failed");
    }
    let Some(bucket) = ctx.volumes.bucket() else { return refused };
    bucket.remove_archive(tenant, workspace, job_id).await;
    if !failed && !refused {
        return false;
    }
    // What a landed import uploaded is the workspace's; what one that did not land uploaded goes.
    let uploaded: Vec<UploadedRollout> = rollouts
        .into_iter()
        .filter_map(|r| {
            let e_tag = r.object_etag?;
            Some(UploadedRollout { layout: r.layout, rollout_id: r.rollout_id, path: r.rollout_path, e_tag })
        })
        .collect();
    if let Err(e) = bucket.remove_uploaded_rollouts(ctx.store.as_ref(), tenant, workspace, &uploaded).await {
        tracing::warn!(%job_id, error = %e, "removing what an import uploaded failed");
    }
    refused
}

/// The finish of an import that succeeded refused to land it (the job failed).
async fn refused_at_finish(
    ctx: &WorkerContext,
    claimed: &ClaimedJob,
    recorded: &Result<bool, crate::store::StoreError>,
) -> bool {
    if !matches!(recorded, Ok(false)) {
        return false;
    }
    match ctx.store.get_job(claimed.tenant_id, claimed.job.job_id).await {
        Ok(Some(job)) => job.state == crate::store::JobState::Failed,
        _ => false,
    }
}
