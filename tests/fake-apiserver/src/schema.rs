//! Structural-schema handling for custom resources: pruning, defaulting and validation.
//!
//! Covered: `type`, `nullable`, `required`, `enum`, `minimum`/`maximum` (and their exclusive
//! flags), `minLength`/`maxLength`, `pattern`, `minItems`/`maxItems`, `uniqueItems`,
//! `minProperties`/`maxProperties`, `properties`, `additionalProperties`, `items`,
//! `allOf`/`anyOf`/`oneOf`/`not`, `x-kubernetes-int-or-string`,
//! `x-kubernetes-preserve-unknown-fields`, `x-kubernetes-embedded-resource`, `default`.
//! `x-kubernetes-validations` (CEL) are evaluated by kube's `cel` feature (kube-cel) elsewhere.
//! Not covered: `format` checks and list-type uniqueness (`x-kubernetes-list-type: set|map`).

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use regex::Regex;
use serde_json::{Map, Value};

/// Removes fields the schema does not declare and non-nullable nulls, as the real server prunes.
pub(crate) fn prune(schema: &Value, value: &mut Value, root: bool) {
    match value {
        Value::Object(map) => {
            let preserve = schema["x-kubernetes-preserve-unknown-fields"].as_bool() == Some(true);
            let embedded = schema["x-kubernetes-embedded-resource"].as_bool() == Some(true);
            let props = schema.get("properties").and_then(Value::as_object);
            let additional = schema.get("additionalProperties").filter(|a| a.is_object());
            let keep_meta = root || embedded;
            let keys: Vec<String> = map.keys().cloned().collect();
            for k in keys {
                let is_meta = keep_meta && matches!(k.as_str(), "apiVersion" | "kind" | "metadata");
                let sub = props.and_then(|p| p.get(&k)).or(additional);
                match sub {
                    Some(s) => {
                        let v = map.get_mut(&k).expect("key listed above");
                        if v.is_null() && s["nullable"].as_bool() != Some(true) {
                            map.remove(&k);
                        } else if !(is_meta && k == "metadata") {
                            prune(s, v, false);
                        }
                    }
                    None if is_meta || preserve => {}
                    None if props.is_none()
                        && schema.get("additionalProperties").and_then(Value::as_bool)
                            == Some(true) => {}
                    None => {
                        map.remove(&k);
                    }
                }
            }
        }
        Value::Array(items) => {
            if let Some(s) = schema.get("items") {
                for i in items {
                    prune(s, i, false);
                }
            }
        }
        _ => {}
    }
}

/// Fills absent properties that declare a `default`, recursively.
pub(crate) fn apply_defaults(schema: &Value, value: &mut Value) {
    match value {
        Value::Object(map) => {
            if let Some(props) = schema.get("properties").and_then(Value::as_object) {
                for (k, s) in props {
                    if !map.contains_key(k)
                        && let Some(d) = s.get("default")
                    {
                        map.insert(k.clone(), d.clone());
                    }
                }
                for (k, v) in map.iter_mut() {
                    if let Some(s) = props.get(k) {
                        apply_defaults(s, v);
                    }
                }
            } else if let Some(s) = schema.get("additionalProperties").filter(|a| a.is_object()) {
                for v in map.values_mut() {
                    apply_defaults(s, v);
                }
            }
        }
        Value::Array(items) => {
            if let Some(s) = schema.get("items") {
                for i in items {
                    apply_defaults(s, i);
                }
            }
        }
        _ => {}
    }
}

fn regex(pattern: &str) -> Option<Regex> {
    static CACHE: OnceLock<Mutex<HashMap<String, Option<Regex>>>> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    let mut cache = cache.lock().unwrap_or_else(|p| p.into_inner());
    cache
        .entry(pattern.to_string())
        .or_insert_with(|| Regex::new(pattern).ok())
        .clone()
}

fn show(v: &Value) -> String {
    match v {
        Value::String(s) => format!("{s:?}"),
        other => other.to_string(),
    }
}

fn join(path: &str, field: &str) -> String {
    if path.is_empty() {
        field.to_string()
    } else {
        format!("{path}.{field}")
    }
}

/// Validates `value` at `path` and appends `(field, message)` causes.
pub(crate) fn validate(
    schema: &Value,
    value: &Value,
    path: &str,
    errs: &mut Vec<(String, String)>,
) {
    let mut fail = |msg: String| errs.push((path.to_string(), msg));
    if value.is_null() {
        if schema["nullable"].as_bool() != Some(true) && schema.get("type").is_some() {
            fail(format!(
                "Invalid value: \"null\": {path} in body must be of type {}: \"null\"",
                schema["type"].as_str().unwrap_or("object")
            ));
        }
        return;
    }
    let int_or_string = schema["x-kubernetes-int-or-string"].as_bool() == Some(true);
    let type_ok = match (schema.get("type").and_then(Value::as_str), value) {
        _ if int_or_string => value.is_string() || value.is_i64() || value.is_u64(),
        (None, _) => true,
        (Some("object"), Value::Object(_)) => true,
        (Some("array"), Value::Array(_)) => true,
        (Some("string"), Value::String(_)) => true,
        (Some("boolean"), Value::Bool(_)) => true,
        (Some("number"), Value::Number(_)) => true,
        (Some("integer"), Value::Number(n)) => n.is_i64() || n.is_u64(),
        _ => false,
    };
    if !type_ok {
        let want = schema["type"].as_str().unwrap_or("integer or string");
        let got = match value {
            Value::Object(_) => "object",
            Value::Array(_) => "array",
            Value::String(_) => "string",
            Value::Bool(_) => "boolean",
            Value::Number(n) if n.is_f64() => "number",
            Value::Number(_) => "integer",
            Value::Null => "null",
        };
        fail(format!(
            "Invalid value: \"{got}\": {path} in body must be of type {want}: \"{got}\""
        ));
        return;
    }
    if let Some(options) = schema.get("enum").and_then(Value::as_array)
        && !options.contains(value)
    {
        let list: Vec<String> = options.iter().map(show).collect();
        fail(format!(
            "Unsupported value: {}: supported values: {}",
            show(value),
            list.join(", ")
        ));
    }
    if let Some(x) = value.as_f64() {
        if let Some(max) = schema.get("maximum").and_then(Value::as_f64) {
            let exclusive = schema["exclusiveMaximum"].as_bool() == Some(true);
            if x > max || (exclusive && x == max) {
                let rel = if exclusive {
                    "less than"
                } else {
                    "less than or equal to"
                };
                fail(format!(
                    "Invalid value: {value}: {path} in body should be {rel} {max}"
                ));
            }
        }
        if let Some(min) = schema.get("minimum").and_then(Value::as_f64) {
            let exclusive = schema["exclusiveMinimum"].as_bool() == Some(true);
            if x < min || (exclusive && x == min) {
                let rel = if exclusive {
                    "greater than"
                } else {
                    "greater than or equal to"
                };
                fail(format!(
                    "Invalid value: {value}: {path} in body should be {rel} {min}"
                ));
            }
        }
    }
    if let Value::String(s) = value {
        let len = s.chars().count() as u64;
        if let Some(max) = schema.get("maxLength").and_then(Value::as_u64)
            && len > max
        {
            fail(format!("Too long: may not be more than {max} bytes"));
        }
        if let Some(min) = schema.get("minLength").and_then(Value::as_u64)
            && len < min
        {
            fail(format!(
                "Invalid value: {}: {path} in body should be at least {min} chars long",
                show(value)
            ));
        }
        if let Some(p) = schema.get("pattern").and_then(Value::as_str)
            && let Some(re) = regex(p)
            && !re.is_match(s)
        {
            fail(format!(
                "Invalid value: {}: {path} in body should match '{p}'",
                show(value)
            ));
        }
    }
    match value {
        Value::Array(items) => {
            let n = items.len() as u64;
            if let Some(max) = schema.get("maxItems").and_then(Value::as_u64)
                && n > max
            {
                fail(format!("Too many: {n}: must have at most {max} items"));
            }
            if let Some(min) = schema.get("minItems").and_then(Value::as_u64)
                && n < min
            {
                fail(format!(
                    "Invalid value: {n}: {path} in body should have at least {min} items"
                ));
            }
            if schema["uniqueItems"].as_bool() == Some(true) {
                for (i, a) in items.iter().enumerate() {
                    if items[..i].contains(a) {
                        fail(format!("Duplicate value: {}", show(a)));
                    }
                }
            }
            if let Some(s) = schema.get("items") {
                for (i, item) in items.iter().enumerate() {
                    validate(s, item, &format!("{path}[{i}]"), errs);
                }
            }
        }
        Value::Object(map) => {
            validate_object(schema, map, path, errs);
        }
        _ => {}
    }
    validate_combinators(schema, value, path, errs);
}

fn validate_object(
    schema: &Value,
    map: &Map<String, Value>,
    path: &str,
    errs: &mut Vec<(String, String)>,
) {
    let n = map.len() as u64;
    if let Some(max) = schema.get("maxProperties").and_then(Value::as_u64)
        && n > max
    {
        errs.push((
            path.to_string(),
            format!("Too many: {n}: must have at most {max} items"),
        ));
    }
    if let Some(min) = schema.get("minProperties").and_then(Value::as_u64)
        && n < min
    {
        errs.push((
            path.to_string(),
            format!("Invalid value: {n}: {path} in body should have at least {min} properties"),
        ));
    }
    for r in schema
        .get("required")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
    {
        if !map.contains_key(r) {
            errs.push((join(path, r), "Required value".to_string()));
        }
    }
    let props = schema.get("properties").and_then(Value::as_object);
    let additional = schema.get("additionalProperties").filter(|a| a.is_object());
    for (k, v) in map {
        // metadata of the root (and of embedded resources) is the server's business, not the schema's.
        if path.is_empty() && matches!(k.as_str(), "metadata" | "apiVersion" | "kind") {
            continue;
        }
        if let Some(s) = props.and_then(|p| p.get(k)).or(additional) {
            validate(s, v, &join(path, k), errs);
        }
    }
}

fn validate_combinators(
    schema: &Value,
    value: &Value,
    path: &str,
    errs: &mut Vec<(String, String)>,
) {
    let passes = |s: &Value| {
        let mut e = Vec::new();
        validate(s, value, path, &mut e);
        e.is_empty()
    };
    for s in schema
        .get("allOf")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        validate(s, value, path, errs);
    }
    if let Some(any) = schema.get("anyOf").and_then(Value::as_array)
        && !any.iter().any(passes)
    {
        errs.push((
            path.to_string(),
            format!(
                "Invalid value: {}: must validate at least one schema (anyOf)",
                show(value)
            ),
        ));
    }
    if let Some(one) = schema.get("oneOf").and_then(Value::as_array)
        && one.iter().filter(|s| passes(s)).count() != 1
    {
        errs.push((
            path.to_string(),
            format!(
                "Invalid value: {}: must validate one and only one schema (oneOf)",
                show(value)
            ),
        ));
    }
    if let Some(not) = schema.get("not")
        && passes(not)
    {
        errs.push((
            path.to_string(),
            format!(
                "Invalid value: {}: must not validate the schema (not)",
                show(value)
            ),
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({
            "type": "object",
            "properties": {
                "spec": {
                    "type": "object",
                    "required": ["size"],
                    "properties": {
                        "size": {"type": "integer", "minimum": 1, "maximum": 10},
                        "mode": {"type": "string", "enum": ["A", "B"], "default": "A"},
                        "name": {"type": "string", "pattern": "^[a-z]+$", "maxLength": 5},
                        "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 2},
                        "q": {"x-kubernetes-int-or-string": true},
                        "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}
                    }
                }
            }
        })
    }

    fn check(v: Value) -> Vec<(String, String)> {
        let mut e = Vec::new();
        validate(&schema(), &v, "", &mut e);
        e
    }

    #[test]
    fn validation_names_fields() {
        assert!(check(json!({"spec": {"size": 3, "q": "1Gi"}})).is_empty());
        assert_eq!(check(json!({"spec": {}}))[0].0, "spec.size");
        assert_eq!(check(json!({"spec": {"size": "3"}}))[0].0, "spec.size");
        assert_eq!(check(json!({"spec": {"size": 11}}))[0].0, "spec.size");
        assert_eq!(
            check(json!({"spec": {"size": 1, "mode": "C"}}))[0].0,
            "spec.mode"
        );
        assert_eq!(
            check(json!({"spec": {"size": 1, "name": "ABC"}}))[0].0,
            "spec.name"
        );
        assert_eq!(
            check(json!({"spec": {"size": 1, "tags": ["a", "b", "c"]}}))[0].0,
            "spec.tags"
        );
        assert_eq!(
            check(json!({"spec": {"size": 1, "tags": [1]}}))[0].0,
            "spec.tags[0]"
        );
        assert_eq!(check(json!({"spec": {"size": 1, "q": 1.5}}))[0].0, "spec.q");
    }

    #[test]
    fn pruning_and_defaults() {
        let mut v = json!({
            "apiVersion": "x/v1", "kind": "K", "metadata": {"name": "a", "anything": 1},
            "spec": {"size": 1, "bogus": true, "free": {"k": {"deep": 1}}},
            "junk": 1
        });
        prune(&schema(), &mut v, true);
        apply_defaults(&schema(), &mut v);
        assert_eq!(
            v,
            json!({
                "apiVersion": "x/v1", "kind": "K", "metadata": {"name": "a", "anything": 1},
                "spec": {"size": 1, "mode": "A", "free": {"k": {"deep": 1}}}
            })
        );
    }
}
