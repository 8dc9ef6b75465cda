//! What tenants use (SPEC §2.9): storage by scope, counters per UTC day,
//! token budgets.
//!
//! Every transaction that changes what a tenant uses adds its [`UsageDelta`] as
//! its last writes. The counter rows are the hottest a tenant has, so they
//! are held for the shortest time; and since every transaction takes them
//! last, tenants in one order and each tenant's rows in one order, no two
//! transactions wait for each other's counters in a cycle.

use super::*;
use crate::domain::usage::{ModelUse, UsageDay, day_of, next_utc_midnight};
use crate::llm::TokenUsage;
use crate::store::*;
use chrono::{DateTime, Utc};
use sqlx::Row;
use std::collections::BTreeMap;

/// What one transaction changes of one tenant's usage.
#[derive(Debug, Default)]
pub(super) struct UsageDelta {
    pub segments: i64,
    pub bytes_ingested: i64,
    pub closes: i64,
    pub runs: i64,
    /// Bytes added to (or taken from) each scope's files.
    pub storage: BTreeMap<String, i64>,
    /// Scopes whose files are all gone (a workspace forgotten).
    pub dropped_scopes: Vec<String>,
    /// The history changed: its bytes are counted again.
    pub recount_history: bool,
    /// Model calls and tokens, by the kind of job that made them.
    pub model: BTreeMap<JobKind, TokenUsage>,
    /// Tokens embedded for search by meaning (SPEC §2.10).
    pub embedding_tokens: i64,
}

impl UsageDelta {
    pub fn add_storage(&mut self, scope: &str, delta: i64) {
        *self.storage.entry(scope.to_owned()).or_default() += delta;
    }

    pub fn add_model_use(&mut self, kind: JobKind, used: TokenUsage) {
        if used != TokenUsage::default() {
            self.model.entry(kind).or_default().add(used);
        }
    }

    /// Another transaction's part of a batch written as one.
    pub fn merge(&mut self, other: UsageDelta) {
        self.segments += other.segments;
        self.bytes_ingested += other.bytes_ingested;
        self.closes += other.closes;
        self.runs += other.runs;
        for (scope, delta) in other.storage {
            self.add_storage(&scope, delta);
        }
        for scope in other.dropped_scopes {
            if !self.dropped_scopes.contains(&scope) {
                self.dropped_scopes.push(scope);
            }
        }
        self.recount_history |= other.recount_history;
        self.embedding_tokens += other.embedding_tokens;
        for (kind, used) in other.model {
            self.add_model_use(kind, used);
        }
    }
}

/// The bytes tenant `$1` keeps (every scope's) and claims for its imports
/// under way (SPEC §2.7: an archive waiting for its job counts).
pub(super) const STORAGE_OF_TENANT: &str = "SELECT CAST(
        COALESCE((SELECT SUM(bytes) FROM storage_usage WHERE tenant_id = $1), 0)
        + COALESCE((SELECT SUM(archive_bytes) FROM jobs WHERE tenant_id = $1 AND kind = 'import'
                    AND state IN ('queued', 'running')), 0) AS BIGINT) AS bytes";

const MODEL_KINDS: &str = "('phase_one', 'phase_two')";
/// The `kind` of embedding tokens in `model_usage_days` (no job kind is named so).
const EMBEDDING_KIND: &str = "embedding";

impl SqlStore<DB> {
    /// Adds the deltas (by tenant, in order) to the counters of `now`'s
    /// day; returns each tenant's storage after them. Each counter table is
    /// written by one statement for every tenant (its rows in tenant order),
    /// tables always in the same order, so that a batch of finishes or
    /// appends pays a round trip per table, not per tenant.
    pub(super) async fn count_usage_in(
        conn: &mut DbConnection,
        deltas: &BTreeMap<TenantId, UsageDelta>,
        now: DateTime<Utc>,
    ) -> StoreResult<BTreeMap<TenantId, i64>> {
        if deltas.is_empty() {
            return Ok(BTreeMap::new());
        }
        let day = day_of(now);
        for (tenant, change) in deltas {
            for scope in &change.dropped_scopes {
                sqlx::query("DELETE FROM storage_usage WHERE tenant_id = $1 AND scope = $2")
                    .bind(*tenant)
                    .bind(scope.as_str())
                    .execute(&mut *conn)
                    .await?;
            }
        }
        let changed: Vec<(TenantId, &str, i64)> = deltas
            .iter()
            .flat_map(|(tenant, change)| {
                change
                    .storage
                    .iter()
                    .filter(|(scope, delta)| **delta != 0 && !change.dropped_scopes.contains(scope))
                    .map(|(scope, delta)| (*tenant, scope.as_str(), *delta))
            })
            .collect();
        if !changed.is_empty() {
            let mut storage = sqlx::QueryBuilder::<DB>::new("INSERT INTO storage_usage (tenant_id, scope, bytes) ");
            storage.push_values(&changed, |mut row, (tenant, scope, delta)| {
                row.push_bind(*tenant).push_bind(*scope).push_bind(*delta);
            });
            storage.push(" ON CONFLICT (tenant_id, scope) DO UPDATE SET bytes = storage_usage.bytes + excluded.bytes");
            storage.build().execute(&mut *conn).await?;
        }
        for (tenant, change) in deltas {
            if change.recount_history {
                Self::recount_history_in(&mut *conn, *tenant).await?;
            }
        }
        let mut days =
            sqlx::QueryBuilder::<DB>::new("WITH counted (tenant_id, day, segments, bytes_ingested, closes, runs) AS (");
        days.push_values(deltas, |mut row, (tenant, change)| {
            row.push_bind(*tenant)
                .push_bind(day.as_str())
                .push_bind(change.segments)
                .push_bind(change.bytes_ingested)
                .push_bind(change.closes)
                .push_bind(change.runs);
        });
        // `WHERE true`: SQLite would read the `ON` of `ON CONFLICT` as a join's.
        days.push(
            ") INSERT INTO usage_days (tenant_id, day, segments, bytes_ingested, closes, runs, storage_bytes)
             SELECT tenant_id, day, segments, bytes_ingested, closes, runs,
                    (SELECT CAST(COALESCE(SUM(s.bytes), 0) AS BIGINT) FROM storage_usage s
                     WHERE s.tenant_id = counted.tenant_id)
             FROM counted WHERE true ORDER BY tenant_id
             ON CONFLICT (tenant_id, day) DO UPDATE SET
                segments = usage_days.segments + excluded.segments,
                bytes_ingested = usage_days.bytes_ingested + excluded.bytes_ingested,
                closes = usage_days.closes + excluded.closes,
                runs = usage_days.runs + excluded.runs,
                storage_bytes = excluded.storage_bytes
             RETURNING tenant_id, storage_bytes",
        );
        let mut storage = BTreeMap::new();
        for row in days.build().fetch_all(&mut *conn).await? {
            storage.insert(row.try_get("tenant_id")?, row.try_get::<Option<i64>, _>("storage_bytes")?.unwrap_or(0));
        }
        // Embedding tokens are a kind of their own in the model counters: they
        // count against the budget with the others, and an append's
        // transaction writes no more than it did before search by meaning.
        let used: Vec<(TenantId, &str, TokenUsage)> = deltas
            .iter()
            .flat_map(|(tenant, change)| {
                let embedded = (change.embedding_tokens > 0).then(|| {
                    let tokens = TokenUsage { input_tokens: change.embedding_tokens as u64, ..TokenUsage::default() };
                    (*tenant, EMBEDDING_KIND, tokens)
                });
                change.model.iter().map(|(kind, used)| (*tenant, kind.as_str(), *used)).chain(embedded)
            })
            .collect();
        if !used.is_empty() {
            let mut model = sqlx::QueryBuilder::<DB>::new(
                "INSERT INTO model_usage_days (tenant_id, day, kind, model_calls, input_tokens, output_tokens) ",
            );
            model.push_values(&used, |mut row, (tenant, kind, used)| {
                row.push_bind(*tenant)
                    .push_bind(day.as_str())
                    .push_bind(*kind)
                    .push_bind(used.calls as i64)
                    .push_bind(used.input_tokens as i64)
                    .push_bind(used.output_tokens as i64);
            });
            model.push(
                " ON CONFLICT (tenant_id, day, kind) DO UPDATE SET
                    model_calls = model_usage_days.model_calls + excluded.model_calls,
                    input_tokens = model_usage_days.input_tokens + excluded.input_tokens,
                    output_tokens = model_usage_days.output_tokens + excluded.output_tokens",
            );
            model.build().execute(&mut *conn).await?;
        }
        Ok(storage)
    }

    async fn recount_history_in(conn: &mut DbConnection, tenant: TenantId) -> StoreResult<()> {
        sqlx::query(
            "INSERT INTO storage_usage (tenant_id, scope, bytes)
                 VALUES ($1, '', (SELECT CAST(COALESCE(SUM(length(content)), 0) AS BIGINT)
                                  FROM history_blobs WHERE tenant_id = $1))
                 ON CONFLICT (tenant_id, scope) DO UPDATE SET bytes = excluded.bytes",
        )
        .bind(tenant)
        .execute(&mut *conn)
        .await?;
        Ok(())
    }

    /// Holds the tenant's model jobs until the next UTC midnight if its
    /// tokens of the day reached `limit`; otherwise ends a hold and lets
    /// the jobs it moved run now. Returns the hold's end. It locks the
    /// tenant's queued jobs, so it runs before the counters are written
    /// (every transaction takes job rows before counter rows).
    /// `uncounted`: tokens of this transaction not yet in the counters.
    pub(super) async fn enforce_token_budget_in(
        conn: &mut DbConnection,
        tenant: TenantId,
        limit: Option<u64>,
        uncounted: u64,
        now: DateTime<Utc>,
    ) -> StoreResult<Option<DateTime<Utc>>> {
        let counted: i64 = sqlx::query(
            "SELECT CAST(COALESCE(SUM(input_tokens + output_tokens), 0) AS BIGINT) AS used
                 FROM model_usage_days WHERE tenant_id = $1 AND day = $2",
        )
        .bind(tenant)
        .bind(day_of(now))
        .fetch_one(&mut *conn)
        .await?
        .try_get("used")?;
        let used = counted.max(0) as u64 + uncounted;
        match limit.filter(|l| *l > 0) {
            Some(limit) if used >= limit => {
                let until = next_utc_midnight(now);
                sqlx::query(
                    "INSERT INTO model_budget_holds (tenant_id, until) VALUES ($1, $2)
                         ON CONFLICT (tenant_id) DO UPDATE SET until = excluded.until",
                )
                .bind(tenant)
                .bind(until)
                .execute(&mut *conn)
                .await?;
                sqlx::query(AssertSqlSafe(format!(
                    "UPDATE jobs SET run_after = $2
                         WHERE tenant_id = $1 AND state = 'queued' AND kind IN {MODEL_KINDS} AND run_after < $2"
                )))
                .bind(tenant)
                .bind(until)
                .execute(&mut *conn)
                .await?;
                Ok(Some(until))
            }
            _ => {
                let ended = sqlx::query("DELETE FROM model_budget_holds WHERE tenant_id = $1 RETURNING until")
                    .bind(tenant)
                    .fetch_optional(&mut *conn)
                    .await?;
                if let Some(row) = ended {
                    let until: DateTime<Utc> = row.try_get("until")?;
                    sqlx::query(AssertSqlSafe(format!(
                        "UPDATE jobs SET run_after = $3
                             WHERE tenant_id = $1 AND state = 'queued' AND kind IN {MODEL_KINDS} AND run_after = $2"
                    )))
                    .bind(tenant)
                    .bind(until)
                    .bind(now)
                    .execute(&mut *conn)
                    .await?;
                }
                Ok(None)
            }
        }
    }

    /// Model jobs just queued for a tenant whose budget is spent wait
    /// with the others until the hold ends.
    pub(super) async fn hold_new_model_jobs_in(
        conn: &mut DbConnection,
        tenant: TenantId,
        now: DateTime<Utc>,
    ) -> StoreResult<()> {
        sqlx::query(AssertSqlSafe(format!(
            "UPDATE jobs SET run_after = (SELECT until FROM model_budget_holds WHERE tenant_id = $1)
                 WHERE tenant_id = $1 AND state = 'queued' AND kind IN {MODEL_KINDS}
                   AND run_after < (SELECT until FROM model_budget_holds WHERE tenant_id = $1 AND until > $2)"
        )))
        .bind(tenant)
        .bind(now)
        .execute(&mut *conn)
        .await?;
        Ok(())
    }
}

#[async_trait::async_trait]
impl UsageStore for SqlStore<DB> {
    async fn storage_bytes(&self, tenant: TenantId) -> StoreResult<i64> {
        let row = sqlx::query(STORAGE_OF_TENANT).bind(tenant).fetch_one(&self.pool).await?;
        Ok(row.try_get("bytes")?)
    }

    async fn usage_history(&self, tenant: TenantId, from: &str, to: &str) -> StoreResult<UsageHistory> {
        let rows = sqlx::query(
            "SELECT day, segments, bytes_ingested, closes, runs, storage_bytes FROM usage_days
             WHERE tenant_id = $1 AND day >= $2 AND day <= $3 ORDER BY day",
        )
        .bind(tenant)
        .bind(from)
        .bind(to)
        .fetch_all(&self.pool)
        .await?;
        let mut days: BTreeMap<String, UsageDay> = BTreeMap::new();
        for row in rows {
            let date: String = row.try_get("day")?;
            days.insert(
                date.clone(),
                UsageDay {
                    date,
                    segments: row.try_get("segments")?,
                    bytes_ingested: row.try_get("bytes_ingested")?,
                    closes: row.try_get("closes")?,
                    runs: row.try_get("runs")?,
                    embedding_tokens: 0,
                    storage_bytes: row.try_get("storage_bytes")?,
                    by_kind: Vec::new(),
                },
            );
        }
        let rows = sqlx::query(
            "SELECT day, kind, model_calls, input_tokens, output_tokens FROM model_usage_days
             WHERE tenant_id = $1 AND day >= $2 AND day <= $3 ORDER BY day, kind",
        )
        .bind(tenant)
        .bind(from)
        .bind(to)
        .fetch_all(&self.pool)
        .await?;
        for row in rows {
            let date: String = row.try_get("day")?;
            let day = days.entry(date.clone()).or_insert_with(|| UsageDay { date, ..UsageDay::default() });
            let kind: String = row.try_get("kind")?;
            if kind == EMBEDDING_KIND {
                day.embedding_tokens += row.try_get::<i64, _>("input_tokens")?;
                continue;
            }
            day.by_kind.push((
                kind,
                ModelUse {
                    model_calls: row.try_get("model_calls")?,
                    input_tokens: row.try_get("input_tokens")?,
                    output_tokens: row.try_get("output_tokens")?,
                },
            ));
        }
        let before = sqlx::query(
            "SELECT storage_bytes FROM usage_days WHERE tenant_id = $1 AND day < $2 AND storage_bytes IS NOT NULL
             ORDER BY day DESC LIMIT 1",
        )
        .bind(tenant)
        .bind(from)
        .fetch_optional(&self.pool)
        .await?;
        Ok(UsageHistory {
            days: days.into_values().collect(),
            storage_before: before.map(|r| r.try_get("storage_bytes")).transpose()?,
        })
    }

    async fn storage_scopes(&self) -> StoreResult<Vec<StorageScope>> {
        let rows = sqlx::query("SELECT tenant_id, scope, bytes FROM storage_usage ORDER BY tenant_id, scope")
            .fetch_all(&self.pool)
            .await?;
        rows.iter()
            .map(|row| {
                Ok(StorageScope {
                    tenant: row.try_get("tenant_id")?,
                    scope: row.try_get("scope")?,
                    bytes: row.try_get("bytes")?,
                })
            })
            .collect()
    }

    async fn storage_as_recorded(&self) -> StoreResult<Vec<(StorageScope, i64)>> {
        let mut tx = self.pool.begin_with(DB::BEGIN_SNAPSHOT).await?;
        let counted = sqlx::query("SELECT tenant_id, scope, bytes FROM storage_usage WHERE scope <> $1")
            .bind(HISTORY_SCOPE)
            .fetch_all(&mut *tx)
            .await?;
        let recorded = sqlx::query(
            "SELECT tenant_id, workspace, CAST(SUM(bytes) AS BIGINT) AS bytes FROM (
                 SELECT tenant_id, workspace, committed_len AS bytes FROM rollouts
                 UNION ALL SELECT tenant_id, workspace, bytes FROM workspace_files
             ) files GROUP BY tenant_id, workspace",
        )
        .fetch_all(&mut *tx)
        .await?;
        tx.commit().await?;
        let mut scopes: std::collections::BTreeMap<(TenantId, String), (i64, i64)> = Default::default();
        for row in &counted {
            scopes.entry((row.try_get("tenant_id")?, row.try_get("scope")?)).or_default().0 = row.try_get("bytes")?;
        }
        for row in &recorded {
            scopes.entry((row.try_get("tenant_id")?, row.try_get("workspace")?)).or_default().1 =
                row.try_get("bytes")?;
        }
        Ok(scopes
            .into_iter()
            .map(|((tenant, scope), (bytes, actual))| (StorageScope { tenant, scope, bytes }, actual))
            .collect())
    }

    async fn correct_storage(&self, seen: &StorageScope, actual: i64) -> StoreResult<bool> {
        let mut tx = self.begin_write().await?;
        let corrected = sqlx::query(
            "INSERT INTO storage_usage (tenant_id, scope, bytes) SELECT $1, $2, $4 WHERE true
             ON CONFLICT (tenant_id, scope) DO UPDATE SET bytes = excluded.bytes WHERE storage_usage.bytes = $3
             RETURNING bytes",
        )
        .bind(seen.tenant)
        .bind(seen.scope.as_str())
        .bind(seen.bytes)
        .bind(actual)
        .fetch_optional(&mut *tx)
        .await?
        .is_some();
        if corrected {
            let deltas = BTreeMap::from([(seen.tenant, UsageDelta::default())]);
            Self::count_usage_in(&mut tx, &deltas, Utc::now()).await?;
        }
        tx.commit().await?;
        Ok(corrected)
    }

    async fn recount_history(&self, tenant: TenantId) -> StoreResult<()> {
        let mut tx = self.begin_write().await?;
        let deltas = BTreeMap::from([(tenant, UsageDelta { recount_history: true, ..UsageDelta::default() })]);
        Self::count_usage_in(&mut tx, &deltas, Utc::now()).await?;
        tx.commit().await?;
        Ok(())
    }

    async fn apply_token_budget(
        &self,
        tenant: TenantId,
        limit: Option<u64>,
        now: DateTime<Utc>,
    ) -> StoreResult<Option<DateTime<Utc>>> {
        let mut tx = self.begin_write().await?;
        let held = Self::enforce_token_budget_in(&mut tx, tenant, limit, 0, now).await?;
        tx.commit().await?;
        Ok(held)
    }

    async fn model_budget_hold(&self, tenant: TenantId, now: DateTime<Utc>) -> StoreResult<Option<DateTime<Utc>>> {
        let row = sqlx::query("SELECT until FROM model_budget_holds WHERE tenant_id = $1 AND until > $2")
            .bind(tenant)
            .bind(now)
            .fetch_optional(&self.pool)
            .await?;
        Ok(row.map(|r| r.try_get("until")).transpose()?)
    }
}
