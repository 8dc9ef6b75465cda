use crate::every_backend;
use crate::harness::{ADMIN_TOKEN, Backend, TestApp, status_code_body};
use reqwest::Method;
use serde_json::json;

every_backend!(
    keys_authenticate_tenants_and_can_be_revoked,
    admin_api_needs_its_token,
    health_and_errors_are_well_formed
);

async fn keys_authenticate_tenants_and_can_be_revoked(backend: Backend) {
    let app = TestApp::start(backend).await;
    let tenant = app.tenant().await;
    let res = app.request(Method::GET, "/v1/layouts", &tenant.key).send().await.unwrap();
    assert_eq!(res.status(), 200);

    let (status, code, _) =
        status_code_body(app.request(Method::GET, "/v1/layouts", "mk_wrong").send().await.unwrap()).await;
    assert_eq!((status, code.as_str()), (401, "unauthorized"));
    let res = app.client.get(format!("{}/v1/layouts", app.base)).send().await.unwrap();
    assert_eq!(res.headers()["www-authenticate"], "Bearer");
    assert_eq!(res.status(), 401);

    let res =
        app.request(Method::POST, &format!("/v1/admin/tenants/{}/keys", tenant.id), ADMIN_TOKEN).send().await.unwrap();
    assert_eq!(res.status(), 201);
    let second: serde_json::Value = res.json().await.unwrap();
    let second_key = second["api_key"].as_str().unwrap();
    assert_ne!(second_key, tenant.key);
    assert_eq!(app.request(Method::GET, "/v1/layouts", second_key).send().await.unwrap().status(), 200);

    let res = app
        .request(Method::DELETE, &format!("/v1/admin/keys/{}", second["key_id"].as_str().unwrap()), ADMIN_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 204);
    assert_eq!(app.request(Method::GET, "/v1/layouts", second_key).send().await.unwrap().status(), 401);
    assert_eq!(app.request(Method::GET, "/v1/layouts", &tenant.key).send().await.unwrap().status(), 200);
    let res = app
        .request(Method::DELETE, &format!("/v1/admin/keys/{}", second["key_id"].as_str().unwrap()), ADMIN_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 404);

    let unknown = uuid::Uuid::new_v4();
    let (status, code, _) = status_code_body(
        app.request(Method::POST, &format!("/v1/admin/tenants/{unknown}/keys"), ADMIN_TOKEN).send().await.unwrap(),
    )
    .await;
    assert_eq!((status, code.as_str()), (404, "not_found"));
    // A tenant key is no admin token.
    let res =
        app.request(Method::POST, "/v1/admin/tenants", &tenant.key).json(&json!({"name": "x"})).send().await.unwrap();
    assert_eq!(res.status(), 401);
    let (status, code, _) = status_code_body(
        app.request(Method::POST, "/v1/admin/tenants", ADMIN_TOKEN).json(&json!({"name": " "})).send().await.unwrap(),
    )
    .await;
    assert_eq!((status, code.as_str()), (400, "invalid_request"));
}

async fn admin_api_needs_its_token(backend: Backend) {
    let app = TestApp::start_with(backend, |c| c.admin_token = None).await;
    let (status, code, body) = status_code_body(
        app.request(Method::POST, "/v1/admin/tenants", ADMIN_TOKEN).json(&json!({"name": "x"})).send().await.unwrap(),
    )
    .await;
    assert_eq!((status, code.as_str()), (404, "not_found"));
    assert!(body["detail"].as_str().unwrap().contains("admin API is off"), "{body}");

    // With a token set, wrong guesses from one address are throttled, the
    // right token included, while the address waits; another address is not.
    let app = TestApp::start(backend).await;
    let guess = |token: &'static str, from: String| {
        app.request(Method::GET, "/v1/admin/tenants", token).header("x-forwarded-for", from).send()
    };
    // What the guesser writes left of what a proxy on this host appended changes nothing.
    for i in 0..10 {
        let (status, _, body) =
            status_code_body(guess("wrong-token", format!("198.51.100.{i}, 203.0.113.5")).await.unwrap()).await;
        assert_eq!(status, 401);
        assert!(body["detail"].as_str().unwrap().contains("the admin token"), "a 401 names its credential: {body}");
    }
    let tenant_route = app.request(Method::GET, "/v1/sessions", "not-a-key").send().await.unwrap();
    let (status, _, body) = status_code_body(tenant_route).await;
    assert_eq!(status, 401);
    assert!(body["detail"].as_str().unwrap().contains("a tenant's API key"), "{body}");
    let refused = guess(ADMIN_TOKEN, "203.0.113.5".into()).await.unwrap();
    assert!(refused.headers().contains_key("retry-after"));
    let (status, code, _) = status_code_body(refused).await;
    assert_eq!((status, code.as_str()), (429, "rate_limited"));
    assert_eq!(guess(ADMIN_TOKEN, "203.0.113.6".into()).await.unwrap().status(), 200);
}

async fn health_and_errors_are_well_formed(backend: Backend) {
    let app = TestApp::start(backend).await;
    let res = app.client.get(format!("{}/healthz", app.base)).send().await.unwrap();
    assert_eq!(res.status(), 200);
    assert!(res.headers().contains_key("x-request-id"));
    let res = app.client.get(format!("{}/readyz", app.base)).send().await.unwrap();
    assert_eq!(res.status(), 200);

    let res = app.client.get(format!("{}/v1/nothing-here", app.base)).send().await.unwrap();
    assert!(res.headers().contains_key("x-request-id"));
    assert_eq!(res.headers()["content-type"], "application/problem+json");
    let (status, code, body) = status_code_body(res).await;
    assert_eq!((status, code.as_str()), (404, "not_found"));
    assert_eq!(body["status"], 404);
    assert!(body["type"].is_string() && body["title"].is_string() && body["detail"].is_string());

    let tenant = app.tenant().await;
    let res = app.request(Method::DELETE, "/v1/layouts", &tenant.key).send().await.unwrap();
    assert_eq!(res.headers()["content-type"], "application/problem+json");
    let (status, code, _) = status_code_body(res).await;
    assert_eq!((status, code.as_str()), (405, "method_not_allowed"));

    let res = app
        .client
        .get(format!("{}/healthz", app.base))
        .header("x-request-id", "caller-chosen-id")
        .send()
        .await
        .unwrap();
    assert_eq!(res.headers()["x-request-id"], "caller-chosen-id");
}

every_backend!(metrics_show_every_family_after_a_walkthrough);

async fn metrics_show_every_family_after_a_walkthrough(backend: Backend) {
    let app = TestApp::start(backend).await;
    let t = app.tenant().await;
    app.post_segment(&t.key, "s", "default", json!({"rollout_id": "r", "input": "hello", "final_output": "ok"})).await;
    let res = app.request(Method::POST, "/v1/sessions/s/close?wait=30", &t.key).send().await.unwrap();
    assert_eq!(res.status(), 200);
    let res = app.client.get(format!("{}/metrics", app.base)).send().await.unwrap();
    assert_eq!(res.status(), 200);
    assert!(res.headers()["content-type"].to_str().unwrap().starts_with("text/plain"));
    let text = res.text().await.unwrap();
    for family in [
        "memoryd_http_requests_total",
        "memoryd_http_request_duration_seconds_bucket",
        "memoryd_segments_ingested_total",
        "memoryd_segment_bytes_total",
        "memoryd_append_group_size_bucket",
        "memoryd_appends_waiting 0",
        "memoryd_append_groups_running 0",
        "memoryd_sessions_opened_total",
        "memoryd_sessions_closed_total",
        "memoryd_jobs_finished_total",
        "memoryd_job_attempts_total",
        "memoryd_job_duration_seconds_bucket",
        "memoryd_jobs{",
        "memoryd_phase_two_runs_total",
        "memoryd_phase_two_turns_bucket",
        "memoryd_phase_two_files_changed_total",
    ] {
        assert!(text.contains(family), "{family} is missing:\n{text}");
    }
    let value = |prefix: &str| -> f64 {
        text.lines().find(|l| l.starts_with(prefix)).and_then(|l| l.rsplit(' ').next()).unwrap().parse().unwrap()
    };
    assert!(value("memoryd_segments_ingested_total") >= 1.0);
    assert!(value("memoryd_segment_bytes_total") > 100.0);
    assert!(text.contains("route=\"/v1/sessions/{session_id}/layouts/{layout}/segments\""));
    assert!(text.contains("memoryd_jobs_finished_total{kind=\"phase_one\",state=\"succeeded\"}"));
    let spec = app.client.get(format!("{}/openapi.yaml", app.base)).send().await.unwrap().text().await.unwrap();
    let spec: serde_yaml::Value = serde_yaml::from_str(&spec).unwrap();
    assert!(spec["openapi"].as_str().is_some_and(|v| v.starts_with("3.")), "{spec:?}");
}
