//! Who is asking the console or the admin API, as far as it can tell: the
//! client's address (from a trusted proxy's `X-Forwarded-For`, else the
//! peer) and whether the request came over HTTPS; and the throttle on failed
//! sign-ins per address.
//! A trusted proxy is one on this host (a loopback peer): only it can have
//! seen the client's own connection. `X-Forwarded-For` is read from the
//! right, where each proxy appends the peer it saw: the first entry that is
//! not a proxy on this host is the client; what a client wrote to the left
//! of it is never believed.

use crate::api::AppState;
use axum::extract::{ConnectInfo, FromRequestParts};
use axum::http::HeaderMap;
use axum::http::request::Parts;
use std::collections::{HashMap, VecDeque};
use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};
use std::sync::Mutex;
use std::time::{Duration, Instant};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Client {
    pub addr: Option<IpAddr>,
    /// The request reached the proxy over HTTPS: its cookies get `Secure`.
    pub https: bool,
}

impl Client {
    pub fn of(peer: Option<SocketAddr>, headers: &HeaderMap) -> Self {
        let trusted = peer.is_some_and(|p| p.ip().is_loopback());
        let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
        let forwarded_for = header("x-forwarded-for").and_then(|list| {
            list.rsplit(',')
                .map(|entry| entry.trim().parse::<IpAddr>().ok())
                .find(|entry| !entry.is_some_and(|ip| ip.is_loopback()))
                .flatten()
        });
        let addr = match (trusted, forwarded_for) {
            (true, Some(client)) => Some(client),
            _ => peer.map(|p| p.ip()),
        };
        let https = trusted && header("x-forwarded-proto").is_some_and(|p| p.trim().eq_ignore_ascii_case("https"));
        Self { addr, https }
    }
}

impl FromRequestParts<AppState> for Client {
    type Rejection = Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &AppState) -> Result<Self, Infallible> {
        let peer = parts.extensions.get::<ConnectInfo<SocketAddr>>().map(|c| c.0);
        Ok(Self::of(peer, &parts.headers))
    }
}

/// Failed sign-ins an address may make within [`WINDOW`] before it waits.
pub const MAX_FAILED_SIGN_INS: usize = 10;
const WINDOW: Duration = Duration::from_secs(300);
/// Addresses remembered at most; past that the oldest records are dropped.
const MAX_ADDRESSES: usize = 10_000;

/// Failed sign-ins per client address, on this replica.
#[derive(Default)]
pub struct SignInThrottle {
    failures: Mutex<HashMap<IpAddr, VecDeque<Instant>>>,
}

impl SignInThrottle {
    /// How long `addr` must wait before its next attempt; `None`: it may try.
    pub fn wait(&self, addr: IpAddr, now: Instant) -> Option<Duration> {
        let mut failures = self.failures.lock().unwrap_or_else(|p| p.into_inner());
        let recent = failures.get_mut(&addr)?;
        while recent.front().is_some_and(|at| now.duration_since(*at) >= WINDOW) {
            recent.pop_front();
        }
        (recent.len() >= MAX_FAILED_SIGN_INS).then(|| WINDOW - now.duration_since(recent[0]))
    }

    pub fn failed(&self, addr: IpAddr, now: Instant) {
        let mut failures = self.failures.lock().unwrap_or_else(|p| p.into_inner());
        if failures.len() >= MAX_ADDRESSES && !failures.contains_key(&addr) {
            failures.retain(|_, at| at.back().is_some_and(|last| now.duration_since(*last) < WINDOW));
        }
        let recent = failures.entry(addr).or_default();
        recent.push_back(now);
        while recent.len() > MAX_FAILED_SIGN_INS {
            recent.pop_front();
        }
    }

    pub fn succeeded(&self, addr: IpAddr) {
        self.failures.lock().unwrap_or_else(|p| p.into_inner()).remove(&addr);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    #[test]
    fn only_a_proxy_on_this_host_names_the_client_and_its_scheme() {
        let mut headers = HeaderMap::new();
        headers.insert("x-forwarded-for", HeaderValue::from_static("203.0.113.9, 10.0.0.1"));
        headers.insert("x-forwarded-proto", HeaderValue::from_static("https"));
        let proxy: SocketAddr = "127.0.0.1:5000".parse().unwrap();
        let outsider: SocketAddr = "198.51.100.7:5000".parse().unwrap();
        // 10.0.0.1 is no proxy of this host's: it is the client the proxy saw.
        assert_eq!(Client::of(Some(proxy), &headers), Client { addr: Some("10.0.0.1".parse().unwrap()), https: true });
        assert_eq!(Client::of(Some(outsider), &headers), Client { addr: Some(outsider.ip()), https: false });
        assert_eq!(Client::of(Some(proxy), &HeaderMap::new()), Client { addr: Some(proxy.ip()), https: false });
        // What the client itself wrote, left of what the proxy appended, is not believed.
        let addr = |forwarded: &'static str| {
            let mut headers = HeaderMap::new();
            headers.insert("x-forwarded-for", HeaderValue::from_static(forwarded));
            Client::of(Some(proxy), &headers).addr
        };
        assert_eq!(addr("1.2.3.4, 203.0.113.9"), Some("203.0.113.9".parse().unwrap()));
        assert_eq!(addr("5.6.7.8, 203.0.113.9, 127.0.0.1"), Some("203.0.113.9".parse().unwrap()));
        assert_eq!(addr("x, 127.0.0.1"), Some(proxy.ip()), "garbage is no address: the proxy's own");
        assert_eq!(addr("127.0.0.1"), Some(proxy.ip()));
        assert_eq!(Client::of(None, &headers), Client { addr: None, https: false });
    }

    #[test]
    fn an_address_waits_after_ten_failures_and_others_do_not() {
        let throttle = SignInThrottle::default();
        let (a, b): (IpAddr, IpAddr) = ("203.0.113.9".parse().unwrap(), "203.0.113.10".parse().unwrap());
        let start = Instant::now();
        for i in 0..MAX_FAILED_SIGN_INS as u64 {
            assert_eq!(throttle.wait(a, start), None);
            throttle.failed(a, start + Duration::from_secs(i));
        }
        let now = start + Duration::from_secs(20);
        assert_eq!(throttle.wait(a, now), Some(WINDOW - Duration::from_secs(20)));
        assert_eq!(throttle.wait(b, now), None);
        // The oldest failure leaves the window: one more attempt.
        assert_eq!(throttle.wait(a, start + WINDOW), None);
        throttle.succeeded(a);
        assert_eq!(throttle.wait(a, now), None);
    }
}
