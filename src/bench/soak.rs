//! The soak workload (issue 13): eight agents on one tenant's default
//! layout, each opening a session, appending four rollouts of two segments,
//! closing without waiting and pausing a second, for a while; per window:
//! appends/s and their latency, close-to-closed latency, the queue, memory
//! and data size; then how long the queue takes to drain.

use super::{Bench, BenchResult, Figure, figure, memory_mib, percentile};
use chrono::{DateTime, Utc};
use serde_json::json;
use std::time::{Duration, Instant};

const CLIENTS: usize = 8;
const ROLLOUTS: usize = 4;

fn bytes_under(dir: &std::path::Path) -> u64 {
    crate::workspace::files_under(dir).unwrap_or_default().iter().map(|(_, meta)| meta.len()).sum()
}

/// The embedded database's write-ahead log: it grows between checkpoints,
/// so its size shows whether checkpoints keep up with the load.
fn sqlite_wal_bytes(data_dir: &std::path::Path) -> u64 {
    crate::workspace::files_under(data_dir)
        .unwrap_or_default()
        .iter()
        .filter(|(path, _)| path.file_name().is_some_and(|n| n.to_string_lossy().ends_with(".db-wal")))
        .map(|(_, meta)| meta.len())
        .sum()
}

/// What one agent saw: `(seconds since start, append ms)` and `(session, close time)`.
type AgentLog = (Vec<(f64, f64)>, Vec<(String, DateTime<Utc>)>);

/// One agent: sessions of [`ROLLOUTS`] rollouts of two segments, each
/// closed without waiting, a second apart, until `duration` has passed.
async fn soak_agent(
    http: reqwest::Client,
    base: String,
    key: String,
    client: usize,
    started: Instant,
    duration: Duration,
) -> Result<AgentLog, String> {
    let mut log: AgentLog = (Vec::new(), Vec::new());
    let mut n = 0;
    while started.elapsed() < duration {
        let session = format!("soak-{client}-{n}");
        n += 1;
        for rollout in 0..ROLLOUTS {
            for turn in 0..2 {
                let body = json!({"rollout_id": format!("{session}-r{rollout}"),
                                  "input": format!("turn {turn}: {}", "w".repeat(500)), "final_output": "ok"});
                let t = Instant::now();
                let res = http
                    .post(format!("{base}/v1/sessions/{session}/layouts/default/segments"))
                    .bearer_auth(&key)
                    .json(&body)
                    .send()
                    .await
                    .map_err(|e| e.to_string())?;
                if res.status() != 201 {
                    return Err(format!("a soak append answered {}", res.status()));
                }
                log.0.push((started.elapsed().as_secs_f64(), t.elapsed().as_secs_f64() * 1000.0));
            }
        }
        let closed_at = Utc::now();
        let res = http
            .post(format!("{base}/v1/sessions/{session}/close"))
            .bearer_auth(&key)
            .send()
            .await
            .map_err(|e| e.to_string())?;
        if !res.status().is_success() {
            return Err(format!("a soak close answered {}", res.status()));
        }
        log.1.push((session, closed_at));
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    Ok(log)
}

/// One window's end: phase-one and phase-two jobs waiting, RSS, data size and SQLite WAL (MiB).
type Sample = (f64, f64, f64, f64, f64);

impl Bench {
    /// With `failing_webhook`, the tenant has an endpoint that answers
    /// every delivery 500 (SPEC §2.8: it is paused, and costs closes nothing).
    pub(super) async fn soak(&self, duration: Duration, failing_webhook: bool) -> BenchResult<Vec<Figure>> {
        let window = if duration >= Duration::from_secs(60) { 30.0 } else { (duration.as_secs_f64() / 2.0).max(1.0) };
        let failing = match failing_webhook {
            true => {
                let (url, hits) = super::events::failing_receiver().await?;
                self.webhook(&self.key, &url).await?;
                Some(hits)
            }
            false => None,
        };
        let started = Instant::now();
        let agents: Vec<_> = (0..CLIENTS)
            .map(|client| {
                tokio::spawn(soak_agent(
                    self.http.clone(),
                    self.base.clone(),
                    self.key.clone(),
                    client,
                    started,
                    duration,
                ))
            })
            .collect();
        // Samples at each window's end, while the agents run.
        let samples = self.sample_windows(started, duration, window).await?;
        let (mut appends, mut closes) = (Vec::new(), Vec::new());
        for agent in agents {
            let (a, c) = agent.await??;
            appends.extend(a);
            closes.extend(c);
        }
        let drain = self.soak_drain().await?;
        let close_latency = self.close_latencies(&closes).await?;
        let start_utc = closes.iter().map(|(_, at)| *at).min().unwrap_or_else(Utc::now);
        let mut out = Vec::new();
        let prefix = if failing.is_some() { "failing endpoint, " } else { "" };
        let one = |case: &str, metric: &'static str, unit: &'static str, v: f64| {
            figure("soak", self.backend, format!("{prefix}{case}"), metric, unit, vec![v])
        };
        for (i, (phase_one, phase_two, rss, data, wal)) in samples.iter().enumerate() {
            let (from, to) = (i as f64 * window, (i + 1) as f64 * window);
            let case = format!("t={from:.0}-{to:.0}s");
            let mut lat: Vec<f64> = appends.iter().filter(|(t, _)| *t >= from && *t < to).map(|(_, ms)| *ms).collect();
            lat.sort_by(f64::total_cmp);
            let mut cl: Vec<f64> = close_latency
                .iter()
                .filter(|(at, _)| {
                    let t = (*at - start_utc).num_milliseconds() as f64 / 1000.0;
                    t >= from && t < to
                })
                .map(|(_, s)| *s)
                .collect();
            cl.sort_by(f64::total_cmp);
            out.push(one(&case, "appends", "segments/s", lat.len() as f64 / window));
            out.push(one(&case, "append p50", "ms", percentile(&lat, 0.5)));
            out.push(one(&case, "append p99", "ms", percentile(&lat, 0.99)));
            out.push(one(&case, "close-to-closed p50", "s", percentile(&cl, 0.5)));
            out.push(one(&case, "close-to-closed p99", "s", percentile(&cl, 0.99)));
            out.push(one(&case, "phase-one jobs waiting", "jobs", *phase_one));
            out.push(one(&case, "phase-two jobs waiting", "jobs", *phase_two));
            out.push(one(&case, "RSS", "MiB", *rss));
            out.push(one(&case, "data size", "MiB", *data));
            if self.backend.starts_with("sqlite") {
                out.push(one(&case, "SQLite WAL", "MiB", *wal));
            }
        }
        let runs = self
            .server
            .state
            .store
            .phase_two_runs(
                self.tenant,
                &crate::domain::ids::WorkspaceName::default_workspace(),
                &crate::domain::ids::LayoutName::default_layout(),
                &crate::domain::page::PageRequest { limit: 100_000, after: None },
            )
            .await?;
        out.push(one("total", "closes", "sessions", closes.len() as f64));
        out.push(one("total", "phase-two runs", "runs", runs.len() as f64));
        out.push(one("total", "drain after the load", "s", drain));
        if let Some(hits) = failing {
            let requests = hits.load(std::sync::atomic::Ordering::Relaxed) as f64;
            out.push(one("total", "requests to the failing endpoint", "requests", requests));
        }
        Ok(out)
    }

    async fn sample_windows(&self, started: Instant, duration: Duration, window: f64) -> BenchResult<Vec<Sample>> {
        let store = self.server.state.store.clone();
        let data_dir = self._dir.path().to_path_buf();
        let mut samples = Vec::new();
        let mut next = window;
        while started.elapsed() < duration {
            tokio::time::sleep(Duration::from_secs_f64((next - started.elapsed().as_secs_f64()).max(0.0))).await;
            let counts = store.job_counts().await?;
            let waiting = |kind: &str| {
                counts
                    .iter()
                    .filter(|(k, s, _)| k == kind && (s == "queued" || s == "running"))
                    .map(|(_, _, n)| *n)
                    .sum::<i64>()
            };
            samples.push((
                waiting("phase_one") as f64,
                waiting("phase_two") as f64,
                memory_mib("VmRSS"),
                bytes_under(&data_dir) as f64 / 1048576.0,
                sqlite_wal_bytes(&data_dir) as f64 / 1048576.0,
            ));
            next += window;
        }
        Ok(samples)
    }

    /// Seconds until no job is queued or running (at most ten minutes).
    async fn soak_drain(&self) -> BenchResult<f64> {
        let load_end = Instant::now();
        loop {
            let counts = self.server.state.store.job_counts().await?;
            if !counts.iter().any(|(_, s, n)| (s == "queued" || s == "running") && *n > 0) {
                return Ok(load_end.elapsed().as_secs_f64());
            }
            if load_end.elapsed() > Duration::from_secs(600) {
                return Err("the queue did not drain within 10 minutes".into());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// For each close: when it was asked, and the seconds until its session
    /// was closed. Settling may trail the last job by a sweep: the sessions
    /// themselves are asked.
    async fn close_latencies(&self, closes: &[(String, DateTime<Utc>)]) -> BenchResult<Vec<(DateTime<Utc>, f64)>> {
        let mut close_latency = Vec::new();
        for (session, closed_at) in closes {
            let id = crate::domain::ids::SessionId::parse(session).ok_or("a bad session id")?;
            let waited = Instant::now();
            let settled = loop {
                let view =
                    self.server.state.store.session_view(self.tenant, &id).await?.ok_or("a soak session vanished")?;
                if let Some(at) = view.session.closed_at {
                    break at;
                }
                if waited.elapsed() > Duration::from_secs(30) {
                    return Err(format!("session {session} never closed").into());
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            };
            close_latency.push((*closed_at, (settled - *closed_at).num_milliseconds() as f64 / 1000.0));
        }
        Ok(close_latency)
    }
}
