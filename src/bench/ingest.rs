//! The ingest workload: C clients post 8 KiB segments for a while, one a
//! request or B a batch (spread over four rollouts a client). Besides
//! throughput and latency it reports memoryd's CPU time per acknowledged
//! segment (the server runs on threads of its own, see `SERVER_THREAD`), and
//! with `--against-postgres` the same number of clients making one durable
//! 8 KiB insert per transaction straight into Postgres, before and after each
//! run, so the ratio holds for the disk and the minutes it was measured in.

use super::{
    Bench, BenchResult, Figure, drop_schema, figure, isolated_postgres, peak_rss_mib, percentile, reset_peak_rss,
};
use serde_json::json;
use std::time::{Duration, Instant};

/// The name of the bench's server threads (a `comm` is at most 15 bytes).
pub(super) const SERVER_THREAD: &str = "memoryd-server";

/// The segment every client posts, and the row every bare insert writes.
const SEGMENT_BYTES: usize = 8000;

/// The clock ticks of `/proc/*/stat` (Linux's `USER_HZ`, 100 on every architecture memoryd runs on).
const TICKS_PER_SECOND: f64 = 100.0;

impl Bench {
    pub(super) async fn ingest(&self, clients: usize, batch: usize, duration: Duration) -> BenchResult<Vec<Figure>> {
        let mut runs = Vec::new();
        for run in 0..self.runs {
            let bare_before = self.bare_inserts(clients, duration).await?;
            let bare_http = self.bare_http(clients, batch, run, duration).await?;
            reset_peak_rss();
            let groups_before = self.append_groups().await?;
            let cpu_before = server_cpu_seconds();
            let postgres_before = postgres_cpu_seconds();
            let url = |name: &str| match batch {
                1 => format!("{}/v1/sessions/{name}/layouts/default/segments?workspace=ingest", self.base),
                _ => format!("{}/v1/sessions/{name}/segments:batch?workspace=ingest", self.base),
            };
            let prefix = format!("ingest-{clients}-{batch}-{run}");
            let load = post_segments(clients, batch, &prefix, url, &self.key, duration).await?;
            let cpu = server_cpu_seconds() - cpu_before;
            let postgres_cpu = postgres_cpu_seconds() - postgres_before;
            let peak_rss = peak_rss_mib();
            let groups = self.append_groups().await?;
            let group_size = (groups.0 - groups_before.0) / (groups.1 - groups_before.1);
            let bare_after = self.bare_inserts(clients, duration).await?;
            let bare = BarePostgres::mean(bare_before, bare_after);
            let segments = load.segments;
            let cpu_per_segment_us = cpu * 1e6 / segments;
            // Only memoryd's own database counts: with SQLite it is in `cpu`.
            let postgres_cpu_per_segment_us = match self.backend {
                "postgres" | "postgres+s3" => postgres_cpu * 1e6 / segments,
                _ => f64::NAN,
            };
            runs.push(IngestRun {
                cpu_per_segment_us,
                postgres_cpu_per_segment_us,
                group_size,
                bare,
                bare_http,
                peak_rss,
                ..load
            });
        }
        let case = if batch == 1 { format!("C={clients}") } else { format!("C={clients} B={batch}") };
        Ok(ingest_figures(self.backend, &case, &runs))
    }

    /// The floor under memoryd's CPU per segment: the same clients posting
    /// the same body through memoryd's connection handling, on the server's
    /// runtime, to a route that takes the body and answers a receipt — no
    /// middleware, parsing, database or disk.
    async fn bare_http(&self, clients: usize, batch: usize, run: usize, duration: Duration) -> BenchResult<BareHttp> {
        let receipt = json!({"workspace": "ingest", "session_id": "s", "layout": "default", "rollout_id": "r",
                             "segment_index": 0, "rollout_path": "sessions/r.jsonl"});
        let app = axum::Router::new().route(
            "/{client}",
            axum::routing::post(move |_body: axum::body::Bytes| {
                let receipt = receipt.clone();
                async move { (axum::http::StatusCode::CREATED, axum::Json(receipt)) }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let base = format!("http://{}", listener.local_addr()?);
        let limits = crate::api::serve::ConnectionLimits {
            max_connections: clients * 2,
            header_timeout: Duration::from_secs(60),
            idle_timeout: Duration::from_secs(60),
        };
        let stop = tokio_util::sync::CancellationToken::new();
        let server = self.server_runtime.handle().spawn(crate::api::serve::serve(listener, app, limits, stop.clone()));
        let cpu_before = server_cpu_seconds();
        let url = |name: &str| format!("{base}/{name}");
        let load = post_segments(clients, batch, &format!("bare-{clients}-{run}"), url, "bench", duration).await;
        let cpu = server_cpu_seconds() - cpu_before;
        stop.cancel();
        server.await??;
        let load = load?;
        Ok(BareHttp { rate: load.rate, cpu_per_request_us: cpu * 1e6 / load.latencies.len() as f64 })
    }

    /// The appends and the groups they went in so far, from `/metrics`.
    async fn append_groups(&self) -> BenchResult<(f64, f64)> {
        let text = self.http.get(format!("{}/metrics", self.base)).send().await?.text().await?;
        let value =
            |name: &str| text.lines().find_map(|l| l.strip_prefix(name)?.trim().parse::<f64>().ok()).unwrap_or(0.0);
        Ok((value("memoryd_append_group_size_sum "), value("memoryd_append_group_size_count ")))
    }

    /// Inserts per second of `clients` connections, each committing one 8 KiB
    /// row per transaction into a table of a schema of its own, for `duration`;
    /// `None` without `--against-postgres`.
    async fn bare_inserts(&self, clients: usize, duration: Duration) -> BenchResult<Option<BarePostgres>> {
        let Some(url) = &self.bare_postgres else { return Ok(None) };
        let (schema_url, schema) = isolated_postgres(url).await?;
        let result = bare_insert_loop(&schema_url, clients, duration).await;
        drop_schema(url, &schema).await;
        result.map(Some)
    }
}

/// The figures of an ingest workload's runs.
fn ingest_figures(backend: &'static str, case: &str, runs: &[IngestRun]) -> Vec<Figure> {
    let column = |f: fn(&IngestRun) -> f64| runs.iter().map(f).collect::<Vec<_>>();
    let figure = |metric: &'static str, unit: &'static str, values| {
        figure("ingest", backend, case.to_owned(), metric, unit, values)
    };
    let mut figures = vec![
        figure("throughput", "segments/s", column(|r| r.rate)),
        figure("latency p50", "ms", column(|r| percentile(&r.latencies, 0.50))),
        figure("latency p99", "ms", column(|r| percentile(&r.latencies, 0.99))),
        figure("latency max", "ms", column(|r| r.latencies.last().copied().unwrap_or(f64::NAN))),
        figure("memoryd CPU per segment", "µs", column(|r| r.cpu_per_segment_us)),
        figure("segments per group", "", column(|r| r.group_size)),
        figure("peak RSS (server and clients)", "MiB", column(|r| r.peak_rss)),
        figure("bare HTTP, same clients", "requests/s", column(|r| r.bare_http.rate)),
        figure("bare HTTP CPU per request", "µs", column(|r| r.bare_http.cpu_per_request_us)),
    ];
    // Where Postgres is seen on this machine.
    let postgres_cpu = column(|r| r.postgres_cpu_per_segment_us);
    if postgres_cpu.iter().all(|c| c.is_finite()) {
        figures.push(figure("Postgres server CPU per segment", "µs", postgres_cpu));
    }
    if runs.iter().all(|r| r.bare.is_some()) {
        let bare = |r: &IngestRun| r.bare.as_ref().map_or(BarePostgres::NONE, |b| *b);
        let rates = runs.iter().map(|r| bare(r).rate).collect();
        let cpus: Vec<f64> = runs.iter().map(|r| bare(r).server_cpu_per_insert_us).collect();
        let ratio = runs.iter().map(|r| r.rate / bare(r).rate).collect();
        figures.push(figure("bare Postgres, same clients", "inserts/s", rates));
        if cpus.iter().all(|c| c.is_finite()) {
            figures.push(figure("bare Postgres server CPU per insert", "µs", cpus));
        }
        figures.push(figure("ratio to bare Postgres", "×", ratio));
    }
    figures
}

struct IngestRun {
    /// Segments a second.
    rate: f64,
    /// Segments acknowledged.
    segments: f64,
    /// Of each request, sorted, in milliseconds.
    latencies: Vec<f64>,
    cpu_per_segment_us: f64,
    /// Segments per group (one transaction, one sync).
    group_size: f64,
    peak_rss: f64,
    /// Bare Postgres, the mean of before and after.
    bare: Option<BarePostgres>,
    /// The CPU time of memoryd's Postgres server over segments acknowledged.
    postgres_cpu_per_segment_us: f64,
    bare_http: BareHttp,
}

#[derive(Clone, Copy)]
struct BarePostgres {
    /// Inserts per second.
    rate: f64,
    /// The server's CPU time over inserts.
    server_cpu_per_insert_us: f64,
}

impl BarePostgres {
    const NONE: Self = Self { rate: f64::NAN, server_cpu_per_insert_us: f64::NAN };

    fn mean(before: Option<Self>, after: Option<Self>) -> Option<Self> {
        let (b, a) = (before?, after?);
        Some(Self {
            rate: (b.rate + a.rate) / 2.0,
            server_cpu_per_insert_us: (b.server_cpu_per_insert_us + a.server_cpu_per_insert_us) / 2.0,
        })
    }
}

struct BareHttp {
    rate: f64,
    cpu_per_request_us: f64,
}

/// `clients` connections posting 8 KiB segments one request after the
/// other for `duration`, each to `url(its name)`: one a request, or `batch`
/// in a batch over four rollouts of its own.
async fn post_segments(
    clients: usize,
    batch: usize,
    prefix: &str,
    url: impl Fn(&str) -> String,
    key: &str,
    duration: Duration,
) -> BenchResult<IngestRun> {
    // A client of its own, so that the connections are these clients' alone.
    let http = reqwest::Client::builder().pool_max_idle_per_host(clients).build()?;
    let started = Instant::now();
    let mut tasks = Vec::new();
    for client in 0..clients {
        let name = format!("{prefix}-{client}");
        let (http, url, key) = (http.clone(), url(&name), key.to_owned());
        tasks.push(tokio::spawn(async move {
            // Serialised once: the client's CPU is taken from the server's two cores.
            let body = request_body(&name, batch);
            let body = axum::body::Bytes::from(serde_json::to_vec(&body).map_err(|e| e.to_string())?);
            let mut latencies = Vec::new();
            while started.elapsed() < duration {
                let t = Instant::now();
                let request = http.post(&url).bearer_auth(&key).header("content-type", "application/json");
                match request.body(body.clone()).send().await {
                    Ok(r) if r.status() == 201 => latencies.push(t.elapsed().as_secs_f64() * 1000.0),
                    Ok(r) => return Err(format!("ingest answered {}", r.status())),
                    Err(e) => return Err(e.to_string()),
                }
            }
            Ok(latencies)
        }));
    }
    let mut latencies = Vec::new();
    for task in tasks {
        latencies.extend(task.await??);
    }
    let segments = (latencies.len() * batch) as f64;
    let rate = segments / started.elapsed().as_secs_f64();
    latencies.sort_by(f64::total_cmp);
    Ok(IngestRun {
        rate,
        segments,
        latencies,
        cpu_per_segment_us: f64::NAN,
        postgres_cpu_per_segment_us: f64::NAN,
        group_size: f64::NAN,
        peak_rss: f64::NAN,
        bare: None,
        bare_http: BareHttp { rate: f64::NAN, cpu_per_request_us: f64::NAN },
    })
}

/// What client `name` posts: one segment, or a batch of `batch` over four rollouts.
fn request_body(name: &str, batch: usize) -> serde_json::Value {
    let said = "x".repeat(SEGMENT_BYTES);
    if batch == 1 {
        return json!({"rollout_id": name, "input": said});
    }
    let segments: Vec<serde_json::Value> = (0..batch)
        .map(|i| json!({"layout": "default", "rollout_id": format!("{name}-{}", i % 4), "input": said}))
        .collect();
    json!({"segments": segments})
}

async fn bare_insert_loop(url: &str, clients: usize, duration: Duration) -> BenchResult<BarePostgres> {
    let pool = sqlx::postgres::PgPoolOptions::new().max_connections(clients as u32).connect(url).await?;
    // PLAIN storage: the 8 KiB are written as they are, neither compressed nor moved out of line.
    sqlx::raw_sql(
        "CREATE TABLE bare_segments (id bigserial PRIMARY KEY, body text NOT NULL);
         ALTER TABLE bare_segments ALTER COLUMN body SET STORAGE PLAIN;",
    )
    .execute(&pool)
    .await?;
    let mut conns = Vec::new();
    for _ in 0..clients {
        conns.push(pool.acquire().await?);
    }
    let server_before = postgres_cpu_seconds();
    let started = Instant::now();
    let mut tasks = Vec::new();
    for mut conn in conns {
        tasks.push(tokio::spawn(async move {
            let body = "x".repeat(SEGMENT_BYTES);
            let mut inserts = 0u64;
            while started.elapsed() < duration {
                sqlx::query("INSERT INTO bare_segments (body) VALUES ($1)").bind(&body).execute(&mut *conn).await?;
                inserts += 1;
            }
            Ok::<_, sqlx::Error>(inserts)
        }));
    }
    let mut inserts = 0;
    for task in tasks {
        inserts += task.await??;
    }
    let rate = inserts as f64 / started.elapsed().as_secs_f64();
    let server_cpu_per_insert_us = (postgres_cpu_seconds() - server_before) * 1e6 / inserts as f64;
    pool.close().await;
    Ok(BarePostgres { rate, server_cpu_per_insert_us })
}

/// CPU time of the processes named `postgres` that this user may read: the
/// server's backends, writers and checkpointer when it runs on this machine
/// (`NaN` figures when it runs elsewhere and none is seen).
fn postgres_cpu_seconds() -> f64 {
    let mut ticks = 0.0;
    let mut seen = false;
    for process in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let dir = process.path();
        if std::fs::read_to_string(dir.join("comm")).is_ok_and(|comm| comm.trim_end() == "postgres") {
            seen = true;
            ticks += ticks_of(&dir.join("stat").to_string_lossy());
        }
    }
    if seen { ticks / TICKS_PER_SECOND } else { f64::NAN }
}

/// The CPU time this process spent outside the bench's own threads: the
/// server runtime's workers and blocking threads, SQLite's connection
/// threads, and any thread that has ended (so a bench thread that ended is
/// counted as memoryd's, never the other way round).
pub(super) fn server_cpu_seconds() -> f64 {
    let pid = std::process::id().to_string();
    let total = ticks_of("/proc/self/stat");
    let mut bench_threads = 0.0;
    for task in std::fs::read_dir("/proc/self/task").into_iter().flatten().flatten() {
        let dir = task.path();
        let comm = std::fs::read_to_string(dir.join("comm")).unwrap_or_default();
        let main_thread = task.file_name().to_str() == Some(pid.as_str());
        if main_thread || is_bench_thread(comm.trim_end()) {
            bench_threads += ticks_of(&dir.join("stat").to_string_lossy());
        }
    }
    (total - bench_threads) / TICKS_PER_SECOND
}

/// The bench's runtime keeps tokio's default thread name: `tokio-rt-worker`
/// since tokio 1.50, `tokio-runtime-worker` (cut to 15 bytes) before.
fn is_bench_thread(comm: &str) -> bool {
    comm == "tokio-rt-worker" || comm == "tokio-runtime-w"
}

/// User and system clock ticks of a `stat` file of `/proc`.
fn ticks_of(path: &str) -> f64 {
    let stat = std::fs::read_to_string(path).unwrap_or_default();
    // The command name in parentheses may hold spaces: the fields follow its last ')'.
    let fields: Vec<&str> = stat.rsplit_once(')').map_or("", |(_, rest)| rest).split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the whole line, 12 and 13 after the name.
    let field = |i: usize| fields.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    field(11) + field(12)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_threads_of_a_default_runtime_count_as_the_bench_s() {
        let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).build().unwrap();
        let comm = runtime.block_on(async {
            tokio::spawn(async { std::fs::read_to_string("/proc/thread-self/comm").unwrap() }).await.unwrap()
        });
        assert!(is_bench_thread(comm.trim_end()), "a bench thread named {comm:?} would count as memoryd's");
        assert!(!is_bench_thread(SERVER_THREAD));
    }
}
