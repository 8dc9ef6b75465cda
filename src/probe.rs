//! `memoryd health`: asks the memoryd at `MEMORYD_LISTEN` whether it is up
//! or ready, for a container's health check — which reads the same
//! setting as the server, so any listen address works.

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

/// Whether `memoryd health` asks for liveness or readiness.
#[derive(Debug, Clone, clap::Args)]
pub struct HealthArgs {
    /// The address the server listens on.
    #[arg(long = "listen", env = "MEMORYD_LISTEN", default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
    /// Ask `/readyz` (database and volume usable) rather than `/healthz`.
    #[arg(long = "ready", default_value_t = false)]
    pub ready: bool,
}

/// How long the probe waits for an answer: a health check's own timeout is
/// usually a few seconds.
const PROBE_TIMEOUT: Duration = Duration::from_secs(3);

/// The address to connect to for a listen address: a server listening on
/// every interface is asked on the loopback of the same family.
pub fn connect_address(listen: SocketAddr) -> SocketAddr {
    match listen {
        SocketAddr::V4(a) if a.ip().is_unspecified() => SocketAddr::from((Ipv4Addr::LOCALHOST, a.port())),
        SocketAddr::V6(a) if a.ip().is_unspecified() => SocketAddr::from((Ipv6Addr::LOCALHOST, a.port())),
        other => other,
    }
}

/// `Ok` when the server answers 2xx; else what went wrong, to print.
pub async fn probe(args: &HealthArgs) -> Result<(), String> {
    let route = if args.ready { "readyz" } else { "healthz" };
    let url = format!("http://{}/{route}", connect_address(args.listen));
    let client = reqwest::Client::builder()
        .timeout(PROBE_TIMEOUT)
        .no_proxy()
        .build()
        .map_err(|e| format!("cannot build an HTTP client: {e}"))?;
    let answer = client.get(&url).send().await.map_err(|e| format!("{url}: {}", crate::error_chain(&e)))?;
    let status = answer.status();
    if status.is_success() {
        Ok(())
    } else {
        let body = answer.text().await.unwrap_or_default();
        Err(format!("{url} answered {status}: {}", body.chars().take(500).collect::<String>()))
    }
}

#[cfg(test)]
mod tests {
    use super::connect_address;

    #[test]
    fn every_interface_is_asked_on_its_loopback() {
        let cases = [
            ("0.0.0.0:9000", "127.0.0.1:9000"),
            ("[::]:9001", "[::1]:9001"),
            ("10.1.2.3:8080", "10.1.2.3:8080"),
            ("127.0.0.1:8080", "127.0.0.1:8080"),
            ("[fe80::1]:80", "[fe80::1]:80"),
        ];
        for (listen, asked) in cases {
            assert_eq!(connect_address(listen.parse().unwrap()).to_string(), asked, "{listen}");
        }
    }
}
