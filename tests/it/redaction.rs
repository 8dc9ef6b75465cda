//! Redaction (SPEC §4): secrets never reach the model or the memory, with
//! the layout's rules; `at_ingest` redacts the stored line too.

use crate::every_backend;
use crate::fake_llm::{FakeLlm, Reply};
use crate::harness::{Backend, TestApp, status_code_body, use_model};
use reqwest::Method;
use serde_json::{Value, json};

every_backend!(
    no_built_in_secret_reaches_the_model,
    rules_can_be_turned_off_and_extended_and_ingest_redacted,
    bad_redaction_configs_are_refused,
    secrets_the_model_writes_never_reach_the_memory,
);

/// One made-up credential of every built-in rule, in its real shape.
fn credentials() -> Vec<(&'static str, &'static str)> {
    vec![
        ("openai_key", "sk-proj-Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4zAb7cDe0f"),
        ("anthropic_key", "sk-ant-api03-AbCdEfGhIjKlMnOpQrStUvWxYz012345"),
        ("aws_access_key", "AKIAIOSFODNN7EXAMPLE"),
        ("github_token", "ghp_0123456789abcdefghijABCDEFGHIJ012345"),
        ("slack_token", "xoxb-1234567890-0987654321-AbCdEfGhIjKl"),
        ("google_api_key", "AIzaSyA1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q"),
        ("stripe_key", "sk_live_51HxYzAbCdEfGhIjKlMnOp"),
        (
            "jwt",
            "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
        ),
        (
            "private_key",
            "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA7x1YbDq0n3q9yZ\nabcDEF0123456789==\n-----END RSA PRIVATE KEY-----",
        ),
        ("bearer", "Bearer abcdef0123456789ABCDEF"),
        ("assignment", "password=hunter2hunter2"),
    ]
}

/// The secret part of a credential (an assignment's value, a PEM block's body).
fn secret_of(rule: &str, credential: &str) -> String {
    match rule {
        "assignment" => credential.split_once('=').unwrap().1.to_owned(),
        "private_key" => credential.lines().nth(1).unwrap().to_owned(),
        _ => credential.to_owned(),
    }
}

async fn no_built_in_secret_reaches_the_model(backend: Backend) {
    let fake = FakeLlm::start().await;
    fake.set_default(Reply::artifacts("creds", "a summary", "a raw memory").now());
    fake.set_agent_default(Reply::Consolidate.now());
    let app = TestApp::start_with(backend, use_model(&fake, "responses")).await;
    let t = app.tenant().await;
    let said: Vec<String> = credentials().iter().map(|(_, c)| format!("my {c} ok")).collect();
    let body = json!({"rollout_id": "creds", "input": said.join("\n"), "final_output": "noted"});
    assert_eq!(app.post_segment(&t.key, "s", "default", body).await.status(), 201);
    let closed = app.json(Method::POST, "/v1/sessions/s/close?wait=30", &t.key).await;
    assert_eq!(closed["memory_status"]["status"], "complete", "{closed}");
    let sent = fake.phase_one_requests()[0].user_message();
    for (rule, credential) in credentials() {
        let secret = secret_of(rule, credential);
        assert!(!sent.contains(&secret), "{rule} reached the model");
        assert!(sent.contains(&format!("[REDACTED:{rule}]")), "no marker for {rule}");
    }
    // The rollout file keeps the conversation as sent (no at_ingest).
    let line = app.file_text(&t, "default", "sessions/creds.jsonl").await;
    assert!(line.contains("AKIAIOSFODNN7EXAMPLE"));
    let jobs = app.json(Method::GET, "/v1/jobs?kind=phase_one", &t.key).await;
    let counts = &jobs["jobs"][0]["redactions"];
    for (rule, _) in credentials() {
        assert_eq!(counts[rule], 1, "{rule}: {counts}");
    }
    let metrics = app.client.get(format!("{}/metrics", app.base)).send().await.unwrap().text().await.unwrap();
    assert!(metrics.contains("memoryd_redactions_total{rule=\"aws_access_key\",stage=\"model_input\"}"), "{metrics}");
}

fn patch_with(text: &str) -> Reply {
    let mut patch = String::from("*** Begin Patch\n");
    for file in ["MEMORY.md", "memory_summary.md"] {
        patch.push_str(&format!("*** Delete File: memories/{file}\n*** Add File: memories/{file}\n+{text}\n"));
    }
    patch.push_str("*** End Patch");
    Reply::Calls(vec![("apply_patch", json!({"patch": patch}))])
}

async fn secrets_the_model_writes_never_reach_the_memory(backend: Backend) {
    let (github, aws, stripe) =
        ("ghp_0123456789abcdefghijABCDEFGHIJ012345", "AKIAIOSFODNN7EXAMPLE", "sk_live_51HxYzAbCdEfGhIjKlMnOp");
    let fake = FakeLlm::start().await;
    fake.push(
        Reply::artifacts("leaky", &format!("the summary quotes {aws}"), &format!("the raw memory quotes {github}"))
            .now(),
    );
    fake.push(patch_with(&format!("The deploy key is {stripe}.")).now());
    fake.push(Reply::Text("done").now());
    let app = TestApp::start_with(backend, use_model(&fake, "responses")).await;
    let t = app.tenant().await;
    let body = json!({"rollout_id": "leaky", "input": "tell me about deploys", "final_output": "ok"});
    assert_eq!(app.post_segment(&t.key, "s", "default", body).await.status(), 201);
    let closed = app.json(Method::POST, "/v1/sessions/s/close?wait=30", &t.key).await;
    assert_eq!(closed["memory_status"]["status"], "complete", "{closed}");

    let files = app.files_under(&t, "default", "memories").await;
    assert!(files.len() >= 5, "{files:?}");
    for file in &files {
        let text = app.file_text(&t, "default", file).await;
        for secret in [github, aws, stripe] {
            assert!(!text.contains(secret), "{secret} in {file}");
        }
    }
    let memory = app.file_text(&t, "default", "memories/MEMORY.md").await;
    assert!(memory.contains("The deploy key is [REDACTED:stripe_key]."), "{memory}");
    let raw = app.file_text(&t, "default", "memories/raw_memories/leaky.md").await;
    assert!(raw.contains("[REDACTED:github_token]"), "{raw}");
    // The phase-two prompt saw the redacted raw memory only.
    assert!(fake.phase_two_requests().iter().all(|r| !r.body.to_string().contains(github)));
    let instructions = app.json(Method::GET, "/v1/workspaces/default/layouts/default/instructions", &t.key).await;
    let text = instructions["instructions"].as_str().unwrap();
    assert!(text.contains("[REDACTED:stripe_key]") && !text.contains(stripe), "{text}");
    let run = &app.json(Method::GET, "/v1/workspaces/default/layouts/default/runs", &t.key).await["runs"][0];
    assert_eq!(run["redactions"]["stripe_key"], 2, "MEMORY.md and memory_summary.md: {run}");
    let jobs = app.json(Method::GET, "/v1/jobs?kind=phase_one", &t.key).await;
    let counts = &jobs["jobs"][0]["redactions"];
    assert_eq!((&counts["github_token"], &counts["aws_access_key"]), (&json!(1), &json!(1)), "{counts}");
}

async fn rules_can_be_turned_off_and_extended_and_ingest_redacted(backend: Backend) {
    let fake = FakeLlm::start().await;
    fake.set_default(Reply::artifacts("x", "summary", "raw").now());
    fake.set_agent_default(Reply::Consolidate.now());
    let app = TestApp::start_with(backend, use_model(&fake, "responses")).await;
    let t = app.tenant().await;
    let put = |name: &'static str, layout: Value| {
        let (app, key) = (&app, t.key.clone());
        async move { app.request(Method::PUT, &format!("/v1/layouts/{name}"), &key).json(&layout).send().await.unwrap() }
    };
    let off = json!({"memories_dir": "open/m", "sessions_dir": "open/s", "redaction": {"rules": []}});
    assert_eq!(put("open", off).await.status(), 201);
    let body = json!({"rollout_id": "r", "input": "key AKIAIOSFODNN7EXAMPLE", "final_output": "ok"});
    assert_eq!(app.post_segment(&t.key, "s-open", "open", body).await.status(), 201);
    app.json(Method::POST, "/v1/sessions/s-open/close?wait=30", &t.key).await;
    assert!(fake.phase_one_requests()[0].user_message().contains("AKIAIOSFODNN7EXAMPLE"), "rules: [] sends it");

    let strict = json!({"memories_dir": "hr/m", "sessions_dir": "hr/s", "redaction": {
        "rules": ["aws_access_key"], "patterns": [{"name": "employee_id", "regex": "EMP-[0-9]{6}"}], "at_ingest": true}});
    assert_eq!(put("hr", strict).await.status(), 201);
    let got = app.json(Method::GET, "/v1/layouts/hr", &t.key).await;
    assert_eq!(got["redaction"]["patterns"][0]["name"], "employee_id", "{got}");
    let body = json!({"rollout_id": "hr-1", "input": "EMP-123456 uses AKIAIOSFODNN7EXAMPLE",
                      "generated_items": [{"role": "assistant", "content": "noted EMP-654321", "zeta": 1, "alpha": "ghp_0123456789abcdefghijABCDEFGHIJ012345"}],
                      "final_output": "ok", "extra": {"b": "EMP-000001", "a": 2}});
    assert_eq!(app.post_segment(&t.key, "s-hr", "hr", body).await.status(), 201);
    let line = app.file_text(&t, "default", "hr/s/hr-1.jsonl").await;
    let stored: Value = serde_json::from_str(&line).unwrap();
    assert!(!line.contains("EMP-") && !line.contains("AKIA"), "{line}");
    assert_eq!(stored["input"][0]["content"], "[REDACTED:employee_id] uses [REDACTED:aws_access_key]");
    let keys = |v: &Value| v.as_object().unwrap().keys().cloned().collect::<Vec<_>>();
    assert_eq!(
        keys(&stored),
        ["updated_at", "rollout_id", "input", "generated_items", "terminal_metadata", "final_output", "extra"]
    );
    assert_eq!(keys(&stored["generated_items"][0]), ["role", "content", "zeta", "alpha"]);
    assert_eq!(keys(&stored["extra"]), ["b", "a"]);
    // Only the listed rules apply: the GitHub token stays.
    assert_eq!(stored["generated_items"][0]["alpha"], "ghp_0123456789abcdefghijABCDEFGHIJ012345");
    assert_eq!(stored["extra"]["a"], 2);
}

async fn bad_redaction_configs_are_refused(backend: Backend) {
    let app = TestApp::start(backend).await;
    let t = app.tenant().await;
    let many: Vec<Value> = (0..65).map(|i| json!({"name": format!("p{i}"), "regex": "x"})).collect();
    for (redaction, why) in [
        (json!({"rules": ["nope"]}), "unknown rule"),
        (json!({"rules": "all"}), "default"),
        (json!({"patterns": [{"name": "bad", "regex": "("}]}), "does not compile"),
        (json!({"patterns": [{"name": "Bad Name", "regex": "x"}]}), "must match"),
        (json!({"patterns": many}), "at most 64"),
        (json!({"at_ingest": "yes"}), ""),
        (json!({"surprise": true}), ""),
    ] {
        let layout = json!({"memories_dir": "m", "sessions_dir": "s", "redaction": redaction});
        let res = app.request(Method::PUT, "/v1/layouts/strict", &t.key).json(&layout).send().await.unwrap();
        let (status, code, body) = status_code_body(res).await;
        assert_eq!((status, code.as_str()), (422, "invalid_layout"), "{redaction}: {body}");
        assert!(body["detail"].as_str().unwrap().contains(why), "{why}: {body}");
    }
}
