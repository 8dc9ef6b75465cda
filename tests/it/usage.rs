//! Usage and the limits that depend on it (SPEC §2.9): storage counted as it
//! changes and capped, the day's model tokens capped, and per-day counters
//! that equal what the tenant did.

use crate::every_backend;
use crate::fake_llm::{FakeLlm, Reply};
use crate::harness::{ADMIN_TOKEN, Backend, Database, Tenant, TestApp, status_code_body, use_model};
use reqwest::Method;
use serde_json::{Value, json};

every_backend!(
    a_spent_token_budget_holds_the_tenants_model_jobs_until_it_is_raised,
    a_storage_quota_refuses_the_append_that_would_pass_it_and_forgetting_frees_it,
    usage_counts_what_the_tenant_did,
    a_drifted_storage_counter_is_corrected_to_the_files,
);

const MEMORY: &str = "/v1/workspaces/default/layouts/default";

async fn set_limits(app: &TestApp, t: &Tenant, limits: Value) {
    let res = app
        .request(Method::PUT, &format!("/v1/admin/tenants/{}/limits", t.id), ADMIN_TOKEN)
        .json(&limits)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
}

/// Today's counters and the storage now.
async fn today(app: &TestApp, t: &Tenant) -> (Value, i64) {
    let usage = app.json(Method::GET, "/v1/usage", &t.key).await;
    let days = usage["days"].as_array().unwrap();
    assert_eq!(days.len(), 30, "the last 30 days by default");
    let today = days.last().unwrap().clone();
    assert_eq!(today["date"], chrono::Utc::now().format("%Y-%m-%d").to_string());
    (today, usage["storage_bytes"].as_i64().unwrap())
}

/// The bytes of the workspace's files under `dir` ("" for all of them) as memoryd's readers see them.
async fn bytes_under(app: &TestApp, t: &Tenant, dir: &str) -> u64 {
    let files = app.all_files(t, "default").await;
    files.iter().filter(|(path, _)| path.starts_with(dir)).map(|(_, bytes)| bytes.len() as u64).sum()
}

/// The walk that corrects drift finds none: the counters match the files.
async fn counters_match_the_disk(app: &TestApp) {
    let state = &app.server.as_ref().unwrap().state;
    let report = memoryd::jobs::reconcile_storage(&state.store, &state.volumes).await.unwrap();
    assert_eq!(report, memoryd::jobs::Reconciled::default(), "the counters had drifted from the disk");
}

async fn a_storage_quota_refuses_the_append_that_would_pass_it_and_forgetting_frees_it(backend: Backend) {
    let app = TestApp::start(backend).await;
    let t = app.tenant().await;
    let said = |text: &str| json!({"rollout_id": "chat-1", "input": text, "final_output": "noted"});
    assert_eq!(app.post_segment(&t.key, "s1", "default", said("first")).await.status(), 201);
    let (_, stored) = today(&app, &t).await;
    assert_eq!(stored as u64, bytes_under(&app, &t, "").await, "storage is the workspace's bytes");
    assert!(stored > 0);

    // Room for a little more than is kept: a second line does not fit.
    set_limits(&app, &t, json!({"storage_bytes": stored + 20})).await;
    let (status, code, body) =
        status_code_body(app.post_segment(&t.key, "s1", "default", said("a second, longer line")).await).await;
    assert_eq!((status, code.as_str()), (403, "quota_exceeded"), "{body}");
    assert_eq!(bytes_under(&app, &t, "").await, stored as u64, "nothing was written");
    let (status, code, _) = status_code_body(app.post_segment(&t.key, "new", "default", said("x")).await).await;
    assert_eq!((status, code.as_str()), (403, "quota_exceeded"));
    let res = app.request(Method::GET, "/v1/sessions/new", &t.key).send().await.unwrap();
    assert_eq!(res.status(), 404, "a refused first segment opens no session");
    let view = app.json(Method::GET, "/v1/sessions/s1", &t.key).await;
    assert_eq!(view["rollouts"][0]["segment_count"], 1, "{view}");
    // Another tenant is not limited by it.
    let other = app.tenant().await;
    assert_eq!(app.post_segment(&other.key, "s1", "default", said("a second, longer line")).await.status(), 201);

    // Memory made from the conversation is counted as it is published.
    set_limits(&app, &t, json!({"storage_bytes": 0})).await;
    let closed = app.json(Method::POST, "/v1/sessions/s1/close?wait=30", &t.key).await;
    assert_eq!(closed["state"], "closed", "{closed}");
    app.publishes_done().await;
    let (_, with_memory) = today(&app, &t).await;
    assert!(with_memory > stored, "{with_memory} after publishing, {stored} before");
    assert_eq!(counted(&app, &t, "default").await, bytes_under(&app, &t, "").await);
    assert_eq!(with_memory as u64, bytes_under(&app, &t, "").await + counted(&app, &t, "").await, "files and history");
    counters_match_the_disk(&app).await;

    // Forgetting the conversation frees what it took.
    set_limits(&app, &t, json!({"storage_bytes": with_memory})).await;
    assert_eq!(
        status_code_body(app.post_segment(&t.key, "s2", "default", said("one more")).await).await.0,
        403,
        "full"
    );
    let res = app.request(Method::DELETE, &format!("{MEMORY}/rollouts/chat-1"), &t.key).send().await.unwrap();
    let (status, _, job) = status_code_body(res).await;
    assert_eq!(status, 202, "{job}");
    let done = app.wait_for_job(&t.key, job["job_id"].as_str().unwrap()).await;
    assert_eq!(done["state"], "succeeded", "{done}");
    let (_, after_forget) = today(&app, &t).await;
    assert!(after_forget < with_memory, "{after_forget} after the forget, {with_memory} before");
    assert_eq!(counted(&app, &t, "default").await, bytes_under(&app, &t, "").await);
    assert_eq!(after_forget as u64, bytes_under(&app, &t, "").await + counted(&app, &t, "").await, "files and history");
    counters_match_the_disk(&app).await;
    assert_eq!(app.post_segment(&t.key, "s2", "default", said("one more")).await.status(), 201, "room again");
}

/// The tenant's counted bytes by scope: a workspace's files, or ("") its history.
async fn counted(app: &TestApp, t: &Tenant, scope: &str) -> u64 {
    let state = &app.server.as_ref().unwrap().state;
    let scopes = state.store.storage_scopes().await.unwrap();
    let tenant: uuid::Uuid = t.id.parse().unwrap();
    scopes.iter().filter(|s| s.tenant == tenant && s.scope == scope).map(|s| s.bytes as u64).sum()
}

async fn a_spent_token_budget_holds_the_tenants_model_jobs_until_it_is_raised(backend: Backend) {
    let fake = FakeLlm::start().await;
    fake.set_default(Reply::artifacts("x", "summary", "memory").now());
    let app = TestApp::start_with(backend, use_model(&fake, "responses")).await;
    let (t, other) = (app.tenant().await, app.tenant().await);
    // One model call spends it: phase one runs, and the phase two after it waits.
    set_limits(&app, &t, json!({"model_tokens_per_day": 1})).await;
    assert_eq!(app.post_segment(&t.key, "s1", "default", json!({"input": "hello"})).await.status(), 201);
    let closing = app.json(Method::POST, "/v1/sessions/s1/close?wait=3", &t.key).await;
    assert_eq!(closing["state"], "closing", "{closing}");
    let phase_one = app.settled_jobs(&t.key, "kind=phase_one").await;
    assert_eq!(phase_one[0]["state"], "succeeded");
    let view = app.json(Method::GET, "/v1/sessions/s1", &t.key).await;
    assert_eq!((view["state"].as_str(), view["waiting"].as_str()), (Some("closing"), Some("model_budget")), "{view}");
    let held = view["jobs"].as_array().unwrap().iter().find(|j| j["kind"] == "phase_two").unwrap().clone();
    assert_eq!((held["state"].as_str(), held["attempts"].as_i64()), (Some("queued"), Some(0)), "{held}");
    let midnight = (chrono::Utc::now().date_naive() + chrono::Days::new(1)).and_hms_opt(0, 0, 0).unwrap().and_utc();
    let run_after: chrono::DateTime<chrono::Utc> = held["run_after"].as_str().unwrap().parse().unwrap();
    assert_eq!(run_after, midnight, "it waits for the next UTC midnight");

    // A later close of the tenant waits too, with no attempt spent, while
    // another tenant's close completes.
    assert_eq!(app.post_segment(&t.key, "s2", "default", json!({"input": "again"})).await.status(), 201);
    let calls = fake.requests().len();
    assert_eq!(app.json(Method::POST, "/v1/sessions/s2/close?wait=1", &t.key).await["state"], "closing");
    assert_eq!(app.post_segment(&other.key, "s1", "default", json!({"input": "hi"})).await.status(), 201);
    assert_eq!(app.json(Method::POST, "/v1/sessions/s1/close?wait=30", &other.key).await["state"], "closed");
    let view = app.json(Method::GET, "/v1/sessions/s2", &t.key).await;
    assert_eq!(view["waiting"], "model_budget", "{view}");
    let mut browser = crate::console::Browser::new(&app);
    browser.sign_in(&t.key).await;
    let (_, _, page) = browser.get("/console/sessions/s2").await;
    assert!(page.contains("model tokens of the day are spent"), "the console says why: {page}");
    let (_, _, page) = browser.get("/console/usage").await;
    assert!(page.contains("model jobs wait until"), "{page}");
    assert!(view["jobs"].as_array().unwrap().iter().all(|j| j["state"] == "queued" && j["attempts"] == 0), "{view}");
    assert_eq!(fake.requests().len(), calls + 2, "only the other tenant's close called the model");
    let (today, _) = today(&app, &t).await;
    assert_eq!(today["model_calls"], 1, "{today}");

    // Raising the budget lets the held jobs run at once.
    set_limits(&app, &t, json!({"model_tokens_per_day": 0})).await;
    for session in ["s1", "s2"] {
        let closed = app.json(Method::POST, &format!("/v1/sessions/{session}/close?wait=30"), &t.key).await;
        assert_eq!(closed["state"], "closed", "{closed}");
        let view = app.json(Method::GET, &format!("/v1/sessions/{session}"), &t.key).await;
        assert!(view.get("waiting").is_none(), "{view}");
    }
}

async fn usage_counts_what_the_tenant_did(backend: Backend) {
    let fake = FakeLlm::start().await;
    fake.set_default(Reply::artifacts("x", "summary", "memory").now());
    let app = TestApp::start_with(backend, use_model(&fake, "responses")).await;
    let (t, other) = (app.tenant().await, app.tenant().await);
    for (session, rollout, said) in [("a", "r1", "one"), ("a", "r1", "two"), ("a", "r2", "three"), ("b", "r3", "four")]
    {
        let body = json!({"rollout_id": rollout, "input": said});
        assert_eq!(app.post_segment(&t.key, session, "default", body).await.status(), 201);
    }
    let ingested = bytes_under(&app, &t, "sessions/").await;
    for session in ["a", "b"] {
        let closed = app.json(Method::POST, &format!("/v1/sessions/{session}/close?wait=30"), &t.key).await;
        assert_eq!(closed["state"], "closed", "{closed}");
    }
    app.publishes_done().await;
    // What the jobs say they used, by kind, and the runs the history lists.
    let mut by_kind: std::collections::BTreeMap<String, (i64, i64, i64)> = Default::default();
    for job in app.json(Method::GET, "/v1/jobs?limit=100", &t.key).await["jobs"].as_array().unwrap() {
        let entry = by_kind.entry(job["kind"].as_str().unwrap().to_owned()).or_default();
        entry.0 += job["usage"]["calls"].as_i64().unwrap_or(0);
        entry.1 += job["usage"]["input_tokens"].as_i64().unwrap_or(0);
        entry.2 += job["usage"]["output_tokens"].as_i64().unwrap_or(0);
    }
    let runs = app.json(Method::GET, &format!("{MEMORY}/runs"), &t.key).await["runs"].as_array().unwrap().len();
    let (today, storage) = today(&app, &t).await;
    assert_eq!(today["segments"], 4, "{today}");
    assert_eq!(today["bytes_ingested"], ingested, "{today}");
    assert_eq!(today["closes"], 2, "{today}");
    assert_eq!(today["runs"], runs, "{today}");
    assert!(runs >= 1);
    let calls: i64 = by_kind.values().map(|k| k.0).sum();
    assert!(calls >= 4, "three phase ones and a phase two at least: {by_kind:?}");
    assert_eq!(today["model_calls"], calls, "{today}");
    assert_eq!(today["input_tokens"], by_kind.values().map(|k| k.1).sum::<i64>(), "{today}");
    assert_eq!(today["output_tokens"], by_kind.values().map(|k| k.2).sum::<i64>(), "{today}");
    for (kind, (calls, input, output)) in &by_kind {
        assert_eq!(
            today["by_kind"][kind],
            json!({"model_calls": calls, "input_tokens": input, "output_tokens": output}),
            "{kind}: {today}"
        );
    }
    // The admin twin answers the same; another tenant used nothing.
    let admin = app.json(Method::GET, &format!("/v1/admin/tenants/{}/usage", t.id), ADMIN_TOKEN).await;
    assert_eq!(admin["storage_bytes"], storage);
    assert_eq!(admin["days"].as_array().unwrap().last().unwrap(), &today);
    let (untouched, nothing) = crate::usage::today(&app, &other).await;
    assert_eq!((untouched["segments"].as_i64(), untouched["model_calls"].as_i64(), nothing), (Some(0), Some(0), 0));

    // A range, and the dates it refuses.
    let day = chrono::Utc::now().format("%Y-%m-%d").to_string();
    let one = app.json(Method::GET, &format!("/v1/usage?from={day}&to={day}"), &t.key).await;
    assert_eq!(one["days"].as_array().unwrap(), &vec![today.clone()]);
    for bad in ["from=2026-02-30", "to=tomorrow", "from=2030-01-02&to=2030-01-01", "from=2020-01-01&to=2030-01-01"] {
        let (status, code, body) =
            status_code_body(app.request(Method::GET, &format!("/v1/usage?{bad}"), &t.key).send().await.unwrap()).await;
        assert_eq!((status, code.as_str()), (400, "invalid_request"), "{bad}: {body}");
    }
    let res = app.request(Method::GET, "/v1/admin/tenants/00000000-0000-0000-0000-000000000000/usage", ADMIN_TOKEN);
    assert_eq!(res.send().await.unwrap().status(), 404);
    assert_eq!(app.request(Method::GET, "/v1/usage", "not-a-key").send().await.unwrap().status(), 401);
}

/// A counter set off behind memoryd's back (a crash between a file and its
/// counter, an operator) is corrected by the reconciling pass to the bytes
/// of the files as readers see them (the volume's folder, or in a bucket
/// what the database records), and the drift reported.
async fn a_drifted_storage_counter_is_corrected_to_the_files(backend: Backend) {
    let app = TestApp::start(backend).await;
    let t = app.tenant().await;
    let body = json!({"rollout_id": "chat-1", "input": "I prefer green tea.", "final_output": "noted"});
    assert_eq!(app.post_segment(&t.key, "s1", "default", body).await.status(), 201);
    let files = bytes_under(&app, &t, "").await;
    assert_eq!(counted(&app, &t, "default").await, files);
    let mut db = Database::connect(backend, &app.database_url).await;
    db.run("UPDATE storage_usage SET bytes = bytes + 1000 WHERE scope = 'default'").await;
    assert_eq!(today(&app, &t).await.1 as u64, files + counted(&app, &t, "").await + 1000, "drifted");
    let state = &app.server.as_ref().unwrap().state;
    let report = memoryd::jobs::reconcile_storage(&state.store, &state.volumes).await.unwrap();
    assert_eq!(report, memoryd::jobs::Reconciled { corrected: 1, drift: 1000 });
    assert_eq!(counted(&app, &t, "default").await, files, "corrected to the files");
    counters_match_the_disk(&app).await;
}
