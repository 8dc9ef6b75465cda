//! Search by meaning's rows (SPEC §2.10): each passage's vector, and each
//! layout's indexing state.

use super::{StoreResult, TenantId};
use crate::domain::ids::{LayoutName, WorkspaceName};
use async_trait::async_trait;
use chrono::{DateTime, Utc};

/// A layout of a tenant's workspace: what is indexed as one.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct IndexedLayout {
    pub tenant: TenantId,
    pub workspace: WorkspaceName,
    pub layout: LayoutName,
}

/// How far a layout's indexing is: every publish raises `generation`; the
/// vectors of what was read at `embedded_generation` are stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexState {
    /// Made with the row: a layout forgotten and published again is another epoch.
    pub epoch: String,
    pub generation: i64,
    pub embedded_generation: i64,
    pub attempts: i64,
}

impl IndexState {
    pub fn pending(&self) -> bool {
        self.embedded_generation < self.generation
    }
}

/// A passage's vector: the file it stands in (relative to the memory
/// folder), the digest of its text, the vector's little-endian f32s.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredVector {
    pub path: String,
    pub digest: String,
    pub vector: Vec<u8>,
}

/// What a publish changes of a layout's passages: for each file it writes
/// or deletes, the digests of the passages it holds afterwards (none when
/// deleted). The vectors of its other passages go with the publish.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PassageChanges {
    pub files: Vec<(String, Vec<String>)>,
}

/// What an indexing stores, read at `state`.
pub struct NewVectors<'a> {
    pub state: &'a IndexState,
    pub model: &'a str,
    pub vectors: &'a [StoredVector],
    /// Embedding tokens the indexing spent.
    pub tokens: u64,
    /// The tenant's `model_tokens_per_day`, which embedding tokens count against.
    pub token_budget: Option<u64>,
}

#[async_trait]
pub trait PassageVectorStore: Send + Sync {
    /// The layout's indexing state; `None`: never published since vectors existed.
    async fn index_state(&self, at: &IndexedLayout) -> StoreResult<Option<IndexState>>;
    /// Every vector of the layout made by `model`.
    async fn layout_vectors(&self, at: &IndexedLayout, model: &str) -> StoreResult<Vec<StoredVector>>;
    /// The `(path, digest)` of every vector of the layout made by `model`.
    async fn layout_vector_keys(&self, at: &IndexedLayout, model: &str) -> StoreResult<Vec<(String, String)>>;
    /// Vectors by `model` the tenant already has for any of `digests`, one a digest.
    async fn vectors_by_digest(
        &self,
        tenant: TenantId,
        model: &str,
        digests: &[String],
    ) -> StoreResult<Vec<(String, Vec<u8>)>>;
    /// Stores an indexing's vectors, drops the layout's vectors of passages
    /// its files no longer hold (`kept`: every `(path, digest)` read), and
    /// marks the state embedded, only while it is still the layout's latest
    /// (`false` otherwise: a publish came between, and nothing is stored).
    /// Its tokens are counted either way.
    async fn store_vectors(
        &self,
        at: &IndexedLayout,
        new: &NewVectors<'_>,
        kept: &std::collections::HashSet<(String, String)>,
    ) -> StoreResult<bool>;
    /// Embedding tokens spent on an indexing that stored nothing.
    async fn count_embedding_tokens(&self, tenant: TenantId, tokens: u64, budget: Option<u64>) -> StoreResult<()>;
    /// An indexing at `state` failed: tried again at `retry_after`.
    async fn index_failed(&self, at: &IndexedLayout, state: &IndexState, retry_after: DateTime<Utc>)
    -> StoreResult<()>;
    /// The layout's files hold passages without a vector: index it again.
    async fn mark_index_stale(&self, at: &IndexedLayout, now: DateTime<Utc>) -> StoreResult<()>;
    /// Layouts whose latest generation is not embedded and whose retry is due.
    async fn due_indexes(&self, now: DateTime<Utc>, limit: i64) -> StoreResult<Vec<IndexedLayout>>;
}
