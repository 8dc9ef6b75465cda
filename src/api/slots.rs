//! What one replica serves at once, bounded: exports (each holds a blocking
//! thread while its client reads) and each tenant's live event streams
//! (SPEC §2.7, §2.8). Beyond a bound the request answers 429.

use super::error::ApiError;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

pub struct Slots {
    exports: Arc<Semaphore>,
    streams_per_tenant: usize,
    streams: Mutex<HashMap<uuid::Uuid, usize>>,
}

/// A tenant's open stream, counted until it is dropped.
pub struct StreamSlot {
    slots: Arc<Slots>,
    tenant: uuid::Uuid,
}

impl Slots {
    pub fn new(max_exports: usize, streams_per_tenant: usize) -> Self {
        Self {
            exports: Arc::new(Semaphore::new(max_exports.max(1))),
            streams_per_tenant: streams_per_tenant.max(1),
            streams: Mutex::default(),
        }
    }

    /// A place for one more export, held until its archive is written or abandoned.
    pub fn export(&self) -> Result<OwnedSemaphorePermit, ApiError> {
        self.exports.clone().try_acquire_owned().map_err(|_| {
            ApiError::Busy("As many exports as this server streams at once are under way; try again shortly.".into())
        })
    }

    /// A place for one more of `tenant`'s live streams.
    pub fn stream(self: &Arc<Self>, tenant: uuid::Uuid) -> Result<StreamSlot, ApiError> {
        let mut streams = self.streams.lock().expect("the streams' lock is never poisoned");
        let open = streams.entry(tenant).or_default();
        if *open >= self.streams_per_tenant {
            return Err(ApiError::Busy(format!(
                "This tenant has {} event streams open here, the most it may; close one first.",
                self.streams_per_tenant
            )));
        }
        *open += 1;
        Ok(StreamSlot { slots: self.clone(), tenant })
    }
}

impl Drop for StreamSlot {
    fn drop(&mut self) {
        let mut streams = self.slots.streams.lock().expect("the streams' lock is never poisoned");
        if let Some(open) = streams.get_mut(&self.tenant) {
            *open -= 1;
            if *open == 0 {
                streams.remove(&self.tenant);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_bounded_and_given_back() {
        let slots = Arc::new(Slots::new(1, 2));
        let export = slots.export().unwrap();
        assert!(slots.export().is_err());
        drop(export);
        assert!(slots.export().is_ok());
        let (a, b) = (uuid::Uuid::new_v4(), uuid::Uuid::new_v4());
        let first = slots.stream(a).unwrap();
        let _second = slots.stream(a).unwrap();
        assert!(slots.stream(a).is_err(), "a third of one tenant");
        assert!(slots.stream(b).is_ok(), "another tenant's own");
        drop(first);
        assert!(slots.stream(a).is_ok());
    }
}
