//! The V4A patch format of the `apply_patch` tool (R-AP-2, R-AP-4), with the
//! 0.24.0 behaviours: Add File refuses an existing file, and an end-of-file
//! hunk does not see the phantom line after a final newline.
//!
//! Errors are strings: they go back to the model as the tool's output.

use crate::domain::pytext::{py_splitlines, py_strip};
use serde_json::Value;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OperationKind {
    Create,
    Update,
    Delete,
}

/// One file operation of a patch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PatchOperation {
    pub kind: OperationKind,
    pub path: String,
    /// The V4A body; empty for a delete.
    pub diff: String,
    pub move_to: Option<String>,
}

const BEGIN: &str = "*** Begin Patch";
const END: &str = "*** End Patch";
const ADD: &str = "*** Add File: ";
const DELETE: &str = "*** Delete File: ";
const UPDATE: &str = "*** Update File: ";
const MOVE: &str = "*** Move to: ";

fn is_operation_header(line: &str) -> bool {
    line.starts_with(ADD) || line.starts_with(DELETE) || line.starts_with(UPDATE)
}

/// The tool's input: JSON (after left-trimming it starts with `{` or `[`)
/// or the text envelope.
pub fn parse_patch_input(input: &str) -> Result<Vec<PatchOperation>, String> {
    let trimmed = input.trim_start_matches(crate::domain::pytext::is_py_space);
    if trimmed.starts_with('{') || trimmed.starts_with('[') {
        let value: Value =
            serde_json::from_str(trimmed).map_err(|e| format!("apply_patch JSON input is not valid JSON: {e}"))?;
        return parse_json_operations(&value);
    }
    parse_envelope(input)
}

fn parse_json_operations(value: &Value) -> Result<Vec<PatchOperation>, String> {
    let ops: Vec<&Value> = match value {
        Value::Array(items) => items.iter().collect(),
        Value::Object(map) => match (map.get("operations"), map.get("operation")) {
            (Some(Value::Array(items)), _) => items.iter().collect(),
            (None, Some(op)) => vec![op],
            _ if map.contains_key("type") => vec![value],
            _ => return Err("apply_patch JSON input must be an object or array".into()),
        },
        _ => return Err("apply_patch JSON input must be an object or array".into()),
    };
    ops.into_iter().map(parse_json_operation).collect()
}

fn parse_json_operation(op: &Value) -> Result<PatchOperation, String> {
    let Value::Object(op) = op else {
        return Err("apply_patch JSON input must be an object or array".into());
    };
    let type_name = match op.get("type") {
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
        None => "None".into(),
    };
    let kind = match type_name.as_str() {
        "create_file" => OperationKind::Create,
        "update_file" => OperationKind::Update,
        "delete_file" => OperationKind::Delete,
        _ => return Err(format!("Invalid apply_patch operation type: {type_name}")),
    };
    let path = match op.get("path") {
        Some(Value::String(p)) if !p.is_empty() => p.clone(),
        _ => return Err("apply_patch operation is missing a path".into()),
    };
    let diff = match (kind, op.get("diff")) {
        (OperationKind::Delete, _) => String::new(),
        (_, Some(Value::String(d))) => d.clone(),
        _ => return Err(format!("apply_patch operation {type_name} is missing a diff")),
    };
    let move_to = match op.get("move_to") {
        None | Some(Value::Null) => None,
        Some(Value::String(m)) => Some(m.clone()),
        Some(_) => return Err("apply_patch operation move_to must be a string".into()),
    };
    Ok(PatchOperation { kind, path, diff, move_to })
}

fn header_path(line: &str, prefix: &str) -> Result<String, String> {
    let path = py_strip(&line[prefix.len()..]);
    if path.is_empty() { Err(format!("Missing path in apply_patch header: {line}")) } else { Ok(path.to_owned()) }
}

fn parse_envelope(input: &str) -> Result<Vec<PatchOperation>, String> {
    let lines = py_splitlines(input);
    if lines.first() != Some(&BEGIN) {
        return Err("apply_patch input must start with '*** Begin Patch'".into());
    }
    if lines.len() < 2 || lines.last() != Some(&END) {
        return Err("apply_patch input must end with '*** End Patch'".into());
    }
    let body = &lines[1..lines.len() - 1];
    let mut ops = Vec::new();
    let mut i = 0;
    while i < body.len() {
        let line = body[i];
        if line.starts_with(ADD) {
            let path = header_path(line, ADD)?;
            i += 1;
            let mut plus = Vec::new();
            while i < body.len() && !is_operation_header(body[i]) {
                if !body[i].starts_with('+') {
                    return Err(format!("Invalid Add File line: {}", body[i]));
                }
                plus.push(body[i]);
                i += 1;
            }
            if plus.is_empty() {
                return Err(format!("Add File patch for {path} must include at least one + line"));
            }
            ops.push(PatchOperation {
                kind: OperationKind::Create,
                path,
                diff: format!("{}\n", plus.join("\n")),
                move_to: None,
            });
        } else if line.starts_with(DELETE) {
            let path = header_path(line, DELETE)?;
            i += 1;
            if i < body.len() && !is_operation_header(body[i]) {
                return Err(format!("Delete File patch for {path} must not include a diff"));
            }
            ops.push(PatchOperation { kind: OperationKind::Delete, path, diff: String::new(), move_to: None });
        } else if line.starts_with(UPDATE) {
            let path = header_path(line, UPDATE)?;
            i += 1;
            let mut move_to = None;
            if i < body.len() && body[i].starts_with(MOVE) {
                move_to = Some(header_path(body[i], MOVE)?);
                i += 1;
            }
            let start = i;
            while i < body.len() && !is_operation_header(body[i]) {
                i += 1;
            }
            if i == start {
                return Err(format!("Update File patch for {path} must include a hunk"));
            }
            let diff = format!("{}\n", body[start..i].join("\n"));
            ops.push(PatchOperation { kind: OperationKind::Update, path, diff, move_to });
        } else {
            return Err(format!("Invalid apply_patch file operation header: {line}"));
        }
    }
    if ops.is_empty() {
        return Err("apply_patch input must include at least one file operation".into());
    }
    Ok(ops)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DiffMode {
    Create,
    Update,
}

/// Lines that end a section of the diff.
const SECTION_ENDS: [&str; 4] = ["*** End Patch", "*** Update File:", "*** Delete File:", "*** Add File:"];
const END_OF_FILE: &str = "*** End of File";

/// R-AP-4.1: split on `\r?\n`, drop a trailing `\r` and one final empty line.
fn diff_lines(diff: &str) -> Vec<&str> {
    let mut lines: Vec<&str> = diff.split('\n').map(|l| l.strip_suffix('\r').unwrap_or(l)).collect();
    if lines.last() == Some(&"") {
        lines.pop();
    }
    lines
}

#[derive(Debug)]
struct Chunk {
    orig_index: usize,
    del_lines: Vec<String>,
    ins_lines: Vec<String>,
}

/// R-AP-4: the new text of `input` after `diff`.
pub fn apply_diff(input: &str, diff: &str, mode: DiffMode) -> Result<String, String> {
    let newline = if mode == DiffMode::Update && input.contains('\n') {
        if input.contains("\r\n") { "\r\n" } else { "\n" }
    } else if diff.contains("\r\n") {
        "\r\n"
    } else {
        "\n"
    };
    let lines = diff_lines(diff);
    if mode == DiffMode::Create {
        let mut out = Vec::new();
        for line in lines.iter().take_while(|l| !SECTION_ENDS.iter().any(|e| l.starts_with(e))) {
            let Some(text) = line.strip_prefix('+') else {
                return Err(format!("Invalid Add File Line: {line}"));
            };
            out.push(text);
        }
        return Ok(out.join(newline));
    }
    let normalized = input.replace("\r\n", "\n");
    let file: Vec<&str> = normalized.split('\n').collect();
    let chunks = parse_update(&file, &lines)?;
    let mut dest: Vec<&str> = Vec::with_capacity(file.len());
    let mut cursor = 0;
    for chunk in &chunks {
        if chunk.orig_index > file.len() {
            return Err(format!("applyDiff: chunk.origIndex {} > input length {}", chunk.orig_index, file.len()));
        }
        if cursor > chunk.orig_index {
            return Err(format!("applyDiff: overlapping chunk at {} (cursor {cursor})", chunk.orig_index));
        }
        dest.extend_from_slice(&file[cursor..chunk.orig_index]);
        dest.extend(chunk.ins_lines.iter().map(String::as_str));
        cursor = chunk.orig_index + chunk.del_lines.len();
    }
    dest.extend_from_slice(&file[cursor.min(file.len())..]);
    Ok(dest.join(newline))
}

fn is_update_done(line: Option<&&str>) -> bool {
    match line {
        None => true,
        Some(l) => SECTION_ENDS.iter().any(|e| l.starts_with(e)) || l.starts_with(END_OF_FILE),
    }
}

/// Which matching comes first: exact, then trailing white space ignored, then both ends.
fn lines_match(a: &str, b: &str, level: u8) -> bool {
    match level {
        0 => a == b,
        1 => {
            a.trim_end_matches(crate::domain::pytext::is_py_space)
                == b.trim_end_matches(crate::domain::pytext::is_py_space)
        }
        _ => py_strip(a) == py_strip(b),
    }
}

fn find_context_core(file: &[&str], context: &[String], start: usize) -> Option<usize> {
    if context.is_empty() {
        return Some(start);
    }
    for level in 0..3 {
        for i in start..file.len() {
            if i + context.len() <= file.len()
                && file[i..i + context.len()].iter().zip(context).all(|(a, b)| lines_match(a, b, level))
            {
                return Some(i);
            }
        }
    }
    None
}

fn find_context(file: &[&str], context: &[String], start: usize, eof: bool) -> Option<usize> {
    if eof {
        // 0.24.0: the empty element after a final newline is no line to match.
        let searchable = match file.last() {
            Some(&"") => &file[..file.len() - 1],
            _ => file,
        };
        if let Some(found) = find_context_core(searchable, context, searchable.len().saturating_sub(context.len())) {
            return Some(found);
        }
    }
    find_context_core(file, context, start)
}

fn find_anchor(file: &[&str], anchor: &str, cursor: usize, first: bool) -> Option<usize> {
    for level in [0u8, 2] {
        if first && file[..cursor.min(file.len())].iter().any(|l| lines_match(l, anchor, level)) {
            return Some(cursor);
        }
        if let Some(i) = (cursor..file.len()).find(|&i| lines_match(file[i], anchor, level)) {
            return Some(i + 1);
        }
    }
    None
}

fn parse_update(file: &[&str], lines: &[&str]) -> Result<Vec<Chunk>, String> {
    let mut chunks = Vec::new();
    let mut index = 0;
    let mut cursor = 0;
    while !is_update_done(lines.get(index)) {
        let mut anchors = Vec::new();
        let mut markers = 0;
        while let Some(line) = lines.get(index) {
            if let Some(text) = line.strip_prefix("@@ ") {
                if !py_strip(text).is_empty() {
                    anchors.push(text);
                }
            } else if *line != "@@" {
                break;
            }
            markers += 1;
            index += 1;
        }
        if markers == 0 && cursor != 0 {
            return Err(format!("Invalid Line:\n{}", lines[index]));
        }
        let required = markers > 1;
        for (i, anchor) in anchors.iter().enumerate() {
            match find_anchor(file, anchor, cursor, i == 0) {
                Some(next) => cursor = next,
                None if required => return Err(format!("Invalid Anchor {cursor}:\n{anchor}")),
                None => {}
            }
        }
        let section_start = index;
        let mut old: Vec<String> = Vec::new();
        let mut dels: Vec<String> = Vec::new();
        let mut ins: Vec<String> = Vec::new();
        let mut section_chunks = Vec::new();
        let mut mode = ' ';
        while let Some(&raw) = lines.get(index) {
            if raw.starts_with("@@")
                || raw.starts_with(END_OF_FILE)
                || SECTION_ENDS.iter().any(|e| raw.starts_with(e))
                || raw == "***"
            {
                break;
            }
            if raw.starts_with("***") {
                return Err(format!("Invalid Line: {raw}"));
            }
            index += 1;
            let line = if raw.is_empty() { " " } else { raw };
            let previous = mode;
            mode = match line.chars().next() {
                Some(c @ ('+' | '-' | ' ')) => c,
                _ => return Err(format!("Invalid Line: {line}")),
            };
            let text = line[1..].to_owned();
            if mode == ' ' && previous != ' ' && (!ins.is_empty() || !dels.is_empty()) {
                section_chunks.push(Chunk {
                    orig_index: old.len() - dels.len(),
                    del_lines: std::mem::take(&mut dels),
                    ins_lines: std::mem::take(&mut ins),
                });
            }
            match mode {
                '-' => {
                    dels.push(text.clone());
                    old.push(text);
                }
                '+' => ins.push(text),
                _ => old.push(text),
            }
        }
        if !ins.is_empty() || !dels.is_empty() {
            section_chunks.push(Chunk { orig_index: old.len() - dels.len(), del_lines: dels, ins_lines: ins });
        }
        let eof = lines.get(index) == Some(&END_OF_FILE);
        if eof {
            index += 1;
        } else if index == section_start {
            return Err(format!("Nothing in this section - index={index} {}", lines.get(index).copied().unwrap_or("")));
        }
        let Some(found) = find_context(file, &old, cursor, eof) else {
            let kind = if eof { "EOF " } else { "" };
            return Err(format!("Invalid {kind}Context {cursor}:\n{}", old.join("\n")));
        };
        for mut chunk in section_chunks {
            chunk.orig_index += found;
            chunks.push(chunk);
        }
        cursor = found + old.len();
    }
    Ok(chunks)
}

#[cfg(test)]
#[path = "apply_patch_tests.rs"]
mod tests;
