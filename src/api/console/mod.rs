//! The operator console at `/console` (SPEC §2.6): server-rendered pages
//! over the same store the API uses, readable without JavaScript, signed in
//! with a tenant's API key or the admin token. Every id links to its page.

mod auth;
mod client;
mod page;
mod render;
mod webhooks;

pub use auth::ConsoleKeys;
use client::Client;
pub use client::SignInThrottle;

use super::AppState;
use super::error::ApiError;
use super::extract::{is_admin_token, tenant_of_key_hash};
use super::layouts::find_layout;
use super::memory::locate;
use auth::{ConsoleSession, LOGIN_COOKIE, Principal, SESSION_COOKIE, SESSION_SECS, cookie_value, credential_hash};
use axum::Router;
use axum::extract::{Form, FromRequestParts, Path, Query, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use maud::{Markup, html};
use page::{Frame, html_page, maybe_when, post_button, query, state as state_badge, when};
use serde::Deserialize;
use std::time::Duration;
use uuid::Uuid;

use crate::domain::ids::{LayoutName, SessionId, WorkspaceName, random_hex};
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
        error_page(status, &message)
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
}

impl Signed {
    fn frame(&self) -> Frame<'_> {
        Frame { principal: &self.session.principal, csrf: &self.csrf }
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
}

fn now_secs() -> i64 {
    chrono::Utc::now().timestamp()
}

impl FromRequestParts<AppState> for Signed {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Response> {
        let to_login = || page::harden(Redirect::to("/console/login").into_response());
        let cookies = parts.headers.get(header::COOKIE).and_then(|v| v.to_str().ok()).unwrap_or("");
        let Some(cookie) = cookie_value(cookies, SESSION_COOKIE) else { return Err(to_login()) };
        let Some(session) = state.console.open(cookie, now_secs()) else { return Err(to_login()) };
        // The key or token signed in with must still open the console.
        let still_good = match &session.principal {
            Principal::Tenant(tenant) => {
                matches!(tenant_of_key_hash(state, &session.credential_hash).await, Ok(Some(t)) if t == *tenant)
            }
            Principal::Admin(_) => state.config.admin_token.as_deref().is_some_and(|t| {
                crate::domain::ids::constant_time_eq(
                    state.console.admin_credential(t).as_bytes(),
                    session.credential_hash.as_bytes(),
                )
            }),
        };
        if !still_good {
            return Err(to_login());
        }
        match state.store.console_session_ended(&session.session_id).await {
            Ok(false) => {}
            Ok(true) => return Err(to_login()),
            Err(e) => return Err(ConsoleError(e.into()).into_response()),
        }
        let csrf = state.console.csrf_token(cookie);
        Ok(Signed { session, cookie: cookie.to_owned(), csrf })
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

// -- signing in ------------------------------------------------------------

async fn login_form(State(state): State<AppState>, client: Client) -> Response {
    // Double-submit token: a login form posted from elsewhere lacks the cookie.
    let token = random_hex(16);
    let mut response = html_page(
        StatusCode::OK,
        "Sign in",
        None,
        html! {
            form class="login" method="post" action="/console/login" {
                label for="credential" { "A tenant's API key, or the admin token" }
                input id="credential" type="password" name="credential" autocomplete="off" required;
                input type="hidden" name="csrf" value=(token);
                button type="submit" { "Sign in" }
            }
        },
    );
    if let Ok(value) = HeaderValue::from_str(&state.console.cookie(LOGIN_COOKIE, &token, 600, client.https)) {
        response.headers_mut().append(header::SET_COOKIE, value);
    }
    response
}

#[derive(Deserialize)]
pub struct LoginForm {
    credential: String,
    csrf: String,
}

fn refused_login(message: &str) -> Response {
    html_page(
        StatusCode::UNAUTHORIZED,
        "Sign in",
        None,
        html! { p class="error" { (message) } p { a href="/console/login" { "Try again" } } },
    )
}

/// Too many failed sign-ins from this address: it waits (429).
fn throttled_login(wait: Duration) -> Response {
    let secs = wait.as_secs().max(1);
    let mut response = html_page(
        StatusCode::TOO_MANY_REQUESTS,
        "Sign in",
        None,
        html! { p class="error" { "Too many failed sign-ins from this address; try again in " (secs) " s." } },
    );
    if let Ok(value) = HeaderValue::from_str(&secs.to_string()) {
        response.headers_mut().insert(header::RETRY_AFTER, value);
    }
    response
}

async fn login(
    State(state): State<AppState>,
    client: Client,
    headers: HeaderMap,
    Form(form): Form<LoginForm>,
) -> Response {
    let now = std::time::Instant::now();
    if let Some(wait) = client.addr.and_then(|addr| state.caches.sign_ins.wait(addr, now)) {
        return throttled_login(wait);
    }
    let failed = |message: &str| {
        if let Some(addr) = client.addr {
            state.caches.sign_ins.failed(addr, now);
        }
        refused_login(message)
    };
    let cookies = headers.get(header::COOKIE).and_then(|v| v.to_str().ok()).unwrap_or("");
    if cookie_value(cookies, LOGIN_COOKIE) != Some(form.csrf.as_str()) || form.csrf.is_empty() {
        return failed("The sign-in form expired; load it again.");
    }
    let credential = form.credential.trim();
    let hash = credential_hash(credential);
    let is_admin = is_admin_token(&state, credential);
    let principal = if is_admin {
        Principal::Admin(None)
    } else {
        match tenant_of_key_hash(&state, &hash).await {
            Ok(Some(tenant)) => Principal::Tenant(tenant),
            Ok(None) => return failed("That key opens nothing here."),
            Err(e) => return ConsoleError(e).into_response(),
        }
    };
    if let Some(addr) = client.addr {
        state.caches.sign_ins.succeeded(addr);
    }
    let next = if is_admin { "/console/tenants" } else { "/console" };
    let hash = if is_admin { state.console.admin_credential(credential) } else { hash };
    let session = ConsoleSession {
        principal,
        credential_hash: hash,
        expires_at: now_secs() + SESSION_SECS,
        session_id: random_hex(16),
    };
    let sealed = state.console.seal(&session);
    let mut response = page::harden(Redirect::to(next).into_response());
    for cookie in [
        state.console.cookie(SESSION_COOKIE, &sealed, SESSION_SECS, client.https),
        state.console.cookie(LOGIN_COOKIE, "", 0, client.https),
    ] {
        if let Ok(value) = HeaderValue::from_str(&cookie) {
            response.headers_mut().append(header::SET_COOKIE, value);
        }
    }
    tracing::info!(admin = is_admin, "console sign-in");
    response
}

async fn logout(State(state): State<AppState>, signed: Signed, client: Client, Form(form): Form<CsrfForm>) -> Page {
    signed.check_csrf(&form.csrf, &state.console)?;
    // Ended here for every replica: the cookie, even kept by someone, opens nothing.
    let expires_at = chrono::DateTime::from_timestamp(signed.session.expires_at, 0).unwrap_or_else(chrono::Utc::now);
    state.store.end_console_session(&signed.session.session_id, expires_at).await?;
    let mut response = page::harden(Redirect::to("/console/login").into_response());
    if let Ok(value) = HeaderValue::from_str(&state.console.cookie(SESSION_COOKIE, "", 0, client.https)) {
        response.headers_mut().append(header::SET_COOKIE, value);
    }
    Ok(response)
}

#[derive(Deserialize)]
pub struct TenantsQuery {
    cursor: Option<String>,
}

async fn tenants(State(state): State<AppState>, signed: Signed, Query(q): Query<TenantsQuery>) -> Page {
    if !signed.session.principal.is_admin() {
        return Err(ConsoleError(ApiError::NotFound("No such page.".into())));
    }
    let page_request =
        PageRequest::parse(Listing::Tenants, Some(50), empty_to_none(&q.cursor)).map_err(ApiError::InvalidRequest)?;
    let rows = state.store.list_tenants(&page_request).await?;
    let (tenants, next) =
        page_request.finish(Listing::Tenants, rows, |t| PageCursor { at: t.created_at, key: t.tenant_id.to_string() });
    signed.page(
        "Tenants",
        html! {
            table {
                tr { th { "Tenant" } th { "Name" } th { "Created" } th { "Keys" } th { "Sessions" } th { "State" } th {} }
                @for t in &tenants {
                    tr {
                        td { code { (t.tenant_id) } } td { (t.name) } td { (when(&t.created_at)) }
                        td { (t.keys) } td { (t.sessions) } td { (state_badge(t.state)) }
                        td {
                            form class="inline" method="post" action="/console/tenant" {
                                input type="hidden" name="csrf" value=(signed.csrf);
                                input type="hidden" name="tenant_id" value=(t.tenant_id);
                                button type="submit" { "Open" }
                            }
                            @if t.state != crate::store::TENANT_DELETING {
                                " "
                                (post_button(&format!("/console/tenants/{}/forget", t.tenant_id), &signed.csrf, "Forget", Some("Forget this tenant? Its keys stop working now; all its memory, conversations and records are removed.")))
                            }
                        }
                    }
                }
            }
            @if let Some(next) = next {
                p { a href={"/console/tenants" (query(&[("cursor", Some(&next))]))} { "Newer tenants →" } }
            }
        },
    )
}

#[derive(Deserialize)]
pub struct PickForm {
    csrf: String,
    tenant_id: Uuid,
}

async fn pick_tenant(
    State(state): State<AppState>,
    signed: Signed,
    client: Client,
    Form(form): Form<PickForm>,
) -> Page {
    signed.check_csrf(&form.csrf, &state.console)?;
    if !signed.session.principal.is_admin() {
        return Err(ConsoleError(ApiError::NotFound("No such page.".into())));
    }
    if !state.store.tenant_exists(form.tenant_id).await? {
        return Err(ConsoleError(ApiError::NotFound(format!("No tenant {}.", form.tenant_id))));
    }
    let session = ConsoleSession { principal: Principal::Admin(Some(form.tenant_id)), ..signed.session };
    let mut response = page::harden(Redirect::to("/console").into_response());
    let cookie = state.console.cookie(SESSION_COOKIE, &state.console.seal(&session), SESSION_SECS, client.https);
    if let Ok(value) = HeaderValue::from_str(&cookie) {
        response.headers_mut().append(header::SET_COOKIE, value);
    }
    Ok(response)
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

// -- overview --------------------------------------------------------------

async fn overview(State(state): State<AppState>, signed: Signed) -> Page {
    let Some(tenant) = signed.session.principal.tenant() else {
        return Ok(page::harden(Redirect::to("/console/tenants").into_response()));
    };
    let day_ago = chrono::Utc::now() - chrono::Duration::hours(24);
    let jobs = state.store.tenant_job_counts(tenant, day_ago).await?;
    let in_state = |wanted: &str| -> i64 {
        jobs.by_kind_and_state.iter().filter(|(_, s, _)| s == wanted).map(|(_, _, n)| n).sum()
    };
    let sessions =
        state.store.list_sessions(tenant, &SessionFilter::default(), &PageRequest { limit: 10, after: None }).await?;
    let activity = state.store.workspace_activity(tenant).await?;
    let ingest_rate = state.caches.ingest.per_minute(tenant, super::rate::now_secs(), 10);
    let mut runs = Vec::new();
    for (workspace, layout, _) in &activity.layouts {
        let (Some(ws), Some(l)) = (WorkspaceName::parse(workspace), LayoutName::parse(layout)) else { continue };
        for run in state.store.phase_two_runs(tenant, &ws, &l, &PageRequest { limit: 5, after: None }).await? {
            runs.push((workspace.clone(), layout.clone(), run));
        }
    }
    runs.sort_by_key(|r| std::cmp::Reverse(r.2.finished_at));
    runs.truncate(10);
    signed.page(
        "Overview",
        html! {
            div class="cards" {
                div class="card" { div class="n" { (in_state("queued")) } "jobs queued" }
                div class="card" { div class="n" { (in_state("running")) } "jobs running" }
                div class="card" { div class="n" { (jobs.failed_recently) } a href="/console/jobs?state=failed" { "jobs failed in 24 h" } }
                div class="card" { div class="n" { (format!("{ingest_rate:.1}")) } "segments per minute (last 10 min, this replica)" }
            }
            h2 { "Queue by kind and state" }
            table {
                tr { th { "Kind" } th { "State" } th { "Jobs" } }
                @for (kind, job_state, n) in &jobs.by_kind_and_state {
                    tr { td { (kind) } td { (state_badge(job_state)) } td { a href={"/console/jobs" (query(&[("kind", Some(kind)), ("state", Some(job_state))]))} { (n) } } }
                }
            }
            h2 { "Recent sessions" }
            (session_table(&sessions))
            h2 { "Recent runs" }
            table {
                tr { th { "Run" } th { "Memory" } th { "State" } th { "Sessions" } th { "Finished" } }
                @for (workspace, layout, run) in &runs {
                    tr {
                        td { (run_link(workspace, layout, &run.run_id)) }
                        td { (memory_link(workspace, layout)) }
                        td { (state_badge(run.state.as_str())) }
                        td { @for s in &run.sessions { (session_link(s)) " " } }
                        td { (when(&run.finished_at)) }
                    }
                }
            }
        },
    )
}

// -- sessions --------------------------------------------------------------

fn session_table(sessions: &[crate::store::SessionSummary]) -> Markup {
    html! {
        table {
            tr { th { "Session" } th { "Workspace" } th { "State" } th { "Rollouts" } th { "Segments" } th { "Memory" } th { "Created" } th { "Closed" } }
            @for s in sessions {
                tr {
                    td { (session_link(s.session_id.as_str())) }
                    td { (s.workspace.as_str()) }
                    td { (state_badge(s.state.as_str())) }
                    td { (s.rollouts) } td { (s.segments) }
                    td { @if let Some(status) = s.memory_status.as_ref().and_then(|m| m.get("status")).and_then(|v| v.as_str()) { (status) } }
                    td { (when(&s.created_at)) } td { (maybe_when(s.closed_at.as_ref())) }
                }
            }
        }
    }
}

#[derive(Deserialize)]
pub struct SessionsQuery {
    state: Option<String>,
    workspace: Option<String>,
    q: Option<String>,
    cursor: Option<String>,
}

fn empty_to_none(value: &Option<String>) -> Option<&str> {
    value.as_deref().map(str::trim).filter(|v| !v.is_empty())
}

async fn sessions(State(state): State<AppState>, signed: Signed, Query(q): Query<SessionsQuery>) -> Page {
    let tenant = signed.tenant()?;
    if let Some(id) = empty_to_none(&q.q) {
        return Ok(page::harden(
            Redirect::to(&format!("/console/sessions/{}", page::percent_encode(id))).into_response(),
        ));
    }
    let (state_filter, workspace) = (empty_to_none(&q.state), empty_to_none(&q.workspace));
    let filter = SessionFilter {
        state: state_filter.and_then(SessionState::parse),
        workspace: workspace.and_then(WorkspaceName::parse),
    };
    let page_request =
        PageRequest::parse(Listing::Sessions, Some(50), empty_to_none(&q.cursor)).map_err(ApiError::InvalidRequest)?;
    let rows = state.store.list_sessions(tenant, &filter, &page_request).await?;
    let (rows, next) = page_request
        .finish(Listing::Sessions, rows, |s| PageCursor { at: s.created_at, key: s.session_id.as_str().to_owned() });
    signed.page(
        "Sessions",
        html! {
            form class="filters" method="get" action="/console/sessions" {
                label { "State " select name="state" {
                    option value="" { "any" }
                    @for s in ["open", "closing", "closed"] { option value=(s) selected[state_filter == Some(s)] { (s) } }
                } }
                label { "Workspace " input name="workspace" value=[workspace]; }
                button type="submit" class="secondary" { "Filter" }
                label { "Session id " input name="q"; }
                button type="submit" { "Open" }
            }
            (session_table(&rows))
            @if let Some(next) = next {
                p { a href={"/console/sessions" (query(&[("state", state_filter), ("workspace", workspace), ("cursor", Some(&next))]))} { "Older sessions →" } }
            }
        },
    )
}

async fn session(State(state): State<AppState>, signed: Signed, Path(raw_id): Path<String>) -> Page {
    let tenant = signed.tenant()?;
    let not_found = || ConsoleError(ApiError::NotFound(format!("No session {raw_id}.")));
    let id = SessionId::parse(&raw_id).ok_or_else(not_found)?;
    let view = state.store.session_view(tenant, &id).await?.ok_or_else(not_found)?;
    let root = state.volumes.workspace_root(tenant, &view.session.workspace).map_err(ApiError::internal)?;
    let mut conversations = Vec::new();
    for touched in &view.rollouts {
        let committed = state
            .store
            .committed_rollout(tenant, &view.session.workspace, &touched.layout, &touched.rollout_id)
            .await?;
        let text = match committed {
            Some(c) => {
                let path = crate::workspace::confine(&root, &c.rollout_path).map_err(ApiError::internal)?;
                let cap = c.committed_len.min(MAX_CONVERSATION_BYTES);
                let bytes = tokio::task::spawn_blocking(move || -> std::io::Result<Vec<u8>> {
                    use std::io::Read;
                    let mut buf = Vec::new();
                    std::fs::File::open(path)?.take(cap).read_to_end(&mut buf)?;
                    Ok(buf)
                })
                .await
                .map_err(ApiError::internal)?
                .unwrap_or_default();
                Some((String::from_utf8_lossy(&bytes).into_owned(), c.committed_len > cap))
            }
            None => None,
        };
        conversations.push((touched, text));
    }
    let session = &view.session;
    signed.page(
        &format!("Session {}", session.session_id.as_str()),
        html! {
            p {
                (state_badge(session.state.as_str())) " in workspace " strong { (session.workspace.as_str()) }
                " · created " (when(&session.created_at)) " · closed " (maybe_when(session.closed_at.as_ref()))
            }
            @if let Some(status) = &session.memory_status { (render::memory_status(status)) }
            @if view.waiting.is_some() {
                p class="notice" {
                    "Waiting: this tenant's model tokens of the day are spent; its jobs run after the next UTC midnight "
                    "or once its budget is raised (" a href="/console/usage" { "usage" } ")."
                }
            }
            @if session.state == SessionState::Open {
                (post_button(&format!("/console/sessions/{}/close", page::percent_encode(session.session_id.as_str())), &signed.csrf, "Close session", Some("Close this session and make its memory?")))
            }
            h2 { "Jobs" }
            (job_table(&view.jobs))
            h2 { "Rollouts" }
            @for (touched, text) in &conversations {
                h3 { (rollout_link(session.workspace.as_str(), touched.layout.as_str(), touched.rollout_id.as_str())) " in layout " (memory_link(session.workspace.as_str(), touched.layout.as_str())) " · " (touched.segment_count) " segments from this session" }
                @if session.state == SessionState::Closed {
                    (forget_rollout_form(&signed.csrf, session.workspace.as_str(), touched.layout.as_str(), touched.rollout_id.as_str()))
                }
                @match text {
                    Some((jsonl, cut)) => {
                        (render::conversation(jsonl))
                        @if *cut { p class="meta" { "(cut at " (MAX_CONVERSATION_BYTES) " bytes)" } }
                    }
                    None => { p class="meta" { "No committed lines." } }
                }
            }
        },
    )
}

async fn close(
    State(state): State<AppState>,
    signed: Signed,
    Path(raw_id): Path<String>,
    Form(form): Form<CsrfForm>,
) -> Page {
    signed.check_csrf(&form.csrf, &state.console)?;
    let tenant = signed.tenant()?;
    super::sessions::close_and_wait(&state, tenant, &raw_id, Some(CLOSE_WAIT)).await?;
    Ok(page::harden(Redirect::to(&format!("/console/sessions/{}", page::percent_encode(&raw_id))).into_response()))
}

// -- jobs ------------------------------------------------------------------

fn job_table(jobs: &[crate::store::JobRecord]) -> Markup {
    html! {
        table {
            tr { th { "Job" } th { "Kind" } th { "State" } th { "Attempts" } th { "Memory" } th { "Rollout" } th { "Last error" } th { "Created" } }
            @for j in jobs {
                tr {
                    td { (job_link(&j.job_id)) } td { (j.kind.as_str()) } td { (state_badge(j.state.as_str())) }
                    td { (j.attempts) } td { (memory_link(j.workspace.as_str(), j.layout.as_str())) }
                    td { @if let Some(r) = &j.rollout_id { (rollout_link(j.workspace.as_str(), j.layout.as_str(), r.as_str())) } }
                    td class="error" { (j.last_error.as_deref().unwrap_or("")) }
                    td { (when(&j.created_at)) }
                }
            }
        }
    }
}

#[derive(Deserialize)]
pub struct JobsQuery {
    state: Option<String>,
    kind: Option<String>,
    cursor: Option<String>,
}

async fn jobs(State(state): State<AppState>, signed: Signed, Query(q): Query<JobsQuery>) -> Page {
    let tenant = signed.tenant()?;
    let (state_filter, kind) = (empty_to_none(&q.state), empty_to_none(&q.kind));
    let filter = JobFilter {
        state: state_filter.and_then(JobState::parse),
        kind: kind.and_then(JobKind::parse),
        session_id: None,
    };
    let page_request =
        PageRequest::parse(Listing::Jobs, Some(50), empty_to_none(&q.cursor)).map_err(ApiError::InvalidRequest)?;
    // Failed jobs first: they are what an operator comes for.
    let failed = if filter.state.is_none() && page_request.after.is_none() {
        let only_failed = JobFilter { state: Some(JobState::Failed), ..filter.clone() };
        state.store.list_jobs(tenant, &only_failed, &PageRequest { limit: 20, after: None }).await?
    } else {
        Vec::new()
    };
    let rows = state.store.list_jobs(tenant, &filter, &page_request).await?;
    let (rows, next) =
        page_request.finish(Listing::Jobs, rows, |j| PageCursor { at: j.created_at, key: j.job_id.to_string() });
    signed.page(
        "Jobs",
        html! {
            form class="filters" method="get" action="/console/jobs" {
                label { "State " select name="state" {
                    option value="" { "any" }
                    @for s in JobState::ALL.map(JobState::as_str) { option value=(s) selected[state_filter == Some(s)] { (s) } }
                } }
                label { "Kind " select name="kind" {
                    option value="" { "any" }
                    @for k in JobKind::ALL.map(JobKind::as_str) { option value=(k) selected[kind == Some(k)] { (k) } }
                } }
                button type="submit" class="secondary" { "Filter" }
            }
            @if !failed.is_empty() {
                h2 { "Failed" }
                table {
                    tr { th { "Job" } th { "Kind" } th { "Attempts" } th { "Error" } th { "Finished" } th {} }
                    @for j in &failed {
                        tr {
                            td { (job_link(&j.job_id)) } td { (j.kind.as_str()) } td { (j.attempts) }
                            td class="error" { (j.last_error.as_deref().unwrap_or("")) }
                            td { (maybe_when(j.finished_at.as_ref())) }
                            td { (post_button(&format!("/console/jobs/{}/retry", j.job_id), &signed.csrf, "Retry", None)) }
                        }
                    }
                }
                h2 { "All jobs" }
            }
            (job_table(&rows))
            @if let Some(next) = next {
                p { a href={"/console/jobs" (query(&[("state", state_filter), ("kind", kind), ("cursor", Some(&next))]))} { "Older jobs →" } }
            }
        },
    )
}

async fn job(State(state): State<AppState>, signed: Signed, Path(raw_id): Path<String>) -> Page {
    let tenant = signed.tenant()?;
    let not_found = || ConsoleError(ApiError::NotFound(format!("No job {raw_id}.")));
    let id = Uuid::parse_str(&raw_id).map_err(|_| not_found())?;
    let j = state.store.get_job(tenant, id).await?.ok_or_else(not_found)?;
    signed.page(
        &format!("Job {}", j.job_id),
        html! {
            table {
                tr { th { "Kind" } td { (j.kind.as_str()) } }
                tr { th { "State" } td { (state_badge(j.state.as_str())) } }
                @if let Some(session) = &j.session_id { tr { th { "Session" } td { (session_link(session.as_str())) } } }
                @if let Some(forget) = &j.forget {
                    tr { th { "Forgets" } td {
                        (forget.scope.as_str()) " (" (forget.mode.as_str()) ")"
                        @for r in &forget.rollout_ids { " " code { (r.as_str()) } }
                    } }
                }
                tr { th { "Memory" } td { (memory_link(j.workspace.as_str(), j.layout.as_str())) } }
                @if let Some(r) = &j.rollout_id { tr { th { "Rollout" } td { (rollout_link(j.workspace.as_str(), j.layout.as_str(), r.as_str())) } } }
                @if !j.sessions.is_empty() { tr { th { "Serves" } td { @for s in &j.sessions { (session_link(s)) " " } } } }
                @if let Some(run) = &j.restore_run_id { tr { th { "Restores" } td { (run_link(j.workspace.as_str(), j.layout.as_str(), run)) } } }
                tr { th { "Attempts" } td { (j.attempts) } }
                tr { th { "Last error" } td class="error" { (j.last_error.as_deref().unwrap_or("")) } }
                tr { th { "Usage" } td { @if let Some(u) = &j.usage { (render::usage(u)) } } }
                tr { th { "Redactions" } td { (render::redactions(&j.redactions)) } }
                tr { th { "Created" } td { (when(&j.created_at)) } }
                tr { th { "Started" } td { (maybe_when(j.started_at.as_ref())) } }
                tr { th { "Finished" } td { (maybe_when(j.finished_at.as_ref())) } }
            }
            @if j.state == JobState::Failed {
                p { (post_button(&format!("/console/jobs/{}/retry", j.job_id), &signed.csrf, "Retry", None)) }
            }
        },
    )
}

async fn retry(
    State(state): State<AppState>,
    signed: Signed,
    Path(raw_id): Path<String>,
    Form(form): Form<CsrfForm>,
) -> Page {
    signed.check_csrf(&form.csrf, &state.console)?;
    let tenant = signed.tenant()?;
    let job = super::jobs::retry(&state, tenant, &raw_id).await?;
    Ok(page::harden(Redirect::to(&format!("/console/jobs/{}", job.job_id)).into_response()))
}

// -- memory ----------------------------------------------------------------

#[derive(Deserialize)]
pub struct MemoryQuery {
    workspace: Option<String>,
    layout: Option<String>,
    path: Option<String>,
    run_id: Option<String>,
    cursor: Option<String>,
}

impl MemoryQuery {
    fn workspace(&self) -> &str {
        empty_to_none(&self.workspace).unwrap_or("default")
    }

    fn layout(&self) -> &str {
        empty_to_none(&self.layout).unwrap_or("default")
    }
}

async fn read_memory_file(root: &std::path::Path, memories_dir: &str, path: &str) -> Option<String> {
    let file = super::memory::memory_file(root, memories_dir, path)?;
    tokio::fs::read(file).await.ok().map(|b| String::from_utf8_lossy(&b).into_owned())
}

/// Which workspaces and layouts hold memory: the picker atop the memory pages.
async fn memory_picker(
    state: &AppState,
    tenant: Uuid,
    action: &str,
    workspace: &str,
    layout: &str,
) -> Result<Markup, ConsoleError> {
    let workspaces = state.store.workspace_activity(tenant).await?.summaries();
    Ok(html! {
        p class="meta" {
            "Memory of: "
            @for w in &workspaces {
                @for l in &w.layouts {
                    @let current = w.name == workspace && l == layout;
                    a href={(action) (query(&[("workspace", Some(&w.name)), ("layout", Some(l))]))} {
                        @if current { strong { (w.name) " / " (l) } } @else { (w.name) " / " (l) }
                    }
                    " · "
                }
            }
        }
    })
}

/// The workspace's archive, as `GET /v1/workspaces/{workspace}/export` streams it.
async fn export(State(state): State<AppState>, signed: Signed, Query(q): Query<MemoryQuery>) -> Page {
    let tenant = signed.tenant()?;
    Ok(super::export::workspace_archive(&state, tenant, q.workspace()).await?)
}

async fn memory(State(state): State<AppState>, signed: Signed, Query(q): Query<MemoryQuery>) -> Page {
    let tenant = signed.tenant()?;
    let (workspace, layout_name, layout) = locate(&state, tenant, q.workspace(), q.layout()).await?;
    let root = state.volumes.workspace_root(tenant, &workspace).map_err(ApiError::internal)?;
    let memories = &layout.memories_dir.normalized;
    super::memory::settle_publishes(&state, tenant, &workspace, &layout_name).await;
    let memory_md = read_memory_file(&root, memories, "MEMORY.md").await;
    let summary_md = read_memory_file(&root, memories, "memory_summary.md").await;
    let files = super::listings::memory_files_of(&root, memories).await?;
    let selection = state.store.phase_two_selection(tenant, &workspace, &layout_name).await?;
    let (ws, ln) = (workspace.as_str(), layout_name.as_str());
    let picker = memory_picker(&state, tenant, "/console/memory", ws, ln).await?;
    signed.page(
        &format!("Memory · {ws} / {ln}"),
        html! {
            (picker)
            p {
                a href={"/console/runs" (query(&[("workspace", Some(ws)), ("layout", Some(ln))]))} { "Consolidation runs of this memory →" }
                " · "
                a href={"/console/export" (query(&[("workspace", Some(ws))]))} download { "Export workspace " (ws) " (.tar.gz)" }
            }
            form class="inline" method="post" action="/console/forget/workspace" data-confirm={"Forget the workspace " (ws) "? Its sessions end, and every conversation, memory file and record of it is removed."} {
                input type="hidden" name="csrf" value=(signed.csrf);
                input type="hidden" name="workspace" value=(ws);
                button type="submit" { "Forget workspace " (ws) }
            }
            h2 { "memory_summary.md" }
            div class="markdown" { (render::markdown(summary_md.as_deref().unwrap_or(""))) }
            h2 { "MEMORY.md" }
            div class="markdown" { (render::markdown(memory_md.as_deref().unwrap_or(""))) }
            h2 { "Files" }
            table {
                tr { th { "Path" } th { "Bytes" } th { "Modified" } }
                @for f in &files {
                    tr {
                        td { a href={"/console/memory/file" (query(&[("workspace", Some(ws)), ("layout", Some(ln)), ("path", Some(&f.path))]))} { code { (f.path) } } }
                        td { (f.bytes) } td { (when(&f.modified_at)) }
                    }
                }
            }
            h2 { "Current selection" }
            @match &selection {
                Some(doc) => {
                    table {
                        tr { th { "Rollout" } th { "Updated" } th { "Terminal state" } th { "Summary file" } }
                        @for item in doc.get("selected").and_then(|v| v.as_array()).into_iter().flatten() {
                            tr {
                                td { code { (item.get("rollout_id").and_then(|v| v.as_str()).unwrap_or("")) } }
                                td { (item.get("updated_at").and_then(|v| v.as_str()).unwrap_or("")) }
                                td { (item.get("terminal_state").and_then(|v| v.as_str()).unwrap_or("")) }
                                td { code { (item.get("rollout_summary_file").and_then(|v| v.as_str()).unwrap_or("")) } }
                            }
                        }
                    }
                }
                None => { p class="meta" { "No consolidation has succeeded here yet." } }
            }
        },
    )
}

async fn memory_file(State(state): State<AppState>, signed: Signed, Query(q): Query<MemoryQuery>) -> Page {
    let tenant = signed.tenant()?;
    let (workspace, layout_name, layout) = locate(&state, tenant, q.workspace(), q.layout()).await?;
    let raw_path = empty_to_none(&q.path).unwrap_or("MEMORY.md");
    let not_found = || ConsoleError(ApiError::NotFound(format!("No file {raw_path} in the memory folder.")));
    let path = super::memory::history_path(raw_path).ok_or_else(not_found)?;
    let text = match empty_to_none(&q.run_id) {
        Some(raw_run) => {
            let run = super::history::run_id(raw_run)?;
            match state.store.file_after_run(tenant, &workspace, &layout_name, run, &path).await? {
                FileAtRun::Content(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
                _ => return Err(not_found()),
            }
        }
        None => {
            let root = state.volumes.workspace_root(tenant, &workspace).map_err(ApiError::internal)?;
            read_memory_file(&root, &layout.memories_dir.normalized, &path).await.ok_or_else(not_found)?
        }
    };
    signed.page(
        &path,
        html! {
            p class="meta" { (memory_link(workspace.as_str(), layout_name.as_str())) @if let Some(run) = empty_to_none(&q.run_id) { " · as run " code { (run) } " left it" } }
            @if path.starts_with("raw_memories/") || path.starts_with("rollout_summaries/") {
                (render::headed_markdown(&text))
            } @else if path.ends_with(".md") {
                div class="markdown" { (render::markdown(&text)) }
            } @else { pre { (text) } }
        },
    )
}

// -- runs ------------------------------------------------------------------

async fn runs(State(state): State<AppState>, signed: Signed, Query(q): Query<MemoryQuery>) -> Page {
    let tenant = signed.tenant()?;
    let (workspace, layout_name, _) = locate(&state, tenant, q.workspace(), q.layout()).await?;
    let page_request =
        PageRequest::parse(Listing::Runs, Some(50), empty_to_none(&q.cursor)).map_err(ApiError::InvalidRequest)?;
    let rows = state.store.phase_two_runs(tenant, &workspace, &layout_name, &page_request).await?;
    let (rows, next) =
        page_request.finish(Listing::Runs, rows, |r| PageCursor { at: r.finished_at, key: r.run_id.to_string() });
    let (ws, ln) = (workspace.as_str(), layout_name.as_str());
    let picker = memory_picker(&state, tenant, "/console/runs", ws, ln).await?;
    signed.page(
        &format!("Runs · {ws} / {ln}"),
        html! {
            (picker)
            table {
                tr { th { "Run" } th { "State" } th { "Selected" } th { "Added" } th { "Retained" } th { "Removed" } th { "Sessions" } th { "Turns" } th { "Finished" } }
                @for r in &rows {
                    tr {
                        td { (run_link(ws, ln, &r.run_id)) @if r.restored_from.is_some() { " (restore)" } }
                        td { (state_badge(r.state.as_str())) } td { (r.selected) } td { (r.added) } td { (r.retained) } td { (r.removed) }
                        td { @for s in &r.sessions { (session_link(s)) " " } }
                        td { (r.turns) } td { (when(&r.finished_at)) }
                    }
                }
            }
            @if let Some(next) = next {
                p { a href={"/console/runs" (query(&[("workspace", Some(ws)), ("layout", Some(ln)), ("cursor", Some(&next))]))} { "Older runs →" } }
            }
        },
    )
}

async fn run(
    State(state): State<AppState>,
    signed: Signed,
    Path((raw_workspace, raw_layout, raw_run)): Path<(String, String, String)>,
) -> Page {
    let tenant = signed.tenant()?;
    let (workspace, layout_name, _) = locate(&state, tenant, &raw_workspace, &raw_layout).await?;
    let id = super::history::run_id(&raw_run)?;
    let not_found = || ConsoleError(ApiError::NotFound(format!("No run {raw_run}.")));
    let r = state.store.phase_two_run(tenant, &workspace, &layout_name, id).await?.ok_or_else(not_found)?;
    let files = state.store.run_files(tenant, id).await?;
    let mut changes = Vec::new();
    for file in files.iter().flatten() {
        changes.push(super::history::change_of(&state, tenant, file).await?);
    }
    let (ws, ln) = (workspace.as_str(), layout_name.as_str());
    // What the run added, retained and removed, as its record keeps it.
    let ids = |key: &str| -> Vec<String> {
        r.ledger
            .as_ref()
            .and_then(|l| l.get(key))
            .and_then(|v| v.as_array())
            .into_iter()
            .flatten()
            .filter_map(|v| v.as_str().map(str::to_owned))
            .collect()
    };
    signed.page(
        &format!("Run {}", r.run_id),
        html! {
            table {
                tr { th { "Memory" } td { (memory_link(ws, ln)) } }
                tr { th { "State" } td { (state_badge(r.state.as_str())) @if let Some(e) = &r.error { " " span class="error" { (e) } } } }
                tr { th { "Job" } td { (job_link(&r.job_id)) } }
                @if let Some(from) = &r.restored_from { tr { th { "Restored" } td { "the memory as " (run_link(ws, ln, from)) " left it" } } }
                tr { th { "Sessions served" } td { @for s in &r.sessions { (session_link(s)) " " } } }
                tr { th { "Selected / added / retained / removed" } td { (r.selected) " / " (r.added) " / " (r.retained) " / " (r.removed) } }
                tr { th { "Model turns" } td { (r.turns) } }
                tr { th { "Token usage" } td { (render::usage(&r.usage)) } }
                tr { th { "Redactions" } td { (render::redactions(&r.redactions)) } }
                tr { th { "Started" } td { (when(&r.started_at)) } }
                tr { th { "Finished" } td { (when(&r.finished_at)) " (" (format!("{:.2}", (r.finished_at - r.started_at).num_milliseconds() as f64 / 1000.0)) " s)" } }
            }
            @if r.ledger.is_some() {
                h2 { "Conversations" }
                @for (label, key) in [("Added", "added"), ("Retained", "retained"), ("Removed", "removed")] {
                    p {
                        (label) ": "
                        @let listed = ids(key);
                        @if listed.is_empty() { span class="muted" { "none" } }
                        @for rollout in listed { (rollout_link(ws, ln, &rollout)) " " }
                    }
                }
            }
            h2 { "Changes" }
            @if files.is_none() {
                p class="meta" { "This run's history is no longer kept (only the newest " (state.config.history_runs) " runs of a layout keep theirs)." }
            } @else {
                p { (post_button(&format!("/console/runs/{ws}/{ln}/{}/restore", r.run_id), &signed.csrf, "Restore this memory", Some("Put the memory back as this run left it?"))) }
                @for change in &changes {
                    @let path = change["path"].as_str().unwrap_or("");
                    h3 {
                        a href={"/console/memory/file" (query(&[("workspace", Some(ws)), ("layout", Some(ln)), ("path", Some(path)), ("run_id", Some(&r.run_id.to_string()))]))} { code { (path) } }
                        " · " (change["change"].as_str().unwrap_or(""))
                    }
                    @match change["diff"].as_str() {
                        Some(diff) => { (render::diff(diff)) }
                        None => { p class="meta" { "No diff (binary or over 1 MiB): " (change["before_bytes"].to_string()) " → " (change["after_bytes"].to_string()) " bytes." } }
                    }
                }
            }
        },
    )
}

async fn restore(
    State(state): State<AppState>,
    signed: Signed,
    Path((raw_workspace, raw_layout, raw_run)): Path<(String, String, String)>,
    Form(form): Form<CsrfForm>,
) -> Page {
    signed.check_csrf(&form.csrf, &state.console)?;
    let tenant = signed.tenant()?;
    let job = super::history::queue_restore(&state, tenant, &raw_workspace, &raw_layout, &raw_run).await?;
    Ok(page::harden(Redirect::to(&format!("/console/jobs/{}", job.job_id)).into_response()))
}

// -- forgetting ----------------------------------------------------------------

/// Forget one conversation, choosing the mode (SPEC §2.7).
fn forget_rollout_form(csrf: &str, workspace: &str, layout: &str, rollout: &str) -> Markup {
    html! {
        form class="inline" method="post" action="/console/forget/rollout" data-confirm={"Forget the conversation " (rollout) "? Its file, raw memory and summary are removed and the memory is consolidated without it."} {
            input type="hidden" name="csrf" value=(csrf);
            input type="hidden" name="workspace" value=(workspace);
            input type="hidden" name="layout" value=(layout);
            input type="hidden" name="rollout_id" value=(rollout);
            select name="mode" {
                option value="scrub" selected { "scrub: the agent removes what came only from it" }
                option value="rebuild" { "rebuild: the memory is made again without it" }
            }
            " "
            button type="submit" { "Forget" }
        }
    }
}

#[derive(Deserialize)]
pub struct ForgetRolloutForm {
    csrf: String,
    workspace: String,
    layout: String,
    rollout_id: String,
    mode: Option<String>,
}

async fn forget_rollout(State(state): State<AppState>, signed: Signed, Form(form): Form<ForgetRolloutForm>) -> Page {
    signed.check_csrf(&form.csrf, &state.console)?;
    let tenant = signed.tenant()?;
    let mode = super::forget::forget_mode(empty_to_none(&form.mode))?;
    let job =
        super::forget::queue_forget_rollout(&state, tenant, &form.workspace, &form.layout, &form.rollout_id, mode)
            .await?;
    state.wake.notify_waiters();
    Ok(page::harden(Redirect::to(&format!("/console/jobs/{}", job.job_id)).into_response()))
}

#[derive(Deserialize)]
pub struct ForgetWorkspaceForm {
    csrf: String,
    workspace: String,
}

async fn forget_workspace(
    State(state): State<AppState>,
    signed: Signed,
    Form(form): Form<ForgetWorkspaceForm>,
) -> Page {
    signed.check_csrf(&form.csrf, &state.console)?;
    let tenant = signed.tenant()?;
    let job = super::forget::queue_forget_workspace(&state, tenant, &form.workspace).await?;
    state.wake.notify_waiters();
    Ok(page::harden(Redirect::to(&format!("/console/jobs/{}", job.job_id)).into_response()))
}

async fn forget_tenant(
    State(state): State<AppState>,
    signed: Signed,
    Path(raw_tenant): Path<String>,
    Form(form): Form<CsrfForm>,
) -> Page {
    signed.check_csrf(&form.csrf, &state.console)?;
    if !signed.session.principal.is_admin() {
        return Err(ConsoleError(ApiError::NotFound("No such page.".into())));
    }
    super::forget::queue_forget_tenant(&state, &raw_tenant).await?;
    state.wake.notify_waiters();
    Ok(page::harden(Redirect::to("/console/tenants").into_response()))
}

// -- layouts -----------------------------------------------------------------

async fn layouts(State(state): State<AppState>, signed: Signed) -> Page {
    let tenant = signed.tenant()?;
    let layouts = with_implicit_default(state.store.stored_layouts(tenant).await?);
    let default_name = LayoutName::default_layout();
    let (_, default_layout) = find_layout(&state, tenant, default_name.as_str()).await?;
    signed.page(
        "Layouts",
        html! {
            table {
                tr { th { "Layout" } th { "Etag" } th { "Config" } th { "Updated" } }
                @for l in &layouts {
                    tr {
                        td { strong { (l.name.as_str()) } @if l.name == default_name && l.updated_at.is_none() { " (implicit)" } }
                        td { code { (l.layout.etag()) } }
                        td { pre { (serde_json::to_string_pretty(&l.layout.config).unwrap_or_default()) } }
                        td { (maybe_when(l.updated_at.as_ref())) }
                    }
                }
            }
            p class="meta" { "The default layout writes to " code { (default_layout.config.memories_dir) } "." }
        },
    )
}

// -- usage -----------------------------------------------------------------

/// What the tenant used over the last 30 days (SPEC §2.9), charted.
async fn usage(State(state): State<AppState>, signed: Signed) -> Page {
    let tenant = signed.tenant()?;
    let now = chrono::Utc::now();
    let (from, to) = crate::domain::usage::report_range(None, None, now.date_naive()).map_err(ApiError::internal)?;
    let history = state
        .store
        .usage_history(tenant, &from.format("%Y-%m-%d").to_string(), &to.format("%Y-%m-%d").to_string())
        .await?;
    let days = crate::domain::usage::fill_days(from, to, &history.days, history.storage_before);
    let storage = state.store.storage_bytes(tenant).await?;
    let limits = super::limits::effective_limits(&state, tenant).await?;
    let held = state.store.model_budget_hold(tenant, now).await?;
    let today = days.last().map(|d| d.model_use()).unwrap_or_default();
    let series = |figure: &dyn Fn(&crate::domain::usage::UsageDay) -> Option<i64>| -> Vec<(String, Option<i64>)> {
        days.iter().map(|d| (d.date.clone(), figure(d))).collect()
    };
    let of_limit = |limit: Option<u64>| match limit.filter(|l| *l > 0) {
        Some(limit) => format!(" of {limit}"),
        None => " (no limit)".to_owned(),
    };
    signed.page(
        "Usage",
        html! {
            div class="cards" {
                div class="card" { div class="n" { (storage) } "bytes kept" (of_limit(limits.storage_bytes)) }
                div class="card" {
                    div class="n" { (today.input_tokens + today.output_tokens) }
                    "model tokens today (UTC)" (of_limit(limits.model_tokens_per_day))
                }
                @if let Some(until) = held {
                    div class="card" { div class="n" { "held" } "model jobs wait until " (when(&until)) }
                }
            }
            (render::day_chart("Segments per day", "segments", &series(&|d| Some(d.segments))))
            (render::day_chart("Model tokens per day", "tokens", &series(&|d| {
                let used = d.model_use();
                Some(used.input_tokens + used.output_tokens)
            })))
            (render::day_chart("Storage at the end of each day", "bytes", &series(&|d| d.storage_bytes)))
            h2 { "By day" }
            table {
                tr {
                    th { "Day (UTC)" } th { "Segments" } th { "Bytes ingested" } th { "Closes" }
                    th { "Model calls" } th { "Input tokens" } th { "Output tokens" } th { "Runs" } th { "Storage" }
                }
                @for day in days.iter().rev() {
                    @let used = day.model_use();
                    tr {
                        td { (day.date) } td { (day.segments) } td { (day.bytes_ingested) } td { (day.closes) }
                        td { (used.model_calls) } td { (used.input_tokens) } td { (used.output_tokens) } td { (day.runs) }
                        td { @match day.storage_bytes { Some(b) => (b), None => "–" } }
                    }
                }
            }
        },
    )
}
