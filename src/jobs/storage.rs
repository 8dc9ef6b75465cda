//! The walk that keeps the storage counters true (SPEC §2.9). The counters
//! change in the transactions that change what they count, but files can
//! change behind them (a tail cut after a crash, a file an operator removed,
//! a publish two jobs raced on): every so often the volume is walked, and a
//! workspace whose bytes differ from its counter is corrected and logged.
//! Where files live in a bucket the database records what readers see: the
//! rollouts' committed lengths and the current files' bytes are the truth.

use crate::store::{DynStore, HISTORY_SCOPE, StorageScope, StoreResult};
use crate::workspace::{Volumes, folder_files};
use std::collections::BTreeMap;
use uuid::Uuid;

/// What one walk found.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Reconciled {
    /// Workspaces whose counter was corrected.
    pub corrected: usize,
    /// The bytes the counters were off by, added up (absolute values).
    pub drift: u64,
}

/// The bytes of every workspace folder on the volume, temporary files left out.
fn walk(volumes: &Volumes) -> BTreeMap<(Uuid, String), i64> {
    let mut found = BTreeMap::new();
    for (tenant, tenant_dir) in volumes.tenant_dirs() {
        let Ok(entries) = std::fs::read_dir(&tenant_dir) else { continue };
        for entry in entries.flatten() {
            let (Ok(kind), Some(name)) = (entry.file_type(), entry.file_name().to_str().map(str::to_owned)) else {
                continue;
            };
            if !kind.is_dir() {
                continue;
            }
            match folder_files(&entry.path()) {
                Ok(files) => {
                    found.insert((tenant, name), files.iter().map(|(_, meta)| meta.len() as i64).sum());
                }
                Err(e) => tracing::warn!(%tenant, error = %e, "walking a workspace for its storage failed"),
            }
        }
    }
    found
}

/// Walks the volume (where files live in a bucket: reads what the database
/// records of them) and corrects every workspace counter that differs from
/// it. A counter that changes while the walk runs is left for the next one.
pub async fn reconcile_storage(store: &DynStore, volumes: &Volumes) -> StoreResult<Reconciled> {
    let found =
        if volumes.bucket().is_some() { store.storage_as_recorded().await? } else { walked(store, volumes).await? };
    let mut report = Reconciled::default();
    for (seen, actual) in found {
        if actual == seen.bytes {
            continue;
        }
        match store.correct_storage(&seen, actual).await {
            Ok(true) => {
                report.corrected += 1;
                report.drift += seen.bytes.abs_diff(actual);
                tracing::warn!(
                    tenant_id = %seen.tenant, workspace = %seen.scope, counted = seen.bytes, found = actual,
                    "a workspace's storage counter had drifted; corrected"
                );
            }
            Ok(false) => {}
            // A tenant forgotten while the walk ran has no counters to correct.
            Err(e) => {
                tracing::info!(tenant_id = %seen.tenant, error = %crate::error_chain(&e), "correcting a storage counter failed")
            }
        }
    }
    Ok(report)
}

/// Every workspace's counter beside the bytes its folder holds on the volume.
async fn walked(store: &DynStore, volumes: &Volumes) -> StoreResult<Vec<(StorageScope, i64)>> {
    let counted: BTreeMap<(Uuid, String), StorageScope> = store
        .storage_scopes()
        .await?
        .into_iter()
        .filter(|s| s.scope != HISTORY_SCOPE)
        .map(|s| ((s.tenant, s.scope.clone()), s))
        .collect();
    let volumes = volumes.clone();
    let walked = tokio::task::spawn_blocking(move || walk(&volumes))
        .await
        .map_err(|e| crate::store::StoreError::Corrupt(format!("walking the volume panicked: {e}")))?;
    let mut scopes: Vec<&(Uuid, String)> = counted.keys().chain(walked.keys()).collect();
    scopes.sort_unstable();
    scopes.dedup();
    Ok(scopes
        .into_iter()
        .map(|key| {
            let seen = counted.get(key).cloned().unwrap_or_else(|| StorageScope {
                tenant: key.0,
                scope: key.1.clone(),
                bytes: 0,
            });
            (seen, walked.get(key).copied().unwrap_or(0))
        })
        .collect())
}
