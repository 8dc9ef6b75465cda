//! Forgetting (SPEC §2.7): a conversation, a workspace, a tenant, with
//! nothing left behind in files, API answers or the database.

use crate::every_backend;
use crate::fake_llm::{FakeLlm, Reply};
use crate::harness::{ADMIN_TOKEN, Backend, Tenant, TestApp, status_code_body, use_model};
use reqwest::Method;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

every_backend!(
    rebuild_consolidates_every_remaining_memory_as_added,
    forget_requests_are_checked,
    a_workspace_forget_ends_its_sessions_at_once,
    a_forgotten_workspace_is_gone_and_its_name_free,
    a_workspace_forget_fences_out_a_running_phase_two,
    a_forgotten_tenant_is_locked_out_and_removed,
    a_forget_survives_sigkill,
    a_forgotten_conversation_leaves_nothing_behind,
);

const MEMORY: &str = "/v1/workspaces/default/layouts/default";

pub(crate) fn canary() -> String {
    format!("zebra-canary-{}", uuid::Uuid::new_v4().simple())
}

/// One conversation in a session of its own, closed and consolidated.
pub(crate) async fn conversation(app: &TestApp, t: &Tenant, session: &str, rollout: &str, said: &str) {
    let body = json!({"rollout_id": rollout, "input": said, "final_output": "noted"});
    let res = app
        .request(Method::POST, &format!("/v1/sessions/{session}/layouts/default/segments"), &t.key)
        .header("idempotency-key", format!("key-{rollout}"))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 201);
    let closed = app.json(Method::POST, &format!("/v1/sessions/{session}/close?wait=30"), &t.key).await;
    assert_eq!(closed["state"], "closed", "{closed}");
}

pub(crate) async fn forget(app: &TestApp, key: &str, path: &str) -> Value {
    let res = app.request(Method::DELETE, path, key).send().await.unwrap();
    let (status, _, body) = status_code_body(res).await;
    assert_eq!(status, 202, "{body}");
    assert_eq!(body["kind"], "forget", "{body}");
    body
}

fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else { return found };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            found.extend(files_under(&path));
        } else {
            found.push(path);
        }
    }
    found
}

/// Every file of the volume (or the replica's cache) and every object of
/// the bucket, where the files live in one, that holds `needle` in its path
/// or its bytes.
async fn volume_mentions(app: &TestApp, t: &Tenant, needle: &str) -> Vec<PathBuf> {
    let holds = |b: &[u8]| b.windows(needle.len()).any(|w| w == needle.as_bytes());
    let places = ["workspaces", "job-copies"].map(|folder| app.data_dir.join(folder).join(&t.id));
    let mut found: Vec<PathBuf> = places
        .iter()
        .flat_map(|place| files_under(place))
        .filter(|p| p.to_string_lossy().contains(needle) || std::fs::read(p).is_ok_and(|b| holds(&b)))
        .collect();
    if let Some(prefix) = &app.bucket_prefix {
        let objects = crate::s3::objects_under(prefix).await;
        let named = objects.into_iter().filter(|(key, bytes)| key.contains(needle) || holds(bytes));
        found.extend(named.map(|(key, _)| PathBuf::from(format!("s3://{prefix}/{key}"))));
    }
    found
}

fn pg_dump_binary() -> PathBuf {
    let on_path = std::process::Command::new("sh").args(["-c", "command -v pg_dump"]).output().unwrap();
    if on_path.status.success() {
        return PathBuf::from(String::from_utf8(on_path.stdout).unwrap().trim());
    }
    let mut found: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path().join("bin/pg_dump"))
        .filter(|p| p.exists())
        .collect();
    found.sort();
    found.pop().expect("pg_dump is needed to read the database as a dump")
}

/// The database as bytes: a `pg_dump` of the app's schema on Postgres, the
/// SQLite file and its WAL on SQLite.
fn database_bytes(app: &TestApp, backend: Backend) -> Vec<u8> {
    match backend {
        Backend::Postgres | Backend::Bucket => {
            let url = &app.database_url;
            let (base, query) = url.split_once('?').unwrap();
            let schema = query.rsplit("search_path%3D").next().unwrap().split('&').next().unwrap();
            let out = std::process::Command::new(pg_dump_binary())
                .args(["--data-only", "-n", schema, base])
                .output()
                .unwrap();
            assert!(out.status.success(), "pg_dump: {}", String::from_utf8_lossy(&out.stderr));
            out.stdout
        }
        Backend::Sqlite => {
            // The log first: a checkpoint between the two reads moves rows
            // from the log into the file, so read in this order a row is
            // seen in one or the other (the other order can miss it).
            let mut bytes = Vec::new();
            for name in ["memoryd.db-wal", "memoryd.db"] {
                bytes.extend(std::fs::read(app.data_dir.join(name)).unwrap_or_default());
            }
            bytes
        }
    }
}

fn holds(bytes: &[u8], needle: &str) -> bool {
    bytes.windows(needle.len()).any(|w| w == needle.as_bytes())
}

/// The database holds `text` as text, or as bytes in a dump's hex (`bytea`).
pub(crate) fn database_holds(app: &TestApp, backend: Backend, text: &str) -> bool {
    let bytes = database_bytes(app, backend);
    let hex: String = text.bytes().map(|b| format!("{b:02x}")).collect();
    holds(&bytes, text) || holds(&bytes, &hex)
}

/// The database holds `bytes` as they are (SQLite's blobs) or in a dump's hex (`bytea`).
pub(crate) fn database_holds_bytes(app: &TestApp, backend: Backend, needle: &[u8]) -> bool {
    let bytes = database_bytes(app, backend);
    let hex: String = needle.iter().map(|b| format!("{b:02x}")).collect();
    bytes.windows(needle.len()).any(|w| w == needle) || holds(&bytes, &hex)
}

/// The API answers a tenant's dashboard reads, as one text.
async fn api_answers(app: &TestApp, key: &str) -> String {
    let mut answers = Vec::new();
    for path in [
        format!("{MEMORY}/phase_two_selection"),
        format!("{MEMORY}/runs?limit=1000"),
        format!("{MEMORY}/files"),
        format!("{MEMORY}/instructions"),
        "/v1/sessions?limit=1000".into(),
        "/v1/workspaces".into(),
    ] {
        answers.push(app.request(Method::GET, &path, key).send().await.unwrap().text().await.unwrap());
    }
    let runs = app.json(Method::GET, &format!("{MEMORY}/runs?limit=1000"), key).await;
    for run in runs["runs"].as_array().unwrap() {
        let id = run["run_id"].as_str().unwrap();
        answers.push(
            app.request(Method::GET, &format!("{MEMORY}/runs/{id}"), key).send().await.unwrap().text().await.unwrap(),
        );
    }
    let files = app.json(Method::GET, &format!("{MEMORY}/files"), key).await;
    for file in files["files"].as_array().unwrap() {
        let path = file["path"].as_str().unwrap();
        answers.push(
            app.request(Method::GET, &format!("{MEMORY}/files/{path}"), key)
                .send()
                .await
                .unwrap()
                .text()
                .await
                .unwrap(),
        );
    }
    let sessions = app.json(Method::GET, "/v1/sessions?limit=1000", key).await;
    for session in sessions["sessions"].as_array().unwrap() {
        let id = session["session_id"].as_str().unwrap();
        answers.push(
            app.request(Method::GET, &format!("/v1/sessions/{id}"), key).send().await.unwrap().text().await.unwrap(),
        );
    }
    answers.join("\n")
}

async fn a_forgotten_conversation_leaves_nothing_behind(backend: Backend) {
    let app = TestApp::start(backend).await;
    let t = app.tenant().await;
    let secret = canary();
    conversation(&app, &t, "s1", "chat-canary", &format!("My locker code is {secret}.")).await;
    conversation(&app, &t, "s2", "chat-keep", "I prefer green tea in the morning.").await;
    let memory = app.file_text(&t, "default", "memories/MEMORY.md").await;
    assert!(memory.contains(&secret) && memory.contains("green tea"), "{memory}");
    assert!(database_holds(&app, backend, &secret), "the history holds it before the forget");
    // A running agent used it: a read naming a session, an edit naming the conversation.
    let read = app.request(
        Method::GET,
        &format!("{MEMORY}/memory/read?path=raw_memories/chat-canary.md&session_id=canary-reader"),
        &t.key,
    );
    assert_eq!(read.send().await.unwrap().status(), 200);
    assert!(database_holds(&app, backend, "canary-reader"), "the use is recorded");
    let edit = app
        .request(Method::POST, &format!("{MEMORY}/memory/edits"), &t.key)
        .json(&json!({"operations": [{"command": "create", "path": "notes/locker.md", "file_text": "ask again\n"}], "rollout_id": "chat-canary"}));
    assert_eq!(edit.send().await.unwrap().status(), 200);
    let runs_before = app.json(Method::GET, &format!("{MEMORY}/runs"), &t.key).await;
    let older_run = runs_before["runs"][0]["run_id"].as_str().unwrap().to_owned();

    let job = forget(&app, &t.key, &format!("{MEMORY}/rollouts/chat-canary")).await;
    assert_eq!(job["forget"], json!({"scope": "rollouts", "mode": "scrub", "rollout_ids": ["chat-canary"]}));
    let done = app.wait_for_job(&t.key, job["job_id"].as_str().unwrap()).await;
    assert_eq!(done["state"], "succeeded", "{done}");

    // No file, API answer or database byte holds the phrase; only the forget
    // job's own record names the conversation.
    assert_eq!(volume_mentions(&app, &t, &secret).await, Vec::<PathBuf>::new());
    assert_eq!(volume_mentions(&app, &t, "chat-canary").await, Vec::<PathBuf>::new());
    let answers = api_answers(&app, &t.key).await;
    assert!(!answers.contains(&secret) && !answers.contains("chat-canary"), "{answers}");
    assert!(!database_holds(&app, backend, "canary-reader"), "its uses are forgotten with it");
    let jobs = app.json(Method::GET, "/v1/jobs?limit=1000", &t.key).await;
    let naming: Vec<&Value> =
        jobs["jobs"].as_array().unwrap().iter().filter(|j| j.to_string().contains("chat-canary")).collect();
    assert_eq!(naming.len(), 1, "{naming:?}");
    assert_eq!(naming[0]["job_id"], job["job_id"]);
    assert!(!database_holds(&app, backend, &secret), "the database still holds the phrase");
    // No run record names the id any more, nor does a console page.
    let mut db = crate::harness::Database::connect(backend, &app.database_url).await;
    for (rows_naming_the_id, expected) in [
        (
            "SELECT count(*) FROM phase_two_runs WHERE ledger LIKE '%chat-canary%' OR rollout_id = 'chat-canary'
             OR error LIKE '%chat-canary%'",
            0,
        ),
        // The forget job's own record, and nothing else.
        (
            "SELECT count(*) FROM jobs WHERE rollout_id = 'chat-canary' OR last_error LIKE '%chat-canary%'
             OR spec LIKE '%chat-canary%'",
            1,
        ),
        ("SELECT count(*) FROM events WHERE payload LIKE '%chat-canary%' AND event_type <> 'forget.completed'", 0),
        ("SELECT count(*) FROM sessions WHERE memory_status LIKE '%chat-canary%'", 0),
        ("SELECT count(*) FROM session_rollouts WHERE rollout_id = 'chat-canary'", 0),
        ("SELECT count(*) FROM rollouts WHERE rollout_id = 'chat-canary'", 0),
        ("SELECT count(*) FROM raw_memories WHERE rollout_id = 'chat-canary'", 0),
        ("SELECT count(*) FROM memory_uses WHERE rollout_id = 'chat-canary'", 0),
        ("SELECT count(*) FROM idempotency_keys WHERE rollout_id = 'chat-canary'", 0),
        ("SELECT count(*) FROM phase_two_selections WHERE document LIKE '%chat-canary%'", 0),
    ] {
        assert_eq!(db.count(rows_naming_the_id).await, expected, "{rows_naming_the_id}");
    }
    let mut browser = crate::console::Browser::new(&app);
    browser.sign_in(&t.key).await;
    let runs_now = app.json(Method::GET, &format!("{MEMORY}/runs?limit=1000"), &t.key).await;
    let mut pages = vec![browser.get("/console/runs").await.2, browser.get("/console/memory").await.2];
    for run in runs_now["runs"].as_array().unwrap() {
        let path = format!("/console/runs/default/default/{}", run["run_id"].as_str().unwrap());
        pages.push(browser.get(&path).await.2);
    }
    for page in &pages {
        assert!(!page.contains("chat-canary") && !page.contains(&secret), "{page}");
    }
    // The job gauges list every kind's queued and running jobs, forget and
    // restore included; finished jobs are counted as they finish, not by a
    // scrape over the whole history.
    let metrics = app.client.get(format!("{}/metrics", app.base)).send().await.unwrap().text().await.unwrap();
    for kind in ["phase_one", "phase_two", "restore", "forget", "import"] {
        for state in ["queued", "running"] {
            let series = format!("memoryd_jobs{{kind=\"{kind}\",state=\"{state}\"}} 0");
            assert!(metrics.contains(&series), "{series} missing from /metrics");
        }
    }
    assert!(!metrics.contains("memoryd_jobs{kind=\"forget\",state=\"succeeded\"}"));

    // The rest of the memory stays; the forget's run is in the history
    // without a diff, and the history before it is gone.
    let memory = app.file_text(&t, "default", "memories/MEMORY.md").await;
    assert!(memory.contains("green tea"), "{memory}");
    let selection = app.json(Method::GET, &format!("{MEMORY}/phase_two_selection"), &t.key).await;
    let selected: Vec<&str> =
        selection["selected"].as_array().unwrap().iter().map(|s| s["rollout_id"].as_str().unwrap()).collect();
    assert_eq!(selected, ["chat-keep"]);
    assert_eq!(selection["removed"], json!([]));
    let runs = app.json(Method::GET, &format!("{MEMORY}/runs"), &t.key).await;
    let newest = &runs["runs"][0];
    assert_eq!((newest["kind"].as_str(), newest["job_id"].as_str()), (Some("forget"), job["job_id"].as_str()));
    let detail = app.json(Method::GET, &format!("{MEMORY}/runs/{}", newest["run_id"].as_str().unwrap()), &t.key).await;
    let changes = detail["changes"].as_array().unwrap();
    assert!(
        !changes.is_empty() && changes.iter().all(|c| c["diff"].is_null() && c["before_bytes"].is_null()),
        "{detail}"
    );
    let restore =
        app.request(Method::POST, &format!("{MEMORY}/runs/{older_run}/restore"), &t.key).send().await.unwrap();
    let (status, code, body) = status_code_body(restore).await;
    assert_eq!((status, code.as_str()), (409, "history_expired"));
    assert!(body["detail"].as_str().unwrap().contains("a forget of this layout"), "{body}");

    // The id starts afresh, and its idempotency key is free again.
    let res = app
        .request(Method::POST, "/v1/sessions/s3/layouts/default/segments", &t.key)
        .header("idempotency-key", "key-chat-canary")
        .json(&json!({"rollout_id": "chat-canary", "input": "a new start"}))
        .send()
        .await
        .unwrap();
    let (status, _, body) = status_code_body(res).await;
    assert_eq!((status, &body["segment_index"]), (201, &json!(0)), "{body}");
}

async fn rebuild_consolidates_every_remaining_memory_as_added(backend: Backend) {
    let app = TestApp::start(backend).await;
    let t = app.tenant().await;
    conversation(&app, &t, "s1", "chat-a", "I prefer green tea in the morning.").await;
    conversation(&app, &t, "s2", "chat-b", "My cat is called Whiskerton.").await;
    conversation(&app, &t, "s3", "chat-c", "I live near the harbour.").await;
    let job = forget(&app, &t.key, &format!("{MEMORY}/rollouts/chat-b?mode=rebuild")).await;
    assert_eq!(job["forget"]["mode"], "rebuild");
    assert_eq!(app.wait_for_job(&t.key, job["job_id"].as_str().unwrap()).await["state"], "succeeded");
    let selection = app.json(Method::GET, &format!("{MEMORY}/phase_two_selection"), &t.key).await;
    let mut added: Vec<&str> =
        selection["added_rollout_ids"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
    added.sort();
    assert_eq!(added, ["chat-a", "chat-c"], "{selection}");
    assert_eq!((&selection["retained_rollout_ids"], &selection["removed"]), (&json!([]), &json!([])));
    let runs = app.json(Method::GET, &format!("{MEMORY}/runs"), &t.key).await;
    assert_eq!((&runs["runs"][0]["added"], &runs["runs"][0]["removed"]), (&json!(2), &json!(0)));
    let memory = app.file_text(&t, "default", "memories/MEMORY.md").await;
    assert!(memory.contains("green tea") && memory.contains("harbour") && !memory.contains("Whiskerton"), "{memory}");
    let file = app.file_text(&t, "default", "memories/phase_two_selection.json").await;
    assert!(!file.contains("chat-b"), "{file}");
}

async fn forget_requests_are_checked(backend: Backend) {
    // No workers: a forget stays queued, so a second request finds it.
    let app = TestApp::start_with(backend, |c| c.no_workers = true).await;
    let t = app.tenant().await;
    let body = json!({"rollout_id": "chat-1", "input": "hello"});
    assert_eq!(app.post_segment(&t.key, "open", "default", body.clone()).await.status(), 201);
    let check = |path: String, want: (u16, &'static str)| {
        let app = &app;
        let key = t.key.clone();
        async move {
            let (status, code, body) =
                status_code_body(app.request(Method::DELETE, &path, &key).send().await.unwrap()).await;
            assert_eq!((status, code.as_str()), want, "{path}: {body}");
            body
        }
    };
    let open = check(format!("{MEMORY}/rollouts/chat-1"), (409, "session_open")).await;
    assert!(open["detail"].as_str().unwrap().contains("open"), "{open}");
    check(format!("{MEMORY}/rollouts/chat-1?mode=erase"), (400, "invalid_request")).await;
    check(format!("{MEMORY}/rollouts/chat-nope"), (404, "not_found")).await;
    check("/v1/workspaces/default/layouts/nope/rollouts/chat-1".into(), (404, "not_found")).await;
    check("/v1/workspaces/nowhere/layouts/default/rollouts/chat-1".into(), (404, "not_found")).await;
    check("/v1/workspaces/nowhere".into(), (404, "not_found")).await;

    app.json(Method::POST, "/v1/sessions/open/close", &t.key).await;
    // A close queues jobs that no worker runs: the session stays closing.
    let (status, code, _) = status_code_body(
        app.request(Method::DELETE, &format!("{MEMORY}/rollouts/chat-1"), &t.key).send().await.unwrap(),
    )
    .await;
    assert_eq!((status, code.as_str()), (409, "session_open"));

    // Another tenant cannot see it, nor forget it.
    let other = app.tenant().await;
    let (status, code, _) = status_code_body(
        app.request(Method::DELETE, &format!("{MEMORY}/rollouts/chat-1"), &other.key).send().await.unwrap(),
    )
    .await;
    assert_eq!((status, code.as_str()), (404, "not_found"));
    let (status, _, _) = status_code_body(
        app.request(Method::DELETE, &format!("/v1/admin/tenants/{}", t.id), &t.key).send().await.unwrap(),
    )
    .await;
    assert_eq!(status, 401, "the admin route takes the admin token only");

    // A closed session's rollout: queued once, the same job again, and no more segments.
    assert_eq!(
        app.post_segment(&t.key, "other", "default", json!({"rollout_id": "chat-2", "input": "x"})).await.status(),
        201
    );
    app.json(Method::POST, "/v1/sessions/other/close", &t.key).await;
    let mut db = crate::harness::Database::connect(backend, &app.database_url).await;
    db.run("UPDATE sessions SET state = 'closed' WHERE session_id = 'other'").await;
    let first = forget(&app, &t.key, &format!("{MEMORY}/rollouts/chat-2")).await;
    let again = forget(&app, &t.key, &format!("{MEMORY}/rollouts/chat-2?mode=rebuild")).await;
    assert_eq!((first["job_id"].as_str(), first["state"].as_str()), (again["job_id"].as_str(), Some("queued")));
    assert!(first.get("session_id").is_none_or(Value::is_null), "{first}");
    let res = app.post_segment(&t.key, "third", "default", json!({"rollout_id": "chat-2", "input": "late"})).await;
    let (status, code, _) = status_code_body(res).await;
    assert_eq!((status, code.as_str()), (409, "forgetting"));
    let listed = app.json(Method::GET, "/v1/jobs?kind=forget&state=queued", &t.key).await;
    assert_eq!(listed["jobs"].as_array().unwrap().len(), 1);
}

async fn a_workspace_forget_ends_its_sessions_at_once(backend: Backend) {
    let app = TestApp::start_with(backend, |c| c.no_workers = true).await;
    let t = app.tenant().await;
    for session in ["live", "done"] {
        let res = app
            .request(Method::POST, &format!("/v1/sessions/{session}/layouts/default/segments?workspace=team"), &t.key)
            .json(&json!({"rollout_id": format!("chat-{session}"), "input": "hello"}))
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 201);
    }
    app.json(Method::POST, "/v1/sessions/done/close", &t.key).await;
    let mut stream = app.request(Method::GET, "/v1/events?types=session.closed", &t.key).send().await.unwrap();
    let job = forget(&app, &t.key, "/v1/workspaces/team").await;
    // A runtime waiting on them learns why they ended.
    let ended = crate::events::read_events(&mut stream, 2).await;
    let mut ended: Vec<(&str, &str)> = ended
        .iter()
        .map(|(_, _, body)| {
            (body["data"]["session_id"].as_str().unwrap(), body["data"]["memory_status"]["status"].as_str().unwrap())
        })
        .collect();
    ended.sort_unstable();
    assert_eq!(ended, [("done", "forgotten"), ("live", "forgotten")]);
    assert_eq!((job["workspace"].as_str(), &job["forget"]["scope"]), (Some("team"), &json!("workspace")));
    assert_eq!(forget(&app, &t.key, "/v1/workspaces/team").await["job_id"], job["job_id"]);

    for session in ["live", "done"] {
        let view = app.json(Method::GET, &format!("/v1/sessions/{session}"), &t.key).await;
        assert_eq!((view["state"].as_str(), &view["memory_status"]["status"]), (Some("closed"), &json!("forgotten")));
        assert!(view["jobs"].as_array().unwrap().iter().all(|j| j["state"] == "cancelled"), "{view}");
    }
    let res = app
        .request(Method::POST, "/v1/sessions", &t.key)
        .json(&json!({"session_id": "new", "workspace": "team"}))
        .send()
        .await
        .unwrap();
    assert_eq!(status_code_body(res).await.1, "forgetting");
    let res = app
        .request(Method::POST, "/v1/sessions/fresh/layouts/default/segments?workspace=team", &t.key)
        .json(&json!({"rollout_id": "chat-x", "input": "hello"}))
        .send()
        .await
        .unwrap();
    assert_eq!(status_code_body(res).await.1, "forgetting");
    let res = app.post_segment(&t.key, "live", "default", json!({"rollout_id": "chat-live", "input": "more"})).await;
    assert_eq!(status_code_body(res).await.1, "session_closed");
    // Other workspaces are untouched.
    assert_eq!(app.post_segment(&t.key, "elsewhere", "default", json!({"input": "hi"})).await.status(), 201);
}

async fn a_forgotten_workspace_is_gone_and_its_name_free(backend: Backend) {
    let app = TestApp::start(backend).await;
    let t = app.tenant().await;
    let secret = canary();
    let res = app
        .request(Method::POST, "/v1/sessions/s1/layouts/default/segments?workspace=team", &t.key)
        .header("idempotency-key", "team-key")
        .json(&json!({"rollout_id": "chat-1", "input": format!("remember {secret}")}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 201);
    let closed = app.json(Method::POST, "/v1/sessions/s1/close?wait=30", &t.key).await;
    assert_eq!(closed["state"], "closed");
    conversation(&app, &t, "kept", "chat-kept", "I prefer green tea in the morning.").await;
    assert!(!volume_mentions(&app, &t, &secret).await.is_empty());
    let res = app
        .request(Method::POST, "/v1/sessions/waiting/layouts/default/segments?workspace=team", &t.key)
        .json(&json!({"rollout_id": "chat-2", "input": "still talking"}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 201);

    let job = forget(&app, &t.key, "/v1/workspaces/team").await;
    assert_eq!(app.wait_for_job(&t.key, job["job_id"].as_str().unwrap()).await["state"], "succeeded");
    // The open session's end is told, and stays told; the workspace's
    // earlier events are gone.
    let replayed = crate::leaks::replayed_events(&app, &t).await;
    let in_team: Vec<Value> = replayed
        .lines()
        .filter_map(|line| line.strip_prefix("data:"))
        .map(|data| serde_json::from_str::<Value>(data.trim()).unwrap())
        .filter(|event| event["data"]["workspace"] == "team" && event["type"] != "forget.completed")
        .collect();
    assert_eq!(in_team.len(), 1, "{in_team:?}");
    assert_eq!(
        (in_team[0]["type"].as_str(), in_team[0]["data"]["session_id"].as_str()),
        (Some("session.closed"), Some("waiting"))
    );
    assert_eq!(in_team[0]["data"]["memory_status"]["status"], "forgotten");
    assert!(!app.workspace_dir(&t, "team").exists());
    assert_eq!(volume_mentions(&app, &t, &secret).await, Vec::<PathBuf>::new());
    assert!(!database_holds(&app, backend, &secret));
    for path in ["/v1/workspaces/team/layouts/default/files", "/v1/sessions/s1"] {
        assert_eq!(app.request(Method::GET, path, &t.key).send().await.unwrap().status(), 404, "{path}");
    }
    let listed = app.json(Method::GET, "/v1/workspaces", &t.key).await;
    let names: Vec<&str> =
        listed["workspaces"].as_array().unwrap().iter().map(|w| w["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["default"]);
    assert!(
        app.file_bytes(&t, "default", "memories/MEMORY.md")
            .await
            .map(|b| String::from_utf8(b).unwrap())
            .ok_or(())
            .unwrap()
            .contains("green tea")
    );

    // The name starts again from nothing, its idempotency key too.
    let res = app
        .request(Method::POST, "/v1/sessions/s1/layouts/default/segments?workspace=team", &t.key)
        .header("idempotency-key", "team-key")
        .json(&json!({"rollout_id": "chat-1", "input": "again"}))
        .send()
        .await
        .unwrap();
    let (status, _, body) = status_code_body(res).await;
    assert_eq!((status, &body["segment_index"]), (201, &json!(0)), "{body}");

    // The default workspace forgotten exists again, empty.
    let job = forget(&app, &t.key, "/v1/workspaces/default").await;
    assert_eq!(app.wait_for_job(&t.key, job["job_id"].as_str().unwrap()).await["state"], "succeeded");
    let files = app.json(Method::GET, &format!("{MEMORY}/files"), &t.key).await;
    assert_eq!(files["files"], json!([]));
}

async fn a_workspace_forget_fences_out_a_running_phase_two(backend: Backend) {
    let fake = FakeLlm::start().await;
    fake.set_default(Reply::artifacts("slug", "summary", "raw memory").now());
    fake.set_agent_default(Reply::Consolidate.after(Duration::from_secs(2)));
    let app = TestApp::start_with(backend, use_model(&fake, "responses")).await;
    let t = app.tenant().await;
    let res = app
        .request(Method::POST, "/v1/sessions/s1/layouts/default/segments?workspace=team", &t.key)
        .json(&json!({"rollout_id": "chat-1", "input": "hello"}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 201);
    app.json(Method::POST, "/v1/sessions/s1/close", &t.key).await;
    let started = Instant::now();
    while fake.phase_two_requests().is_empty() {
        assert!(started.elapsed() < Duration::from_secs(30), "phase two never started");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let job = forget(&app, &t.key, "/v1/workspaces/team").await;
    assert_eq!(app.wait_for_job(&t.key, job["job_id"].as_str().unwrap()).await["state"], "succeeded");
    // The consolidation's two turns end after the forget; its publish must not land.
    let started = Instant::now();
    while fake.phase_two_requests().len() < 2 {
        assert!(started.elapsed() < Duration::from_secs(30), "phase two never finished its turns");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let left = files_under(&app.workspace_dir(&t, "team"));
    assert_eq!(left, Vec::<PathBuf>::new());
    let manifests = files_under(&app.data_dir.join("publish"));
    assert!(manifests.iter().all(|f| f.metadata().unwrap().len() == 0), "only emptied spares: {manifests:?}");
    let jobs = app.json(Method::GET, "/v1/jobs?kind=phase_two", &t.key).await;
    assert_eq!(jobs["jobs"], json!([]), "the cancelled job's record went with the workspace");
}

async fn a_forgotten_tenant_is_locked_out_and_removed(backend: Backend) {
    let app = TestApp::start(backend).await;
    let t = app.tenant().await;
    let other = app.tenant().await;
    let secret = canary();
    conversation(&app, &t, "s1", "chat-1", &format!("remember {secret}")).await;
    conversation(&app, &other, "s1", "chat-1", "I prefer green tea in the morning.").await;
    assert_eq!(app.request(Method::GET, "/v1/sessions", &t.key).send().await.unwrap().status(), 200);

    let path = format!("/v1/admin/tenants/{}", t.id);
    let job = forget(&app, ADMIN_TOKEN, &path).await;
    assert_eq!(job["forget"]["scope"], "tenant");
    let res = app.request(Method::GET, "/v1/sessions", &t.key).send().await.unwrap();
    assert_eq!(res.status(), 401, "the key stops working at once");
    let started = Instant::now();
    loop {
        let tenants = app.json(Method::GET, "/v1/admin/tenants", ADMIN_TOKEN).await;
        let listed = tenants["tenants"].as_array().unwrap().iter().find(|x| x["tenant_id"] == t.id.as_str()).cloned();
        match listed {
            None => break,
            Some(entry) => assert_eq!(entry["state"], "deleting", "{entry}"),
        }
        assert!(started.elapsed() < Duration::from_secs(30), "the tenant was never removed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for folder in ["workspaces", "job-copies"] {
        assert!(!app.data_dir.join(folder).join(&t.id).exists(), "{folder}");
    }
    assert!(!database_holds(&app, backend, &secret));
    assert!(!database_holds(&app, backend, &t.id));
    let id_bytes = *uuid::Uuid::parse_str(&t.id).unwrap().as_bytes();
    assert!(!database_bytes(&app, backend).windows(16).any(|w| w == id_bytes), "a row still holds the tenant's id");
    let (status, code, _) =
        status_code_body(app.request(Method::DELETE, &path, ADMIN_TOKEN).send().await.unwrap()).await;
    assert_eq!((status, code.as_str()), (404, "not_found"));
    // The other tenant keeps everything.
    let memory = app.file_text(&other, "default", "memories/MEMORY.md").await;
    assert!(memory.contains("green tea"));
    assert_eq!(app.request(Method::GET, "/v1/sessions/s1", &other.key).send().await.unwrap().status(), 200);
}

async fn a_forget_survives_sigkill(backend: Backend) {
    use crate::process::{Memoryd, database_env, model_env, new_tenant, post_segment};
    let secret = canary();
    let fake = FakeLlm::start().await;
    fake.set_agent_default(Reply::Consolidate.now());
    let dir = tempfile::tempdir().unwrap();
    let mut env = model_env(&fake);
    env.extend(database_env(backend).await);
    env.push(("MEMORYD_JOB_LEASE_SECS", "2".into()));
    let http = reqwest::Client::new();
    let first = Memoryd::spawn(dir.path(), "first", &["serve"], &env);
    first.ready(&http).await;
    let (tenant_id, key) = new_tenant(&http, &first.base).await;
    // A conversation that stays, so that the forget has memory to consolidate.
    fake.set_default(Reply::artifacts("kept", "summary kept", "raw kept").now());
    for (session, rollout, said) in [("k", "keep", "green tea".to_owned()), ("s", "r", format!("say {secret}"))] {
        if rollout == "r" {
            fake.set_default(Reply::artifacts("slug", &format!("summary {secret}"), &format!("raw {secret}")).now());
        }
        post_segment(&http, &first.base, &key, session, json!({"rollout_id": rollout, "input": said})).await;
        let closed: Value = http
            .post(format!("{}/v1/sessions/{session}/close?wait=30", first.base))
            .bearer_auth(&key)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(closed["state"], "closed", "{closed}");
    }
    let volume = dir.path().join(format!("memoryd-data/workspaces/{tenant_id}"));
    let mentions = || async {
        let on_volume = files_under(&volume).into_iter().filter(|p| std::fs::read(p).is_ok_and(|b| holds(&b, &secret)));
        on_volume.count() + crate::s3::objects_holding(&env, &secret).await
    };
    assert!(mentions().await >= 3, "rollout, raw memory and summary hold the phrase");

    // The forget's consolidation hangs in its model call; the process dies there.
    let calls = fake.phase_two_requests().len();
    fake.set_agent_default(Reply::Consolidate.after(Duration::from_secs(60)));
    let res = http.delete(format!("{}{MEMORY}/rollouts/r", first.base)).bearer_auth(&key).send().await.unwrap();
    assert_eq!(res.status(), 202);
    let job: Value = res.json().await.unwrap();
    let started = Instant::now();
    while fake.phase_two_requests().len() == calls {
        assert!(started.elapsed() < Duration::from_secs(20), "the forget's consolidation never started");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    first.signal("-KILL");
    drop(first);
    fake.set_agent_default(Reply::Consolidate.now());

    let second = Memoryd::spawn(dir.path(), "second", &["serve"], &env);
    second.ready(&http).await;
    let path = format!("/v1/jobs/{}", job["job_id"].as_str().unwrap());
    let started = Instant::now();
    loop {
        let now: Value =
            http.get(format!("{}{path}", second.base)).bearer_auth(&key).send().await.unwrap().json().await.unwrap();
        if now["state"] == "succeeded" {
            assert_eq!(now["attempts"], 2, "{now}");
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(30), "the forget never completed: {now}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The job is recorded succeeded before its publish removes the files; a
    // read of the layout's files completes a publish still under way.
    let files: Value = http
        .get(format!("{}{MEMORY}/files", second.base))
        .bearer_auth(&key)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(!files.to_string().contains("r_slug") && !files.to_string().contains("raw_memories/r.md"), "{files}");
    assert_eq!(mentions().await, 0);
}
