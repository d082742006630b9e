//! Output of a run: the summary table, the JSON for scripts, and a self-contained HTML page
//! with inline SVG charts (drawn by [`crate::chart`]): the cost difference of each baseline
//! against gpu-autoscaler over time, cumulative cost, pending pods, GPU allocation, and per
//! policy the nodes of the instance types it paid most for.

use std::fmt::Write as _;

use serde::Serialize;

use plotters::style::RGBColor;

use crate::RunReport;
use crate::chart::{
    OTHER_COLOR, Scale, Series, TypeColors, policy_color, stacked_chart, time_chart, usd,
    usd_signed,
};
use crate::engine::{PolicyResult, Sample};
use crate::seeds::OURS;
use crate::stats::Estimate;

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
    gpu_hours_booting: f64,
    gpu_hours_idle: f64,
    gpu_hours_idle_empty: f64,
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
    /// USD per instance type; adds up to `cost` (what `--seeds` writes per seed too).
    cost_by_type: std::collections::BTreeMap<&'a str, f64>,
    notes: &'a [String],
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
                gpu_hours_booting: r(p.gpu_hours_booting, 4),
                gpu_hours_idle: r(p.gpu_hours_idle, 4),
                gpu_hours_idle_empty: r(p.gpu_hours_idle_empty, 4),
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
                cost_by_type: p
                    .cost_by_type
                    .iter()
                    .map(|(t, c)| (t.as_str(), r(*c, 4)))
                    .collect(),
                notes: &p.notes,
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
    gpu_hours_split(&mut s, report);
    provreq_table(&mut s, report);
    for p in &report.policies {
        if p.name != "gpu-autoscaler" {
            let _ = writeln!(
                s,
                "  {}: {} (a model, not the real project)",
                p.name, p.description
            );
        }
        for note in &p.notes {
            let _ = writeln!(s, "  {}: {note}", p.name);
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

/// `v` as a percentage of `paid` GPU-hours (0 when nothing was paid).
pub fn share_of_paid(v: f64, paid: f64) -> f64 {
    if paid > 0.0 { v / paid * 100.0 } else { 0.0 }
}

/// Whether some policy paid for a GPU (else the GPU-hours split is left out).
fn any_gpu_paid(report: &RunReport) -> bool {
    report.policies.iter().any(|p| p.gpu_hours_paid > 0.0)
}

/// Where each policy's paid GPU-hours went: booting (before the device plugin advertised the
/// GPUs), idle (advertised, held by no pod) and held by pods (of which re-run after an
/// eviction), each with its share of paid. Nothing when no policy paid for a GPU.
fn gpu_hours_split(s: &mut String, report: &RunReport) {
    if !any_gpu_paid(report) {
        return;
    }
    let _ = writeln!(
        s,
        "paid GPU-hours = booting (launch until the device plugin advertises the GPUs) + idle (advertised, held by no pod; of which on nodes where no pod held any GPU) + held by pods (of which re-run):"
    );
    for p in &report.policies {
        let pct = |v: f64| share_of_paid(v, p.gpu_hours_paid);
        let _ = writeln!(
            s,
            "  {:<15} {:>9.1} = {:>8.1} ({:>4.1}%) + {:>8.1} ({:>4.1}%; empty nodes {:.1}) + {:>9.1} ({:>4.1}%, re-run {:.1})",
            p.name,
            p.gpu_hours_paid,
            p.gpu_hours_booting,
            pct(p.gpu_hours_booting),
            p.gpu_hours_idle,
            pct(p.gpu_hours_idle),
            p.gpu_hours_idle_empty,
            p.gpu_hours_requested,
            pct(p.gpu_hours_requested),
            p.gpu_hours_rerun
        );
    }
}

/// The HTML form of [`gpu_hours_split`]: one row per policy.
fn split_html(s: &mut String, report: &RunReport) {
    if !any_gpu_paid(report) {
        return;
    }
    s.push_str(
        "<h2>Where the paid GPU-hours went</h2><table><tr><th>policy</th><th>paid</th>\
         <th>booting</th><th>idle on empty nodes</th><th>idle beside pods</th><th>held</th>\
         <th>of which re-run</th></tr>",
    );
    for p in &report.policies {
        let cell = |v: f64| format!("{v:.1} ({:.1}%)", share_of_paid(v, p.gpu_hours_paid));
        let _ = write!(
            s,
            "<tr><td>{}</td><td>{:.1}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{:.1}</td></tr>",
            esc(&p.name),
            p.gpu_hours_paid,
            cell(p.gpu_hours_booting),
            cell(p.gpu_hours_idle_empty),
            cell(p.gpu_hours_idle - p.gpu_hours_idle_empty),
            cell(p.gpu_hours_requested),
            p.gpu_hours_rerun
        );
    }
    s.push_str(
        "</table><p class=\"note\">Booting: from the launch request until the device plugin \
         advertises the GPUs. Idle on empty nodes: no pod held any GPU of the node (unneeded \
         time, consolidateAfter, capacity kept for pods to come). Idle beside pods: free GPUs \
         of nodes some pod used. Held: what bound pods requested, re-run work included.</p>",
    );
}

/// What a policy that does not serve ProvisioningRequests did with them instead.
const NOT_SERVED: &str = "not served: each request's pods were created at once, as a plain gang";

/// A policy's name and its ProvisioningRequest cells (`None`: it does not serve requests).
type ProvReqRow<'a> = (&'a str, Option<[String; 8]>);

/// The ProvisioningRequest table's rows, `None` when the scenario has no requests: per policy
/// its name and its cells (created, to-Provisioned p50 and p95, provisioned, consumed,
/// expired, revoked, never provisioned), `None` for a policy that does not serve requests.
fn provreq_rows(report: &RunReport) -> Option<Vec<ProvReqRow<'_>>> {
    if report
        .policies
        .iter()
        .all(|p| p.provisioning_requests.is_none())
    {
        return None;
    }
    let rows = report.policies.iter().filter_map(|p| {
        let q = p.provisioning_requests.as_ref()?;
        let cells = q.supported.then(|| {
            [
                q.requests.to_string(),
                hours(q.to_provisioned_p50_s),
                hours(q.to_provisioned_p95_s),
                q.provisioned.to_string(),
                q.consumed.to_string(),
                q.expired.to_string(),
                q.revoked.to_string(),
                q.never_provisioned.to_string(),
            ]
        });
        Some((p.name.as_str(), cells))
    });
    Some(rows.collect())
}

/// The ProvisioningRequest lines of the summary, only when the scenario has requests.
fn provreq_table(s: &mut String, report: &RunReport) {
    let Some(rows) = provreq_rows(report) else {
        return;
    };
    let line = |s: &mut String, c: [&str; 9]| {
        let _ = writeln!(
            s,
            "{:<15} {:>8} {:>8} {:>8} {:>11} {:>9} {:>8} {:>8} {:>6}",
            c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7], c[8]
        );
    };
    line(
        s,
        [
            "ProvReqs",
            "created",
            "to-prov",
            "to-prov",
            "provisioned",
            "consumed",
            "expired",
            "revoked",
            "never",
        ],
    );
    let _ = writeln!(s, "{:<15} {:>8} {:>8} {:>8}", "", "", "p50", "p95");
    for (name, cells) in rows {
        match cells {
            None => {
                let _ = writeln!(s, "{name:<15} {NOT_SERVED}");
            }
            Some(c) => line(
                s,
                [name, &c[0], &c[1], &c[2], &c[3], &c[4], &c[5], &c[6], &c[7]],
            ),
        }
    }
}

/// The start of a report page (doctype, title, style), up to the open `<body>`.
pub(crate) fn page_head(title: &str) -> String {
    format!(
        "<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>gpu-autoscaler simulation: {}</title>\
         <style>body{{font-family:sans-serif;max-width:1100px;margin:2em auto;color:#222}}\
         table{{border-collapse:collapse}}td,th{{border:1px solid #ccc;padding:3px 8px;text-align:right}}\
         th{{background:#f4f4f4}}td:first-child{{text-align:left}}.note{{color:#555;font-size:90%}}\
         pre{{font-size:11px;overflow-x:auto}}svg{{max-width:100%;height:auto}}\
         .legend{{margin:0 0 1.5em 90px;font-size:13px}}.legend span{{margin-right:1.5em;white-space:nowrap}}\
         .legend i{{display:inline-block;width:14px;height:4px;margin:0 5px 3px 0;vertical-align:middle}}</style></head><body>",
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

/// Instance types a node chart draws on its own line; the cheaper rest is one "other" line.
pub const NODE_CHART_TYPES: usize = 7;

/// The types of `p`'s node chart, most paid first: the [`NODE_CHART_TYPES`] types it paid
/// most for (all of them when only one more would be left), and the rest.
fn ranked_types(p: &PolicyResult) -> (Vec<&str>, Vec<&str>) {
    let mut types: Vec<(&str, f64)> = p
        .cost_by_type
        .iter()
        .map(|(t, c)| (t.as_str(), *c))
        .collect();
    types.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(b.0)));
    let keep = if types.len() <= NODE_CHART_TYPES + 1 {
        types.len()
    } else {
        NODE_CHART_TYPES
    };
    let rest = types.split_off(keep);
    (
        types.into_iter().map(|t| t.0).collect(),
        rest.into_iter().map(|t| t.0).collect(),
    )
}

/// One colour per instance type for every node chart of a report.
pub fn type_colors<'a>(policies: impl IntoIterator<Item = &'a PolicyResult>) -> TypeColors {
    TypeColors::new(policies.into_iter().flat_map(|p| ranked_types(p).0))
}

/// Nodes per instance type over time, stacked: the types `p` paid most for, each a band of
/// its own from the bottom up (so an expensive GPU type with few nodes is never hidden by
/// many cheap ones), the rest summed as "other" on top; the legend gives what each cost.
fn nodes_chart(p: &PolicyResult, colors: &TypeColors) -> String {
    let (top, rest) = ranked_types(p);
    let count = |s: &Sample, ts: &[&str]| -> f64 {
        ts.iter()
            .map(|t| f64::from(s.nodes_by_type.get(*t).copied().unwrap_or(0)))
            .sum()
    };
    let line = |ts: &[&str]| -> Vec<(f64, f64)> {
        p.samples
            .iter()
            .map(|s| (s.t as f64 / 3600.0, count(s, ts)))
            .collect()
    };
    let paid = |ts: &[&str]| -> f64 { ts.iter().filter_map(|t| p.cost_by_type.get(*t)).sum() };
    let mut series: Vec<Series> = top
        .iter()
        .map(|t| Series {
            name: format!("{t} · {}", usd(paid(&[t]))),
            color: colors.get(t),
            points: line(&[t]),
            band: vec![],
        })
        .collect();
    if !rest.is_empty() {
        series.push(Series {
            name: format!("other ({} types) · {}", rest.len(), usd(paid(&rest))),
            color: OTHER_COLOR,
            points: line(&rest),
            band: vec![],
        });
    }
    stacked_chart(
        &format!(
            "{}: nodes by instance type, stacked, the types it paid most for at the bottom",
            p.name
        ),
        "nodes",
        &series,
    )
}

/// One line per policy of a per-sample value, in the report's policy colours.
fn per_policy(report: &RunReport, f: impl Fn(&Sample) -> f64) -> Vec<Series> {
    report
        .policies
        .iter()
        .map(|p| Series {
            name: p.name.clone(),
            color: policy_color(&p.name),
            points: p
                .samples
                .iter()
                .map(|s| (s.t as f64 / 3600.0, f(s)))
                .collect(),
            band: vec![],
        })
        .collect()
}

/// The cumulative cost of `theirs` minus `ours` over time as a series named `name`: per
/// sample, the mean over the runs paired by position (the same seed), with the 95 % interval
/// as the band when there are two runs or more. Stops at the first sample whose time differs
/// between runs.
pub fn cost_gap(
    name: &str,
    color: RGBColor,
    theirs: &[&PolicyResult],
    ours: &[&PolicyResult],
) -> Series {
    let mut s = Series {
        name: name.to_string(),
        color,
        points: Vec::new(),
        band: Vec::new(),
    };
    let Some(first) = ours.first() else {
        return s;
    };
    for (i, at) in first.samples.iter().enumerate() {
        let mut d = Vec::new();
        for (a, b) in theirs.iter().zip(ours) {
            match (a.samples.get(i), b.samples.get(i)) {
                (Some(x), Some(y)) if x.t == at.t && y.t == at.t => d.push(x.cost - y.cost),
                _ => return s,
            }
        }
        let e = Estimate::of(&d);
        let h = at.t as f64 / 3600.0;
        s.points.push((h, e.mean));
        if let Some([lo, hi]) = e.ci95 {
            s.band.push((h, lo, hi));
        }
    }
    s
}

/// The chart of each baseline's cumulative cost minus gpu-autoscaler's, one line per
/// baseline; `None` when gpu-autoscaler or every baseline is missing. `policies` gives each
/// policy's name, colour and runs (one per seed, in seed order).
pub fn cost_gap_chart<'a>(
    policies: &[(&'a str, RGBColor, Vec<&'a PolicyResult>)],
) -> Option<String> {
    let ours = &policies.iter().find(|p| p.0 == OURS)?.2;
    let ours_end = Estimate::of(&ours.iter().map(|r| r.cost).collect::<Vec<_>>()).mean;
    let series: Vec<Series> = policies
        .iter()
        .filter(|p| p.0 != OURS)
        .map(|(name, color, runs)| {
            let mut s = cost_gap(name, *color, runs, ours);
            let end = s.points.last().map_or(0.0, |p| p.1);
            let pct = if ours_end > 0.0 {
                format!(" ({:+.1} %)", 100.0 * end / ours_end)
            } else {
                String::new()
            };
            s.name = format!("{name}: {} at the end{pct}", usd_signed(end));
            s
        })
        .collect();
    if series.is_empty() {
        return None;
    }
    let mut s = time_chart(
        &format!("Cost difference: each baseline's cumulative cost minus {OURS}'s"),
        "baseline minus ours, USD",
        Scale::Usd,
        &series,
    );
    let _ = write!(
        s,
        "<p class=\"note\">Above $0, {OURS} has spent less so far; the slope shows where the \
         difference is made.{}</p>",
        if policies.iter().any(|p| p.2.len() > 1) {
            " Lines are means over the seeds (paired by seed), bands their 95 % intervals."
        } else {
            ""
        }
    );
    Some(s)
}

/// The ProvisioningRequest table of the page, only when the scenario has requests.
fn provreq_html(s: &mut String, report: &RunReport) {
    let Some(rows) = provreq_rows(report) else {
        return;
    };
    s.push_str(
        "<h2>ProvisioningRequests</h2><table><tr><th>policy</th><th>created</th>\
         <th>to Provisioned p50</th><th>p95</th><th>provisioned</th><th>consumed</th>\
         <th>expired</th><th>revoked</th><th>never provisioned</th></tr>",
    );
    for (name, cells) in rows {
        let _ = write!(s, "<tr><td>{}</td>", esc(name));
        match cells {
            None => {
                let _ = write!(
                    s,
                    "<td colspan=\"8\" style=\"text-align:left\">{NOT_SERVED}</td>"
                );
            }
            Some(c) => {
                for cell in c {
                    let _ = write!(s, "<td>{cell}</td>");
                }
            }
        }
        s.push_str("</tr>");
    }
    s.push_str("</table>");
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
        "<table><tr><th>policy</th><th>cost</th><th>GPU-h paid</th><th>GPU-h useful</th>\
         <th>GPU-h re-run</th><th>GPU alloc</th><th>pending p50</th><th>p95</th><th>p99</th><th>nodes up</th>\
         <th>nodes down</th><th>pods disrupted</th><th>safety violations</th><th>pending at end</th></tr>",
    );
    for p in &report.policies {
        let _ = write!(
            s,
            "<tr><td>{}</td><td>{}</td><td>{:.1}</td><td>{:.1}</td><td>{:.1}</td><td>{:.1}%</td><td>{}</td><td>{}</td><td>{}</td>\
             <td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&p.name),
            usd(p.cost),
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
    s.push_str("</table>");
    split_html(&mut s, report);
    provreq_html(&mut s, report);
    s.push_str("<h2>Policies</h2><ul>");
    for p in &report.policies {
        let model = if p.name == OURS {
            ""
        } else {
            " <b>This baseline is a model</b> written from the project's public documentation \
             and source, not the project's code."
        };
        let notes: String = p.notes.iter().map(|n| format!(" {}.", esc(n))).collect();
        let _ = write!(
            s,
            "<li><b>{}</b>: {}.{model}{notes}</li>",
            esc(&p.name),
            esc(&p.description)
        );
    }
    s.push_str("</ul><p class=\"note\">GPU-hours count fractional shares, MIG slices (n/7 of a GPU) and time-sliced replicas (1/replicas) as fractions of a physical GPU; useful GPU-hours leave out job work thrown away by an eviction (re-run), and GPU alloc is useful over paid. Pending times are per pending episode; pods still pending at the end count until the end.</p>");
    let runs: Vec<(&str, RGBColor, Vec<&PolicyResult>)> = report
        .policies
        .iter()
        .map(|p| (p.name.as_str(), policy_color(&p.name), vec![p]))
        .collect();
    if let Some(gap) = cost_gap_chart(&runs) {
        s.push_str(&gap);
    }
    s.push_str(&time_chart(
        "Cumulative cost",
        "cost so far, USD",
        Scale::Usd,
        &per_policy(report, |x| x.cost),
    ));
    s.push_str(&time_chart(
        "Pending pods",
        "pending pods",
        Scale::Count,
        &per_policy(report, |x| f64::from(x.pending)),
    ));
    s.push_str(&time_chart(
        "GPU allocation (requested / paid)",
        "GPUs requested / paid",
        Scale::Percent,
        &per_policy(report, |x| x.gpu_allocation),
    ));
    let colors = type_colors(&report.policies);
    for p in &report.policies {
        s.push_str(&nodes_chart(p, &colors));
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
