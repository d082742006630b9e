//! Gang zone preference: an all-or-nothing group's new claims land in one zone when one zone can
//! hold the whole group (`UPDATE_EXPECT=1 cargo test` refreshes the expectations).

use autoscaler_core::builders::*;
use autoscaler_core::instance::{CapacityType, InstanceType};
use autoscaler_core::labels;
use autoscaler_core::model::Snapshot;
use autoscaler_core::plan::Plan;
use autoscaler_core::provision::plan_provisioning;
use autoscaler_core::taints::{Effect, Toleration};
mod support;
use expect_test::{Expect, expect};
use support::with_groups;

/// p4d.24xlarge on demand in three zones, cheapest in b.
fn p4d() -> InstanceType {
    itype("p4d.24xlarge")
        .cpu("96")
        .mem("1152Gi")
        .gpus(8, "A100", 40)
        .offer("us-east-1a", CapacityType::OnDemand, 21.96)
        .offer("us-east-1b", CapacityType::OnDemand, 21.50)
        .offer("us-east-1c", CapacityType::OnDemand, 22.40)
        .build()
}

fn gpu_toleration() -> Toleration {
    Toleration::exists("nvidia.com/gpu")
}

fn gang(name: &str, n: usize) -> Vec<PodBuilder> {
    (0..n)
        .map(|i| {
            pod(&format!("{name}-{i}"))
                .gpus(8)
                .model("A100")
                .tolerate(gpu_toleration())
                .group(name)
        })
        .collect()
}

fn snapshot(pods: Vec<PodBuilder>, types: Vec<InstanceType>) -> Snapshot {
    with_groups(Snapshot {
        pending: pods.into_iter().map(|p| p.build()).collect(),
        pools: vec![
            pool("gpu", types)
                .taint("nvidia.com/gpu", "present")
                .build(),
        ],
        ..Snapshot::default()
    })
}

fn zones(plan: &Plan) -> Vec<Vec<String>> {
    plan.new_claims
        .iter()
        .map(|c| {
            let mut z: Vec<String> = c
                .instance_types
                .iter()
                .flat_map(|o| o.offerings.iter().map(|x| x.0.to_string()))
                .collect();
            z.sort();
            z.dedup();
            z
        })
        .collect()
}

fn check(snap: &Snapshot, expected: Expect) -> Plan {
    let plan = plan_provisioning(snap);
    expected.assert_eq(&plan.render());
    assert_eq!(plan, plan_provisioning(snap), "deterministic");
    plan
}

#[test]
fn gang_claims_are_narrowed_to_the_cheapest_common_zone() {
    let snap = snapshot(gang("train", 3), vec![p4d()]);
    let plan = check(
        &snap,
        expect![[r#"
            claim gpu-1 pool=gpu price=21.500 types=[p4d.24xlarge] pods=[train-0]
              requirements: gpu-autoscaler.dev/instance-gpu-name In [a100], topology.kubernetes.io/zone In [us-east-1b]
              group: train
            claim gpu-2 pool=gpu price=21.500 types=[p4d.24xlarge] pods=[train-1]
              requirements: gpu-autoscaler.dev/instance-gpu-name In [a100], topology.kubernetes.io/zone In [us-east-1b]
              group: train
            claim gpu-3 pool=gpu price=21.500 types=[p4d.24xlarge] pods=[train-2]
              requirements: gpu-autoscaler.dev/instance-gpu-name In [a100], topology.kubernetes.io/zone In [us-east-1b]
              group: train
        "#]],
    );
    assert_eq!(zones(&plan), vec![vec!["us-east-1b".to_string()]; 3]);
}

#[test]
fn pods_outside_any_group_keep_every_zone() {
    let pods = (0..2)
        .map(|i| {
            pod(&format!("solo-{i}"))
                .gpus(8)
                .model("A100")
                .tolerate(gpu_toleration())
        })
        .collect();
    let plan = plan_provisioning(&snapshot(pods, vec![p4d()]));
    assert_eq!(plan.new_claims.len(), 2);
    for z in zones(&plan) {
        assert_eq!(z, ["us-east-1a", "us-east-1b", "us-east-1c"]);
    }
}

#[test]
fn a_member_on_an_existing_node_pulls_the_gang_into_its_zone() {
    let mut snap = snapshot(gang("train", 3), vec![p4d()]);
    snap.nodes.push(
        node("gpu-c-0", &p4d(), "us-east-1c")
            .pool("gpu")
            .taint(autoscaler_core::taints::Taint::new(
                "nvidia.com/gpu",
                "present",
                Effect::NoSchedule,
            ))
            .build(),
    );
    let plan = check(
        &snap,
        expect![[r#"
            existing default/train-0 -> gpu-c-0
            claim gpu-1 pool=gpu price=22.400 types=[p4d.24xlarge] pods=[train-1]
              requirements: gpu-autoscaler.dev/instance-gpu-name In [a100], topology.kubernetes.io/zone In [us-east-1c]
              group: train
            claim gpu-2 pool=gpu price=22.400 types=[p4d.24xlarge] pods=[train-2]
              requirements: gpu-autoscaler.dev/instance-gpu-name In [a100], topology.kubernetes.io/zone In [us-east-1c]
              group: train
        "#]],
    );
    assert_eq!(plan.existing.len(), 1);
    assert_eq!(zones(&plan), vec![vec!["us-east-1c".to_string()]; 2]);
}

#[test]
fn no_common_zone_leaves_the_claims_as_planned() {
    // The existing node is in a zone the new type is not offered in.
    let a100_only_a_b = itype("p4d.24xlarge")
        .cpu("96")
        .mem("1152Gi")
        .gpus(8, "A100", 40)
        .offer("us-east-1a", CapacityType::OnDemand, 21.96)
        .offer("us-east-1b", CapacityType::OnDemand, 21.50)
        .build();
    let mut snap = snapshot(gang("train", 2), vec![a100_only_a_b.clone()]);
    let elsewhere = itype("p4d.24xlarge")
        .cpu("96")
        .mem("1152Gi")
        .gpus(8, "A100", 40)
        .offer("us-east-1c", CapacityType::OnDemand, 22.40)
        .build();
    snap.nodes.push(
        node("gpu-c-0", &elsewhere, "us-east-1c")
            .pool("gpu")
            .build(),
    );
    let plan = plan_provisioning(&snap);
    assert_eq!(plan.existing.len(), 1);
    assert_eq!(
        zones(&plan),
        vec![vec!["us-east-1a".to_string(), "us-east-1b".into()]]
    );
}

#[test]
fn a_gang_with_a_hard_zone_spread_is_not_pinned() {
    let pods = gang("spread", 3)
        .into_iter()
        .map(|p| p.label("app", "spread").spread(labels::ZONE, 1, "spread"))
        .collect();
    let plan = plan_provisioning(&snapshot(pods, vec![p4d()]));
    assert_eq!(plan.new_claims.len(), 3);
    assert!(plan.unschedulable.is_empty(), "{:?}", plan.unschedulable);
    // Each claim keeps the zone the spread gave it; nothing was narrowed to a common zone.
    let z = zones(&plan);
    let distinct: std::collections::BTreeSet<_> = z.iter().collect();
    assert_eq!(distinct.len(), 3, "{z:?}");
}

#[test]
fn a_gang_on_one_new_node_keeps_its_fallback_zones() {
    // Two 4-GPU members share one 8-GPU node: one zone whatever the cloud picks.
    let pods = (0..2)
        .map(|i| {
            pod(&format!("pair-{i}"))
                .gpus(4)
                .model("A100")
                .tolerate(gpu_toleration())
                .group("pair")
        })
        .collect();
    let plan = plan_provisioning(&snapshot(pods, vec![p4d()]));
    assert_eq!(plan.new_claims.len(), 1);
    assert_eq!(
        zones(&plan),
        vec![vec!["us-east-1a", "us-east-1b", "us-east-1c"]]
    );
}

/// The placement group each new claim names, in plan order.
fn claim_groups(plan: &Plan) -> Vec<Option<&str>> {
    plan.new_claims.iter().map(|c| c.group.as_deref()).collect()
}

#[test]
fn a_gang_on_four_new_nodes_names_its_group_on_every_claim() {
    let snap = snapshot(gang("train", 4), vec![p4d()]);
    let plan = check(
        &snap,
        expect![[r#"
            claim gpu-1 pool=gpu price=21.500 types=[p4d.24xlarge] pods=[train-0]
              requirements: gpu-autoscaler.dev/instance-gpu-name In [a100], topology.kubernetes.io/zone In [us-east-1b]
              group: train
            claim gpu-2 pool=gpu price=21.500 types=[p4d.24xlarge] pods=[train-1]
              requirements: gpu-autoscaler.dev/instance-gpu-name In [a100], topology.kubernetes.io/zone In [us-east-1b]
              group: train
            claim gpu-3 pool=gpu price=21.500 types=[p4d.24xlarge] pods=[train-2]
              requirements: gpu-autoscaler.dev/instance-gpu-name In [a100], topology.kubernetes.io/zone In [us-east-1b]
              group: train
            claim gpu-4 pool=gpu price=21.500 types=[p4d.24xlarge] pods=[train-3]
              requirements: gpu-autoscaler.dev/instance-gpu-name In [a100], topology.kubernetes.io/zone In [us-east-1b]
              group: train
        "#]],
    );
    assert_eq!(claim_groups(&plan), vec![Some("train"); 4]);
}

#[test]
fn a_gang_on_one_new_node_and_ordinary_pods_name_no_group() {
    let mut pods: Vec<PodBuilder> = (0..2)
        .map(|i| {
            pod(&format!("pair-{i}"))
                .gpus(4)
                .model("A100")
                .tolerate(gpu_toleration())
                .group("pair")
        })
        .collect();
    pods.extend((0..2).map(|i| {
        pod(&format!("solo-{i}"))
            .gpus(8)
            .model("A100")
            .tolerate(gpu_toleration())
    }));
    let plan = check(
        &snapshot(pods, vec![p4d()]),
        expect![[r#"
            claim gpu-1 pool=gpu price=21.500 types=[p4d.24xlarge] pods=[solo-0]
              requirements: gpu-autoscaler.dev/instance-gpu-name In [a100]
            claim gpu-2 pool=gpu price=21.500 types=[p4d.24xlarge] pods=[solo-1]
              requirements: gpu-autoscaler.dev/instance-gpu-name In [a100]
            claim gpu-3 pool=gpu price=21.500 types=[p4d.24xlarge] pods=[pair-0,pair-1]
              requirements: gpu-autoscaler.dev/instance-gpu-name In [a100]
        "#]],
    );
    assert_eq!(plan.new_claims.len(), 3);
    assert_eq!(claim_groups(&plan), vec![None; 3]);
}

#[test]
fn a_claim_shared_with_a_pod_outside_the_gang_names_no_group() {
    // Two whole-node members, one half-node member and a half-node pod of no group: the two
    // half-node pods share a node, which is not the gang's alone.
    let mut pods = gang("mix", 2);
    pods.push(
        pod("mix-half")
            .gpus(4)
            .model("A100")
            .tolerate(gpu_toleration())
            .group("mix"),
    );
    pods.push(
        pod("other")
            .gpus(4)
            .model("A100")
            .tolerate(gpu_toleration()),
    );
    let plan = check(
        &snapshot(pods, vec![p4d()]),
        expect![[r#"
            claim gpu-1 pool=gpu price=21.500 types=[p4d.24xlarge] pods=[mix-0]
              requirements: gpu-autoscaler.dev/instance-gpu-name In [a100], topology.kubernetes.io/zone In [us-east-1b]
              group: mix
            claim gpu-2 pool=gpu price=21.500 types=[p4d.24xlarge] pods=[mix-1]
              requirements: gpu-autoscaler.dev/instance-gpu-name In [a100], topology.kubernetes.io/zone In [us-east-1b]
              group: mix
            claim gpu-3 pool=gpu price=21.500 types=[p4d.24xlarge] pods=[mix-half,other]
              requirements: gpu-autoscaler.dev/instance-gpu-name In [a100], topology.kubernetes.io/zone In [us-east-1b]
        "#]],
    );
    let shared: Vec<&autoscaler_core::plan::NewClaim> = plan
        .new_claims
        .iter()
        .filter(|c| c.pods.len() == 2)
        .collect();
    assert_eq!(shared.len(), 1, "{}", plan.render());
    assert_eq!(shared[0].group, None);
    let whole: Vec<Option<&str>> = plan
        .new_claims
        .iter()
        .filter(|c| c.pods.len() == 1)
        .map(|c| c.group.as_deref())
        .collect();
    assert_eq!(whole, vec![Some("mix"); 2]);
}

#[test]
fn a_gang_with_one_pure_claim_names_no_group() {
    // One whole-node member and a half-node member sharing a node with a pod of no group:
    // only one claim is the gang's alone, and a placement group of one node helps nothing.
    let mut pods = gang("lone", 1);
    pods.push(
        pod("lone-half")
            .gpus(4)
            .model("A100")
            .tolerate(gpu_toleration())
            .group("lone"),
    );
    pods.push(
        pod("other")
            .gpus(4)
            .model("A100")
            .tolerate(gpu_toleration()),
    );
    let plan = plan_provisioning(&snapshot(pods, vec![p4d()]));
    assert_eq!(plan.new_claims.len(), 2, "{}", plan.render());
    assert_eq!(claim_groups(&plan), vec![None; 2]);
}

/// A group that does not fit is rolled back: the claims it changed have their room and
/// candidates back, and the pods after it use them. `g-3` fits nowhere, so `G` fails.
#[test]
fn pods_after_a_rolled_back_group_use_the_room_it_gave_back() {
    let big = || {
        itype("m5.4xlarge")
            .cpu("16")
            .mem("64Gi")
            .max_pods(110)
            .on_demand(&["z1"], 0.768)
            .build()
    };
    let small = || {
        itype("c5.xlarge")
            .cpu("4")
            .mem("8Gi")
            .max_pods(58)
            .on_demand(&["z1"], 0.17)
            .build()
    };
    let run = |pools: Vec<autoscaler_core::model::Pool>, pods: Vec<PodBuilder>| {
        let s = with_groups(Snapshot {
            pending: pods.into_iter().map(PodBuilder::build).collect(),
            pools,
            ..Snapshot::default()
        });
        plan_provisioning(&s)
    };
    let on = |plan: &Plan, pod: &str| {
        plan.new_claims
            .iter()
            .position(|c| c.pods.iter().any(|p| p.name == pod))
    };
    // Room: `g-2` found `a`'s claim full and the scan of its kind moved past it; `h`, of the
    // same kind, must look there again once the group is gone.
    let p = |n: &str| pod(n).cpu("5").mem("1Gi");
    let plan = run(
        vec![pool("cpu", vec![big()]).build()],
        vec![
            p("a"),
            p("g-0").group("G"),
            p("g-1").group("G"),
            p("g-2").group("G"),
            p("g-3").group("G").select(labels::INSTANCE_TYPE, "nope"),
            p("h"),
        ],
    );
    assert_eq!(on(&plan, "h"), on(&plan, "a"), "{}", plan.render());
    assert_eq!(plan.new_claims.len(), 1, "{}", plan.render());
    // Candidates: `g-1` narrowed `a`'s claim to the m5.4xlarge, so pods selecting the
    // c5.xlarge were refused there; with the group gone, `h` may join it again.
    let plan = run(
        vec![pool("cpu", vec![small(), big()]).build()],
        vec![
            pod("a").cpu("1").mem("1Gi"),
            pod("g-1")
                .cpu("500m")
                .mem("1Gi")
                .group("G")
                .select(labels::INSTANCE_TYPE, "m5.4xlarge"),
            pod("g-2")
                .cpu("500m")
                .mem("1Gi")
                .group("G")
                .select(labels::INSTANCE_TYPE, "c5.xlarge"),
            pod("g-3")
                .cpu("500m")
                .mem("1Gi")
                .group("G")
                .select(labels::INSTANCE_TYPE, "nope"),
            pod("h")
                .cpu("250m")
                .mem("1Gi")
                .select(labels::INSTANCE_TYPE, "c5.xlarge"),
        ],
    );
    assert_eq!(on(&plan, "h"), on(&plan, "a"), "{}", plan.render());
    assert_eq!(plan.new_claims.len(), 1, "{}", plan.render());
}
