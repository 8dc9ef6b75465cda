//! The job engine: workers claim due jobs from the store, hold a lease they
//! renew while working, and record the outcome only while they still own the
//! job. Retries back off exponentially with jitter and honour `Retry-After`.

mod finisher;
mod forget;
pub(crate) mod import;
mod leftovers;
mod phase_one;
pub mod phase_two;
mod restore;
mod storage;

pub use finisher::Finisher;
pub use leftovers::sweep as sweep_leftovers;
pub use storage::{Reconciled, reconcile_storage};

use crate::domain::redact::{Counts, add_counts};
use crate::llm::{Provider, TokenUsage};
use crate::store::{
    ClaimRequest, ClaimedJob, DynStore, FileHistory, JobAccounting, JobFinish, JobKind, JobOutcome, PhaseTwoReport,
    PublishDecision, RunHistory, RunState,
};
use crate::workspace::Volumes;
use crate::workspace::publish::{FileChanges, Manifest, PublishScope, Publisher};
use chrono::Utc;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{Notify, watch};
use tokio::task::JoinSet;

#[derive(Debug, Clone)]
pub struct WorkerSettings {
    pub worker_id: String,
    pub concurrency: usize,
    pub max_attempts: i64,
    pub retry_base: Duration,
    pub lease: Duration,
    /// How often an idle worker looks for work that another replica queued.
    pub poll: Duration,
    pub log_content: bool,
    /// `MEMORYD_HISTORY_RUNS`: how many runs of a layout keep their history.
    pub history_runs: i64,
    /// `MEMORYD_EAGER_PHASE_ONE_SECS`: idle time after which a rollout of an
    /// open session is extracted early; `None`: off.
    pub eager_phase_one: Option<Duration>,
    pub retention: RetentionSettings,
    /// `MEMORYD_DEFAULT_LIMITS`: a tenant's token budget where it sets none.
    pub default_limits: crate::domain::limits::Limits,
    /// `MEMORYD_STORAGE_RECONCILE_SECS`: how often the volume is walked to
    /// correct the storage counters.
    pub storage_reconcile: Duration,
}

/// What the retention sweeps remove, and how often they look (SPEC §2.7).
#[derive(Debug, Clone)]
pub struct RetentionSettings {
    pub sweep_every: Duration,
    /// `MEMORYD_IDEMPOTENCY_TTL_SECS`.
    pub idempotency_ttl: Duration,
    /// `MEMORYD_RETAIN_RECORDS_DAYS`; `None`: kept.
    pub records: Option<Duration>,
    /// `MEMORYD_RETAIN_ROLLOUTS_DAYS`: the default of layouts that set none.
    pub rollout_days: f64,
}

pub struct WorkerContext {
    pub store: DynStore,
    pub volumes: Volumes,
    pub provider: Provider,
    pub settings: WorkerSettings,
    /// Woken when this process queues or finishes jobs, so idle workers and
    /// waiting closes need not wait a poll.
    pub wake: Arc<Notify>,
    /// Stages and publishes the files of finished attempts.
    pub publisher: Publisher,
    /// Told when a finish may have written events (SPEC §2.8).
    pub events: crate::events::Events,
    /// Records the attempts' outcomes, several to a transaction.
    pub finisher: Finisher,
}

/// What a finished attempt produced: plain data. Its files are written by
/// the recording, so that their fsyncs are not spent between model calls,
/// and become visible only once the fenced finish has recorded them.
pub struct Completion {
    pub outcome: JobOutcome,
    pub files: Option<FileChanges>,
    pub usage: TokenUsage,
    /// Secrets taken out of what the attempt sent to the model.
    pub redactions: Counts,
    /// An import's files, already staged (too big for `files`), and its rows.
    pub imported: Option<Box<Imported>>,
}

/// What an import attempt staged and will register.
pub struct Imported {
    pub staged: Manifest,
    pub record: crate::store::ImportRecord,
}
/// Why an attempt failed.
#[derive(Debug)]
pub enum AttemptError {
    /// Worth another attempt (until `MEMORYD_MAX_ATTEMPTS`).
    Retryable { message: String, retry_after: Option<Duration>, usage: TokenUsage, token_limit: Option<i64> },
    /// Cannot succeed however often it runs (a rollout file that is not JSONL,
    /// say): the job fails at once.
    Fatal { message: String },
}

/// The layout's generate config the job was queued with; a layout made
/// read-only since then cannot produce memory.
fn generate_config(claimed: &ClaimedJob) -> Result<crate::domain::layout::GenerateConfig, AttemptError> {
    claimed.layout.config.generate.clone().ok_or_else(|| AttemptError::Fatal {
        message: format!("layout {} no longer generates memory", claimed.job.layout),
    })
}

/// Removes the temporary files an earlier attempt of this job left under
/// `dir` when its process was killed (SPEC §9). A first attempt has none.
async fn remove_earlier_leftovers(claimed: &ClaimedJob, dir: std::path::PathBuf) -> Result<(), AttemptError> {
    if claimed.job.attempts <= 1 {
        return Ok(());
    }
    let job_id = claimed.job.job_id;
    let removed = tokio::task::spawn_blocking(move || crate::workspace::remove_leftovers_of(&dir, job_id))
        .await
        .map_err(std::io::Error::other)
        .and_then(|r| r)
        .map_err(|e| AttemptError::Retryable {
            message: format!("removing an earlier attempt's temporary files failed: {e}"),
            retry_after: None,
            usage: TokenUsage::default(),
            token_limit: None,
        })?;
    if removed > 0 {
        tracing::info!(%job_id, removed, "removed temporary files of an earlier attempt");
    }
    Ok(())
}

/// Exponential backoff with "equal jitter" (a random point in the upper half
/// of the doubled delay), never sooner than the server's `Retry-After`.
pub fn backoff(attempt: i64, base: Duration, retry_after: Option<Duration>) -> Duration {
    let exponent = attempt.clamp(1, 20) as u32 - 1;
    let full = base.saturating_mul(2u32.saturating_pow(exponent)).min(Duration::from_secs(3600));
    let random = (uuid::Uuid::new_v4().as_u128() % 1_000_000) as f64 / 1_000_000.0;
    let jittered = full.mul_f64(0.5 + random / 2.0);
    retry_after.map_or(jittered, |after| jittered.max(after))
}

fn merged_usage(previous: Option<&Value>, attempt: TokenUsage) -> Value {
    let field = |name: &str| previous.and_then(|p| p[name].as_u64()).unwrap_or(0);
    json!({
        "input_tokens": field("input_tokens") + attempt.input_tokens,
        "output_tokens": field("output_tokens") + attempt.output_tokens,
        "calls": field("calls") + attempt.calls,
    })
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
        },
        Err(AttemptError::Fatal { message }) => JobFinish {
            outcome: JobOutcome::Failed { error: message },
            phase_two,
            usage: merged_usage(previous, TokenUsage::default()),
            publish_id: None,
            redactions: Counts::new(),
            accounting: JobAccounting::default(),
            import: None,
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

/// An attempt's result, and for phase two the run record it leaves.
pub type Attempt = (Result<Completion, AttemptError>, Option<PhaseTwoReport>);

/// One kind of job: it runs an attempt and hands back plain data (the
/// outcome, the files to publish, the run report), which one recorder writes
/// the same way for every kind.
#[async_trait::async_trait]
pub trait JobRunner: Send + Sync {
    async fn run(&self, ctx: &WorkerContext, claimed: &ClaimedJob) -> Attempt;
}

fn runner(kind: JobKind) -> &'static dyn JobRunner {
    match kind {
        JobKind::PhaseOne => &phase_one::PhaseOne,
        JobKind::PhaseTwo => &phase_two::PhaseTwo,
        JobKind::Restore => &restore::Restore,
        JobKind::Forget => &forget::Forget,
        JobKind::Import => &import::Import,
    }
}

async fn run_attempt(ctx: &WorkerContext, claimed: &ClaimedJob) -> Attempt {
    let kind = claimed.job.kind.as_str();
    let started = std::time::Instant::now();
    prepare_attempt(ctx, claimed).await;
    crate::metrics::job_stage(kind, "prepare", started.elapsed());
    let started = std::time::Instant::now();
    let attempt = runner(claimed.job.kind).run(ctx, claimed).await;
    crate::metrics::job_stage(kind, "run", started.elapsed());
    attempt
}

/// An attempt that ran to its end, waiting to be recorded.
struct FinishedAttempt {
    claimed: ClaimedJob,
    attempt: Attempt,
    started: std::time::Instant,
}

/// Runs one claimed job's attempt, renewing its lease meanwhile. `None` when
/// the lease was lost or the process is stopping (the job is then given back).
async fn attempt_job(
    ctx: &WorkerContext,
    claimed: ClaimedJob,
    shutdown: &mut watch::Receiver<bool>,
) -> Option<FinishedAttempt> {
    let job_id = claimed.job.job_id;
    let started = std::time::Instant::now();
    let lost = Arc::new(Notify::new());
    let renewal = {
        let store = ctx.store.clone();
        let lost = lost.clone();
        let lease = ctx.settings.lease;
        let token = claimed.token;
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(lease / 3).await;
                let until = Utc::now() + chrono::Duration::from_std(lease).unwrap_or(chrono::Duration::minutes(2));
                match store.renew_lease(job_id, token, until).await {
                    Ok(true) => {}
                    Ok(false) => {
                        lost.notify_one();
                        return;
                    }
                    Err(e) => {
                        tracing::warn!(%job_id, error = %crate::error_chain(&e), "lease renewal failed; trying again")
                    }
                }
            }
        })
    };
    let result = tokio::select! {
        result = run_attempt(ctx, &claimed) => Ok(result),
        _ = lost.notified() => Err(false),
        _ = shutdown.wait_for(|stopping| *stopping) => Err(true),
    };
    // Recording needs no renewal: it takes far less than a lease.
    renewal.abort();
    match result {
        Ok(attempt) => Some(FinishedAttempt { claimed, attempt, started }),
        Err(false) => {
            tracing::warn!(%job_id, "lease lost to another worker; this attempt's result is discarded");
            None
        }
        Err(true) => {
            match ctx.store.release_job(job_id, claimed.token).await {
                Ok(_) => tracing::info!(%job_id, "job released for another worker at shutdown"),
                Err(e) => {
                    tracing::warn!(%job_id, error = %crate::error_chain(&e), "releasing the job failed; its lease will expire")
                }
            }
            None
        }
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

/// Writes an attempt's files under temporary names with the manifest that
/// lists them, and fills in a successful run's history; a failure to write
/// them fails the attempt.
async fn stage_files(
    ctx: &WorkerContext,
    claimed: &ClaimedJob,
    result: Result<Completion, AttemptError>,
    report: &mut Option<PhaseTwoReport>,
) -> (Result<Completion, AttemptError>, Option<(Manifest, Option<crate::store::ImportRecord>)>) {
    let result = match result {
        Ok(Completion { imported: Some(imported), outcome, files, usage, redactions }) => {
            let Imported { staged, record } = *imported;
            let completion = Completion { outcome, files, usage, redactions, imported: None };
            return (Ok(completion), Some((staged, Some(record))));
        }
        other => other,
    };
    let Ok(Completion { outcome, files: Some(mut files), usage, mut redactions, imported: None }) = result else {
        return (result, None);
    };
    let keeps_history = report.as_ref().is_some_and(|r| r.run.state == RunState::Succeeded);
    let memories_dir = claimed.layout.memories_dir.normalized.clone();
    // SPEC §4: whatever a job publishes under the memory folder (phase one's
    // files, the consolidation agent's edits, a restore) is redacted here,
    // the one place every kind passes through.
    let in_files = redact_memory_files(&claimed.layout, &mut files);
    crate::metrics::redactions("memory_files", &in_files);
    if let Some(report) = report.as_mut() {
        report.run.redactions = in_files.clone();
    }
    add_counts(&mut redactions, &in_files);
    let staged = match ctx.volumes.workspace_root(claimed.tenant_id, &claimed.job.workspace) {
        Ok(root) => {
            let (publisher, scope) = (ctx.publisher.clone(), scope_of(claimed));
            tokio::task::spawn_blocking(move || {
                let history = if keeps_history { Some(history_of(&root, &memories_dir, &files)?) } else { None };
                Ok((publisher.stage(scope, &root, files)?, history))
            })
            .await
            .map_err(std::io::Error::other)
            .and_then(|staged| staged)
        }
        Err(e) => Err(std::io::Error::other(e)),
    };
    match staged {
        Ok((manifest, history)) => {
            if let (Some(report), Some(mut files)) = (report.as_mut(), history) {
                let forget = claimed.job.kind == JobKind::Forget;
                if forget {
                    // A forget's history keeps the files as it left them; the
                    // files it removed (named after what it forgot) are not listed.
                    files.retain(|f| f.after.is_some());
                }
                report.history = Some(RunHistory { files, keep_runs: ctx.settings.history_runs, forget });
            }
            (Ok(Completion { outcome, files: None, usage, redactions, imported: None }), Some((manifest, None)))
        }
        Err(e) => {
            let message = format!("writing the memory files failed: {e}");
            (Err(AttemptError::Retryable { message, retry_after: None, usage, token_limit: None }), None)
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
fn served_sessions(claimed: &ClaimedJob) -> Vec<crate::domain::ids::SessionId> {
    let joined = claimed.job.sessions.iter().filter_map(|s| crate::domain::ids::SessionId::parse(s));
    let mut sessions: Vec<_> = joined.collect();
    if sessions.is_empty() {
        sessions.extend(claimed.job.session_id.clone());
    }
    sessions
}

/// Before an attempt touches its layout's files.
async fn prepare_attempt(ctx: &WorkerContext, claimed: &ClaimedJob) {
    recover_publishes(ctx, Some(&scope_of(claimed))).await;
}

/// Records an attempt's outcome, if this worker still owns the job, and
/// then makes its files visible.
async fn record(ctx: &WorkerContext, finished: FinishedAttempt) {
    let FinishedAttempt { claimed, attempt: (result, mut report), started } = finished;
    let job_id = claimed.job.job_id;
    let kind = claimed.job.kind.as_str();
    let stage_started = std::time::Instant::now();
    let (result, staged) = stage_files(ctx, &claimed, result, &mut report).await;
    crate::metrics::job_stage(kind, "stage", stage_started.elapsed());
    let (staged, import) = staged.map_or((None, None), |(manifest, import)| (Some(manifest), import));
    let publish_id = staged.as_ref().map(|m| m.publish_id);
    let mut finish = finish_for(&claimed, result, report, publish_id, &ctx.settings);
    finish.accounting.storage_delta = staged.as_ref().map_or(0, |m| m.bytes_delta);
    finish.accounting.model_tokens_per_day = token_budget(ctx, &claimed, finish.accounting.attempt_usage).await;
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
        (Some(manifest), Ok(recorded)) => settle_publish(&ctx.publisher, manifest, *recorded).await,
        // Whether the commit happened is unknown: the database decides when
        // the manifest is recovered.
        (Some(_), Err(_)) | (None, _) => {}
    }
    crate::metrics::job_stage(kind, "publish", stage_started.elapsed());
    if finished && matches!(recorded, Ok(true)) {
        let stage_started = std::time::Instant::now();
        let mut closed_any = false;
        for session in served_sessions(&claimed) {
            match ctx.store.settle_session(claimed.tenant_id, &session).await {
                Ok(closed) => closed_any |= closed,
                Err(e) => {
                    tracing::warn!(session_id = %session, error = %crate::error_chain(&e), "settling the session failed; the sweep will")
                }
            }
        }
        crate::metrics::job_stage(kind, "settle", stage_started.elapsed());
        // A phase one that did not fail records no event of its own, only a
        // session it closed does: waking the deliveries and the streams for
        // nothing would cost them a query for every job.
        if closed_any || claimed.job.kind != JobKind::PhaseOne || failed {
            ctx.events.committed();
        }
    }
    if finished && claimed.job.kind == JobKind::Import && matches!(recorded, Ok(true)) {
        // Done with, whatever the outcome.
        let archive = ctx.volumes.import_archive(job_id);
        if let Err(e) = crate::workspace::remove_if_present(&archive) {
            tracing::warn!(%job_id, error = %crate::error_chain(&e), "removing an import's archive failed");
        }
    }
    if finished && claimed.job.kind == JobKind::Forget && matches!(recorded, Ok(true)) {
        if let Err(e) = ctx.store.compact_after_forget().await {
            tracing::warn!(%job_id, error = %crate::error_chain(&e), "compacting the database after a forget failed");
        }
        let scope = claimed.job.forget.as_ref().map_or("", |f| f.scope.as_str());
        tracing::info!(%job_id, tenant_id = %claimed.tenant_id, scope, "forget completed");
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
        Ok(false) => tracing::warn!(%job_id, "lease lost before the result was recorded; result discarded"),
        Err(e) => {
            tracing::error!(%job_id, error = %crate::error_chain(&e), "recording the job's outcome failed");
            let retry = finish_for(
                &claimed,
                Err(AttemptError::Retryable {
                    message: format!("recording the outcome failed: {e}"),
                    retry_after: None,
                    usage: TokenUsage::default(),
                    token_limit: None,
                }),
                None,
                None,
                &ctx.settings,
            );
            if let Err(e) = ctx.store.finish_job(&claimed, retry).await {
                tracing::error!(%job_id, error = %crate::error_chain(&e), "the job stays running until its lease expires");
            }
        }
    }
}

/// Claims jobs for this process's worker slots and runs each on a task of
/// its own (its attempt, then its recording). One claim takes a whole batch
/// (as many jobs as there are slots), kept in a short local queue, so the
/// claim's cost is shared by the jobs it takes and slots that free up never
/// wait for a claim. A queued job whose lease has aged is renewed before it
/// starts, and the queue is given back at shutdown.
async fn dispatch(ctx: Arc<WorkerContext>, kinds: Vec<JobKind>, mut shutdown: watch::Receiver<bool>) {
    let lease = chrono::Duration::from_std(ctx.settings.lease).unwrap_or(chrono::Duration::minutes(2));
    let concurrency = ctx.settings.concurrency.max(1);
    let slots = Arc::new(tokio::sync::Semaphore::new(concurrency));
    let mut claimed: std::collections::VecDeque<(ClaimedJob, std::time::Instant)> = Default::default();
    let mut running = JoinSet::new();
    while !*shutdown.borrow() {
        while running.try_join_next().is_some() {}
        if let Some((job, claimed_at)) = claimed.pop_front() {
            let slot = tokio::select! {
                permit = slots.clone().acquire_owned() => permit.expect("the slots are never closed"),
                _ = shutdown.wait_for(|stopping| *stopping) => {
                    claimed.push_front((job, claimed_at));
                    break;
                }
            };
            if !still_ours(&ctx, &job, claimed_at).await {
                continue;
            }
            let (ctx, mut shutdown) = (ctx.clone(), shutdown.clone());
            running.spawn(async move {
                if let Some(finished) = attempt_job(&ctx, job, &mut shutdown).await {
                    record(&ctx, finished).await;
                }
                drop(slot);
            });
            continue;
        }
        // Registered before the claim, so a wake while it runs is not missed.
        let woken = ctx.wake.notified();
        tokio::pin!(woken);
        woken.as_mut().enable();
        // Below the free-space watermark a job could only fail to write its
        // files; it waits in the queue instead, spending none of its attempts.
        // Forgets still run: they free space.
        let kinds = if ctx.volumes.has_room() { kinds.as_slice() } else { &[JobKind::Forget][..] };
        let request = ClaimRequest { worker: &ctx.settings.worker_id, kinds, now: Utc::now(), lease };
        let claim_started = std::time::Instant::now();
        match ctx.store.claim_jobs(&request, concurrency).await {
            Ok(batch) if !batch.is_empty() => {
                let per_job = claim_started.elapsed() / batch.len() as u32;
                let now = std::time::Instant::now();
                for job in batch {
                    crate::metrics::job_stage(job.job.kind.as_str(), "claim", per_job);
                    claimed.push_back((job, now));
                }
            }
            Ok(_) => {
                tokio::select! {
                    _ = tokio::time::sleep(ctx.settings.poll) => {}
                    _ = woken => {}
                    _ = shutdown.wait_for(|stopping| *stopping) => {}
                }
            }
            Err(e) => {
                tracing::error!(error = %crate::error_chain(&e), "claiming jobs failed");
                tokio::time::sleep(ctx.settings.poll).await;
            }
        }
    }
    for (job, _) in claimed {
        if let Err(e) = ctx.store.release_job(job.job.job_id, job.token).await {
            tracing::warn!(job_id = %job.job.job_id, error = %crate::error_chain(&e), "giving back a claimed job failed; its lease will expire");
        }
    }
    while running.join_next().await.is_some() {}
}

/// Whether a job that waited in the local queue is still this worker's: a
/// wait of more than a third of the lease renews it first.
async fn still_ours(ctx: &WorkerContext, job: &ClaimedJob, claimed_at: std::time::Instant) -> bool {
    if claimed_at.elapsed() < ctx.settings.lease / 3 {
        return true;
    }
    let until = Utc::now() + chrono::Duration::from_std(ctx.settings.lease).unwrap_or(chrono::Duration::minutes(2));
    match ctx.store.renew_lease(job.job.job_id, job.token, until).await {
        Ok(renewed) => renewed,
        Err(e) => {
            tracing::warn!(job_id = %job.job.job_id, error = %crate::error_chain(&e), "renewing a queued job's lease failed");
            false
        }
    }
}

/// Every few seconds: settle sessions whose last worker died before it could.
async fn session_sweeper(ctx: Arc<WorkerContext>, mut shutdown: watch::Receiver<bool>) {
    while !*shutdown.borrow() {
        match ctx.store.settle_finished_sessions().await {
            Ok(0) => {}
            Ok(n) => {
                tracing::info!(sessions = n, "settled finished sessions");
                ctx.events.committed();
            }
            Err(e) => tracing::warn!(error = %crate::error_chain(&e), "settling finished sessions failed"),
        }
        tokio::select! {
            _ = tokio::time::sleep(SWEEP_INTERVAL) => {}
            _ = shutdown.wait_for(|stopping| *stopping) => {}
        }
    }
}

const SWEEP_INTERVAL: Duration = Duration::from_secs(5);

/// Rows one retention statement deletes at most: each batch is a short
/// transaction of its own, so appends never wait long behind a sweep.
const RETENTION_BATCH: i64 = 1000;

/// Deletes in batches until a batch comes back short.
async fn in_batches<F, Fut>(mut batch: F) -> crate::store::StoreResult<u64>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = crate::store::StoreResult<u64>>,
{
    let mut total = 0;
    loop {
        let deleted = batch().await?;
        total += deleted;
        if deleted < RETENTION_BATCH as u64 {
            return Ok(total);
        }
    }
}

/// Removes every idempotency key made before `before`, a batch at a time.
pub async fn expire_idempotency_keys(
    store: &dyn crate::store::Store,
    before: chrono::DateTime<Utc>,
) -> crate::store::StoreResult<u64> {
    in_batches(|| store.expire_idempotency_keys(before, RETENTION_BATCH)).await
}

/// One retention sweep (SPEC §2.7): expired idempotency keys and records go,
/// idle rollouts are queued for forgetting.
pub async fn sweep_retention(ctx: &WorkerContext) -> crate::store::StoreResult<()> {
    let retention = &ctx.settings.retention;
    let now = Utc::now();
    let to_chrono = |d: Duration| chrono::Duration::from_std(d).unwrap_or(chrono::Duration::MAX);
    let keys_before = now - to_chrono(retention.idempotency_ttl);
    let keys = expire_idempotency_keys(ctx.store.as_ref(), keys_before).await?;
    let mut records = 0;
    if let Some(keep) = retention.records {
        let before = now - to_chrono(keep);
        records = in_batches(|| ctx.store.expire_records(before, RETENTION_BATCH)).await?;
    }
    let forgets = ctx.store.queue_retention_forgets(now, retention.rollout_days).await?;
    if !forgets.is_empty() {
        ctx.wake.notify_waiters();
    }
    if keys + records > 0 || !forgets.is_empty() {
        tracing::info!(idempotency_keys = keys, records, forget_jobs = forgets.len(), "retention sweep");
    }
    Ok(())
}

async fn retention_sweeper(ctx: Arc<WorkerContext>, mut shutdown: watch::Receiver<bool>) {
    while !*shutdown.borrow() {
        if let Err(e) = sweep_retention(&ctx).await {
            tracing::warn!(error = %crate::error_chain(&e), "the retention sweep failed; it runs again later");
        }
        tokio::select! {
            _ = tokio::time::sleep(ctx.settings.retention.sweep_every) => {}
            _ = shutdown.wait_for(|stopping| *stopping) => {}
        }
    }
}

/// Walks the volume to correct the storage counters, at start-up and then
/// every `MEMORYD_STORAGE_RECONCILE_SECS`.
async fn storage_reconciler(ctx: Arc<WorkerContext>, mut shutdown: watch::Receiver<bool>) {
    while !*shutdown.borrow() {
        match reconcile_storage(&ctx.store, &ctx.volumes).await {
            Ok(report) if report.corrected > 0 => {
                tracing::info!(corrected = report.corrected, drift_bytes = report.drift, "storage reconciled")
            }
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(error = %crate::error_chain(&e), "reconciling storage failed; it runs again later")
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(ctx.settings.storage_reconcile) => {}
            _ = shutdown.wait_for(|stopping| *stopping) => {}
        }
    }
}

/// Queues eager phase one for rollouts idle `idle` long in open sessions
/// (SPEC §5), looking every quarter of that (at most every 5 s).
async fn eager_sweeper(ctx: Arc<WorkerContext>, idle: Duration, mut shutdown: watch::Receiver<bool>) {
    let every = (idle / 4).clamp(Duration::from_millis(250), SWEEP_INTERVAL);
    while !*shutdown.borrow() {
        let idle_since = Utc::now() - chrono::Duration::from_std(idle).unwrap_or(chrono::Duration::MAX);
        match ctx.store.queue_eager_phase_one(idle_since, 500).await {
            Ok(jobs) if jobs.is_empty() => {}
            Ok(jobs) => {
                crate::metrics::eager_phase_one_queued(jobs.len());
                tracing::info!(jobs = jobs.len(), "eager phase one queued for idle rollouts");
                ctx.wake.notify_waiters();
            }
            Err(e) => tracing::warn!(error = %crate::error_chain(&e), "queuing eager phase one failed"),
        }
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = shutdown.wait_for(|stopping| *stopping) => {}
        }
    }
}

/// Starts `concurrency` workers; they stop claiming on shutdown and give back
/// the jobs they hold.
pub fn spawn_workers(ctx: Arc<WorkerContext>, shutdown: watch::Receiver<bool>) -> JoinSet<()> {
    let mut set = JoinSet::new();
    set.spawn(session_sweeper(ctx.clone(), shutdown.clone()));
    set.spawn(retention_sweeper(ctx.clone(), shutdown.clone()));
    set.spawn(storage_reconciler(ctx.clone(), shutdown.clone()));
    if let Some(idle) = ctx.settings.eager_phase_one {
        set.spawn(eager_sweeper(ctx.clone(), idle, shutdown.clone()));
    }
    let start_up = ctx.clone();
    set.spawn(async move {
        // Publishes first: the files a committed manifest names are not leftovers.
        recover_publishes(&start_up, None).await;
        leftovers::sweep(start_up.store.clone(), start_up.volumes.clone(), start_up.publisher.clone()).await;
    });
    set.spawn(dispatch(ctx.clone(), JobKind::ALL.to_vec(), shutdown.clone()));
    set
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_with_jitter_and_honours_retry_after() {
        let base = Duration::from_millis(1000);
        for attempt in 1..=5 {
            let full = 1000u64 << (attempt - 1);
            for _ in 0..50 {
                let d = backoff(attempt, base, None).as_millis() as u64;
                assert!(d >= full / 2 && d <= full, "attempt {attempt}: {d}");
            }
        }
        assert!(backoff(1, base, Some(Duration::from_secs(30))) >= Duration::from_secs(30));
        assert!(backoff(60, base, None) <= Duration::from_secs(3600));
    }

    #[test]
    fn usage_adds_up_over_attempts() {
        let first = merged_usage(None, TokenUsage { input_tokens: 10, output_tokens: 2, calls: 1 });
        let second = merged_usage(Some(&first), TokenUsage { input_tokens: 5, output_tokens: 1, calls: 1 });
        assert_eq!(second, json!({"input_tokens": 15, "output_tokens": 3, "calls": 2}));
    }
}
