//! memoryd over the Model Context Protocol (SPEC §2.10): `/v1/mcp` serves
//! the memory routes as the tools `memory_list`, `memory_read`,
//! `memory_search` and `memory_edit`, and the prompt `memory_instructions`,
//! over Streamable HTTP with the official Rust SDK (`rmcp`).
//!
//! The key is checked before the protocol is (a 401 problem without one);
//! the transport runs stateless, so any replica answers any request and a
//! restart loses nothing. Each request carries its caller — the tenant, the
//! workspace, layout and session of the endpoint's query string — into the
//! handler through the HTTP request's extensions.

use super::AppState;
use super::agent_memory::{self, EditOutcome, ListQuery, ReadQuery, SearchParams};
use super::error::ApiError;
use super::extract::QueryParams;
use crate::domain::ids::{LayoutName, SessionId, WorkspaceName};
use crate::domain::key_scope::{KeyScope, Permission, Workspaces};
use crate::domain::memory_edit::MemoryEdit;
use crate::store::AuthenticatedKey;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, GetPromptRequestParams, GetPromptResponse,
    GetPromptResult, Implementation, ListPromptsResult, ListToolsResult, PaginatedRequestParams, Prompt,
    PromptArgument, PromptMessage, Role, ServerCapabilities, ServerConfig, Tool, ToolAnnotations,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde::Deserialize;
use serde_json::{Map, Value, json};
use std::sync::{Arc, LazyLock};
use std::time::Duration;

mod text;

/// How long `memory_edit` waits for its edit to be published.
const EDIT_WAIT: Duration = Duration::from_secs(10);

/// Who calls, and where by default: from the key and the endpoint's query string.
#[derive(Clone)]
struct Caller {
    state: AppState,
    tenant: uuid::Uuid,
    /// What the key reaches: tools name no workspace beyond it.
    scope: KeyScope,
    workspace: String,
    layout: String,
    session: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EndpointQuery {
    workspace: Option<String>,
    layout: Option<String>,
    session_id: Option<String>,
}

/// The transport: stateless (no session to lose or to pin to a replica),
/// answering with plain JSON where it can. Host checks are off: the Bearer
/// key, not the `Host` header, is what keeps a browser on a rebinding
/// domain out.
static TRANSPORT: LazyLock<StreamableHttpService<MemoryServer, NeverSessionManager>> = LazyLock::new(|| {
    let config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_json_response(true)
        .disable_allowed_hosts();
    StreamableHttpService::new(|| Ok(MemoryServer), Arc::new(NeverSessionManager::default()), config)
});

/// `/v1/mcp`: the key is checked here, before any MCP handling.
pub async fn serve(
    key: AuthenticatedKey,
    State(state): State<AppState>,
    QueryParams(query): QueryParams<EndpointQuery>,
    mut req: Request<Body>,
) -> Result<Response, ApiError> {
    let name = |raw: Option<String>, what: &str, valid: fn(&str) -> bool| match raw {
        None => Ok("default".to_owned()),
        Some(raw) if valid(&raw) => Ok(raw),
        Some(raw) => Err(ApiError::InvalidRequest(format!("{what} is not a valid name: {raw:?}"))),
    };
    // A key for some workspaces only starts in the first of them.
    let first_reached = match &key.scope.workspaces {
        Workspaces::Only(names) => names.first().cloned(),
        Workspaces::All => None,
    };
    let workspace = name(query.workspace.or(first_reached), "workspace", |w| WorkspaceName::parse(w).is_some())?;
    super::authorize::reach_workspace(&key.scope.workspaces, &workspace)?;
    let layout = name(query.layout, "layout", |l| LayoutName::parse(l).is_some())?;
    if let Some(session) = &query.session_id
        && SessionId::parse(session).is_none()
    {
        return Err(ApiError::InvalidRequest(format!("session_id is not a valid session id: {session:?}")));
    }
    let (tenant, scope) = (key.tenant_id, key.scope);
    req.extensions_mut().insert(Caller { state, tenant, scope, workspace, layout, session: query.session_id });
    Ok(TRANSPORT.handle(req).await.into_response())
}

impl Caller {
    /// A workspace outside the key's list does not exist for it.
    fn reach(&self, workspace: &str) -> Result<(), ApiError> {
        super::authorize::reach_workspace(&self.scope.workspaces, workspace)
    }
}

/// The MCP server; each call finds its [`Caller`] in the request.
#[derive(Clone, Copy)]
pub struct MemoryServer;

fn caller(context: &RequestContext<RoleServer>) -> Result<Caller, ErrorData> {
    context
        .extensions
        .get::<axum::http::request::Parts>()
        .and_then(|parts| parts.extensions.get::<Caller>())
        .cloned()
        .ok_or_else(|| ErrorData::internal_error("the request carries no caller", None))
}

fn schema(value: Value) -> Arc<Map<String, Value>> {
    match value {
        Value::Object(map) => Arc::new(map),
        _ => unreachable!("tool schemas are objects"),
    }
}

/// The properties every tool takes besides its own.
fn place_properties() -> Value {
    json!({
        "workspace": {"type": "string", "description": "The workspace (default: the endpoint's, else default)."},
        "layout": {"type": "string", "description": "The layout (default: the endpoint's, else default)."},
    })
}

fn tool(name: &'static str, description: &'static str, properties: Value, required: &[&str]) -> Tool {
    let mut all = place_properties();
    all.as_object_mut().expect("an object").extend(properties.as_object().cloned().unwrap_or_default());
    let input = json!({"type": "object", "properties": all, "required": required, "additionalProperties": false});
    Tool::new(name, description, schema(input))
}

fn reading(tool: Tool, title: &str) -> Tool {
    tool.with_annotations(ToolAnnotations::with_title(title).read_only(true).open_world(false))
}

/// The tools; `memory_edit` only where the layout lets running agents write.
fn tools(editable: bool) -> Vec<Tool> {
    let mut tools = vec![
        reading(
            tool(
                "memory_list",
                "List the files and folders of the memory folder (or of a folder in it), sorted by path.",
                json!({"path": {"type": "string", "description": "A folder or file, relative to the memory folder (default: all of it)."},
                       "cursor": {"type": "string", "description": "The next_cursor of the page before."}}),
                &[],
            ),
            "List memory",
        ),
        reading(
            tool(
                "memory_read",
                "Read a memory file (MEMORY.md, a skill, a rollout summary), with line numbers. Long files come in slices: pass offset (1-based) and limit.",
                json!({"path": {"type": "string", "description": "Relative to the memory folder, e.g. MEMORY.md or skills/ci/SKILL.md."},
                       "offset": {"type": "integer", "minimum": 1}, "limit": {"type": "integer", "minimum": 1}}),
                &["path"],
            ),
            "Read memory",
        ),
        reading(
            tool(
                "memory_search",
                "Find lines of the memory files that contain the query (case-insensitive), MEMORY.md first; answers path:line: text.",
                json!({"query": {"type": "string"}, "path": {"type": "string"},
                       "regex": {"type": "boolean", "description": "Treat the query as a regular expression."},
                       "case_sensitive": {"type": "boolean"}, "context": {"type": "integer", "minimum": 0, "maximum": 20},
                       "limit": {"type": "integer", "minimum": 1, "maximum": 200}, "cursor": {"type": "string"}}),
                &["query"],
            ),
            "Search memory",
        ),
    ];
    if editable {
        tools.push(
            tool(
                "memory_edit",
                "Change memory files, all or nothing: a V4A patch (*** Begin Patch … *** End Patch) or operations of the memory tool (create, str_replace, insert, delete, rename). expect maps a path to the sha256 memory_read gave, so a file that changed since is not overwritten.",
                json!({"patch": {"type": "string"},
                       "operations": {"type": "array", "items": {"type": "object"}},
                       "expect": {"type": "object", "additionalProperties": {"type": ["string", "null"]}},
                       "rollout_id": {"type": "string"}, "reason": {"type": "string"}}),
                &[],
            )
            .with_annotations(ToolAnnotations::with_title("Edit memory").read_only(false).destructive(true).open_world(false)),
        );
    }
    tools
}

/// Whether the layout lets running agents change its memory, and the key may.
async fn editable(caller: &Caller) -> bool {
    if !caller.scope.permissions.allow(Permission::Edit) {
        return false;
    }
    match super::layouts::find_layout(&caller.state, caller.tenant, &caller.layout).await {
        Ok((_, layout)) => layout.config.read.as_ref().is_some_and(|r| r.live_update),
        Err(_) => false,
    }
}

/// A tool's arguments without the place, and the place they name.
fn split_place(caller: &Caller, arguments: Option<Map<String, Value>>) -> (String, String, Value) {
    let mut arguments = arguments.unwrap_or_default();
    let mut take = |key: &str, default: &str| match arguments.remove(key) {
        Some(Value::String(s)) => s,
        _ => default.to_owned(),
    };
    let workspace = take("workspace", &caller.workspace);
    let layout = take("layout", &caller.layout);
    (workspace, layout, Value::Object(arguments))
}

fn arguments<T: serde::de::DeserializeOwned>(value: Value) -> Result<T, ApiError> {
    serde_json::from_value(value)
        .map_err(|e| ApiError::InvalidRequest(format!("The arguments do not fit the tool: {e}")))
}

/// A tool's answer: its text for the model and its structured content.
fn answer<T: serde::Serialize>(render: impl FnOnce(&T) -> String, typed: T) -> Result<(String, Value), ApiError> {
    let said = render(&typed);
    Ok((said, serde_json::to_value(typed).map_err(ApiError::internal)?))
}

/// Runs one tool: its text for the model and its structured content.
async fn run_tool(caller: &Caller, name: &str, raw: Option<Map<String, Value>>) -> Result<(String, Value), ApiError> {
    let (workspace, layout, args) = split_place(caller, raw);
    caller.reach(&workspace)?;
    let (state, tenant) = (&caller.state, caller.tenant);
    match name {
        "memory_list" => {
            let listed =
                agent_memory::list_memory(state, tenant, &workspace, &layout, arguments::<ListQuery>(args)?).await?;
            answer(text::listing, listed)
        }
        "memory_read" => {
            let mut query = arguments::<ReadQuery>(args)?;
            query.session_id = caller.session.clone();
            let usage = agent_memory::counts_usage(&caller.scope, &workspace);
            let read = agent_memory::read_memory(state, tenant, &workspace, &layout, query, usage).await?;
            answer(text::slice, read)
        }
        "memory_search" => {
            let params = arguments::<SearchParams>(args)?;
            let found = agent_memory::search_memory(state, tenant, &workspace, &layout, params).await?;
            answer(text::matches, found)
        }
        "memory_edit" => edit(caller, &workspace, &layout, args).await,
        other => Err(ApiError::NotFound(format!("No tool {other}."))),
    }
}

async fn edit(caller: &Caller, workspace: &str, layout: &str, mut args: Value) -> Result<(String, Value), ApiError> {
    if !caller.scope.permissions.allow(Permission::Edit) {
        return Err(ApiError::Forbidden("This key does not hold the edit permission memory_edit takes.".into()));
    }
    if let (Some(session), Some(map)) = (&caller.session, args.as_object_mut()) {
        map.entry("session_id").or_insert_with(|| Value::String(session.clone()));
    }
    let edit = MemoryEdit::from_body(args).map_err(agent_memory::refusal_problem)?;
    let job = agent_memory::queue_checked_edit(&caller.state, caller.tenant, workspace, layout, &edit).await?;
    match agent_memory::edit_outcome(&caller.state, caller.tenant, job, EDIT_WAIT).await? {
        EditOutcome::Published(published) => answer(text::published, published),
        EditOutcome::Pending(job) => {
            let value = serde_json::to_value(&job).map_err(ApiError::internal)?;
            let said = format!(
                "The edit is queued as job {} ({}); it publishes once the layout's lane is free.",
                job.job_id,
                job.state.as_str()
            );
            Ok((said, value))
        }
    }
}

/// A failed call's structured content: the HTTP route's status and code.
#[derive(serde::Serialize)]
struct ToolFailure<'a> {
    status: u16,
    code: &'a str,
    detail: &'a str,
}

/// A failure as the model should see it: a tool result, never a protocol error.
fn failed(error: ApiError) -> CallToolResult {
    let (status, code) = error.status_and_code();
    if let ApiError::Internal(cause) = &error {
        tracing::error!(error = %crate::error_chain(cause.as_ref()), "an MCP tool call failed");
    }
    let detail = match &error {
        ApiError::Internal(_) => "An internal error occurred; the request id identifies it in the log.".to_owned(),
        other => other.to_string(),
    };
    let mut result = CallToolResult::error(vec![ContentBlock::text(detail.clone())]);
    let failure = ToolFailure { status: status.as_u16(), code, detail: &detail };
    result.structured_content = serde_json::to_value(failure).ok();
    result
}

impl ServerHandler for MemoryServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().enable_prompts().build())
            .with_server_info(Implementation::new("memoryd", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "The long-term memory of this agent: search it (memory_search), read what matches (memory_read) \
                 and, where memory_edit is offered, fix what is stale. The prompt memory_instructions holds the \
                 summary to start from.",
            )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let caller = caller(&context)?;
        Ok(ListToolsResult::with_all_items(tools(editable(&caller).await)))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let caller = caller(&context)?;
        let result = match run_tool(&caller, &request.name, request.arguments).await {
            Ok((said, structured)) => {
                let mut result = CallToolResult::success(vec![ContentBlock::text(said)]);
                result.structured_content = Some(structured);
                result
            }
            Err(error) => failed(error),
        };
        Ok(result.into())
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        let arguments = ["workspace", "layout"].map(|name| {
            PromptArgument::new(name)
                .with_description(format!("The {name} (default: the endpoint's)"))
                .with_required(false)
        });
        Ok(ListPromptsResult::with_all_items(vec![Prompt::new(
            "memory_instructions",
            Some("The memory instructions for this agent's next run: how to use memory, and its summary."),
            Some(arguments.to_vec()),
        )]))
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        if request.name != "memory_instructions" {
            return Err(ErrorData::invalid_params(format!("No prompt {}.", request.name), None));
        }
        let caller = caller(&context)?;
        let argument = |key: &str, default: &str| {
            request.arguments.as_ref().and_then(|a| a.get(key)).and_then(Value::as_str).unwrap_or(default).to_owned()
        };
        let (workspace, layout) = (argument("workspace", &caller.workspace), argument("layout", &caller.layout));
        caller.reach(&workspace).map_err(|e| ErrorData::invalid_params(e.to_string(), None))?;
        let instructions = super::memory::memory_instructions(&caller.state, caller.tenant, &workspace, &layout, None)
            .await
            .map_err(|e| ErrorData::invalid_params(e.to_string(), None))?;
        let text =
            instructions.map(|i| i.instructions).unwrap_or_else(|| "There is no memory to start from yet.".to_owned());
        let mut result = GetPromptResult::new(vec![PromptMessage::new_text(Role::User, text)]);
        result.description = Some(format!("Memory instructions of {workspace} / {layout}"));
        Ok(result.into())
    }
}
