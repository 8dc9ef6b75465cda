//! The object store down (docs/operating.md, failure modes): appends are
//! still acknowledged (their journal is in the database), what needs the
//! store answers 503, jobs wait in the queue spending no attempt, and all
//! resumes by itself once the store answers again, nothing acknowledged lost.

use crate::hardening::CuttableProxy;
use crate::harness::Backend;
use crate::process::{Memoryd, database_env, get_json, jobs_of_kind, new_tenant, post_segment, stored_file};
use serde_json::json;
use std::time::{Duration, Instant};

/// `env` with the object store reached through a proxy that can cut it off.
async fn behind_a_proxy(env: &mut [(&'static str, String)]) -> CuttableProxy {
    let endpoint = env.iter_mut().find(|(name, _)| *name == "AWS_ENDPOINT_URL").expect("a bucket's endpoint");
    let url = reqwest::Url::parse(&endpoint.1).unwrap();
    let upstream = format!("{}:{}", url.host_str().unwrap(), url.port_or_known_default().unwrap());
    let proxy = CuttableProxy::start(upstream).await;
    endpoint.1 = format!("http://127.0.0.1:{}", proxy.port);
    proxy
}

async fn metrics(http: &reqwest::Client, base: &str) -> String {
    http.get(format!("{base}/metrics")).send().await.unwrap().text().await.unwrap()
}

async fn until(what: &str, limit: Duration, mut done: impl AsyncFnMut() -> bool) {
    let started = Instant::now();
    while !done().await {
        assert!(started.elapsed() < limit, "{what} did not happen within {limit:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn a_lost_object_store_keeps_appends_and_its_jobs_wait_until_it_answers() {
    let mut env = database_env(Backend::Bucket).await;
    let proxy = behind_a_proxy(&mut env).await;
    let dir = tempfile::tempdir().unwrap();
    let http = reqwest::Client::new();
    let memoryd = Memoryd::spawn(dir.path(), "memoryd", &["serve"], &env);
    memoryd.ready(&http).await;
    let base = memoryd.base.clone();
    let (tenant, key) = new_tenant(&http, &base).await;
    post_segment(&http, &base, &key, "s", json!({"rollout_id": "r", "input": "I prefer green tea."})).await;
    let closed = http.post(format!("{base}/v1/sessions/s/close?wait=60")).bearer_auth(&key).send().await.unwrap();
    assert_eq!(closed.status(), 200, "{}", closed.text().await.unwrap());
    let export = http.get(format!("{base}/v1/workspaces/default/export")).bearer_auth(&key).send().await.unwrap();
    let archive = export.bytes().await.unwrap();

    proxy.cut();
    let said: Vec<String> = (0..5).map(|i| format!("said during the outage, turn {i}")).collect();
    for text in &said {
        let started = Instant::now();
        post_segment(&http, &base, &key, "t", json!({"rollout_id": "r2", "input": text})).await;
        assert!(started.elapsed() < Duration::from_secs(5), "an append waited {:?}", started.elapsed());
    }
    let started = Instant::now();
    let res =
        http.post(format!("{base}/v1/workspaces/copy/import")).bearer_auth(&key).body(archive).send().await.unwrap();
    assert_eq!(res.status(), 503, "an import the store cannot take");
    assert!(res.headers().contains_key("retry-after"));
    assert!(started.elapsed() < Duration::from_secs(40), "the import's 503 took {:?}", started.elapsed());
    until("the gauge down", Duration::from_secs(10), async || {
        metrics(&http, &base).await.contains("memoryd_object_store_up 0")
    })
    .await;
    let ready = http.get(format!("{base}/readyz")).send().await.unwrap();
    assert_eq!(ready.status(), 200, "appends are still taken: the replica stays in rotation");

    let res = http.post(format!("{base}/v1/sessions/t/close")).bearer_auth(&key).send().await.unwrap();
    assert_eq!(res.status(), 202);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let waiting = jobs_of_kind(&http, &base, &key, "phase_one").await;
    let job = waiting.iter().find(|j| j["session_id"] == "t").expect("the close's phase one");
    assert_eq!((job["state"].as_str(), job["attempts"].as_i64()), (Some("queued"), Some(0)), "{job}");

    proxy.restore();
    until("the jobs after the outage", Duration::from_secs(60), async || {
        let jobs = get_json(&http, &base, &key, "/v1/jobs").await;
        jobs["jobs"].as_array().unwrap().iter().all(|j| j["state"] == "succeeded")
    })
    .await;
    assert!(metrics(&http, &base).await.contains("memoryd_object_store_up 1"));
    let rollout = stored_file(&env, &dir.path().join("memoryd-data"), &tenant, "default", "sessions/r2.jsonl").await;
    let rollout = String::from_utf8(rollout.expect("the rollout")).unwrap();
    let lines: Vec<&str> = rollout.lines().collect();
    assert_eq!(lines.len(), said.len(), "each acknowledged segment once: {rollout}");
    for (line, text) in lines.iter().zip(&said) {
        assert!(line.contains(text.as_str()), "in order: {line}");
    }
}
