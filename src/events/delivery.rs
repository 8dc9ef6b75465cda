//! Webhook delivery workers. Each replica claims endpoints with deliveries
//! due as it claims jobs (leases, skip-locked rows), and the first few
//! deliveries of each, and sends each endpoint's in order on a task of its
//! own: a slow endpoint holds up only itself, a failing one is paused until
//! its retry, and nothing here holds up the pipeline, which only writes the
//! outbox.

use super::Events;
use crate::domain::events::{
    Answer, UrlPolicy, UrlRefusal, check_url_shape, classify, event_id, forbidden_address, literal_address,
    recorded_body, signature_header,
};
use crate::store::{ClaimedDelivery, DeliveryAttempt, DynStore};
use chrono::Utc;
use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

/// A receiver has this long to answer (SPEC §2.8).
pub const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(15);
/// What is read of a receiver's answer; the record keeps its start.
const RESPONSE_READ_LIMIT: usize = 64 * 1024;
const RESPONSE_RECORD_LIMIT: usize = 1024;
/// A claim's lease: one attempt and a margin, so the deliveries of a replica
/// that died are taken over within half a minute.
const LEASE: Duration = Duration::from_secs(35);
const LEASE_MARGIN: Duration = Duration::from_secs(5);
/// Deliveries of one endpoint claimed at once, sent one after the other
/// while the lease lasts.
const PER_ENDPOINT: usize = 8;
/// Endpoints delivered to at once by one replica.
const ENDPOINTS_AT_ONCE: usize = 32;
const POLL: Duration = Duration::from_millis(250);

/// Checks an endpoint's URL as at creation: its shape, then every address
/// its host resolves to.
pub async fn check_endpoint(url: &str, policy: UrlPolicy) -> Result<url::Url, UrlRefusal> {
    let parsed = check_url_shape(url, policy)?;
    if !policy.allow_private {
        let addresses: Vec<IpAddr> = match (literal_address(&parsed), parsed.host()) {
            (Some(ip), _) => vec![ip],
            (None, Some(url::Host::Domain(name))) => {
                resolve(name).await.map_err(|_| UrlRefusal::Unresolvable)?.iter().map(SocketAddr::ip).collect()
            }
            _ => return Err(UrlRefusal::NotAUrl),
        };
        if addresses.is_empty() {
            return Err(UrlRefusal::Unresolvable);
        }
        if addresses.into_iter().any(forbidden_address) {
            return Err(UrlRefusal::PrivateAddress);
        }
    }
    Ok(parsed)
}

/// The addresses a host name resolves to (the port is the URL's business).
async fn resolve(name: &str) -> std::io::Result<Vec<SocketAddr>> {
    Ok(tokio::net::lookup_host((name, 0)).await?.collect())
}

/// The resolver of the delivery client: a name that resolves to any
/// forbidden address is not connected to at all, so a name that passed at
/// creation and resolves elsewhere now (DNS rebinding) is refused.
struct PublicOnly;

impl reqwest::dns::Resolve for PublicOnly {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let host = name.as_str().to_owned();
        Box::pin(async move {
            let addresses = resolve(&host).await?;
            if addresses.iter().any(|a| forbidden_address(a.ip())) {
                return Err(Box::new(std::io::Error::other(UrlRefusal::PrivateAddress.to_string()))
                    as Box<dyn std::error::Error + Send + Sync>);
            }
            Ok(Box::new(addresses.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

fn delivery_client(policy: UrlPolicy) -> reqwest::Client {
    let mut builder = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(ATTEMPT_TIMEOUT)
        .connect_timeout(Duration::from_secs(10))
        .user_agent(concat!("memoryd/", env!("CARGO_PKG_VERSION"), " (webhooks)"))
        // A proxy from the environment would resolve names itself, past the
        // resolver below that refuses forbidden addresses.
        .no_proxy();
    if !policy.allow_private {
        builder = builder.dns_resolver(Arc::new(PublicOnly));
    }
    builder.build().expect("the delivery client's settings are valid")
}

/// Runs the delivery workers of this process until shutdown; in-flight
/// attempts finish first (they are bounded by the 15 s timeout).
pub async fn run(store: DynStore, events: Events, shutdown: CancellationToken) {
    let client = delivery_client(events.policy);
    let slots = Arc::new(Semaphore::new(ENDPOINTS_AT_ONCE));
    let mut running = JoinSet::new();
    loop {
        if shutdown.is_cancelled() {
            break;
        }
        while running.try_join_next().is_some() {}
        let leased_until = tokio::time::Instant::now() + LEASE;
        // No more endpoints are claimed than can be delivered to now.
        let free = slots.available_permits() as i64;
        let claimed = match free {
            0 => Vec::new(),
            _ => match store.claim_deliveries(Utc::now(), LEASE, free, PER_ENDPOINT).await {
                Ok(claimed) => claimed,
                Err(e) => {
                    tracing::warn!(error = %crate::error_chain(&e), "could not claim webhook deliveries");
                    Vec::new()
                }
            },
        };
        let found = !claimed.is_empty();
        let mut by_endpoint: BTreeMap<uuid::Uuid, Vec<ClaimedDelivery>> = BTreeMap::new();
        for delivery in claimed {
            by_endpoint.entry(delivery.webhook_id).or_default().push(delivery);
        }
        for (_, deliveries) in by_endpoint {
            let Ok(slot) = slots.clone().acquire_owned().await else { break };
            let (store, events, client) = (store.clone(), events.clone(), client.clone());
            running.spawn(async move {
                deliver_in_order(&store, &events, &client, deliveries, leased_until).await;
                drop(slot);
                // The endpoint may have more waiting: claim again now.
                events.hub.deliveries.notify_one();
            });
        }
        if found {
            continue;
        }
        tokio::select! {
            _ = shutdown.cancelled() => {}
            _ = events.hub.deliveries.notified() => {}
            _ = tokio::time::sleep(POLL) => {}
        }
    }
    while running.join_next().await.is_some() {}
}

/// One endpoint's claimed deliveries, oldest first. A failed attempt ends
/// the round (the store pauses the endpoint until its retry), and so does a
/// lease with too little left for a whole attempt; the rest go back.
async fn deliver_in_order(
    store: &DynStore,
    events: &Events,
    client: &reqwest::Client,
    deliveries: Vec<ClaimedDelivery>,
    leased_until: tokio::time::Instant,
) {
    let Some(first) = deliveries.first() else { return };
    let (webhook, token) = (first.webhook_id, first.token);
    for delivery in deliveries {
        if tokio::time::Instant::now() + ATTEMPT_TIMEOUT + LEASE_MARGIN > leased_until {
            break;
        }
        let attempt = attempt(events, client, &delivery).await;
        crate::metrics::webhook_attempt(attempt.answer);
        let delivered = attempt.answer == Answer::Delivered;
        match store.finish_delivery(&delivery, &attempt).await {
            Ok(true) => {}
            Ok(false) => {
                tracing::warn!(webhook = %delivery.webhook_id, "a delivery's lease passed before its attempt was recorded")
            }
            Err(e) => tracing::warn!(error = %crate::error_chain(&e), "could not record a delivery attempt"),
        }
        if !delivered {
            break;
        }
    }
    if let Err(e) = store.release_endpoint(webhook, token).await {
        tracing::warn!(error = %crate::error_chain(&e), "could not give an endpoint's deliveries back");
    }
}

async fn attempt(events: &Events, client: &reqwest::Client, delivery: &ClaimedDelivery) -> DeliveryAttempt {
    let at = Utc::now();
    let failed = |error: String| DeliveryAttempt {
        status: None,
        error: Some(error),
        response: None,
        answer: Answer::Failed,
        at,
    };
    let mut secrets = Vec::with_capacity(2);
    for sealed in std::iter::once(&delivery.sealed_secret).chain(delivery.sealed_previous.as_ref()) {
        match events.key.open(delivery.webhook_id, sealed) {
            Ok(secret) => secrets.push(secret),
            Err(e) => return failed(e.to_string()),
        }
    }
    // Checked again now: the endpoint may have been made under other flags.
    let url = match check_url_shape(&delivery.url, events.policy) {
        Ok(url) => url,
        Err(refused) => return failed(refused.to_string()),
    };
    if !events.policy.allow_private
        && let Some(ip) = literal_address(&url)
        && forbidden_address(ip)
    {
        return failed(UrlRefusal::PrivateAddress.to_string());
    }
    let id = event_id(delivery.tenant_id, delivery.event_seq);
    let timestamp = at.timestamp();
    let secret_refs: Vec<&str> = secrets.iter().map(String::as_str).collect();
    let signature = signature_header(&secret_refs, &id, timestamp, delivery.payload.as_bytes());
    let sent = client
        .post(url)
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .header("webhook-id", &id)
        .header("webhook-timestamp", timestamp.to_string())
        .header("webhook-signature", signature)
        .body(delivery.payload.clone())
        .send()
        .await;
    let mut response = match sent {
        Ok(response) => response,
        Err(e) => return failed(describe_send_error(&e)),
    };
    let status = response.status().as_u16();
    let mut body = Vec::new();
    while body.len() < RESPONSE_READ_LIMIT {
        match response.chunk().await {
            Ok(Some(chunk)) => body.extend_from_slice(&chunk),
            Ok(None) | Err(_) => break,
        }
    }
    let answer = classify(Some(status));
    DeliveryAttempt {
        status: Some(status),
        error: (answer != Answer::Delivered).then(|| format!("the endpoint answered {status}")),
        response: Some(recorded_body(&body, RESPONSE_RECORD_LIMIT)),
        answer,
        at,
    }
}

/// Why a request failed, without the URL (it may carry a token in its path).
fn describe_send_error(e: &reqwest::Error) -> String {
    if e.is_timeout() {
        return format!("no answer within {} s", ATTEMPT_TIMEOUT.as_secs());
    }
    let source = std::error::Error::source(e).map(crate::error_chain).unwrap_or_default();
    if source.contains(&UrlRefusal::PrivateAddress.to_string()) {
        return UrlRefusal::PrivateAddress.to_string();
    }
    if e.is_connect() {
        return format!("could not connect: {source}");
    }
    format!("the request failed: {source}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::dns::Resolve;

    #[tokio::test]
    async fn names_and_addresses_that_reach_private_networks_are_refused() {
        let strict = UrlPolicy { allow_http: true, allow_private: false };
        assert_eq!(check_endpoint("https://localhost/x", strict).await, Err(UrlRefusal::PrivateAddress));
        assert_eq!(check_endpoint("http://[::1]:8080/x", strict).await, Err(UrlRefusal::PrivateAddress));
        assert_eq!(check_endpoint("https://no-such-host.invalid/x", strict).await, Err(UrlRefusal::Unresolvable));
        assert!(check_endpoint("https://93.184.216.34/x", strict).await.is_ok());
        let open = UrlPolicy { allow_http: true, allow_private: true };
        assert!(check_endpoint("http://localhost:9/x", open).await.is_ok());
        // At delivery, the resolver refuses the name itself.
        let refused = PublicOnly.resolve("localhost".parse().unwrap()).await;
        assert!(refused.err().unwrap().to_string().contains("private"));
    }
}
