//! `simulate --sweep`: one disruption knob at several values, on every NodePool or on one
//! (`POOL:KEY=v1,v2`), over several seeds, as a decision table an on-call engineer can act on.
//!
//! Every value runs on the same seeds as the scenario's current setting, so each value's
//! change against the current one is paired by seed. A policy that does not read the knob
//! ([`policy_reads`]) runs once per seed and is shown once. Per value the table gives cost,
//! pending p95, pods disrupted, nodes launched, re-run GPU-hours and GPU-hours idle on empty
//! nodes with their 95 % intervals;
//! a value is *dominated* when another is better on cost or pending p95 (the paired interval
//! of the difference excludes 0) and worse on neither. The recommendation names a value only
//! when it alone is not dominated; otherwise it says "cannot decide" and why.

use std::fmt::Write as _;

use autoscaler_core::model::Pool;
use serde_json::{Map, Value, json};

use crate::engine::PolicyResult;
use crate::error::SimError;
use crate::frontier;
use crate::report;
use crate::scenario::{self, Scenario};
use crate::seeds::{self, Metric, OURS, PolicySummary, column, describe, put, show_secs};
use crate::stats::{Estimate, Verdict, digits_for};

/// The most nodes `min-nodes` takes: a sweep is a question about warm nodes, not a cluster.
const MAX_MIN_NODES: u32 = 1000;

/// A knob `--sweep` can turn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Key {
    /// `disruption.gpuUtilizationThreshold`.
    GpuUtilizationThreshold,
    /// `disruption.utilizationThreshold`.
    UtilizationThreshold,
    /// `disruption.unneededTime`.
    UnneededTime,
    /// `disruption.consolidateAfter`.
    ConsolidateAfter,
    /// `disruption.rightSizeSavings`.
    RightSizeSavings,
    /// The pool's pause of scale-down after it scaled up (`--scale-down-delay-after-add` for
    /// one pool; the scenario's `cluster.scaleDownDelayAfterAdd` when the pool sets none).
    ScaleDownDelayAfterAdd,
    /// `minNodes`: what disruption leaves, and, with `cluster.enforceNodeGroupMinSize`, the
    /// warm nodes kept with no pod pending (the cost of a warm GPU node against the wait it
    /// saves).
    MinNodes,
}

/// Every key, in the spelling `--sweep` takes.
pub const KEYS: [Key; 7] = [
    Key::GpuUtilizationThreshold,
    Key::UtilizationThreshold,
    Key::UnneededTime,
    Key::ConsolidateAfter,
    Key::RightSizeSavings,
    Key::ScaleDownDelayAfterAdd,
    Key::MinNodes,
];

/// A value of a key: a share in [0, 1] or whole seconds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Setting {
    /// A threshold.
    Ratio(f64),
    /// A duration, seconds.
    Secs(i64),
    /// A number of nodes.
    Count(u32),
}

impl Key {
    /// As spelled on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Key::GpuUtilizationThreshold => "gpu-utilization-threshold",
            Key::UtilizationThreshold => "utilization-threshold",
            Key::UnneededTime => "unneeded-time",
            Key::ConsolidateAfter => "consolidate-after",
            Key::RightSizeSavings => "right-size-savings",
            Key::ScaleDownDelayAfterAdd => "scale-down-delay-after-add",
            Key::MinNodes => "min-nodes",
        }
    }

    fn parse_value(self, text: &str) -> Result<Setting, String> {
        match self {
            Key::GpuUtilizationThreshold | Key::UtilizationThreshold | Key::RightSizeSavings => {
                let v: f64 = text
                    .parse()
                    .map_err(|_| format!("{}: {text:?} is not a number", self.name()))?;
                if !(0.0..=1.0).contains(&v) {
                    return Err(format!("{}: {v} is outside [0, 1]", self.name()));
                }
                Ok(Setting::Ratio(v))
            }
            Key::UnneededTime | Key::ConsolidateAfter | Key::ScaleDownDelayAfterAdd => {
                scenario::parse_duration(text)
                    .map(Setting::Secs)
                    .map_err(|e| format!("{}: {e}", self.name()))
            }
            Key::MinNodes => match text.trim().parse::<u32>() {
                Ok(n) if n <= MAX_MIN_NODES => Ok(Setting::Count(n)),
                Ok(n) => Err(format!(
                    "{}: {n} is above {MAX_MIN_NODES} nodes",
                    self.name()
                )),
                Err(_) => Err(format!(
                    "{}: {text:?} is not a whole number of nodes",
                    self.name()
                )),
            },
        }
    }

    /// The pool's setting in `scenario` (whose cluster-wide settings stand in for what the
    /// pool leaves unset).
    pub fn get(self, pool: &Pool, scenario: &Scenario) -> Setting {
        let d = &pool.disruption;
        match self {
            Key::GpuUtilizationThreshold => Setting::Ratio(d.gpu_utilization_threshold),
            Key::UtilizationThreshold => Setting::Ratio(d.utilization_threshold),
            Key::UnneededTime => Setting::Secs(d.unneeded_s),
            Key::ConsolidateAfter => Setting::Secs(d.consolidate_after_s),
            Key::RightSizeSavings => Setting::Ratio(d.right_size_savings),
            Key::ScaleDownDelayAfterAdd => Setting::Secs(
                d.delays
                    .after_add_s
                    .unwrap_or(scenario.cluster.disruption.delay_after_scale_up_s),
            ),
            Key::MinNodes => Setting::Count(pool.min_nodes),
        }
    }

    fn set(self, pool: &mut Pool, v: Setting) {
        let d = &mut pool.disruption;
        match (self, v) {
            (Key::GpuUtilizationThreshold, Setting::Ratio(r)) => d.gpu_utilization_threshold = r,
            (Key::UtilizationThreshold, Setting::Ratio(r)) => d.utilization_threshold = r,
            (Key::UnneededTime, Setting::Secs(s)) => d.unneeded_s = s,
            (Key::ConsolidateAfter, Setting::Secs(s)) => d.consolidate_after_s = s,
            (Key::RightSizeSavings, Setting::Ratio(r)) => d.right_size_savings = r,
            (Key::ScaleDownDelayAfterAdd, Setting::Secs(s)) => d.delays.after_add_s = Some(s),
            (Key::MinNodes, Setting::Count(n)) => pool.min_nodes = n,
            // parse_value gives each key its own kind of value.
            _ => {}
        }
    }
}

impl std::fmt::Display for Setting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            Setting::Ratio(r) => write!(f, "{r}"),
            Setting::Count(n) => write!(f, "{n}"),
            Setting::Secs(s) => {
                let (h, m, sec) = (s / 3600, s % 3600 / 60, s % 60);
                let mut out = String::new();
                for (v, u) in [(h, "h"), (m, "m"), (sec, "s")] {
                    if v > 0 {
                        let _ = write!(out, "{v}{u}");
                    }
                }
                f.write_str(if out.is_empty() { "0s" } else { &out })
            }
        }
    }
}

/// Whether `policy` reads `key` (from the code: gpu-autoscaler reads every key; the Karpenter
/// models only `consolidateAfter` and `minNodes`, which holds every policy's disruption; the
/// Cluster Autoscaler models the two thresholds, `unneededTime` and `minNodes`: their `--scale-down-delay-after-add` is one flag for the
/// whole cluster, as in the Cluster Autoscaler, which has no per-node-group value for it). A policy not listed is taken to read every key, so it is never shown as
/// unaffected by mistake. The `policies_that_ignore_a_key_do_not_change` test checks the
/// `false` answers by running them.
pub fn policy_reads(policy: &str, key: Key) -> bool {
    match policy {
        "karpenter-like" | "karpenter-ideal" => {
            matches!(key, Key::ConsolidateAfter | Key::MinNodes)
        }
        "ca-like" | "ca-ideal" => matches!(
            key,
            Key::GpuUtilizationThreshold
                | Key::UtilizationThreshold
                | Key::UnneededTime
                | Key::MinNodes
        ),
        _ => true,
    }
}

/// A parsed `--sweep`.
#[derive(Clone, Debug, PartialEq)]
pub struct Sweep {
    /// The one NodePool changed, or `None` for every NodePool.
    pub pool: Option<String>,
    /// The knob.
    pub key: Key,
    /// Values in the order given, with their text.
    pub values: Vec<(String, Setting)>,
}

/// Parses `[POOL:]KEY=v1,v2,...` against `scenario` (the pool must exist).
///
/// # Errors
/// [`SimError::BadOption`] naming `--sweep` and the unknown pool (with the known ones), the
/// unknown key (with the known ones) or the value that is not understood.
pub fn parse(text: &str, scenario: &Scenario) -> Result<Sweep, SimError> {
    let bad = |why: String| SimError::BadOption {
        option: "--sweep".into(),
        why,
    };
    let Some((target, values)) = text.split_once('=') else {
        return Err(bad(format!("want [POOL:]KEY=v1,v2,... (got {text:?})")));
    };
    let (pool, key) = match target.split_once(':') {
        Some((p, k)) => (Some(p.trim().to_string()), k.trim()),
        None => (None, target.trim()),
    };
    let Some(key) = KEYS.iter().copied().find(|k| k.name() == key) else {
        return Err(bad(format!(
            "unknown key {key:?} (known: {})",
            KEYS.map(Key::name).join(", ")
        )));
    };
    if let Some(p) = &pool
        && !scenario.pools.iter().any(|q| &q.name == p)
    {
        let known: Vec<&str> = scenario.pools.iter().map(|q| q.name.as_str()).collect();
        return Err(bad(format!(
            "unknown NodePool {p:?} in scenario {} (known: {})",
            scenario.name,
            known.join(", ")
        )));
    }
    let mut parsed = Vec::new();
    for v in values.split(',').map(str::trim).filter(|v| !v.is_empty()) {
        let s = key.parse_value(v).map_err(bad)?;
        if parsed.iter().any(|(_, q)| *q == s) {
            return Err(bad(format!("{v} is given twice")));
        }
        parsed.push((v.to_string(), s));
    }
    if parsed.is_empty() {
        return Err(bad(format!("no values for {}", key.name())));
    }
    Ok(Sweep {
        pool,
        key,
        values: parsed,
    })
}

impl Sweep {
    fn targets<'a>(&'a self, pools: &'a [Pool]) -> impl Iterator<Item = &'a Pool> + 'a {
        pools
            .iter()
            .filter(|p| self.pool.as_ref().is_none_or(|n| &p.name == n))
    }

    /// `scenario` with the key set to `v` on the targeted pools.
    pub fn apply(&self, scenario: &Scenario, v: Setting) -> Scenario {
        let mut s = scenario.clone();
        for p in &mut s.pools {
            if self.pool.as_ref().is_none_or(|n| &p.name == n) {
                self.key.set(p, v);
            }
        }
        s
    }

    /// The scenario's own setting: one value when every targeted pool agrees.
    pub fn current(&self, scenario: &Scenario) -> Option<Setting> {
        let mut it = self
            .targets(&scenario.pools)
            .map(|p| self.key.get(p, scenario));
        let first = it.next()?;
        it.all(|v| v == first).then_some(first)
    }

    /// The scenario's own setting in words (`0.5`, or per pool when they differ).
    pub fn current_text(&self, scenario: &Scenario) -> String {
        match self.current(scenario) {
            Some(v) => v.to_string(),
            None => self
                .targets(&scenario.pools)
                .map(|p| format!("{} {}", p.name, self.key.get(p, scenario)))
                .collect::<Vec<_>>()
                .join(", "),
        }
    }

    /// What is swept, in words.
    pub fn describe(&self) -> String {
        match &self.pool {
            Some(p) => format!("{} on NodePool {p}", self.key.name()),
            None => format!("{} on every NodePool", self.key.name()),
        }
    }
}

/// One row of a decision table: a setting and its runs, one per seed.
#[derive(Clone, Debug)]
pub struct Row {
    /// The value as given (`0.5`), with ` (current)` for the scenario's own.
    pub label: String,
    /// The value alone (`0.5`), or `None` for the current setting when it is not a swept one.
    pub value: Option<String>,
    /// The policy's runs, one per seed.
    pub runs: Vec<PolicyResult>,
}

/// The rows of one policy that reads the key: the current setting first.
#[derive(Clone, Debug)]
pub struct Table {
    /// Policy name.
    pub policy: String,
    /// Row 0 is the current setting.
    pub rows: Vec<Row>,
}

/// A whole sweep's results.
#[derive(Clone, Debug)]
pub struct SweepResult {
    /// Scenario name.
    pub scenario: String,
    /// What was swept.
    pub sweep: Sweep,
    /// The current setting in words.
    pub current: String,
    /// Seeds.
    pub seeds: Vec<u64>,
    /// Virtual seconds per run.
    pub virtual_seconds: i64,
    /// Wall seconds of the command.
    pub wall_seconds: f64,
    /// Threads used.
    pub threads: usize,
    /// Policies that read the key.
    pub tables: Vec<Table>,
    /// Policies that do not: run at the current setting only.
    pub others: Vec<PolicySummary>,
}

/// A run to make: the setting (`None`: the scenario as it is), the seed and the policies.
#[derive(Clone, Debug)]
pub struct Job {
    /// Index into the variants: 0 is the current setting, `i` the `i`-th distinct swept value.
    pub variant: usize,
    /// The scenario to run.
    pub scenario: Scenario,
    /// Seed.
    pub seed: u64,
    /// Policies to run.
    pub policies: Vec<String>,
}

/// The variants (row labels and values), with swept values equal to the current setting
/// folded into row 0.
fn variants(sweep: &Sweep, scenario: &Scenario) -> Vec<(String, Option<String>, Option<Setting>)> {
    let current = sweep.current(scenario);
    // Settings that differ per pool are spelled out in the heading, not in the row.
    let label = match current {
        Some(v) => format!("current ({v})"),
        None => "current".to_string(),
    };
    let mut out: Vec<(String, Option<String>, Option<Setting>)> = vec![(label, None, None)];
    for (text, v) in &sweep.values {
        if current == Some(*v) {
            out[0] = (format!("{text} (current)"), Some(text.clone()), None);
        } else {
            out.push((text.clone(), Some(text.clone()), Some(*v)));
        }
    }
    out
}

/// The runs a sweep needs: per seed, the current setting with every policy and each other
/// value with the policies that read the key.
pub fn jobs(sweep: &Sweep, scenario: &Scenario, policies: &[String], seeds: &[u64]) -> Vec<Job> {
    let readers: Vec<String> = policies
        .iter()
        .filter(|p| policy_reads(p, sweep.key))
        .cloned()
        .collect();
    let vars = variants(sweep, scenario);
    let mut out = Vec::new();
    for &seed in seeds {
        for (i, (_, _, v)) in vars.iter().enumerate() {
            let (scenario, policies) = match v {
                None => (scenario.clone(), policies.to_vec()),
                Some(_) if readers.is_empty() => continue,
                Some(v) => (sweep.apply(scenario, *v), readers.clone()),
            };
            out.push(Job {
                variant: i,
                scenario,
                seed,
                policies,
            });
        }
    }
    out
}

/// Gathers the runs of [`jobs`] (in the same order) into tables.
pub fn gather(
    sweep: &Sweep,
    scenario: &Scenario,
    jobs: &[Job],
    runs: Vec<crate::RunReport>,
    wall_seconds: f64,
    threads: usize,
) -> SweepResult {
    let vars = variants(sweep, scenario);
    let seeds: Vec<u64> = {
        let mut s: Vec<u64> = jobs.iter().map(|j| j.seed).collect();
        s.dedup();
        s
    };
    let current: Vec<crate::RunReport> = jobs
        .iter()
        .zip(&runs)
        .filter(|(j, _)| j.variant == 0)
        .map(|(_, r)| r.clone())
        .collect();
    let names: Vec<String> = current.first().map_or(vec![], |r| {
        r.policies.iter().map(|p| p.name.clone()).collect()
    });
    let runs_of = |variant: usize, name: &str| -> Vec<PolicyResult> {
        jobs.iter()
            .zip(&runs)
            .filter(|(j, _)| j.variant == variant)
            .filter_map(|(_, r)| r.policies.iter().find(|p| p.name == name).cloned())
            .collect()
    };
    let tables = names
        .iter()
        .filter(|n| policy_reads(n, sweep.key))
        .map(|n| Table {
            policy: n.clone(),
            rows: vars
                .iter()
                .enumerate()
                .map(|(i, (label, value, _))| Row {
                    label: label.clone(),
                    value: value.clone(),
                    runs: runs_of(i, n),
                })
                .collect(),
        })
        .collect();
    let summary = seeds::summarize(&current, wall_seconds, threads);
    SweepResult {
        scenario: scenario.name.clone(),
        sweep: sweep.clone(),
        current: sweep.current_text(scenario),
        seeds,
        virtual_seconds: summary.virtual_seconds,
        wall_seconds,
        threads,
        tables,
        others: summary
            .policies
            .into_iter()
            .filter(|p| !policy_reads(&p.name, sweep.key))
            .collect(),
    }
}

/// Runs the sweep's [`jobs`] on every core and [`gather`]s them; `run_one(scenario, seed,
/// policies)` makes one run and `done` is called after each (for progress).
///
/// # Errors
/// The first error of `run_one`.
pub fn run<E: Send>(
    sweep: &Sweep,
    scenario: &Scenario,
    policies: &[String],
    seeds: &[u64],
    run_one: impl Fn(&Scenario, u64, Vec<String>) -> Result<crate::RunReport, E> + Sync,
    done: impl Fn() + Sync,
) -> Result<SweepResult, E> {
    let start = std::time::Instant::now();
    let threads = seeds::threads();
    let jobs = jobs(sweep, scenario, policies, seeds);
    let runs = seeds::par_map(
        &jobs,
        threads,
        |j| run_one(&j.scenario, j.seed, j.policies.clone()),
        done,
    )
    .into_iter()
    .collect::<Result<Vec<_>, E>>()?;
    Ok(gather(
        sweep,
        scenario,
        &jobs,
        runs,
        start.elapsed().as_secs_f64(),
        threads,
    ))
}

fn refs(runs: &[PolicyResult]) -> Vec<&PolicyResult> {
    runs.iter().collect()
}

/// Paired difference of `metric`, row `a` minus row `b`.
fn diff(a: &Row, b: &Row, metric: Metric) -> Estimate {
    Estimate::paired(
        &column(&refs(&a.runs), metric),
        &column(&refs(&b.runs), metric),
    )
}

/// Whether row `a` dominates row `b`: better on cost or pending p95 (interval of `a - b`
/// below 0) and worse on neither (no interval above 0).
pub fn dominates(a: &Row, b: &Row) -> bool {
    let v = [Metric::Cost, Metric::PendingP95].map(|m| diff(a, b, m).verdict());
    v.contains(&Verdict::Below) && !v.contains(&Verdict::Above)
}

/// Per row, the labels of the rows that dominate it.
pub fn dominated_by(t: &Table) -> Vec<Vec<String>> {
    t.rows
        .iter()
        .map(|b| {
            t.rows
                .iter()
                .filter(|a| !std::ptr::eq(*a, b) && dominates(a, b))
                .map(|a| a.label.clone())
                .collect()
        })
        .collect()
}

/// The sweep's answer for one policy.
#[derive(Clone, Debug, PartialEq)]
pub enum Recommendation {
    /// Use this value (its text, `None` for a current setting that was not swept) because …
    Use(Option<String>, String),
    /// Cannot decide, because …
    CannotDecide(String),
}

impl std::fmt::Display for Recommendation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Recommendation::Use(_, why) => f.write_str(why),
            Recommendation::CannotDecide(why) => write!(f, "cannot decide: {why}"),
        }
    }
}

/// The recommendation from a policy's table (see the module documentation).
pub fn recommend(t: &Table) -> Recommendation {
    let n = t.rows.first().map_or(0, |r| r.runs.len());
    if n < 2 {
        return Recommendation::CannotDecide(format!(
            "{n} seed gives no interval; run with --seeds 10 or more"
        ));
    }
    let dom = dominated_by(t);
    let front: Vec<&Row> = t
        .rows
        .iter()
        .zip(&dom)
        .filter(|(_, d)| d.is_empty())
        .map(|(r, _)| r)
        .collect();
    if let [best] = front[..] {
        let what = if std::ptr::eq(best, &t.rows[0]) {
            format!("keep {}", best.label)
        } else {
            format!("use {}", best.label)
        };
        return Recommendation::Use(
            best.value.clone(),
            format!(
                "{what}: every other value is worse on cost or pending p95 and better on \
                 neither (paired 95 % intervals over {n} seeds)"
            ),
        );
    }
    // Several undominated values: a trade-off when two of them differ significantly.
    for a in &front {
        for b in &front {
            let c = diff(a, b, Metric::Cost);
            let w = diff(a, b, Metric::PendingP95);
            if c.verdict() == Verdict::Below && w.verdict() == Verdict::Above {
                return Recommendation::CannotDecide(format!(
                    "a trade-off: {} costs {}% against {} but its pending p95 is {} longer; \
                     choose on the frontier",
                    a.label,
                    Estimate::paired_percent(
                        &column(&refs(&a.runs), Metric::Cost),
                        &column(&refs(&b.runs), Metric::Cost)
                    )
                    .show_signed(1),
                    b.label,
                    show_secs(&w, false)
                ));
            }
        }
    }
    let labels: Vec<&str> = front.iter().map(|r| r.label.as_str()).collect();
    Recommendation::CannotDecide(format!(
        "{} are within each other's intervals on cost and pending p95 over {n} seeds \
         (more seeds may separate them)",
        labels.join(", ")
    ))
}

/// The table's columns: metric, header, decimals (seconds are formatted apart). The GPU-hours
/// idle on nodes no pod held a GPU of are what unneeded time and `consolidateAfter` cost.
const COLUMNS: [(Metric, &str, usize); 4] = [
    (Metric::PodsDisrupted, "pods disrupted", 0),
    (Metric::NodesLaunched, "nodes launched", 0),
    (Metric::GpuHoursRerun, "re-run GPU-h", 1),
    (Metric::GpuHoursIdleEmpty, "idle GPU-h, empty", 1),
];

/// The columns' cells, each right-aligned to its header's width (at least 13).
fn cells(est: impl Fn(Metric) -> Estimate) -> String {
    COLUMNS
        .iter()
        .map(|(m, h, d)| format!("{:>w$}", est(*m).show(*d), w = h.len().max(13)))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The columns' headers, aligned as [`cells`].
fn headers() -> String {
    COLUMNS
        .iter()
        .map(|(_, h, _)| format!("{:>w$}", h, w = h.len().max(13)))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The decision tables, the unaffected policies and the recommendation, as printed.
pub fn text(r: &SweepResult) -> String {
    let mut s = String::new();
    let n = r.seeds.len();
    let _ = writeln!(
        s,
        "sweep {} (current {}) · scenario {} · seeds {} ({n} runs per value) · {:.1} virtual hours · {:.1}s wall on {} threads",
        r.sweep.describe(),
        r.current,
        r.scenario,
        describe(&r.seeds),
        r.virtual_seconds as f64 / 3600.0,
        r.wall_seconds,
        r.threads
    );
    let _ = writeln!(
        s,
        "mean ±half-width of the 95 % interval (Student t); changes are paired by seed against the current setting"
    );
    for t in &r.tables {
        let dom = dominated_by(t);
        let _ = writeln!(s, "{}:", t.policy);
        let _ = writeln!(
            s,
            "  {:<16} {:>13} {:>28} {:>12} {:>18} {}  ",
            "value",
            "cost $",
            "cost vs current",
            "pending p95",
            "p95 vs current",
            headers()
        );
        let base = &t.rows[0];
        let cd = digits_for(Estimate::of(&column(&refs(&base.runs), Metric::Cost)).mean);
        for (i, row) in t.rows.iter().enumerate() {
            let (cost_vs, wait_vs) = if i == 0 {
                ("-".to_string(), "-".to_string())
            } else {
                let pct = Estimate::paired_percent(
                    &column(&refs(&row.runs), Metric::Cost),
                    &column(&refs(&base.runs), Metric::Cost),
                );
                (
                    format!(
                        "{} ({}%)",
                        diff(row, base, Metric::Cost).show_signed(cd),
                        pct.show_signed(1)
                    ),
                    show_secs(&diff(row, base, Metric::PendingP95), true),
                )
            };
            let est = |m: Metric| Estimate::of(&column(&refs(&row.runs), m));
            let mark = if dom[i].is_empty() {
                String::new()
            } else {
                format!("dominated by {}", dom[i].join(", "))
            };
            let _ = writeln!(
                s,
                "  {:<16} {:>13} {:>28} {:>12} {:>18} {}  {mark}",
                row.label,
                est(Metric::Cost).show(cd),
                cost_vs,
                show_secs(&est(Metric::PendingP95), false),
                wait_vs,
                cells(est),
            );
        }
    }
    if !r.others.is_empty() {
        let _ = writeln!(
            s,
            "not affected by {} (run once per seed, at the current setting):",
            r.sweep.key.name()
        );
        for p in &r.others {
            let _ = writeln!(
                s,
                "  {:<16} {:>13} {:>28} {:>12} {:>18} {}",
                p.name,
                p.estimate(Metric::Cost)
                    .show(digits_for(p.estimate(Metric::Cost).mean)),
                "",
                show_secs(&p.estimate(Metric::PendingP95), false),
                "",
                cells(|m| p.estimate(m)),
            );
        }
    }
    if let Some(t) = primary(r) {
        let _ = writeln!(s, "recommendation ({}): {}", t.policy, recommend(t));
    }
    s
}

/// The table the recommendation is for: gpu-autoscaler's, else the first policy reading the key.
pub fn primary(r: &SweepResult) -> Option<&Table> {
    r.tables
        .iter()
        .find(|t| t.policy == OURS)
        .or(r.tables.first())
}

/// The JSON document `--json` writes with `--sweep`.
pub fn to_json(r: &SweepResult) -> String {
    let mut policies = Vec::new();
    for t in &r.tables {
        let dom = dominated_by(t);
        let base = &t.rows[0];
        let values: Vec<Value> = t
            .rows
            .iter()
            .enumerate()
            .map(|(i, row)| {
                let mut m = Map::new();
                m.insert("value".into(), json!(row.value));
                m.insert("label".into(), json!(row.label));
                m.insert("current".into(), json!(i == 0));
                let cols = column_set(row);
                for (metric, e) in &cols {
                    put(&mut m, metric.key(), e);
                }
                m.insert(
                    "gpu_hours_useful".into(),
                    json!(Estimate::of(&column(&refs(&row.runs), Metric::GpuHoursUseful)).mean),
                );
                if i > 0 {
                    for (metric, _) in &cols {
                        put(
                            &mut m,
                            &format!("{}_change_vs_current", metric.key()),
                            &diff(row, base, *metric),
                        );
                    }
                    put(
                        &mut m,
                        "cost_change_vs_current_pct",
                        &Estimate::paired_percent(
                            &column(&refs(&row.runs), Metric::Cost),
                            &column(&refs(&base.runs), Metric::Cost),
                        ),
                    );
                }
                m.insert("dominated_by".into(), json!(dom[i]));
                Value::Object(m)
            })
            .collect();
        policies.push(json!({"name": t.policy, "reads_key": true, "values": values}));
    }
    for p in &r.others {
        let mut v = seeds::policy_json(p);
        if let Value::Object(m) = &mut v {
            m.insert("reads_key".into(), json!(false));
        }
        policies.push(v);
    }
    let rec = primary(r).map(|t| {
        let rec = recommend(t);
        json!({
            "policy": t.policy,
            "value": match &rec { Recommendation::Use(v, _) => json!(v.clone().unwrap_or_else(|| r.current.clone())), _ => Value::Null },
            "text": rec.to_string(),
        })
    });
    let doc = json!({
        "sweep": r.sweep.key.name(),
        "pool": r.sweep.pool,
        "scenario": r.scenario,
        "current": r.current,
        "seeds": r.seeds,
        "values": r.sweep.values.iter().map(|(t, _)| t.clone()).collect::<Vec<_>>(),
        "virtual_seconds": r.virtual_seconds,
        "wall_seconds": (r.wall_seconds * 1e3).round() / 1e3,
        "interval": "95 % Student t; changes paired by seed against the current setting",
        "policies": policies,
        "recommendation": rec,
    });
    format!("{doc:#}")
}

/// The metrics of a decision-table row with their estimates.
fn column_set(row: &Row) -> Vec<(Metric, Estimate)> {
    [
        Metric::Cost,
        Metric::PendingP95,
        Metric::PodsDisrupted,
        Metric::NodesLaunched,
        Metric::GpuHoursRerun,
        Metric::GpuHoursIdleEmpty,
    ]
    .into_iter()
    .map(|m| (m, Estimate::of(&column(&refs(&row.runs), m))))
    .collect()
}

/// The sweep page: the tables and the recommendation, and the cost against pending-p95 chart
/// with one point per value of each policy that reads the key and one per other policy.
pub fn to_html(r: &SweepResult) -> String {
    let mut h = report::page_head(&format!(
        "sweep of {} on {}",
        r.sweep.key.name(),
        r.scenario
    ));
    let _ = write!(
        h,
        "<h1>Sweep: {}</h1><p>Scenario {} · current setting {} · seeds {} · {:.1} virtual hours.</p>",
        report::esc(&r.sweep.describe()),
        report::esc(&r.scenario),
        report::esc(&r.current),
        describe(&r.seeds),
        r.virtual_seconds as f64 / 3600.0
    );
    if let Some(t) = primary(r) {
        let _ = write!(
            h,
            "<p><b>Recommendation ({}):</b> {}</p>",
            report::esc(&t.policy),
            report::esc(&recommend(t).to_string())
        );
    }
    let mut points = Vec::new();
    for t in &r.tables {
        for row in &t.rows {
            points.push(frontier::Point {
                label: row.label.clone(),
                series: t.policy.clone(),
                cost: Estimate::of(&column(&refs(&row.runs), Metric::Cost)),
                p95: Estimate::of(&column(&refs(&row.runs), Metric::PendingP95)),
            });
        }
    }
    for p in &r.others {
        points.push(frontier::Point {
            label: p.name.clone(),
            series: p.name.clone(),
            cost: p.estimate(Metric::Cost),
            p95: p.estimate(Metric::PendingP95),
        });
    }
    h.push_str(&frontier::chart(
        "Cost against pending p95 per value (lower left is better)",
        &points,
    ));
    let _ = writeln!(
        h,
        "<h2>Decision tables</h2><pre>{}</pre></body></html>",
        report::esc(&text(r))
    );
    h
}

#[cfg(test)]
mod tests;
