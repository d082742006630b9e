//! Test helpers: what the API server would say about an object, from the generated CRD alone.
//!
//! The OpenAPI value checks (type, enum, pattern, bounds, lengths, required) are re-implemented
//! here for the subset of the schema language the CRDs use; the CEL `x-kubernetes-validations`
//! run in kube's client-side CEL evaluator (`kube/cel`, a dev-dependency only).

#![allow(dead_code)]

use kube::core::cel::Validator;
use serde_json::Value;

/// The `openAPIV3Schema` of the CRD for `kind`.
pub fn schema_of(kind: &str) -> Value {
    let crd = nodepools::crds::all()
        .into_iter()
        .find(|c| c.spec.names.kind == kind)
        .expect("known kind");
    let schema = crd.spec.versions[0]
        .schema
        .as_ref()
        .and_then(|s| s.open_api_v3_schema.as_ref())
        .expect("CRD has a schema");
    serde_json::to_value(schema).expect("schema serializes")
}

/// Every problem the API server would report for `object` (an object of `kind` as JSON):
/// OpenAPI value checks first, then CEL rules (skipped when a value has the wrong type, as
/// the server cannot evaluate rules over an object it could not decode).
pub fn server_side(kind: &str, object: &Value) -> Vec<String> {
    let schema = schema_of(kind);
    let mut out = Vec::new();
    check(&schema, object, "", &mut out);
    if !out
        .iter()
        .any(|e| e.contains("must be of type") || e.contains("must not be null"))
        && let Err(errs) = Validator::new().validate(&schema, object, None)
    {
        out.extend(
            errs.iter()
                .map(|e| format!("{}: {}", e.field_path, e.message)),
        );
    }
    out
}

fn join(path: &str, field: &str) -> String {
    if path.is_empty() {
        field.to_string()
    } else {
        format!("{path}.{field}")
    }
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn check(schema: &Value, v: &Value, path: &str, out: &mut Vec<String>) {
    let get = |k: &str| schema.get(k);
    if v.is_null() {
        if get("nullable") != Some(&Value::Bool(true)) {
            out.push(format!("{path}: must not be null"));
        }
        return;
    }
    let int_or_string = get("x-kubernetes-int-or-string") == Some(&Value::Bool(true));
    let actual = type_name(v);
    if int_or_string {
        if actual != "integer" && actual != "string" {
            out.push(format!("{path}: must be an integer or a string"));
            return;
        }
    } else if let Some(Value::String(t)) = get("type") {
        let ok = t == actual || (t == "number" && actual == "integer");
        if !ok {
            out.push(format!("{path}: must be of type {t}, not {actual}"));
            return;
        }
    }
    if let Some(Value::Array(allowed)) = get("enum")
        && !allowed.contains(v)
    {
        out.push(format!(
            "{path}: {v} is not one of {}",
            Value::Array(allowed.clone())
        ));
    }
    match v {
        Value::String(s) => {
            if let Some(Value::String(p)) = get("pattern") {
                let re = regex::Regex::new(p).expect("schema pattern compiles");
                if !re.is_match(s) {
                    out.push(format!("{path}: {s:?} does not match {p}"));
                }
            }
            let n = s.chars().count() as u64;
            if let Some(max) = get("maxLength").and_then(Value::as_u64)
                && n > max
            {
                out.push(format!("{path}: longer than {max} characters"));
            }
            if let Some(min) = get("minLength").and_then(Value::as_u64)
                && n < min
            {
                out.push(format!("{path}: shorter than {min} characters"));
            }
        }
        Value::Number(n) => {
            let x = n.as_f64().unwrap_or(f64::NAN);
            if let Some(min) = get("minimum").and_then(Value::as_f64)
                && x < min
            {
                out.push(format!("{path}: {n} is less than {min}"));
            }
            if let Some(max) = get("maximum").and_then(Value::as_f64)
                && x > max
            {
                out.push(format!("{path}: {n} is greater than {max}"));
            }
        }
        Value::Array(items) => {
            if let Some(max) = get("maxItems").and_then(Value::as_u64)
                && items.len() as u64 > max
            {
                out.push(format!("{path}: more than {max} items"));
            }
            if let Some(item_schema) = get("items") {
                for (i, item) in items.iter().enumerate() {
                    check(item_schema, item, &format!("{path}[{i}]"), out);
                }
            }
        }
        Value::Object(map) => {
            if let Some(Value::Array(required)) = get("required") {
                for r in required.iter().filter_map(Value::as_str) {
                    if !map.contains_key(r) {
                        out.push(format!("{}: required", join(path, r)));
                    }
                }
            }
            if let Some(max) = get("maxProperties").and_then(Value::as_u64)
                && map.len() as u64 > max
            {
                out.push(format!("{path}: more than {max} properties"));
            }
            let props = get("properties").and_then(Value::as_object);
            let additional = get("additionalProperties").filter(|a| a.is_object());
            for (k, child) in map {
                if let Some(s) = props.and_then(|p| p.get(k)) {
                    check(s, child, &join(path, k), out);
                } else if let Some(s) = additional {
                    check(s, child, &format!("{path}[{k:?}]"), out);
                }
                // Unknown fields are pruned by the server, not rejected.
            }
        }
        _ => {}
    }
}
