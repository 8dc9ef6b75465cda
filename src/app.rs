//! Wiring: open the store, choose the model provider, start the API and the
//! workers, and stop them gracefully.

use crate::api::serve::{ConnectionLimits, serve};
use crate::api::{AppState, router};
use crate::config::{Config, LlmApi, ProviderKind};
use crate::jobs::{RetentionSettings, WorkerContext, WorkerSettings, spawn_workers};
use crate::llm::{ChatCompletions, Model, OpenAiModel, Provider, Responses};
use crate::store::{self, DynStore};
use crate::workspace::Volumes;
use crate::workspace::publish::Publisher;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::Notify;
use tokio::task::{JoinHandle, JoinSet};
use tokio_util::sync::CancellationToken;

/// How long in-flight requests and jobs get after SIGTERM before the process exits.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(30);

type StartError = Box<dyn std::error::Error + Send + Sync>;

pub fn provider(config: &Config) -> Result<Provider, StartError> {
    let key = config.resolved_llm_api_key();
    match config.effective_provider() {
        ProviderKind::Extractive => Ok(Provider::Extractive),
        ProviderKind::Openai => {
            let key = key.ok_or("MEMORYD_LLM_PROVIDER=openai needs MEMORYD_LLM_API_KEY or OPENAI_API_KEY")?;
            let timeout = config.model.timeout;
            let base = &config.model.base_url;
            let model: Arc<dyn Model> = match config.model.api {
                LlmApi::Responses => Arc::new(OpenAiModel::<Responses>::new(base, &key, timeout)?),
                LlmApi::ChatCompletions => Arc::new(OpenAiModel::<ChatCompletions>::new(base, &key, timeout)?),
            };
            Ok(Provider::Model(model))
        }
    }
}

/// How long a rollout in a bucket waits without appends before its journal
/// is moved into its object (SPEC §6.1: "when the rollout goes idle").
const IDLE_ROLLOUT: Duration = Duration::from_secs(60);

fn worker_settings(config: &Config, default_limits: crate::domain::limits::Limits) -> WorkerSettings {
    WorkerSettings {
        worker_id: format!("{}-{}", std::process::id(), &uuid::Uuid::new_v4().simple().to_string()[..8]),
        concurrency: config.jobs.worker_concurrency,
        max_attempts: config.jobs.max_attempts,
        retry_base: config.jobs.retry_base,
        lease: config.jobs.lease,
        poll: Duration::from_millis(500),
        log_content: config.log.content,
        history_runs: i64::from(config.jobs.history_runs),
        eager_phase_one: Some(config.jobs.eager_phase_one).filter(|idle| !idle.is_zero()),
        retention: RetentionSettings {
            sweep_every: config.records.retention_sweep,
            idempotency_ttl: config.records.idempotency_ttl,
            records: days(config.records.retain_records_days),
            rollout_days: config.records.retain_rollouts_days,
            events: config.records.events_retain,
        },
        default_limits,
        storage_reconcile: config.records.storage_reconcile,
        reclaim_dead_rows: (config.records.reclaim_dead_rows > 0).then_some(config.records.reclaim_dead_rows),
        max_segment_bytes: config.quotas.max_segment_bytes,
        body_timeout: config.http.body_timeout,
        idle_rollout: config.test_idle_rollout.unwrap_or(IDLE_ROLLOUT),
    }
}

/// A number of days (fractions allowed) as a duration; 0 or less: none.
fn days(days: f64) -> Option<Duration> {
    (days.is_finite() && days > 0.0).then(|| Duration::from_secs_f64((days * 86_400.0).min(1e12)))
}

struct Core {
    store: DynStore,
    volumes: Volumes,
    appends: crate::ingest::AppendQueue,
    config: Arc<Config>,
    wake: Arc<Notify>,
    shutdown: CancellationToken,
    console: Arc<crate::api::ConsoleKeys>,
    publisher: Publisher,
    default_limits: crate::domain::limits::Limits,
    events: crate::events::Events,
    /// Search by meaning's endpoint, when configured.
    embeddings: Option<Arc<crate::llm::embeddings::EmbeddingsClient>>,
    /// Layouts' vectors: the API reads them, the workers' publishes invalidate them.
    vectors: crate::meaning::VectorCache,
}

/// The embeddings endpoint of `MEMORYD_EMBEDDINGS_*`, when set.
fn embeddings(config: &Config) -> Result<Option<Arc<crate::llm::embeddings::EmbeddingsClient>>, StartError> {
    let Some((base, model, key)) = config.embeddings_endpoint() else { return Ok(None) };
    let client = crate::llm::embeddings::EmbeddingsClient::new(&base, &model, &key, config.model.timeout)
        .map_err(|e| format!("the embeddings client could not be built: {e}"))?;
    Ok(Some(Arc::new(client)))
}

/// The object store of `MEMORYD_STORAGE`, when workspace files live in one.
fn bucket(config: &Config) -> Result<Option<crate::bucket::Bucket>, StartError> {
    let crate::config::Storage::Bucket(url) = &config.storage else { return Ok(None) };
    let objects = match &config.bucket_client {
        Some(client) => client.clone(),
        None => url.open(crate::bucket::REQUEST_TIMEOUT).map_err(|e| format!("the object store of {url}: {e}"))?,
    };
    Ok(Some(crate::bucket::Bucket::new(url.clone(), objects)))
}

async fn open_core(config: Config) -> Result<(Core, Provider), StartError> {
    config.validate()?;
    std::fs::create_dir_all(&config.data_dir)?;
    crate::metrics::handle();
    let provider = provider(&config)?;
    let store = store::connect_waiting(&config.database_url(), config.database_wait).await?;
    let mut volumes = Volumes::new(&config.data_dir, config.quotas.min_free_bytes);
    let pause = Some(config.test_publish_pause).filter(|pause| !pause.is_zero());
    if let Some(bucket) = bucket(&config)? {
        let bucket = bucket.with_pause_after_first_place(pause);
        volumes = volumes.with_bucket(bucket, config.quotas.cache_bytes)?;
    }
    let appends = crate::ingest::AppendQueue::new(store.clone(), volumes.clone());
    let shutdown = CancellationToken::new();
    let console =
        Arc::new(crate::api::ConsoleKeys::new(config.console.secret.as_deref(), config.console.secure_cookies));
    let publisher = Publisher::new(&config.data_dir).with_pause_after_first_rename(pause);
    let default_limits = default_limits(&config.quotas.default_limits)?;
    let key = crate::events::seal::SecretsKey::load(config.events.secrets_key.as_deref(), &config.data_dir)?;
    let policy = crate::domain::events::UrlPolicy {
        allow_http: config.events.webhook_allow_http,
        allow_private: config.events.webhook_allow_private,
    };
    let events = crate::events::Events::new(store.clone(), key, policy);
    let config = Arc::new(config);
    let wake = Arc::new(Notify::new());
    let embeddings = embeddings(&config)?;
    let vectors = crate::meaning::VectorCache::default();
    let core = Core {
        store,
        volumes,
        appends,
        config,
        wake,
        shutdown,
        console,
        publisher,
        default_limits,
        events,
        embeddings,
        vectors,
    };
    Ok((core, provider))
}

/// `MEMORYD_DEFAULT_LIMITS`, checked at start-up.
fn default_limits(text: &str) -> Result<crate::domain::limits::Limits, StartError> {
    let limits: crate::domain::limits::Limits =
        serde_json::from_str(text).map_err(|e| format!("MEMORYD_DEFAULT_LIMITS is not the limits' JSON: {e}"))?;
    limits.validate().map_err(|e| format!("MEMORYD_DEFAULT_LIMITS: {e}"))?;
    Ok(limits)
}

impl Core {
    fn app_state(&self) -> AppState {
        AppState::new(crate::api::SharedState {
            store: self.store.clone(),
            volumes: self.volumes.clone(),
            appends: self.appends.clone(),
            config: self.config.clone(),
            shutdown: self.shutdown.clone(),
            wake: self.wake.clone(),
            caches: Arc::new(crate::api::Caches { vectors: self.vectors.clone(), ..Default::default() }),
            console: self.console.clone(),
            publisher: self.publisher.clone(),
            default_limits: self.default_limits,
            events: self.events.clone(),
            slots: Arc::new(crate::api::slots::Slots::new(
                self.config.quotas.max_exports,
                self.config.quotas.max_streams_per_tenant,
            )),
            embeddings: self.embeddings.clone(),
        })
    }
}

fn start_workers(core: &Core, provider: Provider) -> JoinSet<()> {
    let ctx = WorkerContext {
        store: core.store.clone(),
        volumes: core.volumes.clone(),
        provider,
        settings: worker_settings(&core.config, core.default_limits),
        wake: core.wake.clone(),
        publisher: core.publisher.clone(),
        events: core.events.clone(),
        finisher: crate::jobs::Finisher::start(core.store.clone()),
        indexer: core.embeddings.clone().map(|client| {
            let settings = &core.config.jobs;
            Arc::new(crate::jobs::indexer::Indexer::new(
                (core.store.clone(), core.volumes.clone(), core.publisher.clone()),
                client,
                settings.retry_base,
                core.default_limits,
            ))
        }),
        vectors: core.vectors.clone(),
    };
    let mut workers = spawn_workers(Arc::new(ctx), core.shutdown.clone());
    workers.spawn(crate::events::delivery::run(core.store.clone(), core.events.clone(), core.shutdown.clone()));
    workers
}

/// memoryd running in this process: the API, and the workers unless `--no-workers`.
pub struct RunningServer {
    pub addr: SocketAddr,
    pub state: AppState,
    shutdown: CancellationToken,
    server: Option<JoinHandle<std::io::Result<()>>>,
    workers: Option<JoinSet<()>>,
}

impl RunningServer {
    /// Stops accepting and claiming, lets in-flight requests finish, gives
    /// back held jobs, and waits for all of that.
    pub async fn shutdown(mut self) -> std::io::Result<()> {
        self.shutdown.cancel();
        if let Some(mut workers) = self.workers.take() {
            while workers.join_next().await.is_some() {}
        }
        match self.server.take() {
            Some(server) => server.await.map_err(std::io::Error::other)?,
            None => Ok(()),
        }
    }
}

/// A server dropped without `shutdown` still stops: its loops see the token.
impl Drop for RunningServer {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

pub async fn start(config: Config, listener: TcpListener) -> Result<RunningServer, StartError> {
    let run_workers = !config.no_workers;
    let (core, provider) = open_core(config).await?;
    let workers = run_workers.then(|| start_workers(&core, provider));
    let state = core.app_state();
    let app = router(state.clone());
    let addr = listener.local_addr()?;
    let limits = ConnectionLimits {
        max_connections: core.config.http.max_connections,
        header_timeout: core.config.http.header_timeout,
        idle_timeout: core.config.http.idle_timeout,
    };
    tokio::spawn(core.events.hub.clone().run(core.shutdown.clone()));
    let server = tokio::spawn(serve(listener, app, limits, core.shutdown.clone()));
    Ok(RunningServer { addr, state, shutdown: core.shutdown, server: Some(server), workers })
}

/// `memoryd worker`: the workers alone.
pub async fn start_worker_only(config: Config) -> Result<RunningServer, StartError> {
    let (core, provider) = open_core(config).await?;
    let workers = start_workers(&core, provider);
    let state = core.app_state();
    Ok(RunningServer {
        addr: SocketAddr::from(([0, 0, 0, 0], 0)),
        state,
        shutdown: core.shutdown,
        server: None,
        workers: Some(workers),
    })
}

/// Resolves on SIGTERM or Ctrl-C.
pub async fn termination_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("installing a SIGTERM handler");
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
}
