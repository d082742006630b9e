//! Fuzz targets, one per parser of untrusted input, as property tests (the toolchain here is
//! stable only, so cargo-fuzz cannot run; see docs/FUZZING.md for long runs).
//!
//! Each target first replays a fixed corpus (the files of `tests/bad-inputs` and good
//! examples), then random inputs: arbitrary text, and structured inputs built from the field
//! names the parser knows with extreme values (NaN, infinities, 1e400, values at the integer
//! limits), so that most cases get past the first syntax check. Every target asserts that the
//! parser returns (never panics) and checks what an accepted value guarantees. `cargo test`
//! runs 64 random cases per target; `PROPTEST_CASES=n` runs n.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use autoscaler::controller::settings::parse_duration as flag_duration;
use autoscaler::controller::translate;
use autoscaler_core::duration::{self, Bare, MAX_DURATION};
use autoscaler_core::quantity::Quantity;
use autoscaler_core::resources::Resources;
use autoscaler_sim::openb_workload::{self, OpenbOptions};
use autoscaler_sim::scenario::{self, Scenario};
use autoscaler_sim::{SimError, traces, workload};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

/// Random cases per target under `cargo test`; `PROPTEST_CASES` overrides.
const DEFAULT_CASES: u32 = 64;

fn runner() -> TestRunner {
    let mut config = Config::default();
    if std::env::var_os("PROPTEST_CASES").is_none() {
        config.cases = DEFAULT_CASES;
    }
    // Failures are reported with the minimal input; no regression files in the tree.
    config.failure_persistence = None;
    TestRunner::new(config)
}

/// Runs `check` on random values of `strategy` and prints how many it accepted, so a long run
/// shows the structured inputs reach past the first syntax check.
fn fuzz<S>(name: &str, strategy: S, check: impl Fn(S::Value) -> bool)
where
    S: Strategy,
    S::Value: std::fmt::Debug,
{
    let (cases, accepted) = (AtomicUsize::new(0), AtomicUsize::new(0));
    let start = Instant::now();
    runner()
        .run(&strategy, |v| {
            cases.fetch_add(1, Ordering::Relaxed);
            if check(v) {
                accepted.fetch_add(1, Ordering::Relaxed);
            }
            Ok(())
        })
        .unwrap();
    eprintln!(
        "fuzz {name}: {} cases ({} accepted) in {:.1} s",
        cases.into_inner(),
        accepted.into_inner(),
        start.elapsed().as_secs_f64()
    );
}

fn corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/bad-inputs")
}

/// Every file of the corpus directory `sub` as text.
fn corpus(sub: &str) -> Vec<(PathBuf, String)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(corpus_dir().join(sub)).expect("corpus directory") {
        let path = entry.expect("entry").path();
        let text = std::fs::read_to_string(&path).expect("corpus file");
        out.push((path, text));
    }
    out.sort();
    assert!(!out.is_empty(), "empty corpus {sub}");
    out
}

/// Numbers as users mistype them: the extremes each parser must refuse or bound.
fn wild_number() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("1e400".to_string()),
        Just("1e300".to_string()),
        Just("-1e300".to_string()),
        Just(".nan".to_string()),
        Just(".inf".to_string()),
        Just("-.inf".to_string()),
        Just("NaN".to_string()),
        Just("inf".to_string()),
        Just("-1".to_string()),
        Just("0".to_string()),
        Just("4294967295".to_string()),
        Just("4000000000".to_string()),
        Just("9223372036854775807".to_string()),
        Just("99999999999999999999".to_string()),
        Just("166153499473114484112975.882535043071Ki".to_string()),
        Just("100000000d".to_string()),
        Just("99999999999999999h".to_string()),
        Just("1.5h".to_string()),
        Just("1h30m".to_string()),
        Just("90s".to_string()),
        Just("500m".to_string()),
        Just("16Gi".to_string()),
        any::<i64>().prop_map(|v| v.to_string()),
        any::<f64>().prop_map(|v| v.to_string()),
        "[0-9]{1,40}(\\.[0-9]{1,40})?(e[0-9]{1,3}|Ki|Mi|Ei|E|m|s|h|d|ms)?",
    ]
}

/// Mostly one of the `good` values (so that a structured input gets past the first check and
/// the deeper ones run), sometimes a wild number.
fn mostly(good: &'static [&'static str]) -> impl Strategy<Value = String> {
    prop_oneof![
        5 => prop::sample::select(good).prop_map(str::to_string),
        1 => wild_number(),
    ]
}

// ---------------------------------------------------------------------------------------------
// Quantities.

fn check_quantity(text: &str) -> bool {
    let Ok(q) = Quantity::parse(text) else {
        return false;
    };
    // The canonical form parses back to the same value: nothing was wrapped or saturated.
    assert_eq!(Quantity::parse(&q.to_string()), Ok(q), "{text:?}");
    for name in ["cpu", "memory", "nvidia.com/gpu"] {
        let mut r = Resources::new();
        if r.add_quantity(name, q).is_ok() {
            assert!(r.get(name) >= 0, "{text:?} as {name} gave {}", r.get(name));
        }
    }
    true
}

#[test]
fn fuzz_quantities() {
    for seed in [
        "1",
        "-0",
        "0.166153499473114484112975882535043071Ki",
        "1e40",
        "9Ei",
    ] {
        check_quantity(seed);
    }
    let strategy = prop_oneof!["\\PC{0,48}", wild_number()];
    fuzz("quantities", strategy, |text| check_quantity(&text));
}

// ---------------------------------------------------------------------------------------------
// Durations: one grammar, the same verdict and message in every place.

fn check_duration(text: &str) -> bool {
    let core = duration::parse(text.trim(), Bare::Seconds).map_err(|e| e.to_string());
    if let Ok(d) = &core {
        assert!(*d <= MAX_DURATION, "{text:?}");
    }
    assert_eq!(flag_duration(text), core, "flags vs core on {text:?}");
    assert_eq!(
        scenario::parse_duration(text),
        core.clone().map(duration::whole_seconds),
        "scenarios vs core on {text:?}"
    );
    let strict = duration::parse(text, Bare::Refused).map_err(|e| e.to_string());
    assert_eq!(
        nodepools::parse_duration(text, false),
        strict.map(|d| nodepools::Duration::Seconds(duration::whole_seconds(d))),
        "NodePools vs core on {text:?}"
    );
    core.is_ok()
}

#[test]
fn fuzz_durations() {
    for seed in [
        "90s",
        "1h30m",
        "1.5h",
        "90",
        "1e23",
        "99999999999999999h",
        "inf",
    ] {
        check_duration(seed);
    }
    let strategy = prop_oneof!["\\PC{0,32}", "[0-9.smhd -]{0,24}", wild_number()];
    fuzz("durations", strategy, |text| check_duration(&text));
}

// ---------------------------------------------------------------------------------------------
// Pod translation (the controller's entry for every pod it watches).

fn check_pod_json(json: &str) -> bool {
    let Ok(pod) = serde_json::from_str::<k8s_openapi::api::core::v1::Pod>(json) else {
        return false;
    };
    let Ok(p) = translate::pod(&pod) else {
        return false;
    };
    for (name, v) in p.requests.iter() {
        assert!(v >= 0, "{name} = {v} from {json}");
    }
    true
}

fn pod_json() -> impl Strategy<Value = String> {
    let requests = || {
        let resource = prop_oneof![
            Just("cpu"),
            Just("memory"),
            Just("nvidia.com/gpu"),
            Just("ephemeral-storage"),
            Just("hugepages-2Mi"),
            Just("example.com/foo"),
        ];
        prop::collection::btree_map(resource, mostly(&["500m", "1", "2", "2Gi", "0"]), 0..4)
    };
    let op = prop::sample::select(&["In", "In", "NotIn", "Gt", "Lt", "Exists", "Near"][..]);
    (
        requests(),
        requests(),
        prop::option::weighted(0.2, mostly(&["500", "250", "1000"])),
        op,
        prop::collection::vec(mostly(&["1", "2", "8"]), 0..3),
        prop::option::weighted(0.3, any::<i32>()),
        mostly(&["100m", "0", "64Mi"]),
    )
        .prop_map(|(req, init, share, op, values, skew, overhead)| {
            serde_json::json!({
                "metadata": {
                    "name": "p", "namespace": "default",
                    "annotations": share.map(|s| serde_json::json!({"gpu-autoscaler.dev/gpu-share": s}))
                },
                "spec": {
                    "containers": [{"name": "c", "resources": {"requests": req, "limits": req}}],
                    "initContainers": [{"name": "i", "resources": {"requests": init}}],
                    "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [{"matchExpressions": [
                            {"key": "nvidia.com/gpu.count", "operator": op, "values": values}
                        ]}]
                    }}},
                    "topologySpreadConstraints": skew.map(|s| serde_json::json!([{
                        "maxSkew": s, "topologyKey": "topology.kubernetes.io/zone",
                        "whenUnsatisfiable": "DoNotSchedule"
                    }])),
                    "overhead": {"cpu": overhead}
                }
            })
            .to_string()
        })
}

#[test]
fn fuzz_pod_translation() {
    check_pod_json(r#"{"metadata":{"name":"p"},"spec":{"containers":[{"name":"c"}]}}"#);
    fuzz(
        "pod translation",
        prop_oneof!["\\PC{0,64}", pod_json()],
        |json| check_pod_json(&json),
    );
}

// ---------------------------------------------------------------------------------------------
// NodePool files (validation and conversion into the core's pool).

fn check_nodepools(text: &str) -> bool {
    let Ok(pools) = nodepools::load_nodepools(text) else {
        return false;
    };
    let catalog = Arc::new(providers::catalog::default_catalog());
    let mut converted = false;
    for p in pools {
        if let Ok(pool) = p.to_core(catalog.clone()) {
            let d = &pool.disruption;
            assert!(d.unneeded_s >= 0 && d.consolidate_after_s >= 0, "{text}");
            assert!(d.gpu_utilization_threshold.is_finite(), "{text}");
            converted = true;
        }
    }
    converted
}

fn nodepool_yaml() -> impl Strategy<Value = String> {
    (
        mostly(&["100", "1000Gi", "64"]),
        mostly(&["30s", "Never", "1h30m", "1.5h", "0s"]),
        mostly(&["10m", "1h", "250ms", "2d"]),
        mostly(&["0.5", "0", "1"]),
        mostly(&["10", "50", "100"]),
    )
        .prop_map(|(limit, after, unneeded, threshold, weight)| {
            format!(
                "apiVersion: gpu-autoscaler.dev/v1alpha1\nkind: NodePool\nmetadata: {{name: p}}\n\
                 spec:\n  template: {{requirements: []}}\n  weight: {weight}\n  limits: {{memory: {limit}, nvidia.com/gpu: {limit}}}\n  \
                 disruption:\n    consolidateAfter: \"{after}\"\n    unneededTime: \"{unneeded}\"\n    \
                 gpuUtilizationThreshold: {threshold}\n"
            )
        })
}

#[test]
fn fuzz_nodepool_files() {
    for (_, text) in corpus("nodepools") {
        check_nodepools(&text);
    }
    fuzz(
        "NodePool files",
        prop_oneof!["\\PC{0,64}", nodepool_yaml()],
        |text| check_nodepools(&text),
    );
}

// ---------------------------------------------------------------------------------------------
// Scenario files: parsed, then generated with a small pod budget.

const FUZZ_MAX_PODS: usize = 20_000;

fn check_scenario(path: &Path, text: &str) -> bool {
    let Ok(s) = Scenario::parse(path, text) else {
        return false;
    };
    assert!(s.duration_s >= 0 && s.duration_s <= MAX_DURATION.as_secs() as i64);
    let c = &s.cluster;
    assert!(c.spot_interruptions_per_hour.is_finite() && c.spot_interruptions_per_hour >= 0.0);
    for v in [
        c.registration_s,
        c.device_plugin_s,
        c.launch_cpu_s,
        c.launch_gpu_s,
    ] {
        assert!((0..=MAX_DURATION.as_secs() as i64).contains(&v), "{text}");
    }
    match workload::generate(&s, s.seed, s.duration_s.min(3600), FUZZ_MAX_PODS) {
        Ok(w) => assert!(w.pods.len() <= FUZZ_MAX_PODS),
        Err(SimError::TooManyPods { .. }) => {}
        Err(e) => panic!("unexpected generation error {e}"),
    }
    true
}

fn scenario_yaml() -> impl Strategy<Value = String> {
    (
        mostly(&["2h", "30m", "1h30m", "1.5h", "5400"]),
        mostly(&["0", "0.1", "2"]),
        mostly(&["20s", "1m", "0"]),
        mostly(&["3", "10", "0"]),
        mostly(&["2", "4", "1"]),
        mostly(&["10", "1", "60"]),
        prop::sample::select(&["perHour", "every"][..]),
    )
        .prop_map(|(dur, spot, reg, count, size, rate, kind)| {
            format!(
                "name: fuzz\nduration: {dur}\ncatalog: aws\ncluster:\n  spotInterruptionsPerHour: {spot}\n  \
                 registration: {reg}\npools:\n  - name: cpu\n    families: [m6i]\nworkloads:\n  \
                 - deployment:\n      name: web\n      replicas: [{{at: 0, count: {count}}}]\n      \
                 pod: {{nodePool: cpu, cpu: 500m, memory: 1Gi}}\n  \
                 - gangs:\n      name: train\n      size: {size}\n      arrivals: {{{kind}: {rate}}}\n      \
                 duration: {{fixed: {dur}}}\n      pod: {{nodePool: cpu, cpu: {rate}, memory: 1Gi}}\n"
            )
        })
}

#[test]
fn fuzz_scenario_files() {
    for (path, text) in corpus("scenarios") {
        check_scenario(&path, &text);
    }
    check_scenario(Path::new("default.yaml"), scenario::DEFAULT_SCENARIO_YAML);
    fuzz(
        "scenario files",
        prop_oneof!["\\PC{0,64}", scenario_yaml()],
        |text| check_scenario(Path::new("fuzz.yaml"), &text),
    );
}

// ---------------------------------------------------------------------------------------------
// Trace rows: openb pod lists and the DLRM trace, through the loaders that build pods.

const OPENB_HEADER: &str = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,\
                            creation_time,deletion_time,scheduled_time\n";
const DLRM_HEADER: &str = "instance_sn,role,app_name,cpu_request,gpu_request,memory_request,creation_time,deletion_time\n";

fn check_trace(dir: &Path, text: &str) -> bool {
    let file = dir.join("trace.csv");
    std::fs::write(&file, text).expect("write trace");
    let o = OpenbOptions {
        compression: 1.0,
        fgd_share: None,
        fgd_interval_s: 1.0,
        reference_nodes: None,
        seed: 1,
    };
    let mut accepted = false;
    let loaded = [
        openb_workload::load(&file, &o, &[]),
        openb_workload::load_dlrm(&file, 1.0),
    ];
    for (w, horizon) in loaded.into_iter().flatten() {
        assert!(
            horizon <= 2 * MAX_DURATION.as_secs() as i64 + 3601,
            "{text}"
        );
        for t in &w.templates {
            assert!(t.requests.get("memory") >= 0 && t.requests.get("cpu") >= 0);
        }
        accepted |= !w.pods.is_empty();
    }
    let _ = traces::openb::parse_nodes(&file, text);
    accepted
}

fn openb_row() -> impl Strategy<Value = String> {
    (
        (
            mostly(&["12000", "0", "6000"]),
            mostly(&["16384", "0"]),
            mostly(&["1", "0", "8"]),
            mostly(&["1000", "460", "0"]),
        ),
        prop::sample::select(&["", "V100M16|T4", "A100", "G2"][..]),
        (
            mostly(&["0", "427061"]),
            mostly(&["", "12537496"]),
            mostly(&["", "0"]),
        ),
    )
        .prop_map(
            |((cpu, mem, n, milli), spec, (created, deleted, scheduled))| {
                format!(
                    "pod,{cpu},{mem},{n},{milli},{spec},LS,Running,{created},{deleted},{scheduled}"
                )
            },
        )
}

fn dlrm_row() -> impl Strategy<Value = String> {
    (
        prop::sample::select(&["HN", "CN"][..]),
        mostly(&["12", "64", "0.5"]),
        mostly(&["1", "0", "8"]),
        mostly(&["120.0", "320"]),
        mostly(&["", "475.00000000000006"]),
        mostly(&["", "900"]),
    )
        .prop_map(|(role, cpu, gpu, mem, created, deleted)| {
            format!("i,{role},app_0,{cpu},{gpu},{mem},{created},{deleted}")
        })
}

#[test]
fn fuzz_trace_rows() {
    let dir = tempfile::tempdir().expect("temporary directory");
    for (_, text) in corpus("traces") {
        check_trace(dir.path(), &text);
    }
    let rows = |row: BoxedStrategy<String>| {
        prop::collection::vec(prop_oneof![1 => "\\PC{0,40}", 6 => row], 1..4)
    };
    let strategy = prop_oneof![
        rows(openb_row().boxed()).prop_map(|r| (OPENB_HEADER, r)),
        rows(dlrm_row().boxed()).prop_map(|r| (DLRM_HEADER, r)),
    ];
    fuzz("trace rows", strategy, |(header, rows)| {
        let text = format!("{header}{}\n", rows.join("\n"));
        check_trace(dir.path(), &text)
    });
}

// ---------------------------------------------------------------------------------------------
// Provider settings files.

fn check_settings(text: &str) -> bool {
    let mut accepted = false;
    if let Ok(s) = provider_aws::AwsSettings::from_yaml(text) {
        assert!(s.vm_memory_overhead_percent.is_finite(), "{text}");
        assert!(s.on_demand_prices.values().all(|p| p.is_finite()));
        accepted = true;
    }
    if let Ok(s) = provider_gcp::GcpSettings::from_yaml(text) {
        assert!(s.on_demand_prices.values().all(|p| p.is_finite()));
        assert!(s.spot_prices.values().all(|p| p.is_finite()));
        accepted = true;
    }
    accepted
}

fn settings_yaml() -> impl Strategy<Value = String> {
    let aws = (
        mostly(&["10", "0", "7.5"]),
        mostly(&["1.006", "0.5"]),
        mostly(&["3600", "0"]),
        mostly(&["5", "1"]),
        mostly(&["200", "10000"]),
    )
        .prop_map(|(overhead, price, ttl, attempts, ms)| {
            format!(
                "vm_memory_overhead_percent: {overhead}\non_demand_prices: {{g5.xlarge: {price}}}\n\
                 catalog_ttl_s: {ttl}\nretry: {{max_attempts: {attempts}, base_delay_ms: {ms}, \
                 max_delay_ms: {ms}}}\ntimeouts: {{connect_ms: {ms}, attempt_ms: {ms}}}\n"
            )
        });
    let gcp = (
        mostly(&["1.006", "0.5"]),
        mostly(&["0.3", "2"]),
        mostly(&["3600", "0"]),
        mostly(&["5", "1"]),
        mostly(&["200", "10000"]),
    )
        .prop_map(|(price, spot, ttl, attempts, ms)| {
            format!(
                "region: us-east4\nproject: p\non_demand_prices: {{a2-highgpu-1g: {price}}}\n\
                 spot_prices: {{a2-highgpu-1g: {spot}}}\ncatalog_ttl_s: {ttl}\n\
                 retry: {{max_attempts: {attempts}, base_delay_ms: {ms}, max_delay_ms: {ms}}}\n\
                 timeouts: {{attempt_ms: {ms}, operation_s: {ms}, poll_ms: {ms}}}\n"
            )
        });
    prop_oneof![aws, gcp]
}

#[test]
fn fuzz_provider_settings() {
    for (_, text) in corpus("settings") {
        check_settings(&text);
    }
    fuzz(
        "provider settings",
        prop_oneof!["\\PC{0,64}", settings_yaml()],
        |text| check_settings(&text),
    );
}

// ---------------------------------------------------------------------------------------------
// ProvisioningRequest parameters and pod counts (checked from the spec before anything is built).

/// Validates a request read from `json`: never panics; an accepted request has parameters
/// that read back as what they say and a pod count within the limit; a refusal names the
/// parameter or field. Returns whether the request was accepted.
fn check_provreq(json: &str) -> bool {
    use autoscaler::controller::provreq::{self, ProvisioningRequest, Settings};
    let Ok(pr) = serde_json::from_str::<ProvisioningRequest>(json) else {
        return false;
    };
    let settings = Settings::default();
    match provreq::validate(&pr, &settings) {
        Ok(()) => {
            assert!(provreq::total_pods(&pr) <= settings.max_pods, "{json}");
            let booking = provreq::booking_seconds(&pr, &settings);
            assert!(booking >= 0, "{json}: booking {booking}");
            if let Some(v) = pr.spec.parameters.get(provreq::PARAM_BOOKING) {
                assert_eq!(v.trim().parse::<i64>().ok(), Some(booking), "{json}");
            }
            let no_retry = provreq::no_retry(&pr);
            let said = pr.spec.parameters.get(provreq::PARAM_NO_RETRY);
            assert_eq!(
                no_retry,
                said.is_some_and(|v| v.eq_ignore_ascii_case("true")),
                "{json}"
            );
            true
        }
        Err((reason, message)) => {
            assert!(
                [
                    provreq::PARAM_BOOKING,
                    provreq::PARAM_VALID_UNTIL,
                    provreq::PARAM_NO_RETRY,
                    "spec.podSets",
                ]
                .iter()
                .any(|k| message.contains(k)),
                "{reason}: {message} names nothing ({json})"
            );
            false
        }
    }
}

fn provreq_json() -> impl Strategy<Value = String> {
    let value = prop_oneof![
        3 => (0..1_000_000i64).prop_map(|n| n.to_string()),
        1 => wild_number(),
        2 => mostly(&["true", "false", "TRUE", "maybe", "", " 600 ", "-5", "abc"]),
    ];
    let key = mostly(&[
        "ValidUntilSeconds",
        "BookingDurationSeconds",
        "noRetry",
        "other",
    ]);
    let count = prop_oneof![
        1 => any::<i32>(),
        6 => 0..20i32,
        1 => Just(i32::MAX),
        1 => Just(i32::MIN),
        1 => Just(-1)
    ];
    (
        proptest::collection::btree_map(key, value, 0..4),
        proptest::collection::vec(count, 0..4),
    )
        .prop_map(|(params, counts)| {
            let sets: Vec<serde_json::Value> = counts
                .iter()
                .map(|c| serde_json::json!({"podTemplateRef": {"name": "t"}, "count": c}))
                .collect();
            serde_json::json!({
                "apiVersion": "autoscaling.x-k8s.io/v1",
                "kind": "ProvisioningRequest",
                "metadata": {"name": "r", "namespace": "default"},
                "spec": {
                    "provisioningClassName": "best-effort-atomic-scale-up.autoscaling.x-k8s.io",
                    "podSets": sets,
                    "parameters": params,
                }
            })
            .to_string()
        })
}

#[test]
fn fuzz_provisioning_request_parameters() {
    // The issue's cases are refused naming the parameter; the same request with good values
    // is accepted (so the refusals are the parameters' doing, not a request that never parsed).
    let request = |k: &str, v: &str| {
        let json = serde_json::json!({
            "metadata": {"name": "r"},
            "spec": {"provisioningClassName": "x", "podSets": [{"podTemplateRef": {"name": "t"}, "count": 1}],
                     "parameters": {k: v}}
        })
        .to_string();
        assert!(
            serde_json::from_str::<autoscaler::controller::provreq::ProvisioningRequest>(&json)
                .is_ok(),
            "{json}"
        );
        json
    };
    for (k, bad, good) in [
        ("ValidUntilSeconds", "-5", "3600"),
        ("BookingDurationSeconds", "abc", "600"),
        ("noRetry", "maybe", "true"),
    ] {
        assert!(!check_provreq(&request(k, bad)), "{k}={bad} accepted");
        assert!(check_provreq(&request(k, good)), "{k}={good} refused");
    }
    fuzz(
        "provisioning request parameters",
        prop_oneof!["\\PC{0,64}", provreq_json()],
        |json| check_provreq(&json),
    );
}
