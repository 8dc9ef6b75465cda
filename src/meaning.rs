//! Search by meaning's vectors (SPEC §2.10) as queries use them: stored as
//! little-endian f32s, held per layout in a bounded cache that a query
//! checks against the layout's indexing state (one small read), so a
//! workspace's vectors are read from the database once per publish, not
//! once per query.

use crate::store::{DynStore, IndexState, IndexedLayout, StoreResult};
use std::collections::HashMap;
use std::sync::Arc;

/// What the cache holds at most: vectors of 384 floats are 1.5 KiB, so
/// this is some 170,000 passages' worth.
const CACHE_BYTES: u64 = 256 << 20;

/// A layout's vectors by passage digest, as of one indexing state.
pub struct LayoutVectors {
    state: Option<IndexState>,
    model: String,
    pub by_digest: HashMap<String, Arc<[f32]>>,
}

/// Layouts' vectors, shared by every query of this process.
#[derive(Clone)]
pub struct VectorCache(moka::sync::Cache<IndexedLayout, Arc<LayoutVectors>>);

impl Default for VectorCache {
    fn default() -> Self {
        let weigh = |_: &IndexedLayout, v: &Arc<LayoutVectors>| {
            let bytes: usize = v.by_digest.iter().map(|(d, v)| d.len() + 4 * v.len() + 48).sum();
            u32::try_from(bytes).unwrap_or(u32::MAX)
        };
        Self(
            moka::sync::Cache::builder()
                .max_capacity(CACHE_BYTES)
                .weigher(weigh)
                .support_invalidation_closures()
                .build(),
        )
    }
}

impl VectorCache {
    /// A publish changed the layout: what the cache holds of it goes.
    pub fn forget_layout(&self, at: &IndexedLayout) {
        self.0.invalidate(at);
    }

    /// A forget of a workspace (or, `None`, the tenant): its vectors go.
    pub fn forget(&self, tenant: uuid::Uuid, workspace: Option<&crate::domain::ids::WorkspaceName>) {
        let workspace = workspace.cloned();
        let gone = move |at: &IndexedLayout, _: &Arc<LayoutVectors>| {
            at.tenant == tenant && workspace.as_ref().is_none_or(|w| *w == at.workspace)
        };
        if let Err(e) = self.0.invalidate_entries_if(gone) {
            tracing::warn!(error = %e, "dropping a forgotten workspace's cached vectors failed");
        }
    }
}

/// A vector as the database keeps it.
pub fn encode(vector: &[f32]) -> Vec<u8> {
    vector.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// A stored vector; `None` when the bytes are not whole floats.
pub fn decode(bytes: &[u8]) -> Option<Arc<[f32]>> {
    (bytes.len().is_multiple_of(4) && !bytes.is_empty())
        .then(|| bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect())
}

/// The layout's vectors by `model`, and its indexing state: from the cache
/// while the state is the one they were read at.
pub async fn layout_vectors(
    store: &DynStore,
    cache: &VectorCache,
    at: &IndexedLayout,
    model: &str,
) -> StoreResult<(Option<IndexState>, Arc<LayoutVectors>)> {
    let state = store.index_state(at).await?;
    if let Some(cached) = cache.0.get(at).filter(|c| c.state == state && c.model == model) {
        return Ok((state, cached));
    }
    let read_at = state.clone();
    let stored = store.layout_vectors(at, model).await?;
    let by_digest = stored.into_iter().filter_map(|v| Some((v.digest, decode(&v.vector)?))).collect();
    let vectors = Arc::new(LayoutVectors { state: read_at, model: model.to_owned(), by_digest });
    cache.0.insert(at.clone(), vectors.clone());
    Ok((state, vectors))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_vector_survives_the_database() {
        let v = [0.25f32, -1.5, 3.0e-8];
        assert_eq!(&*decode(&encode(&v)).unwrap(), &v);
        assert!(decode(&[1, 2, 3]).is_none() && decode(&[]).is_none());
    }
}
