//! Small versions of every suite: the report has the promised shape and every pod is placed.
//! These are tests, not timings: nothing here asserts on seconds.

use autoscaler_sim::traces::openb::{NodeRecord, PodRecord};

use super::*;

/// The fields every case of the JSON carries, null where they do not apply.
const FIELDS: [&str; 12] = [
    "name",
    "pods",
    "instance_types",
    "seconds",
    "pods_per_sec",
    "nodes",
    "cost_per_hour",
    "lp_lower_bound",
    "cost_ratio",
    "gpus_requested",
    "gpus_provisioned",
    "gpu_allocation",
];

fn check_report(suite: &str, results: Vec<CaseResult>, gpus: bool) -> serde_json::Value {
    let report = Report {
        suite: suite.into(),
        notes: None,
        cases: results,
    };
    let v = serde_json::to_value(&report).unwrap();
    assert_eq!(v["suite"], suite);
    let cases = v["cases"].as_array().unwrap();
    assert!(!cases.is_empty());
    for c in cases {
        for f in FIELDS {
            assert!(c.get(f).is_some(), "missing {f} in {c}");
        }
        assert!(c["lp_lower_bound"].as_f64().unwrap() > 0.0, "{c}");
        // The bound is a bound.
        assert!(c["cost_ratio"].as_f64().unwrap() >= 1.0 - 1e-9, "{c}");
        assert_eq!(c["gpus_requested"].is_null(), !gpus, "{c}");
        assert_eq!(c["gpu_allocation"].is_null(), !gpus, "{c}");
    }
    v
}

#[test]
fn karpenter_suite_small() {
    let cases = karpenter_cases(&[200]);
    let (r, _) = measure(&cases[0], 1, false, 1);
    assert_eq!(r.pods, 200);
    assert_eq!(r.instance_types, karpenter::TYPES);
    assert_eq!(r.unschedulable, 0, "every pod placed");
    assert!(r.nodes > 0);
    check_report("karpenter", vec![r], false);
}

#[test]
fn karpenter_generator_is_seeded_and_balanced() {
    let a = karpenter::snapshot(1003, karpenter::SEED);
    let b = karpenter::snapshot(1003, karpenter::SEED);
    assert_eq!(a, b);
    assert_eq!(a.pending.len(), 1003);
    let kinds: Vec<usize> = [
        "unconstrained",
        "zone-spread",
        "host-spread",
        "zone-affinity",
        "host-anti-affinity",
    ]
    .iter()
    .map(|k| {
        a.pending
            .iter()
            .filter(|p| p.key.name.starts_with(&format!("{k}-")))
            .count()
    })
    .collect();
    assert_eq!(kinds, vec![201, 201, 201, 200, 200]);
    let it = &a.pools[0].instance_types;
    assert_eq!(it.len(), 400);
    assert_eq!(it[399].capacity.cpu, 400_000);
    assert_eq!(it[399].capacity.pods, 4000);
}

#[test]
fn gpu_mix_suite_small() {
    let cases = gpu_mix_cases(200);
    let (r, _) = measure(&cases[0], 1, true, 1);
    assert_eq!(r.pods, 200);
    assert_eq!(r.unschedulable, 0, "every pod placed");
    assert!(r.gpus_provisioned.unwrap() > 0);
    let alloc = r.gpu_allocation.unwrap();
    assert!(alloc > 0.0 && alloc <= 1.0 + 1e-9, "{alloc}");
    check_report("gpu-mix", vec![r], true);
}

#[test]
fn volumes_suite_small_keeps_every_node_within_its_attach_count() {
    let cases = volumes_cases(1500);
    let snap = &cases[0].snapshot;
    let (r, plan) = measure(&cases[0], 1, false, 1);
    assert_eq!(r.pods, 1500);
    assert_eq!(r.unschedulable, 0, "every pod placed");
    // Each pod attaches one volume of its own: a new node holds at most the count, an
    // existing one at most the room its attached volumes leave.
    for c in &plan.new_claims {
        assert!(c.pods.len() <= volumes::COUNT as usize, "{}", c.pods.len());
    }
    let mut on: HashMap<&str, usize> = HashMap::new();
    for p in &plan.existing {
        *on.entry(p.target.as_str()).or_default() += 1;
    }
    // The smallest nodes are full by cpu; the others take the room exactly.
    let room = volumes::COUNT as usize - volumes::ATTACHED;
    assert!(on.values().all(|n| *n <= room), "{on:?}");
    assert!(
        on.values().filter(|n| **n == room).count() * 2 > snap.nodes.len(),
        "{on:?}"
    );
    check_report("volumes", vec![r], false);
}

#[test]
fn gpu_mix_on_two_threads_is_planned_in_parts_to_the_same_plan() {
    let cases = gpu_mix_cases(3000);
    let (one, plan_one) = measure(&cases[0], 1, true, 1);
    let (two, plan_two) = measure(&cases[0], 1, true, 2);
    assert!(one.parts.is_empty());
    // CPU, whole GPUs, MIG, time-slicing and shares use NodePools of their own.
    assert_eq!(two.parts.len(), 5, "{:?}", two.parts);
    assert_eq!(two.parts.iter().sum::<usize>(), 3000);
    assert_eq!(two.threads, 2);
    assert!(plan_one == plan_two, "the plans differ");
    assert_eq!(
        (one.nodes, one.cost_per_hour),
        (two.nodes, two.cost_per_hour)
    );
}

fn node(name: &str, cpu: u64, mem_gib: u64, gpus: u32, model: &str) -> NodeRecord {
    NodeRecord {
        name: name.into(),
        cpu_milli: cpu * 1000,
        memory_mib: mem_gib * 1024,
        gpus,
        model: (!model.is_empty()).then(|| model.to_string()),
    }
}

fn trace_pod(i: usize, cpu_milli: u64, num_gpu: u32, gpu_milli: u32, spec: &[&str]) -> PodRecord {
    PodRecord {
        line: 0,
        name: format!("openb-pod-{i:04}"),
        cpu_milli,
        memory_mib: 4096,
        num_gpu,
        gpu_milli,
        gpu_spec: spec.iter().map(|s| s.to_string()).collect(),
        qos: "LS".into(),
        pod_phase: "Running".into(),
        creation_time: 0,
        deletion_time: None,
        scheduled_time: Some(0),
    }
}

#[test]
fn openb_suite_small() {
    let nodes = vec![
        node("n0", 32, 256, 0, ""),
        node("n1", 32, 256, 0, ""),
        node("n2", 96, 384, 8, "G2"),
        node("n3", 104, 512, 2, "T4"),
        node("n4", 32, 128, 4, "V100M16"),
    ];
    let pods: Vec<PodRecord> = (0..200)
        .map(|i| match i % 5 {
            0 => trace_pod(i, 4000, 0, 0, &[]),
            1 => trace_pod(i, 6000, 1, 460, &[]),
            2 => trace_pod(i, 8000, 1, 1000, &["T4"]),
            3 => trace_pod(i, 12000, 2, 1000, &["V100M16", "G2"]),
            _ => trace_pod(i, 2000, 1, 250, &[]),
        })
        .collect();
    let snap = openb::snapshot(&nodes, &pods);
    // Five nodes, four distinct shapes.
    assert_eq!(snap.pools[0].instance_types.len(), 4);
    let case = Case {
        name: "small".into(),
        snapshot: snap,
    };
    let (r, _) = measure(&case, 1, true, 1);
    assert_eq!(r.unschedulable, 0, "every pod placed");
    // 40 x 0.46 + 40 x 1 + 40 x 2 + 40 x 0.25 GPUs.
    assert!((r.gpus_requested.unwrap() - 148.4).abs() < 1e-9, "{r:?}");
    check_report("openb", vec![r], true);
}

#[test]
fn openb_pods_map_shares_whole_gpus_and_specs() {
    let share = openb::to_pod(&trace_pod(1, 6000, 1, 460, &["V100M16", "V100M32"]));
    assert_eq!(share.gpu_share.as_ref().map(|s| s.milli), Some(460));
    assert_eq!(share.requests.get("nvidia.com/gpu"), 0);
    assert_eq!(
        share.node_selector.terms[0].to_string(),
        "gpu-autoscaler.dev/instance-gpu-name In [v100m16,v100m32]"
    );
    let whole = openb::to_pod(&trace_pod(2, 6000, 4, 1000, &[]));
    assert_eq!(whole.requests.get("nvidia.com/gpu"), 4);
    assert!(whole.gpu_share.is_none());
}

#[test]
fn missing_trace_is_a_clear_error() {
    let dir = std::env::temp_dir().join("gpu-autoscaler-bench-no-data");
    let e = find_data_dir(Some(&dir)).unwrap_err().to_string();
    assert!(e.contains("openb trace is not available"), "{e}");
    assert!(e.contains("--data-dir"), "{e}");
}

#[test]
fn breakdown_names_each_pool_with_its_bound() {
    let cases = karpenter_cases(&[100]);
    let (_, plan) = measure(&cases[0], 1, false, 1);
    let text = breakdown(&cases[0].snapshot, &plan);
    assert!(text.starts_with("  pool default: "), "{text}");
    assert!(text.contains("LP $"), "{text}");
    assert!(text.contains("fake-it-"), "{text}");
}

#[test]
fn share_waste_bound_counts_residuals_nothing_small_can_fill() {
    // Two 810s leave 0.38 GPU that one 160 share partly fills.
    assert!((share_waste_bound(&[810, 810, 160]) - 0.22).abs() < 1e-12);
    // 700 + 300 fill a device exactly; shares at most 500 alone leave nothing provable.
    assert_eq!(share_waste_bound(&[700, 300]), 0.0);
    assert_eq!(share_waste_bound(&[500, 250, 100]), 0.0);
    assert_eq!(share_waste_bound(&[]), 0.0);
    // 650 leaves 350, 810 leaves 190: R = 190 gives 0.19 - 0.1, R = 350 gives 0.54 - 0.4.
    assert!((share_waste_bound(&[810, 650, 100, 300]) - 0.14).abs() < 1e-12);
}

#[test]
fn share_idle_bound_takes_the_stronger_of_its_two_bounds() {
    // Seven shares of 340 (two to a device) need four devices: 4 - 2.38 idle, where the
    // residual argument proves nothing (no share above half a device).
    assert_eq!(share_waste_bound(&[340; 7]), 0.0);
    assert!((share_idle_bound(&[340; 7]) - 1.62).abs() < 1e-9);
    // Where the residual argument is the whole story the two agree.
    assert!((share_idle_bound(&[810, 810, 160]) - 0.22).abs() < 1e-9);
    assert_eq!(share_idle_bound(&[700, 300]), 0.0);
    assert_eq!(share_idle_bound(&[]), 0.0);
}

#[test]
fn small_exact_prints_the_ratio_distribution() {
    let d = small_exact::distribution(60);
    assert!(d.solvable > 0 && d.solvable <= 60);
    assert!(d.optimal <= d.solvable);
    // Counts above a threshold shrink as the threshold grows, and every ratio is at least 1
    // (no plan can beat the optimum).
    assert!(d.above.windows(2).all(|w| w[0].1 >= w[1].1));
    assert!(d.percentiles.iter().all(|(_, r)| *r >= 1.0 - 1e-9));
    let text = small_exact::render(&d);
    assert!(text.contains("optimal") && text.contains("p95") && text.contains("worst: seed"));
}

#[test]
fn karpenter_exact_generator_follows_upstream() {
    let a = karpenter_exact::snapshot(1003, karpenter_exact::SEED);
    assert_eq!(a, karpenter_exact::snapshot(1003, karpenter_exact::SEED));
    assert_ne!(a, karpenter_exact::snapshot(1003, 7), "the seed matters");
    assert_eq!(a.pending.len(), 1003);
    // 1003 / 6 = 167 of each kind, the remaining 1 a plain pod.
    let count = |prefix: &str| {
        a.pending
            .iter()
            .filter(|p| p.key.name.starts_with(prefix))
            .count()
    };
    for k in karpenter_exact::KINDS {
        let extra = usize::from(k == "plain");
        assert_eq!(count(&format!("{k}-")), 167 + extra, "{k}");
    }
    // Sizes are drawn per pod, not per group: many distinct sizes within one kind.
    let sizes: BTreeSet<(i64, i64)> = a
        .pending
        .iter()
        .filter(|p| p.key.name.starts_with("host-anti-affinity-"))
        .map(|p| (p.requests.cpu, p.requests.memory))
        .collect();
    assert!(sizes.len() > 20, "{}", sizes.len());
    // Spread selectors are drawn apart from the pod's own label: they often differ.
    let differ = a
        .pending
        .iter()
        .filter(|p| p.key.name.starts_with("zone-spread-"))
        .filter(|p| !p.spread[0].selector.matches(&p.labels))
        .count();
    assert!(differ > 100 && differ < 167, "{differ}");
    // Every anti-affinity pod is app=nginx and repels every app=nginx pod.
    for p in a
        .pending
        .iter()
        .filter(|p| p.key.name.starts_with("host-anti-affinity-"))
    {
        assert_eq!(p.labels.get("app").map(String::as_str), Some("nginx"));
        assert!(p.anti_affinity[0].selector.matches(&p.labels));
    }
    // The fake cloud's types: fake-it-0 is 1 vCPU, 2 GiB, 10 pods at 0.1 + 0.2147... $/h.
    let it = &a.pools[0].instance_types;
    assert_eq!(it.len(), karpenter_exact::TYPES);
    assert_eq!(it[0].name, "fake-it-0");
    assert_eq!(it[399].capacity.cpu, 400_000);
    assert_eq!(it[399].capacity.pods, 4000);
    assert_eq!(it[0].allocatable().cpu, 900);
    assert_eq!(it[0].offerings.len(), 5);
    assert!((it[0].offerings[0].price - 0.314_748_364_8).abs() < 1e-12);
}

#[test]
fn karpenter_exact_small_plans_every_pod_and_prints_the_yardstick() {
    let cases = karpenter_exact_cases(&[300]);
    let (r, _) = measure(&cases[0], 1, false, 1);
    assert_eq!(r.unschedulable, 0, "every pod placed");
    // 50 anti-affine pods: at least 50 nodes, in the plan and in the packing.
    assert!(r.nodes >= 50, "{}", r.nodes);
    let f = yardstick_of(&cases[0].snapshot, r.cost_per_hour);
    assert_eq!(f.unplaced, 0);
    assert!(f.nodes >= 50, "{}", f.nodes);
    assert!(
        f.cost_per_hour >= r.lp_lower_bound.unwrap() - 1e-9,
        "{f:?} {r:?}"
    );
    assert!((f.plan_over_ffd - r.cost_per_hour / f.cost_per_hour).abs() < 1e-12);
    let mut r = r;
    r.ffd = Some(f);
    let v = check_report("karpenter-exact", vec![r], false);
    assert!(v["cases"][0]["ffd"]["plan_over_ffd"].as_f64().is_some());
}

#[test]
fn ca_fastpath_packs_as_upstream_counts() {
    // Scaled down: 10 large pods fill one node with one small pod beside them, the other 489
    // small pods go twenty to a node: 1 + 25 nodes at $1.
    let case = Case {
        name: "small".into(),
        snapshot: ca_fastpath::snapshot(500, 10),
    };
    let (r, _) = measure(&case, 1, false, 1);
    assert_eq!(r.unschedulable, 0);
    assert_eq!(r.nodes, 26);
    let f = ffd::pack(&case.snapshot);
    assert_eq!(
        f,
        ffd::Packing {
            nodes: 26,
            cost_per_hour: 26.0,
            unplaced: 0
        }
    );
    assert_eq!(ca_fastpath_cases()[0].snapshot.pending.len(), 51_000);
}

#[test]
fn suite_sizes_are_chosen_or_refused() {
    assert_eq!(sizes(&[1, 2], None).unwrap(), vec![1, 2]);
    assert_eq!(sizes(&[1, 2], Some(2)).unwrap(), vec![2]);
    let e = sizes(&[1, 2], Some(3)).unwrap_err().to_string();
    assert!(e.contains("--pods 3") && e.contains("[1, 2]"), "{e}");
}

mod ffd_packing {
    use autoscaler_core::builders::{itype, pod, pool};
    use autoscaler_core::instance::CapacityType;
    use autoscaler_core::labels;
    use autoscaler_core::model::{PodAffinityTerm, Snapshot, TopologySpread};
    use autoscaler_core::requirements::{Operator, Requirements};

    use crate::bench::ffd::{Packing, pack};

    /// Types of 1, 2 and 4 cpu (2 GiB per cpu) at 1 $/cpu-hour in zone a, 2 in b, 3 in c.
    fn snap(pods: Vec<autoscaler_core::model::Pod>) -> Snapshot {
        let types = [1, 2, 4]
            .iter()
            .map(|n| {
                let mut b = itype(&format!("t{n}"))
                    .cpu(&n.to_string())
                    .mem(&format!("{}Gi", 2 * n));
                for (z, p) in [("a", 1.0), ("b", 2.0), ("c", 3.0)] {
                    b = b.offer(z, CapacityType::OnDemand, p * f64::from(*n));
                }
                b.build()
            })
            .collect();
        Snapshot {
            pending: pods,
            pools: vec![pool("p", types).build()],
            ..Snapshot::default()
        }
    }

    fn sel(k: &str, v: &str) -> Requirements {
        Requirements::new().with(k, Operator::In, &[v])
    }

    #[test]
    fn packs_first_fit_decreasing_then_shrinks_each_node() {
        // 3 + 1 + 0.5 + 0.5 cpu: one 4-cpu node holds 3 + 1, a second the halves (1 cpu).
        let pods = vec![
            pod("x").cpu("500m").build(),
            pod("big").cpu("3").build(),
            pod("y").cpu("500m").build(),
            pod("one").cpu("1").build(),
        ];
        assert_eq!(
            pack(&snap(pods)),
            Packing {
                nodes: 2,
                cost_per_hour: 5.0,
                unplaced: 0
            }
        );
    }

    #[test]
    fn anti_affinity_keeps_pods_apart_both_ways() {
        let mut repel = pod("r").cpu("1").label("app", "web").build();
        repel.anti_affinity.push(PodAffinityTerm {
            held: false,
            topology_key: labels::HOSTNAME.into(),
            selector: sel("app", "web"),
            namespaces: Default::default(),
        });
        // The plain web pods carry no term, but the placed pod's term repels them.
        let pods = vec![
            repel,
            pod("w1").cpu("500m").label("app", "web").build(),
            pod("w2").cpu("500m").label("app", "web").build(),
        ];
        let p = pack(&snap(pods));
        assert_eq!(p.nodes, 2);
        assert_eq!(p.cost_per_hour, 2.0);
    }

    #[test]
    fn zone_spread_opens_nodes_in_every_zone() {
        let pods = (0..3)
            .map(|i| {
                let mut p = pod(&format!("s{i}")).cpu("4").label("app", "s").build();
                p.spread.push(TopologySpread {
                    max_skew: 1,
                    topology_key: labels::ZONE.into(),
                    selector: sel("app", "s"),
                    hard: true,
                    min_domains: 0,
                    honor_taints: false,
                    ignore_node_affinity: false,
                });
                p
            })
            .collect();
        // One 4-cpu node per zone: 4 + 8 + 12.
        assert_eq!(pack(&snap(pods)).cost_per_hour, 24.0);
    }

    #[test]
    fn affinity_waits_for_its_target_and_joins_it() {
        // The larger pod wants to be near `db`, which comes later in size order: the second
        // pass puts it on the db's node.
        let mut near = pod("near").cpu("2").build();
        near.affinity.push(PodAffinityTerm {
            held: false,
            topology_key: labels::HOSTNAME.into(),
            selector: sel("app", "db"),
            namespaces: Default::default(),
        });
        let pods = vec![near, pod("db").cpu("1").label("app", "db").build()];
        assert_eq!(
            pack(&snap(pods)),
            Packing {
                nodes: 1,
                cost_per_hour: 4.0,
                unplaced: 0
            }
        );
        // A pod whose affinity nothing can ever satisfy stays unplaced.
        let mut lonely = pod("lonely").cpu("1").build();
        lonely.affinity.push(PodAffinityTerm {
            held: false,
            topology_key: labels::ZONE.into(),
            selector: sel("app", "nobody"),
            namespaces: Default::default(),
        });
        assert_eq!(pack(&snap(vec![lonely])).unplaced, 1);
    }
}
