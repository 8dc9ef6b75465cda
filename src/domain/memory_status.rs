//! What became of a session's memory once its jobs settled (SPEC §2.3, §2.7):
//! `complete`, `partial` with the failed jobs, or `forgotten`. Stored as JSON
//! in the session's row and answered as is, so the field order is the format.

use super::ids::{LayoutName, RolloutId};
use super::job::{JobKind, SessionState};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[schemars(inline)]
pub struct MemoryStatus {
    pub status: MemoryOutcome,
    pub failures: Vec<MemoryFailure>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[schemars(inline)]
#[serde(rename_all = "snake_case")]
pub enum MemoryOutcome {
    /// Every job succeeded or was skipped.
    Complete,
    /// Some jobs failed: `failures` lists them.
    Partial,
    /// The session's workspace or tenant was forgotten before it settled.
    Forgotten,
}

impl MemoryOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Complete => "complete",
            Self::Partial => "partial",
            Self::Forgotten => "forgotten",
        }
    }
}

/// A job of the session that failed for good.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[schemars(inline)]
pub struct MemoryFailure {
    pub job_id: Uuid,
    pub kind: JobKind,
    pub layout: String,
    pub rollout_id: Option<String>,
    pub error: Option<String>,
}

impl MemoryStatus {
    /// A session's status once none of its jobs is left to run.
    pub fn settled(failures: Vec<MemoryFailure>) -> Self {
        let status = if failures.is_empty() { MemoryOutcome::Complete } else { MemoryOutcome::Partial };
        Self { status, failures }
    }

    /// The status of a session whose workspace or tenant was forgotten.
    pub fn forgotten() -> Self {
        Self { status: MemoryOutcome::Forgotten, failures: Vec::new() }
    }

    /// This status without the failures of the forgotten rollouts `ids` of
    /// `layout`, nor those whose error names one of them; `None` when nothing
    /// in it changes. A `partial` status left with no failure is `complete`.
    pub fn without_rollouts(&self, layout: &LayoutName, ids: &[RolloutId]) -> Option<Self> {
        let forgotten = |f: &MemoryFailure| {
            let own = f.layout == layout.as_str()
                && f.rollout_id.as_deref().is_some_and(|r| ids.iter().any(|id| id.as_str() == r));
            own || f.error.as_deref().is_some_and(|e| mentions_any(e, ids))
        };
        if !self.failures.iter().any(forgotten) {
            return None;
        }
        let failures: Vec<MemoryFailure> = self.failures.iter().filter(|f| !forgotten(f)).cloned().collect();
        let status = match self.status {
            MemoryOutcome::Partial if failures.is_empty() => MemoryOutcome::Complete,
            other => other,
        };
        Some(Self { status, failures })
    }
}

impl std::fmt::Display for MemoryStatus {
    /// The stored and answered JSON text.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&serde_json::to_string(self).map_err(|_| std::fmt::Error)?)
    }
}

/// The text names one of the rollouts.
pub fn mentions_any(text: &str, ids: &[RolloutId]) -> bool {
    ids.iter().any(|id| text.contains(id.as_str()))
}

/// A run's ledger (`{added, retained, removed}` rollout ids) without `ids`,
/// if it named any of them; the run's counts stay what it did.
pub fn ledger_without(ledger: &serde_json::Value, ids: &[RolloutId]) -> Option<serde_json::Value> {
    let mut cleaned = ledger.clone();
    let mut changed = false;
    for list in ["added", "retained", "removed"] {
        if let Some(entries) = cleaned.get_mut(list).and_then(serde_json::Value::as_array_mut) {
            let before = entries.len();
            entries.retain(|entry| !ids.iter().any(|id| entry.as_str() == Some(id.as_str())));
            changed |= entries.len() != before;
        }
    }
    changed.then_some(cleaned)
}

/// Where a close leaves a session: closed at once when it touched nothing,
/// otherwise closing until its jobs finish.
pub struct CloseTransition {
    pub state: SessionState,
    pub memory_status: Option<MemoryStatus>,
    pub closed_at: Option<DateTime<Utc>>,
}

pub fn close_transition(touched_nothing: bool, now: DateTime<Utc>) -> CloseTransition {
    if touched_nothing {
        CloseTransition {
            state: SessionState::Closed,
            memory_status: Some(MemoryStatus::settled(Vec::new())),
            closed_at: Some(now),
        }
    } else {
        CloseTransition { state: SessionState::Closing, memory_status: None, closed_at: None }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_close_that_touched_nothing_is_closed_at_once() {
        let now = Utc::now();
        let settled = close_transition(true, now);
        assert_eq!((settled.state, settled.closed_at), (SessionState::Closed, Some(now)));
        assert_eq!(settled.memory_status, Some(MemoryStatus::settled(Vec::new())));
        let closing = close_transition(false, now);
        assert_eq!((closing.state, closing.closed_at, closing.memory_status), (SessionState::Closing, None, None));
    }

    #[test]
    fn a_ledger_drops_forgotten_ids_only() {
        let ids = [RolloutId::parse("chat-42").unwrap()];
        let ledger = serde_json::json!({"added": ["chat-42", "chat-7"], "retained": ["chat-420"], "removed": []});
        let cleaned = ledger_without(&ledger, &ids).unwrap();
        assert_eq!(cleaned, serde_json::json!({"added": ["chat-7"], "retained": ["chat-420"], "removed": []}));
        assert_eq!(ledger_without(&cleaned, &ids), None, "nothing left to drop");
    }

    fn failure(layout: &str, rollout: Option<&str>, error: &str) -> MemoryFailure {
        MemoryFailure {
            job_id: Uuid::nil(),
            kind: JobKind::PhaseOne,
            layout: layout.into(),
            rollout_id: rollout.map(Into::into),
            error: Some(error.into()),
        }
    }

    #[test]
    fn the_stored_text_keeps_its_field_order() {
        let status = MemoryStatus::settled(vec![MemoryFailure { error: None, ..failure("default", Some("r"), "") }]);
        let text = serde_json::to_string(&status).unwrap();
        assert_eq!(
            text,
            r#"{"status":"partial","failures":[{"job_id":"00000000-0000-0000-0000-000000000000","kind":"phase_one","layout":"default","rollout_id":"r","error":null}]}"#
        );
        assert_eq!(serde_json::from_str::<MemoryStatus>(&text).unwrap(), status);
        assert_eq!(
            serde_json::to_string(&MemoryStatus::settled(vec![])).unwrap(),
            r#"{"status":"complete","failures":[]}"#
        );
        assert_eq!(
            serde_json::to_string(&MemoryStatus::forgotten()).unwrap(),
            r#"{"status":"forgotten","failures":[]}"#
        );
        assert!(serde_json::from_str::<MemoryStatus>(r#"{"status":"lost","failures":[]}"#).is_err());
    }

    #[test]
    fn a_status_loses_the_failures_of_forgotten_rollouts_only() {
        let layout = LayoutName::parse("default").unwrap();
        let ids = [RolloutId::parse("chat-1").unwrap()];
        let both = MemoryStatus::settled(vec![
            failure("default", Some("chat-1"), "x"),
            failure("default", Some("chat-2"), "y"),
        ]);
        let cleaned = both.without_rollouts(&layout, &ids).unwrap();
        assert_eq!(cleaned.status, MemoryOutcome::Partial);
        assert_eq!(cleaned.failures, vec![failure("default", Some("chat-2"), "y")]);
        let only = MemoryStatus::settled(vec![failure("default", Some("chat-1"), "x")]);
        assert_eq!(only.without_rollouts(&layout, &ids), Some(MemoryStatus::settled(vec![])));
        // Another layout's rollout of the same id stays; an error naming it goes.
        let other = MemoryStatus::settled(vec![failure("notes", Some("chat-1"), "x")]);
        assert_eq!(other.without_rollouts(&layout, &ids), None);
        let named = MemoryStatus::settled(vec![failure("notes", None, "reading chat-1 failed")]);
        assert_eq!(named.without_rollouts(&layout, &ids).unwrap().status, MemoryOutcome::Complete);
        assert_eq!(MemoryStatus::settled(vec![]).without_rollouts(&layout, &ids), None);
    }
}
