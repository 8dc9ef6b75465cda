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
#[path = "layout_tests.rs"]
mod tests;
