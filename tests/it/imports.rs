//! Moving a workspace in (SPEC §2.7): an archive is checked before anything
//! is written, placed whole or not at all, within the tenant's limits, and
//! an archive no job will read does not stay.

use crate::every_backend;
use crate::harness::{Backend, Tenant, TestApp, status_code_body};
use reqwest::Method;
use serde_json::{Value, json};
use std::io::Write;

every_backend!(
    an_imported_memory_only_workspace_is_known_and_can_be_forgotten,
    a_workspace_the_sdk_wrote_is_imported_and_its_memories_selected,
    layouts_an_import_would_make_follow_the_folder_rules,
    parallel_imports_never_pass_the_storage_limit,
    an_import_refused_at_its_finish_places_nothing_and_drops_its_archive,
    hostile_archives_are_refused_with_nothing_written,
    an_import_past_the_storage_limit_fails_with_nothing_written,
);

/// The start-up sweep removes an uploaded archive no job will read, once it
/// is old enough not to be an upload under way.
#[tokio::test]
async fn archives_no_job_will_read_are_swept() {
    let app = TestApp::start(Backend::Sqlite).await;
    let state = &app.server.as_ref().unwrap().state;
    let imports = state.volumes.imports_dir();
    std::fs::create_dir_all(&imports).unwrap();
    let (orphan, fresh) = (
        imports.join(format!("{}.tar.gz", uuid::Uuid::new_v4())),
        imports.join(format!("{}.tar.gz", uuid::Uuid::new_v4())),
    );
    for path in [&orphan, &fresh] {
        std::fs::write(path, b"archive").unwrap();
    }
    let day_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(86_400);
    std::fs::File::options().write(true).open(&orphan).unwrap().set_modified(day_ago).unwrap();
    let publisher = memoryd::workspace::publish::Publisher::new(&app.data_dir);
    let body_timeout = std::time::Duration::from_secs(60);
    memoryd::jobs::sweep_leftovers(&state.store, &state.volumes, &publisher, body_timeout).await;
    assert!(!orphan.exists(), "an old archive without a job is removed");
    assert!(fresh.exists(), "a new one may be an upload under way");
}

#[tokio::test]
async fn an_archive_past_the_limit_is_refused_at_once() {
    let app = TestApp::start_with(Backend::Sqlite, |c| c.quotas.max_import_bytes = 1000).await;
    let t = app.tenant().await;
    let (status, code, _) = import(&app, &t, "big", vec![0u8; 5000]).await;
    assert_eq!((status, code.as_str()), (413, "payload_too_large"));
    // Without a Content-Length (chunked), the stream is cut at the limit.
    let address = app.base.trim_start_matches("http://").to_owned();
    let mut stream = tokio::net::TcpStream::connect(&address).await.unwrap();
    let chunk = format!("{:x}\r\n{}\r\n", 600, "z".repeat(600));
    let request = format!(
        "POST /v1/workspaces/big/import HTTP/1.1\r\nHost: {address}\r\nAuthorization: Bearer {}\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n{chunk}{chunk}0\r\n\r\n",
        t.key
    );
    tokio::io::AsyncWriteExt::write_all(&mut stream, request.as_bytes()).await.unwrap();
    let mut answer = String::new();
    tokio::io::AsyncReadExt::read_to_string(&mut stream, &mut answer).await.unwrap();
    assert!(answer.starts_with("HTTP/1.1 413") && answer.contains("payload_too_large"), "{answer}");
    let kept: Vec<_> =
        std::fs::read_dir(app.data_dir.join("imports")).map(|d| d.flatten().collect()).unwrap_or_default();
    assert!(kept.is_empty(), "{kept:?}");
}

/// Uploads an archive; the answer's status, code and body.
pub(crate) async fn import(app: &TestApp, t: &Tenant, workspace: &str, archive: Vec<u8>) -> (u16, String, Value) {
    let res = app
        .request(Method::POST, &format!("/v1/workspaces/{workspace}/import"), &t.key)
        .header("content-type", "application/gzip")
        .body(archive)
        .send()
        .await
        .unwrap();
    status_code_body(res).await
}

/// Imports an archive and waits for its job; the job as it ended.
pub(crate) async fn imported(app: &TestApp, t: &Tenant, workspace: &str, archive: Vec<u8>) -> Value {
    let (status, _, job) = import(app, t, workspace, archive).await;
    assert_eq!(status, 202, "{job}");
    assert_eq!(job["kind"], "import", "{job}");
    app.wait_for_job(&t.key, job["job_id"].as_str().unwrap()).await
}

/// A gzip tar of `files` (path, content), as any tool would write it.
pub(crate) fn tar_gz(files: &[(&str, &[u8])]) -> Vec<u8> {
    let mut builder = tar::Builder::new(flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default()));
    for (path, content) in files {
        let mut header = tar::Header::new_gnu();
        header.set_size(content.len() as u64);
        header.set_mode(0o644);
        builder.append_data(&mut header, path, *content).unwrap();
    }
    builder.into_inner().unwrap().finish().unwrap()
}

async fn a_workspace_the_sdk_wrote_is_imported_and_its_memories_selected(backend: Backend) {
    let app = TestApp::start(backend).await;
    let t = app.tenant().await;
    // As the SDK's memory writes them: a rollout, its raw memory (R-P1-12) and summary.
    let rollout = b"{\"updated_at\":\"2026-04-15T00:00:00+00:00\",\"input\":[{\"role\":\"user\",\"content\":\"deploy with pnpm\"}],\"terminal_metadata\":{\"terminal_state\":\"completed\"}}\n";
    let raw = "rollout_id: sdk-1\nupdated_at: 2026-04-15T00:00:00+00:00\nrollout_path: sessions/sdk-1.jsonl\nrollout_summary_file: rollout_summaries/sdk-1_deploy.md\nterminal_state: completed\n\nThe user deploys with pnpm.\n";
    let summary = "session_id: 7\nupdated_at: 2026-04-15T00:00:00+00:00\nrollout_path: sessions/sdk-1.jsonl\nterminal_state: completed\n\nDeploys with pnpm.\n";
    let archive = tar_gz(&[
        ("sessions/sdk-1.jsonl", rollout),
        ("memories/raw_memories/sdk-1.md", raw.as_bytes()),
        ("memories/rollout_summaries/sdk-1_deploy.md", summary.as_bytes()),
    ]);
    let job = imported(&app, &t, "sdk", archive).await;
    assert_eq!(job["state"], "succeeded", "{job}");
    // The workspace is known before any session uses it.
    let files = app.json(Method::GET, "/v1/workspaces/sdk/layouts/default/files", &t.key).await;
    assert!(files.to_string().contains("raw_memories/sdk-1.md"), "{files}");
    assert_eq!(app.file_bytes(&t, "sdk", "sessions/sdk-1.jsonl").await.unwrap(), rollout, "taken as written");
    // A conversation of memoryd's own there, closed: phase two selects the SDK's memory too.
    let body = json!({"rollout_id": "own-1", "input": "hello", "final_output": "hi"});
    let res = app.request(Method::POST, "/v1/sessions/n1/layouts/default/segments?workspace=sdk", &t.key).json(&body);
    assert_eq!(res.send().await.unwrap().status(), 201);
    let closed = app.json(Method::POST, "/v1/sessions/n1/close?wait=30", &t.key).await;
    assert_eq!(closed["memory_status"]["status"], "complete", "{closed}");
    let selection = app.json(Method::GET, "/v1/workspaces/sdk/layouts/default/phase_two_selection", &t.key).await;
    let selected: Vec<&str> = selection["selected"]
        .as_array()
        .unwrap_or_else(|| panic!("{selection}"))
        .iter()
        .map(|s| s["rollout_id"].as_str().unwrap())
        .collect();
    assert!(selected.contains(&"sdk-1") && selected.contains(&"own-1"), "{selection}");

    // A malformed line fails the import, naming the file and line; nothing is placed.
    let broken = tar_gz(&[("sessions/bad.jsonl", b"{\"ok\":1}\n{not json}\n")]);
    let job = imported(&app, &t, "broken", broken).await;
    assert_eq!(job["state"], "failed", "{job}");
    let error = job["last_error"].as_str().unwrap_or_default();
    assert!(error.contains("invalid_archive") && error.contains("sessions/bad.jsonl line 2"), "{job}");
    assert_eq!(app.stored_of(&t, "broken").await, Vec::<String>::new());
}

/// A tar entry with a raw name and type, as a hostile tool would write it.
fn raw_entry(name: &[u8], kind: tar::EntryType, content: &[u8], link: Option<&[u8]>) -> Vec<u8> {
    let mut header = tar::Header::new_old();
    header.as_old_mut().name[..name.len()].copy_from_slice(name);
    if let Some(link) = link {
        header.as_old_mut().linkname[..link.len()].copy_from_slice(link);
    }
    header.set_entry_type(kind);
    header.set_size(content.len() as u64);
    header.set_mode(0o644);
    header.set_cksum();
    let mut bytes = header.as_bytes().to_vec();
    bytes.extend_from_slice(content);
    bytes.resize(bytes.len().div_ceil(512) * 512, 0);
    bytes
}

fn gzip_tar(entries: &[Vec<u8>]) -> Vec<u8> {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    for entry in entries {
        encoder.write_all(entry).unwrap();
    }
    encoder.write_all(&[0u8; 1024]).unwrap();
    encoder.finish().unwrap()
}

async fn hostile_archives_are_refused_with_nothing_written(backend: Backend) {
    let app = TestApp::start(backend).await;
    let t = app.tenant().await;
    let ok = raw_entry(b"sessions/fine.jsonl", tar::EntryType::Regular, b"{}\n", None);
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("absolute", gzip_tar(&[ok.clone(), raw_entry(b"/tmp/memoryd-escape", tar::EntryType::Regular, b"x", None)])),
        (
            "dot-dot",
            gzip_tar(&[ok.clone(), raw_entry(b"memories/../../../escape", tar::EntryType::Regular, b"x", None)]),
        ),
        (
            "symlink",
            gzip_tar(&[ok.clone(), raw_entry(b"memories/link", tar::EntryType::Symlink, b"", Some(b"/etc/passwd"))]),
        ),
        (
            "hard link",
            gzip_tar(&[ok.clone(), raw_entry(b"memories/hard", tar::EntryType::Link, b"", Some(b"/etc/passwd"))]),
        ),
        ("device", gzip_tar(&[ok.clone(), raw_entry(b"memories/dev", tar::EntryType::Char, b"", None)])),
        ("fifo", gzip_tar(&[ok.clone(), raw_entry(b"memories/fifo", tar::EntryType::Fifo, b"", None)])),
        (
            "control character",
            gzip_tar(&[ok.clone(), raw_entry(b"memories/a\x07b.md", tar::EntryType::Regular, b"x", None)]),
        ),
        (
            "outside the layouts",
            gzip_tar(&[ok.clone(), raw_entry(b"elsewhere/x.md", tar::EntryType::Regular, b"x", None)]),
        ),
        (
            "expansion",
            gzip_tar(&[
                ok.clone(),
                raw_entry(b"memories/zeros.md", tar::EntryType::Regular, &vec![0u8; 4 << 20], None),
            ]),
        ),
        ("not gzip", b"PK\x03\x04 a zip file".to_vec()),
        ("not tar", flate2_bytes(b"just some text, not a tar archive at all")),
    ];
    for (what, archive) in cases {
        let (status, code, body) = import(&app, &t, what.replace(' ', "-").as_str(), archive).await;
        let refused = match status {
            422 => code == "invalid_archive",
            202 => {
                let job = app.wait_for_job(&t.key, body["job_id"].as_str().unwrap()).await;
                job["state"] == "failed"
                    && job["last_error"].as_str().unwrap_or_default().starts_with("invalid_archive")
            }
            _ => false,
        };
        assert!(refused, "{what}: {status} {body}");
        let left = app.stored_of(&t, &what.replace(' ', "-")).await;
        assert!(left.is_empty(), "{what}: nothing is written, found {left:?}");
    }
    assert!(!std::path::Path::new("/tmp/memoryd-escape").exists());
    assert!(!app.data_dir.join("escape").exists() && !app.data_dir.parent().unwrap().join("escape").exists());
    let imports = app.data_dir.join("imports");
    let kept: Vec<_> = std::fs::read_dir(&imports).map(|d| d.flatten().collect()).unwrap_or_default();
    assert!(kept.is_empty(), "no archive is left behind: {kept:?}");
    // Too many entries, and too large a body.
    let many: Vec<Vec<u8>> = (0..100_001)
        .map(|n| raw_entry(format!("memories/{n}.md").as_bytes(), tar::EntryType::Regular, b"", None))
        .collect();
    let (status, _, body) = import(&app, &t, "many", gzip_tar(&many)).await;
    assert_eq!(status, 202, "{body}");
    let job = app.wait_for_job(&t.key, body["job_id"].as_str().unwrap()).await;
    assert!(job["last_error"].as_str().unwrap_or_default().contains("more than 100000 entries"), "{job}");
    // Its archive is gone: a retry is refused, saying what to do instead.
    let retry = app.request(Method::POST, &format!("/v1/jobs/{}/retry", job["job_id"].as_str().unwrap()), &t.key);
    let (status, code, body) = status_code_body(retry.send().await.unwrap()).await;
    assert_eq!((status, code.as_str()), (409, "job_not_retryable"), "{body}");
    assert!(body["detail"].as_str().unwrap().contains("Upload the archive again"), "{body}");
    let job = app.json(Method::GET, &format!("/v1/jobs/{}", job["job_id"].as_str().unwrap()), &t.key).await;
    assert_eq!(job["state"], "failed", "the refused retry left the job as it was");
}

fn flate2_bytes(content: &[u8]) -> Vec<u8> {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    encoder.write_all(content).unwrap();
    encoder.finish().unwrap()
}

/// Sets the tenant's storage limit.
async fn limit_storage(app: &TestApp, t: &Tenant, bytes: u64) {
    let res = app
        .request(Method::PUT, &format!("/v1/admin/tenants/{}/limits", t.id), crate::harness::ADMIN_TOKEN)
        .json(&json!({"storage_bytes": bytes}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
}

/// `count` JSON lines of random hex, which hardly compresses: an archive of
/// them stays within 10× expansion.
fn random_lines(count: usize) -> String {
    (0..count)
        .map(|n| {
            format!("{{\"n\":{n},\"text\":\"{}{}\"}}\n", uuid::Uuid::new_v4().simple(), uuid::Uuid::new_v4().simple())
        })
        .collect()
}

async fn an_import_past_the_storage_limit_fails_with_nothing_written(backend: Backend) {
    let app = TestApp::start(backend).await;
    let t = app.tenant().await;
    let lines = random_lines(40);
    let archive = tar_gz(&[("sessions/big.jsonl", lines.as_bytes())]);
    // Room for the archive as uploaded, not for what it expands to.
    let limit = archive.len() as u64 + 100;
    assert!((lines.len() as u64) > limit);
    limit_storage(&app, &t, limit).await;
    let job = imported(&app, &t, "full", archive).await;
    assert_eq!(job["state"], "failed", "{job}");
    assert!(job["last_error"].as_str().unwrap().starts_with("quota_exceeded"), "{job}");
    assert_eq!(app.stored_of(&t, "full").await, Vec::<String>::new());
    let usage = app.json(Method::GET, "/v1/usage", &t.key).await;
    assert_eq!(usage["storage_bytes"], 0, "{usage}");
    // At its limit already, the tenant's upload is refused at once.
    let body = json!({"rollout_id": "r", "input": "x".repeat(500)});
    assert_eq!(app.post_segment(&t.key, "s", "default", body).await.status(), 201);
    let kept = app.json(Method::GET, "/v1/usage", &t.key).await["storage_bytes"].as_u64().unwrap();
    limit_storage(&app, &t, kept).await;
    let small = tar_gz(&[("sessions/small.jsonl", b"{}\n")]);
    let (status, code, _) = import(&app, &t, "again", small).await;
    assert_eq!((status, code.as_str()), (403, "quota_exceeded"));
}

/// Four imports at once under a limit that two fit in: the archives count
/// from their upload, each job claims what it will place, and the finish
/// checks again; the tenant never ends above its limit.
async fn parallel_imports_never_pass_the_storage_limit(backend: Backend) {
    let app = TestApp::start(backend).await;
    let t = app.tenant().await;
    let archives: Vec<Vec<u8>> =
        (0..4).map(|_| tar_gz(&[("sessions/big.jsonl", random_lines(4_500).as_bytes())])).collect();
    limit_storage(&app, &t, 979_549).await;
    let uploads = archives.into_iter().enumerate().map(|(n, archive)| {
        let app = &app;
        let t = &t;
        async move { import(app, t, &format!("w{n}"), archive).await }
    });
    let answers = futures_util::future::join_all(uploads).await;
    let mut succeeded = 0;
    for (status, code, body) in answers {
        match status {
            202 => {
                let job = app.wait_for_job(&t.key, body["job_id"].as_str().unwrap()).await;
                match job["state"].as_str() {
                    Some("succeeded") => succeeded += 1,
                    _ => assert!(job["last_error"].as_str().unwrap().starts_with("quota_exceeded"), "{job}"),
                }
            }
            _ => assert_eq!((status, code.as_str()), (403, "quota_exceeded"), "{body}"),
        }
    }
    let usage = app.json(Method::GET, "/v1/usage", &t.key).await;
    let used = usage["storage_bytes"].as_u64().unwrap();
    assert!(used <= 979_549, "{used} bytes kept under a limit of 979549");
    assert!((1..=2).contains(&succeeded), "{succeeded} imports of about 380 KB fit in 979549 bytes");
}

/// The finish refuses an import whose workspace took data while it ran:
/// nothing is placed, the job fails with why, and its archive is removed.
async fn an_import_refused_at_its_finish_places_nothing_and_drops_its_archive(backend: Backend) {
    let app = TestApp::start(backend).await;
    let t = app.tenant().await;
    // Large enough that the job stages for a while: 64 lines of 1 MiB that hardly compress.
    let mut rollout = Vec::new();
    for n in 0..64 {
        let pad: String = (0..(1 << 20) / 32).map(|_| uuid::Uuid::new_v4().simple().to_string()).collect();
        rollout.extend_from_slice(format!("{{\"n\":{n},\"pad\":\"{pad}\"}}\n").as_bytes());
    }
    let (status, _, job) = import(&app, &t, "late", tar_gz(&[("sessions/big.jsonl", &rollout)])).await;
    assert_eq!(status, 202, "{job}");
    // Staging has begun (its folder exists; in a bucket, its first entry
    // is being written for upload): the checks are behind it.
    let sessions = app.workspace_dir(&t, "late").join("sessions");
    let entry_of_job = format!("{}.", job["job_id"].as_str().unwrap());
    let uploading = || {
        let names = std::fs::read_dir(app.data_dir.join("imports")).into_iter().flatten().flatten();
        names
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .any(|n| n.starts_with(&entry_of_job) && n.ends_with(".entry"))
    };
    let started = std::time::Instant::now();
    while !sessions.exists() && !uploading() {
        assert!(started.elapsed() < std::time::Duration::from_secs(60), "the import never staged");
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    let body = json!({"rollout_id": "meanwhile", "input": "hello", "final_output": "hi"});
    let res = app.request(Method::POST, "/v1/sessions/m/layouts/default/segments?workspace=late", &t.key).json(&body);
    assert_eq!(res.send().await.unwrap().status(), 201);
    let job = app.wait_for_job(&t.key, job["job_id"].as_str().unwrap()).await;
    assert_eq!(job["state"], "failed", "{job}");
    let error = job["last_error"].as_str().unwrap_or_default();
    assert!(error.starts_with("workspace_not_empty: workspace late took data while the import ran"), "{job}");
    assert_eq!(app.file_bytes(&t, "late", "sessions/big.jsonl").await, None, "nothing of the import is read");
    // Nor stored: neither its rollout's object nor its archive in a bucket.
    let imports = app.data_dir.join("imports");
    let started = std::time::Instant::now();
    let import_s = |path: &String| path == "sessions/big.jsonl" || path.starts_with(".memoryd/imports/");
    while std::fs::read_dir(&imports).map(|d| d.count()).unwrap_or(0) > 0
        || app.stored_now(&t, "late").await.iter().any(import_s)
    {
        assert!(started.elapsed() < std::time::Duration::from_secs(10), "the refused import's archive is kept");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// A workspace of memory files alone is known once imported: listed, its
/// files served, exported, not imported into again, and forgotten.
async fn an_imported_memory_only_workspace_is_known_and_can_be_forgotten(backend: Backend) {
    let app = TestApp::start(backend).await;
    let t = app.tenant().await;
    let archive = tar_gz(&[
        ("memories/MEMORY.md", b"# Handbook\n- Deploys go through pnpm.\n"),
        ("memories/memory_summary.md", b"Deploys go through pnpm.\n"),
    ]);
    assert_eq!(imported(&app, &t, "notes", archive.clone()).await["state"], "succeeded");
    let listed = app.json(Method::GET, "/v1/workspaces", &t.key).await;
    assert!(listed["workspaces"].as_array().unwrap().iter().any(|w| w["name"] == "notes"), "{listed}");
    let files = app.json(Method::GET, "/v1/workspaces/notes/layouts/default/files", &t.key).await;
    assert!(files.to_string().contains("MEMORY.md"), "{files}");
    // The listing is the folder as it is now: a run's listing is not offered, not silently ignored.
    let res = app.request(Method::GET, "/v1/workspaces/notes/layouts/default/files?run_id=x", &t.key).send().await;
    let (status, code, body) = status_code_body(res.unwrap()).await;
    assert_eq!((status, code.as_str()), (400, "invalid_request"), "{body}");
    assert!(body["detail"].as_str().unwrap().contains("run_id"), "{body}");
    let exported = crate::portability::export(&app, &t, "notes").await;
    assert!(exported.iter().any(|(path, _)| path == "memories/MEMORY.md"));
    let (status, code, _) = import(&app, &t, "notes", archive).await;
    assert_eq!((status, code.as_str()), (409, "workspace_not_empty"));

    let job: Value =
        app.request(Method::DELETE, "/v1/workspaces/notes", &t.key).send().await.unwrap().json().await.unwrap();
    let job = app.wait_for_job(&t.key, job["job_id"].as_str().unwrap_or_else(|| panic!("{job}"))).await;
    assert_eq!(job["state"], "succeeded", "{job}");
    assert_eq!(app.stored_of(&t, "notes").await, Vec::<String>::new());
    let listed = app.json(Method::GET, "/v1/workspaces", &t.key).await;
    assert!(!listed["workspaces"].as_array().unwrap().iter().any(|w| w["name"] == "notes"), "{listed}");
    let res = app.request(Method::GET, "/v1/workspaces/notes/layouts/default/files", &t.key).send().await.unwrap();
    assert_eq!(res.status(), 404);
}

/// A manifest's layouts are made as `PUT /v1/layouts` would make them: one
/// whose folders overlap, or that takes another layout's folder, is refused
/// whole and nothing is made.
async fn layouts_an_import_would_make_follow_the_folder_rules(backend: Backend) {
    let app = TestApp::start(backend).await;
    let t = app.tenant().await;
    for (name, config) in [
        ("same", json!({"memories_dir": "x", "sessions_dir": "x"})),
        ("steal", json!({"memories_dir": "memories", "sessions_dir": "steal/sessions"})),
    ] {
        let manifest = json!({"format": "memoryd-export", "version": 1, "layouts": [{"name": name, "config": config}]});
        let archive = tar_gz(&[("memoryd-export.json", manifest.to_string().as_bytes())]);
        let (status, code, body) = import(&app, &t, name, archive).await;
        assert_eq!((status, code.as_str()), (409, "layout_conflict"), "{name}: {body}");
        let res = app.request(Method::GET, &format!("/v1/layouts/{name}"), &t.key).send().await.unwrap();
        assert_eq!(res.status(), 404, "{name} was not made");
    }
}
