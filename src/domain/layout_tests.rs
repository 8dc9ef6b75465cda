//! Tests of `layout.rs`.

use super::*;

#[test]
fn the_effective_config_shows_every_default_and_writes_back_unchanged() {
    let layout =
        ValidLayout::new(serde_json::from_str(r#"{"memories_dir": "m", "sessions_dir": "s"}"#).unwrap()).unwrap();
    let shown = layout.effective_json();
    assert_eq!(shown["redaction"], serde_json::json!({"rules": "default", "patterns": [], "at_ingest": false}));
    assert_eq!(shown["retention"], serde_json::json!({"rollout_days": null}));
    assert_eq!(
        (shown["generate"]["selection"].as_str(), shown["read"]["citations"].as_bool()),
        (Some("recent"), Some(false))
    );
    assert!(shown["generate"].as_object().unwrap().contains_key("max_unused_days"));
    let written_back = ValidLayout::new(serde_json::from_value(shown).unwrap()).unwrap();
    assert_eq!(written_back.etag(), layout.etag());
    let off = ValidLayout::new(
        serde_json::from_str(r#"{"memories_dir": "m", "sessions_dir": "s", "generate": null}"#).unwrap(),
    )
    .unwrap();
    assert!(off.effective_json()["generate"].is_null(), "generation off stays off");
}

fn layout(memories: &str, sessions: &str) -> ValidLayout {
    ValidLayout::new(LayoutConfig {
        memories_dir: memories.into(),
        sessions_dir: sessions.into(),
        ..LayoutConfig::default()
    })
    .unwrap()
}

fn name(s: &str) -> LayoutName {
    LayoutName::parse(s).unwrap()
}

#[test]
fn layout_dirs_follow_r_lay_1() {
    let err = |v| validate_layout_dir("memories_dir", v).unwrap_err();
    assert_eq!(err("/memory"), "layout.memories_dir must be relative to the sandbox workspace root, got: /memory");
    assert_eq!(err("../memory"), "layout.memories_dir must not escape root, got: ../memory");
    assert_eq!(err("a/../b"), "layout.memories_dir must not escape root, got: a/../b");
    assert_eq!(err(""), "layout.memories_dir must be non-empty");
    assert_eq!(err("."), "layout.memories_dir must be non-empty");
    assert_eq!(err("./"), "layout.memories_dir must be non-empty");
    assert_eq!(
        validate_layout_dir("sessions_dir", "/s//x").unwrap_err(),
        "layout.sessions_dir must be relative to the sandbox workspace root, got: /s/x"
    );
    let ok = |v| validate_layout_dir("memories_dir", v).unwrap().normalized;
    assert_eq!(ok("a//b"), "a/b");
    assert_eq!(ok("./a/"), "a");
    assert_eq!(ok("a/./b"), "a/b");
    assert_eq!(ok("team\\memory"), "team\\memory");
}

#[test]
fn retention_takes_days_with_fractions_and_defaults_to_the_server() {
    let with = |days| {
        ValidLayout::new(LayoutConfig {
            retention: RetentionConfig { rollout_days: Some(days) },
            ..LayoutConfig::default()
        })
    };
    assert!(with(-1.0).unwrap_err().contains("retention.rollout_days"));
    assert!(with(f64::NAN).is_err());
    let half = with(0.5).unwrap().config.retention;
    assert_eq!(half.rollout_idle_limit(30.0), Some(chrono::Duration::hours(12)));
    assert_eq!(with(0.0).unwrap().config.retention.rollout_idle_limit(30.0), None);
    let unset = RetentionConfig::default();
    assert_eq!(unset.rollout_idle_limit(0.0), None);
    assert_eq!(unset.rollout_idle_limit(2.0), Some(chrono::Duration::days(2)));
    // A layout that does not set it serialises as before (same etag).
    let plain = serde_json::to_string(&LayoutConfig::default()).unwrap();
    assert!(!plain.contains("retention"), "{plain}");
    let parsed: LayoutConfig =
        serde_json::from_str(r#"{"memories_dir":"m","sessions_dir":"s","retention":{"rollout_days":1.5}}"#).unwrap();
    assert_eq!(parsed.retention.rollout_days, Some(1.5));
    assert!(
        serde_json::from_str::<LayoutConfig>(r#"{"memories_dir":"m","sessions_dir":"s","retention":{"days":1}}"#)
            .is_err()
    );
}

#[test]
fn generate_limits_have_the_sdk_messages() {
    let with = |n| {
        ValidLayout::new(LayoutConfig {
            generate: Some(GenerateConfig { max_raw_memories_for_consolidation: n, ..GenerateConfig::default() }),
            ..LayoutConfig::default()
        })
    };
    assert!(with(0).unwrap_err().ends_with("must be greater than 0."));
    assert!(with(-1).unwrap_err().ends_with("must be greater than 0."));
    assert!(with(4097).unwrap_err().ends_with("must be less than or equal to 4096."));
    assert!(with(1).is_ok());
    assert!(with(4096).is_ok());
}

#[test]
fn generate_and_read_default_when_absent_and_disable_when_null() {
    let c: LayoutConfig = serde_json::from_str(r#"{"memories_dir":"m","sessions_dir":"s"}"#).unwrap();
    assert_eq!(c.generate, Some(GenerateConfig::default()));
    assert_eq!(c.read, Some(ReadConfig { live_update: true, citations: false }));
    let c: LayoutConfig =
        serde_json::from_str(r#"{"memories_dir":"m","sessions_dir":"s","generate":null,"read":null}"#).unwrap();
    assert_eq!((c.generate, c.read), (None, None));
}

#[test]
fn shared_dirs_conflict_after_normalising() {
    let existing = vec![(name("default"), layout("memories", "sessions"))];
    let err = decide_layout_put(&existing, &name("b"), &layout("./memories/", "s2"), None);
    assert!(matches!(err, Err(LayoutPutError::Conflict(d)) if d.contains("memories_dir='memories'")));
    let existing = vec![(name("a"), layout("memory_a", "shared_sessions"))];
    let err = decide_layout_put(&existing, &name("b"), &layout("memory_b", "shared_sessions"), None);
    assert!(matches!(err, Err(LayoutPutError::Conflict(d)) if d.contains("sessions_dir='shared_sessions'")));
    let existing = vec![(name("a"), layout("x//y", "s1"))];
    assert!(decide_layout_put(&existing, &name("b"), &layout("x/y", "s2"), None).is_err());
    assert_eq!(decide_layout_put(&existing, &name("b"), &layout("x/z", "s2"), None), Ok(LayoutPutDecision::Create));
}

#[test]
fn dirs_must_be_usable_paths_on_disk() {
    let err = |v: &str| validate_layout_dir("sessions_dir", v).unwrap_err();
    assert!(err("a\0b").contains("control characters"));
    assert!(err("a\nb").contains("control characters"));
    assert!(err("a/\u{7f}").contains("control characters"));
    let long = "x".repeat(256);
    assert!(err(&format!("ok/{long}")).contains("longer than 255 bytes"));
    assert!(validate_layout_dir("sessions_dir", &"y".repeat(255)).is_ok());
    let many = vec!["abcdefgh"; 114].join("/");
    assert_eq!(many.len(), 1025);
    assert!(err(&many).contains("at most 1024 bytes"));
    assert!(validate_layout_dir("sessions_dir", &many[..1024]).is_ok());
    // Multi-byte characters count in bytes: 128 of them are 256 bytes.
    assert!(err(&"é".repeat(128)).contains("longer than 255 bytes"));
}

#[test]
fn folders_overlap_by_whole_components() {
    let dir = |s: &str| validate_layout_dir("memories_dir", s).unwrap();
    assert!(dir("a").overlaps(&dir("a")));
    assert!(dir("a").overlaps(&dir("a/b")));
    assert!(dir("a/b").overlaps(&dir("./a//")));
    assert!(!dir("a").overlaps(&dir("ab")));
    assert!(!dir("memories").overlaps(&dir("memories_b")));
    assert!(!dir("a/b").overlaps(&dir("a/c")));
}

#[test]
fn no_folder_of_a_layout_may_equal_or_contain_another() {
    let default = vec![(name("default"), layout("memories", "sessions"))];
    let conflict = |existing: &[(LayoutName, ValidLayout)], new: ValidLayout| match decide_layout_put(
        existing,
        &name("x"),
        &new,
        None,
    ) {
        Err(LayoutPutError::Conflict(detail)) => detail,
        other => panic!("expected a conflict, got {other:?}"),
    };
    // A layout's own two folders.
    assert!(conflict(&default, layout("m", "m")).contains("memories_dir='m' and sessions_dir='m'"));
    assert!(conflict(&default, layout("m", "m/s")).contains("overlap"));
    assert!(conflict(&default, layout("m/x", "m")).contains("overlap"));
    // Another layout's memories folder used as sessions folder (the data-loss case).
    let shared = vec![(name("x1"), layout("shared", "s1"))];
    let detail = conflict(&shared, layout("m2", "shared"));
    assert!(detail.contains("sessions_dir='shared'") && detail.contains("memories_dir='shared'"), "{detail}");
    assert!(detail.contains("layout 'x1'"), "{detail}");
    // Nested in the implicit default's folders, either way round.
    let detail = conflict(&default, layout("sessions/mem", "s2"));
    assert!(detail.contains("memories_dir='sessions/mem'") && detail.contains("sessions_dir='sessions'"));
    assert!(detail.contains("layout 'default'"));
    assert!(conflict(&default, layout("m2", "memories/sub")).contains("memories_dir='memories'"));
    let detail = conflict(&[(name("a"), layout("deep/mem", "deep2"))], layout("deep", "s2"));
    assert!(detail.contains("memories_dir='deep'") && detail.contains("memories_dir='deep/mem'"), "{detail}");
    // Siblings and prefixes that are not components are fine.
    assert_eq!(
        decide_layout_put(&default, &name("x"), &layout("memories2", "sessions2"), None),
        Ok(LayoutPutDecision::Create)
    );
    // Replacing a layout is not compared with its own old folders.
    let existing = vec![(name("x"), layout("m", "s"))];
    assert_eq!(
        decide_layout_put(&existing, &name("x"), &layout("m/deeper", "s"), Some(&layout("m", "s").etag())),
        Ok(LayoutPutDecision::Replace)
    );
}

#[test]
fn replacing_needs_the_current_etag() {
    let current = layout("m", "s");
    let existing = vec![(name("a"), current.clone())];
    assert_eq!(decide_layout_put(&existing, &name("a"), &current, None), Ok(LayoutPutDecision::Unchanged));
    let mut changed = current.clone();
    changed.config.generate.as_mut().unwrap().extra_prompt = Some("x".into());
    let err = decide_layout_put(&existing, &name("a"), &changed, None);
    assert!(matches!(err, Err(LayoutPutError::Conflict(d)) if d.contains("different memory generation config")));
    assert_eq!(decide_layout_put(&existing, &name("a"), &changed, Some("\"stale\"")), Err(LayoutPutError::StaleEtag));
    assert_eq!(
        decide_layout_put(&existing, &name("a"), &changed, Some(&current.etag())),
        Ok(LayoutPutDecision::Replace)
    );
    assert_ne!(current.etag(), changed.etag());
}
