//! A lower bound on the devices that fractional GPU shares need: one-dimensional bin packing
//! of shares (thousandths of a device, never split across devices) into devices of 1000.
//!
//! The bound is the LP relaxation of the cutting-stock formulation: a *pattern* is a multiset
//! of share sizes that fits one device, and the LP buys patterns in fractions so that every
//! size is covered as often as it occurs:
//!
//! ```text
//! minimise   Σ_p x_p
//! subject to Σ_p a_{i,p} x_p ≥ d_i    for every size i (a_{i,p}: copies of size i in p)
//!            x ≥ 0
//! ```
//!
//! There are far too many patterns to list, so they are generated (column generation): the
//! dual `max Σ d_i y_i, Σ_i a_{i,p} y_i ≤ 1 for the patterns so far` is solved, and the
//! pattern that most violates its row is the best unbounded knapsack of values `y_i` and
//! weights `size_i` into 1000, found exactly by dynamic programming over the integer capacity.
//! When no pattern is worth more than 1 the LP is solved.
//!
//! **Certified, not trusted**, like the covering bound in [`super`]: for *any* `y ≥ 0`, with
//! `K` the knapsack optimum under `y`, `y / K` is feasible for every pattern's row, so
//! `Σ d_i y_i / K` is a lower bound by weak duality. Each round's bound is computed that way
//! from the solver's `y` (clamped at 0), so solver tolerance can weaken the bound but never
//! make it exceed a real packing. The knapsack ignores how many shares of each size exist,
//! which only raises `K` and so only weakens the bound.
//!
//! Node-level limits (devices per node, GPU models, cores and memory) are left out: dropping
//! constraints keeps the bound valid.

use microlp::{ComparisonOp, OptimizationDirection, Problem};

/// Thousandths in one device.
const DEVICE: usize = 1000;

/// Rounds of column generation at most; each round adds one pattern. The bound of the last
/// round is still certified when the limit cuts the search short, only weaker.
const MAX_ROUNDS: usize = 200;

/// Relative margin taken off the certified LP value before rounding it up to whole devices,
/// so that floating-point error on an LP optimum that is a whole number never adds a device.
const ROUNDING_MARGIN: f64 = 1e-9;

/// The fewest devices of 1000 thousandths that `shares` (each in thousandths of one device)
/// can be packed onto, bounded from below: no packing that keeps every share on one device
/// uses fewer. Shares of 0 are ignored; shares of 1000 or more take a whole device each (a
/// share is never split). At least the total rounded up and at least the number of shares
/// above 500 (no two of them fit one device).
///
/// Pure and infallible: should the LP solver fail, the bound falls back to those two counts.
pub fn share_devices_lower_bound(shares: &[u32]) -> usize {
    let mut counts: Vec<(usize, f64)> = Vec::new();
    let mut whole = 0usize;
    let mut sorted: Vec<usize> = shares
        .iter()
        .map(|m| *m as usize)
        .filter(|m| *m > 0)
        .collect();
    sorted.sort_unstable();
    for m in sorted {
        if m >= DEVICE {
            whole += 1;
        } else {
            match counts.last_mut() {
                Some((size, n)) if *size == m => *n += 1.0,
                _ => counts.push((m, 1.0)),
            }
        }
    }
    let total: usize = counts.iter().map(|(s, n)| s * (*n as usize)).sum();
    let simple = total.div_ceil(DEVICE).max(
        counts
            .iter()
            .filter(|(s, _)| 2 * s > DEVICE)
            .map(|(_, n)| *n as usize)
            .sum(),
    );
    let lp = cutting_stock_bound(&counts);
    whole + simple.max((lp * (1.0 - ROUNDING_MARGIN)).ceil() as usize)
}

/// The certified LP bound (see the module documentation) for `(size, count)` pairs with
/// sizes in `1..DEVICE`; 0 when the solver fails in the first round.
fn cutting_stock_bound(counts: &[(usize, f64)]) -> f64 {
    if counts.is_empty() {
        return 0.0;
    }
    // Start from the homogeneous patterns: as many copies of one size as a device holds.
    let mut patterns: Vec<Vec<(usize, f64)>> = counts
        .iter()
        .enumerate()
        .map(|(i, (size, _))| vec![(i, (DEVICE / size) as f64)])
        .collect();
    let mut best = 0.0f64;
    for _ in 0..MAX_ROUNDS {
        let Some(y) = solve_dual(counts, &patterns) else {
            break;
        };
        let (k, pattern) = knapsack(counts, &y);
        if k > 0.0 {
            let value: f64 = counts.iter().zip(&y).map(|((_, n), y)| n * y).sum();
            best = best.max(value / k);
        }
        if k <= 1.0 + 1e-9 || patterns.contains(&pattern) {
            break;
        }
        patterns.push(pattern);
    }
    best
}

/// The dual of the restricted master LP: `max Σ d_i y_i` with one row `Σ a_{i,p} y_i ≤ 1`
/// per pattern. Returns `y` clamped at 0, or `None` when the solver gives up.
fn solve_dual(counts: &[(usize, f64)], patterns: &[Vec<(usize, f64)>]) -> Option<Vec<f64>> {
    let mut problem = Problem::new(OptimizationDirection::Maximize);
    let vars: Vec<_> = counts
        .iter()
        .map(|(_, n)| problem.add_var(*n, (0.0, f64::INFINITY)))
        .collect();
    for p in patterns {
        let row: Vec<_> = p.iter().map(|(i, a)| (vars[*i], *a)).collect();
        problem.add_constraint(row.as_slice(), ComparisonOp::Le, 1.0);
    }
    let solution = problem.solve().ok()?.into_solution().ok()?;
    Some(
        vars.iter()
            .map(|v| solution.var_value(*v).max(0.0))
            .collect(),
    )
}

/// The most a device can be worth under values `y` (unbounded knapsack over the sizes, exact
/// on the integer capacity), with a pattern that reaches it.
fn knapsack(counts: &[(usize, f64)], y: &[f64]) -> (f64, Vec<(usize, f64)>) {
    let mut value = vec![0.0f64; DEVICE + 1];
    let mut pick: Vec<Option<usize>> = vec![None; DEVICE + 1];
    for c in 1..=DEVICE {
        value[c] = value[c - 1];
        for (i, (size, _)) in counts.iter().enumerate() {
            if *size <= c && value[c - size] + y[i] > value[c] {
                value[c] = value[c - size] + y[i];
                pick[c] = Some(i);
            }
        }
    }
    let mut copies = vec![0usize; counts.len()];
    let mut c = DEVICE;
    while c > 0 {
        match pick[c] {
            Some(i) => {
                copies[i] += 1;
                c -= counts[i].0;
            }
            None => c -= 1,
        }
    }
    let pattern = copies
        .iter()
        .enumerate()
        .filter(|(_, n)| **n > 0)
        .map(|(i, n)| (i, *n as f64))
        .collect();
    (value[DEVICE], pattern)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// Devices first-fit-decreasing uses: a real packing, so never below the bound.
    fn first_fit_decreasing(shares: &[u32]) -> usize {
        let mut sorted: Vec<u32> = shares.iter().copied().filter(|m| *m > 0).collect();
        sorted.sort_unstable_by(|a, b| b.cmp(a));
        let mut devices: Vec<u32> = Vec::new();
        for m in sorted {
            let m = m.min(1000);
            match devices.iter_mut().find(|d| **d + m <= 1000) {
                Some(d) => *d += m,
                None => devices.push(m),
            }
        }
        devices.len()
    }

    #[test]
    fn hand_solved_packings() {
        // (shares, fewest devices): the bound is tight on each.
        let cases: &[(&[u32], usize)] = &[
            (&[], 0),
            (&[0, 0], 0),
            (&[600, 600, 400, 400], 2),
            // Two fit a device, three do not: the total (2.0) says 2, the LP 2.5.
            (&[400, 400, 400, 400, 400], 3),
            // Three shares above half a device need three devices whatever fills them.
            (&[600, 600, 600], 3),
            // Whole devices count one each, shares of them are never pooled.
            (&[1000, 1500, 500, 500], 3),
            // 4 x 810 leave 190 each, and only 4 x 150 can go there; 3 x 450 need 2 more.
            (&[810, 810, 810, 810, 150, 150, 150, 150, 450, 450, 450], 6),
        ];
        for (shares, want) in cases {
            assert_eq!(share_devices_lower_bound(shares), *want, "{shares:?}");
            assert_eq!(first_fit_decreasing(shares), *want, "{shares:?}");
        }
    }

    #[test]
    fn the_lp_is_stronger_than_the_total_and_the_big_shares() {
        // 340 + 340 fits, 340 x 3 does not: each device holds two, so 7 shares need 4
        // devices; the total (2.38) says 3 and no share is above half a device.
        let shares = [340; 7];
        assert_eq!(share_devices_lower_bound(&shares), 4);
    }

    proptest! {
        #[test]
        fn bound_is_between_the_total_and_a_real_packing(
            shares in proptest::collection::vec(
                prop_oneof![1u32..=1000, Just(810), Just(470), Just(190), 1001u32..3000],
                0..60,
            )
        ) {
            let bound = share_devices_lower_bound(&shares);
            let total: u32 = shares.iter().map(|m| (*m).min(1000)).sum();
            prop_assert!(bound >= total.div_ceil(1000) as usize);
            prop_assert!(bound <= first_fit_decreasing(&shares));
        }
    }
}
