//! Limits (SPEC §2.9): an operator sets a tenant's, the tenant reads them,
//! and its requests pass a token bucket with the IETF RateLimit fields.

use crate::every_backend;
use crate::harness::{ADMIN_TOKEN, Backend, TestApp, status_code_body};
use reqwest::Method;
use serde_json::json;
use std::time::Duration;

every_backend!(
    a_tenants_burst_meets_429_while_another_is_untouched,
    limits_are_set_read_and_checked,
    open_sessions_are_capped,
);

async fn open_sessions_are_capped(backend: Backend) {
    let app = TestApp::start(backend).await;
    let (t, other) = (app.tenant().await, app.tenant().await);
    let res = app
        .request(Method::PUT, &format!("/v1/admin/tenants/{}/limits", t.id), ADMIN_TOKEN)
        .json(&json!({"open_sessions": 2}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let open = |key: String, id: &'static str| {
        let app = &app;
        async move {
            let res =
                app.request(Method::POST, "/v1/sessions", &key).json(&json!({"session_id": id})).send().await.unwrap();
            status_code_body(res).await
        }
    };
    assert_eq!(open(t.key.clone(), "a").await.0, 201);
    assert_eq!(app.post_segment(&t.key, "b", "default", json!({"input": "hi"})).await.status(), 201);
    let (status, code, _) = open(t.key.clone(), "c").await;
    assert_eq!((status, code.as_str()), (403, "quota_exceeded"));
    let (status, code, _) =
        status_code_body(app.post_segment(&t.key, "d", "default", json!({"input": "hi"})).await).await;
    assert_eq!((status, code.as_str()), (403, "quota_exceeded"), "a first segment cannot open one either");
    assert_eq!(open(t.key.clone(), "a").await.0, 200, "the same session again is no new one");
    assert_eq!(app.post_segment(&t.key, "a", "default", json!({"input": "more"})).await.status(), 201);
    assert_eq!(open(other.key.clone(), "c").await.0, 201, "another tenant is not capped");
    assert_eq!(app.json(Method::POST, "/v1/sessions/a/close?wait=30", &t.key).await["state"], "closed");
    assert_eq!(open(t.key.clone(), "c").await.0, 201, "a closed session frees its place");
}

async fn a_tenants_burst_meets_429_while_another_is_untouched(backend: Backend) {
    let app = TestApp::start(backend).await;
    let (busy, calm) = (app.tenant().await, app.tenant().await);
    let res = app
        .request(Method::PUT, &format!("/v1/admin/tenants/{}/limits", busy.id), ADMIN_TOKEN)
        .json(&json!({"requests_per_second": 1, "burst": 5}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    // 30 requests at once.
    let fire = |key: String| {
        let (client, url) = (app.client.clone(), format!("{}/v1/layouts", app.base));
        async move {
            let mut tasks = tokio::task::JoinSet::new();
            for _ in 0..30 {
                let request = client.get(&url).bearer_auth(&key);
                tasks.spawn(async move { request.send().await.unwrap() });
            }
            let mut answers = Vec::new();
            while let Some(res) = tasks.join_next().await {
                answers.push(res.unwrap());
            }
            answers
        }
    };
    let answers = fire(busy.key.clone()).await;
    let (mut passed, mut refused) = (0, 0);
    for res in &answers {
        let policy = res.headers().get("ratelimit-policy").map(|v| v.to_str().unwrap().to_owned());
        assert_eq!(policy.as_deref(), Some("\"tenant\";q=5;w=1"), "every answer carries the policy");
        let fields = res.headers()["ratelimit"].to_str().unwrap().to_owned();
        assert!(fields.starts_with("\"tenant\";r=") && fields.contains(";t="), "{fields}");
        match res.status().as_u16() {
            200 => passed += 1,
            429 => {
                refused += 1;
                assert!(res.headers().get("retry-after").is_some());
                assert!(fields.starts_with("\"tenant\";r=0;"), "{fields}");
            }
            other => panic!("unexpected {other}"),
        }
    }
    // The burst, and at most a refill or two while the 30 requests ran.
    assert!((5..=7).contains(&passed) && refused == 30 - passed, "{passed} passed, {refused} refused");
    let problem = answers.into_iter().find(|r| r.status() == 429).unwrap();
    let (_, code, _) = status_code_body(problem).await;
    assert_eq!(code, "rate_limited");
    // Another tenant is untouched, and has no bucket.
    for res in fire(calm.key.clone()).await {
        assert_eq!(res.status(), 200);
        assert!(res.headers().get("ratelimit").is_none());
    }
    // The admin API is not limited; the bucket refills.
    for _ in 0..10 {
        assert_eq!(app.request(Method::GET, "/v1/admin/tenants", ADMIN_TOKEN).send().await.unwrap().status(), 200);
    }
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let res = app.request(Method::GET, "/v1/layouts", &busy.key).send().await.unwrap();
    assert_eq!(res.status(), 200, "the bucket refilled");
}

async fn limits_are_set_read_and_checked(backend: Backend) {
    let app = TestApp::start_with(backend, |c| c.quotas.default_limits = r#"{"open_sessions": 100}"#.into()).await;
    let t = app.tenant().await;
    let unset = app.json(Method::GET, "/v1/limits", &t.key).await;
    assert_eq!(
        unset,
        json!({"requests_per_second": null, "burst": null, "storage_bytes": null, "model_tokens_per_day": null, "open_sessions": 100})
    );
    let path = format!("/v1/admin/tenants/{}/limits", t.id);
    let set = json!({"requests_per_second": 2.5, "storage_bytes": 1000000, "open_sessions": 0});
    let res = app.request(Method::PUT, &path, ADMIN_TOKEN).json(&set).send().await.unwrap();
    assert_eq!(res.status(), 200);
    let want = json!({"requests_per_second": 2.5, "burst": 3, "storage_bytes": 1000000, "model_tokens_per_day": null, "open_sessions": null});
    assert_eq!(app.json(Method::GET, &path, ADMIN_TOKEN).await, want);
    assert_eq!(app.json(Method::GET, "/v1/limits", &t.key).await, want);
    for (body, status) in
        [(json!({"requests_per_second": -1}), 400), (json!({"burst": "many"}), 400), (json!({"rps": 5}), 400)]
    {
        let res = app.request(Method::PUT, &path, ADMIN_TOKEN).json(&body).send().await.unwrap();
        let (got, code, _) = status_code_body(res).await;
        assert_eq!((got, code.as_str()), (status, "invalid_request"), "{body}");
    }
    let nobody = "/v1/admin/tenants/00000000-0000-4000-8000-000000000000/limits";
    let res = app.request(Method::PUT, nobody, ADMIN_TOKEN).json(&set).send().await.unwrap();
    assert_eq!(res.status(), 404);
    assert_eq!(app.request(Method::GET, &path, &t.key).send().await.unwrap().status(), 401, "admin only");
}
