//! Listings (SPEC §2.6): sessions, jobs and runs a page at a time behind
//! keyset cursors, workspaces, a layout's memory files, and tenants.

use crate::every_backend;
use crate::harness::{ADMIN_TOKEN, Backend, TestApp, status_code_body};
use reqwest::Method;
use serde_json::{Value, json};
use std::collections::HashSet;

every_backend!(
    sessions_page_by_cursor_and_stay_stable_under_inserts,
    jobs_and_runs_page_by_cursor,
    workspaces_files_and_tenants_are_listed,
);

/// Every row of a listing, following `next_cursor` with pages of `limit`;
/// `between` runs after each page.
async fn all_pages(
    app: &TestApp,
    key: &str,
    path: &str,
    field: &str,
    limit: usize,
    mut between: impl AsyncFnMut(),
) -> Vec<Value> {
    let mut rows = Vec::new();
    let mut cursor: Option<String> = None;
    let sep = if path.contains('?') { '&' } else { '?' };
    loop {
        let url = match &cursor {
            Some(c) => format!("{path}{sep}limit={limit}&cursor={c}"),
            None => format!("{path}{sep}limit={limit}"),
        };
        let page = app.json(Method::GET, &url, key).await;
        let got = page[field].as_array().unwrap_or_else(|| panic!("{page}"));
        assert!(got.len() <= limit);
        rows.extend(got.iter().cloned());
        between().await;
        match page["next_cursor"].as_str() {
            Some(next) => {
                assert_eq!(got.len(), limit, "a page before the last is full");
                cursor = Some(next.to_owned());
            }
            None => return rows,
        }
    }
}

fn ids(rows: &[Value], field: &str) -> Vec<String> {
    rows.iter().map(|r| r[field].as_str().unwrap().to_owned()).collect()
}

async fn sessions_page_by_cursor_and_stay_stable_under_inserts(backend: Backend) {
    let app = TestApp::start_with(backend, |c| c.no_workers = true).await;
    let t = app.tenant().await;
    let other = app.tenant().await;
    for n in 0..23 {
        let workspace = if n % 3 == 0 { "team" } else { "default" };
        let body = json!({"session_id": format!("s-{n:02}"), "workspace": workspace});
        assert_eq!(app.request(Method::POST, "/v1/sessions", &t.key).json(&body).send().await.unwrap().status(), 201);
    }
    for r in ["a", "b"] {
        for _ in 0..2 {
            let res = app.post_segment(&t.key, "s-05", "default", json!({"rollout_id": r, "final_output": "x"})).await;
            assert_eq!(res.status(), 201);
        }
    }
    let everything = app.json(Method::GET, "/v1/sessions?limit=1000", &t.key).await;
    assert_eq!(everything["next_cursor"], Value::Null);
    let expected: Vec<String> = (0..23).rev().map(|n| format!("s-{n:02}")).collect();
    assert_eq!(ids(everything["sessions"].as_array().unwrap(), "session_id"), expected);
    let s05 = everything["sessions"].as_array().unwrap().iter().find(|s| s["session_id"] == "s-05").unwrap();
    assert_eq!((s05["segments"].as_i64(), s05["rollouts"].as_i64(), &s05["state"]), (Some(4), Some(2), &json!("open")));
    assert_eq!(
        s05.as_object().unwrap().keys().collect::<Vec<_>>(),
        ["session_id", "workspace", "state", "created_at", "closed_at", "segments", "rollouts", "memory_status"]
    );

    // New sessions arrive between the pages: they are newer than the cursor,
    // so the walk neither repeats nor skips a row it started with.
    let mut inserted = 0;
    let walked = all_pages(&app, &t.key, "/v1/sessions", "sessions", 5, async || {
        inserted += 1;
        let body = json!({"session_id": format!("late-{inserted}")});
        app.request(Method::POST, "/v1/sessions", &t.key).json(&body).send().await.unwrap();
    })
    .await;
    assert_eq!(ids(&walked, "session_id"), expected);
    assert!(inserted >= 5);

    let team = all_pages(&app, &t.key, "/v1/sessions?workspace=team", "sessions", 3, async || {}).await;
    assert_eq!(
        ids(&team, "session_id"),
        (0..23).rev().filter(|n| n % 3 == 0).map(|n| format!("s-{n:02}")).collect::<Vec<_>>()
    );
    assert_eq!(app.request(Method::POST, "/v1/sessions/s-05/close", &t.key).send().await.unwrap().status(), 202);
    let closing = app.json(Method::GET, "/v1/sessions?state=closing", &t.key).await;
    assert_eq!(ids(closing["sessions"].as_array().unwrap(), "session_id"), ["s-05"]);

    let mine = app.json(Method::GET, "/v1/sessions", &other.key).await;
    assert_eq!(mine["sessions"], json!([]), "another tenant's sessions are not listed");

    for bad in [
        "cursor=garbage",
        "cursor=",
        "cursor=zz",
        "limit=0",
        "limit=1001",
        "limit=x",
        "state=done",
        "workspace=a/b",
        "what=1",
    ] {
        let (status, code, body) =
            status_code_body(app.request(Method::GET, &format!("/v1/sessions?{bad}"), &t.key).send().await.unwrap())
                .await;
        assert_eq!((status, code.as_str()), (400, "invalid_request"), "{bad}: {body}");
    }
}

async fn jobs_and_runs_page_by_cursor(backend: Backend) {
    let app = TestApp::start(backend).await;
    let t = app.tenant().await;
    for n in 0..4 {
        for r in 0..2 {
            let body = json!({"rollout_id": format!("chat-{n}-{r}"), "input": format!("I like tea number {n}"), "final_output": "ok"});
            assert_eq!(app.post_segment(&t.key, &format!("s-{n}"), "default", body).await.status(), 201);
        }
        let closed = app.json(Method::POST, &format!("/v1/sessions/s-{n}/close?wait=30"), &t.key).await;
        assert_eq!(closed["state"], "closed", "{closed}");
    }
    let all = app.json(Method::GET, "/v1/jobs?limit=1000", &t.key).await;
    let all_ids = ids(all["jobs"].as_array().unwrap(), "job_id");
    assert_eq!(all_ids.len(), 12, "8 phase-one and 4 phase-two jobs");
    let walked = ids(&all_pages(&app, &t.key, "/v1/jobs", "jobs", 5, async || {}).await, "job_id");
    assert_eq!(walked, all_ids);
    let phase_one = all_pages(&app, &t.key, "/v1/jobs?kind=phase_one", "jobs", 3, async || {}).await;
    assert_eq!(phase_one.len(), 8);
    assert!(phase_one.iter().all(|j| j["kind"] == "phase_one"));

    let runs_path = "/v1/workspaces/default/layouts/default/runs";
    let runs = app.json(Method::GET, runs_path, &t.key).await;
    let run_ids = ids(runs["runs"].as_array().unwrap(), "run_id");
    assert_eq!(run_ids.len(), 4);
    assert_eq!(ids(&all_pages(&app, &t.key, runs_path, "runs", 1, async || {}).await, "run_id"), run_ids);

    // A sessions cursor names a session, not a job or a run.
    let sessions = app.json(Method::GET, "/v1/sessions?limit=1", &t.key).await;
    let session_cursor = sessions["next_cursor"].as_str().unwrap().to_owned();
    for path in [
        format!("/v1/jobs?cursor={session_cursor}"),
        format!("{runs_path}?cursor={session_cursor}"),
        format!("{runs_path}?cursor=0"),
    ] {
        let (status, code, _) = status_code_body(app.request(Method::GET, &path, &t.key).send().await.unwrap()).await;
        assert_eq!((status, code.as_str()), (400, "invalid_request"), "{path}");
    }
    // Nor does a jobs or runs cursor name a session, though a job's id is a
    // valid session id; and a cursor no listing made is refused by all three.
    let job_cursor =
        app.json(Method::GET, "/v1/jobs?limit=1", &t.key).await["next_cursor"].as_str().unwrap().to_owned();
    let run_cursor = app.json(Method::GET, &format!("{runs_path}?limit=1"), &t.key).await["next_cursor"]
        .as_str()
        .unwrap()
        .to_owned();
    let forged: String = "v1|2026-12-01T08:00:00Z|s-1".bytes().map(|b| format!("{b:02x}")).collect();
    for path in [
        format!("/v1/sessions?cursor={job_cursor}"),
        format!("/v1/sessions?cursor={run_cursor}"),
        format!("/v1/jobs?cursor={run_cursor}"),
        format!("{runs_path}?cursor={job_cursor}"),
        format!("/v1/sessions?cursor={forged}"),
        format!("/v1/jobs?cursor={forged}"),
        format!("{runs_path}?cursor={forged}"),
    ] {
        let (status, code, _) = status_code_body(app.request(Method::GET, &path, &t.key).send().await.unwrap()).await;
        assert_eq!((status, code.as_str()), (400, "invalid_request"), "{path}");
    }
    let other = app.tenant().await;
    assert_eq!(app.json(Method::GET, "/v1/jobs", &other.key).await["jobs"], json!([]));
    let theirs = app.json(Method::GET, &format!("/v1/jobs?cursor={job_cursor}"), &other.key).await;
    assert_eq!(theirs["jobs"], json!([]), "a cursor opens nothing of another tenant");
}

async fn workspaces_files_and_tenants_are_listed(backend: Backend) {
    let app = TestApp::start(backend).await;
    let t = app.tenant().await;
    let other = app.tenant().await;
    let res = app
        .request(Method::PUT, "/v1/layouts/notes", &t.key)
        .json(&json!({"memories_dir": "notes/memory", "sessions_dir": "notes/sessions"}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 201);
    let fresh = app.json(Method::GET, "/v1/workspaces", &t.key).await;
    assert_eq!(fresh, json!({"workspaces": [{"name": "default", "layouts": [], "sessions": 0, "updated_at": null}]}));

    for layout in ["default", "notes"] {
        let path = format!("/v1/sessions/s-team/layouts/{layout}/segments?workspace=team");
        let body = json!({"rollout_id": "chat", "input": "I prefer green tea", "final_output": "noted"});
        assert_eq!(app.request(Method::POST, &path, &t.key).json(&body).send().await.unwrap().status(), 201);
    }
    assert_eq!(app.post_segment(&t.key, "s-default", "default", json!({"rollout_id": "r"})).await.status(), 201);
    let closed = app.json(Method::POST, "/v1/sessions/s-team/close?wait=30", &t.key).await;
    assert_eq!(closed["state"], "closed", "{closed}");

    let listed = app.json(Method::GET, "/v1/workspaces", &t.key).await;
    let workspaces = listed["workspaces"].as_array().unwrap();
    assert_eq!(ids(workspaces, "name"), ["default", "team"]);
    assert_eq!(workspaces[1]["layouts"], json!(["default", "notes"]));
    assert_eq!((workspaces[0]["sessions"].as_i64(), workspaces[1]["sessions"].as_i64()), (Some(1), Some(1)));
    assert!(workspaces[1]["updated_at"].is_string());
    assert_eq!(app.json(Method::GET, "/v1/workspaces", &other.key).await["workspaces"].as_array().unwrap().len(), 1);

    let files = app.json(Method::GET, "/v1/workspaces/team/layouts/notes/files", &t.key).await;
    let paths = ids(files["files"].as_array().unwrap(), "path");
    for want in
        ["MEMORY.md", "memory_summary.md", "raw_memories.md", "raw_memories/chat.md", "phase_two_selection.json"]
    {
        assert!(paths.iter().any(|p| p == want), "{want} missing from {paths:?}");
    }
    assert!(paths.windows(2).all(|w| w[0] < w[1]), "sorted by path: {paths:?}");
    let summary = files["files"].as_array().unwrap().iter().find(|f| f["path"] == "memory_summary.md").unwrap();
    let on_disk = std::fs::metadata(app.workspace_dir(&t, "team").join("notes/memory/memory_summary.md")).unwrap();
    assert_eq!(summary["bytes"].as_u64(), Some(on_disk.len()));
    // A temporary file of a publish under way is not memory.
    std::fs::write(
        app.workspace_dir(&t, "team").join("notes/memory/.memoryd-00000000-0000-0000-0000-000000000000-x.tmp"),
        "x",
    )
    .unwrap();
    let again = app.json(Method::GET, "/v1/workspaces/team/layouts/notes/files", &t.key).await;
    assert_eq!(again["files"].as_array().unwrap().len(), paths.len());
    let empty = app.json(Method::GET, "/v1/workspaces/default/layouts/notes/files", &t.key).await;
    assert_eq!(empty, json!({"files": []}));
    for (key, path) in [
        (&other.key, "/v1/workspaces/team/layouts/notes/files"),
        (&t.key, "/v1/workspaces/nowhere/layouts/default/files"),
        (&t.key, "/v1/workspaces/team/layouts/nothing/files"),
    ] {
        let (status, code, _) = status_code_body(app.request(Method::GET, path, key).send().await.unwrap()).await;
        assert_eq!((status, code.as_str()), (404, "not_found"), "{path}");
    }

    let tenants = app.json(Method::GET, "/v1/admin/tenants", ADMIN_TOKEN).await;
    let tenants = tenants["tenants"].as_array().unwrap();
    let mine = tenants.iter().find(|x| x["tenant_id"] == t.id.as_str()).unwrap();
    assert_eq!((mine["keys"].as_i64(), mine["sessions"].as_i64(), &mine["name"]), (Some(1), Some(2), &json!("acme")));
    let seen: HashSet<_> = tenants.iter().map(|x| x["tenant_id"].as_str().unwrap()).collect();
    assert!(seen.contains(other.id.as_str()));
    let (status, code, _) =
        status_code_body(app.request(Method::GET, "/v1/admin/tenants", &t.key).send().await.unwrap()).await;
    assert_eq!((status, code.as_str()), (401, "unauthorized"));

    // A page at a time, oldest first, each tenant once.
    for _ in 0..3 {
        app.tenant().await;
    }
    let every: Vec<String> = tenants.iter().map(|x| x["tenant_id"].as_str().unwrap().to_owned()).collect();
    let (mut paged, mut cursor) = (Vec::new(), None::<String>);
    loop {
        let path = match &cursor {
            Some(c) => format!("/v1/admin/tenants?limit=2&cursor={c}"),
            None => "/v1/admin/tenants?limit=2".to_owned(),
        };
        let page = app.json(Method::GET, &path, ADMIN_TOKEN).await;
        let rows = page["tenants"].as_array().unwrap();
        assert!(rows.len() <= 2);
        paged.extend(rows.iter().map(|x| x["tenant_id"].as_str().unwrap().to_owned()));
        match page["next_cursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => break,
        }
    }
    assert_eq!(paged.len(), every.len() + 3);
    assert_eq!(paged[..every.len()], every[..], "the first tenants, in the order of the one-page listing");
    let (status, code, _) =
        status_code_body(app.request(Method::GET, "/v1/admin/tenants?cursor=00ff", ADMIN_TOKEN).send().await.unwrap())
            .await;
    assert_eq!((status, code.as_str()), (400, "invalid_request"));
    let sessions_cursor = app.json(Method::GET, "/v1/sessions?limit=1", &t.key).await["next_cursor"].clone();
    let (status, _, _) = status_code_body(
        app.request(
            Method::GET,
            &format!("/v1/admin/tenants?cursor={}", sessions_cursor.as_str().unwrap()),
            ADMIN_TOKEN,
        )
        .send()
        .await
        .unwrap(),
    )
    .await;
    assert_eq!(status, 400, "another listing's cursor is refused");
}
