//! `memoryd bench` stays runnable: each workload's quick run prints the
//! figures docs/performance.md is made of.

use crate::harness::postgres_url;
use serde_json::Value;
use std::process::Command;

/// `memoryd bench <args> --json`, run in a folder of its own: its figures.
async fn bench_figures(args: &[&str]) -> Value {
    let dir = tempfile::tempdir().unwrap();
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_memoryd"))
        .arg("bench")
        .args(args)
        .arg("--json")
        .current_dir(dir.path())
        .output()
        .await
        .unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    serde_json::from_slice(&output.stdout).unwrap()
}

/// The benchmark command stays runnable: its quick run covers every workload
/// on both backends and prints parsable figures.
#[tokio::test]
async fn the_benchmark_runs_every_workload_on_every_backend() {
    let url = postgres_url().await;
    let figures = bench_figures(&["--quick", "--runs", "1", "--latency-ms", "10", "--postgres-url", &url]).await;
    for backend in ["sqlite", "postgres"] {
        for workload in ["close", "append", "ingest", "selection", "forget", "portability"] {
            let found = figures.as_array().unwrap().iter().any(|f| {
                f["backend"] == backend && f["workload"] == workload && f["median"].as_f64().is_some_and(|m| m > 0.0)
            });
            assert!(found, "{workload} on {backend} is missing: {figures}");
        }
    }
}

#[test]
fn a_bad_setting_stops_start_up_with_the_usage_message() {
    let dir = tempfile::tempdir().unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_memoryd"))
        .arg("serve")
        .current_dir(dir.path())
        .env("MEMORYD_LLM_API", "chat")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("invalid value 'chat'") && stderr.contains("chat_completions"), "{stderr}");
    assert!(!dir.path().join("memoryd-data").exists(), "nothing started");
}

/// The ingest workload says what a segment costs memoryd and how it compares
/// with bare Postgres on the same disk.
#[tokio::test]
async fn the_ingest_workload_reports_cpu_groups_and_the_bare_postgres_ratio() {
    let url = postgres_url().await;
    let quick = ["--workload", "ingest", "--quick", "--runs", "1", "--backend", "sqlite", "--clients", "4"];
    let batches = ["--batch", "1,8"];
    let figures =
        bench_figures(&[&quick[..], &batches, &["--against-postgres", "--postgres-url", &url]].concat()).await;
    let of = |case: &str, metric: &str| {
        let found = figures.as_array().unwrap().iter().find(|f| f["metric"] == metric && f["case"] == case);
        found.and_then(|f| f["median"].as_f64()).unwrap_or_else(|| panic!("no {metric} of {case}: {figures}"))
    };
    let median = |metric: &str| of("C=4", metric);
    let cpu = median("memoryd CPU per segment");
    assert!(cpu > 0.0 && cpu < 1_000_000.0, "{cpu} µs");
    assert!((1.0..=4.0).contains(&median("segments per group")), "{figures}");
    // Batches of eight: a group holds at least one, whole.
    assert!(of("C=4 B=8", "segments per group") >= 8.0, "{figures}");
    assert!(of("C=4 B=8", "throughput") > 0.0 && of("C=4 B=8", "ratio to bare Postgres") > 0.0, "{figures}");
    assert!(median("bare Postgres, same clients") > 0.0);
    let ratio = median("ratio to bare Postgres");
    assert!((median("throughput") / ratio - median("bare Postgres, same clients")).abs() < 1.0, "{figures}");
    // The floor: the same body over bare HTTP costs less than a segment.
    let floor = median("bare HTTP CPU per request");
    assert!(floor > 0.0 && floor < cpu && median("bare HTTP, same clients") > 0.0, "{figures}");
}

/// The drain probe stays runnable and prints its figures.
#[tokio::test]
async fn the_drain_probe_runs() {
    let drain = ["--workload", "drain", "--quick", "--runs", "1", "--backend", "sqlite", "--latency-ms", "0"];
    let figures = bench_figures(&drain).await;
    let rate = figures.as_array().unwrap().iter().find(|f| f["metric"] == "jobs drained per second").unwrap();
    assert!(rate["median"].as_f64().is_some_and(|r| r > 0.0), "{figures}");
}

/// The soak workload: a short one still closes every session it opened, and
/// its closes share phase-two runs.
#[tokio::test]
async fn the_soak_workload_reports_windows_and_the_drain() {
    let soak = ["--workload", "soak", "--duration", "4", "--backend", "sqlite", "--latency-ms", "20"];
    let figures = bench_figures(&soak).await;
    let value = |case: &str, metric: &str| {
        figures.as_array().unwrap().iter().find(|f| f["case"] == case && f["metric"] == metric).unwrap()["median"]
            .as_f64()
            .unwrap()
    };
    let (closes, runs) = (value("total", "closes"), value("total", "phase-two runs"));
    assert!(closes >= 8.0, "{figures}");
    assert!(runs >= 1.0 && runs <= closes, "{figures}");
    assert!(value("t=0-2s", "appends") > 0.0 && value("t=2-4s", "appends") > 0.0, "{figures}");
    assert!(value("total", "drain after the load") >= 0.0, "{figures}");
}
