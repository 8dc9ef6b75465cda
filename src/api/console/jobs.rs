//! The jobs pages: the list, one job, its retry.

use super::*;

pub(super) fn job_table(jobs: &[crate::store::JobRecord]) -> Markup {
    html! {
        table {
            tr { th { "Job" } th { "Kind" } th { "State" } th { "Attempts" } th { "Memory" } th { "Rollout" } th { "Last error" } th { "Created" } }
            @for j in jobs {
                tr {
                    td { (job_link(&j.job_id)) } td { (j.kind.as_str()) } td { (state_badge(j.state.as_str())) }
                    td { (j.attempts) } td { (memory_link(j.workspace.as_str(), j.layout.as_str())) }
                    td { @if let Some(r) = &j.rollout_id { (rollout_link(j.workspace.as_str(), j.layout.as_str(), r.as_str())) } }
                    td class="error" { (j.last_error.as_deref().unwrap_or("")) }
                    td { (when(&j.created_at)) }
                }
            }
        }
    }
}

#[derive(Deserialize)]
pub struct JobsQuery {
    state: Option<String>,
    kind: Option<String>,
    cursor: Option<String>,
}

pub(super) async fn jobs(State(state): State<AppState>, signed: Signed, Query(q): Query<JobsQuery>) -> Page {
    let tenant = signed.tenant()?;
    signed.require(Permission::Read)?;
    let (state_filter, kind) = (empty_to_none(&q.state), empty_to_none(&q.kind));
    let filter = JobFilter {
        state: state_filter.and_then(JobState::parse),
        kind: kind.and_then(JobKind::parse),
        session_id: None,
        within: signed.within(),
    };
    let page_request =
        PageRequest::parse(Listing::Jobs, Some(50), empty_to_none(&q.cursor)).map_err(ApiError::InvalidRequest)?;
    // Failed jobs first: they are what an operator comes for.
    let failed = if filter.state.is_none() && page_request.after.is_none() {
        let only_failed = JobFilter { state: Some(JobState::Failed), ..filter.clone() };
        state.store.list_jobs(tenant, &only_failed, &PageRequest { limit: 20, after: None }).await?
    } else {
        Vec::new()
    };
    let rows = state.store.list_jobs(tenant, &filter, &page_request).await?;
    let (rows, next) =
        page_request.finish(Listing::Jobs, rows, |j| PageCursor { at: j.created_at, key: j.job_id.to_string() });
    signed.page(
        "Jobs",
        html! {
            form class="filters" method="get" action="/console/jobs" {
                label { "State " select name="state" {
                    option value="" { "any" }
                    @for s in JobState::ALL.map(JobState::as_str) { option value=(s) selected[state_filter == Some(s)] { (s) } }
                } }
                label { "Kind " select name="kind" {
                    option value="" { "any" }
                    @for k in JobKind::ALL.map(JobKind::as_str) { option value=(k) selected[kind == Some(k)] { (k) } }
                } }
                button type="submit" class="secondary" { "Filter" }
            }
            @if !failed.is_empty() {
                h2 { "Failed" }
                table {
                    tr { th { "Job" } th { "Kind" } th { "Attempts" } th { "Error" } th { "Finished" } th {} }
                    @for j in &failed {
                        tr {
                            td { (job_link(&j.job_id)) } td { (j.kind.as_str()) } td { (j.attempts) }
                            td class="error" { (j.last_error.as_deref().unwrap_or("")) }
                            td { (maybe_when(j.finished_at.as_ref())) }
                            td { (post_button(&format!("/console/jobs/{}/retry", j.job_id), &signed.csrf, "Retry", None)) }
                        }
                    }
                }
                h2 { "All jobs" }
            }
            (job_table(&rows))
            @if let Some(next) = next {
                p { a href={"/console/jobs" (query(&[("state", state_filter), ("kind", kind), ("cursor", Some(&next))]))} { "Older jobs →" } }
            }
        },
    )
}

pub(super) async fn job(State(state): State<AppState>, signed: Signed, Path(raw_id): Path<String>) -> Page {
    let tenant = signed.tenant()?;
    signed.require(Permission::Read)?;
    let j = job_in_reach(&state, &signed, tenant, &raw_id).await?;
    signed.page(
        &format!("Job {}", j.job_id),
        html! {
            table {
                tr { th { "Kind" } td { (j.kind.as_str()) } }
                tr { th { "State" } td { (state_badge(j.state.as_str())) } }
                @if let Some(session) = &j.session_id { tr { th { "Session" } td { (session_link(session.as_str())) } } }
                @if let Some(forget) = &j.forget {
                    tr { th { "Forgets" } td {
                        (forget.scope.as_str()) " (" (forget.mode.as_str()) ")"
                        @for r in &forget.rollout_ids { " " code { (r.as_str()) } }
                    } }
                }
                tr { th { "Memory" } td { (memory_link(j.workspace.as_str(), j.layout.as_str())) } }
                @if let Some(r) = &j.rollout_id { tr { th { "Rollout" } td { (rollout_link(j.workspace.as_str(), j.layout.as_str(), r.as_str())) } } }
                @if !j.sessions.is_empty() { tr { th { "Serves" } td { @for s in &j.sessions { (session_link(s)) " " } } } }
                @if let Some(run) = &j.restore_run_id { tr { th { "Restores" } td { (run_link(j.workspace.as_str(), j.layout.as_str(), run)) } } }
                tr { th { "Attempts" } td { (j.attempts) } }
                tr { th { "Last error" } td class="error" { (j.last_error.as_deref().unwrap_or("")) } }
                tr { th { "Usage" } td { @if let Some(u) = &j.usage { (render::usage(u)) } } }
                tr { th { "Redactions" } td { (render::redactions(&j.redactions)) } }
                tr { th { "Created" } td { (when(&j.created_at)) } }
                tr { th { "Started" } td { (maybe_when(j.started_at.as_ref())) } }
                tr { th { "Finished" } td { (maybe_when(j.finished_at.as_ref())) } }
            }
            @if j.state == JobState::Failed && signed.scope.permissions.has(Permission::Manage) {
                p { (post_button(&format!("/console/jobs/{}/retry", j.job_id), &signed.csrf, "Retry", None)) }
            }
        },
    )
}

pub(super) async fn retry(
    State(state): State<AppState>,
    signed: Signed,
    Path(raw_id): Path<String>,
    Form(form): Form<CsrfForm>,
) -> Page {
    let tenant = signed.acting_tenant(&form.csrf, &state.console)?;
    signed.require(Permission::Manage)?;
    job_in_reach(&state, &signed, tenant, &raw_id).await?;
    let job = crate::api::jobs::retry(&state, tenant, &raw_id).await?;
    Ok(page::redirect(&format!("/console/jobs/{}", job.job_id)))
}

/// The job, when it exists in a workspace the key reaches.
async fn job_in_reach(
    state: &AppState,
    signed: &Signed,
    tenant: Uuid,
    raw_id: &str,
) -> Result<crate::store::JobRecord, ConsoleError> {
    let not_found = || ConsoleError(ApiError::NotFound(format!("No job {raw_id}.")));
    let id = Uuid::parse_str(raw_id).map_err(|_| not_found())?;
    let job = state.store.get_job(tenant, id).await?.ok_or_else(not_found)?;
    signed.reach(job.workspace.as_str()).map_err(|_| not_found())?;
    Ok(job)
}
