//! Postgres, the production store: appends to one rollout are serialised by a
//! row lock (`FOR UPDATE`) that every replica shares.

use super::StoreResult;
use super::sql::{Dialect, SqlStore, pool_options};
use sqlx::Postgres;
use sqlx::migrate::Migrator;
use sqlx::postgres::PgConnectOptions;
use std::str::FromStr;
use std::time::Duration;

impl Dialect for Postgres {
    fn migrator() -> &'static Migrator {
        static MIGRATOR: Migrator = sqlx::migrate!("migrations/postgres");
        &MIGRATOR
    }
    const TABLE_EXISTS: &'static str =
        "SELECT 1 AS found FROM information_schema.tables WHERE table_schema = current_schema() AND table_name = $1";
    const LOCK_ROWS: &'static str = " FOR UPDATE";
    const LOCK_JOINED_ROWS: &'static str = " FOR UPDATE OF locked";
    const BEGIN_WRITE: &'static str = "BEGIN";
    const BEGIN_SNAPSHOT: &'static str = "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY";
    const QUEUED_BY_TENANT: &'static str = "";
    const LATERAL: bool = true;
    const WRITING_CTES: bool = true;
    const SKIP_LOCKED: &'static str = " FOR UPDATE SKIP LOCKED";
    // The advisory lock keys are arbitrary; they only have to be the same for
    // every replica. A claim is a millisecond against model calls of seconds,
    // so serialising claims costs no throughput. A claim need not wait for
    // its WAL flush: one lost to a database crash leaves the job queued, and
    // the worker's finish is then refused by the token check.
    // A claim waits for the gate at most 200 ms (then it finds no job and
    // polls again): a replica frozen while waiting must not be queued to take
    // the gate the moment the server ends a frozen holder's transaction.
    const CLAIM_GATE: Option<&'static str> = Some(
        "SELECT set_config('lock_timeout', '200ms', true), pg_advisory_xact_lock(7235159010002),
                set_config('synchronous_commit', 'off', true)",
    );
    const BYTE_ORDER: &'static str = " COLLATE \"C\"";
    const ONE_WRITER: bool = false;
    const SESSION_LIST: &'static str = "string_agg(js.session_id, ',' ORDER BY js.session_id)";
    const LAYOUT_LOCK: Option<&'static str> = Some("SELECT pg_advisory_xact_lock(hashtextextended($1, 7235159010003))");
    const AFTER_FORGET: Option<&'static str> = None;
    const DEAD_ROWS: Option<&'static str> = Some(
        "SELECT relname::text AS name, n_dead_tup AS dead FROM pg_stat_user_tables
         WHERE schemaname = current_schema() AND relname::text IN (SELECT jsonb_array_elements_text(CAST($1 AS JSONB)))
           AND n_dead_tup > GREATEST($2, n_live_tup / 50)
         ORDER BY relname",
    );

    fn json_texts(param: &str) -> String {
        format!("SELECT jsonb_array_elements_text(CAST({param} AS JSONB))")
    }
}

pub type PgStore = SqlStore<Postgres>;

const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(3);

pub async fn connect(url: &str) -> StoreResult<PgStore> {
    let options = PgConnectOptions::from_str(url)?.options([("idle_in_transaction_session_timeout", "10s")]);
    // One connection first, alone: a pool that cannot connect says only that
    // it timed out, where this says why (refused, no such host, starting up).
    // Bounded as the pool's acquire is: a host that drops packets, or a
    // server that never answers, is a database not reachable yet.
    let first = tokio::time::timeout(ACQUIRE_TIMEOUT, sqlx::ConnectOptions::connect(&options)).await;
    sqlx::Connection::close(first.map_err(|_| sqlx::Error::PoolTimedOut)??).await?;
    let pool = pool_options::<Postgres>()
        .max_connections(32)
        // A lost database must answer 503 within seconds (SPEC §9), not after a long wait.
        .acquire_timeout(ACQUIRE_TIMEOUT)
        // A replica that freezes (SIGSTOP, a stalled VM) inside a transaction
        // would hold its row locks, and the claim gate, until it wakes: the
        // server ends such a transaction after a while so the others go on.
        .connect_with(options)
        .await?;
    PgStore::open(pool, None).await
}
