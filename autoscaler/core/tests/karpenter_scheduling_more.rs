//! More of Karpenter's provisioning cases, the ones `karpenter_scheduling.rs`,
//! `karpenter_selection.rs` and `karpenter_topology.rs` had not rebuilt yet
//! (`pkg/controllers/provisioning/scheduling/suite_test.go` and
//! `pkg/controllers/provisioning/suite_test.go`): restricted and Gte/Lte-style requirements,
//! host ports between pending pods, an initialized node under not-ready taints, NodeOverlay
//! capacity standing in for offering overrides, `--preference-policy=Ignore` on node affinity,
//! soft spreads and pod affinity, and `minValues` under the Strict and BestEffort policies.
//!
//! Each test is named after the upstream `It(...)` it follows (the few controls that are not
//! upstream cases say so). The scenarios are written
//! here from what each case describes, on a small catalog shaped like Karpenter's fake cloud
//! provider, and they check the counts and placements upstream checks. Where this project's
//! documented rules differ, the test checks our behaviour and a comment names the rule.

use std::collections::BTreeSet;

use autoscaler_core::builders::*;
use autoscaler_core::instance::{CapacityType, InstanceType};
use autoscaler_core::labels;
use autoscaler_core::model::{MinValuesPolicy, Node};
use autoscaler_core::overlay::{Overlay, apply_overlays};
use autoscaler_core::plan::{NewClaim, Plan};
use autoscaler_core::quantity::Quantity;
use autoscaler_core::requirements::{Operator, Requirements};
use autoscaler_core::resources::Resources;
use autoscaler_core::taints::{Effect, Taint};

mod support;
use support::provisioning::{claim_of, plan, run, scheduled, snapshot, target, type_names};

use Operator::{Gt, In, Lt};

const Z: [&str; 3] = ["test-zone-1", "test-zone-2", "test-zone-3"];
const ZONE: &str = labels::ZONE;
const HOST: &str = labels::HOSTNAME;
const IT: &str = labels::INSTANCE_TYPE;
/// The fake provider's integer label: the type's cpu count.
const INTEGER: &str = "integer";
const VENDOR_A: &str = "fake.com/vendor-a";
const SLOTS: &str = "test.com/extended-slots";

// ------------------------------------------------------------------ catalog

/// A type priced as the fake provider prices: 0.1 per cpu, 0.1 per GB of memory, 1.0 per
/// device; 100m and 10Mi kept back; spot in the first two zones, on demand in all three.
fn fake(name: &str, cpu: i64, mem_gi: i64, max_pods: i64, device: Option<&str>) -> TypeBuilder {
    let gb = (mem_gi << 30) as f64 / 1e9;
    let mut price = 0.1 * cpu as f64 + 0.1 * gb;
    let mut b = itype(name)
        .cpu(&cpu.to_string())
        .mem(&format!("{mem_gi}Gi"))
        .max_pods(max_pods)
        .overhead("100m", "10Mi")
        .label(INTEGER, &cpu.to_string());
    if let Some(d) = device {
        b = b.res(d, "2");
        price += 1.0;
    }
    b.offer(Z[0], CapacityType::Spot, price)
        .offer(Z[1], CapacityType::Spot, price)
        .on_demand(&Z, price)
}

fn arm64(b: TypeBuilder) -> InstanceType {
    let mut t = b.label(labels::ARCH, "arm64").build();
    t.arch = "arm64".into();
    t
}

/// The fake provider's default catalog, as far as these cases need it.
fn catalog() -> Vec<InstanceType> {
    vec![
        fake("default-instance-type", 4, 4, 5, None).build(),
        fake("small-instance-type", 2, 2, 5, None).build(),
        fake("gpu-vendor-instance-type", 4, 4, 5, Some(VENDOR_A)).build(),
        arm64(fake("arm-instance-type", 16, 128, 5, None)),
        fake("single-pod-instance-type", 4, 4, 1, None).build(),
    ]
}

fn np() -> PoolBuilder {
    pool("default", catalog())
}

fn req(key: &str, op: Operator, values: &[&str]) -> Requirements {
    Requirements::new().with(key, op, values)
}

// ------------------------------------------------------------------ planning and reading

/// The same cluster planned as under `--preference-policy=ignore`.
fn plan_ignoring_preferences(pools: Vec<PoolBuilder>, pods: Vec<PodBuilder>) -> Plan {
    let mut s = snapshot(pools, pods);
    s.ignore_preferences();
    run(&s)
}

/// The zones a claim may launch in (over all its acceptable offerings).
fn claim_zones(c: &NewClaim) -> BTreeSet<String> {
    c.instance_types
        .iter()
        .flat_map(|o| o.offerings.iter().map(|(z, _, _)| z.to_string()))
        .collect()
}

/// The value every acceptable type of pod `name`'s claim has for the type label `key`.
fn claim_label(plan: &Plan, types: &[InstanceType], name: &str, key: &str) -> String {
    let c = claim_of(plan, name);
    let values: BTreeSet<String> = type_names(c)
        .iter()
        .map(|t| {
            let it = types.iter().find(|x| x.name == *t).unwrap();
            it.labels.get(key).cloned().unwrap_or_default()
        })
        .collect();
    assert_eq!(values.len(), 1, "{key} differs between {:?}", type_names(c));
    values.into_iter().next().unwrap()
}

fn distinct_targets(plan: &Plan, names: &[String]) -> usize {
    names
        .iter()
        .map(|n| target(plan, n).unwrap_or_else(|| panic!("{n} not placed")))
        .collect::<BTreeSet<_>>()
        .len()
}

fn names(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}-{i}")).collect()
}

fn quantity(r: &mut Resources, name: &str, q: &str) {
    r.add_quantity(name, Quantity::parse(q).unwrap()).unwrap();
}

// ================================================================ Constraints Validation

#[test]
fn should_not_schedule_pods_that_have_node_selectors_with_restricted_labels() {
    // Karpenter restricts one label: the hostname. A required In on it names a node that
    // does not exist, and a new node cannot be given that name.
    let p = plan(vec![np()], vec![pod("p").require(HOST, In, &["test"])]);
    assert!(!scheduled(&p, "p"), "{}", p.render());
    assert!(p.new_claims.is_empty());
}

// ================================================================ Well Known Labels

#[test]
fn should_schedule_compatible_requirements_with_operator_gte() {
    // Gte is a Karpenter-only operator with no Kubernetes spelling; our NodePool requirements
    // take Kubernetes' operators only, so "Gte 16" on an integer label is written "Gt 15".
    let types = catalog();
    let p = plan(vec![np().require(INTEGER, Gt, &["15"])], vec![pod("p")]);
    assert_eq!(claim_label(&p, &types, "p", INTEGER), "16");
    // Gt is strict: "Gt 16" leaves no type of the catalog, so the bound is not inclusive.
    let p = plan(vec![np().require(INTEGER, Gt, &["16"])], vec![pod("p")]);
    assert!(!scheduled(&p, "p"), "{}", p.render());
}

#[test]
fn should_schedule_compatible_requirements_with_operator_lte() {
    // "Lte 2" written "Lt 3" (see the Gte case).
    let types = catalog();
    let p = plan(vec![np().require(INTEGER, Lt, &["3"])], vec![pod("p")]);
    assert_eq!(claim_label(&p, &types, "p", INTEGER), "2");
    assert_eq!(type_names(claim_of(&p, "p")), vec!["small-instance-type"]);
    // "Lt 2" leaves nothing: no type has fewer than two cpus.
    let p = plan(vec![np().require(INTEGER, Lt, &["2"])], vec![pod("p")]);
    assert!(!scheduled(&p, "p"), "{}", p.render());
}

// ================================================================ In-Flight Nodes

#[test]
fn should_consider_a_tainted_notready_node_as_in_flight_even_if_initialized() {
    // Round one: a 10m pod gets a new node.
    let pools = vec![np()];
    let first = snapshot(pools.clone(), vec![pod("first").cpu("10m")]);
    let p1 = run(&first);
    assert_eq!(p1.new_claims.len(), 1, "{}", p1.render());
    let c = &p1.new_claims[0];
    let mut n: Node = support::launch(&first, c, "node-1", vec![first.pending[0].clone()]);
    // The node is initialized, but the node lifecycle controller and the cloud controller
    // manager taint it for a moment: not ready, unreachable, not yet initialized by the cloud.
    assert!(n.initialized);
    n.taints = vec![
        Taint::new("node.kubernetes.io/not-ready", "", Effect::NoSchedule),
        Taint::new("node.kubernetes.io/unreachable", "", Effect::NoSchedule),
        Taint::new(
            "node.cloudprovider.kubernetes.io/uninitialized",
            "true",
            Effect::NoSchedule,
        ),
    ];
    // Round two: a second 10m pod lands on that node, no second node is launched.
    let mut second = snapshot(pools, vec![pod("second").cpu("10m")]);
    second.nodes = vec![n];
    let p2 = run(&second);
    assert!(p2.new_claims.is_empty(), "{}", p2.render());
    assert_eq!(target(&p2, "second").as_deref(), Some("node-1"));
}

#[test]
fn should_schedule_pods_with_the_same_host_port_to_different_nodes() {
    let p = plan(
        vec![np()],
        vec![pod("a").host_port(8080), pod("b").host_port(8080)],
    );
    assert!(scheduled(&p, "a") && scheduled(&p, "b"), "{}", p.render());
    assert_ne!(target(&p, "a"), target(&p, "b"));
    assert_eq!(p.new_claims.len(), 2);
}

#[test]
fn pods_with_different_host_ports_share_a_node() {
    // Not an upstream case by itself: the control for the one above, so that it is the port
    // that keeps the two apart.
    let p = plan(
        vec![np()],
        vec![pod("a").host_port(8080), pod("b").host_port(8081)],
    );
    assert_eq!(target(&p, "a"), target(&p, "b"), "{}", p.render());
    assert_eq!(p.new_claims.len(), 1);
}

// ================================================================ Offering Overrides

/// Two types alike but for their name.
fn override_types() -> Vec<InstanceType> {
    vec![
        fake("override-capable", 4, 8, 110, None).build(),
        fake("normal", 4, 8, 110, None).build(),
    ]
}

/// A capacity overlay adding four slots to the offerings `requirements` select.
fn slots_overlay(requirements: Requirements) -> Overlay {
    let mut capacity = Resources::new();
    quantity(&mut capacity, SLOTS, "4");
    Overlay {
        name: "slots".into(),
        weight: 0,
        requirements,
        price: None,
        capacity,
    }
}

#[test]
fn should_only_select_instance_types_whose_offerings_have_capacityoverride_when_pod_requests_an_override_resource()
 {
    // Karpenter's capacity override comes from a NodeOverlay; ours is the same object.
    let types = apply_overlays(
        &override_types(),
        &[slots_overlay(req(IT, In, &["override-capable"]))],
    );
    let p = plan(vec![pool("default", types)], vec![pod("p").res(SLOTS, "1")]);
    assert_eq!(p.new_claims.len(), 1, "{}", p.render());
    let names = type_names(&p.new_claims[0]);
    assert!(names.contains(&"override-capable"), "{names:?}");
    assert!(!names.contains(&"normal"), "{names:?}");
}

#[test]
fn should_reject_instance_type_when_override_allocatable_fits_but_override_offerings_are_unavailable()
 {
    // Every offering of the type unavailable: nothing is launched, whatever the overlay adds.
    let gone = vec![
        fake("override-capable", 4, 8, 110, None)
            .unavailable_in(Z[0])
            .unavailable_in(Z[1])
            .unavailable_in(Z[2])
            .build(),
    ];
    let types = apply_overlays(&gone, &[slots_overlay(Requirements::new())]);
    let p = plan(vec![pool("default", types)], vec![pod("p").res(SLOTS, "1")]);
    assert!(p.new_claims.is_empty(), "{}", p.render());
    assert!(!scheduled(&p, "p"));

    // Documented deviation (docs/src/reference/nodeoverlay.md, "How overlays combine": the
    // first overlay that names a resource "and selects some offering of the type decides its
    // amount"): capacity belongs to the type, not to the offerings that carry the override.
    // An overlay that selects only the type's unavailable zone-2 offerings still gives the
    // type the slots, and the pod gets a node in a zone that is available; Karpenter, whose
    // override lives on the unavailable offerings alone, launches nothing. The unavailable
    // offerings themselves are never used.
    let partly = vec![
        fake("override-capable", 4, 8, 110, None)
            .unavailable_in(Z[1])
            .build(),
    ];
    let types = apply_overlays(&partly, &[slots_overlay(req(ZONE, In, &[Z[1]]))]);
    let p = plan(vec![pool("default", types)], vec![pod("p").res(SLOTS, "1")]);
    assert_eq!(p.new_claims.len(), 1, "{}", p.render());
    let zones = claim_zones(&p.new_claims[0]);
    assert!(!zones.contains(Z[1]), "{zones:?}");
}

// ================================================================ Ignore Preferences

/// A 2-cpu pod held to zone 1, two 3-cpu `app=bar` pods held to zone 2, and `last`, a 1-cpu
/// pod. Each zone-2 pod fills a 4-cpu node; the 1-cpu pod fits beside the zone-1 pod only.
fn three_pods_and(last: PodBuilder) -> Vec<PodBuilder> {
    vec![
        pod("zone1").label("app", "foo").cpu("2").select(ZONE, Z[0]),
        pod("zone2-0")
            .label("app", "bar")
            .cpu("3")
            .select(ZONE, Z[1]),
        pod("zone2-1")
            .label("app", "bar")
            .cpu("3")
            .select(ZONE, Z[1]),
        last,
    ]
}

#[test]
fn should_ignore_node_affinity_preferences() {
    let last = pod("affine")
        .label("app", "baz")
        .cpu("1")
        .prefer(1, req(ZONE, In, &[Z[1]]));
    let p = plan_ignoring_preferences(vec![np()], three_pods_and(last));
    assert!(p.unschedulable.is_empty(), "{}", p.render());
    assert_eq!(target(&p, "affine"), target(&p, "zone1"), "{}", p.render());
    assert_ne!(target(&p, "affine"), target(&p, "zone2-0"));
    assert_ne!(target(&p, "affine"), target(&p, "zone2-1"));
}

#[test]
fn node_affinity_preferences_are_respected_without_the_ignore_policy() {
    // Not an upstream case by itself: the cluster of "should ignore node affinity
    // preferences" under the default policy (Respect), the contrast upstream's comment draws.
    // Karpenter's scheduler holds the heaviest preferred term as required
    // (`scheduling.NewPodRequirements`) against existing nodes, the NodeClaims of the batch
    // and new ones alike, and relaxes it only when the pod fits nowhere; zone 2 can have a new
    // node, so the pod gets one there (neither zone-2 node has room for it) rather than the
    // room beside the zone-1 pod.
    let last = pod("affine")
        .label("app", "baz")
        .cpu("1")
        .prefer(1, req(ZONE, In, &[Z[1]]));
    let p = plan(vec![np()], three_pods_and(last));
    assert!(p.unschedulable.is_empty(), "{}", p.render());
    assert_ne!(target(&p, "affine"), target(&p, "zone1"), "{}", p.render());
    let c = claim_of(&p, "affine");
    assert_eq!(
        claim_zones(c),
        BTreeSet::from([Z[1].to_string()]),
        "{}",
        p.render()
    );
}

#[test]
fn a_node_affinity_preference_is_held_against_existing_and_in_flight_capacity() {
    // Not an upstream case by itself: the same rule as the case above, against room on an
    // existing node and on a claim in flight in zone 1. Karpenter checks both with the
    // preference held as required (`ExistingNode.CanAdd` with the pod's `Requirements`), so a
    // pod preferring zone 2 gets a new node there while zone 2 can have one.
    let t = catalog()
        .into_iter()
        .find(|t| t.name == "default-instance-type")
        .unwrap();
    let affine = || pod("affine").cpu("1").prefer(1, req(ZONE, In, &[Z[1]]));

    let mut s = snapshot(vec![np()], vec![affine()]);
    s.nodes = vec![node("n1", &t, Z[0]).pool("default").build()];
    let p = run(&s);
    assert!(p.existing.is_empty(), "existing node: {}", p.render());
    assert_eq!(
        claim_zones(claim_of(&p, "affine")),
        BTreeSet::from([Z[1].to_string()])
    );

    let mut s = snapshot(vec![np()], vec![affine()]);
    s.in_flight = vec![autoscaler_core::model::InFlightClaim {
        name: "c1".into(),
        pool: "default".into(),
        instance_types: vec![t.name.clone()],
        requirements: req(ZONE, In, &[Z[0]]).with(labels::CAPACITY_TYPE, In, &["on-demand"]),
        pods: vec![],
        created_at: 0,
    }];
    let p = run(&s);
    assert!(p.in_flight.is_empty(), "in-flight claim: {}", p.render());
    assert_eq!(
        claim_zones(claim_of(&p, "affine")),
        BTreeSet::from([Z[1].to_string()])
    );
}

/// Five `app=foo` pods with a `ScheduleAnyway` spread of skew 1 over `key`.
fn soft_spread_pods(key: &str) -> Vec<PodBuilder> {
    (0..5)
        .map(|i| {
            pod(&format!("foo-{i}"))
                .label("app", "foo")
                .spread(key, 1, "foo")
                .schedule_anyway()
        })
        .collect()
}

#[test]
fn should_ignore_topologyspreadconstraint_preferences_zone() {
    let p = plan_ignoring_preferences(vec![np()], soft_spread_pods(ZONE));
    assert!(p.unschedulable.is_empty(), "{}", p.render());
    assert_eq!(distinct_targets(&p, &names("foo", 5)), 1, "{}", p.render());
    // Respected, the spread is held while it can be: the pods take all three zones.
    let p = plan(vec![np()], soft_spread_pods(ZONE));
    assert!(p.unschedulable.is_empty(), "{}", p.render());
    let zones: BTreeSet<String> = p.new_claims.iter().flat_map(claim_zones).collect();
    assert_eq!(zones.len(), 3, "{}", p.render());
    assert!(p.new_claims.len() >= 3, "{}", p.render());
}

#[test]
fn should_ignore_topologyspreadconstraint_preferences_hostname() {
    let p = plan_ignoring_preferences(vec![np()], soft_spread_pods(HOST));
    assert!(p.unschedulable.is_empty(), "{}", p.render());
    assert_eq!(distinct_targets(&p, &names("foo", 5)), 1, "{}", p.render());
}

#[test]
fn should_ignore_pod_affinity_preferences_zone() {
    let last = pod("affine")
        .label("app", "baz")
        .cpu("1")
        .prefer_affinity(1, ZONE, "bar");
    let p = plan_ignoring_preferences(vec![np()], three_pods_and(last));
    assert!(p.unschedulable.is_empty(), "{}", p.render());
    assert_eq!(target(&p, "affine"), target(&p, "zone1"), "{}", p.render());
    assert_ne!(target(&p, "affine"), target(&p, "zone2-0"));
}

#[test]
fn should_ignore_pod_affinity_preferences_hostname() {
    let last = pod("affine")
        .label("app", "baz")
        .cpu("1")
        .prefer_affinity(1, HOST, "bar");
    let p = plan_ignoring_preferences(vec![np()], three_pods_and(last));
    assert!(p.unschedulable.is_empty(), "{}", p.render());
    assert_eq!(target(&p, "affine"), target(&p, "zone1"), "{}", p.render());
    assert_ne!(target(&p, "affine"), target(&p, "zone2-0"));
}

// ================================================================ MinValuesPolicy

/// An arm64 type of 4 cpus and 4Gi offered once, as spot in `zone` at 0.52.
fn lone_spot(name: &str, zone: &str) -> InstanceType {
    arm64(
        itype(name)
            .cpu("4")
            .mem("4Gi")
            .overhead("100m", "10Mi")
            .offer(zone, CapacityType::Spot, 0.52),
    )
}

fn two_lone_types() -> Vec<InstanceType> {
    vec![
        lone_spot("instance-type-1", "test-zone-1-spot"),
        lone_spot("instance-type-2", "test-zone-2-spot"),
    ]
}

/// A pool allowing three instance types and wanting all three (`minValues: 3`).
fn three_types_pool(name: &str, weight: i32, types: Vec<InstanceType>) -> PoolBuilder {
    pool(name, types)
        .weight(weight)
        .require(
            IT,
            In,
            &["instance-type-1", "instance-type-2", "instance-type-3"],
        )
        .min_values(IT, 3)
}

fn small_pod() -> PodBuilder {
    pod("p").cpu("900m").mem("900Mi")
}

#[test]
fn should_not_schedule_when_minvalues_requirement_is_not_met() {
    // MinValuesPolicy Strict (Karpenter's default, and ours): two types where the pool wants
    // three.
    let p = plan(
        vec![three_types_pool("default", 100, two_lone_types())],
        vec![small_pod()],
    );
    assert!(!scheduled(&p, "p"), "{}", p.render());
    assert!(p.new_claims.is_empty());
}

#[test]
fn should_not_schedule_when_zone_minvalues_requirement_is_not_met() {
    let t = arm64(
        itype("instance-type-1")
            .cpu("4")
            .mem("4Gi")
            .overhead("100m", "10Mi")
            .offer(Z[0], CapacityType::Spot, 0.52)
            .offer(Z[1], CapacityType::Spot, 0.54),
    );
    let p = plan(
        vec![
            pool("default", vec![t])
                .require(ZONE, In, &Z)
                .min_values(ZONE, 3),
        ],
        vec![small_pod()],
    );
    assert!(!scheduled(&p, "p"), "{}", p.render());
    assert!(p.new_claims.is_empty());
}

#[test]
fn should_relax_minvalues_before_falling_back_to_other_nodepools() {
    // Upstream runs this under MinValuesPolicy BestEffort (its twin below). Under the default
    // Strict policy `minValues` is a hard rule (autoscaler/core/src/provision.rs, "A pool's
    // minValues ... is a hard rule": a claim that cannot meet it is not opened), so the pod
    // falls back to the lighter pool that has no minValues.
    let fallback = pool("fallback", two_lone_types()).weight(10).require(
        IT,
        In,
        &["instance-type-1", "instance-type-2", "instance-type-3"],
    );
    let p = plan(
        vec![three_types_pool("default", 100, two_lone_types()), fallback],
        vec![small_pod()],
    );
    let c = claim_of(&p, "p");
    assert_eq!(c.pool, "fallback", "{}", p.render());
    assert_eq!(&*c.instance_types[0].instance_type, "instance-type-1");
}

#[test]
fn should_choose_nodepool_with_higher_weight_when_relaxing_minvalues() {
    // Upstream (BestEffort, the twin below) relaxes the heavier of two pools that both want
    // three types. Under Strict (see the case above) neither pool can open the claim.
    let p = plan(
        vec![
            three_types_pool("default", 100, two_lone_types()),
            three_types_pool("lower", 10, two_lone_types()),
        ],
        vec![small_pod()],
    );
    assert!(!scheduled(&p, "p"), "{}", p.render());
    assert!(p.new_claims.is_empty());
}

// ------------------------------------------------- MinValuesPolicy BestEffort

/// [`plan`] under `--min-values-policy=BestEffort`.
fn plan_best_effort(pools: Vec<PoolBuilder>, pods: Vec<PodBuilder>) -> Plan {
    let mut s = snapshot(pools, pods);
    s.min_values_policy = MinValuesPolicy::BestEffort;
    run(&s)
}

/// The relaxed `minValues` of claim `c`, as `(key, n)` pairs.
fn relaxed(c: &NewClaim) -> Vec<(&str, u32)> {
    c.min_values_relaxed
        .iter()
        .map(|(k, n)| (k.as_str(), *n))
        .collect()
}

/// A pool asking for all three zones (`minValues: 3`) of one type offered in two.
fn two_zone_type() -> InstanceType {
    arm64(
        itype("instance-type-1")
            .cpu("4")
            .mem("4Gi")
            .overhead("100m", "10Mi")
            .offer(Z[0], CapacityType::Spot, 0.52)
            .offer(Z[1], CapacityType::Spot, 0.54),
    )
}

#[test]
fn should_schedule_even_when_minvalues_requirement_is_not_met() {
    let p = plan_best_effort(
        vec![three_types_pool("default", 100, two_lone_types())],
        vec![small_pod()],
    );
    let c = claim_of(&p, "p");
    assert_eq!(type_names(c), ["instance-type-1", "instance-type-2"]);
    // Upstream's NodeClaim: instance-type In [instance-type-1, instance-type-2], minValues 2.
    assert_eq!(relaxed(c), [(IT, 2)], "{}", p.render());
}

#[test]
fn should_relax_minvalues_before_falling_back_to_other_nodepools_best_effort() {
    let fallback = pool("fallback", two_lone_types()).weight(10).require(
        IT,
        In,
        &["instance-type-1", "instance-type-2", "instance-type-3"],
    );
    let p = plan_best_effort(
        vec![three_types_pool("default", 100, two_lone_types()), fallback],
        vec![small_pod()],
    );
    let c = claim_of(&p, "p");
    assert_eq!(c.pool, "default", "{}", p.render());
    assert_eq!(&*c.instance_types[0].instance_type, "instance-type-1");
    assert_eq!(relaxed(c), [(IT, 2)]);
}

#[test]
fn should_choose_nodepool_with_higher_weight_when_relaxing_minvalues_best_effort() {
    let p = plan_best_effort(
        vec![
            three_types_pool("lower", 10, two_lone_types()),
            three_types_pool("default", 100, two_lone_types()),
        ],
        vec![small_pod()],
    );
    let c = claim_of(&p, "p");
    assert_eq!(c.pool, "default", "{}", p.render());
    assert_eq!(&*c.instance_types[0].instance_type, "instance-type-1");
    assert_eq!(relaxed(c), [(IT, 2)]);
}

#[test]
fn should_schedule_even_when_zone_minvalues_requirement_is_not_met() {
    let p = plan_best_effort(
        vec![
            pool("default", vec![two_zone_type()])
                .require(ZONE, In, &Z)
                .min_values(ZONE, 3),
        ],
        vec![small_pod()],
    );
    let c = claim_of(&p, "p");
    assert_eq!(type_names(c), ["instance-type-1"]);
    // The zone requirement keeps its three values and asks for two of them.
    assert_eq!(relaxed(c), [(ZONE, 2)], "{}", p.render());
}

#[test]
fn should_schedule_when_minvalues_requirement_is_not_met() {
    // Instance type and zone both wanted three times: upstream's NodeClaim asks for
    // instance-type-1 with minValues 1 and two zones.
    let p = plan_best_effort(
        vec![
            three_types_pool("default", 100, vec![two_zone_type()])
                .require(ZONE, In, &Z)
                .min_values(ZONE, 3),
        ],
        vec![small_pod()],
    );
    let c = claim_of(&p, "p");
    assert_eq!(type_names(c), ["instance-type-1"]);
    assert_eq!(relaxed(c), [(IT, 1), (ZONE, 2)], "{}", p.render());
}
