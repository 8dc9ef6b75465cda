//! The live stream's hub: one loop per process reads the outbox for the
//! tenants that have streams open here and hands each new event to all of
//! their streams, so the database sees one small query per poll whatever
//! the number of streams.

use crate::store::{DynStore, EventRecord, StoreResult, TenantId};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{Notify, broadcast};
use tokio_util::sync::CancellationToken;

/// How often the hub looks for events committed by other replicas.
const POLL: Duration = Duration::from_millis(250);
/// Events a slow stream may fall behind before it reads the outbox itself.
const CHANNEL_CAPACITY: usize = 1024;
/// Events read from the outbox per query.
pub const PAGE: i64 = 500;

struct Channel {
    sender: broadcast::Sender<Arc<EventRecord>>,
    /// The newest event handed to the channel.
    sent_through: i64,
}

pub struct EventHub {
    store: DynStore,
    channels: Mutex<HashMap<TenantId, Channel>>,
    wake: Notify,
    /// Wakes the delivery workers of this process.
    pub deliveries: Notify,
}

impl EventHub {
    pub fn new(store: DynStore) -> Self {
        Self { store, channels: Mutex::new(HashMap::new()), wake: Notify::new(), deliveries: Notify::new() }
    }

    pub fn committed(&self) {
        self.wake.notify_one();
        self.deliveries.notify_one();
    }

    /// A receiver of the tenant's events committed from now on, and the
    /// number of the newest event before them.
    pub async fn subscribe(&self, tenant: TenantId) -> StoreResult<(broadcast::Receiver<Arc<EventRecord>>, i64)> {
        let latest = self.store.latest_event_seqs(&[tenant]).await?.first().map_or(0, |(_, seq)| *seq);
        let mut channels = self.channels.lock().expect("the hub's lock is never poisoned");
        let channel = channels
            .entry(tenant)
            .or_insert_with(|| Channel { sender: broadcast::channel(CHANNEL_CAPACITY).0, sent_through: latest });
        Ok((channel.sender.subscribe(), latest))
    }

    /// Runs until shutdown: a poll every 250 ms, or at once when this
    /// process committed events.
    pub async fn run(self: Arc<Self>, shutdown: CancellationToken) {
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = self.wake.notified() => {}
                _ = tokio::time::sleep(POLL) => {}
            }
            if let Err(e) = self.poll_once().await {
                tracing::warn!(error = %crate::error_chain(&e), "the event stream could not read the outbox");
                tokio::time::sleep(POLL).await;
            }
        }
    }

    async fn poll_once(&self) -> StoreResult<()> {
        let watched: Vec<(TenantId, i64)> = {
            let mut channels = self.channels.lock().expect("the hub's lock is never poisoned");
            channels.retain(|_, c| c.sender.receiver_count() > 0);
            channels.iter().map(|(t, c)| (*t, c.sent_through)).collect()
        };
        if watched.is_empty() {
            return Ok(());
        }
        let tenants: Vec<TenantId> = watched.iter().map(|(t, _)| *t).collect();
        let latest: HashMap<TenantId, i64> = self.store.latest_event_seqs(&tenants).await?.into_iter().collect();
        for (tenant, mut sent) in watched {
            while latest.get(&tenant).is_some_and(|l| *l > sent) {
                let events = self.store.events_after(tenant, sent, PAGE).await?;
                let Some(last) = events.last().map(|e| e.seq) else { break };
                let mut channels = self.channels.lock().expect("the hub's lock is never poisoned");
                let Some(channel) = channels.get_mut(&tenant) else { break };
                for event in events.into_iter().filter(|e| e.seq > channel.sent_through) {
                    let _ = channel.sender.send(Arc::new(event));
                }
                channel.sent_through = channel.sent_through.max(last);
                sent = channel.sent_through;
            }
        }
        Ok(())
    }
}
