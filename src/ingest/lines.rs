//! An append group's lines, by rollout: written into the rollout files of a
//! volume and synced together, or kept in the rollouts' journal where the
//! rollouts live in an object store.

use super::{GroupResult, IngestError};
use crate::bucket::Bucket;
use crate::domain::ids::WorkspaceName;
use crate::domain::layout::ValidLayout;
use crate::store::{AppendBatch, AppendOutcome, AppendPosition, AppendRequest, AppendStart, JournalLines, TenantId};
use crate::workspace::{LineAppend, append_all_durably, confine, ensure_layout};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// One append's lines to one rollout file, which go at `position`.
pub(super) struct FileLines {
    /// The append's place in the group.
    place: usize,
    tenant: TenantId,
    /// The append's first segment to this rollout (by its place in the
    /// append): its receipt names the rollout, looked up only to journal it.
    first_segment: usize,
    root: PathBuf,
    layout: ValidLayout,
    rollout_path: String,
    offset: u64,
    /// The lines, one after another.
    bytes: Arc<str>,
}

/// An append's lines by file: the lines to one rollout in one write (a lone
/// line as it is, not copied).
pub(super) fn file_lines(place: usize, root: &Path, req: &AppendRequest, position: &AppendPosition) -> Vec<FileLines> {
    let mut files: Vec<(FileLines, Vec<Arc<str>>)> = Vec::new();
    // A rollout's path names its layout's sessions folder: one file, one path.
    let mut by_path: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
    for (n, (s, placed)) in req.segments.iter().zip(&position.places).enumerate() {
        let path = placed.receipt.rollout_path.as_str();
        match by_path.get(path) {
            Some(&at) => files[at].1.push(s.segment.line.clone()),
            None => {
                by_path.insert(path, files.len());
                let file = FileLines {
                    place,
                    tenant: req.tenant_id,
                    first_segment: n,
                    root: root.to_path_buf(),
                    layout: s.layout.clone(),
                    rollout_path: path.to_owned(),
                    offset: placed.offset,
                    bytes: s.segment.line.clone(),
                };
                files.push((file, vec![s.segment.line.clone()]));
            }
        }
    }
    files
        .into_iter()
        .map(|(mut file, lines)| {
            if lines.len() > 1 {
                file.bytes = Arc::from(lines.concat());
            }
            file
        })
        .collect()
}

/// Writes each append's lines (by its place in the group) into its layouts'
/// sessions folders and makes all of them durable together: for each file,
/// the length it should have and the one it has, or why an append's lines
/// are not durable.
pub(super) fn write_lines(files: Vec<FileLines>) -> Vec<(usize, u64, Result<u64, IngestError>)> {
    let mut results = Vec::with_capacity(files.len());
    let mut appends = Vec::with_capacity(files.len());
    let mut places = Vec::with_capacity(files.len());
    let mut ensured: Vec<(PathBuf, String, String)> = Vec::new();
    for file in files {
        let folders =
            (file.root, file.layout.sessions_dir.normalized.clone(), file.layout.memories_dir.normalized.clone());
        let ready = if ensured.contains(&folders) {
            Ok(())
        } else {
            ensure_layout(&folders.0, &file.layout).inspect(|()| ensured.push(folders.clone()))
        };
        let path = ready.and_then(|()| confine(&folders.0, &file.rollout_path));
        let end = file.offset + file.bytes.len() as u64;
        match path {
            Ok(path) => {
                appends.push(LineAppend { path, committed_len: file.offset, line: file.bytes });
                places.push((file.place, end));
            }
            Err(err) => results.push((file.place, end, Err(err.into()))),
        }
    }
    let durable = append_all_durably(&appends);
    let durable = places.into_iter().zip(durable).map(|((place, end), r)| (place, end, r.map_err(IngestError::from)));
    results.extend(durable);
    results
}

/// Where rollouts live in an object store: the group's lines are kept in
/// the rollouts' journal, in the transaction that records them (SPEC §6.1).
/// The layouts that got their first rollout in a workspace then get their
/// starting files (R-LAY-3) current before the appends are answered.
pub(super) async fn journal_group(
    mut batch: Box<dyn AppendBatch + '_>,
    bucket: &Bucket,
    store: &crate::store::DynStore,
    files: &[FileLines],
    outcomes: Vec<AppendOutcome>,
) -> GroupResult {
    let mut lines = Vec::with_capacity(files.len());
    let mut starting: Vec<(TenantId, WorkspaceName, String)> = Vec::new();
    for file in files {
        let AppendStart::Write(position) = &batch.starts()[file.place] else { continue };
        let rollout = &position.places[file.first_segment].receipt;
        let layout = (file.tenant, rollout.workspace.clone(), file.layout.memories_dir.normalized.clone());
        if file.offset == 0 && !starting.contains(&layout) {
            starting.push(layout);
        }
        lines.push(JournalLines {
            tenant: file.tenant,
            workspace: rollout.workspace.as_str().to_owned(),
            layout: rollout.layout.as_str().to_owned(),
            rollout_id: rollout.rollout_id.as_str().to_owned(),
            start_len: file.offset,
            lines: file.bytes.clone(),
        });
    }
    let recorded = match batch.journal(&lines).await {
        Ok(()) => batch.record().await,
        Err(err) => Err(err),
    };
    let committed = match recorded {
        Ok(()) => batch.commit().await,
        Err(err) => Err(err),
    };
    if let Err(err) = committed {
        return GroupResult::Failed(err);
    }
    for (tenant, workspace, memories_dir) in starting {
        if let Err(e) = bucket.add_starting_files(store.clone(), tenant, &workspace, &memories_dir).await {
            // The lines are durable; the layout's next new rollout tries again.
            tracing::warn!(error = %crate::error_chain(&e), "making a layout's starting files failed");
        }
    }
    GroupResult::Committed(outcomes)
}
