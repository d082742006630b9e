//! Warm capacity: plans asked to bring each NodePool up to its `minNodes`
//! (`PlanOptions::min_nodes`, the controller's `--enforce-node-group-min-size`).

use autoscaler_core::builders::*;
use autoscaler_core::keys::{CA_DELETION_WINDOW_S, CA_TO_BE_DELETED};
use autoscaler_core::labels;
use autoscaler_core::model::{InFlightClaim, Snapshot};
use autoscaler_core::plan::Plan;
use autoscaler_core::provision::{PlanOptions, plan_provisioning, plan_with};
use autoscaler_core::requirements::{Operator, Requirements};
use autoscaler_core::taints::{Effect, Taint};
use expect_test::{Expect, expect};

mod support;
use support::{cpu_types, gpu_types};

fn warm(snap: &Snapshot, expected: Expect) -> Plan {
    let options = PlanOptions {
        min_nodes: Some(0),
        ..PlanOptions::default()
    };
    let plan = plan_with(snap, &options);
    expected.assert_eq(&plan.render());
    assert_eq!(plan, plan_with(snap, &options), "deterministic");
    plan
}

fn snapshot(pods: Vec<PodBuilder>, nodes: Vec<NodeBuilder>, pools: Vec<PoolBuilder>) -> Snapshot {
    Snapshot {
        pending: pods.into_iter().map(PodBuilder::build).collect(),
        nodes: nodes.into_iter().map(NodeBuilder::build).collect(),
        pools: pools.into_iter().map(PoolBuilder::build).collect(),
        ..Snapshot::default()
    }
}

#[test]
fn an_empty_pool_gets_its_minimum_as_claims_listing_every_type_cheapest_first() {
    let snap = snapshot(
        vec![],
        vec![],
        vec![
            pool("gpu", gpu_types())
                .taint("nvidia.com/gpu", "true")
                .min_nodes(2),
            pool("cpu", cpu_types()),
        ],
    );
    let plan = warm(
        &snap,
        expect![[r#"
            claim gpu-1 pool=gpu price=1.006 types=[g5.xlarge,g5.12xlarge,p4d.24xlarge,p5.48xlarge] pods=[]
              warm (minNodes)
            claim gpu-2 pool=gpu price=1.006 types=[g5.xlarge,g5.12xlarge,p4d.24xlarge,p5.48xlarge] pods=[]
              warm (minNodes)
        "#]],
    );
    assert!(plan.new_claims.iter().all(|c| c.warm));
    assert_eq!(plan.new_claims[0].taints.len(), 1, "the pool's taints");
    // Off by default: a minimum only holds scale-down.
    assert!(plan_provisioning(&snap).new_claims.is_empty());
}

#[test]
fn the_pods_claims_count_first_and_no_smaller_node_is_added_beside_them() {
    let snap = snapshot(
        vec![pod("train").gpus(8).model("H100")],
        vec![],
        vec![pool("gpu", gpu_types()).min_nodes(1)],
    );
    warm(
        &snap,
        expect![[r#"
            claim gpu-1 pool=gpu price=98.320 types=[p5.48xlarge] pods=[train]
              requirements: gpu-autoscaler.dev/instance-gpu-name In [h100]
        "#]],
    );
}

#[test]
fn existing_nodes_and_claims_in_flight_count_and_nodes_going_do_not() {
    let t = &cpu_types()[0];
    let mut snap = snapshot(
        vec![],
        vec![
            node("up", t, "us-east-1a").pool("cpu"),
            node("cordoned", t, "us-east-1a").pool("cpu").cordoned(),
            node("leaving", t, "us-east-1a").pool("cpu").deleting(),
            node("other", t, "us-east-1a").pool("other"),
        ],
        vec![
            pool("cpu", cpu_types()).min_nodes(4),
            pool("other", cpu_types()),
        ],
    );
    snap.in_flight.push(InFlightClaim {
        name: "cpu-abc".into(),
        pool: "cpu".into(),
        instance_types: vec!["m5.large".into()],
        requirements: Requirements::new().with(labels::ZONE, Operator::In, &["us-east-1a"]),
        pods: vec![],
        created_at: 0,
    });
    // up, cordoned and the claim in flight: one more.
    warm(
        &snap,
        expect![[r#"
            claim cpu-1 pool=cpu price=0.096 types=[m5.large,m5.xlarge,m5.2xlarge,m5.4xlarge] pods=[]
              warm (minNodes)
        "#]],
    );
}

#[test]
fn limits_bound_the_types_and_the_count_and_the_shortfall_is_named() {
    // At most 5 GPUs for three nodes: each claim lists only the 1-GPU type, since a claim
    // reserves what its largest type would take and a 4-GPU choice would leave the third out.
    let snap = snapshot(
        vec![],
        vec![],
        vec![
            pool("gpu", gpu_types())
                .limit("nvidia.com/gpu", "5")
                .min_nodes(3),
        ],
    );
    warm(
        &snap,
        expect![[r#"
            claim gpu-1 pool=gpu price=1.006 types=[g5.xlarge] pods=[]
              warm (minNodes)
            claim gpu-2 pool=gpu price=1.006 types=[g5.xlarge] pods=[]
              warm (minNodes)
            claim gpu-3 pool=gpu price=1.006 types=[g5.xlarge] pods=[]
              warm (minNodes)
        "#]],
    );
    let capped = snapshot(
        vec![],
        vec![],
        vec![pool("gpu", gpu_types()).limit_nodes(1).min_nodes(3)],
    );
    warm(
        &capped,
        expect![[r#"
            claim gpu-1 pool=gpu price=1.006 types=[g5.xlarge,g5.12xlarge,p4d.24xlarge,p5.48xlarge] pods=[]
              warm (minNodes)
            minNodes short gpu by 2: NodePool gpu limit nodes=1 reached
        "#]],
    );
}

#[test]
fn atomic_pools_and_the_claim_limit_are_left_as_they_are() {
    let snap = snapshot(
        vec![],
        vec![],
        vec![
            pool("slice", gpu_types()).atomic(4).min_nodes(4),
            pool("cpu", cpu_types()).min_nodes(3),
        ],
    );
    let options = PlanOptions {
        min_nodes: Some(0),
        max_new_claims: 2,
        ..PlanOptions::default()
    };
    let plan = plan_with(&snap, &options);
    expect![[r#"
        claim cpu-1 pool=cpu price=0.096 types=[m5.large,m5.xlarge,m5.2xlarge,m5.4xlarge] pods=[]
          warm (minNodes)
        claim cpu-2 pool=cpu price=0.096 types=[m5.large,m5.xlarge,m5.2xlarge,m5.4xlarge] pods=[]
          warm (minNodes)
        minNodes short cpu by 1: the plan opened its most new claims (2); the rest come in a later plan
    "#]]
    .assert_eq(&plan.render());
}

#[test]
fn a_node_another_autoscaler_is_removing_counts_as_disruption_counts_it() {
    let t = &cpu_types()[0];
    let now = 100_000;
    let tainted_at = |at: i64| {
        snapshot(
            vec![],
            vec![node("old", t, "us-east-1a").pool("cpu").taint(Taint {
                key: CA_TO_BE_DELETED.into(),
                value: at.to_string(),
                effect: Effect::NoSchedule,
            })],
            vec![pool("cpu", cpu_types()).min_nodes(1)],
        )
    };
    let options = PlanOptions {
        min_nodes: Some(now),
        ..PlanOptions::default()
    };
    // The Cluster Autoscaler is removing it: a node is launched to take its place.
    let removing = plan_with(&tainted_at(now - 10), &options);
    assert_eq!(removing.new_claims.len(), 1, "{}", removing.render());
    // Its taint outlived the removal window: disruption counts the node as the pool's (and
    // would remove a second one above minNodes), so no node is added beside it.
    let leftover = plan_with(&tainted_at(now - CA_DELETION_WINDOW_S - 1), &options);
    assert!(leftover.new_claims.is_empty(), "{}", leftover.render());
}
