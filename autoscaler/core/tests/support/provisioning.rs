//! The planning and plan-reading helpers of the Karpenter provisioning suites
//! (`karpenter_selection`, `karpenter_scheduling_more`): a cluster of pending pods and
//! NodePools, a deterministic plan of it, and where that plan puts a pod.

use autoscaler_core::builders::{PodBuilder, PoolBuilder};
use autoscaler_core::model::{PodKey, Snapshot};
use autoscaler_core::plan::{NewClaim, Plan};
use autoscaler_core::provision::plan_provisioning;

/// The cluster of pending `pods` and `pools`, no nodes.
pub fn snapshot(pools: Vec<PoolBuilder>, pods: Vec<PodBuilder>) -> Snapshot {
    Snapshot {
        pending: pods.into_iter().map(PodBuilder::build).collect(),
        pools: pools.into_iter().map(PoolBuilder::build).collect(),
        ..Snapshot::default()
    }
}

/// Plans `snap` twice (both plans must agree) and prints the plan.
pub fn run(snap: &Snapshot) -> Plan {
    let plan = plan_provisioning(snap);
    eprintln!("{}", plan.render());
    assert_eq!(plan, plan_provisioning(snap), "deterministic");
    plan
}

/// [`run`] on the [`snapshot`] of `pools` and `pods`.
pub fn plan(pools: Vec<PoolBuilder>, pods: Vec<PodBuilder>) -> Plan {
    run(&snapshot(pools, pods))
}

/// The key of pod `name` in namespace `default`.
pub fn key(name: &str) -> PodKey {
    PodKey {
        namespace: "default".into(),
        name: name.into(),
    }
}

/// Where the plan puts pod `name`: a node, an in-flight claim or a new claim.
pub fn target(plan: &Plan, name: &str) -> Option<String> {
    let k = key(name);
    plan.existing
        .iter()
        .chain(&plan.in_flight)
        .find(|p| p.pod == k)
        .map(|p| p.target.clone())
        .or_else(|| {
            plan.new_claims
                .iter()
                .find(|c| c.pods.contains(&k))
                .map(|c| c.name.clone())
        })
}

/// Whether the plan puts pod `name` anywhere.
pub fn scheduled(plan: &Plan, name: &str) -> bool {
    target(plan, name).is_some()
}

/// The new claim that takes pod `name`; panics, printing the plan, when none does.
pub fn claim_of<'a>(plan: &'a Plan, name: &str) -> &'a NewClaim {
    let k = key(name);
    plan.new_claims
        .iter()
        .find(|c| c.pods.contains(&k))
        .unwrap_or_else(|| panic!("{name} got no new claim:\n{}", plan.render()))
}

/// The instance types a claim may launch, cheapest first.
pub fn type_names(c: &NewClaim) -> Vec<&str> {
    c.instance_types.iter().map(|o| &*o.instance_type).collect()
}
