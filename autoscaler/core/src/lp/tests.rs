//! Tests of the LP lower bound: hand-solved instances and a property check against the planner.

use std::collections::BTreeSet;

use proptest::prelude::*;

use super::*;
use crate::builders::*;
use crate::instance::InstanceType;
use crate::model::Pool;
use crate::provision::plan_provisioning;

const ZONES: [&str; 2] = ["z1", "z2"];

fn snapshot(pools: Vec<Pool>, pending: Vec<Pod>) -> Snapshot {
    Snapshot {
        pending,
        pools,
        ..Snapshot::default()
    }
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-6 * b.abs().max(1.0)
}

#[test]
fn single_resource_optimum_is_the_cheapest_rate() {
    let types = vec![
        itype("t.small")
            .cpu("2")
            .mem("64Gi")
            .on_demand(&ZONES, 1.0)
            .build(),
        itype("t.big")
            .cpu("4")
            .mem("64Gi")
            .on_demand(&ZONES, 1.5)
            .build(),
    ];
    let pods = (0..3)
        .map(|i| pod(&format!("p{i}")).cpu("1").build())
        .collect();
    let lb = lower_bound(&snapshot(vec![pool("p", types).build()], pods));
    // 3 cpu at the big type's 0.375 $/cpu-hour.
    assert!(close(lb.cost, 1.125), "{lb:?}");
    assert_eq!((lb.pods_counted, lb.pods_excluded), (3, 0));
}

#[test]
fn resources_do_not_pool_across_shapes() {
    // cpu-rich and memory-rich shapes at the same price; balanced pods. Pooling capacity over
    // shapes would say x_C = x_M = 2/3 (4 cpu and 4 GiB in all, cost 4/3), but a pod uses one
    // node's cpu *and* memory: each shape holds 2 pods per node, so the optimum is 2.
    let types = vec![
        itype("c.x")
            .cpu("4")
            .mem("2Gi")
            .on_demand(&ZONES, 1.0)
            .build(),
        itype("m.x")
            .cpu("2")
            .mem("4Gi")
            .on_demand(&ZONES, 1.0)
            .build(),
    ];
    let pods = (0..4)
        .map(|i| pod(&format!("p{i}")).cpu("1").mem("1Gi").build())
        .collect();
    let snap = snapshot(vec![pool("p", types).build()], pods);
    let lb = lower_bound(&snap);
    assert!(close(lb.cost, 2.0), "{lb:?}");
    // 2 shapes + 2 (group, shape) pairs; rows: 2 shapes x (cpu, memory, pods) + 1 group.
    assert_eq!((lb.variables, lb.constraints), (4, 7));
    assert!(lb.cost <= plan_provisioning(&snap).new_cost());
}

#[test]
fn different_demands_are_not_forced_to_split_alike() {
    // A cpu-heavy and a memory-heavy pod, each fitting exactly one shape kind: the optimum
    // puts each on its own shape (cost 2 x 0.5); a shared split would be charged more.
    let types = vec![
        itype("c.x")
            .cpu("4")
            .mem("1Gi")
            .on_demand(&ZONES, 1.0)
            .build(),
        itype("m.x")
            .cpu("1")
            .mem("4Gi")
            .on_demand(&ZONES, 1.0)
            .build(),
    ];
    let pods = vec![
        pod("cpu").cpu("2").mem("128Mi").build(),
        pod("mem").cpu("100m").mem("2Gi").build(),
    ];
    let lb = lower_bound(&snapshot(vec![pool("p", types).build()], pods));
    assert!(close(lb.cost, 1.0), "{lb:?}");
}

#[test]
fn pods_no_shape_can_host_are_excluded() {
    let types = vec![
        itype("t.small")
            .cpu("2")
            .mem("4Gi")
            .on_demand(&ZONES, 1.0)
            .build(),
    ];
    let pods = vec![
        pod("ok").cpu("2").build(),
        pod("huge").cpu("64").build(),
        pod("gpu").gpus(1).build(),
    ];
    let lb = lower_bound(&snapshot(vec![pool("p", types).build()], pods));
    assert_eq!((lb.pods_counted, lb.pods_excluded), (1, 2));
    assert!(close(lb.cost, 1.0), "{lb:?}");
}

#[test]
fn gpu_shares_count_as_fractions_of_a_device() {
    let types = vec![
        itype("g.one")
            .cpu("8")
            .mem("32Gi")
            .gpus(1, "T4", 16)
            .on_demand(&ZONES, 2.0)
            .build(),
    ];
    let pods: Vec<_> = (0..3)
        .map(|i| pod(&format!("s{i}")).cpu("100m").gpu_share(500).build())
        .collect();
    let fractional = autoscaler_core_sharing();
    let lb = lower_bound(&snapshot(
        vec![pool("p", types.clone()).build()],
        pods.clone(),
    ));
    // A pool without fractional sharing cannot take them at all.
    assert_eq!((lb.pods_counted, lb.pods_excluded), (0, 3), "{lb:?}");
    let lb = lower_bound(&snapshot(
        vec![pool("p", types).sharing(fractional).build()],
        pods,
    ));
    assert!(close(lb.cost, 3.0), "{lb:?}");
}

/// A one-T4 type with cores to spare, and a small GPU-less type.
fn gpu_node_and_cpu_node() -> Vec<InstanceType> {
    vec![
        itype("g.big")
            .cpu("16")
            .mem("64Gi")
            .gpus(1, "T4", 16)
            .on_demand(&ZONES, 2.0)
            .build(),
        itype("c.small")
            .cpu("4")
            .mem("16Gi")
            .on_demand(&ZONES, 0.5)
            .build(),
    ]
}

#[test]
fn a_cpu_pod_rides_in_a_gpu_nodes_spare_room() {
    // One GPU pod and one cpu pod: the GPU node has room for both. The bound may put the cpu
    // pod there, and so does the planner: the node comes for the GPU pod anyway.
    let types = gpu_node_and_cpu_node();
    let pods = vec![
        pod("gpu").cpu("2").mem("8Gi").gpus(1).build(),
        pod("cpu").cpu("4").mem("16Gi").build(),
    ];
    let snap = snapshot(vec![pool("p", types).build()], pods);
    let lb = lower_bound(&snap);
    // The GPU node's cpu is the cheaper: 6 cpu and 24 GiB of its 16 and 64 would cost
    // 2 × 6/16 = 0.75, but the GPU pod alone needs the whole device: 2.0.
    assert!(close(lb.cost, 2.0), "{lb:?}");
    let plan = plan_provisioning(&snap);
    assert_eq!(plan.new_claims.len(), 1, "{}", plan.render());
    assert!(close(plan.new_cost(), lb.cost), "{}", plan.render());
}

#[test]
fn selectors_and_taints_restrict_shapes() {
    let gpu_types = vec![
        itype("g.t4")
            .cpu("8")
            .mem("32Gi")
            .gpus(1, "T4", 16)
            .on_demand(&ZONES, 1.0)
            .build(),
        itype("g.a100")
            .cpu("8")
            .mem("32Gi")
            .gpus(1, "A100", 40)
            .on_demand(&ZONES, 4.0)
            .build(),
    ];
    let cpu_types = vec![
        itype("c.x")
            .cpu("8")
            .mem("32Gi")
            .on_demand(&ZONES, 0.1)
            .build(),
    ];
    let pools = vec![
        pool("gpu", gpu_types)
            .taint("nvidia.com/gpu", "present")
            .build(),
        pool("cpu", cpu_types).build(),
    ];
    let pods = vec![
        pod("a100").cpu("1").gpus(1).model("A100").build(),
        pod("any").cpu("1").gpus(1).build(),
        // Needs no GPU but cannot tolerate the GPU pool's taint: only the cpu type.
        pod("plain").cpu("8").build(),
    ];
    let lb = lower_bound(&snapshot(pools, pods));
    assert!(close(lb.cost, 4.0 + 1.0 + 0.1), "{lb:?}");
}

#[test]
fn dominated_shapes_are_pruned() {
    let types = vec![
        itype("t.a")
            .cpu("4")
            .mem("8Gi")
            .on_demand(&ZONES, 1.0)
            .build(),
        // Same price, less of everything: never needed.
        itype("t.b")
            .cpu("2")
            .mem("8Gi")
            .on_demand(&ZONES, 1.0)
            .build(),
        // Identical to t.a: one of the two is enough.
        itype("t.c")
            .cpu("4")
            .mem("8Gi")
            .on_demand(&ZONES, 1.0)
            .build(),
        // Twice t.a at twice the price but the same pod slots: less per dollar.
        itype("t.d")
            .cpu("8")
            .mem("16Gi")
            .on_demand(&ZONES, 2.0)
            .build(),
    ];
    let pods = vec![pod("p").cpu("1").build()];
    let lb = lower_bound(&snapshot(vec![pool("p", types).build()], pods));
    // One shape left: x plus one y; rows cpu, pods and the group.
    assert_eq!((lb.variables, lb.constraints), (2, 3));
    assert!(close(lb.cost, 0.25), "{lb:?}");
}

#[test]
fn per_dollar_pruning_keeps_shapes_only_they_can_host() {
    // A linear price list: the big type gives as much per dollar and hosts everything, so the
    // small ones go; but a pod only the smallest type is allowed on keeps that one, which then
    // hosts everything as well and prunes the others.
    let types = vec![
        itype("t.1")
            .cpu("1")
            .mem("2Gi")
            .max_pods(10)
            .on_demand(&ZONES, 0.05)
            .build(),
        itype("t.2")
            .cpu("2")
            .mem("4Gi")
            .max_pods(20)
            .on_demand(&ZONES, 0.10)
            .build(),
        itype("t.8")
            .cpu("8")
            .mem("16Gi")
            .max_pods(80)
            .on_demand(&ZONES, 0.40)
            .build(),
    ];
    let snap = |pods| snapshot(vec![pool("p", types.clone()).build()], pods);
    let lb = lower_bound(&snap(vec![pod("a").cpu("500m").build()]));
    // One shape: x plus one y.
    assert_eq!(lb.variables, 2);
    assert!(close(lb.cost, 0.025), "{lb:?}");
    let pinned = pod("b")
        .cpu("500m")
        .select(crate::labels::INSTANCE_TYPE, "t.1")
        .build();
    let lb = lower_bound(&snap(vec![pod("a").cpu("500m").build(), pinned]));
    // One shape: x plus a y for each of the two groups.
    assert_eq!(lb.variables, 3);
    assert!(close(lb.cost, 0.05), "{lb:?}");
}

#[test]
fn empty_snapshot_costs_nothing() {
    let lb = lower_bound(&Snapshot::default());
    assert_eq!(lb.cost, 0.0);
    assert_eq!((lb.pods_counted, lb.pods_excluded), (0, 0));
}

#[test]
fn certificate_repair_never_raises_the_bound() {
    // An absurd pricing (negative, infinite, over budget) must still certify to a valid bound.
    let types = vec![
        itype("t.a")
            .cpu("4")
            .mem("8Gi")
            .on_demand(&ZONES, 1.0)
            .build(),
    ];
    let pods = vec![pod("p").cpu("2").mem("1Gi").build()];
    let snap = snapshot(vec![pool("p", types).build()], pods);
    let shapes = build_shapes(&snap);
    let lp = build(&snap, &shapes);
    let nres = lp.resources.len();
    let bad = vec![vec![-1.0, f64::INFINITY, 50.0, 7.0][..nres].to_vec()];
    assert!(lp.certify(bad) <= 0.5 + 1e-12);
}

fn catalog() -> Vec<InstanceType> {
    vec![
        itype("c.small")
            .cpu("2")
            .mem("4Gi")
            .max_pods(8)
            .on_demand(&ZONES, 0.1)
            .build(),
        itype("c.mid")
            .cpu("4")
            .mem("16Gi")
            .on_demand(&ZONES, 0.21)
            .build(),
        itype("c.big")
            .cpu("16")
            .mem("32Gi")
            .on_demand(&ZONES, 0.7)
            .build(),
        itype("r.big")
            .cpu("8")
            .mem("128Gi")
            .on_demand(&["z2"], 0.9)
            .build(),
        itype("g.one")
            .cpu("8")
            .mem("32Gi")
            .gpus(1, "L4", 24)
            .on_demand(&ZONES, 0.9)
            .build(),
        itype("g.four")
            .cpu("48")
            .mem("192Gi")
            .gpus(4, "L4", 24)
            .on_demand(&["z1"], 3.4)
            .build(),
        itype("h.eight")
            .cpu("96")
            .mem("1024Gi")
            .gpus(8, "H100", 80)
            .on_demand(&["z2"], 90.0)
            .build(),
    ]
}

fn arb_pod(i: usize) -> impl Strategy<Value = Pod> {
    (
        1u32..24,
        0u32..48,
        prop_oneof![
            Just(0i64),
            Just(0),
            Just(0),
            Just(1),
            Just(2),
            Just(4),
            Just(8)
        ],
        prop_oneof![
            Just(0u32),
            Just(0),
            Just(0),
            Just(250),
            Just(500),
            Just(800)
        ],
        proptest::option::of(prop_oneof![Just("L4"), Just("H100")]),
        proptest::option::of(prop_oneof![Just("z1"), Just("z2")]),
    )
        .prop_map(move |(cpu_half, mem_gi, gpus, share, model, zone)| {
            let mut b = pod(&format!("p{i:03}"))
                .cpu(&format!("{}m", cpu_half * 500))
                .mem(&format!("{mem_gi}Gi"));
            if gpus > 0 {
                b = b.gpus(gpus);
            } else if share > 0 {
                b = b.gpu_share(share);
            }
            if let Some(m) = model {
                b = b.model(m);
            }
            if let Some(z) = zone {
                b = b.select(crate::labels::ZONE, z);
            }
            b.build()
        })
}

fn arb_snapshot() -> impl Strategy<Value = Snapshot> {
    let pods = (1usize..24).prop_flat_map(|n| (0..n).map(arb_pod).collect::<Vec<_>>());
    (pods, any::<bool>(), any::<bool>()).prop_map(|(pending, split, taint)| {
        let all = catalog();
        let pools = if split {
            let (gpu, cpu): (Vec<_>, Vec<_>) = all.into_iter().partition(|t| t.gpu.is_some());
            let mut g = pool("gpu", gpu);
            if taint {
                g = g.taint("nvidia.com/gpu", "present");
            }
            vec![g.build(), pool("cpu", cpu).weight(10).build()]
        } else {
            vec![pool("all", all).build()]
        };
        snapshot(pools, pending)
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// The bound never exceeds the cost of the plan for the pods the plan put on new claims
    /// (pods it could not place are dropped: they cost the plan nothing).
    #[test]
    fn bound_is_below_the_planner(snap in arb_snapshot()) {
        let plan = plan_provisioning(&snap);
        let placed: BTreeSet<_> = plan.new_claims.iter().flat_map(|c| c.pods.iter().cloned()).collect();
        let mut sub = snap.clone();
        sub.pending.retain(|p| placed.contains(&p.key));
        let lb = lower_bound(&sub);
        prop_assert!(lb.cost <= plan.new_cost() + 1e-9, "bound {} > plan {}\n{}", lb.cost, plan.new_cost(), plan.render());
        prop_assert_eq!(lb.pods_counted, sub.pending.len());
        prop_assert!(lb.cost >= 0.0);
    }

    /// Solving is deterministic.
    #[test]
    fn bound_is_deterministic(snap in arb_snapshot()) {
        prop_assert_eq!(lower_bound(&snap), lower_bound(&snap));
    }
}

fn autoscaler_core_sharing() -> crate::model::GpuSharing {
    crate::model::GpuSharing {
        fractional: true,
        ..crate::model::GpuSharing::default()
    }
}
