//! Schema upgrades: a database made by the migration runner of the previous
//! release is adopted by sqlx's migrator, keeps its data and gets the newer
//! migrations; an applied migration that was edited afterwards stops start-up.

use crate::both_backends;
use crate::harness::{Backend, TestApp, isolated_postgres_url};
use clap::Parser;
use reqwest::Method;
use serde_json::json;
use sha2::{Digest, Sha256};
use sqlx::{AssertSqlSafe, Connection, Row};

const PREVIOUS_RELEASE: [&str; 4] =
    ["0001_core.sql", "0002_jobs.sql", "0003_phase_two.sql", "0004_selection_order.sql"];

both_backends!(a_database_of_the_previous_release_upgrades);

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
        Backend::Postgres => on!(sqlx::PgConnection),
        Backend::Sqlite => on!(sqlx::SqliteConnection),
    }
}

async fn a_database_of_the_previous_release_upgrades(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let (url, dialect) = match backend {
        Backend::Postgres => (isolated_postgres_url().await, "postgres"),
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
        Backend::Postgres => (format!("'{tenant}'"), format!("'{}'", uuid::Uuid::new_v4())),
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
        Backend::Postgres => {
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
