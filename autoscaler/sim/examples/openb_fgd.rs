//! Runs the simulator without the full `gpu-autoscaler` binary (handy while iterating on the
//! sim crate alone):
//! `cargo run --release -p autoscaler-sim --example openb_fgd -- scenario.yaml [HOURS] [POLICY]`
//! or `... -- openb PODS.csv [FGD_SHARE|-] [HOURS] [POLICY]` (compression 150 without a share).

use std::path::Path;

use autoscaler_sim::openb_workload::{self, OpenbOptions};
use autoscaler_sim::{RunOptions, Scenario, report, run, run_workload};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let usage = "usage: openb_fgd SCENARIO.yaml [HOURS] [POLICY] | openb PODS.csv [SHARE|-] [HOURS] [POLICY]";
    let first = args.get(1).ok_or(usage)?;
    if first != "openb" {
        let scenario = Scenario::load(Path::new(first))?;
        let opts = RunOptions {
            hours: args.get(2).and_then(|s| s.parse().ok()),
            policies: args.get(3).map(|p| vec![p.clone()]),
            ..Default::default()
        };
        let r = run(&scenario, &opts, &|_, _| {})?;
        print!("{}", report::summary(&r));
        return Ok(());
    }
    let pods = Path::new(args.get(2).ok_or(usage)?);
    let share: Option<f64> = args.get(3).and_then(|s| s.parse().ok());
    let mut scenario =
        Scenario::parse(Path::new("openb.yaml"), openb_workload::OPENB_SCENARIO_YAML)?;
    let o = OpenbOptions {
        compression: 150.0,
        fgd_share: share,
        fgd_interval_s: 1.0,
        reference_nodes: Some(pods.with_file_name("openb_node_list_gpu_node.csv")),
        seed: 1,
    };
    let (w, horizon) = openb_workload::load(pods, &o, &scenario.pools)?;
    scenario.duration_s = horizon;
    let opts = RunOptions {
        hours: args.get(4).and_then(|s| s.parse().ok()),
        policies: args.get(5).map(|p| vec![p.clone()]),
        ..Default::default()
    };
    let r = run_workload(&scenario, &w, &opts, &|_, _| {})?;
    print!("{}", report::summary(&r));
    Ok(())
}
