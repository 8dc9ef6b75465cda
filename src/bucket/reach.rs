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

/// Whether a probe's outcome means the store answered: found or not, or
/// refused for want of rights, it answered; a transport failure, a server
/// error or no answer in time is an outage.
fn answered(
    outcome: &Result<Result<object_store::ObjectMeta, object_store::Error>, tokio::time::error::Elapsed>,
) -> bool {
    use object_store::Error;
    matches!(
        outcome,
        Ok(Ok(_) | Err(Error::NotFound { .. } | Error::PermissionDenied { .. } | Error::Unauthenticated { .. }))
    )
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
