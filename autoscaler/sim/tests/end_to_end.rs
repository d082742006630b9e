//! End-to-end runs of small scenarios: determinism, safety and that every pod gets bound.

use std::path::Path;

use autoscaler_sim::{RunOptions, Scenario, report, run};

const TINY: &str = "\
name: tiny
seed: 7
duration: 3h
catalog: aws
cluster:
  insufficientCapacity: {probability: 0.05}
  spotInterruptionsPerHour: 0.2
daemonSets:
  - {name: kube-system/agent, cpu: 100m, memory: 100Mi, tolerateAll: true}
pools:
  - name: cpu
    families: [m6i, c6i]
    capacityTypes: [spot, on-demand]
    disruption: {consolidateAfter: 1m, unneededTime: 2m}
  - name: gpu
    families: [g6, g5]
    taints: [{key: nvidia.com/gpu, value: present}]
    timeSlicing: 2
    disruption: {consolidateAfter: 1m, unneededTime: 2m}
workloads:
  - deployment:
      name: web
      replicas: [{at: 0s, count: 4}, {at: 1h, count: 8}, {at: 2h, count: 2}]
      maxUnavailable: 1
      pod: {nodePool: cpu, cpu: 500m, memory: 1Gi, spread: [{topologyKey: topology.kubernetes.io/zone, maxSkew: 1}]}
  - jobs:
      name: batch
      arrivals: {perHour: 20, end: 2h}
      duration: {min: 5m, max: 20m}
      pod: {nodePool: cpu, cpu: 2, memory: 4Gi}
  - jobs:
      name: nb
      arrivals: {every: 20m, end: 2h}
      duration: {fixed: 15m}
      pod: {nodePool: gpu, cpu: 1, memory: 2Gi, gpus: 1, doNotDisrupt: true}
  - gangs:
      name: train
      size: 2
      arrivals: {at: [10m, 70m]}
      duration: {fixed: 20m}
      pod: {nodePool: gpu, cpu: 2, memory: 8Gi, gpus: 1}
";

fn tiny() -> Scenario {
    Scenario::parse(Path::new("tiny.yaml"), TINY).unwrap()
}

/// The JSON without the wall-clock field, which is the only thing allowed to differ.
fn stable_json(r: &autoscaler_sim::RunReport) -> String {
    report::to_json(r)
        .lines()
        .filter(|l| !l.contains("wall_seconds"))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn same_seed_same_json_other_seed_other_run() {
    let s = tiny();
    let a = run(&s, &RunOptions::default(), &mut |_, _| {}).unwrap();
    let b = run(&s, &RunOptions::default(), &mut |_, _| {}).unwrap();
    assert_eq!(stable_json(&a), stable_json(&b));
    let c = run(
        &s,
        &RunOptions {
            seed: Some(8),
            ..Default::default()
        },
        &mut |_, _| {},
    )
    .unwrap();
    assert_ne!(stable_json(&a), stable_json(&c));
}

#[test]
fn tiny_scenario_is_safe_and_binds_every_pod() {
    let r = run(&tiny(), &RunOptions::default(), &mut |_, _| {}).unwrap();
    let summary = report::summary(&r);
    assert_eq!(r.policies.len(), 3, "{summary}");
    for p in &r.policies {
        assert_eq!(p.safety_violations, 0, "{summary}");
        assert_eq!(p.pending_at_end, 0, "{summary}");
        assert!(p.pods_created > 20, "{summary}");
        assert!(p.nodes_launched > 0 && p.cost > 0.0, "{summary}");
        assert!(
            p.gpu_allocation > 0.0 && p.gpu_allocation <= 1.0 + 1e-9,
            "{summary}"
        );
    }
    let json: serde_json::Value = serde_json::from_str(&report::to_json(&r)).unwrap();
    let keys: Vec<&str> = json
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        keys,
        [
            "policies",
            "scenario",
            "seed",
            "virtual_seconds",
            "wall_seconds"
        ]
    );
    let html = report::to_html(&r);
    assert!(html.contains("<svg") && html.contains("is a model"));
}

#[test]
fn default_scenario_runs_on_a_short_horizon() {
    let s = Scenario::default_scenario().unwrap();
    let opts = RunOptions {
        hours: Some(1.5),
        ..Default::default()
    };
    let r = run(&s, &opts, &mut |_, _| {}).unwrap();
    for p in &r.policies {
        assert_eq!(p.safety_violations, 0, "{}", report::summary(&r));
    }
    assert!(r.pods > 10);
}

#[test]
fn sweep_changes_the_knob() {
    let mut s = tiny();
    autoscaler_sim::apply_sweep(&mut s, "consolidate-after", "30m").unwrap();
    assert!(
        s.pools
            .iter()
            .all(|p| p.disruption.consolidate_after_s == 1800)
    );
    assert!(autoscaler_sim::apply_sweep(&mut s, "colour", "1").is_err());
    assert!(autoscaler_sim::apply_sweep(&mut s, "gpu-utilization-threshold", "2").is_err());
}
