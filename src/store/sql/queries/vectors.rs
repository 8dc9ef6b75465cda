//! Search by meaning's rows (SPEC §2.10): passages' vectors and each
//! layout's indexing state. A publish raises the layout's generation and
//! drops the vectors of the passages its files no longer hold, in its
//! finish's transaction; an indexing stores what it embedded only while the
//! generation it read at is still the latest, so that a passage forgotten
//! meanwhile never comes back as a vector.

use super::*;
use crate::store::*;
use chrono::{DateTime, Utc};
use sqlx::{AssertSqlSafe, Row};

/// How a publish raises a layout's generation: always, and its retries start over.
const RAISE_ALWAYS: &str = "generation = passage_indexes.generation + 1, attempts = 0,
    retry_after = excluded.retry_after";
/// How a search that met passages without a vector does: only when nothing is pending already.
const RAISE_IF_EMBEDDED: &str = "generation = passage_indexes.generation + 1
    WHERE passage_indexes.embedded_generation >= passage_indexes.generation";

impl SqlStore<DB> {
    /// The layout's indexing state made (a new epoch, generation 1) or its
    /// generation raised as `raise` says: the layout is due for indexing.
    async fn raise_generation_in(
        tx: &mut DbConnection,
        at: &IndexedLayout,
        now: DateTime<Utc>,
        raise: &'static str,
    ) -> StoreResult<()> {
        sqlx::query(AssertSqlSafe(format!(
            "INSERT INTO passage_indexes (tenant_id, workspace, layout, epoch, generation, retry_after)
             VALUES ($1, $2, $3, $5, 1, $4)
             ON CONFLICT (tenant_id, workspace, layout) DO UPDATE SET {raise}"
        )))
        .bind(at.tenant)
        .bind(at.workspace.as_str())
        .bind(at.layout.as_str())
        .bind(now)
        .bind(uuid::Uuid::new_v4().to_string())
        .execute(&mut *tx)
        .await?;
        Ok(())
    }

    /// A publish of `at`'s files: the generation goes up (first, so that an
    /// indexing storing at the old one waits for this transaction and then
    /// stores nothing), then each changed file's vanished passages go.
    pub(super) async fn replace_passages_in(
        tx: &mut DbConnection,
        at: &IndexedLayout,
        changes: &PassageChanges,
        now: DateTime<Utc>,
    ) -> StoreResult<()> {
        Self::raise_generation_in(&mut *tx, at, now, RAISE_ALWAYS).await?;
        for (path, kept) in &changes.files {
            let kept = serde_json::to_string(kept).expect("digests serialise");
            sqlx::query(AssertSqlSafe(format!(
                "DELETE FROM passage_vectors WHERE tenant_id = $1 AND workspace = $2 AND layout = $3 AND path = $4
                   AND digest NOT IN ({})",
                DB::json_texts("$5")
            )))
            .bind(at.tenant)
            .bind(at.workspace.as_str())
            .bind(at.layout.as_str())
            .bind(path.as_str())
            .bind(kept)
            .execute(&mut *tx)
            .await?;
        }
        Ok(())
    }
}

impl SqlStore<DB> {
    /// Drops the layout's vectors of passages no file holds any more
    /// (`kept`: every passage the indexing read): what a publish that
    /// carried no passage changes (a phase one renaming a summary) left.
    async fn prune_vectors_in(
        tx: &mut DbConnection,
        at: &IndexedLayout,
        kept: &std::collections::HashSet<(String, String)>,
    ) -> StoreResult<()> {
        let rows = sqlx::query(
            "SELECT path, digest FROM passage_vectors WHERE tenant_id = $1 AND workspace = $2 AND layout = $3",
        )
        .bind(at.tenant)
        .bind(at.workspace.as_str())
        .bind(at.layout.as_str())
        .fetch_all(&mut *tx)
        .await?;
        for row in rows {
            let (path, digest): (String, String) = (row.try_get("path")?, row.try_get("digest")?);
            if kept.contains(&(path.clone(), digest.clone())) {
                continue;
            }
            sqlx::query(
                "DELETE FROM passage_vectors
                 WHERE tenant_id = $1 AND workspace = $2 AND layout = $3 AND path = $4 AND digest = $5",
            )
            .bind(at.tenant)
            .bind(at.workspace.as_str())
            .bind(at.layout.as_str())
            .bind(path)
            .bind(digest)
            .execute(&mut *tx)
            .await?;
        }
        Ok(())
    }

    async fn insert_vectors_in(tx: &mut DbConnection, at: &IndexedLayout, new: &NewVectors<'_>) -> StoreResult<()> {
        for chunk in new.vectors.chunks(100) {
            let mut insert = sqlx::QueryBuilder::<DB>::new(
                "INSERT INTO passage_vectors (tenant_id, workspace, layout, path, digest, model, vector) ",
            );
            insert.push_values(chunk, |mut row, v| {
                row.push_bind(at.tenant)
                    .push_bind(at.workspace.as_str())
                    .push_bind(at.layout.as_str())
                    .push_bind(v.path.as_str())
                    .push_bind(v.digest.as_str())
                    .push_bind(new.model)
                    .push_bind(v.vector.as_slice());
            });
            insert.push(
                " ON CONFLICT (tenant_id, workspace, layout, path, digest) DO UPDATE SET
                    model = excluded.model, vector = excluded.vector",
            );
            insert.build().execute(&mut *tx).await?;
        }
        Ok(())
    }

    /// Embedding tokens counted (the model counters' kind `embedding`) and
    /// held against the tenant's budget.
    async fn count_embedding_tokens_in(
        tx: &mut DbConnection,
        tenant: TenantId,
        tokens: u64,
        budget: Option<u64>,
        now: DateTime<Utc>,
    ) -> StoreResult<()> {
        if tokens == 0 {
            return Ok(());
        }
        if budget.is_some() {
            Self::enforce_token_budget_in(&mut *tx, tenant, budget, tokens, now).await?;
        }
        let delta = usage::UsageDelta { embedding_tokens: tokens as i64, ..Default::default() };
        Self::count_usage_in(&mut *tx, &[(tenant, delta)].into_iter().collect(), now).await?;
        Ok(())
    }
}

fn vector_of(row: &DbRow) -> StoreResult<StoredVector> {
    Ok(StoredVector { path: row.try_get("path")?, digest: row.try_get("digest")?, vector: row.try_get("vector")? })
}

#[async_trait::async_trait]
impl PassageVectorStore for SqlStore<DB> {
    async fn index_state(&self, at: &IndexedLayout) -> StoreResult<Option<IndexState>> {
        let row = sqlx::query(
            "SELECT epoch, generation, embedded_generation, attempts FROM passage_indexes
             WHERE tenant_id = $1 AND workspace = $2 AND layout = $3",
        )
        .bind(at.tenant)
        .bind(at.workspace.as_str())
        .bind(at.layout.as_str())
        .fetch_optional(&self.pool)
        .await?;
        row.map(|row| {
            Ok(IndexState {
                epoch: row.try_get("epoch")?,
                generation: row.try_get("generation")?,
                embedded_generation: row.try_get("embedded_generation")?,
                attempts: row.try_get("attempts")?,
            })
        })
        .transpose()
    }

    async fn layout_vectors(&self, at: &IndexedLayout, model: &str) -> StoreResult<Vec<StoredVector>> {
        let rows = sqlx::query(
            "SELECT path, digest, vector FROM passage_vectors
             WHERE tenant_id = $1 AND workspace = $2 AND layout = $3 AND model = $4",
        )
        .bind(at.tenant)
        .bind(at.workspace.as_str())
        .bind(at.layout.as_str())
        .bind(model)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(vector_of).collect()
    }

    async fn layout_vector_keys(&self, at: &IndexedLayout, model: &str) -> StoreResult<Vec<(String, String)>> {
        let rows = sqlx::query(
            "SELECT path, digest FROM passage_vectors
             WHERE tenant_id = $1 AND workspace = $2 AND layout = $3 AND model = $4",
        )
        .bind(at.tenant)
        .bind(at.workspace.as_str())
        .bind(at.layout.as_str())
        .bind(model)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(|row| Ok((row.try_get("path")?, row.try_get("digest")?))).collect()
    }

    async fn vectors_by_digest(
        &self,
        tenant: TenantId,
        model: &str,
        digests: &[String],
    ) -> StoreResult<Vec<(String, Vec<u8>)>> {
        if digests.is_empty() {
            return Ok(Vec::new());
        }
        let rows = sqlx::query(AssertSqlSafe(format!(
            "SELECT digest, vector FROM passage_vectors WHERE tenant_id = $1 AND model = $2 AND digest IN ({})",
            DB::json_texts("$3")
        )))
        .bind(tenant)
        .bind(model)
        .bind(serde_json::to_string(digests).expect("digests serialise"))
        .fetch_all(&self.pool)
        .await?;
        let mut found: std::collections::HashMap<String, Vec<u8>> = std::collections::HashMap::new();
        for row in &rows {
            if let std::collections::hash_map::Entry::Vacant(slot) = found.entry(row.try_get("digest")?) {
                slot.insert(row.try_get("vector")?);
            }
        }
        Ok(found.into_iter().collect())
    }

    async fn store_vectors(
        &self,
        at: &IndexedLayout,
        new: &NewVectors<'_>,
        kept: &std::collections::HashSet<(String, String)>,
    ) -> StoreResult<bool> {
        let now = Utc::now();
        let mut tx = self.begin_write().await?;
        let marked = sqlx::query(
            "UPDATE passage_indexes SET embedded_generation = generation, attempts = 0
             WHERE tenant_id = $1 AND workspace = $2 AND layout = $3 AND generation = $4 AND epoch = $5",
        )
        .bind(at.tenant)
        .bind(at.workspace.as_str())
        .bind(at.layout.as_str())
        .bind(new.state.generation)
        .bind(new.state.epoch.as_str())
        .execute(&mut *tx)
        .await?;
        let current = marked.rows_affected() > 0;
        if current {
            Self::prune_vectors_in(&mut tx, at, kept).await?;
            Self::insert_vectors_in(&mut tx, at, new).await?;
        }
        Self::count_embedding_tokens_in(&mut tx, at.tenant, new.tokens, new.token_budget, now).await?;
        tx.commit().await?;
        Ok(current)
    }

    async fn count_embedding_tokens(&self, tenant: TenantId, tokens: u64, budget: Option<u64>) -> StoreResult<()> {
        if tokens == 0 {
            return Ok(());
        }
        let mut tx = self.begin_write().await?;
        Self::count_embedding_tokens_in(&mut tx, tenant, tokens, budget, Utc::now()).await?;
        tx.commit().await?;
        Ok(())
    }

    async fn index_failed(
        &self,
        at: &IndexedLayout,
        state: &IndexState,
        retry_after: DateTime<Utc>,
    ) -> StoreResult<()> {
        let mut tx = self.begin_write().await?;
        sqlx::query(
            "UPDATE passage_indexes SET attempts = attempts + 1, retry_after = $5
             WHERE tenant_id = $1 AND workspace = $2 AND layout = $3 AND generation = $4 AND epoch = $6",
        )
        .bind(at.tenant)
        .bind(at.workspace.as_str())
        .bind(at.layout.as_str())
        .bind(state.generation)
        .bind(retry_after)
        .bind(state.epoch.as_str())
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }

    async fn mark_index_stale(&self, at: &IndexedLayout, now: DateTime<Utc>) -> StoreResult<()> {
        let mut tx = self.begin_write().await?;
        Self::raise_generation_in(&mut tx, at, now, RAISE_IF_EMBEDDED).await?;
        tx.commit().await?;
        Ok(())
    }

    async fn due_indexes(&self, now: DateTime<Utc>, limit: i64) -> StoreResult<Vec<IndexedLayout>> {
        let rows = sqlx::query(
            "SELECT tenant_id, workspace, layout FROM passage_indexes
             WHERE embedded_generation < generation AND retry_after <= $1 ORDER BY retry_after LIMIT $2",
        )
        .bind(now)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|row| {
                Ok(IndexedLayout {
                    tenant: row.try_get("tenant_id")?,
                    workspace: parse_id(WorkspaceName::parse, row.try_get("workspace")?, "workspace")?,
                    layout: parse_id(LayoutName::parse, row.try_get("layout")?, "layout name")?,
                })
            })
            .collect()
    }
}
