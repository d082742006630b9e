//! Small-sample statistics for multi-seed runs: means with Student-t 95 % intervals, paired
//! differences (two policies or two settings on the same seeds) and the verdicts drawn from
//! them. Pure functions of their inputs, so the numbers a report prints can be checked by hand.

use serde::Serialize;

/// Two-sided 95 % quantiles of Student's t (the 0.975 quantile) for 1 to 30 degrees of
/// freedom, from the standard table.
const T975: [f64; 30] = [
    12.706_204_736,
    4.302_652_730,
    3.182_446_305,
    2.776_445_105,
    2.570_581_836,
    2.446_911_851,
    2.364_624_252,
    2.306_004_135,
    2.262_157_163,
    2.228_138_852,
    2.200_985_160,
    2.178_812_830,
    2.160_368_656,
    2.144_786_688,
    2.131_449_546,
    2.119_905_299,
    2.109_815_578,
    2.100_922_040,
    2.093_024_054,
    2.085_963_447,
    2.079_613_845,
    2.073_873_068,
    2.068_657_610,
    2.063_898_562,
    2.059_538_553,
    2.055_529_439,
    2.051_830_516,
    2.048_407_142,
    2.045_229_642,
    2.042_272_456,
];

/// The standard normal 0.975 quantile.
const Z975: f64 = 1.959_963_984_540_054;

/// The 0.975 quantile of Student's t with `df` degrees of freedom (the multiplier of the
/// standard error in a two-sided 95 % interval). The table up to 30; beyond, the
/// Cornish-Fisher expansion in 1/df (Abramowitz and Stegun 26.7.5), which is within 1e-6 of
/// the exact value there. `df` 0 has no interval: infinity.
pub fn t975(df: usize) -> f64 {
    if df == 0 {
        return f64::INFINITY;
    }
    if df <= T975.len() {
        return T975[df - 1];
    }
    let z = Z975;
    let v = df as f64;
    let (z3, z5, z7, z9) = (z.powi(3), z.powi(5), z.powi(7), z.powi(9));
    let g1 = (z3 + z) / 4.0;
    let g2 = (5.0 * z5 + 16.0 * z3 + 3.0 * z) / 96.0;
    let g3 = (3.0 * z7 + 19.0 * z5 + 17.0 * z3 - 15.0 * z) / 384.0;
    let g4 = (79.0 * z9 + 776.0 * z7 + 1482.0 * z5 - 1920.0 * z3 - 945.0 * z) / 92160.0;
    z + g1 / v + g2 / v.powi(2) + g3 / v.powi(3) + g4 / v.powi(4)
}

/// A mean with its two-sided 95 % interval.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Estimate {
    /// Number of observations.
    pub n: usize,
    /// Their mean (0 when there are none).
    pub mean: f64,
    /// `[lo, hi]`; `None` with fewer than two observations (no spread to measure).
    pub ci95: Option<[f64; 2]>,
}

/// Where an interval of a difference lies against 0.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    /// Entirely below 0.
    Below,
    /// Entirely above 0.
    Above,
    /// Contains 0: no difference the seeds can show.
    Parity,
    /// No interval (one observation).
    Unknown,
}

impl Estimate {
    /// The mean and t interval of `xs`.
    pub fn of(xs: &[f64]) -> Estimate {
        let n = xs.len();
        if n == 0 {
            return Estimate {
                n,
                mean: 0.0,
                ci95: None,
            };
        }
        let mean = xs.iter().sum::<f64>() / n as f64;
        if n < 2 {
            return Estimate {
                n,
                mean,
                ci95: None,
            };
        }
        let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
        let half = t975(n - 1) * (var / n as f64).sqrt();
        Estimate {
            n,
            mean,
            ci95: Some([mean - half, mean + half]),
        }
    }

    /// The paired difference `a[i] - b[i]` (same seed `i`).
    ///
    /// # Panics
    /// Never: pairs beyond the shorter slice are ignored.
    pub fn paired(a: &[f64], b: &[f64]) -> Estimate {
        let d: Vec<f64> = a.iter().zip(b).map(|(x, y)| x - y).collect();
        Estimate::of(&d)
    }

    /// The paired relative difference in percent, `100 * (a[i] / b[i] - 1)`; pairs with
    /// `b[i] == 0` have no ratio and are left out (so `n` may be smaller).
    pub fn paired_percent(a: &[f64], b: &[f64]) -> Estimate {
        let d: Vec<f64> = a
            .iter()
            .zip(b)
            .filter(|(_, y)| **y != 0.0)
            .map(|(x, y)| 100.0 * (x / y - 1.0))
            .collect();
        Estimate::of(&d)
    }

    /// Half the interval's width (`None` without an interval).
    pub fn half_width(&self) -> Option<f64> {
        self.ci95.map(|[lo, hi]| (hi - lo) / 2.0)
    }

    /// Where the interval lies against 0 (for a difference).
    pub fn verdict(&self) -> Verdict {
        match self.ci95 {
            None => Verdict::Unknown,
            Some([_, hi]) if hi < 0.0 => Verdict::Below,
            Some([lo, _]) if lo > 0.0 => Verdict::Above,
            Some(_) => Verdict::Parity,
        }
    }

    /// Whether the two intervals share a point (either without an interval counts as
    /// overlapping: nothing separates them).
    pub fn overlaps(&self, other: &Estimate) -> bool {
        match (self.ci95, other.ci95) {
            (Some([a_lo, a_hi]), Some([b_lo, b_hi])) => a_lo <= b_hi && b_lo <= a_hi,
            _ => true,
        }
    }

    /// `mean ±half` with `digits` decimals and thousands separators (`2,069 ±61`), or just
    /// the mean without an interval.
    pub fn show(&self, digits: usize) -> String {
        match self.half_width() {
            Some(h) => format!("{} ±{}", group(self.mean, digits), group(h, digits)),
            None => group(self.mean, digits),
        }
    }

    /// As [`Estimate::show`] with a sign on the mean (`+1.2 ±0.8`), for differences.
    pub fn show_signed(&self, digits: usize) -> String {
        // A mean that rounds to zero prints as +0, not as a bare 0.
        let sign = if group(self.mean, digits).starts_with('-') {
            ""
        } else {
            "+"
        };
        match self.half_width() {
            Some(h) => format!("{sign}{} ±{}", group(self.mean, digits), group(h, digits)),
            None => format!("{sign}{}", group(self.mean, digits)),
        }
    }
}

/// Decimals that keep about four significant digits of a figure around `scale` (at most 2).
pub fn digits_for(scale: f64) -> usize {
    match scale.abs() {
        s if s < 100.0 => 2,
        s if s < 1000.0 => 1,
        _ => 0,
    }
}

/// `v` with `digits` decimals and a comma every three integer digits (`-12,345.6`).
pub fn group(v: f64, digits: usize) -> String {
    let text = format!("{:.*}", digits, v.abs());
    let (int, frac) = match text.split_once('.') {
        Some((i, f)) => (i, Some(f)),
        None => (text.as_str(), None),
    };
    let mut out = String::new();
    for (i, c) in int.chars().enumerate() {
        if i > 0 && (int.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    if let Some(f) = frac {
        out.push('.');
        out.push_str(f);
    }
    // No "-0.0": a value that rounds to zero prints without a sign.
    if v < 0.0 && out.chars().any(|c| c.is_ascii_digit() && c != '0') {
        out.insert(0, '-');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64, tol: f64) -> bool {
        (a - b).abs() <= tol
    }

    #[test]
    fn t_quantiles_match_the_table_and_the_normal_limit() {
        // Published values of t(0.975, df).
        for (df, t) in [
            (1, 12.7062),
            (2, 4.3027),
            (4, 2.7764),
            (9, 2.2622),
            (19, 2.0930),
            (30, 2.0423),
            (40, 2.0211),
            (60, 2.0003),
            (120, 1.9799),
        ] {
            assert!(close(t975(df), t, 1e-4), "df {df}: {} vs {t}", t975(df));
        }
        assert!(close(t975(1_000_000), 1.95996, 1e-5));
        assert!(t975(0).is_infinite());
        // The expansion joins the table without a jump.
        assert!(t975(31) < t975(30) && t975(30) - t975(31) < 0.003);
    }

    #[test]
    fn a_paired_difference_worked_by_hand() {
        // d = [1, 2, 1, 2]: mean 1.5, s = sqrt(1/3), se = s/2 = 0.288675,
        // t(0.975, 3) = 3.182446, half-width 0.918693.
        let e = Estimate::paired(&[10.0, 12.0, 14.0, 16.0], &[9.0, 10.0, 13.0, 14.0]);
        assert_eq!(e.n, 4);
        assert!(close(e.mean, 1.5, 1e-12));
        let [lo, hi] = e.ci95.unwrap();
        assert!(
            close(lo, 0.581307, 1e-6) && close(hi, 2.418693, 1e-6),
            "{lo} {hi}"
        );
        assert_eq!(e.verdict(), Verdict::Above);
        // Reversed, the same interval below 0.
        let r = Estimate::paired(&[9.0, 10.0, 13.0, 14.0], &[10.0, 12.0, 14.0, 16.0]);
        assert_eq!(r.verdict(), Verdict::Below);
        // The unpaired intervals of the same numbers overlap widely: pairing is what shows it.
        let a = Estimate::of(&[10.0, 12.0, 14.0, 16.0]);
        let b = Estimate::of(&[9.0, 10.0, 13.0, 14.0]);
        assert!(a.overlaps(&b));
    }

    #[test]
    fn an_interval_containing_zero_is_parity_and_one_seed_has_none() {
        let e = Estimate::paired(&[1.0, 3.0, 2.0], &[2.0, 2.0, 2.0]);
        // d = [-1, 1, 0]: mean 0, s = 1, half-width t(2) / sqrt(3) = 2.484138.
        assert_eq!(e.verdict(), Verdict::Parity);
        assert!(close(e.half_width().unwrap(), 2.484138, 1e-6));
        let one = Estimate::of(&[5.0]);
        assert_eq!((one.mean, one.ci95), (5.0, None));
        assert_eq!(one.verdict(), Verdict::Unknown);
        assert_eq!(Estimate::of(&[]).n, 0);
    }

    #[test]
    fn percent_differences_skip_pairs_without_a_ratio() {
        // 110/100 - 1 = 10 %, 90/100 - 1 = -10 %, the third pair has no ratio.
        let e = Estimate::paired_percent(&[110.0, 90.0, 5.0], &[100.0, 100.0, 0.0]);
        assert_eq!(e.n, 2);
        assert!(close(e.mean, 0.0, 1e-9));
        // d = [10, -10]: s = 14.142136, se = 10, t(1) = 12.706205.
        assert!(close(e.half_width().unwrap(), 127.06205, 1e-4));
    }

    #[test]
    fn numbers_print_grouped_with_their_interval() {
        assert_eq!(group(2069.4, 0), "2,069");
        assert_eq!(group(-1234567.891, 2), "-1,234,567.89");
        assert_eq!(group(-0.04, 1), "0.0");
        assert_eq!(group(999.0, 0), "999");
        let e = Estimate::paired(&[10.0, 12.0, 14.0, 16.0], &[9.0, 10.0, 13.0, 14.0]);
        assert_eq!(e.show(1), "1.5 ±0.9");
        assert_eq!(e.show_signed(2), "+1.50 ±0.92");
        assert_eq!(Estimate::of(&[-3.0]).show_signed(0), "-3");
        assert_eq!(Estimate::of(&[-0.2]).show_signed(0), "+0");
        assert_eq!([56.0, 560.0, 5600.0].map(digits_for), [2, 1, 0]);
    }
}
