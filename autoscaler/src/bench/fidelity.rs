//! `gpu-autoscaler bench fidelity`: the same seeded scenarios through the simulator and through
//! the controller binary, and how far their decisions agree.
//!
//! Each case is a scenario file (`bench/fidelity/*.yaml`, NodePools written as NodePool
//! objects so both sides get the very same ones): `default-slice` (the first hour of the
//! bundled default scenario), `openb-slice` (a compressed slice of an openb pod list, skipped
//! when the trace is absent) and `gangs` (gangs and ProvisioningRequests). Both sides get the
//! same catalog, NodePools and arrivals; cloud randomness (capacity errors, interruptions,
//! launch jitter) is off, since the simulator's draws cannot be replayed on kwok.
//!
//! 1. **Simulator**: the `gpu-autoscaler` policy through the simulator's public entry point
//!    ([`autoscaler_sim::run_workload`]), as `simulate` runs it.
//! 2. **Controller**: `gpu-autoscaler run --provider kwok` against the fake API server with its
//!    harness scheduler ([`replay`]). Virtual time runs `--compression` times faster than the
//!    real clock: pods are created at arrival / compression, deleted when their runtime is up
//!    (or at their scheduled deletion), recreated when evicted (as their owner would), and
//!    every controller interval, kwok delay and NodePool duration is the simulator's divided by
//!    the compression. ProvisioningRequests are created with their PodTemplate and their pods
//!    once Provisioned (Kueue's part).
//!
//! **Decisions compared** (virtual seconds): NodeClaims launched (pool and instance type),
//! nodes removed (pool and instance type: disruption commands and empty-node deletions end
//! there), and pods bound (by name). A decision of one side agrees with one of the same kind
//! and key on the other side within `--tolerance`; agreement is twice the matched decisions
//! over all decisions of both sides. Node-hours are summed over the run's nodes, from launch
//! to removal or the end. The first decision without a partner is named.

mod objects;
mod replay;

use std::collections::BTreeMap;
use std::path::PathBuf;

use autoscaler::controller::Result;
use autoscaler_sim::workload::Workload;
use autoscaler_sim::{PolicyResult, RunOptions, Scenario};
use nodepools::NodePool;
use serde::Serialize;

use super::e2e::cfg;

/// The first hour of the bundled default scenario.
pub(crate) const DEFAULT_SLICE: &str = include_str!("fidelity/default-slice.yaml");
/// The openb NodePools, for a slice of an openb pod list.
pub(crate) const OPENB_SLICE: &str = include_str!("fidelity/openb-slice.yaml");
/// Gangs and ProvisioningRequests.
pub(crate) const GANGS: &str = include_str!("fidelity/gangs.yaml");

/// The cases, by name.
pub(crate) const CASES: [(&str, &str); 3] = [
    ("default-slice", DEFAULT_SLICE),
    ("openb-slice", OPENB_SLICE),
    ("gangs", GANGS),
];

/// Options of `bench fidelity`.
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct FidelityArgs {
    /// Only this case (repeatable): default-slice, openb-slice, gangs.
    #[arg(long = "case")]
    pub(crate) cases: Vec<String>,
    /// Virtual seconds per real second. The controller counts its disruption timers in whole
    /// real seconds, so one real second is this many virtual ones of resolution: at 30 the
    /// simulator's 15 s validation delay was half a second, which the controller took as none
    /// (now as one, 30 virtual seconds).
    #[arg(long, default_value_t = 15.0)]
    pub(crate) compression: f64,
    /// Virtual length of each case instead of its scenario's duration.
    #[arg(long, value_parser = autoscaler::controller::settings::parse_duration)]
    pub(crate) duration: Option<std::time::Duration>,
    /// Two decisions of the same kind and key agree when this close in virtual time.
    #[arg(long, default_value = "2m", value_parser = autoscaler::controller::settings::parse_duration)]
    pub(crate) tolerance: std::time::Duration,
    /// The openb pod list of `openb-slice` (default:
    /// `../shared/data/openb/openb_pod_list_default.csv`, or under `$GPU_AUTOSCALER_SHARED_DATA`).
    #[arg(long)]
    pub(crate) openb: Option<PathBuf>,
    /// The openb trace's times are divided by this.
    #[arg(long, default_value_t = 20.0)]
    pub(crate) openb_compression: f64,
    /// Where the openb slice starts in the trace (trace time; the default is its busiest
    /// stretch, near the end of `openb_pod_list_default.csv`).
    #[arg(long, default_value = "3550h", value_parser = autoscaler::controller::settings::parse_duration)]
    pub(crate) openb_start: std::time::Duration,
    /// Also write the result as JSON here.
    #[arg(long)]
    pub(crate) json: Option<PathBuf>,
    /// Put every decision of both sides in the JSON (`decisions` of each case).
    #[arg(long)]
    pub(crate) decisions: bool,
    /// The fake-apiserver binary (default: next to this executable).
    #[arg(long)]
    pub(crate) fake_apiserver: Option<PathBuf>,
    /// Keep each case's working directory (the controller's log, the CRDs, the kubeconfig)
    /// and print where it is, instead of removing it at the end.
    #[arg(long)]
    pub(crate) keep: bool,
    /// Use a running fake API server (with its harness scheduler and the kwok and NodePool
    /// CRDs; one case only) through this kubeconfig instead of starting one.
    #[arg(long)]
    pub(crate) kubeconfig: Option<PathBuf>,
}

/// The result.
#[derive(Clone, Debug, Default, Serialize)]
pub(crate) struct FidelityResult {
    /// Cases run (skipped ones excepted).
    pub(crate) scenarios: Vec<String>,
    /// Over every case: twice the matched decisions over all decisions of both sides.
    pub(crate) decision_agreement: f64,
    /// Over every case: |controller - simulator| / simulator node-hours.
    pub(crate) node_hours_divergence: f64,
    /// Per case.
    pub(crate) cases: Vec<CaseResult>,
}

/// One case.
#[derive(Clone, Debug, Default, Serialize)]
pub(crate) struct CaseResult {
    /// Case name.
    pub(crate) name: String,
    /// Why it was skipped, when it was.
    pub(crate) skipped: Option<String>,
    /// Seed.
    pub(crate) seed: u64,
    /// Virtual seconds.
    pub(crate) virtual_seconds: i64,
    /// Virtual seconds per real second.
    pub(crate) compression: f64,
    /// Pods created (simulator side).
    pub(crate) pods: usize,
    /// The simulator's figures.
    pub(crate) simulator: Side,
    /// The controller's figures.
    pub(crate) controller: Side,
    /// Decisions of both sides that found a partner on the other.
    pub(crate) matched: usize,
    /// Twice the matched decisions over all decisions of both sides (1 when neither decided).
    pub(crate) decision_agreement: f64,
    /// Per kind (`launch`, `removal`, `bound`): the agreement.
    pub(crate) agreement_by_kind: BTreeMap<String, f64>,
    /// |controller - simulator| / simulator node-hours.
    pub(crate) node_hours_divergence: f64,
    /// The earliest decision without a partner, in words.
    pub(crate) first_difference: Option<String>,
    /// Per minute of virtual time with a launch: `pool/type` to count, each side.
    pub(crate) launches_per_minute: BTreeMap<i64, BTreeMap<String, (usize, usize)>>,
    /// Wall seconds of the controller's run.
    pub(crate) wall_seconds: f64,
    /// With `--decisions`: every decision, `[t, kind, key, pods]`, of the simulator and the
    /// controller (`pods`: for a launch, the pods first bound on the node).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) decisions: Option<[Vec<DecisionRow>; 2]>,
}

/// One decision in the JSON: virtual second, kind, key, and a launch's pods.
pub(crate) type DecisionRow = (i64, &'static str, String, Vec<String>);

/// One side's decisions, counted.
#[derive(Clone, Debug, Default, Serialize)]
pub(crate) struct Side {
    /// NodeClaims launched.
    pub(crate) launches: usize,
    /// Nodes removed.
    pub(crate) removals: usize,
    /// Pods bound (at least once).
    pub(crate) pods_bound: usize,
    /// Node-hours.
    pub(crate) node_hours: f64,
}

/// What a decision did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub(crate) enum Kind {
    /// A node launched.
    Launch,
    /// A node removed.
    Removal,
    /// A pod bound.
    Bound,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Kind::Launch => "launch",
            Kind::Removal => "removal",
            Kind::Bound => "bound",
        }
    }
}

/// One decision at a virtual second: kind and key (`pool/type` or the pod's name).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Decision {
    /// Virtual seconds.
    pub(crate) t: i64,
    /// Kind.
    pub(crate) kind: Kind,
    /// `pool/type` for nodes, the pod's name for binds.
    pub(crate) key: String,
    /// For a launch: the pods first bound on the node, in the order they were (what the
    /// launch was for, as far as the cluster shows); empty otherwise.
    pub(crate) pods: Vec<String>,
}

/// A node of one side: `pool/type`, launched, removed (virtual seconds).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct NodeSpan {
    /// `pool/type`.
    pub(crate) key: String,
    /// Launched.
    pub(crate) launched: i64,
    /// Removed, if it was.
    pub(crate) gone: Option<i64>,
    /// The pods first bound on it, in the order they were.
    pub(crate) pods: Vec<String>,
}

/// One side's run: its nodes and the pods it bound (name, first bind).
#[derive(Clone, Debug, Default)]
pub(crate) struct Timeline {
    /// Every node.
    pub(crate) nodes: Vec<NodeSpan>,
    /// Pods bound and when first.
    pub(crate) bound: Vec<(String, i64)>,
}

impl Timeline {
    fn decisions(&self, horizon: i64) -> Vec<Decision> {
        let mut out = Vec::new();
        for n in &self.nodes {
            if n.launched <= horizon {
                out.push(Decision {
                    t: n.launched,
                    kind: Kind::Launch,
                    key: n.key.clone(),
                    pods: n.pods.clone(),
                });
            }
            if let Some(g) = n.gone.filter(|g| *g <= horizon) {
                out.push(Decision {
                    t: g,
                    kind: Kind::Removal,
                    key: n.key.clone(),
                    pods: Vec::new(),
                });
            }
        }
        for (p, t) in &self.bound {
            if *t <= horizon {
                out.push(Decision {
                    t: *t,
                    kind: Kind::Bound,
                    key: p.clone(),
                    pods: Vec::new(),
                });
            }
        }
        out.sort();
        out
    }

    fn node_hours(&self, horizon: i64) -> f64 {
        self.nodes
            .iter()
            .filter(|n| n.launched < horizon)
            .map(|n| (n.gone.unwrap_or(horizon).min(horizon) - n.launched).max(0) as f64)
            .sum::<f64>()
            / 3600.0
    }

    fn side(&self, horizon: i64) -> Side {
        let d = self.decisions(horizon);
        let count = |k: Kind| d.iter().filter(|x| x.kind == k).count();
        Side {
            launches: count(Kind::Launch),
            removals: count(Kind::Removal),
            pods_bound: count(Kind::Bound),
            node_hours: self.node_hours(horizon),
        }
    }
}

/// The simulator's run as a timeline: its node records and first binds.
pub(crate) fn sim_timeline(r: &PolicyResult, w: &Workload) -> Timeline {
    let bound_at: BTreeMap<usize, i64> = r.first_bound.iter().copied().collect();
    let mut first_on: Vec<Vec<(i64, &str)>> = vec![Vec::new(); r.node_records.len()];
    for (p, n) in &r.first_node {
        if let Some(on) = first_on.get_mut(*n) {
            on.push((bound_at.get(p).copied().unwrap_or(0), &w.pods[*p].name));
        }
    }
    Timeline {
        nodes: r
            .node_records
            .iter()
            .zip(first_on)
            .map(|(n, mut on)| NodeSpan {
                key: format!("{}/{}", n.pool, n.instance_type),
                launched: n.launched_at,
                gone: n.gone_at,
                pods: {
                    on.sort();
                    on.into_iter().map(|(_, p)| p.to_string()).collect()
                },
            })
            .collect(),
        bound: r
            .first_bound
            .iter()
            .map(|(p, t)| (w.pods[*p].name.clone(), *t))
            .collect(),
    }
}

/// How far two timelines agree.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Comparison {
    /// Decisions with a partner, both sides.
    pub(crate) matched: usize,
    /// Decisions, both sides.
    pub(crate) total: usize,
    /// Per kind: (matched, total).
    pub(crate) by_kind: BTreeMap<Kind, (usize, usize)>,
    /// The earliest decision without a partner.
    pub(crate) first_difference: Option<String>,
}

impl Comparison {
    fn agreement(matched: usize, total: usize) -> f64 {
        if total == 0 {
            1.0
        } else {
            matched as f64 / total as f64
        }
    }
}

/// Pairs each decision of `sim` with the earliest unpaired one of the same kind and key in
/// `ctrl` within `tolerance` virtual seconds (both in time order, so pairing is greedy and
/// order-preserving), and names the earliest decision left without a partner.
pub(crate) fn compare(sim: &[Decision], ctrl: &[Decision], tolerance: i64) -> Comparison {
    let mut by_key: BTreeMap<(Kind, &str), Vec<(&Decision, bool)>> = BTreeMap::new();
    for d in ctrl {
        by_key
            .entry((d.kind, d.key.as_str()))
            .or_default()
            .push((d, false));
    }
    let mut sim_unmatched: Vec<&Decision> = Vec::new();
    let mut c = Comparison::default();
    for d in sim {
        let slot = by_key.get_mut(&(d.kind, d.key.as_str())).and_then(|v| {
            v.iter_mut()
                .find(|(x, used)| !used && (x.t - d.t).abs() <= tolerance)
        });
        let e = c.by_kind.entry(d.kind).or_default();
        e.1 += 1;
        match slot {
            Some(s) => {
                s.1 = true;
                e.0 += 1;
            }
            None => sim_unmatched.push(d),
        }
    }
    let mut ctrl_unmatched: Vec<&Decision> = Vec::new();
    for ((kind, _), v) in &by_key {
        for (d, used) in v {
            let e = c.by_kind.entry(*kind).or_default();
            e.1 += 1;
            if *used {
                e.0 += 1;
            } else {
                ctrl_unmatched.push(d);
            }
        }
    }
    c.matched = c.by_kind.values().map(|(m, _)| m).sum();
    c.total = c.by_kind.values().map(|(_, t)| t).sum();
    let words = |d: &Decision, side: &str, other: &str| {
        let verb = match d.kind {
            Kind::Launch => "launched",
            Kind::Removal => "removed",
            Kind::Bound => "bound",
        };
        let pods = if d.pods.is_empty() {
            String::new()
        } else {
            format!(" (first bound there: {})", d.pods.join(", "))
        };
        (
            d.t,
            format!(
                "at {}s the {side} {verb} {}{pods} and the {other} did not within {tolerance}s",
                d.t, d.key
            ),
        )
    };
    let first_sim = sim_unmatched
        .first()
        .map(|d| words(d, "simulator", "controller"));
    ctrl_unmatched.sort();
    let first_ctrl = ctrl_unmatched
        .first()
        .map(|d| words(d, "controller", "simulator"));
    c.first_difference = match (first_sim, first_ctrl) {
        (Some(a), Some(b)) => Some(if a.0 <= b.0 { a.1 } else { b.1 }),
        (a, b) => a.or(b).map(|x| x.1),
    };
    c
}

/// The NodePool objects of a case's scenario text.
///
/// # Errors
/// When the text has no `nodePools` list of NodePools.
pub(crate) fn node_pools(text: &str) -> Result<Vec<NodePool>> {
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Pools {
        node_pools: Vec<NodePool>,
    }
    let p: Pools = serde_norway::from_str(text).map_err(|e| cfg(format!("nodePools: {e}")))?;
    Ok(p.node_pools)
}

fn shared_data() -> PathBuf {
    std::env::var_os("GPU_AUTOSCALER_SHARED_DATA")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("../shared/data"))
}

/// Keeps the pods of `w` created from virtual second `start` on, shifted to start at 0 (the
/// slice starts from an empty cluster). For traces without groups, budgets or existing nodes.
fn window(w: &mut Workload, start: i64) {
    w.pods
        .retain(|p| p.arrival >= start && p.group.is_none() && p.start_on.is_none());
    for p in &mut w.pods {
        p.arrival -= start;
        p.delete_at = p.delete_at.map(|d| d - start);
    }
}

/// A case's scenario and workload, or why it is skipped.
fn load_case(
    name: &str,
    text: &str,
    args: &FidelityArgs,
) -> Result<std::result::Result<(Scenario, Workload), String>> {
    let sim_err = |e: autoscaler_sim::SimError| cfg(format!("case {name}: {e}"));
    if !text.lines().any(|l| l.trim() == "catalog: aws") {
        return Err(cfg(format!(
            "case {name}: the controller side offers the embedded AWS catalog; the scenario must say `catalog: aws`"
        )));
    }
    let mut s = Scenario::parse(std::path::Path::new(name), text).map_err(sim_err)?;
    if let Some(d) = args.duration {
        s.duration_s = d.as_secs().max(1) as i64;
    }
    s.policies = vec!["gpu-autoscaler".into()];
    let w = if name == "openb-slice" {
        let path = args
            .openb
            .clone()
            .unwrap_or_else(|| shared_data().join("openb/openb_pod_list_default.csv"));
        if !path.exists() {
            return Ok(Err(format!("{} is absent", path.display())));
        }
        let o = autoscaler_sim::openb_workload::OpenbOptions {
            compression: args.openb_compression,
            fgd_share: None,
            fgd_interval_s: 1.0,
            reference_nodes: None,
            seed: s.seed,
        };
        let mut w = autoscaler_sim::openb_workload::load(&path, &o, &s.pools)
            .map_err(sim_err)?
            .0;
        window(
            &mut w,
            (args.openb_start.as_secs_f64() / args.openb_compression) as i64,
        );
        w
    } else {
        autoscaler_sim::workload::generate(&s, s.seed, s.duration_s, 100_000).map_err(sim_err)?
    };
    if !w.pods.iter().any(|p| p.arrival < s.duration_s) {
        return Ok(Err("no pod arrives in the slice".into()));
    }
    Ok(Ok((s, w)))
}

/// Runs the benchmark (blocking).
///
/// # Errors
/// Unknown case names, scenarios that do not load, and failures to start or talk to the fake
/// API server or the controller.
pub(crate) fn run(args: FidelityArgs) -> Result<FidelityResult> {
    if !(args.compression >= 1.0 && args.compression.is_finite()) {
        return Err(cfg("--compression must be a number of at least 1"));
    }
    if !(args.openb_compression > 0.0 && args.openb_compression.is_finite()) {
        return Err(cfg("--openb-compression must be a positive number"));
    }
    for c in &args.cases {
        if !CASES.iter().any(|(n, _)| n == c) {
            return Err(cfg(format!(
                "--case {c:?}: unknown (known: default-slice, openb-slice, gangs)"
            )));
        }
    }
    if args.kubeconfig.is_some() && args.cases.len() != 1 {
        return Err(cfg("--kubeconfig runs one case: name it with --case"));
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| cfg(format!("starting the async runtime: {e}")))?;
    let tolerance = args.tolerance.as_secs() as i64;
    let mut result = FidelityResult::default();
    let (mut matched, mut total, mut sim_h, mut ctrl_h) = (0, 0, 0.0, 0.0);
    for (name, text) in CASES {
        if !args.cases.is_empty() && !args.cases.iter().any(|c| c == name) {
            continue;
        }
        let (scenario, workload) = match load_case(name, text, &args)? {
            Ok(x) => x,
            Err(why) => {
                eprintln!("SKIPPED case {name}: {why}");
                result.cases.push(CaseResult {
                    name: name.into(),
                    skipped: Some(why),
                    ..CaseResult::default()
                });
                continue;
            }
        };
        let horizon = scenario.duration_s;
        eprintln!(
            "case {name}: {} pods over {horizon} virtual seconds; simulating",
            workload.pods.iter().filter(|p| p.arrival < horizon).count()
        );
        let report =
            autoscaler_sim::run_workload(&scenario, &workload, &RunOptions::default(), &|_, _| {})
                .map_err(|e| cfg(format!("case {name}: {e}")))?;
        let sim = sim_timeline(&report.policies[0], &workload);
        eprintln!(
            "case {name}: running the controller for {:.0} s",
            horizon as f64 / args.compression
        );
        let pools = node_pools(text)?;
        let run = rt.block_on(super::e2e::until_signal(replay::run(
            &args, &scenario, &workload, &pools,
        )))?;
        let sd = sim.decisions(horizon);
        let cd = run.timeline.decisions(horizon);
        let cmp = compare(&sd, &cd, tolerance);
        let (s_side, c_side) = (sim.side(horizon), run.timeline.side(horizon));
        let div = if s_side.node_hours > 0.0 {
            (c_side.node_hours - s_side.node_hours).abs() / s_side.node_hours
        } else if c_side.node_hours > 0.0 {
            1.0
        } else {
            0.0
        };
        let mut per_minute: BTreeMap<i64, BTreeMap<String, (usize, usize)>> = BTreeMap::new();
        for (side, ds) in [(0, &sd), (1, &cd)] {
            for d in ds.iter().filter(|d| d.kind == Kind::Launch) {
                let e = per_minute
                    .entry(d.t / 60)
                    .or_default()
                    .entry(d.key.clone())
                    .or_default();
                if side == 0 {
                    e.0 += 1;
                } else {
                    e.1 += 1;
                }
            }
        }
        matched += cmp.matched;
        total += cmp.total;
        sim_h += s_side.node_hours;
        ctrl_h += c_side.node_hours;
        result.scenarios.push(name.into());
        result.cases.push(CaseResult {
            name: name.into(),
            skipped: None,
            seed: scenario.seed,
            virtual_seconds: horizon,
            compression: args.compression,
            pods: workload.pods.iter().filter(|p| p.arrival < horizon).count(),
            simulator: s_side,
            controller: c_side,
            matched: cmp.matched,
            decision_agreement: Comparison::agreement(cmp.matched, cmp.total),
            agreement_by_kind: cmp
                .by_kind
                .iter()
                .map(|(k, (m, t))| (k.as_str().to_string(), Comparison::agreement(*m, *t)))
                .collect(),
            node_hours_divergence: div,
            first_difference: cmp.first_difference,
            launches_per_minute: per_minute,
            wall_seconds: run.wall_seconds,
            decisions: args.decisions.then(|| {
                [&sd, &cd].map(|ds| {
                    ds.iter()
                        .map(|d| (d.t, d.kind.as_str(), d.key.clone(), d.pods.clone()))
                        .collect()
                })
            }),
        });
    }
    result.decision_agreement = Comparison::agreement(matched, total);
    result.node_hours_divergence = if sim_h > 0.0 {
        (ctrl_h - sim_h).abs() / sim_h
    } else {
        0.0
    };
    print_table(&result);
    let text = serde_json::to_string_pretty(&result).expect("serializable");
    if let Some(path) = &args.json {
        std::fs::write(path, &text).map_err(|e| cfg(format!("writing {}: {e}", path.display())))?;
    }
    Ok(result)
}

fn print_table(r: &FidelityResult) {
    println!(
        "{:<15}{:>9}{:>11}{:>11}{:>11}{:>12}{:>12}{:>11}",
        "case", "pods", "launches", "removals", "bound", "node-hours", "agreement", "nh diverg"
    );
    for c in &r.cases {
        if let Some(why) = &c.skipped {
            println!("{:<15}skipped: {why}", c.name);
            continue;
        }
        for (who, s) in [("sim", &c.simulator), ("controller", &c.controller)] {
            println!(
                "{:<15}{:>9}{:>11}{:>11}{:>11}{:>12.2}{:>12}{:>11}",
                format!("{} {who}", if who == "sim" { &c.name } else { "" }),
                if who == "sim" {
                    c.pods.to_string()
                } else {
                    String::new()
                },
                s.launches,
                s.removals,
                s.pods_bound,
                s.node_hours,
                if who == "sim" {
                    format!("{:.3}", c.decision_agreement)
                } else {
                    String::new()
                },
                if who == "sim" {
                    format!("{:.1} %", c.node_hours_divergence * 100.0)
                } else {
                    String::new()
                },
            );
        }
        if let Some(d) = &c.first_difference {
            println!("  first difference: {d}");
        }
    }
    println!(
        "overall: decision agreement {:.3}, node-hours divergence {:.1} %",
        r.decision_agreement,
        r.node_hours_divergence * 100.0
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(t: i64, kind: Kind, key: &str) -> Decision {
        Decision {
            pods: Vec::new(),
            t,
            kind,
            key: key.into(),
        }
    }

    #[test]
    fn decisions_pair_within_the_tolerance_and_the_first_difference_is_named() {
        let sim = vec![
            d(0, Kind::Launch, "cpu/m6i.large"),
            d(60, Kind::Bound, "web-0"),
            d(300, Kind::Launch, "gpu/g6.xlarge"),
        ];
        let ctrl = vec![
            d(30, Kind::Launch, "cpu/m6i.large"),
            d(100, Kind::Bound, "web-0"),
            d(500, Kind::Launch, "gpu/g6.xlarge"),
            d(510, Kind::Launch, "gpu/g6.2xlarge"),
        ];
        let c = compare(&sim, &ctrl, 120);
        assert_eq!((c.matched, c.total), (4, 7));
        assert_eq!(c.by_kind[&Kind::Launch], (2, 5));
        assert_eq!(
            c.first_difference.as_deref(),
            Some(
                "at 300s the simulator launched gpu/g6.xlarge and the controller did not within 120s"
            )
        );
        let same = compare(&sim, &sim, 0);
        assert_eq!(
            (same.matched, same.total, same.first_difference),
            (6, 6, None)
        );
        // A launch without a partner names the pods first bound on its node.
        let mut extra = d(100, Kind::Launch, "gpu/g4dn.4xlarge");
        extra.pods = vec!["p-1".into(), "p-2".into()];
        let c = compare(&sim, &[&sim[..], &[extra]].concat(), 120);
        assert_eq!(
            c.first_difference.as_deref(),
            Some(
                "at 100s the controller launched gpu/g4dn.4xlarge (first bound there: p-1, p-2) and the simulator did not within 120s"
            )
        );
    }

    #[test]
    fn the_default_slice_has_the_default_scenarios_pools() {
        let default = Scenario::default_scenario().unwrap();
        let slice = Scenario::parse(std::path::Path::new("default-slice"), DEFAULT_SLICE).unwrap();
        assert_eq!(default.pools.len(), slice.pools.len());
        for (a, b) in default.pools.iter().zip(&slice.pools) {
            assert_eq!(a.name, b.name);
            assert_eq!(a.weight, b.weight, "{}", a.name);
            assert_eq!(a.taints, b.taints, "{}", a.name);
            assert_eq!(a.requirements, b.requirements, "{}", a.name);
            assert_eq!(a.sharing, b.sharing, "{}", a.name);
            assert_eq!(a.limits, b.limits, "{}", a.name);
            assert_eq!(a.disruption, b.disruption, "{}", a.name);
        }
        assert_eq!(default.workloads.len(), slice.workloads.len());
    }

    /// The simulator's scheduler binds a gang all or nothing; a member bound on trial and
    /// rolled back (the rest did not fit) must not count as bound. In `gangs`, gang-1 and
    /// gang-2 arrive together and one member of each fitted an existing node: the simulator's
    /// timeline had them bound 140 virtual seconds before the rest of their gang.
    #[test]
    fn the_simulators_gang_members_are_first_bound_together() {
        let s = Scenario::parse(std::path::Path::new("gangs"), GANGS).unwrap();
        let w = autoscaler_sim::workload::generate(&s, s.seed, s.duration_s, 100_000).unwrap();
        let r = autoscaler_sim::run_workload(&s, &w, &RunOptions::default(), &|_, _| {}).unwrap();
        let bound: BTreeMap<usize, i64> = r.policies[0].first_bound.iter().copied().collect();
        let mut gangs = 0;
        for g in w.groups.iter().filter(|g| g.provisioning_request.is_none()) {
            let times: Vec<Option<&i64>> = g
                .members
                .iter()
                .map(|m| bound.get(&(*m as usize)))
                .collect();
            if times.iter().all(Option::is_none) {
                continue;
            }
            gangs += 1;
            assert!(
                times.windows(2).all(|t| t[0] == t[1]),
                "gang {}: members first bound at {times:?}",
                g.name
            );
        }
        assert!(gangs >= 5, "only {gangs} gangs bound");
    }
}
