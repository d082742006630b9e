//! The Cluster Autoscaler's own tests (kubernetes/autoscaler, `cluster-autoscaler/`), translated
//! into `plan_disruption` and `plan_provisioning` scenarios.
//!
//! Each test is named after the upstream Go test function and its case, and asserts what
//! upstream asserts, as far as our model goes. Node groups become NodePools that launch nothing
//! (upstream's groups are at their maximum size in these tests), `unneededTime` and
//! `consolidateAfter` are 0 and right-sizing is off, so a node goes exactly when the Cluster
//! Autoscaler would call it removable. Upstream's fake eligibility checker (which marks nodes
//! eligible whatever their utilization) becomes a threshold above 1 for eligible nodes and
//! `scale-down-disabled` on the others. Cases other test files already cover are left out.
//! Fixtures are written from the upstream cases' descriptions; no upstream code is copied.

use std::collections::BTreeSet;

use autoscaler_core::DisruptionPlan;
use autoscaler_core::builders::*;
use autoscaler_core::disruption::{
    DisruptionConfig, DisruptionState, InProgress, SAFE_TO_EVICT, SCALE_DOWN_DISABLED, VerdictKind,
    plan_disruption,
};
use autoscaler_core::instance::InstanceType;
use autoscaler_core::model::{Pdb, Snapshot};
use autoscaler_core::provision::plan_provisioning;

mod support;
use support::ca::{ca_policy, kind, pdb, rs};
use support::{names, removed, snap};

const NOW: i64 = 10_000;

/// A type with `milli` millicores, priced by its size, offered in `z1`.
fn cpu_type(milli: u32) -> InstanceType {
    itype(&format!("c.{milli}m"))
        .cpu(&format!("{milli}m"))
        .mem("64Gi")
        .on_demand(&["z1"], f64::from(milli) / 1000.0)
        .build()
}

/// A node group that can launch nothing.
fn group(name: &str, threshold: f64) -> PoolBuilder {
    pool(name, vec![]).disruption(ca_policy(threshold, threshold))
}

/// A node of `milli` millicores in node group `g`.
fn n(name: &str, milli: u32, g: &str) -> NodeBuilder {
    node(name, &cpu_type(milli), "z1").pool(g)
}

fn run(s: &Snapshot) -> DisruptionPlan {
    plan_disruption(
        s,
        &DisruptionState::default(),
        NOW,
        &DisruptionConfig::default(),
    )
}

fn run_with(s: &Snapshot, config: &DisruptionConfig, in_progress: InProgress) -> DisruptionPlan {
    let state = DisruptionState {
        in_progress,
        ..DisruptionState::default()
    };
    plan_disruption(s, &state, NOW, config)
}

// ---------------------------------------------------------------------------------------------
// core/scaledown/eligibility/eligibility_test.go: TestFilterOutUnremovable
// ---------------------------------------------------------------------------------------------

/// The one node of upstream's cases (1000m, in a group of the default 0.5 threshold), with
/// `pods`, and whether the node passed eligibility: a verdict other than "above threshold".
fn eligible(pods: Vec<PodBuilder>, ignore_daemonsets: bool) -> (bool, f64) {
    let mut regular = n("regular", 1000, "ng1");
    for p in pods {
        regular = regular.with_pod(p);
    }
    let s = snap(vec![regular], vec![group("ng1", 0.5)]);
    let config = DisruptionConfig {
        ignore_daemonset_utilization: ignore_daemonsets,
        ..DisruptionConfig::default()
    };
    let plan = run_with(&s, &config, InProgress::default());
    let v = plan.verdicts.iter().find(|v| v.node == "regular").unwrap();
    (
        v.kind != VerdictKind::AboveThreshold,
        v.utilization.unwrap(),
    )
}

fn ds_pod(name: &str, milli: u32) -> PodBuilder {
    rs(name, milli).owner(Some("DaemonSet"))
}

#[test]
fn test_filter_out_unremovable_regular_node_stays() {
    let s = snap(vec![n("regular", 1000, "ng1")], vec![group("ng1", 0.5)]);
    assert_eq!(removed(&run(&s)), names(&["regular"]));
}

#[test]
fn test_filter_out_unremovable_highly_utilized_node_is_filtered_out() {
    assert_eq!(eligible(vec![rs("bigPod", 600)], false), (false, 0.6));
}

#[test]
fn test_filter_out_unremovable_underutilized_node_stays() {
    assert_eq!(eligible(vec![rs("smallPod", 100)], false), (true, 0.1));
}

#[test]
fn test_filter_out_unremovable_high_utilization_daemonsets_node_is_filtered_out() {
    // Counted, the DaemonSet pod takes the node to 0.6.
    let (ok, util) = eligible(vec![rs("smallPod", 100), ds_pod("dsPod", 500)], false);
    assert!(!ok);
    assert!((util - 0.6).abs() < 1e-9, "{util}");
}

#[test]
fn test_filter_out_unremovable_high_utilization_daemonsets_node_stays() {
    // Ignored, it leaves both sides: 100m of the 500m not taken by DaemonSets.
    let (ok, util) = eligible(vec![rs("smallPod", 100), ds_pod("dsPod", 500)], true);
    assert!(ok);
    assert!((util - 0.2).abs() < 1e-9, "{util}");
}

// ---------------------------------------------------------------------------------------------
// core/scaledown/planner/planner_test.go: TestUpdateClusterState
// ---------------------------------------------------------------------------------------------

/// An eligible node of upstream's case (threshold above any utilization).
fn el(name: &str, milli: u32) -> NodeBuilder {
    n(name, milli, "ng1")
}

/// A node the case lists as not eligible.
fn not_el(name: &str, milli: u32) -> NodeBuilder {
    n(name, milli, "ng1").annotate(SCALE_DOWN_DISABLED, "true")
}

fn update_cluster_state(nodes: Vec<NodeBuilder>) -> BTreeSet<String> {
    removed(&run(&snap(nodes, vec![group("ng1", 1.01)])))
}

#[test]
fn test_update_cluster_state_empty_nodes_all_eligible() {
    let got = update_cluster_state(vec![el("n1", 1000), el("n2", 1000), el("n3", 1000)]);
    assert_eq!(got, names(&["n1", "n2", "n3"]));
}

#[test]
fn test_update_cluster_state_empty_nodes_some_eligible() {
    let got = update_cluster_state(vec![el("n1", 1000), el("n2", 1000), not_el("n3", 1000)]);
    assert_eq!(got, names(&["n1", "n2"]));
}

#[test]
fn test_update_cluster_state_single_utilised_node_not_eligible() {
    let got = update_cluster_state(vec![el("n1", 1000).with_pod(rs("p1", 500))]);
    assert_eq!(got, names(&[]));
}

#[test]
fn test_update_cluster_state_pods_cannot_schedule_on_node_undergoing_deletion_not_eligible() {
    let got = update_cluster_state(vec![
        el("n1", 1000)
            .with_pod(rs("p1", 500))
            .with_pod(rs("p2", 500)),
        el("n2", 1000).deleting(),
    ]);
    assert_eq!(got, names(&[]));
}

#[test]
fn test_update_cluster_state_pods_can_schedule_on_non_eligible_node_eligible() {
    let got = update_cluster_state(vec![
        el("n1", 1000)
            .with_pod(rs("p1", 500))
            .with_pod(rs("p2", 500)),
        not_el("n2", 1000),
    ]);
    assert_eq!(got, names(&["n1"]));
}

#[test]
fn test_update_cluster_state_pods_can_schedule_on_eligible_node_eligible() {
    // Upstream removes n1 (its pods go to n2) and keeps n2; we remove the empty n2 first
    // (Karpenter's order: empty nodes before any eviction), which keeps n1's pods where they
    // are. Either way one of the two goes and the other stays.
    let got = update_cluster_state(vec![
        el("n1", 1000)
            .with_pod(rs("p1", 500))
            .with_pod(rs("p2", 500)),
        el("n2", 1000),
    ]);
    assert_eq!(got.len(), 1, "{got:?}");
}

#[test]
fn test_update_cluster_state_pods_cannot_schedule_anywhere_not_eligible() {
    let got = update_cluster_state(vec![
        el("n1", 2000)
            .with_pod(rs("p1", 1000))
            .with_pod(rs("p2", 1000)),
        el("n2", 1000).with_pod(rs("p3", 1000)),
        not_el("n3", 500),
    ]);
    assert_eq!(got, names(&[]));
}

#[test]
fn test_update_cluster_state_all_pods_from_multiple_nodes_can_schedule_elsewhere_all_eligible() {
    let got = update_cluster_state(vec![
        el("n1", 1000)
            .with_pod(rs("p1", 500))
            .with_pod(rs("p2", 500)),
        el("n2", 1000)
            .with_pod(rs("p3", 500))
            .with_pod(rs("p4", 500)),
        not_el("n3", 2000),
    ]);
    assert_eq!(got, names(&["n1", "n2"]));
}

#[test]
fn test_update_cluster_state_some_pods_from_multiple_nodes_can_schedule_elsewhere_some_eligible() {
    let got = update_cluster_state(vec![
        el("n1", 2000)
            .with_pod(rs("p1", 1000))
            .with_pod(rs("p2", 1000)),
        el("n2", 1000)
            .with_pod(rs("p3", 500))
            .with_pod(rs("p4", 500)),
        not_el("n3", 1000),
    ]);
    assert_eq!(got, names(&["n2"]));
}

#[test]
fn test_update_cluster_state_no_pods_from_multiple_nodes_can_schedule_elsewhere_no_eligible() {
    let got = update_cluster_state(vec![
        el("n1", 1000)
            .with_pod(rs("p1", 500))
            .with_pod(rs("p2", 500)),
        el("n2", 1000)
            .with_pod(rs("p3", 500))
            .with_pod(rs("p4", 500)),
        not_el("n3", 500),
    ]);
    assert_eq!(got, names(&[]));
}

/// Upstream's "recently evicted" pods, in our model: the pods a node being deleted is draining
/// are pending again (their ReplicaSet recreated them). They need the room they will take.
fn with_pending(nodes: Vec<NodeBuilder>, pending: Vec<PodBuilder>) -> BTreeSet<String> {
    let mut s = snap(nodes, vec![group("ng1", 1.01)]);
    s.pending = pending.into_iter().map(PodBuilder::build).collect();
    removed(&run(&s))
}

#[test]
fn test_update_cluster_state_recently_evicted_pod_can_schedule_on_eligible_node_eligible() {
    // p1 needs one of the two empty nodes: upstream removes n1 and keeps n2 for it.
    let got = with_pending(
        vec![
            el("n1", 1000),
            el("n2", 1000),
            n("n3", 1000, "ng1").deleting(),
        ],
        vec![rs("p1", 500)],
    );
    assert_eq!(got.len(), 1, "{got:?}");
}

#[test]
fn test_update_cluster_state_scheduled_and_recently_evicted_pods_take_all_capacity_no_eligible() {
    let got = with_pending(
        vec![
            el("n1", 1000).with_pod(rs("p1", 1000)),
            el("n2", 1000),
            not_el("n3", 1000),
            n("n4", 2000, "ng1").deleting(),
        ],
        vec![rs("p2", 1000), rs("p3", 1000)],
    );
    assert_eq!(got, names(&[]));
}

#[test]
fn test_update_cluster_state_recently_evicted_pod_too_large_to_schedule_anywhere_all_eligible() {
    // A pending pod that fits no node holds no room.
    let got = with_pending(
        vec![
            el("n1", 1000),
            el("n2", 1000),
            n("n3", 2000, "ng1").deleting(),
        ],
        vec![rs("p1", 2000)],
    );
    assert_eq!(got, names(&["n1", "n2"]));
}

// ---------------------------------------------------------------------------------------------
// core/scaledown/budgets/budgets_test.go: TestCropNodesToBudgets
// (MaxScaleDownParallelism 10, MaxDrainParallelism 5)
// ---------------------------------------------------------------------------------------------

/// `empty` empty nodes and `drain` nodes with one small pod each, in NodePool `g`
/// (atomic when `atomic`), named `<g>-e<i>` and `<g>-d<i>`.
fn bucket(g: &str, empty: usize, drain: usize, atomic: bool) -> (Vec<NodeBuilder>, PoolBuilder) {
    let mut nodes = Vec::new();
    for i in 0..empty {
        nodes.push(n(&format!("{g}-e{i}"), 4000, g));
    }
    for i in 0..drain {
        nodes.push(n(&format!("{g}-d{i}"), 4000, g).with_pod(rs(&format!("{g}-p{i}"), 1000)));
    }
    let mut p = group(g, 0.5);
    if atomic {
        p = p.atomic((empty + drain) as u32);
    }
    (nodes, p)
}

/// Runs the buckets with a big unmanaged node to take every drained pod, and counts the
/// removed empty and drained nodes per NodePool.
fn crop(
    buckets: Vec<(Vec<NodeBuilder>, PoolBuilder)>,
    empty_in_progress: usize,
    drain_in_progress: usize,
) -> Vec<(String, usize, usize)> {
    let mut nodes = vec![node("sink", &cpu_type(1_000_000), "z1")];
    let mut pools = Vec::new();
    let mut order = Vec::new();
    for (ns, p) in buckets {
        order.push(p.0.name.clone());
        nodes.extend(ns);
        pools.push(p);
    }
    let s = snap(nodes, pools);
    let config = DisruptionConfig {
        max_scale_down_parallelism: 10,
        max_drain_parallelism: 5,
        ..DisruptionConfig::default()
    };
    let plan = run_with(
        &s,
        &config,
        InProgress {
            nodes: empty_in_progress + drain_in_progress,
            drains: drain_in_progress,
        },
    );
    let gone = removed(&plan);
    order
        .into_iter()
        .map(|g| {
            let e = gone
                .iter()
                .filter(|x| x.starts_with(&format!("{g}-e")))
                .count();
            let d = gone
                .iter()
                .filter(|x| x.starts_with(&format!("{g}-d")))
                .count();
            (g, e, d)
        })
        .collect()
}

fn counts(list: &[(&str, usize, usize)]) -> Vec<(String, usize, usize)> {
    list.iter()
        .map(|(g, e, d)| (g.to_string(), *e, *d))
        .collect()
}

#[test]
fn test_crop_nodes_to_budgets_empty_nodes_exceeding_max_limit_no_deletions_in_progress() {
    let got = crop(vec![bucket("ng", 11, 0, false)], 0, 0);
    assert_eq!(got, counts(&[("ng", 10, 0)]));
}

#[test]
fn test_crop_nodes_to_budgets_empty_nodes_with_deletions_in_progress_exceeding_budget() {
    let got = crop(vec![bucket("ng", 10, 0, false)], 1, 1);
    assert_eq!(got, counts(&[("ng", 8, 0)]));
}

#[test]
fn test_crop_nodes_to_budgets_drain_nodes_exceeding_max_limit_no_deletions_in_progress() {
    let got = crop(vec![bucket("ng", 0, 6, false)], 0, 0);
    assert_eq!(got, counts(&[("ng", 0, 5)]));
}

#[test]
fn test_crop_nodes_to_budgets_drain_nodes_with_deletions_in_progress_exceeding_overall_budget() {
    let got = crop(vec![bucket("ng", 0, 4, false)], 7, 1);
    assert_eq!(got, counts(&[("ng", 0, 2)]));
}

#[test]
fn test_crop_nodes_to_budgets_empty_and_drain_nodes_exceeding_overall_limit() {
    let got = crop(vec![bucket("ng", 8, 8, false)], 0, 0);
    assert_eq!(got, counts(&[("ng", 8, 2)]));
}

#[test]
fn test_crop_nodes_to_budgets_empty_and_drain_nodes_exceeding_drain_limit() {
    let got = crop(vec![bucket("ng", 2, 8, false)], 0, 0);
    assert_eq!(got, counts(&[("ng", 2, 5)]));
}

#[test]
fn test_crop_nodes_to_budgets_empty_and_drain_overall_budget_exceeded_both_fit() {
    let got = crop(vec![bucket("ng", 1, 2, false)], 5, 3);
    assert_eq!(got, counts(&[("ng", 1, 1)]));
}

#[test]
fn test_crop_nodes_to_budgets_empty_and_drain_nodes_with_deletions_in_progress_drain_budget_exceeded()
 {
    let got = crop(vec![bucket("ng", 4, 5, false)], 1, 3);
    assert_eq!(got, counts(&[("ng", 4, 2)]));
}

#[test]
fn test_crop_nodes_to_budgets_empty_and_drain_nodes_with_deletions_in_progress_drain_budget_exceeded_sanity_check()
 {
    // More drains under way than the drain limit: no drain, and empty nodes up to the overall
    // limit that is left.
    let got = crop(vec![bucket("ng", 5, 5, false)], 0, 9);
    assert_eq!(got, counts(&[("ng", 1, 0)]));
}

#[test]
fn test_crop_nodes_to_budgets_empty_regular_and_atomic() {
    let got = crop(
        vec![bucket("ng", 8, 0, false), bucket("atomic-3", 3, 0, true)],
        0,
        0,
    );
    assert_eq!(got, counts(&[("ng", 7, 0), ("atomic-3", 3, 0)]));
}

#[test]
fn test_crop_nodes_to_budgets_empty_atomic_nodes_with_deletions_in_progress_0_budget_left() {
    let got = crop(vec![bucket("atomic-3", 3, 0, true)], 5, 5);
    assert_eq!(got, counts(&[("atomic-3", 0, 0)]));
}

#[test]
fn test_crop_nodes_to_budgets_drain_atomic_nodes_with_deletions_in_progress_exceeding_drain_budget()
{
    // One atomic group may overflow the budget that is left.
    let got = crop(vec![bucket("atomic-4", 0, 4, true)], 1, 2);
    assert_eq!(got, counts(&[("atomic-4", 0, 4)]));
}

#[test]
fn test_crop_nodes_to_budgets_multiple_empty_atomic() {
    let got = crop(
        vec![
            bucket("ng", 3, 0, false),
            bucket("atomic-8", 8, 0, true),
            bucket("atomic-3", 3, 0, true),
        ],
        0,
        0,
    );
    assert_eq!(
        got,
        counts(&[("ng", 2, 0), ("atomic-8", 8, 0), ("atomic-3", 0, 0)])
    );
}

#[test]
fn test_crop_nodes_to_budgets_multiple_drain_atomic() {
    let got = crop(
        vec![
            bucket("ng", 0, 3, false),
            bucket("atomic-3", 0, 3, true),
            bucket("atomic-4", 0, 4, true),
        ],
        0,
        0,
    );
    assert_eq!(
        got,
        counts(&[("ng", 0, 2), ("atomic-3", 0, 3), ("atomic-4", 0, 0)])
    );
}

#[test]
fn test_crop_nodes_to_budgets_empty_and_drain_atomic_nodes_exceeding_drain_limit() {
    let got = crop(
        vec![
            bucket("atomic-4", 4, 0, true),
            bucket("atomic-8", 0, 8, true),
        ],
        0,
        0,
    );
    assert_eq!(got, counts(&[("atomic-4", 4, 0), ("atomic-8", 0, 0)]));
}

#[test]
fn test_crop_nodes_to_budgets_empty_and_drain_atomic_nodes_exceeding_overall_limit() {
    let got = crop(
        vec![
            bucket("atomic-8", 8, 0, true),
            bucket("atomic-4", 0, 4, true),
        ],
        0,
        0,
    );
    assert_eq!(got, counts(&[("atomic-8", 8, 0), ("atomic-4", 0, 0)]));
}

#[test]
fn test_crop_nodes_to_budgets_empty_regular_and_drain_atomic_nodes_exceeding_overall_limit() {
    let got = crop(
        vec![bucket("atomic-8", 0, 8, true), bucket("ng", 5, 0, false)],
        0,
        0,
    );
    assert_eq!(got, counts(&[("atomic-8", 0, 8), ("ng", 2, 0)]));
}

// ---------------------------------------------------------------------------------------------
// core/scaledown/unneeded/nodes_test.go: TestRemovableAt (node group min size)
// ---------------------------------------------------------------------------------------------

/// A group of ten nodes: `empty` empty, `drain` with a small pod, 2 being deleted, the rest
/// busy; minSize 1.
fn removable_at(empty: usize, drain: usize) -> (usize, usize) {
    let (mut nodes, p) = bucket("ng", empty, drain, false);
    nodes.push(n("ng-x0", 4000, "ng").deleting());
    nodes.push(n("ng-x1", 4000, "ng").deleting());
    for i in 0..(8 - empty - drain) {
        nodes.push(n(&format!("ng-b{i}"), 4000, "ng").with_pod(rs(&format!("busy{i}"), 4000)));
    }
    nodes.push(node("sink", &cpu_type(1_000_000), "z1"));
    let s = snap(nodes, vec![p.min_nodes(1)]);
    let config = DisruptionConfig {
        max_scale_down_parallelism: 1000,
        max_drain_parallelism: 1000,
        ..DisruptionConfig::default()
    };
    let gone = removed(&run_with(&s, &config, InProgress::default()));
    let e = gone.iter().filter(|x| x.starts_with("ng-e")).count();
    let d = gone.iter().filter(|x| x.starts_with("ng-d")).count();
    (e, d)
}

#[test]
fn test_removable_at_node_group_min_size_is_not_reached() {
    assert_eq!(removable_at(3, 2), (3, 2));
}

#[test]
fn test_removable_at_node_group_min_size_is_reached_for_drain_nodes() {
    assert_eq!(removable_at(3, 5), (3, 4));
}

// ---------------------------------------------------------------------------------------------
// simulator/drainability/rules/*/rule_test.go and simulator/drain_test.go
// ---------------------------------------------------------------------------------------------

/// A node `n` in a group of the default threshold with `pod` (250m of 1000m) and an empty
/// eligible-for-nothing node to take it; returns the plan.
fn drain_one(p: PodBuilder, pdbs: Vec<Pdb>) -> DisruptionPlan {
    let mut s = snap(
        vec![
            n("n", 1000, "ng").with_pod(p),
            n("target", 1000, "ng").annotate(SCALE_DOWN_DISABLED, "true"),
        ],
        vec![group("ng", 0.5)],
    );
    s.pdbs = pdbs;
    run(&s)
}

fn drained(plan: &DisruptionPlan) -> bool {
    removed(plan).contains("n")
}

#[test]
fn system_rule_test_drainable_kube_system_pdb_with_matching_kube_system_pod() {
    let p = rs("bar", 250).ns("kube-system").label("k8s-app", "bar");
    let plan = drain_one(p, vec![pdb("kube-system", "k8s-app", "bar", 1)]);
    assert!(drained(&plan), "{}", plan.render());
}

#[test]
fn system_rule_test_drainable_kube_system_pdb_with_non_matching_kube_system_pod() {
    let p = rs("bar", 250).ns("kube-system").label("k8s-app", "bar");
    let plan = drain_one(p, vec![pdb("kube-system", "k8s-app", "foo", 1)]);
    assert!(!drained(&plan));
    assert_eq!(kind(&plan, "n"), VerdictKind::NotEvictable);
}

#[test]
fn system_rule_test_drainable_kube_system_pdb_with_default_namespace_pod() {
    let p = rs("bar", 250).label("k8s-app", "bar");
    let plan = drain_one(p, vec![pdb("kube-system", "k8s-app", "bar", 0)]);
    assert!(drained(&plan), "{}", plan.render());
}

#[test]
fn system_rule_test_drainable_default_namespace_pdb_with_matching_labels_kube_system_pod() {
    let p = rs("bar", 250).ns("kube-system").label("k8s-app", "bar");
    let plan = drain_one(p, vec![pdb("default", "k8s-app", "bar", 1)]);
    assert!(!drained(&plan));
    assert_eq!(kind(&plan, "n"), VerdictKind::NotEvictable);
}

#[test]
fn pdb_rule_test_drainable_no_matching_pdbs() {
    // One budget in another namespace selects the labels, one in the pod's selects others.
    let p = rs("happy", 250).ns("good").label("label", "true");
    let plan = drain_one(
        p,
        vec![
            pdb("bad", "label", "true", 0),
            pdb("good", "label", "false", 0),
        ],
    );
    assert!(drained(&plan), "{}", plan.render());
}

#[test]
fn notsafetoevict_rule_test_drainable_pod_with_pod_safe_to_evict_annotation() {
    // A bare kube-system pod without a budget, but safe-to-evict=true.
    let p = rs("bar", 250)
        .ns("kube-system")
        .owner(None)
        .annotate(SAFE_TO_EVICT, "true");
    let plan = drain_one(p, vec![]);
    assert!(drained(&plan), "{}", plan.render());
}

#[test]
fn notsafetoevict_rule_test_drainable_rc_managed_pod_with_no_annotation() {
    let plan = drain_one(rs("bar", 250).owner(Some("ReplicationController")), vec![]);
    assert!(drained(&plan), "{}", plan.render());
}

#[test]
fn notsafetoevict_rule_test_drainable_job_managed_pod_with_no_annotation() {
    let plan = drain_one(rs("bar", 250).owner(Some("Job")), vec![]);
    assert!(drained(&plan), "{}", plan.render());
}

#[test]
fn notsafetoevict_rule_test_drainable_job_managed_pod_with_pod_safe_to_evict_false_annotation() {
    let p = rs("bar", 250)
        .owner(Some("Job"))
        .annotate(SAFE_TO_EVICT, "false");
    let plan = drain_one(p, vec![]);
    assert!(!drained(&plan));
    assert_eq!(kind(&plan, "n"), VerdictKind::NotEvictable);
}

#[test]
fn test_fast_get_pods_to_move_manifest_and_daemonset_pods_stay_replicated_pod_moves() {
    // A replicated pod, a kube-system static (mirror) pod and a DaemonSet pod: only the
    // replicated pod moves, and neither of the others blocks.
    let mut mirror = rs("pod3", 100).ns("kube-system").owner(None);
    mirror.0.mirror = true;
    let s = snap(
        vec![
            n("n", 1000, "ng")
                .with_pod(rs("pod2", 100))
                .with_pod(mirror)
                .with_pod(ds_pod("pod4", 100)),
            n("target", 1000, "ng").annotate(SCALE_DOWN_DISABLED, "true"),
        ],
        vec![group("ng", 0.5)],
    );
    let plan = run(&s);
    assert!(drained(&plan), "{}", plan.render());
    let c = plan.commands.iter().find(|c| c.nodes == ["n"]).unwrap();
    let moved: Vec<String> = c.pods.iter().map(|k| k.name.clone()).collect();
    assert_eq!(moved, ["pod2"]);
}

#[test]
fn test_fast_get_pods_to_move_manifest_pod_alone_leaves_the_node_empty() {
    let mut mirror = rs("pod3", 100).ns("kube-system").owner(None);
    mirror.0.mirror = true;
    let s = snap(
        vec![n("n", 1000, "ng").with_pod(mirror)],
        vec![group("ng", 0.5)],
    );
    let plan = run(&s);
    assert!(drained(&plan), "{}", plan.render());
    assert_eq!(kind(&plan, "n"), VerdictKind::Empty);
}

/// core/scaledown/pdb/basic_test.go (TestBasicRemainingPdbTracker CanRemovePods): a budget
/// that allows one disruption cannot take two of its pods from one node.
#[test]
fn test_can_remove_pods_two_pods_of_a_pdb_allowing_one() {
    let web = |name: &str| rs(name, 200).label("app", "web");
    let s = {
        let mut s = snap(
            vec![
                n("n", 1000, "ng").with_pod(web("a")).with_pod(web("b")),
                n("target", 1000, "ng").annotate(SCALE_DOWN_DISABLED, "true"),
            ],
            vec![group("ng", 0.5)],
        );
        s.pdbs = vec![pdb("default", "app", "web", 1)];
        s
    };
    let plan = run(&s);
    assert!(!drained(&plan), "{}", plan.render());
    assert_eq!(kind(&plan, "n"), VerdictKind::PdbBlocked);
}

// ---------------------------------------------------------------------------------------------
// core/static_autoscaler_test.go: TestStaticAutoscalerRunOncePodsWithPriorities
// (--expendable-pods-priority-cutoff, -10 by default)
// ---------------------------------------------------------------------------------------------

/// Deliberate deviation: the Cluster Autoscaler never scales up for a pod below
/// `--expendable-pods-priority-cutoff` (-10); this project provisions for every pending pod,
/// as Karpenter does (semantics.md, "Low-priority pods").
#[test]
fn test_static_autoscaler_run_once_pods_with_priorities_expendable_pod_triggers_no_scale_up() {
    let s = Snapshot {
        pending: vec![rs("expendable", 500).priority(-100).build()],
        pools: vec![pool("ng", vec![cpu_type(1000)]).build()],
        ..Snapshot::default()
    };
    let plan = plan_provisioning(&s);
    assert_eq!(plan.new_claims.len(), 1, "{}", plan.render());
}

// ---------------------------------------------------------------------------------------------
// core/scaleup/orchestrator/orchestrator_test.go
// ---------------------------------------------------------------------------------------------

#[test]
fn test_mixed_scale_up_triggering_and_remaining_pods() {
    // ng1 nodes have little cpu and much memory, ng2 the reverse; a pod no node group fits
    // remains unschedulable and does not stop the others.
    let ng1 = itype("ng1.t")
        .cpu("100m")
        .mem("1000Mi")
        .on_demand(&["z1"], 0.1)
        .build();
    let ng2 = itype("ng2.t")
        .cpu("1000m")
        .mem("100Mi")
        .on_demand(&["z1"], 0.2)
        .build();
    let s = Snapshot {
        pending: vec![
            pod("triggering").cpu("900m").build(),
            pod("remaining").cpu("2000m").build(),
            pod("awaiting").mem("200Mi").build(),
        ],
        nodes: vec![
            node("n1", &ng1, "z1")
                .pool("ng1")
                .with_pod(pod("p1").cpu("80m").mem("900Mi"))
                .build(),
            node("n2", &ng2, "z1")
                .pool("ng2")
                .with_pod(pod("p2").cpu("800m"))
                .build(),
        ],
        pools: vec![
            pool("ng1", vec![ng1]).build(),
            pool("ng2", vec![ng2]).build(),
        ],
        ..Snapshot::default()
    };
    let plan = plan_provisioning(&s);
    let on = |p: &str| {
        plan.new_claims
            .iter()
            .find(|c| c.pods.iter().any(|k| k.name == p))
            .map(|c| c.pool.clone())
    };
    assert_eq!(
        on("triggering").as_deref(),
        Some("ng2"),
        "{}",
        plan.render()
    );
    // Upstream's expander expands one group per loop, so `awaiting` waits for the next; we
    // plan every pool in one round (documented: "one node group per expansion" is CA's).
    assert_eq!(on("awaiting").as_deref(), Some("ng1"), "{}", plan.render());
    assert!(
        plan.unschedulable.iter().any(|u| u.pod.name == "remaining"),
        "{}",
        plan.render()
    );
}

#[test]
fn test_will_consider_only_gpu_pool_for_pod_which_does_requires_gpu() {
    let gpu = itype("gpu.t")
        .cpu("2")
        .mem("1000Mi")
        .gpus(1, "T4", 16)
        .on_demand(&["z1"], 0.5)
        .build();
    let std = itype("std.t")
        .cpu("2")
        .mem("1000Mi")
        .on_demand(&["z1"], 0.1)
        .build();
    let s = Snapshot {
        pending: vec![pod("extra-gpu-pod").cpu("2").mem("1000Mi").gpus(1).build()],
        pools: vec![
            pool("gpu-pool", vec![gpu]).build(),
            pool("std-pool", vec![std]).build(),
        ],
        ..Snapshot::default()
    };
    let plan = plan_provisioning(&s);
    assert_eq!(plan.new_claims.len(), 1, "{}", plan.render());
    assert_eq!(plan.new_claims[0].pool, "gpu-pool");
}
