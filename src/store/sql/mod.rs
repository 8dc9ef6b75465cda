//! The store over SQL, written once for both databases. What differs between
//! Postgres and SQLite — how a transaction takes its locks, the migrations —
//! is the [`Dialect`] of each; the queries themselves are common SQL, one
//! file per subject in `queries/`, compiled once per database by
//! `on_postgres.rs` and `on_sqlite.rs`.

mod forgotten;
mod on_postgres;
mod on_sqlite;
mod rows;

use super::StoreError;
use sqlx::migrate::Migrator;
use sqlx::{AssertSqlSafe, Database, Pool};

/// What one database does its own way.
pub trait Dialect: Database {
    /// This backend's schema (`migrations/<dialect>/`), embedded at build time.
    fn migrator() -> &'static Migrator;
    /// Appended to a `SELECT` whose rows the transaction must hold until it
    /// ends (`FOR UPDATE`); empty where the write transaction already
    /// excludes every other writer.
    const LOCK_ROWS: &'static str;
    /// As `LOCK_ROWS`, for a query joining the table whose rows it locks,
    /// named `locked`, with rows that cannot be locked (a `VALUES` list).
    const LOCK_JOINED_ROWS: &'static str;
    /// Put after `jobs` where the queued jobs are walked by tenant: SQLite's
    /// planner, without statistics, walks `jobs_due` instead of the
    /// per-tenant index and is told which to use; Postgres needs no hint.
    const QUEUED_BY_TENANT: &'static str;
    /// The database joins `LATERAL` subqueries (a claim reads each tenant's
    /// first few queued jobs that way; otherwise it looks them up by id).
    const LATERAL: bool;
    /// The database runs `INSERT`s and `UPDATE`s inside a `WITH`: writes to
    /// several tables are then one statement, one round trip.
    const WRITING_CTES: bool;
    /// Appended to a single-table claim query: skip rows another replica is claiming.
    const SKIP_LOCKED: &'static str;
    /// Run first in a claim transaction where claims are not already
    /// serialised: it serialises them (concurrent claims would each see the
    /// other's tenant with nothing running yet, and the per-tenant share would
    /// not hold) and may relax the claim's commit, which is safe to lose.
    const CLAIM_GATE: Option<&'static str>;
    /// Starts a transaction that will write.
    const BEGIN_WRITE: &'static str;
    /// Starts a transaction whose reads all see one instant.
    const BEGIN_SNAPSHOT: &'static str;
    /// A row when the table named by `$1` exists in the current schema.
    const TABLE_EXISTS: &'static str;
    /// Makes a text `ORDER BY` compare bytes (code points), whatever the
    /// database's collation.
    const BYTE_ORDER: &'static str;
    /// A subquery of the texts of the JSON array bound as `param`.
    fn json_texts(param: &str) -> String;
    /// Joins the `session_id`s of the `job_sessions` rows it ranges over with commas.
    const SESSION_LIST: &'static str;
    /// Run in a transaction that queues or moves a layout's phase-two job, `$1`
    /// being the layout's key: closes racing on one layout then cannot both
    /// queue a waiting job. `None` where writers are serialised anyway.
    const LAYOUT_LOCK: Option<&'static str>;
    /// Run after a forget so that the database's files keep no copy of the
    /// deleted rows (SQLite: fold the WAL into the main file and truncate it).
    const AFTER_FORGET: Option<&'static str>;
    /// The tables of `$1` (a JSON array of names) in the current schema with more than
    /// `$2` dead row versions, and more than a fiftieth of their live rows:
    /// `name`, `dead`. `None` where the database keeps no dead versions.
    const DEAD_ROWS: Option<&'static str>;
    /// The database admits one writer at a time: queue writers in the process
    /// (fairly, without the busy-wait sleeps of a contended lock).
    const ONE_WRITER: bool;
}

/// A pooled connection idle at least this long is pinged before use; one
/// used more recently is known good: the pool pinged it when it came back.
const PING_AFTER_IDLE: std::time::Duration = std::time::Duration::from_secs(1);

/// The pool settings both databases share. sqlx pings every connection it
/// hands out by default: a round trip per transaction (on Postgres a wake-up
/// of its backend too, 1.5 % of the CPU an append costs), for connections a
/// busy replica returned moments ago, each after a ping already. Here only
/// one idle for a while (the database may have gone meanwhile) is pinged,
/// and one that failed it is replaced. One still counted inside a
/// transaction is never handed out: a commit that failed for want of space
/// can leave the database rolled back while the driver still counts it open,
/// and such a connection would refuse every later `BEGIN`.
pub(super) fn pool_options<DB: Database>() -> sqlx::pool::PoolOptions<DB> {
    sqlx::pool::PoolOptions::new().test_before_acquire(false).before_acquire(|conn, meta| {
        Box::pin(async move {
            if sqlx::Connection::is_in_transaction(conn) {
                return Ok(false);
            }
            Ok(meta.idle_for < PING_AFTER_IDLE || <DB::Connection as sqlx::Connection>::ping(conn).await.is_ok())
        })
    })
}

/// A store on any [`Dialect`].
pub struct SqlStore<DB: Database> {
    pool: Pool<DB>,
    /// Where the database admits one writer at a time.
    writer: Option<OneWriter<DB>>,
}

/// The queue of a database's writers, and the one connection they write on:
/// a writer at the head of the queue never waits for a connection that
/// readers hold.
struct OneWriter<DB: Database> {
    gate: tokio::sync::Mutex<()>,
    connection: Pool<DB>,
}

/// A write transaction, holding the process's write gate where the dialect has one.
struct WriteTx<'g, DB: Database> {
    tx: sqlx::Transaction<'static, DB>,
    _gate: Option<tokio::sync::MutexGuard<'g, ()>>,
}

impl<DB: Database> std::ops::Deref for WriteTx<'_, DB> {
    type Target = DB::Connection;

    fn deref(&self) -> &DB::Connection {
        &self.tx
    }
}

impl<DB: Database> std::ops::DerefMut for WriteTx<'_, DB> {
    fn deref_mut(&mut self) -> &mut DB::Connection {
        &mut self.tx
    }
}

impl<DB: Database> WriteTx<'_, DB> {
    async fn commit(self) -> Result<(), sqlx::Error> {
        self.tx.commit().await
    }
}

/// The jobs serving session `$2` of tenant `$1`: its phase-one jobs, and the
/// phase-two jobs it joined (SPEC §2.3: closes share a layout's phase two).
const SESSION_JOBS: &str = "((kind = 'phase_one' AND session_id = $2)
    OR id IN (SELECT job_id FROM job_sessions WHERE tenant_id = $1 AND session_id = $2))";

/// `SELECT` list of a job with the sessions it serves.
fn job_columns<DB: Dialect>() -> String {
    format!("jobs.*, (SELECT {} FROM job_sessions js WHERE js.job_id = jobs.id) AS sessions", DB::SESSION_LIST)
}

/// SQLSTATE of a lock wait that ran past `lock_timeout`.
const LOCK_NOT_AVAILABLE: &str = "55P03";

/// A query that must lock the rows it reads.
fn locking<DB: Dialect>(select: &str) -> AssertSqlSafe<String> {
    AssertSqlSafe(format!("{select}{}", DB::LOCK_ROWS))
}

/// `updated_at` as fixed-width UTC text that sorts as the instants do; empty
/// when it is unknown or unparseable (it then sorts after every instant).
fn sortable_instant(updated_at: &str) -> String {
    crate::domain::time::parse_rfc3339(crate::domain::pytext::py_strip(updated_at))
        .map(|t| t.format("%Y-%m-%dT%H:%M:%S%.9fZ").to_string())
        .unwrap_or_default()
}

fn corrupt(e: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt(e.to_string())
}
