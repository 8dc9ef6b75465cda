//! A tenant's layouts and the rules of replacing one.

use super::rows::*;
use super::*;
use crate::domain::ids::LayoutName;
use crate::domain::layout::{LayoutPutDecision, LayoutPutError, ValidLayout, decide_layout_put};
use crate::store::{LayoutStore, PutLayoutOutcome, StoredLayout, TenantId, with_implicit_default};
use chrono::Utc;
use sqlx::Executor;
impl SqlStore<DB> {
    pub(super) async fn layouts_in<'e>(
        executor: impl Executor<'e, Database = DB>,
        tenant: TenantId,
    ) -> StoreResult<Vec<StoredLayout>> {
        let rows = sqlx::query("SELECT name, config, updated_at FROM layouts WHERE tenant_id = $1 ORDER BY name")
            .bind(tenant)
            .fetch_all(executor)
            .await?;
        rows.iter().map(Self::record::<LayoutRow, StoredLayout>).collect()
    }
}

#[async_trait::async_trait]
impl LayoutStore for SqlStore<DB> {
    async fn stored_layouts(&self, tenant: TenantId) -> StoreResult<Vec<StoredLayout>> {
        Self::layouts_in(&self.pool, tenant).await
    }

    async fn put_layout(
        &self,
        tenant: TenantId,
        name: &LayoutName,
        layout: &ValidLayout,
        if_match: Option<&str>,
    ) -> StoreResult<Result<PutLayoutOutcome, LayoutPutError>> {
        let mut tx = self.begin_write().await?;
        // The tenant row serialises layout changes, so two concurrent PUTs
        // cannot both pass the conflict rules.
        sqlx::query(locking::<DB>("SELECT id FROM tenants WHERE id = $1")).bind(tenant).execute(&mut *tx).await?;
        let existing: Vec<(LayoutName, ValidLayout)> = with_implicit_default(Self::layouts_in(&mut *tx, tenant).await?)
            .into_iter()
            .map(|l| (l.name, l.layout))
            .collect();
        let decision = match decide_layout_put(&existing, name, layout, if_match) {
            Ok(d) => d,
            Err(e) => return Ok(Err(e)),
        };
        if decision == LayoutPutDecision::Unchanged {
            return Ok(Ok(PutLayoutOutcome::Unchanged));
        }
        sqlx::query(
            "INSERT INTO layouts (tenant_id, name, config, created_at, updated_at) VALUES ($1, $2, $3, $4, $4)
             ON CONFLICT (tenant_id, name) DO UPDATE SET config = excluded.config, updated_at = excluded.updated_at",
        )
        .bind(tenant)
        .bind(name.as_str())
        .bind(serde_json::to_string(&layout.config).expect("a config always serialises"))
        .bind(Utc::now())
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(Ok(if decision == LayoutPutDecision::Create {
            PutLayoutOutcome::Created
        } else {
            PutLayoutOutcome::Replaced
        }))
    }
}
