//! Configuration: flags with the names of the `MEMORYD_*` environment variables
//! (flags win), in groups by what they govern. Settings with a fixed set of
//! values are enums, so a bad one stops start-up with clap's usage message;
//! durations are `Duration`s (given in the unit their name says); every
//! range is checked at start-up by [`Config::validate`].

use clap::{Args, CommandFactory, FromArgMatches, Parser, ValueEnum};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// Where memory comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ProviderKind {
    /// An OpenAI-compatible endpoint.
    Openai,
    /// The built-in deterministic provider; needs no network.
    Extractive,
}

/// Which API of an OpenAI-compatible endpoint memoryd speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LlmApi {
    /// `POST {base}/responses`.
    Responses,
    /// `POST {base}/chat/completions` (vLLM, Ollama, llama.cpp, LiteLLM).
    #[value(name = "chat_completions")]
    ChatCompletions,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    /// One JSON object a line.
    Json,
}

/// Where workspace files live.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Storage {
    /// Under `<data dir>/workspaces`, a volume every replica mounts.
    File,
    /// In an object store; replicas share the database and the bucket, no folder.
    Bucket(crate::bucket::BucketUrl),
}

impl std::str::FromStr for Storage {
    type Err = String;

    fn from_str(raw: &str) -> Result<Self, String> {
        match raw {
            "file" => Ok(Self::File),
            url if url.starts_with("s3://") => url.parse().map(Self::Bucket),
            other => Err(format!("{other:?} is neither file nor s3://<bucket>/<prefix>")),
        }
    }
}

impl std::fmt::Display for Storage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::File => f.write_str("file"),
            Self::Bucket(url) => url.fmt(f),
        }
    }
}

/// Everything `memoryd serve` and `memoryd worker` take.
#[derive(Debug, Clone, Parser)]
#[command(name = "memoryd")]
pub struct Config {
    /// Address to listen on.
    #[arg(long = "listen", env = "MEMORYD_LISTEN", default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
    /// Where workspaces (and the SQLite file, when used) live.
    #[arg(long = "data-dir", env = "MEMORYD_DATA_DIR", default_value = "./memoryd-data")]
    pub data_dir: PathBuf,
    /// `postgres://…` or `sqlite://…`; default: `sqlite://<data dir>/memoryd.db`.
    #[arg(long = "database-url", env = "DATABASE_URL")]
    pub database_url: Option<String>,
    /// How long a start waits for a database that cannot be reached yet
    /// (refused, starting up), trying again with backoff; 0: not at all.
    #[arg(long = "database-wait-secs", env = "MEMORYD_DATABASE_WAIT_SECS", default_value = "120", value_parser = secs)]
    pub database_wait: Duration,
    /// Bearer token of `/v1/admin`; unset: the admin API answers 404.
    #[arg(long = "admin-token", env = "MEMORYD_ADMIN_TOKEN", hide_env_values = true)]
    pub admin_token: Option<String>,
    /// Serve the API without running jobs (run `memoryd worker` elsewhere).
    #[arg(long = "no-workers", default_value_t = false)]
    pub no_workers: bool,
    #[command(flatten)]
    pub log: LogSettings,
    #[command(flatten)]
    pub model: ModelSettings,
    #[command(flatten)]
    pub embeddings: EmbeddingSettings,
    #[command(flatten)]
    pub jobs: JobSettings,
    #[command(flatten)]
    pub records: RecordSettings,
    #[command(flatten)]
    pub quotas: QuotaSettings,
    #[command(flatten)]
    pub http: HttpSettings,
    #[command(flatten)]
    pub events: EventSettings,
    #[command(flatten)]
    pub console: ConsoleSettings,
    /// Where workspace files live: `file` (under the data dir) or
    /// `s3://<bucket>/<prefix>` (an S3-compatible object store; credentials,
    /// region and endpoint from the standard `AWS_*` variables).
    #[arg(long = "storage", env = "MEMORYD_STORAGE", default_value = "file")]
    pub storage: Storage,
    /// The object store's client, when the program that embeds memoryd
    /// builds it (none: from the `AWS_*` variables).
    #[arg(skip)]
    pub bucket_client: Option<std::sync::Arc<dyn object_store::ObjectStore>>,
    /// A test hook: how long a rollout in a bucket is idle before its
    /// journal moves into its object (none: a minute).
    #[arg(skip)]
    pub test_idle_rollout: Option<Duration>,
    /// A test hook: every publish stops this long after its first rename (on
    /// a bucket: a pass of chores, after placing its first file).
    #[arg(long = "test-publish-pause-ms", hide = true, default_value = "0", value_parser = millis)]
    pub test_publish_pause: Duration,
}

/// What the log says, and how.
#[derive(Debug, Clone, Args)]
pub struct LogSettings {
    /// Log filter (tracing `EnvFilter` syntax).
    #[arg(long = "log", env = "MEMORYD_LOG", default_value = "info")]
    pub filter: String,
    #[arg(long = "log-format", env = "MEMORYD_LOG_FORMAT", value_enum, default_value = "text")]
    pub format: LogFormat,
    /// Log prompts and model output too (off: never).
    #[arg(long = "log-content", env = "MEMORYD_LOG_CONTENT", default_value_t = false)]
    pub content: bool,
}

/// Where memory comes from: the model endpoint.
#[derive(Debug, Clone, Args)]
pub struct ModelSettings {
    /// Default: `openai` when an API key is set, else `extractive`.
    #[arg(long = "llm-provider", env = "MEMORYD_LLM_PROVIDER", value_enum)]
    pub provider: Option<ProviderKind>,
    #[arg(long = "llm-api", env = "MEMORYD_LLM_API", value_enum, default_value = "responses")]
    pub api: LlmApi,
    #[arg(long = "llm-base-url", env = "MEMORYD_LLM_BASE_URL", default_value = "https://api.openai.com/v1")]
    pub base_url: String,
    /// Falls back to `OPENAI_API_KEY`.
    #[arg(long = "llm-api-key", env = "MEMORYD_LLM_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,
    #[arg(long = "llm-timeout-secs", env = "MEMORYD_LLM_TIMEOUT_SECS", default_value = "600", value_parser = secs)]
    pub timeout: Duration,
}

/// Where search by meaning gets its vectors (SPEC §2.10): unset, `semantic`
/// and `hybrid` search are off.
#[derive(Debug, Clone, Args)]
pub struct EmbeddingSettings {
    /// `POST {base}/embeddings` of any OpenAI-compatible endpoint.
    #[arg(id = "embeddings_base_url", long = "embeddings-base-url", env = "MEMORYD_EMBEDDINGS_BASE_URL")]
    pub base_url: Option<String>,
    #[arg(id = "embeddings_model", long = "embeddings-model", env = "MEMORYD_EMBEDDINGS_MODEL")]
    pub model: Option<String>,
    /// Falls back to the model API key.
    #[arg(
        id = "embeddings_api_key",
        long = "embeddings-api-key",
        env = "MEMORYD_EMBEDDINGS_API_KEY",
        hide_env_values = true
    )]
    pub api_key: Option<String>,
}

/// The job engine of this process.
#[derive(Debug, Clone, Args)]
pub struct JobSettings {
    /// Jobs run at once by this process.
    #[arg(long = "worker-concurrency", env = "MEMORYD_WORKER_CONCURRENCY", default_value_t = 8)]
    pub worker_concurrency: usize,
    /// Attempts before a job is `failed`.
    #[arg(long = "max-attempts", env = "MEMORYD_MAX_ATTEMPTS", default_value_t = 5)]
    pub max_attempts: i64,
    /// First retry delay; it doubles with each attempt (with jitter).
    #[arg(long = "retry-base-ms", env = "MEMORYD_RETRY_BASE_MS", default_value = "2000", value_parser = millis)]
    pub retry_base: Duration,
    /// How long a claimed job stays owned without a renewal.
    #[arg(long = "job-lease-secs", env = "MEMORYD_JOB_LEASE_SECS", default_value = "120", value_parser = secs)]
    pub lease: Duration,
    /// A queued phase-two job starts no earlier than this long after it was
    /// queued, so that more closes join it.
    #[arg(
        long = "phase-two-debounce-ms",
        env = "MEMORYD_PHASE_TWO_DEBOUNCE_MS",
        default_value = "0",
        value_parser = millis
    )]
    pub phase_two_debounce: Duration,
    /// A rollout of an open session idle this long is extracted early, so a
    /// close needs no model call for it (0: off).
    #[arg(long = "eager-phase-one-secs", env = "MEMORYD_EAGER_PHASE_ONE_SECS", default_value = "0", value_parser = secs)]
    pub eager_phase_one: Duration,
    /// How many of each layout's newest successful runs keep their history
    /// (the files they changed, for diffs and restores).
    #[arg(long = "history-runs", env = "MEMORYD_HISTORY_RUNS", default_value_t = 100)]
    pub history_runs: u32,
}

/// How long records are kept, and how often the sweepers look.
#[derive(Debug, Clone, Args)]
pub struct RecordSettings {
    /// Idempotency keys older than this are removed.
    #[arg(
        long = "idempotency-ttl-secs",
        env = "MEMORYD_IDEMPOTENCY_TTL_SECS",
        default_value = "86400",
        value_parser = secs
    )]
    pub idempotency_ttl: Duration,
    /// Finished jobs and closed sessions older than this many days are
    /// deleted: records only, never memory (0: kept; fractions allowed).
    #[arg(long = "retain-records-days", env = "MEMORYD_RETAIN_RECORDS_DAYS", default_value_t = 30.0)]
    pub retain_records_days: f64,
    /// Rollouts without a segment for this many days are forgotten, in
    /// layouts that set no `retention.rollout_days` (0: kept).
    #[arg(long = "retain-rollouts-days", env = "MEMORYD_RETAIN_ROLLOUTS_DAYS", default_value_t = 0.0)]
    pub retain_rollouts_days: f64,
    /// How often the workers apply retention.
    #[arg(
        long = "retention-sweep-secs",
        env = "MEMORYD_RETENTION_SWEEP_SECS",
        default_value = "3600",
        value_parser = secs
    )]
    pub retention_sweep: Duration,
    /// How often the workers walk the volume to correct the storage counters.
    #[arg(
        long = "storage-reconcile-secs",
        env = "MEMORYD_STORAGE_RECONCILE_SECS",
        default_value = "3600",
        value_parser = secs
    )]
    pub storage_reconcile: Duration,
    /// Postgres: a table of the job queue, sessions or outbox with more dead
    /// row versions than this (and than a fiftieth of its rows) is vacuumed
    /// by memoryd itself, checked every 5 s; 0 turns it off.
    #[arg(long = "reclaim-dead-rows", env = "MEMORYD_RECLAIM_DEAD_ROWS", default_value_t = 5000)]
    pub reclaim_dead_rows: i64,
    /// How long the outbox keeps delivered events for `Last-Event-ID` resumes.
    #[arg(long = "events-retain-hours", env = "MEMORYD_EVENTS_RETAIN_HOURS", default_value = "24", value_parser = hours)]
    pub events_retain: Duration,
}

/// What one request, tenant or replica may take.
#[derive(Debug, Clone, Args)]
pub struct QuotaSettings {
    /// Largest accepted request body, in bytes.
    #[arg(long = "max-segment-bytes", env = "MEMORYD_MAX_SEGMENT_BYTES", default_value_t = 33_554_432)]
    pub max_segment_bytes: usize,
    /// The most segments one batch append takes (`segments:batch`), at most
    /// 4,000.
    #[arg(long = "max-batch-segments", env = "MEMORYD_MAX_BATCH_SEGMENTS", default_value_t = 1000)]
    pub max_batch_segments: usize,
    /// Every tenant's limits where its own leave a field unset (JSON as in
    /// `PUT /v1/admin/tenants/{tenant_id}/limits`; absent or 0: unlimited).
    #[arg(long = "default-limits", env = "MEMORYD_DEFAULT_LIMITS", default_value = "{}")]
    pub default_limits: String,
    /// The largest archive `POST /v1/workspaces/{w}/import` takes.
    #[arg(long = "max-import-bytes", env = "MEMORYD_MAX_IMPORT_BYTES", default_value_t = 1 << 30)]
    pub max_import_bytes: u64,
    /// Exports streamed at once by this replica (beyond: 429).
    #[arg(long = "max-exports", env = "MEMORYD_MAX_EXPORTS", default_value_t = 8)]
    pub max_exports: usize,
    /// An export whose client reads nothing for this long is stopped.
    #[arg(long = "export-stall-secs", env = "MEMORYD_EXPORT_STALL_SECS", default_value = "60", value_parser = secs)]
    pub export_stall: Duration,
    /// Live event streams one tenant may hold open on this replica (beyond: 429).
    #[arg(long = "max-streams-per-tenant", env = "MEMORYD_MAX_STREAMS_PER_TENANT", default_value_t = 16)]
    pub max_streams_per_tenant: usize,
    /// Free space the data volume keeps: appends are refused and `/readyz`
    /// fails below it (0: off; readiness then fails below 64 KiB).
    #[arg(long = "min-free-bytes", env = "MEMORYD_MIN_FREE_BYTES", default_value_t = 67_108_864)]
    pub min_free_bytes: u64,
    /// Where workspace files live in an object store: the bytes of memory
    /// files this replica keeps copies of, at most.
    #[arg(long = "cache-bytes", env = "MEMORYD_CACHE_BYTES", default_value_t = 1_073_741_824)]
    pub cache_bytes: u64,
    /// Keys not revoked (expired ones included) one tenant may hold at once (beyond: 403 `quota_exceeded`).
    #[arg(long = "max-keys", env = "MEMORYD_MAX_KEYS", default_value_t = 10_000)]
    pub max_keys: u64,
}

/// The connection loop's limits on slow and idle clients (SPEC §9).
#[derive(Debug, Clone, Args)]
pub struct HttpSettings {
    /// Open HTTP connections at most; further ones wait in the listen queue.
    #[arg(long = "max-connections", env = "MEMORYD_MAX_CONNECTIONS", default_value_t = 10_000)]
    pub max_connections: usize,
    /// A request's headers must arrive within this long of its first byte.
    #[arg(long = "header-timeout-secs", env = "MEMORYD_HEADER_TIMEOUT_SECS", default_value = "10", value_parser = secs)]
    pub header_timeout: Duration,
    /// A request's body must arrive within this long of its headers.
    #[arg(long = "body-timeout-secs", env = "MEMORYD_BODY_TIMEOUT_SECS", default_value = "60", value_parser = secs)]
    pub body_timeout: Duration,
    /// An idle keep-alive connection is closed after this long.
    #[arg(long = "idle-timeout-secs", env = "MEMORYD_IDLE_TIMEOUT_SECS", default_value = "60", value_parser = secs)]
    pub idle_timeout: Duration,
}

/// Webhooks and the sealing of their secrets.
#[derive(Debug, Clone, Args)]
pub struct EventSettings {
    /// Webhook endpoints may be plain `http://` URLs (development and tests).
    #[arg(long = "webhook-allow-http", env = "MEMORYD_WEBHOOK_ALLOW_HTTP", default_value_t = false)]
    pub webhook_allow_http: bool,
    /// Webhook endpoints may resolve to loopback, private or link-local
    /// addresses (development and tests).
    #[arg(long = "webhook-allow-private", env = "MEMORYD_WEBHOOK_ALLOW_PRIVATE", default_value_t = false)]
    pub webhook_allow_private: bool,
    /// The key (base64 of 32 bytes) that seals webhook secrets in the
    /// database; unset: `<data dir>/secrets.key`, made on first start.
    #[arg(long = "secrets-key", env = "MEMORYD_SECRETS_KEY", hide_env_values = true)]
    pub secrets_key: Option<String>,
}

/// The operator console's sessions.
#[derive(Debug, Clone, Args)]
pub struct ConsoleSettings {
    /// The key that signs console sessions; unset: a random one per start
    /// (every restart then signs everyone out, and replicas do not share sessions).
    #[arg(long = "console-secret", env = "MEMORYD_CONSOLE_SECRET", hide_env_values = true)]
    pub secret: Option<String>,
    /// Console cookies only over HTTPS (set behind a TLS-terminating proxy).
    #[arg(long = "console-secure-cookies", env = "MEMORYD_CONSOLE_SECURE_COOKIES", default_value_t = false)]
    pub secure_cookies: bool,
}

/// A whole number of the unit a setting's name gives, as a duration.
/// A whole number of the unit a setting's name gives; how large it may be
/// is [`Config::validate`]'s to say, by the setting's range.
fn whole(raw: &str) -> Result<u64, String> {
    raw.parse().map_err(|e| format!("not a whole number ({e})"))
}

fn secs(raw: &str) -> Result<Duration, String> {
    whole(raw).map(Duration::from_secs)
}

fn millis(raw: &str) -> Result<Duration, String> {
    whole(raw).map(Duration::from_millis)
}

fn hours(raw: &str) -> Result<Duration, String> {
    whole(raw).map(|hours| Duration::from_secs(hours.saturating_mul(3600)))
}

const DAY_SECS: u64 = 86_400;
/// The largest `MEMORYD_MAX_BATCH_SEGMENTS`: a batch's rollouts are a row
/// each of one statement, at most 8 parameters a row, and SQLite takes at
/// most 32,766 parameters a statement.
const MAX_BATCH_SEGMENTS: u64 = 4000;
const GIB: u64 = 1 << 30;

/// Each whole-number setting by its environment variable, its value in the
/// unit its name gives (a negative one as more than `i64::MAX`) and its
/// valid range (SPEC §7): memoryd refuses to start with any other value.
/// docs/operating.md lists them.
pub fn whole_ranges(c: &Config) -> Vec<(&'static str, u64, u64, u64)> {
    let n = |v: usize| v as u64;
    let s = |d: Duration| d.as_secs();
    let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    let (jobs, records, quotas, http) = (&c.jobs, &c.records, &c.quotas, &c.http);
    vec![
        ("MEMORYD_MAX_SEGMENT_BYTES", n(quotas.max_segment_bytes), 1, GIB),
        ("MEMORYD_MAX_BATCH_SEGMENTS", n(quotas.max_batch_segments), 1, MAX_BATCH_SEGMENTS),
        ("MEMORYD_DATABASE_WAIT_SECS", s(c.database_wait), 0, DAY_SECS),
        ("MEMORYD_LLM_TIMEOUT_SECS", s(c.model.timeout), 1, DAY_SECS),
        ("MEMORYD_WORKER_CONCURRENCY", n(jobs.worker_concurrency), 1, 1024),
        ("MEMORYD_RETRY_BASE_MS", ms(jobs.retry_base), 1, DAY_SECS * 1000),
        ("MEMORYD_JOB_LEASE_SECS", s(jobs.lease), 1, DAY_SECS),
        ("MEMORYD_PHASE_TWO_DEBOUNCE_MS", ms(jobs.phase_two_debounce), 0, DAY_SECS * 1000),
        ("MEMORYD_EAGER_PHASE_ONE_SECS", s(jobs.eager_phase_one), 0, 30 * DAY_SECS),
        ("MEMORYD_HISTORY_RUNS", u64::from(jobs.history_runs), 1, 1_000_000),
        ("MEMORYD_IDEMPOTENCY_TTL_SECS", s(records.idempotency_ttl), 1, 365 * DAY_SECS),
        ("MEMORYD_RETENTION_SWEEP_SECS", s(records.retention_sweep), 1, 30 * DAY_SECS),
        ("MEMORYD_MAX_IMPORT_BYTES", quotas.max_import_bytes, 1, 1024 * GIB),
        ("MEMORYD_MAX_EXPORTS", n(quotas.max_exports), 1, 1024),
        ("MEMORYD_EXPORT_STALL_SECS", s(quotas.export_stall), 1, DAY_SECS),
        ("MEMORYD_MAX_STREAMS_PER_TENANT", n(quotas.max_streams_per_tenant), 1, 100_000),
        ("MEMORYD_STORAGE_RECONCILE_SECS", s(records.storage_reconcile), 1, 30 * DAY_SECS),
        ("MEMORYD_RECLAIM_DEAD_ROWS", records.reclaim_dead_rows.max(-1) as u64, 0, i64::MAX as u64),
        ("MEMORYD_EVENTS_RETAIN_HOURS", s(records.events_retain) / 3600, 0, 24 * 365),
        ("MEMORYD_MIN_FREE_BYTES", quotas.min_free_bytes, 0, 1024 * GIB),
        ("MEMORYD_CACHE_BYTES", quotas.cache_bytes, 1 << 20, 1024 * GIB),
        ("MEMORYD_MAX_CONNECTIONS", n(http.max_connections), 1, 1_000_000),
        ("MEMORYD_HEADER_TIMEOUT_SECS", s(http.header_timeout), 1, 3600),
        ("MEMORYD_BODY_TIMEOUT_SECS", s(http.body_timeout), 1, 3600),
        ("MEMORYD_IDLE_TIMEOUT_SECS", s(http.idle_timeout), 1, DAY_SECS),
        ("MEMORYD_MAX_KEYS", quotas.max_keys, 1, 100_000_000),
        ("--test-publish-pause-ms", ms(c.test_publish_pause), 0, 600_000),
        ("MEMORYD_MAX_ATTEMPTS", jobs.max_attempts.max(-1) as u64, 1, 1000),
    ]
}

impl Config {
    /// memoryd embedded in another program (the benchmark, the tests): every
    /// setting at its default, whatever the environment says, listening on a
    /// free loopback port, with the extractive provider and quiet logs.
    pub fn embedded(data_dir: PathBuf, database_url: Option<String>) -> Self {
        let defaults = Self::defaults();
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            data_dir,
            database_url,
            log: LogSettings { filter: "warn".into(), ..defaults.log },
            model: ModelSettings { provider: Some(ProviderKind::Extractive), ..defaults.model },
            ..defaults
        }
    }

    /// Every setting at the default its flag declares (the one place
    /// defaults are written), whatever the environment says.
    pub fn defaults() -> Self {
        let command = Self::command().mut_args(|arg| arg.env(None::<&'static str>));
        let matches = command.try_get_matches_from(["memoryd"]).expect("every setting has a default or is optional");
        Self::from_arg_matches(&matches).expect("the declared defaults parse")
    }

    /// Every duration, size and count in its range (SPEC §7), else the
    /// message naming the setting, its range and the value given.
    pub fn validate(&self) -> Result<(), String> {
        for (name, value, min, max) in whole_ranges(self) {
            if !(min..=max).contains(&value) {
                let given = if value > i64::MAX as u64 { "a negative number".to_owned() } else { value.to_string() };
                return Err(format!("{name} must be from {min} to {max}; it is {given}."));
            }
        }
        for (name, days) in [
            ("MEMORYD_RETAIN_RECORDS_DAYS", self.records.retain_records_days),
            ("MEMORYD_RETAIN_ROLLOUTS_DAYS", self.records.retain_rollouts_days),
        ] {
            if !(days.is_finite() && (0.0..=36_500.0).contains(&days)) {
                return Err(format!("{name} must be from 0 to 36500 days (0: kept); it is {days}."));
            }
        }
        Ok(())
    }

    /// The model API key: the flag or `MEMORYD_LLM_API_KEY`, else `OPENAI_API_KEY`.
    pub fn resolved_llm_api_key(&self) -> Option<String> {
        self.model.api_key.clone().or_else(|| std::env::var("OPENAI_API_KEY").ok()).filter(|k| !k.trim().is_empty())
    }

    /// The embeddings endpoint, model and key, when search by meaning is
    /// configured (a base URL and a model; the key falls back to the model's).
    pub fn embeddings_endpoint(&self) -> Option<(String, String, String)> {
        let given = |v: &Option<String>| v.clone().filter(|v| !v.trim().is_empty());
        let (base, model) = (given(&self.embeddings.base_url)?, given(&self.embeddings.model)?);
        let key = given(&self.embeddings.api_key).or_else(|| self.resolved_llm_api_key()).unwrap_or_default();
        Some((base, model, key))
    }

    /// `openai` when an API key is configured, else `extractive`, unless set.
    pub fn effective_provider(&self) -> ProviderKind {
        let keyed = self.resolved_llm_api_key().is_some();
        self.model.provider.unwrap_or(if keyed { ProviderKind::Openai } else { ProviderKind::Extractive })
    }

    /// `postgres` or `sqlite`, as the database URL says (never the URL:
    /// it may hold a password).
    pub fn database_kind(&self) -> &'static str {
        if self.database_url().starts_with("sqlite:") { "sqlite" } else { "postgres" }
    }

    pub fn database_url(&self) -> String {
        self.database_url
            .clone()
            .filter(|u| !u.is_empty())
            .unwrap_or_else(|| format!("sqlite://{}", self.data_dir.join("memoryd.db").display()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_are_whole_numbers_of_their_unit() {
        assert_eq!(secs("120"), Ok(Duration::from_secs(120)));
        assert_eq!(millis("0"), Ok(Duration::ZERO));
        assert_eq!(hours("24"), Ok(Duration::from_secs(86_400)));
        for bad in ["-5", "1.5", "", "ten", "99999999999999999999"] {
            assert!(secs(bad).is_err(), "{bad:?}");
        }
        let long = Config::try_parse_from(["memoryd", "--job-lease-secs", "99999999999"]).unwrap();
        assert!(long.validate().unwrap_err().starts_with("MEMORYD_JOB_LEASE_SECS must be from 1 to 86400"));
        let given = Config::try_parse_from(["memoryd", "--job-lease-secs", "7", "--retry-base-ms", "250"]).unwrap();
        assert_eq!((given.jobs.lease, given.jobs.retry_base), (Duration::from_secs(7), Duration::from_millis(250)));
        let refused = Config::try_parse_from(["memoryd", "--job-lease-secs=-5"]).unwrap_err().to_string();
        assert!(refused.contains("--job-lease-secs"), "{refused}");
    }

    #[test]
    fn defaults_are_the_flags_and_pass_their_own_checks() {
        let defaults = Config::defaults();
        assert_eq!(defaults.listen, SocketAddr::from(([127, 0, 0, 1], 8080)));
        assert_eq!(defaults.jobs.lease, Duration::from_secs(120));
        assert_eq!((defaults.quotas.max_keys, defaults.quotas.max_segment_bytes), (10_000, 33_554_432));
        assert_eq!(defaults.records.events_retain, Duration::from_secs(24 * 3600));
        assert_eq!(defaults.model.provider, None);
        defaults.validate().expect("the defaults are in range");
        let embedded = Config::embedded(PathBuf::from("/tmp/x"), None);
        assert_eq!((embedded.listen.port(), embedded.model.provider), (0, Some(ProviderKind::Extractive)));
        assert_eq!((embedded.http.idle_timeout, embedded.log.filter.as_str()), (defaults.http.idle_timeout, "warn"));
        assert_eq!(embedded.data_dir, PathBuf::from("/tmp/x"));
    }
}
