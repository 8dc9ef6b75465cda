//! What one replica serves at once is bounded (SPEC §2.7, §2.8): exports
//! past `MEMORYD_MAX_EXPORTS` answer 429 and a stalled one is stopped; a
//! tenant's streams are capped, and a stream whose key is revoked ends.

use crate::every_backend;
use crate::harness::{ADMIN_TOKEN, Backend, TestApp, status_code_body};
use reqwest::Method;
use serde_json::{Value, json};
use std::io::Read;
use std::time::{Duration, Instant};

every_backend!(exports_are_capped_and_a_stalled_one_is_stopped, streams_are_capped_and_end_when_their_key_is_revoked);

/// `bytes` of text that compresses to about half: hex of random UUIDs.
fn incompressible(bytes: usize) -> String {
    let mut text = String::with_capacity(bytes + 32);
    while text.len() < bytes {
        text.push_str(&uuid::Uuid::new_v4().simple().to_string());
    }
    text.truncate(bytes);
    text
}

async fn exports_are_capped_and_a_stalled_one_is_stopped(backend: Backend) {
    let app = TestApp::start_with(backend, |c| {
        c.quotas.max_exports = 2;
        c.quotas.export_stall = std::time::Duration::from_secs(2);
    })
    .await;
    let t = app.tenant().await;
    // An archive larger than every buffer between memoryd and a client that reads nothing.
    for _ in 0..3 {
        let body = json!({"rollout_id": "big", "input": incompressible(8 << 20), "final_output": "ok"});
        assert_eq!(app.post_segment(&t.key, "s", "default", body).await.status(), 201);
    }
    let export = || app.request(Method::GET, "/v1/workspaces/default/export", &t.key).send();
    let stalled = [export().await.unwrap(), export().await.unwrap()];
    assert!(stalled.iter().all(|r| r.status() == 200));
    let third = export().await.unwrap();
    assert!(third.headers().contains_key("retry-after"), "{:?}", third.headers());
    let (status, code, _) = status_code_body(third).await;
    assert_eq!((status, code.as_str()), (429, "rate_limited"));

    // The two that nobody reads are stopped after the stall time, and give their places back.
    let started = Instant::now();
    let fresh = loop {
        let res = export().await.unwrap();
        if res.status() == 200 {
            break res;
        }
        assert_eq!(res.status(), 429);
        assert!(started.elapsed() < Duration::from_secs(30), "the stalled exports kept their places");
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    let archive = fresh.bytes().await.unwrap();
    let mut entries = tar::Archive::new(flate2::read::GzDecoder::new(&archive[..]));
    let rollout = entries
        .entries()
        .unwrap()
        .map(Result::unwrap)
        .find(|e| e.path().unwrap().to_string_lossy() == "sessions/big.jsonl")
        .map(|mut e| {
            let mut text = String::new();
            e.read_to_string(&mut text).unwrap();
            text
        })
        .expect("the rollout is in the archive");
    assert_eq!(rollout.lines().count(), 3, "the whole workspace, read by a client that reads");
    for res in stalled {
        assert!(res.bytes().await.is_err(), "a stopped export ends cut short, never complete-looking");
    }
}

/// Reads the stream until it ends; how long that took.
async fn until_it_ends(stream: &mut reqwest::Response, limit: Duration) -> Duration {
    let started = Instant::now();
    loop {
        match tokio::time::timeout(limit.saturating_sub(started.elapsed()), stream.chunk()).await {
            Ok(Ok(Some(_))) => {}
            Ok(Ok(None) | Err(_)) => return started.elapsed(),
            Err(_) => panic!("the stream was still open after {limit:?}"),
        }
    }
}

async fn streams_are_capped_and_end_when_their_key_is_revoked(backend: Backend) {
    let app = TestApp::start_with(backend, |c| c.quotas.max_streams_per_tenant = 2).await;
    let t = app.tenant().await;
    let res = app.request(Method::POST, &format!("/v1/admin/tenants/{}/keys", t.id), ADMIN_TOKEN).send().await.unwrap();
    let second: Value = res.json().await.unwrap();
    let second_key = second["api_key"].as_str().unwrap();
    let open = |key: &str| app.request(Method::GET, "/v1/events", key).send();
    let mut revoked = open(second_key).await.unwrap();
    let kept = open(&t.key).await.unwrap();
    assert_eq!((revoked.status().as_u16(), kept.status().as_u16()), (200, 200));
    let third = open(&t.key).await.unwrap();
    assert!(third.headers().contains_key("retry-after"));
    let (status, code, _) = status_code_body(third).await;
    assert_eq!((status, code.as_str()), (429, "rate_limited"), "a third stream of the tenant");

    let path = format!("/v1/admin/keys/{}", second["key_id"].as_str().unwrap());
    assert_eq!(app.request(Method::DELETE, &path, ADMIN_TOKEN).send().await.unwrap().status(), 204);
    let took = until_it_ends(&mut revoked, Duration::from_secs(30)).await;
    assert!(took < Duration::from_secs(30), "{took:?}");
    // Its place is given back: the tenant may open another.
    let started = Instant::now();
    loop {
        let res = open(&t.key).await.unwrap();
        if res.status() == 200 {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(10), "the ended stream kept its place");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    drop(kept);
}
