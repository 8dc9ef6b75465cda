//! The real binary: starts with no configuration but a data dir, logs no
//! content or keys, and exits cleanly on SIGTERM.

use serde_json::{Value, json};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

#[tokio::test]
async fn binary_serves_logs_no_content_and_stops_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let log_path = dir.path().join("memoryd.log");
    let port = free_port();
    let mut child = Command::new(env!("CARGO_BIN_EXE_memoryd"))
        .arg("serve")
        .current_dir(dir.path())
        .env_remove("DATABASE_URL")
        .env("MEMORYD_LISTEN", format!("127.0.0.1:{port}"))
        .env("MEMORYD_ADMIN_TOKEN", "process-test-admin")
        .env("MEMORYD_LOG", "debug")
        .env("MEMORYD_LOG_FORMAT", "json")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log_path).unwrap())
        .spawn()
        .unwrap();
    let base = format!("http://127.0.0.1:{port}");
    let http = reqwest::Client::new();
    let started = Instant::now();
    while http.get(format!("{base}/readyz")).send().await.map(|r| r.status() != 200).unwrap_or(true) {
        assert!(started.elapsed() < Duration::from_secs(20), "memoryd did not become ready");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let tenant: Value = http
        .post(format!("{base}/v1/admin/tenants"))
        .bearer_auth("process-test-admin")
        .json(&json!({"name": "acme"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let key = tenant["api_key"].as_str().unwrap();
    let secret = "TOP-SECRET-SEGMENT-CONTENT-4711";
    let res = http
        .post(format!("{base}/v1/sessions/s/layouts/default/segments"))
        .bearer_auth(key)
        .json(&json!({"rollout_id": "r", "input": secret, "final_output": secret}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 201);
    let res = http
        .post(format!("{base}/v1/sessions/s/layouts/default/segments"))
        .bearer_auth(key)
        .body(format!("{{\"input\": \"{secret}"))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 400);
    let tenant_id = tenant["tenant_id"].as_str().unwrap();
    let file = dir.path().join(format!("memoryd-data/workspaces/{tenant_id}/default/sessions/r.jsonl"));
    assert!(std::fs::read_to_string(file).unwrap().contains(secret), "the default data dir is ./memoryd-data");
    assert!(dir.path().join("memoryd-data/memoryd.db").exists(), "the default store is SQLite in the data dir");

    let status = Command::new("kill").arg("-TERM").arg(child.id().to_string()).status().unwrap();
    assert!(status.success());
    let stopping = Instant::now();
    let exit = loop {
        if let Some(exit) = child.try_wait().unwrap() {
            break exit;
        }
        assert!(stopping.elapsed() < Duration::from_secs(30), "memoryd did not stop on SIGTERM");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(exit.success(), "{exit:?}");

    let log = std::fs::read_to_string(&log_path).unwrap();
    assert!(log.contains("segment appended"), "{log}");
    assert!(log.contains("shutting down"));
    assert!(!log.contains(secret), "segment content reached the log");
    assert!(!log.contains(key), "an API key reached the log");
    assert!(!log.contains("process-test-admin"), "the admin token reached the log");
    for line in log.lines() {
        serde_json::from_str::<Value>(line).unwrap_or_else(|e| panic!("not a JSON log line ({e}): {line}"));
    }
}
