//! Embedding what a publish leaves (SPEC §2.10 "Search by meaning"): after
//! a job publishes a layout's files, the passages without a vector are
//! embedded — reused from an identical passage the tenant already has, else
//! by the embeddings endpoint in batches — and stored under the generation
//! they were read at. A failed call fails nothing: the layout stays pending
//! and a sweep tries again with the job engine's backoff; until then those
//! passages are searched by their words. Never on a read's path.

use crate::domain::passages::is_ranked;
use crate::llm::embeddings::{BATCH_INPUTS, EmbeddingsClient, unit};
use crate::store::{DynStore, IndexedLayout, NewVectors, PassageChanges, StoredVector};
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
    client: Arc<EmbeddingsClient>,
    retry_base: Duration,
    default_limits: crate::domain::limits::Limits,
    /// Layouts being indexed by this process: one indexing each at a time.
    busy: Mutex<HashSet<IndexedLayout>>,
    permits: Arc<tokio::sync::Semaphore>,
}

impl Indexer {
    pub fn new(
        store: DynStore,
        volumes: Volumes,
        client: Arc<EmbeddingsClient>,
        retry_base: Duration,
        default_limits: crate::domain::limits::Limits,
    ) -> Self {
        let permits = Arc::new(tokio::sync::Semaphore::new(AT_ONCE));
        Self { store, volumes, client, retry_base, default_limits, busy: Mutex::default(), permits }
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
    /// was pending (or a publish came between: the next round has it).
    pub async fn index(&self, at: &IndexedLayout) -> Result<Option<IndexReport>, String> {
        let failed = |e: &crate::store::StoreError| crate::error_chain(e);
        let Some(state) = self.store.index_state(at).await.map_err(|e| failed(&e))? else { return Ok(None) };
        if !state.pending() {
            return Ok(None);
        }
        let now = Utc::now();
        if let Some(until) = self.store.model_budget_hold(at.tenant, now).await.map_err(|e| failed(&e))? {
            self.store.index_failed(at, state.generation, until).await.map_err(|e| failed(&e))?;
            return Err("the tenant's token budget of the day is spent".into());
        }
        let Some(memory_root) = self.memory_root(at).await? else {
            // The layout is gone: nothing to embed until a publish names it again.
            let later = now + chrono::Duration::days(1);
            self.store.index_failed(at, state.generation, later).await.map_err(|e| failed(&e))?;
            return Ok(None);
        };
        let files = tokio::task::spawn_blocking(move || layout_passages(None, &memory_root, ""))
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| crate::error_chain(&e))?;
        let model = self.client.model();
        let stored = self.store.layout_vectors(at, model).await.map_err(|e| failed(&e))?;
        let have: HashSet<(&str, &str)> = stored.iter().map(|v| (v.path.as_str(), v.digest.as_str())).collect();
        let mut missing: Vec<(&str, &str, &str)> = Vec::new();
        for (path, file) in &files {
            for p in &file.passages {
                let key = (path.as_str(), p.digest.as_str());
                if !have.contains(&key) && !missing.iter().any(|(a, b, _)| (*a, *b) == key) {
                    missing.push((key.0, key.1, p.passage.ranked_text.as_str()));
                }
            }
        }
        let mut report =
            IndexReport { passages: files.iter().map(|(_, f)| f.passages.len()).sum(), ..Default::default() };
        match self.vectors_for(at, &missing, &mut report).await {
            Ok(vectors) => {
                let budget = self.token_budget(at).await;
                let new = NewVectors {
                    generation: state.generation,
                    model,
                    vectors: &vectors,
                    tokens: report.tokens,
                    token_budget: budget,
                };
                let stored = self.store.store_vectors(at, &new).await.map_err(|e| failed(&e))?;
                crate::metrics::embeddings_passages("embedded", report.embedded);
                crate::metrics::embeddings_passages("reused", report.reused);
                Ok(stored.then_some(report))
            }
            Err(e) => {
                let retry = crate::jobs::backoff(state.attempts + 1, self.retry_base, e.retry_after);
                let at_time = now + chrono::Duration::from_std(retry).unwrap_or(chrono::Duration::hours(1));
                self.store.index_failed(at, state.generation, at_time).await.map_err(|e| failed(&e))?;
                Err(e.message)
            }
        }
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
        let mut texts: Vec<(&str, &str)> = Vec::new();
        for (_, digest, text) in missing {
            if !known.contains_key(*digest) && !texts.iter().any(|(d, _)| d == digest) {
                texts.push((digest, text));
            }
        }
        for batch in texts.chunks(BATCH_INPUTS) {
            let inputs: Vec<&str> = batch.iter().map(|(_, t)| *t).collect();
            let embedded = self.client.embed(&inputs, "index").await?;
            report.calls += 1;
            report.tokens += embedded.tokens;
            for ((digest, _), vector) in batch.iter().zip(embedded.vectors) {
                known.insert((*digest).to_owned(), crate::meaning::encode(&unit(vector)));
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

    /// The layout's memory folder; `None` when the layout is gone.
    async fn memory_root(&self, at: &IndexedLayout) -> Result<Option<std::path::PathBuf>, String> {
        let layouts = self.store.stored_layouts(at.tenant).await.map_err(|e| crate::error_chain(&e))?;
        let layouts = crate::store::with_implicit_default(layouts);
        let Some(layout) = crate::store::layout_named(&layouts, &at.layout) else { return Ok(None) };
        let root = self.volumes.workspace_root(at.tenant, &at.workspace).map_err(|e| e.to_string())?;
        crate::workspace::confine(&root, &layout.memories_dir.normalized).map(Some).map_err(|e| e.to_string())
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
