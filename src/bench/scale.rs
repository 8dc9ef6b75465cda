//! The scale workload (issue 26): what the requests whose cost could follow
//! the number of tenants cost at 10, 1,000 and 10,000 tenants, each with a
//! closed conversation (its session, rollout and finished jobs).

use super::{Bench, BenchResult, Figure, figure, percentile};
use serde_json::json;
use std::time::{Duration, Instant};

/// Requests timed per figure.
const SAMPLES: usize = 20;
/// Tenants made at once.
const AT_ONCE: usize = 32;

impl Bench {
    pub(super) async fn scale(&self, levels: &[usize]) -> BenchResult<Vec<Figure>> {
        let mut figures = Vec::new();
        let mut made = 0;
        for &level in levels {
            while made < level {
                let mut makers = tokio::task::JoinSet::new();
                for _ in 0..(level - made).min(AT_ONCE) {
                    let (http, base, admin) = (self.http.clone(), self.base.clone(), self.admin.clone());
                    makers.spawn(async move { one_closed_conversation(&http, &base, &admin).await });
                    made += 1;
                }
                while let Some(done) = makers.join_next().await {
                    done.map_err(|e| e.to_string())??;
                }
            }
            self.wait_for_the_queue().await?;
            let case = format!("{level} tenants");
            let tenants = format!("{}/v1/admin/tenants", self.base);
            let metrics = format!("{}/metrics", self.base);
            let sessions = format!("{}/v1/sessions", self.base);
            let segments = format!("{}/v1/sessions/scale-{level}/layouts/default/segments", self.base);
            let appends = std::sync::atomic::AtomicUsize::new(0);
            let timed = [
                (
                    "GET /v1/admin/tenants (first page of 100), p50",
                    p50_of(|| self.http.get(&tenants).bearer_auth(&self.admin)).await?,
                ),
                ("GET /metrics, p50", p50_of(|| self.http.get(&metrics)).await?),
                (
                    "GET /v1/sessions of one tenant, p50",
                    p50_of(|| self.http.get(&sessions).bearer_auth(&self.key)).await?,
                ),
                (
                    "an append, p50",
                    p50_of(|| {
                        let n = appends.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let body =
                            json!({"rollout_id": format!("scale-{level}-{n}"), "input": "hi", "final_output": "ok"});
                        self.http.post(&segments).bearer_auth(&self.key).json(&body)
                    })
                    .await?,
                ),
            ];
            for (metric, p50) in timed {
                figures.push(figure("scale", self.backend, case.clone(), metric, "ms", vec![p50]));
            }
        }
        Ok(figures)
    }

    /// Until no job is queued or running. Counting reads every queued row:
    /// often enough, and no more.
    pub(super) async fn wait_for_the_queue(&self) -> BenchResult<()> {
        let started = Instant::now();
        loop {
            let counts = self.server.state.store.job_counts().await?;
            if !counts.iter().any(|(_, state, n)| *n > 0 && (state == "queued" || state == "running")) {
                return Ok(());
            }
            if started.elapsed() > Duration::from_secs(1800) {
                return Err("the jobs never drained".into());
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
}

/// The median time of `SAMPLES` requests, one after another.
async fn p50_of(request: impl Fn() -> reqwest::RequestBuilder) -> BenchResult<f64> {
    let mut times = Vec::with_capacity(SAMPLES);
    for _ in 0..SAMPLES {
        let started = Instant::now();
        let res = request().send().await?;
        let status = res.status();
        res.bytes().await?;
        if !status.is_success() {
            return Err(format!("a timed request answered {status}").into());
        }
        times.push(started.elapsed().as_secs_f64() * 1000.0);
    }
    times.sort_by(f64::total_cmp);
    Ok(percentile(&times, 0.5))
}

/// A new tenant that appended one segment and closed its session.
async fn one_closed_conversation(http: &reqwest::Client, base: &str, admin: &str) -> Result<(), String> {
    let answer = |what: &str, status: reqwest::StatusCode| format!("{what} answered {status}");
    let (_, key) = super::new_tenant(http, base, admin, "scale").await.map_err(|e| e.to_string())?;
    let key = key.as_str();
    let body = json!({"rollout_id": "r", "input": "a conversation", "final_output": "ok"});
    let res = http
        .post(format!("{base}/v1/sessions/s/layouts/default/segments"))
        .bearer_auth(key)
        .json(&body)
        .send()
        .await
        .map_err(|e| e.to_string())?;
    if res.status() != 201 {
        return Err(answer("an append", res.status()));
    }
    let res =
        http.post(format!("{base}/v1/sessions/s/close")).bearer_auth(key).send().await.map_err(|e| e.to_string())?;
    if !res.status().is_success() {
        return Err(answer("a close", res.status()));
    }
    Ok(())
}
