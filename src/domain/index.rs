//! The raw-memory index (R-P1-12, R-P2-2): one row per raw memory, from
//! which phase two selects.

use super::ids::RolloutId;

/// The index row of one raw memory (the header of its file, and the
/// rollout file length it was extracted from).
#[derive(Debug, Clone, PartialEq)]
pub struct RawMemoryRecord {
    pub rollout_id: RolloutId,
    pub updated_at: String,
    pub rollout_path: String,
    pub rollout_summary_file: String,
    pub terminal_state: String,
    pub extracted_len: u64,
}

/// How often running agents used one raw memory (SPEC §2.10): reads that
/// named a session and citations, one per (session, rollout).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryUsage {
    pub rollout_id: String,
    pub usage_count: i64,
    pub last_usage: chrono::DateTime<chrono::Utc>,
}
