//! JSON text exactly as Python's `json.dumps` writes it with its defaults
//! (`ensure_ascii=True`, no key sorting unless asked), because rollout lines,
//! `phase_two_selection.json` and prompt fragments must be byte-compatible
//! with the SDK.

use serde_json::Value;
use std::fmt::Write;

/// How to lay out the text; the presets match the `json.dumps` calls of the SDK.
#[derive(Debug, Clone, Copy)]
pub struct PyJsonStyle {
    pub indent: Option<usize>,
    pub key_separator: &'static str,
    pub sort_keys: bool,
}

impl PyJsonStyle {
    /// `json.dumps(v, separators=(",", ":"))`: rollout lines (R-SEG-7).
    pub const COMPACT: Self = Self { indent: None, key_separator: ":", sort_keys: false };
    /// `json.dumps(v, indent=2)`: `phase_two_selection.json` (R-P2-8).
    pub const INDENT2: Self = Self { indent: Some(2), key_separator: ": ", sort_keys: false };
    /// `json.dumps(v, sort_keys=True, separators=(",", ":"), indent=2)`: R-P1-3.
    pub const SORTED_INDENT2_TIGHT: Self = Self { indent: Some(2), key_separator: ":", sort_keys: true };
}

pub fn dumps(value: &Value, style: PyJsonStyle) -> String {
    let mut out = String::new();
    write_value(&mut out, value, style, 0);
    out
}

fn newline_and_indent(out: &mut String, style: PyJsonStyle, depth: usize) {
    if let Some(width) = style.indent {
        out.push('\n');
        out.extend(std::iter::repeat_n(' ', width * depth));
    }
}

fn write_value(out: &mut String, value: &Value, style: PyJsonStyle, depth: usize) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(true) => out.push_str("true"),
        Value::Bool(false) => out.push_str("false"),
        Value::Number(n) => write_number(out, n),
        Value::String(s) => write_string(out, s),
        Value::Array(items) => {
            if items.is_empty() {
                out.push_str("[]");
                return;
            }
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                newline_and_indent(out, style, depth + 1);
                write_value(out, item, style, depth + 1);
            }
            newline_and_indent(out, style, depth);
            out.push(']');
        }
        Value::Object(map) => {
            if map.is_empty() {
                out.push_str("{}");
                return;
            }
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            if style.sort_keys {
                entries.sort_by(|a, b| a.0.cmp(b.0));
            }
            out.push('{');
            for (i, (key, item)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                newline_and_indent(out, style, depth + 1);
                write_string(out, key);
                out.push_str(style.key_separator);
                write_value(out, item, style, depth + 1);
            }
            newline_and_indent(out, style, depth);
            out.push('}');
        }
    }
}

/// Numbers keep the text they arrived as (`arbitrary_precision`), so an
/// integer is written digit for digit, whatever its size, as Python's `int`
/// would be; any other number is the double Python's `float` would hold.
fn write_number(out: &mut String, n: &serde_json::Number) {
    let text = n.to_string();
    let digits = text.strip_prefix('-').unwrap_or(&text);
    if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
        // JSON has no leading zeros, so only `-0` differs from Python's text.
        out.push_str(if digits.bytes().all(|b| b == b'0') { "0" } else { &text });
    } else {
        out.push_str(&py_float_repr(text.parse::<f64>().unwrap_or(f64::NAN)));
    }
}

/// `ensure_ascii` escaping: everything outside printable ASCII becomes
/// `\uXXXX` (lower-case hex, surrogate pairs above the BMP).
fn write_string(out: &mut String, s: &str) {
    out.push('"');
    write_string_content(out, s);
    out.push('"');
}

/// A string's escaped content, without its quotes, as [`write_string`] writes it.
/// Runs of printable ASCII are copied whole: they are most of a segment.
pub fn write_string_content(out: &mut String, s: &str) {
    let mut rest = s;
    while !rest.is_empty() {
        let plain = plain_prefix(rest.as_bytes());
        out.push_str(&rest[..plain]);
        rest = &rest[plain..];
        let Some(c) = rest.chars().next() else { break };
        write_escaped_char(out, c);
        rest = &rest[c.len_utf8()..];
    }
}

/// A byte written as it is: printable ASCII but the quote and the backslash.
fn is_plain(b: u8) -> bool {
    (b' '..=b'~').contains(&b) && b != b'"' && b != b'\\'
}

/// How many leading bytes are plain. Whole 16-byte blocks are tested without
/// an early exit, which the compiler turns into a few vector compares: a
/// segment is mostly long plain runs, and a byte at a time was 3 % of ingest.
fn plain_prefix(bytes: &[u8]) -> usize {
    const BLOCK: usize = 16;
    let mut blocks = bytes.chunks_exact(BLOCK);
    let mut start = 0;
    for block in blocks.by_ref() {
        if !block.iter().fold(true, |all, &b| all & is_plain(b)) {
            break;
        }
        start += BLOCK;
    }
    start + bytes[start..].iter().position(|&b| !is_plain(b)).unwrap_or(bytes.len() - start)
}

fn write_escaped_char(out: &mut String, c: char) {
    match c {
        '"' => out.push_str("\\\""),
        '\\' => out.push_str("\\\\"),
        '\n' => out.push_str("\\n"),
        '\r' => out.push_str("\\r"),
        '\t' => out.push_str("\\t"),
        '\u{8}' => out.push_str("\\b"),
        '\u{c}' => out.push_str("\\f"),
        _ => {
            let mut units = [0u16; 2];
            for unit in c.encode_utf16(&mut units) {
                write!(out, "\\u{unit:04x}").expect("writing to a String cannot fail");
            }
        }
    }
}

/// A JSON line as Python's `json.loads` reads it: besides JSON, the bare
/// tokens `NaN`, `Infinity` and `-Infinity` that `json.dumps` writes for
/// non-finite floats (R-SEG-7). They have no place in a `Value`, so they are
/// read as `null`; everything else is read exactly as JSON.
pub fn loads(text: &str) -> Result<Value, serde_json::Error> {
    match serde_json::from_str(text) {
        Ok(value) => Ok(value),
        Err(strict) => match with_non_finite_as_null(text) {
            Some(relaxed) => serde_json::from_str(&relaxed).map_err(|_| strict),
            None => Err(strict),
        },
    }
}

/// `text` with every `NaN`, `Infinity` and `-Infinity` outside strings
/// replaced by `null`; `None` when it holds none.
fn with_non_finite_as_null(text: &str) -> Option<String> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    let mut in_string = false;
    let mut replaced = false;
    while let Some(c) = rest.chars().next() {
        if in_string {
            match c {
                '\\' => {
                    let escaped: String = rest.chars().take(2).collect();
                    out.push_str(&escaped);
                    rest = &rest[escaped.len()..];
                    continue;
                }
                '"' => in_string = false,
                _ => {}
            }
        } else if c == '"' {
            in_string = true;
        } else if let Some(token) = ["-Infinity", "Infinity", "NaN"].into_iter().find(|t| rest.starts_with(t)) {
            out.push_str("null");
            rest = &rest[token.len()..];
            replaced = true;
            continue;
        }
        out.push(c);
        rest = &rest[c.len_utf8()..];
    }
    replaced.then_some(out)
}

/// Python's `repr(float)`: the shortest round-trip digits, in positional form
/// for decimal exponents -4..16 and in `d.ddde±XX` form otherwise.
pub fn py_float_repr(f: f64) -> String {
    if f.is_nan() {
        return "NaN".into();
    }
    if f.is_infinite() {
        return if f > 0.0 { "Infinity".into() } else { "-Infinity".into() };
    }
    let sci = format!("{f:e}");
    let (mantissa, exp) = sci.split_once('e').expect("`{:e}` always has an exponent");
    let exp: i32 = exp.parse().expect("`{:e}` exponent is an integer");
    let (sign, mantissa) = match mantissa.strip_prefix('-') {
        Some(rest) => ("-", rest),
        None => ("", mantissa),
    };
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    if !(-4..16).contains(&exp) {
        let (first, rest) = digits.split_at(1);
        let frac = if rest.is_empty() { String::new() } else { format!(".{rest}") };
        let exp_sign = if exp < 0 { '-' } else { '+' };
        return format!("{sign}{first}{frac}e{exp_sign}{:02}", exp.abs());
    }
    if exp < 0 {
        let zeros = "0".repeat((-exp - 1) as usize);
        return format!("{sign}0.{zeros}{digits}");
    }
    let int_len = exp as usize + 1;
    if digits.len() <= int_len {
        let zeros = "0".repeat(int_len - digits.len());
        format!("{sign}{digits}{zeros}.0")
    } else {
        let (int_part, frac) = digits.split_at(int_len);
        format!("{sign}{int_part}.{frac}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Python's `json.dumps` (`ensure_ascii`), one character at a time.
    fn escaped_char_by_char(s: &str) -> String {
        let mut out = String::new();
        for c in s.chars() {
            if (' '..='~').contains(&c) && c != '"' && c != '\\' {
                out.push(c);
            } else {
                write_escaped_char(&mut out, c);
            }
        }
        out
    }

    #[test]
    fn string_content_is_escaped_as_python_escapes_it() {
        let mut out = String::new();
        write_string_content(&mut out, "a\u{e9}\u{1F600}\"\\\n\u{7f}\u{0}z");
        assert_eq!(out, r#"a\u00e9\ud83d\ude00\"\\\n\u007f\u0000z"#);
        let alphabet: Vec<char> =
            "ab ~\"\\\n\r\t\u{8}\u{c}\u{0}\u{1f}\u{7f}\u{80}\u{e9}\u{2028}\u{ffff}\u{10000}\u{1F600}".chars().collect();
        let mut rng = fastrand::Rng::with_seed(43);
        for round in 0..4000 {
            // Half the texts are long plain runs with a rare special, which
            // crosses the 16-byte blocks at every offset.
            let pick = |rng: &mut fastrand::Rng| match round % 2 == 0 && rng.usize(..40) != 0 {
                true => alphabet[rng.usize(..4)],
                false => alphabet[rng.usize(..alphabet.len())],
            };
            let text: String = (0..rng.usize(0..80)).map(|_| pick(&mut rng)).collect();
            let mut out = String::new();
            write_string_content(&mut out, &text);
            assert_eq!(out, escaped_char_by_char(&text), "{text:?}");
            assert_eq!(serde_json::from_str::<String>(&format!("\"{out}\"")).unwrap(), text);
        }
    }

    #[test]
    fn loads_reads_what_json_dumps_writes_for_non_finite_floats() {
        let line = r#"{"a":Infinity,"b":[-Infinity,NaN,1.5],"s":"NaN \" Infinity","c":{"d":NaN}}"#;
        let v = loads(line).unwrap();
        assert_eq!(v["a"], Value::Null);
        assert_eq!(v["b"], serde_json::json!([null, null, 1.5]));
        assert_eq!(v["s"], "NaN \" Infinity", "strings are left alone");
        assert_eq!(v["c"]["d"], Value::Null);
        assert_eq!(loads(r#"{"x":"Infinity"}"#).unwrap()["x"], "Infinity");
        assert!(loads("{\"a\": Infinit}").is_err());
        assert!(loads("{not json").is_err());
    }
    use serde_json::json;

    #[test]
    fn compact_matches_python_with_ensure_ascii() {
        let v: Value = serde_json::from_str(
            r#"{"b":1,"a":[{"content":"héllo 😀 \u0001 \u007f / \"q\"","role":"user"}],"e":{},"l":[]}"#,
        )
        .unwrap();
        assert_eq!(
            dumps(&v, PyJsonStyle::COMPACT),
            r#"{"b":1,"a":[{"content":"h\u00e9llo \ud83d\ude00 \u0001 \u007f / \"q\"","role":"user"}],"e":{},"l":[]}"#
        );
    }

    #[test]
    fn indent2_matches_python_layout() {
        let v = json!({"version": 1, "selected": [{"a": "x"}], "empty": []});
        assert_eq!(
            dumps(&v, PyJsonStyle::INDENT2),
            "{\n  \"version\": 1,\n  \"selected\": [\n    {\n      \"a\": \"x\"\n    }\n  ],\n  \"empty\": []\n}"
        );
    }

    #[test]
    fn sorted_tight_indent_matches_r_p1_3() {
        let v = json!({"terminal_state": "completed", "exception_type": null,
                       "has_final_output": true, "exception_message": null});
        assert_eq!(
            dumps(&v, PyJsonStyle::SORTED_INDENT2_TIGHT),
            "{\n  \"exception_message\":null,\n  \"exception_type\":null,\n  \"has_final_output\":true,\n  \"terminal_state\":\"completed\"\n}"
        );
    }

    #[test]
    fn numbers_print_as_python_reads_and_writes_them() {
        let v: Value = serde_json::from_str(
            r#"[123456789012345678901234567890, -98765432109876543210, 0, -0, 1e5, 1E400, -1e400, 2.50, 1.0, 0.1e1, 9007199254740993]"#,
        )
        .unwrap();
        assert_eq!(
            dumps(&v, PyJsonStyle::COMPACT),
            "[123456789012345678901234567890,-98765432109876543210,0,0,100000.0,Infinity,-Infinity,2.5,1.0,1.0,9007199254740993]"
        );
    }

    #[test]
    fn floats_print_like_python_repr() {
        for (f, expected) in [
            (1.0, "1.0"),
            (0.5, "0.5"),
            (1e-5, "1e-05"),
            (1.5e-5, "1.5e-05"),
            (0.0001, "0.0001"),
            (1e16, "1e+16"),
            (1.2345678901234568e17, "1.2345678901234568e+17"),
            (123456789.125, "123456789.125"),
            (1e15, "1000000000000000.0"),
            (-0.0, "-0.0"),
            (-2.5, "-2.5"),
            (0.1, "0.1"),
        ] {
            assert_eq!(py_float_repr(f), expected, "{f}");
        }
    }
}
