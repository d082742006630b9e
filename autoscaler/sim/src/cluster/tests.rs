//! The incremental snapshot against a fresh one, through the changes the engine makes.

use std::collections::BTreeSet;

use autoscaler_core::builders::pod;
use autoscaler_core::requirements::Labels;
use autoscaler_core::resources::{Resources, names};
use autoscaler_core::taints::{Effect, Taint};
use autoscaler_core::{CapacityType, labels};

use super::*;

fn node(name: &str, phase: NodePhase) -> NodeState {
    let mut l = Labels::new();
    l.insert(labels::HOSTNAME.into(), name.into());
    NodeState {
        name: name.into(),
        claim: format!("claim-{name}"),
        provider_id: name.into(),
        pool: Some(0),
        pool_name: "p".into(),
        instance_type: "t".into(),
        zone: "z1".into(),
        capacity_type: CapacityType::OnDemand,
        price: 1.0,
        labels: Arc::new(l),
        taints: vec![],
        startup_taints: vec![],
        allocatable: Resources::new()
            .with(names::CPU, 16_000)
            .with(names::MEMORY, 64 << 30)
            .with(names::PODS, 110),
        used: Resources::new(),
        devices: vec![],
        pods: vec![],
        ds_pods: Default::default(),
        phase,
        cordoned: false,
        deleting: false,
        launched_at: 0,
        gone_at: None,
        ready_at: Some(0),
        gpu_pods: 0,
        gpu_busy_since: 0,
        gpu_busy_s: 0,
        gpus: 0,
        last_pod_change: 0,
        held: vec![],
        hold_version: 0,
        dra: Default::default(),
    }
}

/// Two Ready nodes, one registered but not initialized, one launching; six pods arrived.
fn cluster() -> Cluster {
    let nodes = vec![
        node("a", NodePhase::Ready),
        node("b", NodePhase::Ready),
        node("c", NodePhase::Registered),
        node("d", NodePhase::Launching),
    ];
    let mut c = Cluster {
        live_nodes: (0..nodes.len()).collect::<BTreeSet<_>>(),
        nodes,
        ..Default::default()
    };
    c.template_of = (0..6).collect();
    c.template_counts = vec![(0, 0); 6];
    for i in 0..6 {
        c.pods.push(PodState {
            pod: None,
            phase: PodPhase::Waiting,
            generation: 0,
            devices: vec![],
            gpu_equiv: 0.0,
            claim_devices: vec![],
        });
        c.arrive(i, pod(&format!("p{i}")).cpu("1").build(), 0);
    }
    c
}

fn check(cache: &mut SnapshotCache, c: &Cluster, w: &Workload) {
    for pending in [false, true] {
        let fresh = c.snapshot(&[], &[], w, pending);
        assert_eq!(
            *cache.sync(c, &[], &[], w, pending),
            fresh,
            "pending={pending}"
        );
    }
}

#[test]
fn incremental_snapshot_follows_every_change() {
    let w = Workload::default();
    let mut c = cluster();
    let mut cache = SnapshotCache::default();
    check(&mut cache, &c, &w);
    for (p, n) in [(0, 0), (1, 0), (2, 0), (3, 1), (4, 2)] {
        c.bind(p, n, vec![], 1).expect("fits");
    }
    check(&mut cache, &c, &w);
    // Unbind from the middle, bind a new pod after the others.
    c.make_pending(1, 2);
    c.bind(5, 0, vec![], 2).expect("fits");
    check(&mut cache, &c, &w);
    // Taints, cordon, deletion and the device plugin coming up.
    c.nodes[1].taints.push(Taint::new(
        autoscaler_core::keys::DISRUPTION_TAINT,
        "",
        Effect::NoSchedule,
    ));
    c.nodes[1].deleting = true;
    c.nodes[0].cordoned = true;
    c.nodes[2].phase = NodePhase::Ready;
    c.nodes[3].phase = NodePhase::Registered;
    check(&mut cache, &c, &w);
    // An order the engine never produces still comes out right.
    c.nodes[0].pods.reverse();
    check(&mut cache, &c, &w);
    // A node goes away; a pod finishes.
    c.finish(3, 3);
    c.nodes[1].phase = NodePhase::Gone;
    c.live_nodes.remove(&1);
    check(&mut cache, &c, &w);
    // A booking: phantoms on an initialized node and on one still in flight, one of them
    // consumed, then all released.
    let phantom = |n: &str| pod(&format!("{n}.booked")).cpu("2").build();
    c.nodes[0].held = vec![(0, phantom("r-0")), (0, phantom("r-1"))];
    c.nodes[0].hold_version += 1;
    c.nodes[3].held = vec![(0, phantom("r-2"))];
    c.nodes[3].hold_version += 1;
    check(&mut cache, &c, &w);
    let fresh = c.snapshot(&[], &[], &w, false);
    assert!(fresh.booked_nodes.contains("a") && fresh.booked_nodes.contains("d"));
    let a = fresh.nodes.iter().find(|n| n.name == "a").unwrap();
    assert!(a.pods.iter().any(|p| p.key.name == "r-1.booked"));
    c.nodes[0].held.pop();
    c.nodes[0].hold_version += 1;
    check(&mut cache, &c, &w);
    c.nodes[0].held.clear();
    c.nodes[0].hold_version += 1;
    c.nodes[3].held.clear();
    c.nodes[3].hold_version += 1;
    check(&mut cache, &c, &w);
    assert!(c.snapshot(&[], &[], &w, false).booked_nodes.is_empty());
}

#[test]
fn a_do_not_disrupt_duration_counts_from_the_binding() {
    let mut c = cluster();
    let guarded = pod("guarded")
        .cpu("1")
        .annotate(DO_NOT_DISRUPT, "30m")
        .build();
    c.pods.push(PodState {
        pod: None,
        phase: PodPhase::Waiting,
        generation: 0,
        devices: vec![],
        gpu_equiv: 0.0,
        claim_devices: vec![],
    });
    c.template_of.push(6);
    c.template_counts.push((0, 0));
    c.arrive(6, guarded, 100);
    c.bind(6, 0, vec![], 400).unwrap();
    let p = c.pod(6);
    assert_eq!(p.started_at, Some(400));
    // Protected for 30 minutes from the binding, not from the arrival.
    assert!(autoscaler_core::disruption::pod_protection(p, 400 + 1799).is_some());
    assert!(autoscaler_core::disruption::pod_protection(p, 400 + 1800).is_none());
    // Other pods carry no start time (it would only make them differ).
    c.bind(0, 0, vec![], 400).unwrap();
    assert_eq!(c.pod(0).started_at, None);
}
