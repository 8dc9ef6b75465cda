//! The store's queries (`queries/`) compiled for Postgres.

use sqlx::Postgres as DB;

// `on_sqlite.rs` includes the same files for SQLite: one text, two concrete
// compilations, so no body needs the bounds a generic one would.
#[allow(clippy::duplicate_mod)]
#[path = "queries/mod.rs"]
mod queries;
