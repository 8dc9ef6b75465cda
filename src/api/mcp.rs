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
use super::error::ApiError;
use super::extract::QueryParams;
use crate::domain::ids::{LayoutName, SessionId, WorkspaceName};
use crate::domain::key_scope::{KeyScope, Permission, Workspaces};
use crate::store::AuthenticatedKey;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use rmcp::handler::server::tool::{ToolCallContext, ToolRouter};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, GetPromptRequestParams, GetPromptResponse,
    GetPromptResult, Implementation, InitializeRequestParams, InitializeResult, ListPromptsResult,
    ListResourceTemplatesResult, ListResourcesResult, ListToolsResult, PaginatedRequestParams, Prompt, PromptArgument,
    PromptMessage, ReadResourceRequestParams, ReadResourceResponse, Role, ServerCapabilities, ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde::Deserialize;
use serde_json::Value;
use std::sync::{Arc, LazyLock};

mod arguments;
mod resources;
mod text;
mod tools;

/// The tools, made once: their schemas are generated from their argument types.
static TOOLS: LazyLock<ToolRouter<MemoryServer>> = LazyLock::new(MemoryServer::tool_router);

/// The order `tools/list` offers them in: reading first, `memory_edit` only
/// where the layout lets running agents write and the key may.
const TOOL_ORDER: [&str; 4] = ["memory_list", "memory_read", "memory_search", "memory_edit"];

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
    /// The client as its `User-Agent` names it, for the log.
    client: String,
    key_id: uuid::Uuid,
}

impl Caller {
    /// Who calls, for the log: the name and version the client gave in its
    /// `initialize`, found by its key and `User-Agent` (a stateless
    /// transport's later messages carry no session), else its `User-Agent`.
    fn named(&self) -> String {
        CLIENT_NAMES.get(&(self.key_id, self.client.clone())).unwrap_or_else(|| self.client.clone())
    }
}

/// Clients' names from their `initialize`, by key and `User-Agent`: bounded,
/// and only ever read for the log.
static CLIENT_NAMES: LazyLock<moka::sync::Cache<(uuid::Uuid, String), String>> = LazyLock::new(|| {
    moka::sync::Cache::builder().max_capacity(10_000).time_to_idle(std::time::Duration::from_secs(86_400)).build()
});

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
    if req.method() == axum::http::Method::POST && !accepts_both_answers(req.headers()) {
        return Ok(super::error::problem(
            axum::http::StatusCode::NOT_ACCEPTABLE,
            "invalid_request",
            "POST /v1/mcp needs an Accept header naming both application/json and text/event-stream \
             (the Streamable HTTP transport answers with either).",
        ));
    }
    let (tenant, scope, key_id) = (key.tenant_id, key.scope, key.key_id);
    let client = client_of(req.headers());
    let session = query.session_id;
    req.extensions_mut().insert(Caller { state, tenant, scope, workspace, layout, session, client, key_id });
    Ok(TRANSPORT.handle(req).await.into_response())
}

/// Whether a POST's `Accept` names both media types the transport may answer with.
fn accepts_both_answers(headers: &axum::http::HeaderMap) -> bool {
    let named: Vec<String> = headers
        .get_all(axum::http::header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|item| item.split(';').next().unwrap_or("").trim().to_ascii_lowercase())
        .collect();
    ["application/json", "text/event-stream"].iter().all(|wanted| named.iter().any(|n| n == wanted))
}

/// The caller's `User-Agent`, for the log.
fn client_of(headers: &axum::http::HeaderMap) -> String {
    loggable(headers.get(axum::http::header::USER_AGENT).and_then(|v| v.to_str().ok()).unwrap_or("unknown"))
}

/// What a client says of itself, printable and short, as the log takes it.
fn loggable(said: &str) -> String {
    said.chars().filter(|c| !c.is_control()).take(120).collect()
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

/// A failure as the model should see it: a tool result, never a protocol
/// error, its text the problem's detail and code, naming the MCP tools
/// where the shared message names their HTTP routes.
fn failed(error: ApiError) -> CallToolResult {
    let (_, code) = error.status_and_code();
    if let ApiError::Internal(cause) = &error {
        tracing::error!(error = %crate::error_chain(cause.as_ref()), "an MCP tool call failed");
    }
    let detail = match &error {
        ApiError::Internal(_) => "An internal error occurred; the request id identifies it in the log.".to_owned(),
        other => with_tool_names(&other.to_string()),
    };
    CallToolResult::error(vec![ContentBlock::text(format!("{detail} ({code})"))])
}

/// The HTTP routes a shared message names, as the MCP tools they are here.
const ROUTE_TOOLS: [(&str, &str); 4] = [
    ("memory/list", "memory_list"),
    ("memory/read", "memory_read"),
    ("memory/search", "memory_search"),
    ("memory/edits", "memory_edit"),
];

fn with_tool_names(message: &str) -> String {
    ROUTE_TOOLS.iter().fold(message.to_owned(), |said, (route, tool)| said.replace(route, tool))
}

impl ServerHandler for MemoryServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().enable_prompts().enable_resources().build())
            .with_server_info(Implementation::new("memoryd", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "The long-term memory of this agent: search it (memory_search), read what matches (memory_read) \
                 and, where memory_edit is offered, fix what is stale. The prompt memory_instructions holds the \
                 summary to start from.",
            )
    }

    async fn initialize(
        &self,
        request: InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, ErrorData> {
        let info = &request.client_info;
        let named = loggable(&format!("{} {}", info.name, info.version));
        if let Ok(caller) = caller(&context) {
            tracing::info!(client = %named, user_agent = %caller.client, "MCP client initialized");
            CLIENT_NAMES.insert((caller.key_id, caller.client), named);
        }
        context.peer.set_peer_info(request.clone());
        self.negotiate_initialize(&request)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let caller = caller(&context)?;
        let editable = editable(&caller).await;
        let offered = TOOL_ORDER
            .iter()
            .filter(|name| editable || **name != "memory_edit")
            .filter_map(|name| TOOLS.get(name).cloned())
            .collect();
        Ok(ListToolsResult::with_all_items(offered))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        if TOOLS.get(&request.name).is_none() {
            caller(&context)?;
            let tools = TOOL_ORDER.join(", ");
            return Err(ErrorData::invalid_params(format!("No tool {}; the tools are {tools}.", request.name), None));
        }
        TOOLS.call(ToolCallContext::new(self, request, context)).await
    }

    async fn list_resources(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        resources::list(&caller(&context)?, request.as_ref().and_then(|r| r.cursor.as_deref())).await
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        Ok(resources::templates())
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        Ok(resources::read(&caller(&context)?, &request.uri).await?.into())
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
