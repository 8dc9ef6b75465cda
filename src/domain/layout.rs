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
}

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
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ReadConfig {
    pub live_update: bool,
}

impl Default for ReadConfig {
    fn default() -> Self {
        Self { live_update: true }
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

/// R-LAY-1, checks in the SDK's order with the SDK's messages.
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
    Ok(LayoutDir { normalized: parts.join("/") })
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
        Ok(Self { config, memories_dir, sessions_dir })
    }

    /// Quoted, as an HTTP entity tag; derived from the whole config so that
    /// any change of it changes the tag.
    pub fn etag(&self) -> String {
        let canonical = serde_json::to_string(&self.config).expect("a config always serialises");
        let digest = Sha256::digest(canonical.as_bytes());
        let hex: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
        format!("\"{hex}\"")
    }
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
    for (other_name, other) in existing {
        if other_name == name {
            continue;
        }
        if other.memories_dir == new.memories_dir {
            return Err(LayoutPutError::Conflict(format!(
                "Layout '{other_name}' already uses memories_dir='{}'. Use a different memories_dir for isolated memories, or the same layout to share memory.",
                new.memories_dir.normalized
            )));
        }
        if other.sessions_dir == new.sessions_dir {
            return Err(LayoutPutError::Conflict(format!(
                "Layout '{other_name}' already uses sessions_dir='{}'. Use a different sessions_dir for isolated memories, or the same layout to share memory.",
                new.sessions_dir.normalized
            )));
        }
    }
    Ok(if current.is_some() { LayoutPutDecision::Replace } else { LayoutPutDecision::Create })
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(c.read, Some(ReadConfig { live_update: true }));
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
