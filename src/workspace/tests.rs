//! Tests of `mod.rs`.

use super::*;
use std::io::Write;

#[test]
fn a_reading_of_the_free_space_is_reused_only_while_recent_and_far_above_the_watermark() {
    let dir = tempfile::tempdir().unwrap();
    // A watermark no disk here reaches: every fresh reading is below it.
    let watermark = 1u64 << 60;
    let volumes = Volumes::new(dir.path(), watermark);
    let remember = |age: Duration, free: u64| {
        *volumes.last_free.lock().unwrap() = Some((Instant::now() - age, free));
    };
    assert!(!volumes.has_room(), "a fresh reading is below the watermark");
    remember(Duration::ZERO, watermark + FREE_READING_MARGIN);
    assert!(volumes.has_room(), "a recent reading far above it answers");
    remember(Duration::ZERO, watermark + FREE_READING_MARGIN - 1);
    assert!(!volumes.has_room(), "a reading near the watermark is taken again");
    remember(FREE_READING_LIFE, watermark * 2);
    assert!(!volumes.has_room(), "an old reading is taken again");
    assert!(Volumes::new(dir.path(), 0).has_room(), "no watermark, always room");
}

#[test]
fn confine_refuses_escapes_and_absolute_paths() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    assert!(matches!(confine(root, "../x"), Err(PathError::Escapes(_))));
    assert!(matches!(confine(root, "a/../../x"), Err(PathError::Escapes(_))));
    assert!(matches!(confine(root, "a/../b"), Err(PathError::Escapes(_))));
    assert!(matches!(confine(root, "/etc/passwd"), Err(PathError::Absolute(_))));
    assert!(matches!(confine(root, ""), Err(PathError::Empty)));
    assert_eq!(confine(root, "a//b/./c").unwrap(), root.join("a/b/c"));
}

#[test]
fn confine_follows_symlinks() {
    let dir = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let root = dir.path();
    std::os::unix::fs::symlink(outside.path(), root.join("out")).unwrap();
    std::os::unix::fs::symlink(root.join("nowhere"), root.join("dangling")).unwrap();
    fs::create_dir(root.join("inside")).unwrap();
    std::os::unix::fs::symlink(root.join("inside"), root.join("alias")).unwrap();
    assert!(matches!(confine(root, "out/x"), Err(PathError::Escapes(_))));
    assert!(matches!(confine(root, "out"), Err(PathError::Escapes(_))));
    assert!(matches!(confine(root, "dangling"), Err(PathError::Escapes(_))));
    assert!(confine(root, "alias/new.md").is_ok());
    assert!(confine(root, "not/yet/there.md").is_ok());
    // A symlink deeper down, after components that are plain folders.
    fs::create_dir_all(root.join("inside/deeper")).unwrap();
    std::os::unix::fs::symlink(outside.path(), root.join("inside/deeper/out")).unwrap();
    assert!(matches!(confine(root, "inside/deeper/out/x.md"), Err(PathError::Escapes(_))));
    assert!(confine(root, "inside/deeper/x.md").is_ok());
    // Beneath a file: the path cannot be resolved.
    fs::write(root.join("inside/file"), "x").unwrap();
    assert!(matches!(confine(root, "inside/file/x.md"), Err(PathError::Io(_))));
}

#[test]
fn append_cuts_an_unacknowledged_tail() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("r.jsonl");
    let len = append_durably(&path, 0, b"{\"a\":1}\n").unwrap();
    fs::OpenOptions::new().append(true).open(&path).unwrap().write_all(b"{\"torn\":").unwrap();
    assert_eq!(read_committed(&path, len).unwrap(), b"{\"a\":1}\n");
    let len = append_durably(&path, len, b"{\"b\":2}\n").unwrap();
    assert_eq!(fs::read(&path).unwrap(), b"{\"a\":1}\n{\"b\":2}\n");
    assert_eq!(len, 16);
    assert!(append_durably(&path, 100, b"x\n").is_err());
}

#[test]
fn a_group_of_appends_lands_each_line_at_its_committed_length() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b, c) = (dir.path().join("a.jsonl"), dir.path().join("b.jsonl"), dir.path().join("c.jsonl"));
    let a_len = append_durably(&a, 0, b"{\"a\":1}\n").unwrap();
    fs::OpenOptions::new().append(true).open(&a).unwrap().write_all(b"{\"torn\":").unwrap();
    fs::write(&c, b"short").unwrap();
    let lines = [
        LineAppend { path: a.clone(), committed_len: a_len, line: "{\"a\":2}\n".into() },
        LineAppend { path: b.clone(), committed_len: 0, line: "{\"b\":1}\n".into() },
        LineAppend { path: c.clone(), committed_len: 100, line: "x\n".into() },
    ];
    let results = append_all_durably(&lines);
    assert_eq!(results[0].as_ref().unwrap(), &16);
    assert_eq!(results[1].as_ref().unwrap(), &8);
    assert!(results[2].is_err(), "a file shorter than its committed length is refused alone");
    assert_eq!(fs::read(&a).unwrap(), b"{\"a\":1}\n{\"a\":2}\n");
    assert_eq!(fs::read(&b).unwrap(), b"{\"b\":1}\n");
    assert_eq!(fs::read(&c).unwrap(), b"short");
}

#[test]
fn a_staged_file_appears_only_when_published() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("raw.md");
    let staged = stage(&path, b"new", Uuid::nil()).unwrap();
    assert!(!path.exists());
    staged.publish().unwrap();
    assert_eq!(fs::read(&path).unwrap(), b"new");
    drop(stage(&path, b"discarded", Uuid::nil()).unwrap());
    assert_eq!(fs::read(&path).unwrap(), b"new");
    assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1, "no temporary file is left");
}

#[test]
fn atomic_write_replaces_whole_files() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sub/MEMORY.md");
    write_atomic(&path, b"one", Uuid::nil()).unwrap();
    write_atomic(&path, b"two", Uuid::nil()).unwrap();
    assert_eq!(fs::read(&path).unwrap(), b"two");
    assert_eq!(fs::read_dir(path.parent().unwrap()).unwrap().count(), 1);
}

#[test]
fn leftovers_are_found_by_owner() {
    let dir = tempfile::tempdir().unwrap();
    let (mine, theirs) = (Uuid::new_v4(), Uuid::new_v4());
    let deep = dir.path().join("memories/raw_memories/r.md");
    let kept = [stage(&deep, b"a", mine).unwrap(), stage(&deep, b"b", theirs).unwrap()];
    // Kept as a killed process leaves them: never published, never removed.
    let leftovers: Vec<PathBuf> = kept.into_iter().map(|s| s.tmp.keep().unwrap()).collect();
    fs::write(dir.path().join("memories/.tmpAb3dE9"), b"legacy").unwrap();
    fs::write(dir.path().join("memories/.tmp-not-ours"), b"user").unwrap();
    fs::write(dir.path().join("memories/MEMORY.md"), b"").unwrap();
    let found = find_leftovers(dir.path()).unwrap();
    assert_eq!(found.len(), 3, "{found:?}");
    assert_eq!(found.iter().filter(|l| l.owner.is_none()).count(), 1);
    assert_eq!(remove_leftovers_of(dir.path(), mine).unwrap(), 1);
    assert!(!leftovers[0].exists() && leftovers[1].exists());
    assert!(dir.path().join("memories/.tmp-not-ours").exists());
}
