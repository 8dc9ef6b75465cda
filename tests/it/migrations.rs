//! Schema upgrades: a database made by the migration runner of the previous
//! release is adopted by sqlx's migrator, keeps its data and gets the newer
//! migrations; an applied migration that was edited afterwards stops start-up.

use crate::both_databases;
use crate::harness::{Backend, TestApp, isolated_postgres_url};
use clap::Parser;
use reqwest::Method;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use sqlx::{AssertSqlSafe, Connection, Row};

const PREVIOUS_RELEASE: [&str; 4] =
    ["0001_core.sql", "0002_jobs.sql", "0003_phase_two.sql", "0004_selection_order.sql"];

both_databases!(a_database_of_the_previous_release_upgrades);

/// Runs `statements` on a fresh connection to `url`; returns the rows of the last.
async fn run(backend: Backend, url: &str, statements: &[String]) -> Vec<i64> {
    macro_rules! on {
        ($conn:ty) => {{
            let mut conn = <$conn>::connect(url).await.unwrap();
            let mut last = Vec::new();
            for sql in statements {
                last = sqlx::raw_sql(AssertSqlSafe(sql.clone()))
                    .fetch_all(&mut conn)
                    .await
                    .unwrap()
                    .iter()
                    .filter_map(|r| r.try_get::<i64, _>(0).ok())
                    .collect();
            }
            last
        }};
    }
    match backend {
        Backend::Postgres | Backend::Bucket => on!(sqlx::PgConnection),
        Backend::Sqlite => on!(sqlx::SqliteConnection),
    }
}

async fn a_database_of_the_previous_release_upgrades(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let (url, dialect) = match backend {
        Backend::Postgres | Backend::Bucket => (isolated_postgres_url().await, "postgres"),
        Backend::Sqlite => (format!("sqlite://{}?mode=rwc", dir.path().join("old.db").display()), "sqlite"),
    };
    // The previous release's runner: each file once, recorded in memoryd_migrations.
    let mut statements: Vec<String> = PREVIOUS_RELEASE
        .iter()
        .map(|f| std::fs::read_to_string(format!("{}/migrations/{dialect}/{f}", env!("CARGO_MANIFEST_DIR"))).unwrap())
        .collect();
    statements.push("CREATE TABLE memoryd_migrations (version BIGINT PRIMARY KEY, applied_at TEXT NOT NULL)".into());
    statements.push(
        "INSERT INTO memoryd_migrations (version, applied_at) VALUES (1, 'x'), (2, 'x'), (3, 'x'), (4, 'x')".into(),
    );
    let key = "mem_previous_release_key";
    let hash: String = Sha256::digest(key.as_bytes()).iter().map(|b| format!("{b:02x}")).collect();
    let tenant = uuid::Uuid::new_v4();
    let (id_literal, key_id_literal) = match backend {
        Backend::Postgres | Backend::Bucket => (format!("'{tenant}'"), format!("'{}'", uuid::Uuid::new_v4())),
        Backend::Sqlite => {
            let blob = |u: uuid::Uuid| format!("X'{}'", u.simple());
            (blob(tenant), blob(uuid::Uuid::new_v4()))
        }
    };
    let now = "'2026-01-01T00:00:00Z'";
    statements.push(format!("INSERT INTO tenants (id, name, created_at) VALUES ({id_literal}, 'old', {now})"));
    statements.push(format!(
        "INSERT INTO api_keys (id, tenant_id, key_hash, created_at) VALUES ({key_id_literal}, {id_literal}, '{hash}', {now})"
    ));
    // An answered idempotency key: the upgrade records which rollout it wrote
    // to. (Made "in the future", so that the retention sweep leaves it.)
    statements.push(format!(
        "INSERT INTO sessions (tenant_id, session_id, workspace, state, metadata, created_at)
         VALUES ({id_literal}, 'old-s', 'team', 'closed', '{{}}', {now})"
    ));
    statements.push(format!(
        "INSERT INTO idempotency_keys (tenant_id, key, request_hash, response, created_at)
         VALUES ({id_literal}, 'old-key', 'h', '{{\"session_id\":\"old-s\",\"layout\":\"default\",\"rollout_id\":\"old-r\",\"segment_index\":0}}', '2099-01-01T00:00:00Z')"
    ));
    run(backend, &url, &statements).await;

    let upgraded_url = url.clone();
    let app = TestApp::start_with(backend, move |c| c.database_url = Some(upgraded_url)).await;
    // The old data serves, and the newer schema works: a close publishes its files.
    assert_eq!(app.request(Method::GET, "/v1/layouts", key).send().await.unwrap().status(), 200);
    app.post_segment(key, "s", "default", json!({"rollout_id": "r", "input": "after the upgrade"})).await;
    let closed = app.json(Method::POST, "/v1/sessions/s/close?wait=30", key).await;
    assert_eq!(closed["memory_status"]["status"], "complete", "{closed}");
    let versions =
        run(backend, &url, &["SELECT version FROM _sqlx_migrations WHERE success ORDER BY version".into()]).await;
    let dialect = if backend == Backend::Postgres { "postgres" } else { "sqlite" };
    let shipped = std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/migrations").to_owned() + "/" + dialect)
        .unwrap()
        .count() as i64;
    assert_eq!(versions, (1..=shipped).collect::<Vec<_>>(), "every shipped migration is applied, in order");
    let backfilled = "SELECT count(*) FROM idempotency_keys
                      WHERE key = 'old-key' AND workspace = 'team' AND layout = 'default' AND rollout_id = 'old-r'";
    assert_eq!(run(backend, &url, &[backfilled.into()]).await, [1]);
    let legacy_left = match backend {
        Backend::Postgres | Backend::Bucket => {
            "SELECT count(*) FROM information_schema.tables WHERE table_schema = current_schema() AND table_name = 'memoryd_migrations'"
        }
        Backend::Sqlite => "SELECT count(*) FROM sqlite_master WHERE name = 'memoryd_migrations'",
    };
    assert_eq!(run(backend, &url, &[legacy_left.into()]).await, [0]);
    app.server.unwrap().shutdown().await.unwrap();

    // An applied migration edited afterwards is refused, not silently skipped.
    run(backend, &url, &["UPDATE _sqlx_migrations SET checksum = substr(checksum, 2) WHERE version = 2".into()]).await;
    let mut config = memoryd::config::Config::try_parse_from(["memoryd", "--database-url", &url]).unwrap();
    config.data_dir = dir.path().join("data");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let refused = memoryd::app::start(config, listener).await;
    let error = refused.err().expect("an edited migration stops start-up");
    assert!(format!("{error:?}").contains("VersionMismatch(2)"), "{error:?}");
}

both_databases!(jobs_queued_by_the_previous_release_run_to_completion);

const LAYOUT: &str = "/v1/workspaces/default/layouts/default";

/// Takes the jobs table back to the previous release's: each kind's payload
/// in the columns it had (restore_run_id, forget_*, edit_spec), no `spec`,
/// and the job-spec migration not applied.
fn previous_release_jobs(backend: Backend) -> Vec<String> {
    let statements: &[&str] = match backend {
        Backend::Postgres | Backend::Bucket => &[
            "ALTER TABLE jobs ADD COLUMN restore_run_id UUID, ADD COLUMN forget_scope TEXT,
                 ADD COLUMN forget_mode TEXT, ADD COLUMN forget_rollouts TEXT, ADD COLUMN edit_spec TEXT",
            "UPDATE jobs SET restore_run_id = (spec::json->'restore'->>'run_id')::uuid,
                 forget_scope = spec::json->'forget'->>'scope', forget_mode = spec::json->'forget'->>'mode',
                 forget_rollouts = CASE WHEN json_array_length(spec::json->'forget'->'rollout_ids') > 0
                                        THEN (spec::json->'forget'->'rollout_ids')::text END,
                 edit_spec = CASE WHEN kind = 'edit' THEN (spec::json->'edit')::text END",
            "ALTER TABLE jobs DROP COLUMN spec",
            "DELETE FROM _sqlx_migrations WHERE version = 26",
        ],
        Backend::Sqlite => &[
            "ALTER TABLE jobs ADD COLUMN restore_run_id BLOB",
            "ALTER TABLE jobs ADD COLUMN forget_scope TEXT",
            "ALTER TABLE jobs ADD COLUMN forget_mode TEXT",
            "ALTER TABLE jobs ADD COLUMN forget_rollouts TEXT",
            "ALTER TABLE jobs ADD COLUMN edit_spec TEXT",
            "UPDATE jobs SET
                 restore_run_id = CASE WHEN kind = 'restore'
                     THEN unhex(replace(json_extract(spec, '$.restore.run_id'), '-', '')) END,
                 forget_scope = CASE WHEN kind = 'forget' THEN json_extract(spec, '$.forget.scope') END,
                 forget_mode = CASE WHEN kind = 'forget' THEN json_extract(spec, '$.forget.mode') END,
                 forget_rollouts = CASE WHEN kind = 'forget' AND json_array_length(spec, '$.forget.rollout_ids') > 0
                                        THEN json_extract(spec, '$.forget.rollout_ids') END,
                 edit_spec = CASE WHEN kind = 'edit' THEN json_extract(spec, '$.edit') END",
            "ALTER TABLE jobs DROP COLUMN spec",
            "DELETE FROM _sqlx_migrations WHERE version = 25",
        ],
    };
    statements.iter().map(|s| s.to_string()).collect()
}

/// A database whose jobs of every kind the previous release queued (one left
/// running by a worker that died, one failed) upgrades to the one `spec`
/// column, and the new binary runs every job to its end.
async fn jobs_queued_by_the_previous_release_run_to_completion(backend: Backend) {
    let mut first = TestApp::start(backend).await;
    let t = first.tenant().await;
    // A consolidated conversation, so that there is a run to restore and a rollout to forget.
    first.post_segment(&t.key, "s1", "default", json!({"rollout_id": "chat-1", "input": "I like tea"})).await;
    let closed = first.json(Method::POST, "/v1/sessions/s1/close?wait=30", &t.key).await;
    assert_eq!(closed["memory_status"]["status"], "complete", "{closed}");
    first.publishes_done().await;
    let runs = first.json(Method::GET, &format!("{LAYOUT}/runs"), &t.key).await;
    let kept_run = runs["runs"][0]["run_id"].as_str().unwrap().to_owned();
    let archive = first.request(Method::GET, "/v1/workspaces/default/export", &t.key).send().await.unwrap();
    let archive = archive.bytes().await.unwrap().to_vec();
    first.server.take().unwrap().shutdown().await.unwrap();

    // The API alone queues one job of every kind; nothing runs them yet.
    let (data_dir, url) = (first.data_dir.clone(), first.database_url.clone());
    let same_place = |no_workers: bool| {
        let (data_dir, url) = (data_dir.clone(), url.clone());
        move |c: &mut memoryd::config::Config| {
            (c.data_dir, c.database_url, c.no_workers) = (data_dir, Some(url), no_workers);
        }
    };
    let mut queuing = TestApp::start_with(backend, same_place(true)).await;
    queuing.post_segment(&t.key, "s2", "default", json!({"rollout_id": "chat-2", "input": "and coffee"})).await;
    assert_eq!(queuing.request(Method::POST, "/v1/sessions/s2/close", &t.key).send().await.unwrap().status(), 202);
    let queue = |path: String, method: Method, body: Option<Value>| {
        let request = queuing.request(method, &path, &t.key);
        let request = match body {
            Some(body) => request.json(&body),
            None => request,
        };
        async move {
            let res = request.send().await.unwrap();
            assert_eq!(res.status(), 202);
            res.json::<Value>().await.unwrap()["job_id"].as_str().unwrap().to_owned()
        }
    };
    let restore = queue(format!("{LAYOUT}/runs/{kept_run}/restore"), Method::POST, None).await;
    let forget = queue(format!("{LAYOUT}/rollouts/chat-1"), Method::DELETE, None).await;
    let create = json!({"command": "create", "path": "notes/upgrade.md", "file_text": "kept\n"});
    let edit_body = json!({"operations": [create], "reason": "the upgrade"});
    let edit = queue(format!("{LAYOUT}/memory/edits?wait=0"), Method::POST, Some(edit_body)).await;
    let (status, _, import) = crate::imports::import(&queuing, &t, "copy", archive).await;
    assert_eq!(status, 202, "{import}");
    let import = import["job_id"].as_str().unwrap().to_owned();
    queuing.server.take().unwrap().shutdown().await.unwrap();

    // As the previous release left them: its columns, a restore whose worker
    // died mid-attempt, an edit that failed (finished "later", so that the
    // retention sweep leaves its record).
    let mut statements = previous_release_jobs(backend);
    let (restore_id, edit_id) = match backend {
        Backend::Postgres | Backend::Bucket => (format!("'{restore}'"), format!("'{edit}'")),
        Backend::Sqlite => {
            let blob = |id: &str| format!("X'{}'", uuid::Uuid::parse_str(id).unwrap().simple());
            (blob(&restore), blob(&edit))
        }
    };
    statements.push(format!(
        "UPDATE jobs SET state = 'running', attempts = 1, lease_owner = 'gone', lease_expires_at = '2000-01-01T00:00:00Z',
             started_at = '2000-01-01T00:00:00Z' WHERE id = {restore_id}"
    ));
    statements.push(format!(
        "UPDATE jobs SET state = 'failed', attempts = 3, last_error = 'the model was down',
             finished_at = '2099-01-01T00:00:00Z' WHERE id = {edit_id}"
    ));
    run(backend, &url, &statements).await;
    let kinds = "SELECT count(DISTINCT kind) FROM jobs WHERE state IN ('queued', 'running', 'failed')";
    assert_eq!(run(backend, &url, &[kinds.into()]).await, [6], "every kind waits");

    let upgraded = TestApp::start_with(backend, same_place(false)).await;
    let retried = upgraded.request(Method::POST, &format!("/v1/jobs/{edit}/retry"), &t.key).send().await.unwrap();
    assert_eq!(retried.status(), 200);
    let jobs = upgraded.settled_jobs(&t.key, "limit=100").await;
    for job in &jobs {
        assert!(matches!(job["state"].as_str(), Some("succeeded" | "skipped")), "{job}");
    }
    for id in [&restore, &forget, &edit, &import] {
        assert_eq!(upgraded.wait_for_job(&t.key, id).await["state"], "succeeded", "{id}");
    }
    let restored = upgraded.json(Method::GET, &format!("/v1/jobs/{restore}"), &t.key).await;
    assert_eq!(restored["restore_run_id"], kept_run.as_str());
    let forgot = upgraded.json(Method::GET, &format!("/v1/jobs/{forget}"), &t.key).await;
    assert_eq!(forgot["forget"], json!({"scope": "rollouts", "mode": "scrub", "rollout_ids": ["chat-1"]}));
    let note = upgraded.request(Method::GET, &format!("{LAYOUT}/memory/read?path=notes/upgrade.md"), &t.key);
    assert_eq!(note.send().await.unwrap().json::<Value>().await.unwrap()["text"], "kept\n");
    let copied = upgraded.json(Method::GET, "/v1/workspaces/copy/layouts/default/files", &t.key).await;
    assert!(copied["files"].as_array().is_some_and(|f| !f.is_empty()), "{copied}");
    let specs = "SELECT count(*) FROM jobs WHERE spec IS NULL OR spec = ''";
    assert_eq!(run(backend, &url, &[specs.into()]).await, [0], "every job has its spec");
}
