//! Warm capacity in the simulator (`cluster.enforceNodeGroupMinSize`, the controller's
//! `--enforce-node-group-min-size`): gpu-autoscaler and the Cluster Autoscaler models keep a
//! pool's `minNodes` up from the start and a job lands on a warm node without a launch; the
//! Karpenter models have no such setting and launch for the job.

use std::path::Path;

use autoscaler_sim::{RunOptions, Scenario, run, sweep};

mod support;
use support::{named, results};

const POLICIES: &str = "gpu-autoscaler, ca-like, ca-ideal, karpenter-like";

fn scenario(enforce: bool) -> Scenario {
    let yaml = format!(
        "name: warm\nseed: 5\nduration: 2h\ncatalog: aws\npolicies: [{POLICIES}]\n\
         cluster:\n  launch: {{cpu: 45s, gpu: 120s}}\n  enforceNodeGroupMinSize: {enforce}\n\
         pools:\n  - name: gpu\n    instanceTypes: [g6.xlarge, g6.12xlarge]\n\
         \x20   capacityTypes: [on-demand]\n    taints: [{{key: nvidia.com/gpu, value: present}}]\n\
         \x20   minNodes: 2\n    disruption: {{consolidateAfter: 1m}}\n\
         workloads:\n  - jobs:\n      name: train\n      arrivals: {{at: [30m]}}\n\
         \x20     duration: {{fixed: 10m}}\n      pod: {{nodePool: gpu, cpu: 1, memory: 4Gi, gpus: 1}}\n"
    );
    Scenario::parse(Path::new("warm.yaml"), &yaml).unwrap()
}

#[test]
fn warm_nodes_are_kept_from_the_start_and_take_the_job_without_a_launch() {
    let (ps, summary) = results(&scenario(true));
    for name in ["gpu-autoscaler", "ca-like", "ca-ideal"] {
        let p = named(&ps, name);
        // Two cheapest nodes at time 0, kept for the two hours; the job waits for no launch.
        assert_eq!(p.nodes_launched, 2, "{name}: {summary}");
        assert_eq!(p.nodes_terminated, 0, "{name}: {summary}");
        assert_eq!(p.pending_at_end, 0, "{name}: {summary}");
        assert!(p.pending_p95_s < 60.0, "{name}: {summary}");
        assert_eq!(p.safety_violations, 0, "{name}: {summary}");
    }
    let ours = named(&ps, "gpu-autoscaler");
    // Karpenter has no minimum to launch to: one node for the job, gone once it is empty.
    let karpenter = named(&ps, "karpenter-like");
    assert_eq!(karpenter.nodes_launched, 1, "{summary}");
    assert!(
        karpenter.pending_p95_s > ours.pending_p95_s + 60.0,
        "{summary}"
    );
    assert!(karpenter.cost < ours.cost, "{summary}");
}

#[test]
fn without_the_setting_min_nodes_launches_nothing_before_the_job() {
    let (ps, summary) = results(&scenario(false));
    for name in ["gpu-autoscaler", "ca-like", "ca-ideal"] {
        let p = named(&ps, name);
        // Only the job's node, kept afterwards: minNodes holds it.
        assert_eq!(p.nodes_launched, 1, "{name}: {summary}");
        assert_eq!(p.nodes_terminated, 0, "{name}: {summary}");
        assert!(p.pending_p95_s > 60.0, "{name}: {summary}");
    }
}

#[test]
fn a_min_nodes_sweep_prices_the_warm_nodes_against_the_wait_they_save() {
    let s = scenario(true);
    let sw = sweep::parse("gpu:min-nodes=0,1", &s).unwrap();
    assert_eq!(sw.current_text(&s), "2");
    let ours = |sc: &Scenario| {
        let opts = RunOptions {
            policies: Some(vec!["gpu-autoscaler".into()]),
            ..Default::default()
        };
        run(sc, &opts, &|_, _| {}).unwrap().policies.remove(0)
    };
    let [none, one] = [0, 1].map(|i| ours(&sw.apply(&s, sw.values[i].1)));
    // No warm node: the job waits for a launch and its node goes once empty; one warm node
    // takes it at once and stays, for the two hours.
    assert_eq!(none.nodes_launched, 1);
    assert_eq!(none.nodes_terminated, 1);
    assert!(none.pending_p95_s > 60.0, "{}", none.pending_p95_s);
    assert_eq!(one.nodes_launched, 1);
    assert_eq!(one.nodes_terminated, 0);
    assert!(one.pending_p95_s < 60.0, "{}", one.pending_p95_s);
    assert!(one.cost > none.cost, "{} against {}", one.cost, none.cost);
    assert!(sweep::parse("gpu:min-nodes=-1", &s).is_err());
    assert!(sweep::parse("gpu:min-nodes=two", &s).is_err());
}
