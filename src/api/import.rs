//! `POST /v1/workspaces/{workspace}/import` (SPEC §2.7): the body, a gzip
//! tar, is streamed to a file beside the workspaces (never whole in memory),
//! what can be told of it at once is checked, and an `import` job is queued
//! to check the rest and place it.

use super::AppState;
use super::error::ApiError;
use crate::domain::ids::WorkspaceName;
use crate::jobs::import::{ImportError, precheck};
use crate::store::{AuthenticatedKey, ImportQueued, JobRecord, with_implicit_default};
use axum::Json;
use axum::extract::{Path, Request, State};
use axum::http::{StatusCode, header};
use http_body_util::BodyExt;
use tokio::io::AsyncWriteExt;

pub async fn import_workspace(
    key: AuthenticatedKey,
    State(state): State<AppState>,
    Path(raw_workspace): Path<String>,
    request: Request,
) -> Result<(StatusCode, Json<JobRecord>), ApiError> {
    let tenant = key.tenant_id;
    let workspace = WorkspaceName::parse(&raw_workspace).ok_or_else(|| {
        ApiError::InvalidRequest(format!(
            "workspace must match ^[A-Za-z0-9][A-Za-z0-9._-]{{0,127}}$, got: {raw_workspace}"
        ))
    })?;
    let limit = state.config.quotas.max_import_bytes;
    let too_large = || ApiError::PayloadTooLarge(format!("The archive exceeds the limit of {limit} bytes."));
    let declared = request.headers().get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if declared.is_some_and(|len| len > limit) {
        return Err(too_large());
    }
    if !state.volumes.has_room() {
        return Err(ApiError::InsufficientStorage(super::error::STORAGE_FULL.into()));
    }
    if state.store.workspace_forgetting(tenant, &workspace).await? {
        return Err(ApiError::Forgetting(format!("Workspace {workspace} is being forgotten.")));
    }
    let not_empty = || {
        ApiError::WorkspaceNotEmpty(format!(
            "Workspace {workspace} holds sessions, rollouts or memory (or an import is under way); import into an empty one."
        ))
    };
    if !state.store.workspace_empty(tenant, &workspace).await? {
        return Err(not_empty());
    }
    // The archive counts against the tenant's storage from its first byte
    // (SPEC §2.7): one that cannot fit under the limit, or on the disk, is
    // refused before it is written, or as soon as it grows past the room.
    let storage_limit = super::limits::effective_limits(&state, tenant).await?.storage_bytes.filter(|l| *l > 0);
    let quota_room = match storage_limit {
        Some(limit) => limit.saturating_sub(state.store.storage_bytes(tenant).await?.max(0) as u64),
        None => u64::MAX,
    };
    let over_quota = || {
        ApiError::QuotaExceeded(format!(
            "The archive does not fit in the {quota_room} bytes this tenant's storage limit leaves."
        ))
    };
    let disk_room = state.volumes.spare_bytes().map_err(ApiError::internal)?;
    let disk_full = || ApiError::InsufficientStorage(super::error::STORAGE_FULL.into());
    match declared {
        Some(len) if len > quota_room => return Err(over_quota()),
        Some(len) if len > disk_room => return Err(disk_full()),
        _ => {}
    }

    let job_id = uuid::Uuid::new_v4();
    let archive = state.volumes.import_archive(job_id);
    let kept = Upload { path: archive.clone(), keep: false };
    let bound = limit.min(quota_room).min(disk_room);
    let received = receive(&state, request, &archive, bound).await.map_err(|e| match e {
        Received::TooLarge if bound == limit => too_large(),
        Received::TooLarge if bound == quota_room => over_quota(),
        Received::TooLarge => disk_full(),
        Received::Slow(secs) => ApiError::RequestTimeout(format!("The body stalled for {secs} seconds.")),
        Received::Failed(e) => ApiError::internal(e),
    })?;
    let layouts = with_implicit_default(state.store.stored_layouts(tenant).await?);
    let path = archive.clone();
    let checked = tokio::task::spawn_blocking(move || precheck(&path, &layouts)).await.map_err(ApiError::internal)?;
    match checked {
        // A layout is the tenant's, in every workspace (SPEC §2.11).
        Ok(created) if !created.is_empty() && !key.scope.workspaces.is_all() => {
            return Err(ApiError::Forbidden(format!(
                "The archive's manifest brings layouts this tenant does not have ({}); only a key for every \
                 workspace may create a layout. Nothing was imported.",
                created.join(", ")
            )));
        }
        Ok(_) => {}
        Err(ImportError::Io(e)) => return Err(ApiError::internal(e)),
        Err(ImportError::Refused(message)) => {
            return Err(match message.split_once(": ") {
                Some(("layout_conflict", detail)) => ApiError::LayoutConflict(detail.to_owned()),
                Some((_, detail)) => ApiError::InvalidArchive(detail.to_owned()),
                None => ApiError::InvalidArchive(message),
            });
        }
    }
    // Where files live in a bucket the job may run on another replica: the
    // archive waits for it there, and this replica's copy goes.
    let bucket = state.volumes.bucket();
    if let Some(bucket) = bucket {
        bucket.put_archive(tenant, &workspace, job_id, &archive).await.map_err(|e| {
            tracing::warn!(error = %crate::error_chain(&e), "the object store is unavailable");
            ApiError::Unavailable("The object store is unavailable; try again shortly.".into())
        })?;
    }
    let queued = state.store.queue_import(tenant, &workspace, job_id, received, storage_limit).await;
    // Refused: its archive goes. Unknown (the database failed): the sweep
    // removes it once no job will read it.
    if let Some(bucket) = bucket
        && matches!(queued, Ok(ImportQueued::NotEmpty | ImportQueued::Forgetting | ImportQueued::OverQuota { .. }))
    {
        bucket.remove_archive(tenant, &workspace, job_id).await;
    }
    match queued? {
        ImportQueued::Job(job) => {
            if bucket.is_none() {
                kept.keep();
            }
            state.wake.notify_waiters();
            tracing::info!(%workspace, %job_id, "import queued");
            Ok((StatusCode::ACCEPTED, Json(*job)))
        }
        ImportQueued::NotEmpty => Err(not_empty()),
        ImportQueued::Forgetting => Err(ApiError::Forgetting(format!("Workspace {workspace} is being forgotten."))),
        ImportQueued::OverQuota { room } => Err(ApiError::QuotaExceeded(format!(
            "The archive's {received} bytes do not fit in the {room} bytes this tenant's storage limit leaves."
        ))),
    }
}

/// An uploaded archive, removed unless its job took it over.
struct Upload {
    path: std::path::PathBuf,
    keep: bool,
}

impl Upload {
    fn keep(mut self) {
        self.keep = true;
    }
}

impl Drop for Upload {
    fn drop(&mut self) {
        if !self.keep {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

enum Received {
    TooLarge,
    /// No bytes for this many seconds.
    Slow(u64),
    Failed(std::io::Error),
}

/// Streams the body to `path`, synced, refusing one past `limit` bytes or
/// one that stalls longer than the body timeout between chunks; the bytes received.
async fn receive(state: &AppState, request: Request, path: &std::path::Path, limit: u64) -> Result<u64, Received> {
    if let Some(dir) = path.parent() {
        tokio::fs::create_dir_all(dir).await.map_err(Received::Failed)?;
    }
    let mut file = tokio::fs::File::create(path).await.map_err(Received::Failed)?;
    let mut body = request.into_body();
    let stall = state.config.http.body_timeout;
    let mut received = 0u64;
    loop {
        let frame = match tokio::time::timeout(stall, body.frame()).await {
            Err(_) => return Err(Received::Slow(stall.as_secs())),
            Ok(None) => break,
            Ok(Some(frame)) => frame.map_err(|e| Received::Failed(std::io::Error::other(e)))?,
        };
        let Ok(data) = frame.into_data() else { continue };
        received += data.len() as u64;
        if received > limit {
            return Err(Received::TooLarge);
        }
        file.write_all(&data).await.map_err(Received::Failed)?;
    }
    file.sync_all().await.map_err(Received::Failed)?;
    Ok(received)
}
