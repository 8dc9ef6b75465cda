//! Keyset pagination (SPEC §2.6): a listing is ordered by `(time, key)`
//! (newest first; the tenants oldest first), and a cursor names the last row
//! of the page before, so a row inserted meanwhile never shifts a page (as an
//! offset would).

use chrono::{DateTime, SecondsFormat, Utc};

pub const DEFAULT_LIMIT: i64 = 100;
pub const MAX_LIMIT: i64 = 1000;
const VERSION: &str = "v2";

/// A paged listing. A cursor names the listing that gave it out, and its key
/// must be one of that listing's: one listing's cursor is refused by another.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listing {
    Sessions,
    Jobs,
    Runs,
    Tenants,
    Keys,
}

impl Listing {
    fn as_str(self) -> &'static str {
        match self {
            Self::Sessions => "sessions",
            Self::Jobs => "jobs",
            Self::Runs => "runs",
            Self::Tenants => "tenants",
            Self::Keys => "keys",
        }
    }

    fn key_is_valid(self, key: &str) -> bool {
        match self {
            Self::Sessions => super::ids::SessionId::parse(key).is_some_and(|id| id.as_str() == key),
            Self::Jobs | Self::Runs | Self::Tenants | Self::Keys => {
                uuid::Uuid::parse_str(key).is_ok_and(|id| id.to_string() == key)
            }
        }
    }
}

/// Where the next page starts: strictly after `(at, key)` in the listing's order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageCursor {
    pub at: DateTime<Utc>,
    pub key: String,
}

impl PageCursor {
    /// Opaque to clients: hex of `v2|<listing>|<RFC 3339 with nanoseconds>|<key>`.
    pub fn encode(&self, listing: Listing) -> String {
        let at = self.at.to_rfc3339_opts(SecondsFormat::Nanos, true);
        let plain = format!("{VERSION}|{}|{at}|{}", listing.as_str(), self.key);
        hex::encode(plain.as_bytes())
    }

    /// `None` unless `listing` gave it out (or could have: its key is one of the listing's).
    pub fn decode(raw: &str, listing: Listing) -> Option<Self> {
        if raw.len() > 1024 {
            return None;
        }
        let plain = String::from_utf8(hex::decode(raw).ok()?).ok()?;
        let mut parts = plain.splitn(4, '|');
        if parts.next()? != VERSION || parts.next()? != listing.as_str() {
            return None;
        }
        let at = DateTime::parse_from_rfc3339(parts.next()?).ok()?.with_timezone(&Utc);
        let key = parts.next()?;
        listing.key_is_valid(key).then(|| Self { at, key: key.to_owned() })
    }
}

/// A `limit` query parameter: 1 to 1,000, default 100.
pub fn page_limit(limit: Option<i64>) -> Result<i64, String> {
    let limit = limit.unwrap_or(DEFAULT_LIMIT);
    if !(1..=MAX_LIMIT).contains(&limit) {
        return Err(format!("limit must be from 1 to {MAX_LIMIT}, got: {limit}"));
    }
    Ok(limit)
}

/// One page's request: how many rows, and after which.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageRequest {
    pub limit: i64,
    pub after: Option<PageCursor>,
}

impl Default for PageRequest {
    fn default() -> Self {
        Self { limit: DEFAULT_LIMIT, after: None }
    }
}

impl PageRequest {
    /// From the `limit` and `cursor` query parameters; the error is the 400's detail.
    pub fn parse(listing: Listing, limit: Option<i64>, cursor: Option<&str>) -> Result<Self, String> {
        let limit = page_limit(limit)?;
        let after = cursor
            .map(|raw| {
                PageCursor::decode(raw, listing).ok_or_else(|| "cursor is not one this listing gave out".to_owned())
            })
            .transpose()?;
        Ok(Self { limit, after })
    }

    /// Rows to fetch: one more than the page, to learn whether another follows.
    pub fn fetch(&self) -> i64 {
        self.limit + 1
    }

    /// Cuts the extra row off and names the cursor of the next page, if any.
    pub fn finish<T>(
        &self,
        listing: Listing,
        mut rows: Vec<T>,
        cursor_of: impl Fn(&T) -> PageCursor,
    ) -> (Vec<T>, Option<String>) {
        let more = rows.len() as i64 > self.limit;
        rows.truncate(self.limit as usize);
        let next = if more { rows.last().map(|r| cursor_of(r).encode(listing)) } else { None };
        (rows, next)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn at(nanos: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 12, 1, 8, 0, 0).unwrap() + chrono::Duration::nanoseconds(nanos as i64)
    }

    const JOB: &str = "0b8f6c1e-0000-4000-8000-000000000000";

    fn hex(plain: &str) -> String {
        plain.bytes().map(|b| format!("{b:02x}")).collect()
    }

    #[test]
    fn a_cursor_reads_back_exactly() {
        for (nanos, key, listing) in
            [(0, "s1", Listing::Sessions), (123_456_789, "s.a-b", Listing::Sessions), (1_000, JOB, Listing::Jobs)]
        {
            let cursor = PageCursor { at: at(nanos), key: key.into() };
            assert_eq!(PageCursor::decode(&cursor.encode(listing), listing), Some(cursor));
        }
    }

    #[test]
    fn garbage_is_no_cursor() {
        let good = PageCursor { at: at(5), key: "k".into() }.encode(Listing::Sessions);
        for bad in [
            "",
            "zz",
            "abc",
            &good[..good.len() - 1],
            &good.to_uppercase().replace('7', "G"),
            // v1, another listing, an empty key, no key, a bad time, a key no session has
            &hex("v1|2026-12-01T08:00:00Z|k"),
            &hex("v2|jobs|2026-12-01T08:00:00Z|k"),
            &hex("v2|sessions|2026-12-01T08:00:00Z|"),
            &hex("v2|sessions|2026-12-01T08:00:00Z"),
            &hex("v2|sessions|yesterday|k"),
            &hex("v2|sessions|2026-12-01T08:00:00Z|a|b"),
            &hex("v2|sessions|2026-12-01T08:00:00Z|../x"),
            // not UTF-8
            "ff fe",
            "fffe",
        ] {
            assert_eq!(PageCursor::decode(bad, Listing::Sessions), None, "{bad:?}");
        }
        // One listing's cursor is not another's, even with a key both could hold.
        let job = PageCursor { at: at(5), key: JOB.into() };
        assert_eq!(PageCursor::decode(&job.encode(Listing::Jobs), Listing::Sessions), None);
        assert_eq!(PageCursor::decode(&job.encode(Listing::Runs), Listing::Jobs), None);
        assert_eq!(PageCursor::decode(&hex("v2|jobs|2026-12-01T08:00:00Z|s1"), Listing::Jobs), None);
    }

    #[test]
    fn limits_and_cursors_are_checked() {
        assert_eq!(PageRequest::parse(Listing::Jobs, None, None).unwrap(), PageRequest::default());
        assert!(PageRequest::parse(Listing::Jobs, Some(0), None).unwrap_err().contains("limit"));
        assert!(PageRequest::parse(Listing::Jobs, Some(1001), None).is_err());
        assert!(PageRequest::parse(Listing::Jobs, Some(1000), None).is_ok());
        assert!(PageRequest::parse(Listing::Jobs, None, Some("nonsense")).unwrap_err().contains("cursor"));
    }

    #[test]
    fn a_page_names_the_next_only_when_there_is_one() {
        let page = PageRequest { limit: 2, after: None };
        let cursor_of = |n: &u32| PageCursor { at: at(*n), key: format!("s{n}") };
        let (rows, next) = page.finish(Listing::Sessions, vec![3, 2, 1], cursor_of);
        assert_eq!(rows, vec![3, 2]);
        assert_eq!(PageCursor::decode(&next.unwrap(), Listing::Sessions).unwrap().key, "s2");
        let (rows, next) = page.finish(Listing::Sessions, vec![3, 2], cursor_of);
        assert_eq!((rows, next), (vec![3, 2], None));
    }
}
