//! The `ca-fastpath` suite: the Cluster Autoscaler's scale-up estimation benchmark
//! (kubernetes/autoscaler, `cluster-autoscaler/estimator/binpacking_estimator_test.go`,
//! `BenchmarkBinpackingEstimate`), whose fast path (PR 9145) packs it in 41 ms.
//!
//! One node group whose template node has 1000m cpu, 5000 MiB memory and 100 pod slots (no
//! reserved resources), here one instance type `template` offered on demand in `zone-mars` at
//! 1 $/hour (so the cost is the node count); one NodePool over it. Two equivalence groups of
//! identical pods in namespace `universe`, labelled `app=estimatee`: 50,000 requesting 50m cpu
//! and 100 bytes of memory, 1,000 requesting 95m and 190 bytes (the pods of a group share
//! one [`autoscaler_core::model::PodShape`], as the controller's cache gives replicas to the
//! planner). Upstream expects 2,595 nodes:
//! the large pods ten to a node with one small pod beside them (100 nodes), the rest twenty to
//! a node.

use autoscaler_core::builders::{itype, pod, pool};
use autoscaler_core::instance::CapacityType;
use autoscaler_core::model::{Pod, Snapshot};

/// Pods of the first (small) group.
pub(crate) const SMALL: usize = 50_000;
/// Pods of the second (large) group.
pub(crate) const LARGE: usize = 1_000;
/// Nodes upstream's estimator reaches.
pub(crate) const UPSTREAM_NODES: usize = 2_595;

/// The suite's snapshot, with `small` and `large` pods of the two groups.
pub(crate) fn snapshot(small: usize, large: usize) -> Snapshot {
    let template = itype("template")
        .cpu("1000m")
        .mem("5000Mi")
        .max_pods(100)
        .offer("zone-mars", CapacityType::OnDemand, 1.0)
        .build();
    // The pods of a group share one shape, as replicas do in the controller's pod cache.
    let group = |name: &str, n: usize, cpu: &str, mem: &str| -> Vec<Pod> {
        let template = pod(name)
            .ns("universe")
            .label("app", "estimatee")
            .cpu(cpu)
            .mem(mem)
            .build();
        (0..n)
            .map(|i| {
                let mut p = template.clone();
                p.key.name = format!("{name}-{i:05}");
                p
            })
            .collect()
    };
    let mut pending = group("estimatee-small", small, "50m", "100");
    pending.extend(group("estimatee-large", large, "95m", "190"));
    Snapshot {
        pending,
        pools: vec![pool("default", vec![template]).build()],
        ..Snapshot::default()
    }
}
