use crate::every_backend;
use crate::fake_llm::{FakeLlm, Reply};
use crate::harness::{Backend, TestApp};
use chrono::Utc;
use memoryd::store::{ClaimRequest, JobFinish, JobKind, JobOutcome, PublishDecision};
use reqwest::Method;
use serde_json::{Value, json};
use std::time::Duration;

every_backend!(
    a_worker_that_lost_its_lease_cannot_record_its_result,
    finishes_recorded_together_keep_each_ones_fence,
    a_batch_of_finishes_records_each_as_alone,
    equal_turns_go_to_the_tenant_served_longest_ago,
    one_tenants_backlog_does_not_starve_another,
    a_claim_takes_jobs_in_turn_order_across_tenants,
    the_database_orders_raw_memories_like_the_selection_rule,
);

/// The SQL `ORDER BY … LIMIT` of phase two's selection agrees with the pure
/// rule (instants, unknown last, ties by rollout id descending, byte order).
async fn the_database_orders_raw_memories_like_the_selection_rule(backend: Backend) {
    use memoryd::domain::ids::{LayoutName, RolloutId, WorkspaceName};
    use memoryd::pipeline::selection::{SelectionItem, order_newest_first};
    use memoryd::store::RawMemoryRecord;
    let app = TestApp::start_with(backend, |c| c.no_workers = true).await;
    let t = app.tenant().await;
    let tenant = uuid::Uuid::parse_str(&t.id).unwrap();
    let cases = [
        ("a", "2026-01-01T00:00:00+00:00"),
        ("b", "2026-01-01T00:00:00Z"),
        ("B", "2026-01-01T00:00:00Z"),
        ("c", "unknown"),
        ("d", "2026-02-01T00:00:00+00:00"),
        ("e", "2026-01-01T10:00:00+02:00"),
        ("f", "2026-01-01T09:00:00+00:00"),
        ("g", ""),
        ("h", "2026-01-01T00:00:00.5Z"),
    ];
    let records: Vec<RawMemoryRecord> = cases
        .iter()
        .map(|(id, at)| RawMemoryRecord {
            rollout_id: RolloutId::parse(id).unwrap(),
            updated_at: (*at).into(),
            rollout_path: format!("sessions/{id}.jsonl"),
            rollout_summary_file: format!("rollout_summaries/{id}_s.md"),
            terminal_state: "completed".into(),
            extracted_len: 1,
        })
        .collect();
    let store = &app.server.as_ref().unwrap().state.store;
    let (ws, layout) = (WorkspaceName::default_workspace(), LayoutName::default_layout());
    store.import_raw_memories(tenant, &ws, &layout, &records).await.unwrap();
    let mut expected: Vec<SelectionItem> = records
        .iter()
        .map(|r| SelectionItem {
            rollout_id: r.rollout_id.as_str().into(),
            updated_at: r.updated_at.clone(),
            rollout_path: r.rollout_path.clone(),
            rollout_summary_file: r.rollout_summary_file.clone(),
            terminal_state: r.terminal_state.clone(),
            usage_count: 0,
            last_usage: None,
        })
        .collect();
    order_newest_first(&mut expected);
    let expected: Vec<String> = expected.into_iter().map(|i| i.rollout_id).collect();
    for limit in [cases.len(), 4] {
        let got: Vec<String> = store
            .newest_raw_memories(tenant, &ws, &layout, limit)
            .await
            .unwrap()
            .into_iter()
            .map(|r| r.rollout_id.as_str().to_owned())
            .collect();
        assert_eq!(got, expected[..limit], "limit {limit}");
    }
}

async fn a_worker_that_lost_its_lease_cannot_record_its_result(backend: Backend) {
    let app = TestApp::start_with(backend, |c| c.no_workers = true).await;
    let t = app.tenant().await;
    app.post_segment(&t.key, "s", "default", json!({"rollout_id": "r", "input": "hi"})).await;
    app.request(Method::POST, "/v1/sessions/s/close", &t.key).send().await.unwrap();
    let store = &app.server.as_ref().unwrap().state.store;
    let claim = |worker, now, lease_secs| ClaimRequest {
        worker,
        kinds: &[JobKind::PhaseOne],
        now,
        lease: chrono::Duration::seconds(lease_secs),
    };

    let stale = store.claim_job(&claim("a", Utc::now(), 1)).await.unwrap().expect("a queued job");
    assert_eq!(stale.job.attempts, 1);
    assert!(store.claim_job(&claim("b", Utc::now(), 60)).await.unwrap().is_none(), "a live lease is not taken");
    let owner = store
        .claim_job(&claim("b", Utc::now() + chrono::Duration::seconds(5), 60))
        .await
        .unwrap()
        .expect("an expired lease is taken over");
    assert_eq!(owner.job.job_id, stale.job.job_id);
    assert_ne!(owner.token, stale.token);
    assert_eq!(owner.job.attempts, 2);

    assert!(!store.renew_lease(stale.job.job_id, stale.token, Utc::now()).await.unwrap());
    let (stale_publish, owner_publish) = (uuid::Uuid::new_v4(), uuid::Uuid::new_v4());
    let stale_finish =
        JobFinish { outcome: JobOutcome::Succeeded { raw_memory: None }, publish_id: Some(stale_publish), ..skipped() };
    assert!(!store.finish_job(&stale, &stale_finish).await.unwrap(), "the stale result is refused");
    let decide = |publish| store.publish_decision(owner.job.job_id, publish, Utc::now());
    assert_eq!(decide(stale_publish).await.unwrap(), PublishDecision::Pending, "the live owner may still commit");

    assert!(
        store.renew_lease(owner.job.job_id, owner.token, Utc::now() + chrono::Duration::seconds(60)).await.unwrap()
    );
    let finish = JobFinish { publish_id: Some(owner_publish), ..skipped() };
    assert!(store.finish_job(&owner, &finish).await.unwrap());
    assert_eq!(decide(owner_publish).await.unwrap(), PublishDecision::Committed);
    assert_eq!(decide(stale_publish).await.unwrap(), PublishDecision::Abandoned, "and its files are never shown");
    let job = app.json(Method::GET, &format!("/v1/jobs/{}", owner.job.job_id), &t.key).await;
    assert_eq!((job["state"].as_str(), job["attempts"].as_i64()), (Some("skipped"), Some(2)));
}

/// Queues `rollouts` phase-one jobs for the tenant: one session "s" of that
/// many one-segment rollouts, closed.
async fn queue_phase_ones(app: &TestApp, key: &str, rollouts: usize) {
    for i in 0..rollouts {
        app.post_segment(key, "s", "default", json!({"rollout_id": format!("r{i}"), "input": "hi"})).await;
    }
    app.request(Method::POST, "/v1/sessions/s/close", key).send().await.unwrap();
}

/// A phase-one claim of worker "w", leased for a minute, as of now.
fn phase_one_claim() -> ClaimRequest<'static> {
    ClaimRequest { worker: "w", kinds: &[JobKind::PhaseOne], now: Utc::now(), lease: chrono::Duration::seconds(60) }
}

fn skipped() -> JobFinish {
    JobFinish {
        outcome: JobOutcome::Skipped,
        phase_two: None,
        usage: Default::default(),
        publish_id: None,
        redactions: Default::default(),
        accounting: Default::default(),
        import: None,
        passages: None,
        versions: None,
    }
}

/// A group commit records each finish as a finish of its own would: a
/// stale worker's result is refused while the others in its transaction are
/// kept; and the engine's recorder gives each waiting worker its own answer.
async fn finishes_recorded_together_keep_each_ones_fence(backend: Backend) {
    let app = TestApp::start_with(backend, |c| c.no_workers = true).await;
    let t = app.tenant().await;
    queue_phase_ones(&app, &t.key, 5).await;
    let store = &app.server.as_ref().unwrap().state.store;
    let claim = |now, lease_secs| ClaimRequest {
        worker: "w",
        kinds: &[JobKind::PhaseOne],
        now,
        lease: chrono::Duration::seconds(lease_secs),
    };
    let claimed = store.claim_jobs(&claim(Utc::now(), 60), 3).await.unwrap();
    assert_eq!(claimed.len(), 3);
    // The second job's lease runs out and another worker takes it over.
    let expired = Utc::now() - chrono::Duration::seconds(1);
    assert!(store.renew_lease(claimed[1].job.job_id, claimed[1].token, expired).await.unwrap());
    let taken = store.claim_jobs(&claim(Utc::now(), 60), 3).await.unwrap();
    assert!(taken.iter().any(|j| j.job.job_id == claimed[1].job.job_id), "the expired lease is taken over");
    let finishes = [skipped(), skipped(), skipped()];
    let batch: Vec<_> = claimed.iter().zip(&finishes).collect();
    assert_eq!(store.finish_jobs(&batch).await.unwrap(), [true, false, true]);
    let state = |id: uuid::Uuid| {
        let app = &app;
        let key = t.key.clone();
        async move { app.json(Method::GET, &format!("/v1/jobs/{id}"), &key).await["state"].as_str().unwrap().to_owned() }
    };
    assert_eq!(state(claimed[0].job.job_id).await, "skipped");
    assert_eq!(state(claimed[1].job.job_id).await, "running", "the new owner's attempt goes on");
    assert_eq!(state(claimed[2].job.job_id).await, "skipped");

    // Through the recorder: finishes sent at once are answered one by one;
    // the first job's finish, already recorded, is refused.
    let recorder = memoryd::jobs::Finisher::start(store.clone());
    let done = claimed[0].job.job_id;
    let mut owned = taken;
    owned.push(claimed[0].clone());
    let answers = futures_util::future::join_all(owned.iter().map(|job| recorder.finish(job, skipped()))).await;
    let answers: Vec<bool> = answers.into_iter().map(|a| a.unwrap().owned).collect();
    let expected: Vec<bool> = owned.iter().map(|j| j.job.job_id != done).collect();
    assert_eq!(answers, expected);
    for job in owned.iter().filter(|j| j.job.job_id != done) {
        assert_eq!(state(job.job.job_id).await, "skipped");
    }
}

/// A batch of finishes of several tenants — phase ones written together,
/// one with a retry, one failed (recorded on its own) — leaves each job, raw
/// memory, counter and event as finishing one at a time would.
async fn a_batch_of_finishes_records_each_as_alone(backend: Backend) {
    use memoryd::domain::ids::{LayoutName, RolloutId, WorkspaceName};
    use memoryd::store::{JobAccounting, RawMemoryRecord};
    let app = TestApp::start_with(backend, |c| c.no_workers = true).await;
    let (a, b) = (app.tenant().await, app.tenant().await);
    queue_phase_ones(&app, &a.key, 2).await;
    queue_phase_ones(&app, &b.key, 2).await;
    let usage_of = |key: String| {
        let app = &app;
        async move {
            let usage = app.json(Method::GET, "/v1/usage", &key).await;
            (usage["days"].as_array().unwrap().last().unwrap().clone(), usage["storage_bytes"].as_i64().unwrap())
        }
    };
    let (a_before, b_before) = (usage_of(a.key.clone()).await, usage_of(b.key.clone()).await);
    let store = &app.server.as_ref().unwrap().state.store;
    let claimed = store.claim_jobs(&phase_one_claim(), 4).await.unwrap();
    assert_eq!(claimed.len(), 4);
    let (tenant_a, tenant_b) = (uuid::Uuid::parse_str(&a.id).unwrap(), uuid::Uuid::parse_str(&b.id).unwrap());
    let raw = |rollout: &str| RawMemoryRecord {
        rollout_id: RolloutId::parse(rollout).unwrap(),
        updated_at: "2026-12-01T00:00:00Z".into(),
        rollout_path: format!("sessions/s/{rollout}.jsonl"),
        rollout_summary_file: format!("rollout_summaries/{rollout}_batch.md"),
        terminal_state: "completed".into(),
        extracted_len: 42,
    };
    let used = |input, output| memoryd::llm::TokenUsage { input_tokens: input, output_tokens: output, calls: 1 };
    let finish_of = |job: &memoryd::store::ClaimedJob| {
        let rollout = job.job.rollout_id.as_ref().unwrap().as_str().to_owned();
        match (job.tenant_id == tenant_a, rollout.as_str()) {
            (true, "r0") => JobFinish {
                outcome: JobOutcome::Succeeded { raw_memory: Some(raw("r0")) },
                usage: used(7, 3),
                accounting: JobAccounting { attempt_usage: used(7, 3), storage_delta: 100, model_tokens_per_day: None },
                ..skipped()
            },
            (true, _) => JobFinish {
                outcome: JobOutcome::RetryAt {
                    at: Utc::now() + chrono::Duration::hours(1),
                    error: "try later".into(),
                    token_limit: Some(5),
                },
                ..skipped()
            },
            (false, "r0") => JobFinish { outcome: JobOutcome::Failed { error: "broken".into() }, ..skipped() },
            (false, _) => JobFinish {
                outcome: JobOutcome::Succeeded { raw_memory: Some(raw("r1")) },
                accounting: JobAccounting { attempt_usage: used(2, 1), storage_delta: 50, model_tokens_per_day: None },
                ..skipped()
            },
        }
    };
    let finishes: Vec<JobFinish> = claimed.iter().map(finish_of).collect();
    let batch: Vec<_> = claimed.iter().zip(&finishes).collect();
    assert_eq!(store.finish_jobs(&batch).await.unwrap(), [true; 4]);

    for job in &claimed {
        let key = if job.tenant_id == tenant_a { &a.key } else { &b.key };
        let view = app.json(Method::GET, &format!("/v1/jobs/{}", job.job.job_id), key).await;
        let rollout = job.job.rollout_id.as_ref().unwrap().as_str();
        let expected = match (job.tenant_id == tenant_a, rollout) {
            (true, "r0") | (false, "r1") => ("succeeded", Value::Null),
            (true, _) => ("queued", json!("try later")),
            (false, _) => ("failed", json!("broken")),
        };
        assert_eq!((view["state"].as_str().unwrap(), view["last_error"].clone()), expected, "{view}");
    }
    let (ws, layout) = (WorkspaceName::default_workspace(), LayoutName::default_layout());
    let indexed = |tenant, rollout: &str| {
        let rollout = RolloutId::parse(rollout).unwrap();
        let (ws, layout) = (ws.clone(), layout.clone());
        async move { store.raw_memory(tenant, &ws, &layout, &rollout).await.unwrap() }
    };
    assert_eq!(indexed(tenant_a, "r0").await, Some(raw("r0")));
    assert_eq!(indexed(tenant_a, "r1").await, None, "a retry indexes nothing");
    assert_eq!(indexed(tenant_b, "r0").await, None, "a failure indexes nothing");
    assert_eq!(indexed(tenant_b, "r1").await, Some(raw("r1")));

    let (a_after, b_after) = (usage_of(a.key.clone()).await, usage_of(b.key.clone()).await);
    assert_eq!(a_after.1 - a_before.1, 100, "A's storage");
    assert_eq!(b_after.1 - b_before.1, 50, "B's storage");
    let tokens =
        |day: &Value| (day["model_calls"].as_i64(), day["input_tokens"].as_i64(), day["output_tokens"].as_i64());
    assert_eq!(tokens(&a_after.0), (Some(1), Some(7), Some(3)), "{}", a_after.0);
    assert_eq!(tokens(&b_after.0), (Some(1), Some(2), Some(1)), "{}", b_after.0);
    assert_eq!(a_after.0["by_kind"]["phase_one"]["input_tokens"], 7, "{}", a_after.0);
    let failed = store.events_after(tenant_b, 0, 100).await.unwrap();
    let failed: Vec<_> = failed.iter().filter(|e| e.event_type == "job.failed").collect();
    assert_eq!(failed.len(), 1, "B's failure is an event: {failed:?}");
    let of_a = store.events_after(tenant_a, 0, 100).await.unwrap();
    assert!(of_a.iter().all(|e| e.event_type != "job.failed"), "{of_a:?}");
}

/// Among tenants with nothing running, the one served longest ago goes
/// first, one never served before all: a tenant that closes a session
/// during others' backlogs is not queued behind their older jobs.
async fn equal_turns_go_to_the_tenant_served_longest_ago(backend: Backend) {
    let app = TestApp::start_with(backend, |c| c.no_workers = true).await;
    let (a, b) = (app.tenant().await, app.tenant().await);
    for tenant in [&a, &b] {
        queue_phase_ones(&app, &tenant.key, 3).await;
    }
    let store = &app.server.as_ref().unwrap().state.store;
    let request = phase_one_claim();
    let next_tenant = async |request: &ClaimRequest<'_>| {
        let job = store.claim_job(request).await.unwrap().expect("a queued job");
        assert!(store.finish_job(&job, &skipped()).await.unwrap());
        job.tenant_id.to_string()
    };
    assert_eq!(next_tenant(&request).await, a.id, "the oldest job first");
    let later = ClaimRequest { now: Utc::now(), ..request };
    assert_eq!(next_tenant(&later).await, b.id, "b, never served, before a's older second job");
    // A third tenant arrives with one job, newer than every queued one.
    let c = app.tenant().await;
    queue_phase_ones(&app, &c.key, 1).await;
    let latest = ClaimRequest { now: Utc::now(), ..request };
    assert_eq!(next_tenant(&latest).await, c.id, "the newcomer goes first");
    let last = ClaimRequest { now: Utc::now(), ..request };
    assert_eq!(next_tenant(&last).await, a.id, "then the tenant served longest ago");
}

/// A tenant's n-th queued job takes turn (its running jobs + n); a claim of
/// several takes the smallest turns, ties to the older job. The first batch
/// is all first turns; the second needs tenants' second and third jobs too.
async fn a_claim_takes_jobs_in_turn_order_across_tenants(backend: Backend) {
    let app = TestApp::start_with(backend, |c| c.no_workers = true).await;
    let (a, b, c) = (app.tenant().await, app.tenant().await, app.tenant().await);
    for (tenant, rollouts) in [(&a, 4), (&b, 3), (&c, 1)] {
        queue_phase_ones(&app, &tenant.key, rollouts).await;
    }
    let store = &app.server.as_ref().unwrap().state.store;
    let request = phase_one_claim();
    let name = |id: uuid::Uuid| {
        [(&a, "a"), (&b, "b"), (&c, "c")].iter().find(|(t, _)| t.id == id.to_string()).map(|(_, n)| *n).unwrap()
    };
    let first: Vec<&str> = store.claim_jobs(&request, 2).await.unwrap().iter().map(|j| name(j.tenant_id)).collect();
    assert_eq!(first, ["a", "b"], "first turns, oldest first");
    // a and b now have one running each: c's first job comes first, then
    // a's and b's second (turn 2), then their third (turn 3).
    let second: Vec<&str> = store.claim_jobs(&request, 5).await.unwrap().iter().map(|j| name(j.tenant_id)).collect();
    assert_eq!(second, ["c", "a", "b", "a", "b"]);
    let rest: Vec<&str> = store.claim_jobs(&request, 5).await.unwrap().iter().map(|j| name(j.tenant_id)).collect();
    assert_eq!(rest, ["a"], "what is left");
}

async fn one_tenants_backlog_does_not_starve_another(backend: Backend) {
    const BACKLOG: usize = 30;
    const CONCURRENCY: usize = 2;
    let fake = FakeLlm::start().await;
    fake.set_default(Reply::artifacts("x", "s", "m").after(Duration::from_millis(250)));
    let app = TestApp::start_with(backend, |c| {
        crate::harness::use_model(&fake, "responses")(c);
        c.jobs.worker_concurrency = CONCURRENCY;
    })
    .await;
    let busy = app.tenant().await;
    let quiet = app.tenant().await;
    for i in 0..BACKLOG {
        app.post_segment(&busy.key, "big", "default", json!({"rollout_id": format!("r{i}"), "input": "hi"})).await;
    }
    app.post_segment(&quiet.key, "small", "default", json!({"rollout_id": "q", "input": "hi"})).await;
    app.request(Method::POST, "/v1/sessions/big/close", &busy.key).send().await.unwrap();
    // The backlog is being worked on before the quiet tenant's job arrives.
    while fake.requests().is_empty() {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    app.request(Method::POST, "/v1/sessions/small/close", &quiet.key).send().await.unwrap();
    let quiet_jobs = app.settled_jobs(&quiet.key, "kind=phase_one").await;
    let busy_jobs = app.settled_jobs(&busy.key, "kind=phase_one").await;
    // Judged by the server's own timestamps, so a slow test machine (a close
    // that takes long to arrive) cannot make a fair engine look unfair.
    let at = |j: &Value, field: &str| chrono::DateTime::parse_from_rfc3339(j[field].as_str().unwrap()).unwrap();
    let (quiet_queued, quiet_started) = (at(&quiet_jobs[0], "created_at"), at(&quiet_jobs[0], "started_at"));
    let busy_started = || busy_jobs.iter().map(|j| at(j, "started_at"));
    let overtaking = busy_started().filter(|s| *s > quiet_queued && *s < quiet_started).count();
    let still_waiting = busy_started().filter(|s| *s > quiet_started).count();
    assert!(still_waiting > 0, "the backlog was gone before the quiet job came; the test proves nothing");
    // Only claims already under way when the quiet job was queued may precede it.
    assert!(
        overtaking <= CONCURRENCY,
        "{overtaking} backlog jobs were claimed while the quiet tenant's job waited ({still_waiting} still queued)"
    );
}
