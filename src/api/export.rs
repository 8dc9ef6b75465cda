//! `GET /v1/workspaces/{workspace}/export` (SPEC §2.7): the workspace as a
//! streamed gzip tar. The database's view (committed lengths, index,
//! selections) is read in one snapshot, then the files are linked in one
//! snapshot of their own; the archive is written from the links on a
//! blocking thread while the response streams it, a chunk at a time.

use super::AppState;
use super::error::ApiError;
use super::extract::TenantAuth;
use crate::bucket::rollouts::RolloutError;
use crate::domain::ids::{LayoutName, RolloutId, WorkspaceName};
use crate::domain::portability::{MANIFEST_NAME, manifest};
use crate::store::journal_records::RolloutAt;
use crate::store::with_implicit_default;
use crate::workspace::archive::{ChunkSender, Snapshot, entries_taken, snapshot, write_archive};
use axum::body::{Body, Bytes};
use axum::extract::{Path, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};

/// Chunks in flight between the archive's writer and the response.
const CHUNKS_IN_FLIGHT: usize = 8;

pub async fn export_workspace(
    TenantAuth(tenant): TenantAuth,
    State(state): State<AppState>,
    Path(raw_workspace): Path<String>,
) -> Result<Response, ApiError> {
    workspace_archive(&state, tenant, &raw_workspace).await
}

/// The streamed archive of the tenant's workspace (the API's route and the
/// console's Export link).
pub(crate) async fn workspace_archive(
    state: &AppState,
    tenant: uuid::Uuid,
    raw_workspace: &str,
) -> Result<Response, ApiError> {
    let not_found = || ApiError::NotFound(format!("No workspace {raw_workspace}."));
    let workspace = WorkspaceName::parse(raw_workspace).ok_or_else(not_found)?;
    if !state.store.workspace_known(tenant, &workspace).await? {
        return Err(not_found());
    }
    let slot = state.slots.export()?;
    if state.store.workspace_forgetting(tenant, &workspace).await? {
        return Err(ApiError::Forgetting(format!("Workspace {workspace} is being forgotten.")));
    }
    let layouts = with_implicit_default(state.store.stored_layouts(tenant).await?);
    // A run whose outcome is committed is in the export whole.
    for layout in &layouts {
        super::memory::settle_publishes(state, tenant, &workspace, &layout.name).await;
    }
    let view = state.store.export_view(tenant, &workspace).await?;
    let readable = state.volumes.readable(state.store.as_ref(), tenant, &workspace).await?;
    let root = readable.root().to_owned();
    let scratch = state.volumes.export_scratch();
    let memory_dirs: Vec<String> = layouts.iter().map(|l| l.layout.memories_dir.normalized.clone()).collect();
    let mut taken = tokio::task::spawn_blocking(move || snapshot(&root, &scratch, &memory_dirs))
        .await
        .map_err(ApiError::internal)?
        .map_err(ApiError::internal)?;
    drop(readable);
    if let Some(bucket) = state.volumes.bucket() {
        taken = with_rollouts_of_the_bucket(state, bucket, tenant, &workspace, &view, taken).await?;
    }

    let (entries, exported_rollouts) = entries_taken(&taken.files, &view, &layouts);
    let document = manifest(workspace.as_str(), &layouts, &view, &exported_rollouts);
    let manifest_bytes = serde_json::to_vec_pretty(&document).map_err(ApiError::internal)?;
    tracing::info!(%workspace, files = entries.len(), rollouts = exported_rollouts.len(), "export started");

    let (sender, receiver) = tokio::sync::mpsc::channel(CHUNKS_IN_FLIGHT);
    let failures = sender.clone();
    let finished = Arc::new(AtomicBool::new(false));
    let written_whole = finished.clone();
    let stall = state.config.quotas.export_stall;
    let name = workspace.clone();
    tokio::task::spawn_blocking(move || {
        // The snapshot's links and the export's slot live until the archive is written.
        let (_links, _slot) = (taken, slot);
        let written = write_archive(ChunkSender::new(sender, stall), MANIFEST_NAME, &manifest_bytes, &entries)
            .and_then(|mut out| std::io::Write::flush(&mut out));
        match written {
            Ok(()) => written_whole.store(true, Ordering::Release),
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
            Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {
                tracing::warn!(workspace = %name, "an export's client stopped reading; the export is stopped");
            }
            Err(e) => {
                tracing::error!(error = %e, "writing an export failed; the response is cut short");
                // Sent after what is in flight: the client sees the archive cut short.
                let handle = tokio::runtime::Handle::current();
                let _ = handle.block_on(tokio::time::timeout(stall, failures.send(Err(e))));
            }
        }
    });
    let filename = format!("attachment; filename=\"{workspace}.tar.gz\"");
    let mut response = (StatusCode::OK, Body::new(ChunkBody { receiver, finished })).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/gzip"));
    if let Ok(value) = HeaderValue::from_str(&filename) {
        headers.insert(header::CONTENT_DISPOSITION, value);
    }
    Ok(response)
}

/// The snapshot with each rollout of the view added at its committed
/// length: in a bucket, a rollout is its object and journal (SPEC §6.1),
/// no file the snapshot could link. Each is streamed into the snapshot's
/// folder: no rollout is held in memory whole.
async fn with_rollouts_of_the_bucket(
    state: &AppState,
    bucket: &crate::bucket::Bucket,
    tenant: uuid::Uuid,
    workspace: &WorkspaceName,
    view: &crate::domain::portability::ExportView,
    mut taken: Snapshot,
) -> Result<Snapshot, ApiError> {
    let modified = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    for rollout in &view.rollouts {
        let (Some(layout), Some(id)) = (LayoutName::parse(&rollout.layout), RolloutId::parse(&rollout.rollout_id))
        else {
            continue;
        };
        let at = RolloutAt { tenant, workspace, layout: &layout, rollout: &id };
        let (path, len) = (&rollout.rollout_path, rollout.committed_len);
        let linked = taken.place_for(path).map_err(ApiError::from_disk)?;
        let mut file = tokio::fs::File::create(&linked).await.map_err(ApiError::from_disk)?;
        let written = match bucket.write_rollout(state.store.as_ref(), at, path, len, &mut file).await {
            // Its object removed since its parts were read: forgotten meanwhile.
            Err(RolloutError::Objects(object_store::Error::NotFound { .. })) | Ok(None) => None,
            Ok(Some(written)) if written == len => Some(written),
            Ok(Some(written)) => return Err(ApiError::internal(format!("{written} bytes of {len} committed"))),
            Err(e) => return Err(e.into()),
        };
        match written {
            Some(written) => taken.record(path, linked, written, modified),
            None => tokio::fs::remove_file(&linked).await.map_err(ApiError::internal)?,
        }
    }
    Ok(taken)
}

/// A response body fed by the archive's writer; an error, or a writer that
/// stopped before the end, ends it early, and the client sees an archive cut
/// short rather than a complete-looking one.
struct ChunkBody {
    receiver: tokio::sync::mpsc::Receiver<std::io::Result<Vec<u8>>>,
    /// Set by the writer once the whole archive is in the channel.
    finished: Arc<AtomicBool>,
}

impl http_body::Body for ChunkBody {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
        // The writer marks the end before it lets go of the channel, so
        // once the channel is closed the mark is there to see.
        self.receiver.poll_recv(cx).map(|chunk| match chunk {
            Some(c) => Some(c.map(|bytes| http_body::Frame::data(Bytes::from(bytes)))),
            None if self.finished.load(Ordering::Acquire) => None,
            None => Some(Err(std::io::Error::other("the export stopped before its end"))),
        })
    }
}
