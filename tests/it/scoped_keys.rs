//! Scoped keys: a key for some workspaces reaches no other by any route, a
//! key without a permission cannot use the routes that take it, keys grant
//! only what they hold, and an expired or revoked key is refused at once.

use crate::console::Browser;
use crate::events::read_events;
use crate::every_backend;
use crate::harness::{ADMIN_TOKEN, Backend, Tenant, TestApp, status_code_body};
use memoryd::api::{Access, Reach};
use memoryd::domain::key_scope::Permission;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

every_backend!(
    a_key_for_one_workspace_reaches_no_other_by_any_route,
    each_route_needs_its_permission,
    keys_grant_only_what_they_hold_and_end_at_once,
    a_scoped_keys_stream_console_and_tools_show_only_its_workspaces,
);

/// The workspace the scoped keys do not reach.
const OTHER: &str = "bob-private";

/// What lives in the other workspace: a closed session with its jobs and run.
struct Elsewhere {
    session: String,
    job: String,
    run: String,
    rollout: String,
}

async fn conversation(app: &TestApp, key: &str, workspace: &str, session: &str) {
    let body = json!({"rollout_id": format!("chat-{session}"), "input": "I like tea", "final_output": "noted"});
    let url = format!("/v1/sessions/{session}/layouts/default/segments?workspace={workspace}");
    let res = app.request(Method::POST, &url, key).json(&body).send().await.unwrap();
    assert_eq!(res.status(), 201);
    let closed = app.json(Method::POST, &format!("/v1/sessions/{session}/close?wait=30"), key).await;
    assert_eq!(closed["state"], "closed", "{closed}");
}

async fn elsewhere(app: &TestApp, t: &Tenant) -> Elsewhere {
    conversation(app, &t.key, OTHER, "bob-s1").await;
    let jobs = app.json(Method::GET, "/v1/jobs?session_id=bob-s1", &t.key).await;
    let runs = app.json(Method::GET, &format!("/v1/workspaces/{OTHER}/layouts/default/runs"), &t.key).await;
    Elsewhere {
        session: "bob-s1".into(),
        job: jobs["jobs"][0]["job_id"].as_str().unwrap().into(),
        run: runs["runs"][0]["run_id"].as_str().unwrap().into(),
        rollout: "chat-bob-s1".into(),
    }
}

/// The tenant's first key: the one no key made.
async fn first_key_id(app: &TestApp, t: &Tenant) -> String {
    let keys = app.json(Method::GET, "/v1/keys", &t.key).await;
    let first = keys["keys"].as_array().unwrap().iter().find(|k| k["created_by"].is_null()).cloned();
    first.unwrap_or_else(|| panic!("no first key: {keys}"))["key_id"].as_str().unwrap().to_owned()
}

async fn make_key(app: &TestApp, maker: &str, body: Value) -> (String, String) {
    let res = app.request(Method::POST, "/v1/keys", maker).json(&body).send().await.unwrap();
    assert_eq!(res.status(), 201, "{body}");
    let made: Value = res.json().await.unwrap();
    (made["key_id"].as_str().unwrap().into(), made["api_key"].as_str().unwrap().into())
}

/// The route's path with each parameter naming something in the other
/// workspace (or, for tenant-wide ids, something that exists).
fn concrete(path: &str, there: &Elsewhere, key_id: &str) -> String {
    let mut out = String::new();
    for part in path.split('/').skip(1) {
        let value = match part {
            "{workspace}" => OTHER,
            "{layout}" => "default",
            "{session_id}" => &there.session,
            "{job_id}" => &there.job,
            "{run_id}" => &there.run,
            "{rollout_id}" => &there.rollout,
            "{*path}" => "MEMORY.md",
            "{webhook_id}" | "{tenant_id}" => "00000000-0000-4000-8000-000000000000",
            "{key_id}" => key_id,
            p if p.starts_with('{') => panic!("route {path}: the test does not know the parameter {p}; add it"),
            literal => literal,
        };
        out.push('/');
        out.push_str(value);
    }
    out
}

/// A body a route could take: the other workspace where it names one.
fn body_for(method: &Method, path: &str) -> Option<Value> {
    match (method.as_str(), path) {
        ("POST", "/v1/sessions") => Some(json!({"workspace": OTHER})),
        ("POST", "/v1/keys") => Some(json!({"workspaces": [OTHER], "permissions": ["read"]})),
        ("POST", "/v1/mcp") => Some(json!({"jsonrpc": "2.0", "id": 1, "method": "ping"})),
        ("POST" | "PUT" | "PATCH", _) => Some(json!({})),
        _ => None,
    }
}

async fn a_key_for_one_workspace_reaches_no_other_by_any_route(backend: Backend) {
    let app = TestApp::start(backend).await;
    let t = app.tenant().await;
    let there = elsewhere(&app, &t).await;
    conversation(&app, &t.key, "alice", "alice-s1").await;
    let every = ["ingest", "close", "read", "edit", "manage"];
    let (_, alice) = make_key(&app, &t.key, json!({"workspaces": ["alice"], "permissions": every})).await;
    let own_key_id = first_key_id(&app, &t).await;
    for (method, template, access) in memoryd::api::route_list() {
        let path = concrete(template, &there, &own_key_id);
        let mut req =
            app.request(method.clone(), &path, &alice).header("accept", "application/json, text/event-stream");
        if let Some(body) = body_for(&method, template) {
            req = req.json(&body);
        }
        let what = format!("{method} {template}");
        let reach = match access {
            Access::Open => continue,
            Access::Admin => {
                assert_eq!(req.send().await.unwrap().status(), 401, "{what}: a tenant key is no admin token");
                continue;
            }
            Access::Key(_, reach) => reach,
        };
        if template == "/v1/events" || (template == "/v1/mcp" && method != Method::POST) {
            continue; // a stream, and the transport's other verbs: below
        }
        let res = req.send().await.unwrap();
        let status = res.status().as_u16();
        let text = res.text().await.unwrap();
        match reach {
            Reach::Workspace | Reach::Session | Reach::Job => {
                assert_eq!(status, 404, "{what} reached the other workspace: {text}");
            }
            Reach::EveryWorkspace => assert_eq!(status, 403, "{what}: {text}"),
            Reach::Filtered | Reach::Tenant => match (method.as_str(), template) {
                ("POST", "/v1/sessions") | ("POST", "/v1/keys") => assert_eq!(status, 403, "{what}: {text}"),
                ("DELETE", _) => assert_eq!(status, 404, "{what}: a key it does not cover: {text}"),
                _ => {
                    assert!(status < 300, "{what}: {status} {text}");
                    assert!(!text.contains(OTHER) && !text.contains(&there.session), "{what} shows it: {text}");
                }
            },
        }
    }
    // The listings still show what the key reaches.
    let sessions = app.json(Method::GET, "/v1/sessions", &alice).await;
    assert_eq!(sessions["sessions"].as_array().unwrap().len(), 1, "{sessions}");
    let workspaces = app.json(Method::GET, "/v1/workspaces", &alice).await;
    assert_eq!(workspaces["workspaces"].as_array().unwrap().len(), 1, "{workspaces}");
    let jobs = app.json(Method::GET, "/v1/jobs", &alice).await["jobs"].as_array().unwrap().clone();
    assert!(!jobs.is_empty() && jobs.iter().all(|j| j["workspace"] == "alice"));
    // Appending to a new session opens it in the key's workspace, or nowhere.
    let segment = json!({"input": "hi"});
    assert_eq!(app.post_segment(&alice, "new-default", "default", segment.clone()).await.status(), 403);
    let url = "/v1/sessions/new-a/layouts/default/segments?workspace=alice";
    assert_eq!(app.request(Method::POST, url, &alice).json(&segment).send().await.unwrap().status(), 201);
    assert_eq!(app.post_segment(&alice, "new-a", "default", segment).await.status(), 201, "found in its workspace");
}

async fn each_route_needs_its_permission(backend: Backend) {
    let app = TestApp::start(backend).await;
    let t = app.tenant().await;
    let there = elsewhere(&app, &t).await;
    let own_key_id = first_key_id(&app, &t).await;
    for lacking in Permission::ALL {
        // edit is granted only beside read.
        let without = |p: &Permission| *p != lacking && !(lacking == Permission::Read && *p == Permission::Edit);
        let held: Vec<&str> = Permission::ALL.iter().filter(|p| without(p)).map(|p| p.as_str()).collect();
        let (_, key) = make_key(&app, &t.key, json!({"workspaces": "*", "permissions": held})).await;
        for (method, template, access) in memoryd::api::route_list() {
            let Access::Key(needed, _) = access else { continue };
            if needed != lacking {
                continue;
            }
            let mut req = app.request(method.clone(), &concrete(template, &there, &own_key_id), &key);
            if let Some(body) = body_for(&method, template) {
                req = req.json(&body);
            }
            let (status, code, body) = status_code_body(req.send().await.unwrap()).await;
            assert_eq!((status, code.as_str()), (403, "forbidden"), "{method} {template} without {lacking:?}: {body}");
            assert!(body["detail"].as_str().unwrap().contains(lacking.as_str()), "{body}");
        }
    }
}

async fn keys_grant_only_what_they_hold_and_end_at_once(backend: Backend) {
    let app = TestApp::start(backend).await;
    let t = app.tenant().await;
    let soon = (chrono::Utc::now() + chrono::Duration::hours(1)).to_rfc3339();
    let body = json!({"name": "dashboard", "workspaces": ["alice", "carol"], "permissions": ["read", "manage"],
                      "expires_at": soon});
    let res = app.request(Method::POST, "/v1/keys", &t.key).json(&body).send().await.unwrap();
    assert_eq!(res.status(), 201);
    let made: Value = res.json().await.unwrap();
    assert_eq!(made["name"], "dashboard");
    assert_eq!(made["workspaces"], json!(["alice", "carol"]));
    assert_eq!(made["permissions"], json!(["read", "manage"]));
    assert!(made["api_key"].as_str().unwrap().starts_with("mk_") && made["created_at"].is_string());
    let dashboard = made["api_key"].as_str().unwrap().to_owned();

    let within = json!({"workspaces": ["alice"], "permissions": ["read"], "expires_at": soon});
    let (child_id, child) = make_key(&app, &dashboard, within.clone()).await;
    for (beyond, why) in [
        (json!({"workspaces": ["bob"], "permissions": ["read"], "expires_at": soon}), "another workspace"),
        (json!({"workspaces": "*", "permissions": ["read"], "expires_at": soon}), "every workspace"),
        (json!({"workspaces": ["alice"], "permissions": ["ingest"], "expires_at": soon}), "a permission it lacks"),
        (json!({"workspaces": ["alice"], "permissions": ["read"]}), "outliving its maker"),
    ] {
        let (status, code, _) =
            status_code_body(app.request(Method::POST, "/v1/keys", &dashboard).json(&beyond).send().await.unwrap())
                .await;
        assert_eq!((status, code.as_str()), (403, "forbidden"), "{why}");
    }
    let (status, code, body) = status_code_body(
        app.request(Method::POST, "/v1/keys", &t.key).json(&json!({"workspaces": []})).send().await.unwrap(),
    )
    .await;
    assert_eq!((status, code.as_str()), (400, "invalid_request"), "{body}");

    // A key sees the keys it could have made, never a secret.
    let listed = app.json(Method::GET, "/v1/keys", &dashboard).await;
    let ids: Vec<&str> = listed["keys"].as_array().unwrap().iter().map(|k| k["key_id"].as_str().unwrap()).collect();
    assert_eq!(ids, [child_id.as_str(), made["key_id"].as_str().unwrap()], "newest first");
    assert!(!listed.to_string().contains("mk_"), "{listed}");
    assert_eq!(app.json(Method::GET, "/v1/keys", &t.key).await["keys"].as_array().unwrap().len(), 3);

    // Revoked: refused from the next request on.
    assert_eq!(app.request(Method::GET, "/v1/sessions", &child).send().await.unwrap().status(), 200);
    let res = app.request(Method::DELETE, &format!("/v1/keys/{child_id}"), &dashboard).send().await.unwrap();
    assert_eq!(res.status(), 204);
    assert_eq!(app.request(Method::GET, "/v1/sessions", &child).send().await.unwrap().status(), 401);
    let res = app.request(Method::DELETE, &format!("/v1/keys/{child_id}"), &dashboard).send().await.unwrap();
    assert_eq!(res.status(), 404);

    // Expired: refused once its instant passes, though the key cache holds it.
    let shortly = (chrono::Utc::now() + chrono::Duration::milliseconds(1500)).to_rfc3339();
    let (_, brief) =
        make_key(&app, &t.key, json!({"workspaces": "*", "permissions": ["read"], "expires_at": shortly})).await;
    assert_eq!(app.request(Method::GET, "/v1/sessions", &brief).send().await.unwrap().status(), 200);
    tokio::time::sleep(std::time::Duration::from_millis(1600)).await;
    let (status, _, body) =
        status_code_body(app.request(Method::GET, "/v1/sessions", &brief).send().await.unwrap()).await;
    assert_eq!(status, 401, "{body}");

    // The admin makes scoped keys too, and lists a tenant's keys with their scopes.
    let res = app
        .request(Method::POST, &format!("/v1/admin/tenants/{}/keys", t.id), ADMIN_TOKEN)
        .json(&json!({"workspaces": ["alice"], "permissions": ["ingest", "close"], "name": "runtime"}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 201);
    let runtime: Value = res.json().await.unwrap();
    assert_eq!((&runtime["tenant_id"], &runtime["permissions"]), (&json!(t.id), &json!(["ingest", "close"])));
    let all = app.json(Method::GET, &format!("/v1/admin/tenants/{}/keys", t.id), ADMIN_TOKEN).await;
    let names: Vec<&Value> = all["keys"].as_array().unwrap().iter().map(|k| &k["name"]).collect();
    // Not the revoked one; the expired one, with its expiry, until revoked.
    assert_eq!(names, [&json!("runtime"), &Value::Null, &json!("dashboard"), &Value::Null], "newest first: {all}");
    let mut browser = Browser::new(&app);
    assert_eq!(browser.sign_in(ADMIN_TOKEN).await.0, StatusCode::SEE_OTHER);
    let (status, _, page) = browser.get(&format!("/console/tenants/{}/keys", t.id)).await;
    assert_eq!(status, 200);
    assert!(
        page.contains("runtime") && page.contains("ingest, close") && page.contains("<code>alice</code>"),
        "{page}"
    );
    assert!(page.contains("every workspace") && !page.contains("mk_"), "{page}");
}

async fn a_scoped_keys_stream_console_and_tools_show_only_its_workspaces(backend: Backend) {
    let app = TestApp::start(backend).await;
    let t = app.tenant().await;
    let (reader_id, reader) = make_key(&app, &t.key, json!({"workspaces": ["alice"], "permissions": ["read"]})).await;
    let mut stream = app.request(Method::GET, "/v1/events", &reader).send().await.unwrap();
    assert_eq!(stream.status(), 200);
    conversation(&app, &t.key, OTHER, "bob-s1").await;
    conversation(&app, &t.key, "alice", "alice-s1").await;
    for (_, kind, event) in read_events(&mut stream, 2).await {
        assert_eq!(event["data"]["workspace"], "alice", "{kind}: {event}");
    }

    let mut browser = Browser::new(&app);
    assert_eq!(browser.sign_in(&reader).await.0, StatusCode::SEE_OTHER);
    let (status, _, overview) = browser.get("/console").await;
    assert_eq!(status, 200);
    assert!(overview.contains("alice-s1") && !overview.contains("bob-s1"), "{overview}");
    assert!(!overview.contains("/console/webhooks") && !overview.contains("/console/usage"), "nav: {overview}");
    let (_, _, sessions) = browser.get("/console/sessions").await;
    assert!(sessions.contains("alice-s1") && !sessions.contains("bob-s1"), "{sessions}");
    let (_, _, memory) = browser.get("/console/memory").await;
    assert!(memory.contains("alice") && !memory.contains(OTHER), "{memory}");
    assert!(!memory.contains("Forget workspace"), "a read key's page offers no forget: {memory}");
    for path in [
        "/console/sessions/bob-s1".to_owned(),
        format!("/console/memory?workspace={OTHER}"),
        format!("/console/runs?workspace={OTHER}"),
        "/console/usage".into(),
        "/console/webhooks".into(),
    ] {
        assert_eq!(browser.get(&path).await.0, StatusCode::NOT_FOUND, "{path}");
    }

    let call = |arguments: Value| {
        app.request(Method::POST, "/v1/mcp", &reader)
            .header("accept", "application/json, text/event-stream")
            .json(&json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                          "params": {"name": "memory_read", "arguments": arguments}}))
            .send()
    };
    let ours: Value = call(json!({"path": "MEMORY.md"})).await.unwrap().json().await.unwrap();
    assert_eq!(ours["result"]["isError"], json!(false), "the key's own workspace by default: {ours}");
    let theirs: Value = call(json!({"path": "MEMORY.md", "workspace": OTHER})).await.unwrap().json().await.unwrap();
    assert_eq!(theirs["result"]["isError"], json!(true), "{theirs}");
    let said = theirs["result"]["content"][0]["text"].as_str().unwrap();
    assert!(said.ends_with("(not_found)") && theirs["result"].get("structuredContent").is_none(), "{theirs}");
    let url = format!("/v1/mcp?workspace={OTHER}");
    let res = app.request(Method::POST, &url, &reader).json(&json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}));
    assert_eq!(res.send().await.unwrap().status(), 404);

    // Revoked, the key's open stream ends within seconds.
    let res = app.request(Method::DELETE, &format!("/v1/keys/{reader_id}"), &t.key).send().await.unwrap();
    assert_eq!(res.status(), 204);
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(5);
    while tokio::time::timeout_at(deadline, stream.chunk()).await.expect("the stream ended in time").unwrap().is_some()
    {
    }
}
