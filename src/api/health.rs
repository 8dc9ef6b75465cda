//! Liveness and readiness.

use super::AppState;
use super::error::ApiError;
use axum::Json;
use axum::extract::State;
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
