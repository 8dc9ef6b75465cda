//! A tenant's limits (SPEC §2.9): what an operator sets, what the server's
//! defaults fill in, and what each field means. Absent or 0: unlimited.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "LimitsBody")]
pub struct Limits {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub requests_per_second: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub burst: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_tokens_per_day: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub open_sessions: Option<u64>,
}

/// A tenant's request rate: tokens per second and the bucket's size.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RequestRate {
    pub per_second: f64,
    pub burst: u32,
}

/// The largest bucket a tenant may have.
const MAX_BURST: u64 = 1_000_000;
/// The fastest refill a tenant may have (beyond it, the limit is none).
const MAX_REQUESTS_PER_SECOND: f64 = 1e9;
/// The slowest, above none at all: one request a day.
const MIN_REQUESTS_PER_SECOND: f64 = 1.0 / 86_400.0;

impl Limits {
    /// The 400's detail for a value no limit can have.
    pub fn validate(&self) -> Result<(), String> {
        if let Some(rps) = self.requests_per_second
            && !(rps == 0.0 || (MIN_REQUESTS_PER_SECOND..=MAX_REQUESTS_PER_SECOND).contains(&rps))
        {
            return Err(format!(
                "requests_per_second must be 0 (no limit) or from one a day ({MIN_REQUESTS_PER_SECOND:.8}) \
                 to {MAX_REQUESTS_PER_SECOND}, got: {rps}"
            ));
        }
        if let Some(burst) = self.burst
            && burst > MAX_BURST
        {
            return Err(format!("burst must be at most {MAX_BURST}, got: {burst}"));
        }
        Ok(())
    }

    /// These limits, each field the tenant does not set taken from `defaults`.
    pub fn over(self, defaults: Limits) -> Limits {
        Limits {
            requests_per_second: self.requests_per_second.or(defaults.requests_per_second),
            burst: self.burst.or(defaults.burst),
            storage_bytes: self.storage_bytes.or(defaults.storage_bytes),
            model_tokens_per_day: self.model_tokens_per_day.or(defaults.model_tokens_per_day),
            open_sessions: self.open_sessions.or(defaults.open_sessions),
        }
    }

    /// The request rate, if one applies; a burst of 0 or none is one
    /// second's worth (at least one request).
    pub fn request_rate(&self) -> Option<RequestRate> {
        let per_second = self.requests_per_second.filter(|r| *r > 0.0)?;
        let burst = self.burst.filter(|b| *b > 0).unwrap_or_else(|| per_second.ceil() as u64).clamp(1, MAX_BURST);
        Some(RequestRate { per_second, burst: burst as u32 })
    }

    /// The five fields as `GET /v1/limits` answers them: `null` = unlimited.
    pub fn view(&self) -> LimitsView {
        let rate = self.request_rate();
        let positive = |v: Option<u64>| v.filter(|n| *n > 0);
        LimitsView {
            requests_per_second: rate.map(|r| r.per_second),
            burst: rate.map(|r| r.burst),
            storage_bytes: positive(self.storage_bytes),
            model_tokens_per_day: positive(self.model_tokens_per_day),
            open_sessions: positive(self.open_sessions),
        }
    }
}

/// Limits in force as the API shows them: every field present, `null` unlimited.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, schemars::JsonSchema)]
#[schemars(rename = "Limits")]
pub struct LimitsView {
    pub requests_per_second: Option<f64>,
    pub burst: Option<u32>,
    pub storage_bytes: Option<u64>,
    pub model_tokens_per_day: Option<u64>,
    pub open_sessions: Option<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn absent_or_zero_is_unlimited_and_defaults_fill_the_rest() {
        let defaults: Limits = serde_json::from_str(r#"{"requests_per_second": 50, "open_sessions": 10}"#).unwrap();
        let set: Limits =
            serde_json::from_str(r#"{"requests_per_second": 2.5, "burst": 0, "storage_bytes": 0}"#).unwrap();
        let effective = set.over(defaults);
        assert_eq!(effective.request_rate(), Some(RequestRate { per_second: 2.5, burst: 3 }));
        assert_eq!(
            serde_json::to_value(effective.view()).unwrap(),
            json!({"requests_per_second": 2.5, "burst": 3, "storage_bytes": null, "model_tokens_per_day": null, "open_sessions": 10})
        );
        assert_eq!(Limits::default().request_rate(), None);
        let off: Limits = serde_json::from_str(r#"{"requests_per_second": 0, "burst": 5}"#).unwrap();
        assert_eq!(off.over(defaults).request_rate(), None, "0 is unlimited even over a default");
        assert!(serde_json::from_str::<Limits>(r#"{"rps": 1}"#).is_err());
        assert!(serde_json::from_str::<Limits>(r#"{"burst": -1}"#).is_err());
        for bad in [-1.0, 1e-300, f64::MIN_POSITIVE, 1e-6, f64::NAN, f64::INFINITY, 2e9] {
            let limits = Limits { requests_per_second: Some(bad), ..Default::default() };
            assert!(limits.validate().unwrap_err().contains("requests_per_second"), "{bad}");
        }
        for good in [0.0, 1.0 / 86_400.0, 0.5, 1e9] {
            assert!(Limits { requests_per_second: Some(good), ..Default::default() }.validate().is_ok(), "{good}");
        }
        assert!(Limits { burst: Some(MAX_BURST + 1), ..Default::default() }.validate().is_err());
    }
}
