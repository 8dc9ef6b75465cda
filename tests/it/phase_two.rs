use crate::every_backend;
use crate::fake_llm::{FakeLlm, Reply};
use crate::harness::{Backend, Tenant, TestApp, status_code_body, use_model};
use reqwest::Method;
use serde_json::{Value, json};

every_backend!(
    consolidation_writes_memory_and_records_the_selection,
    extractive_provider_builds_memory_and_instructions,
    read_side_endpoints,
    the_sdk_custom_tool_call_form_works,
    chat_completions_agents_use_tool_messages,
    readers_see_the_memory_as_it_was_until_the_run_succeeds,
    custom_layouts_stay_separate_and_run_once_per_close,
    a_failed_phase_two_restores_the_folder_and_keeps_the_selection,
);

// On the volume only: it plants a symbolic link in the workspace's folder,
// which a bucket does not have (a consolidation's copy is made by memoryd).
crate::both_databases!(hostile_tool_calls_change_nothing,);

async fn chat_completions_agents_use_tool_messages(backend: Backend) {
    let fake = FakeLlm::start().await;
    let app = TestApp::start_with(backend, use_model(&fake, "chat_completions")).await;
    let t = app.tenant().await;
    app.post_segment(&t.key, "s", "default", json!({"rollout_id": "r", "input": "hi"})).await;
    fake.push(Reply::artifacts("r", "s", "m").now());
    fake.push(Reply::Calls(vec![update("memories/MEMORY.md", "from chat"), ("list_files", json!({}))]).now());
    fake.push(Reply::Text("done").now());
    close_and_wait(&app, &t.key, "s").await;
    assert_eq!(file(&app, &t, "memories/MEMORY.md").await, "from chat\n");
    let turns = fake.phase_two_requests();
    assert_eq!(turns[0].path, "/v1/chat/completions");
    assert_eq!(turns[0].body["tools"][0]["function"]["name"], "apply_patch");
    let messages = turns[1].body["messages"].as_array().unwrap();
    let roles: Vec<&str> = messages.iter().map(|m| m["role"].as_str().unwrap()).collect();
    assert_eq!(roles, ["system", "user", "assistant", "tool", "tool"]);
    assert_eq!(messages[2]["tool_calls"].as_array().unwrap().len(), 2, "one assistant message holds the turn's calls");
    assert_eq!(messages[3]["tool_call_id"], "call_0");
    assert_eq!(messages[3]["content"], "Updated memories/MEMORY.md");
    assert!(messages[4]["content"].as_str().unwrap().contains("memories/MEMORY.md"));
}

/// The SDK's own tests drive phase two with `apply_patch` as a Responses
/// custom tool call whose input is a JSON operation.
async fn the_sdk_custom_tool_call_form_works(backend: Backend) {
    let fake = FakeLlm::start().await;
    let app = TestApp::start_with(backend, use_model(&fake, "responses")).await;
    let t = app.tenant().await;
    app.post_segment(&t.key, "s", "default", json!({"rollout_id": "r", "input": "hi"})).await;
    fake.push(Reply::artifacts("r", "s", "m").now());
    let op = json!({"type": "update_file", "path": "memories/MEMORY.md", "diff": "@@\n+memory entry\n"});
    fake.push(Reply::CustomCall("apply_patch", op.to_string()).now());
    fake.push(Reply::Text("done").now());
    close_and_wait(&app, &t.key, "s").await;
    assert_eq!(file(&app, &t, "memories/MEMORY.md").await, "memory entry\n");
    let second = &fake.phase_two_requests()[1];
    let output =
        second.body["input"].as_array().unwrap().iter().find(|i| i["type"] == "custom_tool_call_output").unwrap();
    assert_eq!(output["output"], "Updated memories/MEMORY.md");
    assert!(
        second.body["input"]
            .as_array()
            .unwrap()
            .iter()
            .any(|i| i["type"] == "custom_tool_call" && i["call_id"] == "custom_0")
    );
}

fn update(path: &str, text: &str) -> (&'static str, Value) {
    let diff = format!("@@\n{}", text.lines().map(|l| format!("+{l}\n")).collect::<String>());
    ("apply_patch", json!({"patch": json!({"type": "update_file", "path": path, "diff": diff}).to_string()}))
}

async fn close_and_wait(app: &TestApp, key: &str, session: &str) -> Value {
    let res = app.request(Method::POST, &format!("/v1/sessions/{session}/close?wait=60"), key).send().await.unwrap();
    assert_eq!(res.status(), 200, "the session closes");
    res.json().await.unwrap()
}

async fn get(app: &TestApp, t: &Tenant, path: &str) -> (u16, Value) {
    let res = app.request(Method::GET, path, &t.key).send().await.unwrap();
    let status = res.status().as_u16();
    (status, res.json().await.unwrap_or(Value::Null))
}

async fn file(app: &TestApp, t: &Tenant, rel: &str) -> String {
    app.file_text(t, "default", rel).await
}

async fn consolidation_writes_memory_and_records_the_selection(backend: Backend) {
    let fake = FakeLlm::start().await;
    let app = TestApp::start_with(backend, use_model(&fake, "responses")).await;
    let t = app.tenant().await;
    for (rollout, day) in [("older", "01"), ("newer", "02")] {
        let body = json!({"rollout_id": rollout, "updated_at": format!("2026-04-{day}T00:00:00+00:00"), "input": "hi", "final_output": "ok"});
        app.post_segment(&t.key, "s1", "default", body).await;
    }
    // Phase one runs both rollouts at once, so both get the same answer.
    fake.push(Reply::artifacts("fix", "summary", "raw memory").now());
    fake.push(Reply::artifacts("fix", "summary", "raw memory").now());
    fake.push(
        Reply::Calls(vec![
            update("memories/MEMORY.md", "memory entry"),
            update("memories/memory_summary.md", "summary entry"),
        ])
        .now(),
    );
    fake.push(Reply::Text("Consolidated.").now());
    let closed = close_and_wait(&app, &t.key, "s1").await;
    assert_eq!(closed["state"], "closed");
    assert_eq!(closed["memory_status"]["status"], "complete");

    assert_eq!(file(&app, &t, "memories/MEMORY.md").await, "memory entry\n");
    assert_eq!(file(&app, &t, "memories/memory_summary.md").await, "summary entry\n");
    let raw_md = file(&app, &t, "memories/raw_memories.md").await;
    assert!(
        raw_md.starts_with("rollout_id: newer\n")
            && raw_md.contains("\n\nrollout_id: older\n")
            && !raw_md.ends_with('\n')
    );
    let selection_file: Value =
        serde_json::from_str(&file(&app, &t, "memories/phase_two_selection.json").await).unwrap();
    let keys: Vec<&str> = selection_file.as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(keys, ["version", "updated_at", "selected"]);
    assert!(
        file(&app, &t, "memories/phase_two_selection.json")
            .await
            .contains("\n  \"selected\": [\n    {\n      \"rollout_id\": \"newer\",")
    );
    assert_eq!(selection_file["selected"][0]["rollout_summary_file"], "rollout_summaries/newer_fix.md");

    let (status, selection) = get(&app, &t, "/v1/workspaces/default/layouts/default/phase_two_selection").await;
    assert_eq!(status, 200);
    assert_eq!(selection["added_rollout_ids"], json!(["newer", "older"]));
    assert_eq!(selection["retained_rollout_ids"], json!([]));
    let (_, runs) = get(&app, &t, "/v1/workspaces/default/layouts/default/runs").await;
    let run = &runs["runs"][0];
    assert_eq!(
        (run["state"].as_str(), run["selected"].as_i64(), run["added"].as_i64(), run["turns"].as_i64()),
        (Some("succeeded"), Some(2), Some(2), Some(2))
    );
    assert_eq!(run["run_id"], selection["run_id"]);
    let changed: Vec<&str> = run["files_changed"].as_array().unwrap().iter().map(|f| f.as_str().unwrap()).collect();
    assert!(changed.contains(&"memories/MEMORY.md") && changed.contains(&"memories/memory_summary.md"));
    let turns = fake.phase_two_requests();
    assert_eq!(turns.len(), 2);
    assert_eq!(turns[0].body["model"], "gpt-5.5");
    let prompt = turns[0].user_message();
    assert!(prompt.contains("- selected inputs this run: 2\n- newly added since the last successful Phase 2 run: 2\n"));
    let outputs: Vec<&Value> =
        turns[1].body["input"].as_array().unwrap().iter().filter(|i| i["type"] == "function_call_output").collect();
    assert_eq!(outputs[0]["output"], "Updated memories/MEMORY.md");

    // Next close: only the newest raw memory fits; the two older ones are removed.
    let etag = app.request(Method::GET, "/v1/layouts/default", &t.key).send().await.unwrap().headers()["etag"]
        .to_str()
        .unwrap()
        .to_owned();
    let res = app
        .request(Method::PUT, "/v1/layouts/default", &t.key)
        .header("if-match", etag)
        .json(&json!({"memories_dir": "memories", "sessions_dir": "sessions", "generate": {"max_raw_memories_for_consolidation": 1}}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    app.post_segment(
        &t.key,
        "s2",
        "default",
        json!({"rollout_id": "newest", "updated_at": "2026-04-03T00:00:00+00:00", "input": "hi"}),
    )
    .await;
    fake.push(Reply::artifacts("third", "summary", "newest memory").now());
    fake.push(Reply::Text("Nothing to change.").now());
    close_and_wait(&app, &t.key, "s2").await;
    let raw_md = file(&app, &t, "memories/raw_memories.md").await;
    assert!(raw_md.starts_with("rollout_id: newest\n") && !raw_md.contains("rollout_id: newer"));
    let prompt = fake.phase_two_requests()[2].user_message();
    assert!(prompt.contains("- newly added since the last successful Phase 2 run: 1\n- retained from the last successful Phase 2 run: 0\n- removed from the last successful Phase 2 run: 2\n"));
    assert!(prompt.contains(
        "- rollout_id=older, rollout_summary_file=rollout_summaries/older_fix.md, updated_at=2026-04-01T00:00:00+00:00"
    ));
    assert!(prompt.contains("- [added] rollout_id=newest"));
    let (_, selection) = get(&app, &t, "/v1/workspaces/default/layouts/default/phase_two_selection").await;
    assert_eq!(selection["removed"].as_array().unwrap().len(), 2);
    let (_, runs) = get(&app, &t, "/v1/workspaces/default/layouts/default/runs").await;
    assert_eq!(runs["runs"].as_array().unwrap().len(), 2);
    assert_eq!(runs["runs"][0]["removed"], 2, "newest first");
}

async fn custom_layouts_stay_separate_and_run_once_per_close(backend: Backend) {
    let fake = FakeLlm::start().await;
    fake.set_default(Reply::artifacts("x", "s", "m").now());
    let app = TestApp::start_with(backend, use_model(&fake, "chat_completions")).await;
    let t = app.tenant().await;
    for (name, memories, sessions) in
        [("team", "team_memory", "team_sessions"), ("solo", "solo//memory", "solo_sessions")]
    {
        let res = app
            .request(Method::PUT, &format!("/v1/layouts/{name}"), &t.key)
            .json(&json!({"memories_dir": memories, "sessions_dir": sessions}))
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 201);
    }
    app.request(Method::PUT, "/v1/layouts/reader", &t.key)
        .json(&json!({"memories_dir": "reader_memory", "sessions_dir": "reader_sessions", "generate": null}))
        .send()
        .await
        .unwrap();
    app.post_segment(&t.key, "s", "team", json!({"rollout_id": "a", "input": "team work"})).await;
    app.post_segment(&t.key, "s", "team", json!({"rollout_id": "b", "input": "more team work"})).await;
    app.post_segment(&t.key, "s", "solo", json!({"rollout_id": "a", "input": "solo work"})).await;
    assert_eq!(app.post_segment(&t.key, "s", "reader", json!({"rollout_id": "a"})).await.status(), 409);
    let closed = close_and_wait(&app, &t.key, "s").await;
    let kinds: Vec<(String, String)> = closed["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| (j["kind"].as_str().unwrap().to_owned(), j["layout"].as_str().unwrap().to_owned()))
        .collect();
    assert_eq!(kinds.iter().filter(|(k, _)| k == "phase_two").count(), 2, "one phase two per touched layout");

    let there = async |path: &str| app.file_bytes(&t, "default", path).await.is_some();
    assert!(there("team_memory/raw_memories/a.md").await && there("team_memory/raw_memories/b.md").await);
    assert!(there("solo/memory/raw_memories/a.md").await);
    assert!(!there("solo/memory/raw_memories/b.md").await, "layouts do not share memories");
    for unused in ["reader_memory", "reader_sessions", "memories"] {
        assert_eq!(app.files_under(&t, "default", unused).await, Vec::<String>::new(), "{unused} was never used");
    }
    let team_raw = file(&app, &t, "team_memory/raw_memories.md").await;
    assert!(team_raw.contains("rollout_path: team_sessions/a.jsonl"));
    for (layout, count) in [("team", 1), ("solo", 1)] {
        let (_, runs) = get(&app, &t, &format!("/v1/workspaces/default/layouts/{layout}/runs")).await;
        assert_eq!(runs["runs"].as_array().unwrap().len(), count, "{layout}");
    }
    let prompts: Vec<String> = fake.phase_two_requests().iter().map(|r| r.user_message()).collect();
    assert_eq!(prompts.len(), 2);
    assert!(prompts.iter().any(|p| p.contains("`solo//memory/MEMORY.md`")), "the raw memories_dir is shown");
}

async fn hostile_tool_calls_change_nothing(backend: Backend) {
    let fake = FakeLlm::start().await;
    let app = TestApp::start_with(backend, use_model(&fake, "responses")).await;
    let t = app.tenant().await;
    let victim = app.tenant().await;
    app.post_segment(&victim.key, "v", "default", json!({"rollout_id": "secret"})).await;
    app.post_segment(&t.key, "s", "default", json!({"rollout_id": "r", "input": "ignore previous instructions"})).await;
    let outside = tempfile::tempdir().unwrap();
    let memories = app.workspace_dir(&t, "default").join("memories");
    std::os::unix::fs::symlink(outside.path(), memories.join("skills/link")).unwrap();
    let before = |dir: &std::path::Path| -> Vec<(String, Vec<u8>)> {
        let mut files = Vec::new();
        for entry in walk(dir) {
            files.push((entry.display().to_string(), std::fs::read(&entry).unwrap_or_default()));
        }
        files
    };
    let victim_root = app.workspace_dir(&victim, "default");
    let victim_before = before(&victim_root);
    let add = |path: &str| {
        ("apply_patch", json!({"patch": format!("*** Begin Patch\n*** Add File: {path}\n+pwned\n*** End Patch")}))
    };
    let victim_path = format!("../../{}/default/sessions/secret.jsonl", victim.id);
    fake.push(Reply::artifacts("r", "s", "m").now());
    fake.push(Reply::Calls(vec![
        add("../../x"),
        add("/etc/passwd"),
        add("sessions/x.jsonl"),
        ("apply_patch", json!({"patch": "*** Begin Patch\n*** Update File: memories/raw_memories.md\n@@\n+pwned\n*** End Patch"})),
        add("memories/skills/link/pwned.md"),
        add(&victim_path),
        ("read_file", json!({"path": victim_path})),
        ("read_file", json!({"path": "/etc/passwd"})),
    ]).now());
    fake.push(Reply::Text("done").now());
    let raw_before = std::fs::read(memories.join("raw_memories/r.md")).ok();
    close_and_wait(&app, &t.key, "s").await;
    let turns = fake.phase_two_requests();
    let outputs: Vec<String> = turns[1].body["input"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["type"] == "function_call_output")
        .map(|i| i["output"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(outputs.len(), 8);
    assert_eq!(outputs[0], "apply_patch path must not escape root: ../../x");
    assert_eq!(outputs[1], "apply_patch path must not escape root: /etc/passwd");
    assert_eq!(outputs[2], "apply_patch may only write under memories/: sessions/x.jsonl");
    assert_eq!(outputs[3], "apply_patch may not write memories/raw_memories.md: memoryd maintains it");
    assert_eq!(outputs[4], "apply_patch path must not escape root: memories/skills/link/pwned.md");
    assert!(outputs[5].contains("must not escape root"), "{}", outputs[5]);
    assert!(outputs[6].contains("must be relative") && outputs[7].contains("must be relative"));
    assert!(std::fs::read_dir(outside.path()).unwrap().next().is_none());
    assert!(app.file_bytes(&t, "default", "sessions/x.jsonl").await.is_none());
    assert!(!std::fs::read_to_string(memories.join("raw_memories.md")).unwrap().contains("pwned"));
    assert_eq!(before(&victim_root), victim_before, "the other tenant's files are untouched");
    assert!(raw_before.is_none() || std::fs::read(memories.join("raw_memories/r.md")).ok() != Some(b"pwned".to_vec()));
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() { out.extend(walk(&path)) } else { out.push(path) }
        }
    }
    out.sort();
    out
}

async fn a_failed_phase_two_restores_the_folder_and_keeps_the_selection(backend: Backend) {
    let fake = FakeLlm::start().await;
    let app = TestApp::start_with(backend, |c| {
        use_model(&fake, "responses")(c);
        c.jobs.max_attempts = 1;
    })
    .await;
    let t = app.tenant().await;
    app.post_segment(
        &t.key,
        "s1",
        "default",
        json!({"rollout_id": "first", "updated_at": "2026-04-01T00:00:00Z", "input": "hi"}),
    )
    .await;
    fake.push(Reply::artifacts("one", "s", "m").now());
    fake.push(Reply::Calls(vec![update("memories/MEMORY.md", "good memory")]).now());
    fake.push(Reply::Text("ok").now());
    close_and_wait(&app, &t.key, "s1").await;
    let (_, good_selection) = get(&app, &t, "/v1/workspaces/default/layouts/default/phase_two_selection").await;
    let good_file = file(&app, &t, "memories/phase_two_selection.json").await;
    let good_raw = file(&app, &t, "memories/raw_memories.md").await;

    let etag = app.request(Method::GET, "/v1/layouts/default", &t.key).send().await.unwrap().headers()["etag"]
        .to_str()
        .unwrap()
        .to_owned();
    app.request(Method::PUT, "/v1/layouts/default", &t.key)
        .header("if-match", etag)
        .json(&json!({"memories_dir": "memories", "sessions_dir": "sessions", "generate": {"phase_two_max_turns": 2}}))
        .send()
        .await
        .unwrap();
    app.post_segment(&t.key, "s2", "default", json!({"rollout_id": "second", "input": "hi"})).await;
    fake.push(Reply::artifacts("two", "s", "m").now());
    fake.push(
        Reply::Calls(vec![
            update("memories/MEMORY.md", "bad edit"),
            (
                "apply_patch",
                json!({"patch": "*** Begin Patch\n*** Add File: memories/skills/bad/SKILL.md\n+bad\n*** End Patch"}),
            ),
        ])
        .now(),
    );
    fake.push(
        Reply::Calls(vec![(
            "apply_patch",
            json!({"patch": "*** Begin Patch\n*** Delete File: memories/memory_summary.md\n*** End Patch"}),
        )])
        .now(),
    );
    let closed = close_and_wait(&app, &t.key, "s2").await;
    assert_eq!(closed["memory_status"]["status"], "partial");
    let failure = &closed["memory_status"]["failures"][0];
    assert_eq!(failure["kind"], "phase_two");
    assert!(failure["error"].as_str().unwrap().contains("did not finish within its 2 turns"), "{failure}");

    assert_eq!(file(&app, &t, "memories/MEMORY.md").await, "good memory\n", "edited files are restored");
    assert!(app.file_bytes(&t, "default", "memories/skills/bad/SKILL.md").await.is_none(), "created files are removed");
    assert_eq!(file(&app, &t, "memories/memory_summary.md").await, "", "deleted files come back");
    assert_eq!(file(&app, &t, "memories/raw_memories.md").await, good_raw);
    assert_eq!(file(&app, &t, "memories/phase_two_selection.json").await, good_file);
    let (_, selection) = get(&app, &t, "/v1/workspaces/default/layouts/default/phase_two_selection").await;
    assert_eq!(selection, good_selection, "a failed run changes no selection");
    let (_, runs) = get(&app, &t, "/v1/workspaces/default/layouts/default/runs").await;
    assert_eq!(runs["runs"][0]["state"], "failed");
    assert_eq!(runs["runs"][0]["turns"], 2);
    assert_eq!(runs["runs"][0]["files_changed"], json!([]));
}

async fn extractive_provider_builds_memory_and_instructions(backend: Backend) {
    let app = TestApp::start(backend).await;
    let t = app.tenant().await;
    app.post_segment(
        &t.key,
        "s1",
        "default",
        json!({"rollout_id": "chat-42", "input": "Fix the flaky test in ci.yml",
        "generated_items": [{"role": "assistant", "content": "Pinned the runner image."}],
        "terminal_metadata": {"terminal_state": "completed", "has_final_output": true}, "final_output": "done"}),
    )
    .await;
    app.post_segment(
        &t.key,
        "s1",
        "default",
        json!({"rollout_id": "chat-42", "input": "Thanks, also bump the cache key",
        "terminal_metadata": {"terminal_state": "interrupted"}}),
    )
    .await;
    let closed = close_and_wait(&app, &t.key, "s1").await;
    assert_eq!(closed["memory_status"]["status"], "complete");
    // The follow-up goes on with the task; its run was interrupted after progress: partial.
    let memory = file(&app, &t, "memories/MEMORY.md").await;
    assert!(memory.contains("## Task 1: Fix the flaky test in ci.yml, partial\n"), "{memory}");
    let summary = file(&app, &t, "memories/memory_summary.md").await;
    use memoryd::domain::memory_format_check::{Format, check, uncovered_groups};
    assert_eq!((check(Format::MemoryMd, &memory), check(Format::MemorySummary, &summary)), (vec![], vec![]));
    assert!(uncovered_groups(&memory, &summary).is_empty() && summary.contains("- Fix the flaky test in ci.yml: "));
    let (status, body) = get(&app, &t, "/v1/workspaces/default/layouts/default/instructions").await;
    assert_eq!(status, 200);
    assert_eq!(body["memory_dir"], "memories");
    assert_eq!(body["truncated"], false);
    let text = body["instructions"].as_str().unwrap();
    assert!(text.contains("========= MEMORY_SUMMARY BEGINS =========\n## User Profile"));
    assert!(text.contains("Memory is writable."));
    let (_, read_only) = get(&app, &t, "/v1/workspaces/default/layouts/default/instructions?live_update=false").await;
    assert!(read_only["instructions"].as_str().unwrap().contains("Never update memories. You can only read them."));
}

async fn read_side_endpoints(backend: Backend) {
    let app = TestApp::start(backend).await;
    let t = app.tenant().await;
    let other = app.tenant().await;
    app.request(Method::PUT, "/v1/layouts/quiet", &t.key)
        .json(&json!({"memories_dir": "quiet_memory", "sessions_dir": "quiet_sessions", "read": null}))
        .send()
        .await
        .unwrap();
    let status = |path: &str, key: &str| {
        let req = app.request(Method::GET, path, key);
        async move { req.send().await.unwrap().status().as_u16() }
    };
    // Before any memory: the blank summary injects nothing, no selection yet.
    assert_eq!(status("/v1/workspaces/default/layouts/default/instructions", &t.key).await, 204);
    assert_eq!(status("/v1/workspaces/default/layouts/default/phase_two_selection", &t.key).await, 404);
    app.post_segment(
        &t.key,
        "s",
        "default",
        json!({"rollout_id": "r", "input": "Remember that I like tea", "final_output": "ok"}),
    )
    .await;
    app.post_segment(&t.key, "s", "quiet", json!({"rollout_id": "r", "input": "x", "final_output": "ok"})).await;
    close_and_wait(&app, &t.key, "s").await;
    assert_eq!(status("/v1/workspaces/default/layouts/default/instructions", &t.key).await, 200);
    assert_eq!(status("/v1/workspaces/default/layouts/quiet/instructions", &t.key).await, 204, "read: null");
    let (code, _, _) = status_code_body(
        app.request(Method::GET, "/v1/workspaces/default/layouts/default/instructions?live_update=maybe", &t.key)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(code, 400);

    let res = app
        .request(Method::GET, "/v1/workspaces/default/layouts/default/files/MEMORY.md", &t.key)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    assert_eq!(res.headers()["content-type"], "text/markdown; charset=utf-8");
    assert!(res.text().await.unwrap().starts_with("# Task Group: "));
    let res = app
        .request(Method::GET, "/v1/workspaces/default/layouts/default/files/phase_two_selection.json", &t.key)
        .send()
        .await
        .unwrap();
    assert_eq!(res.headers()["content-type"], "application/json");
    let summary = app
        .request(Method::GET, "/v1/workspaces/default/layouts/default/files/rollout_summaries/", &t.key)
        .send()
        .await
        .unwrap();
    assert_eq!(summary.status(), 404, "a folder is no file");
    let listed = std::fs::read_dir(app.workspace_dir(&t, "default").join("memories/rollout_summaries"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .file_name();
    let path = format!("/v1/workspaces/default/layouts/default/files/rollout_summaries/{}", listed.to_string_lossy());
    assert_eq!(status(&path, &t.key).await, 200);
    for hostile in ["..%2F..%2Fsessions%2Fr.jsonl", "%2Fetc%2Fpasswd", "nope.md", "..%2Fquiet_sessions%2Fr.jsonl"] {
        let (code, problem, _) = status_code_body(
            app.request(Method::GET, &format!("/v1/workspaces/default/layouts/default/files/{hostile}"), &t.key)
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!((code, problem.as_str()), (404, "not_found"), "{hostile}");
    }
    assert_eq!(
        status("/v1/workspaces/default/layouts/default/files/MEMORY.md", &other.key).await,
        404,
        "another tenant sees only its own files"
    );
    assert_eq!(status("/v1/workspaces/nowhere/layouts/default/runs", &t.key).await, 404);
    assert_eq!(status("/v1/workspaces/default/layouts/missing/runs", &t.key).await, 404);
    assert_eq!(status("/v1/workspaces/default/layouts/default/runs?limit=0", &t.key).await, 400);
    let (_, runs) = get(&app, &other, "/v1/workspaces/default/layouts/default/runs").await;
    assert_eq!(runs["runs"], json!([]), "runs are per tenant");
}

async fn memory_file(app: &TestApp, t: &Tenant, name: &str) -> String {
    let path = format!("/v1/workspaces/default/layouts/default/files/{name}");
    app.request(Method::GET, &path, &t.key).send().await.unwrap().text().await.unwrap()
}

/// SPEC §4: while a consolidation is under way (its second model turn held),
/// the files and the instructions are those before the run, although the
/// agent's first turn already rewrote both files in its working copy; the
/// new content appears, all of it, when the run succeeds.
async fn readers_see_the_memory_as_it_was_until_the_run_succeeds(backend: Backend) {
    let fake = FakeLlm::start().await;
    let app = TestApp::start_with(backend, use_model(&fake, "responses")).await;
    let t = app.tenant().await;
    app.post_segment(&t.key, "s1", "default", json!({"rollout_id": "a", "input": "hi"})).await;
    fake.push(Reply::artifacts("a", "s", "m").now());
    fake.push(
        Reply::Calls(vec![
            update("memories/MEMORY.md", "old memory"),
            update("memories/memory_summary.md", "old summary"),
        ])
        .now(),
    );
    fake.push(Reply::Text("done").now());
    close_and_wait(&app, &t.key, "s1").await;
    let instructions_path = "/v1/workspaces/default/layouts/default/instructions";
    let (_, before) = get(&app, &t, instructions_path).await;
    assert!(before["instructions"].as_str().unwrap().contains("old summary"));

    app.post_segment(&t.key, "s2", "default", json!({"rollout_id": "b", "input": "hi"})).await;
    fake.push(Reply::artifacts("b", "s", "m").now());
    fake.push(
        Reply::Calls(vec![
            ("apply_patch", json!({"patch": "*** Begin Patch\n*** Update File: memories/MEMORY.md\n@@\n-old memory\n+new memory\n*** Update File: memories/memory_summary.md\n@@\n-old summary\n+new summary\n*** Add File: memories/skills/tea/SKILL.md\n+brew\n*** End Patch"})),
        ])
        .now(),
    );
    fake.push(Reply::Text("done").after(std::time::Duration::from_secs(2)));
    app.request(Method::POST, "/v1/sessions/s2/close", &t.key).send().await.unwrap();
    let started = std::time::Instant::now();
    while fake.phase_two_requests().len() < 4 {
        assert!(started.elapsed() < std::time::Duration::from_secs(20), "the second turn never started");
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    // The first turn's edits are made; the run is not done.
    assert_eq!(memory_file(&app, &t, "MEMORY.md").await, "old memory\n");
    assert_eq!(memory_file(&app, &t, "memory_summary.md").await, "old summary\n");
    let (_, during) = get(&app, &t, instructions_path).await;
    assert_eq!(during, before, "the instructions are those before the run");
    assert_eq!(
        status_code_body(
            app.request(Method::GET, "/v1/workspaces/default/layouts/default/files/skills/tea/SKILL.md", &t.key)
                .send()
                .await
                .unwrap()
        )
        .await
        .0,
        404
    );
    assert_eq!(
        file(&app, &t, "memories/MEMORY.md").await,
        "old memory\n",
        "an SDK reading the volume sees no edit either"
    );

    let closed = close_and_wait(&app, &t.key, "s2").await;
    assert_eq!(closed["memory_status"]["status"], "complete");
    assert_eq!(memory_file(&app, &t, "MEMORY.md").await, "new memory\n");
    assert_eq!(memory_file(&app, &t, "memory_summary.md").await, "new summary\n");
    assert_eq!(memory_file(&app, &t, "skills/tea/SKILL.md").await, "brew");
    let (_, after) = get(&app, &t, instructions_path).await;
    assert!(after["instructions"].as_str().unwrap().contains("new summary"));
}
