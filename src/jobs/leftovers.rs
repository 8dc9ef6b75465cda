//! Start-up sweep of temporary files that no attempt will rename any more
//! (SPEC §9: "a workspace never keeps files nobody will rename"). An attempt
//! that is re-claimed removes its own earlier files; this covers the jobs
//! that will not run again, and files of releases that did not name their
//! owner.

use crate::store::{DynStore, with_implicit_default};
use crate::workspace::publish::Publisher;
use crate::workspace::{Leftover, Volumes, confine, find_leftovers, remove_if_present};
use chrono::Utc;
use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

/// A temporary file without a known owner is left alone this long: a live
/// process of an older release may still be about to rename it.
const UNOWNED_GRACE: Duration = Duration::from_secs(600);

/// Every workspace folder of every tenant on this volume: temporary files
/// may be anywhere in one (an import stages its conversations too).
fn workspace_folders(volumes: &Volumes) -> Vec<PathBuf> {
    volumes.tenant_dirs().into_iter().flat_map(|(_, tenant_dir)| subdirectories(&tenant_dir)).collect()
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

/// Removes the temporary files under `dirs` whose job holds no live lease
/// and that no pending publish names; returns how many it removed.
pub(super) async fn remove_abandoned(store: &DynStore, publisher: &Publisher, dirs: Vec<PathBuf>) -> usize {
    let publisher = publisher.clone();
    let found = tokio::task::spawn_blocking(move || {
        let named: std::collections::HashSet<PathBuf> =
            publisher.pending().unwrap_or_default().iter().flat_map(|m| m.staged_files()).collect();
        dirs.iter()
            .flat_map(|f| find_leftovers(f).unwrap_or_default())
            .filter(|l| !named.contains(&l.path))
            .collect::<Vec<_>>()
    })
    .await
    .unwrap_or_default();
    let mut doomed = Vec::new();
    for leftover in found {
        if abandoned(store, &leftover).await {
            doomed.push(leftover.path);
        }
    }
    tokio::task::spawn_blocking(move || {
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
    .unwrap_or_default()
}

/// The start-up sweep: temporary files no attempt will rename, uploads no
/// job will read, export snapshots of a process that died.
/// `body_timeout`: `MEMORYD_BODY_TIMEOUT_SECS`, the longest an upload under way is silent.
pub async fn sweep(store: &DynStore, volumes: &Volumes, publisher: &Publisher, body_timeout: Duration) -> usize {
    let removed = remove_abandoned(store, publisher, workspace_folders(volumes)).await;
    if removed > 0 {
        tracing::info!(removed, "removed temporary files that no attempt will rename");
    }
    remove_orphaned_archives(store, volumes, body_timeout).await;
    repair_rollout_files(store, volumes).await;
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
/// their workspace or tenant), or never queued (the process receiving it
/// died). One still arriving is written to at least every `body_timeout`
/// (a body silent longer is cut), so one untouched longer is no upload's.
pub(super) async fn remove_orphaned_archives(store: &DynStore, volumes: &Volumes, body_timeout: Duration) {
    let Ok(entries) = std::fs::read_dir(volumes.imports_dir()) else { return };
    for entry in entries.flatten() {
        let name = entry.file_name();
        // An archive, or (files in a bucket) one being fetched or an entry being uploaded.
        let job_of = |n: &str| {
            let (job, rest) = n.split_once('.')?;
            let known = rest == "tar.gz" || rest.ends_with(".download") || rest.ends_with(".entry");
            uuid::Uuid::parse_str(job).ok().filter(|_| known)
        };
        let Some(job_id) = name.to_str().and_then(job_of) else {
            continue;
        };
        let old = entry
            .metadata()
            .and_then(|m| m.modified())
            .is_ok_and(|t| t.elapsed().unwrap_or_default() > body_timeout + Duration::from_secs(5));
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

/// A rollout file written to this recently may belong to an append that has
/// not committed yet (an append commits within its request's timeouts).
const APPEND_GRACE: Duration = Duration::from_secs(120);

/// Rollout files longer than their committed length — a process killed
/// between an append's write and its commit — cut back to it, and files of
/// rollouts the database does not know (a first append that never
/// committed) removed: nothing unacknowledged stays on the volume, out of a
/// forget's reach. Returns how many files it repaired.
pub(super) async fn repair_rollout_files(store: &DynStore, volumes: &Volumes) -> usize {
    let mut repaired = 0;
    for (tenant, tenant_dir) in volumes.tenant_dirs() {
        let layouts = match store.stored_layouts(tenant).await {
            Ok(stored) => with_implicit_default(stored),
            Err(e) => {
                tracing::warn!(%tenant, error = %crate::error_chain(&e), "reading layouts for the rollout repair failed");
                continue;
            }
        };
        for workspace in crate::workspace::workspaces_in(&tenant_dir) {
            let workspace_dir = tenant_dir.join(workspace.as_str());
            let committed: HashMap<String, u64> = match store.export_view(tenant, &workspace).await {
                Ok(view) => view.rollouts.into_iter().map(|r| (r.rollout_path, r.committed_len)).collect(),
                Err(e) => {
                    tracing::warn!(%tenant, error = %crate::error_chain(&e), "reading rollouts for the repair failed");
                    continue;
                }
            };
            let sessions: Vec<String> = layouts.iter().map(|l| l.layout.sessions_dir.normalized.clone()).collect();
            let dir = workspace_dir.clone();
            repaired += tokio::task::spawn_blocking(move || cut_rollout_files(&dir, &sessions, &committed))
                .await
                .unwrap_or_default();
        }
    }
    if repaired > 0 {
        tracing::info!(repaired, "cut rollout files back to what the database committed");
    }
    repaired
}

/// Cuts each `<sessions>/<id>.jsonl` under `workspace` past its committed
/// length (none: removed), unless it was written to within the grace.
fn cut_rollout_files(workspace: &std::path::Path, sessions_dirs: &[String], committed: &HashMap<String, u64>) -> usize {
    let mut repaired = 0;
    for sessions in sessions_dirs {
        let Ok(dir) = confine(workspace, sessions) else { continue };
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let Some(name) = entry.file_name().to_str().map(str::to_owned) else { continue };
            let Ok(meta) = entry.metadata() else { continue };
            if !meta.is_file() || !name.ends_with(".jsonl") {
                continue;
            }
            let keep = committed.get(&format!("{sessions}/{name}")).copied().unwrap_or(0);
            let settled = meta.modified().is_ok_and(|t| t.elapsed().unwrap_or_default() > APPEND_GRACE);
            if meta.len() <= keep || !settled {
                continue;
            }
            let cut = if keep == 0 {
                remove_if_present(&entry.path())
            } else {
                std::fs::OpenOptions::new().write(true).open(entry.path()).and_then(|f| {
                    f.set_len(keep)?;
                    f.sync_all()
                })
            };
            match cut {
                Ok(()) => repaired += 1,
                Err(e) => tracing::warn!(error = %crate::error_chain(&e), "cutting a rollout file back failed"),
            }
        }
    }
    repaired
}
