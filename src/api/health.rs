//! Liveness and readiness.

use super::AppState;
use super::error::ApiError;
use axum::Json;
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use serde_json::{Value, json};

pub async fn healthz() -> Json<Value> {
    Json(json!({"status": "ok"}))
}

/// Ready when the database answers and the data dir takes a write.
pub async fn readyz(State(state): State<AppState>) -> Result<Json<Value>, ApiError> {
    state.store.ping().await.map_err(|_| ApiError::Unavailable("The database is not reachable.".into()))?;
    let dir = state.config.data_dir.clone();
    let writable = tokio::task::spawn_blocking(move || tempfile::tempfile_in(dir).is_ok()).await.unwrap_or(false);
    if !writable {
        return Err(ApiError::Unavailable("The data dir is not writable.".into()));
    }
    Ok(Json(json!({"status": "ready"})))
}

/// Prometheus text format; the queue gauges are read from the database at
/// each scrape, so every replica reports the shared queue.
pub async fn metrics(State(state): State<AppState>) -> impl IntoResponse {
    let handle = crate::metrics::handle();
    match state.store.job_counts().await {
        Ok(counts) => {
            for kind in ["phase_one", "phase_two"] {
                for job_state in ["queued", "running", "succeeded", "skipped", "failed"] {
                    let count = counts.iter().find(|(k, s, _)| k == kind && s == job_state).map_or(0, |(_, _, n)| *n);
                    crate::metrics::job_queue(kind, job_state, count);
                }
            }
        }
        Err(e) => tracing::warn!(error = %e, "reading the job queue for /metrics failed"),
    }
    handle.run_upkeep();
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], handle.render())
}

/// The API description this binary was built with.
pub async fn openapi() -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "application/yaml")], include_str!("../../openapi.yaml"))
}
