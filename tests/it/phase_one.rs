use crate::every_backend;
use crate::fake_llm::{FakeLlm, Reply};
use crate::harness::{Backend, TestApp, status_code_body, use_model};
use reqwest::Method;
use serde_json::{Value, json};
use std::time::Duration;

every_backend!(
    three_rollouts_over_the_responses_api,
    three_rollouts_over_chat_completions,
    phase_one_prompts_keep_the_seed_behaviours,
    transient_faults_are_retried_until_success,
    a_hostile_retry_after_neither_panics_nor_parks_a_job_for_years,
    a_rollout_holding_non_finite_numbers_is_extracted,
    permanent_faults_fail_the_job_and_retry_revives_it,
    empty_partial_and_unusable_answers,
    extractive_provider_needs_no_model,
);

async fn close(app: &TestApp, key: &str, session: &str) -> Value {
    let res = app.request(Method::POST, &format!("/v1/sessions/{session}/close"), key).send().await.unwrap();
    assert_eq!(res.status(), 202);
    res.json().await.unwrap()
}

async fn three_rollouts(backend: Backend, api: &str) {
    let fake = FakeLlm::start().await;
    fake.set_default(
        Reply::artifacts(
            "fix-ci",
            "Fixed the CI cache.\n\n## Tasks\n- done  \n",
            "---\ndescription: ci\n---\n\n### ci\n- pin keys\n\n",
        )
        .now(),
    );
    let app = TestApp::start_with(backend, use_model(&fake, api)).await;
    let t = app.tenant().await;
    let res = app
        .request(Method::PUT, "/v1/layouts/default", &t.key)
        .json(&json!({"memories_dir": "memories", "sessions_dir": "sessions",
                      "generate": {"phase_one_model": "gpt-test-mini", "phase_one_reasoning_effort": "low"}}))
        .header("if-match", "*")
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200, "the implicit default layout is replaced");
    for rollout in ["chat-1", "chat-2", "chat-3"] {
        let body = json!({"rollout_id": rollout, "updated_at": "2026-04-15T00:00:00+00:00", "input": format!("hello from {rollout}"),
                          "terminal_metadata": {"terminal_state": "completed", "has_final_output": true}, "final_output": "done"});
        assert_eq!(app.post_segment(&t.key, "s1", "default", body).await.status(), 201);
    }
    close(&app, &t.key, "s1").await;
    let jobs = app.settled_jobs(&t.key, "kind=phase_one").await;
    assert_eq!(jobs.len(), 3);
    for job in &jobs {
        assert_eq!(job["state"], "succeeded", "{job}");
        assert_eq!(job["attempts"], 1);
        assert_eq!(job["usage"], json!({"input_tokens": 120, "output_tokens": 30, "calls": 1}));
        assert!(job["finished_at"].is_string());
    }
    for rollout in ["chat-1", "chat-2", "chat-3"] {
        assert_eq!(
            app.file_text(&t, "default", &format!("memories/raw_memories/{rollout}.md")).await,
            format!(
                "rollout_id: {rollout}\nupdated_at: 2026-04-15T00:00:00+00:00\nrollout_path: sessions/{rollout}.jsonl\nrollout_summary_file: rollout_summaries/{rollout}_fix-ci.md\nterminal_state: completed\n\n---\ndescription: ci\n---\n\n### ci\n- pin keys\n"
            )
        );
        assert_eq!(
            app.file_text(&t, "default", &format!("memories/rollout_summaries/{rollout}_fix-ci.md")).await,
            format!(
                "session_id: s1\nupdated_at: 2026-04-15T00:00:00+00:00\nrollout_path: sessions/{rollout}.jsonl\nterminal_state: completed\n\nFixed the CI cache.\n\n## Tasks\n- done\n"
            )
        );
    }
    let requests = fake.phase_one_requests();
    assert_eq!(requests.len(), 3);
    let schema = memoryd::pipeline::phase_one::rollout_extraction_schema();
    for r in &requests {
        assert_eq!(r.body["model"], "gpt-test-mini");
        assert_eq!(r.authorization.as_deref(), Some("Bearer test-model-key"));
        if api == "responses" {
            assert_eq!(r.path, "/v1/responses");
            assert_eq!(r.body["reasoning"], json!({"effort": "low"}));
            assert_eq!(
                r.body["text"]["format"],
                json!({"type": "json_schema", "name": "final_output", "schema": schema, "strict": true})
            );
            assert_eq!(r.body["store"], false);
        } else {
            assert_eq!(r.path, "/v1/chat/completions");
            assert_eq!(r.body["reasoning_effort"], "low");
            assert_eq!(
                r.body["response_format"],
                json!({"type": "json_schema", "json_schema": {"name": "final_output", "schema": schema, "strict": true}})
            );
        }
        assert!(r.user_message().contains("hello from chat-"));
    }
    let metrics = app.client.get(format!("{}/metrics", app.base)).send().await.unwrap().text().await.unwrap();
    assert!(
        metrics.contains(&format!("memoryd_model_calls_total{{phase=\"phase_one\",api=\"{api}\",outcome=\"ok\"}} 3")),
        "{metrics}"
    );
    assert!(metrics.contains("memoryd_model_input_tokens_total{phase=\"phase_one\"} 360"));
    assert!(metrics.contains("memoryd_model_output_tokens_total{phase=\"phase_one\"} 90"));
    assert!(metrics.contains("memoryd_model_call_duration_seconds_bucket"));
}

async fn three_rollouts_over_the_responses_api(backend: Backend) {
    three_rollouts(backend, "responses").await
}

async fn three_rollouts_over_chat_completions(backend: Backend) {
    three_rollouts(backend, "chat_completions").await
}

async fn phase_one_prompts_keep_the_seed_behaviours(backend: Backend) {
    let fake = FakeLlm::start().await;
    fake.set_default(Reply::artifacts("x", "s", "m").now());
    let app = TestApp::start_with(backend, use_model(&fake, "responses")).await;
    let t = app.tenant().await;
    app.request(Method::PUT, "/v1/layouts/guided", &t.key)
        .json(&json!({"memories_dir": "guided_memory", "sessions_dir": "guided_sessions",
                      "generate": {"extra_prompt": "Track which editor the user prefers."}}))
        .send()
        .await
        .unwrap();
    let noisy = json!({"rollout_id": "noisy",
        "input": [{"role": "developer", "content": "DEV-ONLY-NOTE"}, {"role": "system", "content": "SYSTEM-ONLY-NOTE"},
                  {"role": "user", "content": "visible request"}, {"type": "reasoning", "summary": [{"type": "summary_text", "text": "HIDDEN-REASONING"}]},
                  {"type": "compaction", "summary": "HIDDEN-COMPACTION", "encrypted_content": "e"}],
        "generated_items": [{"type": "reasoning", "summary": [{"type": "summary_text", "text": "HIDDEN-REASONING-2"}]}],
        "final_output": "ok"});
    app.post_segment(&t.key, "s", "default", noisy).await;
    let huge = format!("start{}middle{}end", "a".repeat(700_000), "z".repeat(700_000));
    app.post_segment(&t.key, "s", "default", json!({"rollout_id": "huge", "input": huge, "final_output": "ok"})).await;
    app.post_segment(&t.key, "s", "default", json!({"rollout_id": "twice", "input": "first", "final_output": "ok"}))
        .await;
    app.post_segment(
        &t.key,
        "s",
        "default",
        json!({"rollout_id": "twice", "input": "second",
        "interruptions": [{"type": "function_call", "call_id": "c", "name": "deploy", "arguments": "{}"}],
        "terminal_metadata": {"terminal_state": "interrupted"}}),
    )
    .await;
    app.post_segment(&t.key, "s", "guided", json!({"rollout_id": "guided", "input": "hi", "final_output": "ok"})).await;
    close(&app, &t.key, "s").await;
    app.settled_jobs(&t.key, "kind=phase_one").await;
    let requests = fake.phase_one_requests();
    assert_eq!(requests.len(), 4);
    let find = |needle: &str| {
        requests.iter().find(|r| r.user_message().contains(needle)).unwrap_or_else(|| panic!("{needle}")).clone()
    };

    let noisy = find("visible request").user_message();
    for hidden in ["DEV-ONLY-NOTE", "SYSTEM-ONLY-NOTE", "HIDDEN-REASONING", "HIDDEN-COMPACTION"] {
        assert!(!noisy.contains(hidden), "{hidden} reached the prompt");
    }
    let huge = find("tokens truncated").user_message();
    assert!(huge.contains("rollout content omitted"));
    assert!(huge.contains("Do not assume the rendered rollout below is complete"));
    assert!(huge.contains("startaaa") && huge.contains("zzzend"));
    assert!(!huge.contains("middle"));
    let twice = find("\"segment_count\":2").user_message();
    assert!(twice.contains("\"terminal_state\":\"interrupted\""));
    assert!(!find("visible request").instructions().contains("DEVELOPER-SPECIFIC EXTRA GUIDANCE"));
    let guided = requests
        .iter()
        .find(|r| r.user_message().contains("guided_sessions") || r.instructions().contains("editor"))
        .unwrap();
    assert!(guided.instructions().contains("DEVELOPER-SPECIFIC EXTRA GUIDANCE"));
    assert!(guided.instructions().contains("Track which editor the user prefers."));
}

async fn transient_faults_are_retried_until_success(backend: Backend) {
    let fake = FakeLlm::start().await;
    fake.push(Reply::Status { status: 429, code: None, retry_after: Some("1") }.now());
    fake.push(Reply::status(500).now());
    fake.set_default(Reply::artifacts("ok", "s", "m").now());
    let app = TestApp::start_with(backend, |c| {
        use_model(&fake, "responses")(c);
        c.jobs.max_attempts = 5;
    })
    .await;
    let t = app.tenant().await;
    app.post_segment(&t.key, "s", "default", json!({"rollout_id": "r", "input": "hi", "final_output": "ok"})).await;
    let started = std::time::Instant::now();
    close(&app, &t.key, "s").await;
    let jobs = app.settled_jobs(&t.key, "kind=phase_one").await;
    assert_eq!(jobs[0]["state"], "succeeded");
    assert_eq!(jobs[0]["attempts"], 3);
    assert!(started.elapsed() >= Duration::from_secs(1), "Retry-After was honoured");
    assert_eq!(fake.phase_one_requests().len(), 3);
}

async fn a_hostile_retry_after_neither_panics_nor_parks_a_job_for_years(backend: Backend) {
    let fake = FakeLlm::start().await;
    // A negative wait is ignored (the job's own backoff applies); a huge one is capped at an hour.
    fake.push(Reply::Status { status: 429, code: None, retry_after: Some("-5") }.now());
    fake.push(Reply::Status { status: 429, code: None, retry_after: Some("1e20") }.now());
    fake.set_default(Reply::artifacts("ok", "s", "m").now());
    let app = TestApp::start_with(backend, |c| {
        use_model(&fake, "responses")(c);
        c.jobs.max_attempts = 5;
    })
    .await;
    let t = app.tenant().await;
    app.post_segment(&t.key, "s", "default", json!({"rollout_id": "r", "input": "hi", "final_output": "ok"})).await;
    close(&app, &t.key, "s").await;
    let started = std::time::Instant::now();
    let job = loop {
        let jobs = app.json(Method::GET, "/v1/jobs?kind=phase_one", &t.key).await;
        let job = jobs["jobs"][0].clone();
        if job["attempts"] == 2 && job["state"] == "queued" {
            break job;
        }
        assert!(started.elapsed() < Duration::from_secs(20), "the second attempt never came back: {job}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let run_after = chrono::DateTime::parse_from_rfc3339(job["run_after"].as_str().unwrap()).unwrap();
    let wait = run_after.with_timezone(&chrono::Utc) - chrono::Utc::now();
    assert!(wait > chrono::Duration::minutes(55) && wait <= chrono::Duration::minutes(61), "{wait} {job}");
    assert_eq!(fake.phase_one_requests().len(), 2);
    // The worker that read the header is alive: another job runs at once.
    app.post_segment(&t.key, "s2", "default", json!({"rollout_id": "r2", "input": "hi", "final_output": "ok"})).await;
    let closed = app.json(Method::POST, "/v1/sessions/s2/close?wait=30", &t.key).await;
    assert_eq!(
        (&closed["state"], &closed["memory_status"]["status"]),
        (&json!("closed"), &json!("complete")),
        "{closed}"
    );
}

async fn a_rollout_holding_non_finite_numbers_is_extracted(backend: Backend) {
    let fake = FakeLlm::start().await;
    fake.set_default(Reply::artifacts("huge", "s", "m").now());
    let app = TestApp::start_with(backend, use_model(&fake, "responses")).await;
    let t = app.tenant().await;
    // 1e400 is a float Python holds as inf and writes as Infinity (R-SEG-7).
    let body = r#"{"rollout_id": "inf", "input": "hi", "generated_items": [{"role": "assistant", "content": "x", "score": -1e400}], "final_output": 1e400}"#;
    let res = app
        .request(Method::POST, "/v1/sessions/s/layouts/default/segments", &t.key)
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 201);
    let line = app.file_text(&t, "default", "sessions/inf.jsonl").await;
    assert!(line.contains("\"final_output\":Infinity") && line.contains("-Infinity"), "{line}");
    let closed = app.json(Method::POST, "/v1/sessions/s/close?wait=30", &t.key).await;
    assert_eq!(closed["memory_status"]["status"], "complete", "{closed}");
    let sent = fake.phase_one_requests()[0].user_message();
    assert!(sent.contains("Infinity"), "the model reads the rollout as written");
    assert!(app.file_bytes(&t, "default", "memories/rollout_summaries/inf_huge.md").await.is_some());
}

async fn permanent_faults_fail_the_job_and_retry_revives_it(backend: Backend) {
    let fake = FakeLlm::start().await;
    for _ in 0..3 {
        fake.push(Reply::status(400).now());
    }
    fake.set_default(Reply::artifacts("healed", "s", "m").now());
    let app = TestApp::start_with(backend, use_model(&fake, "chat_completions")).await;
    let t = app.tenant().await;
    app.post_segment(&t.key, "s", "default", json!({"rollout_id": "r", "input": "hi", "final_output": "ok"})).await;
    close(&app, &t.key, "s").await;
    let jobs = app.settled_jobs(&t.key, "kind=phase_one").await;
    let job = &jobs[0];
    assert_eq!(job["state"], "failed");
    assert_eq!(job["attempts"], 3, "MEMORYD_MAX_ATTEMPTS");
    assert!(job["last_error"].as_str().unwrap().contains("400"), "{job}");
    let id = job["job_id"].as_str().unwrap();
    let detail = app.json(Method::GET, &format!("/v1/jobs/{id}"), &t.key).await;
    assert_eq!(detail["state"], "failed");

    let other = app.tenant().await;
    assert_eq!(
        app.request(Method::POST, &format!("/v1/jobs/{id}/retry"), &other.key).send().await.unwrap().status(),
        404
    );
    let res = app.request(Method::POST, &format!("/v1/jobs/{id}/retry"), &t.key).send().await.unwrap();
    assert_eq!(res.status(), 200);
    let jobs = app.settled_jobs(&t.key, "kind=phase_one").await;
    assert_eq!(jobs[0]["state"], "succeeded");
    assert_eq!(jobs[0]["attempts"], 1);
    assert!(app.file_bytes(&t, "default", "memories/rollout_summaries/r_healed.md").await.is_some());
    let (status, code, _) =
        status_code_body(app.request(Method::POST, &format!("/v1/jobs/{id}/retry"), &t.key).send().await.unwrap())
            .await;
    assert_eq!((status, code.as_str()), (409, "job_not_failed"));
}

async fn empty_partial_and_unusable_answers(backend: Backend) {
    let fake = FakeLlm::start().await;
    let app = TestApp::start_with(backend, use_model(&fake, "responses")).await;
    let t = app.tenant().await;

    fake.push(Reply::artifacts(" ", "", "\n").now());
    app.post_segment(&t.key, "a", "default", json!({"rollout_id": "empty", "input": "hi"})).await;
    close(&app, &t.key, "a").await;
    let jobs = app.settled_jobs(&t.key, "session_id=a&kind=phase_one").await;
    assert_eq!(jobs[0]["state"], "skipped");
    assert!(app.file_bytes(&t, "default", "memories/raw_memories/empty.md").await.is_none());

    for bad in [
        Reply::artifacts("slug", "", "m"),
        Reply::artifacts("Not A Slug", "s", "m"),
        Reply::Output(json!({"unexpected": 1})),
    ] {
        fake.push(bad.now());
    }
    fake.set_default(Reply::artifacts("first-slug", "s1", "m1").now());
    app.post_segment(&t.key, "b", "default", json!({"rollout_id": "r", "input": "hi"})).await;
    close(&app, &t.key, "b").await;
    let jobs = app.settled_jobs(&t.key, "session_id=b&kind=phase_one").await;
    assert_eq!(jobs[0]["state"], "failed");
    assert!(jobs[0]["last_error"].as_str().unwrap().contains("not the phase-one schema"), "{}", jobs[0]);

    // A later session re-extracts the whole rollout; a new slug replaces the old summary.
    app.post_segment(&t.key, "c", "default", json!({"rollout_id": "r", "input": "again"})).await;
    close(&app, &t.key, "c").await;
    app.settled_jobs(&t.key, "session_id=c&kind=phase_one").await;
    let summary = |slug: &str| format!("memories/rollout_summaries/r_{slug}.md");
    assert!(app.file_bytes(&t, "default", &summary("first-slug")).await.is_some());
    fake.set_default(Reply::artifacts("second-slug", "s2", "m2").now());
    app.post_segment(&t.key, "d", "default", json!({"rollout_id": "r", "input": "third"})).await;
    close(&app, &t.key, "d").await;
    app.settled_jobs(&t.key, "session_id=d&kind=phase_one").await;
    assert!(app.file_bytes(&t, "default", &summary("second-slug")).await.is_some());
    let first = app.file_bytes(&t, "default", &summary("first-slug")).await;
    assert!(first.is_none(), "the summary under the old slug is removed");
    let raw = app.file_text(&t, "default", "memories/raw_memories/r.md").await;
    assert!(raw.contains("rollout_summary_file: rollout_summaries/r_second-slug.md"));
    let last = fake.phase_one_requests().last().unwrap().user_message();
    assert!(last.contains("\"segment_count\":3"), "all segments from all sessions are extracted");
}

async fn extractive_provider_needs_no_model(backend: Backend) {
    let app = TestApp::start(backend).await;
    let t = app.tenant().await;
    app.post_segment(
        &t.key,
        "s",
        "default",
        json!({"rollout_id": "chat-42", "updated_at": "2026-04-15T12:00:00+00:00",
        "input": "Fix the flaky test in ci.yml", "final_output": "Pinned the runner image."}),
    )
    .await;
    close(&app, &t.key, "s").await;
    let jobs = app.settled_jobs(&t.key, "kind=phase_one").await;
    assert_eq!(jobs[0]["state"], "succeeded");
    let raw = app.file_text(&t, "default", "memories/raw_memories/chat-42.md").await;
    assert!(raw.starts_with("rollout_id: chat-42\nupdated_at: 2026-04-15T12:00:00+00:00\nrollout_path: sessions/chat-42.jsonl\nrollout_summary_file: rollout_summaries/chat-42_fix-the-flaky-test-in-ci.md\nterminal_state: completed\n\n---\n"));
    assert!(raw.contains("final answer: \"Pinned the runner image.\""), "{raw}");
    use memoryd::domain::memory_format_check::{Format, check};
    assert_eq!(check(Format::RawMemory, &raw), [], "{raw}");
    let summary = app.file_text(&t, "default", "memories/rollout_summaries/chat-42_fix-the-flaky-test-in-ci.md").await;
    assert_eq!(check(Format::RolloutSummary, &summary), [], "{summary}");
    assert!(summary.contains("## Task 1: Fix the flaky test in ci.yml\n\nOutcome: success\n"), "{summary}");
}
