//! Cluster-wide limits and atomic NodePools in the simulator: the scenario keys bound the
//! project's policy as the controller's flags and CapacityQuota objects do.

use std::path::Path;

use autoscaler_sim::{RunOptions, Scenario, report, run};

const BASE: &str = "\
name: limits
seed: 3
duration: 2h
catalog: aws
cluster:
  CLUSTER
pools:
  - name: gpu
    instanceTypes: [g5.xlarge]
    capacityTypes: [on-demand]
    labels: {team: ml}
    POOL
    disruption: {consolidateAfter: 1m, unneededTime: 2m}
workloads:
  - deployment:
      name: infer
      replicas: [{at: 0s, count: 4}]
      pod: {nodePool: gpu, cpu: 1, memory: 2Gi, gpus: 1}
";

/// The project's policy on the base scenario with `cluster` and `pool` keys filled in:
/// (nodes launched, pods pending at the end).
fn ours(cluster: &str, pool: &str) -> (u64, u64) {
    let text = BASE
        .replace("CLUSTER", if cluster.is_empty() { "{}" } else { cluster })
        .replace(
            "    POOL\n",
            &if pool.is_empty() {
                String::new()
            } else {
                format!("    {pool}\n")
            },
        )
        .replace("cluster:\n  {}", "cluster: {}");
    let s = Scenario::parse(Path::new("limits.yaml"), &text).unwrap();
    let opts = RunOptions {
        policies: Some(vec!["gpu-autoscaler".into()]),
        ..Default::default()
    };
    let r = run(&s, &opts, &|_, _| {}).unwrap();
    let p = &r.policies[0];
    assert_eq!(p.safety_violations, 0, "{}", report::summary(&r));
    (p.nodes_launched as u64, p.pending_at_end as u64)
}

#[test]
fn totals_and_quotas_bound_the_simulated_cluster() {
    assert_eq!(ours("", ""), (4, 0), "unbounded: one node per pod");
    assert_eq!(ours("gpuTotal: [\"A10G:0:2\"]", ""), (2, 2));
    assert_eq!(ours("maxNodesTotal: 3", ""), (3, 1));
    assert_eq!(ours("coresTotal: \"0:8\"", ""), (2, 2));
    assert_eq!(
        ours(
            "capacityQuotas: [{name: ml, matchLabels: {team: ml}, limits: {nvidia.com/gpu: 1}}]",
            ""
        ),
        (1, 3)
    );
    // A quota on other nodes holds nothing back.
    assert_eq!(
        ours(
            "capacityQuotas: [{name: web, matchLabels: {team: web}, limits: {nodes: 0}}]",
            ""
        ),
        (4, 0)
    );
}

#[test]
fn an_atomic_pool_launches_its_whole_size_or_nothing() {
    // Four pods, six nodes at once: two stay empty until the pool is removed whole.
    assert_eq!(ours("", "atomicScaleUp: {nodes: 6}"), (6, 0));
    // A limit below the pool's size: nothing at all.
    assert_eq!(
        ours("maxNodesTotal: 5", "atomicScaleUp: {nodes: 6}"),
        (0, 4)
    );
}

#[test]
fn bad_limit_keys_name_the_field() {
    for (cluster, field) in [
        ("coresTotal: \"9:8\"", "cluster.coresTotal"),
        ("gpuTotal: [\"A10G\"]", "cluster.gpuTotal[0]"),
        (
            "capacityQuotas: [{name: q, limits: {}}]",
            "cluster.capacityQuotas[0].limits",
        ),
    ] {
        let text = BASE.replace("CLUSTER", cluster).replace("    POOL\n", "");
        let e = match Scenario::parse(Path::new("bad.yaml"), &text) {
            Ok(_) => panic!("{cluster}: accepted"),
            Err(e) => e.to_string(),
        };
        assert!(e.contains(field), "{cluster}: {e}");
    }
}
