//! The events workload (SPEC §2.8): how long a webhook delivery takes from
//! the event's commit to its receipt at 100 events a second, and whether
//! receivers that never answer slow anyone's appends or closes.

use super::{Bench, BenchResult, Figure, figure, percentile};
use axum::body::Bytes;
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A local receiver: answers 204 at once and notes each event's delay since
/// its commit (`timestamp` in the body), or never answers at all.
async fn receiver(answers: bool) -> BenchResult<(String, Arc<Mutex<Vec<f64>>>)> {
    let delays = Arc::new(Mutex::new(Vec::new()));
    let seen = delays.clone();
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(move |body: Bytes| {
            let seen = seen.clone();
            async move {
                if !answers {
                    std::future::pending::<()>().await;
                }
                let event: Value = serde_json::from_slice(&body).unwrap_or_default();
                let committed = event["timestamp"].as_str().and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok());
                if let Some(committed) = committed {
                    let delay = chrono::Utc::now().signed_duration_since(committed);
                    seen.lock().expect("not poisoned").push(delay.num_microseconds().unwrap_or(0) as f64 / 1000.0);
                }
                axum::http::StatusCode::NO_CONTENT
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}/hook", listener.local_addr()?);
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Ok((url, delays))
}

/// A local receiver that answers every request 500; how many it got.
pub(super) async fn failing_receiver() -> BenchResult<(String, Arc<std::sync::atomic::AtomicUsize>)> {
    let hits = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = hits.clone();
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(move || {
            counted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            async { axum::http::StatusCode::INTERNAL_SERVER_ERROR }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}/hook", listener.local_addr()?);
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Ok((url, hits))
}

impl Bench {
    pub(super) async fn webhook(&self, key: &str, url: &str) -> BenchResult<String> {
        let res = self
            .http
            .post(format!("{}/v1/webhooks", self.base))
            .bearer_auth(key)
            .json(&json!({"url": url}))
            .send()
            .await?;
        if res.status() != 201 {
            return Err(format!("creating a webhook answered {}", res.status()).into());
        }
        Ok(res.json::<Value>().await?["webhook_id"].as_str().ok_or("no webhook id")?.to_owned())
    }

    /// `rate` test events a second for `seconds` to one endpoint of `key`'s.
    async fn send_test_events(&self, key: &str, webhook: &str, rate: u32, seconds: u64) -> BenchResult<usize> {
        let mut ticks = tokio::time::interval(Duration::from_secs_f64(1.0 / f64::from(rate)));
        let mut sends = tokio::task::JoinSet::new();
        let until = Instant::now() + Duration::from_secs(seconds);
        while Instant::now() < until {
            ticks.tick().await;
            let request = self.http.post(format!("{}/v1/webhooks/{webhook}/test", self.base)).bearer_auth(key);
            sends.spawn(async move { request.send().await.map(|r| r.status().as_u16()).unwrap_or(0) });
        }
        let mut sent = 0;
        while let Some(status) = sends.join_next().await {
            if status.unwrap_or(0) != 202 {
                return Err("a test event was refused".into());
            }
            sent += 1;
        }
        Ok(sent)
    }

    /// Append and close latencies of `key`'s tenant: `count` one-segment
    /// sessions, each appended then closed with `wait`.
    async fn append_and_close(&self, key: &str, label: &str, count: usize) -> BenchResult<(Vec<f64>, Vec<f64>)> {
        let (mut appends, mut closes) = (Vec::new(), Vec::new());
        for i in 0..count {
            let session = format!("{label}-{i}");
            let started = Instant::now();
            let res = self
                .http
                .post(format!("{}/v1/sessions/{session}/layouts/default/segments", self.base))
                .bearer_auth(key)
                .json(&json!({"rollout_id": session, "input": "I prefer green tea.", "final_output": "noted"}))
                .send()
                .await?;
            if res.status() != 201 {
                return Err(format!("an append answered {}", res.status()).into());
            }
            appends.push(started.elapsed().as_secs_f64() * 1000.0);
            let started = Instant::now();
            let res = self
                .http
                .post(format!("{}/v1/sessions/{session}/close?wait=120", self.base))
                .bearer_auth(key)
                .send()
                .await?;
            if res.status() != 200 {
                return Err(format!("a close answered {}", res.status()).into());
            }
            closes.push(started.elapsed().as_secs_f64() * 1000.0);
        }
        appends.sort_by(f64::total_cmp);
        closes.sort_by(f64::total_cmp);
        Ok((appends, closes))
    }

    pub(super) async fn events(&self, rate: u32, seconds: u64, sessions: usize) -> BenchResult<Vec<Figure>> {
        let mut out = Vec::new();
        let case = format!("{rate} events/s for {seconds} s");
        let (mut p50s, mut p99s) = (Vec::new(), Vec::new());
        for run in 0..self.runs {
            let key = self.tenant_key(&format!("events-{run}")).await?;
            let (url, delays) = receiver(true).await?;
            let webhook = self.webhook(&key, &url).await?;
            let sent = self.send_test_events(&key, &webhook, rate, seconds).await?;
            let started = Instant::now();
            while delays.lock().expect("not poisoned").len() < sent {
                if started.elapsed() > Duration::from_secs(120) {
                    return Err(
                        format!("{} of {sent} events arrived", delays.lock().expect("not poisoned").len()).into()
                    );
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            let mut got = delays.lock().expect("not poisoned").clone();
            got.sort_by(f64::total_cmp);
            p50s.push(percentile(&got, 0.5));
            p99s.push(percentile(&got, 0.99));
        }
        out.push(figure("events", self.backend, case.clone(), "commit to receipt p50", "ms", p50s));
        out.push(figure("events", self.backend, case, "commit to receipt p99", "ms", p99s));

        // Receivers that never answer: 5 endpoints of one tenant, fed events
        // all along, while that tenant and another append and close.
        let (calm_appends, calm_closes) = self.append_and_close(&self.key, "calm", sessions).await?;
        let stuck = self.tenant_key("stuck").await?;
        let (silent, _) = receiver(false).await?;
        let mut silent_hooks = Vec::new();
        for _ in 0..5 {
            silent_hooks.push(self.webhook(&stuck, &silent).await?);
        }
        let feeding = {
            let (http, base, stuck, hooks) =
                (self.http.clone(), self.base.clone(), stuck.clone(), silent_hooks.clone());
            tokio::spawn(async move {
                let mut ticks = tokio::time::interval(Duration::from_millis(20));
                for i in 0usize.. {
                    ticks.tick().await;
                    let hook = &hooks[i % hooks.len()];
                    let _ = http.post(format!("{base}/v1/webhooks/{hook}/test")).bearer_auth(&stuck).send().await;
                }
            })
        };
        let (other_appends, other_closes) = self.append_and_close(&self.key, "beside-silent", sessions).await?;
        let (own_appends, own_closes) = self.append_and_close(&stuck, "own-silent", sessions).await?;
        feeding.abort();
        for (label, value) in [
            ("append p50, no webhooks", percentile(&calm_appends, 0.5)),
            ("append p50, another tenant's receivers never answer", percentile(&other_appends, 0.5)),
            ("append p50, its own receivers never answer", percentile(&own_appends, 0.5)),
            ("close p50, no webhooks", percentile(&calm_closes, 0.5)),
            ("close p50, another tenant's receivers never answer", percentile(&other_closes, 0.5)),
            ("close p50, its own receivers never answer", percentile(&own_closes, 0.5)),
            ("close max, no webhooks", calm_closes.last().copied().unwrap_or(f64::NAN)),
            ("close max, another tenant's receivers never answer", other_closes.last().copied().unwrap_or(f64::NAN)),
            ("close max, its own receivers never answer", own_closes.last().copied().unwrap_or(f64::NAN)),
        ] {
            out.push(figure(
                "events",
                self.backend,
                format!("{sessions} one-rollout sessions"),
                label,
                "ms",
                vec![value],
            ));
        }
        Ok(out)
    }
}
