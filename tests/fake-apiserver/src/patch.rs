//! Patch application: JSON merge patch (RFC 7386), JSON patch (RFC 6902), strategic merge patch.
//!
//! Strategic merge patch follows the patch strategies of the real Go types for the built-ins the
//! fake serves (a table below, not the full OpenAPI extension set). In particular
//! `NodeSpec.taints` and `PodSpec.tolerations` have *no* merge key upstream, so a strategic patch
//! replaces those lists wholesale, exactly like the real server: a controller that wants to add
//! one taint must send the whole list or use a JSON patch. Conditions, addresses, containers,
//! volumes, env, ports, owner references and finalizers are merged by their keys.

use serde_json::{Map, Value};

use crate::error::{Error, Result};
use crate::resources::Builtin;

/// RFC 7386 JSON merge patch: objects merge recursively, `null` deletes, anything else replaces.
pub(crate) fn merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(p) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let t = target.as_object_mut().expect("made an object above");
    for (k, v) in p {
        if v.is_null() {
            t.remove(k);
        } else {
            merge_patch(t.entry(k.clone()).or_insert(Value::Null), v);
        }
    }
}

/// RFC 6902 JSON patch. A malformed patch is a 400; an operation that fails (missing path,
/// failed `test`) is a 422, as on the real server.
pub(crate) fn json_patch(target: &mut Value, patch: &Value) -> Result<()> {
    let ops: json_patch::Patch = serde_json::from_value(patch.clone())
        .map_err(|e| Error::BadRequest(format!("invalid JSON patch: {e}")))?;
    json_patch::patch(target, &ops).map_err(|e| Error::Invalid {
        message: format!("the server rejected our request due to an error in our request: {e}"),
        kind: String::new(),
        name: String::new(),
        causes: vec![(String::new(), e.to_string())],
    })
}

/// How a list field merges under a strategic merge patch.
#[derive(Debug, PartialEq, Eq)]
enum ListStrategy {
    /// Replace the list (the default: no `patchStrategy` on the Go field).
    Replace,
    /// Merge elements whose value at this key matches.
    MergeKey(&'static str),
    /// Union of primitive values.
    MergePrimitive,
}

/// Patch strategies of a pod spec, relative to the pod spec.
fn pod_spec_strategy(path: &[&str]) -> ListStrategy {
    use ListStrategy::*;
    match path {
        ["containers" | "initContainers" | "ephemeralContainers"] => MergeKey("name"),
        [
            "containers" | "initContainers" | "ephemeralContainers",
            "ports",
        ] => MergeKey("containerPort"),
        [
            "containers" | "initContainers" | "ephemeralContainers",
            "env",
        ] => MergeKey("name"),
        [
            "containers" | "initContainers" | "ephemeralContainers",
            "volumeMounts",
        ] => MergeKey("mountPath"),
        [
            "containers" | "initContainers" | "ephemeralContainers",
            "volumeDevices",
        ] => MergeKey("devicePath"),
        ["volumes" | "imagePullSecrets" | "resourceClaims" | "schedulingGates"] => MergeKey("name"),
        ["hostAliases"] => MergeKey("ip"),
        _ => Replace,
    }
}

/// The strategy of the list at `path` (field names from the object root, list indices omitted).
fn strategy(kind: Builtin, path: &[&str]) -> ListStrategy {
    use ListStrategy::*;
    match path {
        ["metadata", "finalizers"] => return MergePrimitive,
        ["metadata", "ownerReferences"] => return MergeKey("uid"),
        _ => {}
    }
    match (kind, path) {
        (Builtin::Pod, ["spec", rest @ ..]) => pod_spec_strategy(rest),
        (Builtin::Pod, ["status", "conditions"]) => MergeKey("type"),
        (Builtin::Pod, ["status", "podIPs"]) => MergeKey("ip"),
        (Builtin::Node, ["status", "conditions" | "addresses"]) => MergeKey("type"),
        (Builtin::Node, ["spec", "podCIDRs"]) => MergePrimitive,
        (
            Builtin::DaemonSet | Builtin::ReplicaSet | Builtin::Deployment | Builtin::StatefulSet,
            ["spec", "template", "spec", rest @ ..],
        ) => pod_spec_strategy(rest),
        (Builtin::PodTemplate, ["template", "spec", rest @ ..]) => pod_spec_strategy(rest),
        (
            Builtin::DaemonSet
            | Builtin::ReplicaSet
            | Builtin::Deployment
            | Builtin::StatefulSet
            | Builtin::Pdb
            | Builtin::Namespace
            | Builtin::Crd,
            ["status", "conditions"],
        ) => MergeKey("type"),
        _ => Replace,
    }
}

/// Strategic merge patch for a built-in kind.
///
/// Supported directives: `$patch: replace|delete` on maps and list elements,
/// `$deleteFromPrimitiveList/<field>`, `$retainKeys`; `$setElementOrder/<field>` is accepted and
/// ignored (element order is not preserved beyond "existing first, new appended").
pub(crate) fn strategic_merge_patch(
    kind: Builtin,
    target: &mut Value,
    patch: &Value,
) -> Result<()> {
    let mut path = Vec::new();
    smp_map(kind, target, patch, &mut path)
}

fn smp_map(kind: Builtin, target: &mut Value, patch: &Value, path: &mut Vec<String>) -> Result<()> {
    let Value::Object(p) = patch else {
        *target = patch.clone();
        return Ok(());
    };
    match p.get("$patch").and_then(Value::as_str) {
        Some("replace") => {
            let mut m = p.clone();
            m.remove("$patch");
            *target = Value::Object(m);
            return Ok(());
        }
        Some("delete") => {
            *target = Value::Null;
            return Ok(());
        }
        Some(other) => return Err(Error::BadRequest(format!("unknown patch type: {other:?}"))),
        None => {}
    }
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    if let Some(keep) = p.get("$retainKeys").and_then(Value::as_array) {
        let keep: Vec<&str> = keep.iter().filter_map(Value::as_str).collect();
        target
            .as_object_mut()
            .expect("object")
            .retain(|k, _| keep.contains(&k.as_str()));
    }
    for (k, v) in p {
        if k == "$retainKeys" || k.starts_with("$setElementOrder/") {
            continue;
        }
        let t = target.as_object_mut().expect("object");
        if let Some(field) = k.strip_prefix("$deleteFromPrimitiveList/") {
            let drop: Vec<&Value> = v.as_array().map(|a| a.iter().collect()).unwrap_or_default();
            if let Some(Value::Array(list)) = t.get_mut(field) {
                list.retain(|x| !drop.contains(&x));
            }
            continue;
        }
        if v.is_null() {
            t.remove(k);
            continue;
        }
        path.push(k.clone());
        let slot = t.entry(k.clone()).or_insert(Value::Null);
        match v {
            Value::Object(_) => {
                smp_map(kind, slot, v, path)?;
                if slot.is_null() {
                    t.remove(k);
                }
            }
            Value::Array(items) => {
                let refs: Vec<&str> = path.iter().map(String::as_str).collect();
                match strategy(kind, &refs) {
                    ListStrategy::Replace => *slot = v.clone(),
                    ListStrategy::MergePrimitive => {
                        let mut list = slot.as_array().cloned().unwrap_or_default();
                        for item in items {
                            if !list.contains(item) {
                                list.push(item.clone());
                            }
                        }
                        *slot = Value::Array(list);
                    }
                    ListStrategy::MergeKey(key) => smp_list(kind, slot, items, key, path)?,
                }
            }
            _ => *slot = v.clone(),
        }
        path.pop();
    }
    Ok(())
}

fn smp_list(
    kind: Builtin,
    slot: &mut Value,
    items: &[Value],
    key: &str,
    path: &mut Vec<String>,
) -> Result<()> {
    if items
        .iter()
        .any(|i| i.get("$patch").and_then(Value::as_str) == Some("replace"))
    {
        let rest = items.iter().filter(|i| i.get("$patch").is_none()).cloned();
        *slot = Value::Array(rest.collect());
        return Ok(());
    }
    let mut list = slot.as_array().cloned().unwrap_or_default();
    for item in items {
        let Some(id) = item.get(key) else {
            return Err(Error::BadRequest(format!(
                "map: {item} does not contain declared merge key: {key}"
            )));
        };
        let pos = list.iter().position(|e| e.get(key) == Some(id));
        if item.get("$patch").and_then(Value::as_str) == Some("delete") {
            if let Some(i) = pos {
                list.remove(i);
            }
            continue;
        }
        match pos {
            Some(i) => smp_map(kind, &mut list[i], item, path)?,
            None => {
                let mut fresh = Value::Object(Map::new());
                smp_map(kind, &mut fresh, item, path)?;
                list.push(fresh);
            }
        }
    }
    *slot = Value::Array(list);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn merge_patch_deletes_and_merges() {
        let mut t = json!({"a": {"b": 1, "c": 2}, "l": [1, 2]});
        merge_patch(&mut t, &json!({"a": {"b": null, "d": 3}, "l": [3]}));
        assert_eq!(t, json!({"a": {"c": 2, "d": 3}, "l": [3]}));
    }

    #[test]
    fn strategic_merges_conditions_and_replaces_taints() {
        let mut node = json!({
            "metadata": {"finalizers": ["a"]},
            "spec": {"taints": [{"key": "x", "effect": "NoSchedule"}]},
            "status": {"conditions": [
                {"type": "Ready", "status": "False"},
                {"type": "MemoryPressure", "status": "False"}
            ]}
        });
        let patch = json!({
            "metadata": {"finalizers": ["b"]},
            "spec": {"taints": [{"key": "y", "effect": "NoSchedule"}]},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]}
        });
        strategic_merge_patch(Builtin::Node, &mut node, &patch).unwrap();
        assert_eq!(node["metadata"]["finalizers"], json!(["a", "b"]));
        assert_eq!(
            node["spec"]["taints"],
            json!([{"key": "y", "effect": "NoSchedule"}])
        );
        assert_eq!(
            node["status"]["conditions"],
            json!([{"type": "Ready", "status": "True"}, {"type": "MemoryPressure", "status": "False"}])
        );
        let del = json!({
            "$deleteFromPrimitiveList/finalizers": ["a"],
            "status": {"conditions": [{"type": "MemoryPressure", "$patch": "delete"}]}
        });
        strategic_merge_patch(
            Builtin::Node,
            &mut node,
            &json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["a"]}}),
        )
        .unwrap();
        assert_eq!(node["metadata"]["finalizers"], json!(["b"]));
        strategic_merge_patch(Builtin::Node, &mut node, &json!({"status": del["status"]})).unwrap();
        assert_eq!(
            node["status"]["conditions"],
            json!([{"type": "Ready", "status": "True"}])
        );
    }

    #[test]
    fn json_patch_ops() {
        let mut t = json!({"spec": {"taints": [{"key": "a"}]}});
        json_patch(
            &mut t,
            &json!([{"op": "add", "path": "/spec/taints/-", "value": {"key": "b"}}]),
        )
        .unwrap();
        assert_eq!(t["spec"]["taints"][1]["key"], "b");
        let err = json_patch(
            &mut t,
            &json!([{"op": "test", "path": "/spec/taints/0/key", "value": "z"}]),
        );
        assert!(matches!(err, Err(Error::Invalid { .. })));
        assert!(matches!(
            json_patch(&mut t, &json!({"op": 1})),
            Err(Error::BadRequest(_))
        ));
    }
}
