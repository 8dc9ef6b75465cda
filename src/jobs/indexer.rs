//! Embedding what a publish leaves (SPEC §2.10 "Search by meaning"): after
//! a job publishes a layout's files, the passages without a vector are
//! embedded — reused from an identical passage the tenant already has, else
//! by the embeddings endpoint in batches — and stored under the generation
//! they were read at. A failed call fails nothing: the layout stays pending
//! and a sweep tries again with the job engine's backoff; until then those
//! passages are searched by their words. Never on a read's path.

use crate::domain::passages::is_ranked;
use crate::llm::embeddings::{BATCH_INPUTS, EmbeddingsClient};
use crate::store::{DynStore, IndexState, IndexedLayout, NewVectors, PassageChanges, StoredVector};
use crate::tools::passage_index::layout_passages;
use crate::workspace::Volumes;
use crate::workspace::publish::FileChanges;
use chrono::Utc;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Indexings one process runs at once: embedding is the endpoint's work,
/// and a backlog waits in the database, not in this process.
const AT_ONCE: usize = 2;
/// Layouts a sweep takes up at most.
const SWEEP_BATCH: i64 = 16;

/// Why an indexing stopped, and when to try again (`None`: the job
/// engine's backoff). An empty message: nothing went wrong, it waits.
struct Failure {
    message: String,
    retry_at: Option<chrono::DateTime<Utc>>,
    retry_after: Option<Duration>,
}

impl From<&str> for Failure {
    fn from(message: &str) -> Self {
        Self { message: message.to_owned(), retry_at: None, retry_after: None }
    }
}

impl From<crate::store::StoreError> for Failure {
    fn from(e: crate::store::StoreError) -> Self {
        Self::from(crate::error_chain(&e).as_str())
    }
}

/// What one indexing did (logged; the benchmark reports it).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct IndexReport {
    pub passages: usize,
    pub reused: usize,
    pub embedded: usize,
    pub calls: usize,
    pub tokens: u64,
}

pub struct Indexer {
    store: DynStore,
    volumes: Volumes,
    /// Completes a committed publish before the files are read.
    publisher: crate::workspace::publish::Publisher,
    client: Arc<EmbeddingsClient>,
    retry_base: Duration,
    default_limits: crate::domain::limits::Limits,
    /// Layouts being indexed by this process: one indexing each at a time.
    busy: Mutex<HashSet<IndexedLayout>>,
    permits: Arc<tokio::sync::Semaphore>,
}

impl Indexer {
    pub fn new(
        (store, volumes, publisher): (DynStore, Volumes, crate::workspace::publish::Publisher),
        client: Arc<EmbeddingsClient>,
        retry_base: Duration,
        default_limits: crate::domain::limits::Limits,
    ) -> Self {
        let permits = Arc::new(tokio::sync::Semaphore::new(AT_ONCE));
        Self { store, volumes, publisher, client, retry_base, default_limits, busy: Mutex::default(), permits }
    }

    /// A publish of `at` was recorded: index it now, beside the workers,
    /// unless this process is busy indexing (the sweep takes it up then).
    pub fn after_publish(self: &Arc<Self>, at: IndexedLayout) {
        let Ok(permit) = self.permits.clone().try_acquire_owned() else { return };
        let indexer = self.clone();
        tokio::spawn(async move {
            indexer.index_logged(&at).await;
            drop(permit);
        });
    }

    /// Takes up the layouts whose indexing is due, one after another.
    pub async fn sweep(&self) {
        let due = match self.store.due_indexes(Utc::now(), SWEEP_BATCH).await {
            Ok(due) => due,
            Err(e) => return tracing::warn!(error = %crate::error_chain(&e), "listing layouts to index failed"),
        };
        for at in due {
            let _permit = self.permits.acquire().await;
            self.index_logged(&at).await;
        }
    }

    async fn index_logged(&self, at: &IndexedLayout) {
        if !self.busy.lock().expect("not poisoned").insert(at.clone()) {
            return;
        }
        let started = std::time::Instant::now();
        let result = self.index(at).await;
        self.busy.lock().expect("not poisoned").remove(at);
        let (tenant_id, workspace, layout) = (at.tenant, at.workspace.as_str(), at.layout.as_str());
        match result {
            Ok(Some(r)) => tracing::info!(
                %tenant_id, workspace, layout, passages = r.passages, reused = r.reused, embedded = r.embedded,
                calls = r.calls, ms = started.elapsed().as_millis() as u64, "passages indexed"
            ),
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(%tenant_id, workspace, layout, error = %e, "indexing passages failed; retried later")
            }
        }
    }

    /// Embeds the passages of `at` that have no vector; `None` when nothing
    /// was pending (or a publish came between: the next round has it). A
    /// failure is recorded with the job engine's backoff, whatever failed.
    pub async fn index(&self, at: &IndexedLayout) -> Result<Option<IndexReport>, String> {
        let state = match self.store.index_state(at).await {
            Ok(Some(state)) if state.pending() => state,
            Ok(_) => return Ok(None),
            Err(e) => return Err(crate::error_chain(&e)),
        };
        let now = Utc::now();
        let failure = match self.index_at(at, &state).await {
            Ok(done) => return Ok(done),
            Err(failure) => failure,
        };
        let retry = failure.retry_at.unwrap_or_else(|| {
            let wait = crate::jobs::backoff(state.attempts + 1, self.retry_base, failure.retry_after);
            now + chrono::Duration::from_std(wait).unwrap_or(chrono::Duration::hours(1))
        });
        if let Err(e) = self.store.index_failed(at, &state, retry).await {
            tracing::warn!(error = %crate::error_chain(&e), "recording a failed indexing failed");
        }
        if failure.message.is_empty() { Ok(None) } else { Err(failure.message) }
    }

    async fn index_at(&self, at: &IndexedLayout, state: &IndexState) -> Result<Option<IndexReport>, Failure> {
        if let Some(until) = self.store.model_budget_hold(at.tenant, Utc::now()).await? {
            return Err(Failure {
                retry_at: Some(until),
                ..Failure::from("the tenant's token budget of the day is spent")
            });
        }
        let Some((readable, memory_root)) = self.memory_root(at).await.map_err(|e| Failure::from(e.as_str()))? else {
            // The layout is gone: nothing to embed until a publish names it again.
            return Err(Failure { retry_at: Some(Utc::now() + chrono::Duration::days(1)), ..Failure::from("") });
        };
        // What a publish committed but has not renamed into place yet is
        // what the layout holds: read it, never the files it replaces.
        let same_layout = |s: &crate::workspace::publish::PublishScope| {
            s.tenant == at.tenant && s.workspace == at.workspace.as_str() && s.layout == at.layout.as_str()
        };
        let owner = crate::jobs::PublishOwner::Reader;
        crate::jobs::finish_pending_publishes(self.store.as_ref(), &self.publisher, same_layout, owner).await;
        let files = tokio::task::spawn_blocking(move || layout_passages(None, &memory_root, ""))
            .await
            .map_err(|e| Failure::from(e.to_string().as_str()))?
            .map_err(|e| Failure::from(crate::error_chain(&e).as_str()))?;
        drop(readable);
        let model = self.client.model();
        let stored = self.store.layout_vector_keys(at, model).await?;
        let have: HashSet<(&str, &str)> = stored.iter().map(|(p, d)| (p.as_str(), d.as_str())).collect();
        let mut kept: HashSet<(String, String)> = HashSet::new();
        let mut missing: Vec<(&str, &str, &str)> = Vec::new();
        for (path, file) in &files {
            for p in &file.passages {
                let key = (path.as_str(), p.digest.as_str());
                if kept.insert((key.0.to_owned(), key.1.to_owned())) && !have.contains(&key) {
                    missing.push((key.0, key.1, p.passage.ranked_text.as_str()));
                }
            }
        }
        let mut report =
            IndexReport { passages: files.iter().map(|(_, f)| f.passages.len()).sum(), ..Default::default() };
        let budget = self.token_budget(at).await;
        let vectors = match self.vectors_for(at, &missing, &mut report).await {
            Ok(vectors) => vectors,
            Err(e) => {
                // Tokens of the calls that answered were spent all the same.
                self.store.count_embedding_tokens(at.tenant, report.tokens, budget).await?;
                return Err(Failure { retry_after: e.retry_after, ..Failure::from(e.message.as_str()) });
            }
        };
        let new = NewVectors { state, model, vectors: &vectors, tokens: report.tokens, token_budget: budget };
        let stored = self.store.store_vectors(at, &new, &kept).await?;
        crate::metrics::embeddings_passages("embedded", report.embedded);
        crate::metrics::embeddings_passages("reused", report.reused);
        Ok(stored.then_some(report))
    }

    /// Vectors for the `missing` passages: the tenant's own where it has one
    /// for the same text, the endpoint's for the rest.
    async fn vectors_for(
        &self,
        at: &IndexedLayout,
        missing: &[(&str, &str, &str)],
        report: &mut IndexReport,
    ) -> Result<Vec<StoredVector>, crate::llm::ModelError> {
        let digests: Vec<String> =
            missing.iter().map(|(_, d, _)| (*d).to_owned()).collect::<HashSet<_>>().into_iter().collect();
        let mut known: HashMap<String, Vec<u8>> =
            match self.store.vectors_by_digest(at.tenant, self.client.model(), &digests).await {
                Ok(found) => found.into_iter().collect(),
                Err(e) => {
                    return Err(crate::llm::ModelError {
                        class: crate::llm::FailureClass::Transient,
                        ..crate::llm::ModelError::permanent(crate::error_chain(&e))
                    });
                }
            };
        report.reused = missing.iter().filter(|(_, d, _)| known.contains_key(*d)).count();
        let mut asked: HashSet<&str> = HashSet::new();
        let texts: Vec<(&str, &str)> = missing
            .iter()
            .filter(|(_, digest, _)| !known.contains_key(*digest) && asked.insert(digest))
            .map(|(_, digest, text)| (*digest, *text))
            .collect();
        for batch in texts.chunks(BATCH_INPUTS) {
            let inputs: Vec<&str> = batch.iter().map(|(_, t)| *t).collect();
            let embedded = self.client.embed(&inputs, "index").await?;
            report.calls += 1;
            report.tokens += embedded.tokens;
            for ((digest, _), vector) in batch.iter().zip(embedded.vectors) {
                known.insert((*digest).to_owned(), crate::meaning::encode(&vector));
            }
        }
        report.embedded = missing.len() - report.reused;
        Ok(missing
            .iter()
            .filter_map(|(path, digest, _)| {
                let vector = known.get(*digest)?.clone();
                Some(StoredVector { path: (*path).to_owned(), digest: (*digest).to_owned(), vector })
            })
            .collect())
    }

    /// The layout's memory folder, readable while the first part is held;
    /// `None` when the layout is gone.
    async fn memory_root(
        &self,
        at: &IndexedLayout,
    ) -> Result<Option<(crate::bucket::cache::ReadableWorkspace, std::path::PathBuf)>, String> {
        let layouts = self.store.stored_layouts(at.tenant).await.map_err(|e| crate::error_chain(&e))?;
        let layouts = crate::store::with_implicit_default(layouts);
        let Some(layout) = crate::store::layout_named(&layouts, &at.layout) else { return Ok(None) };
        let readable = self
            .volumes
            .readable(self.store.as_ref(), at.tenant, &at.workspace)
            .await
            .map_err(|e| crate::error_chain(&e))?;
        let root = crate::workspace::confine(readable.root(), &layout.memories_dir.normalized);
        Ok(Some((readable, root.map_err(|e| e.to_string())?)))
    }

    /// The tenant's `model_tokens_per_day`, which embedding tokens count against.
    async fn token_budget(&self, at: &IndexedLayout) -> Option<u64> {
        let own = self.store.tenant_limits(at.tenant).await.ok().flatten();
        own.unwrap_or_default().over(self.default_limits).model_tokens_per_day.filter(|l| *l > 0)
    }
}

/// What a publish of `files` (relative to the workspace) changes of the
/// layout's passages under `memories_dir`: each ranked file it writes or
/// deletes, with the digests it holds afterwards.
pub fn passage_changes(memories_dir: &str, files: &FileChanges) -> PassageChanges {
    let prefix = format!("{}/", memories_dir.trim_end_matches('/'));
    let mut changes = PassageChanges::default();
    for (path, bytes) in &files.edits {
        let Some(relative) = path.strip_prefix(&prefix).filter(|p| is_ranked(p)) else { continue };
        let kept =
            bytes.as_deref().map_or_else(Vec::new, |b| crate::domain::passages::digests(&String::from_utf8_lossy(b)));
        changes.files.retain(|(p, _)| p != relative);
        changes.files.push((relative.to_owned(), kept));
    }
    changes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_publish_names_the_passages_each_ranked_file_keeps() {
        let mut files = FileChanges::default();
        files.write("memories/MEMORY.md".into(), "## Task 1\n- a\n## Task 2\n- b\n");
        files.delete("memories/rollout_summaries/r1.md".into());
        files.write("memories/raw_memories/r1.md".into(), "not ranked");
        files.write("memories/MEMORY.md".into(), "## Task 1\n- a\n");
        files.write("sessions/x.jsonl".into(), "{}");
        let changes = passage_changes("memories", &files);
        assert_eq!(changes.files.len(), 2);
        assert_eq!(changes.files[0].0, "rollout_summaries/r1.md");
        assert!(changes.files[0].1.is_empty(), "a deleted file keeps nothing");
        assert_eq!(changes.files[1].0, "MEMORY.md");
        assert_eq!(changes.files[1].1.len(), 1, "the last write of a path counts");
    }
}
