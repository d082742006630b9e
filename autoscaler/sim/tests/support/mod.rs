//! What the simulator's scenario tests share: running a scenario with every policy it names
//! and reading one policy's result.

use autoscaler_sim::{PolicyResult, RunOptions, Scenario, report, run};

/// Runs `s` with its policies: their results and the printed summary (for failure messages).
pub fn results(s: &Scenario) -> (Vec<PolicyResult>, String) {
    let r = run(s, &RunOptions::default(), &|_, _| {}).unwrap();
    let summary = report::summary(&r);
    (r.policies, summary)
}

/// The result of policy `name`; panics when it did not run.
pub fn named<'a>(ps: &'a [PolicyResult], name: &str) -> &'a PolicyResult {
    ps.iter()
        .find(|p| p.name == name)
        .unwrap_or_else(|| panic!("policy {name} did not run"))
}
