use crate::every_backend;
use crate::harness::{Backend, TestApp, status_code_body};
use reqwest::Method;
use serde_json::{Value, json};
use std::time::{Duration, Instant};

every_backend!(
    sessions_open_idempotently_and_stay_private,
    close_queues_one_job_per_rollout_and_layout,
    close_of_an_empty_session_is_immediate,
    waiting_close_answers_at_once_on_shutdown,
);

async fn sessions_open_idempotently_and_stay_private(backend: Backend) {
    let app = TestApp::start(backend).await;
    let a = app.tenant().await;
    let b = app.tenant().await;
    let body = json!({"session_id": "s-1", "workspace": "alice", "metadata": {"user": "alice"}});
    let res = app.request(Method::POST, "/v1/sessions", &a.key).json(&body).send().await.unwrap();
    assert_eq!(res.status(), 201);
    let view: Value = res.json().await.unwrap();
    assert_eq!((view["state"].as_str(), view["workspace"].as_str()), (Some("open"), Some("alice")));
    let res = app.request(Method::POST, "/v1/sessions", &a.key).json(&body).send().await.unwrap();
    assert_eq!(res.status(), 200);
    let other = json!({"session_id": "s-1", "workspace": "bob"});
    let (status, code, _) =
        status_code_body(app.request(Method::POST, "/v1/sessions", &a.key).json(&other).send().await.unwrap()).await;
    assert_eq!((status, code.as_str()), (409, "idempotency_conflict"));

    let res = app.request(Method::POST, "/v1/sessions", &a.key).json(&json!({})).send().await.unwrap();
    assert_eq!(res.status(), 201);
    let generated: Value = res.json().await.unwrap();
    assert!(uuid::Uuid::parse_str(generated["session_id"].as_str().unwrap()).is_ok());
    assert_eq!(generated["workspace"], "default");

    for bad in [json!({"session_id": "../x"}), json!({"workspace": "a/b"}), json!({"metadata": 3}), json!({"what": 1})]
    {
        let (status, code, _) =
            status_code_body(app.request(Method::POST, "/v1/sessions", &a.key).json(&bad).send().await.unwrap()).await;
        assert_eq!((status, code.as_str()), (400, "invalid_request"), "{bad}");
    }

    let res = app.request(Method::GET, "/v1/sessions/s-1", &a.key).send().await.unwrap();
    assert_eq!(res.status(), 200);
    let (status, code, _) =
        status_code_body(app.request(Method::GET, "/v1/sessions/s-1", &b.key).send().await.unwrap()).await;
    assert_eq!((status, code.as_str()), (404, "not_found"));
    let (status, _, _) =
        status_code_body(app.request(Method::POST, "/v1/sessions/s-1/close", &b.key).send().await.unwrap()).await;
    assert_eq!(status, 404);
    // Another tenant's segment under the same session id opens its own session.
    assert_eq!(app.post_segment(&b.key, "s-1", "default", json!({"rollout_id": "r"})).await.status(), 201);
    let view = app.json(Method::GET, "/v1/sessions/s-1", &a.key).await;
    assert_eq!(view["rollouts"], json!([]));
}

async fn close_queues_one_job_per_rollout_and_layout(backend: Backend) {
    // `--no-workers`: the jobs stay queued, as this replica only serves the API.
    let app = TestApp::start_with(backend, |c| c.no_workers = true).await;
    let t = app.tenant().await;
    let res = app
        .request(Method::PUT, "/v1/layouts/second", &t.key)
        .json(&json!({"memories_dir": "mem2", "sessions_dir": "sess2"}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 201);
    for (layout, rollout) in [("default", "chat-a"), ("default", "chat-b"), ("default", "chat-a"), ("second", "chat-a")]
    {
        let res = app.post_segment(&t.key, "s", layout, json!({"rollout_id": rollout, "final_output": "ok"})).await;
        assert_eq!(res.status(), 201);
    }
    let view = app.json(Method::GET, "/v1/sessions/s", &t.key).await;
    assert_eq!(
        view["rollouts"],
        json!([{"layout": "default", "rollout_id": "chat-a", "segment_count": 2},
               {"layout": "default", "rollout_id": "chat-b", "segment_count": 1},
               {"layout": "second", "rollout_id": "chat-a", "segment_count": 1}])
    );

    let res = app.request(Method::POST, "/v1/sessions/s/close", &t.key).send().await.unwrap();
    assert_eq!(res.status(), 202);
    let closed: Value = res.json().await.unwrap();
    assert_eq!(closed["state"], "closing");
    let jobs = closed["jobs"].as_array().unwrap();
    let mut summary: Vec<(String, String, String)> = jobs
        .iter()
        .map(|j| {
            (
                j["kind"].as_str().unwrap().into(),
                j["layout"].as_str().unwrap().into(),
                j["rollout_id"].as_str().unwrap_or("-").into(),
            )
        })
        .collect();
    summary.sort();
    assert_eq!(
        summary,
        [
            ("phase_one", "default", "chat-a"),
            ("phase_one", "default", "chat-b"),
            ("phase_one", "second", "chat-a"),
            ("phase_two", "default", "-"),
            ("phase_two", "second", "-")
        ]
        .map(|(a, b, c)| (a.to_string(), b.to_string(), c.to_string()))
    );
    assert!(jobs.iter().all(|j| j["state"] == "queued"));

    let again = app.json(Method::POST, "/v1/sessions/s/close", &t.key).await;
    assert_eq!(again["jobs"].as_array().unwrap().len(), 5, "closing again queues nothing");

    let (status, code, _) =
        status_code_body(app.post_segment(&t.key, "s", "default", json!({"rollout_id": "chat-a"})).await).await;
    assert_eq!((status, code.as_str()), (409, "session_closed"));

    let listed = app.json(Method::GET, "/v1/jobs?session_id=s&kind=phase_one", &t.key).await;
    assert_eq!(listed["jobs"].as_array().unwrap().len(), 3);
    let listed = app.json(Method::GET, "/v1/jobs?state=succeeded", &t.key).await;
    assert_eq!(listed["jobs"], json!([]));
    let (status, code, _) =
        status_code_body(app.request(Method::GET, "/v1/jobs?state=done", &t.key).send().await.unwrap()).await;
    assert_eq!((status, code.as_str()), (400, "invalid_request"));

    let job_id = jobs[0]["job_id"].as_str().unwrap();
    let job = app.json(Method::GET, &format!("/v1/jobs/{job_id}"), &t.key).await;
    assert_eq!(job["state"], "queued");
    assert_eq!(job["attempts"], 0);
    assert_eq!(job["session_id"], "s");
    let other = app.tenant().await;
    assert_eq!(app.request(Method::GET, &format!("/v1/jobs/{job_id}"), &other.key).send().await.unwrap().status(), 404);
    assert_eq!(app.request(Method::GET, "/v1/jobs/not-a-uuid", &t.key).send().await.unwrap().status(), 404);

    let view = app.json(Method::GET, "/v1/sessions/s", &t.key).await;
    assert_eq!(view["jobs"].as_array().unwrap().len(), 5);

    let started = Instant::now();
    let res = app.request(Method::POST, "/v1/sessions/s/close?wait=1", &t.key).send().await.unwrap();
    assert_eq!(res.status(), 202, "no worker runs the jobs, so the session stays closing");
    assert!(started.elapsed() >= Duration::from_millis(900));
    for bad in ["301", "-1", "soon"] {
        let (status, code, _) = status_code_body(
            app.request(Method::POST, &format!("/v1/sessions/s/close?wait={bad}"), &t.key).send().await.unwrap(),
        )
        .await;
        assert_eq!((status, code.as_str()), (400, "invalid_request"), "{bad}");
    }
}

async fn close_of_an_empty_session_is_immediate(backend: Backend) {
    let app = TestApp::start(backend).await;
    let t = app.tenant().await;
    app.request(Method::POST, "/v1/sessions", &t.key).json(&json!({"session_id": "empty"})).send().await.unwrap();
    let res = app.request(Method::POST, "/v1/sessions/empty/close?wait=5", &t.key).send().await.unwrap();
    assert_eq!(res.status(), 200);
    let body: Value = res.json().await.unwrap();
    assert_eq!(body["state"], "closed");
    assert_eq!(body["jobs"], json!([]));
    assert_eq!(body["memory_status"]["status"], "complete");
}

async fn waiting_close_answers_at_once_on_shutdown(backend: Backend) {
    let mut app = TestApp::start_with(backend, |c| c.no_workers = true).await;
    let t = app.tenant().await;
    assert_eq!(app.post_segment(&t.key, "s", "default", json!({"rollout_id": "r"})).await.status(), 201);
    let waiting = app.request(Method::POST, "/v1/sessions/s/close?wait=60", &t.key).send();
    let waiter = tokio::spawn(waiting);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let started = Instant::now();
    app.server.take().unwrap().shutdown().await.unwrap();
    let res = waiter.await.unwrap().unwrap();
    assert_eq!(res.status(), 202);
    let body: Value = res.json().await.unwrap();
    assert_eq!(body["state"], "closing");
    assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
}
