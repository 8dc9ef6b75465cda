//! `openapi.yaml`, generated. Its prose — the summaries, parameters, and which
//! status answers with which schema — is written once in `openapi.base.yaml`;
//! what the code already knows is taken from the code: the schema of every
//! answer and body from its Rust type (schemars reads the serde attributes
//! the handlers serialise with), and each operation's credential and
//! permission from the route table the authorization layer enforces.
//! `scripts/generate-openapi.sh` writes the result, and a test fails when the
//! committed file is not what it writes.

use super::Access;
use schemars::Schema;
use schemars::generate::{SchemaGenerator, SchemaSettings};
use schemars::transform::{Transform, transform_subschemas};
use serde_json::{Map, Value};

mod registry;

/// The document: `base` with its schemas completed from the types and its
/// operations' credentials from the route table. Refused, naming the route
/// or schema, when `base` and the code disagree (a route undocumented, an
/// operation no route serves, a schema written twice or not at all).
pub fn document(mut base: Value) -> Result<Value, String> {
    complete_operations(&mut base)?;
    let schemas = base
        .pointer_mut("/components/schemas")
        .and_then(Value::as_object_mut)
        .ok_or("the base has no components.schemas")?;
    for (name, schema) in generated_schemas()? {
        if schemas.insert(name.clone(), schema).is_some() {
            return Err(format!("schema {name} is generated from its type: remove it from the base"));
        }
    }
    check_references(&base)?;
    Ok(base)
}

/// The schemas of the types routes answer with (as they are serialised) and
/// take (as they are deserialised), named as the document names them.
pub fn generated_schemas() -> Result<Map<String, Value>, String> {
    let mut answers = generator(SchemaSettings::for_serialize);
    registry::answers(&mut answers);
    let mut bodies = generator(SchemaSettings::for_deserialize);
    registry::bodies(&mut bodies);
    let mut schemas = answers.take_definitions(true);
    for (name, schema) in bodies.take_definitions(true) {
        match schemas.get(&name) {
            Some(answered) if *answered != schema => {
                return Err(format!("schema {name} differs as an answer and as a body: give one a name of its own"));
            }
            _ => {
                schemas.insert(name, schema);
            }
        }
    }
    Ok(schemas)
}

fn generator(contract: fn(SchemaSettings) -> SchemaSettings) -> SchemaGenerator {
    let mut settings = contract(SchemaSettings::draft2020_12());
    settings.definitions_path = "/components/schemas".into();
    settings.meta_schema = None;
    settings.with_transform(ForReaders).into_generator()
}

/// What the code's documentation says for its maintainers, made fit for the
/// document: a unit enum whose variants carry doc comments is an `enum` of
/// its names (schemars writes a `oneOf` of constants), and citations of the
/// contract's sections are left to the code.
#[derive(Clone)]
struct ForReaders;

impl Transform for ForReaders {
    fn transform(&mut self, schema: &mut Schema) {
        transform_subschemas(self, schema);
        let Some(object) = schema.as_object_mut() else { return };
        if let Some(Value::String(description)) = object.get_mut("description") {
            *description = unwrapped(&without_citations(description));
        }
        if let Some(names) = object.get("oneOf").and_then(Value::as_array).and_then(|v| unit_variant_names(v)) {
            object.shift_remove("oneOf");
            object.insert("type".into(), "string".into());
            object.insert("enum".into(), Value::Array(names));
        }
    }
}

/// The names of a unit enum's variants, each a `const` or an `enum` of
/// names; `None` when one variant is anything else.
fn unit_variant_names(variants: &[Value]) -> Option<Vec<Value>> {
    let mut names = Vec::new();
    for variant in variants {
        match (variant.get("const"), variant.get("enum").and_then(Value::as_array)) {
            (Some(name @ Value::String(_)), None) => names.push(name.clone()),
            (None, Some(listed)) if listed.iter().all(Value::is_string) => names.extend(listed.iter().cloned()),
            _ => return None,
        }
    }
    Some(names)
}

/// A doc comment's text as one line per paragraph.
fn unwrapped(text: &str) -> String {
    text.split("\n\n")
        .map(|paragraph| paragraph.split('\n').map(str::trim).collect::<Vec<_>>().join(" "))
        .collect::<Vec<_>>()
        .join("\n\n")
}

/// `text` without its parenthesised citations (`(SPEC §2.9)`, `(R-P1-3)`).
fn without_citations(text: &str) -> String {
    let mut kept = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find(" (") {
        let cited = &rest[start + 2..];
        let end = cited.find(')').filter(|_| cited.starts_with("SPEC §") || cited.starts_with("R-"));
        match end {
            Some(end) => {
                kept.push_str(&rest[..start]);
                rest = &cited[end + 1..];
            }
            None => {
                kept.push_str(&rest[..start + 2]);
                rest = cited;
            }
        }
    }
    kept.push_str(rest);
    kept
}

/// Each operation's `security` and `x-permission`, from the route that
/// serves it; the base writes neither.
fn complete_operations(base: &mut Value) -> Result<(), String> {
    let paths = base.get_mut("paths").and_then(Value::as_object_mut).ok_or("the base has no paths")?;
    let mut served = 0;
    for (method, path, access) in super::route_list() {
        let template = path.replace("{*", "{");
        let method = method.as_str().to_lowercase();
        let operation = paths
            .get_mut(&template)
            .and_then(|item| item.get_mut(&method))
            .and_then(Value::as_object_mut)
            .ok_or_else(|| format!("{method} {template} is served but not documented"))?;
        if operation.contains_key("security") || operation.contains_key("x-permission") {
            return Err(format!("{method} {template}: security and x-permission come from the route table"));
        }
        *operation = with_credentials(std::mem::take(operation), access);
        served += 1;
    }
    let documented: usize =
        paths.values().filter_map(Value::as_object).flat_map(|item| item.keys()).filter(|k| *k != "parameters").count();
    if documented != served {
        return Err(format!("{documented} operations documented, {served} routes served"));
    }
    Ok(())
}

/// The operation with its credential after its summary and description.
fn with_credentials(operation: Map<String, Value>, access: Access) -> Map<String, Value> {
    let (heading, rest): (Vec<_>, Vec<_>) =
        operation.into_iter().partition(|(k, _)| k == "summary" || k == "description");
    let mut completed: Map<String, Value> = heading.into_iter().collect();
    match access {
        Access::Open => {
            completed.insert("security".into(), Value::Array(Vec::new()));
        }
        Access::Admin => {
            completed.insert("security".into(), serde_json::json!([{"adminToken": []}]));
        }
        Access::Key(permission, _) => {
            completed.insert("x-permission".into(), permission.as_str().into());
        }
    }
    completed.extend(rest);
    completed
}

/// Every `$ref` names a component the document has.
fn check_references(document: &Value) -> Result<(), String> {
    let mut stack = vec![document];
    while let Some(value) = stack.pop() {
        match value {
            Value::Object(map) => {
                if let Some(Value::String(target)) = map.get("$ref") {
                    let pointer = target.strip_prefix('#').ok_or_else(|| format!("{target}: not in this document"))?;
                    document.pointer(pointer).ok_or_else(|| format!("{target}: no such component"))?;
                }
                stack.extend(map.values());
            }
            Value::Array(items) => stack.extend(items),
            _ => {}
        }
    }
    Ok(())
}
