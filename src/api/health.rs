//! Liveness and readiness.

use super::AppState;
use super::error::ApiError;
use axum::Json;
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use serde::Serialize;
use std::time::Duration;

/// `/healthz` (`ok`) and `/readyz` (`ready`).
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct Health {
    pub status: &'static str,
}

pub async fn healthz() -> Json<Health> {
    Json(Health { status: "ok" })
}

/// How long readiness waits for the database before calling it lost.
const READY_DB_TIMEOUT: Duration = Duration::from_secs(2);
/// A scrape never waits longer than this for the queue figures.
const METRICS_DB_TIMEOUT: Duration = Duration::from_secs(1);

/// Ready when the database answers, the data dir takes a write and the data
/// volume has more free space than the watermark.
pub async fn readyz(State(state): State<AppState>) -> Result<Json<Health>, ApiError> {
    let unreachable = || ApiError::Unavailable("The database is not reachable.".into());
    tokio::time::timeout(READY_DB_TIMEOUT, state.store.ping())
        .await
        .map_err(|_| unreachable())?
        .map_err(|_| unreachable())?;
    let volumes = state.volumes.clone();
    let dir = state.config.data_dir.clone();
    let (free, writable) =
        tokio::task::spawn_blocking(move || (volumes.free_bytes(), tempfile::tempfile_in(dir).is_ok()))
            .await
            .unwrap_or((Err(std::io::Error::other("the check did not run")), false));
    let floor = state.volumes.ready_floor();
    match free {
        Ok(free) if free < floor => {
            return Err(ApiError::Unavailable(format!(
                "The data volume has {free} bytes free, below the {floor} bytes it must keep."
            )));
        }
        Err(_) => return Err(ApiError::Unavailable("The data volume's free space cannot be read.".into())),
        Ok(_) => {}
    }
    if !writable {
        return Err(ApiError::Unavailable("The data dir is not writable.".into()));
    }
    Ok(Json(Health { status: "ready" }))
}

/// Prometheus text format; the job queue gauges are read from the database
/// at each scrape, so every replica reports the shared queue, and the append
/// queue's from this replica. When the database
/// does not answer within a second, the last figures read are served.
pub async fn metrics(State(state): State<AppState>) -> impl IntoResponse {
    let handle = crate::metrics::handle();
    let load = state.appends.load();
    crate::metrics::append_queue(load.waiting, load.groups_running);
    match tokio::time::timeout(METRICS_DB_TIMEOUT, state.store.job_counts()).await {
        Ok(Ok(counts)) => {
            for kind in crate::domain::job::JobKind::ALL.map(|k| k.as_str()) {
                for job_state in
                    [crate::domain::job::JobState::Queued, crate::domain::job::JobState::Running].map(|s| s.as_str())
                {
                    let count = counts.iter().find(|(k, s, _)| k == kind && s == job_state).map_or(0, |(_, _, n)| *n);
                    crate::metrics::job_queue(kind, job_state, count);
                }
            }
        }
        Ok(Err(e)) => {
            tracing::warn!(error = %crate::error_chain(&e), "reading the job queue for /metrics failed; serving the last figures")
        }
        Err(_) => tracing::warn!("the job queue did not answer within a second; serving the last figures"),
    }
    handle.run_upkeep();
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], handle.render())
}

/// The API description this binary was built with.
pub async fn openapi() -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "application/yaml")], include_str!("../../openapi.yaml"))
}
