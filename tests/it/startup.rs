//! Starting where a container starts: before its database is up, and
//! asked for its health by the image's own check.

use crate::harness::isolated_postgres_url;
use crate::process::{Memoryd, free_port};
use std::process::Command;
use std::time::{Duration, Instant};

/// Forwards every connection to `127.0.0.1:{listen}` to `upstream`, from now on.
async fn forward(listen: u16, upstream: String) {
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", listen)).await.unwrap();
    tokio::spawn(async move {
        while let Ok((mut inbound, _)) = listener.accept().await {
            let upstream = upstream.clone();
            tokio::spawn(async move {
                if let Ok(mut outbound) = tokio::net::TcpStream::connect(upstream).await {
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                }
            });
        }
    });
}

async fn wait_for_log(memoryd: &Memoryd, text: &str) {
    let started = Instant::now();
    while !memoryd.log_text().contains(text) {
        assert!(started.elapsed() < Duration::from_secs(20), "no {text:?} in the log: {}", memoryd.log_text());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A replica whose Postgres is not listening yet waits, says what for, and
/// serves once the database answers; with no wait allowed it stops at once
/// and says why.
#[tokio::test]
async fn a_replica_started_before_its_database_waits_for_it_and_says_why() {
    let dir = tempfile::tempdir().unwrap();
    let mut url = reqwest::Url::parse(&isolated_postgres_url().await).unwrap();
    let upstream = format!("{}:{}", url.host_str().unwrap(), url.port().unwrap_or(5432));
    let port = free_port();
    url.set_port(Some(port)).unwrap();
    let env = [("DATABASE_URL", url.to_string())];
    let mut memoryd = Memoryd::spawn(dir.path(), "waiting", &["serve"], &env);
    wait_for_log(&memoryd, "waiting for the database").await;
    assert!(memoryd.log_text().contains("refused"), "the reason is given: {}", memoryd.log_text());
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(memoryd.child.try_wait().unwrap().is_none(), "still waiting: {}", memoryd.log_text());

    forward(port, upstream).await;
    memoryd.ready(&reqwest::Client::new()).await;
    memoryd.signal("-TERM");
    assert!(memoryd.exit().await.success());

    url.set_port(Some(free_port())).unwrap();
    let no_wait = [("DATABASE_URL", url.to_string()), ("MEMORYD_DATABASE_WAIT_SECS", "0".to_owned())];
    let mut impatient = Memoryd::spawn(dir.path(), "impatient", &["serve"], &no_wait);
    let started = Instant::now();
    assert!(!impatient.exit().await.success(), "no database, no wait: it stops");
    assert!(started.elapsed() < Duration::from_secs(10));
    let log = impatient.log_text();
    assert!(log.contains("cannot start") && log.contains("refused"), "the reason is given: {log}");
    assert!(!log.contains("waiting for the database"), "{log}");

    // Asked to stop while it waits, it stops at once.
    url.set_port(Some(free_port())).unwrap();
    let mut waiting = Memoryd::spawn(dir.path(), "stopped", &["serve"], &[("DATABASE_URL", url.to_string())]);
    wait_for_log(&waiting, "waiting for the database").await;
    waiting.signal("-TERM");
    let asked = Instant::now();
    assert!(waiting.exit().await.success(), "{}", waiting.log_text());
    assert!(asked.elapsed() < Duration::from_secs(5), "{:?}", asked.elapsed());
    assert!(waiting.log_text().contains("stopped before it started"));
}

fn health(listen: &str, extra: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_memoryd"))
        .arg("health")
        .args(extra)
        .env("MEMORYD_LISTEN", listen)
        .output()
        .unwrap()
}

/// `memoryd health` asks the address `MEMORYD_LISTEN` names — any address,
/// every interface asked on the loopback — and fails, saying where it asked,
/// when nothing answers there.
#[tokio::test]
async fn the_health_command_asks_where_the_server_listens() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let listen = format!("0.0.0.0:{port}");
    let memoryd = Memoryd::spawn(dir.path(), "healthy", &["serve"], &[("MEMORYD_LISTEN", listen.clone())]);
    let started = Instant::now();
    while !health(&listen, &["--ready"]).status.success() {
        assert!(started.elapsed() < Duration::from_secs(20), "never ready: {}", memoryd.log_text());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(health(&listen, &[]).status.success());
    assert!(health(&format!("127.0.0.1:{port}"), &[]).status.success());

    let nowhere = format!("127.0.0.1:{}", free_port());
    let refused = health(&nowhere, &[]);
    assert!(!refused.status.success());
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(said.contains(&format!("http://{nowhere}/healthz")), "{said}");
}
