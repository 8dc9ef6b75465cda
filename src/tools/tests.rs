//! Tests of `mod.rs`.

use super::*;

struct Fixture {
    _dir: tempfile::TempDir,
    root: PathBuf,
    tools: MemoryTools,
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("ws");
    for d in ["memories/raw_memories", "memories/rollout_summaries", "memories/skills", "sessions"] {
        std::fs::create_dir_all(root.join(d)).unwrap();
    }
    std::fs::write(root.join("memories/MEMORY.md"), "").unwrap();
    std::fs::write(root.join("memories/memory_summary.md"), "").unwrap();
    std::fs::write(root.join("memories/raw_memories.md"), "raw").unwrap();
    std::fs::write(root.join("memories/raw_memories/r.md"), "rollout_id: r\n").unwrap();
    std::fs::write(root.join("sessions/r.jsonl"), "{\"a\":1}\n").unwrap();
    let tools = MemoryTools::new(root.clone(), "memories", "sessions");
    Fixture { _dir: dir, root, tools }
}

fn patch(tools: &mut MemoryTools, body: &str) -> String {
    tools.call("apply_patch", &json!({"patch": format!("*** Begin Patch\n{body}\n*** End Patch")}).to_string())
}

#[test]
fn the_sdk_json_update_writes_memory() {
    let mut f = fixture();
    let out = f
        .tools
        .call("apply_patch", r#"{"type":"update_file","path":"memories/MEMORY.md","diff":"@@\n+memory entry\n"}"#);
    assert_eq!(out, "Updated memories/MEMORY.md");
    assert_eq!(f.tools.call("read_file", r#"{"path":"memories/MEMORY.md"}"#), "     1\tmemory entry\n");
    assert_eq!(f.tools.changed_files(), ["memories/MEMORY.md"]);
    assert_eq!(std::fs::read_to_string(f.root.join("memories/MEMORY.md")).unwrap(), "", "the disk is untouched");
    assert_eq!(f.tools.into_edits(), [("memories/MEMORY.md".to_owned(), Some("memory entry\n".to_owned()))]);
}

#[test]
fn hostile_paths_are_refused_and_nothing_changes() {
    let mut f = fixture();
    let outside = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(outside.path(), f.root.join("memories/skills/escape")).unwrap();
    let cases = [
        ("*** Add File: ../../x\n+x", "apply_patch path must not escape root: ../../x"),
        ("*** Add File: /etc/passwd\n+x", "apply_patch path must not escape root: /etc/passwd"),
        ("*** Add File: sessions/x.jsonl\n+x", "apply_patch may only write under memories/: sessions/x.jsonl"),
        (
            "*** Update File: memories/raw_memories.md\n@@\n+x",
            "apply_patch may not write memories/raw_memories.md: memoryd maintains it",
        ),
        (
            "*** Add File: memories/raw_memories/new.md\n+x",
            "apply_patch may not write memories/raw_memories/new.md: memoryd maintains it",
        ),
        (
            "*** Add File: memories/phase_two_selection.json\n+x",
            "apply_patch may not write memories/phase_two_selection.json: memoryd maintains it",
        ),
        (
            "*** Add File: memories/skills/escape/pwned.md\n+x",
            "apply_patch path must not escape root: memories/skills/escape/pwned.md",
        ),
        (
            "*** Add File: memories/../../other-tenant/default/memories/MEMORY.md\n+x",
            "apply_patch path must not escape root: memories/../../other-tenant/default/memories/MEMORY.md",
        ),
    ];
    for (body, expected) in cases {
        assert_eq!(patch(&mut f.tools, body), expected);
    }
    assert!(std::fs::read_dir(outside.path()).unwrap().next().is_none());
    assert!(!f.root.join("sessions/x.jsonl").exists());
    assert_eq!(std::fs::read_to_string(f.root.join("memories/raw_memories.md")).unwrap(), "raw");
    assert!(f.tools.changed_files().is_empty());
    assert!(f.tools.call("read_file", r#"{"path":"/etc/passwd"}"#).contains("must be relative"));
    assert!(f.tools.call("read_file", r#"{"path":"../x"}"#).contains("must be relative"));
    assert!(f.tools.call("read_file", r#"{"path":"memories/skills/escape/a"}"#).contains("must not escape root"));
    assert!(f.tools.call("list_files", r#"{"path":"sessions"}"#).contains("memory folder only"));
}

#[test]
fn a_failing_operation_leaves_every_file_as_it_was() {
    let mut f = fixture();
    let out =
        patch(&mut f.tools, "*** Update File: memories/MEMORY.md\n@@\n+first\n*** Delete File: memories/missing.md");
    assert_eq!(out, "apply_patch missing file: memories/missing.md");
    assert_eq!(std::fs::read_to_string(f.root.join("memories/MEMORY.md")).unwrap(), "");
    let out = patch(&mut f.tools, "*** Add File: memories/MEMORY.md\n+again");
    assert!(out.starts_with("apply_patch cannot create memories/MEMORY.md because it already exists."), "{out}");
}

#[test]
fn operations_see_each_other_and_moves_work() {
    let mut f = fixture();
    let out = patch(
        &mut f.tools,
        "*** Add File: memories/skills/ci/SKILL.md\n+# CI\n+\n*** Update File: memories/skills/ci/SKILL.md\n*** Move to: memories/skills/ci/README.md\n@@\n # CI\n+step one",
    );
    assert_eq!(
        out,
        "Created memories/skills/ci/SKILL.md\nUpdated memories/skills/ci/SKILL.md\nMoved memories/skills/ci/SKILL.md to memories/skills/ci/README.md"
    );
    assert!(f.tools.call("read_file", r#"{"path":"memories/skills/ci/SKILL.md"}"#).contains("no such file"));
    assert_eq!(
        f.tools.call("read_file", r#"{"path":"memories/skills/ci/README.md"}"#),
        "     1\t# CI\n     2\tstep one\n"
    );
    assert!(!f.root.join("memories/skills/ci").exists(), "nothing reaches the disk");
}

#[test]
fn read_list_and_search() {
    let mut f = fixture();
    std::fs::write(f.root.join("memories/MEMORY.md"), "alpha\nbeta tea\ngamma\n").unwrap();
    assert_eq!(
        f.tools.call("read_file", r#"{"path":"memories/MEMORY.md","offset":2,"limit":1}"#),
        "     2\tbeta tea\n… 1 more lines; read on with offset 3\n"
    );
    assert!(f.tools.call("read_file", r#"{"path":"sessions/r.jsonl"}"#).contains("{\"a\":1}"));
    assert!(f.tools.call("read_file", r#"{"path":"memories/nope.md"}"#).contains("no such file"));
    let listed = f.tools.call("list_files", "{}");
    assert!(listed.contains("memories/MEMORY.md (3 lines)\n"), "{listed}");
    assert!(
        listed.contains("memories/raw_memories/r.md (1 line)")
            && listed.contains("memories/memory_summary.md (0 lines)")
    );
    assert_eq!(f.tools.call("search_files", r#"{"pattern":"t[e]a"}"#), "memories/MEMORY.md:2: beta tea");
    assert_eq!(f.tools.call("search_files", r#"{"pattern":"(unclosed"}"#), "No lines match \"(unclosed\".");
    assert!(
        f.tools.call("search_files", r#"{"pattern":"a","path":"sessions/r.jsonl"}"#).contains("sessions/r.jsonl:1:")
    );
    assert_eq!(f.tools.call("delete_everything", "{}"), "unknown tool: delete_everything");
}

#[test]
fn the_working_copy_is_what_the_tools_see_and_only_they() {
    let mut f = fixture();
    std::fs::write(f.root.join("memories/MEMORY.md"), "before\n").unwrap();
    patch(
        &mut f.tools,
        "*** Update File: memories/MEMORY.md\n@@\n-before\n+after tea\n*** Add File: memories/skills/new.md\n+tea x",
    );
    patch(&mut f.tools, "*** Delete File: memories/memory_summary.md");
    let listed = f.tools.call("list_files", "{}");
    assert!(listed.contains("memories/skills/new.md (1 line)") && !listed.contains("memory_summary.md"), "{listed}");
    assert!(listed.contains("memories/MEMORY.md (1 line)"), "the working copy's lines are counted: {listed}");
    assert_eq!(
        f.tools.call("search_files", r#"{"pattern":"tea"}"#),
        "memories/MEMORY.md:1: after tea\nmemories/skills/new.md:1: tea x"
    );
    assert!(f.tools.call("read_file", r#"{"path":"memories/memory_summary.md"}"#).contains("no such file"));
    assert!(patch(&mut f.tools, "*** Update File: memories/memory_summary.md\n@@\n+x").contains("missing file"));
    // The disk is as it was; the edits are handed over whole.
    assert_eq!(std::fs::read_to_string(f.root.join("memories/MEMORY.md")).unwrap(), "before\n");
    assert!(!f.root.join("memories/skills/new.md").exists());
    assert!(f.root.join("memories/memory_summary.md").exists());
    assert_eq!(
        f.tools.into_edits(),
        [
            ("memories/MEMORY.md".to_owned(), Some("after tea\n".to_owned())),
            ("memories/skills/new.md".to_owned(), Some("tea x".to_owned())),
            ("memories/memory_summary.md".to_owned(), None),
        ]
    );
}
