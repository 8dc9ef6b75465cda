//! The embedded store for a single replica. Write transactions start with
//! `BEGIN IMMEDIATE`, which takes SQLite's one write lock: that serialises
//! appends here as the row locks do on Postgres.

use super::StoreResult;
use super::sql::{Dialect, SqlStore, pool_options};
use sqlx::Sqlite;
use sqlx::migrate::Migrator;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqliteSynchronous};
use std::str::FromStr;
use std::time::Duration;

impl Dialect for Sqlite {
    fn migrator() -> &'static Migrator {
        static MIGRATOR: Migrator = sqlx::migrate!("migrations/sqlite");
        &MIGRATOR
    }
    const TABLE_EXISTS: &'static str = "SELECT 1 AS found FROM sqlite_master WHERE type = 'table' AND name = $1";
    const LOCK_ROWS: &'static str = "";
    const LOCK_JOINED_ROWS: &'static str = "";
    const BEGIN_WRITE: &'static str = "BEGIN IMMEDIATE";
    const BEGIN_SNAPSHOT: &'static str = "BEGIN";
    const QUEUED_BY_TENANT: &'static str = " INDEXED BY jobs_queued_by_tenant";
    const LATERAL: bool = false;
    const WRITING_CTES: bool = false;
    const SKIP_LOCKED: &'static str = "";
    const CLAIM_GATE: Option<&'static str> = None;
    const BYTE_ORDER: &'static str = "";
    const ONE_WRITER: bool = true;
    const SESSION_LIST: &'static str = "group_concat(js.session_id, ',')";
    const LAYOUT_LOCK: Option<&'static str> = None;
    const AFTER_FORGET: Option<&'static str> = Some("PRAGMA wal_checkpoint(TRUNCATE)");
    // A deleted or updated row's space is reused in place: nothing to reclaim.
    const DEAD_ROWS: Option<&'static str> = None;

    fn json_texts(param: &str) -> String {
        format!("SELECT value FROM json_each({param})")
    }
}

pub type SqliteStore = SqlStore<Sqlite>;

pub async fn connect(url: &str) -> StoreResult<SqliteStore> {
    let options = SqliteConnectOptions::from_str(url)?
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        .synchronous(SqliteSynchronous::Full)
        .foreign_keys(true)
        // Deleted rows are overwritten, not just unlinked: a forget leaves no
        // copy in the file (SPEC §2.7).
        .pragma("secure_delete", "ON")
        .busy_timeout(Duration::from_secs(30));
    if let Some(dir) = options.get_filename().parent() {
        std::fs::create_dir_all(dir).map_err(|e| super::StoreError::Database(sqlx::Error::Io(e)))?;
    }
    let pool_of = |size: u32| pool_options::<Sqlite>().max_connections(size);
    let pool = pool_of(8).connect_with(options.clone()).await?;
    let writer = pool_of(1).connect_with(options).await?;
    SqliteStore::open(pool, Some(writer)).await
}
