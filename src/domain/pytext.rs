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
}
