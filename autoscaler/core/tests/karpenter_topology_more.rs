//! More of Karpenter's scheduling topology suite (`pkg/controllers/provisioning/scheduling/
//! topology_test.go`): the cases `karpenter_topology.rs` does not port, among them unknown keys
//! and null selectors, two-round skew cases where the NodePool changes between rounds,
//! NodeTaintsPolicy and NodeAffinityPolicy over domains NodePools and nodes give, pod affinity
//! over arch and namespaces, and the file's Taints cases. Each test is named after the upstream
//! `It()` text (with its context where two share one); the scenarios are written from the cases'
//! descriptions and asserted counts. Where this project deliberately differs, the test asserts
//! its own behaviour and names the rule of docs/src/reference/semantics.md.

use std::collections::{BTreeMap, BTreeSet};

use autoscaler_core::builders::*;
use autoscaler_core::labels;
use autoscaler_core::model::{Node, PodAffinityTerm, TermNamespaces, TopologySpread};
use autoscaler_core::plan::Plan;
use autoscaler_core::provision::plan_provisioning;
use autoscaler_core::requirements::{Constraint, Operator, Requirements, ValueSet};
use autoscaler_core::taints::{Effect, Taint, Toleration, TolerationOperator};

mod support;
use support::topology::{
    Z, dpool, labelled_spread_pods, materialize, round_snapshot, types, types_arch, types_with_pods,
};

const ZONE: &str = labels::ZONE;
const HOST: &str = labels::HOSTNAME;
const CT: &str = labels::CAPACITY_TYPE;
const ARCH: &str = labels::ARCH;
/// The label a few NodeTaintsPolicy / NodeAffinityPolicy cases spread over.
const FAKE: &str = "fake-label";

// ---------------------------------------------------------------- fixtures

/// `test In [v]`: the suite labels its spread pods `test=test`.
fn test_sel(v: &str) -> Requirements {
    Requirements::new().with("test", Operator::In, &[v])
}

fn security(v: &str) -> Requirements {
    Requirements::new().with("security", Operator::In, &[v])
}

/// What a null `labelSelector` is made into: a selector no pod matches (semantics.md, "A null
/// `labelSelector`").
fn null_selector() -> Requirements {
    let mut r = Requirements::new();
    r.add_constraint(
        "gpu-autoscaler.dev/null-selector",
        Constraint {
            allow_absent: false,
            values: ValueSet::In(BTreeSet::new()),
            gt: None,
            lt: None,
        },
    );
    r
}

fn spread(key: &str, skew: u32, selector: Requirements) -> TopologySpread {
    TopologySpread {
        max_skew: skew,
        topology_key: key.into(),
        selector,
        hard: true,
        min_domains: 0,
        honor_taints: false,
        ignore_node_affinity: false,
    }
}

fn term(key: &str, selector: Requirements, namespaces: TermNamespaces) -> PodAffinityTerm {
    PodAffinityTerm {
        held: false,
        topology_key: key.into(),
        selector,
        namespaces,
    }
}

/// `n` pods `<prefix>-<i>` labelled `test=test` with these spreads.
fn test_pods(prefix: &str, n: usize, spreads: &[TopologySpread]) -> Vec<PodBuilder> {
    labelled_spread_pods(prefix, n, "test", spreads)
}

fn with_cpu(pods: Vec<PodBuilder>, cpu: &str) -> Vec<PodBuilder> {
    pods.into_iter().map(|p| p.cpu(cpu)).collect()
}

/// A cluster planned round after round: each round plans the pods given, then turns the
/// plan into nodes. Its NodePools may change between rounds, as upstream re-applies its
/// NodePool between two `ExpectProvisioned` calls.
struct Cluster {
    pools: Vec<PoolBuilder>,
    nodes: Vec<Node>,
    round: usize,
}

impl Cluster {
    fn new(pools: Vec<PoolBuilder>) -> Self {
        Cluster {
            pools,
            nodes: vec![],
            round: 0,
        }
    }

    /// Plans `pods` (renamed `r<round>-<name>`), makes nodes of the plan, returns it.
    fn run(&mut self, pods: Vec<PodBuilder>) -> Plan {
        self.round += 1;
        let r = self.round;
        let snap = round_snapshot(pods, r, &self.nodes, &self.pools);
        let plan = plan_provisioning(&snap);
        eprintln!("--- round {r}\n{}", plan.render());
        assert_eq!(plan, plan_provisioning(&snap), "deterministic");
        materialize(&snap, &plan, r, &mut self.nodes);
        plan
    }

    fn add_node(&mut self, n: NodeBuilder) {
        self.nodes.push(n.build());
    }

    /// Pods of namespace `default` that `selector` matches, per value of `key` on their
    /// nodes (nodes without the key left out), sorted: upstream's `ExpectSkew`.
    fn skew(&self, key: &str, selector: &Requirements) -> Vec<usize> {
        let mut m: BTreeMap<&str, usize> = BTreeMap::new();
        for n in &self.nodes {
            let Some(v) = n.labels.get(key) else { continue };
            let c = n
                .pods
                .iter()
                .filter(|p| p.key.namespace == "default" && selector.matches(&p.labels))
                .count();
            if c > 0 {
                *m.entry(v).or_default() += c;
            }
        }
        let mut v: Vec<usize> = m.into_values().collect();
        v.sort();
        v
    }

    /// The node pod `name` (of any round) was put on.
    fn node_of(&self, name: &str) -> Option<&Node> {
        let suffix = format!("-{name}");
        self.nodes
            .iter()
            .find(|n| n.pods.iter().any(|p| p.key.name.ends_with(&suffix)))
    }
}

fn waiting(plan: &Plan) -> BTreeSet<String> {
    plan.unschedulable
        .iter()
        .map(|u| u.pod.name.clone())
        .collect()
}

// ---------------------------------------------------------------- Topology

#[test]
fn should_ignore_unknown_topology_keys() {
    // Upstream: the pod spread over a key nothing carries stays pending, the plain one gets a
    // node. Ours the same, with a reason naming the key (semantics.md, a hard spread over a
    // key that is not zone or hostname: "a key no node can carry makes the pod unschedulable").
    let mut c = Cluster::new(vec![dpool()]);
    let mut spread_pod = pod("unknown-key").label("test", "test");
    spread_pod.0.spread = vec![spread("unknown", 1, test_sel("test"))];
    let plan = c.run(vec![spread_pod, pod("plain")]);
    assert_eq!(
        waiting(&plan),
        BTreeSet::from(["r1-unknown-key".to_string()]),
        "{}",
        plan.render()
    );
    assert!(
        plan.unschedulable[0].reason.contains("unknown"),
        "{}",
        plan.render()
    );
    assert!(c.node_of("plain").is_some(), "{}", plan.render());
}

#[test]
fn should_not_spread_when_a_nil_label_selector_is_defined() {
    // A zone spread whose selector is null counts no pod, so it never binds: both pods share
    // a zone (and here a node).
    let mut c = Cluster::new(vec![dpool()]);
    let plan = c.run(test_pods("p", 2, &[spread(ZONE, 1, null_selector())]));
    assert!(plan.unschedulable.is_empty(), "{}", plan.render());
    assert_eq!(
        c.skew(ZONE, &test_sel("test")),
        vec![2],
        "{}",
        plan.render()
    );
}

// ---------------------------------------------------------------- Zonal

#[test]
fn zonal_should_balance_pods_across_zones_match_expressions() {
    // The selector written as an expression (`test In [test]`) rather than match labels.
    let mut c = Cluster::new(vec![dpool()]);
    let sel = Requirements::new().with("test", Operator::In, &["test"]);
    c.run(test_pods("p", 4, &[spread(ZONE, 1, sel.clone())]));
    assert_eq!(c.skew(ZONE, &sel), vec![1, 1, 2]);
}

#[test]
fn zonal_should_respect_nodepool_zonal_constraints() {
    // The NodePool's requirements replaced by `zone In [all three]`.
    let mut c = Cluster::new(vec![pool("default", types()).require(
        ZONE,
        Operator::In,
        &Z,
    )]);
    let plan = c.run(test_pods("p", 4, &[spread(ZONE, 1, test_sel("test"))]));
    assert!(plan.unschedulable.is_empty(), "{}", plan.render());
    assert_eq!(c.skew(ZONE, &test_sel("test")), vec![1, 1, 2]);
}

/// The NodePool of the two-round zonal cases, launching in `zones` only.
fn pool_in_zones(zones: &[&str]) -> PoolBuilder {
    pool("default", types()).require(ZONE, Operator::In, zones)
}

/// Round 1 may only launch in zone 1 and puts one 1.1-cpu pod there, with `first_spread`;
/// round 2 may only launch in zones 2 and 3 and brings ten pods spread over zones with skew 1:
/// with zone 1 at one pod, zones 2 and 3 take two each and six pods wait.
fn zone_1_then_zones_2_and_3(first_spread: &[TopologySpread]) {
    let sp = [spread(ZONE, 1, test_sel("test"))];
    let mut c = Cluster::new(vec![pool_in_zones(&Z[..1])]);
    c.run(with_cpu(test_pods("first", 1, first_spread), "1.1"));
    assert_eq!(c.skew(ZONE, &test_sel("test")), vec![1]);
    c.pools = vec![pool_in_zones(&Z[1..])];
    let plan = c.run(with_cpu(test_pods("p", 10, &sp), "1.1"));
    assert_eq!(
        c.skew(ZONE, &test_sel("test")),
        vec![1, 2, 2],
        "{}",
        plan.render()
    );
    assert_eq!(plan.unschedulable.len(), 6, "{}", plan.render());
}

#[test]
fn zonal_should_not_violate_max_skew_when_unsat_do_not_schedule() {
    zone_1_then_zones_2_and_3(&[spread(ZONE, 1, test_sel("test"))]);
}

#[test]
fn zonal_should_not_violate_max_skew_when_unsat_do_not_schedule_discover_domains() {
    // The zone-1 pod has no spread of its own: zone 1 is found from the node it runs on, and
    // still counts.
    zone_1_then_zones_2_and_3(&[]);
}

// ---------------------------------------------------------------- CapacityType

#[test]
fn capacity_type_should_not_violate_max_skew_when_unsat_do_not_schedule_capacity_type() {
    // Round 1 may only launch spot and puts one pod there; round 2 only on demand: two pods go
    // on demand (one past spot's one) and three wait.
    let sp = [spread(CT, 1, test_sel("test"))];
    let ct_pool = |ct: &str| pool("default", types()).require(CT, Operator::In, &[ct]);
    let mut c = Cluster::new(vec![ct_pool("spot")]);
    c.run(with_cpu(test_pods("first", 1, &sp), "1.1"));
    assert_eq!(c.skew(CT, &test_sel("test")), vec![1]);
    assert_eq!(c.node_of("first-0").unwrap().labels[CT], "spot");
    c.pools = vec![ct_pool("on-demand")];
    let plan = c.run(with_cpu(test_pods("p", 5, &sp), "1.1"));
    assert_eq!(
        c.skew(CT, &test_sel("test")),
        vec![1, 2],
        "{}",
        plan.render()
    );
    assert_eq!(plan.unschedulable.len(), 3, "{}", plan.render());
}

// ---------------------------------------------------------------- NodeTaintsPolicy

/// The default NodePool giving `fake-label=foo`, and a NodePool tainted `taint-key` giving
/// `fake-label=bar`.
fn foo_and_tainted_bar_pools() -> Vec<PoolBuilder> {
    vec![
        dpool().require(FAKE, Operator::In, &["foo"]),
        pool("tainted", types())
            .require(CT, Operator::Exists, &[])
            .require(FAKE, Operator::In, &["bar"])
            .taint("taint-key", "taint-value"),
    ]
}

#[test]
fn should_balance_pods_across_a_label_when_discovered_from_the_nodepool_node_taints_policy_ignore()
{
    // Under Ignore, `bar` is a domain though the pods do not tolerate its NodePool: it stays
    // empty, so `foo` takes one pod (maxSkew) and the other waits.
    let mut c = Cluster::new(foo_and_tainted_bar_pools());
    let plan = c.run(test_pods("p", 2, &[spread(FAKE, 1, test_sel("test"))]));
    assert_eq!(
        c.skew(FAKE, &test_sel("test")),
        vec![1],
        "{}",
        plan.render()
    );
    assert_eq!(plan.unschedulable.len(), 1, "{}", plan.render());
    let n = c.nodes.iter().find(|n| !n.pods.is_empty()).unwrap();
    assert_eq!(n.labels.get(FAKE).map(String::as_str), Some("foo"));
}

#[test]
fn should_balance_pods_across_a_label_when_discovered_from_the_nodepool_node_taints_policy_honor() {
    // Under Honor the untolerated NodePool gives no domain: both pods go to `foo`.
    let mut c = Cluster::new(foo_and_tainted_bar_pools());
    let mut sp = spread(FAKE, 1, test_sel("test"));
    sp.honor_taints = true;
    let plan = c.run(test_pods("p", 2, &[sp]));
    assert!(plan.unschedulable.is_empty(), "{}", plan.render());
    assert_eq!(
        c.skew(FAKE, &test_sel("test")),
        vec![2],
        "{}",
        plan.render()
    );
}

// ---------------------------------------------------------------- NodeAffinityPolicy

/// A NodePool labelling its nodes `fake-label=baz, selector=value`, and two existing
/// 100m-cpu nodes with `fake-label` foo and bar and `selector=mismatch`.
fn affinity_policy_cluster() -> Cluster {
    let mut c = Cluster::new(vec![dpool().label(FAKE, "baz").label("selector", "value")]);
    let tiny = itype("tiny")
        .cpu("100m")
        .mem("1Gi")
        .on_demand(&Z, 0.01)
        .build();
    for v in ["foo", "bar"] {
        c.add_node(
            node(&format!("node-{v}"), &tiny, Z[0])
                .label(CT, "on-demand")
                .label(FAKE, v)
                .label("selector", "mismatch"),
        );
    }
    c
}

fn affinity_policy_pods(ignore_node_affinity: bool) -> Vec<PodBuilder> {
    let mut sp = spread(FAKE, 1, test_sel("test"));
    sp.ignore_node_affinity = ignore_node_affinity;
    test_pods("p", 5, &[sp])
        .into_iter()
        .map(|p| p.cpu("1").select("selector", "value"))
        .collect()
}

#[test]
fn should_balance_pods_across_a_label_node_affinity_policy_ignore() {
    // Under Ignore the nodes the pods cannot select give domains foo and bar, empty for good:
    // baz, the NodePool's, takes one pod and four wait.
    let mut c = affinity_policy_cluster();
    let plan = c.run(affinity_policy_pods(true));
    assert_eq!(
        c.skew(FAKE, &test_sel("test")),
        vec![1],
        "{}",
        plan.render()
    );
    assert_eq!(plan.unschedulable.len(), 4, "{}", plan.render());
    // The domain they wait on was the plan's choice, not a typo of theirs.
    for u in &plan.unschedulable {
        assert!(!u.reason.contains("did you mean"), "{}", u.reason);
    }
}

#[test]
fn should_balance_pods_across_a_label_node_affinity_policy_honor() {
    // Under Honor only baz is a domain: all five go there.
    let mut c = affinity_policy_cluster();
    let plan = c.run(affinity_policy_pods(false));
    assert!(plan.unschedulable.is_empty(), "{}", plan.render());
    assert_eq!(
        c.skew(FAKE, &test_sel("test")),
        vec![5],
        "{}",
        plan.render()
    );
}

// ---------------------------------------------------------------- Pod Affinity/Anti-Affinity

#[test]
fn should_schedule_a_pod_with_empty_pod_affinity_and_anti_affinity() {
    let mut c = Cluster::new(vec![dpool()]);
    let mut p = pod("empty");
    p.0.affinity = vec![];
    p.0.anti_affinity = vec![];
    let plan = c.run(vec![p]);
    assert!(plan.unschedulable.is_empty(), "{}", plan.render());
    assert!(c.node_of("empty").is_some(), "{}", plan.render());
}

#[test]
fn should_respect_pod_affinity_arch() {
    // Two s2 pods spread over hosts; the first needs arm64, the second needs the arch of an
    // s2 pod: same arch, different nodes (semantics.md, required pod affinity over a key that
    // is not zone or hostname).
    let mut c = Cluster::new(vec![pool("default", types_arch()).require(
        CT,
        Operator::Exists,
        &[],
    )]);
    let host = vec![spread(HOST, 1, security("s2"))];
    let mut first = pod("aff1")
        .label("security", "s2")
        .cpu("2")
        .select(ARCH, "arm64");
    first.0.spread = host.clone();
    let mut second = pod("aff2").label("security", "s2").cpu("1");
    second.0.spread = host;
    second.0.affinity = vec![term(ARCH, security("s2"), TermNamespaces::Own)];
    let plan = c.run(vec![first, second]);
    assert!(plan.unschedulable.is_empty(), "{}", plan.render());
    let (n1, n2) = (c.node_of("aff1").unwrap(), c.node_of("aff2").unwrap());
    assert_eq!(n1.labels[ARCH], "arm64", "{}", plan.render());
    assert_eq!(n1.labels[ARCH], n2.labels[ARCH], "{}", plan.render());
    assert_ne!(n1.name, n2.name, "{}", plan.render());
}

/// `n` s2 pods `<prefix>-<i>`, each requiring a host with an s2 pod.
fn self_affine_on_host(prefix: &str, n: usize) -> Vec<PodBuilder> {
    (0..n)
        .map(|i| {
            let mut p = pod(&format!("{prefix}-{i}")).label("security", "s2");
            p.0.affinity = vec![term(HOST, security("s2"), TermNamespaces::Own)];
            p
        })
        .collect()
}

#[test]
fn should_respect_self_pod_affinity_for_first_empty_topology_domain_only_hostname() {
    // Nodes hold five pods (the upstream fake types'). The first of ten self-affine pods opens a
    // host, four more join it, five wait; a second batch finds that host full and may open no
    // other, since s2 pods are on it, though it is not ready yet.
    let mut c = Cluster::new(vec![pool("default", types_with_pods(5)).require(
        CT,
        Operator::Exists,
        &[],
    )]);
    let plan = c.run(self_affine_on_host("a", 10));
    assert_eq!(plan.new_claims.len(), 1, "{}", plan.render());
    assert_eq!(plan.new_claims[0].pods.len(), 5, "{}", plan.render());
    assert_eq!(plan.unschedulable.len(), 5, "{}", plan.render());
    // Upstream's node is not ready yet when the second batch comes: ours neither.
    for n in &mut c.nodes {
        n.initialized = false;
        n.ready = false;
    }
    let plan = c.run(self_affine_on_host("b", 10));
    assert!(
        plan.new_claims.is_empty() && plan.existing.is_empty(),
        "{}",
        plan.render()
    );
    assert_eq!(plan.unschedulable.len(), 10, "{}", plan.render());
}

/// Ten pods spread one per host, an s2 pod in `target_ns`, and a pod requiring the host of
/// an s2 pod in `namespaces`.
fn namespace_case(target_ns: &str, namespaces: TermNamespaces) -> Vec<PodBuilder> {
    let mut pods = test_pods("p", 10, &[spread(HOST, 1, test_sel("test"))]);
    pods.push(pod("target").ns(target_ns).label("security", "s2"));
    let mut aff = pod("aff");
    aff.0.affinity = vec![term(HOST, security("s2"), namespaces)];
    pods.push(aff);
    pods
}

#[test]
fn should_filter_pod_affinity_topologies_by_namespace_no_matching_pods() {
    // The term looks in its own namespace only; the s2 pod is in another.
    let mut c = Cluster::new(vec![dpool()]);
    let plan = c.run(namespace_case("other-ns-no-match", TermNamespaces::Own));
    assert!(c.node_of("target").is_some(), "{}", plan.render());
    assert!(c.node_of("aff").is_none(), "{}", plan.render());
    assert_eq!(
        waiting(&plan),
        BTreeSet::from(["r1-aff".to_string()]),
        "{}",
        plan.render()
    );
}

/// Every pod placed, and `aff` on `target`'s node.
fn assert_with_target(c: &Cluster, plan: &Plan) {
    assert!(plan.unschedulable.is_empty(), "{}", plan.render());
    assert_eq!(
        c.node_of("target").unwrap().name,
        c.node_of("aff").unwrap().name,
        "{}",
        plan.render()
    );
}

#[test]
fn should_filter_pod_affinity_topologies_by_namespace_matching_pods_namespace_list() {
    let mut c = Cluster::new(vec![dpool()]);
    let listed = TermNamespaces::Listed(BTreeSet::from(["other-ns-list".to_string()]));
    let plan = c.run(namespace_case("other-ns-list", listed));
    assert_with_target(&c, &plan);
}

#[test]
fn should_filter_pod_affinity_topologies_by_namespace_empty_namespace_selector() {
    // `namespaceSelector: {}` looks in every namespace.
    let mut c = Cluster::new(vec![dpool()]);
    let plan = c.run(namespace_case("empty-ns-selector", TermNamespaces::All));
    assert_with_target(&c, &plan);
}

// ---------------------------------------------------------------- DefaultConstraints

#[test]
fn default_constraints_should_be_a_no_op_when_no_default_constraints_are_configured() {
    // Three ReplicaSet pods without constraints share one node. (Cluster-level default spreads
    // from a scheduler configuration are not modelled here at all, so of that context only this
    // case applies.)
    let mut c = Cluster::new(vec![dpool()]);
    let plan = c.run(test_pods("p", 3, &[]));
    assert_eq!(plan.new_claims.len(), 1, "{}", plan.render());
    assert_eq!(plan.new_claims[0].pods.len(), 3, "{}", plan.render());
}

// ---------------------------------------------------------------- Taints

#[test]
fn should_taint_nodes_with_nodepool_taints() {
    let taint = Taint::new("test", "bar", Effect::NoSchedule);
    let mut c = Cluster::new(vec![dpool().taint("test", "bar")]);
    let tolerate_all_no_schedule = Toleration {
        key: String::new(),
        operator: TolerationOperator::Exists,
        value: String::new(),
        effect: Some(Effect::NoSchedule),
    };
    let plan = c.run(vec![pod("p").tolerate(tolerate_all_no_schedule)]);
    assert_eq!(plan.new_claims.len(), 1, "{}", plan.render());
    assert!(
        plan.new_claims[0].taints.contains(&taint),
        "{}",
        plan.render()
    );
    assert!(c.node_of("p").unwrap().taints.contains(&taint));
}

#[test]
fn should_schedule_pods_that_tolerate_nodepool_constraints() {
    let mut c = Cluster::new(vec![dpool().taint("test-key", "test-value")]);
    let exists = Toleration {
        effect: Some(Effect::NoSchedule),
        ..Toleration::exists("test-key")
    };
    let equal = Toleration {
        effect: Some(Effect::NoSchedule),
        ..Toleration::equal("test-key", "test-value")
    };
    let plan = c.run(vec![
        pod("exists").tolerate(exists),
        pod("equal").tolerate(equal),
    ]);
    assert!(plan.unschedulable.is_empty(), "{}", plan.render());
    assert!(c.node_of("exists").is_some() && c.node_of("equal").is_some());

    // No toleration, one for another key, and one for the key with another (empty) value:
    // neither the tainted node nor a new node of the NodePool takes them.
    let wrong_value = Toleration {
        effect: Some(Effect::NoSchedule),
        ..Toleration::equal("test-key", "")
    };
    let plan = c.run(vec![
        pod("none"),
        pod("other-key").tolerate(Toleration::exists("invalid")),
        pod("wrong-value").tolerate(wrong_value),
    ]);
    assert!(
        plan.new_claims.is_empty() && plan.existing.is_empty(),
        "{}",
        plan.render()
    );
    assert_eq!(plan.unschedulable.len(), 3, "{}", plan.render());
}

#[test]
fn should_provision_nodes_with_taints_and_schedule_pods_if_the_taint_is_only_a_startup_taint() {
    let mut c = Cluster::new(vec![
        dpool().startup_taint("ignore-me", "nothing-to-see-here"),
    ]);
    let plan = c.run(vec![pod("p")]);
    assert!(plan.unschedulable.is_empty(), "{}", plan.render());
    assert_eq!(plan.new_claims.len(), 1, "{}", plan.render());
    let claim = &plan.new_claims[0];
    assert!(claim.taints.is_empty(), "{}", plan.render());
    assert_eq!(
        claim.startup_taints,
        vec![Taint::new(
            "ignore-me",
            "nothing-to-see-here",
            Effect::NoSchedule
        )]
    );
}

#[test]
fn should_not_generate_taints_for_op_exists() {
    // A toleration is no reason to taint the node: upstream's node has only the taint every
    // new node carries until it registers, ours none.
    let mut c = Cluster::new(vec![dpool()]);
    let tol = Toleration {
        effect: Some(Effect::NoExecute),
        ..Toleration::exists("test-key")
    };
    let plan = c.run(vec![pod("p").tolerate(tol)]);
    assert_eq!(plan.new_claims.len(), 1, "{}", plan.render());
    assert!(plan.new_claims[0].taints.is_empty(), "{}", plan.render());
    assert!(
        plan.new_claims[0].startup_taints.is_empty(),
        "{}",
        plan.render()
    );
}
