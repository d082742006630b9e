//! The sweep's parsing, table and recommendation, on small hand-made results.
use super::*;

/// A run with only the two numbers the decision looks at.
fn run(cost: f64, p95: f64) -> PolicyResult {
    PolicyResult {
        name: OURS.into(),
        description: String::new(),
        cost,
        gpu_hours_paid: 0.0,
        gpu_hours_requested: 0.0,
        gpu_hours_useful: 0.0,
        gpu_hours_rerun: 0.0,
        gpu_hours_booting: 0.0,
        gpu_hours_idle: 0.0,
        gpu_hours_idle_empty: 0.0,
        gpu_allocation: 0.0,
        pending_p50_s: 0.0,
        pending_p95_s: p95,
        pending_p99_s: 0.0,
        nodes_launched: 0,
        nodes_terminated: 0,
        pods_disrupted: 0,
        pods_interrupted: 0,
        safety_violations: 0,
        violation_examples: vec![],
        pending_at_end: 0,
        pending_examples: vec![],
        pods_created: 0,
        launch_failures: 0,
        samples: vec![],
        cost_by_type: Default::default(),
        wall_seconds: 0.0,
        provisioning_requests: None,
        explanation: None,
        notes: vec![],
        node_records: vec![],
        first_bound: vec![],
        first_node: vec![],
    }
}

/// A row from per-seed (cost, p95) pairs.
fn row(label: &str, seeds: &[(f64, f64)]) -> Row {
    Row {
        label: label.into(),
        value: Some(label.into()),
        runs: seeds.iter().map(|(c, w)| run(*c, *w)).collect(),
    }
}

fn table(rows: Vec<Row>) -> Table {
    Table {
        policy: OURS.into(),
        rows,
    }
}

#[test]
fn a_value_better_on_both_is_recommended_and_the_others_marked() {
    // Seed-to-seed spread is large (100 to 300), but "b" is 10 cheaper on every seed and
    // waits no longer: pairing shows it although the unpaired intervals overlap.
    let t = table(vec![
        row("a", &[(100.0, 50.0), (200.0, 60.0), (300.0, 55.0)]),
        row("b", &[(90.0, 50.0), (191.0, 60.0), (289.0, 55.0)]),
        row("c", &[(100.0, 80.0), (201.0, 90.0), (299.0, 85.0)]),
    ]);
    let dom = dominated_by(&t);
    assert_eq!(dom, [vec!["b"], vec![], vec!["a", "b"]]);
    match recommend(&t) {
        Recommendation::Use(Some(v), why) => {
            assert_eq!(v, "b");
            assert!(why.starts_with("use b:"), "{why}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn overlapping_intervals_cannot_decide() {
    // b is cheaper on one seed and dearer on another: parity.
    let t = table(vec![
        row("a", &[(100.0, 50.0), (200.0, 60.0), (300.0, 55.0)]),
        row("b", &[(95.0, 50.0), (210.0, 60.0), (298.0, 55.0)]),
    ]);
    assert_eq!(dominated_by(&t), [Vec::<String>::new(), vec![]]);
    let r = recommend(&t);
    assert!(
        r.to_string()
            .starts_with("cannot decide: a, b are within each other's intervals"),
        "{r}"
    );
}

#[test]
fn a_trade_off_cannot_decide_and_says_so() {
    // b is always cheaper and always waits longer.
    let t = table(vec![
        row("a", &[(100.0, 50.0), (200.0, 60.0), (300.0, 55.0)]),
        row("b", &[(90.0, 80.0), (189.0, 91.0), (291.0, 84.0)]),
    ]);
    let r = recommend(&t).to_string();
    assert!(
        r.starts_with("cannot decide: a trade-off: b costs -"),
        "{r}"
    );
}

#[test]
fn one_seed_cannot_decide() {
    let t = table(vec![row("a", &[(1.0, 1.0)]), row("b", &[(2.0, 2.0)])]);
    assert!(matches!(recommend(&t), Recommendation::CannotDecide(w) if w.contains("--seeds")));
}

#[test]
fn durations_print_compactly() {
    assert_eq!(Setting::Secs(5400).to_string(), "1h30m");
    assert_eq!(Setting::Secs(0).to_string(), "0s");
    assert_eq!(Setting::Ratio(0.5).to_string(), "0.5");
}
