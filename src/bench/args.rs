//! The arguments of `memoryd bench`.

use clap::{Args, ValueEnum};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Workload {
    Close,
    Append,
    Ingest,
    Selection,
    /// A forget of one conversation among many, and a retention sweep.
    Forget,
    /// The redaction engine over a 30 MiB rollout.
    Redaction,
    /// Export and import of a workspace of 1,000 conversations (about 100 MiB).
    Portability,
    /// A running agent's search, read and edit of its memory over HTTP.
    Tools,
    /// Many tenants' closes at once: how fast the job engine drains them
    /// (not part of `all`).
    Drain,
    /// Webhook delivery latency at 100 events/s, and appends and closes
    /// beside receivers that never answer.
    Events,
    /// Sustained load on one layout (not part of `all`: it runs for `--duration`).
    Soak,
    /// Admin listings, scrapes, session listings and appends at 10, 1,000
    /// and 10,000 tenants, each with a closed conversation (not part of
    /// `all`; with `--extractive` their jobs drain in seconds).
    Scale,
    All,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum BackendChoice {
    Sqlite,
    Postgres,
    Both,
}

#[derive(Debug, Clone, Args)]
pub struct BenchArgs {
    #[arg(long, value_enum, default_value = "all")]
    pub workload: Workload,
    #[arg(long, value_enum, default_value = "both")]
    pub backend: BackendChoice,
    /// The Postgres server to use (a schema of its own is created and
    /// dropped). By default the local one, without TLS: on loopback it only
    /// costs both sides CPU (8% of the drain's throughput on 2 cores).
    #[arg(long, default_value = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable")]
    pub postgres_url: String,
    /// Where the workspaces of the memoryd under test live: `file` (its
    /// data dir) or `s3://<bucket>/<prefix>` (the bucket must exist;
    /// credentials, region and endpoint from the AWS_* variables), each
    /// run under a prefix of its own. The figures' backend then reads
    /// `sqlite+s3` or `postgres+s3`.
    #[arg(long, default_value = "file")]
    pub storage: crate::config::Storage,
    /// Runs per figure.
    #[arg(long, default_value_t = 3)]
    pub runs: usize,
    /// The fake model's latency for every call.
    #[arg(long, default_value_t = 100)]
    pub latency_ms: u64,
    /// Small sizes only: a smoke run that finishes in seconds.
    #[arg(long, default_value_t = false)]
    pub quick: bool,
    /// How long the soak workload loads memoryd, in seconds.
    #[arg(long, default_value_t = 180)]
    pub duration: u64,
    /// The soak with a webhook endpoint that answers every delivery 500.
    #[arg(long, default_value_t = false)]
    pub failing_webhook: bool,
    /// The close workload with eager phase one: every rollout idle past
    /// `MEMORYD_EAGER_PHASE_ONE_SECS` and extracted before its close.
    #[arg(long, default_value_t = false)]
    pub eager: bool,
    /// The bench tenant with limits too high to reach (request rate, storage,
    /// tokens, open sessions), to measure what enforcing them costs.
    #[arg(long, default_value_t = false)]
    pub limits_high: bool,
    /// The default layout with redaction off (`"rules": []`), to measure what it costs.
    #[arg(long, default_value_t = false)]
    pub redaction_off: bool,
    /// Tenants of the drain probe (each closes 10 sessions of 4 rollouts).
    #[arg(long, default_value_t = 30)]
    pub tenants: usize,
    /// The drain's runs as steps of one aging database: each step's figures
    /// apart, and after each a scrape, appends, closes and (on Postgres) the
    /// hot tables' dead rows and index sizes.
    #[arg(long, default_value_t = false)]
    pub steps: bool,
    /// `MEMORYD_RECLAIM_DEAD_ROWS` of the memoryd under test (0: Postgres's
    /// dead rows are left to its autovacuum).
    #[arg(long, default_value_t = 5000)]
    pub reclaim_dead_rows: i64,
    /// memoryd's extractive provider instead of the fake model (no model calls at all).
    #[arg(long, default_value_t = false)]
    pub extractive: bool,
    /// `MEMORYD_PHASE_TWO_DEBOUNCE_MS` of the memoryd under test.
    #[arg(long, default_value_t = 0)]
    pub phase_two_debounce_ms: u64,
    /// The ingest workload also measures bare Postgres (`--postgres-url`):
    /// the same number of clients, each committing one 8 KiB insert per
    /// transaction, before and after each run, and prints memoryd's ratio to it.
    #[arg(long, default_value_t = false)]
    pub against_postgres: bool,
    /// The ingest workload's numbers of clients (default 1, 8 and 32; with `--quick` 1 and 8).
    #[arg(long, value_delimiter = ',')]
    pub clients: Vec<usize>,
    /// The ingest workload's segments a request (default 1: single appends;
    /// more: batch appends of that many, over four rollouts a client).
    #[arg(long, value_delimiter = ',')]
    pub batch: Vec<usize>,
    /// The log filter of the memoryd under test (its logs are formatted and
    /// dropped): `info` is what `MEMORYD_LOG` defaults to.
    #[arg(long, default_value = "info")]
    pub server_log: String,
    /// One JSON document instead of the table.
    #[arg(long, default_value_t = false)]
    pub json: bool,
}
