//! End-to-end runs of small scenarios: determinism, safety and that every pod gets bound.

use std::collections::BTreeMap;
use std::path::Path;

use autoscaler_sim::{RunOptions, Scenario, chart, report, run, seeds, sweep};

const TINY: &str = "\
name: tiny
seed: 7
duration: 3h
catalog: aws
cluster:
  insufficientCapacity: {probability: 0.05}
  spotInterruptionsPerHour: 0.2
daemonSets:
  - {name: kube-system/agent, cpu: 100m, memory: 100Mi, tolerateAll: true}
pools:
  - name: cpu
    families: [m6i, c6i]
    capacityTypes: [spot, on-demand]
    disruption: {consolidateAfter: 1m, unneededTime: 2m}
  - name: gpu
    families: [g6, g5]
    taints: [{key: nvidia.com/gpu, value: present}]
    timeSlicing: 2
    disruption: {consolidateAfter: 1m, unneededTime: 2m}
workloads:
  - deployment:
      name: web
      replicas: [{at: 0s, count: 4}, {at: 1h, count: 8}, {at: 2h, count: 2}]
      maxUnavailable: 1
      pod: {nodePool: cpu, cpu: 500m, memory: 1Gi, spread: [{topologyKey: topology.kubernetes.io/zone, maxSkew: 1}]}
  - jobs:
      name: batch
      arrivals: {perHour: 20, end: 2h}
      duration: {min: 5m, max: 20m}
      pod: {nodePool: cpu, cpu: 2, memory: 4Gi}
  - jobs:
      name: nb
      arrivals: {every: 20m, end: 2h}
      duration: {fixed: 15m}
      pod: {nodePool: gpu, cpu: 1, memory: 2Gi, gpus: 1, doNotDisrupt: true}
  - gangs:
      name: train
      size: 2
      arrivals: {at: [10m, 70m]}
      duration: {fixed: 20m}
      pod: {nodePool: gpu, cpu: 2, memory: 8Gi, gpus: 1}
";

fn tiny() -> Scenario {
    Scenario::parse(Path::new("tiny.yaml"), TINY).unwrap()
}

/// The JSON without the wall-clock field, which is the only thing allowed to differ.
fn stable_json(r: &autoscaler_sim::RunReport) -> String {
    report::to_json(r)
        .lines()
        .filter(|l| !l.contains("wall_seconds"))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn same_seed_same_json_other_seed_other_run() {
    let s = tiny();
    let a = run(&s, &RunOptions::default(), &|_, _| {}).unwrap();
    let b = run(&s, &RunOptions::default(), &|_, _| {}).unwrap();
    assert_eq!(stable_json(&a), stable_json(&b));
    let c = run(
        &s,
        &RunOptions {
            seed: Some(8),
            ..Default::default()
        },
        &|_, _| {},
    )
    .unwrap();
    assert_ne!(stable_json(&a), stable_json(&c));
}

#[test]
fn policies_side_by_side_report_what_they_report_one_after_another() {
    let s = tiny();
    let one = run(&s, &RunOptions::default(), &|_, _| {}).unwrap();
    let last = std::sync::Mutex::new(std::collections::BTreeMap::new());
    let three = run(
        &s,
        &RunOptions {
            threads: Some(3),
            ..Default::default()
        },
        &|name, f| {
            last.lock().unwrap().insert(name.to_string(), f);
        },
    )
    .unwrap();
    assert_eq!(stable_json(&one), stable_json(&three));
    let names: Vec<_> = three.policies.iter().map(|p| p.name.clone()).collect();
    assert_eq!(names, s.policies);
    // Every policy, whichever thread ran it, told the caller it finished.
    let last = last.into_inner().unwrap();
    assert_eq!(last.keys().cloned().collect::<Vec<_>>(), {
        let mut n = s.policies.clone();
        n.sort();
        n
    });
    assert!(last.values().all(|f| *f >= 1.0), "{last:?}");
    // A misspelt policy is refused before any policy runs.
    let ran = std::sync::atomic::AtomicUsize::new(0);
    let err = run(
        &s,
        &RunOptions {
            threads: Some(2),
            policies: Some(vec!["gpu-autoscaler".into(), "karpenter-lik".into()]),
            ..Default::default()
        },
        &|_, _| {
            ran.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        },
    )
    .unwrap_err();
    assert!(err.to_string().contains("karpenter-lik"), "{err}");
    // So is a policy named twice: it would be compared with itself.
    let err = run(
        &s,
        &RunOptions {
            policies: Some(vec![
                "ca-like".into(),
                "gpu-autoscaler".into(),
                "ca-like".into(),
            ]),
            ..Default::default()
        },
        &|_, _| {
            ran.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        },
    )
    .unwrap_err();
    assert!(
        err.to_string().contains("--policy") && err.to_string().contains("ca-like is named twice"),
        "{err}"
    );
    // A scenario built in code, past the file loader's own check, is refused naming its field.
    let mut twice = tiny();
    twice.policies = vec!["ca-like".into(), "ca-like".into()];
    let err = run(&twice, &RunOptions::default(), &|_, _| {
        ran.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    })
    .unwrap_err();
    assert!(err.to_string().contains("policies[1]"), "{err}");
    assert_eq!(ran.into_inner(), 0);
}

#[test]
fn tiny_scenario_is_safe_and_binds_every_pod() {
    let r = run(&tiny(), &RunOptions::default(), &|_, _| {}).unwrap();
    let summary = report::summary(&r);
    assert_eq!(r.policies.len(), 5, "{summary}");
    for p in &r.policies {
        assert_eq!(p.safety_violations, 0, "{summary}");
        assert_eq!(p.pending_at_end, 0, "{summary}");
        assert!(p.pods_created > 20, "{summary}");
        assert!(p.nodes_launched > 0 && p.cost > 0.0, "{summary}");
        assert!(
            p.gpu_allocation > 0.0 && p.gpu_allocation <= 1.0 + 1e-9,
            "{summary}"
        );
    }
    let json: serde_json::Value = serde_json::from_str(&report::to_json(&r)).unwrap();
    let keys: Vec<&str> = json
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        keys,
        [
            "policies",
            "scenario",
            "seed",
            "virtual_seconds",
            "wall_seconds"
        ]
    );
    // Where the money went, per instance type, adding up to each policy's cost.
    for p in json["policies"].as_array().unwrap() {
        let by_type = p["cost_by_type"].as_object().unwrap();
        assert!(!by_type.is_empty(), "{p}");
        let sum: f64 = by_type.values().map(|c| c.as_f64().unwrap()).sum();
        let cost = p["cost"].as_f64().unwrap();
        assert!(
            (sum - cost).abs() < 0.01 * by_type.len() as f64,
            "{sum} {cost}"
        );
    }
    // The charts' cost curve is kept up sample by sample (nodes come and go, spot ones are
    // interrupted): it never falls, and it ends at the run's cost.
    for p in &r.policies {
        let costs: Vec<f64> = p.samples.iter().map(|s| s.cost).collect();
        assert!(costs.windows(2).all(|w| w[0] <= w[1] + 1e-9), "{costs:?}");
        let last = costs.last().copied().unwrap_or(0.0);
        assert!(
            (last - p.cost).abs() < 1e-9 * p.cost,
            "{} {last} {}",
            p.name,
            p.cost
        );
        assert!(p.nodes_terminated > 0, "{summary}");
    }
    let html = report::to_html(&r);
    assert!(html.contains("<svg") && html.contains("is a model"));
}

/// `(text-anchor, text)` of every SVG text in `html`.
fn svg_texts(html: &str) -> Vec<(&str, &str)> {
    html.split("<text")
        .skip(1)
        .filter_map(|t| {
            let (attrs, rest) = t.split_once('>')?;
            let anchor = attrs.split("text-anchor=\"").nth(1)?.split('"').next()?;
            Some((anchor, rest.split_once("</text>")?.0.trim()))
        })
        .collect()
}

/// The part of the page from the chart headed `heading` to the next heading.
fn chart<'a>(html: &'a str, heading: &str) -> &'a str {
    let start = html
        .find(&format!("<h3>{heading}"))
        .unwrap_or_else(|| panic!("no chart {heading:?}"));
    let rest = &html[start + 4..];
    &rest[..rest.find("<h").unwrap_or(rest.len())]
}

#[test]
fn the_report_reads_at_a_glance() {
    let r = run(&tiny(), &RunOptions::default(), &|_, _| {}).unwrap();
    let html = report::to_html(&r);
    // Self-contained: nothing fetched.
    let outside = html.replace("xmlns=\"http://www.w3.org/2000/svg\"", "");
    for s in ["http://", "https://", "<script", "<link", "src=", "url("] {
        assert!(!outside.contains(s), "{s}");
    }
    // Money as dollars in the table, never a trailing "$".
    for p in &r.policies {
        let cost = format!("<td>{}</td>", chart::usd(p.cost));
        assert!(cost.starts_with("<td>$") && html.contains(&cost), "{cost}");
    }
    let texts = svg_texts(&html);
    assert!(!texts.iter().any(|(_, t)| t.ends_with('$')), "{texts:?}");
    // Each chart titles both axes, and counts have whole-number ticks (the y-axis labels
    // are the end-anchored texts).
    let mut node_charts = 0;
    for p in &r.policies {
        let heading = format!("{}: nodes by instance type", p.name);
        let c = chart(&html, &heading);
        node_charts += 1;
        let t = svg_texts(c);
        assert!(
            t.contains(&("middle", "nodes")) && t.contains(&("middle", "virtual time (hours)")),
            "{t:?}"
        );
        for (anchor, label) in &t {
            if *anchor == "end" {
                let v: f64 = label
                    .parse()
                    .unwrap_or_else(|_| panic!("{label:?} in {heading}"));
                assert_eq!(v.fract(), 0.0, "{label} in {heading}");
            }
        }
    }
    // One per policy: ours and both models of each competitor.
    assert_eq!(node_charts, 5);
    let pending = svg_texts(chart(&html, "Pending pods"));
    assert!(pending.contains(&("middle", "pending pods")), "{pending:?}");
    assert!(
        pending
            .iter()
            .filter(|t| t.0 == "end")
            .all(|t| t.1.parse::<u32>().is_ok()),
        "{pending:?}"
    );
    let cost = svg_texts(chart(&html, "Cumulative cost"));
    assert!(
        cost.contains(&("middle", "cost so far, USD")) && cost.contains(&("end", "$0")),
        "{cost:?}"
    );
    // The cost difference of each baseline against ours, with what it came to.
    let gap = chart(&html, "Cost difference");
    assert!(svg_texts(gap).contains(&("middle", "baseline minus ours, USD")));
    let ours = r.policies.iter().find(|p| p.name == seeds::OURS).unwrap();
    for p in r.policies.iter().filter(|p| p.name != seeds::OURS) {
        let legend = format!(
            "{}: {} at the end",
            p.name,
            chart::usd_signed(p.cost - ours.cost)
        );
        assert!(gap.contains(&legend), "{legend} in {gap}");
    }
    // One colour per instance type across the node charts.
    let mut seen: std::collections::BTreeMap<String, String> = Default::default();
    let mut repeats = 0;
    for span in html.split("<span><i style=\"background:").skip(1) {
        let (color, rest) = span.split_once("\"></i>").unwrap();
        let Some((name, _)) = rest.split_once(" · $") else {
            continue;
        };
        if name.starts_with("other (") {
            continue;
        }
        if let Some(before) = seen.insert(name.to_string(), color.to_string()) {
            assert_eq!(before, color, "{name}");
            repeats += 1;
        }
    }
    assert!(repeats > 0, "no type in two node charts: {seen:?}");
}

#[test]
fn default_scenario_runs_on_a_short_horizon() {
    let s = Scenario::default_scenario().unwrap();
    let opts = RunOptions {
        hours: Some(1.5),
        ..Default::default()
    };
    let r = run(&s, &opts, &|_, _| {}).unwrap();
    for p in &r.policies {
        assert_eq!(p.safety_violations, 0, "{}", report::summary(&r));
    }
    assert!(r.pods > 10);
}

#[test]
fn a_sweep_sets_its_key_on_one_pool_or_all_and_names_what_it_does_not_know() {
    use autoscaler_sim::sweep::{self, Setting};
    let s = tiny();
    let all = sweep::parse("consolidate-after=30m,1h", &s).unwrap();
    let changed = all.apply(&s, Setting::Secs(1800));
    assert!(
        changed
            .pools
            .iter()
            .all(|p| p.disruption.consolidate_after_s == 1800)
    );
    let one = sweep::parse("gpu:gpu-utilization-threshold=0.3, 0.7", &s).unwrap();
    assert_eq!(one.values.len(), 2);
    let changed = one.apply(&s, Setting::Ratio(0.3));
    for p in &changed.pools {
        let want = if p.name == "gpu" { 0.3 } else { 0.5 };
        assert_eq!(p.disruption.gpu_utilization_threshold, want, "{}", p.name);
    }
    for (bad, says) in [
        ("gpux:unneeded-time=1m", "unknown NodePool \"gpux\""),
        ("gpux:unneeded-time=1m", "known: cpu, gpu"),
        ("colour=1", "unknown key \"colour\""),
        (
            "gpu:colour=1",
            "gpu-utilization-threshold, utilization-threshold",
        ),
        ("gpu-utilization-threshold=2", "2 is outside [0, 1]"),
        ("unneeded-time=soon", "unneeded-time"),
        ("unneeded-time=1m,60s", "given twice"),
        ("unneeded-time", "[POOL:]KEY=v1,v2"),
    ] {
        let e = sweep::parse(bad, &s).unwrap_err().to_string();
        assert!(e.contains("--sweep") && e.contains(says), "{bad}: {e}");
    }
}

const EVICTED_JOBS: &str = "\
name: evicted-jobs
seed: 3
duration: 4h
catalog: aws
cluster:
  spotInterruptionsPerHour: 2
pools:
  - name: gpu
    families: [g6]
    capacityTypes: [spot]
    taints: [{key: nvidia.com/gpu, value: present}]
workloads:
  - jobs:
      name: train
      arrivals: {every: 10m, end: 2h}
      duration: {fixed: 90m}
      pod: {nodePool: gpu, cpu: 1, memory: 2Gi, gpus: 1}
";

fn ours_only() -> RunOptions {
    RunOptions {
        policies: Some(vec!["gpu-autoscaler".into()]),
        ..Default::default()
    }
}

#[test]
fn job_work_thrown_away_by_evictions_is_rerun_not_useful() {
    let jobs = Scenario::parse(Path::new("jobs.yaml"), EVICTED_JOBS).unwrap();
    let r = run(&jobs, &ours_only(), &|_, _| {}).unwrap();
    let p = &r.policies[0];
    let summary = report::summary(&r);
    assert!(p.pods_interrupted > 0, "{summary}");
    assert!(p.gpu_hours_rerun > 0.0, "{summary}");
    assert!(
        (p.gpu_hours_useful + p.gpu_hours_rerun - p.gpu_hours_requested).abs() < 1e-9,
        "{summary}"
    );
    assert!((p.gpu_allocation - p.gpu_hours_useful / p.gpu_hours_paid).abs() < 1e-12);
    // The same pods as a service: evicted as often, but the time served is not lost.
    let service = EVICTED_JOBS.replace(
        "  - jobs:\n      name: train\n      arrivals: {every: 10m, end: 2h}\n      duration: {fixed: 90m}\n",
        "  - deployment:\n      name: train\n      replicas: [{at: 0s, count: 6}]\n",
    );
    let svc = Scenario::parse(Path::new("service.yaml"), &service).unwrap();
    let r = run(&svc, &ours_only(), &|_, _| {}).unwrap();
    let q = &r.policies[0];
    assert!(q.pods_interrupted > 0, "{}", report::summary(&r));
    assert_eq!(q.gpu_hours_rerun, 0.0);
    assert_eq!(q.gpu_hours_useful, q.gpu_hours_requested);
}

fn runs_on(s: &Scenario, seeds: &[u64]) -> Vec<autoscaler_sim::RunReport> {
    seeds::par_map(
        seeds,
        2,
        |seed| {
            let opts = RunOptions {
                seed: Some(*seed),
                ..Default::default()
            };
            run(s, &opts, &|_, _| {}).unwrap()
        },
        || {},
    )
}

#[test]
fn seeds_give_intervals_and_differences_paired_by_seed() {
    let s = tiny();
    let runs = runs_on(&s, &[1, 2, 3]);
    // In parallel, the same as one at a time.
    let two = run(
        &s,
        &RunOptions {
            seed: Some(2),
            ..Default::default()
        },
        &|_, _| {},
    )
    .unwrap();
    assert_eq!(stable_json(&runs[1]), stable_json(&two));
    let sum = seeds::summarize(&runs, 1.0, 2);
    let doc: serde_json::Value = serde_json::from_str(&seeds::to_json(&sum)).unwrap();
    assert_eq!(doc["seeds"], serde_json::json!([1, 2, 3]));
    let policies = doc["policies"].as_array().unwrap();
    let per_seed_cost = |p: &serde_json::Value| -> Vec<f64> {
        p["per_seed"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x["cost"].as_f64().unwrap())
            .collect()
    };
    let ours = per_seed_cost(&policies[0]);
    assert_eq!(policies[0]["name"], "gpu-autoscaler");
    for p in policies {
        for key in ["cost", "pending_p95_s"] {
            let mean = p[format!("{key}_mean")].as_f64().unwrap();
            let ci = p[format!("{key}_ci95")].as_array().unwrap();
            let (lo, hi) = (ci[0].as_f64().unwrap(), ci[1].as_f64().unwrap());
            assert!(lo <= mean && mean <= hi, "{key} {p}");
            assert!(p[format!("{key}_diff_vs_ours_ci95")].is_array(), "{p}");
        }
        assert!(p["gpu_hours_useful"].as_f64().unwrap() > 0.0);
        assert!(p["gpu_hours_rerun"].as_f64().unwrap() >= 0.0);
        // Dollars per useful GPU-hour: the mean over the seeds of each run's ratio.
        let ratio: f64 = p["per_seed"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x["cost"].as_f64().unwrap() / x["gpu_hours_useful"].as_f64().unwrap())
            .sum::<f64>()
            / 3.0;
        let got = p["cost_per_useful_gpu_hour_mean"].as_f64().unwrap();
        assert!((ratio - got).abs() < 1e-3 * ratio.max(1.0), "{ratio} {got}");
        // The paired difference, by hand from the per-seed costs.
        let mine = per_seed_cost(p);
        let d: Vec<f64> = mine.iter().zip(&ours).map(|(a, b)| a - b).collect();
        let want = d.iter().sum::<f64>() / 3.0;
        let got = p["cost_diff_vs_ours_mean"].as_f64().unwrap();
        assert!((want - got).abs() < 1e-3, "{want} {got}");
        // Where the money went: per instance type, adding up to the run's cost.
        for x in p["per_seed"].as_array().unwrap() {
            let by_type: f64 = x["cost_by_type"]
                .as_object()
                .unwrap()
                .values()
                .map(|v| v.as_f64().unwrap())
                .sum();
            let cost = x["cost"].as_f64().unwrap();
            assert!((by_type - cost).abs() < 0.01, "{by_type} {cost} {x}");
        }
    }
    // Both gaps of each competitor: to its model of today and to its idealized model.
    let text = seeds::summary_text(&sum);
    let work = text
        .lines()
        .find(|l| l.starts_with("  $ per useful GPU-hour: "))
        .unwrap_or_else(|| panic!("no cost per useful GPU-hour in {text}"));
    for p in &sum.policies {
        assert!(work.contains(&format!("{} ", p.name)), "{work}");
    }
    for family in ["karpenter", "ca"] {
        let line = text
            .lines()
            .find(|l| l.starts_with(&format!("  cost gaps, {family}: ")))
            .unwrap_or_else(|| panic!("{family} gaps in {text}"));
        assert!(
            line.contains(&format!("{family}-like ")) && line.contains(&format!("{family}-ideal ")),
            "{line}"
        );
    }
    assert_eq!(
        policies[0]["cost_diff_vs_ours_ci95"],
        serde_json::json!([0.0, 0.0])
    );
    assert!(text.contains("seeds 1-3 (3 runs)"), "{text}");
    for p in &sum.policies[1..] {
        let line = text.lines().find(|l| l.starts_with(&p.name)).unwrap();
        assert!(
            ["parity", "ours cheaper", "ours dearer"]
                .iter()
                .any(|w| line.contains(w)),
            "{line}"
        );
    }
    let html = seeds::to_html(&sum);
    assert!(html.contains("<svg") && html.contains("cost, USD"));
    // The difference over time is the mean over the seeds with its interval as a band.
    let gap = chart(&html, "Cost difference");
    assert!(
        gap.contains("<polygon") && gap.contains("bands their 95 % intervals"),
        "{gap}"
    );
}

#[test]
fn policies_that_ignore_a_key_do_not_change() {
    let s = tiny();
    let json_of = |s: &Scenario, policies: &[&str]| {
        let opts = RunOptions {
            policies: Some(policies.iter().map(|p| p.to_string()).collect()),
            ..Default::default()
        };
        stable_json(&run(s, &opts, &|_, _| {}).unwrap())
    };
    for key in sweep::KEYS {
        let ignoring: Vec<&str> = autoscaler_sim::scenario::POLICY_NAMES
            .into_iter()
            .filter(|p| !sweep::policy_reads(p, key))
            .collect();
        if ignoring.is_empty() {
            continue;
        }
        let values = match key {
            sweep::Key::GpuUtilizationThreshold
            | sweep::Key::UtilizationThreshold
            | sweep::Key::RightSizeSavings => "0.05,0.95",
            sweep::Key::MinNodes => "0,3",
            _ => "0s,5h",
        };
        let sw = sweep::parse(&format!("{}={values}", key.name()), &s).unwrap();
        let [a, b] = [0, 1].map(|i| json_of(&sw.apply(&s, sw.values[i].1), &ignoring));
        assert_eq!(a, b, "{ignoring:?} ignore {}", key.name());
    }
    // The control: a policy that reads the key does change with it.
    let sw = sweep::parse("unneeded-time=0s,5h", &s).unwrap();
    let [a, b] = [0, 1].map(|i| json_of(&sw.apply(&s, sw.values[i].1), &["gpu-autoscaler"]));
    assert_ne!(a, b);
}

#[test]
fn the_pause_after_a_scale_up_is_swept_per_pool_from_the_cluster_value() {
    let s = tiny();
    let sw = sweep::parse("scale-down-delay-after-add=0s,5h", &s).unwrap();
    // No pool sets its own: the current value is the cluster's (the controller's default).
    assert_eq!(sw.current_text(&s), "0s");
    let mut ten = s.clone();
    ten.cluster.disruption.delay_after_scale_up_s = 600;
    assert_eq!(sw.current_text(&ten), "10m");
    let ours = |sc: &Scenario| {
        let opts = RunOptions {
            policies: Some(vec!["gpu-autoscaler".into()]),
            ..Default::default()
        };
        run(sc, &opts, &|_, _| {}).unwrap().policies.remove(0)
    };
    let [none, long] = [0, 1].map(|i| ours(&sw.apply(&s, sw.values[i].1)));
    assert_eq!(none.cost, ours(&s).cost, "0s is the current setting");
    // Five hours outlast the three-hour run: after its first scale-up no node of a pool goes.
    assert!(
        long.nodes_terminated < none.nodes_terminated && long.cost > none.cost,
        "0s: {} nodes down, ${:.2}; 5h: {} nodes down, ${:.2}",
        none.nodes_terminated,
        none.cost,
        long.nodes_terminated,
        long.cost
    );
}

#[test]
fn a_sweep_runs_readers_per_value_and_the_others_once() {
    let s = tiny();
    // Both pools' unneeded time is 2m: that value is the current row, not run twice.
    let sw = sweep::parse("unneeded-time=1m,2m,1h", &s).unwrap();
    let seeds = [1, 2];
    let jobs = sweep::jobs(&sw, &s, &s.policies, &seeds);
    assert_eq!(jobs.len(), 6);
    for j in jobs.iter().filter(|j| j.variant > 0) {
        assert_eq!(j.policies, ["gpu-autoscaler", "ca-like", "ca-ideal"]);
    }
    let r = sweep::run(
        &sw,
        &s,
        &s.policies,
        &seeds,
        |scenario, seed, policies| {
            let opts = RunOptions {
                seed: Some(seed),
                policies: Some(policies),
                ..Default::default()
            };
            run(scenario, &opts, &|_, _| {})
        },
        || {},
    )
    .unwrap();
    let names: Vec<&str> = r.tables.iter().map(|t| t.policy.as_str()).collect();
    assert_eq!(names, ["gpu-autoscaler", "ca-like", "ca-ideal"]);
    for t in &r.tables {
        let labels: Vec<&str> = t.rows.iter().map(|r| r.label.as_str()).collect();
        assert_eq!(labels, ["2m (current)", "1m", "1h"]);
        assert!(t.rows.iter().all(|r| r.runs.len() == 2));
    }
    let others: Vec<&str> = r.others.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(others, ["karpenter-like", "karpenter-ideal"]);
    let text = sweep::text(&r);
    assert!(
        text.contains("not affected by unneeded-time")
            && text.contains("recommendation (gpu-autoscaler): ")
            && text.contains("idle GPU-h, empty"),
        "{text}"
    );
    // An hour of unneeded time keeps empty GPU nodes longer than two minutes do: that is the
    // column an on-call engineer reads it from.
    let idle = |i: usize| {
        let runs = &r.tables[0].rows[i].runs;
        runs.iter().map(|p| p.gpu_hours_idle_empty).sum::<f64>()
    };
    assert!(idle(2) > idle(0), "{text}");
    let doc: serde_json::Value = serde_json::from_str(&sweep::to_json(&r)).unwrap();
    assert_eq!(doc["recommendation"]["policy"], "gpu-autoscaler");
    assert_eq!(doc["current"], "2m");
    let html = sweep::to_html(&r);
    assert!(html.contains("<svg") && html.contains("Decision tables"));
}

/// One pod asks for more GPUs than any g6 has; the rest run.
const TOO_BIG: &str = "\
name: too-big
seed: 1
duration: 1h
catalog: aws
pools:
  - name: gpu
    families: [g6]
    taints: [{key: nvidia.com/gpu, value: present}]
workloads:
  - deployment:
      name: small
      replicas: [{at: 0s, count: 1}]
      pod: {nodePool: gpu, cpu: 1, memory: 2Gi, gpus: 1}
  - deployment:
      name: big
      replicas: [{at: 0s, count: 1}]
      pod: {nodePool: gpu, cpu: 1, memory: 2Gi, gpus: 16}
";

#[test]
fn explain_says_why_a_simulated_pod_is_pending_and_why_a_node_stays() {
    use autoscaler_sim::policy::{Asked, Explained};
    let s = Scenario::parse(Path::new("too-big.yaml"), TOO_BIG).unwrap();
    let ask = |asked: Asked, at: Option<i64>| {
        let opts = RunOptions {
            explain: Some((asked, at)),
            ..ours_only()
        };
        let r = run(&s, &opts, &|_, _| {}).unwrap();
        r.policies[0].explanation.clone().expect("an answer")
    };
    let Explained::Pod(e) = ask(Asked::Pod("big-0".into()), None) else {
        panic!("a pod's answer")
    };
    let text = e.render();
    assert!(
        text.contains("pending; no node can be launched for it: no instance type in NodePool gpu offers 16 nvidia.com/gpu"),
        "{text}"
    );
    // Every g6 type is named, refused for its GPUs; the rest of the catalog is left out by
    // the pool's family requirement.
    let (g6, others): (Vec<_>, Vec<_>) = e.pools[0]
        .instance_types
        .iter()
        .partition(|t| t.instance_type.starts_with("g6."));
    assert!(g6.len() > 3 && !others.is_empty(), "{text}");
    for t in g6 {
        let r = t.refused.as_ref().expect("refused");
        assert!(
            !t.excluded && r.message.contains("16 nvidia.com/gpu"),
            "{text}"
        );
    }
    assert!(others.iter().all(|t| t.excluded), "{text}");
    // The small pod runs: it is bound, and its node stays (its GPU is in use).
    let Explained::Pod(small) = ask(Asked::Pod("small-0".into()), None) else {
        panic!("a pod's answer")
    };
    let autoscaler_core::explain::Outcome::Bound { node } = small.outcome else {
        panic!("bound: {small:?}")
    };
    let Explained::Node(n) = ask(Asked::Node(node.clone()), None) else {
        panic!("a node's answer")
    };
    assert!(!n.verdict.disrupted, "{}", n.render());
    assert!(
        n.render()
            .contains("kept (AboveThreshold): GPU utilization 1.00"),
        "{}",
        n.render()
    );
    // Before anything happened, at t=0 the pods exist but no node does.
    let Explained::Missing(why) = ask(Asked::Node(node.clone()), Some(0)) else {
        panic!("no node yet")
    };
    assert_eq!(why, format!("no node {node} at t=0s"));
    assert!(Asked::parse("deployment/x").is_err());
}

/// One GPU job on one node, with exact latencies: what each part of the paid GPU-hours must be.
const ONE_GPU_JOB: &str = "\
name: one-gpu-job
seed: 1
duration: 2h
catalog: aws
cluster:
  launch: {cpu: 45s, gpu: 120s, jitter: 0}
  registration: 20s
  devicePluginDelay: 3m
pools:
  - name: gpu
    families: [g4dn]
    taints: [{key: nvidia.com/gpu, value: present}]
    disruption: {consolidateAfter: 1m, unneededTime: 2m}
workloads:
  - jobs:
      name: train
      arrivals: {at: [0s]}
      duration: {fixed: 30m}
      pod: {nodePool: gpu, cpu: 1, memory: 2Gi, gpus: 1}
";

#[test]
fn paid_gpu_hours_split_into_booting_idle_and_held() {
    let s = Scenario::parse(Path::new("one-gpu-job.yaml"), ONE_GPU_JOB).unwrap();
    let r = run(&s, &RunOptions::default(), &|_, _| {}).unwrap();
    let summary = report::summary(&r);
    for p in &r.policies {
        let parts = p.gpu_hours_booting + p.gpu_hours_idle + p.gpu_hours_requested;
        assert!(
            (parts - p.gpu_hours_paid).abs() < 1e-9 && p.gpu_hours_idle >= 0.0,
            "{}: {parts} against {} paid\n{summary}",
            p.name,
            p.gpu_hours_paid
        );
    }
    let ours = &r.policies[0];
    assert_eq!(ours.name, "gpu-autoscaler");
    assert_eq!(ours.nodes_launched, 1, "{summary}");
    // Launch 120 s, registration 20 s, device plugin 3 min, on a one-GPU node.
    assert!(
        (ours.gpu_hours_booting - 320.0 / 3600.0).abs() < 1e-9,
        "{summary}"
    );
    assert!((ours.gpu_hours_requested - 0.5).abs() < 1e-9, "{summary}");
    // The node goes after the job ends, its unneeded time and consolidateAfter: idle, not held,
    // and all of it on a node no pod held a GPU of.
    assert!(ours.gpu_hours_idle >= 2.0 / 60.0, "{summary}");
    assert!(
        (ours.gpu_hours_idle_empty - ours.gpu_hours_idle).abs() < 1e-9,
        "{summary}"
    );
    assert!(summary.contains("paid GPU-hours = booting"), "{summary}");
    let json = report::to_json(&r);
    assert!(json.contains("\"gpu_hours_booting\": 0.0889"), "{json}");
    let html = report::to_html(&r);
    let row = format!(
        "<tr><td>gpu-autoscaler</td><td>{:.1}</td><td>{:.1} ({:.1}%)</td>",
        ours.gpu_hours_paid,
        ours.gpu_hours_booting,
        ours.gpu_hours_booting / ours.gpu_hours_paid * 100.0
    );
    assert!(
        html.contains("Where the paid GPU-hours went") && html.contains(&row),
        "{row}\n{html}"
    );

    // The same job on a four-GPU node: three GPUs idle beside it for its half hour.
    let four = ONE_GPU_JOB.replace("families: [g4dn]", "instanceTypes: [g4dn.12xlarge]");
    let s = Scenario::parse(Path::new("one-gpu-job-4.yaml"), &four).unwrap();
    let opts = RunOptions {
        policies: Some(vec!["gpu-autoscaler".into()]),
        ..Default::default()
    };
    let r = run(&s, &opts, &|_, _| {}).unwrap();
    let p = &r.policies[0];
    let summary = report::summary(&r);
    assert!(
        (p.gpu_hours_booting - 4.0 * 320.0 / 3600.0).abs() < 1e-9,
        "{summary}"
    );
    let beside = p.gpu_hours_idle - p.gpu_hours_idle_empty;
    assert!((beside - 3.0 * 0.5).abs() < 1e-9, "{summary}");
}

/// A NodePool whose requirements name a label of its own (`team`), and Deployments asking for
/// each value it allows.
const TEAMS: &str = "\
name: teams
seed: 1
duration: 1h
catalog: aws
nodePools:
  - metadata: {name: shared}
    spec:
      template:
        requirements:
          - {key: node.kubernetes.io/instance-type, operator: In, values: [m6i.large]}
          - {key: team, operator: In, values: [ml, research]}
workloads:
  - deployment:
      name: ml
      replicas: [{at: 0s, count: 1}]
      pod: {nodePool: shared, cpu: 1, memory: 1Gi, nodeSelector: {team: ml}}
  - deployment:
      name: research
      replicas: [{at: 0s, count: 1}]
      pod: {nodePool: shared, cpu: 1, memory: 1Gi, nodeSelector: {team: research}}
";

#[test]
fn pods_asking_for_a_label_their_nodepool_defines_run_on_nodes_labelled_so() {
    // The plan gives each node the value its pods ask for; were the label not on the launched
    // node, the pods would never bind and the policy would launch node after node.
    let s = Scenario::parse(Path::new("teams.yaml"), TEAMS).unwrap();
    let r = run(&s, &ours_only(), &|_, _| {}).unwrap();
    let p = &r.policies[0];
    let summary = report::summary(&r);
    assert_eq!(p.pending_at_end, 0, "{summary}");
    assert_eq!(p.nodes_launched, 2, "{summary}");
    assert_eq!(p.safety_violations, 0, "{summary}");
}

/// Karpenter's blueprint for an on-demand/spot split: two NodePools give a label of their own
/// disjoint values (spot 2-5, on-demand 1), and a Deployment spreads over that label.
const CAPACITY_SPLIT: &str = "\
name: capacity-split
seed: 1
duration: 1h
catalog: aws
nodePools:
  - metadata: {name: spot}
    spec:
      template:
        requirements:
          - {key: node.kubernetes.io/instance-type, operator: In, values: [m6i.large]}
          - {key: karpenter.sh/capacity-type, operator: In, values: [spot]}
          - {key: capacity-spread, operator: In, values: ['2', '3', '4', '5']}
  - metadata: {name: on-demand}
    spec:
      template:
        requirements:
          - {key: node.kubernetes.io/instance-type, operator: In, values: [m6i.large]}
          - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}
          - {key: capacity-spread, operator: In, values: ['1']}
workloads:
  - deployment:
      name: web
      replicas: [{at: 0s, count: 10}]
      pod:
        cpu: 900m
        memory: 1Gi
        labels: {app: web}
        spread: [{topologyKey: capacity-spread, maxSkew: 1}]
";

#[test]
fn a_spread_over_a_label_two_nodepools_define_splits_the_pods_between_them() {
    // Two pods per value: two on on-demand nodes, eight on spot. Before, every pod went to
    // the cheaper spot pool, and the scheduler (seeing one domain) bound them all there.
    // Two pods fill a node: with room to spare, a pod planned for the on-demand node can be
    // bound to a spot node that registers first (the scheduler knows only domains that have a
    // node), as it can under Karpenter.
    let s = Scenario::parse(Path::new("capacity-split.yaml"), CAPACITY_SPLIT).unwrap();
    let r = run(&s, &ours_only(), &|_, _| {}).unwrap();
    let p = &r.policies[0];
    let summary = report::summary(&r);
    assert_eq!(p.pending_at_end, 0, "{summary}");
    assert_eq!(p.safety_violations, 0, "{summary}");
    assert_eq!(p.nodes_launched, 5, "{summary}");
    let mut per_pool: BTreeMap<&str, usize> = BTreeMap::new();
    for (_, node) in &p.first_node {
        *per_pool
            .entry(p.node_records[*node].pool.as_str())
            .or_default() += 1;
    }
    assert_eq!(
        per_pool,
        BTreeMap::from([("on-demand", 2), ("spot", 8)]),
        "{summary}"
    );
}

/// Three replicas that must not share a capacity type, on a pool offering spot and on-demand.
const APART_BY_CAPACITY_TYPE: &str = "\
name: apart
seed: 1
duration: 1h
catalog: aws
nodePools:
  - metadata: {name: web}
    spec:
      template:
        requirements:
          - {key: node.kubernetes.io/instance-type, operator: In, values: [m6i.large]}
          - {key: karpenter.sh/capacity-type, operator: In, values: [spot, on-demand]}
workloads:
  - deployment:
      name: web
      replicas: [{at: 0s, count: 3}]
      pod:
        cpu: 500m
        memory: 1Gi
        labels: {app: web}
        antiAffinity: [karpenter.sh/capacity-type]
";

#[test]
fn pods_apart_by_capacity_type_get_one_node_per_capacity_type_and_no_more() {
    // Two capacity types hold two of the three pods; the third waits. The planner ignored
    // anti-affinity over the capacity type before: it counted all three on one spot node, the
    // scheduler bound one, and the other two waited the whole hour for a node of the other
    // capacity type that never came (one node launched, two pods pending at the end).
    let s = Scenario::parse(Path::new("apart.yaml"), APART_BY_CAPACITY_TYPE).unwrap();
    let r = run(&s, &ours_only(), &|_, _| {}).unwrap();
    let p = &r.policies[0];
    let summary = report::summary(&r);
    assert_eq!(p.pending_at_end, 1, "{summary}");
    assert_eq!(p.nodes_launched, 2, "{summary}");
    assert_eq!(p.safety_violations, 0, "{summary}");
}

/// [`CAPACITY_SPLIT`] with `replicas` pods whose spread line is `spread` (and any further
/// pod fields after it).
fn capacity_split_with(replicas: u32, spread: &str) -> Scenario {
    let text = CAPACITY_SPLIT
        .replace("count: 10", &format!("count: {replicas}"))
        .replace(
            "        spread: [{topologyKey: capacity-spread, maxSkew: 1}]\n",
            spread,
        );
    assert_ne!(text, CAPACITY_SPLIT);
    Scenario::parse(Path::new("capacity-split.yaml"), &text).unwrap()
}

#[test]
fn pods_with_rules_on_two_keys_get_nodes_once_and_keep_both() {
    // Spread over the label the pools define and over the capacity type. Chosen one key at a
    // time, a pod could be pinned to capacity-spread 1 (only the on-demand pool) and to spot;
    // and the simulator's in-flight claims lacked the label they were pinned to, so the pod
    // got another claim every round: 12 nodes launched and 10 removed for 3 pods.
    let s = capacity_split_with(
        4,
        "        spread: [{topologyKey: capacity-spread, maxSkew: 1}, \
         {topologyKey: karpenter.sh/capacity-type, maxSkew: 1}]\n",
    );
    let r = run(&s, &ours_only(), &|_, _| {}).unwrap();
    let p = &r.policies[0];
    let summary = report::summary(&r);
    assert_eq!(p.pending_at_end, 0, "{summary}");
    assert_eq!(p.safety_violations, 0, "{summary}");
    assert!(p.nodes_launched <= 4, "{summary}");
    // Anti-affinity over the arch (every type is amd64) lets one pod run; the other two wait,
    // and no node is launched for them (before: 7 launched, 6 removed).
    let s = capacity_split_with(
        3,
        "        spread: [{topologyKey: capacity-spread, maxSkew: 1}]\n        \
         antiAffinity: [kubernetes.io/arch]\n",
    );
    let r = run(&s, &ours_only(), &|_, _| {}).unwrap();
    let p = &r.policies[0];
    let summary = report::summary(&r);
    assert_eq!(p.pending_at_end, 2, "{summary}");
    assert_eq!(p.nodes_launched, 1, "{summary}");
}

const MPS: &str = "\
name: mps
seed: 7
duration: 2h
catalog: aws
pools:
  - name: mps
    families: [g5]
    taints: [{key: nvidia.com/gpu, value: present}]
    mps: 4
    disruption: {consolidateAfter: 2m, unneededTime: 5m}
workloads:
  - jobs:
      name: infer
      arrivals: {perHour: 40}
      duration: {min: 10m, max: 30m}
      pod: {nodePool: mps, cpu: 500m, memory: 2Gi, gpus: 1}
  - jobs:
      name: big
      arrivals: {every: 30m, end: 1h}
      duration: {fixed: 10m}
      pod: {nodePool: mps, cpu: 1, memory: 4Gi, gpus: 2}
";

#[test]
fn an_mps_pool_runs_one_replica_pods_and_never_binds_a_pod_asking_for_two() {
    // NVIDIA's device plugin fails a container asking for two MPS replicas: no node is
    // launched for such a pod, the simulated scheduler never binds it to a node of the pool
    // (which would have the room), and it is still pending at the end.
    let s = Scenario::parse(Path::new("mps.yaml"), MPS).unwrap();
    let r = run(&s, &ours_only(), &|_, _| {}).unwrap();
    let p = &r.policies[0];
    let summary = report::summary(&r);
    assert!(p.nodes_launched > 0 && p.pods_created > 20, "{summary}");
    assert_eq!(p.pending_at_end, 2, "{summary}");
}

/// Scenario pods can state preferences: a `ScheduleAnyway` spread and preferred
/// anti-affinity, which this project's planner holds while a new node can keep them (three
/// replicas, three nodes; one node without them); a misspelt `whenUnsatisfiable` is refused
/// naming the field and line.
#[test]
fn scenario_preferences_are_held_by_the_planner() {
    let nodes = |pod_extra: &str| {
        let yaml = format!(
            "name: prefs\nseed: 1\nduration: 20m\ncatalog: aws\npolicies: [gpu-autoscaler]\n\
             pools:\n  - name: cpu\n    instanceTypes: [m6i.xlarge]\n    capacityTypes: [on-demand]\n\
             workloads:\n  - deployment:\n      name: web\n      replicas: [{{at: 0s, count: 3}}]\n\
             \x20     pod: {{nodePool: cpu, cpu: 500m, memory: 1Gi{pod_extra}}}\n"
        );
        let s = Scenario::parse(Path::new("prefs.yaml"), &yaml).unwrap();
        let r = run(&s, &RunOptions::default(), &|_, _| {}).unwrap();
        let p = &r.policies[0];
        assert_eq!(p.pending_at_end, 0, "{}", report::summary(&r));
        p.nodes_launched
    };
    assert_eq!(nodes(""), 1);
    assert_eq!(
        nodes(
            ", spread: [{topologyKey: kubernetes.io/hostname, whenUnsatisfiable: ScheduleAnyway}]"
        ),
        3
    );
    assert_eq!(
        nodes(", preferredAntiAffinity: [kubernetes.io/hostname]"),
        3
    );
    let bad = "name: prefs\nduration: 20m\ncatalog: aws\npools:\n  - name: cpu\n    instanceTypes: [m6i.xlarge]\n\
               workloads:\n  - deployment:\n      name: web\n      replicas: [{at: 0s, count: 3}]\n\
               \x20     pod: {nodePool: cpu, cpu: 500m, spread: [{topologyKey: kubernetes.io/hostname, whenUnsatisfiable: Sometimes}]}\n";
    let err = Scenario::parse(Path::new("prefs.yaml"), bad)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("spread[0].whenUnsatisfiable")
            && err.contains("Sometimes")
            && err.contains(":11"),
        "{err}"
    );
}
