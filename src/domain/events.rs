//! Events and their webhooks (SPEC §2.8): the event types and bodies, event
//! ids, Standard Webhooks signatures, endpoint secrets, which addresses an
//! endpoint may not reach, and when a failed delivery is tried again.

use super::memory_status::MemoryStatus;
use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use chrono::{DateTime, SecondsFormat, Utc};
use hmac::{KeyInit, Mac};
use serde_json::{Value, json};
use std::net::IpAddr;
use std::time::Duration;
use uuid::Uuid;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum EventType {
    SessionClosed,
    RunSucceeded,
    RunFailed,
    JobFailed,
    ForgetCompleted,
    /// A running agent's edit was published (SPEC §2.10).
    MemoryEdited,
    /// Sent to one endpoint on request (`POST /v1/webhooks/{id}/test`).
    WebhookTest,
}

impl EventType {
    pub const ALL: [EventType; 7] = [
        Self::SessionClosed,
        Self::RunSucceeded,
        Self::RunFailed,
        Self::JobFailed,
        Self::ForgetCompleted,
        Self::MemoryEdited,
        Self::WebhookTest,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::SessionClosed => "session.closed",
            Self::RunSucceeded => "run.succeeded",
            Self::RunFailed => "run.failed",
            Self::JobFailed => "job.failed",
            Self::ForgetCompleted => "forget.completed",
            Self::MemoryEdited => "memory.edited",
            Self::WebhookTest => "webhook.test",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.as_str() == text)
    }
}

/// An entry of a webhook's `events` as a request names it: an event type,
/// or `*` (every type, standing alone).
pub struct SubscribedType;

impl schemars::JsonSchema for SubscribedType {
    fn inline_schema() -> bool {
        true
    }

    fn schema_name() -> std::borrow::Cow<'static, str> {
        "SubscribedType".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        let names: Vec<&str> = std::iter::once("*").chain(EventType::ALL.iter().map(|t| t.as_str())).collect();
        schemars::json_schema!({"type": "string", "enum": names})
    }
}

/// An event to be written to the outbox.
#[derive(Debug, Clone, PartialEq)]
pub struct NewEvent {
    pub event_type: EventType,
    pub data: Value,
    /// Delivered to this endpoint only, whatever the others subscribe to.
    pub only_webhook: Option<Uuid>,
}

impl NewEvent {
    pub fn new(event_type: EventType, data: Value) -> Self {
        Self { event_type, data, only_webhook: None }
    }

    /// The body every receiver gets: `{"type", "timestamp", "data"}`.
    pub fn payload(&self, at: DateTime<Utc>) -> String {
        json!({"type": self.event_type.as_str(), "timestamp": timestamp(at), "data": self.data}).to_string()
    }
}

pub fn timestamp(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// `session.closed`: the session settled, with its memory's status.
pub fn session_closed(session_id: &str, workspace: &str, memory_status: &MemoryStatus) -> NewEvent {
    NewEvent::new(
        EventType::SessionClosed,
        json!({"session_id": session_id, "workspace": workspace, "memory_status": memory_status}),
    )
}

/// What a run's event reports of it.
pub struct RunSummary<'a> {
    pub run_id: Uuid,
    pub workspace: &'a str,
    pub layout: &'a str,
    pub kind: &'a str,
    pub succeeded: bool,
    pub selected: i64,
    pub added: i64,
    pub retained: i64,
    pub removed: i64,
    pub error: Option<&'a str>,
}

/// `run.succeeded` or `run.failed`: a phase-two, restore or forget run ended.
pub fn run_finished(run: &RunSummary<'_>) -> NewEvent {
    let event_type = if run.succeeded { EventType::RunSucceeded } else { EventType::RunFailed };
    NewEvent::new(
        event_type,
        json!({
            "run_id": run.run_id, "workspace": run.workspace, "layout": run.layout, "kind": run.kind,
            "selected": run.selected, "added": run.added, "retained": run.retained, "removed": run.removed,
            "error": run.error,
        }),
    )
}

/// `job.failed`: a job is out of attempts (or refused for good).
pub fn job_failed(job_id: Uuid, kind: &str, workspace: &str, layout: &str, error: &str) -> NewEvent {
    NewEvent::new(
        EventType::JobFailed,
        json!({"job_id": job_id, "kind": kind, "workspace": workspace, "layout": layout, "error": error}),
    )
}

/// `forget.completed`: a forget job erased what it was asked to.
pub fn forget_completed(job_id: Uuid, workspace: &str, forget: Value) -> NewEvent {
    NewEvent::new(EventType::ForgetCompleted, json!({"job_id": job_id, "workspace": workspace, "forget": forget}))
}

/// `memory.edited`: a running agent's edit was published; `paths` are the
/// files it changed, relative to the workspace.
pub fn memory_edited(run_id: Uuid, workspace: &str, layout: &str, paths: &[&str]) -> NewEvent {
    NewEvent::new(
        EventType::MemoryEdited,
        json!({"run_id": run_id, "workspace": workspace, "layout": layout, "paths": paths}),
    )
}

/// `webhook.test`: what the console's Send test event button sends.
pub fn webhook_test(webhook_id: Uuid) -> NewEvent {
    NewEvent {
        event_type: EventType::WebhookTest,
        data: json!({"webhook_id": webhook_id, "message": "a test event from memoryd"}),
        only_webhook: Some(webhook_id),
    }
}

/// An event's id, `evt_<seq, 16 digits>_<12 hex of the tenant>`: it sorts
/// as the tenant's events were committed, and differs between tenants, so a
/// receiver serving several tenants can deduplicate by it.
pub fn event_id(tenant: Uuid, seq: i64) -> String {
    format!("evt_{seq:016}_{}", &tenant.simple().to_string()[..12])
}

/// The sequence number in a tenant's own event id (a `Last-Event-ID`).
pub fn parse_event_id(tenant: Uuid, id: &str) -> Option<i64> {
    let rest = id.trim().strip_prefix("evt_")?;
    let (seq, suffix) = rest.split_once('_')?;
    if suffix != &tenant.simple().to_string()[..12] || seq.len() != 16 || !seq.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    seq.parse().ok()
}

/// Which event types an endpoint receives, as stored: `*` for all, else the
/// names between commas (`,session.closed,job.failed,`), so one `LIKE`
/// finds the endpoints of a type.
pub fn subscription_text(types: &[EventType]) -> String {
    if types.is_empty() {
        return "*".into();
    }
    let mut names: Vec<&str> = types.iter().map(|t| t.as_str()).collect();
    names.sort_unstable();
    names.dedup();
    format!(",{},", names.join(","))
}

pub fn subscription_types(text: &str) -> Vec<String> {
    if text == "*" {
        return Vec::new();
    }
    text.split(',').filter(|s| !s.is_empty()).map(str::to_owned).collect()
}

/// An endpoint's signing secret: `whsec_` and the base64 of 32 random bytes.
pub fn new_secret() -> String {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).expect("the operating system's random source");
    format!("whsec_{}", BASE64.encode(bytes))
}

/// The key bytes of a secret (Standard Webhooks: the base64 after `whsec_`).
pub fn secret_key(secret: &str) -> Option<Vec<u8>> {
    BASE64.decode(secret.strip_prefix("whsec_")?).ok()
}

/// The `webhook-signature` of one secret: `v1,` and the base64 HMAC-SHA256
/// of `{id}.{timestamp}.{body}`.
pub fn signature(secret: &str, id: &str, timestamp: i64, body: &[u8]) -> Option<String> {
    let key = secret_key(secret)?;
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(&key).ok()?;
    mac.update(id.as_bytes());
    mac.update(b".");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    Some(format!("v1,{}", BASE64.encode(mac.finalize().into_bytes())))
}

/// The header's value: one signature per secret in force, space-separated.
pub fn signature_header(secrets: &[&str], id: &str, timestamp: i64, body: &[u8]) -> String {
    secrets.iter().filter_map(|s| signature(s, id, timestamp, body)).collect::<Vec<_>>().join(" ")
}

/// Why an endpoint's URL is refused (422 `invalid_webhook`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UrlRefusal {
    #[error("url is not an absolute http(s) URL")]
    NotAUrl,
    #[error("url must be https:// (http:// needs MEMORYD_WEBHOOK_ALLOW_HTTP=true)")]
    PlainHttp,
    #[error("url must not carry credentials")]
    Credentials,
    #[error("url's host does not resolve")]
    Unresolvable,
    #[error(
        "url's host is a loopback, private, link-local or unspecified address (allowed only with MEMORYD_WEBHOOK_ALLOW_PRIVATE=true)"
    )]
    PrivateAddress,
}

/// What the deployment lets endpoints be.
#[derive(Debug, Clone, Copy, Default)]
pub struct UrlPolicy {
    pub allow_http: bool,
    pub allow_private: bool,
}

/// The URL's scheme and shape; where it points is checked on its addresses.
pub fn check_url_shape(url: &str, policy: UrlPolicy) -> Result<url::Url, UrlRefusal> {
    let parsed = url::Url::parse(url).map_err(|_| UrlRefusal::NotAUrl)?;
    match parsed.scheme() {
        "https" => {}
        "http" if policy.allow_http => {}
        "http" => return Err(UrlRefusal::PlainHttp),
        _ => return Err(UrlRefusal::NotAUrl),
    }
    if parsed.host_str().is_none_or(str::is_empty) {
        return Err(UrlRefusal::NotAUrl);
    }
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err(UrlRefusal::Credentials);
    }
    if url.len() > 2048 {
        return Err(UrlRefusal::NotAUrl);
    }
    Ok(parsed)
}

/// The address a URL names by itself (an IP literal), from the parsed
/// host, never from its text; `None` for a name to resolve.
pub fn literal_address(url: &url::Url) -> Option<IpAddr> {
    match url.host()? {
        url::Host::Ipv4(v4) => Some(IpAddr::V4(v4)),
        url::Host::Ipv6(v6) => Some(IpAddr::V6(v6)),
        url::Host::Domain(_) => None,
    }
}

/// An address no endpoint may reach without `MEMORYD_WEBHOOK_ALLOW_PRIVATE`:
/// loopback, private, link-local, unspecified, shared, benchmarking,
/// protocol-assignment, documentation, reserved, multicast and broadcast
/// ranges, and IPv6 that carries IPv4 (mapped, compatible, NAT64, 6to4)
/// judged by the IPv4 inside.
pub fn forbidden_address(addr: IpAddr) -> bool {
    match addr {
        IpAddr::V4(v4) => forbidden_v4(v4),
        IpAddr::V6(v6) => {
            let s = v6.segments();
            let low = std::net::Ipv4Addr::new((s[6] >> 8) as u8, s[6] as u8, (s[7] >> 8) as u8, s[7] as u8);
            if let Some(v4) = v6.to_ipv4_mapped() {
                return forbidden_v4(v4);
            }
            // IPv4-compatible `::a.b.c.d` (`::` and `::1` among them) and NAT64 `64:ff9b::/96`.
            if s[..6] == [0; 6] || s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
                return forbidden_v4(low);
            }
            // 6to4 `2002::/16`: the IPv4 is in the next 32 bits.
            if s[0] == 0x2002 {
                return forbidden_v4(std::net::Ipv4Addr::new(
                    (s[1] >> 8) as u8,
                    s[1] as u8,
                    (s[2] >> 8) as u8,
                    s[2] as u8,
                ));
            }
            v6.is_multicast()
                || (s[0] & 0xfe00) == 0xfc00 // unique local fc00::/7
                || (s[0] & 0xffc0) == 0xfe80 // link-local fe80::/10
                || (s[0] & 0xffc0) == 0xfec0 // site-local fec0::/10
                || (s[0], s[1]) == (0x64, 0xff9b) // local-use NAT64 64:ff9b:1::/48
                || (s[0], s[1]) == (0x2001, 0) // Teredo 2001::/32
                || (s[0], s[1]) == (0x2001, 0xdb8) // documentation
                || s[..4] == [0x100, 0, 0, 0] // discard-only 100::/64
        }
    }
}

fn forbidden_v4(v4: std::net::Ipv4Addr) -> bool {
    let [a, b, c, _] = v4.octets();
    v4.is_loopback()
        || v4.is_private()
        || v4.is_link_local()
        || v4.is_multicast()
        || a == 0 // this network, 0.0.0.0/8
        || a >= 240 // reserved and broadcast, 240.0.0.0/4
        || (a == 100 && (64..128).contains(&b)) // shared, 100.64.0.0/10
        || (a, b, c) == (192, 0, 0) // protocol assignments
        || (a == 198 && (b == 18 || b == 19)) // benchmarking, 198.18.0.0/15
        || matches!((a, b, c), (192, 0, 2) | (198, 51, 100) | (203, 0, 113)) // documentation
}

/// The wait before attempt `attempts + 1` after `attempts` failed ones, or
/// `None` when the delivery is out of attempts (SPEC §2.8: about 5 s,
/// 5 min, 30 min, 2 h, 5 h, 10 h, 10 h).
pub fn retry_after(attempts: i64) -> Option<Duration> {
    const SCHEDULE: [u64; 7] = [5, 300, 1800, 7200, 18_000, 36_000, 36_000];
    let index = usize::try_from(attempts.checked_sub(1)?).ok()?;
    SCHEDULE.get(index).map(|s| Duration::from_secs(*s))
}

/// What a receiver's answer means for the delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    Delivered,
    /// 410 Gone: the endpoint asks to be disabled.
    Gone,
    Failed,
}

pub fn classify(status: Option<u16>) -> Answer {
    match status {
        Some(200..=299) => Answer::Delivered,
        Some(410) => Answer::Gone,
        _ => Answer::Failed,
    }
}

/// A body as the delivery record keeps it: at most `limit` bytes of text.
pub fn recorded_body(body: &[u8], limit: usize) -> String {
    let cut = body.len().min(limit);
    let mut text = String::from_utf8_lossy(&body[..cut]).into_owned();
    if body.len() > limit {
        text.push('…');
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signatures_follow_the_standard_webhooks_example() {
        // The Standard Webhooks specification's own test vector.
        let secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
        let body = br#"{"test": 2432232314}"#;
        let sig = signature(secret, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, body).unwrap();
        assert_eq!(sig, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
        let both = signature_header(&[secret, secret], "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, body);
        assert_eq!(both, format!("{sig} {sig}"));
        assert_eq!(signature("no-prefix", "id", 1, b""), None);
    }

    #[test]
    fn secrets_are_32_random_bytes_in_base64() {
        let (a, b) = (new_secret(), new_secret());
        assert_ne!(a, b);
        assert!(a.starts_with("whsec_"));
        assert_eq!(secret_key(&a).unwrap().len(), 32);
    }

    #[test]
    fn event_ids_sort_by_sequence_and_name_their_tenant() {
        let tenant = Uuid::parse_str("0123456789abcdef0123456789abcdef").unwrap();
        let other = Uuid::new_v4();
        let id = event_id(tenant, 42);
        assert_eq!(id, "evt_0000000000000042_0123456789ab");
        assert!(event_id(tenant, 9) < event_id(tenant, 10));
        assert_eq!(parse_event_id(tenant, &id), Some(42));
        assert_eq!(parse_event_id(other, &id), None, "another tenant's id resumes nothing");
        for bad in ["", "evt_42_0123456789ab", "evt_00000000000000x2_0123456789ab", "42"] {
            assert_eq!(parse_event_id(tenant, bad), None, "{bad}");
        }
    }

    #[test]
    fn subscriptions_round_trip_and_all_is_a_star() {
        assert_eq!(subscription_text(&[]), "*");
        let text = subscription_text(&[EventType::JobFailed, EventType::SessionClosed, EventType::JobFailed]);
        assert_eq!(text, ",job.failed,session.closed,");
        assert_eq!(subscription_types(&text), ["job.failed", "session.closed"]);
        assert!(subscription_types("*").is_empty());
        for t in EventType::ALL {
            assert_eq!(EventType::parse(t.as_str()), Some(t));
        }
        assert_eq!(EventType::parse("session.opened"), None);
    }

    #[test]
    fn url_shapes() {
        let strict = UrlPolicy::default();
        let dev = UrlPolicy { allow_http: true, allow_private: true };
        assert!(check_url_shape("https://hooks.example.com/memoryd", strict).is_ok());
        assert_eq!(check_url_shape("http://hooks.example.com/", strict), Err(UrlRefusal::PlainHttp));
        assert!(check_url_shape("http://hooks.example.com/", dev).is_ok());
        assert_eq!(check_url_shape("ftp://x/", dev), Err(UrlRefusal::NotAUrl));
        assert_eq!(check_url_shape("not a url", dev), Err(UrlRefusal::NotAUrl));
        assert_eq!(check_url_shape("https://u:p@hooks.example.com/", dev), Err(UrlRefusal::Credentials));
    }

    #[test]
    fn forbidden_addresses() {
        for bad in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "0.0.0.0",
            "100.64.0.1",
            "255.255.255.255",
            "224.0.0.1",
            "::1",
            "::",
            "fc00::1",
            "fd12::1",
            "fe80::1",
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
            "0.1.2.3",
            "100.127.255.255",
            "192.0.0.8",
            "198.18.0.1",
            "198.19.255.254",
            "240.0.0.1",
            "192.0.2.1",
            "64:ff9b::7f00:1",
            "64:ff9b::a9fe:a9fe",
            "64:ff9b:1::1",
            "2002:7f00:1::1",
            "2002:a9fe:a9fe::",
            "::a9fe:a9fe",
            "::7f00:1",
            "fec0::1",
            "2001:0:4136:e378::1",
            "2001:db8::1",
            "100::1",
        ] {
            assert!(forbidden_address(bad.parse().unwrap()), "{bad}");
        }
        for good in [
            "93.184.216.34",
            "8.8.8.8",
            "2606:4700::1111",
            "172.32.0.1",
            "100.128.0.1",
            "198.20.0.1",
            "192.0.1.1",
            "64:ff9b::808:808",
            "2002:808:808::1",
            "2001:4860::8888",
        ] {
            assert!(!forbidden_address(good.parse().unwrap()), "{good}");
        }
    }

    #[test]
    fn the_retry_schedule_has_seven_retries() {
        let waits: Vec<u64> = (1..=8).map_while(retry_after).map(|d| d.as_secs()).collect();
        assert_eq!(waits, [5, 300, 1800, 7200, 18_000, 36_000, 36_000]);
        assert_eq!(retry_after(8), None);
        assert_eq!(retry_after(0), None);
    }

    #[test]
    fn answers_and_recorded_bodies() {
        assert_eq!(classify(Some(204)), Answer::Delivered);
        assert_eq!(classify(Some(410)), Answer::Gone);
        assert_eq!(classify(Some(500)), Answer::Failed);
        assert_eq!(classify(Some(301)), Answer::Failed, "redirects are not followed");
        assert_eq!(classify(None), Answer::Failed);
        assert_eq!(recorded_body(b"ok", 10), "ok");
        assert_eq!(recorded_body(b"0123456789abc", 10), "0123456789…");
    }

    #[test]
    fn payloads_carry_type_timestamp_and_data() {
        let at = DateTime::parse_from_rfc3339("2026-12-02T10:00:00.5Z").unwrap().with_timezone(&Utc);
        let event = session_closed("s1", "default", &MemoryStatus::settled(vec![]));
        assert_eq!(
            event.payload(at),
            r#"{"type":"session.closed","timestamp":"2026-12-02T10:00:00.500Z","data":{"session_id":"s1","workspace":"default","memory_status":{"status":"complete","failures":[]}}}"#
        );
    }
}
