//! Group commit (SPEC §2.2): appends that wait together share one
//! transaction, and a 201 still means the line is on disk and recorded —
//! through a failed group and through SIGKILL under load.

use crate::harness::{Backend, Database, TestApp, status_code_body};
use crate::process::{Memoryd, database_env, spawn_round};
use crate::s3::replica_env;
use memoryd::ingest::QueueLoad;
use reqwest::Method;
use serde_json::{Value, json};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

fn segment(rollout: &str, said: &str) -> Value {
    json!({"rollout_id": rollout, "input": said, "final_output": "ok"})
}

impl Database {
    /// Makes recording a line of rollout `poison` fail inside the commit.
    async fn poison_rollout(&mut self) {
        match self {
            Self::Postgres(_) => {
                self.run(
                    "CREATE FUNCTION poison_append() RETURNS trigger LANGUAGE plpgsql AS $$
                     BEGIN IF NEW.rollout_id = 'poison' THEN RAISE EXCEPTION 'injected failure'; END IF; RETURN NEW; END $$;
                     CREATE TRIGGER poison_append BEFORE UPDATE ON rollouts
                     FOR EACH ROW EXECUTE FUNCTION poison_append();",
                )
                .await
            }
            Self::Sqlite(_) => {
                self.run(
                    "CREATE TRIGGER poison_append BEFORE UPDATE ON rollouts WHEN NEW.rollout_id = 'poison'
                     BEGIN SELECT RAISE(ABORT, 'injected failure'); END;",
                )
                .await
            }
        }
    }

    async fn cure(&mut self) {
        match self {
            Self::Postgres(_) => self.run("DROP TRIGGER poison_append ON rollouts").await,
            Self::Sqlite(_) => self.run("DROP TRIGGER poison_append").await,
        }
    }

    /// Holds what memoryd's next appends must wait for: the `blocker-…`
    /// sessions' rows on Postgres, the database's write lock on SQLite.
    async fn block_appends(&mut self) {
        match self {
            Self::Postgres(_) => {
                self.run("BEGIN; SELECT 1 FROM sessions WHERE session_id LIKE 'blocker-%' FOR UPDATE").await
            }
            Self::Sqlite(_) => self.run("BEGIN IMMEDIATE").await,
        }
    }
}

crate::every_backend!(
    a_failed_group_acknowledges_none_of_its_appends,
    acknowledged_segments_survive_sigkill_under_load,
);

async fn a_failed_group_acknowledges_none_of_its_appends(backend: Backend) {
    let app = Arc::new(TestApp::start(backend).await);
    let t = app.tenant().await;
    let blocker = "blocker-0".to_owned();
    assert_eq!(app.post_segment(&t.key, &blocker, "default", segment(&blocker, "first")).await.status(), 201);
    let mut db = Database::connect(backend, &app.database_url).await;
    db.poison_rollout().await;

    // The blocker's append starts a group that waits for the lock; four
    // appends queue behind it (a second group would start only for a whole
    // group waiting) and go to the database together, as one group, in
    // which the poisoned one fails the transaction.
    db.block_appends().await;
    let post = |session: String, rollout: String| {
        let (app, key) = (app.clone(), t.key.clone());
        tokio::spawn(async move { app.post_segment(&key, &session, "default", segment(&rollout, "said")).await })
    };
    let blocked = vec![post(blocker.clone(), blocker.clone())];
    wait_for_queue(&app, 0, 1).await;
    let group =
        [("s-poison", "poison"), ("s-b", "r-b"), ("s-c", "r-c"), ("s-d", "r-d")].map(|(s, r)| post(s.into(), r.into()));
    wait_for_queue(&app, group.len(), 1).await;
    db.run("ROLLBACK").await;

    for blocked in blocked {
        assert_eq!(blocked.await.unwrap().status(), 201, "the appends before the failed group are recorded");
    }
    for answer in group {
        let res = answer.await.unwrap();
        let content_type = res.headers()["content-type"].to_str().unwrap().to_owned();
        let (status, code, _) = status_code_body(res).await;
        assert!(status >= 500, "every append of the failed group fails, got {status}");
        assert_eq!((content_type.as_str(), code.as_str()), ("application/problem+json", "internal"));
    }
    for session in ["s-poison", "s-b", "s-c", "s-d"] {
        let res = app.request(Method::GET, &format!("/v1/sessions/{session}"), &t.key).send().await.unwrap();
        assert_eq!(res.status(), 404, "{session} was opened only by the failed group: nothing of it is recorded");
    }
    let blocker = app.json(Method::GET, "/v1/sessions/blocker-0", &t.key).await;
    assert_eq!(blocker["rollouts"][0]["segment_count"], 2, "{blocker}");

    // The lines the failed group wrote are beyond the committed lengths, and
    // are cut when the appends are made again.
    db.cure().await;
    let res = app.post_segment(&t.key, "s-b", "default", segment("r-b", "again")).await;
    assert_eq!(res.status(), 201);
    let receipt: Value = res.json().await.unwrap();
    assert_eq!(receipt["segment_index"], 0);
    let text = app.file_text(&t, "default", receipt["rollout_path"].as_str().unwrap()).await;
    assert_eq!(text.lines().count(), 1, "{text}");
    assert!(text.contains("again") && !text.contains("said"), "{text}");
}

/// Waits until memoryd's append queue holds `waiting` appends and runs
/// `running` groups.
async fn wait_for_queue(app: &TestApp, waiting: usize, running: usize) {
    let appends = &app.server.as_ref().unwrap().state.appends;
    let want = QueueLoad { waiting, groups_running: running };
    let deadline = Instant::now() + Duration::from_secs(10);
    while appends.load() != want {
        assert!(Instant::now() < deadline, "the queue stayed at {:?}, not {want:?}", appends.load());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A small generator of kill moments, different on every run.
fn jitter(state: &mut u64, range: std::ops::Range<u64>) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    range.start + *state % (range.end - range.start)
}

/// One appender: its own rollout, markers 0, 1, 2, … each sent with its own
/// idempotency key until acknowledged. Returns `(marker, segment_index)` of
/// every acknowledgement.
async fn appender(
    http: reqwest::Client,
    base: Arc<RwLock<String>>,
    key: String,
    session: String,
    rollout: String,
    stop: Arc<AtomicBool>,
) -> Vec<(u64, i64)> {
    let mut acknowledged = Vec::new();
    let mut marker = 0;
    while !stop.load(Ordering::Relaxed) {
        let url = format!("{}/v1/sessions/{session}/layouts/default/segments", base.read().unwrap());
        let sent = http
            .post(url)
            .bearer_auth(&key)
            .header("idempotency-key", format!("{rollout}-{marker}"))
            .json(&segment(&rollout, &format!("<{rollout}#{marker}>")))
            .send()
            .await;
        match sent {
            Ok(res) if res.status() == 201 => {
                // A process killed mid-answer leaves the marker unacknowledged:
                // it is sent again, and its key replays the first answer.
                if let Ok(receipt) = res.json::<Value>().await {
                    acknowledged.push((marker, receipt["segment_index"].as_i64().unwrap()));
                    marker += 1;
                }
            }
            Ok(res) if res.status().is_client_error() => panic!("append refused: {}", res.text().await.unwrap()),
            _ => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
    acknowledged
}

/// A memoryd process whose clients follow it through SIGKILLs: they send to
/// `base`, the address of the process alive now.
pub(crate) struct Killable {
    pub dir: tempfile::TempDir,
    env: Vec<(&'static str, String)>,
    pub http: reqwest::Client,
    pub memoryd: Memoryd,
    pub tenant_id: String,
    pub key: String,
    pub base: Arc<RwLock<String>>,
    /// Set once the clients are to stop.
    pub stop: Arc<AtomicBool>,
}

impl Killable {
    pub(crate) async fn start(backend: Backend) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let env = database_env(backend).await;
        let http = reqwest::Client::builder().timeout(Duration::from_secs(20)).build().unwrap();
        let (memoryd, tenant_id, key) = spawn_round(dir.path(), 0, &env, &http, &mut None).await;
        let base = Arc::new(RwLock::new(memoryd.base.clone()));
        Self { dir, env, http, memoryd, tenant_id, key, base, stop: Arc::new(AtomicBool::new(false)) }
    }

    /// A file of the tenant's default workspace, wherever its files live.
    pub(crate) async fn file_text(&self, path: &str) -> String {
        let data_dir = self.dir.path().join("memoryd-data");
        let bytes = crate::process::stored_file(&self.env, &data_dir, &self.tenant_id, "default", path).await;
        String::from_utf8(bytes.unwrap_or_else(|| panic!("{path} is not there"))).unwrap()
    }

    /// After `wait`, SIGKILL, and a new process on the same data and database.
    pub(crate) async fn kill_and_restart(&mut self, round: u64, wait: Duration) {
        tokio::time::sleep(wait).await;
        self.memoryd.signal("-KILL");
        self.memoryd.exit().await;
        self.memoryd = Memoryd::spawn(self.dir.path(), &format!("round{round}"), &["serve"], &self.env);
        *self.base.write().unwrap() = self.memoryd.base.clone();
        self.memoryd.ready(&self.http).await;
    }
}

async fn acknowledged_segments_survive_sigkill_under_load(backend: Backend) {
    const APPENDERS: usize = 32;
    const KILLS: u64 = 3;
    let mut server = Killable::start(backend).await;
    // Two appenders per session, each with a rollout of its own.
    let appenders: Vec<_> = (0..APPENDERS)
        .map(|i| {
            let (session, rollout) = (format!("s-{}", i / 2), format!("r-{i}"));
            let (http, base, key) = (server.http.clone(), server.base.clone(), server.key.clone());
            tokio::spawn(appender(http, base, key, session, rollout, server.stop.clone()))
        })
        .collect();

    let mut seed = u64::from(Instant::now().elapsed().subsec_nanos()) | 1;
    seed ^= std::process::id() as u64;
    for round in 1..=KILLS {
        server.kill_and_restart(round, Duration::from_millis(jitter(&mut seed, 300..900))).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    server.stop.store(true, Ordering::Relaxed);
    let mut acknowledged = Vec::new();
    for task in appenders {
        acknowledged.push(task.await.unwrap());
    }
    let (http, key, memoryd) = (&server.http, &server.key, &server.memoryd);

    for (i, acks) in acknowledged.iter().enumerate() {
        let (session, rollout) = (format!("s-{}", i / 2), format!("r-{i}"));
        assert!(acks.len() as u64 > KILLS, "{rollout} made progress across the restarts: {acks:?}");
        // One more append after the last kill cuts any unacknowledged tail
        // and lands at the next index.
        let res = http
            .post(format!("{}/v1/sessions/{session}/layouts/default/segments", memoryd.base))
            .bearer_auth(key)
            .json(&segment(&rollout, &format!("<{rollout}#last>")))
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 201);
        let receipt: Value = res.json().await.unwrap();
        assert_eq!(receipt["segment_index"].as_u64(), Some(acks.len() as u64), "{rollout}");

        // Every acknowledged marker is in the file exactly once, in order, at
        // the index its receipt gave.
        let text = server.file_text(receipt["rollout_path"].as_str().unwrap()).await;
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), acks.len() + 1, "{rollout}: {text}");
        for (marker, index) in acks {
            assert_eq!(*index as usize, *marker as usize, "{rollout}: marker {marker} got index {index}");
            let line = lines[*index as usize];
            assert!(line.contains(&format!("<{rollout}#{marker}>")), "{rollout} line {index}: {line}");
            assert!(serde_json::from_str::<Value>(line).is_ok(), "{rollout} line {index} is whole: {line}");
        }
        assert!(lines[acks.len()].contains(&format!("<{rollout}#last>")));
    }
}

crate::replicated!(two_replicas_keep_shared_rollouts_whole_and_ordered);

/// Two replicas on one Postgres (and one volume, or one bucket), appending
/// to shared rollouts at once: their groups lock the same rows and must
/// neither interleave lines nor wait for each other forever.
async fn two_replicas_keep_shared_rollouts_whole_and_ordered(backend: Backend) {
    const APPENDERS: usize = 16;
    const ROLLOUTS: usize = 4;
    const EACH: u64 = 25;
    let dir = tempfile::tempdir().unwrap();
    let env = database_env(backend).await;
    let http = reqwest::Client::builder().timeout(Duration::from_secs(30)).build().unwrap();
    let replicas =
        ["a", "b"].map(|name| Memoryd::spawn(dir.path(), name, &["serve"], &replica_env(&env, dir.path(), name)));
    for replica in &replicas {
        replica.ready(&http).await;
    }
    let (tenant_id, key) = crate::process::new_tenant(&http, &replicas[0].base).await;
    let bases: Vec<String> = replicas.iter().map(|r| r.base.clone()).collect();
    let appenders: Vec<_> = (0..APPENDERS)
        .map(|i| {
            let (http, key, bases) = (http.clone(), key.clone(), bases.clone());
            tokio::spawn(async move {
                let rollout = format!("r-{}", i % ROLLOUTS);
                let mut indexes = Vec::new();
                for marker in 0..EACH {
                    // Every other append goes to the other replica. A
                    // deadlock between the replicas' groups is broken and the
                    // failed group made again, never answered with an error.
                    let base = &bases[(i + marker as usize) % 2];
                    let res = http
                        .post(format!("{base}/v1/sessions/s-{i}/layouts/default/segments"))
                        .bearer_auth(&key)
                        .json(&segment(&rollout, &format!("<{i}#{marker}>")))
                        .send()
                        .await
                        .unwrap();
                    assert_eq!(res.status(), 201, "{}", res.text().await.unwrap());
                    indexes.push(res.json::<Value>().await.unwrap()["segment_index"].as_u64().unwrap());
                }
                indexes
            })
        })
        .collect();
    let mut indexes = Vec::new();
    for task in appenders {
        indexes.push(task.await.unwrap());
    }

    let data_dir = dir.path().join("memoryd-data");
    for r in 0..ROLLOUTS {
        let path = format!("sessions/r-{r}.jsonl");
        let stored = crate::process::stored_file(&env, &data_dir, &tenant_id, "default", &path).await;
        let text = String::from_utf8(stored.expect("the rollout is stored")).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        let writers: Vec<usize> = (0..APPENDERS).filter(|i| i % ROLLOUTS == r).collect();
        assert_eq!(lines.len(), writers.len() * EACH as usize, "every append once: {path}");
        let mut taken = vec![false; lines.len()];
        for i in writers {
            let mut previous = None;
            for (marker, index) in indexes[i].iter().enumerate() {
                let line = lines[*index as usize];
                assert!(line.contains(&format!("<{i}#{marker}>")), "line {index} of r-{r}: {line}");
                assert!(serde_json::from_str::<Value>(line).is_ok(), "line {index} of r-{r} is whole");
                assert!(!std::mem::replace(&mut taken[*index as usize], true), "index {index} given twice");
                assert!(previous < Some(*index), "appender {i}'s lines keep their order");
                previous = Some(*index);
            }
        }
    }
}
