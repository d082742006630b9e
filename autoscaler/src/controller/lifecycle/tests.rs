//! Lifecycle tests: claims and Nodes as literal JSON, one transition each.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
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
        "metadata": {"name": "gpu-abc12", "finalizers": ["gpu-autoscaler.dev/termination"]},
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
    // A failure to become a node (what the warm back-off counts).
    assert!(matches!(
        step(&c, None, NOW + 900, &t),
        Action::Delete { failed: true, .. }
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
    // A Node Readiness Controller's taint, or the cloud controller manager's, holds it as
    // Karpenter's known ephemeral taints do: the node is still capacity on its way.
    for ephemeral in [
        json!({"key": "readiness.k8s.io/gpu-driver", "value": "pending", "effect": "NoSchedule"}),
        json!({"key": "node.cloudprovider.kubernetes.io/uninitialized", "value": "true", "effect": "NoSchedule"}),
    ] {
        let n = node(true, json!([ephemeral]), "1");
        match step(&c, Some(&n), NOW, &t) {
            Action::NotInitialized { reason, message } => {
                assert_eq!(reason, "KnownEphemeralTaintsExist");
                assert!(
                    message.contains(ephemeral["key"].as_str().unwrap()),
                    "{message}"
                );
            }
            other => panic!("{ephemeral}: {other:?}"),
        }
    }
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
        Action::Delete { failed: true, .. }
    ));
    // Its Node deleted by someone: no failure of the claim's.
    assert!(matches!(
        step(&c, None, NOW, &t),
        Action::Delete { failed: false, .. }
    ));
}

#[test]
fn a_dra_claim_initializes_only_once_its_slices_match_the_template() {
    let c = claim(
        json!({"status": {"providerID": "kwok://gpu-abc12", "nodeName": "gpu-abc12",
        "conditions": [cond("Launched", "True", "Succeeded"), cond("Registered", "True", "Succeeded")]}}),
    );
    let t = Timeouts::default();
    let ok = node(true, json!([]), "1");
    let mut dra = DraDevices {
        expected: BTreeMap::from([("gpu.nvidia.com".to_string(), 8)]),
        published: BTreeMap::new(),
    };
    assert_eq!(
        step_with_dra(&c, Some(&ok), Some(&dra), NOW, &t),
        Action::NotInitialized {
            reason: "ResourceSlicesNotPublished",
            message: "waiting for the Node's ResourceSlices: gpu.nvidia.com 0 of 8".into()
        }
    );
    // Another driver's devices do not stand in; too few are still too few.
    dra.published.insert("other.example.com".into(), 8);
    dra.published.insert("gpu.nvidia.com".into(), 4);
    assert_eq!(dra.missing().as_deref(), Some("gpu.nvidia.com 4 of 8"));
    dra.published.insert("gpu.nvidia.com".into(), 8);
    assert_eq!(
        step_with_dra(&c, Some(&ok), Some(&dra), NOW, &t),
        Action::Initialize
    );
    // The Node's own readiness comes first; the initialization timeout still holds.
    dra.published.clear();
    let not_ready = node(false, json!([]), "1");
    assert!(matches!(
        step_with_dra(&c, Some(&not_ready), Some(&dra), NOW, &t),
        Action::NotInitialized {
            reason: "NodeNotReady",
            ..
        }
    ));
    assert!(matches!(
        step_with_dra(&c, Some(&ok), Some(&dra), NOW + 900, &t),
        Action::Delete { .. }
    ));
    // Without DRA expectations the same Node initializes as before.
    assert_eq!(step(&c, Some(&ok), NOW, &t), Action::Initialize);
}

/// With the NVIDIA DRA driver the device plugin is off: the Node advertises no
/// `nvidia.com/gpu` although its instance type has GPUs. A DRA claim whose pods asked for none
/// initializes on its slices; the same claim without DRA expectations waits for the plugin.
#[test]
fn a_dra_claim_does_not_wait_for_the_device_plugin() {
    let mut c = claim(
        json!({"status": {"providerID": "aws:///us-east-1a/i-1", "nodeName": "gpu-abc12",
        "allocatable": {"cpu": "3920m", "nvidia.com/gpu": "1"},
        "conditions": [cond("Launched", "True", "Succeeded"), cond("Registered", "True", "Succeeded")]}}),
    );
    c.spec.resources.requests.remove("nvidia.com/gpu");
    let t = Timeouts::default();
    let no_plugin = node(true, json!([]), "0");
    let dra = DraDevices {
        expected: BTreeMap::from([("gpu.nvidia.com".to_string(), 1)]),
        published: BTreeMap::from([("gpu.nvidia.com".to_string(), 1)]),
    };
    assert_eq!(
        step_with_dra(&c, Some(&no_plugin), Some(&dra), NOW, &t),
        Action::Initialize
    );
    assert!(matches!(
        step(&c, Some(&no_plugin), NOW, &t),
        Action::NotInitialized {
            reason: "DevicePluginNotReady",
            ..
        }
    ));
    // A pod of the claim that asked for the resource itself still needs the plugin.
    c.spec.resources.requests.insert(
        "nvidia.com/gpu".into(),
        k8s_openapi::apimachinery::pkg::api::resource::Quantity("1".into()),
    );
    assert!(matches!(
        step_with_dra(&c, Some(&no_plugin), Some(&dra), NOW, &t),
        Action::NotInitialized { .. }
    ));
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
    // A capacity refusal is no failure (the offering is set aside, another tried); any other
    // refusal is.
    assert!(matches!(
        step(&c, None, NOW, &Timeouts::default()),
        Action::Delete { failed: false, .. }
    ));
    let refused =
        claim(json!({"status": {"conditions": [cond("Launched", "False", "LaunchFailed")]}}));
    assert!(matches!(
        step(&refused, None, NOW, &Timeouts::default()),
        Action::Delete { failed: true, .. }
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
        Action::Delete { failed: false, .. }
    ));
}

/// A registered claim launched as a g4dn.12xlarge of a time-sliced pool: 16 `nvidia.com/gpu`,
/// plus an extended resource one of its pods asked for (`example.com/fpga`) and one nobody did
/// (`vpc.amazonaws.com/efa`).
fn launched_for_16(extra_conditions: Vec<serde_json::Value>) -> NodeClaim {
    let mut conds = vec![
        cond("Launched", "True", "Succeeded"),
        cond("Registered", "True", "Succeeded"),
    ];
    conds.extend(extra_conditions);
    claim(json!({
        "spec": {"nodePool": "notebooks",
                 "resources": {"requests": {"cpu": "1", "nvidia.com/gpu": "16", "example.com/fpga": "1"}}},
        "status": {"providerID": "kwok://gpu-abc12", "nodeName": "gpu-abc12",
                   "instanceType": "g4dn.12xlarge",
                   "allocatable": {"cpu": "47", "nvidia.com/gpu": "16", "example.com/fpga": "2",
                                   "vpc.amazonaws.com/efa": "1"},
                   "conditions": conds}
    }))
}

fn node_with(alloc: serde_json::Value) -> Node {
    serde_json::from_value(json!({
        "metadata": {"name": "gpu-abc12", "finalizers": ["gpu-autoscaler.dev/termination"]},
        "spec": {"providerID": "kwok://gpu-abc12", "taints": []},
        "status": {"allocatable": alloc,
                   "conditions": [{"type": "Ready", "status": "True"}]}
    }))
    .unwrap()
}

const MISMATCH: &str = "the Node advertises less than the claim was launched for: \
    example.com/fpga 1 of 2, nvidia.com/gpu 4 of 16 (instance type g4dn.12xlarge, NodePool notebooks)";

#[test]
fn fewer_devices_than_launched_for_is_a_mismatch_after_the_device_plugin_timeout() {
    let t = Timeouts {
        device_plugin_s: 60,
        ..Timeouts::default()
    };
    let c = launched_for_16(vec![]);
    // CPU below the catalog's estimate and the un-requested EFA missing are no shortfall.
    let short = node_with(json!({"cpu": "46", "nvidia.com/gpu": "4", "example.com/fpga": "1"}));
    assert_eq!(
        shortfalls(&c, &short)
            .iter()
            .map(|s| (s.resource.as_str(), s.registered, s.expected))
            .collect::<Vec<_>>(),
        [("example.com/fpga", 1, 2), ("nvidia.com/gpu", 4, 16)]
    );
    // Within the timeout the device plugin may still be coming up: wait, saying for what.
    assert_eq!(
        step(&c, Some(&short), NOW + 59, &t),
        Action::NotInitialized {
            reason: "DevicePluginNotReady",
            message: "waiting for the device plugin to advertise example.com/fpga 1 of 2, \
                      nvidia.com/gpu 4 of 16"
                .into()
        }
    );
    assert_eq!(
        step(&c, Some(&short), NOW + 60, &t),
        Action::ResourceMismatch {
            message: MISMATCH.into()
        }
    );
    // Reported once; the initialization timeout still deletes the claim.
    let mut reported = cond("Initialized", "False", "ResourceMismatch");
    reported["message"] = json!(MISMATCH);
    let c = launched_for_16(vec![reported]);
    assert_eq!(step(&c, Some(&short), NOW + 120, &t), Action::Wait);
    assert!(matches!(
        step(&c, Some(&short), NOW + 900, &t),
        Action::Delete { .. }
    ));
    // A device plugin that catches up initializes the claim after all.
    let full = node_with(json!({"cpu": "46", "nvidia.com/gpu": "16", "example.com/fpga": "2"}));
    assert_eq!(step(&c, Some(&full), NOW + 130, &t), Action::Initialize);
    // No devices at all past the timeout is a mismatch too.
    let none = node_with(json!({"cpu": "46", "nvidia.com/gpu": "0", "example.com/fpga": "2"}));
    assert!(matches!(
        step(&launched_for_16(vec![]), Some(&none), NOW + 60, &t),
        Action::ResourceMismatch { message } if message.contains("nvidia.com/gpu 0 of 16")
    ));
    // A Node that is not Ready is waited for, not judged.
    let mut not_ready = short.clone();
    not_ready
        .status
        .as_mut()
        .unwrap()
        .conditions
        .as_mut()
        .unwrap()[0]
        .status = "False".into();
    assert!(matches!(
        step(&launched_for_16(vec![]), Some(&not_ready), NOW + 60, &t),
        Action::NotInitialized {
            reason: "NodeNotReady",
            ..
        }
    ));
}

#[test]
fn the_device_plugin_timeout_counts_from_registration() {
    let t = Timeouts {
        device_plugin_s: 60,
        ..Timeouts::default()
    };
    let mut registered_late = cond("Registered", "True", "Succeeded");
    registered_late["lastTransitionTime"] = json!("2026-01-01T00:05:00Z");
    let mut c = launched_for_16(vec![]);
    c.status.as_mut().unwrap().conditions[1] = serde_json::from_value(registered_late).unwrap();
    let short = node_with(json!({"nvidia.com/gpu": "4", "example.com/fpga": "2"}));
    assert!(matches!(
        step(&c, Some(&short), NOW + 300 + 59, &t),
        Action::NotInitialized { .. }
    ));
    assert!(matches!(
        step(&c, Some(&short), NOW + 300 + 60, &t),
        Action::ResourceMismatch { .. }
    ));
}

#[test]
fn a_registered_node_that_lost_its_finalizer_is_registered_again() {
    let registered = claim(json!({"status": {"conditions": [
        cond("Launched", "True", "Succeeded"), cond("Registered", "True", "Succeeded")]}}));
    let initialized = claim(json!({"status": {"conditions": [
        cond("Launched", "True", "Succeeded"), cond("Registered", "True", "Succeeded"),
        cond("Initialized", "True", "Succeeded")]}}));
    let mut again = node(true, json!([]), "1");
    again.metadata.finalizers = None;
    for c in [&registered, &initialized] {
        assert_eq!(
            step(c, Some(&again), NOW, &Timeouts::default()),
            Action::Reregister {
                node: "gpu-abc12".into()
            },
            "{:?}",
            phase(c)
        );
    }
    // Being deleted without the finalizer: it goes at once, nothing to hold.
    again.metadata.deletion_timestamp = Some(Time(jiff::Timestamp::now()));
    assert_eq!(
        step(&initialized, Some(&again), NOW, &Timeouts::default()),
        Action::Wait
    );
    // With it, the claim goes on as before.
    let ok = node(true, json!([]), "1");
    assert_eq!(
        step(&initialized, Some(&ok), NOW, &Timeouts::default()),
        Action::Wait
    );
}

/// A claim of a MIG pool (`all-1g.10gb`, mixed: 7 slices of each of 8 GPUs), registered.
fn mig_claim(extra_conditions: Vec<serde_json::Value>) -> NodeClaim {
    let mut conds = vec![
        cond("Launched", "True", "Succeeded"),
        cond("Registered", "True", "Succeeded"),
    ];
    conds.extend(extra_conditions);
    let mut c = claim(json!({
        "metadata": {"labels": {"nvidia.com/mig.config": "all-1g.10gb"}},
        "spec": {"nodePool": "gpu-inference",
                 "resources": {"requests": {"cpu": "1", "nvidia.com/mig-1g.10gb": "1"}},
                 "startupTaints": []},
        "status": {"providerID": "kwok://gpu-abc12", "nodeName": "gpu-abc12",
                   "instanceType": "p4de.24xlarge",
                   "allocatable": {"cpu": "95", "nvidia.com/mig-1g.10gb": "56"},
                   "conditions": conds}
    }));
    // The base claim's whole GPU is not what a MIG pool's claim asks for.
    c.spec.resources.requests.remove("nvidia.com/gpu");
    c
}

/// The claim's Node with MIG labels `config` and `state` (absent when `None`).
fn mig_node(config: Option<&str>, state: Option<&str>, alloc: serde_json::Value) -> Node {
    let mut n = node_with(alloc);
    let labels = n.metadata.labels.get_or_insert_with(Default::default);
    if let Some(c) = config {
        labels.insert("nvidia.com/mig.config".into(), c.into());
    }
    if let Some(s) = state {
        labels.insert("nvidia.com/mig.config.state".into(), s.into());
    }
    n
}

#[test]
fn a_mig_claim_waits_for_the_mig_manager_and_is_not_judged_short_meanwhile() {
    let t = Timeouts {
        device_plugin_s: 60,
        ..Timeouts::default()
    };
    let c = mig_claim(vec![]);
    // Whole GPUs show while the MIG manager works (and may reboot the Node): past the
    // device-plugin timeout that is still waiting, not a shortfall.
    let whole = json!({"cpu": "95", "nvidia.com/gpu": "8"});
    for (config, state, says) in [
        (
            Some("all-1g.10gb"),
            Some("pending"),
            "(nvidia.com/mig.config.state=pending)",
        ),
        (
            Some("all-1g.10gb"),
            Some("rebooting"),
            "(nvidia.com/mig.config.state=rebooting)",
        ),
        (
            Some("all-disabled"),
            Some("success"),
            "is all-disabled, not the claim's all-1g.10gb",
        ),
    ] {
        let n = mig_node(config, state, whole.clone());
        match step(&c, Some(&n), NOW + 300, &t) {
            Action::NotInitialized { reason, message } => {
                assert_eq!(reason, "MIGNotApplied", "{config:?} {state:?}");
                assert!(message.contains(says), "{message}");
            }
            other => panic!("{config:?} {state:?}: {other:?}"),
        }
    }
    // No MIG manager reports on the Node (MIG applied by the image, or by GKE): the devices
    // decide, so whole GPUs past the device-plugin timeout are a shortfall, and the slices
    // an initialization.
    for config in [None, Some("all-1g.10gb")] {
        assert!(matches!(
            step(
                &c,
                Some(&mig_node(config, None, whole.clone())),
                NOW + 300,
                &t
            ),
            Action::ResourceMismatch { .. }
        ));
        let sliced = json!({"cpu": "95", "nvidia.com/mig-1g.10gb": "56"});
        assert_eq!(
            step(&c, Some(&mig_node(config, None, sliced)), NOW + 300, &t),
            Action::Initialize
        );
    }
    // Applied and advertised: initialized.
    let done = mig_node(
        Some("all-1g.10gb"),
        Some("success"),
        json!({"cpu": "95", "nvidia.com/mig-1g.10gb": "56"}),
    );
    assert_eq!(step(&c, Some(&done), NOW + 300, &t), Action::Initialize);
    // Applied, but the device plugin shows fewer slices past its timeout: a shortfall again.
    let short = mig_node(
        Some("all-1g.10gb"),
        Some("success"),
        json!({"cpu": "95", "nvidia.com/mig-1g.10gb": "28"}),
    );
    assert!(matches!(
        step(&c, Some(&short), NOW + 300, &t),
        Action::ResourceMismatch { .. }
    ));
    // The manager failed: the shape is set aside at once, and that is reported once.
    let failed = mig_node(Some("all-1g.10gb"), Some("failed"), whole.clone());
    let Action::ResourceMismatch { message } = step(&c, Some(&failed), NOW + 30, &t) else {
        panic!("a failed MIG configuration is a mismatch");
    };
    assert!(message.contains("failed to apply all-1g.10gb"), "{message}");
    let mut reported = cond("Initialized", "False", "ResourceMismatch");
    reported["message"] = json!(message);
    assert_eq!(
        step(&mig_claim(vec![reported]), Some(&failed), NOW + 40, &t),
        Action::Wait
    );
    // The initialization timeout still ends a manager that never finishes.
    let stuck = mig_node(Some("all-1g.10gb"), Some("pending"), whole);
    assert!(matches!(
        step(&c, Some(&stuck), NOW + 900, &t),
        Action::Delete { .. }
    ));
}
