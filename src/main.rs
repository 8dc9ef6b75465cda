use clap::{Parser, Subcommand};
use memoryd::app::{SHUTDOWN_GRACE, start, start_worker_only, termination_signal};
use memoryd::config::{Config, LogFormat};
use tracing_subscriber::EnvFilter;

#[derive(Debug, Parser)]
#[command(name = "memoryd", version, about = "Long-term memory for AI agents over HTTP")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the HTTP API and the workers (`--no-workers`: the API alone).
    Serve(Config),
    /// Run the workers alone, with no HTTP API.
    Worker(Config),
    /// Measure memoryd: start it (SQLite and Postgres) with a fake model, print figures.
    Bench(memoryd::bench::BenchArgs),
    /// Ask the memoryd listening at MEMORYD_LISTEN whether it is up (or, with --ready, ready); exit 0 if so.
    Health(memoryd::probe::HealthArgs),
    /// Copy a stopped deployment's workspaces from its data dir into s3://<bucket>/<prefix>, then check them.
    CopyToBucket(memoryd::bucket::copy::CopyArgs),
}

fn init_logging(config: &Config) {
    let filter = EnvFilter::try_new(&config.log.filter).unwrap_or_else(|_| EnvFilter::new("info"));
    // Colours only for a person at a terminal: a supervisor's log file gets plain text.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    if config.log.format == LogFormat::Json {
        builder.json().flatten_event(true).init();
    } else {
        builder.init();
    }
}

async fn run_bench(args: memoryd::bench::BenchArgs) -> std::process::ExitCode {
    // The server under test says why it failed a request (never content:
    // only errors, which carry no segment, prompt or key).
    tracing_subscriber::fmt().with_env_filter(EnvFilter::new("error")).with_writer(std::io::stderr).init();
    let json = args.json;
    match memoryd::bench::run(args).await {
        Ok(figures) => {
            if json {
                println!("{}", serde_json::to_string_pretty(&figures).unwrap_or_default());
            } else {
                print!("{}", memoryd::bench::render_table(&figures));
            }
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("memoryd bench: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run_health(args: memoryd::probe::HealthArgs) -> std::process::ExitCode {
    match memoryd::probe::probe(&args).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("memoryd health: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run_copy(args: memoryd::bucket::copy::CopyArgs) -> std::process::ExitCode {
    init_logging(&args.config);
    match memoryd::bucket::copy::copy_to_bucket(&args).await {
        Ok(copied) => {
            println!(
                "copied {} files ({} bytes) of {} workspaces to {} and read each back: every object holds its file's bytes",
                copied.files, copied.bytes, copied.workspaces, args.destination
            );
            if copied.unknown > 0 {
                println!("left out {} workspace folders the database does not know", copied.unknown);
            }
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("memoryd copy-to-bucket: {}", memoryd::error_chain(&e));
            std::process::ExitCode::FAILURE
        }
    }
}

/// glibc gives each thread that allocates while another does an arena of its
/// own, up to eight per core, and keeps in it what the thread frees. SQLite's
/// connections each run on a thread of their own, and the blocking pool adds
/// more: under a steady load the process grew without bound (the soak on
/// SQLite: 28 → 76 MiB in five minutes; with one arena 25 → 36 MiB in half
/// that, and flat). Two arenas keep the spare memory in one place. An
/// operator's `MALLOC_ARENA_MAX` wins.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn limit_malloc_arenas() {
    use std::ffi::c_int;
    const M_ARENA_MAX: c_int = -8;
    unsafe extern "C" {
        fn mallopt(param: c_int, value: c_int) -> c_int;
    }
    if std::env::var_os("MALLOC_ARENA_MAX").is_none() {
        // SAFETY: mallopt only sets an allocator tunable; it is called before
        // any other thread exists.
        unsafe {
            mallopt(M_ARENA_MAX, 2);
        }
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn limit_malloc_arenas() {}

/// What an operator needs to know is running, read before `config` is
/// handed over; never a secret (the admin token and model key are only
/// said to be set, the database only by its kind).
struct EffectiveConfig {
    database: &'static str,
    data_dir: String,
    provider: &'static str,
    admin_api: bool,
    workers: usize,
}

impl EffectiveConfig {
    fn of(config: &Config) -> Self {
        Self {
            database: config.database_kind(),
            data_dir: config.data_dir.display().to_string(),
            provider: match config.effective_provider() {
                memoryd::config::ProviderKind::Openai => "openai",
                memoryd::config::ProviderKind::Extractive => "extractive",
            },
            admin_api: config.admin_token.is_some(),
            workers: if config.no_workers { 0 } else { config.jobs.worker_concurrency },
        }
    }
}

fn log_effective_config(c: &EffectiveConfig, listening: Option<std::net::SocketAddr>) {
    let admin_api = if c.admin_api { "on" } else { "off" };
    match listening {
        Some(addr) => tracing::info!(
            listen = %addr, database = c.database, data_dir = %c.data_dir, provider = c.provider, admin_api,
            workers = c.workers, "memoryd listening"
        ),
        None => tracing::info!(
            database = c.database, data_dir = %c.data_dir, provider = c.provider, workers = c.workers,
            "memoryd workers running"
        ),
    }
}

fn main() -> std::process::ExitCode {
    limit_malloc_arenas();
    match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime.block_on(run()),
        Err(e) => {
            eprintln!("memoryd: cannot start the async runtime: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// The API and workers (`api`) or the workers alone, started; `None` once
/// the reason it could not start is logged.
async fn start_serving(config: Config, api: bool) -> Option<memoryd::app::RunningServer> {
    let started = if api {
        match tokio::net::TcpListener::bind(config.listen).await {
            Ok(listener) => start(config, listener).await,
            Err(e) => {
                tracing::error!(error = %e, listen = %config.listen, "cannot listen");
                return None;
            }
        }
    } else {
        start_worker_only(config).await
    };
    match started {
        Ok(server) => Some(server),
        Err(e) => {
            tracing::error!(error = %memoryd::error_chain(&*e), "cannot start");
            None
        }
    }
}

async fn run() -> std::process::ExitCode {
    let Cli { command } = Cli::parse();
    let (config, api) = match command {
        Command::Serve(config) => (config, true),
        Command::Worker(config) => (config, false),
        Command::Bench(args) => return run_bench(args).await,
        Command::Health(args) => return run_health(args).await,
        Command::CopyToBucket(args) => return run_copy(args).await,
    };
    if let Err(refused) = config.validate() {
        eprintln!("memoryd: {refused}");
        return std::process::ExitCode::FAILURE;
    }
    init_logging(&config);
    let config_summary = EffectiveConfig::of(&config);
    // Watched from the start: a replica still waiting for its database stops
    // when asked (as PID 1 in a container it would otherwise ignore SIGTERM).
    let stop = termination_signal();
    tokio::pin!(stop);
    let server = tokio::select! {
        started = start_serving(config, api) => match started {
            Some(server) => server,
            None => return std::process::ExitCode::FAILURE,
        },
        () = &mut stop => {
            tracing::info!("stopped before it started");
            return std::process::ExitCode::SUCCESS;
        }
    };
    log_effective_config(&config_summary, api.then_some(server.addr));
    stop.await;
    tracing::info!("shutting down");
    match tokio::time::timeout(SHUTDOWN_GRACE, server.shutdown()).await {
        Ok(Ok(())) => std::process::ExitCode::SUCCESS,
        Ok(Err(e)) => {
            tracing::error!(error = %e, "server failed while shutting down");
            std::process::ExitCode::FAILURE
        }
        Err(_) => {
            tracing::warn!("in-flight requests did not finish within the grace period");
            std::process::ExitCode::FAILURE
        }
    }
}
