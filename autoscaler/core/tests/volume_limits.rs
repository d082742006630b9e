//! CSI volume limits on existing nodes, in provisioning and in disruption: a node whose
//! CSINode lets a driver attach `n` volumes takes no pod that would attach an `n+1`-th,
//! as kube-scheduler's `NodeVolumeLimits` filter refuses it (`pkg/scheduling/volumeusage.go`
//! in Karpenter; the first cases follow its "Volume Usage/Limits" state tests: a node at its
//! limit refuses another volume, a volume already tracked there is no breach, a driver
//! published without a count is unbounded). New and in-flight claims, which have no CSINode
//! yet, take the counts the pool's existing nodes of their type show, else the least any node
//! of the type shows; Karpenter leaves them unlimited.

use autoscaler_core::builders::*;
use autoscaler_core::disruption::{DisruptionConfig, DisruptionState, plan_disruption};
use autoscaler_core::explain::{RefusalKind, explain_pod};
use autoscaler_core::instance::InstanceType;
use autoscaler_core::labels;
use autoscaler_core::model::{DisruptionPolicy, InFlightClaim, Snapshot};
use autoscaler_core::provision::{PlanOptions, plan_with};
use autoscaler_core::requirements::Operator;
use autoscaler_core::requirements::Requirements;

mod support;
use support::provisioning::{run, snapshot, target};

const EBS: &str = "ebs.csi.aws.com";
const EFS: &str = "efs.csi.aws.com";

fn m16() -> InstanceType {
    itype("m5.4xlarge")
        .cpu("16")
        .mem("64Gi")
        .max_pods(110)
        .on_demand(&["z1"], 0.768)
        .zone_id("z1", "use1-az1")
        .build()
}

/// Node `n1` of pool `cpu` holding `attached` pods, each with its own EBS claim, and EBS
/// limited to `limit` there.
fn cluster(limit: u32, attached: usize, pending: Vec<PodBuilder>) -> Snapshot {
    let mut n = node("n1", &m16(), "z1")
        .pool("cpu")
        .volume_limit(EBS, limit);
    for i in 0..attached {
        n = n.with_pod(
            pod(&format!("on-{i}"))
                .cpu("100m")
                .volume(EBS, &format!("default/data-on-{i}")),
        );
    }
    let mut s = snapshot(vec![pool("cpu", vec![m16()])], pending);
    s.nodes = vec![n.build()];
    s
}

/// A `c5.xlarge`: cheaper and smaller than [`m16`].
fn c5() -> InstanceType {
    itype("c5.xlarge")
        .cpu("4")
        .mem("8Gi")
        .max_pods(58)
        .on_demand(&["z1"], 0.17)
        .build()
}

/// A pod of 1 cpu with an EBS claim of its own, `default/data-<name>`.
fn own(name: &str) -> PodBuilder {
    with_claim(name, EBS, &format!("default/data-{name}"))
        .cpu("1")
        .mem("1Gi")
}

fn with_claim(name: &str, driver: &str, claim: &str) -> PodBuilder {
    pod(name).cpu("100m").volume(driver, claim)
}

#[test]
fn a_node_at_its_volume_limit_takes_no_pod_with_a_new_volume_and_one_is_launched() {
    let s = cluster(
        10,
        10,
        vec![
            with_claim("p", EBS, "default/data-p"),
            pod("plain").cpu("100m"),
        ],
    );
    let plan = run(&s);
    assert_eq!(plan.new_claims.len(), 1, "{}", plan.render());
    assert_ne!(target(&plan, "p").as_deref(), Some("n1"));
    assert_eq!(
        target(&plan, "plain").as_deref(),
        Some("n1"),
        "a pod without volumes still fits the node"
    );
}

#[test]
fn pods_whose_shapes_the_planner_rewrites_keep_their_volumes() {
    // A soft preference is held as required on a copy of the pod's shape, and a zone-ID
    // requirement is rewritten to zones; each copy must still attach the pod's volume.
    let pending = vec![
        with_claim("soft", EBS, "default/data-soft").prefer_anti_affinity(
            10,
            labels::HOSTNAME,
            "db",
        ),
        with_claim("by-id", EBS, "default/data-by-id").require(
            labels::ZONE_ID,
            Operator::In,
            &["use1-az1"],
        ),
        pod("plain").cpu("100m"),
    ];
    let plan = run(&cluster(10, 10, pending));
    assert_eq!(
        target(&plan, "plain").as_deref(),
        Some("n1"),
        "{}",
        plan.render()
    );
    for name in ["soft", "by-id"] {
        let t = target(&plan, name);
        assert!(
            t.is_some() && t.as_deref() != Some("n1"),
            "{name}: {}",
            plan.render()
        );
    }
}

#[test]
fn a_node_below_its_limit_takes_pods_until_the_limit() {
    let pending = (0..5)
        .map(|i| with_claim(&format!("p{i}"), EBS, &format!("default/data-p{i}")))
        .collect();
    let plan = run(&cluster(10, 7, pending));
    let on_node = (0..5)
        .filter(|i| target(&plan, &format!("p{i}")).as_deref() == Some("n1"))
        .count();
    assert_eq!(on_node, 3, "{}", plan.render());
    assert_eq!(plan.new_claims.len(), 1, "{}", plan.render());
}

#[test]
fn a_volume_already_attached_there_is_no_breach() {
    // `p` mounts the claim a pod on the node already uses: nothing new is attached.
    let plan = run(&cluster(
        10,
        10,
        vec![with_claim("p", EBS, "default/data-on-5")],
    ));
    assert_eq!(
        target(&plan, "p").as_deref(),
        Some("n1"),
        "{}",
        plan.render()
    );
    assert!(plan.new_claims.is_empty());
}

#[test]
fn a_driver_without_a_limit_is_unbounded() {
    let plan = run(&cluster(
        10,
        10,
        vec![with_claim("p", EFS, "default/shared")],
    ));
    assert_eq!(
        target(&plan, "p").as_deref(),
        Some("n1"),
        "{}",
        plan.render()
    );
}

#[test]
fn identical_pods_are_each_checked_against_the_volumes_attached() {
    // Replicas alike but for their claims: the first one refused at the limit must not make
    // the planner skip the node for the one whose claim is there already.
    let plan = run(&cluster(
        10,
        10,
        vec![
            with_claim("a", EBS, "default/data-a"),
            with_claim("b", EBS, "default/data-on-3"),
        ],
    ));
    assert_ne!(
        target(&plan, "a").as_deref(),
        Some("n1"),
        "{}",
        plan.render()
    );
    assert_eq!(
        target(&plan, "b").as_deref(),
        Some("n1"),
        "{}",
        plan.render()
    );
}

#[test]
fn consolidation_does_not_move_pods_onto_a_node_at_its_volume_limit() {
    // `small` is nearly empty and its pod fits `big` by resources, but `big` has attached
    // all the EBS volumes its CSINode allows: deleting `small` would leave the pod pending.
    let quick = DisruptionPolicy {
        unneeded_s: 0,
        budgets: vec![],
        ..DisruptionPolicy::default()
    };
    let build = |limit: u32, mover: PodBuilder| {
        let mut big = node("big", &m16(), "z1")
            .pool("cpu")
            .volume_limit(EBS, limit);
        for i in 0..4 {
            big = big.with_pod(
                pod(&format!("w{i}"))
                    .cpu("3")
                    .volume(EBS, &format!("default/data-w{i}")),
            );
        }
        let small = node("small", &m16(), "z1").pool("cpu").with_pod(mover);
        Snapshot {
            nodes: vec![big.build(), small.build()],
            pools: vec![pool("cpu", vec![m16()]).disruption(quick.clone()).build()],
            ..Snapshot::default()
        }
    };
    let config = DisruptionConfig::default();
    let plain = || with_claim("mover", EBS, "default/data-mover");
    // With a soft preference the planner moves a copy of the pod's shape.
    let soft = || plain().prefer_anti_affinity(10, labels::HOSTNAME, "db");
    let movers: [&dyn Fn() -> PodBuilder; 2] = [&plain, &soft];
    for mover in movers {
        let state = DisruptionState::default();
        let at_limit = plan_disruption(&build(4, mover()), &state, 0, &config);
        assert!(
            !at_limit.render().contains("nodes=[small]"),
            "{}",
            at_limit.render()
        );
        // The control: one more volume allowed and `small` goes.
        let room = plan_disruption(&build(5, mover()), &state, 0, &config);
        assert!(room.render().contains("nodes=[small]"), "{}", room.render());
    }
}

/// A cordoned node with EBS limited to `limit` and nothing attached: an `m5.4xlarge` of pool
/// `cpu` when `teaches`, else a node of another type (which says nothing of the pool's type).
fn learned_from(limit: u32, teaches: bool, pending: Vec<PodBuilder>) -> Snapshot {
    let n = if teaches {
        node("n1", &m16(), "z1").pool("cpu")
    } else {
        node("n1", &itype("r5.large").cpu("2").mem("16Gi").build(), "z1")
    };
    let mut s = snapshot(vec![pool("cpu", vec![m16()])], pending);
    s.nodes = vec![n.volume_limit(EBS, limit).cordoned().build()];
    s
}

#[test]
fn new_nodes_attach_no_more_volumes_than_nodes_of_their_type_show() {
    // The cordoned node takes nothing, but its CSINode says what an m5.4xlarge of the pool
    // attaches: five pods with a claim each need three new nodes, not one.
    let pending = || {
        (0..5)
            .map(|i| with_claim(&format!("p{i}"), EBS, &format!("default/data-p{i}")))
            .collect::<Vec<_>>()
    };
    let plan = run(&learned_from(2, true, pending()));
    assert_eq!(plan.new_claims.len(), 3, "{}", plan.render());
    assert!(plan.new_claims.iter().all(|c| c.pods.len() <= 2));
    // The control: a node of another type says nothing of the pool's type.
    let plan = run(&learned_from(2, false, pending()));
    assert_eq!(plan.new_claims.len(), 1, "{}", plan.render());
}

#[test]
fn a_node_of_the_type_outside_the_pool_teaches_a_pool_without_one() {
    // The pool has no node of its own; an unmanaged m5.4xlarge and one of another pool show
    // what the type attaches, and the pool takes the least of them. Its own node would win.
    let pending = || {
        (0..5)
            .map(|i| with_claim(&format!("p{i}"), EBS, &format!("default/data-p{i}")))
            .collect::<Vec<_>>()
    };
    let mut s = snapshot(
        vec![pool("cpu", vec![m16()]), pool("other", vec![m16()])],
        pending(),
    );
    s.nodes = vec![
        node("unmanaged", &m16(), "z1")
            .volume_limit(EBS, 3)
            .cordoned()
            .build(),
        node("theirs", &m16(), "z1")
            .pool("other")
            .volume_limit(EBS, 2)
            .cordoned()
            .build(),
    ];
    let plan = run(&s);
    assert_eq!(plan.new_claims.len(), 3, "{}", plan.render());
    assert!(plan.new_claims.iter().all(|c| c.pods.len() <= 2));
    s.nodes.push(
        node("ours", &m16(), "z1")
            .pool("cpu")
            .volume_limit(EBS, 5)
            .cordoned()
            .build(),
    );
    let plan = run(&s);
    let of = |p: &str| plan.new_claims.iter().filter(|c| c.pool == p).count();
    assert_eq!((of("cpu"), of("other")), (1, 0), "{}", plan.render());
}

#[test]
fn a_pod_with_more_volumes_than_its_node_types_attach_launches_nothing() {
    let greedy = pod("greedy")
        .cpu("100m")
        .volume(EBS, "default/a")
        .volume(EBS, "default/b")
        .volume(EBS, "default/c");
    let plan = run(&learned_from(2, true, vec![greedy]));
    assert!(plan.new_claims.is_empty(), "{}", plan.render());
    let why = &plan.unschedulable[0].reason;
    assert!(
        why.contains("3 volume(s) of ebs.csi.aws.com") && why.contains("at most 2"),
        "{why}"
    );
}

#[test]
fn a_claim_keeps_no_type_whose_nodes_attach_fewer_volumes_than_it_holds() {
    // The cheaper type attaches one EBS volume, the larger five (their cordoned nodes' CSINodes
    // say): a pod with two claims must not get a claim that may launch the cheaper type.
    let small = c5();
    let nodes = vec![
        node("small-1", &small, "z1")
            .pool("cpu")
            .volume_limit(EBS, 1)
            .cordoned()
            .build(),
        node("big-1", &m16(), "z1")
            .pool("cpu")
            .volume_limit(EBS, 5)
            .cordoned()
            .build(),
    ];
    let two = pod("two")
        .cpu("100m")
        .volume(EBS, "default/a")
        .volume(EBS, "default/b");
    let one = with_claim("one", EBS, "default/c");
    let mut s = snapshot(
        vec![pool("cpu", vec![small.clone(), m16()])],
        vec![two, one],
    );
    s.nodes = nodes;
    let plan = run(&s);
    let claim = plan
        .new_claims
        .iter()
        .find(|c| c.pods.iter().any(|p| p.name == "two"))
        .unwrap_or_else(|| panic!("two got no claim: {}", plan.render()));
    assert!(
        claim
            .instance_types
            .iter()
            .all(|t| &*t.instance_type != "c5.xlarge"),
        "{}",
        plan.render()
    );
    // A pod with one claim may still have the cheaper type.
    let cheap = plan
        .new_claims
        .iter()
        .find(|c| c.pods.iter().any(|p| p.name == "one"))
        .unwrap_or_else(|| panic!("one got no claim: {}", plan.render()));
    assert!(
        cheap
            .instance_types
            .iter()
            .any(|t| &*t.instance_type == "c5.xlarge"),
        "{}",
        plan.render()
    );
}

#[test]
fn a_claim_in_flight_takes_no_more_volumes_than_nodes_of_its_type_show() {
    // Last round's claim has no node and so no CSINode yet, but an m5.4xlarge of the pool
    // attaches two EBS volumes: of three pods with a claim each, two wait for it and the third
    // gets a node of its own now, not after the claim's node refuses it.
    let pending = (0..3)
        .map(|i| with_claim(&format!("p{i}"), EBS, &format!("default/data-p{i}")))
        .collect();
    let coming = || InFlightClaim {
        name: "cpu-coming".into(),
        pool: "cpu".into(),
        instance_types: vec!["m5.4xlarge".into()],
        requirements: Requirements::new(),
        pods: vec![],
        created_at: 0,
    };
    let mut s = learned_from(2, true, pending);
    s.in_flight = vec![coming()];
    let plan = run(&s);
    assert_eq!(plan.in_flight.len(), 2, "{}", plan.render());
    assert!(plan.in_flight.iter().all(|p| p.target == "cpu-coming"));
    assert_eq!(plan.new_claims.len(), 1, "{}", plan.render());
    // The control: no node of the type showed a count, so the claim is unlimited.
    let mut s = learned_from(
        2,
        false,
        (0..3)
            .map(|i| with_claim(&format!("p{i}"), EBS, &format!("default/data-p{i}")))
            .collect(),
    );
    s.in_flight = vec![coming()];
    let plan = run(&s);
    assert_eq!(plan.in_flight.len(), 3, "{}", plan.render());
    assert!(plan.new_claims.is_empty(), "{}", plan.render());
}

#[test]
fn explain_names_the_count_a_type_falls_short_of() {
    let greedy = pod("greedy")
        .cpu("100m")
        .volume(EBS, "default/a")
        .volume(EBS, "default/b")
        .volume(EBS, "default/c");
    let s = learned_from(2, true, vec![greedy.clone()]);
    let e = explain_pod(&s, &s.pending[0].key).expect("pending");
    let t = &e.pools[0].instance_types[0];
    let refused = t
        .refused
        .as_ref()
        .unwrap_or_else(|| panic!("{}", e.render()));
    assert_eq!(refused.kind, RefusalKind::VolumeLimits, "{}", e.render());
    assert!(
        refused.message.contains("3 volume(s) of ebs.csi.aws.com")
            && refused.message.contains("at most 2"),
        "{}",
        refused.message
    );
    // No node of the pool showed a count: the type fits.
    let s = learned_from(2, false, vec![greedy]);
    let e = explain_pod(&s, &s.pending[0].key).expect("pending");
    assert!(
        e.pools[0].instance_types[0].refused.is_none(),
        "{}",
        e.render()
    );
}

/// Pools `cpu` of `c5.xlarge` (EBS count 1, its cordoned node says) and `m5.4xlarge` (count 5,
/// and the only type offering `example.com/foo`), with `pending`.
fn narrowing(pending: Vec<PodBuilder>) -> Snapshot {
    let small = c5();
    let big = itype("m5.4xlarge")
        .cpu("16")
        .mem("64Gi")
        .max_pods(110)
        .res("example.com/foo", "1")
        .on_demand(&["z1"], 0.768)
        .build();
    let mut s = snapshot(vec![pool("cpu", vec![small.clone(), big.clone()])], pending);
    s.nodes = vec![
        node("small-1", &small, "z1")
            .pool("cpu")
            .volume_limit(EBS, 1)
            .cordoned()
            .build(),
        node("big-1", &big, "z1")
            .pool("cpu")
            .volume_limit(EBS, 5)
            .cordoned()
            .build(),
    ];
    s
}

#[test]
fn a_claim_narrowed_to_a_roomier_type_takes_the_next_pod_it_refused() {
    // `a-1`'s claim may still become a c5.xlarge (one EBS volume) and refuses `a-2` at first;
    // `x`, sorted between them, narrows it to the m5.4xlarge (five), and `a-2` joins it rather
    // than opening a third claim. Either a resource only the larger type offers or a node
    // selection narrows it.
    for x in [
        pod("a-1x").cpu("1").mem("1Gi").res("example.com/foo", "1"),
        pod("a-1x")
            .cpu("1")
            .mem("1Gi")
            .select(labels::INSTANCE_TYPE, "m5.4xlarge"),
    ] {
        let plan = run(&narrowing(vec![own("a-0"), own("a-1"), x, own("a-2")]));
        assert_eq!(
            target(&plan, "a-2"),
            target(&plan, "a-1x"),
            "{}",
            plan.render()
        );
    }
}

#[test]
fn a_pod_deferred_before_a_claim_could_attach_it_does_not_hold_back_the_next() {
    // One new claim per plan: `a-1` finds the claim `a-0` opened at its count (it may still be
    // a c5.xlarge) and waits for a later plan. `x` then narrows the claim to the m5.4xlarge,
    // which attaches five; `a-2`, identical to `a-1`, is searched for again and joins it.
    let x = || pod("a-1x").cpu("1").mem("1Gi").res("example.com/foo", "1");
    let one = PlanOptions {
        max_new_claims: 1,
        ..PlanOptions::default()
    };
    let plan = plan_with(&narrowing(vec![own("a-0"), x(), own("a-2")]), &one);
    assert_eq!(
        target(&plan, "a-2"),
        target(&plan, "a-1x"),
        "{}",
        plan.render()
    );
    let plan = plan_with(
        &narrowing(vec![own("a-0"), own("a-1"), x(), own("a-2")]),
        &one,
    );
    assert_eq!(
        target(&plan, "a-2"),
        target(&plan, "a-1x"),
        "{}",
        plan.render()
    );
    assert_eq!(plan.deferred.len(), 1, "{}", plan.render());
}

/// A type of `cpu` cpus and 64Gi at `price` on demand in `z1`.
fn by_cpu(name: &str, cpu: &str, price: f64) -> InstanceType {
    itype(name)
        .cpu(cpu)
        .mem("64Gi")
        .max_pods(110)
        .on_demand(&["z1"], price)
        .build()
}

/// A cordoned node of pool `cpu` per type of `types`, each showing an EBS count of `count`.
fn showing(types: &[InstanceType], count: u32) -> Vec<autoscaler_core::model::Node> {
    types
        .iter()
        .map(|t| {
            node(&format!("{}-1", t.name), t, "z1")
                .pool("cpu")
                .volume_limit(EBS, count)
                .cordoned()
                .build()
        })
        .collect()
}

#[test]
fn claims_are_sized_by_the_pods_a_node_attaches_not_only_by_their_room() {
    // Every type attaches six EBS volumes. By cpu the largest type is the cheapest per pod
    // ($0.50 for 16 pods), but it holds only six of these pods, one claim each. Sized by room,
    // a claim aimed at it grows to six pods and ends as the 8-cpu type ($0.36 for 6); sized by
    // what a node attaches, the 4-cpu type is cheapest per pod ($0.17 for 4): twelve pods get
    // three of those ($0.51), not two of the 8-cpu type ($0.72).
    let types = vec![
        by_cpu("c5.xlarge", "4", 0.17),
        by_cpu("c5.2xlarge", "8", 0.36),
        by_cpu("m5.4xlarge", "16", 0.50),
    ];
    let pending = (0..12).map(|i| own(&format!("db-{i:02}"))).collect();
    let mut s = snapshot(vec![pool("cpu", types.clone())], pending);
    s.nodes = showing(&types, 6);
    let plan = run(&s);
    let types: Vec<&str> = plan
        .new_claims
        .iter()
        .map(|c| &*c.instance_types[0].instance_type)
        .collect();
    assert_eq!(types, ["c5.xlarge"; 3], "{}", plan.render());
}

#[test]
fn pods_beside_an_identical_pod_with_a_volume_keep_their_plan() {
    // Every type's nodes show an EBS count, as on any EKS cluster with the EBS CSI driver;
    // `v` is like the three plain pods but for an EFS volume, a driver with no count. The four
    // are sized together, as without the volume: one 8-cpu node ($0.30), not two 4-cpu ones
    // ($0.34), for each of two halves of the group sized apart.
    let types = vec![
        by_cpu("c5.large", "2", 0.09),
        by_cpu("c5.xlarge", "4", 0.17),
        by_cpu("c5.2xlarge", "8", 0.30),
        by_cpu("c5.4xlarge", "16", 0.50),
    ];
    let mut pending: Vec<PodBuilder> = (0..3)
        .map(|i| pod(&format!("plain-{i}")).cpu("1500m").mem("1Gi"))
        .collect();
    pending.push(
        with_claim("v", EFS, "default/shared-fs")
            .cpu("1500m")
            .mem("1Gi"),
    );
    let mut s = snapshot(vec![pool("cpu", types.clone())], pending);
    s.nodes = showing(&types, 25);
    let plan = run(&s);
    assert_eq!(plan.new_claims.len(), 1, "{}", plan.render());
}
