//! Why a tool's arguments do not fit it, in words that name the argument:
//! serde's own messages ("invalid type: integer `-1`, expected u64") leave
//! the model guessing which one it got wrong.

use serde_json::{Map, Value};

/// The first argument of `raw` that the tool's `schema` refuses, and why;
/// `None` when the schema's properties and types find nothing wrong.
pub(super) fn misfit(schema: &Map<String, Value>, raw: &Map<String, Value>) -> Option<String> {
    let properties = schema.get("properties")?.as_object()?;
    for (name, value) in raw {
        let Some(property) = properties.get(name) else {
            let known: Vec<&str> = properties.keys().map(String::as_str).collect();
            return Some(format!("no argument {name} (the arguments are {}).", known.join(", ")));
        };
        if let Some(why) = refusal(property, value) {
            return Some(format!("argument {name} must be {why}, not {}.", shown(value)));
        }
    }
    let required = schema.get("required").and_then(Value::as_array).into_iter().flatten();
    required
        .filter_map(Value::as_str)
        .find(|name| !raw.contains_key(*name))
        .map(|name| format!("argument {name} is required."))
}

/// A number or a boolean given for a string argument, as its text: clients
/// and models send `"query": 6543` for the word 6543.
pub(super) fn coerce_to_strings(schema: &Map<String, Value>, raw: &mut Map<String, Value>) {
    let Some(properties) = schema.get("properties").and_then(Value::as_object) else { return };
    for (name, value) in raw.iter_mut() {
        let wants_string = properties.get(name).and_then(|p| p.get("type")).is_some_and(|t| match t {
            Value::String(one) => one == "string",
            Value::Array(many) => many.iter().any(|t| t == "string"),
            _ => false,
        });
        if wants_string && (value.is_number() || value.is_boolean()) {
            *value = Value::String(value.to_string());
        }
    }
}

/// What `property` wants that `value` is not.
fn refusal(property: &Value, value: &Value) -> Option<String> {
    let types: Vec<&str> = match property.get("type") {
        Some(Value::String(one)) => vec![one.as_str()],
        Some(Value::Array(many)) => many.iter().filter_map(Value::as_str).collect(),
        _ => return None,
    };
    let nullable = types.contains(&"null") || property.get("nullable") == Some(&Value::Bool(true));
    if value.is_null() && nullable {
        return None;
    }
    let wanted = types.iter().copied().find(|t| *t != "null")?;
    let fits = match wanted {
        "string" => value.is_string(),
        "boolean" => value.is_boolean(),
        "integer" => value.is_i64() || value.is_u64(),
        "number" => value.is_number(),
        "array" => value.is_array(),
        "object" => value.is_object(),
        _ => true,
    };
    if !fits {
        return Some(described(wanted).to_owned());
    }
    let number = value.as_f64()?;
    let bound = |key: &str| property.get(key).and_then(Value::as_f64);
    match (bound("minimum"), bound("maximum")) {
        (Some(min), _) if number < min => Some(format!("at least {min}")),
        (_, Some(max)) if number > max => Some(format!("at most {max}")),
        _ => None,
    }
}

fn described(json_type: &str) -> &'static str {
    match json_type {
        "string" => "a string",
        "boolean" => "true or false",
        "integer" => "a whole number",
        "number" => "a number",
        "array" => "a list",
        _ => "an object",
    }
}

/// A value as the message quotes it: its JSON, the start of it when long.
fn shown(value: &Value) -> String {
    let json = value.to_string();
    match json.char_indices().nth(40) {
        Some((cut, _)) => format!("{}…", &json[..cut]),
        None => json,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Map<String, Value> {
        raw(json!({
            "properties": {
                "path": {"type": "string"},
                "offset": {"type": ["integer", "null"], "minimum": 1},
                "context": {"type": ["integer", "null"], "minimum": 0, "maximum": 20},
                "regex": {"type": ["boolean", "null"]},
            },
            "required": ["path"]
        }))
    }

    fn raw(value: Value) -> Map<String, Value> {
        value.as_object().unwrap().clone()
    }

    #[test]
    fn each_refusal_names_the_argument() {
        let misfit = |v| misfit(&schema(), &raw(v));
        assert_eq!(misfit(json!({"path": "a", "offset": 0})).unwrap(), "argument offset must be at least 1, not 0.");
        assert_eq!(
            misfit(json!({"path": "a", "context": 21})).unwrap(),
            "argument context must be at most 20, not 21."
        );
        assert_eq!(misfit(json!({"path": 3})).unwrap(), "argument path must be a string, not 3.");
        assert_eq!(
            misfit(json!({"path": "a", "offset": 1.5})).unwrap(),
            "argument offset must be a whole number, not 1.5."
        );
        assert_eq!(misfit(json!({"offset": 2})).unwrap(), "argument path is required.");
        let unknown = misfit(json!({"path": "a", "mode": "x"})).unwrap();
        assert_eq!(unknown, "no argument mode (the arguments are path, offset, context, regex).");
        let long = misfit(json!({"path": "a", "regex": "y".repeat(100)})).unwrap();
        assert!(long.ends_with("…."), "{long}");
        assert_eq!(misfit(json!({"path": "a", "offset": null, "regex": true})), None);
    }

    #[test]
    fn a_number_for_a_string_is_its_text() {
        let mut given = raw(json!({"path": 6543, "offset": 2, "regex": true}));
        coerce_to_strings(&schema(), &mut given);
        assert_eq!(Value::Object(given), json!({"path": "6543", "offset": 2, "regex": true}));
    }
}
