//! The cost against pending-p95 chart of multi-seed and sweep reports: one point per policy
//! (or per swept value) at its means, with the 95 % interval as error bars on both axes, and
//! each series' frontier (the points no other point of the series beats on both means).

use std::fmt::Write as _;

use crate::report::{COLORS, esc};
use crate::stats::{Estimate, group};

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

/// Tick values for `[min, max]`: four to eight, on a step of 1, 2 or 5 times a power of ten.
pub fn ticks(min: f64, max: f64) -> Vec<f64> {
    let span = (max - min).max(1e-9);
    let raw = span / 8.0;
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * mag)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * mag);
    let mut t = (min / step).ceil() * step;
    let mut out = Vec::new();
    while t <= max + step * 1e-9 {
        out.push(if t.abs() < step * 1e-9 { 0.0 } else { t });
        t += step;
    }
    out
}

/// Seconds for an axis label: `90s`, `12m`, `1.5h`.
fn secs_label(s: f64) -> String {
    if s < 600.0 {
        format!("{s:.0}s")
    } else if s < 7200.0 {
        format!("{}m", group(s / 60.0, if s % 60.0 == 0.0 { 0 } else { 1 }))
    } else {
        format!("{}h", group(s / 3600.0, 1))
    }
}

/// Whether `a` beats `b` on both means (no worse on either, better on one).
fn beats(a: &Point, b: &Point) -> bool {
    a.cost.mean <= b.cost.mean
        && a.p95.mean <= b.p95.mean
        && (a.cost.mean < b.cost.mean || a.p95.mean < b.p95.mean)
}

/// The SVG chart (with a heading), self-contained.
pub fn chart(title: &str, points: &[Point]) -> String {
    let (w, h, l, r, top, b) = (780.0, 440.0, 90.0, 150.0, 20.0, 60.0);
    let mut s = format!("<h3>{}</h3>", esc(title));
    if points.is_empty() {
        s.push_str("<p>No points.</p>");
        return s;
    }
    let xmax = points
        .iter()
        .map(|p| hi(&p.p95))
        .fold(0.0, f64::max)
        .max(1.0)
        * 1.05;
    let ymin_data = points.iter().map(|p| lo(&p.cost)).fold(f64::MAX, f64::min);
    let ymax_data = points.iter().map(|p| hi(&p.cost)).fold(0.0, f64::max);
    let pad = ((ymax_data - ymin_data) * 0.08)
        .max(ymax_data.abs() * 0.005)
        .max(0.5);
    let (ymin, ymax) = ((ymin_data - pad).max(0.0), ymax_data + pad);
    let x = |v: f64| l + (w - l - r) * v / xmax;
    let y = |v: f64| top + (h - b - top) * (1.0 - (v - ymin) / (ymax - ymin));
    let _ = write!(
        s,
        "<svg width=\"{w}\" height=\"{h}\" viewBox=\"0 0 {w} {h}\" role=\"img\" font-size=\"11\">\
         <line x1=\"{l}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"#888\"/>\
         <line x1=\"{l}\" y1=\"{top}\" x2=\"{l}\" y2=\"{}\" stroke=\"#888\"/>",
        h - b,
        w - r,
        h - b,
        h - b
    );
    for t in ticks(0.0, xmax) {
        let _ = write!(
            s,
            "<line x1=\"{0:.1}\" y1=\"{1}\" x2=\"{0:.1}\" y2=\"{top}\" stroke=\"#eee\"/>\
             <text x=\"{0:.1}\" y=\"{2}\" text-anchor=\"middle\">{3}</text>",
            x(t),
            h - b,
            h - b + 14.0,
            secs_label(t)
        );
    }
    for t in ticks(ymin, ymax) {
        let _ = write!(
            s,
            "<line x1=\"{l}\" y1=\"{0:.1}\" x2=\"{1}\" y2=\"{0:.1}\" stroke=\"#eee\"/>\
             <text x=\"{2}\" y=\"{3:.1}\" text-anchor=\"end\">${4}</text>",
            y(t),
            w - r,
            l - 4.0,
            y(t) + 3.0,
            group(t, 0)
        );
    }
    let _ = write!(
        s,
        "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">pending p95 (seconds to bind, 95th percentile)</text>\
         <text transform=\"translate(16 {}) rotate(-90)\" text-anchor=\"middle\">cost, USD{}</text>",
        l + (w - l - r) / 2.0,
        h - 18.0,
        top + (h - b - top) / 2.0,
        if ymin > 0.0 {
            " (axis does not start at 0)"
        } else {
            ""
        }
    );
    let mut series: Vec<&str> = Vec::new();
    for p in points {
        if !series.contains(&p.series.as_str()) {
            series.push(&p.series);
        }
    }
    for (k, name) in series.iter().enumerate() {
        let color = COLORS[k % COLORS.len()];
        let mine: Vec<&Point> = points.iter().filter(|p| p.series == *name).collect();
        let mut front: Vec<&&Point> = mine
            .iter()
            .filter(|p| !mine.iter().any(|q| beats(q, p)))
            .collect();
        front.sort_by(|a, b| a.p95.mean.total_cmp(&b.p95.mean));
        if front.len() > 1 {
            let d: Vec<String> = front
                .iter()
                .map(|p| format!("{:.1},{:.1}", x(p.p95.mean), y(p.cost.mean)))
                .collect();
            let _ = write!(
                s,
                "<polyline points=\"{}\" fill=\"none\" stroke=\"{color}\" stroke-dasharray=\"4 3\"/>",
                d.join(" ")
            );
        }
        for p in &mine {
            let (cx, cy) = (x(p.p95.mean), y(p.cost.mean));
            let on_front = front.iter().any(|f| std::ptr::eq(**f, *p));
            let _ = write!(
                s,
                "<line x1=\"{:.1}\" y1=\"{cy:.1}\" x2=\"{:.1}\" y2=\"{cy:.1}\" stroke=\"{color}\"/>\
                 <line x1=\"{cx:.1}\" y1=\"{:.1}\" x2=\"{cx:.1}\" y2=\"{:.1}\" stroke=\"{color}\"/>\
                 <circle cx=\"{cx:.1}\" cy=\"{cy:.1}\" r=\"4\" stroke=\"{color}\" fill=\"{}\"><title>{}: ${} ±{}, p95 {} ±{}</title></circle>\
                 <text x=\"{:.1}\" y=\"{:.1}\">{}</text>",
                x(lo(&p.p95)),
                x(hi(&p.p95)),
                y(lo(&p.cost)),
                y(hi(&p.cost)),
                if on_front { color } else { "white" },
                esc(&p.label),
                group(p.cost.mean, 0),
                group(p.cost.half_width().unwrap_or(0.0), 0),
                secs_label(p.p95.mean),
                secs_label(p.p95.half_width().unwrap_or(0.0)),
                cx + 6.0,
                cy - 6.0,
                esc(&p.label)
            );
        }
        let _ = write!(
            s,
            "<rect x=\"{}\" y=\"{}\" width=\"10\" height=\"10\" fill=\"{color}\"/><text x=\"{}\" y=\"{}\">{}</text>",
            w - r + 12.0,
            top + 16.0 * k as f64,
            w - r + 26.0,
            top + 9.0 + 16.0 * k as f64,
            esc(name)
        );
    }
    s.push_str("</svg><p class=\"note\">Bars: 95 % intervals over the seeds. Filled points are on their series' frontier (no other point of the series is cheaper and waits less, by the means); dashed lines join them.</p>");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_fall_on_round_steps() {
        assert_eq!(ticks(0.0, 10.0), [0.0, 2.0, 4.0, 6.0, 8.0, 10.0]);
        assert_eq!(
            ticks(1930.0, 2210.0),
            [1950.0, 2000.0, 2050.0, 2100.0, 2150.0, 2200.0]
        );
        assert_eq!(ticks(0.0, 0.9).len(), 5);
    }

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
        assert!(svg.contains("pending p95") && svg.contains("cost, USD"));
        // Two filled points on the frontier, one hollow (dominated by both).
        assert_eq!(svg.matches("fill=\"white\"").count(), 1, "{svg}");
        assert_eq!(svg.matches("<polyline").count(), 1);
        assert!(svg.contains("$100"));
    }
}
