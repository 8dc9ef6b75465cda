//! What a security review checks first (SPEC §2.7, §2.8, §4): secrets that
//! hide behind JSON escapes, names made from secrets, the consolidation
//! agent's reads, imported files, and the outbox after a forget.

use crate::every_backend;
use crate::fake_llm::{FakeLlm, Reply};
use crate::harness::{Backend, Tenant, TestApp, use_model};
use crate::imports::{imported, tar_gz};
use reqwest::Method;
use serde_json::{Value, json};

every_backend!(
    secrets_behind_escapes_never_reach_the_model,
    no_name_or_lowercase_copy_holds_a_secret,
    the_consolidation_agents_reads_are_redacted,
    a_forgotten_workspace_leaves_the_outbox,
);

const AWS: &str = "AKIAIOSFODNN7EXAMPLE";
const OPENAI: &str = "sk-proj-Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4zAb7cDe0f";
const GITHUB: &str = "ghp_0123456789abcdefghijABCDEFGHIJ012345";
const PASSWORD: &str = "hunter2-but-longer-9x";

/// Every file under `dir`, with its path and content.
fn files_of(dir: &std::path::Path) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(files_of(&path));
        } else {
            out.push((
                path.to_string_lossy().into_owned(),
                String::from_utf8_lossy(&std::fs::read(&path).unwrap()).into_owned(),
            ));
        }
    }
    out
}

crate::every_backend!(an_imported_workspaces_secrets_are_redacted, an_imported_sdk_memory_keeps_its_prose_offline,);

async fn close(app: &TestApp, t: &Tenant, session: &str) -> Value {
    let closed = app.json(Method::POST, &format!("/v1/sessions/{session}/close?wait=30"), &t.key).await;
    assert_eq!(closed["state"], "closed", "{closed}");
    closed
}

async fn secrets_behind_escapes_never_reach_the_model(backend: Backend) {
    let fake = FakeLlm::start().await;
    fake.set_default(Reply::artifacts("env", "a summary", "a raw memory").now());
    fake.set_agent_default(Reply::Consolidate.now());
    let app = TestApp::start_with(backend, use_model(&fake, "responses")).await;
    let t = app.tenant().await;
    // A pasted .env file, a tab, a quoted key and a non-ASCII letter before a secret.
    let pasted = format!(
        "DB_HOST=db.internal\npassword = {PASSWORD}\nOPENAI={OPENAI}\n\t{GITHUB}\n\"{AWS}\"\ncafé\nsecret: s3cr3t-value-xyz"
    );
    let body = json!({"rollout_id": "env", "input": pasted, "generated_items": [
        {"type": "function_call", "name": "write", "arguments": json!({"api_key": "abcd1234efgh5678"}).to_string(), "call_id": "c1"}
    ], "final_output": "noted"});
    assert_eq!(app.post_segment(&t.key, "s", "default", body).await.status(), 201);
    close(&app, &t, "s").await;
    let sent = fake.phase_one_requests()[0].user_message();
    for secret in [PASSWORD, OPENAI, GITHUB, AWS, "s3cr3t-value-xyz", "abcd1234efgh5678"] {
        assert!(!sent.contains(secret), "{secret} reached the model: {sent}");
    }
    assert!(sent.contains("DB_HOST=db.internal"), "the rest of the line stays: {sent}");
}

async fn no_name_or_lowercase_copy_holds_a_secret(backend: Backend) {
    // The extractive provider makes slugs and keywords from the conversation.
    let app = TestApp::start(backend).await;
    let t = app.tenant().await;
    let body = json!({"rollout_id": "aws", "input": format!("AWS {AWS} rotate this key"), "final_output": "done"});
    assert_eq!(app.post_segment(&t.key, "s", "default", body).await.status(), 201);
    close(&app, &t, "s").await;
    let lower = AWS.to_lowercase();
    for (path, text) in files_of(&app.workspace_dir(&t, "default").join("memories")) {
        assert!(!path.contains(&lower) && !path.contains(AWS), "a name holds the key: {path}");
        assert!(!text.contains(&lower) && !text.contains(AWS), "{path} holds the key: {text}");
    }
    let selection = app.json(Method::GET, "/v1/workspaces/default/layouts/default/phase_two_selection", &t.key).await;
    assert!(!selection.to_string().to_lowercase().contains(&lower), "{selection}");

    // A model that repeats a key in its slug.
    let fake = FakeLlm::start().await;
    fake.set_agent_default(Reply::Consolidate.now());
    let app = TestApp::start_with(backend, use_model(&fake, "responses")).await;
    let t = app.tenant().await;
    fake.push(Reply::artifacts(&format!("aws-{AWS}"), "rotated a key", "a raw memory").now());
    let body = json!({"rollout_id": "aws", "input": "rotate the key", "final_output": "done"});
    assert_eq!(app.post_segment(&t.key, "s", "default", body).await.status(), 201);
    close(&app, &t, "s").await;
    let names: Vec<String> =
        files_of(&app.workspace_dir(&t, "default").join("memories")).into_iter().map(|(p, _)| p).collect();
    assert!(names.iter().any(|p| p.contains("rollout_summaries/aws_aws-redacted-aws_access_key")), "{names:?}");
    assert!(!names.iter().any(|p| p.to_lowercase().contains(&lower)), "{names:?}");
}

async fn the_consolidation_agents_reads_are_redacted(backend: Backend) {
    let fake = FakeLlm::start().await;
    fake.set_default(Reply::artifacts("env", "a summary", "a raw memory").now());
    let app = TestApp::start_with(backend, use_model(&fake, "responses")).await;
    let t = app.tenant().await;
    let body =
        json!({"rollout_id": "env", "input": format!("here\npassword = {PASSWORD}\n{OPENAI}"), "final_output": "ok"});
    assert_eq!(app.post_segment(&t.key, "s", "default", body).await.status(), 201);
    fake.push(Reply::artifacts("env", "a summary", "a raw memory").now());
    fake.push(
        Reply::Calls(vec![
            ("read_file", json!({"path": "sessions/env.jsonl"})),
            ("search_files", json!({"pattern": "password", "path": "sessions"})),
        ])
        .now(),
    );
    fake.push(Reply::Text("done").now());
    close(&app, &t, "s").await;
    let turns = fake.phase_two_requests();
    let outputs: Vec<String> = turns[1].body["input"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["type"] == "function_call_output")
        .map(|i| i["output"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(outputs.len(), 2, "{outputs:?}");
    for output in &outputs {
        assert!(!output.contains(PASSWORD) && !output.contains(OPENAI), "a tool gave the model a secret: {output}");
        assert!(output.contains("[REDACTED:"), "{output}");
    }
}

async fn an_imported_workspaces_secrets_are_redacted(backend: Backend) {
    let fake = FakeLlm::start().await;
    fake.set_default(Reply::artifacts("x", "a summary", "a raw memory").now());
    fake.set_agent_default(Reply::Text("nothing to change").now());
    let app = TestApp::start_with(backend, use_model(&fake, "responses")).await;
    let t = app.tenant().await;
    let raw = format!(
        "rollout_id: sdk-1\nupdated_at: 2026-04-15T00:00:00+00:00\nrollout_path: sessions/sdk-1.jsonl\nrollout_summary_file: rollout_summaries/sdk-1_deploy.md\nterminal_state: completed\n\nDeploy key {GITHUB}.\n"
    );
    let summary_md = format!("## User profile\n\nThe user's key is {OPENAI}.\n");
    let archive = tar_gz(&[
        ("sessions/sdk-1.jsonl", format!("{{\"input\":\"my key {AWS}\"}}\n").as_bytes()),
        ("memories/MEMORY.md", format!("# Memory\n\npassword = {PASSWORD}\n").as_bytes()),
        ("memories/memory_summary.md", summary_md.as_bytes()),
        ("memories/raw_memories/sdk-1.md", raw.as_bytes()),
    ]);
    let job = imported(&app, &t, "sdk", archive).await;
    assert_eq!(job["state"], "succeeded", "{job}");
    let base = "/v1/workspaces/sdk/layouts/default";
    for file in ["MEMORY.md", "memory_summary.md", "raw_memories/sdk-1.md"] {
        let text = app
            .request(Method::GET, &format!("{base}/files/{file}"), &t.key)
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        assert!(text.contains("[REDACTED:"), "{file}: {text}");
        for secret in [PASSWORD, OPENAI, GITHUB] {
            assert!(!text.contains(secret), "{file} serves {secret}");
        }
    }
    let instructions = app.json(Method::GET, &format!("{base}/instructions"), &t.key).await;
    assert!(!instructions.to_string().contains(OPENAI), "{instructions}");
    // The rollout keeps its bytes (no at_ingest); the next consolidation's model sees no secret.
    let rollout = app.file_text(&t, "sdk", "sessions/sdk-1.jsonl").await;
    assert!(rollout.contains(AWS));
    let body = json!({"rollout_id": "own", "input": "hello", "final_output": "hi"});
    let res = app.request(Method::POST, "/v1/sessions/n1/layouts/default/segments?workspace=sdk", &t.key).json(&body);
    assert_eq!(res.send().await.unwrap().status(), 201);
    close(&app, &t, "n1").await;
    for request in fake.requests() {
        let sent = request.body.to_string();
        for secret in [PASSWORD, OPENAI, GITHUB] {
            assert!(!sent.contains(secret), "the model was sent {secret}");
        }
    }
}

/// The events of the stream from the first, until a keep-alive pause.
pub(crate) async fn replayed_events(app: &TestApp, t: &Tenant) -> String {
    replayed_stream(app, t).await.0
}

/// CPU time this process (the tests and the app in it) has used, in seconds.
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
    let fields: Vec<&str> = stat.rsplit_once(')').unwrap().1.split_whitespace().collect();
    // utime and stime, the 14th and 15th fields, in clock ticks of 1/100 s.
    (fields[11].parse::<f64>().unwrap() + fields[12].parse::<f64>().unwrap()) / 100.0
}

/// As [`replayed_events`], with the stream still open.
async fn replayed_stream(app: &TestApp, t: &Tenant) -> (String, reqwest::Response) {
    let mut res = app
        .request(Method::GET, "/v1/events", &t.key)
        .header("last-event-id", format!("evt_{:016}_{}", 0, &t.id.replace('-', "")[..12]))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let mut text = String::new();
    while let Ok(Some(chunk)) =
        tokio::time::timeout(std::time::Duration::from_millis(1500), res.chunk()).await.map(|c| c.unwrap())
    {
        text.push_str(&String::from_utf8_lossy(&chunk));
    }
    (text, res)
}

async fn a_forgotten_workspace_leaves_the_outbox(backend: Backend) {
    let app = TestApp::start(backend).await;
    let t = app.tenant().await;
    for (workspace, rollout) in [("alice", "alice-secret-chat"), ("bob", "bob-chat")] {
        let body = json!({"rollout_id": rollout, "input": "hi", "final_output": "ok"});
        let path = format!("/v1/sessions/{workspace}-s/layouts/default/segments?workspace={workspace}");
        assert_eq!(app.request(Method::POST, &path, &t.key).json(&body).send().await.unwrap().status(), 201);
        close(&app, &t, &format!("{workspace}-s")).await;
    }
    let before = replayed_events(&app, &t).await;
    assert!(before.contains("alice-s") && before.contains("bob-s"), "{before}");
    let job: Value =
        app.request(Method::DELETE, "/v1/workspaces/alice", &t.key).send().await.unwrap().json().await.unwrap();
    assert_eq!(app.wait_for_job(&t.key, job["job_id"].as_str().unwrap()).await["state"], "succeeded");
    let after = replayed_events(&app, &t).await;
    assert!(after.contains("bob-s"), "the other workspace's events stay: {after}");
    assert!(after.contains("forget.completed"), "{after}");
    for line in after.lines().filter(|l| l.starts_with("data:")) {
        let event: Value = serde_json::from_str(&line[5..]).unwrap();
        if event["type"] != "forget.completed" {
            assert_ne!(event["data"]["workspace"], "alice", "{line}");
        }
    }
    assert!(!after.contains("alice-s"), "{after}");
    // A stream resumed across the hole waits for the next event, idle.
    let (_, open) = replayed_stream(&app, &t).await;
    let before = cpu_seconds();
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    let used = cpu_seconds() - before;
    assert!(used < 0.3, "{used:.2} s of CPU in 2 s with one idle stream open");
    drop(open);
}

async fn an_imported_sdk_memory_keeps_its_prose_offline(backend: Backend) {
    let app = TestApp::start(backend).await;
    let t = app.tenant().await;
    let raw = "rollout_id: sdk-1\nupdated_at: 2026-04-15T00:00:00+00:00\nrollout_path: sessions/sdk-1.jsonl\nrollout_summary_file: rollout_summaries/sdk-1_ci.md\nterminal_state: completed\n\nThe user's CI runs on GitHub Actions with a pinned runner image.\nBump the cache key whenever the lockfile changes.\n";
    let rollout = b"{\"updated_at\":\"2026-04-15T00:00:00+00:00\",\"input\":[{\"role\":\"user\",\"content\":\"ci\"}],\"terminal_metadata\":{\"terminal_state\":\"completed\"}}\n";
    let archive = tar_gz(&[("sessions/sdk-1.jsonl", rollout), ("memories/raw_memories/sdk-1.md", raw.as_bytes())]);
    assert_eq!(imported(&app, &t, "sdk", archive).await["state"], "succeeded");
    let body = json!({"rollout_id": "own", "input": "hello", "final_output": "hi"});
    let res = app.request(Method::POST, "/v1/sessions/n1/layouts/default/segments?workspace=sdk", &t.key).json(&body);
    assert_eq!(res.send().await.unwrap().status(), 201);
    close(&app, &t, "n1").await;
    let memory = app.file_text(&t, "sdk", "memories/MEMORY.md").await;
    assert!(memory.contains("The user's CI runs on GitHub Actions with a pinned runner image."), "{memory}");
    assert!(memory.contains("Bump the cache key whenever the lockfile changes."), "{memory}");
}
