//! A tenant's overview page.

use super::*;

pub(super) async fn overview(State(state): State<AppState>, signed: Signed) -> Page {
    let Some(tenant) = signed.session.principal.tenant() else {
        return Ok(page::redirect("/console/tenants"));
    };
    if !signed.scope.permissions.has(Permission::Read) {
        let holds = signed.scope.permissions.names().join(", ");
        return signed.page(
            "Overview",
            html! { p class="meta" { "This key holds " (holds) "; the console's pages need read." } },
        );
    }
    // Counts over every workspace are shown only to a key for every one.
    let everywhere = signed.scope.workspaces.is_all();
    let day_ago = chrono::Utc::now() - chrono::Duration::hours(24);
    let jobs = state.store.tenant_job_counts(tenant, day_ago).await?;
    let in_state = |wanted: JobState| -> i64 {
        jobs.by_kind_and_state.iter().filter(|(_, s, _)| *s == wanted).map(|(_, _, n)| n).sum()
    };
    let filter = SessionFilter { within: signed.within(), ..SessionFilter::default() };
    let sessions = state.store.list_sessions(tenant, &filter, &PageRequest { limit: 10, after: None }).await?;
    let activity = state.store.workspace_activity(tenant).await?;
    let ingest_rate = state.caches.ingest.per_minute(tenant, crate::api::ingest_rate::now_secs(), 10);
    let mut runs = Vec::new();
    for (workspace, layout, _) in &activity.layouts {
        let (Some(ws), Some(l)) = (WorkspaceName::parse(workspace), LayoutName::parse(layout)) else { continue };
        if !signed.scope.workspaces.sees(workspace) {
            continue;
        }
        for run in state.store.phase_two_runs(tenant, &ws, &l, &PageRequest { limit: 5, after: None }).await? {
            runs.push((workspace.clone(), layout.clone(), run));
        }
    }
    runs.sort_by_key(|r| std::cmp::Reverse(r.2.finished_at));
    runs.truncate(10);
    signed.page(
        "Overview",
        html! {
            @if everywhere {
            div class="cards" {
                div class="card" { div class="n" { (in_state(JobState::Queued)) } "jobs queued" }
                div class="card" { div class="n" { (in_state(JobState::Running)) } "jobs running" }
                div class="card" { div class="n" { (jobs.failed_recently) } a href="/console/jobs?state=failed" { "jobs failed in 24 h" } }
                div class="card" { div class="n" { (format!("{ingest_rate:.1}")) } "segments per minute (last 10 min, this replica)" }
            }
            h2 { "Queue by kind and state" }
            table {
                tr { th { "Kind" } th { "State" } th { "Jobs" } }
                @for (kind, job_state, n) in &jobs.by_kind_and_state {
                    tr { td { (kind.as_str()) } td { (state_badge(job_state.as_str())) } td { a href={"/console/jobs" (query(&[("kind", Some(kind.as_str())), ("state", Some(job_state.as_str()))]))} { (n) } } }
                }
            }
            }
            h2 { "Recent sessions" }
            (session_table(&sessions))
            h2 { "Recent runs" }
            table {
                tr { th { "Run" } th { "Memory" } th { "State" } th { "Sessions" } th { "Finished" } }
                @for (workspace, layout, run) in &runs {
                    tr {
                        td { (run_link(workspace, layout, &run.run_id)) }
                        td { (memory_link(workspace, layout)) }
                        td { (state_badge(run.state.as_str())) }
                        td { @for s in &run.sessions { (session_link(s)) " " } }
                        td { (when(&run.finished_at)) }
                    }
                }
            }
        },
    )
}
