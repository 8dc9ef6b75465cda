//! `/v1/keys`: a tenant's keys, made and revoked by its own keys. A key
//! grants only what it holds, and sees only the keys it could have made.

use super::AppState;
use super::error::ApiError;
use super::extract::{AdminAuth, OptionalJsonBody, sha256_hex};
use crate::domain::ids::random_hex;
use crate::domain::key_scope::{KeyRequest, KeyScope, parse_key_request};
use crate::store::{ApiKeyRecord, AuthenticatedKey, NewApiKey};
use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use chrono::Utc;
use serde_json::{Value, json};
use uuid::Uuid;

/// A fresh secret and the record that stores its hash.
pub(crate) fn new_key(tenant_id: Uuid, request: KeyRequest) -> (String, NewApiKey) {
    let secret = format!("mk_{}", random_hex(32));
    let record = NewApiKey {
        key_id: Uuid::new_v4(),
        tenant_id,
        key_hash: sha256_hex(secret.as_bytes()),
        name: request.name,
        scope: request.scope,
    };
    (secret, record)
}

/// A key as listed: never its secret.
pub(crate) fn key_json(key_id: Uuid, name: Option<&str>, scope: &KeyScope, created_at: chrono::DateTime<Utc>) -> Value {
    json!({
        "key_id": key_id,
        "name": name,
        "workspaces": scope.workspaces.to_json(),
        "permissions": scope.permissions.names(),
        "expires_at": scope.expires_at,
        "created_at": created_at,
    })
}

fn listed(key: &ApiKeyRecord) -> Value {
    key_json(key.key_id, key.name.as_deref(), &key.scope, key.created_at)
}

/// The answer to a key made: the key as listed, with its secret (shown once).
pub(crate) fn issued(secret: &str, key: &NewApiKey) -> Value {
    let mut body = key_json(key.key_id, key.name.as_deref(), &key.scope, Utc::now());
    body["api_key"] = json!(secret);
    body
}

pub async fn create_key(
    caller: AuthenticatedKey,
    State(state): State<AppState>,
    OptionalJsonBody(body): OptionalJsonBody,
) -> Result<impl IntoResponse, ApiError> {
    let request = parse_key_request(&body.value, Utc::now(), false).map_err(ApiError::InvalidRequest)?;
    if !caller.scope.grants(&request.scope) {
        return Err(ApiError::Forbidden(
            "A key may grant only what it holds: its workspaces, its permissions, its lifetime.".into(),
        ));
    }
    let (secret, key) = new_key(caller.tenant_id, request);
    if !state.store.create_api_key(&key).await? {
        return Err(ApiError::Unauthorized(super::error::Credential::TenantKey));
    }
    tracing::info!(tenant_id = %key.tenant_id, key_id = %key.key_id, "api key issued");
    Ok((StatusCode::CREATED, Json(issued(&secret, &key))))
}

pub async fn list_keys(caller: AuthenticatedKey, State(state): State<AppState>) -> Result<Json<Value>, ApiError> {
    let keys = state.store.list_api_keys(caller.tenant_id).await?;
    let seen: Vec<Value> = keys.iter().filter(|k| caller.scope.grants(&k.scope)).map(listed).collect();
    Ok(Json(json!({"keys": seen})))
}

pub async fn revoke_key(
    caller: AuthenticatedKey,
    State(state): State<AppState>,
    Path(raw_id): Path<String>,
) -> Result<StatusCode, ApiError> {
    let not_found = || ApiError::NotFound(format!("No live key {raw_id}."));
    let id = Uuid::parse_str(&raw_id).map_err(|_| not_found())?;
    let keys = state.store.list_api_keys(caller.tenant_id).await?;
    if !keys.iter().any(|k| k.key_id == id && caller.scope.grants(&k.scope)) {
        return Err(not_found());
    }
    if !state.store.revoke_api_key(Some(caller.tenant_id), id).await? {
        return Err(not_found());
    }
    state.caches.keys.clear();
    tracing::info!(tenant_id = %caller.tenant_id, key_id = %id, "api key revoked");
    Ok(StatusCode::NO_CONTENT)
}

/// `GET /v1/admin/tenants/{tenant_id}/keys`: a tenant's live keys and scopes.
pub async fn tenant_keys(
    _: AdminAuth,
    State(state): State<AppState>,
    Path(raw_id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let not_found = || ApiError::NotFound(format!("No tenant {raw_id}."));
    let id = Uuid::parse_str(&raw_id).map_err(|_| not_found())?;
    if !state.store.tenant_exists(id).await? {
        return Err(not_found());
    }
    let keys = state.store.list_api_keys(id).await?;
    Ok(Json(json!({"keys": keys.iter().map(listed).collect::<Vec<_>>()})))
}
