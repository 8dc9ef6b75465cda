//! The operator console at `/console` (SPEC §2.6): server-rendered pages
//! over the same store the API uses, readable without JavaScript, signed in
//! with a tenant's API key or the admin token. Every id links to its page.

mod auth;
mod forget;
mod jobs;
mod login;
mod memory;
mod overview;
mod page;
mod render;
mod runs;
mod sessions;
mod usage;
mod webhooks;

use super::client::Client;
pub use auth::ConsoleKeys;
use forget::*;
use jobs::*;
use login::*;
use memory::*;
use overview::*;
use runs::*;
use sessions::*;
use usage::*;

use super::AppState;
use super::authorize::key_of_hash;
use super::error::ApiError;
use super::extract::is_admin_token;
use super::layouts::find_layout;
use super::memory::locate;
use auth::{ConsoleSession, LOGIN_COOKIE, Principal, SESSION_COOKIE, SESSION_SECS, cookie_value, credential_hash};
use axum::Router;
use axum::extract::{Form, FromRequestParts, Path, Query, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use maud::{Markup, html};
use page::{Frame, html_page, maybe_when, post_button, query, state as state_badge, when};
use serde::Deserialize;
use std::time::Duration;
use uuid::Uuid;

use crate::domain::ids::{LayoutName, SessionId, WorkspaceName, random_hex};
use crate::domain::key_scope::{KeyScope, Permission};
use crate::domain::page::{Listing, PageCursor, PageRequest};
use crate::store::{FileAtRun, JobFilter, JobKind, JobState, SessionFilter, SessionState, with_implicit_default};

const CSS: &str = include_str!("assets/console.css");
const JS: &str = include_str!("assets/console.js");
/// How long the Close button waits for the session's memory.
const CLOSE_WAIT: Duration = Duration::from_secs(10);
/// Conversations longer than this are cut on the page.
const MAX_CONVERSATION_BYTES: u64 = 2 << 20;

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/console", get(overview))
        .route("/console/login", get(login_form).post(login))
        .route("/console/logout", post(logout))
        .route("/console/tenants", get(tenants))
        .route("/console/tenant", post(pick_tenant))
        .route("/console/tenants/{tenant_id}/forget", post(forget_tenant))
        .route("/console/tenants/{tenant_id}/keys", get(tenant_keys))
        .route("/console/forget/rollout", post(forget_rollout))
        .route("/console/forget/workspace", post(forget_workspace))
        .route("/console/sessions", get(sessions))
        .route("/console/sessions/{session_id}", get(session))
        .route("/console/sessions/{session_id}/close", post(close))
        .route("/console/jobs", get(jobs))
        .route("/console/jobs/{job_id}", get(job))
        .route("/console/jobs/{job_id}/retry", post(retry))
        .route("/console/memory", get(memory))
        .route("/console/memory/file", get(memory_file))
        .route("/console/export", get(export))
        .route("/console/runs", get(runs))
        .route("/console/runs/{workspace}/{layout}/{run_id}", get(run))
        .route("/console/runs/{workspace}/{layout}/{run_id}/restore", post(restore))
        .route("/console/layouts", get(layouts))
        .route("/console/usage", get(usage))
        .route("/console/webhooks", get(webhooks::webhooks))
        .route("/console/webhooks/{webhook_id}/test", post(webhooks::send_test))
        .route("/console/assets/{name}", get(asset))
}

/// An error page in place of a problem document.
pub struct ConsoleError(ApiError);

impl From<ApiError> for ConsoleError {
    fn from(e: ApiError) -> Self {
        Self(e)
    }
}

impl From<crate::store::StoreError> for ConsoleError {
    fn from(e: crate::store::StoreError) -> Self {
        Self(e.into())
    }
}

impl IntoResponse for ConsoleError {
    fn into_response(self) -> Response {
        let (status, _) = self.0.status_and_code();
        let message = match &self.0 {
            ApiError::Internal(cause) => {
                tracing::error!(error = %crate::error_chain(cause.as_ref()), "console page failed");
                "Something went wrong; the server log has the details.".to_owned()
            }
            other => other.to_string(),
        };
        let mut page = error_page(status, &message);
        if let ApiError::RateLimited(_, secs) = &self.0 {
            page.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(*secs));
        }
        page
    }
}

/// The console's error page, with its security headers.
pub fn error_page(status: StatusCode, message: &str) -> Response {
    html_page(
        status,
        "Error",
        None,
        html! { p class="error" { (message) } p { a href="/console" { "Back to the console" } } },
    )
}

type Page = Result<Response, ConsoleError>;

/// A signed-in request: its session, its cookie (for CSRF tokens) and the
/// tenant its pages show.
pub struct Signed {
    session: ConsoleSession,
    cookie: String,
    csrf: String,
    /// What the key signed in with reaches (the admin: everything).
    scope: KeyScope,
}

impl Signed {
    fn frame(&self) -> Frame<'_> {
        Frame { principal: &self.session.principal, csrf: &self.csrf, scope: &self.scope }
    }

    /// A page the key's permissions do not allow does not exist for it.
    fn require(&self, permission: Permission) -> Result<(), ConsoleError> {
        if self.scope.permissions.allow(permission) {
            Ok(())
        } else {
            Err(ConsoleError(ApiError::NotFound("No such page.".into())))
        }
    }

    /// A page about every workspace (usage, webhooks): a key for every one only.
    fn require_everywhere(&self, permission: Permission) -> Result<(), ConsoleError> {
        self.require(permission)?;
        if self.scope.workspaces.is_all() {
            Ok(())
        } else {
            Err(ConsoleError(ApiError::NotFound("No such page.".into())))
        }
    }

    /// A workspace outside the key's list does not exist for it.
    fn reach(&self, workspace: &str) -> Result<(), ConsoleError> {
        Ok(super::authorize::reach_workspace(&self.scope.workspaces, workspace)?)
    }

    /// The workspace a memory page asked for; without one, `default` (or,
    /// for a key with some workspaces only, the first of them).
    fn workspace_asked<'q>(&'q self, q: &'q MemoryQuery) -> &'q str {
        match (&q.workspace, &self.scope.workspaces) {
            (None, crate::domain::key_scope::Workspaces::Only(names)) => {
                names.first().map_or("default", String::as_str)
            }
            _ => q.workspace(),
        }
    }

    /// The key's workspaces as a listing's filter.
    fn within(&self) -> Option<String> {
        self.scope.workspaces.as_filter()
    }

    /// The tenant the pages show; an admin who has not picked one is sent to pick.
    fn tenant(&self) -> Result<Uuid, ConsoleError> {
        self.session.principal.tenant().ok_or_else(|| ConsoleError(ApiError::NotFound("Pick a tenant first.".into())))
    }

    fn page(&self, title: &str, body: Markup) -> Page {
        Ok(html_page(StatusCode::OK, title, Some(&self.frame()), body))
    }

    fn check_csrf(&self, token: &str, keys: &ConsoleKeys) -> Result<(), ConsoleError> {
        if keys.csrf_ok(&self.cookie, token) {
            Ok(())
        } else {
            Err(ConsoleError(ApiError::InvalidRequest("The form is stale or forged; reload the page.".into())))
        }
    }

    /// The tenant a form acts on, once its CSRF token is checked.
    fn acting_tenant(&self, token: &str, keys: &ConsoleKeys) -> Result<Uuid, ConsoleError> {
        self.check_csrf(token, keys)?;
        self.tenant()
    }

    /// Admin pages do not exist for a tenant's session.
    fn require_admin(&self) -> Result<(), ConsoleError> {
        if self.session.principal.is_admin() {
            Ok(())
        } else {
            Err(ConsoleError(ApiError::NotFound("No such page.".into())))
        }
    }
}

fn now_secs() -> i64 {
    chrono::Utc::now().timestamp()
}

impl FromRequestParts<AppState> for Signed {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Response> {
        let to_login = || page::redirect("/console/login");
        let cookies = parts.headers.get(header::COOKIE).and_then(|v| v.to_str().ok()).unwrap_or("");
        let Some(cookie) = cookie_value(cookies, SESSION_COOKIE) else { return Err(to_login()) };
        let Some(session) = state.console.open(cookie, now_secs()) else { return Err(to_login()) };
        // The key or token signed in with must still open the console; the
        // pages show what the key reaches, as it is now.
        let scope = match &session.principal {
            Principal::Tenant(tenant) => match key_of_hash(state, &session.credential_hash).await {
                Ok(Some(k)) if k.tenant_id == *tenant && !k.scope.expired(chrono::Utc::now()) => Some(k.scope),
                _ => None,
            },
            Principal::Admin(_) => state
                .config
                .admin_token
                .as_deref()
                .is_some_and(|t| {
                    crate::domain::ids::constant_time_eq(
                        state.console.admin_credential(t).as_bytes(),
                        session.credential_hash.as_bytes(),
                    )
                })
                .then(KeyScope::unrestricted),
        };
        let Some(scope) = scope else { return Err(to_login()) };
        match state.store.console_session_ended(&session.session_id).await {
            Ok(false) => {}
            Ok(true) => return Err(to_login()),
            Err(e) => return Err(ConsoleError(e.into()).into_response()),
        }
        // A tenant's pages are its requests too, under its request rate.
        if let Principal::Tenant(tenant) = &session.principal
            && let Some((rate, decision)) = super::limits::take_request(state, *tenant).await
            && let Some(refused) = super::limits::refusal(rate, &decision)
        {
            return Err(ConsoleError(refused).into_response());
        }
        let csrf = state.console.csrf_token(cookie);
        Ok(Signed { session, cookie: cookie.to_owned(), csrf, scope })
    }
}

#[derive(Deserialize)]
pub struct CsrfForm {
    csrf: String,
}

async fn asset(Path(name): Path<String>) -> Response {
    let (body, content_type) = match name.as_str() {
        "console.css" => (CSS, "text/css; charset=utf-8"),
        "console.js" => (JS, "text/javascript; charset=utf-8"),
        _ => return page::harden(StatusCode::NOT_FOUND.into_response()),
    };
    let mut response = ([(header::CONTENT_TYPE, content_type)], body).into_response();
    response.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("public, max-age=300"));
    page::harden(response)
}

// -- links ---------------------------------------------------------------

fn session_link(id: &str) -> Markup {
    html! { a href={"/console/sessions/" (page::percent_encode(id))} { code { (id) } } }
}

/// The first eight hex digits of an id: enough to tell ids apart on a page.
fn short(id: &Uuid) -> String {
    id.simple().to_string()[..8].to_owned()
}

fn job_link(id: &Uuid) -> Markup {
    html! { a href={"/console/jobs/" (id)} title=(id) { code { (short(id)) } } }
}

fn run_link(workspace: &str, layout: &str, id: &Uuid) -> Markup {
    html! { a href={"/console/runs/" (workspace) "/" (layout) "/" (id)} title=(id) { code { (short(id)) } } }
}

/// A rollout's page is the raw memory phase one made of it.
fn rollout_link(workspace: &str, layout: &str, rollout: &str) -> Markup {
    let path = format!("raw_memories/{rollout}.md");
    html! { a href={"/console/memory/file" (query(&[("workspace", Some(workspace)), ("layout", Some(layout)), ("path", Some(&path))]))} { code { (rollout) } } }
}

fn memory_link(workspace: &str, layout: &str) -> Markup {
    html! { a href={"/console/memory" (query(&[("workspace", Some(workspace)), ("layout", Some(layout))]))} { (workspace) " / " (layout) } }
}
