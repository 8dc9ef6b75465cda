//! `memoryd copy-to-bucket`: a stopped deployment's workspaces copied into
//! a bucket of the tests' S3 server, in the bucket's layout, as an export
//! would take them, then checked.

use crate::fake_llm::{FakeLlm, Reply};
use crate::harness::Backend;
use crate::process::{Memoryd, database_env, first_process_mid_call, get_json, model_env, new_tenant};
use crate::s3;
use serde_json::json;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Output};

/// Every file under `dir`, by its path below it (staging files left out).
fn files_below(dir: &Path, below: &Path, found: &mut BTreeMap<String, Vec<u8>>) {
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            files_below(&path, below, found);
        } else if !entry.file_name().to_string_lossy().starts_with(".memoryd-") {
            let relative = path.strip_prefix(below).unwrap().to_string_lossy().into_owned();
            found.insert(relative, std::fs::read(&path).unwrap());
        }
    }
}

fn copy_to_bucket(dir: &Path, url: &str, database: &[(&'static str, String)]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_memoryd"));
    command.args(["copy-to-bucket", url]).current_dir(dir).env_remove("DATABASE_URL");
    command.envs(database.iter().cloned()).envs(s3::process_env());
    command.output().unwrap()
}

// A copy goes from a volume's data dir into a bucket: one row per database.
crate::both_databases!(
    a_stopped_deployment_is_copied_into_a_bucket_as_an_export_takes_it,
    no_copy_while_a_replica_may_still_write,
);

async fn a_stopped_deployment_is_copied_into_a_bucket_as_an_export_takes_it(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let database = database_env(backend).await;
    let http = reqwest::Client::new();
    let mut memoryd = Memoryd::spawn(dir.path(), "memoryd", &["serve"], &database);
    memoryd.ready(&http).await;
    let (tenant, key) = new_tenant(&http, &memoryd.base).await;
    for (session, workspace, rollout, said) in [
        ("s1", "default", "chat-1", "I prefer green tea."),
        ("s1", "default", "chat-2", "The deploy needs the VPN."),
        ("s2", "other", "chat-3", "My timezone is Europe/Berlin."),
    ] {
        let body = json!({"rollout_id": rollout, "input": said, "final_output": "noted"});
        let path = format!("{}/v1/sessions/{session}/layouts/default/segments?workspace={workspace}", memoryd.base);
        assert_eq!(http.post(path).bearer_auth(&key).json(&body).send().await.unwrap().status(), 201);
    }
    for session in ["s1", "s2"] {
        let path = format!("{}/v1/sessions/{session}/close?wait=60", memoryd.base);
        let closed: serde_json::Value = http.post(path).bearer_auth(&key).send().await.unwrap().json().await.unwrap();
        assert_eq!(closed["state"], "closed", "{closed}");
    }
    let jobs = get_json(&http, &memoryd.base, &key, "/v1/jobs?kind=phase_two").await;
    assert!(jobs["jobs"].as_array().unwrap().iter().all(|j| j["state"] == "succeeded"), "{jobs}");
    memoryd.signal("-TERM");
    assert!(memoryd.exit().await.success());

    // What the volume holds; then a line no append committed (a crash's), which the copy leaves out.
    let tenant_dir = dir.path().join(format!("memoryd-data/workspaces/{tenant}"));
    let mut expected = BTreeMap::new();
    files_below(&tenant_dir, &tenant_dir, &mut expected);
    let rollout = tenant_dir.join("default/sessions/chat-1.jsonl");
    let mut tail = std::fs::OpenOptions::new().append(true).open(&rollout).unwrap();
    std::io::Write::write_all(&mut tail, b"{\"never\":\"acknowledged\"}\n").unwrap();
    for wanted in ["default/memories/MEMORY.md", "default/sessions/chat-1.jsonl", "other/sessions/chat-3.jsonl"] {
        assert!(expected.contains_key(wanted), "{wanted} in {:?}", expected.keys());
    }

    let (url, prefix) = s3::fresh_prefix().await;
    let copied = copy_to_bucket(dir.path(), &url, &database);
    let said = String::from_utf8_lossy(&copied.stdout);
    assert!(copied.status.success(), "{said}{}", String::from_utf8_lossy(&copied.stderr));
    assert!(said.contains(&format!("copied {} files", expected.len())) && said.contains("read each back"), "{said}");
    copied_as_expected(&prefix, &tenant, &expected).await;

    // Again: the same objects, checked again (the memory files' versions replaced).
    assert!(copy_to_bucket(dir.path(), &url, &database).status.success());
    copied_as_expected(&prefix, &tenant, &expected).await;
    // An object that is not the data dir's fails the check, and is named.
    s3::bucket().put(&format!("{prefix}/stray.txt").into(), "x".into()).await.unwrap();
    let refused = copy_to_bucket(dir.path(), &url, &database);
    let why = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success() && why.contains("stray.txt"), "{why}");
    served_from_the_bucket(dir.path(), &url, &database, &key, &expected).await;

    let bad = copy_to_bucket(dir.path(), "s3://Not_A_Bucket/x", &database);
    let why = String::from_utf8_lossy(&bad.stderr);
    assert!(!bad.status.success() && why.contains("bucket name"), "{why}");
    // A data dir that is not the deployment's copies nothing and says so.
    let elsewhere = tempfile::tempdir().unwrap();
    let (url, prefix) = s3::fresh_prefix().await;
    let wrong = copy_to_bucket(elsewhere.path(), &url, &database);
    let why = String::from_utf8_lossy(&wrong.stderr);
    assert!(!wrong.status.success() && why.contains("holds no workspaces"), "{why}");
    assert!(s3::objects_under(&prefix).await.is_empty());
}

/// The tenant's objects are the data dir's files at their plain keys, and
/// one version of each memory file (memoryd's readers read those).
async fn copied_as_expected(prefix: &str, tenant: &str, expected: &BTreeMap<String, Vec<u8>>) {
    let in_bucket = s3::objects_under(&format!("{prefix}/{tenant}")).await;
    let (versions, plain): (BTreeMap<_, _>, BTreeMap<_, _>) =
        in_bucket.into_iter().partition(|(key, _)| key.contains("/.memoryd/versions/"));
    assert_eq!(plain.keys().collect::<Vec<_>>(), expected.keys().collect::<Vec<_>>());
    for (path, bytes) in expected {
        assert!(plain[path] == *bytes, "{path} holds its file's committed bytes");
    }
    let memory_files = expected.keys().filter(|k| !k.contains("/sessions/")).count();
    assert_eq!(versions.len(), memory_files, "one version of each memory file: {:?}", versions.keys());
}

/// memoryd started on the bucket (the same database) serves what was
/// copied: the memory files, and each conversation up to its committed
/// length, which an append then continues.
async fn served_from_the_bucket(
    dir: &Path,
    url: &str,
    database: &[(&'static str, String)],
    key: &str,
    expected: &BTreeMap<String, Vec<u8>>,
) {
    let mut env = database.to_vec();
    env.push(("MEMORYD_STORAGE", url.to_owned()));
    env.extend(s3::process_env());
    // Over the volume's workspaces a replica on the bucket refuses to start
    // (its copies' folder is wiped at start-up); moved away, they are kept.
    let mut serve = Command::new("timeout");
    serve.args(["60", env!("CARGO_BIN_EXE_memoryd"), "serve"]).current_dir(dir).env_remove("DATABASE_URL");
    let refused = serve.envs(env.iter().cloned()).env("MEMORYD_LISTEN", "127.0.0.1:0").output().unwrap();
    let why = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success() && why.contains("holds a volume's workspaces"), "{why}");
    let (volume, moved) = (dir.join("memoryd-data/workspaces"), dir.join("memoryd-data/workspaces-volume"));
    std::fs::rename(&volume, &moved).unwrap();
    let http = reqwest::Client::new();
    let mut memoryd = Memoryd::spawn(dir, "on-the-bucket", &["serve"], &env);
    memoryd.ready(&http).await;
    let file = |path: &str| http.get(format!("{}/v1/workspaces/default/layouts/default/files/{path}", memoryd.base));
    let memory = file("MEMORY.md").bearer_auth(key).send().await.unwrap();
    assert_eq!(memory.status(), 200);
    assert_eq!(memory.bytes().await.unwrap(), expected["default/memories/MEMORY.md"]);
    let exported = export(&http, &memoryd.base, key, "default").await;
    for (path, bytes) in expected.iter().filter(|(p, _)| p.starts_with("default/")) {
        let relative = path.strip_prefix("default/").unwrap();
        assert_eq!(exported.get(relative), Some(bytes), "{relative} as copied");
    }
    let body = json!({"rollout_id": "chat-2", "input": "And the printer is on floor 2.", "final_output": "noted"});
    let path = format!("{}/v1/sessions/s3/layouts/default/segments", memoryd.base);
    let appended = http.post(path).bearer_auth(key).json(&body).send().await.unwrap();
    assert_eq!(appended.status(), 201, "{}", appended.text().await.unwrap());
    let conversation = &export(&http, &memoryd.base, key, "default").await["sessions/chat-2.jsonl"];
    let before = &expected["default/sessions/chat-2.jsonl"];
    assert!(conversation.starts_with(before) && conversation.len() > before.len(), "continued after its copy");
    let note = json!({"operations": [{"command": "create", "path": "notes/printer.md", "file_text": "floor 2\n"}]});
    let path = format!("{}/v1/workspaces/other/layouts/default/memory/edits", memoryd.base);
    let edited = http.post(path).bearer_auth(key).json(&note).send().await.unwrap();
    assert_eq!(edited.status(), 200, "{}", edited.text().await.unwrap());
    memoryd.signal("-TERM");
    assert!(memoryd.exit().await.success());
    let mut kept = BTreeMap::new();
    files_below(&moved, &moved, &mut kept);
    assert!(kept.keys().any(|k| k.ends_with("default/memories/MEMORY.md")), "{:?}", kept.keys());
    // The data dir again (in place of the replica's copies): its older files
    // would undo what the bucket served since.
    std::fs::remove_dir_all(&volume).unwrap();
    std::fs::rename(&moved, &volume).unwrap();
    let again = copy_to_bucket(dir, url, database);
    let why = String::from_utf8_lossy(&again.stderr);
    assert!(!again.status.success() && why.contains("has changed on a bucket since it was copied"), "{why}");
}

/// A workspace's export, file by file.
async fn export(http: &reqwest::Client, base: &str, key: &str, workspace: &str) -> BTreeMap<String, Vec<u8>> {
    let res = http.get(format!("{base}/v1/workspaces/{workspace}/export")).bearer_auth(key).send().await.unwrap();
    assert_eq!(res.status(), 200);
    let bytes = res.bytes().await.unwrap();
    let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(&bytes[..]));
    let mut files = BTreeMap::new();
    for entry in archive.entries().unwrap() {
        let mut entry = entry.unwrap();
        let mut content = Vec::new();
        std::io::Read::read_to_end(&mut entry, &mut content).unwrap();
        files.insert(entry.path().unwrap().to_string_lossy().into_owned(), content);
    }
    files
}

/// A job some replica holds under a live lease refuses the copy (its worker
/// may still publish); once the lease of a killed replica's job has
/// expired, nothing can write any more and the copy goes ahead.
async fn no_copy_while_a_replica_may_still_write(backend: Backend) {
    let fake = FakeLlm::start().await;
    fake.set_default(Reply::artifacts("never-recorded", "s", "m").after(std::time::Duration::from_secs(60)));
    let dir = tempfile::tempdir().unwrap();
    let database = database_env(backend).await;
    let mut env = model_env(&fake);
    env.extend(database.clone());
    env.push(("MEMORYD_JOB_LEASE_SECS", "8".into()));
    let http = reqwest::Client::new();
    let (mut memoryd, _, _) = first_process_mid_call(dir.path(), &env, &fake, &http).await;
    memoryd.signal("-KILL");
    memoryd.exit().await;
    let killed = std::time::Instant::now();

    let (url, prefix) = s3::fresh_prefix().await;
    let refused = copy_to_bucket(dir.path(), &url, &database);
    let why = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success() && why.contains("running jobs: 1"), "{why}");
    assert!(s3::objects_under(&prefix).await.is_empty(), "nothing written before the refusal");

    tokio::time::sleep(std::time::Duration::from_secs(8).saturating_sub(killed.elapsed())).await;
    let copied = copy_to_bucket(dir.path(), &url, &database);
    assert!(copied.status.success(), "{}", String::from_utf8_lossy(&copied.stderr));
    assert!(!s3::objects_under(&prefix).await.is_empty());
}
