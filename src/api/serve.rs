//! The HTTP/1.1 accept loop. memoryd serves its connections itself, instead
//! of through `axum::serve`, for what SPEC §9 asks of slow and idle clients:
//! a request's headers must arrive within a limit of its first byte, an idle
//! keep-alive connection is closed after another, and open connections are
//! capped. It also turns the few answers hyper writes on its own (a request
//! it cannot parse, headers too large) into problem documents (SPEC §8).

use super::error::{PROBLEM_CONTENT_TYPE, code_for_status, problem_json};
use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use hyper_util::rt::TokioIo;
use std::convert::Infallible;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, ready};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

/// The limits of SPEC §9 (configurable so that tests need not wait a minute).
#[derive(Debug, Clone, Copy)]
pub struct ConnectionLimits {
    pub max_connections: usize,
    /// From a request's first byte to the end of its headers.
    pub header_timeout: Duration,
    /// A keep-alive connection with no request under way.
    pub idle_timeout: Duration,
}

/// Serves `app` on `listener` until `shutdown` is cancelled, then lets the
/// requests under way finish and returns once every connection has closed.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: ConnectionLimits,
    shutdown: CancellationToken,
) -> io::Result<()> {
    let permits = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let mut connections = JoinSet::new();
    loop {
        // At the cap, further connections wait in the kernel's listen queue.
        let permit = tokio::select! {
            permit = permits.clone().acquire_owned() => permit.expect("the semaphore is never closed"),
            _ = shutdown.cancelled() => break,
        };
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of file descriptors, say: pause rather than spin.
                    tracing::warn!(error = %e, "accepting a connection failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = shutdown.cancelled() => break,
        };
        let (stream, peer) = stream;
        let _ = stream.set_nodelay(true);
        connections.spawn(serve_connection(stream, peer, app.clone(), limits, shutdown.clone(), permit));
        while connections.try_join_next().is_some() {}
    }
    drop(listener);
    while connections.join_next().await.is_some() {}
    Ok(())
}

async fn serve_connection(
    stream: TcpStream,
    peer: std::net::SocketAddr,
    app: Router,
    limits: ConnectionLimits,
    shutdown: CancellationToken,
    _permit: tokio::sync::OwnedSemaphorePermit,
) {
    let activity = Arc::new(Activity::new());
    let io = TokioIo::new(WatchedStream { inner: stream, activity: activity.clone(), replacement: None });
    let service = {
        let activity = activity.clone();
        hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
            let app = app.clone();
            let request = RequestUnderWay::start(activity.clone());
            async move {
                let mut req = req.map(Body::new);
                req.extensions_mut().insert(axum::extract::ConnectInfo(peer));
                let response = app.oneshot(req).await.unwrap_or_else(|never: Infallible| match never {});
                // The request counts as under way until hyper has taken its whole body.
                Ok::<_, Infallible>(response.map(|body| {
                    Body::new(body.map_frame(move |frame| {
                        let _under_way = &request;
                        frame
                    }))
                }))
            }
        })
    };
    let connection = hyper::server::conn::http1::Builder::new().serve_connection(io, service);
    tokio::pin!(connection);
    let watchdog = activity.watchdog(limits);
    tokio::pin!(watchdog);
    let mut stopping = false;
    loop {
        tokio::select! {
            result = connection.as_mut() => {
                if let Err(e) = result {
                    tracing::debug!(error = %e, "connection ended with an error");
                }
                return;
            }
            phase = &mut watchdog => {
                tracing::debug!(?phase, "closing a connection that outstayed its limit");
                return;
            }
            _ = shutdown.cancelled(), if !stopping => {
                stopping = true;
                connection.as_mut().graceful_shutdown();
            }
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Waiting for a request's first byte.
    Idle,
    /// A request's first byte is in; its headers are not complete.
    Head,
    /// hyper has parsed a request and the app is answering it.
    Busy,
}

/// Where a connection is between requests, and since when.
struct Activity {
    state: Mutex<(Phase, Instant)>,
}

impl Activity {
    fn new() -> Self {
        Self { state: Mutex::new((Phase::Idle, Instant::now())) }
    }

    fn get(&self) -> (Phase, Instant) {
        *self.state.lock().expect("the lock is never poisoned")
    }

    fn set(&self, phase: Phase) {
        *self.state.lock().expect("the lock is never poisoned") = (phase, Instant::now());
    }

    fn bytes_arrived(&self) {
        let mut state = self.state.lock().expect("the lock is never poisoned");
        if state.0 == Phase::Idle {
            *state = (Phase::Head, Instant::now());
        }
    }

    /// Resolves when the connection has been idle, or sent an incomplete
    /// head, for longer than allowed. A request under way has its own limits
    /// (the body timeout and the request timeout).
    async fn watchdog(&self, limits: ConnectionLimits) -> Phase {
        loop {
            let (phase, since) = self.get();
            let limit = match phase {
                Phase::Idle => limits.idle_timeout,
                Phase::Head => limits.header_timeout,
                Phase::Busy => {
                    tokio::time::sleep(limits.header_timeout.min(limits.idle_timeout)).await;
                    continue;
                }
            };
            let deadline = since + limit;
            if Instant::now() >= deadline {
                return phase;
            }
            tokio::time::sleep_until(deadline).await;
        }
    }
}

/// A request being answered; dropped when hyper has taken the response's body.
struct RequestUnderWay(Arc<Activity>);

impl RequestUnderWay {
    fn start(activity: Arc<Activity>) -> Self {
        activity.set(Phase::Busy);
        Self(activity)
    }
}

impl Drop for RequestUnderWay {
    fn drop(&mut self) {
        self.0.set(Phase::Idle);
    }
}

/// The socket, noting when a request's first bytes arrive, and replacing
/// hyper's own bodiless error answers with problem documents.
struct WatchedStream {
    inner: TcpStream,
    activity: Arc<Activity>,
    /// A problem document still to be written, and how much of it is written.
    replacement: Option<(Vec<u8>, usize)>,
}

impl WatchedStream {
    fn poll_write_replacement(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while let Some((bytes, written)) = &mut self.replacement {
            if *written == bytes.len() {
                self.replacement = None;
                break;
            }
            let n = ready!(Pin::new(&mut self.inner).poll_write(cx, &bytes[*written..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            *written += n;
        }
        Poll::Ready(Ok(()))
    }
}

impl AsyncRead for WatchedStream {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.activity.bytes_arrived();
        }
        polled
    }
}

impl AsyncWrite for WatchedStream {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        ready!(self.poll_write_replacement(cx))?;
        if self.activity.get().0 != Phase::Busy
            && let Some(status) = bare_error_status(buf)
        {
            self.replacement = Some((problem_response(status), 0));
            // The replacement stands for hyper's whole answer; what is left
            // of it is written by the next write, flush or shutdown.
            let _ = self.poll_write_replacement(cx)?;
            return Poll::Ready(Ok(buf.len()));
        }
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.poll_write_replacement(cx))?;
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.poll_write_replacement(cx))?;
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// The status of an error answer that hyper wrote without asking the app:
/// a response head with a 4xx or 5xx status and no `x-request-id`, which
/// every answer of the app carries.
fn bare_error_status(buf: &[u8]) -> Option<StatusCode> {
    let head_end = buf.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = std::str::from_utf8(&buf[..head_end]).ok()?;
    let status_line = head.lines().next()?;
    let code = status_line.strip_prefix("HTTP/1.")?.get(2..5)?;
    let status = StatusCode::from_bytes(code.as_bytes()).ok()?;
    let has_request_id = head
        .lines()
        .skip(1)
        .any(|line| line.split_once(':').is_some_and(|(name, _)| name.trim().eq_ignore_ascii_case("x-request-id")));
    ((status.is_client_error() || status.is_server_error()) && !has_request_id).then_some(status)
}

/// A whole HTTP/1.1 answer (hyper closes the connection after it).
fn problem_response(status: StatusCode) -> Vec<u8> {
    let detail = match status {
        StatusCode::BAD_REQUEST => "The request is not valid HTTP/1.1.",
        StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE => "The request's headers are too large.",
        StatusCode::URI_TOO_LONG => "The request target is too long.",
        StatusCode::HTTP_VERSION_NOT_SUPPORTED => "Only HTTP/1.0 and HTTP/1.1 are served.",
        _ => "The request was refused before it could be read.",
    };
    let request_id = uuid::Uuid::new_v4();
    tracing::warn!(status = status.as_u16(), %request_id, "refused a request that could not be parsed");
    let body = problem_json(status, code_for_status(status), detail);
    let head = format!(
        "HTTP/1.1 {} {}\r\ncontent-type: {PROBLEM_CONTENT_TYPE}\r\nx-request-id: {request_id}\r\nconnection: close\r\ncontent-length: {}\r\n\r\n",
        status.as_u16(),
        status.canonical_reason().unwrap_or("Error"),
        body.len()
    );
    [head.into_bytes(), body.into_bytes()].concat()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_bare_error_heads_are_replaced() {
        let hyper_431 = b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-length: 0\r\ndate: x\r\n\r\n";
        assert_eq!(bare_error_status(hyper_431), Some(StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE));
        let hyper_400 = b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n";
        assert_eq!(bare_error_status(hyper_400), Some(StatusCode::BAD_REQUEST));
        let app_404 = b"HTTP/1.1 404 Not Found\r\nx-request-id: abc\r\ncontent-length: 2\r\n\r\n{}";
        assert_eq!(bare_error_status(app_404), None);
        assert_eq!(bare_error_status(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n"), None);
        assert_eq!(bare_error_status(b"{\"body\": \"HTTP/1.1 400\"}"), None);
        assert_eq!(bare_error_status(b"HTTP/1.1 400 Bad Request\r\n"), None, "an incomplete head is not judged");
    }

    #[test]
    fn the_replacement_is_a_whole_problem_document() {
        let bytes = problem_response(StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE);
        let text = String::from_utf8(bytes).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 431 Request Header Fields Too Large\r\n"));
        assert!(head.contains("content-type: application/problem+json"));
        assert!(head.contains("x-request-id: "));
        assert!(head.contains(&format!("content-length: {}", body.len())));
        let doc: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!((doc["status"].as_u64(), doc["code"].as_str()), (Some(431), Some("headers_too_large")));
    }
}
