//! Each tenant's request bucket, per replica: the request rate a tenant's
//! limits allow.

use std::collections::HashMap;
use std::sync::Mutex;
use uuid::Uuid;

type Bucket = governor::RateLimiter<
    governor::state::NotKeyed,
    governor::state::InMemoryState,
    governor::clock::DefaultClock,
    governor::middleware::StateInformationMiddleware,
>;

/// One tenant's request, as its bucket judged it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RateDecision {
    pub rate: crate::domain::limits::RequestRate,
    /// Requests left in the bucket after this one.
    pub remaining: u32,
    /// Refused: how long until a request would pass.
    pub retry_after: Option<std::time::Duration>,
}

impl RateDecision {
    /// Whole seconds until the bucket is full again.
    pub fn seconds_to_refill(&self) -> u64 {
        let missing = f64::from(self.rate.burst.saturating_sub(self.remaining));
        (missing / self.rate.per_second).ceil() as u64
    }
}

/// A token bucket per tenant on this replica (governor's GCRA), made anew
/// when the tenant's rate changes. A bucket unused for longer than it takes
/// to fill again is dropped (a new one is the same): the map holds the
/// tenants making requests now, not every tenant ever seen or deleted.
#[derive(Default)]
pub struct RequestBuckets {
    by_tenant: Mutex<TenantBuckets>,
}

#[derive(Default)]
struct TenantBuckets {
    buckets: HashMap<Uuid, TenantBucket>,
    pruned_at: Option<std::time::Instant>,
}

struct TenantBucket {
    rate: crate::domain::limits::RequestRate,
    bucket: std::sync::Arc<Bucket>,
    used_at: std::time::Instant,
}

/// How often idle buckets are looked for.
const PRUNE_EVERY: std::time::Duration = std::time::Duration::from_secs(60);

impl TenantBuckets {
    fn prune(&mut self, now: std::time::Instant) {
        if self.pruned_at.is_some_and(|at| now.duration_since(at) < PRUNE_EVERY) {
            return;
        }
        self.pruned_at = Some(now);
        self.buckets.retain(|_, b| {
            let refill = std::time::Duration::try_from_secs_f64(f64::from(b.rate.burst) / b.rate.per_second)
                .unwrap_or(std::time::Duration::MAX);
            now.duration_since(b.used_at) < refill.saturating_add(PRUNE_EVERY)
        });
    }
}

impl RequestBuckets {
    pub fn check(&self, tenant: Uuid, rate: crate::domain::limits::RequestRate) -> RateDecision {
        let bucket = self.bucket_of(tenant, rate);
        Self::decision(rate, bucket.check())
    }

    /// Takes `n` (at least one) requests at once, a batch's segments; `None`
    /// when `n` is zero or more than the burst, which no wait would let through.
    pub fn check_n(&self, tenant: Uuid, rate: crate::domain::limits::RequestRate, n: u32) -> Option<RateDecision> {
        let n = std::num::NonZeroU32::new(n)?;
        let bucket = self.bucket_of(tenant, rate);
        bucket.check_n(n).ok().map(|outcome| Self::decision(rate, outcome))
    }

    fn decision(
        rate: crate::domain::limits::RequestRate,
        outcome: Result<governor::middleware::StateSnapshot, governor::NotUntil<governor::clock::QuantaInstant>>,
    ) -> RateDecision {
        use governor::clock::Clock;
        match outcome {
            Ok(state) => RateDecision { rate, remaining: state.remaining_burst_capacity(), retry_after: None },
            Err(refused) => {
                let wait = refused.wait_time_from(governor::clock::DefaultClock::default().now());
                RateDecision { rate, remaining: 0, retry_after: Some(wait) }
            }
        }
    }

    fn bucket_of(&self, tenant: Uuid, rate: crate::domain::limits::RequestRate) -> std::sync::Arc<Bucket> {
        let now = std::time::Instant::now();
        let mut by_tenant = self.by_tenant.lock().unwrap_or_else(|p| p.into_inner());
        by_tenant.prune(now);
        match by_tenant.buckets.get_mut(&tenant) {
            Some(current) if current.rate == rate => {
                current.used_at = now;
                current.bucket.clone()
            }
            _ => {
                let bucket = std::sync::Arc::new(Self::bucket(rate));
                by_tenant.buckets.insert(tenant, TenantBucket { rate, bucket: bucket.clone(), used_at: now });
                bucket
            }
        }
    }

    fn bucket(rate: crate::domain::limits::RequestRate) -> Bucket {
        let burst = std::num::NonZeroU32::new(rate.burst.max(1)).expect("at least one");
        // Checked: a rate read from an older database may be below the validated range.
        let day = std::time::Duration::from_secs(86_400);
        let period = std::time::Duration::try_from_secs_f64(1.0 / rate.per_second)
            .unwrap_or(day)
            .clamp(std::time::Duration::from_nanos(1), day);
        let quota = governor::Quota::with_period(period).expect("a period over zero").allow_burst(burst);
        governor::RateLimiter::direct(quota).with_middleware::<governor::middleware::StateInformationMiddleware>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bucket_lets_its_burst_through_then_says_how_long_to_wait() {
        let buckets = RequestBuckets::default();
        let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
        let rate = crate::domain::limits::RequestRate { per_second: 1.0, burst: 3 };
        let remaining: Vec<u32> = (0..3).map(|_| buckets.check(a, rate).remaining).collect();
        assert_eq!(remaining, [2, 1, 0]);
        let refused = buckets.check(a, rate);
        assert!(refused.retry_after.is_some_and(|w| w <= std::time::Duration::from_secs(1)), "{refused:?}");
        assert_eq!(refused.seconds_to_refill(), 3);
        assert_eq!(buckets.check(b, rate).remaining, 2, "another tenant has its own bucket");
        // A new rate is a new bucket.
        let wider = crate::domain::limits::RequestRate { per_second: 1.0, burst: 10 };
        assert_eq!(buckets.check(a, wider).remaining, 9);
    }

    #[test]
    fn idle_buckets_are_dropped_once_full_again_and_tiny_rates_do_not_panic() {
        let buckets = RequestBuckets::default();
        let (idle, busy) = (Uuid::new_v4(), Uuid::new_v4());
        let rate = crate::domain::limits::RequestRate { per_second: 1.0, burst: 10 };
        buckets.check(idle, rate);
        buckets.check(busy, rate);
        let mut inner = buckets.by_tenant.lock().unwrap();
        let now = std::time::Instant::now();
        inner.buckets.get_mut(&idle).unwrap().used_at = now - std::time::Duration::from_secs(71);
        inner.prune(now);
        assert_eq!(inner.buckets.len(), 2, "pruned at most once a minute");
        inner.pruned_at = Some(now - PRUNE_EVERY);
        inner.prune(now);
        assert!(!inner.buckets.contains_key(&idle), "10 s to refill and a minute idle");
        assert!(inner.buckets.contains_key(&busy));
        drop(inner);
        let tiny = crate::domain::limits::RequestRate { per_second: 1e-300, burst: 1 };
        assert_eq!(buckets.check(idle, tiny).remaining, 0);
        assert!(buckets.check(idle, tiny).retry_after.is_some());
    }
}
