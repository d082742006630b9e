//! The fixtures the Cluster Autoscaler suites share (`cluster_autoscaler_parity`,
//! `cluster_autoscaler_suites`, `cluster_autoscaler_more`): a node group's scale-down policy,
//! parallelism limits that crop nothing, their ReplicaSet pods and PodDisruptionBudgets, the
//! verdict a plan gives a node, and the binpacking estimator's template, NodePool and old node.

use autoscaler_core::DisruptionPlan;
use autoscaler_core::builders::{NodeBuilder, PodBuilder, PoolBuilder, itype, node, pod, pool};
use autoscaler_core::disruption::{DisruptionConfig, VerdictKind};
use autoscaler_core::instance::InstanceType;
use autoscaler_core::model::{DisruptionPolicy, Pdb};
use autoscaler_core::requirements::{Operator, Requirements};

/// A node group's scale-down policy as a NodePool's: removable exactly when the Cluster
/// Autoscaler would call it unneeded (utilization strictly below `cpu`, or `gpu` on GPU nodes),
/// no wait, no right-sizing, no NodePool budget.
pub fn ca_policy(cpu: f64, gpu: f64) -> DisruptionPolicy {
    DisruptionPolicy {
        consolidate_after_s: 0,
        unneeded_s: 0,
        utilization_threshold: cpu,
        gpu_utilization_threshold: gpu,
        right_size_savings: 0.0,
        budgets: vec![],
        ..DisruptionPolicy::default()
    }
}

/// Parallelism limits high enough that they crop nothing (upstream asserts the unneeded or
/// removable set).
pub fn unbounded() -> DisruptionConfig {
    DisruptionConfig {
        max_scale_down_parallelism: 1000,
        max_drain_parallelism: 1000,
        ..DisruptionConfig::default()
    }
}

/// A ReplicaSet pod of `milli` millicores and no memory.
pub fn rs(name: &str, milli: u32) -> PodBuilder {
    pod(name).cpu(&format!("{milli}m"))
}

/// A PodDisruptionBudget in namespace `ns`, named `<key>-<value>`, selecting `key=value` and
/// allowing `allowed` disruptions.
pub fn pdb(ns: &str, key: &str, value: &str, allowed: i32) -> Pdb {
    Pdb {
        namespace: ns.into(),
        name: format!("{key}-{value}"),
        selector: Requirements::new().with(key, Operator::In, &[value]),
        disruptions_allowed: allowed,
    }
}

/// The verdict `plan` gives `node`; panics, printing the plan, when it gives none.
pub fn kind(plan: &DisruptionPlan, node: &str) -> VerdictKind {
    plan.verdicts
        .iter()
        .find(|v| v.node == node)
        .map(|v| v.kind)
        .unwrap_or_else(|| panic!("no verdict for {node}\n{}", plan.render()))
}

/// The binpacking estimator's template (`estimator/binpacking_estimator_test.go`): `milli`
/// millicores, `mem_mi` MiB and 10 pod slots, offered in `zone-mars` at 1.0.
pub fn estimator_template(milli: u32, mem_mi: u32) -> InstanceType {
    itype("template.t")
        .cpu(&format!("{milli}m"))
        .mem(&format!("{mem_mi}Mi"))
        .max_pods(10)
        .on_demand(&["zone-mars"], 1.0)
        .build()
}

/// The estimator's node group: NodePool `mars` of `template`, at most `max_nodes` nodes.
pub fn mars_pool(template: InstanceType, max_nodes: Option<i64>) -> PoolBuilder {
    let mars = pool("mars", vec![template]);
    match max_nodes {
        Some(m) => mars.limit_nodes(m),
        None => mars,
    }
}

/// The estimator's old node `oldnode`: 100m, 100 MiB and 10 pod slots in `zone-jupiter`, in
/// no node group, empty.
pub fn estimator_old_node() -> NodeBuilder {
    let old = itype("old.t")
        .cpu("100m")
        .mem("100Mi")
        .max_pods(10)
        .on_demand(&["zone-jupiter"], 0.1)
        .build();
    node("oldnode", &old, "zone-jupiter")
}
