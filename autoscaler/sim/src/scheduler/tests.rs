//! One test per filter of the simulated kube-scheduler, and the scores.

use std::collections::BTreeSet;

use autoscaler_core::builders::pod;
use autoscaler_core::model::Pod;
use autoscaler_core::requirements::Labels;
use autoscaler_core::resources::{Resources, names};
use autoscaler_core::taints::{Effect, Taint, Toleration};
use autoscaler_core::{CapacityType, labels};

use super::*;
use crate::cluster::{NodePhase, PodPhase};

fn node(name: &str, zone: &str, cpu: i64, gpus: usize) -> NodeState {
    let mut l = Labels::new();
    l.insert(labels::HOSTNAME.into(), name.into());
    l.insert(labels::ZONE.into(), zone.into());
    let mut alloc = Resources::new()
        .with(names::CPU, cpu)
        .with(names::MEMORY, 64 << 30)
        .with(names::PODS, 110);
    if gpus > 0 {
        alloc.set(names::NVIDIA_GPU, gpus as i64);
    }
    NodeState {
        name: name.into(),
        claim: name.into(),
        provider_id: name.into(),
        pool: Some(0),
        pool_name: "p".into(),
        instance_type: "t".into(),
        zone: zone.into(),
        capacity_type: CapacityType::OnDemand,
        price: 1.0,
        labels: std::sync::Arc::new(l),
        taints: vec![],
        startup_taints: vec![],
        allocatable: alloc,
        used: Resources::new(),
        devices: vec![0; gpus],
        pods: vec![],
        ds_pods: Default::default(),
        phase: NodePhase::Ready,
        cordoned: false,
        deleting: false,
        launched_at: 0,
        gone_at: None,
        ready_at: Some(0),
        gpu_pods: 0,
        gpu_busy_since: 0,
        gpu_busy_s: 0,
        gpus: gpus as u32,
        last_pod_change: 0,
        held: vec![],
        hold_version: 0,
        dra: Default::default(),
    }
}

/// A cluster holding `nodes` and `bound` pods (pod, node index).
fn cluster(nodes: Vec<NodeState>, bound: Vec<(Pod, usize)>) -> Cluster {
    let mut c = Cluster {
        live_nodes: (0..nodes.len()).collect::<BTreeSet<_>>(),
        nodes,
        ..Default::default()
    };
    // A template per pod: the scheduler's caches take a template's pods to be alike.
    c.template_of = (0..bound.len() as u32).collect();
    c.template_counts = vec![(0, 0); bound.len()];
    for (i, (p, n)) in bound.into_iter().enumerate() {
        c.pods.push(crate::cluster::PodState {
            pod: None,
            phase: PodPhase::Waiting,
            generation: 0,
            devices: vec![],
            gpu_equiv: 0.0,
            claim_devices: vec![],
        });
        c.arrive(i, p.clone(), 0);
        let devices = fit_resources(&p, &c.nodes[n]).expect("fixture fits");
        c.bind(i, n, devices, 0).expect("fixture fits");
    }
    c
}

fn place(c: &Cluster, p: &Pod) -> Option<usize> {
    let nodes: Vec<usize> = c.live_nodes.iter().copied().collect();
    best_node(View::of(c), p, &nodes, ScoreStrategy::LeastAllocated).map(|(n, _)| n)
}

#[test]
fn resources_filter_counts_bound_pods() {
    let c = cluster(
        vec![node("a", "z1", 4000, 0)],
        vec![(pod("x").cpu("3").build(), 0)],
    );
    assert_eq!(place(&c, &pod("y").cpu("1").build()), Some(0));
    assert_eq!(place(&c, &pod("y").cpu("1500m").build()), None);
    assert_eq!(
        fit_resources(&pod("y").cpu("2").build(), &c.nodes[0]),
        Err(Unfit::Resource("cpu".into()))
    );
}

#[test]
fn gpu_shares_are_per_device_and_whole_gpus_need_free_devices() {
    let c = cluster(
        vec![node("a", "z1", 64000, 2)],
        vec![
            (pod("s1").gpu_share(600).build(), 0),
            (pod("s2").gpu_share(600).build(), 0),
        ],
    );
    // Two devices each at 600: 800 left in total, but no device has 500 free.
    assert_eq!(c.nodes[0].devices, vec![600, 600]);
    assert_eq!(place(&c, &pod("s3").gpu_share(500).build()), None);
    assert_eq!(place(&c, &pod("s3").gpu_share(400).build()), Some(0));
    assert_eq!(place(&c, &pod("w").gpus(1).build()), None);
    // Best fit: the fuller device takes the share.
    let c = cluster(
        vec![node("a", "z1", 64000, 2)],
        vec![
            (pod("s1").gpu_share(300).build(), 0),
            (pod("w").gpus(1).build(), 0),
        ],
    );
    assert_eq!(c.nodes[0].devices, vec![300, 1000]);
    let devices = fit_resources(&pod("s").gpu_share(500).build(), &c.nodes[0]).unwrap();
    assert_eq!(devices, vec![0]);
}

#[test]
fn gpus_are_invisible_until_the_device_plugin_is_up() {
    let mut n = node("a", "z1", 64000, 4);
    n.phase = NodePhase::Registered;
    let c = cluster(vec![n], vec![]);
    assert_eq!(place(&c, &pod("w").gpus(1).build()), None);
    assert_eq!(place(&c, &pod("c").cpu("1").build()), Some(0));
}

#[test]
fn taints_need_tolerations() {
    let mut n = node("a", "z1", 4000, 0);
    n.taints
        .push(Taint::new("nvidia.com/gpu", "present", Effect::NoSchedule));
    n.taints
        .push(Taint::new("soft", "", Effect::PreferNoSchedule));
    let c = cluster(vec![n], vec![]);
    assert_eq!(place(&c, &pod("p").build()), None);
    let tolerant = pod("p")
        .tolerate(Toleration::exists("nvidia.com/gpu"))
        .build();
    assert_eq!(place(&c, &tolerant), Some(0));
    let wrong_value = pod("p")
        .tolerate(Toleration::equal("nvidia.com/gpu", "absent"))
        .build();
    assert_eq!(place(&c, &wrong_value), None);
}

#[test]
fn node_selector_and_required_affinity() {
    let c = cluster(
        vec![node("a", "z1", 4000, 0), node("b", "z2", 4000, 0)],
        vec![],
    );
    assert_eq!(
        place(&c, &pod("p").select(labels::ZONE, "z2").build()),
        Some(1)
    );
    assert_eq!(
        place(&c, &pod("p").select(labels::ZONE, "z9").build()),
        None
    );
    let p = pod("p")
        .require(labels::ZONE, autoscaler_core::Operator::NotIn, &["z1"])
        .build();
    assert_eq!(place(&c, &p), Some(1));
}

#[test]
fn cordoned_deleting_and_unregistered_nodes_are_skipped() {
    let mut a = node("a", "z1", 4000, 0);
    a.cordoned = true;
    let mut b = node("b", "z1", 4000, 0);
    b.deleting = true;
    let mut d = node("d", "z1", 4000, 0);
    d.phase = NodePhase::Launching;
    let c = cluster(vec![a, b, d], vec![]);
    assert_eq!(place(&c, &pod("p").build()), None);
    assert_eq!(
        filter(&pod("p").build(), &c.nodes[0], None),
        Err(Unfit::Unschedulable)
    );
}

#[test]
fn topology_spread_do_not_schedule() {
    let web = |n: &str| {
        pod(n)
            .label("app", "web")
            .spread(labels::ZONE, 1, "web")
            .build()
    };
    let c = cluster(
        vec![node("a", "z1", 8000, 0), node("b", "z2", 8000, 0)],
        vec![(web("w0"), 0)],
    );
    // z1 has one, z2 none: another in z1 would make the skew 2.
    let p = web("w1");
    let topo = Topology::of(View::of(&c), &p);
    assert!(matches!(
        filter(&p, &c.nodes[0], Some(&topo)),
        Err(Unfit::Spread(_))
    ));
    assert!(filter(&p, &c.nodes[1], Some(&topo)).is_ok());
    assert_eq!(place(&c, &p), Some(1));
    // A node without the topology label cannot take the pod.
    let mut bare = node("c", "z3", 8000, 0);
    std::sync::Arc::make_mut(&mut bare.labels).remove(labels::ZONE);
    assert!(matches!(
        filter(&p, &bare, Some(&topo)),
        Err(Unfit::Spread(_))
    ));
}

#[test]
fn topology_kept_across_binds_is_the_one_computed_afresh() {
    // A scheduling pass keeps each template's topology and takes in every pod it binds;
    // after each bind it must be what a walk over the whole cluster finds.
    let p = pod("p")
        .label("app", "web")
        .spread(labels::ZONE, 1, "web")
        .spread("rack", 2, "web")
        .affinity(labels::ZONE, "cache")
        .anti_affinity(labels::HOSTNAME, "batch")
        .select("tier", "front")
        .build();
    let mut nodes = vec![
        node("a", "z1", 8000, 0),
        node("b", "z2", 8000, 0),
        node("c", "z2", 8000, 0),
    ];
    for (n, (rack, tier)) in
        nodes
            .iter_mut()
            .zip([("r1", "front"), ("r2", "front"), ("r1", "back")])
    {
        let l = std::sync::Arc::make_mut(&mut n.labels);
        l.insert("rack".into(), rack.into());
        l.insert("tier".into(), tier.into());
    }
    let binds = [
        (pod("w0").label("app", "web").build(), 0),
        (pod("c0").label("app", "cache").build(), 1),
        (pod("w1").label("app", "web").build(), 2),
        (pod("b0").label("app", "batch").build(), 1),
        (
            pod("x0")
                .label("app", "other")
                .anti_affinity("rack", "web")
                .build(),
            2,
        ),
        (pod("w2").label("app", "web").build(), 1),
    ];
    let start = cluster(nodes.clone(), vec![]);
    let mut kept = Topology::of(View::of(&start), &p);
    for k in 1..=binds.len() {
        let c = cluster(nodes.clone(), binds[..k].to_vec());
        let (bound, n) = &binds[k - 1];
        kept.add_bound(&p, &c.nodes[*n], bound);
        assert_eq!(kept, Topology::of(View::of(&c), &p), "after {k} binds");
    }
    assert!(!kept.forbidden.is_empty() && kept.affinity[0].1);
}

#[test]
fn pod_affinity_and_anti_affinity() {
    let cache = pod("cache").label("app", "cache").build();
    let c = cluster(
        vec![node("a", "z1", 8000, 0), node("b", "z2", 8000, 0)],
        vec![(cache, 1)],
    );
    // Affinity to the cache's zone.
    let near = pod("near").affinity(labels::ZONE, "cache").build();
    assert_eq!(place(&c, &near), Some(1));
    // Anti-affinity to the cache's host.
    let far = pod("far").anti_affinity(labels::HOSTNAME, "cache").build();
    assert_eq!(place(&c, &far), Some(0));
    // The first pod of an affinity group may go anywhere when it matches its own term.
    let first = pod("first")
        .label("app", "solo")
        .affinity(labels::ZONE, "solo")
        .build();
    assert!(place(&c, &first).is_some());
    // Symmetry: an existing pod's anti-affinity keeps matching pods off its host.
    let loner = pod("loner")
        .label("app", "loner")
        .anti_affinity(labels::HOSTNAME, "web")
        .build();
    let c = cluster(vec![node("a", "z1", 8000, 0)], vec![(loner, 0)]);
    assert_eq!(place(&c, &pod("w").label("app", "web").build()), None);
    assert_eq!(place(&c, &pod("x").label("app", "other").build()), Some(0));
}

#[test]
fn least_and_most_allocated_scores() {
    let c = cluster(
        vec![node("a", "z1", 8000, 0), node("b", "z1", 8000, 0)],
        vec![(pod("x").cpu("4").build(), 0)],
    );
    let p = pod("p").cpu("1").build();
    let nodes = [0, 1];
    let least = best_node(View::of(&c), &p, &nodes, ScoreStrategy::LeastAllocated);
    let most = best_node(View::of(&c), &p, &nodes, ScoreStrategy::MostAllocated);
    assert_eq!(least.map(|x| x.0), Some(1));
    assert_eq!(most.map(|x| x.0), Some(0));
}

#[test]
fn can_move_answers_the_scale_down_question() {
    let c = cluster(
        vec![node("a", "z1", 4000, 0), node("b", "z1", 4000, 0)],
        vec![
            (pod("x").cpu("1").build(), 0),
            (pod("y").cpu("2").build(), 1),
        ],
    );
    assert!(can_move(
        &c,
        &[0],
        &[1],
        ScoreStrategy::LeastAllocated,
        &mut SelectorCache::default()
    ));
    let c = cluster(
        vec![node("a", "z1", 4000, 0), node("b", "z1", 4000, 0)],
        vec![
            (pod("x").cpu("3").build(), 0),
            (pod("y").cpu("2").build(), 1),
        ],
    );
    assert!(!can_move(
        &c,
        &[0],
        &[1],
        ScoreStrategy::LeastAllocated,
        &mut SelectorCache::default()
    ));
}
