//! The store's queries (`queries/`) compiled for SQLite.

use sqlx::Sqlite as DB;

// `on_postgres.rs` includes the same files for Postgres: one text, two concrete
// compilations, so no body needs the bounds a generic one would.
#[allow(clippy::duplicate_mod)]
#[path = "queries/mod.rs"]
mod queries;
