//! What the console shows of hostile text: conversations and memory files
//! are written by users and models, so Markdown renders with raw HTML
//! escaped and only plain links kept, and conversations are escaped text.

use crate::domain::memory_status::MemoryStatus;
use maud::{Markup, PreEscaped, html};
use pulldown_cmark::{Event, Options, Parser, Tag, TagEnd, html as cmark_html};
use serde_json::Value;

/// A link target the console will follow: relative, `#fragment`, http(s)
/// or mailto. Anything else (`javascript:`, `data:`, `vbscript:`, …) is not,
/// nor a scheme-relative `//host` (another origin, with the page's scheme;
/// browsers read `\` as `/` there too).
fn safe_link(url: &str) -> bool {
    let trimmed: String = url.chars().filter(|c| !c.is_whitespace() && !c.is_control()).collect();
    let lower = trimmed.to_ascii_lowercase();
    if lower.replace('\\', "/").starts_with("//") {
        return false;
    }
    match lower.find(':') {
        // A colon before any `/`, `?` or `#` starts a scheme.
        Some(colon) if !lower[..colon].contains(['/', '?', '#']) => {
            ["http", "https", "mailto"].contains(&&lower[..colon])
        }
        _ => true,
    }
}

/// Markdown to HTML: raw HTML comes out as escaped text, links and images
/// with unsafe targets as their text alone, images as links (the console
/// loads nothing from elsewhere).
pub fn markdown(text: &str) -> Markup {
    let mut options = Options::empty();
    options.insert(Options::ENABLE_TABLES);
    options.insert(Options::ENABLE_STRIKETHROUGH);
    options.insert(Options::ENABLE_TASKLISTS);
    let mut dropped_links = Vec::new();
    let events = Parser::new_ext(text, options).filter_map(|event| match event {
        Event::Html(raw) | Event::InlineHtml(raw) => Some(Event::Text(raw)),
        Event::Start(Tag::Link { dest_url, title, link_type, id }) => {
            let keep = safe_link(&dest_url);
            dropped_links.push(!keep);
            keep.then_some(Event::Start(Tag::Link { dest_url, title, link_type, id }))
        }
        Event::End(TagEnd::Link) => (!dropped_links.pop().unwrap_or(false)).then_some(Event::End(TagEnd::Link)),
        Event::Start(Tag::Image { dest_url, title, link_type, id }) => {
            let keep = safe_link(&dest_url);
            dropped_links.push(!keep);
            keep.then_some(Event::Start(Tag::Link { dest_url, title, link_type, id }))
        }
        Event::End(TagEnd::Image) => (!dropped_links.pop().unwrap_or(false)).then_some(Event::End(TagEnd::Link)),
        other => Some(other),
    });
    let mut out = String::new();
    cmark_html::push_html(&mut out, events);
    PreEscaped(mark_redactions(&out))
}

/// Every `[REDACTED:<rule>]` in the text of rendered HTML set apart, so a
/// reader sees where a secret was taken out. The marker holds no character
/// HTML escapes, so it reads the same in escaped text; inside a tag (an
/// attribute: a link's title, a class) it is left as it is, where markup
/// would break the attribute. Both renderers escape `<` and `>` in text and
/// attributes alike, so a raw `<` always opens a tag and `>` closes it.
pub fn mark_redactions(html: &str) -> String {
    static MARKER: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
    let marker =
        MARKER.get_or_init(|| regex::Regex::new(r"\[REDACTED:[a-z0-9_]{1,40}\]").expect("the marker pattern compiles"));
    let mut out = String::with_capacity(html.len());
    let mut rest = html;
    while !rest.is_empty() {
        let text_end = rest.find('<').unwrap_or(rest.len());
        out.push_str(&marker.replace_all(&rest[..text_end], r#"<mark class="redacted">$0</mark>"#));
        let tag = &rest[text_end..];
        let tag_end = tag.find('>').map_or(tag.len(), |end| end + 1);
        out.push_str(&tag[..tag_end]);
        rest = &tag[tag_end..];
    }
    out
}

/// Redaction counts, by rule.
pub fn redactions(counts: &crate::domain::redact::Counts) -> Markup {
    html! {
        @if counts.is_empty() { span class="muted" { "none" } }
        @for (rule, n) in counts { span class="redacted" { (rule) " × " (n) } " " }
    }
}

/// The text of an item's `content`: a string, or the text parts of a list.
fn content_text(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str).or_else(|| p.get("refusal").and_then(Value::as_str)))
            .collect::<Vec<_>>()
            .join("\n"),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

fn json_text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => serde_json::to_string_pretty(other).unwrap_or_default(),
    }
}

/// One item of a conversation, readably: who said it and what.
fn item(item: &Value) -> Markup {
    let role = item.get("role").and_then(Value::as_str);
    let kind = item.get("type").and_then(Value::as_str).unwrap_or("message");
    match (role, kind) {
        (Some(role), _) => html! {
            div class={"turn " (role)} {
                div class="who" { (role) }
                pre class="said" { (content_text(item.get("content").unwrap_or(&Value::Null))) }
            }
        },
        (None, kind) if kind.ends_with("_call") => {
            let name = item.get("name").and_then(Value::as_str).unwrap_or(kind);
            let args = item.get("arguments").or_else(|| item.get("action")).or_else(|| item.get("input"));
            html! {
                div class="turn tool-call" {
                    div class="who" { "tool call · " code { (name) } }
                    @if let Some(args) = args { pre class="said" { (json_text(args)) } }
                }
            }
        }
        (None, kind) if kind.ends_with("_output") => html! {
            div class="turn tool-output" {
                div class="who" { "tool output" }
                pre class="said" { (json_text(item.get("output").unwrap_or(&Value::Null))) }
            }
        },
        (None, kind) => html! {
            div class="turn other" {
                div class="who" { (kind) }
                pre class="said" { (json_text(item)) }
            }
        },
    }
}

/// A rollout's JSONL, one block per segment: its input, what the run
/// generated, how it ended and its final output. Lines that are not JSON
/// show as such.
pub fn conversation(jsonl: &str) -> Markup {
    PreEscaped(mark_redactions(&conversation_html(jsonl).into_string()))
}

fn conversation_html(jsonl: &str) -> Markup {
    html! {
        @for (n, line) in jsonl.lines().filter(|l| !l.trim().is_empty()).enumerate() {
            section class="segment" {
                h4 { "Segment " (n) }
                @match crate::domain::pyjson::loads(line) {
                    Ok(segment) => {
                        @if let Some(at) = segment.get("updated_at").and_then(Value::as_str) {
                            p class="meta" { time datetime=(at) { (at) } }
                        }
                        @let input = match segment.get("input") {
                            Some(Value::String(s)) => vec![serde_json::json!({"role": "user", "content": s})],
                            Some(Value::Array(items)) => items.clone(),
                            _ => Vec::new(),
                        };
                        @for entry in &input { (item(entry)) }
                        @for entry in segment.get("generated_items").and_then(Value::as_array).into_iter().flatten() {
                            (item(entry))
                        }
                        @if let Some(meta) = segment.get("terminal_metadata") {
                            p class="meta" {
                                "ended: " strong { (meta.get("terminal_state").and_then(Value::as_str).unwrap_or("unknown")) }
                                @if let Some(error) = meta.get("exception_message").and_then(Value::as_str) {
                                    " · " (meta.get("exception_type").and_then(Value::as_str).unwrap_or("error")) ": " (error)
                                }
                            }
                        }
                        @if let Some(output) = segment.get("final_output") {
                            div class="turn final" { div class="who" { "final output" } pre class="said" { (json_text(output)) } }
                        }
                    }
                    Err(_) => { p class="meta" { "(not a JSON line)" } pre { (line) } }
                }
            }
        }
    }
}

/// A unified diff with each line classed by its kind, for colour.
pub fn diff(text: &str) -> Markup {
    html! {
        pre class="diff" {
            @for line in text.lines() {
                @let class = if line.starts_with("+++") || line.starts_with("---") { "head" }
                    else if line.starts_with("@@") { "hunk" }
                    else if line.starts_with('+') { "add" }
                    else if line.starts_with('-') { "del" }
                    else { "ctx" };
                span class=(class) { (line) } "\n"
            }
        }
    }
}

/// The chart's drawing area, in SVG user units.
const CHART_WIDTH: f64 = 600.0;
const CHART_HEIGHT: f64 = 120.0;

/// A bar chart of one figure per day, drawn as inline SVG by the server (no
/// script, no external file): one bar per day scaled to the largest, each
/// with a tooltip; a day without a figure draws no bar.
pub fn day_chart(label: &str, unit: &str, days: &[(String, Option<i64>)]) -> Markup {
    let largest = days.iter().filter_map(|(_, v)| *v).max().unwrap_or(0).max(1) as f64;
    let slot = CHART_WIDTH / days.len().max(1) as f64;
    let bar_width = (slot * 0.8).max(1.0);
    let total: i64 = days.iter().filter_map(|(_, v)| *v).sum();
    html! {
        figure class="chart" {
            figcaption { (label) }
            svg xmlns="http://www.w3.org/2000/svg" viewBox={"0 0 " (CHART_WIDTH) " " (CHART_HEIGHT + 16.0)}
                role="img" aria-label={(label) ", " (days.len()) " days"} {
                line x1="0" y1=(CHART_HEIGHT) x2=(CHART_WIDTH) y2=(CHART_HEIGHT) class="axis" {}
                @for (i, (date, value)) in days.iter().enumerate() {
                    @if let Some(value) = value {
                        @let height = (*value as f64 / largest * CHART_HEIGHT).max(if *value > 0 { 1.0 } else { 0.0 });
                        rect x=(format!("{:.1}", i as f64 * slot + (slot - bar_width) / 2.0))
                             y=(format!("{:.1}", CHART_HEIGHT - height))
                             width=(format!("{bar_width:.1}")) height=(format!("{height:.1}")) {
                            title { (date) ": " (value) " " (unit) }
                        }
                    }
                }
                @if let (Some((first, _)), Some((last, _))) = (days.first(), days.last()) {
                    text x="0" y=(CHART_HEIGHT + 13.0) class="tick" { (first) }
                    text x=(CHART_WIDTH) y=(CHART_HEIGHT + 13.0) class="tick end" { (last) }
                }
            }
            p class="meta" { "largest day " (largest as i64) " " (unit) " · " (total) " in all" }
        }
    }
}

/// A job's or run's token usage, in words.
pub fn usage(usage: &crate::llm::TokenUsage) -> Markup {
    let calls = usage.calls;
    html! {
        (usage.input_tokens) " input and " (usage.output_tokens) " output tokens in " (calls)
        @if calls == 1 { " model call" } @else { " model calls" }
    }
}

/// A session's `memory_status`: its outcome, and each failure with its job.
pub fn memory_status(status: &MemoryStatus) -> Markup {
    let outcome = status.status.as_str();
    html! {
        p { "Memory: " span class={"state " (outcome)} { (outcome) } }
        @if !status.failures.is_empty() {
            table {
                tr { th { "Failed job" } th { "Kind" } th { "Layout" } th { "Rollout" } th { "Error" } }
                @for f in &status.failures {
                    @let job = f.job_id.to_string();
                    tr {
                        td { a href={"/console/jobs/" (job)} { code { (job[..8]) } } }
                        td { (f.kind.as_str()) } td { (f.layout) } td { code { (f.rollout_id.as_deref().unwrap_or("")) } }
                        td class="error" { (f.error.as_deref().unwrap_or("")) }
                    }
                }
            }
        }
    }
}

/// A raw memory or rollout summary: its header lines (`key: value`, up to
/// the first blank line) as a table, the rest as Markdown.
pub fn headed_markdown(text: &str) -> Markup {
    let mut header = Vec::new();
    let mut lines = text.split_inclusive('\n');
    let mut body_start = 0;
    for line in lines.by_ref() {
        let trimmed = line.trim_end_matches(['\n', '\r']);
        match trimmed.split_once(": ") {
            Some((key, value)) if !key.is_empty() && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') => {
                header.push((key.to_owned(), value.to_owned()));
                body_start += line.len();
            }
            _ => {
                if trimmed.is_empty() && !header.is_empty() {
                    body_start += line.len();
                }
                break;
            }
        }
    }
    html! {
        @if !header.is_empty() {
            table class="header" {
                @for (key, value) in &header { tr { th { (key) } td { code { (value) } } } }
            }
        }
        div class="markdown" { (markdown(&text[body_start..])) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_raw_memory_shows_its_header_as_a_table_and_its_body_as_markdown() {
        let text = "rollout_id: chat-1\nupdated_at: 2026-12-01T08:00:00+00:00\nterminal_state: completed\n\n## Lessons\n\n- tea <script>x</script>\n";
        let html = headed_markdown(text).into_string();
        assert!(html.contains("<th>rollout_id</th><td><code>chat-1</code></td>"), "{html}");
        assert!(html.contains("<th>terminal_state</th>"), "{html}");
        assert!(html.contains("<h2>Lessons</h2>") && html.contains("<li>tea &lt;script&gt;"), "{html}");
        assert!(!html.contains("<p>rollout_id"), "{html}");
        let plain = headed_markdown("Just text\n").into_string();
        assert!(!plain.contains("<table") && plain.contains("<p>Just text</p>"), "{plain}");
    }

    #[test]
    fn redaction_markers_stand_out() {
        let html = markdown("The key is [REDACTED:openai_key], <b>not</b> [REDACTED:x y].").into_string();
        assert!(html.contains(r#"<mark class="redacted">[REDACTED:openai_key]</mark>"#), "{html}");
        assert!(html.contains("[REDACTED:x y]") && html.contains("&lt;b&gt;"), "{html}");
        let titled = markdown(r#"[docs](https://example.com "see [REDACTED:openai_key] here")"#).into_string();
        assert!(titled.contains(r#"title="see [REDACTED:openai_key] here""#), "the attribute holds: {titled}");
        let role = conversation(r#"{"input":[{"role":"[REDACTED:x]","content":"hi"}]}"#).into_string();
        assert!(role.contains(r#"class="turn [REDACTED:x]""#), "{role}");
        let line = r#"{"input":[{"role":"user","content":"token [REDACTED:github_token]"}]}"#;
        assert!(conversation(line).into_string().contains(r#"<mark class="redacted">[REDACTED:github_token]</mark>"#));
    }

    #[test]
    fn usage_and_status_are_words_not_json() {
        let used = usage(&crate::llm::TokenUsage { input_tokens: 120, output_tokens: 30, calls: 1 }).into_string();
        assert_eq!(used, "120 input and 30 output tokens in 1 model call");
        let status: MemoryStatus = serde_json::from_value(serde_json::json!({"status": "partial", "failures": [
            {"job_id": "0b8f6c1e-0000-4000-8000-000000000000", "kind": "phase_one", "layout": "default", "rollout_id": "r", "error": "boom"}
        ]}))
        .unwrap();
        let html = memory_status(&status).into_string();
        assert!(html.contains("partial") && html.contains("boom") && !html.contains("{&quot;"), "{html}");
    }

    const HOSTILE: &str = "<script>alert(1)</script>\n\n<img src=x onerror=alert(2)>\n\n\
        [click](javascript:alert(3)) [spaced]( JaVaScRiPt:alert(4)) [tab](java\tscript:alert(5)) \
        ![pic](data:text/html,alert(6)) <a href=\"javascript:alert(7)\">raw</a> [ok](https://example.com/x) [rel](../MEMORY.md)";

    #[test]
    fn markdown_escapes_raw_html_and_drops_unsafe_links() {
        let out = markdown(HOSTILE).into_string();
        assert!(!out.contains("<script"), "{out}");
        assert!(!out.contains("<img"), "{out}");
        // Every link that is a tag goes somewhere harmless; the raw <a> is text.
        let targets: Vec<&str> = out.split("<a href=\"").skip(1).map(|rest| rest.split('"').next().unwrap()).collect();
        assert_eq!(targets, ["https://example.com/x", "../MEMORY.md"], "{out}");
        assert!(out.contains("&lt;script&gt;alert(1)&lt;/script&gt;"), "{out}");
        assert!(out.contains("click") && out.contains("spaced") && out.contains("pic"), "the link text stays: {out}");
        assert!(out.contains("<a href=\"https://example.com/x\">ok</a>"), "{out}");
        assert!(out.contains("<a href=\"../MEMORY.md\">rel</a>"), "{out}");
    }

    #[test]
    fn markdown_renders_the_memory_formats() {
        let out = markdown("# Memory\n\n- **tea**, not coffee\n\n| a | b |\n|---|---|\n| 1 | 2 |\n").into_string();
        assert!(
            out.contains("<h1>Memory</h1>") && out.contains("<strong>tea</strong>") && out.contains("<table>"),
            "{out}"
        );
    }

    #[test]
    fn links_are_judged_by_their_scheme() {
        for ok in ["https://a.b", "http://a", "mailto:x@y", "/console", "MEMORY.md", "#top", "a/b:c", "?q=a:b"] {
            assert!(safe_link(ok), "{ok}");
        }
        for bad in [
            "javascript:x",
            "JAVASCRIPT:x",
            " javascript:x",
            "java\nscript:x",
            "data:x",
            "vbscript:x",
            "file:///etc",
            "//evil.example/x",
            " //evil.example",
            "\\\\evil.example",
            "/\\evil.example",
            "\\/evil.example",
        ] {
            assert!(!safe_link(bad), "{bad}");
        }
    }

    #[test]
    fn a_conversation_is_escaped_text() {
        let line = serde_json::json!({
            "updated_at": "2026-12-01T08:00:00+00:00", "rollout_id": "r",
            "input": [{"role": "user", "content": "<script>alert(1)</script> hi"}],
            "generated_items": [
                {"type": "function_call", "name": "get_weather", "arguments": "{\"city\":\"<b>Bern</b>\"}", "call_id": "c"},
                {"type": "function_call_output", "call_id": "c", "output": "<img src=x onerror=alert(2)>"},
                {"role": "assistant", "content": [{"type": "output_text", "text": "Sunny [x](javascript:alert(3))"}]}
            ],
            "terminal_metadata": {"terminal_state": "failed", "exception_type": "Boom", "exception_message": "<i>bad</i>", "has_final_output": false},
            "final_output": "done"
        });
        let out = conversation(&format!("{line}\nnot json <script>\n")).into_string();
        assert!(
            !out.contains("<script") && !out.contains("<img") && !out.contains("<b>") && !out.contains("<i>"),
            "{out}"
        );
        for want in [
            "get_weather",
            "&lt;script&gt;",
            "tool output",
            "Sunny",
            "failed",
            "Boom",
            "final output",
            "Segment 1",
            "not a JSON line",
        ] {
            assert!(out.contains(want), "{want} in {out}");
        }
    }

    #[test]
    fn diff_lines_are_classed_and_escaped() {
        let out = diff("--- a/x\n+++ b/x\n@@ -1 +1 @@\n-<old>\n+new\n same\n").into_string();
        assert!(out.contains("<span class=\"del\">-&lt;old&gt;</span>"), "{out}");
        assert!(out.contains("<span class=\"add\">+new</span>") && out.contains("<span class=\"hunk\">"), "{out}");
    }
    #[test]
    fn a_day_chart_draws_one_bar_per_known_day_scaled_to_the_largest() {
        let days = vec![
            ("2026-11-30".to_owned(), Some(5)),
            ("2026-12-01".to_owned(), Some(10)),
            ("2026-12-02".to_owned(), None),
            ("2026-12-03".to_owned(), Some(0)),
        ];
        let svg = day_chart("Segments", "segments", &days).into_string();
        assert_eq!(svg.matches("<rect").count(), 3, "no bar for the unknown day: {svg}");
        assert!(svg.contains(r#"y="0.0" width="120.0" height="120.0""#), "the largest fills the height: {svg}");
        assert!(svg.contains(r#"height="60.0""#), "half of it is half as high: {svg}");
        assert!(svg.contains("<title>2026-12-01: 10 segments</title>"));
        assert!(svg.contains("largest day 10 segments · 15 in all"));
        assert!(!svg.contains("<script"));
        let empty = day_chart("Tokens", "tokens", &[]).into_string();
        assert!(!empty.contains("<rect") && !empty.contains("NaN"), "{empty}");
    }
}
