//! The types routes answer with and take, each generating the schema the
//! document names after it (types they hold come along).

use schemars::SchemaGenerator;

/// What routes answer with, as serialised.
pub(super) fn answers(generator: &mut SchemaGenerator) {
    use crate::api::{admin, agent_memory, health, history, jobs, keys, limits, listings, memory, sessions, webhooks};
    use crate::store::{BatchAnswer, JobRecord, SegmentReceipt, SessionView};
    generator.subschema_for::<health::Health>();
    generator.subschema_for::<admin::NewTenantAnswer>();
    generator.subschema_for::<keys::IssuedKey>();
    generator.subschema_for::<keys::KeyPage>();
    generator.subschema_for::<limits::UsageReport>();
    generator.subschema_for::<crate::domain::limits::LimitsView>();
    generator.subschema_for::<SegmentReceipt>();
    generator.subschema_for::<BatchAnswer>();
    generator.subschema_for::<SessionView>();
    generator.subschema_for::<sessions::CloseAnswer>();
    generator.subschema_for::<JobRecord>();
    generator.subschema_for::<jobs::JobPage>();
    generator.subschema_for::<listings::SessionPage>();
    generator.subschema_for::<listings::WorkspaceList>();
    generator.subschema_for::<listings::MemoryFileList>();
    generator.subschema_for::<listings::TenantPage>();
    generator.subschema_for::<memory::RunPage>();
    generator.subschema_for::<memory::MemoryInstructions>();
    generator.subschema_for::<history::RunWithChanges>();
    generator.subschema_for::<agent_memory::MemoryListing>();
    generator.subschema_for::<crate::tools::read::FileSlice>();
    generator.subschema_for::<agent_memory::MemorySearchPage>();
    generator.subschema_for::<crate::api::ranked::RankedPage>();
    generator.subschema_for::<agent_memory::PublishedEdit>();
    generator.subschema_for::<webhooks::WebhookView>();
    generator.subschema_for::<webhooks::WebhookList>();
    generator.subschema_for::<webhooks::DeliveryList>();
}

/// What routes take, as deserialised (the rest of the bodies, parsed by
/// hand, are declared in the base).
pub(super) fn bodies(generator: &mut SchemaGenerator) {
    use crate::api::{admin, sessions, webhooks};
    generator.subschema_for::<admin::NewTenant>();
    generator.subschema_for::<sessions::OpenSession>();
    generator.subschema_for::<crate::domain::limits::Limits>();
    generator.subschema_for::<webhooks::WebhookBody>();
    generator.subschema_for::<webhooks::WebhookPatch>();
}
