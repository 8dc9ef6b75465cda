//! Wiring: open the store, build the router, serve until shutdown.

use crate::api::{AppState, router};
use crate::config::Config;
use crate::store;
use crate::workspace::Volumes;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// How long in-flight requests get after SIGTERM before the process exits.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(30);

/// A server running in this process.
pub struct RunningServer {
    pub addr: SocketAddr,
    pub state: AppState,
    shutdown: watch::Sender<bool>,
    task: JoinHandle<std::io::Result<()>>,
}

impl RunningServer {
    /// Stops accepting, lets in-flight requests finish, and waits for that.
    pub async fn shutdown(self) -> std::io::Result<()> {
        let _ = self.shutdown.send(true);
        self.task.await.map_err(std::io::Error::other)?
    }
}

pub async fn start(
    config: Config,
    listener: TcpListener,
) -> Result<RunningServer, Box<dyn std::error::Error + Send + Sync>> {
    std::fs::create_dir_all(&config.data_dir)?;
    let store = store::connect(&config.database_url()).await?;
    let volumes = Volumes::new(&config.data_dir);
    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    let state = AppState {
        store,
        volumes,
        config: Arc::new(config),
        shutdown: shutdown_rx.clone(),
    };
    let app = router(state.clone());
    let addr = listener.local_addr()?;
    let mut stop = shutdown_rx;
    let task = tokio::spawn(async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(async move {
                let _ = stop.wait_for(|s| *s).await;
            })
            .await
    });
    Ok(RunningServer {
        addr,
        state,
        shutdown: shutdown_tx,
        task,
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
