//! Moving a workspace out (SPEC §2.7): the export is every file of the
//! workspace as of one instant, rollouts at their committed lengths, with a
//! manifest that names nothing of the tenant or the host.

use crate::both_backends;
use crate::harness::{Backend, Tenant, TestApp, status_code_body};
use reqwest::Method;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::Path;

both_backends!(
    an_export_holds_every_file_with_rollouts_at_their_committed_length,
    an_export_taken_during_appends_holds_whole_lines
);

/// The archive's entries, in order, by path.
async fn export(app: &TestApp, t: &Tenant, workspace: &str) -> Vec<(String, Vec<u8>)> {
    let res = app.request(Method::GET, &format!("/v1/workspaces/{workspace}/export"), &t.key).send().await.unwrap();
    assert_eq!(res.status(), 200);
    assert_eq!(res.headers()["content-type"], "application/gzip");
    let bytes = res.bytes().await.unwrap();
    let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(&bytes[..]));
    archive
        .entries()
        .unwrap()
        .map(|entry| {
            let mut entry = entry.unwrap();
            assert_eq!(entry.header().entry_type(), tar::EntryType::Regular);
            let mut content = Vec::new();
            entry.read_to_end(&mut content).unwrap();
            (entry.path().unwrap().to_string_lossy().into_owned(), content)
        })
        .collect()
}

fn files_under(dir: &Path, root: &Path, found: &mut BTreeMap<String, Vec<u8>>) {
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            files_under(&path, root, found);
        } else {
            let relative = path.strip_prefix(root).unwrap().to_string_lossy().into_owned();
            found.insert(relative, std::fs::read(&path).unwrap());
        }
    }
}

fn manifest(entries: &[(String, Vec<u8>)]) -> Value {
    assert_eq!(entries[0].0, "memoryd-export.json", "the manifest comes first");
    serde_json::from_slice(&entries[0].1).unwrap()
}

async fn an_export_holds_every_file_with_rollouts_at_their_committed_length(backend: Backend) {
    let app = TestApp::start(backend).await;
    let t = app.tenant().await;
    for (session, rollout, said) in
        [("s1", "chat-1", "I prefer green tea."), ("s1", "chat-1", "and oat milk"), ("s2", "chat-2", "hi")]
    {
        let body = json!({"rollout_id": rollout, "input": said, "final_output": "noted"});
        let path = format!("/v1/sessions/{session}/layouts/default/segments?workspace=ops");
        assert_eq!(app.request(Method::POST, &path, &t.key).json(&body).send().await.unwrap().status(), 201);
    }
    let closed = app.json(Method::POST, "/v1/sessions/s1/close?wait=30", &t.key).await;
    assert_eq!(closed["state"], "closed", "{closed}");
    app.publishes_done().await;
    // A crash left a half-written line after chat-2's committed length.
    let workspace = app.workspace_dir(&t, "ops");
    let chat_2 = workspace.join("sessions/chat-2.jsonl");
    let committed = std::fs::read(&chat_2).unwrap();
    std::fs::OpenOptions::new().append(true).open(&chat_2).unwrap().write_all(b"{\"half").unwrap();

    let entries = export(&app, &t, "ops").await;
    let manifest = manifest(&entries);
    let text = String::from_utf8(entries[0].1.clone()).unwrap();
    assert!(!text.contains(&t.id) && !text.contains(&t.key), "no tenant id or key in the manifest");
    assert!(!text.contains(app.data_dir.to_str().unwrap()), "no absolute path in the manifest");
    assert_eq!((manifest["format"].as_str(), manifest["version"].as_u64()), (Some("memoryd-export"), Some(1)));
    assert_eq!(manifest["workspace"], "ops");
    let default = &manifest["layouts"][0];
    assert_eq!(default["name"], "default");
    assert_eq!(default["config"]["memories_dir"], "memories");
    let rollouts: BTreeMap<&str, u64> = default["rollouts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["rollout_id"].as_str().unwrap(), r["committed_len"].as_u64().unwrap()))
        .collect();
    assert_eq!(rollouts["chat-2"], committed.len() as u64);
    assert_eq!(rollouts.len(), 2);
    assert_eq!(default["raw_memories"][0]["rollout_id"], "chat-1", "{default}");
    assert!(default["selection"]["selected"].is_array(), "{default}");

    let mut on_disk = BTreeMap::new();
    files_under(&workspace, &workspace, &mut on_disk);
    let archived: BTreeMap<String, Vec<u8>> = entries[1..].iter().cloned().collect();
    assert_eq!(archived.keys().collect::<Vec<_>>(), on_disk.keys().collect::<Vec<_>>(), "every file, once");
    for (path, content) in &archived {
        if path == "sessions/chat-2.jsonl" {
            assert_eq!(content, &committed, "the uncommitted tail is cut");
        } else {
            assert_eq!(content, &on_disk[path], "{path} as on disk");
        }
    }
    assert!(archived.contains_key("memories/MEMORY.md") && archived.contains_key("memories/raw_memories/chat-1.md"));

    let (status, code, _) =
        status_code_body(app.request(Method::GET, "/v1/workspaces/nowhere/export", &t.key).send().await.unwrap()).await;
    assert_eq!((status, code.as_str()), (404, "not_found"));
    let other = app.tenant().await;
    let res = app.request(Method::GET, "/v1/workspaces/ops/export", &other.key).send().await.unwrap();
    assert_eq!(res.status(), 404, "another tenant's workspace is not there");
    assert_eq!(app.request(Method::GET, "/v1/workspaces/ops/export", "nope").send().await.unwrap().status(), 401);
}

async fn an_export_taken_during_appends_holds_whole_lines(backend: Backend) {
    let app = TestApp::start(backend).await;
    let t = app.tenant().await;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    let stop = std::sync::Arc::new(AtomicBool::new(false));
    let writing = std::sync::Arc::new(AtomicUsize::new(0));
    let mut writers = tokio::task::JoinSet::new();
    for client in 0..8 {
        let (http, base, key) = (app.client.clone(), app.base.clone(), t.key.clone());
        let (stop, writing) = (stop.clone(), writing.clone());
        writers.spawn(async move {
            let url = format!("{base}/v1/sessions/s{client}/layouts/default/segments");
            let mut n = 0;
            while !stop.load(Ordering::Relaxed) {
                let body =
                    json!({"rollout_id": format!("r{client}"), "input": format!("line {n} {}", "x".repeat(n % 300))});
                let res = http.post(&url).bearer_auth(&key).json(&body).send().await.unwrap();
                assert_eq!(res.status(), 201);
                n += 1;
                if n == 3 {
                    writing.fetch_add(1, Ordering::Relaxed);
                }
            }
            n
        });
    }
    // Every client is appending before the first export.
    let started = std::time::Instant::now();
    while writing.load(Ordering::Relaxed) < 8 {
        assert!(started.elapsed() < std::time::Duration::from_secs(30), "the clients did not start");
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let mut checked = 0;
    for _ in 0..3 {
        let entries = export(&app, &t, "default").await;
        let manifest = manifest(&entries);
        for rollout in manifest["layouts"][0]["rollouts"].as_array().unwrap() {
            let path = rollout["rollout_path"].as_str().unwrap();
            let content = &entries.iter().find(|(p, _)| p == path).unwrap().1;
            assert_eq!(content.len() as u64, rollout["committed_len"].as_u64().unwrap(), "{path}");
            assert!(content.ends_with(b"\n"), "{path} ends with a whole line");
            let lines = content.split(|b| *b == b'\n').filter(|l| !l.is_empty()).count();
            assert_eq!(lines as i64, rollout["segment_count"].as_i64().unwrap(), "{path}");
            for line in content.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
                serde_json::from_slice::<Value>(line).expect("every line is whole JSON");
            }
            checked += 1;
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut appended = 0;
    while let Some(n) = writers.join_next().await {
        appended += n.unwrap();
    }
    assert!(checked >= 24 && appended >= 24, "{checked} rollouts checked, {appended} segments appended");
}
