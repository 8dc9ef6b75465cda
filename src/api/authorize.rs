//! The one authorization point. Every route declares who may call it
//! ([`Access`]); for a tenant's route, the permission it takes and how it
//! reaches a workspace ([`Reach`]). This layer checks both before any handler
//! runs, and hands the handler the [`AuthenticatedKey`] it checked.

use super::AppState;
use super::error::{ApiError, Credential};
use super::extract::{bearer_token, sha256_hex};
use crate::domain::ids::{SessionId, WorkspaceName};
use crate::domain::key_scope::{Permission, Workspaces};
use crate::store::AuthenticatedKey;
use axum::body::Body;
use axum::extract::{FromRequestParts, RawPathParams, State};
use axum::http::Request;
use axum::http::request::Parts;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

/// Who may call a route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Anyone (health, metrics, the spec).
    Open,
    /// The admin token.
    Admin,
    /// A tenant's key holding the permission, reaching the workspace this way.
    Key(Permission, Reach),
}

/// How a tenant route reaches a workspace: a workspace outside the key's
/// list does not exist for the key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reach {
    /// The path names it (`{workspace}`).
    Workspace,
    /// Through the session the path names (`{session_id}`).
    Session,
    /// Through the job the path names (`{job_id}`).
    Job,
    /// The handler lists or streams only the key's workspaces, and refuses a
    /// body naming another ([`AuthenticatedKey`] says which).
    Filtered,
    /// It acts on, or tells of, every workspace of the tenant (layout
    /// changes, webhooks, usage): a key for every workspace only.
    EveryWorkspace,
    /// Tenant settings that name no workspace.
    Tenant,
}

/// The workspace the session of a [`Reach::Session`] route is in (or would
/// be opened in), as this layer found it for a key with some workspaces only.
#[derive(Debug, Clone)]
pub struct SessionWorkspace(pub WorkspaceName);

/// The request's live, unexpired key. One revoked on another replica is still
/// taken here until the key cache's entry lives out its second.
pub async fn authenticate(state: &AppState, headers: &axum::http::HeaderMap) -> Result<AuthenticatedKey, ApiError> {
    let unauthorized = || ApiError::Unauthorized(Credential::TenantKey);
    let secret = bearer_token(headers).ok_or_else(unauthorized)?;
    let key = key_of_hash(state, &sha256_hex(secret.as_bytes())).await?.ok_or_else(unauthorized)?;
    if key.scope.expired(chrono::Utc::now()) {
        return Err(unauthorized());
    }
    Ok(key)
}

/// The live key with this SHA-256, through the key cache (expired or not).
pub(crate) async fn key_of_hash(state: &AppState, hash: &str) -> Result<Option<AuthenticatedKey>, ApiError> {
    if let Some(key) = state.caches.keys.get(&hash.to_owned()) {
        return Ok(key);
    }
    let key = state.store.key_for_hash(hash).await?;
    state.caches.keys.put(hash.to_owned(), key.clone());
    Ok(key)
}

/// What the layer of one [`Access::Key`] route checks (shared, so that a
/// request clones one pointer, not the whole state).
pub type Guarded = std::sync::Arc<(AppState, Permission, Reach)>;

/// The layer of a [`Access::Key`] route. The request-rate layer before it
/// has usually found the key already; otherwise it is found here.
pub async fn guard(State(guarded): State<Guarded>, req: Request<Body>, next: Next) -> Response {
    let (state, permission, reach) = &*guarded;
    let (mut parts, body) = req.into_parts();
    if parts.extensions.get::<AuthenticatedKey>().is_none() {
        match authenticate(state, &parts.headers).await {
            Ok(key) => {
                parts.extensions.insert(key);
            }
            Err(refused) => return refused.into_response(),
        }
    }
    match authorize(state, *permission, *reach, &mut parts).await {
        Ok(()) => next.run(Request::from_parts(parts, body)).await,
        Err(refused) => refused.into_response(),
    }
}

async fn authorize(state: &AppState, permission: Permission, reach: Reach, parts: &mut Parts) -> Result<(), ApiError> {
    let key = parts.extensions.get::<AuthenticatedKey>().ok_or_else(|| ApiError::internal("the key was not found"))?;
    if !key.scope.permissions.allow(permission) {
        return Err(ApiError::Forbidden(format!(
            "This key does not hold the {} permission this route takes.",
            permission.as_str()
        )));
    }
    if key.scope.workspaces.is_all() {
        return Ok(());
    }
    let key = key.clone();
    let params = RawPathParams::from_request_parts(parts, &()).await.map_err(ApiError::internal)?;
    let param = |name: &str| params.iter().find(|(n, _)| *n == name).map(|(_, v)| v.to_owned());
    match reach {
        Reach::Workspace => {
            let workspace =
                param("workspace").ok_or_else(|| ApiError::internal("a workspace route without {workspace}"))?;
            reach_workspace(&key.scope.workspaces, &workspace)?;
        }
        Reach::Session => {
            let raw = param("session_id").ok_or_else(|| ApiError::internal("a session route without {session_id}"))?;
            let found = session_workspace(state, &key, &raw, parts, permission).await?;
            if let Some(workspace) = found {
                parts.extensions.insert(SessionWorkspace(workspace));
            }
        }
        Reach::Job => {
            let raw = param("job_id").ok_or_else(|| ApiError::internal("a job route without {job_id}"))?;
            let job = match uuid::Uuid::parse_str(&raw) {
                Ok(id) => state.store.get_job(key.tenant_id, id).await?,
                Err(_) => None,
            };
            if job.is_some_and(|job| !key.scope.workspaces.sees(job.workspace.as_str())) {
                return Err(ApiError::NotFound(format!("No job {raw}.")));
            }
        }
        Reach::EveryWorkspace => {
            return Err(ApiError::Forbidden(
                "This route reaches every workspace of the tenant; this key reaches some only.".into(),
            ));
        }
        Reach::Filtered | Reach::Tenant => {}
    }
    Ok(())
}

/// The workspace of the session a scoped key names: a session elsewhere is
/// not found; an unknown one is opened (by an append) in the workspace of the
/// query (else `default`), which the key must reach.
async fn session_workspace(
    state: &AppState,
    key: &AuthenticatedKey,
    raw: &str,
    parts: &Parts,
    permission: Permission,
) -> Result<Option<WorkspaceName>, ApiError> {
    let not_found = || ApiError::NotFound(format!("No session {raw}."));
    let Some(id) = SessionId::parse(raw) else { return Ok(None) };
    match state.store.session_workspace(key.tenant_id, &id).await? {
        Some(workspace) if key.scope.workspaces.sees(workspace.as_str()) => Ok(Some(workspace)),
        Some(_) => Err(not_found()),
        None if permission == Permission::Ingest => {
            let asked = parts.uri.query().and_then(|q| {
                url::form_urlencoded::parse(q.as_bytes()).find(|(k, _)| k == "workspace").map(|(_, v)| v.into_owned())
            });
            let workspace = asked.as_deref().map_or(Some(WorkspaceName::default_workspace()), WorkspaceName::parse);
            match workspace {
                Some(w) if !key.scope.workspaces.sees(w.as_str()) => Err(outside(&w)),
                found => Ok(found),
            }
        }
        None => Ok(None),
    }
}

/// A workspace outside the key's list does not exist for it: 404, as one that does not exist.
pub fn reach_workspace(workspaces: &Workspaces, workspace: &str) -> Result<(), ApiError> {
    if workspaces.sees(workspace) { Ok(()) } else { Err(ApiError::NotFound(format!("No workspace {workspace}."))) }
}

/// A session may not be opened in a workspace the key does not reach.
pub fn outside(workspace: &WorkspaceName) -> ApiError {
    ApiError::Forbidden(format!("This key may not open a session in workspace {workspace}."))
}

/// The key the authorization layer checked, for a handler that needs more
/// than its tenant (its workspaces, its permissions).
impl FromRequestParts<AppState> for AuthenticatedKey {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &AppState) -> Result<Self, ApiError> {
        parts
            .extensions
            .get::<AuthenticatedKey>()
            .cloned()
            .ok_or_else(|| ApiError::internal("a tenant route declared no key access"))
    }
}
