//! Whether this replica reaches the object store: a probe (a HEAD of a key
//! no object has) at most once every two seconds, answered from memory in
//! between. While the store does not answer, workers claim no job (it could
//! only fail its attempt), so an outage spends no job's attempts; appends
//! are still acknowledged (the journal is in the database) and the gauge
//! `memoryd_object_store_up` tells the operator.

use super::Bucket;
use object_store::path::Path as ObjectKey;
use std::time::{Duration, Instant};

/// How long a probe's answer is trusted.
const READING_LIFE: Duration = Duration::from_secs(2);
/// A store that has not answered within this is taken as down.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// The last probe's answer: when, and whether the store answered.
#[derive(Debug, Default)]
pub(crate) struct Reach(tokio::sync::Mutex<Option<(Instant, bool)>>);

/// Whether a probe's outcome means the store answered: any answer does
/// (found or not, refused for want of rights, a status memoryd does not
/// expect), but no answer in time or a request that could not be made (a
/// connection refused or cut: a `reqwest` error under the store's) does not.
/// A server error is retried by the client past the probe's time.
fn answered(
    outcome: &Result<Result<object_store::ObjectMeta, object_store::Error>, tokio::time::error::Elapsed>,
) -> bool {
    match outcome {
        Err(_) => false,
        Ok(Ok(_)) => true,
        Ok(Err(e)) => {
            let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(e);
            while let Some(error) = cause {
                if error.downcast_ref::<reqwest::Error>().is_some() {
                    return false;
                }
                cause = error.source();
            }
            true
        }
    }
}

impl Bucket {
    /// Whether the object store answers (one probe at a time; callers
    /// meanwhile wait for its answer).
    pub async fn reachable(&self) -> bool {
        let mut last = self.reach.0.lock().await;
        if let Some((at, up)) = *last
            && at.elapsed() < READING_LIFE
        {
            return up;
        }
        let probe = ObjectKey::from(self.url.own_probe_key());
        let up = answered(&tokio::time::timeout(PROBE_TIMEOUT, self.objects.head(&probe)).await);
        match (last.map(|(_, was)| was), up) {
            (Some(false), true) => tracing::info!("the object store answers again; jobs are claimed"),
            (None | Some(true), false) => {
                tracing::warn!("the object store does not answer; no job is claimed until it does")
            }
            _ => {}
        }
        crate::metrics::object_store_up(up);
        *last = Some((Instant::now(), up));
        up
    }
}
