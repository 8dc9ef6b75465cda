//! The store's queries, written once and compiled for each database: the
//! parent module names the database `DB` (`on_postgres.rs`, `on_sqlite.rs`)
//! and includes this directory, so every body here is ordinary code over a
//! concrete type, with no bounds to repeat. One file per subject.

mod agent_memory;
mod erase;
mod events;
mod export;
mod finish;
mod forget;
mod history;
mod ingest;
mod ingest_record;
mod ingest_rollouts;
mod jobs;
mod journal;
mod layouts;
mod memory;
mod migrate;
mod sessions;
mod tenants;
mod usage;
mod vectors;
mod workspace_files;

use super::DB;
use crate::store::sql::forgotten::*;
use crate::store::sql::*;
use crate::store::{Store, StoreError, StoreResult};
use sqlx::{FromRow, Pool};

/// A connection to this database.
type DbConnection = <DB as sqlx::Database>::Connection;
/// A row this database returns.
type DbRow = <DB as sqlx::Database>::Row;

impl SqlStore<DB> {
    /// Wraps a connected pool and brings its schema up to date; where the
    /// database admits one writer, `writer` is a pool of one connection that
    /// every write transaction uses, one after another.
    pub async fn open(pool: Pool<DB>, writer: Option<Pool<DB>>) -> StoreResult<Self> {
        let writer = writer.map(|connection| OneWriter { gate: tokio::sync::Mutex::new(()), connection });
        let store = Self { pool, writer };
        store.migrate().await?;
        store.backfill_sortable_instants().await?;
        Ok(store)
    }

    async fn begin_write(&self) -> Result<WriteTx<'_, DB>, sqlx::Error> {
        match &self.writer {
            Some(writer) => {
                let gate = writer.gate.lock().await;
                Ok(WriteTx { tx: writer.connection.begin_with(DB::BEGIN_WRITE).await?, _gate: Some(gate) })
            }
            None => Ok(WriteTx { tx: self.pool.begin_with(DB::BEGIN_WRITE).await?, _gate: None }),
        }
    }
}

#[async_trait::async_trait]
impl Store for SqlStore<DB> {
    async fn ping(&self) -> StoreResult<()> {
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }

    fn one_writer(&self) -> bool {
        DB::ONE_WRITER
    }

    async fn reclaim_dead_rows(&self, floor: i64) -> StoreResult<Vec<(String, i64)>> {
        use sqlx::Row;
        let Some(dead_rows) = DB::DEAD_ROWS else { return Ok(Vec::new()) };
        let tables = serde_json::to_string(&CHURNING_TABLES).expect("names serialise");
        let rows = sqlx::query(dead_rows).bind(tables).bind(floor).fetch_all(&self.pool).await?;
        let mut vacuumed = Vec::with_capacity(rows.len());
        for row in rows {
            let (name, dead): (String, i64) = (row.try_get("name")?, row.try_get("dead")?);
            // Only names of the fixed list reach the statement.
            let Some(table) = CHURNING_TABLES.iter().find(|t| **t == name) else { continue };
            // A transaction may not hold a vacuum: the simple protocol sends it alone.
            sqlx::raw_sql(AssertSqlSafe(format!("VACUUM (ANALYZE) {table}"))).execute(&self.pool).await?;
            vacuumed.push((name, dead));
        }
        Ok(vacuumed)
    }
}

/// The tables whose rows move through states or come and go with every
/// job, append, close and delivery.
const CHURNING_TABLES: [&str; 9] = [
    "jobs",
    "job_sessions",
    "sessions",
    "session_rollouts",
    "rollouts",
    "events",
    "webhook_deliveries",
    "tenant_turns",
    "rollout_journal",
];

impl SqlStore<DB> {
    /// A row as `R`, then as the record `T`.
    pub(super) fn record<R, T>(row: &DbRow) -> StoreResult<T>
    where
        R: for<'r> FromRow<'r, DbRow>,
        T: TryFrom<R, Error = StoreError>,
    {
        T::try_from(R::from_row(row)?)
    }
}
