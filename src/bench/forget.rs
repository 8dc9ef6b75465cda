//! The forget workload: a forget of one conversation in a layout of many,
//! and a retention sweep over many expired idempotency keys while appends
//! go on (how long the sweep takes, and the longest any append waited).

use super::{Bench, BenchResult, Figure, figure};
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

impl Bench {
    /// The default rules over a rollout of `mib` MiB (segments of about
    /// 8 KiB whose text has escaped newlines, one in four holding a
    /// credential): MB/s of one pass as plain text, and as JSON lines whose
    /// escaped strings are matched decoded (what phase one sends).
    pub(super) fn redaction(&self, mib: usize) -> Vec<Figure> {
        let redactor = crate::domain::layout::default_layout().redactor();
        let credentials = [
            "sk-proj-Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4zAb7cDe0f",
            "AKIAIOSFODNN7EXAMPLE",
            "password=hunter2hunter2",
            "Bearer abcdef0123456789ABCDEF",
        ];
        let mut text = String::with_capacity(mib << 20);
        let mut n = 0;
        while text.len() < mib << 20 {
            let secret = if n % 4 == 0 { credentials[(n / 4) % credentials.len()] } else { "" };
            let filler = "the user asked about the deploy and the agent ran the tests again;\\n".repeat(120);
            text.push_str(&format!(
                "{{\"updated_at\":\"2026-12-01T08:00:00+00:00\",\"rollout_id\":\"big\",\"input\":[{{\"content\":\"{filler} {secret}\",\"role\":\"user\"}}]}}\n"
            ));
            n += 1;
        }
        let mut figures = Vec::new();
        for (how, as_jsonl) in [("as plain text", false), ("as JSON lines, escaped strings decoded", true)] {
            let mut rates = Vec::new();
            for _ in 0..self.runs {
                let mut counts = crate::domain::redact::Counts::new();
                let started = Instant::now();
                let out = if as_jsonl {
                    redactor.redact_jsonl(&text, &mut counts)
                } else {
                    redactor.redact_text(&text, &mut counts)
                };
                let secs = started.elapsed().as_secs_f64();
                assert!(out.len() < text.len() + (n << 5) && !counts.is_empty());
                rates.push(text.len() as f64 / 1e6 / secs);
            }
            let case = format!("{mib} MiB rollout, default rules, {how}");
            figures.push(figure("redaction", self.backend, case, "throughput", "MB/s", rates));
        }
        figures
    }

    /// `rollouts` conversations of one layout in one workspace, extracted
    /// and consolidated; then `runs` forgets of one of them, each timed from
    /// the request to the job's success.
    pub(super) async fn forget(&self, rollouts: usize) -> BenchResult<Figure> {
        let session = format!("forget-{rollouts}");
        let workspace = &session;
        for i in 0..rollouts {
            self.segment(&session, workspace, &format!("f{i:05}"), &format!("conversation {i}")).await?;
        }
        let (status, body) = self.post(&format!("/v1/sessions/{session}/close?wait=300"), &json!({})).await?;
        if status != 200 || body["memory_status"]["status"] != "complete" {
            return Err(format!("the seeding close answered {status}: {body}").into());
        }
        let mut times = Vec::new();
        for run in 0..self.runs {
            let started = Instant::now();
            let url = format!("{}/v1/workspaces/{workspace}/layouts/default/rollouts/f{run:05}", self.base);
            let res = self.http.delete(url).bearer_auth(&self.key).send().await?;
            if res.status() != 202 {
                return Err(format!("the forget answered {}", res.status()).into());
            }
            let job: Value = res.json().await?;
            let state = self.wait_for_job(job["job_id"].as_str().ok_or("no job id")?).await?;
            if state != "succeeded" {
                return Err(format!("the forget ended {state}").into());
            }
            times.push(started.elapsed().as_secs_f64() * 1000.0);
        }
        Ok(figure("forget", self.backend, format!("1 of {rollouts} rollouts"), "request to job succeeded", "ms", times))
    }

    pub(super) async fn wait_for_job(&self, job_id: &str) -> BenchResult<String> {
        let started = Instant::now();
        loop {
            let job: Value = self
                .http
                .get(format!("{}/v1/jobs/{job_id}", self.base))
                .bearer_auth(&self.key)
                .send()
                .await?
                .json()
                .await?;
            match job["state"].as_str() {
                Some("queued" | "running") => {}
                Some(state) => return Ok(state.to_owned()),
                None => return Err(format!("no job {job_id}: {job}").into()),
            }
            if started.elapsed() > Duration::from_secs(600) {
                return Err("the job never finished".into());
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// `keys` appends with idempotency keys, then the retention sweep of all
    /// of them (expired by a cut-off in the future) while one client keeps
    /// appending: the sweep's time and the slowest append meanwhile.
    pub(super) async fn retention_sweep(&self, keys: usize) -> BenchResult<Vec<Figure>> {
        let (mut sweeps, mut slowest) = (Vec::new(), Vec::new());
        for run in 0..self.runs {
            let clients = 32;
            let mut tasks = Vec::new();
            for client in 0..clients {
                let (http, base, key) = (self.http.clone(), self.base.clone(), self.key.clone());
                tasks.push(tokio::spawn(async move {
                    let url = format!("{base}/v1/sessions/keys-{run}-{client}/layouts/default/segments?workspace=keys");
                    for i in (client..keys).step_by(clients) {
                        let res = http
                            .post(&url)
                            .bearer_auth(&key)
                            .header("idempotency-key", format!("sweep-{run}-{i}"))
                            .json(&json!({"rollout_id": format!("keys-{run}-{client}"), "input": "k"}))
                            .send()
                            .await
                            .map_err(|e| e.to_string())?;
                        if res.status() != 201 {
                            return Err(format!("a keyed append answered {}", res.status()));
                        }
                    }
                    Ok(())
                }));
            }
            for task in tasks {
                task.await??;
            }
            let stop = Arc::new(AtomicBool::new(false));
            let appender = {
                let (http, base, key, stop) = (self.http.clone(), self.base.clone(), self.key.clone(), stop.clone());
                tokio::spawn(async move {
                    let url = format!("{base}/v1/sessions/during-{run}/layouts/default/segments?workspace=keys");
                    let mut longest = 0f64;
                    while !stop.load(Ordering::Relaxed) {
                        let started = Instant::now();
                        let res = http
                            .post(&url)
                            .bearer_auth(&key)
                            .json(&json!({"rollout_id": format!("during-{run}"), "input": "x"}))
                            .send()
                            .await
                            .map_err(|e| e.to_string())?;
                        if res.status() != 201 {
                            return Err(format!("an append during the sweep answered {}", res.status()));
                        }
                        longest = longest.max(started.elapsed().as_secs_f64() * 1000.0);
                    }
                    Ok(longest)
                })
            };
            tokio::time::sleep(Duration::from_millis(200)).await;
            let started = Instant::now();
            let deleted = crate::jobs::expire_idempotency_keys(
                self.server.state.store.as_ref(),
                chrono::Utc::now() + chrono::Duration::seconds(1),
            )
            .await?;
            sweeps.push(started.elapsed().as_secs_f64() * 1000.0);
            tokio::time::sleep(Duration::from_millis(200)).await;
            stop.store(true, Ordering::Relaxed);
            slowest.push(appender.await??);
            if (deleted as usize) < keys {
                return Err(format!("the sweep removed {deleted} of {keys} keys").into());
            }
        }
        let case = format!("{keys} expired idempotency keys");
        Ok(vec![
            figure("retention", self.backend, case.clone(), "sweep", "ms", sweeps),
            figure("retention", self.backend, case, "slowest append during the sweep", "ms", slowest),
        ])
    }
}
