//! The memory files as MCP resources (SPEC §2.10): `memory://<workspace>/
//! <layout>/<path>` for every file of the memory folders the key reaches,
//! so a user can attach `MEMORY.md` to a conversation. A resource is read
//! as `memory_read` reads it: the same confinement, the same files (already
//! redacted when published), the same usage counting.

use super::{Caller, tools::MAX_RESULT_BYTES};
use crate::api::agent_memory::{self, CursorOf, ReadQuery};
use crate::api::error::ApiError;
use crate::tools::read::{Budget, MemoryEntry};
use rmcp::ErrorData;
use rmcp::model::{
    ListResourceTemplatesResult, ListResourcesResult, ReadResourceResult, Resource, ResourceContents, ResourceTemplate,
};

/// Resources a `resources/list` page holds at most.
const PAGE: usize = 500;
/// A resource's text is at most one tool result's, cut at a line end.
const READ_BUDGET: Budget = Budget { bytes: MAX_RESULT_BYTES - 512, per_line: 0 };

/// Where a listing page ends: the last `(workspace, layout, path)` it holds.
type Position = (String, String, String);

/// A page of the memory files of every workspace the key reaches, by
/// workspace, layout and path.
pub(super) async fn list(caller: &Caller, cursor: Option<&str>) -> Result<ListResourcesResult, ErrorData> {
    let context = agent_memory::cursor_context(CursorOf::Resources, caller.tenant, "*", "*");
    let after: Option<Position> = cursor
        .map(|raw| agent_memory::decode_cursor(&caller.state, &context, raw))
        .transpose()
        .map_err(protocol_error)?;
    let mut workspaces = caller.state.store.workspace_activity(caller.tenant).await.map_err(internal)?.summaries();
    workspaces.retain(|w| caller.scope.workspaces.sees(&w.name));
    workspaces.sort_by(|a, b| a.name.cmp(&b.name));
    let mut page = Vec::new();
    for workspace in &workspaces {
        let mut layouts = workspace.layouts.clone();
        layouts.sort();
        for layout in &layouts {
            let passed = |path: &str| {
                after.as_ref().is_some_and(|a| (&a.0, &a.1, a.2.as_str()) >= (&workspace.name, layout, path))
            };
            if after.as_ref().is_some_and(|a| (&a.0, &a.1) > (&workspace.name, layout)) {
                continue;
            }
            let files = match agent_memory::memory_files(&caller.state, caller.tenant, &workspace.name, layout).await {
                Ok(files) => files,
                Err(ApiError::NotFound(_)) => continue,
                Err(e) => return Err(protocol_error(e)),
            };
            for file in files.into_iter().filter(|f| !passed(&f.path)) {
                if page.len() == PAGE {
                    let last: &Resource = page.last().expect("a full page");
                    let position = position_of(&last.uri).ok_or_else(|| internal("a listed uri parses"))?;
                    let mut result = ListResourcesResult::with_all_items(page);
                    result.next_cursor = Some(agent_memory::encode_cursor(&caller.state, &context, &position));
                    return Ok(result);
                }
                page.push(resource(&workspace.name, layout, &file));
            }
        }
    }
    Ok(ListResourcesResult::with_all_items(page))
}

/// What a path's segments may hold as they stand in a URI; anything else is
/// percent-encoded (a space, `#`, `?`, `%`, non-ASCII).
const SEGMENT: &percent_encoding::AsciiSet =
    &percent_encoding::NON_ALPHANUMERIC.remove(b'-').remove(b'_').remove(b'.').remove(b'~');

fn uri_of(workspace: &str, layout: &str, path: &str) -> String {
    let segments: Vec<String> =
        path.split('/').map(|s| percent_encoding::utf8_percent_encode(s, SEGMENT).to_string()).collect();
    format!("memory://{workspace}/{layout}/{}", segments.join("/"))
}

fn resource(workspace: &str, layout: &str, file: &MemoryEntry) -> Resource {
    let resource = Resource::new(uri_of(workspace, layout, &file.path), file.path.clone())
        .with_title(format!("{} ({workspace} / {layout})", file.path))
        .with_mime_type(mime_type(&file.path));
    match file.bytes {
        Some(bytes) => resource.with_size(bytes),
        None => resource,
    }
}

fn mime_type(path: &str) -> &'static str {
    if path.ends_with(".md") { "text/markdown" } else { "text/plain" }
}

/// `memory://<workspace>/<layout>/<path>` as its parts, the path decoded.
fn position_of(uri: &str) -> Option<Position> {
    let rest = uri.strip_prefix("memory://")?;
    let (workspace, rest) = rest.split_once('/')?;
    let (layout, path) = rest.split_once('/')?;
    let path = percent_encoding::percent_decode_str(path).decode_utf8().ok()?;
    (!workspace.is_empty() && !layout.is_empty() && !path.is_empty())
        .then(|| (workspace.to_owned(), layout.to_owned(), path.into_owned()))
}

/// One resource's text: as much of the file as one result holds, and where
/// `memory_read` goes on when it holds less.
pub(super) async fn read(caller: &Caller, uri: &str) -> Result<ReadResourceResult, ErrorData> {
    let (workspace, layout, path) = position_of(uri).ok_or_else(|| {
        ErrorData::invalid_params(
            format!("{uri} is not a memory resource (memory://<workspace>/<layout>/<path>)."),
            None,
        )
    })?;
    caller.reach(&workspace).map_err(protocol_error)?;
    let query = ReadQuery {
        path: Some(path.clone()),
        offset: None,
        limit: None,
        byte_offset: None,
        session_id: caller.session.clone(),
    };
    let usage = agent_memory::counts_usage(&caller.scope, &workspace);
    let read = agent_memory::read_memory(&caller.state, caller.tenant, &workspace, &layout, query, usage, READ_BUDGET)
        .await
        .map_err(protocol_error)?;
    let mut text = read.text;
    if read.truncated && !text.ends_with('\n') {
        let (offset, next) = (read.offset, read.byte_offset + text.len() as u64);
        text.push_str(&format!(
            "\n… the file goes on: memory_read with path {path}, offset {offset} and byte_offset {next}"
        ));
    } else if read.truncated {
        let next = read.offset + read.lines;
        text.push_str(&format!("… the file goes on: memory_read with path {path} and offset {next} reads the rest"));
    }
    let contents = ResourceContents::text(super::text::within_result(text), uri).with_mime_type(mime_type(&path));
    Ok(ReadResourceResult::new(vec![contents]))
}

/// The one template: any memory file by its workspace, layout and path.
pub(super) fn templates() -> ListResourceTemplatesResult {
    let template = ResourceTemplate::new("memory://{workspace}/{layout}/{path}", "memory file")
        .with_description("A file of a layout's memory folder, e.g. memory://default/default/MEMORY.md");
    ListResourceTemplatesResult::with_all_items(vec![template])
}

/// A refusal as the protocol's error: resources have no `isError` result.
fn protocol_error(error: ApiError) -> ErrorData {
    match &error {
        ApiError::NotFound(detail) => ErrorData::resource_not_found(detail.clone(), None),
        ApiError::Internal(cause) => {
            tracing::error!(error = %crate::error_chain(cause.as_ref()), "an MCP resource read failed");
            ErrorData::internal_error("An internal error occurred; the request id identifies it in the log.", None)
        }
        other => ErrorData::invalid_params(super::with_tool_names(&other.to_string()), None),
    }
}

fn internal(error: impl std::fmt::Display) -> ErrorData {
    tracing::error!(error = %error, "listing MCP resources failed");
    ErrorData::internal_error("An internal error occurred; the request id identifies it in the log.", None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_resource_uri_names_workspace_layout_and_path() {
        let parts = |w: &str, l: &str, p: &str| Some((w.to_owned(), l.to_owned(), p.to_owned()));
        assert_eq!(position_of("memory://default/default/MEMORY.md"), parts("default", "default", "MEMORY.md"));
        assert_eq!(position_of("memory://w/l/skills/ci/SKILL.md"), parts("w", "l", "skills/ci/SKILL.md"));
        for bad in ["memory://w/l/", "memory://w/MEMORY.md", "file:///etc/passwd", "memory:///l/x", "memory://w//x"] {
            assert_eq!(position_of(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_path_with_spaces_or_signs_goes_there_and_back() {
        for path in ["notes/a b.md", "notes/50%#x?.md", "notes/été.md", "MEMORY.md"] {
            let uri = uri_of("w", "l", path);
            assert!(!uri.contains(' ') && !uri.contains('#') && !uri.contains('?'), "{uri}");
            assert_eq!(position_of(&uri), Some(("w".into(), "l".into(), path.into())), "{uri}");
        }
        assert_eq!(uri_of("w", "l", "skills/ci/SKILL.md"), "memory://w/l/skills/ci/SKILL.md");
        assert_eq!(
            position_of("memory://w/l/%2E%2E/x").map(|p| p.2),
            Some("../x".into()),
            "decoded; confinement refuses it"
        );
    }
}
