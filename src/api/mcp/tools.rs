//! The MCP tools, declared with rmcp's router: each tool's arguments are a
//! type whose JSON Schema is generated, and each runs the function its HTTP
//! route runs (`api/agent_memory.rs`), rendered as text by [`super::text`].

use super::{Caller, MemoryServer, TOOLS, caller, failed, text};
use crate::api::agent_memory::{self, EditOutcome, ListQuery, ReadQuery, SearchParams};
use crate::api::error::ApiError;
use crate::api::ranked::SearchMode;
use crate::domain::key_scope::Permission;
use crate::domain::memory_edit::MemoryEdit;
use crate::tools::read::Budget;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolResult, ContentBlock};
use rmcp::schemars::{self, JsonSchema, Schema, SchemaGenerator};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, tool, tool_router};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer};
use serde_json::{Map, Value};
use std::borrow::Cow;
use std::time::Duration;

/// How long `memory_edit` waits for its edit to be published.
const EDIT_WAIT: Duration = Duration::from_secs(10);

/// A tool result is at most this much text (SPEC §2.10): past it, the
/// result says how to read on.
pub(super) const MAX_RESULT_BYTES: usize = 64 * 1024;
/// What the memory's own lines may take of a result, each charged what its
/// rendering adds; the rest is room for the lines a renderer appends (a
/// cursor is at most 8 KiB).
const LINES_BYTES: usize = MAX_RESULT_BYTES - 10 * 1024;
/// `path (N bytes)` a line.
const LIST_BUDGET: Budget = Budget { bytes: LINES_BYTES, per_line: 24 };
/// A line number and a tab a line.
const READ_BUDGET: Budget = Budget { bytes: LINES_BYTES, per_line: 12 };
/// `path:line: ` a line (the path charged as well).
const SEARCH_BUDGET: Budget = Budget { bytes: LINES_BYTES, per_line: 16 };
/// A passage's first line (`path:line-end (score) heading`) beside its text.
const PASSAGE_BUDGET: Budget = Budget { bytes: LINES_BYTES, per_line: 48 };

/// A tool's arguments as the model sent them, and as the tool's type reads
/// them: a mismatch is the tool's failure for the model to read (an
/// `isError` result), not a protocol error.
pub(super) struct Checked<T> {
    raw: Map<String, Value>,
    wanted: std::marker::PhantomData<T>,
}

impl<'de, T> Deserialize<'de> for Checked<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Ok(Self { raw: Map::deserialize(deserializer)?, wanted: std::marker::PhantomData })
    }
}

impl<T: DeserializeOwned> Checked<T> {
    /// The arguments as the tool's type reads them.
    fn parse(raw: Map<String, Value>) -> Result<T, String> {
        T::deserialize(Value::Object(raw)).map_err(|e| e.to_string())
    }
}

/// The arguments' schema, with one type per value: some clients (Gemini's
/// dialect) refuse `"type": ["string", "null"]`, so a value that may be null
/// is its one type marked `nullable` (an optional argument is also left out
/// of `required`).
impl<T: JsonSchema> JsonSchema for Checked<T> {
    fn schema_name() -> Cow<'static, str> {
        T::schema_name()
    }

    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        let mut schema = T::json_schema(generator).to_value();
        single_types(&mut schema);
        Schema::try_from(schema).expect("a schema stays an object")
    }
}

/// Rewrites every `"type": [X, "null"]` below `value` as `"type": X, "nullable": true`.
fn single_types(value: &mut Value) {
    match value {
        Value::Object(map) => {
            if let Some(Value::Array(types)) = map.get("type") {
                let named: Vec<Value> = types.iter().filter(|t| t.as_str() != Some("null")).cloned().collect();
                if let [only] = named.as_slice() {
                    let nullable = named.len() < types.len();
                    map.insert("type".into(), only.clone());
                    if nullable {
                        map.insert("nullable".into(), Value::Bool(true));
                    }
                }
            }
            map.values_mut().for_each(single_types);
        }
        Value::Array(items) => items.iter_mut().for_each(single_types),
        _ => {}
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct ListArgs {
    /// The workspace (default: the endpoint's, else default).
    workspace: Option<String>,
    /// The layout (default: the endpoint's, else default).
    layout: Option<String>,
    /// A folder or file, relative to the memory folder (default: all of it).
    path: Option<String>,
    /// The next_cursor of the page before.
    cursor: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct ReadArgs {
    /// The workspace (default: the endpoint's, else default).
    workspace: Option<String>,
    /// The layout (default: the endpoint's, else default).
    layout: Option<String>,
    /// Relative to the memory folder, e.g. MEMORY.md or skills/ci/SKILL.md.
    path: String,
    /// The first line to read (1-based; default 1).
    #[schemars(range(min = 1))]
    offset: Option<u64>,
    /// Lines to read at most (default: as many as one result holds).
    #[schemars(range(min = 1))]
    limit: Option<u64>,
    /// Where in line `offset` to start, for a line longer than one result holds (as the result says).
    #[schemars(range(min = 0))]
    byte_offset: Option<u64>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct SearchArgs {
    /// The workspace (default: the endpoint's, else default).
    workspace: Option<String>,
    /// The layout (default: the endpoint's, else default).
    layout: Option<String>,
    query: String,
    path: Option<String>,
    /// substring (default): lines holding the query; regex: lines matching it; ranked: the sections
    /// (tasks, summaries, skills) that hold its words, best first — for when the exact words are unknown.
    #[schemars(extend("enum" = ["substring", "regex", "ranked", "semantic", "hybrid"]))]
    mode: Option<String>,
    /// Treat the query as a regular expression.
    regex: Option<bool>,
    case_sensitive: Option<bool>,
    #[schemars(range(max = 20))]
    context: Option<usize>,
    #[schemars(range(min = 1, max = 200))]
    limit: Option<usize>,
    cursor: Option<String>,
}

/// `memory_edit`'s arguments as the model sees them; the edit itself is read
/// by [`MemoryEdit::from_body`], the HTTP route's parser, for its messages
/// (so its fields take any JSON here, and their schema says what they are).
#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
#[expect(dead_code, reason = "the edit's fields make its schema; MemoryEdit::from_body reads the edit")]
pub(super) struct EditArgs {
    /// The workspace (default: the endpoint's, else default).
    workspace: Option<String>,
    /// The layout (default: the endpoint's, else default).
    layout: Option<String>,
    #[schemars(with = "Option<String>")]
    patch: Option<Value>,
    #[schemars(with = "Option<Vec<Map<String, Value>>>")]
    operations: Option<Value>,
    #[schemars(with = "Option<std::collections::BTreeMap<String, Option<String>>>")]
    expect: Option<Value>,
    #[schemars(with = "Option<String>")]
    rollout_id: Option<Value>,
    #[schemars(with = "Option<String>")]
    reason: Option<Value>,
}

/// The place a tool names, defaulting to the endpoint's (its reach is
/// checked by [`admit`] before the arguments are read).
fn place(caller: &Caller, workspace: Option<String>, layout: Option<String>) -> (String, String) {
    (workspace.unwrap_or_else(|| caller.workspace.clone()), layout.unwrap_or_else(|| caller.layout.clone()))
}

/// What is checked before a tool's arguments are read: the workspace they
/// name is within the key's reach, and the key holds what the tool needs.
fn admit(caller: &Caller, raw: &Map<String, Value>, needs_edit: bool) -> Result<(), ApiError> {
    caller.reach(raw.get("workspace").and_then(Value::as_str).unwrap_or(&caller.workspace))?;
    if needs_edit && !caller.scope.permissions.allow(Permission::Edit) {
        return Err(ApiError::Forbidden("This key does not hold the edit permission memory_edit takes.".into()));
    }
    Ok(())
}

/// Runs tool `name` for the caller of `context` and makes its result: the
/// text a model reads, and nothing else — no `structuredContent`, which
/// Codex CLI and Claude Code would show their model instead of the text.
async fn respond<T: DeserializeOwned, Run>(
    context: &RequestContext<RoleServer>,
    name: &'static str,
    args: Checked<T>,
    needs_edit: bool,
    run: impl FnOnce(Caller, T, Map<String, Value>) -> Run,
) -> Result<CallToolResult, ErrorData>
where
    Run: Future<Output = Result<String, ApiError>>,
{
    let caller = caller(context)?;
    tracing::info!(client = %caller.named(), tool = name, "MCP tool call");
    let mut raw = args.raw;
    let schema = TOOLS.get(name).map(|tool| tool.input_schema.clone()).unwrap_or_default();
    super::arguments::coerce_to_strings(&schema, &mut raw);
    // The tool's schema names the argument that does not fit; serde's message is the fallback.
    let outcome = match (admit(&caller, &raw, needs_edit), super::arguments::misfit(&schema, &raw)) {
        (Err(refused), _) => Err(refused),
        (Ok(()), Some(why)) => Err(ApiError::InvalidRequest(format!("{name}: {why}"))),
        (Ok(()), None) => match Checked::<T>::parse(raw.clone()) {
            Ok(parsed) => run(caller, parsed, raw).await,
            Err(e) => Err(ApiError::InvalidRequest(format!("{name}: {e}"))),
        },
    };
    Ok(match outcome {
        Ok(said) => CallToolResult::success(vec![ContentBlock::text(text::within_result(said))]),
        Err(error) => failed(error),
    })
}

#[tool_router(vis = "pub(super)")]
impl MemoryServer {
    #[tool(
        name = "memory_list",
        description = "List the files and folders of the memory folder (or of a folder in it), sorted by path.",
        annotations(title = "List memory", read_only_hint = true, open_world_hint = false)
    )]
    async fn memory_list(
        &self,
        context: RequestContext<RoleServer>,
        Parameters(args): Parameters<Checked<ListArgs>>,
    ) -> Result<CallToolResult, ErrorData> {
        respond(&context, "memory_list", args, false, |caller, args: ListArgs, _| async move {
            let (workspace, layout) = place(&caller, args.workspace, args.layout);
            let query = ListQuery { path: args.path, cursor: args.cursor };
            let (state, tenant) = (&caller.state, caller.tenant);
            let listed = agent_memory::list_memory(state, tenant, &workspace, &layout, query, LIST_BUDGET).await?;
            Ok(text::listing(&listed))
        })
        .await
    }

    #[tool(
        name = "memory_read",
        description = "Read a memory file (MEMORY.md, a skill, a rollout summary), with line numbers. Long files come in slices: pass offset (1-based) and limit.",
        annotations(title = "Read memory", read_only_hint = true, open_world_hint = false)
    )]
    async fn memory_read(
        &self,
        context: RequestContext<RoleServer>,
        Parameters(args): Parameters<Checked<ReadArgs>>,
    ) -> Result<CallToolResult, ErrorData> {
        respond(&context, "memory_read", args, false, |caller, args: ReadArgs, _| async move {
            let (workspace, layout) = place(&caller, args.workspace, args.layout);
            let session_id = caller.session.clone();
            let (offset, limit, byte_offset) = (args.offset, args.limit, args.byte_offset);
            let query = ReadQuery { path: Some(args.path), offset, limit, byte_offset, session_id };
            let usage = agent_memory::counts_usage(&caller.scope, &workspace);
            let (state, tenant) = (&caller.state, caller.tenant);
            let read = agent_memory::read_memory(state, tenant, &workspace, &layout, query, usage, READ_BUDGET).await?;
            Ok(text::slice(&read))
        })
        .await
    }

    #[tool(
        name = "memory_search",
        description = "Find lines of the memory files that contain the query (case-insensitive), MEMORY.md first; answers path:line: text. With mode ranked, the sections that hold the query's words, best first.",
        annotations(title = "Search memory", read_only_hint = true, open_world_hint = false)
    )]
    async fn memory_search(
        &self,
        context: RequestContext<RoleServer>,
        Parameters(args): Parameters<Checked<SearchArgs>>,
    ) -> Result<CallToolResult, ErrorData> {
        respond(&context, "memory_search", args, false, |caller, args: SearchArgs, _| async move {
            let (workspace, layout) = place(&caller, args.workspace, args.layout);
            let params = SearchParams {
                query: Some(args.query),
                path: args.path,
                regex: args.regex,
                mode: args.mode,
                case_sensitive: args.case_sensitive,
                context: args.context,
                limit: args.limit,
                cursor: args.cursor,
            };
            let (state, tenant) = (&caller.state, caller.tenant);
            match crate::api::ranked::mode_of(&params)? {
                SearchMode::Lines => {
                    let found = agent_memory::search_memory(state, tenant, &workspace, &layout, params, SEARCH_BUDGET);
                    Ok(text::matches(&found.await?))
                }
                SearchMode::Passages(ranking) => {
                    let found =
                        crate::api::ranked::search(state, tenant, &workspace, &layout, params, ranking, PASSAGE_BUDGET);
                    Ok(text::passages(&found.await?))
                }
            }
        })
        .await
    }

    #[tool(
        name = "memory_edit",
        description = "Change memory files, all or nothing: a V4A patch (*** Begin Patch … *** End Patch) or operations of the memory tool (create, str_replace, insert, delete, rename). expect maps a path to the sha256 memory_read gave, so a file that changed since is not overwritten.",
        annotations(title = "Edit memory", read_only_hint = false, destructive_hint = true, open_world_hint = false)
    )]
    async fn memory_edit(
        &self,
        context: RequestContext<RoleServer>,
        Parameters(args): Parameters<Checked<EditArgs>>,
    ) -> Result<CallToolResult, ErrorData> {
        respond(&context, "memory_edit", args, true, |caller, args: EditArgs, raw| async move {
            let (workspace, layout) = place(&caller, args.workspace, args.layout);
            edit(&caller, &workspace, &layout, raw).await
        })
        .await
    }
}

async fn edit(
    caller: &Caller,
    workspace: &str,
    layout: &str,
    mut body: Map<String, Value>,
) -> Result<String, ApiError> {
    body.remove("workspace");
    body.remove("layout");
    if let Some(session) = &caller.session {
        body.entry("session_id").or_insert_with(|| Value::String(session.clone()));
    }
    let edit = MemoryEdit::from_body(Value::Object(body)).map_err(agent_memory::refusal_problem)?;
    let job = agent_memory::queue_checked_edit(&caller.state, caller.tenant, workspace, layout, &edit).await?;
    match agent_memory::edit_outcome(&caller.state, caller.tenant, job, EDIT_WAIT).await? {
        EditOutcome::Published(published) => Ok(text::published(&published)),
        EditOutcome::Pending(job) => Ok(format!(
            "The edit is queued as job {} ({}); it publishes once the layout's lane is free.",
            job.job_id,
            job.state.as_str()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn schemas_have_one_type_per_value() {
        let mut schema = json!({"properties": {
            "path": {"type": ["string", "null"]},
            "expect": {"type": ["object", "null"], "additionalProperties": {"type": ["string", "null"]}},
            "query": {"type": "string"},
        }});
        single_types(&mut schema);
        assert_eq!(
            schema,
            json!({"properties": {
                "path": {"type": "string", "nullable": true},
                "expect": {"type": "object", "nullable": true, "additionalProperties": {"type": "string", "nullable": true}},
                "query": {"type": "string"},
            }})
        );
    }

    #[test]
    fn every_tool_schema_is_single_typed_and_closed_where_typed() {
        for tool in MemoryServer::tool_router().list_all() {
            let schema = serde_json::to_string(&tool.input_schema).unwrap();
            assert!(
                !schema.contains("[\"string\",\"null\"]") && !schema.contains("\"null\""),
                "{}: {schema}",
                tool.name
            );
        }
        let search = MemoryServer::tool_router().get("memory_search").cloned().unwrap();
        assert_eq!(search.input_schema["required"], json!(["query"]));
        assert_eq!(search.input_schema["additionalProperties"], json!(false));
    }

    #[test]
    fn the_listing_order_names_every_tool() {
        let mut offered = super::super::TOOL_ORDER.to_vec();
        offered.sort();
        let routed: Vec<String> = MemoryServer::tool_router().list_all().into_iter().map(|t| t.name.into()).collect();
        assert_eq!(offered, routed);
    }

    #[test]
    fn arguments_that_do_not_fit_are_named_by_the_tools_schema() {
        let misfit = |tool: &str, raw: Value| {
            let schema = TOOLS.get(tool).unwrap().input_schema.clone();
            super::super::arguments::misfit(&schema, raw.as_object().unwrap())
        };
        let unknown = misfit("memory_read", json!({"path": "MEMORY.md", "session_id": "s"})).unwrap();
        assert!(unknown.contains("no argument session_id") && unknown.contains("byte_offset"), "{unknown}");
        let negative = misfit("memory_read", json!({"path": "MEMORY.md", "offset": -1})).unwrap();
        assert_eq!(negative, "argument offset must be at least 1, not -1.");
        assert_eq!(misfit("memory_search", json!({"limit": 3})).unwrap(), "argument query is required.");
        let typed = misfit("memory_search", json!({"query": "x", "regex": "yes"})).unwrap();
        assert_eq!(typed, "argument regex must be true or false, not \"yes\".");
        assert_eq!(misfit("memory_search", json!({"query": "x", "regex": null, "limit": 200})), None);
        let checked: Checked<ReadArgs> = serde_json::from_value(json!({"path": 3})).unwrap();
        assert!(Checked::<ReadArgs>::parse(checked.raw.clone()).is_err() && checked.raw["path"] == 3);
    }
}
