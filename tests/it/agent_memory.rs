//! The running agent's memory over HTTP (SPEC §2.10): list, read, search,
//! edits through the layout's lane, usage from reads and citations, and the
//! selection it ranks.

use crate::every_backend;
use crate::fake_llm::{FakeLlm, Reply};
use crate::harness::{Backend, Tenant, TestApp, status_code_body, use_model};
use reqwest::Method;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

every_backend!(
    reads_and_citations_rank_a_usage_layout,
    max_unused_days_leaves_a_stale_memory_out,
    memory_is_listed_read_and_searched_inside_its_folder,
    edits_publish_through_a_run_of_their_own,
    edits_are_refused_whole_when_they_cannot_apply,
    an_edit_during_a_slow_phase_two_lands_after_it,
    concurrent_edits_all_land,
    a_layout_s_files_are_there_from_its_first_append,
);

const MEMORY: &str = "/v1/workspaces/default/layouts/default/memory";

/// One conversation, closed: the extractive provider's memory of it.
async fn conversation(app: &TestApp, t: &Tenant, session: &str, rollout: &str, said: &str) {
    let body = json!({"rollout_id": rollout, "input": said, "final_output": "noted"});
    assert_eq!(app.post_segment(&t.key, session, "default", body).await.status(), 201);
    let closed = app.json(Method::POST, &format!("/v1/sessions/{session}/close?wait=30"), &t.key).await;
    assert_eq!(closed["state"], "closed", "{closed}");
}

async fn get(app: &TestApp, key: &str, path: &str) -> (u16, String, Value) {
    status_code_body(app.request(Method::GET, path, key).send().await.unwrap()).await
}

async fn edit(app: &TestApp, key: &str, body: Value) -> (u16, String, Value) {
    status_code_body(app.request(Method::POST, &format!("{MEMORY}/edits"), key).json(&body).send().await.unwrap()).await
}

fn sha256(text: &str) -> String {
    hex::encode(Sha256::digest(text.as_bytes()))
}

/// R-LAY-3: the first append of a layout in a workspace makes its folders
/// and empty `MEMORY.md` and `memory_summary.md`, so an edit before any run
/// finds them; in a bucket they are empty objects at their plain keys too.
async fn a_layout_s_files_are_there_from_its_first_append(backend: Backend) {
    let app = TestApp::start(backend).await;
    let t = app.tenant().await;
    assert_eq!(get(&app, &t.key, &format!("{MEMORY}/read?path=MEMORY.md")).await.0, 404, "no append yet");
    let body = json!({"rollout_id": "chat-1", "input": "hello"});
    assert_eq!(app.post_segment(&t.key, "s1", "default", body).await.status(), 201);

    let (status, _, listed) = get(&app, &t.key, &format!("{MEMORY}/list")).await;
    assert_eq!(status, 200, "{listed}");
    let paths: Vec<&str> = listed["entries"].as_array().unwrap().iter().map(|e| e["path"].as_str().unwrap()).collect();
    assert_eq!(paths, ["MEMORY.md", "memory_summary.md", "raw_memories", "rollout_summaries", "skills"]);
    for path in ["MEMORY.md", "memory_summary.md"] {
        let (status, _, read) = get(&app, &t.key, &format!("{MEMORY}/read?path={path}")).await;
        assert_eq!((status, read["text"].as_str()), (200, Some("")), "{path}: {read}");
    }
    let note = json!({"operations": [{"command": "insert", "path": "MEMORY.md", "insert_line": 0, "insert_text": "- The user says hello.\n"}]});
    let (status, _, done) = edit(&app, &t.key, note).await;
    assert_eq!(status, 200, "{done}");
    assert_eq!(app.file_text(&t, "default", "memories/MEMORY.md").await, "- The user says hello.\n");
    assert_eq!(app.file_text(&t, "default", "memories/memory_summary.md").await, "");
    if let Some(prefix) = &app.bucket_prefix {
        let objects = crate::s3::objects_under(prefix).await;
        let plain = format!("{}/default/memories/memory_summary.md", t.id);
        assert_eq!(objects.get(&plain).map(Vec::len), Some(0), "placed for outside readers: {:?}", objects.keys());
    }
    // A second layout's first append makes its own; the first's stay as they are.
    let layout = json!({"memories_dir": "team", "sessions_dir": "team_sessions"});
    let res = app.request(Method::PUT, "/v1/layouts/team", &t.key).json(&layout).send().await.unwrap();
    assert_eq!(res.status(), 201);
    let body = json!({"rollout_id": "chat-2", "input": "hello team"});
    assert_eq!(app.post_segment(&t.key, "s1", "team", body).await.status(), 201);
    assert_eq!(app.file_text(&t, "default", "team/MEMORY.md").await, "");
    assert_eq!(app.file_text(&t, "default", "memories/MEMORY.md").await, "- The user says hello.\n");
}

async fn memory_is_listed_read_and_searched_inside_its_folder(backend: Backend) {
    let app = TestApp::start(backend).await;
    let t = app.tenant().await;
    conversation(&app, &t, "s1", "chat-1", "I prefer green tea in the morning.").await;

    let (status, _, listed) = get(&app, &t.key, &format!("{MEMORY}/list")).await;
    assert_eq!(status, 200, "{listed}");
    let paths: Vec<&str> = listed["entries"].as_array().unwrap().iter().map(|e| e["path"].as_str().unwrap()).collect();
    assert!(paths.contains(&"MEMORY.md") && paths.contains(&"rollout_summaries"), "{paths:?}");
    assert!(paths.windows(2).all(|w| w[0] < w[1]), "sorted by path: {paths:?}");
    let summary = paths.iter().find(|p| p.starts_with("rollout_summaries/chat-1_")).unwrap().to_string();
    let (_, _, only_summaries) = get(&app, &t.key, &format!("{MEMORY}/list?path=memories/rollout_summaries")).await;
    assert_eq!(only_summaries["entries"][0]["path"], summary.as_str());
    assert_eq!(only_summaries["next_cursor"], Value::Null);

    let on_disk = app.file_text(&t, "default", "memories/MEMORY.md").await;
    for path in ["MEMORY.md", "memories/MEMORY.md", "./memories//MEMORY.md"] {
        let (status, _, read) = get(&app, &t.key, &format!("{MEMORY}/read?path={path}")).await;
        assert_eq!(status, 200, "{path}: {read}");
        assert_eq!(
            (read["text"].as_str(), read["sha256"].as_str()),
            (Some(on_disk.as_str()), Some(sha256(&on_disk).as_str()))
        );
        assert_eq!(read["total_lines"].as_u64(), Some(on_disk.lines().count() as u64));
    }
    let (_, _, second) = get(&app, &t.key, &format!("{MEMORY}/read?path=MEMORY.md&offset=2&limit=1")).await;
    assert_eq!((second["offset"].as_u64(), second["lines"].as_u64()), (Some(2), Some(1)));
    assert_eq!(second["text"].as_str().unwrap(), on_disk.split_inclusive('\n').nth(1).unwrap());

    let (status, _, found) = get(&app, &t.key, &format!("{MEMORY}/search?query=GREEN%20TEA")).await;
    assert_eq!(status, 200, "{found}");
    let matches = found["matches"].as_array().unwrap();
    assert!(!matches.is_empty() && matches[0]["path"] == "MEMORY.md", "MEMORY.md first: {found}");
    assert!(matches.iter().any(|m| m["path"] == summary.as_str()), "{found}");
    let (_, _, sensitive) = get(&app, &t.key, &format!("{MEMORY}/search?query=GREEN%20TEA&case_sensitive=true")).await;
    assert_eq!(sensitive["matches"], json!([]));
    let (_, _, regex) = get(&app, &t.key, &format!("{MEMORY}/search?query=gr(e)%2Bn&regex=true&limit=1")).await;
    assert_eq!(regex["matches"].as_array().unwrap().len(), 1);
    let cursor = regex["next_cursor"].as_str().expect("more than one match: a cursor").to_owned();
    let (_, _, next) =
        get(&app, &t.key, &format!("{MEMORY}/search?query=gr(e)%2Bn&regex=true&limit=1&cursor={cursor}")).await;
    assert_ne!(next["matches"][0], regex["matches"][0]);

    // Refusals: outside the folder, malformed, missing, another tenant's.
    // A link out of the folder can be planted only where the folder is the truth: a volume.
    let on_volume = app.bucket_prefix.is_none();
    if on_volume {
        std::os::unix::fs::symlink("/etc", app.workspace_dir(&t, "default").join("memories/escape")).unwrap();
    }
    for (path, want) in [
        (format!("{MEMORY}/read?path=../sessions/chat-1.jsonl"), (400, "invalid_request")),
        (format!("{MEMORY}/read?path=/etc/passwd"), (400, "invalid_request")),
        (format!("{MEMORY}/read?path=MEMORY.md%0A"), (400, "invalid_request")),
        (format!("{MEMORY}/read?path=escape/passwd"), (400, "invalid_request")),
        (format!("{MEMORY}/list?path=escape"), (400, "invalid_request")),
        (format!("{MEMORY}/read?path=nothing.md"), (404, "not_found")),
        (format!("{MEMORY}/read?path=skills"), (400, "invalid_request")),
        (format!("{MEMORY}/read?path=MEMORY.md&offset=0"), (400, "invalid_request")),
        (format!("{MEMORY}/read?path=MEMORY.md&offset=999"), (400, "invalid_request")),
        (format!("{MEMORY}/search?query=(unclosed&regex=true"), (400, "invalid_request")),
        (format!("{MEMORY}/search?query="), (400, "invalid_request")),
        (format!("{MEMORY}/search?query=x&limit=201"), (400, "invalid_request")),
        (format!("{MEMORY}/search?query=x&cursor=junk"), (400, "invalid_request")),
        (format!("{MEMORY}/list?path=nothing"), (404, "not_found")),
        ("/v1/workspaces/nope/layouts/default/memory/list".to_owned(), (404, "not_found")),
        ("/v1/workspaces/default/layouts/nope/memory/list".to_owned(), (404, "not_found")),
    ] {
        if !on_volume && path.contains("escape") {
            continue;
        }
        let (status, code, body) = get(&app, &t.key, &path).await;
        assert_eq!((status, code.as_str()), want, "{path}: {body}");
    }
    let listed = get(&app, &t.key, &format!("{MEMORY}/list")).await.2.to_string();
    assert!(!listed.contains("passwd"), "a symlink leading out is never followed");
    let other = app.tenant().await;
    let (status, _, body) = get(&app, &other.key, &format!("{MEMORY}/read?path=MEMORY.md")).await;
    assert!(status == 404 || body["text"].as_str().is_none_or(|t| !t.contains("green tea")), "{body}");
    assert_eq!(get(&app, "wrong", &format!("{MEMORY}/list")).await.0, 401);
}

async fn edits_publish_through_a_run_of_their_own(backend: Backend) {
    let app = TestApp::start(backend).await;
    let t = app.tenant().await;
    conversation(&app, &t, "s1", "chat-1", "I prefer green tea in the morning.").await;
    let before = app.file_text(&t, "default", "memories/MEMORY.md").await;

    let secret = "ghp_abcdefghijklmnopqrstuvwxyz0123456789";
    let (status, _, done) = edit(
        &app,
        &t.key,
        json!({"operations": [
            {"command": "create", "path": "memories/notes/tea.md", "file_text": format!("Kettle at 80C. token {secret}\n")},
            {"command": "insert", "path": "MEMORY.md", "insert_line": 0, "insert_text": "- The user switched to coffee."},
        ], "expect": {"MEMORY.md": sha256(&before)}, "session_id": "agent-run-7", "rollout_id": "chat-1", "reason": "stale preference"}),
    )
    .await;
    assert_eq!(status, 200, "{done}");
    let mut changes = done["changes"].as_array().unwrap().clone();
    changes.sort_by_key(|c| c["path"].as_str().unwrap().to_owned());
    assert_eq!(
        changes,
        [json!({"path": "MEMORY.md", "change": "modified"}), json!({"path": "notes/tea.md", "change": "added"})]
    );
    let memory = app.file_text(&t, "default", "memories/MEMORY.md").await;
    assert_eq!(memory, format!("- The user switched to coffee.\n{before}"));
    let note = app.file_text(&t, "default", "memories/notes/tea.md").await;
    assert!(note.contains("[REDACTED:github_token]") && !note.contains(secret), "{note}");

    let run_id = done["run_id"].as_str().unwrap();
    let (_, _, run) = get(&app, &t.key, &format!("/v1/workspaces/default/layouts/default/runs/{run_id}")).await;
    assert_eq!(
        (
            run["kind"].as_str(),
            run["state"].as_str(),
            run["session_id"].as_str(),
            run["rollout_id"].as_str(),
            run["reason"].as_str()
        ),
        (Some("edit"), Some("succeeded"), Some("agent-run-7"), Some("chat-1"), Some("stale preference"))
    );
    let diff = run["changes"].as_array().unwrap().iter().find(|c| c["path"] == "MEMORY.md").unwrap()["diff"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(diff.contains("+- The user switched to coffee."), "{diff}");
    let mut browser = crate::console::Browser::new(&app);
    browser.sign_in(&t.key).await;
    let (_, _, page) = browser.get(&format!("/console/runs/default/default/{run_id}")).await;
    assert!(
        page.contains("<td>edit</td>") && page.contains("agent-run-7") && page.contains("stale preference"),
        "{page}"
    );
    assert!(page.contains("The user switched to coffee."), "the diff is shown: {page}");
    let (_, _, job) = get(&app, &t.key, &format!("/v1/jobs/{}", done["job_id"].as_str().unwrap())).await;
    assert_eq!((job["kind"].as_str(), job["state"].as_str()), (Some("edit"), Some("succeeded")));
    let (_, _, read) = get(&app, &t.key, &format!("{MEMORY}/read?path=MEMORY.md")).await;
    assert_eq!(read["sha256"], sha256(&memory));

    // A V4A patch, with paths as the instructions spell them; then the edit is restorable like any run.
    let patch = "*** Begin Patch\n*** Update File: memories/MEMORY.md\n@@\n-- The user switched to coffee.\n+- The user drinks coffee now.\n*** Delete File: notes/tea.md\n*** End Patch";
    let (status, _, patched) = edit(&app, &t.key, json!({"patch": patch})).await;
    assert_eq!(status, 200, "{patched}");
    assert!(app.file_bytes(&t, "default", "memories/notes/tea.md").await.is_none());
    assert!(app.file_text(&t, "default", "memories/MEMORY.md").await.starts_with("- The user drinks coffee now.\n"));
    let res = app
        .request(Method::POST, &format!("/v1/workspaces/default/layouts/default/runs/{run_id}/restore"), &t.key)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 202);
    let restore: Value = res.json().await.unwrap();
    assert_eq!(app.wait_for_job(&t.key, restore["job_id"].as_str().unwrap()).await["state"], "succeeded");
    assert_eq!(app.file_text(&t, "default", "memories/MEMORY.md").await, memory, "back as the edit left it");

    // The edit's event, from the outbox.
    let events = app
        .request(Method::GET, "/v1/events?types=memory.edited", &t.key)
        .header("last-event-id", format!("evt_{:016}_{}", 0, &t.id.replace('-', "")[..12]))
        .send()
        .await
        .unwrap();
    assert_eq!(events.status(), 200);
    let first = read_sse_event(events).await;
    assert!(first.contains("memory.edited") && first.contains(run_id), "{first}");
}

/// The first event of a stream, as its text.
async fn read_sse_event(mut res: reqwest::Response) -> String {
    let mut text = String::new();
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    while !text.contains("\n\n") || !text.contains("data:") {
        let chunk = tokio::time::timeout_at(deadline, res.chunk()).await.expect("an event arrives").unwrap();
        text.push_str(&String::from_utf8_lossy(&chunk.expect("the stream stays open")));
    }
    text
}

async fn edits_are_refused_whole_when_they_cannot_apply(backend: Backend) {
    let app = TestApp::start(backend).await;
    let t = app.tenant().await;
    conversation(&app, &t, "s1", "chat-1", "I prefer green tea in the morning.").await;
    let snapshot = async || {
        let mut files = Vec::new();
        for path in app.files_under(&t, "default", "memories").await {
            files.push((path.clone(), app.file_bytes(&t, "default", &path).await.unwrap()));
        }
        files.sort();
        files
    };
    let before = snapshot().await;
    let cases = [
        (
            json!({"operations": [{"command": "create", "path": "a.md", "file_text": "x"}, {"command": "str_replace", "path": "MEMORY.md", "old_str": "not there", "new_str": "y"}]}),
            (422, "invalid_patch"),
        ),
        (
            json!({"patch": "*** Begin Patch\n*** Update File: MEMORY.md\n@@\n-no such line\n+y\n*** End Patch"}),
            (422, "invalid_patch"),
        ),
        (json!({"patch": "not a patch"}), (422, "invalid_patch")),
        (
            json!({"operations": [{"command": "create", "path": "raw_memories.md", "file_text": "x"}]}),
            (422, "invalid_patch"),
        ),
        (json!({"operations": [{"command": "delete", "path": "raw_memories/chat-1.md"}]}), (422, "invalid_patch")),
        (
            json!({"operations": [{"command": "create", "path": "phase_two_selection.json", "file_text": "{}"}]}),
            (422, "invalid_patch"),
        ),
        (
            json!({"operations": [{"command": "create", "path": "../sessions/x.jsonl", "file_text": "x"}]}),
            (422, "invalid_patch"),
        ),
        (json!({"operations": [{"command": "create", "path": "/etc/x", "file_text": "x"}]}), (422, "invalid_patch")),
        (json!({"operations": [{"command": "view", "path": "MEMORY.md"}]}), (422, "invalid_patch")),
        (json!({"patch": "x", "operations": []}), (422, "invalid_patch")),
        (
            json!({"operations": [{"command": "delete", "path": "MEMORY.md"}], "expect": {"MEMORY.md": sha256("stale")}}),
            (409, "memory_changed"),
        ),
        (
            json!({"operations": [{"command": "create", "path": "new.md", "file_text": "x"}], "expect": {"MEMORY.md": null}}),
            (409, "memory_changed"),
        ),
        (json!({"patch": "x", "session_id": "bad id"}), (400, "invalid_request")),
    ];
    for (body, want) in cases {
        let (status, code, problem) = edit(&app, &t.key, body.clone()).await;
        assert_eq!((status, code.as_str()), want, "{body}: {problem}");
    }
    let res = app
        .request(Method::POST, &format!("{MEMORY}/edits"), &t.key)
        .header("content-type", "application/json")
        .body("{\"patch\":")
        .send()
        .await
        .unwrap();
    assert_eq!(status_code_body(res).await.0, 400);
    assert_eq!(declared_too_large(&app, &t.key).await, 413);
    assert_eq!(snapshot().await, before, "nothing of a refused edit is written");

    // A layout whose agents may only read.
    let res = app
        .request(Method::PUT, "/v1/layouts/readonly", &t.key)
        .json(&json!({"memories_dir": "ro-memories", "sessions_dir": "ro-sessions", "read": {"live_update": false}}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 201);
    let res = app
        .request(Method::POST, "/v1/workspaces/default/layouts/readonly/memory/edits", &t.key)
        .json(&json!({"operations": [{"command": "create", "path": "a.md", "file_text": "x"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(status_code_body(res).await.1, "read_only");

    // Storage: an edit may not take the tenant past its limit.
    let used = app.json(Method::GET, "/v1/limits", &t.key).await;
    let limit = used["storage_bytes"].as_i64().unwrap_or(0);
    let usage = app.json(Method::GET, "/v1/usage", &t.key).await["storage_bytes"].as_i64().unwrap();
    assert_eq!(limit, 0);
    let res = app
        .request(Method::PUT, &format!("/v1/admin/tenants/{}/limits", t.id), crate::harness::ADMIN_TOKEN)
        .json(&json!({"storage_bytes": usage + 100}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    tokio::time::sleep(std::time::Duration::from_millis(2100)).await;
    let (status, code, _) = edit(
        &app,
        &t.key,
        json!({"operations": [{"command": "create", "path": "big.md", "file_text": "x".repeat(1000)}]}),
    )
    .await;
    assert_eq!((status, code.as_str()), (403, "quota_exceeded"));
}

/// An edit whose `Content-Length` says more than a mebibyte, sent without
/// its body: the answer comes at once, before any of it is read.
async fn declared_too_large(app: &TestApp, key: &str) -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let addr = app.base.trim_start_matches("http://");
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "POST {MEMORY}/edits HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {key}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{{",
        (1 << 20) + 1
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let mut answer = vec![0; 64];
    let read = stream.read(&mut answer).await.unwrap();
    let status_line = String::from_utf8_lossy(&answer[..read]).into_owned();
    status_line.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or_else(|| panic!("{status_line}"))
}

async fn an_edit_during_a_slow_phase_two_lands_after_it(backend: Backend) {
    let fake = FakeLlm::start().await;
    let app = TestApp::start_with(backend, use_model(&fake, "responses")).await;
    let t = app.tenant().await;
    app.post_segment(&t.key, "s1", "default", json!({"rollout_id": "a", "input": "hi"})).await;
    fake.push(Reply::artifacts("a", "s", "m").now());
    fake.push(
        Reply::Calls(vec![(
            "apply_patch",
            json!({"patch": "*** Begin Patch\n*** Add File: memories/skills/tea/SKILL.md\n+brew at 80C\n*** End Patch"}),
        )])
        .now(),
    );
    fake.push(Reply::Text("done").after(std::time::Duration::from_secs(2)));
    app.request(Method::POST, "/v1/sessions/s1/close", &t.key).send().await.unwrap();
    let started = std::time::Instant::now();
    while fake.phase_two_requests().len() < 2 {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(20),
            "the consolidation never reached its second turn"
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    // The consolidation is under way: the edit waits for it, then applies to what it published.
    let (status, _, done) = edit(
        &app,
        &t.key,
        json!({"operations": [{"command": "insert", "path": "MEMORY.md", "insert_line": 0, "insert_text": "- edited during phase two"}]}),
    )
    .await;
    assert_eq!(status, 200, "{done}");
    assert_eq!(
        app.file_text(&t, "default", "memories/skills/tea/SKILL.md").await,
        "brew at 80C",
        "phase two's change survives"
    );
    assert!(
        app.file_text(&t, "default", "memories/MEMORY.md").await.contains("- edited during phase two"),
        "the edit survives"
    );
    let runs = app.json(Method::GET, "/v1/workspaces/default/layouts/default/runs", &t.key).await;
    let kinds: Vec<&str> = runs["runs"].as_array().unwrap().iter().map(|r| r["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["edit", "phase_two"], "newest first: the edit after the consolidation");
}

async fn concurrent_edits_all_land(backend: Backend) {
    let app = TestApp::start(backend).await;
    let t = app.tenant().await;
    conversation(&app, &t, "s1", "chat-1", "I prefer green tea in the morning.").await;
    let edits = (0..8).map(|i| {
        let body = json!({"operations": [
            {"command": "insert", "path": "MEMORY.md", "insert_line": 0, "insert_text": format!("- fact {i}")},
            {"command": "create", "path": format!("notes/{i}.md"), "file_text": format!("note {i}\n")},
        ], "session_id": format!("run-{i}")});
        let (app, key) = (&app, t.key.clone());
        async move { edit(app, &key, body).await }
    });
    let answers = futures_util::future::join_all(edits).await;
    for (status, _, body) in &answers {
        assert_eq!(*status, 200, "{body}");
    }
    let memory = app.file_text(&t, "default", "memories/MEMORY.md").await;
    for i in 0..8 {
        assert!(memory.contains(&format!("- fact {i}\n")), "fact {i} in {memory}");
        assert_eq!(app.file_text(&t, "default", &format!("memories/notes/{i}.md")).await, format!("note {i}\n"));
    }
    let runs = app.json(Method::GET, "/v1/workspaces/default/layouts/default/runs?limit=20", &t.key).await;
    let edits = runs["runs"].as_array().unwrap().iter().filter(|r| r["kind"] == "edit").count();
    assert_eq!(edits, 8);
}

async fn put_layout(app: &TestApp, key: &str, generate: Value) {
    let etag = app.request(Method::GET, "/v1/layouts/default", key).send().await.unwrap().headers()["etag"]
        .to_str()
        .unwrap()
        .to_owned();
    let res = app
        .request(Method::PUT, "/v1/layouts/default", key)
        .header("if-match", etag)
        .json(&json!({"memories_dir": "memories", "sessions_dir": "sessions", "generate": generate}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200, "{}", res.text().await.unwrap());
}

fn selected(selection: &Value) -> Vec<(String, i64)> {
    selection["selected"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["rollout_id"].as_str().unwrap().to_owned(), s["usage_count"].as_i64().unwrap()))
        .collect()
}

async fn reads_and_citations_rank_a_usage_layout(backend: Backend) {
    let app = TestApp::start(backend).await;
    let t = app.tenant().await;
    for (rollout, day) in [("oldest", "01"), ("middle", "02"), ("newest", "03")] {
        let body = json!({"rollout_id": rollout, "updated_at": format!("2026-04-{day}T00:00:00+00:00"), "input": format!("about {rollout}"), "final_output": "ok"});
        assert_eq!(app.post_segment(&t.key, "s1", "default", body).await.status(), 201);
    }
    assert_eq!(app.json(Method::POST, "/v1/sessions/s1/close?wait=30", &t.key).await["state"], "closed");
    let selection_path = "/v1/workspaces/default/layouts/default/phase_two_selection";
    let first = app.json(Method::GET, selection_path, &t.key).await;
    assert_eq!(selected(&first), [("newest".into(), 0), ("middle".into(), 0), ("oldest".into(), 0)]);

    // Two sessions read the oldest memory's summary (the same one twice counts once), one cites the middle one.
    let listed = app.json(Method::GET, &format!("{MEMORY}/list?path=rollout_summaries"), &t.key).await;
    let summary = listed["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["path"].as_str().unwrap())
        .find(|p| p.contains("oldest"))
        .unwrap()
        .to_owned();
    for session in ["reader-1", "reader-1", "reader-2"] {
        let (status, _, _) = get(&app, &t.key, &format!("{MEMORY}/read?path={summary}&session_id={session}")).await;
        assert_eq!(status, 200);
    }
    let (status, _, _) =
        get(&app, &t.key, &format!("{MEMORY}/read?path=raw_memories/oldest.md&session_id=reader-2")).await;
    assert_eq!(status, 200);
    let cited = json!({"rollout_id": "cites", "input": "what do I like?",
        "final_output": "Tea.\n<oai-mem-citation>\n<citation_entries>\nMEMORY.md:1-2|note=[tea]\n</citation_entries>\n<rollout_ids>\nmiddle\nno-such-rollout\n</rollout_ids>\n</oai-mem-citation>"});
    assert_eq!(app.post_segment(&t.key, "s2", "default", cited).await.status(), 201);

    put_layout(&app, &t.key, json!({"selection": "usage", "max_raw_memories_for_consolidation": 2})).await;
    assert_eq!(app.json(Method::POST, "/v1/sessions/s2/close?wait=30", &t.key).await["state"], "closed");
    let ranked = app.json(Method::GET, selection_path, &t.key).await;
    assert_eq!(selected(&ranked), [("oldest".into(), 2), ("middle".into(), 1)], "{ranked}");
    let removed: Vec<&str> =
        ranked["removed"].as_array().unwrap().iter().map(|r| r["rollout_id"].as_str().unwrap()).collect();
    assert_eq!(removed, ["newest"]);
    assert!(ranked["selected"][0]["last_usage"].is_string());
    let file: Value =
        serde_json::from_str(&app.file_text(&t, "default", "memories/phase_two_selection.json").await).unwrap();
    let keys: Vec<&String> = file["selected"][0].as_object().unwrap().keys().collect();
    assert_eq!(
        keys,
        ["rollout_id", "updated_at", "rollout_path", "rollout_summary_file", "terminal_state"],
        "the file holds the SDK's keys only; the route carries the usage"
    );
    let mut browser = crate::console::Browser::new(&app);
    browser.sign_in(&t.key).await;
    let (_, _, page) = browser.get("/console/memory").await;
    assert!(page.contains("<th>Used</th>") && page.contains("<td>2</td>"), "usage next to the selection: {page}");
}

async fn max_unused_days_leaves_a_stale_memory_out(backend: Backend) {
    let app = TestApp::start(backend).await;
    let t = app.tenant().await;
    put_layout(&app, &t.key, json!({"max_unused_days": 30})).await;
    let now = chrono::Utc::now();
    for (rollout, at) in [("stale", now - chrono::Duration::days(90)), ("fresh", now - chrono::Duration::days(1))] {
        let body = json!({"rollout_id": rollout, "updated_at": at.to_rfc3339(), "input": format!("about {rollout}")});
        assert_eq!(app.post_segment(&t.key, "s1", "default", body).await.status(), 201);
    }
    assert_eq!(app.json(Method::POST, "/v1/sessions/s1/close?wait=30", &t.key).await["state"], "closed");
    let selection = app.json(Method::GET, "/v1/workspaces/default/layouts/default/phase_two_selection", &t.key).await;
    assert_eq!(selected(&selection), [("fresh".into(), 0)]);
    for bad in [json!({"max_unused_days": 400}), json!({"max_unused_days": -1}), json!({"selection": "popular"})] {
        let res = app
            .request(Method::PUT, "/v1/layouts/other", &t.key)
            .json(&json!({"memories_dir": "m2", "sessions_dir": "s2", "generate": bad}))
            .send()
            .await
            .unwrap();
        assert_eq!(status_code_body(res).await.1, "invalid_layout", "{bad}");
    }
}
