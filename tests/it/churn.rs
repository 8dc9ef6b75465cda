//! The hot tables age well (issue 45): on Postgres memoryd vacuums a queue
//! table whose rows left dead versions behind, whether or not the server's
//! autovacuum runs (the one these tests use has it off); SQLite reuses the
//! space in place and has nothing to reclaim.

use crate::both_databases;
use crate::harness::{Backend, Database, TestApp};
use reqwest::Method;
use serde_json::json;
use std::time::{Duration, Instant};

both_databases!(the_queues_dead_rows_are_reclaimed);

async fn metrics(app: &TestApp) -> String {
    app.client.get(format!("{}/metrics", app.base)).send().await.unwrap().text().await.unwrap()
}

async fn the_queues_dead_rows_are_reclaimed(backend: Backend) {
    let app = TestApp::start_with(backend, |c| c.records.reclaim_dead_rows = 10).await;
    let t = app.tenant().await;
    // Each job's row moves queued → running → succeeded: two dead versions a job.
    for i in 0..8 {
        let segment = json!({"rollout_id": format!("r{i}"), "input": "I keep bees.", "final_output": "ok"});
        assert_eq!(app.post_segment(&t.key, &format!("s{i}"), "default", segment).await.status(), 201);
        let closed = app.json(Method::POST, &format!("/v1/sessions/s{i}/close?wait=30"), &t.key).await;
        assert_eq!(closed["state"], "closed", "{closed}");
    }
    let vacuumed = "memoryd_tables_vacuumed_total{table=\"jobs\"}";
    match backend {
        Backend::Postgres | Backend::Bucket => {
            let mut db = Database::connect(backend, &app.database_url).await;
            let vacuumed_jobs = "SELECT count(*) FROM pg_stat_user_tables
                WHERE schemaname = current_schema() AND relname = 'jobs' AND last_vacuum IS NOT NULL";
            let started = Instant::now();
            while db.count(vacuumed_jobs).await == 0 || !metrics(&app).await.contains(vacuumed) {
                assert!(started.elapsed() < Duration::from_secs(60), "the jobs table was never vacuumed");
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        }
        Backend::Sqlite => {
            // Past the first check and the next.
            tokio::time::sleep(Duration::from_secs(6)).await;
            assert!(!metrics(&app).await.contains("memoryd_tables_vacuumed_total"));
        }
    }
    // Vacuuming took nothing that was in use.
    let sessions = app.json(Method::GET, "/v1/sessions?state=closed", &t.key).await;
    assert_eq!(sessions["sessions"].as_array().unwrap().len(), 8, "{sessions}");
}
