//! The console's webhooks page (SPEC §2.8): the tenant's endpoints, each
//! with its recent deliveries, and a button that sends it a test event.

use super::page::{self, maybe_when, post_button, state as state_badge, when};
use super::{CsrfForm, Page, Signed};
use crate::api::AppState;
use crate::domain::key_scope::Permission;
use axum::extract::{Form, Path, State};
use maud::html;

/// Deliveries shown per endpoint.
const RECENT: i64 = 20;

pub(super) async fn webhooks(State(state): State<AppState>, signed: Signed) -> Page {
    let tenant = signed.tenant()?;
    signed.require_everywhere(Permission::Manage)?;
    let endpoints = state.store.list_webhooks(tenant).await?;
    let mut sections = Vec::with_capacity(endpoints.len());
    for endpoint in endpoints {
        let deliveries = state.store.webhook_deliveries(tenant, endpoint.webhook_id, RECENT).await?;
        sections.push((endpoint, deliveries));
    }
    let csrf = signed.csrf.clone();
    signed.page(
        "Webhooks",
        html! {
            @if sections.is_empty() {
                p class="muted" { "No webhook endpoints. Create one with " code { "POST /v1/webhooks" } "." }
            }
            @for (endpoint, deliveries) in &sections {
                h2 { code { (endpoint.url) } " " (state_badge(&endpoint.state)) }
                table {
                    tr { th { "Id" } td { code { (endpoint.webhook_id) } } }
                    tr { th { "Events" } td { (endpoint.events.join(", ")) } }
                    @if let Some(description) = &endpoint.description { tr { th { "Description" } td { (description) } } }
                    @if let Some(reason) = &endpoint.disabled_reason { tr { th { "Disabled" } td { (reason) } } }
                    tr { th { "Created" } td { (when(&endpoint.created_at)) } }
                    @if let Some(until) = &endpoint.previous_secret_until {
                        tr { th { "Previous secret signs until" } td { (when(until)) } }
                    }
                }
                @if endpoint.state == "enabled" {
                    p { (post_button(&format!("/console/webhooks/{}/test", endpoint.webhook_id), &csrf, "Send test event", None)) }
                }
                @if deliveries.is_empty() {
                    p class="muted" { "No deliveries yet." }
                } @else {
                    table class="deliveries" {
                        tr {
                            th { "Event" } th { "Type" } th { "State" } th { "Attempts" } th { "Last status" }
                            th { "Last attempt" } th { "Next attempt" } th { "Last error" }
                        }
                        @for d in deliveries {
                            tr {
                                td { code { (d.event_id) } } td { (d.event_type) } td { (state_badge(&d.state)) }
                                td { (d.attempts) }
                                td { @match d.last_status { Some(s) => (s), None => span class="muted" { "—" } } }
                                td { (maybe_when(d.last_attempt_at.as_ref())) }
                                td { (maybe_when(d.next_attempt_at.as_ref())) }
                                td { @if let Some(e) = &d.last_error { (e) } }
                            }
                        }
                    }
                }
            }
        },
    )
}

pub(super) async fn send_test(
    State(state): State<AppState>,
    signed: Signed,
    Path(raw_id): Path<String>,
    Form(form): Form<CsrfForm>,
) -> Page {
    let tenant = signed.acting_tenant(&form.csrf, &state.console)?;
    signed.require_everywhere(Permission::Manage)?;
    crate::api::webhooks::send_test_event(&state, tenant, &raw_id).await?;
    Ok(page::redirect("/console/webhooks"))
}
