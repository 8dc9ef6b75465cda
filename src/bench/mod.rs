//! `memoryd bench`: the performance figures of docs/performance.md, measured against a
//! real memoryd (in this process, on SQLite and on Postgres) and a fake model
//! with a fixed latency. Each figure is the median of several runs, with the
//! minimum and the maximum.

use crate::app::{RunningServer, start};
use crate::config::{Config, ModelSettings, ProviderKind, Storage};
use crate::domain::ids::{LayoutName, RolloutId, WorkspaceName};
use crate::fake_model::{FakeLlm, Reply};
use crate::jobs::phase_two::{LayoutPlace, prepare_input};
use crate::pipeline::selection::raw_memories_md;
use crate::store::{RawMemoryRecord, default_layout};
use serde::Serialize;
use serde_json::{Value, json};
use std::time::{Duration, Instant};

mod aging;
mod args;
mod drain;
mod events;
mod forget;
mod ingest;
mod portability;
mod scale;
mod soak;
mod tools;

pub use args::{BackendChoice, BenchArgs, Workload};

#[derive(Debug, Clone, Serialize)]
pub struct Figure {
    pub workload: &'static str,
    pub backend: &'static str,
    pub case: String,
    pub metric: &'static str,
    pub unit: &'static str,
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

fn figure(
    workload: &'static str,
    backend: &'static str,
    case: String,
    metric: &'static str,
    unit: &'static str,
    mut values: Vec<f64>,
) -> Figure {
    values.sort_by(f64::total_cmp);
    let median = values.get(values.len() / 2).copied().unwrap_or(f64::NAN);
    let (min, max) = (values.first().copied().unwrap_or(f64::NAN), values.last().copied().unwrap_or(f64::NAN));
    Figure { workload, backend, case, metric, unit, median, min, max }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

/// A memory figure of this process from `/proc/self/status` (`VmHWM`: the
/// peak since the last reset; `VmRSS`: now), in MiB.
fn memory_mib(field: &str) -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(f64::NAN, |kb| kb / 1024.0)
}

fn peak_rss_mib() -> f64 {
    memory_mib("VmHWM")
}

fn reset_peak_rss() {
    // Writing 5 to clear_refs resets VmHWM (Linux ≥ 4.0).
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

struct Bench {
    server: RunningServer,
    base: String,
    http: reqwest::Client,
    key: String,
    tenant: uuid::Uuid,
    /// The admin token, for workloads that make tenants of their own.
    admin: String,
    backend: &'static str,
    runs: usize,
    /// Closes wait, before they are timed, for every rollout's eager phase one.
    eager: bool,
    /// The model memoryd calls (unless `extractive`); it records requests only when asked.
    fake: FakeLlm,
    extractive: bool,
    /// The drain reports each run as a step of an aging database.
    steps: bool,
    /// The Postgres database under test (its schema on the search path).
    database_url: Option<String>,
    /// With `--against-postgres`: the server the ingest's bare inserts go to.
    bare_postgres: Option<String>,
    /// memoryd's own runtime, so its CPU time is told apart from the clients'.
    server_runtime: ServerRuntime,
    _dir: tempfile::TempDir,
}

/// A runtime may not be dropped where it would block an async context.
struct ServerRuntime(Option<tokio::runtime::Runtime>);

impl ServerRuntime {
    fn handle(&self) -> &tokio::runtime::Handle {
        self.0.as_ref().expect("the runtime lives as long as the bench").handle()
    }
}

impl Drop for ServerRuntime {
    fn drop(&mut self) {
        if let Some(runtime) = self.0.take() {
            runtime.shutdown_background();
        }
    }
}

type BenchResult<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

impl Bench {
    async fn post(&self, path: &str, body: &Value) -> BenchResult<(u16, Value)> {
        let res = self.http.post(format!("{}{path}", self.base)).bearer_auth(&self.key).json(body).send().await?;
        let status = res.status().as_u16();
        Ok((status, res.json().await.unwrap_or(Value::Null)))
    }

    /// A new tenant's API key.
    async fn tenant_key(&self, name: &str) -> BenchResult<String> {
        Ok(new_tenant(&self.http, &self.base, &self.admin, name).await?.1)
    }

    async fn segment(&self, session: &str, workspace: &str, rollout: &str, input: &str) -> BenchResult<()> {
        let (status, body) = self
            .post(
                &format!("/v1/sessions/{session}/layouts/default/segments?workspace={workspace}"),
                &json!({"rollout_id": rollout, "input": input, "final_output": "ok"}),
            )
            .await?;
        if status != 201 {
            return Err(format!("segment answered {status}: {body}").into());
        }
        Ok(())
    }

    async fn close(&self, k: usize) -> BenchResult<Figure> {
        let mut times = Vec::new();
        let input = "x".repeat(1000);
        for run in 0..self.runs {
            let name = format!("close-{k}-{run}");
            for i in 0..k {
                self.segment(&name, &name, &format!("r{i}"), &input).await?;
            }
            if self.eager {
                self.wait_for_eager(&name, k).await?;
            }
            let started = Instant::now();
            let (status, body) = self.post(&format!("/v1/sessions/{name}/close?wait=300"), &json!({})).await?;
            if status != 200 || body["memory_status"]["status"] != "complete" {
                return Err(format!("close of {k} rollouts answered {status}: {body}").into());
            }
            times.push(started.elapsed().as_secs_f64());
        }
        let case = if self.eager { format!("K={k} eager") } else { format!("K={k}") };
        Ok(figure("close", self.backend, case, "close?wait to closed", "s", times))
    }

    /// Until every one of the session's `k` rollouts has its eager phase one done.
    async fn wait_for_eager(&self, session: &str, k: usize) -> BenchResult<()> {
        let started = Instant::now();
        loop {
            let path = format!("{}/v1/jobs?kind=phase_one&session_id={session}&limit=1000", self.base);
            let jobs: Value = self.http.get(path).bearer_auth(&self.key).send().await?.json().await?;
            let done = jobs["jobs"]
                .as_array()
                .map_or(0, |all| all.iter().filter(|j| j["eager"] == true && j["state"] == "succeeded").count());
            if done >= k {
                return Ok(());
            }
            if started.elapsed() > Duration::from_secs(600) {
                return Err(format!("only {done} of {k} rollouts were extracted early").into());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn append(&self, segments: usize) -> BenchResult<Vec<Figure>> {
        let (mut first, mut last) = (Vec::new(), Vec::new());
        let input = "x".repeat(8000);
        for run in 0..self.runs {
            let name = format!("append-{segments}-{run}");
            let mut times = Vec::with_capacity(segments);
            for _ in 0..segments {
                let started = Instant::now();
                self.segment(&name, &name, "one", &input).await?;
                times.push(started.elapsed().as_secs_f64() * 1000.0);
            }
            let window = 100.min(segments);
            first.push(times[..window].iter().sum::<f64>() / window as f64);
            last.push(times[segments - window..].iter().sum::<f64>() / window as f64);
        }
        Ok(vec![
            figure("append", self.backend, format!("S={segments}"), "first 100, per segment", "ms", first),
            figure("append", self.backend, format!("S={segments}"), "last 100, per segment", "ms", last),
        ])
    }

    async fn selection(&self, count: usize) -> BenchResult<Vec<Figure>> {
        let state = &self.server.state;
        let workspace = WorkspaceName::parse(&format!("selection-{count}")).ok_or("bad workspace name")?;
        let layout_name = LayoutName::default_layout();
        let layout = default_layout();
        // The workspace exists once a session used it.
        self.segment(&format!("selection-{count}"), workspace.as_str(), "seed", "seed").await?;
        let root = state.volumes.workspace_root(self.tenant, &workspace)?;
        let raw_dir = root.join("memories/raw_memories");
        std::fs::create_dir_all(&raw_dir)?;
        let mut records = Vec::with_capacity(count);
        for i in 0..count {
            let id = format!("r{i:05}");
            let day = 1 + i % 28;
            let record = RawMemoryRecord {
                rollout_id: RolloutId::parse(&id).ok_or("bad rollout id")?,
                updated_at: format!("2026-{:02}-{day:02}T{:02}:00:00+00:00", 1 + (i / 28) % 12, i % 24),
                rollout_path: format!("sessions/{id}.jsonl"),
                rollout_summary_file: format!("rollout_summaries/{id}_bench.md"),
                terminal_state: "completed".into(),
                extracted_len: 1000,
            };
            let text = format!(
                "rollout_id: {id}\nupdated_at: {}\nrollout_path: {}\nrollout_summary_file: {}\nterminal_state: completed\n\n- a lesson of about one line for the benchmark, number {i}\n",
                record.updated_at, record.rollout_path, record.rollout_summary_file
            );
            std::fs::write(raw_dir.join(format!("{id}.md")), text)?;
            records.push(record);
        }
        state.store.import_raw_memories(self.tenant, &workspace, &layout_name, &records).await?;
        let mut times = Vec::new();
        for _ in 0..self.runs {
            let started = Instant::now();
            let place = LayoutPlace {
                root: &root,
                tenant: self.tenant,
                workspace: &workspace,
                layout_name: &layout_name,
                layout: &layout,
            };
            let policy = crate::pipeline::selection::SelectionPolicy { cap: 256, by_usage: false, unused_since: None };
            let input = prepare_input(state.store.as_ref(), &place, &policy, &[], true).await?;
            let text = raw_memories_md(&input.chunks);
            times.push(started.elapsed().as_secs_f64() * 1000.0);
            if input.selection.selected.len() != count.min(256) || text.is_empty() {
                return Err("the selection came out wrong".into());
            }
        }
        let mut figures = vec![figure(
            "selection",
            self.backend,
            format!("R={count}"),
            "select and rebuild raw_memories.md (cap 256)",
            "ms",
            times,
        )];
        if !self.extractive {
            let waits = self.phase_two_first_requests(&workspace).await?;
            figures.push(figure(
                "selection",
                self.backend,
                format!("R={count}"),
                "phase two: started_at to first model request",
                "ms",
                waits,
            ));
        }
        Ok(figures)
    }

    /// Closes a one-rollout session in `workspace` per run and measures, from
    /// the outside, how long its phase two took from its `started_at` to its
    /// first request to the model.
    async fn phase_two_first_requests(&self, workspace: &WorkspaceName) -> BenchResult<Vec<f64>> {
        let mut waits = Vec::new();
        for run in 0..self.runs {
            let session = format!("{workspace}-close-{run}");
            self.segment(&session, workspace.as_str(), &format!("fresh-{run}"), "a new lesson").await?;
            self.fake.set_recording(true);
            let closed = self.post(&format!("/v1/sessions/{session}/close?wait=300"), &json!({})).await;
            let requests = self.fake.phase_two_requests();
            self.fake.set_recording(false);
            let (status, body) = closed?;
            if status != 200 || body["memory_status"]["status"] != "complete" {
                return Err(format!("the close answered {status}: {body}").into());
            }
            let path = format!("{}/v1/jobs?kind=phase_two&session_id={session}", self.base);
            let jobs: Value = self.http.get(path).bearer_auth(&self.key).send().await?.json().await?;
            let started = jobs["jobs"][0]["started_at"].as_str().ok_or("the phase-two job has no started_at")?;
            let started = chrono::DateTime::parse_from_rfc3339(started)?;
            let first = requests.iter().map(|r| r.received_at).min().ok_or("phase two made no model request")?;
            waits.push((first - started.to_utc()).num_microseconds().unwrap_or(i64::MAX) as f64 / 1000.0);
        }
        Ok(waits)
    }
}

async fn isolated_postgres(url: &str) -> BenchResult<(String, String)> {
    use sqlx::Connection;
    let schema = format!("bench_{}", uuid::Uuid::new_v4().simple());
    let mut conn = sqlx::PgConnection::connect(url).await?;
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE SCHEMA {schema}"))).execute(&mut conn).await?;
    let separator = if url.contains('?') { '&' } else { '?' };
    Ok((format!("{url}{separator}options=-c%20search_path%3D{schema}"), schema))
}

async fn drop_schema(url: &str, schema: &str) {
    use sqlx::Connection;
    if let Ok(mut conn) = sqlx::PgConnection::connect(url).await {
        let _ = sqlx::query(sqlx::AssertSqlSafe(format!("DROP SCHEMA {schema} CASCADE"))).execute(&mut conn).await;
    }
}

/// memoryd's threads log as a served memoryd does at `filter`, into a sink:
/// the bench pays for formatting what would be written, not for a terminal.
fn server_logging(filter: &str) -> impl Fn() + Send + Sync + 'static {
    let filter = tracing_subscriber::EnvFilter::try_new(filter).unwrap_or_else(|_| "info".into());
    let dispatch = tracing::Dispatch::new(
        tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::sink).with_ansi(false).finish(),
    );
    move || {
        // The guard would end the thread's subscriber; the thread keeps it for its life.
        std::mem::forget(tracing::dispatcher::set_default(&dispatch));
    }
}

/// The idle time after which `--eager` extracts a rollout.
const EAGER_IDLE_SECS: u64 = 1;

/// The server's settings for a run: the fake model, the admin token, and
/// what the arguments ask for.
fn bench_config(args: &BenchArgs, mut config: Config, model: String, admin: &str) -> Config {
    config.admin_token = Some(admin.to_owned());
    let provider = if args.extractive { ProviderKind::Extractive } else { ProviderKind::Openai };
    config.model = ModelSettings {
        provider: Some(provider),
        base_url: model,
        api_key: Some("bench".into()),
        timeout: Duration::from_secs(60),
        ..config.model
    };
    config.jobs.max_attempts = 3;
    config.jobs.retry_base = Duration::from_millis(100);
    config.jobs.phase_two_debounce = Duration::from_millis(args.phase_two_debounce_ms);
    config.jobs.eager_phase_one = Duration::from_secs(if args.eager { EAGER_IDLE_SECS } else { 0 });
    config.records.reclaim_dead_rows = args.reclaim_dead_rows;
    // The tools workload searches by meaning: the fake model embeds too (in
    // this process); the other workloads' publishes embed nothing.
    if args.workload == Workload::Tools {
        config.embeddings.base_url = Some(config.model.base_url.clone());
        config.embeddings.model = Some("bench-embedder".into());
    }
    config.storage = match &args.storage {
        Storage::File => Storage::File,
        Storage::Bucket(url) => Storage::Bucket(url.under(&uuid::Uuid::new_v4().to_string())),
    };
    // The events workload's receivers listen on plain http on loopback.
    config.events.webhook_allow_http = true;
    config.events.webhook_allow_private = true;
    config
}

async fn open_bench(database: &'static str, database_url: Option<String>, args: &BenchArgs) -> BenchResult<Bench> {
    let backend = match (&args.storage, database) {
        (Storage::File, _) => database,
        (Storage::Bucket(_), "sqlite") => "sqlite+s3",
        (Storage::Bucket(_), _) => "postgres+s3",
    };
    let dir = tempfile::tempdir()?;
    let latency = Duration::from_millis(args.latency_ms);
    let fake = FakeLlm::start_unrecorded().await?;
    fake.set_default(
        Reply::artifacts("bench", "A benchmark conversation.", "- The user benchmarks memoryd.").after(latency),
    );
    fake.set_agent_default(Reply::Consolidate.after(latency));
    let model = fake.base_url.clone();
    let admin = uuid::Uuid::new_v4().to_string();
    let postgres_url = database_url.clone();
    let config = bench_config(args, Config::embedded(dir.path().join("data"), database_url), model, &admin);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let server_runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name(ingest::SERVER_THREAD)
        // Its blocking threads stay while the bench runs: their CPU time is read from them.
        .thread_keep_alive(Duration::from_secs(3600))
        .on_thread_start(server_logging(&args.server_log))
        .build()?;
    let server = server_runtime.spawn(start(config, listener)).await??;
    let base = format!("http://{}", server.addr);
    let http = reqwest::Client::builder().pool_max_idle_per_host(64).build()?;
    let (tenant_id, key) = new_tenant(&http, &base, &admin, "bench").await?;
    if args.limits_high {
        let res = http
            .put(format!("{base}/v1/admin/tenants/{tenant_id}/limits"))
            .bearer_auth(&admin)
            .json(&json!({
                "requests_per_second": 1_000_000, "burst": 1_000_000, "storage_bytes": 1u64 << 50,
                "model_tokens_per_day": 1u64 << 50, "open_sessions": 1_000_000_000,
            }))
            .send()
            .await?;
        if !res.status().is_success() {
            return Err(format!("setting the limits answered {}", res.status()).into());
        }
    }
    if args.redaction_off {
        let current: Value =
            http.get(format!("{base}/v1/layouts/default")).bearer_auth(&key).send().await?.json().await?;
        let etag = current["etag"].as_str().ok_or("the default layout has no etag")?.to_owned();
        let layout = json!({"memories_dir": "memories", "sessions_dir": "sessions", "redaction": {"rules": []}});
        let res = http
            .put(format!("{base}/v1/layouts/default"))
            .bearer_auth(&key)
            .header("if-match", etag)
            .json(&layout)
            .send()
            .await?;
        if !res.status().is_success() {
            return Err(format!("turning redaction off answered {}", res.status()).into());
        }
    }
    let runs = args.runs.max(1);
    let extractive = args.extractive;
    Ok(Bench {
        server,
        base,
        http,
        key,
        tenant: tenant_id,
        admin,
        backend,
        runs,
        eager: args.eager,
        fake,
        extractive,
        steps: args.steps,
        database_url: postgres_url,
        bare_postgres: args.against_postgres.then(|| args.postgres_url.clone()),
        server_runtime: ServerRuntime(Some(server_runtime)),
        _dir: dir,
    })
}

async fn run_backend(bench: &Bench, args: &BenchArgs, out: &mut Vec<Figure>) -> BenchResult<()> {
    // The soak, the drain and the scale are probes of their own, not part of `all`.
    let wants = |w: Workload| {
        args.workload == w
            || (args.workload == Workload::All && !matches!(w, Workload::Soak | Workload::Drain | Workload::Scale))
    };
    let mut keep = |figures: Vec<Figure>| {
        for f in figures {
            if !args.json {
                eprintln!("  {} {} {} {}: {:.2} {}", f.workload, f.backend, f.case, f.metric, f.median, f.unit);
            }
            out.push(f);
        }
    };
    let quick = args.quick;
    if wants(Workload::Close) {
        for k in if quick { vec![1, 8] } else { vec![1, 8, 32, 128] } {
            keep(vec![bench.close(k).await?]);
        }
    }
    if wants(Workload::Append) {
        for s in if quick { vec![100] } else { vec![100, 1000, 3000] } {
            keep(bench.append(s).await?);
        }
    }
    if wants(Workload::Ingest) {
        let duration = Duration::from_secs(if quick { 1 } else { 5 });
        let clients = match (&args.clients[..], quick) {
            ([], true) => vec![1, 8],
            ([], false) => vec![1, 8, 32],
            (chosen, _) => chosen.to_vec(),
        };
        let batches = if args.batch.is_empty() { vec![1] } else { args.batch.clone() };
        for batch in batches {
            for &c in &clients {
                keep(bench.ingest(c, batch.max(1), duration).await?);
            }
        }
    }
    if wants(Workload::Soak) {
        keep(bench.soak(Duration::from_secs(args.duration.max(1)), args.failing_webhook).await?);
    }
    if wants(Workload::Forget) {
        keep(vec![bench.forget(if quick { 20 } else { 1000 }).await?]);
        keep(bench.retention_sweep(if quick { 2000 } else { 100_000 }).await?);
    }
    if wants(Workload::Drain) {
        let (tenants, sessions, rollouts) = if quick { (3, 2, 2) } else { (args.tenants.max(1), 10, 4) };
        keep(bench.drain(tenants, sessions, rollouts).await?);
    }
    if wants(Workload::Scale) {
        keep(bench.scale(if quick { &[10, 50] } else { &[10, 1000, 10_000] }).await?);
    }
    if wants(Workload::Events) {
        let (rate, seconds, sessions) = if quick { (20, 1, 3) } else { (100, 10, 20) };
        keep(bench.events(rate, seconds, sessions).await?);
    }
    if wants(Workload::Portability) {
        let (rollouts, segments) = if quick { (20, 2) } else { (1000, 10) };
        keep(bench.portability(rollouts, segments).await?);
    }
    if wants(Workload::Redaction) {
        keep(bench.redaction(if quick { 1 } else { 30 }));
    }
    if wants(Workload::Tools) {
        let (memory, summaries, requests) = if quick { (64 << 10, 50, 20) } else { (1 << 20, 1000, 200) };
        keep(bench.tools(memory, summaries, requests).await?);
    }
    if wants(Workload::Selection) {
        for r in if quick { vec![100] } else { vec![100, 1000, 10_000] } {
            keep(bench.selection(r).await?);
        }
    }
    Ok(())
}

pub async fn run(args: BenchArgs) -> BenchResult<Vec<Figure>> {
    let mut figures = Vec::new();
    if matches!(args.backend, BackendChoice::Sqlite | BackendChoice::Both) {
        let bench = open_bench("sqlite", None, &args).await?;
        let result = run_backend(&bench, &args, &mut figures).await;
        bench.server.shutdown().await?;
        result?;
    }
    if matches!(args.backend, BackendChoice::Postgres | BackendChoice::Both) {
        let (url, schema) = isolated_postgres(&args.postgres_url).await?;
        let bench = open_bench("postgres", Some(url), &args).await;
        let result = match bench {
            Ok(bench) => {
                let result = run_backend(&bench, &args, &mut figures).await;
                bench.server.shutdown().await?;
                result
            }
            Err(e) => Err(e),
        };
        drop_schema(&args.postgres_url, &schema).await;
        result?;
    }
    Ok(figures)
}

/// The table docs/performance.md shows.
pub fn render_table(figures: &[Figure]) -> String {
    let mut out = String::from(
        "| workload | backend | case | metric | median | min | max |\n| --- | --- | --- | --- | --- | --- | --- |\n",
    );
    for f in figures {
        out.push_str(&format!(
            "| {} | {} | {} | {} | {:.2} {} | {:.2} | {:.2} |\n",
            f.workload, f.backend, f.case, f.metric, f.median, f.unit, f.min, f.max
        ));
    }
    out
}

/// A new tenant made with the admin token: its id and key.
async fn new_tenant(http: &reqwest::Client, base: &str, admin: &str, name: &str) -> BenchResult<(uuid::Uuid, String)> {
    let res =
        http.post(format!("{base}/v1/admin/tenants")).bearer_auth(admin).json(&json!({"name": name})).send().await?;
    if res.status() != 201 {
        return Err(format!("creating a tenant answered {}", res.status()).into());
    }
    let tenant: Value = res.json().await?;
    let key = tenant["api_key"].as_str().ok_or("no api key")?.to_owned();
    let id = uuid::Uuid::parse_str(tenant["tenant_id"].as_str().ok_or("no tenant id")?)?;
    Ok((id, key))
}
