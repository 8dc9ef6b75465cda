//! Usage (SPEC §2.9): what a tenant used per UTC day, the range a report
//! covers, and the day a spent token budget ends.

use chrono::{DateTime, Days, NaiveDate, Utc};
use serde::Serialize;

/// The days a report covers when `from` is not given: the last 30, today included.
pub const DEFAULT_DAYS: u64 = 30;
/// The longest report one request may ask for.
pub const MAX_DAYS: u64 = 366;

/// A UTC day as the counters key it: `YYYY-MM-DD`.
pub fn day_of(at: DateTime<Utc>) -> String {
    at.date_naive().format("%Y-%m-%d").to_string()
}

/// The first instant of the UTC day after `at`'s: when a spent token budget
/// is whole again.
pub fn next_utc_midnight(at: DateTime<Utc>) -> DateTime<Utc> {
    let tomorrow = at.date_naive().checked_add_days(Days::new(1)).unwrap_or(NaiveDate::MAX);
    tomorrow.and_hms_opt(0, 0, 0).expect("midnight exists").and_utc()
}

/// The inclusive range of days a report covers, from `?from=` and `?to=`
/// (UTC dates) with `today` filling in what is absent; the 400's detail when
/// a date is malformed or the range is backwards or too long.
pub fn report_range(from: Option<&str>, to: Option<&str>, today: NaiveDate) -> Result<(NaiveDate, NaiveDate), String> {
    let parse = |name: &str, raw: &str| {
        NaiveDate::parse_from_str(raw, "%Y-%m-%d")
            .ok()
            .filter(|_| raw.len() == 10)
            .ok_or_else(|| format!("{name} must be a date as YYYY-MM-DD, got: {raw:?}"))
    };
    let to = to.map(|raw| parse("to", raw)).transpose()?.unwrap_or(today);
    let from = match from {
        Some(raw) => parse("from", raw)?,
        None => to.checked_sub_days(Days::new(DEFAULT_DAYS - 1)).unwrap_or(NaiveDate::MIN),
    };
    if from > to {
        return Err(format!("from ({from}) is after to ({to})"));
    }
    if (to - from).num_days() as u64 >= MAX_DAYS {
        return Err(format!("a report covers at most {MAX_DAYS} days; {from} to {to} is longer"));
    }
    Ok((from, to))
}

/// One job kind's model use.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct ModelUse {
    pub model_calls: i64,
    pub input_tokens: i64,
    pub output_tokens: i64,
}

/// A tenant's counters of one day, as stored.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UsageDay {
    pub date: String,
    pub segments: i64,
    pub bytes_ingested: i64,
    pub closes: i64,
    pub runs: i64,
    /// Tokens embedded for search by meaning.
    pub embedding_tokens: i64,
    /// The tenant's storage as the day's last change left it; `None`: unchanged that day.
    pub storage_bytes: Option<i64>,
    /// By job kind, in the kinds' order.
    pub by_kind: Vec<(String, ModelUse)>,
}

impl UsageDay {
    pub fn model_use(&self) -> ModelUse {
        self.by_kind.iter().fold(ModelUse::default(), |sum, (_, u)| ModelUse {
            model_calls: sum.model_calls + u.model_calls,
            input_tokens: sum.input_tokens + u.input_tokens,
            output_tokens: sum.output_tokens + u.output_tokens,
        })
    }
}

/// Every day from `from` to `to`, oldest first: a stored day as it is, a day
/// with nothing stored as zeros. A day's storage is the last known one up to
/// it (`storage_before`: the last known before `from`).
pub fn fill_days(from: NaiveDate, to: NaiveDate, stored: &[UsageDay], storage_before: Option<i64>) -> Vec<UsageDay> {
    let mut storage = storage_before;
    from.iter_days()
        .take_while(|d| *d <= to)
        .map(|date| {
            let date = date.format("%Y-%m-%d").to_string();
            let mut day =
                stored.iter().find(|d| d.date == date).cloned().unwrap_or(UsageDay { date, ..UsageDay::default() });
            storage = day.storage_bytes.or(storage);
            day.storage_bytes = storage;
            day
        })
        .collect()
}

/// A day as `GET /v1/usage` shows it (SPEC §2.9).
#[derive(Debug, Serialize, schemars::JsonSchema)]
#[schemars(rename = "UsageDay")]
pub struct DayView<'a> {
    pub date: &'a str,
    pub segments: i64,
    pub bytes_ingested: i64,
    pub closes: i64,
    pub model_calls: i64,
    pub input_tokens: i64,
    pub output_tokens: i64,
    /// Runs recorded in the memory history (phase two, restore, forget).
    pub runs: i64,
    /// Tokens embedded for search by meaning; they count against `model_tokens_per_day` too.
    pub embedding_tokens: i64,
    /// By job kind, in the kinds' order.
    #[serde(serialize_with = "kinds_in_order")]
    #[schemars(with = "std::collections::BTreeMap<String, ModelUse>")]
    pub by_kind: &'a [(String, ModelUse)],
}

fn kinds_in_order<S: serde::Serializer>(kinds: &&[(String, ModelUse)], serializer: S) -> Result<S::Ok, S::Error> {
    serializer.collect_map(kinds.iter().map(|(kind, counts)| (kind, counts)))
}

pub fn day_view(day: &UsageDay) -> DayView<'_> {
    let total = day.model_use();
    DayView {
        date: &day.date,
        segments: day.segments,
        bytes_ingested: day.bytes_ingested,
        closes: day.closes,
        model_calls: total.model_calls,
        input_tokens: total.input_tokens,
        output_tokens: total.output_tokens,
        runs: day.runs,
        embedding_tokens: day.embedding_tokens,
        by_kind: &day.by_kind,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;
    use serde_json::json;

    fn date(s: &str) -> NaiveDate {
        NaiveDate::parse_from_str(s, "%Y-%m-%d").unwrap()
    }

    #[test]
    fn the_budget_ends_at_the_next_utc_midnight() {
        let late = Utc.with_ymd_and_hms(2026, 12, 31, 23, 59, 59).unwrap();
        assert_eq!(next_utc_midnight(late), Utc.with_ymd_and_hms(2027, 1, 1, 0, 0, 0).unwrap());
        let midnight = Utc.with_ymd_and_hms(2026, 12, 1, 0, 0, 0).unwrap();
        assert_eq!(next_utc_midnight(midnight), Utc.with_ymd_and_hms(2026, 12, 2, 0, 0, 0).unwrap());
        assert_eq!(day_of(late), "2026-12-31");
    }

    #[test]
    fn a_report_covers_the_last_30_days_unless_told() {
        let today = date("2026-12-01");
        assert_eq!(report_range(None, None, today), Ok((date("2026-11-02"), today)));
        assert_eq!(report_range(Some("2026-11-30"), None, today), Ok((date("2026-11-30"), today)));
        assert_eq!(report_range(None, Some("2026-01-30"), today), Ok((date("2026-01-01"), date("2026-01-30"))));
        assert_eq!(report_range(Some("2026-12-01"), Some("2026-12-01"), today), Ok((today, today)));
        for bad in ["2026-13-01", "2026-1-01", "yesterday", "2026-12-01T00:00:00Z", ""] {
            let err = report_range(Some(bad), None, today).unwrap_err();
            assert!(err.starts_with("from must be a date"), "{bad}: {err}");
        }
        assert!(report_range(Some("2026-12-02"), Some("2026-12-01"), today).unwrap_err().contains("after"));
        assert!(report_range(Some("2025-01-01"), Some("2026-12-01"), today).unwrap_err().contains("at most"));
        assert!(report_range(Some("2025-12-01"), Some("2026-11-30"), today).is_ok(), "365 days is allowed");
    }

    #[test]
    fn missing_days_are_zeros_and_storage_carries_forward() {
        let stored = vec![
            UsageDay { date: "2026-11-29".into(), segments: 3, storage_bytes: Some(900), ..Default::default() },
            UsageDay {
                date: "2026-12-01".into(),
                closes: 1,
                by_kind: vec![
                    ("phase_one".into(), ModelUse { model_calls: 2, input_tokens: 100, output_tokens: 20 }),
                    ("phase_two".into(), ModelUse { model_calls: 1, input_tokens: 50, output_tokens: 5 }),
                ],
                ..Default::default()
            },
        ];
        let days = fill_days(date("2026-11-28"), date("2026-12-01"), &stored, Some(400));
        let dates: Vec<&str> = days.iter().map(|d| d.date.as_str()).collect();
        assert_eq!(dates, ["2026-11-28", "2026-11-29", "2026-11-30", "2026-12-01"]);
        let storage: Vec<Option<i64>> = days.iter().map(|d| d.storage_bytes).collect();
        assert_eq!(storage, [Some(400), Some(900), Some(900), Some(900)]);
        assert_eq!(days[2].segments, 0);
        let view = serde_json::to_value(day_view(&days[3])).unwrap();
        assert_eq!(view["model_calls"], 3);
        assert_eq!(view["input_tokens"], 150);
        assert_eq!(view["output_tokens"], 25);
        assert_eq!(view["by_kind"]["phase_two"], json!({"model_calls": 1, "input_tokens": 50, "output_tokens": 5}));
        let keys: Vec<&String> = view.as_object().unwrap().keys().collect();
        assert_eq!(
            keys,
            [
                "date",
                "segments",
                "bytes_ingested",
                "closes",
                "model_calls",
                "input_tokens",
                "output_tokens",
                "runs",
                "embedding_tokens",
                "by_kind"
            ]
        );
        assert_eq!(fill_days(date("2026-11-28"), date("2026-11-28"), &[], None)[0].storage_bytes, None);
    }
}
