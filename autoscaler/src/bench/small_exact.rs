//! The `small-exact` suite: the planner's plans against the exact optimum on small seeded
//! instances (`autoscaler_core::exact`: at most 8 pods, 5 instance types, 2 NodePools), as a
//! distribution of `plan cost / optimum`.

use autoscaler_core::exact::plan_ratios;
use serde::Serialize;

/// Seeds drawn by default (the property test in `autoscaler/core/tests/planner_optimality.rs`
/// uses the first 600).
pub(crate) const DRAWS: u64 = 2000;

/// The distribution of cost ratios, as printed and written to the JSON.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct Distribution {
    /// Seeds drawn.
    pub(crate) draws: u64,
    /// Draws with an optimum (every pod fits some type).
    pub(crate) solvable: usize,
    /// Draws whose plan costs exactly the optimum.
    pub(crate) optimal: usize,
    /// Draws over 1.0x, 1.05x, 1.10x and 1.25x the optimum.
    pub(crate) above: [(f64, usize); 4],
    /// Percentiles 50, 90, 95 and 99 of the ratio.
    pub(crate) percentiles: [(u32, f64); 4],
    /// The ten worst draws: (ratio, seed).
    pub(crate) worst: Vec<(f64, u64)>,
}

/// Plans the first `draws` seeds and measures each plan against its optimum. A plan that
/// leaves a pod the optimum places counts as infinitely worse.
pub(crate) fn distribution(draws: u64) -> Distribution {
    let mut ratios = plan_ratios(draws);
    ratios.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    let n = ratios.len();
    let at = |p: u32| -> f64 {
        if n == 0 {
            return f64::NAN;
        }
        let i = ((f64::from(p) / 100.0) * (n as f64 - 1.0)).round() as usize;
        ratios[i.min(n - 1)].0
    };
    let over = |x: f64| ratios.iter().filter(|(r, _)| *r > x + 1e-9).count();
    Distribution {
        draws,
        solvable: n,
        optimal: n - over(1.0),
        above: [
            (1.0, over(1.0)),
            (1.05, over(1.05)),
            (1.10, over(1.10)),
            (1.25, over(1.25)),
        ],
        percentiles: [(50, at(50)), (90, at(90)), (95, at(95)), (99, at(99))],
        worst: ratios.iter().rev().take(10).copied().collect(),
    }
}

/// The distribution as the terminal shows it.
pub(crate) fn render(d: &Distribution) -> String {
    let share = |k: usize| 100.0 * k as f64 / d.solvable.max(1) as f64;
    let mut s = format!(
        "draws {} solvable {} optimal {} ({:.1} %)\n",
        d.draws,
        d.solvable,
        d.optimal,
        share(d.optimal)
    );
    for (x, k) in d.above {
        s.push_str(&format!(
            "  above {x:.2}x optimum: {k} ({:.1} %)\n",
            share(k)
        ));
    }
    let ps: Vec<String> = d
        .percentiles
        .iter()
        .map(|(p, r)| format!("p{p} {r:.3}x"))
        .collect();
    s.push_str(&format!("  {}\n", ps.join("  ")));
    let worst: Vec<String> = d
        .worst
        .iter()
        .map(|(r, seed)| format!("seed {seed} {r:.3}x"))
        .collect();
    s.push_str(&format!("  worst: {}\n", worst.join(", ")));
    s
}
