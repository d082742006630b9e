//! The GPU scenario suite (`simulate --suite`): the scenarios every policy change is measured
//! on, each over the same seeds for every policy, and one table of paired differences across
//! them (JSON too).
//!
//! Four scenarios: the bundled default day, the openb default pod list compressed 10x with its
//! departures, the Alibaba v2025 DLRM trace compressed 100x, and a sharing-heavy twelve hours
//! (`scenarios/sharing.yaml`: time-sliced notebooks, MIG inference, fractional shares, gangs).
//! The two traces are read at run time from a data directory (`../shared/data` by default)
//! and never shipped; a scenario whose trace is absent is reported as skipped, with the path
//! looked for, and the others still run.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::error::SimError;
use crate::seeds::{self, Metric, OURS, SeedSummary};
use crate::workload::Workload;
use crate::{RunOptions, RunReport, Scenario, openb_workload};

/// The sharing-heavy scenario's YAML.
pub const SHARING_SCENARIO_YAML: &str = include_str!("../scenarios/sharing.yaml");

/// Where the suite looks for its traces unless told: the shared data directory next to a
/// checkout.
pub const DEFAULT_DATA_DIR: &str = "../shared/data";

/// The openb pod list the suite replays, under the data directory.
pub const OPENB_TRACE: &str = "openb/openb_pod_list_default.csv";
/// Its compression: at 10x the replay covers about 358 virtual hours.
pub const OPENB_COMPRESSION: f64 = 10.0;
/// The DLRM trace, under the data directory.
pub const DLRM_TRACE: &str = "alibaba_gpu_v2025/disaggregated_DLRM_trace.csv";
/// Its compression.
pub const DLRM_COMPRESSION: f64 = 100.0;

/// One scenario of the suite.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Entry {
    /// The bundled default scenario (`scenarios/default.yaml`).
    Default,
    /// The openb default pod list, compressed [`OPENB_COMPRESSION`] times.
    Openb,
    /// The DLRM trace, compressed [`DLRM_COMPRESSION`] times, on the openb NodePools.
    Dlrm,
    /// `scenarios/sharing.yaml`.
    Sharing,
}

/// The suite, in the order it runs and prints.
pub const ENTRIES: [Entry; 4] = [Entry::Default, Entry::Openb, Entry::Dlrm, Entry::Sharing];

impl Entry {
    /// The name in tables and JSON.
    pub fn name(self) -> &'static str {
        match self {
            Entry::Default => "default",
            Entry::Openb => "openb-10x",
            Entry::Dlrm => "dlrm-100x",
            Entry::Sharing => "sharing",
        }
    }

    /// The trace file under `data`, for the trace scenarios.
    pub fn trace(self, data: &Path) -> Option<PathBuf> {
        match self {
            Entry::Openb => Some(data.join(OPENB_TRACE)),
            Entry::Dlrm => Some(data.join(DLRM_TRACE)),
            Entry::Default | Entry::Sharing => None,
        }
    }

    /// The scenario and, for the traces, the workload every seed replays (the seeds then vary
    /// the cloud: launch latencies, capacity errors, interruptions). `Ok(None)` when the trace
    /// is absent.
    ///
    /// # Errors
    /// [`SimError`] from the scenario parser or the trace loaders (file, line, column).
    pub fn load(self, data: &Path) -> Result<Option<(Scenario, Option<Workload>)>, SimError> {
        if let Some(t) = self.trace(data)
            && !t.is_file()
        {
            return Ok(None);
        }
        Ok(Some(match self {
            Entry::Default => (Scenario::default_scenario()?, None),
            Entry::Sharing => (
                Scenario::parse(Path::new("<embedded sharing.yaml>"), SHARING_SCENARIO_YAML)?,
                None,
            ),
            Entry::Openb => {
                let (mut s, w) =
                    openb_workload::replay(&data.join(OPENB_TRACE), OPENB_COMPRESSION)?;
                s.name = self.name().into();
                (s, Some(w))
            }
            Entry::Dlrm => {
                let mut s = Scenario::parse(
                    Path::new("<embedded openb.yaml>"),
                    openb_workload::OPENB_SCENARIO_YAML,
                )?;
                let (w, horizon) =
                    openb_workload::load_dlrm(&data.join(DLRM_TRACE), DLRM_COMPRESSION)?;
                s.duration_s = horizon;
                s.name = self.name().into();
                (s, Some(w))
            }
        }))
    }
}

/// One scenario's outcome.
#[derive(Clone, Debug)]
pub enum Outcome {
    /// Every seed ran.
    Ran(Box<SeedSummary>),
    /// Its trace is not at this path.
    Skipped(PathBuf),
}

/// The whole suite over its seeds.
#[derive(Clone, Debug)]
pub struct SuiteSummary {
    /// Seeds every scenario ran.
    pub seeds: Vec<u64>,
    /// Per scenario, in [`ENTRIES`] order.
    pub scenarios: Vec<(Entry, Outcome)>,
    /// Wall seconds of the whole suite.
    pub wall_seconds: f64,
}

/// Runs `entries` over `seeds` with `base`'s policies and hours (its seed is replaced by each
/// seed), seeds in parallel on every core. `done` is called after each (scenario, seed) run,
/// `finished` after each scenario with its outcome (a long suite can show each table as it
/// ends).
///
/// # Errors
/// The first loader or run error; an absent trace is not an error (it is skipped).
pub fn run(
    entries: &[Entry],
    data: &Path,
    seeds: &[u64],
    base: &RunOptions,
    done: impl Fn(Entry) + Sync,
    mut finished: impl FnMut(Entry, &Outcome),
) -> Result<SuiteSummary, SimError> {
    let start = std::time::Instant::now();
    let mut scenarios = Vec::new();
    for &e in entries {
        let Some((scenario, trace)) = e.load(data)? else {
            let path = e.trace(data).unwrap_or_default();
            let o = Outcome::Skipped(path);
            finished(e, &o);
            scenarios.push((e, o));
            continue;
        };
        let opts = |seed: u64| RunOptions {
            seed: Some(seed),
            ..base.clone()
        };
        let s = seeds::run_seeds(
            seeds,
            |seed| -> Result<RunReport, SimError> {
                match &trace {
                    Some(w) => crate::run_workload(&scenario, w, &opts(seed), &|_, _| {}),
                    None => crate::run(&scenario, &opts(seed), &|_, _| {}),
                }
            },
            || done(e),
        )?;
        let o = Outcome::Ran(Box::new(s));
        finished(e, &o);
        scenarios.push((e, o));
    }
    Ok(SuiteSummary {
        seeds: seeds.to_vec(),
        scenarios,
        wall_seconds: start.elapsed().as_secs_f64(),
    })
}

/// One scenario's table (as `simulate --seeds` prints it), or why it was skipped.
pub fn scenario_text(e: Entry, o: &Outcome) -> String {
    match o {
        Outcome::Ran(sum) => format!("== {} ==\n{}\n", e.name(), seeds::summary_text(sum)),
        Outcome::Skipped(p) => format!(
            "== {} == skipped: trace {} not found (pass --data DIR)\n\n",
            e.name(),
            p.display()
        ),
    }
}

/// The per-scenario tables ([`scenario_text`]), then [`paired_text`].
pub fn text(s: &SuiteSummary) -> String {
    let mut out: String = s
        .scenarios
        .iter()
        .map(|(e, o)| scenario_text(*e, o))
        .collect();
    out.push_str(&paired_text(s));
    out
}

/// One paired table across the suite: per scenario and competitor, its cost and pending p95
/// minus ours.
pub fn paired_text(s: &SuiteSummary) -> String {
    let mut out = String::new();
    let n = s.seeds.len();
    let _ = writeln!(
        out,
        "GPU suite · seeds {} ({n} per scenario) · {:.0}s wall · paired by seed, policy minus {OURS}, mean ±half-width of the 95 % interval",
        seeds::describe(&s.seeds),
        s.wall_seconds
    );
    let _ = writeln!(
        out,
        "{:<11} {:<16} {:>14} {:>13} {:>20} {:>26} {:>10} {:>10}",
        "scenario",
        "policy",
        "cost vs ours",
        "",
        "pending p95 vs ours",
        "",
        "GPU alloc",
        "pending@end"
    );
    for (e, o) in &s.scenarios {
        let Outcome::Ran(sum) = o else { continue };
        for p in &sum.policies {
            let alloc = format!("{:.1}%", p.estimate(Metric::GpuAllocation).mean * 100.0);
            let end = format!("{:.1}", p.estimate(Metric::PendingAtEnd).mean);
            let (cost, cv, wait, wv) = match (p.name == OURS, p.diff_percent(Metric::Cost)) {
                (false, Some(c)) => {
                    let w = p.diff(Metric::PendingP95).unwrap_or(c);
                    (
                        format!("{}%", c.show_signed(1)),
                        seeds::cost_verdict(&c).to_string(),
                        seeds::show_secs(&w, true),
                        seeds::wait_verdict(&w).to_string(),
                    )
                }
                _ => (
                    "-".into(),
                    String::new(),
                    seeds::show_secs(&p.estimate(Metric::PendingP95), false),
                    "(ours, absolute)".into(),
                ),
            };
            let _ = writeln!(
                out,
                "{:<11} {:<16} {:>14} {:>13} {:>20} {:>26} {:>10} {:>10}",
                e.name(),
                p.name,
                cost,
                cv,
                wait,
                wv,
                alloc,
                end
            );
        }
    }
    out
}

/// The JSON document: per scenario, `simulate --seeds`'s document (or `skipped` with the
/// trace path).
pub fn to_json(s: &SuiteSummary) -> String {
    let scenarios: Vec<Value> = s
        .scenarios
        .iter()
        .map(|(e, o)| match o {
            Outcome::Ran(sum) => {
                let doc: Value = serde_json::from_str(&seeds::to_json(sum)).unwrap_or(Value::Null);
                json!({"name": e.name(), "result": doc})
            }
            Outcome::Skipped(p) => {
                json!({"name": e.name(), "skipped": format!("trace {} not found", p.display())})
            }
        })
        .collect();
    let doc = json!({
        "suite": "gpu",
        "seeds": s.seeds,
        "wall_seconds": (s.wall_seconds * 1e3).round() / 1e3,
        "interval": "95 % Student t; differences paired by seed, policy minus gpu-autoscaler",
        "scenarios": scenarios,
    });
    format!("{doc:#}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sharing_scenario_parses_and_uses_every_kind_of_sharing() {
        let s = Scenario::parse(Path::new("sharing.yaml"), SHARING_SCENARIO_YAML).unwrap();
        let w = crate::workload::generate(&s, 1, s.duration_s, 100_000).unwrap();
        let t = |pred: &dyn Fn(&autoscaler_core::model::Pod) -> bool| {
            w.pods
                .iter()
                .any(|p| pred(&w.templates[p.template as usize]))
        };
        assert!(t(&|p| p.gpu_share.is_some()), "fractional shares");
        assert!(
            t(&|p| p.requests.extended.keys().any(|k| k.contains("mig-"))),
            "MIG slices"
        );
        assert!(w.pods.iter().any(|p| p.group.is_some()), "gangs");
        assert!(s.pools.iter().any(|p| p.name == "notebooks"));
    }

    #[test]
    fn an_absent_trace_is_skipped_by_name_and_the_rest_runs() {
        let dir = Path::new("/nonexistent-gpu-suite-data");
        let s = run(
            &[Entry::Openb, Entry::Sharing],
            dir,
            &[1],
            &RunOptions {
                policies: Some(vec![OURS.into()]),
                hours: Some(1.0),
                ..RunOptions::default()
            },
            |_| {},
            |_, _| {},
        )
        .unwrap();
        match &s.scenarios[0] {
            (Entry::Openb, Outcome::Skipped(p)) => assert!(p.ends_with(OPENB_TRACE)),
            other => panic!("openb not skipped: {other:?}"),
        }
        let Outcome::Ran(sum) = &s.scenarios[1].1 else {
            panic!("sharing did not run")
        };
        assert_eq!(sum.policies.len(), 1);
        let t = text(&s);
        assert!(t.contains("openb-10x == skipped: trace"), "{t}");
        assert!(t.contains("sharing"), "{t}");
        let j: Value = serde_json::from_str(&to_json(&s)).unwrap();
        assert_eq!(j["scenarios"][0]["name"], "openb-10x");
        assert!(j["scenarios"][0]["skipped"].is_string());
        assert!(j["scenarios"][1]["result"]["policies"][0]["cost_mean"].is_number());
    }
}
