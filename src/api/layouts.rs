//! `/v1/layouts`: a tenant's memory configurations (SPEC §2.1).

use super::AppState;
use super::error::ApiError;
use super::extract::{JsonBody, TenantAuth};
use crate::domain::ids::LayoutName;
use crate::domain::layout::{LayoutConfig, LayoutPutError, ValidLayout};
use crate::store::{PutLayoutOutcome, StoredLayout, with_implicit_default};
use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde_json::{Map, Value};

/// A layout as the API shows it: its name, its etag and its effective config.
#[derive(Debug, Serialize)]
pub struct LayoutView {
    pub name: LayoutName,
    pub etag: String,
    #[serde(flatten)]
    pub config: Map<String, Value>,
}

/// `GET /v1/layouts`.
#[derive(Debug, Serialize)]
pub struct LayoutList {
    pub layouts: Vec<LayoutView>,
}

fn layout_json(name: &LayoutName, layout: &ValidLayout) -> LayoutView {
    let config = match layout.effective_json() {
        Value::Object(config) => config,
        _ => Map::new(),
    };
    LayoutView { name: name.clone(), etag: layout.etag(), config }
}

fn with_etag(status: StatusCode, name: &LayoutName, layout: &ValidLayout) -> Response {
    let mut response = (status, Json(layout_json(name, layout))).into_response();
    if let Ok(tag) = HeaderValue::from_str(&layout.etag()) {
        response.headers_mut().insert(header::ETAG, tag);
    }
    response
}

pub(crate) fn parse_layout_name(raw: &str) -> Result<LayoutName, ApiError> {
    LayoutName::parse(raw).ok_or_else(|| ApiError::NotFound(format!("No layout {raw}.")))
}

/// The tenant's layout `name`, stored or the implicit default; 404 otherwise.
pub(crate) async fn find_layout(
    state: &AppState,
    tenant: uuid::Uuid,
    raw_name: &str,
) -> Result<(LayoutName, ValidLayout), ApiError> {
    let name = parse_layout_name(raw_name)?;
    // Cached with the implicit default in place: every append resolves its layout.
    let layouts = match state.caches.layouts.get(&tenant) {
        Some(layouts) => layouts,
        None => {
            let stored = state.store.stored_layouts(tenant).await?;
            let layouts: std::sync::Arc<[StoredLayout]> = with_implicit_default(stored).into();
            state.caches.layouts.put(tenant, layouts.clone());
            layouts
        }
    };
    crate::store::layout_named(&layouts, &name)
        .map(|layout| (name, layout))
        .ok_or_else(|| ApiError::NotFound(format!("No layout {raw_name}.")))
}

pub async fn put_layout(
    TenantAuth(tenant): TenantAuth,
    State(state): State<AppState>,
    Path(raw_name): Path<String>,
    headers: HeaderMap,
    body: JsonBody,
) -> Result<Response, ApiError> {
    let name = LayoutName::parse(&raw_name).ok_or_else(|| {
        ApiError::InvalidLayout(format!("layout name must match ^[A-Za-z0-9][A-Za-z0-9._-]{{0,127}}$, got: {raw_name}"))
    })?;
    let config: LayoutConfig = body.into_typed(ApiError::InvalidLayout)?;
    let layout = ValidLayout::new(config).map_err(ApiError::InvalidLayout)?;
    let if_match = match headers.get(header::IF_MATCH) {
        Some(v) => Some(v.to_str().map_err(|_| ApiError::InvalidRequest("If-Match must be ASCII".into()))?),
        None => None,
    };
    let outcome = state.store.put_layout(tenant, &name, &layout, if_match).await?;
    state.caches.layouts.remove(&tenant);
    match outcome {
        Ok(PutLayoutOutcome::Created) => Ok(with_etag(StatusCode::CREATED, &name, &layout)),
        Ok(PutLayoutOutcome::Unchanged | PutLayoutOutcome::Replaced) => Ok(with_etag(StatusCode::OK, &name, &layout)),
        Err(LayoutPutError::Conflict(detail)) => Err(ApiError::LayoutConflict(detail)),
        Err(LayoutPutError::StaleEtag) => {
            Err(ApiError::PreconditionFailed("If-Match does not match the layout's current etag.".into()))
        }
    }
}

pub async fn list_layouts(
    TenantAuth(tenant): TenantAuth,
    State(state): State<AppState>,
) -> Result<Json<LayoutList>, ApiError> {
    let layouts = with_implicit_default(state.store.stored_layouts(tenant).await?);
    let layouts = layouts.iter().map(|StoredLayout { name, layout, .. }| layout_json(name, layout)).collect();
    Ok(Json(LayoutList { layouts }))
}

pub async fn get_layout(
    TenantAuth(tenant): TenantAuth,
    State(state): State<AppState>,
    Path(raw_name): Path<String>,
) -> Result<Response, ApiError> {
    let (name, layout) = find_layout(&state, tenant, &raw_name).await?;
    Ok(with_etag(StatusCode::OK, &name, &layout))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `serde_json`'s `arbitrary_precision` carries numbers through a
    /// flattened map exactly (serde-rs/json #721 is about deserializing
    /// through `flatten`, which no answer does).
    #[test]
    fn a_flattened_config_keeps_its_numbers_exact() {
        let config: Map<String, Value> =
            serde_json::from_str(r#"{"retention": {"rollout_days": 0.5}, "big": 123456789012345678901234567890}"#)
                .unwrap();
        let name = LayoutName::parse("default").unwrap();
        let view = LayoutView { name, etag: "\"e\"".into(), config };
        assert_eq!(
            serde_json::to_string(&view).unwrap(),
            r#"{"name":"default","etag":"\"e\"","retention":{"rollout_days":0.5},"big":123456789012345678901234567890}"#
        );
    }
}
