//! Scenarios that start with existing nodes and their pods (`existingNodes`, the path
//! `simulate --from-snapshot` takes too): the run starts from them, their pods leave when
//! told, and only nodes of a NodePool are ever removed.

use std::path::Path;

use autoscaler_sim::workload::generate;
use autoscaler_sim::{RunOptions, Scenario, initial_state, run};

const SCENARIO: &str = "\
duration: 2h
catalog: aws
policies: [gpu-autoscaler]
pools:
  - name: cpu
    instanceTypes: [m5.xlarge]
    capacityTypes: [on-demand]
    disruption: {consolidateAfter: 0s, unneededTime: 1m}
existingNodes:
  - name: old-a
    nodePool: cpu
    instanceType: m5.xlarge
    zone: us-east-1b
    pods:
      - {name: web, count: 2, deleteAt: 10m, pod: {cpu: 1, memory: 1Gi}}
      - {name: pinned, pod: {cpu: 500m, doNotDisrupt: true}}
  - name: system
    instanceType: m5.large
    labels: {role: system}
    pods:
      - {name: dns, deleteAt: 5m, pod: {cpu: 100m}}
";

fn scenario(text: &str) -> Scenario {
    Scenario::parse(Path::new("existing.yaml"), text).unwrap()
}

#[test]
fn a_run_starts_with_the_existing_nodes_and_their_pods_bound() {
    let s = scenario(SCENARIO);
    let w = generate(&s, 1, s.duration_s, 1000).unwrap();
    let snap = initial_state(&s, &w);
    let nodes: Vec<(&str, Option<&str>, Vec<&str>)> = snap
        .nodes
        .iter()
        .map(|n| {
            (
                n.name.as_str(),
                n.pool.as_deref(),
                n.pods.iter().map(|p| p.key.name.as_str()).collect(),
            )
        })
        .collect();
    assert_eq!(
        nodes,
        [
            ("old-a", Some("cpu"), vec!["web-0", "web-1", "pinned"]),
            ("system", None, vec!["dns"]),
        ]
    );
    let old = &snap.nodes[0];
    assert_eq!(old.labels["topology.kubernetes.io/zone"], "us-east-1b");
    assert_eq!(old.labels["gpu-autoscaler.dev/nodepool"], "cpu");
    assert!(old.initialized);
    assert_eq!(snap.nodes[1].labels["role"], "system");
    assert!(snap.pending.is_empty());
}

#[test]
fn existing_pods_leave_when_told_and_only_pool_nodes_are_removed() {
    // Without the pinned pod, old-a empties at 10 minutes and is removed; the unmanaged
    // node empties at 5 minutes and stays.
    let s = scenario(&SCENARIO.replace(
        "      - {name: pinned, pod: {cpu: 500m, doNotDisrupt: true}}\n",
        "",
    ));
    let r = run(&s, &RunOptions::default(), &|_, _| {}).unwrap();
    let ours = &r.policies[0];
    assert_eq!(ours.nodes_terminated, 1, "{ours:?}");
    assert_eq!(ours.nodes_launched, 0);
    assert_eq!(ours.pods_created, 3);
    assert_eq!(ours.safety_violations, 0, "{:?}", ours.violation_examples);
    // The pinned pod keeps old-a for the whole run.
    let kept = run(&scenario(SCENARIO), &RunOptions::default(), &|_, _| {}).unwrap();
    assert_eq!(kept.policies[0].nodes_terminated, 0);
    assert!(kept.policies[0].cost > ours.cost);
}

#[test]
fn bad_existing_nodes_name_the_field() {
    for (from, to, says) in [
        (
            "instanceType: m5.large",
            "instanceType: m9.huge",
            "existingNodes[1].instanceType",
        ),
        (
            "nodePool: cpu\n",
            "nodePool: gpu\n",
            "unknown NodePool \"gpu\"",
        ),
        (
            "zone: us-east-1b",
            "zone: mars-1a",
            "no on-demand offering in zone mars-1a",
        ),
        ("name: system", "name: old-a", "node old-a is listed twice"),
        // Spot, in an on-demand-only NodePool: drifted by requirements, which is not simulated.
        (
            "zone: us-east-1b",
            "zone: us-east-1b\n    capacityType: spot",
            "drifted (RequirementsDrifted): label karpenter.sh/capacity-type=spot",
        ),
        (
            "deleteAt: 5m",
            "deleteAt: -5m",
            "existingNodes[1].pods[0].deleteAt",
        ),
    ] {
        let text = SCENARIO.replacen(from, to, 1);
        let e = Scenario::parse(Path::new("bad.yaml"), &text)
            .unwrap_err()
            .to_string();
        assert!(e.contains(says), "{to}: {e}");
    }
}
