//! Fixtures the core's scenario tests share (`planner_scenarios`, `dra_scenarios`,
//! `four_encodings`, the Karpenter and Cluster Autoscaler suites): the instance types they plan
//! with, the check that renders a plan against its expectation, the node a planned claim
//! becomes, the cluster of given nodes and pools, and the nodes a disruption plan removes.
// Each test file uses only some of the fixtures.
#![allow(dead_code)]

use std::collections::BTreeSet;

use autoscaler_core::DisruptionPlan;
use autoscaler_core::builders::{NodeBuilder, PoolBuilder, itype, node};
use autoscaler_core::instance::{CapacityType, InstanceType, Offering};
use autoscaler_core::labels;
use autoscaler_core::model::{Group, Node, Pod, Snapshot};
use autoscaler_core::plan::{NewClaim, Plan};
use autoscaler_core::provision::plan_provisioning;
use expect_test::Expect;

pub mod ca;
pub mod karpenter;
pub mod provisioning;
pub mod topology;

/// Three zones of one region.
pub const ZONES: [&str; 3] = ["us-east-1a", "us-east-1b", "us-east-1c"];

/// General-purpose types, 2 to 16 vCPUs, offered on demand in `zones`.
pub fn cpu_types_in(zones: &[&str]) -> Vec<InstanceType> {
    [
        ("m5.large", "2", "8Gi", 0.096),
        ("m5.xlarge", "4", "16Gi", 0.192),
        ("m5.2xlarge", "8", "32Gi", 0.384),
        ("m5.4xlarge", "16", "64Gi", 0.768),
    ]
    .into_iter()
    .map(|(name, cpu, mem, price)| {
        itype(name)
            .cpu(cpu)
            .mem(mem)
            .on_demand(zones, price)
            .build()
    })
    .collect()
}

/// [`cpu_types_in`] the three [`ZONES`].
pub fn cpu_types() -> Vec<InstanceType> {
    cpu_types_in(&ZONES)
}

/// NVIDIA GPU types: 1 and 4 A10G (24 GB, no MIG), 8 A100 40 GB, 8 H100 80 GB, offered on
/// demand in `zones`.
pub fn gpu_types_in(zones: &[&str]) -> Vec<InstanceType> {
    [
        ("g5.xlarge", "4", "16Gi", 1, "A10G", 24, 1.006),
        ("g5.12xlarge", "48", "192Gi", 4, "A10G", 24, 5.672),
        ("p4d.24xlarge", "96", "1152Gi", 8, "A100", 40, 21.96),
        ("p5.48xlarge", "192", "2048Gi", 8, "H100", 80, 98.32),
    ]
    .into_iter()
    .map(|(name, cpu, mem, n, model, gb, price)| {
        itype(name)
            .cpu(cpu)
            .mem(mem)
            .gpus(n, model, gb)
            .on_demand(zones, price)
            .build()
    })
    .collect()
}

/// [`gpu_types_in`] the three [`ZONES`].
pub fn gpu_types() -> Vec<InstanceType> {
    gpu_types_in(&ZONES)
}

/// Plans `snap`, checks the rendered plan against `expected` and that planning again gives
/// the same plan (determinism); returns the plan.
pub fn check(snap: &Snapshot, expected: Expect) -> Plan {
    let plan = plan_provisioning(snap);
    expected.assert_eq(&plan.render());
    assert_eq!(plan, plan_provisioning(snap), "deterministic");
    plan
}

/// Declares every all-or-nothing group the pending pods name, with all its pending members as
/// its minimum.
pub fn with_groups(mut snap: Snapshot) -> Snapshot {
    let names: Vec<String> = snap
        .pending
        .iter()
        .filter_map(|p| p.group.clone())
        .collect();
    for name in names {
        let min_count = snap
            .pending
            .iter()
            .filter(|p| p.group.as_deref() == Some(&name))
            .count() as u32;
        snap.groups.insert(name.clone(), Group { name, min_count });
    }
    snap
}

/// `t` with a spot offering beside each of its offerings, at 40 % of its price.
pub fn with_spot(mut t: InstanceType) -> InstanceType {
    let spot: Vec<Offering> = t
        .offerings
        .iter()
        .map(|o| Offering {
            capacity_type: CapacityType::Spot,
            price: o.price * 0.4,
            ..o.clone()
        })
        .collect();
    t.offerings.extend(spot);
    t
}

/// The node a new claim of a plan of `snap` becomes, named `name` and holding `pods`: its
/// cheapest type, in the zone and capacity type its requirements pin, else its cheapest
/// offering's (the cloud picks among the rest), with the claim's labels and taints.
///
/// Panics when the claim leaves a pod with a rule on the zone or capacity type (a hard
/// spread, an affinity or anti-affinity term) free to land in more than one of them: the
/// plan would then hold only if the cloud happened to pick the right one.
pub fn launch(snap: &Snapshot, c: &NewClaim, name: &str, pods: Vec<Pod>) -> Node {
    let pool = snap.pools.iter().find(|p| p.name == c.pool).unwrap();
    let opt = &c.instance_types[0];
    let it = pool
        .instance_types
        .iter()
        .find(|t| *t.name == *opt.instance_type)
        .unwrap();
    let pick = |key: &str, values: Vec<String>| -> String {
        if let Some(v) = c.requirements.get(key).and_then(|x| x.single_value()) {
            return v.to_string();
        }
        let mut distinct = values.clone();
        distinct.sort();
        distinct.dedup();
        if distinct.len() > 1 {
            let constrained = pods.iter().any(|p| {
                p.spread.iter().any(|s| s.hard && s.topology_key == key)
                    || p.affinity.iter().any(|s| s.topology_key == key)
                    || p.anti_affinity.iter().any(|s| s.topology_key == key)
            });
            assert!(
                !constrained,
                "claim {} holds pods with rules on {key} but may land in {distinct:?}",
                c.name
            );
        }
        values[0].clone()
    };
    let zone = pick(
        labels::ZONE,
        opt.offerings.iter().map(|o| o.0.to_string()).collect(),
    );
    let ct = pick(
        labels::CAPACITY_TYPE,
        opt.offerings
            .iter()
            .map(|o| o.1.as_str().to_string())
            .collect(),
    );
    let mut nb = node(name, it, &zone).pool(&c.pool);
    for (k, v) in &c.labels {
        nb = nb.label(k, v);
    }
    // The cloud decides the zone and capacity type: the launched offering's.
    nb = nb
        .label(labels::ZONE, &zone)
        .label(labels::CAPACITY_TYPE, &ct);
    for t in &c.taints {
        nb = nb.taint(t.clone());
    }
    for p in pods {
        nb = nb.with_pod(p);
    }
    nb.build()
}

/// The cluster of `nodes` and `pools`, nothing pending.
pub fn snap(nodes: Vec<NodeBuilder>, pools: Vec<PoolBuilder>) -> Snapshot {
    Snapshot {
        nodes: nodes.into_iter().map(NodeBuilder::build).collect(),
        pools: pools.into_iter().map(PoolBuilder::build).collect(),
        ..Snapshot::default()
    }
}

/// The nodes a disruption plan's commands remove.
pub fn removed(plan: &DisruptionPlan) -> BTreeSet<String> {
    plan.commands
        .iter()
        .flat_map(|c| c.nodes.iter().cloned())
        .collect()
}

/// A set of node names.
pub fn names(list: &[&str]) -> BTreeSet<String> {
    list.iter().map(|s| s.to_string()).collect()
}
