//! `minValues` scenarios: a NodePool that demands flexibility (several distinct instance types,
//! zones or label values per node) gets claims that keep it, or pods with the reason why not;
//! under `minValuesPolicy: BestEffort`, claims with the rules they fall short of lowered.

use std::collections::{BTreeMap, BTreeSet};

use autoscaler_core::builders::*;
use autoscaler_core::explain::{RefusalKind, explain_pod};
use autoscaler_core::instance::InstanceType;
use autoscaler_core::labels;
use autoscaler_core::model::{Group, MinValuesPolicy, Snapshot};
use autoscaler_core::plan::{NewClaim, Plan};
use autoscaler_core::provision::{PlanOptions, plan_provisioning, plan_with};
use autoscaler_core::requirements::{Operator, Requirements};

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
    let names: Vec<&str> = c.instance_types.iter().map(|o| &*o.instance_type).collect();
    assert_eq!(names, ["m5.1x", "m6.1x"], "{}", plan.render());
    // Without the rule, the two cheapest.
    let mut snap = snap;
    snap.pools[0].min_values.clear();
    let plan = plan_with(&snap, &opts);
    let names: Vec<&str> = plan.new_claims[0]
        .instance_types
        .iter()
        .map(|o| &*o.instance_type)
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

// ============================================================ minValuesPolicy: BestEffort

/// `snap` planned under Karpenter's `--min-values-policy=BestEffort`.
fn best_effort(mut snap: Snapshot) -> Snapshot {
    snap.min_values_policy = MinValuesPolicy::BestEffort;
    snap
}

/// The relaxed `minValues` of the claim that takes pod `name`.
fn relaxed_of(plan: &Plan, name: &str) -> BTreeMap<String, u32> {
    plan.new_claims
        .iter()
        .find(|c| c.pods.iter().any(|k| k.name == name))
        .unwrap_or_else(|| panic!("{name} got no claim:\n{}", plan.render()))
        .min_values_relaxed
        .clone()
}

#[test]
fn best_effort_launches_what_strict_leaves_pending_and_records_the_relaxed_count() {
    // Karpenter's e2e case: the pool allows c5.large and two types no catalog has, and wants
    // three of them. Strict leaves the pod pending; BestEffort launches c5.large with
    // `minValues: 1` on the instance-type requirement.
    let catalog = vec![
        itype("c5.large")
            .cpu("2")
            .mem("4Gi")
            .on_demand(&ZONES, 0.085)
            .build(),
        itype("m5.large")
            .cpu("2")
            .mem("8Gi")
            .on_demand(&ZONES, 0.096)
            .build(),
    ];
    let snap = snapshot(
        vec![pod("web").cpu("1")],
        pool("p", catalog)
            .require(
                labels::INSTANCE_TYPE,
                Operator::In,
                &[
                    "c5.large",
                    "invalid-instance-type-1",
                    "invalid-instance-type-2",
                ],
            )
            .min_values(labels::INSTANCE_TYPE, 3),
    );
    let strict = plan_provisioning(&snap);
    assert!(strict.new_claims.is_empty(), "{}", strict.render());
    assert!(strict.unschedulable[0].reason.contains("minValues"));
    let plan = plan_provisioning(&best_effort(snap));
    assert!(plan.unschedulable.is_empty(), "{}", plan.render());
    let names: Vec<&str> = plan.new_claims[0]
        .instance_types
        .iter()
        .map(|o| &*o.instance_type)
        .collect();
    assert_eq!(names, ["c5.large"]);
    assert_eq!(
        relaxed_of(&plan, "web"),
        BTreeMap::from([(labels::INSTANCE_TYPE.to_string(), 1)])
    );
}

#[test]
fn best_effort_marks_only_the_claim_that_falls_short() {
    // Any 12-CPU pod fits both 16-CPU types, so its claim meets the pool's two instance types
    // and is Strict's to the byte, nothing recorded as relaxed (Karpenter writes the
    // annotation "false"). Pinned to tier a, only one fits: Strict refuses that pod,
    // BestEffort opens its claim with the rule lowered to one.
    let snap = snapshot(
        vec![
            pod("big").cpu("12"),
            pod("pinned")
                .cpu("12")
                .require("tier", Operator::In, &["a"]),
        ],
        pool("p", types()).min_values(labels::INSTANCE_TYPE, 2),
    );
    let strict = plan_provisioning(&snap);
    assert_eq!(strict.new_claims.len(), 1, "{}", strict.render());
    assert_eq!(strict.unschedulable.len(), 1, "{}", strict.render());
    let plan = plan_provisioning(&best_effort(snap));
    assert!(plan.unschedulable.is_empty(), "{}", plan.render());
    assert_eq!(plan.new_claims.len(), 2, "{}", plan.render());
    let big = plan
        .new_claims
        .iter()
        .find(|c| c.pods.iter().any(|k| k.name == "big"));
    assert_eq!(big, Some(&strict.new_claims[0]), "{}", plan.render());
    assert!(strict.new_claims[0].min_values_relaxed.is_empty());
    assert_eq!(
        relaxed_of(&plan, "pinned"),
        BTreeMap::from([(labels::INSTANCE_TYPE.to_string(), 1)])
    );
}

#[test]
fn best_effort_relaxes_only_the_rules_that_fall_short() {
    // Tier a only: four sizes of one family. The pool wants two tiers (one is there) and three
    // instance types (the 12-CPU pod fits one): both are lowered, a third rule that is met is
    // left as it is.
    let snap = snapshot(
        vec![pod("big").cpu("12").require("tier", Operator::In, &["a"])],
        pool("p", types())
            .min_values(labels::INSTANCE_TYPE, 3)
            .min_values("tier", 2)
            .min_values(labels::ZONE, 2),
    );
    let plan = plan_provisioning(&best_effort(snap));
    assert_eq!(
        relaxed_of(&plan, "big"),
        BTreeMap::from([
            (labels::INSTANCE_TYPE.to_string(), 1),
            ("tier".to_string(), 1)
        ]),
        "{}",
        plan.render()
    );
    assert_eq!(zones(&plan.new_claims[0]), 3);
}

#[test]
fn best_effort_truncation_does_not_refuse_the_claim() {
    // At most two types per claim, and three instance types wanted: Strict refuses every
    // claim (its truncation would break the rule); BestEffort keeps two and says so.
    let snap = snapshot(
        vec![pod("small").cpu("1")],
        pool("p", types()).min_values(labels::INSTANCE_TYPE, 3),
    );
    let opts = PlanOptions {
        max_instance_types: 2,
        ..PlanOptions::default()
    };
    let strict = plan_with(&snap, &opts);
    assert!(strict.new_claims.is_empty(), "{}", strict.render());
    assert!(
        strict.unschedulable[0]
            .reason
            .contains("a NodeClaim lists at most 2 instance types")
    );
    let plan = plan_with(&best_effort(snap), &opts);
    assert_eq!(plan.new_claims.len(), 1, "{}", plan.render());
    assert_eq!(plan.new_claims[0].instance_types.len(), 2);
    assert_eq!(
        relaxed_of(&plan, "small"),
        BTreeMap::from([(labels::INSTANCE_TYPE.to_string(), 2)])
    );
}

#[test]
fn best_effort_pods_that_join_keep_the_values_the_claim_was_opened_with() {
    // Tier a only, five instance types wanted. The 2.5-CPU pod fits three sizes: its claim
    // opens relaxed to three. A 100m pod joining keeps all three, so it rides along; a second
    // 2.5-CPU pod would leave two (the 4-CPU size no longer holds both) and opens its own.
    let tier_a = |p: PodBuilder| p.require("tier", Operator::In, &["a"]);
    let snap = best_effort(snapshot(
        vec![
            tier_a(pod("a").cpu("2500m")),
            tier_a(pod("b").cpu("2500m")),
            tier_a(pod("tiny").cpu("100m")),
        ],
        pool("p", types()).min_values(labels::INSTANCE_TYPE, 5),
    ));
    let plan = plan_provisioning(&snap);
    assert!(plan.unschedulable.is_empty(), "{}", plan.render());
    assert_eq!(plan.new_claims.len(), 2, "{}", plan.render());
    for c in &plan.new_claims {
        assert_eq!(distinct(c, str::to_string), 3, "{}", plan.render());
        assert_eq!(
            c.min_values_relaxed,
            BTreeMap::from([(labels::INSTANCE_TYPE.to_string(), 3)])
        );
    }
    let a = plan
        .new_claims
        .iter()
        .position(|c| c.pods.iter().any(|k| k.name == "a"));
    let b = plan
        .new_claims
        .iter()
        .position(|c| c.pods.iter().any(|k| k.name == "b"));
    assert_ne!(a, b, "{}", plan.render());
    let tiny = plan
        .new_claims
        .iter()
        .position(|c| c.pods.iter().any(|k| k.name == "tiny"));
    assert!(tiny == a || tiny == b, "{}", plan.render());
}

#[test]
fn best_effort_holds_a_preferred_instance_type_below_min_values() {
    // Karpenter tries the heaviest preferred term as required before it relaxes it: under
    // BestEffort that claim opens with its minValues lowered. Under Strict the preference
    // would break the rule, so the pod is planned without it.
    let snap = snapshot(
        vec![pod("web").cpu("1").prefer(
            10,
            Requirements::new().with(labels::INSTANCE_TYPE, Operator::In, &["m5.2x"]),
        )],
        pool("p", types()).min_values(labels::INSTANCE_TYPE, 2),
    );
    let strict = plan_provisioning(&snap);
    assert!(distinct(&strict.new_claims[0], str::to_string) >= 2);
    assert!(strict.new_claims[0].min_values_relaxed.is_empty());
    let plan = plan_provisioning(&best_effort(snap));
    let names: Vec<&str> = plan.new_claims[0]
        .instance_types
        .iter()
        .map(|o| &*o.instance_type)
        .collect();
    assert_eq!(names, ["m5.2x"], "{}", plan.render());
    assert_eq!(
        relaxed_of(&plan, "web"),
        BTreeMap::from([(labels::INSTANCE_TYPE.to_string(), 1)])
    );
}

#[test]
fn explain_says_a_pool_relaxes_its_min_values_rather_than_refusing() {
    let snap = snapshot(
        vec![pod("big").cpu("12").require("tier", Operator::In, &["a"])],
        pool("p", types()).min_values(labels::INSTANCE_TYPE, 2),
    );
    let key = snap.pending[0].key.clone();
    let strict = explain_pod(&snap, &key).expect("pending");
    assert_eq!(
        strict.pools[0].refused.as_ref().map(|r| r.kind),
        Some(RefusalKind::MinValues)
    );
    let e = explain_pod(&best_effort(snap), &key).expect("pending");
    assert!(e.pools[0].refused.is_none(), "{}", e.render());
    assert!(
        e.pools[0]
            .min_values_relaxed
            .as_deref()
            .is_some_and(|w| w.contains("only 1 fit")),
        "{}",
        e.render()
    );
    let text = e.render();
    assert!(
        text.contains("minValues relaxed (--min-values-policy=BestEffort): node.kubernetes.io/instance-type to 1"),
        "{text}"
    );
    assert!(
        text.contains("p (weight 0): minValues relaxed (BestEffort)"),
        "{text}"
    );
}
