//! A busy layout (SPEC §2.3): closes share the layout's waiting phase-two
//! job, each served session settles with that run, and no close is served by
//! a run that started before its raw memories existed.

use crate::every_backend;
use crate::fake_llm::{FakeLlm, Reply};
use crate::harness::{Backend, Tenant, TestApp, use_model};
use reqwest::Method;
use serde_json::{Value, json};
use std::time::{Duration, Instant};

every_backend!(
    closes_during_a_run_share_the_next_one,
    a_failed_shared_run_is_listed_by_every_close,
    a_close_still_extracting_moves_to_the_next_run
);

async fn segment_and_close(app: &TestApp, t: &Tenant, session: &str) {
    let body = json!({"rollout_id": format!("r-{session}"), "input": "hi", "final_output": "ok"});
    assert_eq!(app.post_segment(&t.key, session, "default", body).await.status(), 201);
    let res = app.request(Method::POST, &format!("/v1/sessions/{session}/close"), &t.key).send().await.unwrap();
    assert_eq!(res.status(), 202);
}

async fn closed(app: &TestApp, t: &Tenant, session: &str) -> Value {
    app.json(Method::POST, &format!("/v1/sessions/{session}/close?wait=60"), &t.key).await
}

fn phase_two_of(view: &Value) -> Vec<String> {
    view["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|j| j["kind"] == "phase_two")
        .map(|j| j["job_id"].as_str().unwrap().to_owned())
        .collect()
}

async fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let started = Instant::now();
    while !done() {
        assert!(started.elapsed() < Duration::from_secs(20), "{what} did not happen");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn closes_during_a_run_share_the_next_one(backend: Backend) {
    let fake = FakeLlm::start().await;
    fake.set_default(Reply::artifacts("x", "summary", "memory").now());
    fake.set_agent_default(Reply::Text("done").after(Duration::from_millis(800)));
    let app = TestApp::start_with(backend, use_model(&fake, "responses")).await;
    let t = app.tenant().await;
    segment_and_close(&app, &t, "a").await;
    wait_until("the first run", || !fake.phase_two_requests().is_empty()).await;
    for session in ["b", "c", "d"] {
        segment_and_close(&app, &t, session).await;
    }
    let views = [
        closed(&app, &t, "a").await,
        closed(&app, &t, "b").await,
        closed(&app, &t, "c").await,
        closed(&app, &t, "d").await,
    ];
    for view in &views {
        assert_eq!(view["memory_status"]["status"], "complete", "{view}");
    }
    let shared = phase_two_of(&views[1]);
    assert_eq!(shared.len(), 1);
    assert_eq!(
        (phase_two_of(&views[2]), phase_two_of(&views[3])),
        (shared.clone(), shared.clone()),
        "b, c and d share one job"
    );
    assert_ne!(phase_two_of(&views[0]), shared, "a's run had started before they closed");
    let jobs = app.json(Method::GET, "/v1/jobs?kind=phase_two", &t.key).await;
    assert_eq!(jobs["jobs"].as_array().unwrap().len(), 2, "{jobs}");
    let job = app.json(Method::GET, &format!("/v1/jobs/{}", shared[0]), &t.key).await;
    assert_eq!(job["sessions"], json!(["b", "c", "d"]));
    let runs = app.json(Method::GET, "/v1/workspaces/default/layouts/default/runs", &t.key).await;
    let runs = runs["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 2);
    assert_eq!(runs[0]["sessions"], json!(["b", "c", "d"]));
    assert_eq!(runs[1]["sessions"], json!(["a"]));
    assert_eq!(fake.phase_two_requests().len(), 2, "one model turn per run, not per close");
}

async fn a_failed_shared_run_is_listed_by_every_close(backend: Backend) {
    let fake = FakeLlm::start().await;
    fake.set_default(Reply::artifacts("x", "summary", "memory").now());
    fake.set_agent_default(Reply::status(400).now());
    let app = TestApp::start_with(backend, |c| {
        use_model(&fake, "responses")(c);
        c.jobs.max_attempts = 1;
        c.jobs.phase_two_debounce = std::time::Duration::from_millis(700);
    })
    .await;
    let t = app.tenant().await;
    segment_and_close(&app, &t, "a").await;
    segment_and_close(&app, &t, "b").await;
    let (a, b) = (closed(&app, &t, "a").await, closed(&app, &t, "b").await);
    assert_eq!(phase_two_of(&a), phase_two_of(&b), "the debounce let b join a's waiting job");
    for view in [&a, &b] {
        assert_eq!(view["memory_status"]["status"], "partial", "{view}");
        let failure = &view["memory_status"]["failures"][0];
        assert_eq!(
            (failure["kind"].as_str(), failure["job_id"].as_str()),
            (Some("phase_two"), Some(phase_two_of(&a)[0].as_str()))
        );
    }
}

async fn a_close_still_extracting_moves_to_the_next_run(backend: Backend) {
    let fake = FakeLlm::start().await;
    fake.push(Reply::artifacts("x", "summary", "memory").now());
    fake.push(Reply::artifacts("y", "summary", "memory").after(Duration::from_millis(2500)));
    fake.set_agent_default(Reply::Text("done").now());
    let app = TestApp::start_with(backend, |c| {
        use_model(&fake, "responses")(c);
        c.jobs.phase_two_debounce = std::time::Duration::from_millis(800);
    })
    .await;
    let t = app.tenant().await;
    segment_and_close(&app, &t, "x").await;
    wait_until("x's extraction", || !fake.phase_one_requests().is_empty()).await;
    segment_and_close(&app, &t, "y").await;
    let x = closed(&app, &t, "x").await;
    let y_phase_one = app.json(Method::GET, "/v1/jobs?kind=phase_one&session_id=y", &t.key).await;
    assert_eq!(y_phase_one["jobs"][0]["state"], "running", "x was served while y was still extracting: {y_phase_one}");
    let y = closed(&app, &t, "y").await;
    assert_eq!(
        (x["memory_status"]["status"].as_str(), y["memory_status"]["status"].as_str()),
        (Some("complete"), Some("complete"))
    );
    let (x_run, y_run) = (phase_two_of(&x), phase_two_of(&y));
    assert_ne!(x_run, y_run, "y moved to a run of its own");
    let y_job = app.json(Method::GET, &format!("/v1/jobs/{}", y_run[0]), &t.key).await;
    let extracted = app.json(Method::GET, "/v1/jobs?kind=phase_one&session_id=y", &t.key).await;
    let at = |v: &Value| chrono::DateTime::parse_from_rfc3339(v.as_str().unwrap()).unwrap();
    assert!(
        at(&y_job["started_at"]) >= at(&extracted["jobs"][0]["finished_at"]),
        "y's run started after its extraction"
    );
    assert_eq!(y_job["sessions"], json!(["y"]));
}
