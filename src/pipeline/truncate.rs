//! Head-and-tail truncation to a token budget, byte-exact with the SDK's
//! `truncate_text(…, TruncationPolicy.tokens(n))` (R-TR-1..3): 4 bytes a
//! token, the marker counted inside the budget, no character ever split.

pub const APPROX_BYTES_PER_TOKEN: usize = 4;

/// `ceil(bytes / 4)`.
pub fn approx_token_count(text: &str) -> usize {
    text.len().div_ceil(APPROX_BYTES_PER_TOKEN)
}

fn marker(tokens: usize) -> String {
    format!("\u{2026}{tokens} tokens truncated\u{2026}")
}

/// The longest prefix of `s` of at most `max` bytes that ends on a character boundary.
fn floor_char_boundary(s: &str, max: usize) -> &str {
    let mut end = max.min(s.len());
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// `text` unchanged when it fits in `max_tokens`, else its start and end
/// around a `…N tokens truncated…` marker, all within `4 × max_tokens` bytes.
pub fn truncate_text(text: &str, max_tokens: usize) -> String {
    if text.is_empty() {
        return String::new();
    }
    let max_bytes = max_tokens * APPROX_BYTES_PER_TOKEN;
    if max_tokens > 0 && text.len() <= max_bytes {
        return text.to_owned();
    }
    if max_bytes == 0 {
        return String::new();
    }
    let first_marker = marker(approx_token_count(text));
    if first_marker.len() > max_bytes {
        return floor_char_boundary(&first_marker, max_bytes).to_owned();
    }
    let budget = max_bytes - first_marker.len();
    let left = budget / 2;
    let right = budget - left;
    let prefix = floor_char_boundary(text, left);
    let suffix_start = text.len() - right;
    // The suffix starts at the first character that starts at or after `len - right`.
    let mut start = suffix_start.max(prefix.len());
    while !text.is_char_boundary(start) {
        start += 1;
    }
    let suffix = &text[start..];
    let removed = text.len() - prefix.len() - suffix.len();
    format!("{prefix}{}{suffix}", marker(removed.div_ceil(APPROX_BYTES_PER_TOKEN)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_rng::XorShift;

    #[test]
    fn r_tr_2_examples() {
        let letters = "abcdefghijklmnopqrstuvwxyz".repeat(2);
        let out = truncate_text(&letters, 8);
        assert_eq!(out, "abc\u{2026}12 tokens truncated\u{2026}wxyz");
        assert_eq!(out.len(), 32);
        assert_eq!(truncate_text("abcdefghi", 1), "\u{2026}3");
        assert_eq!(truncate_text("", 5), "");
        assert_eq!(truncate_text("abc", 0), "");
        assert_eq!(truncate_text("abcd", 1), "abcd");
    }

    #[test]
    fn the_huge_jsonl_line_of_the_seed_test() {
        let content = format!("start{}middle{}end", "a".repeat(700_000), "z".repeat(700_000));
        let line = format!(
            "{{\"updated_at\":\"2026-04-15T00:00:00+00:00\",\"rollout_id\":\"r\",\"input\":[{{\"content\":\"{content}\",\"role\":\"user\"}}],\"generated_items\":[]}}\n"
        );
        // Pad to the seed's 1,400,152 bytes so the figures compare exactly.
        let pad = 1_400_152 - line.len();
        let line = format!("{}{}\n", &line[..line.len() - 1], " ".repeat(pad));
        assert_eq!(line.len(), 1_400_152);
        assert_eq!(marker(approx_token_count(&line)), "\u{2026}350038 tokens truncated\u{2026}");
        let out = truncate_text(&line, 150_000);
        assert_eq!(out.len(), 600_000);
        assert_eq!(out.chars().count(), 599_996);
        assert!(out.contains("\u{2026}200046 tokens truncated\u{2026}"));
        assert!(out.starts_with("{\"updated_at\""));
        assert!(out.ends_with('\n'));
        assert!(!out.contains("middle"));
    }

    #[test]
    fn multi_byte_text_is_never_split_and_stays_in_budget() {
        let alphabet = ['a', 'é', '€', '😀', '\n', 'z', 'ß', '中'];
        let mut rng = XorShift(0x9e37_79b9_7f4a_7c15);
        for _ in 0..3000 {
            let len = (rng.next() % 200) as usize;
            let text: String = (0..len).map(|_| alphabet[(rng.next() % alphabet.len() as u64) as usize]).collect();
            let tokens = (rng.next() % 60) as usize;
            let out = truncate_text(&text, tokens);
            assert!(out.len() <= tokens * 4 || (out == text && tokens > 0), "{text:?} {tokens}");
            if text.len() <= tokens * 4 && tokens > 0 {
                assert_eq!(out, text);
            } else if let Some(pos) = out.find('\u{2026}') {
                let after = out[pos + 3..].find('\u{2026}').map(|p| pos + 3 + p + 3);
                if let Some(end) = after {
                    assert!(text.starts_with(&out[..pos]), "prefix is the text's start");
                    assert!(text.ends_with(&out[end..]), "suffix is the text's end");
                }
            }
        }
    }
}
