//! The ingest service: one segment from the API to the disk and the
//! database (SPEC §2.2). The store locks the session and the rollout and says
//! where the line goes; this writes the line there and fsyncs it; the store
//! then records the rollout's new committed length and releases the lock.
//! A crash anywhere leaves the line beyond the committed length at most, and
//! that tail is cut before the next append or read.

use crate::store::{AppendOutcome, AppendRequest, AppendStart, SegmentReceipt, Store, StoreError};
use crate::workspace::{PathError, Volumes, append_durably, confine, ensure_layout};

#[derive(Debug, thiserror::Error)]
pub enum IngestError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("writing the rollout file failed")]
    Disk(#[from] std::io::Error),
    #[error("the rollout path was refused")]
    Path(#[from] PathError),
}

/// Appends one segment durably: when this returns `Appended`, the line is on
/// disk and its committed length is in the database.
pub async fn append_segment(
    store: &dyn Store,
    volumes: &Volumes,
    req: AppendRequest<'_>,
) -> Result<AppendOutcome, IngestError> {
    let slot = match store.begin_append(&req).await? {
        AppendStart::Done(outcome) => return Ok(outcome),
        AppendStart::Write(slot) => slot,
    };
    let position = slot.position().clone();
    let root = volumes.workspace_root(req.tenant_id, &position.workspace)?;
    let (layout, line, rollout_path) = (req.layout.clone(), req.segment.line.clone(), position.rollout_path.clone());
    let new_len = tokio::task::spawn_blocking(move || -> Result<u64, IngestError> {
        ensure_layout(&root, &layout)?;
        Ok(append_durably(&confine(&root, &rollout_path)?, position.committed_len, line.as_bytes())?)
    })
    .await
    .map_err(std::io::Error::other)??;
    let receipt = SegmentReceipt {
        session_id: req.session_id.clone(),
        layout: req.layout_name.clone(),
        rollout_id: req.segment.rollout_id.clone(),
        segment_index: position.segment_index,
        rollout_path: position.rollout_path,
    };
    slot.commit(new_len, &receipt).await?;
    Ok(AppendOutcome::Appended { receipt, opened_session: position.opened_session })
}
