//! The drain workload (issue 26's measure): N tenants each close S sessions
//! of R one-segment rollouts at once, and the job engine works through the
//! phase-one and phase-two jobs. Jobs per second over the whole drain, and
//! per job, from the jobs' own timestamps: how long it waited to be claimed
//! (created to started) and how long its attempt and recording took
//! (started to finished).

use super::{Bench, BenchResult, Figure, figure, percentile};
use crate::store::{JobFilter, PageRequest};
use serde_json::json;
use std::collections::BTreeMap;
use std::time::Instant;

/// The stages of a job, in the order a job passes them.
const STAGES: [&str; 7] = ["claim", "prepare", "run", "stage", "finish", "publish", "settle"];

/// Seconds spent and jobs counted per stage of `kind`'s jobs so far, from
/// this process's `memoryd_job_stage_seconds`.
fn stage_totals(kind: &str) -> BTreeMap<String, (f64, f64)> {
    let text = crate::metrics::handle().render();
    let mut totals: BTreeMap<String, (f64, f64)> = BTreeMap::new();
    for line in text.lines() {
        let Some((name, value)) = line.rsplit_once(' ') else { continue };
        let Ok(value) = value.parse::<f64>() else { continue };
        let (is_sum, labels) = if let Some(l) = name.strip_prefix("memoryd_job_stage_seconds_sum{") {
            (true, l)
        } else if let Some(l) = name.strip_prefix("memoryd_job_stage_seconds_count{") {
            (false, l)
        } else {
            continue;
        };
        if !labels.contains(&format!("kind=\"{kind}\"")) {
            continue;
        }
        let Some(stage) = labels.split("stage=\"").nth(1).and_then(|r| r.split('"').next()) else { continue };
        let entry = totals.entry(stage.to_owned()).or_default();
        if is_sum { entry.0 += value } else { entry.1 += value }
    }
    totals
}

/// The per-job figures a drain gathers, in milliseconds.
#[derive(Default)]
struct JobTimes {
    /// Phase ones, created to started.
    waits: Vec<f64>,
    /// Every job, started to finished.
    works: Vec<f64>,
    /// A fresh tenant's one-rollout close, while the drain runs.
    fresh_closes: Vec<f64>,
}

impl Bench {
    pub(super) async fn drain(&self, tenants: usize, sessions: usize, rollouts: usize) -> BenchResult<Vec<Figure>> {
        let (mut rates, mut drains, mut closing) = (Vec::new(), Vec::new(), Vec::new());
        let mut times = JobTimes::default();
        let before = stage_totals("phase_one");
        let (mut stepped, mut step_began) = (Vec::new(), before.clone());
        let fresh_key = self.tenant_key("fresh").await?;
        for run in 0..self.runs {
            let keys = self.drain_tenants(tenants).await?;
            // Seed every rollout first, then close everything at once.
            self.seed_drain(&keys, run, sessions, rollouts).await?;
            let started = Instant::now();
            self.close_every_session(&keys, run, sessions).await?;
            closing.push(started.elapsed().as_secs_f64());
            let probed = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
            let probing = self.probe_fresh_closes(run, fresh_key.clone(), probed.clone());
            self.wait_for_the_queue().await?;
            let drained = started.elapsed().as_secs_f64();
            probing.abort();
            times.fresh_closes.extend(probed.lock().expect("not poisoned").iter().copied());
            let jobs = self.job_times(&keys, &mut times).await?;
            drains.push(drained);
            rates.push(jobs as f64 / drained);
            if self.steps {
                let case = format!("{tenants} tenants × {sessions} sessions × {rollouts} rollouts, step {}", run + 1);
                stepped.push(figure(
                    "drain",
                    self.backend,
                    case.clone(),
                    "jobs drained per second",
                    "jobs/s",
                    vec![jobs as f64 / drained],
                ));
                stepped.extend(self.stage_figures(&case, &step_began));
                stepped.extend(self.aging_probes(&case, run + 1).await?);
                step_began = stage_totals("phase_one");
            }
        }
        let case = format!("{tenants} tenants × {sessions} sessions × {rollouts} rollouts");
        let mut figures = vec![
            figure("drain", self.backend, case.clone(), "jobs drained per second", "jobs/s", rates),
            figure("drain", self.backend, case.clone(), "time to drain", "s", drains),
            figure("drain", self.backend, case.clone(), "of it, until every close was answered", "s", closing),
        ];
        figures.extend(self.time_figures(&case, times));
        figures.extend(self.stage_figures(&case, &before));
        figures.extend(stepped);
        Ok(figures)
    }

    /// `n` new tenants: their ids and keys.
    async fn drain_tenants(&self, n: usize) -> BenchResult<Vec<(uuid::Uuid, String)>> {
        let mut keys = Vec::with_capacity(n);
        for _ in 0..n {
            keys.push(super::new_tenant(&self.http, &self.base, &self.admin, "drain").await?);
        }
        Ok(keys)
    }

    /// One segment for each rollout of each session of each tenant, the tenants at once.
    async fn seed_drain(
        &self,
        keys: &[(uuid::Uuid, String)],
        run: usize,
        sessions: usize,
        rollouts: usize,
    ) -> BenchResult<()> {
        let mut seeders = tokio::task::JoinSet::new();
        for (_, key) in keys {
            let (http, base, key) = (self.http.clone(), self.base.clone(), key.clone());
            seeders.spawn(async move {
                for s in 0..sessions {
                    for r in 0..rollouts {
                        let url = format!("{base}/v1/sessions/d{run}-{s}/layouts/default/segments");
                        let body = json!({"rollout_id": format!("d{run}-{s}-{r}"), "input": format!("conversation {s}.{r}"), "final_output": "ok"});
                        let res = http.post(url).bearer_auth(&key).json(&body).send().await.map_err(|e| e.to_string())?;
                        if res.status() != 201 {
                            let status = res.status();
                            return Err(format!("drain seeding answered {status}: {}", res.text().await.unwrap_or_default()));
                        }
                    }
                }
                Ok(())
            });
        }
        while let Some(done) = seeders.join_next().await {
            done??;
        }
        Ok(())
    }

    /// Closes every seeded session, as many at once as the database pool serves.
    async fn close_every_session(&self, keys: &[(uuid::Uuid, String)], run: usize, sessions: usize) -> BenchResult<()> {
        let mut closers = tokio::task::JoinSet::new();
        let at_once = std::sync::Arc::new(tokio::sync::Semaphore::new(32));
        for (_, key) in keys {
            for s in 0..sessions {
                let (http, url, key) =
                    (self.http.clone(), format!("{}/v1/sessions/d{run}-{s}/close", self.base), key.clone());
                let at_once = at_once.clone();
                closers.spawn(async move {
                    let _turn = at_once.acquire_owned().await;
                    http.post(url).bearer_auth(key).send().await.map(|r| r.status().as_u16())
                });
            }
        }
        while let Some(closed) = closers.join_next().await {
            let status = closed??;
            if status != 200 && status != 202 {
                return Err(format!("a close answered {status}").into());
            }
        }
        Ok(())
    }

    /// Meanwhile another tenant closes fresh one-rollout sessions, one after
    /// another, until it is aborted; each close's milliseconds go to `times`.
    fn probe_fresh_closes(
        &self,
        run: usize,
        key: String,
        times: std::sync::Arc<std::sync::Mutex<Vec<f64>>>,
    ) -> tokio::task::JoinHandle<()> {
        let (http, base) = (self.http.clone(), self.base.clone());
        tokio::spawn(async move {
            for i in 0usize.. {
                let session = format!("fresh{run}-{i}");
                let url = format!("{base}/v1/sessions/{session}/layouts/default/segments");
                let body = json!({"rollout_id": session, "input": "a fresh conversation", "final_output": "ok"});
                let appended = http.post(url).bearer_auth(&key).json(&body).send().await;
                if let Some(problem) = unexpected(appended, 201).await {
                    tracing::error!(problem, "the drain's fresh append failed");
                    break;
                }
                let started = Instant::now();
                let url = format!("{base}/v1/sessions/{session}/close?wait=300");
                let closed = http.post(url).bearer_auth(&key).send().await;
                if let Some(problem) = unexpected(closed, 200).await {
                    tracing::error!(problem, "the drain's fresh close failed");
                    break;
                }
                times.lock().expect("not poisoned").push(started.elapsed().as_secs_f64() * 1000.0);
            }
        })
    }

    /// Adds the tenants' finished jobs' waits and works to `times`; how many there were.
    async fn job_times(&self, keys: &[(uuid::Uuid, String)], times: &mut JobTimes) -> BenchResult<usize> {
        let mut jobs = 0usize;
        for (tenant, _) in keys {
            let page = PageRequest { limit: 10_000, after: None };
            for job in self.server.state.store.list_jobs(*tenant, &JobFilter::default(), &page).await? {
                if let (Some(began), Some(ended)) = (job.started_at, job.finished_at) {
                    // A phase two waits for its closes' phase ones by design: only
                    // phase one's wait is the queue's.
                    if job.kind == crate::store::JobKind::PhaseOne {
                        times.waits.push((began - job.created_at).num_microseconds().unwrap_or(0) as f64 / 1000.0);
                    }
                    times.works.push((ended - began).num_microseconds().unwrap_or(0) as f64 / 1000.0);
                    jobs += 1;
                }
            }
        }
        Ok(jobs)
    }

    /// The percentiles of the per-job times.
    fn time_figures(&self, case: &str, mut times: JobTimes) -> Vec<Figure> {
        times.waits.sort_by(f64::total_cmp);
        times.works.sort_by(f64::total_cmp);
        times.fresh_closes.sort_by(f64::total_cmp);
        let mut figures = Vec::new();
        for (metric, values, p) in [
            ("phase-one claim wait p50 (created to started)", &times.waits, 0.5),
            ("phase-one claim wait p99", &times.waits, 0.99),
            ("attempt and record p50 (started to finished)", &times.works, 0.5),
            ("attempt and record p99", &times.works, 0.99),
            ("a fresh one-rollout close during the drain, p50", &times.fresh_closes, 0.5),
            ("a fresh one-rollout close during the drain, p99", &times.fresh_closes, 0.99),
        ] {
            figures.push(figure("drain", self.backend, case.to_owned(), metric, "ms", vec![percentile(values, p)]));
        }
        figures
    }

    /// The mean time phase ones spent in each stage since `before`.
    fn stage_figures(&self, case: &str, before: &BTreeMap<String, (f64, f64)>) -> Vec<Figure> {
        let after = stage_totals("phase_one");
        let mut stages = Vec::new();
        for stage in STAGES {
            let (sum, count) = after.get(stage).copied().unwrap_or_default();
            let (sum_before, count_before) = before.get(stage).copied().unwrap_or_default();
            let jobs = count - count_before;
            if jobs > 0.0 {
                let mean = (sum - sum_before) / jobs * 1000.0;
                stages.push(figure("drain", self.backend, case.to_owned(), stage_metric(stage), "ms", vec![mean]));
            }
        }
        stages
    }
}

/// Why an answer is not the `expected` status, if it is not.
async fn unexpected(answer: reqwest::Result<reqwest::Response>, expected: u16) -> Option<String> {
    match answer {
        Ok(r) if r.status().as_u16() == expected => None,
        Ok(r) => Some(format!("{}: {}", r.status(), r.text().await.unwrap_or_default())),
        Err(e) => Some(e.to_string()),
    }
}

/// A stage's figure name (figures name their metric with a static string).
fn stage_metric(stage: &str) -> &'static str {
    match stage {
        "claim" => "phase one, mean claim (the claim transaction)",
        "prepare" => "phase one, mean prepare (pending publishes of the layout)",
        "run" => "phase one, mean run (read and extract)",
        "stage" => "phase one, mean stage (files written and synced)",
        "finish" => "phase one, mean finish (the recording transaction)",
        "publish" => "phase one, mean publish (renames and syncs)",
        _ => "phase one, mean settle (the session's settling)",
    }
}
