//! What a forget leaves in the rows it keeps: errors that named a forgotten
//! conversation lose those mentions (SPEC §2.7).

pub(super) use crate::domain::memory_status::mentions_any;

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
