//! What a forget leaves in the rows it keeps: errors and statuses that named
//! a forgotten conversation lose those mentions (SPEC §2.7).

use crate::domain::ids::{LayoutName, RolloutId};
use serde_json::Value;

/// What an error text becomes when it named a forgotten conversation.
pub(super) const SCRUBBED_ERROR: &str = "(this error named a forgotten conversation and was removed)";

/// What a forget freed of its tenant's storage.
pub(super) enum Freed {
    /// The committed bytes of the rollout files it removed.
    RolloutBytes(i64),
    /// A whole workspace.
    Workspace,
    /// The tenant, with every counter it had.
    Tenant,
}

pub(super) fn mentions_any(text: &str, ids: &[RolloutId]) -> bool {
    ids.iter().any(|id| text.contains(id.as_str()))
}

/// A session's `memory_status` without the failures of forgotten rollouts;
/// `None` when nothing in it changes.
pub(super) fn status_without(status: &Value, layout: &LayoutName, ids: &[RolloutId]) -> Option<Value> {
    let failures = status.get("failures")?.as_array()?;
    let kept: Vec<Value> = failures
        .iter()
        .filter(|f| {
            let forgotten = f["layout"] == layout.as_str() && ids.iter().any(|id| f["rollout_id"] == id.as_str());
            !forgotten && !f["error"].as_str().is_some_and(|e| mentions_any(e, ids))
        })
        .cloned()
        .collect();
    if kept.len() == failures.len() {
        return None;
    }
    let mut status = status.clone();
    if kept.is_empty() && status["status"] == "partial" {
        status["status"] = "complete".into();
    }
    status["failures"] = Value::Array(kept);
    Some(status)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_status_loses_the_failures_of_forgotten_rollouts_only() {
        let layout = LayoutName::parse("default").unwrap();
        let ids = [RolloutId::parse("chat-1").unwrap()];
        let status = json!({"status": "partial", "failures": [
            {"kind": "phase_one", "layout": "default", "rollout_id": "chat-1", "error": "x"},
            {"kind": "phase_one", "layout": "default", "rollout_id": "chat-2", "error": "y"},
        ]});
        let cleaned = status_without(&status, &layout, &ids).unwrap();
        assert_eq!(cleaned["status"], "partial");
        assert_eq!(cleaned["failures"].as_array().unwrap().len(), 1);
        assert_eq!(cleaned["failures"][0]["rollout_id"], "chat-2");
        let only = json!({"status": "partial", "failures": [{"layout": "default", "rollout_id": "chat-1"}]});
        assert_eq!(status_without(&only, &layout, &ids).unwrap(), json!({"status": "complete", "failures": []}));
        // Another layout's rollout of the same id stays; an error naming it goes.
        let other = json!({"status": "partial", "failures": [{"layout": "notes", "rollout_id": "chat-1"}]});
        assert_eq!(status_without(&other, &layout, &ids), None);
        let named = json!({"status": "partial", "failures": [{"layout": "notes", "error": "reading chat-1 failed"}]});
        assert_eq!(status_without(&named, &layout, &ids).unwrap()["status"], "complete");
        assert_eq!(status_without(&json!({"status": "complete", "failures": []}), &layout, &ids), None);
    }
}
