//! Replicas with no shared folder killed in the middle of a publish to a
//! bucket (SPEC §6.1): each run's files are all visible or none is, on the
//! replica that comes next; what a killed run wrote and no finish recorded
//! is swept; a recorded run's files reach their plain keys.

use crate::fake_llm::{FakeLlm, Reply};
use crate::harness::Backend;
use crate::process::{Memoryd, database_env, get_json, jobs_of_kind, model_env, new_tenant, post_segment};
use serde_json::json;
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

/// The paths of the twelve files round `round`'s consolidation adds.
fn round_files(round: u64) -> Vec<String> {
    crate::publish::round_files(round).iter().map(|file| format!("memories/{file}")).collect()
}

/// Each round's replica has a data dir of its own; it is killed at moments
/// around the end of a consolidation that adds twelve files.
#[tokio::test]
async fn a_replica_killed_mid_publish_leaves_all_or_nothing_and_its_leftovers_swept() {
    let fake = FakeLlm::start().await;
    fake.set_default(Reply::artifacts("r", "summary", "raw").now());
    fake.set_agent_default(Reply::Text("done").now());
    let dir = tempfile::tempdir().unwrap();
    let mut env = model_env(&fake);
    env.extend(database_env(Backend::Bucket).await);
    env.extend([("MEMORYD_JOB_LEASE_SECS", "1".into()), ("MEMORYD_WORKER_CONCURRENCY", "1".into())]);
    let http = reqwest::Client::new();
    let spawn = |round: u64| {
        let mut env = env.clone();
        env.push(("MEMORYD_DATA_DIR", dir.path().join(format!("data-{round}")).display().to_string()));
        Memoryd::spawn(dir.path(), &format!("round{round}"), &["serve"], &env)
    };
    let (mut tenant, mut recorded_runs) = (None, BTreeSet::new());
    for round in 0..7u64 {
        let mut memoryd = spawn(round);
        memoryd.ready(&http).await;
        let (tenant_id, key) = match &tenant {
            Some(made) => Clone::clone(made),
            None => tenant.insert(new_tenant(&http, &memoryd.base).await).clone(),
        };
        let runs = settled_runs(&http, &memoryd.base, &key).await;
        for earlier in 0..round {
            let files = round_files(earlier);
            let mut present = 0;
            for file in &files {
                let read = crate::process::stored_file(&env, dir.path(), &tenant_id, "default", file).await;
                present += usize::from(read.is_some());
            }
            let recorded = runs.iter().any(|changed| changed.contains(&files[0]));
            assert_eq!(present, if recorded { 12 } else { 0 }, "round {earlier}'s files after restart {round}");
            if recorded {
                recorded_runs.insert(earlier);
            }
        }
        let session = format!("s{round}");
        fake.push(Reply::artifacts("r", "summary", "raw").now());
        fake.push(crate::publish::add_all(&crate::publish::round_files(round), &session).now());
        fake.push(Reply::Text("done").now());
        let before = fake.phase_two_requests().len();
        post_segment(&http, &memoryd.base, &key, &session, json!({"rollout_id": format!("r{round}"), "input": "hi"}))
            .await;
        http.post(format!("{}/v1/sessions/{session}/close", memoryd.base)).bearer_auth(&key).send().await.unwrap();
        let started = Instant::now();
        while fake.phase_two_requests().len() < before + 2 {
            assert!(started.elapsed() < Duration::from_secs(20), "the final turn never came");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        // 0 to 720 ms: from the versions' writes to after the finish.
        tokio::time::sleep(Duration::from_millis(round * round * 20)).await;
        memoryd.signal("-KILL");
        memoryd.exit().await;
    }
    assert!(!recorded_runs.is_empty(), "no run was ever published; the test proved nothing");
    eprintln!("runs recorded before a kill or a restart: {recorded_runs:?} of 0..7");
    // Older than the sweep's grace (four leases), a replica's first sweep
    // removes every version no finish recorded; the jobs API places the rest.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let last = spawn(99);
    last.ready(&http).await;
    let (tenant_id, key) = tenant.unwrap();
    settled_runs(&http, &last.base, &key).await;
    let prefix = format!("{}/{tenant_id}/default", crate::s3::prefix_of(&env).unwrap());
    let store = memoryd::store::connect(&env.iter().find(|(n, _)| *n == "DATABASE_URL").unwrap().1).await.unwrap();
    let workspace = memoryd::domain::ids::WorkspaceName::parse("default").unwrap();
    let started = Instant::now();
    let current = loop {
        // Read again each time: a run the last replica recovered may publish meanwhile.
        let current = store.current_files(tenant_id.parse().unwrap(), &workspace).await.unwrap().files;
        // An empty file (a layout's starting ones) needs no object.
        let with_bytes = current.iter().filter(|(_, v)| v.bytes > 0);
        let expected: BTreeSet<String> =
            with_bytes.map(|(path, v)| format!(".memoryd/versions/{}/{path}", v.publish_id)).collect();
        let keys: BTreeSet<String> = crate::s3::keys_under(&prefix).await.into_iter().collect();
        let versions: BTreeSet<String> = keys.iter().filter(|k| k.starts_with(".memoryd/versions/")).cloned().collect();
        let unplaced: Vec<&String> = current.iter().map(|(path, _)| path).filter(|p| !keys.contains(*p)).collect();
        if versions == expected && unplaced.is_empty() {
            eprintln!("swept after {:?}", started.elapsed());
            break current;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "left: {:?}; missing: {:?}; not placed: {unplaced:?}",
            versions.difference(&expected).collect::<Vec<_>>(),
            expected.difference(&versions).collect::<Vec<_>>(),
        );
        jobs_of_kind(&http, &last.base, &key, "phase_two").await;
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    for round in &recorded_runs {
        assert!(round_files(*round).iter().all(|f| current.iter().any(|(path, _)| path == f)));
    }
}

/// Once no phase two is queued or running: each succeeded run's changed files.
async fn settled_runs(http: &reqwest::Client, base: &str, key: &str) -> Vec<String> {
    let started = Instant::now();
    while jobs_of_kind(http, base, key, "phase_two")
        .await
        .iter()
        .any(|j| matches!(j["state"].as_str(), Some("queued" | "running")))
    {
        assert!(started.elapsed() < Duration::from_secs(30), "the recovered queue never settled");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let runs = get_json(http, base, key, "/v1/workspaces/default/layouts/default/runs").await;
    runs["runs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["state"] == "succeeded")
        .map(|r| r["files_changed"].to_string())
        .collect()
}
