//! Trace workloads: openb replay and FGD modes, and the DLRM v2025 trace, on small files
//! written here (the real traces live in ../shared/data and are only used by benchmarks).

use std::path::PathBuf;

use autoscaler_sim::openb_workload::{self, OpenbOptions};
use autoscaler_sim::{RunOptions, Scenario, run_workload};

fn write(name: &str, text: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("sim-traces-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

const PODS: &str = "\
name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time
p0,4000,8192,1,1000,,LS,Running,0,3600,0
p1,2000,4096,1,500,,LS,Running,600,4200,600
p2,2000,4096,1,400,T4,LS,Running,1200,,1200
p3,8000,16384,0,0,,BE,Running,1800,5400,1800
p4,4000,8192,2,1000,V100M16|P100,LS,Running,2400,6000,2400
";

const NODES: &str = "\
sn,cpu_milli,memory_mib,gpu,model
n0,64000,262144,2,T4
n1,64000,262144,2,T4
";

fn openb_scenario() -> Scenario {
    Scenario::parse(
        std::path::Path::new("openb.yaml"),
        openb_workload::OPENB_SCENARIO_YAML,
    )
    .unwrap()
}

#[test]
fn openb_replay_compresses_time_and_runs_safely() {
    let pods = write("pods.csv", PODS);
    let o = OpenbOptions {
        compression: 2.0,
        fgd_share: None,
        fgd_interval_s: 1.0,
        reference_nodes: None,
        seed: 1,
    };
    let mut s = openb_scenario();
    let (w, horizon) = openb_workload::load(&pods, &o, &s.pools).unwrap();
    assert_eq!(w.pods.len(), 5);
    assert_eq!(w.pods[1].arrival, 300);
    assert_eq!(w.pods[1].runtime, Some(1800));
    assert_eq!(w.pods[2].runtime, None);
    assert_eq!(horizon, 3001);
    // A share of one device, and an unknown model (P100) lifts the model constraint.
    let share = w.materialize(1);
    assert_eq!(share.gpu_share.as_ref().map(|g| g.milli), Some(500));
    assert!(w.materialize(4).node_selector.terms.is_empty());
    assert!(!w.materialize(2).node_selector.terms.is_empty());
    s.duration_s = horizon;
    let r = run_workload(&s, &w, &RunOptions::default(), &|_, _| {}).unwrap();
    for p in &r.policies {
        assert_eq!(p.safety_violations, 0);
        assert_eq!(
            p.pending_at_end,
            0,
            "{}",
            autoscaler_sim::report::summary(&r)
        );
    }
}

#[test]
fn fgd_mode_stops_at_the_share_and_never_departs() {
    let pods = write("pods-fgd.csv", PODS);
    let nodes = write("nodes.csv", NODES);
    let o = OpenbOptions {
        compression: 1.0,
        fgd_share: Some(0.5),
        fgd_interval_s: 10.0,
        reference_nodes: Some(nodes),
        seed: 3,
    };
    let s = openb_scenario();
    let (w, _) = openb_workload::load(&pods, &o, &s.pools).unwrap();
    // 4 GPUs in the reference cluster: submission stops once 2 GPUs are requested.
    let requested: f64 = (0..w.pods.len())
        .map(|i| {
            let p = w.materialize(i);
            p.requests.get("nvidia.com/gpu") as f64
                + p.gpu_share
                    .as_ref()
                    .map_or(0.0, |g| f64::from(g.milli) / 1000.0)
        })
        .sum();
    assert!(requested >= 2.0, "{requested}");
    assert!(w.pods.iter().all(|p| p.runtime.is_none()));
    assert!(w.pods.windows(2).all(|x| x[1].arrival - x[0].arrival == 10));
    // Same seed, same order.
    let (w2, _) = openb_workload::load(&pods, &o, &s.pools).unwrap();
    assert_eq!(w, w2);
}

#[test]
fn dlrm_trace_becomes_a_workload() {
    let text = "\
instance_sn,role,app_name,cpu_request,cpu_limit,gpu_request,gpu_limit,rdma_request,rdma_limit,memory_request,memory_limit,disk_request,disk_limit,max_instance_per_node,creation_time,scheduled_time,deletion_time
i0,HN,app_0,12,12,1,1,25,25,120.0,120.0,640.0,800.0,8,,,
i1,CN,app_0,8,8,0,0,0,0,40.0,40.0,10,10,8,475.5,476,1200
";
    let p = write("dlrm.csv", text);
    let (w, horizon) = openb_workload::load_dlrm(&p, 1.0).unwrap();
    assert_eq!(w.pods.len(), 2);
    assert_eq!(w.pods[0].arrival, 0);
    assert_eq!(w.pods[0].runtime, None);
    assert_eq!(w.pods[1].arrival, 476);
    assert_eq!(w.materialize(0).requests.get("nvidia.com/gpu"), 1);
    assert!(horizon >= 3600);
    let bad = write("dlrm-bad.csv", &text.replace("475.5", "-3"));
    let e = openb_workload::load_dlrm(&bad, 1.0)
        .unwrap_err()
        .to_string();
    assert!(
        e.ends_with("dlrm-bad.csv:3: field creation_time: -3 is negative"),
        "{e}"
    );
}
