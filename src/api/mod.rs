//! The HTTP layer: routes, extractors and the problem-document error type.
//! Handlers stay thin; rules live in `domain`, state in `store`.

mod admin;
pub mod error;
mod extract;
mod health;
mod jobs;
mod layouts;
mod sessions;

use crate::config::Config;
use crate::store::DynStore;
use crate::workspace::Volumes;
use axum::Router;
use axum::body::Body;
use axum::extract::DefaultBodyLimit;
use axum::http::{Request, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::routing::{delete, get, post, put};
use error::{code_for_status, problem};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tower::ServiceBuilder;
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer};
use tower_http::timeout::TimeoutLayer;
use tower_http::trace::{DefaultOnResponse, TraceLayer};

/// Longer than the longest `?wait=` of a close (300 s).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(330);

#[derive(Clone)]
pub struct AppState {
    pub store: DynStore,
    pub volumes: Volumes,
    pub config: Arc<Config>,
    /// Flips to `true` on SIGTERM, so long polls answer at once.
    pub shutdown: watch::Receiver<bool>,
}

/// Errors made outside the handlers (unknown route, wrong method, panic,
/// timeout) leave as problem documents too.
async fn problem_for_bare_errors(req: Request<Body>, next: Next) -> Response {
    let response = next.run(req).await;
    let status = response.status();
    let is_problem = response
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/problem+json"));
    if (status.is_client_error() || status.is_server_error()) && !is_problem {
        let detail = match status {
            StatusCode::NOT_FOUND => "No such route.",
            StatusCode::METHOD_NOT_ALLOWED => "This route does not take that method.",
            StatusCode::REQUEST_TIMEOUT => "The request took too long.",
            StatusCode::PAYLOAD_TOO_LARGE => "The body is too large.",
            s if s.is_server_error() => {
                "An internal error occurred; the request id identifies it in the log."
            }
            _ => "The request was refused.",
        };
        if status.is_server_error() {
            tracing::error!(status = status.as_u16(), "request failed outside a handler");
        }
        let mut replaced = problem(status, code_for_status(status), detail);
        if let Some(allow) = response.headers().get(header::ALLOW) {
            replaced.headers_mut().insert(header::ALLOW, allow.clone());
        }
        return replaced;
    }
    response
}

pub fn router(state: AppState) -> Router {
    let body_limit = state.config.max_segment_bytes;
    let v1 = Router::new()
        .route("/admin/tenants", post(admin::create_tenant))
        .route("/admin/tenants/{tenant_id}/keys", post(admin::create_key))
        .route("/admin/keys/{key_id}", delete(admin::revoke_key))
        .route("/layouts", get(layouts::list_layouts))
        .route(
            "/layouts/{layout}",
            put(layouts::put_layout).get(layouts::get_layout),
        )
        .route("/sessions", post(sessions::create_session))
        .route("/sessions/{session_id}", get(sessions::get_session))
        .route(
            "/sessions/{session_id}/layouts/{layout}/segments",
            post(sessions::append_segment),
        )
        .route(
            "/sessions/{session_id}/close",
            post(sessions::close_session),
        )
        .route("/jobs", get(jobs::list_jobs))
        .route("/jobs/{job_id}", get(jobs::get_job));
    Router::new()
        .nest("/v1", v1)
        .route("/healthz", get(health::healthz))
        .route("/readyz", get(health::readyz))
        .with_state(state)
        .layer(
            ServiceBuilder::new()
                .layer(SetRequestIdLayer::x_request_id(MakeRequestUuid))
                .layer(TraceLayer::new_for_http().make_span_with(|req: &Request<Body>| {
                    let request_id = req
                        .headers()
                        .get("x-request-id")
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or("-");
                    tracing::info_span!("request", method = %req.method(), path = %req.uri().path(), request_id)
                }).on_response(DefaultOnResponse::new().level(tracing::Level::INFO)))
                .layer(PropagateRequestIdLayer::x_request_id())
                .layer(middleware::from_fn(problem_for_bare_errors))
                .layer(CatchPanicLayer::new())
                .layer(TimeoutLayer::with_status_code(StatusCode::REQUEST_TIMEOUT, REQUEST_TIMEOUT))
                .layer(DefaultBodyLimit::max(body_limit)),
        )
}
