//! What follows an import's finish, on either storage.

use crate::jobs::WorkerContext;
use crate::store::journal_records::RolloutAt;
use crate::store::{ClaimedJob, ImportedRollout};

/// After an import's finish, done with its archive whatever the outcome
/// (here and in the bucket); where files live in a bucket, what an import
/// that did not land uploaded goes too: every file's object while the
/// database holds nothing of the workspace, else the rollouts it does not
/// know. Whether the finish refused to land the import.
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
    let removed = match ctx.store.workspace_empty(tenant, workspace).await {
        Ok(true) => bucket.remove_unrecorded_files(tenant, workspace).await.map(|_| ()).map_err(|e| e.to_string()),
        Ok(false) => {
            let mut unknown = Vec::new();
            for rollout in &rollouts {
                let at = RolloutAt { tenant, workspace, layout: &rollout.layout, rollout: &rollout.rollout_id };
                if matches!(ctx.store.rollout_parts(at).await, Ok(None)) {
                    unknown.push(rollout.rollout_path.clone());
                }
            }
            bucket.remove_rollouts(tenant, workspace, &unknown).await.map_err(|e| crate::error_chain(&e))
        }
        Err(e) => Err(crate::error_chain(&e)),
    };
    if let Err(e) = removed {
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
