//! `/v1/keys`: a tenant's keys, made and revoked by its own keys. A key
//! grants only what it holds, and sees only the keys it could have made.

use super::AppState;
use super::error::ApiError;
use super::extract::{AdminAuth, OptionalJsonBody, QueryParams, page_of, sha256_hex};
use crate::domain::ids::random_hex;
use crate::domain::key_scope::{KeyRequest, KeyScope, Workspaces, parse_key_request};
use crate::domain::page::{Listing, PageCursor, PageRequest};
use crate::store::{ApiKeyRecord, AuthenticatedKey, KeyCreated, NewApiKey};
use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use chrono::Utc;
use serde::Serialize;
use serde_json::Value;
use uuid::Uuid;

/// A fresh secret and the record that stores its hash.
pub(crate) fn new_key(tenant_id: Uuid, request: KeyRequest, created_by: Option<Uuid>) -> (String, NewApiKey) {
    let secret = format!("mk_{}", random_hex(32));
    let record = NewApiKey {
        key_id: Uuid::new_v4(),
        tenant_id,
        key_hash: sha256_hex(secret.as_bytes()),
        name: request.name,
        scope: request.scope,
        created_by,
    };
    (secret, record)
}

/// A key request's body, checked: well formed (else 400) and a scope a key
/// may have (else 422).
pub(crate) fn checked_request(body: &Value, defaults_to_every: bool) -> Result<KeyRequest, ApiError> {
    let request = parse_key_request(body, Utc::now(), defaults_to_every).map_err(ApiError::InvalidRequest)?;
    match request.scope.permissions.refusal() {
        Some(refusal) => Err(ApiError::UnprocessableRequest(refusal.into())),
        None => Ok(request),
    }
}

/// Stores a new key: 404-like `gone` when its tenant is, 403 past the cap.
pub(crate) async fn store_key(state: &AppState, key: &NewApiKey, gone: ApiError) -> Result<(), ApiError> {
    let max = state.config.quotas.max_keys;
    match state.store.create_api_key(key, max).await? {
        KeyCreated::Created => Ok(()),
        KeyCreated::NoTenant => Err(gone),
        KeyCreated::MakerRevoked => Err(ApiError::Unauthorized(super::error::Credential::TenantKey)),
        KeyCreated::AtLimit => Err(ApiError::QuotaExceeded(format!(
            "The tenant holds {max} keys not revoked (expired ones included), as many as it may \
             (MEMORYD_MAX_KEYS); revoke one first."
        ))),
    }
}

/// A key as listed: never its secret.
#[derive(Debug, Serialize, schemars::JsonSchema)]
#[schemars(rename = "Key")]
pub struct KeyView {
    pub key_id: Uuid,
    pub name: Option<String>,
    pub workspaces: Workspaces,
    #[schemars(with = "Vec<crate::domain::key_scope::Permission>")]
    pub permissions: Vec<&'static str>,
    pub expires_at: Option<chrono::DateTime<Utc>>,
    pub created_at: chrono::DateTime<Utc>,
    /// The key that made it (null: a tenant's first key, or the admin's); revoking that key revokes this one.
    pub created_by: Option<Uuid>,
}

/// A key just made: as listed, with its secret (shown once) and, for the
/// admin's route, its tenant.
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct IssuedKey {
    #[serde(flatten)]
    pub key: KeyView,
    pub api_key: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tenant_id: Option<Uuid>,
}

/// A page of keys, newest first.
#[derive(Debug, Serialize, schemars::JsonSchema)]
#[schemars(rename = "KeyList")]
pub struct KeyPage {
    pub keys: Vec<KeyView>,
    /// The next page's cursor; null on the last page.
    pub next_cursor: Option<String>,
}

fn key_view(
    key_id: Uuid,
    name: Option<&str>,
    scope: &KeyScope,
    made: (chrono::DateTime<Utc>, Option<Uuid>),
) -> KeyView {
    KeyView {
        key_id,
        name: name.map(str::to_owned),
        workspaces: scope.workspaces.clone(),
        permissions: scope.permissions.names(),
        expires_at: scope.expires_at,
        created_at: made.0,
        created_by: made.1,
    }
}

fn listed(key: &ApiKeyRecord) -> KeyView {
    key_view(key.key_id, key.name.as_deref(), &key.scope, (key.created_at, key.created_by))
}

fn key_page(keys: &[ApiKeyRecord], next_cursor: Option<String>) -> KeyPage {
    KeyPage { keys: keys.iter().map(listed).collect(), next_cursor }
}

/// The answer to a key made (shown once).
pub(crate) fn issued(secret: String, key: &NewApiKey, tenant_id: Option<Uuid>) -> IssuedKey {
    let view = key_view(key.key_id, key.name.as_deref(), &key.scope, (Utc::now(), key.created_by));
    IssuedKey { key: view, api_key: secret, tenant_id }
}

pub async fn create_key(
    caller: AuthenticatedKey,
    State(state): State<AppState>,
    OptionalJsonBody(body): OptionalJsonBody,
) -> Result<impl IntoResponse, ApiError> {
    let request = checked_request(&body.value, false)?;
    if !caller.scope.grants(&request.scope) {
        return Err(ApiError::Forbidden(
            "A key may grant only what it holds: its workspaces, its permissions, its lifetime.".into(),
        ));
    }
    let (secret, key) = new_key(caller.tenant_id, request, Some(caller.key_id));
    store_key(&state, &key, ApiError::Unauthorized(super::error::Credential::TenantKey)).await?;
    tracing::info!(tenant_id = %key.tenant_id, key_id = %key.key_id, created_by = %caller.key_id, "api key issued");
    Ok((StatusCode::CREATED, Json(issued(secret, &key, None))))
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeysQuery {
    limit: Option<i64>,
    cursor: Option<String>,
}

/// `GET /v1/keys`: a page of the keys the caller could have made, newest first.
pub async fn list_keys(
    caller: AuthenticatedKey,
    State(state): State<AppState>,
    QueryParams(query): QueryParams<KeysQuery>,
) -> Result<Json<KeyPage>, ApiError> {
    let page = page_of(Listing::Keys, query.limit, query.cursor.as_deref())?;
    let (keys, next_cursor) = visible_keys(&state, caller.tenant_id, page, |k| caller.scope.grants(&k.scope)).await?;
    Ok(Json(key_page(&keys, next_cursor)))
}

/// Rows one listing request reads at most: a key that sees few of many
/// keys gets a short page with a cursor rather than a walk of them all.
const MAX_KEY_ROWS_READ: i64 = 5_000;

/// A page of the tenant's keys that `visible` lets through: the store's
/// pages are read on until this one is full, one page of rows at a time, or
/// [`MAX_KEY_ROWS_READ`] rows were read (then the cursor is the last row read).
async fn visible_keys(
    state: &AppState,
    tenant: Uuid,
    page: PageRequest,
    visible: impl Fn(&ApiKeyRecord) -> bool,
) -> Result<(Vec<ApiKeyRecord>, Option<String>), ApiError> {
    let cursor_of = |k: &ApiKeyRecord| PageCursor { at: k.created_at, key: k.key_id.to_string() };
    let mut shown = Vec::new();
    let mut read = PageRequest { limit: page.limit, after: page.after.clone() };
    let mut rows_read = 0;
    loop {
        let rows = state.store.list_api_keys(tenant, &read).await?;
        let more = rows.len() as i64 > read.limit;
        for row in rows.into_iter().take(read.limit as usize) {
            rows_read += 1;
            read.after = Some(cursor_of(&row));
            if visible(&row) {
                shown.push(row);
            }
            if shown.len() as i64 > page.limit {
                break;
            }
        }
        if !more || shown.len() as i64 > page.limit {
            break;
        }
        if rows_read >= MAX_KEY_ROWS_READ {
            let next = read.after.as_ref().map(|c| c.encode(Listing::Keys));
            return Ok((shown, next));
        }
    }
    Ok(page.finish(Listing::Keys, shown, cursor_of))
}

pub async fn revoke_key(
    caller: AuthenticatedKey,
    State(state): State<AppState>,
    Path(raw_id): Path<String>,
) -> Result<StatusCode, ApiError> {
    let not_found = || ApiError::NotFound(format!("No live key {raw_id}."));
    let id = Uuid::parse_str(&raw_id).map_err(|_| not_found())?;
    let key = state.store.api_key(caller.tenant_id, id).await?;
    if !key.is_some_and(|k| caller.scope.grants(&k.scope)) {
        return Err(not_found());
    }
    if !state.store.revoke_api_key(Some(caller.tenant_id), id).await? {
        return Err(not_found());
    }
    state.caches.keys.clear();
    tracing::info!(tenant_id = %caller.tenant_id, key_id = %id, "api key revoked, with the keys it made");
    Ok(StatusCode::NO_CONTENT)
}

/// `GET /v1/admin/tenants/{tenant_id}/keys`: a page of a tenant's live keys and scopes.
pub async fn tenant_keys(
    _: AdminAuth,
    State(state): State<AppState>,
    Path(raw_id): Path<String>,
    QueryParams(query): QueryParams<KeysQuery>,
) -> Result<Json<KeyPage>, ApiError> {
    let not_found = || ApiError::NotFound(format!("No tenant {raw_id}."));
    let id = Uuid::parse_str(&raw_id).map_err(|_| not_found())?;
    let page = page_of(Listing::Keys, query.limit, query.cursor.as_deref())?;
    if !state.store.tenant_exists(id).await? {
        return Err(not_found());
    }
    let (keys, next_cursor) = visible_keys(&state, id, page, |_| true).await?;
    Ok(Json(key_page(&keys, next_cursor)))
}
