//! Group commit of job finishes: the attempts that finish while one
//! recording transaction commits are recorded together in the next one, so
//! that a burst of short jobs pays one commit (one log sync, one turn of
//! SQLite's single writer) per batch rather than one per job.

use crate::store::{ClaimedJob, DynStore, JobFinish, Store, StoreResult};
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
    recorded: oneshot::Sender<StoreResult<bool>>,
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

    /// `false` when the worker no longer owns the job (its result discarded).
    pub async fn finish(&self, claimed: &ClaimedJob, finish: JobFinish) -> StoreResult<bool> {
        let (recorded, answer) = oneshot::channel();
        let pending = PendingFinish { claimed: claimed.clone(), finish, recorded };
        // The recording task is gone only while the runtime shuts down:
        // then the finish is recorded here, alone.
        if let Err(mpsc::error::SendError(pending)) = self.queue.send(pending) {
            return self.store.finish_job(&pending.claimed, pending.finish).await;
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
    if batch.len() > 1 {
        let together: Vec<_> = batch.iter().map(|p| (&p.claimed, &p.finish)).collect();
        match store.finish_jobs(&together).await {
            Ok(recorded) => {
                for (pending, recorded) in batch.into_iter().zip(recorded) {
                    let _ = pending.recorded.send(Ok(recorded));
                }
                return;
            }
            // One finish that cannot be recorded must not cost the others
            // theirs: each is tried in a transaction of its own.
            Err(e) => tracing::warn!(
                jobs = batch.len(),
                error = %crate::error_chain(&e),
                "recording finishes together failed; recording each alone"
            ),
        }
    }
    for pending in batch {
        let recorded = store.finish_job(&pending.claimed, pending.finish).await;
        let _ = pending.recorded.send(recorded);
    }
}
