//! The V4A patch engine's cases (R-rules of the apply_patch grammar).

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
    assert_eq!(err("*** Begin Patch\nnonsense\n*** End Patch"), "Invalid apply_patch file operation header: nonsense");
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
    let one = parse_patch_input(r#"  {"type":"update_file","path":"memories/MEMORY.md","diff":"@@\n+memory entry\n"}"#)
        .unwrap();
    assert_eq!(one[0].kind, OperationKind::Update);
    let many = parse_patch_input(
        r#"{"operations":[{"type":"create_file","path":"a","diff":"+x\n"},{"type":"delete_file","path":"b"}]}"#,
    )
    .unwrap();
    assert_eq!(many.len(), 2);
    let wrapped = parse_patch_input(r#"{"operation":{"type":"delete_file","path":"b"}}"#).unwrap();
    assert_eq!(wrapped[0].kind, OperationKind::Delete);
    let listed = parse_patch_input(r#"[{"type":"update_file","path":"a","diff":"@@\n+x\n","move_to":"b"}]"#).unwrap();
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
