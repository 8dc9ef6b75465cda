//! Memory files in an object store (SPEC §6.1): a run's files are versions
//! the fenced finish makes current in the database, placed at their plain
//! keys after; memoryd's readers read a replica's copy of the current
//! generation; replicas share the database and the bucket, no folder.

use crate::harness::{Backend, Database, Tenant, TestApp};
use crate::s3;
use reqwest::Method;
use serde_json::json;
use std::time::{Duration, Instant};

crate::both_databases!(a_run_s_files_are_current_in_the_database_and_placed_at_their_plain_keys,);

async fn say(app: &TestApp, t: &Tenant, session: &str, rollout: &str, said: &str) {
    let body = json!({"rollout_id": rollout, "input": said, "final_output": format!("noted: {said}")});
    assert_eq!(app.post_segment(&t.key, session, "default", body).await.status(), 201);
}

/// Closes a session and waits for its phase one and phase two.
async fn close_and_consolidate(app: &TestApp, t: &Tenant, session: &str) {
    let closed = app.json(Method::POST, &format!("/v1/sessions/{session}/close?wait=30"), &t.key).await;
    assert_eq!(closed["state"], "closed", "{closed}");
    for kind in ["phase_one", "phase_two"] {
        let jobs = app.settled_jobs(&t.key, &format!("kind={kind}")).await;
        assert!(jobs.iter().all(|j| j["state"] == "succeeded"), "{jobs:?}");
    }
}

pub(crate) async fn memory_file(app: &TestApp, t: &Tenant, path: &str) -> String {
    let res = app.request(Method::GET, &format!("/v1/workspaces/default/layouts/default/files/{path}"), &t.key);
    let res = res.send().await.unwrap();
    assert_eq!(res.status(), 200, "{path}");
    res.text().await.unwrap()
}

/// Until the finishes' chores are done: no row left in the to-do table.
pub(crate) async fn chores_done(db: &mut Database) {
    let started = Instant::now();
    while db.count("SELECT count(*) FROM workspace_file_chores").await > 0 {
        assert!(started.elapsed() < Duration::from_secs(20), "chores were left undone");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Each current file has one version object and a plain key with its bytes;
/// no other version is left.
async fn bucket_matches_the_database(prefix: &str, t: &Tenant, db: &mut Database) {
    let objects = s3::objects_under(prefix).await;
    let base = format!("{}/default", t.id);
    let versions: Vec<&String> = objects.keys().filter(|k| k.contains("/.memoryd/versions/")).collect();
    let current = db.count("SELECT count(*) FROM workspace_files").await;
    assert!(current > 0);
    assert_eq!(versions.len() as i64, current, "one version per current file: {versions:?}");
    for key in versions {
        let rest = key.strip_prefix(&format!("{base}/.memoryd/versions/")).unwrap();
        let (_publish, path) = rest.split_once('/').unwrap();
        let plain = objects.get(&format!("{base}/{path}")).unwrap_or_else(|| panic!("{path} has no plain key"));
        assert_eq!(plain, &objects[key], "{path}'s plain key holds its current version");
    }
}

async fn a_run_s_files_are_current_in_the_database_and_placed_at_their_plain_keys(backend: Backend) {
    let (url, prefix) = s3::fresh_prefix().await;
    let app = TestApp::start_with(backend, |config| s3::store_in(config, &url)).await;
    let t = app.tenant().await;
    let mut db = Database::connect(backend, &app.database_url).await;
    say(&app, &t, "s1", "chat-1", "I prefer green tea in the morning.").await;
    close_and_consolidate(&app, &t, "s1").await;
    chores_done(&mut db).await;
    bucket_matches_the_database(&prefix, &t, &mut db).await;
    let objects = s3::objects_under(&prefix).await;
    let memory = memory_file(&app, &t, "MEMORY.md").await;
    assert!(!memory.is_empty());
    assert_eq!(objects[&format!("{}/default/memories/MEMORY.md", t.id)], memory.as_bytes());
    let raw = memory_file(&app, &t, "raw_memories/chat-1.md").await;
    assert!(raw.contains("green tea"), "{raw}");

    // A second run replaces files: their earlier versions go, the reader sees the new ones.
    say(&app, &t, "s2", "chat-2", "Oolong on Sundays, please.").await;
    close_and_consolidate(&app, &t, "s2").await;
    chores_done(&mut db).await;
    bucket_matches_the_database(&prefix, &t, &mut db).await;
    assert!(memory_file(&app, &t, "raw_memories/chat-2.md").await.contains("Oolong"));
    let objects = s3::objects_under(&prefix).await;
    assert_eq!(
        objects[&format!("{}/default/memories/MEMORY.md", t.id)],
        memory_file(&app, &t, "MEMORY.md").await.as_bytes()
    );
    assert!(!app.workspace_dir(&t, "default").join("sessions").exists(), "no rollout file on the replica");
}

/// Two replicas on one Postgres and one bucket (at the prefix returned),
/// each with a data dir of its own.
async fn two_replicas() -> (TestApp, TestApp, String) {
    let (url, prefix) = s3::fresh_prefix().await;
    let a = TestApp::start_with(Backend::Postgres, |config| s3::store_in(config, &url)).await;
    let shared = a.database_url.clone();
    let b = TestApp::start_with(Backend::Postgres, |config| {
        s3::store_in(config, &url);
        config.database_url = Some(shared);
    })
    .await;
    (a, b, prefix)
}

/// Two replicas on one Postgres and one bucket, each with a data dir of its
/// own: a session's segments appended to one and closed on the other, its
/// memory read from both; a later run on the other shows on the first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_with_no_shared_folder_serve_one_tenant() {
    let (a, b, prefix) = two_replicas().await;
    assert_ne!(a.data_dir, b.data_dir);
    let t = a.tenant().await;
    let mut db = Database::connect(Backend::Postgres, &a.database_url).await;
    say(&a, &t, "s1", "chat-1", "I prefer green tea in the morning.").await;
    say(&a, &t, "s1", "chat-1", "And no sugar.").await;
    close_and_consolidate(&b, &t, "s1").await;
    for replica in [&a, &b] {
        let raw = memory_file(replica, &t, "raw_memories/chat-1.md").await;
        assert!(raw.contains("green tea") && raw.contains("sugar"), "{raw}");
    }
    let first = memory_file(&a, &t, "MEMORY.md").await;
    assert_eq!(first, memory_file(&b, &t, "MEMORY.md").await);

    say(&b, &t, "s2", "chat-2", "Oolong on Sundays, please.").await;
    close_and_consolidate(&a, &t, "s2").await;
    for replica in [&a, &b] {
        assert!(memory_file(replica, &t, "raw_memories/chat-2.md").await.contains("Oolong"));
        let listed = replica.json(Method::GET, "/v1/workspaces/default/layouts/default/files", &t.key).await;
        let paths: Vec<&str> = listed["files"].as_array().unwrap().iter().filter_map(|f| f["path"].as_str()).collect();
        assert!(paths.contains(&"raw_memories/chat-2.md"), "{listed}");
    }
    assert_eq!(memory_file(&a, &t, "MEMORY.md").await, memory_file(&b, &t, "MEMORY.md").await);
    chores_done(&mut db).await;
    bucket_matches_the_database(&prefix, &t, &mut db).await;
    for replica in [&a, &b] {
        assert!(!replica.workspace_dir(&t, "default").join("sessions").exists(), "no rollout file on a replica");
    }
}

/// Every file under `dir` that holds `needle`.
fn files_holding(dir: &std::path::Path, needle: &str) -> Vec<std::path::PathBuf> {
    let holds =
        |path: &std::path::PathBuf| std::fs::read(path).is_ok_and(|b| String::from_utf8_lossy(&b).contains(needle));
    crate::harness::walk(dir).into_iter().filter(holds).collect()
}

/// A workspace forgotten through one replica: the bucket's prefix is empty,
/// and neither replica keeps a copy of it (the other drops its own at its
/// next sweep), no file of either data dir holds the canary.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forgotten_workspace_leaves_no_object_and_no_copy_on_any_replica() {
    let (a, b, prefix) = two_replicas().await;
    let t = a.tenant().await;
    let canary = format!("CANARY-{}", uuid::Uuid::new_v4().simple());
    say(&a, &t, "s1", "chat-1", &format!("My locker code is {canary}.")).await;
    close_and_consolidate(&a, &t, "s1").await;
    for replica in [&a, &b] {
        assert!(memory_file(replica, &t, "raw_memories/chat-1.md").await.contains(&canary));
        assert!(!files_holding(&replica.data_dir, &canary).is_empty(), "the read made a copy");
    }
    let job = crate::forget::forget(&a, &t.key, "/v1/workspaces/default").await;
    assert_eq!(a.wait_for_job(&t.key, job["job_id"].as_str().unwrap()).await["state"], "succeeded");
    assert!(s3::objects_under(&prefix).await.is_empty(), "the workspace's prefix is empty");
    assert!(files_holding(&a.data_dir, &canary).is_empty(), "the forgetting replica dropped its copy");
    let started = Instant::now();
    while !files_holding(&b.data_dir, &canary).is_empty() {
        assert!(started.elapsed() < Duration::from_secs(20), "the other replica kept its copy");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Versions no finish recorded and archives no import job will read are
/// swept; a current version stays.
#[tokio::test]
async fn versions_and_archives_nobody_reads_are_swept() {
    let app = TestApp::start(Backend::Bucket).await;
    let t = app.tenant().await;
    let archive = crate::imports::tar_gz(&[("memories/MEMORY.md", b"kept")]);
    assert_eq!(crate::imports::imported(&app, &t, "ws", archive).await["state"], "succeeded");
    let prefix = app.bucket_prefix.clone().unwrap();
    let own = format!("{prefix}/{}/ws/.memoryd", t.id);
    // The import's own archive goes right after its job's finish.
    let started = Instant::now();
    while app.stored_now(&t, "ws").await.iter().any(|key| key.starts_with(".memoryd/imports/")) {
        assert!(started.elapsed() < Duration::from_secs(10), "the import's archive is kept");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (version, orphan) = (uuid::Uuid::new_v4(), uuid::Uuid::new_v4());
    let planted = [format!("{own}/versions/{version}/memories/MEMORY.md"), format!("{own}/imports/{orphan}.tar.gz")];
    for key in &planted {
        s3::bucket().put(&key.as_str().into(), b"left".to_vec().into()).await.unwrap();
    }
    let store = memoryd::store::connect(&app.database_url).await.unwrap();
    let url = format!("s3://{}/{prefix}", s3::BUCKET).parse().unwrap();
    let bucket = memoryd::bucket::Bucket::new(url, s3::bucket());
    assert_eq!(bucket.remove_unreferenced_versions(store.as_ref(), Duration::ZERO).await.unwrap(), 2);
    let left = s3::objects_under(&prefix).await;
    assert!(planted.iter().all(|key| !left.contains_key(key.strip_prefix(&format!("{prefix}/")).unwrap())));
    assert_eq!(app.file_text(&t, "ws", "memories/MEMORY.md").await, "kept");
    assert_eq!(bucket.remove_unreferenced_versions(store.as_ref(), Duration::ZERO).await.unwrap(), 0);
}
