//! `gpu-autoscaler simulate`: replay a scenario (the bundled default when none is given) or
//! an openb trace against this project's policy and the documented baselines, on a virtual
//! clock, and print what each would cost and how long pods would wait.

use std::io::IsTerminal as _;
use std::path::PathBuf;

use anyhow::Context as _;
use autoscaler_sim::openb_workload::{self, OpenbOptions};
use autoscaler_sim::{RunOptions, RunReport, Scenario, report, seeds, sweep};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Options of `simulate`.
#[derive(clap::Args, Debug)]
pub(crate) struct SimulateArgs {
    /// Scenario file (YAML); the bundled default when absent.
    scenario: Option<PathBuf>,
    /// Seed instead of the scenario's.
    #[arg(long, conflicts_with = "seeds")]
    seed: Option<u64>,
    /// Run several seeds, in parallel on every core: `N` for seeds 1 to N, `A..B` for seeds A
    /// to B. Reports per policy the mean and 95 % interval and the difference to
    /// gpu-autoscaler paired by seed (parity when its interval contains 0).
    #[arg(long)]
    seeds: Option<String>,
    /// Virtual hours instead of the scenario's duration.
    #[arg(long)]
    hours: Option<f64>,
    /// Only this policy (repeatable): gpu-autoscaler, karpenter-like, karpenter-ideal, ca-like,
    /// ca-ideal.
    #[arg(long = "policy")]
    policies: Vec<String>,
    /// Write the results as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Write a self-contained HTML report with charts here (with --seeds or --sweep: the
    /// cost against pending-p95 chart with intervals).
    #[arg(long)]
    report: Option<PathBuf>,
    /// Run each value on the same seeds as the scenario's own setting and print a decision
    /// table with a recommendation: `[POOL:]KEY=v1,v2,...`, KEY one of
    /// gpu-utilization-threshold, utilization-threshold, unneeded-time, consolidate-after,
    /// right-size-savings, scale-down-delay-after-add, on every NodePool or only on POOL. Use
    /// with --seeds 10 or more.
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
    /// Start from a cluster snapshot (`gpu-autoscaler snapshot`): its NodePools, nodes with
    /// their pods and DaemonSets, replaying a series' pod arrivals and departures. Instead of a
    /// scenario.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["scenario", "openb", "dlrm"])]
    from_snapshot: Option<PathBuf>,
    /// The catalog of `--from-snapshot` (the format `gpu-autoscaler catalog --json` writes);
    /// default: the embedded catalog.
    #[arg(long, value_name = "F", requires = "from_snapshot")]
    catalog_file: Option<PathBuf>,
    /// Refuse a run whose workload (generated or from a trace) has more pods than this.
    #[arg(long, default_value_t = autoscaler_sim::workload::DEFAULT_MAX_PODS)]
    max_pods: usize,
    /// Explain one object of the gpu-autoscaler run at its end (or at `--explain-at`), as
    /// `gpu-autoscaler explain` would: `pod/NAME` (why pending: every NodePool and instance
    /// type and what refused each, or where it went) or `node/NAME` (why it stays or goes).
    #[arg(long, value_name = "pod/NAME|node/NAME", conflicts_with_all = ["seeds", "sweep"])]
    explain: Option<String>,
    /// The virtual time of `--explain` (`90m`, `2h`, seconds): the cluster as every event up
    /// to then left it. Default: the end of the run.
    #[arg(long, requires = "explain", value_parser = autoscaler::controller::settings::parse_duration)]
    explain_at: Option<std::time::Duration>,
    /// Run the GPU scenario suite instead of one scenario: the default day, the openb default
    /// pod list compressed 10x, the DLRM trace compressed 100x and the sharing-heavy scenario,
    /// over `--seeds` (10 when not given) for every policy (or `--policy`), then one table of
    /// paired differences across them; a trace not found under `--data` is skipped, saying so.
    #[arg(long, conflicts_with_all = ["scenario", "seed", "sweep", "openb", "dlrm", "from_snapshot", "explain", "report"])]
    suite: bool,
    /// The directory holding the suite's traces (`openb/`, `alibaba_gpu_v2025/`).
    #[arg(long, value_name = "DIR", requires = "suite", default_value = autoscaler_sim::suite::DEFAULT_DATA_DIR)]
    data: PathBuf,
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

/// Where each run's pods come from.
enum Source {
    /// The scenario's generators, drawn per seed inside the run.
    Generated,
    /// A trace replayed the same way whatever the seed.
    Fixed(autoscaler_sim::workload::Workload),
    /// An openb trace in FGD mode: the seed shuffles the pods, so one load per seed.
    PerSeed(std::path::PathBuf, OpenbOptions),
}

/// The scenario, where its pods come from, and the command line's overrides.
struct Setup {
    scenario: Scenario,
    source: Source,
    opts: RunOptions,
}

impl Setup {
    /// One run of `scenario` (the setup's, or a sweep's variant of it) on `seed`.
    fn run(
        &self,
        scenario: &Scenario,
        seed: u64,
        policies: Option<Vec<String>>,
        progress: &(dyn Fn(&str, f64) + Sync),
    ) -> anyhow::Result<RunReport> {
        let opts = RunOptions {
            seed: Some(seed),
            policies: policies.or_else(|| self.opts.policies.clone()),
            ..self.opts.clone()
        };
        Ok(match &self.source {
            Source::Generated => autoscaler_sim::run(scenario, &opts, progress)?,
            Source::Fixed(w) => autoscaler_sim::run_workload(scenario, w, &opts, progress)?,
            Source::PerSeed(path, o) => {
                let o = OpenbOptions { seed, ..o.clone() };
                let (w, _) = openb_workload::load(path, &o, &scenario.pools)?;
                autoscaler_sim::run_workload(scenario, &w, &opts, progress)?
            }
        })
    }

    fn policies(&self) -> Vec<String> {
        self.opts
            .policies
            .clone()
            .unwrap_or_else(|| self.scenario.policies.clone())
    }
}

/// Builds the scenario and the workload source from the command line.
fn setup(args: &SimulateArgs) -> anyhow::Result<Setup> {
    let trace = args.openb.is_some() || args.dlrm.is_some();
    let mut scenario = match (&args.scenario, trace) {
        _ if args.from_snapshot.is_some() => from_snapshot(args)?,
        (Some(p), _) => Scenario::load(p)?,
        (None, true) => Scenario::parse(
            std::path::Path::new("<embedded openb.yaml>"),
            openb_workload::OPENB_SCENARIO_YAML,
        )?,
        (None, false) => Scenario::default_scenario()?,
    };
    let explain = match &args.explain {
        Some(text) => {
            let at = args
                .explain_at
                .map(|d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
            Some((autoscaler_sim::policy::Asked::parse(text)?, at))
        }
        None => None,
    };
    let opts = RunOptions {
        seed: args.seed,
        hours: args.hours,
        policies: (!args.policies.is_empty()).then(|| args.policies.clone()),
        max_pods: Some(args.max_pods),
        explain,
        // Runs of many seeds keep one thread each: the seeds share the cores.
        threads: None,
        every_pass: false,
    };
    let seed = opts.seed.unwrap_or(scenario.seed);
    let source = match (&args.openb, &args.dlrm) {
        (None, None) => Source::Generated,
        (None, Some(path)) => {
            let (w, horizon) = openb_workload::load_dlrm(path, args.compression)?;
            if args.hours.is_none() {
                scenario.duration_s = horizon;
            }
            scenario.name = format!("DLRM v2025 (compression {})", args.compression);
            Source::Fixed(w)
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
            if args.fgd_share.is_some() {
                Source::PerSeed(path.clone(), o)
            } else {
                Source::Fixed(w)
            }
        }
    };
    if let Some(w) = no_pods_warning(&scenario, &source) {
        eprintln!("warning: {w}");
    }
    Ok(Setup {
        scenario,
        source,
        opts,
    })
}

/// Why a run of `scenario` would see no pod at all, if it would: a scenario file meant for a
/// trace (like the bundled `openb.yaml`) run without one simulates an idle cluster, which is
/// legal (existing nodes still cost) but rarely what was meant.
fn no_pods_warning(scenario: &Scenario, source: &Source) -> Option<String> {
    let generated = matches!(source, Source::Generated);
    (generated && scenario.workloads.is_empty() && scenario.replay.is_empty()).then(|| {
        format!(
            "{}: the scenario defines no workloads and no trace was given (--openb FILE or \
             --dlrm FILE), so no pod arrives in this run",
            scenario.path.display()
        )
    })
}

/// The scenario of `--from-snapshot`, its notes printed.
fn from_snapshot(args: &SimulateArgs) -> anyhow::Result<Scenario> {
    let Some(path) = &args.from_snapshot else {
        anyhow::bail!("no --from-snapshot");
    };
    let catalog = match &args.catalog_file {
        Some(f) => providers::catalog::read_user_catalog(f)?,
        None => providers::catalog::default_catalog(),
    };
    let (samples, mut notes) = autoscaler::replay::read(path)?;
    let loaded = autoscaler::replay::load(path, &samples, catalog)?;
    notes.extend(loaded.notes);
    for n in &notes {
        eprintln!("note: {n}");
    }
    Ok(loaded.scenario)
}

fn write(path: &Option<PathBuf>, text: &str) -> anyhow::Result<()> {
    if let Some(p) = path {
        std::fs::write(p, text).with_context(|| format!("writing {}", p.display()))?;
    }
    Ok(())
}

/// A progress bar counting finished runs.
fn runs_bar(quiet: bool, runs: usize) -> ProgressBar {
    let pb = progress_bar(quiet, 1);
    pb.set_length(runs as u64);
    if let Ok(style) =
        ProgressStyle::with_template("{spinner} runs [{bar:40}] {pos}/{len} {elapsed}")
    {
        pb.set_style(style.progress_chars("=> "));
    }
    pb
}

/// Runs `simulate --suite`.
fn run_suite(args: &SimulateArgs) -> anyhow::Result<()> {
    use autoscaler_sim::suite;
    let seeds = seeds::parse_seeds(args.seeds.as_deref().unwrap_or("10"))?;
    let opts = RunOptions {
        hours: args.hours,
        policies: (!args.policies.is_empty()).then(|| args.policies.clone()),
        max_pods: Some(args.max_pods),
        ..RunOptions::default()
    };
    let pb = runs_bar(args.quiet, seeds.len() * suite::ENTRIES.len());
    let s = suite::run(
        &suite::ENTRIES,
        &args.data,
        &seeds,
        &opts,
        |_| pb.inc(1),
        |e, o| pb.suspend(|| print!("{}", suite::scenario_text(e, o))),
    )?;
    pb.finish_and_clear();
    print!("{}", suite::paired_text(&s));
    write(&args.json, &(suite::to_json(&s) + "\n"))
}

/// Runs `simulate`.
pub(crate) fn run(args: SimulateArgs) -> anyhow::Result<()> {
    crate::check_writable("--json", args.json.as_deref())?;
    crate::check_writable("--report", args.report.as_deref())?;
    if args.suite {
        return run_suite(&args);
    }
    let setup = setup(&args)?;
    let seeds = match &args.seeds {
        Some(text) => seeds::parse_seeds(text)?,
        None => vec![setup.opts.seed.unwrap_or(setup.scenario.seed)],
    };
    if let Some(text) = &args.sweep {
        let sweep = sweep::parse(text, &setup.scenario)?;
        let policies = setup.policies();
        let runs = sweep::jobs(&sweep, &setup.scenario, &policies, &seeds).len();
        let pb = runs_bar(args.quiet, runs);
        let r = sweep::run(
            &sweep,
            &setup.scenario,
            &policies,
            &seeds,
            |s, seed, policies| setup.run(s, seed, Some(policies), &|_, _| {}),
            || pb.inc(1),
        )?;
        pb.finish_and_clear();
        print!("{}", sweep::text(&r));
        write(&args.json, &(sweep::to_json(&r) + "\n"))?;
        write(&args.report, &sweep::to_html(&r))?;
        return Ok(());
    }
    if seeds.len() > 1 {
        let pb = runs_bar(args.quiet, seeds.len());
        let s = seeds::run_seeds(
            &seeds,
            |seed| setup.run(&setup.scenario, seed, None, &|_, _| {}),
            || pb.inc(1),
        )?;
        pb.finish_and_clear();
        print!("{}", seeds::summary_text(&s));
        write(&args.json, &(seeds::to_json(&s) + "\n"))?;
        write(&args.report, &seeds::to_html(&s))?;
        return Ok(());
    }
    let names = setup.policies();
    let pb = progress_bar(args.quiet, names.len());
    // The policies run side by side, so the bar shows the sum of their fractions.
    let done = std::sync::Mutex::new(vec![0.0f64; names.len()]);
    let progress = |name: &str, f: f64| {
        let Some(i) = names.iter().position(|n| n == name) else {
            return;
        };
        if let Ok(mut d) = done.lock() {
            d[i] = f;
            pb.set_message(name.to_string());
            pb.set_position(d.iter().map(|f| (f * 1000.0) as u64).sum());
        }
    };
    let mut setup = setup;
    setup.opts.threads = Some(seeds::threads());
    if args.explain.is_some() && !names.iter().any(|n| n == "gpu-autoscaler") {
        anyhow::bail!(
            "--explain: explanations come from the gpu-autoscaler policy; add --policy gpu-autoscaler"
        );
    }
    if let Some(at) = args.explain_at {
        let end = autoscaler_sim::horizon(&setup.scenario, &setup.opts)?;
        if at.as_secs_f64() > end as f64 {
            anyhow::bail!(
                "--explain-at {}s: after the end of the run, {end}s",
                at.as_secs()
            );
        }
    }
    let r = setup.run(&setup.scenario, seeds[0], None, &progress)?;
    pb.finish_and_clear();
    print!("{}", report::summary(&r));
    let mut missing = None;
    match r
        .policies
        .iter()
        .find(|p| p.name == "gpu-autoscaler")
        .and_then(|p| p.explanation.as_ref())
    {
        // Refused as the live `explain` refuses an object it cannot find, once the run's
        // results are printed and written.
        Some(autoscaler_sim::policy::Explained::Missing(why)) => missing = Some(why.clone()),
        Some(e) => {
            let at = args
                .explain_at
                .map_or("the end of the run".to_string(), |d| {
                    format!("t={}s", d.as_secs())
                });
            print!("\nExplanation (gpu-autoscaler, at {at}):\n{}", e.render());
        }
        None => {}
    }
    write(&args.json, &(report::to_json(&r) + "\n"))?;
    if let Some(p) = &args.report {
        write(&args.report, &report::to_html(&r))?;
        eprintln!("wrote {}", p.display());
    }
    if let Some(why) = missing {
        anyhow::bail!(
            "--explain {}: {why}",
            args.explain.as_deref().unwrap_or_default()
        );
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

    fn parse(args: &[&str]) -> SimulateArgs {
        Cli::try_parse_from(std::iter::once("x").chain(args.iter().copied()))
            .unwrap()
            .sim
    }

    #[test]
    fn the_suite_runs_every_scenario_it_has_data_for_and_names_the_missing_traces() {
        let dir = std::env::temp_dir().join(format!("gpu-autoscaler-suite-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let json = dir.join("suite.json");
        run(parse(&[
            "--quiet",
            "--suite",
            "--data",
            dir.join("no-traces-here").to_str().unwrap(),
            "--hours=0.25",
            "--policy=gpu-autoscaler",
            "--policy=ca-like",
            "--seeds=2",
            "--json",
            json.to_str().unwrap(),
        ]))
        .expect("the suite runs");
        let doc: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
        assert_eq!(doc["seeds"], serde_json::json!([1, 2]));
        let names: Vec<&str> = doc["scenarios"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["default", "openb-10x", "dlrm-100x", "sharing"]);
        for (i, ran) in [(0, true), (1, false), (2, false), (3, true)] {
            let s = &doc["scenarios"][i];
            assert_eq!(s["skipped"].is_string(), !ran, "{s}");
            if ran {
                let ca = &s["result"]["policies"][1];
                assert_eq!(ca["name"], "ca-like");
                assert!(ca["cost_diff_vs_ours_ci95"].is_array(), "{ca}");
            }
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_sweep_over_seeds_writes_its_table_json_and_page() {
        let dir = std::env::temp_dir().join(format!("gpu-autoscaler-sweep-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let json = dir.join("sweep.json");
        let html = dir.join("sweep.html");
        run(parse(&[
            "--quiet",
            "--hours=1",
            "--policy=gpu-autoscaler",
            "--policy=karpenter-like",
            "--sweep=gpu-train:unneeded-time=1m,30m",
            "--seeds=2",
            "--json",
            json.to_str().unwrap(),
            "--report",
            html.to_str().unwrap(),
        ]))
        .expect("the sweep runs");
        let doc: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
        assert_eq!(doc["sweep"], "unneeded-time");
        assert_eq!(doc["seeds"], serde_json::json!([1, 2]));
        let policies = doc["policies"].as_array().expect("policies");
        // gpu-autoscaler reads the key: one row per setting; karpenter-like does not: once.
        let ours = &policies[0];
        assert_eq!(ours["name"], "gpu-autoscaler");
        let values: Vec<&str> = ours["values"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v["label"].as_str().unwrap())
            .collect();
        assert_eq!(values, ["current (10m)", "1m", "30m"]);
        for v in ours["values"].as_array().unwrap() {
            assert!(
                v["cost_ci95"].as_array().is_some_and(|c| c.len() == 2),
                "{v}"
            );
        }
        assert!(ours["values"][1]["cost_change_vs_current_ci95"].is_array());
        assert_eq!(policies[1]["name"], "karpenter-like");
        assert_eq!(policies[1]["reads_key"], false);
        assert!(policies[1]["values"].is_null());
        assert!(doc["recommendation"]["text"].is_string());
        let page = std::fs::read_to_string(&html).unwrap();
        assert!(page.contains("<svg") && page.contains("Recommendation"));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn bad_seeds_and_sweeps_are_refused_before_running() {
        for (args, says) in [
            (vec!["--seeds=0"], "--seeds"),
            (vec!["--seeds=9..3"], "9..3 is empty"),
            (
                vec!["--sweep=nope:unneeded-time=1m"],
                "unknown NodePool \"nope\"",
            ),
            (vec!["--sweep=colour=1"], "unknown key \"colour\""),
        ] {
            let err = run(parse(&args)).unwrap_err().to_string();
            assert!(err.contains(says), "{args:?}: {err}");
        }
        assert!(
            Cli::try_parse_from(["x", "--seed=1", "--seeds=3"]).is_err(),
            "--seed and --seeds together"
        );
    }
}
