//! Parity corpus: black-box behaviours users rely on in Karpenter and the Cluster Autoscaler,
//! each a compact fixture naming the upstream test (or documented behaviour) it was adapted
//! from. A case builds a cluster, runs the planner or disruption, and lists lines its rendered
//! result must contain and must not contain. All cases run; every failure is reported at once.
//!
//! The fixtures are written here from the upstream tests' descriptions and documented
//! semantics; no upstream code or data is copied.

use autoscaler_core::builders::*;
use autoscaler_core::disruption::{DisruptionConfig, DisruptionState, plan_disruption};
use autoscaler_core::instance::{CapacityType, InstanceType};
use autoscaler_core::labels;
use autoscaler_core::model::{DaemonSet, DisruptionPolicy, HostPort, Snapshot};
use autoscaler_core::overlay::{Overlay, PriceChange, apply_overlays};
use autoscaler_core::provision::plan_provisioning;
use autoscaler_core::requirements::{Operator, Requirements};
use autoscaler_core::resources::Resources;
use autoscaler_core::taints::{Effect, Taint, Toleration};

const ZONES: [&str; 3] = ["z1", "z2", "z3"];

/// What a case runs.
enum Run {
    /// `plan_provisioning` on the snapshot's pending pods.
    Provision,
    /// `plan_disruption` at `now` with this config.
    Disrupt { now: i64, config: DisruptionConfig },
}

/// One parity case.
struct Case {
    /// Short name of the behaviour.
    name: &'static str,
    /// The upstream test or documented behaviour it comes from.
    upstream: &'static str,
    /// The cluster.
    snapshot: fn() -> Snapshot,
    /// What to run.
    run: Run,
    /// Lines (substrings of one rendered line) that must appear.
    has: &'static [&'static str],
    /// Substrings that must not appear anywhere.
    lacks: &'static [&'static str],
}

fn disrupt(now: i64) -> Run {
    Run::Disrupt {
        now,
        config: DisruptionConfig::default(),
    }
}

fn m(name: &str, cpu: &str, price: f64) -> InstanceType {
    itype(name)
        .cpu(cpu)
        .mem("16Gi")
        .on_demand(&ZONES, price)
        .build()
}

fn cpu_types() -> Vec<InstanceType> {
    vec![
        m("m5.large", "2", 0.096),
        m("m5.xlarge", "4", 0.192),
        m("m5.2xlarge", "8", 0.384),
    ]
}

/// Consolidation acts at once: no unneeded time, no budget, no consolidateAfter.
fn quick() -> DisruptionPolicy {
    DisruptionPolicy {
        unneeded_s: 0,
        budgets: vec![],
        ..DisruptionPolicy::default()
    }
}

fn snap(
    pending: Vec<PodBuilder>,
    nodes: Vec<NodeBuilder>,
    pools: Vec<PoolBuilder>,
    daemonsets: Vec<DaemonSet>,
) -> Snapshot {
    Snapshot {
        pending: pending.into_iter().map(|p| p.build()).collect(),
        nodes: nodes.into_iter().map(|n| n.build()).collect(),
        pools: pools.into_iter().map(|p| p.build()).collect(),
        daemonsets,
        ..Snapshot::default()
    }
}

// ---- 1. consolidation onto uninitialized capacity ----

/// `a` holds one small pod and could move it to `b`, whose NodeClaim has not initialized.
fn onto_uninitialized(b_initialized: bool) -> Snapshot {
    let t = m("m5.xlarge", "4", 0.192);
    snap(
        vec![],
        vec![
            node("a", &t, "z1")
                .pool("p")
                .with_pod(pod("small").cpu("500m")),
            node("b", &t, "z1")
                .pool("p")
                .with_pod(pod("big").cpu("3"))
                .initialized(b_initialized)
                .created(100),
        ],
        vec![pool("p", vec![t.clone()]).disruption(quick())],
        vec![],
    )
}

// ---- 7. topology spread and the incoming pod ----

/// One `app=db` pod runs on `n1`; `web` pods spread over `app=db` (which they do not match).
fn spread_not_self_matching() -> Snapshot {
    let t = m("m5.2xlarge", "8", 0.384);
    snap(
        (0..3)
            .map(|i| {
                pod(&format!("web-{i}"))
                    .cpu("1")
                    .label("app", "web")
                    .spread(labels::HOSTNAME, 1, "db")
            })
            .collect(),
        vec![
            node("n1", &t, "z1")
                .pool("p")
                .with_pod(pod("db-0").cpu("1").label("app", "db")),
        ],
        vec![pool("p", cpu_types())],
        vec![],
    )
}

/// The same with pods that match their own selector: the count includes them.
fn spread_self_matching() -> Snapshot {
    let t = m("m5.2xlarge", "8", 0.384);
    snap(
        vec![
            pod("db-1")
                .cpu("1")
                .label("app", "db")
                .spread(labels::HOSTNAME, 1, "db"),
        ],
        vec![
            node("n1", &t, "z1")
                .pool("p")
                .with_pod(pod("db-0").cpu("1").label("app", "db")),
        ],
        vec![pool("p", cpu_types())],
        vec![],
    )
}

/// Zone spread over `app=db` with one db pod in z1: non-matching `web` pods may still go to
/// the existing node in z1.
fn zone_spread_not_self_matching() -> Snapshot {
    let t = m("m5.2xlarge", "8", 0.384);
    snap(
        vec![
            pod("web-0")
                .cpu("1")
                .label("app", "web")
                .spread(labels::ZONE, 1, "db"),
        ],
        vec![
            node("n1", &t, "z1")
                .pool("p")
                .with_pod(pod("db-0").cpu("1").label("app", "db")),
        ],
        vec![pool("p", cpu_types())],
        vec![],
    )
}

// ---- 4. do-not-disrupt durations ----

/// An empty-able node whose only pod carries `karpenter.sh/do-not-disrupt: <value>`, started
/// at t=0; a second node with room for it.
fn pod_dnd(value: &'static str) -> Snapshot {
    let t = m("m5.xlarge", "4", 0.192);
    snap(
        vec![],
        vec![
            node("a", &t, "z1").pool("p").with_pod(
                pod("guarded")
                    .cpu("500m")
                    .annotate("karpenter.sh/do-not-disrupt", value)
                    .started(0),
            ),
            node("b", &t, "z1").pool("p").with_pod(pod("big").cpu("3")),
        ],
        vec![pool("p", vec![t.clone()]).disruption(quick())],
        vec![],
    )
}

fn pod_dnd_30m() -> Snapshot {
    pod_dnd("30m")
}

fn pod_dnd_true() -> Snapshot {
    pod_dnd("true")
}

fn pod_dnd_garbled() -> Snapshot {
    pod_dnd("soon")
}

/// An empty node created at t=0 carrying `karpenter.sh/do-not-disrupt: 1h`.
fn node_dnd_1h() -> Snapshot {
    let t = m("m5.xlarge", "4", 0.192);
    snap(
        vec![],
        vec![
            node("a", &t, "z1")
                .pool("p")
                .annotate("karpenter.sh/do-not-disrupt", "1h"),
        ],
        vec![pool("p", vec![t.clone()]).disruption(quick())],
        vec![],
    )
}

// ---- 5. PreferNoSchedule ----

fn prefer_no_schedule(t: &str) -> PoolBuilder {
    let mut p = pool(t, cpu_types());
    p.0.taints
        .push(Taint::new("dedicated", "batch", Effect::PreferNoSchedule));
    p
}

/// Two equal pools; the one first by name has a PreferNoSchedule taint.
fn pns_two_pools() -> Snapshot {
    snap(
        vec![pod("web").cpu("1")],
        vec![],
        vec![
            prefer_no_schedule("a-tainted"),
            pool("b-plain", cpu_types()),
        ],
        vec![],
    )
}

/// Only the tainted pool exists: the pod still gets a node there.
fn pns_only_pool() -> Snapshot {
    snap(
        vec![pod("web").cpu("1")],
        vec![],
        vec![prefer_no_schedule("a-tainted")],
        vec![],
    )
}

/// Two existing nodes with room; the one first by name has a PreferNoSchedule taint.
fn pns_two_nodes() -> Snapshot {
    let t = m("m5.xlarge", "4", 0.192);
    snap(
        vec![pod("web").cpu("1")],
        vec![
            node("n-a", &t, "z1").taint(Taint::new("dedicated", "batch", Effect::PreferNoSchedule)),
            node("n-b", &t, "z1"),
        ],
        vec![],
        vec![],
    )
}

/// A pod that tolerates the taint keeps the name order.
fn pns_tolerated() -> Snapshot {
    snap(
        vec![
            pod("batch")
                .cpu("1")
                .tolerate(Toleration::equal("dedicated", "batch")),
        ],
        vec![],
        vec![
            prefer_no_schedule("a-tainted"),
            pool("b-plain", cpu_types()),
        ],
        vec![],
    )
}

// ---- 8. spot-to-spot replacement ----

/// A spot node of a big type holding a small pod, and a pool offering `cheaper` spot types
/// below its price that fit the pod.
fn spot_node(cheaper: usize) -> Snapshot {
    let big = itype("c5.9xlarge")
        .cpu("36")
        .mem("72Gi")
        .offer("z1", CapacityType::Spot, 0.60)
        .build();
    let mut types = vec![big.clone()];
    for i in 0..cheaper {
        types.push(
            itype(&format!("c{i}.large"))
                .cpu("2")
                .mem("4Gi")
                .offer("z1", CapacityType::Spot, 0.03 + 0.01 * i as f64)
                .build(),
        );
    }
    snap(
        vec![],
        vec![
            node("spot-a", &big, "z1")
                .pool("spot")
                .label(labels::CAPACITY_TYPE, "spot")
                .with_pod(pod("small").cpu("1")),
        ],
        vec![pool("spot", types).disruption(quick())],
        vec![],
    )
}

fn spot_two_cheaper() -> Snapshot {
    spot_node(2)
}

fn spot_fifteen_cheaper() -> Snapshot {
    spot_node(15)
}

// ---- 3. host ports ----

fn proxy_ds(port: u16) -> DaemonSet {
    let mut ds = daemonset(
        "kube-system/proxy",
        "100m",
        "64Mi",
        vec![Toleration::exists("")],
    );
    ds.host_ports.push(HostPort::tcp(port));
    ds
}

/// A DaemonSet on every node binds 8080; the pod asks for 8080 too.
fn port_taken_by_daemonset() -> Snapshot {
    snap(
        vec![pod("web").cpu("1").host_port(8080)],
        vec![],
        vec![pool("p", cpu_types())],
        vec![proxy_ds(8080)],
    )
}

/// Two pods binding the same port never share a node; a third on another port may.
fn two_pods_one_port() -> Snapshot {
    snap(
        vec![
            pod("a").cpu("1").host_port(9000),
            pod("b").cpu("1").host_port(9000),
            pod("c").cpu("1").host_port(9001),
        ],
        vec![],
        vec![pool("p", cpu_types())],
        vec![proxy_ds(8080)],
    )
}

/// An existing node with room already binds 9000.
fn port_in_use_on_existing_node() -> Snapshot {
    let t = m("m5.2xlarge", "8", 0.384);
    snap(
        vec![pod("new").cpu("1").host_port(9000)],
        vec![node("n1", &t, "z1").with_pod(pod("old").cpu("1").host_port(9000))],
        vec![pool("p", cpu_types())],
        vec![],
    )
}

/// The same port on two different host addresses does not conflict.
fn same_port_other_address() -> Snapshot {
    let bind = |name: &str, ip: &str| {
        let mut p = pod(name).cpu("1");
        p.0.host_ports.push(HostPort {
            port: 9000,
            protocol: "TCP".into(),
            host_ip: ip.into(),
        });
        p
    };
    snap(
        vec![bind("a", "10.0.0.1"), bind("b", "10.0.0.2")],
        vec![],
        vec![pool("p", cpu_types())],
        vec![],
    )
}

// ---- 2. DaemonSets and startup taints ----

/// A pool with a startup taint no DaemonSet tolerates; a DaemonSet of 1 cpu; a pod of 1.5 cpu.
fn startup_taint_daemonset(selector_matches: bool) -> Snapshot {
    let mut ds = daemonset("kube-system/agent", "1", "64Mi", vec![]);
    if !selector_matches {
        ds.node_selector =
            autoscaler_core::NodeSelector::single(autoscaler_core::Requirements::new().with(
                "role",
                autoscaler_core::Operator::In,
                &["edge"],
            ));
    }
    snap(
        vec![pod("web").cpu("1500m")],
        vec![],
        vec![pool("p", cpu_types()).startup_taint("node.cilium.io/agent-not-ready", "true")],
        vec![ds],
    )
}

fn startup_taint_ds_lands() -> Snapshot {
    startup_taint_daemonset(true)
}

fn startup_taint_ds_excluded_by_selector() -> Snapshot {
    startup_taint_daemonset(false)
}

// ---- 6. plan cost ----

/// A 2-GPU pod and six 1-GPU pods; a 4-GPU type and an 8-GPU type that is cheaper per GPU.
fn two_gpu_pod_and_peers() -> Snapshot {
    let t = |name: &str, gpus: u32, price: f64| {
        itype(name)
            .cpu("32")
            .mem("256Gi")
            .gpus(gpus, "A10G", 24)
            .on_demand(&ZONES, price)
            .build()
    };
    let mut pending = vec![pod("two").cpu("3").mem("8Gi").gpus(2)];
    pending.extend((0..6).map(|i| pod(&format!("one-{i}")).cpu("500m").mem("4Gi").gpus(1)));
    snap(
        pending,
        vec![],
        vec![
            pool("a", vec![t("g4.x32", 4, 7.71)]),
            pool("b", vec![t("g8.x32", 8, 11.213)]),
        ],
        vec![],
    )
}

// ---- 15. NodeOverlay: price and capacity overrides ----

/// A 3-cpu pod; `c5.xlarge` is the cheaper of two 4-cpu types, before `overlays`.
fn priced(overlays: &[Overlay]) -> Snapshot {
    let types = vec![m("c5.xlarge", "4", 0.17), m("m5.xlarge", "4", 0.192)];
    snap(
        vec![pod("web").cpu("3")],
        vec![],
        vec![pool("p", apply_overlays(&types, overlays))],
        vec![],
    )
}

fn family_overlay(name: &str, weight: i32, family: &str, price: PriceChange) -> Overlay {
    Overlay {
        name: name.into(),
        weight,
        requirements: Requirements::new().with(labels::INSTANCE_FAMILY, Operator::In, &[family]),
        price: Some(price),
        capacity: Resources::new(),
    }
}

fn no_overlay() -> Snapshot {
    priced(&[])
}

fn c5_plus_20_percent() -> Snapshot {
    priced(&[family_overlay(
        "c5-licence",
        0,
        "c5",
        PriceChange::Percent(20.0),
    )])
}

/// Two overlays select `c5`: the heavier one (a saving) decides, the lighter one (a
/// surcharge that would flip the choice) is not applied on top.
fn weighted_overlays() -> Snapshot {
    priced(&[
        family_overlay("a-surcharge", 1, "c5", PriceChange::Delta(0.05)),
        family_overlay("b-savings-plan", 10, "c5", PriceChange::Set(0.1)),
    ])
}

/// A pod asking for one MIG slice; the A100 type's catalog entry lists whole GPUs only.
fn mig_pod(with_overlay: bool) -> Snapshot {
    let types = vec![
        itype("p4d.24xlarge")
            .cpu("96")
            .mem("1152Gi")
            .gpus(8, "A100", 40)
            .on_demand(&ZONES, 32.77)
            .build(),
    ];
    let overlays = if with_overlay {
        vec![Overlay {
            name: "mig-slices".into(),
            weight: 0,
            requirements: Requirements::new().with(labels::GPU_NAME, Operator::In, &["a100"]),
            price: None,
            capacity: Resources::new().with("nvidia.com/mig-1g.10gb", 56),
        }]
    } else {
        vec![]
    };
    snap(
        vec![pod("slice").cpu("1").res("nvidia.com/mig-1g.10gb", "1")],
        vec![],
        vec![pool("gpu", apply_overlays(&types, &overlays))],
        vec![],
    )
}

fn mig_without_overlay() -> Snapshot {
    mig_pod(false)
}

fn mig_with_overlay() -> Snapshot {
    mig_pod(true)
}

fn cases() -> Vec<Case> {
    vec![
        // 1
        Case {
            name: "no consolidation onto a node that has not initialized",
            upstream: "karpenter pkg/controllers/disruption/consolidation_test.go: \
                       \"should not consolidate if the action would schedule against a \
                       non-initialized node\" (SimulateScheduling's pod error)",
            snapshot: || onto_uninitialized(false),
            run: disrupt(1000),
            has: &["keep a: pod default/small would schedule against an uninitialized node b"],
            lacks: &["Underutilized Delete"],
        },
        Case {
            name: "the same move onto an initialized node is a deletion",
            upstream: "karpenter consolidation_test.go: \"can delete nodes\" (control for the above)",
            snapshot: || onto_uninitialized(true),
            run: disrupt(1000),
            has: &["Underutilized Delete nodes=[a] pods=1"],
            lacks: &[],
        },
        // 7
        Case {
            name: "hostname spread does not count an incoming pod its selector does not match",
            upstream: "kubernetes pkg/scheduler/framework/plugins/podtopologyspread filtering_test.go \
                       (selfMatchNum is 0 when the pod does not match); karpenter topology_test.go \
                       \"should not count the pod itself when it does not match the selector\"",
            snapshot: spread_not_self_matching,
            run: Run::Provision,
            has: &[
                "existing default/web-0 -> n1",
                "existing default/web-1 -> n1",
                "existing default/web-2 -> n1",
            ],
            lacks: &["claim"],
        },
        Case {
            name: "hostname spread counts an incoming pod that matches its selector",
            upstream: "karpenter topology_test.go \"should balance pods across nodes (hostname)\"",
            snapshot: spread_self_matching,
            run: Run::Provision,
            has: &["claim p-1 pool=p price=0.096 types=[m5.large"],
            lacks: &["existing default/db-1"],
        },
        Case {
            name: "zone spread does not count a non-matching incoming pod",
            upstream: "karpenter topology_test.go \"should balance pods across zones\" with a \
                       selector the pod does not match",
            snapshot: zone_spread_not_self_matching,
            run: Run::Provision,
            has: &["existing default/web-0 -> n1"],
            lacks: &["claim"],
        },
        // 4
        Case {
            name: "a do-not-disrupt duration protects a pod until it has run that long",
            upstream: "karpenter designs: do-not-disrupt grace period (karpenter.sh/do-not-disrupt \
                       accepts a duration)",
            snapshot: pod_dnd_30m,
            run: disrupt(600),
            has: &["keep a: pod default/guarded has karpenter.sh/do-not-disrupt=30m (20m left)"],
            lacks: &["nodes=[a]"],
        },
        Case {
            name: "after the duration the pod's node is consolidated",
            upstream: "karpenter designs: do-not-disrupt grace period (elapsed)",
            snapshot: pod_dnd_30m,
            run: disrupt(1800),
            has: &["Underutilized Delete nodes=[a] pods=1"],
            lacks: &[],
        },
        Case {
            name: "\"true\" protects for good",
            upstream: "karpenter consolidation_test.go \"should not consolidate nodes with \
                       karpenter.sh/do-not-disrupt on pods\"",
            snapshot: pod_dnd_true,
            run: disrupt(1_000_000),
            has: &["keep a: pod default/guarded has karpenter.sh/do-not-disrupt"],
            lacks: &["nodes=[a]"],
        },
        Case {
            name: "an unreadable value protects and is named",
            upstream: "this project's rule: bad input is reported, never read as consent",
            snapshot: pod_dnd_garbled,
            run: disrupt(1_000_000),
            has: &["karpenter.sh/do-not-disrupt=\"soon\", neither \"true\" nor a duration"],
            lacks: &["nodes=[a]"],
        },
        Case {
            name: "a node's do-not-disrupt duration counts from its creation",
            upstream: "karpenter designs: do-not-disrupt grace period, on nodes",
            snapshot: node_dnd_1h,
            run: disrupt(1800),
            has: &["keep a: node has karpenter.sh/do-not-disrupt=1h (30m left)"],
            lacks: &["Empty"],
        },
        Case {
            name: "a node's duration elapsed",
            upstream: "karpenter designs: do-not-disrupt grace period, on nodes (elapsed)",
            snapshot: node_dnd_1h,
            run: disrupt(3600),
            has: &["Empty Delete nodes=[a]"],
            lacks: &[],
        },
        // 5
        Case {
            name: "of two equal pools the one without a PreferNoSchedule taint wins",
            upstream: "karpenter scheduling suite_test.go Preferences: \"should tolerate \
                       PreferNoSchedule taint only after trying to relax affinity terms\"; \
                       kube-scheduler TaintToleration scoring",
            snapshot: pns_two_pools,
            run: Run::Provision,
            has: &["pool=b-plain"],
            lacks: &["pool=a-tainted"],
        },
        Case {
            name: "a PreferNoSchedule pool still takes the pod when nothing else can",
            upstream: "karpenter scheduling suite_test.go Preferences: \"should tolerate \
                       PreferNoSchedule taint\"",
            snapshot: pns_only_pool,
            run: Run::Provision,
            has: &["claim a-tainted-1 pool=a-tainted"],
            lacks: &["unschedulable"],
        },
        Case {
            name: "an untainted node is preferred to a PreferNoSchedule one",
            upstream: "kube-scheduler TaintToleration scoring (fewer intolerable \
                       PreferNoSchedule taints score higher)",
            snapshot: pns_two_nodes,
            run: Run::Provision,
            has: &["existing default/web -> n-b"],
            lacks: &["n-a", "claim"],
        },
        Case {
            name: "a pod that tolerates the taint keeps the pools' order",
            upstream: "karpenter scheduling suite_test.go Taints: \"should schedule pods that \
                       tolerate taints\"",
            snapshot: pns_tolerated,
            run: Run::Provision,
            has: &["pool=a-tainted"],
            lacks: &[],
        },
        // 8
        Case {
            name: "spot-to-spot needs 15 cheaper spot types",
            upstream: "karpenter consolidation_test.go \"cannot replace spot with spot if less \
                       than minimum InstanceTypes flexibility\" (MinInstanceTypesForSpotToSpot\
                       Consolidation = 15)",
            snapshot: spot_two_cheaper,
            run: disrupt(1000),
            has: &[
                "keep spot-a: spot-to-spot replacement needs at least 15 cheaper spot instance \
                 types that fit its pods; only 2 found",
            ],
            lacks: &["Replace"],
        },
        Case {
            name: "spot-to-spot with 15 cheaper spot types replaces",
            upstream: "karpenter consolidation_test.go \"can replace spot with spot\"",
            snapshot: spot_fifteen_cheaper,
            run: disrupt(1000),
            has: &[
                "Underutilized Replace nodes=[spot-a] pods=1",
                "replacement=c0.large@0.030",
            ],
            lacks: &[],
        },
        Case {
            name: "the minimum is configurable",
            upstream: "karpenter-provider-aws: the minimum flexibility as a setting",
            snapshot: spot_two_cheaper,
            run: Run::Disrupt {
                now: 1000,
                config: DisruptionConfig {
                    min_spot_to_spot_types: 2,
                    ..DisruptionConfig::default()
                },
            },
            has: &["Underutilized Replace nodes=[spot-a] pods=1"],
            lacks: &[],
        },
        // 3
        Case {
            name: "a host port a DaemonSet takes on every node: unschedulable, nothing launched",
            upstream: "karpenter scheduling suite_test.go \"should not schedule pods with \
                       conflicting host ports\" (DaemonSet variant); kube-scheduler NodePorts",
            snapshot: port_taken_by_daemonset,
            run: Run::Provision,
            has: &[
                "unschedulable default/web: host port 8080/TCP is taken by DaemonSet \
                 kube-system/proxy on the nodes of NodePool p",
            ],
            lacks: &["claim"],
        },
        Case {
            name: "two pods with one host port never share a node",
            upstream: "karpenter scheduling suite_test.go \"should not schedule pods with \
                       conflicting host ports on the same node\" / \"should schedule pods with \
                       different host ports on the same node\"",
            snapshot: two_pods_one_port,
            run: Run::Provision,
            has: &["pods=[a,c]", "pods=[b]"],
            lacks: &["pods=[a,b", "unschedulable"],
        },
        Case {
            name: "a port in use on an existing node counts",
            upstream: "kube-scheduler NodePorts filter on existing nodes; cluster-autoscaler \
                       simulator (hostPort predicate)",
            snapshot: port_in_use_on_existing_node,
            run: Run::Provision,
            has: &["claim p-1 pool=p"],
            lacks: &["existing default/new"],
        },
        Case {
            name: "the same port on different host addresses may share a node",
            upstream: "kube-scheduler NodePorts: hostIP conflicts only when equal or wildcard",
            snapshot: same_port_other_address,
            run: Run::Provision,
            has: &["pods=[a,b]"],
            lacks: &[],
        },
        // 6
        Case {
            name: "a 2-GPU pod shares the 8-GPU node its 1-GPU peers fill, not a node of its own",
            upstream: "issue 12, item 6(b) (seed 294 of the small-exact suite)",
            snapshot: two_gpu_pod_and_peers,
            run: Run::Provision,
            has: &[
                "claim b-1 pool=b price=11.213 types=[g8.x32] pods=[one-0,one-1,one-2,one-3,one-4,one-5,two]",
            ],
            lacks: &["pool=a"],
        },
        // 2
        Case {
            name: "a DaemonSet that does not tolerate a startup taint is still reserved",
            upstream: "karpenter provisioning suite_test.go Daemonsets overhead with \
                       startupTaints (a DaemonSet lands once the startup taint is removed)",
            snapshot: startup_taint_ds_lands,
            run: Run::Provision,
            has: &["claim p-1 pool=p price=0.192 types=[m5.xlarge"],
            lacks: &["m5.large,"],
        },
        Case {
            name: "a DaemonSet whose selector excludes the node is not reserved",
            upstream: "karpenter provisioning suite_test.go \"should not consider daemonsets \
                       that do not match the node's labels\"",
            snapshot: startup_taint_ds_excluded_by_selector,
            run: Run::Provision,
            has: &["claim p-1 pool=p price=0.096 types=[m5.large"],
            lacks: &[],
        },
        // 15
        Case {
            name: "without an overlay the cheaper type is chosen",
            upstream: "karpenter NodeOverlay docs (control for the cases below)",
            snapshot: no_overlay,
            run: Run::Provision,
            has: &["claim p-1 pool=p price=0.170 types=[c5.xlarge"],
            lacks: &[],
        },
        Case {
            name: "a percentage price overlay flips the chosen type",
            upstream: "karpenter NodeOverlay docs: priceAdjustment \"+10%\" (licensing costs); \
                       karpenter pkg/controllers/nodeoverlay tests: price adjusted by percentage",
            snapshot: c5_plus_20_percent,
            run: Run::Provision,
            has: &["claim p-1 pool=p price=0.192 types=[m5.xlarge"],
            lacks: &["types=[c5"],
        },
        Case {
            name: "of overlapping overlays the heavier decides the price, alone",
            upstream: "karpenter NodeOverlay docs: weight (higher first, then name) and \
                       field-level merging of price",
            snapshot: weighted_overlays,
            run: Run::Provision,
            has: &["claim p-1 pool=p price=0.100 types=[c5.xlarge"],
            lacks: &["price=0.150"],
        },
        Case {
            name: "a pod asking for a resource no type lists gets nothing",
            upstream: "karpenter NodeOverlay docs: extended resources (control)",
            snapshot: mig_without_overlay,
            run: Run::Provision,
            has: &["unschedulable default/slice"],
            lacks: &["claim"],
        },
        Case {
            name: "a capacity overlay makes a MIG slice plannable on a type that did not list it",
            upstream: "karpenter NodeOverlay docs: capacity adds extended resources \
                       (custom device slices) to matching instance types",
            snapshot: mig_with_overlay,
            run: Run::Provision,
            has: &["claim gpu-1 pool=gpu price=32.770 types=[p4d.24xlarge] pods=[slice]"],
            lacks: &["unschedulable"],
        },
    ]
}

fn render(case: &Case, snap: &Snapshot) -> String {
    match &case.run {
        Run::Provision => plan_provisioning(snap).render(),
        Run::Disrupt { now, config } => {
            plan_disruption(snap, &DisruptionState::default(), *now, config).render()
        }
    }
}

#[test]
fn parity_corpus() {
    let mut failures = Vec::new();
    let all = cases();
    for case in &all {
        let snap = (case.snapshot)();
        let out = render(case, &snap);
        assert_eq!(out, render(case, &snap), "{}: deterministic", case.name);
        for want in case.has {
            if !out.lines().any(|l| l.contains(want)) {
                failures.push(format!(
                    "{} [{}]\n  missing: {want}\n  got:\n{out}",
                    case.name, case.upstream
                ));
            }
        }
        for bad in case.lacks {
            if out.contains(bad) {
                failures.push(format!(
                    "{} [{}]\n  unexpected: {bad}\n  got:\n{out}",
                    case.name, case.upstream
                ));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} parity cases failed:\n{}",
        failures.len(),
        all.len(),
        failures.join("\n")
    );
}

/// karpenter consolidation_test.go "spot to spot consolidation should order the instance types
/// by price before enforcing minimum flexibility": with more than 15 cheaper spot types the
/// replacement offers the 15 cheapest.
#[test]
fn a_spot_to_spot_replacement_offers_the_fifteen_cheapest_types() {
    let plan = plan_disruption(
        &spot_node(17),
        &DisruptionState::default(),
        1000,
        &DisruptionConfig::default(),
    );
    let claim = plan.commands[0]
        .replacement
        .as_ref()
        .expect("a spot-to-spot replacement");
    let types: Vec<&str> = claim
        .instance_types
        .iter()
        .map(|o| &*o.instance_type)
        .collect();
    let cheapest: Vec<String> = (0..15).map(|i| format!("c{i}.large")).collect();
    assert_eq!(types, cheapest);
}
