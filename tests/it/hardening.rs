//! A bad day in production, against the real binary (SPEC §9): the data
//! volume fills up, the database goes away, a process is killed while it
//! writes. Each test checks what a client sees, and that nothing it was told
//! is stored went missing.

use crate::harness::{Backend, isolated_postgres_url};
use crate::process::{Memoryd, database_env, jobs_of_kind, new_tenant, settle, spawn_round, stored_file};
use reqwest::StatusCode;
use serde_json::{Value, json};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// A tmpfs of `bytes` mounted for one test and unmounted when dropped.
struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    /// `None` (with a message) where this process may not mount: not root.
    fn mount(bytes: u64) -> Option<Self> {
        let dir = tempfile::tempdir().unwrap();
        let mounted = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={bytes}"), "memoryd-test"])
            .arg(dir.path())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !mounted {
            eprintln!("SKIPPED: mounting a {bytes}-byte tmpfs failed (the full-disk tests need root)");
            return None;
        }
        Some(Self { dir })
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(self.dir.path()).status();
    }
}

/// Writes `path` until the volume refuses another byte (or until `leave`
/// bytes are left, when given); returns how much it wrote.
fn fill(path: &Path, leave: Option<u64>) -> u64 {
    let mut file = std::fs::File::create(path).unwrap();
    let mut written = 0u64;
    for chunk in [65_536usize, 4096, 512, 1] {
        let block = vec![b'x'; chunk];
        loop {
            if let Some(leave) = leave {
                let stat = rustix::fs::statvfs(path.parent().unwrap()).unwrap();
                if stat.f_bavail * stat.f_frsize <= leave + chunk as u64 {
                    break;
                }
            }
            match file.write(&block) {
                Ok(n) if n > 0 => written += n as u64,
                _ => break,
            }
        }
        let _ = file.flush();
    }
    let _ = file.sync_all();
    written
}

fn segment(i: usize) -> Value {
    json!({"rollout_id": "r", "input": format!("turn {i}: {}", "w".repeat(2000)), "final_output": "ok"})
}

// In a bucket the data volume holds only the replica's copies: a full one
// still answers 507 or 503, never 500, and loses nothing acknowledged.
crate::every_backend!(
    a_full_disk_answers_507_and_recovers_by_itself,
    appends_stop_at_the_free_space_watermark,
    a_killed_attempts_temporary_files_are_removed,
);

/// One append; its status, code and `Retry-After`.
async fn append(http: &reqwest::Client, base: &str, key: &str, session: &str, i: usize) -> (StatusCode, String, bool) {
    let res = http
        .post(format!("{base}/v1/sessions/{session}/layouts/default/segments"))
        .bearer_auth(key)
        .json(&segment(i))
        .send()
        .await
        .unwrap();
    let status = res.status();
    let retry_after = res.headers().contains_key("retry-after");
    let body: Value = res.json().await.unwrap_or(Value::Null);
    (status, body["code"].as_str().unwrap_or("").to_owned(), retry_after)
}

/// The lines of rollout `r` as memoryd's readers see them (a memoryd
/// started with `env`), checked to be whole segments in order.
async fn rollout_turns(env: &[(&'static str, String)], data_dir: &Path, tenant: &str) -> Vec<usize> {
    let bytes = stored_file(env, data_dir, tenant, "default", "sessions/r.jsonl").await;
    let text = String::from_utf8(bytes.expect("rollout r")).unwrap();
    text.lines()
        .map(|line| {
            let v: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("a torn line ({e}): {line:.80}"));
            let input = v["input"][0]["content"].as_str().unwrap();
            input.strip_prefix("turn ").unwrap().split(':').next().unwrap().parse().unwrap()
        })
        .collect()
}

/// A ready memoryd with a tenant whose rollout `r` holds three acknowledged
/// segments: `(process, tenant id, key, the acknowledged turns)`.
async fn with_three_segments(
    dir: &Path,
    env: &[(&str, String)],
    http: &reqwest::Client,
) -> (Memoryd, String, String, Vec<usize>) {
    let memoryd = Memoryd::spawn(dir, "memoryd", &["serve"], env);
    memoryd.ready(http).await;
    let (tenant, key) = new_tenant(http, &memoryd.base).await;
    for i in 0..3 {
        assert_eq!(append(http, &memoryd.base, &key, "s", i).await.0, 201);
    }
    (memoryd, tenant, key, vec![0, 1, 2])
}

async fn status_of(http: &reqwest::Client, url: String) -> StatusCode {
    http.get(url).send().await.unwrap().status()
}

/// The volume filled to the last byte (the watermark off): every write is
/// refused with 507 or 503, never 500; once space is freed, service resumes
/// without a restart and every acknowledged segment is on disk once, in order.
async fn a_full_disk_answers_507_and_recovers_by_itself(backend: Backend) {
    let Some(volume) = Tmpfs::mount(24 << 20) else { return };
    let dir = tempfile::tempdir().unwrap();
    let data_dir = volume.path().join("data");
    let mut env = database_env(backend).await;
    env.push(("MEMORYD_DATA_DIR", data_dir.display().to_string()));
    env.push(("MEMORYD_MIN_FREE_BYTES", "0".into()));
    let http = reqwest::Client::new();
    let (memoryd, tenant, key, mut acknowledged) = with_three_segments(dir.path(), &env, &http).await;
    let base = memoryd.base.clone();

    let filler = volume.path().join("filler");
    fill(&filler, None);
    for i in 3..23 {
        let (status, code, retry_after) = append(&http, &base, &key, "s", i).await;
        match status.as_u16() {
            201 => acknowledged.push(i),
            507 => assert!(code == "insufficient_storage" && retry_after, "{code} {retry_after}"),
            503 => assert!(code == "unavailable" && retry_after, "{code}"),
            other => panic!("append {i} on a full disk answered {other} {code}"),
        }
    }
    let res = http.post(format!("{base}/v1/sessions")).bearer_auth(&key).json(&json!({})).send().await.unwrap();
    assert!([201, 503, 507].contains(&res.status().as_u16()), "opening a session answered {}", res.status());
    assert_eq!(status_of(&http, format!("{base}/readyz")).await, 503, "not ready with no space left");

    std::fs::remove_file(&filler).unwrap();
    let freed = Instant::now();
    let mut i = 23;
    loop {
        let (status, code, _) = append(&http, &base, &key, "s", i).await;
        if status == 201 {
            acknowledged.push(i);
            break;
        }
        assert!([503, 507].contains(&status.as_u16()), "after freeing space: {status} {code}");
        assert!(freed.elapsed() < Duration::from_secs(10), "appends did not resume within 10 s of freeing space");
        tokio::time::sleep(Duration::from_millis(200)).await;
        i += 1;
    }
    for i in i + 1..i + 11 {
        assert_eq!(append(&http, &base, &key, "s", i).await.0, 201, "append {i} after recovery");
        acknowledged.push(i);
    }
    assert_eq!(status_of(&http, format!("{base}/readyz")).await, 200);
    assert_eq!(rollout_turns(&env, &data_dir, &tenant).await, acknowledged, "each acknowledged segment once, in order");
    let log = memoryd.log_text();
    assert!(!log.contains("non-zero transaction depth"), "a connection kept a dead transaction");
    assert!(!log.contains("vanished"), "the real cause of a failure was hidden");
}

/// Below `MEMORYD_MIN_FREE_BYTES` appends are refused before anything is
/// written and `/readyz` fails; both come back as soon as space is freed.
async fn appends_stop_at_the_free_space_watermark(backend: Backend) {
    let Some(volume) = Tmpfs::mount(32 << 20) else { return };
    let dir = tempfile::tempdir().unwrap();
    let data_dir = volume.path().join("data");
    let mut env = database_env(backend).await;
    env.push(("MEMORYD_DATA_DIR", data_dir.display().to_string()));
    env.push(("MEMORYD_MIN_FREE_BYTES", (8u64 << 20).to_string()));
    let memoryd = Memoryd::spawn(dir.path(), "memoryd", &["serve"], &env);
    let http = reqwest::Client::new();
    memoryd.ready(&http).await;
    let base = memoryd.base.clone();
    let (tenant, key) = new_tenant(&http, &base).await;
    assert_eq!(append(&http, &base, &key, "s", 0).await.0, 201);

    let filler = volume.path().join("filler");
    fill(&filler, Some(6 << 20));
    let (status, code, retry_after) = append(&http, &base, &key, "s", 1).await;
    assert_eq!((status.as_u16(), code.as_str(), retry_after), (507, "insufficient_storage", true));
    let ready = http.get(format!("{base}/readyz")).send().await.unwrap();
    assert_eq!(ready.status(), 503);
    let problem: Value = ready.json().await.unwrap();
    assert!(problem["detail"].as_str().unwrap().contains("free"), "{problem}");
    assert_eq!(rollout_turns(&env, &data_dir, &tenant).await, vec![0], "nothing was written below the watermark");
    // A close is taken, but its jobs wait in the queue without spending attempts.
    let res = http.post(format!("{base}/v1/sessions/s/close")).bearer_auth(&key).send().await.unwrap();
    assert_eq!(res.status(), 202);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let jobs = jobs_of_kind(&http, &base, &key, "phase_one").await;
    assert_eq!((jobs[0]["state"].as_str(), jobs[0]["attempts"].as_i64()), (Some("queued"), Some(0)));

    std::fs::remove_file(&filler).unwrap();
    assert_eq!(append(&http, &base, &key, "t", 2).await.0, 201);
    assert_eq!(status_of(&http, format!("{base}/readyz")).await, 200);
    assert_eq!(rollout_turns(&env, &data_dir, &tenant).await, vec![0, 2]);
    let jobs = settle(&http, &base, &key, 1, Duration::from_secs(20)).await;
    assert_eq!(jobs[0]["state"], "succeeded");
}

/// A TCP proxy in front of Postgres (or the S3 server) that can cut every
/// connection and refuse new ones, then let them through again: a lost
/// database or object store, without touching the shared server.
pub(crate) struct CuttableProxy {
    pub(crate) port: u16,
    open: Arc<AtomicBool>,
    cut: watch::Sender<u64>,
}

impl CuttableProxy {
    pub(crate) async fn start(upstream: String) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let open = Arc::new(AtomicBool::new(true));
        let (cut, _) = watch::channel(0u64);
        let (accept_open, accept_cut) = (open.clone(), cut.clone());
        tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                if !accept_open.load(Ordering::SeqCst) {
                    continue;
                }
                let upstream = upstream.clone();
                let mut cut = accept_cut.subscribe();
                tokio::spawn(async move {
                    let Ok(mut server) = TcpStream::connect(upstream).await else { return };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
                        _ = cut.changed() => {}
                    }
                });
            }
        });
        Self { port, open, cut }
    }

    pub(crate) fn cut(&self) {
        self.open.store(false, Ordering::SeqCst);
        self.cut.send_modify(|generation| *generation += 1);
    }

    pub(crate) fn restore(&self) {
        self.open.store(true, Ordering::SeqCst);
    }
}

/// A database URL that goes through `proxy`, and the address it stood for.
fn through_proxy(url: &str, port: u16) -> (String, String) {
    let mut parsed = reqwest::Url::parse(url).unwrap();
    let upstream = format!("{}:{}", parsed.host_str().unwrap(), parsed.port().unwrap_or(5432));
    parsed.set_host(Some("127.0.0.1")).unwrap();
    parsed.set_port(Some(port)).unwrap();
    (parsed.to_string(), upstream)
}

/// With Postgres gone every request that needs it answers 503 with
/// `Retry-After` within 5 s, `/readyz` fails, `/metrics` still answers at
/// once; when it returns, service resumes with nothing acknowledged lost.
#[tokio::test]
async fn a_lost_database_answers_503_fast_and_service_resumes() {
    let url = isolated_postgres_url().await;
    let (_, upstream) = through_proxy(&url, 1);
    let proxy = CuttableProxy::start(upstream).await;
    let (proxied, _) = through_proxy(&url, proxy.port);
    let dir = tempfile::tempdir().unwrap();
    let http = reqwest::Client::new();
    let env = [("DATABASE_URL", proxied)];
    let (memoryd, tenant, key, mut acknowledged) = with_three_segments(dir.path(), &env, &http).await;
    let base = memoryd.base.clone();

    assert_eq!(status_of(&http, format!("{base}/metrics")).await, 200);

    proxy.cut();
    for i in 3..6 {
        let started = Instant::now();
        let (status, code, retry_after) = append(&http, &base, &key, "s", i).await;
        assert_eq!(
            (status.as_u16(), code.as_str(), retry_after),
            (503, "unavailable", true),
            "append {i}: {}",
            memoryd.log_text()
        );
        assert!(started.elapsed() < Duration::from_secs(5), "503 after {:?}", started.elapsed());
    }
    let started = Instant::now();
    let res = http.get(format!("{base}/v1/sessions/s")).bearer_auth(&key).send().await.unwrap();
    assert_eq!(res.status(), 503);
    assert!(started.elapsed() < Duration::from_secs(5));
    let started = Instant::now();
    assert_eq!(status_of(&http, format!("{base}/readyz")).await, 503);
    assert!(started.elapsed() < Duration::from_secs(5));
    let started = Instant::now();
    let metrics = http.get(format!("{base}/metrics")).send().await.unwrap();
    assert_eq!(metrics.status(), 200);
    assert!(metrics.text().await.unwrap().contains("memoryd_jobs{"), "the last queue figures are served");
    assert!(started.elapsed() < Duration::from_secs(3), "/metrics waited {:?}", started.elapsed());

    proxy.restore();
    let restored = Instant::now();
    let mut i = 6;
    loop {
        let (status, code, _) = append(&http, &base, &key, "s", i).await;
        if status == 201 {
            acknowledged.push(i);
            break;
        }
        assert_eq!((status.as_u16(), code.as_str()), (503, "unavailable"));
        assert!(restored.elapsed() < Duration::from_secs(15), "service did not resume");
        tokio::time::sleep(Duration::from_millis(200)).await;
        i += 1;
    }
    assert_eq!(append(&http, &base, &key, "s", i + 1).await.0, 201);
    acknowledged.push(i + 1);
    assert_eq!(status_of(&http, format!("{base}/readyz")).await, 200);
    let data_dir = dir.path().join("memoryd-data");
    assert_eq!(rollout_turns(&env, &data_dir, &tenant).await, acknowledged);
    assert!(!memoryd.log_text().contains("\"status\":500"), "a request answered 500");
}

fn leftovers_under(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if entry.file_type().unwrap().is_dir() {
                pending.push(entry.path());
            } else if name.starts_with(".memoryd-")
                || name
                    .strip_prefix(".tmp")
                    .is_some_and(|r| r.len() == 6 && r.bytes().all(|b| b.is_ascii_alphanumeric()))
            {
                found.push(entry.path());
            }
        }
    }
    found
}

/// Kill -9 at random moments after closes, five times; then every job
/// runs to its end with each conversation whole, and (on a volume) the files
/// left under temporary names are gone once the jobs have run again, those of
/// jobs that will not run again removed at start-up, while a file of the
/// user's that merely looks similar stays. (A bucket's unrecorded versions
/// are swept as `bucket_kills` checks; its copies are wiped at start-up.)
async fn a_killed_attempts_temporary_files_are_removed(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let mut env = database_env(backend).await;
    env.push(("MEMORYD_JOB_LEASE_SECS", "2".into()));
    env.push(("MEMORYD_RETRY_BASE_MS", "100".into()));
    let http = reqwest::Client::new();
    let mut tenant: Option<(String, String)> = None;
    let mut sessions = 0;
    for round in 0..5u64 {
        let (mut memoryd, _, key) = spawn_round(dir.path(), round, &env, &http, &mut tenant).await;
        let session = format!("s{round}");
        for r in 0..12 {
            let body = json!({"rollout_id": format!("r{round}-{r}"), "input": "remember", "final_output": "done"});
            crate::process::post_segment(&http, &memoryd.base, &key, &session, body).await;
        }
        sessions += 12;
        http.post(format!("{}/v1/sessions/{session}/close", memoryd.base)).bearer_auth(&key).send().await.unwrap();
        tokio::time::sleep(Duration::from_millis(5 + round * 7)).await;
        memoryd.signal("-KILL");
        memoryd.exit().await;
    }
    let (tenant_id, key) = tenant.unwrap();
    let data_dir = dir.path().join("memoryd-data");
    let memories = data_dir.join(format!("workspaces/{tenant_id}/default/memories"));
    let users_own = crate::s3::prefix_of(&env).is_none().then(|| plant_leftovers(&memories));

    let memoryd = Memoryd::spawn(dir.path(), "final", &["serve"], &env);
    memoryd.ready(&http).await;
    let jobs = settle(&http, &memoryd.base, &key, sessions, Duration::from_secs(60)).await;
    assert!(jobs.iter().all(|j| j["state"] == "succeeded" || j["state"] == "skipped"), "{jobs:?}");
    for rollout in (0..5).flat_map(|round| (0..12).map(move |r| format!("r{round}-{r}"))) {
        let path = format!("sessions/{rollout}.jsonl");
        let stored = stored_file(&env, &data_dir, &tenant_id, "default", &path).await.expect("the rollout");
        assert_eq!(String::from_utf8(stored).unwrap().lines().count(), 1, "{rollout}: its one line, once");
    }
    let Some(users_own) = users_own else { return };
    let started = Instant::now();
    while !leftovers_under(&memories).is_empty() {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "temporary files stayed: {:?}",
            leftovers_under(&memories)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(users_own.exists(), "a file that is not memoryd's was removed");
}

/// What a crash mid-publish on a volume leaves, planted for jobs that will
/// not run again, and a file of the user's that merely looks similar (its path).
fn plant_leftovers(memories: &Path) -> PathBuf {
    let finished_job = uuid::Uuid::new_v4();
    std::fs::write(memories.join(format!("raw_memories/.memoryd-{finished_job}-a1b2c3.tmp")), "x").unwrap();
    std::fs::write(memories.join(format!("skills/.memoryd-{finished_job}-d4e5f6.tmp")), "x").unwrap();
    let legacy = memories.join("rollout_summaries/.tmpAb3dE9");
    std::fs::write(&legacy, "x").unwrap();
    std::fs::File::options()
        .write(true)
        .open(&legacy)
        .unwrap()
        .set_modified(std::time::SystemTime::now() - Duration::from_secs(3600))
        .unwrap();
    let users_own = memories.join(".tmp-notes");
    std::fs::write(&users_own, "mine").unwrap();
    users_own
}
