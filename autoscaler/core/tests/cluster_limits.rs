//! Data-driven scenarios for cluster-wide limits (the Cluster Autoscaler's `--max-nodes-total`,
//! `--cores-total`, `--memory-total`, `--gpu-total` and CapacityQuota objects) and atomic
//! NodePools (`ZeroOrMaxNodeScaling`), through the planner and disruption. Expected plans are
//! rendered text (`UPDATE_EXPECT=1 cargo test` refreshes them).

use autoscaler_core::builders::*;
use autoscaler_core::disruption::{DisruptionConfig, DisruptionState, plan_disruption};
use autoscaler_core::instance::InstanceType;
use autoscaler_core::labels;
use autoscaler_core::model::{ClusterLimit, DisruptionPolicy, InFlightClaim, Snapshot};
use autoscaler_core::plan::Plan;
use autoscaler_core::provision::plan_provisioning;
use autoscaler_core::quota::{Usage, node_usage, selects};
use autoscaler_core::requirements::{Operator, Requirements};
use expect_test::{Expect, expect};

const ZONES: [&str; 2] = ["z1", "z2"];

fn h100x8() -> InstanceType {
    itype("p5.48xlarge")
        .cpu("192")
        .mem("2048Gi")
        .gpus(8, "H100", 80)
        .on_demand(&ZONES, 98.32)
        .build()
}

fn a10x1() -> InstanceType {
    itype("g5.xlarge")
        .cpu("4")
        .mem("16Gi")
        .gpus(1, "A10G", 24)
        .on_demand(&ZONES, 1.006)
        .build()
}

fn cpu8() -> InstanceType {
    itype("m5.2xlarge")
        .cpu("8")
        .mem("32Gi")
        .on_demand(&ZONES, 0.384)
        .build()
}

fn cpu16() -> InstanceType {
    itype("m5.4xlarge")
        .cpu("16")
        .mem("64Gi")
        .on_demand(&ZONES, 0.768)
        .build()
}

fn snapshot(
    pods: Vec<PodBuilder>,
    nodes: Vec<NodeBuilder>,
    pools: Vec<PoolBuilder>,
    limits: Vec<LimitBuilder>,
) -> Snapshot {
    Snapshot {
        pending: pods.into_iter().map(|p| p.build()).collect(),
        nodes: nodes.into_iter().map(|n| n.build()).collect(),
        pools: pools.into_iter().map(|p| p.build()).collect(),
        cluster_limits: limits.into_iter().map(|l| l.build()).collect(),
        ..Snapshot::default()
    }
}

/// Plans, compares the rendering, and checks the plan against every cluster-wide maximum
/// independently of the planner: existing nodes, in-flight claims and the largest option of
/// each new claim the limit may select.
fn check(snap: &Snapshot, expected: Expect) -> Plan {
    let plan = plan_provisioning(snap);
    expected.assert_eq(&plan.render());
    assert_eq!(plan, plan_provisioning(snap), "deterministic");
    for limit in &snap.cluster_limits {
        let used = total_after(snap, &plan, limit);
        if let Some(n) = limit.max.nodes {
            assert!(
                used.nodes <= n,
                "{}: {} nodes > {n}",
                limit.name,
                used.nodes
            );
        }
        for (r, n) in &limit.max.resources {
            assert!(used.resources.get(r) <= *n, "{}: {r} over", limit.name);
        }
        for (m, n) in &limit.max.gpus_by_model {
            assert!(used.gpus_of(m) <= *n, "{}: GPU {m} over", limit.name);
        }
    }
    plan
}

fn total_after(snap: &Snapshot, plan: &Plan, limit: &ClusterLimit) -> Usage {
    let mut u = Usage::default();
    for n in snap.nodes.iter().filter(|n| selects(limit, &n.labels)) {
        u.add(&node_usage(&snap.pools, n));
    }
    for c in &plan.new_claims {
        let pool = snap.pools.iter().find(|p| p.name == c.pool).expect("pool");
        let mut most = Usage::default();
        let mut any = false;
        for o in &c.instance_types {
            let t = pool
                .instance_types
                .iter()
                .find(|t| *t.name == *o.instance_type)
                .expect("type");
            for (zone, ct, _) in o.offerings.iter() {
                let mut l = t.labels.clone();
                l.extend(pool.labels.clone());
                l.insert(labels::ZONE.into(), zone.to_string());
                l.insert(labels::CAPACITY_TYPE.into(), ct.as_str().into());
                if selects(limit, &l) {
                    any = true;
                    let mut one = Usage {
                        nodes: 1,
                        resources: t.capacity.clone(),
                        ..Default::default()
                    };
                    if let Some(g) = &t.gpu {
                        one.models.insert(g.model.clone(), i64::from(g.count));
                    }
                    most = most.max(&one);
                }
            }
        }
        if any {
            u.add(&most);
        }
    }
    u
}

fn flags() -> LimitBuilder {
    cluster_limit("cluster limit")
}

#[test]
fn gpus_per_model_count_every_pool_and_the_pod_is_told_the_numbers() {
    // Two pools with H100 nodes; one busy H100 node exists in a third pool, outside any
    // pool's limit. The cluster holds 16 H100s at most: one more 8-GPU node, not two.
    let pods = vec![
        pod("a").gpus(8).model("H100"),
        pod("b").gpus(8).model("H100"),
        pod("small").gpus(1),
    ];
    let existing = node("h-0", &h100x8(), "z1")
        .pool("other")
        .with_pod(pod("busy").gpus(8));
    check(
        &snapshot(
            pods,
            vec![existing],
            vec![
                pool("train", vec![h100x8()]),
                pool("infer", vec![h100x8(), a10x1()]),
            ],
            vec![flags().max_gpus("H100", 16)],
        ),
        expect![[r#"
            claim infer-1 pool=infer price=98.320 types=[p5.48xlarge] pods=[a]
              requirements: gpu-autoscaler.dev/instance-gpu-name In [h100]
            claim infer-2 pool=infer price=1.006 types=[g5.xlarge] pods=[small]
            unschedulable default/b: cluster limit GPU H100 max 16 reached: 16 in use or launching, the scale-up adds 8
        "#]],
    );
}

#[test]
fn node_core_and_memory_totals_count_in_flight_claims_and_foreign_nodes() {
    // One busy unmanaged node (8 cores) and one claim in flight (16 cores) already count.
    let foreign = node("static-0", &cpu8(), "z1").with_pod(pod("busy").cpu("7"));
    let in_flight = InFlightClaim {
        name: "default-x".into(),
        pool: "default".into(),
        instance_types: vec!["m5.4xlarge".into()],
        requirements: Requirements::new(),
        pods: vec![],
        created_at: 0,
    };
    let pods = vec![pod("a").cpu("15"), pod("b").cpu("15"), pod("c").cpu("6")];
    let mut snap = snapshot(
        pods,
        vec![foreign],
        vec![pool("default", vec![cpu8(), cpu16()])],
        vec![flags().max("cpu", "48")],
    );
    snap.in_flight.push(in_flight);
    // The in-flight claim holds a; b needs a new 16-core node (8 + 16 + 16 = 40); c would add
    // 8 more: exactly 48, allowed.
    check(
        &snap,
        expect![[r#"
            in-flight default/a -> default-x
            claim default-1 pool=default price=0.768 types=[m5.4xlarge] pods=[b]
            claim default-2 pool=default price=0.384 types=[m5.2xlarge] pods=[c]
        "#]],
    );
    snap.cluster_limits = vec![flags().max("cpu", "47").build()];
    check(
        &snap,
        expect![[r#"
            in-flight default/a -> default-x
            claim default-1 pool=default price=0.768 types=[m5.4xlarge] pods=[b]
            unschedulable default/c: cluster limit cpu max 47 reached: 40 in use or launching, the scale-up adds 8
        "#]],
    );
    snap.cluster_limits = vec![flags().max_nodes(3).max("memory", "1000Gi").build()];
    check(
        &snap,
        expect![[r#"
            in-flight default/a -> default-x
            claim default-1 pool=default price=0.768 types=[m5.4xlarge] pods=[b]
            unschedulable default/c: cluster limit nodes max 3 reached: 3 in use or launching
        "#]],
    );
}

#[test]
fn a_quota_applies_only_to_the_nodes_its_selector_matches() {
    // The quota selects team=ml nodes: the ml pool's claims count, the other pool's do not.
    let pods = vec![
        pod("ml-0").cpu("12").select("team", "ml"),
        pod("ml-1").cpu("12").select("team", "ml"),
        pod("web-0").cpu("12"),
        pod("web-1").cpu("12"),
    ];
    let quota = cluster_limit("CapacityQuota team-ml")
        .select("team", Operator::In, &["ml"])
        .max("cpu", "16");
    check(
        &snapshot(
            pods,
            vec![],
            vec![
                pool("ml", vec![cpu16()]).label("team", "ml").weight(10),
                pool("web", vec![cpu16()]),
            ],
            vec![quota],
        ),
        expect![[r#"
            claim ml-1 pool=ml price=0.768 types=[m5.4xlarge] pods=[ml-0]
              requirements: team In [ml]
            claim web-2 pool=web price=0.768 types=[m5.4xlarge] pods=[web-0]
            claim web-3 pool=web price=0.768 types=[m5.4xlarge] pods=[web-1]
            unschedulable default/ml-1: CapacityQuota team-ml cpu max 16 reached: 16 in use or launching, the scale-up adds 16; no instance type in NodePool web matches the pod's node selector and affinity
        "#]],
    );
}

#[test]
fn a_zone_quota_holds_claims_that_could_land_in_the_zone() {
    // A quota of one node in z1: the first claim may land in z1, so it counts (to be safe);
    // a pod pinned to z2 is not held back.
    let pods = vec![
        pod("any-0").cpu("12"),
        pod("any-1").cpu("12"),
        pod("z2").cpu("12").select(labels::ZONE, "z2"),
    ];
    check(
        &snapshot(
            pods,
            vec![],
            vec![pool("default", vec![cpu16()])],
            vec![
                cluster_limit("CapacityQuota z1")
                    .select(labels::ZONE, Operator::In, &["z1"])
                    .max_nodes(1),
            ],
        ),
        expect![[r#"
            claim default-1 pool=default price=0.768 types=[m5.4xlarge] pods=[any-0]
            claim default-2 pool=default price=0.768 types=[m5.4xlarge] pods=[z2]
              requirements: topology.kubernetes.io/zone In [z2]
            unschedulable default/any-1: CapacityQuota z1 nodes max 1 reached: 1 in use or launching
        "#]],
    );
}

#[test]
fn an_atomic_pool_plans_all_its_nodes_at_once_or_none() {
    // One pod asks for the atomic pool: all four nodes are planned, one template, three of
    // them empty; a second pod fills one of those rather than a fifth node.
    let pods = vec![
        pod("w0").gpus(8).select("slice", "tpu-like"),
        pod("w1").gpus(8).select("slice", "tpu-like"),
    ];
    let slice = || pool("slice", vec![h100x8()]).label("slice", "tpu-like");
    check(
        &snapshot(pods.clone(), vec![], vec![slice().atomic(4)], vec![]),
        expect![[r#"
            claim slice-1 pool=slice price=98.320 types=[p5.48xlarge] pods=[w0]
              requirements: slice In [tpu-like]
              atomic
            claim slice-2 pool=slice price=98.320 types=[p5.48xlarge] pods=[w1]
              requirements: slice In [tpu-like]
              atomic
            claim slice-3 pool=slice price=98.320 types=[p5.48xlarge] pods=[]
              requirements: slice In [tpu-like]
              atomic
            claim slice-4 pool=slice price=98.320 types=[p5.48xlarge] pods=[]
              requirements: slice In [tpu-like]
              atomic
        "#]],
    );
    // A limit that holds three of the four nodes: nothing is launched, and the pods say why.
    check(
        &snapshot(
            pods.clone(),
            vec![],
            vec![slice().atomic(4)],
            vec![flags().max_gpus("H100", 24)],
        ),
        expect![[r#"
            unschedulable default/w0: NodePool slice scales atomically to 4 nodes: cluster limit GPU H100 max 24 reached: 0 in use or launching, the scale-up adds 32
            unschedulable default/w1: NodePool slice scales atomically to 4 nodes: cluster limit GPU H100 max 24 reached: 0 in use or launching, the scale-up adds 32
        "#]],
    );
    // The pool's own node limit below its atomic size holds it too.
    check(
        &snapshot(
            pods.clone(),
            vec![],
            vec![slice().atomic(4).limit_nodes(3)],
            vec![],
        ),
        expect![[r#"
            unschedulable default/w0: NodePool slice scales atomically to 4 nodes: NodePool slice limit nodes=3 reached
            unschedulable default/w1: NodePool slice scales atomically to 4 nodes: NodePool slice limit nodes=3 reached
        "#]],
    );
    // At its size already: pods use the nodes there are, and no fifth node is opened.
    let full: Vec<NodeBuilder> = (0..4)
        .map(|i| {
            let n = node(&format!("s{i}"), &h100x8(), "z1")
                .pool("slice")
                .label("slice", "tpu-like");
            if i < 3 {
                n.with_pod(pod(&format!("busy{i}")).gpus(8))
            } else {
                n
            }
        })
        .collect();
    check(
        &snapshot(pods, full, vec![slice().atomic(4)], vec![]),
        expect![[r#"
            existing default/w0 -> s3
            unschedulable default/w1: NodePool slice scales atomically to 4 nodes and has them (existing, launching or planned)
        "#]],
    );
}

fn quick() -> DisruptionPolicy {
    DisruptionPolicy {
        unneeded_s: 0,
        budgets: vec![],
        ..DisruptionPolicy::default()
    }
}

fn disrupt(s: &Snapshot, expected: Expect) {
    let plan = plan_disruption(
        s,
        &DisruptionState::default(),
        0,
        &DisruptionConfig::default(),
    );
    expected.assert_eq(&plan.render());
}

#[test]
fn an_atomic_pool_scales_down_only_as_a_whole() {
    let slice = || {
        pool("slice", vec![cpu16()])
            .atomic(3)
            .disruption(DisruptionPolicy {
                // 10% of 3 nodes rounds up to 1: the whole pool still counts as one.
                budgets: DisruptionPolicy::default().budgets,
                ..quick()
            })
    };
    let spare = || node("spare", &cpu16(), "z1").pool("big");
    let members = |busy: &[usize]| -> Vec<NodeBuilder> {
        (0..3)
            .map(|i| {
                let n = node(&format!("s{i}"), &cpu16(), "z1").pool("slice");
                if busy.contains(&i) {
                    n.with_pod(pod(&format!("p{i}")).cpu("2").owner(Some("ReplicaSet")))
                } else {
                    n
                }
            })
            .collect()
    };
    // All three removable and their pods fit on the spare node together: one command.
    let mut nodes = members(&[0]);
    nodes.push(spare().with_pod(pod("keep").cpu("15").owner(Some("ReplicaSet"))));
    let mut nodes_fit = members(&[0]);
    nodes_fit.push(spare());
    disrupt(
        &snapshot(
            vec![],
            nodes_fit,
            vec![slice(), pool("big", vec![cpu16()])],
            vec![],
        ),
        expect![[r#"
            Underutilized Delete nodes=[s0,s1,s2] pods=1 savings=2.304
            keep spare: unneeded for 0s of 10m
        "#]],
    );
    // The pod of s0 fits nowhere else: the empty s1 and s2 stay too, never removed alone.
    disrupt(
        &snapshot(
            vec![],
            nodes,
            vec![slice(), pool("big", vec![cpu16()])],
            vec![],
        ),
        expect![[r#"
            keep s0: NodePool slice scales down only as a whole and its nodes' pods do not fit elsewhere together: pod default/p0 has nowhere to go: no NodePool exists
            keep s1: NodePool slice scales down only as a whole and its nodes' pods do not fit elsewhere together: pod default/p0 has nowhere to go: no NodePool exists
            keep s2: NodePool slice scales down only as a whole and its nodes' pods do not fit elsewhere together: pod default/p0 has nowhere to go: no NodePool exists
            keep spare: cpu/memory utilization 0.94 above threshold 0.50
        "#]],
    );
    // One member above its threshold keeps the others.
    let mut nodes = members(&[]);
    nodes[1] = node("s1", &cpu16(), "z1")
        .pool("slice")
        .with_pod(pod("hot").cpu("14").owner(Some("ReplicaSet")));
    disrupt(
        &snapshot(vec![], nodes, vec![slice()], vec![]),
        expect![[r#"
            keep s0: NodePool slice scales down only as a whole: node s1 stays (cpu/memory utilization 0.88 above threshold 0.50)
            keep s1: cpu/memory utilization 0.88 above threshold 0.50
            keep s2: NodePool slice scales down only as a whole: node s1 stays (cpu/memory utilization 0.88 above threshold 0.50)
        "#]],
    );
}

#[test]
fn cluster_minimums_keep_nodes_disruption_would_remove() {
    let nodes: Vec<NodeBuilder> = (0..3)
        .map(|i| node(&format!("n{i}"), &cpu16(), "z1").pool("default"))
        .collect();
    let snap = snapshot(
        vec![],
        nodes,
        vec![pool("default", vec![cpu16()]).disruption(quick())],
        vec![flags().min("cpu", "30")],
    );
    // 48 cores (allocatable a little less) with a minimum of 30: one empty node may go.
    disrupt(
        &snap,
        expect![[r#"
            Empty Delete nodes=[n0] pods=0 savings=0.768
            keep n1: cluster limit cpu min 30 kept: 32 in the cluster, removing 16
            keep n2: cluster limit cpu min 30 kept: 32 in the cluster, removing 16
        "#]],
    );
}
