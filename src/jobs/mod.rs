//! The job engine: workers claim due jobs from the store, hold a lease they
//! renew while working, and record the outcome only while they still own the
//! job. Retries back off exponentially with jitter and honour `Retry-After`.

mod edit;
mod finisher;
mod forget;
pub(crate) mod import;
pub mod indexer;
mod leftovers;
mod phase_one;
pub mod phase_two;
mod recorder;
mod restore;
mod storage;
mod sweepers;

pub use finisher::Finisher;
pub use leftovers::sweep as sweep_leftovers;
pub use recorder::{PublishOwner, finish_pending_publishes, recover_publishes};
use recorder::{prepare_attempt, record, served_sessions};
pub use storage::{Reconciled, reconcile_storage};
use sweepers::{
    bucket_sweeper, dead_row_reclaimer, eager_sweeper, index_sweeper, retention_sweeper, session_sweeper,
    storage_reconciler,
};
pub use sweepers::{expire_idempotency_keys, sweep_retention};

use crate::domain::redact::Counts;
use crate::llm::{Provider, TokenUsage};
use crate::store::{ClaimRequest, ClaimedJob, DynStore, JobKind, JobOutcome, PhaseTwoReport};
use crate::workspace::Volumes;
use crate::workspace::publish::{FileChanges, Manifest, Publisher};
use chrono::Utc;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

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
    /// `MEMORYD_RECLAIM_DEAD_ROWS`: the dead row versions past which a hot
    /// table is vacuumed; `None`: never by memoryd.
    pub reclaim_dead_rows: Option<i64>,
    /// `MEMORYD_MAX_SEGMENT_BYTES`: also the longest line an imported file may have.
    pub max_segment_bytes: usize,
    /// `MEMORYD_BODY_TIMEOUT_SECS`: an upload silent this long is not arriving any more.
    pub body_timeout: Duration,
    /// Where rollouts live in a bucket: a rollout with no append for this
    /// long has its journal's lines moved into its object.
    pub idle_rollout: Duration,
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
    /// `MEMORYD_EVENTS_RETAIN_HOURS`: how long the outbox keeps delivered events.
    pub events: Duration,
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
    /// Embeds published passages; `None`: search by meaning is not configured.
    pub indexer: Option<Arc<indexer::Indexer>>,
    /// The API's cache of layouts' vectors, told of each publish.
    pub vectors: crate::meaning::VectorCache,
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

impl Completion {
    /// An attempt that publishes no file.
    pub fn without_files(outcome: JobOutcome, usage: TokenUsage, redactions: Counts) -> Self {
        Self { outcome, files: None, usage, redactions, imported: None }
    }
}

/// What an import attempt staged and will register.
pub struct Imported {
    pub staged: ImportStaged,
    pub record: crate::store::ImportRecord,
}
/// Where an import's files were staged.
pub enum ImportStaged {
    /// Beside their places on the volume.
    Volume(Manifest),
    /// In the bucket: its rollouts at their keys (their ETags in the record),
    /// the other files as versions.
    Bucket(crate::store::workspace_files::VersionChanges),
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

impl AttemptError {
    /// Worth another attempt, with no tokens spent and no wait asked for.
    pub fn retryable(message: impl Into<String>) -> Self {
        Self::spent(message, TokenUsage::default())
    }

    /// Worth another attempt, after a model call that spent `usage`.
    pub fn spent(message: impl Into<String>, usage: TokenUsage) -> Self {
        Self::Retryable { message: message.into(), retry_after: None, usage, token_limit: None }
    }

    pub fn fatal(message: impl Into<String>) -> Self {
        Self::Fatal { message: message.into() }
    }

    /// What the job's `last_error` says of it.
    pub fn message(&self) -> &str {
        match self {
            Self::Retryable { message, .. } | Self::Fatal { message } => message,
        }
    }
}

/// The layout's generate config the job was queued with; a layout made
/// read-only since then cannot produce memory.
fn generate_config(claimed: &ClaimedJob) -> Result<crate::domain::layout::GenerateConfig, AttemptError> {
    claimed
        .layout
        .config
        .generate
        .clone()
        .ok_or_else(|| AttemptError::fatal(format!("layout {} no longer generates memory", claimed.job.layout)))
}

/// The job's workspace files to read while it runs: where they are on a
/// volume, its own copy of them from a bucket (dropped with the result).
async fn job_workspace(
    ctx: &WorkerContext,
    claimed: &ClaimedJob,
) -> Result<crate::bucket::cache::JobWorkspace, AttemptError> {
    use crate::bucket::files::FilesError;
    let (tenant, job) = (claimed.tenant_id, &claimed.job);
    match ctx.volumes.for_job(ctx.store.as_ref(), tenant, &job.workspace, job.job_id).await {
        // R-LAY-3 as on a volume, where the first append made them: the
        // layout's folders and empty files, in a bucket's copy made here.
        Ok(copy) if ctx.volumes.bucket().is_some() => {
            let (root, layout) = (copy.root().to_owned(), claimed.layout.clone());
            tokio::task::spawn_blocking(move || crate::workspace::ensure_layout(&root, &layout))
                .await
                .map_err(|e| AttemptError::retryable(e.to_string()))?
                .map_err(|e| AttemptError::retryable(format!("making the layout's folders failed: {e}")))?;
            Ok(copy)
        }
        Ok(copy) => Ok(copy),
        Err(FilesError::Path(e)) => Err(AttemptError::fatal(format!("workspace path refused: {e}"))),
        Err(e) => Err(AttemptError::retryable(format!("reading the workspace's files failed: {e}"))),
    }
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
        .map_err(|e| AttemptError::retryable(format!("removing an earlier attempt's temporary files failed: {e}")))?;
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
    let jittered = full.mul_f64(0.5 + fastrand::f64() / 2.0);
    retry_after.map_or(jittered, |after| jittered.max(after))
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
        JobKind::Edit => &edit::Edit,
    }
}

async fn run_attempt(ctx: &WorkerContext, claimed: &ClaimedJob) -> Attempt {
    // Attempts are counted at the claim: past the limit, the earlier ones
    // all ended without a result (their worker died), and this one is not run.
    if claimed.job.attempts > ctx.settings.max_attempts {
        let last = claimed.job.last_error.as_deref().unwrap_or("none recorded");
        let message =
            format!("out of attempts: {} claims ended without a result; last error: {last}", ctx.settings.max_attempts);
        return (Err(AttemptError::Fatal { message }), None);
    }
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
    shutdown: &CancellationToken,
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
        _ = shutdown.cancelled() => Err(true),
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

/// Gives the jobs claimed but not started back to the queue (their attempt
/// not spent) for any worker to claim.
async fn give_back(ctx: &WorkerContext, claimed: &mut std::collections::VecDeque<(ClaimedJob, std::time::Instant)>) {
    for (job, _) in claimed.drain(..) {
        if let Err(e) = ctx.store.release_job(job.job.job_id, job.token).await {
            tracing::warn!(job_id = %job.job.job_id, error = %crate::error_chain(&e), "giving back a claimed job failed; its lease will expire");
        }
    }
}

/// Batches claimed per worker slot: a claim costs about the same for one job
/// or many (it visits every tenant with queued jobs: 2–3 ms at 300 tenants on
/// Postgres, twice that on busy cores), and a second batch's jobs wait
/// locally only about as long as one job runs.
const CLAIMED_PER_SLOT: usize = 2;

/// Claims jobs for this process's worker slots and runs each on a task of
/// its own (its attempt, then its recording). One claim takes a whole batch
/// (twice as many jobs as there are slots), kept in a short local queue, so
/// the claim's cost is shared by the jobs it takes and slots that free up
/// never wait for a claim. A queued job whose lease has aged is renewed before it
/// starts, and the queue is given back at shutdown.
async fn dispatch(ctx: Arc<WorkerContext>, kinds: Vec<JobKind>, shutdown: CancellationToken) {
    let lease = chrono::Duration::from_std(ctx.settings.lease).unwrap_or(chrono::Duration::minutes(2));
    let concurrency = ctx.settings.concurrency.max(1);
    let slots = Arc::new(tokio::sync::Semaphore::new(concurrency));
    let mut claimed: std::collections::VecDeque<(ClaimedJob, std::time::Instant)> = Default::default();
    let mut running = JoinSet::new();
    while !shutdown.is_cancelled() {
        while running.try_join_next().is_some() {}
        // While the object store does not answer, a job could only fail its
        // attempt: the ones claimed are given back, and none is claimed.
        if let Some(bucket) = ctx.volumes.bucket()
            && !bucket.reachable().await
        {
            give_back(&ctx, &mut claimed).await;
            tokio::select! {
                _ = tokio::time::sleep(ctx.settings.poll) => {}
                _ = shutdown.cancelled() => {}
            }
            continue;
        }
        if let Some((job, claimed_at)) = claimed.pop_front() {
            let slot = tokio::select! {
                permit = slots.clone().acquire_owned() => permit.expect("the slots are never closed"),
                _ = shutdown.cancelled() => {
                    claimed.push_front((job, claimed_at));
                    break;
                }
            };
            if !still_ours(&ctx, &job, claimed_at).await {
                continue;
            }
            let (ctx, shutdown) = (ctx.clone(), shutdown.clone());
            running.spawn(async move {
                if let Some(finished) = attempt_job(&ctx, job, &shutdown).await {
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
        match ctx.store.claim_jobs(&request, concurrency * CLAIMED_PER_SLOT).await {
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
                    _ = shutdown.cancelled() => {}
                }
            }
            Err(e) => {
                tracing::error!(error = %crate::error_chain(&e), "claiming jobs failed");
                tokio::time::sleep(ctx.settings.poll).await;
            }
        }
    }
    give_back(&ctx, &mut claimed).await;
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

/// Starts `concurrency` workers; they stop claiming on shutdown and give back
/// the jobs they hold.
pub fn spawn_workers(ctx: Arc<WorkerContext>, shutdown: CancellationToken) -> JoinSet<()> {
    let mut set = JoinSet::new();
    set.spawn(session_sweeper(ctx.clone(), shutdown.clone()));
    set.spawn(index_sweeper(ctx.clone(), shutdown.clone()));
    set.spawn(bucket_sweeper(ctx.clone(), shutdown.clone()));
    set.spawn(retention_sweeper(ctx.clone(), shutdown.clone()));
    set.spawn(storage_reconciler(ctx.clone(), shutdown.clone()));
    if let Some(floor) = ctx.settings.reclaim_dead_rows {
        set.spawn(dead_row_reclaimer(ctx.clone(), floor, shutdown.clone()));
    }
    if let Some(idle) = ctx.settings.eager_phase_one {
        set.spawn(eager_sweeper(ctx.clone(), idle, shutdown.clone()));
    }
    let start_up = ctx.clone();
    set.spawn(async move {
        if let Err(e) = start_up.publisher.clear_spares() {
            tracing::warn!(error = %crate::error_chain(&e), "removing spare publish manifests failed");
        }
        // Publishes first: the files a committed manifest names are not leftovers.
        recover_publishes(&start_up, None).await;
        let ctx = &start_up;
        leftovers::sweep(&ctx.store, &ctx.volumes, &ctx.publisher, ctx.settings.body_timeout).await;
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
}
