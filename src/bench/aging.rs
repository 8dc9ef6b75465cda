//! The drain in steps on one database (`--workload drain --steps`): after
//! each step's drain, what a `/metrics` scrape, an append and a close cost on
//! the quiet service, and on Postgres how many dead row versions and how
//! much index the hot tables carry. A queue table whose rows move queued →
//! running → succeeded leaves a dead version at every move; costs that grow
//! from step to step show a database that does not keep up with its churn.

use super::{Bench, BenchResult, Figure, figure};
use serde_json::json;
use std::time::Instant;

/// The tables every job, append, close and event writes.
const HOT_TABLES: [&str; 5] = ["jobs", "sessions", "rollouts", "events", "webhook_deliveries"];

/// Scrapes, appends and closes timed after each step.
const SCRAPES: usize = 10;
const APPENDS: usize = 20;
const CLOSES: usize = 5;

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(f64::NAN)
}

impl Bench {
    /// The probes after step `step` (from 1), as figures of `case`.
    pub(super) async fn aging_probes(&self, case: &str, step: usize) -> BenchResult<Vec<Figure>> {
        let one = |metric: &'static str, unit: &'static str, value: f64| {
            figure("drain", self.backend, case.to_owned(), metric, unit, vec![value])
        };
        let mut out = vec![
            one("a /metrics scrape, p50", "ms", self.time_scrapes().await?),
            one("an append, p50", "ms", self.time_appends(step).await?),
            one("a one-rollout close?wait, p50", "ms", self.time_closes(step).await?),
        ];
        if let Some(url) = &self.database_url {
            for (table, dead, live, index_bytes) in hot_table_stats(url).await? {
                let case = format!("{case}, {table}");
                out.push(figure("drain", self.backend, case.clone(), "dead row versions", "rows", vec![dead]));
                out.push(figure("drain", self.backend, case.clone(), "live rows", "rows", vec![live]));
                out.push(figure("drain", self.backend, case, "index size", "MiB", vec![index_bytes / 1048576.0]));
            }
        }
        Ok(out)
    }

    async fn time_scrapes(&self) -> BenchResult<f64> {
        let mut times = Vec::with_capacity(SCRAPES);
        for _ in 0..SCRAPES {
            let started = Instant::now();
            let res = self.http.get(format!("{}/metrics", self.base)).send().await?;
            if !res.status().is_success() {
                return Err(format!("a scrape answered {}", res.status()).into());
            }
            res.bytes().await?;
            times.push(started.elapsed().as_secs_f64() * 1000.0);
        }
        Ok(median(times))
    }

    async fn time_appends(&self, step: usize) -> BenchResult<f64> {
        let mut times = Vec::with_capacity(APPENDS);
        for i in 0..APPENDS {
            let body = json!({"rollout_id": format!("aging{step}-{i}"), "input": "a probe", "final_output": "ok"});
            let started = Instant::now();
            let (status, answer) =
                self.post(&format!("/v1/sessions/aging{step}-{i}/layouts/default/segments"), &body).await?;
            if status != 201 {
                return Err(format!("a probe append answered {status}: {answer}").into());
            }
            times.push(started.elapsed().as_secs_f64() * 1000.0);
        }
        Ok(median(times))
    }

    /// Closes sessions the appends opened, one at a time, each until it is closed.
    async fn time_closes(&self, step: usize) -> BenchResult<f64> {
        let mut times = Vec::with_capacity(CLOSES);
        for i in 0..CLOSES {
            let url = format!("{}/v1/sessions/aging{step}-{i}/close?wait=60", self.base);
            let started = Instant::now();
            let res = self.http.post(url).bearer_auth(&self.key).send().await?;
            if res.status() != 200 {
                return Err(format!("a probe close answered {}", res.status()).into());
            }
            times.push(started.elapsed().as_secs_f64() * 1000.0);
        }
        Ok(median(times))
    }
}

/// `(table, dead row versions, live rows, index bytes)` of the hot tables,
/// from Postgres's statistics of the bench's schema.
async fn hot_table_stats(url: &str) -> BenchResult<Vec<(String, f64, f64, f64)>> {
    use sqlx::{Connection, Row};
    let mut conn = sqlx::PgConnection::connect(url).await?;
    let rows = sqlx::query(
        "SELECT relname::text AS name, n_dead_tup::float8 AS dead, n_live_tup::float8 AS live,
                pg_indexes_size(relid)::float8 AS index_bytes
         FROM pg_stat_user_tables WHERE schemaname = current_schema() AND relname::text = ANY($1)
         ORDER BY relname",
    )
    .bind(HOT_TABLES.map(str::to_owned).to_vec())
    .fetch_all(&mut conn)
    .await?;
    rows.iter()
        .map(|row| Ok((row.try_get("name")?, row.try_get("dead")?, row.try_get("live")?, row.try_get("index_bytes")?)))
        .collect()
}
