//! A consolidation's changes become visible together or not at all (SPEC §4),
//! whatever happens to the process that made them: paused past its lease,
//! or killed while it publishes.

use crate::fake_llm::{FakeLlm, Reply};
use crate::harness::{Backend, Tenant, TestApp, outside_file};
use crate::process::{Memoryd, database_env, get_json, jobs_of_kind, model_env, new_tenant, post_segment, spawn_round};
use crate::s3::replica_env;
use serde_json::{Value, json};
use std::time::{Duration, Instant};

fn patch_all(files: &[&str], text: &str) -> Reply {
    let mut patch = String::from("*** Begin Patch\n");
    for file in files {
        patch.push_str(&format!("*** Delete File: memories/{file}\n*** Add File: memories/{file}\n+{text}\n"));
    }
    patch.push_str("*** End Patch");
    Reply::Calls(vec![("apply_patch", json!({"patch": patch}))])
}

crate::every_backend!(
    a_kill_during_a_publish_leaves_all_of_a_run_or_none,
    a_read_never_sees_half_a_run,
    a_job_shown_succeeded_has_its_files_in_place,
);

async fn wait_for(what: &str, limit: Duration, mut done: impl AsyncFnMut() -> bool) {
    let started = Instant::now();
    while !done().await {
        assert!(started.elapsed() < limit, "{what} did not happen within {limit:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn get_text(http: &reqwest::Client, base: &str, key: &str, path: &str) -> String {
    http.get(format!("{base}{path}")).bearer_auth(key).send().await.unwrap().text().await.unwrap()
}

async fn phase_two_jobs(http: &reqwest::Client, base: &str, key: &str) -> Vec<Value> {
    jobs_of_kind(http, base, key, "phase_two").await
}

crate::replicated!(a_worker_paused_past_its_lease_changes_no_visible_file);

/// Two replicas on one Postgres (and one volume or bucket). The first is
/// stopped (SIGSTOP) after its agent's first turn has rewritten `MEMORY.md`
/// in its working copy, and stays stopped past its lease; the second takes
/// the job over and finishes it. Nothing of the first's run is ever
/// visible, before or after it wakes.
async fn a_worker_paused_past_its_lease_changes_no_visible_file(backend: Backend) {
    let fake = FakeLlm::start().await;
    fake.set_default(Reply::artifacts("r", "summary", "raw").now());
    let dir = tempfile::tempdir().unwrap();
    let mut env = model_env(&fake);
    env.extend(database_env(backend).await);
    env.push(("MEMORYD_JOB_LEASE_SECS", "2".into()));
    let http = reqwest::Client::new();
    let first = Memoryd::spawn(dir.path(), "first", &["serve"], &replica_env(&env, dir.path(), "first"));
    first.ready(&http).await;
    let (tenant, key) = new_tenant(&http, &first.base).await;
    post_segment(&http, &first.base, &key, "s", json!({"rollout_id": "r", "input": "hi"})).await;
    fake.set_agent_default(Reply::Text("unused").now());
    fake.push(Reply::artifacts("r", "summary", "raw").now());
    fake.push(patch_all(&["MEMORY.md"], "from the paused worker").now());
    fake.push(Reply::Text("done").after(Duration::from_secs(1)));
    http.post(format!("{}/v1/sessions/s/close", first.base)).bearer_auth(&key).send().await.unwrap();
    wait_for("the first worker's second turn", Duration::from_secs(20), async || fake.phase_two_requests().len() >= 2)
        .await;
    first.signal("-STOP");

    let second = Memoryd::spawn(dir.path(), "second", &["serve"], &replica_env(&env, dir.path(), "second"));
    second.ready(&http).await;
    let memory = "/v1/workspaces/default/layouts/default/files/MEMORY.md";
    assert_eq!(get_text(&http, &second.base, &key, memory).await, "", "the paused run's edit is not visible");
    fake.push(patch_all(&["MEMORY.md"], "from the new owner").now());
    fake.push(Reply::Text("done").now());
    let started = Instant::now();
    while !phase_two_jobs(&http, &second.base, &key).await.iter().all(|j| j["state"] == "succeeded") {
        if started.elapsed() > Duration::from_secs(30) {
            panic!(
                "the new owner's run did not finish: {:?}\n{}",
                phase_two_jobs(&http, &second.base, &key).await,
                second.log_text()
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(get_text(&http, &second.base, &key, memory).await, "from the new owner");

    first.signal("-CONT");
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(get_text(&http, &second.base, &key, memory).await, "from the new owner");
    let (data_dir, prefix) = (dir.path().join("memoryd-data"), crate::s3::prefix_of(&env));
    let outside = outside_file(&data_dir, prefix.as_deref(), &tenant, "default", "memories/MEMORY.md").await;
    assert_eq!(outside.as_deref(), Some(&b"from the new owner"[..]), "where readers outside memoryd look");
    let jobs = phase_two_jobs(&http, &second.base, &key).await;
    assert_eq!((jobs.len(), jobs[0]["attempts"].as_i64()), (1, Some(2)));
    let log = first.log_text();
    assert!(log.contains("result discarded") || log.contains("lease lost"), "{log}");
}

/// The twelve files round `round`'s consolidation adds.
pub(crate) fn round_files(round: u64) -> Vec<String> {
    (0..12).map(|i| format!("skills/r{round}/f{i}.md")).collect()
}

pub(crate) fn add_all(files: &[String], text: &str) -> Reply {
    let mut patch = String::from("*** Begin Patch\n");
    for file in files {
        patch.push_str(&format!("*** Add File: memories/{file}\n+{text}\n"));
    }
    patch.push_str("*** End Patch");
    Reply::Calls(vec![("apply_patch", json!({"patch": patch}))])
}

/// Kill -9 at moments around the end of consolidations that each add twelve
/// files; after every restart each earlier run's files are all where readers
/// outside memoryd find them — when the database records that run as
/// succeeded with them — or none is (in a bucket: at their plain keys, once
/// the jobs API has shown the run's job).
async fn a_kill_during_a_publish_leaves_all_of_a_run_or_none(backend: Backend) {
    let fake = FakeLlm::start().await;
    fake.set_default(Reply::artifacts("r", "summary", "raw").now());
    fake.set_agent_default(Reply::Text("done").now());
    let dir = tempfile::tempdir().unwrap();
    let mut env = model_env(&fake);
    env.extend(database_env(backend).await);
    env.push(("MEMORYD_JOB_LEASE_SECS", "1".into()));
    env.push(("MEMORYD_RETRY_BASE_MS", "50".into()));
    env.push(("MEMORYD_WORKER_CONCURRENCY", "1".into()));
    let http = reqwest::Client::new();
    let (data_dir, prefix) = (dir.path().join("memoryd-data"), crate::s3::prefix_of(&env));
    let mut tenant: Option<(String, String)> = None;
    let mut published = 0;
    for round in 0..7u64 {
        let (mut memoryd, tenant_id, key) = spawn_round(dir.path(), round, &env, &http, &mut tenant).await;
        wait_for("the recovered queue", Duration::from_secs(30), async || {
            phase_two_jobs(&http, &memoryd.base, &key)
                .await
                .iter()
                .all(|j| !matches!(j["state"].as_str(), Some("queued" | "running")))
        })
        .await;
        let runs = get_json(&http, &memoryd.base, &key, "/v1/workspaces/default/layouts/default/runs").await;
        for earlier in 0..round {
            let files = round_files(earlier);
            let mut present = 0;
            for file in &files {
                let path = format!("memories/{file}");
                let found = outside_file(&data_dir, prefix.as_deref(), &tenant_id, "default", &path).await;
                present += usize::from(found.is_some());
            }
            let recorded = runs["runs"].as_array().unwrap().iter().any(|r| {
                r["state"] == "succeeded"
                    && r["files_changed"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .any(|f| f.as_str() == Some(&format!("memories/{}", files[0])))
            });
            assert_eq!(present, if recorded { 12 } else { 0 }, "round {earlier}'s files after restart {round}");
            published += usize::from(recorded);
        }

        let session = format!("s{round}");
        fake.push(Reply::artifacts("r", "summary", "raw").now());
        fake.push(add_all(&round_files(round), &session).now());
        fake.push(Reply::Text("done").now());
        let before = fake.phase_two_requests().len();
        post_segment(&http, &memoryd.base, &key, &session, json!({"rollout_id": format!("r{round}"), "input": "hi"}))
            .await;
        http.post(format!("{}/v1/sessions/{session}/close", memoryd.base)).bearer_auth(&key).send().await.unwrap();
        wait_for("the final turn", Duration::from_secs(20), async || fake.phase_two_requests().len() >= before + 2)
            .await;
        // 0 to 72 ms: from before the finish commits to after its renames,
        // even on a loaded machine; ten times that in a bucket, whose publish
        // first writes each file as an object (0 to 720 ms, as bucket_kills).
        let scale = if prefix.is_some() { 20 } else { 2 };
        tokio::time::sleep(Duration::from_millis(round * round * scale)).await;
        memoryd.signal("-KILL");
        memoryd.exit().await;
    }
    eprintln!("{published} round checks found a published run");
    assert!(published > 0, "no run was ever published; the test proved nothing");
}

/// A publish held with its first file in place for readers outside memoryd
/// and the rest not (a test hook): `(the first, one held back)`. A volume
/// renames `raw_memories.md` first; a bucket's chores place the paths in
/// order, `MEMORY.md` first.
fn first_and_held(app: &TestApp) -> (&'static str, &'static str) {
    match app.bucket_prefix {
        None => ("memories/raw_memories.md", "memories/MEMORY.md"),
        Some(_) => ("memories/MEMORY.md", "memories/raw_memories.md"),
    }
}

async fn outside_text(app: &TestApp, t: &Tenant, path: &str) -> String {
    String::from_utf8(app.outside_bytes(t, "default", path).await.unwrap_or_default()).unwrap()
}

/// Waits until the held publish has its first file, with `said` in it, in
/// place for outside readers; its held-back file is still without it.
pub(crate) async fn wait_until_held(app: &TestApp, t: &Tenant, said: &str) {
    let (first, held) = first_and_held(app);
    wait_for("the first file in place", Duration::from_secs(30), async || {
        outside_text(app, t, first).await.contains(said)
    })
    .await;
    assert!(!outside_text(app, t, held).await.contains(said), "{held} is held back");
}

/// A publish held with one file in place and the rest not (a test hook):
/// an API read in that window sees the whole run, never the new
/// `raw_memories.md` with the old `MEMORY.md` or the other way round.
async fn a_read_never_sees_half_a_run(backend: Backend) {
    use reqwest::Method;
    let app = TestApp::start_with(backend, |c| c.test_publish_pause = std::time::Duration::from_millis(3000)).await;
    let t = app.tenant().await;
    let say = |session: &'static str, rollout: &'static str, text: &'static str| {
        let (app, key) = (&app, t.key.clone());
        async move {
            let body = json!({"rollout_id": rollout, "input": text, "final_output": "noted"});
            assert_eq!(app.post_segment(&key, session, "default", body).await.status(), 201);
        }
    };
    say("s1", "chat-1", "I prefer green tea in the morning.").await;
    let closed = app.json(Method::POST, "/v1/sessions/s1/close?wait=60", &t.key).await;
    assert_eq!(closed["state"], "closed", "{closed}");
    say("s2", "chat-2", "I switched to black coffee.").await;
    app.json(Method::POST, "/v1/sessions/s2/close", &t.key).await;

    wait_until_held(&app, &t, "black coffee").await;
    let base = "/v1/workspaces/default/layouts/default";
    let raw = app.request(Method::GET, &format!("{base}/files/raw_memories.md"), &t.key).send().await.unwrap();
    let raw = raw.text().await.unwrap();
    assert!(raw.contains("black coffee"), "half a run: {raw}");
    let memory = app.request(Method::GET, &format!("{base}/files/MEMORY.md"), &t.key).send().await.unwrap();
    let memory = memory.text().await.unwrap();
    assert!(memory.contains("black coffee") && memory.contains("green tea"), "half a run: {memory}");
    let instructions = app.json(Method::GET, &format!("{base}/instructions"), &t.key).await;
    assert!(instructions["instructions"].as_str().unwrap().contains("black coffee"), "{instructions}");
    let selection = app.file_text(&t, "default", "memories/phase_two_selection.json").await;
    assert!(selection.contains("chat-2"), "the whole run is what readers see: {selection}");
}

/// The job of the consolidation held mid-publish: on a volume the one
/// pending manifest that writes `MEMORY.md`; in a bucket the phase two
/// finished last (its finish is committed, its chores held).
async fn held_consolidation(app: &TestApp, backend: Backend) -> String {
    if app.bucket_prefix.is_some() {
        let mut db = crate::harness::Database::connect(backend, &app.database_url).await;
        let sql = "SELECT CAST(id AS TEXT) FROM jobs WHERE kind = 'phase_two' AND state = 'succeeded' \
                   ORDER BY finished_at DESC LIMIT 1";
        return db.text(sql).await;
    }
    let consolidations: Vec<Value> = std::fs::read_dir(app.data_dir.join("publish"))
        .unwrap()
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "json"))
        .filter_map(|e| serde_json::from_slice::<Value>(&std::fs::read(e.path()).ok()?).ok())
        .filter(|m| m["entries"].as_array().unwrap().iter().any(|e| e["path"] == "memories/MEMORY.md"))
        .collect();
    assert_eq!(consolidations.len(), 1, "one consolidation is held: {consolidations:?}");
    consolidations[0]["scope"]["job_id"].as_str().unwrap().to_owned()
}

/// A run held with one file in place and the rest not (a test hook) has its
/// job's finish committed: the job, read alone or in a listing, shows
/// `succeeded` only with every file of the run where readers outside
/// memoryd find them (the volume's files; a bucket's plain keys).
async fn a_job_shown_succeeded_has_its_files_in_place(backend: Backend) {
    use reqwest::Method;
    let app = TestApp::start_with(backend, |c| c.test_publish_pause = std::time::Duration::from_millis(3000)).await;
    let t = app.tenant().await;
    let statements = [
        ("I prefer green tea in the morning.", "green tea"),
        ("I switched to black coffee.", "black coffee"),
        ("I switched to rooibos.", "rooibos"),
    ];
    for (n, (said, drink)) in statements.into_iter().enumerate() {
        let session = format!("s{n}");
        let body = json!({"rollout_id": format!("chat-{n}"), "input": said, "final_output": "noted"});
        assert_eq!(app.post_segment(&t.key, &session, "default", body).await.status(), 201);
        if n == 0 {
            let closed = app.json(Method::POST, "/v1/sessions/s0/close?wait=60", &t.key).await;
            assert_eq!(closed["state"], "closed", "{closed}");
            continue;
        }
        app.json(Method::POST, &format!("/v1/sessions/{session}/close"), &t.key).await;
        wait_until_held(&app, &t, drink).await;
        let job_id = held_consolidation(&app, backend).await;
        let shown = if n == 1 {
            app.json(Method::GET, &format!("/v1/jobs/{job_id}"), &t.key).await
        } else {
            let listed = app.json(Method::GET, "/v1/jobs?kind=phase_two", &t.key).await;
            listed["jobs"].as_array().unwrap().iter().find(|j| j["job_id"] == job_id.as_str()).unwrap().clone()
        };
        assert_eq!(shown["state"], "succeeded", "the finish is committed: {shown}");
        for path in ["memories/MEMORY.md", "memories/raw_memories.md"] {
            let text = outside_text(&app, &t, path).await;
            assert!(text.contains(drink), "a job shown succeeded has its {path} in place: {text}");
        }
        let selection = outside_text(&app, &t, "memories/phase_two_selection.json").await;
        assert!(selection.contains(&format!("chat-{n}")), "and its selection: {selection}");
    }
}

crate::every_backend!(a_kill_during_an_edit_leaves_all_of_it_or_none);

/// Kill -9 moments after an edit that writes twelve files was accepted: at
/// the next start a read sees all twelve or none, and once the job has run
/// again all twelve are there, once.
async fn a_kill_during_an_edit_leaves_all_of_it_or_none(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let mut env = database_env(backend).await;
    env.push(("MEMORYD_JOB_LEASE_SECS", "1".into()));
    env.push(("MEMORYD_RETRY_BASE_MS", "50".into()));
    let http = reqwest::Client::new();
    let mut tenant: Option<(String, String)> = None;
    let mut seen = [0usize; 2];
    for round in 0..6u64 {
        let (mut memoryd, _, key) = spawn_round(dir.path(), round, &env, &http, &mut tenant).await;
        let listed = |memoryd_base: String, key: String, round: u64| {
            let http = http.clone();
            async move {
                let path = format!("/v1/workspaces/default/layouts/default/memory/list?path=edits/r{round}");
                let res = http.get(format!("{memoryd_base}{path}")).bearer_auth(&key).send().await.unwrap();
                if res.status() == 404 {
                    0
                } else {
                    res.json::<Value>().await.unwrap()["entries"].as_array().unwrap().len()
                }
            }
        };
        if round > 0 {
            let at_start = listed(memoryd.base.clone(), key.clone(), round - 1).await;
            assert!(at_start == 0 || at_start == 12, "round {}'s edit at restart: {at_start} of 12 files", round - 1);
            seen[usize::from(at_start == 12)] += 1;
            wait_for("the edit's job", Duration::from_secs(30), async || {
                jobs_of_kind(&http, &memoryd.base, &key, "edit").await.iter().all(|j| j["state"] == "succeeded")
            })
            .await;
            assert_eq!(
                listed(memoryd.base.clone(), key.clone(), round - 1).await,
                12,
                "the edit completed after the kill"
            );
        }
        let operations: Vec<Value> = (0..12)
            .map(|i| json!({"command": "create", "path": format!("edits/r{round}/f{i}.md"), "file_text": format!("round {round}\n")}))
            .collect();
        let res = http
            .post(format!("{}/v1/workspaces/default/layouts/default/memory/edits?wait=0", memoryd.base))
            .bearer_auth(&key)
            .json(&json!({"operations": operations}))
            .send()
            .await
            .unwrap();
        assert!(matches!(res.status().as_u16(), 200 | 202), "{}", res.text().await.unwrap());
        tokio::time::sleep(Duration::from_millis(round * 3)).await;
        memoryd.signal("-KILL");
        memoryd.exit().await;
    }
    eprintln!("at restart: {} edits not yet published, {} published", seen[0], seen[1]);
}
