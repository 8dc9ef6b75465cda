//! Start-up sweep of temporary files that no attempt will rename any more
//! (SPEC §9: "a workspace never keeps files nobody will rename"). An attempt
//! that is re-claimed removes its own earlier files; this covers the jobs
//! that will not run again, and files of releases that did not name their
//! owner.

use crate::store::{DynStore, with_implicit_default};
use crate::workspace::publish::Publisher;
use crate::workspace::{Leftover, Volumes, confine, find_leftovers, remove_if_present};
use chrono::Utc;
use std::path::PathBuf;
use std::time::Duration;

/// A temporary file without a known owner is left alone this long: a live
/// process of an older release may still be about to rename it.
const UNOWNED_GRACE: Duration = Duration::from_secs(600);

/// Every memory folder of every tenant's workspaces on this volume.
async fn memory_folders(store: &DynStore, volumes: &Volumes) -> Vec<PathBuf> {
    let mut folders = Vec::new();
    for (tenant, tenant_dir) in volumes.tenant_dirs() {
        let layouts = match store.stored_layouts(tenant).await {
            Ok(stored) => with_implicit_default(stored),
            Err(e) => {
                tracing::warn!(%tenant, error = %crate::error_chain(&e), "reading layouts for the leftover sweep failed");
                continue;
            }
        };
        for workspace in subdirectories(&tenant_dir) {
            for layout in &layouts {
                if let Ok(memories) = confine(&workspace, &layout.layout.memories_dir.normalized) {
                    folders.push(memories);
                }
            }
        }
    }
    folders
}

fn subdirectories(dir: &std::path::Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| e.path())
        .collect()
}

async fn abandoned(store: &DynStore, leftover: &Leftover) -> bool {
    match leftover.owner.filter(|owner| !owner.is_nil()) {
        Some(job_id) => match store.job_lease_live(job_id, Utc::now()).await {
            Ok(live) => !live,
            Err(e) => {
                tracing::warn!(%job_id, error = %crate::error_chain(&e), "checking a temporary file's job failed; it stays for now");
                false
            }
        },
        None => leftover.modified.elapsed().unwrap_or_default() > UNOWNED_GRACE,
    }
}

/// Removes the temporary files under the memory folders whose job holds no
/// live lease and that no pending publish names; returns how many it removed.
pub async fn sweep(store: DynStore, volumes: Volumes, publisher: Publisher) -> usize {
    let folders = memory_folders(&store, &volumes).await;
    let found = tokio::task::spawn_blocking(move || {
        let named: std::collections::HashSet<PathBuf> =
            publisher.pending().unwrap_or_default().iter().flat_map(|m| m.staged_files()).collect();
        folders
            .iter()
            .flat_map(|f| find_leftovers(f).unwrap_or_default())
            .filter(|l| !named.contains(&l.path))
            .collect::<Vec<_>>()
    })
    .await
    .unwrap_or_default();
    let mut doomed = Vec::new();
    for leftover in found {
        if abandoned(&store, &leftover).await {
            doomed.push(leftover.path);
        }
    }
    let removed = tokio::task::spawn_blocking(move || {
        doomed
            .iter()
            .filter(|path| match remove_if_present(path) {
                Ok(()) => true,
                Err(e) => {
                    tracing::warn!(path = %path.display(), error = %crate::error_chain(&e), "removing a temporary file failed");
                    false
                }
            })
            .count()
    })
    .await
    .unwrap_or_default();
    if removed > 0 {
        tracing::info!(removed, "removed temporary files that no attempt will rename");
    }
    remove_orphaned_archives(&store, &volumes).await;
    let scratch = volumes.export_scratch();
    let stale = tokio::task::spawn_blocking(move || {
        crate::workspace::archive::remove_stale_snapshots(&scratch, STALE_EXPORT_SNAPSHOT)
    })
    .await;
    match stale {
        Ok(Ok(0)) | Err(_) => {}
        Ok(Ok(n)) => tracing::info!(removed = n, "removed export snapshots left by a process that died"),
        Ok(Err(e)) => tracing::warn!(error = %crate::error_chain(&e), "removing old export snapshots failed"),
    }
    removed
}

/// Uploaded import archives whose job will not run: cancelled (a forget of
/// their workspace or tenant), or never queued (the process died between the
/// upload and the queueing; such an archive is left alone for an hour, as an
/// upload may be arriving now).
async fn remove_orphaned_archives(store: &DynStore, volumes: &Volumes) {
    let Ok(entries) = std::fs::read_dir(volumes.imports_dir()) else { return };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(job_id) =
            name.to_str().and_then(|n| n.strip_suffix(".tar.gz")).and_then(|n| uuid::Uuid::parse_str(n).ok())
        else {
            continue;
        };
        let old = entry
            .metadata()
            .and_then(|m| m.modified())
            .is_ok_and(|t| t.elapsed().unwrap_or_default() > UNOWNED_GRACE * 6);
        match store.job_pending(job_id).await {
            Ok(false) if old => match remove_if_present(&entry.path()) {
                Ok(()) => tracing::info!(%job_id, "removed an import archive no job will read"),
                Err(e) => tracing::warn!(%job_id, error = %crate::error_chain(&e), "removing an import archive failed"),
            },
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(%job_id, error = %crate::error_chain(&e), "checking an import archive's job failed")
            }
        }
    }
}

/// An export's snapshot older than this was left by a process that died:
/// no export streams for a day.
const STALE_EXPORT_SNAPSHOT: Duration = Duration::from_secs(24 * 3600);
