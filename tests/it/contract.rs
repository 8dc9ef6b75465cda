//! Every status a route answers with is documented for it in `openapi.yaml`.

use crate::every_backend;
use crate::harness::{ADMIN_TOKEN, Backend, TestApp};
use reqwest::Method;
use serde_json::{Value, json};

every_backend!(every_status_served_is_documented);

fn documented(spec: &serde_yaml::Value, method: &Method, template: &str) -> Vec<String> {
    let op = &spec["paths"][template][method.as_str().to_lowercase().as_str()];
    op["responses"]
        .as_mapping()
        .unwrap_or_else(|| panic!("{method} {template} is not in openapi.yaml"))
        .keys()
        .map(|k| k.as_str().unwrap().to_owned())
        .collect()
}

async fn every_status_served_is_documented(backend: Backend) {
    let spec: serde_yaml::Value =
        serde_yaml::from_str(&std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/openapi.yaml")).unwrap())
            .unwrap();
    let app = TestApp::start_with(backend, |c| c.quotas.max_segment_bytes = 2048).await;
    let t = app.tenant().await;
    app.post_segment(&t.key, "done", "default", json!({"rollout_id": "r", "input": "hi"})).await;
    let closed = app.json(Method::POST, "/v1/sessions/done/close?wait=30", &t.key).await;
    let job = closed["jobs"][0]["job_id"].as_str().unwrap().to_owned();
    let runs = app.json(Method::GET, "/v1/workspaces/default/layouts/default/runs", &t.key).await;
    let run = runs["runs"][0]["run_id"].as_str().unwrap().to_owned();
    let big = json!({"input": "x".repeat(4096)});
    let seg = "/v1/sessions/{session_id}/layouts/{layout}/segments";
    let ws = "/v1/workspaces/{workspace}/layouts/{layout}";
    let key = t.key.as_str();
    let made = app.request(Method::POST, "/v1/keys", key).json(&json!({"workspaces": ["a"], "permissions": ["read"]}));
    let made: Value = made.send().await.unwrap().json().await.unwrap();
    let reader = made["api_key"].as_str().unwrap();
    let hook = app
        .request(Method::POST, "/v1/webhooks", key)
        .json(&json!({"url": "https://93.184.216.34/memoryd"}))
        .send()
        .await
        .unwrap();
    assert_eq!(hook.status(), 201);
    let hook = hook.json::<Value>().await.unwrap()["webhook_id"].as_str().unwrap().to_owned();
    let wh = "/v1/webhooks/{webhook_id}";
    let missing = "/v1/webhooks/00000000-0000-0000-0000-000000000000";
    let probes: Vec<(Method, String, String, Option<Value>, &str)> = vec![
        (Method::POST, "/v1/webhooks".into(), "/v1/webhooks".into(), Some(json!({"url": "http://x.example/"})), key),
        (
            Method::POST,
            "/v1/webhooks".into(),
            "/v1/webhooks".into(),
            Some(json!({"url": "https://93.184.216.34/"})),
            key,
        ),
        (Method::GET, "/v1/webhooks".into(), "/v1/webhooks".into(), None, key),
        (Method::GET, wh.into(), format!("/v1/webhooks/{hook}"), None, key),
        (Method::GET, wh.into(), missing.into(), None, key),
        (Method::POST, format!("{wh}/rotate"), format!("/v1/webhooks/{hook}/rotate"), None, key),
        (Method::POST, format!("{wh}/rotate"), format!("{missing}/rotate"), None, key),
        (Method::POST, format!("{wh}/test"), format!("/v1/webhooks/{hook}/test"), None, key),
        (Method::PATCH, wh.into(), format!("/v1/webhooks/{hook}"), Some(json!({"description": "d"})), key),
        (Method::PATCH, wh.into(), format!("/v1/webhooks/{hook}"), Some(json!({"state": "gone"})), key),
        (Method::PATCH, wh.into(), missing.into(), Some(json!({"description": "d"})), key),
        (Method::PATCH, wh.into(), format!("/v1/webhooks/{hook}"), Some(json!({"state": "disabled"})), key),
        (Method::POST, format!("{wh}/test"), format!("/v1/webhooks/{hook}/test"), None, key),
        (Method::POST, format!("{wh}/test"), format!("{missing}/test"), None, key),
        (Method::GET, format!("{wh}/deliveries"), format!("/v1/webhooks/{hook}/deliveries"), None, key),
        (Method::GET, format!("{wh}/deliveries"), format!("/v1/webhooks/{hook}/deliveries?limit=0"), None, key),
        (Method::GET, format!("{wh}/deliveries"), format!("{missing}/deliveries"), None, key),
        (Method::DELETE, wh.into(), format!("/v1/webhooks/{hook}"), None, key),
        (Method::DELETE, wh.into(), missing.into(), None, key),
        (Method::GET, "/v1/events".into(), "/v1/events".into(), None, key),
        (Method::GET, "/v1/events".into(), "/v1/events?types=nope".into(), None, key),
        (Method::GET, "/v1/events".into(), "/v1/events".into(), None, "wrong"),
        (
            Method::POST,
            "/v1/mcp".into(),
            "/v1/mcp".into(),
            Some(json!({"jsonrpc": "2.0", "id": 1, "method": "ping"})),
            "wrong",
        ),
        (Method::GET, "/v1/mcp".into(), "/v1/mcp".into(), None, key),
        (Method::DELETE, "/v1/mcp".into(), "/v1/mcp".into(), None, key),
        (Method::POST, "/v1/mcp".into(), "/v1/mcp?workspace=../x".into(), Some(json!({})), key),
        (Method::GET, "/healthz".into(), "/healthz".into(), None, ""),
        (Method::GET, "/readyz".into(), "/readyz".into(), None, ""),
        (Method::GET, "/metrics".into(), "/metrics".into(), None, ""),
        (Method::GET, "/openapi.yaml".into(), "/openapi.yaml".into(), None, ""),
        (Method::POST, "/v1/admin/tenants".into(), "/v1/admin/tenants".into(), Some(json!({"name": "x"})), ADMIN_TOKEN),
        (Method::POST, "/v1/admin/tenants".into(), "/v1/admin/tenants".into(), Some(json!({"name": ""})), ADMIN_TOKEN),
        (Method::POST, "/v1/admin/tenants".into(), "/v1/admin/tenants".into(), Some(json!({"name": "x"})), "wrong"),
        (
            Method::POST,
            "/v1/admin/tenants/{tenant_id}/keys".into(),
            format!("/v1/admin/tenants/{}/keys", t.id),
            None,
            ADMIN_TOKEN,
        ),
        (
            Method::POST,
            "/v1/admin/tenants/{tenant_id}/keys".into(),
            "/v1/admin/tenants/nope/keys".into(),
            None,
            ADMIN_TOKEN,
        ),
        (Method::DELETE, "/v1/admin/keys/{key_id}".into(), "/v1/admin/keys/nope".into(), None, ADMIN_TOKEN),
        (
            Method::GET,
            "/v1/admin/tenants/{tenant_id}/keys".into(),
            format!("/v1/admin/tenants/{}/keys", t.id),
            None,
            ADMIN_TOKEN,
        ),
        (
            Method::GET,
            "/v1/admin/tenants/{tenant_id}/keys".into(),
            "/v1/admin/tenants/nope/keys".into(),
            None,
            ADMIN_TOKEN,
        ),
        (
            Method::POST,
            "/v1/admin/tenants/{tenant_id}/keys".into(),
            format!("/v1/admin/tenants/{}/keys", t.id),
            Some(json!({"permissions": ["boss"]})),
            ADMIN_TOKEN,
        ),
        (
            Method::POST,
            "/v1/keys".into(),
            "/v1/keys".into(),
            Some(json!({"workspaces": "*", "permissions": ["read"]})),
            key,
        ),
        (Method::POST, "/v1/keys".into(), "/v1/keys".into(), Some(json!({"workspaces": "*"})), key),
        (
            Method::POST,
            "/v1/keys".into(),
            "/v1/keys".into(),
            Some(json!({"workspaces": "*", "permissions": ["read"]})),
            "wrong",
        ),
        (Method::GET, "/v1/keys".into(), "/v1/keys".into(), None, key),
        (Method::GET, "/v1/keys".into(), "/v1/keys".into(), None, reader),
        (Method::PUT, "/v1/layouts/{layout}".into(), "/v1/layouts/z".into(), Some(json!({})), reader),
        (Method::DELETE, "/v1/keys/{key_id}".into(), "/v1/keys/nope".into(), None, key),
        (Method::GET, "/v1/layouts".into(), "/v1/layouts".into(), None, key),
        (Method::GET, "/v1/layouts".into(), "/v1/layouts".into(), None, "wrong"),
        (Method::GET, "/v1/layouts/{layout}".into(), "/v1/layouts/default".into(), None, key),
        (Method::GET, "/v1/layouts/{layout}".into(), "/v1/layouts/nope".into(), None, key),
        (
            Method::PUT,
            "/v1/layouts/{layout}".into(),
            "/v1/layouts/x".into(),
            Some(json!({"memories_dir": "m", "sessions_dir": "s"})),
            key,
        ),
        (
            Method::PUT,
            "/v1/layouts/{layout}".into(),
            "/v1/layouts/x".into(),
            Some(json!({"memories_dir": "m", "sessions_dir": "s"})),
            key,
        ),
        (
            Method::PUT,
            "/v1/layouts/{layout}".into(),
            "/v1/layouts/x".into(),
            Some(json!({"memories_dir": "m2", "sessions_dir": "s2"})),
            key,
        ),
        (
            Method::PUT,
            "/v1/layouts/{layout}".into(),
            "/v1/layouts/y".into(),
            Some(json!({"memories_dir": "/m", "sessions_dir": "s"})),
            key,
        ),
        (Method::PUT, "/v1/layouts/{layout}".into(), "/v1/layouts/y".into(), Some(big.clone()), key),
        (Method::POST, "/v1/sessions".into(), "/v1/sessions".into(), Some(json!({"session_id": "p"})), key),
        (Method::POST, "/v1/sessions".into(), "/v1/sessions".into(), Some(json!({"session_id": "p"})), key),
        (
            Method::POST,
            "/v1/sessions".into(),
            "/v1/sessions".into(),
            Some(json!({"session_id": "p", "workspace": "other"})),
            key,
        ),
        (Method::POST, "/v1/sessions".into(), "/v1/sessions".into(), Some(json!({"session_id": "../p"})), key),
        (Method::GET, "/v1/sessions/{session_id}".into(), "/v1/sessions/p".into(), None, key),
        (Method::GET, "/v1/sessions/{session_id}".into(), "/v1/sessions/nope".into(), None, key),
        (
            Method::POST,
            seg.into(),
            "/v1/sessions/p/layouts/default/segments".into(),
            Some(json!({"rollout_id": "r"})),
            key,
        ),
        (
            Method::POST,
            seg.into(),
            "/v1/sessions/p/layouts/default/segments".into(),
            Some(json!({"rollout_id": "../r"})),
            key,
        ),
        (
            Method::POST,
            seg.into(),
            "/v1/sessions/p/layouts/default/segments".into(),
            Some(json!({"terminal_metadata": {"terminal_state": "x"}})),
            key,
        ),
        (Method::POST, seg.into(), "/v1/sessions/p/layouts/default/segments".into(), Some(big), key),
        (Method::POST, seg.into(), "/v1/sessions/p/layouts/nope/segments".into(), Some(json!({})), key),
        (Method::POST, seg.into(), "/v1/sessions/done/layouts/default/segments".into(), Some(json!({})), key),
        (Method::POST, "/v1/sessions/{session_id}/close".into(), "/v1/sessions/p/close".into(), None, key),
        (Method::POST, "/v1/sessions/{session_id}/close".into(), "/v1/sessions/done/close?wait=1".into(), None, key),
        (Method::POST, "/v1/sessions/{session_id}/close".into(), "/v1/sessions/done/close?wait=x".into(), None, key),
        (Method::POST, "/v1/sessions/{session_id}/close".into(), "/v1/sessions/nope/close".into(), None, key),
        (Method::GET, "/v1/jobs".into(), "/v1/jobs".into(), None, key),
        (Method::GET, "/v1/jobs".into(), "/v1/jobs?state=bad".into(), None, key),
        (Method::GET, "/v1/jobs/{job_id}".into(), format!("/v1/jobs/{job}"), None, key),
        (Method::GET, "/v1/jobs/{job_id}".into(), "/v1/jobs/nope".into(), None, key),
        (Method::POST, "/v1/jobs/{job_id}/retry".into(), format!("/v1/jobs/{job}/retry"), None, key),
        (Method::POST, "/v1/jobs/{job_id}/retry".into(), "/v1/jobs/nope/retry".into(), None, key),
        (
            Method::GET,
            format!("{ws}/phase_two_selection"),
            "/v1/workspaces/default/layouts/default/phase_two_selection".into(),
            None,
            key,
        ),
        (
            Method::GET,
            format!("{ws}/phase_two_selection"),
            "/v1/workspaces/default/layouts/x/phase_two_selection".into(),
            None,
            key,
        ),
        (Method::GET, format!("{ws}/runs"), "/v1/workspaces/default/layouts/default/runs".into(), None, key),
        (Method::GET, format!("{ws}/runs"), "/v1/workspaces/default/layouts/default/runs?limit=0".into(), None, key),
        (Method::GET, format!("{ws}/runs"), "/v1/workspaces/nope/layouts/default/runs".into(), None, key),
        (
            Method::GET,
            format!("{ws}/files/{{path}}"),
            "/v1/workspaces/default/layouts/default/files/MEMORY.md".into(),
            None,
            key,
        ),
        (
            Method::GET,
            format!("{ws}/files/{{path}}"),
            "/v1/workspaces/default/layouts/default/files/nope.md".into(),
            None,
            key,
        ),
        (Method::GET, "/v1/admin/tenants".into(), "/v1/admin/tenants".into(), None, ADMIN_TOKEN),
        (Method::GET, "/v1/admin/tenants".into(), "/v1/admin/tenants".into(), None, key),
        (Method::GET, "/v1/sessions".into(), "/v1/sessions?limit=2".into(), None, key),
        (Method::GET, "/v1/sessions".into(), "/v1/sessions?cursor=junk".into(), None, key),
        (Method::GET, "/v1/workspaces".into(), "/v1/workspaces".into(), None, key),
        (Method::GET, format!("{ws}/files"), "/v1/workspaces/default/layouts/default/files".into(), None, key),
        (Method::GET, format!("{ws}/files"), "/v1/workspaces/default/layouts/nope/files".into(), None, key),
        (
            Method::GET,
            format!("{ws}/runs/{{run_id}}"),
            format!("/v1/workspaces/default/layouts/default/runs/{run}"),
            None,
            key,
        ),
        (
            Method::GET,
            format!("{ws}/runs/{{run_id}}"),
            "/v1/workspaces/default/layouts/default/runs/nope".into(),
            None,
            key,
        ),
        (
            Method::GET,
            format!("{ws}/files/{{path}}"),
            format!("/v1/workspaces/default/layouts/default/files/MEMORY.md?run_id={run}"),
            None,
            key,
        ),
        (
            Method::GET,
            format!("{ws}/files/{{path}}"),
            "/v1/workspaces/default/layouts/default/files/MEMORY.md?run_id=junk".into(),
            None,
            key,
        ),
        (
            Method::POST,
            format!("{ws}/runs/{{run_id}}/restore"),
            format!("/v1/workspaces/default/layouts/default/runs/{run}/restore"),
            None,
            key,
        ),
        (
            Method::POST,
            format!("{ws}/runs/{{run_id}}/restore"),
            "/v1/workspaces/default/layouts/default/runs/nope/restore".into(),
            None,
            key,
        ),
        (
            Method::GET,
            format!("{ws}/instructions"),
            "/v1/workspaces/default/layouts/default/instructions".into(),
            None,
            key,
        ),
        (Method::GET, format!("{ws}/instructions"), "/v1/workspaces/default/layouts/x/instructions".into(), None, key),
        (
            Method::GET,
            format!("{ws}/instructions"),
            "/v1/workspaces/default/layouts/default/instructions?live_update=2".into(),
            None,
            key,
        ),
    ];
    let (mut undocumented, mut unfilled) = (Vec::new(), Vec::new());
    for (method, template, path, body, auth) in probes {
        let mut req = app.client.request(method.clone(), format!("{}{}", app.base, path));
        if !auth.is_empty() {
            req = req.bearer_auth(auth);
        }
        if let Some(body) = body {
            req = req.json(&body);
        }
        let res = req.send().await.unwrap();
        let status = res.status().as_u16().to_string();
        if !documented(&spec, &method, &template).contains(&status) {
            undocumented.push(format!("{method} {template} answered {status} ({path})"));
        }
        let op = &spec["paths"][template.as_str()][method.as_str().to_lowercase().as_str()];
        let schema = &op["responses"][status.as_str()]["content"]["application/json"]["schema"];
        let json = res.headers().get("content-type").is_some_and(|t| t.as_bytes().starts_with(b"application/json"));
        if status.starts_with('2') && json && !schema.is_null() {
            let body: Value = res.json().await.unwrap();
            missing_required(&spec, schema, &body, &format!("{method} {template}"), &mut unfilled);
        }
    }
    assert!(undocumented.is_empty(), "statuses missing from openapi.yaml:\n{}", undocumented.join("\n"));
    assert!(unfilled.is_empty(), "required fields missing from answers:\n{}", unfilled.join("\n"));
}

/// The schema allows null: `type: [x, "null"]`, `type: "null"` or a `oneOf` with null.
fn nullable(schema: &serde_yaml::Value) -> bool {
    let null = |t: &serde_yaml::Value| t.as_str() == Some("null");
    schema["type"].as_sequence().is_some_and(|types| types.iter().any(null))
        || null(&schema["type"])
        || schema["oneOf"].as_sequence().is_some_and(|options| options.iter().any(|o| null(&o["type"])))
}

/// Where `value` lacks a field its documented `schema` requires, or is null where it may not be (through
/// `$ref`s, `allOf`, properties and array items): the clients' types take
/// required fields as always there.
fn missing_required(
    spec: &serde_yaml::Value,
    schema: &serde_yaml::Value,
    value: &Value,
    at: &str,
    out: &mut Vec<String>,
) {
    if let Some(reference) = schema["$ref"].as_str() {
        let name = reference.rsplit('/').next().unwrap();
        return missing_required(spec, &spec["components"]["schemas"][name], value, at, out);
    }
    for part in schema["allOf"].as_sequence().into_iter().flatten() {
        missing_required(spec, part, value, at, out);
    }
    if value.is_null() && !schema["type"].is_null() && !nullable(schema) {
        out.push(format!("{at}: null, which its schema does not allow"));
    }
    if let Some(object) = value.as_object() {
        for field in schema["required"].as_sequence().into_iter().flatten().filter_map(|f| f.as_str()) {
            if !object.contains_key(field) {
                out.push(format!("{at}: .{field}"));
            }
        }
        for (name, property) in schema["properties"].as_mapping().into_iter().flatten() {
            let name = name.as_str().unwrap();
            if let Some(inner) = object.get(name) {
                missing_required(spec, property, inner, &format!("{at}.{name}"), out);
            }
        }
    }
    if let Some(items) = value.as_array() {
        for (i, item) in items.iter().enumerate() {
            missing_required(spec, &schema["items"], item, &format!("{at}[{i}]"), out);
        }
    }
}
