//! Scenario parsing: the bundled default loads, and bad input names file, line and field.

use super::*;

#[test]
fn default_scenario_loads() {
    let s = Scenario::default_scenario().unwrap();
    assert_eq!(s.name, "default");
    assert_eq!(s.pools.len(), 4);
    assert!(s.workloads.len() >= 6);
}
