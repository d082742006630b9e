//! The simulated controller's skipped disruption passes: the engine asks gpu-autoscaler for a
//! pass only when the cluster changed or a timer the policy names runs out, where the
//! controller runs one every `--disruption-interval`. Skipping must change nothing: each test
//! here runs a scenario both ways (`RunOptions::every_pass`) or checks a quiet cluster's timer.

use std::path::Path;

use autoscaler_sim::{PolicyResult, RunOptions, Scenario, run};

mod support;
use support::{named, results};

/// gpu-autoscaler's result on `s` (seed `seed`, `hours` long), every pass run or not.
fn ours(s: &Scenario, seed: u64, hours: f64, every_pass: bool) -> PolicyResult {
    let opts = RunOptions {
        seed: Some(seed),
        hours: Some(hours),
        policies: Some(vec!["gpu-autoscaler".into()]),
        every_pass,
        ..Default::default()
    };
    run(s, &opts, &|_, _| {}).unwrap().policies.remove(0)
}

/// What a run decided, without its wall time: cost, nodes launched and removed with their
/// times, pods' first binding.
fn decided(p: &PolicyResult) -> String {
    format!(
        "cost {:.6} up {} down {} moved {} nodes {:?} bound {:?}",
        p.cost,
        p.nodes_launched,
        p.nodes_terminated,
        p.pods_disrupted,
        p.node_records,
        p.first_bound
    )
}

#[test]
fn skipping_passes_changes_nothing_on_the_default_day() {
    let s = Scenario::default_scenario().unwrap();
    let skipping = ours(&s, 1, 24.0, false);
    let every = ours(&s, 1, 24.0, true);
    assert_eq!(decided(&skipping), decided(&every));
}

#[test]
fn skipping_passes_changes_nothing_on_the_sharing_and_notebook_scenarios() {
    let load = |file: &str| {
        Scenario::load(
            &Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("scenarios")
                .join(file),
        )
        .unwrap()
    };
    let sharing = load("sharing.yaml");
    assert_eq!(
        decided(&ours(&sharing, 1, 12.0, false)),
        decided(&ours(&sharing, 1, 12.0, true)),
        "sharing"
    );
    // The notebook day goes quiet after its last session: with no warm node, its nodes go
    // only by the timers the policy names.
    let mut notebooks = load("warm-notebooks.yaml");
    for min in [0, 1] {
        notebooks.pools[0].min_nodes = min;
        for seed in [1, 2, 3] {
            let skipping = ours(&notebooks, seed, 24.0, false);
            let every = ours(&notebooks, seed, 24.0, true);
            assert_eq!(
                decided(&skipping),
                decided(&every),
                "notebooks, minNodes {min}, seed {seed}"
            );
        }
    }
}
/// Not warm capacity, but found by this scenario: the simulated gpu-autoscaler re-plans
/// disruption only when the cluster changes or a timer it knows of runs out. `consolidateAfter`
/// counts from the node's last pod change, so a node emptied after its unneeded time ran out
/// becomes a candidate with nothing else changing; the simulator used to wake only for the
/// node's creation plus `consolidateAfter` and kept such a node for the rest of the run.
#[test]
fn a_node_emptied_in_a_quiet_cluster_goes_once_consolidate_after_has_passed() {
    let yaml = "name: quiet\nseed: 1\nduration: 6h\ncatalog: aws\n\
                policies: [gpu-autoscaler, karpenter-like]\n\
                cluster:\n  launch: {cpu: 45s, gpu: 120s}\n\
                pools:\n  - name: gpu\n    instanceTypes: [g6.xlarge]\n\
                \x20   capacityTypes: [on-demand]\n    taints: [{key: nvidia.com/gpu, value: present}]\n\
                \x20   disruption: {consolidateAfter: 30m, unneededTime: 10m}\n\
                workloads:\n  - jobs:\n      name: nb\n      arrivals: {at: [10m]}\n\
                \x20     duration: {fixed: 1h}\n      pod: {nodePool: gpu, cpu: 1, memory: 4Gi, gpus: 1}\n";
    let s = Scenario::parse(Path::new("quiet.yaml"), yaml).unwrap();
    let (ps, summary) = results(&s);
    for name in ["gpu-autoscaler", "karpenter-like"] {
        let p = named(&ps, name);
        assert_eq!(p.node_records.len(), 1, "{name}: {summary}");
        let node = &p.node_records[0];
        let job_end = p.first_bound[0].1 + 3600;
        let gone = node.gone_at.unwrap_or(i64::MAX);
        // 30 minutes after the job ended, within a disruption interval and the validation.
        assert!(
            gone >= job_end + 1800 && gone <= job_end + 1800 + 120,
            "{name}: job ended at {job_end}, node gone at {gone:?}: {summary}"
        );
    }
}

/// The openb replay compressed 10x, from `../shared/data` (skipped, saying so, without it):
/// thousands of nodes whose pods have nowhere to go, which every pass the controller runs
/// starts timing again.
#[test]
fn skipping_passes_changes_nothing_on_the_openb_replay() {
    let pods = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/data/openb/openb_pod_list_default.csv");
    if !pods.exists() {
        eprintln!("skipped: {} not found (CI has it)", pods.display());
        return;
    }
    let s = Scenario::parse(
        Path::new("openb.yaml"),
        autoscaler_sim::openb_workload::OPENB_SCENARIO_YAML,
    )
    .unwrap();
    let o = autoscaler_sim::openb_workload::OpenbOptions {
        compression: 10.0,
        fgd_share: None,
        fgd_interval_s: 1.0,
        reference_nodes: None,
        seed: 1,
    };
    let (w, horizon) = autoscaler_sim::openb_workload::load(&pods, &o, &s.pools).unwrap();
    // The first day of the replay (the whole of it still differs, from hour 268 on: not
    // traced, see autoscaler/sim/README.md).
    let hours = (horizon as f64 / 3600.0).min(24.0);
    let run_it = |every_pass: bool| {
        let opts = RunOptions {
            seed: Some(1),
            hours: Some(hours),
            policies: Some(vec!["gpu-autoscaler".into()]),
            every_pass,
            ..Default::default()
        };
        autoscaler_sim::run_workload(&s, &w, &opts, &|_, _| {})
            .unwrap()
            .policies
            .remove(0)
    };
    assert_eq!(decided(&run_it(false)), decided(&run_it(true)));
}
