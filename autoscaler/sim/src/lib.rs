//! `autoscaler-sim`: the discrete-event simulator of gpu-autoscaler, and the loaders of the
//! public cluster traces it and the benchmarks replay.
//!
//! A [`scenario::Scenario`] (YAML: NodePools, catalog, cluster timings, workload generators)
//! becomes a [`workload::Workload`] (every pod with its arrival and runtime, drawn once from a
//! seeded generator), which [`run`] replays against each policy on a virtual clock
//! ([`engine`]): this project's planning core, and documented models of Karpenter and the
//! Cluster Autoscaler ([`baselines`]). Pods are bound by a simulated kube-scheduler
//! ([`scheduler`]) written apart from the planner, so a plan the scheduler would not follow
//! shows up as pods that stay pending. Same seed, same result: nothing reads the wall clock
//! except the `wall_seconds` measurements, and iteration orders are fixed.
//!
//! Several seeds ([`seeds`]) give each policy a mean with a 95 % interval ([`stats`]) and a
//! difference to gpu-autoscaler paired by seed; [`sweep`] turns one disruption knob over
//! several values on the same seeds and says which value to use, or that it cannot decide.

pub mod baselines;
pub mod chart;
pub mod cluster;
pub mod dra;
pub mod engine;
pub mod error;
pub mod frontier;
pub mod openb_workload;
pub mod policy;
pub mod report;
pub mod rng;
pub mod scenario;
pub mod scheduler;
pub mod seeds;
pub mod stats;
pub mod suite;
pub mod sweep;
pub mod traces;
pub mod workload;

use std::time::Instant;

pub use engine::PolicyResult;
pub use error::SimError;
pub use scenario::Scenario;

use crate::baselines::{CaLike, Fidelity, KarpenterLike, build_shapes};
use crate::engine::Engine;
use crate::policy::{GpuAutoscaler, Policy};
use crate::workload::Workload;

/// Command-line overrides of a run.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RunOptions {
    /// Seed instead of the scenario's.
    pub seed: Option<u64>,
    /// Virtual hours instead of the scenario's duration.
    pub hours: Option<f64>,
    /// Only these policies.
    pub policies: Option<Vec<String>>,
    /// Most pods the workload may have ([`workload::DEFAULT_MAX_PODS`] when `None`).
    pub max_pods: Option<usize>,
    /// What to explain (`simulate --explain`), and at which virtual second (`None`: at the
    /// end); each policy's [`PolicyResult::explanation`] holds its answer.
    pub explain: Option<(policy::Asked, Option<i64>)>,
    /// Threads the policies of one run share (`None` or 0: one). Each policy's run is
    /// independent of the others' and deterministic, so the report is the same on any
    /// number; `simulate` gives a single run every core, and runs of many seeds one each
    /// (their seeds already share the cores).
    pub threads: Option<usize>,
    /// Run every disruption pass, as the controller does, instead of skipping the passes the
    /// policy says cannot decide anything new (slower; the same results when the policy's
    /// wake-ups are right, which tests check with it).
    pub every_pass: bool,
}

impl RunOptions {
    /// The pod limit in force.
    pub fn max_pods(&self) -> usize {
        self.max_pods.unwrap_or(workload::DEFAULT_MAX_PODS)
    }
}

/// The result of one run: every policy on the same workload.
#[derive(Clone, Debug, PartialEq)]
pub struct RunReport {
    /// Scenario name.
    pub scenario: String,
    /// Seed used.
    pub seed: u64,
    /// Virtual seconds simulated.
    pub virtual_seconds: i64,
    /// Wall-clock seconds of the whole run.
    pub wall_seconds: f64,
    /// Pods in the workload.
    pub pods: usize,
    /// Per policy, in the order run.
    pub policies: Vec<PolicyResult>,
}

/// Makes the named policy.
///
/// # Errors
/// [`SimError::Scenario`] for an unknown name.
pub fn make_policy<'a>(
    name: &str,
    scenario: &Scenario,
    shapes: &[baselines::Shape],
) -> Result<Box<dyn Policy + 'a>, SimError> {
    let cfg = &scenario.cluster;
    Ok(match name {
        "gpu-autoscaler" => Box::new(GpuAutoscaler::new(cfg)),
        "karpenter-like" | "karpenter-ideal" => Box::new(KarpenterLike::new(
            shapes.to_vec(),
            cfg.score,
            if name == "karpenter-like" {
                Fidelity::Real
            } else {
                Fidelity::Ideal
            },
            cfg.node_overlays,
        )),
        "ca-like" | "ca-ideal" => Box::new(CaLike::new(
            shapes.to_vec(),
            cfg.score,
            cfg.ca_delay_after_add_s,
            if name == "ca-like" {
                Fidelity::Real
            } else {
                Fidelity::Ideal
            },
        )),
        other => {
            return Err(SimError::Scenario {
                path: scenario.path.clone(),
                line: 0,
                field: "policies".into(),
                why: format!(
                    "unknown policy {other:?} (known: {})",
                    scenario::POLICY_NAMES.join(", ")
                ),
            });
        }
    })
}

/// The controller's snapshot of the simulated cluster when a run of `scenario` on `workload`
/// starts (existing nodes with their pods, pods created at time 0 pending, pools, DaemonSets,
/// budgets): what `simulate --from-snapshot` starts from, for comparing with the cluster
/// recorded.
pub fn initial_state(scenario: &Scenario, workload: &Workload) -> autoscaler_core::Snapshot {
    let shapes = build_shapes(&scenario.pools, &scenario.daemonsets);
    let policy = Box::new(GpuAutoscaler::new(&scenario.cluster));
    let horizon = scenario.duration_s.max(1);
    engine(scenario, workload, &shapes, policy, scenario.seed, horizon).initial_snapshot()
}

/// An engine running `policy` on `workload` in `scenario`'s cluster.
fn engine<'a>(
    scenario: &'a Scenario,
    workload: &'a Workload,
    shapes: &'a [baselines::Shape],
    policy: Box<dyn Policy + 'a>,
    seed: u64,
    horizon: i64,
) -> Engine<'a> {
    Engine::new(
        &scenario.cluster,
        (*scenario.catalog).clone(),
        &scenario.pools,
        &scenario.daemonsets,
        shapes,
        workload,
        policy,
        seed,
        horizon,
    )
}

/// Runs every policy of `scenario` (or of `opts.policies`) on the scenario's generated
/// workload. `progress` receives the policy name and the fraction of its virtual time done
/// (from the thread running that policy).
///
/// # Errors
/// [`SimError::Scenario`] for an unknown policy name, [`SimError::BadOption`] for a bad
/// `--hours`, [`SimError::TooManyPods`] when a generator exceeds the pod limit.
pub fn run(
    scenario: &Scenario,
    opts: &RunOptions,
    progress: &(dyn Fn(&str, f64) + Sync),
) -> Result<RunReport, SimError> {
    let seed = opts.seed.unwrap_or(scenario.seed);
    let horizon = horizon(scenario, opts)?;
    let workload = workload::generate(scenario, seed, horizon, opts.max_pods())?;
    run_workload(scenario, &workload, opts, progress)
}

/// Virtual seconds a run covers.
///
/// # Errors
/// [`SimError::BadOption`] when `--hours` is not a positive number of at most ten years.
pub fn horizon(scenario: &Scenario, opts: &RunOptions) -> Result<i64, SimError> {
    let Some(h) = opts.hours else {
        return Ok(scenario.duration_s.max(1));
    };
    let bad = || SimError::BadOption {
        option: "--hours".into(),
        why: format!("{h} is not a positive number of hours of at most ten years"),
    };
    if h.is_nan() || h <= 0.0 {
        return Err(bad());
    }
    let d = autoscaler_core::duration::from_secs_f64(h * 3600.0).map_err(|_| bad())?;
    Ok(autoscaler_core::duration::whole_seconds(d).max(1))
}

/// Runs the policies on an already generated (or loaded) workload, side by side on
/// [`RunOptions::threads`]; results in the order of the policy names.
///
/// # Errors
/// [`SimError::Scenario`] for an unknown policy name, [`SimError::BadOption`] for a bad
/// `--hours` or a policy named twice, [`SimError::TooManyPods`] when the workload has more
/// pods than the limit.
pub fn run_workload(
    scenario: &Scenario,
    workload: &Workload,
    opts: &RunOptions,
    progress: &(dyn Fn(&str, f64) + Sync),
) -> Result<RunReport, SimError> {
    let start = Instant::now();
    let seed = opts.seed.unwrap_or(scenario.seed);
    let horizon = horizon(scenario, opts)?;
    if workload.pods.len() > opts.max_pods() {
        return Err(SimError::TooManyPods {
            path: scenario.path.clone(),
            workload: scenario.name.clone(),
            max: opts.max_pods(),
        });
    }
    let shapes = build_shapes(&scenario.pools, &scenario.daemonsets);
    let names = opts
        .policies
        .clone()
        .unwrap_or_else(|| scenario.policies.clone());
    // Every name is checked before any run starts, so a typo costs no simulated time.
    for (i, name) in names.iter().enumerate() {
        make_policy(name, scenario, &shapes)?;
        if names[..i].contains(name) {
            let why = format!("{name} is named twice (a policy would be compared with itself)");
            return Err(if opts.policies.is_some() {
                SimError::BadOption {
                    option: "--policy".into(),
                    why,
                }
            } else {
                SimError::Scenario {
                    path: scenario.path.clone(),
                    line: 0,
                    field: format!("policies[{i}]"),
                    why,
                }
            });
        }
    }
    let threads = opts.threads.unwrap_or(1).max(1);
    let runs = seeds::par_map(
        &names,
        threads,
        |name| -> Result<PolicyResult, SimError> {
            let policy = make_policy(name, scenario, &shapes)?;
            let mut engine = engine(scenario, workload, &shapes, policy, seed, horizon);
            if let Some((asked, at)) = &opts.explain {
                engine = engine.explain_at(asked.clone(), *at);
            }
            if opts.every_pass {
                engine = engine.every_pass();
            }
            Ok(engine.run(&mut |f| progress(name, f)))
        },
        || {},
    );
    let results = runs.into_iter().collect::<Result<Vec<_>, _>>()?;
    Ok(RunReport {
        scenario: scenario.name.clone(),
        seed,
        virtual_seconds: horizon,
        wall_seconds: start.elapsed().as_secs_f64(),
        pods: workload.len(),
        policies: results,
    })
}
