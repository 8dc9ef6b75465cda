//! A layout's consolidation runs: the list, one run with its diffs, a restore.

use super::*;

pub(super) async fn runs(State(state): State<AppState>, signed: Signed, Query(q): Query<MemoryQuery>) -> Page {
    let tenant = signed.tenant()?;
    signed.require(Permission::Read)?;
    let asked = signed.workspace_asked(&q);
    signed.reach(asked)?;
    let (workspace, layout_name, _) = locate(&state, tenant, asked, q.layout()).await?;
    let page_request =
        PageRequest::parse(Listing::Runs, Some(50), empty_to_none(&q.cursor)).map_err(ApiError::InvalidRequest)?;
    let rows = state.store.phase_two_runs(tenant, &workspace, &layout_name, &page_request).await?;
    let (rows, next) =
        page_request.finish(Listing::Runs, rows, |r| PageCursor { at: r.finished_at, key: r.run_id.to_string() });
    let (ws, ln) = (workspace.as_str(), layout_name.as_str());
    let picker = memory_picker(&state, &signed, tenant, "/console/runs", ws, ln).await?;
    signed.page(
        &format!("Runs · {ws} / {ln}"),
        html! {
            (picker)
            table {
                tr { th { "Run" } th { "Kind" } th { "State" } th { "Selected" } th { "Added" } th { "Retained" } th { "Removed" } th { "Sessions" } th { "Turns" } th { "Finished" } }
                @for r in &rows {
                    tr {
                        td { (run_link(ws, ln, &r.run_id)) }
                        td { (r.kind) }
                        td { (state_badge(r.state.as_str())) } td { (r.selected) } td { (r.added) } td { (r.retained) } td { (r.removed) }
                        td { @for s in &r.sessions { (session_link(s)) " " } }
                        td { (r.turns) } td { (when(&r.finished_at)) }
                    }
                }
            }
            @if let Some(next) = next {
                p { a href={"/console/runs" (query(&[("workspace", Some(ws)), ("layout", Some(ln)), ("cursor", Some(&next))]))} { "Older runs →" } }
            }
        },
    )
}

pub(super) async fn run(
    State(state): State<AppState>,
    signed: Signed,
    Path((raw_workspace, raw_layout, raw_run)): Path<(String, String, String)>,
) -> Page {
    let tenant = signed.tenant()?;
    signed.require(Permission::Read)?;
    signed.reach(&raw_workspace)?;
    let (workspace, layout_name, _) = locate(&state, tenant, &raw_workspace, &raw_layout).await?;
    let id = crate::api::history::run_id(&raw_run)?;
    let not_found = || ConsoleError(ApiError::NotFound(format!("No run {raw_run}.")));
    let r = state.store.phase_two_run(tenant, &workspace, &layout_name, id).await?.ok_or_else(not_found)?;
    let files = state.store.run_files(tenant, id).await?;
    let mut changes = Vec::new();
    for file in files.iter().flatten() {
        changes.push(crate::api::history::change_of(&state, tenant, file).await?);
    }
    let (ws, ln) = (workspace.as_str(), layout_name.as_str());
    // What the run added, retained and removed, as its record keeps it.
    let ids = |key: &str| -> Vec<String> {
        r.ledger
            .as_ref()
            .and_then(|l| l.get(key))
            .and_then(|v| v.as_array())
            .into_iter()
            .flatten()
            .filter_map(|v| v.as_str().map(str::to_owned))
            .collect()
    };
    signed.page(
        &format!("Run {}", r.run_id),
        html! {
            table {
                tr { th { "Memory" } td { (memory_link(ws, ln)) } }
                tr { th { "State" } td { (state_badge(r.state.as_str())) @if let Some(e) = &r.error { " " span class="error" { (e) } } } }
                tr { th { "Kind" } td { (r.kind) } }
                tr { th { "Job" } td { (job_link(&r.job_id)) } }
                @if r.kind == "edit" {
                    tr { th { "Edited by" } td {
                        @if r.session_id.is_empty() { span class="muted" { "no session named" } } @else { "session " code { (r.session_id) } }
                        @if let Some(rollout) = &r.rollout_id { ", in conversation " (rollout_link(ws, ln, rollout)) }
                    } }
                    tr { th { "Reason" } td { @match &r.reason { Some(reason) => { (reason) } None => { span class="muted" { "none given" } } } } }
                }
                @if let Some(from) = &r.restored_from { tr { th { "Restored" } td { "the memory as " (run_link(ws, ln, from)) " left it" } } }
                tr { th { "Sessions served" } td { @for s in &r.sessions { (session_link(s)) " " } } }
                tr { th { "Selected / added / retained / removed" } td { (r.selected) " / " (r.added) " / " (r.retained) " / " (r.removed) } }
                tr { th { "Model turns" } td { (r.turns) } }
                tr { th { "Token usage" } td { (render::usage(&r.usage)) } }
                tr { th { "Redactions" } td { (render::redactions(&r.redactions)) } }
                tr { th { "Started" } td { (when(&r.started_at)) } }
                tr { th { "Finished" } td { (when(&r.finished_at)) " (" (format!("{:.2}", (r.finished_at - r.started_at).num_milliseconds() as f64 / 1000.0)) " s)" } }
            }
            @if r.ledger.is_some() {
                h2 { "Conversations" }
                @for (label, key) in [("Added", "added"), ("Retained", "retained"), ("Removed", "removed")] {
                    p {
                        (label) ": "
                        @let listed = ids(key);
                        @if listed.is_empty() { span class="muted" { "none" } }
                        @for rollout in listed { (rollout_link(ws, ln, &rollout)) " " }
                    }
                }
            }
            h2 { "Changes" }
            @if files.is_none() {
                p class="meta" { "This run's history is no longer kept (only the newest " (state.config.jobs.history_runs) " runs of a layout keep theirs)." }
            } @else {
                p { (post_button(&format!("/console/runs/{ws}/{ln}/{}/restore", r.run_id), &signed.csrf, "Restore this memory", Some("Put the memory back as this run left it?"))) }
                @for change in &changes {
                    @let path = change.path.as_str();
                    h3 {
                        a href={"/console/memory/file" (query(&[("workspace", Some(ws)), ("layout", Some(ln)), ("path", Some(path)), ("run_id", Some(&r.run_id.to_string()))]))} { code { (path) } }
                        " · " (change.change.as_str())
                    }
                    @match &change.diff {
                        Some(diff) => { (render::diff(diff)) }
                        None => { p class="meta" { "No diff (binary or over 1 MiB): " (bytes_or_null(change.before_bytes)) " → " (bytes_or_null(change.after_bytes)) " bytes." } }
                    }
                }
            }
        },
    )
}

pub(super) async fn restore(
    State(state): State<AppState>,
    signed: Signed,
    Path((raw_workspace, raw_layout, raw_run)): Path<(String, String, String)>,
    Form(form): Form<CsrfForm>,
) -> Page {
    let tenant = signed.acting_tenant(&form.csrf, &state.console)?;
    signed.require(Permission::Edit)?;
    signed.reach(&raw_workspace)?;
    let job = crate::api::history::queue_restore(&state, tenant, &raw_workspace, &raw_layout, &raw_run).await?;
    Ok(page::redirect(&format!("/console/jobs/{}", job.job_id)))
}

/// A size as the page has always shown it, `null` where there is none.
fn bytes_or_null(bytes: Option<i64>) -> String {
    bytes.map_or_else(|| "null".to_owned(), |b| b.to_string())
}
