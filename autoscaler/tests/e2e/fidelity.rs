//! `bench fidelity` in a small configuration: twenty virtual minutes of the `gangs` case
//! (gangs, ProvisioningRequests when their CRD is in ../shared, single-GPU jobs) at 30 times
//! the real clock, through the simulator and through the controller binary on an in-process
//! fake API server. Checks the comparison is wired end to end: both sides launch, every pod
//! binds, and launches and binds pair up (pool and instance type, pod name). The agreement figure
//! itself is a benchmark result (docs/src/reference/benchmarks.md), not asserted here beyond
//! "not broken": the machine's load moves decisions in time.

use serde_json::Value;

use crate::harness::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_bench_fidelity_small_gangs_agree() {
    let crd = crate::provreq::provreq_crd();
    let extra: Vec<&str> = crd.iter().map(String::as_str).collect();
    let c = Cluster::start_opts(options(), &extra).await;
    let out = c.dir.join("fidelity.json");
    let args: Vec<String> = [
        "bench",
        "fidelity",
        "--case=gangs",
        "--duration=20m",
        "--compression=30",
        // Generous: a loaded machine delays the controller's rounds by seconds of real time,
        // minutes of virtual time.
        "--tolerance=5m",
    ]
    .iter()
    .map(|s| s.to_string())
    .chain([
        format!("--kubeconfig={}", c.kubeconfig.display()),
        format!("--json={}", out.display()),
    ])
    .collect();
    let output = tokio::task::spawn_blocking(move || {
        std::process::Command::new(env!("CARGO_BIN_EXE_gpu-autoscaler"))
            .args(&args)
            .output()
            .expect("the benchmark runs")
    })
    .await
    .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "bench failed:\n{stderr}");
    let r: Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    assert_eq!(r["scenarios"], serde_json::json!(["gangs"]), "{r:#}");
    let case = &r["cases"][0];
    let pods = case["pods"].as_u64().unwrap();
    assert!(pods >= 5, "the slice has pods: {case:#}");
    for side in ["simulator", "controller"] {
        assert!(
            case[side]["launches"].as_u64().unwrap() >= 2,
            "{side} launched: {case:#}\n{stdout}\n{stderr}"
        );
        assert!(
            case[side]["pods_bound"].as_u64().unwrap() >= pods / 2,
            "{side} bound pods: {case:#}\n{stdout}"
        );
    }
    // Launches pair up by pool and instance type, binds by pod name: the two sides read the
    // same NodePools, catalog and pods.
    for kind in ["launch", "bound"] {
        assert!(
            case["agreement_by_kind"][kind].as_f64().unwrap() >= 0.75,
            "{kind}: {case:#}\n{stdout}"
        );
    }
    let a = r["decision_agreement"].as_f64().unwrap();
    assert!((0.0..=1.0).contains(&a), "{r:#}");
    assert!(r["node_hours_divergence"].as_f64().unwrap() >= 0.0, "{r:#}");
}
