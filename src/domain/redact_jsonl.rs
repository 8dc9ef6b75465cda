//! Redaction of JSON text as a model reads it (SPEC §4): a rollout's lines,
//! whole or cut by truncation. A string value that holds an escape is
//! matched decoded — `…\npassword = …` is a newline, then a password, not
//! the word `npassword` — and written back escaped; the text between such
//! strings is matched as it stands, which also finds a secret that the
//! JSON's own structure spells (`"api_key": "…"`). One pass over the bytes,
//! no tree of the document.

use super::pyjson::write_string_content;
use super::redact::{Counts, Redactor};

impl Redactor {
    /// `text` — JSON lines — with every secret replaced; the counts by rule.
    /// A string holding an escape is matched decoded (and written back
    /// escaped); everything between such strings is matched as it stands.
    pub fn redact_jsonl(&self, text: &str, counts: &mut Counts) -> String {
        if self.is_off() {
            return text.to_owned();
        }
        let bytes = text.as_bytes();
        let mut out = String::with_capacity(text.len());
        let (mut plain_from, mut at) = (0, 0);
        while let Some(quote) = memchr::memchr(b'"', &bytes[at..]) {
            let start = at + quote + 1;
            let (end, escaped) = string_end(bytes, start);
            // Past the closing quote, or past the newline that ends a string cut short.
            at = (end + 1).min(bytes.len());
            let Some(decoded) = escaped.then(|| decode_string(&text[start..end])).flatten() else { continue };
            out.push_str(&self.redact_text(&text[plain_from..start], counts));
            let redacted = self.redact_text(&decoded, counts);
            if redacted == decoded {
                out.push_str(&text[start..end]);
            } else {
                write_string_content(&mut out, &redacted);
            }
            plain_from = end;
        }
        out.push_str(&self.redact_text(&text[plain_from..], counts));
        out
    }
}

/// Where a string starting at `start` ends (its closing quote, a newline —
/// no JSON line holds one inside a string, so a string cut by truncation
/// ends there — or the text's end), and whether it holds an escape.
fn string_end(bytes: &[u8], start: usize) -> (usize, bool) {
    let mut at = start;
    let mut escaped = false;
    while let Some(found) = memchr::memchr3(b'"', b'\\', b'\n', &bytes[at..]) {
        let i = at + found;
        if bytes[i] != b'\\' {
            return (i, escaped);
        }
        escaped = true;
        at = i + 2;
        if at >= bytes.len() {
            return (bytes.len(), true);
        }
    }
    (bytes.len(), escaped)
}

/// The text of a JSON string's content; `None` when an escape is malformed
/// or cut short. A lone surrogate becomes U+FFFD.
fn decode_string(content: &str) -> Option<String> {
    let mut out = String::with_capacity(content.len());
    let mut chars = content.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        let decoded = match chars.next()? {
            '"' => '"',
            '\\' => '\\',
            '/' => '/',
            'b' => '\u{8}',
            'f' => '\u{c}',
            'n' => '\n',
            'r' => '\r',
            't' => '\t',
            'u' => unicode_escape(&mut chars)?,
            _ => return None,
        };
        out.push(decoded);
    }
    Some(out)
}

fn hex4(chars: &mut std::str::Chars<'_>) -> Option<u32> {
    let digits: String = chars.by_ref().take(4).collect();
    (digits.len() == 4).then(|| u32::from_str_radix(&digits, 16).ok()).flatten()
}

/// The character of a `\uXXXX` escape (the `\u` already read), a surrogate
/// pair's second half taken along.
fn unicode_escape(chars: &mut std::str::Chars<'_>) -> Option<char> {
    let unit = hex4(chars)?;
    if !(0xD800..0xDC00).contains(&unit) {
        return Some(char::from_u32(unit).unwrap_or('\u{fffd}'));
    }
    let mut ahead = chars.clone();
    if ahead.next() == Some('\\')
        && ahead.next() == Some('u')
        && let Some(low) = hex4(&mut ahead)
        && (0xDC00..0xE000).contains(&low)
    {
        *chars = ahead;
        return char::from_u32(0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00));
    }
    Some('\u{fffd}')
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::redact::RedactionConfig;
    use serde_json::{Value, json};

    fn redactor() -> Redactor {
        Redactor::new(&RedactionConfig::default()).unwrap()
    }

    fn line(content: &str) -> String {
        crate::domain::pyjson::dumps(
            &json!({"content": content, "role": "user"}),
            crate::domain::pyjson::PyJsonStyle::COMPACT,
        )
    }

    #[test]
    fn escapes_no_longer_glue_or_hide_secrets() {
        let r = redactor();
        for (content, secret) in [
            ("DB_HOST=db\npassword = hunter2-but-longer-9x", "hunter2-but-longer-9x"),
            (
                "see\nsk-proj-Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4zAb7cDe0f",
                "sk-proj-Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4zAb7cDe0f",
            ),
            ("tab\tghp_0123456789abcdefghijABCDEFGHIJ012345", "ghp_0123456789abcdefghijABCDEFGHIJ012345"),
            ("quoted \"AKIAIOSFODNN7EXAMPLE\" here", "AKIAIOSFODNN7EXAMPLE"),
            ("caf\u{e9}\npassword: s3cr3t-value-x", "s3cr3t-value-x"),
            ("{\"api_key\": \"abcd1234efgh5678\"}", "abcd1234efgh5678"),
        ] {
            let raw = line(content);
            let mut counts = Counts::new();
            assert_eq!(
                r.redact_text(&raw, &mut Counts::new()).contains(secret),
                content.contains('\n') || content.contains('\t') || content.contains("api_key"),
                "{content:?} hides from the plain pass"
            );
            let out = r.redact_jsonl(&raw, &mut counts);
            assert!(!out.contains(secret), "{content:?} → {out}");
            let back: Value = serde_json::from_str(&out).unwrap();
            assert_eq!(back["role"], "user", "the line stays JSON: {out}");
            assert!(!counts.is_empty());
        }
    }

    #[test]
    fn a_line_cut_by_truncation_is_still_read() {
        let r = redactor();
        let whole = line("x\npassword = hunter2-but-longer-9x");
        let cut = format!("{}\n…1234 tokens truncated…\n{}", &whole[..10], &whole[10..]);
        let out = r.redact_jsonl(&cut, &mut Counts::new());
        assert!(!out.contains("hunter2-but-longer-9x"), "{out}");
        for malformed in ["\"abc\\", "\"abc\\u12", "\"\\q password=abcdefghij\""] {
            r.redact_jsonl(malformed, &mut Counts::new());
        }
    }

    #[test]
    fn strings_decode_as_json_does() {
        assert_eq!(decode_string(r#"a\"b\\c\/d\n\t\u00e9\ud83d\ude00"#).unwrap(), "a\"b\\c/d\n\té😀");
        assert_eq!(decode_string(r"\ud800x").unwrap(), "\u{fffd}x");
        assert_eq!(decode_string(r"\u12"), None);
        assert_eq!(decode_string(r"\x"), None);
    }

    /// Property: for random text with secrets at random places, the redacted
    /// JSON line decodes to the redacted decoded text.
    #[test]
    fn a_redacted_line_decodes_to_the_redacted_text() {
        use crate::test_rng::XorShift;
        let r = redactor();
        let secrets = [
            "sk-proj-Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4zAb7cDe0f",
            "ghp_0123456789abcdefghijABCDEFGHIJ012345",
            "AKIAIOSFODNN7EXAMPLE",
            "password = hunter2-but-longer",
            "xoxb-1234567890-0987654321-AbCdEfGhIjKl",
            "Bearer abcdef0123456789ABCDEF",
        ];
        let pieces = ["\n", "\t", "\"", "\\", "é", " ", "words", "=", ":", "😀", "/", "\u{1}"];
        let mut rng = XorShift(0x0dd_5eed_2026);
        for _ in 0..2000 {
            let mut text = String::new();
            for _ in 0..rng.next() % 10 {
                if rng.next().is_multiple_of(3) {
                    text.push_str(secrets[(rng.next() % secrets.len() as u64) as usize]);
                } else {
                    text.push_str(pieces[(rng.next() % pieces.len() as u64) as usize]);
                }
            }
            let redacted_line = r.redact_jsonl(&line(&text), &mut Counts::new());
            let back: Value = serde_json::from_str(&redacted_line).unwrap_or_else(|e| panic!("{e}: {redacted_line}"));
            assert_eq!(back["content"], r.redact_text(&text, &mut Counts::new()), "{text:?}");
        }
    }
}
