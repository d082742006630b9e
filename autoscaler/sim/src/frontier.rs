//! The cost against pending-p95 chart of multi-seed and sweep reports: one point per policy
//! (or per swept value) at its means, with the 95 % interval as error bars on both axes, and
//! each series' frontier (the points no other point of the series beats on both means).

use std::fmt::Write as _;

use crate::chart::{Dot, cost_scatter, legend, policy_color, secs_label, usd_digits};
use crate::report::esc;
use crate::stats::Estimate;

/// One point of the chart.
#[derive(Clone, Debug)]
pub struct Point {
    /// Text beside the point.
    pub label: String,
    /// The series (colour and frontier line) it belongs to.
    pub series: String,
    /// Cost, USD.
    pub cost: Estimate,
    /// Pending p95, seconds.
    pub p95: Estimate,
}

fn lo(e: &Estimate) -> f64 {
    e.ci95.map_or(e.mean, |c| c[0])
}

fn hi(e: &Estimate) -> f64 {
    e.ci95.map_or(e.mean, |c| c[1])
}

/// Whether `a` beats `b` on both means (no worse on either, better on one).
fn beats(a: &Point, b: &Point) -> bool {
    a.cost.mean <= b.cost.mean
        && a.p95.mean <= b.p95.mean
        && (a.cost.mean < b.cost.mean || a.p95.mean < b.p95.mean)
}

/// The chart (with a heading and a legend), self-contained: a series is a policy and has
/// the policy's colour.
pub fn chart(title: &str, points: &[Point]) -> String {
    let mut s = format!("<h3>{}</h3>", esc(title));
    if points.is_empty() {
        s.push_str("<p>No points.</p>");
        return s;
    }
    let mut series: Vec<&str> = Vec::new();
    for p in points {
        if !series.contains(&p.series.as_str()) {
            series.push(&p.series);
        }
    }
    let mut dots = Vec::new();
    let mut lines = Vec::new();
    for name in &series {
        let color = policy_color(name);
        let mine: Vec<&Point> = points.iter().filter(|p| p.series == *name).collect();
        let on_front = |p: &Point| !mine.iter().any(|q| beats(q, p));
        let mut front: Vec<(f64, f64)> = mine
            .iter()
            .filter(|p| on_front(p))
            .map(|p| (p.p95.mean, p.cost.mean))
            .collect();
        front.sort_by(|a, b| a.0.total_cmp(&b.0));
        if front.len() > 1 {
            lines.push((color, front));
        }
        for p in &mine {
            // Values with the same means (a setting that changed nothing) share one dot
            // and one label, instead of labels drawn over each other.
            let same = dots.iter_mut().find(|d: &&mut Dot| {
                d.color == color && d.x.1 == p.p95.mean && d.y.1 == p.cost.mean
            });
            if let Some(d) = same {
                d.label.push_str(", ");
                d.label.push_str(&p.label);
                continue;
            }
            dots.push(Dot {
                label: p.label.clone(),
                x: (lo(&p.p95), p.p95.mean, hi(&p.p95)),
                y: (lo(&p.cost), p.cost.mean, hi(&p.cost)),
                color,
                filled: on_front(p),
            });
        }
    }
    s.push_str(&cost_scatter(
        "pending p95 (time to bind, 95th percentile)",
        &dots,
        &lines,
    ));
    s.push_str(&legend(series.iter().map(|n| (*n, policy_color(n)))));
    s.push_str("<p class=\"note\">Bars: 95 % intervals over the seeds. Filled points are on their series' frontier (no other point of the series is cheaper and waits less, by the means); dashed lines join them. Points:</p><ul class=\"note\">");
    for p in points {
        let _ = write!(
            s,
            "<li>{}: {} ±{}, p95 {} ±{}</li>",
            if p.label == p.series {
                esc(&p.label)
            } else {
                format!("{} ({})", esc(&p.label), esc(&p.series))
            },
            usd_digits(p.cost.mean, 0),
            usd_digits(p.cost.half_width().unwrap_or(0.0), 0),
            secs_label(p.p95.mean),
            secs_label(p.p95.half_width().unwrap_or(0.0)),
        );
    }
    s.push_str("</ul>");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_chart_marks_the_frontier_and_names_its_axes() {
        let pt = |label: &str, cost: [f64; 2], p95: [f64; 2]| Point {
            label: label.into(),
            series: "s".into(),
            cost: Estimate::of(&cost),
            p95: Estimate::of(&p95),
        };
        let svg = chart(
            "t",
            &[
                pt("cheap", [100.0, 102.0], [60.0, 62.0]),
                pt("fast", [120.0, 122.0], [20.0, 22.0]),
                pt("worse", [130.0, 131.0], [70.0, 71.0]),
            ],
        );
        let t = crate::chart::texts(&svg);
        assert!(
            t.iter().any(|l| l.starts_with("pending p95"))
                && t.iter().any(|l| l.starts_with("cost, USD")),
            "{t:?}"
        );
        // Two filled points on the frontier, one hollow (dominated by both).
        let dots: Vec<&str> = svg
            .split("<circle")
            .filter(|c| c.contains("r=\"5\""))
            .collect();
        let hollow = dots
            .iter()
            .filter(|c| c.contains("fill=\"#FFFFFF\""))
            .count();
        assert_eq!((dots.len(), hollow), (6, 1), "{svg}");
        // The dashed frontier line, in the series' colour (dashes are separate segments).
        let color = crate::chart::hex(crate::chart::policy_color("s")).to_uppercase();
        assert!(
            svg.split("<polyline")
                .filter(|l| l.contains(&color))
                .count()
                > 2
        );
        assert!(t.contains(&"$100") && t.contains(&"cheap"), "{t:?}");
        assert!(
            svg.contains("<li>cheap (s): $101 ±$13, p95 61s ±13s</li>"),
            "{svg}"
        );
    }
}
