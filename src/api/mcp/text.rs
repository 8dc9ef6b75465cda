//! The tools' answers as text a model reads well: listings one entry a
//! line, reads numbered, searches as `path:line: text`.

use serde_json::Value;

fn more(value: &Value, what: &str) -> String {
    match value["next_cursor"].as_str() {
        Some(cursor) => format!("\n… more {what}: pass cursor {cursor}"),
        None => String::new(),
    }
}

/// `memory_list`: one entry a line, folders with a slash.
pub(super) fn listing(listed: &Value) -> String {
    let entries = listed["entries"].as_array().map(Vec::as_slice).unwrap_or_default();
    if entries.is_empty() {
        return "The memory folder holds nothing here.".into();
    }
    let lines: Vec<String> = entries
        .iter()
        .map(|e| {
            let path = e["path"].as_str().unwrap_or_default();
            match e["bytes"].as_u64() {
                Some(bytes) => format!("{path} ({bytes} bytes)"),
                None => format!("{path}/"),
            }
        })
        .collect();
    format!("{}{}", lines.join("\n"), more(listed, "entries"))
}

/// `memory_read`: numbered lines, then where to read on.
pub(super) fn slice(read: &Value) -> String {
    let text = read["text"].as_str().unwrap_or_default();
    let path = read["path"].as_str().unwrap_or_default();
    let first = read["offset"].as_u64().unwrap_or(1);
    let total = read["total_lines"].as_u64().unwrap_or(0);
    if total == 0 {
        return format!("{path} is empty.");
    }
    let mut out: String =
        text.lines().enumerate().map(|(i, line)| format!("{:>6}\t{line}\n", first + i as u64)).collect();
    let next = first + read["lines"].as_u64().unwrap_or(0);
    if next <= total {
        out.push_str(&format!("… {} more lines; read on with offset {next}\n", total + 1 - next));
    }
    out
}

/// `memory_search`: `path:line: text`, context lines as `path-line- text`.
pub(super) fn matches(found: &Value) -> String {
    let matches = found["matches"].as_array().map(Vec::as_slice).unwrap_or_default();
    if matches.is_empty() {
        return "No line of the memory folder matches.".into();
    }
    let mut lines = Vec::new();
    for m in matches {
        let path = m["path"].as_str().unwrap_or_default();
        let line = m["line"].as_u64().unwrap_or(0);
        let context = |key: &str| m[key].as_array().cloned().unwrap_or_default();
        let before = context("before");
        for (i, text) in before.iter().enumerate() {
            lines.push(format!("{path}-{}- {}", line - (before.len() - i) as u64, text.as_str().unwrap_or_default()));
        }
        lines.push(format!("{path}:{line}: {}", m["text"].as_str().unwrap_or_default()));
        for (i, text) in context("after").iter().enumerate() {
            lines.push(format!("{path}-{}- {}", line + 1 + i as u64, text.as_str().unwrap_or_default()));
        }
    }
    format!("{}{}", lines.join("\n"), more(found, "matches"))
}

/// `memory_edit`: what the published edit changed.
pub(super) fn published(edit: &Value) -> String {
    let changes: Vec<String> = edit["changes"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .map(|c| format!("{} {}", c["change"].as_str().unwrap_or_default(), c["path"].as_str().unwrap_or_default()))
        .collect();
    if changes.is_empty() {
        return "The edit is published; it changed nothing (the files already read so).".into();
    }
    format!("The edit is published: {}.", changes.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn searches_read_like_grep() {
        let found = json!({"matches": [{"path": "MEMORY.md", "line": 4, "text": "pin the runner", "before": ["# CI"], "after": ["- done"]}], "next_cursor": "abc"});
        assert_eq!(
            matches(&found),
            "MEMORY.md-3- # CI\nMEMORY.md:4: pin the runner\nMEMORY.md-5- - done\n… more matches: pass cursor abc"
        );
        assert_eq!(matches(&json!({"matches": []})), "No line of the memory folder matches.");
    }

    #[test]
    fn reads_are_numbered_and_say_where_to_go_on() {
        let read = json!({"path": "MEMORY.md", "text": "b\nc\n", "offset": 2, "lines": 2, "total_lines": 5});
        assert_eq!(slice(&read), "     2\tb\n     3\tc\n… 2 more lines; read on with offset 4\n");
        let whole = json!({"path": "MEMORY.md", "text": "a\n", "offset": 1, "lines": 1, "total_lines": 1});
        assert_eq!(slice(&whole), "     1\ta\n");
    }

    #[test]
    fn listings_mark_folders() {
        let listed = json!({"entries": [{"path": "MEMORY.md", "bytes": 12}, {"path": "skills", "bytes": null}], "next_cursor": null});
        assert_eq!(listing(&listed), "MEMORY.md (12 bytes)\nskills/");
    }
}
