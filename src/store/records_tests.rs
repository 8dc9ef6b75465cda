//! Tests of `records.rs`.

use super::*;
use chrono::TimeZone;

#[test]
fn workspaces_merge_sessions_and_layouts_and_default_is_always_there() {
    let t = |m| Some(Utc.with_ymd_and_hms(2026, 12, 1, 8, m, 0).unwrap());
    let activity = WorkspaceActivity {
        sessions: vec![("team".into(), 3, t(5)), ("default".into(), 1, t(1))],
        layouts: vec![
            ("team".into(), "notes".into(), t(9)),
            ("team".into(), "default".into(), t(2)),
            ("orphan".into(), "default".into(), t(3)),
        ],
        imported: vec![("memories-only".into(), t(4)), ("team".into(), t(1))],
    };
    let listed = activity.summaries();
    let names: Vec<_> = listed.iter().map(|w| w.name.as_str()).collect();
    assert_eq!(names, ["default", "memories-only", "orphan", "team"]);
    assert_eq!((listed[1].sessions, listed[1].updated_at, listed[1].layouts.len()), (0, t(4), 0));
    assert_eq!(listed[3].layouts, ["default", "notes"]);
    assert_eq!((listed[3].sessions, listed[3].updated_at), (3, t(9)));
    assert_eq!((listed[0].sessions, listed[0].updated_at, listed[0].layouts.len()), (1, t(1), 0));
    assert_eq!(WorkspaceActivity::default().summaries(), vec![WorkspaceSummary::empty("default".into())]);
}
