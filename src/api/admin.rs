//! `/v1/admin`: tenants and their API keys. Keys are shown once and stored
//! only as SHA-256 hashes.

use super::AppState;
use super::error::ApiError;
use super::extract::{AdminAuth, JsonBody, OptionalJsonBody};
use super::keys::{checked_request, issued, new_key, store_key};
use crate::domain::key_scope::{KeyRequest, KeyScope};
use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

#[derive(Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct NewTenant {
    #[schemars(length(min = 1, max = 200))]
    name: String,
}

/// A tenant just made, with its first key (shown once).
#[derive(Debug, Serialize, schemars::JsonSchema)]
#[schemars(rename = "NewTenantKey")]
pub struct NewTenantAnswer {
    pub tenant_id: Uuid,
    pub name: String,
    pub key_id: Uuid,
    pub api_key: String,
}

pub async fn create_tenant(
    _: AdminAuth,
    State(state): State<AppState>,
    body: JsonBody,
) -> Result<impl IntoResponse, ApiError> {
    let NewTenant { name } = body.into_typed(ApiError::InvalidRequest)?;
    let name = name.trim().to_owned();
    if name.is_empty() || name.len() > 200 {
        return Err(ApiError::InvalidRequest("name must be 1 to 200 characters".into()));
    }
    let every = KeyRequest { name: None, scope: KeyScope::unrestricted() };
    let (secret, key) = new_key(Uuid::new_v4(), every, None);
    let tenant = state.store.create_tenant(&name, &key).await?;
    tracing::info!(tenant_id = %tenant.tenant_id, key_id = %key.key_id, "tenant created");
    Ok((
        StatusCode::CREATED,
        Json(NewTenantAnswer { tenant_id: tenant.tenant_id, name: tenant.name, key_id: key.key_id, api_key: secret }),
    ))
}

/// A key for the tenant: every workspace and permission unless the body
/// (the fields of `POST /v1/keys`) says otherwise.
pub async fn create_key(
    _: AdminAuth,
    State(state): State<AppState>,
    Path(tenant_id): Path<String>,
    OptionalJsonBody(body): OptionalJsonBody,
) -> Result<impl IntoResponse, ApiError> {
    let not_found = || ApiError::NotFound(format!("No tenant {tenant_id}."));
    let id = Uuid::parse_str(&tenant_id).map_err(|_| not_found())?;
    let request = checked_request(&body.value, true)?;
    let (secret, key) = new_key(id, request, None);
    store_key(&state, &key, not_found()).await?;
    tracing::info!(tenant_id = %id, key_id = %key.key_id, "api key issued");
    Ok((StatusCode::CREATED, Json(issued(secret, &key, Some(id)))))
}

pub async fn revoke_key(
    _: AdminAuth,
    State(state): State<AppState>,
    Path(key_id): Path<String>,
) -> Result<StatusCode, ApiError> {
    let not_found = || ApiError::NotFound(format!("No live key {key_id}."));
    let id = Uuid::parse_str(&key_id).map_err(|_| not_found())?;
    if !state.store.revoke_api_key(None, id).await? {
        return Err(not_found());
    }
    state.caches.keys.clear();
    tracing::info!(key_id = %id, "api key revoked");
    Ok(StatusCode::NO_CONTENT)
}
