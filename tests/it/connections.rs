//! Slow, idle, greedy and malformed clients (SPEC §8, §9): none can hold the
//! server, and every refusal is a problem document.

use crate::harness::{Backend, TestApp};
use serde_json::Value;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

async fn app_with_short_limits() -> TestApp {
    TestApp::start_with(Backend::Sqlite, |c| {
        c.http.header_timeout = std::time::Duration::from_secs(1);
        c.http.idle_timeout = std::time::Duration::from_secs(3);
        c.http.body_timeout = std::time::Duration::from_secs(2);
        c.http.max_connections = 3;
        c.quotas.max_segment_bytes = 10_000;
    })
    .await
}

async fn connect(app: &TestApp) -> TcpStream {
    TcpStream::connect(app.base.trim_start_matches("http://")).await.unwrap()
}

/// Reads until the server closes the connection (or `limit` passes: `None`).
async fn read_until_closed(stream: &mut TcpStream, limit: Duration) -> Option<Vec<u8>> {
    let mut received = Vec::new();
    let mut buf = [0u8; 4096];
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        match tokio::time::timeout_at(deadline, stream.read(&mut buf)).await {
            Err(_) => return None,
            Ok(Ok(0)) | Ok(Err(_)) => return Some(received),
            Ok(Ok(n)) => received.extend_from_slice(&buf[..n]),
        }
    }
}

/// Reads one response (headers and a `content-length` body).
async fn read_response(stream: &mut TcpStream, limit: Duration) -> Option<(u16, String, Vec<u8>)> {
    let mut received = Vec::new();
    let mut buf = [0u8; 4096];
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if let Some(end) = received.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&received[..end]).into_owned();
            let length: usize = head
                .lines()
                .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().parse().unwrap()))
                .unwrap_or(0);
            if received.len() >= end + 4 + length {
                let status = head[9..12].parse().unwrap();
                return Some((status, head, received[end + 4..end + 4 + length].to_vec()));
            }
        }
        match tokio::time::timeout_at(deadline, stream.read(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => received.extend_from_slice(&buf[..n]),
            _ => return None,
        }
    }
}

fn assert_problem(status: u16, head: &str, body: &[u8], want_status: u16, want_code: &str) {
    assert_eq!(status, want_status, "{head}");
    let lower = head.to_ascii_lowercase();
    assert!(lower.contains("content-type: application/problem+json"), "{head}");
    assert!(lower.contains("x-request-id: "), "{head}");
    let doc: Value = serde_json::from_slice(body).unwrap_or_else(|e| panic!("not JSON ({e}): {body:?}"));
    assert_eq!((doc["status"].as_u64(), doc["code"].as_str()), (Some(u64::from(want_status)), Some(want_code)));
}

#[tokio::test]
async fn headers_must_arrive_within_the_limit_of_their_first_byte() {
    let app = app_with_short_limits().await;
    let mut stream = connect(&app).await;
    let started = Instant::now();
    stream.write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n").await.unwrap();
    let trickle = async {
        for _ in 0..20 {
            tokio::time::sleep(Duration::from_millis(300)).await;
            if stream.write_all(b"x-slow: 1\r\n").await.is_err() {
                return;
            }
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(6), trickle).await;
    let mut stream = stream;
    assert!(
        read_until_closed(&mut stream, Duration::from_secs(1)).await.is_some(),
        "a trickling client kept its connection"
    );
    assert!(started.elapsed() < Duration::from_secs(7), "{:?}", started.elapsed());
}

#[tokio::test]
async fn an_idle_keep_alive_connection_is_closed_after_the_idle_limit() {
    let app = app_with_short_limits().await;
    let mut stream = connect(&app).await;
    stream.write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n").await.unwrap();
    let (status, _, _) = read_response(&mut stream, Duration::from_secs(5)).await.unwrap();
    assert_eq!(status, 200);
    let idle_since = Instant::now();
    assert!(read_until_closed(&mut stream, Duration::from_secs(8)).await.is_some(), "the idle connection stayed");
    let idle = idle_since.elapsed();
    // The idle limit (3 s) applies, not the header limit (1 s).
    assert!(idle >= Duration::from_millis(2500) && idle < Duration::from_secs(6), "closed after {idle:?}");
    // A connection that never sends a byte is idle too.
    let mut silent = connect(&app).await;
    assert!(read_until_closed(&mut silent, Duration::from_secs(8)).await.is_some());
}

#[tokio::test]
async fn a_body_that_does_not_arrive_in_time_is_a_408() {
    let app = app_with_short_limits().await;
    let tenant = app.tenant().await;
    let mut stream = connect(&app).await;
    let head = format!(
        "POST /v1/sessions/s/layouts/default/segments HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {}\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{{\"rollout_id\"",
        tenant.key
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let started = Instant::now();
    let (status, head, body) = read_response(&mut stream, Duration::from_secs(6)).await.expect("no answer");
    assert_problem(status, &head, &body, 408, "request_timeout");
    assert!(started.elapsed() >= Duration::from_millis(1500), "{:?}", started.elapsed());
}

#[tokio::test]
async fn a_declared_length_over_the_limit_is_refused_before_the_body() {
    let app = app_with_short_limits().await;
    let tenant = app.tenant().await;
    let mut stream = connect(&app).await;
    let head = format!(
        "POST /v1/sessions/s/layouts/default/segments HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {}\r\ncontent-length: 50000000\r\n\r\n",
        tenant.key
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let (status, head, body) = read_response(&mut stream, Duration::from_secs(1)).await.expect("413 before the body");
    assert_problem(status, &head, &body, 413, "payload_too_large");
}

#[tokio::test]
async fn open_connections_are_capped() {
    let app = app_with_short_limits().await;
    let mut held = Vec::new();
    for _ in 0..3 {
        let mut stream = connect(&app).await;
        stream.write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n").await.unwrap();
        assert_eq!(read_response(&mut stream, Duration::from_secs(5)).await.unwrap().0, 200);
        held.push(stream);
    }
    let mut waiting = connect(&app).await;
    waiting.write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n").await.unwrap();
    assert!(read_response(&mut waiting, Duration::from_millis(700)).await.is_none(), "a fourth connection was served");
    drop(held.pop());
    let (status, _, _) = read_response(&mut waiting, Duration::from_secs(3)).await.expect("served once one closed");
    assert_eq!(status, 200);
}

#[tokio::test]
async fn errors_the_http_layer_answers_are_problem_documents() {
    let app = TestApp::start(Backend::Sqlite).await;
    let huge = format!("GET /healthz HTTP/1.1\r\nhost: x\r\nx-huge: {}\r\n\r\n", "a".repeat(600_000));
    let broken_line = "GARBAGE\r\n\r\n".to_owned();
    let two_lengths =
        "POST /v1/sessions HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\ncontent-length: 3\r\n\r\n{}".to_owned();
    for (request, status, code) in
        [(huge, 431, "headers_too_large"), (broken_line, 400, "invalid_request"), (two_lengths, 400, "invalid_request")]
    {
        let mut stream = connect(&app).await;
        let _ = stream.write_all(request.as_bytes()).await;
        let (got, head, body) = read_response(&mut stream, Duration::from_secs(5)).await.expect("an answer");
        assert_problem(got, &head, &body, status, code);
    }
}

#[test]
fn the_limits_default_to_the_spec() {
    use clap::Parser;
    let config = memoryd::config::Config::try_parse_from(["memoryd"]).unwrap();
    assert_eq!(
        (config.http.header_timeout.as_secs(), config.http.body_timeout.as_secs(), config.http.idle_timeout.as_secs()),
        (10, 60, 60)
    );
    assert_eq!((config.http.max_connections, config.quotas.min_free_bytes), (10_000, 64 << 20));
}
