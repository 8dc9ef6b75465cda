//! Prometheus metrics: one recorder per process, installed on first use, and
//! the helpers that name every family in one place.

use metrics::{counter, gauge, histogram};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use std::sync::OnceLock;
use std::time::Duration;

static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();

const SECONDS_BUCKETS: [f64; 14] = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0];
const GROUP_BUCKETS: [f64; 7] = [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0];
const TURN_BUCKETS: [f64; 9] = [0.0, 1.0, 2.0, 3.0, 5.0, 10.0, 25.0, 100.0, 500.0];

/// The process's recorder; installed once, shared by every server in it.
pub fn handle() -> &'static PrometheusHandle {
    HANDLE.get_or_init(|| {
        PrometheusBuilder::new()
            .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), &SECONDS_BUCKETS)
            .and_then(|b| b.set_buckets_for_metric(Matcher::Full("memoryd_phase_two_turns".into()), &TURN_BUCKETS))
            .and_then(|b| b.set_buckets_for_metric(Matcher::Full("memoryd_append_group_size".into()), &GROUP_BUCKETS))
            .expect("the buckets are not empty")
            .install_recorder()
            .unwrap_or_else(|_| {
                // Another recorder is already global (only in unusual embeddings):
                // keep one of our own so that rendering still works.
                PrometheusBuilder::new().build_recorder().handle()
            })
    })
}

pub fn http_request(route: &str, method: &str, status: u16, elapsed: Duration) {
    let labels = [("route", route.to_owned()), ("method", method.to_owned()), ("status", status.to_string())];
    counter!("memoryd_http_requests_total", &labels).increment(1);
    histogram!("memoryd_http_request_duration_seconds", &labels[..2]).record(elapsed.as_secs_f64());
}

pub fn segment_ingested(bytes: usize) {
    counter!("memoryd_segments_ingested_total").increment(1);
    counter!("memoryd_segment_bytes_total").increment(bytes as u64);
}

/// The size of each group of appends written in one transaction.
pub fn append_group(appends: usize) {
    histogram!("memoryd_append_group_size").record(appends as f64);
}

/// This replica's append queue, set at each scrape: appends waiting for a
/// group, and groups under way.
pub fn append_queue(waiting: usize, groups_running: usize) {
    gauge!("memoryd_appends_waiting").set(waiting as f64);
    gauge!("memoryd_append_groups_running").set(groups_running as f64);
}

/// A hot table memoryd vacuumed itself.
pub fn table_vacuumed(table: &str) {
    counter!("memoryd_tables_vacuumed_total", "table" => table.to_owned()).increment(1);
}

pub fn session_opened() {
    counter!("memoryd_sessions_opened_total").increment(1);
}

pub fn session_closed() {
    counter!("memoryd_sessions_closed_total").increment(1);
}

/// Eager phase-one jobs queued for idle rollouts of open sessions.
pub fn eager_phase_one_queued(jobs: usize) {
    counter!("memoryd_eager_phase_one_queued_total").increment(jobs as u64);
}

/// A phase one that found its raw memory already made at the committed length.
pub fn phase_one_reused() {
    counter!("memoryd_phase_one_reused_total").increment(1);
}

/// One finished attempt; `outcome` is `succeeded`, `skipped`, `retry` or `failed`.
pub fn job_attempt(kind: &str, outcome: &str, elapsed: Duration) {
    let labels = [("kind", kind.to_owned()), ("outcome", outcome.to_owned())];
    counter!("memoryd_job_attempts_total", &labels).increment(1);
    histogram!("memoryd_job_duration_seconds", &labels[..1]).record(elapsed.as_secs_f64());
    if outcome != "retry" {
        counter!("memoryd_jobs_finished_total", &[("kind", kind.to_owned()), ("state", outcome.to_owned())])
            .increment(1);
    }
}

/// The queue as the database holds it, set at every scrape.
pub fn job_queue(kind: &str, state: &str, count: i64) {
    gauge!("memoryd_jobs", &[("kind", kind.to_owned()), ("state", state.to_owned())]).set(count as f64);
}

pub fn model_call(phase: &str, api: &str, outcome: &str, elapsed: Duration, input_tokens: u64, output_tokens: u64) {
    let labels = [("phase", phase.to_owned()), ("api", api.to_owned()), ("outcome", outcome.to_owned())];
    counter!("memoryd_model_calls_total", &labels).increment(1);
    histogram!("memoryd_model_call_duration_seconds", &labels[..2]).record(elapsed.as_secs_f64());
    counter!("memoryd_model_input_tokens_total", &labels[..1]).increment(input_tokens);
    counter!("memoryd_model_output_tokens_total", &labels[..1]).increment(output_tokens);
}

/// One call of the embeddings endpoint: for `index` (passages at publish) or `query`.
pub fn embeddings_call(purpose: &'static str, outcome: &'static str, elapsed: Duration, inputs: usize, tokens: u64) {
    let labels = [("purpose", purpose), ("outcome", outcome)];
    counter!("memoryd_embeddings_calls_total", &labels).increment(1);
    histogram!("memoryd_embeddings_call_duration_seconds", &labels[..1]).record(elapsed.as_secs_f64());
    counter!("memoryd_embeddings_inputs_total", &labels[..1]).increment(inputs as u64);
    counter!("memoryd_embeddings_tokens_total", &labels[..1]).increment(tokens);
}

/// Passages an indexing found without a vector: `embedded` by a call, or
/// `reused` from an identical passage the tenant already has.
pub fn embeddings_passages(how: &'static str, n: usize) {
    counter!("memoryd_embeddings_passages_total", &[("how", how)]).increment(n as u64);
}

/// Secrets redacted, by rule, at one stage (`model_input`, `memory_files`, `ingest`).
/// Secrets redacted, by rule and stage; a layout's own patterns count as
/// `custom` (a tenant's rule names are not metric labels: they would let one
/// tenant grow the server's series without bound).
pub fn redactions(stage: &'static str, counts: &crate::domain::redact::Counts) {
    for (rule, n) in counts {
        let rule = crate::domain::redact::built_in_rules().find(|known| known == rule).unwrap_or("custom");
        counter!("memoryd_redactions_total", &[("rule", rule), ("stage", stage)]).increment(*n);
    }
}

pub fn phase_two_run(state: &str, turns: i64, files_changed: usize) {
    counter!("memoryd_phase_two_runs_total", &[("state", state.to_owned())]).increment(1);
    histogram!("memoryd_phase_two_turns").record(turns as f64);
    counter!("memoryd_phase_two_files_changed_total").increment(files_changed as u64);
}

/// A webhook delivery attempt, by how the receiver answered.
pub fn webhook_attempt(answer: crate::domain::events::Answer) {
    let outcome = match answer {
        crate::domain::events::Answer::Delivered => "delivered",
        crate::domain::events::Answer::Gone => "gone",
        crate::domain::events::Answer::Failed => "failed",
    };
    counter!("memoryd_webhook_attempts_total", "outcome" => outcome).increment(1);
}

/// Live event streams open on this replica.
pub fn event_streams(delta: f64) {
    metrics::gauge!("memoryd_event_streams").increment(delta);
}

/// One stage of a job's way through a worker (`claim`, `prepare`, `run`,
/// `stage`, `finish`, `publish`, `settle`): where a job's time goes.
pub fn job_stage(kind: &str, stage: &'static str, elapsed: Duration) {
    histogram!("memoryd_job_stage_seconds", "kind" => kind.to_owned(), "stage" => stage).record(elapsed.as_secs_f64());
}

/// Whether this replica's last probe of the object store was answered.
pub fn object_store_up(up: bool) {
    gauge!("memoryd_object_store_up").set(if up { 1.0 } else { 0.0 });
}
