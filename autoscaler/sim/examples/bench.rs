//! Speed benchmark of the simulator, without the full `gpu-autoscaler` binary (whose release
//! build is slow): prints the wall and CPU seconds of every policy, and optionally writes a
//! fingerprint of the results (everything but wall time) so two builds can be diffed for
//! identical results.
//!
//! `cargo run --release -p autoscaler-sim --example bench -- [WHAT] [--fingerprint FILE]`
//! where WHAT is a scenario YAML (default `autoscaler/sim/scenarios/bench-100k.yaml`),
//! `default` (the bundled default scenario) or `openb PODS.csv` (compression 150).
//!
//! CPU seconds (from `/proc/self/stat`, Linux only) are printed beside wall seconds because the
//! wall figure is only meaningful on an otherwise idle machine.

use std::path::Path;
use std::time::Instant;

use autoscaler_sim::openb_workload;
use autoscaler_sim::{RunOptions, RunReport, Scenario, report, run_workload, workload};

/// User plus system CPU seconds of this process so far, if the kernel tells.
fn cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name (which may hold spaces) start at state, field 3; utime and
    // stime are fields 14 and 15, in clock ticks (100 per second on Linux).
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    Some(ticks as f64 / 100.0)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let mut fingerprint = None;
    if let Some(i) = args.iter().position(|a| a == "--fingerprint") {
        fingerprint = Some(args.get(i + 1).ok_or("--fingerprint wants a file")?.clone());
        args.drain(i..=i + 1);
    }
    let what = args
        .first()
        .map_or("autoscaler/sim/scenarios/bench-100k.yaml", String::as_str);
    let start = Instant::now();
    let (scenario, work) = match what {
        "default" => {
            let s = Scenario::default_scenario()?;
            let w = workload::generate(&s, s.seed, s.duration_s, workload::DEFAULT_MAX_PODS)?;
            (s, w)
        }
        "openb" => {
            let pods = Path::new(args.get(1).ok_or("openb wants a pod list CSV")?);
            let (s, w) = openb_workload::replay(pods, 150.0)?;
            (s, w)
        }
        path => {
            let s = Scenario::load(Path::new(path))?;
            let w = workload::generate(&s, s.seed, s.duration_s, workload::DEFAULT_MAX_PODS)?;
            (s, w)
        }
    };
    println!(
        "workload: {} pods in {:.2} s",
        work.len(),
        start.elapsed().as_secs_f64()
    );
    // One policy at a time, so each gets its own CPU figure.
    let mut r: Option<RunReport> = None;
    let mut cpu = Vec::new();
    for name in &scenario.policies {
        let opts = RunOptions {
            policies: Some(vec![name.clone()]),
            ..Default::default()
        };
        let before = cpu_seconds();
        let one = run_workload(&scenario, &work, &opts, &|_, _| {})?;
        cpu.push(before.zip(cpu_seconds()).map(|(b, a)| a - b));
        match &mut r {
            None => r = Some(one),
            Some(all) => {
                all.wall_seconds += one.wall_seconds;
                all.policies.extend(one.policies);
            }
        }
    }
    let mut r = r.ok_or("the scenario has no policies")?;
    print!("{}", report::summary(&r));
    let show = |c: Option<f64>| c.map_or("?".into(), |c| format!("{c:.2}"));
    for (p, c) in r.policies.iter().zip(&cpu) {
        println!(
            "wall {:>16} {:8.2} s   cpu {:>8} s",
            p.name,
            p.wall_seconds,
            show(*c)
        );
    }
    let total_cpu = cpu.iter().copied().sum::<Option<f64>>();
    println!(
        "wall {:>16} {:8.2} s   cpu {:>8} s",
        "total",
        r.wall_seconds,
        show(total_cpu)
    );
    if let Some(f) = fingerprint {
        // Wall time is the only field allowed to differ between two runs of the same seed.
        r.wall_seconds = 0.0;
        for p in &mut r.policies {
            p.wall_seconds = 0.0;
        }
        std::fs::write(&f, format!("{r:#?}\n"))?;
    }
    Ok(())
}
