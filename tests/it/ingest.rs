use crate::every_backend;
use crate::harness::{Backend, TestApp, status_code_body};
use memoryd::domain::ids::{LayoutName, RolloutId, WorkspaceName};
use reqwest::Method;
use serde_json::{Value, json};
use std::io::Write;

every_backend!(
    segments_are_sanitised_and_stored_in_sdk_order,
    rollout_ids_follow_the_sdk_rules,
    bad_segments_get_problem_documents,
    segments_create_sessions_and_layout_folders,
    idempotency_keys_replay_and_conflict,
    concurrent_appends_to_one_rollout_stay_whole_and_ordered,
    empty_bodies_are_refused_and_big_integers_keep_their_digits,
    a_typescript_runs_tool_results_are_kept_and_reach_phase_one,
);
// A file's torn tail: rollouts in a bucket have no file (their journal is in the database).
crate::both_databases!(torn_tails_never_become_visible);

/// SPEC §2.2: a segment as openai-agents-js's `buildMemoryRolloutPayload`
/// makes it keeps that SDK's own item types, each one, and phase one sees them.
async fn a_typescript_runs_tool_results_are_kept_and_reach_phase_one(backend: Backend) {
    use crate::fake_llm::{FakeLlm, Reply};
    let fake = FakeLlm::start().await;
    fake.set_default(Reply::artifacts("weather", "summary", "memory").now());
    let app = TestApp::start_with(backend, crate::harness::use_model(&fake, "responses")).await;
    let t = app.tenant().await;
    let items = [
        json!({"type": "function_call_result", "name": "lookup_weather", "callId": "call_1", "status": "completed",
               "output": {"type": "text", "text": "Oslo: 4 degrees and rain"}}),
        json!({"type": "hosted_tool_call", "name": "web_search_call", "status": "completed",
               "output": "found the harbour timetable", "providerData": {"id": "ws_1"}}),
    ];
    for (n, item) in items.iter().enumerate() {
        let body = json!({
            "rollout_id": format!("ts-{n}"),
            "input": [{"role": "user", "content": "What is the weather?"}],
            "generated_items": [{"type": "reasoning", "content": []}, item],
            "terminal_metadata": {"terminal_state": "completed", "has_final_output": true},
            "final_output": "It rains."
        });
        assert_eq!(app.post_segment(&t.key, "ts", "default", body).await.status(), 201);
        let line = app.file_text(&t, "default", &format!("sessions/ts-{n}.jsonl")).await;
        let stored: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(stored["generated_items"], json!([item]), "kept as sent, reasoning dropped");
    }
    let closed = app.json(Method::POST, "/v1/sessions/ts/close?wait=30", &t.key).await;
    assert_eq!(closed["state"], "closed", "{closed}");
    let prompts: Vec<String> = fake.phase_one_requests().iter().map(|r| r.user_message()).collect();
    assert!(prompts.iter().any(|p| p.contains("Oslo: 4 degrees and rain")), "the tool result reached phase one");
    assert!(prompts.iter().any(|p| p.contains("found the harbour timetable")), "so did the hosted tool's call");
}

async fn segments_are_sanitised_and_stored_in_sdk_order(backend: Backend) {
    let app = TestApp::start(backend).await;
    let t = app.tenant().await;
    let body = json!({
        "rollout_id": "chat-42",
        "updated_at": "2026-04-15T12:00:00+00:00",
        "input": [
            {"role": "developer", "content": "debug"},
            {"role": "system", "content": "system"},
            {"role": "user", "content": "héllo"},
            {"type": "reasoning", "summary": []},
            {"type": "compaction", "summary": "compact", "encrypted_content": "e"}
        ],
        "generated_items": [
            {"type": "reasoning", "summary": []},
            {"id": "fc_1", "type": "function_call", "name": "f", "arguments": "{}", "call_id": "c1"},
            {"type": "image_generation_call", "id": "ig"},
            {"type": "file_search_call", "id": "fs"}
        ],
        "terminal_metadata": {"has_final_output": true, "terminal_state": "completed"},
        "final_output": "done",
        "client_note": "kept"
    });
    let res = app.post_segment(&t.key, "s", "default", body).await;
    assert_eq!(res.status(), 201);
    let receipt: Value = res.json().await.unwrap();
    assert_eq!(
        receipt,
        json!({"session_id": "s", "layout": "default", "rollout_id": "chat-42", "segment_index": 0,
               "rollout_path": "sessions/chat-42.jsonl"})
    );
    let line = app.file_text(&t, "default", "sessions/chat-42.jsonl").await;
    assert_eq!(
        line,
        concat!(
            r#"{"updated_at":"2026-04-15T12:00:00+00:00","rollout_id":"chat-42","#,
            r#""input":[{"role":"user","content":"h\u00e9llo"}],"#,
            r#""generated_items":[{"id":"fc_1","type":"function_call","name":"f","arguments":"{}","call_id":"c1"}],"#,
            r#""terminal_metadata":{"terminal_state":"completed","exception_type":null,"exception_message":null,"has_final_output":true},"#,
            r#""final_output":"done","client_note":"kept"}"#,
            "\n"
        )
    );

    let res = app
        .post_segment(&t.key, "s", "default", json!({"rollout_id": "chat-42", "input": "again", "interruptions": [{"type": "function_call", "call_id": "c2"}],
                                                      "terminal_metadata": {"terminal_state": "interrupted"}}))
        .await;
    let receipt: Value = res.json().await.unwrap();
    assert_eq!(receipt["segment_index"], 1);
    let text = app.file_text(&t, "default", "sessions/chat-42.jsonl").await;
    let second: Value = serde_json::from_str(text.lines().nth(1).unwrap()).unwrap();
    let keys: Vec<&str> = second.as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(keys, ["updated_at", "rollout_id", "input", "generated_items", "interruptions", "terminal_metadata"]);
    assert_eq!(second["input"], json!([{"content": "again", "role": "user"}]));
    let stamp = second["updated_at"].as_str().unwrap();
    assert!(stamp.ends_with("+00:00") && chrono::DateTime::parse_from_rfc3339(stamp).is_ok(), "{stamp}");
}

async fn rollout_ids_follow_the_sdk_rules(backend: Backend) {
    let app = TestApp::start(backend).await;
    let t = app.tenant().await;
    let long_ok = format!("a{}", "b".repeat(127));
    let too_long = format!("{long_ok}c");
    for bad in ["../chat-session", " ", "", "user:42", "a b", too_long.as_str()] {
        let (status, code, body) =
            status_code_body(app.post_segment(&t.key, "s", "default", json!({"rollout_id": bad})).await).await;
        assert_eq!((status, code.as_str()), (400, "invalid_rollout_id"), "{bad:?}");
        assert_eq!(
            body["detail"],
            "Sandbox memory rollout ID must be a file-safe ID containing only letters, numbers, '.', '_', or '-'."
        );
    }
    for (given, file) in [
        (long_ok.as_str(), format!("{long_ok}.jsonl")),
        ("a.b", "a.b.jsonl".into()),
        ("  padded ", "padded.jsonl".into()),
    ] {
        let res = app.post_segment(&t.key, "s", "default", json!({"rollout_id": given})).await;
        assert_eq!(res.status(), 201, "{given:?}");
        let receipt: Value = res.json().await.unwrap();
        assert_eq!(receipt["rollout_path"], format!("sessions/{file}"));
        assert!(app.file_bytes(&t, "default", &format!("sessions/{file}")).await.is_some());
    }
    let res = app.post_segment(&t.key, "s", "default", json!({"final_output": "x"})).await;
    let receipt: Value = res.json().await.unwrap();
    let id = receipt["rollout_id"].as_str().unwrap();
    let hex = id.strip_prefix("run-").unwrap();
    assert!(hex.len() == 32 && hex.bytes().all(|b| b.is_ascii_hexdigit()));
    let line = app.file_text(&t, "default", &format!("sessions/{id}.jsonl")).await;
    assert!(line.contains(&format!("\"rollout_id\":\"{id}\"")));
}

async fn bad_segments_get_problem_documents(backend: Backend) {
    let app = TestApp::start_with(backend, |c| c.quotas.max_segment_bytes = 4096).await;
    let t = app.tenant().await;
    let cases = [
        (json!({"updated_at": "yesterday"}), 400, "invalid_segment"),
        (json!({"terminal_metadata": {"terminal_state": "done"}}), 422, "invalid_segment"),
        (json!({"terminal_metadata": "completed"}), 422, "invalid_segment"),
        (json!({"input": 7}), 422, "invalid_segment"),
        (json!({"generated_items": {"a": 1}}), 422, "invalid_segment"),
        (json!({"interruptions": "no"}), 422, "invalid_segment"),
        (json!({"rollout_id": 42}), 422, "invalid_segment"),
        (json!([1, 2]), 422, "invalid_segment"),
    ];
    for (body, status, code) in cases {
        let (got_status, got_code, _) =
            status_code_body(app.post_segment(&t.key, "s", "default", body.clone()).await).await;
        assert_eq!((got_status, got_code.as_str()), (status, code), "{body}");
    }
    let res = app
        .request(Method::POST, "/v1/sessions/s/layouts/default/segments", &t.key)
        .body("{\"input\": [")
        .send()
        .await
        .unwrap();
    let (status, code, _) = status_code_body(res).await;
    assert_eq!((status, code.as_str()), (400, "invalid_json"));
    let huge = json!({"input": "x".repeat(10_000)});
    let (status, code, _) = status_code_body(app.post_segment(&t.key, "s", "default", huge).await).await;
    assert_eq!((status, code.as_str()), (413, "payload_too_large"));
    let (status, code, _) = status_code_body(app.post_segment(&t.key, "s", "missing", json!({})).await).await;
    assert_eq!((status, code.as_str()), (404, "not_found"));
    let (status, code, _) = status_code_body(app.post_segment(&t.key, "bad:id", "default", json!({})).await).await;
    assert_eq!((status, code.as_str()), (400, "invalid_request"));
    let res = app
        .request(Method::POST, "/v1/sessions/s/layouts/default/segments?workspace=../up", &t.key)
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    let (status, code, _) = status_code_body(res).await;
    assert_eq!((status, code.as_str()), (400, "invalid_request"));

    app.request(Method::PUT, "/v1/layouts/ro", &t.key)
        .json(&json!({"memories_dir": "ro", "sessions_dir": "ro_sessions", "generate": null}))
        .send()
        .await
        .unwrap();
    let (status, code, _) =
        status_code_body(app.post_segment(&t.key, "s", "ro", json!({"rollout_id": "r"})).await).await;
    assert_eq!((status, code.as_str()), (409, "generation_disabled"));
    assert!(app.file_bytes(&t, "default", "ro_sessions/r.jsonl").await.is_none());
    let res = app.request(Method::GET, "/v1/sessions/s", &t.key).send().await.unwrap();
    assert_eq!(res.status(), 404, "refused segments neither append nor open a session");
}

async fn segments_create_sessions_and_layout_folders(backend: Backend) {
    let app = TestApp::start(backend).await;
    let t = app.tenant().await;
    app.request(Method::PUT, "/v1/layouts/team", &t.key)
        .json(&json!({"memories_dir": "team//memory", "sessions_dir": "./team_sessions"}))
        .send()
        .await
        .unwrap();
    let to_r1_in = |session: &str, workspace: &str| {
        app.request(
            Method::POST,
            &format!("/v1/sessions/{session}/layouts/team/segments?workspace={workspace}"),
            &t.key,
        )
        .json(&json!({"rollout_id": "r1"}))
        .send()
    };
    let res = to_r1_in("fresh", "proj-1").await.unwrap();
    assert_eq!(res.status(), 201);
    let receipt: Value = res.json().await.unwrap();
    assert_eq!(receipt["rollout_path"], "team_sessions/r1.jsonl");
    // A bucket has no folders (its readers' and jobs' copies are given
    // them); the empty files are there on either storage (R-LAY-3).
    if backend != Backend::Bucket {
        let root = app.workspace_dir(&t, "proj-1");
        for dir in ["team_sessions", "team/memory/raw_memories", "team/memory/rollout_summaries", "team/memory/skills"]
        {
            assert!(root.join(dir).is_dir(), "{dir}");
        }
    }
    for file in ["team/memory/MEMORY.md", "team/memory/memory_summary.md"] {
        assert_eq!(app.file_bytes(&t, "proj-1", file).await, Some(Vec::new()), "{file}");
    }
    let view = app.json(Method::GET, "/v1/sessions/fresh", &t.key).await;
    assert_eq!(view["workspace"], "proj-1");
    assert_eq!(view["state"], "open");
    let (status, code, _) = status_code_body(to_r1_in("fresh", "other").await.unwrap()).await;
    assert_eq!((status, code.as_str()), (409, "idempotency_conflict"));
    // Without ?workspace= the session's own workspace is used.
    assert_eq!(app.post_segment(&t.key, "fresh", "team", json!({"rollout_id": "r1"})).await.status(), 201);
    let text = app.file_text(&t, "proj-1", "team_sessions/r1.jsonl").await;
    assert_eq!(text.lines().count(), 2);
    // A new session in the same workspace continues the rollout it names.
    let res = to_r1_in("later", "proj-1").await.unwrap();
    assert_eq!(res.status(), 201);
    assert_eq!(res.json::<Value>().await.unwrap()["segment_index"], 2);
    let text = app.file_text(&t, "proj-1", "team_sessions/r1.jsonl").await;
    assert_eq!(text.lines().count(), 3);
}

async fn idempotency_keys_replay_and_conflict(backend: Backend) {
    let app = TestApp::start(backend).await;
    let t = app.tenant().await;
    let send = |key: &'static str, body: Value| {
        app.request(Method::POST, "/v1/sessions/s/layouts/default/segments", &t.key)
            .header("idempotency-key", key)
            .json(&body)
            .send()
    };
    let body = json!({"input": "hello", "final_output": "done"});
    let first = send("k1", body.clone()).await.unwrap();
    assert_eq!(first.status(), 201);
    let first: Value = first.json().await.unwrap();
    let rollout = first["rollout_id"].as_str().unwrap().to_owned();
    let replay = send("k1", body.clone()).await.unwrap();
    assert_eq!(replay.status(), 201);
    assert_eq!(replay.json::<Value>().await.unwrap(), first, "the first response, generated id included");
    let path = format!("sessions/{rollout}.jsonl");
    assert_eq!(app.file_text(&t, "default", &path).await.lines().count(), 1);

    let (status, code, _) = status_code_body(send("k1", json!({"input": "other"})).await.unwrap()).await;
    assert_eq!((status, code.as_str()), (409, "idempotency_conflict"));

    app.request(Method::POST, "/v1/sessions/s/close", &t.key).send().await.unwrap();
    let replay = send("k1", body.clone()).await.unwrap();
    assert_eq!(replay.status(), 201, "a replay after close still gets the first response");
    assert_eq!(replay.json::<Value>().await.unwrap(), first);
    let (status, code, _) = status_code_body(send("k2", body.clone()).await.unwrap()).await;
    assert_eq!((status, code.as_str()), (409, "session_closed"));
    assert_eq!(app.file_text(&t, "default", &path).await.lines().count(), 1);

    let other = app.tenant().await;
    let res = app
        .request(Method::POST, "/v1/sessions/s/layouts/default/segments", &other.key)
        .header("idempotency-key", "k1")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 201, "keys are scoped to the tenant");
    let res = app
        .request(Method::POST, "/v1/sessions/s/layouts/default/segments", &other.key)
        .header("idempotency-key", "x".repeat(256))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 400);
}

async fn torn_tails_never_become_visible(backend: Backend) {
    let app = TestApp::start(backend).await;
    let t = app.tenant().await;
    assert_eq!(
        app.post_segment(&t.key, "s", "default", json!({"rollout_id": "r", "final_output": "one"})).await.status(),
        201
    );
    let path = app.workspace_dir(&t, "default").join("sessions/r.jsonl");
    let acknowledged = std::fs::read(&path).unwrap();
    // What a crash between write and commit leaves: bytes nobody acknowledged.
    std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap()
        .write_all(b"{\"updated_at\":\"2026-01-01T00:00:00+00:00\",\"rollo")
        .unwrap();

    let state = &app.server.as_ref().unwrap().state;
    let tenant_id = uuid::Uuid::parse_str(&t.id).unwrap();
    let committed = state
        .store
        .committed_rollout(
            tenant_id,
            &WorkspaceName::default_workspace(),
            &LayoutName::default_layout(),
            &RolloutId::parse("r").unwrap(),
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(committed.committed_len, acknowledged.len() as u64);
    assert_eq!(committed.segment_count, 1);
    assert_eq!(memoryd::workspace::read_committed(&path, committed.committed_len).unwrap(), acknowledged);

    let res = app.post_segment(&t.key, "s", "default", json!({"rollout_id": "r", "final_output": "two"})).await;
    assert_eq!(res.status(), 201);
    assert_eq!(res.json::<Value>().await.unwrap()["segment_index"], 1);
    let text = std::fs::read_to_string(&path).unwrap();
    let lines: Vec<Value> = text.lines().map(|l| serde_json::from_str(l).expect("every line is whole JSON")).collect();
    assert_eq!(lines.iter().map(|l| l["final_output"].as_str().unwrap()).collect::<Vec<_>>(), ["one", "two"]);
    assert!(text.ends_with('\n'));
}

async fn concurrent_appends_to_one_rollout_stay_whole_and_ordered(backend: Backend) {
    const CLIENTS: usize = 16;
    const SEGMENTS: usize = 50;
    let app = TestApp::start(backend).await;
    let t = app.tenant().await;
    let mut tasks = Vec::new();
    for client in 0..CLIENTS {
        let http = app.client.clone();
        let url = format!("{}/v1/sessions/s/layouts/default/segments", app.base);
        let key = t.key.clone();
        tasks.push(tokio::spawn(async move {
            let mut acknowledged = Vec::new();
            for i in 0..SEGMENTS {
                let tag = format!("c{client}-{i}");
                let res = http
                    .post(&url)
                    .bearer_auth(&key)
                    .json(&json!({"rollout_id": "shared", "final_output": tag, "input": "x".repeat(client * 100)}))
                    .send()
                    .await
                    .unwrap();
                assert_eq!(res.status(), 201);
                let receipt: Value = res.json().await.unwrap();
                acknowledged.push((receipt["segment_index"].as_u64().unwrap() as usize, tag));
            }
            acknowledged
        }));
    }
    let mut acknowledged = Vec::new();
    for task in tasks {
        let mine = task.await.unwrap();
        assert!(mine.windows(2).all(|w| w[0].0 < w[1].0), "one client's segments keep their order");
        acknowledged.extend(mine);
    }
    let text = app.file_text(&t, "default", "sessions/shared.jsonl").await;
    let lines: Vec<Value> = text.lines().map(|l| serde_json::from_str(l).expect("whole JSON lines")).collect();
    assert_eq!(lines.len(), CLIENTS * SEGMENTS);
    acknowledged.sort();
    for (position, (index, tag)) in acknowledged.iter().enumerate() {
        assert_eq!(*index, position, "indices are 0..800 without gaps or repeats");
        assert_eq!(lines[position]["final_output"].as_str().unwrap(), tag);
    }
    let view = app.json(Method::GET, "/v1/sessions/s", &t.key).await;
    assert_eq!(view["rollouts"][0]["segment_count"], CLIENTS * SEGMENTS);
}

/// SPEC §2.2: an empty body is not a segment; numbers are written as
/// Python's `json.dumps` writes what `json.loads` read: integers of any
/// size digit for digit, floats as the shortest repr.
async fn empty_bodies_are_refused_and_big_integers_keep_their_digits(backend: Backend) {
    let app = TestApp::start(backend).await;
    let t = app.tenant().await;
    for empty in ["", "  \n"] {
        let res = app
            .request(Method::POST, "/v1/sessions/s/layouts/default/segments", &t.key)
            .body(empty)
            .send()
            .await
            .unwrap();
        let (status, code, _) = status_code_body(res).await;
        assert_eq!((status, code.as_str()), (400, "invalid_json"), "{empty:?}");
    }
    assert_eq!(app.request(Method::GET, "/v1/sessions/s", &t.key).send().await.unwrap().status(), 404);
    let body = r#"{"rollout_id": "big", "input": [{"role": "user", "content": "n", "id": 123456789012345678901234567890, "neg": -98765432109876543210, "f": 1e5, "g": 2.50, "z": -0}]}"#;
    let res =
        app.request(Method::POST, "/v1/sessions/s/layouts/default/segments", &t.key).body(body).send().await.unwrap();
    assert_eq!(res.status(), 201);
    let line = app.file_text(&t, "default", "sessions/big.jsonl").await;
    assert!(
        line.contains(r#""id":123456789012345678901234567890,"neg":-98765432109876543210,"f":100000.0,"g":2.5,"z":0}"#),
        "{line}"
    );
}
