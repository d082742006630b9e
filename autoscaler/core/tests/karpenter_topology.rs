//! Karpenter's scheduling topology suite (`pkg/controllers/provisioning/scheduling/
//! topology_test.go`), case by case, against the planner: zone, hostname and capacity-type
//! spread, minDomains, matchLabelKeys, NodeTaintsPolicy, pod affinity and anti-affinity, over
//! several rounds where the upstream case provisions several times. Each test names the
//! upstream case it follows in its name; the scenarios are written from the cases'
//! descriptions and asserted counts, not copied. Where this project deliberately differs, the
//! test asserts its own behaviour and says why (docs/src/reference/semantics.md).

use std::collections::{BTreeMap, BTreeSet};

use autoscaler_core::builders::*;
use autoscaler_core::instance::CapacityType;
use autoscaler_core::labels;
use autoscaler_core::model::{Node, PodAffinityTerm, Snapshot, TermNamespaces, TopologySpread};
use autoscaler_core::plan::Plan;
use autoscaler_core::provision::plan_provisioning;
use autoscaler_core::requirements::{Operator, Requirements};
use autoscaler_core::taints::{Effect, Taint, Toleration};

mod support;
use support::topology::{
    Z, dpool, labelled_spread_pods, materialize, round_snapshot, types, types_arch,
};

const ZONE: &str = labels::ZONE;
const HOST: &str = labels::HOSTNAME;
const CT: &str = labels::CAPACITY_TYPE;
const ARCH: &str = labels::ARCH;

fn sel(app: &str) -> Requirements {
    Requirements::new().with("app", Operator::In, &[app])
}

fn tsc(key: &str, skew: u32, selector: Requirements, hard: bool) -> TopologySpread {
    TopologySpread {
        max_skew: skew,
        topology_key: key.into(),
        selector,
        hard,
        min_domains: 0,
        honor_taints: false,
        ignore_node_affinity: false,
    }
}

fn term(key: &str, selector: Requirements) -> PodAffinityTerm {
    PodAffinityTerm {
        held: false,
        topology_key: key.into(),
        selector,
        namespaces: TermNamespaces::Own,
    }
}

/// A multi-round cluster: each round plans the pods given, then turns the plan into nodes.
struct Sim {
    pools: Vec<PoolBuilder>,
    nodes: Vec<Node>,
    round: usize,
    last: Plan,
    /// Plan as `--preference-policy=ignore` does (`Snapshot::ignore_preferences`).
    ignore_preferences: bool,
}

impl Sim {
    fn new(pools: Vec<PoolBuilder>) -> Self {
        Sim {
            pools,
            nodes: vec![],
            round: 0,
            last: Plan::default(),
            ignore_preferences: false,
        }
    }

    /// Plans `pods` (renamed `r<round>-<name>`), materializes the plan; returns the plan.
    fn run(&mut self, pods: Vec<PodBuilder>) -> Plan {
        self.round += 1;
        let r = self.round;
        let snap = round_snapshot(pods, r, &self.nodes, &self.pools);
        // The nodes keep the pods as given: only the plan ignores their preferences.
        let plan = if self.ignore_preferences {
            let mut ignoring = snap.clone();
            ignoring.ignore_preferences();
            plan_provisioning(&ignoring)
        } else {
            plan_provisioning(&snap)
        };
        eprintln!("--- round {r}\n{}", plan.render());
        materialize(&snap, &plan, r, &mut self.nodes);
        self.last = plan.clone();
        plan
    }

    /// Pods per value of `key` among pods matching `app` (in namespace default), sorted.
    fn skew(&self, key: &str, app: &str) -> Vec<usize> {
        let mut m: BTreeMap<String, usize> = BTreeMap::new();
        for n in &self.nodes {
            let Some(v) = n.labels.get(key) else { continue };
            let c = n
                .pods
                .iter()
                .filter(|p| {
                    p.key.namespace == "default"
                        && p.labels.get("app").map(|s| s.as_str()) == Some(app)
                })
                .count();
            if c > 0 {
                *m.entry(v.clone()).or_default() += c;
            }
        }
        let mut v: Vec<usize> = m.into_values().collect();
        v.sort();
        v
    }

    fn node_of(&self, pod: &str) -> Option<&Node> {
        self.nodes.iter().find(|n| {
            n.pods
                .iter()
                .any(|p| p.key.name.ends_with(&format!("-{pod}")) || p.key.name == pod)
        })
    }

    fn add_node(&mut self, n: NodeBuilder) {
        self.nodes.push(n.build());
    }
}

fn sorted(mut v: Vec<usize>) -> Vec<usize> {
    v.sort();
    v
}

/// `n` pods `<prefix>-<i>` labelled app=test with these spreads.
fn spread_pods(prefix: &str, n: usize, spreads: &[TopologySpread]) -> Vec<PodBuilder> {
    labelled_spread_pods(prefix, n, "app", spreads)
}

fn zone1(skew: u32) -> TopologySpread {
    tsc(ZONE, skew, sel("test"), true)
}

/// A node of m5.large (2 cpu) in `zone`, owned by pool default, holding one pod `name` of `cpu`
/// labelled app=test (so full for another 1.1 cpu pod).
fn full_node(name: &str, zone: &str, ct: &str, cpu: &str) -> NodeBuilder {
    node(name, &types()[0], zone)
        .pool("default")
        .label(CT, ct)
        .with_pod(pod(&format!("{name}-pod")).cpu(cpu).label("app", "test"))
}

// ---------------------------------------------------------------- Zonal

#[test]
fn zonal_balance_match_labels() {
    let mut s = Sim::new(vec![dpool()]);
    s.run(spread_pods("p", 4, &[zone1(1)]));
    assert_eq!(s.skew(ZONE, "test"), vec![1, 1, 2]);
}

#[test]
fn zonal_nodepool_subset_requirements() {
    let mut s = Sim::new(vec![pool("default", types()).require(
        ZONE,
        Operator::In,
        &Z[..2],
    )]);
    s.run(spread_pods("p", 4, &[zone1(1)]));
    assert_eq!(s.skew(ZONE, "test"), vec![2, 2]);
}

#[test]
fn zonal_nodepool_subset_labels() {
    let mut s = Sim::new(vec![dpool().label(ZONE, Z[0])]);
    s.run(spread_pods("p", 4, &[zone1(1)]));
    assert_eq!(s.skew(ZONE, "test"), vec![4]);
}

#[test]
fn zonal_nodepool_subset_requirements_and_labels() {
    let mut s = Sim::new(vec![
        pool("default", types())
            .require(ZONE, Operator::In, &Z[..2])
            .label(ZONE, Z[0]),
    ]);
    s.run(spread_pods("p", 4, &[zone1(1)]));
    assert_eq!(s.skew(ZONE, "test"), vec![4]);
}

#[test]
fn zonal_nodepool_subset_labels_across_nodepools() {
    let mut s = Sim::new(vec![
        pool("default", types())
            .require(ZONE, Operator::In, &Z[..2])
            .label(ZONE, Z[0]),
        pool("second", types()).label(ZONE, Z[1]),
    ]);
    s.run(spread_pods("p", 4, &[zone1(1)]));
    assert_eq!(s.skew(ZONE, "test"), vec![2, 2]);
}

#[test]
fn zonal_nodepool_constraints_existing_pod() {
    // a full node in zone 3 holds one matching pod; the pool can only launch in zones 1-2
    let mut s = Sim::new(vec![pool("default", types()).require(
        ZONE,
        Operator::In,
        &Z[..2],
    )]);
    s.add_node(full_node("z3", Z[2], "on-demand", "1.1"));
    let pods: Vec<_> = spread_pods("p", 6, &[zone1(1)])
        .into_iter()
        .map(|p| p.cpu("1.1"))
        .collect();
    s.run(pods);
    assert_eq!(s.skew(ZONE, "test"), vec![1, 2, 2]);
}

#[test]
fn zonal_schedule_to_non_minimum_domain_if_all_available() {
    let mut s = Sim::new(vec![pool("default", types()).require(
        ZONE,
        Operator::In,
        &Z[2..],
    )]);
    s.add_node(full_node("z1", Z[0], "on-demand", "1.1"));
    s.add_node(full_node("z2", Z[1], "on-demand", "1.1"));
    let pods: Vec<_> = spread_pods("p", 10, &[zone1(5)])
        .into_iter()
        .map(|p| p.cpu("1.1"))
        .collect();
    s.run(pods);
    assert_eq!(s.skew(ZONE, "test"), vec![1, 1, 6]);
}

#[test]
fn zonal_only_minimum_domains_when_already_violating() {
    // zone 1 holds three matching pods on full nodes
    let mut s = Sim::new(vec![dpool()]);
    for i in 0..3 {
        s.add_node(full_node(&format!("z1-{i}"), Z[0], "on-demand", "1.1"));
    }
    let pods: Vec<_> = spread_pods("p", 3, &[zone1(1)])
        .into_iter()
        .map(|p| p.cpu("1.1"))
        .collect();
    s.run(pods);
    assert_eq!(s.skew(ZONE, "test"), vec![1, 2, 3]);
}

#[test]
fn zonal_do_not_schedule_does_not_violate_max_skew() {
    let mut s = Sim::new(vec![pool("default", types()).require(
        ZONE,
        Operator::In,
        &Z[1..],
    )]);
    s.add_node(full_node("z1", Z[0], "on-demand", "1.1"));
    let pods: Vec<_> = spread_pods("p", 10, &[zone1(1)])
        .into_iter()
        .map(|p| p.cpu("1.1"))
        .collect();
    s.run(pods);
    assert_eq!(s.skew(ZONE, "test"), vec![1, 2, 2]);
}

#[test]
fn zonal_only_count_scheduled_matching_pods_on_nodes_with_domain() {
    let t = &types()[3];
    let mut s = Sim::new(vec![dpool()]);
    s.add_node(
        node("first", t, Z[0])
            .label(CT, "on-demand")
            .with_pod(pod("nolabels"))
            .with_pod(pod("wrongns").ns("other").label("app", "test"))
            .with_pod(pod("m1").label("app", "test"))
            .with_pod(pod("m2").label("app", "test")),
    );
    s.add_node(
        node("second", t, Z[1])
            .label(CT, "on-demand")
            .with_pod(pod("m3").label("app", "test")),
    );
    let mut third = node("third", t, Z[0])
        .label(CT, "on-demand")
        .with_pod(pod("nodomain").label("app", "test"));
    third.0.labels.remove(ZONE);
    s.add_node(third);
    s.run(spread_pods("p", 2, &[zone1(1)]));
    // m1,m2 in z1; m3 + 1 new in z2; 1 new in z3
    let counts = {
        let mut m: BTreeMap<String, usize> = BTreeMap::new();
        for n in &s.nodes {
            if let Some(z) = n.labels.get(ZONE) {
                *m.entry(z.clone()).or_default() += n
                    .pods
                    .iter()
                    .filter(|p| {
                        p.key.namespace == "default"
                            && p.labels.get("app").map(|x| x.as_str()) == Some("test")
                    })
                    .count();
            }
        }
        sorted(m.into_values().filter(|c| *c > 0).collect())
    };
    assert_eq!(counts, vec![1, 2, 2]);
}

#[test]
fn zonal_interdependent_selectors_pack_one_node() {
    let mut s = Sim::new(vec![dpool()]);
    let pods: Vec<_> = (0..5)
        .map(|i| {
            let mut p = pod(&format!("p-{i}"));
            p.0.spread = vec![tsc(HOST, 1, sel("test"), true)];
            p
        })
        .collect();
    let plan = s.run(pods);
    assert_eq!(plan.new_claims.len(), 1, "{}", plan.render());
}

#[test]
fn zonal_min_domains_above_pool_zones() {
    let mut s = Sim::new(vec![pool("default", types()).require(
        ZONE,
        Operator::In,
        &Z[..2],
    )]);
    let mut sp = zone1(1);
    sp.min_domains = 3;
    s.run(spread_pods("p", 3, &[sp]));
    assert_eq!(s.skew(ZONE, "test"), vec![1, 1]);
}

#[test]
fn zonal_min_domains_satisfied_equal() {
    let mut s = Sim::new(vec![pool("default", types()).require(
        ZONE,
        Operator::In,
        &Z,
    )]);
    let mut sp = zone1(1);
    sp.min_domains = 3;
    s.run(spread_pods("p", 11, &[sp]));
    assert_eq!(s.skew(ZONE, "test"), vec![3, 4, 4]);
}

#[test]
fn zonal_min_domains_satisfied_greater() {
    let mut s = Sim::new(vec![pool("default", types()).require(
        ZONE,
        Operator::In,
        &Z,
    )]);
    let mut sp = zone1(1);
    sp.min_domains = 2;
    s.run(spread_pods("p", 11, &[sp]));
    assert_eq!(s.skew(ZONE, "test"), vec![3, 4, 4]);
}

// ---------------------------------------------------------------- Hostname

#[test]
fn hostname_balance() {
    let mut s = Sim::new(vec![dpool()]);
    s.run(spread_pods("p", 4, &[tsc(HOST, 1, sel("test"), true)]));
    assert_eq!(s.skew(HOST, "test"), vec![1, 1, 1, 1]);
}

#[test]
fn hostname_up_to_max_skew() {
    let mut s = Sim::new(vec![dpool()]);
    s.run(spread_pods("p", 4, &[tsc(HOST, 4, sel("test"), true)]));
    assert_eq!(s.skew(HOST, "test"), vec![4]);
}

fn app_host_pod(name: &str, app: &str) -> PodBuilder {
    let mut p = pod(name).label("app", app);
    p.0.spread = vec![tsc(HOST, 1, sel(app), true)];
    p
}

#[test]
fn hostname_multiple_deployments() {
    let mut s = Sim::new(vec![dpool()]);
    let plan = s.run(vec![
        app_host_pod("a1", "app1"),
        app_host_pod("a2", "app1"),
        app_host_pod("b1", "app2"),
        app_host_pod("b2", "app2"),
    ]);
    assert!(plan.unschedulable.is_empty());
    assert_eq!(plan.new_claims.len(), 2, "{}", plan.render());
}

#[test]
fn hostname_multiple_deployments_varying_arch() {
    let mut s = Sim::new(vec![pool("default", types_arch()).require(
        CT,
        Operator::Exists,
        &[],
    )]);
    let plan = s.run(vec![
        app_host_pod("a1", "app1").require(ARCH, Operator::In, &["amd64"]),
        app_host_pod("a2", "app1").require(ARCH, Operator::In, &["amd64"]),
        app_host_pod("b1", "app2").require(ARCH, Operator::In, &["arm64"]),
        app_host_pod("b2", "app2").require(ARCH, Operator::In, &["arm64"]),
    ]);
    assert!(plan.unschedulable.is_empty(), "{}", plan.render());
    assert_eq!(plan.new_claims.len(), 4, "{}", plan.render());
}

// ---------------------------------------------------------------- Capacity type

fn ct1(skew: u32) -> TopologySpread {
    tsc(CT, skew, sel("test"), true)
}

#[test]
fn ct_balance() {
    let mut s = Sim::new(vec![dpool()]);
    s.run(spread_pods("p", 4, &[ct1(1)]));
    assert_eq!(s.skew(CT, "test"), vec![2, 2]);
}

#[test]
fn ct_nodepool_constraints() {
    let mut s = Sim::new(vec![pool("default", types()).require(
        CT,
        Operator::In,
        &["spot", "on-demand"],
    )]);
    s.run(spread_pods("p", 4, &[ct1(1)]));
    assert_eq!(s.skew(CT, "test"), vec![2, 2]);
}

#[test]
fn ct_schedule_anyway_violates() {
    let mut s = Sim::new(vec![pool("default", types()).require(
        CT,
        Operator::In,
        &["on-demand"],
    )]);
    s.add_node(full_node("spot", Z[0], "spot", "1.1"));
    let pods: Vec<_> = spread_pods("p", 5, &[tsc(CT, 1, sel("test"), false)])
        .into_iter()
        .map(|p| p.cpu("1.1"))
        .collect();
    s.run(pods);
    assert_eq!(s.skew(CT, "test"), vec![1, 5]);
}

#[test]
fn ct_only_count_scheduled_matching_pods() {
    let t = &types()[3];
    let mut s = Sim::new(vec![dpool()]);
    s.add_node(
        node("first", t, Z[0])
            .label(CT, "spot")
            .with_pod(pod("nolabels"))
            .with_pod(pod("wrongns").ns("other").label("app", "test"))
            .with_pod(pod("m1").label("app", "test"))
            .with_pod(pod("m2").label("app", "test")),
    );
    s.add_node(
        node("second", t, Z[0])
            .label(CT, "on-demand")
            .with_pod(pod("m3").label("app", "test")),
    );
    let mut third = node("third", t, Z[0]).with_pod(pod("nodomain").label("app", "test"));
    third.0.labels.remove(CT);
    s.add_node(third);
    s.run(spread_pods("p", 2, &[ct1(1)]));
    assert_eq!(s.skew(CT, "test"), vec![2, 3]);
}

#[test]
fn ct_node_required_affinity_constrained() {
    let mut s = Sim::new(vec![dpool()]);
    // an on-demand node in zone 1 with one matching pod (no rules)
    s.add_node(full_node("od", Z[0], "on-demand", "100m"));
    let pods: Vec<_> = spread_pods("p", 5, &[ct1(1)])
        .into_iter()
        .map(|p| {
            p.require(ZONE, Operator::In, &[Z[1]])
                .require(CT, Operator::In, &["spot"])
        })
        .collect();
    s.run(pods);
    assert_eq!(s.skew(CT, "test"), vec![1, 5]);
}

#[test]
fn ct_no_constraints_sees_existing_on_demand() {
    let mut s = Sim::new(vec![pool("default", types()).require(
        CT,
        Operator::In,
        &["spot"],
    )]);
    s.add_node(full_node("od", Z[0], "on-demand", "1.9"));
    let pods: Vec<_> = spread_pods("p", 5, &[ct1(1)])
        .into_iter()
        .map(|p| p.cpu("2"))
        .collect();
    s.run(pods);
    assert_eq!(s.skew(CT, "test"), vec![1, 2]);
}

#[test]
fn arch_no_constraints_sees_existing_amd64() {
    let mut s = Sim::new(vec![pool("default", types_arch()).require(
        ARCH,
        Operator::In,
        &["arm64"],
    )]);
    s.add_node(full_node("amd", Z[0], "on-demand", "1.9"));
    let pods: Vec<_> = spread_pods("p", 5, &[tsc(ARCH, 1, sel("test"), true)])
        .into_iter()
        .map(|p| p.cpu("2"))
        .collect();
    s.run(pods);
    assert_eq!(s.skew(ARCH, "test"), vec![1, 2]);
}

// ---------------------------------------------------------------- Combined

fn max_per_domain(s: &Sim, key: &str) -> usize {
    s.skew(key, "test").into_iter().max().unwrap_or(0)
}

#[test]
fn combined_hostname_and_zonal() {
    let mut s = Sim::new(vec![dpool()]);
    let sp = [zone1(1), tsc(HOST, 3, sel("test"), true)];
    s.run(spread_pods("a", 2, &sp));
    assert_eq!(s.skew(ZONE, "test"), vec![1, 1]);
    assert!(max_per_domain(&s, HOST) <= 3);
    s.run(spread_pods("b", 3, &sp));
    assert_eq!(s.skew(ZONE, "test"), vec![1, 2, 2]);
    assert!(max_per_domain(&s, HOST) <= 3);
    s.run(spread_pods("c", 5, &sp));
    assert_eq!(s.skew(ZONE, "test"), vec![3, 3, 4]);
    assert!(max_per_domain(&s, HOST) <= 3);
    s.run(spread_pods("d", 11, &sp));
    assert_eq!(s.skew(ZONE, "test"), vec![7, 7, 7]);
    assert!(max_per_domain(&s, HOST) <= 3);
}

#[test]
fn combined_balance_across_nodepool_requirements() {
    let key = "capacity.spread.4-1";
    let mut s = Sim::new(vec![
        pool("spot", types())
            .require(CT, Operator::In, &["spot"])
            .require(key, Operator::In, &["2", "3", "4", "5"]),
        pool("od", types())
            .require(CT, Operator::In, &["on-demand"])
            .require(key, Operator::In, &["1"]),
    ]);
    let plan = s.run(spread_pods("p", 20, &[tsc(key, 1, sel("test"), true)]));
    assert!(plan.unschedulable.is_empty(), "{}", plan.render());
    assert_eq!(s.skew(key, "test"), vec![4, 4, 4, 4, 4]);
    assert_eq!(s.skew(CT, "test"), vec![4, 16]);
}

#[test]
fn combined_zone_and_soft_hostname_with_disabled_pool() {
    let mut s = Sim::new(vec![
        pool("default", types()).require(ZONE, Operator::In, &Z[..2]),
        pool("b", types())
            .require(ZONE, Operator::In, &Z[2..])
            .limit("cpu", "0"),
    ]);
    s.run(spread_pods(
        "p",
        10,
        &[zone1(1), tsc(HOST, 1, sel("test"), false)],
    ));
    assert_eq!(s.skew(ZONE, "test"), vec![1, 1]);
    assert_eq!(s.skew(HOST, "test"), vec![1, 1]);
}

#[test]
fn combined_capacity_type_and_hostname() {
    let mut s = Sim::new(vec![dpool()]);
    let sp = [ct1(1), tsc(HOST, 3, sel("test"), true)];
    s.run(spread_pods("a", 2, &sp));
    assert_eq!(s.skew(CT, "test"), vec![1, 1]);
    s.run(spread_pods("b", 3, &sp));
    assert_eq!(s.skew(CT, "test"), vec![2, 3]);
    assert!(max_per_domain(&s, HOST) <= 3);
    s.run(spread_pods("c", 5, &sp));
    assert_eq!(s.skew(CT, "test"), vec![5, 5]);
    assert!(max_per_domain(&s, HOST) <= 3);
    s.run(spread_pods("d", 11, &sp));
    assert_eq!(s.skew(CT, "test"), vec![10, 11]);
    assert!(max_per_domain(&s, HOST) <= 3);
}

fn spread_max_skew(s: &Sim, key: &str, domains: usize) -> usize {
    let mut v = s.skew(key, "test");
    while v.len() < domains {
        v.insert(0, 0);
    }
    v.iter().max().unwrap() - v.iter().min().unwrap()
}

#[test]
fn combined_zonal_and_capacity_type() {
    let mut s = Sim::new(vec![dpool()]);
    let sp = [ct1(1), zone1(1)];
    for (n, ct_max, z_max) in [(2, 1, 1), (3, 3, 2), (3, 5, 4), (11, 11, 7)] {
        let plan = s.run(spread_pods(&format!("x{n}"), n, &sp));
        assert!(plan.unschedulable.is_empty(), "{}", plan.render());
        assert!(max_per_domain(&s, CT) <= ct_max, "{:?}", s.skew(CT, "test"));
        assert!(
            max_per_domain(&s, ZONE) <= z_max,
            "{:?}",
            s.skew(ZONE, "test")
        );
    }
}

#[test]
fn combined_hostname_zonal_and_capacity_type() {
    let mut s = Sim::new(vec![dpool()]);
    let sp = [ct1(1), zone1(2), tsc(HOST, 3, sel("test"), true)];
    for i in 1..15 {
        let plan = s.run(spread_pods(&format!("x{i}"), i, &sp));
        assert!(
            plan.unschedulable.is_empty(),
            "round {i}: {}",
            plan.render()
        );
        assert!(
            spread_max_skew(&s, CT, 2) <= 1,
            "round {i} ct {:?}",
            s.skew(CT, "test")
        );
        assert!(
            spread_max_skew(&s, ZONE, 3) <= 2,
            "round {i} zone {:?}",
            s.skew(ZONE, "test")
        );
        // hostname: Karpenter's ExpectMaxSkew over nodes with matching pods
        let h = s.skew(HOST, "test");
        assert!(
            h.iter().max().unwrap() - h.iter().min().unwrap() <= 3,
            "round {i} host {h:?}"
        );
    }
}

// ---------------------------------------------------------------- Zonal + node affinity

#[test]
fn zone_spread_limited_by_node_selector() {
    let mut s = Sim::new(vec![dpool()]);
    let mut pods: Vec<_> = spread_pods("a", 5, &[zone1(1)])
        .into_iter()
        .map(|p| p.select(ZONE, Z[0]))
        .collect();
    pods.extend(
        spread_pods("b", 10, &[zone1(1)])
            .into_iter()
            .map(|p| p.select(ZONE, Z[1])),
    );
    s.run(pods);
    assert_eq!(s.skew(ZONE, "test"), vec![5, 10]);
}

#[test]
fn zone_spread_limited_by_node_requirements() {
    let mut s = Sim::new(vec![dpool()]);
    let pods: Vec<_> = spread_pods("a", 10, &[zone1(1)])
        .into_iter()
        .map(|p| p.require(ZONE, Operator::In, &Z[..2]))
        .collect();
    s.run(pods);
    assert_eq!(s.skew(ZONE, "test"), vec![5, 5]);
}

#[test]
fn zone_spread_limited_by_required_node_affinity_then_opened() {
    let mut s = Sim::new(vec![dpool()]);
    let pods: Vec<_> = spread_pods("a", 6, &[zone1(1)])
        .into_iter()
        .map(|p| p.require(ZONE, Operator::In, &Z[..2]))
        .collect();
    s.run(pods);
    assert_eq!(s.skew(ZONE, "test"), vec![3, 3]);
    let pods: Vec<_> = spread_pods("b", 1, &[zone1(1)])
        .into_iter()
        .map(|p| p.require(ZONE, Operator::In, &Z[1..]))
        .collect();
    s.run(pods);
    assert_eq!(s.skew(ZONE, "test"), vec![1, 3, 3]);
    s.run(spread_pods("c", 5, &[zone1(1)]));
    assert_eq!(s.skew(ZONE, "test"), vec![4, 4, 4]);
}

#[test]
fn zone_spread_not_limited_by_preferred_node_affinity() {
    let mut s = Sim::new(vec![dpool()]);
    let pods: Vec<_> = spread_pods("a", 6, &[zone1(1)])
        .into_iter()
        .map(|p| p.prefer(1, Requirements::new().with(ZONE, Operator::In, &Z[..2])))
        .collect();
    s.run(pods);
    assert_eq!(s.skew(ZONE, "test"), vec![2, 2, 2]);
}

#[test]
fn ct_soft_spread_limited_by_node_selector() {
    let mut s = Sim::new(vec![dpool()]);
    let sp = [tsc(CT, 1, sel("test"), false)];
    let mut pods: Vec<_> = spread_pods("a", 5, &sp)
        .into_iter()
        .map(|p| p.select(CT, "spot"))
        .collect();
    pods.extend(
        spread_pods("b", 5, &sp)
            .into_iter()
            .map(|p| p.select(CT, "on-demand")),
    );
    s.run(pods);
    assert_eq!(s.skew(CT, "test"), vec![5, 5]);
}

#[test]
fn ct_spread_limited_by_node_affinity_then_opened() {
    let mut s = Sim::new(vec![dpool()]);
    let pods: Vec<_> = spread_pods("a", 3, &[ct1(1)])
        .into_iter()
        .map(|p| p.require(CT, Operator::In, &["spot"]))
        .collect();
    s.run(pods);
    assert_eq!(s.skew(CT, "test"), vec![3]);
    let pods: Vec<_> = spread_pods("b", 1, &[ct1(1)])
        .into_iter()
        .map(|p| p.require(CT, Operator::In, &["on-demand", "spot"]))
        .collect();
    s.run(pods);
    assert_eq!(s.skew(CT, "test"), vec![1, 3]);
    s.run(spread_pods("c", 5, &[ct1(1)]));
    assert_eq!(s.skew(CT, "test"), vec![4, 5]);
}

// ---------------------------------------------------------------- matchLabelKeys

#[test]
fn match_label_keys_split_by_value() {
    let mut s = Sim::new(vec![dpool()]);
    let mut pods = vec![];
    for v in ["value-a", "value-b"] {
        for i in 0..2 {
            let mut p = pod(&format!("{v}-{i}"))
                .label("app", "test")
                .label("test-label", v);
            // matchLabelKeys [test-label] narrows the selector to the pod's own value
            p.0.spread = vec![tsc(
                HOST,
                1,
                sel("test").with("test-label", Operator::In, &[v]),
                true,
            )];
            pods.push(p);
        }
    }
    s.run(pods);
    assert_eq!(s.skew(HOST, "test"), vec![2, 2]);
}

// ---------------------------------------------------------------- NodeTaintsPolicy

fn tainted_label_node(name: &str, v: &str) -> NodeBuilder {
    let t = itype("tiny")
        .cpu("100m")
        .mem("1Gi")
        .on_demand(&Z, 0.01)
        .build();
    node(name, &t, Z[0])
        .label("fake-label", v)
        .label(CT, "on-demand")
        .taint(Taint::new("taintname", "taintvalue", Effect::NoSchedule))
}

#[test]
fn taints_policy_ignore_existing_tainted_nodes() {
    let mut s = Sim::new(vec![dpool().label("fake-label", "baz")]);
    s.add_node(tainted_label_node("n1", "foo"));
    s.add_node(tainted_label_node("n2", "bar"));
    let pods: Vec<_> = spread_pods("p", 5, &[tsc("fake-label", 1, sel("test"), true)])
        .into_iter()
        .map(|p| p.cpu("1"))
        .collect();
    s.run(pods);
    assert_eq!(s.skew("fake-label", "test"), vec![1]);
}

#[test]
fn taints_policy_honor_existing_tainted_nodes() {
    let mut s = Sim::new(vec![dpool().label("fake-label", "baz")]);
    s.add_node(tainted_label_node("n1", "foo"));
    s.add_node(tainted_label_node("n2", "bar"));
    let mut sp = tsc("fake-label", 1, sel("test"), true);
    sp.honor_taints = true;
    let pods: Vec<_> = spread_pods("p", 5, &[sp])
        .into_iter()
        .map(|p| p.cpu("1"))
        .collect();
    s.run(pods);
    assert_eq!(s.skew("fake-label", "test"), vec![5]);
}

#[test]
fn taints_policy_honor_mutually_exclusive_pools_share_domains() {
    let mk = |i: usize, vals: &[&str]| {
        pool(&format!("np{i}"), types())
            .require(CT, Operator::Exists, &[])
            .require("fake-label", Operator::In, vals)
            .taint("taint-key", &format!("nodepool-{i}"))
    };
    let mut s = Sim::new(vec![mk(0, &["foo", "bar"]), mk(1, &["foo", "baz"])]);
    let mut sp = tsc("fake-label", 1, sel("test"), true);
    sp.honor_taints = true;
    let mut pods = vec![];
    for (i, n) in [(0usize, 2usize), (1, 4)] {
        for p in spread_pods(&format!("d{i}"), n, std::slice::from_ref(&sp)) {
            pods.push(p.tolerate(Toleration::equal("taint-key", &format!("nodepool-{i}"))));
        }
    }
    let plan = s.run(pods);
    assert!(plan.unschedulable.is_empty(), "{}", plan.render());
    assert_eq!(s.skew("fake-label", "test"), vec![1, 2, 3]);
}

// ---------------------------------------------------------------- Pod affinity / anti-affinity

fn s2(name: &str) -> PodBuilder {
    pod(name).label("security", "s2")
}
fn sec(v: &str) -> Requirements {
    Requirements::new().with("security", Operator::In, &[v])
}

#[test]
fn affinity_hostname_with_spread_pods_around() {
    let mut s = Sim::new(vec![dpool()]);
    let mut pods = spread_pods("p", 10, &[tsc(HOST, 1, sel("test"), true)]);
    pods.push(s2("aff1"));
    let mut a2 = pod("aff2");
    a2.0.affinity = vec![term(HOST, sec("s2"))];
    pods.push(a2);
    let plan = s.run(pods);
    assert!(plan.unschedulable.is_empty(), "{}", plan.render());
    assert_eq!(
        s.node_of("aff1").unwrap().name,
        s.node_of("aff2").unwrap().name
    );
}

#[test]
fn self_affinity_hostname() {
    let mut s = Sim::new(vec![dpool()]);
    let pods: Vec<_> = (0..3)
        .map(|i| {
            let mut p = s2(&format!("p-{i}"));
            p.0.affinity = vec![term(HOST, sec("s2"))];
            p
        })
        .collect();
    let plan = s.run(pods);
    assert!(plan.unschedulable.is_empty(), "{}", plan.render());
    assert_eq!(plan.new_claims.len(), 1);
}

#[test]
fn self_affinity_hostname_constrained_zones_existing_pod() {
    let mut s = Sim::new(vec![dpool()]);
    let mut first = s2("first").select(ZONE, Z[0]);
    first.0.affinity = vec![term(HOST, sec("s2"))];
    s.add_node(
        node("z1node", &types()[1], Z[0])
            .pool("default")
            .label(CT, "on-demand")
            .with_pod(first),
    );
    let pods: Vec<_> = (0..10)
        .map(|i| {
            let mut p = s2(&format!("p-{i}")).require(ZONE, Operator::In, &Z[1..]);
            p.0.affinity = vec![term(HOST, sec("s2"))];
            p
        })
        .collect();
    let plan = s.run(pods);
    assert!(
        plan.new_claims.is_empty() && plan.existing.is_empty(),
        "{}",
        plan.render()
    );
}

#[test]
fn self_affinity_zone() {
    let mut s = Sim::new(vec![dpool()]);
    let pods: Vec<_> = (0..3)
        .map(|i| {
            let mut p = s2(&format!("p-{i}"));
            p.0.affinity = vec![term(ZONE, sec("s2"))];
            p
        })
        .collect();
    let plan = s.run(pods);
    assert!(plan.unschedulable.is_empty(), "{}", plan.render());
    assert_eq!(plan.new_claims.len(), 1);
}

#[test]
fn self_affinity_zone_with_constraint() {
    let mut s = Sim::new(vec![dpool()]);
    let pods: Vec<_> = (0..3)
        .map(|i| {
            let mut p = s2(&format!("p-{i}")).require(ZONE, Operator::In, &[Z[2]]);
            p.0.affinity = vec![term(ZONE, sec("s2"))];
            p
        })
        .collect();
    let plan = s.run(pods);
    assert!(plan.unschedulable.is_empty(), "{}", plan.render());
    assert_eq!(plan.new_claims.len(), 1);
    assert_eq!(s.node_of("p-0").unwrap().labels[ZONE], Z[2]);
}

/// Karpenter's "should allow two nodes to be created when two pods with matching affinities
/// have incompatible selectors" opens a node in each zone. The kube-scheduler binds only one of
/// the pods: once either runs, the other's term selects a running pod in a zone it may not use.
/// So the first pod opens its zone and the second waits, with the reason (semantics.md).
#[test]
fn two_self_affine_pods_with_incompatible_zones() {
    let mut s = Sim::new(vec![dpool()]);
    let mk = |n: &str, z: &str| {
        let mut p = pod(n)
            .label("security", "s1")
            .require(ZONE, Operator::In, &[z]);
        p.0.affinity = vec![term(ZONE, sec("s1"))];
        p
    };
    let plan = s.run(vec![mk("pod1", Z[1]), mk("pod2", Z[2])]);
    assert_eq!(plan.new_claims.len(), 1, "{}", plan.render());
    assert_eq!(s.node_of("pod1").unwrap().labels[ZONE], Z[1]);
    assert!(s.node_of("pod2").is_none(), "{}", plan.render());
    assert_eq!(plan.unschedulable.len(), 1, "{}", plan.render());
    assert!(plan.render().contains("r1-pod2"), "{}", plan.render());
}

#[test]
fn anti_affinity_hostname_separates() {
    let mut s = Sim::new(vec![dpool()]);
    let mut a2 = pod("aff2");
    a2.0.anti_affinity = vec![term(HOST, sec("s2"))];
    let plan = s.run(vec![a2, s2("aff1")]);
    assert!(plan.unschedulable.is_empty(), "{}", plan.render());
    assert_ne!(
        s.node_of("aff1").unwrap().name,
        s.node_of("aff2").unwrap().name
    );
}

#[test]
fn anti_affinity_zone_all_zones_taken() {
    let mut s = Sim::new(vec![dpool()]);
    let mut pods: Vec<_> = Z
        .iter()
        .enumerate()
        .map(|(i, z)| s2(&format!("z{i}")).cpu("2").select(ZONE, z))
        .collect();
    let mut a = pod("aff");
    a.0.anti_affinity = vec![term(ZONE, sec("s2"))];
    pods.push(a);
    let plan = s.run(pods);
    assert_eq!(plan.unschedulable.len(), 1, "{}", plan.render());
    assert!(plan.unschedulable[0].pod.name.ends_with("aff"));
}

#[test]
fn anti_affinity_zone_other_schedules_first() {
    let mut s = Sim::new(vec![dpool()]);
    let mut a = pod("aff");
    a.0.anti_affinity = vec![term(ZONE, sec("s2"))];
    let plan = s.run(vec![s2("target").cpu("2"), a]);
    // Karpenter: target scheduled, aff not (zone unknown). Ours may do better: aff elsewhere.
    assert!(s.node_of("target").is_some(), "{}", plan.render());
    if let Some(n) = s.node_of("aff") {
        assert_ne!(n.labels[ZONE], s.node_of("target").unwrap().labels[ZONE]);
    }
}

#[test]
fn anti_affinity_zone_inverse() {
    let mut s = Sim::new(vec![dpool()]);
    let mut pods: Vec<_> = Z
        .iter()
        .enumerate()
        .map(|(i, z)| {
            let mut p = pod(&format!("z{i}")).cpu("2").select(ZONE, z);
            p.0.anti_affinity = vec![term(ZONE, sec("s2"))];
            p
        })
        .collect();
    pods.push(s2("aff"));
    let plan = s.run(pods);
    assert_eq!(plan.unschedulable.len(), 1, "{}", plan.render());
    assert!(
        plan.unschedulable[0].pod.name.ends_with("aff"),
        "{}",
        plan.render()
    );
}

#[test]
fn anti_affinity_zone_schroedinger() {
    let mut s = Sim::new(vec![dpool()]);
    let mut a = pod("anywhere").cpu("2");
    a.0.anti_affinity = vec![term(ZONE, sec("s2"))];
    let plan = s.run(vec![a, s2("aff")]);
    assert!(s.node_of("anywhere").is_some(), "{}", plan.render());
    if let Some(n) = s.node_of("aff") {
        assert_ne!(n.labels[ZONE], s.node_of("anywhere").unwrap().labels[ZONE]);
    } else {
        s.run(vec![s2("aff2")]);
        let n = s.node_of("aff2").expect("second round schedules it");
        assert_ne!(n.labels[ZONE], s.node_of("anywhere").unwrap().labels[ZONE]);
    }
}

#[test]
fn anti_affinity_zone_inverse_existing_nodes() {
    let mut s = Sim::new(vec![dpool()]);
    let pods: Vec<_> = Z
        .iter()
        .enumerate()
        .map(|(i, z)| {
            let mut p = pod(&format!("z{i}")).cpu("2").select(ZONE, z);
            p.0.anti_affinity = vec![term(ZONE, sec("s2"))];
            p
        })
        .collect();
    let plan = s.run(pods);
    assert!(plan.unschedulable.is_empty());
    let plan = s.run(vec![s2("aff")]);
    assert_eq!(plan.unschedulable.len(), 1, "{}", plan.render());
}

#[test]
fn anti_affinity_zone_topology_rounds() {
    let mut s = Sim::new(vec![dpool()]);
    let mk = |pfx: &str| -> Vec<PodBuilder> {
        (0..3)
            .map(|i| {
                let mut p = s2(&format!("{pfx}-{i}"));
                p.0.anti_affinity = vec![term(ZONE, sec("s2"))];
                p
            })
            .collect()
    };
    s.run(mk("a"));
    let zs = |s: &Sim| {
        let mut m: BTreeMap<String, usize> = BTreeMap::new();
        for n in &s.nodes {
            let c = n
                .pods
                .iter()
                .filter(|p| p.labels.contains_key("security"))
                .count();
            if c > 0 {
                *m.entry(n.labels[ZONE].clone()).or_default() += c;
            }
        }
        m
    };
    let m = zs(&s);
    assert!(m.values().all(|c| *c == 1), "{m:?}");
    for r in 0..3 {
        s.run(mk(&format!("r{r}")));
        let m = zs(&s);
        assert!(m.values().all(|c| *c == 1), "{m:?}");
    }
    assert_eq!(zs(&s).len(), 3);
}

#[test]
fn affinity_to_nonexistent_pod() {
    let mut s = Sim::new(vec![dpool()]);
    let pods: Vec<_> = (0..10)
        .map(|i| {
            let mut p = pod(&format!("p-{i}"));
            p.0.affinity = vec![term(ZONE, sec("s2"))];
            p
        })
        .collect();
    let plan = s.run(pods);
    assert_eq!(plan.unschedulable.len(), 10, "{}", plan.render());
}

#[test]
fn affinity_zone_unconstrained_target() {
    let mut s = Sim::new(vec![dpool()]);
    let mut pods: Vec<_> = (0..10)
        .map(|i| {
            let mut p = pod(&format!("p-{i}"));
            p.0.affinity = vec![term(ZONE, sec("s2"))];
            p
        })
        .collect();
    pods.push(s2("target"));
    let plan = s.run(pods);
    let tz = s.node_of("target").expect("target").labels[ZONE].clone();
    // Karpenter needs two rounds; any pod placed must be in the target's zone.
    let mut placed = 0;
    for i in 0..10 {
        if let Some(n) = s.node_of(&format!("p-{i}")) {
            placed += 1;
            assert_eq!(n.labels[ZONE], tz, "{}", plan.render());
        }
    }
    if placed < 10 {
        let pods: Vec<_> = (0..10 - placed)
            .map(|i| {
                let mut p = pod(&format!("q-{i}"));
                p.0.affinity = vec![term(ZONE, sec("s2"))];
                p
            })
            .collect();
        let plan = s.run(pods);
        assert!(plan.unschedulable.is_empty(), "{}", plan.render());
        for i in 0..10 - placed {
            assert_eq!(s.node_of(&format!("q-{i}")).unwrap().labels[ZONE], tz);
        }
    }
}

#[test]
fn affinity_zone_constrained_target() {
    let mut s = Sim::new(vec![dpool()]);
    let mut pods: Vec<_> = (0..10)
        .map(|i| {
            let mut p = pod(&format!("p-{i}"));
            p.0.affinity = vec![term(ZONE, sec("s2"))];
            p
        })
        .collect();
    pods.push(s2("target").require(ZONE, Operator::In, &[Z[0]]));
    let plan = s.run(pods);
    assert!(plan.unschedulable.is_empty(), "{}", plan.render());
    for n in &s.nodes {
        assert_eq!(n.labels[ZONE], Z[0]);
    }
}

#[test]
fn multiple_dependent_affinities() {
    let mut s = Sim::new(vec![dpool()]);
    let t = |ty: &str| Requirements::new().with("type", Operator::In, &[ty]);
    let mk = |name: &str, ty: &str, to: Option<&str>| {
        let mut p = pod(name).label("type", ty).label("spread", "spread");
        if let Some(to) = to {
            p.0.affinity = vec![term(HOST, t(to))];
        }
        p
    };
    let plan = s.run(vec![
        mk("db", "db", None),
        mk("web", "web", Some("db")),
        mk("cache", "cache", Some("web")),
        mk("ui", "ui", Some("cache")),
    ]);
    assert!(plan.unschedulable.is_empty(), "{}", plan.render());
}

#[test]
fn unsatisfiable_dependency() {
    let mut s = Sim::new(vec![dpool()]);
    let mut p = pod("db").label("type", "db");
    p.0.affinity = vec![term(
        HOST,
        Requirements::new().with("type", Operator::In, &["web"]),
    )];
    let plan = s.run(vec![p]);
    assert_eq!(plan.unschedulable.len(), 1);
}

#[test]
fn anti_affinity_arch() {
    let mut s = Sim::new(vec![pool("default", types_arch()).require(
        CT,
        Operator::Exists,
        &[],
    )]);
    let host = [tsc(HOST, 1, sec("s2"), true)];
    let mut a1 = s2("aff1").cpu("2").select(ARCH, "arm64");
    a1.0.spread = host.to_vec();
    let mut a2 = s2("aff2").cpu("1");
    a2.0.spread = host.to_vec();
    a2.0.anti_affinity = vec![term(ARCH, sec("s2"))];
    let plan = s.run(vec![a1, a2]);
    assert!(plan.unschedulable.is_empty(), "{}", plan.render());
    assert_ne!(
        s.node_of("aff1").unwrap().labels[ARCH],
        s.node_of("aff2").unwrap().labels[ARCH]
    );
}

#[test]
fn a_pools_zone_and_capacity_type_labels_keep_only_their_offerings() {
    // Karpenter reads template labels as `In` requirements: a pool labelled zone 1 and spot
    // launches there only, and pods asking for another zone or capacity type get no node of it.
    let snap = Snapshot {
        pending: vec![
            pod("wants-z2").cpu("1").select(ZONE, Z[1]).build(),
            pod("plain").cpu("1").build(),
            pod("on-demand").cpu("1").select(CT, "on-demand").build(),
        ],
        pools: vec![dpool().label(ZONE, Z[0]).label(CT, "spot").build()],
        ..Snapshot::default()
    };
    let plan = plan_provisioning(&snap);
    assert_eq!(plan.new_claims.len(), 1, "{}", plan.render());
    let claim = &plan.new_claims[0];
    assert_eq!(claim.pods.len(), 1, "{}", plan.render());
    assert_eq!(claim.pods[0].name, "plain");
    for o in &claim.instance_types {
        assert!(
            o.offerings
                .iter()
                .all(|x| &*x.0 == Z[0] && x.1 == CapacityType::Spot),
            "{}",
            plan.render()
        );
    }
    let mut waiting: Vec<&str> = plan
        .unschedulable
        .iter()
        .map(|u| u.pod.name.as_str())
        .collect();
    waiting.sort();
    assert_eq!(waiting, ["on-demand", "wants-z2"], "{}", plan.render());
    // The launch is held to them too, not only the plan: every offering the provider may
    // take is zone 1 spot, even where another zone or on-demand is cheaper.
    let launch = autoscaler_core::offerings::launch_requirements(claim);
    let offers = autoscaler_core::offerings::candidates(
        &launch,
        &snap.pools[0].instance_types,
        &Default::default(),
        0,
    );
    assert!(!offers.is_empty());
    for (key, _) in &offers {
        assert_eq!(
            (key.zone.as_str(), key.capacity_type),
            (Z[0], CapacityType::Spot),
            "{offers:?}"
        );
    }
}

/// The refusal says which label of the pool the type does not carry.
#[test]
fn a_type_a_pools_label_refuses_is_explained_by_the_label() {
    let snap = Snapshot {
        pools: vec![pool("default", types_arch()).label(ARCH, "arm64").build()],
        ..Snapshot::default()
    };
    let text = autoscaler_core::explain::explain_pool(&snap, "default", &[], 0)
        .expect("the pool")
        .render();
    let line = text
        .lines()
        .find(|l| l.contains("m5.large"))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(
        line.contains("labels its nodes kubernetes.io/arch=arm64"),
        "{line}"
    );
    assert!(line.contains("amd64"), "{line}");
}

#[test]
fn a_pools_arch_label_refuses_types_of_another_arch() {
    let snap = Snapshot {
        pending: vec![pod("plain").cpu("1").build()],
        pools: vec![pool("default", types_arch()).label(ARCH, "arm64").build()],
        ..Snapshot::default()
    };
    let plan = plan_provisioning(&snap);
    assert_eq!(plan.new_claims.len(), 1, "{}", plan.render());
    for o in &plan.new_claims[0].instance_types {
        assert!(o.instance_type.starts_with("a1."), "{}", plan.render());
    }
}

// ---------------------------------------------------------------- Beyond the upstream suite: existing nodes and pods

#[test]
fn min_domains_counts_a_zone_only_an_existing_node_has() {
    // pool: zones 1-2; a full node in zone 3 holds one matching pod. Eligible domains = 3 =
    // minDomains, so the global minimum is 1 (zone 3) and zones 1-2 take 2 each.
    let mut s = Sim::new(vec![pool("default", types()).require(
        ZONE,
        Operator::In,
        &Z[..2],
    )]);
    s.add_node(full_node("z3", Z[2], "on-demand", "1.1"));
    let mut sp = zone1(1);
    sp.min_domains = 3;
    let pods: Vec<_> = spread_pods("p", 6, &[sp])
        .into_iter()
        .map(|p| p.cpu("1.1"))
        .collect();
    s.run(pods);
    assert_eq!(s.skew(ZONE, "test"), vec![1, 2, 2]);
}

#[test]
fn zone_spread_uses_room_on_existing_node() {
    let mut s = Sim::new(vec![dpool()]);
    s.add_node(
        node("big", &types()[3], Z[0])
            .pool("default")
            .label(CT, "on-demand"),
    );
    let plan = s.run(
        spread_pods("p", 6, &[zone1(1)])
            .into_iter()
            .map(|p| p.cpu("1"))
            .collect(),
    );
    assert_eq!(s.skew(ZONE, "test"), vec![2, 2, 2], "{}", plan.render());
    assert_eq!(plan.existing.len(), 2, "{}", plan.render());
}

#[test]
fn zone_spread_pool_not_in() {
    let mut s = Sim::new(vec![pool("default", types()).require(
        ZONE,
        Operator::NotIn,
        &[Z[2]],
    )]);
    s.run(spread_pods("p", 4, &[zone1(1)]));
    assert_eq!(s.skew(ZONE, "test"), vec![2, 2]);
}

#[test]
fn hostname_anti_affinity_avoids_existing_node_with_room() {
    let mut s = Sim::new(vec![dpool()]);
    s.add_node(
        node("big", &types()[3], Z[0])
            .pool("default")
            .label(CT, "on-demand")
            .with_pod(s2("target")),
    );
    let mut a = pod("aff").cpu("1");
    a.0.anti_affinity = vec![term(HOST, sec("s2"))];
    let plan = s.run(vec![a]);
    assert_eq!(plan.new_claims.len(), 1, "{}", plan.render());
}

#[test]
fn zone_anti_affinity_avoids_existing_zone() {
    let mut s = Sim::new(vec![dpool()]);
    s.add_node(full_node("z1", Z[0], "on-demand", "1.9").with_pod(s2("target")));
    s.add_node(
        node("big", &types()[3], Z[0])
            .pool("default")
            .label(CT, "on-demand"),
    );
    let pods: Vec<_> = (0..3)
        .map(|i| {
            let mut a = pod(&format!("aff-{i}")).cpu("1");
            a.0.anti_affinity = vec![term(ZONE, sec("s2"))];
            a
        })
        .collect();
    let plan = s.run(pods);
    assert!(plan.existing.is_empty(), "{}", plan.render());
    for i in 0..3 {
        let n = s.node_of(&format!("aff-{i}")).expect("placed");
        assert_ne!(n.labels[ZONE], Z[0], "{}", plan.render());
    }
}

#[test]
fn zone_affinity_to_existing_pod() {
    let mut s = Sim::new(vec![dpool()]);
    s.add_node(full_node("z2", Z[1], "on-demand", "1.9").with_pod(s2("target")));
    let pods: Vec<_> = (0..5)
        .map(|i| {
            let mut a = pod(&format!("aff-{i}")).cpu("1");
            a.0.affinity = vec![term(ZONE, sec("s2"))];
            a
        })
        .collect();
    let plan = s.run(pods);
    assert!(plan.unschedulable.is_empty(), "{}", plan.render());
    for i in 0..5 {
        assert_eq!(
            s.node_of(&format!("aff-{i}")).unwrap().labels[ZONE],
            Z[1],
            "{}",
            plan.render()
        );
    }
}

#[test]
fn zone_affinity_and_zone_spread_with_existing() {
    // pods need affinity to s2 (zone 2 and 3 have one each) and spread over zones
    let mut s = Sim::new(vec![dpool()]);
    s.add_node(full_node("z2", Z[1], "on-demand", "1.9").with_pod(s2("t2")));
    s.add_node(full_node("z3", Z[2], "on-demand", "1.9").with_pod(s2("t3")));
    let pods: Vec<_> = spread_pods("p", 4, &[zone1(1)])
        .into_iter()
        .map(|mut p| {
            p.0.affinity = vec![term(ZONE, sec("s2"))];
            p.cpu("1")
        })
        .collect();
    let plan = s.run(pods);
    // existing full nodes each hold an app=test pod (count 1 in z2, z3); zone 1 has none,
    // but affinity forbids zone 1. Domains the pod may use (nodeAffinityPolicy honor covers
    // node affinity only) are z1,z2,z3 -> global min is 0 in z1 -> z2/z3 may only reach 1.
    // So Karpenter/kube-scheduler: no pod can be placed.
    assert_eq!(plan.unschedulable.len(), 4, "{}", plan.render());
}

#[test]
fn ct_and_zone_spread_with_existing_nodes() {
    let mut s = Sim::new(vec![dpool()]);
    s.add_node(full_node("a", Z[0], "spot", "1.1"));
    s.add_node(full_node("b", Z[0], "spot", "1.1"));
    let sp = [ct1(1), zone1(1)];
    let plan = s.run(
        spread_pods("p", 4, &sp)
            .into_iter()
            .map(|p| p.cpu("1.1"))
            .collect(),
    );
    assert!(plan.unschedulable.is_empty(), "{}", plan.render());
    assert!(spread_max_skew(&s, CT, 2) <= 1, "{:?}", s.skew(CT, "test"));
    assert!(
        spread_max_skew(&s, ZONE, 3) <= 1,
        "{:?}",
        s.skew(ZONE, "test")
    );
}

// ---------------------------------------------------------------- Preferences
// topology_test.go's preferred-term cases and suite_test.go's "Preferences" tables: under the
// default policy (Respect) a preferred pod (anti-)affinity term or a ScheduleAnyway spread is
// held as required until the pod cannot be placed, then given up.

/// Nodes the pods named `prefix-*` landed on.
fn hosts_of(s: &Sim, prefix: &str) -> BTreeSet<String> {
    s.nodes
        .iter()
        .filter(|n| {
            n.pods
                .iter()
                .any(|p| p.key.name.contains(&format!("-{prefix}-")))
        })
        .map(|n| n.name.clone())
        .collect()
}

fn zones_of(s: &Sim, prefix: &str) -> BTreeSet<String> {
    s.nodes
        .iter()
        .filter(|n| hosts_of(s, prefix).contains(&n.name))
        .filter_map(|n| n.labels.get(ZONE).cloned())
        .collect()
}

#[test]
fn should_allow_violation_of_preferred_pod_affinity() {
    let mut s = Sim::new(vec![dpool()]);
    let mut pods = spread_pods("p", 10, &[tsc(HOST, 1, sel("test"), true)]);
    pods.push(pod("aff").prefer_affinity(50, HOST, "s2"));
    let plan = s.run(pods);
    assert!(plan.unschedulable.is_empty(), "{}", plan.render());
    assert!(s.node_of("aff").is_some());
}

#[test]
fn should_allow_violation_of_preferred_pod_anti_affinity() {
    // Three app=test pods spread one per zone; ten pods preferring zones without app=test
    // find none left and are placed anyway.
    let mut s = Sim::new(vec![dpool()]);
    let mut pods = spread_pods("p", 3, &[zone1(1)]);
    pods.extend((0..10).map(|i| pod(&format!("aff-{i}")).prefer_anti_affinity(50, ZONE, "test")));
    let plan = s.run(pods);
    assert!(plan.unschedulable.is_empty(), "{}", plan.render());
    assert_eq!(s.skew(ZONE, "test"), vec![1, 1, 1]);
}

/// Three 2-cpu pods, one per zone by node selector, each preferring zones without
/// security=s2 pods.
fn zone_pods_avoiding_s2() -> Vec<PodBuilder> {
    (0..3)
        .map(|i| {
            pod(&format!("zone{i}"))
                .cpu("2")
                .select(ZONE, Z[i])
                .prefer_anti_affinity(10, ZONE, "s2")
        })
        .collect()
}

#[test]
fn should_violate_preferred_pod_anti_affinity_on_zone_inverse() {
    // The three pods' preference binds them, not the s2 pod, which schedules in a zone of one
    // of them (as required anti-affinity it could not: `anti_affinity_zone_inverse`).
    let mut s = Sim::new(vec![dpool()]);
    let mut pods = zone_pods_avoiding_s2();
    pods.push(pod("s2").label("app", "s2"));
    let plan = s.run(pods);
    assert!(plan.unschedulable.is_empty(), "{}", plan.render());
    for p in ["zone0", "zone1", "zone2", "s2"] {
        assert!(s.node_of(p).is_some(), "{p}");
    }
}

#[test]
fn should_violate_preferred_pod_anti_affinity_on_zone_inverse_with_existing_nodes() {
    let mut s = Sim::new(vec![dpool()]);
    s.run(zone_pods_avoiding_s2());
    let plan = s.run(vec![pod("s2").label("app", "s2")]);
    assert!(plan.unschedulable.is_empty(), "{}", plan.render());
    assert!(s.node_of("s2").is_some());
}

#[test]
fn should_allow_violation_of_a_pod_affinity_preference_with_a_conflicting_required_constraint() {
    // Three app=test pods, one per host (required), each preferring the host of the one s2
    // pod: one of them gets it, the other two give the preference up.
    let mut s = Sim::new(vec![dpool()]);
    let mut pods: Vec<PodBuilder> = spread_pods("p", 3, &[tsc(HOST, 1, sel("test"), true)])
        .into_iter()
        .map(|p| p.prefer_affinity(50, HOST, "s2"))
        .collect();
    pods.push(pod("s2").label("app", "s2"));
    let plan = s.run(pods);
    assert!(plan.unschedulable.is_empty(), "{}", plan.render());
    assert_eq!(s.skew(HOST, "test"), vec![1, 1, 1]);
    let s2 = s.node_of("s2").expect("s2 placed").name.clone();
    let with_s2 = (0..3)
        .filter(|i| s.node_of(&format!("p-{i}")).is_some_and(|n| n.name == s2))
        .count();
    assert_eq!(with_s2, 1, "one app=test pod joins the s2 pod's host");
}

/// Five app=foo pods preferring `key` apart from each other.
fn foo_apart(key: &str) -> Vec<PodBuilder> {
    (0..5)
        .map(|i| {
            pod(&format!("foo-{i}"))
                .label("app", "foo")
                .prefer_anti_affinity(1, key, "foo")
        })
        .collect()
}

#[test]
fn pod_anti_affinity_preferences_are_respected_by_default_and_ignored_on_request() {
    // suite_test.go: "If we were respecting preferences, we would add these pods on separate
    // nodes. Because we are ignoring them, we will schedule them all on the same node."
    let mut s = Sim::new(vec![dpool()]);
    let plan = s.run(foo_apart(HOST));
    assert!(plan.unschedulable.is_empty(), "{}", plan.render());
    assert_eq!(hosts_of(&s, "foo").len(), 5);

    // Zone: three zones hold the first three apart; the other two give the preference up.
    let mut s = Sim::new(vec![dpool()]);
    let plan = s.run(foo_apart(ZONE));
    assert!(plan.unschedulable.is_empty(), "{}", plan.render());
    assert_eq!(zones_of(&s, "foo").len(), 3);

    for key in [HOST, ZONE] {
        let mut s = Sim::new(vec![dpool()]);
        s.ignore_preferences = true;
        let plan = s.run(foo_apart(key));
        assert!(plan.unschedulable.is_empty(), "{}", plan.render());
        assert_eq!(hosts_of(&s, "foo").len(), 1, "{key}");
    }
}

#[test]
fn pod_affinity_preferences_are_respected_by_default() {
    // suite_test.go's "should ignore pod affinity preferences", respected: a 2-cpu pod in
    // zone 1, two 3-cpu app=bar pods in zone 2, and a 1-cpu pod preferring app=bar's host
    // (and, in the second case, zone) joins them.
    for key in [HOST, ZONE] {
        let mut s = Sim::new(vec![dpool()]);
        let mut pods = vec![pod("one").label("app", "foo").cpu("2").select(ZONE, Z[0])];
        pods.extend((0..2).map(|i| {
            pod(&format!("bar-{i}"))
                .label("app", "bar")
                .cpu("3")
                .select(ZONE, Z[1])
        }));
        pods.push(
            pod("baz")
                .label("app", "baz")
                .cpu("1")
                .prefer_affinity(1, key, "bar"),
        );
        let plan = s.run(pods);
        assert!(plan.unschedulable.is_empty(), "{}", plan.render());
        let baz = s.node_of("baz").expect("placed");
        assert_eq!(
            baz.labels.get(ZONE).map(String::as_str),
            Some(Z[1]),
            "{key}"
        );
        if key == HOST {
            let bar = s.node_of("bar-0").expect("placed");
            assert_eq!(baz.name, bar.name);
        }
    }
}

#[test]
fn a_schedule_anyway_spread_is_held_until_it_cannot_be() {
    // Respected, four app=test pods with a ScheduleAnyway hostname spread get a node each;
    // ignored, they share one.
    let soft_host = [tsc(HOST, 1, sel("test"), false)];
    let mut s = Sim::new(vec![dpool()]);
    s.run(spread_pods("p", 4, &soft_host));
    assert_eq!(s.skew(HOST, "test"), vec![1, 1, 1, 1]);
    let mut s = Sim::new(vec![dpool()]);
    s.ignore_preferences = true;
    s.run(spread_pods("p", 4, &soft_host));
    assert_eq!(s.skew(HOST, "test"), vec![4]);
    // A pool of at most two nodes: the two pods the spread leaves without a node give it up
    // and join the others (wherever they fit first, the spread being given up), where a
    // DoNotSchedule spread leaves them pending.
    let two = || vec![dpool().limit_nodes(2)];
    let mut s = Sim::new(two());
    let plan = s.run(spread_pods("p", 4, &soft_host));
    assert!(plan.unschedulable.is_empty(), "{}", plan.render());
    let per_node = s.skew(HOST, "test");
    assert_eq!(
        (per_node.len(), per_node.iter().sum()),
        (2, 4),
        "{per_node:?}"
    );
    let mut s = Sim::new(two());
    let plan = s.run(spread_pods("p", 4, &[tsc(HOST, 1, sel("test"), true)]));
    assert_eq!(plan.unschedulable.len(), 2, "{}", plan.render());
}

#[test]
fn preference_pods_of_the_benchmark_give_up_the_zone_term_and_keep_the_hostname_one() {
    // scheduling_benchmark_test.go's `makePreferencePods`: app=nginx pods preferring zone 1,
    // zones apart from each other (weight 10, which only three can have) and hosts apart
    // (weight 1). Preferred pod anti-affinity is given up before preferred node affinity
    // (`preferences.go`, `Relax`), heaviest first: the zone term goes, the hostname term and
    // the zone-1 preference hold, so every pod gets a node of its own in zone 1.
    let mut s = Sim::new(vec![dpool()]);
    let pods: Vec<PodBuilder> = (0..8)
        .map(|i| {
            pod(&format!("nginx-{i}"))
                .label("app", "nginx")
                .cpu("1")
                .prefer(1, Requirements::new().with(ZONE, Operator::In, &[Z[0]]))
                .prefer_anti_affinity(10, ZONE, "nginx")
                .prefer_anti_affinity(1, HOST, "nginx")
        })
        .collect();
    let plan = s.run(pods);
    assert!(plan.unschedulable.is_empty(), "{}", plan.render());
    assert_eq!(hosts_of(&s, "nginx").len(), 8);
    assert_eq!(zones_of(&s, "nginx"), BTreeSet::from([Z[0].to_string()]));
}
