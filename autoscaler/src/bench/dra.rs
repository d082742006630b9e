//! The `dra` suite: GPUs through DRA resource claims at cluster scale.
//!
//! 5,000 existing nodes of the embedded AWS catalog's 8-GPU types (p4d.24xlarge and
//! p5.48xlarge, alternating), each publishing the NVIDIA driver's slice (the template a new
//! node would get, [`autoscaler_core::dra::template`]) and running 4 pods whose claims hold 4 of
//! its 8 GPUs: 20,000 allocated claims. 2,500 pending pods, each with its own claim from a
//! template: 60% one GPU, 20% two, 10% four H100s (a CEL selector on `productName`), 10% eight
//! (more than any existing node has free, so they need new nodes). One NodePool over the
//! embedded AWS catalog, with the driver's DeviceClasses. The LP bound does not know devices:
//! its `ratio` is not meaningful here.

use std::sync::Arc;

use autoscaler_core::builders::{node, pod, pool};
use autoscaler_core::dra::builders::{allocated_claim, claim, request};
use autoscaler_core::dra::template::{NVIDIA_DRIVER, nvidia_classes, nvidia_slice};
use autoscaler_core::dra::{AllocatedDevice, Allocation, DeviceId, Dra, PodClaim};
use autoscaler_core::model::{Pod, Snapshot};

use super::Case;

/// Existing nodes.
pub(crate) const NODES: usize = 5_000;
/// Allocated claims per existing node (of its 8 GPUs).
pub(crate) const PER_NODE: usize = 4;
/// Pending pods, one claim each.
pub(crate) const PENDING: usize = 2_500;

/// What the suite prints under its name.
pub(crate) fn note() -> String {
    "the LP bound ignores DRA devices: its ratio is not meaningful for this suite".into()
}

/// The suite's case at the given scale (the full suite is `NODES`, `PENDING`).
pub(crate) fn cases(nodes: usize, pending: usize) -> Vec<Case> {
    vec![Case {
        name: format!("{nodes}-nodes-{pending}-claims"),
        snapshot: snapshot(nodes, pending),
    }]
}

fn gpus(n: u32) -> PodClaim {
    claim()
        .request(request("gpu").class(NVIDIA_DRIVER).count(n))
        .from_template("gpu")
}

/// The snapshot: `nodes` half-allocated 8-GPU nodes and `pending` pods with claims.
pub(crate) fn snapshot(nodes: usize, pending: usize) -> Snapshot {
    let catalog = providers::catalog::default_catalog_for(providers::catalog::AWS);
    let eight: Vec<_> = ["p4d.24xlarge", "p5.48xlarge"]
        .iter()
        .filter_map(|n| catalog.iter().find(|t| t.name == *n).cloned())
        .collect();
    let mut dra = Dra {
        classes: nvidia_classes()
            .into_iter()
            .map(|c| (c.name.clone(), c))
            .collect(),
        ..Dra::default()
    };
    let mut existing = Vec::with_capacity(nodes);
    let one = Arc::new(claim().request(request("gpu").class(NVIDIA_DRIVER)).build());
    for n in 0..nodes {
        let it = &eight[n % eight.len()];
        let name = format!("node-{n:05}");
        let zone = it.offerings.first().map_or("", |o| o.zone.as_str());
        let mut b = node(&name, it, zone).pool("gpu");
        if let Some(s) = nvidia_slice(it, &name, false) {
            dra.slices.push(s);
        }
        for k in 0..PER_NODE {
            let pod_name = format!("{name}-run-{k}");
            let alloc = Allocation {
                node: Some(name.clone()),
                devices: vec![AllocatedDevice {
                    request: "gpu".into(),
                    device: DeviceId {
                        driver: NVIDIA_DRIVER.into(),
                        pool: name.clone(),
                        device: format!("gpu-{k}"),
                    },
                }],
            };
            let mut c = gpus(1);
            c.allocation = Some(alloc.clone());
            b = b.with_pod(pod(&pod_name).cpu("1").mem("4Gi").claim(c));
            dra.claims.push(allocated_claim(
                &format!("default/{pod_name}-gpu"),
                (*one).clone(),
                alloc,
                &[&pod_name],
            ));
        }
        existing.push(b.build());
    }
    let h100 = claim()
        .request(request("gpu").class(NVIDIA_DRIVER).count(4).selector(
            "device.attributes['gpu.nvidia.com'].productName.lowerAscii().matches('h100')",
        ))
        .from_template("gpu");
    let pending: Vec<Pod> = (0..pending)
        .map(|i| {
            let c = match i % 10 {
                0..=5 => gpus(1),
                6 | 7 => gpus(2),
                8 => h100.clone(),
                _ => gpus(8),
            };
            pod(&format!("train-{i:05}"))
                .cpu("2")
                .mem("8Gi")
                .claim(c)
                .build()
        })
        .collect();
    Snapshot {
        pending,
        nodes: existing,
        pools: vec![pool("gpu", catalog).build()],
        dra: Arc::new(dra),
        ..Snapshot::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use autoscaler_core::provision::plan_provisioning;

    /// At a small scale: every pod is placed, the eight-GPU pods on new nodes, the others on
    /// the existing nodes' free GPUs, and no existing node gets more claims than free GPUs.
    #[test]
    fn dra_suite_small() {
        let snap = snapshot(20, 50);
        let plan = plan_provisioning(&snap);
        assert!(plan.unschedulable.is_empty(), "{}", plan.render());
        let new_pods: usize = plan.new_claims.iter().map(|c| c.pods.len()).sum();
        assert_eq!(new_pods, 5, "the five 8-GPU pods: {}", plan.render());
        let mut per_node: std::collections::BTreeMap<&str, u32> = Default::default();
        for p in &plan.existing {
            let pod = snap.pending.iter().find(|q| q.key == p.pod).unwrap();
            let want = pod.claims[0].spec.requests[0]
                .exactly
                .as_ref()
                .unwrap()
                .count;
            *per_node.entry(p.target.as_str()).or_default() += want;
        }
        assert!(per_node.values().all(|g| *g <= 4), "{per_node:?}");
        assert_eq!(plan.existing.len(), 45);
    }
}
