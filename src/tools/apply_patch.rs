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
mod tests {
    use super::*;
    use crate::test_rng::XorShift;

    fn update(input: &str, diff: &str) -> Result<String, String> {
        apply_diff(input, diff, DiffMode::Update)
    }

    #[test]
    fn outcomes_checked_against_the_sdk() {
        assert_eq!(update("", "@@\n+x\n").unwrap(), "x\n");
        assert_eq!(update("existing\n", "@@\n+x\n").unwrap(), "x\nexisting\n", "no context inserts at the top");
        assert_eq!(update("", "+a\n+b\n").unwrap(), "a\nb\n");
        assert_eq!(update("", "@@\n+memory entry\n").unwrap(), "memory entry\n");
    }

    #[test]
    fn create_mode_has_no_trailing_newline_unless_the_last_line_is_a_bare_plus() {
        assert_eq!(apply_diff("", "+a\n+b\n", DiffMode::Create).unwrap(), "a\nb");
        assert_eq!(apply_diff("", "+a\n+b\n+\n", DiffMode::Create).unwrap(), "a\nb\n");
        assert_eq!(apply_diff("", "+a\nb\n", DiffMode::Create).unwrap_err(), "Invalid Add File Line: b");
        assert_eq!(apply_diff("", "+a\r\n+b\r\n+\r\n", DiffMode::Create).unwrap(), "a\r\nb\r\n");
        assert_eq!(apply_diff("", "+a\n*** End Patch\n+b\n", DiffMode::Create).unwrap(), "a");
    }

    #[test]
    fn context_deletes_and_inserts() {
        let input = "one\ntwo\nthree\nfour\n";
        assert_eq!(update(input, "@@\n one\n-two\n+2\n three\n").unwrap(), "one\n2\nthree\nfour\n");
        assert_eq!(update(input, "@@\n three\n+3.5\n four\n").unwrap(), "one\ntwo\nthree\n3.5\nfour\n");
        assert_eq!(update(input, "@@\n-one\n+1\n@@\n-four\n+4\n").unwrap(), "1\ntwo\nthree\n4\n");
        // Interleaved - and + lines form one chunk.
        assert_eq!(update(input, "@@\n-one\n+1\n-two\n+2\n three\n").unwrap(), "1\n2\nthree\nfour\n");
        // An empty diff line is a context line " ".
        assert_eq!(update("a\n\nb\n", "@@\n a\n\n-b\n+c\n").unwrap(), "a\n\nc\n");
    }

    #[test]
    fn context_matching_falls_back_to_rstrip_then_strip() {
        assert_eq!(update("a  \nb\n", "@@\n a\n-b\n+c\n").unwrap(), "a  \nc\n");
        assert_eq!(update("  a\nb\n", "@@\n a\n-b\n+c\n").unwrap(), "  a\nc\n");
        assert_eq!(update("a\nb\n", "@@\n zzz\n+c\n").unwrap_err(), "Invalid Context 0:\nzzz");
    }

    #[test]
    fn anchors_move_the_cursor_and_stack() {
        let input = "class A:\n  def f():\n    x\nclass B:\n  def f():\n    x\n";
        assert_eq!(
            update(input, "@@ class B:\n@@   def f():\n-    x\n+    y\n").unwrap(),
            "class A:\n  def f():\n    x\nclass B:\n  def f():\n    y\n"
        );
        assert_eq!(
            update(input, "@@ class A:\n-  def f():\n+  def g():\n").unwrap(),
            "class A:\n  def g():\n    x\nclass B:\n  def f():\n    x\n"
        );
        assert_eq!(
            update(input, "@@ class C:\n@@   def f():\n-    x\n+    y\n").unwrap_err(),
            "Invalid Anchor 0:\nclass C:"
        );
        // A single anchor that matches nothing is only advice.
        assert_eq!(update("a\nb\n", "@@ nowhere\n-b\n+c\n").unwrap(), "a\nc\n");
        // A unified-diff header is taken as an advisory anchor; the context then decides.
        assert_eq!(update("a\nb\n", "@@ -1,2 +1,2 @@\n-zzz\n+c\n").unwrap_err(), "Invalid Context 0:\nzzz");
    }

    #[test]
    fn a_partly_matching_stack_of_anchors_is_rejected() {
        let input = "class A:\n  def f():\n    x\n";
        assert_eq!(
            update(input, "@@ class A:\n@@   def g():\n-    x\n+    y\n").unwrap_err(),
            "Invalid Anchor 1:\n  def g():"
        );
    }

    #[test]
    fn a_hunk_without_marker_is_only_allowed_first() {
        assert_eq!(update("a\nb\nc\n", "@@\n-a\n+A\n-b\n+B\n c\n").unwrap(), "A\nB\nc\n");
        assert_eq!(update("a\nb\nc\n", "-a\n+A\n").unwrap(), "A\nb\nc\n");
        assert_eq!(update("a\nb\nc\n", "@@\n-a\n+A\n*** End of File\n-b\n+B\n").unwrap_err(), "Invalid Line:\n-b");
    }

    #[test]
    fn end_of_file_hunks_have_no_phantom_line() {
        assert_eq!(update("a\nb\nc\n", "@@\n+d\n*** End of File").unwrap(), "a\nb\nc\nd\n");
        assert_eq!(update("a\nb\nc\n", "@@\n c\n+d\n*** End of File\n").unwrap(), "a\nb\nc\nd\n");
        assert_eq!(
            update("x\ny\nx\n", "@@\n-x\n+z\n*** End of File\n").unwrap(),
            "x\ny\nz\n",
            "EOF search starts at the end"
        );
        assert_eq!(update("a\n", "@@\n-q\n+z\n*** End of File\n").unwrap_err(), "Invalid EOF Context 0:\nq");
    }

    #[test]
    fn crlf_files_keep_crlf() {
        assert_eq!(update("a\r\nb\r\n", "@@\n a\n-b\n+c\n").unwrap(), "a\r\nc\r\n");
        assert_eq!(update("", "@@\r\n+x\r\n").unwrap(), "x\r\n", "an empty file takes the diff's style");
        assert_eq!(update("a\nb\n", "@@\r\n a\r\n-b\r\n+c\r\n").unwrap(), "a\nc\n", "a file with LF keeps LF");
    }

    #[test]
    fn invalid_lines_are_named() {
        assert_eq!(update("a\n", "@@\n?a\n").unwrap_err(), "Invalid Line: ?a");
        assert_eq!(update("a\n", "@@\n***bogus\n").unwrap_err(), "Invalid Line: ***bogus");
        assert!(update("a\n", "@@\n@@\n").unwrap_err().starts_with("Nothing in this section"));
    }

    #[test]
    fn chunks_outside_the_file_are_refused() {
        // Two sections whose contexts overlap make overlapping chunks.
        let err = update("a\nb\n", "@@\n-a\n+x\n@@\n a\n-b\n+y\n");
        assert!(err.is_err());
    }

    #[test]
    fn the_envelope_parses_every_operation() {
        let ops = parse_patch_input(
            "*** Begin Patch\n*** Add File: memories/new.md\n+hello\n+\n*** Update File: memories/MEMORY.md\n*** Move to: memories/OLD.md\n@@\n+x\n*** End of File\n*** Delete File: memories/gone.md\n*** End Patch",
        )
        .unwrap();
        assert_eq!(ops.len(), 3);
        assert_eq!(
            (ops[0].kind, ops[0].path.as_str(), ops[0].diff.as_str()),
            (OperationKind::Create, "memories/new.md", "+hello\n+\n")
        );
        assert_eq!(ops[1].diff, "@@\n+x\n*** End of File\n");
        assert_eq!(ops[1].move_to.as_deref(), Some("memories/OLD.md"));
        assert_eq!((ops[2].kind, ops[2].diff.as_str()), (OperationKind::Delete, ""));
    }

    #[test]
    fn envelope_errors_have_the_sdk_messages() {
        let err = |s: &str| parse_patch_input(s).unwrap_err();
        assert_eq!(err("hello"), "apply_patch input must start with '*** Begin Patch'");
        assert_eq!(err("*** Begin Patch\n*** Add File: a\n+x"), "apply_patch input must end with '*** End Patch'");
        assert_eq!(err("*** Begin Patch\n*** End Patch"), "apply_patch input must include at least one file operation");
        assert_eq!(
            err("*** Begin Patch\nnonsense\n*** End Patch"),
            "Invalid apply_patch file operation header: nonsense"
        );
        assert_eq!(err("*** Begin Patch\n*** Add File: a\nx\n*** End Patch"), "Invalid Add File line: x");
        assert_eq!(
            err("*** Begin Patch\n*** Add File: a\n*** End Patch"),
            "Add File patch for a must include at least one + line"
        );
        assert_eq!(
            err("*** Begin Patch\n*** Delete File: a\n-x\n*** End Patch"),
            "Delete File patch for a must not include a diff"
        );
        assert_eq!(
            err("*** Begin Patch\n*** Update File: a\n*** End Patch"),
            "Update File patch for a must include a hunk"
        );
        assert_eq!(
            err("*** Begin Patch\n*** Update File:  \n@@\n*** End Patch"),
            "Missing path in apply_patch header: *** Update File:  "
        );
    }

    #[test]
    fn json_operations_take_every_shape() {
        let one =
            parse_patch_input(r#"  {"type":"update_file","path":"memories/MEMORY.md","diff":"@@\n+memory entry\n"}"#)
                .unwrap();
        assert_eq!(one[0].kind, OperationKind::Update);
        let many = parse_patch_input(
            r#"{"operations":[{"type":"create_file","path":"a","diff":"+x\n"},{"type":"delete_file","path":"b"}]}"#,
        )
        .unwrap();
        assert_eq!(many.len(), 2);
        let wrapped = parse_patch_input(r#"{"operation":{"type":"delete_file","path":"b"}}"#).unwrap();
        assert_eq!(wrapped[0].kind, OperationKind::Delete);
        let listed =
            parse_patch_input(r#"[{"type":"update_file","path":"a","diff":"@@\n+x\n","move_to":"b"}]"#).unwrap();
        assert_eq!(listed[0].move_to.as_deref(), Some("b"));
        let err = |s: &str| parse_patch_input(s).unwrap_err();
        assert_eq!(err(r#"{"nothing": 1}"#), "apply_patch JSON input must be an object or array");
        assert_eq!(err(r#"{"type":"rename_file","path":"a"}"#), "Invalid apply_patch operation type: rename_file");
        assert_eq!(err(r#"{"type":"delete_file","path":""}"#), "apply_patch operation is missing a path");
        assert_eq!(err(r#"{"type":"update_file","path":"a"}"#), "apply_patch operation update_file is missing a diff");
        assert_eq!(
            err(r#"{"type":"update_file","path":"a","diff":"@@\n","move_to":5}"#),
            "apply_patch operation move_to must be a string"
        );
    }

    #[test]
    fn the_parsers_never_panic() {
        let pieces = [
            "@@",
            "@@ a",
            "@@ ",
            "+",
            "-",
            " ",
            "+x",
            "-a",
            " a",
            "",
            "***",
            "*** End of File",
            "*** End Patch",
            "*** Begin Patch",
            "*** Add File: f",
            "*** Update File: f",
            "*** Delete File: f",
            "*** Move to: g",
            "a",
            "\r",
            "é",
            "{",
            "[",
            "\"",
        ];
        let files = ["", "a\n", "a\nb\n", "a\r\nb\r\n", "a", "\n\n", "é\na\n"];
        let mut rng = XorShift(0x2545_f491_4f6c_dd1d);
        for _ in 0..20_000 {
            let n = (rng.next() % 8) as usize;
            let text: Vec<&str> = (0..n).map(|_| pieces[(rng.next() % pieces.len() as u64) as usize]).collect();
            let sep = if rng.next().is_multiple_of(5) { "\r\n" } else { "\n" };
            let diff = text.join(sep);
            let file = files[(rng.next() % files.len() as u64) as usize];
            let _ = apply_diff(file, &diff, DiffMode::Update);
            let _ = apply_diff(file, &diff, DiffMode::Create);
            let _ = parse_patch_input(&diff);
        }
    }
}
