//! The HTTP layer: routes, extractors and the problem-document error type.
//! Handlers stay thin; rules live in `domain`, state in `store`.

mod admin;
mod agent_memory;
mod appends;
pub mod authorize;
mod cache;
mod client;
mod console;
pub use client::SignInThrottle;
pub use console::ConsoleKeys;
pub mod error;
mod export;
mod extract;
mod forget;
mod health;
mod history;
mod import;
mod ingest_rate;
mod jobs;
mod keys;
mod layouts;
mod limits;
mod listings;
mod mcp;
mod memory;
pub mod openapi;
mod ranked;
mod rate;
pub mod serve;
mod sessions;
pub mod slots;
pub(crate) mod webhooks;

use crate::config::Config;
use crate::domain::key_scope::Permission;
use crate::store::DynStore;
use crate::workspace::Volumes;
pub use authorize::{Access, Reach};
use axum::Router;
use axum::body::Body;
use axum::extract::{DefaultBodyLimit, MatchedPath};
use axum::handler::Handler;
use axum::http::{Method, Request, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::routing::{MethodFilter, MethodRouter, on};
use error::{code_for_status, problem};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use tower::ServiceBuilder;
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer};
use tower_http::timeout::TimeoutLayer;
use tower_http::trace::{DefaultOnResponse, TraceLayer};

/// A key revoked on another replica is refused here at most this long after.
pub const KEY_CACHE_TTL: Duration = Duration::from_secs(1);

/// Longer than the longest `?wait=` of a close (300 s).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(330);

/// What every handler reaches. Cloned for each request by every layer and
/// extractor that takes it, so a clone is one reference count.
#[derive(Clone)]
pub struct AppState(Arc<SharedState>);

impl AppState {
    pub fn new(shared: SharedState) -> Self {
        Self(Arc::new(shared))
    }
}

impl std::ops::Deref for AppState {
    type Target = SharedState;

    fn deref(&self) -> &SharedState {
        &self.0
    }
}

pub struct SharedState {
    pub store: DynStore,
    pub volumes: Volumes,
    /// Segments on their way to the disk and the database.
    pub appends: crate::ingest::AppendQueue,
    pub config: Arc<Config>,
    /// Flips to `true` on SIGTERM, so long polls answer at once.
    pub shutdown: CancellationToken,
    /// Signalled when jobs are queued or finish in this process.
    pub wake: Arc<tokio::sync::Notify>,
    pub caches: Arc<Caches>,
    /// Signs and checks console sessions.
    pub console: Arc<console::ConsoleKeys>,
    /// Reads complete the committed publishes of what they read.
    pub publisher: crate::workspace::publish::Publisher,
    /// `MEMORYD_DEFAULT_LIMITS`: what a tenant's own limits leave unset.
    pub default_limits: crate::domain::limits::Limits,
    /// Webhooks and the live stream (SPEC §2.8).
    pub events: crate::events::Events,
    /// Exports and event streams under way on this replica.
    pub slots: Arc<slots::Slots>,
    /// Where search by meaning embeds queries; `None`: not configured.
    pub embeddings: Option<Arc<crate::llm::embeddings::EmbeddingsClient>>,
}

/// Lookups every request makes. A key revoked or a layout changed on another
/// replica takes effect here within the time to live.
pub struct Caches {
    /// API key hash → the live key (or none). Its time to live bounds how
    /// long another replica's revocation takes to reach this one.
    pub keys: cache::TtlCache<String, Option<crate::store::AuthenticatedKey>>,
    /// Tenant → its layouts, the implicit default among them.
    pub layouts: cache::TtlCache<uuid::Uuid, Arc<[crate::store::StoredLayout]>>,
    /// Segments appended per tenant per minute on this replica.
    pub ingest: ingest_rate::IngestRate,
    /// Failed console sign-ins per client address on this replica.
    pub sign_ins: SignInThrottle,
    /// Failed admin-token checks per client address on this replica.
    pub admin_failures: SignInThrottle,
    /// Tenant → its limits in force.
    pub limits: cache::TtlCache<uuid::Uuid, crate::domain::limits::Limits>,
    /// Each tenant's request bucket on this replica.
    pub buckets: rate::RequestBuckets,
    /// Memory files cut into passages, for search by relevance.
    pub passages: crate::tools::passage_index::PassageCache,
    /// Layouts' passage vectors, for search by meaning.
    pub vectors: crate::meaning::VectorCache,
}

impl Default for Caches {
    fn default() -> Self {
        Self {
            keys: cache::TtlCache::new(KEY_CACHE_TTL),
            layouts: cache::TtlCache::new(Duration::from_secs(2)),
            ingest: Default::default(),
            sign_ins: Default::default(),
            admin_failures: Default::default(),
            limits: cache::TtlCache::new(Duration::from_secs(2)),
            buckets: Default::default(),
            passages: Default::default(),
            vectors: Default::default(),
        }
    }
}

/// Errors made outside the handlers (unknown route, wrong method, panic,
/// timeout) leave as problem documents too; under `/console`, as the
/// console's own error page. A page the console rendered passes as it is.
async fn problem_for_bare_errors(req: Request<Body>, next: Next) -> Response {
    let path = req.uri().path();
    let console = path == "/console" || path.starts_with("/console/");
    let response = next.run(req).await;
    let status = response.status();
    let content_type = response.headers().get(header::CONTENT_TYPE).map(|v| v.as_bytes().to_vec()).unwrap_or_default();
    let is_problem = content_type.starts_with(b"application/problem+json");
    let is_page = content_type.starts_with(b"text/html");
    if (status.is_client_error() || status.is_server_error()) && !is_problem && !is_page {
        let detail = match status {
            StatusCode::NOT_FOUND => "No such route.",
            StatusCode::METHOD_NOT_ALLOWED => "This route does not take that method.",
            StatusCode::REQUEST_TIMEOUT => "The request took too long.",
            StatusCode::PAYLOAD_TOO_LARGE => "The body is too large.",
            s if s.is_server_error() => "An internal error occurred; the request id identifies it in the log.",
            _ => "The request was refused.",
        };
        if status.is_server_error() {
            tracing::error!(status = status.as_u16(), "request failed outside a handler");
        }
        let mut replaced = if console {
            console::error_page(status, detail)
        } else {
            problem(status, code_for_status(status), detail)
        };
        if let Some(allow) = response.headers().get(header::ALLOW) {
            replaced.headers_mut().insert(header::ALLOW, allow.clone());
        }
        return replaced;
    }
    response
}

/// One route: its method, its full path, who may call it and its handler.
struct Endpoint {
    method: Method,
    path: &'static str,
    access: Access,
    handler: MethodRouter<AppState>,
}

fn endpoint<H, T>(method: Method, path: &'static str, access: Access, handler: H) -> Endpoint
where
    H: Handler<T, AppState>,
    T: 'static,
{
    let filter = MethodFilter::try_from(method.clone()).expect("endpoints use standard methods");
    Endpoint { method, path, access, handler: on(filter, handler) }
}

/// A route whose bodies may be at most `limit` bytes (below the segment limit).
fn with_body_limit(endpoint: Endpoint, limit: usize) -> Endpoint {
    Endpoint { handler: endpoint.handler.layer(DefaultBodyLimit::max(limit)), ..endpoint }
}

const OPEN: Access = Access::Open;
const ADMIN: Access = Access::Admin;

const fn key(permission: Permission, reach: Reach) -> Access {
    Access::Key(permission, reach)
}

/// Every route memoryd serves; `openapi.yaml` is tested against this list.
fn endpoints() -> Vec<Endpoint> {
    [operational_and_admin_endpoints(), tenant_endpoints(), memory_endpoints(), event_endpoints()]
        .into_iter()
        .flatten()
        .collect()
}

/// The probes, the spec, and the admin's routes (the admin token).
fn operational_and_admin_endpoints() -> Vec<Endpoint> {
    vec![
        endpoint(Method::GET, "/healthz", OPEN, health::healthz),
        endpoint(Method::GET, "/readyz", OPEN, health::readyz),
        endpoint(Method::GET, "/metrics", OPEN, health::metrics),
        endpoint(Method::GET, "/openapi.yaml", OPEN, health::openapi),
        endpoint(Method::POST, "/v1/admin/tenants", ADMIN, admin::create_tenant),
        endpoint(Method::POST, "/v1/admin/tenants/{tenant_id}/keys", ADMIN, admin::create_key),
        endpoint(Method::GET, "/v1/admin/tenants/{tenant_id}/keys", ADMIN, keys::tenant_keys),
        endpoint(Method::DELETE, "/v1/admin/keys/{key_id}", ADMIN, admin::revoke_key),
        endpoint(Method::DELETE, "/v1/admin/tenants/{tenant_id}", ADMIN, forget::delete_tenant),
        endpoint(Method::GET, "/v1/admin/tenants/{tenant_id}/limits", ADMIN, limits::tenant_limits),
        endpoint(Method::PUT, "/v1/admin/tenants/{tenant_id}/limits", ADMIN, limits::set_limits),
        endpoint(Method::GET, "/v1/admin/tenants/{tenant_id}/usage", ADMIN, limits::tenant_usage),
        endpoint(Method::GET, "/v1/admin/tenants", ADMIN, listings::list_tenants),
    ]
}

/// A tenant's keys, limits, layouts, sessions, workspaces and jobs.
fn tenant_endpoints() -> Vec<Endpoint> {
    use Permission::{Close, Ingest, Manage, Read};
    use Reach::{EveryWorkspace, Filtered, Job, Session, Tenant, Workspace};
    vec![
        endpoint(Method::POST, "/v1/keys", key(Manage, Filtered), keys::create_key),
        endpoint(Method::GET, "/v1/keys", key(Manage, Filtered), keys::list_keys),
        endpoint(Method::DELETE, "/v1/keys/{key_id}", key(Manage, Filtered), keys::revoke_key),
        endpoint(Method::GET, "/v1/limits", key(Manage, Tenant), limits::own_limits),
        endpoint(Method::GET, "/v1/usage", key(Manage, EveryWorkspace), limits::own_usage),
        endpoint(Method::GET, "/v1/workspaces/{workspace}/export", key(Manage, Workspace), export::export_workspace),
        endpoint(Method::POST, "/v1/workspaces/{workspace}/import", key(Manage, Workspace), import::import_workspace),
        endpoint(Method::GET, "/v1/layouts", key(Read, Tenant), layouts::list_layouts),
        endpoint(Method::PUT, "/v1/layouts/{layout}", key(Manage, EveryWorkspace), layouts::put_layout),
        endpoint(Method::GET, "/v1/layouts/{layout}", key(Read, Tenant), layouts::get_layout),
        endpoint(Method::POST, "/v1/sessions", key(Ingest, Filtered), sessions::create_session),
        endpoint(Method::GET, "/v1/sessions", key(Read, Filtered), listings::list_sessions),
        endpoint(Method::GET, "/v1/workspaces", key(Read, Filtered), listings::list_workspaces),
        endpoint(Method::DELETE, "/v1/workspaces/{workspace}", key(Manage, Workspace), forget::forget_workspace),
        endpoint(
            Method::DELETE,
            "/v1/workspaces/{workspace}/layouts/{layout}/rollouts/{rollout_id}",
            key(Manage, Workspace),
            forget::forget_rollout,
        ),
        endpoint(Method::GET, "/v1/sessions/{session_id}", key(Read, Session), sessions::get_session),
        endpoint(
            Method::POST,
            "/v1/sessions/{session_id}/layouts/{layout}/segments",
            key(Ingest, Session),
            appends::append_segment,
        ),
        endpoint(Method::POST, "/v1/sessions/{session_id}/segments:batch", key(Ingest, Session), appends::append_batch),
        endpoint(Method::POST, "/v1/sessions/{session_id}/close", key(Close, Session), sessions::close_session),
        endpoint(Method::GET, "/v1/jobs", key(Read, Filtered), jobs::list_jobs),
        endpoint(Method::GET, "/v1/jobs/{job_id}", key(Read, Job), jobs::get_job),
        endpoint(Method::POST, "/v1/jobs/{job_id}/retry", key(Manage, Job), jobs::retry_job),
    ]
}

/// A workspace's memory: runs, files, instructions, and the running agent's tools.
fn memory_endpoints() -> Vec<Endpoint> {
    use Permission::{Edit, Read};
    use Reach::Workspace;
    vec![
        endpoint(
            Method::GET,
            "/v1/workspaces/{workspace}/layouts/{layout}/phase_two_selection",
            key(Read, Workspace),
            memory::phase_two_selection,
        ),
        endpoint(Method::GET, "/v1/workspaces/{workspace}/layouts/{layout}/runs", key(Read, Workspace), memory::runs),
        endpoint(
            Method::GET,
            "/v1/workspaces/{workspace}/layouts/{layout}/runs/{run_id}",
            key(Read, Workspace),
            history::run,
        ),
        endpoint(
            Method::POST,
            "/v1/workspaces/{workspace}/layouts/{layout}/runs/{run_id}/restore",
            key(Edit, Workspace),
            history::restore,
        ),
        endpoint(
            Method::GET,
            "/v1/workspaces/{workspace}/layouts/{layout}/files",
            key(Read, Workspace),
            listings::list_files,
        ),
        endpoint(
            Method::GET,
            "/v1/workspaces/{workspace}/layouts/{layout}/files/{*path}",
            key(Read, Workspace),
            memory::file,
        ),
        endpoint(
            Method::GET,
            "/v1/workspaces/{workspace}/layouts/{layout}/instructions",
            key(Read, Workspace),
            memory::instructions,
        ),
        endpoint(
            Method::GET,
            "/v1/workspaces/{workspace}/layouts/{layout}/memory/list",
            key(Read, Workspace),
            agent_memory::list,
        ),
        endpoint(
            Method::GET,
            "/v1/workspaces/{workspace}/layouts/{layout}/memory/read",
            key(Read, Workspace),
            agent_memory::read_file,
        ),
        endpoint(
            Method::GET,
            "/v1/workspaces/{workspace}/layouts/{layout}/memory/search",
            key(Read, Workspace),
            ranked::search_route,
        ),
        with_body_limit(
            endpoint(
                Method::POST,
                "/v1/workspaces/{workspace}/layouts/{layout}/memory/edits",
                key(Edit, Workspace),
                agent_memory::edit,
            ),
            crate::domain::memory_edit::MAX_EDIT_BYTES,
        ),
    ]
}

/// Webhooks, the event stream and the MCP endpoint.
fn event_endpoints() -> Vec<Endpoint> {
    use Permission::{Manage, Read};
    use Reach::{EveryWorkspace, Filtered};
    vec![
        endpoint(Method::POST, "/v1/webhooks", key(Manage, EveryWorkspace), webhooks::create_webhook),
        endpoint(Method::GET, "/v1/webhooks", key(Manage, EveryWorkspace), webhooks::list_webhooks),
        endpoint(Method::GET, "/v1/webhooks/{webhook_id}", key(Manage, EveryWorkspace), webhooks::get_webhook),
        endpoint(Method::PATCH, "/v1/webhooks/{webhook_id}", key(Manage, EveryWorkspace), webhooks::update_webhook),
        endpoint(Method::DELETE, "/v1/webhooks/{webhook_id}", key(Manage, EveryWorkspace), webhooks::delete_webhook),
        endpoint(
            Method::POST,
            "/v1/webhooks/{webhook_id}/rotate",
            key(Manage, EveryWorkspace),
            webhooks::rotate_webhook,
        ),
        endpoint(Method::POST, "/v1/webhooks/{webhook_id}/test", key(Manage, EveryWorkspace), webhooks::test_webhook),
        endpoint(
            Method::GET,
            "/v1/webhooks/{webhook_id}/deliveries",
            key(Manage, EveryWorkspace),
            webhooks::webhook_deliveries,
        ),
        endpoint(Method::GET, "/v1/events", key(Read, Filtered), webhooks::stream_events),
        endpoint(Method::POST, "/v1/mcp", key(Read, Filtered), mcp::serve),
        endpoint(Method::GET, "/v1/mcp", key(Read, Filtered), mcp::serve),
        endpoint(Method::DELETE, "/v1/mcp", key(Read, Filtered), mcp::serve),
    ]
}

/// `(method, path, access)` of every route, as the router serves them.
pub fn route_list() -> Vec<(Method, &'static str, Access)> {
    endpoints().into_iter().map(|e| (e.method, e.path, e.access)).collect()
}

/// Requests by route template, method and status, with their latency.
async fn record_http(req: Request<Body>, next: Next) -> Response {
    let route = req.extensions().get::<MatchedPath>().map_or_else(|| "unmatched".to_owned(), |p| p.as_str().to_owned());
    let method = req.method().to_string();
    let started = std::time::Instant::now();
    let response = next.run(req).await;
    crate::metrics::http_request(&route, &method, response.status().as_u16(), started.elapsed());
    response
}

pub fn router(state: AppState) -> Router {
    let body_limit = state.config.quotas.max_segment_bytes;
    let mut by_path: Vec<(&'static str, MethodRouter<AppState>)> = Vec::new();
    for Endpoint { path, handler, access, .. } in endpoints() {
        let handler = match access {
            Access::Key(permission, reach) => {
                let guarded: authorize::Guarded = Arc::new((state.clone(), permission, reach));
                handler.route_layer(middleware::from_fn_with_state(guarded, authorize::guard))
            }
            Access::Open | Access::Admin => handler,
        };
        match by_path.iter_mut().find(|(p, _)| *p == path) {
            Some((_, routes)) => *routes = std::mem::take(routes).merge(handler),
            None => by_path.push((path, handler)),
        }
    }
    let routes = by_path.into_iter().fold(Router::new(), |router, (path, handler)| router.route(path, handler));
    let limiter = middleware::from_fn_with_state(state.clone(), limits::limit_requests);
    routes
        .route_layer(limiter)
        .merge(console::routes())
        .route_layer(middleware::from_fn(record_http))
        .with_state(state)
        .layer(
            ServiceBuilder::new()
                .layer(SetRequestIdLayer::x_request_id(MakeRequestUuid))
                .layer(
                    TraceLayer::new_for_http()
                        .make_span_with(|req: &Request<Body>| {
                            let request_id =
                                req.headers().get("x-request-id").and_then(|v| v.to_str().ok()).unwrap_or("-");
                            tracing::info_span!("request", method = %req.method(), path = %req.uri().path(), request_id)
                        })
                        .on_response(DefaultOnResponse::new().level(tracing::Level::INFO)),
                )
                .layer(PropagateRequestIdLayer::x_request_id())
                .layer(middleware::from_fn(problem_for_bare_errors))
                .layer(CatchPanicLayer::new())
                .layer(TimeoutLayer::with_status_code(StatusCode::REQUEST_TIMEOUT, REQUEST_TIMEOUT))
                .layer(DefaultBodyLimit::max(body_limit)),
        )
}
