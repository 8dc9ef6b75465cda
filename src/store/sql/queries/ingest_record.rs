//! A group of appends recorded: the rollouts' new committed lengths, the
//! sessions' rollouts, the idempotency keys' answers and the usage, in the
//! transaction that locked their rows (`ingest`), committed together.

use super::*;
use crate::store::*;
use chrono::{DateTime, Utc};
use std::collections::BTreeMap;

/// Journal rows one insert carries (six parameters each).
const JOURNAL_ROWS_A_STATEMENT: usize = 1_000;

/// Appends whose session and rollout rows this transaction holds.
pub(super) struct SqlAppendBatch<'s, DB: Database> {
    pub tx: WriteTx<'s, DB>,
    pub starts: Vec<AppendStart>,
    /// What the commit records of each append to be written (by request).
    pub rows: Vec<Option<AppendRows>>,
    /// The storage limits of the group's tenants that have one.
    pub storage_limits: BTreeMap<TenantId, u64>,
    pub now: DateTime<Utc>,
}

/// What one append changes once its lines are on disk.
pub(super) struct AppendRows {
    pub tenant: TenantId,
    pub workspace: String,
    pub session_id: String,
    /// Each rollout it appends to, in the order of their first segments.
    pub rollouts: Vec<RolloutUpdate>,
    pub key: Option<KeyAnswer>,
    pub segments: i64,
    /// Its lines' bytes: what the rollout files grow by.
    pub bytes: i64,
}

/// An idempotency key's answer, kept with it.
pub(super) struct KeyAnswer {
    pub key: String,
    pub answer: String,
}

/// What one append's lines make of one rollout.
pub(super) struct RolloutUpdate {
    /// The append's first segment to it.
    pub first: usize,
    pub layout: String,
    pub rollout_id: String,
    /// The file's length with the lines.
    pub new_len: i64,
    /// How many lines.
    pub segments: i64,
    /// The last line's `updated_at` and terminal state.
    pub updated_at: String,
    pub terminal_state: String,
}

#[async_trait::async_trait]
impl<'s> AppendBatch for SqlAppendBatch<'s, DB> {
    fn starts(&self) -> &[AppendStart] {
        &self.starts
    }

    async fn commit(self: Box<Self>) -> StoreResult<()> {
        self.tx.commit().await?;
        Ok(())
    }

    async fn journal(&mut self, lines: &[JournalLines]) -> StoreResult<()> {
        // One statement for the group, in chunks well under SQLite's 32,766 parameters.
        for chunk in lines.chunks(JOURNAL_ROWS_A_STATEMENT) {
            let mut insert = sqlx::QueryBuilder::<DB>::new(
                "INSERT INTO rollout_journal (tenant_id, workspace, layout, rollout_id, start_len, lines) ",
            );
            insert.push_values(chunk, |mut v, line| {
                v.push_bind(line.tenant)
                    .push_bind(line.workspace.as_str())
                    .push_bind(line.layout.as_str())
                    .push_bind(line.rollout_id.as_str())
                    .push_bind(line.start_len as i64)
                    .push_bind(line.lines.as_bytes());
            });
            insert.build().execute(&mut *self.tx).await?;
        }
        Ok(())
    }

    async fn record(&mut self) -> StoreResult<()> {
        let appends: Vec<&AppendRows> = self.rows.iter().flatten().collect();
        let lines: Vec<RecordedLine<'_>> =
            appends.iter().flat_map(|append| append.rollouts.iter().map(move |rollout| (*append, rollout))).collect();
        if lines.is_empty() {
            return Ok(());
        }
        // One statement per table for the whole group, or one for both where
        // the database can: the round trips, not the rows, are what an append costs.
        if DB::WRITING_CTES {
            record_lines_together(&mut self.tx, &lines, self.now).await?;
        } else {
            record_lines_apart(&mut self.tx, &lines, self.now).await?;
        }
        for append in &appends {
            if let Some(key) = &append.key {
                keep_answer(&mut self.tx, append, key, self.now).await?;
            }
        }
        let mut deltas: BTreeMap<TenantId, usage::UsageDelta> = BTreeMap::new();
        for append in &appends {
            let change = deltas.entry(append.tenant).or_default();
            change.segments += append.segments;
            change.bytes_ingested += append.bytes;
            change.add_storage(&append.workspace, append.bytes);
        }
        let storage = SqlStore::<DB>::count_usage_in(&mut self.tx, &deltas, self.now).await?;
        for (tenant, limit) in &self.storage_limits {
            if storage.get(tenant).is_some_and(|bytes| *bytes > 0 && *bytes as u64 > *limit) {
                return Err(StoreError::StorageRaced);
            }
        }
        Ok(())
    }
}

/// Keeps the answer of an append's key, with where the append went, so
/// that a forget finds the key: its one rollout in the key's own columns,
/// several (a batch's) listed beside it.
async fn keep_answer(
    conn: &mut DbConnection,
    append: &AppendRows,
    key: &KeyAnswer,
    now: DateTime<Utc>,
) -> StoreResult<()> {
    let single = match append.rollouts.as_slice() {
        [only] => Some(only),
        _ => None,
    };
    sqlx::query(
        "UPDATE idempotency_keys SET response = $3, workspace = $4, layout = $5, rollout_id = $6
         WHERE tenant_id = $1 AND key = $2",
    )
    .bind(append.tenant)
    .bind(key.key.as_str())
    .bind(key.answer.as_str())
    .bind(append.workspace.as_str())
    .bind(single.map(|r| r.layout.as_str()))
    .bind(single.map(|r| r.rollout_id.as_str()))
    .execute(&mut *conn)
    .await?;
    if single.is_some() {
        return Ok(());
    }
    let mut listed = sqlx::QueryBuilder::<DB>::new(
        "INSERT INTO idempotency_key_rollouts (tenant_id, key, workspace, layout, rollout_id, created_at) ",
    );
    listed.push_values(&append.rollouts, |mut v, rollout| {
        v.push_bind(append.tenant)
            .push_bind(key.key.as_str())
            .push_bind(append.workspace.as_str())
            .push_bind(rollout.layout.as_str())
            .push_bind(rollout.rollout_id.as_str())
            .push_bind(now);
    });
    // A key that expired and came back may find its old listing still there.
    listed.push(" ON CONFLICT DO NOTHING");
    listed.build().execute(&mut *conn).await?;
    Ok(())
}

/// An append, with one rollout its lines grow.
type RecordedLine<'a> = (&'a AppendRows, &'a RolloutUpdate);

/// The rollouts' new lengths and the sessions' rollouts, a statement each.
async fn record_lines_apart(
    conn: &mut DbConnection,
    lines: &[RecordedLine<'_>],
    now: DateTime<Utc>,
) -> StoreResult<()> {
    let mut update = sqlx::QueryBuilder::<DB>::new(
        "UPDATE rollouts SET committed_len = v.column5, segment_count = rollouts.segment_count + v.column8,
                last_updated_at = v.column6, last_terminal_state = v.column7, updated_at = ",
    );
    update.push_bind(now).push(" FROM (");
    update.push_values(lines, |mut v, line| bind_growth(&mut v, line));
    update.push(
        ") AS v WHERE rollouts.tenant_id = v.column1 AND rollouts.workspace = v.column2
           AND rollouts.layout = v.column3 AND rollouts.rollout_id = v.column4",
    );
    update.build().execute(&mut *conn).await?;
    let mut upsert = sqlx::QueryBuilder::<DB>::new(
        "INSERT INTO session_rollouts (tenant_id, session_id, layout, rollout_id, first_seen_at, segment_count) ",
    );
    upsert.push_values(lines, |mut v, (append, rollout)| {
        v.push_bind(append.tenant)
            .push_bind(append.session_id.as_str())
            .push_bind(rollout.layout.as_str())
            .push_bind(rollout.rollout_id.as_str())
            .push_bind(now)
            .push_bind(rollout.segments);
    });
    upsert.push(SESSION_ROLLOUT_COUNTED);
    upsert.build().execute(&mut *conn).await?;
    Ok(())
}

/// Both of [`record_lines_apart`]'s writes in one statement.
async fn record_lines_together(
    conn: &mut DbConnection,
    lines: &[RecordedLine<'_>],
    now: DateTime<Utc>,
) -> StoreResult<()> {
    let mut both = sqlx::QueryBuilder::<DB>::new(
        "WITH v (tenant_id, workspace, layout, rollout_id, committed_len, last_updated_at, last_terminal_state,
                 segments, session_id) AS (",
    );
    both.push_values(lines, |mut v, line| {
        bind_growth(&mut v, line);
        v.push_bind(line.0.session_id.as_str());
    });
    both.push(
        "), grown AS (
            UPDATE rollouts SET committed_len = v.committed_len, segment_count = rollouts.segment_count + v.segments,
                   last_updated_at = v.last_updated_at, last_terminal_state = v.last_terminal_state, updated_at = ",
    );
    both.push_bind(now).push(
        " FROM v WHERE rollouts.tenant_id = v.tenant_id AND rollouts.workspace = v.workspace
             AND rollouts.layout = v.layout AND rollouts.rollout_id = v.rollout_id)
         INSERT INTO session_rollouts (tenant_id, session_id, layout, rollout_id, first_seen_at, segment_count)
         SELECT tenant_id, session_id, layout, rollout_id, ",
    );
    both.push_bind(now).push(", segments FROM v").push(SESSION_ROLLOUT_COUNTED);
    both.build().execute(&mut *conn).await?;
    Ok(())
}

/// A rollout and what it grows to: the first eight values of either way of
/// recording the lines.
fn bind_growth(v: &mut sqlx::query_builder::Separated<'_, DB, &'static str>, (append, rollout): &RecordedLine<'_>) {
    v.push_bind(append.tenant)
        .push_bind(append.workspace.as_str())
        .push_bind(rollout.layout.as_str())
        .push_bind(rollout.rollout_id.as_str())
        .push_bind(rollout.new_len)
        .push_bind(rollout.updated_at.as_str())
        .push_bind(rollout.terminal_state.as_str())
        .push_bind(rollout.segments);
}

/// A session's rollout seen again counts the new segments.
const SESSION_ROLLOUT_COUNTED: &str = " ON CONFLICT (tenant_id, session_id, layout, rollout_id)
     DO UPDATE SET segment_count = session_rollouts.segment_count + excluded.segment_count";
