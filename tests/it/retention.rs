//! Retention (SPEC §2.7): idempotency keys, records and idle rollouts
//! expire on their own.

use crate::events::{Receiver, create_webhook, send_test_event};
use crate::every_backend;
use crate::harness::{Backend, TestApp, status_code_body};
use reqwest::Method;
use serde_json::json;
use std::time::{Duration, Instant};

every_backend!(delivered_events_leave_the_outbox, retention_expires_keys_records_and_idle_rollouts);

async fn retention_expires_keys_records_and_idle_rollouts(backend: Backend) {
    let app = TestApp::start_with(backend, |c| {
        c.records.retention_sweep = std::time::Duration::from_secs(1);
        c.records.idempotency_ttl = std::time::Duration::from_secs(1);
        // About two seconds.
        c.records.retain_records_days = 2.0 / 86_400.0;
    })
    .await;
    let t = app.tenant().await;
    let layout =
        json!({"memories_dir": "notes", "sessions_dir": "chats", "retention": {"rollout_days": 3.0 / 86_400.0}});
    let res = app.request(Method::PUT, "/v1/layouts/brief", &t.key).json(&layout).send().await.unwrap();
    assert_eq!(res.status(), 201);
    let got = app.json(Method::GET, "/v1/layouts/brief", &t.key).await;
    assert_eq!(got["retention"]["rollout_days"].as_f64(), Some(3.0 / 86_400.0), "{got}");

    let res = app
        .request(Method::POST, "/v1/sessions/keyed/layouts/default/segments", &t.key)
        .header("idempotency-key", "short-lived")
        .json(&json!({"rollout_id": "chat-k", "input": "one"}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 201);
    assert_eq!(
        app.post_segment(&t.key, "brief-s", "brief", json!({"rollout_id": "chat-idle", "input": "I keep bees."}))
            .await
            .status(),
        201
    );
    assert_eq!(app.json(Method::POST, "/v1/sessions/brief-s/close?wait=30", &t.key).await["state"], "closed");
    let memory_path = "notes/MEMORY.md";
    assert!(app.file_text(&t, "default", memory_path).await.contains("bees"));

    // The key expires: the same key with another body is a new append.
    let started = Instant::now();
    loop {
        let res = app
            .request(Method::POST, "/v1/sessions/keyed/layouts/default/segments", &t.key)
            .header("idempotency-key", "short-lived")
            .json(&json!({"rollout_id": "chat-k", "input": "two"}))
            .send()
            .await
            .unwrap();
        if res.status() == 201 {
            break;
        }
        assert_eq!(status_code_body(res).await.1, "idempotency_conflict");
        assert!(started.elapsed() < Duration::from_secs(20), "the key never expired");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // The idle rollout is forgotten; then the closed session's record goes.
    let started = Instant::now();
    loop {
        let forgets = app.json(Method::GET, "/v1/jobs?kind=forget", &t.key).await;
        let done = forgets["jobs"].as_array().unwrap().iter().any(|j| j["state"] == "succeeded");
        if done && app.file_bytes(&t, "default", "chats/chat-idle.jsonl").await.is_none() {
            // Its files are renamed into place just after its finish commits.
            app.publishes_done().await;
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(30), "the idle rollout was never forgotten: {forgets}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(!app.file_text(&t, "default", memory_path).await.contains("bees"));
    let started = Instant::now();
    while app.request(Method::GET, "/v1/sessions/brief-s", &t.key).send().await.unwrap().status() != 404 {
        assert!(started.elapsed() < Duration::from_secs(30), "the closed session's record was never deleted");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Its jobs' records go too, the phase-two job's `job_sessions` rows first.
    let started = Instant::now();
    while !app.json(Method::GET, "/v1/jobs?kind=phase_two", &t.key).await["jobs"].as_array().unwrap().is_empty() {
        assert!(started.elapsed() < Duration::from_secs(30), "the finished jobs' records were never deleted");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Records only: the open session of the default layout and its rollout stay.
    assert_eq!(app.request(Method::GET, "/v1/sessions/keyed", &t.key).send().await.unwrap().status(), 200);
    assert!(app.file_bytes(&t, "default", "sessions/chat-k.jsonl").await.is_some());
}

/// Past `MEMORYD_EVENTS_RETAIN_HOURS` (0 here: at once) the retention sweep
/// takes delivered events out of the outbox; one still awaited stays.
async fn delivered_events_leave_the_outbox(backend: Backend) {
    let app = TestApp::start_with(backend, |c| {
        c.records.retention_sweep = std::time::Duration::from_secs(1);
        c.records.events_retain = std::time::Duration::ZERO;
        c.events.webhook_allow_http = true;
        c.events.webhook_allow_private = true;
    })
    .await;
    let t = app.tenant().await;
    let (answering, failing) = (Receiver::start().await, Receiver::start().await);
    failing.answer_next(&[500; 10]);
    let ok = create_webhook(&app, &t, json!({"url": answering.url, "events": ["webhook.test"]})).await;
    let bad = create_webhook(&app, &t, json!({"url": failing.url, "events": ["webhook.test"]})).await;
    let delivered = send_test_event(&app, &t, ok["webhook_id"].as_str().unwrap()).await;
    let awaited = send_test_event(&app, &t, bad["webhook_id"].as_str().unwrap()).await;
    // Test events never reach a stream: the outbox is read in the database.
    let in_outbox = |id: &str| format!("SELECT count(*) FROM events WHERE seq = {}", id[4..20].parse::<i64>().unwrap());
    let mut db = crate::harness::Database::connect(backend, &app.database_url).await;
    let started = Instant::now();
    loop {
        if db.count(&in_outbox(&delivered)).await == 0 {
            assert_eq!(db.count(&in_outbox(&awaited)).await, 1, "an event a delivery awaits stays");
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(20), "the delivered event was never swept");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
