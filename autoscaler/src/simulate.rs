//! `gpu-autoscaler simulate`: replay a scenario (the bundled default when none is given) or
//! an openb trace against this project's policy and the documented baselines, on a virtual
//! clock, and print what each would cost and how long pods would wait.

use std::io::IsTerminal as _;
use std::path::PathBuf;

use anyhow::{Context as _, bail};
use autoscaler_sim::openb_workload::{self, OpenbOptions};
use autoscaler_sim::{RunOptions, RunReport, Scenario, report};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Options of `simulate`.
#[derive(clap::Args, Debug)]
pub(crate) struct SimulateArgs {
    /// Scenario file (YAML); the bundled default when absent.
    scenario: Option<PathBuf>,
    /// Seed instead of the scenario's.
    #[arg(long)]
    seed: Option<u64>,
    /// Virtual hours instead of the scenario's duration.
    #[arg(long)]
    hours: Option<f64>,
    /// Only this policy (repeatable): gpu-autoscaler, karpenter-like, ca-like.
    #[arg(long = "policy")]
    policies: Vec<String>,
    /// Write the results as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Write a self-contained HTML report with charts here.
    #[arg(long)]
    report: Option<PathBuf>,
    /// Re-run once per value and print cost against wait: `KEY=v1,v2,...` with KEY one of
    /// gpu-utilization-threshold, utilization-threshold, unneeded-time, consolidate-after.
    #[arg(long)]
    sweep: Option<String>,
    /// Replay an openb pod list (`openb_pod_list_*.csv`) instead of the scenario's
    /// generators, on the bundled openb NodePools unless a scenario is given.
    #[arg(long)]
    openb: Option<PathBuf>,
    /// Replay the Alibaba v2025 DLRM trace (`disaggregated_DLRM_trace.csv`) instead of the
    /// scenario's generators, on the bundled openb NodePools unless a scenario is given.
    #[arg(long, conflicts_with = "openb")]
    dlrm: Option<PathBuf>,
    /// Divide the trace's times by this factor.
    #[arg(long, default_value_t = 1.0)]
    compression: f64,
    /// FGD mode: shuffle the pods (with the seed) and submit them without departures, one
    /// every `--fgd-interval` seconds, until their GPU requests reach this share of the
    /// reference cluster's GPUs (`--openb-nodes`).
    #[arg(long)]
    fgd_share: Option<f64>,
    /// Seconds between submissions in FGD mode.
    #[arg(long, default_value_t = 1.0)]
    fgd_interval: f64,
    /// The reference cluster for FGD mode (`openb_node_list_*.csv`); by default the
    /// `openb_node_list_gpu_node.csv` next to the pod list.
    #[arg(long)]
    openb_nodes: Option<PathBuf>,
    /// Refuse a run whose workload (generated or from a trace) has more pods than this.
    #[arg(long, default_value_t = autoscaler_sim::workload::DEFAULT_MAX_PODS)]
    max_pods: usize,
    /// No progress bar.
    #[arg(long)]
    quiet: bool,
}

fn progress_bar(quiet: bool, policies: usize) -> ProgressBar {
    let pb = if quiet || !std::io::stderr().is_terminal() {
        ProgressBar::with_draw_target(Some(1000), ProgressDrawTarget::hidden())
    } else {
        ProgressBar::new(1000)
    };
    pb.set_length((policies as u64).max(1) * 1000);
    if let Ok(style) =
        ProgressStyle::with_template("{spinner} {msg:>15} [{bar:40}] {percent:>3}% {elapsed}")
    {
        pb.set_style(style.progress_chars("=> "));
    }
    pb
}

fn run_once(
    scenario: &Scenario,
    workload: Option<&autoscaler_sim::workload::Workload>,
    opts: &RunOptions,
    quiet: bool,
) -> anyhow::Result<RunReport> {
    let names = opts
        .policies
        .clone()
        .unwrap_or_else(|| scenario.policies.clone());
    let pb = progress_bar(quiet, names.len());
    let mut progress = |name: &str, f: f64| {
        let i = names.iter().position(|n| n == name).unwrap_or(0) as u64;
        pb.set_message(name.to_string());
        pb.set_position(i * 1000 + (f * 1000.0) as u64);
    };
    let r = match workload {
        Some(w) => autoscaler_sim::run_workload(scenario, w, opts, &mut progress)?,
        None => autoscaler_sim::run(scenario, opts, &mut progress)?,
    };
    pb.finish_and_clear();
    Ok(r)
}

/// Runs `simulate`.
pub(crate) fn run(args: SimulateArgs) -> anyhow::Result<()> {
    let trace = args.openb.is_some() || args.dlrm.is_some();
    let mut scenario = match (&args.scenario, trace) {
        (Some(p), _) => Scenario::load(p)?,
        (None, true) => Scenario::parse(
            std::path::Path::new("<embedded openb.yaml>"),
            openb_workload::OPENB_SCENARIO_YAML,
        )?,
        (None, false) => Scenario::default_scenario()?,
    };
    let opts = RunOptions {
        seed: args.seed,
        hours: args.hours,
        policies: (!args.policies.is_empty()).then(|| args.policies.clone()),
        max_pods: Some(args.max_pods),
    };
    let seed = opts.seed.unwrap_or(scenario.seed);
    let workload = match (&args.openb, &args.dlrm) {
        (None, None) => None,
        (None, Some(path)) => {
            let (w, horizon) = openb_workload::load_dlrm(path, args.compression)?;
            if args.hours.is_none() {
                scenario.duration_s = horizon;
            }
            scenario.name = format!("DLRM v2025 (compression {})", args.compression);
            Some(w)
        }
        (Some(path), _) => {
            let nodes = args
                .openb_nodes
                .clone()
                .unwrap_or_else(|| path.with_file_name("openb_node_list_gpu_node.csv"));
            let o = OpenbOptions {
                compression: args.compression,
                fgd_share: args.fgd_share,
                fgd_interval_s: args.fgd_interval,
                reference_nodes: args.fgd_share.map(|_| nodes),
                seed,
            };
            let (w, horizon) = openb_workload::load(path, &o, &scenario.pools)?;
            if args.hours.is_none() {
                scenario.duration_s = horizon;
            }
            scenario.name = format!(
                "{} ({})",
                path.file_name()
                    .map_or("openb".into(), |f| f.to_string_lossy().into_owned()),
                if args.fgd_share.is_some() {
                    "FGD mode".to_string()
                } else {
                    format!("compression {}", args.compression)
                }
            );
            Some(w)
        }
    };
    if let Some(sweep) = &args.sweep {
        let Some((key, values)) = sweep.split_once('=') else {
            bail!("--sweep wants KEY=v1,v2,... (got {sweep:?})");
        };
        if args.report.is_some() {
            bail!("--report writes one run's page; with --sweep use --json");
        }
        println!("sweep {key} on scenario {}:", scenario.name);
        let mut runs = Vec::new();
        for v in values.split(',').map(str::trim).filter(|v| !v.is_empty()) {
            let mut s = scenario.clone();
            autoscaler_sim::apply_sweep(&mut s, key, v).map_err(anyhow::Error::msg)?;
            let r = run_once(&s, workload.as_ref(), &opts, args.quiet)?;
            println!("{}", report::sweep_line(v, &r));
            let result: serde_json::Value = serde_json::from_str(&report::to_json(&r))
                .context("re-reading a run's JSON report")?;
            runs.push(serde_json::json!({"value": v, "result": result}));
        }
        if let Some(p) = &args.json {
            let doc = serde_json::json!({"sweep": key, "scenario": scenario.name, "runs": runs});
            std::fs::write(p, format!("{doc:#}\n"))
                .with_context(|| format!("writing {}", p.display()))?;
        }
        return Ok(());
    }
    let r = run_once(&scenario, workload.as_ref(), &opts, args.quiet)?;
    print!("{}", report::summary(&r));
    if let Some(p) = &args.json {
        std::fs::write(p, report::to_json(&r) + "\n")
            .with_context(|| format!("writing {}", p.display()))?;
    }
    if let Some(p) = &args.report {
        std::fs::write(p, report::to_html(&r))
            .with_context(|| format!("writing {}", p.display()))?;
        eprintln!("wrote {}", p.display());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use clap::Parser as _;

    use super::*;

    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        sim: SimulateArgs,
    }

    #[test]
    fn a_sweep_writes_one_json_run_per_value() {
        let dir = std::env::temp_dir().join(format!("gpu-autoscaler-sweep-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let json = dir.join("sweep.json");
        let cli = Cli::try_parse_from([
            "x",
            "--quiet",
            "--hours=2",
            "--policy=gpu-autoscaler",
            "--sweep=unneeded-time=1m,30m",
            "--json",
            json.to_str().unwrap(),
        ])
        .unwrap();
        run(cli.sim).expect("the sweep runs");
        let doc: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
        assert_eq!(doc["sweep"], "unneeded-time");
        let runs = doc["runs"].as_array().expect("runs");
        let values: Vec<&str> = runs.iter().map(|r| r["value"].as_str().unwrap()).collect();
        assert_eq!(values, ["1m", "30m"]);
        assert!(runs.iter().all(|r| r["result"].is_object()));
        // A one-run HTML page cannot hold a sweep: said, not ignored.
        let cli =
            Cli::try_parse_from(["x", "--sweep=unneeded-time=1m", "--report", "r.html"]).unwrap();
        let err = run(cli.sim).unwrap_err().to_string();
        assert!(err.contains("--report"), "{err}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
