//! The charts of the HTML reports (one run, `--seeds`, `--sweep`): number formats, tick
//! choice, colours, and the drawing, done by plotters' SVG backend.
//!
//! Why plotters and not hand-written SVG: with `default-features = false` and only the SVG
//! backend, line series and error bars it adds three small crates (plotters, plotters-backend,
//! plotters-svg; num-traits was already built) that compile in about 3 s on the project's
//! 2-core machine, needs no font files (text is left to the browser), and lays out the axes,
//! their titles, the grid, tick marks and text escaping itself. The hand-drawn SVG it
//! replaced took about 290 lines of pixel arithmetic for two chart kinds (lines, a scatter)
//! without axis titles on the time charts; the code here is about as long for four kinds
//! (lines, interval bands, stacked areas, a scatter with error bars), and most of it is what
//! a report must decide for itself: which ticks (whole numbers on counts), how money reads
//! (`$2,214.70`), which colour each policy and instance type gets.
//!
//! Colours: each policy has its own of [`POLICY_COLORS`] (by its place in the list of known
//! policies), on every chart of every report. Instance types take [`TYPE_COLORS`] by the sorted
//! names of every type drawn anywhere in the report ([`TypeColors`]), so a type has one colour
//! on every chart of a report, and the same set of types gets the same colours in every report;
//! past twelve types colours repeat. The tail of types grouped as "other" is always grey.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use plotters::prelude::*;

use crate::report::esc;
use crate::scenario::POLICY_NAMES;
use crate::stats::group;

/// Policy colours, one per name of [`POLICY_NAMES`] in its order, then for any other name.
pub const POLICY_COLORS: [RGBColor; 6] = [
    RGBColor(0x1f, 0x5f, 0xa8),
    RGBColor(0xe8, 0x71, 0x0a),
    RGBColor(0xc0, 0x2f, 0x7a),
    RGBColor(0x2a, 0x9d, 0x5f),
    RGBColor(0x7b, 0x4f, 0xb8),
    RGBColor(0x8c, 0x6d, 0x1f),
];

/// Instance-type colours, assigned by sorted type name (see [`TypeColors`]).
pub const TYPE_COLORS: [RGBColor; 12] = [
    RGBColor(0x4e, 0x79, 0xa7),
    RGBColor(0xf2, 0x8e, 0x2b),
    RGBColor(0xe1, 0x57, 0x59),
    RGBColor(0x59, 0xa1, 0x4f),
    RGBColor(0xb0, 0x7a, 0xa1),
    RGBColor(0x76, 0xb7, 0xb2),
    RGBColor(0xed, 0xc9, 0x48),
    RGBColor(0x9c, 0x75, 0x5f),
    RGBColor(0xff, 0x9d, 0xa7),
    RGBColor(0x1b, 0x3a, 0x6b),
    RGBColor(0x8c, 0xd1, 0x7d),
    RGBColor(0xd3, 0x72, 0x95),
];

/// The colour of the "other" series (types past the most expensive few).
pub const OTHER_COLOR: RGBColor = RGBColor(0x99, 0x99, 0x99);

/// The policy's colour, the same on every chart of every report.
pub fn policy_color(name: &str) -> RGBColor {
    let i = POLICY_NAMES
        .iter()
        .position(|n| *n == name)
        .unwrap_or(POLICY_COLORS.len() - 1);
    POLICY_COLORS[i.min(POLICY_COLORS.len() - 1)]
}

/// `#rrggbb` for HTML.
pub fn hex(c: RGBColor) -> String {
    format!("#{:02x}{:02x}{:02x}", c.0, c.1, c.2)
}

/// One colour per instance type for a whole report: the `i`-th of the sorted names takes
/// `TYPE_COLORS[i % 12]`.
#[derive(Clone, Debug, Default)]
pub struct TypeColors(BTreeMap<String, RGBColor>);

impl TypeColors {
    /// The assignment for these types (order and repeats do not matter).
    pub fn new<'a>(types: impl IntoIterator<Item = &'a str>) -> TypeColors {
        let sorted: BTreeSet<&str> = types.into_iter().collect();
        TypeColors(
            sorted
                .into_iter()
                .enumerate()
                .map(|(i, t)| (t.to_string(), TYPE_COLORS[i % TYPE_COLORS.len()]))
                .collect(),
        )
    }

    /// The type's colour; grey for a type the report was not built with.
    pub fn get(&self, t: &str) -> RGBColor {
        self.0.get(t).copied().unwrap_or(OTHER_COLOR)
    }
}

/// US dollars with cents and thousands separators: `$2,214.70`, `-$12.00`.
pub fn usd(v: f64) -> String {
    usd_digits(v, 2)
}

/// As [`usd`] with `digits` decimals.
pub fn usd_digits(v: f64, digits: usize) -> String {
    let g = group(v, digits);
    match g.strip_prefix('-') {
        Some(abs) => format!("-${abs}"),
        None => format!("${g}"),
    }
}

/// As [`usd`] with a sign always: `+$42.10`, `-$3.00`.
pub fn usd_signed(v: f64) -> String {
    let s = usd(v);
    if s.starts_with('-') {
        s
    } else {
        format!("+{s}")
    }
}

/// Seconds in a unit that fits: `90s`, `12m`, `1.5h`.
pub fn secs_label(s: f64) -> String {
    if s < 600.0 {
        format!("{s:.0}s")
    } else if s < 7200.0 {
        format!("{}m", group(s / 60.0, if s % 60.0 == 0.0 { 0 } else { 1 }))
    } else {
        format!("{}h", group(s / 3600.0, 1))
    }
}

/// The unit a time axis reaching `max` seconds is labelled in: seconds up to 10 minutes,
/// minutes up to 2 hours, hours beyond (divisor and suffix).
pub fn time_unit(max: f64) -> (f64, &'static str) {
    if max <= 600.0 {
        (1.0, "s")
    } else if max <= 7200.0 {
        (60.0, "m")
    } else {
        (3600.0, "h")
    }
}

/// Ticks that cover `[min, max]`: from a multiple of the step at or below `min` to one at or
/// above `max`, four to eight intervals of 1, 2 or 5 times a power of ten. With `whole`
/// (counts of pods or nodes) the step is at least 1, so every tick is a whole number.
pub fn axis_ticks(min: f64, max: f64, whole: bool) -> Vec<f64> {
    let (min, max) = if min.is_finite() && max.is_finite() && min <= max {
        (min, max)
    } else {
        (0.0, 1.0)
    };
    let span = if max - min > 1e-9 { max - min } else { 1.0 };
    let raw = span / 6.0;
    // The step is `m * 10^e`; ticks are computed as `k * m` scaled by an exact power of ten
    // (a division for negative `e`), so 0.1 steps print as 0.6, not 0.6000000000000001.
    let mut e = raw.log10().floor() as i32;
    let mut m = [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .find(|m| m * 10f64.powi(e) >= raw * 0.999)
        .unwrap_or(10.0);
    if whole && e < 0 {
        (m, e) = (1.0, 0);
    }
    let scale = |x: f64| {
        if e >= 0 {
            x * 10f64.powi(e)
        } else {
            x / 10f64.powi(-e)
        }
    };
    let step = scale(m);
    // A value a thousandth of a step past a tick (a rounding error, a cent on a $50 step)
    // does not add a tick of its own.
    let first = (min / step + 1e-3).floor() as i64;
    let last = ((max / step - 1e-3).ceil() as i64).max(first + 1);
    (first..=last)
        .map(|k| {
            let t = scale(k as f64 * m);
            if t == 0.0 { 0.0 } else { t }
        })
        .collect()
}

/// Ticks on a time axis in hours: steps of 1, 2, 3, 6, 12 or 24 hours (quarter and half
/// hours for short runs, whole days beyond), at most eight intervals.
pub fn hour_ticks(hours: f64) -> Vec<f64> {
    let hours = if hours.is_finite() && hours > 0.0 {
        hours
    } else {
        1.0
    };
    let step = [0.25, 0.5, 1.0, 2.0, 3.0, 6.0, 12.0, 24.0]
        .into_iter()
        .find(|s| hours / s <= 8.0)
        .unwrap_or_else(|| 24.0 * (hours / 24.0 / 8.0).ceil());
    let n = (hours / step - 1e-9).ceil().max(1.0) as i64;
    (0..=n).map(|k| k as f64 * step).collect()
}

/// How a value axis reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scale {
    /// A count (pods, nodes): whole-number ticks.
    Count,
    /// US dollars.
    Usd,
    /// A fraction shown in percent.
    Percent,
}

impl Scale {
    /// The tick label of `v` on an axis of ticks `step` apart.
    pub fn label(self, v: f64, step: f64) -> String {
        match self {
            // As is: a fractional tick would show, not round to a repeated whole number.
            Scale::Count => format!("{v}"),
            Scale::Usd => usd_digits(v, if step < 1.0 { 2 } else { 0 }),
            Scale::Percent => format!("{:.0}%", v * 100.0),
        }
    }
}

/// One line of a time chart.
#[derive(Clone, Debug)]
pub struct Series {
    /// Legend text.
    pub name: String,
    /// Line colour.
    pub color: RGBColor,
    /// `(hours, value)`.
    pub points: Vec<(f64, f64)>,
    /// `(hours, low, high)`: a shaded band (an interval over seeds); empty for none.
    pub band: Vec<(f64, f64, f64)>,
}

/// A legend under a chart, as HTML (wraps with the page, unlike text inside the SVG).
pub fn legend<'a>(items: impl IntoIterator<Item = (&'a str, RGBColor)>) -> String {
    let mut s = String::from("<p class=\"legend\">");
    for (name, c) in items {
        let _ = write!(
            s,
            "<span><i style=\"background:{}\"></i>{}</span>",
            hex(c),
            esc(name)
        );
    }
    s.push_str("</p>");
    s
}

/// A linear axis over the span of `ticks` whose grid lines and labels are exactly `ticks`
/// (plotters would otherwise choose its own, fractional ones on counts included).
#[derive(Clone, Debug)]
struct Ticked(Vec<f64>);

impl Ticked {
    fn lo(&self) -> f64 {
        self.0.first().copied().unwrap_or(0.0)
    }
    fn hi(&self) -> f64 {
        self.0.last().copied().unwrap_or(1.0)
    }
}

impl Ranged for Ticked {
    type FormatOption = plotters::coord::ranged1d::DefaultFormatting;
    type ValueType = f64;

    fn map(&self, v: &f64, limit: (i32, i32)) -> i32 {
        let span = self.hi() - self.lo();
        let f = if span > 0.0 {
            (v - self.lo()) / span
        } else {
            0.5
        };
        limit.0 + (f * f64::from(limit.1 - limit.0)).round() as i32
    }

    fn key_points<H: plotters::coord::ranged1d::KeyPointHint>(&self, hint: H) -> Vec<f64> {
        // Only the labelled lines: no lighter lines between them.
        if hint.weight().allow_light_points() {
            Vec::new()
        } else {
            self.0.clone()
        }
    }

    fn range(&self) -> std::ops::Range<f64> {
        self.lo()..self.hi()
    }
}

/// Chart size in pixels.
const SIZE: (u32, u32) = (1060, 330);
/// Plotters writes `size / 1.24` as the SVG font size: 17 gives 13.7 px, the page's small text.
const FONT: (&str, u32) = ("sans-serif", 17);

/// A chart that could not be drawn: said on the page instead of the chart.
fn failed(e: impl std::fmt::Display) -> String {
    format!(
        "<p class=\"note\">This chart could not be drawn: {}</p>",
        esc(&e.to_string())
    )
}

/// Lines over virtual time (x in hours), with axis titles, the value axis read as `scale`,
/// a zero line when the values cross 0, then the legend.
pub fn time_chart(heading: &str, y_title: &str, scale: Scale, series: &[Series]) -> String {
    chart_with_legend(heading, series, draw_time(y_title, scale, series, 0.18))
}

/// Counts over virtual time stacked in the order given (the first at the bottom): each
/// series is a filled band on the ones before it, so the top edge is the total and a
/// series of one or two is still a visible band of its own colour. The series must share
/// their x values (samples of one run).
pub fn stacked_chart(heading: &str, y_title: &str, series: &[Series]) -> String {
    let mut below: Vec<f64> = Vec::new();
    let stacked: Vec<Series> = series
        .iter()
        .map(|s| {
            below.resize(s.points.len().max(below.len()), 0.0);
            let band: Vec<(f64, f64, f64)> = s
                .points
                .iter()
                .zip(&below)
                .map(|((x, v), lo)| (*x, *lo, lo + v))
                .collect();
            for (b, (_, _, hi)) in below.iter_mut().zip(&band) {
                *b = *hi;
            }
            Series {
                points: band.iter().map(|(x, _, hi)| (*x, *hi)).collect(),
                band,
                ..s.clone()
            }
        })
        .collect();
    chart_with_legend(
        heading,
        series,
        draw_time(y_title, Scale::Count, &stacked, 0.85),
    )
}

fn chart_with_legend(
    heading: &str,
    series: &[Series],
    svg: Result<String, Box<dyn std::error::Error>>,
) -> String {
    let mut out = format!("<h3>{}</h3>", esc(heading));
    match svg {
        Ok(svg) => out.push_str(&svg),
        Err(e) => out.push_str(&failed(e)),
    }
    out.push_str(&legend(series.iter().map(|s| (s.name.as_str(), s.color))));
    out
}

/// Draws the series (bands filled at `band_alpha`) over axes fitted to them.
fn draw_time(
    y_title: &str,
    scale: Scale,
    series: &[Series],
    band_alpha: f64,
) -> Result<String, Box<dyn std::error::Error>> {
    let xs = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.0))
        .fold(0.0, f64::max);
    let values = series.iter().flat_map(|s| {
        s.points
            .iter()
            .map(|p| p.1)
            .chain(s.band.iter().flat_map(|b| [b.1, b.2]))
    });
    let (lo, hi) = values.fold((0.0f64, 0.0f64), |(l, h), v| (l.min(v), h.max(v)));
    let xt = hour_ticks(xs);
    let yt = axis_ticks(lo, hi, scale == Scale::Count);
    let step = yt.get(1).zip(yt.first()).map_or(1.0, |(b, a)| b - a);
    let (xt, yt) = (Ticked(xt), Ticked(yt));
    let (x0, x1, y0) = (xt.lo(), xt.hi(), yt.lo());
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        root.fill(&WHITE)?;
        let mut chart = ChartBuilder::on(&root)
            .margin_top(10)
            .margin_right(24)
            .x_label_area_size(46)
            .y_label_area_size(86)
            .build_cartesian_2d(xt, yt)?;
        chart
            .configure_mesh()
            .x_desc("virtual time (hours)")
            .y_desc(y_title)
            .label_style(FONT)
            .axis_desc_style(FONT)
            .bold_line_style(RGBColor(0xe4, 0xe4, 0xe4))
            .x_label_formatter(&|v| format!("{v}"))
            .y_label_formatter(&|v| scale.label(*v, step))
            .draw()?;
        if y0 < 0.0 {
            chart.draw_series(LineSeries::new(
                [(x0, 0.0), (x1, 0.0)],
                BLACK.stroke_width(1),
            ))?;
        }
        for s in series {
            if !s.band.is_empty() {
                let outline: Vec<(f64, f64)> = s
                    .band
                    .iter()
                    .map(|b| (b.0, b.2))
                    .chain(s.band.iter().rev().map(|b| (b.0, b.1)))
                    .collect();
                chart.draw_series([Polygon::new(outline, s.color.mix(band_alpha).filled())])?;
            }
            let width = if band_alpha > 0.5 { 1 } else { 2 };
            chart.draw_series(LineSeries::new(
                s.points.iter().copied(),
                s.color.stroke_width(width),
            ))?;
        }
        root.present()?;
    }
    Ok(svg)
}

/// One point of a scatter chart with 95 % intervals on both axes.
#[derive(Clone, Debug)]
pub struct Dot {
    /// Text beside it.
    pub label: String,
    /// `(low, mean, high)` on x.
    pub x: (f64, f64, f64),
    /// `(low, mean, high)` on y.
    pub y: (f64, f64, f64),
    /// Colour.
    pub color: RGBColor,
    /// Filled (otherwise hollow).
    pub filled: bool,
}

/// The SVG of cost (y, USD) against seconds (x): each dot with its error bars and label,
/// dashed lines through `lines` (each a colour and points), axis titles; or a note saying
/// why it could not be drawn. The cost axis starts near the data and its title says when
/// that is not $0.
pub fn cost_scatter(x_title: &str, dots: &[Dot], lines: &[(RGBColor, Vec<(f64, f64)>)]) -> String {
    draw_scatter(x_title, dots, lines).unwrap_or_else(failed)
}

fn draw_scatter(
    x_title: &str,
    dots: &[Dot],
    lines: &[(RGBColor, Vec<(f64, f64)>)],
) -> Result<String, Box<dyn std::error::Error>> {
    let xmax = dots.iter().map(|d| d.x.2).fold(0.0, f64::max).max(1.0) * 1.05;
    let ymin = dots.iter().map(|d| d.y.0).fold(f64::MAX, f64::min);
    let ymax = dots.iter().map(|d| d.y.2).fold(0.0, f64::max);
    let pad = ((ymax - ymin) * 0.08).max(ymax.abs() * 0.005).max(0.5);
    // Ticks on round numbers of one unit (0, 5, 10 minutes), every label in that unit.
    let (div, unit) = time_unit(xmax);
    let xt: Vec<f64> = axis_ticks(0.0, xmax / div, false)
        .into_iter()
        .map(|t| t * div)
        .collect();
    let xstep = xt.get(1).map_or(1.0, |t| t / div);
    let yt = axis_ticks((ymin - pad).max(0.0), ymax + pad, false);
    let step = yt.get(1).zip(yt.first()).map_or(1.0, |(b, a)| b - a);
    let (xt, yt) = (Ticked(xt), Ticked(yt));
    let y_title = if yt.lo() > 0.0 {
        "cost, USD (axis does not start at $0)"
    } else {
        "cost, USD"
    };
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (SIZE.0, 440)).into_drawing_area();
        root.fill(&WHITE)?;
        let mut chart = ChartBuilder::on(&root)
            .margin_top(14)
            .margin_right(60)
            .x_label_area_size(46)
            .y_label_area_size(90)
            .build_cartesian_2d(xt, yt)?;
        chart
            .configure_mesh()
            .x_desc(x_title)
            .y_desc(y_title)
            .label_style(FONT)
            .axis_desc_style(FONT)
            .bold_line_style(RGBColor(0xe4, 0xe4, 0xe4))
            .x_label_formatter(&|v| {
                format!("{}{unit}", group(v / div, if xstep < 1.0 { 1 } else { 0 }))
            })
            .y_label_formatter(&|v| Scale::Usd.label(*v, step))
            .draw()?;
        for (color, pts) in lines {
            chart.draw_series(DashedLineSeries::new(
                pts.iter().copied(),
                5,
                4,
                color.stroke_width(1),
            ))?;
        }
        for d in dots {
            let style = d.color.stroke_width(1);
            chart.draw_series([ErrorBar::new_vertical(d.x.1, d.y.0, d.y.1, d.y.2, style, 8)])?;
            chart.draw_series([ErrorBar::new_horizontal(
                d.y.1, d.x.0, d.x.1, d.x.2, style, 8,
            )])?;
            let fill = if d.filled {
                d.color.filled()
            } else {
                WHITE.filled()
            };
            chart.draw_series([EmptyElement::at((d.x.1, d.y.1))
                + Circle::new((0, 0), 5, fill)
                + Circle::new((0, 0), 5, d.color.stroke_width(2))
                + Text::new(d.label.clone(), (8, -18), FONT)])?;
        }
        root.present()?;
    }
    Ok(svg)
}

/// The texts drawn in the SVG charts of `html` (axis titles, tick labels, point labels).
#[cfg(test)]
pub(crate) fn texts(html: &str) -> Vec<&str> {
    html.split("<text")
        .skip(1)
        .filter_map(|t| t.split_once('>'))
        .filter_map(|(_, rest)| rest.split_once("</text>"))
        .map(|(inner, _)| inner.trim())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::seeds::OURS;

    #[test]
    fn money_reads_as_dollars_with_separators() {
        assert_eq!(usd(2214.7), "$2,214.70");
        assert_eq!(usd(0.0), "$0.00");
        assert_eq!(usd(-12.0), "-$12.00");
        assert_eq!(usd(-0.001), "$0.00");
        assert_eq!(usd_signed(42.1), "+$42.10");
        assert_eq!(usd_signed(-1234.5), "-$1,234.50");
        assert_eq!(usd_digits(1_500_000.0, 0), "$1,500,000");
        assert_eq!(Scale::Usd.label(500.0, 250.0), "$500");
        assert_eq!(Scale::Usd.label(0.5, 0.25), "$0.50");
        assert_eq!(Scale::Percent.label(0.25, 0.05), "25%");
    }

    #[test]
    fn count_ticks_are_whole_numbers_covering_the_data() {
        for max in [1.0, 3.0, 7.0, 25.2, 31.5, 65.0, 0.0, 1234.0] {
            let t = axis_ticks(0.0, max, true);
            assert!(t.iter().all(|v| v.fract() == 0.0), "{max}: {t:?}");
            assert_eq!(t[0], 0.0);
            assert!(*t.last().unwrap() >= max, "{max}: {t:?}");
            assert!((2..=10).contains(&t.len()), "{max}: {t:?}");
        }
        // Few pods: steps of one, never 0.5.
        assert_eq!(axis_ticks(0.0, 3.0, true), [0.0, 1.0, 2.0, 3.0]);
        assert_eq!(axis_ticks(0.0, 31.5, true), [0.0, 10.0, 20.0, 30.0, 40.0]);
        assert_eq!(
            axis_ticks(0.0, 25.2, true),
            [0.0, 5.0, 10.0, 15.0, 20.0, 25.0, 30.0]
        );
        // A rounding error past a tick adds no tick.
        assert_eq!(axis_ticks(-0.01, 100.0, false)[0], 0.0);
        // Money may have fractional steps, and crosses zero on a difference chart.
        assert_eq!(axis_ticks(0.0, 0.9, false), [0.0, 0.2, 0.4, 0.6, 0.8, 1.0]);
        assert_eq!(
            axis_ticks(-30.0, 130.0, false),
            [-50.0, 0.0, 50.0, 100.0, 150.0]
        );
        assert_eq!(
            axis_ticks(1930.0, 2210.0, false),
            [
                1900.0, 1950.0, 2000.0, 2050.0, 2100.0, 2150.0, 2200.0, 2250.0
            ]
        );
    }

    #[test]
    fn time_ticks_fall_on_round_hours() {
        assert_eq!(
            hour_ticks(24.0),
            [0.0, 3.0, 6.0, 9.0, 12.0, 15.0, 18.0, 21.0, 24.0]
        );
        assert_eq!(hour_ticks(1.0), [0.0, 0.25, 0.5, 0.75, 1.0]);
        assert_eq!(
            hour_ticks(7.5),
            [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]
        );
        assert_eq!(hour_ticks(24.0 * 30.0).len(), 9);
    }

    #[test]
    fn a_type_keeps_its_colour_whatever_else_a_chart_shows() {
        let all = TypeColors::new(["p5.48xlarge", "m6i.2xlarge", "g6e.4xlarge", "m6i.2xlarge"]);
        // By sorted name: g6e, m6i, p5.
        assert_eq!(all.get("g6e.4xlarge"), TYPE_COLORS[0]);
        assert_eq!(all.get("m6i.2xlarge"), TYPE_COLORS[1]);
        assert_eq!(all.get("p5.48xlarge"), TYPE_COLORS[2]);
        // Listed in another order, the same assignment.
        let again = TypeColors::new(["m6i.2xlarge", "p5.48xlarge", "g6e.4xlarge"]);
        for t in ["g6e.4xlarge", "m6i.2xlarge", "p5.48xlarge"] {
            assert_eq!(all.get(t), again.get(t), "{t}");
        }
        assert_eq!(all.get("unknown"), OTHER_COLOR);
        assert_eq!(hex(TYPE_COLORS[0]), "#4e79a7");
    }

    #[test]
    fn a_time_chart_has_axis_titles_and_whole_count_ticks() {
        let s = Series {
            name: "a".into(),
            color: policy_color(OURS),
            points: vec![(0.0, 0.0), (1.0, 3.0), (2.0, 1.0)],
            band: vec![],
        };
        let html = time_chart("Pending pods", "pending pods", Scale::Count, &[s]);
        let t = texts(&html);
        assert!(
            t.contains(&"virtual time (hours)") && t.contains(&"pending pods"),
            "{t:?}"
        );
        // The value axis: whole pods only, up to the peak of 3.
        assert_eq!(t[2..6], ["0", "1", "2", "3"], "{t:?}");
        assert_eq!(
            t[6..],
            ["0", "0.25", "0.5", "0.75", "1", "1.25", "1.5", "1.75", "2"]
        );
        assert!(html.contains("<i style=\"background:#1f5fa8\"></i>a</span>"));
    }
}
