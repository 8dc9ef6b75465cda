//! Configuration: flags with the names of the SPEC §7 environment variables
//! (flags win).

use clap::{Args, Parser, Subcommand};
use std::net::SocketAddr;
use std::path::PathBuf;

#[derive(Debug, Parser)]
#[command(
    name = "memoryd",
    version,
    about = "Long-term memory for AI agents over HTTP"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the HTTP API.
    Serve(Config),
}

#[derive(Debug, Clone, Args)]
pub struct Config {
    /// Address to listen on.
    #[arg(
        long = "listen",
        env = "MEMORYD_LISTEN",
        default_value = "127.0.0.1:8080"
    )]
    pub listen: SocketAddr,
    /// Where workspaces (and the SQLite file, when used) live.
    #[arg(
        long = "data-dir",
        env = "MEMORYD_DATA_DIR",
        default_value = "./memoryd-data"
    )]
    pub data_dir: PathBuf,
    /// `postgres://…` or `sqlite://…`; default: `sqlite://<data dir>/memoryd.db`.
    #[arg(long = "database-url", env = "DATABASE_URL")]
    pub database_url: Option<String>,
    /// Bearer token of `/v1/admin`; unset: the admin API answers 404.
    #[arg(
        long = "admin-token",
        env = "MEMORYD_ADMIN_TOKEN",
        hide_env_values = true
    )]
    pub admin_token: Option<String>,
    /// Largest accepted request body, in bytes.
    #[arg(
        long = "max-segment-bytes",
        env = "MEMORYD_MAX_SEGMENT_BYTES",
        default_value_t = 33_554_432
    )]
    pub max_segment_bytes: usize,
    /// Log filter (tracing `EnvFilter` syntax).
    #[arg(long = "log", env = "MEMORYD_LOG", default_value = "info")]
    pub log: String,
    /// `text` or `json` (one JSON object a line).
    #[arg(
        long = "log-format",
        env = "MEMORYD_LOG_FORMAT",
        default_value = "text"
    )]
    pub log_format: String,
}

impl Config {
    pub fn database_url(&self) -> String {
        self.database_url
            .clone()
            .filter(|u| !u.is_empty())
            .unwrap_or_else(|| format!("sqlite://{}", self.data_dir.join("memoryd.db").display()))
    }
}
