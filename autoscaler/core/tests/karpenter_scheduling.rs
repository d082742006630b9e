//! Karpenter's scheduling suites (`pkg/controllers/provisioning/scheduling/suite_test.go`,
//! `instance_selection_test.go` and `pkg/controllers/provisioning/suite_test.go`), apart from
//! topology (see `karpenter_topology.rs`) and volumes, case by case, against the planner:
//! custom and well-known label constraints (In, NotIn, Exists, DoesNotExist, Gt, Lt), ORed node
//! selector terms, preferred affinity relaxation, instance type compatibility, binpacking,
//! in-flight and existing capacity, taints, DaemonSet overhead, NodePool limits and weights, and
//! minValues. Each test is named after the upstream `It(...)` it follows; the scenarios are
//! rebuilt from the cases' descriptions on a catalog shaped like Karpenter's fake cloud
//! provider, and assert what the upstream case asserts. Where this project deliberately
//! differs, the test says so (docs/src/reference/semantics.md).

use std::collections::BTreeMap;

use autoscaler_core::builders::*;
use autoscaler_core::instance::{CapacityType, InstanceType};
use autoscaler_core::labels;
use autoscaler_core::model::{
    DaemonSet, InFlightClaim, Node, Pod, PodAffinityTerm, Snapshot, TermNamespaces, TopologySpread,
};
use autoscaler_core::plan::{NewClaim, Plan};
use autoscaler_core::provision::plan_provisioning;
use autoscaler_core::requirements::{NodeSelector, Operator, Requirements};
use autoscaler_core::taints::{Effect, Taint, Toleration};

mod support;

const Z: [&str; 3] = ["test-zone-1", "test-zone-2", "test-zone-3"];
const ZONE: &str = labels::ZONE;
const CT: &str = labels::CAPACITY_TYPE;
const ARCH: &str = labels::ARCH;
const IT: &str = labels::INSTANCE_TYPE;
const HOST: &str = labels::HOSTNAME;
/// The fake provider's integer label: the type's cpu count.
const INTEGER: &str = "integer";
/// The fake provider's size label: `large` above 4 cpu and 8Gi, else `small`.
const SIZE: &str = "size";
/// The fake provider's optional label, on large types only.
const SPECIAL: &str = "special";
const VENDOR_A: &str = "fake.com/vendor-a";
const VENDOR_B: &str = "fake.com/vendor-b";

use Operator::{DoesNotExist, Exists, Gt, In, Lt, NotIn};

// ------------------------------------------------------------------ the fake catalog

/// An instance type as Karpenter's fake provider builds it: price 0.1 per cpu and per GB,
/// 1.0 per GPU-like device; spot in zones 1-2, on-demand in zones 1-3; 100m/10Mi reserved.
fn fake(name: &str, cpu: i64, mem_gi: i64, pods: i64, extra: &[(&str, &str)]) -> TypeBuilder {
    let mut price = 0.1 * cpu as f64 + 0.1 * (mem_gi as f64 * 1024.0 * 1024.0 * 1024.0) / 1e9;
    let mut b = itype(name)
        .cpu(&cpu.to_string())
        .mem(&format!("{mem_gi}Gi"))
        .max_pods(pods)
        .overhead("100m", "10Mi")
        .label(INTEGER, &cpu.to_string());
    for (r, q) in extra {
        b = b.res(r, q);
        price += 1.0;
    }
    if cpu > 4 && mem_gi > 8 {
        b = b.label(SIZE, "large").label(SPECIAL, "optional");
    } else {
        b = b.label(SIZE, "small");
    }
    b.offer(Z[0], CapacityType::Spot, price)
        .offer(Z[1], CapacityType::Spot, price)
        .on_demand(&Z, price)
}

fn arm(mut b: TypeBuilder) -> InstanceType {
    b = b.label(ARCH, "arm64");
    let mut t = b.build();
    t.arch = "arm64".into();
    t
}

/// The fake provider's default catalog.
fn fake_types() -> Vec<InstanceType> {
    vec![
        fake("default-instance-type", 4, 4, 5, &[]).build(),
        fake("small-instance-type", 2, 2, 5, &[]).build(),
        fake("gpu-vendor-instance-type", 4, 4, 5, &[(VENDOR_A, "2")]).build(),
        fake("gpu-vendor-b-instance-type", 4, 4, 5, &[(VENDOR_B, "2")]).build(),
        arm(fake("arm-instance-type", 16, 128, 5, &[])),
        fake("single-pod-instance-type", 4, 4, 1, &[]).build(),
    ]
}

/// `fake.InstanceTypes(n)`: fake-it-i with i+1 cpu, 2(i+1)Gi, 10(i+1) pods.
fn fake_n(n: i64) -> Vec<InstanceType> {
    (0..n)
        .map(|i| {
            fake(
                &format!("fake-it-{i}"),
                i + 1,
                2 * (i + 1),
                10 * (i + 1),
                &[],
            )
            .build()
        })
        .collect()
}

/// A type with one offering at a fixed price.
fn priced(name: &str, cpu: &str, mem: &str, ct: CapacityType, price: f64) -> TypeBuilder {
    itype(name)
        .cpu(cpu)
        .mem(mem)
        .overhead("100m", "10Mi")
        .offer("test-zone-1a", ct, price)
}

/// The suite's NodePool: spot or on-demand, the fake catalog.
fn np() -> PoolBuilder {
    pool("default", fake_types()).require(CT, In, &["spot", "on-demand"])
}

fn req(key: &str, op: Operator, values: &[&str]) -> Requirements {
    Requirements::new().with(key, op, values)
}

fn ds(name: &str, cpu: &str, mem: &str) -> DaemonSet {
    daemonset(name, cpu, mem, vec![])
}

fn cpu_pod(name: &str, cpu: &str) -> PodBuilder {
    pod(name).cpu(cpu)
}

// ------------------------------------------------------------------ a multi-round cluster

/// A cluster over several provisioning rounds. New claims become in-flight claims
/// (`in_flight = true`, as Karpenter's launched but not yet initialized nodes) or initialized
/// nodes.
struct Sim {
    pools: Vec<PoolBuilder>,
    daemonsets: Vec<DaemonSet>,
    nodes: Vec<Node>,
    claims: Vec<InFlightClaim>,
    in_flight: bool,
    round: usize,
    /// Pod name (without round prefix) -> node or claim name.
    at: BTreeMap<String, String>,
    /// Node or claim name -> its labels.
    node_labels: BTreeMap<String, BTreeMap<String, String>>,
    last: Plan,
}

impl Sim {
    fn new(pools: Vec<PoolBuilder>) -> Self {
        Sim {
            pools,
            daemonsets: vec![],
            nodes: vec![],
            claims: vec![],
            in_flight: false,
            round: 0,
            at: BTreeMap::new(),
            node_labels: BTreeMap::new(),
            last: Plan::default(),
        }
    }

    fn in_flight(mut self) -> Self {
        self.in_flight = true;
        self
    }

    fn with_ds(mut self, d: DaemonSet) -> Self {
        self.daemonsets.push(d);
        self
    }

    fn snapshot(&self, pending: Vec<Pod>) -> Snapshot {
        Snapshot {
            pending,
            nodes: self.nodes.clone(),
            in_flight: self.claims.clone(),
            daemonsets: self.daemonsets.clone(),
            pools: self.pools.iter().cloned().map(|p| p.build()).collect(),
            ..Snapshot::default()
        }
    }

    /// Plans `pods`, then launches the plan: each new claim becomes a node (or an in-flight
    /// claim) of its cheapest type, in its cheapest offering.
    fn run(&mut self, pods: Vec<PodBuilder>) -> Plan {
        self.round += 1;
        let r = self.round;
        let pending: Vec<Pod> = pods.into_iter().map(PodBuilder::build).collect();
        let snap = self.snapshot(pending.clone());
        let plan = plan_provisioning(&snap);
        eprintln!("--- round {r}\n{}", plan.render());
        let by_name: BTreeMap<_, _> = pending.iter().map(|p| (p.key.clone(), p.clone())).collect();
        for pl in &plan.existing {
            let n = self.nodes.iter_mut().find(|n| n.name == pl.target).unwrap();
            n.pods.push(by_name[&pl.pod].clone());
            self.at.insert(pl.pod.name.clone(), pl.target.clone());
        }
        for pl in &plan.in_flight {
            let c = self
                .claims
                .iter_mut()
                .find(|c| c.name == pl.target)
                .unwrap();
            c.pods.push(by_name[&pl.pod].clone());
            self.at.insert(pl.pod.name.clone(), pl.target.clone());
        }
        for c in &plan.new_claims {
            let name = format!("r{r}-{}", c.name);
            let pods: Vec<Pod> = c.pods.iter().map(|k| by_name[k].clone()).collect();
            for p in &pods {
                self.at.insert(p.key.name.clone(), name.clone());
            }
            let n = support::launch(&snap, c, &name, pods);
            self.node_labels.insert(name.clone(), n.labels.clone());
            if self.in_flight {
                let mut reqs = c.requirements.clone();
                for k in [ZONE, CT] {
                    let v = n.labels[k].clone();
                    reqs.add_constraint(k, req(k, In, &[v.as_str()]).get(k).unwrap().clone());
                }
                self.claims.push(InFlightClaim {
                    name,
                    pool: c.pool.clone(),
                    instance_types: vec![c.instance_types[0].instance_type.to_string()],
                    requirements: reqs,
                    pods: n.pods,
                    created_at: 0,
                });
            } else {
                self.nodes.push(n);
            }
        }
        self.last = plan.clone();
        plan
    }

    /// The labels of the node pod `name` landed on, if it got one.
    fn node_of(&self, name: &str) -> Option<&BTreeMap<String, String>> {
        let at = self.at.get(name)?;
        self.node_labels
            .get(at)
            .or_else(|| self.nodes.iter().find(|n| &n.name == at).map(|n| &n.labels))
    }

    fn target(&self, name: &str) -> Option<&str> {
        self.at.get(name).map(String::as_str)
    }

    fn label(&self, name: &str, key: &str) -> Option<String> {
        self.node_of(name).and_then(|l| l.get(key).cloned())
    }

    fn scheduled(&self, name: &str) -> bool {
        self.at.contains_key(name)
    }

    /// Nodes and claims launched so far.
    fn launched(&self) -> usize {
        self.node_labels.len()
    }
}

/// One round in a cluster of `pools`.
fn once(pools: Vec<PoolBuilder>, pods: Vec<PodBuilder>) -> Sim {
    let mut s = Sim::new(pools);
    s.run(pods);
    s
}

fn type_of(s: &Sim, pod: &str) -> String {
    s.label(pod, IT)
        .unwrap_or_else(|| panic!("{pod} got no node"))
}

fn claim_types(c: &NewClaim) -> Vec<&str> {
    c.instance_types.iter().map(|o| &*o.instance_type).collect()
}

fn pods(prefix: &str, n: usize, f: impl Fn(PodBuilder) -> PodBuilder) -> Vec<PodBuilder> {
    (0..n).map(|i| f(pod(&format!("{prefix}-{i}")))).collect()
}

fn distinct_targets(s: &Sim, prefix: &str) -> usize {
    let mut v: Vec<&str> =
        s.at.iter()
            .filter(|(k, _)| k.starts_with(prefix))
            .map(|(_, v)| v.as_str())
            .collect();
    v.sort();
    v.dedup();
    v.len()
}

// ================================================================ Custom Constraints
// ---------------------------------------------------------------- NodePool with Labels

#[test]
fn should_schedule_unconstrained_pods_that_dont_have_matching_node_selectors() {
    let s = once(vec![np().label("test-key", "test-value")], vec![pod("p")]);
    assert_eq!(s.label("p", "test-key").as_deref(), Some("test-value"));
}

#[test]
fn should_not_schedule_pods_that_have_conflicting_node_selectors() {
    let s = once(
        vec![np().label("test-key", "test-value")],
        vec![pod("p").select("test-key", "different-value")],
    );
    assert!(!s.scheduled("p"));
}

#[test]
fn should_not_schedule_pods_that_have_node_selectors_with_undefined_key() {
    let s = once(vec![np()], vec![pod("p").select("test-key", "test-value")]);
    assert!(!s.scheduled("p"));
}

#[test]
fn should_schedule_pods_that_have_matching_requirements() {
    let s = once(
        vec![np().label("test-key", "test-value")],
        vec![pod("p").require("test-key", In, &["test-value", "another-value"])],
    );
    assert_eq!(s.label("p", "test-key").as_deref(), Some("test-value"));
}

#[test]
fn should_not_schedule_pods_that_have_conflicting_requirements() {
    let s = once(
        vec![np().label("test-key", "test-value")],
        vec![pod("p").require("test-key", In, &["another-value"])],
    );
    assert!(!s.scheduled("p"));
}

// ---------------------------------------------------------------- Well Known Labels

#[test]
fn well_known_should_use_nodepool_constraints() {
    let s = once(vec![np().require(ZONE, In, &[Z[1]])], vec![pod("p")]);
    assert_eq!(s.label("p", ZONE).as_deref(), Some(Z[1]));
}

#[test]
fn well_known_should_use_node_selectors() {
    let s = once(
        vec![np().require(ZONE, In, &Z[..2])],
        vec![pod("p").select(ZONE, Z[1])],
    );
    assert_eq!(s.label("p", ZONE).as_deref(), Some(Z[1]));
}

#[test]
fn should_not_schedule_nodes_with_a_hostname_selector() {
    let s = once(vec![np()], vec![pod("p").select(HOST, "red-node")]);
    assert!(!s.scheduled("p"));
}

#[test]
fn should_not_schedule_the_pod_if_nodeselector_unknown() {
    let s = once(
        vec![np().require(ZONE, In, &[Z[0]])],
        vec![pod("p").select(ZONE, "unknown")],
    );
    assert!(!s.scheduled("p"));
}

#[test]
fn should_not_schedule_if_node_selector_outside_of_nodepool_constraints() {
    let s = once(
        vec![np().require(ZONE, In, &[Z[0]])],
        vec![pod("p").select(ZONE, Z[1])],
    );
    assert!(!s.scheduled("p"));
}

#[test]
fn should_schedule_compatible_requirements_with_operator_in() {
    let s = once(vec![np()], vec![pod("p").require(ZONE, In, &[Z[2]])]);
    assert_eq!(s.label("p", ZONE).as_deref(), Some(Z[2]));
}

#[test]
fn should_schedule_compatible_requirements_with_operator_gt() {
    let s = once(vec![np().require(INTEGER, Gt, &["8"])], vec![pod("p")]);
    assert_eq!(s.label("p", INTEGER).as_deref(), Some("16"));
}

#[test]
fn should_schedule_compatible_requirements_with_operator_lt() {
    let s = once(vec![np().require(INTEGER, Lt, &["8"])], vec![pod("p")]);
    assert_eq!(s.label("p", INTEGER).as_deref(), Some("2"));
}

#[test]
fn pod_gt_and_lt_on_an_instance_label_select_between_bounds() {
    // Not an upstream case by itself: Gt and Lt on the pod side, together (Gte/Lte are
    // Karpenter-only operators with no Kubernetes spelling).
    let s = once(
        vec![np()],
        vec![
            pod("p")
                .require(INTEGER, Gt, &["2"])
                .require(INTEGER, Lt, &["16"]),
        ],
    );
    assert_eq!(s.label("p", INTEGER).as_deref(), Some("4"));
}

#[test]
fn should_not_schedule_incompatible_preferences_and_requirements_with_operator_in() {
    let s = once(vec![np()], vec![pod("p").require(ZONE, In, &["unknown"])]);
    assert!(!s.scheduled("p"));
}

#[test]
fn should_schedule_compatible_requirements_with_operator_notin() {
    let s = once(
        vec![np()],
        vec![pod("p").require(ZONE, NotIn, &[Z[0], Z[1], "unknown"])],
    );
    assert_eq!(s.label("p", ZONE).as_deref(), Some(Z[2]));
}

#[test]
fn should_not_schedule_incompatible_preferences_and_requirements_with_operator_notin() {
    let s = once(
        vec![np()],
        vec![pod("p").require(ZONE, NotIn, &[Z[0], Z[1], Z[2], "unknown"])],
    );
    assert!(!s.scheduled("p"));
}

#[test]
fn should_schedule_compatible_preferences_and_requirements_with_operator_in() {
    let s = once(
        vec![np()],
        vec![
            pod("p")
                .require(ZONE, In, &[Z[0], Z[1], Z[2], "unknown"])
                .prefer(1, req(ZONE, In, &[Z[1], "unknown"])),
        ],
    );
    assert_eq!(s.label("p", ZONE).as_deref(), Some(Z[1]));
}

#[test]
fn should_schedule_incompatible_preferences_and_requirements_with_operator_in() {
    let s = once(
        vec![np()],
        vec![
            pod("p")
                .require(ZONE, In, &[Z[0], Z[1], Z[2], "unknown"])
                .prefer(1, req(ZONE, In, &["unknown"])),
        ],
    );
    assert!(s.scheduled("p"));
}

#[test]
fn should_schedule_compatible_preferences_and_requirements_with_operator_notin() {
    let s = once(
        vec![np()],
        vec![
            pod("p")
                .require(ZONE, In, &[Z[0], Z[1], Z[2], "unknown"])
                .prefer(1, req(ZONE, NotIn, &[Z[0], Z[2]])),
        ],
    );
    assert_eq!(s.label("p", ZONE).as_deref(), Some(Z[1]));
}

#[test]
fn should_schedule_incompatible_preferences_and_requirements_with_operator_notin() {
    let s = once(
        vec![np()],
        vec![
            pod("p")
                .require(ZONE, In, &[Z[0], Z[1], Z[2], "unknown"])
                .prefer(1, req(ZONE, NotIn, &Z)),
        ],
    );
    assert!(s.scheduled("p"));
}

#[test]
fn should_schedule_compatible_node_selectors_preferences_and_requirements() {
    let s = once(
        vec![np()],
        vec![
            pod("p")
                .select(ZONE, Z[2])
                .require(ZONE, In, &Z)
                .prefer(1, req(ZONE, In, &Z)),
        ],
    );
    assert_eq!(s.label("p", ZONE).as_deref(), Some(Z[2]));
}

#[test]
fn should_combine_multidimensional_node_selectors_preferences_and_requirements() {
    let s = once(
        vec![np()],
        vec![
            pod("p")
                .select(ZONE, Z[2])
                .select(IT, "arm-instance-type")
                .require(ZONE, In, &[Z[0], Z[2]])
                .require(IT, In, &["default-instance-type", "arm-instance-type"])
                .prefer(
                    1,
                    req(ZONE, NotIn, &["unknown"]).with(IT, NotIn, &["unknown"]),
                ),
        ],
    );
    assert_eq!(s.label("p", ZONE).as_deref(), Some(Z[2]));
    assert_eq!(s.label("p", IT).as_deref(), Some("arm-instance-type"));
}

// ---------------------------------------------------------------- Scheduling Logic

#[test]
fn should_not_schedule_pods_that_have_node_selectors_with_in_operator_and_undefined_key() {
    let s = once(
        vec![np()],
        vec![pod("p").require("test-key", In, &["test-value"])],
    );
    assert!(!s.scheduled("p"));
}

#[test]
fn should_schedule_pods_that_have_node_selectors_with_notin_operator_and_undefined_key() {
    let s = once(
        vec![np()],
        vec![pod("p").require("test-key", NotIn, &["test-value"])],
    );
    assert!(s.scheduled("p"));
    assert_ne!(s.label("p", "test-key").as_deref(), Some("test-value"));
}

#[test]
fn should_not_schedule_pods_that_have_node_selectors_with_exists_operator_and_undefined_key() {
    let s = once(vec![np()], vec![pod("p").require("test-key", Exists, &[])]);
    assert!(!s.scheduled("p"));
}

#[test]
fn should_schedule_pods_that_with_doesnotexists_operator_and_undefined_key() {
    let s = once(
        vec![np()],
        vec![pod("p").require("test-key", DoesNotExist, &[])],
    );
    assert!(s.scheduled("p"));
    assert_eq!(s.label("p", "test-key"), None);
}

fn test_key_pool() -> PoolBuilder {
    np().require("test-key", In, &["test-value"])
}

#[test]
fn should_schedule_unconstrained_pods_that_dont_have_matching_node_selectors_requirements() {
    let s = once(vec![test_key_pool()], vec![pod("p")]);
    assert_eq!(s.label("p", "test-key").as_deref(), Some("test-value"));
}

#[test]
fn should_schedule_pods_that_have_node_selectors_with_matching_value_and_in_operator() {
    let s = once(
        vec![test_key_pool()],
        vec![pod("p").require("test-key", In, &["test-value"])],
    );
    assert_eq!(s.label("p", "test-key").as_deref(), Some("test-value"));
}

#[test]
fn should_not_schedule_pods_that_have_node_selectors_with_matching_value_and_notin_operator() {
    let s = once(
        vec![test_key_pool()],
        vec![pod("p").require("test-key", NotIn, &["test-value"])],
    );
    assert!(!s.scheduled("p"));
}

#[test]
fn should_schedule_the_pod_with_exists_operator_and_defined_key() {
    let s = once(
        vec![test_key_pool()],
        vec![pod("p").require("test-key", Exists, &[])],
    );
    assert!(s.scheduled("p"));
    assert_eq!(s.label("p", "test-key").as_deref(), Some("test-value"));
}

#[test]
fn should_not_schedule_the_pod_with_doesnotexists_operator_and_defined_key() {
    let s = once(
        vec![test_key_pool()],
        vec![pod("p").require("test-key", DoesNotExist, &[])],
    );
    assert!(!s.scheduled("p"));
}

#[test]
fn should_not_schedule_pods_that_have_node_selectors_with_different_value_and_in_operator() {
    let s = once(
        vec![test_key_pool()],
        vec![pod("p").require("test-key", In, &["another-value"])],
    );
    assert!(!s.scheduled("p"));
}

#[test]
fn should_schedule_pods_that_have_node_selectors_with_different_value_and_notin_operator() {
    let s = once(
        vec![test_key_pool()],
        vec![pod("p").require("test-key", NotIn, &["another-value"])],
    );
    assert_eq!(s.label("p", "test-key").as_deref(), Some("test-value"));
}

#[test]
fn should_schedule_compatible_pods_to_the_same_node() {
    let s = once(
        vec![np().require("test-key", In, &["test-value", "another-value"])],
        vec![
            pod("a").require("test-key", In, &["test-value"]),
            pod("b").require("test-key", NotIn, &["another-value"]),
        ],
    );
    assert_eq!(s.label("a", "test-key").as_deref(), Some("test-value"));
    assert_eq!(s.label("b", "test-key").as_deref(), Some("test-value"));
    assert_eq!(s.target("a"), s.target("b"));
}

#[test]
fn should_schedule_incompatible_pods_to_the_different_node() {
    let s = once(
        vec![np().require("test-key", In, &["test-value", "another-value"])],
        vec![
            pod("a").require("test-key", In, &["test-value"]),
            pod("b").require("test-key", In, &["another-value"]),
        ],
    );
    assert_eq!(s.label("a", "test-key").as_deref(), Some("test-value"));
    assert_eq!(s.label("b", "test-key").as_deref(), Some("another-value"));
    assert_ne!(s.target("a"), s.target("b"));
}

#[test]
fn exists_operator_should_not_overwrite_the_existing_value() {
    let s = once(
        vec![np()],
        vec![
            pod("p")
                .require(ZONE, In, &["non-existent-zone"])
                .require(ZONE, Exists, &[]),
        ],
    );
    assert!(!s.scheduled("p"));
}

// ================================================================ Preferential Fallback

#[test]
fn required_should_not_relax_the_final_term() {
    let s = once(
        vec![
            np().require(ZONE, In, &[Z[0]])
                .require(IT, In, &["default-instance-type"]),
        ],
        vec![pod("p").affinity_terms(vec![req(ZONE, In, &["invalid"])])],
    );
    assert!(!s.scheduled("p"));
}

#[test]
fn required_should_relax_multiple_terms() {
    let s = once(
        vec![np()],
        vec![pod("p").affinity_terms(vec![
            req(ZONE, In, &["invalid"]),
            req(ZONE, In, &["invalid"]),
            req(ZONE, In, &[Z[0]]),
            req(ZONE, In, &[Z[1]]),
        ])],
    );
    assert_eq!(s.label("p", ZONE).as_deref(), Some(Z[0]));
}

#[test]
fn ored_terms_combine_with_nodepool_requirements() {
    // Not an upstream case by itself: "should relax multiple terms" where the NodePool rules
    // out the first satisfiable term, so the next one must be used.
    let s = once(
        vec![np().require(ZONE, NotIn, &[Z[0]])],
        vec![pod("p").affinity_terms(vec![
            req(ZONE, In, &[Z[0]]),
            req(ZONE, In, &[Z[2]]).with(CT, In, &["on-demand"]),
        ])],
    );
    assert_eq!(s.label("p", ZONE).as_deref(), Some(Z[2]));
    assert_eq!(s.label("p", CT).as_deref(), Some("on-demand"));
}

#[test]
fn ored_terms_across_two_nodepools_each_matching_one_term() {
    // Each NodePool can meet one term only: the pod must get a node from either.
    let s = once(
        vec![
            pool("a", fake_types()).label("team", "a").weight(10),
            pool("b", fake_types()).label("team", "b"),
        ],
        vec![pod("p").affinity_terms(vec![req("team", In, &["b"]), req("team", In, &["c"])])],
    );
    assert_eq!(s.label("p", "team").as_deref(), Some("b"));
}

#[test]
fn preferred_should_relax_all_terms() {
    let s = once(
        vec![np()],
        vec![
            pod("p")
                .prefer(1, req(ZONE, In, &["invalid"]))
                .prefer(1, req(IT, In, &["invalid"])),
        ],
    );
    assert!(s.scheduled("p"));
}

#[test]
fn preferred_should_relax_to_use_lighter_weights() {
    let s = once(
        vec![np().require(ZONE, In, &Z[..2])],
        vec![
            pod("p")
                .prefer(100, req(IT, In, &["test-zone-3"]))
                .prefer(50, req(ZONE, In, &[Z[1]]))
                .prefer(1, req(ZONE, In, &[Z[0]])),
        ],
    );
    assert_eq!(s.label("p", ZONE).as_deref(), Some(Z[1]));
}

#[test]
fn should_schedule_even_if_preference_is_conflicting_with_requirement() {
    let s = once(
        vec![np()],
        vec![
            pod("p")
                .require(ZONE, In, &[Z[2]])
                .prefer(1, req(ZONE, NotIn, &[Z[2]])),
        ],
    );
    assert_eq!(s.label("p", ZONE).as_deref(), Some(Z[2]));
}

#[test]
fn should_schedule_even_if_preference_requirements_are_conflicting() {
    let s = once(
        vec![np()],
        vec![pod("p").prefer(
            1,
            req(ZONE, In, &["invalid"]).with(ZONE, NotIn, &["invalid"]),
        )],
    );
    assert!(s.scheduled("p"));
}

#[test]
fn should_tolerate_prefernoschedule_taint_only_after_trying_to_relax_affinity_terms() {
    let mut p = np();
    p.0.taints
        .push(Taint::new("foo", "bar", Effect::PreferNoSchedule));
    let s = once(
        vec![p],
        vec![
            pod("p")
                .prefer(1, req(ZONE, In, &["invalid"]))
                .prefer(1, req(IT, In, &["invalid"])),
        ],
    );
    assert!(s.scheduled("p"));
    let plan = &s.last;
    assert!(plan.new_claims[0].taints.contains(&Taint::new(
        "foo",
        "bar",
        Effect::PreferNoSchedule
    )));
}

#[test]
fn should_ignore_node_preferred_affinity_zone_and_hostname() {
    for key in [ZONE, HOST] {
        let s = once(
            vec![np()],
            vec![
                cpu_pod("p1", "2").label("app", "foo"),
                cpu_pod("pref", "1")
                    .label("app", "baz")
                    .prefer(1, req(key, In, &["value-1"])),
            ],
        );
        assert!(s.scheduled("p1") && s.scheduled("pref"), "{key}");
        assert_eq!(s.target("p1"), s.target("pref"), "{key}");
    }
}

#[test]
fn a_preference_only_a_lower_weight_nodepool_meets_is_honoured() {
    // Karpenter tries the heaviest preference against every NodePool before relaxing it, so a
    // preference for zone 3 sends the pod to the lower-weight pool that offers zone 3.
    let s = once(
        vec![
            np().require(ZONE, In, &Z[..2]).weight(10),
            pool("z3", fake_types()).require(ZONE, In, &[Z[2]]),
        ],
        vec![pod("p").prefer(1, req(ZONE, In, &[Z[2]]))],
    );
    assert_eq!(s.label("p", ZONE).as_deref(), Some(Z[2]));
}

/// A preference no NodePool meets changes nothing: the pod is planned as without it. (The
/// lighter pools weighed for the preference are no cheaper place for it alone.)
#[test]
fn a_preference_no_nodepool_meets_leaves_the_plan_as_without_it() {
    let a = vec![
        priced("a.small", "2", "8Gi", CapacityType::OnDemand, 1.0).build(),
        priced("a.large", "4", "16Gi", CapacityType::OnDemand, 1.5).build(),
    ];
    let b = vec![priced("b.small", "2", "8Gi", CapacityType::OnDemand, 0.1).build()];
    let cost = |prefer: bool| {
        let p2 = cpu_pod("p2", "1200m");
        let p2 = if prefer {
            p2.prefer(1, req("nothing-carries-this", In, &["x"]))
        } else {
            p2
        };
        let snap = Snapshot {
            pending: vec![cpu_pod("p1", "1500m").build(), p2.build()],
            pools: vec![
                pool("a", a.clone()).weight(10).build(),
                pool("b", b.clone()).weight(1).build(),
            ],
            ..Snapshot::default()
        };
        let plan = plan_provisioning(&snap);
        assert!(plan.unschedulable.is_empty(), "{}", plan.render());
        plan.new_cost()
    };
    assert_eq!(cost(true), cost(false));
    assert!((cost(false) - 1.5).abs() < 1e-9, "{}", cost(false));
}

// ================================================================ Instance Type Compatibility

#[test]
fn should_not_schedule_if_requesting_more_resources_than_any_instance_type_has() {
    let s = once(vec![np()], vec![cpu_pod("p", "512")]);
    assert!(!s.scheduled("p"));
}

#[test]
fn should_launch_pods_with_different_archs_on_different_instances() {
    let s = once(
        vec![np().require(ARCH, In, &["arm64", "amd64"])],
        vec![
            pod("a").select(ARCH, "amd64"),
            pod("b").select(ARCH, "arm64"),
        ],
    );
    assert!(s.scheduled("a") && s.scheduled("b"));
    assert_ne!(s.target("a"), s.target("b"));
}

#[test]
fn should_exclude_instance_types_that_are_not_supported_by_the_pod_constraints_instance_type() {
    let s = once(
        vec![np().require(ARCH, In, &["amd64"])],
        vec![pod("p").require(IT, In, &["arm-instance-type"])],
    );
    assert!(!s.scheduled("p"));
}

#[test]
fn should_exclude_instance_types_that_are_not_supported_by_the_provider_constraints_arch() {
    let s = once(
        vec![np().require(ARCH, In, &["amd64"])],
        vec![cpu_pod("p", "14")],
    );
    assert!(!s.scheduled("p"));
}

#[test]
fn should_launch_pods_with_different_instance_type_node_selectors_on_different_instances() {
    let s = once(
        vec![np().require(ARCH, In, &["arm64", "amd64"])],
        vec![
            pod("a").select(IT, "small-instance-type"),
            pod("b").select(IT, "default-instance-type"),
        ],
    );
    assert!(s.scheduled("a") && s.scheduled("b"));
    assert_ne!(s.target("a"), s.target("b"));
}

#[test]
fn should_launch_pods_with_different_zone_selectors_on_different_instances() {
    let s = once(
        vec![np().require(ARCH, In, &["arm64", "amd64"])],
        vec![pod("a").select(ZONE, Z[0]), pod("b").select(ZONE, Z[1])],
    );
    assert!(s.scheduled("a") && s.scheduled("b"));
    assert_ne!(s.target("a"), s.target("b"));
}

fn two_device_types() -> Vec<InstanceType> {
    let mut t = fake_n(5);
    t[0].capacity.set("karpenter.sh/super-great-gpu", 25);
    t[1].capacity.set("karpenter.sh/even-better-gpu", 25);
    t
}

#[test]
fn should_launch_pods_with_resources_that_arent_on_any_single_instance_type_on_different_instances()
{
    let s = once(
        vec![pool("default", two_device_types())],
        vec![
            pod("a").res("karpenter.sh/super-great-gpu", "1"),
            pod("b").res("karpenter.sh/even-better-gpu", "1"),
        ],
    );
    assert!(s.scheduled("a") && s.scheduled("b"));
    assert_ne!(s.target("a"), s.target("b"));
}

#[test]
fn should_fail_to_schedule_a_pod_with_resources_requests_that_arent_on_a_single_instance_type() {
    let s = once(
        vec![pool("default", two_device_types())],
        vec![
            pod("p")
                .res("karpenter.sh/super-great-gpu", "1")
                .res("karpenter.sh/even-better-gpu", "1"),
        ],
    );
    assert!(!s.scheduled("p"));
}

#[test]
fn should_filter_instance_types_that_match_labels() {
    let s = once(
        vec![pool("default", fake_n(5))],
        vec![
            pod("a").select(SIZE, "large"),
            pod("b").select(SIZE, "small"),
        ],
    );
    assert_eq!(type_of(&s, "a"), "fake-it-4");
    assert_eq!(type_of(&s, "b"), "fake-it-0");
}

#[test]
fn should_not_schedule_with_incompatible_labels() {
    let s = once(
        vec![pool("default", fake_n(5))],
        vec![
            pod("a").select(SIZE, "large").select(IT, "fake-it-0"),
            pod("b").select(SIZE, "small").select(IT, "fake-it-4"),
        ],
    );
    assert!(!s.scheduled("a"));
    assert!(!s.scheduled("b"));
}

#[test]
fn should_schedule_optional_labels() {
    let s = once(
        vec![pool("default", fake_n(5))],
        vec![pod("p").require(SPECIAL, Exists, &[])],
    );
    assert!(s.label("p", SPECIAL).is_some());
    assert_eq!(type_of(&s, "p"), "fake-it-4");
}

#[test]
fn should_schedule_without_optional_labels_if_disallowed() {
    let s = once(
        vec![pool("default", fake_n(5))],
        vec![pod("p").require(SPECIAL, DoesNotExist, &[])],
    );
    assert!(s.scheduled("p"));
    assert_eq!(s.label("p", SPECIAL), None);
}

// ================================================================ Binpacking

#[test]
fn should_schedule_a_small_pod_on_the_smallest_instance() {
    let s = once(vec![np()], vec![pod("p").mem("100M")]);
    assert_eq!(type_of(&s, "p"), "small-instance-type");
}

#[test]
fn should_schedule_a_small_pod_on_the_smallest_possible_instance_type() {
    let s = once(vec![np()], vec![pod("p").mem("2000M")]);
    assert_eq!(type_of(&s, "p"), "small-instance-type");
}

#[test]
fn should_schedule_multiple_small_pods_on_the_smallest_possible_instance_type() {
    let s = once(vec![np()], pods("p", 5, |p| p.mem("10M")));
    for i in 0..5 {
        assert_eq!(type_of(&s, &format!("p-{i}")), "small-instance-type");
    }
    assert_eq!(distinct_targets(&s, "p-"), 1);
}

#[test]
fn should_create_new_nodes_when_a_node_is_at_capacity() {
    let s = once(
        vec![np()],
        pods("p", 40, |p| p.select(ARCH, "amd64").mem("1.8G")),
    );
    for i in 0..40 {
        assert_eq!(type_of(&s, &format!("p-{i}")), "default-instance-type");
    }
    assert_eq!(distinct_targets(&s, "p-"), 20);
}

#[test]
fn should_pack_small_and_large_pods_together() {
    let mut all = pods("large", 40, |p| p.select(ARCH, "amd64").mem("1.8G"));
    all.extend(pods("small", 20, |p| p.select(ARCH, "amd64").mem("400M")));
    let s = once(vec![np()], all);
    assert_eq!(s.at.len(), 60);
    for (p, _) in s.at.iter() {
        assert_eq!(type_of(&s, p), "default-instance-type", "{p}");
    }
    assert_eq!(s.launched(), 20);
}

#[test]
fn should_pack_nodes_tightly() {
    let s = once(
        vec![pool("default", fake_n(5))],
        vec![cpu_pod("big", "4.5"), cpu_pod("small", "1")],
    );
    assert_ne!(s.target("big"), s.target("small"));
    assert_ne!(type_of(&s, "big"), type_of(&s, "small"));
}

#[test]
fn should_handle_zero_quantity_resource_requests() {
    let s = once(
        vec![np()],
        vec![pod("p").res("foo.com/weird-resources", "0")],
    );
    assert!(s.scheduled("p"));
}

#[test]
fn should_not_schedule_pods_that_exceed_every_instance_types_capacity() {
    let s = once(vec![np()], vec![pod("p").mem("2Ti")]);
    assert!(!s.scheduled("p"));
}

#[test]
fn should_create_new_nodes_when_a_node_is_at_capacity_due_to_pod_limits_per_node() {
    let s = once(
        vec![np()],
        pods("p", 25, |p| p.select(ARCH, "amd64").mem("1m").cpu("1m")),
    );
    for i in 0..25 {
        assert_eq!(type_of(&s, &format!("p-{i}")), "small-instance-type");
    }
    assert_eq!(distinct_targets(&s, "p-"), 5);
}

#[test]
fn should_select_for_valid_instance_types_regardless_of_price() {
    let od = CapacityType::OnDemand;
    let types = vec![
        priced("medium", "2", "2Gi", od, 3.0).build(),
        priced("small", "1", "1Gi", od, 2.0).build(),
        priced("large", "4", "4Gi", od, 1.0).build(),
    ];
    let s = once(
        vec![pool("default", types)],
        vec![pod("p").cpu("1m").mem("1Mi")],
    );
    assert_eq!(type_of(&s, "p"), "large");
    let mut t = claim_types(&s.last.new_claims[0]);
    t.sort();
    assert_eq!(t, vec!["large", "medium", "small"]);
}

// ================================================================ Instance Type Selection

#[test]
fn should_schedule_on_cheaper_on_demand_instance_even_when_spot_price_ordering_would_place_other_instance_types_first()
 {
    let (od, spot) = (CapacityType::OnDemand, CapacityType::Spot);
    let types = vec![
        priced("test-instance1", "1", "1Gi", od, 1.0)
            .offer("test-zone-1a", spot, 0.2)
            .build(),
        priced("test-instance2", "1", "1Gi", od, 1.3)
            .offer("test-zone-1a", spot, 0.1)
            .build(),
    ];
    let s = once(
        vec![pool("default", types).require(CT, In, &["on-demand"])],
        vec![pod("p")],
    );
    assert_eq!(type_of(&s, "p"), "test-instance1");
}

#[test]
fn should_schedule_on_one_of_the_cheapest_instances_prov_ct_spot_pod_zone_test_zone_2() {
    let s = once(
        vec![np().require(CT, In, &["spot"])],
        vec![pod("p").select(ZONE, Z[1])],
    );
    assert_eq!(s.label("p", CT).as_deref(), Some("spot"));
    assert_eq!(s.label("p", ZONE).as_deref(), Some(Z[1]));
    assert_eq!(type_of(&s, "p"), "small-instance-type");
    for (z, ct, _) in s.last.new_claims[0].instance_types[0].offerings.iter() {
        assert_eq!((&**z, *ct), (Z[1], CapacityType::Spot));
    }
}

#[test]
fn should_not_schedule_if_no_instance_type_matches_selector_prov_arch_arm_pod_zone_test_zone_3() {
    // arm64 types are offered on-demand in zone 3 only through the default offerings; with
    // spot only there is none.
    let s = once(
        vec![
            np().require(ARCH, In, &["arm64"])
                .require(CT, In, &["spot"]),
        ],
        vec![pod("p").select(ZONE, Z[2])],
    );
    assert!(!s.scheduled("p"));
}

// ---------------------------------------------------------------- MinValues

fn gen_type(name: &str, cpu: &str, generation: &str, price: f64) -> InstanceType {
    arm(
        priced(name, cpu, &format!("{cpu}Gi"), CapacityType::Spot, price)
            .label("karpenter/numerical-value", generation),
    )
}

fn two_pods() -> Vec<PodBuilder> {
    vec![
        pod("a").cpu("0.9").mem("0.9Gi"),
        pod("b").cpu("0.9").mem("0.9Gi"),
    ]
}

#[test]
fn should_schedule_respecting_the_minvalues_from_instance_type_requirements() {
    let types = vec![
        gen_type("instance-type-1", "1", "2", 0.52),
        gen_type("instance-type-2", "4", "3", 1.0),
    ];
    let s = once(
        vec![
            pool("default", types)
                .require(IT, In, &["instance-type-1", "instance-type-2"])
                .min_values(IT, 2),
        ],
        two_pods(),
    );
    assert!(s.scheduled("a") && s.scheduled("b"));
    assert_ne!(s.target("a"), s.target("b"));
    assert!(s.last.new_claims[0].instance_types.len() >= 2);
}

#[test]
fn should_schedule_respecting_the_minvalues_in_gt_operator() {
    let key = "karpenter/numerical-value";
    let types = vec![
        gen_type("instance-type-1", "1", "2", 0.52),
        gen_type("instance-type-2", "1", "3", 1.0),
        gen_type("instance-type-3", "4", "4", 1.2),
    ];
    let s = once(
        vec![
            pool("default", types)
                .require(key, Gt, &["2"])
                .min_values(key, 2),
        ],
        two_pods(),
    );
    assert!(s.scheduled("a") && s.scheduled("b"));
    assert_ne!(s.target("a"), s.target("b"));
    assert!(s.last.new_claims[0].instance_types.len() >= 2);
}

#[test]
fn scheduler_should_fail_if_the_minvalues_in_gt_operator_is_not_satisfied() {
    let key = "karpenter/numerical-value";
    let types = vec![
        gen_type("instance-type-1", "1", "2", 0.52),
        gen_type("instance-type-2", "4", "3", 1.0),
    ];
    let s = once(
        vec![
            pool("default", types)
                .require(key, Gt, &["2"])
                .min_values(key, 2),
        ],
        two_pods(),
    );
    assert!(!s.scheduled("a") && !s.scheduled("b"));
}

#[test]
fn should_schedule_respecting_the_minvalues_in_lt_operator() {
    let key = "karpenter/numerical-value";
    let types = vec![
        gen_type("instance-type-1", "4", "2", 0.52),
        gen_type("instance-type-2", "1", "3", 1.0),
        gen_type("instance-type-3", "1", "4", 1.2),
    ];
    let s = once(
        vec![
            pool("default", types)
                .require(key, Lt, &["4"])
                .min_values(key, 2),
        ],
        two_pods(),
    );
    assert!(s.scheduled("a") && s.scheduled("b"));
    assert_ne!(s.target("a"), s.target("b"));
    assert!(s.last.new_claims[0].instance_types.len() >= 2);
}

// ================================================================ In-Flight Nodes

fn tiny(name: &str) -> PodBuilder {
    pod(name).cpu("10m")
}

#[test]
fn should_not_launch_a_second_node_if_there_is_an_in_flight_node_that_can_support_the_pod() {
    let mut s = Sim::new(vec![np()]).in_flight();
    s.run(vec![tiny("first")]);
    s.run(vec![tiny("second")]);
    assert_eq!(s.target("first"), s.target("second"));
}

#[test]
fn should_not_launch_a_second_node_if_there_is_an_in_flight_node_that_can_support_the_pod_node_selectors()
 {
    let mut s = Sim::new(vec![np()]).in_flight();
    s.run(vec![tiny("first").require(ZONE, In, &[Z[1]])]);
    s.run(vec![tiny("second").require(ZONE, In, &[Z[0], Z[1]])]);
    assert_eq!(s.target("first"), s.target("second"));
    s.run(vec![tiny("third").require(ZONE, In, &[Z[0], Z[2]])]);
    assert!(s.scheduled("third"));
    assert_ne!(s.target("first"), s.target("third"));
}

#[test]
fn should_launch_a_second_node_if_a_pod_wont_fit_on_the_existing_node() {
    let mut s = Sim::new(vec![np()]).in_flight();
    s.run(vec![cpu_pod("first", "1001m")]);
    s.run(vec![cpu_pod("second", "1")]);
    assert!(s.scheduled("second"));
    assert_ne!(s.target("first"), s.target("second"));
}

#[test]
fn should_launch_a_second_node_if_a_pod_isnt_compatible_with_the_existing_node_node_selector() {
    let mut s = Sim::new(vec![np()]).in_flight();
    s.run(vec![tiny("first")]);
    s.run(vec![pod("second").select(ARCH, "arm64")]);
    assert!(s.scheduled("second"));
    assert_ne!(s.target("first"), s.target("second"));
}

#[test]
fn should_launch_a_second_node_if_an_in_flight_node_is_terminating() {
    let mut s = Sim::new(vec![np()]);
    s.run(vec![tiny("first")]);
    for n in &mut s.nodes {
        n.deleting = true;
    }
    s.run(vec![tiny("second")]);
    assert!(s.scheduled("second"));
    assert_ne!(s.target("first"), s.target("second"));
}

fn foo_spread(key: &str) -> TopologySpread {
    TopologySpread {
        max_skew: 1,
        topology_key: key.into(),
        selector: req("foo", In, &["bar"]),
        hard: true,
        min_domains: 0,
        honor_taints: false,
        ignore_node_affinity: false,
    }
}

fn spread_pods(prefix: &str, n: usize, key: &str) -> Vec<PodBuilder> {
    pods(prefix, n, |p| {
        let mut p = p.label("foo", "bar");
        p.0.spread = vec![foo_spread(key)];
        p
    })
}

/// Matching pods per value of `key`, sorted, over nodes and in-flight claims.
fn skew(s: &Sim, key: &str) -> Vec<usize> {
    let mut m: BTreeMap<String, usize> = BTreeMap::new();
    for (p, at) in &s.at {
        if !p.starts_with('r') {
            continue;
        }
        let l = &s.node_labels[at];
        *m.entry(l[key].clone()).or_default() += 1;
    }
    let mut v: Vec<usize> = m.into_values().collect();
    v.sort();
    v
}

#[test]
fn should_balance_pods_across_zones_with_in_flight_nodes() {
    let mut s = Sim::new(vec![np()]).in_flight();
    s.run(spread_pods("r1", 4, ZONE));
    assert_eq!(skew(&s, ZONE), vec![1, 1, 2]);
    let first = s.launched();
    s.run(spread_pods("r2", 5, ZONE));
    assert_eq!(skew(&s, ZONE), vec![3, 3, 3]);
    assert_eq!(
        s.launched(),
        first,
        "no new node: the in-flight ones hold the pods"
    );
}

#[test]
fn should_balance_pods_across_hostnames_with_in_flight_nodes() {
    let mut s = Sim::new(vec![np()]).in_flight();
    s.run(spread_pods("r1", 4, HOST));
    assert_eq!(skew(&s, HOST), vec![1, 1, 1, 1]);
    s.run(spread_pods("r2", 5, HOST));
    assert_eq!(skew(&s, HOST), vec![1; 9]);
}

#[test]
fn should_pack_in_flight_nodes_before_launching_new_nodes() {
    let medium = fake("medium", 4, 4, 4, &[]).cpu("4.25").build();
    let mut s = Sim::new(vec![pool("default", vec![medium]).require(
        CT,
        In,
        &["spot", "on-demand"],
    )])
    .in_flight();
    // batches of 7, 3, 9, 1, 5, 8, 2, 6, 4, 0 pods
    for (b, n) in [7, 3, 9, 1, 5, 8, 2, 6, 4, 0].into_iter().enumerate() {
        s.run(pods(&format!("b{b}"), n, |p| p.cpu("1")));
    }
    let free = s
        .claims
        .iter()
        .filter(|c| {
            let used: i64 = c.pods.iter().map(|p| p.requests.cpu).sum();
            4150 - used >= 1000
        })
        .count();
    assert!(free <= 1, "{free} nodes with a cpu free");
}

// ---------------------------------------------------------------- Taints

#[test]
fn should_assume_pod_will_schedule_to_a_tainted_node_with_no_taints() {
    let mut s = Sim::new(vec![np()]);
    s.run(vec![cpu_pod("first", "8")]);
    for n in &mut s.nodes {
        n.pods.clear();
        n.initialized = false;
    }
    s.run(vec![pod("second")]);
    assert_eq!(s.target("first"), s.target("second"));
}

#[test]
fn should_not_assume_pod_will_schedule_to_a_tainted_node() {
    let mut s = Sim::new(vec![np()]);
    s.run(vec![cpu_pod("first", "8")]);
    for n in &mut s.nodes {
        n.pods.clear();
        n.taints
            .push(Taint::new("foo.com/taint", "tainted", Effect::NoSchedule));
    }
    s.run(vec![pod("second")]);
    assert!(s.scheduled("second"));
    assert_ne!(s.target("first"), s.target("second"));
}

#[test]
fn should_not_assume_pod_will_schedule_to_a_node_with_startup_taints_after_initialization() {
    let mut s = Sim::new(vec![np().startup_taint("ignore-me", "nothing-to-see-here")]);
    s.run(vec![pod("first")]);
    for n in &mut s.nodes {
        n.pods.clear();
        n.taints.push(Taint::new(
            "ignore-me",
            "nothing-to-see-here",
            Effect::NoSchedule,
        ));
    }
    s.run(vec![pod("second")]);
    assert!(s.scheduled("second"));
    assert_ne!(s.target("first"), s.target("second"));
}

#[test]
fn should_assume_pod_will_schedule_to_a_tainted_node_with_a_custom_startup_taint() {
    // In flight: the claim is what the planner counts, with the pool's startup taint ignored.
    let mut s = Sim::new(vec![np().startup_taint("foo.com/taint", "tainted")]).in_flight();
    s.run(vec![cpu_pod("first", "8")]);
    for c in &mut s.claims {
        c.pods.clear();
    }
    s.run(vec![pod("second")]);
    assert_eq!(s.target("first"), s.target("second"));
}

#[test]
fn should_assume_pod_will_schedule_to_a_node_with_ephemeral_taint_not_ready_noexecute_when_the_node_is_uninitialized()
 {
    // The claim is in flight and its node registered, not initialized, tainted
    // not-ready:NoExecute: the planner counts the claim, not the node's taints.
    let mut s = Sim::new(vec![np()]).in_flight();
    s.run(vec![pod("first")]);
    let claim = s.claims[0].name.clone();
    s.claims[0].pods.clear();
    let t = fake_types()
        .into_iter()
        .find(|t| t.name == s.claims[0].instance_types[0])
        .unwrap();
    let zone = s.node_labels[&claim][ZONE].clone();
    let mut n = node(&claim, &t, &zone)
        .pool("default")
        .initialized(false)
        .taint(Taint::new(
            "node.kubernetes.io/not-ready",
            "",
            Effect::NoExecute,
        ))
        .build();
    n.claim = Some(claim.clone());
    s.nodes.push(n);
    s.run(vec![pod("second")]);
    assert_eq!(s.target("second"), Some(claim.as_str()));
    // once initialized, the claim is no longer in flight and the taint keeps pods off
    s.claims.clear();
    for n in &mut s.nodes {
        n.initialized = true;
    }
    s.run(vec![pod("third")]);
    assert!(s.scheduled("third"));
    assert_ne!(s.target("third"), Some(claim.as_str()));
}

#[test]
fn small_pods_take_room_paid_for_on_claims_of_large_pods() {
    // Not an upstream case: "should pack small and large pods together" cut down. Ten 1.8G
    // pods open five default-instance-type claims, each with 0.68G and three pod slots
    // left; five 400M pods fit there at no extra cost, so five nodes are enough.
    let mut all = pods("large", 10, |p| p.select(ARCH, "amd64").mem("1.8G"));
    all.extend(pods("small", 5, |p| p.select(ARCH, "amd64").mem("400M")));
    let s = once(vec![np()], all);
    assert_eq!(s.at.len(), 15);
    assert_eq!(s.launched(), 5);
}

#[test]
fn should_pack_small_and_large_pods_together_with_110_pod_slots() {
    // The upstream case with pod slots that do not run out first: it passes, so what keeps
    // the small pods off the large pods' claims above is the pod slots' share.
    let types: Vec<InstanceType> = fake_types()
        .into_iter()
        .map(|mut t| {
            t.capacity.pods = 110;
            t
        })
        .collect();
    let mut all = pods("large", 40, |p| p.select(ARCH, "amd64").mem("1.8G"));
    all.extend(pods("small", 20, |p| p.select(ARCH, "amd64").mem("400M")));
    let s = once(vec![pool("default", types)], all);
    assert_eq!(s.at.len(), 60);
    assert_eq!(s.launched(), 20);
}

// ================================================================ Existing Nodes

fn unowned(name: &str, cpu: &str, mem: &str) -> Node {
    let t = itype("unowned").cpu(cpu).mem(mem).build();
    node(name, &t, Z[0]).build()
}

#[test]
fn should_schedule_a_pod_to_an_existing_node_unowned_by_karpenter() {
    let mut s = Sim::new(vec![np()]);
    s.nodes.push(unowned("n", "10", "10Gi"));
    s.run(vec![tiny("p")]);
    assert_eq!(s.target("p"), Some("n"));
}

#[test]
fn should_schedule_multiple_pods_to_an_existing_node_unowned_by_karpenter() {
    let mut s = Sim::new(vec![np()]);
    s.nodes.push(unowned("n", "10", "100Gi"));
    s.run(pods("p", 100, |p| p.cpu("10m")));
    assert_eq!(s.at.len(), 100);
    assert!(s.at.values().all(|v| v == "n"));
}

#[test]
fn should_order_initialized_nodes_for_scheduling_uninitialized_nodes() {
    let mut s = Sim::new(vec![np()]);
    let t = &fake_types()[0];
    for i in 0..10 {
        s.nodes.push(
            node(&format!("n{i}"), t, Z[0])
                .pool("default")
                .initialized(i == 7)
                .build(),
        );
    }
    s.run(vec![pod("p")]);
    assert_eq!(s.target("p"), Some("n7"));
}

#[test]
fn should_consider_a_pod_incompatible_with_an_existing_node_but_compatible_with_nodepool() {
    let mut n = unowned("n", "10", "10Gi");
    n.labels.remove(ZONE);
    let mut s = Sim::new(vec![]);
    s.nodes.push(n.clone());
    s.run(vec![pod("p").require(ZONE, In, &[Z[0]])]);
    assert!(!s.scheduled("p"));
    let mut s = Sim::new(vec![np()]);
    s.nodes.push(n);
    s.run(vec![pod("p").require(ZONE, In, &[Z[0]])]);
    assert!(s.scheduled("p"));
    assert_ne!(s.target("p"), Some("n"));
}

#[test]
fn should_not_subtract_daemonset_overhead_that_is_not_strictly_compatible_with_an_existing_node() {
    let mut n = unowned("n", "1", "1Gi");
    n.labels.remove(ZONE);
    n.pool = Some("default".into());
    let mut d = ds("big", "100", "100Gi");
    d.node_selector = NodeSelector::single(req(ZONE, In, &[Z[0]]));
    let mut s = Sim::new(vec![np()]).with_ds(d);
    s.nodes.push(n);
    s.run(vec![pod("p").cpu("1").mem("1Gi")]);
    assert_eq!(s.target("p"), Some("n"));
    s.run(vec![pod("p2").cpu("1").mem("1Gi")]);
    assert!(
        !s.scheduled("p2"),
        "the DaemonSet may land on every new node in zone 1 and takes all of it"
    );
}

// ================================================================ Resource Limits

#[test]
fn should_not_schedule_when_limits_are_exceeded() {
    let mut s = Sim::new(vec![np().limit("cpu", "20")]);
    let big = fake("huge", 100, 4, 5, &[]).build();
    s.nodes.push(node("n", &big, Z[0]).pool("default").build());
    // the node is full
    s.nodes[0].allocatable.pods = 0;
    s.run(vec![pod("p")]);
    assert!(!s.scheduled("p"));
}

#[test]
fn should_schedule_if_limits_would_be_met() {
    let s = once(vec![np().limit("cpu", "2")], vec![cpu_pod("p", "1.75")]);
    assert!(s.scheduled("p"));
}

#[test]
fn should_partially_schedule_if_limits_would_be_exceeded() {
    let mk = |n: &str| {
        let mut p = cpu_pod(n, "1.5").label("app", "foo");
        p.0.anti_affinity = vec![PodAffinityTerm {
            held: false,
            topology_key: HOST.into(),
            selector: req("app", In, &["foo"]),
            namespaces: TermNamespaces::Own,
        }];
        p
    };
    let s = once(vec![np().limit("cpu", "3")], vec![mk("a"), mk("b")]);
    assert_eq!(
        [s.scheduled("a"), s.scheduled("b")]
            .iter()
            .filter(|x| **x)
            .count(),
        1
    );
}

#[test]
fn should_not_schedule_if_limits_would_be_exceeded() {
    let s = once(vec![np().limit("cpu", "2")], vec![cpu_pod("p", "2.1")]);
    assert!(!s.scheduled("p"));
}

#[test]
fn should_not_schedule_if_limits_would_be_exceeded_gpu() {
    // A pods limit of 1, and the only type with the device holds 5 pods.
    let s = once(
        vec![np().limit("pods", "1")],
        vec![pod("p").res(VENDOR_A, "1")],
    );
    assert!(!s.scheduled("p"));
}

#[test]
fn should_not_schedule_to_a_nodepool_after_a_scheduling_round_if_limits_would_be_exceeded() {
    let mut s = Sim::new(vec![np().limit("cpu", "2")]);
    s.run(vec![cpu_pod("first", "1.75")]);
    assert!(s.scheduled("first"));
    s.run(vec![cpu_pod("second", "1.75")]);
    assert!(!s.scheduled("second"));
}

#[test]
fn should_not_schedule_if_limits_would_be_exceeded_node() {
    let mk = |n: &str| {
        let mut p = cpu_pod(n, "1.5").label("app", "foo");
        p.0.anti_affinity = vec![PodAffinityTerm {
            held: false,
            topology_key: HOST.into(),
            selector: req("app", In, &["foo"]),
            namespaces: TermNamespaces::Own,
        }];
        p
    };
    let mut s = Sim::new(vec![np().limit_nodes(2)]);
    s.run(vec![mk("a")]);
    s.run(vec![mk("b")]);
    assert!(s.scheduled("a") && s.scheduled("b"));
    s.run(vec![mk("c")]);
    assert!(!s.scheduled("c"));
}

#[test]
fn a_heavier_nodepool_at_its_limit_gives_way_to_a_lighter_one() {
    // NodePool weights with limits: the heavy pool's limit refuses every type, so the pod
    // falls back to the lighter pool.
    let s = once(
        vec![
            np().weight(100).limit("cpu", "1"),
            pool("light", fake_types()),
        ],
        vec![pod("p")],
    );
    assert_eq!(s.label("p", labels::NODEPOOL).as_deref(), Some("light"));
}

// ================================================================ Daemonsets

fn ds_pod() -> PodBuilder {
    pod("p").cpu("1").mem("1Gi")
}

fn capacity_of(s: &Sim, p: &str) -> (i64, i64) {
    let t = type_of(s, p);
    let all: Vec<InstanceType> = fake_types();
    let it = all.iter().find(|x| x.name == t).unwrap();
    (it.capacity.cpu / 1000, it.capacity.memory >> 30)
}

#[test]
fn should_account_for_daemonsets() {
    let mut s = Sim::new(vec![np()]).with_ds(ds("d", "2", "2Gi"));
    s.run(vec![ds_pod()]);
    assert_eq!(capacity_of(&s, "p"), (4, 4));
}

#[test]
fn should_account_for_daemonset_hostports() {
    let mut d = ds("d", "2", "2Gi");
    d.host_ports = vec![autoscaler_core::model::HostPort::tcp(8080)];
    let mut s = Sim::new(vec![np()]).with_ds(d);
    s.run(vec![ds_pod().host_port(8080)]);
    assert!(!s.scheduled("p"));
    assert_eq!(s.launched(), 0);
}

#[test]
fn should_account_for_daemonsets_with_startup_taint() {
    let mut s =
        Sim::new(vec![np().startup_taint("foo.com/taint", "")]).with_ds(ds("d", "2", "2Gi"));
    s.run(vec![ds_pod()]);
    assert_eq!(capacity_of(&s, "p"), (4, 4));
}

#[test]
fn should_not_schedule_if_daemonset_overhead_is_too_large() {
    let mut s = Sim::new(vec![np()]).with_ds(ds("d", "10000", "10000Gi"));
    s.run(vec![pod("p")]);
    assert!(!s.scheduled("p"));
}

#[test]
fn should_ignore_daemonsets_without_matching_tolerations() {
    let mut s = Sim::new(vec![np().taint("foo", "bar")]).with_ds(ds("d", "2", "2Gi"));
    s.run(vec![ds_pod().tolerate(Toleration::exists(""))]);
    assert_eq!(capacity_of(&s, "p"), (2, 2));
}

#[test]
fn should_ignore_daemonsets_with_an_invalid_selector() {
    let mut d = ds("d", "2", "2Gi");
    d.node_selector = NodeSelector::single(req("node", In, &["invalid"]));
    let mut s = Sim::new(vec![np()]).with_ds(d);
    s.run(vec![ds_pod()]);
    assert_eq!(capacity_of(&s, "p"), (2, 2));
}

#[test]
fn should_ignore_daemonsets_when_no_instance_types_meet_the_daemonset_requirements() {
    let mut d = ds("d", "2", "2Gi");
    d.node_selector = NodeSelector::single(req(IT, In, &["non-existent-instance-type"]));
    let mut s = Sim::new(vec![np()]).with_ds(d);
    s.run(vec![ds_pod()]);
    assert_eq!(capacity_of(&s, "p"), (2, 2));
}

#[test]
fn should_account_for_daemonsets_with_a_custom_label_nodeselector_that_matches_the_nodepool() {
    let mut d = ds("d", "2", "2Gi");
    d.node_selector = NodeSelector::single(req("purpose", In, &["monitoring"]));
    let mut s = Sim::new(vec![np().label("purpose", "monitoring")]).with_ds(d);
    s.run(vec![ds_pod()]);
    assert_eq!(capacity_of(&s, "p"), (4, 4));
}

#[test]
fn should_filter_out_daemonsets_based_on_instance_type_requirements() {
    let mut small = ds("small", "1", "0");
    small.node_selector = NodeSelector::single(req(SIZE, In, &["small"]));
    let mut large = ds("large", "10", "0");
    large.node_selector = NodeSelector::single(req(SIZE, In, &["large"]));
    let mut s = Sim::new(vec![np()]).with_ds(small).with_ds(large);
    s.run(vec![ds_pod()]);
    assert_eq!(capacity_of(&s, "p"), (4, 4));
}

#[test]
fn should_account_daemonsets_with_notin_operator_and_unspecified_key() {
    let mut d = ds("d", "2", "2Gi");
    d.node_selector = NodeSelector::single(req("foo", NotIn, &["bar"]));
    let mut s = Sim::new(vec![np()]).with_ds(d);
    s.run(vec![ds_pod().require(ZONE, In, &[Z[1]])]);
    assert_eq!(capacity_of(&s, "p"), (4, 4));
}

#[test]
fn should_consider_a_daemonset_schedulable_with_multiple_node_affinity_terms() {
    let mut d = ds("d", "2", "2Gi");
    d.node_selector = NodeSelector {
        terms: vec![req("foo", In, &["voo"]), req("foo", In, &["bar"])],
    };
    let mut s = Sim::new(vec![np().label("foo", "bar")]).with_ds(d);
    s.run(vec![ds_pod()]);
    assert_eq!(capacity_of(&s, "p"), (4, 4));
}

#[test]
fn should_consider_a_daemonset_schedulable_with_a_prefernoschedule_taint() {
    let mut p = np();
    p.0.taints
        .push(Taint::new("test", "", Effect::PreferNoSchedule));
    let mut s = Sim::new(vec![p]).with_ds(ds("d", "2", "2Gi"));
    s.run(vec![ds_pod()]);
    assert_eq!(capacity_of(&s, "p"), (4, 4));
}

#[test]
fn should_not_account_for_daemonset_hostports_when_daemonset_would_not_schedule_on_selected_node() {
    let mut large = ds("large", "4", "4Gi");
    large.node_selector = NodeSelector::single(req(SIZE, In, &["large"]));
    large.host_ports = vec![autoscaler_core::model::HostPort::tcp(8080)];
    let mut small = ds("small", "2", "2Gi");
    small.node_selector = NodeSelector::single(req(SIZE, In, &["small"]));
    small.host_ports = vec![autoscaler_core::model::HostPort::tcp(8081)];
    let mut s = Sim::new(vec![np()]).with_ds(large).with_ds(small);
    s.run(vec![ds_pod().require(SIZE, In, &["small"]).host_port(8080)]);
    assert_eq!(s.label("p", SIZE).as_deref(), Some("small"));
    assert_eq!(capacity_of(&s, "p"), (4, 4));
}

// ================================================================ Multiple NodePools

#[test]
fn should_schedule_to_an_explicitly_selected_nodepool() {
    let s = once(
        vec![pool("a", fake_types()), pool("b", fake_types())],
        vec![pod("p").select(labels::NODEPOOL, "b")],
    );
    assert_eq!(s.label("p", labels::NODEPOOL).as_deref(), Some("b"));
}

#[test]
fn should_schedule_to_a_nodepool_by_labels() {
    let s = once(
        vec![
            pool("a", fake_types()),
            pool("b", fake_types()).label("foo", "bar"),
        ],
        vec![pod("p").select("foo", "bar")],
    );
    assert_eq!(s.label("p", labels::NODEPOOL).as_deref(), Some("b"));
}

#[test]
fn should_not_match_nodepool_with_prefernoschedule_taint_when_other_nodepool_match() {
    let mut a = pool("a", fake_types());
    a.0.taints
        .push(Taint::new("foo", "bar", Effect::PreferNoSchedule));
    let s = once(vec![a, pool("b", fake_types())], vec![pod("p")]);
    assert_eq!(s.label("p", labels::NODEPOOL).as_deref(), Some("b"));
}

#[test]
fn should_schedule_to_the_nodepool_with_the_highest_priority_always() {
    let s = once(
        vec![
            pool("a", fake_types()),
            pool("b", fake_types()).weight(20),
            pool("c", fake_types()).weight(100),
        ],
        pods("p", 3, |p| p),
    );
    for i in 0..3 {
        assert_eq!(
            s.label(&format!("p-{i}"), labels::NODEPOOL).as_deref(),
            Some("c")
        );
    }
}

#[test]
fn should_schedule_to_explicitly_selected_nodepool_even_if_other_nodepools_are_higher_priority() {
    let s = once(
        vec![
            pool("a", fake_types()),
            pool("b", fake_types()).weight(20),
            pool("c", fake_types()).weight(100),
        ],
        vec![pod("p").select(labels::NODEPOOL, "a")],
    );
    assert_eq!(s.label("p", labels::NODEPOOL).as_deref(), Some("a"));
}

// ================================================================ NodeClaim creation

#[test]
fn should_create_a_nodeclaim_request_restricting_instance_types_on_architecture() {
    let s = once(vec![np().require(ARCH, In, &["arm64"])], vec![pod("p")]);
    assert_eq!(
        claim_types(&s.last.new_claims[0]),
        vec!["arm-instance-type"]
    );
}

#[test]
fn should_create_a_nodeclaim_request_restricting_instance_types_based_on_pod_resource_requests() {
    let s = once(vec![np()], vec![pod("p").res(VENDOR_A, "1")]);
    assert_eq!(
        claim_types(&s.last.new_claims[0]),
        vec!["gpu-vendor-instance-type"]
    );
}

#[test]
fn should_not_double_count_daemon_overhead_when_multiple_pods_are_scheduled_to_the_same_nodeclaim()
{
    // DaemonSet 1 cpu; two pods of 0.4 cpu share a small node (1.9 allocatable).
    let mut s = Sim::new(vec![np()]).with_ds(ds("d", "1", "0"));
    s.run(vec![cpu_pod("a", "400m"), cpu_pod("b", "400m")]);
    assert_eq!(s.target("a"), s.target("b"));
    assert_eq!(type_of(&s, "a"), "small-instance-type");
}
