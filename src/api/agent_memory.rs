//! The running agent's memory over HTTP (SPEC §2.10): list, read and search
//! a layout's memory folder, and edit it through a job in the layout's lane.
//! Reads that name a session count as usage of the raw memory they open.

use super::AppState;
use super::error::ApiError;
use super::extract::{EditBody, QueryParams, TenantAuth};
use super::memory::locate;
use crate::domain::diff::Change;
use crate::domain::ids::{LayoutName, RolloutId, SessionId, WorkspaceName};
use crate::domain::key_scope::{KeyScope, Permission};
use crate::domain::layout::ValidLayout;
use crate::domain::memory_edit::{EditRefusal, MemoryEdit, memory_relative, normalize};
use crate::store::{AuthenticatedKey, JobRecord, JobState};
use crate::tools::read::{self, Budget, ReadError, SliceRequest};
use crate::tools::read::{FileSlice, MemoryEntry};
use crate::tools::search::SearchMatch;
use crate::tools::search::{self, SearchQuery, SearchStop};
use crate::workspace::confine;
use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// The longest `?wait=` of an edit.
const MAX_EDIT_WAIT_SECS: u64 = 60;
const DEFAULT_EDIT_WAIT_SECS: u64 = 10;

/// A layout's memory folder in a workspace, located for one request.
struct MemoryFolder {
    workspace: WorkspaceName,
    layout_name: LayoutName,
    layout: ValidLayout,
    root: std::path::PathBuf,
    memory_root: std::path::PathBuf,
    /// The files stay one generation while the folder is read.
    readable: crate::bucket::cache::ReadableWorkspace,
}

impl MemoryFolder {
    /// Locates the folder and completes a publish under way in it, so that
    /// no read sees half a run.
    async fn open(state: &AppState, tenant: uuid::Uuid, workspace: &str, layout: &str) -> Result<Self, ApiError> {
        let (workspace, layout_name, layout) = locate(state, tenant, workspace, layout).await?;
        let readable = super::memory::readable_layout(state, tenant, &workspace, &layout_name).await?;
        let root = readable.root().to_owned();
        let memory_root = confine(&root, &layout.memories_dir.normalized).map_err(ApiError::internal)?;
        Ok(Self { workspace, layout_name, layout, root, memory_root, readable })
    }

    /// A `path` parameter as a path inside the folder (`""`: the folder
    /// itself), given relative to it or as the instructions spell it.
    fn path(&self, raw: Option<&str>) -> Result<String, ApiError> {
        let raw = raw.unwrap_or("");
        let memories = &self.layout.memories_dir.normalized;
        let refused = || {
            ApiError::InvalidRequest(format!(
                "path must be relative to the memory folder and stay inside it, got: {raw:?}"
            ))
        };
        if raw.chars().any(char::is_control) {
            return Err(refused());
        }
        let whole = matches!(raw, "" | "." | "./") || normalize(raw).as_deref() == Some(memories.as_str());
        let relative = if whole { String::new() } else { memory_relative(memories, raw).ok_or_else(refused)? };
        if !relative.is_empty() {
            confine(&self.memory_root, &relative).map_err(|_| refused())?;
        }
        Ok(relative)
    }
}

fn read_problem(e: ReadError) -> ApiError {
    match e {
        ReadError::NotFound(m) => ApiError::NotFound(m),
        ReadError::Invalid(m) => ApiError::InvalidRequest(m),
        ReadError::Io(e) => ApiError::internal(e),
    }
}

/// Runs blocking disk work off the runtime's threads.
pub(crate) async fn on_disk<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, ReadError> + Send + 'static,
) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(work).await.map_err(ApiError::internal)?.map_err(read_problem)
}

/// Which listing a cursor continues: one route's cursor is refused by another.
#[derive(Clone, Copy)]
pub(crate) enum CursorOf {
    List,
    Search,
    /// MCP's `resources/list`, over every workspace the key reaches.
    Resources,
    /// `memory/search?mode=ranked`.
    Ranked,
}

/// What a cursor is bound to: the route, and the tenant's layout it pages.
pub(crate) fn cursor_context(of: CursorOf, tenant: uuid::Uuid, workspace: &str, layout: &str) -> Vec<u8> {
    let route = match of {
        CursorOf::List => "memory/list",
        CursorOf::Search => "memory/search",
        CursorOf::Resources => "resources/list",
        CursorOf::Ranked => "memory/search?mode=ranked",
    };
    format!("{route}|{tenant}|{workspace}|{layout}").into_bytes()
}

/// An opaque cursor: a position sealed under the deployment's secrets key,
/// so that the only cursors a route takes are those it gave (SPEC §2.10).
pub(crate) fn encode_cursor<T: Serialize>(state: &AppState, context: &[u8], position: &T) -> String {
    let bytes = serde_json::to_vec(position).expect("a cursor's position is a path and a line");
    URL_SAFE_NO_PAD.encode(state.events.key.seal_bytes(context, &bytes))
}

pub(crate) fn decode_cursor<T: serde::de::DeserializeOwned>(
    state: &AppState,
    context: &[u8],
    raw: &str,
) -> Result<T, ApiError> {
    Some(raw)
        .filter(|raw| raw.len() <= MAX_CURSOR_CHARS)
        .and_then(|raw| URL_SAFE_NO_PAD.decode(raw).ok())
        .and_then(|sealed| state.events.key.open_bytes(context, &sealed))
        .and_then(|bytes| serde_json::from_slice(&bytes).ok())
        .ok_or_else(|| ApiError::InvalidRequest("cursor is not one this route gave for this layout.".into()))
}

/// A cursor is at most this long (a path of the memory folder and a line, sealed).
const MAX_CURSOR_CHARS: usize = 8192;

/// Tells a blocking search that its request is gone (or answered): set
/// when the handler's future is dropped, as it is when the client leaves.
struct CancelOnDrop(Arc<AtomicBool>);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// What `memory/list` and MCP's `memory_list` answer.
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct MemoryListing {
    pub entries: Vec<MemoryEntry>,
    /// The next page's cursor; null on the last page.
    pub next_cursor: Option<String>,
}

/// What `memory/search` and MCP's `memory_search` answer.
#[derive(Debug, Serialize, schemars::JsonSchema)]
#[schemars(rename = "MemorySearch")]
pub struct MemorySearchPage {
    pub matches: Vec<SearchMatch>,
    /// The next page's cursor; null on the last page.
    pub next_cursor: Option<String>,
}

/// One file a published edit touched.
#[derive(Debug, Serialize, schemars::JsonSchema)]
#[schemars(inline)]
pub struct EditedFile {
    pub path: String,
    pub change: Change,
}

/// What a published edit changed (`memory/edits` 200, MCP's `memory_edit`).
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct PublishedEdit {
    pub job_id: uuid::Uuid,
    pub run_id: uuid::Uuid,
    pub changes: Vec<EditedFile>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    pub(crate) path: Option<String>,
    pub(crate) cursor: Option<String>,
}

/// `GET …/memory/list`.
pub async fn list(
    TenantAuth(tenant): TenantAuth,
    State(state): State<AppState>,
    Path((workspace, layout)): Path<(String, String)>,
    QueryParams(query): QueryParams<ListQuery>,
) -> Result<Json<MemoryListing>, ApiError> {
    list_memory(&state, tenant, &workspace, &layout, query, read::HTTP_LIST).await.map(Json)
}

/// What `memory/list` answers (the route's and MCP's `memory_list`).
pub(crate) async fn list_memory(
    state: &AppState,
    tenant: uuid::Uuid,
    workspace: &str,
    layout: &str,
    query: ListQuery,
    budget: Budget,
) -> Result<MemoryListing, ApiError> {
    let context = cursor_context(CursorOf::List, tenant, workspace, layout);
    let after: Option<String> = query.cursor.as_deref().map(|c| decode_cursor(state, &context, c)).transpose()?;
    let folder = MemoryFolder::open(state, tenant, workspace, layout).await?;
    let dir = folder.path(query.path.as_deref())?;
    let memory_root = folder.memory_root.clone();
    let page = on_disk(move || read::list(&memory_root, &dir, after.as_deref(), budget)).await?;
    let next_cursor = page.next_after.map(|p| encode_cursor(state, &context, &p));
    Ok(MemoryListing { entries: page.entries, next_cursor })
}

/// The memory folder of a layout for a search that walks it: the folder,
/// readable as one generation while the last part is held, `path` inside
/// it (checked as every route checks it), and the layout.
pub(crate) async fn folder_at(
    state: &AppState,
    tenant: uuid::Uuid,
    workspace: &str,
    layout: &str,
    path: Option<&str>,
) -> Result<(std::path::PathBuf, String, crate::store::IndexedLayout, crate::bucket::cache::ReadableWorkspace), ApiError>
{
    let folder = MemoryFolder::open(state, tenant, workspace, layout).await?;
    let dir = folder.path(path)?;
    let at = crate::store::IndexedLayout { tenant, workspace: folder.workspace, layout: folder.layout_name };
    Ok((folder.memory_root, dir, at, folder.readable))
}

/// Every file of a layout's memory folder, sorted by path (MCP's resources).
pub(crate) async fn memory_files(
    state: &AppState,
    tenant: uuid::Uuid,
    workspace: &str,
    layout: &str,
) -> Result<Vec<MemoryEntry>, ApiError> {
    let folder = MemoryFolder::open(state, tenant, workspace, layout).await?;
    on_disk(move || read::files(&folder.memory_root)).await
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReadQuery {
    pub(crate) path: Option<String>,
    pub(crate) offset: Option<u64>,
    pub(crate) limit: Option<u64>,
    pub(crate) byte_offset: Option<u64>,
    pub(crate) session_id: Option<String>,
}

/// `GET …/memory/read`.
pub async fn read_file(
    key: AuthenticatedKey,
    State(state): State<AppState>,
    Path((workspace, layout)): Path<(String, String)>,
    QueryParams(query): QueryParams<ReadQuery>,
) -> Result<Json<FileSlice>, ApiError> {
    let usage = counts_usage(&key.scope, &workspace);
    read_memory(&state, key.tenant_id, &workspace, &layout, query, usage, read::HTTP_READ).await.map(Json)
}

/// A read counts as usage only for a key that may also ingest in the
/// workspace (a runtime's): a dashboard's read-only key never moves what the
/// selection ranks (SPEC §2.10).
pub(crate) fn counts_usage(scope: &KeyScope, workspace: &str) -> bool {
    scope.permissions.has(Permission::Ingest) && scope.workspaces.sees(workspace)
}

/// What `memory/read` answers (the route's and MCP's `memory_read`); the
/// session it names counts a use when `usage` (see [`counts_usage`]).
pub(crate) async fn read_memory(
    state: &AppState,
    tenant: uuid::Uuid,
    workspace: &str,
    layout: &str,
    query: ReadQuery,
    usage: bool,
    budget: Budget,
) -> Result<FileSlice, ApiError> {
    if query.offset == Some(0) || query.limit == Some(0) {
        return Err(ApiError::InvalidRequest("offset and limit count from 1.".into()));
    }
    let session = query.session_id.as_deref().map(session_of).transpose()?;
    let folder = MemoryFolder::open(state, tenant, workspace, layout).await?;
    let path = folder.path(query.path.as_deref())?;
    if path.is_empty() {
        return Err(ApiError::InvalidRequest(
            "path names a file of the memory folder (list the folder with memory/list).".into(),
        ));
    }
    let (memory_root, at) = (folder.memory_root.clone(), path.clone());
    let asked = SliceRequest {
        offset: query.offset.unwrap_or(1),
        limit: query.limit,
        byte_offset: query.byte_offset.unwrap_or(0),
    };
    let slice = on_disk(move || read::read(&memory_root, &at, asked, budget)).await?;
    if let Some(session) = session.filter(|_| usage) {
        count_read(state, tenant, &folder, &session, &path).await;
    }
    Ok(slice)
}

fn session_of(raw: &str) -> Result<SessionId, ApiError> {
    SessionId::parse(raw)
        .ok_or_else(|| ApiError::InvalidRequest(format!("session_id is not a valid session id: {raw:?}")))
}

/// A read of a raw memory or rollout summary by a session counts as a use
/// of that rollout (SPEC §2.10). Counting is best effort: a failure to
/// count never fails the read.
async fn count_read(state: &AppState, tenant: uuid::Uuid, folder: &MemoryFolder, session: &SessionId, path: &str) {
    let Some(rollout) = read::rollout_of_memory_file(path).and_then(RolloutId::parse) else { return };
    let counted = state
        .store
        .record_memory_uses(tenant, &folder.workspace, &folder.layout_name, session, &[rollout], chrono::Utc::now())
        .await;
    if let Err(e) = counted {
        tracing::warn!(error = %crate::error_chain(&e), "counting a memory read failed");
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SearchParams {
    pub(crate) query: Option<String>,
    pub(crate) path: Option<String>,
    pub(crate) regex: Option<bool>,
    /// `substring` (default), `regex`, `ranked`, `semantic` or `hybrid`.
    pub(crate) mode: Option<String>,
    pub(crate) case_sensitive: Option<bool>,
    pub(crate) context: Option<usize>,
    pub(crate) limit: Option<usize>,
    pub(crate) cursor: Option<String>,
}

/// A search's query: required, and not empty (either mode).
pub(crate) fn required_query(query: Option<String>) -> Result<String, ApiError> {
    query.filter(|q| !q.is_empty()).ok_or_else(|| ApiError::InvalidRequest("query is required.".into()))
}

/// What `memory/search` answers (the route's and MCP's `memory_search`).
pub(crate) async fn search_memory(
    state: &AppState,
    tenant: uuid::Uuid,
    workspace: &str,
    layout: &str,
    params: SearchParams,
    budget: Budget,
) -> Result<MemorySearchPage, ApiError> {
    let text = required_query(params.query)?;
    let lines_around = params.context.unwrap_or(0);
    let limit = params.limit.unwrap_or(50);
    if lines_around > search::MAX_CONTEXT || !(1..=search::MAX_MATCHES).contains(&limit) {
        return Err(ApiError::InvalidRequest(format!(
            "context must be 0 to {} and limit 1 to {}.",
            search::MAX_CONTEXT,
            search::MAX_MATCHES
        )));
    }
    let context = cursor_context(CursorOf::Search, tenant, workspace, layout);
    let after: Option<(String, u64)> =
        params.cursor.as_deref().map(|c| decode_cursor(state, &context, c)).transpose()?;
    let regex = params.regex.unwrap_or(false) || params.mode.as_deref() == Some("regex");
    let case_sensitive = params.case_sensitive.unwrap_or(false);
    // Checked before any file is opened: a bad pattern is the caller's, not the folder's.
    search::matcher(&SearchQuery {
        query: &text,
        regex,
        case_sensitive,
        context: lines_around,
        limit,
        after: None,
        budget,
    })
    .map_err(read_problem)?;
    let folder = MemoryFolder::open(state, tenant, workspace, layout).await?;
    let dir = folder.path(params.path.as_deref())?;
    let memory_root = folder.memory_root.clone();
    let cancelled = Arc::new(AtomicBool::new(false));
    let _cancel_when_gone = CancelOnDrop(cancelled.clone());
    let stop = SearchStop::new(Instant::now() + search::SEARCH_DEADLINE, cancelled);
    let asked = (text, regex, case_sensitive, lines_around, limit, after);
    let page = on_disk(move || {
        let (query, regex, case_sensitive, context, limit, after) = asked;
        let query = SearchQuery { query: &query, regex, case_sensitive, context, limit, after, budget };
        search::search(&memory_root, &dir, &query, &stop)
    })
    .await?;
    let next_cursor = page.next_after.map(|position| encode_cursor(state, &context, &position));
    Ok(MemorySearchPage { matches: page.matches, next_cursor })
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EditQuery {
    wait: Option<String>,
}

fn edit_wait(raw: Option<&str>) -> Result<Duration, ApiError> {
    match raw {
        None => Ok(Duration::from_secs(DEFAULT_EDIT_WAIT_SECS)),
        Some(raw) => match raw.parse::<u64>() {
            Ok(s) if s <= MAX_EDIT_WAIT_SECS => Ok(Duration::from_secs(s)),
            _ => Err(ApiError::InvalidRequest(format!(
                "wait must be a whole number of seconds from 0 to {MAX_EDIT_WAIT_SECS}, got: {raw}"
            ))),
        },
    }
}

pub(crate) fn refusal_problem(refusal: EditRefusal) -> ApiError {
    match refusal {
        EditRefusal::InvalidRequest(m) => ApiError::InvalidRequest(m),
        EditRefusal::InvalidPatch(m) => ApiError::InvalidPatch(m),
        EditRefusal::MemoryChanged(m) => ApiError::MemoryChanged(m),
    }
}

/// `POST …/memory/edits`.
pub async fn edit(
    TenantAuth(tenant): TenantAuth,
    State(state): State<AppState>,
    Path((workspace, layout)): Path<(String, String)>,
    QueryParams(query): QueryParams<EditQuery>,
    EditBody(body): EditBody,
) -> Result<Response, ApiError> {
    let wait = edit_wait(query.wait.as_deref())?;
    let edit = MemoryEdit::from_body(body.value).map_err(refusal_problem)?;
    let job = queue_checked_edit(&state, tenant, &workspace, &layout, &edit).await?;
    edit_answer(&state, tenant, job, wait).await
}

/// Checks an edit against the files as they are now and queues it: the
/// one place the HTTP route and MCP's `memory_edit` go through.
pub(crate) async fn queue_checked_edit(
    state: &AppState,
    tenant: uuid::Uuid,
    workspace: &str,
    layout: &str,
    edit: &MemoryEdit,
) -> Result<JobRecord, ApiError> {
    let folder = MemoryFolder::open(state, tenant, workspace, layout).await?;
    if !folder.layout.config.read.as_ref().is_some_and(|r| r.live_update) {
        return Err(ApiError::ReadOnly(
            "This layout's memory is read-only for running agents (its read config is null or live_update is false)."
                .into(),
        ));
    }
    if !state.volumes.has_room() {
        return Err(ApiError::InsufficientStorage(super::error::STORAGE_FULL.into()));
    }
    let (root, memories) = (folder.root.clone(), folder.layout.memories_dir.normalized.clone());
    let sessions = folder.layout.sessions_dir.normalized.clone();
    let checked = edit.clone();
    let applied =
        tokio::task::spawn_blocking(move || crate::tools::edit::apply_edit(&root, &memories, &sessions, &checked))
            .await
            .map_err(ApiError::internal)?
            .map_err(refusal_problem)?;
    let growth: i64 = applied.changed.iter().map(|c| c.growth).sum();
    check_storage(state, tenant, growth).await?;
    let job = state.store.queue_edit(tenant, &folder.workspace, &folder.layout_name, &folder.layout, edit).await?;
    state.wake.notify_waiters();
    Ok(job)
}

async fn check_storage(state: &AppState, tenant: uuid::Uuid, growth: i64) -> Result<(), ApiError> {
    if growth <= 0 {
        return Ok(());
    }
    let Some(limit) = super::limits::effective_limits(state, tenant).await?.storage_bytes.filter(|l| *l > 0) else {
        return Ok(());
    };
    let used = state.store.storage_bytes(tenant).await?.max(0) as u64;
    if used + growth as u64 > limit {
        return Err(ApiError::QuotaExceeded(format!(
            "The edit would take the tenant's storage to {} bytes, past its limit of {limit}.",
            used + growth as u64
        )));
    }
    Ok(())
}

/// What became of an edit within the wait.
pub(crate) enum EditOutcome {
    Published(PublishedEdit),
    /// Still queued or running, or failed for a reason of its own.
    Pending(Box<JobRecord>),
}

/// Waits up to `wait` for the edit's job: published, still under way, or
/// the refusal it failed with if it could no longer apply.
pub(crate) async fn edit_outcome(
    state: &AppState,
    tenant: uuid::Uuid,
    job: JobRecord,
    wait: Duration,
) -> Result<EditOutcome, ApiError> {
    let job = wait_for_job(state, tenant, job, wait).await?;
    match job.state {
        JobState::Succeeded => Ok(EditOutcome::Published(published_edit(state, tenant, &job).await?)),
        JobState::Failed => match job.last_error.as_deref().and_then(EditRefusal::from_job_error) {
            Some(refusal) => Err(refusal_problem(refusal)),
            None => Ok(EditOutcome::Pending(Box::new(job))),
        },
        _ => Ok(EditOutcome::Pending(Box::new(job))),
    }
}

/// 200 with what the edit changed once published, else 202 with the job.
async fn edit_answer(
    state: &AppState,
    tenant: uuid::Uuid,
    job: JobRecord,
    wait: Duration,
) -> Result<Response, ApiError> {
    match edit_outcome(state, tenant, job, wait).await? {
        EditOutcome::Published(published) => Ok(Json(published).into_response()),
        EditOutcome::Pending(job) => Ok((StatusCode::ACCEPTED, Json(job)).into_response()),
    }
}

/// Until the job is neither queued nor running, or `wait` passes.
pub(crate) async fn wait_for_job(
    state: &AppState,
    tenant: uuid::Uuid,
    mut job: JobRecord,
    wait: Duration,
) -> Result<JobRecord, ApiError> {
    let deadline = tokio::time::Instant::now() + wait;
    let shutdown = state.shutdown.clone();
    // Registered before each read of the job, so that a finish in between is not missed.
    let mut woken = Box::pin(state.wake.notified());
    while matches!(job.state, JobState::Queued | JobState::Running) && tokio::time::Instant::now() < deadline {
        // Jobs finished in this process wake us; another replica's are seen by polling.
        let step = tokio::time::Instant::now() + Duration::from_millis(100);
        tokio::select! {
            _ = tokio::time::sleep_until(step.min(deadline)) => {}
            _ = woken.as_mut() => {}
            _ = shutdown.cancelled() => break,
        }
        woken = Box::pin(state.wake.notified());
        job = state
            .store
            .get_job(tenant, job.job_id)
            .await?
            .ok_or_else(|| ApiError::NotFound("The job is gone.".into()))?;
    }
    Ok(job)
}

/// What a published edit changed.
pub(crate) async fn published_edit(
    state: &AppState,
    tenant: uuid::Uuid,
    job: &JobRecord,
) -> Result<PublishedEdit, ApiError> {
    let run = state
        .store
        .run_of_job(tenant, job.job_id)
        .await?
        .ok_or_else(|| ApiError::internal("an edit without its run"))?;
    let files = state.store.run_files(tenant, run.run_id).await?.unwrap_or_default();
    let changes = files
        .into_iter()
        .map(|f| {
            let change = match (&f.before_hash, &f.after_hash) {
                (None, Some(_)) => Change::Added,
                (_, None) => Change::Deleted,
                _ => Change::Modified,
            };
            EditedFile { path: f.path, change }
        })
        .collect();
    Ok(PublishedEdit { job_id: job.job_id, run_id: run.run_id, changes })
}
