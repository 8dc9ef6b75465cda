//! Segments ingested per tenant per minute, as this replica saw them: the
//! console's overview shows the recent rate without a database write per
//! append.

use std::collections::HashMap;
use std::sync::Mutex;
use uuid::Uuid;

/// Minutes remembered per tenant.
const MINUTES: usize = 16;

#[derive(Default)]
pub struct IngestRate {
    by_tenant: Mutex<HashMap<Uuid, [(u64, u64); MINUTES]>>,
}

impl IngestRate {
    /// One segment appended for `tenant` in `minute` (minutes since the epoch).
    pub fn record(&self, tenant: Uuid, minute: u64, segments: u64) {
        let mut by_tenant = self.by_tenant.lock().unwrap_or_else(|p| p.into_inner());
        let slots = by_tenant.entry(tenant).or_insert([(u64::MAX, 0); MINUTES]);
        let slot = &mut slots[(minute % MINUTES as u64) as usize];
        if slot.0 != minute {
            *slot = (minute, 0);
        }
        slot.1 += segments;
    }

    /// Segments per minute over the last `span` minutes up to `now` (seconds
    /// since the epoch), the minute under way included: the `span - 1` whole
    /// minutes before it and the part of it that has passed.
    pub fn per_minute(&self, tenant: Uuid, now: u64, span: u64) -> f64 {
        let span = span.clamp(1, MINUTES as u64 - 1);
        let minute = now / 60;
        let by_tenant = self.by_tenant.lock().unwrap_or_else(|p| p.into_inner());
        let Some(slots) = by_tenant.get(&tenant) else { return 0.0 };
        let total: u64 = slots.iter().filter(|(m, _)| *m <= minute && minute - *m < span).map(|(_, n)| n).sum();
        // At least a second of the minute under way, so a first segment is not divided by nothing.
        let elapsed = (span - 1) as f64 + (now % 60).max(1) as f64 / 60.0;
        total as f64 / elapsed
    }
}

pub fn now_secs() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

pub fn current_minute() -> u64 {
    now_secs() / 60
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rate_counts_whole_minutes_and_forgets_old_ones() {
        let rate = IngestRate::default();
        let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
        for _ in 0..30 {
            rate.record(a, 100, 1);
        }
        for _ in 0..10 {
            rate.record(a, 104, 1);
        }
        rate.record(a, 110, 1);
        rate.record(b, 104, 1);
        // At 30 s into minute 110: minutes 101 to 109 and half of 110.
        assert_eq!(rate.per_minute(a, 110 * 60 + 30, 10), 11.0 / 9.5);
        // Minutes 100 to 104 whole (at the end of minute 104).
        assert_eq!(rate.per_minute(a, 104 * 60 + 59, 5), 40.0 / (4.0 + 59.0 / 60.0));
        assert_eq!(rate.per_minute(b, 110 * 60, 10), 1.0 / (9.0 + 1.0 / 60.0));
        // Right after the first segments arrived, the rate is not zero.
        let c = Uuid::new_v4();
        for _ in 0..6 {
            rate.record(c, 200, 1);
        }
        assert!(rate.per_minute(c, 200 * 60 + 5, 10) > 0.0);
        // Minute 116 reuses minute 100's slot.
        rate.record(a, 116, 1);
        assert_eq!(rate.per_minute(a, 117 * 60 + 59, 15), (10 + 1 + 1) as f64 / (14.0 + 59.0 / 60.0));
        assert_eq!(rate.per_minute(Uuid::new_v4(), 110 * 60, 10), 0.0);
    }
}
