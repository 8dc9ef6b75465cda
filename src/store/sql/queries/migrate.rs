//! The schema: sqlx's embedded migrator, adopting databases made by the
//! runner of earlier releases.

use super::*;
use sqlx::Row;
use uuid::Uuid;

/// Where releases before sqlx's migrator recorded the versions they applied.
const LEGACY_TABLE: &str = "memoryd_migrations";
impl SqlStore<DB> {
    /// Brings the schema up to date with sqlx's migrator, which checks the
    /// checksum of every migration already applied and takes its own lock
    /// so that replicas never migrate at once. A database made by the runner
    /// of releases before it has its versions marked applied first (with
    /// sqlx's checksums), so that only the newer migrations run.
    pub(super) async fn migrate(&self) -> StoreResult<()> {
        let migrator = DB::migrator();
        let legacy = sqlx::query(DB::TABLE_EXISTS).bind(LEGACY_TABLE).fetch_optional(&self.pool).await?;
        if legacy.is_some() {
            let applied = sqlx::query("SELECT max(version) AS version FROM memoryd_migrations")
                .fetch_one(&self.pool)
                .await?
                .try_get::<Option<i64>, _>("version")?;
            if let Some(applied) = applied {
                migrator.skip(&self.pool, Some(applied)).await?;
            }
            sqlx::query("DROP TABLE IF EXISTS memoryd_migrations").execute(&self.pool).await?;
        }
        migrator.run(&self.pool).await?;
        Ok(())
    }

    /// Rows indexed before `updated_at_utc` existed get it now.
    pub(super) async fn backfill_sortable_instants(&self) -> StoreResult<()> {
        let rows = sqlx::query(
            "SELECT tenant_id, workspace, layout, rollout_id, updated_at FROM raw_memories WHERE updated_at_utc IS NULL",
        )
        .fetch_all(&self.pool)
        .await?;
        for r in rows {
            sqlx::query(
                "UPDATE raw_memories SET updated_at_utc = $5
                 WHERE tenant_id = $1 AND workspace = $2 AND layout = $3 AND rollout_id = $4",
            )
            .bind(r.try_get::<Uuid, _>("tenant_id")?)
            .bind(r.try_get::<String, _>("workspace")?)
            .bind(r.try_get::<String, _>("layout")?)
            .bind(r.try_get::<String, _>("rollout_id")?)
            .bind(sortable_instant(r.try_get("updated_at")?))
            .execute(&self.pool)
            .await?;
        }
        Ok(())
    }
}
