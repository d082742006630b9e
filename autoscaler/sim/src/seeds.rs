//! Multi-seed runs (`simulate --seeds`): the seed list, a parallel map over runs, and the
//! per-policy summary with 95 % intervals and paired differences against gpu-autoscaler, as a
//! table, as JSON and as an HTML page with the cost against pending-p95 chart and each
//! baseline's cost difference over time (mean and interval over the seeds).
//!
//! Every seed runs every policy on the same workload, so a policy's difference to
//! gpu-autoscaler is taken seed by seed (paired): the seed-to-seed spread of the workload,
//! larger than the differences between policies, cancels out.

use std::fmt::Write as _;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::{Map, Value, json};

use crate::engine::PolicyResult;
use crate::error::SimError;
use crate::stats::{Estimate, Verdict, digits_for, group};
use crate::{RunReport, report};
use crate::{chart, frontier};

/// The policy the others are compared with.
pub const OURS: &str = "gpu-autoscaler";
/// Most seeds one command may ask for.
pub const MAX_SEEDS: u64 = 10_000;

/// The seeds of `--seeds`: `N` is seeds 1 to N, `A..B` seeds A to B (both included).
///
/// # Errors
/// [`SimError::BadOption`] naming `--seeds` for text that is neither, an empty or reversed
/// range, or more than [`MAX_SEEDS`] seeds.
pub fn parse_seeds(text: &str) -> Result<Vec<u64>, SimError> {
    let bad = |why: String| SimError::BadOption {
        option: "--seeds".into(),
        why,
    };
    let num = |t: &str| {
        t.trim()
            .parse::<u64>()
            .map_err(|_| bad(format!("{t:?} is not a whole number (want N or A..B)")))
    };
    let (first, last) = match text.split_once("..") {
        Some((a, b)) => (num(a)?, num(b.strip_prefix('=').unwrap_or(b))?),
        None => {
            let n = num(text)?;
            if n == 0 {
                return Err(bad("0 seeds: want at least 1".into()));
            }
            (1, n)
        }
    };
    if first > last {
        return Err(bad(format!(
            "{first}..{last} is empty (the range includes both ends)"
        )));
    }
    if last - first >= MAX_SEEDS {
        return Err(bad(format!(
            "{} seeds is more than {MAX_SEEDS}",
            u128::from(last - first) + 1
        )));
    }
    Ok((first..=last).collect())
}

/// The seeds as a reader wants them: `1-10` for a contiguous run, else a list.
pub fn describe(seeds: &[u64]) -> String {
    match (seeds.first(), seeds.last()) {
        (Some(a), Some(b)) if seeds.windows(2).all(|w| w[1] == w[0] + 1) && a != b => {
            format!("{a}-{b}")
        }
        _ => seeds
            .iter()
            .map(u64::to_string)
            .collect::<Vec<_>>()
            .join(","),
    }
}

/// Threads to run on: every core the process may use.
pub fn threads() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from)
}

/// `f` over `items` on up to `threads` threads; results in the order of `items`. `done` is
/// called after each item (from the thread that ran it), for progress.
pub fn par_map<T: Sync, R: Send>(
    items: &[T],
    threads: usize,
    f: impl Fn(&T) -> R + Sync,
    done: impl Fn() + Sync,
) -> Vec<R> {
    let next = AtomicUsize::new(0);
    let out: Mutex<Vec<(usize, R)>> = Mutex::new(Vec::with_capacity(items.len()));
    std::thread::scope(|s| {
        for _ in 0..threads.clamp(1, items.len().max(1)) {
            s.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(item) = items.get(i) else { break };
                    let r = f(item);
                    done();
                    // A panic elsewhere poisons the lock; the scope re-raises that panic anyway.
                    if let Ok(mut o) = out.lock() {
                        o.push((i, r));
                    }
                }
            });
        }
    });
    let mut out = out.into_inner().unwrap_or_else(|e| e.into_inner());
    out.sort_by_key(|(i, _)| *i);
    out.into_iter().map(|(_, r)| r).collect()
}

/// Runs `run_one(seed)` for every seed on [`threads`] threads and summarizes the runs;
/// `done` is called after each run (for progress). The first failed run's error is returned.
///
/// # Errors
/// Whatever `run_one` returns.
pub fn run_seeds<E: Send>(
    seeds: &[u64],
    run_one: impl Fn(u64) -> Result<RunReport, E> + Sync,
    done: impl Fn() + Sync,
) -> Result<SeedSummary, E> {
    let start = std::time::Instant::now();
    let threads = threads();
    let runs = par_map(seeds, threads, |s| run_one(*s), done)
        .into_iter()
        .collect::<Result<Vec<_>, E>>()?;
    Ok(summarize(&runs, start.elapsed().as_secs_f64(), threads))
}

/// A per-run number a summary reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Metric {
    /// USD.
    Cost,
    /// Pending p95, seconds.
    PendingP95,
    /// Pods evicted.
    PodsDisrupted,
    /// Nodes launched.
    NodesLaunched,
    /// GPU-hours paid.
    GpuHoursPaid,
    /// GPU-hours useful (not thrown away by an eviction).
    GpuHoursUseful,
    /// GPU-hours of job work re-run after evictions.
    GpuHoursRerun,
    /// GPU-hours paid before nodes were Ready.
    GpuHoursBooting,
    /// GPU-hours paid on Ready nodes that no pod held.
    GpuHoursIdle,
    /// Of those, on nodes where no pod held any GPU.
    GpuHoursIdleEmpty,
    /// Useful over paid GPU-hours.
    GpuAllocation,
    /// Pods still pending at the end.
    PendingAtEnd,
    /// USD per useful GPU-hour: what a unit of GPU work that was not thrown away cost. NaN
    /// for a run with no useful GPU-hour (see [`PolicySummary::work_costs`]).
    CostPerUsefulGpuHour,
}

impl Metric {
    /// The value in one policy's run.
    pub fn of(self, p: &PolicyResult) -> f64 {
        match self {
            Metric::Cost => p.cost,
            Metric::PendingP95 => p.pending_p95_s,
            Metric::PodsDisrupted => p.pods_disrupted as f64,
            Metric::NodesLaunched => p.nodes_launched as f64,
            Metric::GpuHoursPaid => p.gpu_hours_paid,
            Metric::GpuHoursUseful => p.gpu_hours_useful,
            Metric::GpuHoursRerun => p.gpu_hours_rerun,
            Metric::GpuHoursBooting => p.gpu_hours_booting,
            Metric::GpuHoursIdle => p.gpu_hours_idle,
            Metric::GpuHoursIdleEmpty => p.gpu_hours_idle_empty,
            Metric::GpuAllocation => p.gpu_allocation,
            Metric::PendingAtEnd => p.pending_at_end as f64,
            Metric::CostPerUsefulGpuHour if p.gpu_hours_useful > 0.0 => p.cost / p.gpu_hours_useful,
            Metric::CostPerUsefulGpuHour => f64::NAN,
        }
    }

    /// The JSON key prefix.
    pub fn key(self) -> &'static str {
        match self {
            Metric::Cost => "cost",
            Metric::PendingP95 => "pending_p95_s",
            Metric::PodsDisrupted => "pods_disrupted",
            Metric::NodesLaunched => "nodes_launched",
            Metric::GpuHoursPaid => "gpu_hours_paid",
            Metric::GpuHoursUseful => "gpu_hours_useful",
            Metric::GpuHoursRerun => "gpu_hours_rerun",
            Metric::GpuHoursBooting => "gpu_hours_booting",
            Metric::GpuHoursIdle => "gpu_hours_idle",
            Metric::GpuHoursIdleEmpty => "gpu_hours_idle_empty",
            Metric::GpuAllocation => "gpu_allocation",
            Metric::PendingAtEnd => "pending_at_end",
            Metric::CostPerUsefulGpuHour => "cost_per_useful_gpu_hour",
        }
    }
}

/// One value per seed of `metric` for the runs `runs` (same seed order everywhere).
pub fn column(runs: &[&PolicyResult], metric: Metric) -> Vec<f64> {
    runs.iter().map(|p| metric.of(p)).collect()
}

/// One policy over every seed.
#[derive(Clone, Debug)]
pub struct PolicySummary {
    /// Policy name.
    pub name: String,
    /// What it is.
    pub description: String,
    /// Its run per seed, in seed order.
    pub runs: Vec<PolicyResult>,
    /// Its runs' seeds.
    pub seeds: Vec<u64>,
    /// gpu-autoscaler's runs on the same seeds, when it ran.
    pub ours: Option<Vec<PolicyResult>>,
}

impl PolicySummary {
    /// Mean and interval of `metric`.
    pub fn estimate(&self, metric: Metric) -> Estimate {
        Estimate::of(&column(&self.runs.iter().collect::<Vec<_>>(), metric))
    }

    /// Paired difference of `metric`, this policy minus gpu-autoscaler (`None` when
    /// gpu-autoscaler did not run).
    pub fn diff(&self, metric: Metric) -> Option<Estimate> {
        let ours = self.ours.as_ref()?;
        Some(Estimate::paired(
            &column(&self.runs.iter().collect::<Vec<_>>(), metric),
            &column(&ours.iter().collect::<Vec<_>>(), metric),
        ))
    }

    /// Paired relative difference in percent against gpu-autoscaler.
    pub fn diff_percent(&self, metric: Metric) -> Option<Estimate> {
        let ours = self.ours.as_ref()?;
        Some(Estimate::paired_percent(
            &column(&self.runs.iter().collect::<Vec<_>>(), metric),
            &column(&ours.iter().collect::<Vec<_>>(), metric),
        ))
    }

    /// [`Metric::CostPerUsefulGpuHour`]: its estimate and, against gpu-autoscaler, its paired
    /// difference in percent. `None` when a run of this policy or of gpu-autoscaler had no
    /// useful GPU-hour (a scenario without GPU work, or a policy that ran none of it): a
    /// price per unit of work that was never done is not a number to compare.
    pub fn work_costs(&self) -> Option<(Estimate, Option<Estimate>)> {
        let metric = Metric::CostPerUsefulGpuHour;
        let finite = |runs: &[PolicyResult]| runs.iter().all(|r| metric.of(r).is_finite());
        if !finite(&self.runs) || self.ours.as_deref().is_some_and(|o| !finite(o)) {
            return None;
        }
        Some((self.estimate(metric), self.diff_percent(metric)))
    }
}

/// Every policy over every seed.
#[derive(Clone, Debug)]
pub struct SeedSummary {
    /// Scenario name.
    pub scenario: String,
    /// Seeds run.
    pub seeds: Vec<u64>,
    /// Virtual seconds per run.
    pub virtual_seconds: i64,
    /// Mean pods per run.
    pub pods_mean: f64,
    /// Wall seconds of the whole command.
    pub wall_seconds: f64,
    /// Threads used.
    pub threads: usize,
    /// Per policy, in the order run.
    pub policies: Vec<PolicySummary>,
}

/// Gathers one run per seed (same policies in each) into per-policy summaries.
pub fn summarize(runs: &[RunReport], wall_seconds: f64, threads: usize) -> SeedSummary {
    let names: Vec<&PolicyResult> = runs.first().map_or(vec![], |r| r.policies.iter().collect());
    let by_name = |name: &str| -> Vec<PolicyResult> {
        runs.iter()
            .filter_map(|r| r.policies.iter().find(|p| p.name == name).cloned())
            .collect()
    };
    let ours = names.iter().any(|p| p.name == OURS).then(|| by_name(OURS));
    SeedSummary {
        scenario: runs.first().map_or(String::new(), |r| r.scenario.clone()),
        seeds: runs.iter().map(|r| r.seed).collect(),
        virtual_seconds: runs.first().map_or(0, |r| r.virtual_seconds),
        pods_mean: runs.iter().map(|r| r.pods as f64).sum::<f64>() / runs.len().max(1) as f64,
        wall_seconds,
        threads,
        policies: names
            .iter()
            .map(|p| PolicySummary {
                name: p.name.clone(),
                description: p.description.clone(),
                runs: by_name(&p.name),
                seeds: runs.iter().map(|r| r.seed).collect(),
                ours: ours.clone(),
            })
            .collect(),
    }
}

/// Words for a difference against gpu-autoscaler: `lower` when the policy's value is below
/// ours, `higher` above.
fn verdict_words(e: &Estimate, lower: &'static str, higher: &'static str) -> &'static str {
    match e.verdict() {
        Verdict::Below => lower,
        Verdict::Above => higher,
        Verdict::Parity => "parity",
        Verdict::Unknown => "one seed",
    }
}

/// How a cost difference (policy minus ours) reads.
pub fn cost_verdict(e: &Estimate) -> &'static str {
    verdict_words(e, "ours dearer", "ours cheaper")
}

/// How a pending-p95 difference (policy minus ours) reads.
pub fn wait_verdict(e: &Estimate) -> &'static str {
    verdict_words(e, "ours waits longer", "ours waits less")
}

/// Seconds as `461s`, `12.3m` or `2.1h`, with the interval's half-width in the same unit.
pub fn show_secs(e: &Estimate, signed: bool) -> String {
    let scale = e.mean.abs().max(e.half_width().unwrap_or(0.0));
    let (div, unit) = if scale < 600.0 {
        (1.0, "s")
    } else if scale < 7200.0 {
        (60.0, "m")
    } else {
        (3600.0, "h")
    };
    let d = if div == 1.0 { 0 } else { 1 };
    let scaled = Estimate {
        mean: e.mean / div,
        ci95: e.ci95.map(|[a, b]| [a / div, b / div]),
        n: e.n,
    };
    let text = if signed {
        scaled.show_signed(d)
    } else {
        scaled.show(d)
    };
    format!("{text}{unit}")
}

/// The table printed on stdout.
pub fn summary_text(s: &SeedSummary) -> String {
    let mut out = String::new();
    let n = s.seeds.len();
    let _ = writeln!(
        out,
        "scenario {} · seeds {} ({n} runs) · {:.1} virtual hours · {} pods per run (mean) · {:.1}s wall on {} threads",
        s.scenario,
        describe(&s.seeds),
        s.virtual_seconds as f64 / 3600.0,
        group(s.pods_mean, 0),
        s.wall_seconds,
        s.threads
    );
    let _ = writeln!(
        out,
        "mean ±half-width of the 95 % interval (Student t, {} degrees of freedom); \"vs ours\" is paired by seed: policy minus {OURS}",
        n.saturating_sub(1)
    );
    let _ = writeln!(
        out,
        "{:<15} {:>14} {:>38} {:>12} {:>27} {:>12} {:>13} {:>15} {:>11} {:>11} {:>6}",
        "policy",
        "cost $",
        "cost vs ours",
        "pending p95",
        "p95 vs ours",
        "GPU alloc",
        "useful GPU-h",
        "re-run GPU-h",
        "pods moved",
        "nodes up",
        "unsafe"
    );
    let cd = digits_for(
        s.policies
            .iter()
            .map(|p| p.estimate(Metric::Cost).mean)
            .fold(0.0, f64::max),
    );
    for p in &s.policies {
        let cost = p.estimate(Metric::Cost);
        let (cost_vs, p95_vs) = match (p.name == OURS, p.diff(Metric::Cost)) {
            (false, Some(d)) => {
                let pct = p.diff_percent(Metric::Cost).unwrap_or(d);
                let w = p.diff(Metric::PendingP95).unwrap_or(d);
                (
                    format!(
                        "{} ({}%) {}",
                        d.show_signed(cd),
                        pct.show_signed(1),
                        cost_verdict(&d)
                    ),
                    format!("{} {}", show_secs(&w, true), wait_verdict(&w)),
                )
            }
            _ => ("-".into(), "-".into()),
        };
        let alloc = p.estimate(Metric::GpuAllocation);
        let alloc = Estimate {
            mean: alloc.mean * 100.0,
            ci95: alloc.ci95.map(|[a, b]| [a * 100.0, b * 100.0]),
            ..alloc
        };
        let unsafe_total: u64 = p.runs.iter().map(|r| r.safety_violations).sum();
        let _ = writeln!(
            out,
            "{:<15} {:>14} {:>38} {:>12} {:>27} {:>12} {:>13} {:>15} {:>11} {:>11} {:>6}",
            p.name,
            cost.show(cd),
            cost_vs,
            show_secs(&p.estimate(Metric::PendingP95), false),
            p95_vs,
            format!("{}%", alloc.show(1)),
            p.estimate(Metric::GpuHoursUseful).show(0),
            p.estimate(Metric::GpuHoursRerun).show(1),
            p.estimate(Metric::PodsDisrupted).show(0),
            p.estimate(Metric::NodesLaunched).show(0),
            unsafe_total
        );
    }
    for p in &s.policies {
        if p.name != OURS {
            let _ = writeln!(
                out,
                "  {}: {} (a model, not the real project)",
                p.name, p.description
            );
        }
        let unsafe_runs: Vec<String> = p
            .runs
            .iter()
            .zip(&p.seeds)
            .filter(|(r, _)| r.safety_violations > 0)
            .map(|(r, seed)| format!("seed {seed}: {}", r.violation_examples.join("; ")))
            .collect();
        for v in unsafe_runs {
            let _ = writeln!(out, "  SAFETY VIOLATION {}: {v}", p.name);
        }
        for (r, seed) in p.runs.iter().zip(&p.seeds) {
            for note in &r.notes {
                let _ = writeln!(out, "  {} (seed {seed}): {note}", p.name);
            }
        }
    }
    work_costs(&mut out, s);
    gpu_hours_split(&mut out, s);
    gaps(&mut out, s);
    out
}

/// One line with where each policy's paid GPU-hours went, means over the seeds: booting
/// (before the device plugin advertised them), idle (advertised, held by no pod; of which on
/// nodes where no pod held any GPU) and held by pods. Left out when no run paid for a GPU.
fn gpu_hours_split(out: &mut String, s: &SeedSummary) {
    if s.policies
        .iter()
        .all(|p| p.estimate(Metric::GpuHoursPaid).mean <= 0.0)
    {
        return;
    }
    let parts: Vec<String> = s
        .policies
        .iter()
        .map(|p| {
            let [paid, booting, idle, empty] = [
                Metric::GpuHoursPaid,
                Metric::GpuHoursBooting,
                Metric::GpuHoursIdle,
                Metric::GpuHoursIdleEmpty,
            ]
            .map(|m| p.estimate(m).mean);
            let held = (paid - booting - idle).max(0.0);
            let pct = |v: f64| report::share_of_paid(v, paid);
            format!(
                "{} {:.0} booting ({:.1}%), {:.0} idle ({:.1}%, {:.0} on empty nodes), {:.0} held ({:.1}%)",
                p.name,
                booting,
                pct(booting),
                idle,
                pct(idle),
                empty,
                held,
                pct(held)
            )
        })
        .collect();
    let _ = writeln!(out, "  paid GPU-hours, mean: {}", parts.join("; "));
}

/// One line with each policy's cost per useful GPU-hour (cost over the GPU-hours that were
/// not thrown away by evictions): a policy that is cheaper because it runs less of the work,
/// or re-runs it, shows here. Left out when some run had no useful GPU-hour.
fn work_costs(out: &mut String, s: &SeedSummary) {
    let mut parts = Vec::new();
    for p in &s.policies {
        let Some((e, d)) = p.work_costs() else {
            return;
        };
        parts.push(match d {
            Some(d) if p.name != OURS => {
                format!(
                    "{} {} ({}%, {})",
                    p.name,
                    e.show(2),
                    d.show_signed(1),
                    cost_verdict(&d)
                )
            }
            _ => format!("{} {}", p.name, e.show(2)),
        });
    }
    if !parts.is_empty() {
        let _ = writeln!(out, "  $ per useful GPU-hour: {}", parts.join("; "));
    }
}

/// Per competitor, the two gaps: to the model of what users run today (`-like`) and to the
/// idealized model (`-ideal`), paired cost differences in percent.
fn gaps(out: &mut String, s: &SeedSummary) {
    for family in ["karpenter", "ca"] {
        let gap = |suffix: &str| {
            let name = format!("{family}-{suffix}");
            s.policies
                .iter()
                .find(|p| p.name == name)
                .and_then(|p| Some((name, p.diff_percent(Metric::Cost)?)))
        };
        let found: Vec<String> = ["like", "ideal"]
            .iter()
            .filter_map(|suffix| gap(suffix))
            .map(|(name, d)| format!("{name} {}% ({})", d.show_signed(1), cost_verdict(&d)))
            .collect();
        if !found.is_empty() {
            let _ = writeln!(out, "  cost gaps, {family}: {}", found.join(", "));
        }
    }
}

/// Puts `{key}_mean` and `{key}_ci95` (`[lo, hi]`, or null with one seed).
pub fn put(map: &mut Map<String, Value>, key: &str, e: &Estimate) {
    let r = |v: f64| (v * 1e4).round() / 1e4;
    map.insert(format!("{key}_mean"), json!(r(e.mean)));
    map.insert(
        format!("{key}_ci95"),
        e.ci95.map_or(Value::Null, |[a, b]| json!([r(a), r(b)])),
    );
}

/// One policy's summary as a JSON object.
pub fn policy_json(p: &PolicySummary) -> Value {
    let mut m = Map::new();
    m.insert("name".into(), json!(p.name));
    m.insert("runs".into(), json!(p.runs.len()));
    for metric in [Metric::Cost, Metric::PendingP95] {
        put(&mut m, metric.key(), &p.estimate(metric));
        if let Some(d) = p.diff(metric) {
            put(&mut m, &format!("{}_diff_vs_ours", metric.key()), &d);
        }
    }
    if let Some(d) = p.diff_percent(Metric::Cost) {
        put(&mut m, "cost_diff_vs_ours_pct", &d);
    }
    if let Some((e, d)) = p.work_costs() {
        let key = Metric::CostPerUsefulGpuHour.key();
        put(&mut m, key, &e);
        if let Some(d) = d {
            put(&mut m, &format!("{key}_diff_vs_ours_pct"), &d);
        }
    }
    if let (Some(c), Some(w)) = (p.diff(Metric::Cost), p.diff(Metric::PendingP95)) {
        m.insert("cost_vs_ours".into(), json!(cost_verdict(&c)));
        m.insert("pending_p95_vs_ours".into(), json!(wait_verdict(&w)));
    }
    for metric in [
        Metric::GpuHoursPaid,
        Metric::GpuHoursUseful,
        Metric::GpuHoursRerun,
        Metric::GpuHoursBooting,
        Metric::GpuHoursIdle,
        Metric::GpuHoursIdleEmpty,
        Metric::GpuAllocation,
        Metric::PodsDisrupted,
        Metric::NodesLaunched,
        Metric::PendingAtEnd,
    ] {
        let e = p.estimate(metric);
        // The names: `gpu_hours_useful` is the mean itself.
        m.insert(metric.key().into(), json!((e.mean * 1e4).round() / 1e4));
        put(&mut m, metric.key(), &e);
    }
    m.insert(
        "safety_violations".into(),
        json!(p.runs.iter().map(|r| r.safety_violations).sum::<u64>()),
    );
    m.insert(
        "per_seed".into(),
        Value::Array(
            p.runs
                .iter()
                .zip(&p.seeds)
                .map(|(r, seed)| {
                    json!({
                        "seed": seed,
                        "cost": (r.cost * 1e4).round() / 1e4,
                        "pending_p95_s": r.pending_p95_s,
                        "gpu_hours_paid": (r.gpu_hours_paid * 1e4).round() / 1e4,
                        "gpu_hours_requested": (r.gpu_hours_requested * 1e4).round() / 1e4,
                        "gpu_hours_useful": (r.gpu_hours_useful * 1e4).round() / 1e4,
                        "gpu_hours_rerun": (r.gpu_hours_rerun * 1e4).round() / 1e4,
                        "gpu_hours_booting": (r.gpu_hours_booting * 1e4).round() / 1e4,
                        "gpu_hours_idle": (r.gpu_hours_idle * 1e4).round() / 1e4,
                        "gpu_hours_idle_empty": (r.gpu_hours_idle_empty * 1e4).round() / 1e4,
                        "pods_disrupted": r.pods_disrupted,
                        "nodes_launched": r.nodes_launched,
                        "notes": r.notes,
                        "cost_by_type": r
                            .cost_by_type
                            .iter()
                            .map(|(t, c)| (t.clone(), json!((c * 1e4).round() / 1e4)))
                            .collect::<Map<String, Value>>(),
                    })
                })
                .collect(),
        ),
    );
    Value::Object(m)
}

/// The JSON document `--json` writes with `--seeds`.
pub fn to_json(s: &SeedSummary) -> String {
    let doc = json!({
        "scenario": s.scenario,
        "seeds": s.seeds,
        "virtual_seconds": s.virtual_seconds,
        "wall_seconds": (s.wall_seconds * 1e3).round() / 1e3,
        "interval": "95 % Student t; differences paired by seed, policy minus gpu-autoscaler",
        "policies": s.policies.iter().map(policy_json).collect::<Vec<_>>(),
    });
    format!("{doc:#}")
}

/// The HTML page `--report` writes with `--seeds`: the table and the cost against pending-p95
/// chart, one point per policy with its intervals.
pub fn to_html(s: &SeedSummary) -> String {
    let mut h = report::page_head(&format!("{} over seeds {}", s.scenario, describe(&s.seeds)));
    let _ = write!(
        h,
        "<h1>Simulation: {} over seeds {}</h1>",
        report::esc(&s.scenario),
        describe(&s.seeds)
    );
    let _ = write!(
        h,
        "<p>{} runs · {:.1} virtual hours · {} pods per run (mean). Each figure is the mean \
         ±half-width of its 95 % interval (Student t); differences are paired by seed, policy \
         minus {OURS}.</p><pre>{}</pre>",
        s.seeds.len(),
        s.virtual_seconds as f64 / 3600.0,
        group(s.pods_mean, 0),
        report::esc(&summary_text(s))
    );
    let points: Vec<frontier::Point> = s
        .policies
        .iter()
        .map(|p| frontier::Point {
            label: p.name.clone(),
            series: p.name.clone(),
            cost: p.estimate(Metric::Cost),
            p95: p.estimate(Metric::PendingP95),
        })
        .collect();
    h.push_str(&frontier::chart(
        "Cost against pending p95 (lower left is better)",
        &points,
    ));
    let runs: Vec<_> = s
        .policies
        .iter()
        .map(|p| {
            (
                p.name.as_str(),
                chart::policy_color(&p.name),
                p.runs.iter().collect::<Vec<_>>(),
            )
        })
        .collect();
    if let Some(gap) = report::cost_gap_chart(&runs) {
        h.push_str(&gap);
    }
    h.push_str("</body></html>\n");
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeds_parse_as_a_count_or_a_range() {
        assert_eq!(parse_seeds("3").unwrap(), [1, 2, 3]);
        assert_eq!(parse_seeds("5..7").unwrap(), [5, 6, 7]);
        assert_eq!(parse_seeds("5..=5").unwrap(), [5]);
        for (bad, says) in [
            ("0", "0 seeds"),
            ("x", "\"x\""),
            ("7..5", "7..5 is empty"),
            ("1..20000", "more than 10000"),
            ("-1", "\"-1\""),
        ] {
            let e = parse_seeds(bad).unwrap_err().to_string();
            assert!(e.contains("--seeds") && e.contains(says), "{bad}: {e}");
        }
        assert_eq!(describe(&[1, 2, 3]), "1-3");
        assert_eq!(describe(&[4, 9]), "4,9");
        assert_eq!(describe(&[4]), "4");
    }

    #[test]
    fn the_parallel_map_keeps_the_input_order() {
        let items: Vec<u64> = (0..50).collect();
        let count = AtomicUsize::new(0);
        let out = par_map(
            &items,
            4,
            |x| x * x,
            || {
                count.fetch_add(1, Ordering::Relaxed);
            },
        );
        assert_eq!(out, items.iter().map(|x| x * x).collect::<Vec<_>>());
        assert_eq!(count.load(Ordering::Relaxed), 50);
        assert!(par_map(&[] as &[u64], 4, |x| *x, || {}).is_empty());
    }

    fn result(name: &str, cost: f64, useful: f64) -> PolicyResult {
        PolicyResult {
            name: name.into(),
            cost,
            gpu_hours_useful: useful,
            ..PolicyResult::default()
        }
    }

    fn summary(policies: &[(&str, &[(f64, f64)])]) -> SeedSummary {
        let runs = |name: &str, v: &[(f64, f64)]| -> Vec<PolicyResult> {
            v.iter().map(|(c, u)| result(name, *c, *u)).collect()
        };
        let ours = policies
            .iter()
            .find(|(n, _)| *n == OURS)
            .map(|(n, v)| runs(n, v));
        SeedSummary {
            scenario: "s".into(),
            seeds: vec![1, 2],
            virtual_seconds: 3600,
            pods_mean: 1.0,
            wall_seconds: 0.0,
            threads: 1,
            policies: policies
                .iter()
                .map(|(n, v)| PolicySummary {
                    name: n.to_string(),
                    description: String::new(),
                    runs: runs(n, v),
                    seeds: vec![1, 2],
                    ours: ours.clone(),
                })
                .collect(),
        }
    }

    #[test]
    fn cost_per_useful_gpu_hour_is_paired_by_seed_and_left_out_without_work() {
        // Cheaper in dollars, dearer per unit of work it kept: 90/30 and 100/40 against
        // 100/50 and 120/60 are +50 % and +25 % per useful GPU-hour.
        let s = summary(&[
            (OURS, &[(100.0, 50.0), (120.0, 60.0)]),
            ("cheap-but-less", &[(90.0, 30.0), (100.0, 40.0)]),
        ]);
        let (e, d) = s.policies[1].work_costs().unwrap();
        assert!((e.mean - 2.75).abs() < 1e-9, "{e:?}");
        let d = d.unwrap();
        assert!((d.mean - 37.5).abs() < 1e-9, "{d:?}");
        let text = summary_text(&s);
        let line = text
            .lines()
            .find(|l| l.starts_with("  $ per useful GPU-hour: "))
            .unwrap_or_else(|| panic!("{text}"));
        assert!(
            line.contains("gpu-autoscaler 2.00") && line.contains("cheap-but-less 2.75"),
            "{line}"
        );
        let doc = policy_json(&s.policies[1]);
        assert_eq!(doc["cost_per_useful_gpu_hour_mean"], json!(2.75));
        assert_eq!(
            doc["cost_per_useful_gpu_hour_diff_vs_ours_pct_mean"],
            json!(37.5)
        );
        // A run without useful GPU-hours has no price per GPU-hour: the line and keys go.
        let s = summary(&[
            (OURS, &[(100.0, 50.0), (120.0, 60.0)]),
            ("no-gpu-work", &[(90.0, 0.0), (100.0, 40.0)]),
        ]);
        assert!(s.policies[1].work_costs().is_none());
        assert!(!summary_text(&s).contains("per useful GPU-hour"));
        assert!(
            policy_json(&s.policies[1])
                .get("cost_per_useful_gpu_hour_mean")
                .is_none()
        );
    }

    #[test]
    fn seconds_print_in_a_unit_that_fits() {
        assert_eq!(
            show_secs(&Estimate::of(&[400.0, 420.0]), false),
            "410 ±127s"
        );
        assert_eq!(show_secs(&Estimate::of(&[-30.0]), true), "-30s");
        assert_eq!(show_secs(&Estimate::of(&[900.0]), false), "15.0m");
    }
}
