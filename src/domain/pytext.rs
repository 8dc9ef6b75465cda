//! Python string semantics that the shared file formats depend on.

/// `str.isspace()` in Python: Unicode White_Space plus the four information
/// separators U+001C..U+001F, which Rust's `char::is_whitespace` leaves out.
pub fn is_py_space(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

/// Python's `str.strip()` with no arguments.
pub fn py_strip(s: &str) -> &str {
    s.trim_matches(is_py_space)
}

/// Python's `str.rstrip()` with no arguments.
pub fn py_rstrip(s: &str) -> &str {
    s.trim_end_matches(is_py_space)
}

/// Python's `str.splitlines()`: splits on `\n`, `\r`, `\r\n` and the other
/// line boundaries Python knows; the separators are dropped.
pub fn py_splitlines(s: &str) -> Vec<&str> {
    let mut lines = Vec::new();
    let mut start = 0;
    let mut chars = s.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        let is_break = matches!(
            c,
            '\n' | '\r' | '\u{b}' | '\u{c}' | '\u{1c}' | '\u{1d}' | '\u{1e}' | '\u{85}' | '\u{2028}' | '\u{2029}'
        );
        if is_break {
            lines.push(&s[start..i]);
            let mut end = i + c.len_utf8();
            if c == '\r' && chars.peek().is_some_and(|(_, next)| *next == '\n') {
                chars.next();
                end += 1;
            }
            start = end;
        }
    }
    if start < s.len() {
        lines.push(&s[start..]);
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strip_removes_python_whitespace_including_separators() {
        assert_eq!(py_strip("\u{1c}\u{1f} a b\u{85}\u{3000}"), "a b");
        assert_eq!(py_strip("   "), "");
        assert_eq!(py_rstrip("x \n\u{1e}"), "x");
        assert_eq!(py_rstrip(" x"), " x");
    }

    #[test]
    fn splitlines_matches_python() {
        assert_eq!(py_splitlines("a\nb\r\nc\rd\u{2028}e\u{85}f"), ["a", "b", "c", "d", "e", "f"]);
        assert_eq!(py_splitlines("a\n\nb\n"), ["a", "", "b"]);
        assert_eq!(py_splitlines(""), Vec::<&str>::new());
        assert_eq!(py_splitlines("\n"), [""]);
        assert_eq!(py_splitlines("x\u{1c}y\u{b}z"), ["x", "y", "z"]);
    }
}
