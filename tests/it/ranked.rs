//! `memory/search?mode=ranked` (SPEC §2.10 "Search by meaning"): passages
//! ranked by their words, paged, over HTTP and MCP; the modes that need an
//! embeddings endpoint say it is not configured.

use crate::every_backend;
use crate::harness::{Backend, TestApp};
use reqwest::Method;
use serde_json::{Value, json};

every_backend!(passages_rank_by_their_words_a_page_at_a_time);

const MEMORY: &str = "# Task Group: tooling\nscope: how the web app is built\n\n\
## Task 1: install dependencies\n- the package manager is pnpm; npm breaks the lockfile\n### keywords\n- pnpm, lockfile\n\n\
## Task 2: deploy\n- the deploy needs the VPN up first\n\n\
# Task Group: people\n## Task 1: reviews\n- Dana reviews every database migration\n";

async fn search(app: &TestApp, key: &str, query: &str) -> (u16, Value) {
    let path = format!("/v1/workspaces/default/layouts/default/memory/search?{query}");
    let res = app.request(Method::GET, &path, key).send().await.unwrap();
    (res.status().as_u16(), res.json().await.unwrap())
}

async fn passages_rank_by_their_words_a_page_at_a_time(backend: Backend) {
    let app = TestApp::start(backend).await;
    let t = app.tenant().await;
    app.post_segment(&t.key, "s", "default", json!({"rollout_id": "r", "input": "hi"})).await;
    let operations = json!({"operations": [
        {"command": "create", "path": "MEMORY.md", "file_text": MEMORY},
        {"command": "create", "path": "rollout_summaries/r_x.md", "file_text": "# Summary\nthe user asked which package to pin\n"},
        {"command": "create", "path": "notes.md", "file_text": "package manager; package manager\n"},
    ]});
    let res = app.request(Method::POST, "/v1/workspaces/default/layouts/default/memory/edits?wait=30", &t.key);
    assert_eq!(res.json(&operations).send().await.unwrap().status(), 200);

    // The words in another order: no line holds them, a section does.
    let (status, lines) = search(&app, &t.key, "query=manager%20package").await;
    assert_eq!((status, lines["matches"].as_array().unwrap().len()), (200, 0), "{lines}");
    let (status, ranked) = search(&app, &t.key, "query=manager%20package&mode=ranked").await;
    assert_eq!(status, 200, "{ranked}");
    assert_eq!(ranked["mode"], "ranked");
    let first = &ranked["matches"][0];
    assert_eq!(first["path"], "MEMORY.md");
    assert_eq!((first["line"].as_u64(), first["end_line"].as_u64()), (Some(4), Some(8)));
    assert_eq!(first["heading"], "Task Group: tooling › Task 1: install dependencies");
    assert!(first["text"].as_str().unwrap().starts_with("## Task 1: install dependencies\n"), "{first}");
    let paths: Vec<&str> = ranked["matches"].as_array().unwrap().iter().map(|m| m["path"].as_str().unwrap()).collect();
    assert_eq!(paths, ["MEMORY.md", "rollout_summaries/r_x.md"], "notes.md is no memory the agent ranks");
    let scores: Vec<f64> = ranked["matches"].as_array().unwrap().iter().map(|m| m["score"].as_f64().unwrap()).collect();
    assert!(scores[0] > scores[1] && scores[1] > 0.0, "{scores:?}");

    let (_, page_one) = search(&app, &t.key, "query=manager%20package&mode=ranked&limit=1").await;
    let cursor = page_one["next_cursor"].as_str().unwrap();
    let (_, page_two) =
        search(&app, &t.key, &format!("query=manager%20package&mode=ranked&limit=1&cursor={cursor}")).await;
    assert_eq!(page_two["matches"][0]["path"], "rollout_summaries/r_x.md");
    assert!(page_two["next_cursor"].is_null());
    let (status, _) = search(&app, &t.key, &format!("query=deploy&mode=ranked&cursor={cursor}")).await;
    assert_eq!(status, 400, "another query's cursor");

    for (query, status, code) in [
        ("query=vpn&mode=semantic", 409, "not_configured"),
        ("query=vpn&mode=hybrid", 409, "not_configured"),
        ("query=vpn&mode=fuzzy", 400, "invalid_request"),
        ("query=vpn&mode=ranked&regex=true", 400, "invalid_request"),
        ("query=vpn&mode=ranked&limit=51", 400, "invalid_request"),
        ("query=%3F%21&mode=ranked", 400, "invalid_request"),
    ] {
        let (got, problem) = search(&app, &t.key, query).await;
        assert_eq!((got, problem["code"].as_str()), (status, Some(code)), "{query}: {problem}");
    }
    let (status, regex) = search(&app, &t.key, "query=Dana%20r.views&mode=regex").await;
    assert_eq!((status, regex["matches"][0]["line"].as_u64()), (200, Some(14)), "mode=regex is regex=true");

    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "memory_search", "arguments": {"query": "who reviews migrations", "mode": "ranked"}}});
    let res = app.request(Method::POST, "/v1/mcp", &t.key).header("accept", "application/json, text/event-stream");
    let answer: Value = res.json(&call).send().await.unwrap().json().await.unwrap();
    let said = answer["result"]["content"][0]["text"].as_str().unwrap();
    assert!(
        said.starts_with("MEMORY.md:13-14 (score ") && said.contains("Task Group: people › Task 1: reviews\n## Task 1"),
        "{said}"
    );
}
