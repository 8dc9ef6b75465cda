//! Group commit of job finishes: the attempts that finish while one
//! recording transaction commits are recorded together in the next one, so
//! that a burst of short jobs pays one commit (one log sync, one turn of
//! SQLite's single writer) per batch rather than one per job. Once a batch
//! is committed, one query finds the sessions it may have finished.

use crate::domain::ids::SessionId;
use crate::store::{ClaimedJob, DynStore, JobFinish, JobOutcome, Store, StoreResult, TenantId};
use tokio::sync::{mpsc, oneshot};

/// At most this many finishes share a transaction: its statements run one
/// after another and its locks are held until the last is recorded.
const MOST_PER_COMMIT: usize = 32;

/// Transactions of finishes under way at once where the database admits
/// several writers.
const CONCURRENT_COMMITS: usize = 2;

struct PendingFinish {
    claimed: ClaimedJob,
    finish: JobFinish,
    recorded: oneshot::Sender<StoreResult<Recorded>>,
}

/// What the recording of one finish came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recorded {
    /// `false`: the worker no longer owned the job; its result is discarded.
    pub owned: bool,
    /// The sessions the job served that had no job left queued or running
    /// once it was committed: the ones to settle after its files are published.
    pub settleable: Vec<SessionId>,
}

/// Records finishes as [`crate::store::JobQueue::finish_job`] does, several
/// to a transaction.
#[derive(Clone)]
pub struct Finisher {
    queue: mpsc::UnboundedSender<PendingFinish>,
    store: DynStore,
}

impl Finisher {
    /// Starts the tasks that record; they end once every clone is dropped.
    /// A database that admits one writer gets one; others get a few, so
    /// that one batch's statements need not wait for the last one's commit.
    pub fn start(store: DynStore) -> Self {
        let (queue, pending) = mpsc::unbounded_channel();
        let pending = std::sync::Arc::new(tokio::sync::Mutex::new(pending));
        let recorders = if store.one_writer() { 1 } else { CONCURRENT_COMMITS };
        for _ in 0..recorders {
            let (store, pending) = (store.clone(), pending.clone());
            tokio::spawn(async move {
                let mut batch = Vec::with_capacity(MOST_PER_COMMIT);
                while pending.lock().await.recv_many(&mut batch, MOST_PER_COMMIT).await > 0 {
                    record_batch(store.as_ref(), std::mem::take(&mut batch)).await;
                }
            });
        }
        Self { queue, store }
    }

    pub async fn finish(&self, claimed: &ClaimedJob, finish: JobFinish) -> StoreResult<Recorded> {
        let (recorded, answer) = oneshot::channel();
        let pending = PendingFinish { claimed: claimed.clone(), finish, recorded };
        // The recording task is gone only while the runtime shuts down:
        // then the finish is recorded here, alone.
        if let Err(mpsc::error::SendError(pending)) = self.queue.send(pending) {
            let owned = self.store.finish_job(&pending.claimed, &pending.finish).await?;
            let settleable = if owned { super::served_sessions(&pending.claimed) } else { Vec::new() };
            return Ok(Recorded { owned, settleable });
        }
        match answer.await {
            Ok(recorded) => recorded,
            Err(_) => Err(sqlx::Error::PoolClosed.into()),
        }
    }
}

async fn record_batch(store: &dyn Store, mut batch: Vec<PendingFinish>) {
    // Every batch takes its jobs' row locks in the same order, so two
    // replicas' batches do not deadlock on them.
    batch.sort_by_key(|p| (p.claimed.tenant_id, p.claimed.job.job_id));
    let owned = record_finishes(store, &batch).await;
    let settleable = settleable_sessions(store, &batch, &owned).await;
    for ((pending, owned), settleable) in batch.into_iter().zip(owned).zip(settleable) {
        let _ = pending.recorded.send(owned.map(|owned| Recorded { owned, settleable }));
    }
}

/// Each finish's answer: recorded together in one transaction, or, when
/// that fails, each in one of its own, so that one finish that cannot be
/// recorded does not cost the others theirs.
async fn record_finishes(store: &dyn Store, batch: &[PendingFinish]) -> Vec<StoreResult<bool>> {
    if batch.len() > 1 {
        let together: Vec<_> = batch.iter().map(|p| (&p.claimed, &p.finish)).collect();
        match store.finish_jobs(&together).await {
            Ok(recorded) => return recorded.into_iter().map(Ok).collect(),
            Err(e) => tracing::warn!(
                jobs = batch.len(),
                error = %crate::error_chain(&e),
                "recording finishes together failed; recording each alone"
            ),
        }
    }
    let mut answers = Vec::with_capacity(batch.len());
    for pending in batch {
        answers.push(store.finish_job(&pending.claimed, &pending.finish).await);
    }
    answers
}

/// For each finish, the sessions it served that its batch's commit left
/// with nothing queued or running. Asked after the commit, so that of two
/// batches finishing one session's last jobs the later one sees both. When
/// the question cannot be answered, every served session is a candidate:
/// settling checks again.
async fn settleable_sessions(
    store: &dyn Store,
    batch: &[PendingFinish],
    owned: &[StoreResult<bool>],
) -> Vec<Vec<SessionId>> {
    let served: Vec<Vec<SessionId>> = batch
        .iter()
        .zip(owned)
        .map(|(pending, owned)| {
            let finished = !matches!(pending.finish.outcome, JobOutcome::RetryAt { .. });
            if finished && matches!(owned, Ok(true)) { super::served_sessions(&pending.claimed) } else { Vec::new() }
        })
        .collect();
    let asked: Vec<(TenantId, SessionId)> = batch
        .iter()
        .zip(&served)
        .flat_map(|(pending, sessions)| sessions.iter().map(|s| (pending.claimed.tenant_id, s.clone())))
        .collect();
    let settleable = match store.sessions_without_open_jobs(&asked).await {
        Ok(settleable) => settleable.into_iter().collect::<std::collections::HashSet<_>>(),
        Err(e) => {
            tracing::warn!(error = %crate::error_chain(&e), "finding the sessions a batch finished failed; settling each");
            return served;
        }
    };
    batch
        .iter()
        .zip(served)
        .map(|(pending, sessions)| {
            let tenant = pending.claimed.tenant_id;
            sessions.into_iter().filter(|s| settleable.contains(&(tenant, s.clone()))).collect()
        })
        .collect()
}
