//! Tenants and their API keys.

use super::*;
use crate::domain::key_scope::{KeyScope, Permissions, Workspaces};
use crate::store::StoreError;
use crate::store::{
    ApiKeyRecord, AuthenticatedKey, KeyCreated, NewApiKey, PageRequest, TENANT_DELETING, Tenant, TenantId, TenantStore,
    TenantSummary,
};
use chrono::Utc;
use sqlx::Row;
use uuid::Uuid;

/// The insert of a key, its rows given by `source` over `$1`…`$9`: id,
/// tenant, hash, created, name, workspaces, permissions, expiry, maker.
fn insert_key<'q>(key: &'q NewApiKey, source: &str) -> sqlx::query::Query<'q, DB, <DB as sqlx::Database>::Arguments> {
    sqlx::query(AssertSqlSafe(format!(
        "INSERT INTO api_keys (id, tenant_id, key_hash, created_at, name, workspaces, permissions, expires_at, created_by)
         {source}"
    )))
    .bind(key.key_id)
    .bind(key.tenant_id)
    .bind(key.key_hash.as_str())
    .bind(Utc::now())
    .bind(key.name.as_deref())
    .bind(key.scope.workspaces.stored())
    .bind(key.scope.permissions.stored())
    .bind(key.scope.expires_at)
    .bind(key.created_by)
}

/// Rounds of a revocation's sweep for keys made while it ran.
const MAX_REVOKE_ROUNDS: usize = 16;

/// Revokes the key (live, when `live_root`), every key it made and theirs,
/// walking through keys revoked already; the number of keys it revoked.
async fn revoke_made_by(
    conn: &mut DbConnection,
    tenant: Option<TenantId>,
    key_id: Uuid,
    live_root: bool,
) -> StoreResult<usize> {
    let root_live = if live_root { " AND revoked_at IS NULL" } else { "" };
    let revoked = sqlx::query(AssertSqlSafe(format!(
        "WITH RECURSIVE made(id) AS (
             SELECT id FROM api_keys WHERE id = $1 AND ($3 IS NULL OR tenant_id = $3){root_live}
             UNION
             SELECT k.id FROM api_keys k JOIN made m ON k.created_by = m.id
         )
         UPDATE api_keys SET revoked_at = $2 WHERE id IN (SELECT id FROM made) AND revoked_at IS NULL RETURNING id"
    )))
    .bind(key_id)
    .bind(Utc::now())
    .bind(tenant)
    .fetch_all(&mut *conn)
    .await?;
    Ok(revoked.len())
}

const KEY_COLUMNS: &str = "id, name, workspaces, permissions, expires_at, created_at, created_by";

fn key_record(row: &<DB as sqlx::Database>::Row) -> StoreResult<ApiKeyRecord> {
    Ok(ApiKeyRecord {
        key_id: row.try_get("id")?,
        name: row.try_get("name")?,
        scope: scope_of(row)?,
        created_at: row.try_get("created_at")?,
        created_by: row.try_get("created_by")?,
    })
}

fn scope_of(row: &<DB as sqlx::Database>::Row) -> StoreResult<KeyScope> {
    let workspaces: String = row.try_get("workspaces")?;
    let permissions: String = row.try_get("permissions")?;
    Ok(KeyScope {
        workspaces: Workspaces::from_stored(&workspaces)
            .ok_or_else(|| StoreError::Corrupt(format!("key workspaces {workspaces:?}")))?,
        permissions: Permissions::from_stored(&permissions)
            .ok_or_else(|| StoreError::Corrupt(format!("key permissions {permissions:?}")))?,
        expires_at: row.try_get("expires_at")?,
    })
}

#[async_trait::async_trait]
impl TenantStore for SqlStore<DB> {
    async fn create_tenant(&self, name: &str, key: &NewApiKey) -> StoreResult<Tenant> {
        let now = Utc::now();
        let mut tx = self.begin_write().await?;
        sqlx::query("INSERT INTO tenants (id, name, created_at) VALUES ($1, $2, $3)")
            .bind(key.tenant_id)
            .bind(name)
            .bind(now)
            .execute(&mut *tx)
            .await?;
        insert_key(key, "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)").execute(&mut *tx).await?;
        tx.commit().await?;
        Ok(Tenant { tenant_id: key.tenant_id, name: name.to_owned(), created_at: now })
    }

    async fn create_api_key(&self, key: &NewApiKey, max_keys: u64) -> StoreResult<KeyCreated> {
        // An explicit transaction: its commit reports a failure that an
        // autocommit `RETURNING` statement on SQLite would not. The tenant's
        // row and the maker's are held (Postgres; SQLite has one writer), so
        // that concurrent creations cannot pass the cap together and a key
        // being revoked makes no more keys.
        let mut tx = self.begin_write().await?;
        let tenant = sqlx::query(AssertSqlSafe(format!(
            "SELECT id FROM tenants WHERE id = $1 AND deleting_at IS NULL{}",
            DB::LOCK_ROWS
        )))
        .bind(key.tenant_id)
        .fetch_optional(&mut *tx)
        .await?;
        if tenant.is_none() {
            return Ok(KeyCreated::NoTenant);
        }
        if let Some(maker) = key.created_by {
            let live = sqlx::query(AssertSqlSafe(format!(
                "SELECT id FROM api_keys WHERE id = $1 AND revoked_at IS NULL{}",
                DB::LOCK_ROWS
            )))
            .bind(maker)
            .fetch_optional(&mut *tx)
            .await?;
            if live.is_none() {
                return Ok(KeyCreated::MakerRevoked);
            }
        }
        // Expired keys count until they are revoked: a key made to expire at
        // once would otherwise grow the table without bound.
        let inserted = insert_key(
            key,
            "SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9
             WHERE (SELECT COUNT(*) FROM api_keys WHERE tenant_id = $2 AND revoked_at IS NULL) < $10
             RETURNING id",
        )
        .bind(i64::try_from(max_keys).unwrap_or(i64::MAX))
        .fetch_optional(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(if inserted.is_some() { KeyCreated::Created } else { KeyCreated::AtLimit })
    }

    async fn revoke_api_key(&self, tenant: Option<TenantId>, key_id: Uuid) -> StoreResult<bool> {
        // An explicit transaction: its commit reports a failure that an
        // autocommit `RETURNING` statement on SQLite would not.
        let mut tx = self.begin_write().await?;
        let revoked = revoke_made_by(&mut tx, tenant, key_id, true).await?;
        if revoked == 0 {
            return Ok(false);
        }
        // A key the revoked ones made while this ran (under read committed,
        // in a statement begun before it) is found by the next round; a later
        // one waits for this transaction and finds its maker revoked.
        for _ in 0..MAX_REVOKE_ROUNDS {
            if revoke_made_by(&mut tx, tenant, key_id, false).await? == 0 {
                break;
            }
        }
        tx.commit().await?;
        Ok(true)
    }

    async fn key_for_hash(&self, key_hash: &str) -> StoreResult<Option<AuthenticatedKey>> {
        let row = sqlx::query(
            "SELECT k.id, k.tenant_id, k.workspaces, k.permissions, k.expires_at
             FROM api_keys k JOIN tenants t ON t.id = k.tenant_id
             WHERE k.key_hash = $1 AND k.revoked_at IS NULL AND t.deleting_at IS NULL",
        )
        .bind(key_hash)
        .fetch_optional(&self.pool)
        .await?;
        row.map(|r| {
            Ok(AuthenticatedKey { key_id: r.try_get("id")?, tenant_id: r.try_get("tenant_id")?, scope: scope_of(&r)? })
        })
        .transpose()
    }

    async fn list_api_keys(&self, tenant: TenantId, page: &PageRequest) -> StoreResult<Vec<ApiKeyRecord>> {
        let (after_at, after_id) = page.after.as_ref().map(|c| (c.at, Uuid::parse_str(&c.key).ok())).unzip();
        let rows = sqlx::query(AssertSqlSafe(format!(
            "SELECT {KEY_COLUMNS} FROM api_keys
             WHERE tenant_id = $1 AND revoked_at IS NULL
               AND ($2 IS NULL OR created_at < $2 OR (created_at = $2 AND id < $3))
             ORDER BY created_at DESC, id DESC LIMIT $4"
        )))
        .bind(tenant)
        .bind(after_at)
        .bind(after_id.flatten())
        .bind(page.fetch())
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(key_record).collect()
    }

    async fn api_key(&self, tenant: TenantId, key_id: Uuid) -> StoreResult<Option<ApiKeyRecord>> {
        let row = sqlx::query(AssertSqlSafe(format!(
            "SELECT {KEY_COLUMNS} FROM api_keys WHERE tenant_id = $1 AND id = $2 AND revoked_at IS NULL"
        )))
        .bind(tenant)
        .bind(key_id)
        .fetch_optional(&self.pool)
        .await?;
        row.as_ref().map(key_record).transpose()
    }

    async fn tenant_limits(&self, tenant: TenantId) -> StoreResult<Option<crate::domain::limits::Limits>> {
        let row = sqlx::query("SELECT limits FROM tenant_limits WHERE tenant_id = $1")
            .bind(tenant)
            .fetch_optional(&self.pool)
            .await?;
        row.map(|r| serde_json::from_str(r.try_get("limits")?).map_err(|e| StoreError::Corrupt(e.to_string())))
            .transpose()
    }

    async fn set_tenant_limits(&self, tenant: TenantId, limits: &crate::domain::limits::Limits) -> StoreResult<bool> {
        let mut tx = self.begin_write().await?;
        let set = sqlx::query(
            "INSERT INTO tenant_limits (tenant_id, limits, updated_at)
             SELECT id, $2, $3 FROM tenants WHERE id = $1 AND deleting_at IS NULL
             ON CONFLICT (tenant_id) DO UPDATE SET limits = excluded.limits, updated_at = excluded.updated_at
             RETURNING tenant_id",
        )
        .bind(tenant)
        .bind(serde_json::to_string(limits).expect("limits serialise"))
        .bind(Utc::now())
        .fetch_optional(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(set.is_some())
    }

    async fn end_console_session(&self, session_id: &str, expires_at: chrono::DateTime<Utc>) -> StoreResult<()> {
        let mut tx = self.begin_write().await?;
        sqlx::query("INSERT INTO console_signouts (session_id, expires_at) VALUES ($1, $2) ON CONFLICT DO NOTHING")
            .bind(session_id)
            .bind(expires_at)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }

    async fn console_session_ended(&self, session_id: &str) -> StoreResult<bool> {
        let row = sqlx::query("SELECT 1 AS ended FROM console_signouts WHERE session_id = $1")
            .bind(session_id)
            .fetch_optional(&self.pool)
            .await?;
        Ok(row.is_some())
    }

    async fn tenant_exists(&self, tenant: TenantId) -> StoreResult<bool> {
        let row =
            sqlx::query("SELECT 1 AS found FROM tenants WHERE id = $1").bind(tenant).fetch_optional(&self.pool).await?;
        Ok(row.is_some())
    }

    async fn list_tenants(&self, page: &PageRequest) -> StoreResult<Vec<TenantSummary>> {
        let (after_at, after_id) = page.after.as_ref().map(|c| (c.at, Uuid::parse_str(&c.key).ok())).unzip();
        // Two texts, so that each plan walks the index from its start.
        let after = if after_at.is_some() {
            "t.created_at > $1 OR (t.created_at = $1 AND t.id > $2)"
        } else {
            "$1 IS NULL AND $2 IS NULL"
        };
        let rows = sqlx::query(AssertSqlSafe(format!(
            "SELECT t.id, t.name, t.created_at, t.deleting_at,
                    (SELECT COUNT(*) FROM api_keys k WHERE k.tenant_id = t.id AND k.revoked_at IS NULL) AS keys,
                    (SELECT COUNT(*) FROM sessions s WHERE s.tenant_id = t.id) AS sessions
             FROM tenants t
             WHERE {after}
             ORDER BY t.created_at, t.id LIMIT $3"
        )))
        .bind(after_at)
        .bind(after_id.flatten())
        .bind(page.fetch())
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|r| {
                Ok(TenantSummary {
                    tenant_id: r.try_get("id")?,
                    name: r.try_get("name")?,
                    created_at: r.try_get("created_at")?,
                    keys: r.try_get("keys")?,
                    sessions: r.try_get("sessions")?,
                    state: match r.try_get::<Option<chrono::DateTime<Utc>>, _>("deleting_at")? {
                        Some(_) => TENANT_DELETING,
                        None => "active",
                    },
                })
            })
            .collect::<Result<_, sqlx::Error>>()
            .map_err(Into::into)
    }
}
