//! Further Cluster Autoscaler cases (kubernetes/autoscaler, `cluster-autoscaler/`) that neither
//! `cluster_autoscaler_parity.rs` nor `cluster_autoscaler_suites.rs` rebuilds, as
//! `plan_disruption` and `plan_provisioning` scenarios.
//!
//! Upstream files followed; each test is named after the Go test and its case:
//!
//! - `core/scaledown/legacy/legacy_test.go`: `TestFindUnneededNodes`, `TestScaleDown`, the
//!   `TestScaleDownEmpty*` family (group minimums, cluster-wide minimum cores, memory and GPUs,
//!   many empty nodes at once), `TestNoScaleDownUnready`, `TestScaleDownNoMove`.
//! - `simulator/cluster_test.go`: `TestFindEmptyNodes`, `TestFindNodesToRemove`.
//! - `simulator/drain_test.go`: the `TestGetPodsToMove` cases the parity file leaves out.
//! - `core/scaledown/unneeded/nodes_test.go`: the third `TestRemovableAt` case.
//! - `utils/gpu/gpu_test.go`: `TestFilterOutNodesWithUnreadyGpus`.
//! - `estimator/binpacking_estimator_test.go`: `TestBinpackingEstimatePlacementOnAddedNodes`.
//!
//! The mapping is the other two files': a node group is a NodePool that launches nothing when
//! the case is about scale-down (no wait, no right-sizing, no NodePool budget, so a node goes
//! exactly when upstream calls it removable), and a NodePool whose one instance type is the
//! template when the case is about scale-up. Upstream's explicit candidate lists become the
//! nodes below the threshold. Scenarios are written from the upstream cases' facts and asserted
//! outcomes; no upstream code is copied. Where our documented semantics
//! (`docs/src/reference/semantics.md`) differ, the test asserts ours and names the rule.

use std::collections::BTreeSet;

use autoscaler_core::DisruptionPlan;
use autoscaler_core::builders::*;
use autoscaler_core::disruption::{
    DisruptionConfig, DisruptionState, SAFE_TO_EVICT, SCALE_DOWN_DISABLED, VerdictKind,
    plan_disruption,
};
use autoscaler_core::instance::InstanceType;
use autoscaler_core::labels;
use autoscaler_core::model::{Pdb, Snapshot};
use autoscaler_core::plan::Plan;
use autoscaler_core::provision::plan_provisioning;
use autoscaler_core::taints::{Effect, Taint};

mod support;
use support::ca::{
    ca_policy, estimator_old_node, estimator_template, kind, mars_pool, pdb, rs, unbounded,
};
use support::{names as set, removed, snap};

const NOW: i64 = 100_000;
const ZONE: &str = "z1";

// ---------------------------------------------------------------------------------------------
// Fixtures
// ---------------------------------------------------------------------------------------------

/// A type of `milli` millicores and `mem` memory in [`ZONE`], priced by its cores.
fn shape(name: &str, milli: u32, mem: &str) -> InstanceType {
    itype(name)
        .cpu(&format!("{milli}m"))
        .mem(mem)
        .on_demand(&[ZONE], f64::from(milli.max(1)) / 1000.0)
        .build()
}

/// A node of `milli` millicores and `mem` memory in node group `g`.
fn nd(name: &str, milli: u32, mem: &str, g: &str) -> NodeBuilder {
    node(name, &shape(&format!("t.{name}"), milli, mem), ZONE).pool(g)
}

/// A pod without a controller (upstream's `BuildTestPod` without owner references).
fn bare(name: &str, milli: u32) -> PodBuilder {
    rs(name, milli).owner(None)
}

/// A node group that launches nothing, with thresholds `t` and minimum size `min`.
fn group(name: &str, t: f64, min: u32) -> PoolBuilder {
    pool(name, vec![])
        .disruption(ca_policy(t, t))
        .min_nodes(min)
}

fn run(s: &Snapshot, config: &DisruptionConfig) -> DisruptionPlan {
    plan_disruption(s, &DisruptionState::default(), NOW, config)
}

/// The Cluster Autoscaler's `ToBeDeletedByClusterAutoscaler` taint, set at `at` (its value is
/// the Unix time the deletion started).
fn to_be_deleted(at: i64) -> Taint {
    Taint::new(
        "ToBeDeletedByClusterAutoscaler",
        &at.to_string(),
        Effect::NoSchedule,
    )
}

// ---------------------------------------------------------------------------------------------
// core/scaledown/legacy/legacy_test.go: TestFindUnneededNodes
// (threshold 0.35; group ng1 of minimum size 1; nodes of 1000m and 10 bytes unless noted)
// ---------------------------------------------------------------------------------------------

/// Upstream's cluster: n1 runs a pod without a controller, n2 a 300m pod that can move, n3 a
/// 400m pod (above 0.35), n4 (10000m) a 2000m pod no other node holds, n5 is marked
/// scale-down-disabled, n7 has no cpu at all and a 500m pod, n8 carries a ToBeDeleted taint
/// set 301 s ago, n9 one set 60 s ago.
fn find_unneeded_cluster() -> Snapshot {
    snap(
        vec![
            nd("n1", 1000, "10", "ng1").with_pod(bare("p1", 100)),
            nd("n2", 1000, "10", "ng1").with_pod(rs("p2", 300)),
            nd("n3", 1000, "10", "ng1").with_pod(rs("p3", 400)),
            nd("n4", 10_000, "10", "ng1").with_pod(rs("p4", 2000)),
            nd("n5", 1000, "10", "ng1")
                .annotate(SCALE_DOWN_DISABLED, "true")
                .with_pod(rs("p5", 100)),
            nd("n7", 0, "10", "ng1").with_pod(rs("p6", 500)),
            nd("n8", 1000, "10", "ng1").taint(to_be_deleted(NOW - 301)),
            nd("n9", 1000, "10", "ng1").taint(to_be_deleted(NOW - 60)),
        ],
        vec![group("ng1", 0.35, 1)],
    )
}

#[test]
fn test_find_unneeded_nodes_removable_and_unremovable_nodes() {
    // Upstream: n2 and n7 (and n8, next test) are unneeded; the others are not.
    let plan = run(&find_unneeded_cluster(), &unbounded());
    let gone = removed(&plan);
    assert!(gone.contains("n2"), "{}", plan.render());
    assert!(gone.contains("n7"), "{}", plan.render());
    for n in ["n1", "n3", "n4", "n5", "n9"] {
        assert!(!gone.contains(n), "{n} must stay\n{}", plan.render());
    }
    assert_eq!(kind(&plan, "n1"), VerdictKind::NotEvictable);
    assert_eq!(kind(&plan, "n3"), VerdictKind::AboveThreshold);
    assert_eq!(kind(&plan, "n4"), VerdictKind::NoPlaceForPods);
    assert_eq!(kind(&plan, "n5"), VerdictKind::ScaleDownDisabled);
    assert_eq!(kind(&plan, "n9"), VerdictKind::Deleting);
    // Upstream records a utilization for every node it evaluated.
    for n in ["n1", "n2", "n3", "n4", "n7"] {
        let v = plan.verdicts.iter().find(|v| v.node == n).unwrap();
        assert!(v.utilization.is_some(), "{n} has a utilization");
    }
}

#[test]
fn test_find_unneeded_nodes_deletion_taint_older_than_five_minutes_is_a_candidate() {
    // Upstream counts a node as being deleted only while its ToBeDeleted taint is younger
    // than the cloud provider's node deletion time (5 minutes): n8, tainted 301 s ago, is a
    // stale leftover and an ordinary (empty) candidate, unneeded with n2 and n7
    // (`keys::foreign_removal`, `keys::CA_DELETION_WINDOW_S`).
    let plan = run(&find_unneeded_cluster(), &unbounded());
    assert!(removed(&plan).contains("n8"), "{}", plan.render());
    assert_eq!(
        removed(&plan),
        set(&["n2", "n7", "n8"]),
        "{}",
        plan.render()
    );
}

// ---------------------------------------------------------------------------------------------
// core/scaledown/legacy/legacy_test.go: TestScaleDown, TestNoScaleDownUnready,
// TestScaleDownNoMove (threshold 0.5; nodes of 1000m and 1000 bytes)
// ---------------------------------------------------------------------------------------------

#[test]
fn test_scale_down_job_pod_moves_and_its_node_goes() {
    // n1 runs a 100m Job pod, n2 an 800m pod without a controller: the Job pod fits beside it,
    // so n1 is deleted; n2, at 0.8, stays.
    let s = snap(
        vec![
            nd("n1", 1000, "1000", "ng1").with_pod(rs("p1", 100).owner(Some("Job"))),
            nd("n2", 1000, "1000", "ng1").with_pod(bare("p2", 800)),
        ],
        vec![group("ng1", 0.5, 1)],
    );
    let plan = run(&s, &unbounded());
    assert_eq!(removed(&plan), set(&["n1"]), "{}", plan.render());
    let c = plan.commands.iter().find(|c| c.nodes == ["n1"]).unwrap();
    let moved: Vec<&str> = c.pods.iter().map(|k| k.name.as_str()).collect();
    assert_eq!(moved, ["p1"]);
    assert_eq!(kind(&plan, "n2"), VerdictKind::AboveThreshold);
}

/// `TestNoScaleDownUnready`: n1 is not ready and empty, n2 runs an 800m pod; unready nodes
/// may go once unneeded for an hour.
fn unready_after(unneeded_for: i64) -> DisruptionPlan {
    let s = snap(
        vec![
            nd("n1", 1000, "1000", "ng1").unready(),
            nd("n2", 1000, "1000", "ng1").with_pod(bare("p2", 800)),
        ],
        vec![group("ng1", 0.5, 1)],
    );
    let config = DisruptionConfig {
        scale_down_unready_enabled: true,
        scale_down_unready_s: 3600,
        ..unbounded()
    };
    let mut state = DisruptionState::default();
    state.unneeded_since.insert("n1".into(), NOW - unneeded_for);
    state.unneeded_since.insert("n2".into(), NOW - unneeded_for);
    plan_disruption(&s, &state, NOW, &config)
}

#[test]
fn test_no_scale_down_unready_waits_the_unready_time_then_goes() {
    // Unneeded for 5 minutes: short of the unready time, nothing goes.
    let plan = unready_after(5 * 60);
    assert_eq!(removed(&plan), set(&[]), "{}", plan.render());
    assert_eq!(kind(&plan, "n1"), VerdictKind::UnreadyUnneeded);
    // Unneeded for 2 hours: the unready node goes.
    let plan = unready_after(2 * 3600);
    assert_eq!(removed(&plan), set(&["n1"]), "{}", plan.render());
}

#[test]
fn test_scale_down_no_move_pods_never_go_to_an_unready_node() {
    // n1 runs a 100m Job pod; n2, the only other node, is not ready (and runs an 800m pod
    // without a controller). The Job pod may not move there, so nothing goes; scale-down of
    // unready nodes is off, as upstream leaves it in this case.
    let s = snap(
        vec![
            nd("n1", 1000, "1000", "ng1").with_pod(rs("p1", 100).owner(Some("Job"))),
            nd("n2", 1000, "1000", "ng1")
                .unready()
                .with_pod(bare("p2", 800)),
        ],
        vec![group("ng1", 0.5, 1)],
    );
    let config = DisruptionConfig {
        scale_down_unready_enabled: false,
        ..unbounded()
    };
    let plan = run(&s, &config);
    assert_eq!(removed(&plan), set(&[]), "{}", plan.render());
    assert_eq!(kind(&plan, "n1"), VerdictKind::NoPlaceForPods);
    assert_eq!(kind(&plan, "n2"), VerdictKind::NotReady);
}

// ---------------------------------------------------------------------------------------------
// core/scaledown/legacy/legacy_test.go: TestScaleDownEmpty* (every node empty; groups of
// minimum size 1; --max-empty-bulk-delete 10 is our --max-scale-down-parallelism 10)
// ---------------------------------------------------------------------------------------------

#[test]
fn test_scale_down_empty_multiple_node_groups() {
    // Two groups of two empty nodes, each of minimum size 1: one node of each goes.
    let s = snap(
        vec![
            nd("n1_1", 1000, "1000", "ng1"),
            nd("n1_2", 1000, "1000", "ng1"),
            nd("n2_1", 1000, "1000", "ng2"),
            nd("n2_2", 1000, "1000", "ng2"),
        ],
        vec![group("ng1", 0.5, 1), group("ng2", 0.5, 1)],
    );
    let plan = run(&s, &DisruptionConfig::default());
    let gone = removed(&plan);
    assert_eq!(gone.len(), 2, "{}", plan.render());
    assert_eq!(gone.iter().filter(|n| n.starts_with("n1_")).count(), 1);
    assert_eq!(gone.iter().filter(|n| n.starts_with("n2_")).count(), 1);
    for n in ["n1_1", "n1_2", "n2_1", "n2_2"] {
        if !gone.contains(n) {
            assert_eq!(kind(&plan, n), VerdictKind::AtMinNodes, "{n}");
        }
    }
}

#[test]
fn test_scale_down_empty_single_node_group() {
    // Twelve empty nodes of one group: ten go at once, the bulk limit.
    let nodes = (1..=12)
        .map(|i| nd(&format!("n{i}"), 1000, "1000", "ng1"))
        .collect();
    let s = snap(nodes, vec![group("ng1", 0.5, 1)]);
    let plan = run(&s, &DisruptionConfig::default());
    let gone = removed(&plan);
    assert_eq!(gone.len(), 10, "{}", plan.render());
    for i in 1..=12 {
        let n = format!("n{i}");
        if !gone.contains(&n) {
            assert_eq!(kind(&plan, &n), VerdictKind::ParallelismLimit, "{n}");
        }
    }
}

#[test]
fn test_scale_down_empty_min_cores_limit_hit() {
    // 3 cores with a minimum of 2: removing the 2-core n1 would leave 1, removing n2 leaves 2.
    let mut s = snap(
        vec![nd("n1", 2000, "1000", "ng1"), nd("n2", 1000, "1000", "ng1")],
        vec![group("ng1", 0.5, 0)],
    );
    s.cluster_limits = vec![cluster_limit("cluster limit").min("cpu", "2").build()];
    let plan = run(&s, &DisruptionConfig::default());
    assert_eq!(removed(&plan), set(&["n2"]), "{}", plan.render());
    assert_eq!(kind(&plan, "n1"), VerdictKind::AtClusterMinimum);
}

#[test]
fn test_scale_down_empty_min_memory_limit_hit() {
    // 6000Mi with a minimum of 4000Mi: two of the 1000Mi nodes may go, never the 3000Mi one.
    let mut s = snap(
        vec![
            nd("n1", 2000, "1000Mi", "ng1"),
            nd("n2", 1000, "1000Mi", "ng1"),
            nd("n3", 1000, "1000Mi", "ng1"),
            nd("n4", 1000, "3000Mi", "ng1"),
        ],
        vec![group("ng1", 0.5, 0)],
    );
    s.cluster_limits = vec![
        cluster_limit("cluster limit")
            .min("memory", "4000Mi")
            .build(),
    ];
    let plan = run(&s, &DisruptionConfig::default());
    let gone = removed(&plan);
    assert_eq!(gone.len(), 2, "{}", plan.render());
    assert!(
        gone.is_subset(&set(&["n1", "n2", "n3"])),
        "{}",
        plan.render()
    );
    assert_eq!(kind(&plan, "n4"), VerdictKind::AtClusterMinimum);
}

#[test]
fn test_scale_down_empty_min_gpu_limit_hit() {
    // Six empty nodes of one GPU each, at least four GPUs of that type kept: two go. A minimum
    // on another GPU type the nodes do not have holds nothing.
    let t = itype("g.1")
        .cpu("1000m")
        .mem("1000Mi")
        .gpus(1, "T4", 16)
        .on_demand(&[ZONE], 1.0)
        .build();
    let nodes = (1..=6)
        .map(|i| node(&format!("n{i}"), &t, ZONE).pool("ng1"))
        .collect();
    let mut s = snap(nodes, vec![group("ng1", 0.5, 0)]);
    let mut limit = cluster_limit("cluster limit").build();
    limit.min.gpus_by_model.insert("T4".into(), 4);
    limit.min.gpus_by_model.insert("P100".into(), 5);
    s.cluster_limits = vec![limit];
    let plan = run(&s, &DisruptionConfig::default());
    let gone = removed(&plan);
    assert_eq!(gone.len(), 2, "{}", plan.render());
    for i in 1..=6 {
        let n = format!("n{i}");
        if !gone.contains(&n) {
            assert_eq!(kind(&plan, &n), VerdictKind::AtClusterMinimum, "{n}");
        }
    }
}

#[test]
fn test_scale_down_empty_min_group_size_limit_hit() {
    let s = snap(
        vec![nd("n1", 2000, "1000", "ng1")],
        vec![group("ng1", 0.5, 1)],
    );
    let plan = run(&s, &DisruptionConfig::default());
    assert_eq!(removed(&plan), set(&[]), "{}", plan.render());
    assert_eq!(kind(&plan, "n1"), VerdictKind::AtMinNodes);
}

#[test]
fn test_scale_down_empty_min_group_size_limit_hit_when_one_node_is_being_deleted() {
    // Three empty nodes, two of them being deleted already: the third is the group's minimum.
    let s = snap(
        vec![
            nd("n1", 2000, "1000", "ng1").deleting(),
            nd("n2", 2000, "1000", "ng1").deleting(),
            nd("n3", 2000, "1000", "ng1"),
        ],
        vec![group("ng1", 0.5, 1)],
    );
    let plan = run(&s, &DisruptionConfig::default());
    assert_eq!(removed(&plan), set(&[]), "{}", plan.render());
    assert_eq!(kind(&plan, "n3"), VerdictKind::AtMinNodes);
}

// ---------------------------------------------------------------------------------------------
// core/scaledown/unneeded/nodes_test.go: TestRemovableAt
// ---------------------------------------------------------------------------------------------

#[test]
fn test_removable_at_node_group_min_size_is_reached_for_empty_and_drain_nodes() {
    // A group of five nodes (minimum 1), two already being deleted: two more may go. Upstream
    // has more empty candidates than that and takes empty nodes first, leaving no drain; here
    // two empty nodes and one to drain, with a large unmanaged node to take its pod.
    let s = snap(
        vec![
            nd("x0", 1000, "1000", "ng").deleting(),
            nd("x1", 1000, "1000", "ng").deleting(),
            nd("e0", 1000, "1000", "ng"),
            nd("e1", 1000, "1000", "ng"),
            nd("d0", 1000, "1000", "ng").with_pod(rs("pod-0", 1)),
            node("sink", &shape("sink.t", 1_000_000, "1000000"), ZONE),
        ],
        vec![group("ng", 0.5, 1)],
    );
    let plan = run(&s, &unbounded());
    assert_eq!(removed(&plan), set(&["e0", "e1"]), "{}", plan.render());
    assert_eq!(kind(&plan, "d0"), VerdictKind::AtMinNodes);
}

// ---------------------------------------------------------------------------------------------
// simulator/cluster_test.go: TestFindEmptyNodes, TestFindNodesToRemove
// (nodes of 1000m and 2,000,000 bytes)
// ---------------------------------------------------------------------------------------------

#[test]
fn test_find_empty_nodes() {
    // n1 runs a pod without a controller; n2 only a mirror pod, which does not count: n0, n2
    // and n3 are empty.
    let mut mirror = bare("p2", 300).mem("500000");
    mirror.0.mirror = true;
    let s = snap(
        vec![
            nd("n0", 1000, "2000000", "ng"),
            nd("n1", 1000, "2000000", "ng").with_pod(bare("p1", 300).mem("500000")),
            nd("n2", 1000, "2000000", "ng").with_pod(mirror),
            nd("n3", 1000, "2000000", "ng"),
        ],
        vec![group("ng", 0.5, 0)],
    );
    let plan = run(&s, &unbounded());
    assert_eq!(
        removed(&plan),
        set(&["n0", "n2", "n3"]),
        "{}",
        plan.render()
    );
    for n in ["n0", "n2", "n3"] {
        assert_eq!(kind(&plan, n), VerdictKind::Empty, "{n}");
    }
    assert_eq!(kind(&plan, "n1"), VerdictKind::NotEvictable);
}

/// The nodes of `TestFindNodesToRemove`, by name: n1 empty, n2 with two 100m ReplicaSet pods,
/// n3 with a 100m pod without a controller, n4 full with a 1000m pod.
fn to_remove(names: &[&str]) -> DisruptionPlan {
    let mem = "2000000";
    let mut nodes = Vec::new();
    for n in names {
        nodes.push(match *n {
            "n1" => nd("n1", 1000, mem, "ng"),
            "n2" => nd("n2", 1000, mem, "ng")
                .with_pod(rs("p1", 100).mem("100000"))
                .with_pod(rs("p2", 100).mem("100000")),
            "n3" => nd("n3", 1000, mem, "ng").with_pod(bare("p3", 100).mem("100000")),
            "n4" => nd("n4", 1000, mem, "ng").with_pod(bare("p4", 1000).mem("100000")),
            other => panic!("no node {other}"),
        });
    }
    run(&snap(nodes, vec![group("ng", 0.5, 0)]), &unbounded())
}

#[test]
fn test_find_nodes_to_remove_just_an_empty_node_should_be_removed() {
    let plan = to_remove(&["n1"]);
    assert_eq!(removed(&plan), set(&["n1"]), "{}", plan.render());
}

#[test]
fn test_find_nodes_to_remove_just_a_drainable_node_but_nowhere_for_pods_to_go_to() {
    let plan = to_remove(&["n2"]);
    assert_eq!(removed(&plan), set(&[]), "{}", plan.render());
    assert_eq!(kind(&plan, "n2"), VerdictKind::NoPlaceForPods);
}

#[test]
fn test_find_nodes_to_remove_drainable_node_and_a_mostly_empty_node_that_can_take_its_pods() {
    let plan = to_remove(&["n2", "n3"]);
    assert_eq!(removed(&plan), set(&["n2"]), "{}", plan.render());
    assert_eq!(kind(&plan, "n3"), VerdictKind::NotEvictable);
}

#[test]
fn test_find_nodes_to_remove_drainable_node_and_a_full_node_that_cannot_fit_anymore_pods() {
    let plan = to_remove(&["n2", "n4"]);
    assert_eq!(removed(&plan), set(&[]), "{}", plan.render());
    assert_eq!(kind(&plan, "n2"), VerdictKind::NoPlaceForPods);
}

#[test]
fn test_find_nodes_to_remove_4_nodes_1_empty_1_drainable() {
    let plan = to_remove(&["n1", "n2", "n4", "n3"]);
    assert_eq!(removed(&plan), set(&["n1", "n2"]), "{}", plan.render());
}

// ---------------------------------------------------------------------------------------------
// simulator/drain_test.go: TestGetPodsToMove
// (one node of 1000m holding the pod, 250m, and an empty node that takes it but is not a
// candidate itself)
// ---------------------------------------------------------------------------------------------

fn drain_one(p: PodBuilder, pdbs: Vec<Pdb>) -> DisruptionPlan {
    let mut s = snap(
        vec![
            nd("node", 1000, "64Gi", "ng").with_pod(p),
            nd("target", 1000, "64Gi", "ng").annotate(SCALE_DOWN_DISABLED, "true"),
        ],
        vec![group("ng", 0.5, 0)],
    );
    s.pdbs = pdbs;
    run(&s, &unbounded())
}

fn drained(plan: &DisruptionPlan) -> bool {
    removed(plan).contains("node")
}

#[test]
fn test_get_pods_to_move_unreplicated_pod() {
    let plan = drain_one(bare("unreplicatedPod", 250).ns("ns"), vec![]);
    assert!(!drained(&plan), "{}", plan.render());
    assert_eq!(kind(&plan, "node"), VerdictKind::NotEvictable);
}

#[test]
fn test_get_pods_to_move_kube_system() {
    // A ReplicaSet pod in kube-system with no PodDisruptionBudget blocks.
    let plan = drain_one(rs("systemPod", 250).ns("kube-system"), vec![]);
    assert!(!drained(&plan), "{}", plan.render());
    assert_eq!(kind(&plan, "node"), VerdictKind::NotEvictable);
}

#[test]
fn test_get_pods_to_move_local_storage() {
    let mut p = rs("localStoragePod", 250).ns("ns");
    p.0.local_storage = true;
    let plan = drain_one(p, vec![]);
    assert!(!drained(&plan), "{}", plan.render());
    assert_eq!(kind(&plan, "node"), VerdictKind::NotEvictable);
}

#[test]
fn test_get_pods_to_move_non_local_storage() {
    // A git-repo volume is not local storage (the shell sets `local_storage` for emptyDir
    // and hostPath only): the pod moves.
    let plan = drain_one(rs("nonLocalStoragePod", 250).ns("ns"), vec![]);
    assert!(drained(&plan), "{}", plan.render());
}

#[test]
fn test_get_pods_to_move_pdb_blocking() {
    let p = rs("pdbPod", 250).ns("ns").label("critical", "true");
    let plan = drain_one(p, vec![pdb("ns", "critical", "true", 0)]);
    assert!(!drained(&plan), "{}", plan.render());
    assert_eq!(kind(&plan, "node"), VerdictKind::PdbBlocked);
}

#[test]
fn test_get_pods_to_move_pdb_allowing() {
    let p = rs("pdbPod", 250).ns("ns").label("critical", "true");
    let plan = drain_one(p, vec![pdb("ns", "critical", "true", 1)]);
    assert!(drained(&plan), "{}", plan.render());
    let c = plan.commands.iter().find(|c| c.nodes == ["node"]).unwrap();
    let moved: Vec<&str> = c.pods.iter().map(|k| k.name.as_str()).collect();
    assert_eq!(moved, ["pdbPod"]);
}

#[test]
fn test_get_pods_to_move_ss_managed_pod() {
    let plan = drain_one(rs("bar", 250).owner(Some("StatefulSet")), vec![]);
    assert!(drained(&plan), "{}", plan.render());
}

#[test]
fn test_get_pods_to_move_pod_with_empty_dir_and_pod_safe_to_evict_annotation() {
    // No controller and local storage, but safe-to-evict=true waives both rules.
    let mut p = bare("bar", 250).annotate(SAFE_TO_EVICT, "true");
    p.0.local_storage = true;
    let plan = drain_one(p, vec![]);
    assert!(drained(&plan), "{}", plan.render());
}

#[test]
fn test_get_pods_to_move_ds_managed_pod_alone_leaves_the_node_empty() {
    // A DaemonSet pod is not moved (upstream returns it apart from the pods to move): its
    // node is empty.
    let plan = drain_one(rs("bar", 250).owner(Some("DaemonSet")), vec![]);
    assert!(drained(&plan), "{}", plan.render());
    assert_eq!(kind(&plan, "node"), VerdictKind::Empty);
}

// ---------------------------------------------------------------------------------------------
// utils/gpu/gpu_test.go: TestFilterOutNodesWithUnreadyGpus
// ---------------------------------------------------------------------------------------------

#[test]
fn test_filter_out_nodes_with_unready_gpus() {
    // Five empty nodes: a GPU node (GKE accelerator label) with its GPU allocatable is ready;
    // one with 0 allocatable GPUs and one with no GPU resource at all count as unready, as
    // does a node without GPUs whose Ready condition is false; a node without GPUs that is
    // ready is ready. With scale-down of unready nodes off, only the ready ones go.
    let gpu_ready = itype("gke.gpu")
        .cpu("1000m")
        .mem("1000Mi")
        .res("nvidia.com/gpu", "1")
        .label(labels::GKE_ACCELERATOR, "nvidia-tesla-k80")
        .on_demand(&[ZONE], 1.0)
        .build();
    let gpu_zero = itype("gke.gpu0")
        .cpu("1000m")
        .mem("1000Mi")
        .res("nvidia.com/gpu", "0")
        .label(labels::GKE_ACCELERATOR, "nvidia-tesla-k80")
        .on_demand(&[ZONE], 1.0)
        .build();
    let gpu_none = itype("gke.gpunone")
        .cpu("1000m")
        .mem("1000Mi")
        .label(labels::GKE_ACCELERATOR, "nvidia-tesla-k80")
        .on_demand(&[ZONE], 1.0)
        .build();
    let plain = shape("plain.t", 1000, "1000Mi");
    let s = snap(
        vec![
            node("nodeGpuReady", &gpu_ready, ZONE).pool("ng"),
            node("nodeGpuUnready", &gpu_zero, ZONE).pool("ng"),
            node("nodeGpuUnready2", &gpu_none, ZONE).pool("ng"),
            node("nodeNoGpuReady", &plain, ZONE).pool("ng"),
            node("nodeNoGpuUnready", &plain, ZONE).pool("ng").unready(),
        ],
        vec![group("ng", 0.5, 0)],
    );
    let config = DisruptionConfig {
        scale_down_unready_enabled: false,
        ..unbounded()
    };
    let plan = run(&s, &config);
    assert_eq!(
        removed(&plan),
        set(&["nodeGpuReady", "nodeNoGpuReady"]),
        "{}",
        plan.render()
    );
    for n in ["nodeGpuUnready", "nodeGpuUnready2", "nodeNoGpuUnready"] {
        assert_eq!(kind(&plan, n), VerdictKind::NotReady, "{n}");
    }
}

// ---------------------------------------------------------------------------------------------
// estimator/binpacking_estimator_test.go: TestBinpackingEstimatePlacementOnAddedNodes
// (template of 1000m, 1000 MiB and 10 pod slots in zone-mars; the old node in zone-jupiter is
// full, as in `cluster_autoscaler_suites.rs`; pods of 100 bytes in namespace universe,
// labelled app=<group>; upstream's per-node placement is its estimator's order of trying
// nodes, so the node and pod counts are asserted, and placements only where they are forced)
// ---------------------------------------------------------------------------------------------

/// `count` pods of group `name` (`milli` each), built by `f`.
fn grp(
    name: &str,
    milli: u32,
    count: usize,
    f: impl Fn(PodBuilder) -> PodBuilder,
) -> Vec<PodBuilder> {
    (0..count)
        .map(|i| {
            f(pod(&format!("{name}-{i}"))
                .cpu(&format!("{milli}m"))
                .mem("100")
                .ns("universe")
                .label("app", name))
        })
        .collect()
}

fn plain(p: PodBuilder) -> PodBuilder {
    p
}

/// Pods of a group that may not share a zone with each other.
fn zonal(name: &str, milli: u32, count: usize) -> Vec<PodBuilder> {
    grp(name, milli, count, |p| p.anti_affinity(labels::ZONE, name))
}

fn placement(groups: Vec<Vec<PodBuilder>>, max_nodes: Option<i64>) -> Plan {
    let filler = pod("old-filler").cpu("100m").mem("100Mi");
    let old = estimator_old_node().with_pod(filler);
    let mars = mars_pool(estimator_template(1000, 1000), max_nodes);
    let s = Snapshot {
        pending: groups
            .into_iter()
            .flatten()
            .map(PodBuilder::build)
            .collect(),
        nodes: vec![old.build()],
        pools: vec![mars.build()],
        ..Snapshot::default()
    };
    let plan = plan_provisioning(&s);
    assert_eq!(plan, plan_provisioning(&s), "deterministic");
    plan
}

/// (new nodes, pods placed on them).
fn counts(plan: &Plan) -> (usize, usize) {
    let pods: BTreeSet<&str> = plan
        .new_claims
        .iter()
        .flat_map(|c| c.pods.iter().map(|k| k.name.as_str()))
        .collect();
    (plan.new_claims.len(), pods.len())
}

/// How many pods whose name starts with `prefix` each new claim holds.
fn per_claim(plan: &Plan, prefix: &str) -> Vec<usize> {
    plan.new_claims
        .iter()
        .map(|c| c.pods.iter().filter(|k| k.name.starts_with(prefix)).count())
        .collect()
}

#[test]
fn test_binpacking_estimate_placement_on_added_nodes_pods_from_later_groups_go_to_the_last_node_while_it_has_room()
 {
    let plan = placement(
        vec![
            grp("big", 600, 2, plain),
            grp("a", 150, 1, plain),
            grp("b", 120, 1, plain),
            grp("c", 100, 1, plain),
        ],
        None,
    );
    assert_eq!(counts(&plan), (2, 5), "{}", plan.render());
}

#[test]
fn test_binpacking_estimate_placement_on_added_nodes_pods_go_to_an_earlier_node_when_the_last_node_is_full()
 {
    let plan = placement(
        vec![
            grp("big", 600, 2, plain),
            grp("medium", 400, 1, plain),
            grp("small", 300, 1, plain),
        ],
        None,
    );
    assert_eq!(counts(&plan), (2, 4), "{}", plan.render());
    // Each node holds one big pod and one of the others.
    assert_eq!(per_claim(&plan, "big"), [1, 1], "{}", plan.render());
}

#[test]
fn test_binpacking_estimate_placement_on_added_nodes_pods_go_to_an_earlier_node_when_the_last_node_has_a_host_port_conflict()
 {
    let plan = placement(
        vec![
            grp("big", 600, 2, plain),
            grp("hostport", 200, 2, |p| p.host_port(5555)),
        ],
        None,
    );
    assert_eq!(counts(&plan), (2, 4), "{}", plan.render());
    assert_eq!(per_claim(&plan, "hostport"), [1, 1], "{}", plan.render());
}

#[test]
fn test_binpacking_estimate_placement_on_added_nodes_pods_go_to_an_earlier_node_when_the_last_node_fails_hostname_anti_affinity()
 {
    let plan = placement(
        vec![
            grp("big", 600, 2, plain),
            grp("spread", 200, 2, |p| {
                p.anti_affinity(labels::HOSTNAME, "spread")
            }),
        ],
        None,
    );
    assert_eq!(counts(&plan), (2, 4), "{}", plan.render());
    assert_eq!(per_claim(&plan, "spread"), [1, 1], "{}", plan.render());
}

#[test]
fn test_binpacking_estimate_placement_on_added_nodes_empty_last_node_doesnt_take_pods_that_fit_on_a_node_with_pods()
 {
    // The second zonal pod has no zone left (the template offers only zone-mars): it gets no
    // node, and the small pod shares the first zonal pod's node.
    let plan = placement(
        vec![zonal("zonal", 600, 2), grp("small", 300, 1, plain)],
        None,
    );
    assert_eq!(counts(&plan), (1, 2), "{}", plan.render());
    assert_eq!(plan.unschedulable.len(), 1, "{}", plan.render());
    assert!(plan.unschedulable[0].pod.name.starts_with("zonal-"));
}

#[test]
fn test_binpacking_estimate_placement_on_added_nodes_empty_last_node_is_used_when_pods_dont_fit_on_any_node_with_pods()
 {
    let plan = placement(
        vec![zonal("zonal", 600, 2), grp("medium", 500, 1, plain)],
        None,
    );
    assert_eq!(counts(&plan), (2, 2), "{}", plan.render());
    assert_eq!(plan.unschedulable.len(), 1, "{}", plan.render());
}

#[test]
fn test_binpacking_estimate_placement_on_added_nodes_fastpath_reuses_an_empty_last_node() {
    // One zonal pod, the small pod and thirty 100m pods: 3.9 cores and 32 pods need four
    // nodes of 1 core and 10 slots.
    let plan = placement(
        vec![
            zonal("zonal", 600, 2),
            grp("small", 300, 1, plain),
            grp("many", 100, 30, plain),
        ],
        None,
    );
    assert_eq!(counts(&plan), (4, 32), "{}", plan.render());
}

#[test]
fn test_binpacking_estimate_placement_on_added_nodes_fastpath_reuses_an_empty_last_node_without_using_up_the_node_limit()
 {
    let plan = placement(
        vec![
            zonal("zonal", 600, 2),
            grp("small", 300, 1, plain),
            grp("many", 100, 30, plain),
        ],
        Some(4),
    );
    assert_eq!(counts(&plan), (4, 32), "{}", plan.render());
}
