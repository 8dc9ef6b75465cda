//! The sessions pages: the list, one session with its conversations, its close.

use super::*;
use crate::store::journal_records::RolloutAt;

pub(super) fn session_table(sessions: &[crate::store::SessionSummary]) -> Markup {
    html! {
        table {
            tr { th { "Session" } th { "Workspace" } th { "State" } th { "Rollouts" } th { "Segments" } th { "Memory" } th { "Created" } th { "Closed" } }
            @for s in sessions {
                tr {
                    td { (session_link(s.session_id.as_str())) }
                    td { (s.workspace.as_str()) }
                    td { (state_badge(s.state.as_str())) }
                    td { (s.rollouts) } td { (s.segments) }
                    td { @if let Some(status) = &s.memory_status { (status.status.as_str()) } }
                    td { (when(&s.created_at)) } td { (maybe_when(s.closed_at.as_ref())) }
                }
            }
        }
    }
}

#[derive(Deserialize)]
pub struct SessionsQuery {
    state: Option<String>,
    workspace: Option<String>,
    q: Option<String>,
    cursor: Option<String>,
}

pub(super) fn empty_to_none(value: &Option<String>) -> Option<&str> {
    value.as_deref().map(str::trim).filter(|v| !v.is_empty())
}

pub(super) async fn sessions(State(state): State<AppState>, signed: Signed, Query(q): Query<SessionsQuery>) -> Page {
    let tenant = signed.tenant()?;
    signed.require(Permission::Read)?;
    if let Some(id) = empty_to_none(&q.q) {
        return Ok(page::redirect(&format!("/console/sessions/{}", page::percent_encode(id))));
    }
    let (state_filter, workspace) = (empty_to_none(&q.state), empty_to_none(&q.workspace));
    let filter = SessionFilter {
        state: state_filter.and_then(SessionState::parse),
        workspace: workspace.and_then(WorkspaceName::parse),
        within: signed.within(),
    };
    let page_request =
        PageRequest::parse(Listing::Sessions, Some(50), empty_to_none(&q.cursor)).map_err(ApiError::InvalidRequest)?;
    let rows = state.store.list_sessions(tenant, &filter, &page_request).await?;
    let (rows, next) = page_request
        .finish(Listing::Sessions, rows, |s| PageCursor { at: s.created_at, key: s.session_id.as_str().to_owned() });
    signed.page(
        "Sessions",
        html! {
            form class="filters" method="get" action="/console/sessions" {
                label { "State " select name="state" {
                    option value="" { "any" }
                    @for s in SessionState::ALL.map(SessionState::as_str) { option value=(s) selected[state_filter == Some(s)] { (s) } }
                } }
                label { "Workspace " input name="workspace" value=[workspace]; }
                button type="submit" class="secondary" { "Filter" }
                label { "Session id " input name="q"; }
                button type="submit" { "Open" }
            }
            (session_table(&rows))
            @if let Some(next) = next {
                p { a href={"/console/sessions" (query(&[("state", state_filter), ("workspace", workspace), ("cursor", Some(&next))]))} { "Older sessions →" } }
            }
        },
    )
}

pub(super) async fn session(State(state): State<AppState>, signed: Signed, Path(raw_id): Path<String>) -> Page {
    let tenant = signed.tenant()?;
    signed.require(Permission::Read)?;
    let not_found = || ConsoleError(ApiError::NotFound(format!("No session {raw_id}.")));
    let id = SessionId::parse(&raw_id).ok_or_else(not_found)?;
    let view = state.store.session_view(tenant, &id).await?.ok_or_else(not_found)?;
    signed.reach(view.session.workspace.as_str()).map_err(|_| not_found())?;
    let mut conversations = Vec::new();
    for touched in &view.rollouts {
        let workspace = &view.session.workspace;
        let committed = state.store.committed_rollout(tenant, workspace, &touched.layout, &touched.rollout_id).await?;
        let text = match committed {
            Some(c) => {
                let at = RolloutAt { tenant, workspace, layout: &touched.layout, rollout: &touched.rollout_id };
                let cap = c.committed_len.min(MAX_CONVERSATION_BYTES);
                let read = state.volumes.committed_prefix(state.store.as_ref(), at, &c.rollout_path, cap, cap).await;
                let bytes = read.map_err(ApiError::from)?.unwrap_or_default();
                Some((String::from_utf8_lossy(&bytes).into_owned(), c.committed_len > cap))
            }
            None => None,
        };
        conversations.push((touched, text));
    }
    let session = &view.session;
    signed.page(
        &format!("Session {}", session.session_id.as_str()),
        html! {
            p {
                (state_badge(session.state.as_str())) " in workspace " strong { (session.workspace.as_str()) }
                " · created " (when(&session.created_at)) " · closed " (maybe_when(session.closed_at.as_ref()))
            }
            @if let Some(status) = &session.memory_status { (render::memory_status(status)) }
            @if view.waiting.is_some() {
                p class="notice" {
                    "Waiting: this tenant's model tokens of the day are spent; its jobs run after the next UTC midnight "
                    "or once its budget is raised (" a href="/console/usage" { "usage" } ")."
                }
            }
            @if session.state == SessionState::Open && signed.scope.permissions.has(Permission::Close) {
                (post_button(&format!("/console/sessions/{}/close", page::percent_encode(session.session_id.as_str())), &signed.csrf, "Close session", Some("Close this session and make its memory?")))
            }
            h2 { "Jobs" }
            (job_table(&view.jobs))
            h2 { "Rollouts" }
            @for (touched, text) in &conversations {
                h3 { (rollout_link(session.workspace.as_str(), touched.layout.as_str(), touched.rollout_id.as_str())) " in layout " (memory_link(session.workspace.as_str(), touched.layout.as_str())) " · " (touched.segment_count) " segments from this session" }
                @if session.state == SessionState::Closed && signed.scope.permissions.has(Permission::Manage) {
                    (forget_rollout_form(&signed.csrf, session.workspace.as_str(), touched.layout.as_str(), touched.rollout_id.as_str()))
                }
                @match text {
                    Some((jsonl, cut)) => {
                        (render::conversation(jsonl))
                        @if *cut { p class="meta" { "(cut at " (MAX_CONVERSATION_BYTES) " bytes)" } }
                    }
                    None => { p class="meta" { "No committed lines." } }
                }
            }
        },
    )
}

pub(super) async fn close(
    State(state): State<AppState>,
    signed: Signed,
    Path(raw_id): Path<String>,
    Form(form): Form<CsrfForm>,
) -> Page {
    let tenant = signed.acting_tenant(&form.csrf, &state.console)?;
    signed.require(Permission::Close)?;
    let not_found = || ConsoleError(ApiError::NotFound(format!("No session {raw_id}.")));
    let id = SessionId::parse(&raw_id).ok_or_else(not_found)?;
    let workspace = state.store.session_workspace(tenant, &id).await?.ok_or_else(not_found)?;
    signed.reach(workspace.as_str()).map_err(|_| not_found())?;
    crate::api::sessions::close_and_wait(&state, tenant, &raw_id, Some(CLOSE_WAIT)).await?;
    Ok(page::redirect(&format!("/console/sessions/{}", page::percent_encode(&raw_id))))
}
