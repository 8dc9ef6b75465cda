//! Timestamps as Python's `datetime.isoformat()` prints them (R-SEG-4).

use chrono::{DateTime, Timelike, Utc};

/// `YYYY-MM-DDTHH:MM:SS[.ffffff]+00:00`; the fraction is left out when the
/// microseconds are zero, as Python does.
pub fn py_isoformat(t: DateTime<Utc>) -> String {
    if t.nanosecond() / 1000 == 0 {
        t.format("%Y-%m-%dT%H:%M:%S+00:00").to_string()
    } else {
        t.format("%Y-%m-%dT%H:%M:%S%.6f+00:00").to_string()
    }
}

/// Parses an RFC 3339 timestamp as sent by clients (`Z` or an offset).
pub fn parse_rfc3339(s: &str) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(s).ok().map(|t| t.with_timezone(&Utc))
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    #[test]
    fn isoformat_matches_python() {
        let t = Utc.with_ymd_and_hms(2026, 4, 15, 12, 34, 56).unwrap();
        assert_eq!(py_isoformat(t), "2026-04-15T12:34:56+00:00");
        let t = t.with_nanosecond(789_012_345).unwrap();
        assert_eq!(py_isoformat(t), "2026-04-15T12:34:56.789012+00:00");
    }

    #[test]
    fn rfc3339_accepts_offsets_and_rejects_junk() {
        assert!(parse_rfc3339("2026-04-15T12:00:00+00:00").is_some());
        assert!(parse_rfc3339("2026-04-15T12:00:00Z").is_some());
        assert!(parse_rfc3339("2026-04-15T14:00:00.5+02:00").is_some());
        assert!(parse_rfc3339("2026-04-15").is_none());
        assert!(parse_rfc3339("yesterday").is_none());
    }
}
