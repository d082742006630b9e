//! Checking an object against its CRD's OpenAPI schema, as the API server would (types, enums,
//! patterns, lengths, bounds, required fields), and, for files users hand us, the fields the
//! schema does not know, which the server would drop without a word.
//!
//! Only the subset of the schema language the generated CRDs use is read. Unknown fields are
//! never an error for objects read from the API server: the server prunes them, and a newer
//! CRD may carry fields this build does not know yet.

use std::collections::BTreeMap;
use std::sync::LazyLock;

use autoscaler_core::vocabulary::closest;
use regex::Regex;
use serde_json::Value;

use crate::error::FieldError;

/// The fields of `metadata` (`ObjectMeta`); the CRD schema leaves `metadata` open, the server
/// checks it against this list itself.
pub const OBJECT_META_FIELDS: [&str; 16] = [
    "annotations",
    "creationTimestamp",
    "deletionGracePeriodSeconds",
    "deletionTimestamp",
    "finalizers",
    "generateName",
    "generation",
    "labels",
    "managedFields",
    "name",
    "namespace",
    "ownerReferences",
    "resourceVersion",
    "selfLink",
    "uid",
    "clusterName",
];

/// What [`check`] looks at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Checks {
    /// The server's value checks (type, enum, pattern, lengths, bounds, required).
    pub values: bool,
    /// Fields the schema does not declare (and `metadata` fields `ObjectMeta` does not have).
    pub unknown_fields: bool,
}

impl Checks {
    /// Everything: what `gpu-autoscaler validate` reports.
    pub const ALL: Checks = Checks {
        values: true,
        unknown_fields: true,
    };
    /// Unknown fields only: strict loading of files, whose values the Rust validation reads.
    pub const UNKNOWN_FIELDS: Checks = Checks {
        values: false,
        unknown_fields: true,
    };
    /// Value checks only: what the API server rejects.
    pub const SERVER: Checks = Checks {
        values: true,
        unknown_fields: false,
    };
}

/// The `openAPIV3Schema` of the CRD of `kind` (`NodePool`, `NodeClaim`) as JSON, or `None` for
/// a kind this API does not define.
pub fn schema_of(kind: &str) -> Option<&'static Value> {
    static SCHEMAS: LazyLock<BTreeMap<String, Value>> = LazyLock::new(|| {
        crate::crds::all()
            .into_iter()
            .filter_map(|crd| {
                let schema = crd.spec.versions.first()?.schema.as_ref()?;
                let value = serde_json::to_value(schema.open_api_v3_schema.as_ref()?).ok()?;
                Some((crd.spec.names.kind, value))
            })
            .collect()
    });
    SCHEMAS.get(kind)
}

/// Every problem of `object` against `schema`, in document order, with paths from the object's
/// root (`spec.disruption.budgets[0].nodes`, `spec.limits["cpu"]`). A value of the wrong type
/// is reported once and not looked into.
pub fn check(schema: &Value, object: &Value, checks: Checks) -> Vec<FieldError> {
    let mut out = Vec::new();
    walk(schema, object, "", checks, &mut out);
    out
}

fn push(out: &mut Vec<FieldError>, path: &str, message: String) {
    out.push(FieldError {
        path: if path.is_empty() {
            "<root>".to_string()
        } else {
            path.to_string()
        },
        message,
        restates: None,
    });
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

/// A compiled schema pattern; patterns come from our own CRDs, so one that does not compile
/// is reported against the field rather than trusted.
fn pattern(p: &str) -> Result<Regex, regex::Error> {
    static CACHE: LazyLock<std::sync::Mutex<BTreeMap<String, Regex>>> =
        LazyLock::new(Default::default);
    let mut cache = CACHE
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(re) = cache.get(p) {
        return Ok(re.clone());
    }
    let re = Regex::new(p)?;
    cache.insert(p.to_string(), re.clone());
    Ok(re)
}

fn unknown_field(out: &mut Vec<FieldError>, path: &str, key: &str, known: &[&str]) {
    let hint = closest(key, known.iter().copied())
        .map(|k| format!(" (did you mean {k}?)"))
        .unwrap_or_default();
    push(out, &join(path, key), format!("unknown field{hint}"));
}

fn walk(schema: &Value, v: &Value, path: &str, checks: Checks, out: &mut Vec<FieldError>) {
    let get = |k: &str| schema.get(k);
    if v.is_null() {
        if checks.values && get("nullable") != Some(&Value::Bool(true)) {
            push(out, path, "must not be null".into());
        }
        return;
    }
    let int_or_string = get("x-kubernetes-int-or-string") == Some(&Value::Bool(true));
    let actual = type_name(v);
    if int_or_string {
        if actual != "integer" && actual != "string" {
            if checks.values {
                push(out, path, "must be an integer or a string".into());
            }
            return;
        }
    } else if let Some(Value::String(t)) = get("type") {
        let ok = t == actual || (t == "number" && actual == "integer");
        if !ok {
            if checks.values {
                push(out, path, format!("must be of type {t}, not {actual}"));
            }
            return;
        }
    }
    if checks.values {
        check_value(schema, v, path, out);
    }
    match v {
        Value::Array(items) => {
            if let Some(item_schema) = get("items") {
                for (i, item) in items.iter().enumerate() {
                    walk(item_schema, item, &format!("{path}[{i}]"), checks, out);
                }
            }
        }
        Value::Object(map) => {
            let props = get("properties").and_then(Value::as_object);
            let additional = get("additionalProperties").filter(|a| a.is_object());
            let open = get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true))
                || get("additionalProperties") == Some(&Value::Bool(true));
            for (k, child) in map {
                let declared = props.and_then(|p| p.get(k));
                if path.is_empty() && k == "metadata" {
                    // The schema leaves `metadata` open; the server knows ObjectMeta's fields.
                    if let Some(s) = declared {
                        let values = Checks {
                            unknown_fields: false,
                            ..checks
                        };
                        walk(s, child, k, values, out);
                    }
                    if let (true, Value::Object(meta)) = (checks.unknown_fields, child) {
                        for f in meta.keys() {
                            if !OBJECT_META_FIELDS.contains(&f.as_str()) {
                                unknown_field(out, k, f, &OBJECT_META_FIELDS);
                            }
                        }
                    }
                } else if let Some(s) = declared {
                    walk(s, child, &join(path, k), checks, out);
                } else if let Some(s) = additional {
                    walk(s, child, &format!("{path}[{k:?}]"), checks, out);
                } else if path.is_empty() && (k == "apiVersion" || k == "kind") {
                    // Checked by whoever chose the schema.
                } else if checks.unknown_fields
                    && !open
                    && let Some(p) = props
                {
                    let known: Vec<&str> = p.keys().map(String::as_str).collect();
                    unknown_field(out, path, k, &known);
                }
            }
        }
        _ => {}
    }
}

/// The checks on one value of the right type.
fn check_value(schema: &Value, v: &Value, path: &str, out: &mut Vec<FieldError>) {
    let get = |k: &str| schema.get(k);
    if let Some(Value::Array(allowed)) = get("enum")
        && !allowed.contains(v)
    {
        let list: Vec<String> = allowed.iter().map(Value::to_string).collect();
        let hint = v
            .as_str()
            .and_then(|s| closest(s, allowed.iter().filter_map(Value::as_str)))
            .map(|c| format!(" (did you mean {c:?}?)"))
            .unwrap_or_default();
        push(
            out,
            path,
            format!("{v} is not one of {}{hint}", list.join(", ")),
        );
    }
    match v {
        Value::String(s) => {
            if let Some(Value::String(p)) = get("pattern") {
                match pattern(p) {
                    Ok(re) if !re.is_match(s) => {
                        push(out, path, format!("{s:?} does not match {p}"));
                    }
                    Ok(_) => {}
                    Err(e) => push(
                        out,
                        path,
                        format!("the schema's pattern {p} is invalid: {e}"),
                    ),
                }
            }
            let n = s.chars().count() as u64;
            if let Some(max) = get("maxLength").and_then(Value::as_u64)
                && n > max
            {
                push(out, path, format!("longer than {max} characters"));
            }
            if let Some(min) = get("minLength").and_then(Value::as_u64)
                && n < min
            {
                push(out, path, format!("shorter than {min} characters"));
            }
        }
        Value::Number(n) => {
            let x = n.as_f64().unwrap_or(f64::NAN);
            if let Some(min) = get("minimum").and_then(Value::as_f64)
                && x < min
            {
                push(out, path, format!("{n} is less than {min}"));
            }
            if let Some(max) = get("maximum").and_then(Value::as_f64)
                && x > max
            {
                push(out, path, format!("{n} is greater than {max}"));
            }
        }
        Value::Array(items) => {
            if let Some(max) = get("maxItems").and_then(Value::as_u64)
                && items.len() as u64 > max
            {
                push(out, path, format!("more than {max} items"));
            }
        }
        Value::Object(map) => {
            if let Some(Value::Array(required)) = get("required") {
                for r in required.iter().filter_map(Value::as_str) {
                    if !map.contains_key(r) {
                        push(out, &join(path, r), "required".into());
                    }
                }
            }
            if let Some(max) = get("maxProperties").and_then(Value::as_u64)
                && map.len() as u64 > max
            {
                push(out, path, format!("more than {max} properties"));
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pool(spec: Value) -> Value {
        json!({
            "apiVersion": crate::API_VERSION,
            "kind": "NodePool",
            "metadata": {"name": "p"},
            "spec": spec,
        })
    }

    fn lines(errors: &[FieldError]) -> Vec<String> {
        errors.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn unknown_fields_are_named_with_the_closest_known_one() {
        let schema = schema_of("NodePool").unwrap();
        let object = pool(json!({
            "template": {"requirements": [{"key": "k", "operator": "Exists", "valus": []}]},
            "disruption": {"gpuUtilisationThreshold": 0.3, "budgets": [{"nodes": "1"}]},
            "wieght": 3,
            "somethingElse": 1,
        }));
        let mut object = object;
        object["metadata"]["lables"] = json!({});
        assert_eq!(
            lines(&check(schema, &object, Checks::UNKNOWN_FIELDS)),
            [
                "metadata.lables: unknown field (did you mean labels?)",
                "spec.disruption.gpuUtilisationThreshold: unknown field (did you mean gpuUtilizationThreshold?)",
                "spec.somethingElse: unknown field",
                "spec.template.requirements[0].valus: unknown field (did you mean values?)",
                "spec.wieght: unknown field (did you mean weight?)",
            ]
        );
        assert!(check(schema, &pool(json!({"template": {}})), Checks::ALL).is_empty());
    }

    #[test]
    fn value_checks_report_every_field_and_stop_at_wrong_types() {
        let schema = schema_of("NodePool").unwrap();
        let object = pool(json!({
            "template": {"taints": [{"key": "a", "effect": "NoSchedul"}]},
            "disruption": {"gpuUtilizationThreshold": 1.5, "budgets": [{"nodes": "x"}]},
            "weight": "heavy",
        }));
        assert_eq!(
            lines(&check(schema, &object, Checks::SERVER)),
            [
                "spec.disruption.budgets[0].nodes: \"x\" does not match ^((100|[0-9]{1,2})%|[0-9]+)$",
                "spec.disruption.gpuUtilizationThreshold: 1.5 is greater than 1",
                "spec.template.taints[0].effect: \"NoSchedul\" is not one of \"NoSchedule\", \"PreferNoSchedule\", \"NoExecute\" (did you mean \"NoSchedule\"?)",
                "spec.weight: must be of type integer, not string",
            ]
        );
    }
}
