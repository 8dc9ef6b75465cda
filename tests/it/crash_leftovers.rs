//! What a kill -9 leaves behind, and what removes it (SPEC §9, §2.7): a
//! killed import's staging files, an upload cut short, a rollout file longer
//! than what the database committed; and a resume that replays a backlog.

use crate::harness::{Backend, walk};
use crate::imports::tar_gz;
use crate::process::{Memoryd, database_env, get_json, new_tenant, post_segment};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};
use tokio::io::AsyncWriteExt;

fn staging_files(dir: &Path) -> Vec<PathBuf> {
    walk(dir)
        .into_iter()
        .filter(|p| p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with(".memoryd-")))
        .collect()
}

// The volume's own mechanism: a rollout file written past its commit (in a
// bucket what is not yet in a rollout's object is in the journal, whose
// rows a transaction writes whole).
crate::both_databases!(rollout_files_past_their_commit_are_repaired_at_start_up);

crate::every_backend!(
    a_killed_import_leaves_nothing_after_its_retry_and_a_forget,
    an_upload_cut_by_a_kill_is_swept_at_start_up,
);

async fn wait_for_job(http: &reqwest::Client, base: &str, key: &str, job_id: &str, limit: Duration) -> Value {
    let started = Instant::now();
    loop {
        let job = get_json(http, base, key, &format!("/v1/jobs/{job_id}")).await;
        if !matches!(job["state"].as_str(), Some("queued" | "running")) {
            return job;
        }
        assert!(started.elapsed() < limit, "the job did not finish: {job}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn memoryd_env(extra: Vec<(&'static str, String)>, database: &[(&'static str, String)]) -> Vec<(&'static str, String)> {
    let mut env = database.to_vec();
    env.extend(extra);
    env
}

/// The keys of workspace `imp`'s objects in the bucket, memoryd's own
/// (`own`) or its files'.
async fn keys_of_imp(env: &[(&str, String)], tenant: &str, own: bool) -> Vec<String> {
    let prefix = crate::s3::prefix_of(env).expect("files in a bucket");
    let keys = crate::s3::keys_under(&format!("{prefix}/{tenant}/imp")).await;
    keys.into_iter().filter(|key| key.starts_with(".memoryd/") == own).collect()
}

/// What an import killed mid-stage leaves that no reader sees: staging
/// files in the workspace's folder; in a bucket, objects no finish recorded.
async fn import_leftovers(env: &[(&str, String)], workspace: &Path, tenant: &str) -> Vec<String> {
    match crate::s3::prefix_of(env) {
        None => staging_files(workspace).iter().map(|p| p.display().to_string()).collect(),
        Some(_) => keys_of_imp(env, tenant, false).await,
    }
}

async fn a_killed_import_leaves_nothing_after_its_retry_and_a_forget(backend: Backend) {
    const CANARY: &str = "CANARY-IMPORTED-TEXT-5150";
    let dir = tempfile::tempdir().unwrap();
    let env = memoryd_env(vec![("MEMORYD_JOB_LEASE_SECS", "1".into())], &database_env(backend).await);
    let http = reqwest::Client::new();
    let first = Memoryd::spawn(dir.path(), "first", &["serve"], &env);
    first.ready(&http).await;
    let (tenant_id, key) = new_tenant(&http, &first.base).await;
    // Large enough that staging takes a while: 64 lines of 1 MiB, each with
    // the canary, then 32 MiB of notes (in a bucket the kill comes between
    // the rollout's upload and the notes').
    let mut rollout = Vec::new();
    for n in 0..64 {
        let pad: String = (0..(1 << 20) / 32).map(|_| uuid::Uuid::new_v4().simple().to_string()).collect();
        rollout.extend_from_slice(format!("{{\"n\":{n},\"said\":\"{CANARY}\",\"pad\":\"{pad}\"}}\n").as_bytes());
    }
    let mut notes = format!("{CANARY}\n");
    for _ in 0..512 {
        let line: String = (0..(64 << 10) / 32).map(|_| uuid::Uuid::new_v4().simple().to_string()).collect();
        notes.push_str(&line);
        notes.push('\n');
    }
    let archive = tar_gz(&[("sessions/big.jsonl", &rollout), ("memories/notes.md", notes.as_bytes())]);
    let res = http
        .post(format!("{}/v1/workspaces/imp/import", first.base))
        .bearer_auth(&key)
        .header("content-type", "application/gzip")
        .body(archive)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 202);
    let job: Value = res.json().await.unwrap();
    let job_id = job["job_id"].as_str().unwrap().to_owned();
    let workspace = dir.path().join(format!("memoryd-data/workspaces/{tenant_id}/imp"));
    let started = Instant::now();
    while import_leftovers(&env, &workspace, &tenant_id).await.is_empty() {
        assert!(started.elapsed() < Duration::from_secs(60), "the import never staged");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let mut first = first;
    first.signal("-KILL");
    first.exit().await;
    assert!(!import_leftovers(&env, &workspace, &tenant_id).await.is_empty(), "the kill left staged files");

    let second = Memoryd::spawn(dir.path(), "second", &["serve"], &env);
    second.ready(&http).await;
    let job = wait_for_job(&http, &second.base, &key, &job_id, Duration::from_secs(120)).await;
    assert_eq!(job["state"], "succeeded", "{job}");
    assert_eq!(staging_files(&workspace), Vec::<PathBuf>::new(), "no staging file anywhere in the workspace");
    let data = dir.path().join("memoryd-data");
    let read = crate::process::stored_file(&env, &data, &tenant_id, "imp", "sessions/big.jsonl").await;
    assert_eq!(read.map(|bytes| bytes.len()), Some(rollout.len()), "the retry placed the whole rollout");

    // Forgetting the imported conversation leaves no byte of it on the volume, nor in the bucket.
    let res = http
        .delete(format!("{}/v1/workspaces/imp/layouts/default/rollouts/big?mode=scrub", second.base))
        .bearer_auth(&key)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 202);
    let forget: Value = res.json().await.unwrap();
    let forget =
        wait_for_job(&http, &second.base, &key, forget["job_id"].as_str().unwrap(), Duration::from_secs(60)).await;
    assert_eq!(forget["state"], "succeeded", "{forget}");
    for file in walk(&data.join("workspaces")).into_iter().chain(walk(&data.join("imports"))) {
        let bytes = std::fs::read(&file).unwrap_or_default();
        let holds = bytes.windows(CANARY.len()).any(|w| w == CANARY.as_bytes());
        let is_memory_file = file.ends_with("memories/notes.md");
        assert!(!holds || is_memory_file, "{} holds the forgotten text", file.display());
    }
    let imports = format!(".memoryd/imports/{job_id}.tar.gz");
    let started = Instant::now();
    while backend == Backend::Bucket && keys_of_imp(&env, &tenant_id, true).await.contains(&imports) {
        assert!(started.elapsed() < Duration::from_secs(10), "the archive stays in the bucket");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // In a bucket: the notes, at their key and as their versions (the
    // killed attempt's too, until the sweep), and nothing else.
    let started = Instant::now();
    loop {
        let holding = crate::s3::keys_holding(&env, CANARY).await;
        let notes_alone = holding.iter().all(|key| key.ends_with("/memories/notes.md"));
        if notes_alone && (backend != Backend::Bucket || !holding.is_empty()) {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(30), "the bucket keeps the forgotten text: {holding:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn an_upload_cut_by_a_kill_is_swept_at_start_up(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let env = memoryd_env(vec![("MEMORYD_BODY_TIMEOUT_SECS", "1".into())], &database_env(backend).await);
    let http = reqwest::Client::new();
    let mut first = Memoryd::spawn(dir.path(), "first", &["serve"], &env);
    first.ready(&http).await;
    let (_, key) = new_tenant(&http, &first.base).await;
    // A chunked body that keeps arriving: the process dies while it is being written.
    let address = first.base.trim_start_matches("http://").to_owned();
    let mut socket = tokio::net::TcpStream::connect(&address).await.unwrap();
    let head = format!(
        "POST /v1/workspaces/cut/import HTTP/1.1\r\nHost: {address}\r\nAuthorization: Bearer {key}\r\n\
         Content-Type: application/gzip\r\nTransfer-Encoding: chunked\r\n\r\n"
    );
    socket.write_all(head.as_bytes()).await.unwrap();
    let chunk = [format!("{:x}\r\n", 64 << 10).into_bytes(), vec![0x1f; 64 << 10], b"\r\n".to_vec()].concat();
    let imports = dir.path().join("memoryd-data/imports");
    let started = Instant::now();
    loop {
        socket.write_all(&chunk).await.unwrap();
        if walk(&imports).iter().any(|f| std::fs::metadata(f).is_ok_and(|m| m.len() > 0)) {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(20), "the upload never reached the disk");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    first.signal("-KILL");
    first.exit().await;
    drop(socket);
    assert_eq!(walk(&imports).len(), 1, "the kill left the partial upload");
    // Silent past the body timeout, it is no upload's: the next start removes it.
    tokio::time::sleep(Duration::from_secs(7)).await;
    let second = Memoryd::spawn(dir.path(), "second", &["serve"], &env);
    second.ready(&http).await;
    let started = Instant::now();
    while !walk(&imports).is_empty() {
        assert!(started.elapsed() < Duration::from_secs(20), "the cut upload was never swept");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Makes `path` look untouched for ten minutes.
fn age(path: &Path) {
    let then = SystemTime::now() - Duration::from_secs(600);
    std::fs::File::options().write(true).open(path).unwrap().set_modified(then).unwrap();
}

async fn rollout_files_past_their_commit_are_repaired_at_start_up(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let env = database_env(backend).await;
    let http = reqwest::Client::new();
    let mut first = Memoryd::spawn(dir.path(), "first", &["serve"], &env);
    first.ready(&http).await;
    let (tenant_id, key) = new_tenant(&http, &first.base).await;
    post_segment(&http, &first.base, &key, "s", json!({"rollout_id": "kept", "input": "acknowledged"})).await;
    first.signal("-KILL");
    first.exit().await;
    // What a kill between an append's write and its commit leaves: a tail
    // past the committed length, and a file of a rollout with no row.
    let sessions = dir.path().join(format!("memoryd-data/workspaces/{tenant_id}/default/sessions"));
    let kept = sessions.join("kept.jsonl");
    let committed = std::fs::read(&kept).unwrap();
    let mut longer = committed.clone();
    longer.extend_from_slice(b"{\"input\":\"UNACKNOWLEDGED-TAIL\"}\n");
    std::fs::write(&kept, &longer).unwrap();
    let ghost = sessions.join("ghost.jsonl");
    std::fs::write(&ghost, b"{\"input\":\"UNACKNOWLEDGED-FIRST-APPEND\"}\n").unwrap();
    let fresh = sessions.join("fresh.jsonl");
    std::fs::write(&fresh, b"{\"input\":\"an append may be committing now\"}\n").unwrap();
    age(&kept);
    age(&ghost);

    let second = Memoryd::spawn(dir.path(), "second", &["serve"], &env);
    second.ready(&http).await;
    let started = Instant::now();
    while ghost.exists() || std::fs::read(&kept).unwrap() != committed {
        assert!(started.elapsed() < Duration::from_secs(20), "the rollout files were not repaired");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(fresh.exists(), "a file written moments ago may belong to an append under way");
    // The rollout goes on from what was committed.
    post_segment(&http, &second.base, &key, "s", json!({"rollout_id": "kept", "input": "next"})).await;
    let text = std::fs::read_to_string(&kept).unwrap();
    assert_eq!(text.lines().count(), 2, "{text}");
}
