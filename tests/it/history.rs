//! Memory history (SPEC §2.6): each run's diff, files as a run left them,
//! restores through a run of their own, and pruning to the newest runs.

use crate::every_backend;
use crate::harness::{Backend, Tenant, TestApp, status_code_body};
use reqwest::Method;
use serde_json::{Value, json};

every_backend!(
    a_restore_puts_the_memory_back_through_a_run_of_its_own,
    history_is_kept_for_the_newest_runs_only,
    runs_show_their_diffs_and_the_files_they_left,
);

const RUNS: &str = "/v1/workspaces/default/layouts/default/runs";

/// Appends one conversation in a session of its own, closes it and waits:
/// the extractive provider's consolidation then is the newest run.
async fn conversation(app: &TestApp, t: &Tenant, session: &str, said: &str) -> String {
    let body = json!({"rollout_id": format!("chat-{session}"), "input": said, "final_output": "noted"});
    assert_eq!(app.post_segment(&t.key, session, "default", body).await.status(), 201);
    let closed = app.json(Method::POST, &format!("/v1/sessions/{session}/close?wait=30"), &t.key).await;
    assert_eq!(closed["state"], "closed", "{closed}");
    let runs = app.json(Method::GET, &format!("{RUNS}?limit=1"), &t.key).await;
    runs["runs"][0]["run_id"].as_str().unwrap().to_owned()
}

fn change<'a>(run: &'a Value, path: &str) -> &'a Value {
    run["changes"].as_array().unwrap().iter().find(|c| c["path"] == path).unwrap_or_else(|| panic!("{path} in {run}"))
}

async fn file_at(app: &TestApp, key: &str, path: &str, run: Option<&str>) -> (u16, String) {
    let query = run.map(|r| format!("?run_id={r}")).unwrap_or_default();
    let url = format!("/v1/workspaces/default/layouts/default/files/{path}{query}");
    let res = app.request(Method::GET, &url, key).send().await.unwrap();
    (res.status().as_u16(), res.text().await.unwrap())
}

async fn runs_show_their_diffs_and_the_files_they_left(backend: Backend) {
    let app = TestApp::start(backend).await;
    let t = app.tenant().await;
    let first = conversation(&app, &t, "s1", "I prefer green tea in the morning.").await;
    let second = conversation(&app, &t, "s2", "I switched to black coffee.").await;

    let one = app.json(Method::GET, &format!("{RUNS}/{first}"), &t.key).await;
    assert_eq!((one["run_id"].as_str(), &one["history_kept"]), (Some(first.as_str()), &json!(true)));
    // The layout's files exist, empty, from the first append on (R-LAY);
    // phase two's own files are new with the first run.
    for path in ["MEMORY.md", "memory_summary.md"] {
        assert_eq!(
            (&change(&one, path)["change"], &change(&one, path)["before_bytes"]),
            (&json!("modified"), &json!(0)),
            "{path}"
        );
    }
    for path in ["raw_memories.md", "phase_two_selection.json"] {
        assert_eq!(
            (&change(&one, path)["change"], &change(&one, path)["before_bytes"]),
            (&json!("added"), &Value::Null),
            "{path}"
        );
    }
    let memory = change(&one, "MEMORY.md");
    let diff = memory["diff"].as_str().unwrap();
    assert!(diff.starts_with("--- a/MEMORY.md\n+++ b/MEMORY.md\n@@ -0,0 +1,"), "{diff}");
    assert!(diff.lines().any(|l| l.starts_with('+') && l.contains("green tea")), "{diff}");

    let two = app.json(Method::GET, &format!("{RUNS}/{second}"), &t.key).await;
    let memory = change(&two, "MEMORY.md");
    assert_eq!(memory["change"], "modified");
    let diff = memory["diff"].as_str().unwrap();
    assert!(diff.starts_with("--- a/MEMORY.md\n+++ b/MEMORY.md\n"), "{diff}");
    assert!(diff.lines().any(|l| l.starts_with('+') && l.contains("black coffee")), "{diff}");

    // The file as each run left it, and as it is now.
    let (status, after_first) = file_at(&app, &t.key, "MEMORY.md", Some(&first)).await;
    assert_eq!(status, 200);
    assert!(after_first.contains("green tea") && !after_first.contains("black coffee"), "{after_first}");
    let on_disk = app.file_text(&t, "default", "memories/MEMORY.md").await;
    assert_eq!(file_at(&app, &t.key, "MEMORY.md", Some(&second)).await, (200, on_disk.clone()));
    assert_eq!(file_at(&app, &t.key, "./MEMORY.md", None).await, (200, on_disk));
    assert_eq!(memory["after_bytes"].as_u64(), Some(file_at(&app, &t.key, "MEMORY.md", None).await.1.len() as u64));

    for (path, run, want) in [
        ("MEMORY.md", "not-a-uuid", 400),
        ("MEMORY.md", "00000000-0000-4000-8000-000000000000", 404),
        ("nothing.md", first.as_str(), 404),
        ("../sessions/chat-s1.jsonl", first.as_str(), 404),
        ("raw_memories/chat-s1.md", first.as_str(), 404),
    ] {
        assert_eq!(file_at(&app, &t.key, path, Some(run)).await.0, want, "{path} at {run}");
    }
    let other = app.tenant().await;
    for path in [format!("{RUNS}/{first}"), format!("{RUNS}/not-a-run")] {
        let (status, code, _) =
            status_code_body(app.request(Method::GET, &path, &other.key).send().await.unwrap()).await;
        assert_eq!((status, code.as_str()), (404, "not_found"), "{path}");
    }
    assert_eq!(file_at(&app, &other.key, "MEMORY.md", Some(&first)).await.0, 404, "another tenant's history");
}

async fn a_restore_puts_the_memory_back_through_a_run_of_its_own(backend: Backend) {
    let app = TestApp::start(backend).await;
    let t = app.tenant().await;
    let first = conversation(&app, &t, "s1", "I prefer green tea in the morning.").await;
    let (_, memory_then) = file_at(&app, &t.key, "MEMORY.md", Some(&first)).await;
    let (_, summary_then) = file_at(&app, &t.key, "memory_summary.md", Some(&first)).await;
    let second = conversation(&app, &t, "s2", "I switched to black coffee.").await;
    let (_, raw_now) = file_at(&app, &t.key, "raw_memories.md", None).await;
    let selection_now =
        app.json(Method::GET, "/v1/workspaces/default/layouts/default/phase_two_selection", &t.key).await;
    let (_, memory_now) = file_at(&app, &t.key, "MEMORY.md", None).await;
    assert_ne!(memory_now, memory_then);

    let res = app.request(Method::POST, &format!("{RUNS}/{first}/restore"), &t.key).send().await.unwrap();
    assert_eq!(res.status(), 202);
    let job: Value = res.json().await.unwrap();
    assert_eq!((job["kind"].as_str(), job["restore_run_id"].as_str()), (Some("restore"), Some(first.as_str())));
    let done = app.wait_for_job(&t.key, job["job_id"].as_str().unwrap()).await;
    assert_eq!(done["state"], "succeeded", "{done}");

    assert_eq!(file_at(&app, &t.key, "MEMORY.md", None).await, (200, memory_then.clone()));
    assert_eq!(file_at(&app, &t.key, "memory_summary.md", None).await, (200, summary_then));
    // memoryd's own files and the selection stay as the newest phase two left them.
    assert_eq!(file_at(&app, &t.key, "raw_memories.md", None).await, (200, raw_now));
    let selection = app.json(Method::GET, "/v1/workspaces/default/layouts/default/phase_two_selection", &t.key).await;
    assert_eq!(selection, selection_now);
    let instructions = app.json(Method::GET, "/v1/workspaces/default/layouts/default/instructions", &t.key).await;
    let text = instructions["instructions"].as_str().unwrap();
    assert!(text.contains("green tea") && !text.contains("black coffee"), "the read side serves the restored memory");

    let runs = app.json(Method::GET, RUNS, &t.key).await;
    let newest = &runs["runs"][0];
    assert_eq!((newest["state"].as_str(), newest["restored_from"].as_str()), (Some("succeeded"), Some(first.as_str())));
    assert_eq!(newest["job_id"], job["job_id"]);
    let restore_run = app.json(Method::GET, &format!("{RUNS}/{}", newest["run_id"].as_str().unwrap()), &t.key).await;
    let changed: Vec<&str> =
        restore_run["changes"].as_array().unwrap().iter().map(|c| c["path"].as_str().unwrap()).collect();
    assert_eq!(changed, ["MEMORY.md", "memory_summary.md"]);
    let diff = change(&restore_run, "MEMORY.md")["diff"].as_str().unwrap();
    assert!(diff.lines().any(|l| l.starts_with('-') && l.contains("black coffee")), "{diff}");

    // Restoring the second run puts its memory back in turn.
    let res = app.request(Method::POST, &format!("{RUNS}/{second}/restore"), &t.key).send().await.unwrap();
    let job: Value = res.json().await.unwrap();
    assert_eq!(app.wait_for_job(&t.key, job["job_id"].as_str().unwrap()).await["state"], "succeeded");
    assert_eq!(file_at(&app, &t.key, "MEMORY.md", None).await, (200, memory_now));

    let other = app.tenant().await;
    for (key, path, want) in [
        (&t.key, format!("{RUNS}/00000000-0000-4000-8000-000000000000/restore"), (404, "not_found")),
        (&t.key, format!("{RUNS}/junk/restore"), (404, "not_found")),
        (&other.key, format!("{RUNS}/{first}/restore"), (404, "not_found")),
    ] {
        let (status, code, _) = status_code_body(app.request(Method::POST, &path, key).send().await.unwrap()).await;
        assert_eq!((status, code.as_str()), want, "{path}");
    }
    let jobs = app.json(Method::GET, "/v1/jobs?kind=restore", &t.key).await;
    assert_eq!(jobs["jobs"].as_array().unwrap().len(), 2);
}

async fn history_is_kept_for_the_newest_runs_only(backend: Backend) {
    let app = TestApp::start_with(backend, |c| c.jobs.history_runs = 2).await;
    let t = app.tenant().await;
    let mut runs = Vec::new();
    for (n, said) in ["I like tea.", "I like coffee.", "I like cocoa.", "I like water."].iter().enumerate() {
        runs.push(conversation(&app, &t, &format!("s{n}"), said).await);
    }
    for (n, run) in runs.iter().enumerate() {
        let detail = app.json(Method::GET, &format!("{RUNS}/{run}"), &t.key).await;
        let kept = n >= 2;
        assert_eq!(detail["history_kept"], json!(kept), "run {n}");
        assert_eq!(detail["changes"].is_array(), kept, "run {n}");
        assert_eq!(detail["state"], "succeeded", "the run record itself stays");
        let (status, _) = file_at(&app, &t.key, "MEMORY.md", Some(run)).await;
        assert_eq!(status, if kept { 200 } else { 404 }, "run {n}");
    }
    let (status, code, body) = status_code_body(
        app.request(Method::POST, &format!("{RUNS}/{}/restore", runs[0]), &t.key).send().await.unwrap(),
    )
    .await;
    assert_eq!((status, code.as_str()), (409, "history_expired"), "{body}");
    assert!(body["detail"].as_str().unwrap().contains("the newest"), "{body}");
    // What the newest runs refer to is all there, and nothing else is.
    let (_, third) = file_at(&app, &t.key, "MEMORY.md", Some(&runs[2])).await;
    assert!(third.contains("cocoa") && !third.contains("water"), "{third}");
    if matches!(backend, Backend::Sqlite) {
        use sqlx::Connection;
        let url = format!("sqlite://{}", app.data_dir.join("memoryd.db").display());
        let mut db = sqlx::SqliteConnection::connect(&url).await.unwrap();
        let kept: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM run_history").fetch_one(&mut db).await.unwrap();
        let orphans: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM history_blobs b WHERE NOT EXISTS
               (SELECT 1 FROM run_files f WHERE f.before_hash = b.hash OR f.after_hash = b.hash)",
        )
        .fetch_one(&mut db)
        .await
        .unwrap();
        let blobs: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM history_blobs").fetch_one(&mut db).await.unwrap();
        assert_eq!((kept, orphans), (2, 0));
        assert!(blobs > 0);
    }
}
