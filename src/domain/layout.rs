//! Layouts: where a tenant's memory lives in a workspace and how it is made
//! (SPEC §2.1; R-CFG, R-LAY).

use super::ids::LayoutName;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

pub const MAX_RAW_MEMORIES_LIMIT: i64 = 4096;
const REASONING_EFFORTS: [&str; 6] = ["none", "minimal", "low", "medium", "high", "xhigh"];

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LayoutConfig {
    pub memories_dir: String,
    pub sessions_dir: String,
    #[serde(default = "default_generate")]
    pub generate: Option<GenerateConfig>,
    #[serde(default = "default_read")]
    pub read: Option<ReadConfig>,
    /// Left out when it holds only defaults, so that layouts written before
    /// it existed keep their etag.
    #[serde(default, skip_serializing_if = "RetentionConfig::is_default")]
    pub retention: RetentionConfig,
    /// Left out while it is the default, for the same reason.
    #[serde(default, skip_serializing_if = "super::redact::RedactionConfig::is_default")]
    pub redaction: super::redact::RedactionConfig,
}

/// How long a layout keeps conversations (SPEC §2.7).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RetentionConfig {
    /// Days without a segment after which a rollout is forgotten (fractions
    /// allowed; 0 keeps it); `None`: the server's `MEMORYD_RETAIN_ROLLOUTS_DAYS`.
    pub rollout_days: Option<f64>,
}

impl RetentionConfig {
    fn is_default(&self) -> bool {
        self.rollout_days.is_none()
    }

    /// The idle time after which a rollout of this layout is forgotten,
    /// given the server's default (in days); `None`: kept for good.
    pub fn rollout_idle_limit(&self, server_default_days: f64) -> Option<chrono::Duration> {
        let days = self.rollout_days.unwrap_or(server_default_days);
        (days.is_finite() && days > 0.0).then(|| chrono::Duration::milliseconds((days * 86_400_000.0).min(1e15) as i64))
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GenerateConfig {
    pub max_raw_memories_for_consolidation: i64,
    pub phase_one_model: String,
    pub phase_two_model: String,
    pub phase_one_reasoning_effort: Option<String>,
    pub phase_two_reasoning_effort: Option<String>,
    pub phase_two_max_turns: i64,
    pub extra_prompt: Option<String>,
    /// Which raw memories phase two consolidates first (SPEC §2.10). Left
    /// out while it is the default, so that older layouts keep their etag.
    #[serde(skip_serializing_if = "SelectionMode::is_recent")]
    pub selection: SelectionMode,
    /// A raw memory neither used nor updated for this many days is not
    /// selected; `None`: no window. Left out while unset.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_unused_days: Option<i64>,
}

/// The order phase two selects raw memories in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SelectionMode {
    /// Newest `updated_at` first: the SDK's order.
    #[default]
    Recent,
    /// Most used first, as Codex ranks them.
    Usage,
}

impl SelectionMode {
    fn is_recent(&self) -> bool {
        *self == Self::Recent
    }
}

/// `max_unused_days` may be at most a year.
pub const MAX_UNUSED_DAYS: i64 = 365;

impl Default for GenerateConfig {
    fn default() -> Self {
        Self {
            max_raw_memories_for_consolidation: 256,
            phase_one_model: "gpt-5.4-mini".into(),
            phase_two_model: "gpt-5.5".into(),
            phase_one_reasoning_effort: Some("medium".into()),
            phase_two_reasoning_effort: Some("medium".into()),
            phase_two_max_turns: 500,
            extra_prompt: None,
            selection: SelectionMode::Recent,
            max_unused_days: None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ReadConfig {
    pub live_update: bool,
    /// The instructions ask the agent to cite the memories it used (SPEC
    /// §2.10). Left out while false, so that older layouts keep their etag.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub citations: bool,
}

impl Default for ReadConfig {
    fn default() -> Self {
        Self { live_update: true, citations: false }
    }
}

fn default_generate() -> Option<GenerateConfig> {
    Some(GenerateConfig::default())
}

fn default_read() -> Option<ReadConfig> {
    Some(ReadConfig::default())
}

impl Default for LayoutConfig {
    /// R-CFG-1: the implicit `default` layout.
    fn default() -> Self {
        Self {
            memories_dir: "memories".into(),
            sessions_dir: "sessions".into(),
            generate: default_generate(),
            read: default_read(),
            retention: RetentionConfig::default(),
            redaction: Default::default(),
        }
    }
}

/// A directory of a layout after R-LAY-1: relative, no `..`, non-empty.
/// `normalized` is what `pathlib` would print (`a//b`, `./a/` → `a/b`, `a`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LayoutDir {
    pub normalized: String,
}

/// `str(PurePosixPath(value))`.
fn pathlib_str(value: &str) -> String {
    let parts: Vec<&str> = value.split('/').filter(|p| !p.is_empty() && *p != ".").collect();
    let root = if value.starts_with("//") && !value.starts_with("///") {
        "//"
    } else if value.starts_with('/') {
        "/"
    } else {
        ""
    };
    let joined = parts.join("/");
    match (root, joined.is_empty()) {
        ("", true) => ".".into(),
        (root, _) => format!("{root}{joined}"),
    }
}

/// A directory must also be usable as a path on every filesystem memoryd
/// runs on (SPEC §2.1): these are the limits of Linux.
const MAX_DIR_COMPONENT_BYTES: usize = 255;
const MAX_DIR_BYTES: usize = 1024;

/// R-LAY-1, checks in the SDK's order with the SDK's messages, then the
/// limits of a path on disk.
pub fn validate_layout_dir(field: &str, value: &str) -> Result<LayoutDir, String> {
    let shown = pathlib_str(value);
    if value.starts_with('/') {
        return Err(format!("layout.{field} must be relative to the sandbox workspace root, got: {shown}"));
    }
    let parts: Vec<&str> = value.split('/').filter(|p| !p.is_empty() && *p != ".").collect();
    if parts.contains(&"..") {
        return Err(format!("layout.{field} must not escape root, got: {shown}"));
    }
    if parts.is_empty() {
        return Err(format!("layout.{field} must be non-empty"));
    }
    if value.chars().any(char::is_control) {
        return Err(format!("layout.{field} must not contain NUL or other control characters"));
    }
    if value.len() > MAX_DIR_BYTES {
        return Err(format!("layout.{field} must be at most {MAX_DIR_BYTES} bytes, got {} bytes", value.len()));
    }
    if let Some(long) = parts.iter().find(|p| p.len() > MAX_DIR_COMPONENT_BYTES) {
        return Err(format!(
            "layout.{field} must not have a component longer than {MAX_DIR_COMPONENT_BYTES} bytes, got one of {} bytes",
            long.len()
        ));
    }
    Ok(LayoutDir { normalized: parts.join("/") })
}

impl LayoutDir {
    /// Equal, or one lies inside the other (compared by whole components).
    pub fn overlaps(&self, other: &LayoutDir) -> bool {
        let inside = |inner: &str, outer: &str| {
            inner == outer || (inner.starts_with(outer) && inner.as_bytes().get(outer.len()) == Some(&b'/'))
        };
        inside(&self.normalized, &other.normalized) || inside(&other.normalized, &self.normalized)
    }
}

/// A layout config that passed every rule, with its directories normalised.
#[derive(Debug, Clone, PartialEq)]
pub struct ValidLayout {
    pub config: LayoutConfig,
    pub memories_dir: LayoutDir,
    pub sessions_dir: LayoutDir,
}

impl ValidLayout {
    pub fn new(config: LayoutConfig) -> Result<Self, String> {
        let memories_dir = validate_layout_dir("memories_dir", &config.memories_dir)?;
        let sessions_dir = validate_layout_dir("sessions_dir", &config.sessions_dir)?;
        if let Some(generate) = &config.generate {
            validate_generate(generate)?;
        }
        if let Some(days) = config.retention.rollout_days
            && !(days.is_finite() && days >= 0.0)
        {
            return Err(format!("layout.retention.rollout_days must be a number of days, 0 or more, got: {days}"));
        }
        config.redaction.validate()?;
        Ok(Self { config, memories_dir, sessions_dir })
    }

    /// The layout's redaction rules, compiled (once per process and config).
    pub fn redactor(&self) -> std::sync::Arc<super::redact::Redactor> {
        super::redact::redactor_for(&self.config.redaction).expect("a valid layout's rules compile")
    }

    /// `rollout_path` as the SDK prints it (R-P1-11): normalised sessions dir and file.
    pub fn rollout_path(&self, rollout: &super::ids::RolloutId) -> String {
        format!("{}/{}", self.sessions_dir.normalized, rollout.file_name())
    }

    /// Quoted, as an HTTP entity tag; derived from the whole config so that
    /// any change of it changes the tag.
    /// The config as a client reads it: every field, defaults included
    /// (the etag's form leaves defaults out; writing this back changes
    /// nothing).
    pub fn effective_json(&self) -> serde_json::Value {
        use serde_json::{Value, json};
        let mut config = serde_json::to_value(&self.config).expect("a config always serialises");
        if let Value::Object(fields) = &mut config {
            if let Some(Value::Object(generate)) = fields.get_mut("generate") {
                generate.entry("selection").or_insert(json!(SelectionMode::default()));
                generate.entry("max_unused_days").or_insert(Value::Null);
            }
            if let Some(Value::Object(read)) = fields.get_mut("read") {
                read.entry("citations").or_insert(Value::Bool(false));
            }
            fields.entry("retention").or_insert(json!(RetentionConfig::default()));
            fields.entry("redaction").or_insert(json!(super::redact::RedactionConfig::default()));
        }
        config
    }

    pub fn etag(&self) -> String {
        let canonical = serde_json::to_string(&self.config).expect("a config always serialises");
        let digest = Sha256::digest(canonical.as_bytes());
        let hex: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
        format!("\"{hex}\"")
    }
}

/// A tenant's layout as kept; `updated_at` is `None` for the implicit default.
#[derive(Debug, Clone)]
pub struct StoredLayout {
    pub name: LayoutName,
    pub layout: ValidLayout,
    pub updated_at: Option<chrono::DateTime<chrono::Utc>>,
}

pub fn default_layout() -> ValidLayout {
    ValidLayout::new(Default::default()).expect("the default layout is valid")
}

/// Every layout of a tenant, the implicit default included (SPEC §1).
pub fn with_implicit_default(mut stored: Vec<StoredLayout>) -> Vec<StoredLayout> {
    let default_name = LayoutName::default_layout();
    if !stored.iter().any(|l| l.name == default_name) {
        stored.insert(0, StoredLayout { name: default_name, layout: default_layout(), updated_at: None });
    }
    stored
}

/// The layout named `name` among a tenant's layouts, given with the implicit
/// default in place ([`with_implicit_default`]): loaded once, looked up by
/// every append and every job a close queues.
pub fn layout_named(layouts: &[StoredLayout], name: &LayoutName) -> Option<ValidLayout> {
    layouts.iter().find(|l| &l.name == name).map(|l| l.layout.clone())
}

fn validate_generate(g: &GenerateConfig) -> Result<(), String> {
    if g.max_raw_memories_for_consolidation <= 0 {
        return Err("MemoryGenerateConfig.max_raw_memories_for_consolidation must be greater than 0.".into());
    }
    if g.max_raw_memories_for_consolidation > MAX_RAW_MEMORIES_LIMIT {
        return Err(
            "MemoryGenerateConfig.max_raw_memories_for_consolidation must be less than or equal to 4096.".into()
        );
    }
    if g.phase_two_max_turns <= 0 {
        return Err("MemoryGenerateConfig.phase_two_max_turns must be greater than 0.".into());
    }
    for (field, effort) in [
        ("phase_one_reasoning_effort", &g.phase_one_reasoning_effort),
        ("phase_two_reasoning_effort", &g.phase_two_reasoning_effort),
    ] {
        if let Some(effort) = effort
            && !REASONING_EFFORTS.contains(&effort.as_str())
        {
            return Err(format!(
                "MemoryGenerateConfig.{field} must be one of {}, got: {effort}",
                REASONING_EFFORTS.join(", ")
            ));
        }
    }
    if g.phase_one_model.trim().is_empty() || g.phase_two_model.trim().is_empty() {
        return Err("MemoryGenerateConfig phase models must be non-empty.".into());
    }
    if let Some(days) = g.max_unused_days
        && !(0..=MAX_UNUSED_DAYS).contains(&days)
    {
        return Err(format!(
            "MemoryGenerateConfig.max_unused_days must be from 0 to {MAX_UNUSED_DAYS} days (or null), got: {days}"
        ));
    }
    Ok(())
}

/// Why a `PUT /v1/layouts/{name}` cannot be applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LayoutPutError {
    /// 409 `layout_conflict`
    Conflict(String),
    /// 412 `precondition_failed`
    StaleEtag,
}

/// What a `PUT` does, decided from the tenant's current layouts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LayoutPutDecision {
    Create,
    Unchanged,
    Replace,
}

/// A folder of a new layout that equals or nests with a folder of another.
struct FolderClash<'a> {
    field: &'static str,
    dir: &'a LayoutDir,
    other_field: &'static str,
    other_dir: &'a LayoutDir,
}

impl FolderClash<'_> {
    fn describe(&self, other_name: &LayoutName) -> String {
        if self.field == self.other_field && self.dir == self.other_dir {
            // R-LAY-5's case, in its words.
            return format!(
                "Layout '{other_name}' already uses {}='{}'. Use a different {} for isolated memories, or the same layout to share memory.",
                self.field, self.dir.normalized, self.field
            );
        }
        let relation = if self.dir == self.other_dir { "is the same folder as" } else { "overlaps" };
        format!(
            "{}='{}' {relation} {}='{}' of layout '{other_name}': one layout's consolidation agent could edit or delete the other's files. Use folders that neither equal nor contain each other.",
            self.field, self.dir.normalized, self.other_field, self.other_dir.normalized
        )
    }
}

fn folder_clash<'a>(new: &'a ValidLayout, other: &'a ValidLayout) -> Option<FolderClash<'a>> {
    let dirs = |l: &'a ValidLayout| [("memories_dir", &l.memories_dir), ("sessions_dir", &l.sessions_dir)];
    // Same-field equality first, so the SDK's message wins where it applies.
    let pairs = dirs(new).into_iter().flat_map(|a| dirs(other).into_iter().map(move |b| (a, b)));
    let mut pairs: Vec<_> = pairs.collect();
    pairs.sort_by_key(|((f, d), (of, od))| !(f == of && d == od));
    pairs
        .into_iter()
        .find(|((_, d), (_, od))| d.overlaps(od))
        .map(|((field, dir), (other_field, other_dir))| FolderClash { field, dir, other_field, other_dir })
}

fn etag_matches(if_match: &str, etag: &str) -> bool {
    if_match
        .split(',')
        .map(str::trim)
        .any(|tag| tag == "*" || tag == etag || tag.strip_prefix("W/") == Some(etag) || format!("\"{tag}\"") == etag)
}

/// The conflict rules of SPEC §2.1 and R-LAY-5 as one pure decision.
/// `existing` holds every layout of the tenant, the implicit default included.
pub fn decide_layout_put(
    existing: &[(LayoutName, ValidLayout)],
    name: &LayoutName,
    new: &ValidLayout,
    if_match: Option<&str>,
) -> Result<LayoutPutDecision, LayoutPutError> {
    let current = existing.iter().find(|(n, _)| n == name).map(|(_, l)| l);
    if let Some(current) = current {
        if let Some(tag) = if_match
            && !etag_matches(tag, &current.etag())
        {
            return Err(LayoutPutError::StaleEtag);
        }
        if current.config == new.config {
            return Ok(LayoutPutDecision::Unchanged);
        }
        if if_match.is_none() {
            return Err(LayoutPutError::Conflict(
                "This tenant already has a different memory generation config for this layout. Send If-Match with the layout's etag to replace it.".into(),
            ));
        }
    } else if if_match.is_some_and(|tag| tag.trim() != "*") {
        return Err(LayoutPutError::StaleEtag);
    }
    if new.memories_dir.overlaps(&new.sessions_dir) {
        return Err(LayoutPutError::Conflict(format!(
            "memories_dir='{}' and sessions_dir='{}' of layout '{name}' overlap: the consolidation agent could edit or delete the rollouts. Use two separate folders.",
            new.memories_dir.normalized, new.sessions_dir.normalized
        )));
    }
    for (other_name, other) in existing {
        if other_name == name {
            continue;
        }
        if let Some(clash) = folder_clash(new, other) {
            return Err(LayoutPutError::Conflict(clash.describe(other_name)));
        }
    }
    Ok(if current.is_some() { LayoutPutDecision::Replace } else { LayoutPutDecision::Create })
}

#[cfg(test)]
mod tests {
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
            serde_json::from_str(r#"{"memories_dir":"m","sessions_dir":"s","retention":{"rollout_days":1.5}}"#)
                .unwrap();
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
        assert_eq!(
            decide_layout_put(&existing, &name("a"), &changed, Some("\"stale\"")),
            Err(LayoutPutError::StaleEtag)
        );
        assert_eq!(
            decide_layout_put(&existing, &name("a"), &changed, Some(&current.etag())),
            Ok(LayoutPutDecision::Replace)
        );
        assert_ne!(current.etag(), changed.etag());
    }
}
