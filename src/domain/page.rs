//! Keyset pagination (SPEC §2.6): a listing is ordered newest first by
//! `(time, key)`, and a cursor names the last row of the page before, so a
//! row inserted meanwhile never shifts a page (as an offset would).

use super::ids::{hex_decode, hex_encode};
use chrono::{DateTime, SecondsFormat, Utc};

pub const DEFAULT_LIMIT: i64 = 100;
pub const MAX_LIMIT: i64 = 1000;
const VERSION: &str = "v1";

/// Where the next page starts: strictly after `(at, key)` in the listing's order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageCursor {
    pub at: DateTime<Utc>,
    pub key: String,
}

impl PageCursor {
    /// Opaque to clients: hex of `v1|<RFC 3339 with nanoseconds>|<key>`.
    pub fn encode(&self) -> String {
        let plain = format!("{VERSION}|{}|{}", self.at.to_rfc3339_opts(SecondsFormat::Nanos, true), self.key);
        hex_encode(plain.as_bytes())
    }

    pub fn decode(raw: &str) -> Option<Self> {
        if raw.len() > 1024 {
            return None;
        }
        let plain = String::from_utf8(hex_decode(raw)?).ok()?;
        let mut parts = plain.splitn(3, '|');
        if parts.next()? != VERSION {
            return None;
        }
        let at = DateTime::parse_from_rfc3339(parts.next()?).ok()?.with_timezone(&Utc);
        let key = parts.next()?;
        (!key.is_empty()).then(|| Self { at, key: key.to_owned() })
    }
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
    pub fn parse(limit: Option<i64>, cursor: Option<&str>) -> Result<Self, String> {
        let limit = limit.unwrap_or(DEFAULT_LIMIT);
        if !(1..=MAX_LIMIT).contains(&limit) {
            return Err(format!("limit must be from 1 to {MAX_LIMIT}, got: {limit}"));
        }
        let after = cursor
            .map(|raw| PageCursor::decode(raw).ok_or_else(|| "cursor is not one this listing gave out".to_owned()))
            .transpose()?;
        Ok(Self { limit, after })
    }

    /// Rows to fetch: one more than the page, to learn whether another follows.
    pub fn fetch(&self) -> i64 {
        self.limit + 1
    }

    /// Cuts the extra row off and names the cursor of the next page, if any.
    pub fn finish<T>(&self, mut rows: Vec<T>, cursor_of: impl Fn(&T) -> PageCursor) -> (Vec<T>, Option<String>) {
        let more = rows.len() as i64 > self.limit;
        rows.truncate(self.limit as usize);
        let next = if more { rows.last().map(|r| cursor_of(r).encode()) } else { None };
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

    #[test]
    fn a_cursor_reads_back_exactly() {
        for (nanos, key) in [(0, "s1"), (123_456_789, "a|b|c"), (1_000, "0b8f6c1e-0000-4000-8000-000000000000")] {
            let cursor = PageCursor { at: at(nanos), key: key.into() };
            assert_eq!(PageCursor::decode(&cursor.encode()), Some(cursor));
        }
    }

    #[test]
    fn garbage_is_no_cursor() {
        let good = PageCursor { at: at(5), key: "k".into() }.encode();
        for bad in [
            "",
            "zz",
            "abc",
            &good[..good.len() - 1],
            &good.to_uppercase().replace('7', "G"),
            // v2, an empty key, no key, a bad time
            &"v2|2026-12-01T08:00:00Z|k".bytes().map(|b| format!("{b:02x}")).collect::<String>(),
            &"v1|2026-12-01T08:00:00Z|".bytes().map(|b| format!("{b:02x}")).collect::<String>(),
            &"v1|2026-12-01T08:00:00Z".bytes().map(|b| format!("{b:02x}")).collect::<String>(),
            &"v1|yesterday|k".bytes().map(|b| format!("{b:02x}")).collect::<String>(),
            // not UTF-8
            "ff fe",
            "fffe",
        ] {
            assert_eq!(PageCursor::decode(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn limits_and_cursors_are_checked() {
        assert_eq!(PageRequest::parse(None, None).unwrap(), PageRequest::default());
        assert!(PageRequest::parse(Some(0), None).unwrap_err().contains("limit"));
        assert!(PageRequest::parse(Some(1001), None).is_err());
        assert!(PageRequest::parse(Some(1000), None).is_ok());
        assert!(PageRequest::parse(None, Some("nonsense")).unwrap_err().contains("cursor"));
    }

    #[test]
    fn a_page_names_the_next_only_when_there_is_one() {
        let page = PageRequest { limit: 2, after: None };
        let cursor_of = |n: &u32| PageCursor { at: at(*n), key: n.to_string() };
        let (rows, next) = page.finish(vec![3, 2, 1], cursor_of);
        assert_eq!(rows, vec![3, 2]);
        assert_eq!(PageCursor::decode(&next.unwrap()).unwrap().key, "2");
        let (rows, next) = page.finish(vec![3, 2], cursor_of);
        assert_eq!((rows, next), (vec![3, 2], None));
    }
}
