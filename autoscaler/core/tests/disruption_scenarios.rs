//! Data-driven disruption scenarios: each builds a small cluster, plans disruption at a given
//! time, and compares the rendered commands and kept-node reasons with the expectation.

use autoscaler_core::builders::*;
use autoscaler_core::disruption::{
    Command, DisruptionCache, DisruptionConfig, DisruptionState, Method, narrow_empty,
    plan_disruption, plan_disruption_cached, utilization, validate,
};
use autoscaler_core::instance::InstanceType;
use autoscaler_core::labels;
use autoscaler_core::model::{
    Budget, BudgetValue, DisruptionPolicy, DisruptionReason, Pdb, Snapshot,
};
use autoscaler_core::requirements::{Operator, Requirements};
use expect_test::{Expect, expect};

const ZONES: [&str; 1] = ["z1"];

fn g8() -> InstanceType {
    itype("p4d.24xlarge")
        .cpu("96")
        .mem("1152Gi")
        .gpus(8, "A100", 40)
        .on_demand(&ZONES, 21.96)
        .build()
}
fn g1() -> InstanceType {
    itype("g5.xlarge")
        .cpu("4")
        .mem("16Gi")
        .gpus(1, "A10G", 24)
        .on_demand(&ZONES, 1.006)
        .build()
}
fn m4() -> InstanceType {
    itype("m5.xlarge")
        .cpu("4")
        .mem("16Gi")
        .on_demand(&ZONES, 0.192)
        .build()
}
fn m16() -> InstanceType {
    itype("m5.4xlarge")
        .cpu("16")
        .mem("64Gi")
        .on_demand(&ZONES, 0.768)
        .build()
}

/// A node of pool `p` created at t=0, with a daemonset pod.
fn managed(name: &str, it: &InstanceType, p: &str) -> NodeBuilder {
    node(name, it, "z1").pool(p).with_pod(
        pod(&format!("ds-{name}"))
            .cpu("100m")
            .owner(Some("DaemonSet")),
    )
}

fn snap(nodes: Vec<NodeBuilder>, pools: Vec<PoolBuilder>) -> Snapshot {
    Snapshot {
        nodes: nodes.into_iter().map(|n| n.build()).collect(),
        pools: pools.into_iter().map(|p| p.build()).collect(),
        ..Snapshot::default()
    }
}

fn quick() -> DisruptionPolicy {
    DisruptionPolicy {
        unneeded_s: 0,
        budgets: vec![],
        ..DisruptionPolicy::default()
    }
}

/// The controller's flags, with the Cluster Autoscaler's `--scale-down-delay-after-add` (10m)
/// that the pause scenarios exercise (gpu-autoscaler's own default is 0s).
fn ca_flags() -> DisruptionConfig {
    DisruptionConfig {
        delay_after_scale_up_s: 600,
        ..DisruptionConfig::default()
    }
}

fn check(
    s: &Snapshot,
    now: i64,
    state: &DisruptionState,
    expected: Expect,
) -> autoscaler_core::DisruptionPlan {
    let plan = plan_disruption(s, state, now, &ca_flags());
    expected.assert_eq(&plan.render());
    assert_eq!(
        plan,
        plan_disruption(s, state, now, &ca_flags()),
        "deterministic"
    );
    plan
}

#[test]
fn gpu_threshold_is_strict_and_ignores_cpu() {
    // 4 of 8 GPUs used = 0.5 exactly: not below the threshold, so kept (the Cluster
    // Autoscaler's "below which"). 3 of 8 with all its cpu used is below: its pod moves.
    let at = managed("at", &g8(), "gpu").with_pod(pod("a").cpu("1").gpus(4));
    let below = managed("below", &g8(), "gpu").with_pod(pod("c").cpu("90").gpus(3));
    let above = managed("above", &g8(), "gpu").with_pod(pod("b").cpu("1").gpus(5));
    let s = snap(
        vec![at, below, above],
        vec![pool("gpu", vec![g8()]).disruption(quick())],
    );
    assert_eq!(
        utilization(&s.nodes[0], &DisruptionConfig::default()),
        (0.5, true)
    );
    check(
        &s,
        0,
        &DisruptionState::default(),
        expect![[r#"
            Underutilized Delete nodes=[below] pods=1 savings=21.960
            keep above: GPU utilization 0.62 above threshold 0.50
            keep at: GPU utilization 0.50 at threshold 0.50
        "#]],
    );
}

/// Cluster Autoscaler (`utilization.Calculate`): a GPU node whose GPUs are not allocatable has
/// GPU utilization 0, whatever its cpu and memory hold, so a busy-looking node whose device
/// plugin is down is an unneeded GPU node; a node of the same shape without GPU labels is
/// measured by cpu and memory.
#[test]
fn gpu_node_without_allocatable_gpus_has_gpu_utilization_zero() {
    let no_devices = |labelled: bool| {
        let mut t = itype("p4d.24xlarge").cpu("96").mem("1152Gi");
        if labelled {
            t = t
                .label(labels::GPU_COUNT, "8")
                .label(labels::GPU_NAME, "a100");
        }
        t.on_demand(&ZONES, 21.96).build()
    };
    for (labelled, want) in [(true, (0.0, true)), (false, (90.1 / 96.0, false))] {
        let t = no_devices(labelled);
        let n = managed("n", &t, "gpu").with_pod(pod("w").cpu("90")).build();
        let (u, gpu) = utilization(&n, &DisruptionConfig::default());
        assert!(
            (u - want.0).abs() < 1e-9 && gpu == want.1,
            "{labelled}: {u} {gpu}"
        );
    }
    // In a plan: the labelled node is a candidate that waits the unready time, as the
    // Cluster Autoscaler counts a GPU node without allocatable GPUs unready; the unlabelled
    // one is kept by its cpu.
    let plan = |labelled: bool| {
        let t = no_devices(labelled);
        let s = snap(
            vec![
                managed("plugin-down", &t, "gpu").with_pod(pod("w").cpu("90")),
                managed("spare", &g8(), "gpu"),
            ],
            vec![pool("gpu", vec![t.clone(), g8()]).disruption(quick())],
        );
        plan_disruption(
            &s,
            &DisruptionState::default(),
            0,
            &DisruptionConfig::default(),
        )
        .render()
    };
    expect![[r#"
        labelled:
        Empty Delete nodes=[spare] pods=0 savings=21.960
        keep plugin-down: unneeded with no allocatable GPU for 0s of 20m
        unlabelled:
        Empty Delete nodes=[spare] pods=0 savings=21.960
        keep plugin-down: cpu/memory utilization 0.94 above threshold 0.50
    "#]]
    .assert_eq(&format!(
        "labelled:\n{}unlabelled:\n{}",
        plan(true),
        plan(false)
    ));
}

#[test]
fn daemonset_gpu_requests_with_ignore_option_on_and_off() {
    let n = managed("n", &g8(), "gpu")
        .with_pod(pod("ds-gpu").gpus(2).owner(Some("DaemonSet")))
        .with_pod(pod("w").gpus(3))
        .build();
    let off = DisruptionConfig::default();
    let on = DisruptionConfig {
        ignore_daemonset_utilization: true,
        ..DisruptionConfig::default()
    };
    // Off: (2 + 3) / 8; on: 3 / (8 - 2).
    assert_eq!(utilization(&n, &off).0, 5.0 / 8.0);
    assert_eq!(utilization(&n, &on).0, 0.5);
}

#[test]
fn fractional_shares_count_per_device() {
    let n = managed("n", &g1(), "gpu")
        .with_pod(pod("f").gpu_share(300))
        .build();
    assert!((utilization(&n, &DisruptionConfig::default()).0 - 0.3).abs() < 1e-9);
}

#[test]
fn empty_node_removed_after_unneeded_time_exactly() {
    let policy = DisruptionPolicy {
        unneeded_s: 600,
        budgets: vec![],
        ..DisruptionPolicy::default()
    };
    let s = snap(
        vec![managed("idle", &g1(), "gpu")],
        vec![pool("gpu", vec![g1()]).disruption(policy)],
    );
    let first = check(
        &s,
        1000,
        &DisruptionState::default(),
        expect![[r#"
        keep idle: unneeded for 0s of 10m
    "#]],
    );
    check(
        &s,
        1599,
        &first.state,
        expect![[r#"
        keep idle: unneeded for 9m59s of 10m
    "#]],
    );
    check(
        &s,
        1600,
        &first.state,
        expect![[r#"
        Empty Delete nodes=[idle] pods=0 savings=1.006
    "#]],
    );
}

#[test]
fn underutilized_cpu_node_deleted_when_pods_fit_elsewhere() {
    let a = managed("a", &m16(), "cpu").with_pod(pod("w1").cpu("2"));
    let b = managed("b", &m16(), "cpu").with_pod(pod("w2").cpu("12"));
    check(
        &snap(
            vec![a, b],
            vec![pool("cpu", vec![m4(), m16()]).disruption(quick())],
        ),
        0,
        &DisruptionState::default(),
        expect![[r#"
            Underutilized Delete nodes=[a] pods=1 savings=0.768
            keep b: cpu/memory utilization 0.76 above threshold 0.50
        "#]],
    );
}

#[test]
fn replacement_must_be_strictly_cheaper() {
    let big = managed("big", &m16(), "cpu").with_pod(pod("w").cpu("3"));
    check(
        &snap(
            vec![big],
            vec![pool("cpu", vec![m4(), m16()]).disruption(quick())],
        ),
        0,
        &DisruptionState::default(),
        expect![[r#"
            Underutilized Replace nodes=[big] pods=1 savings=0.576 replacement=m5.xlarge@0.192
        "#]],
    );
    // The launch falls back through the claim's options when cheaper ones are out of capacity,
    // so options not cheaper than the node are left out: m5.2xlarge (0.384) stays, the 16-cpu
    // types (0.768 and 0.9) go.
    let m8 = itype("m5.2xlarge")
        .cpu("8")
        .mem("32Gi")
        .on_demand(&ZONES, 0.384)
        .build();
    let c16 = itype("c5.4xlarge")
        .cpu("16")
        .mem("32Gi")
        .on_demand(&ZONES, 0.9)
        .build();
    let big = managed("big", &m16(), "cpu").with_pod(pod("w").cpu("3"));
    let s = snap(
        vec![big],
        vec![pool("cpu", vec![m4(), m8, m16(), c16]).disruption(quick())],
    );
    let out = plan_disruption(
        &s,
        &DisruptionState::default(),
        0,
        &DisruptionConfig::default(),
    );
    let r = out.commands[0].replacement.as_ref().expect("replaced");
    let types: Vec<&str> = r.instance_types.iter().map(|o| &*o.instance_type).collect();
    assert_eq!(types, ["m5.xlarge", "m5.2xlarge"]);
    // Only the same type available: not strictly cheaper, kept.
    let big = managed("big", &m16(), "cpu").with_pod(pod("w").cpu("3"));
    check(
        &snap(
            vec![big],
            vec![pool("cpu", vec![m16()]).disruption(quick())],
        ),
        0,
        &DisruptionState::default(),
        expect![[r#"
            keep big: no strictly cheaper replacement
        "#]],
    );
}

#[test]
fn multi_node_consolidation_merges_several_into_one() {
    // Two 8-cpu nodes at 4.5 cpu each: neither pod fits on the other node, and no single
    // cheaper replacement exists, but both pods fit one 16-cpu node that costs less than two.
    let c8 = itype("c.8")
        .cpu("8")
        .mem("32Gi")
        .on_demand(&ZONES, 0.40)
        .build();
    let c16 = itype("c.16")
        .cpu("16")
        .mem("64Gi")
        .on_demand(&ZONES, 0.60)
        .build();
    let mut policy = quick();
    policy.utilization_threshold = 0.6;
    let n = |name: &str| managed(name, &c8, "cpu").with_pod(pod(&format!("w-{name}")).cpu("4500m"));
    check(
        &snap(
            vec![n("a"), n("b")],
            vec![pool("cpu", vec![c8.clone(), c16.clone()]).disruption(policy)],
        ),
        0,
        &DisruptionState::default(),
        expect![[r#"
            Underutilized Replace nodes=[a,b] pods=2 savings=0.200 replacement=c.16@0.600
        "#]],
    );
}

#[test]
fn a_replacement_for_a_gangs_nodes_names_no_placement_group() {
    // The multi-node merge above with both pods members of one gang: the replacement is one
    // node, and one node needs no placement group.
    let c8 = itype("c.8")
        .cpu("8")
        .mem("32Gi")
        .on_demand(&ZONES, 0.40)
        .build();
    let c16 = itype("c.16")
        .cpu("16")
        .mem("64Gi")
        .on_demand(&ZONES, 0.60)
        .build();
    let mut policy = quick();
    policy.utilization_threshold = 0.6;
    let n = |name: &str| {
        managed(name, &c8, "cpu").with_pod(pod(&format!("w-{name}")).cpu("4500m").group("g"))
    };
    let plan = check(
        &snap(
            vec![n("a"), n("b")],
            vec![pool("cpu", vec![c8.clone(), c16.clone()]).disruption(policy)],
        ),
        0,
        &DisruptionState::default(),
        expect![[r#"
            Underutilized Replace nodes=[a,b] pods=2 savings=0.200 replacement=c.16@0.600
        "#]],
    );
    let replacement = plan.commands[0]
        .replacement
        .as_ref()
        .expect("a replacement");
    assert_eq!(replacement.group, None);
}

#[test]
fn safety_rules_block_disruption() {
    let pol = || pool("cpu", vec![m4(), m16()]).disruption(quick());
    let target = || managed("target", &m16(), "cpu").with_pod(pod("fill").cpu("10"));
    let cases: Vec<(&str, NodeBuilder)> = vec![
        (
            "pod-dnd",
            managed("n", &m16(), "cpu").with_pod(
                pod("p")
                    .cpu("1")
                    .annotate("karpenter.sh/do-not-disrupt", "true"),
            ),
        ),
        (
            "node-dnd",
            managed("n", &m16(), "cpu")
                .annotate("karpenter.sh/do-not-disrupt", "true")
                .with_pod(pod("p").cpu("1")),
        ),
        (
            "ca-safe-false",
            managed("n", &m16(), "cpu").with_pod(
                pod("p")
                    .cpu("1")
                    .annotate("cluster-autoscaler.kubernetes.io/safe-to-evict", "false"),
            ),
        ),
        (
            "ca-disabled",
            managed("n", &m16(), "cpu")
                .annotate(
                    "cluster-autoscaler.kubernetes.io/scale-down-disabled",
                    "true",
                )
                .with_pod(pod("p").cpu("1")),
        ),
        (
            "bare-pod",
            managed("n", &m16(), "cpu").with_pod(pod("p").cpu("1").owner(None)),
        ),
        (
            "kube-system",
            managed("n", &m16(), "cpu").with_pod(pod("p").ns("kube-system").cpu("1")),
        ),
        (
            "uninitialized",
            managed("n", &m16(), "cpu")
                .initialized(false)
                .with_pod(pod("p").cpu("1")),
        ),
        (
            "mig-pending",
            managed("n", &m16(), "cpu")
                .label(labels::NVIDIA_MIG_CONFIG_STATE, "pending")
                .with_pod(pod("p").cpu("1")),
        ),
    ];
    let mut out = String::new();
    for (name, n) in cases {
        let s = snap(vec![n, target()], vec![pol()]);
        let plan = plan_disruption(
            &s,
            &DisruptionState::default(),
            0,
            &DisruptionConfig::default(),
        );
        assert!(
            plan.commands
                .iter()
                .all(|c| !c.nodes.contains(&"n".to_string())),
            "{name}"
        );
        let v = plan.verdicts.iter().find(|v| v.node == "n").unwrap();
        out.push_str(&format!("{name}: {}\n", v.reason));
    }
    // Local storage blocks unless safe-to-evict says true.
    let mut local = pod("p").cpu("1");
    local.0.local_storage = true;
    let s = snap(
        vec![
            managed("n", &m16(), "cpu").with_pod(local.clone()),
            target(),
        ],
        vec![pol()],
    );
    let plan = plan_disruption(
        &s,
        &DisruptionState::default(),
        0,
        &DisruptionConfig::default(),
    );
    out.push_str(&format!(
        "local: {}\n",
        plan.verdicts.iter().find(|v| v.node == "n").unwrap().reason
    ));
    let s = snap(
        vec![
            managed("n", &m16(), "cpu")
                .with_pod(local.annotate("cluster-autoscaler.kubernetes.io/safe-to-evict", "true")),
            target(),
        ],
        vec![pol()],
    );
    let plan = plan_disruption(
        &s,
        &DisruptionState::default(),
        0,
        &DisruptionConfig::default(),
    );
    out.push_str(&format!(
        "local+safe: {}\n",
        plan.verdicts.iter().find(|v| v.node == "n").unwrap().reason
    ));
    expect![[r#"
        pod-dnd: pod default/p has karpenter.sh/do-not-disrupt
        node-dnd: node has karpenter.sh/do-not-disrupt
        ca-safe-false: pod default/p has cluster-autoscaler.kubernetes.io/safe-to-evict=false
        ca-disabled: node has cluster-autoscaler.kubernetes.io/scale-down-disabled
        bare-pod: pod default/p has no controller
        kube-system: kube-system pod kube-system/p has no PodDisruptionBudget
        uninitialized: not initialized yet (device plugin, startup or readiness taints pending, or no NodeClaim records it yet)
        mig-pending: MIG reconfiguration in progress (pending)
        local: pod default/p uses local storage
        local+safe: underutilized: its pods fit on other nodes
    "#]]
    .assert_eq(&out);
}

#[test]
fn pdb_with_zero_disruptions_blocks_and_one_allows() {
    let web = |name: &str| pod(name).cpu("1").label("app", "web");
    let n = || managed("n", &m16(), "cpu").with_pod(web("p"));
    let target = || managed("target", &m16(), "cpu").with_pod(pod("fill").cpu("10"));
    let pdb = |name: &str, allowed| Pdb {
        namespace: "default".into(),
        name: name.into(),
        selector: Requirements::new().with("app", Operator::In, &["web"]),
        disruptions_allowed: allowed,
    };
    let mut s = snap(
        vec![n(), target()],
        vec![pool("cpu", vec![m16()]).disruption(quick())],
    );
    let render =
        |s: &Snapshot| plan_disruption(s, &DisruptionState::default(), 0, &ca_flags()).render();
    s.pdbs = vec![pdb("web", 0)];
    let blocked = check(
        &s,
        0,
        &DisruptionState::default(),
        expect![[r#"
            keep n: blocked by PDB default/web (allows 0 disruptions)
            keep target: cpu/memory utilization 0.63 above threshold 0.50
        "#]],
    )
    .render();
    s.pdbs = vec![pdb("web", 1)];
    let allowed = check(
        &s,
        0,
        &DisruptionState::default(),
        expect![[r#"
            Underutilized Delete nodes=[n] pods=1 savings=0.768
            keep target: cpu/memory utilization 0.63 above threshold 0.50
        "#]],
    )
    .render();
    // Two budgets each allowing five: the eviction API refuses a pod more than one selects.
    s.pdbs = vec![pdb("web-a", 5), pdb("web-b", 5)];
    check(
        &s,
        0,
        &DisruptionState::default(),
        expect![[r#"
            keep n: pod default/p is selected by more than one PDB (default/web-a and default/web-b): the eviction API refuses it
            keep target: cpu/memory utilization 0.63 above threshold 0.50
        "#]],
    );
    // safe-to-evict=true waives the bare-pod rule, not the budget the eviction API enforces.
    let mut bare = web("p").annotate(autoscaler_core::keys::SAFE_TO_EVICT, "true");
    bare.0.owner_kind = None;
    s.nodes[0] = managed("n", &m16(), "cpu").with_pod(bare).build();
    s.pdbs = vec![pdb("web", 0)];
    assert_eq!(render(&s), blocked);
    s.pdbs = vec![pdb("web", 1)];
    assert_eq!(render(&s), allowed);
}

/// Ten percent of `count` empty GPU nodes as the pool's one budget, and `extra` more nodes.
fn ten_percent(count: usize, extra: Vec<NodeBuilder>) -> Snapshot {
    let policy = DisruptionPolicy {
        unneeded_s: 0,
        budgets: vec![Budget {
            nodes: BudgetValue::Percent(10),
            reasons: vec![],
            schedule: None,
        }],
        ..DisruptionPolicy::default()
    };
    let mut nodes: Vec<NodeBuilder> = (0..count)
        .map(|i| managed(&format!("n{i}"), &g1(), "gpu"))
        .collect();
    nodes.extend(extra);
    snap(nodes, vec![pool("gpu", vec![g1()]).disruption(policy)])
}

#[test]
fn budget_ten_percent_of_nine_nodes_allows_one() {
    let plan = check(
        &ten_percent(9, vec![]),
        0,
        &DisruptionState::default(),
        expect![[r#"
            Empty Delete nodes=[n0] pods=0 savings=1.006
            keep n1: disruption budget of NodePool gpu exhausted for Empty
            keep n2: disruption budget of NodePool gpu exhausted for Empty
            keep n3: disruption budget of NodePool gpu exhausted for Empty
            keep n4: disruption budget of NodePool gpu exhausted for Empty
            keep n5: disruption budget of NodePool gpu exhausted for Empty
            keep n6: disruption budget of NodePool gpu exhausted for Empty
            keep n7: disruption budget of NodePool gpu exhausted for Empty
            keep n8: disruption budget of NodePool gpu exhausted for Empty
        "#]],
    );
    assert_eq!(plan.commands[0].nodes.len(), 1);
}

#[test]
fn budget_per_reason_and_min_nodes() {
    let policy = DisruptionPolicy {
        unneeded_s: 0,
        budgets: vec![Budget {
            nodes: BudgetValue::Count(0),
            reasons: vec![DisruptionReason::Underutilized],
            schedule: None,
        }],
        ..DisruptionPolicy::default()
    };
    let nodes = vec![
        managed("e1", &g1(), "gpu"),
        managed("e2", &g1(), "gpu"),
        managed("e3", &g1(), "gpu"),
    ];
    check(
        &snap(
            nodes,
            vec![pool("gpu", vec![g1()]).disruption(policy).min_nodes(1)],
        ),
        0,
        &DisruptionState::default(),
        expect![[r#"
            Empty Delete nodes=[e1,e2] pods=0 savings=2.012
            keep e3: NodePool gpu is at minNodes 1
        "#]],
    );
}

#[test]
fn scale_to_zero_and_booked_capacity() {
    let s = snap(
        vec![managed("last", &g8(), "gpu")],
        vec![pool("gpu", vec![g8()]).disruption(quick())],
    );
    check(
        &s,
        0,
        &DisruptionState::default(),
        expect![[r#"
        Empty Delete nodes=[last] pods=0 savings=21.960
    "#]],
    );
    let mut booked = s.clone();
    booked.booked_nodes.insert("last".into());
    check(
        &booked,
        0,
        &DisruptionState::default(),
        expect![[r#"
        keep last: capacity booked for a ProvisioningRequest
    "#]],
    );
}

/// A node an earlier plan nominated a pending pod to is kept while the nomination lasts: the
/// scheduler has not bound the pod yet, so the node looks empty only until it does (Karpenter's
/// "nominated for a pending pod"). A command decided before the nomination fails validation.
#[test]
fn a_node_a_pending_pod_is_nominated_to_stays() {
    let mut s = snap(
        vec![managed("a", &g1(), "gpu"), managed("b", &g1(), "gpu")],
        vec![pool("gpu", vec![g1()]).disruption(quick())],
    );
    s.nodes[0].claim = Some("gpu-a".into());
    s.nodes[1].claim = Some("gpu-b".into());
    let cfg = DisruptionConfig::default();
    let before = plan_disruption(&s, &DisruptionState::default(), 0, &cfg);
    let mut nominated = s.clone();
    let late = pod("late").gpus(1).build().key;
    nominated.nominated.insert(late.clone(), "gpu-a".into());
    // A nomination to a claim no node has (still in flight) keeps nothing.
    nominated
        .nominated
        .insert(pod("other").build().key, "gpu-elsewhere".into());
    check(
        &nominated,
        0,
        &DisruptionState::default(),
        expect![[r#"
            Empty Delete nodes=[b] pods=0 savings=1.006
            keep a: pending pod default/late is nominated to it
        "#]],
    );
    let cmd = before
        .commands
        .iter()
        .find(|c| c.nodes.contains(&"a".to_string()))
        .expect("a command removes a when nothing is nominated");
    assert_eq!(validate(cmd, &mut s, 15, &cfg), Ok(()));
    assert_eq!(
        validate(cmd, &mut nominated, 15, &cfg).unwrap_err(),
        "node a: pending pod default/late is nominated to it"
    );
}

#[test]
fn pool_delays_after_scale_up_and_failure() {
    let s = snap(
        vec![managed("idle", &g1(), "gpu")],
        vec![pool("gpu", vec![g1()]).disruption(quick())],
    );
    let mut state = DisruptionState::default();
    state.scaled_up("gpu", 100);
    check(
        &s,
        650,
        &state,
        expect![[r#"
        keep idle: scale-down of NodePool gpu paused for 50s after a scale-up
    "#]],
    );
    check(
        &s,
        700,
        &state,
        expect![[r#"
        Empty Delete nodes=[idle] pods=0 savings=1.006
    "#]],
    );
    let mut state = DisruptionState::default();
    state.failed("gpu", 100, true);
    check(
        &s,
        200,
        &state,
        expect![[r#"
        keep idle: scale-down of NodePool gpu paused for 1m20s after a failed deletion
    "#]],
    );
    // Failures in a row double the delay (3m, 6m, 12m): a replacement that never comes up is
    // not launched again every three minutes. A deletion that succeeds ends the run.
    state.failed("gpu", 400, true);
    state.failed("gpu", 1000, true);
    check(
        &s,
        1000 + 11 * 60,
        &state,
        expect![[r#"
        keep idle: scale-down of NodePool gpu paused for 1m after a failed deletion
    "#]],
    );
    check(
        &s,
        1000 + 12 * 60,
        &state,
        expect![[r#"
        Empty Delete nodes=[idle] pods=0 savings=1.006
    "#]],
    );
    // A command the cluster outgrew (a pod arrived) is a failure at the configured delay,
    // whatever came before.
    state.failed("gpu", 1900, true);
    state.failed("gpu", 1950, false);
    check(
        &s,
        1950 + 3 * 60,
        &state,
        expect![[r#"
        Empty Delete nodes=[idle] pods=0 savings=1.006
    "#]],
    );
    state.deleted("gpu", 2000);
    state.failed("gpu", 2100, true);
    check(
        &s,
        2100 + 3 * 60,
        &state,
        expect![[r#"
        Empty Delete nodes=[idle] pods=0 savings=1.006
    "#]],
    );
}

/// Cluster Autoscaler's `--scale-down-delay-type-local`, as this project always counts them: a
/// scale-up in pool A holds back scale-down in A only; pool B's idle node goes.
#[test]
fn a_scale_up_in_one_pool_does_not_hold_back_another() {
    let s = snap(
        vec![managed("a1", &g1(), "a"), managed("b1", &g1(), "b")],
        vec![
            pool("a", vec![g1()]).disruption(quick()),
            pool("b", vec![g1()]).disruption(quick()),
        ],
    );
    let mut state = DisruptionState::default();
    state.scaled_up("a", 100);
    check(
        &s,
        200,
        &state,
        expect![[r#"
        Empty Delete nodes=[b1] pods=0 savings=1.006
        keep a1: scale-down of NodePool a paused for 8m20s after a scale-up
    "#]],
    );
}

/// A pool's own delays override the cluster-wide ones, each event on its own; the wait that
/// ends last is the one reported.
#[test]
fn a_pools_own_delays_override_the_flags() {
    use autoscaler_core::disruption::{PoolEvents, cooldown};
    use autoscaler_core::model::ScaleDownDelays;
    let config = ca_flags();
    let events = PoolEvents {
        last_scale_up: Some(1000),
        last_delete: Some(1040),
        last_failure: Some(900),
        failures_in_row: 1,
    };
    let own = |add, delete, failure| ScaleDownDelays {
        after_add_s: add,
        after_delete_s: delete,
        after_failure_s: failure,
    };
    for (delays, now, expected) in [
        // Flags: 10m after the scale-up (until 1600), 0s after a deletion, 3m after a failure
        // (until 1080).
        (
            own(None, None, None),
            1200,
            Some(("a scale-up", 1000, 1600)),
        ),
        (own(None, None, None), 1600, None),
        (
            own(Some(0), None, None),
            1050,
            Some(("a failed deletion", 900, 1080)),
        ),
        (own(Some(0), None, None), 1080, None),
        (
            own(Some(0), Some(300), None),
            1200,
            Some(("a deletion", 1040, 1340)),
        ),
        (
            own(Some(60), Some(0), Some(0)),
            1059,
            Some(("a scale-up", 1000, 1060)),
        ),
        (own(Some(60), Some(0), Some(0)), 1060, None),
    ] {
        let got =
            cooldown(&delays, &events, &config, now).map(|(w, wait)| (w, wait.since, wait.until));
        assert_eq!(got, expected, "{delays:?} at {now}");
    }
    assert_eq!(
        cooldown(&own(None, None, None), &PoolEvents::default(), &config, 0),
        None,
        "a pool that never scaled is not paused"
    );
    // In a plan: pool `fast` waits 1m after its scale-up, `slow` the flag's 10m.
    let mut fast = quick();
    fast.delays.after_add_s = Some(60);
    let s = snap(
        vec![managed("f", &g1(), "fast"), managed("s", &g1(), "slow")],
        vec![
            pool("fast", vec![g1()]).disruption(fast),
            pool("slow", vec![g1()]).disruption(quick()),
        ],
    );
    let mut state = DisruptionState::default();
    state.scaled_up("fast", 100);
    state.scaled_up("slow", 100);
    check(
        &s,
        160,
        &state,
        expect![[r#"
        Empty Delete nodes=[f] pods=0 savings=1.006
        keep s: scale-down of NodePool slow paused for 9m after a scale-up
    "#]],
    );
}

/// Cluster Autoscaler's `--max-scale-down-parallelism`: at most this many nodes removed at
/// once, counting removals already under way.
#[test]
fn scale_down_parallelism_counts_removals_under_way() {
    let nodes = (0..5)
        .map(|i| managed(&format!("e{i}"), &g1(), "gpu"))
        .collect();
    let s = snap(nodes, vec![pool("gpu", vec![g1()]).disruption(quick())]);
    let config = DisruptionConfig {
        max_scale_down_parallelism: 3,
        ..DisruptionConfig::default()
    };
    let mut state = DisruptionState::default();
    state.in_progress.nodes = 1;
    let plan = plan_disruption(&s, &state, 0, &config);
    expect![[r#"
        Empty Delete nodes=[e0,e1] pods=0 savings=2.012
        keep e2: --max-scale-down-parallelism 3 reached (nodes being removed at once)
        keep e3: --max-scale-down-parallelism 3 reached (nodes being removed at once)
        keep e4: --max-scale-down-parallelism 3 reached (nodes being removed at once)
    "#]]
    .assert_eq(&plan.render());
    assert!(
        plan.verdicts
            .iter()
            .filter(|v| !v.disrupted)
            .all(|v| v.kind == autoscaler_core::disruption::VerdictKind::ParallelismLimit)
    );
    state.in_progress.nodes = 3;
    let plan = plan_disruption(&s, &state, 0, &config);
    assert!(plan.commands.is_empty(), "{}", plan.render());
}

/// `--max-drain-parallelism`: nodes with pods to drain are limited apart; empty nodes only
/// count against `--max-scale-down-parallelism`.
#[test]
fn drain_parallelism_limits_nodes_with_pods_only() {
    let s = snap(
        vec![
            managed("big", &m16(), "cpu").with_pod(pod("keep").cpu("9")),
            managed("w1", &m16(), "cpu").with_pod(pod("a").cpu("1")),
            managed("w2", &m16(), "cpu").with_pod(pod("b").cpu("1")),
            managed("e1", &m16(), "cpu"),
        ],
        vec![pool("cpu", vec![m16()]).disruption(quick())],
    );
    let config = DisruptionConfig {
        max_drain_parallelism: 1,
        ..DisruptionConfig::default()
    };
    check_with(
        &s,
        &config,
        &DisruptionState::default(),
        expect![[r#"
            Empty Delete nodes=[e1] pods=0 savings=0.768
            Underutilized Delete nodes=[w1] pods=1 savings=0.768
            keep big: cpu/memory utilization 0.57 above threshold 0.50
            keep w2: --max-drain-parallelism 1 reached (nodes being drained at once)
        "#]],
    );
    let busy = DisruptionState {
        in_progress: autoscaler_core::disruption::InProgress {
            nodes: 1,
            drains: 1,
        },
        ..DisruptionState::default()
    };
    check_with(
        &s,
        &config,
        &busy,
        expect![[r#"
            Empty Delete nodes=[e1] pods=0 savings=0.768
            keep big: cpu/memory utilization 0.57 above threshold 0.50
            keep w1: --max-drain-parallelism 1 reached (nodes being drained at once)
            keep w2: --max-drain-parallelism 1 reached (nodes being drained at once)
        "#]],
    );
}

fn check_with(s: &Snapshot, config: &DisruptionConfig, state: &DisruptionState, expected: Expect) {
    let plan = plan_disruption(s, state, 0, config);
    expected.assert_eq(&plan.render());
}

/// Cluster Autoscaler's `--scale-down-unready-enabled` / `--scale-down-unready-time`: a node
/// that broke down after it started (initialized, no longer Ready) waits the unready time (20m)
/// instead of the pool's unneededTime; with the option off it stays. Pods are never planned
/// onto it.
#[test]
fn unready_nodes_wait_the_unready_time_or_stay() {
    let mut policy = quick();
    policy.unneeded_s = 60;
    let s = snap(
        vec![
            managed("sick", &g1(), "gpu").unready(),
            managed("idle", &g1(), "gpu"),
        ],
        vec![pool("gpu", vec![g1()]).disruption(policy)],
    );
    let config = DisruptionConfig::default();
    let first = plan_disruption(&s, &DisruptionState::default(), 1000, &config);
    expect![[r#"
        keep idle: unneeded for 0s of 1m
        keep sick: not ready and unneeded for 0s of 20m
    "#]]
    .assert_eq(&first.render());
    let sick = first.verdicts.iter().find(|v| v.node == "sick").unwrap();
    assert_eq!(
        sick.kind,
        autoscaler_core::disruption::VerdictKind::UnreadyUnneeded
    );
    assert!(sick.kind.is_candidate());
    let later = plan_disruption(&s, &first.state, 1060, &config);
    expect![[r#"
        Empty Delete nodes=[idle] pods=0 savings=1.006
        keep sick: not ready and unneeded for 1m of 20m
    "#]]
    .assert_eq(&later.render());
    let much_later = plan_disruption(&s, &first.state, 2200, &config);
    expect![[r#"
        Empty Delete nodes=[idle,sick] pods=0 savings=2.012
    "#]]
    .assert_eq(&much_later.render());
    let off = DisruptionConfig {
        scale_down_unready_enabled: false,
        ..config
    };
    let plan = plan_disruption(&s, &first.state, 2200, &off);
    expect![[r#"
        Empty Delete nodes=[idle] pods=0 savings=1.006
        keep sick: not ready, and scale-down of unready nodes is off (--scale-down-unready-enabled)
    "#]]
    .assert_eq(&plan.render());
    // A node whose only place for its pod is an unready node stays.
    let s = snap(
        vec![
            managed("sick", &m16(), "cpu").unready(),
            managed("w", &m4(), "cpu").with_pod(pod("a").cpu("1")),
        ],
        vec![pool("cpu", vec![m4(), m16()]).disruption(quick())],
    );
    let plan = plan_disruption(&s, &DisruptionState::default(), 0, &off);
    expect![[r#"
        keep sick: not ready, and scale-down of unready nodes is off (--scale-down-unready-enabled)
        keep w: pod default/a would schedule against a node that is not ready sick
    "#]]
    .assert_eq(&plan.render());
}

#[test]
fn when_empty_policy_keeps_underutilized_nodes() {
    let mut policy = quick();
    policy.consolidation_policy = autoscaler_core::model::ConsolidationPolicy::WhenEmpty;
    let a = managed("a", &m16(), "cpu").with_pod(pod("w1").cpu("2"));
    check(
        &snap(
            vec![a],
            vec![pool("cpu", vec![m4(), m16()]).disruption(policy)],
        ),
        0,
        &DisruptionState::default(),
        expect![[r#"
            keep a: NodePool consolidates only empty nodes
        "#]],
    );
}

#[test]
fn validation_drops_commands_the_cluster_no_longer_supports() {
    let a = managed("a", &m16(), "cpu").with_pod(pod("w1").cpu("2"));
    let b = managed("b", &m16(), "cpu").with_pod(pod("w2").cpu("12"));
    let mut s = snap(
        vec![a, b],
        vec![pool("cpu", vec![m16()]).disruption(quick())],
    );
    let cfg = DisruptionConfig::default();
    let plan = plan_disruption(&s, &DisruptionState::default(), 0, &cfg);
    let cmd: &Command = &plan.commands[0];
    assert_eq!(cmd.method, Method::Delete);
    assert_eq!(
        validate(cmd, &mut s, 5, &cfg).unwrap_err(),
        "validation delay not over (10s left)"
    );
    assert_eq!(validate(cmd, &mut s, 15, &cfg), Ok(()));
    // Node b filled up meanwhile: a's pod no longer fits anywhere.
    let mut changed = s.clone();
    changed.nodes[1].pods.push(pod("late").cpu("3").build());
    let err = validate(cmd, &mut changed, 15, &cfg).unwrap_err();
    assert!(err.starts_with("pod default/w1 has nowhere to go"), "{err}");
    // A do-not-disrupt pod arrived on a.
    let mut changed = s.clone();
    changed.nodes[0].pods.push(
        pod("new")
            .annotate("karpenter.sh/do-not-disrupt", "true")
            .build(),
    );
    assert_eq!(
        validate(cmd, &mut changed, 15, &cfg).unwrap_err(),
        "node a: pod default/new has karpenter.sh/do-not-disrupt"
    );
}

#[test]
fn consolidate_after_counts_from_the_last_pod_event_not_the_node_age() {
    let mut policy = quick();
    policy.consolidate_after_s = 600;
    // An old node whose pods changed 200 s ago (at 1000): it waits until 1600.
    let churned = |t: i64| {
        snap(
            vec![
                managed("a", &m16(), "cpu")
                    .with_pod(pod("w1").cpu("2"))
                    .pod_event(t),
            ],
            vec![pool("cpu", vec![m4(), m16()]).disruption(policy.clone())],
        )
    };
    check(
        &churned(1000),
        1200,
        &DisruptionState::default(),
        expect![[r#"
            keep a: a pod was bound or removed 3m20s ago (consolidateAfter 10m)
        "#]],
    );
    check(
        &churned(1000),
        1600,
        &DisruptionState::default(),
        expect![[r#"
            Underutilized Replace nodes=[a] pods=1 savings=0.576 replacement=m5.xlarge@0.192
        "#]],
    );
    // A young node with no pod event since creation waits from its creation.
    let young = snap(
        vec![
            managed("a", &m16(), "cpu")
                .with_pod(pod("w1").cpu("2"))
                .created(900),
        ],
        vec![pool("cpu", vec![m4(), m16()]).disruption(policy.clone())],
    );
    check(
        &young,
        1200,
        &DisruptionState::default(),
        expect![[r#"
            keep a: younger than consolidateAfter 10m
        "#]],
    );
}

/// Every verdict carries a kind a caller can switch on, the threshold it was measured against,
/// and, when it lapses by time alone, the wait; the kinds agree with the reasons in words.
#[test]
fn verdicts_carry_their_kind_threshold_and_wait() {
    let mut out = String::new();
    let mut show = |case: &str, s: &Snapshot, now: i64, state: &DisruptionState| {
        let plan = plan_disruption(s, state, now, &ca_flags());
        for v in &plan.verdicts {
            out.push_str(&format!(
                "{case} {}: {:?} candidate={} threshold={:?} wait={:?} | {}\n",
                v.node,
                v.kind,
                v.kind.is_candidate(),
                v.threshold,
                v.wait.map(|w| (w.since, w.until)),
                v.reason
            ));
        }
    };
    let fresh = DisruptionState::default();
    // Above threshold, chosen (empty and underutilized), and a PDB that allows none.
    let mut s = snap(
        vec![
            managed("busy", &m16(), "cpu").with_pod(pod("fill").cpu("10")),
            managed("idle", &m16(), "cpu"),
            managed("web", &m4(), "cpu").with_pod(pod("w").cpu("1").label("app", "web")),
        ],
        vec![pool("cpu", vec![m4(), m16()]).disruption(quick())],
    );
    s.pdbs.push(Pdb {
        namespace: "default".into(),
        name: "web".into(),
        selector: Requirements::new().with("app", Operator::In, &["web"]),
        disruptions_allowed: 0,
    });
    show("pdb", &s, 0, &fresh);
    // Waits: unneeded time, consolidateAfter from the last pod event, a pause, a pod's
    // do-not-disrupt duration.
    let mut policy = quick();
    policy.unneeded_s = 600;
    let s = snap(
        vec![managed("n", &g1(), "gpu")],
        vec![pool("gpu", vec![g1()]).disruption(policy)],
    );
    show("unneeded", &s, 100, &fresh);
    let mut policy = quick();
    policy.consolidate_after_s = 300;
    let s = snap(
        vec![
            managed("n", &m16(), "cpu")
                .with_pod(pod("w").cpu("1"))
                .pod_event(1000),
            managed("dnd", &m16(), "cpu").with_pod(
                pod("d")
                    .cpu("1")
                    .started(900)
                    .annotate("karpenter.sh/do-not-disrupt", "30m"),
            ),
        ],
        vec![pool("cpu", vec![m4(), m16()]).disruption(policy)],
    );
    show("after", &s, 1100, &fresh);
    let s = snap(
        vec![managed("n", &g1(), "gpu")],
        vec![pool("gpu", vec![g1()]).disruption(quick())],
    );
    let mut paused = DisruptionState::default();
    paused.scaled_up("gpu", 50);
    show("paused", &s, 100, &paused);
    // Budget, minNodes, booked capacity.
    let mut budget = quick();
    budget.budgets = vec![Budget {
        nodes: BudgetValue::Count(1),
        reasons: vec![],
        schedule: None,
    }];
    let empties = || {
        ["a", "b", "c"]
            .map(|n| managed(n, &g1(), "gpu"))
            .into_iter()
            .collect::<Vec<_>>()
    };
    let mut s = snap(empties(), vec![pool("gpu", vec![g1()]).disruption(budget)]);
    s.booked_nodes.insert("c".into());
    show("budget", &s, 0, &fresh);
    let s = snap(
        empties(),
        vec![pool("gpu", vec![g1()]).disruption(quick()).min_nodes(2)],
    );
    show("min", &s, 0, &fresh);
    // A PDB that allows one disruption where two pods would move.
    let mut s = snap(
        vec![
            managed("two", &m4(), "cpu")
                .with_pod(pod("x1").cpu("500m").label("app", "x"))
                .with_pod(pod("x2").cpu("500m").label("app", "x")),
            managed("big", &m16(), "cpu").with_pod(pod("fill").cpu("10")),
        ],
        vec![pool("cpu", vec![m4(), m16()]).disruption(quick())],
    );
    s.pdbs.push(Pdb {
        namespace: "default".into(),
        name: "x".into(),
        selector: Requirements::new().with("app", Operator::In, &["x"]),
        disruptions_allowed: 1,
    });
    show("pdb-one", &s, 0, &fresh);
    // A booked node its request's pods fill: the booking, not the utilization, keeps it.
    let mut s = snap(
        vec![managed("full", &g1(), "gpu").with_pod(pod("phantom").gpus(1))],
        vec![pool("gpu", vec![g1()]).disruption(quick())],
    );
    s.booked_nodes.insert("full".into());
    show("booked", &s, 0, &fresh);
    expect![[r#"
        pdb busy: AboveThreshold candidate=false threshold=Some(0.5) wait=None | cpu/memory utilization 0.63 above threshold 0.50
        pdb idle: Empty candidate=true threshold=Some(0.5) wait=None | empty
        pdb web: PdbBlocked candidate=false threshold=Some(0.5) wait=None | blocked by PDB default/web (allows 0 disruptions)
        unneeded n: Unneeded candidate=true threshold=Some(0.5) wait=Some((100, 700)) | unneeded for 0s of 10m
        after dnd: DoNotDisrupt candidate=false threshold=Some(0.5) wait=Some((900, 2700)) | pod default/d has karpenter.sh/do-not-disrupt=30m (26m40s left)
        after n: ConsolidateAfter candidate=true threshold=Some(0.5) wait=Some((1000, 1300)) | a pod was bound or removed 1m40s ago (consolidateAfter 5m)
        paused n: Paused candidate=true threshold=Some(0.5) wait=Some((50, 650)) | scale-down of NodePool gpu paused for 9m10s after a scale-up
        budget a: Empty candidate=true threshold=Some(0.5) wait=None | empty
        budget b: BudgetExhausted candidate=false threshold=Some(0.5) wait=None | disruption budget of NodePool gpu exhausted for Empty
        budget c: Booked candidate=false threshold=Some(0.5) wait=None | capacity booked for a ProvisioningRequest
        min a: Empty candidate=true threshold=Some(0.5) wait=None | empty
        min b: AtMinNodes candidate=false threshold=Some(0.5) wait=None | NodePool gpu is at minNodes 2
        min c: AtMinNodes candidate=false threshold=Some(0.5) wait=None | NodePool gpu is at minNodes 2
        pdb-one big: AboveThreshold candidate=false threshold=Some(0.5) wait=None | cpu/memory utilization 0.63 above threshold 0.50
        pdb-one two: PdbBlocked candidate=false threshold=Some(0.5) wait=None | blocked by PDB default/x (allows 1 more disruptions, needs 2)
        booked full: Booked candidate=false threshold=Some(0.5) wait=None | capacity booked for a ProvisioningRequest
    "#]].assert_eq(&out);
}

/// A 128-cpu type and a 96-cpu one 25 % cheaper (the DLRM replay's right-sizing case).
fn m6i_pair() -> (InstanceType, InstanceType) {
    let m128 = itype("m6i.32xlarge")
        .cpu("128")
        .mem("512Gi")
        .on_demand(&ZONES, 6.144)
        .build();
    let m96 = itype("m6i.24xlarge")
        .cpu("96")
        .mem("384Gi")
        .on_demand(&ZONES, 4.608)
        .build();
    (m128, m96)
}

/// One `m6i.32xlarge` node running a 64-cpu pod, in a pool of `types` that right-sizes at
/// `savings`.
fn one_big_node(savings: f64, types: Vec<InstanceType>) -> Snapshot {
    let (m128, _) = m6i_pair();
    let n = managed("big", &m128, "cpu").with_pod(pod("w").cpu("64").mem("320Gi"));
    snap(
        vec![n],
        vec![pool("cpu", types).disruption(DisruptionPolicy {
            right_size_savings: savings,
            ..quick()
        })],
    )
}

#[test]
fn a_disruption_cache_plans_as_passes_without_one_while_the_pools_change() {
    let (m128, m96) = m6i_pair();
    let cluster = |types: Vec<InstanceType>| one_big_node(0.2, types);
    let cheap = cluster(vec![m96.clone(), m128.clone()]);
    // The same catalog (one `Arc`), but the pool's requirements leave out the cheaper type:
    // a cache that compared catalogs alone would still offer it.
    let mut narrowed = cheap.clone();
    narrowed.pools[0].requirements =
        Requirements::new().with(labels::INSTANCE_TYPE, Operator::NotIn, &["m6i.24xlarge"]);
    assert!(std::sync::Arc::ptr_eq(
        &narrowed.pools[0].instance_types,
        &cheap.pools[0].instance_types
    ));
    let dear = cluster(vec![m128.clone()]);
    // Still cheap enough to replace with, at a new price: a replacement planned on the last
    // pass's shapes would carry the old one.
    let mut m96_dearer = m96.clone();
    for o in &mut m96_dearer.offerings {
        o.price = 4.9;
    }
    let pricier = cluster(vec![m96_dearer, m128.clone()]);
    let config = DisruptionConfig::default();
    let state = DisruptionState::default();
    let mut cache = DisruptionCache::default();
    let mut replaced = Vec::new();
    for s in [&cheap, &narrowed, &cheap, &pricier, &dear, &dear, &cheap] {
        let with = plan_disruption_cached(s, &state, 0, &config, &mut cache);
        assert_eq!(with, plan_disruption(s, &state, 0, &config));
        replaced.push(!with.commands.is_empty());
    }
    // The screen lets the node through exactly where the cheaper type is in the pool.
    assert_eq!(replaced, [true, false, true, true, false, false, true]);
}

/// The DLRM replay's pattern: a 64-cpu pod alone on a 128-cpu node is above the 0.5
/// threshold (its memory share is 0.62), yet a 96-cpu node 25 % cheaper holds it. Right-sizing
/// (20 % by default) replaces the node; a saving below the pool's `rightSizeSavings`, the
/// setting 0, or a GPU node, keep it; validation refuses a replacement that stopped saving
/// enough.
#[test]
fn a_node_above_its_threshold_is_right_sized_when_a_much_cheaper_node_holds_its_pods() {
    let (m128, m96) = m6i_pair();
    let cluster = one_big_node;
    let mut s = cluster(0.2, vec![m96.clone(), m128.clone()]);
    let plan = check(
        &s,
        0,
        &DisruptionState::default(),
        expect![[r#"
            Underutilized Replace nodes=[big] pods=1 savings=1.536 replacement=m6i.24xlarge@4.608
        "#]],
    );
    let v = plan.verdicts.iter().find(|v| v.node == "big").unwrap();
    assert!(
        v.reason
            .starts_with("right-sized: cpu/memory utilization 0.62 above threshold 0.50"),
        "{}",
        v.reason
    );
    // Validation lends the snapshot to a simulation that takes the node out and plans a
    // replacement from the pools; it must come back as it was.
    let lent = s.clone();
    assert_eq!(
        validate(&plan.commands[0], &mut s, 15, &DisruptionConfig::default()),
        Ok(())
    );
    assert!(s == lent, "validate changed the snapshot it was lent");
    // The saving is 25 %: a pool asking for 30 % keeps the node (no type is cheap enough to
    // be worth a simulation), and so does one that turned right-sizing off.
    check(
        &cluster(0.3, vec![m96.clone(), m128.clone()]),
        0,
        &DisruptionState::default(),
        expect![[r#"
            keep big: cpu/memory utilization 0.62 above threshold 0.50
        "#]],
    );
    check(
        &cluster(0.0, vec![m96.clone(), m128.clone()]),
        0,
        &DisruptionState::default(),
        expect![[r#"
            keep big: cpu/memory utilization 0.62 above threshold 0.50
        "#]],
    );
    // A cheaper type has the room, but the pod asks for the big type: the simulation finds
    // no replacement and the verdict says what right-sizing looked for.
    let pinned = managed("big", &m128, "cpu").with_pod(
        pod("w")
            .cpu("64")
            .mem("320Gi")
            .select(labels::INSTANCE_TYPE, "m6i.32xlarge"),
    );
    check(
        &snap(
            vec![pinned],
            vec![pool("cpu", vec![m96.clone(), m128.clone()]).disruption(quick())],
        ),
        0,
        &DisruptionState::default(),
        expect![[r#"
            keep big: cpu/memory utilization 0.62 above threshold 0.50, and no node 20 % cheaper holds its pods
        "#]],
    );
    // Without a cheaper type the screen keeps it without a simulation, as above threshold.
    check(
        &cluster(0.2, vec![m128.clone()]),
        0,
        &DisruptionState::default(),
        expect![[r#"
            keep big: cpu/memory utilization 0.62 above threshold 0.50
        "#]],
    );
    // The command decided at 20 % no longer holds when the pool asks for 30 % by validation.
    let mut stricter = cluster(0.3, vec![m96.clone(), m128.clone()]);
    assert_eq!(
        validate(
            &plan.commands[0],
            &mut stricter,
            15,
            &DisruptionConfig::default()
        ),
        Err("above its utilization threshold, and the replacement no longer saves 30 %".into())
    );
    // Right-sizing waits out the unneeded time like any candidate.
    let mut waiting = cluster(0.2, vec![m96.clone(), m128.clone()]);
    waiting.pools[0].disruption.unneeded_s = 300;
    check(
        &waiting,
        0,
        &DisruptionState::default(),
        expect![[r#"
            keep big: cpu/memory utilization 0.62 above threshold 0.50, but a node 20 % cheaper may hold its pods: right-sizing candidate for 0s of 5m
        "#]],
    );
    // GPU nodes are not right-sized: evicting a GPU job throws its progress away.
    let g4 = itype("g4dn.12xlarge")
        .cpu("48")
        .mem("192Gi")
        .gpus(4, "T4", 16)
        .on_demand(&ZONES, 3.912)
        .build();
    let g1 = itype("g4dn.4xlarge")
        .cpu("16")
        .mem("64Gi")
        .gpus(1, "T4", 16)
        .on_demand(&ZONES, 1.204)
        .build();
    let n = managed("gpu4", &g4, "gpu").with_pod(pod("t").cpu("4").gpus(3));
    check(
        &snap(
            vec![n],
            vec![pool("gpu", vec![g1, g4.clone()]).disruption(quick())],
        ),
        0,
        &DisruptionState::default(),
        expect![[r#"
            keep gpu4: GPU utilization 0.75 above threshold 0.50
        "#]],
    );
}

#[test]
fn a_gpu_node_with_a_cpu_rider_is_replaced_by_one_smaller_gpu_node() {
    // An untainted GPU pool: "web" needs no GPU and rides in the room the replacement for
    // "infer" leaves, so one g5.xlarge replaces the p4d (without riders the pods would need
    // two new nodes, and a replacement is one).
    let big = managed("big", &g8(), "gpu")
        .with_pod(pod("infer").cpu("1").gpus(1).owner(Some("ReplicaSet")))
        .with_pod(pod("web").cpu("1").owner(Some("ReplicaSet")));
    check(
        &snap(
            vec![big],
            vec![
                pool("gpu", vec![g1(), g8()]).disruption(quick()),
                pool("cpu", vec![m4()]).disruption(quick()),
            ],
        ),
        0,
        &DisruptionState::default(),
        expect![[r#"
            Underutilized Replace nodes=[big] pods=2 savings=20.954 replacement=g5.xlarge@1.006
        "#]],
    );
}

#[test]
fn budgets_count_initialized_nodes_and_take_not_ready_ones_as_disrupted() {
    let deleted = |s: &Snapshot| -> Vec<String> {
        plan_disruption(s, &DisruptionState::default(), 0, &ca_flags())
            .commands
            .iter()
            .flat_map(|c| c.nodes.iter().cloned())
            .collect()
    };
    // Karpenter's budget arithmetic: ten initialized nodes make 10 % one node, however many
    // nodes are still coming up...
    let booting = (0..10)
        .map(|i| managed(&format!("u{i}"), &g1(), "gpu").initialized(false))
        .collect();
    assert_eq!(deleted(&ten_percent(10, booting)), ["n0"]);
    // ...and a node that is not ready uses up the budget as one being deleted does. Twenty
    // nodes allow two; the sick one takes one of them.
    let sick = vec![managed("sick", &g1(), "gpu").unready()];
    assert_eq!(deleted(&ten_percent(19, sick)), ["n0"]);
}

#[test]
fn do_not_disrupt_on_a_daemonset_or_static_pod_keeps_the_node() {
    // Neither pod is ever evicted, yet whoever annotated it wants the node kept (Karpenter
    // keeps it too).
    let mut mirror = pod("static").cpu("100m").owner(Some("Node"));
    mirror.0.mirror = true;
    let nodes = vec![
        managed("ds", &g1(), "gpu").with_pod(
            pod("agent")
                .cpu("100m")
                .owner(Some("DaemonSet"))
                .annotate(autoscaler_core::keys::DO_NOT_DISRUPT, "true"),
        ),
        managed("static", &g1(), "gpu")
            .with_pod(mirror.annotate(autoscaler_core::keys::DO_NOT_DISRUPT, "true")),
        managed("plain", &g1(), "gpu"),
    ];
    check(
        &snap(nodes, vec![pool("gpu", vec![g1()]).disruption(quick())]),
        0,
        &DisruptionState::default(),
        expect![[r#"
            Empty Delete nodes=[plain] pods=0 savings=1.006
            keep ds: pod default/agent has karpenter.sh/do-not-disrupt
            keep static: pod default/static has karpenter.sh/do-not-disrupt
        "#]],
    );
}

#[test]
fn consolidate_after_never_keeps_every_node_whenever_it_was_made() {
    // Never is the largest duration: adding it to a node's creation time must not overflow.
    let policy = DisruptionPolicy {
        consolidate_after_s: i64::MAX,
        ..quick()
    };
    check(
        &snap(
            vec![managed("late", &g1(), "gpu").created(100)],
            vec![pool("gpu", vec![g1()]).disruption(policy)],
        ),
        1_000,
        &DisruptionState::default(),
        expect![[r#"
            keep late: NodePool consolidateAfter is Never
        "#]],
    );
}

#[test]
fn evicted_pods_take_room_on_a_node_that_is_up_before_one_still_starting() {
    // Nodes a0..a3 have the room, but only a2 has initialized. A pod may be evicted only onto
    // a node that is up, so the one it would take first by name must not decide: it moves to
    // a2 and its node goes. With a2 starting too, the node is kept, saying why.
    let nodes = |up: usize| -> Vec<NodeBuilder> {
        let mut v: Vec<NodeBuilder> = (0..4)
            .map(|i| {
                managed(&format!("a{i}"), &m16(), "cpu")
                    .initialized(i == up)
                    .with_pod(pod(&format!("fill{i}")).cpu("9"))
            })
            .collect();
        v.push(managed("z-small", &m4(), "cpu").with_pod(pod("c").cpu("1")));
        v
    };
    let pools = || vec![pool("cpu", vec![m4(), m16()]).disruption(quick())];
    let moved = |up| {
        plan_disruption(
            &snap(nodes(up), pools()),
            &DisruptionState::default(),
            0,
            &ca_flags(),
        )
        .render()
        .lines()
        .filter(|l| l.contains("z-small"))
        .collect::<Vec<_>>()
        .join("\n")
    };
    expect!["Underutilized Delete nodes=[z-small] pods=1 savings=0.192"].assert_eq(&moved(2));
    expect!["keep z-small: pod default/c would schedule against an uninitialized node a0"]
        .assert_eq(&moved(9));
}

#[test]
fn room_a_pending_pod_is_nominated_to_is_not_given_to_evicted_pods() {
    // b registered for claim-b, which a pending 10-cpu pod was planned onto; the scheduler
    // binds it there next. Moving a's 5-cpu pod onto b would leave it no room.
    let mut b = managed("b", &m16(), "cpu").with_pod(pod("fill").cpu("1"));
    b.0.claim = Some("claim-b".into());
    let mut s = snap(
        vec![managed("a", &m16(), "cpu").with_pod(pod("w").cpu("5")), b],
        vec![pool("cpu", vec![m16()]).disruption(quick())],
    );
    let coming = pod("coming").cpu("10").build();
    s.nominated.insert(coming.key.clone(), "claim-b".into());
    s.pending.push(coming);
    check(
        &s,
        0,
        &DisruptionState::default(),
        expect![[r#"
            keep a: no strictly cheaper replacement
            keep b: pending pod default/coming is nominated to it
        "#]],
    );
    // Without the nomination the room is free: a's pod moves to b and a goes.
    s.pending.clear();
    s.nominated.clear();
    check(
        &s,
        0,
        &DisruptionState::default(),
        expect![[r#"
            Underutilized Delete nodes=[a] pods=1 savings=0.768
            keep b: no strictly cheaper replacement
        "#]],
    );
}

#[test]
fn a_node_a_pending_pod_would_be_scheduled_on_stays_and_keeps_its_room() {
    // No claim holds a nomination for the pending 12-cpu pod, but it fits on b as b is (a has
    // 10.9 cpu free): the scheduler binds it there next. Karpenter's provisioner nominates b
    // for it, so b stays, and a's 5-cpu pod may not take the room it needs.
    let mut s = snap(
        vec![
            managed("a", &m16(), "cpu").with_pod(pod("w").cpu("5")),
            managed("b", &m16(), "cpu"),
        ],
        vec![pool("cpu", vec![m16(), m4()]).disruption(quick())],
    );
    let cfg = DisruptionConfig::default();
    let before = plan_disruption(&s, &DisruptionState::default(), 0, &cfg);
    s.pending.push(pod("coming").cpu("12").build());
    check(
        &s,
        0,
        &DisruptionState::default(),
        expect![[r#"
            keep a: no strictly cheaper replacement
            keep b: pending pod default/coming would be scheduled on it
        "#]],
    );
    // Decided before the pod came, the command no longer holds once it has.
    let empty_b = before
        .commands
        .iter()
        .find(|c| c.nodes == ["b"])
        .expect("b goes while nothing is pending");
    assert_eq!(
        validate(empty_b, &mut s, 15, &cfg).unwrap_err(),
        "node b: pending pod default/coming would be scheduled on it"
    );
    // A pending pod no node holds as it is keeps nothing: the plan is the one made before.
    s.pending = vec![pod("huge").cpu("64").build()];
    let with_huge = plan_disruption(&s, &DisruptionState::default(), 0, &cfg);
    assert_eq!(with_huge.render(), before.render());
    assert_eq!(
        before.render(),
        "Empty Delete nodes=[b] pods=0 savings=0.768\nkeep a: no strictly cheaper replacement\n"
    );
}

#[test]
fn an_atomic_pool_larger_than_the_parallelism_limit_still_goes_whole() {
    // Eleven empty nodes of an atomic pool against --max-scale-down-parallelism 10: the pool
    // goes whole while the limit has room (the Cluster Autoscaler lets an atomic group overrun
    // it), and waits when removals under way have used it up.
    let nodes = || {
        (0..11)
            .map(|i| managed(&format!("a{i:02}"), &g1(), "slice"))
            .collect::<Vec<_>>()
    };
    let s = snap(
        nodes(),
        vec![pool("slice", vec![g1()]).atomic(11).disruption(quick())],
    );
    let config = DisruptionConfig {
        max_scale_down_parallelism: 10,
        ..ca_flags()
    };
    let plan = plan_disruption(&s, &DisruptionState::default(), 0, &config);
    assert_eq!(plan.commands.len(), 1, "{}", plan.render());
    assert_eq!(plan.commands[0].nodes.len(), 11, "{}", plan.render());
    let mut state = DisruptionState::default();
    state.in_progress.nodes = 9;
    let plan = plan_disruption(&s, &state, 0, &config);
    assert_eq!(plan.commands.len(), 1, "{}", plan.render());
    state.in_progress.nodes = 10;
    let plan = plan_disruption(&s, &state, 0, &config);
    assert!(plan.commands.is_empty(), "{}", plan.render());
}

#[test]
fn an_atomic_pool_validates_whole_under_its_budget_and_is_never_narrowed() {
    // Two empty nodes of an atomic pool under the default budget (10 % of 2 nodes: one at a
    // time): decided as one disruption, the command validates as one too.
    let s = snap(
        vec![managed("a0", &g1(), "slice"), managed("a1", &g1(), "slice")],
        vec![
            pool("slice", vec![g1()])
                .atomic(2)
                .disruption(DisruptionPolicy {
                    unneeded_s: 0,
                    ..DisruptionPolicy::default()
                }),
        ],
    );
    let cfg = DisruptionConfig::default();
    let plan = plan_disruption(&s, &DisruptionState::default(), 0, &cfg);
    assert_eq!(plan.commands.len(), 1, "{}", plan.render());
    let cmd = &plan.commands[0];
    assert_eq!(cmd.nodes, ["a0", "a1"]);
    let later = cfg.validation_delay_s;
    assert_eq!(validate(cmd, &mut s.clone(), later, &cfg), Ok(()));
    // A pod lands on a0 meanwhile: the pool does not go without it, so the command is not
    // narrowed to a1, and fails.
    let mut busy = s.clone();
    busy.nodes[0].pods.push(pod("late").build());
    assert_eq!(narrow_empty(cmd, &busy), None);
    assert!(validate(cmd, &mut busy, later, &cfg).is_err());
    // A node of the pool the command does not name (launched since) stops it too.
    let mut grown = s.clone();
    grown.nodes.push(managed("a2", &g1(), "slice").build());
    assert_eq!(
        validate(cmd, &mut grown, later, &cfg).unwrap_err(),
        "NodePool slice scales down only as a whole, and node a2 is not in the command"
    );
}

#[test]
fn a_node_whose_pods_had_nowhere_to_go_waits_its_unneeded_time_from_when_they_do() {
    // `lonely` is under its threshold from t=0, but its pod has nowhere to go until `room`
    // arrives at t=800. Its unneeded time starts again when the simulation finds no place
    // (t=700), so it goes at 1300, not the moment room appears.
    let policy = DisruptionPolicy {
        unneeded_s: 600,
        ..quick()
    };
    let lonely = || managed("lonely", &m16(), "cpu").with_pod(pod("a").cpu("1"));
    let pools = || vec![pool("cpu", vec![m16()]).disruption(policy.clone())];
    let mut state = DisruptionState::default();
    for t in [0, 700] {
        state = plan_disruption(&snap(vec![lonely()], pools()), &state, t, &ca_flags()).state;
    }
    let room = managed("room", &m16(), "cpu").with_pod(
        pod("pinned")
            .cpu("1")
            .annotate(autoscaler_core::keys::SAFE_TO_EVICT, "false"),
    );
    let s = snap(vec![lonely(), room], pools());
    let lonely_at = |t, state: &DisruptionState| {
        plan_disruption(&s, state, t, &ca_flags())
            .render()
            .lines()
            .filter(|l| l.contains("lonely"))
            .collect::<Vec<_>>()
            .join("\n")
    };
    expect!["keep lonely: unneeded for 1m40s of 10m"].assert_eq(&lonely_at(800, &state));
    expect!["Underutilized Delete nodes=[lonely] pods=1 savings=0.768"]
        .assert_eq(&lonely_at(1300, &state));
}

#[test]
fn a_node_another_autoscaler_is_removing_is_left_to_it() {
    // During a migration the Cluster Autoscaler may be draining a node (its taint says so):
    // it is not a candidate, whatever the controller's own bookkeeping says.
    let tainted = managed("theirs", &g1(), "gpu").taint(autoscaler_core::taints::Taint::new(
        "ToBeDeletedByClusterAutoscaler",
        "1733400000",
        autoscaler_core::taints::Effect::NoSchedule,
    ));
    check(
        &snap(
            vec![tainted, managed("ours", &g1(), "gpu")],
            vec![pool("gpu", vec![g1()]).disruption(quick())],
        ),
        0,
        &DisruptionState::default(),
        expect![[r#"
            Empty Delete nodes=[ours] pods=0 savings=1.006
            keep theirs: being removed by another autoscaler (taint ToBeDeletedByClusterAutoscaler)
        "#]],
    );
}

#[test]
fn a_cluster_autoscaler_taint_left_over_does_not_hold_its_node() {
    // Its value says the Cluster Autoscaler began the deletion an hour ago: past its five
    // minutes, the deletion is over or abandoned. The node is an ordinary empty candidate,
    // and under the default 10 % budget (one node in three) it is not counted as disrupted
    // already, so the budget lets it go.
    let now = 3_600;
    let left_over = managed("theirs", &g1(), "gpu").taint(autoscaler_core::taints::Taint::new(
        "ToBeDeletedByClusterAutoscaler",
        "0",
        autoscaler_core::taints::Effect::NoSchedule,
    ));
    let busy = |name: &str| {
        managed(name, &g1(), "gpu").with_pod(
            pod(&format!("{name}-p"))
                .gpus(1)
                .owner(Some("ReplicaSet"))
                .tolerate(autoscaler_core::taints::Toleration::exists(
                    "nvidia.com/gpu",
                )),
        )
    };
    let s = snap(
        vec![left_over, busy("a"), busy("b")],
        vec![pool("gpu", vec![g1()]).disruption(DisruptionPolicy {
            unneeded_s: 0,
            ..DisruptionPolicy::default()
        })],
    );
    let plan = plan_disruption(&s, &DisruptionState::default(), now, &ca_flags());
    let removed: Vec<&str> = plan
        .commands
        .iter()
        .flat_map(|c| c.nodes.iter().map(String::as_str))
        .collect();
    assert_eq!(removed, ["theirs"], "{}", plan.render());
}

#[test]
fn a_gang_still_waiting_for_members_keeps_no_node() {
    // Two of a gang of three are pending: the planner binds none of them (the gang waits for
    // its third), so no node is kept for them.
    let mut s = snap(
        vec![
            managed("a", &m16(), "cpu").with_pod(pod("w").cpu("15")),
            managed("b", &m16(), "cpu"),
        ],
        vec![pool("cpu", vec![m16(), m4()]).disruption(quick())],
    );
    for n in ["g-0", "g-1"] {
        s.pending.push(pod(n).cpu("2").group("g").build());
    }
    s.groups.insert(
        "g".into(),
        autoscaler_core::model::Group {
            name: "g".into(),
            min_count: 3,
        },
    );
    let plan = plan_disruption(
        &s,
        &DisruptionState::default(),
        0,
        &DisruptionConfig::default(),
    );
    assert!(
        !plan.render().contains("would be scheduled on it"),
        "{}",
        plan.render()
    );
    // With its third member the gang fits b, and b stays for it.
    s.pending.push(pod("g-2").cpu("2").group("g").build());
    let plan = plan_disruption(
        &s,
        &DisruptionState::default(),
        0,
        &DisruptionConfig::default(),
    );
    assert!(
        plan.render()
            .contains("keep b: pending pod default/g-0 would be scheduled on it"),
        "{}",
        plan.render()
    );
}
