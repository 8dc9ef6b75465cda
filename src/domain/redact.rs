//! Redaction (SPEC §4): secrets in conversations and memory files become
//! `[REDACTED:<rule>]`. One engine for every place it applies: the text phase
//! one sends to the model, the files published under a memory folder, and
//! (with `at_ingest`) the stored segment line.
//!
//! Linear in the text: Rust's `regex` has no backtracking, and one `RegexSet`
//! pass tells which rules match at all, so only those scan again for their
//! spans. Overlapping matches resolve to the longest (the earlier rule on a
//! tie), and a rule that names a value (`assignment`) replaces only it.

use regex::{Regex, RegexSet};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};

/// A built-in rule: its name, its pattern, and the capture group that is the
/// secret (0: the whole match).
struct BuiltIn {
    name: &'static str,
    pattern: &'static str,
    group: usize,
}

/// In the order that wins a tie: the more specific first.
const BUILT_IN: &[BuiltIn] = &[
    BuiltIn {
        name: "private_key",
        pattern: r"-----BEGIN[A-Z ]{0,40} PRIVATE KEY-----[\s\S]*?-----END[A-Z ]{0,40} PRIVATE KEY-----",
        group: 0,
    },
    BuiltIn { name: "anthropic_key", pattern: r"\bsk-ant-[A-Za-z0-9_\-]{20,}", group: 0 },
    BuiltIn { name: "stripe_key", pattern: r"\b(?:sk|rk)_live_[0-9A-Za-z]{16,}", group: 0 },
    BuiltIn { name: "openai_key", pattern: r"\bsk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_\-]{20,}", group: 0 },
    BuiltIn { name: "aws_access_key", pattern: r"\b(?:AKIA|ASIA)[A-Z0-9]{16}\b", group: 0 },
    BuiltIn {
        name: "github_token",
        pattern: r"\b(?:gh[pousr]_[A-Za-z0-9]{36,255}|github_pat_[A-Za-z0-9_]{22,255})",
        group: 0,
    },
    BuiltIn { name: "slack_token", pattern: r"\bxox[abposr]-[A-Za-z0-9\-]{10,}", group: 0 },
    BuiltIn { name: "google_api_key", pattern: r"\bAIza[0-9A-Za-z_\-]{35}", group: 0 },
    BuiltIn { name: "jwt", pattern: r"\beyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{16,}", group: 0 },
    BuiltIn { name: "bearer", pattern: r"\bBearer[ \t]+[A-Za-z0-9._~+/=\-]{16,}", group: 0 },
    BuiltIn {
        name: "assignment",
        pattern: r#"(?i)\b(?:api[_\-]?key|apikey|access[_\-]?key|secret[_\-]?key|client[_\-]?secret|auth[_\-]?token|access[_\-]?token|token|secret|password|passwd|pwd)\b["']?[ \t]*[:=][ \t]*["']?([^\s"'\\,;\[][^\s"'\\,;]{7,})"#,
        group: 1,
    },
];

/// The built-in rules' names, in the order that wins a tie.
pub fn built_in_rules() -> impl Iterator<Item = &'static str> {
    BUILT_IN.iter().map(|r| r.name)
}

/// Which built-in rules a layout uses.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(untagged)]
pub enum RuleChoice {
    /// `"default"`: all of them.
    Named(String),
    /// Some of them by name; `[]` turns redaction off (with no patterns).
    List(Vec<String>),
}

impl Default for RuleChoice {
    fn default() -> Self {
        Self::Named("default".into())
    }
}

/// A layout's own rule.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CustomPattern {
    pub name: String,
    pub regex: String,
}

/// The layout's `redaction` (SPEC §2.1, §4).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RedactionConfig {
    pub rules: RuleChoice,
    pub patterns: Vec<CustomPattern>,
    /// The stored segment line is redacted too (it then differs from the SDK's bytes).
    pub at_ingest: bool,
}

pub const MAX_PATTERNS: usize = 64;
/// Passes over one text at most (each one linear in it).
const MAX_PASSES: usize = 8;
/// A compiled custom pattern may take at most this much memory.
const PATTERN_SIZE_LIMIT: usize = 1 << 20;

impl RedactionConfig {
    pub fn is_default(&self) -> bool {
        self == &Self::default()
    }

    /// Checks the config the way `PUT /v1/layouts` must (422 `invalid_layout`).
    /// Every layout read from the store is checked again, so a config that
    /// compiles is kept compiled: checking it again costs a lookup.
    pub fn validate(&self) -> Result<(), String> {
        redactor_for(self).map(drop)
    }
}

fn valid_rule_name(name: &str) -> bool {
    (1..=40).contains(&name.len()) && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

/// Redaction counts by rule.
pub type Counts = BTreeMap<String, u64>;

pub fn add_counts(into: &mut Counts, more: &Counts) {
    for (rule, n) in more {
        *into.entry(rule.clone()).or_default() += n;
    }
}

struct Rule {
    name: String,
    regex: Regex,
    group: usize,
}

/// A layout's rules, compiled.
pub struct Redactor {
    rules: Vec<Rule>,
    set: RegexSet,
}

impl std::fmt::Debug for Redactor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.rules.iter().map(|r| &r.name)).finish()
    }
}

impl Redactor {
    pub fn new(config: &RedactionConfig) -> Result<Self, String> {
        let chosen: Vec<&BuiltIn> = match &config.rules {
            RuleChoice::Named(name) if name == "default" => BUILT_IN.iter().collect(),
            RuleChoice::Named(other) => {
                return Err(format!(
                    "layout.redaction.rules must be \"default\" or a list of rule names, got: {other:?}"
                ));
            }
            RuleChoice::List(names) => names
                .iter()
                .map(|name| {
                    BUILT_IN.iter().find(|r| r.name == name).ok_or_else(|| {
                        let known: Vec<&str> = built_in_rules().collect();
                        format!("layout.redaction.rules: unknown rule {name:?} (known: {})", known.join(", "))
                    })
                })
                .collect::<Result<_, _>>()?,
        };
        if config.patterns.len() > MAX_PATTERNS {
            return Err(format!("layout.redaction.patterns: at most {MAX_PATTERNS}, got {}", config.patterns.len()));
        }
        let mut rules: Vec<Rule> = chosen
            .into_iter()
            .map(|r| Rule {
                name: r.name.into(),
                regex: Regex::new(r.pattern).expect("built-in rules compile"),
                group: r.group,
            })
            .collect();
        for pattern in &config.patterns {
            if !valid_rule_name(&pattern.name) {
                return Err(format!(
                    "layout.redaction.patterns: a name must match ^[a-z0-9_]{{1,40}}$, got: {:?}",
                    pattern.name
                ));
            }
            let regex = regex::RegexBuilder::new(&pattern.regex)
                .size_limit(PATTERN_SIZE_LIMIT)
                .build()
                .map_err(|e| format!("layout.redaction.patterns: {} does not compile: {e}", pattern.name))?;
            rules.push(Rule { name: pattern.name.clone(), regex, group: 0 });
        }
        let set = RegexSet::new(rules.iter().map(|r| r.regex.as_str())).map_err(|e| e.to_string())?;
        Ok(Self { rules, set })
    }

    /// No rule: redaction is off.
    pub fn is_off(&self) -> bool {
        self.rules.is_empty()
    }

    /// The secrets in `text`: non-overlapping `(start, end, rule)`, in order.
    fn spans(&self, text: &str) -> Vec<(usize, usize, usize)> {
        let mut found = Vec::new();
        for index in self.set.matches(text).iter() {
            let rule = &self.rules[index];
            for captures in rule.regex.captures_iter(text) {
                if let Some(secret) = captures.get(rule.group).filter(|m| !m.is_empty()) {
                    found.push((secret.start(), secret.end(), index));
                }
            }
        }
        // By start, the longest first, then the earlier rule. Overlapping
        // matches become one span covering both (no part of either secret
        // stays), named after the longest of them.
        found.sort_unstable_by_key(|&(start, end, rule)| (start, std::cmp::Reverse(end), rule));
        let mut merged: Vec<(usize, usize, usize, usize)> = Vec::with_capacity(found.len());
        for (start, end, rule) in found {
            match merged.last_mut() {
                Some(last) if start < last.1 => {
                    last.1 = last.1.max(end);
                    if end - start > last.3 {
                        (last.2, last.3) = (rule, end - start);
                    }
                }
                _ => merged.push((start, end, rule, end - start)),
            }
        }
        merged.into_iter().map(|(start, end, rule, _)| (start, end, rule)).collect()
    }

    /// `text` with every secret replaced; the counts by rule. A replacement
    /// can make a word boundary where there was none (two keys written
    /// together), so passes repeat until one finds nothing: redacting the
    /// result again changes nothing.
    pub fn redact_text(&self, text: &str, counts: &mut Counts) -> String {
        let mut current = std::borrow::Cow::Borrowed(text);
        for _ in 0..MAX_PASSES {
            match self.one_pass(&current, counts) {
                Some(next) => current = std::borrow::Cow::Owned(next),
                None => break,
            }
        }
        current.into_owned()
    }

    /// `None` when `text` holds no secret.
    fn one_pass(&self, text: &str, counts: &mut Counts) -> Option<String> {
        if self.is_off() {
            return None;
        }
        let spans = self.spans(text);
        if spans.is_empty() {
            return None;
        }
        let mut out = String::with_capacity(text.len());
        let mut at = 0;
        for (start, end, rule) in spans {
            let name = &self.rules[rule].name;
            out.push_str(&text[at..start]);
            out.push_str("[REDACTED:");
            out.push_str(name);
            out.push(']');
            *counts.entry(name.clone()).or_default() += 1;
            at = end;
        }
        out.push_str(&text[at..]);
        Some(out)
    }

    /// Every string value of a JSON document redacted as text (its decoded
    /// text, so no escape is split); keys, numbers and the structure stay.
    pub fn redact_json(&self, value: &mut Value, counts: &mut Counts) {
        match value {
            Value::String(s) => {
                let redacted = self.redact_text(s, counts);
                if redacted != *s {
                    *s = redacted;
                }
            }
            Value::Array(items) => items.iter_mut().for_each(|v| self.redact_json(v, counts)),
            Value::Object(map) => map.values_mut().for_each(|v| self.redact_json(v, counts)),
            _ => {}
        }
    }
}

/// The compiled rules of a config, compiled once per process and config
/// (the 256 most recently used configs are kept).
pub fn redactor_for(config: &RedactionConfig) -> Result<Arc<Redactor>, String> {
    static CACHE: OnceLock<moka::sync::Cache<RedactionConfig, Arc<Redactor>>> = OnceLock::new();
    CACHE
        .get_or_init(|| moka::sync::Cache::new(256))
        .try_get_with_by_ref(config, || Redactor::new(config).map(Arc::new))
        .map_err(|e| e.as_ref().clone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn default() -> Redactor {
        Redactor::new(&RedactionConfig::default()).unwrap()
    }

    fn redact(text: &str) -> (String, Counts) {
        let mut counts = Counts::new();
        (default().redact_text(text, &mut counts), counts)
    }

    const PEM: &str =
        "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA7x1YbDq0n3\nq9yZ+abc/def==\n-----END RSA PRIVATE KEY-----";

    /// One made-up credential of every built-in rule, in its real shape.
    pub(crate) fn samples() -> Vec<(&'static str, String)> {
        vec![
            ("openai_key", "sk-proj-Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4zAb7cDe0f".into()),
            ("openai_key", "sk-svcacct-ZZ11yy22XX33ww44VV55uu66".into()),
            ("anthropic_key", "sk-ant-api03-AbCdEfGhIjKlMnOpQrStUvWxYz012345".into()),
            ("aws_access_key", "AKIAIOSFODNN7EXAMPLE".into()),
            ("github_token", "ghp_0123456789abcdefghijABCDEFGHIJ012345".into()),
            ("github_token", "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuv".into()),
            ("slack_token", "xoxb-1234567890-0987654321-AbCdEfGhIjKl".into()),
            ("google_api_key", "AIzaSyA1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q".into()),
            ("stripe_key", "sk_live_51HxYzAbCdEfGhIjKlMnOp".into()),
            (
                "jwt",
                "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"
                    .into(),
            ),
            ("private_key", PEM.into()),
            ("bearer", "Bearer abcdef0123456789ABCDEF".into()),
        ]
    }

    #[test]
    fn every_built_in_rule_catches_its_shape() {
        for (rule, secret) in samples() {
            let (out, counts) = redact(&format!("before {secret} after"));
            assert_eq!(out, format!("before [REDACTED:{rule}] after"), "{rule}: {secret}");
            assert_eq!(counts.get(rule), Some(&1), "{rule}");
        }
    }

    #[test]
    fn an_assignment_loses_only_its_value() {
        for (text, want) in [
            ("password=hunter2hunter2", "password=[REDACTED:assignment]"),
            ("API_KEY: 'abcd1234efgh'", "API_KEY: '[REDACTED:assignment]'"),
            ("\"token\": \"s3cr3t-t0ken\"", "\"token\": \"[REDACTED:assignment]\""),
            ("client_secret = zyxwvuts9876", "client_secret = [REDACTED:assignment]"),
        ] {
            assert_eq!(redact(text).0, want, "{text}");
        }
    }

    #[test]
    fn near_misses_are_left_alone() {
        for text in [
            "sk-0123456789",                                      // too short for a key
            "f47ac10b-58cc-4372-a567-0e02b2c3d479",               // a UUID
            "commit 3f786850e387550fdab836ed7e6dc881de23001b",    // a git SHA
            "aGVsbG8gd29ybGQ=.aGVsbG8=.aGVsbG8gd29ybGQgYWdhaW4=", // base64, not a JWT
            "AKIA1234",                                           // too short for AWS
            "ghp_short",
            "the password is short", // no assignment
            "password=short",        // a value under 8 characters
            "Bearer of good news",
            "xoxb-short",
            "-----BEGIN PUBLIC KEY-----\nabc\n-----END PUBLIC KEY-----",
            "disk-usage-and-memory-report-for-today",
        ] {
            assert_eq!(redact(text).0, text, "{text}");
        }
    }

    #[test]
    fn overlapping_matches_resolve_to_the_longest() {
        // The JWT inside a bearer header: the bearer span is longer.
        let jwt = &samples()[9].1;
        let (out, counts) = redact(&format!("Authorization: Bearer {jwt}"));
        assert_eq!(out, "Authorization: [REDACTED:bearer]");
        assert_eq!(counts.len(), 1);
        // An Anthropic key is also an OpenAI-shaped one: same span, the specific rule wins.
        let (out, _) = redact("key sk-ant-api03-AbCdEfGhIjKlMnOpQrStUvWxYz012345");
        assert_eq!(out, "key [REDACTED:anthropic_key]");
        // token=<an OpenAI key>: the key is the longer match than the assignment's value? Same span.
        let (out, _) = redact("token=sk-proj-Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4z");
        assert_eq!(out, "token=[REDACTED:openai_key]");
    }

    #[test]
    fn configs_choose_rules_and_add_patterns() {
        let off = Redactor::new(&RedactionConfig { rules: RuleChoice::List(vec![]), ..Default::default() }).unwrap();
        assert!(off.is_off());
        let mut counts = Counts::new();
        assert_eq!(off.redact_text("AKIAIOSFODNN7EXAMPLE", &mut counts), "AKIAIOSFODNN7EXAMPLE");
        let custom = RedactionConfig {
            rules: RuleChoice::List(vec!["aws_access_key".into()]),
            patterns: vec![CustomPattern { name: "employee_id".into(), regex: r"EMP-\d{6}".into() }],
            at_ingest: false,
        };
        let r = Redactor::new(&custom).unwrap();
        let out =
            r.redact_text("EMP-123456 AKIAIOSFODNN7EXAMPLE ghp_0123456789abcdefghijABCDEFGHIJ012345", &mut counts);
        assert_eq!(out, "[REDACTED:employee_id] [REDACTED:aws_access_key] ghp_0123456789abcdefghijABCDEFGHIJ012345");
        for (bad, why) in [
            (RedactionConfig { rules: RuleChoice::List(vec!["nope".into()]), ..Default::default() }, "unknown rule"),
            (RedactionConfig { rules: RuleChoice::Named("all".into()), ..Default::default() }, "default"),
            (
                RedactionConfig {
                    patterns: vec![CustomPattern { name: "x".into(), regex: "(".into() }],
                    ..Default::default()
                },
                "does not compile",
            ),
            (
                RedactionConfig {
                    patterns: vec![CustomPattern { name: "Bad-Name".into(), regex: "x".into() }],
                    ..Default::default()
                },
                "must match",
            ),
            (
                RedactionConfig {
                    patterns: (0..65).map(|i| CustomPattern { name: format!("p{i}"), regex: "x".into() }).collect(),
                    ..Default::default()
                },
                "at most 64",
            ),
        ] {
            assert!(bad.validate().unwrap_err().contains(why), "{why}");
        }
        let parsed: RedactionConfig = serde_json::from_value(json!({"rules": ["jwt"], "at_ingest": true})).unwrap();
        assert_eq!(parsed.rules, RuleChoice::List(vec!["jwt".into()]));
        assert!(RedactionConfig::default().is_default());
    }

    #[test]
    fn json_keeps_its_structure_and_escapes() {
        let r = default();
        let mut doc = json!({"input": [{"content": format!("key {}\nline two \"quoted\"", samples()[0].1), "role": "user"}],
                             "n": 1.5, "pem": PEM, "nested": {"password": "x", "list": ["password=abcdefgh1"]}});
        let mut counts = Counts::new();
        r.redact_json(&mut doc, &mut counts);
        assert_eq!(doc["input"][0]["content"], "key [REDACTED:openai_key]\nline two \"quoted\"");
        assert_eq!(doc["pem"], "[REDACTED:private_key]");
        assert_eq!(doc["nested"]["list"][0], "password=[REDACTED:assignment]");
        assert_eq!(doc["n"], json!(1.5));
        let keys: Vec<&String> = doc.as_object().unwrap().keys().collect();
        assert_eq!(keys, ["input", "n", "pem", "nested"]);
    }

    /// Property: any JSON document, secrets sprinkled in, stays valid JSON of
    /// the same shape; redacting it again changes nothing.
    #[test]
    fn redacting_any_json_keeps_its_shape_and_is_idempotent() {
        use crate::test_rng::XorShift;
        let r = default();
        let secrets = samples();
        let words = ["hello", "é", "\\", "\"", "\n", "password=", "Bearer ", "sk-", "eyJ", "-----BEGIN", "💡", "x"];
        let mut rng = XorShift(0x5eed_1234_abcd_9876);
        fn shape(v: &Value) -> Value {
            match v {
                Value::String(_) => Value::String(String::new()),
                Value::Array(a) => Value::Array(a.iter().map(shape).collect()),
                Value::Object(m) => Value::Object(m.iter().map(|(k, v)| (k.clone(), shape(v))).collect()),
                other => other.clone(),
            }
        }
        for _ in 0..500 {
            let text = |rng: &mut XorShift| {
                let mut s = String::new();
                for _ in 0..rng.next() % 6 {
                    if rng.next().is_multiple_of(3) {
                        s.push_str(&secrets[(rng.next() % secrets.len() as u64) as usize].1);
                    } else {
                        s.push_str(words[(rng.next() % words.len() as u64) as usize]);
                    }
                }
                s
            };
            let mut items = Vec::new();
            for i in 0..rng.next() % 5 {
                items.push(json!({"k": text(&mut rng), "n": i, "deep": [text(&mut rng), {"v": text(&mut rng)}]}));
            }
            let mut doc = json!({"items": items, "s": text(&mut rng), "b": true, "z": null});
            let before = shape(&doc);
            let mut counts = Counts::new();
            r.redact_json(&mut doc, &mut counts);
            let reparsed: Value = serde_json::from_str(&doc.to_string()).unwrap();
            assert_eq!(shape(&reparsed), before);
            let once = doc.clone();
            let mut again = Counts::new();
            r.redact_json(&mut doc, &mut again);
            assert_eq!(doc, once, "a second pass changed {once}");
            assert!(again.is_empty(), "{again:?}");
        }
    }
}
