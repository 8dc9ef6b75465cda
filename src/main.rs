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
}

fn init_logging(config: &Config) {
    let filter = EnvFilter::try_new(&config.log).unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    if config.log_format == LogFormat::Json {
        builder.json().flatten_event(true).init();
    } else {
        builder.init();
    }
}

async fn run_bench(args: memoryd::bench::BenchArgs) -> std::process::ExitCode {
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

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let Cli { command } = Cli::parse();
    let (config, api) = match command {
        Command::Serve(config) => (config, true),
        Command::Worker(config) => (config, false),
        Command::Bench(args) => return run_bench(args).await,
    };
    init_logging(&config);
    let started = if api {
        match tokio::net::TcpListener::bind(config.listen).await {
            Ok(listener) => start(config, listener).await,
            Err(e) => {
                tracing::error!(error = %e, listen = %config.listen, "cannot listen");
                return std::process::ExitCode::FAILURE;
            }
        }
    } else {
        start_worker_only(config).await
    };
    let server = match started {
        Ok(s) => s,
        Err(e) => {
            tracing::error!(error = %e, "cannot start");
            return std::process::ExitCode::FAILURE;
        }
    };
    if api {
        tracing::info!(addr = %server.addr, "memoryd listening");
    } else {
        tracing::info!("memoryd workers running");
    }
    termination_signal().await;
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
