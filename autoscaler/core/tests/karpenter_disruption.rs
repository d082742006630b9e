//! Karpenter's disruption suites, the cases `karpenter_consolidation.rs` does not already
//! rebuild, as black-box scenarios of the core's disruption API (`plan_disruption`, `validate`,
//! `simulate`, `budget_standing`, `budget_nodes`).
//!
//! Upstream files followed (kubernetes-sigs/karpenter, `pkg/controllers/disruption/`):
//! `emptiness_test.go`, `suite_test.go` (simulate scheduling, disruption budget counts, pod
//! eviction cost, candidate filtering), `consolidation_test.go` (events as verdicts, replace,
//! delete, TTL, multi-node, preferences), `singlenodeconsolidation_test.go` (candidate order)
//! and `drift_test.go` (the "Drift" context: ignore, do-not-disrupt, PDBs, replace, delete,
//! continue past a node whose pods fit nowhere; the "Budgets" context's commands in
//! progress), with drift set up as the core detects it (a NodeClaim's recorded template hash
//! older than its NodePool's) rather than upstream's hand-set `Drifted` condition.
//! Each test carries the snake_case name of its upstream `It()` and asserts what upstream
//! asserts, on a NodePool set up as upstream's is (no `consolidateAfter` or `unneededTime`, a
//! 100 % budget, utilization thresholds at 1.0, no parallelism limits). Where our documented
//! semantics (`docs/src/reference/semantics.md`) deviate, the test asserts ours and says so;
//! an undocumented difference keeps Karpenter's assertion and is `#[ignore]`d with the reason.
//!
//! Mapping of upstream notions onto the core model:
//! - a Node deleting, MarkedForDeletion, or in the orchestration queue is `Node::deleting`;
//! - the `Consolidatable` condition is `consolidateAfter` counted from `Node::last_pod_event`;
//! - the validation TTL is `DisruptionConfig::validation_delay_s`, checked by `validate`;
//! - a nomination is an entry of `Snapshot::nominated` naming the node's claim;
//! - `terminationGracePeriod` bounds only the drain (`disruption::drain_step`), not planning:
//!   consolidation is graceful disruption, which Karpenter blocks whatever the grace period;
//!   so the graceful cases with and without it assert the same thing.
//!
//! Not rebuilt, as they test what the core has no counterpart of:
//! - of `drift_test.go`: the metrics cases, "should untaint nodes when drift replacement
//!   fails" and the other queue cases (the execution state machine's, `execute/tests.rs`),
//!   "should respect budgets for multiple nodepools" (the per-pool budget arithmetic is the
//!   consolidation suites'), and "should not consider empty nodes for drift budgets", whose
//!   rule differs here (documented in `disruption/drift.rs`: an empty drifted node is deleted
//!   by drift when consolidation does not take it; see
//!   `empty_drifted_nodes_are_deleted_where_consolidation_never_acts`);
//! - `staticdrift_test.go`: the core has no static NodePools; likewise "should allow multiple
//!   replace operations to happen successively" (drift-driven across reconciles), and the
//!   "eventual disruption" candidate cases;
//! - metrics, events counts and `IsConsolidated` marking ("should correctly report ...",
//!   "should fire metrics for ...", the "should not mark ... consolidated ..." budget cases,
//!   "should fire an event when a candidate does not have a resolvable instance type / the
//!   capacity type label / the zone label");
//! - `queue_test.go` (taints, command timeouts, retry durations), "should remove taints from
//!   NodeClaims ...", "should add and remove taints ...", "should ensure that we do not
//!   duplicate capacity ...", "should stop multi-node consolidation after context deadline",
//!   the candidate-shuffling timeout cases of `singlenodeconsolidation_test.go`;
//! - objects the model does not carry: terminating and terminal pods ("will consider a node
//!   with terminating Deployment pods as empty", "will not consider a node with a terminating
//!   StatefulSet pod as empty", "... do-not-disrupt terminating/terminal pods", "... fully
//!   blocking PDBs on terminal/terminating pods": the caller leaves such pods out), a Node
//!   without its NodeClaim or the reverse ("... has just a Node/NodeClaim representation": the
//!   loader reports such a node uninitialized), local PersistentVolumes ("can replace node with
//!   a local PV"), PDB `unhealthyPodEvictionPolicy` ("considers PDB policy"), preferred pod
//!   anti-affinity ("should consolidate a node through deletion when ignoring preferences"),
//!   reserved capacity, buffer pods, the static NodePool cases;
//! - orchestration across reconciles: "should continue to single nodeclaim consolidation when
//!   multi-nodeclaim consolidation fails validation" (our plan runs single-node methods first
//!   and the caller plans again), "should not schedule an additional node when receiving
//!   pending pods while consolidating" and "should not consolidate a node that is launched for
//!   pods on a deleting node" (the nomination cache's timing);
//! - budgets per reason and on a schedule: upstream's disruption suites exercise per-reason
//!   budgets only for drift (above); budget schedules are tested in `budget_schedules.rs`,
//!   which ports upstream's `nodepool_budgets_test.go`;
//! - `consolidation_dra_test.go`: not rebuilt here (DRA consolidation is `dra_scenarios.rs`'s
//!   subject), nor the `balanced*_test.go` files (a consolidation policy the core has not).

use std::collections::BTreeSet;

use autoscaler_core::DisruptionPlan;
use autoscaler_core::builders::*;
use autoscaler_core::disruption::{
    Check, Command, DO_NOT_DISRUPT, DisruptionConfig, DisruptionState, Method, POD_DELETION_COST,
    Verdict, VerdictKind, budget_nodes, budget_standing, narrow_empty, plan_disruption, simulate,
    validate, validate_at,
};
use autoscaler_core::instance::{CapacityType, InstanceType};
use autoscaler_core::labels;
use autoscaler_core::model::{
    Budget, BudgetValue, ConsolidationPolicy, DisruptionPolicy, DisruptionReason, MinValuesPolicy,
    Pdb, Snapshot,
};
use autoscaler_core::requirements::{Operator, Requirements};

mod support;
use support::karpenter::*;
use support::{names, removed, snap};

/// The dearest type, which a node of is replaced by `cheap()`.
fn big() -> InstanceType {
    od("big.8xlarge", "32", 3.0)
}

fn cheap() -> InstanceType {
    od("cheap.large", "4", 0.2)
}

fn with_budget(nodes: BudgetValue) -> DisruptionPolicy {
    DisruptionPolicy {
        budgets: vec![Budget {
            nodes,
            reasons: vec![],
            schedule: None,
        }],
        ..karpenter_policy()
    }
}

fn run_with(s: &Snapshot, c: &DisruptionConfig) -> DisruptionPlan {
    plan_disruption(s, &DisruptionState::default(), NOW, c)
}

fn verdict<'a>(plan: &'a DisruptionPlan, node: &str) -> &'a Verdict {
    plan.verdicts
        .iter()
        .find(|v| v.node == node)
        .unwrap_or_else(|| panic!("no verdict for {node}: {}", plan.render()))
}

fn pdb_in(namespace: &str, name: &str, key: &str, value: &str, allowed: i32) -> Pdb {
    Pdb {
        namespace: namespace.into(),
        name: name.into(),
        selector: Requirements::new().with(key, Operator::In, &[value]),
        disruptions_allowed: allowed,
    }
}

/// A PDB over `app=test` in `default`.
fn pdb(name: &str, allowed: i32) -> Pdb {
    pdb_in("default", name, "app", "test", allowed)
}

/// Validates `cmd` against `s` once the validation delay is over.
fn validate_after_delay(cmd: &Command, s: &Snapshot) -> Result<(), String> {
    let mut s = s.clone();
    validate(
        cmd,
        &mut s,
        cmd.decided_at + config().validation_delay_s,
        &config(),
    )
}

/// Binds `pod` to node `name` of `s`.
fn bind(s: &mut Snapshot, name: &str, pod: PodBuilder) {
    let n = s.nodes.iter_mut().find(|n| n.name == name).unwrap();
    n.pods.push(pod.build());
    n.last_pod_event = Some(NOW + 5);
}

// ---------------------------------------------------------------------------------------------
// emptiness_test.go
// ---------------------------------------------------------------------------------------------

#[test]
fn can_delete_empty_nodes() {
    let plan = run(&snap(
        vec![kn("n", &big(), "p")],
        vec![kpool("p", vec![big()])],
    ));
    assert_eq!(removed(&plan), names(&["n"]), "{}", plan.render());
    assert_eq!(plan.commands[0].reason, DisruptionReason::Empty);
    assert!(plan.commands[0].replacement.is_none());
}

#[test]
fn can_delete_multiple_empty_nodes() {
    let plan = run(&snap(
        vec![kn("n0", &big(), "p"), kn("n1", &big(), "p")],
        vec![kpool("p", vec![big()])],
    ));
    // One command takes both.
    assert_eq!(plan.commands.len(), 1, "{}", plan.render());
    assert_eq!(removed(&plan), names(&["n0", "n1"]));
}

/// A NodePool with `consolidateAfter: 1m`.
fn after_a_minute() -> DisruptionPolicy {
    DisruptionPolicy {
        consolidate_after_s: 60,
        ..karpenter_policy()
    }
}

#[test]
fn should_ignore_nodes_without_the_consolidatable_status_condition() {
    // The node was created 10s ago: its consolidateAfter has not passed, so it is not yet
    // consolidatable.
    let s = snap(
        vec![kn("n", &big(), "p").created(NOW - 10)],
        vec![pool("p", vec![big()]).disruption(after_a_minute())],
    );
    let plan = run(&s);
    assert!(plan.commands.is_empty(), "{}", plan.render());
    assert_eq!(verdict(&plan, "n").kind, VerdictKind::ConsolidateAfter);
}

#[test]
fn should_ignore_nodes_with_the_consolidatable_status_condition_set_to_false() {
    // A pod left 10s ago: the condition went false and the window runs again.
    let s = snap(
        vec![kn("n", &big(), "p").pod_event(NOW - 10)],
        vec![pool("p", vec![big()]).disruption(after_a_minute())],
    );
    let plan = run(&s);
    assert!(plan.commands.is_empty(), "{}", plan.render());
    assert_eq!(verdict(&plan, "n").kind, VerdictKind::ConsolidateAfter);
}

#[test]
fn should_ignore_nodes_that_have_pods() {
    let plan = run(&snap(
        vec![kn("n", &least(), "p").with_pod(rs_pod("a"))],
        vec![kpool("p", vec![least()])],
    ));
    assert!(plan.commands.is_empty(), "{}", plan.render());
    assert_ne!(verdict(&plan, "n").kind, VerdictKind::Empty);
}

// ---------------------------------------------------------------------------------------------
// suite_test.go: Simulate Scheduling
// ---------------------------------------------------------------------------------------------

#[test]
fn should_allow_pods_on_deleting_nodes_to_reschedule_to_uninitialized_nodes() {
    // Ten 3-cpu nodes; every one but n0 is being deleted. n0's 2-cpu pod has no existing node
    // to go to, and goes to a new one (upstream's "uninitialized node": a NodeClaim to launch).
    let dear = od("dear.xlarge", "3", 1.0);
    let mut nodes = vec![kn("n0", &dear, "p").with_pod(rs_pod("a").cpu("2"))];
    for i in 1..10 {
        nodes.push(kn(&format!("n{i}"), &dear, "p").deleting());
    }
    let mut s = snap(nodes, vec![kpool("p", vec![dear.clone()])]);
    let plan = simulate(&mut s, &BTreeSet::from([0]), true);
    assert!(plan.unschedulable.is_empty(), "{}", plan.render());
    assert_eq!(plan.new_claims.len(), 1, "{}", plan.render());
}

// ---------------------------------------------------------------------------------------------
// suite_test.go: disruption budget counts
// ---------------------------------------------------------------------------------------------

/// Ten empty nodes `n0`..`n9` of pool `p`, each changed by `f`, under `policy`.
fn ten_empty(policy: DisruptionPolicy, f: impl Fn(usize, NodeBuilder) -> NodeBuilder) -> Snapshot {
    let nodes = (0..10)
        .map(|i| f(i, kn(&format!("n{i}"), &big(), "p")))
        .collect();
    snap(nodes, vec![pool("p", vec![big()]).disruption(policy)])
}

/// What pool `p`'s budget allows to be disrupted, as Karpenter's `BuildDisruptionBudgetMapping`
/// has it: the budget over the counted nodes, less those already disrupted, never below 0.
fn budget_mapping(s: &Snapshot) -> i64 {
    let nodes = s.nodes.iter().filter(|n| n.pool.as_deref() == Some("p"));
    let (total, disrupted) = budget_standing(nodes, 0);
    let b = &s.pools[0].disruption.budgets[0];
    (budget_nodes(b, total) - disrupted).max(0)
}

#[test]
fn should_not_consider_nodes_that_are_not_managed_as_part_of_disruption_count() {
    let mut s = ten_empty(with_budget(BudgetValue::Percent(100)), |_, n| n);
    s.nodes.push(node("unmanaged", &big(), "z1").build());
    assert_eq!(budget_mapping(&s), 10);
    // At 50 %, 5 of the 10 managed nodes (not ceil(5.5) = 6 of 11).
    s.pools[0].disruption = with_budget(BudgetValue::Percent(50));
    let plan = run(&s);
    assert_eq!(removed(&plan).len(), 5, "{}", plan.render());
    assert_eq!(verdict(&plan, "unmanaged").kind, VerdictKind::NotManaged);
}

#[test]
fn should_not_consider_nodes_that_are_not_initialized_as_part_of_disruption_count() {
    let mut s = ten_empty(with_budget(BudgetValue::Percent(100)), |_, n| n);
    s.nodes
        .push(kn("fresh", &big(), "p").initialized(false).build());
    let pool_nodes = s.nodes.iter().filter(|n| n.pool.as_deref() == Some("p"));
    assert_eq!(budget_standing(pool_nodes, 0), (10, 0));
    assert_eq!(budget_mapping(&s), 10);
    s.pools[0].disruption = with_budget(BudgetValue::Percent(50));
    let plan = run(&s);
    assert_eq!(removed(&plan).len(), 5, "{}", plan.render());
    assert!(!removed(&plan).contains("fresh"));
}

#[test]
fn should_not_consider_nodes_that_have_the_terminating_status_condition_as_part_of_disruption_count()
 {
    // A NodeClaim whose instance is terminating, never initialized.
    let mut s = ten_empty(with_budget(BudgetValue::Percent(100)), |_, n| n);
    s.nodes.push(
        kn("gone", &big(), "p")
            .initialized(false)
            .deleting()
            .build(),
    );
    let pool_nodes = s.nodes.iter().filter(|n| n.pool.as_deref() == Some("p"));
    assert_eq!(budget_standing(pool_nodes, 0), (10, 0));
    assert_eq!(budget_mapping(&s), 10);
    // Counted as disrupted, it would leave 9 of a 10-node budget.
    s.pools[0].disruption = with_budget(BudgetValue::Count(10));
    let plan = run(&s);
    assert_eq!(removed(&plan).len(), 10, "{}", plan.render());
}

#[test]
fn should_not_return_a_negative_disruption_value() {
    let s = ten_empty(with_budget(BudgetValue::Percent(10)), |_, n| n.deleting());
    assert_eq!(budget_mapping(&s), 0);
    // A fresh empty node: 10 % of 11 is 2, with 10 already disrupted; nothing may go.
    let mut s = s;
    s.nodes.push(kn("fresh", &big(), "p").build());
    let plan = run(&s);
    assert!(plan.commands.is_empty(), "{}", plan.render());
    assert_eq!(verdict(&plan, "fresh").kind, VerdictKind::BudgetExhausted);
}

#[test]
fn should_consider_nodes_with_a_deletion_timestamp_set_and_marked_for_deletion_to_the_disruption_count()
 {
    // n0 has a deletion timestamp, n1 is marked for deletion: both are `deleting`.
    let s = ten_empty(with_budget(BudgetValue::Percent(100)), |i, n| {
        if i < 2 { n.deleting() } else { n }
    });
    assert_eq!(budget_mapping(&s), 8);
    assert_eq!(removed(&run(&s)).len(), 8);
    // At 50 %: 5 less the 2 already going.
    let mut half = s.clone();
    half.pools[0].disruption = with_budget(BudgetValue::Percent(50));
    let plan = run(&half);
    assert_eq!(removed(&plan).len(), 3, "{}", plan.render());
}

#[test]
fn should_consider_not_ready_nodes_to_the_disruption_count() {
    let s = ten_empty(with_budget(BudgetValue::Percent(100)), |i, n| {
        if i < 2 { n.unready() } else { n }
    });
    assert_eq!(budget_mapping(&s), 8);
    let mut half = s.clone();
    half.pools[0].disruption = with_budget(BudgetValue::Percent(50));
    let plan = run(&half);
    assert_eq!(removed(&plan).len(), 3, "{}", plan.render());
    assert!(!removed(&plan).contains("n0") && !removed(&plan).contains("n1"));
}

// ---------------------------------------------------------------------------------------------
// suite_test.go: Pod Eviction Cost, seen through the order candidates are taken in
// ---------------------------------------------------------------------------------------------

/// One node `n<i>` per pod, each pod asking 20 of the node's 32 cpus, and an unmanaged node
/// with room for one such pod: exactly one node can go, the first in candidate order (savings
/// over eviction cost, then name). Returns the node removed.
fn first_to_go(pods: Vec<PodBuilder>) -> BTreeSet<String> {
    let spare = node("spare", &od("spare.8xlarge", "32", 1.0), "z1");
    let mut nodes: Vec<NodeBuilder> = pods
        .into_iter()
        .enumerate()
        .map(|(i, p)| kn(&format!("n{i}"), &least(), "p").with_pod(p.cpu("20")))
        .collect();
    nodes.push(spare);
    let plan = run(&snap(nodes, vec![kpool("p", vec![least()])]));
    let gone = removed(&plan);
    assert_eq!(gone.len(), 1, "{}", plan.render());
    gone
}

fn deletion_cost(name: &str, cost: &str) -> PodBuilder {
    rs_pod(name).annotate(POD_DELETION_COST, cost)
}

#[test]
fn should_have_a_standard_disruption_cost_for_a_pod_with_no_priority_or_disruption_cost_specified()
{
    // A plain pod costs what a pod with priority 0 and deletion cost 0 costs: name order
    // decides, whichever of the two comes first.
    let explicit = || deletion_cost("b", "0").priority(0);
    assert_eq!(first_to_go(vec![rs_pod("a"), explicit()]), names(&["n0"]));
    assert_eq!(first_to_go(vec![explicit(), rs_pod("a")]), names(&["n0"]));
}

#[test]
fn should_have_a_higher_disruption_cost_for_a_pod_with_a_positive_deletion_disruption_cost() {
    assert_eq!(
        first_to_go(vec![deletion_cost("a", "100"), rs_pod("b")]),
        names(&["n1"])
    );
}

#[test]
fn should_have_a_lower_disruption_cost_for_a_pod_with_a_positive_deletion_disruption_cost() {
    // (Upstream's title; its pod has deletion cost -100.)
    assert_eq!(
        first_to_go(vec![rs_pod("a"), deletion_cost("b", "-100")]),
        names(&["n1"])
    );
}

#[test]
fn should_have_higher_costs_for_higher_deletion_costs() {
    assert_eq!(
        first_to_go(vec![
            deletion_cost("a", "101"),
            deletion_cost("b", "100"),
            deletion_cost("c", "99"),
        ]),
        names(&["n2"])
    );
    assert_eq!(
        first_to_go(vec![deletion_cost("a", "101"), deletion_cost("b", "100")]),
        names(&["n1"])
    );
}

#[test]
fn should_have_a_higher_disruption_cost_for_a_pod_with_a_higher_priority() {
    assert_eq!(
        first_to_go(vec![rs_pod("a").priority(1), rs_pod("b")]),
        names(&["n1"])
    );
}

#[test]
fn should_have_a_lower_disruption_cost_for_a_pod_with_a_lower_priority() {
    assert_eq!(
        first_to_go(vec![rs_pod("a"), rs_pod("b").priority(-1)]),
        names(&["n1"])
    );
}

// ---------------------------------------------------------------------------------------------
// suite_test.go: Candidate Filtering
// ---------------------------------------------------------------------------------------------

/// Node `n` of the dearest type (a cheaper one would hold its pods) alone in pool `p`.
fn filtered(n: NodeBuilder, pdbs: Vec<Pdb>) -> DisruptionPlan {
    let mut s = snap(vec![n], vec![kpool("p", vec![cheap(), big()])]);
    s.pdbs = pdbs;
    run(&s)
}

/// `plan` leaves `n` alone, for a reason of `kind`.
fn assert_kept(plan: &DisruptionPlan, kind: VerdictKind) -> &Verdict {
    assert!(plan.commands.is_empty(), "{}", plan.render());
    let v = verdict(plan, "n");
    assert_eq!(v.kind, kind, "{}", v.reason);
    v
}

fn mirror_pod(name: &str) -> PodBuilder {
    let mut p = pod(name).owner(Some("Node"));
    p.0.mirror = true;
    p
}

fn daemon_pod(name: &str) -> PodBuilder {
    pod(name).owner(Some("DaemonSet"))
}

#[test]
fn should_not_consider_candidates_that_have_do_not_disrupt_pods_scheduled_and_no_termination_grace_period()
 {
    let plan = filtered(
        kn("n", &big(), "p").with_pod(rs_pod("a").annotate(DO_NOT_DISRUPT, "true")),
        vec![],
    );
    let v = assert_kept(&plan, VerdictKind::DoNotDisrupt);
    assert!(v.reason.contains("default/a"), "{}", v.reason);
}

#[test]
fn should_not_consider_candidates_that_have_do_not_disrupt_mirror_pods_scheduled() {
    let plan = filtered(
        kn("n", &big(), "p").with_pod(mirror_pod("m").annotate(DO_NOT_DISRUPT, "true")),
        vec![],
    );
    assert_kept(&plan, VerdictKind::DoNotDisrupt);
}

#[test]
fn should_not_consider_candidates_that_have_do_not_disrupt_daemonset_pods_scheduled() {
    let plan = filtered(
        kn("n", &big(), "p").with_pod(daemon_pod("ds").annotate(DO_NOT_DISRUPT, "true")),
        vec![],
    );
    assert_kept(&plan, VerdictKind::DoNotDisrupt);
}

#[test]
fn should_not_consider_candidates_that_have_do_not_disrupt_pods_scheduled_with_a_termination_grace_period_set_for_graceful_disruption()
 {
    // No terminationGracePeriod in the model; consolidation is graceful, blocked either way.
    let plan = filtered(
        kn("n", &big(), "p").with_pod(rs_pod("a").annotate(DO_NOT_DISRUPT, "true")),
        vec![],
    );
    assert_kept(&plan, VerdictKind::DoNotDisrupt);
}

#[test]
fn should_not_consider_candidates_that_have_pdb_blocked_pods_scheduled_with_a_termination_grace_period_set_for_graceful_disruption()
 {
    let plan = filtered(
        kn("n", &big(), "p").with_pod(pod("a").label("test", "value")),
        vec![pdb_in("default", "budget", "test", "value", 0)],
    );
    let v = assert_kept(&plan, VerdictKind::PdbBlocked);
    assert!(v.reason.contains("default/budget"), "{}", v.reason);
}

#[test]
fn should_not_consider_candidates_that_have_do_not_disrupt_on_nodes() {
    let plan = filtered(
        kn("n", &big(), "p")
            .annotate(DO_NOT_DISRUPT, "true")
            .with_pod(rs_pod("a")),
        vec![],
    );
    let v = assert_kept(&plan, VerdictKind::DoNotDisrupt);
    assert!(v.reason.contains("node"), "{}", v.reason);
}

#[test]
fn should_not_consider_candidates_that_have_multiple_pdbs_on_the_same_pod() {
    let plan = filtered(
        kn("n", &big(), "p").with_pod(pod("a").label("test", "value")),
        vec![
            pdb_in("default", "pdb1", "test", "value", 0),
            pdb_in("default", "pdb2", "test", "value", 0),
        ],
    );
    let v = assert_kept(&plan, VerdictKind::PdbBlocked);
    assert!(v.reason.contains("more than one PDB"), "{}", v.reason);
    assert!(v.reason.contains("default/pdb1"), "{}", v.reason);
    assert!(v.reason.contains("default/pdb2"), "{}", v.reason);
}

#[test]
fn should_not_consider_candidates_that_have_fully_blocking_pdbs() {
    let plan = filtered(
        kn("n", &big(), "p").with_pod(pod("a").label("test", "value")),
        vec![pdb_in("default", "budget", "test", "value", 0)],
    );
    let v = assert_kept(&plan, VerdictKind::PdbBlocked);
    assert!(v.reason.contains("default/budget"), "{}", v.reason);
}

#[test]
fn should_not_consider_candidates_that_have_fully_blocking_pdbs_on_daemonset_pods() {
    let plan = filtered(
        kn("n", &big(), "p").with_pod(daemon_pod("ds").label("test", "value")),
        vec![pdb_in("default", "budget", "test", "value", 0)],
    );
    assert_kept(&plan, VerdictKind::PdbBlocked);
}

/// Not an upstream `It()` of its own: the case above with a DaemonSet pod that tolerates every
/// taint, as node agents do. Karpenter does not evict such a pod (`IsEvictable`: it tolerates
/// the disrupted taint), so its budget is not asked, and the node goes.
#[test]
fn candidates_with_fully_blocking_pdbs_on_daemonset_pods_that_tolerate_everything_are_considered() {
    let plan = filtered(
        kn("n", &big(), "p").with_pod(
            daemon_pod("ds")
                .label("test", "value")
                .tolerate(autoscaler_core::taints::Toleration::exists("")),
        ),
        vec![pdb_in("default", "budget", "test", "value", 0)],
    );
    assert_eq!(removed(&plan), names(&["n"]), "{}", plan.render());
}

#[test]
fn should_consider_candidates_that_have_fully_blocking_pdbs_on_mirror_pods() {
    let plan = filtered(
        kn("n", &big(), "p").with_pod(mirror_pod("m").label("test", "value")),
        vec![pdb_in("default", "budget", "test", "value", 0)],
    );
    // A candidate, and empty: the mirror pod is not evicted.
    assert_eq!(removed(&plan), names(&["n"]), "{}", plan.render());
}

#[test]
fn should_not_consider_candidates_that_have_do_not_disrupt_pods_without_a_termination_grace_period_set_for_graceful_disruption()
 {
    let plan = filtered(
        kn("n", &big(), "p").with_pod(rs_pod("a").annotate(DO_NOT_DISRUPT, "true")),
        vec![],
    );
    assert_kept(&plan, VerdictKind::DoNotDisrupt);
}

#[test]
fn should_not_consider_candidates_that_have_fully_blocking_pdbs_without_a_termination_grace_period_set_for_graceful_disruption()
 {
    let plan = filtered(
        kn("n", &big(), "p").with_pod(pod("a").label("test", "value")),
        vec![pdb_in("default", "budget", "test", "value", 0)],
    );
    assert_kept(&plan, VerdictKind::PdbBlocked);
}

#[test]
fn should_not_consider_candidates_that_are_nominated() {
    let mut n = kn("n", &big(), "p");
    n.0.claim = Some("claim-n".into());
    let mut s = snap(vec![n], vec![kpool("p", vec![cheap(), big()])]);
    let waiting = rs_pod("pending").cpu("1").build();
    s.nominated.insert(waiting.key.clone(), "claim-n".into());
    s.pending.push(waiting);
    let plan = run(&s);
    let v = assert_kept(&plan, VerdictKind::Nominated);
    assert!(v.reason.contains("nominated"), "{}", v.reason);
}

#[test]
fn should_not_consider_candidates_that_are_deleting() {
    let plan = filtered(kn("n", &big(), "p").deleting(), vec![]);
    assert_kept(&plan, VerdictKind::Deleting);
}

#[test]
fn should_not_consider_candidates_that_are_marked_for_deletion() {
    // MarkedForDeletion is `Node::deleting` too ("deletionTimestamp set or marked for
    // disruption"); a node with a pod, so that only the blocker keeps it.
    let plan = filtered(
        kn("n", &big(), "p").deleting().with_pod(rs_pod("a")),
        vec![],
    );
    assert_kept(&plan, VerdictKind::Deleting);
}

#[test]
fn should_not_consider_candidates_that_aren_t_yet_initialized() {
    let plan = filtered(kn("n", &big(), "p").initialized(false), vec![]);
    assert_kept(&plan, VerdictKind::NotInitialized);
}

#[test]
fn should_not_consider_candidates_that_are_not_owned_by_a_node_pool_no_karpenter_sh_nodepool_label()
{
    let plan = filtered(node("n", &big(), "z1"), vec![]);
    assert_kept(&plan, VerdictKind::NotManaged);
}

#[test]
fn should_not_consider_candidates_that_are_have_a_non_existent_node_pool() {
    let plan = filtered(kn("n", &big(), "gone"), vec![]);
    assert_kept(&plan, VerdictKind::NotManaged);
}

/// An empty node of pool `p` without label `key` is still a candidate (and removed).
fn candidate_without_label(key: &str) {
    let mut n = kn("n", &big(), "p").label(labels::CAPACITY_TYPE, "on-demand");
    n.0.labels.remove(key);
    let plan = filtered(n, vec![]);
    assert_eq!(removed(&plan), names(&["n"]), "{}", plan.render());
}

#[test]
fn should_consider_candidates_that_do_not_have_the_karpenter_sh_capacity_type_label() {
    candidate_without_label(labels::CAPACITY_TYPE);
}

#[test]
fn should_consider_candidates_that_do_not_have_the_topology_kubernetes_io_zone_label() {
    candidate_without_label(labels::ZONE);
}

#[test]
fn should_consider_candidates_that_do_not_have_the_node_kubernetes_io_instance_type_label() {
    candidate_without_label(labels::INSTANCE_TYPE);
}

#[test]
fn should_consider_candidates_that_have_an_instance_type_that_cannot_be_resolved() {
    let mut n = kn("n", &big(), "p");
    n.0.instance_type = Some("not-in-any-catalog".into());
    let plan = filtered(n, vec![]);
    assert_eq!(removed(&plan), names(&["n"]), "{}", plan.render());
}

#[test]
fn should_not_consider_candidates_that_are_actively_being_processed_in_the_queue() {
    // A command under way marks its nodes for deletion: `Node::deleting`.
    let plan = filtered(
        kn("n", &big(), "p").deleting().with_pod(rs_pod("a")),
        vec![],
    );
    assert_kept(&plan, VerdictKind::Deleting);
}

// ---------------------------------------------------------------------------------------------
// consolidation_test.go: Events, as the verdicts they are written from
// ---------------------------------------------------------------------------------------------

fn one_node_with_pod(policy: DisruptionPolicy) -> DisruptionPlan {
    run(&snap(
        vec![kn("n", &big(), "p").with_pod(rs_pod("a").cpu("1"))],
        vec![pool("p", vec![cheap(), big()]).disruption(policy)],
    ))
}

#[test]
fn should_not_fire_an_event_for_consolidation_disabled_when_the_node_pool_has_consolidation_set_to_when_empty_or_underutilized()
 {
    let plan = run(&snap(
        vec![kn("n", &big(), "p")],
        vec![kpool("p", vec![cheap(), big()])],
    ));
    assert_eq!(removed(&plan), names(&["n"]), "{}", plan.render());
    assert!(
        plan.verdicts.iter().all(
            |v| v.kind != VerdictKind::WhenEmptyOnly && v.kind != VerdictKind::ConsolidateAfter
        )
    );
}

#[test]
fn should_fire_an_event_for_consolidation_disabled_when_the_node_pool_has_consolidation_set_to_when_empty()
 {
    let plan = one_node_with_pod(DisruptionPolicy {
        consolidation_policy: ConsolidationPolicy::WhenEmpty,
        consolidate_after_s: 60,
        ..karpenter_policy()
    });
    assert_kept(&plan, VerdictKind::WhenEmptyOnly);
}

#[test]
fn should_fire_an_event_for_consolidation_disabled_when_the_node_pool_has_consolidate_after_set_to_never()
 {
    let plan = one_node_with_pod(DisruptionPolicy {
        consolidate_after_s: i64::MAX,
        ..karpenter_policy()
    });
    let v = assert_kept(&plan, VerdictKind::ConsolidateAfter);
    assert!(v.reason.contains("Never"), "{}", v.reason);
}

// ---------------------------------------------------------------------------------------------
// consolidation_test.go: Replace
// ---------------------------------------------------------------------------------------------

#[test]
fn cannot_replace_spot_with_spot_if_the_spot_to_spot_consolidation_is_disabled() {
    // The core has no feature gate; a minimum no catalog meets is the same switch.
    let types = spot_catalog(20);
    let most = types.last().unwrap().clone();
    let s = snap(
        vec![spot_node("n", &most, "p").with_pod(rs_pod("a").cpu("1"))],
        vec![kpool("p", types)],
    );
    let disabled = DisruptionConfig {
        min_spot_to_spot_types: usize::MAX,
        ..config()
    };
    let plan = run_with(&s, &disabled);
    assert!(plan.commands.is_empty(), "{}", plan.render());
    assert!(verdict(&plan, "n").reason.contains("spot"));
    // With the rule on, the same node is replaced.
    assert_eq!(removed(&run(&s)), names(&["n"]));
}

/// Eighteen spot types priced 1.0, 1.1, ..., the 17th (outside the first 15 by position)
/// made the cheapest; a node of the 18th, with a pod, in a pool asking `min_types` instance
/// types.
fn eighteen_spot(min_types: u32) -> (Snapshot, Vec<String>) {
    let mut types = spot_catalog(18);
    types[16] = spot("s16.large", "32", 0.001);
    let most = types[17].clone();
    let mut by_price = types.clone();
    by_price.sort_by(|a, b| a.offerings[0].price.total_cmp(&b.offerings[0].price));
    let order = by_price.iter().map(|t| t.name.clone()).collect();
    let s = snap(
        vec![spot_node("n", &most, "p").with_pod(rs_pod("a").cpu("1"))],
        vec![kpool("p", types).min_values(labels::INSTANCE_TYPE, min_types)],
    );
    (s, order)
}

#[test]
fn spot_to_spot_consolidation_should_consider_the_max_of_default_and_minimum_number_of_instance_type_options_from_min_values_in_requirement_for_truncation_if_minimum_number_of_instance_type_options_from_min_values_in_requirement_is_greater_than_15()
 {
    let (s, by_price) = eighteen_spot(16);
    let plan = run(&s);
    assert_eq!(removed(&plan), names(&["n"]), "{}", plan.render());
    let offered: BTreeSet<String> = replacement_types(&plan)[0].iter().cloned().collect();
    assert!(offered.contains("s16.large"));
    assert!(!offered.contains("s17.large"));
    // Karpenter sends max(15, minValues) = 16 types, the 16 cheapest.
    let expected: BTreeSet<String> = by_price[..16].iter().cloned().collect();
    assert_eq!(offered, expected);
}

#[test]
fn spot_to_spot_consolidation_should_consider_the_default_for_truncation_if_minimum_number_of_instance_type_options_from_min_values_in_requirement_is_less_than_15()
 {
    let (s, by_price) = eighteen_spot(10);
    let plan = run(&s);
    assert_eq!(removed(&plan), names(&["n"]), "{}", plan.render());
    let offered: BTreeSet<String> = replacement_types(&plan)[0].iter().cloned().collect();
    assert!(offered.contains("s16.large"));
    let expected: BTreeSet<String> = by_price[..15].iter().cloned().collect();
    assert_eq!(offered, expected);
}

#[test]
fn should_handle_failing_filter_out_same_instance_type_correctly_without_a_panic_when_min_values_isn_t_satisfied()
 {
    let current = itype("current-on-demand")
        .cpu("4")
        .mem("16Gi")
        .offer("z1a", CapacityType::OnDemand, 0.5)
        .build();
    let other = itype("other-on-demand")
        .cpu("4")
        .mem("16Gi")
        .offer("z1a", CapacityType::OnDemand, 0.4)
        .build();
    let two = |name: &str| rs_pod(name).cpu("2");
    let mk = |name: &str| {
        node(name, &current, "z1a")
            .pool("p")
            .label(labels::CAPACITY_TYPE, "on-demand")
    };
    let s = snap(
        vec![
            mk("n0").with_pod(two("a")),
            mk("n1").with_pod(two("b")),
            mk("n2").with_pod(two("c")).with_pod(two("d")),
        ],
        vec![
            kpool("p", vec![current.clone(), other])
                .require(labels::CAPACITY_TYPE, Operator::In, &["on-demand"])
                .min_values(labels::INSTANCE_TYPE, 2),
        ],
    );
    let plan = run(&s);
    // One of the first two nodes goes, its pod onto the other; two nodes are left.
    let gone = removed(&plan);
    assert_eq!(gone.len(), 1, "{}", plan.render());
    assert!(gone.contains("n0") || gone.contains("n1"));
    assert!(plan.commands.iter().all(|c| c.replacement.is_none()));
}

/// Eighteen types of 32 cpus priced 1.0, 1.1, ..., on demand or spot; a node of the 16th
/// (15 cheaper types) with a pod, in a pool asking 16 instance types.
fn min_values_sixteen(spot_nodes: bool) -> Snapshot {
    let types: Vec<InstanceType> = (0..18)
        .map(|i| {
            let name = format!("t{i:02}.large");
            let price = 1.0 + i as f64 * 0.1;
            if spot_nodes {
                spot(&name, "32", price)
            } else {
                od(&name, "32", price)
            }
        })
        .collect();
    let t = types[15].clone();
    let n = if spot_nodes {
        spot_node("n", &t, "p")
    } else {
        kn("n", &t, "p")
    };
    snap(
        vec![n.with_pod(rs_pod("a").cpu("1"))],
        vec![kpool("p", types).min_values(labels::INSTANCE_TYPE, 16)],
    )
}

#[test]
fn consolidation_should_fail_if_filter_by_price_breaks_the_minimum_requirement_from_the_node_pools()
{
    for spot_nodes in [false, true] {
        let plan = run(&min_values_sixteen(spot_nodes));
        assert!(
            plan.commands.is_empty(),
            "spot={spot_nodes}: {}",
            plan.render()
        );
    }
}

#[test]
fn should_not_consolidate_a_node_by_relaxing_min_values_when_policy_is_set_to_best_effort() {
    // The pool wants three instance types and has two, the node runs on the dearer. The
    // simulation (BestEffort) opens a claim of both, its minValues lowered to two; keeping
    // only the cheaper type leaves one, below the two: no replacement, as upstream's price
    // filter checks the relaxed requirements.
    let dear = od("most.expensive", "32", 3.0);
    let mut s = snap(
        vec![kn("n", &dear, "p").with_pod(rs_pod("a").cpu("1"))],
        vec![kpool("p", vec![least(), dear.clone()]).min_values(labels::INSTANCE_TYPE, 3)],
    );
    s.min_values_policy = MinValuesPolicy::BestEffort;
    let sim = simulate(&mut s, &BTreeSet::from([0]), true);
    assert_eq!(sim.new_claims.len(), 1, "{}", sim.render());
    assert_eq!(
        sim.new_claims[0]
            .min_values_relaxed
            .get(labels::INSTANCE_TYPE),
        Some(&2)
    );
    let plan = run(&s);
    assert!(plan.commands.is_empty(), "{}", plan.render());
    assert!(!verdict(&plan, "n").disrupted);
}

#[test]
fn best_effort_replaces_a_node_when_the_cheaper_types_keep_the_relaxed_values() {
    // Three tiers wanted, two there (a and b). The cheaper types span both, as many as the
    // simulation relaxed the rule to, so the dear node is replaced under BestEffort; Strict
    // opens no claim at all and keeps it.
    let tier = |name: &str, cpu: &str, price: f64, t: &str| {
        itype(name)
            .cpu(cpu)
            .mem("128Gi")
            .label("tier", t)
            .on_demand(&["z1"], price)
            .build()
    };
    let dear = tier("dear.8xlarge", "32", 3.0, "b");
    let types = vec![
        tier("cheap-a.large", "4", 0.2, "a"),
        tier("cheap-b.large", "4", 0.3, "b"),
        dear.clone(),
    ];
    let mut s = snap(
        vec![kn("n", &dear, "p").with_pod(rs_pod("a").cpu("1"))],
        vec![kpool("p", types).min_values("tier", 3)],
    );
    let strict = run(&s);
    assert!(strict.commands.is_empty(), "{}", strict.render());
    s.min_values_policy = MinValuesPolicy::BestEffort;
    let plan = run(&s);
    assert_eq!(removed(&plan), names(&["n"]), "{}", plan.render());
    let r = plan.commands[0]
        .replacement
        .as_ref()
        .expect("a replacement");
    let offered: Vec<&str> = r.instance_types.iter().map(|o| &*o.instance_type).collect();
    assert_eq!(offered, ["cheap-a.large", "cheap-b.large"]);
    assert_eq!(r.min_values_relaxed.get("tier"), Some(&2));
}

#[test]
fn can_replace_nodes_if_another_node_pool_returns_no_instance_types() {
    for spot_nodes in [false, true] {
        let (types, n) = if spot_nodes {
            let types = spot_catalog(20);
            let most = types.last().unwrap().clone();
            (types, spot_node("n", &most, "p"))
        } else {
            (vec![cheap(), big()], kn("n", &big(), "p"))
        };
        let dearest = n.0.instance_type.clone().unwrap();
        let s = snap(
            vec![n.with_pod(rs_pod("a").cpu("1"))],
            vec![kpool("p", types), kpool("p2", vec![])],
        );
        let plan = run(&s);
        assert_eq!(removed(&plan), names(&["n"]), "{}", plan.render());
        let offered = &replacement_types(&plan)[0];
        assert!(!offered.contains(&dearest), "{offered:?}");
    }
}

/// A node of the dearest type with one `app=test` pod; a cheaper type would hold it.
fn replaceable(n: NodeBuilder, pod: PodBuilder, pdbs: Vec<Pdb>) -> DisruptionPlan {
    let mut s = snap(
        vec![n.with_pod(pod.cpu("1"))],
        vec![kpool("p", vec![cheap(), big()])],
    );
    s.pdbs = pdbs;
    run(&s)
}

#[test]
fn can_replace_nodes_pdb_namespace_must_match() {
    // A PDB allowing nothing, in another namespace, does not cover the pod.
    let plan = replaceable(
        kn("n", &big(), "p"),
        rs_pod("a"),
        vec![pdb_in("other", "test", "app", "test", 0)],
    );
    assert_eq!(removed(&plan), names(&["n"]), "{}", plan.render());
    assert_eq!(plan.commands[0].method, Method::Replace);
}

#[test]
fn can_replace_nodes_considers_karpenter_sh_do_not_disrupt_set_to_true_on_nodes() {
    let plan = replaceable(
        kn("n", &big(), "p").annotate(DO_NOT_DISRUPT, "true"),
        rs_pod("a"),
        vec![],
    );
    assert_kept(&plan, VerdictKind::DoNotDisrupt);
}

#[test]
fn can_replace_nodes_considers_karpenter_sh_do_not_disrupt_set_to_true_on_pods() {
    let plan = replaceable(
        kn("n", &big(), "p"),
        rs_pod("a").annotate(DO_NOT_DISRUPT, "true"),
        vec![],
    );
    assert_kept(&plan, VerdictKind::DoNotDisrupt);
}

// ---------------------------------------------------------------------------------------------
// consolidation_test.go: Delete
// ---------------------------------------------------------------------------------------------

fn plain_three() -> [PodBuilder; 3] {
    [rs_pod("a"), rs_pod("b"), rs_pod("c")]
}

#[test]
fn does_not_delete_nodes_with_pod_churn_deletes_nodes_without_pod_churn() {
    let s = snap(
        vec![kn("n0", &big(), "p"), kn("n1", &big(), "p")],
        vec![kpool("p", vec![big()])],
    );
    let plan = run(&s);
    assert_eq!(plan.commands.len(), 1, "{}", plan.render());
    let cmd = &plan.commands[0];
    assert_eq!(cmd.reason, DisruptionReason::Empty);
    // While the command waits out its validation delay a pod lands on n0. Karpenter drops n0
    // from the command and deletes n1.
    let mut later = s.clone();
    bind(&mut later, "n0", rs_pod("late"));
    assert!(
        validate_after_delay(cmd, &later).is_err(),
        "n0 is not empty"
    );
    let mut narrowed = cmd.clone();
    narrowed.nodes = narrow_empty(cmd, &later).expect("n1 is still empty");
    assert_eq!(narrowed.nodes, vec!["n1".to_string()]);
    assert_eq!(validate_after_delay(&narrowed, &later), Ok(()));
    // Nothing to narrow while both are empty, nor once both took pods.
    assert_eq!(narrow_empty(cmd, &s), None);
    bind(&mut later, "n1", rs_pod("later"));
    assert_eq!(narrow_empty(cmd, &later), None);
}

#[test]
fn can_delete_nodes_if_another_node_pool_has_no_node_template() {
    let plan = run(&snap(
        two_least(plain_three()),
        vec![kpool("p", vec![least()]), kpool("templateless", vec![])],
    ));
    assert_eq!(removed(&plan), names(&["n1"]), "{}", plan.render());
    assert!(plan.commands[0].replacement.is_none());
}

#[test]
fn does_not_consolidate_nodes_with_karpenter_sh_do_not_disrupt_set_to_true_on_pods_when_the_node_pool_s_termination_grace_period_is_not_nil()
 {
    // terminationGracePeriod bounds only the drain; graceful consolidation is blocked regardless.
    let dnd = |name: &str| rs_pod(name).annotate(DO_NOT_DISRUPT, "true");
    let plan = run(&snap(
        two_least([dnd("a"), dnd("b"), dnd("c")]),
        vec![kpool("p", vec![least()])],
    ));
    assert!(plan.commands.is_empty(), "{}", plan.render());
}

#[test]
fn does_not_consolidate_nodes_with_pods_with_blocking_pdbs_when_the_node_pool_s_termination_grace_period_is_not_nil()
 {
    let mut s = snap(two_least(plain_three()), vec![kpool("p", vec![least()])]);
    s.pdbs = vec![pdb("test", 0)];
    let plan = run(&s);
    assert!(plan.commands.is_empty(), "{}", plan.render());
}

#[test]
fn does_not_consolidate_nodes_with_pods_that_have_a_duration_based_do_not_disrupt_annotation_that_is_still_active()
 {
    let plan = run(&snap(
        two_least([
            rs_pod("a"),
            rs_pod("b"),
            rs_pod("c").annotate(DO_NOT_DISRUPT, "2m").started(NOW),
        ]),
        vec![kpool("p", vec![least()])],
    ));
    // n1 is protected for 2m; n0 goes in its place.
    assert_eq!(removed(&plan), names(&["n0"]), "{}", plan.render());
    assert_eq!(verdict(&plan, "n1").kind, VerdictKind::DoNotDisrupt);
}

#[test]
fn can_consolidate_nodes_after_duration_based_do_not_disrupt_annotation_expires() {
    let two_minutes = |name: &str| rs_pod(name).annotate(DO_NOT_DISRUPT, "2m").started(NOW);
    let s = snap(
        two_least([two_minutes("a"), two_minutes("b"), two_minutes("c")]),
        vec![kpool("p", vec![least()])],
    );
    assert!(run(&s).commands.is_empty());
    let later = plan_disruption(&s, &DisruptionState::default(), NOW + 180, &config());
    assert_eq!(later.commands.len(), 1, "{}", later.render());
}

#[test]
fn won_t_delete_node_if_it_would_require_pods_to_schedule_on_an_uninitialized_node() {
    let mut nodes = two_least(plain_three());
    nodes[0] = nodes[0].clone().initialized(false);
    let plan = run(&snap(nodes, vec![kpool("p", vec![least()])]));
    assert!(plan.commands.is_empty(), "{}", plan.render());
    let v = verdict(&plan, "n1");
    assert!(v.reason.contains("uninitialized"), "{}", v.reason);
}

/// Ten 3-cpu nodes with a 2-cpu pod each, only `n5` initialized, and a node `small` of a
/// cheaper type (too small for a 2-cpu pod) with `small_cpu` cpus and a 1-cpu pod, which fits the cpu left on any of them.
fn initialized_among_uninitialized(small_cpu: &str, small_mem: &str) -> DisruptionPlan {
    let default = itype("default-instance-type")
        .cpu("3")
        .mem("3Gi")
        .on_demand(&["z1"], 0.3)
        .build();
    let small = itype("small-instance-type")
        .cpu(small_cpu)
        .mem(small_mem)
        .on_demand(&["z1"], 0.1)
        .build();
    let mut nodes: Vec<NodeBuilder> = (0..10)
        .map(|i| {
            kn(&format!("n{i}"), &default, "p")
                .initialized(i == 5)
                .with_pod(rs_pod(&format!("p{i}")).cpu("2").mem("2Gi"))
        })
        .collect();
    nodes.push(kn("small", &small, "p").with_pod(rs_pod("s").cpu("1").mem("1Gi")));
    run(&snap(nodes, vec![kpool("p", vec![default, small])]))
}

/// The small node goes, its pod onto the one initialized node; no command fails for
/// scheduling against an uninitialized one.
fn assert_small_consolidated_onto_initialized(plan: &DisruptionPlan) {
    assert_eq!(removed(plan), names(&["small"]), "{}", plan.render());
    assert!(plan.commands[0].replacement.is_none());
    assert!(
        plan.verdicts
            .iter()
            .all(|v| !v.reason.contains("uninitialized node")),
        "{}",
        plan.render()
    );
}

/// Deliberate deviation (semantics.md, "Which nodes are candidates"): upstream's small node
/// (1 cpu) is full with its 1-cpu pod, and Karpenter deletes it onto the one initialized node.
/// Here a node goes only below its utilization threshold, or above it for right-sizing when a
/// type 20 % cheaper could hold its pods; neither holds, so it stays, and says why.
#[test]
fn should_consider_initialized_nodes_before_uninitialized_nodes() {
    let plan = initialized_among_uninitialized("1", "1Gi");
    assert!(plan.commands.is_empty(), "{}", plan.render());
    let small = plan
        .verdicts
        .iter()
        .find(|v| v.node == "small")
        .expect("a verdict for every node");
    assert_eq!(small.kind, VerdictKind::AboveThreshold, "{}", plan.render());
    assert!(
        small.reason.contains("at threshold 1.00"),
        "{}",
        small.reason
    );
}

/// Not an upstream `It()` of its own: the case above with a small node of 1.5 cpus, below its
/// utilization threshold, so that what it checks (pods go to the initialized node, not the
/// uninitialized ones) is not hidden by the threshold.
#[test]
fn should_consider_initialized_nodes_before_uninitialized_nodes_below_the_threshold() {
    assert_small_consolidated_onto_initialized(&initialized_among_uninitialized("1500m", "2Gi"));
}

#[test]
fn can_delete_nodes_while_an_invalid_node_pool_exists() {
    // A NodePool whose instance types cannot be fetched offers none.
    let plan = run(&snap(
        two_least(plain_three()),
        vec![kpool("bad-nodepool", vec![]), kpool("p", vec![least()])],
    ));
    assert_eq!(removed(&plan), names(&["n1"]), "{}", plan.render());
}

// ---------------------------------------------------------------------------------------------
// consolidation_test.go: TTL (the validation delay)
// ---------------------------------------------------------------------------------------------

#[test]
fn should_wait_for_the_node_ttl_for_non_empty_nodes_before_consolidating() {
    let s = snap(two_least(plain_three()), vec![kpool("p", vec![least()])]);
    let plan = run(&s);
    assert_eq!(plan.commands.len(), 1, "{}", plan.render());
    let cmd = &plan.commands[0];
    assert_eq!(cmd.nodes, vec!["n1".to_string()]);
    let mut during = s.clone();
    let early = validate(cmd, &mut during, NOW + 1, &config());
    assert!(early.is_err(), "acted before the validation delay");
    assert_eq!(validate_after_delay(cmd, &s), Ok(()));
}

/// One node of the dearest type holding a 1-cpu pod; replaced by a cheaper node of a catalog
/// where a 1500m type fits one such pod and not two.
fn replace_with_tiny() -> (Snapshot, Command) {
    let tiny = od("tiny.medium", "1500m", 0.1);
    let s = snap(
        vec![kn("n", &big(), "p").with_pod(rs_pod("a").cpu("1"))],
        vec![kpool("p", vec![tiny, cheap(), big()])],
    );
    let plan = run(&s);
    assert_eq!(plan.commands.len(), 1, "{}", plan.render());
    assert_eq!(plan.commands[0].method, Method::Replace);
    (s, plan.commands[0].clone())
}

#[test]
fn should_not_consolidate_if_the_action_picks_different_instance_types_after_the_node_ttl_wait() {
    let (s, cmd) = replace_with_tiny();
    assert!(replacement_types_of(&cmd).contains(&"tiny.medium".to_string()));
    // A second 1-cpu pod lands during the wait: the tiny type no longer holds both pods, so
    // the replacement the command would launch is no longer what scheduling says.
    let mut later = s;
    bind(&mut later, "n", rs_pod("b").cpu("1"));
    assert!(validate_after_delay(&cmd, &later).is_err());
}

/// Once the replacement launched first is up it is one of the cluster's nodes, and a new claim
/// the simulation makes is for pods that came while it booted: the command goes on when that
/// claim still costs less than the node it removes, as at the decision, without comparing the
/// replacement's types with the new claim's (which abandoned it, naming the replacement's
/// types, when the newcomer needed a larger type).
#[test]
fn once_the_replacement_is_up_its_types_are_not_compared_with_a_newcomers_node() {
    let (s, cmd) = replace_with_tiny();
    let up_at = cmd.decided_at + config().validation_delay_s + 60;
    let check = |c: Check, s: &Snapshot| validate_at(c, &cmd, &mut s.clone(), up_at, &config());
    let mut up = s;
    up.nodes
        .push(kn("r", &od("tiny.medium", "1500m", 0.1), "p").build());
    assert_eq!(check(Check::ReplacementUp, &up), Ok(()));
    // A 2-cpu pod came to n while r booted: it needs a cheap.large of its own, still far
    // cheaper than n.
    bind(&mut up, "n", rs_pod("b").cpu("2"));
    assert_eq!(check(Check::ReplacementUp, &up), Ok(()));
    let as_decided = check(Check::Decided, &up).unwrap_err();
    assert!(as_decided.contains("tiny.medium"), "{as_decided}");
    // One that needs a node as dear as n: the command no longer saves anything.
    bind(&mut up, "n", rs_pod("c").cpu("20"));
    assert!(check(Check::ReplacementUp, &up).is_err());
}

fn replacement_types_of(cmd: &Command) -> Vec<String> {
    cmd.replacement
        .iter()
        .flat_map(|r| r.instance_types.iter().map(|o| o.instance_type.to_string()))
        .collect()
}

#[test]
fn should_not_consolidate_if_the_action_becomes_invalid_during_the_node_ttl_wait() {
    let s = snap(vec![kn("n", &big(), "p")], vec![kpool("p", vec![big()])]);
    let plan = run(&s);
    assert_eq!(plan.commands.len(), 1, "{}", plan.render());
    let mut later = s;
    bind(
        &mut later,
        "n",
        rs_pod("a").annotate(DO_NOT_DISRUPT, "true"),
    );
    assert!(validate_after_delay(&plan.commands[0], &later).is_err());
}

#[test]
fn should_not_replace_node_if_a_pod_schedules_with_karpenter_sh_do_not_disrupt_set_to_true_during_the_ttl_wait()
 {
    let (s, cmd) = replace_with_tiny();
    let mut later = s;
    bind(&mut later, "n", pod("dnd").annotate(DO_NOT_DISRUPT, "true"));
    let err = validate_after_delay(&cmd, &later).unwrap_err();
    assert!(err.contains("do-not-disrupt"), "{err}");
}

#[test]
fn should_not_replace_node_if_a_pod_schedules_with_a_blocking_pdb_during_the_ttl_wait() {
    let (s, cmd) = replace_with_tiny();
    let mut later = s;
    bind(&mut later, "n", pod("guarded").label("guard", "yes"));
    later.pdbs = vec![pdb_in("default", "guard", "guard", "yes", 0)];
    let err = validate_after_delay(&cmd, &later).unwrap_err();
    assert!(err.contains("PDB"), "{err}");
}

/// Two nodes of the dearest type with a pod each: one is deleted, its pod onto the other.
fn two_big_one_pod_each() -> (Snapshot, DisruptionPlan) {
    let s = snap(
        vec![
            kn("n0", &big(), "p").with_pod(pod("a")),
            kn("n1", &big(), "p").with_pod(pod("b")),
        ],
        vec![kpool("p", vec![big()])],
    );
    let plan = run(&s);
    assert_eq!(removed(&plan).len(), 1, "{}", plan.render());
    (s, plan)
}

#[test]
fn should_not_delete_node_if_pods_schedule_with_karpenter_sh_do_not_disrupt_set_to_true_during_the_ttl_wait()
 {
    let (s, plan) = two_big_one_pod_each();
    let mut later = s;
    for n in ["n0", "n1"] {
        bind(
            &mut later,
            n,
            pod(&format!("dnd-{n}")).annotate(DO_NOT_DISRUPT, "true"),
        );
    }
    for cmd in &plan.commands {
        assert!(validate_after_delay(cmd, &later).is_err());
    }
}

#[test]
fn should_not_delete_node_if_pods_schedule_with_a_blocking_pdb_during_the_ttl_wait() {
    let (s, plan) = two_big_one_pod_each();
    let mut later = s;
    for n in ["n0", "n1"] {
        bind(&mut later, n, rs_pod(&format!("guarded-{n}")));
    }
    later.pdbs = vec![pdb("test", 0)];
    for cmd in &plan.commands {
        assert!(validate_after_delay(cmd, &later).is_err());
    }
}

// ---------------------------------------------------------------------------------------------
// consolidation_test.go: Multi-NodeClaim
// ---------------------------------------------------------------------------------------------

#[test]
fn can_merge_3_nodes_into_1_if_the_candidates_have_both_spot_and_on_demand() {
    // Five types of 32 cpus; the dearest also offered as spot. n0 and n1 run it on demand,
    // n2 as spot.
    let mut types: Vec<InstanceType> = (0..4)
        .map(|i| od(&format!("o{i}.large"), "32", 1.0 + i as f64))
        .collect();
    let most = itype("o4.large")
        .cpu("32")
        .mem("128Gi")
        .offer("z1", CapacityType::OnDemand, 5.0)
        .offer("z1", CapacityType::Spot, 4.5)
        .build();
    types.push(most.clone());
    let mut n2 = spot_node("n2", &most, "p").with_pod(rs_pod("c").cpu("1"));
    n2.0.price = Some(4.5);
    let od_node = |name: &str, p: &str| {
        let mut n = kn(name, &most, "p")
            .label(labels::CAPACITY_TYPE, "on-demand")
            .with_pod(rs_pod(p).cpu("1"));
        n.0.price = Some(5.0);
        n
    };
    let s = snap(
        vec![od_node("n0", "a"), od_node("n1", "b"), n2],
        vec![kpool("p", types)],
    );
    let plan = run(&s);
    // Our plan settles single nodes first (documented order), so the end state is compared:
    // the three nodes gone, one node in their place.
    assert_eq!(
        removed(&plan),
        names(&["n0", "n1", "n2"]),
        "{}",
        plan.render()
    );
    assert_eq!(replacement_types(&plan).len(), 1, "{}", plan.render());
}

#[test]
fn should_wait_for_the_node_ttl_for_non_empty_nodes_before_consolidating_multi_node() {
    for spot_nodes in [false, true] {
        let types = if spot_nodes {
            spot_catalog(20)
        } else {
            (0..5)
                .map(|i| od(&format!("o{i}.large"), "32", 1.0 + i as f64))
                .collect()
        };
        let most = types.last().unwrap().clone();
        let mk = |name: &str| {
            if spot_nodes {
                spot_node(name, &most, "p")
            } else {
                kn(name, &most, "p")
            }
        };
        let s = snap(
            vec![
                mk("n0")
                    .with_pod(rs_pod("a").cpu("1"))
                    .with_pod(rs_pod("b").cpu("1")),
                mk("n1").with_pod(rs_pod("c").cpu("1")),
            ],
            vec![kpool("p", types.clone())],
        );
        let plan = run(&s);
        // Both large nodes go, for one smaller node.
        assert_eq!(removed(&plan), names(&["n0", "n1"]), "{}", plan.render());
        assert_eq!(replacement_types(&plan).len(), 1, "{}", plan.render());
        for cmd in &plan.commands {
            let mut during = s.clone();
            assert!(validate(cmd, &mut during, NOW + 1, &config()).is_err());
            assert_eq!(validate_after_delay(cmd, &s), Ok(()));
        }
    }
}

// ---------------------------------------------------------------------------------------------
// consolidation_test.go: Preferences
// ---------------------------------------------------------------------------------------------

#[test]
fn should_consolidate_a_node_through_replacement_when_ignoring_preferences() {
    // Upstream runs with `--preference-policy=Ignore`, which the controller passes on as
    // `Snapshot::ignore_preferences`: the pod's preference for the dearest type is dropped,
    // so a cheaper node replaces it. Respected, the preference keeps the node.
    let pref = Requirements::new().with(labels::INSTANCE_TYPE, Operator::In, &["big.8xlarge"]);
    let mut s = snap(
        vec![kn("n", &big(), "p").with_pod(rs_pod("a").prefer(1, pref).cpu("1"))],
        vec![kpool("p", vec![cheap(), big()])],
    );
    assert!(run(&s).commands.is_empty(), "{}", run(&s).render());
    s.ignore_preferences();
    let plan = run(&s);
    assert_eq!(removed(&plan), names(&["n"]), "{}", plan.render());
    let offered = &replacement_types(&plan)[0];
    assert!(!offered.contains(&"big.8xlarge".to_string()), "{offered:?}");
}

#[test]
fn should_consolidate_a_node_through_deletion_when_ignoring_preferences() {
    // Three pods that prefer hostnames apart: two on n0, one on n1, both nodes of the
    // cheapest type. Respected (the default), the preference is held while the pod on n1 is
    // moved, so it would need a node of its own and n1 stays; ignored, it joins n0.
    let foo = |name: &str| {
        rs_pod(name)
            .cpu("1")
            .label("app", "foo")
            .prefer_anti_affinity(1, labels::HOSTNAME, "foo")
    };
    let mut s = snap(
        vec![
            kn("n0", &cheap(), "p")
                .with_pod(foo("a"))
                .with_pod(foo("b")),
            kn("n1", &cheap(), "p").with_pod(foo("c")),
        ],
        vec![kpool("p", vec![cheap()])],
    );
    let kept = run(&s);
    assert!(kept.commands.is_empty(), "{}", kept.render());
    s.ignore_preferences();
    let plan = run(&s);
    assert_eq!(removed(&plan), names(&["n1"]), "{}", plan.render());
    assert!(replacement_types(&plan).is_empty(), "{}", plan.render());
}

// ---------------------------------------------------------------------------------------------
// singlenodeconsolidation_test.go: Candidate Shuffling
// ---------------------------------------------------------------------------------------------

/// Nodes of types priced as given (outside any pool's catalog, so that none is replaced),
/// their pods each as listed, and an unmanaged node with 32 cpus of room: returns the node
/// single-node consolidation takes first.
fn first_by_savings(nodes: &[(f64, &[&str])]) -> BTreeSet<String> {
    let mut ns: Vec<NodeBuilder> = nodes
        .iter()
        .enumerate()
        .map(|(i, (price, pods))| {
            let t = od(&format!("t{i}.xlarge"), "32", *price);
            let mut n = kn(&format!("n{i}"), &t, "p");
            for (j, cpu) in pods.iter().enumerate() {
                n = n.with_pod(rs_pod(&format!("p{i}-{j}")).cpu(cpu));
            }
            n
        })
        .collect();
    ns.push(node("spare", &od("spare.8xlarge", "32", 1.0), "z1"));
    let plan = run(&snap(ns, vec![kpool("p", vec![])]));
    let gone = removed(&plan);
    assert_eq!(gone.len(), 1, "{}", plan.render());
    gone
}

#[test]
fn should_sort_candidates_by_savings_ratio_descending() {
    // One 20-cpu pod each; the spare node takes one. The dearest node saves the most.
    assert_eq!(
        first_by_savings(&[(1.0, &["20"]), (2.0, &["20"]), (3.0, &["20"])]),
        names(&["n2"])
    );
}

#[test]
fn should_sort_candidates_by_savings_ratio_with_different_disruption_costs() {
    // n1 is dearer but evicts two pods: 3.0 / 2 against n0's 2.0 / 1. Either node's pods fit
    // the spare node, not both.
    assert_eq!(
        first_by_savings(&[(2.0, &["20"]), (3.0, &["10", "10"])]),
        names(&["n0"])
    );
}

// ---------------------------------------------------------------------------------------------
// drift_test.go ("Drift" and "Budgets" contexts). Upstream sets the `Drifted` condition by hand;
// here the node records an older template hash than its NodePool's (static drift, detected by
// the core as the NodeClaim controller detects it upstream). Upstream's NodePool has
// `consolidateAfter: Never` and a 100 % budget, so nothing but drift acts.
// ---------------------------------------------------------------------------------------------

/// Upstream's drift NodePool: consolidation never acts, template hash `new`.
fn drift_pool(types: Vec<InstanceType>) -> PoolBuilder {
    kpool("p", types)
        .template_hash("new")
        .disruption(DisruptionPolicy {
            consolidate_after_s: i64::MAX,
            ..karpenter_policy()
        })
}

/// A node of `drift_pool` launched with its older template.
fn drifted_node(name: &str, it: &InstanceType) -> NodeBuilder {
    kn(name, it, "p").launched_with("old")
}

/// The drift commands of a plan, as (method, nodes).
fn drift_commands(plan: &DisruptionPlan) -> Vec<(Method, Vec<String>)> {
    plan.commands
        .iter()
        .filter(|c| c.reason == DisruptionReason::Drifted)
        .map(|c| (c.method, c.nodes.clone()))
        .collect()
}

#[test]
fn should_ignore_nodes_without_the_drifted_status_condition() {
    let s = snap(
        vec![
            kn("n", &big(), "p")
                .launched_with("new")
                .with_pod(rs_pod("a")),
        ],
        vec![drift_pool(vec![big(), cheap()])],
    );
    let plan = run(&s);
    assert!(plan.commands.is_empty(), "{}", plan.render());
    assert_ne!(verdict(&plan, "n").kind, VerdictKind::Drifted);
}

#[test]
fn should_ignore_nodes_with_the_karpenter_sh_do_not_disrupt_annotation() {
    let s = snap(
        vec![
            drifted_node("n", &big())
                .annotate(DO_NOT_DISRUPT, "true")
                .with_pod(rs_pod("a")),
        ],
        vec![drift_pool(vec![big(), cheap()])],
    );
    let plan = run(&s);
    assert!(plan.commands.is_empty(), "{}", plan.render());
    let v = verdict(&plan, "n");
    assert_eq!(v.kind, VerdictKind::DoNotDisrupt);
    assert!(v.reason.starts_with("drifted (NodePoolDrifted)"), "{v:?}");
}

#[test]
fn should_delete_drifted_nodes_with_the_karpenter_sh_do_not_disrupt_annotation_set_to_false() {
    let s = snap(
        vec![
            drifted_node("n1", &big())
                .annotate(DO_NOT_DISRUPT, "false")
                .with_pod(rs_pod("a")),
            kn("n2", &big(), "p").launched_with("new"),
        ],
        vec![drift_pool(vec![big()])],
    );
    let plan = run(&s);
    assert_eq!(
        drift_commands(&plan),
        [(Method::Delete, vec!["n1".to_string()])],
        "{}",
        plan.render()
    );
}

#[test]
fn should_not_create_replacements_for_drifted_nodes_that_have_pods_with_the_karpenter_sh_do_not_disrupt_annotation()
 {
    let s = snap(
        vec![drifted_node("n", &big()).with_pod(rs_pod("a").annotate(DO_NOT_DISRUPT, "true"))],
        vec![drift_pool(vec![big(), cheap()])],
    );
    let plan = run(&s);
    assert!(plan.commands.is_empty(), "{}", plan.render());
    let v = verdict(&plan, "n");
    assert_eq!(v.kind, VerdictKind::DoNotDisrupt);
    assert!(v.reason.starts_with("drifted (NodePoolDrifted)"), "{v:?}");
}

#[test]
fn should_not_create_replacements_for_drifted_nodes_that_have_pods_with_the_blocking_pdbs_when_the_nodepools_termination_grace_period_is_not_nil()
 {
    // No terminationGracePeriod in the model: a blocking PDB blocks drift as consolidation.
    let mut s = snap(
        vec![drifted_node("n", &big()).with_pod(rs_pod("a"))],
        vec![drift_pool(vec![big(), cheap()])],
    );
    s.pdbs = vec![pdb("test", 0)];
    let plan = run(&s);
    assert!(plan.commands.is_empty(), "{}", plan.render());
    let v = verdict(&plan, "n");
    assert_eq!(v.kind, VerdictKind::PdbBlocked);
    assert!(v.reason.starts_with("drifted (NodePoolDrifted)"), "{v:?}");
}

#[test]
fn should_replace_drifted_nodes() {
    let s = snap(
        vec![drifted_node("n", &big()).with_pod(rs_pod("a"))],
        vec![drift_pool(vec![big(), cheap()])],
    );
    let plan = run(&s);
    assert_eq!(
        drift_commands(&plan),
        [(Method::Replace, vec!["n".to_string()])],
        "{}",
        plan.render()
    );
    let v = verdict(&plan, "n");
    assert!(v.disrupted && v.kind == VerdictKind::Drifted, "{v:?}");
    // The command holds once the validation delay is over; no longer once the node matches
    // its NodePool again (the template was changed back).
    let cmd = &plan.commands[0];
    assert_eq!(validate_after_delay(cmd, &s), Ok(()));
    let mut back = s.clone();
    back.pools[0].template_hash = Some("old".into());
    let err = validate_after_delay(cmd, &back).unwrap_err();
    assert!(err.contains("no longer drifts"), "{err}");
}

/// Not upstream's (Karpenter launches a drift replacement again at once after one failed;
/// kubernetes-sigs/karpenter#3072 asks for a stop): after a failed deletion in the pool, drift
/// waits the delay after a failure, doubled per failure in a row, so a replacement that can
/// never come up (a broken image) is not launched again at every pass.
#[test]
fn drift_waits_after_failed_deletions_in_its_pool_longer_for_each() {
    let s = snap(
        vec![drifted_node("n", &big()).with_pod(rs_pod("a"))],
        vec![drift_pool(vec![big(), cheap()])],
    );
    let at = |state: &DisruptionState, now: i64| plan_disruption(&s, state, now, &config());
    let mut state = DisruptionState::default();
    state.failed("p", NOW - 60, true);
    let plan = at(&state, NOW);
    assert!(drift_commands(&plan).is_empty(), "{}", plan.render());
    let v = verdict(&plan, "n");
    assert_eq!(v.kind, VerdictKind::Paused, "{v:?}");
    assert!(
        v.reason
            .ends_with("drift in NodePool p is paused for 2m after a failed deletion"),
        "{v:?}"
    );
    // The delay after a failure (3m) is over: replaced.
    let plan = at(&state, NOW + 120);
    assert_eq!(drift_commands(&plan).len(), 1, "{}", plan.render());
    // That replacement failed too: 6m this time.
    state.failed("p", NOW + 400, true);
    assert!(drift_commands(&at(&state, NOW + 400 + 300)).is_empty());
    assert_eq!(drift_commands(&at(&state, NOW + 400 + 360)).len(), 1);
}

#[test]
fn should_delete_drifted_nodes() {
    let s = snap(
        vec![
            drifted_node("n1", &big()).with_pod(rs_pod("a")),
            kn("n2", &big(), "p").launched_with("new"),
        ],
        vec![drift_pool(vec![big(), cheap()])],
    );
    let plan = run(&s);
    assert_eq!(
        drift_commands(&plan),
        [(Method::Delete, vec!["n1".to_string()])],
        "{}",
        plan.render()
    );
}

#[test]
fn should_continue_to_the_next_drifted_node_if_the_first_cannot_reschedule_all_pods() {
    // n1's 150-cpu pod fits no type of the pool, and fills n1; n2 (second by age) has a
    // 1-cpu pod, replaced.
    let one = od("one.small", "1", 0.05);
    let s = snap(
        vec![
            drifted_node("n1", &od("huge.metal", "150", 9.0)).with_pod(rs_pod("big").cpu("150")),
            drifted_node("n2", &one)
                .created(1)
                .with_pod(rs_pod("small").cpu("1")),
        ],
        vec![drift_pool(vec![one.clone(), big()])],
    );
    let plan = run(&s);
    assert_eq!(
        drift_commands(&plan),
        [(Method::Replace, vec!["n2".to_string()])],
        "{}",
        plan.render()
    );
    assert_eq!(verdict(&plan, "n1").kind, VerdictKind::NoPlaceForPods);
}

#[test]
fn should_disrupt_3_nodes_taking_into_account_commands_in_progress() {
    // Ten nodes, a 30 % budget, the first five drifted with a pod each: one command per pass,
    // and the nodes chosen count against the budget as they are removed, so five passes
    // decide three.
    let mut nodes = Vec::new();
    for i in 0..10 {
        let n = if i < 5 {
            drifted_node(&format!("n{i}"), &big()).with_pod(rs_pod(&format!("p{i}")).cpu("1"))
        } else {
            kn(&format!("n{i}"), &big(), "p").launched_with("new")
        };
        nodes.push(n.created(i));
    }
    let mut s = snap(
        nodes,
        vec![drift_pool(vec![big()]).disruption(DisruptionPolicy {
            consolidate_after_s: i64::MAX,
            budgets: vec![budget(BudgetValue::Percent(30))],
            ..karpenter_policy()
        })],
    );
    let mut chosen = Vec::new();
    for _ in 0..5 {
        let plan = run(&s);
        let cmds = drift_commands(&plan);
        assert!(
            cmds.len() <= 1,
            "one drift command per pass: {}",
            plan.render()
        );
        for (_, nodes) in cmds {
            for n in nodes {
                s.nodes.iter_mut().find(|x| x.name == n).unwrap().deleting = true;
                chosen.push(n);
            }
        }
    }
    assert_eq!(chosen, ["n0", "n1", "n2"]);
}

#[test]
fn drift_budgets_of_zero_nodes_for_the_drifted_reason_block_drift() {
    // Ours: a budget limited to `Drifted` (as upstream's "should not consider empty nodes for
    // drift budgets" sets one) of 0 nodes keeps every drifted node.
    let s = snap(
        vec![drifted_node("n", &big()).with_pod(rs_pod("a"))],
        vec![
            drift_pool(vec![big(), cheap()]).disruption(DisruptionPolicy {
                consolidate_after_s: i64::MAX,
                budgets: vec![Budget {
                    nodes: BudgetValue::Count(0),
                    reasons: vec![DisruptionReason::Drifted],
                    schedule: None,
                }],
                ..karpenter_policy()
            }),
        ],
    );
    let plan = run(&s);
    assert!(plan.commands.is_empty(), "{}", plan.render());
    let v = verdict(&plan, "n");
    assert_eq!(v.kind, VerdictKind::BudgetExhausted);
    assert!(v.reason.contains("Drifted"), "{v:?}");
}

#[test]
fn empty_drifted_nodes_are_deleted_where_consolidation_never_acts() {
    // Ours, where upstream's drift skips empty nodes for emptiness to take (and emptiness never
    // acts under `consolidateAfter: Never`, so upstream keeps the node for good).
    let s = snap(
        vec![drifted_node("n", &big())],
        vec![drift_pool(vec![big()])],
    );
    let plan = run(&s);
    assert_eq!(
        drift_commands(&plan),
        [(Method::Delete, vec!["n".to_string()])],
        "{}",
        plan.render()
    );
    assert!(plan.commands[0].pods.is_empty());
}

#[test]
fn an_empty_drifted_node_min_nodes_holds_is_replaced_first_by_the_pools_cheapest_node() {
    // Ours: deleting it would take the pool below minNodes, so it would stay drifted for good
    // (warm capacity is empty nodes at minNodes). It is replaced, as Karpenter's static
    // NodePools replace drifted nodes one for one, by the claim a plan bringing the pool up
    // to minNodes opens: every type, cheapest first, no pod.
    // The replacement of node `n`, the plan's one drift command.
    let replaced = |s: &Snapshot| {
        let plan = run(s);
        assert_eq!(
            drift_commands(&plan),
            [(Method::Replace, vec!["n".to_string()])],
            "{}",
            plan.render()
        );
        plan.commands[0].clone()
    };
    let s = snap(
        vec![drifted_node("n", &big())],
        vec![drift_pool(vec![big(), cheap()]).min_nodes(1)],
    );
    let cmd = replaced(&s);
    let r = cmd.replacement.as_ref().unwrap();
    assert_eq!(r.pool, "p");
    assert!(r.pods.is_empty());
    let types: Vec<&str> = r.instance_types.iter().map(|o| &*o.instance_type).collect();
    assert_eq!(types, ["cheap.large", "big.8xlarge"]);
    // With a pod that fits on another node of the pool, minNodes still holds the node: it is
    // replaced first by the pool's cheapest node, and its pod moves.
    let busy = snap(
        vec![
            drifted_node("n", &big()).with_pod(rs_pod("a")),
            kn("m", &big(), "p").launched_with("new"),
        ],
        vec![drift_pool(vec![big(), cheap()]).min_nodes(2)],
    );
    let cmd = replaced(&busy);
    let r = cmd.replacement.as_ref().unwrap();
    assert!(r.pods.is_empty(), "{r:?}");
    assert_eq!(r.instance_types[0].instance_type.as_ref(), "cheap.large");
    assert_eq!(cmd.pods.len(), 1);
    // A second node keeps the pool at its minimum: the drifted one is deleted, as before.
    let two = snap(
        vec![
            drifted_node("n", &big()),
            kn("m", &cheap(), "p").launched_with("new"),
        ],
        vec![drift_pool(vec![big(), cheap()]).min_nodes(1)],
    );
    let plan = run(&two);
    assert_eq!(
        drift_commands(&plan),
        [(Method::Delete, vec!["n".to_string()])],
        "{}",
        plan.render()
    );
}

#[test]
fn nodes_whose_capacity_type_the_pool_no_longer_allows_are_drifted_by_requirements() {
    // The pool moved to on-demand only after the node was launched spot: its pods go to an
    // on-demand replacement.
    let both = itype("m.large")
        .cpu("4")
        .mem("16Gi")
        .on_demand(&["z1"], 0.4)
        .offer("z1", CapacityType::Spot, 0.1)
        .build();
    let s = snap(
        vec![spot_node("n", &both, "p").with_pod(rs_pod("a"))],
        vec![drift_pool(vec![both.clone()]).require(
            labels::CAPACITY_TYPE,
            autoscaler_core::requirements::Operator::In,
            &["on-demand"],
        )],
    );
    let plan = run(&s);
    assert_eq!(
        drift_commands(&plan),
        [(Method::Replace, vec!["n".to_string()])],
        "{}",
        plan.render()
    );
    assert!(
        verdict(&plan, "n")
            .reason
            .starts_with("drifted (RequirementsDrifted)")
    );
    let r = plan.commands[0].replacement.as_ref().unwrap();
    assert!(
        r.instance_types
            .iter()
            .all(|o| o.offerings.iter().all(|x| x.1 == CapacityType::OnDemand)),
        "{r:?}"
    );
}
