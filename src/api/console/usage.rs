//! A tenant's layouts and usage.

use super::*;

pub(super) async fn layouts(State(state): State<AppState>, signed: Signed) -> Page {
    let tenant = signed.tenant()?;
    signed.require(Permission::Read)?;
    let layouts = with_implicit_default(state.store.stored_layouts(tenant).await?);
    let default_name = LayoutName::default_layout();
    let (_, default_layout) = find_layout(&state, tenant, default_name.as_str()).await?;
    signed.page(
        "Layouts",
        html! {
            table {
                tr { th { "Layout" } th { "Etag" } th { "Config" } th { "Updated" } }
                @for l in &layouts {
                    tr {
                        td { strong { (l.name.as_str()) } @if l.name == default_name && l.updated_at.is_none() { " (implicit)" } }
                        td { code { (l.layout.etag()) } }
                        td { pre { (serde_json::to_string_pretty(&l.layout.config).unwrap_or_default()) } }
                        td { (maybe_when(l.updated_at.as_ref())) }
                    }
                }
            }
            p class="meta" { "The default layout writes to " code { (default_layout.config.memories_dir) } "." }
        },
    )
}

// -- usage -----------------------------------------------------------------

/// What the tenant used over the last 30 days (SPEC §2.9), charted.
pub(super) async fn usage(State(state): State<AppState>, signed: Signed) -> Page {
    let tenant = signed.tenant()?;
    signed.require_everywhere(Permission::Manage)?;
    let now = chrono::Utc::now();
    let (from, to) = crate::domain::usage::report_range(None, None, now.date_naive()).map_err(ApiError::internal)?;
    let history = state
        .store
        .usage_history(tenant, &from.format("%Y-%m-%d").to_string(), &to.format("%Y-%m-%d").to_string())
        .await?;
    let days = crate::domain::usage::fill_days(from, to, &history.days, history.storage_before);
    let storage = state.store.storage_bytes(tenant).await?;
    let limits = crate::api::limits::effective_limits(&state, tenant).await?;
    let held = state.store.model_budget_hold(tenant, now).await?;
    let today = days.last().map(|d| d.model_use()).unwrap_or_default();
    let series = |figure: &dyn Fn(&crate::domain::usage::UsageDay) -> Option<i64>| -> Vec<(String, Option<i64>)> {
        days.iter().map(|d| (d.date.clone(), figure(d))).collect()
    };
    let of_limit = |limit: Option<u64>| match limit.filter(|l| *l > 0) {
        Some(limit) => format!(" of {limit}"),
        None => " (no limit)".to_owned(),
    };
    signed.page(
        "Usage",
        html! {
            div class="cards" {
                div class="card" { div class="n" { (storage) } "bytes kept" (of_limit(limits.storage_bytes)) }
                div class="card" {
                    div class="n" { (today.input_tokens + today.output_tokens) }
                    "model tokens today (UTC)" (of_limit(limits.model_tokens_per_day))
                }
                @if let Some(until) = held {
                    div class="card" { div class="n" { "held" } "model jobs wait until " (when(&until)) }
                }
            }
            (render::day_chart("Segments per day", "segments", &series(&|d| Some(d.segments))))
            (render::day_chart("Model tokens per day", "tokens", &series(&|d| {
                let used = d.model_use();
                Some(used.input_tokens + used.output_tokens)
            })))
            (render::day_chart("Storage at the end of each day", "bytes", &series(&|d| d.storage_bytes)))
            h2 { "By day" }
            table {
                tr {
                    th { "Day (UTC)" } th { "Segments" } th { "Bytes ingested" } th { "Closes" }
                    th { "Model calls" } th { "Input tokens" } th { "Output tokens" } th { "Runs" } th { "Storage" }
                }
                @for day in days.iter().rev() {
                    @let used = day.model_use();
                    tr {
                        td { (day.date) } td { (day.segments) } td { (day.bytes_ingested) } td { (day.closes) }
                        td { (used.model_calls) } td { (used.input_tokens) } td { (used.output_tokens) } td { (day.runs) }
                        td { @match day.storage_bytes { Some(b) => (b), None => "–" } }
                    }
                }
            }
        },
    )
}
