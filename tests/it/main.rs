//! HTTP tests against the real router on a free port, once on Postgres and
//! once on SQLite (see `both_backends!`).

use memoryd::fake_model as fake_llm;
mod harness;

mod admin;
mod agent_memory;
mod batches;
mod bounds;
mod churn;
mod coalesce;
mod connections;
mod console;
mod contract;
mod crash_leftovers;
mod deploy_files;
mod eager;
mod events;
mod forget;
mod group_commit;
mod hardening;
mod history;
mod hostile;
mod ingest;
mod jobs;
mod layouts;
mod leaks;
mod limits;
mod listings;
mod mcp;
mod migrations;
mod openapi;
mod phase_one;
mod phase_two;
mod portability;
mod process;
mod prompts;
mod publish;
mod ranked;
mod redaction;
mod retention;
mod round_three;
mod scoped_keys;
mod semantic;
mod sessions;
mod startup;
mod usage;
