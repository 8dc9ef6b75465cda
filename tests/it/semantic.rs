//! Search by meaning (SPEC §2.10): passages embedded when they are
//! published, and never twice; `semantic` and `hybrid` find a paraphrase
//! that shares no word with memory; an embeddings endpoint that fails
//! fails neither the job nor the search; a forget takes its passages'
//! vectors with it. The fake model's `/v1/embeddings` stands in for the
//! endpoint (`memoryd::fake_embeddings`: words of a topic share a dimension).

use crate::every_backend;
use crate::fake_llm::FakeLlm;
use crate::forget::{canary, conversation, database_holds, database_holds_bytes, forget};
use crate::harness::{Backend, Database, TestApp};
use memoryd::config::Config;
use reqwest::Method;
use serde_json::{Value, json};
use std::time::Duration;

every_backend!(a_paraphrase_is_found_by_meaning_and_a_passage_is_embedded_once);
every_backend!(a_failing_embeddings_endpoint_fails_neither_the_job_nor_the_search);
every_backend!(a_forget_takes_its_passages_vectors_with_it);

const MEMORY: &str = "/v1/workspaces/default/layouts/default";
const NOTES: &str = "# Task Group: tooling\nscope: how the web app is built\n\n\
## Task 1: lockfile trouble\n- pnpm only; npm breaks the lockfile\n\n\
## Task 2: shipping\n- the VPN must be up before a deploy\n\n\
# Task Group: people\n## Task 1: migrations\n- Dana approves every database migration\n";

fn with_embeddings(fake: &FakeLlm) -> impl FnOnce(&mut Config) + use<> {
    let base = fake.base_url.clone();
    move |c: &mut Config| {
        c.embeddings.base_url = Some(base);
        c.embeddings.model = Some("fake-embedder".into());
        c.embeddings.api_key = Some("test-embeddings-key".into());
    }
}

async fn search(app: &TestApp, key: &str, query: &str) -> (u16, Value) {
    let res = app.request(Method::GET, &format!("{MEMORY}/memory/search?{query}"), key).send().await.unwrap();
    (res.status().as_u16(), res.json().await.unwrap())
}

async fn edit(app: &TestApp, key: &str, operations: Value) {
    let res = app.request(Method::POST, &format!("{MEMORY}/memory/edits?wait=30"), key);
    let res = res.json(&json!({ "operations": operations })).send().await.unwrap();
    assert_eq!(res.status(), 200, "{}", res.text().await.unwrap());
}

/// Searches by meaning until every passage has its vector.
async fn embedded(app: &TestApp, key: &str) -> Value {
    for _ in 0..200 {
        let (status, found) = search(app, key, "query=anything&mode=semantic").await;
        assert_eq!(status, 200, "{found}");
        if found["not_embedded"] == 0 {
            return found;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the passages were never all embedded");
}

/// The passage texts the endpoint was asked to embed (queries left out).
fn passage_inputs(fake: &FakeLlm) -> Vec<String> {
    fake.embedding_calls().into_iter().filter(|c| c.len() != 1 || c[0].contains('\n')).flatten().collect()
}

async fn a_paraphrase_is_found_by_meaning_and_a_passage_is_embedded_once(backend: Backend) {
    let fake = FakeLlm::start().await;
    let app = TestApp::start_with(backend, with_embeddings(&fake)).await;
    let t = app.tenant().await;
    app.post_segment(&t.key, "s", "default", json!({"rollout_id": "r", "input": "hi"})).await;
    edit(&app, &t.key, json!([{"command": "create", "path": "MEMORY.md", "file_text": NOTES}])).await;
    embedded(&app, &t.key).await;
    let first_round = passage_inputs(&fake);
    assert_eq!(first_round.len(), 4, "one input a passage: {first_round:?}");

    // No line holds the words, no passage holds a word of them: only meaning finds it.
    let (_, lines) = search(&app, &t.key, "query=which%20package%20manager").await;
    assert_eq!(lines["matches"], json!([]));
    let (_, words) = search(&app, &t.key, "query=which%20package%20manager&mode=ranked").await;
    assert_eq!(words["matches"], json!([]), "{words}");
    for mode in ["semantic", "hybrid"] {
        let (status, found) = search(&app, &t.key, &format!("query=which%20package%20manager&mode={mode}")).await;
        assert_eq!((status, found["mode"].as_str()), (200, Some(mode)), "{found}");
        assert_eq!(found["matches"][0]["heading"], "Task Group: tooling › Task 1: lockfile trouble", "{found}");
        assert_eq!(found["not_embedded"], 0);
    }
    let (_, approvals) = search(&app, &t.key, "query=who%20reviews%20schema%20changes&mode=semantic&limit=1").await;
    assert_eq!(approvals["matches"][0]["heading"], "Task Group: people › Task 1: migrations", "{approvals}");
    assert!(approvals["next_cursor"].is_string());

    // A publish that changes one passage embeds that one alone.
    let append = "## Task 1: migrations\n- Dana approves every database migration\n- and reviews the rollback plan\n";
    edit(
        &app,
        &t.key,
        json!([{"command": "str_replace", "path": "MEMORY.md",
        "old_str": "## Task 1: migrations\n- Dana approves every database migration\n", "new_str": append}]),
    )
    .await;
    embedded(&app, &t.key).await;
    let second_round = passage_inputs(&fake);
    assert_eq!(second_round.len(), 5, "{second_round:?}");
    assert!(second_round[4].contains("rollback plan"), "{second_round:?}");
    let usage = app.json(Method::GET, "/v1/usage", &t.key).await;
    let tokens: i64 = usage["days"].as_array().unwrap().iter().map(|d| d["embedding_tokens"].as_i64().unwrap()).sum();
    assert!(tokens > 0, "{usage}");
}

async fn a_failing_embeddings_endpoint_fails_neither_the_job_nor_the_search(backend: Backend) {
    let fake = FakeLlm::start().await;
    fake.set_embeddings_failing(true);
    let app = TestApp::start_with(backend, with_embeddings(&fake)).await;
    let t = app.tenant().await;
    app.post_segment(&t.key, "s", "default", json!({"rollout_id": "r", "input": "hi"})).await;
    edit(&app, &t.key, json!([{"command": "create", "path": "MEMORY.md", "file_text": NOTES}])).await;
    let (status, found) = search(&app, &t.key, "query=the%20VPN%20and%20deploy&mode=semantic").await;
    assert_eq!(status, 200, "{found}");
    assert_eq!(found["not_embedded"], 4, "nothing embedded, the query neither: {found}");
    assert_eq!(found["matches"][0]["heading"], "Task Group: tooling › Task 2: shipping", "searched by words");

    fake.set_embeddings_failing(false);
    let found = embedded(&app, &t.key).await;
    assert_eq!(found["not_embedded"], 0, "the sweep embedded them once the endpoint came back");
    let (_, hybrid) = search(&app, &t.key, "query=when%20can%20we%20ship%20to%20production&mode=hybrid").await;
    assert_eq!(hybrid["matches"][0]["heading"], "Task Group: tooling › Task 2: shipping", "{hybrid}");
}

async fn a_forget_takes_its_passages_vectors_with_it(backend: Backend) {
    let fake = FakeLlm::start().await;
    let app = TestApp::start_with(backend, with_embeddings(&fake)).await;
    let t = app.tenant().await;
    let secret = canary();
    conversation(&app, &t, "s1", "chat-canary", &format!("My locker code is {secret}.")).await;
    conversation(&app, &t, "s2", "chat-keep", "I prefer green tea in the morning.").await;
    embedded(&app, &t.key).await;
    let summaries = app.workspace_dir(&t, "default").join("memories/rollout_summaries");
    let canary_summary = std::fs::read_dir(&summaries)
        .unwrap()
        .flatten()
        .map(|e| std::fs::read_to_string(e.path()).unwrap())
        .find(|text| text.contains(&secret))
        .expect("the conversation has its summary");
    let passage = memoryd::domain::passages::cut(&canary_summary).remove(0);
    let digest = memoryd::domain::passages::digest(&passage);
    // What was embedded: the passage as the embeddings client sends it (cut at
    // its input limit: a summary with a long conversation passes it).
    let input = memoryd::llm::embeddings::sent_input(&passage.ranked_text);
    // The client scales every vector it is given to unit length itself: the
    // fake's vector, already of length one by its own sum, can come out a bit
    // or two apart, depending on the canary's words.
    let stored = memoryd::llm::embeddings::unit(memoryd::fake_embeddings::vector(input));
    let vector = memoryd::meaning::encode(&stored);
    // The summaries' passages are embedded with the phase two that follows
    // their phase one, which may still be under way on a loaded machine.
    let started = std::time::Instant::now();
    while !database_holds_bytes(&app, backend, &vector) && started.elapsed() < Duration::from_secs(20) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(database_holds(&app, backend, &digest), "the passage's vector is stored under its digest");
    assert!(database_holds_bytes(&app, backend, &vector), "the vector itself is in the database");

    let job = forget(&app, &t.key, &format!("{MEMORY}/rollouts/chat-canary")).await;
    let done = app.wait_for_job(&t.key, job["job_id"].as_str().unwrap()).await;
    assert_eq!(done["state"], "succeeded", "{done}");
    // The job is succeeded once its finish commits; SQLite's log (which
    // holds the rows as they were) is folded in by the worker just after.
    let mut gone = false;
    for _ in 0..100 {
        gone = !database_holds(&app, backend, &digest) && !database_holds_bytes(&app, backend, &vector);
        if gone {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(gone, "the forgotten passage's vector is gone");
    let (_, found) = search(&app, &t.key, &format!("query={secret}&mode=hybrid")).await;
    assert!(!found.to_string().contains(&secret), "{found}");
    let kept = embedded(&app, &t.key).await;
    assert_eq!(kept["mode"], "semantic", "what was kept is still searched by meaning");

    // A forgotten workspace leaves no vector and no indexing state.
    let mut db = Database::connect(backend, &app.database_url).await;
    assert!(db.count("SELECT count(*) FROM passage_vectors").await > 0);
    let job = forget(&app, &t.key, "/v1/workspaces/default").await;
    assert_eq!(app.wait_for_job(&t.key, job["job_id"].as_str().unwrap()).await["state"], "succeeded");
    let left = "SELECT (SELECT count(*) FROM passage_vectors) + (SELECT count(*) FROM passage_indexes)";
    assert_eq!(db.count(left).await, 0);

    // Published again under the same name: a new indexing, of the new passages only.
    app.post_segment(&t.key, "s3", "default", json!({"rollout_id": "r3", "input": "hi"})).await;
    edit(&app, &t.key, json!([{"command": "create", "path": "MEMORY.md", "file_text": NOTES}])).await;
    embedded(&app, &t.key).await;
    assert_eq!(db.count("SELECT count(*) FROM passage_vectors").await, 4, "the four passages of NOTES, no more");
    assert!(!database_holds(&app, backend, &digest));
}
