//! The recording of an attempt: its outcome made into what the store records,
//! its files staged, the fenced finish, then the files made visible and the
//! session settled; and the recovery of publishes their writers left behind.

use super::finisher::Recorded;
use super::{
    AttemptError, Completion, FinishedAttempt, ImportStaged, Imported, WorkerContext, WorkerSettings, backoff,
};
use crate::domain::redact::{Counts, add_counts};
use crate::llm::TokenUsage;
use crate::store::workspace_files::VersionChanges;
use crate::store::{
    ClaimedJob, FileHistory, JobAccounting, JobFinish, JobKind, JobOutcome, PhaseTwoReport, PublishDecision,
    RunHistory, RunState,
};
use crate::workspace::publish::{FileChanges, Manifest, PublishScope, Publisher};
use chrono::Utc;

fn merged_usage(previous: Option<&TokenUsage>, attempt: TokenUsage) -> TokenUsage {
    let mut total = previous.copied().unwrap_or_default();
    total.add(attempt);
    total
}

/// What the store records for an attempt's result.
fn finish_for(
    claimed: &ClaimedJob,
    result: Result<Completion, AttemptError>,
    phase_two: Option<PhaseTwoReport>,
    publish_id: Option<uuid::Uuid>,
    settings: &WorkerSettings,
) -> JobFinish {
    let previous = claimed.job.usage.as_ref();
    let counting = |attempt_usage| JobAccounting { attempt_usage, ..JobAccounting::default() };
    match result {
        Ok(c) => JobFinish {
            outcome: c.outcome,
            phase_two,
            usage: merged_usage(previous, c.usage),
            publish_id,
            redactions: c.redactions,
            accounting: counting(c.usage),
            import: None,
            passages: None,
            versions: None,
        },
        Err(AttemptError::Fatal { message }) => JobFinish {
            outcome: JobOutcome::Failed { error: message },
            phase_two,
            usage: merged_usage(previous, TokenUsage::default()),
            publish_id: None,
            redactions: Counts::new(),
            accounting: JobAccounting::default(),
            import: None,
            passages: None,
            versions: None,
        },
        Err(AttemptError::Retryable { message, retry_after, usage, token_limit }) => {
            let outcome = if claimed.job.attempts >= settings.max_attempts {
                JobOutcome::Failed { error: message }
            } else {
                let delay = backoff(claimed.job.attempts, settings.retry_base, retry_after);
                let at = Utc::now() + chrono::Duration::from_std(delay).unwrap_or(chrono::Duration::hours(1));
                JobOutcome::RetryAt { at, error: message, token_limit }
            };
            JobFinish {
                outcome,
                phase_two,
                usage: merged_usage(previous, usage),
                publish_id: None,
                redactions: Counts::new(),
                accounting: counting(usage),
                import: None,
                passages: None,
                versions: None,
            }
        }
    }
}

fn outcome_name(outcome: &JobOutcome) -> &'static str {
    match outcome {
        JobOutcome::Succeeded { .. } => "succeeded",
        JobOutcome::Skipped => "skipped",
        JobOutcome::RetryAt { .. } => "retry",
        JobOutcome::Failed { .. } => "failed",
    }
}

fn scope_of(claimed: &ClaimedJob) -> PublishScope {
    PublishScope {
        job_id: claimed.job.job_id,
        tenant: claimed.tenant_id,
        workspace: claimed.job.workspace.as_str().to_owned(),
        layout: claimed.job.layout.as_str().to_owned(),
    }
}

/// What a run's changes do to its memory folder: each changed file's
/// content before (read from disk, where the job alone writes while it
/// runs) and after, by path relative to the folder.
fn history_of(root: &std::path::Path, memories_dir: &str, files: &FileChanges) -> std::io::Result<Vec<FileHistory>> {
    let prefix = format!("{memories_dir}/");
    let mut history = Vec::new();
    for (path, after) in &files.edits {
        let Some(relative) = path.strip_prefix(&prefix) else { continue };
        let dest = crate::workspace::confine(root, path).map_err(std::io::Error::other)?;
        let before = match std::fs::read(&dest) {
            Ok(bytes) => Some(bytes),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(e),
        };
        if before != *after {
            history.push(FileHistory { path: relative.to_owned(), before, after: after.clone() });
        }
    }
    Ok(history)
}

/// Redacts, with the layout's rules, every text file `files` writes under
/// its memory folder; the counts by rule.
fn redact_memory_files(layout: &crate::domain::layout::ValidLayout, files: &mut FileChanges) -> Counts {
    let mut counts = Counts::new();
    let redactor = layout.redactor();
    if redactor.is_off() {
        return counts;
    }
    let prefix = format!("{}/", layout.memories_dir.normalized);
    for (path, content) in files.edits.iter_mut() {
        let Some(bytes) = content.as_mut().filter(|_| path.starts_with(&prefix)) else { continue };
        if let Ok(text) = std::str::from_utf8(bytes) {
            let redacted = redactor.redact_text(text, &mut counts);
            if redacted != text {
                *bytes = redacted.into_bytes();
            }
        }
    }
    counts
}

/// An attempt's files, written where readers do not see them yet.
enum StagedFiles {
    /// Beside their destinations on the volume, listed by a manifest.
    Volume(Manifest),
    /// As versions in the bucket, made current by the finish.
    Bucket(VersionChanges),
}

/// What an attempt staged: its files, an import's rows, what the publish
/// changes of the layout's passages.
struct Staged {
    files: StagedFiles,
    import: Option<crate::store::ImportRecord>,
    passages: Option<crate::store::PassageChanges>,
}

/// Stages `files` where the workspace's files live, with the history of a
/// run that keeps one (each file as it was, read where readers read it).
async fn stage_where_they_live(
    ctx: &WorkerContext,
    claimed: &ClaimedJob,
    files: FileChanges,
    keeps_history: bool,
) -> std::io::Result<(StagedFiles, Option<Vec<FileHistory>>)> {
    let memories_dir = claimed.layout.memories_dir.normalized.clone();
    let (tenant, workspace) = (claimed.tenant_id, &claimed.job.workspace);
    if let Some(bucket) = ctx.volumes.bucket() {
        let history = if keeps_history {
            let readable =
                ctx.volumes.readable(ctx.store.as_ref(), tenant, workspace).await.map_err(std::io::Error::other)?;
            Some(history_of(readable.root(), &memories_dir, &files)?)
        } else {
            None
        };
        let staged = bucket.stage_versions(tenant, workspace, files).await.map_err(std::io::Error::other)?;
        return Ok((StagedFiles::Bucket(staged), history));
    }
    let root = ctx.volumes.workspace_root(tenant, workspace).map_err(std::io::Error::other)?;
    let (publisher, scope) = (ctx.publisher.clone(), scope_of(claimed));
    tokio::task::spawn_blocking(move || {
        let history = if keeps_history { Some(history_of(&root, &memories_dir, &files)?) } else { None };
        Ok((StagedFiles::Volume(publisher.stage(scope, &root, files)?), history))
    })
    .await
    .map_err(std::io::Error::other)?
}

/// Writes an attempt's files under temporary names with the manifest that
/// lists them, and fills in a successful run's history; a failure to write
/// them fails the attempt.
async fn stage_files(
    ctx: &WorkerContext,
    claimed: &ClaimedJob,
    result: Result<Completion, AttemptError>,
    report: &mut Option<PhaseTwoReport>,
) -> (Result<Completion, AttemptError>, Option<Staged>) {
    let result = match result {
        Ok(Completion { imported: Some(imported), outcome, files, usage, redactions }) => {
            let Imported { staged, record } = *imported;
            let completion = Completion { outcome, files, usage, redactions, imported: None };
            let files = match staged {
                ImportStaged::Volume(manifest) => StagedFiles::Volume(manifest),
                ImportStaged::Bucket(versions) => StagedFiles::Bucket(versions),
            };
            return (Ok(completion), Some(Staged { files, import: Some(record), passages: None }));
        }
        other => other,
    };
    let Ok(Completion { outcome, files: Some(mut files), usage, mut redactions, imported: None }) = result else {
        return (result, None);
    };
    let keeps_history = report.as_ref().is_some_and(|r| r.run.state == RunState::Succeeded);
    // SPEC §4: whatever a job publishes under the memory folder (phase one's
    // files, the consolidation agent's edits, a restore) is redacted here,
    // the one place every kind passes through.
    let in_files = redact_memory_files(&claimed.layout, &mut files);
    crate::metrics::redactions("memory_files", &in_files);
    if let Some(report) = report.as_mut() {
        report.run.redactions = in_files.clone();
    }
    add_counts(&mut redactions, &in_files);
    // Phase one's rollout summaries are indexed with the phase two that
    // follows: its finishes stay the plain batch they are.
    let passages = (claimed.job.kind != JobKind::PhaseOne)
        .then(|| super::indexer::passage_changes(&claimed.layout.memories_dir.normalized, &files));
    match stage_where_they_live(ctx, claimed, files, keeps_history).await {
        Ok((staged_files, history)) => {
            if let (Some(report), Some(mut files)) = (report.as_mut(), history) {
                let forget = claimed.job.kind == JobKind::Forget;
                if forget {
                    // A forget's history keeps the files as it left them; the
                    // files it removed (named after what it forgot) are not listed.
                    files.retain(|f| f.after.is_some());
                }
                report.history = Some(RunHistory { files, keep_runs: ctx.settings.history_runs, forget });
            }
            let staged = Staged { files: staged_files, import: None, passages };
            (Ok(Completion::without_files(outcome, usage, redactions)), Some(staged))
        }
        Err(e) => {
            let message = format!("writing the memory files failed: {e}");
            (Err(AttemptError::spent(message, usage)), None)
        }
    }
}

/// The tenant's `model_tokens_per_day`, when this attempt used tokens and
/// the tenant has one (SPEC §2.9); the finish holds the tenant's model jobs
/// in its own transaction once the day's tokens reach it. Unknown (the
/// database failing) counts as none: the next finish sees it.
async fn token_budget(ctx: &WorkerContext, claimed: &ClaimedJob, used: TokenUsage) -> Option<u64> {
    if used.input_tokens + used.output_tokens == 0 {
        return None;
    }
    let set = match ctx.store.tenant_limits(claimed.tenant_id).await {
        Ok(set) => set,
        Err(e) => {
            tracing::warn!(tenant_id = %claimed.tenant_id, error = %crate::error_chain(&e), "reading the token budget failed");
            None
        }
    };
    set.unwrap_or_default().over(ctx.settings.default_limits).model_tokens_per_day.filter(|n| *n > 0)
}

/// Makes a staged publish visible (`commit`) or removes it, off the runtime's threads.
async fn settle_publish(publisher: &Publisher, manifest: Manifest, commit: bool) {
    let publisher = publisher.clone();
    let publish_id = manifest.publish_id;
    let done =
        tokio::task::spawn_blocking(
            move || {
                if commit { manifest.apply(&publisher) } else { manifest.discard(&publisher) }
            },
        )
        .await
        .map_err(std::io::Error::other)
        .and_then(|r| r);
    if let Err(e) = done {
        // The manifest stays; the next attempt in this layout or the next start finishes it.
        tracing::error!(%publish_id, commit, error = %crate::error_chain(&e), "finishing a publish failed; it is retried later");
    }
}

/// Finishes the publishes of this job's layout that their writers left
/// behind (a crash, a lost lease) before the attempt reads or writes the
/// folder: committed ones are completed, abandoned ones undone. `scope`
/// `None` means every layout (at start-up).
pub async fn recover_publishes(ctx: &WorkerContext, own: Option<&PublishScope>) {
    let same_layout = |s: &PublishScope| {
        own.is_none_or(|o| o.tenant == s.tenant && o.workspace == s.workspace && o.layout == s.layout)
    };
    let owner = PublishOwner::Worker { own_job: own.map(|o| o.job_id) };
    finish_pending_publishes(ctx.store.as_ref(), &ctx.publisher, same_layout, owner).await
}

/// Who finishes pending publishes, and so which it may touch.
#[derive(Debug, Clone, Copy)]
pub enum PublishOwner {
    /// A worker about to use a layout (or starting up): it completes the
    /// committed and undoes the abandoned. A publish of `own_job` (an
    /// earlier attempt of the job now held) will never commit.
    Worker { own_job: Option<uuid::Uuid> },
    /// A reader: it only completes committed publishes. Undoing is left to
    /// the workers, whose claims fence out a writer that is merely slow.
    Reader,
}

/// Completes the committed publishes of the scopes `in_scope` accepts and
/// (for a worker) undoes the abandoned ones; those whose writer may still
/// commit are left. Readers call it before they read, so that once any file
/// of a run has been seen every later read sees all of them: completing a
/// publish is idempotent, so its writer and any number of readers may race.
pub async fn finish_pending_publishes(
    store: &dyn crate::store::Store,
    publisher: &Publisher,
    in_scope: impl Fn(&PublishScope) -> bool,
    owner: PublishOwner,
) {
    let own_job = match owner {
        PublishOwner::Worker { own_job } => own_job,
        PublishOwner::Reader => None,
    };
    let lister = publisher.clone();
    let pending = match tokio::task::spawn_blocking(move || lister.pending()).await {
        Ok(Ok(pending)) => pending,
        Ok(Err(e)) => return tracing::warn!(error = %crate::error_chain(&e), "listing pending publishes failed"),
        Err(e) => return tracing::warn!(error = %crate::error_chain(&e), "listing pending publishes failed"),
    };
    for manifest in pending.into_iter().filter(|m| in_scope(&m.scope)) {
        let decision = match store.publish_decision(manifest.scope.job_id, manifest.publish_id, Utc::now()).await {
            Ok(PublishDecision::Pending) if own_job == Some(manifest.scope.job_id) => PublishDecision::Abandoned,
            Ok(decision) => decision,
            Err(e) => {
                tracing::warn!(publish_id = %manifest.publish_id, error = %crate::error_chain(&e), "deciding a pending publish failed");
                continue;
            }
        };
        match decision {
            PublishDecision::Pending => {}
            PublishDecision::Committed => {
                tracing::info!(publish_id = %manifest.publish_id, "completing a publish its writer has not finished");
                settle_publish(publisher, manifest, true).await;
            }
            PublishDecision::Abandoned if matches!(owner, PublishOwner::Reader) => {}
            PublishDecision::Abandoned => {
                tracing::info!(publish_id = %manifest.publish_id, "undoing a publish that was never recorded");
                settle_publish(publisher, manifest, false).await;
            }
        }
    }
}

/// The sessions whose closes a job serves: a phase-two job's joined closes,
/// a phase-one job's own.
pub(super) fn served_sessions(claimed: &ClaimedJob) -> Vec<crate::domain::ids::SessionId> {
    let joined = claimed.job.sessions.iter().filter_map(|s| crate::domain::ids::SessionId::parse(s));
    let mut sessions: Vec<_> = joined.collect();
    if sessions.is_empty() {
        sessions.extend(claimed.job.session_id.clone());
    }
    sessions
}

/// Before an attempt touches its layout's files.
pub(super) async fn prepare_attempt(ctx: &WorkerContext, claimed: &ClaimedJob) {
    recover_publishes(ctx, Some(&scope_of(claimed))).await;
}

/// Settles the sessions a finished job served that have nothing left to
/// run, and wakes the deliveries and streams when that recorded an event.
async fn settle_served_sessions(
    ctx: &WorkerContext,
    claimed: &ClaimedJob,
    settleable: &[crate::domain::ids::SessionId],
    failed: bool,
) {
    let stage_started = std::time::Instant::now();
    let mut closed_any = false;
    for session in settleable {
        match ctx.store.settle_session(claimed.tenant_id, session).await {
            Ok(closed) => closed_any |= closed,
            Err(e) => {
                tracing::warn!(session_id = %session, error = %crate::error_chain(&e), "settling the session failed; the sweep will")
            }
        }
    }
    crate::metrics::job_stage(claimed.job.kind.as_str(), "settle", stage_started.elapsed());
    // A phase one that did not fail records no event of its own, only a
    // session it closed does: waking the deliveries and the streams for
    // nothing would cost them a query for every job.
    if closed_any || claimed.job.kind != JobKind::PhaseOne || failed {
        ctx.events.committed();
    }
}

/// Records an attempt's outcome, if this worker still owns the job, and
/// then makes its files visible.
pub(super) async fn record(ctx: &WorkerContext, finished: FinishedAttempt) {
    let FinishedAttempt { claimed, attempt: (result, mut report), started } = finished;
    let job_id = claimed.job.job_id;
    let kind = claimed.job.kind.as_str();
    let stage_started = std::time::Instant::now();
    let (result, staged) = stage_files(ctx, &claimed, result, &mut report).await;
    crate::metrics::job_stage(kind, "stage", stage_started.elapsed());
    let (staged, import, passages) = staged.map_or((None, None, None), |s| (Some(s.files), s.import, s.passages));
    let publish_id = staged.as_ref().map(|files| match files {
        StagedFiles::Volume(manifest) => manifest.publish_id,
        StagedFiles::Bucket(versions) => versions.publish_id,
    });
    let mut finish = finish_for(&claimed, result, report, publish_id, &ctx.settings);
    if publish_id.is_some() {
        finish.passages = passages;
    }
    let published_passages = finish.passages.is_some();
    match &staged {
        // The finish counts what the versions add against the ones they
        // replace; an import's rollouts, new objects, add their bytes.
        Some(StagedFiles::Bucket(versions)) => {
            finish.versions = Some(versions.clone());
            let rollouts = import.iter().flat_map(|record| &record.rollouts);
            finish.accounting.storage_delta = rollouts.map(|r| r.len as i64).sum();
        }
        Some(StagedFiles::Volume(manifest)) => finish.accounting.storage_delta = manifest.bytes_delta,
        None => {}
    }
    finish.accounting.model_tokens_per_day = token_budget(ctx, &claimed, finish.accounting.attempt_usage).await;
    // What a bucket's import uploaded goes if it does not land.
    let imported_rollouts = import.as_ref().map(|record| record.rollouts.clone()).unwrap_or_default();
    finish.import = import;
    let outcome = outcome_name(&finish.outcome);
    let error = match &finish.outcome {
        JobOutcome::RetryAt { error, .. } | JobOutcome::Failed { error } => Some(error.clone()),
        _ => None,
    };
    let finished = !matches!(finish.outcome, JobOutcome::RetryAt { .. });
    let failed = matches!(finish.outcome, JobOutcome::Failed { .. });
    let stage_started = std::time::Instant::now();
    let recorded = ctx.finisher.finish(&claimed, finish).await;
    crate::metrics::job_stage(kind, "finish", stage_started.elapsed());
    let stage_started = std::time::Instant::now();
    match (staged, &recorded) {
        (Some(StagedFiles::Volume(manifest)), Ok(recorded)) => {
            settle_publish(&ctx.publisher, manifest, recorded.owned).await
        }
        (Some(StagedFiles::Bucket(versions)), Ok(recorded)) if let Some(bucket) = ctx.volumes.bucket() => {
            // A forget's removals are done before its completion is told (its event, its waiters).
            let wait = claimed.job.kind == JobKind::Forget;
            let (store, tenant) = (ctx.store.clone(), claimed.tenant_id);
            bucket.settle_versions(store, tenant, &claimed.job.workspace, versions, recorded.owned, wait).await
        }
        // Whether the commit happened is unknown: the database decides when
        // the manifest is recovered. Versions staged with no bucket: none.
        (Some(_), _) | (None, _) => {}
    }
    crate::metrics::job_stage(kind, "publish", stage_started.elapsed());
    if let Ok(Recorded { owned: true, settleable }) = &recorded
        && finished
    {
        settle_served_sessions(ctx, &claimed, settleable, failed).await;
    }
    let recorded = recorded.map(|r| r.owned);
    let refused = finished
        && claimed.job.kind == JobKind::Import
        && super::import::after_finish(ctx, &claimed, &recorded, failed, imported_rollouts).await;
    if finished && claimed.job.kind == JobKind::Forget && matches!(recorded, Ok(true)) {
        after_forget(ctx, &claimed).await;
    }
    if published_passages && matches!(recorded, Ok(true)) {
        index_after_publish(ctx, &claimed);
    }
    match recorded {
        Ok(true) => {
            // Idle workers may now claim a phase two; waiting closes may now answer.
            ctx.wake.notify_waiters();
            crate::metrics::job_attempt(claimed.job.kind.as_str(), outcome, started.elapsed());
            tracing::info!(
            %job_id, kind = claimed.job.kind.as_str(), tenant_id = %claimed.tenant_id,
            attempt = claimed.job.attempts, outcome, error = error.as_deref().unwrap_or(""), "job attempt finished"
            )
        }
        Ok(false) if refused => tracing::info!(%job_id, "import refused at its finish; nothing was placed"),
        Ok(false) => tracing::warn!(%job_id, "lease lost before the result was recorded; result discarded"),
        Err(e) => {
            tracing::error!(%job_id, error = %crate::error_chain(&e), "recording the job's outcome failed");
            let retry = finish_for(
                &claimed,
                Err(AttemptError::retryable(format!("recording the outcome failed: {e}"))),
                None,
                None,
                &ctx.settings,
            );
            if let Err(e) = ctx.store.finish_job(&claimed, &retry).await {
                tracing::error!(%job_id, error = %crate::error_chain(&e), "the job stays running until its lease expires");
            }
        }
    }
}

/// What follows a forget's finish: the database compacted, the vectors and
/// what raced it in the bucket dropped.
async fn after_forget(ctx: &WorkerContext, claimed: &ClaimedJob) {
    let job_id = claimed.job.job_id;
    if let Err(e) = ctx.store.compact_after_forget().await {
        tracing::warn!(%job_id, error = %crate::error_chain(&e), "compacting the database after a forget failed");
    }
    let scope = claimed.job.forget.as_ref().map(|f| f.scope);
    remove_what_raced_the_forget(ctx, claimed.tenant_id, &claimed.job.workspace, scope).await;
    match scope {
        Some(crate::domain::job::ForgetScope::Tenant) => ctx.vectors.forget(claimed.tenant_id, None),
        Some(crate::domain::job::ForgetScope::Workspace) => {
            ctx.vectors.forget(claimed.tenant_id, Some(&claimed.job.workspace))
        }
        // This replica's copy from before the forget (other replicas' sweeps drop theirs).
        Some(crate::domain::job::ForgetScope::Rollouts) if let Some(cache) = ctx.volumes.cache() => {
            cache.drop_shared_copies(claimed.tenant_id, Some(&claimed.job.workspace)).await;
            if let Some(bucket) = ctx.volumes.bucket() {
                bucket.forget_recent(claimed.tenant_id, &claimed.job.workspace);
            }
        }
        _ => {}
    }
    let scope = scope.map_or("", |s| s.as_str());
    tracing::info!(%job_id, tenant_id = %claimed.tenant_id, scope, "forget completed");
}

/// Where files live in a bucket, a workspace's or tenant's forget, once
/// finished, clears its prefix again: a chore of another replica that read
/// a row before the forget may have placed an object after the job's own
/// clearing, and nothing in the database leads to it any more.
async fn remove_what_raced_the_forget(
    ctx: &WorkerContext,
    tenant: uuid::Uuid,
    workspace: &crate::domain::ids::WorkspaceName,
    scope: Option<crate::domain::job::ForgetScope>,
) {
    use crate::domain::job::ForgetScope;
    let (Some(bucket), Some(scope)) = (ctx.volumes.bucket(), scope) else { return };
    let workspace = match scope {
        ForgetScope::Rollouts => return,
        ForgetScope::Workspace => Some(workspace),
        ForgetScope::Tenant => None,
    };
    if let Err(e) = bucket.remove_all_of(tenant, workspace).await {
        tracing::warn!(tenant_id = %tenant, error = %crate::error_chain(&e), "clearing a forgotten prefix again failed");
    }
    // A read between the job's own drop and the erase made a copy again.
    if let Some(cache) = ctx.volumes.cache() {
        cache.forget(tenant, workspace).await;
    }
}

/// The published layout's passages are embedded beside the workers (an
/// import's, for each layout it placed, by the sweep: its finish marks them).
fn index_after_publish(ctx: &WorkerContext, claimed: &ClaimedJob) {
    let at = crate::store::IndexedLayout {
        tenant: claimed.tenant_id,
        workspace: claimed.job.workspace.clone(),
        layout: claimed.job.layout.clone(),
    };
    ctx.vectors.forget_layout(&at);
    if let Some(indexer) = &ctx.indexer {
        indexer.after_publish(at);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usage_adds_up_over_attempts() {
        let first = merged_usage(None, TokenUsage { input_tokens: 10, output_tokens: 2, calls: 1 });
        let second = merged_usage(Some(&first), TokenUsage { input_tokens: 5, output_tokens: 1, calls: 1 });
        assert_eq!(
            serde_json::to_value(second).unwrap(),
            serde_json::json!({"input_tokens": 15, "output_tokens": 3, "calls": 2})
        );
    }
}
