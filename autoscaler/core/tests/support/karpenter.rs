//! The fixtures of Karpenter's disruption suites as rebuilt here (`karpenter_consolidation`,
//! `karpenter_disruption`): its NodePool's disruption settings, its fake cloud's kinds of
//! instance types and nodes, and a plan without parallelism limits at one fixed time.

use autoscaler_core::DisruptionPlan;
use autoscaler_core::builders::*;
use autoscaler_core::disruption::{DisruptionConfig, DisruptionState, plan_disruption};
use autoscaler_core::instance::{CapacityType, InstanceType};
use autoscaler_core::labels;
use autoscaler_core::model::{Budget, BudgetValue, DisruptionPolicy, Snapshot};

/// The time every plan is made at (seconds).
pub const NOW: i64 = 10_000;

/// An on-demand type with `cpu` cpus offered in `z1` at `price`.
pub fn od(name: &str, cpu: &str, price: f64) -> InstanceType {
    itype(name)
        .cpu(cpu)
        .mem("128Gi")
        .on_demand(&["z1"], price)
        .build()
}

/// A type with `cpu` cpus offered as spot in `z1` at `price`.
pub fn spot(name: &str, cpu: &str, price: f64) -> InstanceType {
    itype(name)
        .cpu(cpu)
        .mem("128Gi")
        .offer("z1", CapacityType::Spot, price)
        .build()
}

/// The cheapest type: no replacement can undercut a node of it.
pub fn least() -> InstanceType {
    od("least.large", "32", 0.1)
}

/// A budget of `nodes` for every reason.
pub fn budget(nodes: BudgetValue) -> Budget {
    Budget {
        nodes,
        reasons: vec![],
        schedule: None,
    }
}

/// The NodePool of upstream's suite, as far as our model goes.
pub fn karpenter_policy() -> DisruptionPolicy {
    DisruptionPolicy {
        consolidate_after_s: 0,
        unneeded_s: 0,
        utilization_threshold: 1.0,
        gpu_utilization_threshold: 1.0,
        budgets: vec![budget(BudgetValue::Percent(100))],
        ..DisruptionPolicy::default()
    }
}

/// A NodePool of `types` with upstream's disruption settings.
pub fn kpool(name: &str, types: Vec<InstanceType>) -> PoolBuilder {
    pool(name, types).disruption(karpenter_policy())
}

/// A managed node of pool `p`, created at 0, in `z1`.
pub fn kn(name: &str, it: &InstanceType, p: &str) -> NodeBuilder {
    node(name, it, "z1").pool(p)
}

/// A spot node of pool `p`.
pub fn spot_node(name: &str, it: &InstanceType, p: &str) -> NodeBuilder {
    kn(name, it, p).label(labels::CAPACITY_TYPE, CapacityType::Spot.as_str())
}

/// A ReplicaSet pod labelled `app=test`.
pub fn rs_pod(name: &str) -> PodBuilder {
    pod(name).label("app", "test")
}

/// Karpenter has no parallelism limits.
pub fn config() -> DisruptionConfig {
    DisruptionConfig {
        max_scale_down_parallelism: 10_000,
        max_drain_parallelism: 10_000,
        ..DisruptionConfig::default()
    }
}

/// The disruption plan at [`NOW`].
pub fn run(s: &Snapshot) -> DisruptionPlan {
    plan_disruption(s, &DisruptionState::default(), NOW, &config())
}

/// The instance types a plan's replacements may launch.
pub fn replacement_types(plan: &DisruptionPlan) -> Vec<Vec<String>> {
    plan.commands
        .iter()
        .filter_map(|c| c.replacement.as_ref())
        .map(|r| {
            r.instance_types
                .iter()
                .map(|o| o.instance_type.to_string())
                .collect()
        })
        .collect()
}

/// Twenty spot types, 32 cpus each, priced 1.0, 1.1, ... 2.9.
pub fn spot_catalog(count: usize) -> Vec<InstanceType> {
    (0..count)
        .map(|i| spot(&format!("s{i:02}.large"), "32", 1.0 + i as f64 * 0.1))
        .collect()
}

/// Two nodes of the least expensive type: two pods on `n0`, one on `n1`.
pub fn two_least(pods: [PodBuilder; 3]) -> Vec<NodeBuilder> {
    let [a, b, c] = pods;
    vec![
        kn("n0", &least(), "p").with_pod(a).with_pod(b),
        kn("n1", &least(), "p").with_pod(c),
    ]
}
