//! DRA in the simulator: scenarios whose pods ask for GPUs through resource claims run end to
//! end (planner, launches, the simulated scheduler's own allocation), give the plans of the
//! same workload written with the device plugin, and bad claims are refused naming the field.

use std::path::Path;

use autoscaler_sim::{RunOptions, Scenario, run};

/// One workload, `{POD}` standing for its pod's GPU request.
const SCENARIO: &str = "\
duration: 3h
catalog: aws
policies: [gpu-autoscaler]
cluster:
  launch: {jitter: 0}
pools:
  - name: gpu
    instanceTypes: [g5.xlarge, g5.12xlarge, p4d.24xlarge]
    capacityTypes: [on-demand]
    taints: [{key: nvidia.com/gpu}]
    disruption: {consolidateAfter: 0s, unneededTime: 2m}
workloads:
  - jobs:
      name: train
      arrivals: {every: 5m, start: 0s, end: 1h}
      duration: {fixed: 40m}
      pod:
        cpu: 2
        memory: 8Gi
        tolerations: [{key: nvidia.com/gpu, operator: Exists}]
{POD}
  - deployment:
      name: serve
      replicas: [{at: 0s, count: 3}, {at: 90m, count: 1}]
      pod:
        cpu: 1
        memory: 4Gi
        tolerations: [{key: nvidia.com/gpu, operator: Exists}]
{POD1}
";

const DEVICE_PLUGIN: [&str; 2] = ["        gpus: 2", "        gpus: 1"];

const DRA: [&str; 2] = [
    "        claims:
          - name: gpu
            requests: [{name: gpu, deviceClassName: gpu.nvidia.com, count: 2}]",
    "        claims:
          - name: gpu
            requests: [{name: gpu, deviceClassName: gpu.nvidia.com}]",
];

fn scenario(pods: [&str; 2]) -> String {
    SCENARIO
        .replace("{POD}", pods[0])
        .replace("{POD1}", pods[1])
}

fn parse(text: &str) -> Result<Scenario, String> {
    Scenario::parse(Path::new("dra.yaml"), text).map_err(|e| e.to_string())
}

#[test]
fn claims_run_end_to_end_and_match_the_device_plugin() {
    let mut results = Vec::new();
    for pods in [DEVICE_PLUGIN, DRA] {
        let s = parse(&scenario(pods)).unwrap();
        let r = run(&s, &RunOptions::default(), &|_, _| {}).unwrap();
        let p = r.policies[0].clone();
        assert_eq!(p.safety_violations, 0, "{:?}", p.violation_examples);
        assert_eq!(p.pending_at_end, 0, "{p:?}");
        assert!(p.nodes_launched > 0);
        results.push(p);
    }
    let (dp, dra) = (&results[0], &results[1]);
    assert_eq!(dp.nodes_launched, dra.nodes_launched);
    // The same nodes, within 1 % of the cost: the scheduler scores device-plugin GPUs
    // (LeastAllocated over nvidia.com/gpu) but not DRA devices, as kube-scheduler does, so
    // pods may spread differently and nodes empty at slightly different times.
    assert!(
        (dp.cost - dra.cost).abs() < 0.01 * dp.cost,
        "device plugin ${:.2}, DRA ${:.2}",
        dp.cost,
        dra.cost
    );
    assert!(
        (dp.gpu_hours_requested - dra.gpu_hours_requested).abs() < 1e-6,
        "{} {}",
        dp.gpu_hours_requested,
        dra.gpu_hours_requested
    );
}

#[test]
fn mig_partitions_through_claims_run_end_to_end() {
    let text = "\
duration: 2h
catalog: aws
policies: [gpu-autoscaler]
pools:
  - name: mig
    instanceTypes: [p4d.24xlarge]
    capacityTypes: [on-demand]
    mig: all-1g.5gb
workloads:
  - deployment:
      name: notebooks
      replicas: [{at: 0s, count: 20}]
      pod:
        cpu: 500m
        memory: 2Gi
        claims:
          - name: slice
            requests:
              - name: mig
                deviceClassName: mig.nvidia.com
                selectors: [\"device.attributes['gpu.nvidia.com'].profile == '1g.5gb'\"]
";
    let r = run(&parse(text).unwrap(), &RunOptions::default(), &|_, _| {}).unwrap();
    let p = &r.policies[0];
    assert_eq!(p.safety_violations, 0, "{:?}", p.violation_examples);
    assert_eq!(p.pending_at_end, 0, "{p:?}");
    // 20 partitions of 7 per GPU, 8 GPUs a node: one node.
    assert_eq!(p.nodes_launched, 1, "{p:?}");
}

#[test]
fn a_claim_no_type_can_hold_stays_pending_and_launches_nothing() {
    let text = scenario([
        "        claims:
          - name: gpu
            requests: [{name: gpu, deviceClassName: gpu.nvidia.com, count: 16}]",
        DRA[1],
    ]);
    let r = run(&parse(&text).unwrap(), &RunOptions::default(), &|_, _| {}).unwrap();
    let p = &r.policies[0];
    assert_eq!(p.safety_violations, 0, "{:?}", p.violation_examples);
    // The 16-GPU jobs (12 arrived) wait; the 1-GPU replicas got nodes.
    assert_eq!(p.pending_at_end, 12, "{p:?}");
}

#[test]
fn bad_claims_and_classes_name_the_field() {
    let good = scenario([DRA[0], DRA[1]]);
    parse(&good).unwrap();
    let classes = "deviceClasses:\n  - name: fast\n    selectors: [\"device.attributes['gpu.nvidia.com'].productName == 'NVIDIA A100'\"]\n";
    parse(&format!("{classes}{good}")).unwrap();
    for (from, to, says) in [
        (
            "deviceClassName: gpu.nvidia.com, count: 2",
            "deviceClassName: tpu.example.com",
            "workloads[0].jobs.pod.claims[0].requests[0].deviceClassName: unknown device class \"tpu.example.com\"",
        ),
        (
            "count: 2}",
            "count: 0}",
            "workloads[0].jobs.pod.claims[0].requests[0].count: must be at least 1",
        ),
        (
            "count: 2}",
            "count: 2, allocationMode: Most}",
            "requests[0].allocationMode: unknown mode \"Most\"",
        ),
        (
            "count: 2}",
            "count: 2, selectors: [\"device.attributes[\"]}",
            "workloads[0].jobs.pod.claims[0].requests[0].selectors[0]: CEL expression \"device.attributes[\" does not compile",
        ),
        (
            "count: 2}",
            "count: 2, firstAvailable: [{name: a, deviceClassName: gpu.nvidia.com}]}",
            "requests[0]: needs exactly one of deviceClassName and firstAvailable",
        ),
        (
            "requests: [{name: gpu, deviceClassName: gpu.nvidia.com, count: 2}]",
            "requests: [{name: gpu, deviceClassName: gpu.nvidia.com, count: 2}]\n            constraints: [{matchAttribute: productName}]",
            "claims[0].constraints[0]: attribute \"productName\" must be fully qualified",
        ),
        (
            "requests: [{name: gpu, deviceClassName: gpu.nvidia.com, count: 2}]",
            "requests: [{name: gpu, deviceClassName: gpu.nvidia.com, count: 2}]\n            constraints: [{matchAttribute: gpu.nvidia.com/index, requests: [gpus]}]",
            "claims[0].constraints[0].requests[0]: no request \"gpus\" in this claim",
        ),
        (
            "count: 2}",
            "count: 2, colour: red}",
            "unknown field `colour`",
        ),
    ] {
        assert!(good.contains(from), "{from}");
        let e = parse(&good.replacen(from, to, 1)).unwrap_err();
        assert!(e.contains(says), "{to}:\n{e}");
    }
    let e = parse(&format!(
        "deviceClasses:\n  - name: fast\n    selectors: [\"device.driver ==\"]\n{good}"
    ))
    .unwrap_err();
    assert!(e.contains("deviceClasses[0].selectors[0]"), "{e}");
}

#[test]
fn blank_and_twice_given_names_of_classes_and_claims_name_the_field() {
    let good = scenario([DRA[0], DRA[1]]);
    let class = |name: &str| format!("  - name: {name:?}\n");
    for (classes, says) in [
        (class(" "), "deviceClasses[0].name: must not be empty"),
        (
            format!("{}{}", class("fast"), class("fast")),
            "deviceClasses[1].name: class fast is defined twice",
        ),
    ] {
        let e = parse(&format!("deviceClasses:\n{classes}{good}")).unwrap_err();
        assert!(e.contains(says), "{classes}:\n{e}");
    }
    let claim = "          - name: gpu\n            requests: [{name: gpu, deviceClassName: gpu.nvidia.com, count: 2}]";
    for (to, says) in [
        (
            claim.replacen("name: gpu", "name: \"\"", 1),
            "workloads[0].jobs.pod.claims[0].name: must not be empty",
        ),
        (
            format!("{claim}\n{claim}"),
            "workloads[0].jobs.pod.claims[1].name: claim gpu is named twice",
        ),
    ] {
        assert!(good.contains(claim), "{claim}");
        let e = parse(&good.replacen(claim, &to, 1)).unwrap_err();
        assert!(e.contains(says), "{to}:\n{e}");
    }
}
