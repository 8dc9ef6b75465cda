//! Eager phase one (SPEC §5): rollouts idle in an open session are
//! extracted early, and a close then makes no phase-one model call for the
//! ones that did not grow.

use crate::every_backend;
use crate::fake_llm::{FakeLlm, Reply};
use crate::harness::{Backend, TestApp, use_model};
use reqwest::Method;
use serde_json::{Value, json};
use std::time::{Duration, Instant};

every_backend!(eager_phase_one_is_off_by_default, idle_rollouts_are_extracted_before_the_close);

async fn jobs(app: &TestApp, key: &str, query: &str) -> Vec<Value> {
    app.json(Method::GET, &format!("/v1/jobs?{query}"), key).await["jobs"].as_array().unwrap().clone()
}

async fn wait_for(what: &str, mut done: impl AsyncFnMut() -> bool) {
    let started = Instant::now();
    while !done().await {
        assert!(started.elapsed() < Duration::from_secs(30), "{what} did not happen");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn segment(rollout: &str, said: &str) -> Value {
    json!({"rollout_id": rollout, "input": said, "final_output": "ok"})
}

async fn idle_rollouts_are_extracted_before_the_close(backend: Backend) {
    let fake = FakeLlm::start().await;
    fake.set_default(Reply::artifacts("early", "A summary.", "- The user likes tea.").now());
    fake.set_agent_default(Reply::Text("done").now());
    let app = TestApp::start_with(backend, |c| {
        use_model(&fake, "responses")(c);
        c.jobs.eager_phase_one = std::time::Duration::from_secs(1);
    })
    .await;
    let t = app.tenant().await;
    for rollout in ["a", "b"] {
        assert_eq!(app.post_segment(&t.key, "s1", "default", segment(rollout, "I like tea")).await.status(), 201);
    }
    // Both rollouts idle past a second: each gets one early extraction, once.
    wait_for("the early extractions", async || {
        let done = jobs(&app, &t.key, "kind=phase_one&state=succeeded").await;
        done.len() == 2 && done.iter().all(|j| j["eager"] == true)
    })
    .await;
    assert_eq!(fake.phase_one_requests().len(), 2);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(jobs(&app, &t.key, "kind=phase_one").await.len(), 2, "an extracted rollout is not queued again");
    let raw = "memories/raw_memories/a.md";
    let early_raw = app.file_text(&t, "default", raw).await;

    // Rollout b grows before the close; a does not.
    assert_eq!(app.post_segment(&t.key, "s1", "default", segment("b", "and oat milk")).await.status(), 201);
    let closed = app.json(Method::POST, "/v1/sessions/s1/close?wait=30", &t.key).await;
    assert_eq!(
        (closed["state"].as_str(), closed["memory_status"]["status"].as_str()),
        (Some("closed"), Some("complete"))
    );
    let calls: Vec<String> = fake.phase_one_requests().iter().map(|r| r.user_message()).collect();
    assert_eq!(calls.len(), 3, "one new call, for the rollout that grew");
    assert!(calls[2].contains("oat milk"), "{}", calls[2]);
    let close_jobs: Vec<Value> =
        jobs(&app, &t.key, "kind=phase_one&session_id=s1").await.into_iter().filter(|j| j["eager"] != true).collect();
    assert_eq!(close_jobs.len(), 2);
    assert!(close_jobs.iter().all(|j| j["state"] == "succeeded"), "{close_jobs:?}");
    assert_eq!(app.file_text(&t, "default", raw).await, early_raw, "a's raw memory is the early one, as made");
    let selection = app.json(Method::GET, "/v1/workspaces/default/layouts/default/phase_two_selection", &t.key).await;
    let selected: Vec<&str> =
        selection["selected"].as_array().unwrap().iter().map(|s| s["rollout_id"].as_str().unwrap()).collect();
    assert_eq!(selected.len(), 2, "both memories reach the consolidation: {selection}");
    let metrics = app.client.get(format!("{}/metrics", app.base)).send().await.unwrap().text().await.unwrap();
    assert!(
        metrics.contains("memoryd_eager_phase_one_queued_total") && metrics.contains("memoryd_phase_one_reused_total")
    );
}

async fn eager_phase_one_is_off_by_default(backend: Backend) {
    let fake = FakeLlm::start().await;
    fake.set_default(Reply::artifacts("x", "s", "m").now());
    let app = TestApp::start_with(backend, use_model(&fake, "responses")).await;
    let t = app.tenant().await;
    assert_eq!(app.post_segment(&t.key, "s", "default", segment("r", "hello")).await.status(), 201);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(jobs(&app, &t.key, "kind=phase_one").await.is_empty());
    assert!(fake.phase_one_requests().is_empty());
}
