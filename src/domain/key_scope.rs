//! What an API key reaches: its workspaces and its permissions. A runtime
//! serving many end users holds one key per user; a dashboard holds a key
//! that only reads.

use super::ids::WorkspaceName;
use chrono::{DateTime, SubsecRound, Utc};
use serde_json::{Value, json};
use std::collections::BTreeSet;

/// At most this many workspaces name one key.
pub const MAX_KEY_WORKSPACES: usize = 1_000;
const MAX_KEY_NAME_CHARS: usize = 200;

/// One thing a key may do; each route takes exactly one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Permission {
    /// Open sessions and append segments.
    Ingest,
    Close,
    /// Instructions, files, memory, selection, runs, sessions, jobs, events.
    Read,
    /// Memory edits.
    Edit,
    /// Layouts, webhooks, limits and usage, forget, export, import, keys, job retry.
    Manage,
}

impl schemars::JsonSchema for Permission {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Permission".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        let names: Vec<&str> = Self::ALL.iter().map(|p| p.as_str()).collect();
        schemars::json_schema!({"type": "string", "enum": names})
    }
}

impl Permission {
    pub const ALL: [Self; 5] = [Self::Ingest, Self::Close, Self::Read, Self::Edit, Self::Manage];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ingest => "ingest",
            Self::Close => "close",
            Self::Read => "read",
            Self::Edit => "edit",
            Self::Manage => "manage",
        }
    }

    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|p| p.as_str() == name)
    }

    fn bit(self) -> u8 {
        1 << (self as u8)
    }
}

/// A set of permissions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Permissions(u8);

impl Permissions {
    pub fn every() -> Self {
        Self::of(Permission::ALL)
    }

    pub fn of(permissions: impl IntoIterator<Item = Permission>) -> Self {
        Self(permissions.into_iter().fold(0, |bits, p| bits | p.bit()))
    }

    pub fn has(self, permission: Permission) -> bool {
        self.0 & permission.bit() != 0
    }

    pub fn includes(self, other: Self) -> bool {
        other.0 & !self.0 == 0
    }

    /// Whether these open a route that takes `permission`. An edit's answer
    /// tells what the files hold, so `edit` works only beside `read`, even
    /// for a key stored before that was refused at creation (SPEC §2.11).
    pub fn allow(self, permission: Permission) -> bool {
        self.has(permission) && (permission != Permission::Edit || self.has(Permission::Read))
    }

    /// Why a key may not be made with these, if it may not.
    pub fn refusal(self) -> Option<&'static str> {
        (self.has(Permission::Edit) && !self.has(Permission::Read))
            .then_some("A key with edit must also hold read: an edit's answer tells what the memory files hold.")
    }

    /// In the order of [`Permission::ALL`], whatever order they were given in.
    pub fn names(self) -> Vec<&'static str> {
        Permission::ALL.into_iter().filter(|p| self.has(*p)).map(Permission::as_str).collect()
    }

    /// The stored form: names joined by commas.
    pub fn stored(self) -> String {
        self.names().join(",")
    }

    pub fn from_stored(stored: &str) -> Option<Self> {
        stored.split(',').filter(|n| !n.is_empty()).map(Permission::parse).collect::<Option<Vec<_>>>().map(Self::of)
    }
}

/// The workspaces a key reaches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Workspaces {
    All,
    Only(BTreeSet<String>),
}

/// `"*"` or the names, as the API shows them.
impl serde::Serialize for Workspaces {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Self::All => serializer.serialize_str("*"),
            Self::Only(names) => names.serialize(serializer),
        }
    }
}

impl schemars::JsonSchema for Workspaces {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "KeyWorkspaces".into()
    }

    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        let name = generator.subschema_for::<crate::domain::ids::FileSafeId>();
        schemars::json_schema!({
            "description": "\"*\" (every workspace) or 1 to 1,000 workspace names",
            "oneOf": [
                {"type": "string", "const": "*"},
                {"type": "array", "minItems": 1, "maxItems": 1000, "items": name}
            ]
        })
    }
}

impl Workspaces {
    pub fn sees(&self, workspace: &str) -> bool {
        match self {
            Self::All => true,
            Self::Only(names) => names.contains(workspace),
        }
    }

    pub fn is_all(&self) -> bool {
        matches!(self, Self::All)
    }

    pub fn includes(&self, other: &Self) -> bool {
        match (self, other) {
            (Self::All, _) => true,
            (Self::Only(_), Self::All) => false,
            (Self::Only(mine), Self::Only(theirs)) => theirs.is_subset(mine),
        }
    }

    /// The stored form: `*` or a JSON array of names.
    pub fn stored(&self) -> String {
        match self {
            Self::All => "*".to_owned(),
            Self::Only(names) => serde_json::to_string(names).expect("names serialize"),
        }
    }

    pub fn from_stored(stored: &str) -> Option<Self> {
        if stored == "*" {
            return Some(Self::All);
        }
        serde_json::from_str::<BTreeSet<String>>(stored).ok().map(Self::Only)
    }

    /// The names as a JSON array for a query to range over; `None` for all.
    pub fn as_filter(&self) -> Option<String> {
        match self {
            Self::All => None,
            Self::Only(names) => Some(json!(names).to_string()),
        }
    }
}

/// What one key may do, and until when.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyScope {
    pub workspaces: Workspaces,
    pub permissions: Permissions,
    pub expires_at: Option<DateTime<Utc>>,
}

impl KeyScope {
    /// The key made with a tenant, and the admin's keys by default.
    pub fn unrestricted() -> Self {
        Self { workspaces: Workspaces::All, permissions: Permissions::every(), expires_at: None }
    }

    pub fn expired(&self, now: DateTime<Utc>) -> bool {
        self.expires_at.is_some_and(|at| at <= now)
    }

    /// A key with this scope may make a key with `wanted`: no workspace, no
    /// permission and no lifetime beyond its own.
    pub fn grants(&self, wanted: &Self) -> bool {
        let lifetime_within = match (self.expires_at, wanted.expires_at) {
            (None, _) => true,
            (Some(_), None) => false,
            (Some(mine), Some(theirs)) => theirs <= mine,
        };
        self.workspaces.includes(&wanted.workspaces) && self.permissions.includes(wanted.permissions) && lifetime_within
    }
}

/// A key asked for: its optional name and its scope.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyRequest {
    pub name: Option<String>,
    pub scope: KeyScope,
}

/// Checks the body of a key request. `defaults_to_every` (the admin's
/// route): absent `workspaces` and `permissions` mean every one; otherwise
/// both must be given.
pub fn parse_key_request(body: &Value, now: DateTime<Utc>, defaults_to_every: bool) -> Result<KeyRequest, String> {
    let Some(fields) = body.as_object() else { return Err("The body must be a JSON object.".into()) };
    if let Some(unknown) =
        fields.keys().find(|k| !["name", "workspaces", "permissions", "expires_at"].contains(&k.as_str()))
    {
        return Err(format!("Unknown field {unknown:?}; a key has name, workspaces, permissions and expires_at."));
    }
    let name = match fields.get("name") {
        None | Some(Value::Null) => None,
        Some(Value::String(n)) if !n.trim().is_empty() && n.chars().count() <= MAX_KEY_NAME_CHARS => {
            Some(n.trim().to_owned())
        }
        Some(_) => return Err(format!("name must be a string of 1 to {MAX_KEY_NAME_CHARS} characters.")),
    };
    let workspaces = match fields.get("workspaces") {
        None if defaults_to_every => Workspaces::All,
        None => return Err("workspaces is required: \"*\" or a list of workspace names.".into()),
        Some(value) => parse_workspaces(value)?,
    };
    let permissions = match fields.get("permissions") {
        None if defaults_to_every => Permissions::every(),
        None => return Err("permissions is required: a list of ingest, close, read, edit, manage.".into()),
        Some(value) => parse_permissions(value)?,
    };
    let expires_at = match fields.get("expires_at") {
        None | Some(Value::Null) => None,
        Some(value) => Some(parse_expiry(value, now)?),
    };
    Ok(KeyRequest { name, scope: KeyScope { workspaces, permissions, expires_at } })
}

fn parse_workspaces(value: &Value) -> Result<Workspaces, String> {
    const WANTED: &str = "workspaces must be \"*\" or a list of 1 to 1000 workspace names";
    if value.as_str() == Some("*") {
        return Ok(Workspaces::All);
    }
    let Some(items) = value.as_array() else { return Err(format!("{WANTED}.")) };
    if items.is_empty() || items.len() > MAX_KEY_WORKSPACES {
        return Err(format!("{WANTED}; it has {}.", items.len()));
    }
    let mut names = BTreeSet::new();
    for item in items {
        match item.as_str().and_then(WorkspaceName::parse) {
            Some(name) => names.insert(name.as_str().to_owned()),
            None => return Err(format!("{WANTED}; {item} is not a workspace name.")),
        };
    }
    Ok(Workspaces::Only(names))
}

fn parse_permissions(value: &Value) -> Result<Permissions, String> {
    const WANTED: &str = "permissions must be a non-empty list of ingest, close, read, edit, manage";
    let Some(items) = value.as_array().filter(|items| !items.is_empty()) else { return Err(format!("{WANTED}.")) };
    let permissions: Option<Vec<Permission>> = items.iter().map(|i| i.as_str().and_then(Permission::parse)).collect();
    permissions.map(Permissions::of).ok_or_else(|| format!("{WANTED}; got {value}."))
}

fn parse_expiry(value: &Value, now: DateTime<Utc>) -> Result<DateTime<Utc>, String> {
    let at = value
        .as_str()
        .and_then(super::time::parse_rfc3339)
        .ok_or_else(|| format!("expires_at must be an RFC 3339 instant with its offset; got {value}."))?;
    if at <= now {
        return Err(format!("expires_at ({value}) has passed; a key must expire in the future."));
    }
    // To the microsecond, as both databases keep instants: a key made with
    // its maker's own expiry must compare equal to it, not a few ns later.
    Ok(at.trunc_subsecs(6))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> DateTime<Utc> {
        "2026-12-03T12:00:00Z".parse().unwrap()
    }

    fn only(names: &[&str]) -> Workspaces {
        Workspaces::Only(names.iter().map(|n| (*n).to_owned()).collect())
    }

    #[test]
    fn permissions_round_trip_in_a_fixed_order() {
        let p = Permissions::of([Permission::Manage, Permission::Read]);
        assert_eq!(p.names(), ["read", "manage"]);
        assert_eq!(Permissions::from_stored(&p.stored()), Some(p));
        assert_eq!(Permissions::from_stored("ingest,close,read,edit,manage"), Some(Permissions::every()));
        assert_eq!(Permissions::from_stored("read,admin"), None);
        assert!(Permissions::every().includes(p));
        assert!(!p.includes(Permissions::of([Permission::Edit])));
    }

    #[test]
    fn workspaces_round_trip_and_nest() {
        assert_eq!(Workspaces::from_stored("*"), Some(Workspaces::All));
        let ab = only(&["b", "a"]);
        assert_eq!(ab.stored(), r#"["a","b"]"#);
        assert_eq!(Workspaces::from_stored(&ab.stored()), Some(ab.clone()));
        assert!(ab.sees("a") && !ab.sees("c") && Workspaces::All.sees("c"));
        assert!(Workspaces::All.includes(&ab) && ab.includes(&only(&["a"])));
        assert!(!ab.includes(&Workspaces::All) && !ab.includes(&only(&["a", "c"])));
        assert_eq!(ab.as_filter().as_deref(), Some(r#"["a","b"]"#));
        assert_eq!(Workspaces::All.as_filter(), None);
    }

    #[test]
    fn a_key_grants_only_what_it_holds() {
        let mine = KeyScope {
            workspaces: only(&["a", "b"]),
            permissions: Permissions::of([Permission::Read, Permission::Manage]),
            expires_at: Some(now()),
        };
        let within =
            KeyScope { workspaces: only(&["a"]), permissions: Permissions::of([Permission::Read]), ..mine.clone() };
        assert!(mine.grants(&within));
        assert!(!mine.grants(&KeyScope { workspaces: Workspaces::All, ..within.clone() }));
        assert!(!mine.grants(&KeyScope { permissions: Permissions::of([Permission::Ingest]), ..within.clone() }));
        assert!(!mine.grants(&KeyScope { expires_at: None, ..within.clone() }), "outliving its maker");
        let later = now() + chrono::Duration::seconds(1);
        assert!(!mine.grants(&KeyScope { expires_at: Some(later), ..within.clone() }));
        assert!(KeyScope::unrestricted().grants(&mine));
        assert!(mine.expired(now()) && !mine.expired(now() - chrono::Duration::seconds(1)));
    }

    #[test]
    fn key_requests_are_checked_field_by_field() {
        let ok = parse_key_request(
            &json!({"name": " alice ", "workspaces": ["alice", "alice"], "permissions": ["read", "ingest"],
                    "expires_at": "2027-01-01T00:00:00+01:00"}),
            now(),
            false,
        )
        .unwrap();
        assert_eq!(ok.name.as_deref(), Some("alice"));
        assert_eq!(ok.scope.workspaces, only(&["alice"]));
        assert_eq!(ok.scope.permissions.names(), ["ingest", "read"]);
        assert_eq!(ok.scope.expires_at.unwrap().to_rfc3339(), "2026-12-31T23:00:00+00:00");
        let precise =
            json!({"workspaces": "*", "permissions": ["read"], "expires_at": "2027-01-01T00:00:00.123456789Z"});
        let kept = parse_key_request(&precise, now(), false).unwrap().scope.expires_at.unwrap();
        assert_eq!(kept.to_rfc3339(), "2027-01-01T00:00:00.123456+00:00", "microseconds, as the databases keep");
        let every = parse_key_request(&json!({}), now(), true).unwrap();
        assert_eq!(every.scope, KeyScope::unrestricted());
        for (body, says) in [
            (json!([]), "JSON object"),
            (json!({"permissions": ["read"]}), "workspaces is required"),
            (json!({"workspaces": "*"}), "permissions is required"),
            (json!({"workspaces": [], "permissions": ["read"]}), "it has 0"),
            (json!({"workspaces": ["../x"], "permissions": ["read"]}), "not a workspace name"),
            (json!({"workspaces": "all", "permissions": ["read"]}), "workspaces must be"),
            (json!({"workspaces": "*", "permissions": []}), "non-empty list"),
            (json!({"workspaces": "*", "permissions": ["root"]}), "got [\"root\"]"),
            (json!({"workspaces": "*", "permissions": ["read"], "expires_at": "tomorrow"}), "RFC 3339"),
            (json!({"workspaces": "*", "permissions": ["read"], "expires_at": "2026-12-03T12:00:00Z"}), "has passed"),
            (json!({"workspaces": "*", "permissions": ["read"], "name": ""}), "name must be"),
            (json!({"workspaces": "*", "permissions": ["read"], "scopes": 1}), "Unknown field \"scopes\""),
        ] {
            let error = parse_key_request(&body, now(), false).unwrap_err();
            assert!(error.contains(says), "{body}: {error}");
        }
        let too_many: Vec<String> = (0..=MAX_KEY_WORKSPACES).map(|n| format!("w{n}")).collect();
        let error = parse_key_request(&json!({"workspaces": too_many, "permissions": ["read"]}), now(), false);
        assert!(error.unwrap_err().contains("it has 1001"));
    }
}
