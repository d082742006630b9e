//! `simulate --seeds` and `--sweep` without the release build of the whole `gpu-autoscaler`
//! binary (which compiles the cloud SDKs): the same library calls and the same tables, on the
//! bundled default scenario, a scenario file or an openb trace.
//!
//! `cargo run --release -p autoscaler-sim --example seeds -- [WHAT] --seeds N|A..B
//! [--sweep [POOL:]KEY=v1,v2] [--compression X] [--hours H] [--json FILE]`, where WHAT is
//! `default` (the default), a scenario YAML, or `openb PODS.csv` (on the bundled openb
//! NodePools; `--compression` divides the trace's times, 1 by default); or
//! `suite [--data DIR]`, the GPU scenario suite as `simulate --suite` runs it.

use std::path::Path;

use autoscaler_sim::openb_workload;
use autoscaler_sim::workload::Workload;
use autoscaler_sim::{RunOptions, RunReport, Scenario, SimError, seeds, suite, sweep};

fn flag(args: &mut Vec<String>, name: &str) -> Result<Option<String>, String> {
    let Some(i) = args.iter().position(|a| a == name) else {
        return Ok(None);
    };
    let v = args
        .get(i + 1)
        .ok_or(format!("{name} wants a value"))?
        .clone();
    args.drain(i..=i + 1);
    Ok(Some(v))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let seed_text = flag(&mut args, "--seeds")?.ok_or("--seeds is required")?;
    let sweep_text = flag(&mut args, "--sweep")?;
    let json = flag(&mut args, "--json")?;
    let hours = flag(&mut args, "--hours")?
        .map(|h| h.parse::<f64>())
        .transpose()?;
    let compression = flag(&mut args, "--compression")?.map_or(Ok(1.0), |c| c.parse::<f64>())?;
    if args.first().map(String::as_str) == Some("suite") {
        let data = flag(&mut args, "--data")?.unwrap_or(suite::DEFAULT_DATA_DIR.into());
        let opts = RunOptions {
            hours,
            ..RunOptions::default()
        };
        let seed_list = seeds::parse_seeds(&seed_text)?;
        let s = suite::run(
            &suite::ENTRIES,
            Path::new(&data),
            &seed_list,
            &opts,
            |_| {},
            |e, o| print!("{}", suite::scenario_text(e, o)),
        )?;
        print!("{}", suite::paired_text(&s));
        if let Some(f) = json {
            std::fs::write(f, suite::to_json(&s) + "\n")?;
        }
        return Ok(());
    }
    let (scenario, trace): (Scenario, Option<Workload>) =
        match args.first().map_or("default", String::as_str) {
            "default" => (Scenario::default_scenario()?, None),
            "openb" => {
                let pods = Path::new(args.get(1).ok_or("openb wants a pod list CSV")?);
                let (s, w) = openb_workload::replay(pods, compression)?;
                (s, Some(w))
            }
            path => (Scenario::load(Path::new(path))?, None),
        };
    let seed_list = seeds::parse_seeds(&seed_text)?;
    let run_one = |s: &Scenario, seed: u64, policies: Option<Vec<String>>| {
        let opts = RunOptions {
            seed: Some(seed),
            hours,
            policies,
            max_pods: None,
            explain: None,
            threads: None,
            every_pass: false,
        };
        match &trace {
            Some(w) => autoscaler_sim::run_workload(s, w, &opts, &|_, _| {}),
            None => autoscaler_sim::run(s, &opts, &|_, _| {}),
        }
    };
    let text = match &sweep_text {
        Some(spec) => {
            let sw = sweep::parse(spec, &scenario)?;
            let r = sweep::run(
                &sw,
                &scenario,
                &scenario.policies,
                &seed_list,
                |s, seed, p| run_one(s, seed, Some(p)),
                || {},
            )?;
            print!("{}", sweep::text(&r));
            sweep::to_json(&r)
        }
        None => {
            let s = seeds::run_seeds(
                &seed_list,
                |seed| -> Result<RunReport, SimError> { run_one(&scenario, seed, None) },
                || {},
            )?;
            print!("{}", seeds::summary_text(&s));
            seeds::to_json(&s)
        }
    };
    if let Some(f) = json {
        std::fs::write(f, text + "\n")?;
    }
    Ok(())
}
