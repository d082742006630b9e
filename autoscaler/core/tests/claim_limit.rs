//! The planner's limit on new claims per plan (`PlanOptions::max_new_claims`, the
//! controller's `--max-claims-per-round`): what it opens, what it defers, and what it never
//! splits.

use autoscaler_core::builders::*;
use autoscaler_core::model::Snapshot;
use autoscaler_core::plan::Plan;
use autoscaler_core::provision::{PlanOptions, plan_provisioning, plan_with};
use expect_test::{Expect, expect};

mod support;
use support::{cpu_types, with_groups};

fn snapshot(pods: Vec<PodBuilder>, pools: Vec<PoolBuilder>) -> Snapshot {
    with_groups(Snapshot {
        pending: pods.into_iter().map(|p| p.build()).collect(),
        pools: pools.into_iter().map(|p| p.build()).collect(),
        ..Snapshot::default()
    })
}

fn plan(snap: &Snapshot, limit: usize, expected: Expect) -> Plan {
    let options = PlanOptions {
        max_new_claims: limit,
        ..PlanOptions::default()
    };
    let plan = plan_with(snap, &options);
    expected.assert_eq(&plan.render());
    assert_eq!(plan, plan_with(snap, &options), "deterministic");
    plan
}

/// Pods that each need a 16-vCPU node of their own.
fn big(n: usize) -> Vec<PodBuilder> {
    (0..n)
        .map(|i| pod(&format!("big-{i}")).cpu("15").mem("8Gi"))
        .collect()
}

#[test]
fn the_plan_opens_its_limit_and_defers_the_pods_that_need_more() {
    let mut pods = big(4);
    // Smaller pods still fill the claims already open.
    pods.push(pod("small").cpu("500m").mem("1Gi"));
    let snap = snapshot(pods, vec![pool("default", cpu_types())]);
    let limited = plan(
        &snap,
        2,
        expect![[r#"
            claim default-1 pool=default price=0.768 types=[m5.4xlarge] pods=[big-0,small]
            claim default-2 pool=default price=0.768 types=[m5.4xlarge] pods=[big-1]
            deferred default/big-2
            deferred default/big-3
        "#]],
    );
    assert!(
        limited.unschedulable.is_empty(),
        "deferred pods can be helped"
    );
    // Without a limit the same pods get a claim each: the limit only cut the plan short.
    let whole = plan_provisioning(&snap);
    assert_eq!(whole.new_claims.len(), 4);
    assert!(whole.deferred.is_empty());
    assert_eq!(
        whole.new_claims[..2]
            .iter()
            .map(|c| c.pods.clone())
            .collect::<Vec<_>>(),
        limited
            .new_claims
            .iter()
            .map(|c| c.pods.clone())
            .collect::<Vec<_>>(),
        "the slice is the start of the whole plan"
    );
}

#[test]
fn a_pod_no_instance_type_holds_stays_unschedulable_past_the_limit() {
    let mut pods = big(2);
    pods.push(pod("huge").cpu("64"));
    plan(
        &snapshot(pods, vec![pool("default", cpu_types())]),
        1,
        expect![[r#"
            claim default-1 pool=default price=0.768 types=[m5.4xlarge] pods=[big-0]
            unschedulable default/huge: no instance type in NodePool default offers 64 cpu
            deferred default/big-1
        "#]],
    );
}

#[test]
fn an_all_or_nothing_group_is_never_split_by_the_limit() {
    let mut pods: Vec<PodBuilder> = (0..3)
        .map(|i| {
            pod(&format!("gang-{i}"))
                .cpu("15")
                .mem("8Gi")
                .group("train")
        })
        .collect();
    pods.extend(big(1));
    plan(
        &snapshot(pods, vec![pool("default", cpu_types())]),
        1,
        expect![[r#"
            claim default-1 pool=default price=0.768 types=[m5.4xlarge] pods=[big-0]
            claim default-2 pool=default price=0.768 types=[m5.4xlarge] pods=[gang-0]
              requirements: topology.kubernetes.io/zone In [us-east-1a]
              group: train
            claim default-3 pool=default price=0.768 types=[m5.4xlarge] pods=[gang-1]
              requirements: topology.kubernetes.io/zone In [us-east-1a]
              group: train
            claim default-4 pool=default price=0.768 types=[m5.4xlarge] pods=[gang-2]
              requirements: topology.kubernetes.io/zone In [us-east-1a]
              group: train
        "#]],
    );
}

#[test]
fn an_atomic_scale_up_is_opened_whole_past_the_limit() {
    let pods = vec![pod("a").cpu("15").mem("8Gi")];
    plan(
        &snapshot(pods, vec![pool("slice", cpu_types()).atomic(3)]),
        1,
        expect![[r#"
            claim slice-1 pool=slice price=0.768 types=[m5.4xlarge] pods=[a]
              atomic
            claim slice-2 pool=slice price=0.768 types=[m5.4xlarge] pods=[]
              atomic
            claim slice-3 pool=slice price=0.768 types=[m5.4xlarge] pods=[]
              atomic
        "#]],
    );
}
