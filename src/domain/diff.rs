//! Unified diffs of memory files, for a run's changes (SPEC §2.6).

use similar::TextDiff;

/// Files larger than this get no diff (their sizes are shown instead).
pub const MAX_DIFF_BYTES: usize = 1 << 20;

/// How a run changed a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, schemars::JsonSchema)]
#[schemars(inline)]
#[serde(rename_all = "lowercase")]
pub enum Change {
    Added,
    Modified,
    Deleted,
}

impl Change {
    /// From a file's contents before and after (`None`: absent).
    pub fn of(before: Option<&[u8]>, after: Option<&[u8]>) -> Option<Self> {
        match (before, after) {
            (None, Some(_)) => Some(Self::Added),
            (Some(_), None) => Some(Self::Deleted),
            (Some(b), Some(a)) if a != b => Some(Self::Modified),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Added => "added",
            Self::Modified => "modified",
            Self::Deleted => "deleted",
        }
    }
}

fn diff_text(side: Option<&[u8]>) -> Option<&str> {
    match side {
        None => Some(""),
        Some(bytes) if bytes.len() <= MAX_DIFF_BYTES => std::str::from_utf8(bytes).ok(),
        Some(_) => None,
    }
}

/// A unified diff (three lines of context) from `a/<path>` to `b/<path>`,
/// `/dev/null` for an absent side; `None` for binary (not UTF-8) content
/// or a side over [`MAX_DIFF_BYTES`].
pub fn unified_diff(path: &str, before: Option<&[u8]>, after: Option<&[u8]>) -> Option<String> {
    let (old, new) = (diff_text(before)?, diff_text(after)?);
    let from = if before.is_some() { format!("a/{path}") } else { "/dev/null".into() };
    let to = if after.is_some() { format!("b/{path}") } else { "/dev/null".into() };
    let diff = TextDiff::from_lines(old, new);
    Some(diff.unified_diff().context_radius(3).header(&from, &to).to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_modified_file_shows_its_changed_lines_in_context() {
        let before = b"# Memory\n\n- tea\n- coffee\n";
        let after = b"# Memory\n\n- green tea\n- coffee\n";
        let diff = unified_diff("MEMORY.md", Some(before), Some(after)).unwrap();
        assert_eq!(
            diff,
            "--- a/MEMORY.md\n+++ b/MEMORY.md\n@@ -1,4 +1,4 @@\n # Memory\n \n-- tea\n+- green tea\n - coffee\n"
        );
        assert_eq!(Change::of(Some(before), Some(after)), Some(Change::Modified));
    }

    #[test]
    fn added_and_deleted_files_diff_against_dev_null() {
        let added = unified_diff("skills/x/SKILL.md", None, Some(b"one\ntwo\n")).unwrap();
        assert!(added.starts_with("--- /dev/null\n+++ b/skills/x/SKILL.md\n@@ -0,0 +1,2 @@\n+one\n+two\n"), "{added}");
        let deleted = unified_diff("old.md", Some(b"gone\n"), None).unwrap();
        assert!(deleted.starts_with("--- a/old.md\n+++ /dev/null\n@@ -1 +0,0 @@\n-gone\n"), "{deleted}");
        assert_eq!(Change::of(None, Some(b"x")), Some(Change::Added));
        assert_eq!(Change::of(Some(b"x"), None), Some(Change::Deleted));
        assert_eq!(Change::of(Some(b"x"), Some(b"x")), None);
        assert_eq!(Change::of(None, None), None);
    }

    #[test]
    fn binary_and_huge_files_get_no_diff() {
        assert_eq!(unified_diff("a.bin", Some(&[0xff, 0xfe]), Some(b"x")), None);
        let huge = vec![b'a'; MAX_DIFF_BYTES + 1];
        assert_eq!(unified_diff("big.md", None, Some(&huge)), None);
        assert!(unified_diff("edge.md", None, Some(&huge[..MAX_DIFF_BYTES])).is_some());
    }
}
