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
    let (r, _) = measure(&cases[0], 1, false);
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
    let (r, _) = measure(&cases[0], 1, true);
    assert_eq!(r.pods, 200);
    assert_eq!(r.unschedulable, 0, "every pod placed");
    assert!(r.gpus_provisioned.unwrap() > 0);
    let alloc = r.gpu_allocation.unwrap();
    assert!(alloc > 0.0 && alloc <= 1.0 + 1e-9, "{alloc}");
    check_report("gpu-mix", vec![r], true);
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
    let (r, _) = measure(&case, 1, true);
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
    let (_, plan) = measure(&cases[0], 1, false);
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
