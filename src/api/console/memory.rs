//! A layout's memory: its files, one file, the export.

use super::*;

#[derive(Deserialize)]
pub struct MemoryQuery {
    pub(super) workspace: Option<String>,
    pub(super) layout: Option<String>,
    pub(super) path: Option<String>,
    pub(super) run_id: Option<String>,
    pub(super) cursor: Option<String>,
}

impl MemoryQuery {
    pub(super) fn workspace(&self) -> &str {
        empty_to_none(&self.workspace).unwrap_or("default")
    }

    pub(super) fn layout(&self) -> &str {
        empty_to_none(&self.layout).unwrap_or("default")
    }
}

pub(super) async fn read_memory_file(root: &std::path::Path, memories_dir: &str, path: &str) -> Option<String> {
    let file = crate::api::memory::memory_file(root, memories_dir, path)?;
    tokio::fs::read(file).await.ok().map(|b| String::from_utf8_lossy(&b).into_owned())
}

/// Which workspaces and layouts hold memory: the picker atop the memory pages.
pub(super) async fn memory_picker(
    state: &AppState,
    signed: &Signed,
    tenant: Uuid,
    action: &str,
    workspace: &str,
    layout: &str,
) -> Result<Markup, ConsoleError> {
    let mut workspaces = state.store.workspace_activity(tenant).await?.summaries();
    workspaces.retain(|w| signed.scope.workspaces.sees(&w.name));
    Ok(html! {
        p class="meta" {
            "Memory of: "
            @for w in &workspaces {
                @for l in &w.layouts {
                    @let current = w.name == workspace && l == layout;
                    a href={(action) (query(&[("workspace", Some(&w.name)), ("layout", Some(l))]))} {
                        @if current { strong { (w.name) " / " (l) } } @else { (w.name) " / " (l) }
                    }
                    " · "
                }
            }
        }
    })
}

/// The workspace's archive, as `GET /v1/workspaces/{workspace}/export` streams it.
pub(super) async fn export(State(state): State<AppState>, signed: Signed, Query(q): Query<MemoryQuery>) -> Page {
    let tenant = signed.tenant()?;
    signed.require(Permission::Manage)?;
    let asked = signed.workspace_asked(&q);
    signed.reach(asked)?;
    Ok(crate::api::export::workspace_archive(&state, tenant, asked).await?)
}

pub(super) async fn memory(State(state): State<AppState>, signed: Signed, Query(q): Query<MemoryQuery>) -> Page {
    let tenant = signed.tenant()?;
    signed.require(Permission::Read)?;
    let asked = signed.workspace_asked(&q);
    signed.reach(asked)?;
    let (workspace, layout_name, layout) = locate(&state, tenant, asked, q.layout()).await?;
    let readable = crate::api::memory::readable_layout(&state, tenant, &workspace, &layout_name).await?;
    let root = readable.root();
    let memories = &layout.memories_dir.normalized;
    let memory_md = read_memory_file(root, memories, "MEMORY.md").await;
    let summary_md = read_memory_file(root, memories, "memory_summary.md").await;
    let files = crate::api::listings::memory_files_of(root, memories).await?;
    drop(readable);
    let selection = state.store.phase_two_selection(tenant, &workspace, &layout_name).await?;
    let (ws, ln) = (workspace.as_str(), layout_name.as_str());
    let picker = memory_picker(&state, &signed, tenant, "/console/memory", ws, ln).await?;
    let manages = signed.scope.permissions.has(Permission::Manage);
    signed.page(
        &format!("Memory · {ws} / {ln}"),
        html! {
            (picker)
            p {
                a href={"/console/runs" (query(&[("workspace", Some(ws)), ("layout", Some(ln))]))} { "Consolidation runs of this memory →" }
                @if manages {
                    " · "
                    a href={"/console/export" (query(&[("workspace", Some(ws))]))} download { "Export workspace " (ws) " (.tar.gz)" }
                }
            }
            @if manages {
                form class="inline" method="post" action="/console/forget/workspace" data-confirm={"Forget the workspace " (ws) "? Its sessions end, and every conversation, memory file and record of it is removed."} {
                    input type="hidden" name="csrf" value=(signed.csrf);
                    input type="hidden" name="workspace" value=(ws);
                    button type="submit" { "Forget workspace " (ws) }
                }
            }
            h2 { "memory_summary.md" }
            div class="markdown" { (render::markdown(summary_md.as_deref().unwrap_or(""))) }
            h2 { "MEMORY.md" }
            div class="markdown" { (render::markdown(memory_md.as_deref().unwrap_or(""))) }
            h2 { "Files" }
            table {
                tr { th { "Path" } th { "Bytes" } th { "Modified" } }
                @for f in &files {
                    tr {
                        td { a href={"/console/memory/file" (query(&[("workspace", Some(ws)), ("layout", Some(ln)), ("path", Some(&f.path))]))} { code { (f.path) } } }
                        td { (f.bytes) } td { (when(&f.modified_at)) }
                    }
                }
            }
            h2 { "Current selection" }
            @match &selection {
                Some(doc) => {
                    table {
                        tr { th { "Rollout" } th { "Updated" } th { "Used" } th { "Last used" } th { "Terminal state" } th { "Summary file" } }
                        @for item in doc.get("selected").and_then(|v| v.as_array()).into_iter().flatten() {
                            tr {
                                td { code { (item.get("rollout_id").and_then(|v| v.as_str()).unwrap_or("")) } }
                                td { (item.get("updated_at").and_then(|v| v.as_str()).unwrap_or("")) }
                                td { (item.get("usage_count").and_then(|v| v.as_i64()).unwrap_or(0)) }
                                td { (item.get("last_usage").and_then(|v| v.as_str()).unwrap_or("never")) }
                                td { (item.get("terminal_state").and_then(|v| v.as_str()).unwrap_or("")) }
                                td { code { (item.get("rollout_summary_file").and_then(|v| v.as_str()).unwrap_or("")) } }
                            }
                        }
                    }
                }
                None => { p class="meta" { "No consolidation has succeeded here yet." } }
            }
        },
    )
}

pub(super) async fn memory_file(State(state): State<AppState>, signed: Signed, Query(q): Query<MemoryQuery>) -> Page {
    let tenant = signed.tenant()?;
    signed.require(Permission::Read)?;
    let asked = signed.workspace_asked(&q);
    signed.reach(asked)?;
    let (workspace, layout_name, layout) = locate(&state, tenant, asked, q.layout()).await?;
    let raw_path = empty_to_none(&q.path).unwrap_or("MEMORY.md");
    let not_found = || ConsoleError(ApiError::NotFound(format!("No file {raw_path} in the memory folder.")));
    let path = crate::api::memory::history_path(raw_path).ok_or_else(not_found)?;
    let text = match empty_to_none(&q.run_id) {
        Some(raw_run) => {
            let run = crate::api::history::run_id(raw_run)?;
            match state.store.file_after_run(tenant, &workspace, &layout_name, run, &path).await? {
                FileAtRun::Content(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
                _ => return Err(not_found()),
            }
        }
        None => {
            let readable = crate::api::memory::readable_layout(&state, tenant, &workspace, &layout_name).await?;
            read_memory_file(readable.root(), &layout.memories_dir.normalized, &path).await.ok_or_else(not_found)?
        }
    };
    signed.page(
        &path,
        html! {
            p class="meta" { (memory_link(workspace.as_str(), layout_name.as_str())) @if let Some(run) = empty_to_none(&q.run_id) { " · as run " code { (run) } " left it" } }
            @if path.starts_with("raw_memories/") || path.starts_with("rollout_summaries/") {
                (render::headed_markdown(&text))
            } @else if path.ends_with(".md") {
                div class="markdown" { (render::markdown(&text)) }
            } @else { pre { (text) } }
        },
    )
}
