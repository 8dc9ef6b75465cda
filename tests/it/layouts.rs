use crate::every_backend;
use crate::harness::{Backend, TestApp, status_code_body};
use reqwest::Method;
use serde_json::{Value, json};

every_backend!(
    layouts_are_created_read_and_replaced_with_etags,
    a_layout_answers_its_defaults_and_takes_them_back_unchanged,
    layout_rules_give_the_sdk_messages,
    layouts_conflict_on_shared_dirs,
    layouts_are_private_to_a_tenant,
    nested_or_unusable_folders_are_refused
);

async fn put(app: &TestApp, key: &str, name: &str, body: Value, if_match: Option<&str>) -> reqwest::Response {
    let mut req = app.request(Method::PUT, &format!("/v1/layouts/{name}"), key).json(&body);
    if let Some(tag) = if_match {
        req = req.header("if-match", tag);
    }
    req.send().await.unwrap()
}

async fn layouts_are_created_read_and_replaced_with_etags(backend: Backend) {
    let app = TestApp::start(backend).await;
    let t = app.tenant().await;
    let res = app.request(Method::GET, "/v1/layouts", &t.key).send().await.unwrap();
    let listed: Value = res.json().await.unwrap();
    assert_eq!(listed["layouts"][0]["name"], "default");
    assert_eq!(listed["layouts"][0]["memories_dir"], "memories");
    assert_eq!(listed["layouts"][0]["generate"]["max_raw_memories_for_consolidation"], 256);
    assert_eq!(listed["layouts"][0]["generate"]["phase_two_model"], "gpt-5.5");
    assert_eq!(listed["layouts"][0]["read"]["live_update"], true);

    let config = json!({"memories_dir": "team//memory", "sessions_dir": "team_sessions"});
    let res = put(&app, &t.key, "team", config.clone(), None).await;
    assert_eq!(res.status(), 201);
    let etag = res.headers()["etag"].to_str().unwrap().to_owned();
    let body: Value = res.json().await.unwrap();
    assert_eq!(body["etag"], etag.as_str());
    assert_eq!(body["memories_dir"], "team//memory", "the raw spelling is kept");
    assert_eq!(body["generate"]["phase_one_reasoning_effort"], "medium");

    let res = put(&app, &t.key, "team", config.clone(), None).await;
    assert_eq!(res.status(), 200);
    assert_eq!(res.headers()["etag"].to_str().unwrap(), etag);

    let changed = json!({"memories_dir": "team//memory", "sessions_dir": "team_sessions",
                         "generate": {"max_raw_memories_for_consolidation": 1}});
    let (status, code, body) = status_code_body(put(&app, &t.key, "team", changed.clone(), None).await).await;
    assert_eq!((status, code.as_str()), (409, "layout_conflict"));
    assert!(body["detail"].as_str().unwrap().contains("different memory generation config"));
    let (status, code, _) = status_code_body(put(&app, &t.key, "team", changed.clone(), Some("\"0000\"")).await).await;
    assert_eq!((status, code.as_str()), (412, "precondition_failed"));
    let res = put(&app, &t.key, "team", changed.clone(), Some(&etag)).await;
    assert_eq!(res.status(), 200);
    let new_etag = res.headers()["etag"].to_str().unwrap().to_owned();
    assert_ne!(new_etag, etag);

    let res = app.request(Method::GET, "/v1/layouts/team", &t.key).send().await.unwrap();
    assert_eq!(res.headers()["etag"].to_str().unwrap(), new_etag);
    let body: Value = res.json().await.unwrap();
    assert_eq!(body["generate"]["max_raw_memories_for_consolidation"], 1);
    let (status, code, _) =
        status_code_body(app.request(Method::GET, "/v1/layouts/nope", &t.key).send().await.unwrap()).await;
    assert_eq!((status, code.as_str()), (404, "not_found"));

    let read_only = json!({"memories_dir": "ro", "sessions_dir": "ro_sessions", "generate": null, "read": null});
    let res = put(&app, &t.key, "readonly", read_only, None).await;
    assert_eq!(res.status(), 201);
    let body: Value = res.json().await.unwrap();
    assert!(body["generate"].is_null() && body["read"].is_null());
}

async fn a_layout_answers_its_defaults_and_takes_them_back_unchanged(backend: Backend) {
    let app = TestApp::start(backend).await;
    let t = app.tenant().await;
    let res = put(&app, &t.key, "team", json!({"memories_dir": "tm", "sessions_dir": "ts"}), None).await;
    let etag = res.headers()["etag"].to_str().unwrap().to_owned();
    for path in ["/v1/layouts/team", "/v1/layouts/default"] {
        let shown = app.json(Method::GET, path, &t.key).await;
        assert_eq!(shown["redaction"], json!({"rules": "default", "patterns": [], "at_ingest": false}), "{shown}");
        assert_eq!(shown["retention"], json!({"rollout_days": null}), "{shown}");
        assert_eq!(shown["generate"]["selection"], "recent", "{shown}");
        assert_eq!(shown["read"], json!({"live_update": true, "citations": false}), "{shown}");
    }
    // What was read, written back, is the same layout.
    let mut shown = app.json(Method::GET, "/v1/layouts/team", &t.key).await;
    let fields = shown.as_object_mut().unwrap();
    fields.remove("name");
    fields.remove("etag");
    let res = put(&app, &t.key, "team", shown, Some(&etag)).await;
    assert_eq!(res.status(), 200);
    assert_eq!(res.headers()["etag"].to_str().unwrap(), etag, "nothing changed");
}

async fn layout_rules_give_the_sdk_messages(backend: Backend) {
    let app = TestApp::start(backend).await;
    let t = app.tenant().await;
    let cases = [
        (
            json!({"memories_dir": "/memory", "sessions_dir": "s"}),
            "layout.memories_dir must be relative to the sandbox workspace root, got: /memory",
        ),
        (
            json!({"memories_dir": "../memory", "sessions_dir": "s"}),
            "layout.memories_dir must not escape root, got: ../memory",
        ),
        (
            json!({"memories_dir": "a/../b", "sessions_dir": "s"}),
            "layout.memories_dir must not escape root, got: a/../b",
        ),
        (json!({"memories_dir": "", "sessions_dir": "s"}), "layout.memories_dir must be non-empty"),
        (json!({"memories_dir": ".", "sessions_dir": "s"}), "layout.memories_dir must be non-empty"),
        (json!({"memories_dir": "m", "sessions_dir": "./"}), "layout.sessions_dir must be non-empty"),
        (
            json!({"memories_dir": "m", "sessions_dir": "/sessions"}),
            "layout.sessions_dir must be relative to the sandbox workspace root, got: /sessions",
        ),
        (
            json!({"memories_dir": "m", "sessions_dir": "s", "generate": {"max_raw_memories_for_consolidation": 0}}),
            "MemoryGenerateConfig.max_raw_memories_for_consolidation must be greater than 0.",
        ),
        (
            json!({"memories_dir": "m", "sessions_dir": "s", "generate": {"max_raw_memories_for_consolidation": 4097}}),
            "MemoryGenerateConfig.max_raw_memories_for_consolidation must be less than or equal to 4096.",
        ),
        (
            json!({"memories_dir": "m", "sessions_dir": "s", "generate": {"phase_two_max_turns": 0}}),
            "MemoryGenerateConfig.phase_two_max_turns must be greater than 0.",
        ),
    ];
    for (body, detail) in cases {
        let (status, code, problem) = status_code_body(put(&app, &t.key, "x", body, None).await).await;
        assert_eq!((status, code.as_str()), (422, "invalid_layout"), "{detail}");
        assert_eq!(problem["detail"], detail);
    }
    for body in [
        json!({"memories_dir": 5, "sessions_dir": "s"}),
        json!({"sessions_dir": "s"}),
        json!({"memories_dir": "m", "sessions_dir": "s", "surprise": 1}),
    ] {
        let (status, code, _) = status_code_body(put(&app, &t.key, "x", body, None).await).await;
        assert_eq!((status, code.as_str()), (422, "invalid_layout"));
    }
    let res = app.request(Method::PUT, "/v1/layouts/x", &t.key).body("{not json").send().await.unwrap();
    let (status, code, _) = status_code_body(res).await;
    assert_eq!((status, code.as_str()), (400, "invalid_json"));
    let (status, code, _) =
        status_code_body(put(&app, &t.key, "bad:name", json!({"memories_dir": "m", "sessions_dir": "s"}), None).await)
            .await;
    assert_eq!((status, code.as_str()), (422, "invalid_layout"));
}

async fn layouts_conflict_on_shared_dirs(backend: Backend) {
    let app = TestApp::start(backend).await;
    let t = app.tenant().await;
    let (status, code, body) = status_code_body(
        put(&app, &t.key, "other", json!({"memories_dir": "./memories/", "sessions_dir": "other_sessions"}), None)
            .await,
    )
    .await;
    assert_eq!((status, code.as_str()), (409, "layout_conflict"));
    assert!(body["detail"].as_str().unwrap().contains("memories_dir='memories'"));

    assert_eq!(
        put(&app, &t.key, "a", json!({"memories_dir": "memory_a", "sessions_dir": "shared_sessions"}), None)
            .await
            .status(),
        201
    );
    let (status, code, body) = status_code_body(
        put(&app, &t.key, "b", json!({"memories_dir": "memory_b", "sessions_dir": "shared_sessions"}), None).await,
    )
    .await;
    assert_eq!((status, code.as_str()), (409, "layout_conflict"));
    assert!(body["detail"].as_str().unwrap().contains("sessions_dir='shared_sessions'"));
    assert_eq!(
        put(&app, &t.key, "b", json!({"memories_dir": "memory_b", "sessions_dir": "b_sessions"}), None).await.status(),
        201
    );
}

async fn layouts_are_private_to_a_tenant(backend: Backend) {
    let app = TestApp::start(backend).await;
    let a = app.tenant().await;
    let b = app.tenant().await;
    assert_eq!(
        put(&app, &a.key, "mine", json!({"memories_dir": "m1", "sessions_dir": "s1"}), None).await.status(),
        201
    );
    let res = app.request(Method::GET, "/v1/layouts/mine", &b.key).send().await.unwrap();
    assert_eq!(res.status(), 404);
    // The same dirs are free for another tenant.
    assert_eq!(
        put(&app, &b.key, "mine", json!({"memories_dir": "m1", "sessions_dir": "s1", "read": null}), None)
            .await
            .status(),
        201
    );
    let listed = app.json(Method::GET, "/v1/layouts", &a.key).await;
    let names: Vec<&str> = listed["layouts"].as_array().unwrap().iter().map(|l| l["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["default", "mine"]);
    let res = app.post_segment(&b.key, "s", "mine", json!({"rollout_id": "r"})).await;
    assert_eq!(res.status(), 201);
    assert!(app.file_bytes(&a, "default", "s1/r.jsonl").await.is_none());
    assert!(app.file_bytes(&b, "default", "s1/r.jsonl").await.is_some());
}

/// SPEC §2.1: no folder of a tenant's layouts may equal or contain another
/// (one layout's consolidation agent could delete the other's rollouts), and
/// every folder must be usable on disk; nothing refused is stored.
async fn nested_or_unusable_folders_are_refused(backend: Backend) {
    let app = TestApp::start(backend).await;
    let t = app.tenant().await;
    let dirs = |m: &str, s: &str| json!({"memories_dir": m, "sessions_dir": s});
    assert_eq!(put(&app, &t.key, "x", dirs("shared", "x_sessions"), None).await.status(), 201);
    let conflicts = [
        ("y", dirs("y_memories", "shared"), ["sessions_dir='shared'", "memories_dir='shared'", "layout 'x'"]),
        ("y", dirs("y_memories", "shared/y"), ["sessions_dir='shared/y'", "memories_dir='shared'", "layout 'x'"]),
        (
            "y",
            dirs("sessions/deep", "y_sessions"),
            ["memories_dir='sessions/deep'", "sessions_dir='sessions'", "layout 'default'"],
        ),
        (
            "y",
            dirs("y_memories", "memories/rollouts"),
            ["sessions_dir='memories/rollouts'", "memories_dir='memories'", "layout 'default'"],
        ),
        ("y", dirs("outer", "outer/sessions"), ["memories_dir='outer'", "sessions_dir='outer/sessions'", "layout 'y'"]),
        ("y", dirs("same", "./same/"), ["memories_dir='same'", "sessions_dir='same'", "layout 'y'"]),
    ];
    for (name, body, wanted) in conflicts {
        let (status, code, problem) = status_code_body(put(&app, &t.key, name, body.clone(), None).await).await;
        assert_eq!((status, code.as_str()), (409, "layout_conflict"), "{body}");
        let detail = problem["detail"].as_str().unwrap();
        for part in wanted {
            assert!(detail.contains(part), "{body}: {detail} lacks {part}");
        }
    }
    let long_component = "c".repeat(256);
    let long_path = vec!["abcdefgh"; 120].join("/");
    for bad in ["with\\u0000nul", "tab\\there", "line\\nbreak", long_component.as_str(), long_path.as_str()] {
        let body: Value =
            serde_json::from_str(&format!(r#"{{"memories_dir": "ok_m", "sessions_dir": "{bad}"}}"#)).unwrap();
        let (status, code, _) = status_code_body(put(&app, &t.key, "z", body, None).await).await;
        assert_eq!((status, code.as_str()), (422, "invalid_layout"), "{bad:.40}");
    }
    let listed = app.json(Method::GET, "/v1/layouts", &t.key).await;
    let names: Vec<&str> = listed["layouts"].as_array().unwrap().iter().map(|l| l["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["default", "x"], "nothing refused was stored");
    // The data-loss case stays impossible: segments to x and to the default land apart.
    let res = app.post_segment(&t.key, "s", "default", json!({"rollout_id": "r"})).await;
    assert_eq!(res.status(), 201);
    assert!(app.file_bytes(&t, "default", "sessions/r.jsonl").await.is_some());
}
