//! The real binary: default configuration, logs, SIGTERM, SIGKILL during a
//! model call, and several processes sharing one database.

use crate::every_backend;
use crate::fake_llm::{FakeLlm, Reply};
use crate::harness::{Backend, isolated_postgres_url};
use crate::s3::replica_env;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub(crate) const ADMIN: &str = "process-test-admin";

pub(crate) fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// One `memoryd` process with its log file.
pub(crate) struct Memoryd {
    pub child: Child,
    pub base: String,
    pub log: PathBuf,
}

impl Memoryd {
    pub(crate) fn spawn(dir: &Path, name: &str, args: &[&str], env: &[(&str, String)]) -> Self {
        let port = free_port();
        let log = dir.join(format!("{name}.log"));
        let mut command = Command::new(env!("CARGO_BIN_EXE_memoryd"));
        command
            .args(args)
            .current_dir(dir)
            .env_remove("DATABASE_URL")
            .env_remove("OPENAI_API_KEY")
            .env("MEMORYD_LISTEN", format!("127.0.0.1:{port}"))
            .env("MEMORYD_ADMIN_TOKEN", ADMIN)
            .env("MEMORYD_LOG_FORMAT", "json")
            .stdout(Stdio::null())
            .stderr(std::fs::OpenOptions::new().create(true).append(true).open(&log).unwrap());
        for (k, v) in env {
            command.env(k, v);
        }
        Self { child: command.spawn().unwrap(), base: format!("http://127.0.0.1:{port}"), log }
    }

    pub(crate) async fn ready(&self, http: &reqwest::Client) {
        let started = Instant::now();
        while http.get(format!("{}/readyz", self.base)).send().await.map(|r| r.status() != 200).unwrap_or(true) {
            assert!(started.elapsed() < Duration::from_secs(20), "memoryd did not become ready");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    pub(crate) fn signal(&self, signal: &str) {
        assert!(Command::new("kill").arg(signal).arg(self.child.id().to_string()).status().unwrap().success());
    }

    pub(crate) async fn exit(&mut self) -> std::process::ExitStatus {
        let started = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(started.elapsed() < Duration::from_secs(30), "memoryd did not stop");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub(crate) fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Memoryd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub(crate) async fn new_tenant(http: &reqwest::Client, base: &str) -> (String, String) {
    let tenant: Value = http
        .post(format!("{base}/v1/admin/tenants"))
        .bearer_auth(ADMIN)
        .json(&json!({"name": "acme"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    (tenant["tenant_id"].as_str().unwrap().into(), tenant["api_key"].as_str().unwrap().into())
}

/// Appends one segment through `base` and checks it was acknowledged.
pub(crate) async fn post_segment(http: &reqwest::Client, base: &str, key: &str, session: &str, body: Value) {
    let res = http
        .post(format!("{base}/v1/sessions/{session}/layouts/default/segments"))
        .bearer_auth(key)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 201);
}

/// `GET {base}{path}` with the key; its JSON answer.
pub(crate) async fn get_json(http: &reqwest::Client, base: &str, key: &str, path: &str) -> Value {
    http.get(format!("{base}{path}")).bearer_auth(key).send().await.unwrap().json().await.unwrap()
}

/// The tenant's jobs of one kind.
pub(crate) async fn jobs_of_kind(http: &reqwest::Client, base: &str, key: &str, kind: &str) -> Vec<Value> {
    get_json(http, base, key, &format!("/v1/jobs?kind={kind}")).await["jobs"].as_array().unwrap().clone()
}

async fn phase_one_jobs(http: &reqwest::Client, base: &str, key: &str) -> Vec<Value> {
    jobs_of_kind(http, base, key, "phase_one").await
}

/// A process for one round of a crash test, ready, with the test's tenant
/// (created by the first round): `(process, tenant id, key)`.
pub(crate) async fn spawn_round(
    dir: &Path,
    round: u64,
    env: &[(&str, String)],
    http: &reqwest::Client,
    tenant: &mut Option<(String, String)>,
) -> (Memoryd, String, String) {
    let memoryd = Memoryd::spawn(dir, &format!("round{round}"), &["serve"], env);
    memoryd.ready(http).await;
    let (id, key) = match tenant {
        Some(t) => t.clone(),
        None => tenant.insert(new_tenant(http, &memoryd.base).await).clone(),
    };
    (memoryd, id, key)
}

pub(crate) async fn settle(http: &reqwest::Client, base: &str, key: &str, count: usize, limit: Duration) -> Vec<Value> {
    let started = Instant::now();
    loop {
        let jobs = phase_one_jobs(http, base, key).await;
        if jobs.len() == count && jobs.iter().all(|j| !matches!(j["state"].as_str(), Some("queued" | "running"))) {
            return jobs;
        }
        assert!(started.elapsed() < limit, "jobs did not settle: {jobs:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

pub(crate) fn model_env(fake: &FakeLlm) -> Vec<(&'static str, String)> {
    vec![
        ("MEMORYD_LLM_PROVIDER", "openai".into()),
        ("MEMORYD_LLM_BASE_URL", fake.base_url.clone()),
        ("MEMORYD_LLM_API_KEY", "process-model-key".into()),
    ]
}

pub(crate) async fn database_env(backend: Backend) -> Vec<(&'static str, String)> {
    match backend {
        Backend::Postgres => vec![("DATABASE_URL", isolated_postgres_url().await)],
        Backend::Sqlite => Vec::new(),
        Backend::Bucket => {
            let mut env = vec![("DATABASE_URL", isolated_postgres_url().await)];
            env.push(("MEMORYD_STORAGE", crate::s3::fresh_prefix().await.0));
            env.extend(crate::s3::process_env());
            env
        }
    }
}

/// A workspace file of a process started with `env` (from [`database_env`])
/// and data dir `data_dir`, wherever its files live (`harness::stored_file`).
pub(crate) async fn stored_file(
    env: &[(&'static str, String)],
    data_dir: &std::path::Path,
    tenant: &str,
    workspace: &str,
    path: &str,
) -> Option<Vec<u8>> {
    let setting = |name: &str| env.iter().find(|(n, _)| *n == name).map(|(_, v)| v.as_str());
    let prefix = crate::s3::prefix_of(env);
    let bucket = prefix.as_deref().map(|p| (setting("DATABASE_URL").expect("a bucket is on Postgres"), p));
    crate::harness::stored_file(data_dir, bucket, tenant, workspace, path).await
}

#[tokio::test]
async fn binary_serves_logs_no_content_and_stops_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let mut memoryd = Memoryd::spawn(dir.path(), "memoryd", &["serve"], &[("MEMORYD_LOG", "debug".into())]);
    let http = reqwest::Client::new();
    memoryd.ready(&http).await;
    let base = memoryd.base.clone();
    let (tenant_id, key) = new_tenant(&http, &base).await;
    let secret = "TOP-SECRET-SEGMENT-CONTENT-4711";
    post_segment(&http, &base, &key, "s", json!({"rollout_id": "r", "input": secret, "final_output": secret})).await;
    let res = http
        .post(format!("{base}/v1/sessions/s/layouts/default/segments"))
        .bearer_auth(&key)
        .body(format!("{{\"input\": \"{secret}"))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 400);
    let file = dir.path().join(format!("memoryd-data/workspaces/{tenant_id}/default/sessions/r.jsonl"));
    assert!(std::fs::read_to_string(file).unwrap().contains(secret), "the default data dir is ./memoryd-data");
    assert!(dir.path().join("memoryd-data/memoryd.db").exists(), "the default store is SQLite in the data dir");
    // The default provider (no API key) is the extractive one: phase one runs offline.
    http.post(format!("{base}/v1/sessions/s/close")).bearer_auth(&key).send().await.unwrap();
    let jobs = settle(&http, &base, &key, 1, Duration::from_secs(20)).await;
    assert_eq!(jobs[0]["state"], "succeeded");

    crate::mcp::as_a_named_client(&http, &base, &key).await;

    memoryd.signal("-TERM");
    let exit = memoryd.exit().await;
    assert!(exit.success(), "{exit:?}");
    let log = memoryd.log_text();
    assert!(log.contains("segment appended"), "{log}");
    assert!(log.contains("job attempt finished"));
    assert!(log.contains("shutting down"));
    assert!(!log.contains(secret), "segment content reached the log");
    assert!(!log.contains(&key), "an API key reached the log");
    assert!(!log.contains(ADMIN), "the admin token reached the log");
    let lines: Vec<Value> = log
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("not a JSON log line ({e}): {line}")))
        .collect();
    // One line says what runs, with the defaults it fell back to.
    let started = lines.iter().find(|l| l["message"] == "memoryd listening").expect("a start-up line");
    let fields = started;
    assert_eq!(fields["listen"], base.trim_start_matches("http://"), "{started}");
    assert_eq!(
        (fields["database"].as_str(), fields["provider"].as_str(), fields["admin_api"].as_str()),
        (Some("sqlite"), Some("extractive"), Some("on")),
        "{started}"
    );
    assert_eq!((fields["data_dir"].as_str(), fields["workers"].as_u64()), (Some("./memoryd-data"), Some(8)));
    // Each MCP tool call's line names the client by what its initialize said.
    let call = lines.iter().find(|l| l["message"] == "MCP tool call").expect("an MCP tool call's line");
    assert_eq!(
        (call["client"].as_str(), call["tool"].as_str()),
        (Some("probe-client 1.2.3"), Some("memory_list")),
        "{call}"
    );
}

/// The text format writes no colour codes into a file (stderr is not a terminal).
#[tokio::test]
async fn a_text_log_in_a_file_is_plain_text() {
    let dir = tempfile::tempdir().unwrap();
    let memoryd = Memoryd::spawn(dir.path(), "memoryd", &["serve"], &[("MEMORYD_LOG_FORMAT", "text".into())]);
    let http = reqwest::Client::new();
    memoryd.ready(&http).await;
    let log = memoryd.log_text();
    assert!(log.contains("INFO") && log.contains("memoryd listening"), "{log}");
    assert!(!log.contains('\u{1b}'), "escape codes in a log file: {log:?}");
}

/// A 401 names the credential its route takes; without an admin token the
/// admin API says it is off.
#[tokio::test]
async fn credentials_are_named_and_an_admin_api_that_is_off_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let memoryd = Memoryd::spawn(dir.path(), "memoryd", &["serve"], &[]);
    let http = reqwest::Client::new();
    memoryd.ready(&http).await;
    let base = memoryd.base.clone();
    let detail = |res: reqwest::Response| async move {
        let status = res.status().as_u16();
        let body: Value = res.json().await.unwrap();
        (status, body["code"].as_str().unwrap().to_owned(), body["detail"].as_str().unwrap().to_owned())
    };
    let (status, code, text) = detail(http.get(format!("{base}/v1/sessions")).send().await.unwrap()).await;
    assert_eq!((status, code.as_str()), (401, "unauthorized"));
    assert!(text.contains("tenant's API key"), "{text}");
    let admin = http.get(format!("{base}/v1/admin/tenants")).bearer_auth("nope").send().await.unwrap();
    let (status, _, text) = detail(admin).await;
    assert_eq!(status, 401);
    assert!(text.contains("admin token") && text.contains("MEMORYD_ADMIN_TOKEN"), "{text}");
    drop(memoryd);

    let mut command = Command::new(env!("CARGO_BIN_EXE_memoryd"));
    let port = free_port();
    command
        .arg("serve")
        .current_dir(dir.path())
        .env_remove("MEMORYD_ADMIN_TOKEN")
        .env_remove("DATABASE_URL")
        .env("MEMORYD_LISTEN", format!("127.0.0.1:{port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let child = command.spawn().unwrap();
    let off = Memoryd { child, base: format!("http://127.0.0.1:{port}"), log: dir.path().join("none.log") };
    off.ready(&http).await;
    let res = http.get(format!("{}/v1/admin/tenants", off.base)).bearer_auth("anything").send().await.unwrap();
    let (status, code, text) = detail(res).await;
    assert_eq!((status, code.as_str()), (404, "not_found"));
    assert!(text.contains("admin API is off"), "{text}");
}

/// The help a user reads cites nothing outside the repository.
#[test]
fn the_help_cites_nothing_outside_the_repository() {
    for command in ["serve", "worker"] {
        let output = Command::new(env!("CARGO_BIN_EXE_memoryd")).args([command, "--help"]).output().unwrap();
        let help = String::from_utf8_lossy(&output.stdout);
        assert!(output.status.success() && help.contains("MEMORYD_DATA_DIR"), "{help}");
        assert!(!help.contains("SPEC") && !help.contains("shared/"), "{help}");
    }
}

every_backend!(
    a_job_survives_sigkill_during_its_model_call,
    sigterm_gives_a_running_job_back,
    a_job_that_kills_its_worker_runs_out_of_attempts
);

/// A first memoryd with one segment whose session is closed, once its
/// phase-one model call is in flight; returns it with the tenant id and key.
pub(crate) async fn first_process_mid_call(
    dir: &Path,
    env: &[(&str, String)],
    fake: &FakeLlm,
    http: &reqwest::Client,
) -> (Memoryd, String, String) {
    let first = Memoryd::spawn(dir, "first", &["serve"], env);
    first.ready(http).await;
    let (tenant_id, key) = new_tenant(http, &first.base).await;
    post_segment(
        http,
        &first.base,
        &key,
        "s",
        json!({"rollout_id": "r", "input": "remember me", "final_output": "ok"}),
    )
    .await;
    http.post(format!("{}/v1/sessions/s/close", first.base)).bearer_auth(&key).send().await.unwrap();
    let started = Instant::now();
    while fake.phase_one_requests().is_empty() {
        assert!(started.elapsed() < Duration::from_secs(20), "the model call never started");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    (first, tenant_id, key)
}

async fn sigterm_gives_a_running_job_back(backend: Backend) {
    let fake = FakeLlm::start().await;
    fake.push(Reply::artifacts("interrupted", "s", "m").after(Duration::from_secs(60)));
    fake.set_default(Reply::artifacts("resumed", "s", "m").now());
    let dir = tempfile::tempdir().unwrap();
    let mut env = model_env(&fake);
    env.extend(database_env(backend).await);
    env.push(("MEMORYD_JOB_LEASE_SECS", "600".into()));
    let http = reqwest::Client::new();
    let (mut first, _, key) = first_process_mid_call(dir.path(), &env, &fake, &http).await;
    let stopping = Instant::now();
    first.signal("-TERM");
    assert!(first.exit().await.success());
    assert!(stopping.elapsed() < Duration::from_secs(10), "{:?}", stopping.elapsed());
    assert!(first.log_text().contains("job released for another worker at shutdown"));

    // The lease was given back: a new process takes the job at once, not after 600 s.
    let second = Memoryd::spawn(dir.path(), "second", &["serve"], &env);
    second.ready(&http).await;
    let jobs = settle(&http, &second.base, &key, 1, Duration::from_secs(20)).await;
    assert_eq!((jobs[0]["state"].as_str(), jobs[0]["attempts"].as_i64()), (Some("succeeded"), Some(1)));
}

async fn a_job_survives_sigkill_during_its_model_call(backend: Backend) {
    let fake = FakeLlm::start().await;
    fake.push(Reply::artifacts("never-recorded", "s", "m").after(Duration::from_secs(60)));
    fake.set_default(Reply::artifacts("after-restart", "summary", "memory").now());
    let dir = tempfile::tempdir().unwrap();
    let mut env = model_env(&fake);
    env.extend(database_env(backend).await);
    env.push(("MEMORYD_JOB_LEASE_SECS", "2".into()));
    env.push(("MEMORYD_WORKER_CONCURRENCY", "1".into()));
    let http = reqwest::Client::new();
    let (mut first, _, key) = first_process_mid_call(dir.path(), &env, &fake, &http).await;
    first.signal("-KILL");
    first.exit().await;

    let second = Memoryd::spawn(dir.path(), "second", &["serve"], &env);
    second.ready(&http).await;
    let jobs = settle(&http, &second.base, &key, 1, Duration::from_secs(30)).await;
    assert_eq!(jobs[0]["state"], "succeeded", "{:?}", jobs[0]);
    assert_eq!(jobs[0]["attempts"], 2, "the killed attempt counts, the re-claim finished it");
    assert_eq!(fake.phase_one_requests().len(), 2);
    // Read as memoryd serves it, from a volume or a bucket.
    for (summary, status) in [("r_after-restart.md", 200), ("r_never-recorded.md", 404)] {
        let path = format!("{}/v1/workspaces/default/layouts/default/files/rollout_summaries/{summary}", second.base);
        assert_eq!(http.get(path).bearer_auth(&key).send().await.unwrap().status(), status, "{summary}");
    }
}

/// A job whose attempt kills its process every time (here: killed during
/// every model call) is claimed `MEMORYD_MAX_ATTEMPTS` times, then fails
/// with the reason, instead of being retried forever on every replica.
async fn a_job_that_kills_its_worker_runs_out_of_attempts(backend: Backend) {
    let fake = FakeLlm::start().await;
    fake.set_default(Reply::artifacts("never-recorded", "s", "m").after(Duration::from_secs(600)));
    let dir = tempfile::tempdir().unwrap();
    let mut env = model_env(&fake);
    env.extend(database_env(backend).await);
    env.push(("MEMORYD_JOB_LEASE_SECS", "1".into()));
    env.push(("MEMORYD_MAX_ATTEMPTS", "2".into()));
    let http = reqwest::Client::new();
    let (mut first, _, key) = first_process_mid_call(dir.path(), &env, &fake, &http).await;
    first.signal("-KILL");
    first.exit().await;
    let mut second = Memoryd::spawn(dir.path(), "second", &["serve"], &env);
    let started = Instant::now();
    while fake.phase_one_requests().len() < 2 {
        assert!(started.elapsed() < Duration::from_secs(30), "the job was not claimed again");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    second.signal("-KILL");
    second.exit().await;

    let third = Memoryd::spawn(dir.path(), "third", &["serve"], &env);
    third.ready(&http).await;
    let jobs = settle(&http, &third.base, &key, 1, Duration::from_secs(30)).await;
    assert_eq!(jobs[0]["state"], "failed", "{}", jobs[0]);
    let error = jobs[0]["last_error"].as_str().unwrap_or_default();
    assert!(error.starts_with("out of attempts") && error.contains("lease_expired"), "{error}");
    assert_eq!(fake.phase_one_requests().len(), 2, "the third claim does not run it");
    let started = Instant::now();
    let mut status = get_json(&http, &third.base, &key, "/v1/sessions/s").await;
    while status["state"] != "closed" {
        assert!(started.elapsed() < Duration::from_secs(20), "the close never finished: {status}");
        tokio::time::sleep(Duration::from_millis(50)).await;
        status = get_json(&http, &third.base, &key, "/v1/sessions/s").await;
    }
    let failure = &status["memory_status"]["failures"][0];
    assert!(failure["error"].as_str().unwrap_or_default().starts_with("out of attempts"), "{status}");
}

crate::replicated!(
    two_processes_on_one_postgres_run_each_job_once,
    two_processes_never_run_phase_two_of_one_layout_at_once
);

async fn two_processes_on_one_postgres_run_each_job_once(backend: Backend) {
    const ROLLOUTS: usize = 50;
    let fake = FakeLlm::start().await;
    fake.set_default(
        Reply::artifacts("shared", "summary MODEL-OUTPUT-SECRET", "memory MODEL-OUTPUT-SECRET")
            .after(Duration::from_millis(50)),
    );
    let dir = tempfile::tempdir().unwrap();
    let mut env = model_env(&fake);
    env.extend(database_env(backend).await);
    env.push(("MEMORYD_WORKER_CONCURRENCY", "4".into()));
    env.push(("MEMORYD_LOG", "debug".into()));
    let http = reqwest::Client::new();
    let api = Memoryd::spawn(dir.path(), "api", &["serve"], &replica_env(&env, dir.path(), "api"));
    let worker = Memoryd::spawn(dir.path(), "worker", &["worker"], &replica_env(&env, dir.path(), "worker"));
    api.ready(&http).await;
    let (_, key) = new_tenant(&http, &api.base).await;
    for i in 0..ROLLOUTS {
        let body = json!({"rollout_id": format!("r{i}"), "input": format!("SEGMENT-SECRET-{i}"), "final_output": "ok"});
        post_segment(&http, &api.base, &key, "s", body).await;
    }
    http.post(format!("{}/v1/sessions/s/close", api.base)).bearer_auth(&key).send().await.unwrap();
    let jobs = settle(&http, &api.base, &key, ROLLOUTS, Duration::from_secs(60)).await;
    for job in &jobs {
        assert_eq!((job["state"].as_str(), job["attempts"].as_i64()), (Some("succeeded"), Some(1)), "{job}");
    }
    let mut extracted: Vec<String> = fake
        .phase_one_requests()
        .iter()
        .map(|r| {
            let m = r.user_message();
            let start = m.find("SEGMENT-SECRET-").expect("every phase-one prompt holds its rollout");
            m[start..].split('"').next().unwrap().to_owned()
        })
        .collect();
    assert_eq!(extracted.len(), ROLLOUTS, "one model call per job");
    extracted.sort();
    extracted.dedup();
    assert_eq!(extracted.len(), ROLLOUTS, "every rollout extracted exactly once");
    for process in [&api, &worker] {
        let log = process.log_text();
        assert!(log.contains("job attempt finished"), "both processes worked");
        assert!(!log.contains("SEGMENT-SECRET") && !log.contains("MODEL-OUTPUT-SECRET"), "content reached the log");
    }
}

/// Prints the phase-one figure of the issue: 32 rollouts, a model that takes
/// 200 ms, `MEMORYD_WORKER_CONCURRENCY=8`.
#[tokio::test]
async fn concurrent_phase_one_figure() {
    const ROLLOUTS: usize = 32;
    let fake = FakeLlm::start().await;
    fake.set_default(Reply::artifacts("fast", "s", "m").after(Duration::from_millis(200)));
    let dir = tempfile::tempdir().unwrap();
    let mut env = model_env(&fake);
    env.push(("MEMORYD_WORKER_CONCURRENCY", "8".into()));
    let http = reqwest::Client::new();
    let memoryd = Memoryd::spawn(dir.path(), "memoryd", &["serve"], &env);
    memoryd.ready(&http).await;
    let (_, key) = new_tenant(&http, &memoryd.base).await;
    for i in 0..ROLLOUTS {
        post_segment(
            &http,
            &memoryd.base,
            &key,
            "s",
            json!({"rollout_id": format!("r{i}"), "input": "hi", "final_output": "ok"}),
        )
        .await;
    }
    let started = Instant::now();
    http.post(format!("{}/v1/sessions/s/close", memoryd.base)).bearer_auth(&key).send().await.unwrap();
    let jobs = settle(&http, &memoryd.base, &key, ROLLOUTS, Duration::from_secs(60)).await;
    let elapsed = started.elapsed();
    assert!(jobs.iter().all(|j| j["state"] == "succeeded"));
    println!(
        "phase one: {ROLLOUTS} rollouts, 200 ms model, concurrency 8: {} ms (sequential: {} ms)",
        elapsed.as_millis(),
        ROLLOUTS * 200
    );
}

async fn two_processes_never_run_phase_two_of_one_layout_at_once(backend: Backend) {
    const SESSIONS: usize = 4;
    let fake = FakeLlm::start().await;
    fake.set_default(Reply::artifacts("x", "s", "m").now());
    fake.set_agent_default(Reply::Text("done").after(Duration::from_millis(300)));
    let dir = tempfile::tempdir().unwrap();
    let mut env = model_env(&fake);
    env.extend(database_env(backend).await);
    let http = reqwest::Client::new();
    let api = Memoryd::spawn(dir.path(), "api", &["serve"], &replica_env(&env, dir.path(), "api"));
    let _worker = Memoryd::spawn(dir.path(), "worker", &["worker"], &replica_env(&env, dir.path(), "worker"));
    api.ready(&http).await;
    let (_, key) = new_tenant(&http, &api.base).await;
    for i in 0..SESSIONS {
        post_segment(
            &http,
            &api.base,
            &key,
            &format!("s{i}"),
            json!({"rollout_id": format!("r{i}"), "input": "hi", "final_output": "ok"}),
        )
        .await;
    }
    // All closes at once, on two processes sharing one Postgres.
    let closes: Vec<_> = (0..SESSIONS)
        .map(|i| {
            tokio::spawn(http.post(format!("{}/v1/sessions/s{i}/close?wait=60", api.base)).bearer_auth(&key).send())
        })
        .collect();
    for close in closes {
        let res = close.await.unwrap().unwrap();
        assert_eq!(res.status(), 200);
        let closed: Value = res.json().await.unwrap();
        assert_eq!(closed["memory_status"]["status"], "complete", "{closed}");
    }
    let runs = get_json(&http, &api.base, &key, "/v1/workspaces/default/layouts/default/runs").await;
    let succeeded: Vec<&Value> =
        runs["runs"].as_array().unwrap().iter().filter(|r| r["state"] == "succeeded").collect();
    // Closes share a waiting run: every close is served by exactly one run, and no run serves nobody.
    let mut served: Vec<&str> =
        succeeded.iter().flat_map(|r| r["sessions"].as_array().unwrap().iter().map(|s| s.as_str().unwrap())).collect();
    served.sort();
    assert_eq!(served, ["s0", "s1", "s2", "s3"], "{runs}");
    assert!(!succeeded.is_empty() && succeeded.len() <= SESSIONS, "{runs}");
    let mut spans: Vec<(String, String)> = succeeded
        .iter()
        .map(|r| (r["started_at"].as_str().unwrap().to_owned(), r["finished_at"].as_str().unwrap().to_owned()))
        .collect();
    spans.sort();
    let instant = |s: &str| chrono::DateTime::parse_from_rfc3339(s).unwrap();
    for pair in spans.windows(2) {
        assert!(instant(&pair[0].1) <= instant(&pair[1].0), "phase-two runs overlap: {pair:?}");
    }
}
