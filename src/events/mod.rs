//! Events at run time (SPEC §2.8): the live stream's hub, the webhook
//! delivery workers and the sealing of endpoint secrets. What an event is
//! and how it is signed are pure rules in `domain::events`; the outbox is
//! the store's.

pub mod delivery;
pub mod seal;
pub mod stream;

use crate::domain::events::UrlPolicy;
use crate::store::DynStore;
use std::sync::Arc;

/// What the API and the workers of one process share of events.
#[derive(Clone)]
pub struct Events {
    pub hub: Arc<stream::EventHub>,
    pub key: seal::SecretsKey,
    pub policy: UrlPolicy,
}

impl Events {
    pub fn new(store: DynStore, key: seal::SecretsKey, policy: UrlPolicy) -> Self {
        Self { hub: Arc::new(stream::EventHub::new(store)), key, policy }
    }

    /// Events were committed in this process: the stream and the deliveries
    /// look now instead of at their next poll.
    pub fn committed(&self) {
        self.hub.committed();
    }
}
