//! `bench reliability` in a small configuration: the same suite as the benchmark (launches
//! with SIGKILLs at the lifecycle's kill points, cloud faults at 30 % of calls, API faults at
//! 5 %, a disruption replay), against an in-process fake API server, judged by the same
//! counts, which must all be zero. Also: the kill points themselves, one at a time.

use std::time::Duration;

use fake_apiserver::{FaultRates, Faults};
use serde_json::Value;

use crate::harness::*;

fn api_faults(rate: f64) -> Faults {
    let half = FaultRates {
        throttle: rate / 2.0,
        server_error: rate / 2.0,
        ..FaultRates::default()
    };
    Faults {
        seed: 5,
        reads: half,
        writes: FaultRates {
            conflict: rate / 3.0,
            throttle: rate / 3.0,
            server_error: rate / 3.0,
        },
        watches: half,
        watch_drop: rate / 10.0,
        watch_gone: 0.0,
        lost_create_answer: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_bench_reliability_small_counts_nothing_wrong() {
    let mut opts = options();
    opts.graceful_deletion = Some(0.02);
    opts.pod_gc_delay = Duration::from_secs(2);
    opts.faults = api_faults(0.05);
    let c = Cluster::start_opts(opts, &[]).await;
    let clean = c
        .server()
        .serve_without_faults("127.0.0.1:0".parse().unwrap())
        .await
        .expect("clean listener");
    let clean_kc = c.dir.join("clean-kubeconfig");
    std::fs::write(&clean_kc, clean.kubeconfig_yaml()).unwrap();
    let out = c.dir.join("reliability.json");
    let args: Vec<String> = [
        "bench",
        "reliability",
        "--launches=12",
        "--kills=8",
        "--disruption-events=150",
        "--deployments=2",
        "--max-replicas=5",
        "--cloud-fault-rate=0.3",
        "--api-fault-rate=0.05",
        "--settle-timeout=120s",
    ]
    .iter()
    .map(|s| s.to_string())
    .chain([
        format!("--kubeconfig={}", c.kubeconfig.display()),
        format!("--clean-kubeconfig={}", clean_kc.display()),
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
    assert!(output.status.success(), "bench failed:\n{stderr}");
    let r: Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    for key in [
        "leaked_instances",
        "duplicate_nodes",
        "duplicate_claims",
        "lost_pods",
        "unplaced_satisfiable_pods",
        "safety_violations",
    ] {
        assert_eq!(r[key], 0, "{key} in {r:#}\n{stderr}");
    }
    assert!(r["launches"].as_u64().unwrap() >= 12, "{r:#}\n{stderr}");
    assert!(r["kill_points"].as_u64().unwrap() >= 8, "{r:#}");
    assert!(r["disruption_events"].as_u64().unwrap() >= 150, "{r:#}");
    assert!(r["cloud_faults_injected"].as_u64().unwrap() > 0, "{r:#}");
    assert!(r["api_faults_injected"].as_u64().unwrap() > 0, "{r:#}");
    assert_eq!(
        r["api_faults_injected"].as_u64().unwrap(),
        c.server().faults_injected().total(),
        "the benchmark reads the server's own count"
    );
}

fn launch_request(claim: &str) -> providers::LaunchRequest {
    use autoscaler_core::CapacityType::OnDemand;
    providers::LaunchRequest {
        claim: claim.into(),
        pool: "gpu".into(),
        class: providers::NodeClassRef::default(),
        candidates: ["us-east-1a", "us-east-1b"]
            .iter()
            .map(|z| providers::OfferingKey::new("g4dn.xlarge", *z, OnDemand))
            .collect(),
        labels: Default::default(),
        taints: vec![],
        startup_taints: vec![],
        placement_group: None,
        gpu_sharing: Default::default(),
    }
}

/// The documented bound (docs/src/reliability.md): one kwok operation is at most
/// `retry.max_attempts` (5) cloud calls, whatever the faults, and the controller makes each
/// operation once per round, so one launch in a round is at most 5 calls (not 5 x 5). Under
/// faults at 30 % of calls, every operation stays within the bound and the cloud ends as the
/// successful operations left it: one instance per launched claim, none after the deletes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kwok_operations_make_at_most_max_attempts_cloud_calls_under_faults() {
    use providers::CloudProvider;
    use providers::common::RetrySettings;
    use providers::faults::CloudFaultRates;
    use providers::kwok::{KwokConfig, KwokProvider};

    let c = Cluster::start().await;
    let retry = RetrySettings {
        max_attempts: 5,
        base_delay_ms: 1,
        max_delay_ms: 5,
    };
    let config = |faults, seed| KwokConfig {
        retry: retry.clone(),
        faults,
        fault_seed: seed,
        ..KwokConfig::default()
    };
    let catalog = providers::catalog::default_catalog();
    // Every call failing transiently: exactly max_attempts calls, then the error.
    let failing = KwokProvider::new(
        c.client.clone(),
        catalog.clone(),
        config(
            CloudFaultRates {
                throttle: 1.0,
                ..CloudFaultRates::default()
            },
            1,
        ),
    );
    let err = failing
        .launch(&launch_request("always-throttled"))
        .await
        .unwrap_err();
    assert!(
        matches!(err, providers::ProviderError::Throttled { .. }),
        "{err}"
    );
    assert_eq!(failing.faults_injected().calls, 5);
    assert!(c.instances().await.is_empty(), "no call went through");

    // 30 % faults of every kind: each operation within the bound.
    let kwok = KwokProvider::new(
        c.client.clone(),
        catalog,
        config(CloudFaultRates::even(0.3), 42),
    );
    let mut launched = Vec::new();
    for i in 0..40 {
        let before = kwok.faults_injected().calls;
        let result = kwok.launch(&launch_request(&format!("claim-{i}"))).await;
        let calls = kwok.faults_injected().calls - before;
        assert!((1..=5).contains(&calls), "launch {i}: {calls} calls");
        if let Ok(l) = result {
            launched.push(l.instance.provider_id);
        }
    }
    let counts = kwok.faults_injected();
    assert!(counts.total() > 0, "faults were injected: {counts:?}");
    assert!(
        launched.len() >= 20,
        "most launches succeed: {}",
        launched.len()
    );
    // A timeout after the call took effect leaves an instance whose launch reported failure:
    // the claim name is the idempotency token, so the claim's next launch finds it.
    for pid in &launched {
        loop {
            let before = kwok.faults_injected().calls;
            let result = kwok.delete(pid).await;
            assert!(kwok.faults_injected().calls - before <= 5);
            if result.is_ok() {
                break;
            }
        }
    }
    let names: Vec<String> = c
        .instances()
        .await
        .iter()
        .map(kube::ResourceExt::name_any)
        .collect();
    for name in &names {
        let again = kwok.launch(&launch_request(name)).await;
        if let Ok(l) = again {
            assert_eq!(
                l.instance.claim.as_deref(),
                Some(name.as_str()),
                "the same instance"
            );
        }
    }
    assert_eq!(
        c.instances().await.len(),
        names.len(),
        "a repeated launch creates no second instance"
    );
}

/// The claim name is a launch's idempotency token: a launch refused for capacity after an
/// earlier attempt of it took effect (its answer lost to a timeout, or its controller killed)
/// is answered with that instance, as EC2 answers a repeated ClientToken; a launch that never
/// took effect is refused. (Refusing the first would fail a claim whose instance boots and
/// takes pods: `bench reliability` found its node deleted under a PDB-protected pod.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kwok_answers_a_refused_retry_of_a_launch_that_took_effect_with_its_instance() {
    use providers::CloudProvider;
    use providers::faults::CloudFaultRates;
    use providers::kwok::{KwokConfig, KwokProvider};

    let c = Cluster::start().await;
    let catalog = providers::catalog::default_catalog();
    let clean = KwokProvider::new(c.client.clone(), catalog.clone(), KwokConfig::default());
    let first = clean.launch(&launch_request("took-effect")).await.unwrap();
    let refusing = KwokProvider::new(
        c.client.clone(),
        catalog,
        KwokConfig {
            faults: CloudFaultRates {
                insufficient_capacity: 1.0,
                ..CloudFaultRates::default()
            },
            fault_seed: 1,
            ..KwokConfig::default()
        },
    );
    let again = refusing
        .launch(&launch_request("took-effect"))
        .await
        .expect("the instance of the launch that took effect");
    assert_eq!(again.instance.provider_id, first.instance.provider_id);
    let refused = refusing
        .launch(&launch_request("never-launched"))
        .await
        .unwrap_err();
    assert!(
        matches!(
            refused,
            providers::ProviderError::InsufficientCapacity { .. }
        ),
        "{refused}"
    );
    assert_eq!(
        c.instances().await.len(),
        1,
        "no instance for the refused one"
    );
}
