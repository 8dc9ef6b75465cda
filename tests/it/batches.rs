//! Batch appends (SPEC §2.2 "Batches"): many segments to one session in one
//! request, naming their layouts and rollouts, appended in order as one unit
//! — all acknowledged or none, through bad segments, retries, limits and
//! SIGKILL.

use crate::every_backend;
use crate::group_commit::Killable;
use crate::harness::{ADMIN_TOKEN, Backend, Database, Tenant, TestApp, status_code_body};
use reqwest::{Method, Response};
use serde_json::{Value, json};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

every_backend!(
    a_batch_across_two_layouts_and_three_rollouts_lands_in_order,
    a_batch_with_one_bad_segment_writes_nothing_and_names_it,
    a_retried_batch_writes_once_and_its_key_goes_with_a_forgotten_rollout,
    a_batch_meets_the_limits_and_redaction_of_single_appends,
    a_killed_batch_is_all_there_or_not_at_all,
);

fn segment(layout: &str, rollout: &str, said: &str) -> Value {
    json!({"layout": layout, "rollout_id": rollout, "input": said, "final_output": "ok"})
}

async fn batch(app: &TestApp, key: &str, session: &str, segments: Vec<Value>, idempotency: Option<&str>) -> Response {
    let mut request = app
        .request(Method::POST, &format!("/v1/sessions/{session}/segments:batch"), key)
        .json(&json!({"segments": segments}));
    if let Some(k) = idempotency {
        request = request.header("idempotency-key", k);
    }
    request.send().await.unwrap()
}

async fn put_layout(app: &TestApp, t: &Tenant, name: &str, config: Value) {
    let res = app.request(Method::PUT, &format!("/v1/layouts/{name}"), &t.key).json(&config).send().await.unwrap();
    assert_eq!(res.status(), 201, "{}", res.text().await.unwrap());
}

async fn lines(app: &TestApp, t: &Tenant, path: &str) -> Vec<String> {
    let text = app.file_bytes(t, "default", path).await.map(|b| String::from_utf8(b).unwrap()).unwrap_or_default();
    text.lines().map(str::to_owned).collect()
}

async fn a_batch_across_two_layouts_and_three_rollouts_lands_in_order(backend: Backend) {
    let app = TestApp::start_with(backend, |c| c.no_workers = true).await;
    let t = app.tenant().await;
    put_layout(&app, &t, "notes", json!({"memories_dir": "notes/m", "sessions_dir": "notes/s"})).await;
    let order =
        [("default", "r1"), ("default", "r2"), ("notes", "r3"), ("default", "r1"), ("notes", "r3"), ("default", "r2")];
    let segments = order.iter().enumerate().map(|(i, (l, r))| segment(l, r, &format!("<{i}>"))).collect();
    let res = batch(&app, &t.key, "s", segments, None).await;
    assert_eq!(res.status(), 201);
    let answer: Value = res.json().await.unwrap();
    assert_eq!(answer["session_id"], "s");
    let receipts = answer["receipts"].as_array().unwrap();
    let got: Vec<(&str, &str, i64, &str)> = receipts
        .iter()
        .map(|r| {
            let field = |k: &str| r[k].as_str().unwrap();
            (field("layout"), field("rollout_id"), r["segment_index"].as_i64().unwrap(), field("rollout_path"))
        })
        .collect();
    assert_eq!(
        got,
        [
            ("default", "r1", 0, "sessions/r1.jsonl"),
            ("default", "r2", 0, "sessions/r2.jsonl"),
            ("notes", "r3", 0, "notes/s/r3.jsonl"),
            ("default", "r1", 1, "sessions/r1.jsonl"),
            ("notes", "r3", 1, "notes/s/r3.jsonl"),
            ("default", "r2", 1, "sessions/r2.jsonl"),
        ]
    );
    for (path, markers) in [("sessions/r1.jsonl", [0, 3]), ("sessions/r2.jsonl", [1, 5]), ("notes/s/r3.jsonl", [2, 4])]
    {
        let lines = lines(&app, &t, path).await;
        assert_eq!(lines.len(), 2, "{path}: {lines:?}");
        for (line, marker) in lines.iter().zip(markers) {
            assert!(line.contains(&format!("<{marker}>")), "{path}: {line}");
            let stored: Value = serde_json::from_str(line).unwrap();
            assert!(stored.get("layout").is_none(), "the batch's layout field is not stored: {line}");
        }
    }
    // A single append afterwards goes on where the batch ended.
    let res = app.post_segment(&t.key, "s", "default", json!({"rollout_id": "r1", "input": "later"})).await;
    assert_eq!(res.json::<Value>().await.unwrap()["segment_index"], 2);
    let usage = app.json(Method::GET, "/v1/usage", &t.key).await;
    assert_eq!(usage["days"].as_array().unwrap().last().unwrap()["segments"], 7, "{usage}");
    let closed = app.json(Method::POST, "/v1/sessions/s/close", &t.key).await;
    let mut jobs: Vec<(String, String)> = closed["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| (j["kind"].as_str().unwrap().into(), format!("{}/{}", j["layout"], j["rollout_id"])))
        .collect();
    jobs.sort();
    assert_eq!(jobs.len(), 5, "three rollouts' phase one, two layouts' phase two: {jobs:?}");
}

async fn a_batch_with_one_bad_segment_writes_nothing_and_names_it(backend: Backend) {
    let app = TestApp::start_with(backend, |c| {
        c.no_workers = true;
        c.quotas.max_batch_segments = 4;
    })
    .await;
    let t = app.tenant().await;
    put_layout(&app, &t, "readonly", json!({"memories_dir": "ro/m", "sessions_dir": "ro/s", "generate": null})).await;
    let ok = |r: &str| segment("default", r, "fine");
    let mut bad_state = ok("r3");
    bad_state["terminal_metadata"] = json!({"terminal_state": "exploded"});
    let no_layout = json!({"rollout_id": "r2", "input": "x"});
    let cases = [
        (vec![ok("r1"), ok("r2"), bad_state], 422, "invalid_segment", Some(2)),
        (vec![ok("r1"), segment("nope", "r2", "x")], 404, "not_found", Some(1)),
        (vec![ok("r1"), no_layout], 422, "invalid_segment", Some(1)),
        (vec![segment("readonly", "r1", "x")], 409, "generation_disabled", Some(0)),
        (vec![ok("r1"), segment("default", " bad id ", "x")], 400, "invalid_rollout_id", Some(1)),
        (vec![], 422, "invalid_segment", None),
        (vec![ok("a"), ok("b"), ok("c"), ok("d"), ok("e")], 413, "payload_too_large", None),
    ];
    for (segments, status, code, index) in cases {
        let (got_status, got_code, problem) = status_code_body(batch(&app, &t.key, "s", segments, None).await).await;
        assert_eq!((got_status, got_code.as_str()), (status, code), "{problem}");
        assert_eq!(problem["index"].as_u64(), index.map(|i| i as u64), "{problem}");
    }
    let (status, code, _) = status_code_body(
        app.request(Method::POST, "/v1/sessions/s/segments:batch", &t.key)
            .json(&json!([ok("r1")]))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!((status, code.as_str()), (422, "invalid_segment"), "a bare array is no batch");
    assert_eq!(app.request(Method::GET, "/v1/sessions/s", &t.key).send().await.unwrap().status(), 404);
    assert!(lines(&app, &t, "sessions/r1.jsonl").await.is_empty());

    // Refused by the database half-way: a rollout being forgotten. The
    // session and rollout the batch made before it are taken back too.
    assert_eq!(
        app.post_segment(&t.key, "old", "default", json!({"rollout_id": "gone", "input": "x"})).await.status(),
        201
    );
    app.json(Method::POST, "/v1/sessions/old/close", &t.key).await;
    let mut db = Database::connect(backend, &app.database_url).await;
    db.run("UPDATE sessions SET state = 'closed' WHERE session_id = 'old'").await;
    let path = "/v1/workspaces/default/layouts/default/rollouts/gone";
    assert_eq!(app.request(Method::DELETE, path, &t.key).send().await.unwrap().status(), 202);
    let res = batch(&app, &t.key, "fresh", vec![ok("new"), ok("gone")], Some("k-forgetting")).await;
    let (status, code, problem) = status_code_body(res).await;
    assert_eq!((status, code.as_str(), problem["index"].as_u64()), (409, "forgetting", Some(1)), "{problem}");
    assert_eq!(app.request(Method::GET, "/v1/sessions/fresh", &t.key).send().await.unwrap().status(), 404);
    assert_eq!(db.count("SELECT count(*) FROM rollouts WHERE rollout_id = 'new'").await, 0);
    assert_eq!(db.count("SELECT count(*) FROM idempotency_keys WHERE key = 'k-forgetting'").await, 0);
    // A single segment finds its rollout forgotten only once it has opened
    // its session: the transaction is made again without it.
    let res = app.post_segment(&t.key, "fresh-single", "default", json!({"rollout_id": "gone", "input": "x"})).await;
    assert_eq!(status_code_body(res).await.1, "forgetting");
    assert_eq!(app.request(Method::GET, "/v1/sessions/fresh-single", &t.key).send().await.unwrap().status(), 404);
    let usage = app.json(Method::GET, "/v1/usage", &t.key).await;
    assert_eq!(usage["days"].as_array().unwrap().last().unwrap()["segments"], 1, "{usage}");
}

async fn a_retried_batch_writes_once_and_its_key_goes_with_a_forgotten_rollout(backend: Backend) {
    let app = TestApp::start(backend).await;
    let t = app.tenant().await;
    let segments =
        || vec![segment("default", "a", "one"), segment("default", "b", "two"), segment("default", "a", "3")];
    let first = batch(&app, &t.key, "s", segments(), Some("batch-1")).await;
    assert_eq!(first.status(), 201);
    let first: Value = first.json().await.unwrap();
    let again = batch(&app, &t.key, "s", segments(), Some("batch-1")).await;
    assert_eq!(again.status(), 201);
    assert_eq!(again.json::<Value>().await.unwrap(), first, "the first answer again");
    assert_eq!(
        (lines(&app, &t, "sessions/a.jsonl").await.len(), lines(&app, &t, "sessions/b.jsonl").await.len()),
        (2, 1)
    );
    let other = batch(&app, &t.key, "s", vec![segment("default", "a", "else")], Some("batch-1")).await;
    assert_eq!(status_code_body(other).await.1, "idempotency_conflict");
    // The key of a single append is another request's.
    let single = app
        .request(Method::POST, "/v1/sessions/s/layouts/default/segments", &t.key)
        .header("idempotency-key", "batch-1")
        .json(&json!({"rollout_id": "a", "input": "one"}))
        .send()
        .await
        .unwrap();
    assert_eq!(status_code_body(single).await.1, "idempotency_conflict");

    // Forgetting rollout b forgets the key whose answer names it.
    let mut db = Database::connect(backend, &app.database_url).await;
    assert_eq!(db.count("SELECT count(*) FROM idempotency_key_rollouts").await, 2);
    app.json(Method::POST, "/v1/sessions/s/close?wait=30", &t.key).await;
    let job = app.request(Method::DELETE, "/v1/workspaces/default/layouts/default/rollouts/b", &t.key).send().await;
    let job: Value = job.unwrap().json().await.unwrap();
    assert_eq!(app.wait_for_job(&t.key, job["job_id"].as_str().unwrap()).await["state"], "succeeded");
    let left = "SELECT (SELECT count(*) FROM idempotency_keys) + (SELECT count(*) FROM idempotency_key_rollouts)";
    assert_eq!(db.count(left).await, 0);
}

async fn a_batch_meets_the_limits_and_redaction_of_single_appends(backend: Backend) {
    let app = TestApp::start_with(backend, |c| c.no_workers = true).await;
    let t = app.tenant().await;
    let limit = |body: Value| {
        app.request(Method::PUT, &format!("/v1/admin/tenants/{}/limits", t.id), ADMIN_TOKEN).json(&body).send()
    };
    // Storage: the third segment would pass the limit; none is written.
    let said = "x".repeat(200);
    assert_eq!(limit(json!({"storage_bytes": 1000})).await.unwrap().status(), 200);
    let three = (0..3).map(|i| segment("default", &format!("q{i}"), &said)).collect();
    let (status, code, problem) = status_code_body(batch(&app, &t.key, "s", three, None).await).await;
    assert_eq!((status, code.as_str(), problem["index"].as_u64()), (403, "quota_exceeded", Some(2)), "{problem}");
    assert!(lines(&app, &t, "sessions/q0.jsonl").await.is_empty());
    let two = (0..2).map(|i| segment("default", &format!("q{i}"), &said)).collect();
    assert_eq!(batch(&app, &t.key, "s", two, None).await.status(), 201);

    // The request rate counts segments: a batch takes as many as it holds.
    let body = json!({"storage_bytes": null, "requests_per_second": 0.01, "burst": 5});
    assert_eq!(limit(body).await.unwrap().status(), 200);
    let six = (0..6).map(|i| segment("default", "rate", &i.to_string())).collect();
    let (status, code, problem) = status_code_body(batch(&app, &t.key, "s", six, None).await).await;
    assert_eq!(
        (status, code.as_str()),
        (413, "payload_too_large"),
        "more than a burst, which no wait lets through: {problem}"
    );
    let four = (0..4).map(|i| segment("default", "rate", &i.to_string())).collect();
    let res = batch(&app, &t.key, "s", four, None).await;
    assert_eq!(res.status(), 201);
    assert_eq!(res.headers()["ratelimit"], "\"tenant\";r=0;t=500", "one request and three more segments taken");
    let res = app.request(Method::GET, "/v1/layouts", &t.key).send().await.unwrap();
    assert_eq!(res.status(), 429, "the bucket is empty");
    let body = json!({"requests_per_second": null, "burst": null});
    assert_eq!(limit(body).await.unwrap().status(), 200);

    // Redaction at ingest, per segment's layout.
    let strict = json!({"memories_dir": "hr/m", "sessions_dir": "hr/s", "redaction": {
        "rules": ["aws_access_key"], "at_ingest": true}});
    put_layout(&app, &t, "hr", strict).await;
    let secret = "AKIAIOSFODNN7EXAMPLE";
    let segments =
        vec![segment("hr", "h", &format!("key {secret}")), segment("default", "d", &format!("key {secret}"))];
    assert_eq!(batch(&app, &t.key, "s", segments, None).await.status(), 201);
    let hr = lines(&app, &t, "hr/s/h.jsonl").await;
    assert!(hr[0].contains("[REDACTED:aws_access_key]") && !hr[0].contains(secret), "{hr:?}");
    assert!(lines(&app, &t, "sessions/d.jsonl").await[0].contains(secret), "the default layout keeps it as sent");

    // A closed session takes no batch.
    app.json(Method::POST, "/v1/sessions/s/close", &t.key).await;
    let (status, code, problem) =
        status_code_body(batch(&app, &t.key, "s", vec![segment("default", "z", "late")], None).await).await;
    assert_eq!((status, code.as_str(), problem["index"].as_u64()), (409, "session_closed", Some(0)));
}

/// Batches of eight segments over two rollouts, each sent until acknowledged
/// under its own key, while memoryd is killed: every rollout file holds
/// whole batches only, each acknowledged one exactly once, and the database
/// agrees on every file's length.
async fn a_killed_batch_is_all_there_or_not_at_all(backend: Backend) {
    const SENDERS: usize = 8;
    let mut server = Killable::start(backend).await;
    let senders: Vec<_> = (0..SENDERS)
        .map(|i| {
            let (http, base, key) = (server.http.clone(), server.base.clone(), server.key.clone());
            tokio::spawn(sender(http, base, key, i, server.stop.clone()))
        })
        .collect();
    for round in 1..=3u64 {
        server.kill_and_restart(round, Duration::from_millis(250 + 170 * round)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    server.stop.store(true, Ordering::Relaxed);
    let (http, key, memoryd) = (&server.http, &server.key, &server.memoryd);
    for (i, task) in senders.into_iter().enumerate() {
        let acknowledged = task.await.unwrap();
        assert!(acknowledged > 3, "sender {i} made progress across the restarts");
        for rollout in [format!("k{i}-a"), format!("k{i}-b")] {
            // One more batch after the kills cuts any unacknowledged tail
            // and lands where the database says the file ends.
            let url = format!("{}/v1/sessions/s{i}/segments:batch", memoryd.base);
            let last = json!({"segments": [segment("default", &rollout, "<last>")]});
            let res = http.post(url).bearer_auth(key).json(&last).send().await.unwrap();
            assert_eq!(res.status(), 201);
            let receipt = res.json::<Value>().await.unwrap()["receipts"][0].clone();
            let text = server.file_text(receipt["rollout_path"].as_str().unwrap()).await;
            let lines: Vec<&str> = text.lines().collect();
            assert_eq!(receipt["segment_index"].as_u64(), Some(lines.len() as u64 - 1), "{rollout}");
            // Four lines a batch, batches 0, 1, 2, … in order, each whole.
            let body = &lines[..lines.len() - 1];
            assert_eq!(body.len(), acknowledged * 4, "{rollout}: whole batches only, each once");
            for (n, line) in body.iter().enumerate() {
                assert!(line.contains(&format!("<{}.{}>", n / 4, n % 4)), "{rollout} line {n}: {line}");
            }
        }
    }
}

/// Sends batch 0, 1, 2, … of sender `i` (four segments to each of its two
/// rollouts, interleaved), each until acknowledged; how many were.
async fn sender(
    http: reqwest::Client,
    base: Arc<RwLock<String>>,
    key: String,
    i: usize,
    stop: Arc<AtomicBool>,
) -> usize {
    let mut acknowledged = 0;
    while !stop.load(Ordering::Relaxed) {
        let segments: Vec<Value> = (0..8)
            .map(|n| {
                let rollout = if n % 2 == 0 { format!("k{i}-a") } else { format!("k{i}-b") };
                segment("default", &rollout, &format!("<{acknowledged}.{}>", n / 2))
            })
            .collect();
        let url = format!("{}/v1/sessions/s{i}/segments:batch", base.read().unwrap());
        let sent = http
            .post(url)
            .bearer_auth(&key)
            .header("idempotency-key", format!("k{i}-{acknowledged}"))
            .json(&json!({"segments": segments}))
            .send()
            .await;
        match sent {
            Ok(res) if res.status() == 201 => {
                if res.json::<Value>().await.is_ok() {
                    acknowledged += 1;
                }
            }
            Ok(res) if res.status().is_client_error() => panic!("batch refused: {}", res.text().await.unwrap()),
            _ => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
    acknowledged
}
