//! Events (SPEC §2.8): signed webhook deliveries to a local receiver, their
//! retries and the 410 that disables an endpoint, secret rotation, the
//! address rules, and the live stream with its resume; the real binary
//! killed with deliveries pending, and two replicas sharing the deliveries.

use crate::console::{Browser, hidden};
use crate::every_backend;
use crate::harness::{Backend, Tenant, TestApp, isolated_postgres_url, status_code_body};
use crate::process::{Memoryd, new_tenant};
use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode};
use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use hmac::{KeyInit, Mac};
use reqwest::Method;
use serde_json::{Value, json};
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

every_backend!(
    a_close_is_delivered_as_signed_session_closed_and_run_succeeded,
    a_failed_delivery_is_retried_with_the_same_webhook_id,
    a_failing_endpoint_is_paused_not_hammered,
    a_resume_from_the_start_replays_the_whole_backlog,
    a_410_disables_the_endpoint_and_drops_its_deliveries,
    an_endpoint_is_changed_and_enabled_again_with_its_secret,
    a_rotated_secret_signs_alongside_the_new_one_for_a_day,
    webhook_requests_are_checked,
    the_stream_delivers_in_order_filters_and_resumes,
    the_console_shows_endpoints_and_sends_a_test_event,
);

/// One request the receiver got.
#[derive(Debug, Clone)]
pub(crate) struct Received {
    pub id: String,
    pub timestamp: String,
    pub signature: String,
    pub body: String,
    /// The status the receiver answered it with.
    pub answered: u16,
}

impl Received {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap()
    }
}

/// A local webhook receiver that answers from a script (then 200), or not at all.
#[derive(Clone)]
pub(crate) struct Receiver {
    pub url: String,
    pub got: Arc<Mutex<Vec<Received>>>,
    script: Arc<Mutex<VecDeque<u16>>>,
}

impl Receiver {
    pub async fn start() -> Self {
        let receiver = Self { url: String::new(), got: Default::default(), script: Default::default() };
        let state = receiver.clone();
        let app = axum::Router::new().route(
            "/hook",
            axum::routing::post(move |headers: HeaderMap, body: Bytes| {
                let state = state.clone();
                async move {
                    let answered = state.script.lock().unwrap().pop_front().unwrap_or(200);
                    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or("").to_owned();
                    state.got.lock().unwrap().push(Received {
                        id: header("webhook-id"),
                        timestamp: header("webhook-timestamp"),
                        signature: header("webhook-signature"),
                        body: String::from_utf8(body.to_vec()).unwrap(),
                        answered,
                    });
                    StatusCode::from_u16(answered).unwrap()
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/hook", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Self { url, ..receiver }
    }

    pub fn answer_next(&self, statuses: &[u16]) {
        self.script.lock().unwrap().extend(statuses);
    }

    pub fn received(&self) -> Vec<Received> {
        self.got.lock().unwrap().clone()
    }

    /// Waits until `done` holds of what was received.
    pub async fn wait_until(&self, what: &str, limit: Duration, done: impl Fn(&[Received]) -> bool) -> Vec<Received> {
        let started = Instant::now();
        loop {
            let got = self.received();
            if done(&got) {
                return got;
            }
            assert!(started.elapsed() < limit, "{what}: received {got:#?}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// The Standard Webhooks check, written from the specification: is any
/// `v1,` signature of the header the HMAC-SHA256 of `id.timestamp.body`
/// under the secret's bytes?
pub(crate) fn verifies(secret: &str, received: &Received) -> bool {
    let key = BASE64.decode(secret.strip_prefix("whsec_").unwrap()).unwrap();
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(&key).unwrap();
    mac.update(format!("{}.{}.{}", received.id, received.timestamp, received.body).as_bytes());
    let expected = format!("v1,{}", BASE64.encode(mac.finalize().into_bytes()));
    received.signature.split(' ').any(|s| s == expected)
}

/// An app whose endpoints may be plain http on loopback (the receiver's).
async fn app_for_hooks(backend: Backend) -> TestApp {
    TestApp::start_with(backend, |c| {
        c.events.webhook_allow_http = true;
        c.events.webhook_allow_private = true;
    })
    .await
}

pub(crate) async fn create_webhook(app: &TestApp, t: &Tenant, body: Value) -> Value {
    let res = app.request(Method::POST, "/v1/webhooks", &t.key).json(&body).send().await.unwrap();
    let (status, _, body) = status_code_body(res).await;
    assert_eq!(status, 201, "{body}");
    body
}

pub(crate) async fn send_test_event(app: &TestApp, t: &Tenant, webhook: &str) -> String {
    let res = app.request(Method::POST, &format!("/v1/webhooks/{webhook}/test"), &t.key).send().await.unwrap();
    let (status, _, body) = status_code_body(res).await;
    assert_eq!(status, 202, "{body}");
    body["event_id"].as_str().unwrap().to_owned()
}

async fn close_a_session(app: &TestApp, t: &Tenant, session: &str) {
    let segment =
        json!({"rollout_id": format!("chat-{session}"), "input": "I prefer green tea.", "final_output": "noted"});
    assert_eq!(app.post_segment(&t.key, session, "default", segment).await.status(), 201);
    let res = app.request(Method::POST, &format!("/v1/sessions/{session}/close?wait=30"), &t.key).send().await.unwrap();
    assert_eq!(res.status(), 200);
}

async fn a_close_is_delivered_as_signed_session_closed_and_run_succeeded(backend: Backend) {
    let app = app_for_hooks(backend).await;
    let receiver = Receiver::start().await;
    let t = app.tenant().await;
    let hook = create_webhook(&app, &t, json!({"url": receiver.url, "description": "dashboard"})).await;
    let secret = hook["secret"].as_str().unwrap();
    assert!(secret.starts_with("whsec_"));
    assert_eq!(BASE64.decode(&secret[6..]).unwrap().len(), 32);
    assert_eq!(hook["events"], json!(["*"]));
    let listed = app.json(Method::GET, "/v1/webhooks", &t.key).await;
    assert!(listed["webhooks"][0].get("secret").is_none(), "a secret is shown once: {listed}");
    let sealed = std::fs::read(app.data_dir.join("secrets.key")).unwrap();
    assert_eq!(sealed.len(), 32, "the key that seals secrets in the database");

    close_a_session(&app, &t, "s1").await;
    let got = receiver
        .wait_until("session.closed and run.succeeded", Duration::from_secs(20), |got| {
            let types: Vec<Value> = got.iter().map(|r| r.json()["type"].clone()).collect();
            types.contains(&json!("session.closed")) && types.contains(&json!("run.succeeded"))
        })
        .await;
    for received in &got {
        assert!(verifies(secret, received), "signature does not verify: {received:?}");
        assert!(!verifies("whsec_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=", received));
        assert!(received.id.starts_with("evt_"), "{}", received.id);
        let sent_at: i64 = received.timestamp.parse().unwrap();
        assert!((chrono::Utc::now().timestamp() - sent_at).abs() < 60);
    }
    let closed = got.iter().map(Received::json).find(|b| b["type"] == "session.closed").unwrap();
    assert_eq!(closed["data"]["session_id"], "s1");
    assert_eq!(closed["data"]["workspace"], "default");
    assert_eq!(closed["data"]["memory_status"]["status"], "complete");
    assert!(closed["timestamp"].as_str().unwrap().ends_with('Z'));
    let run = got.iter().map(Received::json).find(|b| b["type"] == "run.succeeded").unwrap();
    assert_eq!(run["data"]["kind"], "phase_two");
    assert_eq!(run["data"]["layout"], "default");
    assert_eq!(run["data"]["added"], 1);
    let runs = app.json(Method::GET, "/v1/workspaces/default/layouts/default/runs", &t.key).await;
    assert_eq!(run["data"]["run_id"], runs["runs"][0]["run_id"]);
    let ids: std::collections::HashSet<&str> = got.iter().map(|r| r.id.as_str()).collect();
    assert_eq!(ids.len(), got.len(), "each event once: {got:?}");

    // The receiver has its request before memoryd records the answer.
    let path = format!("/v1/webhooks/{}/deliveries", hook["webhook_id"].as_str().unwrap());
    let started = Instant::now();
    let deliveries = loop {
        let listed = app.json(Method::GET, &path, &t.key).await;
        let deliveries = listed["deliveries"].as_array().unwrap().clone();
        if deliveries.iter().all(|d| d["state"] != "pending") {
            break deliveries;
        }
        assert!(started.elapsed() < Duration::from_secs(10), "{listed}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(deliveries.len(), got.len());
    assert!(deliveries.iter().all(|d| d["state"] == "succeeded" && d["attempts"] == 1 && d["last_status"] == 200));
    assert!(deliveries[0]["event_id"].as_str() > deliveries[1]["event_id"].as_str(), "newest first");
}

async fn a_failed_delivery_is_retried_with_the_same_webhook_id(backend: Backend) {
    let app = app_for_hooks(backend).await;
    let receiver = Receiver::start().await;
    let t = app.tenant().await;
    let hook = create_webhook(&app, &t, json!({"url": receiver.url, "events": ["webhook.test"]})).await;
    let webhook = hook["webhook_id"].as_str().unwrap();
    receiver.answer_next(&[500]);
    let event = send_test_event(&app, &t, webhook).await;
    receiver.wait_until("the first attempt", Duration::from_secs(10), |got| !got.is_empty()).await;
    let first = &newest_delivery_after(&app, &t, webhook, 1).await;
    assert_eq!(first["state"], "pending");
    assert_eq!(first["attempts"], 1);
    assert_eq!(first["last_status"], 500);
    let next: chrono::DateTime<chrono::Utc> = first["next_attempt_at"].as_str().unwrap().parse().unwrap();
    let last: chrono::DateTime<chrono::Utc> = first["last_attempt_at"].as_str().unwrap().parse().unwrap();
    assert_eq!((next - last).num_seconds(), 5, "the first retry comes about 5 s later");
    let got = receiver.wait_until("the retry", Duration::from_secs(15), |got| got.len() >= 2).await;
    assert_eq!(got.len(), 2);
    assert_eq!(got[0].id, event);
    assert_eq!(got[1].id, event, "a retry carries the same webhook-id");
    assert_eq!((got[0].answered, got[1].answered), (500, 200));
    assert_eq!(got[0].body, got[1].body);
    assert!(verifies(hook["secret"].as_str().unwrap(), &got[1]));
    let done = &newest_delivery_after(&app, &t, webhook, 2).await;
    assert_eq!(
        (done["state"].as_str(), done["attempts"].as_i64(), done["last_status"].as_i64()),
        (Some("succeeded"), Some(2), Some(200))
    );
    assert!(done["next_attempt_at"].is_null());
}

/// The endpoint's newest delivery once memoryd has recorded its `attempts`-th
/// attempt (the receiver has a request before memoryd records its answer).
async fn newest_delivery_after(app: &TestApp, t: &Tenant, webhook: &str, attempts: i64) -> Value {
    let started = Instant::now();
    loop {
        let deliveries = app.json(Method::GET, &format!("/v1/webhooks/{webhook}/deliveries"), &t.key).await;
        let newest = deliveries["deliveries"][0].clone();
        if newest["attempts"].as_i64() >= Some(attempts) {
            return newest;
        }
        assert!(started.elapsed() < Duration::from_secs(10), "attempt {attempts} never recorded: {deliveries}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// An endpoint that answers 500 with 20 events waiting gets its first
/// event and that event's retry, not one request per event per cycle; the
/// others wait, in order, untouched.
async fn a_failing_endpoint_is_paused_not_hammered(backend: Backend) {
    let app = app_for_hooks(backend).await;
    let receiver = Receiver::start().await;
    let t = app.tenant().await;
    let hook = create_webhook(&app, &t, json!({"url": receiver.url, "events": ["webhook.test"]})).await;
    let webhook = hook["webhook_id"].as_str().unwrap();
    receiver.answer_next(&[500; 100]);
    let mut sent = Vec::new();
    for _ in 0..20 {
        sent.push(send_test_event(&app, &t, webhook).await);
    }
    tokio::time::sleep(Duration::from_secs(12)).await;
    let got = receiver.received();
    assert!((1..=3).contains(&got.len()), "{} requests in 12 s: {got:#?}", got.len());
    assert!(got.iter().all(|r| r.id == sent[0]), "only the first event, retried: {got:#?}");
    let deliveries = app.json(Method::GET, &format!("/v1/webhooks/{webhook}/deliveries?limit=50"), &t.key).await;
    let untouched = deliveries["deliveries"].as_array().unwrap().iter().filter(|d| d["attempts"] == 0).count();
    assert_eq!(untouched, 19, "{deliveries}");
}

/// A stream resumed from the first event on a quiet tenant replays every
/// event of a backlog longer than one outbox page, without waiting for a new one.
async fn a_resume_from_the_start_replays_the_whole_backlog(backend: Backend) {
    let app = app_for_hooks(backend).await;
    let receiver = Receiver::start().await;
    let t = app.tenant().await;
    create_webhook(&app, &t, json!({"url": receiver.url, "events": ["job.failed"]})).await;
    close_empty_sessions(&app, &t, "e", 650).await;
    let replayed = crate::leaks::replayed_events(&app, &t).await;
    let count = replayed.lines().filter(|l| *l == "event: session.closed").count();
    assert_eq!(count, 650, "a backlog of 650 events, replayed whole");
}

/// Opens and closes `count` sessions without segments: a `session.closed`
/// event each, in order.
async fn close_empty_sessions(app: &TestApp, t: &Tenant, prefix: &str, count: usize) {
    for n in 0..count {
        let session = format!("{prefix}{n}");
        let res = app.request(Method::POST, "/v1/sessions", &t.key).json(&json!({"session_id": session})).send();
        assert_eq!(res.await.unwrap().status(), 201);
        let closed = app.json(Method::POST, &format!("/v1/sessions/{session}/close"), &t.key).await;
        assert_eq!(closed["state"], "closed", "{closed}");
    }
}

async fn a_410_disables_the_endpoint_and_drops_its_deliveries(backend: Backend) {
    let app = app_for_hooks(backend).await;
    let receiver = Receiver::start().await;
    let other = Receiver::start().await;
    let t = app.tenant().await;
    let hook = create_webhook(&app, &t, json!({"url": receiver.url})).await;
    let webhook = hook["webhook_id"].as_str().unwrap();
    let kept = create_webhook(&app, &t, json!({"url": other.url})).await;
    receiver.answer_next(&[410]);
    send_test_event(&app, &t, webhook).await;
    receiver.wait_until("the 410", Duration::from_secs(10), |got| got.len() == 1).await;
    let started = Instant::now();
    let disabled = loop {
        let current = app.json(Method::GET, &format!("/v1/webhooks/{webhook}"), &t.key).await;
        if current["state"] == "disabled" {
            break current;
        }
        assert!(started.elapsed() < Duration::from_secs(10), "not disabled: {current}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(disabled["disabled_reason"].as_str().unwrap().contains("410"));
    let newest = newest_delivery_after(&app, &t, webhook, 1).await;
    assert_eq!(newest["state"], "failed");
    assert_eq!(newest["last_status"], 410);

    // Later events go to the endpoint still enabled, not to the disabled one.
    close_a_session(&app, &t, "s1").await;
    other.wait_until("the other endpoint's events", Duration::from_secs(20), |got| got.len() >= 2).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(receiver.received().len(), 1, "a disabled endpoint gets nothing more");
    let kept_now =
        app.json(Method::GET, &format!("/v1/webhooks/{}", kept["webhook_id"].as_str().unwrap()), &t.key).await;
    assert_eq!(kept_now["state"], "enabled");
    let res = app.request(Method::DELETE, &format!("/v1/webhooks/{webhook}"), &t.key).send().await.unwrap();
    assert_eq!(res.status(), 204);
    let res = app.request(Method::GET, &format!("/v1/webhooks/{webhook}"), &t.key).send().await.unwrap();
    assert_eq!(res.status(), 404);
}

async fn an_endpoint_is_changed_and_enabled_again_with_its_secret(backend: Backend) {
    let app = app_for_hooks(backend).await;
    let (gone, moved) = (Receiver::start().await, Receiver::start().await);
    let t = app.tenant().await;
    let hook = create_webhook(&app, &t, json!({"url": gone.url, "description": "first"})).await;
    let (webhook, secret) = (hook["webhook_id"].as_str().unwrap(), hook["secret"].as_str().unwrap());
    let patch = |body: Value| app.request(Method::PATCH, &format!("/v1/webhooks/{webhook}"), &t.key).json(&body).send();
    gone.answer_next(&[410]);
    send_test_event(&app, &t, webhook).await;
    let started = Instant::now();
    while app.json(Method::GET, &format!("/v1/webhooks/{webhook}"), &t.key).await["state"] != "disabled" {
        assert!(started.elapsed() < Duration::from_secs(10), "not disabled");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // A disabled endpoint takes no test event.
    let res = app.request(Method::POST, &format!("/v1/webhooks/{webhook}/test"), &t.key).send().await.unwrap();
    let (status, code, body) = status_code_body(res).await;
    assert_eq!((status, code.as_str()), (409, "webhook_disabled"), "{body}");

    // Moved, subscribed to closes, and on again: its secret still signs.
    let changed = json!({"url": moved.url, "events": ["session.closed"], "description": null, "state": "enabled"});
    let (status, _, body) = status_code_body(patch(changed).await.unwrap()).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!((body["url"].as_str(), body["state"].as_str()), (Some(moved.url.as_str()), Some("enabled")));
    assert_eq!((body["events"].clone(), body["description"].clone()), (json!(["session.closed"]), Value::Null));
    assert!(body["disabled_reason"].is_null() && body.get("secret").is_none(), "{body}");
    close_a_session(&app, &t, "s1").await;
    let got = moved.wait_until("the close", Duration::from_secs(20), |got| !got.is_empty()).await;
    assert_eq!(got[0].json()["type"], "session.closed");
    assert!(verifies(secret, &got[0]), "the secret made at creation still signs");
    assert_eq!(gone.received().len(), 1, "nothing more went to the old url");

    // Bad changes are refused and change nothing.
    for (bad, what) in [
        (json!({"state": "paused"}), "state"),
        (json!({"events": ["nope"]}), "unknown event type"),
        (json!({"url": "ftp://x.example/"}), "url"),
        (json!({"secret": "whsec_x"}), "unknown field"),
    ] {
        let (status, code, body) = status_code_body(patch(bad).await.unwrap()).await;
        assert_eq!((status, code.as_str()), (422, "invalid_webhook"), "{what}: {body}");
        assert!(body["detail"].as_str().unwrap().contains(what), "{body}");
    }
    let (status, _, body) = status_code_body(patch(json!({"state": "disabled"})).await.unwrap()).await;
    assert_eq!((status, body["state"].as_str()), (200, Some("disabled")), "{body}");
    let missing = app.request(Method::PATCH, "/v1/webhooks/00000000-0000-0000-0000-000000000000", &t.key);
    assert_eq!(missing.json(&json!({})).send().await.unwrap().status(), 404);
}

async fn a_rotated_secret_signs_alongside_the_new_one_for_a_day(backend: Backend) {
    let app = app_for_hooks(backend).await;
    let receiver = Receiver::start().await;
    let t = app.tenant().await;
    let hook = create_webhook(&app, &t, json!({"url": receiver.url})).await;
    let webhook = hook["webhook_id"].as_str().unwrap();
    let old = hook["secret"].as_str().unwrap().to_owned();
    let rotated = app.json(Method::POST, &format!("/v1/webhooks/{webhook}/rotate"), &t.key).await;
    let new = rotated["secret"].as_str().unwrap().to_owned();
    assert_ne!(old, new);
    let until: chrono::DateTime<chrono::Utc> = rotated["previous_secret_until"].as_str().unwrap().parse().unwrap();
    let hours = (until - chrono::Utc::now()).num_minutes() as f64 / 60.0;
    assert!((23.9..=24.0).contains(&hours), "{hours}");
    send_test_event(&app, &t, webhook).await;
    let got = receiver.wait_until("the test event", Duration::from_secs(10), |got| !got.is_empty()).await;
    let signatures: Vec<&str> = got[0].signature.split(' ').collect();
    assert_eq!(signatures.len(), 2, "{}", got[0].signature);
    assert!(verifies(&old, &got[0]) && verifies(&new, &got[0]));
    let only_new = Received { signature: signatures[0].to_owned(), ..got[0].clone() };
    assert!(verifies(&new, &only_new), "the new secret's signature comes first");
}

async fn webhook_requests_are_checked(backend: Backend) {
    let strict = TestApp::start(backend).await;
    let t = strict.tenant().await;
    let refused = |app: &TestApp, key: &str, body: Value| {
        let request = app.request(Method::POST, "/v1/webhooks", key).json(&body);
        async move { status_code_body(request.send().await.unwrap()).await }
    };
    for (body, says) in [
        (json!({"url": "http://hooks.example.com/x"}), "https"),
        (json!({"url": "https://127.0.0.1/x"}), "private"),
        (json!({"url": "https://10.1.2.3/x"}), "private"),
        (json!({"url": "https://[::1]/x"}), "private"),
        (json!({"url": "https://169.254.169.254/latest"}), "private"),
        (json!({"url": "https://localhost/x"}), "private"),
        (json!({"url": "https://0.1.2.3/x"}), "private"),
        (json!({"url": "https://100.64.0.1/x"}), "private"),
        (json!({"url": "https://192.0.0.8/x"}), "private"),
        (json!({"url": "https://198.18.0.1/x"}), "private"),
        (json!({"url": "https://240.0.0.1/x"}), "private"),
        (json!({"url": "https://[64:ff9b::7f00:1]/x"}), "private"),
        (json!({"url": "https://[2002:a9fe:a9fe::1]/x"}), "private"),
        (json!({"url": "https://[::a9fe:a9fe]/x"}), "private"),
        (json!({"url": "https://[::7f00:1]/x"}), "private"),
        (json!({"url": "https://[fec0::1]/x"}), "private"),
        (json!({"url": "https://[::ffff:169.254.169.254]/x"}), "private"),
        (json!({"url": "https://93.184.216.34/x", "events": ["session.opened"]}), "unknown event type"),
        (json!({"url": "https://93.184.216.34/x", "events": ["*", "job.failed"]}), "stands alone"),
        (json!({"url": "ftp://93.184.216.34/x"}), "http(s)"),
        (json!({"url": "https://user:pw@93.184.216.34/x"}), "credentials"),
        (json!({"events": []}), "url"),
        (json!({"url": "https://93.184.216.34/x", "colour": "red"}), "colour"),
    ] {
        let (status, code, problem) = refused(&strict, &t.key, body.clone()).await;
        assert_eq!((status, code.as_str()), (422, "invalid_webhook"), "{body}: {problem}");
        assert!(problem["detail"].as_str().unwrap().contains(says), "{body}: {problem}");
    }
    let (status, code, _) = refused(&strict, &t.key, json!({"url": "https://93.184.216.34/memoryd"})).await;
    assert_eq!((status, code.as_str()), (201, ""), "a public https endpoint is taken");
    drop(strict);

    // With plain http allowed, a private address still needs its own flag.
    let http_only = TestApp::start_with(backend, |c| c.events.webhook_allow_http = true).await;
    let t = http_only.tenant().await;
    let (status, code, problem) = refused(&http_only, &t.key, json!({"url": "http://127.0.0.1:9/x"})).await;
    assert_eq!((status, code.as_str()), (422, "invalid_webhook"), "{problem}");
    // An endpoint on a private address that got into the database anyway
    // (made under other flags, or its name now resolves elsewhere) is refused
    // at delivery: the receiver never hears of it.
    let receiver = Receiver::start().await;
    let state = &http_only.server.as_ref().unwrap().state;
    let webhook_id = uuid::Uuid::new_v4();
    let new = memoryd::store::NewWebhook {
        webhook_id,
        url: receiver.url.clone(),
        subscription: "*".into(),
        description: None,
        sealed_secret: state.events.key.seal(webhook_id, &memoryd::domain::events::new_secret()),
    };
    let tenant = uuid::Uuid::parse_str(&t.id).unwrap();
    state.store.create_webhook(tenant, new, chrono::Utc::now()).await.unwrap();
    send_test_event(&http_only, &t, &webhook_id.to_string()).await;
    let started = Instant::now();
    let refused = loop {
        let listed = http_only.json(Method::GET, &format!("/v1/webhooks/{webhook_id}/deliveries"), &t.key).await;
        let first = listed["deliveries"][0].clone();
        if first["attempts"] == 1 {
            break first;
        }
        assert!(started.elapsed() < Duration::from_secs(10), "no attempt: {listed}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(refused["state"], "pending");
    assert!(refused["last_status"].is_null());
    assert!(refused["last_error"].as_str().unwrap().contains("private"), "{refused}");
    assert!(receiver.received().is_empty());

    for (method, path) in [
        (Method::GET, "/v1/webhooks/00000000-0000-0000-0000-000000000000"),
        (Method::GET, "/v1/webhooks/not-a-uuid"),
        (Method::DELETE, "/v1/webhooks/00000000-0000-0000-0000-000000000000"),
        (Method::POST, "/v1/webhooks/00000000-0000-0000-0000-000000000000/rotate"),
        (Method::POST, "/v1/webhooks/00000000-0000-0000-0000-000000000000/test"),
        (Method::GET, "/v1/webhooks/00000000-0000-0000-0000-000000000000/deliveries"),
    ] {
        let res = http_only.request(method.clone(), path, &t.key).send().await.unwrap();
        assert_eq!(res.status(), 404, "{method} {path}");
    }
    let res = http_only.request(Method::GET, "/v1/events?types=nope", &t.key).send().await.unwrap();
    assert_eq!(status_code_body(res).await.1, "invalid_request");
    let res =
        http_only.request(Method::GET, "/v1/events", &t.key).header("last-event-id", "evt_1").send().await.unwrap();
    assert_eq!(status_code_body(res).await.1, "invalid_request");
    let other = http_only.tenant().await;
    let foreign = memoryd::domain::events::event_id(uuid::Uuid::parse_str(&other.id).unwrap(), 1);
    let res =
        http_only.request(Method::GET, "/v1/events", &t.key).header("last-event-id", foreign).send().await.unwrap();
    assert_eq!(res.status(), 400, "another tenant's event id");
}

/// Reads server-sent events from a response until `count` have come.
pub(crate) async fn read_events(res: &mut reqwest::Response, count: usize) -> Vec<(String, String, Value)> {
    let mut buffer = String::new();
    let mut events = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while events.len() < count {
        let chunk =
            tokio::time::timeout_at(deadline, res.chunk()).await.expect("the events came in time").unwrap().unwrap();
        buffer.push_str(std::str::from_utf8(&chunk).unwrap());
        while let Some(end) = buffer.find("\n\n") {
            let block: String = buffer.drain(..end + 2).collect();
            let (mut id, mut kind, mut data) = (String::new(), String::new(), String::new());
            for line in block.lines() {
                if let Some(v) = line.strip_prefix("id:") {
                    id = v.trim().to_owned();
                } else if let Some(v) = line.strip_prefix("event:") {
                    kind = v.trim().to_owned();
                } else if let Some(v) = line.strip_prefix("data:") {
                    data = v.trim().to_owned();
                }
            }
            if !id.is_empty() {
                events.push((id, kind, serde_json::from_str(&data).unwrap()));
            }
        }
    }
    events
}

async fn the_stream_delivers_in_order_filters_and_resumes(backend: Backend) {
    let app = app_for_hooks(backend).await;
    let receiver = Receiver::start().await;
    let t = app.tenant().await;
    let hook = create_webhook(&app, &t, json!({"url": receiver.url, "events": ["job.failed"]})).await;
    let webhook = hook["webhook_id"].as_str().unwrap();
    let mut all = app.request(Method::GET, "/v1/events", &t.key).send().await.unwrap();
    assert_eq!(all.status(), 200);
    assert_eq!(all.headers()["content-type"], "text/event-stream");
    let mut closes = app.request(Method::GET, "/v1/events?types=session.closed", &t.key).send().await.unwrap();

    // Test events go to their endpoint alone, never to a stream.
    for _ in 0..3 {
        send_test_event(&app, &t, webhook).await;
    }
    close_empty_sessions(&app, &t, "e", 3).await;
    close_a_session(&app, &t, "s1").await;
    let events = read_events(&mut all, 5).await;
    let ids: Vec<&str> = events.iter().map(|(id, _, _)| id.as_str()).collect();
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "in order: {ids:?}");
    let kinds: Vec<&str> = events.iter().map(|(_, kind, _)| kind.as_str()).collect();
    assert_eq!(&kinds[..3], ["session.closed"; 3]);
    let sessions: Vec<&str> =
        events[..3].iter().map(|(_, _, body)| body["data"]["session_id"].as_str().unwrap()).collect();
    assert_eq!(sessions, ["e0", "e1", "e2"]);
    assert!(kinds[3..].contains(&"session.closed") && kinds[3..].contains(&"run.succeeded"), "{kinds:?}");
    assert!(events.iter().all(|(_, kind, body)| body["type"] == *kind));

    let only = read_events(&mut closes, 1).await;
    assert_eq!(only[0].1, "session.closed");
    assert_eq!(only[0].2["data"]["session_id"], "e0");

    // Resumed after the first: the rest, from the outbox.
    let mut resumed =
        app.request(Method::GET, "/v1/events", &t.key).header("last-event-id", ids[0]).send().await.unwrap();
    let again = read_events(&mut resumed, 4).await;
    assert_eq!(again.iter().map(|(id, _, _)| id.as_str()).collect::<Vec<_>>(), ids[1..]);
    let delivered: Vec<String> =
        receiver.received().iter().map(|r| r.json()["type"].as_str().unwrap().to_owned()).collect();
    assert_eq!(delivered, ["webhook.test"; 3], "the endpoint takes job.failed and its own tests only");
}

/// Waits until every event id in `ids` was answered 2xx by the receiver.
async fn all_delivered(receiver: &Receiver, ids: &[String], limit: Duration) -> Vec<Received> {
    receiver
        .wait_until("every event delivered", limit, |got| {
            ids.iter().all(|id| got.iter().any(|r| &r.id == id && r.answered == 200))
        })
        .await
}

/// Test events through the binary's API; their ids.
async fn test_events(http: &reqwest::Client, base: &str, key: &str, webhook: &str, count: usize) -> Vec<String> {
    let mut ids = Vec::new();
    for _ in 0..count {
        let res = http.post(format!("{base}/v1/webhooks/{webhook}/test")).bearer_auth(key).send().await.unwrap();
        assert_eq!(res.status(), 202);
        ids.push(res.json::<Value>().await.unwrap()["event_id"].as_str().unwrap().to_owned());
    }
    ids
}

async fn hook_on(http: &reqwest::Client, base: &str, key: &str, url: &str) -> String {
    let res =
        http.post(format!("{base}/v1/webhooks")).bearer_auth(key).json(&json!({"url": url})).send().await.unwrap();
    assert_eq!(res.status(), 201);
    res.json::<Value>().await.unwrap()["webhook_id"].as_str().unwrap().to_owned()
}

fn hook_env(extra: Vec<(&'static str, String)>) -> Vec<(&'static str, String)> {
    let mut env = vec![
        ("MEMORYD_WEBHOOK_ALLOW_HTTP", "true".to_owned()),
        ("MEMORYD_WEBHOOK_ALLOW_PRIVATE", "true".to_owned()),
        ("MEMORYD_LLM_PROVIDER", "extractive".to_owned()),
        ("MEMORYD_MIN_FREE_BYTES", "0".to_owned()),
    ];
    env.extend(extra);
    env
}

every_backend!(events_undelivered_at_a_kill_9_are_all_delivered_after_the_restart, a_stream_ends_at_shutdown);

async fn events_undelivered_at_a_kill_9_are_all_delivered_after_the_restart(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let http = reqwest::Client::new();
    let receiver = Receiver::start().await;
    let mut extra = vec![("MEMORYD_DATA_DIR", dir.path().join("data").display().to_string())];
    extra.extend(crate::process::database_env(backend).await);
    let env = hook_env(extra);
    let mut first = Memoryd::spawn(dir.path(), "first", &["serve"], &env);
    first.ready(&http).await;
    let (_, key) = new_tenant(&http, &first.base).await;
    let webhook = hook_on(&http, &first.base, &key, &receiver.url).await;
    // The receiver is down for now: every delivery is waiting for its retry when the process dies.
    receiver.answer_next(&[503; 5]);
    let ids = test_events(&http, &first.base, &key, &webhook, 5).await;
    receiver.wait_until("a failed first attempt", Duration::from_secs(10), |got| !got.is_empty()).await;
    first.signal("-KILL");
    first.exit().await;
    receiver.script.lock().unwrap().clear();

    let second = Memoryd::spawn(dir.path(), "second", &["serve"], &env);
    second.ready(&http).await;
    // A delivery the killed process had claimed waits for its lease (35 s) to run out.
    let got = all_delivered(&receiver, &ids, Duration::from_secs(60)).await;
    for id in &ids {
        assert_eq!(got.iter().filter(|r| &r.id == id && r.answered == 200).count(), 1, "{id} delivered once");
    }
}

/// A proxy in the environment would resolve names past the resolver that
/// refuses forbidden addresses: deliveries never use one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deliveries_ignore_the_environments_proxy() {
    let proxy = Receiver::start().await;
    let proxy_url = proxy.url.trim_end_matches("/hook").to_owned();
    // SAFETY: nextest runs each test in a process of its own, and nothing
    // else reads the environment while the app starts.
    unsafe {
        for name in ["HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "ALL_PROXY"] {
            std::env::set_var(name, &proxy_url);
        }
        std::env::set_var("NO_PROXY", "127.0.0.1,localhost");
    }
    let app = TestApp::start_with(Backend::Sqlite, |c| c.events.webhook_allow_http = true).await;
    let t = app.tenant().await;
    let hook = create_webhook(&app, &t, json!({"url": "http://93.184.216.34/hook", "events": ["webhook.test"]})).await;
    let webhook = hook["webhook_id"].as_str().unwrap();
    send_test_event(&app, &t, webhook).await;
    let started = Instant::now();
    loop {
        let listed = app.json(Method::GET, &format!("/v1/webhooks/{webhook}/deliveries"), &t.key).await;
        if listed["deliveries"][0]["attempts"] == 1 {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(30), "no attempt: {listed}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(proxy.received().is_empty(), "the delivery went through the proxy: {:?}", proxy.received());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_on_postgres_deliver_each_event_once_per_attempt() {
    let dir = tempfile::tempdir().unwrap();
    let http = reqwest::Client::new();
    let receiver = Receiver::start().await;
    let database = isolated_postgres_url().await;
    let env =
        hook_env(vec![("DATABASE_URL", database), ("MEMORYD_DATA_DIR", dir.path().join("data").display().to_string())]);
    let a = Memoryd::spawn(dir.path(), "a", &["serve"], &env);
    a.ready(&http).await;
    let b = Memoryd::spawn(dir.path(), "b", &["serve"], &env);
    b.ready(&http).await;
    let (_, key) = new_tenant(&http, &a.base).await;
    let webhook = hook_on(&http, &a.base, &key, &receiver.url).await;
    let mut ids = test_events(&http, &a.base, &key, &webhook, 30).await;
    ids.extend(test_events(&http, &b.base, &key, &webhook, 30).await);
    let got = all_delivered(&receiver, &ids, Duration::from_secs(60)).await;
    assert_eq!(got.len(), ids.len(), "one attempt per event, none twice: {} received", got.len());
}

async fn the_console_shows_endpoints_and_sends_a_test_event(backend: Backend) {
    let app = app_for_hooks(backend).await;
    let receiver = Receiver::start().await;
    let t = app.tenant().await;
    let hook = create_webhook(&app, &t, json!({"url": receiver.url, "description": "ops board"})).await;
    let webhook = hook["webhook_id"].as_str().unwrap();
    let mut browser = Browser::new(&app);
    browser.sign_in(&t.key).await;
    let (status, _, page) = browser.get("/console/webhooks").await;
    assert_eq!(status, 200);
    assert!(page.contains(&receiver.url) && page.contains("ops board") && page.contains("No deliveries yet"), "{page}");
    let action = format!("/console/webhooks/{webhook}/test");
    assert_eq!(browser.post(&action, &[("csrf", "forged")]).await.0, axum::http::StatusCode::BAD_REQUEST);
    let token = hidden(&page, "csrf");
    let (status, location, _) = browser.post(&action, &[("csrf", &token)]).await;
    assert_eq!((status.as_u16(), location.as_str()), (303, "/console/webhooks"));
    let got = receiver.wait_until("the test event", Duration::from_secs(10), |got| !got.is_empty()).await;
    assert_eq!(got.len(), 1, "the forged form sent nothing");
    assert_eq!(got[0].json()["type"], "webhook.test");
    let started = Instant::now();
    loop {
        let (_, _, page) = browser.get("/console/webhooks").await;
        if page.contains(&got[0].id) && page.contains("succeeded") {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(10), "the delivery is not listed: {page}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn a_stream_ends_at_shutdown(backend: Backend) {
    let mut app = TestApp::start(backend).await;
    let t = app.tenant().await;
    let mut stream = app.request(Method::GET, "/v1/events", &t.key).send().await.unwrap();
    assert_eq!(stream.status(), 200);
    let server = app.server.take().unwrap();
    let started = Instant::now();
    let stopping = tokio::spawn(server.shutdown());
    let end =
        tokio::time::timeout(Duration::from_secs(10), async { while let Ok(Some(_)) = stream.chunk().await {} }).await;
    assert!(end.is_ok(), "the stream did not end at shutdown");
    tokio::time::timeout(Duration::from_secs(10), stopping).await.expect("shutdown finished").unwrap().unwrap();
    assert!(started.elapsed() < Duration::from_secs(10));
}
