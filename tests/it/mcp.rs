//! MCP as the protocol says (SPEC §2.10), one JSON-RPC message at a time:
//! resources paged over every workspace the key reaches, the protocol's own
//! errors for what is not there, and results that keep to 64 KiB.

use crate::every_backend;
use crate::harness::{Backend, TestApp};
use crate::round_three::{conversation, key_of, usage_of};
use reqwest::Method;
use serde_json::{Value, json};

every_backend!(
    resources_page_through_every_file_the_key_reaches,
    unknown_names_are_protocol_errors,
    a_resource_read_counts_usage_as_memory_read_does
);

async fn rpc(app: &TestApp, key: &str, method: &str, params: Value) -> Value {
    rpc_at(app, "/v1/mcp", key, method, params).await
}

/// One JSON-RPC call to the MCP endpoint at `path` (its query names a session or workspace).
async fn rpc_at(app: &TestApp, path: &str, key: &str, method: &str, params: Value) -> Value {
    let message = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    let res = app
        .request(Method::POST, path, key)
        .header("accept", "application/json, text/event-stream")
        .json(&message)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    res.json().await.unwrap()
}

/// Creates `count` small files under `folder` of a workspace's memory.
async fn files(app: &TestApp, key: &str, workspace: &str, folder: &str, count: usize) {
    let operations: Vec<Value> = (0..count)
        .map(|i| json!({"command": "create", "path": format!("{folder}/note-{i:04}.md"), "file_text": "x\n"}))
        .collect();
    let path = format!("/v1/workspaces/{workspace}/layouts/default/memory/edits?wait=30");
    let res = app.request(Method::POST, &path, key).json(&json!({"operations": operations})).send().await.unwrap();
    assert_eq!(res.status(), 200, "{}", res.text().await.unwrap());
}

async fn resources_page_through_every_file_the_key_reaches(backend: Backend) {
    let app = TestApp::start(backend).await;
    let t = app.tenant().await;
    for workspace in ["alpha", "beta"] {
        let session = json!({"session_id": format!("{workspace}-s"), "workspace": workspace});
        let res = app.request(Method::POST, "/v1/sessions", &t.key).json(&session).send().await.unwrap();
        assert_eq!(res.status(), 201);
        let session = format!("{workspace}-s");
        let res = app.post_segment(&t.key, &session, "default", json!({"rollout_id": "r", "input": "hi"})).await;
        assert_eq!(res.status(), 201);
    }
    files(&app, &t.key, "alpha", "notes", 700).await;
    files(&app, &t.key, "beta", "notes", 3).await;
    let (mut uris, mut cursor, mut pages) = (Vec::new(), None::<String>, 0);
    loop {
        pages += 1;
        let params = cursor.as_ref().map_or_else(|| json!({}), |c| json!({"cursor": c}));
        let answer = rpc(&app, &t.key, "resources/list", params).await;
        let page = answer["result"]["resources"].as_array().unwrap_or_else(|| panic!("{answer}"));
        assert!(page.len() <= 500, "a page holds at most 500");
        uris.extend(page.iter().map(|r| r["uri"].as_str().unwrap().to_owned()));
        match answer["result"]["nextCursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => break,
        }
    }
    assert_eq!(pages, 2);
    let mut sorted = uris.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(uris, sorted, "every file once, by workspace, layout and path");
    assert_eq!(uris.iter().filter(|u| u.starts_with("memory://alpha/default/notes/")).count(), 700);
    assert_eq!(uris.iter().filter(|u| u.starts_with("memory://beta/default/notes/")).count(), 3);

    let forged = rpc(&app, &t.key, "resources/list", json!({"cursor": "not-one-of-ours"})).await;
    assert_eq!(forged["error"]["code"], -32602, "{forged}");
    let read = rpc(&app, &t.key, "resources/read", json!({"uri": "memory://beta/default/notes/note-0002.md"})).await;
    assert_eq!(read["result"]["contents"][0]["text"], "x\n", "{read}");

    // A key for one workspace lists and reads that workspace alone.
    let made =
        app.request(Method::POST, "/v1/keys", &t.key).json(&json!({"workspaces": ["beta"], "permissions": ["read"]}));
    let scoped = made.send().await.unwrap().json::<Value>().await.unwrap()["api_key"].as_str().unwrap().to_owned();
    let listed = rpc(&app, &scoped, "resources/list", json!({})).await;
    let seen: Vec<&str> =
        listed["result"]["resources"].as_array().unwrap().iter().map(|r| r["uri"].as_str().unwrap()).collect();
    assert!(!seen.is_empty() && seen.iter().all(|u| u.starts_with("memory://beta/")), "{seen:?}");
    let other = rpc(&app, &scoped, "resources/read", json!({"uri": "memory://alpha/default/notes/note-0001.md"})).await;
    assert_eq!(other["error"]["code"], -32002, "another workspace does not exist for the key: {other}");
}

async fn unknown_names_are_protocol_errors(backend: Backend) {
    let app = TestApp::start(backend).await;
    let t = app.tenant().await;
    let tool = rpc(&app, &t.key, "tools/call", json!({"name": "memory_drop", "arguments": {}})).await;
    assert_eq!(tool["error"]["code"], -32602, "{tool}");
    assert!(tool["error"]["message"].as_str().unwrap().contains("memory_list"), "{tool}");
    let prompt = rpc(&app, &t.key, "prompts/get", json!({"name": "nope"})).await;
    assert_eq!(prompt["error"]["code"], -32602, "{prompt}");
    let failing =
        rpc(&app, &t.key, "tools/call", json!({"name": "memory_read", "arguments": {"path": "none.md"}})).await;
    assert_eq!(failing["result"]["isError"], true, "a known tool that fails is a result: {failing}");
    assert!(failing["result"].get("structuredContent").is_none(), "{failing}");
}

every_backend!(a_file_over_64_kib_is_read_in_results_that_say_how_to_go_on);

async fn a_file_over_64_kib_is_read_in_results_that_say_how_to_go_on(backend: Backend) {
    let app = TestApp::start(backend).await;
    let t = app.tenant().await;
    app.post_segment(&t.key, "s", "default", json!({"rollout_id": "r", "input": "hi"})).await;
    let big: String = (0..2_000).map(|i| format!("- note {i}: {}\n", "z".repeat(60))).collect();
    let create = json!({"operations": [{"command": "create", "path": "notes/big file.md", "file_text": big}]});
    let res = app.request(Method::POST, "/v1/workspaces/default/layouts/default/memory/edits?wait=30", &t.key);
    assert_eq!(res.json(&create).send().await.unwrap().status(), 200);

    let call = json!({"name": "memory_read", "arguments": {"path": "notes/big file.md"}});
    let read = rpc(&app, &t.key, "tools/call", call).await;
    let text = read["result"]["content"][0]["text"].as_str().unwrap();
    assert!(text.len() <= 64 * 1024, "{}", text.len());
    let next: u64 = text.lines().find_map(|l| l.split("read on with offset ").nth(1)).unwrap().parse().unwrap();
    assert!(next > 500 && next < 2_000, "{next}");
    assert!(text.contains(&format!("{:>6}\t- note {}:", next - 1, next - 2)), "the last line shown is the one before");

    let listed = rpc(&app, &t.key, "resources/list", json!({})).await;
    let uri = listed["result"]["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["uri"].as_str().unwrap())
        .find(|u| u.contains("big"));
    assert_eq!(uri, Some("memory://default/default/notes/big%20file.md"));
    let resource = rpc(&app, &t.key, "resources/read", json!({"uri": uri.unwrap()})).await;
    let text = resource["result"]["contents"][0]["text"].as_str().unwrap();
    assert!(text.len() <= 64 * 1024 && text.starts_with("- note 0:"), "{}", text.len());
    assert!(text.ends_with("reads the rest"), "{}", &text[text.len() - 120..]);
}

/// resources/read under a session counts a use of the memory it reads, as
/// memory_read does: for a runtime's key, never for a read-only one.
async fn a_resource_read_counts_usage_as_memory_read_does(backend: Backend) {
    let app = TestApp::start(backend).await;
    let t = app.tenant().await;
    conversation(&app, &t, "default", "s1", "chat-1").await;
    let (_, reader) = key_of(&app, &t.key, json!("*"), &["read"]).await;
    let (_, runtime) = key_of(&app, &t.key, json!("*"), &["ingest", "read"]).await;
    let uri = json!({"uri": "memory://default/default/raw_memories/chat-1.md"});
    for (key, session) in [(&reader, "fake-1"), (&reader, "fake-2"), (&runtime, "runtime-1"), (&runtime, "runtime-1")] {
        let read = rpc_at(&app, &format!("/v1/mcp?session_id={session}"), key, "resources/read", uri.clone()).await;
        assert!(read["result"]["contents"][0]["text"].as_str().unwrap().contains("green tea"), "{read}");
    }
    // The uses are ranked by the next phase two's selection: one session of the runtime, none of the reader.
    conversation(&app, &t, "default", "s2", "chat-2").await;
    assert_eq!(usage_of(&app, &t.key, "chat-1").await, 1);
}

/// An MCP client that introduces itself, then lists the memory folder.
pub async fn as_a_named_client(http: &reqwest::Client, base: &str, key: &str) {
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "probe-client", "version": "1.2.3"}}});
    let call =
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "memory_list", "arguments": {}}});
    for message in [initialize, call] {
        let res = http
            .post(format!("{base}/v1/mcp"))
            .bearer_auth(key)
            .header("accept", "application/json, text/event-stream")
            .json(&message)
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 200);
        let answer: Value = res.json().await.unwrap();
        assert!(answer["result"].is_object(), "{answer}");
    }
}
