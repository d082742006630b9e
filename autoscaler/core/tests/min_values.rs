//! `minValues` scenarios: a NodePool that demands flexibility (several distinct instance types,
//! zones or label values per node) gets claims that keep it, or pods with the reason why not.

use std::collections::BTreeSet;

use autoscaler_core::builders::*;
use autoscaler_core::instance::InstanceType;
use autoscaler_core::labels;
use autoscaler_core::model::{Group, Snapshot};
use autoscaler_core::plan::{NewClaim, Plan};
use autoscaler_core::provision::{PlanOptions, plan_provisioning, plan_with};
use autoscaler_core::requirements::Operator;

const ZONES: [&str; 3] = ["us-east-1a", "us-east-1b", "us-east-1c"];

/// Four sizes of one family (`tier=a`), and a second family (`tier=b`) at 2.5 times the price.
fn types() -> Vec<InstanceType> {
    let mut out = Vec::new();
    for (i, (cpu, mem)) in [("2", "8Gi"), ("4", "16Gi"), ("8", "32Gi"), ("16", "64Gi")]
        .into_iter()
        .enumerate()
    {
        let size = 1u32 << i;
        out.push(
            itype(&format!("m5.{size}x"))
                .cpu(cpu)
                .mem(mem)
                .label("tier", "a")
                .on_demand(&ZONES, 0.1 * f64::from(size))
                .build(),
        );
        out.push(
            itype(&format!("m6.{size}x"))
                .cpu(cpu)
                .mem(mem)
                .label("tier", "b")
                .on_demand(&ZONES, 0.25 * f64::from(size))
                .build(),
        );
    }
    out
}

fn snapshot(pods: Vec<PodBuilder>, pool: PoolBuilder) -> Snapshot {
    Snapshot {
        pending: pods.into_iter().map(|p| p.build()).collect(),
        pools: vec![pool.build()],
        ..Snapshot::default()
    }
}

fn distinct(c: &NewClaim, f: impl Fn(&str) -> String) -> usize {
    c.instance_types
        .iter()
        .map(|o| f(&o.instance_type))
        .collect::<BTreeSet<_>>()
        .len()
}

fn zones(c: &NewClaim) -> usize {
    c.instance_types
        .iter()
        .flat_map(|o| o.offerings.iter().map(|x| x.0.clone()))
        .collect::<BTreeSet<_>>()
        .len()
}

fn placed(plan: &Plan) -> usize {
    plan.new_claims.iter().map(|c| c.pods.len()).sum()
}

#[test]
fn a_pod_only_one_type_fits_is_refused_when_the_pool_wants_two() {
    // 12 CPUs fit only the two 16-CPU types; restricted to tier a, only one remains.
    let big = || pod("big").cpu("12").require("tier", Operator::In, &["a"]);
    let plan = plan_provisioning(&snapshot(
        vec![big()],
        pool("p", types()).min_values(labels::INSTANCE_TYPE, 2),
    ));
    assert!(plan.new_claims.is_empty(), "{}", plan.render());
    let why = &plan.unschedulable[0].reason;
    assert!(
        why.contains("needs 2 distinct values of node.kubernetes.io/instance-type")
            && why.contains("minValues")
            && why.contains("only 1 fit"),
        "{why}"
    );
    // The same pod in the same pool without the rule gets its node: the rule was the blocker.
    let plan = plan_provisioning(&snapshot(vec![big()], pool("p", types())));
    assert_eq!(plan.new_claims.len(), 1, "{}", plan.render());
    // And with both families allowed, two types fit: the claim keeps both.
    let plan = plan_provisioning(&snapshot(
        vec![pod("big").cpu("12")],
        pool("p", types()).min_values(labels::INSTANCE_TYPE, 2),
    ));
    assert_eq!(plan.new_claims.len(), 1, "{}", plan.render());
    assert_eq!(distinct(&plan.new_claims[0], str::to_string), 2);
}

#[test]
fn packing_stops_before_a_claim_loses_its_last_alternative() {
    // 2.5-CPU pods share 8- and 16-CPU nodes; with tier=a only and three distinct types
    // required, no claim may grow past what the 4-CPU size holds (one pod).
    let pods = || {
        (0..6)
            .map(|i| {
                pod(&format!("w{i}"))
                    .cpu("2500m")
                    .require("tier", Operator::In, &["a"])
            })
            .collect::<Vec<_>>()
    };
    let free = plan_provisioning(&snapshot(pods(), pool("p", types())));
    assert!(
        free.new_claims.iter().all(|c| c.pods.len() >= 3),
        "{}",
        free.render()
    );
    let plan = plan_provisioning(&snapshot(
        pods(),
        pool("p", types()).min_values(labels::INSTANCE_TYPE, 3),
    ));
    assert_eq!(placed(&plan), 6, "{}", plan.render());
    for c in &plan.new_claims {
        assert_eq!(c.pods.len(), 1, "{}", plan.render());
        assert!(distinct(c, str::to_string) >= 3, "{}", plan.render());
    }
}

#[test]
fn truncation_keeps_a_value_of_each_label_the_rule_names() {
    // At most two types per claim: by price alone both would be tier a (m5.1x and m5.2x), so
    // tier's minValues swaps in the cheapest tier b type.
    let snap = snapshot(
        vec![pod("small").cpu("1")],
        pool("p", types()).min_values("tier", 2),
    );
    let opts = PlanOptions {
        max_instance_types: 2,
        ..PlanOptions::default()
    };
    let plan = plan_with(&snap, &opts);
    let c = &plan.new_claims[0];
    let names: Vec<&str> = c
        .instance_types
        .iter()
        .map(|o| o.instance_type.as_str())
        .collect();
    assert_eq!(names, ["m5.1x", "m6.1x"], "{}", plan.render());
    // Without the rule, the two cheapest.
    let mut snap = snap;
    snap.pools[0].min_values.clear();
    let plan = plan_with(&snap, &opts);
    let names: Vec<&str> = plan.new_claims[0]
        .instance_types
        .iter()
        .map(|o| o.instance_type.as_str())
        .collect();
    assert_eq!(names, ["m5.1x", "m5.2x"], "{}", plan.render());
}

#[test]
fn zone_rules_count_offerings() {
    let pinned = pod("pinned")
        .cpu("1")
        .require(labels::ZONE, Operator::In, &["us-east-1b"]);
    let plan = plan_provisioning(&snapshot(
        vec![pinned],
        pool("p", types()).min_values(labels::ZONE, 2),
    ));
    assert!(plan.new_claims.is_empty(), "{}", plan.render());
    assert!(
        plan.unschedulable[0]
            .reason
            .contains("needs 2 distinct values of topology.kubernetes.io/zone"),
        "{}",
        plan.render()
    );
    let plan = plan_provisioning(&snapshot(
        vec![pod("free").cpu("1")],
        pool("p", types()).min_values(labels::ZONE, 2),
    ));
    assert_eq!(plan.new_claims.len(), 1, "{}", plan.render());
    assert!(zones(&plan.new_claims[0]) >= 2, "{}", plan.render());
}

#[test]
fn a_gang_in_a_pool_with_zone_flexibility_is_not_narrowed_to_one_zone() {
    // Two 12-CPU members need two nodes: normally narrowed to one zone; minValues on zone
    // outranks that preference.
    let members = || {
        (0..2)
            .map(|i| pod(&format!("g{i}")).cpu("12").group("job"))
            .collect::<Vec<_>>()
    };
    let gang = |pool: PoolBuilder| {
        let mut s = snapshot(members(), pool);
        s.groups.insert(
            "job".into(),
            Group {
                name: "job".into(),
                min_count: 2,
            },
        );
        plan_provisioning(&s)
    };
    let narrowed = gang(pool("p", types()));
    assert_eq!(narrowed.new_claims.len(), 2, "{}", narrowed.render());
    assert!(narrowed.new_claims.iter().all(|c| zones(c) == 1));
    // One zone: one placement group for both members.
    assert!(
        narrowed
            .new_claims
            .iter()
            .all(|c| c.group.as_deref() == Some("job")),
        "{}",
        narrowed.render()
    );
    let flexible = gang(pool("p", types()).min_values(labels::ZONE, 2));
    assert_eq!(flexible.new_claims.len(), 2, "{}", flexible.render());
    assert!(flexible.new_claims.iter().all(|c| zones(c) >= 2));
    // Several zones: a placement group (one zone in every cloud) would refuse some members.
    assert!(
        flexible.new_claims.iter().all(|c| c.group.is_none()),
        "{}",
        flexible.render()
    );
}

#[test]
fn gpu_types_count_toward_min_values_when_cpu_types_alone_fall_short() {
    let mixed = vec![
        itype("m5.large")
            .cpu("2")
            .mem("8Gi")
            .on_demand(&ZONES, 0.1)
            .build(),
        itype("m5.xlarge")
            .cpu("4")
            .mem("16Gi")
            .on_demand(&ZONES, 0.2)
            .build(),
        itype("g5.xlarge")
            .cpu("4")
            .mem("16Gi")
            .gpus(1, "A10G", 24)
            .on_demand(&ZONES, 1.0)
            .build(),
    ];
    let plan = plan_provisioning(&snapshot(
        vec![pod("web").cpu("1")],
        pool("p", mixed.clone()).min_values(labels::INSTANCE_TYPE, 3),
    ));
    assert_eq!(plan.new_claims.len(), 1, "{}", plan.render());
    assert_eq!(distinct(&plan.new_claims[0], str::to_string), 3);
    // Without the rule the GPU type stays a last resort, left out of the claim.
    let plan = plan_provisioning(&snapshot(vec![pod("web").cpu("1")], pool("p", mixed)));
    assert_eq!(distinct(&plan.new_claims[0], str::to_string), 2);
}
