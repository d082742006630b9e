//! Conversions between the provider's model and Kubernetes API objects: resource quantities,
//! taints, and the status a booted kwok Node shows.

use std::collections::BTreeMap;

use autoscaler_core::InstanceType;
use autoscaler_core::gpu::apply_sharing;
use autoscaler_core::resources::{Resources, is_gpu_class, names};
use k8s_openapi::api::core::v1::{NodeCondition, NodeStatus, Taint};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;

use super::{KwokInstance, now};

/// A resource amount as a Kubernetes quantity string.
pub fn quantity(name: &str, amount: i64) -> Quantity {
    Quantity(if name == names::CPU {
        if amount % 1000 == 0 {
            (amount / 1000).to_string()
        } else {
            format!("{amount}m")
        }
    } else {
        amount.to_string()
    })
}

/// Resources as a Kubernetes resource map.
pub fn quantities(r: &Resources) -> BTreeMap<String, Quantity> {
    r.iter()
        .map(|(n, a)| (n.to_string(), quantity(n, a)))
        .collect()
}

/// A core taint as an API taint.
pub(super) fn api_taint(t: &autoscaler_core::Taint) -> Taint {
    Taint {
        key: t.key.clone(),
        value: (!t.value.is_empty()).then(|| t.value.clone()),
        effect: format!("{:?}", t.effect),
        time_added: None,
    }
}

/// The machine a [`KwokInstance`] boots as: its catalog type with the NodePool's GPU sharing
/// applied (an invalid sharing, which NodePool validation refuses, leaves the type as is).
pub(super) fn booted_type(catalog: &[InstanceType], ki: &KwokInstance) -> Option<InstanceType> {
    let it = catalog.iter().find(|t| t.name == ki.spec.instance_type)?;
    Some(apply_sharing(it, &ki.spec.gpu_sharing).unwrap_or_else(|e| {
        tracing::warn!(instance = %ki.name_any(), error = %e, "kwok: GPU sharing not applied");
        it.clone()
    }))
}

/// How many of `count` devices the device plugin advertises at `fraction`.
pub(super) fn advertised(count: i64, fraction: f64) -> i64 {
    if count <= 0 || fraction >= 1.0 {
        return count;
    }
    // Rounded down, at least one: in range, since the fraction is below one.
    ((count as f64 * fraction).floor() as i64).clamp(1, count)
}

/// A kwok Node's status: Ready or not, GPU-class resources zero until the device plugin is up
/// (`gpus`), then advertised at `fraction`.
pub(super) fn node_status(it: &InstanceType, ready: bool, gpus: bool, fraction: f64) -> NodeStatus {
    let mut alloc = it.allocatable();
    let mut cap = it.capacity.clone();
    let gpu_names: Vec<(String, i64)> = cap
        .extended
        .iter()
        .filter(|(k, _)| is_gpu_class(k))
        .map(|(k, v)| (k.clone(), *v))
        .collect();
    for (n, count) in gpu_names {
        // Zero while the device plugin is not up, as a registered-but-not-started plugin
        // shows it; then what the plugin advertises.
        let shown = if gpus { advertised(count, fraction) } else { 0 };
        alloc.set(&n, shown);
        cap.set(&n, shown);
    }
    let mut alloc_map = quantities(&alloc);
    let mut cap_map = quantities(&cap);
    for k in it.capacity.extended.keys() {
        for m in [&mut alloc_map, &mut cap_map] {
            m.entry(k.clone()).or_insert_with(|| Quantity("0".into()));
        }
    }
    let t = Time(now());
    NodeStatus {
        allocatable: Some(alloc_map),
        capacity: Some(cap_map),
        conditions: Some(vec![NodeCondition {
            type_: "Ready".into(),
            status: if ready { "True" } else { "False" }.into(),
            reason: Some(
                if ready {
                    "KubeletReady"
                } else {
                    "KubeletNotReady"
                }
                .into(),
            ),
            message: Some(if ready {
                "kubelet is posting ready status (kwok)".into()
            } else {
                "kubelet is starting (kwok)".into()
            }),
            last_transition_time: Some(t.clone()),
            last_heartbeat_time: Some(t),
        }]),
        phase: Some("Running".into()),
        ..Default::default()
    }
}
