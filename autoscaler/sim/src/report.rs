//! Output of a run: the summary table, the JSON for scripts, and a self-contained HTML page
//! with inline SVG charts.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;

use crate::RunReport;
use crate::engine::{PolicyResult, Sample};

/// The JSON document `--json` writes: exactly these fields.
#[derive(Serialize)]
struct JsonReport<'a> {
    scenario: &'a str,
    seed: u64,
    virtual_seconds: i64,
    wall_seconds: f64,
    policies: Vec<JsonPolicy<'a>>,
}

#[derive(Serialize)]
struct JsonPolicy<'a> {
    name: &'a str,
    cost: f64,
    gpu_hours_paid: f64,
    gpu_hours_requested: f64,
    gpu_hours_useful: f64,
    gpu_hours_rerun: f64,
    gpu_allocation: f64,
    pending_p50_s: f64,
    pending_p95_s: f64,
    pending_p99_s: f64,
    nodes_launched: u64,
    nodes_terminated: u64,
    pods_disrupted: u64,
    safety_violations: u64,
    /// Only when the scenario has ProvisioningRequests, so other reports keep their shape.
    #[serde(skip_serializing_if = "Option::is_none")]
    provisioning_requests: Option<JsonProvReq>,
}

#[derive(Serialize)]
struct JsonProvReq {
    supported: bool,
    requests: u64,
    provisioned: u64,
    consumed: u64,
    expired: u64,
    revoked: u64,
    never_provisioned: u64,
    to_provisioned_p50_s: f64,
    to_provisioned_p95_s: f64,
}

/// Rounds for stable, readable JSON (wall time aside, the values are deterministic anyway).
fn r(v: f64, digits: i32) -> f64 {
    let f = 10f64.powi(digits);
    (v * f).round() / f
}

/// The JSON document for `report`.
pub fn to_json(report: &RunReport) -> String {
    let doc = JsonReport {
        scenario: &report.scenario,
        seed: report.seed,
        virtual_seconds: report.virtual_seconds,
        wall_seconds: r(report.wall_seconds, 3),
        policies: report
            .policies
            .iter()
            .map(|p| JsonPolicy {
                name: &p.name,
                cost: r(p.cost, 4),
                gpu_hours_paid: r(p.gpu_hours_paid, 4),
                gpu_hours_requested: r(p.gpu_hours_requested, 4),
                gpu_hours_useful: r(p.gpu_hours_useful, 4),
                gpu_hours_rerun: r(p.gpu_hours_rerun, 4),
                gpu_allocation: r(p.gpu_allocation, 4),
                pending_p50_s: p.pending_p50_s,
                pending_p95_s: p.pending_p95_s,
                pending_p99_s: p.pending_p99_s,
                nodes_launched: p.nodes_launched,
                nodes_terminated: p.nodes_terminated,
                pods_disrupted: p.pods_disrupted,
                safety_violations: p.safety_violations,
                provisioning_requests: p.provisioning_requests.as_ref().map(|q| JsonProvReq {
                    supported: q.supported,
                    requests: q.requests,
                    provisioned: q.provisioned,
                    consumed: q.consumed,
                    expired: q.expired,
                    revoked: q.revoked,
                    never_provisioned: q.never_provisioned,
                    to_provisioned_p50_s: q.to_provisioned_p50_s,
                    to_provisioned_p95_s: q.to_provisioned_p95_s,
                }),
            })
            .collect(),
    };
    serde_json::to_string_pretty(&doc).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
}

fn hours(s: f64) -> String {
    if s < 120.0 {
        format!("{s:.0}s")
    } else if s < 7200.0 {
        format!("{:.1}m", s / 60.0)
    } else {
        format!("{:.1}h", s / 3600.0)
    }
}

/// The summary table printed on stdout.
pub fn summary(report: &RunReport) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "scenario {} · seed {} · {:.1} virtual hours · {} pods · {:.2}s wall",
        report.scenario,
        report.seed,
        report.virtual_seconds as f64 / 3600.0,
        report.pods,
        report.wall_seconds
    );
    let _ = writeln!(
        s,
        "{:<15} {:>11} {:>9} {:>9} {:>7} {:>6} {:>7} {:>7} {:>7} {:>6} {:>6} {:>6} {:>6} {:>6}",
        "policy",
        "cost $",
        "GPU-h",
        "GPU-h",
        "GPU-h",
        "GPU",
        "pend",
        "pend",
        "pend",
        "nodes",
        "nodes",
        "pods",
        "unsafe",
        "still"
    );
    let _ = writeln!(
        s,
        "{:<15} {:>11} {:>9} {:>9} {:>7} {:>6} {:>7} {:>7} {:>7} {:>6} {:>6} {:>6} {:>6} {:>6}",
        "",
        "",
        "paid",
        "useful",
        "rerun",
        "alloc",
        "p50",
        "p95",
        "p99",
        "up",
        "down",
        "moved",
        "",
        "pending"
    );
    for p in &report.policies {
        let _ = writeln!(
            s,
            "{:<15} {:>11.2} {:>9.1} {:>9.1} {:>7.1} {:>5.1}% {:>7} {:>7} {:>7} {:>6} {:>6} {:>6} {:>6} {:>6}",
            p.name,
            p.cost,
            p.gpu_hours_paid,
            p.gpu_hours_useful,
            p.gpu_hours_rerun,
            p.gpu_allocation * 100.0,
            hours(p.pending_p50_s),
            hours(p.pending_p95_s),
            hours(p.pending_p99_s),
            p.nodes_launched,
            p.nodes_terminated,
            p.pods_disrupted,
            p.safety_violations,
            p.pending_at_end
        );
    }
    provreq_table(&mut s, report);
    for p in &report.policies {
        if p.name != "gpu-autoscaler" {
            let _ = writeln!(
                s,
                "  {}: {} (a model, not the real project)",
                p.name, p.description
            );
        }
        if !p.pending_examples.is_empty() {
            let _ = writeln!(
                s,
                "  {}: still pending at the end: {}",
                p.name,
                p.pending_examples.join(", ")
            );
        }
        for v in &p.violation_examples {
            let _ = writeln!(s, "  SAFETY VIOLATION {v}");
        }
    }
    s
}

/// The ProvisioningRequest lines of the summary, only when the scenario has requests.
fn provreq_table(s: &mut String, report: &RunReport) {
    if report
        .policies
        .iter()
        .all(|p| p.provisioning_requests.is_none())
    {
        return;
    }
    let _ = writeln!(
        s,
        "{:<15} {:>8} {:>8} {:>8} {:>11} {:>9} {:>8} {:>8} {:>6}",
        "ProvReqs",
        "created",
        "to-prov",
        "to-prov",
        "provisioned",
        "consumed",
        "expired",
        "revoked",
        "never"
    );
    let _ = writeln!(s, "{:<15} {:>8} {:>8} {:>8}", "", "", "p50", "p95");
    for p in &report.policies {
        let Some(q) = &p.provisioning_requests else {
            continue;
        };
        if !q.supported {
            let _ = writeln!(
                s,
                "{:<15} not served: each request's pods were created at once, as a plain gang",
                p.name
            );
            continue;
        }
        let _ = writeln!(
            s,
            "{:<15} {:>8} {:>8} {:>8} {:>11} {:>9} {:>8} {:>8} {:>6}",
            p.name,
            q.requests,
            hours(q.to_provisioned_p50_s),
            hours(q.to_provisioned_p95_s),
            q.provisioned,
            q.consumed,
            q.expired,
            q.revoked,
            q.never_provisioned
        );
    }
}

/// The start of a report page (doctype, title, style), up to the open `<body>`.
pub(crate) fn page_head(title: &str) -> String {
    format!(
        "<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>gpu-autoscaler simulation: {}</title>\
         <style>body{{font-family:sans-serif;max-width:1100px;margin:2em auto;color:#222}}\
         table{{border-collapse:collapse}}td,th{{border:1px solid #ccc;padding:3px 8px;text-align:right}}\
         th{{background:#f4f4f4}}td:first-child{{text-align:left}}.note{{color:#555;font-size:90%}}\
         pre{{font-size:11px;overflow-x:auto}}</style></head><body>",
        esc(title)
    )
}

/// `s` with HTML's special characters escaped.
pub(crate) fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// Series colours, in order.
pub(crate) const COLORS: [&str; 10] = [
    "#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7",
    "#9c755f", "#bab0ac",
];

/// A line chart of several series over time.
fn line_chart(title: &str, unit: &str, series: &[(String, Vec<(i64, f64)>)]) -> String {
    // Plot area: x in [l, w - r], y in [top, h - b].
    let (w, h, l, b, r, top) = (760.0, 240.0, 60.0, 30.0, 30.0, 12.0);
    let tmax = series
        .iter()
        .flat_map(|(_, v)| v.iter().map(|p| p.0))
        .max()
        .unwrap_or(1)
        .max(1) as f64;
    let ymax = series
        .iter()
        .flat_map(|(_, v)| v.iter().map(|p| p.1))
        .fold(0.0f64, f64::max)
        .max(1e-9)
        * 1.05;
    let mut s = String::new();
    let _ = write!(
        s,
        "<h3>{}</h3><svg width=\"{w}\" height=\"{}\" viewBox=\"0 0 {w} {}\" role=\"img\">",
        esc(title),
        h + 40.0,
        h + 40.0
    );
    let _ = write!(
        s,
        "<line x1=\"{l}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"#888\"/><line x1=\"{l}\" y1=\"{top}\" x2=\"{l}\" y2=\"{}\" stroke=\"#888\"/>",
        h - b,
        w - r,
        h - b,
        h - b
    );
    for i in 0..=4 {
        let y = top + (h - b - top) * (1.0 - f64::from(i) / 4.0);
        let v = ymax * f64::from(i) / 4.0;
        let _ = write!(
            s,
            "<text x=\"{}\" y=\"{}\" font-size=\"10\" text-anchor=\"end\">{:.1}{}</text>",
            l - 4.0,
            y + 3.0,
            v,
            esc(unit)
        );
    }
    for i in 0..=6 {
        let x = l + (w - l - r) * f64::from(i) / 6.0;
        let _ = write!(
            s,
            "<text x=\"{x}\" y=\"{}\" font-size=\"10\" text-anchor=\"middle\">{:.1}h</text>",
            h - b + 14.0,
            tmax * f64::from(i) / 6.0 / 3600.0
        );
    }
    for (k, (name, pts)) in series.iter().enumerate() {
        let color = COLORS[k % COLORS.len()];
        let mut d = String::new();
        for (i, (t, v)) in pts.iter().enumerate() {
            let x = l + (w - l - r) * (*t as f64 / tmax);
            let y = top + (h - b - top) * (1.0 - v / ymax);
            let _ = write!(d, "{}{x:.1},{y:.1}", if i == 0 { "M" } else { " L" });
        }
        let _ = write!(
            s,
            "<path d=\"{d}\" fill=\"none\" stroke=\"{color}\" stroke-width=\"1.5\"/>"
        );
        let _ = write!(
            s,
            "<rect x=\"{}\" y=\"{}\" width=\"10\" height=\"10\" fill=\"{color}\"/><text x=\"{}\" y=\"{}\" font-size=\"11\">{}</text>",
            l + 10.0 + 150.0 * (k % 4) as f64,
            h + 8.0 + 14.0 * (k / 4) as f64,
            l + 24.0 + 150.0 * (k % 4) as f64,
            h + 17.0 + 14.0 * (k / 4) as f64,
            esc(name)
        );
    }
    s.push_str("</svg>");
    s
}

/// Nodes per instance type over time, one line per type (the most used types).
fn nodes_chart(p: &PolicyResult) -> String {
    let mut peak: BTreeMap<&str, u32> = BTreeMap::new();
    for smp in &p.samples {
        for (t, n) in &smp.nodes_by_type {
            let e = peak.entry(t.as_str()).or_insert(0);
            *e = (*e).max(*n);
        }
    }
    let mut types: Vec<(&str, u32)> = peak.into_iter().collect();
    types.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(b.0)));
    types.truncate(8);
    let series: Vec<(String, Vec<(i64, f64)>)> = types
        .iter()
        .map(|(name, _)| {
            (
                name.to_string(),
                p.samples
                    .iter()
                    .map(|s| {
                        (
                            s.t,
                            f64::from(s.nodes_by_type.get(*name).copied().unwrap_or(0)),
                        )
                    })
                    .collect(),
            )
        })
        .collect();
    line_chart(&format!("{}: nodes by instance type", p.name), "", &series)
}

fn per_policy(report: &RunReport, f: impl Fn(&Sample) -> f64) -> Vec<(String, Vec<(i64, f64)>)> {
    report
        .policies
        .iter()
        .map(|p| {
            (
                p.name.clone(),
                p.samples.iter().map(|s| (s.t, f(s))).collect(),
            )
        })
        .collect()
}

/// The self-contained HTML report.
pub fn to_html(report: &RunReport) -> String {
    let mut s = page_head(&report.scenario);
    let _ = write!(
        s,
        "<h1>Simulation: {}</h1><p>Seed {} · {:.1} virtual hours · {} pods · {:.2} s wall.</p>",
        esc(&report.scenario),
        report.seed,
        report.virtual_seconds as f64 / 3600.0,
        report.pods,
        report.wall_seconds
    );
    s.push_str(
        "<table><tr><th>policy</th><th>cost $</th><th>GPU-h paid</th><th>GPU-h useful</th>\
         <th>GPU-h re-run</th><th>GPU alloc</th><th>pending p50</th><th>p95</th><th>p99</th><th>nodes up</th>\
         <th>nodes down</th><th>pods disrupted</th><th>safety violations</th><th>pending at end</th></tr>",
    );
    for p in &report.policies {
        let _ = write!(
            s,
            "<tr><td>{}</td><td>{:.2}</td><td>{:.1}</td><td>{:.1}</td><td>{:.1}</td><td>{:.1}%</td><td>{}</td><td>{}</td><td>{}</td>\
             <td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&p.name),
            p.cost,
            p.gpu_hours_paid,
            p.gpu_hours_useful,
            p.gpu_hours_rerun,
            p.gpu_allocation * 100.0,
            hours(p.pending_p50_s),
            hours(p.pending_p95_s),
            hours(p.pending_p99_s),
            p.nodes_launched,
            p.nodes_terminated,
            p.pods_disrupted,
            p.safety_violations,
            p.pending_at_end
        );
    }
    s.push_str("</table><h2>Policies</h2><ul>");
    for p in &report.policies {
        let model = if p.name == "gpu-autoscaler" {
            ""
        } else {
            " <b>This baseline is a model</b> written from the project's public documentation, \
             not the project's code."
        };
        let _ = write!(
            s,
            "<li><b>{}</b>: {}.{model}</li>",
            esc(&p.name),
            esc(&p.description)
        );
    }
    s.push_str("</ul><p class=\"note\">GPU-hours count fractional shares, MIG slices (n/7 of a GPU) and time-sliced replicas (1/replicas) as fractions of a physical GPU; useful GPU-hours leave out job work thrown away by an eviction (re-run), and GPU alloc is useful over paid. Pending times are per pending episode; pods still pending at the end count until the end.</p>");
    s.push_str(&line_chart(
        "Pending pods",
        "",
        &per_policy(report, |x| f64::from(x.pending)),
    ));
    s.push_str(&line_chart(
        "GPU allocation (requested / paid)",
        "",
        &per_policy(report, |x| x.gpu_allocation),
    ));
    s.push_str(&line_chart(
        "Cumulative cost",
        "$",
        &per_policy(report, |x| x.cost),
    ));
    for p in &report.policies {
        s.push_str(&nodes_chart(p));
    }
    s.push_str("</body></html>\n");
    s
}

/// One line of a `--sweep` table: value, then cost and p95 wait per policy.
pub fn sweep_line(value: &str, report: &RunReport) -> String {
    let mut s = format!("{value:>10}");
    for p in &report.policies {
        let _ = write!(
            s,
            "  {}: ${:.2} p50 {} p95 {} alloc {:.1}%",
            p.name,
            p.cost,
            hours(p.pending_p50_s),
            hours(p.pending_p95_s),
            p.gpu_allocation * 100.0
        );
    }
    s
}
