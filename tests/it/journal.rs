//! Rollouts in an object store (SPEC §6.1): an acknowledged segment is in
//! the database's journal until the rollout's object holds it; phase one
//! moves the journal into the object before it reads the rollout, and reads
//! object and journal as one file.

use crate::harness::{Backend, Database, Tenant, TestApp};
use crate::s3;
use reqwest::Method;
use serde_json::{Value, json};

crate::both_databases!(
    acknowledged_lines_wait_in_the_journal_until_phase_one_moves_them_into_the_object,
    a_forgotten_rollout_leaves_no_object_and_no_journal_line,
    a_lost_rewrite_record_or_a_leftover_object_is_set_right,
    an_idle_rollout_s_lines_move_into_its_object_with_no_close,
);

async fn in_a_bucket(backend: Backend) -> (TestApp, String) {
    let (url, prefix) = s3::fresh_prefix().await;
    let app = TestApp::start_with(backend, move |config| s3::store_in(config, &url)).await;
    (app, prefix)
}

async fn say(app: &TestApp, t: &Tenant, session: &str, said: &str) {
    say_in(app, t, session, "chat-1", said).await;
}

async fn say_in(app: &TestApp, t: &Tenant, session: &str, rollout: &str, said: &str) {
    let body = json!({"rollout_id": rollout, "input": said, "final_output": format!("noted: {said}")});
    assert_eq!(app.post_segment(&t.key, session, "default", body).await.status(), 201);
}

async fn close(app: &TestApp, t: &Tenant, session: &str) {
    let closed = app.json(Method::POST, &format!("/v1/sessions/{session}/close?wait=30"), &t.key).await;
    assert_eq!(closed["state"], "closed", "{closed}");
    let jobs = app.settled_jobs(&t.key, "kind=phase_one").await;
    assert!(jobs.iter().all(|j| j["state"] == "succeeded"), "{jobs:?}");
}

/// The rollout's object's lines, each parsed.
async fn object_lines(prefix: &str, t: &Tenant) -> Vec<Value> {
    let objects = s3::objects_under(prefix).await;
    let object = objects.get(&format!("{}/default/sessions/chat-1.jsonl", t.id)).expect("the rollout's object");
    String::from_utf8(object.clone()).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

async fn acknowledged_lines_wait_in_the_journal_until_phase_one_moves_them_into_the_object(backend: Backend) {
    let (app, prefix) = in_a_bucket(backend).await;
    let t = app.tenant().await;
    let mut db = Database::connect(backend, &app.database_url).await;
    for said in ["I prefer green tea.", "Mornings only.", "No sugar."] {
        say(&app, &t, "s1", said).await;
    }
    // Acknowledged: in the journal, in no file and no object yet.
    assert_eq!(db.count("SELECT count(*) FROM rollout_journal").await, 3);
    assert!(!app.workspace_dir(&t, "default").join("sessions/chat-1.jsonl").exists());
    let objects = s3::objects_under(&prefix).await;
    assert!(!objects.keys().any(|k| k.contains("/sessions/")), "no rollout object: {:?}", objects.keys());

    close(&app, &t, "s1").await;
    let lines = object_lines(&prefix, &t).await;
    let said: Vec<&str> = lines.iter().map(|l| l["input"][0]["content"].as_str().unwrap()).collect();
    assert_eq!(said, ["I prefer green tea.", "Mornings only.", "No sugar."]);
    assert_eq!(db.count("SELECT count(*) FROM rollout_journal").await, 0, "the object holds the lines");
    assert_eq!(db.count("SELECT count(*) FROM rollouts WHERE object_len = committed_len").await, 1);

    // Another session goes on with the rollout: its line joins the object's at the next close.
    say(&app, &t, "s2", "Oolong on Sundays.").await;
    assert_eq!(db.count("SELECT count(*) FROM rollout_journal").await, 1);
    close(&app, &t, "s2").await;
    let lines = object_lines(&prefix, &t).await;
    assert_eq!(lines.len(), 4);
    assert_eq!(lines[3]["final_output"], "noted: Oolong on Sundays.");
    let raw = crate::bucket_files::memory_file(&app, &t, "raw_memories/chat-1.md").await;
    assert!(raw.contains("Oolong on Sundays"), "phase one read the whole rollout: {raw}");
}

/// Forgetting a rollout takes its object and its journal's lines; forgetting
/// the workspace takes every object under its prefix.
async fn a_forgotten_rollout_leaves_no_object_and_no_journal_line(backend: Backend) {
    let (app, prefix) = in_a_bucket(backend).await;
    let t = app.tenant().await;
    let mut db = Database::connect(backend, &app.database_url).await;
    let canary = "CANARY-7f3a-in-the-bucket";
    say_in(&app, &t, "s1", "chat-1", &format!("My locker code is {canary}.")).await;
    say_in(&app, &t, "s1", "kept", "I like oolong.").await;
    close(&app, &t, "s1").await;
    say_in(&app, &t, "s2", "chat-1", &format!("Again: {canary}.")).await;
    close(&app, &t, "s2").await;
    // As a line whose rewrite failed would be: still in the journal when the forget comes.
    db.run(match backend {
        Backend::Postgres | Backend::Bucket => {
            "INSERT INTO rollout_journal SELECT tenant_id, workspace, layout, rollout_id, committed_len,
                 convert_to('{\"input\": \"CANARY-7f3a-in-the-bucket\"}', 'UTF8') FROM rollouts WHERE rollout_id = 'chat-1'"
        }
        Backend::Sqlite => {
            "INSERT INTO rollout_journal SELECT tenant_id, workspace, layout, rollout_id, committed_len,
                 CAST('{\"input\": \"CANARY-7f3a-in-the-bucket\"}' AS BLOB) FROM rollouts WHERE rollout_id = 'chat-1'"
        }
    })
    .await;
    assert!(s3::objects_under(&prefix).await.values().any(|bytes| String::from_utf8_lossy(bytes).contains(canary)));

    let job = crate::forget::forget(&app, &t.key, "/v1/workspaces/default/layouts/default/rollouts/chat-1").await;
    assert_eq!(app.wait_for_job(&t.key, job["job_id"].as_str().unwrap()).await["state"], "succeeded");
    crate::bucket_files::chores_done(&mut db).await;
    let objects = s3::objects_under(&prefix).await;
    let rollouts: Vec<&String> = objects.keys().filter(|k| k.contains("/sessions/")).collect();
    assert_eq!(rollouts, [&format!("{}/default/sessions/kept.jsonl", t.id)]);
    assert!(objects.keys().all(|key| !key.contains("chat-1")), "{:?}", objects.keys());
    assert!(objects.keys().any(|key| key.ends_with("memories/raw_memories/kept.md")));
    assert!(objects.values().all(|bytes| !String::from_utf8_lossy(bytes).contains(canary)));
    assert_eq!(db.count("SELECT count(*) FROM rollout_journal").await, 0);

    let job = crate::forget::forget(&app, &t.key, "/v1/workspaces/default").await;
    assert_eq!(app.wait_for_job(&t.key, job["job_id"].as_str().unwrap()).await["state"], "succeeded");
    assert!(s3::objects_under(&prefix).await.is_empty(), "the workspace's prefix is empty");
}

/// The conditional paths of a rewrite: the version the database records is
/// not the object's (a rewrite whose record was lost), and an object left at
/// a rollout's key by a forget a crash cut short, under an id used again.
async fn a_lost_rewrite_record_or_a_leftover_object_is_set_right(backend: Backend) {
    let (app, prefix) = in_a_bucket(backend).await;
    let t = app.tenant().await;
    let mut db = Database::connect(backend, &app.database_url).await;
    say(&app, &t, "s1", "I prefer green tea.").await;
    close(&app, &t, "s1").await;
    db.run("UPDATE rollouts SET object_etag = '\"not-the-objects\"'").await;
    say(&app, &t, "s2", "Mornings only.").await;
    close(&app, &t, "s2").await;
    assert_eq!(object_lines(&prefix, &t).await.len(), 2);
    assert_eq!(db.count("SELECT count(*) FROM rollout_journal").await, 0);
    assert_eq!(db.count("SELECT count(*) FROM rollouts WHERE object_etag <> '\"not-the-objects\"'").await, 1);

    let job = crate::forget::forget(&app, &t.key, "/v1/workspaces/default/layouts/default/rollouts/chat-1").await;
    assert_eq!(app.wait_for_job(&t.key, job["job_id"].as_str().unwrap()).await["state"], "succeeded");
    let key = format!("{prefix}/{}/default/sessions/chat-1.jsonl", t.id);
    let leftover = format!("{{\"input\": \"CANARY-leftover {}\"}}\n", "x".repeat(4096));
    s3::bucket().put(&key.as_str().into(), leftover.into_bytes().into()).await.unwrap();
    say(&app, &t, "s3", "Oolong on Sundays.").await;
    close(&app, &t, "s3").await;
    let lines = object_lines(&prefix, &t).await;
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert_eq!(lines[0]["final_output"], "noted: Oolong on Sundays.");
    let raw = crate::bucket_files::memory_file(&app, &t, "raw_memories/chat-1.md").await;
    assert!(!raw.contains("CANARY"), "{raw}");
}

/// A rollout no phase one reads (its session still open) has its journal's
/// lines moved into its object once it has been idle.
async fn an_idle_rollout_s_lines_move_into_its_object_with_no_close(backend: Backend) {
    let (url, prefix) = s3::fresh_prefix().await;
    let app = TestApp::start_with(backend, move |config| {
        s3::store_in(config, &url);
        config.test_idle_rollout = Some(std::time::Duration::from_secs(1));
    })
    .await;
    let t = app.tenant().await;
    let mut db = Database::connect(backend, &app.database_url).await;
    say(&app, &t, "s1", "I prefer green tea.").await;
    say(&app, &t, "s1", "Mornings only.").await;
    let started = std::time::Instant::now();
    while db.count("SELECT count(*) FROM rollout_journal").await > 0 {
        assert!(started.elapsed() < std::time::Duration::from_secs(30), "the idle rollout kept its journal");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let lines = object_lines(&prefix, &t).await;
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[1]["final_output"], "noted: Mornings only.");
    assert_eq!(db.count("SELECT count(*) FROM rollouts WHERE object_len = committed_len").await, 1);
    let session = app.json(Method::GET, "/v1/sessions/s1", &t.key).await;
    assert_eq!(session["state"], "open", "{session}");
}
