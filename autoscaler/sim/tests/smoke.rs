//! Quick end-to-end smoke run of the default scenario on a short horizon.

use autoscaler_sim::{RunOptions, Scenario, report, run};

#[test]
fn default_runs_two_hours() {
    let s = Scenario::default_scenario().unwrap();
    let opts = RunOptions {
        hours: Some(2.0),
        ..Default::default()
    };
    let r = run(&s, &opts, &mut |_, _| {}).unwrap();
    println!("{}", report::summary(&r));
}
