//! The catalog, NodePool and rounds of Karpenter's scheduling topology suite as rebuilt here
//! (`karpenter_topology`, `karpenter_topology_more`): amd64 and arm64 types, spot and on
//! demand, in the fake provider's three zones, and a cluster planned round after round, each
//! round's plan turned into nodes.

use std::collections::BTreeMap;

use autoscaler_core::builders::{PodBuilder, PoolBuilder, itype, pod, pool};
use autoscaler_core::instance::InstanceType;
use autoscaler_core::labels;
use autoscaler_core::model::{Node, Pod, Snapshot, TopologySpread};
use autoscaler_core::plan::Plan;
use autoscaler_core::requirements::Operator;

use super::{cpu_types_in, launch, with_spot};

/// The fake provider's three zones.
pub const Z: [&str; 3] = ["test-zone-1", "test-zone-2", "test-zone-3"];

/// amd64 types of 2 to 16 cpus ([`cpu_types_in`]), spot and on demand, in the three zones
/// [`Z`], each holding `pods` pods at most.
pub fn types_with_pods(pods: i64) -> Vec<InstanceType> {
    cpu_types_in(&Z)
        .into_iter()
        .map(|mut t| {
            t.capacity.pods = pods;
            with_spot(t)
        })
        .collect()
}

/// [`types_with_pods`] with the default 110 pod slots.
pub fn types() -> Vec<InstanceType> {
    types_with_pods(110)
}

/// [`types`] and two arm64 types (2 and 4 cpus), spot and on demand.
pub fn types_arch() -> Vec<InstanceType> {
    let mut all = types();
    for (n, c, m, p) in [
        ("a1.large", "2", "8Gi", 0.09),
        ("a1.xlarge", "4", "16Gi", 0.18),
    ] {
        let mut t = with_spot(
            itype(n)
                .cpu(c)
                .mem(m)
                .label(labels::ARCH, "arm64")
                .on_demand(&Z, p)
                .build(),
        );
        t.arch = "arm64".into();
        all.push(t);
    }
    all
}

/// The suite's NodePool: [`types`], any capacity type.
pub fn dpool() -> PoolBuilder {
    pool("default", types()).require(labels::CAPACITY_TYPE, Operator::Exists, &[])
}

/// `n` pods `<prefix>-<i>` labelled `<label>=test`, with these spreads.
pub fn labelled_spread_pods(
    prefix: &str,
    n: usize,
    label: &str,
    spreads: &[TopologySpread],
) -> Vec<PodBuilder> {
    (0..n)
        .map(|i| {
            let mut p = pod(&format!("{prefix}-{i}")).label(label, "test");
            p.0.spread = spreads.to_vec();
            p
        })
        .collect()
}

/// Round `round` of a cluster of `nodes` and `pools`: `pods` pending, each renamed
/// `r<round>-<name>`.
pub fn round_snapshot(
    pods: Vec<PodBuilder>,
    round: usize,
    nodes: &[Node],
    pools: &[PoolBuilder],
) -> Snapshot {
    let pending: Vec<Pod> = pods
        .into_iter()
        .map(|p| {
            let mut p = p.build();
            p.key.name = format!("r{round}-{}", p.key.name);
            p
        })
        .collect();
    Snapshot {
        pending,
        nodes: nodes.to_vec(),
        pools: pools.iter().cloned().map(PoolBuilder::build).collect(),
        ..Snapshot::default()
    }
}

/// Turns `plan` (of `snap`, round `round`) into `nodes`: each pod it puts on an existing node
/// joins that node, each new claim becomes a node `r<round>-<claim>` ([`launch`]) holding its
/// pods. Panics, printing the plan, when the plan uses an in-flight claim (these clusters have
/// none).
pub fn materialize(snap: &Snapshot, plan: &Plan, round: usize, nodes: &mut Vec<Node>) {
    let by_key: BTreeMap<_, _> = snap
        .pending
        .iter()
        .map(|p| (p.key.clone(), p.clone()))
        .collect();
    for pl in &plan.existing {
        let n = nodes.iter_mut().find(|n| n.name == pl.target).unwrap();
        n.pods.push(by_key[&pl.pod].clone());
    }
    assert!(plan.in_flight.is_empty(), "{}", plan.render());
    for c in &plan.new_claims {
        let pods: Vec<Pod> = c.pods.iter().map(|k| by_key[k].clone()).collect();
        nodes.push(launch(snap, c, &format!("r{round}-{}", c.name), pods));
    }
}
