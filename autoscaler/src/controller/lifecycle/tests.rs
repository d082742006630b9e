//! Lifecycle tests: claims and Nodes as literal JSON, one transition each.

use serde_json::json;

use super::*;

const NOW: i64 = 1_767_225_600; // 2026-01-01T00:00:00Z

fn claim(extra: serde_json::Value) -> NodeClaim {
    let mut v = json!({
        "apiVersion": "gpu-autoscaler.dev/v1alpha1",
        "kind": "NodeClaim",
        "metadata": {
            "name": "gpu-abc12",
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "finalizers": ["gpu-autoscaler.dev/termination"]
        },
        "spec": {
            "nodePool": "gpu",
            "resources": {"requests": {"cpu": "1", "nvidia.com/gpu": "1"}},
            "taints": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}],
            "startupTaints": [{"key": "node.gpu-autoscaler.dev/init", "effect": "NoSchedule"}]
        }
    });
    merge(&mut v, extra);
    serde_json::from_value(v).unwrap()
}

fn merge(a: &mut serde_json::Value, b: serde_json::Value) {
    match (a, b) {
        (serde_json::Value::Object(a), serde_json::Value::Object(b)) => {
            for (k, v) in b {
                merge(a.entry(k).or_insert(serde_json::Value::Null), v);
            }
        }
        (a, b) => *a = b,
    }
}

fn cond(t: &str, status: &str, reason: &str) -> serde_json::Value {
    json!({"type": t, "status": status, "reason": reason, "message": "",
           "lastTransitionTime": "2026-01-01T00:00:00Z"})
}

fn node(ready: bool, taints: serde_json::Value, gpus: &str) -> Node {
    serde_json::from_value(json!({
        "metadata": {"name": "gpu-abc12"},
        "spec": {"providerID": "kwok://gpu-abc12", "taints": taints},
        "status": {
            "allocatable": {"cpu": "4", "nvidia.com/gpu": gpus},
            "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]
        }
    }))
    .unwrap()
}

#[test]
fn finalizer_first_then_launch() {
    let mut c = claim(json!({}));
    c.metadata.finalizers = None;
    assert_eq!(
        step(&c, None, NOW, &Timeouts::default()),
        Action::AddFinalizer
    );
    let c = claim(json!({}));
    assert_eq!(phase(&c), Phase::Pending);
    assert_eq!(step(&c, None, NOW, &Timeouts::default()), Action::Launch);
}

#[test]
fn launched_waits_for_node_then_times_out() {
    let c = claim(json!({"status": {"providerID": "kwok://gpu-abc12",
        "conditions": [cond("Launched", "True", "Succeeded")]}}));
    assert_eq!(phase(&c), Phase::Launched);
    let t = Timeouts::default();
    assert_eq!(step(&c, None, NOW + 10, &t), Action::Wait);
    assert!(matches!(
        step(&c, None, NOW + 900, &t),
        Action::Delete { .. }
    ));
    let n = node(false, json!([]), "0");
    assert_eq!(
        step(&c, Some(&n), NOW + 10, &t),
        Action::Register {
            node: "gpu-abc12".into()
        }
    );
}

#[test]
fn registered_initializes_when_ready_untainted_and_gpus_advertised() {
    let c = claim(
        json!({"status": {"providerID": "kwok://gpu-abc12", "nodeName": "gpu-abc12",
        "conditions": [cond("Launched", "True", "Succeeded"), cond("Registered", "True", "Succeeded")]}}),
    );
    assert_eq!(phase(&c), Phase::Registered);
    let t = Timeouts::default();
    let not_ready = node(false, json!([]), "1");
    assert!(matches!(
        step(&c, Some(&not_ready), NOW, &t),
        Action::NotInitialized {
            reason: "NodeNotReady",
            ..
        }
    ));
    let startup = node(
        true,
        json!([{"key": "node.gpu-autoscaler.dev/init", "effect": "NoSchedule"}]),
        "1",
    );
    assert!(matches!(
        step(&c, Some(&startup), NOW, &t),
        Action::NotInitialized {
            reason: "StartupTaintsExist",
            ..
        }
    ));
    let no_gpu = node(
        true,
        json!([{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]),
        "0",
    );
    assert!(matches!(
        step(&c, Some(&no_gpu), NOW, &t),
        Action::NotInitialized {
            reason: "DevicePluginNotReady",
            ..
        }
    ));
    let ok = node(
        true,
        json!([{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]),
        "1",
    );
    assert_eq!(step(&c, Some(&ok), NOW, &t), Action::Initialize);
    assert!(matches!(
        step(&c, Some(&no_gpu), NOW + 900, &t),
        Action::Delete { .. }
    ));
    assert!(matches!(step(&c, None, NOW, &t), Action::Delete { .. }));
}

#[test]
fn same_reason_is_not_written_twice() {
    let mut init = cond("Initialized", "False", "DevicePluginNotReady");
    init["message"] = json!("nvidia.com/gpu allocatable is zero (device plugin not up)");
    let c = claim(json!({"status": {"providerID": "kwok://gpu-abc12",
        "conditions": [cond("Launched", "True", "Succeeded"), cond("Registered", "True", "Succeeded"), init]}}));
    let no_gpu = node(true, json!([]), "0");
    assert_eq!(
        step(&c, Some(&no_gpu), NOW, &Timeouts::default()),
        Action::Wait
    );
}

#[test]
fn failed_is_deleted_and_deleting_terminates() {
    let c = claim(
        json!({"status": {"conditions": [cond("Launched", "False", "InsufficientCapacity")]}}),
    );
    assert_eq!(phase(&c), Phase::Failed);
    assert!(matches!(
        step(&c, None, NOW, &Timeouts::default()),
        Action::Delete { .. }
    ));
    let pending =
        claim(json!({"status": {"conditions": [cond("Launched", "False", "LaunchPending")]}}));
    assert_eq!(phase(&pending), Phase::Pending);
    let d = claim(
        json!({"metadata": {"deletionTimestamp": "2026-01-01T00:01:00Z"},
        "status": {"providerID": "kwok://gpu-abc12", "nodeName": "gpu-abc12"}}),
    );
    assert_eq!(phase(&d), Phase::Deleting);
    assert_eq!(
        step(&d, None, NOW, &Timeouts::default()),
        Action::Terminate {
            provider_id: Some("kwok://gpu-abc12".into()),
            node: Some("gpu-abc12".into())
        }
    );
}

#[test]
fn initialized_claim_whose_node_vanished_is_deleted() {
    let c = claim(json!({"status": {"conditions": [
        cond("Launched", "True", "Succeeded"), cond("Registered", "True", "Succeeded"),
        cond("Initialized", "True", "Succeeded")]}}));
    assert_eq!(phase(&c), Phase::Initialized);
    let ok = node(true, json!([]), "1");
    assert_eq!(step(&c, Some(&ok), NOW, &Timeouts::default()), Action::Wait);
    assert!(matches!(
        step(&c, None, NOW, &Timeouts::default()),
        Action::Delete { .. }
    ));
}
