//! A rollout's acknowledged bytes for the console, wherever the rollout
//! lives: its file's committed prefix on a volume; its object and journal
//! read as one file in a bucket (SPEC §6.1), no more of it than is shown.

use super::{Volumes, confine};
use crate::bucket::rollouts::RolloutError;
use crate::store::RolloutJournalStore;
use crate::store::journal_records::RolloutAt;
use std::io::{self, Read};

impl Volumes {
    /// The first `min(committed_len, cap)` bytes of the rollout at
    /// `rollout_path`; `None` when it is gone (forgotten meanwhile).
    pub async fn committed_prefix(
        &self,
        store: &dyn RolloutJournalStore,
        at: RolloutAt<'_>,
        rollout_path: &str,
        committed_len: u64,
        cap: u64,
    ) -> Result<Option<Vec<u8>>, RolloutError> {
        let wanted = committed_len.min(cap);
        if let Some(bucket) = self.bucket() {
            let read = match bucket.rollout_prefix(store, at, rollout_path, wanted).await {
                // Its object removed since its parts were read: forgotten meanwhile.
                Err(RolloutError::Objects(object_store::Error::NotFound { .. })) => return Ok(None),
                read => read?,
            };
            let Some(bytes) = read else { return Ok(None) };
            if (bytes.len() as u64) < wanted {
                return Err(RolloutError::Torn(format!("{} bytes of {wanted} committed", bytes.len())));
            }
            return Ok(Some(bytes));
        }
        let path = confine(&self.workspace_root(at.tenant, at.workspace)?, rollout_path)?;
        let read = tokio::task::spawn_blocking(move || -> io::Result<Vec<u8>> {
            let mut bytes = Vec::new();
            std::fs::File::open(path)?.take(wanted).read_to_end(&mut bytes)?;
            Ok(bytes)
        })
        .await
        .map_err(io::Error::other);
        match read.and_then(|r| r) {
            Ok(bytes) if bytes.len() as u64 == wanted => Ok(Some(bytes)),
            Ok(bytes) => Err(RolloutError::Torn(format!("{} bytes of {wanted} committed", bytes.len()))),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(RolloutError::Path(e.into())),
        }
    }
}
